/*
 * cuda_backend.cu - the CUDA backend's table of operations (backend.h): device discovery and
 * the per-process CUDA contexts, model upload, per-worker contexts (stream, cuDNN handle,
 * buffers), loading samples (fetch and the test hooks read_buf/write_buf: cuda_fetch.cu).
 *
 * One CUDA primary context per device, created at open and reused by every request. With
 * config->device == -1 every visible device (as CUDA_VISIBLE_DEVICES leaves them) gets one
 * and ctx_create deals workers out over them round-robin; otherwise only that ordinal is used.
 * Each device also gets the stream that carries streaming uploads (cuda_upload.cu) and their
 * memory budget. The stage kernels live in the other gpu/ sources (see cuda_internal.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"
#include "cuda_vae.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- errors */

const char *cufft_result_str(cufftResult code)
{
    switch (code) {
    case CUFFT_SUCCESS: return "success";
    case CUFFT_INVALID_PLAN: return "invalid plan handle";
    case CUFFT_ALLOC_FAILED: return "failed to allocate GPU or CPU memory";
    case CUFFT_INVALID_TYPE: return "invalid type";
    case CUFFT_INVALID_VALUE: return "invalid pointer or parameter";
    case CUFFT_INTERNAL_ERROR: return "driver or internal cuFFT library error";
    case CUFFT_EXEC_FAILED: return "failed to execute an FFT on the GPU";
    case CUFFT_SETUP_FAILED: return "the cuFFT library failed to initialize";
    case CUFFT_INVALID_SIZE: return "invalid transform size";
    case CUFFT_UNALIGNED_DATA: return "unaligned data";
    case CUFFT_INVALID_DEVICE: return "plan executed on a different GPU than it was made on";
    case CUFFT_NO_WORKSPACE: return "no work area provided";
    case CUFFT_NOT_IMPLEMENTED: return "functionality not implemented";
    case CUFFT_NOT_SUPPORTED: return "operation not supported for the parameters";
    case CUFFT_MISSING_DEPENDENCY: return "a dependency library is missing";
    case CUFFT_NVRTC_FAILURE: return "NVRTC failure";
    case CUFFT_NVJITLINK_FAILURE: return "nvJitLink failure";
    case CUFFT_NVSHMEM_FAILURE: return "NVSHMEM failure";
    }
    return "unknown cuFFT result";
}

