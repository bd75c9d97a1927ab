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
 *
 * The program is this file (fixture, shared helpers, main) and upload_formats.c,
 * upload_chunked.c, upload_many.c (upload.h says what each holds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "upload.h"

#include "backend.h"
#include "ecg.h"

#define MODEL_PATH "models/default.ecgm"

static bool quick_mode(void)
{
    const char *quick = getenv("ECG_GPU_QUICK");
    return quick && *quick && strcmp(quick, "0") != 0;
}

const size_t arrival_steps[ARRIVAL_STEPS] = {64 << 10, 3 * MIB, 1, 5 * MIB + 3,
                                             700 << 10, 4 * MIB, 17};

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
struct fixture *fixture_or_skip(void **state)
{
    struct fixture *fx = *state;
    if (!fx->ready) {
        printf("# SKIP: %s\n", fx->why);
        skip();
    }
    return fx;
}

/* ECG_GPU_QUICK=1 (under compute-sanitizer) leaves out the long tests. */
void skip_if_quick(void)
{
    if (quick_mode()) {
        printf("# SKIP: ECG_GPU_QUICK set\n");
        skip();
    }
}

struct ecg_engine *engine_open(const struct fixture *fx, unsigned workers, int device)
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
bool same_result(const struct ecg_result *a, const struct ecg_result *b, char *why,
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
    DIFF(memcmp(a->likeness, b->likeness, k * sizeof *a->likeness) != 0, "likeness");
    DIFF(memcmp(a->crest, b->crest, k * sizeof *a->crest) != 0, "crest");
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

void assert_same_result(const struct ecg_result *a, const struct ecg_result *b,
                        const char *what)
{
    char why[128];
    if (!same_result(a, b, why, sizeof why))
        fail_msg("%s: results differ: %s", what, why);
}

/* The reference: ecg_engine_analyze_bytes of the bytes in plain malloc'd memory. */
struct ecg_result *analyze_reference(struct ecg_engine *engine, size_t tiles,
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

void refs_open(const struct fixture *fx, unsigned workers, int device, struct refs *r)
{
    r->engine = engine_open(fx, workers, device);
    r->csv = (struct ecg_read_opts){.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    r->f32 = (struct ecg_read_opts){.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    r->f32_len = fx->n * sizeof(float);
    r->ref_csv = analyze_reference(r->engine, fx->tiles, fx->csv, fx->csv_len, &r->csv);
    r->ref_f32 = analyze_reference(r->engine, fx->tiles, fx->samples, r->f32_len, &r->f32);
}

void refs_close(struct refs *r)
{
    ecg_result_free(r->ref_csv);
    ecg_result_free(r->ref_f32);
    ecg_engine_destroy(r->engine);
}

/* Copies src into host (an ecg_engine_host_alloc buffer) in arrival_steps, reporting each step
 * to up (which may be NULL), starting with step index first_step. */
void arrive(struct ecg_upload *up, char *host, const void *src, size_t len,
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

/* Analyses the len bytes up holds, asserts that the analysis read the device copy and that its
 * answer is ref's, and frees the answer. */
void analyze_on_device(struct ecg_engine *engine, struct ecg_upload *up, size_t len,
                       const struct ecg_read_opts *opts, const struct ecg_result *ref,
                       const char *what)
{
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    if (ecg_engine_analyze_upload(engine, up, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s: analyze_upload: %s", what, err.message);
    if (!ecg_upload_used_device(up))
        fail_msg("%s: the analysis did not read the device copy", what);
    assert_same_result(ref, result, what);
    ecg_result_free(result);
}

/* One body of len bytes through the whole streaming path, in a buffer of cap >= len bytes (cap >
 * len: a chunked body, whose buffer's tail holds bytes no reader may take: 0xff, a NaN as float32
 * and a control byte in CSV), checked against ref; used_device asserted. With cap > len, also a
 * length past the capacity: refused, and the device copy left for the real analysis. */
void stream_and_check(struct ecg_engine *engine, const void *bytes, size_t len,
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
    analyze_on_device(engine, up, len, opts, ref, what);
    /* the device copy is consumed: a second analysis reads the host bytes, same answer */
    if (ecg_engine_analyze_upload(engine, up, len, opts, &result, &err) != ECG_OK)
        fail_msg("%s: second analyze_upload: %s", what, err.message);
    assert_false(ecg_upload_used_device(up));
    assert_same_result(ref, result, what);
    ecg_result_free(result);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
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
