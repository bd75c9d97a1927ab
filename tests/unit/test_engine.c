/*
 * test_engine.c - the engine end to end on the CPU backend: WFDB and annotation reading, the
 * orchestration and its error paths, the JSON answer (schema, number formatting, include
 * masks), and concurrent use of one engine.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "ecg.h"

#define MITDB ECG_SHARED_DATA "/mitdb"

static struct ecg_engine *cpu_engine(unsigned workers)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = workers};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

static void read_record(const char *name, const char *lead, struct ecg_signal *sig)
{
    char path[256];
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    snprintf(path, sizeof path, "%s/%s", MITDB, name);
    if (ecg_read_file(path, &opts, sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

/* Record 101: 650000 samples at 360 Hz; first MLII sample 955 adu -> (955-1024)/200 mV. */
static void test_wfdb_reads_record(void **state)
{
    struct ecg_signal sig = {0};
    read_record("101", NULL, &sig);
    assert_int_equal(sig.n, 650000);
    assert_true(sig.fs_hz == 360.0);
    assert_string_equal(sig.lead, "MLII");
    assert_float_equal(sig.samples[0], (955 - 1024) / 200.0, 1e-6);
    ecg_signal_free(&sig);

    /* Lead by name: V1's first sample is 992 adu. */
    read_record("101", "V1", &sig);
    assert_string_equal(sig.lead, "V1");
    assert_float_equal(sig.samples[0], (992 - 1024) / 200.0, 1e-6);
    ecg_signal_free(&sig);
}

static void test_wfdb_rejects(void **state)
{
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "2"};
    assert_int_equal(ecg_read_file(MITDB "/101", &opts, &sig, &err), ECG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "lead 2 requested, record has 2"));
    opts.lead = "V5";
    assert_int_equal(ecg_read_file(MITDB "/101", &opts, &sig, &err), ECG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no lead named \"V5\""));
    opts.lead = NULL;
    assert_int_equal(ecg_read_file(MITDB "/nonexistent", &opts, &sig, &err), ECG_ERR_IO);
    assert_null(sig.samples);
}

/* A header that claims more samples than its .dat holds is refused, never read past the end. */
static void test_wfdb_lying_header(void **state)
{
    const char *dir = "/tmp/ecgd-test-wfdb";
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && head -c 3000 %s/101.dat > %s/x.dat && "
             "printf 'x 2 360 650000\\nx.dat 212 200 11 1024 955 0 0 MLII\\n"
             "x.dat 212 200 11 1024 992 0 0 V1\\n' > %s/x.hea",
             dir, MITDB, dir, dir);
    assert_int_equal(system(cmd), 0);
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    assert_int_equal(ecg_read_file("/tmp/ecgd-test-wfdb/x", &opts, &sig, &err), ECG_ERR_FORMAT);
    assert_non_null(strstr(err.message, "header declares 650000 samples"));
    /* Without the sample count the frames present are read: 3000 bytes = 1000 frames. */
    snprintf(cmd, sizeof cmd, "sed -i '1s/.*/x 2 360/' %s/x.hea", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ecg_read_file("/tmp/ecgd-test-wfdb/x", &opts, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 1000);
    ecg_signal_free(&sig);
    /* An unsupported format is named. */
    snprintf(cmd, sizeof cmd, "sed -i '2s/ 212 / 80 /' %s/x.hea", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ecg_read_file("/tmp/ecgd-test-wfdb/x", &opts, &sig, &err),
                     ECG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "format 80"));
}

/* Annotation counts of every beat symbol, as bxb counts reference beats. */
static void test_annotations(void **state)
{
    struct ecg_annotations ann = {0};
    struct ecg_error err = {0};
    assert_int_equal(ecg_annotations_read(MITDB "/101", &ann, &err), ECG_OK);
    assert_int_equal(ann.n, 1865);
    assert_int_equal(ann.n_vf, 0);
    for (size_t i = 1; i < ann.n; i++)
        assert_true(ann.sample[i] > ann.sample[i - 1]);
    ecg_annotations_free(&ann);

    /* 207 has ventricular flutter episodes delimited by '[' and ']'. */
    assert_int_equal(ecg_annotations_read(MITDB "/207.atr", &ann, &err), ECG_OK);
    assert_true(ann.n_vf >= 1);
    assert_int_equal(ann.vf_start[0], 14665);
    assert_true(ann.vf_end[0] > ann.vf_start[0]);
    assert_true(ecg_annotations_in_vf(&ann, 14700));
    assert_false(ecg_annotations_in_vf(&ann, 100));
    size_t v = 0;
    for (size_t i = 0; i < ann.n; i++)
        v += ecg_aami_class(ann.symbol[i]) == 'V';
    assert_true(v > 100);
    ecg_annotations_free(&ann);
}

