/*
 * quality.h - signal quality: per-window features (computed by a backend) and the verdict drawn
 * from them (engine/quality.c, backend-neutral). docs/RHYTHM.md documents the method.
 *
 * The recording is cut into windows of ECG_QUALITY_WINDOW_S on the input grid. A backend
 * operation (cpu_quality_features in engine/cpu/quality_features.c, its twin in
 * gpu/cuda_quality.cu) fills one struct ecg_quality_window per window from the input samples,
 * with exact arithmetic only (float min/max and comparisons, integer counts, double sums in the
 * lane order of engine/cpu/quality_core.h, no fused multiply-add), so that both backends give
 * bit-identical features and hence the same verdict. Everything with a threshold lives in
 * quality.c and runs on the host for both.
 *
 * Threading: pure functions of their arguments; the caller owns every array.
 */
#ifndef ECG_QUALITY_H
#define ECG_QUALITY_H

#include <math.h>

#include "ecg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ECG_QUALITY_WINDOW_S 1.0  /* window length */
#define ECG_QUALITY_QRS_LAG_S 0.02 /* QRS-band difference x[i] - x[i - lag]: gain peaks at 25 Hz */
#define ECG_QUALITY_HF_RATE_HZ 250.0 /* the HF second difference's lag is fs / this (>= 1) */

/* The window grid and difference lags for a recording of n samples at fs_hz (input grid).
 * Window j covers [j * len, min(n, (j + 1) * len)). */
#define ECG_QUALITY_MAINS 2 /* mains frequencies looked for: 50 and 60 Hz */
#define ECG_QUALITY_LANE_STEP 8 /* samples between a lane's samples (quality_core.h's lanes) */

/* cos and sin of a phase step. */
struct ecg_quality_turn {
    double c, s;
};

struct ecg_quality_geometry {
    size_t len;      /* samples per window */
    size_t n_win;    /* ceil(n / len) */
    size_t lag_qrs;  /* QRS-band difference lag */
    size_t lag_hf;   /* HF second-difference lag */
    /* The mains line's phase steps at 50 and 60 Hz (quality_core.h, the line taken out): over
     * one sample, ECG_QUALITY_LANE_STEP samples, lag_qrs and lag_hf samples. Taken here, on the
     * host, once: every backend then turns the same doubles. */
    struct ecg_quality_turn mains_one[ECG_QUALITY_MAINS], mains_lane[ECG_QUALITY_MAINS],
        mains_qrs[ECG_QUALITY_MAINS], mains_hf[ECG_QUALITY_MAINS];
};

/* The mains frequencies, Hz. */
static inline double ecg_quality_mains_hz(size_t f)
{
    return f == 0 ? 50.0 : 60.0;
}

static inline struct ecg_quality_turn ecg_quality_turn_of(double hz, double fs_hz, size_t steps)
{
    const double phase = 6.283185307179586 * hz * (double)steps / fs_hz;
    struct ecg_quality_turn t = {cos(phase), sin(phase)};
    return t;
}

static inline size_t ecg_quality_round_lag(double samples)
{
    double r = floor(samples + 0.5);
    return r < 1.0 ? 1 : (size_t)r;
}

static inline struct ecg_quality_geometry ecg_quality_geometry_of(size_t n, double fs_hz)
{
    struct ecg_quality_geometry g;
    g.len = ecg_quality_round_lag(fs_hz * ECG_QUALITY_WINDOW_S);
    g.n_win = (n + g.len - 1) / g.len;
    g.lag_qrs = ecg_quality_round_lag(fs_hz * ECG_QUALITY_QRS_LAG_S);
    g.lag_hf = ecg_quality_round_lag(fs_hz / ECG_QUALITY_HF_RATE_HZ);
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++) {
        const double hz = ecg_quality_mains_hz(f);
        g.mains_one[f] = ecg_quality_turn_of(hz, fs_hz, 1);
        g.mains_lane[f] = ecg_quality_turn_of(hz, fs_hz, ECG_QUALITY_LANE_STEP);
        g.mains_qrs[f] = ecg_quality_turn_of(hz, fs_hz, g.lag_qrs);
        g.mains_hf[f] = ecg_quality_turn_of(hz, fs_hz, g.lag_hf);
    }
    return g;
}

