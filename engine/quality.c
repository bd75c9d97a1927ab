/*
 * quality.c - the signal-quality verdict, from the per-window features a backend computed
 * (quality.h). Backend-neutral: both backends hand over bit-identical features and this file
 * draws the same verdict from them. docs/RHYTHM.md documents the method; the thresholds below
 * were set on the 22 shared MIT-BIH records (none of their windows is flagged apart from the
 * ventricular flutter of 207 and a few seconds of 108, 116, 201, 203 and 208) and on the NSTDB
 * noise recordings, and are stated in seconds or as ratios so that they carry to any rate and
 * any amplitude unit.
 *
 * Each window gets at most one reason, tried in this order:
 *   lead_off / flat  the window's range is at most FLAT_REL of the recording's typical window
 *                    range (the median over windows), or it is exactly constant: lead_off when
 *                    its level lies outside the recording's usual span by more than one typical
 *                    range or sits at the recording's extreme value (a rail), or when it is
 *                    pinned to a recording extreme for half the window; flat otherwise (and
 *                    when the whole recording is still);
 *   clipped          a plateau (samples equal to a neighbour) at the recording's global maximum
 *                    or minimum lasting at least CLIP_MIN_S in the window, or of any length
 *                    (2 samples) when that extreme is a rail: at least CLIP_MIN_WINDOWS
 *                    windows plateau at exactly that value (a clean recording reaches its
 *                    maximum once; a clipped one again and again);
 *   not_ecg          the kurtosis of the QRS-band difference over the window and its two
 *                    neighbours is below NOT_ECG_KURT (a sine has 1.5, Gaussian noise 3, ECG
 *                    5 to 30: its energy comes in QRS spikes);
 *   noise            that kurtosis is below NOISE_KURT, or the HF ratio (power of the
 *                    second difference per sample over the QRS-band power per sample, same
 *                    three windows) exceeds NOISE_HF (white noise: 3; ECG: 0.004 to 0.08), or
 *                    the window's range exceeds NOISE_RANGE x the typical range (motion
 *                    artefacts; the largest clean window is 4.3x); or electrode motion
 *                    (motion_margin): the window's range above MOTION_RANGE x the typical
 *                    range, its QRS-band power above MOTION_POWER x the typical power, and
 *                    that kurtosis under MOTION_REL_KURT x the recording's typical kurtosis,
 *                    all three at once, and the beats found there break their rhythm (a
 *                    check that needs the beats: classify marks such a window
 *                    ECG_QUALITY_MOTION and ecg_quality_apply decides, resolve_motion);
 *                    or, once the beats are known, the beats within UNLIKE_SPAN_S / 2 of the
 *                    window's centre are unlike one another: at least UNLIKE_MIN_BEATS of
 *                    them have a likeness (engine/cpu/likeness_core.h: a beat's best
 *                    correlation with its neighbours' complexes) and its median is below
 *                    UNLIKE_MEDIAN, or below UNLIKE_ROUGH_MEDIAN in a window whose score is
 *                    below UNLIKE_ROUGH_SCORE, or below UNLIKE_FULL_MEDIAN where the
 *                    detector's crest factor at those beats says the floor between beats is
 *                    full of noise (mark_unlike). This clause needs no reference
 *                    from the recording, so it holds in a strip posted from inside a noisy
 *                    stretch.
 * Then a readable gap of at most BRIDGE_S between two windows unreadable for the same reason
 * joins them. A readable window's score is the smallest of four margins in [0, 1] (kurtosis,
 * HF ratio, range, and the distance from the electrode-motion test); an unreadable one scores
 * 0.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/noise_core.h" /* NOISE_CREST_NOISY: where the detector finds the floor full */
#include "quality.h"

