/*
 * test_readers.c - the input readers: CSV, raw f32/f64/i16, .npy, EDF, JSON and the dispatch.
 *
 * Well-formed inputs of every format (one signal rendered in each gives the same samples), the
 * real UCR recording, and a table of hostile inputs, each checked for its exact status, a piece
 * of its message, and an empty output. EDF fixtures are written with EDFlib's own writer.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <edflib.h>

#include "ecg.h"

/* ---------------------------------------------------------------- helpers */

static enum ecg_status read_mem(const void *bytes, size_t len, enum ecg_format format,
                                double fs_hz, const char *lead, struct ecg_signal *sig,
                                struct ecg_error *err)
{
    struct ecg_read_opts opts = {.format = format, .fs_hz = fs_hz, .lead = lead};
    memset(err, 0, sizeof *err);
    return ecg_read_memory(bytes, len, &opts, sig, err);
}

/* A growable byte string for building binary fixtures. */
struct bytes {
    unsigned char *data;
    size_t len;
};

static void bytes_add(struct bytes *b, const void *src, size_t len)
{
    b->data = realloc(b->data, b->len + len + 1);
    assert_non_null(b->data);
    memcpy(b->data + b->len, src, len);
    b->len += len;
}

/* An .npy file: version major.0, header dict padded to a multiple of 64, then data. */
static struct bytes make_npy(int major, const char *dict, const void *data, size_t data_len)
{
    struct bytes b = {0};
    size_t pre = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    size_t padded = (pre + hlen + 63) / 64 * 64 - pre;
    unsigned char head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    head[8] = (unsigned char)(padded & 0xff);
    head[9] = (unsigned char)(padded >> 8 & 0xff);
    head[10] = (unsigned char)(padded >> 16 & 0xff);
    head[11] = (unsigned char)(padded >> 24 & 0xff);
    bytes_add(&b, head, pre);
    bytes_add(&b, dict, strlen(dict));
    for (size_t i = hlen; i < padded; i++)
        bytes_add(&b, " ", 1);
    bytes_add(&b, "\n", 1);
    if (data_len)
        bytes_add(&b, data, data_len);
    return b;
}

/* A temporary directory for file fixtures, removed by the group teardown. */
static char tmp_dir[64];

static void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp_dir, name);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void *load_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    void *data = malloc((size_t)size);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return data;
}

/* The reference signal: k / 1000 mV with k in [-3000, 3000] (exact in every format). */
#define REF_FS 360
#define REF_N (REF_FS * 4)
static float ref_signal[REF_N];

static void make_reference(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < REF_N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = (int)((s >> 33) % 6001) - 3000;
        ref_signal[i] = (float)k / 1000.0f;
    }
}

/*
 * Writes an EDF+ or BDF+ file (EDFlib writes only those) with two signals, "MLII" in mV (the reference) and "V1" in uV
 * (the negated reference, so -1000 times its values), plus an annotation for the + types.
 * Digital values are written (EDFlib's physical writer truncates toward zero): one digital step
 * is 0.001 mV for EDF and 0.00001 mV for BDF.
 */
static void write_edf(const char *path, int filetype)
{
    int h = edfopen_file_writeonly(path, filetype, 2);
    if (h < 0)
        fail_msg("edfopen_file_writeonly(%s): %d", path, h);
    bool bdf = filetype == EDFLIB_FILETYPE_BDFPLUS;
    /* Limits whose physical values fit EDF's 8-character fields exactly (+-32 or +-80 mV). */
    int dig_max = bdf ? 8000000 : 32000, dig_min = -dig_max;
    int per_mv = bdf ? 100000 : 1000; /* digital steps per mV */
    for (int sig = 0; sig < 2; sig++) {
        double unit = sig == 0 ? 1.0 : 1000.0; /* physical units per mV */
        assert_int_equal(edf_set_samplefrequency(h, sig, REF_FS), 0);
        assert_int_equal(edf_set_digital_maximum(h, sig, dig_max), 0);
        assert_int_equal(edf_set_digital_minimum(h, sig, dig_min), 0);
        assert_int_equal(edf_set_physical_maximum(h, sig, dig_max * unit / per_mv), 0);
        assert_int_equal(edf_set_physical_minimum(h, sig, dig_min * unit / per_mv), 0);
        assert_int_equal(edf_set_label(h, sig, sig == 0 ? "MLII" : "V1"), 0);
        assert_int_equal(edf_set_physical_dimension(h, sig, sig == 0 ? "mV" : "uV"), 0);
    }
    int buf[REF_FS];
    for (int rec = 0; rec < REF_N / REF_FS; rec++) {
        for (int sig = 0; sig < 2; sig++) {
            for (int i = 0; i < REF_FS; i++) {
                int k = (int)lrintf(ref_signal[rec * REF_FS + i] * 1000.0f) * (per_mv / 1000);
                buf[i] = sig == 0 ? k : -k;
            }
            assert_int_equal(edfwrite_digital_samples(h, buf), 0);
        }
    }
    assert_int_equal(edfwrite_annotation_utf8(h, 10000000, -1, "test event"), 0);
    assert_int_equal(edfclose_file(h), 0);
}

