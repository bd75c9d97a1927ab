/*
 * test_gpu_batch.c - the CUDA backend's dynamic batches (gpu/cuda_batch.cu) against each
 * analysis alone on the same device: tests/batch_parity.h's 64 concurrent requests of mixed
 * lengths, rates and formats, with the shipped model, batched by up to 64 within 2 ms, must
 * give the answers of the unbatched engine (--max-batch 1) byte for byte; then 64 requests of
 * one shape several times over, so that the batch contexts' fronts are captured as CUDA graphs
 * and replayed (ECG_CUDA_BATCH_GRAPHS=1, the default; the first test sets 0), then 64 requests
 * from two fixed strips (two beat counts) several times over, so that the backs (embed,
 * encode, the table's copy: a graph per beat count) are captured and replayed too, with the
 * same check: as shipped (the short strips' fronts and backs batched, gpu/cuda_small.cuh), with
 * batched fronts alone (ECG_CUDA_BATCH_SMALL=front) and with neither (=0). As shipped, a
 * batched pass whose shape ran before replays as one graph (struct pass_graph): the test
 * asserts that some were captured and replayed. The batched engine has the default batchers
 * per device (2: each batch takes every other request); run-device.sh runs the quick mode again
 * with ECG_CUDA_BATCH_LANES=1. Skips, visibly, where there is no device.
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

/* Both engines (graphs on or off in the batched one; small: ECG_CUDA_BATCH_SMALL for it, NULL
 * for the default); false when there is no device. */
static bool engines_open(struct engines *e, bool graphs, const char *small)
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
    if (small)
        assert_int_equal(setenv("ECG_CUDA_BATCH_SMALL", small, 1), 0);
    e->batched = cuda_engine(e->model, 64, 2000);
    unsetenv("ECG_CUDA_BATCH_GRAPHS");
    unsetenv("ECG_CUDA_BATCH_SMALL");
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
    if (!engines_open(&e, false, NULL))
        skip();
    unsigned largest = parity_check(e.alone, e.batched, PARITY_MIXED);
    assert_true(largest >= 2 && largest <= 64);
    /* once more on the same engine: contexts and pinned memory reused across batches */
    const char *quick = getenv("ECG_GPU_QUICK");
    if (!(quick && *quick == '1'))
        assert_true(parity_check(e.alone, e.batched, PARITY_MIXED) >= 2);
    engines_close(&e);
}

#ifdef ECG_HAVE_CUDA
#define GRAPH_ROUNDS_MORE 24

/* Rounds of the one-shape requests (graphs on; small: ECG_CUDA_BATCH_SMALL), each against the
 * lone answers; *grown: what the batch counters grew by. Returns the rounds, 0: no device. */
