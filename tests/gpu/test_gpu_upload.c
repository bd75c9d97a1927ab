/*
 * test_gpu_upload.c - streaming uploads on the CUDA backend (ecg.h: ecg_engine_upload_begin,
 * ecg_upload_progress, ecg_engine_analyze_upload, ecg_upload_free; gpu/cuda_upload.cu): a body
 * copied to the device in uneven steps while it "arrives" analyses exactly as
 * ecg_engine_analyze_bytes() analyses the same bytes (every beat column, latent, score and
 * outlier flag compared bit for bit), and the copy was really used (ecg_upload_used_device).
 * Also: what begin refuses (small, not pinned, formats the device does not parse), uploads
 * cancelled midway, a body the device parser declines (the host reader's error, word for word),
 * chunked bodies (begun with the buffer's capacity, twice the body, analysed with the final
 * length; a length past the capacity refused; and the service's growth path: the upload freed
 * and begun again on a larger buffer each time the body outgrows its buffer), several uploads at
 * once, four threads on an engine of two workers, and device memory that neither leaks nor grows
 * by more than the body.
 *
 * ECG_GPU_QUICK=1 (for compute-sanitizer) leaves out the last three tests (several at once,
 * threads, memory) and uses the record once.
 * The recording is MIT-BIH record 101 four times over (2.6 M samples at 360 Hz: ~27 MB of CSV,
 * 10 MB of float32), analysed with the shipped model (models/default.ecgm, read from the
 * repository root). Skips visibly where the build has no CUDA backend or the machine no device.
 * Data: ECG_GPU_DATA (a directory holding mitdb/) overrides ECG_SHARED_DATA.
 */
#include <pthread.h>
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

#include "reader_fixtures.h"
#include <math.h>
#include <unistd.h>

#include "backend.h"
#include "ecg.h"
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

#define MODEL_PATH "models/default.ecgm"
#define MIB ((size_t)1 << 20)

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

static bool quick_mode(void)
{
    const char *quick = getenv("ECG_GPU_QUICK");
    return quick && *quick && strcmp(quick, "0") != 0;
}

/* Uneven arrival: these step sizes in turn, so that copies start on odd offsets, some steps
 * stay under the backend's 4 MiB batch and some cross several. */
static const size_t arrival_steps[] = {64 << 10, 3 * MIB, 1, 5 * MIB + 3, 700 << 10, 4 * MIB, 17};

static int group_setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct ecg_error err = {0};
    if (!fx)
        return -1;
    *state = fx;
    if (!ecg_cuda_backend_ops()) {
        snprintf(fx->why, sizeof fx->why, "this build has no CUDA backend");
        return 0;
    }
    struct ecg_engine_config probe = {.backend = ECG_BACKEND_CUDA, .device = -1};
    struct ecg_engine *engine = ecg_engine_create(&probe, &err);
    if (!engine) {
        snprintf(fx->why, sizeof fx->why, "no CUDA engine: %s", err.message);
        return 0;
    }
    printf("# cuda on %s\n", ecg_engine_device(engine));
    ecg_engine_destroy(engine);

    fx->model = ecg_model_load(MODEL_PATH, &err);
    if (!fx->model) {
        fprintf(stderr, "%s: %s\n", MODEL_PATH, err.message);
        return -1;
    }
    char path[512];
    const char *dir = getenv("ECG_GPU_DATA");
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    struct ecg_signal sig = {0};
    snprintf(path, sizeof path, "%s/mitdb/101", dir && *dir ? dir : ECG_SHARED_DATA);
    if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK) {
        fprintf(stderr, "%s: %s\n", path, err.message);
        return -1;
    }
    fx->fs_hz = sig.fs_hz;
    fx->tiles = quick_mode() ? 1 : 4;
    fx->n = fx->tiles * sig.n;
    fx->samples = malloc(fx->n * sizeof *fx->samples);
    if (!fx->samples)
        return -1;
    for (size_t t = 0; t < fx->tiles; t++)
        memcpy(fx->samples + t * sig.n, sig.samples, sig.n * sizeof *sig.samples);
    struct ecg_buf text = {0};
    for (size_t i = 0; i < fx->n; i++)
        ecg_buf_printf(&text, "%.9g\n", fx->samples[i]);
    ecg_signal_free(&sig);
    if (text.failed)
        return -1;
    fx->csv = text.data;
    fx->csv_len = text.len;
    fx->ready = true;
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *fx = *state;
    if (fx) {
        ecg_model_free(fx->model);
        free(fx->csv);
        free(fx->samples);
        free(fx);
    }
    return 0;
}

