/*
 * filter.c - the Ricker band-pass on the CPU: f = y (*) ricker, linear convolution, 'same' part.
 *
 * Definition, with K = ricker_len (odd) and half = (K - 1) / 2:
 *     f[i] = sum_{k=0}^{K-1} ricker[k] * (y[i + half - k] - y[0]),   0 outside [0, n)
 * which is numpy.convolve(y - y[0], ricker, mode="same"). No wrap-around: the end of the
 * recording never leaks into its start. The first sample's level is taken off every sample (a
 * float subtraction, exact on both backends) so that a recording's constant level reaches the
 * filter as nothing: the sampled, truncated Ricker taps do not sum to zero (1.7 % of their peak
 * for the detector's), and a raw amplifier's offset of tens or hundreds of QRS heights otherwise
 * leaked into the QRS band and moved the detection (docs/ACCURACY.md). A constant signal
 * filters to exactly zero, as a zero one does.
 *
 * Two paths with the same result (within float rounding):
 * - direct: tiles of FILTER_TILE outputs; each tile's input (with its zero padding at the
 *   recording's ends) is copied into a small buffer that stays in L1, and the kernel is applied
 *   tap by tap across the tile (register-blocked AVX-512 or AVX2 with FMA when the CPU has them,
 *   chosen at run time, the same bits either way; plain C the compiler vectorises otherwise).
 *   O(n K).
 * - FFT: overlap-save with single-precision FFTW, blocks of L points (a product of 2, 3, 5, 7
 *   that FFTW handles fast), each yielding L - K + 1 outputs. O(n log L).
 * cpu_filter picks direct for kernels up to CPU_FILTER_DIRECT_MAX_TAPS (cpu.h) taps, FFT beyond.
 * The crossover was measured with bench/bench_dsp (Xeon, AVX2 path, one core): direct runs at
 * ~900 M samples/s for the default 31 taps and falls as 1/K, FFT stays at ~250-300 M samples/s
 * for any K up to a few hundred; direct won at 95 taps and FFT at 111 in every run, so the
 * threshold sits between them.
 *
 * Threading: thread-safe. FFTW's planner is not, so plans are made under fft_plans.lock (after
 * fftwf_make_planner_thread_safe(), which also protects any other FFTW user in the process), one
 * pair per block length, and cached for the life of the process (FILTER_PLAN_CACHE lengths;
 * beyond that a call plans, uses and destroys its own). Executing a plan on new arrays
 * (fftwf_execute_dft_r2c/c2r) is thread-safe, so every call works in its own buffers.
 */
#include <fftw3.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FILTER_X86 1
#endif

#include "cpu.h"
#include "ecg_parallel.h"

#define FILTER_TILE CPU_FILTER_TILE  /* outputs per tile of the direct path */
#define FILTER_PARALLEL_MIN 262144   /* shorter signals are filtered on one thread */
#define FILTER_FFT_MIN_LEN 4096      /* smallest overlap-save block */
#define FILTER_PLAN_CACHE 32

/* The process-wide cache of FFTW plans, one pair per block length. */
static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    size_t count;
    struct {
        size_t len;
        fftwf_plan r2c, c2r;
    } entry[FILTER_PLAN_CACHE];
} fft_plans = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void fft_plans_setup(void)
{
    fftwf_make_planner_thread_safe();
}

/* Finds or makes the r2c/c2r plans for length len (out-of-place, on fftwf_malloc'd arrays; in,
 * spec and out are the caller's buffers, used only as planning templates). Sets *cached to false
 * when the cache was full: the caller then releases the plans with fft_plans_release(). */
