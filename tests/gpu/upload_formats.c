/*
 * upload_formats.c - test_gpu_upload: CSV, float32, sniffed, .npy and EDF+ bodies
 * streamed and analysed like their bytes; what upload_begin refuses; uploads cancelled midway;
 * bodies the device parser declines (the host reader's error, word for word).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <edflib.h>
#include <unistd.h>

#include "reader_fixtures.h"

#include "upload.h"

#include "backend.h"
#include "ecg.h"

/*
 * The recording as an EDF+ body (EDFlib writes it to a temporary file, read back as bytes): one
 * signal "MLII" in mV, whole 1 s records (the tail of the last second is dropped), 16-bit
 * digital values over +-(the largest |sample|). Returns a malloc'd body; *len its size.
 */
static char *edf_body(const struct fixture *fx, size_t *len)
{
    char path[] = "/tmp/ecg-upload-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const int fs = (int)fx->fs_hz;
    const size_t records = fx->n / (size_t)fs;
    double peak = 0.0;
    for (size_t i = 0; i < records * (size_t)fs; i++)
        peak = fmax(peak, fabs((double)fx->samples[i]));
    peak = ceil(peak + 1.0);
    int h = edfopen_file_writeonly(path, EDFLIB_FILETYPE_EDFPLUS, 1);
    assert_true(h >= 0);
    assert_int_equal(edf_set_samplefrequency(h, 0, fs), 0);
    assert_int_equal(edf_set_digital_maximum(h, 0, 32767), 0);
    assert_int_equal(edf_set_digital_minimum(h, 0, -32767), 0);
    assert_int_equal(edf_set_physical_maximum(h, 0, peak), 0);
    assert_int_equal(edf_set_physical_minimum(h, 0, -peak), 0);
    assert_int_equal(edf_set_label(h, 0, "MLII"), 0);
    assert_int_equal(edf_set_physical_dimension(h, 0, "mV"), 0);
    int *digital = malloc((size_t)fs * sizeof *digital);
    assert_non_null(digital);
    for (size_t r = 0; r < records; r++) {
        for (int i = 0; i < fs; i++)
            digital[i] = (int)lrint(fx->samples[r * (size_t)fs + (size_t)i] / peak * 32767.0);
        assert_int_equal(edfwrite_digital_samples(h, digital), 0);
    }
    free(digital);
    assert_int_equal(edfclose_file(h), 0);
    char *body = load_file(path, len);
    unlink(path);
    return body;
}

void test_upload_csv_and_f32(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct refs r;
    refs_open(fx, 1, 0, &r);
    struct ecg_read_opts autodetect = {.format = ECG_FORMAT_AUTO, .fs_hz = fx->fs_hz};
    printf("# bodies: CSV %.1f MB, float32 %.1f MB\n", (double)fx->csv_len / 1e6,
           (double)r.f32_len / 1e6);
    stream_and_check(r.engine, fx->csv, fx->csv_len, fx->csv_len, &r.csv, ECG_FORMAT_CSV, r.ref_csv,
                     "csv");
    stream_and_check(r.engine, fx->samples, r.f32_len, r.f32_len, &r.f32, ECG_FORMAT_F32, r.ref_f32,
                     "f32");
    stream_and_check(r.engine, fx->csv, fx->csv_len, fx->csv_len, &autodetect, ECG_FORMAT_AUTO,
                     r.ref_csv, "auto (csv)");
    /* the float32 samples as a 1-D .npy (v1.0 header padded to 128 bytes): same beats */
    struct ecg_read_opts npy = {.format = ECG_FORMAT_NPY, .fs_hz = fx->fs_hz};
    char header[128];
    int hl = snprintf(header + 10, sizeof header - 10,
                      "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", fx->n);
    assert_true(hl > 0 && hl < 117);
    memcpy(header, "\x93NUMPY\x01\x00\x76\x00", 10);
    memset(header + 10 + hl, ' ', (size_t)(127 - 10 - hl));
    header[127] = '\n';
    size_t npy_len = sizeof header + r.f32_len;
    char *npy_body = malloc(npy_len);
    assert_non_null(npy_body);
    memcpy(npy_body, header, sizeof header);
    memcpy(npy_body + sizeof header, fx->samples, r.f32_len);
    struct ecg_result *ref_npy = analyze_reference(r.engine, fx->tiles, npy_body, npy_len, &npy);
    assert_same_result(r.ref_f32, ref_npy, "npy reference against f32");
    stream_and_check(r.engine, npy_body, npy_len, npy_len, &npy, ECG_FORMAT_NPY, ref_npy, "npy");
    free(npy_body);
    ecg_result_free(ref_npy);
    /* and as an EDF+ body (rate and lead from the file) */
    struct ecg_read_opts edf = {.format = ECG_FORMAT_EDF};
    size_t edf_len = 0;
    char *edf_bytes = edf_body(fx, &edf_len);
    struct ecg_result *ref_edf = analyze_reference(r.engine, fx->tiles, edf_bytes, edf_len, &edf);
    stream_and_check(r.engine, edf_bytes, edf_len, edf_len, &edf, ECG_FORMAT_EDF, ref_edf, "edf");
    free(edf_bytes);
    ecg_result_free(ref_edf);
    refs_close(&r);
}

