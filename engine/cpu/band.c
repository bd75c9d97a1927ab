/*
 * band.c - the detector's noise-aware band (CPU reference; engine/cpu/noise_core.h has the
 * method and the arithmetic, shared with the CUDA twin gpu/cuda_band.cu). Thread-safe: no state
 * outside the arguments.
 */
#include "cpu.h"
#include "detect_params.h"
#include "noise_core.h"

/* Windows per chunk: the higher and lower bands are filtered a chunk at a time, so that the
 * step's memory does not grow with the recording (2 x about 1 MB whatever its length). */
#define BAND_CHUNK_WINDOWS 1024

size_t cpu_noise_band_work(const struct ecg_plan *plan, size_t n)
{
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    const size_t chunk = BAND_CHUNK_WINDOWS * win + CPU_FILTER_TILE;
    return 6 * n_win * sizeof(double) + 3 * n_win * sizeof(float) + 3 * chunk * sizeof(float);
}

/* The two higher bands' responses (and with f_lo, the lower band's) over samples [a, b) into
 * buffers that start at sample *from (a rounded down to a filter tile). */
static enum ecg_status band_chunk(const struct ecg_plan *plan, const float *y, size_t n, size_t a,
                                  size_t b, float *f_hi, float *f_h2, float *f_lo, size_t *from,
                                  struct ecg_error *err)
{
    *from = a / CPU_FILTER_TILE * CPU_FILTER_TILE;
    enum ecg_status status =
        cpu_filter_taps(plan->ricker_hi, plan->ricker_hi_len, y, n, *from, b, f_hi, err);
    if (status == ECG_OK)
        status = cpu_filter_taps(plan->ricker_h2, plan->ricker_h2_len, y, n, *from, b, f_h2, err);
    if (status == ECG_OK && f_lo)
        status = cpu_filter_taps(plan->ricker_lo, plan->ricker_lo_len, y, n, *from, b, f_lo, err);
    return status;
}

enum ecg_status cpu_noise_band(const struct ecg_plan *plan, const float *y, float *f, size_t n,
                               void *work, struct ecg_error *err)
{
    if (n == 0)
        return ECG_OK;
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    const size_t chunk = BAND_CHUNK_WINDOWS * win + CPU_FILTER_TILE;
    /* work: lo | hi | peak | mean | peak_hi | peak_h2 (doubles, per window) | keep | take |
     * take2 (floats, per window) | f_hi | f_h2 | f_lo (floats, one chunk) */
    double *d = work;
    const struct noise_band_measures m = {d, d + n_win, d + 2 * n_win, d + 3 * n_win,
                                          d + 4 * n_win, d + 5 * n_win};
    float *keep = (float *)(d + 6 * n_win), *take = keep + n_win, *take2 = take + n_win;
    float *f_hi = take2 + n_win, *f_h2 = f_hi + chunk, *f_lo = f_h2 + chunk;
    enum ecg_status status = ECG_OK;
    /* 1. each window's indices and peaks, a chunk of windows at a time (on one thread: the step
     * is a few short loops per chunk, which OpenMP's fork and join would cost more than) */
    for (size_t j0 = 0; j0 < n_win && status == ECG_OK; j0 += BAND_CHUNK_WINDOWS) {
        const size_t j1 = j0 + BAND_CHUNK_WINDOWS < n_win ? j0 + BAND_CHUNK_WINDOWS : n_win;
        const size_t b = j1 * win < n ? j1 * win : n;
        size_t from;
        status = band_chunk(plan, y, n, j0 * win, b, f_hi, f_h2, f_lo, &from, err);
        if (status != ECG_OK)
            break;
        for (size_t j = j0; j < j1; j++) {
            /* window j's samples, in the chunk's buffers and in f */
            const size_t a = j * win, len = a + win < n ? win : n - a;
            const struct noise_band_measures mj = {m.lo + j,      m.hi + j,      m.peak + j,
                                                   m.mean + j,    m.peak_hi + j, m.peak_h2 + j};
            noise_band_window(f + a, f_hi + (a - from), f_lo + (a - from), f_h2 + (a - from),
                              len, len, 0, &mj);
        }
    }
    if (status != ECG_OK)
        return status;
    /* 2. each window's gains */
    for (size_t j = 0; j < n_win; j++)
        noise_band_gains(&m, n_win, j, &keep[j], &take[j], &take2[j]);
    /* 3. the mix, in the chunks whose samples interpolate between gains of which one is not
     * (1, 0, 0) (elsewhere noise_band_mix gives f itself, so those are skipped). The higher
     * bands are filtered again there: keeping them from step 1 would cost 8 bytes per sample
     * for the whole recording, against two short convolutions of the chunks that need them. */
    for (size_t j0 = 0; j0 < n_win && status == ECG_OK; j0 += BAND_CHUNK_WINDOWS) {
        const size_t j1 = j0 + BAND_CHUNK_WINDOWS < n_win ? j0 + BAND_CHUNK_WINDOWS : n_win;
        bool any = false;
        for (size_t j = j0 > 0 ? j0 - 1 : 0; j < j1 + 1 && j < n_win && !any; j++)
            any = keep[j] != 1.0f || take[j] != 0.0f || take2[j] != 0.0f;
        if (!any)
            continue;
        const size_t a = j0 * win, b = j1 * win < n ? j1 * win : n;
        size_t from;
        status = band_chunk(plan, y, n, a, b, f_hi, f_h2, NULL, &from, err);
        if (status != ECG_OK)
            break;
        for (size_t i = a; i < b; i++)
            f[i] = noise_band_mix(keep, take, take2, n_win, win, i, f[i], f_hi[i - from],
                                  f_h2[i - from]);
    }
    return status;
}
