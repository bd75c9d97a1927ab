/*
 * batch.c - the dynamic batcher (batch.h): lanes, their queues and threads, the shared plans,
 * the stage-by-stage runner for a backend without batch operations, and an analysis's way
 * through the batcher (ecg_batcher_analyze).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "cpu/cpu.h" /* cpu_quality_features: a batched analysis's features, on the host */
#include "quality.h"

#define BATCH_PLANS 8 /* rates whose plans are kept */

struct batch_lane {
    struct ecg_batcher *owner;
    pthread_mutex_t lock;
    pthread_cond_t arrived;  /* the thread has something to re-check: a first member, a full
                              * batch, nobody left on the way, or the batcher stopping */
    struct ecg_batch_member *head, *tail;
    size_t queued;           /* atomic: changed under the lock, read by the polling thread */
    int inbound;             /* analyses announced to this lane, not yet queued or withdrawn
                              * (atomic: raised without the lock, lowered under it) */
    bool stopping;
    bool started;            /* thread running (joined by destroy) */
    pthread_t thread;
    /* The batches in flight: up to depth, each on a batch object of its own (ops->batch_create's),
     * in a ring from oldest; slot s holds n_run[s] members in run[s]. depth 1 (or a backend
     * without the launch/finish split) runs each batch to its end before the next is collected. */
    unsigned depth, oldest, in_flight;
    void *batch[ECG_BATCH_DEPTH_MAX];
    struct ecg_batch_member **run[ECG_BATCH_DEPTH_MAX]; /* max_batch each */
    size_t n_run[ECG_BATCH_DEPTH_MAX];
    void *ctx;               /* the context of the stage-by-stage runner, or NULL */
};

struct plan_slot {
    struct ecg_plan plan;    /* fs_a_hz > 0 when it holds a plan */
    unsigned refs;
    uint64_t last_use;
};

struct ecg_batcher {
    const struct ecg_backend_ops *ops;
    void *state;
    struct ecg_params params;
    bool with_model;
    unsigned max_batch;
    double window_ms;
    unsigned n_lanes;
    bool wait_all;           /* ECG_BATCH_WAIT=all: a batch waits while any analysis is on its
                              * way to any lane (the rule before per-lane counts; sweeps) */
    unsigned next_lane;      /* round-robin (atomic) */
    struct batch_lane *lanes;
    pthread_mutex_t plan_lock;
    struct plan_slot plans[BATCH_PLANS];
    uint64_t plan_clock;
};

static double batch_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

struct ecg_result *ecg_batch_result(struct ecg_batch_member *m, size_t k)
{
    m->result = ecg_result_new(k, m->latent_dim, m->with_model);
    return m->result;
}

void ecg_batch_member_done(struct ecg_batch_member *m)
{
    /* the last touch: m may be gone once done has run (it lives in the waiting thread's frame,
     * or in an asynchronous caller's object that the callback lets go) */
    m->done(m->done_arg);
}

/* ---------------------------------------------------------------- plans */

enum ecg_status ecg_batcher_plan_get(struct ecg_batcher *b, double fs_hz,
                                     const struct ecg_plan **plan, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct plan_slot *pick = NULL;
    *plan = NULL;
    pthread_mutex_lock(&b->plan_lock);
    for (unsigned i = 0; i < BATCH_PLANS; i++) {
        struct plan_slot *s = &b->plans[i];
        if (s->plan.fs_a_hz > 0 && s->plan.fs_in_hz == fs_hz) {
            s->refs++;
            s->last_use = ++b->plan_clock;
            *plan = &s->plan;
            goto out;
        }
        /* an empty slot first, else the least recently used one nobody holds */
        if (s->refs == 0 &&
            (!pick || (pick->plan.fs_a_hz > 0 &&
                       (s->plan.fs_a_hz <= 0 || s->last_use < pick->last_use))))
            pick = s;
    }
    if (pick) {
        ecg_plan_fini(&pick->plan);
        memset(&pick->plan, 0, sizeof pick->plan);
        /* designed under the lock: a new rate is rare, and two threads must not both design */
        status = ecg_plan_init(&pick->plan, &b->params, fs_hz, err);
        if (status != ECG_OK) {
            memset(&pick->plan, 0, sizeof pick->plan);
            goto out;
        }
        pick->refs = 1;
        pick->last_use = ++b->plan_clock;
        *plan = &pick->plan;
        goto out;
    }
    /* every slot held by a batch in flight: a plan of the caller's own, freed by plan_put */
    struct ecg_plan *own = calloc(1, sizeof *own);
    if (!own) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "batch: plan");
        goto out;
    }
    status = ecg_plan_init(own, &b->params, fs_hz, err);
    if (status != ECG_OK) {
        free(own);
        goto out;
    }
    *plan = own;
