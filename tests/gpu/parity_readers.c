/*
 * parity_readers.c - test_gpu_parity, the device's parsers: CSV, raw samples,
 * .npy and EDF/BDF bodies converted on the device must equal the host readers' samples bit for
 * bit; bodies the device declines reach the host reader, whose error the caller gets unchanged.
 */
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

#include "parity.h"
#include "reader_fixtures.h"

#include "backend.h"
#include "ecg.h"
#include "model.h"

/* ---------------------------------------------------------------- readers on the device */

/* Loads bytes on the GPU and on the host; the samples must be bit-identical. */
static void bytes_parity(struct pair *p, const char *buf, size_t len,
                         const struct ecg_read_opts *opts, const char *what, bool expect_device)
{
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    size_t n = 0, got = 0;
    double fs = 0;
    char lead[32] = "";
    if (ecg_read_memory(buf, len, opts, &sig, &err) != ECG_OK)
        fail_msg("%s: the host reader refused it: %s", what, err.message);
    enum ecg_status st = p->gpu->load_bytes(p->gpu_ctx, buf, len, opts, &n, &fs, lead, &err);
    if (st == ECG_ERR_UNSUPPORTED) {
        printf("#   %s: handed to the host reader\n", what);
        if (expect_device)
            fail_msg("%s: the device parser refused a clean input", what);
        ecg_signal_free(&sig);
        return;
    }
    if (st != ECG_OK)
        fail_msg("%s: %s", what, err.message);
    assert_int_equal(n, sig.n);
    assert_true(fs == sig.fs_hz);
    assert_string_equal(lead, sig.lead);
    float *v = read_all(p->gpu, p->gpu_ctx, ECG_BUF_INPUT, sizeof(float), &got);
    assert_int_equal(got, sig.n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&v[i], &sig.samples[i], sizeof(float)) != 0) {
            if (differ < 5)
                printf("#   sample %zu: gpu %a host %a\n", i, v[i], sig.samples[i]);
            differ++;
        }
    printf("#   %s: %zu samples, %zu differ in their bits\n", what, n, differ);
    assert_int_equal(differ, 0);
    free(v);
    ecg_signal_free(&sig);
}

/* bytes_parity() of a body the device must convert, from a copy in the backend's pinned host
 * memory when pinned (the DMA path, and a span from an offset of it), else from body itself. */
static void bytes_parity_from(struct pair *p, const unsigned char *body, size_t len,
                              const struct ecg_read_opts *opts, const char *what, bool pinned)
{
    void *copy = NULL;
    if (pinned && p->gpu->host_alloc) {
        copy = p->gpu->host_alloc(p->gpu_state, len);
        assert_non_null(copy);
        memcpy(copy, body, len);
    }
    bytes_parity(p, (const char *)(copy ? copy : body), len, opts, what, true);
    if (copy)
        p->gpu->host_free(p->gpu_state, copy);
}

/* Random decimal tokens of every shape the grammar allows, hard ones included. */
static void random_token(char *out, size_t cap, unsigned *seed)
{
    int shape = rand_r(seed) % 10;
    char digits[64];
    int nd = 1 + rand_r(seed) % (shape == 9 ? 30 : 9); /* < 10^38: in float range */
    for (int i = 0; i < nd; i++)
        digits[i] = (char)('0' + rand_r(seed) % 10);
    digits[nd] = 0;
    int point = rand_r(seed) % (nd + 1);
    const char *sign = rand_r(seed) % 3 == 0 ? "-" : (rand_r(seed) % 7 == 0 ? "+" : "");
    if (shape <= 5) {
        snprintf(out, cap, "%s%.*s.%s", sign, point, digits, digits + point);
    } else if (shape <= 7) {
        snprintf(out, cap, "%s%.*s.%se%d", sign, point ? point : 1, digits,
                 digits + (point ? point : 1), rand_r(seed) % 60 - 30);
    } else if (shape == 8) {
        float f = (float)rand_r(seed) / (float)RAND_MAX * 10.0f - 5.0f;
        snprintf(out, cap, "%.9g", (double)f);
    } else {
        snprintf(out, cap, "%s%s", sign, digits);
    }
}

