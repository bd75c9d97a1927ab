/*
 * noise_core.h - the detector's two noise-aware steps: the arithmetic shared by the CPU reference
 * (engine/cpu/band.c, detect.c, decide.c) and the CUDA twins (gpu/cuda_band.cu, cuda_detect.cu,
 * cuda_decide.cu). Included from C and CUDA C++; the double operations go through fuse_core.h's
 * round-to-nearest macros, so both backends compute the same bits.
 *
 * Electrode motion and muscle noise want opposite bands: electrode motion puts its energy low
 * (baseline jumps of a few hertz that the 14 Hz Ricker band still passes as QRS-like bumps),
 * muscle noise high and broad. So, per lead and per window of NOISE_WINDOW_S:
 *
 * 1. Band (band.c; before detection, on each lead's filter response f). Three more Ricker
 *    responses of the resampled lead: a narrower, higher band (a = NOISE_HI_SIGMA_S, centre
 *    near 22 Hz), a narrower one still (a = NOISE_H2_SIGMA_S, near 32 Hz) and a wider, lower one
 *    (a = NOISE_LO_SIGMA_S, near 7 Hz) used only to measure.
 *    Per window: lo = sqrt(E_lo / E) and hi = sqrt(E_hi / E), E the energy of f; each smoothed by
 *    the median of NOISE_INDEX_SPAN windows. Where lo is high (low-frequency noise) and hi is not
 *    (no high-frequency noise), the detector reads the higher band instead:
 *        w = ramp(lo; NOISE_LO_FROM, NOISE_LO_TO) * (1 - ramp(hi; NOISE_HI_FROM, NOISE_HI_TO))
 *    Which higher band depends on the floor between beats: floor = the median of
 *    NOISE_INDEX_SPAN window peaks of |f| over the median of their mean |f|. Where the floor is
 *    full (floor at or below NOISE_FLOOR_FROM: electrode motion fills it), a narrower one still
 *    (f_h2, a = NOISE_H2_SIGMA_S, centre near 32 Hz), where baseline jumps keep even less of
 *    their energy; where it is quiet (at or above NOISE_FLOOR_TO: wide or slow complexes on a
 *    clean baseline) the 22 Hz band, which keeps more of a wide complex's energy:
 *        g = 1 - ramp(floor; NOISE_FLOOR_FROM, NOISE_FLOOR_TO)
 *        f <- (1 - w) f + w (1 - g) c f_hi + w g c2 f_h2
 *    with c = the median of NOISE_SCALE_SPAN window peaks of |f| over the same of |f_hi| (c2
 *    the same for |f_h2|), so that a QRS complex keeps its height whichever band reads it. The
 *    gains are interpolated linearly between window centres (fuse_gain_at), so no step in f
 *    can pass for a beat. A narrow clean QRS (lo near 1.5) keeps its band bit for bit; wide or
 *    slow complexes (bundle-branch blocks, large ventricular beats) have a high lo index too
 *    and are read in a higher band, which detects them as well.
 * 2. Threshold (detect.c, decide.c). The crest factor of the (fused) QRS envelope per window -
 *    the median of FUSE_LEVEL_SPAN window peaks over the median of FUSE_NOISE_SPAN window means,
 *    as the lead fusion measures a lead - is low where noise fills the floor between beats. A
 *    candidate must clear NPK + t (SPK - NPK), with t = DETECT_THRESHOLD where the crest is at
 *    least NOISE_CREST_CLEAN, rising linearly to NOISE_THRESHOLD_NOISY at NOISE_CREST_NOISY and
 *    below. Search-back keeps the usual threshold: a beat missed in noise is still found when
 *    the rhythm calls for it.
 * 3. Weak premature candidates (decide.c; cuda_decide.cu). Where step 2 has raised the threshold
 *    at least NOISE_PREMATURE_RAISE of the way to NOISE_THRESHOLD_NOISY (a crest factor of 3.5 or
 *    less: noise in the floor) and the rhythm is regular (the last NOISE_REGULAR_COUNT or more RR
 *    intervals, up to DETECT_RR_COUNT, span at most NOISE_REGULAR_RANGE of their mean), a
 *    candidate that comes before NOISE_PREMATURE_RR of the mean interval must also reach
 *    NOISE_PREMATURE_HEIGHT of the beats' usual height (the running mean of the heights of the
 *    beats found above the threshold); otherwise it counts as noise. A sinus beat does not come
 *    early in a regular rhythm; an ectopic one that does is rarely weaker than the usual beat in
 *    the QRS band, whereas noise that clears the raised threshold usually is. An irregular
 *    rhythm (atrial fibrillation, multiform or bigeminal ectopy: intervals that alternate short
 *    and long) keeps the rule out of the way: its early, weaker beats are real.
 *
 * Why it should hold beyond the records it was measured on: the steps ask physical questions
 * (where is the noise's energy; how full is the floor between beats; whether a regular rhythm
 * calls for a beat this early), not what a noise record looks like, and none costs a clean ECG
 * its beats (step 3 keeps every beat of the 22 clean records, both leads and one). The narrower
 * band and step 3 were kept only after they gained on noise that no constant was chosen on
 * (`ecgd eval --noise-offset`: the noise the standard test leaves out, and other starting
 * points). docs/ACCURACY.md has the measurements.
 */