/*
 * Features of one window [a, b) of the input x (n samples in all). The differences stay inside
 * the window, so that a step into a neighbouring stretch (a lead falling off) shows in the
 * window where it happens and nowhere else; the plateau test looks at the neighbours outside.
 *   n          b - a
 *   x_min/max  extreme sample values
 *   n_repeat   samples equal to their predecessor (i > 0)
 *   n_at_max   samples equal to x_max that have an equal neighbour (a plateau at the top);
 *   n_at_min   likewise at x_min
 *   qrs_n      number of QRS-band differences d = x[i] - x[i - lag_qrs] taken (i >= a + lag)
 *   qrs_s1..s4 sums of d, d^2, d^3 (= d^2 * d) and d^4 (= d^2 * d^2), in lane order
 *   hf_s2      sum of h^2, h = (x[i + L] - x[i]) - (x[i] - x[i - L]), L = lag_hf, over
 *              i in [a + L, b - L) where h^2 <= 0.25 (x_max - x_min)^2 (a larger one is a
 *              spike, a pacemaker's: cpu/quality_core.h); hf_n of them
 * All differences are taken in double from the float samples.
 */
struct ecg_quality_window {
    uint32_t n, n_repeat, n_at_max, n_at_min, qrs_n, hf_n;
    float x_min, x_max;
    double qrs_s1, qrs_s2, qrs_s3, qrs_s4, hf_s2;
};

/* Per-window decision, exposed for tests: the reason (enum ecg_quality_reason, OK when
 * readable, or ECG_QUALITY_MOTION below, pending the beats) and a score in [0, 1] (0 when
 * unreadable; a pending window's is its score if readable). windows/n_win as the backend filled
 * them for a recording at fs_hz; reason and score have n_win entries. ECG_ERR_NOMEM or ECG_OK. */
enum ecg_status ecg_quality_classify(const struct ecg_quality_window *windows, size_t n_win,
                                     double fs_hz, uint8_t *reason, float *score,
                                     struct ecg_error *err) ECG_WUR;

/*
 * classify's mark (a reason value past the public ones) for a window that only the
 * electrode-motion test found unreadable: ecg_quality_apply's rhythm check of the beats found
 * there turns it into ECG_QUALITY_NOISE or readable (quality.c, resolve_motion). It never
 * reaches a result.
 */
#define ECG_QUALITY_MOTION ((uint8_t)ECG_QUALITY_REASON_COUNT)

/*
 * ecg_quality_classify for every lead an analysis read: windows are the first lead's n_win,
 * extra the n_extra further leads' (lead i + 1's at extra + i n_win; NULL when n_extra is 0),
 * all of the same geometry; reason and score get each lead's n_win after the one before.
 * Each lead is classified on its own (its own medians, its own joined gaps).
 * ECG_ERR_NOMEM or ECG_OK.
 */
enum ecg_status ecg_quality_classify_leads(const struct ecg_quality_window *windows,
                                           const struct ecg_quality_window *extra,
                                           size_t n_extra, size_t n_win, double fs_hz,
                                           uint8_t *reason, float *score,
                                           struct ecg_error *err) ECG_WUR;

/*
 * Fills result's quality part from the window features of its leads (as
 * ecg_quality_classify_leads takes them): result->quality (segments, allocated here when there
 * are any; usable fraction, verdict, dominant reason, each lead's own usable fraction), and the
 * caller-allocated beat_quality and readable (n_beats entries: the score of the window holding
 * each R peak). Needs result->r_peak, likeness, n_beats, n_samples, fs_hz. A second is readable
 * where any lead is, since the detector reads the leads together, weighting each by its
 * readability (fuse_core.h), except where the first lead's electrode-motion test found the
 * beats' rhythm broken (the R peaks are placed, and the beats embedded and scored, on the first
 * lead), or where the beats around it are unlike one another on every lead (the likeness test,
 * quality.c mark_unlike); a readable second scores its best lead's score, and an unreadable one
 * keeps the first lead's reason. On failure the report is left empty.
 */
enum ecg_status ecg_quality_assess(const struct ecg_quality_window *windows,
                                   const struct ecg_quality_window *extra, size_t n_extra,
                                   size_t n_win, struct ecg_result *result,
                                   struct ecg_error *err) ECG_WUR;

/* ecg_quality_assess's second half, from windows already classified (ecg_quality_classify_leads'
 * reason and score of n_leads x n_win windows), so that a caller can classify them while other
 * work runs (engine.c: beside a device's stages). Same contract and the same report; reason and
 * score are worked on in place (the first lead's n_win then hold the verdict the beats got). */
enum ecg_status ecg_quality_apply(uint8_t *reason, float *score, size_t n_win, size_t n_leads,
                                  struct ecg_result *result, struct ecg_error *err) ECG_WUR;

/* Frees what ecg_quality_assess allocated in result (the segments) and empties the report. */
void ecg_quality_fini(struct ecg_result *result);

#ifdef __cplusplus
}
#endif

#endif /* ECG_QUALITY_H */
