/*
 * test_batch.c - the dynamic batcher (engine/batch.c) without a device: the CPU backend batched
 * through the batcher's stage-by-stage runner (ECG_BATCH_ANY=1), so that the queue, the window,
 * the shared plans, the fallbacks to a pass of its own and the answers are checked on every
 * machine (and under the sanitizers in CI). tests/batch_parity.h describes the check; the CUDA
 * backend's own batches run the same check in tests/gpu/test_gpu_batch.c.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ecg.h"
#include "batch_parity.h"

static struct ecg_engine *engine_deep(struct ecg_model *model, unsigned max_batch,
                                      unsigned window_us, unsigned depth)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .model = model, .workers = 4,
                                       .max_batch = max_batch, .batch_window_us = window_us,
                                       .batch_depth = depth};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

/* The batcher's default depth (ECG_BATCH_DEPTH_DEFAULT batches in flight per lane). */
static struct ecg_engine *engine_with(struct ecg_model *model, unsigned max_batch,
                                      unsigned window_us)
{
    return engine_deep(model, max_batch, window_us, 0);
}

/* The shipped model, with the CPU backend batching (ECG_BATCH_ANY=1, unset by the test). */
static struct ecg_model *batching_model(void)
{
    struct ecg_error err = {0};
    struct ecg_model *model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        fail_msg("model: %s", err.message);
    assert_int_equal(setenv("ECG_BATCH_ANY", "1", 1), 0);
    return model;
}

/* 64 concurrent requests, batched by up to 16 within 20 ms, against each alone; with the
 * shipped model, so that the scores go through the batch too. */
static void test_batched_answers_are_the_lone_ones(void **state)
{
    struct ecg_model *model = batching_model();
    struct ecg_engine *alone = engine_with(model, 1, 0);
    struct ecg_engine *batched = engine_with(model, 16, 20000);
    unsigned largest = parity_check(alone, batched, PARITY_MIXED);
    assert_true(largest >= 2 && largest <= 16);
    largest = parity_check(alone, batched, PARITY_UNIFORM);
    assert_true(largest >= 2 && largest <= 16);
    largest = parity_check(alone, batched, PARITY_REPEAT);
    assert_true(largest >= 2 && largest <= 16);
    largest = parity_check(alone, batched, PARITY_AT_250);
    assert_true(largest >= 2 && largest <= 16);
    ecg_engine_destroy(batched);
    /* the batches that wait while any analysis is on its way (ECG_BATCH_WAIT=all) */
    assert_int_equal(setenv("ECG_BATCH_WAIT", "all", 1), 0);
    batched = engine_with(model, 16, 20000);
    unsetenv("ECG_BATCH_WAIT");
    largest = parity_check(alone, batched, PARITY_UNIFORM);
    assert_true(largest >= 2 && largest <= 16);
    ecg_engine_destroy(batched);
    ecg_engine_destroy(alone);
    ecg_model_free(model);
    unsetenv("ECG_BATCH_ANY");
}

/* A lane that keeps one batch, or up to four, in flight (the next collected and launched before
 * the one before is handed back) gives every analysis its lone answer, each exactly once, with
 * a short window and a long one. */
static void test_batches_in_flight_answer_as_alone(void **state)
{
    struct ecg_model *model = batching_model();
    struct ecg_engine *alone = engine_with(model, 1, 0);
    const unsigned depths[] = {1, 3, ECG_BATCH_DEPTH_MAX};
    for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
        struct ecg_engine *batched = engine_deep(model, 8, i == 1 ? 200 : 20000, depths[i]);
        unsigned largest = parity_check(alone, batched, PARITY_MIXED);
        assert_true(largest >= 1 && largest <= 8);
        largest = parity_check(alone, batched, PARITY_REPEAT);
        assert_true(largest >= 1 && largest <= 8);
        ecg_engine_destroy(batched);
    }
    ecg_engine_destroy(alone);
    ecg_model_free(model);
    unsetenv("ECG_BATCH_ANY");
}

/* Without ECG_BATCH_ANY a backend that cannot batch keeps every analysis on its own pass, and
 * ECG_CUDA_BATCH=0 turns batching off everywhere. */
