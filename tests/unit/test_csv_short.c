/*
 * test_csv_short.c - the CSV reader on one-column files of short numbers ("-0.02", "0.145"),
 * the body of a typical strip, which read_csv.c reads on a path of its own (short_lines).
 *
 * The oracles: strtof() on each line's token, bit for bit; and the reader's general path,
 * which the same file takes when every line starts with a space (trimmed, then parsed as a
 * field): values, statuses, error messages and line numbers must all agree. The reader takes
 * the fastest way the CPU runs (eight lines at a time in AVX2, else a word at a time); the two
 * are also run side by side on the same bytes, from every kind of start and with every kind of
 * room left, and must stop at the same line with the same bits. Random inputs use fixed seeds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ecg.h"
#include "read_internal.h" /* csv_short_word, csv_short_avx2: the two ways, side by side */

/* A file under construction, and the strtof() value of each of its data lines. */
struct csv_text {
    char *text;
    size_t len, cap;
    float *want;
    size_t n, want_cap;
};

static void text_init(struct csv_text *t)
{
    memset(t, 0, sizeof *t);
    t->cap = 1 << 16;
    t->text = malloc(t->cap);
    t->want_cap = 1 << 12;
    t->want = malloc(t->want_cap * sizeof(float));
    assert_non_null(t->text);
    assert_non_null(t->want);
}

static void text_fini(struct csv_text *t)
{
    free(t->text);
    free(t->want);
}

static void text_put(struct csv_text *t, const char *s, size_t len)
{
    while (t->len + len > t->cap) {
        t->cap *= 2;
        t->text = realloc(t->text, t->cap);
        assert_non_null(t->text);
    }
    memcpy(t->text + t->len, s, len);
    t->len += len;
}

/* Appends a data line: the token, then CRLF or LF; records strtof's value of the token. */
static void text_line(struct csv_text *t, const char *token, bool crlf)
{
    char copy[64];
    size_t len = strlen(token);
    assert_true(len < sizeof copy);
    memcpy(copy, token, len + 1);
    char *end;
    float v = strtof(copy, &end);
    assert_true(end == copy + len); /* the generators only make whole numbers here */
    if (t->n == t->want_cap) {
        t->want_cap *= 2;
        t->want = realloc(t->want, t->want_cap * sizeof(float));
        assert_non_null(t->want);
    }
    t->want[t->n++] = v;
    text_put(t, token, len);
    text_put(t, crlf ? "\r\n" : "\n", crlf ? 2 : 1);
}

static enum ecg_status read_csv_text(const char *text, size_t len, size_t max_samples,
                                     struct ecg_signal *sig, struct ecg_error *err)
{
    struct ecg_read_opts opts = {
        .format = ECG_FORMAT_CSV, .fs_hz = 250, .max_samples = max_samples};
    memset(err, 0, sizeof *err);
    return ecg_read_memory(text, len, &opts, sig, err);
}

/* The same file with a space before every line, so that no line takes a fast path. */
static char *spaced(const char *text, size_t len, size_t *out_len)
{
    char *o = malloc(2 * len + 1);
    assert_non_null(o);
    size_t k = 0, i = 0;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* the BOM stays first */
        for (; i < 3; i++)
            o[k++] = text[i];
    bool line_start = true;
    for (; i < len; i++) {
        if (line_start)
            o[k++] = ' ';
        o[k++] = text[i];
        line_start = text[i] == '\n';
    }
    *out_len = k;
    return o;
}

static void assert_same_bits(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], sizeof a);
        memcpy(&b, &want[i], sizeof b);
        if (a != b)
            fail_msg("sample %zu: got %a (0x%08x), want %a (0x%08x)", i, (double)got[i], a,
                     (double)want[i], b);
    }
}