void test_csv_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
    unsigned seed = 1234;
    size_t lines = quick() ? 20000 : 400000;
    struct ecg_buf text = {0};
    char tok[128];
    /* one column */
    for (size_t i = 0; i < lines; i++) {
        random_token(tok, sizeof tok, &seed);
        ecg_buf_printf(&text, "%s\n", tok);
    }
    assert_false(text.failed);
    bytes_parity(p, text.data, text.len, &opts, "csv random tokens", true);
    ecg_buf_fini(&text);
    /* three columns, CRLF, a header, blank lines, spaces; select by name. Comma-separated,
     * and a first column that is no time axis: semicolons (which may come with decimal
     * commas) and a likely time column go to the host reader by design (cuda_read.cu). */
    ecg_buf_puts(&text, "\xef\xbb\xbf resp , MLII ,V5\r\n");
    for (size_t i = 0; i < lines / 4; i++) {
        random_token(tok, sizeof tok, &seed);
        ecg_buf_printf(&text, "%g , %s ,1.5\r\n", (double)(i % 7) * 0.25, tok);
        if (i % 1000 == 7)
            ecg_buf_puts(&text, "  \r\n");
    }
    opts.lead = "mlii";
    bytes_parity(p, text.data, text.len, &opts, "csv header/blank/crlf", true);
    ecg_buf_fini(&text);
    /* the shared excerpt */
    {
        char path[512];
        snprintf(path, sizeof path, "%s/mitdb_100s.csv", ECG_TEST_DATA);
        FILE *f = fopen(path, "rb");
        if (f) {
            char chunk[65536];
            size_t got;
            while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
                ecg_buf_append(&text, chunk, got);
            fclose(f);
            opts.lead = "V1";
            bytes_parity(p, text.data, text.len, &opts, "mitdb_100s.csv lead V1", true);
            opts.lead = NULL;
            bytes_parity(p, text.data, text.len, &opts, "mitdb_100s.csv lead 0", true);
            ecg_buf_fini(&text);
        }
    }
    /* bad inputs go back to the host, which reports them */
    static const char *const bad[] = {"1.0\n2.0\nabc\n", "1.0\nnan\n", "1e40\n1\n", "1,2\n3\n",
                                      "1\n\x01\n"};
    opts.lead = "1";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = 0;
        double fs = 0;
        char lead[32];
        struct ecg_error err = {0};
        enum ecg_status st =
            p->gpu->load_bytes(p->gpu_ctx, bad[i], strlen(bad[i]), &opts, &n, &fs, lead, &err);
        assert_int_equal(st, ECG_ERR_UNSUPPORTED);
    }
    /* numbers with decimal commas, one per line (read_csv.c's comma_file), with a header and
     * without, and tab-separated: the host reader's, which reads them as one column (or the
     * tab file's first) */
    static const char *const comma[] = {"-0,02\n0\n1,5\n", "mV\n-0,02\n0\n1,5\n",
                                        "-0,02\t1,5\n0\t2\n"};
    opts.lead = NULL;
    for (size_t i = 0; i < sizeof comma / sizeof comma[0]; i++) {
        size_t n = 0;
        double fs = 0;
        char lead[32];
        struct ecg_error err = {0};
        enum ecg_status st = p->gpu->load_bytes(p->gpu_ctx, comma[i], strlen(comma[i]), &opts,
                                                &n, &fs, lead, &err);
        assert_int_equal(st, ECG_ERR_UNSUPPORTED);
    }
}