/* Strips the directory from __FILE__ so messages read "cuda_filter.cu:88". */
static const char *base_name(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

enum ecg_status cuda_fail(struct ecg_error *err, cudaError_t code, const char *file, int line,
                          const char *call)
{
    /* Clear a non-sticky error so the next request on this thread starts clean. */
    (void)cudaGetLastError();
    bool oom = code == cudaErrorMemoryAllocation;
    return ecg_fail(err, oom ? ECG_ERR_DEVICE_OOM : ECG_ERR_DEVICE,
                    oom ? "device_oom" : "cuda_error", "%s:%d: %s: %s (%s)", base_name(file),
                    line, call, cudaGetErrorString(code), cudaGetErrorName(code));
}

enum ecg_status cufft_fail(struct ecg_error *err, cufftResult code, const char *file, int line,
                           const char *call)
{
    (void)cudaGetLastError();
    bool oom = code == CUFFT_ALLOC_FAILED;
    return ecg_fail(err, oom ? ECG_ERR_DEVICE_OOM : ECG_ERR_DEVICE,
                    oom ? "device_oom" : "cufft_error", "%s:%d: %s: cuFFT error %d: %s",
                    base_name(file), line, call, (int)code, cufft_result_str(code));
}

enum ecg_status cudnn_fail(struct ecg_error *err, cudnnStatus_t code, const char *file, int line,
                           const char *call)
{
    (void)cudaGetLastError();
    bool oom = code == CUDNN_STATUS_ALLOC_FAILED;
    return ecg_fail(err, oom ? ECG_ERR_DEVICE_OOM : ECG_ERR_DEVICE,
                    oom ? "device_oom" : "cudnn_error", "%s:%d: %s: %s", base_name(file), line,
                    call, cudnnGetErrorString(code));
}

/* ---------------------------------------------------------------- buffers */

enum ecg_status dbuf_reserve(struct cuda_ctx *ctx, struct dbuf *buf, size_t bytes,
                             struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    size_t cap = 0;
    if (bytes <= buf->cap && buf->ptr)
        return ECG_OK;
    /* Grow by at least a quarter so slowly growing requests do not reallocate each time. */
    cap = bytes + bytes / 4;
    if (cap < 4096)
        cap = 4096;
    ctx->generation++;
    if (buf->ptr) {
        CUDA_TRY(cudaFreeAsync(buf->ptr, ctx->stream));
        buf->ptr = NULL;
        buf->cap = 0;
    }
    CUDA_TRY(cudaMallocAsync(&buf->ptr, cap, ctx->stream));
    buf->cap = cap;
out:
    if (status == ECG_ERR_DEVICE_OOM) {
        /* Hand cached blocks back and say how much was asked for. */
        (void)cudaMemPoolTrimTo(ctx->dev->pool, 0);
        ecg_fail(err, ECG_ERR_DEVICE_OOM, "device_oom",
                 "device %d (%s): out of memory allocating %zu MiB for this request",
                 ctx->dev->ordinal, ctx->dev->name, (bytes + (1u << 20) - 1) >> 20);
    }
    return status;
}

void dbuf_release(struct cuda_ctx *ctx, struct dbuf *buf)
{
    if (buf->ptr)
        (void)cudaFreeAsync(buf->ptr, ctx->stream);
    buf->ptr = NULL;
    buf->cap = 0;
}

enum ecg_status stage_reserve(struct cuda_ctx *ctx, size_t bytes, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    if (bytes <= ctx->h_stage_cap && ctx->h_stage)
        return ECG_OK;
    ctx->generation++;
    if (ctx->h_stage) {
        /* a copy queued earlier may still read or write it (a batch's contexts do not wait at
         * the end of each stage) */
        ECG_TRY(ctx_sync(ctx, "staging", err));
        CUDA_TRY(cudaFreeHost(ctx->h_stage));
        ctx->h_stage = NULL;
        ctx->h_stage_cap = 0;
    }
    bytes += bytes / 4 + 4096;
    CUDA_TRY(cudaMallocHost(&ctx->h_stage, bytes));
    ctx->h_stage_cap = bytes;
out:
    if (status == ECG_ERR_DEVICE_OOM)
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                          "cannot pin %zu MiB of host memory for staging", bytes >> 20);
    return status;
}

/* True when host memory [p, p + len) is page-locked (ecg_engine_host_alloc), so the device can
 * DMA from it directly. Checks both ends; a wrong "true" would only make the copy slower. */