#ifndef ECG_NOISE_CORE_H
#define ECG_NOISE_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "fuse_core.h"

#define NOISE_WINDOW_S FUSE_WINDOW_S /* statistics window: the fusion's */
#define NOISE_HI_SIGMA_S 0.010    /* higher band: Ricker a (2.5 samples at 250 Hz) */
#define NOISE_HI_POINTS_S 0.12    /* ... over this support */
#define NOISE_H2_SIGMA_S 0.007    /* narrower higher band, where the floor is full */
#define NOISE_LO_SIGMA_S 0.032    /* lower band, measured only */
#define NOISE_LO_POINTS_S 0.24
#define NOISE_INDEX_SPAN 5        /* windows in the index medians (odd) */
#define NOISE_SCALE_SPAN 31       /* windows in the band scale's medians (odd, at most 31) */
#define NOISE_LO_FROM 1.6         /* lo index: no switch at or below ... */
#define NOISE_LO_TO 2.2           /* ... full switch at or above */
#define NOISE_HI_FROM 0.7         /* hi index: switch allowed at or below ... */
#define NOISE_HI_TO 0.9           /* ... none at or above */
#define NOISE_FLOOR_FROM 6.0      /* floor (peak / mean |f|): the narrower band at or below ... */
#define NOISE_FLOOR_TO 8.0        /* ... the 22 Hz band at or above */
#define NOISE_CREST_CLEAN 4.0     /* envelope crest factor at or above: the usual threshold */
#define NOISE_CREST_NOISY 2.5     /* at or below: the raised one */
#define NOISE_THRESHOLD_NOISY 0.5 /* threshold fraction of SPK - NPK where the crest is low */
#define NOISE_PREMATURE_RAISE (1.0 / 3.0) /* step 3: where step 2's raise has gone this far ... */
#define NOISE_PREMATURE_RR 0.65   /* ... earlier than this share of the mean RR ... */
#define NOISE_PREMATURE_HEIGHT 0.8 /* ... and under this share of the usual height: noise */
#define NOISE_REGULAR_RANGE 0.5   /* a regular rhythm: its intervals' range within this share ... */
#define NOISE_REGULAR_COUNT 4     /* ... of their mean, over at least this many intervals */

#if defined(__CUDA_ARCH__)
#define NOISE_DSQRT(a) __dsqrt_rn(a)
#else
#define NOISE_DSQRT(a) sqrt(a)
#endif

