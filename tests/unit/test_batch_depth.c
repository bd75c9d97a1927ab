/*
 * test_batch_depth.c - a batcher lane with several batches in flight (engine/batch.c, depth > 1)
 * without a device. The backend here is the CPU backend with batch operations added as the
 * CUDA backend's look from the lane: batch_launch runs the members' stages but keeps them,
 * batch_ready says "not yet" until READY_AFTER_MS after the launch (as a device still running a
 * pass does), and batch_finish hands them back. So the lane's polling runs for real: it must
 * launch the next batches while the first still runs, finish them oldest first, hand every
 * analysis back exactly once, and drain what is in flight when it stops. Every answer is
 * compared with the same recording analysed alone (tests/batch_parity.h's requests, MIT-BIH
 * records). On a device, tests/gpu/test_gpu_batch.c runs the CUDA batches at depth 1 and 4.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "backend.h"
#include "batch.h"
#include "ecg.h"
#include "batch_parity.h"

#define READY_AFTER_MS 3.0 /* a batch's "device work" ends this long after its launch */
#define LANES 2u
#define MAX_BATCH 4u

struct fake_batch {
    void *ctx;          /* the CPU backend's context the members run on */
    double launched_ms; /* when the batch in flight was launched */
    size_t n;           /* its members (0: none in flight) */
};

static void *cpu_state;
static atomic_int in_flight, most_in_flight, launches, early_finishes;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static unsigned fake_lanes(void *state)
{
    return LANES;
}

static enum ecg_status fake_create(void *state, unsigned lane, unsigned max_batch, void **batch,
                                   struct ecg_error *err)
{
    struct fake_batch *f = calloc(1, sizeof *f);
    *batch = NULL;
    if (!f)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "fake batch");
    if (ecg_cpu_backend.ctx_create(state, &f->ctx, err) != ECG_OK) {
        free(f);
        return err->status != ECG_OK ? err->status : ECG_ERR_NOMEM;
    }
    *batch = f;
    return ECG_OK;
}

static void fake_destroy(void *batch)
{
    struct fake_batch *f = batch;
    if (!f)
        return;
    assert_int_equal(f->n, 0); /* nothing left in flight at shutdown */
    ecg_cpu_backend.ctx_destroy(f->ctx);
    free(f);
}

static void fake_launch(void *batch, struct ecg_batch_member *const *members, size_t n)
{
    struct fake_batch *f = batch;
    assert_int_equal(f->n, 0); /* a batch object holds one batch at a time */
    for (size_t i = 0; i < n; i++) {
        members[i]->status = ecg_batch_run_stages(&ecg_cpu_backend, f->ctx, members[i]);
        members[i]->retry_alone = false;
        if (members[i]->status != ECG_OK) {
            ecg_result_free(members[i]->result);
            members[i]->result = NULL;
        }
    }
    f->n = n;
    f->launched_ms = now_ms();
    atomic_fetch_add(&launches, 1);
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    int most = atomic_load(&most_in_flight);
    while (now > most && !atomic_compare_exchange_weak(&most_in_flight, &most, now))
        ;
}

static bool fake_ready(void *batch)
{
    const struct fake_batch *f = batch;
    return now_ms() - f->launched_ms >= READY_AFTER_MS;
}

static void fake_finish(void *batch, struct ecg_batch_member *const *members, size_t n)
{
    struct fake_batch *f = batch;
    assert_int_equal(f->n, n);
    if (!fake_ready(f))
        atomic_fetch_add(&early_finishes, 1); /* the lane had no slot left: it waits here */
    while (!fake_ready(f))
        ;
    f->n = 0;
    atomic_fetch_sub(&in_flight, 1);
    for (size_t i = 0; i < n; i++)
        ecg_batch_member_done(members[i]);
}

static void fake_run(void *batch, struct ecg_batch_member *const *members, size_t n)
{
    fake_launch(batch, members, n);
    fake_finish(batch, members, n);
}

struct batched_run {
    struct ecg_batcher *batcher;
    const struct ecg_model *model;
    struct parity_request *req;
    pthread_barrier_t *start;
};

/* One request through the batcher (ecg_batcher_analyze), its answer in req->result[1]; those
 * the batches do not take (a refused length, two leads, a malformed body) come back
 * ECG_ERR_UNSUPPORTED and are left out. */
static void *batched_thread(void *arg)
{
    struct batched_run *run = arg;
    struct parity_request *r = run->req;
    struct ecg_signal own = {0};
    const struct ecg_signal *decoded = NULL;
    struct ecg_model_info info;
    ecg_model_get_info(run->model, &info);
    struct ecg_batch_input in = {.signal = r->body ? NULL : &r->signal,
                                 .bytes = r->body,
                                 .len = r->len,
                                 .opts = &r->opts,
                                 .latent_dim = info.latent_dim,
                                 .with_model = true};
    pthread_barrier_wait(run->start);
    r->status[1] = ecg_batcher_analyze(run->batcher, &in, &own, &decoded, &r->result[1],
                                       &r->err[1]);
    ecg_signal_free(&own);
    return NULL;
}

/* 64 mixed requests (2 to 80 s, four rates, three formats) at once through lanes of depth
 * `depth`, each against its lone answer; returns how many the batches answered. */