bool host_is_pinned(const void *p, size_t len)
{
    const char *ends[2] = {(const char *)p, (const char *)p + len - 1};
    for (int i = 0; i < 2; i++) {
        struct cudaPointerAttributes attr;
        if (cudaPointerGetAttributes(&attr, ends[i]) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        if (attr.type != cudaMemoryTypeHost)
            return false;
    }
    return true;
}

/* Pieces of a staging copy taken by one thread, and the most threads a copy uses. One core
 * copies pageable memory at well under the PCIe rate (7 GB/s on the H100 host: 11 ms for a
 * 20M-sample recording); a few copying side by side keep up with the DMA. */
#define STAGE_PIECE (1u << 20)
#define STAGE_THREADS 8

/* memcpy between host buffers (a staging chunk and its pageable source or destination), split
 * across threads (OpenMP) when it is several pieces long. */
void stage_copy(void *dst, const void *src, size_t len)
{
    size_t pieces = (len + STAGE_PIECE - 1) / STAGE_PIECE;
#ifdef _OPENMP
    int threads = omp_get_max_threads() < STAGE_THREADS ? omp_get_max_threads() : STAGE_THREADS;
#pragma omp parallel for schedule(static) if (pieces > 1 && threads > 1) num_threads(threads)
#endif
    for (size_t p = 0; p < pieces; p++) {
        size_t off = p * STAGE_PIECE, n = len - off < STAGE_PIECE ? len - off : STAGE_PIECE;
        memcpy((char *)dst + off, (const char *)src + off, n);
    }
}

enum ecg_status upload_bytes(struct cuda_ctx *ctx, void *d_dst, const void *src, size_t len,
                             struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    size_t off = 0;
    unsigned which = 0;
    if (len && host_is_pinned(src, len)) {
        /* Pinned source: one DMA straight from it, no staging memcpy. Waited for, so that the
         * caller may reuse src on return as with the staged path below. */
        CUDA_TRY(cudaMemcpyAsync(d_dst, src, len, cudaMemcpyHostToDevice, ctx->stream));
        CUDA_TRY(cudaStreamSynchronize(ctx->stream));
        goto out;
    }
    if (len && !ctx->h_chunk[0]) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda: a batch's context has no staging for pageable memory");
        goto out;
    }
    while (off < len) {
        size_t chunk = len - off < CUDA_STAGE_CHUNK ? len - off : CUDA_STAGE_CHUNK;
        /* Wait until the DMA that last read this half is done, then refill it. */
        CUDA_TRY(cudaEventSynchronize(ctx->chunk_free[which]));
        stage_copy(ctx->h_chunk[which], (const char *)src + off, chunk);
        CUDA_TRY(cudaMemcpyAsync((char *)d_dst + off, ctx->h_chunk[which], chunk,
                                 cudaMemcpyHostToDevice, ctx->stream));
        CUDA_TRY(cudaEventRecord(ctx->chunk_free[which], ctx->stream));
        off += chunk;
        which ^= 1u;
    }
out:
    return status;
}

enum ecg_status ctx_enter(struct cuda_ctx *ctx, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    if (!ctx)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cuda: NULL context");
    CUDA_TRY(cudaSetDevice(ctx->dev->ordinal));
out:
    return status;
}

/* Spin, then block: what ctx's stream has queued so far is done when this returns. The poll
 * keeps a short wait off the scheduler (no sleep, no wake-up); a long one sleeps instead of
 * holding a core that the HTTP and worker threads need. */
static cudaError_t wait_spin_then_block(struct cuda_ctx *ctx)
{
    cudaError_t code = cudaEventRecord(ctx->wait_event, ctx->stream);
    if (code != cudaSuccess)
        return code;
    const double deadline = cuda_now_s() + ctx->spin_us * 1e-6;
    while ((code = cudaEventQuery(ctx->wait_event)) == cudaErrorNotReady) {
        if (cuda_now_s() >= deadline)
            return cudaEventSynchronize(ctx->wait_event);
    }
    return code;
}

enum ecg_status ctx_sync(struct cuda_ctx *ctx, const char *stage, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    cudaError_t code = ctx->wait_event ? wait_spin_then_block(ctx)
                                       : cudaStreamSynchronize(ctx->stream);
    if (code != cudaSuccess) {
        status = cuda_fail(err, code, __FILE__, __LINE__, stage);
    }
    return status;
}

enum ecg_status ctx_stage_done(struct cuda_ctx *ctx, const char *stage, struct ecg_error *err)
{
    return ctx->defer_sync ? ECG_OK : ctx_sync(ctx, stage, err);
}

/* ---------------------------------------------------------------- open / close */

static void device_fini(struct cuda_device *dev)
{
    if (!dev->model.d_weights && !dev->upload_stream)
        return;
    (void)cudaSetDevice(dev->ordinal);
    if (dev->model.d_weights) {
        (void)cudaFree(dev->model.d_weights);
        dev->model.d_weights = NULL;
    }
    if (dev->upload_stream) {
        /* Every upload was freed before the engine (ecg.h): nothing reads the stream now. */
        (void)cudaStreamSynchronize(dev->upload_stream);
        (void)cudaStreamDestroy(dev->upload_stream);
        dev->upload_stream = NULL;
    }
}

/*
 * How a host thread waits for the device (cudaStreamSynchronize and the like), chosen by
 * ECG_CUDA_SYNC before the context exists: "spin" (busy-wait: lowest latency, one core per
 * waiting worker), "yield" (spin, yielding the core between polls), "block" (sleep until the
 * device signals: frees the cores for the HTTP threads and the CPU-side work of other requests,
 * at the cost of a wake-up per wait), or unset: CUDA's heuristic, which spins while there are
 * fewer active contexts than cores. A context already active keeps its flags.
 */