void test_raw_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    size_t n = 100003;
    unsigned seed = 99;
    unsigned char *buf = malloc(n * 8);
    assert_non_null(buf);
    for (size_t i = 0; i < n * 8; i++)
        buf[i] = (unsigned char)rand_r(&seed);
    /* float32 and float64 need finite values: build them */
    float *f = (float *)buf;
    for (size_t i = 0; i < n; i++)
        f[i] = (float)rand_r(&seed) / (float)RAND_MAX * 20.0f - 10.0f;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
    bytes_parity(p, (const char *)buf, n * 4, &opts, "f32", true);
    double *d = (double *)buf;
    for (size_t i = 0; i < n; i++)
        d[i] = ((double)rand_r(&seed) / RAND_MAX - 0.5) * 1e3;
    opts.format = ECG_FORMAT_F64;
    bytes_parity(p, (const char *)buf, n * 8, &opts, "f64", true);
    opts.format = ECG_FORMAT_I16;
    bytes_parity(p, (const char *)buf, n * 2, &opts, "i16", true);
    f[17] = NAN;
    opts.format = ECG_FORMAT_F32;
    size_t got = 0;
    double fs;
    char lead[32];
    struct ecg_error err = {0};
    assert_int_equal(p->gpu->load_bytes(p->gpu_ctx, buf, n * 4, &opts, &got, &fs, lead, &err),
                     ECG_ERR_UNSUPPORTED);
    free(buf);
}

/* ---------------------------------------------------------------- .npy on the device */

/* One .npy array of the tests. */
struct npy_case {
    const char *what;
    const char *descr;           /* "<f4", ">f8", "|u1"... */
    size_t leads;                /* 0: 1-D (n,); else 2-D (n, leads) */
    bool fortran;
    const char *lead;            /* opts.lead */
    int major;                   /* header version 1, 2 or 3 */
    size_t misalign;             /* offset of the data mod 64 (numpy writes 0) */
    enum ecg_format format;      /* NPY, or AUTO for the sniffer */
    bool pinned;                 /* in the backend's host memory (one DMA from an offset) */
};

/* Random bits of one element: any for integers; for floats finite values of every class,
 * float64 ones chosen to stress the cast to float (rounding, subnormal results, underflow to
 * zero, -0, values just above FLT_MAX that round down to it). */
static uint64_t npy_random_bits(char kind, size_t size, unsigned *seed)
{
    uint64_t u = (uint64_t)rand_r(seed) << 42 ^ (uint64_t)rand_r(seed) << 21 ^
                 (uint64_t)rand_r(seed);
    if (kind != 'f')
        return u;
    if (size == 4) {
        uint32_t b = (uint32_t)u;
        if ((b >> 23 & 0xffu) == 0xffu)
            b ^= 1u << 23; /* NaN/Inf -> a finite value */
        return b;
    }
    static const double special[] = {3.4028235e38, -3.4028235e38, 3.4028234663852886e38, 1e-40,
                                     -1e-42,       1e-50,         -0.0,                  0.0,
                                     1.0000000596046448, 1.0000001788139343};
    int pick = rand_r(seed) % 40;
    double d;
    if (pick < (int)(sizeof special / sizeof special[0])) {
        d = special[pick];
    } else {
        /* mantissa 1.xxx with 52 random bits, exponent in [-160, 126]: float normals,
         * subnormals and zeros, never past FLT_MAX */
        double m = 1.0 + (double)(u & ((1ull << 52) - 1)) / 4503599627370496.0;
        d = ldexp(m, rand_r(seed) % 287 - 160) * (rand_r(seed) & 1 ? -1 : 1);
    }
    memcpy(&u, &d, sizeof u);
    return u;
}