#define FLAT_REL 0.02
#define LEAD_OFF_SPAN 1.0
#define RAIL_SHARE 0.5
#define CLIP_MIN_S 0.02
#define CLIP_MIN_WINDOWS 5
#define NOT_ECG_KURT 2.2
#define NOISE_KURT 4.0
#define GOOD_KURT 8.0
#define NOISE_HF 0.3
#define GOOD_HF 0.05
#define NOISE_RANGE 5.0
#define NOISE_REL_KURT 0.3
#define NOISE_REL_POWER 16.0
#define BRIDGE_S 3.0
#define GOOD_RANGE 3.0
#define MOTION_RANGE 2.0
#define MOTION_POWER 2.0
#define MOTION_REL_KURT 0.7
#define GOOD_MOTION_RANGE 1.5
#define GOOD_MOTION_POWER 1.5
#define GOOD_MOTION_REL_KURT 1.0
#define MOTION_RHYTHM_TOL 0.2     /* two intervals within 20 % of the longer are alike, */
#define MOTION_RHYTHM_JITTER_S 0.05 /* ... or within 50 ms */
#define UNLIKE_SPAN_S 10.0  /* the beats whose likeness a window reads: R within half this of its centre */
#define UNLIKE_MIN_BEATS 8  /* ... at least this many with a likeness */
#define UNLIKE_MEDIAN 0.65  /* ... whose median is below this, */
#define UNLIKE_ROUGH_MEDIAN 0.75 /* ... or below this where the window's score is below */
#define UNLIKE_ROUGH_SCORE 0.7
#define UNLIKE_FULL_MEDIAN 0.8  /* ... or below this where the floor is full (the beats' crest) */
#define UNLIKE_FULL_MIN_BEATS 6 /* ... over at least this many beats */
/* Windows from which the per-window loops run in parallel (OpenMP): a 2-hour recording. Each
 * window's values depend on the window and its neighbours only, so the thread count changes no
 * result. */
#define QUALITY_PARALLEL_MIN 8192

const char *ecg_quality_reason_name(enum ecg_quality_reason reason)
{
    switch (reason) {
    case ECG_QUALITY_OK: return "ok";
    case ECG_QUALITY_FLAT: return "flat";
    case ECG_QUALITY_LEAD_OFF: return "lead_off";
    case ECG_QUALITY_CLIPPED: return "clipped";
    case ECG_QUALITY_NOISE: return "noise";
    case ECG_QUALITY_NOT_ECG: return "not_ecg";
    case ECG_QUALITY_REASON_COUNT: break;
    }
    return "unknown";
}

const char *ecg_quality_verdict_name(enum ecg_quality_verdict verdict)
{
    switch (verdict) {
    case ECG_VERDICT_GOOD: return "good";
    case ECG_VERDICT_DEGRADED: return "degraded";
    case ECG_VERDICT_UNREADABLE: return "unreadable";
    }
    return "unknown";
}

/* The k-th smallest of v[0, n) (k < n), by quickselect (reorders v): O(n) on average, and no
 * value is NaN (callers map NaN first). */
