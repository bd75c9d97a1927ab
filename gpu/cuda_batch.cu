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
 *      the quality features of their samples) and one copy of the counts, the tables and the
 *      features (small_front_queue). For each other member,
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
 * and ten. A member that fails keeps its error; the others go on. A failure to get memory is the
 * batch's, not the input's: that member is marked retry_alone and the engine runs it on its
 * own pass.
 *
 * Pinned memory: the pack buffer is written by the host only between batches; every copy that
 * reads it is complete when a batch returns (every member's stream has been waited for).
 *
 * Threading: one batch object per lane, used by the lane's thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_small.cuh"
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
}

/*
 * A member context's front (resample, filter, detect_queue) as a CUDA graph: one launch instead
 * of about twenty. The front's launches are a function of the input length, the rate and the
 * context's buffers and device-resident caches (ctx->generation), so a graph captured for one
 * (n_in, fs_in_hz, generation) replays exactly what the stages would queue. A front is captured
 * the second time it runs with the same key, when its first run moved no buffer (so the capture
 * allocates nothing); the graph replays while the key holds.
 */
struct front_graph {
    cudaGraphExec_t exec;       /* NULL: none */
    size_t n_in;
    double fs_in_hz;
    uint64_t generation;        /* the context's when captured */
    size_t n_a;                 /* host state the front leaves: ctx->n_a, ctx->detect_queued */
    bool queued;
    /* the last front run without a graph: its key, and whether it moved nothing */
    size_t last_n_in;
    double last_fs_in_hz;
    uint64_t last_generation;   /* the context's after it */
    bool last_clean;
};

/*
 * A member context's back (embed, encode, the copy of the beat table to h_stage) as a CUDA
 * graph. Its launches are a function of the front's key and of the beat count k (the table's
 * layout, the grids), so a graph is kept per (n_in, fs_in_hz, generation, k, encode); a few per
 * context, as k varies from strip to strip. Captured, as the front, the second time in a row
 * the same key runs, when its first run moved no buffer.
 */
#define BACK_GRAPHS 4
struct back_key {
    size_t n_in;
    double fs_in_hz;
    uint64_t generation;
    size_t k;
    bool encode;
};

struct back_graph {
    cudaGraphExec_t exec[BACK_GRAPHS]; /* NULL: none */
    struct back_key key[BACK_GRAPHS];
    uint64_t last_use[BACK_GRAPHS];
    uint64_t clock;
    struct back_key last;       /* the last back run without a graph, its generation after */
    bool last_clean;            /* ... and whether it moved nothing */
};

#define GPU_STEPS 11
static const char *const gpu_step_names[GPU_STEPS] = {
    "in", "filter", "steps 1-3", "candidates", "decision", "rhythm check", "steps 6-7", "embed",
    "vae", "gather", "out"};

/*
 * Where a lane's time goes (ECG_CUDA_BATCH_TIMES=1 prints it when the batch object is
 * destroyed, at shutdown): seconds in each step of cuda_batch_run, and the part of steps 2
 * and 3 spent waiting for the device. Kept by the lane's own thread: no atomics.
 */
struct batch_times {
    double since;               /* when the batch object was made */
    double front, back, fetch;  /* steps 1, 2, 3 (seconds, all batches) */
    double wait_count, wait_table; /* ... of which waiting for counts / tables */
    double done;                /* ... of step 3: handing members back */
    double front_launch;        /* ... of step 1: cudaGraphLaunch of replayed fronts */
    double back_launch;         /* ... of step 2: cudaGraphLaunch of replayed backs */
    unsigned long long batches, members, front_replays, back_replays;
    unsigned long long small_rows;  /* members whose front ran in a batched short front */
    unsigned long long back_rows;   /* ... and whose back ran in a batched back */
    /* the device's time in the steps of the batched passes (events on their stream, waited
     * for with the pass): copies in, resample + filter, the detector's steps 1-3, candidates,
     * decision, rhythm check and steps 6-7, embedding, VAE + score, tables + quality gathered,
     * copy out */
    cudaEvent_t ev[GPU_STEPS + 1];
    double gpu_ms[GPU_STEPS];
    unsigned long long gpu_passes;
    size_t front_nodes, back_nodes; /* in the last front and back graph captured */
};