/* The .npy body of case c with n rows of random elements (seeded); *len its length. */
static unsigned char *npy_build(const struct npy_case *c, size_t n, unsigned seed, size_t *len)
{
    char dict[256], shape[64];
    if (c->leads)
        snprintf(shape, sizeof shape, "(%zu, %zu)", n, c->leads);
    else
        snprintf(shape, sizeof shape, "(%zu,)", n);
    int dict_len =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                 c->descr, c->fortran ? "True" : "False", shape);
    assert_true(dict_len > 0 && (size_t)dict_len < sizeof dict);
    size_t pre = c->major == 1 ? 10 : 12, header_len = (size_t)dict_len + 1; /* + '\n' */
    while ((pre + header_len) % 64 != c->misalign)
        header_len++;
    size_t size = (size_t)(c->descr[2] - '0'), elements = n * (c->leads ? c->leads : 1);
    *len = pre + header_len + elements * size;
    unsigned char *b = malloc(*len);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)c->major;
    b[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        b[8 + k] = (unsigned char)(header_len >> (8 * k));
    memset(b + pre, ' ', header_len);
    memcpy(b + pre, dict, (size_t)dict_len);
    b[pre + header_len - 1] = '\n';
    unsigned char *data = b + pre + header_len;
    for (size_t e = 0; e < elements; e++) {
        uint64_t bits = npy_random_bits(c->descr[1], size, &seed);
        unsigned char *elem = data + e * size;
        for (size_t k = 0; k < size; k++) /* byte k of the little-endian value */
            elem[c->descr[0] == '>' ? size - 1 - k : k] = (unsigned char)(bits >> 8 * k);
    }
    return b;
}

/* A body the device declines: load_bytes answers UNSUPPORTED without filling err, and the
 * CUDA engine then reports the host reader's error word for word. */
static void body_declined(struct pair *p, struct ecg_engine *engine, const unsigned char *body,
                          size_t len, const struct ecg_read_opts *opts, const char *what,
                          enum ecg_status want, const char *want_text)
{
    struct ecg_error host = {0}, dev = {0}, eng = {0};
    struct ecg_signal sig = {0};
    struct ecg_result *result = NULL;
    size_t n = 0;
    double fs = 0;
    char lead[32] = "";
    assert_int_equal(ecg_read_memory(body, len, opts, &sig, &host), want);
    if (!strstr(host.message, want_text))
        fail_msg("%s: host error \"%s\" lacks \"%s\"", what, host.message, want_text);
    assert_int_equal(p->gpu->load_bytes(p->gpu_ctx, body, len, opts, &n, &fs, lead, &dev),
                     ECG_ERR_UNSUPPORTED);
    assert_int_equal(dev.status, ECG_OK);
    assert_string_equal(dev.message, "");
    assert_int_equal(ecg_engine_analyze_bytes(engine, body, len, opts, &result, &eng), want);
    assert_null(result);
    assert_string_equal(eng.code, host.code);
    assert_string_equal(eng.message, host.message);
    printf("#   %s: handed to the host reader: %s\n", what, host.message);
}

