/*
 * cuda_upload.cu - streaming uploads: a request body copied to the device while it arrives, and
 * load_upload, which parses the recording from that copy (cuda_read.cu's parsers) instead of
 * uploading the whole body once it is complete.
 *
 * Flow: upload_begin (an HTTP thread, when the body's buffer is allocated) picks a device
 * round-robin, allocates the buffer's capacity (cap) in device memory and creates an event;
 * upload_progress (the same thread, after each received chunk) queues one H2D copy of the newly
 * final bytes each time CUDA_UPLOAD_STEP of them has gathered, and when the buffer is full, then
 * records the event; load_upload (a worker, with a ctx), the first to know the body's final
 * length len <= cap (a chunked body's end is only known there), queues the copy of
 * [pushed, len), makes the ctx's stream wait for the event and runs the parsers on the device
 * copy of [0, len); upload_free waits for the copies and frees the rest. For a Content-Length
 * body cap is the length and the last progress already pushed everything. A chunked body that
 * outgrows its buffer is freed and begun again on the larger one by the caller (server.c), each
 * upload with its own device memory and event.
 *
 * Streams and ordering: all uploads of a device share its upload_stream (non-blocking; the copy
 * engine serialises them anyway, and they never wait for the network: a copy is queued only for
 * bytes already received). The device memory is allocated and first written in upload_stream
 * order; the ctx's stream reads it only after cudaStreamWaitEvent on the upload's event, recorded
 * after its last copy; load_upload then frees it on the ctx's stream (stream-ordered after the
 * parser's kernels), so it does not stay allocated for the rest of the analysis. Memory that is
 * never handed to a ctx is freed on upload_stream, after the upload's own copies.
 *
 * Host memory: the copies read the caller's pinned buffer until they complete; upload_free waits
 * for them (cudaEventSynchronize of the last recorded event, which follows every earlier copy in
 * the stream; a stream synchronise if a copy was queued but its event could not be recorded), so
 * the caller may reuse the buffer when it returns.
 *
 * Failures: the host buffer is authoritative, so any CUDA failure of the copy only sets failed,
 * and load_upload then reads the host bytes exactly as load_bytes does. A device with more than
 * upload_budget bytes in unanalysed uploads refuses new ones (a queue of big bodies must not take
 * the memory the analyses need).
 *
 * Threading: one thread at a time per upload (backend.h); upload_stream, the device's budget
 * (atomic) and the state's round-robin counter (atomic) are shared. The thread that calls
 * progress must never block on the device: progress only queues work.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

struct cuda_upload {
    struct cuda_device *dev;
    const char *host;        /* the caller's pinned buffer: cap bytes, filled front to back */
    size_t cap;              /* the most bytes the body fills; its length is told to load_upload */
    void *d_bytes;           /* cap bytes on dev, allocated on dev->upload_stream; NULL once
                              * handed to a ctx's stream or freed */
    size_t held;             /* bytes counted in dev->upload_held (released once) */
    size_t pushed;           /* host[0, pushed) has a copy queued */
    size_t fenced;           /* host[0, fenced) has a copy queued before the last event record */
    cudaEvent_t pushed_event;
    bool failed;             /* a CUDA call failed: the device copy is not to be read */
};

/* Returns the upload's bytes to its device's budget (once). */
static void upload_release_budget(struct cuda_upload *up)
{
    if (up->held)
        __atomic_fetch_sub(&up->dev->upload_held, up->held, __ATOMIC_RELAXED);
    up->held = 0;
}

/* Queues the copy of host[pushed, filled) and records the event after it. Never waits; a failure
 * marks the upload failed (and clears the thread's CUDA error, through cuda_fail). */
static void upload_push(struct cuda_upload *up, size_t filled)
{
    enum ecg_status status = ECG_OK;
    struct ecg_error *err = NULL; /* nobody to tell: failed says it */
    if (up->failed || !up->d_bytes || filled <= up->pushed)
        return;
    CUDA_TRY(cudaSetDevice(up->dev->ordinal)); /* the caller's thread may be anywhere */
    CUDA_TRY(cudaMemcpyAsync((char *)up->d_bytes + up->pushed, up->host + up->pushed,
                             filled - up->pushed, cudaMemcpyHostToDevice,
                             up->dev->upload_stream));
    up->pushed = filled;
    CUDA_TRY(cudaEventRecord(up->pushed_event, up->dev->upload_stream));
    up->fenced = filled;
out:
    if (status != ECG_OK)
        up->failed = true;
}

