/*
 * bench_requests.c - the engine's cost of one short request on the CPU backend, without HTTP:
 * a 2-, 10- and 80-second strip (CSV bytes, as a client sends them) analysed with the shipped
 * model and rendered to the JSON answer, one thread, many times over. Prints microseconds per
 * request, requests/s of one core, the engine's own stage times, and how many heap allocations
 * one request makes (every malloc/calloc/realloc/aligned allocation of the process is counted
 * while the requests run: this program interposes them and forwards to glibc's).
 *
 * Data: the UCR ECG excerpt at 250 Hz and MIT-BIH record 101 at 360 Hz from ECG_SHARED_DATA
 * (default ../shared/data). Run from the repository root (models/default.ecgm).
 * Prints one "RESULT name=requests ..." line per strip.
 *
 * Then the 10-second strip from several threads at once (BENCH_THREADS, default 8), on an engine
 * that runs each analysis on its own pass and on one that batches them (ECG_BATCH_ANY: the
 * batcher's stage-by-stage runner, so the queue, the hand-offs and the wake-ups of the CUDA
 * backend's batched path are paid on the host as there): the process's CPU time and context
 * switches per request (getrusage), whose difference is the batcher's host cost per request.
 * One "RESULT name=requests_concurrent ..." line per engine.
 */
#include <math.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecg.h"

/* ---------------------------------------------------------------- allocation counter */

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

static atomic_ulong n_allocs;

void *malloc(size_t size)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_realloc(p, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    void *p = __libc_memalign(align, size);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

void free(void *p)
{
    __libc_free(p);
}

/* ---------------------------------------------------------------- the benchmark */

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n samples of sig from its start (tiled if shorter) as a CSV body, "%g" per line. */
static char *csv_body(const struct ecg_signal *sig, size_t n, size_t *len)
{
    char *body = malloc(n * 24 + 1);
    size_t used = 0;
    if (!body)
        return NULL;
    for (size_t i = 0; i < n; i++)
        used += (size_t)sprintf(body + used, "%g\n", (double)sig->samples[i % sig->n]);
    *len = used;
    return body;
}

/* Runs the strip `reps` times; prints and returns 0, or 1 on a failure. */
static int run_strip(struct ecg_engine *engine, const char *label, const char *body, size_t len,
                     double fs_hz, int reps)
{
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = fs_hz};
    struct ecg_error err = {0};
    struct ecg_timing sum = {0};
    size_t beats = 0, json_bytes = 0;
    unsigned long allocs = 0;
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        double t0 = cpu_now_s();
        unsigned long a0 = atomic_load(&n_allocs);
        for (int r = 0; r < reps; r++) {
            struct ecg_result *res = NULL;
            struct ecg_buf json = {0};
            if (ecg_engine_analyze_bytes(engine, body, len, &opts, &res, &err) != ECG_OK) {
                fprintf(stderr, "bench_requests: %s: %s\n", label, err.message);
                return 1;
            }
            ecg_result_write_json(res, engine, ECG_INCLUDE_ALL & ~ECG_INCLUDE_SUMMARY, &json);
            if (json.failed) {
                fprintf(stderr, "bench_requests: %s: JSON out of memory\n", label);
                return 1;
            }
            beats = res->n_beats;
            json_bytes = json.len;
            if (round == 0) {
                sum.read_ms += res->timing.read_ms;
                sum.resample_ms += res->timing.resample_ms;
                sum.filter_ms += res->timing.filter_ms;
                sum.detect_ms += res->timing.detect_ms;
                sum.embed_ms += res->timing.embed_ms;
                sum.encode_ms += res->timing.encode_ms;
                sum.total_ms += res->timing.total_ms;
            }
            ecg_buf_fini(&json);
            ecg_result_free(res);
        }
        double dt = cpu_now_s() - t0;
        allocs = atomic_load(&n_allocs) - a0;
        best = fmin(best, dt);
    }
    double us = 1e6 * best / reps;
    printf("%s: %.1f us per request (%.0f requests/s on one core), %zu beats, %zu JSON bytes, "
           "%.1f allocations per request; engine stages (us): read %.1f resample %.1f filter "
           "%.1f detect %.1f embed %.1f encode %.1f total %.1f\n",
           label, us, 1e6 / us, beats, json_bytes, (double)allocs / reps,
           1e3 * sum.read_ms / reps, 1e3 * sum.resample_ms / reps, 1e3 * sum.filter_ms / reps,
           1e3 * sum.detect_ms / reps, 1e3 * sum.embed_ms / reps, 1e3 * sum.encode_ms / reps,
           1e3 * sum.total_ms / reps);
    printf("RESULT name=requests strip=%s us=%.1f rps_1core=%.0f allocs=%.1f beats=%zu\n", label,
           us, 1e6 / us, (double)allocs / reps, beats);
    return 0;
}

