/*
 * test_readers_hostile.c - the input readers on hostile input: truncated, oversized, wrong type,
 * NaN and Inf, empty, huge lines, bad UTF-8 and binary garbage, lying headers, ragged CSV, bad
 * .npy magic/version/dtype/shape, corrupt EDF headers, JSON of the wrong shape, broken WFDB
 * records. Each case checks the exact status, a piece of the message, and an empty output.
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
    {"csv negative rate", ECG_FORMAT_CSV, TXT("1\n2\n"), -5, NULL, 0, ECG_ERR_ARG, "not positive"},
    {"csv NaN rate", ECG_FORMAT_CSV, TXT("1\n2\n"), NAN, NULL, 0, ECG_ERR_ARG, "not positive"},
    {"csv word", ECG_FORMAT_CSV, TXT("1\n2\nabc\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 3, column 1: expected a number, got \"abc\""},
    {"csv nan", ECG_FORMAT_CSV, TXT("1\n2\nnan\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 3, column 1: \"nan\" is not a finite number"},
    {"csv inf", ECG_FORMAT_CSV, TXT("1\r\ninf\r\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: \"inf\" is not a finite number"},
    {"csv -Infinity", ECG_FORMAT_CSV, TXT("a,b\n1,2\n3,-Infinity\n"), 250, "b", 0, ECG_ERR_FORMAT,
     "line 3, column 2: \"-Infinity\" is not a finite number"},
    {"csv overflow", ECG_FORMAT_CSV, TXT("1\n1e39\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: \"1e39\" is outside the float range"},
    {"csv overflow in column", ECG_FORMAT_CSV, TXT("1,2\n3,-4e38\n"), 250, "1", 0, ECG_ERR_FORMAT,
     "line 2, column 2: \"-4e38\" is outside the float range"},
    {"csv ragged", ECG_FORMAT_CSV, TXT("a,b\n1,2\n3\n"), 250, "1", 0, ECG_ERR_FORMAT,
     "line 3: missing column 2 (the line has 1)"},
    {"csv unknown name", ECG_FORMAT_CSV, TXT("a,b\n1,2\n"), 250, "V5", 0, ECG_ERR_NOT_FOUND,
     "no column named \"V5\""},
    {"csv name without header", ECG_FORMAT_CSV, TXT("1,2\n"), 250, "MLII", 0, ECG_ERR_NOT_FOUND,
     "no header row"},
    {"csv index out of range", ECG_FORMAT_CSV, TXT("1,2\n3,4\n"), 250, "5", 0, ECG_ERR_NOT_FOUND,
     "column 5 does not exist: line 1 has 2 columns"},
    {"csv header index out of range", ECG_FORMAT_CSV, TXT("a,b\n3,4\n"), 250, "2", 0,
     ECG_ERR_NOT_FOUND, "column 2 does not exist"},
    {"csv bad utf-8", ECG_FORMAT_CSV, TXT("1\n\xff\xfe\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got \"\\xff\\xfe\""},
    {"csv NUL byte", ECG_FORMAT_CSV, TXT("1\n2\0\x01\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2: control byte 0x00"},
    {"csv binary header", ECG_FORMAT_CSV, TXT("\x01\x02\x03\n1\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 1: control byte 0x01"},
    {"csv empty field", ECG_FORMAT_CSV, TXT("1,2\n,3\n"), 250, "0", 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got an empty field"},
    {"csv empty middle field", ECG_FORMAT_CSV, TXT("1,2,3\n4,,6\n"), 250, "1", 0, ECG_ERR_FORMAT,
     "line 2, column 2: expected a number, got an empty field"},
    {"csv trailing junk", ECG_FORMAT_CSV, TXT("1.5abc\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 1, column 1: expected a number, got \"1.5abc\""},
    {"csv exponent without digits", ECG_FORMAT_CSV, TXT("1\n2e\n"), 250, NULL, 0, ECG_ERR_FORMAT,
     "line 2, column 1: expected a number, got \"2e\""},
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
    {"f64 beyond float", ECG_FORMAT_F64, TXT("\0\0\0\0\0\0\xf0\x7e"), 250, NULL, 0, ECG_ERR_FORMAT,
     "outside the float range"},
    {"f32 no rate", ECG_FORMAT_F32, TXT("\0\0\x80?"), 0, NULL, 0, ECG_ERR_ARG,
     "raw binary input carries no sampling rate: give fs"},
    {"f32 too many", ECG_FORMAT_F32, TXT("\0\0\x80?\0\0\x80?\0\0\x80?"), 250, NULL, 2,
     ECG_ERR_TOO_LARGE, "3 samples exceed the limit of 2"},
    {"f32 empty", ECG_FORMAT_F32, TXT(""), 250, NULL, 0, ECG_ERR_FORMAT, "input is empty"},
    {"f32 named lead", ECG_FORMAT_F32, TXT("\0\0\x80?"), 250, "MLII", 0, ECG_ERR_NOT_FOUND,
     "holds one lead"},
    {"binary without format", ECG_FORMAT_AUTO, TXT("\0\0\x80?\x01\x02"), 250, NULL, 0, ECG_ERR_ARG,
     "cannot tell the format"},
    {"wfdb from memory", ECG_FORMAT_WFDB, TXT("100 2 360 650000\n"), 0, NULL, 0, ECG_ERR_ARG,
     "read them from files"},
    /* npy (preamble and header only; data-bearing cases are built in test_hostile_npy) */
    {"npy bad magic", ECG_FORMAT_NPY, TXT("\x93NUMPX\x01\x00\x10\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "magic"},
    {"npy truncated preamble", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01"), 250, NULL, 0, ECG_ERR_FORMAT,
     "magic"},
    {"npy version 4", ECG_FORMAT_NPY, TXT("\x93NUMPY\x04\x00\x10\x00\x00\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "version 4.0 is not supported"},
    {"npy version 1.1", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01\x01\x02\x00{}"), 250, NULL, 0,
     ECG_ERR_FORMAT, "version 1.1 is not supported"},
    {"npy header beyond file", ECG_FORMAT_NPY, TXT("\x93NUMPY\x01\x00\xff\x7f{'descr'"), 250, NULL,
     0, ECG_ERR_FORMAT, "header claims 32767 bytes but only 8 follow"},
    {"npy v2 truncated", ECG_FORMAT_NPY, TXT("\x93NUMPY\x02\x00\x01\x00"), 250, NULL, 0,
     ECG_ERR_FORMAT, "the preamble needs 12"},
    /* JSON */
    {"json string element", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, \"a\", 3]}"), 0,
     NULL, 0, ECG_ERR_FORMAT, "signal[1] must be a number, got a string"},
    {"json nested array", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [[1, 2], [3]]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "signal row 1 has 1 values, expected 2"},
    {"json null element", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 2, null]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "signal[2] must be a number, got null"},
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
    {"json NaN literal", ECG_FORMAT_JSON, TXT("{\"fs\": 360,\n \"signal\": [1, NaN]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "syntax error at line 2, column 16"},
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
    {"json lead not string", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"lead\": 2, \"signal\": [1]}"), 0,
     NULL, 0, ECG_ERR_FORMAT, "\"lead\" must be a string, got a number"},
    {"json binary", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, \xff]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "near \"\\xff]}\""},
    {"json too many", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 2, 3]}"), 0, NULL, 2,
     ECG_ERR_TOO_LARGE, "3 samples exceed the limit of 2"},
    {"json duplicate key", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1], \"fs\": 250}"),
     0, NULL, 0, ECG_ERR_FORMAT, "key \"fs\" appears more than once"},
    {"json nested duplicate key", ECG_FORMAT_JSON,
     TXT("{\"fs\": 360, \"x\": {\"a\": 1, \"a\": 2}, \"signal\": [1]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "key \"a\" appears more than once"},
    {"json fs and fs_hz", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"fs_hz\": 250, \"signal\": [1]}"),
     0, NULL, 0, ECG_ERR_FORMAT, "\"fs\" and \"fs_hz\" both given"},
    {"json leading zero", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [1, 012]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "syntax error at line 1, column 28"},
    {"json plus sign", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [+1]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "syntax error at line 1, column 24"},
    {"json hex", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [0x10]}"), 0, NULL, 0,
     ECG_ERR_FORMAT, "syntax error"},
    {"json mixed rows", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [[1, 2], 3]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "signal rows must be lists of numbers"},
    {"json rows in rows", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"signal\": [[[1]]]}"), 0, NULL,
     0, ECG_ERR_FORMAT, "signal rows must hold numbers only, got an array"},
    {"json deep", ECG_FORMAT_JSON,
     TXT("{\"x\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], \"signal\": [1]}"),
     0, NULL, 0, ECG_ERR_FORMAT, "nesting too deep"},
    {"json long number", ECG_FORMAT_JSON,
     TXT("{\"fs\": 360, \"signal\": [1.0000000000000000000000000000000000000000000000000000000000000000001]}"),
     0, NULL, 0, ECG_ERR_FORMAT, "number longer than 63 characters"},
    {"json control in string", ECG_FORMAT_JSON, TXT("{\"fs\": 360, \"lead\": \"a\x01\", \"signal\": [1]}"),
     0, NULL, 0, ECG_ERR_FORMAT, "control character in a string"},
    /* EDF (header-level; file-level cases are built in test_hostile_edf) */
    {"edf short", ECG_FORMAT_EDF, TXT("0       short"), 0, NULL, 0, ECG_ERR_FORMAT,
     "EDF input truncated: 13 bytes"},
};

