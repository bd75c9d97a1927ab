/*
 * quality_core.h - the arithmetic of the signal-quality features (engine/quality.h defines them),
 * shared by the CPU reference (engine/cpu/quality_features.c) and its CUDA twin
 * (gpu/cuda_quality.cu), written once so that both compute the same bits. Included from C
 * (plain inline functions) and from CUDA C++ (__host__ __device__, every double operation an
 * explicit round-to-nearest intrinsic, never contracted into an FMA, as the C build does:
 * -std=c11 turns contraction off).
 *
 * Order of the sums. A window's samples are dealt to QUALITY_LANES interleaved lanes: sample i
 * belongs to lane (i - a) mod QUALITY_LANES, a being the window's first sample. Each lane
 * accumulates its own samples in increasing order; the lanes are then combined by a fixed
 * binary tree ((0 1) (2 3)) ((4 5) (6 7)). The order is part of the definition, so it holds on
 * any backend: the CPU walks the window once with the lanes interleaved (eight independent
 * dependency chains instead of one, which is what a latency-bound double sum needs), and the
 * GPU gives each lane its own thread (eight threads per window, adjacent in a warp, so that the
 * loads of a window are coalesced) and combines the lanes with warp shuffles in the same tree.
 * Floating-point min and max are order-sensitive only for equal values of different sign
 * (+0 and -0): the tree always keeps the lower lane's value on a tie, on both backends.
 */
#ifndef ECG_QUALITY_CORE_H
#define ECG_QUALITY_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quality.h"

#define QUALITY_LANES ECG_QUALITY_LANE_STEP /* 8, a power of two: the tree is a butterfly */

#if defined(__CUDACC__)
#define QUALITY_FN static inline __host__ __device__
#else
#define QUALITY_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define QUALITY_DADD(a, b) __dadd_rn((a), (b))
#define QUALITY_DSUB(a, b) __dsub_rn((a), (b))
#define QUALITY_DMUL(a, b) __dmul_rn((a), (b))
#else
#define QUALITY_DADD(a, b) ((a) + (b))
#define QUALITY_DSUB(a, b) ((a) - (b))
#define QUALITY_DMUL(a, b) ((a) * (b))
#endif

/* What one lane has gathered of its window (or what a subtree of lanes has). */
struct quality_lane {
    float lo, hi;
    uint32_t repeat, at_max, at_min, qrs_n, hf_n;
    double s1, s2, s3, s4, h2;
    double mc[ECG_QUALITY_MAINS], ms[ECG_QUALITY_MAINS]; /* the mains line's fit sums */
};

/* A lane before its first sample. Every lane starts its extremes at the window's first sample
 * x[a] (which lane 0 holds anyway), so that a lane with no sample (a window shorter than the
 * lanes) changes nothing when combined. */
QUALITY_FN struct quality_lane quality_lane_start(float first)
{
    struct quality_lane p;
    p.lo = p.hi = first;
    p.repeat = p.at_max = p.at_min = p.qrs_n = p.hf_n = 0;
    p.s1 = p.s2 = p.s3 = p.s4 = p.h2 = 0.0;
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++)
        p.mc[f] = p.ms[f] = 0.0;
    return p;
}

/* First walk, sample i of the recording (n samples): extremes and repeats. */
QUALITY_FN void quality_lane_first(struct quality_lane *p, const float *x, size_t i)
{
    float v = x[i];
    p->lo = v < p->lo ? v : p->lo;
    p->hi = v > p->hi ? v : p->hi;
    p->repeat += i > 0 && v == x[i - 1];
}

/* Whether sample i of the recording (n samples) lies on a plateau at value v (lo or hi): an
 * equal neighbour on either side. */
QUALITY_FN bool quality_plateau(const float *x, size_t n, size_t i)
{
    return (i > 0 && x[i - 1] == x[i]) || (i + 1 < n && x[i + 1] == x[i]);
}

/* A QRS-band difference d added to the moment sums (d, d^2, d^3, d^4). */
QUALITY_FN void quality_qrs_add(double d, double *s1, double *s2, double *s3, double *s4)
{
    double d2 = QUALITY_DMUL(d, d);
    *s1 = QUALITY_DADD(*s1, d);
    *s2 = QUALITY_DADD(*s2, d2);
    *s3 = QUALITY_DADD(*s3, QUALITY_DMUL(d2, d));
    *s4 = QUALITY_DADD(*s4, QUALITY_DMUL(d2, d2));
}

/* The QRS-band difference d = x[i] - x[i - lag] added to the moment sums. */
QUALITY_FN void quality_qrs_term(const float *x, size_t i, size_t lag, double *s1, double *s2,
                                 double *s3, double *s4)
{
    quality_qrs_add(QUALITY_DSUB((double)x[i], (double)x[i - lag]), s1, s2, s3, s4);
}

