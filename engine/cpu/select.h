/*
 * select.h - order statistics for the CPU backend: the k-th smallest value, medians, and the
 * median absolute deviation, in O(n) without sorting.
 *
 * Pure functions on caller-owned arrays (cpu_select_rank and cpu_median_inplace rearrange
 * theirs; cpu_median_mad leaves its input alone); thread-safe.
 */
#ifndef ECG_CPU_SELECT_H
#define ECG_CPU_SELECT_H

#include <stddef.h>

#include "ecg.h"

/* Value of rank `rank` (0-based, rank < n) of v[0..n), rearranging v so that every value left
 * of position rank is <= it and every value right of it is >= it. n must be > 0; no NaN. */
float cpu_select_rank(float *v, size_t n, size_t rank);

/* Median of v[0..n) (the mean of the two middle values when n is even), rearranging v.
 * n must be > 0; no NaN. */
float cpu_median_inplace(float *v, size_t n);

/*
 * Median and median absolute deviation (median of |v - median|) of v[0..n) (n > 0, no NaN; v
 * is not modified), exact. From 2,048 values one pass each: a deterministic subsample brackets
 * the middle ranks and only the values inside the bracket are gathered and selected; when the
 * bracket misses (adversarial orderings) a histogram narrowing takes over. O(n) either way.
 * For even n both are the mean of the two middle values. Fails only with ECG_ERR_NOMEM.
 */
enum ecg_status cpu_median_mad(const float *v, size_t n, float *median, float *mad,
                               struct ecg_error *err) ECG_WUR;

#endif /* ECG_CPU_SELECT_H */
