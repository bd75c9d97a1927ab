/*
 * test_gpu_host_memory.c - ecg_engine_host_alloc(): bytes analysed from the engine's own host
 * memory give exactly the answer of the same bytes in plain malloc'd memory.
 *
 * With the CUDA backend the host memory is pinned and load_bytes DMAs it without the staging
 * copy (gpu/cuda_backend.cu, upload_bytes), so this is the test of that path: CSV and float32,
 * record 101 of the shared MIT-BIH data, every beat-table column compared bit for bit. The CUDA
 * half skips visibly where the build has no CUDA backend or the machine no device; the CPU half
 * (host_alloc = malloc) runs everywhere.
 * Data: ECG_GPU_DATA (a directory holding mitdb/) overrides ECG_SHARED_DATA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "ecg.h"

struct recording {
    struct ecg_signal sig;
    char *csv;
    size_t csv_len;
};

static void recording_read(struct recording *rec)
{
    char path[512];
    const char *dir = getenv("ECG_GPU_DATA");
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    snprintf(path, sizeof path, "%s/mitdb/101", dir && *dir ? dir : ECG_SHARED_DATA);
    memset(rec, 0, sizeof *rec);
    if (ecg_read_file(path, &opts, &rec->sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    struct ecg_buf text = {0};
    for (size_t i = 0; i < rec->sig.n; i++)
        ecg_buf_printf(&text, "%.9g\n", rec->sig.samples[i]);
    assert_false(text.failed);
    rec->csv = text.data;
    rec->csv_len = text.len;
}

static void recording_free(struct recording *rec)
{
    ecg_signal_free(&rec->sig);
    free(rec->csv);
}

static void assert_same_result(const struct ecg_result *a, const struct ecg_result *b)
{
    assert_int_equal(a->n_beats, b->n_beats);
    assert_int_equal(a->n_samples, b->n_samples);
    assert_true(a->n_beats > 1500); /* record 101: 1,865 beats in 30 min */
    size_t k = a->n_beats;
    assert_memory_equal(a->r_peak, b->r_peak, k * sizeof *a->r_peak);
    assert_memory_equal(a->onset, b->onset, k * sizeof *a->onset);
    assert_memory_equal(a->end, b->end, k * sizeof *a->end);
    assert_memory_equal(a->rr_ms, b->rr_ms, k * sizeof *a->rr_ms);
    assert_memory_equal(a->likeness, b->likeness, k * sizeof *a->likeness);
    assert_memory_equal(a->crest, b->crest, k * sizeof *a->crest);
    assert_memory_equal(a->kept, b->kept, k * sizeof *a->kept);
}

/* Analyses bytes once from malloc'd memory and once from the engine's host memory. */
static void check_engine(struct ecg_engine *engine, const void *bytes, size_t len,
                         enum ecg_format format, double fs_hz)
{
    struct ecg_read_opts opts = {.format = format, .fs_hz = fs_hz};
    struct ecg_error err = {0};
    struct ecg_result *plain = NULL, *hosted = NULL;
    char *copy = malloc(len);
    char *host = ecg_engine_host_alloc(engine, len);
    assert_non_null(copy);
    assert_non_null(host);
    memcpy(copy, bytes, len);
    memcpy(host, bytes, len);
    if (ecg_engine_analyze_bytes(engine, copy, len, &opts, &plain, &err) != ECG_OK)
        fail_msg("%s, malloc'd bytes: %s", ecg_format_name(format), err.message);
    /* twice from the same host buffer: reuse must not change anything */
    for (int round = 0; round < 2; round++) {
        if (ecg_engine_analyze_bytes(engine, host, len, &opts, &hosted, &err) != ECG_OK)
            fail_msg("%s, host memory: %s", ecg_format_name(format), err.message);
        assert_same_result(plain, hosted);
        ecg_result_free(hosted);
        hosted = NULL;
    }
    ecg_result_free(plain);
    ecg_engine_host_free(engine, host);
    ecg_engine_host_free(engine, NULL); /* accepted */
    free(copy);
}

static void run_backend(enum ecg_backend_kind kind)
{
    struct ecg_engine_config config = {.backend = kind, .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine) {
        printf("# SKIP: no %s engine: %s\n", ecg_backend_kind_name(kind), err.message);
        skip();
    }
    printf("# %s on %s\n", ecg_engine_backend(engine), ecg_engine_device(engine));
    struct recording rec;
    recording_read(&rec);
    check_engine(engine, rec.csv, rec.csv_len, ECG_FORMAT_CSV, rec.sig.fs_hz);
    check_engine(engine, rec.sig.samples, rec.sig.n * sizeof(float), ECG_FORMAT_F32,
                 rec.sig.fs_hz);
    recording_free(&rec);
    ecg_engine_destroy(engine);
}

static void test_cpu_host_memory(void **state)
{
    (void)state;
    run_backend(ECG_BACKEND_CPU);
}

static void test_cuda_host_memory(void **state)
{
    (void)state;
    if (!ecg_cuda_backend_ops()) {
        printf("# SKIP: this build has no CUDA backend\n");
        skip();
    }
    run_backend(ECG_BACKEND_CUDA);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_host_memory),
        cmocka_unit_test(test_cuda_host_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