/*
 * Pacemaker spikes. A pacing pulse is a fraction of a millisecond wide; recorded, it is a spike
 * one to a few samples wide, often as tall as the QRS, before every paced beat (and every paced
 * atrium). Its second differences are larger than anything else in a clean window, and summed
 * they made the HF ratio of a perfectly readable paced ECG that of noise (synthetic spikes on
 * the shared records: 1 mV flagged 8.8 % of the beats unreadable, 3 mV 94 %). So a second
 * difference whose square exceeds QUALITY_SPIKE_SHARE x the window's range squared, |h| > 0.5 x
 * range, is left out of the HF sum and its count. A QRS complex stays under it (its second
 * difference at the R peak is a tenth to a third of its height at 250-360 Hz, under half at
 * 128 Hz, and the window's range is R to S); a spike standing out of the window does not (|h|
 * is about 1.5 to 2 times its height, and its undershoot's about its height). Noise keeps its
 * HF ratio where the QRS sets the window's range (its second differences stay under half of
 * it), and where noise sets the range the ratio is over the threshold by far anyway (white
 * noise: 3 against 0.3) or the kurtosis, range or power tests trip. On the 14 standard sets
 * the beats and every false beat's flag stayed the same, and muscle noise's true beats flagged
 * fell by at most 0.3 % of them (ma 6 dB: 5,108 -> 5,091). A bound of 0.5 (|h| > 0.71 x range)
 * left 3-mV spikes' undershoots in the sum (20 % of their beats flagged); 0.25 leaves 0.17 %
 * with 1 mV and none with 3 mV (docs/RHYTHM.md).
 */
#ifndef QUALITY_SPIKE_SHARE
#define QUALITY_SPIKE_SHARE 0.25
#endif

/* The largest h^2 the HF sum takes in a window whose samples span [lo, hi]. */
QUALITY_FN double quality_spike_cap(float lo, float hi)
{
    const double range = QUALITY_DSUB((double)hi, (double)lo);
    return QUALITY_DMUL(QUALITY_SPIKE_SHARE, QUALITY_DMUL(range, range));
}

/* The HF second difference of the values before (m), at (c) and after (p) a sample, added as
 * h^2 (and counted) unless h^2 exceeds cap (a spike). */
QUALITY_FN void quality_hf_add(double m, double c, double p, double cap, double *h2,
                               uint32_t *hf_n)
{
    double h = QUALITY_DSUB(QUALITY_DSUB(p, c), QUALITY_DSUB(c, m));
    double hh = QUALITY_DMUL(h, h);
    bool kept = hh <= cap;
    *h2 = QUALITY_DADD(*h2, kept ? hh : 0.0);
    *hf_n += kept;
}

/* The HF second difference h = (x[i + L] - x[i]) - (x[i] - x[i - L]), as quality_hf_add. */
QUALITY_FN void quality_hf_term(const float *x, size_t i, size_t lag, double cap, double *h2,
                                uint32_t *hf_n)
{
    quality_hf_add((double)x[i - lag], (double)x[i], (double)x[i + lag], cap, h2, hf_n);
}

/*
 * The mains line. Hum (50 or 60 Hz picked up from the mains) lowers the QRS-band kurtosis and
 * fills the second difference, so that the verdict would read it as noise, although the beats
 * under it are found right (docs/ACCURACY.md: 0.2 mV of it flagged 13-20 % of clean beats).
 * So each window fits a sine at each mains frequency to its samples (less its first: the sums
 * of (x[i] - x[a]) cos and sin of the phase at i - a, amplitude 2 / len of them, exact over
 * the whole cycles of a 1-s window) and, where the best fit's share of the window's
 * second-difference energy is at least QUALITY_MAINS_SHARE, takes it out of the samples before
 * the QRS-band moments and the second difference are summed (a second walk; the extremes,
 * plateaus and repeats stay the raw samples'). ECG, muscle noise and electrode motion spread
 * that energy over the whole band, so a single line never holds half of it: clean windows keep
 * their bits. The phases turn by the geometry's steps (quality.h: cos and sin taken once on the
 * host), every lane from its own first sample, in the lanes' sample order.
 */
#ifndef QUALITY_MAINS_SHARE
#define QUALITY_MAINS_SHARE 0.5
#endif

