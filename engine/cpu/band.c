/*
 * band.c - the detector's noise-aware band (CPU reference; engine/cpu/noise_core.h has the
 * method and the arithmetic, shared with the CUDA twin gpu/cuda_band.cu). Thread-safe: no state
 * outside the arguments.
 */
#include <stdlib.h>

#include "cpu.h"
#include "detect_params.h"
#include "noise_core.h"

enum ecg_status cpu_noise_band(const struct ecg_plan *plan, const float *y, float *f, size_t n,
                               struct ecg_error *err)
{
    if (n == 0)
        return ECG_OK;
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    enum ecg_status status = ECG_OK;
    float *f_hi = malloc(2 * n * sizeof *f_hi);
    double *stats = malloc(4 * n_win * sizeof *stats);
    float *gains = malloc(2 * n_win * sizeof *gains);
    if (!f_hi || !stats || !gains) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "noise band: %zu samples", n);
        goto out;
    }
    float *f_lo = f_hi + n, *keep = gains, *take = gains + n_win;
    double *lo = stats, *hi = stats + n_win, *peak = stats + 2 * n_win,
           *peak_hi = stats + 3 * n_win;
    status = cpu_filter_taps(plan->ricker_hi, plan->ricker_hi_len, y, n, f_hi, err);
    if (status == ECG_OK)
        status = cpu_filter_taps(plan->ricker_lo, plan->ricker_lo_len, y, n, f_lo, err);
    if (status != ECG_OK)
        goto out;
    for (size_t j = 0; j < n_win; j++)
        noise_band_window(f, f_hi, f_lo, n, win, j, &lo[j], &hi[j], &peak[j], &peak_hi[j]);
    bool any = false;
    for (size_t j = 0; j < n_win; j++) {
        noise_band_gains(lo, hi, peak, peak_hi, n_win, j, &keep[j], &take[j]);
        any = any || keep[j] != 1.0f || take[j] != 0.0f;
    }
    /* a clean recording keeps its response as it is (as the mix would, sample by sample) */
    if (any)
        for (size_t i = 0; i < n; i++)
            f[i] = noise_band_mix(keep, take, n_win, win, i, f[i], f_hi[i]);
out:
    free(f_hi);
    free(stats);
    free(gains);
    return status;
}
