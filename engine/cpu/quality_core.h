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

#define QUALITY_LANES 8 /* a power of two: the combining tree is a butterfly */

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

/* The QRS-band difference d = x[i] - x[i - lag] added to the moment sums (d, d^2, d^3, d^4). */
QUALITY_FN void quality_qrs_term(const float *x, size_t i, size_t lag, double *s1, double *s2,
                                 double *s3, double *s4)
{
    double d = QUALITY_DSUB((double)x[i], (double)x[i - lag]);
    double d2 = QUALITY_DMUL(d, d);
    *s1 = QUALITY_DADD(*s1, d);
    *s2 = QUALITY_DADD(*s2, d2);
    *s3 = QUALITY_DADD(*s3, QUALITY_DMUL(d2, d));
    *s4 = QUALITY_DADD(*s4, QUALITY_DMUL(d2, d2));
}

/* The HF second difference h = (x[i + L] - x[i]) - (x[i] - x[i - L]) added as h^2. */
QUALITY_FN void quality_hf_term(const float *x, size_t i, size_t lag, double *h2)
{
    double h = QUALITY_DSUB(QUALITY_DSUB((double)x[i + lag], (double)x[i]),
                            QUALITY_DSUB((double)x[i], (double)x[i - lag]));
    *h2 = QUALITY_DADD(*h2, QUALITY_DMUL(h, h));
}

/* Second walk, sample i of window [a, b), once the window's extremes lo and hi are known:
 * plateaus at the extremes, the QRS-band difference moments (i >= a + lag_qrs) and the HF
 * second difference (a + lag_hf <= i < b - lag_hf). */
QUALITY_FN void quality_lane_second(struct quality_lane *p, const float *x, size_t n,
                                    const struct ecg_quality_geometry *g, size_t a, size_t b,
                                    size_t i, float lo, float hi)
{
    if ((x[i] == hi || x[i] == lo) && quality_plateau(x, n, i)) {
        p->at_max += x[i] == hi;
        p->at_min += x[i] == lo;
    }
    if (i >= a + g->lag_qrs) {
        quality_qrs_term(x, i, g->lag_qrs, &p->s1, &p->s2, &p->s3, &p->s4);
        p->qrs_n++;
    }
    if (i >= a + g->lag_hf && i + g->lag_hf < b) {
        quality_hf_term(x, i, g->lag_hf, &p->h2);
        p->hf_n++;
    }
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
