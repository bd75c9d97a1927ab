/*
 * cuda_filter.cu - the Ricker band-pass on the device (twin of engine/cpu/filter.c):
 *     f[i] = sum_{k<K} ricker[k] * (y[i + half - k] - y[0]),   0 outside [0, n)   (linear,
 *     'same'; the first sample's level taken off, as filter.c does)
 *
 * Then, on every lead, the detector's noise-aware band (twin of engine/cpu/band.c;
 * engine/cpu/noise_core.h has the method and the arithmetic): the two higher bands' and the
 * lower band's responses by the direct path (bit-identical to cpu_filter_taps), each window's indices and
 * peaks (one thread per window, sums in sample order), its gains (one thread per window), and
 * the mix in place (one thread per sample). Its scratch is the ctx's stage scratch.
 *
 * Two paths, chosen as cpu_filter chooses (direct up to FILTER_DIRECT_MAX_TAPS taps, FFT
 * beyond), or forced with the environment variable ECG_CUDA_FILTER=direct|fft read at open:
 * - direct: one thread per output, the taps in the CPU's order with the CPU's rounding (FMA in
 *   the tiles' vector part, separate multiply and add in the scalar tail of the last tile, as
 *   filter.c's AVX2 path; multiply and add everywhere on a host without AVX2/FMA). Bit-identical
 *   to the CPU's direct path and, for 31 taps, memory-bound: about n * 8 bytes moved.
 * - FFT: one in-place cuFFT R2C of the whole signal (less its first sample's level)
 *   zero-padded to a 2^a 3^b 5^c 7^d length N >= n + K - 1 (so the circular convolution
 *   equals the linear one: no wrap-around), a pointwise product with the Ricker spectrum
 *   (cached per N, scaled by 1/N), one C2R, and the 'same' part copied out. Plans are cached
 *   per ctx by N (CUDA_FFT_CACHE of them, least recently used evicted); their work areas come
 *   from the ctx's pool buffer, so a failure to get memory is ECG_ERR_DEVICE_OOM for this
 *   request. Agrees with the CPU within float FFT rounding (tests: relative to max |f|).
 * A short lead on the direct path (at most FILTER_SMALL_MAX samples) takes the filter and the
 * band step in one block (filter_small_kernel): the same values, one launch instead of eight.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_small.cuh"
#include "cpu/detect_params.h" /* detect_samples_of */
#include "cpu/noise_core.h"

#define FILTER_TILE 4096          /* filter.c's tile: decides which outputs use FMA */
#define FILTER_DIRECT_MAX_TAPS 95 /* filter.c's crossover */

/* The reversed kernel, passed by value: kernel parameters live in constant memory, which
 * serves the warp-uniform tap reads, and each launch carries its own copy (no shared symbol
 * that concurrent contexts would race on). Longer kernels take the FFT path. */
struct direct_taps {
    float g[FILTER_DIRECT_MAX_TAPS + 1];
};

/* ---------------------------------------------------------------- direct path */

/* f[i] from the reversed kernel g (taps of them), as filter.c's tile code would: the taps in
 * its order with its rounding; in[k] = y[i - half + k] - y[0], 0 outside [0, n). */
template <typename Input>
static __device__ float direct_value(Input in, size_t n, size_t taps, size_t i, bool fma_path,
                                     const struct direct_taps *g)
{
    size_t i0 = i / FILTER_TILE * FILTER_TILE;
    size_t count = n - i0 < FILTER_TILE ? n - i0 : FILTER_TILE;
    bool vector_part = fma_path && (i - i0) < count / 8 * 8;
    float acc = 0.0f;
    for (size_t k = 0; k < taps; k++) {
        const float v = in(k);
        acc = vector_part ? __fmaf_rn(g->g[k], v, acc) : __fadd_rn(acc, __fmul_rn(g->g[k], v));
    }
    return acc;
}

/* y[t - half] less the first sample's level (filter.c's input: level = y[0]), 0 outside
 * [0, n). */
static __device__ __forceinline__ float level_sample(const float *y, size_t n, size_t t,
                                                    size_t half, float level)
{
    return t >= half && t - half < n ? __fsub_rn(y[t - half], level) : 0.0f;
}

/* The inputs of a block's outputs [base, base + blockDim.x) for taps reaching half before a
 * sample: stage[t] = y[base + t - half] - y[0] for t < width, zero outside [0, n). */
static __device__ __forceinline__ void stage_inputs(float *stage, const float *y, size_t n,
                                                    size_t base, size_t half, size_t width)
{
    const float level = y[0];
    for (size_t t = threadIdx.x; t < width; t += blockDim.x)
        stage[t] = level_sample(y, n, base + t, half, level);
}

/* Thread i computes f[i] from the reversed kernel, as filter.c's tile code would. The block's
 * inputs (its outputs' span plus the kernel's reach) are staged in shared memory first, so each
 * input is read from global memory once per block instead of once per tap. */