static double select_kth(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double tmp = v[i];
                v[i] = v[j];
                v[j] = tmp;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* Median of v[0, n) (reorders v); 0 for n == 0. */
static double median_of(double *v, size_t n)
{
    if (!n)
        return 0.0;
    double upper = select_kth(v, n, n / 2);
    if (n % 2)
        return upper;
    /* the lower middle is the largest value below index n / 2 after the selection */
    double lower = v[0];
    for (size_t i = 1; i < n / 2; i++)
        lower = v[i] > lower ? v[i] : lower;
    return 0.5 * (lower + upper);
}

/* The recording-wide references every window is compared with. */
struct quality_refs {
    double typical_range;  /* median window range */
    double usual_lo, usual_hi; /* median window minimum and maximum */
    float global_min, global_max;
    bool all_still;        /* every window is flat: nothing to call a rail */
    double typical_kurtosis; /* median over windows of the 3-window kurtosis */
    double typical_power;    /* median over windows of the QRS-band power per sample */
    bool rail_top, rail_bottom; /* CLIP_MIN_WINDOWS windows plateau at that global extreme */
    /* per window, from context_stats (NaN where undefined), in scratch (owned) */
    double *kurtosis, *hf_ratio, *power;
    double *scratch;
};

static void context_stats(const struct ecg_quality_window *w, size_t n_win, size_t j,
                          double still_range, double *kurtosis, double *hf_ratio,
                          double *power);

/* Medians of v[0..n) and, where given, of v2 and v3 (each reordered), side by side on long
 * recordings. */
static void medians(double *v, double *v2, double *v3, size_t n, double *m, double *m2,
                    double *m3)
{
    if (n < QUALITY_PARALLEL_MIN) { /* short ones stay out of OpenMP: ecg_parallel.h */
        *m = median_of(v, n);
        if (v2)
            *m2 = median_of(v2, n);
        if (v3)
            *m3 = median_of(v3, n);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel sections
#endif
    {
#ifdef _OPENMP
#pragma omp section
#endif
        *m = median_of(v, n);
#ifdef _OPENMP
#pragma omp section
#endif
        if (v2)
            *m2 = median_of(v2, n);
#ifdef _OPENMP
#pragma omp section
#endif
        if (v3)
            *m3 = median_of(v3, n);
    }
}

/* Window j's context statistics into refs, and the values whose medians are taken next (its
 * kurtosis, NaN as the largest, into range; its power, NaN as 0, into lo). */
static void window_context(const struct ecg_quality_window *w, size_t n_win, size_t j,
                           struct quality_refs *refs, double *range, double *lo)
{
    context_stats(w, n_win, j, FLAT_REL * refs->typical_range, &refs->kurtosis[j],
                  &refs->hf_ratio[j], &refs->power[j]);
    range[j] = isnan(refs->kurtosis[j]) ? INFINITY : refs->kurtosis[j];
    lo[j] = isnan(refs->power[j]) ? 0.0 : refs->power[j];
}

static enum ecg_status recording_refs(const struct ecg_quality_window *w, size_t n_win,
                                      struct quality_refs *refs, struct ecg_error *err)
{
    size_t m = n_win ? n_win : 1;
    double *tmp = malloc(6 * m * sizeof *tmp);
    if (!tmp)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu windows", n_win);
    double *range = tmp, *lo = tmp + m, *hi = tmp + 2 * m;
    refs->scratch = tmp;
    refs->kurtosis = tmp + 3 * m;
    refs->hf_ratio = tmp + 4 * m;
    refs->power = tmp + 5 * m;
    refs->global_min = w[0].x_min;
    refs->global_max = w[0].x_max;
    for (size_t j = 0; j < n_win; j++) {
        range[j] = (double)w[j].x_max - (double)w[j].x_min;
        lo[j] = w[j].x_min;
        hi[j] = w[j].x_max;
        refs->global_min = w[j].x_min < refs->global_min ? w[j].x_min : refs->global_min;
        refs->global_max = w[j].x_max > refs->global_max ? w[j].x_max : refs->global_max;
    }
    medians(range, lo, hi, n_win, &refs->typical_range, &refs->usual_lo, &refs->usual_hi);
    /* NaN kurtosis (a still stretch) sorts as the largest: it never lowers the median */
    if (n_win >= QUALITY_PARALLEL_MIN) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t j = 0; j < n_win; j++)
            window_context(w, n_win, j, refs, range, lo);
    } else {
        for (size_t j = 0; j < n_win; j++)
            window_context(w, n_win, j, refs, range, lo);
    }
    size_t at_top = 0, at_bottom = 0;
    for (size_t j = 0; j < n_win; j++) {
        at_top += w[j].x_max == refs->global_max && w[j].n_at_max >= 2;
        at_bottom += w[j].x_min == refs->global_min && w[j].n_at_min >= 2;
    }
    refs->rail_top = at_top >= CLIP_MIN_WINDOWS;
    refs->rail_bottom = at_bottom >= CLIP_MIN_WINDOWS;
    medians(range, lo, NULL, n_win, &refs->typical_kurtosis, &refs->typical_power, NULL);
    refs->all_still = true;
    for (size_t j = 0; j < n_win; j++) {
        double r = (double)w[j].x_max - (double)w[j].x_min;
        if (r > FLAT_REL * refs->typical_range)
            refs->all_still = false;
    }
    return ECG_OK;
}

/* Kurtosis of the QRS-band difference, HF ratio and QRS-band power per sample over windows
 * [j - 1, j + 1] (NaN where undefined). A still neighbour (range at most still_range: flat or
 * lead-off) is left out: the step into it is no property of window j. */
