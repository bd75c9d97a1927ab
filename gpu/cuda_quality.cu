/*
 * cuda_quality.cu - the signal-quality features on the device (twin of
 * engine/cpu/quality_features.c; engine/quality.h defines them).
 *
 * Bit-identical to the CPU reference: both take the arithmetic from engine/cpu/quality_core.h,
 * which also fixes the order of every sum (interleaved lanes combined by a fixed tree). Here
 * each lane is a thread: QUALITY_LANES adjacent threads of a warp share a window, walk it with
 * a stride of QUALITY_LANES samples (the group's loads are contiguous), and combine their lanes
 * with butterfly shuffles in the tree's order. A 15-hour Holter at 360 Hz has ~55k windows:
 * ~440k threads, each walking ~45 samples twice (three times in a window with mains hum).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_internal.h"
#include "cuda_small.cuh"
#include "cpu/quality_core.h"

/* The lanes of one window: the QUALITY_LANES threads whose lane numbers differ in the low bits
 * only. Every thread of the warp takes part in each shuffle (the mask is the whole warp). */
#define LANE_MASK 0xffffffffu

/* Exchanges a lane state with the lane `step` away and keeps the tree's combination of the
 * two (low = the lower lane's subtree), identical in both lanes. */
static __device__ void exchange(struct quality_lane *p, unsigned step, unsigned lane, bool sums)
{
    struct quality_lane other = *p;
    if (sums) {
        other.at_max = __shfl_xor_sync(LANE_MASK, p->at_max, step, QUALITY_LANES);
        other.at_min = __shfl_xor_sync(LANE_MASK, p->at_min, step, QUALITY_LANES);
        other.qrs_n = __shfl_xor_sync(LANE_MASK, p->qrs_n, step, QUALITY_LANES);
        other.hf_n = __shfl_xor_sync(LANE_MASK, p->hf_n, step, QUALITY_LANES);
        other.s1 = __shfl_xor_sync(LANE_MASK, p->s1, step, QUALITY_LANES);
        other.s2 = __shfl_xor_sync(LANE_MASK, p->s2, step, QUALITY_LANES);
        other.s3 = __shfl_xor_sync(LANE_MASK, p->s3, step, QUALITY_LANES);
        other.s4 = __shfl_xor_sync(LANE_MASK, p->s4, step, QUALITY_LANES);
        other.h2 = __shfl_xor_sync(LANE_MASK, p->h2, step, QUALITY_LANES);
        for (size_t f = 0; f < ECG_QUALITY_MAINS; f++) {
            other.mc[f] = __shfl_xor_sync(LANE_MASK, p->mc[f], step, QUALITY_LANES);
            other.ms[f] = __shfl_xor_sync(LANE_MASK, p->ms[f], step, QUALITY_LANES);
        }
    } else {
        other.lo = __shfl_xor_sync(LANE_MASK, p->lo, step, QUALITY_LANES);
        other.hi = __shfl_xor_sync(LANE_MASK, p->hi, step, QUALITY_LANES);
        other.repeat = __shfl_xor_sync(LANE_MASK, p->repeat, step, QUALITY_LANES);
    }
    struct quality_lane low = lane & step ? other : *p;
    struct quality_lane up = lane & step ? *p : other;
    if (sums)
        quality_merge_sums(&low, &up);
    else
        quality_merge_extremes(&low, &up);
    *p = low;
}

/* Thread t is lane t % QUALITY_LANES of window t / QUALITY_LANES. The grid covers every window
 * once (no grid stride: each group must stay whole for its shuffles); threads past the last
 * window walk nothing, take part in the shuffles and write nothing. */
static __device__ void quality_body(const float *__restrict__ x, size_t n,
                                    const struct ecg_quality_geometry &g,
                                    struct ecg_quality_window *__restrict__ out, size_t t)
{
    size_t j = t / QUALITY_LANES;
    unsigned lane = (unsigned)(t % QUALITY_LANES);
    bool active = j < g.n_win;
    size_t a = active ? j * g.len : 0, b = active ? (a + g.len < n ? a + g.len : n) : 0;
    struct quality_lane p = quality_lane_start(active ? x[a] : 0.0f);
    for (size_t i = a + lane; i < b; i += QUALITY_LANES)
        quality_lane_first(&p, x, i);
    for (unsigned step = 1; step < QUALITY_LANES; step *= 2)
        exchange(&p, step, lane, false);
    float lo = p.lo, hi = p.hi;
    const double cap = quality_spike_cap(lo, hi);
    uint32_t repeat = p.repeat;
    p = quality_lane_start(active ? x[a] : 0.0f);
    struct ecg_quality_turn ph[ECG_QUALITY_MAINS];
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++)
        ph[f] = quality_lane_phase(&g, f, lane);
    for (size_t i = a + lane; i < b; i += QUALITY_LANES) {
        quality_lane_second(&p, x, n, &g, a, b, i, lo, hi, cap);
        quality_mains_term(&p, ph, x, a, i, &g);
    }
    for (unsigned step = 1; step < QUALITY_LANES; step *= 2)
        exchange(&p, step, lane, true);
    /* hum: the moments and second difference again, the mains line taken out (quality_core.h);
     * every lane of a window takes the same decision from the same combined sums */
    struct quality_line line;
    line.f = -1;
    line.a = line.b = 0.0;
    if (active)
        line = quality_mains_line(&p, a, b, &g);
    if (__any_sync(LANE_MASK, line.f >= 0)) { /* the whole warp shuffles, or none of it */
        struct quality_lane q = quality_lane_start(0.0f);
        if (line.f >= 0) {
            struct ecg_quality_turn t = quality_lane_phase(&g, (size_t)line.f, lane);
            for (size_t i = a + lane; i < b; i += QUALITY_LANES)
                quality_lineless_term(&q, &t, x, a, b, i, &g, &line, cap);
        }
        for (unsigned step = 1; step < QUALITY_LANES; step *= 2)
            exchange(&q, step, lane, true);
        if (line.f >= 0) {
            p.s1 = q.s1;
            p.s2 = q.s2;
            p.s3 = q.s3;
            p.s4 = q.s4;
            p.h2 = q.h2;
            p.hf_n = q.hf_n;
        }
    }
    if (active && lane == 0) {
        p.lo = lo;
        p.hi = hi;
        p.repeat = repeat;
        struct ecg_quality_window w;
        quality_window_of(&p, a, b, &w);
        out[j] = w;
    }
}