static __global__ void filter_direct_kernel(const float *y, size_t n, size_t taps, float *f,
                                            bool fma_path, const struct direct_taps g)
{
    extern __shared__ float stage[]; /* blockDim.x + taps - 1 inputs */
    const size_t half = (taps - 1) / 2, width = blockDim.x + taps - 1;
    for (size_t base = blockIdx.x * (size_t)blockDim.x; base < n;
         base += (size_t)gridDim.x * blockDim.x) {
        stage_inputs(stage, y, n, base, half, width);
        __syncthreads();
        const size_t i = base + threadIdx.x;
        if (i < n) {
            const float *row = stage + threadIdx.x; /* row[k] = y[i - half + k] */
            f[i] = direct_value([row](size_t k) { return row[k]; }, n, taps, i, fma_path, &g);
        }
        __syncthreads();
    }
}

/* The reversed kernel of taps (filter.c's order). */
static void reverse_taps(const float *ricker, size_t taps, struct direct_taps *g)
{
    memset(g, 0, sizeof *g);
    for (size_t k = 0; k < taps; k++)
        g->g[k] = ricker[taps - 1 - k];
}

static enum ecg_status launch_filter_direct(cudaStream_t stream, const float *d_y, size_t n,
                                            const float *ricker, size_t taps, float *d_f,
                                            bool fma_path, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct direct_taps g;
    reverse_taps(ricker, taps, &g);
    filter_direct_kernel<<<grid_for(n), CUDA_THREADS, (CUDA_THREADS + taps - 1) * sizeof(float),
                           stream>>>(d_y, n, taps, d_f, fma_path, g);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* ---------------------------------------------------------------- FFT path */

/* buf[t] = src[t] for t < n, 0 for n <= t < total (the padded real input of an R2C). */
static __global__ void pad_kernel(const float *src, size_t n, float *buf, size_t total)
{
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x)
        buf[t] = t < n ? src[t] : 0.0f;
}

/* buf[t] = src[t] - src[0] for t < n, 0 for n <= t < total: the filter's input (the first
 * sample's level taken off) padded for an R2C. */
static __global__ void pad_input_kernel(const float *src, size_t n, float *buf, size_t total)
{
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x)
        buf[t] = t < n ? __fsub_rn(src[t], src[0]) : 0.0f;
}

/* Thread b: spec[b] *= kernel[b] (complex). */
static __global__ void multiply_kernel(float2 *spec, const float2 *kernel, size_t bins)
{
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < bins;
         b += (size_t)gridDim.x * blockDim.x) {
        float2 s = spec[b], k = kernel[b];
        spec[b] = make_float2(s.x * k.x - s.y * k.y, s.x * k.y + s.y * k.x);
    }
}

/* Thread b: spec[b] *= scale (the 1/N of the unnormalised inverse, folded into the kernel). */
static __global__ void scale_kernel(float2 *spec, size_t bins, float scale)
{
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < bins;
         b += (size_t)gridDim.x * blockDim.x) {
        spec[b].x *= scale;
        spec[b].y *= scale;
    }
}

/* Thread i: f[i] = conv[i + half]. */
static __global__ void same_part_kernel(const float *conv, size_t n, size_t half, float *f)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        f[i] = conv[i + half];
}

static void fft_entry_release(struct cuda_ctx *ctx, struct fft_entry *e)
{
    if (!e->n_pad)
        return;
    (void)cufftDestroy(e->r2c);
    (void)cufftDestroy(e->c2r);
    if (e->d_spectrum)
        (void)cudaFreeAsync(e->d_spectrum, ctx->stream);
    free(e->h_taps);
    memset(e, 0, sizeof *e);
}

extern "C" void cuda_filter_release(struct cuda_ctx *ctx)
{
    for (int i = 0; i < CUDA_FFT_CACHE; i++)
        fft_entry_release(ctx, &ctx->fft[i]);
}