/* ---------------------------------------------------------------- concurrent requests */

struct concurrent_run {
    struct ecg_engine *engine;
    const char *body;
    size_t len;
    double fs_hz;
    int reps;
    pthread_barrier_t *start;
    int failed;
    double read_ms, quality_ms, json_ms; /* sums over the thread's requests */
};

static void *concurrent_thread(void *arg)
{
    struct concurrent_run *run = arg;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = run->fs_hz};
    pthread_barrier_wait(run->start);
    for (int r = 0; r < run->reps; r++) {
        struct ecg_error err = {0};
        struct ecg_result *res = NULL;
        struct ecg_buf json = {0};
        if (ecg_engine_analyze_bytes(run->engine, run->body, run->len, &opts, &res, &err) !=
            ECG_OK) {
            fprintf(stderr, "bench_requests: concurrent: %s\n", err.message);
            run->failed = 1;
            return NULL;
        }
        struct timespec j0, j1;
        clock_gettime(CLOCK_MONOTONIC, &j0);
        ecg_result_write_json(res, run->engine, ECG_INCLUDE_ALL & ~ECG_INCLUDE_SUMMARY, &json);
        clock_gettime(CLOCK_MONOTONIC, &j1);
        run->json_ms += 1e3 * (double)(j1.tv_sec - j0.tv_sec) +
                        1e-6 * (double)(j1.tv_nsec - j0.tv_nsec);
        run->read_ms += res->timing.read_ms;
        run->quality_ms += res->timing.quality_ms;
        run->failed |= json.failed;
        ecg_buf_fini(&json);
        ecg_result_free(res);
    }
    return NULL;
}