/* What begin refuses, with nothing to undo; the bytes still analyse. */
void test_upload_refusals(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct ecg_engine *engine = engine_open(fx, 1, 0);
    size_t big = 2 * MIB;
    /* under the 1 MiB threshold (and then not pinned either) */
    char *small = ecg_engine_host_alloc(engine, MIB - 1);
    assert_non_null(small);
    assert_null(ecg_engine_upload_begin(engine, small, MIB - 1, ECG_FORMAT_F32));
    ecg_engine_host_free(engine, small);
    /* pageable memory: a copy from it would block the caller */
    char *pageable = malloc(big);
    assert_non_null(pageable);
    assert_null(ecg_engine_upload_begin(engine, pageable, big, ECG_FORMAT_F32));
    free(pageable);
    /* formats the device does not parse */
    char *host = ecg_engine_host_alloc(engine, big);
    assert_non_null(host);
    static const enum ecg_format host_only[] = {ECG_FORMAT_JSON, ECG_FORMAT_WFDB};
    for (size_t i = 0; i < sizeof host_only / sizeof host_only[0]; i++)
        assert_null(ecg_engine_upload_begin(engine, host, big, host_only[i]));
    /* while the same pinned buffer in a format the device parses streams */
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, big, ECG_FORMAT_I16);
    assert_non_null(up);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
    ecg_engine_destroy(engine);
}

/* Uploads freed before their analysis (a client gone, a 413 midway) leave the engine, the
 * buffer and later uploads working. */
void test_upload_cancel(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct ecg_engine *engine = engine_open(fx, 1, 0);
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    size_t len = fx->n * sizeof(float);
    struct ecg_result *ref = analyze_reference(engine, fx->tiles, fx->samples, len, &f32);
    char *host = ecg_engine_host_alloc(engine, len);
    assert_non_null(host);

    /* begun, never fed */
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_F32);
    assert_non_null(up);
    ecg_upload_free(up);
    /* fed halfway (copies in flight when freed), then the buffer is overwritten at once */
    up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_F32);
    assert_non_null(up);
    arrive(up, host, fx->samples, len / 2, 1);
    ecg_upload_free(up);
    memset(host, 0xff, len); /* NaN everywhere: any late copy would poison the next upload */
    /* fed completely, never analysed */
    up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_F32);
    assert_non_null(up);
    arrive(up, host, fx->samples, len, 2);
    ecg_upload_free(up);
    memset(host, 0xff, len);

    /* the engine still answers, from plain bytes and from a new upload in the same buffer */
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    if (ecg_engine_analyze_bytes(engine, fx->samples, len, &f32, &result, &err) != ECG_OK)
        fail_msg("analyze_bytes after cancels: %s", err.message);
    assert_same_result(ref, result, "analyze_bytes after cancels");
    ecg_result_free(result);
    result = NULL;
    up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_F32);
    assert_non_null(up);
    arrive(up, host, fx->samples, len, 3);
    if (ecg_engine_analyze_upload(engine, up, len, &f32, &result, &err) != ECG_OK)
        fail_msg("analyze_upload after cancels: %s", err.message);
    assert_true(ecg_upload_used_device(up));
    assert_same_result(ref, result, "analyze_upload after cancels");
    ecg_result_free(result);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
    ecg_result_free(ref);
    ecg_engine_destroy(engine);
}

/* Streams bytes and expects the error analyze_bytes reports for them, word for word. */
static void expect_same_error(struct ecg_engine *engine, const char *bytes, size_t len,
                              const struct ecg_read_opts *opts, const char *what)
{
    struct ecg_error want = {0}, got = {0};
    struct ecg_result *result = NULL;
    enum ecg_status want_status = ecg_engine_analyze_bytes(engine, bytes, len, opts, &result,
                                                           &want);
    assert_null(result);
    if (want_status == ECG_OK)
        fail_msg("%s: analyze_bytes accepted the body", what);
    char *host = ecg_engine_host_alloc(engine, len);
    assert_non_null(host);
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, len, opts->format);
    assert_non_null(up);
    arrive(up, host, bytes, len, 4);
    enum ecg_status got_status = ecg_engine_analyze_upload(engine, up, len, opts, &result,
                                                           &got);
    assert_null(result);
    assert_false(ecg_upload_used_device(up));
    if (got_status != want_status || strcmp(got.code, want.code) != 0 ||
        strcmp(got.message, want.message) != 0)
        fail_msg("%s: streamed: %s %s \"%s\"; host bytes: %s %s \"%s\"", what,
                 ecg_status_str(got_status), got.code, got.message, ecg_status_str(want_status),
                 want.code, want.message);
    printf("# %s: %s (%s)\n", what, got.message, got.code);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
}

/* Bodies the device parser declines: the host reader decides, from the host bytes. */
void test_upload_device_parser_declines(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct ecg_engine *engine = engine_open(fx, 1, 0);
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    char *bad = malloc(fx->csv_len);
    assert_non_null(bad);
    memcpy(bad, fx->csv, fx->csv_len);
    /* a word on a line past the first copy steps */
    char *line = memchr(bad + fx->csv_len / 2, '\n', fx->csv_len / 2);
    assert_non_null(line);
    memcpy(line + 1, "abc", 3);
    expect_same_error(engine, bad, fx->csv_len, &csv, "csv with \"abc\" midway");
    /* a column the rows do not have */
    struct ecg_read_opts column = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz, .lead = "3"};
    expect_same_error(engine, fx->csv, fx->csv_len, &column, "csv lead 3 of 1 column");
    /* no rate */
    struct ecg_read_opts no_rate = {.format = ECG_FORMAT_F32};
    expect_same_error(engine, (const char *)fx->samples, fx->n * sizeof(float), &no_rate,
                      "f32 without fs");
    /* a NaN sample (the CSV buffer is larger than the float32 body) */
    memcpy(bad, fx->samples, fx->n * sizeof(float));
    ((float *)bad)[fx->n / 2 + 3] = 0.0f / 0.0f;
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    expect_same_error(engine, bad, fx->n * sizeof(float), &f32, "f32 with a NaN");
    free(bad);
    ecg_engine_destroy(engine);
}
