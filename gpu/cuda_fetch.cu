/*
 * cuda_fetch.cu - the beat table back to the host (fetch, in two halves for the batches of
 * cuda_batch.cu: fetch_queue and fetch_copy) and the test hooks read_buf/write_buf, which copy
 * a stage's buffer out or replace it (backend.h). Moved out of cuda_backend.cu unchanged.
 */
#include <string.h>

#include "cuda_internal.h"
#include "cuda_small.cuh"

/* Member blockIdx.y's table (its layout for its count: a multiple of 256 bytes, 256-aligned at
 * both ends) to its place in the batch's output, 16 bytes a thread, and its 3 counts to the
 * output's start. */
static __global__ void gather_batch_kernel(const struct small_back *members, size_t z_dim,
                                           char *out)
{
    pdl_step_begin();
    const struct small_back *m = &members[blockIdx.y];
    if (blockIdx.x == 0 && threadIdx.x < 3)
        ((int64_t *)out)[3 * (size_t)blockIdx.y + threadIdx.x] = m->counts[threadIdx.x];
    struct table_layout t;
    table_layout((size_t)m->counts[2], z_dim, &t);
    const uint4 *src = (const uint4 *)m->table;
    uint4 *dst = (uint4 *)(out + m->out);
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < t.bytes / sizeof(uint4);
         v += (size_t)gridDim.x * blockDim.x)
        dst[v] = src[v];
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_gather(cudaStream_t stream, const struct small_back *members,
                                   size_t k, size_t z_dim, size_t max_cap, char *out,
                                   struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct table_layout t;
    table_layout(max_cap, z_dim, &t);
    CUDA_TRY(pdl_launch(dim3(grid_for(t.bytes / sizeof(uint4)), (unsigned)k), CUDA_THREADS, 0,
                        stream, gather_batch_kernel, members, z_dim, out));
out:
    return status;
}

enum ecg_status fetch_queue(struct cuda_ctx *ctx, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct table_layout t;
    if (ctx->n_beats == 0)
        goto out;
    table_layout(ctx->n_beats, ctx->latent_dim, &t);
    ECG_TRY(stage_reserve(ctx, t.bytes, err));
    /* One copy of the whole table, split on the host by fetch_copy. */
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, ctx->table.ptr, t.bytes, cudaMemcpyDeviceToHost,
                             ctx->stream));
out:
    return status;
}

enum ecg_status fetch_copy(struct cuda_ctx *ctx, struct ecg_result *result,
                           struct ecg_error *err)
{
    enum ecg_status status = ctx_sync(ctx, "fetch", err);
    return status == ECG_OK ? fetch_split(ctx, result, err) : status;
}

enum ecg_status fetch_split(struct cuda_ctx *ctx, struct ecg_result *result,
                            struct ecg_error *err)
{
    for (size_t l = 0; l < ctx->n_agree && l < ECG_MAX_LEADS; l++)
        result->lead_agree[l] = ctx->lead_agree[l]; /* detect_counts took them */
    return table_split((const char *)ctx->h_stage, ctx->n_beats, ctx->latent_dim, ctx->encoded,
                       result, err);
}

enum ecg_status table_split(const char *h, size_t k, size_t z, bool encoded,
                            struct ecg_result *result, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct table_layout t;
    if (result->n_beats != k) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda fetch: result has %zu beats, device has %zu", result->n_beats, k);
        goto out;
    }
    if (k == 0)
        goto out;
    if (result->latent && !encoded) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal", "cuda fetch: scores before encode");
        goto out;
    }
    table_layout(k, z, &t);
    memcpy(result->r_peak, h + t.r_peak, k * sizeof(int64_t));
    memcpy(result->onset, h + t.onset, k * sizeof(int64_t));
    memcpy(result->end, h + t.end, k * sizeof(int64_t));
    memcpy(result->rr_ms, h + t.rr_ms, k * sizeof(float));
    memcpy(result->likeness, h + t.likeness, k * sizeof(float));
    memcpy(result->crest, h + t.crest, k * sizeof(float));
    memcpy(result->kept, h + t.kept, k);
    if (result->latent && z)
        memcpy(result->latent, h + t.latent, k * z * sizeof(float));
    if (result->score)
        memcpy(result->score, h + t.score, k * sizeof(float));
    if (result->outlier)
        memcpy(result->outlier, h + t.outlier, k);