static void context_stats(const struct ecg_quality_window *w, size_t n_win, size_t j,
                          double still_range, double *kurtosis, double *hf_ratio,
                          double *power)
{
    size_t lo = j ? j - 1 : 0, hi = j + 1 < n_win ? j + 1 : j;
    double n = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, h2 = 0, hn = 0;
    for (size_t k = lo; k <= hi; k++) {
        if (k != j && (double)w[k].x_max - (double)w[k].x_min <= still_range)
            continue;
        n += w[k].qrs_n;
        s1 += w[k].qrs_s1;
        s2 += w[k].qrs_s2;
        s3 += w[k].qrs_s3;
        s4 += w[k].qrs_s4;
        h2 += w[k].hf_s2;
        hn += w[k].hf_n;
    }
    *kurtosis = NAN;
    *hf_ratio = NAN;
    *power = NAN;
    if (n < 4)
        return;
    *power = s2 / n;
    double m = s1 / n;
    double m2 = s2 / n - m * m;
    double m4 = s4 / n - 4 * m * s3 / n + 6 * m * m * s2 / n - 3 * m * m * m * m;
    if (m2 > 0)
        *kurtosis = m4 / (m2 * m2);
    if (s2 > 0 && hn > 0)
        *hf_ratio = (h2 / hn) / (s2 / n);
}

static double clamp01(double v)
{
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

/*
 * Electrode motion swamping the QRS complexes. Its baseline jumps reach a few hertz, so they
 * pass the QRS-band difference as QRS-like bumps: the window swings further than the
 * recording's usual window (range), carries more QRS-band power than usual (power), and its
 * QRS-band signal is less spiky than usual (kurtosis), because the bumps fill the floor
 * between the complexes. One alone is common in clean ECG (a large ventricular beat raises
 * the range and the power, atrial fibrillation lowers the kurtosis, baseline wander raises
 * the range but not the power); the three together are rare, and a run of large ventricular
 * beats, which meets them too, keeps its rhythm (resolve_motion). On the 22 shared records
 * (lead 0) they add 2 windows of 39,732 to those the other tests flag, against 33 % of the
 * windows of their NSTDB electrode-motion stretches at 0 dB (where a third of the beats found
 * there are false) and 3 % at 6 dB (docs/RHYTHM.md).
 * The ratios are to the recording's own medians, so they carry to any lead, unit and rate.
 * Returns the margin in [0, 1]: 0 where the test holds, 1 where any of the three is at
 * least as far from its bound as a clean window usually is.
 */
static double motion_margin(double range_ratio, double power_ratio, double kurtosis_ratio)
{
    double m = clamp01((MOTION_RANGE - range_ratio) / (MOTION_RANGE - GOOD_MOTION_RANGE));
    m = fmax(m, clamp01((MOTION_POWER - power_ratio) / (MOTION_POWER - GOOD_MOTION_POWER)));
    return fmax(m, clamp01((kurtosis_ratio - MOTION_REL_KURT) /
                           (GOOD_MOTION_REL_KURT - MOTION_REL_KURT)));
}

static enum ecg_quality_reason classify_window(const struct ecg_quality_window *w, size_t n_win,
                                               size_t j, const struct quality_refs *refs,
                                               size_t clip_min, float *score)
{
    const struct ecg_quality_window *x = &w[j];
    double range = (double)x->x_max - (double)x->x_min;
    *score = 0.0f;
    if (range == 0.0 || range <= FLAT_REL * refs->typical_range || refs->all_still) {
        double level = 0.5 * ((double)x->x_min + (double)x->x_max);
        double span = LEAD_OFF_SPAN * refs->typical_range;
        bool outside = level > refs->usual_hi + span || level < refs->usual_lo - span;
        bool at_rail = x->x_max == refs->global_max || x->x_min == refs->global_min;
        if (!refs->all_still && (outside || at_rail))
            return ECG_QUALITY_LEAD_OFF;
        return ECG_QUALITY_FLAT;
    }
    bool top = x->x_max == refs->global_max, bottom = x->x_min == refs->global_min;
    if ((top && x->n_at_max >= RAIL_SHARE * x->n) || (bottom && x->n_at_min >= RAIL_SHARE * x->n))
        return ECG_QUALITY_LEAD_OFF;
    if ((top && x->n_at_max >= (refs->rail_top ? 2 : clip_min)) ||
        (bottom && x->n_at_min >= (refs->rail_bottom ? 2 : clip_min)))
        return ECG_QUALITY_CLIPPED;
    double kurtosis = refs->kurtosis[j], hf_ratio = refs->hf_ratio[j], power = refs->power[j];
    if (!(kurtosis >= NOT_ECG_KURT))
        return ECG_QUALITY_NOT_ECG;
    double range_ratio = refs->typical_range > 0 ? range / refs->typical_range : 1.0;
    double power_ratio = refs->typical_power > 0 ? power / refs->typical_power : 1.0;
    double kurtosis_ratio = refs->typical_kurtosis > 0 ? kurtosis / refs->typical_kurtosis : 1.0;
    if (kurtosis < NOISE_KURT || kurtosis < NOISE_REL_KURT * refs->typical_kurtosis ||
        !(hf_ratio <= NOISE_HF) || range_ratio > NOISE_RANGE ||
        power > NOISE_REL_POWER * refs->typical_power)
        return ECG_QUALITY_NOISE;
    double q = clamp01((kurtosis - NOISE_KURT) / (GOOD_KURT - NOISE_KURT));
    q = fmin(q, clamp01((NOISE_HF - hf_ratio) / (NOISE_HF - GOOD_HF)));
    q = fmin(q, clamp01((NOISE_RANGE - range_ratio) / (NOISE_RANGE - GOOD_RANGE)));
    double motion = motion_margin(range_ratio, power_ratio, kurtosis_ratio);
    if (motion == 0.0) { /* the rhythm check decides (ecg_quality_apply); the score if readable */
        *score = (float)q;
        return (enum ecg_quality_reason)ECG_QUALITY_MOTION;
    }
    *score = (float)fmin(q, motion);
    return ECG_QUALITY_OK;
}

enum ecg_status ecg_quality_classify(const struct ecg_quality_window *windows, size_t n_win,
                                     double fs_hz, uint8_t *reason, float *score,
                                     struct ecg_error *err)
{
    if (!n_win)
        return ECG_OK;
    struct quality_refs refs = {0};
    enum ecg_status status = recording_refs(windows, n_win, &refs, err);
    if (status != ECG_OK)
        return status;
    size_t clip_min = ecg_quality_round_lag(CLIP_MIN_S * fs_hz);
    if (clip_min < 3)
        clip_min = 3;
    if (n_win >= QUALITY_PARALLEL_MIN) { /* short ones stay out of OpenMP: ecg_parallel.h */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t j = 0; j < n_win; j++)
            reason[j] = (uint8_t)classify_window(windows, n_win, j, &refs, clip_min, &score[j]);
    } else {
        for (size_t j = 0; j < n_win; j++)
            reason[j] = (uint8_t)classify_window(windows, n_win, j, &refs, clip_min, &score[j]);
    }
    /* Noise comes and goes within a bad stretch: a readable gap of at most BRIDGE_S between
     * two windows unreadable for the same reason is taken as part of the stretch. */
    size_t bridge = ecg_quality_round_lag(BRIDGE_S / ECG_QUALITY_WINDOW_S);
    for (size_t j = 1; j < n_win; j++) {
        if (reason[j] != ECG_QUALITY_OK || reason[j - 1] == ECG_QUALITY_OK)
            continue;
        size_t k = j;
        while (k < n_win && reason[k] == ECG_QUALITY_OK && k - j < bridge)
            k++;
        if (k < n_win && k - j <= bridge && reason[k] == reason[j - 1]) {
            for (size_t i = j; i < k; i++) { /* (a motion window keeps its score: see apply) */
                reason[i] = reason[j - 1];
                score[i] = reason[i] == ECG_QUALITY_MOTION ? score[i] : 0.0f;
            }
        }
        j = k;
    }
    free(refs.scratch);
    return ECG_OK;
}

