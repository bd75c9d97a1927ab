/*
 * likeness_core.h - how alike a beat is to its neighbours (the beat table's likeness column,
 * which the quality verdict reads: engine/quality.c, docs/RHYTHM.md), shared by the CPU
 * reference (engine/cpu/cpu_backend.c) and its CUDA twin (gpu/cuda_embed.cu), written once
 * so that both compute the same bits: every double operation in the same order, an explicit
 * round-to-nearest intrinsic on the device, never contracted into an FMA (the C build is
 * -std=c11, which turns contraction off).
 *
 * A beat's shape is its QRS-band difference d[t] = x[t] - x[t - lag] (lag = the quality
 * features' ECG_QUALITY_QRS_LAG_S: gain peaking at 25 Hz, baseline wander gone) over
 * t in [R - pre, R + post] of the input grid, on each lead detection read. Its likeness is the
 * largest Pearson correlation of that shape with the shapes of the beats up to LIKENESS_REACH
 * before and after it on the same lead whose windows lie inside the recording as its own does,
 * and the largest of that over the leads (likeness_of_leads: a lead that is flat or swamped
 * where another shows the complexes does not make the beats unlike):
 * heart beats of one rhythm repeat their complex (a run of ventricular tachycardia, a bigeminy's
 * every other beat), the deflections electrode motion and muscle noise leave behind do not.
 * NaN where no neighbour's window can be compared (a beat alone, or at the recording's ends).
 *
 * Each correlation: m = pre + post + 1 terms; sums sa, sb, saa, sbb, sab of the two shapes
 * taken in increasing t, each term one rounded product added to one running double; then
 * cov = sab - sa * sb / m, va = saa - sa * sa / m, vb = sbb - sb * sb / m and
 * r = cov / sqrt(va * vb), or 0 where va or vb is not positive (a flat shape).
 */
#ifndef ECG_LIKENESS_CORE_H
#define ECG_LIKENESS_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "quality.h"

#define LIKENESS_PRE_S 0.10  /* the shape starts this long before the R peak */
#define LIKENESS_POST_S 0.15 /* ... and ends this long after it */
#define LIKENESS_REACH 2     /* neighbours compared on either side */

#if defined(__CUDACC__)
#define LIKENESS_FN static inline __host__ __device__
#else
#define LIKENESS_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define LIKENESS_DADD(a, b) __dadd_rn((a), (b))
#define LIKENESS_DSUB(a, b) __dsub_rn((a), (b))
#define LIKENESS_DMUL(a, b) __dmul_rn((a), (b))
#define LIKENESS_DDIV(a, b) __ddiv_rn((a), (b))
#define LIKENESS_DSQRT(a) __dsqrt_rn(a)
#else
#define LIKENESS_DADD(a, b) ((a) + (b))
#define LIKENESS_DSUB(a, b) ((a) - (b))
#define LIKENESS_DMUL(a, b) ((a) * (b))
#define LIKENESS_DDIV(a, b) ((a) / (b))
#define LIKENESS_DSQRT(a) sqrt(a)
#endif

/* The shape's extent in samples of the input grid at fs_hz. */
struct likeness_geometry {
    int64_t lag, pre, post;
};

/* Taken on the host, once per recording (the CUDA backend passes it to its kernels), with the
 * quality features' rounding. */
static inline struct likeness_geometry likeness_geometry_of(double fs_hz)
{
    struct likeness_geometry g;
    g.lag = (int64_t)ecg_quality_round_lag(fs_hz * ECG_QUALITY_QRS_LAG_S);
    g.pre = (int64_t)ecg_quality_round_lag(fs_hz * LIKENESS_PRE_S);
    g.post = (int64_t)ecg_quality_round_lag(fs_hz * LIKENESS_POST_S);
    return g;
}

/* Whether the shape of the beat at r lies inside a recording of n samples (its differences'
 * earlier samples included). */
LIKENESS_FN int likeness_fits(int64_t r, int64_t n, struct likeness_geometry g)
{
    return r - g.pre - g.lag >= 0 && r + g.post < n;
}

