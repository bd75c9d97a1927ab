/*
 * insert_core.h - the rhythm check that follows the adaptive decision: the arithmetic shared by
 * the CPU reference (engine/cpu/insert.c) and the CUDA twin (gpu/cuda_insert.cu). Included from C
 * and CUDA C++; every comparison is of integers or of floats, so both compute the same.
 *
 * An artefact taken for a beat between two true beats splits one RR interval in two: its two
 * intervals add up to about one regular interval. A premature beat does not: the pause after it
 * (compensatory for a ventricular beat, close to a full interval after an atrial one) makes its
 * two intervals add up to about 1.5 to 2 regular intervals. So beat k is an insertion when
 *  - its two intervals add up to at most INSERT_SUM_RR times the regular interval R, where R is
 *    the median of the INSERT_CONTEXT intervals on each side of them (k's own two left out, so
 *    that it cannot vouch for itself), and
 *  - it is weaker than both neighbours: its height (the envelope's prominence) is under
 *    INSERT_HEIGHT times the lower of theirs. This keeps an interpolated ventricular beat
 *    (premature, no pause, but larger than its neighbours) and any beat as strong as its
 *    neighbours.
 * The check applies only where the rhythm has a regular interval: the interquartile range of
 * the context intervals is at most INSERT_SPREAD times their median. Atrial fibrillation has
 * none, and its weak beats are real.
 * Each beat is judged against the decision's beats as they were (the verdicts do not depend on
 * one another's order), so the check runs in parallel; of two neighbouring insertions neither
 * passes the interval test, so a true beat is never judged against two artefacts.
 */
#ifndef ECG_INSERT_CORE_H
#define ECG_INSERT_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef INSERT_SUM_RR
#define INSERT_SUM_RR 1.25f
#endif
#ifndef INSERT_HEIGHT
#define INSERT_HEIGHT 0.65f
#endif
#define INSERT_CONTEXT 4 /* intervals on each side */
#define INSERT_SPREAD 0.3f /* interquartile range of the context, at most this share of R */

#if defined(__CUDACC__)
#define INSERT_FN static inline __host__ __device__
#else
#define INSERT_FN static inline
#endif

/* Twice the median of the up to INSERT_CONTEXT intervals before beat lo and after beat hi
 * (ascending positions; the intervals between lo and hi left out), or 0 when fewer than 2. */
INSERT_FN int64_t insert_twice_median(const int64_t *pos, size_t n, size_t lo, size_t hi)
{
    /* INSERT_CONTEXT intervals ending at beat lo, INSERT_CONTEXT starting at beat hi */
    int64_t rr[2 * INSERT_CONTEXT];
    size_t m = 0;
    for (size_t j = lo >= INSERT_CONTEXT ? lo - INSERT_CONTEXT + 1 : 1; j <= lo && j > 0; j++)
        rr[m++] = pos[j] - pos[j - 1];
    for (size_t j = hi + 1; j < n && j <= hi + INSERT_CONTEXT; j++)
        rr[m++] = pos[j] - pos[j - 1];
    if (m < 2)
        return 0;
    for (size_t i = 1; i < m; i++) { /* insertion sort */
        int64_t v = rr[i];
        size_t t = i;
        while (t > 0 && rr[t - 1] > v) {
            rr[t] = rr[t - 1];
            t--;
        }
        rr[t] = v;
    }
    const int64_t twice_median = m % 2 ? 2 * rr[m / 2] : rr[m / 2 - 1] + rr[m / 2];
    /* an irregular rhythm (atrial fibrillation) has no regular interval to split */
    const int64_t spread = rr[(3 * m) / 4 < m ? (3 * m) / 4 : m - 1] - rr[m / 4];
    if ((float)(2 * spread) > INSERT_SPREAD * (float)twice_median)
        return 0;
    return twice_median;
}

/* Whether the beats strictly between beats lo and hi are insertions: lo and hi are at most
 * INSERT_SUM_RR regular intervals apart and every beat between is under INSERT_HEIGHT times the
 * weaker of the two. */
INSERT_FN bool insert_span_is_artefact(const int64_t *pos, const float *height, size_t n,
                                       size_t lo, size_t hi)
{
    const int64_t twice_median = insert_twice_median(pos, n, lo, hi);
    if (twice_median == 0)
        return false;
    if ((float)(2 * (pos[hi] - pos[lo])) > INSERT_SUM_RR * (float)twice_median)
        return false;
    const float weaker = height[lo] < height[hi] ? height[lo] : height[hi];
    for (size_t j = lo + 1; j < hi; j++)
        if (!(height[j] < INSERT_HEIGHT * weaker))
            return false;
    return true;
}

/* Whether beat k of the n beats (positions pos, heights height, ascending) is an insertion:
 * alone between its two neighbours, or one of two between theirs. */
INSERT_FN bool insert_is_artefact(const int64_t *pos, const float *height, size_t n, size_t k)
{
    if (k == 0 || k + 1 >= n)
        return false;
    if (insert_span_is_artefact(pos, height, n, k - 1, k + 1))
        return true;
    if (k + 2 < n && insert_span_is_artefact(pos, height, n, k - 1, k + 2))
        return true;
    return k >= 2 && insert_span_is_artefact(pos, height, n, k - 2, k + 1);
}

#endif /* ECG_INSERT_CORE_H */