/* Finds or builds the plans and Ricker spectrum for length n_pad. */
static enum ecg_status fft_entry_get(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                     size_t n_pad, struct fft_entry **out,
                                     struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct fft_entry *e = NULL;
    size_t ws_r2c = 0, ws_c2r = 0, bins = n_pad / 2 + 1;
    int slot = 0;
    for (int i = 0; i < CUDA_FFT_CACHE; i++) {
        struct fft_entry *c = &ctx->fft[i];
        if (c->n_pad == n_pad && c->n_taps == plan->ricker_len &&
            memcmp(c->h_taps, plan->ricker, plan->ricker_len * sizeof(float)) == 0) {
            c->last_use = ++ctx->fft_clock;
            *out = c;
            return ECG_OK;
        }
        if (!c->n_pad || (ctx->fft[slot].n_pad && c->last_use < ctx->fft[slot].last_use))
            slot = i;
    }
    e = &ctx->fft[slot];
    ctx->generation++;
    fft_entry_release(ctx, e);
    e->n_pad = n_pad;
    e->r2c = e->c2r = 0;
    CUFFT_TRY(cufftCreate(&e->r2c));
    CUFFT_TRY(cufftCreate(&e->c2r));
    CUFFT_TRY(cufftSetAutoAllocation(e->r2c, 0));
    CUFFT_TRY(cufftSetAutoAllocation(e->c2r, 0));
    CUFFT_TRY(cufftMakePlan1d(e->r2c, (int)n_pad, CUFFT_R2C, 1, &ws_r2c));
    CUFFT_TRY(cufftMakePlan1d(e->c2r, (int)n_pad, CUFFT_C2R, 1, &ws_c2r));
    CUFFT_TRY(cufftSetStream(e->r2c, ctx->stream));
    CUFFT_TRY(cufftSetStream(e->c2r, ctx->stream));
    e->work_bytes = ws_r2c > ws_c2r ? ws_r2c : ws_c2r;
    e->h_taps = (float *)malloc(plan->ricker_len * sizeof(float));
    if (!e->h_taps) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda_filter: taps");
        goto out;
    }
    memcpy(e->h_taps, plan->ricker, plan->ricker_len * sizeof(float));
    e->n_taps = plan->ricker_len;

    /* The Ricker spectrum: R2C of the zero-padded taps, in place, then scaled by 1/N. */
    CUDA_TRY(cudaMallocAsync((void **)&e->d_spectrum, bins * sizeof(float2), ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->fft_work, e->work_bytes ? e->work_bytes : 1, err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, plan->ricker_len * sizeof(float), err));
    ECG_TRY(stage_reserve(ctx, plan->ricker_len * sizeof(float), err));
    ECG_TRY(ctx_sync(ctx, "filter", err)); /* h_stage free for reuse */
    memcpy(ctx->h_stage, plan->ricker, plan->ricker_len * sizeof(float));
    CUDA_TRY(cudaMemcpyAsync(ctx->scratch.ptr, ctx->h_stage, plan->ricker_len * sizeof(float),
                             cudaMemcpyHostToDevice, ctx->stream));
    pad_kernel<<<grid_for(2 * bins), CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)ctx->scratch.ptr, plan->ricker_len, (float *)e->d_spectrum, 2 * bins);
    CUDA_LAUNCH_CHECK();
    CUFFT_TRY(cufftSetWorkArea(e->r2c, ctx->fft_work.ptr));
    CUFFT_TRY(cufftExecR2C(e->r2c, (cufftReal *)e->d_spectrum, (cufftComplex *)e->d_spectrum));
    scale_kernel<<<grid_for(bins), CUDA_THREADS, 0, ctx->stream>>>(e->d_spectrum, bins,
                                                                     1.0f / (float)n_pad);
    CUDA_LAUNCH_CHECK();
    e->last_use = ++ctx->fft_clock;
    *out = e;
    e = NULL;
out:
    if (e)
        fft_entry_release(ctx, e);
    return status;
}

static enum ecg_status filter_fft(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                  const float *d_in, float *d_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct fft_entry *e = NULL;
    const size_t n = ctx->n_a, taps = plan->ricker_len;
    size_t n_pad = ecg_plan_fft_len(n + taps - 1), bins = n_pad / 2 + 1;
    if (n_pad > (size_t)INT32_MAX) {
        status = ecg_fail(err, ECG_ERR_TOO_LARGE, "too_large",
                          "cuda_filter: %zu samples exceed one cuFFT transform", n);
        goto out;
    }
    ECG_TRY(fft_entry_get(ctx, plan, n_pad, &e, err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->fft_buf, bins * sizeof(float2), err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->fft_work, e->work_bytes ? e->work_bytes : 1, err));
    pad_input_kernel<<<grid_for(2 * bins), CUDA_THREADS, 0, ctx->stream>>>(
        d_in, n, (float *)ctx->fft_buf.ptr, 2 * bins);
    CUDA_LAUNCH_CHECK();
    CUFFT_TRY(cufftSetWorkArea(e->r2c, ctx->fft_work.ptr));
    CUFFT_TRY(cufftSetWorkArea(e->c2r, ctx->fft_work.ptr));
    CUFFT_TRY(cufftExecR2C(e->r2c, (cufftReal *)ctx->fft_buf.ptr,
                           (cufftComplex *)ctx->fft_buf.ptr));
    multiply_kernel<<<grid_for(bins), CUDA_THREADS, 0, ctx->stream>>>(
        (float2 *)ctx->fft_buf.ptr, e->d_spectrum, bins);
    CUDA_LAUNCH_CHECK();
    CUFFT_TRY(cufftExecC2R(e->c2r, (cufftComplex *)ctx->fft_buf.ptr,
                           (cufftReal *)ctx->fft_buf.ptr));
    same_part_kernel<<<grid_for(n), CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)ctx->fft_buf.ptr, n, (taps - 1) / 2, d_out);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* ---------------------------------------------------------------- noise-aware band */