/* ECG_CUDA_STREAM_UPLOADS=0 switches streaming off (bodies are then copied once complete, as
 * before): an operator's escape hatch, and the benchmark's comparison. */
static bool streaming_enabled(void)
{
    const char *v = getenv("ECG_CUDA_STREAM_UPLOADS");
    return !(v && !strcmp(v, "0"));
}

extern "C" enum ecg_status cuda_upload_begin(void *state_ptr, const void *host, size_t cap,
                                             enum ecg_format format, void **up_out,
                                             struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_state *state = (struct cuda_state *)state_ptr;
    struct cuda_upload *up = NULL;
    struct cuda_device *dev;
    void *d_bytes = NULL;
    unsigned slot;
    size_t held;

    *up_out = NULL;
    if (!state || !host || cap < CUDA_UPLOAD_MIN_BYTES || state->n_devices < 1 ||
        !streaming_enabled())
        return ECG_ERR_UNSUPPORTED;
    if (format != ECG_FORMAT_CSV && format != ECG_FORMAT_F32 && format != ECG_FORMAT_F64 &&
        format != ECG_FORMAT_I16 && format != ECG_FORMAT_NPY && format != ECG_FORMAT_EDF &&
        format != ECG_FORMAT_AUTO)
        return ECG_ERR_UNSUPPORTED;
    slot = __atomic_fetch_add(&state->next_upload, 1u, __ATOMIC_RELAXED);
    dev = &state->dev[slot % (unsigned)state->n_devices];
    if (!dev->upload_stream)
        return ECG_ERR_UNSUPPORTED;
    CUDA_TRY(cudaSetDevice(dev->ordinal));
    /* Pageable memory would make cudaMemcpyAsync synchronous: the HTTP thread would block. */
    if (!host_is_pinned(host, cap))
        return ECG_ERR_UNSUPPORTED;
    /* The budget counts what the device holds, cap bytes, whatever the body turns out to be. */
    held = __atomic_add_fetch(&dev->upload_held, cap, __ATOMIC_RELAXED);
    if (held > dev->upload_budget || held < cap) {
        __atomic_fetch_sub(&dev->upload_held, cap, __ATOMIC_RELAXED);
        return ECG_ERR_UNSUPPORTED;
    }
    up = (struct cuda_upload *)calloc(1, sizeof *up);
    if (!up) {
        __atomic_fetch_sub(&dev->upload_held, cap, __ATOMIC_RELAXED);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda: upload");
    }
    up->dev = dev;
    up->host = (const char *)host;
    up->cap = cap;
    up->held = cap;
    CUDA_TRY(cudaEventCreateWithFlags(&up->pushed_event, cudaEventDisableTiming));
    /* Stream-ordered: a pool block freed by an earlier request (or by the upload this one
     * replaces, for a growing chunked body) is reused without a device sync. */
    CUDA_TRY(cudaMallocAsync(&d_bytes, cap, dev->upload_stream));
    up->d_bytes = d_bytes;
    *up_out = up;
    up = NULL;
out:
    if (up) {
        /* the allocation was the last call: nothing holds device memory or reads host */
        if (up->pushed_event)
            (void)cudaEventDestroy(up->pushed_event);
        (void)cudaGetLastError();
        upload_release_budget(up);
        free(up);
    }
    return status;
}

extern "C" void cuda_upload_progress(void *up_ptr, size_t filled)
{
    struct cuda_upload *up = (struct cuda_upload *)up_ptr;
    if (!up)
        return;
    if (filled > up->cap)
        filled = up->cap;
    /* A full buffer is the end of the body (Content-Length: cap is the length); a chunked body
     * that ends short of cap gets its tail pushed by load_upload. */
    if (filled > up->pushed && (filled - up->pushed >= CUDA_UPLOAD_STEP || filled == up->cap))
        upload_push(up, filled);
}

extern "C" bool cuda_upload_prefers_ctx(void *up_ptr, void *ctx_ptr)
{
    const struct cuda_upload *up = (const struct cuda_upload *)up_ptr;
    const struct cuda_ctx *ctx = (const struct cuda_ctx *)ctx_ptr;
    return up && ctx && up->dev == ctx->dev;
}

