/*
 * cuda_batch.cu - dynamic batching on one device (the batch_* ops of backend.h; the queue and
 * the window are engine/batch.c's).
 *
 * A batch of n analyses runs over n contexts of the batch's own (cuda_ctx_create_on with
 * batch = true: a stream each, no staging chunks, defer_sync), each analysis with the very
 * kernels and arguments of its own pass, so that its beat table is the same bit for bit. What
 * the batch saves is the waiting: the stages of a batch's contexts do not wait at their end,
 * and the host waits twice per batch member, for its beat count and for its table, while the
 * other members' work keeps the device busy:
 *   1. every member's samples are packed into one pinned buffer. The members whose lead takes
 *      the short path and whose context's record of its last front is whole (cuda_small.cuh),
 *      when there are two or more at one rate, run one batched front: the pack and the table
 *      of their records copied once, each step launched once with a block per member; then,
 *      on the same stream and with the beat counts left on the device, one batched back
 *      (segment, normalise, embed, the VAE over all their beats, score, their tables gathered,
 *      the quality features of their samples), whose last kernels write the counts, the tables
 *      and the features straight into pinned host memory (small_front_queue; a batched front
 *      alone copies its counts back). For each other member,
 *      its slice is copied to its input (async, no staging), resample, filter and detect are
 *      queued, up to the copy of the counts to its h_stage;
 *   2. the batched front and back waited for once (small_front_collect), their members' tables
 *      split and handed back; for each other member: wait for its counts (by then the device
 *      has had every member's work of step 1 to run), queue embed, encode and the copy of its
 *      beat table;
 *   3. for each member: wait for its table, split it into its result and hand the member back
 *      (ecg_batch_member_done): its thread renders its answer while the batch goes on.
 * The fronts, and the backs (embed, encode, the table's copy) of a known beat count, replay as
 * CUDA graphs (struct front_graph, struct back_graph): one launch each instead of about twenty
 * and ten; a batched short pass whose shape ran before, as one graph of its ~15 kernels
 * (struct pass_graph, cuda_batch_small.cu). A member that fails keeps its error; the others go on. A failure to get memory is the
 * batch's, not the input's: that member is marked retry_alone and the engine runs it on its
 * own pass.
 *
 * Pinned memory: the pack buffer is written by the host only between batches; every copy that
 * reads it is complete when a batch returns (every member's stream has been waited for).
 *
 * The batched short pass (step 1's batched fronts and backs and the start of step 2) is
 * cuda_batch_small.cu's; the batch object, cuda_batch.cuh's.
 *
 * Threading: one batch object per lane, used by the lane's thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_batch.cuh"
#include "cuda_stats.h"

/* process-wide counters for tests and benchmarks (cuda_stats.h), updated atomically */
static struct cuda_batch_counts counts;

extern "C" void cuda_batch_counts(struct cuda_batch_counts *out)
{
    out->batches = __atomic_load_n(&counts.batches, __ATOMIC_RELAXED);
    out->members = __atomic_load_n(&counts.members, __ATOMIC_RELAXED);
    out->captures = __atomic_load_n(&counts.captures, __ATOMIC_RELAXED);
    out->replays = __atomic_load_n(&counts.replays, __ATOMIC_RELAXED);
    out->back_captures = __atomic_load_n(&counts.back_captures, __ATOMIC_RELAXED);
    out->back_replays = __atomic_load_n(&counts.back_replays, __ATOMIC_RELAXED);
    out->small_fronts = __atomic_load_n(&counts.small_fronts, __ATOMIC_RELAXED);
    out->small_members = __atomic_load_n(&counts.small_members, __ATOMIC_RELAXED);
    out->small_backs = __atomic_load_n(&counts.small_backs, __ATOMIC_RELAXED);
    out->small_back_members = __atomic_load_n(&counts.small_back_members, __ATOMIC_RELAXED);
    out->pass_captures = __atomic_load_n(&counts.pass_captures, __ATOMIC_RELAXED);
    out->pass_replays = __atomic_load_n(&counts.pass_replays, __ATOMIC_RELAXED);
}

extern "C" unsigned cuda_batch_lanes(void *state_ptr)
{
    const struct cuda_state *state = (const struct cuda_state *)state_ptr;
    return (unsigned)state->n_devices * state->lanes_per_device;
}