/*
 * Window sums of BAND_ROWS windows per block, as noise_band_window takes them (each sum in
 * sample order: the same bits). The block stages BAND_CHUNK samples of each window's four
 * responses at a time in shared memory: every thread issues all of its loads before it stores
 * any (BAND_LOADS per response, coalesced along each window), so the block waits for memory
 * once per chunk, not once per load. Then the first warp sums: lane 4 r + k holds window r's
 * sums that read response k (k = 0: the energy and peak of f; 1: of f_hi; 2: the energy of f_lo;
 * 3: the sum of |f| and the peak of |f_h2|), four short chains side by side instead of one long
 * one, and lane 4 r gathers them by shuffles and writes the window's measures.
 */
#define BAND_ROWS 8
#define BAND_CHUNK 256
#define BAND_THREADS 256
#define BAND_LOADS (BAND_ROWS * BAND_CHUNK / BAND_THREADS)
static __global__ void __launch_bounds__(BAND_THREADS)
    band_window_kernel(const float *__restrict__ f, const float *__restrict__ f_hi,
                       const float *__restrict__ f_lo, const float *__restrict__ f_h2, size_t n,
                       size_t win, size_t n_win, const struct noise_band_measures m)
{
    __shared__ float rows[4][BAND_ROWS][BAND_CHUNK + 1];
    const unsigned lane = threadIdx.x % 32, r = lane / 4, k = lane % 4;
    for (size_t w0 = blockIdx.x * (size_t)BAND_ROWS; w0 < n_win;
         w0 += (size_t)gridDim.x * BAND_ROWS) {
        const size_t j = w0 + r, start = j * win;
        const size_t count = j < n_win ? (start + win < n ? win : n - start) : 0;
        double e = 0.0, a = 0.0; /* lane k's energy; lane 3's sum of |f| */
        float p = 0.0f;          /* lane k's peak (none on lane 2) */
        for (size_t c = 0; c < win; c += BAND_CHUNK) {
            float v[4][BAND_LOADS];
#pragma unroll
            for (unsigned q = 0; q < BAND_LOADS; q++) {
                const unsigned at = q * BAND_THREADS + threadIdx.x;
                const size_t row = w0 + at / BAND_CHUNK, col = c + at % BAND_CHUNK;
                const size_t i = row * win + col;
                const bool in = row < n_win && col < win && i < n;
                v[0][q] = in ? f[i] : 0.0f;
                v[1][q] = in ? f_hi[i] : 0.0f;
                v[2][q] = in ? f_lo[i] : 0.0f;
                v[3][q] = in ? f_h2[i] : 0.0f;
            }
#pragma unroll
            for (unsigned q = 0; q < BAND_LOADS; q++) {
                const unsigned at = q * BAND_THREADS + threadIdx.x;
                for (unsigned resp = 0; resp < 4; resp++)
                    rows[resp][at / BAND_CHUNK][at % BAND_CHUNK] = v[resp][q];
            }
            __syncthreads();
            if (threadIdx.x < 32) {
                const size_t end = count > c ? (count - c < BAND_CHUNK ? count - c : BAND_CHUNK)
                                             : 0;
                for (size_t t = 0; t < end; t++) {
                    const float x = rows[k][r][t];
                    if (k != 2)
                        p = noise_peak_add(p, x);
                    if (k != 3)
                        e = noise_energy_add(e, x);
                    else
                        a = noise_abs_add(a, rows[0][r][t]);
                }
            }
            __syncthreads(); /* the rows are read before the next chunk writes them */
        }
        if (threadIdx.x < 32) {
            const unsigned g = lane & ~3u;
            struct noise_band_sums s;
            s.e = __shfl_sync(0xffffffffu, e, g);
            s.p = __shfl_sync(0xffffffffu, p, g);
            s.e_hi = __shfl_sync(0xffffffffu, e, g + 1);
            s.p_hi = __shfl_sync(0xffffffffu, p, g + 1);
            s.e_lo = __shfl_sync(0xffffffffu, e, g + 2);
            s.a = __shfl_sync(0xffffffffu, a, g + 3);
            s.p_h2 = __shfl_sync(0xffffffffu, p, g + 3);
            s.n = count;
            if (k == 0 && j < n_win)
                noise_band_finish(&s, &m, j);
        }
    }
}

/*
 * Window t / 4's gains, by four lanes of a warp (t = 4 j + k, the warp's 32 lanes together;
 * valid false past the last window): each computes the window's switch (noise_band_switch:
 * medians of 5), lane k = 1, 2, 3 the median of 31 window peaks of |f|, |f_hi| or |f_h2| where
 * the window reads it, and lane 0 the gains from the three (noise_band_gains_of): the values of
 * noise_band_gains, with its three long medians side by side instead of one after another (in
 * a lead's front each costs a thread several microseconds).
 */
