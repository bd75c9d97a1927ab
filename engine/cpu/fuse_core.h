/*
 * fuse_core.h - how the detector fuses the evidence of several leads: the arithmetic shared by
 * the CPU reference (engine/cpu/fuse.c) and its CUDA twin (gpu/cuda_fuse.cu), written once so
 * that both compute the same floats. Included from C (plain inline functions) and from CUDA C++
 * (__host__ __device__, with every float and double operation rounded to nearest and never
 * contracted into an FMA, as the C build does: -std=c11 turns contraction off).
 *
 * Method. Each lead l has its own QRS envelope e_l (detect.c, stage 1). Electrode motion and
 * muscle noise rarely hit every lead at once, and within a lead they come and go, so the fused
 * envelope weighs each lead by how readable it is here and now:
 *  1. Window statistics: the envelope is cut into windows of FUSE_WINDOW_S; per window, the
 *     largest value (peak) and the mean.
 *  2. Per window j and lead l, the lead's beat level S = median of the peaks of the
 *     FUSE_LEVEL_SPAN windows centred on j (one artefact in the span does not set it, and a
 *     window without a beat does not lower it while most have one), and its activity level
 *     N = median of the means of the FUSE_NOISE_SPAN windows centred on j. On a clean lead the
 *     envelope is a train of QRS bumps over a flat floor: its mean is a small fraction of its
 *     peaks. Noise fills the floor and raises the mean towards the peaks. The crest factor
 *     q = S / N measures that, whatever the lead's amplitude.
 *  3. The lead's weight w = (q - FUSE_CREST_FLOOR)^2 where q exceeds the floor (a crest that
 *     low is noise or no ECG at all), 0 otherwise, times its agreement factor (step 3a); its
 *     gain g = w / (L * max(sum of the weights, FUSE_WEIGHT_MIN)): each lead is scaled to a
 *     beat level of 1 and the gains sum to 1 / L_l-weighted one, so the fused envelope keeps a
 *     beat level near 1 wherever any lead is readable. L is the lead's scale: the median peak
 *     of the FUSE_SCALE_SPAN windows centred on j that have a bump in them (peak over
 *     FUSE_LIVE_CREST times their mean; fuse_live_median_span). Both guards are for a dead
 *     stretch (electrodes off, every lead held still): there the filters leave a flat residual
 *     a few thousandths of the beats' height, its windows' peak equals their mean, and their
 *     crest factors hover near 1. Before, where such windows made half of the span, L was the
 *     residual and scaled it up to the beats' level, and a sum of tiny weights still scaled
 *     each lead fully: two false beats in every 20-s stretch and one at most reconnections
 *     (tests/unit/test_robust.c test_lead_off). A sum of weights under 1 means every lead's
 *     crest is under 2, no beat structure; the gains then fade with it instead. Both bounds
 *     sit on plateaus: FUSE_WEIGHT_MIN from 0.25 to 4 and FUSE_LIVE_CREST from 1.05 to 1.3
 *     gave the same beats on the lead-off stretches and on every standard set (a live ECG or
 *     noise window's peak is 2 to 20 times its mean); docs/ACCURACY.md has the figures.
 * 3a. Agreement, measured from two leads on, weighing from three. The crest factor cannot tell a lead of pure noise (a
 *     loose electrode's motion, muscle: q near 3) from a clean lead with small QRS complexes
 *     (V1: q 2.5-3.5), so a lead with no ECG on it kept a tenth to a fifth of the weight and
 *     cost beats: with such a third lead, MIT-BIH's 22 records lost more beats than with their
 *     first lead alone. Every lead sees the same heart, though: its envelope peaks at the
 *     beats' QRS complexes, within tens of milliseconds of where the fused envelope peaks,
 *     while a lead of noise peaks anywhere. So steps 1-4 run once, then each lead's agreement
 *     A is taken: over the FUSE_AGREE_SPAN windows (a minute and a half) centred on j, the
 *     fraction of windows whose peak lies within FUSE_AGREE_S of the fused envelope's window
 *     peak. By chance that is about 2 x FUSE_AGREE_S of a 1-s window (0.1; a lead of noise
 *     measured 0.15-0.18 on MIT-BIH's fast rhythms); a lead that sees the beats agrees in most
 *     windows (0.7-0.9 on the same records, V1 included). A lead's weight is multiplied by 0
 *     where A is at most FUSE_AGREE_LO, by 1 from FUSE_AGREE_HI, linearly between, and steps
 *     3-4 run again. The span is long on purpose: noise that comes and goes (a burst of
 *     motion, the stress test's 2-minute stretches) leaves a lead its weight, and a lead whose
 *     noise it shares with another lead (an electrode common to both) is not outvoted by the
 *     pair in a short stretch; only a lead that shows no beats for minutes loses its weight.
 *     Where no lead keeps any, the crest weighting stands alone. With two leads the weights
 *     stay the crest weighting's: the fused envelope is mostly the cleaner lead, which would
 *     always agree with itself, and two cannot outvote each other. Their agreements are
 *     measured all the same (each lead's mean factor, ecg_result.lead_agree): a lead of noise
 *     beside one ECG lead measured 0.08 or less, the ECG lead 1.0, so engine.c can still pass
 *     over a loose first electrode. docs/ACCURACY.md has the measurements.
 *  4. Per sample, the gains are interpolated linearly between window centres (no step at a
 *     window boundary could pass for a peak) and E(i) = sum over leads of g_l(i) e_l(i).
 *     A candidate's slope, for the T-wave test, fuses the leads' slopes with the same gains.
 * Where no lead has any weight, the first lead alone is used, unscaled.
 */