/* Reads t and its spaced twin: both must succeed with exactly t->want. */
static void check_reads_as_strtof(const struct csv_text *t)
{
    struct ecg_signal sig;
    struct ecg_error err;
    enum ecg_status st = read_csv_text(t->text, t->len, 0, &sig, &err);
    if (st != ECG_OK)
        fail_msg("read failed: %s", err.message);
    assert_int_equal(sig.n, t->n);
    assert_same_bits(sig.samples, t->want, t->n);
    ecg_signal_free(&sig);

    size_t len;
    char *twin = spaced(t->text, t->len, &len);
    st = read_csv_text(twin, len, 0, &sig, &err);
    free(twin);
    if (st != ECG_OK)
        fail_msg("spaced read failed: %s", err.message);
    assert_int_equal(sig.n, t->n);
    assert_same_bits(sig.samples, t->want, t->n);
    ecg_signal_free(&sig);
}

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* ---------------------------------------------------------------- every short body */

/*
 * Every number of 1 to 5 digits (leading zeros included), with the point at every place or
 * none, both signs, LF and CRLF: about 700,000 lines, each bit for bit strtof's.
 */
static void test_every_short_body(void **state)
{
    (void)state;
    struct csv_text t;
    text_init(&t);
    char token[32];
    for (int width = 1; width <= 5; width++) {
        int count = 1;
        for (int i = 0; i < width; i++)
            count *= 10;
        for (int number = 0; number < count; number++) {
            char digits[16];
            snprintf(digits, sizeof digits, "%0*d", width, number);
            for (int point = -1; point <= width; point++) {
                size_t k = 0;
                if ((number + point) % 3 == 0)
                    token[k++] = '-';
                for (int i = 0; i < width; i++) {
                    if (i == point)
                        token[k++] = '.';
                    token[k++] = digits[i];
                }
                if (point == width)
                    token[k++] = '.';
                token[k] = 0;
                text_line(&t, token, (number + point) % 7 == 0);
            }
        }
    }
    check_reads_as_strtof(&t);
    text_fini(&t);
}

/*
 * Bodies of 6 to 8 bytes (the longest the short path takes) and 9 (one more): random digits,
 * the point anywhere or absent, integers about 2^24 (16777216, beyond which the path must
 * not round w itself), signs.
 */
static void test_long_short_bodies(void **state)
{
    (void)state;
    rng_state = 0x5eed5eedu;
    struct csv_text t;
    text_init(&t);
    char token[32];
    for (int line = 0; line < 200000; line++) {
        size_t k = 0;
        if (rnd(2))
            token[k++] = '-';
        int body = 6 + (int)rnd(4);
        int point = (int)rnd((uint32_t)body + 1) - 1; /* -1: no point */
        for (int i = 0; i < body; i++)
            token[k++] = i == point ? '.' : (char)('0' + rnd(10));
        token[k] = 0;
        text_line(&t, token, rnd(5) == 0);
    }
    for (long w = 16777200; w <= 16777300; w++) {
        snprintf(token, sizeof token, "%s%ld", w % 2 ? "-" : "", w);
        text_line(&t, token, false);
    }
    static const char *const edges[] = {"99999999", "-99999999", "9999999.", "-.9999999",
                                        "0000000.", "-0000000",  "00000001", ".0000001",
                                        "1.000000", "16777217",  "33554431", "67108863"};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        text_line(&t, edges[i], false);
    check_reads_as_strtof(&t);
    text_fini(&t);
}

/* ---------------------------------------------------------------- random files */

/* A random number token as a client might send it (short mostly, other shapes at times). */
static void random_token(char *token)
{
    size_t k = 0;
    int shape = (int)rnd(100);
    if (shape < 8) {
        static const char *const odd[] = {".5",     "5.",   "-0",    "+1",          "1e3", "-.25",
                                          "+.5",    "-5.",  "0.0",   "1E-3",        "007", "-0.000",
                                          "2.5e-2", "1e+1", "00.10", "123456789012"};
        strcpy(token, odd[rnd(sizeof odd / sizeof odd[0])]);
        return;
    }
    if (rnd(3) == 0)
        token[k++] = '-';
    int int_digits = 1 + (int)rnd(rnd(4) == 0 ? 9 : 2);
    int frac_digits = (int)rnd(rnd(4) == 0 ? 9 : 4);
    for (int i = 0; i < int_digits; i++)
        token[k++] = (char)('0' + (i == 0 && rnd(3) ? 0 : rnd(10)));
    if (frac_digits || rnd(8) == 0) {
        token[k++] = '.';
        for (int i = 0; i < frac_digits; i++)
            token[k++] = (char)('0' + rnd(10));
    }
    token[k] = 0;
}