out:
    pthread_mutex_unlock(&b->plan_lock);
    return status;
}

void ecg_batcher_plan_put(struct ecg_batcher *b, const struct ecg_plan *plan)
{
    if (!plan)
        return;
    pthread_mutex_lock(&b->plan_lock);
    for (unsigned i = 0; i < BATCH_PLANS; i++) {
        if (plan == &b->plans[i].plan) {
            b->plans[i].refs--;
            pthread_mutex_unlock(&b->plan_lock);
            return;
        }
    }
    pthread_mutex_unlock(&b->plan_lock);
    ecg_plan_fini((struct ecg_plan *)plan);
    free((struct ecg_plan *)plan);
}

/* ---------------------------------------------------------------- running a batch */

enum ecg_status ecg_batch_run_stages(const struct ecg_backend_ops *ops, void *ctx,
                                     struct ecg_batch_member *m)
{
    enum ecg_status status;
    size_t k = 0;
    struct ecg_error *err = &m->err;
    status = ops->load(ctx, m->samples, m->n, err);
    if (status == ECG_OK)
        status = ops->resample(ctx, m->plan, err);
    if (status == ECG_OK)
        status = ops->filter(ctx, m->plan, err);
    if (status == ECG_OK)
        status = ops->detect(ctx, m->plan, &k, err);
    if (status == ECG_OK)
        status = ops->embed(ctx, m->plan, err);
    if (status == ECG_OK && m->with_model)
        status = ops->encode(ctx, m->plan, err);
    if (status != ECG_OK)
        return status;
    if (!ecg_batch_result(m, k))
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "result for %zu beats", k);
    return ops->fetch(ctx, m->result, err);
}

/* The halves of slot's batch. With batch objects they are the backend's (batch_run where the
 * lane runs one batch at a time); without, the stage-by-stage runner runs every member in the
 * launch and hands them back in the finish. Every member is handed back exactly once
 * (ecg_batch_member_done), by the backend as soon as its own outputs are final. */