struct cuda_batch {
    struct cuda_state *state;
    struct cuda_device *dev;
    unsigned max_batch;
    bool use_graphs;            /* unless ECG_CUDA_BATCH_GRAPHS=0 */
    bool back_graphs;           /* use_graphs, and the encode can be captured */
    struct front_graph *graph;  /* per member context */
    struct back_graph *back;    /* per member context */
    struct cuda_ctx **member;   /* max_batch contexts on dev */
    bool *live;                 /* per member of the batch running: no failure so far */
    float *h_pack;              /* pinned: every member's samples, one after the other */
    size_t h_pack_bytes;
    size_t *off;                /* per member: its first sample in the pack */
    /* the batched short front and back (cuda_small.cuh), unless ECG_CUDA_BATCH_SMALL=0
     * (neither) or =front (the front alone) */
    bool small_fronts, small_backs;
    bool encode_batchable;      /* the model's VAE can run in a batched back */
    int *small_row;             /* per member: its row of the tables, -1: its front runs alone */
    bool *collected;            /* per member: handed back from the batched back */
    struct small_front *h_small, *d_small; /* the fronts' table: pinned, and on the device */
    struct small_back *h_back, *d_back;    /* the backs' table */
    void *d_norms;              /* the backs' scratch: SMALL_BACK_NORM_BYTES per row */
    /* what comes back: 3 counts per row (candidates, accepted, beats), then, after a batched
     * back, each row's table; pinned, and on the device */
    char *h_out, *d_out;
    size_t h_out_bytes, d_out_bytes;
    float *d_pack;              /* the pack on the device */
    size_t d_pack_bytes;
    float *d_emb, *d_latent;    /* a batched back's embedding and latents, per slot */
    double *d_recon;            /* ... and reconstruction errors */
    size_t d_emb_bytes, d_latent_bytes, d_recon_bytes;
    unsigned small_first;       /* the member on whose stream the batched front runs */
    size_t n_small;             /* rows in the batch being run */
    bool back_on;               /* ... and their backs run batched after it */
    unsigned lane;
    struct batch_times times;
};

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
    if (times && *times == '1' && b->times.batches) {
        const struct batch_times *t = &b->times;
        fprintf(stderr,
                "cuda batch lane %u: %llu batches, %llu members over %.3f s; seconds in step 1 "
                "(fronts) %.3f, step 2 (backs) %.3f of which waiting %.3f, step 3 (tables) "
                "%.3f of which waiting %.3f and handing back %.3f; per member %.1f us; a front "
                "graph's launch %.2f us (%zu nodes), a back graph's %.2f us (%zu nodes); %llu fronts in "
                "batched short fronts, %llu backs in batched backs\n",
                b->lane, t->batches, t->members, cuda_now_s() - t->since, t->front, t->back,
                t->wait_count, t->fetch, t->wait_table, t->done,
                1e6 * (t->front + t->back + t->fetch) / (double)t->members,
                t->front_replays ? 1e6 * t->front_launch / (double)t->front_replays : 0.0,
                t->front_nodes,
                t->back_replays ? 1e6 * t->back_launch / (double)t->back_replays : 0.0,
                t->back_nodes, t->small_rows, t->back_rows);
        if (t->gpu_passes) {
            double sum = 0;
            fprintf(stderr, "cuda batch lane %u: device time per batched pass (%llu):", b->lane,
                    t->gpu_passes);
            for (int i = 0; i < GPU_STEPS; i++) {
                fprintf(stderr, " %s %.1f us", gpu_step_names[i],
                        1e3 * t->gpu_ms[i] / (double)t->gpu_passes);
                sum += t->gpu_ms[i];
            }
            fprintf(stderr, ", all %.1f us\n", 1e3 * sum / (double)t->gpu_passes);
        }
    }
    (void)cudaSetDevice(b->dev->ordinal);
    for (int i = 0; i <= GPU_STEPS; i++)
        if (b->times.ev[i])
            (void)cudaEventDestroy(b->times.ev[i]);
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
    if (b->h_back)
        (void)cudaFreeHost(b->h_back);
    if (b->h_out)
        (void)cudaFreeHost(b->h_out);
    void *device_bufs[] = {b->d_small, b->d_back, b->d_norms, b->d_out, b->d_pack,
                           b->d_emb, b->d_latent, b->d_recon};
    for (size_t i = 0; i < sizeof device_bufs / sizeof *device_bufs; i++)
        if (device_bufs[i])
            (void)cudaFree(device_bufs[i]);
    free(b->off);
    free(b->small_row);
    free(b->collected);
    free(b->member);
    free(b->live);
    free(b->graph);
    free(b->back);
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
    b->collected = (bool *)calloc(max_batch, sizeof *b->collected);
    b->use_graphs = !graphs_env || strcmp(graphs_env, "0") != 0;
    b->back_graphs = b->use_graphs && cuda_encode_capturable(state->model);
    b->small_fronts = !small_env || strcmp(small_env, "0") != 0;
    b->small_backs = b->small_fronts && !(small_env && !strcmp(small_env, "front"));
    b->encode_batchable = cuda_encode_batchable(state->model);
    if (!b->member || !b->live || !b->graph || !b->back || !b->off || !b->small_row ||
        !b->collected) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda batch");
        goto out;
    }
    if (b->small_fronts) {
        const size_t fronts = max_batch * sizeof *b->h_small, backs = max_batch * sizeof *b->h_back;
        CUDA_TRY(cudaSetDevice(b->dev->ordinal));
        CUDA_TRY(cudaMallocHost((void **)&b->h_small, fronts));
        CUDA_TRY(cudaMalloc((void **)&b->d_small, fronts));
        CUDA_TRY(cudaMallocHost((void **)&b->h_back, backs));
        CUDA_TRY(cudaMalloc((void **)&b->d_back, backs));
        CUDA_TRY(cudaMalloc(&b->d_norms, max_batch * SMALL_BACK_NORM_BYTES));
    }
    for (unsigned i = 0; i < max_batch; i++)
        ECG_TRY(cuda_ctx_create_on(state, b->dev, true, &b->member[i], err));
    for (int i = 0; times_env && *times_env == '1' && b->small_fronts && i <= GPU_STEPS; i++)
        CUDA_TRY(cudaEventCreate(&b->times.ev[i]));
    *batch_out = b;
    b = NULL;