static void assert_matches_reference(const struct ecg_signal *sig, float sign, float tolerance)
{
    assert_int_equal(sig->n, REF_N);
    size_t bad = 0;
    for (size_t i = 0; i < REF_N; i++) {
        float want = sign * ref_signal[i];
        if (tolerance == 0 ? memcmp(&sig->samples[i], &want, sizeof want) != 0
                           : fabsf(sig->samples[i] - want) > tolerance) {
            if (bad < 5)
                fprintf(stderr, "sample %zu: got %.9g want %.9g\n", i, sig->samples[i], want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* ---------------------------------------------------------------- well-formed inputs */

static void test_csv_forms(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err;

    /* One column, LF, no header, last line without newline. */
    const char *one = "1.5\n-2.25\n3e-1\n.5\n5.\n+7";
    assert_int_equal(read_mem(one, strlen(one), ECG_FORMAT_CSV, 250, NULL, &sig, &err), ECG_OK);
    float want1[] = {1.5f, -2.25f, 0.3f, 0.5f, 5.0f, 7.0f};
    assert_int_equal(sig.n, 6);
    assert_memory_equal(sig.samples, want1, sizeof want1);
    assert_true(sig.fs_hz == 250);
    assert_string_equal(sig.lead, "");
    ecg_signal_free(&sig);

    /* BOM, header, CRLF, blank lines, spaces, pick by name and by index. */
    const char *multi = "\xef\xbb\xbftime, \"MLII\" ,V1\r\n\r\n0, 0.1, -1\r\n  \r\n1,0.2 ,-2\r\n"
                        "2,\t0.3,-3\r\n\r\n";
    assert_int_equal(read_mem(multi, strlen(multi), ECG_FORMAT_CSV, 360, "MLII", &sig, &err),
                     ECG_OK);
    float want2[] = {0.1f, 0.2f, 0.3f};
    assert_int_equal(sig.n, 3);
    assert_memory_equal(sig.samples, want2, sizeof want2);
    assert_string_equal(sig.lead, "MLII");
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(multi, strlen(multi), ECG_FORMAT_CSV, 360, "2", &sig, &err), ECG_OK);
    float want3[] = {-1, -2, -3};
    assert_memory_equal(sig.samples, want3, sizeof want3);
    assert_string_equal(sig.lead, "V1");
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(multi, strlen(multi), ECG_FORMAT_CSV, 360, "v1", &sig, &err), ECG_OK);
    assert_string_equal(sig.lead, "V1"); /* case-insensitive fallback */
    ecg_signal_free(&sig);

    /* A text column does not make the first row a header when another column is chosen. */
    const char *labelled = "0.5,N\n0.25,V\n";
    assert_int_equal(read_mem(labelled, strlen(labelled), ECG_FORMAT_CSV, 100, "0", &sig, &err),
                     ECG_OK);
    assert_int_equal(sig.n, 2);
    assert_true(sig.samples[0] == 0.5f && sig.samples[1] == 0.25f);
    ecg_signal_free(&sig);

    /* Semicolons and tabs as delimiters. */
    const char *semi = "1;10\n2;20\n";
    assert_int_equal(read_mem(semi, strlen(semi), ECG_FORMAT_CSV, 100, "1", &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 2);
    assert_true(sig.samples[0] == 10 && sig.samples[1] == 20);
    ecg_signal_free(&sig);
    const char *tabs = "a\tb\n1\t-4.5\n2\t4.5e2\n";
    assert_int_equal(read_mem(tabs, strlen(tabs), ECG_FORMAT_CSV, 100, "b", &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == -4.5f && sig.samples[1] == 450.0f);
    ecg_signal_free(&sig);

    /* The data's own form, parsed exactly as strtof does. */
    const char *data = "1.3863000000000008e+00\n-4.1000000000000001e-01\n";
    assert_int_equal(read_mem(data, strlen(data), ECG_FORMAT_CSV, 250, NULL, &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == strtof("1.3863000000000008e+00", NULL));
    assert_true(sig.samples[1] == strtof("-4.1000000000000001e-01", NULL));
    ecg_signal_free(&sig);

    /* Format sniffing of text in memory. */
    assert_int_equal(read_mem(one, strlen(one), ECG_FORMAT_AUTO, 250, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 6);
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(multi, strlen(multi), ECG_FORMAT_AUTO, 250, "1", &sig, &err),
                     ECG_OK); /* with a byte order mark */
    assert_int_equal(sig.n, 3);
    ecg_signal_free(&sig);
}

static void test_csv_real_recording(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.fs_hz = 250};
    enum ecg_status st = ecg_read_file(ECG_SHARED_DATA "/ucr/ecg50T.txt", &opts, &sig, &err);
    if (st != ECG_OK)
        fprintf(stderr, "%s\n", err.message);
    assert_int_equal(st, ECG_OK);
    assert_int_equal(sig.n, 50000);
    assert_true(sig.fs_hz == 250);
    assert_true(sig.samples[0] == -0.02f);
    assert_true(sig.samples[1] == -0.01f);
    assert_true(sig.samples[2] == -0.005f);
    assert_true(sig.samples[24999] == 0.115f);
    assert_true(sig.samples[25000] == 0.12f);
    assert_true(sig.samples[49999] == 0.005f);
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < sig.n; i++) {
        lo = fminf(lo, sig.samples[i]);
        hi = fmaxf(hi, sig.samples[i]);
    }
    assert_true(lo == -0.71f);
    assert_true(hi == 0.785f);
    ecg_signal_free(&sig);
}

static void test_raw_forms(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err;
    /* Little-endian bytes written out by hand, independent of the host. */
    const unsigned char f32[] = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x10, 0xc0}; /* 1.5, -2.25 */
    assert_int_equal(read_mem(f32, sizeof f32, ECG_FORMAT_F32, 500, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 2);
    assert_true(sig.samples[0] == 1.5f && sig.samples[1] == -2.25f);
    assert_true(sig.fs_hz == 500);
    ecg_signal_free(&sig);
    const unsigned char f64[] = {0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0, 0, 0, 0, 0, 0, 0x02, 0xc0};
    assert_int_equal(read_mem(f64, sizeof f64, ECG_FORMAT_F64, 500, NULL, &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == 1.5f && sig.samples[1] == -2.25f);
    ecg_signal_free(&sig);
    const unsigned char i16[] = {0x01, 0x00, 0xff, 0xff, 0x00, 0x80, 0xff, 0x7f};
    assert_int_equal(read_mem(i16, sizeof i16, ECG_FORMAT_I16, 500, "0", &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 4);
    assert_true(sig.samples[0] == 1 && sig.samples[1] == -1 && sig.samples[2] == -32768 &&
                sig.samples[3] == 32767);
    ecg_signal_free(&sig);
}

static void test_npy_forms(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err;
    float f4[3] = {1.5f, -2.0f, 3.25f};
    for (int major = 1; major <= 3; major++) {
        struct bytes b = make_npy(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                  f4, sizeof f4);
        assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, NULL, &sig, &err), ECG_OK);
        assert_int_equal(sig.n, 3);
        assert_memory_equal(sig.samples, f4, sizeof f4);
        ecg_signal_free(&sig);
        /* Sniffed from the magic. */
        assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_AUTO, 250, NULL, &sig, &err), ECG_OK);
        ecg_signal_free(&sig);
        free(b.data);
    }
    double f8[3] = {1.5, -2.0, 3.25};
    struct bytes b = make_npy(1, "{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(3,)}", f8,
                              sizeof f8);
    assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, NULL, &sig, &err), ECG_OK);
    assert_memory_equal(sig.samples, f4, sizeof f4);
    ecg_signal_free(&sig);
    free(b.data);

    /* 2-D, samples x leads: C order and Fortran order; int16; big-endian float. */
    int16_t c_order[6] = {1, 10, 2, 20, 3, 30}; /* rows (1,10), (2,20), (3,30) */
    b = make_npy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 2), }", c_order,
                 sizeof c_order);
    assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, "1", &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.samples[0] == 10 && sig.samples[1] == 20 && sig.samples[2] == 30);
    ecg_signal_free(&sig);
    free(b.data);
    int32_t f_order[6] = {1, 2, 3, 10, 20, 30}; /* columns (1,2,3), (10,20,30) */
    b = make_npy(2, "{'descr': '<i4', 'fortran_order': True, 'shape': (3, 2), }", f_order,
                 sizeof f_order);
    assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, "1", &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == 10 && sig.samples[1] == 20 && sig.samples[2] == 30);
    ecg_signal_free(&sig);
    free(b.data);
    const unsigned char be[] = {0x3f, 0xc0, 0x00, 0x00, 0xc0, 0x10, 0x00, 0x00}; /* 1.5, -2.25 */
    b = make_npy(3, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be, sizeof be);
    assert_int_equal(read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, NULL, &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == 1.5f && sig.samples[1] == -2.25f);
    ecg_signal_free(&sig);
    free(b.data);
}