/* The phase (cos, sin) t turned by `by`. */
QUALITY_FN struct ecg_quality_turn quality_turn(struct ecg_quality_turn t,
                                                struct ecg_quality_turn by)
{
    struct ecg_quality_turn r;
    r.c = QUALITY_DSUB(QUALITY_DMUL(t.c, by.c), QUALITY_DMUL(t.s, by.s));
    r.s = QUALITY_DADD(QUALITY_DMUL(t.s, by.c), QUALITY_DMUL(t.c, by.s));
    return r;
}

/* The phase t turned back by `by`: turned by its conjugate (the negation is exact). */
QUALITY_FN struct ecg_quality_turn quality_turn_back(struct ecg_quality_turn t,
                                                     struct ecg_quality_turn by)
{
    by.s = -by.s;
    return quality_turn(t, by);
}

/* The phase of lane `lane`'s first sample, a + lane, at mains frequency f: lane turns of one
 * sample from 0. */
QUALITY_FN struct ecg_quality_turn quality_lane_phase(const struct ecg_quality_geometry *g,
                                                      size_t f, size_t lane)
{
    struct ecg_quality_turn t;
    t.c = 1.0;
    t.s = 0.0;
    for (size_t k = 0; k < lane; k++)
        t = quality_turn(t, g->mains_one[f]);
    return t;
}

/* A sample's value v (x[i] - x[a]) into a lane's fit sums mc, ms at its phase (c, s), which
 * then turns by (lc, ls) to the lane's next sample (quality_turn's arithmetic). */
QUALITY_FN void quality_mains_step(double v, double *mc, double *ms, double *c, double *s,
                                   double lc, double ls)
{
    *mc = QUALITY_DADD(*mc, QUALITY_DMUL(v, *c));
    *ms = QUALITY_DADD(*ms, QUALITY_DMUL(v, *s));
    struct ecg_quality_turn t, by;
    t.c = *c;
    t.s = *s;
    by.c = lc;
    by.s = ls;
    t = quality_turn(t, by);
    *c = t.c;
    *s = t.s;
}

/* Sample i of window [a, b) into its lane's mains fit sums; ph (the lane's phases at i) turns
 * on to the lane's next sample. */
QUALITY_FN void quality_mains_term(struct quality_lane *p, struct ecg_quality_turn *ph,
                                   const float *x, size_t a, size_t i,
                                   const struct ecg_quality_geometry *g)
{
    const double v = QUALITY_DSUB((double)x[i], (double)x[a]);
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++)
        quality_mains_step(v, &p->mc[f], &p->ms[f], &ph[f].c, &ph[f].s, g->mains_lane[f].c,
                           g->mains_lane[f].s);
}

/* A mains line to take out of a window: its frequency (index into the geometry's, -1: none)
 * and the amplitudes of its cos and sin. */
struct quality_line {
    int f;
    double a, b;
};

/* The line to take out of window [a, b), from its combined lanes (the fit sums, h2 and hf_n),
 * or none (f = -1). */
QUALITY_FN struct quality_line quality_mains_line(const struct quality_lane *p, size_t a,
                                                  size_t b,
                                                  const struct ecg_quality_geometry *g)
{
    struct quality_line line;
    line.f = -1;
    line.a = line.b = 0.0;
    double best = 0.0;
    const double scale = 2.0 / (double)(b - a);
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++) {
        const double ca = QUALITY_DMUL(scale, p->mc[f]), cb = QUALITY_DMUL(scale, p->ms[f]);
        const double amp2 = QUALITY_DADD(QUALITY_DMUL(ca, ca), QUALITY_DMUL(cb, cb));
        if (amp2 > best) {
            best = amp2;
            line.f = (int)f;
            line.a = ca;
            line.b = cb;
        }
    }
    if (line.f < 0 || !(p->h2 > 0.0) || p->hf_n == 0) {
        line.f = -1;
        return line;
    }
    /* a sine of amplitude A leaves a second difference of A (2 cos(w L) - 2): its energy */
    const double k = QUALITY_DSUB(2.0, QUALITY_DMUL(2.0, g->mains_hf[line.f].c));
    const double energy =
        QUALITY_DMUL(QUALITY_DMUL((double)p->hf_n, QUALITY_DMUL(0.5, best)), QUALITY_DMUL(k, k));
    if (!(energy >= QUALITY_DMUL(QUALITY_MAINS_SHARE, p->h2)))
        line.f = -1;
    return line;
}

/* The line's value at phase t. */
QUALITY_FN double quality_line_at(const struct quality_line *line, struct ecg_quality_turn t)
{
    return QUALITY_DADD(QUALITY_DMUL(line->a, t.c), QUALITY_DMUL(line->b, t.s));
}

/* Sample i of window [a, b) into its lane's QRS-band moments and second difference with the
 * line taken out (spikes over cap left out and the kept ones counted, in hf_n); ph (the lane's
 * phase at i, at the line's frequency) turns on to the lane's next sample. The same terms and
 * conditions as quality_lane_second's. */