enum ecg_status ecg_quality_classify_leads(const struct ecg_quality_window *windows,
                                           const struct ecg_quality_window *extra,
                                           size_t n_extra, size_t n_win, double fs_hz,
                                           uint8_t *reason, float *score, struct ecg_error *err)
{
    enum ecg_status status = ecg_quality_classify(windows, n_win, fs_hz, reason, score, err);
    for (size_t l = 0; l < n_extra && status == ECG_OK; l++)
        status = ecg_quality_classify(extra + l * n_win, n_win, fs_hz, reason + (l + 1) * n_win,
                                      score + (l + 1) * n_win, err);
    return status;
}

/* Whether intervals a and b (samples) are alike: within MOTION_RHYTHM_TOL of the longer, or
 * within jitter samples (MOTION_RHYTHM_JITTER_S: where a wide complex's R peak is placed). */
static bool intervals_alike(int64_t a, int64_t b, int64_t jitter)
{
    const double hi = (double)(a > b ? a : b), lo = (double)(a > b ? b : a);
    return hi - lo <= MOTION_RHYTHM_TOL * hi || hi - lo <= (double)jitter;
}

/* Whether interval i (beat i - 1 to beat i, 1 <= i < n) is alike the one before or after it. */
static bool interval_in_rhythm(const int64_t *p, size_t n, size_t i, int64_t jitter)
{
    const int64_t rr = p[i] - p[i - 1];
    return (i >= 2 && intervals_alike(rr, p[i - 1] - p[i - 2], jitter)) ||
           (i + 1 < n && intervals_alike(rr, p[i + 1] - p[i], jitter));
}