static void test_json_forms(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err;
    const char *doc = "{\"fs\": 360, \"lead\": \"MLII\", \"signal\": [1.5, -2, 3e-1]}";
    assert_int_equal(read_mem(doc, strlen(doc), ECG_FORMAT_JSON, 0, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.samples[0] == 1.5f && sig.samples[1] == -2.0f && sig.samples[2] == 0.3f);
    assert_true(sig.fs_hz == 360);
    assert_string_equal(sig.lead, "MLII");
    ecg_signal_free(&sig);
    /* The document's rate wins; the lead may be named. */
    assert_int_equal(read_mem(doc, strlen(doc), ECG_FORMAT_AUTO, 500, "MLII", &sig, &err),
                     ECG_OK);
    assert_true(sig.fs_hz == 360);
    ecg_signal_free(&sig);
    /* A bare array takes the rate from the options. */
    const char *bare = " [1, 2, 3]\n";
    assert_int_equal(read_mem(bare, strlen(bare), ECG_FORMAT_AUTO, 128, NULL, &sig, &err),
                     ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.fs_hz == 128 && sig.samples[2] == 3);
    ecg_signal_free(&sig);
    const char *fs_hz = "{\"fs_hz\": 250.5, \"signal\": [0]}";
    assert_int_equal(read_mem(fs_hz, strlen(fs_hz), ECG_FORMAT_JSON, 0, NULL, &sig, &err),
                     ECG_OK);
    assert_true(sig.fs_hz == 250.5);
    ecg_signal_free(&sig);
}

static void test_edf_forms(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {0};
    char path[128];
    tmp_path(path, sizeof path, "two.edf");
    write_edf(path, EDFLIB_FILETYPE_EDFPLUS);

    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_true(fabs(sig.fs_hz - REF_FS) < 1e-9);
    assert_string_equal(sig.lead, "MLII");
    assert_matches_reference(&sig, 1.0f, 1e-6f);
    ecg_signal_free(&sig);

    /* Index 1 is V1 (the annotation signal is not counted); uV become mV. */
    opts.lead = "1";
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_string_equal(sig.lead, "V1");
    assert_matches_reference(&sig, -1.0f, 1e-6f);
    ecg_signal_free(&sig);

    /* From memory, by label, sniffed. */
    size_t len;
    void *bytes = load_file(path, &len);
    assert_int_equal(read_mem(bytes, len, ECG_FORMAT_AUTO, 0, "v1", &sig, &err), ECG_OK);
    assert_string_equal(sig.lead, "V1");
    assert_matches_reference(&sig, -1.0f, 1e-6f);
    ecg_signal_free(&sig);
    free(bytes);
    unlink(path);

    /* BDF (24-bit) through the same path. */
    tmp_path(path, sizeof path, "two.bdf");
    write_edf(path, EDFLIB_FILETYPE_BDFPLUS);
    opts.lead = "MLII";
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_matches_reference(&sig, 1.0f, 1e-6f);
    ecg_signal_free(&sig);
    unlink(path);
}

/* The same signal in CSV, f32, npy, JSON and EDF reads back as the same samples. */
static void test_same_signal_every_format(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.fs_hz = REF_FS};
    char path[128];

    /* CSV with a header, %.9g (round-trips a float). */
    tmp_path(path, sizeof path, "ref.csv");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "MLII\n");
    for (int i = 0; i < REF_N; i++)
        fprintf(f, "%.9g\n", (double)ref_signal[i]);
    fclose(f);
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_string_equal(sig.lead, "MLII");
    assert_matches_reference(&sig, 1.0f, 0);
    ecg_signal_free(&sig);

    /* f32: little-endian bytes. */
    unsigned char raw[REF_N * 4];
    for (int i = 0; i < REF_N; i++) {
        uint32_t u;
        memcpy(&u, &ref_signal[i], 4);
        for (int k = 0; k < 4; k++)
            raw[i * 4 + k] = (unsigned char)(u >> (8 * k));
    }
    tmp_path(path, sizeof path, "ref.f32");
    write_file(path, raw, sizeof raw);
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_matches_reference(&sig, 1.0f, 0);
    ecg_signal_free(&sig);

    /* npy */
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }",
             REF_N);
    struct bytes b = make_npy(1, dict, raw, sizeof raw);
    tmp_path(path, sizeof path, "ref.npy");
    write_file(path, b.data, b.len);
    free(b.data);
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    assert_matches_reference(&sig, 1.0f, 0);
    ecg_signal_free(&sig);

    /* JSON */
    tmp_path(path, sizeof path, "ref.json");
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"fs\": %d, \"lead\": \"MLII\", \"signal\": [", REF_FS);
    for (int i = 0; i < REF_N; i++)
        fprintf(f, "%s%.9g", i ? ", " : "", (double)ref_signal[i]);
    fprintf(f, "]}\n");
    fclose(f);
    struct ecg_read_opts no_fs = {0};
    assert_int_equal(ecg_read_file(path, &no_fs, &sig, &err), ECG_OK);
    assert_matches_reference(&sig, 1.0f, 0);
    assert_true(sig.fs_hz == REF_FS);
    ecg_signal_free(&sig);

    /* EDF: 16-bit digital values with a 0.001 mV step; the gain is computed in double. */
    tmp_path(path, sizeof path, "ref.edf");
    write_edf(path, EDFLIB_FILETYPE_EDFPLUS);
    assert_int_equal(ecg_read_file(path, &no_fs, &sig, &err), ECG_OK);
    assert_matches_reference(&sig, 1.0f, 1e-6f);
    assert_true(fabs(sig.fs_hz - REF_FS) < 1e-9);
    ecg_signal_free(&sig);
}