#ifndef ECG_FUSE_CORE_H
#define ECG_FUSE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifndef FUSE_WINDOW_S
#define FUSE_WINDOW_S 1.0     /* statistics window */
#endif
#ifndef FUSE_LEVEL_SPAN
#define FUSE_LEVEL_SPAN 9     /* windows in the beat-level median (odd) */
#endif
#ifndef FUSE_SCALE_SPAN
#define FUSE_SCALE_SPAN 31    /* windows in the lead's scale (odd, at most 31) */
#endif
#ifndef FUSE_NOISE_SPAN
#define FUSE_NOISE_SPAN 5     /* windows in the activity median (odd) */
#endif
#ifndef FUSE_CREST_FLOOR
#define FUSE_CREST_FLOOR 1.0  /* crest factors at or below this weigh nothing */
#endif
#ifndef FUSE_POWER
#define FUSE_POWER 2
#endif
#ifndef FUSE_AGREE_SPAN
#define FUSE_AGREE_SPAN 91    /* windows over which a lead's agreement is counted (odd) */
#endif
#ifndef FUSE_AGREE_S
#define FUSE_AGREE_S 0.05     /* a lead's window peak this close (s) to the fused one agrees */
#endif
#ifndef FUSE_AGREE_LO
#define FUSE_AGREE_LO 0.25    /* agreement at or under this: the lead weighs nothing */
#endif
#ifndef FUSE_AGREE_HI
#define FUSE_AGREE_HI 0.4     /* agreement from this on: the lead keeps its weight */
#endif
#ifndef FUSE_LIVE_CREST
#define FUSE_LIVE_CREST 1.2    /* a window whose peak is at most this x its mean has no bump */
#endif
#ifndef FUSE_WEIGHT_MIN
#define FUSE_WEIGHT_MIN 1.0    /* sums of weights under this scale the gains down with them */
#endif
#define FUSE_MAX_LEADS 16

#if defined(__CUDACC__)
#define FUSE_FN static inline __host__ __device__
#else
#define FUSE_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define FUSE_DADD(a, b) __dadd_rn((a), (b))
#define FUSE_DSUB(a, b) __dsub_rn((a), (b))
#define FUSE_DMUL(a, b) __dmul_rn((a), (b))
#define FUSE_DDIV(a, b) __ddiv_rn((a), (b))
#define FUSE_FADD(a, b) __fadd_rn((a), (b))
#define FUSE_FMUL(a, b) __fmul_rn((a), (b))
#else
#define FUSE_DADD(a, b) ((a) + (b))
#define FUSE_DSUB(a, b) ((a) - (b))
#define FUSE_DMUL(a, b) ((a) * (b))
#define FUSE_DDIV(a, b) ((a) / (b))
#define FUSE_FADD(a, b) ((a) + (b))
#define FUSE_FMUL(a, b) ((a) * (b))
#endif