extern "C" void cuda_batch_destroy(void *batch_ptr)
{
    struct cuda_batch *b = (struct cuda_batch *)batch_ptr;
    if (!b)
        return;
    const char *times = getenv("ECG_CUDA_BATCH_TIMES");
    if (times && (*times == '1' || *times == '2' || *times == '3') && b->times.batches) {
        const struct batch_times *t = &b->times;
        fprintf(stderr,
                "cuda batch lane %u: %llu batches, %llu members over %.3f s; seconds in step 1 "
                "(fronts) %.3f of which packing %.3f and the rows %.3f, step 2 (backs) %.3f of "
                "which waiting %.3f, splitting batched tables %.3f and handing them back %.3f, "
                "step 3 (tables) "
                "%.3f of which waiting %.3f and handing back %.3f; per member %.1f us; a front "
                "graph's launch %.2f us (%zu nodes), a back graph's %.2f us (%zu nodes), a batched "
                "pass's %.2f us (%zu nodes, %llu replays); %llu fronts in batched short fronts, "
                "%llu backs in batched backs\n",
                b->lane, t->batches, t->members, cuda_now_s() - t->since, t->front, t->pack,
                t->rows, t->back, t->wait_count, t->small_split, t->small_done, t->fetch,
                t->wait_table, t->done,
                1e6 * (t->front + t->back + t->fetch) / (double)t->members,
                t->front_replays ? 1e6 * t->front_launch / (double)t->front_replays : 0.0,
                t->front_nodes,
                t->back_replays ? 1e6 * t->back_launch / (double)t->back_replays : 0.0,
                t->back_nodes,
                t->pass_replays ? 1e6 * t->pass_launch / (double)t->pass_replays : 0.0,
                t->pass_nodes, t->pass_replays, t->small_rows, t->back_rows);
        if (t->gpu_passes) {
            double sum = 0;
            fprintf(stderr, "cuda batch lane %u: device time per batched pass (%llu):", b->lane,
                    t->gpu_passes);
            for (int i = 0; i < GPU_STEPS; i++) {
                fprintf(stderr, " %s %.1f us", small_step_name(i),
                        1e3 * t->gpu_ms[i] / (double)t->gpu_passes);
                sum += t->gpu_ms[i];
            }
            fprintf(stderr, ", all %.1f us\n", 1e3 * sum / (double)t->gpu_passes);
        }
        if (t->ends_only && t->gpu_passes)
            fprintf(stderr,
                    "cuda batch lane %u: device time per batched pass (%llu), the copies in "
                    "to its end: %.1f us",
                    b->lane, t->gpu_passes, 1e3 * t->pass_ms / (double)t->gpu_passes);
        if (t->ends_only && t->gpu_passes && t->split)
            fprintf(stderr, ", of which up to the end of its %s (mark %d): %.1f us",
                    small_step_name(t->split - 1), t->split,
                    1e3 * t->split_ms / (double)t->gpu_passes);
        if (t->ends_only && t->gpu_passes)
            fprintf(stderr, "\n");
    }
    (void)cudaSetDevice(b->dev->ordinal);
    cudaEvent_t branch_events[] = {b->fork, b->filtered, b->join, b->detected};
    for (size_t i = 0; i < sizeof branch_events / sizeof *branch_events; i++)
        if (branch_events[i])
            (void)cudaEventDestroy(branch_events[i]);
    if (b->side)
        (void)cudaStreamDestroy(b->side);
    for (int i = 0; i <= GPU_STEPS; i++)
        if (b->times.ev[i])
            (void)cudaEventDestroy(b->times.ev[i]);
    for (unsigned i = 0; b->pass && i < PASS_GRAPHS; i++)
        if (b->pass[i].exec)
            (void)cudaGraphExecDestroy(b->pass[i].exec);
    for (unsigned i = 0; b->graph && i < b->max_batch; i++)
        if (b->graph[i].exec)
            (void)cudaGraphExecDestroy(b->graph[i].exec);
    for (unsigned i = 0; b->back && i < b->max_batch; i++)
        for (unsigned j = 0; j < BACK_GRAPHS; j++)
            if (b->back[i].exec[j])
                (void)cudaGraphExecDestroy(b->back[i].exec[j]);
    if (b->member)
        for (unsigned i = 0; i < b->max_batch; i++)
            cuda_ctx_free(b->member[i]);
    (void)cudaSetDevice(b->dev->ordinal);
    if (b->h_pack)
        (void)cudaFreeHost(b->h_pack);
    if (b->h_small)
        (void)cudaFreeHost(b->h_small);
    if (b->h_out)
        (void)cudaFreeHost(b->h_out);
    void *device_bufs[] = {b->d_small, b->d_norms, b->d_out, b->d_pack,
                           b->d_emb, b->d_latent, b->d_recon};
    for (size_t i = 0; i < sizeof device_bufs / sizeof *device_bufs; i++)
        if (device_bufs[i])
            (void)cudaFree(device_bufs[i]);
    free(b->off);
    free(b->small_row);
    free(b->member);
    free(b->live);
    free(b->graph);
    free(b->back);
    free(b->pass);
    free(b);
}