/* The correlation from the five sums of two shapes of m terms each (the file comment). */
LIKENESS_FN double likeness_from_sums(double sa, double sb, double saa, double sbb, double sab,
                                      struct likeness_geometry g)
{
    const double m = (double)(g.pre + g.post + 1);
    const double cov = LIKENESS_DSUB(sab, LIKENESS_DDIV(LIKENESS_DMUL(sa, sb), m));
    const double va = LIKENESS_DSUB(saa, LIKENESS_DDIV(LIKENESS_DMUL(sa, sa), m));
    const double vb = LIKENESS_DSUB(sbb, LIKENESS_DDIV(LIKENESS_DMUL(sb, sb), m));
    if (!(va > 0.0) || !(vb > 0.0))
        return 0.0;
    return LIKENESS_DDIV(cov, LIKENESS_DSQRT(LIKENESS_DMUL(va, vb)));
}

/* One difference of a shape: d[r + t]. */
LIKENESS_FN double likeness_d(const float *x, int64_t r, int64_t t, struct likeness_geometry g)
{
    return LIKENESS_DSUB((double)x[r + t], (double)x[r + t - g.lag]);
}

/* The correlation of the shapes at ra and rb (both fitting). */
LIKENESS_FN double likeness_pair(const float *x, int64_t ra, int64_t rb,
                                 struct likeness_geometry g)
{
    double sa = 0.0, sb = 0.0, saa = 0.0, sbb = 0.0, sab = 0.0;
    for (int64_t t = -g.pre; t <= g.post; t++) {
        const double a = likeness_d(x, ra, t, g), b = likeness_d(x, rb, t, g);
        sa = LIKENESS_DADD(sa, a);
        sb = LIKENESS_DADD(sb, b);
        saa = LIKENESS_DADD(saa, LIKENESS_DMUL(a, a));
        sbb = LIKENESS_DADD(sbb, LIKENESS_DMUL(b, b));
        sab = LIKENESS_DADD(sab, LIKENESS_DMUL(a, b));
    }
    return likeness_from_sums(sa, sb, saa, sbb, sab, g);
}

/* Beat i's likeness (the file comment) among the k R peaks of a recording x of n samples. */
LIKENESS_FN float likeness_of(const float *x, int64_t n, const int64_t *peaks, size_t k, size_t i,
                              struct likeness_geometry g)
{
    if (!likeness_fits(peaks[i], n, g))
        return NAN;
    double best = -2.0;
    const size_t lo = i >= LIKENESS_REACH ? i - LIKENESS_REACH : 0;
    for (size_t j = lo; j <= i + LIKENESS_REACH && j < k; j++) {
        if (j == i || !likeness_fits(peaks[j], n, g))
            continue;
        const double r = likeness_pair(x, peaks[i], peaks[j], g);
        best = r > best ? r : best;
    }
    return best < -1.5 ? NAN : (float)best;
}

/* likeness_of over n_leads leads of n samples each, lead l's first sample at x[l] (the leads'
 * largest; NaN where none compares, which is the same on every lead). */
LIKENESS_FN float likeness_of_leads(const float *const *x, size_t n_leads, int64_t n,
                                    const int64_t *peaks, size_t k, size_t i,
                                    struct likeness_geometry g)
{
    float best = NAN;
    for (size_t l = 0; l < n_leads; l++) {
        const float v = likeness_of(x[l], n, peaks, k, i, g);
        if (!isnan(v) && !(best >= v)) /* a NaN best takes v; a NaN v is none */
            best = v;
    }
    return best;
}

#if !defined(__CUDACC__)
#define LIKENESS_PARALLEL_MIN 4096 /* beats (about an hour): the CPU's two passes in parallel */

/* Beat i's sums for the CPU's way (likeness_all): its own sum of differences and of their
 * squares to sum[2 i], sum[2 i + 1], and its cross sums with the LIKENESS_REACH beats after it
 * to cross[i * REACH + d - 1], each in likeness_pair's order (every sum its own chain, so the
 * same bits as there, and the chains side by side in one walk over the shape). Zeros where the
 * beat does not fit; a pair whose later beat does not fit, or past the last, is never read. */