/*
 * Whether the beats of window [lo, hi) keep a rhythm: every interval that ends in it (or, where
 * no beat falls in it, the interval across it) is alike its predecessor or its successor. A
 * false beat splits an interval into two unlike parts, each unlike the intervals around it; a
 * rhythm, even one that changes (a run of ventricular tachycardia between sinus beats), comes
 * in runs of like intervals. first is the index of the first beat at or after lo.
 */
static bool window_keeps_rhythm(const int64_t *p, size_t n, size_t first, int64_t hi,
                                int64_t jitter)
{
    if (first == 0 || first >= n)
        return false; /* before the first beat or after the last: no interval to judge */
    if (p[first] >= hi)
        return interval_in_rhythm(p, n, first, jitter);
    for (size_t i = first; i < n && p[i] < hi; i++)
        if (!interval_in_rhythm(p, n, i, jitter))
            return false;
    return true;
}

/*
 * The rhythm check of the electrode-motion test. A large ventricular rhythm (a run of
 * ventricular tachycardia, frequent wide ectopic beats) meets the test's three conditions as
 * electrode motion does: wide, tall complexes widen the window's range, raise its QRS-band power
 * and lower its kurtosis. What tells them apart is what the detector found there: a rhythm's
 * intervals come in runs of like intervals, the false beats that motion adds break them. So a
 * window the test marked stays readable (its score that of the other tests) where its beats
 * keep a rhythm (window_keeps_rhythm), and gets the reason broken otherwise (noise; the
 * first lead's stay marked ECG_QUALITY_MOTION until the leads are read together). A stretch of
 * motion where the detector kept to the true beats is then readable too, which is what its
 * beats deserve.
 */
static void resolve_motion(uint8_t *reason, float *score, size_t n_win, size_t len,
                           const int64_t *r_peak, size_t n_beats, double fs_hz, uint8_t broken)
{
    const int64_t jitter = (int64_t)floor(MOTION_RHYTHM_JITTER_S * fs_hz + 0.5);
    size_t first = 0;
    for (size_t j = 0; j < n_win; j++) {
        if (reason[j] != ECG_QUALITY_MOTION)
            continue;
        while (first < n_beats && r_peak[first] < (int64_t)(j * len))
            first++;
        if (window_keeps_rhythm(r_peak, n_beats, first, (int64_t)((j + 1) * len), jitter)) {
            reason[j] = ECG_QUALITY_OK;
        } else {
            reason[j] = broken;
            score[j] = 0.0f;
        }
    }
}

/* The end (exclusive) of window j of len samples in a recording of n. */
static size_t window_end(size_t j, size_t len, size_t n)
{
    return (j + 1) * len < n ? (j + 1) * len : n;
}

/*
 * The beats' likeness test (the noise reason's last clause). Each window reads the beats whose
 * R peaks lie within UNLIKE_SPAN_S / 2 of its centre (the recording's span where shorter); where
 * at least UNLIKE_MIN_BEATS of them have a likeness and their median is below UNLIKE_MEDIAN, or
 * below UNLIKE_ROUGH_MEDIAN while the window's own score (the margins of classify_window, its
 * best lead's) is below UNLIKE_ROUGH_SCORE (a QRS-band signal unspiky or rough: kurtosis under
 * about 6.8, or a high-frequency ratio over about 0.125), the window, if readable so far, is
 * unreadable (noise): two weak signs of noise together. It is also unreadable where at least
 * UNLIKE_FULL_MIN_BEATS beats have a likeness, its median is below UNLIKE_FULL_MEDIAN and the
 * median of the same beats' crest factors (ecg_result.crest: the detector's envelope, window
 * peak over the floor between beats) is at most NOISE_CREST_NOISY, where the detector itself
 * takes the floor for full of noise and raises its threshold the most (noise_core.h step 2):
 * a rhythm of repeating complexes keeps its likeness however full the floor (ventricular
 * tachycardia, flutter waves), and a quiet floor keeps its crest however unlike the complexes
 * (multiform ectopy). Needs six beats, not eight, so that it reads 5-s strips too. scratch
 * holds 2 n_beats doubles.
 */