extern "C" enum ecg_status cuda_batch_create(void *state_ptr, unsigned lane, unsigned max_batch,
                                             void **batch_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    struct cuda_batch *b = NULL;
    const char *graphs_env = getenv("ECG_CUDA_BATCH_GRAPHS");
    const char *small_env = getenv("ECG_CUDA_BATCH_SMALL");
    const char *times_env = getenv("ECG_CUDA_BATCH_TIMES");
    const char *branch_env = getenv("ECG_CUDA_BATCH_BRANCH");
    const char *scatter_env = getenv("ECG_CUDA_BATCH_SCATTER");
    *batch_out = NULL;
    if (lane >= cuda_batch_lanes(state) || max_batch == 0)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cuda batch: lane %u of %u", lane,
                        cuda_batch_lanes(state));
    b = (struct cuda_batch *)calloc(1, sizeof *b);
    if (!b)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda batch");
    b->state = state;
    b->dev = &state->dev[lane % (unsigned)state->n_devices]; /* lanes go round the devices */
    b->max_batch = max_batch;
    b->lane = lane;
    b->times.since = cuda_now_s();
    b->member = (struct cuda_ctx **)calloc(max_batch, sizeof *b->member);
    b->live = (bool *)calloc(max_batch, sizeof *b->live);
    b->graph = (struct front_graph *)calloc(max_batch, sizeof *b->graph);
    b->back = (struct back_graph *)calloc(max_batch, sizeof *b->back);
    b->off = (size_t *)calloc(max_batch, sizeof *b->off);
    b->small_row = (int *)calloc(max_batch, sizeof *b->small_row);
    b->pass = (struct pass_graph *)calloc(PASS_GRAPHS, sizeof *b->pass);
    b->use_graphs = !graphs_env || strcmp(graphs_env, "0") != 0;
    b->back_graphs = b->use_graphs && cuda_encode_capturable(state->model);
    b->small_fronts = !small_env || strcmp(small_env, "0") != 0;
    b->small_backs = b->small_fronts && !(small_env && !strcmp(small_env, "front"));
    b->encode_batchable = cuda_encode_batchable(state->model);
    b->pass_graphs = b->use_graphs;
    b->branch = !branch_env || strcmp(branch_env, "0") != 0;
    b->scatter = scatter_env && !strcmp(scatter_env, "1");
    {
        const char *doze = getenv("ECG_CUDA_BATCH_DOZE_US");
        char *end = NULL;
        const double us = doze && *doze ? strtod(doze, &end) : 0.0;
        b->doze_us = end && !*end && us > 0 && us <= 1e5 ? us : 0.0;
    }
    if (!b->member || !b->live || !b->graph || !b->back || !b->off || !b->small_row || !b->pass) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda batch");
        goto out;
    }
    if (b->small_fronts) {
        const size_t rows = small_rows_bytes(max_batch);
        CUDA_TRY(cudaSetDevice(b->dev->ordinal));
        CUDA_TRY(cudaMallocHost((void **)&b->h_small, rows));
        CUDA_TRY(cudaMalloc((void **)&b->d_small, rows));
        CUDA_TRY(cudaMalloc(&b->d_norms, max_batch * SMALL_BACK_NORM_BYTES));
        CUDA_TRY(cudaStreamCreateWithFlags(&b->side, cudaStreamNonBlocking));
        CUDA_TRY(cudaEventCreateWithFlags(&b->fork, cudaEventDisableTiming));
        CUDA_TRY(cudaEventCreateWithFlags(&b->filtered, cudaEventDisableTiming));
        CUDA_TRY(cudaEventCreateWithFlags(&b->join, cudaEventDisableTiming));
        CUDA_TRY(cudaEventCreateWithFlags(&b->detected, cudaEventDisableTiming));
    }
    for (unsigned i = 0; i < max_batch; i++)
        ECG_TRY(cuda_ctx_create_on(state, b->dev, true, &b->member[i], err));
    for (int i = 0; times_env && *times_env == '1' && b->small_fronts && i <= GPU_STEPS; i++)
        CUDA_TRY(cudaEventCreate(&b->times.ev[i]));
    if (times_env && *times_env == '3' && b->small_fronts) {
        /* 3:K, K one of the marks a pass records without the detector's own (2-4, 10-14) */
        const int k = times_env[1] == ':' ? atoi(times_env + 2) : 0;
        b->times.ends_only = true;
        CUDA_TRY(cudaEventCreate(&b->times.ev[1]));
        CUDA_TRY(cudaEventCreate(&b->times.ev[15]));
        if ((k >= 2 && k <= 4) || (k >= 10 && k <= 14)) {
            b->times.split = k;
            CUDA_TRY(cudaEventCreate(&b->times.ev[k]));
        }
    }
    *batch_out = b;
    b = NULL;
