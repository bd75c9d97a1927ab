/*
 * cuda_fuse.cu - the fused QRS envelope of several leads on the device (twin of
 * engine/cpu/fuse.c; engine/cpu/fuse_core.h has the method and the arithmetic, compiled here as
 * __host__ __device__ functions with round-to-nearest operations, so the floats are the CPU's).
 * cuda_detect() computes each lead's envelope, then calls cuda_fuse() to combine them, and
 * cuda_fuse_slopes() after the candidates are known. Steps, on the ctx's stream:
 *   1. each window's peak and mean, per lead                   one thread per (lead, window)
 *   2. each window's beat level and weight, per lead           one thread per (lead, window)
 *   3. each window's gains                                     one thread per window
 *   4. the fused envelope                                      one thread per sample
 *  with two leads or more (step 3a; with three or more, then 3 and 4 again):
 *      each window's peak position, per lead and fused         one thread per (lead, window)
 *      each window's agreement, per lead                       one thread per (lead, window)
 *   5. (cuda_fuse_slopes) each candidate's fused slope         one thread per candidate
 */
#include "cpu/detect_params.h"
#include "cpu/fuse_core.h"
#include "cuda_detect_common.cuh"

static __global__ void stats_kernel(struct fuse_args f)
{
    const size_t total = f.n_leads * f.n_win;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t l = t / f.n_win, j = t % f.n_win;
        float peak;
        fuse_window_stats(f.lead_env + l * f.n_a, f.n_a, f.win, j, &peak, &f.mean[t]);
        f.peak[t] = peak;
    }
}

static __global__ void weight_kernel(struct fuse_args f)
{
    const size_t total = f.n_leads * f.n_win;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t l = t / f.n_win, j = t % f.n_win;
        fuse_window_weight(f.peak + l * f.n_win, f.mean + l * f.n_win, f.n_win, j, &f.level[t],
                           &f.weight[t]);
    }
}

/* agree: NULL for the crest weighting alone (the first pass), f.agree after step 3a. */
static __global__ void gains_kernel(struct fuse_args f, const double *agree)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < f.n_win;
         j += (size_t)gridDim.x * blockDim.x)
        fuse_window_gains(f.level, f.weight, agree, f.n_leads, f.n_win, j, f.gain);
}

/* Step 3a: thread (l, j) finds where window j of lead l's envelope peaks; l = n_leads is the
 * first pass's fused envelope env. */
static __global__ void peak_at_kernel(struct fuse_args f, const float *env)
{
    const size_t total = (f.n_leads + 1) * f.n_win;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t l = t / f.n_win, j = t % f.n_win;
        const float *e = l < f.n_leads ? f.lead_env + l * f.n_a : env;
        f.at[t] = fuse_window_peak_at(e, f.n_a, f.win, j);
    }
}

/* Step 3a: thread (l, j) takes lead l's agreement with the fused envelope around window j. */
static __global__ void agree_kernel(struct fuse_args f)
{
    const size_t total = f.n_leads * f.n_win;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t l = t / f.n_win, j = t % f.n_win;
        f.agree[t] = fuse_window_agreement(f.at + l * f.n_win, f.at + f.n_leads * f.n_win,
                                           f.n_win, j, f.reach);
    }
}

/* Thread l: lead l's agreement over the recording (fuse_agreement_mean, the CPU's loop). */
static __global__ void agree_mean_kernel(struct fuse_args f, double *out)
{
    for (size_t l = threadIdx.x; l < f.n_leads; l += blockDim.x)
        out[l] = fuse_agreement_mean(f.agree, f.n_win, l);
}

/* Thread i: fuse.c's sum over leads, in lead order, multiply then add. */
static __global__ void fused_kernel(struct fuse_args f, float *env)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < f.n_a;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (size_t l = 0; l < f.n_leads; l++)
            acc = __fadd_rn(acc, __fmul_rn(fuse_gain_at(f.gain + l * f.n_win, f.n_win, f.win, i),
                                           f.lead_env[l * f.n_a + i]));
        env[i] = acc;
    }
}

