/*
 * eval.c - beat-by-beat evaluation: matching detected R peaks to reference annotations
 * (ANSI/AAMI EC57, as WFDB's bxb), ROC-AUC of per-beat scores, and the AAMI class of MIT beat
 * symbols.
 *
 * Every function here is pure and reentrant; buffers are the caller's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

char ecg_aami_class(char symbol)
{
    switch (symbol) {
    case 'N': case 'L': case 'R': case 'e': case 'j': return 'N';
    case 'A': case 'a': case 'J': case 'S': return 'S';
    case 'V': case 'E': return 'V';
    case 'F': return 'F';
    case '/': case 'f': case 'Q': return 'Q';
    default: return 0;
    }
}

/* A candidate pairing of reference beat ref with detection det, dist samples apart. */
struct match_pair {
    int64_t dist;
    size_t ref;
    size_t det;
};

/* Orders pairs nearest first; equal distances go to the earlier reference, then the earlier
 * detection, so that the matching does not depend on qsort's stability. */
static int pair_cmp(const void *a, const void *b)
{
    const struct match_pair *pa = a, *pb = b;
    if (pa->dist != pb->dist)
        return pa->dist < pb->dist ? -1 : 1;
    if (pa->ref != pb->ref)
        return pa->ref < pb->ref ? -1 : 1;
    if (pa->det != pb->det)
        return pa->det < pb->det ? -1 : 1;
    return 0;
}

static int64_t abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

/*
 * Enumerates the pairs within window (both arrays ascending), storing them in pairs when it is
 * not NULL. Returns how many there are.
 */
static size_t enumerate_pairs(const int64_t *det, size_t n_det, const int64_t *ref, size_t n_ref,
                              int64_t window, struct match_pair *pairs)
{
    size_t count = 0, first = 0;
    for (size_t i = 0; i < n_ref; i++) {
        while (first < n_det && det[first] < ref[i] - window)
            first++;
        for (size_t j = first; j < n_det && det[j] <= ref[i] + window; j++) {
            if (pairs)
                pairs[count] = (struct match_pair){abs64(det[j] - ref[i]), i, j};
            count++;
        }
    }
    return count;
}

/*
 * Matching is global nearest-first: of all (reference, detection) pairs within the window, the
 * closest pair is matched first, both leave the pool, and so on (ties: earlier reference, then
 * earlier detection). Each reference is matched to at most one detection and vice versa.
 * The window in samples is floor(window_s * fs_hz), inclusive, so a match is never more than
 * window_s apart (54 samples for 150 ms at 360 Hz, as bxb).
 * Both arrays must be ascending (as readers and detectors produce them). The pair list is
 * allocated; if that fails, a sequential pass (each reference in turn takes the nearest unused
 * detection within the window) gives the same answer for all but chains of beats closer than
 * the window, and stats are still filled.
 */
void ecg_match_beats(const int64_t *detected, size_t n_detected, const int64_t *reference,
                     size_t n_reference, double fs_hz, double window_s,
                     struct ecg_match_stats *stats, int64_t *match)
{
    struct ecg_match_stats st = {0};
    int64_t window = (int64_t)floor(window_s * fs_hz + 1e-9);
    uint8_t *det_used = calloc(n_detected ? n_detected : 1, 1);
    int64_t *ref_match = malloc((n_reference ? n_reference : 1) * sizeof *ref_match);
    struct match_pair *pairs = NULL;
    size_t n_pairs = enumerate_pairs(detected, n_detected, reference, n_reference, window, NULL);

    if (det_used && ref_match)
        pairs = malloc((n_pairs ? n_pairs : 1) * sizeof *pairs);
    if (pairs) {
        enumerate_pairs(detected, n_detected, reference, n_reference, window, pairs);
        qsort(pairs, n_pairs, sizeof *pairs, pair_cmp);
        for (size_t i = 0; i < n_reference; i++)
            ref_match[i] = -1;
        for (size_t p = 0; p < n_pairs; p++) {
            if (ref_match[pairs[p].ref] >= 0 || det_used[pairs[p].det])
                continue;
            ref_match[pairs[p].ref] = (int64_t)pairs[p].det;
            det_used[pairs[p].det] = 1;
        }
        for (size_t i = 0; i < n_reference; i++) {
            if (match)
                match[i] = ref_match[i];
            if (ref_match[i] < 0) {
                st.fn++;
            } else {
                st.tp++;
                st.abs_err_ms_sum +=
                    (double)abs64(detected[ref_match[i]] - reference[i]) * 1000.0 / fs_hz;
            }
        }
    } else {
        /* Out of memory: allocation-free sequential pass. */
        size_t next = 0;
        for (size_t i = 0; i < n_reference; i++) {
            while (next < n_detected && detected[next] < reference[i] - window)
                next++;
            int64_t best = -1;
            if (next < n_detected && detected[next] <= reference[i] + window) {
                best = (int64_t)next;
                if (next + 1 < n_detected &&
                    abs64(detected[next + 1] - reference[i]) <
                        abs64(detected[next] - reference[i]))
                    best = (int64_t)next + 1;
            }
            if (match)
                match[i] = best;
            if (best < 0) {
                st.fn++;
                continue;
            }
            st.tp++;
            st.abs_err_ms_sum += (double)abs64(detected[best] - reference[i]) * 1000.0 / fs_hz;
            next = (size_t)best + 1;
        }
    }
    st.fp = n_detected - st.tp;
    if (stats)
        *stats = st;
    free(pairs);
    free(ref_match);
    free(det_used);
}

static int float_cmp(const void *a, const void *b)
{
    float fa = *(const float *)a, fb = *(const float *)b;
    return (fa > fb) - (fa < fb);
}

/* Copies the non-NaN values of src into a new sorted array; *n_out gets their count. */
static float *sorted_copy(const float *src, size_t n, size_t *n_out)
{
    float *dst = malloc((n ? n : 1) * sizeof *dst);
    size_t m = 0;
    if (!dst)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!isnan(src[i]))
            dst[m++] = src[i];
    qsort(dst, m, sizeof *dst, float_cmp);
    *n_out = m;
    return dst;
}

/*
 * AUC = P(score of a random positive > score of a random negative) + P(equal) / 2, by sorting
 * both classes and merging: O(n log n). NaN scores are ignored. Returns NaN when a class is
 * empty (after dropping NaNs) or memory runs out.
 */
double ecg_roc_auc(const float *pos, size_t n_pos, const float *neg, size_t n_neg)
{
    size_t np = 0, nn = 0;
    double auc = NAN;
    float *p = sorted_copy(pos, n_pos, &np);
    float *q = sorted_copy(neg, n_neg, &nn);
    if (!p || !q || np == 0 || nn == 0)
        goto out;

    /* For each positive: count negatives strictly below it and equal to it. */
    double wins = 0.0;
    size_t below = 0, upto = 0; /* q[0..below) < v, q[0..upto) <= v */
    for (size_t i = 0; i < np; i++) {
        float v = p[i];
        while (below < nn && q[below] < v)
            below++;
        if (upto < below)
            upto = below;
        while (upto < nn && q[upto] <= v)
            upto++;
        wins += (double)below + 0.5 * (double)(upto - below);
    }
    auc = wins / ((double)np * (double)nn);
out:
    free(p);
    free(q);
    return auc;
}