static void sync_policy_apply(void)
{
    const char *policy = getenv("ECG_CUDA_SYNC");
    unsigned flags;
    if (!policy || !*policy)
        return;
    if (!strcmp(policy, "spin"))
        flags = cudaDeviceScheduleSpin;
    else if (!strcmp(policy, "yield"))
        flags = cudaDeviceScheduleYield;
    else if (!strcmp(policy, "block"))
        flags = cudaDeviceScheduleBlockingSync;
    else
        return;
    if (cudaSetDeviceFlags(flags) != cudaSuccess)
        (void)cudaGetLastError();
}

static enum ecg_status device_init(struct cuda_device *dev, int ordinal,
                                   const struct ecg_model *model, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cudaDeviceProp prop;
    uint64_t keep = CUDA_POOL_KEEP_BYTES;
    dev->ordinal = ordinal;
    CUDA_TRY(cudaSetDevice(ordinal));
    sync_policy_apply();
    CUDA_TRY(cudaFree(0)); /* creates the primary context now, not in the first request */
    CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
    snprintf(dev->name, sizeof dev->name, "%s", prop.name);
    dev->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    dev->vae_warp_per_sm = vae_warp_blocks_per_sm();
    CUDA_TRY(cudaDeviceGetDefaultMemPool(&dev->pool, ordinal));
    CUDA_TRY(cudaMemPoolSetAttribute(dev->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    /* Non-blocking: request bodies' copies never wait for the legacy default stream. */
    CUDA_TRY(cudaStreamCreateWithFlags(&dev->upload_stream, cudaStreamNonBlocking));
    dev->upload_budget = prop.totalGlobalMem / 8 < CUDA_UPLOAD_BUDGET_MAX
                             ? prop.totalGlobalMem / 8
                             : CUDA_UPLOAD_BUDGET_MAX;
    dev->upload_held = 0;
    if (model) {
        size_t bytes = model->layout.n_weights * sizeof(float);
        CUDA_TRY(cudaMalloc(&dev->model.d_weights, bytes));
        CUDA_TRY(cudaMemcpy(dev->model.d_weights, model->weights, bytes,
                            cudaMemcpyHostToDevice));
    }
out:
    return status;
}

static void cuda_close(void *state_ptr)
{
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    if (!state)
        return;
    for (int i = 0; i < state->n_devices; i++)
        device_fini(&state->dev[i]);
    free(state);
}

/* Visible devices (0 where none, or no driver), for ecg_cuda_device_visible() (engine/backends.c):
 * the engine's defaults are decided before an engine exists. */
extern "C" int cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

/* Batchers per device: config->batch_lanes (0 = ECG_BATCH_LANES_DEFAULT), unless
 * ECG_CUDA_BATCH_LANES (1..8) says otherwise. One thread queues a batch's launches; more lanes
 * queue batches side by side (4 measured best on an H100 host, bench/RESULTS.md). */
static unsigned lanes_per_device(const struct ecg_engine_config *config)
{
    const char *v = getenv("ECG_CUDA_BATCH_LANES");
    long n = config && config->batch_lanes ? (long)config->batch_lanes
                                            : (long)ECG_BATCH_LANES_DEFAULT;
    if (v && *v)
        n = strtol(v, NULL, 10);
    return n < 1 ? 1u : n > (long)ECG_BATCH_LANES_MAX ? ECG_BATCH_LANES_MAX : (unsigned)n;
}

static enum ecg_status cuda_open(const struct ecg_engine_config *config, void **state_out,
                                 struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_state *state = NULL;
    int count = 0, first = 0, runtime = 0, driver = 0;
    cudaError_t code;

    *state_out = NULL;
    code = cudaGetDeviceCount(&count);
    if (code != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        return ecg_fail(err, ECG_ERR_DEVICE, "no_device", "no usable CUDA device: %s",
                        code != cudaSuccess ? cudaGetErrorString(code) : "none visible");
    }
    state = (struct cuda_state *)calloc(1, sizeof *state);
    if (!state)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda: backend state");
    state->model = config ? config->model : NULL;
    state->lanes_per_device = lanes_per_device(config);
    if (config && config->device >= 0) {
        if (config->device >= count) {
            status = ecg_fail(err, ECG_ERR_DEVICE, "no_device",
                              "CUDA device %d requested but only %d visible", config->device,
                              count);
            goto out;
        }
        first = config->device;
        count = 1;
    }
    if (count > CUDA_MAX_DEVICES)
        count = CUDA_MAX_DEVICES;
    for (int i = 0; i < count; i++) {
        /* counted first, so that cuda_close() also releases a device whose init failed midway */
        state->n_devices = i + 1;
        ECG_TRY(device_init(&state->dev[i], first + i, state->model, err));
    }
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    snprintf(state->description, sizeof state->description, "%s%s, CUDA %d.%d (driver %d.%d)",
             state->dev[0].name, count > 1 ? " (and more)" : "", runtime / 1000,
             (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10);
    if (count > 1) {
        char more[32];
        snprintf(more, sizeof more, " x%d", count);
        char *p = strstr(state->description, " (and more)");
        if (p) {
            size_t tail = strlen(p + 11);
            memmove(p + strlen(more), p + 11, tail + 1);
            memcpy(p, more, strlen(more));
        }
    }
    *state_out = state;
    state = NULL;
out:
    cuda_close(state);
    return status;
}

static const char *cuda_device_name(void *state_ptr)
{
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    return state ? state->description : "cuda";
}

/* ---------------------------------------------------------------- contexts */

void cuda_ctx_free(struct cuda_ctx *ctx)
{
    if (!ctx)
        return;
    (void)cudaSetDevice(ctx->dev->ordinal);
    if (ctx->stream)
        (void)cudaStreamSynchronize(ctx->stream);
    cuda_filter_release(ctx);
    struct dbuf *bufs[] = {&ctx->input,   &ctx->resampled, &ctx->filtered, &ctx->peaks_a,
                           &ctx->table,   &ctx->emb,       &ctx->scratch,  &ctx->cub_temp,
                           &ctx->fft_buf, &ctx->fft_work,  &ctx->vae_work, &ctx->rs_table,
                           &ctx->extra_input, &ctx->extra_resampled, &ctx->extra_filtered,
                           &ctx->ricker, &ctx->beat_crest};
    if (ctx->stream) {
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            dbuf_release(ctx, bufs[i]);
        (void)cudaStreamSynchronize(ctx->stream);
    }
    for (int i = 0; i < 2; i++) {
        if (ctx->h_chunk[i])
            (void)cudaFreeHost(ctx->h_chunk[i]);
        if (ctx->chunk_free[i])
            (void)cudaEventDestroy(ctx->chunk_free[i]);
    }
    if (ctx->h_stage)
        (void)cudaFreeHost(ctx->h_stage);
    if (ctx->wait_event)
        (void)cudaEventDestroy(ctx->wait_event);
    free(ctx->h_rs_table);
    free(ctx->h_ricker);
    free(ctx->small);
    if (ctx->cudnn)
        (void)cudnnDestroy(ctx->cudnn);
    if (ctx->stream)
        (void)cudaStreamDestroy(ctx->stream);
    free(ctx);
}

static void cuda_ctx_destroy(void *ctx_ptr)
{
    cuda_ctx_free((struct cuda_ctx *)ctx_ptr);
}

enum ecg_status cuda_ctx_create_on(struct cuda_state *state, struct cuda_device *dev, bool batch,
                                   struct cuda_ctx **ctx_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = NULL;

    *ctx_out = NULL;
    ctx = (struct cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda: worker context");
    ctx->state = state;
    ctx->dev = dev;
    ctx->defer_sync = batch;
    CUDA_TRY(cudaSetDevice(ctx->dev->ordinal));
    CUDA_TRY(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    if (batch) {
        /* ECG_CUDA_BATCH_SPIN_US=N: the batcher's waits spin N us, then sleep (unset: CUDA's
         * own way, cudaStreamSynchronize under the device's flags, ECG_CUDA_SYNC) */
        const char *spin = getenv("ECG_CUDA_BATCH_SPIN_US");
        char *end = NULL;
        double spin_us = spin && *spin ? strtod(spin, &end) : -1.0;
        if (spin_us >= 0 && spin_us <= 1e6 && end && !*end) {
            CUDA_TRY(cudaEventCreateWithFlags(&ctx->wait_event,
                                              cudaEventDisableTiming | cudaEventBlockingSync));
            ctx->spin_us = spin_us;
        }
    }
    /* a batch's inputs are in the batch's pinned memory: no staging chunks (16 MiB pinned) */
    for (int i = 0; i < 2 && !batch; i++) {
        CUDA_TRY(cudaMallocHost(&ctx->h_chunk[i], CUDA_STAGE_CHUNK));
        CUDA_TRY(cudaEventCreateWithFlags(&ctx->chunk_free[i], cudaEventDisableTiming));
    }
    if (state->model && !batch) { /* a batch's: made by cuda_encode if the cuDNN path runs */
        CUDNN_TRY(cudnnCreate(&ctx->cudnn));
        CUDNN_TRY(cudnnSetStream(ctx->cudnn, ctx->stream));
    }
    *ctx_out = ctx;
    ctx = NULL;
out:
    cuda_ctx_free(ctx);
    return status;
}

static enum ecg_status cuda_ctx_create(void *state_ptr, void **ctx_out, struct ecg_error *err)
{
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    struct cuda_ctx *ctx = NULL;
    unsigned slot = __atomic_fetch_add(&state->next_ctx, 1u, __ATOMIC_RELAXED);
    enum ecg_status status = cuda_ctx_create_on(
        state, &state->dev[slot % (unsigned)state->n_devices], false, &ctx, err);
    *ctx_out = ctx;
    return status;
}

/* ---------------------------------------------------------------- load */

void ctx_reset_request(struct cuda_ctx *ctx)
{
    ctx->n_in = ctx->n_a = ctx->n_beats = ctx->emb_len = ctx->n_extra = 0;
    ctx->encoded = false;
    ctx->latent_dim = ctx->state->model ? ctx->state->model->arch.latent_dim : 0;
}

static enum ecg_status cuda_load(void *ctx_ptr, const float *samples, size_t n,
                                 struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    ECG_TRY(ctx_enter(ctx, err));
    ctx_reset_request(ctx);
    ECG_TRY(dbuf_reserve(ctx, &ctx->input, n * sizeof(float), err));
    ECG_TRY(upload_bytes(ctx, ctx->input.ptr, samples, n * sizeof(float), err));
    ECG_TRY(ctx_sync(ctx, "load", err));
    ctx->n_in = n;
out:
    return status;
}

/* The further leads of the recording just loaded: uploaded side by side, lead i at i * n. */
extern "C" enum ecg_status cuda_load_extra(void *ctx_ptr, const float *const *leads,
                                           size_t n_leads, size_t n, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    ECG_TRY(ctx_enter(ctx, err));
    ctx->n_extra = 0;
    if (n != ctx->n_in || n_leads >= ECG_MAX_LEADS) {
        status = ecg_fail(err, ECG_ERR_ARG, "bad_argument", "%zu extra leads of %zu samples",
                          n_leads, n);
        goto out;
    }
    ECG_TRY(dbuf_reserve(ctx, &ctx->extra_input,
                         (n_leads * n > 0 ? n_leads * n : 1) * sizeof(float), err));
    for (size_t i = 0; i < n_leads; i++) {
        ECG_TRY(upload_bytes(ctx, (float *)ctx->extra_input.ptr + i * n, leads[i],
                             n * sizeof(float), err));
    }
    ECG_TRY(ctx_sync(ctx, "load", err));
    ctx->n_extra = n_leads;
out:
    return status;
}

/* ---------------------------------------------------------------- pinned host memory */

/* Bodies smaller than this stay in pageable memory and go through the context's pinned staging
 * chunks: cudaHostAlloc costs milliseconds and serialises with the device, which under many
 * small concurrent requests set the tail latency (p99 565 ms at 64 clients), while the staging
 * copy of a small body costs microseconds. */
#define CUDA_PIN_MIN_BYTES ((size_t)1 << 20)

/* Page-locked host memory, portable to every device's context, so that upload_bytes DMAs
 * straight from it, for bodies of at least CUDA_PIN_MIN_BYTES. Falls back to malloc when pinning
 * fails (the caller still gets memory, only the staged upload); cuda_host_free tells the two
 * apart. */
static void *cuda_host_alloc(void *state_ptr, size_t bytes)
{
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    void *ptr = NULL;
    if (bytes < CUDA_PIN_MIN_BYTES)
        return malloc(bytes);
    if (state && cudaSetDevice(state->dev[0].ordinal) == cudaSuccess &&
        cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable) == cudaSuccess)
        return ptr;
    (void)cudaGetLastError();
    return malloc(bytes);
}

static void cuda_host_free(void *state_ptr, void *ptr)
{
    (void)state_ptr;
    if (!ptr)
        return;
    if (host_is_pinned(ptr, 1))
        (void)cudaFreeHost(ptr);
    else
        free(ptr);
}

/* ---------------------------------------------------------------- statistics */

int cuda_memory_stats(size_t *used_now, size_t *used_peak, size_t *reserved_peak)
{
    const int count = cuda_device_count();
    *used_now = *used_peak = *reserved_peak = 0;
    for (int i = 0; i < count; i++) {
        cudaMemPool_t pool;
        uint64_t v = 0;
        if (cudaDeviceGetDefaultMemPool(&pool, i) != cudaSuccess)
            continue;
        if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess)
            *used_now += v;
        if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaSuccess)
            *used_peak += v;
        if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v) == cudaSuccess)
            *reserved_peak += v;
    }
    return count;
}

