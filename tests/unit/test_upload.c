/*
 * test_upload.c - the streaming-upload API (ecg.h: ecg_engine_upload_begin and friends) where
 * there is no device: the CPU backend streams nothing, so begin returns NULL (also for a buffer
 * whose capacity exceeds the data, as a chunked body has) and the caller's fallback,
 * ecg_engine_analyze_bytes, gives the analysis of the same bytes read on the host, whatever
 * lies in the buffer past them; NULL uploads are accepted where documented and refused where
 * not; and the metric the service keeps for streamed bodies. The device side (the final length
 * checked against the capacity included) is tests/gpu/test_gpu_upload.c.
 * Data: tests/data/mitdb_100s.csv (100 s of MIT-BIH, 360 Hz, leads MLII and V1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../service/metrics.h"
#include "reader_fixtures.h"
#include "ecg.h"

#define CSV_PATH ECG_TEST_DATA "/mitdb_100s.csv"

/* An engine on the CPU backend, without a model. */
static struct ecg_engine *cpu_engine(void)
{
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("cpu engine: %s", err.message);
    return engine;
}

static void assert_same_result(const struct ecg_result *a, const struct ecg_result *b)
{
    assert_int_equal(a->n_beats, b->n_beats);
    assert_int_equal(a->n_samples, b->n_samples);
    size_t k = a->n_beats;
    assert_memory_equal(a->r_peak, b->r_peak, k * sizeof *a->r_peak);
    assert_memory_equal(a->onset, b->onset, k * sizeof *a->onset);
    assert_memory_equal(a->end, b->end, k * sizeof *a->end);
    assert_memory_equal(a->rr_ms, b->rr_ms, k * sizeof *a->rr_ms);
    assert_memory_equal(a->likeness, b->likeness, k * sizeof *a->likeness);
    assert_memory_equal(a->crest, b->crest, k * sizeof *a->crest);
    assert_memory_equal(a->kept, b->kept, k * sizeof *a->kept);
}

/* The CPU backend has no upload: begin says so (NULL, for every format and size), and the bytes,
 * in the engine's host memory and grown past the 1 MiB threshold of the CUDA backend, analyse as
 * the signal read from them does. */
static void test_cpu_upload_begin_returns_null(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_engine *engine = cpu_engine();
    size_t csv_len = 0;
    char *csv = load_file(CSV_PATH, &csv_len);
    /* the file, then its rows twice more (> 1 MiB, 300 s): one CSV with one header */
    const char *rows = memchr(csv, '\n', csv_len);
    assert_non_null(rows);
    rows++;
    size_t rows_len = csv_len - (size_t)(rows - csv);
    size_t len = csv_len + 2 * rows_len;
    assert_true(len > (1u << 20));
    char *body = ecg_engine_host_alloc(engine, len);
    assert_non_null(body);
    memcpy(body, csv, csv_len);
    memcpy(body + csv_len, rows, rows_len);
    memcpy(body + csv_len + rows_len, rows, rows_len);

    static const enum ecg_format formats[] = {ECG_FORMAT_AUTO, ECG_FORMAT_CSV, ECG_FORMAT_F32,
                                              ECG_FORMAT_F64,  ECG_FORMAT_I16, ECG_FORMAT_NPY,
                                              ECG_FORMAT_JSON};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        assert_null(ecg_engine_upload_begin(engine, body, len, formats[i]));
        assert_null(ecg_engine_upload_begin(engine, body, 1, formats[i]));
    }
    assert_null(ecg_engine_upload_begin(engine, NULL, len, ECG_FORMAT_CSV));
    assert_null(ecg_engine_upload_begin(engine, body, 0, ECG_FORMAT_CSV));
    assert_null(ecg_engine_upload_begin(NULL, body, len, ECG_FORMAT_CSV));

    /* the caller's fallback */
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = "MLII"};
    struct ecg_result *from_bytes = NULL, *from_signal = NULL;
    if (ecg_engine_analyze_bytes(engine, body, len, &opts, &from_bytes, &err) != ECG_OK)
        fail_msg("analyze_bytes: %s", err.message);
    struct ecg_signal sig = {0};
    if (ecg_read_memory(body, len, &opts, &sig, &err) != ECG_OK)
        fail_msg("read_memory: %s", err.message);
    assert_int_equal(sig.n, 3 * 36000);
    if (ecg_engine_analyze(engine, &sig, &from_signal, &err) != ECG_OK)
        fail_msg("analyze: %s", err.message);
    assert_same_result(from_bytes, from_signal);
    /* 174 beats in the file's 100 s (ecgd analyze), three times over, give or take a seam */
    assert_in_range(from_bytes->n_beats, 3 * 174 - 6, 3 * 174 + 6);
    assert_string_equal(from_bytes->lead, "MLII");

    ecg_result_free(from_bytes);
    ecg_result_free(from_signal);
    ecg_signal_free(&sig);
    ecg_engine_host_free(engine, body);
    free(csv);
    ecg_engine_destroy(engine);
}

