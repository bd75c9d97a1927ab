/*
 * cuda_resample.cu - the polyphase rational resampler on the device (twin of
 * engine/cpu/resample.c, whose comment defines the computation and the edge rule).
 *
 * Bit-identical to the CPU reference on the same host: the table of reversed, zero-padded
 * polyphase branches is built exactly as the CPU builds it, and each output is the same dot
 * product in the same order of float operations as the CPU path that host would take (the
 * AVX2/FMA path: two 8-lane FMA accumulators and the same horizontal reduction; or the portable
 * path: 8 lanes of separate multiply and add). Edge outputs accumulate in double as on the CPU.
 * Explicit __fmaf_rn / __fmul_rn / __fadd_rn keep nvcc from contracting differently.
 *
 * Threads: one thread per output sample (grid-stride). The branch table sits in shared memory
 * (rows padded to an odd stride) when it fits in 48 KiB (up to 189 branches of 64 taps, e.g.
 * 360 -> 250 Hz has 25); larger tables are read from global memory.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_small.cuh"

#define LANES 8

/* Whether the CPU reference takes its AVX2/FMA paths on this host (resample.c, filter.c). */
extern "C" bool cuda_host_has_avx2_fma(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static __device__ float dot_fma(const float *h, const float *xs, size_t width)
{
    float acc0[LANES], acc1[LANES];
    for (int l = 0; l < LANES; l++)
        acc0[l] = acc1[l] = 0.0f;
    size_t k = 0;
    for (; k + 2 * LANES <= width; k += 2 * LANES) {
        for (int l = 0; l < LANES; l++) {
            acc0[l] = __fmaf_rn(h[k + l], xs[k + l], acc0[l]);
            acc1[l] = __fmaf_rn(h[k + LANES + l], xs[k + LANES + l], acc1[l]);
        }
    }
    if (k < width)
        for (int l = 0; l < LANES; l++)
            acc0[l] = __fmaf_rn(h[k + l], xs[k + l], acc0[l]);
    float a[LANES];
    for (int l = 0; l < LANES; l++)
        a[l] = __fadd_rn(acc0[l], acc1[l]);
    /* 256 -> 128 bits: lanes l and l + 4; then movehl: (0,2) (1,3); then lane 0 + lane 1 */
    float s0 = __fadd_rn(a[0], a[4]), s1 = __fadd_rn(a[1], a[5]);
    float s2 = __fadd_rn(a[2], a[6]), s3 = __fadd_rn(a[3], a[7]);
    return __fadd_rn(__fadd_rn(s0, s2), __fadd_rn(s1, s3));
}

static __device__ float dot_portable(const float *h, const float *xs, size_t width)
{
    float acc[LANES];
    for (int l = 0; l < LANES; l++)
        acc[l] = 0.0f;
    for (size_t k = 0; k < width; k += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] = __fadd_rn(acc[l], __fmul_rn(h[k + l], xs[k + l]));
    return __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[4]), __fadd_rn(acc[1], acc[5])),
                     __fadd_rn(__fadd_rn(acc[2], acc[6]), __fadd_rn(acc[3], acc[7])));
}

/* Output j from the branch table at table (rows of stride floats, a.width used). */
static __device__ float resample_one(const struct resample_args &a, const float *table,
                                     size_t stride, size_t j)
{
    uint64_t m = (uint64_t)j * a.down + a.delay;
    size_t i = (size_t)(m / a.up);
    uint32_t p = (uint32_t)(m % a.up);
    const float *h = table + (size_t)p * stride;
    if (i + 1 >= a.width && i <= a.n - 1) {
        const float *xs = a.x + i + 1 - a.width;
        return a.fma_path ? dot_fma(h, xs, a.width) : dot_portable(h, xs, a.width);
    }
    /* edge hold: input index clamped to [0, n - 1], double accumulation */
    double acc = 0.0;
    for (size_t s = 0; s < a.width; s++) {
        size_t idx = i + 1 + s < a.width ? 0 : i + 1 + s - a.width;
        if (idx > a.n - 1)
            idx = a.n - 1;
        acc = __dadd_rn(acc, __dmul_rn((double)h[s], (double)a.x[idx]));
    }
    return (float)acc;
}

/* The table read from global memory (tables too large for shared memory). */
static __device__ __forceinline__ void resample_body(const struct resample_args &a)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n_out;
         j += (size_t)gridDim.x * blockDim.x)
        a.y[j] = resample_one(a, a.table, a.width, j);
}

static __global__ void resample_kernel(struct resample_args a)
{
    resample_body(a);
}