out:
    cuda_batch_destroy(b);
    return status;
}

/* Grows *buf (a void ** in disguise), pinned host memory or (device) device memory, to hold
 * bytes, with room to spare; what: what it holds, for the error. Called between batches only. */
static enum ecg_status bytes_reserve(void *buf_ptr, size_t *cap, size_t bytes, bool device,
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

/* Records member i's failure: its status and error, retry_alone for a lack of memory. */
static void member_fail(struct cuda_batch *b, struct ecg_batch_member *m, unsigned i,
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
     &(ctx)->vae_work, &(ctx)->rs_table, &(ctx)->ricker}
#define CTX_N_DBUFS 13

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

/* ECG_CUDA_BATCH_TIMES: the end of step i of a batched pass, recorded on its stream. */
static void step_mark(struct cuda_batch *b, cudaStream_t stream, int i)
{
    if (b->times.ev[i] && cudaEventRecord(b->times.ev[i], stream) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ... and, once the pass is waited for, the time between the marks. */
static void step_times(struct cuda_batch *b)
{
    float ms[GPU_STEPS];
    if (!b->times.ev[0] || !b->back_on)
        return;
    for (int i = 0; i < GPU_STEPS; i++)
        if (cudaEventElapsedTime(&ms[i], b->times.ev[i], b->times.ev[i + 1]) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
    for (int i = 0; i < GPU_STEPS; i++)
        b->times.gpu_ms[i] += ms[i];
    b->times.gpu_passes++;
}

/*
 * The batched back's plan for the rows of a batched front (b->h_back, the output's layout,
 * the slots): whether their backs can run batched after it. Every row must fit the back's
 * one-block steps (SMALL_BACK_BEATS candidates, SMALL_BACK_SAMPLES samples) and, when it
 * encodes, the model take the warp path; otherwise their backs run one by one, as before.
 * *out_bytes: the output's size (the counts, then each row's table at its largest);
 * *slots: the beat slots; *max_cap: the largest row's. Each row's counts pointer is left to
 * the caller (the output may move when it grows).
 */
static bool small_back_plan(struct cuda_batch *b, struct ecg_batch_member *const *members,
                            size_t n, size_t rows, size_t *out_bytes, size_t *slots,
                            size_t *max_cap, size_t *max_win, bool *encode)
{
    size_t out = table_align(3 * rows * sizeof(int64_t)), slot = 0, cap_max = 0, win_max = 0;
    bool any_encode = false;
    *out_bytes = out;
    if (!b->small_backs)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (b->small_row[i] < 0)
            continue;
        const struct cuda_ctx *ctx = b->member[i];
        const struct small_front *rec = ctx->small;
        struct small_back *r = &b->h_back[b->small_row[i]];
        struct table_layout t;
        if (rec->max_cand > SMALL_BACK_BEATS || rec->a.n_a > SMALL_BACK_SAMPLES ||
            (members[i]->with_model && !b->encode_batchable))
            return false;
        r->y = rec->a.y;
        r->peaks_a = rec->a.peaks_a;
        r->table = (char *)rec->a.peaks_in; /* the table's start: its r_peak column */
        r->n_a = rec->a.n_a;
        r->n_in = members[i]->n;
        r->cap = rec->max_cand;
        r->slot = slot;
        r->out = out;
        r->encode = members[i]->with_model;
        any_encode = any_encode || r->encode;
        table_layout(r->cap, ctx->latent_dim, &t);
        out += t.bytes;
        slot += r->cap;
        cap_max = r->cap > cap_max ? r->cap : cap_max;
        r->x_off = b->off[i];
        r->quality = ecg_quality_geometry_of(members[i]->n, members[i]->plan->fs_in_hz);
        r->quality_out = out;
        if (r->quality.n_win != members[i]->n_win || !members[i]->windows)
            return false; /* not the engine's windows: its features stay on the host */
        out += table_align(r->quality.n_win * sizeof(struct ecg_quality_window));
        win_max = r->quality.n_win > win_max ? r->quality.n_win : win_max;
    }
    *out_bytes = out;
    *slots = slot;
    *max_cap = cap_max;
    *max_win = win_max;
    *encode = any_encode;
    return true;
}

/* The batched back of the rows of b->h_back (small_back_plan), queued on stream after their
 * front: embedding, VAE and score, the tables gathered into d_out with the quality
 * features of the members' samples. */
static enum ecg_status small_back_queue(struct cuda_batch *b, cudaStream_t stream,
                                        const struct ecg_plan *plan, size_t rows, size_t slots,
                                        size_t max_cap, size_t max_win, size_t max_n_a,
                                        bool encode, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t z = b->member[0]->latent_dim;
    struct small_back_plan p;
    p.pre_r = plan->pre_r > 0 ? (int64_t)plan->pre_r : 1; /* cuda_embed's: an onset before every R */
    p.beat_min = plan->beat_min;
    p.beat_max = plan->beat_max;
    p.up = plan->up;
    p.down = plan->down;
    p.fs_in_hz = plan->fs_in_hz;
    p.beat_len = plan->beat_len;
    p.z_dim = z;
    ECG_TRY(bytes_reserve(&b->d_emb, &b->d_emb_bytes, slots * plan->beat_len * sizeof(float),
                          true, "the batch's embedding", err));
    if (encode) {
        ECG_TRY(bytes_reserve(&b->d_latent, &b->d_latent_bytes, slots * z * sizeof(float), true,
                              "the batch's latents", err));
        ECG_TRY(bytes_reserve(&b->d_recon, &b->d_recon_bytes, slots * sizeof(double), true,
                              "the batch's errors", err));
    }
    ECG_TRY(small_batch_embed(stream, b->d_back, rows, &p, max_cap, max_n_a, b->d_norms,
                              b->d_emb, err));
    step_mark(b, stream, 8);
    if (encode)
        ECG_TRY(small_batch_encode(stream, b->dev, b->state->model, b->d_back, rows, slots,
                                   max_cap, b->d_emb, b->d_latent, b->d_recon, err));
    step_mark(b, stream, 9);
    ECG_TRY(small_batch_gather(stream, b->d_back, rows, z, max_cap, b->d_out, err));
    if (max_win)
        ECG_TRY(small_batch_quality(stream, b->d_back, rows, max_win, b->d_pack, b->d_out, err));
out:
    return status;
}

/*
 * Step 1 for the members whose front can run batched (cuda_small.cuh): those whose context's
 * record is whole for their recording, at the rate of the first of them, when there are at
 * least two (a lone one replays its own graph). Each gets its row of the tables (small_row; -1
 * for the others), and the pack's copy, the batched kernels and the copy of the counts are
 * queued on the first one's stream; then, where small_back_plan allows, their batched back and
 * the copy of their tables with the counts, so that the host waits once for all of it. A
 * failure fails those members (handed back at once).
 */
static void small_front_queue(struct cuda_batch *b, struct ecg_batch_member *const *members,
                              size_t n, size_t total)
{
    enum ecg_status status = ECG_OK;
    struct ecg_error local;
    struct ecg_error *err = &local;
    const struct ecg_plan *plan = NULL;
    size_t rows = 0, max_n_in = 0, max_n_a = 0, max_cand = 0, max_blocks = 0;
    size_t out_bytes = 0, slots = 0, max_cap = 0, max_win = 0;
    bool encode = false;
    cudaStream_t stream = NULL;
    unsigned first = 0;
    memset(&local, 0, sizeof local);
    b->n_small = 0;
    b->back_on = false;
    for (size_t i = 0; i < n; i++)
        b->small_row[i] = -1;
    if (!b->small_fronts || n < 2)
        return;
    for (size_t i = 0; i < n; i++) {
        struct cuda_ctx *ctx = b->member[i];
        const struct ecg_batch_member *m = members[i];
        if (plan && m->plan->fs_in_hz != plan->fs_in_hz)
            continue;
        /* what queue_front does first; a failure here is left to it */
        if (ctx_enter(ctx, &local) != ECG_OK)
            continue;
        ctx_reset_request(ctx);
        if (dbuf_reserve(ctx, &ctx->input, m->n * sizeof(float), &local) != ECG_OK)
            continue;
        ctx->n_in = m->n;
        if (!small_record_whole(ctx, m->n, m->plan->fs_in_hz))
            continue;
        const struct small_front *rec = ctx->small;
        if (!plan) {
            plan = m->plan;
            stream = ctx->stream;
            first = (unsigned)i;
        }
        b->h_small[rows] = *rec;
        b->h_small[rows].off = b->off[i];
        b->small_row[i] = (int)rows++;
        max_n_in = m->n > max_n_in ? m->n : max_n_in;
        max_n_a = rec->a.n_a > max_n_a ? rec->a.n_a : max_n_a;
        max_cand = rec->max_cand > max_cand ? rec->max_cand : max_cand;
        max_blocks = rec->n_blocks > max_blocks ? rec->n_blocks : max_blocks;
    }
    memset(&local, 0, sizeof local);
    if (rows < 2) {
        for (size_t i = 0; i < n; i++)
            b->small_row[i] = -1;
        return;
    }
    ECG_TRY(bytes_reserve(&b->d_pack, &b->d_pack_bytes, total * sizeof(float), true,
                          "the batch's input", err));
    b->back_on =
        small_back_plan(b, members, n, rows, &out_bytes, &slots, &max_cap, &max_win, &encode);
    ECG_TRY(bytes_reserve(&b->d_out, &b->d_out_bytes, out_bytes, true, "the batch's tables",
                          err));
    ECG_TRY(bytes_reserve(&b->h_out, &b->h_out_bytes, out_bytes, false, "the batch's tables",
                          err));
    for (size_t r = 0; b->back_on && r < rows; r++)
        b->h_back[r].counts = (const int64_t *)b->d_out + 3 * r;
    step_mark(b, stream, 0);
    CUDA_TRY(cudaMemcpyAsync(b->d_pack, b->h_pack, total * sizeof(float), cudaMemcpyHostToDevice,
                             stream));
    CUDA_TRY(cudaMemcpyAsync(b->d_small, b->h_small, rows * sizeof *b->h_small,
                             cudaMemcpyHostToDevice, stream));
    if (b->back_on)
        CUDA_TRY(cudaMemcpyAsync(b->d_back, b->h_back, rows * sizeof *b->h_back,
                                 cudaMemcpyHostToDevice, stream));
    step_mark(b, stream, 1);
    ECG_TRY(small_batch_load(stream, b->d_pack, b->d_small, rows, &b->h_small[0], max_n_in,
                             max_n_a, err));
    ECG_TRY(small_batch_filter(stream, b->d_small, rows, max_n_a, plan, err));
    step_mark(b, stream, 2);
    ECG_TRY(small_batch_detect(stream, b->d_small, rows, max_cand, max_blocks,
                               (int64_t *)b->d_out, b->times.ev[0] ? &b->times.ev[3] : NULL,
                               err));
    step_mark(b, stream, 7);
    if (b->back_on)
        ECG_TRY(small_back_queue(b, stream, plan, rows, slots, max_cap, max_win, max_n_a, encode,
                                 err));
    else
        out_bytes = 3 * rows * sizeof(int64_t); /* the counts alone */
    step_mark(b, stream, 10);
    CUDA_TRY(cudaMemcpyAsync(b->h_out, b->d_out, out_bytes, cudaMemcpyDeviceToHost, stream));
    step_mark(b, stream, 11);
    for (size_t i = 0; i < n; i++) {
        if (b->small_row[i] < 0)
            continue;
        /* the host state the front's stages leave; the beat count comes with the counts */
        struct cuda_ctx *ctx = b->member[i];
        ctx->n_a = ctx->small->a.n_a;
        ctx->n_beats = 0;
        ctx->emb_len = 0;
        ctx->encoded = false;
        ctx->detect_queued = false;
    }
    b->small_first = first;
    b->n_small = rows;
    __atomic_fetch_add(&counts.small_fronts, 1ull, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts.small_members, (unsigned long long)rows, __ATOMIC_RELAXED);
    b->times.small_rows += rows;
    if (b->back_on) {
        __atomic_fetch_add(&counts.small_backs, 1ull, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counts.small_back_members, (unsigned long long)rows,
                           __ATOMIC_RELAXED);
        b->times.back_rows += rows;
    }
out:
    if (status != ECG_OK) {
        (void)cudaGetLastError();
        b->back_on = false;
        for (size_t i = 0; i < n; i++) {
            if (b->small_row[i] < 0)
                continue;
            members[i]->err = local;
            member_fail(b, members[i], (unsigned)i, status);
            ecg_batch_member_done(members[i]);
        }
    }
}

/* A member of a batched back, its table on the host: its result, handed back. */
static void small_back_collect(struct cuda_batch *b, struct ecg_batch_member *m, unsigned i)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = b->member[i];
    const struct small_back *r = &b->h_back[b->small_row[i]];
    const size_t k = ctx->n_beats;
    /* the host state its own back would leave (the embedding is the batch's) */
    ctx->emb_len = 0;
    ctx->encoded = m->with_model;
    if (!ecg_batch_result(m, k))
        status = ecg_fail(&m->err, ECG_ERR_NOMEM, "out_of_memory", "result for %zu beats", k);
    else
        status = table_split(b->h_out + r->out, k, ctx->latent_dim, ctx->encoded, m->result,
                             &m->err);
    if (status == ECG_OK) { /* small_back_plan checked that they are the engine's windows */
        memcpy(m->windows, b->h_out + r->quality_out, m->n_win * sizeof *m->windows);
        m->windows_done = true;
    }
    if (status != ECG_OK)
        member_fail(b, m, i, status);
    b->live[i] = false;
    b->collected[i] = true;
    ecg_batch_member_done(m);
}

/* The batched front's end (step 2's start): waits for it and gives its members their beat
 * counts, and, after a batched back, their results (handed back); a failure fails them. */
static void small_front_collect(struct cuda_batch *b, struct ecg_batch_member *const *members,
                                size_t n)
{
    enum ecg_status status = ECG_OK;
    struct ecg_error local;
    struct ecg_error *err = &local;
    double t0;
    memset(&local, 0, sizeof local);
    if (!b->n_small)
        return;
    t0 = cuda_now_s();
    /* the first member's wait: CUDA's own, or ECG_CUDA_BATCH_SPIN_US's (ctx_sync) */
    status = ctx_sync(b->member[b->small_first], "batched front", err);
    b->times.wait_count += cuda_now_s() - t0;
    if (status == ECG_OK)
        step_times(b);
    if (status != ECG_OK)
        (void)cudaGetLastError();
    for (size_t i = 0; i < n; i++) {
        if (!b->live[i] || b->small_row[i] < 0)
            continue;
        if (status != ECG_OK) {
            members[i]->err = local;
            member_fail(b, members[i], (unsigned)i, status);
            ecg_batch_member_done(members[i]);
            continue;
        }
        const int64_t *h_counts = (const int64_t *)b->h_out;
        b->member[i]->n_beats = (size_t)h_counts[3 * (size_t)b->small_row[i] + 2];
        if (b->back_on)
            small_back_collect(b, members[i], (unsigned)i);
    }
}

extern "C" void cuda_batch_run(void *batch_ptr, struct ecg_batch_member *const *members,
                               size_t n)
{
    struct cuda_batch *b = (struct cuda_batch *)batch_ptr;
    size_t total = 0, off = 0;
    enum ecg_status status;
    struct ecg_error pack_err;
    double t0 = cuda_now_s(), t1, t2, t3;

    memset(&pack_err, 0, sizeof pack_err);
    for (size_t i = 0; i < n; i++) {
        members[i]->status = ECG_OK;
        members[i]->result = NULL;
        members[i]->retry_alone = false;
        total += members[i]->n;
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
        off += members[i]->n;
        b->live[i] = true;
        b->collected[i] = false;
    }
    small_front_queue(b, members, n, total);
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
    t1 = cuda_now_s();
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
    b->times.front += t1 - t0;
    b->times.back += t2 - t1;
    b->times.fetch += t3 - t2;
    b->times.batches++;
    b->times.members += n;
    /* A failed member may have left copies from the pack queued: the next batch rewrites it.
     * (A member of a batched back has nothing queued left: its stream was waited for.) */
    for (size_t i = 0; i < n; i++) {
        if (b->live[i] || b->collected[i])
            continue;
        (void)cudaSetDevice(b->dev->ordinal);
        if (cudaStreamSynchronize(b->member[i]->stream) != cudaSuccess)
            (void)cudaGetLastError();
    }
}