/* Analysing record 208 (many PVCs): beats close to the reference count, invariants hold. */
static void test_analyze_record(void **state)
{
    struct ecg_signal sig = {0};
    struct ecg_result *res = NULL;
    struct ecg_error err = {0};
    struct ecg_annotations ann = {0};
    struct ecg_engine *engine = cpu_engine(1);
    read_record("208", NULL, &sig);
    assert_int_equal(ecg_annotations_read(MITDB "/208", &ann, &err), ECG_OK);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    assert_true(fabs((double)res->n_beats - (double)ann.n) < 0.01 * (double)ann.n);
    assert_int_equal(res->n_samples, sig.n);
    assert_true(res->fs_hz == 360.0);
    assert_string_equal(res->lead, "MLII");
    assert_null(res->latent);
    assert_true(isnan(res->rr_ms[0]));
    for (size_t i = 0; i < res->n_beats; i++) {
        assert_true(res->r_peak[i] >= 0 && res->r_peak[i] < (int64_t)sig.n);
        assert_true(res->onset[i] <= res->r_peak[i] && res->r_peak[i] < res->end[i]);
        if (i) {
            double rr = (double)(res->r_peak[i] - res->r_peak[i - 1]) * 1000.0 / 360.0;
            assert_float_equal(res->rr_ms[i], rr, 1e-3 * rr);
        }
    }
    struct ecg_match_stats m = {0};
    ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, 360.0, 0.15, &m, NULL);
    assert_true((double)m.tp / (double)ann.n > 0.99);
    assert_true(res->timing.total_ms > 0);
    ecg_result_free(res);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

/*
 * A strip that starts with the end of the one before it (ecg_result_drop_overlap): the beats of
 * the overlap are dropped from every per-beat array together, the rest are the analysis's own
 * (the same values in the same order), the first one keeps its RR interval across the overlap,
 * and the rhythm statistics are taken again over the beats left. An overlap that leaves no
 * sample, or is not a number >= 0, is refused and leaves the result as it was.
 */