void test_npy_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    static const struct npy_case cases[] = {
        {"npy <f4", "<f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy <f8 unaligned", "<f8", 0, false, NULL, 1, 3, ECG_FORMAT_NPY, false},
        {"npy <i2 unaligned", "<i2", 0, false, "0", 1, 1, ECG_FORMAT_NPY, false},
        {"npy |i1", "|i1", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy |u1", "|u1", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy <i4 unaligned", "<i4", 0, false, NULL, 1, 2, ECG_FORMAT_NPY, false},
        {"npy >f4 (big-endian)", ">f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy >f8 (big-endian), sniffed", ">f8", 0, false, NULL, 1, 5, ECG_FORMAT_AUTO, false},
        {"npy <f4 (n, 3) C order, lead 1", "<f4", 3, false, "1", 1, 0, ECG_FORMAT_NPY, false},
        {"npy >i2 (n, 3) C order, lead 2", ">i2", 3, false, "2", 1, 7, ECG_FORMAT_NPY, false},
        {"npy <f4 (n, 3) Fortran, lead 2", "<f4", 3, true, "2", 1, 0, ECG_FORMAT_NPY, false},
        {"npy <f8 (n, 3) Fortran, lead 2, pinned", "<f8", 3, true, "2", 1, 0, ECG_FORMAT_NPY,
         true},
        {"npy <f4 v2.0", "<f4", 0, false, NULL, 2, 0, ECG_FORMAT_NPY, false},
        {"npy <i2 v3.0 (n, 2) Fortran, lead 1", "<i2", 2, true, "1", 3, 0, ECG_FORMAT_NPY,
         false},
    };
    size_t rows = quick() ? 20011 : 100003;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct npy_case *c = &cases[i];
        size_t len = 0;
        unsigned char *body = npy_build(c, c->leads ? rows / 3 : rows, 500 + (unsigned)i, &len);
        struct ecg_read_opts opts = {.format = c->format, .fs_hz = 360, .lead = c->lead};
        bytes_parity_from(p, body, len, &opts, c->what, c->pinned);
        free(body);
    }

    /* declined: the host reader decides, and its error reaches the caller unchanged */
    struct ecg_engine *engine = engine_of(ECG_BACKEND_CUDA, p->model);
    struct ecg_read_opts opts = {.format = ECG_FORMAT_NPY, .fs_hz = 360};
    size_t len = 0;
    const struct npy_case f4 = {"", "<f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false};
    unsigned char *body = npy_build(&f4, 1000, 1, &len);
    size_t data_at = len - 1000 * 4;
    float nan_value = NAN;
    unsigned char saved[4];
    memcpy(saved, body + data_at + 17 * 4, 4);
    memcpy(body + data_at + 17 * 4, &nan_value, 4);
    body_declined(p, engine, body, len, &opts, "npy NaN", ECG_ERR_FORMAT, "sample 17 is NaN");
    memcpy(body + data_at + 17 * 4, saved, 4);
    opts.format = ECG_FORMAT_AUTO;
    body_declined(p, engine, body, len - 1, &opts, "npy truncated", ECG_ERR_FORMAT,
                  "data size mismatch");
    opts.format = ECG_FORMAT_NPY;
    opts.lead = "1";
    body_declined(p, engine, body, len, &opts, "npy lead 1 of 1", ECG_ERR_NOT_FOUND,
                  "lead 1 does not exist");
    opts.lead = NULL;
    opts.max_samples = 999;
    body_declined(p, engine, body, len, &opts, "npy over max_samples", ECG_ERR_TOO_LARGE,
                  "exceed the limit of 999");
    opts.max_samples = 0;
    unsigned char *key = memmem(body, len, "'descr'", 7);
    assert_non_null(key);
    key[5] = 'x';
    body_declined(p, engine, body, len, &opts, "npy bad header", ECG_ERR_FORMAT,
                  "unknown key \"descx\"");
    free(body);
    const struct npy_case f8 = {"", "<f8", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false};
    body = npy_build(&f8, 100, 2, &len);
    double huge = 1e300;
    memcpy(body + len - 100 * 8 + 5 * 8, &huge, 8);
    body_declined(p, engine, body, len, &opts, "npy f8 out of float range", ECG_ERR_FORMAT,
                  "sample 5 is infinite");
    free(body);
    ecg_engine_destroy(engine);
}

/* ---------------------------------------------------------------- EDF and BDF on the device */

/* Signals of the EDF fixtures: different samples per record, calibrations with a non-trivial
 * bitvalue and offset (asymmetric ranges), units in mV, uV (scaled) and an unknown one. */
struct edf_sig {
    const char *label, *unit;
    int spr;                      /* samples per data record */
    double phys_min, phys_max;
    int dig_min[2], dig_max[2];   /* [0] EDF, [1] BDF */
};

static const struct edf_sig edf_sigs[] = {
    {"MLII", "mV", 360, -3.25, 12.5, {-2048, -600000}, {2047, 600000}},
    {"V1", "uV", 180, -5000, 4000, {-32768, -8388608}, {32767, 8388607}},
    {"Resp", "Ohm", 25, 0, 1000, {-100, -100}, {3000, 3000}},
};
#define EDF_SIGS (sizeof edf_sigs / sizeof edf_sigs[0])

/* One EDF body of the tests. */
struct edf_case {
    const char *what;
    int filetype;          /* EDFLIB_FILETYPE_EDFPLUS or _BDFPLUS (what EDFlib writes) */
    bool plain;            /* "EDF+C"/"BDF+C" blanked: plain EDF/BDF, whose annotation signal
                            * becomes an ordinary one */
    const char *lead;
    int duration;          /* data record duration, units of 10 us */
    enum ecg_format format;
    bool pinned;
};

/* Where sample i of raw signal sig (annotation signals counted) lies in an EDF body, read from
 * the header as the format defines it. */