out:
    cuda_batch_destroy(b);
    return status;
}

/* Contract in cuda_batch.cuh. */
enum ecg_status bytes_reserve(void *buf_ptr, size_t *cap, size_t bytes, bool device,
                                     const char *what, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    void **buf = (void **)buf_ptr;
    if (*buf && bytes <= *cap)
        return ECG_OK;
    if (*buf) {
        CUDA_TRY(device ? cudaFree(*buf) : cudaFreeHost(*buf));
        *buf = NULL;
        *cap = 0;
    }
    bytes += bytes / 4 + 4096;
    CUDA_TRY(device ? cudaMalloc(buf, bytes) : cudaMallocHost(buf, bytes));
    *cap = bytes;
out:
    if (status != ECG_OK)
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda batch: cannot %s %zu MiB for %s",
                          device ? "allocate" : "pin", bytes >> 20, what);
    return status;
}

/* Contract in cuda_batch.cuh. */
void member_fail(struct cuda_batch *b, struct ecg_batch_member *m, unsigned i,
                        enum ecg_status status)
{
    b->live[i] = false;
    m->status = status;
    m->retry_alone = status == ECG_ERR_DEVICE_OOM || status == ECG_ERR_NOMEM;
    ecg_result_free(m->result);
    m->result = NULL;
}

/* The front's stages: what the graph holds. */
static enum ecg_status front_stages(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                    struct ecg_error *err)
{
    enum ecg_status status = cuda_resample(ctx, plan, err);
    if (status == ECG_OK)
        status = cuda_filter(ctx, plan, err);
    if (status == ECG_OK)
        status = detect_queue(ctx, plan, err);
    return status;
}

/* The buffers a capture could move (it cannot: captures are made only where the same front
 * moved nothing; this is the guard should it happen anyway). */
#define CTX_DBUFS(ctx)                                                                        \
    {&(ctx)->input, &(ctx)->resampled, &(ctx)->filtered, &(ctx)->peaks_a, &(ctx)->table,     \
     &(ctx)->emb, &(ctx)->scratch, &(ctx)->cub_temp, &(ctx)->fft_buf, &(ctx)->fft_work,      \
     &(ctx)->vae_work, &(ctx)->rs_table, &(ctx)->ricker, &(ctx)->beat_crest}
#define CTX_N_DBUFS 14

/* What a graph holds: the stages a capture records (arg: the plan, or the batch member). */
typedef enum ecg_status (*capture_fn)(struct cuda_ctx *ctx, const void *arg,
                                      struct ecg_error *err);

static enum ecg_status front_capture_fn(struct cuda_ctx *ctx, const void *arg,
                                        struct ecg_error *err)
{
    return front_stages(ctx, (const struct ecg_plan *)arg, err);
}