static void test_drop_overlap(void **state)
{
    (void)state;
    struct ecg_signal sig = {0};
    struct ecg_result *whole = NULL, *res = NULL;
    struct ecg_error err = {0};
    struct ecg_engine *engine = cpu_engine(1);
    read_record("208", "all", &sig);
    assert_int_equal(sig.n_extra, 1);
    sig.n = 360 * 40; /* 40 s, as a monitor's strip with 10 s of the one before */
    assert_int_equal(ecg_engine_analyze(engine, &sig, &whole, &err), ECG_OK);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    const size_t n = whole->n_beats;
    assert_int_equal(ecg_result_drop_overlap(res, NAN, NULL, 0, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_overlap");
    assert_int_equal(ecg_result_drop_overlap(res, 40.0, NULL, 0, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_overlap");
    assert_int_equal(res->n_beats, n);
    assert_int_equal(ecg_result_drop_overlap(res, 10.0, NULL, 0, &err), ECG_OK);
    assert_int_equal(res->overlap, 3600);
    size_t first = 0;
    while (whole->r_peak[first] < 3600)
        first++;
    assert_true(first >= 5 && res->n_beats == n - first);
    assert_memory_equal(res->r_peak, whole->r_peak + first, res->n_beats * sizeof *res->r_peak);
    assert_memory_equal(res->onset, whole->onset + first, res->n_beats * sizeof *res->onset);
    assert_memory_equal(res->end, whole->end + first, res->n_beats * sizeof *res->end);
    assert_memory_equal(res->rr_ms, whole->rr_ms + first, res->n_beats * sizeof *res->rr_ms);
    assert_memory_equal(res->kept, whole->kept + first, res->n_beats);
    assert_memory_equal(res->readable, whole->readable + first, res->n_beats);
    assert_memory_equal(res->likeness, whole->likeness + first, res->n_beats * sizeof(float));
    assert_memory_equal(res->crest, whole->crest + first, res->n_beats * sizeof(float));
    assert_false(isnan(res->rr_ms[0])); /* measured from the overlap's last beat */
    assert_int_equal(res->hrv.n_intervals, res->n_beats - 1);
    assert_true(res->hrv.hr_mean_bpm > 30 && res->hrv.hr_mean_bpm < 200);
    assert_int_equal(res->quality.n_segments, whole->quality.n_segments);
    ecg_result_free(res);
    ecg_result_free(whole);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

static void test_analyze_errors(void **state)
{
    struct ecg_engine *engine = cpu_engine(1);
    struct ecg_result *res = NULL;
    struct ecg_error err = {0};
    float samples[1000] = {0};
    struct ecg_signal sig = {.samples = samples, .n = 1000, .fs_hz = 360.0};
    /* 1000 samples at 360 Hz = 2.78 s: analysable (no beats in a flat line). */
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    assert_int_equal(res->n_beats, 0);
    ecg_result_free(res);
    sig.n = 360; /* 1 s, the shortest analysed */
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    assert_int_equal(res->n_beats, 0);
    ecg_result_free(res);
    res = NULL;
    sig.n = 359; /* 0.997 s */
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_ERR_UNSUPPORTED);
    assert_string_equal(err.code, "too_short");
    assert_null(res);
    sig.n = 1000;
    sig.fs_hz = 50.0;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_ERR_UNSUPPORTED);
    assert_string_equal(err.code, "bad_rate");
    sig.fs_hz = 4000.0;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_ERR_UNSUPPORTED);
    sig.n = 0;
    sig.fs_hz = 360;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_ERR_FORMAT);
    /* Bytes go through the readers: their errors come back unchanged. */
    const char *csv = "1.0\n2.0\nabc\n";
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
    assert_int_equal(ecg_engine_analyze_bytes(engine, csv, strlen(csv), &opts, &res, &err),
                     ECG_ERR_FORMAT);
    assert_non_null(strstr(err.message, "line 3"));
    /* The engine is still usable after errors. */
    sig.n = 1000;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    ecg_result_free(res);
    ecg_engine_destroy(engine);
}

/* The JSON answer parses, has the documented schema, equal-length columns and exact indices. */
static void test_json_schema(void **state)
{
    struct ecg_engine *engine = cpu_engine(1);
    struct ecg_signal sig = {0};
    struct ecg_result *res = NULL;
    struct ecg_error err = {0};
    struct ecg_buf out = {0};
    read_record("101", NULL, &sig);
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    ecg_result_write_json(res, engine, ECG_INCLUDE_ALL, &out);
    assert_false(out.failed);
    cJSON *doc = cJSON_Parse(out.data);
    assert_non_null(doc);
    assert_string_equal(cJSON_GetObjectItem(doc, "backend")->valuestring, "cpu");
    assert_string_equal(cJSON_GetObjectItem(doc, "ecgd_version")->valuestring, ECG_VERSION);
    cJSON *signal = cJSON_GetObjectItem(doc, "signal");
    assert_int_equal(cJSON_GetObjectItem(signal, "samples")->valuedouble, 650000);
    assert_string_equal(cJSON_GetObjectItem(signal, "lead")->valuestring, "MLII");
    cJSON *summary = cJSON_GetObjectItem(doc, "summary");
    assert_int_equal((size_t)cJSON_GetObjectItem(summary, "beats")->valuedouble, res->n_beats);
    double hr = cJSON_GetObjectItem(cJSON_GetObjectItem(summary, "heart_rate_bpm"), "mean")
                    ->valuedouble;
    assert_true(hr > 50 && hr < 90); /* 101: ~62 bpm */
    cJSON *beats = cJSON_GetObjectItem(doc, "beats");
    const char *cols[] = {"r_peak", "onset", "end", "rr_ms", "kept"};
    for (size_t c = 0; c < 5; c++) {
        cJSON *col = cJSON_GetObjectItem(beats, cols[c]);
        assert_non_null(col);
        assert_int_equal((size_t)cJSON_GetArraySize(col), res->n_beats);
    }
    cJSON *r_peak = cJSON_GetObjectItem(beats, "r_peak");
    cJSON *rr = cJSON_GetObjectItem(beats, "rr_ms");
    for (size_t i = 0; i < res->n_beats; i++) {
        assert_int_equal((int64_t)cJSON_GetArrayItem(r_peak, (int)i)->valuedouble, res->r_peak[i]);
        cJSON *v = cJSON_GetArrayItem(rr, (int)i);
        if (i == 0) {
            assert_true(cJSON_IsNull(v));
        } else { /* 6 significant digits, as %.6g */
            char want[32];
            snprintf(want, sizeof want, "%.6g", (double)res->rr_ms[i]);
            assert_float_equal(v->valuedouble, strtod(want, NULL), 1e-9);
        }
    }
    assert_non_null(cJSON_GetObjectItem(doc, "timing_ms"));
    assert_null(cJSON_GetObjectItem(doc, "model"));
    cJSON_Delete(doc);

    /* include=summary drops the beat table and timings. */
    ecg_buf_fini(&out);
    ecg_result_write_json(res, engine, ECG_INCLUDE_SUMMARY, &out);
    doc = cJSON_Parse(out.data);
    assert_non_null(doc);
    assert_null(cJSON_GetObjectItem(doc, "beats"));
    assert_null(cJSON_GetObjectItem(doc, "timing_ms"));
    assert_non_null(cJSON_GetObjectItem(doc, "summary"));
    cJSON_Delete(doc);
    ecg_buf_fini(&out);
    ecg_result_free(res);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

/* The beat arrays the JSON tests below fill (n entries each, zeroed), and their release. */
static void beat_arrays_alloc(struct ecg_result *res, size_t n)
{
    res->r_peak = calloc(n, sizeof(int64_t));
    res->onset = calloc(n, sizeof(int64_t));
    res->end = calloc(n, sizeof(int64_t));
    res->rr_ms = calloc(n, sizeof(float));
    res->kept = calloc(n, 1);
    assert_true(res->r_peak && res->onset && res->end && res->rr_ms && res->kept);
}

static void beat_arrays_free(struct ecg_result *res)
{
    free(res->r_peak);
    free(res->onset);
    free(res->end);
    free(res->rr_ms);
    free(res->kept);
}

/* The number printer agrees with %.6g over many magnitudes (checked through the JSON). */
static void test_json_numbers(void **state)
{
    struct ecg_engine *engine = cpu_engine(1);
    enum { N = 20000 };
    struct ecg_result res = {.n_beats = N, .fs_hz = 360, .n_samples = 1};
    beat_arrays_alloc(&res, N);
    unsigned seed = 12345;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        double mant = (double)(seed >> 8) / (double)(1u << 24);
        int e = (int)(seed % 24) - 12;
        float v = (float)(mant * pow(10.0, e) * ((seed & 1) ? -1 : 1));
        if (i % 97 == 0)
            v = (float)(i % 3 == 0 ? 0.0 : 999999.5);
        res.rr_ms[i] = v;
        res.r_peak[i] = (int64_t)seed * ((i & 2) ? -1 : 1);
    }
    struct ecg_buf out = {0};
    ecg_result_write_json(&res, engine, ECG_INCLUDE_BEATS, &out);
    cJSON *doc = cJSON_Parse(out.data);
    assert_non_null(doc);
    cJSON *rr = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "beats"), "rr_ms");
    cJSON *rp = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "beats"), "r_peak");
    for (size_t i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof want, "%.6g", (double)res.rr_ms[i]);
        double got = cJSON_GetArrayItem(rr, (int)i)->valuedouble;
        double expect = strtod(want, NULL);
        if (fabs(got - expect) > 1e-12 * fabs(expect))
            fail_msg("value %zu: %.9g printed as %.9g, %%.6g gives %s", i, (double)res.rr_ms[i],
                     got, want);
        assert_true(cJSON_GetArrayItem(rp, (int)i)->valuedouble == (double)res.r_peak[i]);
    }
    cJSON_Delete(doc);
    ecg_buf_fini(&out);
    beat_arrays_free(&res);
    ecg_engine_destroy(engine);
}