static bool fft_plans_get(size_t len, float *in, fftwf_complex *spec, float *out,
                          fftwf_plan *r2c, fftwf_plan *c2r, bool *cached)
{
    bool found = false;
    pthread_once(&fft_plans.once, fft_plans_setup);
    pthread_mutex_lock(&fft_plans.lock);
    for (size_t i = 0; i < fft_plans.count; i++) {
        if (fft_plans.entry[i].len == len) {
            *r2c = fft_plans.entry[i].r2c;
            *c2r = fft_plans.entry[i].c2r;
            *cached = found = true;
            goto out;
        }
    }
    /* FFTW_ESTIMATE never touches the arrays, so planning on the caller's live buffers is fine */
    *r2c = fftwf_plan_dft_r2c_1d((int)len, in, spec, FFTW_ESTIMATE);
    *c2r = fftwf_plan_dft_c2r_1d((int)len, spec, out, FFTW_ESTIMATE);
    if (!*r2c || !*c2r) {
        if (*r2c)
            fftwf_destroy_plan(*r2c);
        if (*c2r)
            fftwf_destroy_plan(*c2r);
        goto out;
    }
    found = true;
    *cached = fft_plans.count < FILTER_PLAN_CACHE;
    if (*cached) {
        fft_plans.entry[fft_plans.count].len = len;
        fft_plans.entry[fft_plans.count].r2c = *r2c;
        fft_plans.entry[fft_plans.count].c2r = *c2r;
        fft_plans.count++;
    }
out:
    pthread_mutex_unlock(&fft_plans.lock);
    return found;
}

static void fft_plans_release(fftwf_plan r2c, fftwf_plan c2r)
{
    pthread_mutex_lock(&fft_plans.lock);
    fftwf_destroy_plan(r2c);
    fftwf_destroy_plan(c2r);
    pthread_mutex_unlock(&fft_plans.lock);
}

/* ---------------------------------------------------------------- direct path */

/* f[u] = sum_k g[k] * buf[u + k] for u < count (g is the reversed kernel). */
static void tile_portable(const float *g, size_t taps, const float *buf, size_t count, float *f)
{
    enum { BLOCK = 64 };
    size_t u = 0;
    for (; u + BLOCK <= count; u += BLOCK) {
        float acc[BLOCK] = {0};
        for (size_t k = 0; k < taps; k++)
            for (size_t l = 0; l < BLOCK; l++)
                acc[l] += g[k] * buf[u + k + l];
        memcpy(f + u, acc, sizeof acc);
    }
    for (; u < count; u++) {
        float acc = 0.0f;
        for (size_t k = 0; k < taps; k++)
            acc += g[k] * buf[u + k];
        f[u] = acc;
    }
}

#ifdef FILTER_X86
/* Same as tile_portable, 32 outputs in 4 registers per pass over the taps. */
__attribute__((target("avx2,fma"))) static void tile_avx2(const float *g, size_t taps,
                                                          const float *buf, size_t count,
                                                          float *f)
{
    size_t u = 0;
    for (; u + 32 <= count; u += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        const float *b = buf + u;
        for (size_t k = 0; k < taps; k++) {
            __m256 gk = _mm256_broadcast_ss(g + k);
            a0 = _mm256_fmadd_ps(gk, _mm256_loadu_ps(b + k), a0);
            a1 = _mm256_fmadd_ps(gk, _mm256_loadu_ps(b + k + 8), a1);
            a2 = _mm256_fmadd_ps(gk, _mm256_loadu_ps(b + k + 16), a2);
            a3 = _mm256_fmadd_ps(gk, _mm256_loadu_ps(b + k + 24), a3);
        }
        _mm256_storeu_ps(f + u, a0);
        _mm256_storeu_ps(f + u + 8, a1);
        _mm256_storeu_ps(f + u + 16, a2);
        _mm256_storeu_ps(f + u + 24, a3);
    }
    for (; u + 8 <= count; u += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (size_t k = 0; k < taps; k++)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(g + k), _mm256_loadu_ps(buf + u + k), a0);
        _mm256_storeu_ps(f + u, a0);
    }
    for (; u < count; u++) {
        float acc = 0.0f;
        for (size_t k = 0; k < taps; k++)
            acc += g[k] * buf[u + k];
        f[u] = acc;
    }
}