static void launch_batch(struct batch_lane *lane, unsigned slot)
{
    const struct ecg_backend_ops *ops = lane->owner->ops;
    struct ecg_batch_member **run = lane->run[slot];
    const size_t n = lane->n_run[slot];
    if (lane->batch[slot]) {
        if (lane->depth == 1)
            ops->batch_run(lane->batch[slot], run, n);
        else
            ops->batch_launch(lane->batch[slot], run, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        run[i]->status = ecg_batch_run_stages(ops, lane->ctx, run[i]);
        if (run[i]->status != ECG_OK) {
            ecg_result_free(run[i]->result);
            run[i]->result = NULL;
        }
        if (lane->depth == 1)
            ecg_batch_member_done(run[i]);
    }
}

static bool batch_ready(struct batch_lane *lane, unsigned slot)
{
    return !lane->batch[slot] || lane->owner->ops->batch_ready(lane->batch[slot]);
}

static void finish_batch(struct batch_lane *lane, unsigned slot)
{
    if (lane->batch[slot]) {
        lane->owner->ops->batch_finish(lane->batch[slot], lane->run[slot], lane->n_run[slot]);
        return;
    }
    for (size_t i = 0; i < lane->n_run[slot]; i++)
        ecg_batch_member_done(lane->run[slot][i]);
}

/* Waits on cond until deadline_ms (CLOCK_REALTIME-based condvar: the wait is converted). */
static void wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, double deadline_ms)
{
    double left_ms = deadline_ms - batch_now_ms();
    if (left_ms <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(left_ms * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    (void)pthread_cond_timedwait(cond, lock, &ts);
}

/* Analyses on their way that lane's batch waits for: its own, or (wait_all) every lane's. */
static int on_the_way(struct ecg_batcher *b, struct batch_lane *lane)
{
    int n = 0;
    if (!b->wait_all)
        return __atomic_load_n(&lane->inbound, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < b->n_lanes; i++)
        n += __atomic_load_n(&b->lanes[i].inbound, __ATOMIC_ACQUIRE);
    return n;
}

/* Whether the batch the queue's head starts should go now rather than wait for more (the lock
 * held): full, stopping, its window over, or nobody else on the way to this lane. */
static bool batch_due(struct ecg_batcher *b, struct batch_lane *lane)
{
    return lane->queued >= b->max_batch || lane->stopping ||
           batch_now_ms() >= lane->head->enqueued_ms + b->window_ms || on_the_way(b, lane) == 0;
}

/* Takes up to max_batch members from the queue into the free slot after the ones in flight
 * (the lock held); returns the slot. */
static unsigned take_batch(struct ecg_batcher *b, struct batch_lane *lane)
{
    const unsigned slot = (lane->oldest + lane->in_flight) % lane->depth;
    struct ecg_batch_member **run = lane->run[slot];
    size_t n = 0;
    const double start = batch_now_ms();
    while (lane->head && n < b->max_batch) {
        struct ecg_batch_member *m = lane->head;
        lane->head = m->next;
        m->next = NULL;
        m->queue_ms = start - m->enqueued_ms;
        run[n++] = m;
    }
    if (!lane->head)
        lane->tail = NULL;
    __atomic_store_n(&lane->queued, lane->queued - n, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++)
        run[i]->batch_size = (unsigned)n;
    lane->n_run[slot] = n;
    return slot;
}

/*
 * While batches are in flight and another slot is free (the lock not held): polls the oldest
 * batch and the queue until that batch's device work is done (true: finish it) or the queue
 * may hold a batch due to start (false: go and look, under the lock). A member seen waiting is
 * due once the queue is full, nobody else is on the way, or the window has passed since it
 * was first seen here (a little after it was queued: the exact rule is batch_due's).
 */
static bool poll_oldest(struct ecg_batcher *b, struct batch_lane *lane)
{
    double seen_ms = -1;
    for (;;) {
        if (batch_ready(lane, lane->oldest))
            return true;
        if (__atomic_load_n(&lane->queued, __ATOMIC_RELAXED) == 0) {
            seen_ms = -1;
            continue;
        }
        const double now = batch_now_ms();
        if (seen_ms < 0)
            seen_ms = now;
        if (__atomic_load_n(&lane->queued, __ATOMIC_RELAXED) >= b->max_batch ||
            on_the_way(b, lane) == 0 || now >= seen_ms + b->window_ms)
            return false;
    }
}

/*
 * The lane's thread: waits for a first member, collects up to max_batch until the window since
 * that member's arrival has passed or no other analysis is on its way to this lane (at once when
 * stopping: draining must not wait for more), and starts them as one batch outside the lock.
 * With depth 1 a batch runs to its end before the next is collected. With depth > 1 a batch is
 * launched (ops->batch_launch) and the next one collected and launched while the device runs
 * it, up to depth in flight; the oldest is finished (ops->batch_finish: its members handed
 * back) once its device work is done, or at once when no slot is free or nothing waits. An
 * analysis that arrives during a batch thus waits for the host's part of a cycle, not for the
 * device's pass. Members are not touched after they are handed back. Exits once stopping, the
 * queue empty and nothing in flight.
 */
static void *lane_main(void *arg)
{
    struct batch_lane *lane = arg;
    struct ecg_batcher *b = lane->owner;
    pthread_mutex_lock(&lane->lock);
    for (;;) {
        while (!lane->head && !lane->stopping && lane->in_flight == 0)
            pthread_cond_wait(&lane->arrived, &lane->lock);
        if (!lane->head && lane->in_flight == 0)
            break; /* stopping and drained */
        if (lane->head && lane->in_flight < lane->depth) {
            if (lane->in_flight == 0) {
                /* nothing in flight: sleep until the batch is due. waiting for more is worth
                 * it only while some are on their way to this lane: a lone client's analysis
                 * starts at once, and so does a batch whose clients have all come */
                const double deadline = lane->head->enqueued_ms + b->window_ms;
                while (!batch_due(b, lane))
                    wait_until(&lane->arrived, &lane->lock, deadline);
            }
            if (lane->in_flight == 0 || batch_due(b, lane)) {
                const unsigned slot = take_batch(b, lane);
                pthread_mutex_unlock(&lane->lock);
                launch_batch(lane, slot);
                if (lane->depth > 1)
                    lane->in_flight++; /* the lane's own thread alone reads the ring */
                pthread_mutex_lock(&lane->lock);
                continue;
            }
        }
        /* batches in flight, and none to start yet, or no slot free */
        const bool free_slot = lane->in_flight < lane->depth;
        pthread_mutex_unlock(&lane->lock);
        if (!free_slot || poll_oldest(b, lane)) {
            const unsigned slot = lane->oldest;
            finish_batch(lane, slot);
            lane->oldest = (slot + 1) % lane->depth;
            lane->in_flight--;
        }
        pthread_mutex_lock(&lane->lock);
    }
    pthread_mutex_unlock(&lane->lock);
    return NULL;
}

unsigned ecg_batcher_announce(struct ecg_batcher *b)
{
    unsigned pick = __atomic_fetch_add(&b->next_lane, 1u, __ATOMIC_RELAXED) % b->n_lanes;
    __atomic_fetch_add(&b->lanes[pick].inbound, 1, __ATOMIC_ACQ_REL);
    return pick;
}

/* One announced analysis of lane no longer on its way (lane->lock held); wakes a collector
 * that waits for nobody else. */
static void lane_arrived(struct batch_lane *lane)
{
    if (__atomic_sub_fetch(&lane->inbound, 1, __ATOMIC_ACQ_REL) == 0 && lane->head)
        pthread_cond_signal(&lane->arrived);
}

void ecg_batcher_withdraw(struct ecg_batcher *b, unsigned lane_index)
{
    struct batch_lane *lane = &b->lanes[lane_index];
    pthread_mutex_lock(&lane->lock);
    lane_arrived(lane);
    pthread_mutex_unlock(&lane->lock);
}

bool ecg_batcher_queue(struct ecg_batcher *b, struct ecg_batch_job *job, void (*done)(void *),
                       void *arg)
{
    struct batch_lane *lane = &b->lanes[job->lane];
    struct ecg_batch_member *m = &job->m;
    m->next = NULL;
    m->done = done;
    m->done_arg = arg;
    m->result = NULL;
    m->status = ECG_OK;
    m->retry_alone = false;
    job->queued = true; /* the announce is the batcher's to withdraw from here */
    pthread_mutex_lock(&lane->lock);
    if (lane->stopping) {
        lane_arrived(lane);
        pthread_mutex_unlock(&lane->lock);
        return false;
    }
    m->enqueued_ms = batch_now_ms();
    const bool first = !lane->head;
    if (lane->tail)
        lane->tail->next = m;
    else
        lane->head = m;
    lane->tail = m;
    __atomic_store_n(&lane->queued, lane->queued + 1, __ATOMIC_RELAXED);
    /* under the lock: a collector that sees the count drop sees this member queued too; the
     * thread is woken only when it has something new to decide (a batch to start, full, or
     * nobody else on the way), not once per member, and after the unlock, so that it does
     * not wake only to wait for the lock */
    const bool wake = __atomic_sub_fetch(&lane->inbound, 1, __ATOMIC_ACQ_REL) == 0 || first ||
                      lane->queued >= b->max_batch || b->wait_all;
    pthread_mutex_unlock(&lane->lock);
    if (wake)
        pthread_cond_signal(&lane->arrived);
    return true;
}

static void post_finished(void *arg)
{
    sem_post((sem_t *)arg);
}

/* Queues the job and sleeps until its batch hands it back; false when the batcher is stopping
 * (nothing queued). */
static bool run_and_wait(struct ecg_batcher *b, struct ecg_batch_job *job)
{
    sem_t finished;
    if (sem_init(&finished, 0, 0) != 0)
        return false; /* the announce is withdrawn by ecg_batcher_job_fini */
    if (!ecg_batcher_queue(b, job, post_finished, &finished)) {
        sem_destroy(&finished);
        return false;
    }
    while (sem_wait(&finished) != 0 && errno == EINTR)
        ;
    sem_destroy(&finished);
    return true;
}

/* ---------------------------------------------------------------- create / destroy */

void ecg_batcher_destroy(struct ecg_batcher *b)
{
    if (!b)
        return;
    for (unsigned i = 0; b->lanes && i < b->n_lanes; i++) {
        struct batch_lane *lane = &b->lanes[i];
        if (!lane->started)
            continue;
        pthread_mutex_lock(&lane->lock);
        lane->stopping = true;
        pthread_cond_broadcast(&lane->arrived);
        pthread_mutex_unlock(&lane->lock);
        pthread_join(lane->thread, NULL);
    }
    for (unsigned i = 0; b->lanes && i < b->n_lanes; i++) {
        struct batch_lane *lane = &b->lanes[i];
        for (unsigned s = 0; s < ECG_BATCH_DEPTH_MAX; s++) {
            if (lane->batch[s])
                b->ops->batch_destroy(lane->batch[s]);
            free(lane->run[s]);
        }
        if (lane->ctx)
            b->ops->ctx_destroy(lane->ctx);
        pthread_cond_destroy(&lane->arrived);
        pthread_mutex_destroy(&lane->lock);
    }
    for (unsigned i = 0; i < BATCH_PLANS; i++)
        ecg_plan_fini(&b->plans[i].plan);
    pthread_mutex_destroy(&b->plan_lock);
    free(b->lanes);
    free(b);
}

struct ecg_batcher *ecg_batcher_create(const struct ecg_backend_ops *ops, void *state,
                                       const struct ecg_params *params, bool with_model,
                                       unsigned max_batch, unsigned window_us,
                                       unsigned depth, struct ecg_error *err)
{
    const bool native = ops->batch_lanes && ops->batch_create && ops->batch_run &&
                        ops->batch_destroy;
    /* the stage-by-stage runner splits too: it runs the members at the launch */
    const bool split = !native || (ops->batch_launch && ops->batch_ready && ops->batch_finish);
    struct ecg_batcher *b = calloc(1, sizeof *b);
    if (!b) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "batcher");
        return NULL;
    }
    b->ops = ops;
    b->state = state;
    b->params = *params;
    b->with_model = with_model;
    b->max_batch = max_batch;
    b->window_ms = window_us / 1000.0;
    const char *wait = getenv("ECG_BATCH_WAIT");
    b->wait_all = wait && !strcmp(wait, "all");
    pthread_mutex_init(&b->plan_lock, NULL);
    b->n_lanes = native ? ops->batch_lanes(state) : 1;
    if (b->n_lanes < 1)
        b->n_lanes = 1;
    b->lanes = calloc(b->n_lanes, sizeof *b->lanes);
    if (!b->lanes) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "batcher lanes");
        goto fail;
    }
    for (unsigned i = 0; i < b->n_lanes; i++) {
        struct batch_lane *lane = &b->lanes[i];
        lane->owner = b;
        pthread_mutex_init(&lane->lock, NULL);
        pthread_cond_init(&lane->arrived, NULL);
    }
    for (unsigned i = 0; i < b->n_lanes; i++) {
        struct batch_lane *lane = &b->lanes[i];
        lane->depth = split ? depth : 1;
        if (lane->depth < 1)
            lane->depth = 1;
        if (lane->depth > ECG_BATCH_DEPTH_MAX)
            lane->depth = ECG_BATCH_DEPTH_MAX;
        for (unsigned s = 0; s < lane->depth; s++) {
            lane->run[s] = calloc(max_batch, sizeof *lane->run[s]);
            if (!lane->run[s]) {
                ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "batcher lanes");
                goto fail;
            }
            if (native && ops->batch_create(state, i, max_batch, &lane->batch[s], err) != ECG_OK)
                goto fail;
        }
        if (!native && ops->ctx_create(state, &lane->ctx, err) != ECG_OK)
            goto fail;
        if (pthread_create(&lane->thread, NULL, lane_main, lane) != 0) {
            ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "batcher thread");
            goto fail;
        }
        (void)pthread_setname_np(lane->thread, "ecgd-lane");
        lane->started = true;
    }
    return b;