static inline void likeness_sums(const float *x, int64_t n, const int64_t *peaks, size_t k,
                                 size_t i, struct likeness_geometry g, double *sum,
                                 double *cross)
{
    double s = 0.0, ss = 0.0, sab[LIKENESS_REACH] = {0.0};
    int pair[LIKENESS_REACH];
    for (size_t d = 1; d <= LIKENESS_REACH; d++)
        pair[d - 1] = i + d < k && likeness_fits(peaks[i + d], n, g);
    if (likeness_fits(peaks[i], n, g)) {
        for (int64_t t = -g.pre; t <= g.post; t++) {
            const double a = likeness_d(x, peaks[i], t, g);
            s += a;
            ss += a * a;
            for (size_t d = 1; d <= LIKENESS_REACH; d++)
                if (pair[d - 1])
                    sab[d - 1] += a * likeness_d(x, peaks[i + d], t, g);
        }
    }
    sum[2 * i] = s;
    sum[2 * i + 1] = ss;
    for (size_t d = 1; d <= LIKENESS_REACH; d++)
        cross[i * LIKENESS_REACH + d - 1] = sab[d - 1];
}

/* The correlation of beats i and i + d (i first, as likeness_pair takes them) from the sums. */
static inline float likeness_of_sums(const double *sum, const double *cross, size_t i, size_t d,
                                     struct likeness_geometry g)
{
    const size_t j = i + d;
    return (float)likeness_from_sums(sum[2 * i], sum[2 * j], sum[2 * i + 1], sum[2 * j + 1],
                                     cross[i * LIKENESS_REACH + d - 1], g);
}

/* Beat i's best over its pairs before and after it, and out[i] (NaNs are none). */
static inline void likeness_fold(const int64_t *peaks, int64_t n, size_t k, size_t i,
                                 struct likeness_geometry g, const double *sum,
                                 const double *cross, float *out)
{
    float best = out[i];
    if (!likeness_fits(peaks[i], n, g))
        return;
    for (size_t d = 1; d <= LIKENESS_REACH; d++) {
        float r[2] = {NAN, NAN};
        if (i + d < k && likeness_fits(peaks[i + d], n, g))
            r[0] = likeness_of_sums(sum, cross, i, d, g);
        if (i >= d && likeness_fits(peaks[i - d], n, g))
            r[1] = likeness_of_sums(sum, cross, i - d, d, g);
        for (int h = 0; h < 2; h++)
            if (!isnan(r[h]) && !(best >= r[h]))
                best = r[h];
    }
    out[i] = best;
}

/* Every beat's likeness_of_leads, as the CPU takes them: each pair of neighbours' cross sum
 * taken once (likeness_pair is symmetric in its two beats, bit for bit: every sum and product
 * takes the same operands either way) and each beat's own sums once (sum: 2 k doubles, cross:
 * k * LIKENESS_REACH), walking each shape once with every chain side by side; then each beat's
 * best of its pairs: the same values. Both passes run in parallel from LIKENESS_PARALLEL_MIN
 * beats (each writes only its own beat's entries). out gets k entries. */
static inline void likeness_all(const float *const *x, size_t n_leads, int64_t n,
                                const int64_t *peaks, size_t k, struct likeness_geometry g,
                                double *sum, double *cross, float *out)
{
    for (size_t i = 0; i < k; i++)
        out[i] = NAN;
    for (size_t l = 0; l < n_leads; l++) {
        if (k >= LIKENESS_PARALLEL_MIN) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (size_t i = 0; i < k; i++)
                likeness_sums(x[l], n, peaks, k, i, g, sum, cross);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (size_t i = 0; i < k; i++)
                likeness_fold(peaks, n, k, i, g, sum, cross, out);
        } else { /* the same steps without entering OpenMP (ecg_parallel.h) */
            for (size_t i = 0; i < k; i++)
                likeness_sums(x[l], n, peaks, k, i, g, sum, cross);
            for (size_t i = 0; i < k; i++)
                likeness_fold(peaks, n, k, i, g, sum, cross, out);
        }
    }
}
#endif

#endif /* ECG_LIKENESS_CORE_H */