/* Same as tile_avx2, 64 outputs in 4 AVX-512 registers per pass over the taps, then tile_avx2
 * for the rest: every output gets the fused multiply-adds of tile_avx2, in the same order (and
 * the outputs past the last whole 8, the same plain ones), so the same bits. */
__attribute__((target("avx512f,avx2,fma"))) static void tile_avx512(const float *g, size_t taps,
                                                                   const float *buf,
                                                                   size_t count, float *f)
{
    size_t u = 0;
    for (; u + 64 <= count; u += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        const float *b = buf + u;
        for (size_t k = 0; k < taps; k++) {
            __m512 gk = _mm512_set1_ps(g[k]);
            a0 = _mm512_fmadd_ps(gk, _mm512_loadu_ps(b + k), a0);
            a1 = _mm512_fmadd_ps(gk, _mm512_loadu_ps(b + k + 16), a1);
            a2 = _mm512_fmadd_ps(gk, _mm512_loadu_ps(b + k + 32), a2);
            a3 = _mm512_fmadd_ps(gk, _mm512_loadu_ps(b + k + 48), a3);
        }
        _mm512_storeu_ps(f + u, a0);
        _mm512_storeu_ps(f + u + 16, a1);
        _mm512_storeu_ps(f + u + 32, a2);
        _mm512_storeu_ps(f + u + 48, a3);
    }
    tile_avx2(g, taps, buf + u, count - u, f + u); /* u is a multiple of 8: the same split */
}
#endif

/* The build of the inner loop a filtering takes (cpu_filter_isa resolved). */
static enum cpu_filter_isa filter_isa(enum cpu_filter_isa isa)
{
#ifdef FILTER_X86
    if (isa == CPU_FILTER_ISA_BEST)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                       __builtin_cpu_supports("fma")
                   ? CPU_FILTER_ISA_AVX512
               : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                   ? CPU_FILTER_ISA_AVX2
                   : CPU_FILTER_ISA_PORTABLE;
    return isa;
#else
    (void)isa;
    return CPU_FILTER_ISA_PORTABLE;
#endif
}

/* Tile `tile` of the direct convolution of y[0, n) (reversed kernel g, `taps` long) into out,
 * which holds the outputs from lo on; buf: span = FILTER_TILE + taps - 1 floats of scratch. */
static void filter_tile(const float *g, size_t taps, const float *y, size_t n, size_t lo,
                        size_t tile, float *buf, enum cpu_filter_isa isa, float *out)
{
    const size_t half = (taps - 1) / 2;
    const size_t i0 = tile * FILTER_TILE;
    const size_t count = n - i0 < FILTER_TILE ? n - i0 : FILTER_TILE;
    /* buf[t] = y[i0 - half + t] - y[0] for t < count + taps - 1, zero outside [0, n) */
    const size_t len = count + taps - 1;
    const float level = y[0];
    size_t t = 0;
    for (; t < len && i0 + t < half; t++)
        buf[t] = 0.0f;
    size_t src = i0 + t - half;
    size_t avail = src < n ? n - src : 0;
    size_t copy = len - t < avail ? len - t : avail;
    for (size_t q = 0; q < copy; q++)
        buf[t + q] = y[src + q] - level;
    t += copy;
    for (; t < len; t++)
        buf[t] = 0.0f;
#ifdef FILTER_X86
    if (isa == CPU_FILTER_ISA_AVX512)
        tile_avx512(g, taps, buf, count, out + (i0 - lo));
    else if (isa == CPU_FILTER_ISA_AVX2)
        tile_avx2(g, taps, buf, count, out + (i0 - lo));
    else
        tile_portable(g, taps, buf, count, out + (i0 - lo));
#else
    (void)isa;
    tile_portable(g, taps, buf, count, out + (i0 - lo));
#endif
}