void cuda_memory_reset_peak(void)
{
    const int count = cuda_device_count();
    for (int i = 0; i < count; i++) {
        cudaMemPool_t pool;
        uint64_t zero = 0;
        if (cudaDeviceGetDefaultMemPool(&pool, i) != cudaSuccess)
            continue;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
    }
}

/* ---------------------------------------------------------------- the table */

extern "C" const struct ecg_backend_ops ecg_cuda_backend = {
    /* .name = */ "cuda",
    /* .open = */ cuda_open,
    /* .close = */ cuda_close,
    /* .device = */ cuda_device_name,
    /* .ctx_create = */ cuda_ctx_create,
    /* .ctx_destroy = */ cuda_ctx_destroy,
    /* .load = */ cuda_load,
    /* .load_bytes = */ cuda_load_bytes,
    /* .load_extra = */ cuda_load_extra,
    /* .resample = */ cuda_resample,
    /* .filter = */ cuda_filter,
    /* .detect = */ cuda_detect,
    /* .embed = */ cuda_embed,
    /* .encode = */ cuda_encode,
    /* .quality = */ cuda_quality,
    /* .fetch = */ cuda_fetch,
    /* .read_buf = */ cuda_read_buf,
    /* .write_buf = */ cuda_write_buf,
    /* .host_alloc = */ cuda_host_alloc,
    /* .host_free = */ cuda_host_free,
    /* .upload_begin = */ cuda_upload_begin,
    /* .upload_progress = */ cuda_upload_progress,
    /* .upload_free = */ cuda_upload_free,
    /* .upload_prefers_ctx = */ cuda_upload_prefers_ctx,
    /* .load_upload = */ cuda_load_upload,
    /* .trace_keep = */ cuda_trace_keep,
    /* .trace_minmax = */ cuda_trace_minmax,
    /* .trace_read = */ cuda_trace_read,
    /* .trace_free = */ cuda_trace_free,
    /* .batch_lanes = */ cuda_batch_lanes,
    /* .batch_create = */ cuda_batch_create,
    /* .batch_run = */ cuda_batch_run,
    /* .batch_destroy = */ cuda_batch_destroy,
    /* .batch_launch = */ cuda_batch_launch,
    /* .batch_ready = */ cuda_batch_ready,
    /* .batch_finish = */ cuda_batch_finish,
    /* .stages_on_device = */ true,
};