out:
    return status;
}

extern "C" enum ecg_status cuda_fetch(void *ctx_ptr, struct ecg_result *result, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    ECG_TRY(ctx_enter(ctx, err));
    if (result->n_beats != ctx->n_beats) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda fetch: result has %zu beats, device has %zu", result->n_beats,
                          ctx->n_beats);
        goto out;
    }
    if (ctx->n_beats == 0)
        goto out;
    ECG_TRY(fetch_queue(ctx, err));
    ECG_TRY(fetch_copy(ctx, result, err));
out:
    return status;
}

/* Where a stage buffer lives on the device, its element size and current length. */
static void stage_buf_where(struct cuda_ctx *ctx, enum ecg_stage_buf which, void **d_ptr,
                            size_t *elem, size_t *len)
{
    struct table_layout t;
    table_layout(ctx->n_beats, ctx->latent_dim, &t);
    char *table = (char *)ctx->table.ptr;
    *d_ptr = NULL;
    *elem = sizeof(float);
    *len = 0;
    switch (which) {
    case ECG_BUF_INPUT: *d_ptr = ctx->input.ptr; *len = ctx->n_in; break;
    case ECG_BUF_RESAMPLED: *d_ptr = ctx->resampled.ptr; *len = ctx->n_a; break;
    case ECG_BUF_FILTERED: *d_ptr = ctx->filtered.ptr; *len = ctx->n_a; break;
    case ECG_BUF_PEAKS:
        *d_ptr = table ? table + t.r_peak : NULL;
        *elem = sizeof(int64_t);
        *len = ctx->n_beats;
        break;
    case ECG_BUF_EMBED: *d_ptr = ctx->emb.ptr; *len = ctx->emb_len; break;
    case ECG_BUF_LATENT:
        *d_ptr = table ? table + t.latent : NULL;
        *len = ctx->encoded ? ctx->n_beats * ctx->latent_dim : 0;
        break;
    case ECG_BUF_SCORE:
        *d_ptr = table ? table + t.score : NULL;
        *len = ctx->encoded ? ctx->n_beats : 0;
        break;
    case ECG_BUF_COUNT: break;
    }
}

extern "C" enum ecg_status cuda_read_buf(void *ctx_ptr, enum ecg_stage_buf which, void *host,
                                     size_t cap, size_t *n, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    void *d_ptr;
    size_t elem, len, copy;
    ECG_TRY(ctx_enter(ctx, err));
    if ((unsigned)which >= ECG_BUF_COUNT) {
        status = ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cuda read_buf: buffer %d",
                          (int)which);
        goto out;
    }
    stage_buf_where(ctx, which, &d_ptr, &elem, &len);
    *n = len;
    copy = len < cap ? len : cap;
    if (copy && d_ptr) {
        CUDA_TRY(cudaMemcpyAsync(host, d_ptr, copy * elem, cudaMemcpyDeviceToHost, ctx->stream));
        ECG_TRY(ctx_sync(ctx, "read_buf", err));
    }
out:
    return status;
}

extern "C" enum ecg_status cuda_write_buf(void *ctx_ptr, enum ecg_stage_buf which, const void *host,
                                      size_t n, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct dbuf *target = NULL;
    ECG_TRY(ctx_enter(ctx, err));
    switch (which) {
    case ECG_BUF_INPUT:
        ctx_reset_request(ctx);
        target = &ctx->input;
        ctx->n_in = n;
        break;
    case ECG_BUF_RESAMPLED:
        target = &ctx->resampled;
        ctx->n_a = n;
        break;
    case ECG_BUF_FILTERED:
        target = &ctx->filtered;
        ctx->n_a = n;
        break;
    case ECG_BUF_EMBED:
        target = &ctx->emb;
        ctx->emb_len = n;
        break;
    case ECG_BUF_PEAKS:
    case ECG_BUF_LATENT:
    case ECG_BUF_SCORE:
    case ECG_BUF_COUNT:
        status = ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                          "cuda write_buf: buffer %d cannot be injected", (int)which);
        goto out;
    }
    ECG_TRY(dbuf_reserve(ctx, target, n * sizeof(float), err));
    if (n)
        ECG_TRY(upload_bytes(ctx, target->ptr, host, n * sizeof(float), err));
    ECG_TRY(ctx_sync(ctx, "write_buf", err));
out:
    return status;
}