static double timeval_s(struct timeval tv)
{
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* threads x reps analyses of body on a fresh engine (batched: through the batcher); prints the
 * process's CPU time, context switches and wall time per request. 0, or 1 on a failure. */
static int run_concurrent(struct ecg_model *model, bool batched, unsigned threads,
                          const char *body, size_t len, double fs_hz, int reps)
{
    struct ecg_error err = {0};
    /* batches of up to threads (2 for one thread: a batch of one still takes the hand-offs) */
    const unsigned max_batch = !batched ? 1 : threads > 1 ? threads : 2;
    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .model = model,
                                    .workers = threads, .max_batch = max_batch,
                                    .batch_window_us = 200};
    struct concurrent_run runs[64];
    pthread_t tid[64];
    pthread_barrier_t start;
    struct rusage r0, r1;
    struct timespec w0, w1;
    int failed = 0;
    double read_ms = 0, quality_ms = 0, json_ms = 0;
    if (batched)
        setenv("ECG_BATCH_ANY", "1", 1);
    struct ecg_engine *engine = ecg_engine_create(&cfg, &err);
    unsetenv("ECG_BATCH_ANY");
    if (!engine) {
        fprintf(stderr, "bench_requests: %s\n", err.message);
        return 1;
    }
    pthread_barrier_init(&start, NULL, threads + 1);
    for (unsigned t = 0; t < threads; t++) {
        runs[t] = (struct concurrent_run){engine, body, len, fs_hz, reps, &start, 0, 0, 0, 0};
        pthread_create(&tid[t], NULL, concurrent_thread, &runs[t]);
    }
    getrusage(RUSAGE_SELF, &r0);
    clock_gettime(CLOCK_MONOTONIC, &w0);
    pthread_barrier_wait(&start);
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        failed |= runs[t].failed;
        read_ms += runs[t].read_ms;
        quality_ms += runs[t].quality_ms;
        json_ms += runs[t].json_ms;
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    getrusage(RUSAGE_SELF, &r1);
    pthread_barrier_destroy(&start);
    ecg_engine_destroy(engine);
    if (failed)
        return 1;
    const double n = (double)threads * reps;
    const double cpu_us = 1e6 * (timeval_s(r1.ru_utime) + timeval_s(r1.ru_stime) -
                                 timeval_s(r0.ru_utime) - timeval_s(r0.ru_stime)) / n;
    const double csw = (double)(r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n;
    const double wall_us = 1e6 * ((double)(w1.tv_sec - w0.tv_sec) +
                                  1e-9 * (double)(w1.tv_nsec - w0.tv_nsec)) / n;
    const char *label = batched ? "batched" : "alone";
    printf("10s_250hz, %u threads, %s: %.1f us CPU per request, %.2f context switches per "
           "request, %.1f us wall per request; in the analysing thread (wall, us): read %.1f, "
           "quality (features, verdict, NN, HRV) %.1f, JSON %.1f\n", threads, label, cpu_us,
           csw, wall_us, 1e3 * read_ms / n, 1e3 * quality_ms / n, 1e3 * json_ms / n);
    printf("RESULT name=requests_concurrent engine=%s threads=%u cpu_us=%.1f csw=%.2f "
           "wall_us=%.1f\n", label, threads, cpu_us, csw, wall_us);
    return 0;
}

int main(void)
{
    const char *data = getenv("ECG_SHARED_DATA");
    char path[512];
    struct ecg_error err = {0};
    struct ecg_signal ucr = {0}, mit = {0};
    struct ecg_read_opts ucr_opts = {.format = ECG_FORMAT_CSV, .fs_hz = 250};
    struct ecg_read_opts mit_opts = {.format = ECG_FORMAT_WFDB};
    struct ecg_model *model = NULL;
    struct ecg_engine *engine = NULL;
    int rc = 1;
    snprintf(path, sizeof path, "%s/ucr/ecg50T.txt", data && *data ? data : "../shared/data");
    if (ecg_read_file(path, &ucr_opts, &ucr, &err) != ECG_OK)
        goto fail;
    snprintf(path, sizeof path, "%s/mitdb/101", data && *data ? data : "../shared/data");
    if (ecg_read_file(path, &mit_opts, &mit, &err) != ECG_OK)
        goto fail;
    model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        goto fail;
    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .model = model, .workers = 1};
    engine = ecg_engine_create(&cfg, &err);
    if (!engine)
        goto fail;
    static const struct {
        const char *label;
        int source; /* 0 UCR 250 Hz, 1 MIT-BIH 360 Hz */
        double seconds;
        int reps;
    } strips[] = {{"2s_250hz", 0, 2, 3000},  {"10s_250hz", 0, 10, 1000},
                  {"80s_250hz", 0, 80, 150}, {"10s_360hz", 1, 10, 1000}};
    for (size_t s = 0; s < sizeof strips / sizeof strips[0]; s++) {
        const struct ecg_signal *sig = strips[s].source ? &mit : &ucr;
        size_t len = 0, n = (size_t)(strips[s].seconds * sig->fs_hz);
        char *body = csv_body(sig, n, &len);
        if (!body)
            goto fail;
        int bad = run_strip(engine, strips[s].label, body, len, sig->fs_hz, strips[s].reps);
        free(body);
        if (bad)
            goto out;
    }
    {
        const char *env = getenv("BENCH_THREADS");
        unsigned threads = env && atoi(env) > 0 && atoi(env) <= 64 ? (unsigned)atoi(env) : 8;
        size_t len = 0;
        char *body = csv_body(&ucr, (size_t)(10 * ucr.fs_hz), &len);
        if (!body)
            goto fail;
        int bad = run_concurrent(model, false, threads, body, len, ucr.fs_hz, 400) ||
                  run_concurrent(model, true, threads, body, len, ucr.fs_hz, 400);
        free(body);
        if (bad)
            goto out;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "bench_requests: %s\n", err.message);
out:
    ecg_engine_destroy(engine);
    ecg_model_free(model);
    ecg_signal_free(&ucr);
    ecg_signal_free(&mit);
    return rc;
}