/*
 * Captures what stages(ctx, arg) queues into *exec (not launched). ECG_ERR_UNSUPPORTED when the
 * capture could not be made (nothing was queued: the caller runs the stages as usual). A
 * capture that moved a buffer is undone: its frees and allocations were only recorded, so the
 * old buffers are still the context's; the device-resident caches it may have recorded uploads
 * for are forgotten, so that the next run uploads them again.
 */
static enum ecg_status capture_graph(struct cuda_ctx *ctx, capture_fn stages, const void *arg,
                                     cudaGraphExec_t *exec_out, size_t *nodes_out)
{
    enum ecg_status status;
    struct ecg_error ignored;
    struct dbuf *bufs[CTX_N_DBUFS] = CTX_DBUFS(ctx);
    struct dbuf saved[CTX_N_DBUFS];
    const uint64_t generation = ctx->generation;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t code;
    memset(&ignored, 0, sizeof ignored);
    *exec_out = NULL;
    for (int i = 0; i < CTX_N_DBUFS; i++)
        saved[i] = *bufs[i];
    if (cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return ECG_ERR_UNSUPPORTED;
    }
    status = stages(ctx, arg, &ignored);
    code = cudaStreamEndCapture(ctx->stream, &graph);
    if (ctx->generation != generation) {
        for (int i = 0; i < CTX_N_DBUFS; i++)
            *bufs[i] = saved[i];
        ctx->rs_table_bytes = 0;
        ctx->ricker_len = 0;
        status = ECG_ERR_UNSUPPORTED;
    }
    if (status != ECG_OK || code != cudaSuccess || !graph ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        if (graph)
            (void)cudaGraphDestroy(graph);
        ctx->generation = generation + 1; /* whatever the context caches is suspect */
        return ECG_ERR_UNSUPPORTED;
    }
    if (cudaGraphGetNodes(graph, NULL, nodes_out) != cudaSuccess) {
        (void)cudaGetLastError();
        *nodes_out = 0;
    }
    (void)cudaGraphDestroy(graph);
    *exec_out = exec;
    return ECG_OK;
}

/* Captures the front into g and launches it (capture_graph's ECG_ERR_UNSUPPORTED: nothing was
 * queued; another status is a failed launch). */
static enum ecg_status capture_front(struct cuda_ctx *ctx, struct front_graph *g,
                                     const struct ecg_plan *plan, size_t *nodes,
                                     struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const uint64_t generation = ctx->generation;
    cudaGraphExec_t exec = NULL;
    if (capture_graph(ctx, front_capture_fn, plan, &exec, nodes) != ECG_OK)
        return ECG_ERR_UNSUPPORTED;
    if (g->exec)
        (void)cudaGraphExecDestroy(g->exec);
    g->exec = exec;
    g->n_in = ctx->n_in;
    g->fs_in_hz = plan->fs_in_hz;
    g->generation = generation;
    g->n_a = ctx->n_a;
    g->queued = ctx->detect_queued;
    __atomic_fetch_add(&counts.captures, 1ull, __ATOMIC_RELAXED);
    CUDA_TRY(cudaGraphLaunch(g->exec, ctx->stream));
out:
    return status;
}

/* Step 1 for member i: its slice of the pack to its input, then resample, filter, detect (from
 * the member context's graph when it has one for this front, see struct front_graph). */
