/*
 * parity_engine.c - test_gpu_parity, end to end: a CUDA engine's results against a
 * CPU engine's on the records, one engine shared by threads, and engines on several devices.
 * Tolerances: test_gpu_parity.c.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parity.h"

#include "backend.h"
#include "ecg.h"
#include "model.h"

/* ---------------------------------------------------------------- end to end (engine) */

static void compare_results(const struct ecg_result *c, const struct ecg_result *g,
                            double threshold, size_t *mismatch)
{
    size_t miss = peak_mismatches(c->r_peak, c->n_beats, g->r_peak, g->n_beats);
    *mismatch += miss;
    if (miss)
        return;
    size_t k = c->n_beats, z = c->latent_dim;
    assert_memory_equal(c->onset, g->onset, k * sizeof(int64_t));
    assert_memory_equal(c->end, g->end, k * sizeof(int64_t));
    assert_memory_equal(c->kept, g->kept, k);
    assert_memory_equal(c->likeness, g->likeness, k * sizeof(float));
    assert_memory_equal(c->crest, g->crest, k * sizeof(float));
    for (size_t i = 0; i < k; i++) {
        if (!c->kept[i] || !c->score)
            continue;
        for (size_t d = 0; d < z; d++) {
            double a = c->latent[i * z + d], b = g->latent[i * z + d];
            if (!(fabs(a - b) <= fmax(1e-4 * fabs(a), 1e-5)))
                fail_msg("beat %zu latent %zu: gpu %.8g cpu %.8g", i, d, b, a);
        }
        if (!(fabs(c->score[i] - g->score[i]) <= fmax(1e-4 * fabs(c->score[i]), 1e-5)))
            fail_msg("beat %zu score: gpu %.8g cpu %.8g", i, g->score[i], c->score[i]);
        if (c->outlier[i] != g->outlier[i])
            assert_true(fabs(c->score[i] - threshold) < 1e-4);
    }
}

void test_engine_records(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_engine *cpu = engine_of(ECG_BACKEND_CPU, p->model);
    struct ecg_engine *gpu = engine_of(ECG_BACKEND_CUDA, p->model);
    assert_string_equal(ecg_engine_backend(gpu), "cuda");
    size_t beats = 0, miss = 0;
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        struct ecg_result *rc = NULL, *rg = NULL;
        struct ecg_error err = {0};
        read_record(records[r], &sig);
        assert_int_equal(ecg_engine_analyze(cpu, &sig, &rc, &err), ECG_OK);
        if (ecg_engine_analyze(gpu, &sig, &rg, &err) != ECG_OK)
            fail_msg("record %s on cuda: %s", records[r], err.message);
        size_t before = miss;
        compare_results(rc, rg, p->model->calib.threshold, &miss);
        printf("# engine record %s: %zu beats (cpu) %zu (gpu), %zu mismatched; cpu %.1f ms, "
               "gpu %.1f ms\n", records[r], rc->n_beats, rg->n_beats, miss - before,
               rc->timing.total_ms, rg->timing.total_ms);
        beats += rc->n_beats;
        ecg_result_free(rc);
        ecg_result_free(rg);
        ecg_signal_free(&sig);
    }
    printf("# engine totals: %zu beats, %zu mismatched\n", beats, miss);
    assert_true(miss * 2000 <= beats);
    ecg_engine_destroy(cpu);
    ecg_engine_destroy(gpu);
}

/* Several threads share one CUDA engine (one stream per worker context): each result must
 * equal the CPU's, whatever runs beside it. */
struct concurrent_job {
    struct ecg_engine *engine;
    const struct ecg_signal *sig;
    const struct ecg_result *expect;
    int rounds;
    size_t mismatched;
    int failures;
};

static void *concurrent_worker(void *arg)
{
    struct concurrent_job *job = arg;
    for (int r = 0; r < job->rounds; r++) {
        struct ecg_result *res = NULL;
        struct ecg_error err = {0};
        if (ecg_engine_analyze(job->engine, job->sig, &res, &err) != ECG_OK) {
            job->failures++;
            continue;
        }
        if (res->n_beats != job->expect->n_beats ||
            memcmp(res->r_peak, job->expect->r_peak, res->n_beats * sizeof(int64_t)) != 0 ||
            memcmp(res->score, job->expect->score, res->n_beats * sizeof(float)) != 0)
            job->mismatched++;
        ecg_result_free(res);
    }
    return NULL;
}

/* Runs the jobs on threads of their own; frees each job's expected result and signal; asserts
 * that every analysis succeeded with the expected result. what labels the printed line. */
