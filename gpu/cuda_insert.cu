/*
 * cuda_insert.cu - the rhythm check after the decision on the device (twin of
 * engine/cpu/insert.c; engine/cpu/insert_core.h has the method, compiled here for the device).
 * Steps, on the ctx's stream, after cuda_decide() has flagged the beats among the candidates:
 *   1. the flagged candidates' indices, ascending (cub::DeviceSelect::Flagged)
 *   2. their positions and heights                             one thread per beat
 *   3. each beat's verdict, from the decision's beats alone    one thread per beat
 *   4. the flags of the insertions cleared                     one thread per beat
 * A short lead takes the four steps in one block (insert_small_kernel; insert_small_body is
 * cuda_detect_common.cuh's, which a batched pass runs in steps 6-7's block).
 */
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "cpu/insert_core.h"
#include "cuda_detect_common.cuh"
#include "cuda_small.cuh"

static __global__ void gather_kernel(struct detect_args a, size_t max_cand)
{
    const size_t n = (size_t)*a.n_ins;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < max_cand && b < n;
         b += (size_t)gridDim.x * blockDim.x)
        gather_beat(&a, b);
}

static __global__ void verdict_kernel(struct detect_args a, size_t max_cand)
{
    const size_t n = (size_t)*a.n_ins;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < max_cand && b < n;
         b += (size_t)gridDim.x * blockDim.x)
        a.ins_mark[b] = insert_is_artefact(a.ins_pos, a.ins_h, n, b);
}

static __global__ void clear_kernel(struct detect_args a, size_t max_cand)
{
    const size_t n = (size_t)*a.n_ins;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < max_cand && b < n;
         b += (size_t)gridDim.x * blockDim.x)
        if (a.ins_mark[b])
            a.flag[a.ins_k[b]] = 0;
}

static __global__ void __launch_bounds__(DETECT_SMALL_THREADS)
    insert_small_kernel(struct detect_args a, size_t max_cand)
{
    insert_small_body(a, max_cand);
}

/* Contract in cuda_detect_common.cuh. */
enum ecg_status cuda_reject_insertions(struct cuda_ctx *ctx, const struct detect_args *a,
                                       size_t max_cand, bool small, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    thrust::counting_iterator<int64_t> counter(0);
    size_t temp_bytes = 0;
    if (small) {
        insert_small_kernel<<<1, DETECT_SMALL_THREADS, 0, ctx->stream>>>(*a, max_cand);
        CUDA_LAUNCH_CHECK();
        goto out;
    }
    CUDA_TRY(cub::DeviceSelect::Flagged(NULL, temp_bytes, counter, a->flag, a->ins_k, a->n_ins,
                                        (int64_t)max_cand, ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp_bytes, err));
    CUDA_TRY(cub::DeviceSelect::Flagged(ctx->cub_temp.ptr, temp_bytes, counter, a->flag, a->ins_k,
                                        a->n_ins, (int64_t)max_cand, ctx->stream));
    gather_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(*a, max_cand);
    CUDA_LAUNCH_CHECK();
    verdict_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(*a, max_cand);
    CUDA_LAUNCH_CHECK();
    clear_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(*a, max_cand);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}