/* 0 at or below from, 1 at or above to, linear between. */
FUSE_FN double noise_ramp(double v, double from, double to)
{
    if (!(v > from))
        return 0.0;
    if (v >= to)
        return 1.0;
    return FUSE_DDIV(FUSE_DSUB(v, from), FUSE_DSUB(to, from));
}

/* Step 1's running sums over a window, taken in sample order. */
struct noise_band_sums {
    double e, e_hi, e_lo, a; /* energies of f, f_hi, f_lo; the sum of |f| */
    float p, p_hi, p_h2;     /* peaks of |f|, |f_hi|, |f_h2| */
    size_t n;
};

/* One sample's share of a window's sums: the energy (v^2 in double), the sum of |v| and the
 * peak of |v|. noise_band_add applies them to the four responses of a sample; a window kernel
 * on the device may apply each to one response on its own lane (same operations, same order
 * per sum: the same bits). */
FUSE_FN double noise_energy_add(double e, float v)
{
    const double d = (double)v;
    return FUSE_DADD(e, FUSE_DMUL(d, d));
}

FUSE_FN double noise_abs_add(double a, float v)
{
    return FUSE_DADD(a, (double)fabsf(v));
}

FUSE_FN float noise_peak_add(float p, float v)
{
    return fabsf(v) > p ? fabsf(v) : p;
}

FUSE_FN void noise_band_add(struct noise_band_sums *s, float f, float f_hi, float f_lo,
                            float f_h2)
{
    s->e = noise_energy_add(s->e, f);
    s->e_hi = noise_energy_add(s->e_hi, f_hi);
    s->e_lo = noise_energy_add(s->e_lo, f_lo);
    s->a = noise_abs_add(s->a, f);
    s->p = noise_peak_add(s->p, f);
    s->p_hi = noise_peak_add(s->p_hi, f_hi);
    s->p_h2 = noise_peak_add(s->p_h2, f_h2);
    s->n++;
}

/* Step 1's measures, one value per window in each array: the two indices, the peak and mean
 * of |f|, the peaks of |f_hi| and |f_h2|. */
struct noise_band_measures {
    double *lo, *hi, *peak, *mean, *peak_hi, *peak_h2;
};

/* Window j's measures from its sums. */
FUSE_FN void noise_band_finish(const struct noise_band_sums *s,
                               const struct noise_band_measures *m, size_t j)
{
    m->lo[j] = s->e > 0.0 ? NOISE_DSQRT(FUSE_DDIV(s->e_lo, s->e)) : 0.0;
    m->hi[j] = s->e > 0.0 ? NOISE_DSQRT(FUSE_DDIV(s->e_hi, s->e)) : 0.0;
    m->peak[j] = (double)s->p;
    m->mean[j] = s->n ? FUSE_DDIV(s->a, (double)s->n) : 0.0;
    m->peak_hi[j] = (double)s->p_hi;
    m->peak_h2[j] = (double)s->p_h2;
}

/* Step 1 for window j of one lead (f, f_hi, f_lo, f_h2: n samples each): its measures. Sums in
 * sample order. */
FUSE_FN void noise_band_window(const float *f, const float *f_hi, const float *f_lo,
                               const float *f_h2, size_t n, size_t win, size_t j,
                               const struct noise_band_measures *m)
{
    const size_t a = j * win, b = a + win < n ? a + win : n;
    struct noise_band_sums s = {0.0, 0.0, 0.0, 0.0, 0.0f, 0.0f, 0.0f, 0};
    for (size_t i = a; i < b; i++)
        noise_band_add(&s, f[i], f_hi[i], f_lo[i], f_h2[i]);
    noise_band_finish(&s, m, j);
}

/* Step 1's switch for window j: w, how far it reads a higher band (0: the usual band alone),
 * and g, how much of that is the narrower band (the floor index; 0 where w is 0). */
