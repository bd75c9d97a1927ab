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

/* Outputs [lo, hi) of f = y (*) taps ('same', odd length, y of n samples) by direct
 * convolution into out[0, hi - lo): the arithmetic of cpu_filter's direct path, which the CUDA
 * direct kernel reproduces bit for bit. lo is a multiple of CPU_FILTER_TILE (the direct path's
 * tile, which decides where fused multiply-adds apply), so a range gives the very values of the
 * whole signal's filtering. */
#define CPU_FILTER_TILE 4096
enum ecg_status cpu_filter_taps(const float *taps, size_t n_taps, const float *y, size_t n,
                                size_t lo, size_t hi, float *out, struct ecg_error *err) ECG_WUR;

/* The whole of cpu_filter_taps (lo 0, hi n) by a given build of its inner loop, for tests:
 * BEST (what cpu_filter_taps takes: AVX-512 or AVX2 with FMA where the CPU has them), PORTABLE
 * (plain C: no fused multiply-adds, so not the same bits), AVX2 or AVX512 (only on a CPU that
 * has it; the two give the same bits). */
enum cpu_filter_isa {
    CPU_FILTER_ISA_BEST = 0,
    CPU_FILTER_ISA_PORTABLE,
    CPU_FILTER_ISA_AVX2,
    CPU_FILTER_ISA_AVX512
};
enum ecg_status cpu_filter_taps_isa(const float *taps, size_t n_taps, const float *y, size_t n,
                                    enum cpu_filter_isa isa, float *out,
                                    struct ecg_error *err) ECG_WUR;

/* The noise-aware band (noise_core.h, step 1): where a window's energy says low-frequency noise
 * without high-frequency noise, f (the Ricker response of y, n samples) is replaced in place by
 * a mix with the higher band's response. Leaves a clean signal's f as it is. work is the
 * caller's, cpu_noise_band_work(plan, n) bytes, aligned for doubles (kept between requests:
 * fresh pages cost more than the step). */
size_t cpu_noise_band_work(const struct ecg_plan *plan, size_t n);
enum ecg_status cpu_noise_band(const struct ecg_plan *plan, const float *y, float *f, size_t n,
                               void *work, struct ecg_error *err) ECG_WUR;

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
 * Several leads: detection fuses the QRS evidence of every lead (fuse_core.h says how); the R
 * peaks are placed on the first lead, x being that lead's input samples. leads[l] holds lead
 * l's resampled (y) and filtered (f) signal, n_a samples each. cpu_detect() is the one-lead case.
 * beat_crest (NULL: not wanted) gets a malloc'd array of *n_peaks floats: the crest factor of
 * the fused envelope (noise_core.h step 2) in the window of each beat's analysis-grid peak,
 * the detector's own sign of how full the floor between beats is (engine/quality.c reads it).
 */
struct cpu_lead {
    const float *y, *f;
};
enum ecg_status cpu_detect_leads(const struct ecg_plan *plan, const float *x, size_t n_in,
                                 const struct cpu_lead *leads, size_t n_leads, size_t n_a,
                                 int64_t **peaks_a, int64_t **peaks_in, size_t *n_peaks,
                                 double *agree, float **beat_crest,
                                 struct ecg_error *err) ECG_WUR;

/* The fused envelope of n_leads envelopes env[l] (n samples each) into fused; *gain gets the
 * leads' gains per window (n_leads x *n_win floats, malloc'd), cpu_fuse_window() samples each.
 * agree (n_leads entries, or NULL) gets each lead's mean step-3a factor over the windows
 * (fuse_agreement_mean), NAN with one lead. */
enum ecg_status cpu_fuse(const struct ecg_plan *plan, const float *const *env, size_t n_leads,
                         size_t n, float *fused, float **gain, size_t *n_win, double *agree,
                         struct ecg_error *err) ECG_WUR;
size_t cpu_fuse_window(const struct ecg_plan *plan);

/*
 * The detector's stages, exposed for tests (engine/cpu/detect.c explains them).
 *
 * A beat candidate: analysis-grid position, height (prominence of the envelope), slope and the
 * crest factor of the envelope's window.
 * cpu_detect_candidates() computes them (envelope, NMS, attributes); *cand is malloc'd (NULL
 * when there are none), ascending by position.
 */
struct cpu_candidate {
    int64_t pos;
    float height;
    float slope;
    float crest; /* the envelope's crest factor around it (noise_core.h, step 2) */
};
enum ecg_status cpu_detect_candidates_leads(const struct ecg_plan *plan,
                                            const struct cpu_lead *leads, size_t n_leads,
                                            size_t n_a, struct cpu_candidate **cand,
                                            size_t *n_cand, double *agree,
                                            struct ecg_error *err) ECG_WUR;
enum ecg_status cpu_detect_candidates(const struct ecg_plan *plan, const float *y,
                                      const float *f, size_t n_a, struct cpu_candidate **cand,
                                      size_t *n_cand, struct ecg_error *err) ECG_WUR;

/*
 * The adaptive decision runs by blocks of CPU_DETECT_BLOCK_S of signal, each from fresh state
 * started CPU_DETECT_WARMUP_S before the block and looking at most CPU_DETECT_TAIL_S past it;
 * all three are rounded to analysis-grid samples (round(s * fs_a)). The CUDA backend uses the
 * same values.
 */
#define CPU_DETECT_BLOCK_S 60.0
#define CPU_DETECT_WARMUP_S 40.0
#define CPU_DETECT_TAIL_S 10.0
/* A block after the first also takes the shape test's references (decide.c) from a pass over
 * at most this much signal before its warm-up, which marks nothing and leaves it nothing else. */
