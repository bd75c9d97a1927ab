/*
 * cuda_stats.h - host-callable hooks of the CUDA backend for benchmarks and tests (C callers;
 * no CUDA types): device-memory statistics, and the device CSV parser's number routine run on
 * the host (so that a machine without a GPU still checks it against ecg_parse_float). In a
 * build without CUDA these symbols do not exist: include this only where ECG_HAVE_CUDA is
 * defined.
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

/* The device CSV parser's token routine (gpu/cuda_parse_float.cuh), compiled for the host:
 * parses exactly [s, e). Returns 0 with *out set (bit-identical to ecg_parse_float), 1 when the
 * token is valid but left to the host's exact parser (HARD), 2 when it is not a whole number. */
int cuda_parse_token_host(const char *s, const char *e, float *out);

/* Dynamic batching (gpu/cuda_batch.cu), summed over every batch object of the process since it
 * started: batches run, analyses in them, fronts captured as CUDA graphs and graphs replayed,
 * and the same for the backs (embed, encode, the table's copy); batched short fronts
 * (gpu/cuda_small.cuh) run, and the analyses whose front ran in one; the same for the
 * batched backs that follow them; batched passes (front and back) captured as one CUDA graph,
 * and graphs of batched passes replayed. */
struct cuda_batch_counts {
    unsigned long long batches, members, captures, replays, back_captures, back_replays;
    unsigned long long small_fronts, small_members;
    unsigned long long small_backs, small_back_members; /* batched backs, and their analyses */
    unsigned long long pass_captures, pass_replays;
};
void cuda_batch_counts(struct cuda_batch_counts *out);

#ifdef __cplusplus
}
#endif

#endif /* ECG_GPU_CUDA_STATS_H */
