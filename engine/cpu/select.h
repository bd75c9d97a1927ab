/*
 * select.h - order statistics for the CPU backend: selection of the k-th smallest value and the
 * median in expected O(n), without sorting.
 *
 * Pure functions on caller-owned arrays (which they rearrange); thread-safe.
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
 * Median and median absolute deviation of v[0..n) (n > 0, no NaN; v is not modified): exact,
 * by radix selection on the float bit patterns (two passes each), O(n). For even n both are
 * the mean of the two middle values. Fails only with ECG_ERR_NOMEM.
 */
enum ecg_status cpu_median_mad(const float *v, size_t n, float *median, float *mad,
                               struct ecg_error *err) ECG_WUR;

#endif /* ECG_CPU_SELECT_H */
