/*
 * cuda_batch_small.cu - the batched short pass of a dynamic batch (cuda_batch.cu's step 1 and
 * the start of its step 2): the members whose lead takes the short path run their fronts, and
 * then their backs with the quality features of their samples, as one launch per step for all
 * of them (cuda_small.cuh), every count and table written back to pinned host memory by the
 * pass's last kernels, one wait. The kernels after the copy in replay as one CUDA graph once
 * their shape has run before (struct pass_graph); the quality features and the normalisation,
 * which need only the samples and the filtered leads, run on a side branch beside the
 * detection, and the beats' likeness, which needs the detection's beats, on the same branch
 * beside the embedding and the VAE.
 */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "cuda_batch.cuh"

static const char *const gpu_step_names[GPU_STEPS] = {
    "in", "scatter", "direct", "band", "steps 1-4", "mark", "decision", "merge", "mark",
    "steps 5-7", "join", "embed", "vae", "score", "gather", "out"};

const char *small_step_name(int i)
{
    return i >= 0 && i < GPU_STEPS ? gpu_step_names[i] : "?";
}

/* Whether a batched pass's first kernel scatters the samples to each member's input: with
 * ECG_CUDA_BATCH_SCATTER=1, or where the backs run member by member (they read their contexts'
 * buffers); otherwise the rows read them in place (small_front_queue). */
static bool pass_scatters(const struct cuda_batch *b, bool back)
{
    return b->scatter || !back;
}

/* Where the backs' table starts after `rows` rows of the fronts' (bytes, aligned for it). */
static size_t back_rows_offset(size_t rows)
{
    const size_t align = alignof(struct small_back) > 16 ? alignof(struct small_back) : 16;
    return (rows * sizeof(struct small_front) + align - 1) / align * align;
}

/* Contract in cuda_batch.cuh. */
size_t small_rows_bytes(unsigned max_batch)
{
    return back_rows_offset(max_batch) + max_batch * sizeof(struct small_back);
}

/* ECG_CUDA_BATCH_TIMES=1: the end of step i of a batched pass, on its stream (small_mark);
 * =3: of steps 1 and 15 alone (=3:K: and K). */
static void step_mark(struct cuda_batch *b, cudaStream_t stream, int i)
{
    if (b->times.ev[i])
        small_mark(b->times.ev[i], stream);
}