FUSE_FN void noise_band_switch(const struct noise_band_measures *m, size_t n_win, size_t j,
                               double *w, double *g)
{
    const double l = fuse_median_span(m->lo, n_win, j, NOISE_INDEX_SPAN);
    const double h = fuse_median_span(m->hi, n_win, j, NOISE_INDEX_SPAN);
    *w = FUSE_DMUL(noise_ramp(l, NOISE_LO_FROM, NOISE_LO_TO),
                   FUSE_DSUB(1.0, noise_ramp(h, NOISE_HI_FROM, NOISE_HI_TO)));
    *g = 0.0;
    if (!(*w > 0.0))
        return;
    const double peak = fuse_median_span(m->peak, n_win, j, NOISE_INDEX_SPAN);
    const double mean = fuse_median_span(m->mean, n_win, j, NOISE_INDEX_SPAN);
    const double quiet = mean > 0.0 ? FUSE_DDIV(peak, mean) : NOISE_FLOOR_TO;
    *g = FUSE_DSUB(1.0, noise_ramp(quiet, NOISE_FLOOR_FROM, NOISE_FLOOR_TO));
}

/* The scale that gives a band's QRS complexes the height they have in f: p (the median of
 * NOISE_SCALE_SPAN window peaks of |f|) over p_band, the same median of the band's peaks. */
FUSE_FN double noise_band_scale(double p, double p_band)
{
    return p_band > 0.0 ? FUSE_DDIV(p, p_band) : 0.0;
}

/* Step 1's gains from the switch (w, g) and the medians of NOISE_SCALE_SPAN window peaks of
 * |f| (p), |f_hi| (p_hi, read only where g < 1) and |f_h2| (p_h2, only where g > 0); keep (of
 * f), take (of f_hi), take2 (of f_h2). */
FUSE_FN void noise_band_gains_of(double w, double g, double p, double p_hi, double p_h2,
                                 float *keep, float *take, float *take2)
{
    if (!(w > 0.0)) { /* the usual band (most windows: the medians are not needed) */
        *keep = 1.0f;
        *take = 0.0f;
        *take2 = 0.0f;
        return;
    }
    *keep = (float)FUSE_DSUB(1.0, w);
    *take = g < 1.0 ? (float)FUSE_DMUL(FUSE_DMUL(w, FUSE_DSUB(1.0, g)), noise_band_scale(p, p_hi))
                    : 0.0f;
    *take2 = g > 0.0 ? (float)FUSE_DMUL(FUSE_DMUL(w, g), noise_band_scale(p, p_h2)) : 0.0f;
}

/* Step 1's gains for window j from the n_win windows' measures (each median taken only where
 * it is read; gpu/cuda_filter.cu takes the three on three threads at once, same values). */
FUSE_FN void noise_band_gains(const struct noise_band_measures *m, size_t n_win, size_t j,
                              float *keep, float *take, float *take2)
{
    double w, g, p = 0.0, p_hi = 0.0, p_h2 = 0.0;
    noise_band_switch(m, n_win, j, &w, &g);
    if (w > 0.0) {
        p = fuse_median_span(m->peak, n_win, j, NOISE_SCALE_SPAN);
        if (g < 1.0)
            p_hi = fuse_median_span(m->peak_hi, n_win, j, NOISE_SCALE_SPAN);
        if (g > 0.0)
            p_h2 = fuse_median_span(m->peak_h2, n_win, j, NOISE_SCALE_SPAN);
    }
    noise_band_gains_of(w, g, p, p_hi, p_h2, keep, take, take2);
}

/* Step 1 at sample i: the mixed response, gains interpolated between window centres (f itself
 * where they are 1, 0 and 0). */
FUSE_FN float noise_band_mix(const float *keep, const float *take, const float *take2,
                             size_t n_win, size_t win, size_t i, float f, float f_hi, float f_h2)
{
    const float k = fuse_gain_at(keep, n_win, win, i), t = fuse_gain_at(take, n_win, win, i),
                t2 = fuse_gain_at(take2, n_win, win, i);
    if (k == 1.0f && t == 0.0f && t2 == 0.0f)
        return f; /* the usual band, untouched */
    return FUSE_FADD(FUSE_FADD(FUSE_FMUL(k, f), FUSE_FMUL(t, f_hi)), FUSE_FMUL(t2, f_h2));
}