static size_t edf_sample_at(const unsigned char *b, int sig, size_t i)
{
    char field[9] = "";
    memcpy(field, b + 252, 4);
    field[4] = 0;
    int ns = atoi(field), bps = b[0] == 0xff ? 3 : 2;
    size_t record = 0, before = 0, spr = 0;
    for (int k = 0; k < ns; k++) {
        memcpy(field, b + 256 + ns * 216 + k * 8, 8);
        field[8] = 0;
        size_t n = (size_t)atoi(field);
        if (k < sig)
            before += n * (size_t)bps;
        if (k == sig)
            spr = n;
        record += n * (size_t)bps;
    }
    return 256 * (size_t)(ns + 1) + i / spr * record + before + i % spr * (size_t)bps;
}

/* Writes case c with EDFlib (n_records data records of random digital values, seeded; + types
 * with annotations) into a temporary file and returns its bytes; *len their count. A few values
 * of MLII are then set outside its digital range, which the readers clamp. */
static unsigned char *edf_build(const struct edf_case *c, int n_records, unsigned seed,
                                size_t *len)
{
    char path[] = "/tmp/ecg-parity-edf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    bool bdf = c->filetype == EDFLIB_FILETYPE_BDFPLUS;
    int h = edfopen_file_writeonly(path, c->filetype, (int)EDF_SIGS);
    if (h < 0)
        fail_msg("edfopen_file_writeonly: %d", h);
    assert_int_equal(edf_set_datarecord_duration(h, c->duration), 0);
    for (int s = 0; s < (int)EDF_SIGS; s++) {
        const struct edf_sig *e = &edf_sigs[s];
        assert_int_equal(edf_set_samplefrequency(h, s, e->spr), 0);
        assert_int_equal(edf_set_digital_minimum(h, s, e->dig_min[bdf]), 0);
        assert_int_equal(edf_set_digital_maximum(h, s, e->dig_max[bdf]), 0);
        assert_int_equal(edf_set_physical_minimum(h, s, e->phys_min), 0);
        assert_int_equal(edf_set_physical_maximum(h, s, e->phys_max), 0);
        assert_int_equal(edf_set_label(h, s, e->label), 0);
        assert_int_equal(edf_set_physical_dimension(h, s, e->unit), 0);
    }
    int *values = malloc(edf_sigs[0].spr * sizeof *values);
    assert_non_null(values);
    for (int r = 0; r < n_records; r++) {
        for (int s = 0; s < (int)EDF_SIGS; s++) {
            const struct edf_sig *e = &edf_sigs[s];
            long span = (long)e->dig_max[bdf] - e->dig_min[bdf] + 1;
            for (int i = 0; i < e->spr; i++)
                values[i] = (int)(e->dig_min[bdf] +
                                  (long)(((unsigned long)rand_r(&seed) << 16 ^
                                          (unsigned long)rand_r(&seed)) % (unsigned long)span));
            assert_int_equal(edfwrite_digital_samples(h, values), 0);
        }
    }
    free(values);
    if (c->filetype == EDFLIB_FILETYPE_EDFPLUS || c->filetype == EDFLIB_FILETYPE_BDFPLUS)
        for (int a = 0; a < 12; a++)
            assert_int_equal(edfwrite_annotation_utf8(h, 3000LL * a + 7, -1, "beat"), 0);
    assert_int_equal(edfclose_file(h), 0);
    unsigned char *b = load_file(path, len);
    unlink(path);
    if (c->plain)
        memcpy(b + 192, "     ", 5);
    /* out-of-range values of MLII, in records 0 and 1 and the last */
    static const unsigned char high[3] = {0xff, 0x7f, 0x00}, low[3] = {0x00, 0x80, 0xff};
    static const unsigned char high24[3] = {0xff, 0xff, 0x7f}, low24[3] = {0x00, 0x00, 0x80};
    size_t where[] = {3, (size_t)edf_sigs[0].spr + 5, (size_t)n_records * edf_sigs[0].spr - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        const unsigned char *value = bdf ? (k % 2 ? low24 : high24) : (k % 2 ? low : high);
        memcpy(b + edf_sample_at(b, 0, where[k]), value, bdf ? 3 : 2);
    }
    return b;
}

