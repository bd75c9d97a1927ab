/*
 * upload.h - what the files of the test_gpu_upload program share. One program, linked by the
 * Makefile from:
 *   test_gpu_upload.c   the fixture (record 101 as CSV and float32, the shipped model), the
 *                       helpers below and main (its opening comment says what is tested)
 *   upload_formats.c    every format streamed, what upload_begin refuses, cancelled uploads,
 *                       bodies the device parser declines
 *   upload_chunked.c    chunked bodies: begun with the buffer's capacity, and the service's
 *                       growth path (the upload begun again on each larger buffer)
 *   upload_many.c       several uploads at once, four threads, device memory
 *
 * Include after <cmocka.h>.
 */
#ifndef UPLOAD_H
#define UPLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "ecg.h"

#define MIB ((size_t)1 << 20)

/* The group's state (group_setup): the recording and the model, or why the tests skip. */
struct fixture {
    bool ready;
    char why[ECG_ERROR_MSG_LEN + 64];
    struct ecg_model *model;
    double fs_hz;
    size_t tiles;     /* copies of the record in the recording */
    char *csv;        /* the recording as one-column CSV, "%.9g" */
    size_t csv_len;
    float *samples;   /* the recording as float32 */
    size_t n;
};

/* Uneven arrival: these step sizes in turn, so that copies start on odd offsets, some steps
 * stay under the backend's 4 MiB batch and some cross several. */
#define ARRIVAL_STEPS 7
extern const size_t arrival_steps[ARRIVAL_STEPS];

/* A test's engine and the fixture's CSV and float32 bodies analysed from plain memory by it:
 * the references streamed analyses must equal. */
struct refs {
    struct ecg_engine *engine;
    struct ecg_read_opts csv, f32;
    size_t f32_len;
    struct ecg_result *ref_csv, *ref_f32;
};

/* ---------------------------------------------------------------- helpers (test_gpu_upload.c) */

/* The fixture, or a visible skip. */
struct fixture *fixture_or_skip(void **state);
/* ECG_GPU_QUICK=1 (under compute-sanitizer) leaves out the long tests. */
void skip_if_quick(void);
/* A CUDA engine on fx's model (device -1: every visible one); fails the test if it cannot be
 * made. */
struct ecg_engine *engine_open(const struct fixture *fx, unsigned workers, int device);
/* True when a and b agree bit for bit; says where they differ into why otherwise. */
bool same_result(const struct ecg_result *a, const struct ecg_result *b, char *why,
                 size_t why_len);
/* Fails the test, saying where, unless same_result(). */
void assert_same_result(const struct ecg_result *a, const struct ecg_result *b,
                        const char *what);
/* The reference: ecg_engine_analyze_bytes of the bytes in plain malloc'd memory. */
struct ecg_result *analyze_reference(struct ecg_engine *engine, size_t tiles,
                                     const void *bytes, size_t len,
                                     const struct ecg_read_opts *opts);
/* Opens r's engine and analyses the references; refs_close() frees them and the engine. */
void refs_open(const struct fixture *fx, unsigned workers, int device, struct refs *r);
void refs_close(struct refs *r);
/* Copies src into host (an ecg_engine_host_alloc buffer) in arrival_steps, reporting each step
 * to up (which may be NULL), starting with step index first_step. */
void arrive(struct ecg_upload *up, char *host, const void *src, size_t len,
            size_t first_step);
/* Analyses the len bytes up holds, asserts that the analysis read the device copy and that its
 * answer is ref's, and frees the answer. */
void analyze_on_device(struct ecg_engine *engine, struct ecg_upload *up, size_t len,
                       const struct ecg_read_opts *opts, const struct ecg_result *ref,
                       const char *what);
/* One body of len bytes through the whole streaming path, in a buffer of cap >= len bytes (cap >
 * len: a chunked body, whose buffer's tail holds bytes no reader may take: 0xff, a NaN as float32
 * and a control byte in CSV), checked against ref; used_device asserted. With cap > len, also a
 * length past the capacity: refused, and the device copy left for the real analysis. */
void stream_and_check(struct ecg_engine *engine, const void *bytes, size_t len,
                      size_t cap, const struct ecg_read_opts *opts,
                      enum ecg_format begin_format, const struct ecg_result *ref,
                      const char *what);

/* ---------------------------------------------------------------- the tests, in main's order */

/* upload_formats.c */
void test_upload_csv_and_f32(void **state);
void test_upload_refusals(void **state);
void test_upload_cancel(void **state);
void test_upload_device_parser_declines(void **state);
/* upload_chunked.c */
void test_upload_chunked_capacity(void **state);
void test_upload_regrown(void **state);
/* upload_many.c */
void test_upload_several_at_once(void **state);
void test_upload_threads(void **state);
void test_upload_memory(void **state);

#endif /* UPLOAD_H */