/* The fixed-point printer agrees with printf's %.4f (r_peak_s) and %.3f (timing_ms) character
 * for character: random peaks at several rates, exact ties (rates of 2^k Hz) and large values
 * (printf's way). */
static void test_json_fixed_numbers(void **state)
{
    struct ecg_engine *engine = cpu_engine(1);
    enum { N = 6000 };
    static const double rates[] = {360, 250, 128, 1000, 257.3, 32, 1024, 3e-6};
    struct ecg_result res = {.n_beats = N, .n_samples = 1};
    beat_arrays_alloc(&res, N);
    unsigned seed = 777;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        res.fs_hz = rates[r];
        for (size_t i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            res.r_peak[i] = i % 5 == 0 ? (int64_t)(seed % 4096) : (int64_t)(seed >> 1);
        }
        double *t[] = {&res.timing.read_ms,   &res.timing.resample_ms, &res.timing.filter_ms,
                       &res.timing.detect_ms, &res.timing.embed_ms,    &res.timing.encode_ms,
                       &res.timing.quality_ms, &res.timing.total_ms};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            seed = seed * 1103515245u + 12345u;
            *t[k] = k == 0 ? 0.0625 * (double)(seed % 64) /* exact ties at 3 decimals */
                           : (double)seed / (double)(1u << (seed % 24)) * (k == 7 ? 1e4 : 1.0);
        }
        struct ecg_buf out = {0}, want = {0};
        ecg_result_write_json(&res, engine, ECG_INCLUDE_ALL, &out);
        assert_false(out.failed);
        ecg_buf_puts(&want, "\"r_peak_s\":[");
        for (size_t i = 0; i < N; i++)
            ecg_buf_printf(&want, "%s%.4f", i ? "," : "", (double)res.r_peak[i] / res.fs_hz);
        ecg_buf_puts(&want, "]");
        if (!strstr(out.data, want.data))
            fail_msg("r_peak_s at %g Hz differs from %%.4f", res.fs_hz);
        static const char *const names[] = {"read",   "resample", "filter",  "detect",
                                            "embed",  "encode",   "quality", "total"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            char one[96];
            snprintf(one, sizeof one, "\"%s\":%.3f", names[k], *t[k]);
            if (!strstr(out.data, one))
                fail_msg("timing %s = %.17g: %s not in the answer", names[k], *t[k], one);
        }
        ecg_buf_fini(&want);
        ecg_buf_fini(&out);
    }
    beat_arrays_free(&res);
    ecg_engine_destroy(engine);
}