/* The fixture, or a visible skip. */
static struct fixture *fixture_or_skip(void **state)
{
    struct fixture *fx = *state;
    if (!fx->ready) {
        printf("# SKIP: %s\n", fx->why);
        skip();
    }
    return fx;
}

/* ECG_GPU_QUICK=1 (under compute-sanitizer) leaves out the long tests. */
static void skip_if_quick(void)
{
    if (quick_mode()) {
        printf("# SKIP: ECG_GPU_QUICK set\n");
        skip();
    }
}

static struct ecg_engine *engine_open(const struct fixture *fx, unsigned workers, int device)
{
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = fx->model,
                                       .workers = workers, .device = device};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("cuda engine (%u workers, device %d): %s", workers, device, err.message);
    return engine;
}

/* True when a and b agree bit for bit; says where they differ into why otherwise. */
static bool same_result(const struct ecg_result *a, const struct ecg_result *b, char *why,
                        size_t why_len)
{
    size_t k = a->n_beats;
#define DIFF(cond, ...)                                                                         \
    do {                                                                                        \
        if (cond) {                                                                             \
            snprintf(why, why_len, __VA_ARGS__);                                                \
            return false;                                                                       \
        }                                                                                       \
    } while (0)
    DIFF(a->n_beats != b->n_beats, "beats %zu vs %zu", a->n_beats, b->n_beats);
    DIFF(a->n_samples != b->n_samples, "samples %zu vs %zu", a->n_samples, b->n_samples);
    DIFF(a->fs_hz != b->fs_hz || strcmp(a->lead, b->lead) != 0, "rate or lead");
    DIFF(memcmp(a->r_peak, b->r_peak, k * sizeof *a->r_peak) != 0, "r_peak");
    DIFF(memcmp(a->onset, b->onset, k * sizeof *a->onset) != 0, "onset");
    DIFF(memcmp(a->end, b->end, k * sizeof *a->end) != 0, "end");
    DIFF(memcmp(a->rr_ms, b->rr_ms, k * sizeof *a->rr_ms) != 0, "rr_ms");
    DIFF(memcmp(a->kept, b->kept, k * sizeof *a->kept) != 0, "kept");
    DIFF(!a->latent != !b->latent || a->latent_dim != b->latent_dim, "latent presence");
    if (a->latent) {
        DIFF(memcmp(a->latent, b->latent, k * a->latent_dim * sizeof *a->latent) != 0, "latent");
        DIFF(memcmp(a->score, b->score, k * sizeof *a->score) != 0, "score");
        DIFF(memcmp(a->outlier, b->outlier, k * sizeof *a->outlier) != 0, "outlier");
    }
#undef DIFF
    return true;
}

static void assert_same_result(const struct ecg_result *a, const struct ecg_result *b,
                               const char *what)
{
    char why[128];
    if (!same_result(a, b, why, sizeof why))
        fail_msg("%s: results differ: %s", what, why);
}