/* Outputs [lo, hi) of the direct convolution of the whole signal y[0, n) into out[0, hi - lo);
 * lo is a multiple of FILTER_TILE, so the tiles (which decide where the vector code and its
 * fused multiply-adds apply) are those of the whole signal and every output is bit-identical to
 * filtering it all at once. */
static enum ecg_status filter_direct_range(const float *kernel, size_t taps, const float *y,
                                           size_t n, size_t lo, size_t hi,
                                           enum cpu_filter_isa way, float *out,
                                           struct ecg_error *err)
{
    const size_t span = FILTER_TILE + taps - 1;
    const size_t first = lo / FILTER_TILE, n_tiles = (hi - lo + FILTER_TILE - 1) / FILTER_TILE;
    /* Tiles are independent (each output is computed the same way whoever computes it): long
     * ranges spread them over OpenMP's threads, each with a tile buffer of its own. Short ones
     * stay out of OpenMP altogether: a region whose if clause is false still allocates a team
     * and wakes a futex on every call (ecg_parallel.h). */
    int threads = 1;
#ifdef _OPENMP
    if (hi - lo >= FILTER_PARALLEL_MIN)
        threads = omp_get_max_threads();
#endif
    float *g = malloc((taps + (size_t)threads * span) * sizeof *g);
    if (!g)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cpu_filter: %zu-tap buffers", taps);
    for (size_t k = 0; k < taps; k++)
        g[k] = kernel[taps - 1 - k];
    const enum cpu_filter_isa isa = filter_isa(way);
    if (threads > 1) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
        for (size_t tile = first; tile < first + n_tiles; tile++)
            filter_tile(g, taps, y, n, lo, tile, g + taps + (size_t)ecg_thread_num() * span,
                        isa, out);
    } else {
        for (size_t tile = first; tile < first + n_tiles; tile++)
            filter_tile(g, taps, y, n, lo, tile, g + taps, isa, out);
    }
    free(g);
    return ECG_OK;
}

static enum ecg_status filter_direct(const float *kernel, size_t taps, const float *y, size_t n,
                                     float *f, struct ecg_error *err)
{
    return filter_direct_range(kernel, taps, y, n, 0, n, CPU_FILTER_ISA_BEST, f, err);
}

/* ---------------------------------------------------------------- FFT path (overlap-save) */

static enum ecg_status filter_fft(const float *kernel, size_t taps, const float *y, size_t n,
                                  float *f, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t half = (taps - 1) / 2;
    size_t want = 8 * (taps - 1);
    if (want < FILTER_FFT_MIN_LEN)
        want = FILTER_FFT_MIN_LEN;
    size_t len = ecg_plan_fft_len(want);
    if (len > n + taps - 1) {
        /* one block covers a short signal; powers of two keep the number of plans small */
        len = 1;
        while (len < n + taps - 1)
            len *= 2;
    }
    const size_t bins = len / 2 + 1;
    const size_t step = len - taps + 1; /* valid outputs per block */
    float *in = fftwf_malloc(len * sizeof *in);
    float *out = fftwf_malloc(len * sizeof *out);
    fftwf_complex *spec = fftwf_malloc(bins * sizeof *spec);
    fftwf_complex *kernel_spec = fftwf_malloc(bins * sizeof *kernel_spec);
    fftwf_plan r2c = NULL, c2r = NULL;
    bool cached = true;
    if (!in || !out || !spec || !kernel_spec) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cpu_filter: FFT buffers of %zu",
                          len);
        goto out;
    }
    if (len > (size_t)INT32_MAX || !fft_plans_get(len, in, spec, out, &r2c, &c2r, &cached)) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "fft_plan",
                          "cpu_filter: FFTW could not plan a transform of %zu points", len);
        goto out;
    }

    /* Kernel spectrum, with the 1/len of the unnormalised inverse transform folded in. */
    memset(in, 0, len * sizeof *in);
    memcpy(in, kernel, taps * sizeof *in);
    fftwf_execute_dft_r2c(r2c, in, kernel_spec);
    const float scale = 1.0f / (float)len;
    for (size_t b = 0; b < bins; b++) {
        kernel_spec[b][0] *= scale;
        kernel_spec[b][1] *= scale;
    }

    /* Block by block over the full convolution c[m] = sum_k kernel[k] y[m - k]; f[i] = c[i +
     * half]. A block of inputs y[m0 - taps + 1 .. m0 + step - 1] yields c[m0 .. m0 + step). */
    for (size_t m0 = half; m0 < n + half; m0 += step) {
        for (size_t t = 0; t < len; t++) {
            /* y index m0 - taps + 1 + t, computed without going negative */
            size_t shifted = m0 + t; /* = y index + taps - 1 */
            in[t] = (shifted >= taps - 1 && shifted - (taps - 1) < n)
                        ? y[shifted - (taps - 1)] - y[0]
                        : 0.0f;
        }
        fftwf_execute_dft_r2c(r2c, in, spec);
        for (size_t b = 0; b < bins; b++) {
            float re = spec[b][0] * kernel_spec[b][0] - spec[b][1] * kernel_spec[b][1];
            float im = spec[b][0] * kernel_spec[b][1] + spec[b][1] * kernel_spec[b][0];
            spec[b][0] = re;
            spec[b][1] = im;
        }
        fftwf_execute_dft_c2r(c2r, spec, out);
        size_t count = n + half - m0 < step ? n + half - m0 : step;
        memcpy(f + (m0 - half), out + taps - 1, count * sizeof *f);
    }