static __device__ __forceinline__ void band_gains_lanes(const struct noise_band_measures &m,
                                                        size_t n_win, size_t t, bool valid,
                                                        float *keep, float *take, float *take2)
{
    const size_t j = t / 4;
    const unsigned k = (unsigned)(t % 4), lane = threadIdx.x % 32, first = lane & ~3u;
    double w = 0.0, g = 0.0, v = 0.0;
    if (valid) {
        noise_band_switch(&m, n_win, j, &w, &g);
        if (w > 0.0 && k == 1)
            v = fuse_median_span(m.peak, n_win, j, NOISE_SCALE_SPAN);
        else if (w > 0.0 && k == 2 && g < 1.0)
            v = fuse_median_span(m.peak_hi, n_win, j, NOISE_SCALE_SPAN);
        else if (w > 0.0 && k == 3 && g > 0.0)
            v = fuse_median_span(m.peak_h2, n_win, j, NOISE_SCALE_SPAN);
    }
    const double p = __shfl_sync(0xffffffffu, v, first + 1);
    const double p_hi = __shfl_sync(0xffffffffu, v, first + 2);
    const double p_h2 = __shfl_sync(0xffffffffu, v, first + 3);
    if (valid && k == 0)
        noise_band_gains_of(w, g, p, p_hi, p_h2, &keep[j], &take[j], &take2[j]);
}

/* Four threads per window: its gains (band_gains_lanes). Every lane of a warp runs the same
 * number of rounds (the stride is a multiple of 32), as the shuffles need. */
static __global__ void band_gain_kernel(const struct noise_band_measures m, size_t n_win,
                                        float *keep, float *take, float *take2)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x / 32 * 32;
    for (size_t base = first; base < 4 * n_win; base += stride) {
        const size_t t = base + threadIdx.x % 32;
        band_gains_lanes(m, n_win, t, t < 4 * n_win, keep, take, take2);
    }
}

/* Thread i: f[i] mixed with f_hi[i] and f_h2[i] (noise_band_mix). */
static __global__ void band_mix_kernel(float *f, const float *f_hi, const float *f_h2, size_t n,
                                       const float *keep, const float *take, const float *take2,
                                       size_t n_win, size_t win)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        f[i] = noise_band_mix(keep, take, take2, n_win, win, i, f[i], f_hi[i], f_h2[i]);
}


static enum ecg_status band_reserve(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                    struct band_layout *b, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    memset(b, 0, sizeof *b);
    b->n = ctx->n_a;
    b->win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    b->n_win = b->n / b->win + (b->n % b->win ? 1 : 0);
    const size_t f_bytes = (b->n * sizeof(float) + 255) & ~(size_t)255;
    const size_t w_bytes = (b->n_win * sizeof(double) + 255) & ~(size_t)255;
    if (plan->ricker_hi_len > FILTER_DIRECT_MAX_TAPS ||
        plan->ricker_h2_len > FILTER_DIRECT_MAX_TAPS ||
        plan->ricker_lo_len > FILTER_DIRECT_MAX_TAPS) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda_filter: noise band kernels of %zu, %zu and %zu taps",
                          plan->ricker_hi_len, plan->ricker_h2_len, plan->ricker_lo_len);
        goto out;
    }
    /* f_hi | f_h2 | f_lo (floats, per sample) | the six measures (doubles, per window) | keep |
     * take | take2 (floats, per window) */
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, 3 * f_bytes + 9 * w_bytes, err));
    {
        char *base = (char *)ctx->scratch.ptr, *w = base + 3 * f_bytes;
        b->f_hi = (float *)base;
        b->f_h2 = (float *)(base + f_bytes);
        b->f_lo = (float *)(base + 2 * f_bytes);
        double **measures[] = {&b->m.lo,   &b->m.hi,      &b->m.peak,
                               &b->m.mean, &b->m.peak_hi, &b->m.peak_h2};
        for (size_t k = 0; k < sizeof measures / sizeof *measures; k++)
            *measures[k] = (double *)(w + k * w_bytes);
        b->keep = (float *)(w + 6 * w_bytes);
        b->take = (float *)(w + 7 * w_bytes);
        b->take2 = (float *)(w + 8 * w_bytes);
    }
out:
    return status;
}