/*
 * The same computation with the branch table staged in shared memory, rows padded to width + 1
 * floats. Neighbouring outputs use different branches (phases), so in the global-memory kernel
 * one warp-wide load of tap k touched up to `up` rows, i.e. as many cache lines: the loads, not
 * the arithmetic, set its time. With the odd row stride, tap k of the rows falls in different
 * shared-memory banks. Identical arithmetic, identical results.
 */
static __device__ __forceinline__ void resample_smem_body(const struct resample_args &a,
                                                          float *table)
{
    const size_t stride = a.width + 1;
    for (size_t v = threadIdx.x; v < (size_t)a.up * a.width; v += blockDim.x)
        table[(v / a.width) * stride + v % a.width] = a.table[v];
    __syncthreads();
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n_out;
         j += (size_t)gridDim.x * blockDim.x)
        a.y[j] = resample_one(a, table, stride, j);
}

static __global__ void resample_smem_kernel(struct resample_args a)
{
    extern __shared__ float table[];
    resample_smem_body(a, table);
}

/* The batched front's (cuda_small.cuh): member blockIdx.y's samples from the batch's to its
 * input, and to its resampled signal as well when there is no resampling. */
static __global__ void small_scatter_kernel(const float *samples, const struct small_front *ms)
{
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    const float *from = samples + m->off;
    const size_t n = m->rs.n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = from[i];
        m->input[i] = v;
        if (m->identity)
            m->rs.y[i] = v;
    }
}

static __global__ void resample_batch_kernel(const struct small_front *ms)
{
    pdl_step_begin();
    resample_body(ms[blockIdx.y].rs);
}

static __global__ void resample_smem_batch_kernel(const struct small_front *ms)
{
    extern __shared__ float table[];
    pdl_step_begin();
    resample_smem_body(ms[blockIdx.y].rs, table);
}

#define RESAMPLE_SMEM_MAX (48u << 10)

/* The smem kernel's blocks for n_out outputs: resident blocks (each stages the table once),
 * grid-stride over the outputs. */
static unsigned smem_blocks(size_t n_out)
{
    size_t blocks = (n_out + CUDA_THREADS - 1) / CUDA_THREADS;
    if (blocks > 4096)
        blocks = 4096;
    return (unsigned)(blocks ? blocks : 1);
}

static size_t table_smem(const struct resample_args *args)
{
    return (size_t)args->up * (args->width + 1) * sizeof(float);
}

