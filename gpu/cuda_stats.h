/*
 * cuda_stats.h - device-memory statistics of the CUDA backend, for benchmarks (C callers; no
 * CUDA types). In a build without CUDA these symbols do not exist: include this only where
 * ECG_HAVE_CUDA is defined.
 */
#ifndef ECG_GPU_CUDA_STATS_H
#define ECG_GPU_CUDA_STATS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sums over every visible device's default memory pool (the one the backend allocates from):
 * bytes in use now, the peak in use and the peak reserved since the last reset. Returns the
 * number of devices (0 without one, all figures 0). */
int cuda_memory_stats(size_t *used_now, size_t *used_peak, size_t *reserved_peak);
void cuda_memory_reset_peak(void);

#ifdef __cplusplus
}
#endif

#endif /* ECG_GPU_CUDA_STATS_H */