/*
 * Random files: short numbers with some other shapes, LF or CRLF, trailing spaces, blank
 * lines, a header at times. Values must be strtof's and the general path's.
 */
static void test_random_files(void **state)
{
    (void)state;
    rng_state = 20240611u;
    for (int file = 0; file < 400; file++) {
        struct csv_text t;
        text_init(&t);
        if (rnd(8) == 0)
            text_put(&t, "\xef\xbb\xbf", 3);
        if (rnd(4) == 0)
            text_put(&t, "ecg_mv\n", 7);
        int lines = 1 + (int)rnd(rnd(2) ? 3000 : 40);
        bool crlf_file = rnd(4) == 0;
        for (int line = 0; line < lines; line++) {
            char token[64];
            random_token(token);
            if (rnd(60) == 0) { /* trailing spaces: the general path's, values alike */
                char *end;
                float v = strtof(token, &end);
                t.want[t.n] = v; /* text_line's bookkeeping, by hand */
                text_put(&t, token, strlen(token));
                text_put(&t, "  \n", 3);
                if (++t.n == t.want_cap) {
                    t.want_cap *= 2;
                    t.want = realloc(t.want, t.want_cap * sizeof(float));
                    assert_non_null(t.want);
                }
            } else {
                text_line(&t, token, crlf_file || rnd(50) == 0);
            }
            if (rnd(100) == 0) { /* a blank line */
                const char *blank = rnd(2) ? "\n" : " \r\n";
                text_put(&t, blank, strlen(blank));
            }
        }
        check_reads_as_strtof(&t);
        text_fini(&t);
    }
}

/* ---------------------------------------------------------------- errors and limits */

/* Reads text and its spaced twin; both must fail alike, with this status and message. */
static void check_fails_alike(const char *text, size_t len, size_t max_samples,
                              enum ecg_status want_status, const char *want_message)
{
    struct ecg_signal sig;
    struct ecg_error err, twin_err;
    enum ecg_status st = read_csv_text(text, len, max_samples, &sig, &err);
    if (st == ECG_OK)
        ecg_signal_free(&sig);
    assert_int_equal(st, want_status);
    assert_string_equal(err.message, want_message);
    size_t twin_len;
    char *twin = spaced(text, len, &twin_len);
    st = read_csv_text(twin, twin_len, max_samples, &sig, &twin_err);
    free(twin);
    if (st == ECG_OK)
        ecg_signal_free(&sig);
    assert_int_equal(st, want_status);
    assert_string_equal(twin_err.message, err.message);
    assert_string_equal(twin_err.code, err.code);
}