/* Step 2 for window j of the envelope: its crest factor (a large value where the floor is 0). */
FUSE_FN float noise_crest(const double *peak, const double *mean, size_t n_win, size_t j)
{
    const double s = fuse_median_span(peak, n_win, j, FUSE_LEVEL_SPAN);
    const double a = fuse_median_span(mean, n_win, j, FUSE_NOISE_SPAN);
    if (!(a > 0.0))
        return (float)NOISE_CREST_CLEAN;
    return (float)FUSE_DDIV(s, a);
}

/* Step 2's factor for a window of this crest factor: base where the crest is clean, rising to
 * NOISE_THRESHOLD_NOISY where it is noisy. base is DETECT_THRESHOLD. It depends on the window
 * alone, so a pass may take it once per window (the CUDA decision does). */
FUSE_FN double noise_threshold_factor(float crest, double base)
{
    const double u = noise_ramp(FUSE_DSUB(NOISE_CREST_CLEAN, (double)crest), 0.0,
                                NOISE_CREST_CLEAN - NOISE_CREST_NOISY);
    return u > 0.0 ? FUSE_DADD(base, FUSE_DMUL(NOISE_THRESHOLD_NOISY - base, u)) : base;
}

/* Step 2: the threshold a candidate at a window of factor t (noise_threshold_factor) must
 * exceed, from the pass's levels (NPK + t (SPK - NPK)). */
FUSE_FN double noise_threshold_at(double spk, double npk, double t)
{
    return FUSE_DADD(npk, FUSE_DMUL(t, FUSE_DSUB(spk, npk)));
}

/* Step 2: the threshold a candidate at a window of this crest factor must exceed, from the
 * pass's levels (same operations as NPK + DETECT_THRESHOLD (SPK - NPK) where the crest is
 * clean). base is DETECT_THRESHOLD. */
FUSE_FN double noise_threshold(double spk, double npk, float crest, double base)
{
    return noise_threshold_at(spk, npk, noise_threshold_factor(crest, base));
}

/* Step 3, its candidate: whether a candidate that cleared the threshold is early and weak in a
 * noisy window: its window's threshold factor t (noise_threshold_factor) raised
 * NOISE_PREMATURE_RAISE of the way from base (DETECT_THRESHOLD) to NOISE_THRESHOLD_NOISY, gap
 * samples after the last beat against the mean interval rr_mean, height against the beats'
 * usual height beat_level. Cheap: the callers ask noise_regular_rhythm only when it holds. */
FUSE_FN bool noise_premature_weak(double t, double base, int64_t gap, float height,
                                  double beat_level, double rr_mean)
{
    return t > FUSE_DADD(base, FUSE_DMUL(NOISE_THRESHOLD_NOISY - base, NOISE_PREMATURE_RAISE)) &&
           (double)gap < FUSE_DMUL(NOISE_PREMATURE_RR, rr_mean) &&
           (double)height < FUSE_DMUL(NOISE_PREMATURE_HEIGHT, beat_level);
}

/* Step 3, its rhythm: whether n_rr intervals so far, the last ones (up to DETECT_RR_COUNT) of
 * mean rr_mean lying within [rr_lo, rr_hi], make a regular rhythm. Such a candidate in such a
 * rhythm is noise. */
FUSE_FN bool noise_regular_rhythm(size_t n_rr, double rr_mean, double rr_lo, double rr_hi)
{
    return n_rr >= NOISE_REGULAR_COUNT &&
           FUSE_DSUB(rr_hi, rr_lo) <= FUSE_DMUL(NOISE_REGULAR_RANGE, rr_mean);
}

#endif /* ECG_NOISE_CORE_H */
