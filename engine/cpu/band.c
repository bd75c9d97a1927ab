/*
 * band.c - the detector's noise-aware band (CPU reference; engine/cpu/noise_core.h has the
 * method and the arithmetic, shared with the CUDA twin gpu/cuda_band.cu). Thread-safe: no state
 * outside the arguments.
 */
#include "cpu.h"
#include "detect_params.h"
#include "noise_core.h"

/* Recordings shorter than this run on one thread (OpenMP's start-up would cost more). */
#define BAND_PARALLEL_MIN 262144

size_t cpu_noise_band_work(const struct ecg_plan *plan, size_t n)
{
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    return 4 * n_win * sizeof(double) + 2 * n_win * sizeof(float) + 2 * n * sizeof(float);
}

enum ecg_status cpu_noise_band(const struct ecg_plan *plan, const float *y, float *f, size_t n,
                               void *work, struct ecg_error *err)
{
    if (n == 0)
        return ECG_OK;
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    /* work: lo | hi | peak | peak_hi (doubles) | keep | take | f_hi | f_lo (floats) */
    double *lo = work, *hi = lo + n_win, *peak = hi + n_win, *peak_hi = peak + n_win;
    float *keep = (float *)(peak_hi + n_win), *take = keep + n_win, *f_hi = take + n_win;
    float *f_lo = f_hi + n;
    enum ecg_status status = cpu_filter_taps(plan->ricker_hi, plan->ricker_hi_len, y, n, f_hi, err);
    if (status == ECG_OK)
        status = cpu_filter_taps(plan->ricker_lo, plan->ricker_lo_len, y, n, f_lo, err);
    if (status != ECG_OK)
        return status;
    /* every window, every sample on its own: the thread count changes no bit */
#pragma omp parallel for schedule(static) if (n >= BAND_PARALLEL_MIN)
    for (size_t j = 0; j < n_win; j++)
        noise_band_window(f, f_hi, f_lo, n, win, j, &lo[j], &hi[j], &peak[j], &peak_hi[j]);
#pragma omp parallel for schedule(static) if (n >= BAND_PARALLEL_MIN)
    for (size_t j = 0; j < n_win; j++)
        noise_band_gains(lo, hi, peak, peak_hi, n_win, j, &keep[j], &take[j]);
    /* Samples between two window centres whose gains are both (1, 0) interpolate to exactly
     * (1, 0) and keep f as it is (noise_band_mix): only the other spans are mixed. Span s runs
     * from centre s - 1 to centre s (span 0 from the start, span n_win to the end). */
#pragma omp parallel for schedule(dynamic, 64) if (n >= BAND_PARALLEL_MIN)
    for (size_t span = 0; span <= n_win; span++) {
        const size_t a = span == 0 ? 0 : span - 1, b = span < n_win ? span : n_win - 1;
        if (keep[a] == 1.0f && take[a] == 0.0f && keep[b] == 1.0f && take[b] == 0.0f)
            continue;
        const size_t lo_i = span == 0 ? 0 : (span - 1) * win + win / 2;
        const size_t hi_i = span < n_win ? span * win + win / 2 : n;
        for (size_t i = lo_i; i < hi_i && i < n; i++)
            f[i] = noise_band_mix(keep, take, n_win, win, i, f[i], f_hi[i]);
    }
    return ECG_OK;
}