/* A chunked body: the buffer's capacity (past the 1 MiB threshold of the CUDA backend, and more
 * than the data, as the service's doubling leaves it) is what begin gets. The CPU backend still
 * streams nothing, and the fallback analyses exactly [0, len): bytes past len (garbage that
 * would fail the CSV reader) are never read. */
static void test_cpu_upload_begin_with_capacity(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_engine *engine = cpu_engine();
    size_t len = 0;
    char *csv = load_file(CSV_PATH, &len);
    size_t cap = 3 * len;
    assert_true(cap > (1u << 20));
    char *body = ecg_engine_host_alloc(engine, cap);
    assert_non_null(body);
    memcpy(body, csv, len);
    memset(body + len, 'x', cap - len);

    static const enum ecg_format formats[] = {ECG_FORMAT_AUTO, ECG_FORMAT_CSV, ECG_FORMAT_F32,
                                              ECG_FORMAT_I16};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        assert_null(ecg_engine_upload_begin(engine, body, cap, formats[i]));

    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = "V1"};
    struct ecg_result *in_buffer = NULL, *exact = NULL;
    if (ecg_engine_analyze_bytes(engine, body, len, &opts, &in_buffer, &err) != ECG_OK)
        fail_msg("analyze_bytes of [0, len) in a larger buffer: %s", err.message);
    if (ecg_engine_analyze_bytes(engine, csv, len, &opts, &exact, &err) != ECG_OK)
        fail_msg("analyze_bytes: %s", err.message);
    assert_same_result(in_buffer, exact);
    assert_int_equal(in_buffer->n_samples, 36000);
    assert_string_equal(in_buffer->lead, "V1");
    /* and the whole buffer is refused, so the tail really is garbage to the reader */
    struct ecg_result *whole = NULL;
    assert_int_equal(ecg_engine_analyze_bytes(engine, body, cap, &opts, &whole, &err),
                     ECG_ERR_FORMAT);
    assert_null(whole);

    ecg_result_free(in_buffer);
    ecg_result_free(exact);
    ecg_engine_host_free(engine, body);
    free(csv);
    ecg_engine_destroy(engine);
}

/* NULL uploads: free and progress accept them, analyze refuses them (whatever the length),
 * used_device says false. */
static void test_null_upload(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_engine *engine = cpu_engine();
    ecg_upload_free(NULL);
    ecg_upload_progress(NULL, 123);
    assert_false(ecg_upload_used_device(NULL));
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0};
    struct ecg_result *result = (struct ecg_result *)&opts; /* must come back NULL */
    assert_int_equal(ecg_engine_analyze_upload(engine, NULL, 1000, &opts, &result, &err),
                     ECG_ERR_ARG);
    assert_null(result);
    assert_string_equal(err.code, "bad_argument");
    assert_non_null(strstr(err.message, "NULL upload"));
    result = (struct ecg_result *)&opts;
    memset(&err, 0, sizeof err);
    assert_int_equal(ecg_engine_analyze_upload(engine, NULL, 0, NULL, &result, &err),
                     ECG_ERR_ARG);
    assert_null(result);
    assert_string_equal(err.code, "bad_argument");
    ecg_engine_destroy(engine);
}

/* The service's counter of streamed bodies: 0 until recorded, then counted. */
static void test_metric_uploads_streamed(void **state)
{
    (void)state;
    struct svc_metrics metrics;
    struct svc_metrics_gauges gauges = {.backend = "cpu", .device = "cpu"};
    struct ecg_buf text = {0};
    svc_metrics_init(&metrics);
    svc_metrics_render(&metrics, &gauges, &text);
    assert_false(text.failed);
    assert_non_null(strstr(text.data, "# TYPE ecgd_uploads_streamed_total counter\n"));
    assert_non_null(strstr(text.data, "\necgd_uploads_streamed_total 0\n"));
    ecg_buf_fini(&text);
    svc_metrics_upload_streamed(&metrics);
    svc_metrics_upload_streamed(&metrics);
    svc_metrics_render(&metrics, &gauges, &text);
    assert_non_null(strstr(text.data, "\necgd_uploads_streamed_total 2\n"));
    ecg_buf_fini(&text);
    svc_metrics_fini(&metrics);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_upload_begin_returns_null),
        cmocka_unit_test(test_cpu_upload_begin_with_capacity),
        cmocka_unit_test(test_null_upload),
        cmocka_unit_test(test_metric_uploads_streamed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
