/*
 * test_readers.c - the input readers on well-formed input: CSV, raw f32/f64/i16, .npy, EDF,
 * JSON, WFDB through the dispatch, format names and file errors.
 *
 * One signal rendered in every format reads back as the same samples; the real UCR recording
 * reads back with its known count and values. EDF fixtures are written with EDFlib's own
 * writer. Hostile inputs are in test_readers_hostile.c.
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
#include "reader_fixtures.h"

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

/*
 * A file of one number per line written with decimal commas, as a spreadsheet in such a locale
 * saves one column: read as that column, not as two split at the comma (read_csv.c's
 * comma_file), the answer told; the readings it cannot rule out are kept or refused.
 */
static void test_csv_decimal_comma(void **state)
{
    (void)state;
    struct ecg_signal dot, sig;
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.fs_hz = 250};

    /* The UCR recording with ',' for '.': the same 50,000 samples, bit for bit, and the flag. */
    assert_int_equal(ecg_read_file(ECG_SHARED_DATA "/ucr/ecg50T.txt", &opts, &dot, &err), ECG_OK);
    assert_false(dot.decimal_comma);
    FILE *f = fopen(ECG_SHARED_DATA "/ucr/ecg50T.txt", "rb");
    assert_non_null(f);
    char *text = malloc(1 << 20);
    assert_non_null(text);
    size_t len = fread(text, 1, 1 << 20, f);
    fclose(f);
    assert_true(len > 0 && len < (1 << 20));
    size_t commas = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '.')
            text[i] = ',', commas++;
    assert_true(commas > 40000); /* most lines have a fraction; some ("0") do not */
    assert_int_equal(read_mem(text, len, ECG_FORMAT_CSV, 250, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, dot.n);
    assert_memory_equal(sig.samples, dot.samples, dot.n * sizeof(float));
    assert_true(sig.decimal_comma);
    assert_string_equal(sig.time_column, "");
    ecg_signal_free(&sig);
    /* a lead list reads the one column once; a second column does not exist */
    assert_int_equal(read_mem(text, len, ECG_FORMAT_CSV, 250, "all", &sig, &err), ECG_OK);
    assert_int_equal(sig.n_extra, 0);
    assert_memory_equal(sig.samples, dot.samples, dot.n * sizeof(float));
    assert_true(sig.decimal_comma);
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(text, len, ECG_FORMAT_CSV, 250, "1", &sig, &err),
                     ECG_ERR_NOT_FOUND);

    /* The same numbers behind a time column, tab- and then ';'-separated, as such a
     * spreadsheet exports several columns: the time is recognised (its own decimal commas) and
     * skipped, the signal read bit for bit. */
    struct ecg_buf rows = {0};
    for (int sep = 0; sep < 2; sep++) {
        const char *line = text;
        for (size_t i = 0; line < text + len; i++) {
            const char *nl = memchr(line, '\n', (size_t)(text + len - line));
            const char *e = nl ? nl : text + len;
            char t[32];
            snprintf(t, sizeof t, "%.3f", (double)i / 250.0);
            *strchr(t, '.') = ',';
            if (e > line)
                ecg_buf_printf(&rows, "%s%c%.*s\n", t, sep ? ';' : '\t', (int)(e - line), line);
            line = nl ? nl + 1 : text + len;
        }
        assert_false(rows.failed);
        assert_int_equal(read_mem(rows.data, rows.len, ECG_FORMAT_CSV, 250, NULL, &sig, &err),
                         ECG_OK);
        assert_int_equal(sig.n, dot.n);
        assert_memory_equal(sig.samples, dot.samples, dot.n * sizeof(float));
        assert_string_equal(sig.time_column, "column 1");
        assert_true(sig.decimal_comma);
        ecg_signal_free(&sig);
        ecg_buf_fini(&rows);
    }
    free(text);
    ecg_signal_free(&dot);

    /* Tab-separated, but every number could hold a thousands separator: refused. A ',' file
     * padded with tabs stays comma-separated. */
    const char *grouped = "1,024\t2,048\n3,072\t4,096\n";
    assert_int_equal(read_mem(grouped, strlen(grouped), ECG_FORMAT_CSV, 100, "1", &sig, &err),
                     ECG_ERR_FORMAT);
    assert_string_equal(err.code, "ambiguous_csv");
    assert_non_null(strstr(err.message, "line 1, column 2 (\"2,048\")"));
    const char *padded_tabs = "0.1,\t0.2\n0.3,\t0.4\n";
    assert_int_equal(read_mem(padded_tabs, strlen(padded_tabs), ECG_FORMAT_CSV, 100, "1", &sig,
                              &err),
                     ECG_OK);
    assert_true(sig.samples[0] == 0.2f && sig.samples[1] == 0.4f);
    assert_false(sig.decimal_comma);
    ecg_signal_free(&sig);

    /* Every line with a comma, but fractions with leading zeros: one column. */
    const char *padded = "0,05\r\n-0,125\r\n1,250\r\n";
    assert_int_equal(read_mem(padded, strlen(padded), ECG_FORMAT_CSV, 100, NULL, &sig, &err),
                     ECG_OK);
    float want_padded[] = {0.05f, -0.125f, 1.25f};
    assert_int_equal(sig.n, 3);
    assert_memory_equal(sig.samples, want_padded, sizeof want_padded);
    assert_true(sig.decimal_comma);
    ecg_signal_free(&sig);

    /* Nothing rules out two integer columns: read as columns, as any CSV. */
    const char *pairs = "12,512\n13,498\n14,1023\n";
    assert_int_equal(read_mem(pairs, strlen(pairs), ECG_FORMAT_CSV, 100, "1", &sig, &err),
                     ECG_OK);
    float want_pairs[] = {512, 498, 1023};
    assert_memory_equal(sig.samples, want_pairs, sizeof want_pairs);
    assert_false(sig.decimal_comma);
    ecg_signal_free(&sig);

    /* One column, but the comma may be a thousands separator: refused, with the line. */
    const char *thousands = "\n512\n1,024\n998\n";
    assert_int_equal(read_mem(thousands, strlen(thousands), ECG_FORMAT_CSV, 100, NULL, &sig,
                              &err),
                     ECG_ERR_FORMAT);
    assert_string_equal(err.code, "ambiguous_csv");
    assert_non_null(strstr(err.message, "line 3 (\"1,024\")"));

    /* A one-column file with a header, and ';' files: their commas are decimal marks too. */
    const char *headed = "mV\n-0,02\n0\n1,5\n";
    assert_int_equal(read_mem(headed, strlen(headed), ECG_FORMAT_CSV, 100, NULL, &sig, &err),
                     ECG_OK);
    float want_headed[] = {-0.02f, 0, 1.5f};
    assert_memory_equal(sig.samples, want_headed, sizeof want_headed);
    assert_string_equal(sig.lead, "mV");
    assert_true(sig.decimal_comma);
    ecg_signal_free(&sig);
    const char *semi = "1,25;1,30\n2;3\n";
    assert_int_equal(read_mem(semi, strlen(semi), ECG_FORMAT_CSV, 100, NULL, &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == 1.25f && sig.samples[1] == 2.0f);
    assert_true(sig.decimal_comma);
    ecg_signal_free(&sig);
    const char *plain = "1.25;1.30\n2;3\n";
    assert_int_equal(read_mem(plain, strlen(plain), ECG_FORMAT_CSV, 100, NULL, &sig, &err),
                     ECG_OK);
    assert_false(sig.decimal_comma);
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
        struct bytes b = make_npy(
            major, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4, sizeof f4);
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
    struct bytes b =
        make_npy(1, "{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(3,)}", f8, sizeof f8);
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
    assert_int_equal(read_mem(doc, strlen(doc), ECG_FORMAT_AUTO, 500, "MLII", &sig, &err), ECG_OK);
    assert_true(sig.fs_hz == 360);
    ecg_signal_free(&sig);
    /* A bare array takes the rate from the options. */
    const char *bare = " [1, 2, 3]\n";
    assert_int_equal(read_mem(bare, strlen(bare), ECG_FORMAT_AUTO, 128, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.fs_hz == 128 && sig.samples[2] == 3);
    ecg_signal_free(&sig);
    const char *fs_hz = "{\"fs_hz\": 250.5, \"signal\": [0]}";
    assert_int_equal(read_mem(fs_hz, strlen(fs_hz), ECG_FORMAT_JSON, 0, NULL, &sig, &err), ECG_OK);
    assert_true(sig.fs_hz == 250.5);
    ecg_signal_free(&sig);
    /* Samples x leads: a column by index (the first by default) or by a name in "leads";
     * other keys, of any type, are skipped. */
    const char *rows = "{\"fs\": 250, \"leads\": [\"MLII\", \"V5\"], \"note\": {\"a\": [1, "
                       "{\"b\": null}]}, \"signal\": [[1, -1], [2, -2.5], [3, 1e-2]]}";
    assert_int_equal(read_mem(rows, strlen(rows), ECG_FORMAT_JSON, 0, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 3);
    assert_true(sig.samples[0] == 1 && sig.samples[2] == 3);
    assert_string_equal(sig.lead, "MLII");
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(rows, strlen(rows), ECG_FORMAT_JSON, 0, "V5", &sig, &err), ECG_OK);
    assert_true(sig.samples[0] == -1 && sig.samples[1] == -2.5f && sig.samples[2] == 0.01f);
    assert_string_equal(sig.lead, "V5");
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(rows, strlen(rows), ECG_FORMAT_JSON, 0, "1", &sig, &err), ECG_OK);
    assert_true(sig.samples[1] == -2.5f);
    ecg_signal_free(&sig);
    assert_int_equal(read_mem(rows, strlen(rows), ECG_FORMAT_JSON, 0, "V2", &sig, &err),
                     ECG_ERR_NOT_FOUND);
    assert_int_equal(read_mem(rows, strlen(rows), ECG_FORMAT_JSON, 0, "2", &sig, &err),
                     ECG_ERR_NOT_FOUND);
    /* Every number converts exactly as strtod-then-float (the rounding cJSON gave). */
    char big[64 * 40 + 64];
    size_t at = (size_t)snprintf(big, sizeof big, "{\"fs\": 360, \"signal\": [");
    double want[64];
    unsigned seed = 12345;
    for (int i = 0; i < 64; i++) {
        seed = seed * 1103515245u + 12345u;
        want[i] = ((double)(seed >> 8) / 16777216.0 - 0.5) * pow(10.0, (int)(seed % 9) - 4);
        at += (size_t)snprintf(big + at, sizeof big - at, "%s%.17g", i ? ", " : "", want[i]);
    }
    snprintf(big + at, sizeof big - at, "]}");
    assert_int_equal(read_mem(big, strlen(big), ECG_FORMAT_JSON, 0, NULL, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, 64);
    for (int i = 0; i < 64; i++)
        assert_true(sig.samples[i] == (float)want[i]);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_forms),
        cmocka_unit_test(test_csv_real_recording),
        cmocka_unit_test(test_csv_decimal_comma),
        cmocka_unit_test(test_raw_forms),
        cmocka_unit_test(test_npy_forms),
        cmocka_unit_test(test_json_forms),
        cmocka_unit_test(test_edf_forms),
        cmocka_unit_test(test_same_signal_every_format),
        cmocka_unit_test(test_format_names),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_wfdb_dispatch),
    };
    return cmocka_run_group_tests(tests, fixtures_setup, fixtures_teardown);
}