fail:
    ecg_batcher_destroy(b);
    return NULL;
}

/* ---------------------------------------------------------------- an analysis */

/* Whether sig can join a batch: one lead, not too long, long enough, a rate. */
static bool batchable(const struct ecg_signal *sig)
{
    return sig->samples && sig->n > 0 && sig->n_extra == 0 && sig->n <= ECG_BATCH_MAX_SAMPLES &&
           sig->fs_hz > 0 && (double)sig->n / sig->fs_hz >= ECG_MIN_DURATION_S;
}

enum ecg_status ecg_batcher_begin(struct ecg_batcher *b, const struct ecg_batch_input *in,
                                  struct ecg_signal *own, const struct ecg_signal **decoded,
                                  struct ecg_batch_job *job, struct ecg_error *err)
{
    struct ecg_error ignored = {0};
    const struct ecg_signal *sig = in->signal;

    memset(job, 0, offsetof(struct ecg_batch_job, stack_windows));
    job->windows = job->stack_windows;
    job->t0 = batch_now_ms();
    *decoded = NULL;
    if (in->opts && ecg_lead_is_list(in->opts->lead))
        return ECG_ERR_UNSUPPORTED;
    job->lane = ecg_batcher_announce(b);
    job->announced = true;
    if (!sig) {
        if (ecg_read_memory(in->bytes, in->len, in->opts, own, &ignored) != ECG_OK)
            return ECG_ERR_UNSUPPORTED;
        sig = own;
    }
    *decoded = sig;
    job->sig = sig;
    /* An fs given that the recording contradicts goes its own pass, which says conflicting_fs. */
    bool fs_conflicts = in->opts && in->opts->fs_hz > 0 &&
                        fabs(in->opts->fs_hz - sig->fs_hz) > 1e-9 * sig->fs_hz;
    if (!batchable(sig) || fs_conflicts ||
        ecg_batcher_plan_get(b, sig->fs_hz, &job->m.plan, &ignored) != ECG_OK)
        return ECG_ERR_UNSUPPORTED;
    job->timing.read_ms = batch_now_ms() - job->t0;
    job->geom = ecg_quality_geometry_of(sig->n, sig->fs_hz);
    if (job->geom.n_win > ECG_BATCH_JOB_WINDOWS) {
        job->windows = malloc(job->geom.n_win * sizeof *job->windows);
        if (!job->windows)
            return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu windows",
                            job->geom.n_win);
    }
    job->m.windows = job->windows;
    job->m.n_win = job->geom.n_win;
    job->m.windows_done = false; /* a batch may compute them, else finish does */
    job->m.samples = sig->samples;
    job->m.n = sig->n;
    job->m.latent_dim = in->latent_dim;
    job->m.with_model = in->with_model;
    return ECG_OK;
}