static __global__ void quality_kernel(const float *__restrict__ x, size_t n,
                                      struct ecg_quality_geometry g,
                                      struct ecg_quality_window *__restrict__ out)
{
    quality_body(x, n, g, out, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

/* The batched back's members (grid y): each one's samples in the batch's pack, its windows to
 * its place in the batch's output. */
static __global__ void quality_batch_kernel(const struct small_back *members, const float *pack,
                                            char *out)
{
    const struct small_back *m = &members[blockIdx.y];
    quality_body(pack + m->x_off, m->n_in, m->quality,
                 (struct ecg_quality_window *)(out + m->quality_out),
                 blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_quality(cudaStream_t stream, const struct small_back *members,
                                    size_t k, size_t max_win, const float *pack, char *out,
                                    struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const unsigned threads = 256; /* as launch_quality */
    const size_t blocks = (max_win * QUALITY_LANES + threads - 1) / threads;
    quality_batch_kernel<<<dim3((unsigned)blocks, (unsigned)k), threads, 0, stream>>>(members,
                                                                                     pack, out);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

static void launch_quality(const float *d_x, size_t n, const struct ecg_quality_geometry &g,
                           struct ecg_quality_window *d_out, cudaStream_t stream)
{
    unsigned threads = 256; /* a multiple of the warp: lane groups never straddle warps */
    size_t blocks = (g.n_win * QUALITY_LANES + threads - 1) / threads;
    quality_kernel<<<(unsigned)blocks, threads, 0, stream>>>(d_x, n, g, d_out);
}

extern "C" enum ecg_status cuda_quality(void *ctx_ptr, const struct ecg_plan *plan,
                                        struct ecg_quality_window *windows, size_t n_win,
                                        struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct ecg_quality_geometry g = ecg_quality_geometry_of(ctx->n_in, plan->fs_in_hz);
    size_t bytes = n_win * sizeof *windows;
    ECG_TRY(ctx_enter(ctx, err));
    if (g.n_win != n_win || ctx->n_in == 0) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "quality: %zu windows, expected %zu (%zu samples)", n_win, g.n_win,
                          ctx->n_in);
        goto out;
    }
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, bytes, err));
    ECG_TRY(stage_reserve(ctx, bytes, err));
    {
        /* ECG_CUDA_PROFILE: the kernel and the copy of the windows, timed by events */
        cudaEvent_t ev[3];
        const bool profile = getenv("ECG_CUDA_PROFILE") != NULL &&
                             cudaEventCreate(&ev[0]) == cudaSuccess &&
                             cudaEventCreate(&ev[1]) == cudaSuccess &&
                             cudaEventCreate(&ev[2]) == cudaSuccess;
        if (profile)
            cudaEventRecord(ev[0], ctx->stream);
        launch_quality((const float *)ctx->input.ptr, ctx->n_in, g,
                       (struct ecg_quality_window *)ctx->scratch.ptr, ctx->stream);
        CUDA_LAUNCH_CHECK();
        if (profile)
            cudaEventRecord(ev[1], ctx->stream);
        CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, ctx->scratch.ptr, bytes,
                                 cudaMemcpyDeviceToHost, ctx->stream));
        if (profile)
            cudaEventRecord(ev[2], ctx->stream);
        ECG_TRY(ctx_sync(ctx, "quality", err));
        double t0 = 0;
        if (profile) {
            float k_ms = 0, c_ms = 0;
            cudaEventElapsedTime(&k_ms, ev[0], ev[1]);
            cudaEventElapsedTime(&c_ms, ev[1], ev[2]);
            for (int e = 0; e < 3; e++)
                cudaEventDestroy(ev[e]);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            t0 = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
            fprintf(stderr, "cuda quality profile: %zu windows, kernel %.3f ms, copy %.3f ms",
                    n_win, k_ms, c_ms);
        }
        stage_copy(windows, ctx->h_stage, bytes);
        if (profile) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            fprintf(stderr, ", host copy %.3f ms\n",
                    (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6 - t0);
        }
    }
out:
    return status;
}