static void test_batching_needs_a_batching_backend(void **state)
{
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
    struct ecg_result *result = NULL;
    assert_int_equal(ecg_read_file(ECG_TEST_DATA "/mitdb_100s.csv", &opts, &sig, &err), ECG_OK);
    unsetenv("ECG_BATCH_ANY");
    struct ecg_engine *engine = engine_with(NULL, 8, 100);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &result, &err), ECG_OK);
    assert_int_equal(result->timing.batch_size, 0);
    ecg_result_free(result);
    ecg_engine_destroy(engine);

    assert_int_equal(setenv("ECG_BATCH_ANY", "1", 1), 0);
    engine = engine_with(NULL, 8, 100);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &result, &err), ECG_OK);
    assert_int_equal(result->timing.batch_size, 1); /* alone in its batch, but batched */
    assert_true(result->n_beats > 100);
    ecg_result_free(result);
    ecg_engine_destroy(engine);

    assert_int_equal(setenv("ECG_CUDA_BATCH", "0", 1), 0);
    engine = engine_with(NULL, 8, 100);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &result, &err), ECG_OK);
    assert_int_equal(result->timing.batch_size, 0);
    ecg_result_free(result);
    ecg_engine_destroy(engine);
    unsetenv("ECG_CUDA_BATCH");
    unsetenv("ECG_BATCH_ANY");
    ecg_signal_free(&sig);
}

struct window_run {
    struct ecg_engine *engine;
    const struct ecg_signal *sig;
    pthread_barrier_t *start;
    enum ecg_status status;
    struct ecg_result *result;
};

static void *window_thread(void *arg)
{
    struct window_run *run = arg;
    struct ecg_error err = {0};
    pthread_barrier_wait(run->start);
    run->status = ecg_engine_analyze(run->engine, run->sig, &run->result, &err);
    return NULL;
}

/* A batch starts as soon as nobody else is on the way to it: a lone analysis, and analyses
 * that have all arrived, never sit out a (60-s) window; each is handed back with its batch's
 * size. */
static void test_batches_do_not_wait_for_nobody(void **state)
{
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
    struct window_run runs[4];
    pthread_t threads[4];
    pthread_barrier_t start;
    assert_int_equal(ecg_read_file(ECG_TEST_DATA "/mitdb_100s.csv", &opts, &sig, &err), ECG_OK);
    assert_int_equal(setenv("ECG_BATCH_ANY", "1", 1), 0);
    struct ecg_engine *engine = engine_with(NULL, 8, 60u * 1000u * 1000u);
    unsetenv("ECG_BATCH_ANY");
    assert_int_equal(pthread_barrier_init(&start, NULL, 4), 0);
    for (int round = 0; round < 2; round++) {
        const int n = round == 0 ? 1 : 4; /* alone, then four at once */
        pthread_barrier_t *barrier = &start;
        pthread_barrier_t one;
        if (n == 1) {
            assert_int_equal(pthread_barrier_init(&one, NULL, 1), 0);
            barrier = &one;
        }
        for (int i = 0; i < n; i++) {
            runs[i] = (struct window_run){.engine = engine, .sig = &sig, .start = barrier};
            assert_int_equal(pthread_create(&threads[i], NULL, window_thread, &runs[i]), 0);
        }
        for (int i = 0; i < n; i++) {
            pthread_join(threads[i], NULL);
            assert_int_equal(runs[i].status, ECG_OK);
            assert_true(runs[i].result->timing.batch_size >= 1);
            assert_true(runs[i].result->timing.batch_size <= (unsigned)n);
            /* far below the window: the batch did not wait it out */
            assert_true(runs[i].result->timing.queue_ms < 30000.0);
            ecg_result_free(runs[i].result);
        }
        if (n == 1)
            pthread_barrier_destroy(&one);
    }
    pthread_barrier_destroy(&start);
    ecg_engine_destroy(engine);
    ecg_signal_free(&sig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_answers_are_the_lone_ones),
        cmocka_unit_test(test_batches_in_flight_answer_as_alone),
        cmocka_unit_test(test_batching_needs_a_batching_backend),
        cmocka_unit_test(test_batches_do_not_wait_for_nobody),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