static void test_include_parse(void **state)
{
    unsigned mask = 0;
    struct ecg_error err = {0};
    assert_true(ecg_include_parse("latent,score", &mask, &err));
    assert_int_equal(mask, ECG_INCLUDE_LATENT | ECG_INCLUDE_SCORE);
    assert_true(ecg_include_parse("", &mask, &err));
    assert_int_equal(mask, ECG_INCLUDE_ALL);
    assert_false(ecg_include_parse("beats,latnet", &mask, &err));
    assert_non_null(strstr(err.message, "\"latnet\""));
}

/* Several threads share one engine with fewer contexts than threads: answers are independent. */
struct worker_arg {
    struct ecg_engine *engine;
    const struct ecg_signal *sig;
    size_t beats;
    enum ecg_status status;
};

/* The JSON answer without its timings (the only part that may differ between two runs). */
static char *answer_without_timing(const struct ecg_result *res, const struct ecg_engine *engine)
{
    struct ecg_buf out = {0};
    ecg_result_write_json(res, engine, ECG_INCLUDE_ALL, &out);
    assert_false(out.failed);
    cJSON *doc = cJSON_Parse(out.data);
    assert_non_null(doc);
    assert_non_null(cJSON_GetObjectItem(doc, "timing_ms"));
    cJSON_DeleteItemFromObject(doc, "timing_ms");
    char *text = cJSON_PrintUnformatted(doc);
    assert_non_null(text);
    cJSON_Delete(doc);
    ecg_buf_fini(&out);
    return text;
}

/*
 * The quality windows classified on a thread of their own beside the stages (what the engine
 * does for long recordings on a GPU; ECG_QUALITY_BESIDE=1 takes that path on the CPU backend
 * at any length) give the same answer, byte for byte, as classified after them: a record with
 * a noisy and a flat stretch (1,806 windows), 2.5 hours tiled from six records (9,000
 * windows: the classification's parallel loops then run inside that thread), and a record's
 * two leads, one of them noisy where the other is not and both flat in one stretch (the
 * further lead's windows classified beside too).
 */