static enum ecg_status queue_front(struct cuda_batch *b, unsigned i, const float *h_samples,
                                   size_t n, const struct ecg_plan *plan, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = b->member[i];
    struct front_graph *g = &b->graph[i];
    uint64_t before;
    double t0;
    ECG_TRY(ctx_enter(ctx, err));
    before = ctx->generation;
    ctx_reset_request(ctx);
    ECG_TRY(dbuf_reserve(ctx, &ctx->input, n * sizeof(float), err));
    CUDA_TRY(cudaMemcpyAsync(ctx->input.ptr, h_samples, n * sizeof(float),
                             cudaMemcpyHostToDevice, ctx->stream));
    ctx->n_in = n;
    if (b->use_graphs && g->exec && g->n_in == n && g->fs_in_hz == plan->fs_in_hz &&
        g->generation == ctx->generation) {
        /* the host state the stages would leave, then their launches */
        ctx->n_a = g->n_a;
        ctx->n_beats = 0;
        ctx->emb_len = 0;
        ctx->encoded = false;
        ctx->detect_queued = g->queued;
        __atomic_fetch_add(&counts.replays, 1ull, __ATOMIC_RELAXED);
        t0 = cuda_now_s();
        CUDA_TRY(cudaGraphLaunch(g->exec, ctx->stream));
        b->times.front_launch += cuda_now_s() - t0;
        b->times.front_replays++;
        goto out;
    }
    if (b->use_graphs && g->last_clean && g->last_n_in == n &&
        g->last_fs_in_hz == plan->fs_in_hz && g->last_generation == ctx->generation) {
        status = capture_front(ctx, g, plan, &b->times.front_nodes, err);
        if (status != ECG_ERR_UNSUPPORTED)
            goto out;
        status = ECG_OK;
        before = ctx->generation;
    }
    ECG_TRY(front_stages(ctx, plan, err));
    g->last_n_in = n;
    g->last_fs_in_hz = plan->fs_in_hz;
    g->last_clean = ctx->generation == before;
    g->last_generation = ctx->generation;
out:
    if (status != ECG_OK)
        g->last_clean = false;
    return status;
}

/* The back's stages (embed, encode, the table's copy): what a back graph holds. */
static enum ecg_status back_stages(struct cuda_ctx *ctx, const void *arg, struct ecg_error *err)
{
    const struct ecg_batch_member *m = (const struct ecg_batch_member *)arg;
    enum ecg_status status = cuda_embed(ctx, m->plan, err);
    if (status == ECG_OK && m->with_model)
        status = cuda_encode(ctx, m->plan, err);
    if (status == ECG_OK)
        status = fetch_queue(ctx, err);
    return status;
}

static bool back_key_equal(const struct back_key *a, const struct back_key *b)
{
    return a->n_in == b->n_in && a->fs_in_hz == b->fs_in_hz && a->generation == b->generation &&
           a->k == b->k && a->encode == b->encode;
}

/* The back of ctx for m (its beat count known), from a graph when one is kept for its key,
 * else captured into one when the same key ran clean just before, else stage by stage. */
static enum ecg_status run_back(struct cuda_batch *b, unsigned i, struct ecg_batch_member *m,
                                struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = b->member[i];
    struct back_graph *g = &b->back[i];
    struct back_key key;
    unsigned slot = 0;
    key.n_in = ctx->n_in;
    key.fs_in_hz = m->plan->fs_in_hz;
    key.generation = ctx->generation;
    key.k = ctx->n_beats;
    key.encode = m->with_model;
    if (!b->back_graphs || key.k == 0)
        return back_stages(ctx, m, err);
    for (slot = 0; slot < BACK_GRAPHS; slot++)
        if (g->exec[slot] && back_key_equal(&g->key[slot], &key))
            break;
    if (slot < BACK_GRAPHS) {
        /* the host state the stages would leave, then their launches */
        ctx->emb_len = key.k * m->plan->beat_len;
        ctx->encoded = key.encode;
        g->last_use[slot] = ++g->clock;
        __atomic_fetch_add(&counts.back_replays, 1ull, __ATOMIC_RELAXED);
        const double t0 = cuda_now_s();
        CUDA_TRY(cudaGraphLaunch(g->exec[slot], ctx->stream));
        b->times.back_launch += cuda_now_s() - t0;
        b->times.back_replays++;
        goto out;
    }
    if (g->last_clean && back_key_equal(&g->last, &key)) {
        cudaGraphExec_t exec = NULL;
        if (capture_graph(ctx, back_stages, m, &exec, &b->times.back_nodes) == ECG_OK) {
            slot = 0; /* an empty slot, else the least recently used */
            for (unsigned j = 0; j < BACK_GRAPHS; j++) {
                if (!g->exec[j]) {
                    slot = j;
                    break;
                }
                if (g->last_use[j] < g->last_use[slot])
                    slot = j;
            }
            if (g->exec[slot])
                (void)cudaGraphExecDestroy(g->exec[slot]);
            g->exec[slot] = exec;
            g->key[slot] = key;
            g->last_use[slot] = ++g->clock;
            __atomic_fetch_add(&counts.back_captures, 1ull, __ATOMIC_RELAXED);
            CUDA_TRY(cudaGraphLaunch(exec, ctx->stream));
            goto out;
        }
        /* a failed capture forgot the context's caches; it would fail again (nothing in a
         * back moves once its key ran clean): this batch object's backs stay uncaptured */
        key.generation = ctx->generation;
        b->back_graphs = false;
    }
    ECG_TRY(back_stages(ctx, m, err));
    g->last_clean = ctx->generation == key.generation;
    g->last = key;
out:
    if (status != ECG_OK)
        g->last_clean = false;
    return status;
}