extern "C" enum ecg_status cuda_load_upload(void *ctx_ptr, void *up_ptr, size_t len,
                                            const struct ecg_read_opts *opts, size_t *n,
                                            double *fs_hz, char lead[32], bool *from_device,
                                            struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct cuda_upload *up = (struct cuda_upload *)up_ptr;
    cudaError_t code;

    *from_device = false;
    if (!ctx || !up)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cuda load_upload: NULL argument");
    if (len > up->cap)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                        "cuda load_upload: length %zu exceeds the capacity of %zu bytes", len,
                        up->cap);
    /* No usable device copy here (a copy failed, another device, already consumed, an empty
     * body): the host bytes, exactly as load_bytes. Left for upload_free to release. */
    if (up->failed || !up->d_bytes || up->dev != ctx->dev || len == 0)
        return cuda_load_bytes(ctx, up->host, len, opts, n, fs_hz, lead, err);
    ECG_TRY(ctx_enter(ctx, err));
    /* The rest, [pushed, len): the tail progress left under a batch, or for a chunked body the
     * bytes since the last batch (a no-op when progress reached len). Bytes pushed past len (a
     * caller that reported more than it then analyses) are copied but never parsed. */
    upload_push(up, len);
    if (!up->failed && up->fenced >= len) {
        code = cudaStreamWaitEvent(ctx->stream, up->pushed_event, 0);
        if (code != cudaSuccess) {
            (void)cudaGetLastError();
            up->failed = true;
        }
    }
    if (up->failed || up->fenced < len)
        return cuda_load_bytes(ctx, up->host, len, opts, n, fs_hz, lead, err);

    /* The ctx's stream now follows every copy: it owns the device bytes from here on, and
     * d_bytes[0, len) equals host[0, len). */
    status = cuda_load_from(ctx, up->host, len, (const char *)up->d_bytes, opts, n, fs_hz,
                            lead, err);
    *from_device = status == ECG_OK;
    /* Freed early, in the ctx's stream order (after the parser's kernels): the analysis's later
     * stages reuse the memory. On any outcome: an UNSUPPORTED parse goes to the host reader,
     * which does not need them either. */
    code = cudaFreeAsync(up->d_bytes, ctx->stream);
    if (code == cudaSuccess) {
        up->d_bytes = NULL;
        upload_release_budget(up);
    } else {
        /* Left for upload_free, which frees on upload_stream: nothing on the ctx's stream may
         * still read them then. */
        (void)cudaGetLastError();
        (void)cudaStreamSynchronize(ctx->stream);
        (void)cudaGetLastError();
        up->failed = true;
    }
    /* Out of device memory with the copy held: without it, today's path may well fit. */
    if (status == ECG_ERR_DEVICE_OOM && !up->d_bytes)
        return cuda_load_bytes(ctx, up->host, len, opts, n, fs_hz, lead, err);
out:
    return status;
}

extern "C" void cuda_upload_free(void *up_ptr)
{
    struct cuda_upload *up = (struct cuda_upload *)up_ptr;
    if (!up)
        return;
    (void)cudaSetDevice(up->dev->ordinal);
    /* The copies read the caller's buffer until they complete: wait for them. The event follows
     * every copy queued before its last record; copies queued after it (the record failed) are
     * waited for with the whole stream. */
    if (up->fenced && cudaEventSynchronize(up->pushed_event) != cudaSuccess)
        (void)cudaGetLastError();
    if (up->pushed > up->fenced && cudaStreamSynchronize(up->dev->upload_stream) != cudaSuccess)
        (void)cudaGetLastError();
    if (up->d_bytes && cudaFreeAsync(up->d_bytes, up->dev->upload_stream) != cudaSuccess) {
        (void)cudaGetLastError();
        if (cudaFree(up->d_bytes) != cudaSuccess) /* synchronous; accepts pool memory */
            (void)cudaGetLastError();
    }
    up->d_bytes = NULL;
    if (up->pushed_event && cudaEventDestroy(up->pushed_event) != cudaSuccess)
        (void)cudaGetLastError();
    upload_release_budget(up);
    free(up);
}