enum ecg_status ecg_batcher_finish(struct ecg_batch_job *job, struct ecg_result **out,
                                   struct ecg_error *err)
{
    struct ecg_batch_member *m = &job->m;
    const struct ecg_signal *sig = job->sig;
    enum ecg_status status = m->status;
    if (status != ECG_OK) {
        if (m->retry_alone)
            return ECG_ERR_UNSUPPORTED; /* the batch could not take it: its own pass */
        if (err)
            *err = m->err;
        return status;
    }
    m->result->n_samples = sig->n;
    m->result->fs_hz = sig->fs_hz;
    snprintf(m->result->lead, sizeof m->result->lead, "%s", sig->lead);
    m->result->n_leads = 1;
    snprintf(m->result->leads[0], sizeof m->result->leads[0], "%s", sig->lead);
    snprintf(m->result->time_column, sizeof m->result->time_column, "%s", sig->time_column);
    m->result->fs_from_time = sig->fs_from_time;
    m->result->decimal_comma = sig->decimal_comma;
    if (!m->windows_done) { /* the batch did not compute the quality features: the host does */
        const double t = batch_now_ms();
        cpu_quality_features(sig->samples, sig->n, sig->fs_hz, job->windows);
        job->timing.quality_ms = batch_now_ms() - t;
    }
    status = ecg_result_assess(m->result, job->windows, job->geom.n_win, 0, &job->timing, err);
    if (status != ECG_OK)
        return status;
    job->timing.queue_ms = m->queue_ms;
    job->timing.batch_size = m->batch_size;
    job->timing.total_ms = batch_now_ms() - job->t0;
    m->result->timing = job->timing;
    *out = m->result;
    m->result = NULL;
    return ECG_OK;
}

void ecg_batcher_job_fini(struct ecg_batcher *b, struct ecg_batch_job *job)
{
    if (job->announced && !job->queued)
        ecg_batcher_withdraw(b, job->lane);
    ecg_result_free(job->m.result);
    job->m.result = NULL;
    ecg_batcher_plan_put(b, job->m.plan);
    job->m.plan = NULL;
    if (job->windows != job->stack_windows)
        free(job->windows);
    job->windows = job->stack_windows;
}

enum ecg_status ecg_batcher_analyze(struct ecg_batcher *b, const struct ecg_batch_input *in,
                                    struct ecg_signal *own, const struct ecg_signal **decoded,
                                    struct ecg_result **out, struct ecg_error *err)
{
    struct ecg_batch_job job;
    enum ecg_status status = ecg_batcher_begin(b, in, own, decoded, &job, err);
    if (status == ECG_OK)
        status = run_and_wait(b, &job) ? ecg_batcher_finish(&job, out, err)
                                       : ECG_ERR_UNSUPPORTED; /* stopping: its own pass */
    ecg_batcher_job_fini(b, &job);
    return status;
}