static void test_hostile_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof hostile_cases / sizeof hostile_cases[0]; i++) {
        const struct hostile *h = &hostile_cases[i];
        /* An exact-size copy, so that a read past the end shows under ASan. */
        char *copy = malloc(h->len ? h->len : 1);
        assert_non_null(copy);
        memcpy(copy, h->bytes, h->len);
        struct ecg_read_opts opts = {
            .format = h->format, .fs_hz = h->fs_hz, .lead = h->lead, .max_samples = h->max_samples};
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
    hostile_npy("npy lying shape", 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }", ten, sizeof ten,
                NULL, ECG_ERR_FORMAT, "the shape needs 4000 bytes, the file holds 40");
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
    hostile_npy("npy 3-D", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 1), }", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "more than 2 dimensions");
    hostile_npy("npy scalar", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", ten, 4,
                NULL, ECG_ERR_FORMAT, "scalar");
    hostile_npy("npy zero length", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }",
                NULL, 0, NULL, ECG_ERR_FORMAT, "npy array is empty");
    hostile_npy("npy unknown key", 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), 'foo': 1}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "unknown key \"foo\"");
    hostile_npy("npy repeated key", 1,
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (10,)}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "key \"descr\" repeated");
    hostile_npy("npy missing shape", 1, "{'descr': '<f4', 'fortran_order': False}", ten, sizeof ten,
                NULL, ECG_ERR_FORMAT, "lacks 'shape'");
    hostile_npy("npy unclosed dict", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "expected ',' or '}'");
    hostile_npy("npy bad bool", 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (10,)}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "expected True or False, got \"Maybe");
    hostile_npy("npy negative dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-10,)}",
                ten, sizeof ten, NULL, ECG_ERR_FORMAT, "expected a dimension");
    hostile_npy("npy overflowing shape", 1,
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", ten,
                sizeof ten, NULL, ECG_ERR_FORMAT, "is too large");
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
    hostile_npy("npy NaN", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", with_nan,
                sizeof with_nan, NULL, ECG_ERR_FORMAT, "npy: sample 2 is NaN");

    /* No rate. */
    struct bytes b =
        make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,)}", ten, sizeof ten);
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
    /* found by fuzz_wfdb: numbers to strtod, but infinite */
    st = read_wfdb_case("r 1 18e0360 10\nr.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb infinite rate", st, &sig, &err, ECG_ERR_FORMAT, "bad sampling frequency");
    st = read_wfdb_case("r 1 inf 10\nr.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb rate inf", st, &sig, &err, ECG_ERR_FORMAT, "bad sampling frequency");
    st = read_wfdb_case("r 1 360 10\nr.dat 16 1e999 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb infinite gain", st, &sig, &err, ECG_ERR_FORMAT, "bad gain");
    /* a baseline beyond any sample (was a signed overflow, UBSan): read, finite */
    st = read_wfdb_case("r 1 360 10\nr.dat 16 200 16 99999999999999999999999 0 0 0 X\n", frames,
                        sizeof frames, NULL, &sig, &err);
    assert_int_equal(st, ECG_OK);
    assert_true(sig.samples[0] == (float)((-1024.0 - 9223372036854775807.0) / 200.0));
    ecg_signal_free(&sig);
    st = read_wfdb_case("r 2 360 10\nr.dat 212 200 11 1024 0 0 0 MLII\n", frames, sizeof frames,
                        NULL, &sig, &err);
    check_hostile("wfdb missing signal line", st, &sig, &err, ECG_ERR_FORMAT,
                  "header declares 2 signals, lists 1");
    st = read_wfdb_case("r 1 360 10\nr.dat 8 200 8 0 0 0 0 X\n", frames, sizeof frames, NULL, &sig,
                        &err);
    check_hostile("wfdb format 8", st, &sig, &err, ECG_ERR_UNSUPPORTED, "format 8");
    st = read_wfdb_case("r 1 360 10\n../r.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb path in header", st, &sig, &err, ECG_ERR_UNSUPPORTED,
                  "must be a plain name beside the header");
    st = read_wfdb_case("r 1 360 10\nr.dat 16 x/mV 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
    check_hostile("wfdb bad gain", st, &sig, &err, ECG_ERR_FORMAT, "bad gain");
    st = read_wfdb_case("r/2 1 360 10\nr.dat 16 200 16 0 0 0 0 X\n", frames, sizeof frames, NULL,
                        &sig, &err);
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
/* A NaN or an infinity anywhere in a long float32 body: the first one is named, wherever it
 * falls in the blocks read_check_finite tests at once (first, last, either side of a block
 * edge, after a bad sample of a later block). */
static void test_hostile_nonfinite_anywhere(void **state)
{
    (void)state;
    enum { N = 300 };
    static const size_t at[] = {0, 1, 62, 63, 64, 65, 127, 128, 191, 255, 256, 298, 299};
    float v[N];
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        for (int kind = 0; kind < 3; kind++) {
            for (size_t i = 0; i < N; i++)
                v[i] = (float)i * 0.01f - 1.0f;
            v[at[k]] = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
            if (at[k] + 70 < N) /* a second one later: the first is reported */
                v[at[k] + 70] = NAN;
            struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
            struct ecg_signal sig;
            struct ecg_error err = {0};
            assert_int_equal(ecg_read_memory(v, sizeof v, &opts, &sig, &err), ECG_ERR_FORMAT);
            char want[64];
            snprintf(want, sizeof want, "f32: sample %zu is %s", at[k], kind ? "infinite" : "NaN");
            assert_string_equal(err.message, want);
        }
    }
    for (size_t i = 0; i < N; i++) /* and finite values near the limits pass */
        v[i] = i % 2 ? 3.4028234e38f : -1.17549435e-38f;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
    struct ecg_signal sig;
    struct ecg_error err = {0};
    assert_int_equal(ecg_read_memory(v, sizeof v, &opts, &sig, &err), ECG_OK);
    assert_int_equal(sig.n, N);
    ecg_signal_free(&sig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_table), cmocka_unit_test(test_hostile_huge_lines),
        cmocka_unit_test(test_hostile_npy),   cmocka_unit_test(test_hostile_edf),
        cmocka_unit_test(test_hostile_wfdb),  cmocka_unit_test(test_hostile_nonfinite_anywhere),
    };
    return cmocka_run_group_tests(tests, fixtures_setup, fixtures_teardown);
}