/* The steepest |y[i+1] - y[i]| within +-reach of c (detect.c's steepest()). */
static __device__ float steepest(const float *y, size_t n, size_t c, size_t reach)
{
    size_t lo = c > reach ? c - reach : 0;
    size_t hi = c + reach < n - 1 ? c + reach : n - 1;
    float s = 0.0f;
    for (size_t i = lo; i < hi; i++) {
        float d = fabsf(__fsub_rn(y[i + 1], y[i]));
        s = d > s ? d : s;
    }
    return s;
}

/* Thread k: candidate k's slope, the leads' slopes weighed by their gains at it. */
static __global__ void slope_kernel(struct fuse_args f, struct detect_args a, size_t max_cand)
{
    const size_t n_cand = (size_t)*a.n_cand;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < max_cand && k < n_cand;
         k += (size_t)gridDim.x * blockDim.x) {
        const size_t c = (size_t)a.cpos[k];
        float s = 0.0f;
        for (size_t l = 0; l < f.n_leads; l++) {
            const float *y = l == 0 ? a.y : f.y_extra + (l - 1) * f.n_a;
            s = __fadd_rn(s, __fmul_rn(fuse_gain_at(f.gain + l * f.n_win, f.n_win, f.win, c),
                                       steepest(y, f.n_a, c, a.slope_win)));
        }
        a.slope[k] = s;
    }
}

/* Contracts in cuda_detect_common.cuh. */
enum ecg_status cuda_fuse(struct cuda_ctx *ctx, const struct fuse_args *f, float *env,
                          struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t per_window = f->n_leads * f->n_win;
    stats_kernel<<<grid_for(per_window), CUDA_THREADS, 0, ctx->stream>>>(*f);
    CUDA_LAUNCH_CHECK();
    weight_kernel<<<grid_for(per_window), CUDA_THREADS, 0, ctx->stream>>>(*f);
    CUDA_LAUNCH_CHECK();
    gains_kernel<<<grid_for(f->n_win), CUDA_THREADS, 0, ctx->stream>>>(*f, nullptr);
    CUDA_LAUNCH_CHECK();
    fused_kernel<<<grid_for(f->n_a), CUDA_THREADS, 0, ctx->stream>>>(*f, env);
    CUDA_LAUNCH_CHECK();
    if (f->at) { /* step 3a, then steps 3 and 4 again */
        peak_at_kernel<<<grid_for((f->n_leads + 1) * f->n_win), CUDA_THREADS, 0, ctx->stream>>>(
            *f, env);
        CUDA_LAUNCH_CHECK();
        agree_kernel<<<grid_for(per_window), CUDA_THREADS, 0, ctx->stream>>>(*f);
        CUDA_LAUNCH_CHECK();
        if (f->n_leads >= 3) { /* two leads: measured (the pass-over), not weighed (fuse.c) */
            gains_kernel<<<grid_for(f->n_win), CUDA_THREADS, 0, ctx->stream>>>(*f, f->agree);
            CUDA_LAUNCH_CHECK();
            fused_kernel<<<grid_for(f->n_a), CUDA_THREADS, 0, ctx->stream>>>(*f, env);
            CUDA_LAUNCH_CHECK();
        }
    }
out:
    return status;
}

enum ecg_status cuda_fuse_agree_mean(struct cuda_ctx *ctx, const struct fuse_args *f,
                                     double *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    agree_mean_kernel<<<1, 32, 0, ctx->stream>>>(*f, out);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

enum ecg_status cuda_fuse_slopes(struct cuda_ctx *ctx, const struct fuse_args *f,
                                 const struct detect_args *a, size_t max_cand,
                                 struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    slope_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(*f, *a, max_cand);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}
