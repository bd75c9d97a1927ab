/*
 * hrv.h - heart rate and heart-rate variability over normal-to-normal (NN) intervals, from the
 * beat table (engine/hrv.c; docs/RHYTHM.md defines every measure). Backend-neutral: it runs on
 * the host after the beats are fetched, for both backends.
 *
 * Threading: pure functions of their arguments; the caller owns every array.
 */
#ifndef ECG_HRV_H
#define ECG_HRV_H

#include "ecg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ECG_HRV_LOCAL_HALF 5       /* the local median takes the RR intervals i-5..i+5 */
#define ECG_HRV_PREMATURE 0.8      /* a beat whose RR is below 0.8 x local median is ectopic */
#define ECG_HRV_LONG 1.3           /* an RR above 1.3 x local median: missed, misplaced or paused */
#define ECG_HRV_MIN_SPECTRAL_S 120.0 /* LF and HF need at least 2 minutes of NN intervals */
#define ECG_HRV_LF_LO 0.04
#define ECG_HRV_LF_HI 0.15
#define ECG_HRV_HF_LO 0.15
#define ECG_HRV_HF_HI 0.40

/*
 * Marks normal-to-normal intervals. rr_ms[i] is the interval ending at beat i (rr_ms[0] is
 * ignored; the others finite); bad[i] (optional, NULL = none) flags beats that may not bound
 * an NN interval (unreadable, flagged by the model). Sets nn[i] = 1 when interval i is NN:
 * neither of its beats is bad or ectopic (premature against the local median), and it is not
 * long against the local median. nn[0] = 0. ECG_ERR_NOMEM or ECG_OK.
 */
enum ecg_status ecg_hrv_select_nn(const double *rr_ms, const uint8_t *bad, size_t n,
                                  uint8_t *nn, struct ecg_error *err) ECG_WUR;

/*
 * Which build of the vector code a computation takes: BEST (the widest the CPU has), PORTABLE,
 * AVX2 or AVX512 (only on a CPU that has it). Every way gives the same bits.
 */
enum ecg_hrv_way { ECG_HRV_BEST, ECG_HRV_PORTABLE, ECG_HRV_AVX2, ECG_HRV_AVX512 };

/*
 * The local medians ecg_hrv_select_nn compares each interval with: med[i] = the median of
 * rr_ms[i - 5 .. i + 5] within 1..n-1 (the mean of the middle two where the ends cut the window
 * to an even count), for i = 1..n-1 (med[0] is not written), by way (AVX512 takes the AVX2
 * build). Exposed for tests.
 */
void ecg_hrv_local_medians(const double *rr_ms, size_t n, double *med, enum ecg_hrv_way way);

/*
 * LF and HF band powers (ms^2) of the NN series y (ms) at times t (s), n points spanning at
 * least ECG_HRV_MIN_SPECTRAL_S: trapezoids of the Lomb-Scargle periodogram on hrv.c's grid, by
 * way. ECG_ERR_NOMEM or ECG_OK. ecg_hrv_compute calls it with BEST; exposed for tests.
 */
enum ecg_status ecg_hrv_band_powers(const double *t, const double *y, size_t n,
                                    enum ecg_hrv_way way, double *lf, double *hf,
                                    struct ecg_error *err) ECG_WUR;

/*
 * The statistics of the NN intervals: rr_ms and nn as above, t_s[i] the time of beat i in
 * seconds (for the Lomb-Scargle spectrum). Fills every field of *out (NaN where undefined).
 * ECG_ERR_NOMEM or ECG_OK.
 */
enum ecg_status ecg_hrv_compute(const double *rr_ms, const uint8_t *nn, const double *t_s,
                                size_t n, struct ecg_hrv *out, struct ecg_error *err) ECG_WUR;

/*
 * Lomb-Scargle periodogram of samples y at times t (n points), as a one-sided power spectral
 * density normalised so that its integral over frequency equals the variance of y (units of y^2
 * per Hz): psd[k] at freq[k], m frequencies. Exposed for tests.
 */
void ecg_hrv_lomb(const double *t, const double *y, size_t n, const double *freq, size_t m,
                  double *psd);

/* Fills result->nn (caller-allocated, n_beats entries) and result->hrv from its beats (r_peak,
 * fs_hz, and readable/outlier/kept when present). ECG_ERR_NOMEM or ECG_OK. */
enum ecg_status ecg_hrv_assess(struct ecg_result *result, struct ecg_error *err) ECG_WUR;

#ifdef __cplusplus
}
#endif

#endif /* ECG_HRV_H */