/* Moves the last signal of an EDF body (EDFlib writes the annotation signal last) to the front,
 * in the header and in every data record, so that the data signals follow it. */
static void edf_last_first(unsigned char *b, size_t len)
{
    static const int widths[] = {16, 80, 8, 8, 8, 8, 8, 80, 8, 32};
    char field[9] = "";
    memcpy(field, b + 252, 4);
    int ns = atoi(field), bps = b[0] == 0xff ? 3 : 2;
    size_t at = 256, record = 0, last = 0;
    unsigned char tmp[80];
    for (size_t f = 0; f < sizeof widths / sizeof widths[0]; f++) {
        size_t w = (size_t)widths[f];
        memcpy(tmp, b + at + (size_t)(ns - 1) * w, w);
        memmove(b + at + w, b + at, (size_t)(ns - 1) * w);
        memcpy(b + at, tmp, w);
        at += (size_t)ns * w;
    }
    for (int k = 0; k < ns; k++) { /* samples per record: the moved signal's now come first */
        memcpy(field, b + 256 + ns * 216 + k * 8, 8);
        field[8] = 0;
        record += (size_t)atoi(field) * (size_t)bps;
        if (k == 0)
            last = (size_t)atoi(field) * (size_t)bps;
    }
    unsigned char *moved = malloc(last);
    assert_non_null(moved);
    for (size_t r = at; r + record <= len; r += record) {
        memcpy(moved, b + r + record - last, last);
        memmove(b + r + last, b + r, record - last);
        memcpy(b + r, moved, last);
    }
    free(moved);
}