static int graph_rounds(const char *small, struct cuda_batch_counts *grown)
{
    struct engines e;
    struct cuda_batch_counts before, after;
    if (!engines_open(&e, true, small))
        return 0;
    const char *quick = getenv("ECG_GPU_QUICK");
    const int rounds = quick && *quick == '1' ? 4 : 6;
    cuda_batch_counts(&before);
    for (int round = 0; round < rounds; round++)
        assert_true(parity_check(e.alone, e.batched, PARITY_UNIFORM) >= 2);
    for (int round = 0; round < rounds; round++)
        assert_true(parity_check(e.alone, e.batched, PARITY_REPEAT) >= 2);
    for (int round = 0; round < rounds; round++) /* no resampling (the model's rate) */
        assert_true(parity_check(e.alone, e.batched, PARITY_AT_250) >= 2);
    /* a batched pass's graph is replayed only when a batch of its very shape (its rows among
     * them) comes round again, which the requests' timing decides: as shipped, more one-shape
     * rounds, each against the lone answers, until one was (at most GRAPH_ROUNDS_MORE) */
    for (int extra = 0; !small && rounds >= 6 && extra < GRAPH_ROUNDS_MORE; extra++) {
        struct cuda_batch_counts now;
        cuda_batch_counts(&now);
        if (now.pass_replays > before.pass_replays)
            break;
        assert_true(parity_check(e.alone, e.batched, PARITY_REPEAT) >= 2);
    }
    if (parity_requests() == PARITY_REQUESTS) /* mixed shapes after graphs exist (all 64) */
        (void)parity_check(e.alone, e.batched, PARITY_MIXED);
    cuda_batch_counts(&after);
    grown->batches = after.batches - before.batches;
    grown->members = after.members - before.members;
    grown->captures = after.captures - before.captures;
    grown->replays = after.replays - before.replays;
    grown->back_captures = after.back_captures - before.back_captures;
    grown->back_replays = after.back_replays - before.back_replays;
    grown->small_fronts = after.small_fronts - before.small_fronts;
    grown->small_members = after.small_members - before.small_members;
    grown->small_backs = after.small_backs - before.small_backs;
    grown->small_back_members = after.small_back_members - before.small_back_members;
    grown->pass_captures = after.pass_captures - before.pass_captures;
    grown->pass_replays = after.pass_replays - before.pass_replays;
    printf("# ECG_CUDA_BATCH_SMALL=%s: %llu batches of %llu analyses, %llu fronts captured, %llu "
           "replayed, %llu backs captured, %llu replayed, %llu batched short fronts of %llu "
           "analyses, %llu batched backs of %llu, %llu batched passes captured, %llu "
           "replayed\n",
           small ? small : "(default)", grown->batches, grown->members, grown->captures,
           grown->replays, grown->back_captures, grown->back_replays, grown->small_fronts,
           grown->small_members, grown->small_backs, grown->small_back_members,
           grown->pass_captures, grown->pass_replays);
    engines_close(&e);
    return rounds;
}
#endif

/* As shipped: the short strips' fronts and backs run batched (gpu/cuda_small.cuh), at both
 * rates: every context's record is whole from the first round of each shape on. */
static void test_cuda_batch_graphs_match_lone_answers(void **state)
{
#ifdef ECG_HAVE_CUDA
    struct cuda_batch_counts grown;
    const int rounds = graph_rounds(NULL, &grown);
    if (!rounds)
        skip();
    assert_true(grown.small_members > 0);
    assert_true(grown.small_back_members > 0);
    assert_true(grown.small_back_members <= grown.small_members);
    assert_true(grown.pass_captures + grown.pass_replays <= grown.small_fronts);
    /* one shape's rounds repeat their batches' shapes: the batched passes are captured as
     * graphs (the second time a shape runs) and replayed, and the answers stay the lone ones
     * (the quick mode, under compute-sanitizer, may end before a shape comes round again) */
    if (rounds >= 6) {
        assert_true(grown.pass_captures > 0);
        assert_true(grown.pass_replays > 0);
    }
#else
    printf("# this build has no CUDA backend\n");
    skip();
#endif
}

/* Batched fronts, each back on its own (ECG_CUDA_BATCH_SMALL=front): the backs are captured
 * as CUDA graphs per beat count and replayed; and neither batched (=0): the fronts too. */
static void test_cuda_batch_member_graphs_match_lone_answers(void **state)
{
#ifdef ECG_HAVE_CUDA
    struct cuda_batch_counts grown;
    int rounds = graph_rounds("front", &grown);
    if (!rounds)
        skip();
    assert_true(grown.small_members > 0);
    assert_true(grown.small_back_members == 0);
    /* a context captures once its buffers have stopped growing (rounds 2-3): the quick mode
     * (compute-sanitizer) may end before it replays */
    if (rounds >= 6) {
        assert_true(grown.back_captures > 0);
        assert_true(grown.back_replays > 0);
    }
    rounds = graph_rounds("0", &grown);
    assert_true(grown.small_members == 0);
    if (rounds >= 6) {
        assert_true(grown.captures > 0);
        assert_true(grown.replays > 0);
        assert_true(grown.back_captures > 0);
        assert_true(grown.back_replays > 0);
    }
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
        cmocka_unit_test(test_cuda_batch_member_graphs_match_lone_answers),
    };
    const char *only = getenv("ECG_GPU_ONLY");
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