/* Step 2 for member i: its beat count, then embed, encode and the copy of its table. */
static enum ecg_status queue_back(struct cuda_batch *b, unsigned i, struct ecg_batch_member *m,
                                  struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = b->member[i];
    size_t k = 0;
    double t0;
    ECG_TRY(ctx_enter(ctx, err));
    t0 = cuda_now_s();
    status = detect_collect(ctx, &k, err);
    b->times.wait_count += cuda_now_s() - t0;
    ECG_TRY(status);
    ECG_TRY(run_back(b, i, m, err));
    if (!ecg_batch_result(m, k))
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "result for %zu beats", k);
out:
    return status;
}

/* Fails every member with status and err (retry_alone: the batch's failure, not theirs) and
 * hands it back. */
static void fail_all(struct ecg_batch_member *const *members, size_t n, enum ecg_status status,
                     const struct ecg_error *err, bool retry_alone)
{
    for (size_t i = 0; i < n; i++) {
        members[i]->err = *err;
        members[i]->status = status;
        members[i]->retry_alone = retry_alone;
        ecg_batch_member_done(members[i]);
    }
}

/* The floats a member of n samples takes in the pack: each starts on a 128-byte boundary, as
 * a buffer of its own would (a batched pass's kernels read its samples there: cuda_small.cuh). */
