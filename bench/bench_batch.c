/*
 * bench_batch.c - the CUDA backend's dynamic batcher without HTTP: 64 threads each analysing
 * the same 10-second float32 strip (the UCR ECG at 250 Hz, as bench_strips.sh posts it) over
 * and over through ecg_engine_analyze_bytes on one engine, as the service's workers do, for
 * several lane counts (batchers per device: 1, 2, 4, 8) in one process. Prints analyses per
 * second, the process's CPU time per analysis (getrusage: the threads' own work plus the
 * batchers') and the mean batch: the ceiling of the CUDA backend's batched path on short
 * strips, with no HTTP in front of it (what the service's HTTP threads and workers add is
 * bench_strips.sh's). ECG_CUDA_BATCH_TIMES=1 adds each batcher's time by step.
 *
 * One "RESULT name=batch ..." line per setting. Without a CUDA device it says so and exits 0
 * (bench/run.sh runs every benchmark). Environment: BENCH_THREADS (default 64), BENCH_SECONDS
 * per setting (default 3), BENCH_LANES (default "1 2 4 8"), ECG_SHARED_DATA (default
 * ../shared/data). Run from the repository root (models/default.ecgm).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ecg.h"
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

#define MAX_THREADS 256

struct shared {
    struct ecg_engine *engine;
    const float *body;
    size_t len;             /* bytes */
    pthread_barrier_t *start;
    atomic_bool stop;
    atomic_ulong done;
    atomic_int failed;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + 1e-6 * (double)r.ru_utime.tv_usec +
           (double)r.ru_stime.tv_sec + 1e-6 * (double)r.ru_stime.tv_usec;
}

static void *analyse_loop(void *arg)
{
    struct shared *s = arg;
    const struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
    pthread_barrier_wait(s->start);
    while (!atomic_load(&s->stop)) {
        struct ecg_error err = {0};
        struct ecg_result *res = NULL;
        if (ecg_engine_analyze_bytes(s->engine, s->body, s->len, &opts, &res, &err) != ECG_OK) {
            fprintf(stderr, "bench_batch: %s\n", err.message);
            atomic_store(&s->failed, 1);
            return NULL;
        }
        ecg_result_free(res);
        atomic_fetch_add(&s->done, 1);
    }
    return NULL;
}

/* One setting: an engine with `lanes` batchers per device; 0, 1 on a failure, -1 with no
 * device. */
static int run_setting(struct ecg_model *model, unsigned threads, unsigned lanes,
                       double seconds, const float *body, size_t len)
{
    struct ecg_error err = {0};
    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CUDA, .model = model,
                                    .workers = threads, .device = -1, .max_batch = 64,
                                    .batch_window_us = 200, .batch_lanes = lanes};
    struct shared s = {.body = body, .len = len};
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t start;
    s.engine = ecg_engine_create(&cfg, &err);
    if (!s.engine) {
        printf("# bench_batch: no CUDA engine (%s): skipped\n", err.message);
        return -1;
    }
    /* warm-up: every context's buffers grown, graphs captured */
    for (int i = 0; i < 200; i++) {
        struct ecg_result *res = NULL;
        const struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
        if (ecg_engine_analyze_bytes(s.engine, body, len, &opts, &res, &err) != ECG_OK) {
            fprintf(stderr, "bench_batch: %s\n", err.message);
            ecg_engine_destroy(s.engine);
            return 1;
        }
        ecg_result_free(res);
    }
    pthread_barrier_init(&start, NULL, threads + 1);
    s.start = &start;
    for (unsigned t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, analyse_loop, &s);
#ifdef ECG_HAVE_CUDA
    struct cuda_batch_counts c0, c1;
    cuda_batch_counts(&c0);
#endif
    pthread_barrier_wait(&start);
    const double w0 = now_s(), u0 = cpu_s();
    const unsigned long n0 = atomic_load(&s.done);
    while (now_s() - w0 < seconds && !atomic_load(&s.failed)) {
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    const unsigned long n1 = atomic_load(&s.done);
    const double w1 = now_s(), u1 = cpu_s();
#ifdef ECG_HAVE_CUDA
    cuda_batch_counts(&c1);
#endif
    atomic_store(&s.stop, true);
    for (unsigned t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    ecg_engine_destroy(s.engine);
    if (atomic_load(&s.failed))
        return 1;
    const double n = (double)(n1 - n0);
    double mean_batch = 0;
#ifdef ECG_HAVE_CUDA
    if (c1.batches > c0.batches)
        mean_batch = (double)(c1.members - c0.members) / (double)(c1.batches - c0.batches);
#endif
    printf("10-s float32 strips, %u threads, %u lane(s): %.0f analyses/s, %.1f us CPU per "
           "analysis, mean batch %.1f\n",
           threads, lanes, n / (w1 - w0), 1e6 * (u1 - u0) / n, mean_batch);
    printf("RESULT name=batch threads=%u lanes=%u rps=%.0f cpu_us=%.1f mean_batch=%.2f\n",
           threads, lanes, n / (w1 - w0), 1e6 * (u1 - u0) / n, mean_batch);
    return 0;
}

int main(void)
{
    const char *data = getenv("ECG_SHARED_DATA");
    const char *env_threads = getenv("BENCH_THREADS"), *env_s = getenv("BENCH_SECONDS");
    const char *env_lanes = getenv("BENCH_LANES");
    unsigned threads = env_threads && atoi(env_threads) > 0 ? (unsigned)atoi(env_threads) : 64;
    double seconds = env_s && atof(env_s) > 0 ? atof(env_s) : 3.0;
    char path[512], lanes_list[128];
    struct ecg_error err = {0};
    struct ecg_signal ucr = {0};
    struct ecg_read_opts ucr_opts = {.format = ECG_FORMAT_CSV, .fs_hz = 250};
    struct ecg_model *model = NULL;
    int rc = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    snprintf(path, sizeof path, "%s/ucr/ecg50T.txt", data && *data ? data : "../shared/data");
    if (ecg_read_file(path, &ucr_opts, &ucr, &err) != ECG_OK)
        goto fail;
    if (ucr.n < 2500) {
        fprintf(stderr, "bench_batch: %s holds %zu samples, fewer than 10 s\n", path, ucr.n);
        goto out;
    }
    model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        goto fail;
    snprintf(lanes_list, sizeof lanes_list, "%s", env_lanes && *env_lanes ? env_lanes : "1 2 4 8");
    for (char *save = NULL, *tok = strtok_r(lanes_list, " ", &save); tok;
         tok = strtok_r(NULL, " ", &save)) {
        const unsigned lanes = (unsigned)atoi(tok);
        int r = run_setting(model, threads, lanes, seconds, ucr.samples, 2500 * sizeof(float));
        if (r < 0) { /* no device */
            rc = 0;
            goto out;
        }
        if (r)
            goto out;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "bench_batch: %s\n", err.message);
out:
    ecg_signal_free(&ucr);
    ecg_model_free(model);
    return rc;
}