static enum ecg_status launch_resample(cudaStream_t stream, const struct resample_args *args,
                                       struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t smem = table_smem(args);
    if (smem <= RESAMPLE_SMEM_MAX)
        resample_smem_kernel<<<smem_blocks(args->n_out), CUDA_THREADS, smem, stream>>>(*args);
    else
        resample_kernel<<<grid_for(args->n_out), CUDA_THREADS, 0, stream>>>(*args);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_load(cudaStream_t stream, const float *samples,
                                 const struct small_front *members, size_t k,
                                 const struct small_front *first, size_t max_n_in,
                                 size_t max_n_a, bool scatter, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    if (scatter)
        CUDA_TRY(pdl_launch(dim3(grid_for(max_n_in), (unsigned)k), CUDA_THREADS, 0, stream,
                            small_scatter_kernel, samples, members));
    if (first->identity)
        goto out;
    if (table_smem(&first->rs) <= RESAMPLE_SMEM_MAX)
        CUDA_TRY(pdl_launch(dim3(smem_blocks(max_n_a), (unsigned)k), CUDA_THREADS,
                            table_smem(&first->rs), stream, resample_smem_batch_kernel,
                            members));
    else
        CUDA_TRY(pdl_launch(dim3(grid_for(max_n_a), (unsigned)k), CUDA_THREADS, 0, stream,
                            resample_batch_kernel, members));
out:
    return status;
}

/* Records the resampler's part of ctx's short front (cuda_small.cuh). */
static void record_resample(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                            const struct resample_args *args)
{
    struct small_front *s = ctx->n_extra ? ctx->small : small_record(ctx);
    if (!s)
        return;
    if (ctx->n_extra) { /* several leads: no batched front may reuse the record */
        s->rs_n_in = 0;
        return;
    }
    s->rs = *args;
    s->identity = plan->up == 1 && plan->down == 1;
    s->input = (float *)ctx->input.ptr;
    s->fs_in_hz = plan->fs_in_hz;
    s->rs_n_in = ctx->n_in;
    s->rs_generation = ctx->generation;
}

extern "C" enum ecg_status cuda_resample(void *ctx_ptr, const struct ecg_plan *plan,
                                         struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct resample_args args;
    size_t n_out, branch_len, width, table_bytes;
    float *h_table = NULL;
    ECG_TRY(ctx_enter(ctx, err));
    n_out = ecg_plan_resampled_len(plan, ctx->n_in);
    ECG_TRY(dbuf_reserve(ctx, &ctx->resampled, (n_out ? n_out : 1) * sizeof(float), err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->filtered, (n_out ? n_out : 1) * sizeof(float), err));
    ctx->n_a = n_out;
    ctx->n_beats = 0;
    if (n_out == 0)
        goto out;
    if (ctx->n_extra) {
        ECG_TRY(dbuf_reserve(ctx, &ctx->extra_resampled, ctx->n_extra * n_out * sizeof(float),
                             err));
        ECG_TRY(dbuf_reserve(ctx, &ctx->extra_filtered, ctx->n_extra * n_out * sizeof(float),
                             err));
    }
    if (plan->up == 1 && plan->down == 1) {
        memset(&args, 0, sizeof args);
        args.x = (const float *)ctx->input.ptr;
        args.n = ctx->n_in;
        args.y = (float *)ctx->resampled.ptr;
        args.n_out = n_out;
        record_resample(ctx, plan, &args);
        CUDA_TRY(cudaMemcpyAsync(ctx->resampled.ptr, ctx->input.ptr, n_out * sizeof(float),
                                 cudaMemcpyDeviceToDevice, ctx->stream));
        if (ctx->n_extra)
            CUDA_TRY(cudaMemcpyAsync(ctx->extra_resampled.ptr, ctx->extra_input.ptr,
                                     ctx->n_extra * n_out * sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx->stream));
        ECG_TRY(ctx_stage_done(ctx, "resample", err));
        goto out;
    }
    if (!plan->fir || plan->fir_len == 0 || plan->up == 0 || plan->down == 0) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal", "cuda_resample: plan has no filter");
        goto out;
    }
    /* The table exactly as resample.c lays it out, built on the host; uploaded only when it
     * differs from the one the ctx's previous request left on the device (a service mostly sees
     * one rate, and the upload would cost a synchronisation per request). */
    branch_len = (plan->fir_len + plan->up - 1) / plan->up;
    width = (branch_len + LANES - 1) / LANES * LANES;
    table_bytes = (size_t)plan->up * width * sizeof(float);
    h_table = (float *)malloc(table_bytes);
    if (!h_table) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "resampler table");
        goto out;
    }
    for (uint32_t p = 0; p < plan->up; p++) {
        for (size_t s = 0; s < width; s++) {
            size_t k = p + (size_t)plan->up * (width - 1 - s);
            h_table[(size_t)p * width + s] = k < plan->fir_len ? plan->fir[k] : 0.0f;
        }
    }
    if (ctx->rs_table_bytes != table_bytes || memcmp(ctx->h_rs_table, h_table, table_bytes)) {
        ctx->generation++;
        ctx->rs_table_bytes = 0;
        free(ctx->h_rs_table);
        ctx->h_rs_table = h_table;
        h_table = NULL;
        ECG_TRY(stage_reserve(ctx, table_bytes, err));
        ECG_TRY(dbuf_reserve(ctx, &ctx->rs_table, table_bytes, err));
        /* the staging buffer may still feed an earlier copy: wait for the stream first */
        ECG_TRY(ctx_sync(ctx, "resample", err));
        memcpy(ctx->h_stage, ctx->h_rs_table, table_bytes);
        CUDA_TRY(cudaMemcpyAsync(ctx->rs_table.ptr, ctx->h_stage, table_bytes,
                                 cudaMemcpyHostToDevice, ctx->stream));
        ctx->rs_table_bytes = table_bytes;
    }
    args.x = (const float *)ctx->input.ptr;
    args.n = ctx->n_in;
    args.table = (const float *)ctx->rs_table.ptr;
    args.width = width;
    args.up = plan->up;
    args.down = plan->down;
    args.delay = plan->fir_delay;
    args.y = (float *)ctx->resampled.ptr;
    args.n_out = n_out;
    args.fma_path = cuda_host_has_avx2_fma();
    record_resample(ctx, plan, &args);
    ECG_TRY(launch_resample(ctx->stream, &args, err));
    for (size_t l = 0; l < ctx->n_extra; l++) { /* the further leads, likewise */
        args.x = (const float *)ctx->extra_input.ptr + l * ctx->n_in;
        args.y = (float *)ctx->extra_resampled.ptr + l * n_out;
        ECG_TRY(launch_resample(ctx->stream, &args, err));
    }
    ECG_TRY(ctx_stage_done(ctx, "resample", err));
out:
    free(h_table);
    return status;
}