/* The band step on one lead: y its resampled signal, f its filter response (in place). */
static enum ecg_status noise_band(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                  const float *d_y, float *d_f, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const bool fma_path = cuda_host_has_avx2_fma();
    struct band_layout b;
    ECG_TRY(band_reserve(ctx, plan, &b, err));
    ECG_TRY(launch_filter_direct(ctx->stream, d_y, b.n, plan->ricker_hi, plan->ricker_hi_len,
                                 b.f_hi, fma_path, err));
    ECG_TRY(launch_filter_direct(ctx->stream, d_y, b.n, plan->ricker_h2, plan->ricker_h2_len,
                                 b.f_h2, fma_path, err));
    ECG_TRY(launch_filter_direct(ctx->stream, d_y, b.n, plan->ricker_lo, plan->ricker_lo_len,
                                 b.f_lo, fma_path, err));
    {
        const size_t blocks = (b.n_win + BAND_ROWS - 1) / BAND_ROWS;
        band_window_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), BAND_THREADS, 0,
                             ctx->stream>>>(d_f, b.f_hi, b.f_lo, b.f_h2, b.n, b.win, b.n_win,
                                            b.m);
    }
    CUDA_LAUNCH_CHECK();
    band_gain_kernel<<<grid_for(4 * b.n_win), CUDA_THREADS, 0, ctx->stream>>>(
        b.m, b.n_win, b.keep, b.take, b.take2);
    CUDA_LAUNCH_CHECK();
    band_mix_kernel<<<grid_for(b.n), CUDA_THREADS, 0, ctx->stream>>>(
        d_f, b.f_hi, b.f_h2, b.n, b.keep, b.take, b.take2, b.n_win, b.win);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/*
 * A short lead (at most FILTER_SMALL_MAX samples, the direct path): the filter and the band
 * step in one block instead of eight launches: the four direct responses with direct_value
 * (reading y itself where the tiled kernel reads its staged copy of the same values), then
 * noise_band_window, noise_band_gains and noise_band_mix between block barriers. The same
 * values as the eight kernels, which are the CPU's: a short strip's front is one CUDA graph per
 * analysis, and each node costs its launch (bench/RESULTS.md).
 */
#define FILTER_SMALL_THREADS 1024
#define FILTER_SMALL_MAX ((size_t)8192)

static __device__ float direct_at(const float *y, size_t n, size_t taps, size_t i,
                                  bool fma_path, const struct direct_taps *g)
{
    const size_t half = (taps - 1) / 2;
    const float level = y[0];
    return direct_value(
        [y, n, half, i, level](size_t k) { return level_sample(y, n, i + k, half, level); }, n,
        taps, i, fma_path, g);
}

/* The filter's four kernels, reversed (reverse_taps), and their lengths. */
struct band_taps {
    size_t taps, taps_hi, taps_h2, taps_lo;
    struct direct_taps g, g_hi, g_h2, g_lo;
};

static void band_taps_of(const struct ecg_plan *plan, struct band_taps *t)
{
    t->taps = plan->ricker_len;
    t->taps_hi = plan->ricker_hi_len;
    t->taps_h2 = plan->ricker_h2_len;
    t->taps_lo = plan->ricker_lo_len;
    reverse_taps(plan->ricker, plan->ricker_len, &t->g);
    reverse_taps(plan->ricker_hi, plan->ricker_hi_len, &t->g_hi);
    reverse_taps(plan->ricker_h2, plan->ricker_h2_len, &t->g_h2);
    reverse_taps(plan->ricker_lo, plan->ricker_lo_len, &t->g_lo);
}

/* Sample i of the four direct responses. */
static __device__ __forceinline__ void filter_small_direct(const float *y, float *f,
                                                           const struct band_layout &b,
                                                           const struct band_taps &t,
                                                           bool fma_path, size_t i)
{
    f[i] = direct_at(y, b.n, t.taps, i, fma_path, &t.g);
    b.f_hi[i] = direct_at(y, b.n, t.taps_hi, i, fma_path, &t.g_hi);
    b.f_h2[i] = direct_at(y, b.n, t.taps_h2, i, fma_path, &t.g_h2);
    b.f_lo[i] = direct_at(y, b.n, t.taps_lo, i, fma_path, &t.g_lo);
}

/* The band step on the four responses (in, in_hi, in_lo, in_h2: f and the band's f_hi, f_lo
 * and f_h2, or a block's copies of them), in one block (FILTER_SMALL_THREADS); the mix goes to
 * f. */
static __device__ __forceinline__ void filter_small_band(const float *in, const float *in_hi,
                                                         const float *in_lo, const float *in_h2,
                                                         float *f, const struct band_layout &b)
{
    for (size_t j = threadIdx.x; j < b.n_win; j += FILTER_SMALL_THREADS)
        noise_band_window(in, in_hi, in_lo, in_h2, b.n, b.win, j, &b.m);
    __syncthreads();
    for (size_t base = threadIdx.x / 32 * 32; base < 4 * b.n_win; base += FILTER_SMALL_THREADS) {
        const size_t t = base + threadIdx.x % 32;
        band_gains_lanes(b.m, b.n_win, t, t < 4 * b.n_win, b.keep, b.take, b.take2);
    }
    __syncthreads();
    for (size_t i = threadIdx.x; i < b.n; i += FILTER_SMALL_THREADS)
        f[i] = noise_band_mix(b.keep, b.take, b.take2, b.n_win, b.win, i, in[i], in_hi[i],
                              in_h2[i]);
}

