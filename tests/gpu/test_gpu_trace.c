/*
 * test_gpu_trace.c - kept traces (ecg_engine_analyze_keep, ecg_trace_*): the signal an analysis
 * keeps is the recording's, its min/max decimation equals ecg_minmax() (the reference) on the
 * samples read independently from the file, windows read back exactly, range errors are
 * refused, and the kept embedding is the one ecg_engine_analyze_embed() hands back.
 *
 * ecg_minmax() itself is checked against a plain sequential scan (test_minmax_reference; every
 * trace below is too). The CPU half runs everywhere. The CUDA half runs the same checks on a CUDA engine, whose
 * reduction is gpu/cuda_trace.cu's kernel on the device copy, and requires results identical to
 * the CPU reference for every window and bucket count tried (many buckets, few, more buckets
 * than samples, odd lengths, one sample); it skips visibly without a CUDA build or device.
 * Data: MIT-BIH record 101 (ECG_GPU_DATA, a directory holding mitdb/, overrides
 * ECG_SHARED_DATA).
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

static void read_record(struct ecg_signal *sig)
{
    char path[512];
    const char *dir = getenv("ECG_GPU_DATA");
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    snprintf(path, sizeof path, "%s/mitdb/101", dir && *dir ? dir : ECG_SHARED_DATA);
    if (ecg_read_file(path, &opts, sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

/* Windows [start, end) and bucket counts: whole recording, hour-scale and second-scale
 * windows, more buckets than samples, single samples, lengths that do not divide. */
static const struct {
    double start_frac, end_frac;
    size_t extra_start, extra_end, buckets;
} cases[] = {
    {0.0, 1.0, 0, 0, 1000},  {0.0, 1.0, 0, 0, 1},     {0.0, 1.0, 0, 0, 7},
    {0.25, 0.5, 3, 0, 999},  {0.5, 0.5, 0, 3600, 800}, {0.5, 0.5, 0, 3601, 4000},
    {0.9, 0.9, 0, 1, 10},     {0.1, 0.1, 17, 40, 40},  {0.0, 1.0, 0, 0, 100000},
};

/* The definition, written plainly: a sequential scan keeping the first of equal values. */
static size_t naive_minmax(const float *x, size_t start, size_t end, size_t n_buckets,
                           struct ecg_minmax *out)
{
    size_t len = end - start, buckets = n_buckets < len ? n_buckets : len;
    for (size_t b = 0; b < buckets; b++) {
        size_t lo = start + len * b / buckets, hi = start + len * (b + 1) / buckets;
        size_t i_min = lo, i_max = lo;
        for (size_t i = lo + 1; i < hi; i++) {
            if (x[i] < x[i_min])
                i_min = i;
            if (x[i] > x[i_max])
                i_max = i;
        }
        out[b] = (struct ecg_minmax){(int64_t)i_min, (int64_t)i_max, x[i_min], x[i_max]};
    }
    return buckets;
}

static void assert_same_minmax(const struct ecg_minmax *got, const struct ecg_minmax *want,
                               size_t n)
{
    for (size_t b = 0; b < n; b++) {
        assert_int_equal(got[b].i_min, want[b].i_min);
        assert_int_equal(got[b].i_max, want[b].i_max);
        assert_memory_equal(&got[b].v_min, &want[b].v_min, sizeof(float));
        assert_memory_equal(&got[b].v_max, &want[b].v_max, sizeof(float));
    }
}

/* ecg_minmax() (SSE extremes, then the first index of each) against the plain scan: random
 * values on a coarse grid (many ties), signed zeros, constant runs, every bucket count. */
static void test_minmax_reference(void **state)
{
    (void)state;
    enum { N = 4099 };
    static float x[N];
    static struct ecg_minmax got[N], want[N];
    uint32_t seed = 12345u;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((int)(seed >> 28) - 8) * 0.25f; /* 16 levels: ties everywhere */
        if (x[i] == 0.0f && (seed & 0x100u))
            x[i] = -0.0f;
    }
    for (size_t i = 2000; i < 2100; i++)
        x[i] = 1.5f; /* a constant run */
    static const size_t bucket_counts[] = {1, 2, 3, 7, 64, 1000, 2049, 4098, 4099, 10000};
    for (size_t c = 0; c < sizeof bucket_counts / sizeof bucket_counts[0]; c++)
        for (size_t start = 0; start < 9; start += 4) {
            size_t n = ecg_minmax(x, start, N - start / 2, bucket_counts[c], got);
            assert_int_equal(n, naive_minmax(x, start, N - start / 2, bucket_counts[c], want));
            assert_same_minmax(got, want, n);
        }
    assert_int_equal(ecg_minmax(x, 5, 5, 3, got), 0);
    assert_int_equal(ecg_minmax(x, 0, 5, 0, got), 0);
}