static int check_depth(struct ecg_engine *alone, const struct ecg_model *model,
                       const struct ecg_signal *records, size_t n_records, unsigned depth,
                       unsigned window_us)
{
    struct ecg_backend_ops ops = ecg_cpu_backend;
    ops.batch_lanes = fake_lanes;
    ops.batch_create = fake_create;
    ops.batch_run = fake_run;
    ops.batch_destroy = fake_destroy;
    ops.batch_launch = fake_launch;
    ops.batch_ready = fake_ready;
    ops.batch_finish = fake_finish;
    struct ecg_model_info info;
    struct ecg_error err = {0};
    ecg_model_get_info(model, &info);
    struct ecg_batcher *batcher =
        ecg_batcher_create(&ops, cpu_state, &info.params, true, MAX_BATCH, window_us, depth, &err);
    if (!batcher)
        fail_msg("batcher: %s", err.message);
    static struct parity_request reqs[PARITY_REQUESTS];
    struct batched_run runs[PARITY_REQUESTS];
    pthread_t threads[PARITY_REQUESTS];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, PARITY_REQUESTS), 0);
    atomic_store(&most_in_flight, 0);
    atomic_store(&launches, 0);
    atomic_store(&early_finishes, 0);
    for (int i = 0; i < PARITY_REQUESTS; i++) {
        parity_make(&reqs[i], i, records, n_records, PARITY_MIXED);
        struct parity_request *r = &reqs[i];
        r->status[0] = r->body ? ecg_engine_analyze_bytes(alone, r->body, r->len, &r->opts,
                                                          &r->result[0], &r->err[0])
                               : ecg_engine_analyze(alone, &r->signal, &r->result[0], &r->err[0]);
        runs[i] = (struct batched_run){batcher, model, r, &start};
    }
    for (int i = 0; i < PARITY_REQUESTS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, batched_thread, &runs[i]), 0);
    for (int i = 0; i < PARITY_REQUESTS; i++)
        pthread_join(threads[i], NULL);
    ecg_batcher_destroy(batcher); /* drains: fake_destroy checks nothing is left in flight */
    pthread_barrier_destroy(&start);

    int answered = 0;
    for (int i = 0; i < PARITY_REQUESTS; i++) {
        struct parity_request *r = &reqs[i];
        if (r->status[1] == ECG_ERR_UNSUPPORTED) {
            /* not for a batch: refused alone too, or several leads */
            assert_true(r->status[0] != ECG_OK || r->opts.lead);
        } else {
            assert_int_equal(r->status[1], r->status[0]);
            if (r->status[0] == ECG_OK) {
                parity_same_arrays(r);
                answered++;
            }
        }
        for (int w = 0; w < 2; w++)
            ecg_result_free(r->result[w]);
        free(r->body);
        ecg_signal_free(&r->signal);
        memset(r, 0, sizeof *r);
    }
    print_message("# depth %u, window %u us: %d answered by %d batches, at most %d in flight, "
                  "%d finishes waited for\n",
                  depth, window_us, answered, atomic_load(&launches),
                  atomic_load(&most_in_flight), atomic_load(&early_finishes));
    assert_int_equal(atomic_load(&in_flight), 0);
    return answered;
}

static void test_lanes_keep_batches_in_flight(void **state)
{
    struct ecg_error err = {0};
    struct ecg_model *model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        fail_msg("model: %s", err.message);
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .model = model, .workers = 4};
    struct ecg_engine *alone = ecg_engine_create(&config, &err);
    if (!alone)
        fail_msg("engine: %s", err.message);
    assert_int_equal(ecg_cpu_backend.open(&config, &cpu_state, &err), ECG_OK);
    static const char *names[] = {"101", "119", "201", "208"};
    struct ecg_signal records[4] = {{0}};
    for (size_t i = 0; i < 4; i++) {
        char path[512];
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
        parity_record_path(path, sizeof path, names[i]);
        assert_int_equal(ecg_read_file(path, &opts, &records[i], &err), ECG_OK);
    }
    /* depth 1: never more than one batch of a lane in flight (two lanes: two in all) */
    int answered = check_depth(alone, model, records, 4, 1, 200);
    assert_true(answered >= 50);
    assert_true(atomic_load(&most_in_flight) <= (int)LANES);
    /* depth 3, with a short window and a long one: a lane launches its next batches while the
     * ones before are still "on the device", up to three */
    answered = check_depth(alone, model, records, 4, 3, 200);
    assert_true(answered >= 50);
    assert_true(atomic_load(&most_in_flight) > (int)LANES);
    assert_true(atomic_load(&most_in_flight) <= 3 * (int)LANES);
    answered = check_depth(alone, model, records, 4, ECG_BATCH_DEPTH_MAX, 20000);
    assert_true(answered >= 50);
    assert_true(atomic_load(&most_in_flight) <= (int)(ECG_BATCH_DEPTH_MAX * LANES));
    for (size_t i = 0; i < 4; i++)
        ecg_signal_free(&records[i]);
    ecg_cpu_backend.close(cpu_state);
    ecg_engine_destroy(alone);
    ecg_model_free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes_keep_batches_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