QUALITY_FN void quality_lineless_term(struct quality_lane *p, struct ecg_quality_turn *ph,
                                      const float *x, size_t a, size_t b, size_t i,
                                      const struct ecg_quality_geometry *g,
                                      const struct quality_line *line, double cap)
{
    const struct ecg_quality_turn t = *ph;
    const double xi = QUALITY_DSUB((double)x[i], quality_line_at(line, t));
    if (i >= a + g->lag_qrs) {
        const struct ecg_quality_turn tq = quality_turn_back(t, g->mains_qrs[line->f]);
        const double xq = QUALITY_DSUB((double)x[i - g->lag_qrs], quality_line_at(line, tq));
        quality_qrs_add(QUALITY_DSUB(xi, xq), &p->s1, &p->s2, &p->s3, &p->s4);
    }
    if (i >= a + g->lag_hf && i + g->lag_hf < b) {
        const struct ecg_quality_turn by = g->mains_hf[line->f];
        const double xm = QUALITY_DSUB((double)x[i - g->lag_hf],
                                       quality_line_at(line, quality_turn_back(t, by)));
        const double xp = QUALITY_DSUB((double)x[i + g->lag_hf],
                                       quality_line_at(line, quality_turn(t, by)));
        quality_hf_add(xm, xi, xp, cap, &p->h2, &p->hf_n);
    }
    *ph = quality_turn(t, g->mains_lane[line->f]);
}

/* Second walk, sample i of window [a, b), once the window's extremes lo and hi are known:
 * plateaus at the extremes, the QRS-band difference moments (i >= a + lag_qrs) and the HF
 * second difference (a + lag_hf <= i < b - lag_hf; spikes over cap, quality_spike_cap(lo, hi)
 * taken once per window, left out). */
QUALITY_FN void quality_lane_second(struct quality_lane *p, const float *x, size_t n,
                                    const struct ecg_quality_geometry *g, size_t a, size_t b,
                                    size_t i, float lo, float hi, double cap)
{
    if ((x[i] == hi || x[i] == lo) && quality_plateau(x, n, i)) {
        p->at_max += x[i] == hi;
        p->at_min += x[i] == lo;
    }
    if (i >= a + g->lag_qrs) {
        quality_qrs_term(x, i, g->lag_qrs, &p->s1, &p->s2, &p->s3, &p->s4);
        p->qrs_n++;
    }
    if (i >= a + g->lag_hf && i + g->lag_hf < b)
        quality_hf_term(x, i, g->lag_hf, cap, &p->h2, &p->hf_n);
}

/* Combines the extremes of two subtrees, low holding the lower lanes: on a tie, low's value. */
QUALITY_FN void quality_merge_extremes(struct quality_lane *low, const struct quality_lane *up)
{
    low->lo = up->lo < low->lo ? up->lo : low->lo;
    low->hi = up->hi > low->hi ? up->hi : low->hi;
    low->repeat += up->repeat;
}

/* Combines the second walk's counts and sums of two subtrees (addition is commutative, so
 * only the tree's shape matters). */
QUALITY_FN void quality_merge_sums(struct quality_lane *low, const struct quality_lane *up)
{
    low->at_max += up->at_max;
    low->at_min += up->at_min;
    low->qrs_n += up->qrs_n;
    low->hf_n += up->hf_n;
    low->s1 = QUALITY_DADD(low->s1, up->s1);
    low->s2 = QUALITY_DADD(low->s2, up->s2);
    low->s3 = QUALITY_DADD(low->s3, up->s3);
    low->s4 = QUALITY_DADD(low->s4, up->s4);
    low->h2 = QUALITY_DADD(low->h2, up->h2);
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++) {
        low->mc[f] = QUALITY_DADD(low->mc[f], up->mc[f]);
        low->ms[f] = QUALITY_DADD(low->ms[f], up->ms[f]);
    }
}

/* The window's features from its combined lanes. */
QUALITY_FN void quality_window_of(const struct quality_lane *p, size_t a, size_t b,
                                  struct ecg_quality_window *w)
{
    w->n = (uint32_t)(b - a);
    w->n_repeat = p->repeat;
    w->n_at_max = p->at_max;
    w->n_at_min = p->at_min;
    w->qrs_n = p->qrs_n;
    w->hf_n = p->hf_n;
    w->x_min = p->lo;
    w->x_max = p->hi;
    w->qrs_s1 = p->s1;
    w->qrs_s2 = p->s2;
    w->qrs_s3 = p->s3;
    w->qrs_s4 = p->s4;
    w->hf_s2 = p->h2;
}

#endif