static void check_engine(struct ecg_engine *engine, const struct ecg_signal *sig)
{
    struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = sig->fs_hz};
    struct ecg_error err = {0};
    struct ecg_result *result = NULL, *plain = NULL;
    struct ecg_trace *trace = NULL;
    float *embedding = NULL, *plain_embedding = NULL;
    size_t bytes = sig->n * sizeof(float);
    if (ecg_engine_analyze_keep(engine, NULL, sig->samples, bytes, &opts, &result, &trace,
                                &embedding, &err) != ECG_OK)
        fail_msg("analyze_keep: %s", err.message);
    assert_non_null(trace);
    assert_non_null(embedding);
    assert_int_equal(ecg_trace_len(trace), sig->n);
    assert_true(ecg_trace_bytes(trace) >= sig->n * sizeof(float));
    assert_true(result->n_beats > 1500);

    /* the embedding kept is the analysis's own */
    if (ecg_engine_analyze_embed(engine, sig, &plain, &plain_embedding, &err) != ECG_OK)
        fail_msg("analyze_embed: %s", err.message);
    assert_int_equal(plain->n_beats, result->n_beats);
    assert_memory_equal(plain->r_peak, result->r_peak, result->n_beats * sizeof(int64_t));
    size_t beat_len = ecg_engine_params(engine)->beat_len;
    assert_memory_equal(plain_embedding, embedding, result->n_beats * beat_len * sizeof(float));

    /* reductions against the reference on the file's samples */
    struct ecg_minmax *got = malloc(100000 * sizeof *got);
    struct ecg_minmax *want = malloc(100000 * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t start = (size_t)(cases[c].start_frac * (double)sig->n) + cases[c].extra_start;
        size_t end = (size_t)(cases[c].end_frac * (double)sig->n) + cases[c].extra_end;
        if (end > sig->n)
            end = sig->n;
        size_t n_out = 0;
        if (ecg_trace_minmax(trace, start, end, cases[c].buckets, got, &n_out, &err) != ECG_OK)
            fail_msg("minmax [%zu, %zu) / %zu: %s", start, end, cases[c].buckets, err.message);
        size_t n_want = naive_minmax(sig->samples, start, end, cases[c].buckets, want);
        assert_int_equal(n_out, n_want);
        assert_int_equal(n_out, cases[c].buckets < end - start ? cases[c].buckets : end - start);
        assert_same_minmax(got, want, n_out);
    }
    /* the definition, on a hand-made case: ties go to the first sample */
    const float x[] = {1, 3, 3, -2, -2, 0, 5};
    assert_int_equal(ecg_minmax(x, 0, 7, 2, want), 2);
    assert_int_equal(want[0].i_min, 0); /* bucket [0, 3) */
    assert_int_equal(want[0].i_max, 1);
    assert_int_equal(want[1].i_min, 3); /* bucket [3, 7) */
    assert_int_equal(want[1].i_max, 6);

    /* windows read back */
    float window[512];
    assert_int_equal(ecg_trace_read(trace, sig->n - 512, 512, window, &err), ECG_OK);
    assert_memory_equal(window, sig->samples + sig->n - 512, sizeof window);
    assert_int_equal(ecg_trace_read(trace, 1000, 0, window, &err), ECG_OK);
    /* range errors */
    size_t n_out = 0;
    assert_int_equal(ecg_trace_read(trace, sig->n - 10, 11, window, &err), ECG_ERR_ARG);
    assert_int_equal(ecg_trace_minmax(trace, 10, 10, 5, got, &n_out, &err), ECG_ERR_ARG);
    assert_int_equal(ecg_trace_minmax(trace, 0, sig->n + 1, 5, got, &n_out, &err), ECG_ERR_ARG);
    assert_int_equal(ecg_trace_minmax(trace, 0, 10, 0, got, &n_out, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_range");

    free(got);
    free(want);
    free(embedding);
    free(plain_embedding);
    ecg_trace_free(trace);
    ecg_trace_free(NULL);
    ecg_result_free(result);
    ecg_result_free(plain);
}

static void run_backend(enum ecg_backend_kind kind)
{
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    /* the bundled model (run from the repository root; ECG_GPU_MODEL overrides) */
    const char *model_path = getenv("ECG_GPU_MODEL");
    struct ecg_model *model =
        ecg_model_load(model_path && *model_path ? model_path : "models/default.ecgm", &err);
    struct ecg_engine_config config = {.backend = kind, .device = -1, .model = model};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine) {
        ecg_model_free(model);
        printf("# SKIP: no %s engine: %s\n", ecg_backend_kind_name(kind), err.message);
        skip();
    }
    printf("# %s on %s, %s\n", ecg_engine_backend(engine), ecg_engine_device(engine),
           model ? "with the bundled model" : "signal only");
    read_record(&sig);
    check_engine(engine, &sig);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
    ecg_model_free(model);
}

static void test_cpu_trace(void **state)
{
    (void)state;
    run_backend(ECG_BACKEND_CPU);
}

static void test_cuda_trace(void **state)
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
        cmocka_unit_test(test_minmax_reference),
        cmocka_unit_test(test_cpu_trace),
        cmocka_unit_test(test_cuda_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
