/*
 * test_gpu_batch.c - the CUDA backend's dynamic batches (gpu/cuda_batch.cu) against each
 * analysis alone on the same device: tests/batch_parity.h's 64 concurrent requests of mixed
 * lengths, rates and formats, with the shipped model, batched by up to 64 within 2 ms, must
 * give the answers of the unbatched engine (--max-batch 1) byte for byte; then 64 requests of
 * one shape several times over, so that the batch contexts' fronts are captured as CUDA graphs
 * and replayed (ECG_CUDA_BATCH_GRAPHS=1, the default; the first test sets 0), then 64 requests
 * from two fixed strips (two beat counts) several times over, so that the backs (embed,
 * encode, the table's copy: a graph per beat count) are captured and replayed too, with the
 * same check. The batched engine has the default batchers per device (4: each batch takes every
 * fourth request); run-device.sh runs the quick mode again with ECG_CUDA_BATCH_LANES=1. Skips,
 * visibly, where there is no device.
 *
 * ECG_BATCH_TEST_MODEL may name another model file. ECG_GPU_DATA overrides the records' place;
 * ECG_GPU_QUICK=1 (compute-sanitizer) runs fewer rounds; ECG_GPU_ONLY=PATTERN runs the
 * matching tests alone (racecheck takes each test in a call of its own); ECG_PARITY_REQUESTS=N
 * sends N requests per round of one shape instead of 64 (racecheck on the graph test: it then
 * leaves out the closing mixed round).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ecg.h"
#include "batch_parity.h"
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

struct engines {
    struct ecg_model *model;
    struct ecg_engine *alone, *batched;
};

static struct ecg_engine *cuda_engine(struct ecg_model *model, unsigned max_batch,
                                      unsigned window_us)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = model, .workers = 4,
                                       .device = -1, .max_batch = max_batch,
                                       .batch_window_us = window_us};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        printf("# no CUDA engine: %s\n", err.message);
    return engine;
}

/* Both engines (graphs on or off in the batched one); false when there is no device. */
static bool engines_open(struct engines *e, bool graphs)
{
    struct ecg_error err = {0};
    const char *path = getenv("ECG_BATCH_TEST_MODEL");
    memset(e, 0, sizeof *e);
    e->model = ecg_model_load(path && *path ? path : "models/default.ecgm", &err);
    if (!e->model)
        fail_msg("model: %s", err.message);
    unsetenv("ECG_CUDA_BATCH");
    e->alone = cuda_engine(e->model, 1, 0);
    if (!e->alone) {
        ecg_model_free(e->model);
        return false;
    }
    assert_int_equal(setenv("ECG_CUDA_BATCH_GRAPHS", graphs ? "1" : "0", 1), 0);
    e->batched = cuda_engine(e->model, 64, 2000);
    unsetenv("ECG_CUDA_BATCH_GRAPHS");
    assert_non_null(e->batched);
    return true;
}

static void engines_close(struct engines *e)
{
    ecg_engine_destroy(e->batched);
    ecg_engine_destroy(e->alone);
    ecg_model_free(e->model);
}

static void test_cuda_batches_match_lone_answers(void **state)
{
    struct engines e;
    if (!engines_open(&e, false))
        skip();
    unsigned largest = parity_check(e.alone, e.batched, PARITY_MIXED);
    assert_true(largest >= 2 && largest <= 64);
    /* once more on the same engine: contexts and pinned memory reused across batches */
    const char *quick = getenv("ECG_GPU_QUICK");
    if (!(quick && *quick == '1'))
        assert_true(parity_check(e.alone, e.batched, PARITY_MIXED) >= 2);
    engines_close(&e);
}

static void test_cuda_batch_graphs_match_lone_answers(void **state)
{
#ifdef ECG_HAVE_CUDA
    struct engines e;
    struct cuda_batch_counts before, after;
    if (!engines_open(&e, true))
        skip();
    const char *quick = getenv("ECG_GPU_QUICK");
    const int rounds = quick && *quick == '1' ? 4 : 6;
    cuda_batch_counts(&before);
    for (int round = 0; round < rounds; round++)
        assert_true(parity_check(e.alone, e.batched, PARITY_UNIFORM) >= 2);
    for (int round = 0; round < rounds; round++)
        assert_true(parity_check(e.alone, e.batched, PARITY_REPEAT) >= 2);
    for (int round = 0; round < rounds; round++) /* no resampling (the model's rate) */
        assert_true(parity_check(e.alone, e.batched, PARITY_AT_250) >= 2);
    if (parity_requests() == PARITY_REQUESTS) /* mixed shapes after graphs exist (all 64) */
        (void)parity_check(e.alone, e.batched, PARITY_MIXED);
    cuda_batch_counts(&after);
    printf("# %llu batches of %llu analyses, %llu fronts captured, %llu replayed, %llu backs "
           "captured, %llu replayed, %llu batched short fronts of %llu analyses\n",
           after.batches - before.batches, after.members - before.members,
           after.captures - before.captures, after.replays - before.replays,
           after.back_captures - before.back_captures, after.back_replays - before.back_replays,
           after.small_fronts - before.small_fronts, after.small_members - before.small_members);
    /* the batched short fronts (gpu/cuda_small.cuh) ran, at both rates: every context's
     * record is whole from the first round of each shape on */
    assert_true(after.small_members > before.small_members);
    /* a context captures once its buffers have stopped growing (rounds 2-3): the quick mode
     * (compute-sanitizer) may end before it replays */
    if (rounds >= 6) {
        assert_true(after.captures > before.captures);
        assert_true(after.replays > before.replays);
        assert_true(after.back_captures > before.back_captures);
        assert_true(after.back_replays > before.back_replays);
    }
    engines_close(&e);
#else
    printf("# this build has no CUDA backend\n");
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_batches_match_lone_answers),
        cmocka_unit_test(test_cuda_batch_graphs_match_lone_answers),
    };
    const char *only = getenv("ECG_GPU_ONLY");
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