out:
    if (!cached)
        fft_plans_release(r2c, c2r);
    fftwf_free(in);
    fftwf_free(out);
    fftwf_free(spec);
    fftwf_free(kernel_spec);
    return status;
}

enum ecg_status cpu_filter_with(const struct ecg_plan *plan, const float *y, size_t n, float *f,
                                enum cpu_filter_method method, struct ecg_error *err)
{
    if (!plan || (n > 0 && (!y || !f)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cpu_filter: NULL argument");
    if (!plan->ricker || plan->ricker_len % 2 == 0)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                        "cpu_filter: plan has no odd-length Ricker kernel");
    if (n == 0)
        return ECG_OK;
    if (method == CPU_FILTER_AUTO)
        method = plan->ricker_len <= CPU_FILTER_DIRECT_MAX_TAPS ? CPU_FILTER_DIRECT
                                                                : CPU_FILTER_FFT;
    if (method == CPU_FILTER_FFT)
        return filter_fft(plan->ricker, plan->ricker_len, y, n, f, err);
    return filter_direct(plan->ricker, plan->ricker_len, y, n, f, err);
}

enum ecg_status cpu_filter_taps(const float *taps, size_t n_taps, const float *y, size_t n,
                                size_t lo, size_t hi, float *out, struct ecg_error *err)
{
    if (!taps || n_taps % 2 == 0 || hi > n || lo > hi || lo % CPU_FILTER_TILE != 0 ||
        (hi > lo && (!y || !out)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cpu_filter_taps: bad kernel or range");
    if (hi == lo)
        return ECG_OK;
    return filter_direct_range(taps, n_taps, y, n, lo, hi, CPU_FILTER_ISA_BEST, out, err);
}

enum ecg_status cpu_filter_taps_isa(const float *taps, size_t n_taps, const float *y, size_t n,
                                    enum cpu_filter_isa isa, float *out, struct ecg_error *err)
{
    if (!taps || n_taps % 2 == 0 || (n > 0 && (!y || !out)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cpu_filter_taps_isa: bad kernel");
    if (n == 0)
        return ECG_OK;
    return filter_direct_range(taps, n_taps, y, n, 0, n, isa, out, err);
}

enum ecg_status cpu_filter(const struct ecg_plan *plan, const float *y, size_t n, float *f,
                           struct ecg_error *err)
{
    return cpu_filter_with(plan, y, n, f, CPU_FILTER_AUTO, err);
}
