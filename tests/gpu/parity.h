/*
 * parity.h - what the files of the test_gpu_parity program share. One program, linked by the
 * Makefile from:
 *   test_gpu_parity.c   fixtures, comparisons, the out-of-memory test and main (its opening
 *                       comment states every tolerance)
 *   parity_stages.c     stage by stage: records, random signals, strips, the blocked detector,
 *                       the VAE paths and the cuFFT filter forced
 *   parity_engine.c     end to end through the engine: records, threads, several devices
 *   parity_readers.c    the device's parsers (CSV, raw, .npy, EDF/BDF), bit for bit
 * The cmocka group state is the struct pair of gpu_pair.h (NULL without a device).
 *
 * Include after <cmocka.h>.
 */
#ifndef PARITY_H
#define PARITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_pair.h"

#include "backend.h"
#include "ecg.h"

/* ---------------------------------------------------------------- fixtures */
/* test_gpu_parity.c */

/* The 22 shared MIT-BIH records the tests read (n_records() of them). */
extern const char *const records[];

/* ECG_GPU_QUICK=1: fewer records and shorter signals (for compute-sanitizer). */
bool quick(void);
/* How many of records[] the tests read: 2 with ECG_GPU_QUICK, else all. */
size_t n_records(void);
/* Reads shared record rec (ECG_GPU_DATA/mitdb or ECG_SHARED_DATA/mitdb); fails the test if it
 * cannot. */
void read_record(const char *rec, struct ecg_signal *sig);
/* A synthetic ECG: Gaussian QRS-like pulses with jittered RR, a T wave, baseline wander and
 * noise; or (kind 1) white noise only. */
float *random_signal(uint64_t seed, double fs, size_t n, int kind);
/* A CPU or CUDA engine of two workers on model, on every visible device; fails the test if
 * it cannot be made. */
struct ecg_engine *engine_of(enum ecg_backend_kind kind, const struct ecg_model *model);

/* ---------------------------------------------------------------- comparisons */
/* test_gpu_parity.c */

/* Every element of stage buffer which of a backend context (malloc'd; *n their count). */
float *read_all(const struct ecg_backend_ops *ops, void *ctx, enum ecg_stage_buf which,
                size_t elem, size_t *n);
/* Compares two float arrays: max |a - b|, how many differ in their bits; fails past tol. */
void compare_floats(const char *what, const float *cpu, const float *gpu, size_t n,
                    double rel_tol);
/* Beats detected by one backend and not the other (both ascending). */
size_t peak_mismatches(const int64_t *a, size_t na, const int64_t *b, size_t nb);

/* ---------------------------------------------------------------- stage by stage */
/* parity_stages.c */

/* What stages_one() adds up over a test: beats the CPU found, beats the backends disagree on,
 * signals run. */
struct stage_totals {
    size_t beats, detect_miss, records;
};

/*
 * Runs one signal through both backends stage by stage. Each GPU stage starts from the CPU's
 * output of the previous stage where a buffer can be injected (input, resampled, filtered).
 */
void stages_one(struct pair *p, const float *x, size_t n, double fs, const char *label,
                struct stage_totals *tot);

/* ---------------------------------------------------------------- the tests, in main's order */

/* parity_readers.c */
void test_csv_bits(void **state);
void test_raw_bits(void **state);
void test_npy_bits(void **state);
void test_edf_bits(void **state);
/* parity_stages.c */
void test_stages_records(void **state);
void test_stages_random(void **state);
void test_stages_strips(void **state);
void test_detect_blocks(void **state);
void test_vae_cudnn(void **state);
void test_vae_block(void **state);
void test_filter_fft(void **state);
/* parity_engine.c */
void test_engine_records(void **state);
void test_engine_concurrent(void **state);
void test_multi_device(void **state);
/* test_gpu_parity.c */
void test_oom_recovers(void **state);

#endif /* PARITY_H */
