/*
 * plan.h - the per-request plan: every coefficient and sample count the pipeline needs, derived
 * once on the host from the model's parameters and the input's sampling rate.
 *
 * Both backends run from the same plan, so that the CPU reference and the CUDA backend use
 * bit-identical filter taps and identical integer windows. A plan is immutable after
 * ecg_plan_init() and may be shared by threads.
 */
#ifndef ECG_PLAN_H
#define ECG_PLAN_H

#include "ecg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Input rates the engine accepts. */
#define ECG_FS_MIN_HZ 100.0
#define ECG_FS_MAX_HZ 2000.0

struct ecg_plan {
    struct ecg_params params;
    double fs_in_hz;      /* the input's rate */
    double fs_a_hz;       /* the analysis rate actually used: fs_in * up / down */

    /* Polyphase rational resampler: y[j] = sum_k fir[k] * xup[j*down - k + delay], where xup is
     * x upsampled by `up` with zeros. up == down == 1 means no resampling (fir unused).
     * Outside the recording x holds its first and last values (x[-1] = x[0], x[n] = x[n-1]);
     * each polyphase branch of fir sums to 1. Design and rules: engine/plan.c. */
    uint32_t up, down;
    float *fir;           /* prototype low-pass, fir_len taps, gain `up` */
    size_t fir_len;
    size_t fir_delay;     /* group delay in upsampled samples, compensated so y[j] aligns */

    /* Ricker wavelet at the analysis rate, odd length, centred ('same' convolution). */
    float *ricker;
    size_t ricker_len;
    /* The noise-aware band's three Ricker kernels (engine/cpu/noise_core.h), same form: two
     * higher bands the detector may read instead, a lower one it measures with. */
    float *ricker_hi, *ricker_h2, *ricker_lo;
    size_t ricker_hi_len, ricker_h2_len, ricker_lo_len;

    /* Detector and segmentation, in samples at the analysis rate. */
    uint32_t nms_window;
    uint32_t refractory;
    uint32_t pre_r;
    uint32_t beat_min;
    uint32_t beat_max;
    uint32_t beat_len;
};

/*
 * Builds the plan for an input at fs_in_hz. Returns ECG_ERR_UNSUPPORTED (code "bad_rate") for a
 * rate outside [ECG_FS_MIN_HZ, ECG_FS_MAX_HZ]; on failure the plan is left empty.
 */
enum ecg_status ecg_plan_init(struct ecg_plan *plan, const struct ecg_params *params,
                              double fs_in_hz, struct ecg_error *err) ECG_WUR;
void ecg_plan_fini(struct ecg_plan *plan);

/* Number of analysis-rate samples produced from n input samples:
 * floor((n_in - 1) * up / down) + 1, and 0 for n_in == 0. */
size_t ecg_plan_resampled_len(const struct ecg_plan *plan, size_t n_in);
/* Smallest length >= n of the form 2^a 3^b 5^c 7^d: the padded FFT length both backends use
 * (FFTW and cuFFT are fast on such lengths; others take a slow path). */
size_t ecg_plan_fft_len(size_t n);
/* Maps an analysis-grid index to the nearest input-grid index: round(index_a * down / up),
 * halves rounded up, in exact integer arithmetic. */
int64_t ecg_plan_to_input(const struct ecg_plan *plan, int64_t index_a);

#ifdef __cplusplus
}
#endif

#endif /* ECG_PLAN_H */