/* Step 1 for window j of one lead's envelope env[0, n): its peak and mean. */
FUSE_FN void fuse_window_stats(const float *env, size_t n, size_t win, size_t j, float *peak,
                               double *mean)
{
    const size_t lo = j * win, hi = lo + win < n ? lo + win : n;
    float top = 0.0f;
    double sum = 0.0;
    for (size_t i = lo; i < hi; i++) {
        const float v = env[i];
        top = v > top ? v : top;
        sum = FUSE_DADD(sum, (double)v);
    }
    *peak = top;
    *mean = hi > lo ? FUSE_DDIV(sum, (double)(hi - lo)) : 0.0;
}

/* Step 3a: where window j of one lead's envelope env[0, n) peaks (the first index of its
 * largest value, the peak fuse_window_stats takes), or -1 where the window is all zero (no
 * signal: it agrees with nothing). */
FUSE_FN int64_t fuse_window_peak_at(const float *env, size_t n, size_t win, size_t j)
{
    const size_t lo = j * win, hi = lo + win < n ? lo + win : n;
    float top = 0.0f;
    int64_t at = -1;
    for (size_t i = lo; i < hi; i++) {
        if (env[i] > top) {
            top = env[i];
            at = (int64_t)i;
        }
    }
    return at;
}

/* Step 3a: one lead's agreement at window j, from its window peak positions at[] and the
 * first pass's fused envelope's, ref[] (fuse_window_peak_at): over the FUSE_AGREE_SPAN windows
 * centred on j (clipped to [0, n_win)), the fraction of windows in which the two lie within
 * reach samples. */
FUSE_FN double fuse_window_agreement(const int64_t *at, const int64_t *ref, size_t n_win,
                                     size_t j, int64_t reach)
{
    const size_t half = FUSE_AGREE_SPAN / 2;
    const size_t lo = j > half ? j - half : 0, hi = j + half + 1 < n_win ? j + half + 1 : n_win;
    unsigned count = 0;
    for (size_t i = lo; i < hi; i++) {
        const int64_t a = at[i], b = ref[i];
        if (a >= 0 && b >= 0 && (a > b ? a - b : b - a) <= reach)
            count++;
    }
    return FUSE_DDIV((double)count, (double)(hi - lo));
}

/* Median of the span values of v centred on j (clipped to [0, n)), span odd and at most 31,
 * over the windows i where mean is NULL or v[i] > FUSE_LIVE_CREST x mean[i] (a bump in the
 * window); their count to *kept, and 0.0 when there is none. */
FUSE_FN double fuse_median_kept(const double *v, const double *mean, size_t n, size_t j,
                                size_t span, size_t *kept)
{
    double w[31];
    const size_t half = span / 2;
    const size_t lo = j > half ? j - half : 0, hi = j + half + 1 < n ? j + half + 1 : n;
    size_t m = 0;
    for (size_t i = lo; i < hi; i++) { /* insertion sort: at most 31 values */
        double x = v[i];
        if (mean && !(x > FUSE_DMUL(FUSE_LIVE_CREST, mean[i])))
            continue;
        size_t t = m++;
        while (t > 0 && w[t - 1] > x) {
            w[t] = w[t - 1];
            t--;
        }
        w[t] = x;
    }
    *kept = m;
    if (m == 0) /* j past the end, or no window kept */
        return 0.0;
    if (m % 2 == 1)
        return w[m / 2];
    return FUSE_DMUL(0.5, FUSE_DADD(w[m / 2 - 1], w[m / 2]));
}

/* Median of the span values of v centred on j (clipped to [0, n)), span odd and at most 31. */
FUSE_FN double fuse_median_span(const double *v, size_t n, size_t j, size_t span)
{
    size_t kept;
    return fuse_median_kept(v, NULL, n, j, span, &kept);
}

/* Step 3's scale: the median of the window peaks over the span windows centred on j that have
 * a bump in them (fuse_median_kept), or of all of them where none has: a dead stretch's flat
 * residual never sets a lead's scale while live windows are in reach. */
FUSE_FN double fuse_live_median_span(const double *peak, const double *mean, size_t n, size_t j,
                                     size_t span)
{
    size_t kept;
    const double live = fuse_median_kept(peak, mean, n, j, span, &kept);
    return kept ? live : fuse_median_span(peak, n, j, span);
}