static void test_format_names(void **state)
{
    (void)state;
    for (int f = ECG_FORMAT_CSV; f < ECG_FORMAT_COUNT; f++)
        assert_int_equal(ecg_format_from_name(ecg_format_name((enum ecg_format)f)), f);
    assert_int_equal(ecg_format_from_name("NPY"), ECG_FORMAT_NPY);
    assert_int_equal(ecg_format_from_name("bogus"), ECG_FORMAT_AUTO);
    assert_int_equal(ecg_format_from_name(NULL), ECG_FORMAT_AUTO);
    assert_string_equal(ecg_format_name((enum ecg_format)99), "unknown");
    assert_int_equal(ecg_format_from_path("a/b.csv"), ECG_FORMAT_CSV);
    assert_int_equal(ecg_format_from_path("x.TXT"), ECG_FORMAT_CSV);
    assert_int_equal(ecg_format_from_path("x.f32"), ECG_FORMAT_F32);
    assert_int_equal(ecg_format_from_path("x.bin"), ECG_FORMAT_F32);
    assert_int_equal(ecg_format_from_path("x.raw"), ECG_FORMAT_F32);
    assert_int_equal(ecg_format_from_path("x.npy"), ECG_FORMAT_NPY);
    assert_int_equal(ecg_format_from_path("x.edf"), ECG_FORMAT_EDF);
    assert_int_equal(ecg_format_from_path("x.bdf"), ECG_FORMAT_EDF);
    assert_int_equal(ecg_format_from_path("x.json"), ECG_FORMAT_JSON);
    assert_int_equal(ecg_format_from_path("x.hea"), ECG_FORMAT_WFDB);
    assert_int_equal(ecg_format_from_path("x.dat"), ECG_FORMAT_WFDB);
    assert_int_equal(ecg_format_from_path("dir.v2/noext"), ECG_FORMAT_AUTO);
    assert_int_equal(ecg_format_from_path(".hidden"), ECG_FORMAT_AUTO);
    assert_int_equal(ecg_format_from_path(ECG_SHARED_DATA "/mitdb/100"), ECG_FORMAT_AUTO);
    assert_int_equal(ecg_format_from_path(ECG_SHARED_DATA "/mitdb/101"), ECG_FORMAT_WFDB);
}

static void test_file_errors(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.fs_hz = 250};
    assert_int_equal(ecg_read_file("/nonexistent/x.csv", &opts, &sig, &err), ECG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "/nonexistent/x.csv"));
    assert_int_equal(ecg_read_file(tmp_dir, &opts, &sig, &err), ECG_ERR_IO);
    assert_non_null(strstr(err.message, "is a directory"));
    char path[128];
    tmp_path(path, sizeof path, "bad.csv");
    write_file(path, "1\n2\nx1\n", 7);
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_ERR_FORMAT);
    /* The message names the file, then where in it. */
    assert_non_null(strstr(err.message, "bad.csv: line 3, column 1: expected a number"));
    assert_null(sig.samples);
    tmp_path(path, sizeof path, "missing.edf");
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_ERR_NOT_FOUND);
    assert_int_equal(ecg_read_file(NULL, &opts, &sig, &err), ECG_ERR_ARG);
    /* max_samples */
    tmp_path(path, sizeof path, "three.csv");
    write_file(path, "1\n2\n3\n\n", 7);
    opts.max_samples = 3;
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
    ecg_signal_free(&sig);
    opts.max_samples = 2;
    assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_ERR_TOO_LARGE);
    assert_null(sig.samples);
    ecg_signal_free(NULL);
}

/* ---------------------------------------------------------------- hostile inputs */

struct hostile {
    const char *name;
    enum ecg_format format;
    const char *bytes;
    size_t len;
    double fs_hz;
    const char *lead;
    size_t max_samples;
    enum ecg_status want;
    const char *message; /* a substring of the expected message */
};

#define TXT(s) s, sizeof(s) - 1