/* A bad token among short lines: the same error and line number as the general path's. */
static void test_bad_token_mid_file(void **state)
{
    (void)state;
    static const struct {
        const char *token;
        const char *message; /* after "line N, column 1: " */
    } bad[] = {
        {"1.2.3", "expected a number, got \"1.2.3\""},
        {"-", "expected a number, got \"-\""},
        {".", "expected a number, got \".\""},
        {"-.", "expected a number, got \"-.\""},
        {"--1", "expected a number, got \"--1\""},
        {"1-", "expected a number, got \"1-\""},
        {"1e", "expected a number, got \"1e\""},
        {"0x10", "expected a number, got \"0x10\""},
        {"12a", "expected a number, got \"12a\""},
        {"1 2", "expected a number, got \"1 2\""},
        {"1,5", "expected a number, got \"1,5\""},
        {"1..2", "expected a number, got \"1..2\""},
        {"nan", "\"nan\" is not a finite number"},
        {"-inf", "\"-inf\" is not a finite number"},
        {"1e39", "\"1e39\" is outside the float range"},
        {"-9e99", "\"-9e99\" is outside the float range"},
    };
    rng_state = 77u;
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        for (int trial = 0; trial < 20; trial++) {
            struct csv_text t;
            text_init(&t);
            int lines = 2 + (int)rnd(trial < 10 ? 2000 : 30);
            /* 1-based; not the first, whose "1,5" would make ',' the delimiter */
            int bad_line = 2 + (int)rnd((uint32_t)lines - 1);
            bool crlf = trial % 3 == 0;
            for (int line = 1; line <= lines; line++) {
                if (line == 1 && strchr(bad[b].token, ',')) {
                    /* a '.' decimal in the file: its "1,5" is no number with a decimal comma
                     * (in a file of whole numbers it would be: read_csv.c's comma_file) */
                    text_line(&t, "0.5", crlf);
                } else if (line == bad_line) {
                    text_put(&t, bad[b].token, strlen(bad[b].token));
                    text_put(&t, crlf ? "\r\n" : "\n", crlf ? 2 : 1);
                } else {
                    char token[64];
                    random_token(token);
                    text_line(&t, token, crlf);
                }
            }
            char want[256];
            snprintf(want, sizeof want, "line %d, column 1: %s", bad_line, bad[b].message);
            check_fails_alike(t.text, t.len, 0, ECG_ERR_FORMAT, want);
            text_fini(&t);
        }
    }

    /* Line numbers count the BOM's line, a header and blank lines. */
    static const char text[] = "\xef\xbb\xbf"
                               "mV\r\n0.1\r\n\r\n-0.25\n\n\n1.5\n0.125\n-0.5\n1.25\n2.5\n"
                               "0.75\n-1\n3\n0.5\n4\n5\n-0.125\n6\n7\n8\n9\n10\nabc\n1\n";
    check_fails_alike(text, sizeof text - 1, 0, ECG_ERR_FORMAT,
                      "line 24, column 1: expected a number, got \"abc\"");
}

/* max_samples: the limit holds at its exact count, on the short path as on the general. */
static void test_max_samples(void **state)
{
    (void)state;
    rng_state = 4242u;
    for (int trial = 0; trial < 60; trial++) {
        struct csv_text t;
        text_init(&t);
        int lines = 1 + (int)rnd(trial < 30 ? 5000 : 50);
        if (trial < 6) /* about the buffer's first growth, at 4096 samples */
            lines = 4095 + trial % 3;
        for (int line = 0; line < lines; line++) {
            char token[64];
            random_token(token);
            text_line(&t, token, trial % 4 == 0);
        }
        size_t max = 1 + rnd((uint32_t)lines + 2);
        if (trial < 6)
            max = trial < 3 ? 4096 : 4097;
        if (max >= (size_t)lines) {
            struct ecg_signal sig;
            struct ecg_error err;
            assert_int_equal(read_csv_text(t.text, t.len, max, &sig, &err), ECG_OK);
            assert_int_equal(sig.n, t.n);
            assert_same_bits(sig.samples, t.want, t.n);
            ecg_signal_free(&sig);
        } else {
            char want[128];
            snprintf(want, sizeof want, "more than the limit of %zu samples", max);
            check_fails_alike(t.text, t.len, max, ECG_ERR_TOO_LARGE, want);
            /* A bad line after the limit's line: the limit is reported, as before. */
            if (max + 1 < (size_t)lines) {
                size_t at = 0;
                for (size_t line = 0; line < max + 1; line++)
                    at = (size_t)((char *)memchr(t.text + at, '\n', t.len - at) - t.text) + 1;
                t.text[at] = 'x';
                check_fails_alike(t.text, t.len, max, ECG_ERR_TOO_LARGE, want);
            }
        }
        text_fini(&t);
    }
}

/* ---------------------------------------------------------------- the two ways agree */

