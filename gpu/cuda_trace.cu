/*
 * cuda_trace.cu - kept traces on the device (twin of engine/trace.c's ecg_minmax and of the CPU
 * backend's cpu_trace_* ops): the input signal of an analysis copied out of its worker context
 * into device memory of its own, the min/max decimation computed there, and small windows read
 * back.
 *
 * A trace lives on the device of the ctx that analysed it, in the device's stream-ordered pool
 * (allocated on the ctx's stream, complete before trace_keep returns; freed on the freeing
 * thread's per-thread stream: a plain cudaFree would wait for every stream of the device, and
 * with it for every analysis in flight). Reductions run on the calling thread's per-thread
 * default stream, so any number of HTTP threads may reduce the same trace at once; each call
 * waits for its own work only.
 */
#include <stdlib.h>

#include "cuda_internal.h"

struct cuda_trace {
    int ordinal;
    float *d_x;
    size_t n;
};

/*
 * One block per bucket (grid-stride over buckets); the block's threads stride through the
 * bucket's samples (coalesced), each keeping its first smallest and first largest sample, then
 * a shared-memory tree reduction where equal values go to the smaller index: the same answer as
 * the sequential scan of ecg_minmax().
 */
static __global__ void minmax_kernel(const float *__restrict__ x, size_t start, size_t len,
                                     size_t buckets, struct ecg_minmax *__restrict__ out)
{
    __shared__ float s_vmin[CUDA_THREADS], s_vmax[CUDA_THREADS];
    __shared__ int64_t s_imin[CUDA_THREADS], s_imax[CUDA_THREADS];
    for (size_t b = blockIdx.x; b < buckets; b += gridDim.x) {
        size_t lo = start + (size_t)((uint64_t)len * b / buckets);
        size_t hi = start + (size_t)((uint64_t)len * (b + 1) / buckets);
        float vmin = x[lo], vmax = x[lo];
        int64_t imin = (int64_t)lo, imax = (int64_t)lo;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            float v = x[i];
            if (v < vmin) {
                vmin = v;
                imin = (int64_t)i;
            }
            if (v > vmax) {
                vmax = v;
                imax = (int64_t)i;
            }
        }
        s_vmin[threadIdx.x] = vmin;
        s_vmax[threadIdx.x] = vmax;
        s_imin[threadIdx.x] = imin;
        s_imax[threadIdx.x] = imax;
        __syncthreads();
        for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                unsigned o = threadIdx.x + half;
                if (s_vmin[o] < s_vmin[threadIdx.x] ||
                    (s_vmin[o] == s_vmin[threadIdx.x] && s_imin[o] < s_imin[threadIdx.x])) {
                    s_vmin[threadIdx.x] = s_vmin[o];
                    s_imin[threadIdx.x] = s_imin[o];
                }
                if (s_vmax[o] > s_vmax[threadIdx.x] ||
                    (s_vmax[o] == s_vmax[threadIdx.x] && s_imax[o] < s_imax[threadIdx.x])) {
                    s_vmax[threadIdx.x] = s_vmax[o];
                    s_imax[threadIdx.x] = s_imax[o];
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            out[b].i_min = s_imin[0];
            out[b].i_max = s_imax[0];
            out[b].v_min = s_vmin[0];
            out[b].v_max = s_vmax[0];
        }
        __syncthreads(); /* the shared arrays are reused by the next bucket */
    }
}

static void launch_minmax(const float *d_x, size_t start, size_t end, size_t buckets,
                          struct ecg_minmax *d_out, cudaStream_t stream)
{
    size_t blocks = buckets < 65535u * 8u ? buckets : 65535u * 8u;
    minmax_kernel<<<(unsigned)blocks, CUDA_THREADS, 0, stream>>>(d_x, start, end - start,
                                                                 buckets, d_out);
}

enum ecg_status cuda_trace_keep(void *ctx_ptr, void **trace, size_t *bytes,
                                struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct cuda_trace *t = (struct cuda_trace *)calloc(1, sizeof *t);
    *trace = NULL;
    if (!t)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda trace");
    ECG_TRY(ctx_enter(ctx, err));
    t->ordinal = ctx->dev->ordinal;
    t->n = ctx->n_in;
    CUDA_TRY(cudaMallocAsync((void **)&t->d_x, (t->n ? t->n : 1) * sizeof(float), ctx->stream));
    if (t->n)
        CUDA_TRY(cudaMemcpyAsync(t->d_x, ctx->input.ptr, t->n * sizeof(float),
                                 cudaMemcpyDeviceToDevice, ctx->stream));
    ECG_TRY(ctx_sync(ctx, "trace_keep", err));
    *trace = t;
    *bytes = sizeof *t + t->n * sizeof(float);
    t = NULL;
out:
    cuda_trace_free(t);
    return status;
}

enum ecg_status cuda_trace_minmax(void *trace, size_t start, size_t end, size_t buckets,
                                  struct ecg_minmax *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_trace *t = (struct cuda_trace *)trace;
    struct ecg_minmax *d_out = NULL;
    cudaStream_t stream = cudaStreamPerThread;
    CUDA_TRY(cudaSetDevice(t->ordinal));
    CUDA_TRY(cudaMallocAsync((void **)&d_out, buckets * sizeof *d_out, stream));
    launch_minmax(t->d_x, start, end, buckets, d_out, stream);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cudaMemcpyAsync(out, d_out, buckets * sizeof *d_out, cudaMemcpyDeviceToHost,
                             stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
out:
    if (d_out) {
        (void)cudaFreeAsync(d_out, stream);
        (void)cudaStreamSynchronize(stream);
    }
    return status;
}

enum ecg_status cuda_trace_read(void *trace, size_t start, size_t n, float *host,
                                struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_trace *t = (struct cuda_trace *)trace;
    CUDA_TRY(cudaSetDevice(t->ordinal));
    CUDA_TRY(cudaMemcpyAsync(host, t->d_x + start, n * sizeof(float), cudaMemcpyDeviceToHost,
                             cudaStreamPerThread));
    CUDA_TRY(cudaStreamSynchronize(cudaStreamPerThread));
out:
    return status;
}

void cuda_trace_free(void *trace)
{
    struct cuda_trace *t = (struct cuda_trace *)trace;
    if (!t)
        return;
    if (t->d_x && cudaSetDevice(t->ordinal) == cudaSuccess &&
        cudaFreeAsync(t->d_x, cudaStreamPerThread) == cudaSuccess)
        (void)cudaStreamSynchronize(cudaStreamPerThread);
    (void)cudaGetLastError();
    free(t);
}