void test_edf_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    static const struct edf_case cases[] = {
        {"EDF+ lead 0 (MLII, mV), sniffed", EDFLIB_FILETYPE_EDFPLUS, false, NULL, 100000,
         ECG_FORMAT_AUTO, false},
        {"EDF+ lead V1 (uV)", EDFLIB_FILETYPE_EDFPLUS, false, "V1", 100000, ECG_FORMAT_EDF, false},
        {"EDF+ lead 2 (Resp), 0.5 s records", EDFLIB_FILETYPE_EDFPLUS, false, "2", 50000,
         ECG_FORMAT_EDF, false},
        {"EDF+ lead resp (case), pinned", EDFLIB_FILETYPE_EDFPLUS, false, "resp", 100000,
         ECG_FORMAT_EDF, true},
        {"BDF+ lead 0, sniffed", EDFLIB_FILETYPE_BDFPLUS, false, "0", 100000, ECG_FORMAT_AUTO,
         false},
        {"BDF+ lead v1 (case, uV), 0.25 s records", EDFLIB_FILETYPE_BDFPLUS, false, "v1", 25000,
         ECG_FORMAT_EDF, false},
        {"BDF+ lead 2", EDFLIB_FILETYPE_BDFPLUS, false, "2", 100000, ECG_FORMAT_EDF, false},
        {"EDF lead 1", EDFLIB_FILETYPE_EDFPLUS, true, "1", 100000, ECG_FORMAT_EDF, false},
        {"EDF lead 3 (the former annotation signal)", EDFLIB_FILETYPE_EDFPLUS, true, "3", 100000,
         ECG_FORMAT_EDF, false},
        {"BDF lead MLII, sniffed", EDFLIB_FILETYPE_BDFPLUS, true, "MLII", 100000,
         ECG_FORMAT_AUTO, false},
        {"BDF lead 2, pinned", EDFLIB_FILETYPE_BDFPLUS, true, "2", 100000, ECG_FORMAT_EDF, true},
    };
    int n_records = quick() ? 60 : 600;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct edf_case *c = &cases[i];
        size_t len = 0;
        unsigned char *body = edf_build(c, n_records, 900 + (unsigned)i, &len);
        struct ecg_read_opts opts = {.format = c->format, .fs_hz = 123, .lead = c->lead};
        bytes_parity_from(p, body, len, &opts, c->what, c->pinned);
        free(body);
    }

    /* EDFlib reads only the first record's annotations when it opens a file without reading
     * them: garbage in the others changes nothing for the host, nor for the device */
    const struct edf_case plus = {"", EDFLIB_FILETYPE_EDFPLUS, false, NULL, 100000,
                                  ECG_FORMAT_EDF, false};
    size_t len = 0;
    unsigned char *body = edf_build(&plus, 50, 7, &len);
    for (size_t r = 1; r < 50; r++)
        body[edf_sample_at(body, (int)EDF_SIGS, 0) + r * (edf_sample_at(body, 0, 360) -
                                                          edf_sample_at(body, 0, 0))] = 0xff;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_EDF, .lead = "V1"};
    bytes_parity(p, (const char *)body, len, &opts, "EDF+ with garbage in later annotations",
                 true);

    /* the annotation signal first, then the data signals (in BDF+ too) */
    size_t moved_len = 0;
    unsigned char *moved = edf_build(&plus, 50, 8, &moved_len);
    edf_last_first(moved, moved_len);
    opts.lead = "Resp";
    bytes_parity(p, (const char *)moved, moved_len, &opts, "EDF+ annotations first, lead Resp",
                 true);
    free(moved);
    const struct edf_case bplus = {"", EDFLIB_FILETYPE_BDFPLUS, false, NULL, 100000,
                                   ECG_FORMAT_EDF, false};
    moved = edf_build(&bplus, 50, 9, &moved_len);
    edf_last_first(moved, moved_len);
    opts.lead = "1";
    bytes_parity(p, (const char *)moved, moved_len, &opts, "BDF+ annotations first, lead 1",
                 true);
    free(moved);

    /* declined: the host reader decides, and its error reaches the caller unchanged */
    struct ecg_engine *engine = engine_of(ECG_BACKEND_CUDA, p->model);
    opts.lead = "9";
    body_declined(p, engine, body, len, &opts, "EDF lead 9 of 3", ECG_ERR_NOT_FOUND,
                  "lead 9 does not exist");
    opts.lead = "aVR";
    body_declined(p, engine, body, len, &opts, "EDF lead aVR", ECG_ERR_NOT_FOUND,
                  "no signal labelled \"aVR\"");
    opts.lead = NULL;
    opts.max_samples = 50 * 360 - 1;
    body_declined(p, engine, body, len, &opts, "EDF over max_samples", ECG_ERR_TOO_LARGE,
                  "exceed the limit of 17999");
    opts.max_samples = 0;
    body_declined(p, engine, body, len - 1, &opts, "EDF truncated", ECG_ERR_FORMAT,
                  "file size does not match");
    body_declined(p, engine, body, 200, &opts, "EDF under 256 bytes", ECG_ERR_FORMAT,
                  "the fixed header alone is 256");
    memcpy(body + 192, "EDF+D", 5);
    body_declined(p, engine, body, len, &opts, "EDF+D", ECG_ERR_UNSUPPORTED,
                  "discontinuous");
    memcpy(body + 192, "EDF+C", 5);
    /* a physical range so wide that every value overflows float */
    size_t ns = EDF_SIGS + 1, phys_min_at = 256 + ns * 104, phys_max_at = 256 + ns * 112;
    unsigned char saved_min[8], saved_max[8];
    memcpy(saved_min, body + phys_min_at, 8);
    memcpy(saved_max, body + phys_max_at, 8);
    memcpy(body + phys_min_at, "-1e300  ", 8);
    memcpy(body + phys_max_at, "1e300   ", 8);
    body_declined(p, engine, body, len, &opts, "EDF values past float", ECG_ERR_FORMAT,
                  "sample 0 is infinite");
    memcpy(body + phys_min_at, saved_min, 8);
    memcpy(body + phys_max_at, saved_max, 8);
    bytes_parity(p, (const char *)body, len, &opts, "EDF+ restored", true);
    free(body);
    ecg_engine_destroy(engine);
}