static void test_quality_beside(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_model *model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        fail_msg("model: %s", err.message);
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = 1, .model = model};
    assert_int_equal(setenv("ECG_QUALITY_BESIDE", "0", 1), 0);
    struct ecg_engine *after = ecg_engine_create(&config, &err);
    assert_int_equal(setenv("ECG_QUALITY_BESIDE", "1", 1), 0);
    struct ecg_engine *beside = ecg_engine_create(&config, &err);
    assert_int_equal(unsetenv("ECG_QUALITY_BESIDE"), 0);
    assert_true(after && beside);

    struct ecg_signal sig[3] = {{0}};
    read_record("203", NULL, &sig[0]);
    uint64_t seed = 5;
    for (size_t i = 100 * 360; i < 120 * 360; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        sig[0].samples[i] += (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5) * 2.0f;
    }
    for (size_t i = 200 * 360; i < 210 * 360; i++)
        sig[0].samples[i] = 0.0f;
    const char *tiles[] = {"101", "119", "203", "208", "220", "230"};
    sig[1].n = 9000 * 360;
    sig[1].fs_hz = 360.0;
    sig[1].samples = malloc(sig[1].n * sizeof(float));
    assert_non_null(sig[1].samples);
    for (size_t have = 0, t = 0; have < sig[1].n; t++) {
        struct ecg_signal rec = {0};
        read_record(tiles[t % 6], NULL, &rec);
        size_t take = rec.n < sig[1].n - have ? rec.n : sig[1].n - have;
        memcpy(sig[1].samples + have, rec.samples, take * sizeof(float));
        have += take;
        ecg_signal_free(&rec);
    }
    read_record("203", "all", &sig[2]);
    assert_int_equal(sig[2].n_extra, 1);
    for (size_t i = 300 * 360; i < 330 * 360; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        sig[2].extra[0][i] += (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5) * 2.0f;
    }
    for (size_t i = 400 * 360; i < 410 * 360; i++)
        sig[2].samples[i] = sig[2].extra[0][i] = 0.0f;
    for (size_t k = 0; k < 3; k++) {
        struct ecg_result *ra = NULL, *rb = NULL;
        assert_int_equal(ecg_engine_analyze(after, &sig[k], &ra, &err), ECG_OK);
        assert_int_equal(ecg_engine_analyze(beside, &sig[k], &rb, &err), ECG_OK);
        assert_true(ra->quality.n_segments >= 1);
        char *a = answer_without_timing(ra, after), *b = answer_without_timing(rb, beside);
        assert_string_equal(a, b);
        printf("# %zu samples: %zu beats, %zu unreadable stretches, usable %.4f: the same "
               "answer (%zu bytes)\n", sig[k].n, ra->n_beats, ra->quality.n_segments,
               ra->quality.usable_fraction, strlen(a));
        cJSON_free(a);
        cJSON_free(b);
        ecg_result_free(ra);
        ecg_result_free(rb);
        ecg_signal_free(&sig[k]);
    }
    ecg_engine_destroy(after);
    ecg_engine_destroy(beside);
    ecg_model_free(model);
}

static void *worker(void *p)
{
    struct worker_arg *a = p;
    struct ecg_result *res = NULL;
    struct ecg_error err = {0};
    a->status = ecg_engine_analyze(a->engine, a->sig, &res, &err);
    a->beats = res ? res->n_beats : 0;
    ecg_result_free(res);
    return NULL;
}

static void test_concurrent(void **state)
{
    struct ecg_engine *engine = cpu_engine(2);
    struct ecg_signal sigs[2] = {{0}, {0}};
    read_record("101", NULL, &sigs[0]);
    read_record("208", NULL, &sigs[1]);
    size_t expect[2];
    for (int s = 0; s < 2; s++) {
        struct worker_arg a = {.engine = engine, .sig = &sigs[s]};
        worker(&a);
        assert_int_equal(a.status, ECG_OK);
        expect[s] = a.beats;
    }
    assert_true(expect[0] != expect[1]);
    pthread_t threads[6];
    struct worker_arg args[6];
    for (int t = 0; t < 6; t++) {
        args[t] = (struct worker_arg){.engine = engine, .sig = &sigs[t % 2]};
        assert_int_equal(pthread_create(&threads[t], NULL, worker, &args[t]), 0);
    }
    for (int t = 0; t < 6; t++) {
        pthread_join(threads[t], NULL);
        assert_int_equal(args[t].status, ECG_OK);
        assert_int_equal(args[t].beats, expect[t % 2]);
    }
    ecg_signal_free(&sigs[0]);
    ecg_signal_free(&sigs[1]);
    ecg_engine_destroy(engine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wfdb_reads_record),  cmocka_unit_test(test_wfdb_rejects),
        cmocka_unit_test(test_wfdb_lying_header),  cmocka_unit_test(test_annotations),
        cmocka_unit_test(test_analyze_record),     cmocka_unit_test(test_analyze_errors),
        cmocka_unit_test(test_drop_overlap),
        cmocka_unit_test(test_json_schema),        cmocka_unit_test(test_json_numbers),
        cmocka_unit_test(test_json_fixed_numbers),
        cmocka_unit_test(test_include_parse),      cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_quality_beside),
    };
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