#ifndef CPU_DETECT_REFS_S
#define CPU_DETECT_REFS_S 60.0
#endif

/* One run of the sequential decision pass, analysis-grid samples. */
struct cpu_decide_window {
    int64_t origin;           /* fresh state here; levels learnt from the candidates after it */
    int64_t emit_lo, emit_hi; /* only candidates in [emit_lo, emit_hi) are marked */
    int64_t horizon;          /* candidates before it are seen; the pass ends at it */
    bool stop_early;          /* stop at the first beat at or past emit_hi (same marks) */
};

/* Number of blocks for n_a analysis samples (1 when n_a is at most one block), and block b's
 * window (stop_early set). */
size_t cpu_decide_blocks(const struct ecg_plan *plan, size_t n_a);
void cpu_decide_block_window(const struct ecg_plan *plan, size_t n_a, size_t b,
                             struct cpu_decide_window *w);

/* What the decision's shape test reads (unlike_core.h): the n_leads leads detection reads, each
 * of n analysis-grid samples (their y). NULL where there is none: the test is left out. */
struct cpu_shapes {
    const struct cpu_lead *leads;
    size_t n_leads, n;
};

/* The sequential pass over one window: sets is_beat[k] = 1 for the beats it finds in the emit
 * range (touching nothing else); *first and *last are the first and last of them (SIZE_MAX
 * when none). */
void cpu_decide_window(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                       size_t n_cand, const struct cpu_shapes *shapes,
                       const struct cpu_decide_window *w, uint8_t *is_beat, size_t *first,
                       size_t *last);

/* The whole decision: every block's window, then the boundary merge. is_beat (n_cand entries)
 * is overwritten. */
enum ecg_status cpu_decide(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                           size_t n_cand, const struct cpu_shapes *shapes, size_t n_a,
                           uint8_t *is_beat, struct ecg_error *err) ECG_WUR;

/* The rhythm check after the decision (insert_core.h): unflags the beats that split one
 * regular RR interval in two without the strength of a beat. */
enum ecg_status cpu_reject_insertions(const struct cpu_candidate *cand, size_t n_cand,
                                      uint8_t *is_beat, struct ecg_error *err) ECG_WUR;

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
 * VAE encoding and scoring of k beats (emb: k x beat_len), in float32 SIMD (vae_f32.h), within
 * ~1e-6 of the double reference of engine/model.h. For kept beats writes the latent mean
 * (k x latent_dim), the score and the outlier flag; beats not kept get NaN and 0. rr_ms is the
 * per-beat RR interval (NaN for the first beat) for the rhythm part of the score. Allocates its
 * work area per call: cpu_vae_score_with reuses one.
 */
enum ecg_status cpu_vae_score(const struct ecg_model *model, const float *emb,
                              const uint8_t *kept, const float *rr_ms, size_t k, float *latent,
                              float *score, uint8_t *outlier, struct ecg_error *err) ECG_WUR;

/* Which kernels the float32 VAE runs: AUTO picks AVX-512, else AVX2 + FMA, where the CPU has
 * them, else the baseline build (GENERIC). */
enum cpu_vae_isa { CPU_VAE_ISA_AUTO = 0, CPU_VAE_ISA_GENERIC, CPU_VAE_ISA_AVX2, CPU_VAE_ISA_AVX512 };
bool cpu_vae_isa_available(enum cpu_vae_isa isa);
/* The kernels AUTO stands for on this CPU; other values are returned as they are. */
enum cpu_vae_isa cpu_vae_isa_resolve(enum cpu_vae_isa isa);
/* "avx512", "avx2+fma" or "generic": what isa resolves to. */
const char *cpu_vae_isa_name(enum cpu_vae_isa isa);

/* A work area that grows to the largest request and is reused: start it zeroed, end it with
 * cpu_vae_scratch_fini (NULL and a zeroed one are fine). One thread at a time. */
struct cpu_vae_scratch {
    void *mem;
    size_t cap_bytes;
};
void cpu_vae_scratch_fini(struct cpu_vae_scratch *s);

/*
 * cpu_vae_score with a reusable work area (no allocation once it is large enough) and a chosen
 * ISA (one that cpu_vae_isa_available reports). recon (k doubles, may be NULL) receives each
 * beat's reconstruction term log(MSE + 1e-6), NaN for beats not kept. The outputs may be NULL.
 */
enum ecg_status cpu_vae_score_with(const struct ecg_model *model, const float *emb,
                                   const uint8_t *kept, const float *rr_ms, size_t k,
                                   enum cpu_vae_isa isa, struct cpu_vae_scratch *scratch,
                                   float *latent, double *recon, float *score, uint8_t *outlier,
                                   struct ecg_error *err) ECG_WUR;

/* The float32 decoder on n latent points (n x latent_dim) -> out (n x beat_len): the work of
 * ecg_model_decode, with a chosen ISA. ECG_ERR_ARG "bad_latent" on a non-finite coordinate. */
enum ecg_status cpu_vae_decode_with(const struct ecg_model *model, const float *latent, size_t n,
                                    enum cpu_vae_isa isa, float *out,
                                    struct ecg_error *err) ECG_WUR;

/*
 * Signal-quality features (engine/quality.h) of x (n samples at fs_hz, input grid): one entry
 * per window of ecg_quality_geometry_of(n, fs_hz), written to windows (caller-allocated).
 * Exact arithmetic: the CUDA twin (gpu/cuda_quality.cu) gives bit-identical values.
 */
struct ecg_quality_window;
void cpu_quality_features(const float *x, size_t n, double fs_hz,
                          struct ecg_quality_window *windows);

#ifdef __cplusplus
}
#endif

#endif /* ECG_CPU_H */