static __global__ void __launch_bounds__(FILTER_SMALL_THREADS)
    filter_small_kernel(const float *y, float *f, struct band_layout b,
                        const struct band_taps t, bool fma_path)
{
    for (size_t i = threadIdx.x; i < b.n; i += FILTER_SMALL_THREADS)
        filter_small_direct(y, f, b, t, fma_path, i);
    __syncthreads();
    filter_small_band(f, b.f_hi, b.f_lo, b.f_h2, f, b);
}

/* The batched front's (cuda_small.cuh): member blockIdx.y's direct responses, a thread per
 * sample over the whole grid (a batch has the device to itself: one block per member would
 * leave most of it idle), then its band step in one block. Each block stages the inputs its
 * outputs reach for the longest of the four kernels (stage_inputs, as filter_direct_kernel
 * does for one), and each response reads its rows of that copy: the same values in the same
 * order as direct_at, with neither the bound tests nor the global loads per tap. */
static __device__ __forceinline__ size_t taps_half(size_t taps)
{
    return taps ? (taps - 1) / 2 : 0;
}

static __global__ void __launch_bounds__(CUDA_THREADS)
    filter_direct_batch_kernel(const struct small_front *ms, const struct band_taps t,
                               bool fma_path)
{
    __shared__ float stage[CUDA_THREADS + FILTER_DIRECT_MAX_TAPS + 1];
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    const struct band_layout &b = m->band;
    const size_t n = b.n;
    /* the longest kernel reaches furthest on both sides: the others' rows lie inside its span */
    size_t most = t.taps > t.taps_hi ? t.taps : t.taps_hi;
    most = most > t.taps_h2 ? most : t.taps_h2;
    most = most > t.taps_lo ? most : t.taps_lo;
    const size_t half = taps_half(most), width = blockDim.x + (most ? most - 1 : 0);
    for (size_t base = blockIdx.x * (size_t)blockDim.x; base < n;
         base += (size_t)gridDim.x * blockDim.x) {
        stage_inputs(stage, m->rs.y, n, base, half, width);
        __syncthreads();
        const size_t i = base + threadIdx.x;
        if (i < n) {
            /* y[i] is at stage + threadIdx.x + half; a kernel of half-width hw reads y[i - hw + k] */
            const float *at = stage + threadIdx.x + half;
            const float *row = at - taps_half(t.taps), *row_hi = at - taps_half(t.taps_hi),
                        *row_h2 = at - taps_half(t.taps_h2), *row_lo = at - taps_half(t.taps_lo);
            m->filtered[i] = direct_value([row](size_t k) { return row[k]; }, n, t.taps, i,
                                          fma_path, &t.g);
            b.f_hi[i] = direct_value([row_hi](size_t k) { return row_hi[k]; }, n, t.taps_hi, i,
                                     fma_path, &t.g_hi);
            b.f_h2[i] = direct_value([row_h2](size_t k) { return row_h2[k]; }, n, t.taps_h2, i,
                                     fma_path, &t.g_h2);
            b.f_lo[i] = direct_value([row_lo](size_t k) { return row_lo[k]; }, n, t.taps_lo, i,
                                     fma_path, &t.g_lo);
        }
        __syncthreads(); /* the copy is read before the next round writes it */
    }
}

static __global__ void __launch_bounds__(FILTER_SMALL_THREADS)
    filter_band_batch_kernel(const struct small_front *ms)
{
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    filter_small_band(m->filtered, m->band.f_hi, m->band.f_lo, m->band.f_h2, m->filtered,
                      m->band);
}

/* The most samples whose four responses the staged band kernel holds in shared memory (the
 * default 48 KiB a block). */
#define BAND_STAGE_MAX ((size_t)3072)

/*
 * filter_band_batch_kernel with the member's four responses staged in shared memory first
 * (the block copies them at once, coalesced): the band step's window sums run on one thread
 * per one-second window, in sample order (the CPU's), and from global memory each of their
 * loads waits for the L2; from shared memory the same sums read the same values sooner. The
 * mix reads the staged copies too and writes the filtered lead. Same operations on the same
 * values: the same bits.
 */