/* One line of the mixed files below: mostly short, and every shape that ends a run. */
static void mixed_line(struct csv_text *t)
{
    static const char *const other[] = {
        "",        "\r",         "-",        ".",         "-.",        "1.2.3",   "+1",
        "12345678", "-12345678", "123456789", "-1234.567", "16777217", "1e3",     "0.1 ",
        " 0.1",    "1,5",        "abc",      "-0.0000001", "99999999", "-9999999", ".0000001"};
    char token[64];
    if (rnd(150) == 0) {
        const char *o = other[rnd(sizeof other / sizeof other[0])];
        text_put(t, o, strlen(o));
        text_put(t, "\n", 1);
        return;
    }
    if (rnd(60) == 0) {
        random_token(token);
    } else { /* a strip's sample: "-0.145", "1.2", "12" */
        size_t k = 0;
        if (rnd(2))
            token[k++] = '-';
        for (int i = 0, n = 1 + (int)rnd(3); i < n; i++)
            token[k++] = (char)('0' + rnd(10));
        if (rnd(5)) {
            token[k++] = '.';
            for (int i = 0, n = (int)rnd(5); i < n; i++)
                token[k++] = (char)('0' + rnd(10));
        }
        token[k] = 0;
    }
    text_put(t, token, strlen(token));
    bool crlf = rnd(30) == 0;
    text_put(t, crlf ? "\r\n" : "\n", crlf ? 2 : 1);
}

/*
 * csv_short_word and csv_short_avx2 on the same bytes: the same count, stop, *full and bits,
 * from the input's first byte (where the AVX2 way must not read before it) and from random
 * lines, with room for everything, for nothing, and for a few values. Each file is copied to a
 * buffer of exactly its length, so that a read outside it is an error under AddressSanitizer.
 */
static void test_word_and_avx2_agree(void **state)
{
    (void)state;
    if (!__builtin_cpu_supports("avx2"))
        skip();
    rng_state = 0xa5a5a5a5u;
    float *got_word = malloc(8192 * sizeof(float)), *got_avx2 = malloc(8192 * sizeof(float));
    assert_non_null(got_word);
    assert_non_null(got_avx2);
    size_t values = 0;
    for (int file = 0; file < 600; file++) {
        struct csv_text t;
        text_init(&t);
        int lines = 1 + (int)rnd(file % 3 ? 2000 : 40);
        for (int line = 0; line < lines; line++)
            mixed_line(&t);
        char *exact = malloc(t.len);
        assert_non_null(exact);
        memcpy(exact, t.text, t.len);
        for (int run = 0; run < 8; run++) {
            const char *start = exact;
            if (run > 0) { /* the start of a random line */
                size_t at = rnd((uint32_t)t.len);
                while (at > 0 && exact[at - 1] != '\n')
                    at--;
                start = exact + at;
            }
            size_t room = run % 4 == 1 ? 0 : run % 4 == 2 ? 1 + rnd(20) : 8192;
            const char *p_word = start, *p_avx2 = start;
            bool full_word, full_avx2;
            size_t n_word = csv_short_word(exact, exact + t.len, &p_word, got_word, room,
                                           &full_word);
            size_t n_avx2 = csv_short_avx2(exact, exact + t.len, &p_avx2, got_avx2, room,
                                           &full_avx2);
            assert_int_equal(n_avx2, n_word);
            assert_ptr_equal(p_avx2, p_word);
            assert_int_equal(full_avx2, full_word);
            assert_same_bits(got_avx2, got_word, n_word);
            assert_true(n_word <= room);
            values += n_word;
        }
        free(exact);
        text_fini(&t);
    }
    /* the runs read lines, not only stopped at once */
    assert_true(values > 100000);
    free(got_word);
    free(got_avx2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_short_body), cmocka_unit_test(test_long_short_bodies),
        cmocka_unit_test(test_random_files),     cmocka_unit_test(test_bad_token_mid_file),
        cmocka_unit_test(test_max_samples),      cmocka_unit_test(test_word_and_avx2_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