static size_t pack_span(size_t n)
{
    return (n + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
}

/*
 * A batch in two halves (engine/batch.c keeps several in flight, each on a batch object of its
 * own). Launch: the pack, the batched short pass and the fronts of the members that run
 * alone, queued; nothing waited for. Finish: the pass's counts and tables (its members handed
 * back), the backs of the members that run alone, their tables (handed back). cuda_batch_run
 * is the two in a row.
 */
extern "C" void cuda_batch_launch(void *batch_ptr, struct ecg_batch_member *const *members,
                                  size_t n)
{
    struct cuda_batch *b = (struct cuda_batch *)batch_ptr;
    size_t total = 0, off = 0;
    enum ecg_status status;
    struct ecg_error pack_err;
    double t0 = cuda_now_s();

    b->n_run = 0;
    b->n_small = 0;
    memset(&pack_err, 0, sizeof pack_err);
    for (size_t i = 0; i < n; i++) {
        members[i]->status = ECG_OK;
        members[i]->result = NULL;
        members[i]->retry_alone = false;
        total += pack_span(members[i]->n);
    }
    if (n > b->max_batch) { /* the engine never asks this: a bug, not an input */
        status = ecg_fail(&pack_err, ECG_ERR_INTERNAL, "internal", "cuda batch of %zu > %u", n,
                          b->max_batch);
        fail_all(members, n, status, &pack_err, false);
        return;
    }
    __atomic_fetch_add(&counts.batches, 1ull, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts.members, (unsigned long long)n, __ATOMIC_RELAXED);
    status = cudaSetDevice(b->dev->ordinal) == cudaSuccess ? ECG_OK : ECG_ERR_DEVICE;
    if (status == ECG_OK)
        status = bytes_reserve(&b->h_pack, &b->h_pack_bytes, total * sizeof(float), false,
                               "the batch's input", &pack_err);
    if (status != ECG_OK) {
        (void)cudaGetLastError();
        fail_all(members, n, status, &pack_err, true);
        return;
    }
    /* A member is handed back right after its last touch: at its failure, or once its table
     * is split (its thread then renders its answer while the others' tables come). */
    for (size_t i = 0; i < n; i++) {
        b->off[i] = off;
        memcpy(b->h_pack + off, members[i]->samples, members[i]->n * sizeof(float));
        off += pack_span(members[i]->n);
        b->live[i] = true;
    }
    b->n_run = n;
    b->times.pack += cuda_now_s() - t0;
    small_front_queue(b, members, n, total);
    if (b->n_small) {
        __atomic_fetch_add(&counts.small_fronts, 1ull, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counts.small_members, (unsigned long long)b->n_small,
                           __ATOMIC_RELAXED);
    }
    if (b->pass_ran)
        __atomic_fetch_add(b->pass_ran == 1 ? &counts.pass_replays : &counts.pass_captures, 1ull,
                           __ATOMIC_RELAXED);
    if (b->back_on) {
        __atomic_fetch_add(&counts.small_backs, 1ull, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counts.small_back_members, (unsigned long long)b->n_small,
                           __ATOMIC_RELAXED);
    }
    for (size_t i = 0; i < n; i++) {
        if (!b->live[i] || b->small_row[i] >= 0)
            continue;
        status = queue_front(b, (unsigned)i, b->h_pack + b->off[i], members[i]->n,
                             members[i]->plan, &members[i]->err);
        if (status != ECG_OK) {
            member_fail(b, members[i], (unsigned)i, status);
            ecg_batch_member_done(members[i]);
        }
    }
    b->times.front += cuda_now_s() - t0;
}

/* Whether what cuda_batch_launch queued has run: the batched pass's stream and the streams of
 * the members whose fronts run alone (an error counts as done: the finish reports it). */
extern "C" bool cuda_batch_ready(void *batch_ptr)
{
    struct cuda_batch *b = (struct cuda_batch *)batch_ptr;
    if (b->n_small && cudaStreamQuery(b->member[b->small_first]->stream) == cudaErrorNotReady)
        return false;
    for (size_t i = 0; i < b->n_run; i++)
        if (b->live[i] && b->small_row[i] < 0 &&
            cudaStreamQuery(b->member[i]->stream) == cudaErrorNotReady)
            return false;
    return true;
}

extern "C" void cuda_batch_finish(void *batch_ptr, struct ecg_batch_member *const *members,
                                  size_t n)
{
    struct cuda_batch *b = (struct cuda_batch *)batch_ptr;
    enum ecg_status status;
    double t1 = cuda_now_s(), t2, t3;

    if (b->n_run != n) /* launch failed the whole batch (handed back), or nothing to do */
        return;
    (void)cudaSetDevice(b->dev->ordinal);
    small_front_collect(b, members, n);
    for (size_t i = 0; i < n; i++) {
        if (!b->live[i])
            continue;
        status = queue_back(b, (unsigned)i, members[i], &members[i]->err);
        if (status != ECG_OK) {
            member_fail(b, members[i], (unsigned)i, status);
            ecg_batch_member_done(members[i]);
        }
    }
    t2 = cuda_now_s();
    for (size_t i = 0; i < n; i++) {
        if (!b->live[i])
            continue;
        double w0 = cuda_now_s();
        status = ctx_sync(b->member[i], "fetch", &members[i]->err);
        b->times.wait_table += cuda_now_s() - w0;
        if (status == ECG_OK)
            status = fetch_split(b->member[i], members[i]->result, &members[i]->err);
        if (status != ECG_OK)
            member_fail(b, members[i], (unsigned)i, status);
        w0 = cuda_now_s();
        ecg_batch_member_done(members[i]);
        b->times.done += cuda_now_s() - w0;
    }
    t3 = cuda_now_s();
    b->times.back += t2 - t1;
    b->times.fetch += t3 - t2;
    b->times.batches++;
    b->times.members += n;
    /* A failed member may have left copies from the pack queued: the next batch rewrites it.
     * (The members of a batched back were waited for with it: nothing of theirs is queued.) */
    for (size_t i = 0; i < n; i++) {
        if (b->live[i] || (b->back_on && b->small_row[i] >= 0))
            continue;
        (void)cudaSetDevice(b->dev->ordinal);
        if (cudaStreamSynchronize(b->member[i]->stream) != cudaSuccess)
            (void)cudaGetLastError();
    }
    b->n_run = 0;
}

extern "C" void cuda_batch_run(void *batch_ptr, struct ecg_batch_member *const *members,
                               size_t n)
{
    cuda_batch_launch(batch_ptr, members, n);
    cuda_batch_finish(batch_ptr, members, n);
}