/* ... and, once the pass is waited for, the time between the marks. */
static void step_times(struct cuda_batch *b)
{
    float ms[GPU_STEPS];
    if (b->times.ends_only && b->back_on) {
        if (cudaEventElapsedTime(&ms[0], b->times.ev[1], b->times.ev[15]) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        if (b->times.split &&
            cudaEventElapsedTime(&ms[1], b->times.ev[1], b->times.ev[b->times.split]) !=
                cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        b->times.pass_ms += ms[0];
        b->times.split_ms += b->times.split ? ms[1] : 0.0;
        b->times.gpu_passes++;
        return;
    }
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
        r->beat_crest = rec->a.beat_crest;
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

/* The batched back's buffers (embedding, latents, errors) for slots beat slots: reserved
 * before any of the pass is queued, so that the pass's launches move nothing (a graph holds
 * their addresses). */
static enum ecg_status back_reserve(struct cuda_batch *b, const struct ecg_plan *plan,
                                    size_t slots, bool encode, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t z = b->member[0]->latent_dim;
    ECG_TRY(bytes_reserve(&b->d_emb, &b->d_emb_bytes, slots * plan->beat_len * sizeof(float),
                          true, "the batch's embedding", err));
    if (encode) {
        ECG_TRY(bytes_reserve(&b->d_latent, &b->d_latent_bytes, slots * z * sizeof(float), true,
                              "the batch's latents", err));
        ECG_TRY(bytes_reserve(&b->d_recon, &b->d_recon_bytes, slots * sizeof(double), true,
                              "the batch's errors", err));
    }
out:
    return status;
}

/*
 * The batched pass of shape s on stream, after the copies in (and before the counts' copy out
 * when the backs do not run): the front's kernels for the rows of b->d_small, then, when
 * s->back, the back's for the rows of b->d_back (small_back_plan): embedding, VAE and score,
 * the counts and tables gathered into pinned h_out (through h_out_dev) with the quality
 * features of the members' samples. What a pass graph holds (struct pass_graph); its launches
 * depend on s and plan's rate alone. The step marks are ECG_CUDA_BATCH_TIMES=1's (in a graph,
 * event nodes).
 */
static enum ecg_status pass_launches(struct cuda_batch *b, cudaStream_t stream,
                                     const struct ecg_plan *plan, const struct pass_key *s,
                                     struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t z = b->member[0]->latent_dim;
    struct small_back_plan p;
    bool forked = false;
    /* the side branch (on the pass's own stream, in line, with ECG_CUDA_BATCH_BRANCH=0) */
    const cudaStream_t side = b->branch ? b->side : stream;
    if (s->back && b->branch) { /* the side branch: the quality features need only the pack */
        CUDA_TRY(cudaEventRecord(b->fork, stream));
        CUDA_TRY(cudaStreamWaitEvent(side, b->fork, 0));
        forked = true;
    }
    if (s->back && s->max_win)
        ECG_TRY(small_batch_quality(side, b->d_back, s->rows, s->max_win, b->d_pack,
                                    b->h_out_dev, err));
    ECG_TRY(small_batch_load(stream, b->d_pack, b->d_small, s->rows, &b->h_small[0],
                             s->max_n_in, s->max_n_a, pass_scatters(b, s->back), err));
    step_mark(b, stream, 2);
    ECG_TRY(small_batch_filter(stream, b->d_small, s->rows, s->max_n_a, plan, b->times.ev[3],
                               err));
    step_mark(b, stream, 4);
    if (s->back) { /* ... and the normalisation, which needs only the filtered lead */
        if (forked) {
            CUDA_TRY(cudaEventRecord(b->filtered, stream));
            CUDA_TRY(cudaStreamWaitEvent(side, b->filtered, 0));
        }
        ECG_TRY(small_batch_norm(side, b->d_back, s->rows, s->max_n_a, b->d_norms, err));
    }
    ECG_TRY(small_batch_detect(stream, b->d_small, s->rows, s->max_cand, s->max_blocks,
                               (int64_t *)b->d_out, b->times.ev[0] ? &b->times.ev[5] : NULL,
                               err));
    step_mark(b, stream, 10);
    if (!s->back)
        goto out;
    if (forked) {
        CUDA_TRY(cudaEventRecord(b->join, side));
        CUDA_TRY(cudaStreamWaitEvent(stream, b->join, 0));
        forked = false;
    }
    step_mark(b, stream, 11); /* the normalisation: what the detection waited for the branch */
    small_back_plan_of(plan, z, &p);
    if (b->branch) { /* the beats' likeness, beside the embedding and the VAE */
        CUDA_TRY(cudaEventRecord(b->detected, stream));
        CUDA_TRY(cudaStreamWaitEvent(side, b->detected, 0));
        forked = true;
    }
    ECG_TRY(small_batch_likeness(side, b->d_back, s->rows, &p, s->max_cap, b->d_pack, err));
    ECG_TRY(small_batch_embed(stream, b->d_back, s->rows, &p, s->max_cap, b->d_norms, b->d_emb,
                              err));
    step_mark(b, stream, 12);
    if (s->encode)
        ECG_TRY(small_batch_encode(stream, b->dev, b->state->model, b->d_back, s->rows, s->slots,
                                   b->d_emb, b->d_latent, b->d_recon, b->times.ev[13], err));
    else
        step_mark(b, stream, 13);
    step_mark(b, stream, 14);
    if (forked) {
        CUDA_TRY(cudaEventRecord(b->join, side));
        CUDA_TRY(cudaStreamWaitEvent(stream, b->join, 0));
        forked = false;
    }
    ECG_TRY(small_batch_gather(stream, b->d_back, s->rows, z, s->max_cap, b->h_out_dev, err));
out:
    if (forked) { /* a failure left the branch open: join it (a capture must end joined) */
        if (cudaEventRecord(b->join, b->side) != cudaSuccess ||
            cudaStreamWaitEvent(stream, b->join, 0) != cudaSuccess)
            (void)cudaGetLastError();
    }
    return status;
}

/* The entry of b->pass for key: *found when it has one, else one made for it (an unused
 * entry, else the least recently used one's, its graph destroyed). */
static struct pass_graph *pass_entry(struct cuda_batch *b, const struct pass_key *key,
                                     bool *found)
{
    struct pass_graph *pick = &b->pass[0];
    for (unsigned i = 0; i < PASS_GRAPHS; i++) {
        struct pass_graph *g = &b->pass[i];
        if (g->used && !memcmp(&g->key, key, sizeof *key)) {
            *found = true;
            return g;
        }
        if (pick->used && (!g->used || g->last_use < pick->last_use))
            pick = g;
    }
    *found = false;
    if (pick->exec)
        (void)cudaGraphExecDestroy(pick->exec);
    memset(pick, 0, sizeof *pick);
    pick->key = *key;
    pick->used = true;
    return pick;
}

/* Captures the pass of shape s into *exec (not launched); ECG_ERR_UNSUPPORTED when it could
 * not be made (nothing was queued). */
static enum ecg_status pass_capture(struct cuda_batch *b, cudaStream_t stream,
                                    const struct ecg_plan *plan, const struct pass_key *s,
                                    cudaGraphExec_t *exec)
{
    struct ecg_error ignored;
    cudaGraph_t graph = NULL;
    enum ecg_status status;
    cudaError_t code;
    memset(&ignored, 0, sizeof ignored);
    *exec = NULL;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return ECG_ERR_UNSUPPORTED;
    }
    status = pass_launches(b, stream, plan, s, &ignored);
    code = cudaStreamEndCapture(stream, &graph);
    if (status != ECG_OK || code != cudaSuccess || !graph ||
        cudaGraphInstantiate(exec, graph, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        *exec = NULL;
        if (graph)
            (void)cudaGraphDestroy(graph);
        return ECG_ERR_UNSUPPORTED;
    }
    if (cudaGraphGetNodes(graph, NULL, &b->times.pass_nodes) != cudaSuccess) {
        (void)cudaGetLastError();
        b->times.pass_nodes = 0;
    }
    (void)cudaGraphDestroy(graph);
    return ECG_OK;
}

/* The pass of shape s on stream: its graph replayed when there is one, captured when the shape
 * ran before (struct pass_graph), else launch by launch. Sets b->pass_ran. */
static enum ecg_status pass_run(struct cuda_batch *b, cudaStream_t stream,
                                const struct ecg_plan *plan, const struct pass_key *s,
                                struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct pass_graph *g;
    bool found = false;
    double t0;
    b->pass_ran = 0;
    if (!b->pass_graphs)
        return pass_launches(b, stream, plan, s, err);
    g = pass_entry(b, s, &found);
    g->last_use = ++b->pass_clock;
    if (g->exec) {
        t0 = cuda_now_s();
        CUDA_TRY(cudaGraphLaunch(g->exec, stream));
        b->times.pass_launch += cuda_now_s() - t0;
        b->times.pass_replays++;
        b->pass_ran = 1;
        goto out;
    }
    if (!found || g->failed)
        return pass_launches(b, stream, plan, s, err);
    if (pass_capture(b, stream, plan, s, &g->exec) != ECG_OK) {
        g->failed = true; /* its shape runs launch by launch from now on */
        return pass_launches(b, stream, plan, s, err);
    }
    b->pass_ran = 2;
    CUDA_TRY(cudaGraphLaunch(g->exec, stream));
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
void small_front_queue(struct cuda_batch *b, struct ecg_batch_member *const *members,
                              size_t n, size_t total)
{
    enum ecg_status status = ECG_OK;
    struct ecg_error local;
    struct ecg_error *err = &local;
    const struct ecg_plan *plan = NULL;
    struct pass_key s;           /* the pass's shape (memcmp'd: zeroed first) */
    size_t rows = 0, out_bytes = 0;
    cudaStream_t stream = NULL;
    unsigned first = 0;
    memset(&local, 0, sizeof local);
    memset(&s, 0, sizeof s);
    b->n_small = 0;
    b->back_on = false;
    b->pass_ran = 0;
    for (size_t i = 0; i < n; i++)
        b->small_row[i] = -1;
    if (!b->small_fronts || n < 2)
        return;
    const double t0 = cuda_now_s();
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
        s.max_n_in = m->n > s.max_n_in ? m->n : s.max_n_in;
        s.max_n_a = rec->a.n_a > s.max_n_a ? rec->a.n_a : s.max_n_a;
        s.max_cand = rec->max_cand > s.max_cand ? rec->max_cand : s.max_cand;
        s.max_blocks = rec->n_blocks > s.max_blocks ? rec->n_blocks : s.max_blocks;
    }
    b->times.rows += cuda_now_s() - t0;
    memset(&local, 0, sizeof local);
    if (rows < 2) {
        for (size_t i = 0; i < n; i++)
            b->small_row[i] = -1;
        return;
    }
    /* the backs' rows right after the fronts' (one copy takes both) */
    b->h_back = (struct small_back *)((char *)b->h_small + back_rows_offset(rows));
    b->d_back = (struct small_back *)((char *)b->d_small + back_rows_offset(rows));
    ECG_TRY(bytes_reserve(&b->d_pack, &b->d_pack_bytes, total * sizeof(float), true,
                          "the batch's input", err));
    b->back_on = small_back_plan(b, members, n, rows, &out_bytes, &s.slots, &s.max_cap,
                                 &s.max_win, &s.encode);
    if (!b->back_on)
        out_bytes = 3 * rows * sizeof(int64_t); /* the counts alone */
    ECG_TRY(bytes_reserve(&b->d_out, &b->d_out_bytes, out_bytes, true, "the batch's tables",
                          err));
    ECG_TRY(bytes_reserve(&b->h_out, &b->h_out_bytes, out_bytes, false, "the batch's tables",
                          err));
    CUDA_TRY(cudaHostGetDevicePointer((void **)&b->h_out_dev, b->h_out, 0));
    if (b->back_on)
        ECG_TRY(back_reserve(b, plan, s.slots, s.encode, err));
    /* With the backs batched too, each row reads its member's samples where the pack's copy
     * puts them, and, at the analysis rate (no resampling), its resampled lead too: the values
     * the scatter would copy to its input (and resampled) buffer, read in place, so the pass
     * starts with the resampler or the filter. Only the rows (copies of the records) point
     * there; the records keep their contexts' buffers. Nothing writes to what they read: the
     * resampler writes its context's resampled buffer, and the steps read their input and
     * resampled lead only. A back run member by member reads its context's buffers: those
     * are scattered to first. */
    for (size_t r = 0; !pass_scatters(b, b->back_on) && r < rows; r++) {
        struct small_front *row = &b->h_small[r];
        float *x = b->d_pack + row->off;
        row->rs.x = x;
        row->a.x = x;
        if (row->identity) {
            row->rs.y = x;
            row->a.y = x;
            b->h_back[r].y = x;
        }
    }
    for (size_t r = 0; b->back_on && r < rows; r++)
        b->h_back[r].counts = (const int64_t *)b->d_out + 3 * r;
    s.rows = rows;
    s.back = b->back_on;
    s.fs_in_hz = plan->fs_in_hz;
    s.plan = plan;
    s.bufs[0] = b->d_pack;
    s.bufs[1] = b->d_small;
    s.bufs[2] = b->d_out;
    s.bufs[3] = b->d_emb;
    s.bufs[4] = b->d_latent;
    s.bufs[5] = b->d_recon;
    s.bufs[6] = b->d_norms;
    s.bufs[7] = b->h_out_dev;
    step_mark(b, stream, 0);
    CUDA_TRY(cudaMemcpyAsync(b->d_pack, b->h_pack, total * sizeof(float), cudaMemcpyHostToDevice,
                             stream));
    CUDA_TRY(cudaMemcpyAsync(b->d_small, b->h_small,
                             b->back_on ? back_rows_offset(rows) + rows * sizeof *b->h_back
                                        : rows * sizeof *b->h_small,
                             cudaMemcpyHostToDevice, stream));
    step_mark(b, stream, 1);
    ECG_TRY(pass_run(b, stream, plan, &s, err));
    b->pass_launched = cuda_now_s();
    step_mark(b, stream, 15);
    /* After a batched back its last kernels have written everything to h_out already (mapped:
     * the writes go over the bus as they are made, the actual tables only, not each one's
     * room); the counts alone are copied */
    if (!b->back_on)
        CUDA_TRY(cudaMemcpyAsync(b->h_out, b->d_out, out_bytes, cudaMemcpyDeviceToHost, stream));
    step_mark(b, stream, 16);
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
    b->times.small_rows += rows;
    if (b->back_on)
        b->times.back_rows += rows;
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

/* Sleeps until cuda_now_s() reaches t (ECG_CUDA_BATCH_DOZE_US), with the thread's timer slack
 * at 1 us (Linux's default, 50 us, would overshoot the pass). */
static void doze_until(double t)
{
    static __thread bool slack_set;
    struct timespec ts;
    if (!slack_set) {
        (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = true;
    }
    if (t <= cuda_now_s())
        return;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* A member of a batched back, its table on the host: its result, handed back. */
static void small_back_collect(struct cuda_batch *b, struct ecg_batch_member *m, unsigned i)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = b->member[i];
    const struct small_back *r = &b->h_back[b->small_row[i]];
    const size_t k = ctx->n_beats;
    const double t0 = cuda_now_s();
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
    const double t1 = cuda_now_s();
    b->times.small_split += t1 - t0;
    ecg_batch_member_done(m);
    b->times.small_done += cuda_now_s() - t1;
}

/* The batched front's end (step 2's start): waits for it and gives its members their beat
 * counts, and, after a batched back, their results (handed back); a failure fails them. */
void small_front_collect(struct cuda_batch *b, struct ecg_batch_member *const *members,
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
    if (b->doze_us > 0)
        doze_until(b->pass_launched + b->doze_us * 1e-6);
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
