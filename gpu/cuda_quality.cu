/*
 * cuda_quality.cu - the signal-quality features on the device (twin of
 * engine/cpu/quality_features.c; engine/quality.h defines them).
 *
 * Bit-identical to the CPU reference: each window is one thread, which walks its samples in
 * the same order as the CPU loop, with the same float comparisons (ternaries, not fminf, so
 * that signed zeros resolve alike), integer counts, and double sums in which every operation is
 * an explicit round-to-nearest intrinsic (__dsub_rn, __dmul_rn, __dadd_rn): nvcc may not fuse
 * them into a multiply-add, which the CPU (ISO C, no contraction) never does. A window is a
 * second of signal (a few hundred samples), so a thread's serial walk is short and the grid has
 * one thread per second of recording: ~55k threads for a 15-hour Holter.
 */
#include "cuda_internal.h"
#include "quality.h"

/* Thread j computes window j (grid-stride over windows). */
static __global__ void quality_kernel(const float *__restrict__ x, size_t n,
                                      struct ecg_quality_geometry g,
                                      struct ecg_quality_window *__restrict__ out)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < g.n_win;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t a = j * g.len, b = a + g.len < n ? a + g.len : n;
        float lo = x[a], hi = x[a];
        uint32_t repeat = 0;
        for (size_t i = a; i < b; i++) {
            float v = x[i];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            repeat += i > 0 && v == x[i - 1];
        }
        uint32_t at_max = 0, at_min = 0, qrs_n = 0, hf_n = 0;
        double s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, h2 = 0.0;
        for (size_t i = a; i < b; i++) {
            float v = x[i];
            bool left_eq = i > 0 && x[i - 1] == v;
            bool right_eq = i + 1 < n && x[i + 1] == v;
            at_max += v == hi && (left_eq || right_eq);
            at_min += v == lo && (left_eq || right_eq);
            if (i >= a + g.lag_qrs) {
                double d = __dsub_rn((double)v, (double)x[i - g.lag_qrs]);
                double d2 = __dmul_rn(d, d);
                s1 = __dadd_rn(s1, d);
                s2 = __dadd_rn(s2, d2);
                s3 = __dadd_rn(s3, __dmul_rn(d2, d));
                s4 = __dadd_rn(s4, __dmul_rn(d2, d2));
                qrs_n++;
            }
            if (i >= a + g.lag_hf && i + g.lag_hf < b) {
                double h = __dsub_rn(__dsub_rn((double)x[i + g.lag_hf], (double)v),
                                     __dsub_rn((double)v, (double)x[i - g.lag_hf]));
                h2 = __dadd_rn(h2, __dmul_rn(h, h));
                hf_n++;
            }
        }
        struct ecg_quality_window w;
        w.n = (uint32_t)(b - a);
        w.n_repeat = repeat;
        w.n_at_max = at_max;
        w.n_at_min = at_min;
        w.qrs_n = qrs_n;
        w.hf_n = hf_n;
        w.x_min = lo;
        w.x_max = hi;
        w.qrs_s1 = s1;
        w.qrs_s2 = s2;
        w.qrs_s3 = s3;
        w.qrs_s4 = s4;
        w.hf_s2 = h2;
        out[j] = w;
    }
}

static void launch_quality(const float *d_x, size_t n, const struct ecg_quality_geometry &g,
                           struct ecg_quality_window *d_out, cudaStream_t stream)
{
    /* small blocks: windows are few and each thread's walk is long */
    unsigned threads = 64;
    size_t blocks = (g.n_win + threads - 1) / threads;
    quality_kernel<<<(unsigned)(blocks < 65535u * 8u ? blocks : 65535u * 8u), threads, 0,
                     stream>>>(d_x, n, g, d_out);
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
    launch_quality((const float *)ctx->input.ptr, ctx->n_in, g,
                   (struct ecg_quality_window *)ctx->scratch.ptr, ctx->stream);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, ctx->scratch.ptr, bytes, cudaMemcpyDeviceToHost,
                             ctx->stream));
    ECG_TRY(ctx_sync(ctx, "quality", err));
    memcpy(windows, ctx->h_stage, bytes);
out:
    return status;
}