static __global__ void __launch_bounds__(FILTER_SMALL_THREADS)
    filter_band_staged_batch_kernel(const struct small_front *ms)
{
    __shared__ float stage[4 * BAND_STAGE_MAX];
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    /* the layout held in registers: its fields are not loaded again from the table in global
     * memory after every barrier, on which ncu showed the block's warps waiting for most of
     * the step (bench/RESULTS.md) */
    const struct band_layout b = m->band;
    float *const f = m->filtered;
    float *s_f = stage, *s_hi = stage + BAND_STAGE_MAX, *s_lo = stage + 2 * BAND_STAGE_MAX,
          *s_h2 = stage + 3 * BAND_STAGE_MAX;
    for (size_t i = threadIdx.x; i < b.n; i += FILTER_SMALL_THREADS) {
        s_f[i] = f[i];
        s_hi[i] = b.f_hi[i];
        s_lo[i] = b.f_lo[i];
        s_h2[i] = b.f_h2[i];
    }
    __syncthreads();
    filter_small_band(s_f, s_hi, s_lo, s_h2, f, b);
}

static enum ecg_status filter_small(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                    struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct band_layout b;
    struct band_taps t;
    struct small_front *s;
    ECG_TRY(band_reserve(ctx, plan, &b, err));
    band_taps_of(plan, &t);
    filter_small_kernel<<<1, FILTER_SMALL_THREADS, 0, ctx->stream>>>(
        (const float *)ctx->resampled.ptr, (float *)ctx->filtered.ptr, b, t,
        cuda_host_has_avx2_fma());
    CUDA_LAUNCH_CHECK();
    s = small_record(ctx); /* the filter's part of the short front's record */
    if (s) {
        s->filtered = (float *)ctx->filtered.ptr;
        s->band = b;
        s->filter_n_in = ctx->n_in;
        s->filter_generation = ctx->generation;
    }
out:
    return status;
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_filter(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_n_a, const struct ecg_plan *plan,
                                   cudaEvent_t mark, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct band_taps t;
    band_taps_of(plan, &t);
    CUDA_TRY(pdl_launch(dim3(grid_for(max_n_a), (unsigned)k), CUDA_THREADS, 0, stream,
                        filter_direct_batch_kernel, members, t, cuda_host_has_avx2_fma()));
    if (mark)
        small_mark(mark, stream);
    if (max_n_a <= BAND_STAGE_MAX) /* a strip of up to 12 s at 250 Hz */
        CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), FILTER_SMALL_THREADS, 0, stream,
                            filter_band_staged_batch_kernel, members));
    else
        CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), FILTER_SMALL_THREADS, 0, stream,
                            filter_band_batch_kernel, members));
out:
    return status;
}

/* ---------------------------------------------------------------- entry point */

/* ECG_CUDA_FILTER=direct|fft forces a path; anything else (or unset) mirrors cpu_filter. */
static int forced_method(void)
{
    const char *v = getenv("ECG_CUDA_FILTER");
    if (v && strcmp(v, "direct") == 0)
        return 1;
    if (v && strcmp(v, "fft") == 0)
        return 2;
    return 0;
}

extern "C" enum ecg_status cuda_filter(void *ctx_ptr, const struct ecg_plan *plan,
                                       struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    const size_t taps = plan->ricker_len;
    int method = forced_method();
    ECG_TRY(ctx_enter(ctx, err));
    if (!plan->ricker || taps % 2 == 0) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda_filter: plan has no odd-length Ricker kernel");
        goto out;
    }
    ECG_TRY(dbuf_reserve(ctx, &ctx->filtered, (ctx->n_a ? ctx->n_a : 1) * sizeof(float), err));
    if (ctx->n_a == 0)
        goto out;
    if (method == 0)
        method = taps <= FILTER_DIRECT_MAX_TAPS ? 1 : 2;
    if (taps > FILTER_DIRECT_MAX_TAPS + 1)
        method = 2;
    if (method == 1 && ctx->n_extra == 0 && ctx->n_a <= FILTER_SMALL_MAX) {
        ECG_TRY(filter_small(ctx, plan, err));
        goto done;
    }
    if (ctx->small) /* this front is no short one: no batched front may reuse the record */
        ctx->small->filter_n_in = 0;
    /* the first lead, then the further ones */
    for (size_t l = 0; l <= ctx->n_extra; l++) {
        const float *d_in = l == 0 ? (const float *)ctx->resampled.ptr
                                   : (const float *)ctx->extra_resampled.ptr + (l - 1) * ctx->n_a;
        float *d_out = l == 0 ? (float *)ctx->filtered.ptr
                              : (float *)ctx->extra_filtered.ptr + (l - 1) * ctx->n_a;
        if (method == 1) {
            ECG_TRY(launch_filter_direct(ctx->stream, d_in, ctx->n_a, plan->ricker, taps, d_out,
                                         cuda_host_has_avx2_fma(), err));
        } else {
            ECG_TRY(filter_fft(ctx, plan, d_in, d_out, err));
        }
        ECG_TRY(noise_band(ctx, plan, d_in, d_out, err));
    }
done:
    ECG_TRY(ctx_stage_done(ctx, "filter", err));
out:
    return status;
}
