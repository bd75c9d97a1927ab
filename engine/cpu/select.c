/*
 * select.c - quickselect and median (see select.h).
 */
#include "select.h"

/*
 * Iterative quickselect: median-of-three pivot and a three-way (Dutch flag) partition, so runs
 * of equal values - common in quantised ECG - are settled in one pass instead of degrading to
 * O(n^2). Expected O(n).
 */
float cpu_select_rank(float *v, size_t n, size_t rank)
{
    size_t lo = 0, hi = n; /* the answer lies in v[lo..hi) */
    while (hi - lo > 1) {
        float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        /* [lo, lt) < pivot, [lt, i) == pivot, [gt, hi) > pivot */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            float val = v[i];
            if (val < pivot) {
                v[i++] = v[lt];
                v[lt++] = val;
            } else if (val > pivot) {
                v[i] = v[--gt];
                v[gt] = val;
            } else {
                i++;
            }
        }
        if (rank < lt)
            hi = lt;
        else if (rank >= gt)
            lo = gt;
        else
            return pivot; /* v[lt..gt) all equal the pivot: rank is settled */
    }
    return v[lo];
}

float cpu_median_inplace(float *v, size_t n)
{
    size_t mid = n / 2;
    float upper = cpu_select_rank(v, n, mid);
    if (n % 2 == 1)
        return upper;
    /* After the selection every value left of mid is <= upper: the lower middle is their max. */
    float lower = v[0];
    for (size_t i = 1; i < mid; i++)
        if (v[i] > lower)
            lower = v[i];
    return (float)(0.5 * ((double)lower + (double)upper));
}