static void run_concurrent(struct concurrent_job *jobs, int n, struct ecg_result **expect,
                           struct ecg_signal *sig, const char *what)
{
    pthread_t tid[8];
    size_t mismatched = 0;
    int failures = 0;
    assert_true(n <= 8);
    for (int t = 0; t < n; t++)
        assert_int_equal(pthread_create(&tid[t], NULL, concurrent_worker, &jobs[t]), 0);
    for (int t = 0; t < n; t++) {
        pthread_join(tid[t], NULL);
        mismatched += jobs[t].mismatched;
        failures += jobs[t].failures;
        ecg_result_free(expect[t]);
        ecg_signal_free(&sig[t]);
    }
    printf("# %s: %d threads x %d analyses on %s: %d failed, %zu differed\n", what, n,
           jobs[0].rounds, ecg_engine_device(jobs[0].engine), failures, mismatched);
    assert_int_equal(failures, 0);
    assert_int_equal(mismatched, 0);
}

void test_engine_concurrent(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    enum { THREADS = 4 };
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = p->model,
                                       .workers = THREADS, .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *gpu = ecg_engine_create(&config, &err);
    if (!gpu)
        fail_msg("engine: %s", err.message);
    struct ecg_signal sig[THREADS];
    struct ecg_result *expect[THREADS];
    struct concurrent_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&sig[t], 0, sizeof sig[t]);
        read_record(records[t * 5], &sig[t]);
        /* the reference: the same engine, alone (equal to the CPU per test_engine_records) */
        assert_int_equal(ecg_engine_analyze(gpu, &sig[t], &expect[t], &err), ECG_OK);
        jobs[t] = (struct concurrent_job){gpu, &sig[t], expect[t], quick() ? 2 : 6, 0, 0};
    }
    run_concurrent(jobs, THREADS, expect, sig, "concurrent, one engine");
    ecg_engine_destroy(gpu);
}

/*
 * Several GPUs (CUDA_VISIBLE_DEVICES decides which): an engine on every visible device spreads
 * its workers over them; analyses running concurrently on all of them, and an engine on the
 * second device alone, must give the first device's results exactly. Skips with one device.
 */
void test_multi_device(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    enum { THREADS = 4 };
    struct ecg_error err = {0};
    struct ecg_engine_config one = {.backend = ECG_BACKEND_CUDA, .model = p->model,
                                    .workers = 1, .device = 0};
    struct ecg_engine_config second = one, all = one;
    second.device = 1;
    all.device = -1;
    all.workers = THREADS;
    struct ecg_engine *e1 = ecg_engine_create(&second, &err);
    if (!e1) {
        printf("# SKIP: one CUDA device visible (%s)\n", err.message);
        skip();
    }
    struct ecg_engine *e0 = ecg_engine_create(&one, &err);
    struct ecg_engine *e_all = ecg_engine_create(&all, &err);
    if (!e0 || !e_all)
        fail_msg("engine: %s", err.message);
    printf("# devices: %s | first %s | second %s\n", ecg_engine_device(e_all),
           ecg_engine_device(e0), ecg_engine_device(e1));
    assert_non_null(strstr(ecg_engine_device(e_all), " x"));
    struct ecg_signal sig[THREADS];
    struct ecg_result *expect[THREADS];
    struct concurrent_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        struct ecg_result *r1 = NULL;
        memset(&sig[t], 0, sizeof sig[t]);
        read_record(records[t * 5 + 1], &sig[t]);
        assert_int_equal(ecg_engine_analyze(e0, &sig[t], &expect[t], &err), ECG_OK);
        assert_int_equal(ecg_engine_analyze(e1, &sig[t], &r1, &err), ECG_OK);
        assert_int_equal(r1->n_beats, expect[t]->n_beats);
        assert_memory_equal(r1->r_peak, expect[t]->r_peak, r1->n_beats * sizeof(int64_t));
        assert_memory_equal(r1->latent, expect[t]->latent,
                            r1->n_beats * r1->latent_dim * sizeof(float));
        assert_memory_equal(r1->score, expect[t]->score, r1->n_beats * sizeof(float));
        ecg_result_free(r1);
        jobs[t] = (struct concurrent_job){e_all, &sig[t], expect[t], quick() ? 2 : 6, 0, 0};
    }
    run_concurrent(jobs, THREADS, expect, sig, "multi-device");
    ecg_engine_destroy(e_all);
    ecg_engine_destroy(e1);
    ecg_engine_destroy(e0);
}