static void mark_unlike(uint8_t *reason, float *score, size_t n_win, size_t len,
                        const struct ecg_result *r, double *scratch)
{
    const int64_t half = (int64_t)floor(0.5 * UNLIKE_SPAN_S * r->fs_hz + 0.5);
    double *crest = scratch + r->n_beats;
    size_t first = 0;
    for (size_t j = 0; j < n_win; j++) {
        const int64_t centre = (int64_t)(j * len + window_end(j, len, r->n_samples)) / 2;
        while (first < r->n_beats && r->r_peak[first] < centre - half)
            first++;
        size_t m = 0, m_crest = 0;
        for (size_t i = first; i < r->n_beats && r->r_peak[i] <= centre + half; i++) {
            if (isnan(r->likeness[i]))
                continue;
            scratch[m++] = (double)r->likeness[i];
            if (r->crest && !isnan(r->crest[i]))
                crest[m_crest++] = (double)r->crest[i];
        }
        if (reason[j] != ECG_QUALITY_OK || m < UNLIKE_FULL_MIN_BEATS)
            continue;
        const double median = median_of(scratch, m);
        const bool unlike = m >= UNLIKE_MIN_BEATS &&
                            (median < UNLIKE_MEDIAN || (median < UNLIKE_ROUGH_MEDIAN &&
                                                        score[j] < (float)UNLIKE_ROUGH_SCORE));
        const bool full = median < UNLIKE_FULL_MEDIAN && m_crest >= UNLIKE_FULL_MIN_BEATS &&
                          median_of(crest, m_crest) <= NOISE_CREST_NOISY;
        if (unlike || full) {
            reason[j] = ECG_QUALITY_NOISE;
            score[j] = 0.0f;
        }
    }
}

/* The share of the recording's n samples in windows (of len) that reason calls readable. */
static double usable_share(const uint8_t *reason, size_t n_win, size_t len, size_t n)
{
    size_t ok = 0;
    for (size_t j = 0; j < n_win; j++)
        ok += reason[j] == ECG_QUALITY_OK ? window_end(j, len, n) - j * len : 0;
    return n ? (double)ok / (double)n : 0.0;
}

void ecg_quality_fini(struct ecg_result *result)
{
    free(result->quality.segments);
    memset(&result->quality, 0, sizeof result->quality);
}

/* Runs of windows with the same reason become segments (input grid). */
static enum ecg_status build_segments(const uint8_t *reason, size_t n_win, size_t len,
                                      size_t n_samples, struct ecg_quality_report *q,
                                      struct ecg_error *err)
{
    size_t n_seg = 0;
    for (size_t j = 0; j < n_win; j++)
        n_seg += reason[j] != ECG_QUALITY_OK && (j == 0 || reason[j - 1] != reason[j]);
    q->segments = n_seg ? malloc(n_seg * sizeof *q->segments) : NULL;
    if (n_seg && !q->segments)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu segments", n_seg);
    size_t s = 0, bad = 0;
    size_t by_reason[ECG_QUALITY_REASON_COUNT] = {0};
    for (size_t j = 0; j < n_win; j++) {
        if (reason[j] == ECG_QUALITY_OK)
            continue;
        size_t start = j * len, end = window_end(j, len, n_samples);
        by_reason[reason[j]] += end - start;
        bad += end - start;
        if (j > 0 && reason[j - 1] == reason[j]) {
            q->segments[s - 1].end = (int64_t)end;
            continue;
        }
        q->segments[s].start = (int64_t)start;
        q->segments[s].end = (int64_t)end;
        q->segments[s].reason = reason[j];
        s++;
    }
    q->n_segments = s;
    q->usable_fraction = n_samples ? 1.0 - (double)bad / (double)n_samples : 0.0;
    q->reason = ECG_QUALITY_OK;
    for (int r = 1; r < ECG_QUALITY_REASON_COUNT; r++) {
        if (by_reason[r] > by_reason[q->reason] || (q->reason == ECG_QUALITY_OK && by_reason[r]))
            q->reason = (uint8_t)r;
    }
    q->verdict = q->usable_fraction >= ECG_QUALITY_GOOD_FRACTION       ? ECG_VERDICT_GOOD
                 : q->usable_fraction >= ECG_QUALITY_READABLE_FRACTION ? ECG_VERDICT_DEGRADED
                                                                       : ECG_VERDICT_UNREADABLE;
    return ECG_OK;
}