static const struct hostile hostile_cases[] = {
    /* CSV */
    {"csv empty", ECG_FORMAT_CSV, TXT(""), 250, NULL, 0, ECG_ERR_FORMAT, "input is empty"},
    {"csv blank lines only", ECG_FORMAT_CSV, TXT("\n\n  \r\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "no data rows"},
    {"csv header only", ECG_FORMAT_CSV, TXT("MLII\r\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "no data rows"},
    {"csv no rate", ECG_FORMAT_CSV, TXT("1\n2\n"), 0, NULL, 0, ECG_ERR_ARG,
     "CSV carries no sampling rate: give fs"},
    {"csv negative rate", ECG_FORMAT_CSV, TXT("1\n2\n"), -5, NULL, 0, ECG_ERR_ARG,
     "not positive"},
    {"csv NaN rate", ECG_FORMAT_CSV, TXT("1\n2\n"), NAN, NULL, 0, ECG_ERR_ARG, "not positive"},
    {"csv word", ECG_FORMAT_CSV, TXT("1\n2\nabc\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 3, column 1: expected a number, got \"abc\""},
    {"csv nan", ECG_FORMAT_CSV, TXT("1\n2\nnan\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 3, column 1: \"nan\" is not a finite number"},
    {"csv inf", ECG_FORMAT_CSV, TXT("1\r\ninf\r\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: \"inf\" is not a finite number"},
    {"csv -Infinity", ECG_FORMAT_CSV, TXT("a,b\n1,2\n3,-Infinity\n"), 250, "b", 0,
     ECG_ERR_FORMAT, "line 3, column 2: \"-Infinity\" is not a finite number"},
    {"csv overflow", ECG_FORMAT_CSV, TXT("1\n1e39\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: \"1e39\" is outside the float range"},
    {"csv overflow in column", ECG_FORMAT_CSV, TXT("1,2\n3,-4e38\n"), 250, "1", 0,
     ECG_ERR_FORMAT, "line 2, column 2: \"-4e38\" is outside the float range"},
    {"csv ragged", ECG_FORMAT_CSV, TXT("a,b\n1,2\n3\n"), 250, "1", 0, ECG_ERR_FORMAT,
     "line 3: missing column 2 (the line has 1)"},
    {"csv unknown name", ECG_FORMAT_CSV, TXT("a,b\n1,2\n"), 250, "V5", 0, ECG_ERR_NOT_FOUND,
     "no column named \"V5\""},
    {"csv name without header", ECG_FORMAT_CSV, TXT("1,2\n"), 250, "MLII", 0,
     ECG_ERR_NOT_FOUND, "no header row"},
    {"csv index out of range", ECG_FORMAT_CSV, TXT("1,2\n3,4\n"), 250, "5", 0,
     ECG_ERR_NOT_FOUND, "column 5 does not exist: line 1 has 2 columns"},
    {"csv header index out of range", ECG_FORMAT_CSV, TXT("a,b\n3,4\n"), 250, "2", 0,
     ECG_ERR_NOT_FOUND, "column 2 does not exist"},
    {"csv bad utf-8", ECG_FORMAT_CSV, TXT("1\n\xff\xfe\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got \"\\xff\\xfe\""},
    {"csv NUL byte", ECG_FORMAT_CSV, TXT("1\n2\0\x01\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2: control byte 0x00"},
    {"csv binary header", ECG_FORMAT_CSV, TXT("\x01\x02\x03\n1\n"), 250, NULL, 0,
     ECG_ERR_FORMAT, "line 1: control byte 0x01"},
    {"csv empty field", ECG_FORMAT_CSV, TXT("1,2\n,3\n"), 250, "0", 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got an empty field"},
    {"csv empty middle field", ECG_FORMAT_CSV, TXT("1,2,3\n4,,6\n"), 250, "1", 0,
     ECG_ERR_FORMAT, "line 2, column 2: expected a number, got an empty field"},
    {"csv trailing junk", ECG_FORMAT_CSV, TXT("1.5abc\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 1, column 1: expected a number, got \"1.5abc\""},
    {"csv exponent without digits", ECG_FORMAT_CSV, TXT("1\n2e\n"), 250, NULL, 0,
     ECG_ERR_FORMAT, "line 2, column 1: expected a number, got \"2e\""},
    {"csv two numbers in a field", ECG_FORMAT_CSV, TXT("1 2\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "got \"1 2\""},
    {"csv hex", ECG_FORMAT_CSV, TXT("1\n0x10\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got \"0x10\""},
    {"csv lone CR", ECG_FORMAT_CSV, TXT("1\r2\r3\r"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 1: control byte 0x0d"},
    {"csv too many", ECG_FORMAT_CSV, TXT("1\n2\n3\n"), 250, NULL, 2, ECG_ERR_TOO_LARGE,
     "limit of 2 samples"},
    {"csv word after blank lines", ECG_FORMAT_CSV, TXT("1\n\n\n\nx\n"), 250, NULL, 0,
     ECG_ERR_FORMAT, "line 5, column 1: expected a number, got \"x\""},
    /* raw */
    {"f32 odd length", ECG_FORMAT_F32, TXT("\0\0\x80?\0\0\x80"), 250, NULL, 0, ECG_ERR_FORMAT,
     "7 bytes is not a multiple of the 4-byte sample size"},
    {"i16 odd length", ECG_FORMAT_I16, TXT("\1\0\2"), 250, NULL, 0, ECG_ERR_FORMAT,
     "3 bytes is not a multiple of the 2-byte sample size"},
    {"f64 odd length", ECG_FORMAT_F64, TXT("\0\0\0\0\0\0\xf0?\0\0\0\0"), 250, NULL, 0,
     ECG_ERR_FORMAT, "12 bytes is not a multiple of the 8-byte sample size"},
    {"f32 NaN", ECG_FORMAT_F32, TXT("\0\0\x80?\0\0\xc0\x7f"), 250, NULL, 0, ECG_ERR_FORMAT,
     "sample 1 is NaN"},
    {"f32 Inf", ECG_FORMAT_F32, TXT("\0\0\x80\x7f\0\0\x80?"), 250, NULL, 0, ECG_ERR_FORMAT,
     "sample 0 is infinite"},
    {"f64 beyond float", ECG_FORMAT_F64, TXT("\0\0\0\0\0\0\xf0\x7e"), 250, NULL, 0,
     ECG_ERR_FORMAT, "outside the float range"},
    {"f32 no rate", ECG_FORMAT_F32, TXT("\0\0\x80?"), 0, NULL, 0, ECG_ERR_ARG,
     "raw binary input carries no sampling rate: give fs"},
    {"f32 too many", ECG_FORMAT_F32, TXT("\0\0\x80?\0\0\x80?\0\0\x80?"), 250, NULL, 2,
     ECG_ERR_TOO_LARGE, "3 samples exceed the limit of 2"},
    {"f32 empty", ECG_FORMAT_F32, TXT(""), 250, NULL, 0, ECG_ERR_FORMAT, "input is empty"},
    {"f32 named lead", ECG_FORMAT_F32, TXT("\0\0\x80?"), 250, "MLII", 0, ECG_ERR_NOT_FOUND,
     "holds one lead"},
    {"binary without format", ECG_FORMAT_AUTO, TXT("\0\0\x80?\x01\x02"), 250, NULL, 0,
     ECG_ERR_ARG, "cannot tell the format"},
    {"wfdb from memory", ECG_FORMAT_WFDB, TXT("100 2 360 650000\n"), 0, NULL, 0, ECG_ERR_ARG,
     "read them from files"},
    /* npy (preamble and header only; data-bearing cases are built in test_hostile_npy) */
    {"npy bad magic", ECG_FORMAT_NPY, TXT("\x93NUMPX\x01\x00\x10\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "magic"},
    {"npy truncated preamble", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01"), 250, NULL, 0,
     ECG_ERR_FORMAT, "magic"},
    {"npy version 4", ECG_FORMAT_NPY, TXT("\x93NUMPY\x04\x00\x10\x00\x00\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "version 4.0 is not supported"},
    {"npy version 1.1", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01\x01\x02\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "version 1.1 is not supported"},
    {"npy header beyond file", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01\x00\xff\x7f{'descr'"), 250,
     NULL, 0, ECG_ERR_FORMAT, "header claims 32767 bytes but only 8 follow"},
    {"npy v2 truncated", ECG_FORMAT_NPY, TXT("\x93NUMPY\x02\x00\x01\x00"), 250, NULL, 0,
     ECG_ERR_FORMAT, "the preamble needs 12"},
    /* JSON */
    {"json string element", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, \"a\", 3]}"), 0,
     NULL, 0, ECG_ERR_FORMAT, "signal[1] must be a number, got a string"},
    {"json nested array", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [[1, 2], [3]]}"), 0,
     NULL, 0, ECG_ERR_FORMAT, "signal[0] must be a number, got an array"},
    {"json null element", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 2, null]}"), 0,
     NULL, 0, ECG_ERR_FORMAT, "signal[2] must be a number, got null"},
    {"json no signal", ECG_FORMAT_JSON, TXT("{\"fs\": 360}"), 0, NULL, 0, ECG_ERR_FORMAT,
     "no \"signal\" array"},
    {"json signal not array", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": 5}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "\"signal\" must be an array of numbers, got a number"},
    {"json fs string", ECG_FORMAT_JSON, TXT("{\"fs\": \"fast\", \"signal\": [1]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "\"fs\" must be a number, got a string"},
    {"json fs negative", ECG_FORMAT_JSON, TXT("{\"fs\": -1, \"signal\": [1]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "not positive"},
    {"json empty signal", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": []}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "\"signal\" is empty"},
    {"json NaN literal", ECG_FORMAT_JSON, TXT("{\"fs\": 360,\n \"signal\": [1, NaN]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "syntax error at line 2, column 16"},
    {"json overflow", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 1e39]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "signal[1] (1e+39) is not a finite float"},
    {"json no rate", ECG_FORMAT_JSON, TXT("{\"signal\": [1, 2]}"), 0, NULL, 0, ECG_ERR_ARG,
     "carries no sampling rate: give fs"},
    {"json truncated", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 2"), 0, NULL, 0,
     ECG_ERR_FORMAT, "syntax error"},
    {"json trailing text", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1]} x"), 0, NULL, 0,
     ECG_ERR_FORMAT, "unexpected text after the document at line 1, column 28"},
    {"json string document", ECG_FORMAT_JSON, TXT("\"hello\""), 0, NULL, 0, ECG_ERR_FORMAT,
     "expected an object"},
    {"json lead mismatch", ECG_FORMAT_JSON,
     TXT("{\"fs\": 360, \"lead\": \"MLII\", \"signal\": [1]}"), 0, "V1", 0, ECG_ERR_NOT_FOUND,
     "lead \"V1\" does not exist"},
    {"json lead not string", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"lead\": 2, \"signal\": [1]}"),
     0, NULL, 0, ECG_ERR_FORMAT, "\"lead\" must be a string, got a number"},
    {"json binary", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, \xff]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "near \"\\xff]}\""},
    {"json too many", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 2, 3]}"), 0, NULL, 2,
     ECG_ERR_TOO_LARGE, "3 samples exceed the limit of 2"},
    /* EDF (header-level; file-level cases are built in test_hostile_edf) */
    {"edf short", ECG_FORMAT_EDF, TXT("0       short"), 0, NULL, 0, ECG_ERR_FORMAT,
     "EDF input truncated: 13 bytes"},
};

static void check_hostile(const char *name, enum ecg_status status, const struct ecg_signal *sig,
                          const struct ecg_error *err, enum ecg_status want, const char *message)
{
    if (status != want || !strstr(err->message, message))
        fprintf(stderr, "case \"%s\": status %s (want %s), message \"%s\" (want \"%s\")\n", name,
                ecg_status_str(status), ecg_status_str(want), err->message, message);
    assert_int_equal(status, want);
    assert_non_null(strstr(err->message, message));
    assert_int_equal(err->status, want);
    assert_true(err->code[0] != 0);
    assert_null(sig->samples);
    assert_int_equal(sig->n, 0);
}

static void test_hostile_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof hostile_cases / sizeof hostile_cases[0]; i++) {
        const struct hostile *h = &hostile_cases[i];
        /* An exact-size copy, so that a read past the end shows under ASan. */
        char *copy = malloc(h->len ? h->len : 1);
        assert_non_null(copy);
        memcpy(copy, h->bytes, h->len);
        struct ecg_read_opts opts = {.format = h->format, .fs_hz = h->fs_hz, .lead = h->lead,
                                     .max_samples = h->max_samples};
        struct ecg_signal sig;
        memset(&sig, 0xab, sizeof sig); /* the reader must clear it */
        struct ecg_error err = {0};
        enum ecg_status status = ecg_read_memory(copy, h->len, &opts, &sig, &err);
        check_hostile(h->name, status, &sig, &err, h->want, h->message);
        free(copy);
    }
}

/* Huge lines: a 1 MB word and a 1 MB number. */
static void test_hostile_huge_lines(void **state)
{
    (void)state;
    size_t big = 1 << 20;
    char *text = malloc(big + 16);
    assert_non_null(text);
    struct ecg_signal sig;
    struct ecg_error err;

    memcpy(text, "1\n2\n", 4);
    memset(text + 4, 'x', big);
    text[4 + big] = '\n';
    enum ecg_status st = read_mem(text, big + 5, ECG_FORMAT_CSV, 250, NULL, &sig, &err);
    check_hostile("huge word", st, &sig, &err, ECG_ERR_FORMAT,
                  "line 3, column 1: expected a number, got \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                  "...\"");

    memset(text + 4, '7', big); /* a 1 MB run of digits: 7.77e1048575 */
    st = read_mem(text, big + 5, ECG_FORMAT_CSV, 250, NULL, &sig, &err);
    check_hostile("huge number", st, &sig, &err, ECG_ERR_FORMAT,
                  "line 3, column 1: \"77777777777777777777777777777777...\" is outside the "
                  "float range");

    /* A 1 MB number that is fine: 0.000...0001 with a huge exponent. */
    memcpy(text + 4, "0.", 2);
    memset(text + 6, '0', big - 3);
    memcpy(text + 6 + big - 3, "1e1048570\n", 10);
    st = read_mem(text, 6 + big - 3 + 10, ECG_FORMAT_CSV, 250, NULL, &sig, &err);
    assert_int_equal(st, ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.samples[2] == 1e-4f);
    ecg_signal_free(&sig);
    free(text);
}

static void hostile_npy(const char *name, int major, const char *dict, const void *data,
                        size_t data_len, const char *lead, enum ecg_status want,
                        const char *message)
{
    struct bytes b = make_npy(major, dict, data, data_len);
    struct ecg_signal sig;
    struct ecg_error err;
    enum ecg_status st = read_mem(b.data, b.len, ECG_FORMAT_NPY, 250, lead, &sig, &err);
    check_hostile(name, st, &sig, &err, want, message);
    free(b.data);
}

static void test_hostile_npy(void **state)
{
    (void)state;
    float ten[10] = {0};
    float with_nan[4] = {1, 2, NAN, 4};
    hostile_npy("npy lying shape", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT,
                "the shape needs 4000 bytes, the file holds 40");
    hostile_npy("npy extra data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT,
                "the shape needs 20 bytes, the file holds 40");
    hostile_npy("npy complex dtype", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (5,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "npy dtype \"<c8\" is not supported");
    hostile_npy("npy object dtype", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (5,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "npy dtype \"|O\" is not supported");
    hostile_npy("npy | on float", 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (10,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "'|' (no byte order) only fits 1-byte");
    hostile_npy("npy byte order", 1, "{'descr': '!f4', 'fortran_order': False, 'shape': (10,), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "unknown byte order '!'");
    hostile_npy("npy 3-D", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 1), }",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "more than 2 dimensions");
    hostile_npy("npy scalar", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", ten,
                4, NULL, ECG_ERR_FORMAT, "scalar");
    hostile_npy("npy zero length", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }",
                NULL, 0, NULL, ECG_ERR_FORMAT, "npy array is empty");
    hostile_npy("npy unknown key", 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), 'foo': 1}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "unknown key \"foo\"");
    hostile_npy("npy repeated key", 1,
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (10,)}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "key \"descr\" repeated");
    hostile_npy("npy missing shape", 1, "{'descr': '<f4', 'fortran_order': False}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "lacks 'shape'");
    hostile_npy("npy unclosed dict", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "expected ',' or '}'");
    hostile_npy("npy bad bool", 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (10,)}",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "expected True or False, got \"Maybe");
    hostile_npy("npy negative dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-10,)}",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "expected a dimension");
    hostile_npy("npy overflowing shape", 1,
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "is too large");
    hostile_npy("npy huge dim", 1,
                "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "dimension too large");
    hostile_npy("npy garbage after dict", 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)} junk", ten, sizeof ten,
                NULL, ECG_ERR_FORMAT, "expected the end of the header, got \"junk");
    hostile_npy("npy lead out of range", 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 2)}", ten, sizeof ten, "3",
                ECG_ERR_NOT_FOUND, "lead 3 does not exist: the array has 2 leads");
    hostile_npy("npy lead by name", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)}",
                ten, sizeof ten, "MLII", ECG_ERR_NOT_FOUND, "npy has no lead names");
    hostile_npy("npy NaN", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}",
                with_nan, sizeof with_nan, NULL, ECG_ERR_FORMAT, "npy: sample 2 is NaN");

    /* No rate. */
    struct bytes b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)}", ten,
                              sizeof ten);
    struct ecg_signal sig;
    struct ecg_error err;
    enum ecg_status st = read_mem(b.data, b.len, ECG_FORMAT_NPY, 0, NULL, &sig, &err);
    check_hostile("npy no rate", st, &sig, &err, ECG_ERR_ARG, "npy carries no sampling rate");
    /* Every truncation of a valid file fails cleanly. */
    for (size_t cut = 0; cut < b.len; cut++) {
        st = read_mem(b.data, cut, ECG_FORMAT_NPY, 250, NULL, &sig, &err);
        assert_int_equal(st, ECG_ERR_FORMAT);
        assert_null(sig.samples);
    }
    free(b.data);
}

static void edf_hostile(const char *name, const void *bytes, size_t len, const char *lead,
                        enum ecg_status want, const char *message)
{
    struct ecg_signal sig;
    struct ecg_error err;
    enum ecg_status st = read_mem(bytes, len, ECG_FORMAT_EDF, 0, lead, &sig, &err);
    check_hostile(name, st, &sig, &err, want, message);
}

/* Overwrites header bytes [at, at + strlen(text)) of a copy of an EDF file. */
static void patch(unsigned char *dst, size_t len, size_t at, const char *text)
{
    assert_true(at + strlen(text) <= len);
    memcpy(dst + at, text, strlen(text));
}

static void test_hostile_edf(void **state)
{
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "hostile.edf");
    write_edf(path, EDFLIB_FILETYPE_EDFPLUS);
    size_t len;
    unsigned char *good = load_file(path, &len);
    if (len < 1024) { /* two signals and an annotation signal: 1024 bytes of header alone */
        fail_msg("EDF fixture is only %zu bytes", len);
        return;
    }
    unsigned char *bad = malloc(len);
    assert_non_null(bad);
    unlink(path);

    edf_hostile("edf unknown label", good, len, "V5", ECG_ERR_NOT_FOUND,
                "no signal labelled \"V5\"");
    edf_hostile("edf index past the signals", good, len, "2", ECG_ERR_NOT_FOUND,
                "lead 2 does not exist (the file has 2 signals)");
    edf_hostile("edf truncated data", good, len - 100, NULL, ECG_ERR_FORMAT,
                "the header is malformed or the file size does not match it");
    edf_hostile("edf header only", good, 256, NULL, ECG_ERR_FORMAT, "EDFlib error");
    memcpy(bad, good, len);
    patch(bad, len, 0, "9       "); /* version field */
    edf_hostile("edf bad version", bad, len, NULL, ECG_ERR_FORMAT, "EDFlib error");
    memcpy(bad, good, len);
    patch(bad, len, 252, "x   "); /* number of signals */
    edf_hostile("edf bad signal count", bad, len, NULL, ECG_ERR_FORMAT, "EDFlib error");
    memcpy(bad, good, len);
    patch(bad, len, 236, "-5      "); /* number of data records */
    edf_hostile("edf negative record count", bad, len, NULL, ECG_ERR_FORMAT, "EDFlib error");
    memcpy(bad, good, len);
    patch(bad, len, 244, "0       "); /* record duration */
    edf_hostile("edf zero record duration", bad, len, NULL, ECG_ERR_FORMAT, "EDFlib error");
    memcpy(bad, good, len);
    memset(bad + 256, 0, 64); /* signal labels */
    edf_hostile("edf NUL labels", bad, len, NULL, ECG_ERR_FORMAT, "EDFlib error");
    free(bad);
    free(good);
}

/* ---------------------------------------------------------------- WFDB through the dispatch */

static void test_wfdb_dispatch(void **state)
{
    (void)state;
    struct ecg_signal sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {0};
    /* A record named without extension, with ".hea" and with ".dat". */
    static const char *const paths[] = {ECG_SHARED_DATA "/mitdb/101",
                                        ECG_SHARED_DATA "/mitdb/101.hea",
                                        ECG_SHARED_DATA "/mitdb/101.dat"};
    for (size_t i = 0; i < 3; i++) {
        enum ecg_status st = ecg_read_file(paths[i], &opts, &sig, &err);
        if (st != ECG_OK)
            fprintf(stderr, "%s: %s\n", paths[i], err.message);
        assert_int_equal(st, ECG_OK);
        assert_int_equal(sig.n, 650000);
        assert_true(sig.fs_hz == 360);
        assert_string_equal(sig.lead, "MLII");
        ecg_signal_free(&sig);
    }
}

/* Writes r.hea (and r.dat unless dat is NULL) and reads the record "r". */
static enum ecg_status read_wfdb_case(const char *hea, const void *dat, size_t dat_len,
                                      const char *lead, struct ecg_signal *sig,
                                      struct ecg_error *err)
{
    char path[128];
    tmp_path(path, sizeof path, "r.hea");
    write_file(path, hea, strlen(hea));
    tmp_path(path, sizeof path, "r.dat");
    unlink(path);
    if (dat)
        write_file(path, dat, dat_len);
    tmp_path(path, sizeof path, "r");
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    memset(err, 0, sizeof *err);
    memset(sig, 0xab, sizeof *sig);
    return ecg_read_file(path, &opts, sig, err);
}

static void test_hostile_wfdb(void **state)
{
    (void)state;
    static const unsigned char frames[30] = {0}; /* 10 frames of 2 signals, format 212 */
    const char *good = "r 2 360 10\nr.dat 212 200 11 1024 0 0 0 MLII\n"
                       "r.dat 212 200 11 1024 0 0 0 V1\n";
    struct ecg_signal sig;
    struct ecg_error err;
    enum ecg_status st = read_wfdb_case(good, frames, sizeof frames, "V1", &sig, &err);
    assert_int_equal(st, ECG_OK);
    assert_int_equal(sig.n, 10);
    assert_string_equal(sig.lead, "V1");
    assert_true(sig.samples[0] == -1024.0f / 200.0f);
    ecg_signal_free(&sig);

    st = read_wfdb_case(good, frames, 20, NULL, &sig, &err);
    check_hostile("wfdb short dat", st, &sig, &err, ECG_ERR_FORMAT, "header declares 10 samples");
    st = read_wfdb_case(good, frames, 0, NULL, &sig, &err);
    check_hostile("wfdb empty dat", st, &sig, &err, ECG_ERR_FORMAT, "r.dat");
    st = read_wfdb_case(good, NULL, 0, NULL, &sig, &err);
    assert_int_not_equal(st, ECG_OK);
    assert_non_null(strstr(err.message, "r.dat"));
    assert_null(sig.samples);
    st = read_wfdb_case(good, frames, sizeof frames, "V5", &sig, &err);
    check_hostile("wfdb unknown lead", st, &sig, &err, ECG_ERR_NOT_FOUND, "V5");
    st = read_wfdb_case(good, frames, sizeof frames, "7", &sig, &err);
    check_hostile("wfdb lead index", st, &sig, &err, ECG_ERR_NOT_FOUND, "lead 7");
    st = read_wfdb_case("hello\n", frames, sizeof frames, NULL, &sig, &err);
    check_hostile("wfdb garbage header", st, &sig, &err, ECG_ERR_FORMAT, "r.hea");
    st = read_wfdb_case("", frames, sizeof frames, NULL, &sig, &err);
    assert_int_not_equal(st, ECG_OK);
    assert_null(sig.samples);
    st = read_wfdb_case("r 1 abc 10\nr.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb bad rate", st, &sig, &err, ECG_ERR_FORMAT, "bad sampling frequency");
    st = read_wfdb_case("r 2 360 10\nr.dat 212 200 11 1024 0 0 0 MLII\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb missing signal line", st, &sig, &err, ECG_ERR_FORMAT,
                  "header declares 2 signals, lists 1");
    st = read_wfdb_case("r 1 360 10\nr.dat 8 200 8 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb format 8", st, &sig, &err, ECG_ERR_UNSUPPORTED, "format 8");
    st = read_wfdb_case("r 1 360 10\n../r.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb path in header", st, &sig, &err, ECG_ERR_UNSUPPORTED,
                  "must be a plain name beside the header");
    st = read_wfdb_case("r 1 360 10\nr.dat 16 x/mV 16 0 0 0 0 X\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb bad gain", st, &sig, &err, ECG_ERR_FORMAT, "bad gain");
    st = read_wfdb_case("r/2 1 360 10\nr.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb multi-segment", st, &sig, &err, ECG_ERR_UNSUPPORTED, "multi-segment");
    char binary[] = "r 1 360 10\nr.dat 16 200 16 0 0 0 0 X\n";
    binary[3] = '\0';
    char path[128];
    tmp_path(path, sizeof path, "r.hea");
    write_file(path, binary, sizeof binary - 1);
    tmp_path(path, sizeof path, "r");
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    st = ecg_read_file(path, &opts, &sig, &err);
    check_hostile("wfdb NUL in header", st, &sig, &err, ECG_ERR_FORMAT, "binary data in header");
    tmp_path(path, sizeof path, "r.hea");
    unlink(path);
    tmp_path(path, sizeof path, "r.dat");
    unlink(path);
}

static int group_setup(void **state)
{
    (void)state;
    make_reference();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ecg-readers-XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    static const char *const names[] = {"ref.csv", "ref.f32", "ref.npy", "ref.json", "ref.edf",
                                        "bad.csv", "three.csv"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tmp_path(path, sizeof path, names[i]);
        unlink(path);
    }
    return rmdir(tmp_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_forms),
        cmocka_unit_test(test_csv_real_recording),
        cmocka_unit_test(test_raw_forms),
        cmocka_unit_test(test_npy_forms),
        cmocka_unit_test(test_json_forms),
        cmocka_unit_test(test_edf_forms),
        cmocka_unit_test(test_same_signal_every_format),
        cmocka_unit_test(test_format_names),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_hostile_table),
        cmocka_unit_test(test_hostile_huge_lines),
        cmocka_unit_test(test_hostile_npy),
        cmocka_unit_test(test_hostile_edf),
        cmocka_unit_test(test_wfdb_dispatch),
        cmocka_unit_test(test_hostile_wfdb),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
