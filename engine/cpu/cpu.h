/*
 * cpu.h - the CPU backend's stage functions: the reference implementation of the pipeline.
 *
 * Each function is a pure computation on host arrays that the caller owns; none keeps state
 * between calls, so all are thread-safe unless noted. engine/cpu/cpu_backend.c wraps them into
 * the backend table (backend.h). The CUDA backend (gpu/) implements the same stages and is
 * tested against these, stage by stage.
 */
#ifndef ECG_CPU_H
#define ECG_CPU_H

#include "ecg.h"
#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resamples x (n input samples) to the analysis rate with the plan's polyphase filter.
 * y must hold ecg_plan_resampled_len(plan, n) floats. */
enum ecg_status cpu_resample(const struct ecg_plan *plan, const float *x, size_t n, float *y,
                             struct ecg_error *err) ECG_WUR;

/* Ricker band-pass: f = y (*) plan->ricker, linear 'same' convolution (no wrap-around), n
 * samples in and out. Uses FFTW for long signals and direct convolution for short ones. */
enum ecg_status cpu_filter(const struct ecg_plan *plan, const float *y, size_t n, float *f,
                           struct ecg_error *err) ECG_WUR;

/* How cpu_filter_with() convolves: AUTO picks the faster for the kernel and signal length (what
 * cpu_filter does); DIRECT and FFT force one path (tests and benchmarks). Same result within
 * float rounding. */
enum cpu_filter_method { CPU_FILTER_AUTO = 0, CPU_FILTER_DIRECT, CPU_FILTER_FFT };
/* AUTO convolves directly up to this many taps, by FFT beyond (measured by bench/bench_dsp). */
#define CPU_FILTER_DIRECT_MAX_TAPS 103
enum ecg_status cpu_filter_with(const struct ecg_plan *plan, const float *y, size_t n, float *f,
                                enum cpu_filter_method method, struct ecg_error *err) ECG_WUR;

/*
 * Non-maximum suppression: writes to peaks, in ascending order, every index i with
 * v[i] > floor_value that is the largest value of the window [i - half, i + half] (clipped to
 * the signal); of equal values the leftmost wins, so a plateau yields one peak at its left end.
 * Peaks are more than half apart: peaks needs room for n / (half + 1) + 1 entries. O(n) for
 * any half (monotonic deque). Fails only with ECG_ERR_NOMEM (then *n_peaks is 0).
 */
enum ecg_status cpu_nms(const float *v, size_t n, size_t half, float floor_value, int64_t *peaks,
                        size_t *n_peaks, struct ecg_error *err) ECG_WUR;

/*
 * R-peak detection. Inputs: the input signal x (n_in samples, input grid), the resampled signal y
 * and the filter response f (n_a samples each, analysis grid). On success *peaks_a and
 * *peaks_in are malloc'd ascending arrays of *n_peaks R peaks in the analysis grid and in the
 * input grid (refined to the true peak of the QRS); the caller frees them. On failure both are
 * NULL.
 */
enum ecg_status cpu_detect(const struct ecg_plan *plan, const float *x, size_t n_in,
                           const float *y, const float *f, size_t n_a, int64_t **peaks_a,
                           int64_t **peaks_in, size_t *n_peaks, struct ecg_error *err) ECG_WUR;

/*
 * Segmentation: for k beats, fills onset/end (input grid, end exclusive), rr_ms (NaN for the
 * first beat) and kept (1 when the beat's length at the analysis rate lies within
 * [beat_min, beat_max]). Arrays have k entries, caller-allocated.
 */
void cpu_segment(const struct ecg_plan *plan, const int64_t *peaks_a, const int64_t *peaks_in,
                 size_t k, size_t n_a, size_t n_in, int64_t *onset, int64_t *end, float *rr_ms,
                 uint8_t *kept);

/*
 * Embedding: normalises y robustly over the whole recording (median/MAD) and copies each kept
 * beat (analysis grid, from onset to end) into a zero-padded row of beat_len floats of emb
 * (k x beat_len, caller-allocated). Rows of beats not kept are all zero.
 */
enum ecg_status cpu_embed(const struct ecg_plan *plan, const float *y, size_t n_a,
                          const int64_t *peaks_a, const uint8_t *kept, size_t k, float *emb,
                          struct ecg_error *err) ECG_WUR;

/*
 * VAE encoding and scoring of k beats (emb: k x beat_len). For kept beats writes the latent mean
 * (k x latent_dim), the score and the outlier flag; beats not kept get NaN and 0. rr_ms is the
 * per-beat RR interval (NaN for the first beat) for the rhythm part of the score.
 */
enum ecg_status cpu_vae_score(const struct ecg_model *model, const float *emb,
                              const uint8_t *kept, const float *rr_ms, size_t k, float *latent,
                              float *score, uint8_t *outlier, struct ecg_error *err) ECG_WUR;

#ifdef __cplusplus
}
#endif

#endif /* ECG_CPU_H */