enum ecg_status ecg_quality_apply(uint8_t *reason, float *score, size_t n_win, size_t n_leads,
                                  struct ecg_result *r, struct ecg_error *err)
{
    struct ecg_quality_geometry g = ecg_quality_geometry_of(r->n_samples, r->fs_hz);
    enum ecg_status status = ECG_OK;
    memset(&r->quality, 0, sizeof r->quality);
    if (g.n_win != n_win || !r->beat_quality || !r->readable || !n_leads ||
        n_leads > ECG_MAX_LEADS) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "quality: %zu windows of %zu leads, expected %zu", n_win, n_leads,
                          g.n_win);
        goto out;
    }
    /* Each lead's windows resolved in place, then read together into the first lead's: readable
     * where any lead is, except where the first lead's electrode-motion test found the beats'
     * rhythm broken (those stay ECG_QUALITY_MOTION until the end): the R peaks are placed, and
     * the beats embedded and scored, on the first lead. */
    r->quality.n_leads = n_leads;
    for (size_t l = 0; l < n_leads; l++) {
        uint8_t *lead = reason + l * n_win;
        float *lead_score = score + l * n_win;
        resolve_motion(lead, lead_score, n_win, g.len, r->r_peak, r->n_beats, r->fs_hz,
                       l ? ECG_QUALITY_NOISE : ECG_QUALITY_MOTION);
        r->quality.lead_usable[l] = usable_share(lead, n_win, g.len, r->n_samples);
        for (size_t j = 0; l && j < n_win; j++) {
            if (lead[j] != ECG_QUALITY_OK || reason[j] == ECG_QUALITY_MOTION)
                continue;
            if (reason[j] != ECG_QUALITY_OK || lead_score[j] > score[j])
                score[j] = lead_score[j];
            reason[j] = ECG_QUALITY_OK;
        }
    }
    for (size_t j = 0; j < n_win; j++)
        reason[j] = reason[j] == ECG_QUALITY_MOTION ? ECG_QUALITY_NOISE : reason[j];
    if (r->likeness && r->n_beats) {
        double *scratch = malloc(2 * r->n_beats * sizeof *scratch);
        if (!scratch) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu beats",
                              r->n_beats);
            goto out;
        }
        mark_unlike(reason, score, n_win, g.len, r, scratch);
        free(scratch);
    }
    status = build_segments(reason, n_win, g.len, r->n_samples, &r->quality, err);
    if (status != ECG_OK)
        goto out;
    for (size_t i = 0; i < r->n_beats; i++) {
        int64_t p = r->r_peak[i];
        size_t j = p <= 0 ? 0 : (size_t)p / g.len;
        j = j < n_win ? j : n_win - 1;
        r->readable[i] = reason[j] == ECG_QUALITY_OK;
        r->beat_quality[i] = score[j];
    }
out:
    if (status != ECG_OK)
        ecg_quality_fini(r);
    return status;
}

enum ecg_status ecg_quality_assess(const struct ecg_quality_window *windows,
                                   const struct ecg_quality_window *extra, size_t n_extra,
                                   size_t n_win, struct ecg_result *r, struct ecg_error *err)
{
    memset(&r->quality, 0, sizeof r->quality); /* empty on failure (ecg_quality_apply checks) */
    if (n_extra >= ECG_MAX_LEADS)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "quality: %zu leads", n_extra + 1);
    const size_t n = (1 + n_extra) * (n_win ? n_win : 1);
    /* one block: the reasons after the scores, each lead's n_win after the one before */
    float *score = malloc(n * (sizeof *score + 1));
    if (!score)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu windows", n_win);
    uint8_t *reason = (uint8_t *)(score + n);
    enum ecg_status status = ecg_quality_classify_leads(windows, extra, n_extra, n_win, r->fs_hz,
                                                        reason, score, err);
    if (status == ECG_OK)
        status = ecg_quality_apply(reason, score, n_win, n_extra + 1, r, err);
    free(score);
    return status;
}