/* Step 2 and the weight of step 3, for window j of one lead: its beat level and weight. peak
 * holds the window peaks as doubles. */
FUSE_FN void fuse_window_weight(const double *peak, const double *mean, size_t n_win, size_t j,
                                double *level, double *weight)
{
    const double s = fuse_median_span(peak, n_win, j, FUSE_LEVEL_SPAN);
    const double a = fuse_median_span(mean, n_win, j, FUSE_NOISE_SPAN);
    *level = fuse_live_median_span(peak, mean, n_win, j, FUSE_SCALE_SPAN);
    *weight = 0.0;
    if (s > 0.0 && a > 0.0) {
        const double over = FUSE_DSUB(FUSE_DDIV(s, a), FUSE_CREST_FLOOR);
        if (over > 0.0) {
            double w = over;
            for (int p = 1; p < FUSE_POWER; p++)
                w = FUSE_DMUL(w, over);
            *weight = w;
        }
    }
}

/* Step 3a's factor of lead l at window j, from the leads' agreements agree[lead * n_win + j]
 * (fuse_window_agreement; NULL with fewer than three leads: 1). */
FUSE_FN double fuse_agreement_factor(const double *agree, size_t n_win, size_t l, size_t j)
{
    if (!agree)
        return 1.0;
    const double a = agree[l * n_win + j];
    if (a >= FUSE_AGREE_HI)
        return 1.0;
    if (a <= FUSE_AGREE_LO)
        return 0.0;
    return FUSE_DDIV(FUSE_DSUB(a, FUSE_AGREE_LO), FUSE_AGREE_HI - FUSE_AGREE_LO);
}

/* Lead l's step-3a factor averaged over the n_win windows, in window order: how much of the
 * recording it shows the beats in (0: none; ecg_result.lead_agree). */
FUSE_FN double fuse_agreement_mean(const double *agree, size_t n_win, size_t l)
{
    double sum = 0.0;
    for (size_t j = 0; j < n_win; j++)
        sum = FUSE_DADD(sum, fuse_agreement_factor(agree, n_win, l, j));
    return n_win ? FUSE_DDIV(sum, (double)n_win) : 1.0;
}

/* Step 3 for window j: the gains of the n_leads leads (level, weight and agree:
 * [lead * n_win + j]; agree NULL with fewer than three leads). */
FUSE_FN void fuse_window_gains(const double *level, const double *weight, const double *agree,
                               size_t n_leads, size_t n_win, size_t j, float *gain)
{
    double wf[FUSE_MAX_LEADS];
    double total = 0.0;
    for (size_t l = 0; l < n_leads; l++) {
        wf[l] = FUSE_DMUL(weight[l * n_win + j], fuse_agreement_factor(agree, n_win, l, j));
        total = FUSE_DADD(total, wf[l]);
    }
    if (total == 0.0 && agree) { /* no lead agrees: the crest weighting alone */
        for (size_t l = 0; l < n_leads; l++) {
            wf[l] = weight[l * n_win + j];
            total = FUSE_DADD(total, wf[l]);
        }
    }
    for (size_t l = 0; l < n_leads; l++) {
        const double w = wf[l], s = level[l * n_win + j];
        double g = 0.0;
        if (total > 0.0)
            g = w > 0.0 ? FUSE_DDIV(w, FUSE_DMUL(s, total > FUSE_WEIGHT_MIN ? total
                                                                         : FUSE_WEIGHT_MIN))
                        : 0.0;
        else if (l == 0)
            g = 1.0; /* no lead readable: the first lead as it is */
        gain[l * n_win + j] = (float)g;
    }
}

/* Step 4: lead l's gain at sample i, interpolated between window centres. */
FUSE_FN float fuse_gain_at(const float *gain_l, size_t n_win, size_t win, size_t i)
{
    const size_t centre0 = win / 2;
    if (i <= centre0 || n_win == 1)
        return gain_l[0];
    const size_t j = (i - centre0) / win;
    if (j + 1 >= n_win)
        return gain_l[n_win - 1];
    const float frac = (float)(i - centre0 - j * win) / (float)win;
    const float a = gain_l[j], b = gain_l[j + 1];
    return FUSE_FADD(a, FUSE_FMUL(FUSE_FADD(b, -a), frac));
}

#endif /* ECG_FUSE_CORE_H */