/* The reference: ecg_engine_analyze_bytes of the bytes in plain malloc'd memory. */
static struct ecg_result *analyze_reference(struct ecg_engine *engine, size_t tiles,
                                            const void *bytes, size_t len,
                                            const struct ecg_read_opts *opts)
{
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    char *copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, bytes, len);
    if (ecg_engine_analyze_bytes(engine, copy, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s reference: %s", ecg_format_name(opts->format), err.message);
    free(copy);
    /* record 101: 1,865 beats in 30 min, tiles times over */
    assert_in_range(result->n_beats, tiles * 1800, tiles * 1900);
    assert_non_null(result->latent);
    return result;
}

/* A test's engine and the fixture's CSV and float32 bodies analysed from plain memory by it:
 * the references streamed analyses must equal. */
struct refs {
    struct ecg_engine *engine;
    struct ecg_read_opts csv, f32;
    size_t f32_len;
    struct ecg_result *ref_csv, *ref_f32;
};

static void refs_open(const struct fixture *fx, unsigned workers, int device, struct refs *r)
{
    r->engine = engine_open(fx, workers, device);
    r->csv = (struct ecg_read_opts){.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    r->f32 = (struct ecg_read_opts){.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    r->f32_len = fx->n * sizeof(float);
    r->ref_csv = analyze_reference(r->engine, fx->tiles, fx->csv, fx->csv_len, &r->csv);
    r->ref_f32 = analyze_reference(r->engine, fx->tiles, fx->samples, r->f32_len, &r->f32);
}

static void refs_close(struct refs *r)
{
    ecg_result_free(r->ref_csv);
    ecg_result_free(r->ref_f32);
    ecg_engine_destroy(r->engine);
}

/* Copies src into host (an ecg_engine_host_alloc buffer) in arrival_steps, reporting each step
 * to up (which may be NULL), starting with step index first_step. */
static void arrive(struct ecg_upload *up, char *host, const void *src, size_t len,
                   size_t first_step)
{
    size_t filled = 0;
    for (size_t s = first_step; filled < len; s++) {
        size_t step = arrival_steps[s % (sizeof arrival_steps / sizeof arrival_steps[0])];
        if (step > len - filled)
            step = len - filled;
        memcpy(host + filled, (const char *)src + filled, step);
        filled += step;
        ecg_upload_progress(up, filled);
    }
}

/* One body of len bytes through the whole streaming path, in a buffer of cap >= len bytes (cap >
 * len: a chunked body, whose buffer's tail holds bytes no reader may take: 0xff, a NaN as float32
 * and a control byte in CSV), checked against ref; used_device asserted. With cap > len, also a
 * length past the capacity: refused, and the device copy left for the real analysis. */
static void stream_and_check(struct ecg_engine *engine, const void *bytes, size_t len,
                             size_t cap, const struct ecg_read_opts *opts,
                             enum ecg_format begin_format, const struct ecg_result *ref,
                             const char *what)
{
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    assert_true(cap >= len);
    char *host = ecg_engine_host_alloc(engine, cap);
    assert_non_null(host);
    memset(host + len, 0xff, cap - len);
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, cap, begin_format);
    if (!up)
        fail_msg("%s: upload_begin refused a pinned buffer of %zu bytes", what, cap);
    assert_false(ecg_upload_used_device(up));
    arrive(up, host, bytes, len, 0);
    if (cap > len) {
        result = (struct ecg_result *)host; /* must come back NULL */
        assert_int_equal(ecg_engine_analyze_upload(engine, up, cap + 1, opts, &result, &err),
                         ECG_ERR_ARG);
        assert_null(result);
        assert_string_equal(err.code, "bad_argument");
        assert_non_null(strstr(err.message, "capacity"));
        assert_false(ecg_upload_used_device(up));
        memset(&err, 0, sizeof err);
    }
    if (ecg_engine_analyze_upload(engine, up, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s: analyze_upload: %s", what, err.message);
    if (!ecg_upload_used_device(up))
        fail_msg("%s: the analysis did not read the device copy", what);
    assert_same_result(ref, result, what);
    ecg_result_free(result);
    result = NULL;
    /* the device copy is consumed: a second analysis reads the host bytes, same answer */
    if (ecg_engine_analyze_upload(engine, up, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s: second analyze_upload: %s", what, err.message);
    assert_false(ecg_upload_used_device(up));
    assert_same_result(ref, result, what);
    ecg_result_free(result);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
}

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

static void test_upload_csv_and_f32(void **state)
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
static void test_upload_refusals(void **state)
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
static void test_upload_cancel(void **state)
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
static void test_upload_device_parser_declines(void **state)
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

/* A chunked body: the upload begun with its buffer's capacity, twice the body (the most the
 * service's doubling leaves), fed in uneven steps up to the body's length, which only the
 * analysis learns; the tail of the last 4 MiB batch is pushed there. Same results as
 * analyze_bytes, read from the device copy; a length past the capacity is refused. */
static void test_upload_chunked_capacity(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct refs r;
    refs_open(fx, 1, 0, &r);
    /* neither length is a multiple of the 4 MiB batch: a tail is left for the analysis */
    assert_true(fx->csv_len % (4 * MIB) != 0 && r.f32_len % (4 * MIB) != 0);
    stream_and_check(r.engine, fx->csv, fx->csv_len, 2 * fx->csv_len, &r.csv, ECG_FORMAT_CSV,
                     r.ref_csv, "chunked csv");
    stream_and_check(r.engine, fx->samples, r.f32_len, 2 * r.f32_len, &r.f32, ECG_FORMAT_F32,
                     r.ref_f32, "chunked f32");
    /* a buffer just one byte larger than the body: progress never sees it full */
    stream_and_check(r.engine, fx->samples, r.f32_len, r.f32_len + 1, &r.f32, ECG_FORMAT_F32,
                     r.ref_f32, "f32 in a buffer 1 byte larger");
    refs_close(&r);
}

/*
 * The service's growth path for a chunked body (service/server.c, request_body): the body
 * arrives in uneven steps into a buffer that starts at 1 MiB; whenever a step does not fit, the
 * upload is freed, a buffer twice as large is taken, the prefix copied into it, the old buffer
 * poisoned (the pool may hand it to anyone once the upload is freed) and released, and a new
 * upload begun on the new buffer with its capacity, the prefix reported at once. Returns the
 * number of uploads begun; the analysis must read the last one's device copy and equal ref.
 */
static unsigned stream_growing(struct ecg_engine *engine, const void *bytes, size_t len,
                               const struct ecg_read_opts *opts, const struct ecg_result *ref,
                               const char *what)
{
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    size_t cap = MIB, filled = 0;
    unsigned begun = 0;
    char *host = ecg_engine_host_alloc(engine, cap);
    assert_non_null(host);
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, cap, opts->format);
    if (!up)
        fail_msg("%s: upload_begin refused a pinned buffer of %zu bytes", what, cap);
    begun++;
    for (size_t s = 0; filled < len; s++) {
        size_t step = arrival_steps[s % (sizeof arrival_steps / sizeof arrival_steps[0])];
        if (step > len - filled)
            step = len - filled;
        if (step > cap - filled) {
            ecg_upload_free(up); /* first: its copies read the old buffer */
            size_t new_cap = cap;
            while (new_cap < filled + step)
                new_cap *= 2;
            char *grown = ecg_engine_host_alloc(engine, new_cap);
            assert_non_null(grown);
            memcpy(grown, host, filled);
            memset(host, 0xff, cap);
            ecg_engine_host_free(engine, host);
            host = grown;
            cap = new_cap;
            memset(host + filled, 0xff, cap - filled);
            up = ecg_engine_upload_begin(engine, host, cap, opts->format);
            if (!up)
                fail_msg("%s: upload_begin refused the grown buffer of %zu bytes", what, cap);
            begun++;
            ecg_upload_progress(up, filled);
        }
        memcpy(host + filled, (const char *)bytes + filled, step);
        filled += step;
        ecg_upload_progress(up, filled);
    }
    assert_true(cap >= len);
    if (ecg_engine_analyze_upload(engine, up, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s: analyze_upload: %s", what, err.message);
    if (!ecg_upload_used_device(up))
        fail_msg("%s: the analysis did not read the device copy", what);
    assert_same_result(ref, result, what);
    ecg_result_free(result);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
    printf("# %s: %zu bytes in a buffer of %zu, %u uploads begun\n", what, len, cap, begun);
    return begun;
}

static void test_upload_regrown(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct refs r;
    refs_open(fx, 1, 0, &r);
    /* from 1 MiB, with the 64 KiB then 3 MiB first steps: the CSV (over 5 MB even in quick
     * mode) grows to 4 then 16 MiB at least, the float32 body (2.6 MB in quick mode) to 4 MiB */
    assert_true(stream_growing(r.engine, fx->csv, fx->csv_len, &r.csv, r.ref_csv,
                               "grown csv") >= 3);
    assert_true(stream_growing(r.engine, fx->samples, r.f32_len, &r.f32, r.ref_f32,
                               "grown f32") >= 2);
    /* and the r.engine's next upload, in a buffer of the body's size, is unaffected */
    stream_and_check(r.engine, fx->samples, r.f32_len, r.f32_len, &r.f32, ECG_FORMAT_F32, r.ref_f32,
                     "f32 after growth");
    refs_close(&r);
}

/* Several uploads in flight on one engine, fed interleaved, analysed in another order. */
static void test_upload_several_at_once(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
    struct refs r;
    refs_open(fx, 2, 0, &r);
    enum { N_UP = 3 };
    const void *src[N_UP] = {fx->csv, fx->samples, fx->csv};
    size_t len[N_UP] = {fx->csv_len, r.f32_len, fx->csv_len};
    const struct ecg_read_opts *opts[N_UP] = {&r.csv, &r.f32, &r.csv};
    const struct ecg_result *ref[N_UP] = {r.ref_csv, r.ref_f32, r.ref_csv};
    char *host[N_UP];
    struct ecg_upload *up[N_UP];
    size_t filled[N_UP] = {0};
    for (int i = 0; i < N_UP; i++) {
        host[i] = ecg_engine_host_alloc(r.engine, len[i]);
        assert_non_null(host[i]);
        up[i] = ecg_engine_upload_begin(r.engine, host[i], len[i], opts[i]->format);
        assert_non_null(up[i]);
    }
    for (size_t s = 0;; s++) {
        bool more = false;
        for (int i = 0; i < N_UP; i++) {
            size_t step = arrival_steps[(s + (size_t)i) %
                                        (sizeof arrival_steps / sizeof arrival_steps[0])];
            if (step > len[i] - filled[i])
                step = len[i] - filled[i];
            memcpy(host[i] + filled[i], (const char *)src[i] + filled[i], step);
            filled[i] += step;
            ecg_upload_progress(up[i], filled[i]);
            more = more || filled[i] < len[i];
        }
        if (!more)
            break;
    }
    for (int i = N_UP - 1; i >= 0; i--) {
        struct ecg_error err = {0};
        struct ecg_result *result = NULL;
        if (ecg_engine_analyze_upload(r.engine, up[i], len[i], opts[i], &result, &err) != ECG_OK)
            fail_msg("upload %d: %s", i, err.message);
        assert_true(ecg_upload_used_device(up[i]));
        assert_same_result(ref[i], result, "several at once");
        ecg_result_free(result);
    }
    for (int i = 0; i < N_UP; i++) {
        ecg_upload_free(up[i]);
        ecg_engine_host_free(r.engine, host[i]);
    }
    refs_close(&r);
}

/* Four threads, each streaming and analysing bodies on an engine of two workers (every visible
 * device): the workers and the device's upload stream are contended. */
struct thread_arg {
    struct ecg_engine *engine;
    const struct fixture *fx;
    const struct ecg_result *ref_csv, *ref_f32;
    int index;
    int used_device;
    char failure[ECG_ERROR_MSG_LEN + 64];
};

static void *upload_thread(void *p)
{
    struct thread_arg *t = p;
    const struct fixture *fx = t->fx;
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    for (int round = 0; round < 3 && !t->failure[0]; round++) {
        bool is_csv = (round + t->index) % 2 == 0;
        const void *src = is_csv ? (const void *)fx->csv : (const void *)fx->samples;
        size_t len = is_csv ? fx->csv_len : fx->n * sizeof(float);
        const struct ecg_read_opts *opts = is_csv ? &csv : &f32;
        char *host = ecg_engine_host_alloc(t->engine, len);
        if (!host) {
            snprintf(t->failure, sizeof t->failure, "host_alloc");
            break;
        }
        struct ecg_upload *up = ecg_engine_upload_begin(t->engine, host, len, opts->format);
        if (!up) {
            snprintf(t->failure, sizeof t->failure, "round %d: upload_begin refused", round);
        } else {
            size_t filled = 0;
            for (size_t s = (size_t)t->index; filled < len; s++) {
                size_t step = arrival_steps[s % (sizeof arrival_steps / sizeof arrival_steps[0])];
                if (step > len - filled)
                    step = len - filled;
                memcpy(host + filled, (const char *)src + filled, step);
                filled += step;
                ecg_upload_progress(up, filled);
            }
            struct ecg_error err = {0};
            struct ecg_result *result = NULL;
            char why[128];
            if (ecg_engine_analyze_upload(t->engine, up, len, opts, &result, &err) != ECG_OK)
                snprintf(t->failure, sizeof t->failure, "round %d: %s", round, err.message);
            else if (!same_result(is_csv ? t->ref_csv : t->ref_f32, result, why, sizeof why))
                snprintf(t->failure, sizeof t->failure, "round %d (%s): %s", round,
                         is_csv ? "csv" : "f32", why);
            t->used_device += ecg_upload_used_device(up);
            ecg_result_free(result);
        }
        ecg_upload_free(up);
        ecg_engine_host_free(t->engine, host);
    }
    return NULL;
}

static void test_upload_threads(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
    struct ecg_engine *engine = engine_open(fx, 2, -1);
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    struct ecg_result *ref_csv =
        analyze_reference(engine, fx->tiles, fx->csv, fx->csv_len, &csv);
    struct ecg_result *ref_f32 =
        analyze_reference(engine, fx->tiles, fx->samples, fx->n * sizeof(float), &f32);
    enum { N_THREADS = 4 };
    struct thread_arg args[N_THREADS];
    pthread_t threads[N_THREADS];
    int used = 0;
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (struct thread_arg){.engine = engine, .fx = fx, .ref_csv = ref_csv,
                                      .ref_f32 = ref_f32, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, upload_thread, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        if (args[i].failure[0])
            fail_msg("thread %d: %s", i, args[i].failure);
        used += args[i].used_device;
    }
    /* on one device every analysis finds a context there; on several, one on another device
     * reads the host bytes (same answer), so only count */
    printf("# %d of %d threaded analyses read the device copy\n", used, 3 * N_THREADS);
    assert_true(used > 0);
    ecg_result_free(ref_csv);
    ecg_result_free(ref_f32);
    ecg_engine_destroy(engine);
}

/* Device memory: an upload holds its body's size until its analysis loads, then gives it back
 * (the peak of a streamed analysis is at most the body above a host-bytes one); twenty uploads
 * leave nothing behind. */
static void test_upload_memory(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
#ifdef ECG_HAVE_CUDA
    struct ecg_engine *engine = engine_open(fx, 1, 0);
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_error err = {0};
    size_t len = fx->csv_len, now = 0, peak = 0, reserved = 0, after_first = 0;
    struct ecg_result *ref = analyze_reference(engine, fx->tiles, fx->csv, len, &csv);
    char *host = ecg_engine_host_alloc(engine, len);
    assert_non_null(host);
    memcpy(host, fx->csv, len);

    /* the context's buffers are warm: what a host-bytes analysis holds at most (a warm one may
     * allocate nothing, so the peak since the reset may read 0: take what is in use too) */
    struct ecg_result *result = NULL;
    cuda_memory_reset_peak();
    if (ecg_engine_analyze_bytes(engine, host, len, &csv, &result, &err) != ECG_OK)
        fail_msg("analyze_bytes: %s", err.message);
    ecg_result_free(result);
    cuda_memory_stats(&now, &peak, &reserved);
    size_t peak_bytes = peak > now ? peak : now;

    for (int round = 0; round < 20; round++) {
        result = NULL;
        if (round == 0)
            cuda_memory_reset_peak();
        struct ecg_upload *up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_CSV);
        assert_non_null(up);
        ecg_upload_progress(up, len);
        if (ecg_engine_analyze_upload(engine, up, len, &csv, &result, &err) != ECG_OK)
            fail_msg("round %d: %s", round, err.message);
        assert_true(ecg_upload_used_device(up));
        assert_same_result(ref, result, "memory rounds");
        ecg_result_free(result);
        ecg_upload_free(up);
        if (round == 0) {
            cuda_memory_stats(&now, &peak, &reserved);
            printf("# device memory peak: host bytes %.1f MiB, streamed %.1f MiB (body %.1f "
                   "MiB)\n", (double)peak_bytes / MIB, (double)peak / MIB, (double)len / MIB);
            assert_true(peak <= peak_bytes + len + 16 * MIB);
            /* a new analysis's buffers from the last upload's round are in use from here */
            after_first = now;
        }
    }
    cuda_memory_stats(&now, &peak, &reserved);
    printf("# device memory in use: after 1 upload %.1f MiB, after 20 %.1f MiB\n",
           (double)after_first / MIB, (double)now / MIB);
    /* at most the last upload's free may still be pending in stream order */
    assert_true(now <= after_first + len + MIB);
    ecg_engine_host_free(engine, host);
    ecg_result_free(ref);
    ecg_engine_destroy(engine);
#else
    (void)fx;
    printf("# SKIP: memory statistics need a CUDA build\n");
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_csv_and_f32),
        cmocka_unit_test(test_upload_refusals),
        cmocka_unit_test(test_upload_cancel),
        cmocka_unit_test(test_upload_device_parser_declines),
        cmocka_unit_test(test_upload_chunked_capacity),
        cmocka_unit_test(test_upload_regrown),
        cmocka_unit_test(test_upload_several_at_once),
        cmocka_unit_test(test_upload_threads),
        cmocka_unit_test(test_upload_memory),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
