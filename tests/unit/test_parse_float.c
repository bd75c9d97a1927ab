/*
 * test_parse_float.c - ecg_parse_float() against strtof(), bit for bit and end pointer too.
 *
 * Over 10^7 strings with fixed seeds: random digit strings (1..25 digits, points, exponents,
 * signs, leading zeros, junk after the number), the data's own "%.16e" form, float midpoints
 * printed exactly and perturbed by one digit far down, subnormals, overflow thresholds, long
 * tokens (up to 400 digits) and hand-picked edge cases. Inputs are copied to a buffer with no
 * NUL after the token's end pointer so that reads past `end` would show under sanitizers.
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

#include <cmocka.h>

#include "ecg.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static unsigned rng_below(unsigned n)
{
    return (unsigned)(rng_next() % n);
}

struct tally {
    size_t checked;
    size_t mismatches;
};

/* Compares one NUL-terminated string; reports the first few mismatches. */
static void check_one(const char *text, struct tally *t)
{
    size_t len = strlen(text);
    /* An exact-size heap copy without NUL: reading past end trips ASan. */
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);

    char *want_end;
    float want = strtof(text, &want_end);
    float got = -12345.0f;
    const char *got_end = ecg_parse_float(copy, copy + len, &got);

    uint32_t wb, gb;
    memcpy(&wb, &want, 4);
    memcpy(&gb, &got, 4);
    size_t want_off = (size_t)(want_end - text), got_off = (size_t)(got_end - copy);
    if (wb != gb || want_off != got_off) {
        if (t->mismatches < 10)
            fprintf(stderr, "mismatch on \"%s\": strtof %a (end %zu), parsed %a (end %zu)\n", text,
                    (double)want, want_off, (double)got, got_off);
        t->mismatches++;
    }
    t->checked++;
    free(copy);
}

/* Appends n random digits; lead_zero_pct controls leading zeros. */
static size_t put_digits(char *o, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        o[i] = (char)('0' + rng_below(10));
    return n;
}

/* A random decimal string in strtof's grammar, often with something odd about it. */
static void make_random(char *o)
{
    size_t k = 0;
    unsigned ws = rng_below(8);
    if (ws == 0)
        o[k++] = ' ';
    else if (ws == 1)
        o[k++] = '\t';
    unsigned sign = rng_below(4);
    if (sign == 0)
        o[k++] = '-';
    else if (sign == 1)
        o[k++] = '+';
    if (rng_below(5) == 0) { /* leading zeros */
        unsigned z = 1 + rng_below(6);
        for (unsigned i = 0; i < z; i++)
            o[k++] = '0';
    }
    unsigned total = 1 + rng_below(25);
    unsigned int_digits = rng_below(total + 1);
    unsigned shape = rng_below(10);
    if (shape == 0)
        int_digits = 0; /* ".5" */
    k += put_digits(o + k, int_digits);
    if (shape != 1) { /* shape 1: no point at all */
        o[k++] = '.';
        if (shape != 2) /* shape 2: "5." */
            k += put_digits(o + k, total - int_digits);
        if (rng_below(6) == 0) { /* trailing zeros */
            unsigned z = 1 + rng_below(8);
            for (unsigned i = 0; i < z; i++)
                o[k++] = '0';
        }
    }
    unsigned ex = rng_below(8);
    if (ex < 5) {
        o[k++] = rng_below(2) ? 'e' : 'E';
        unsigned es = rng_below(3);
        if (es == 0)
            o[k++] = '-';
        else if (es == 1)
            o[k++] = '+';
        if (rng_below(20) != 0) { /* else: "e" without digits */
            int mag = rng_below(10) == 0 ? (int)rng_below(100) : (int)rng_below(50);
            if (rng_below(10) == 0)
                o[k++] = '0';
            k += (size_t)sprintf(o + k, "%d", mag);
        }
    }
    unsigned junk = rng_below(6);
    static const char junk_chars[] = ",;\n\r e.+-x";
    if (junk == 0)
        o[k++] = junk_chars[rng_below(sizeof junk_chars - 1)];
    o[k] = 0;
}

static void test_random_strings(void **state)
{
    (void)state;
    struct tally t = {0};
    char text[256];
    rng_state = 20261121;
    for (int i = 0; i < 5000000; i++) {
        make_random(text);
        check_one(text, &t);
    }
    assert_int_equal(t.mismatches, 0);
    assert_int_equal(t.checked, 5000000);
}

/* v printed in one of seven printf forms (literal formats, so the compiler checks them). */
static void print_form(char *text, size_t cap, int form, double v)
{
    switch (form) {
    case 0:
        snprintf(text, cap, "%.16e", v);
        break;
    case 1:
        snprintf(text, cap, "%.17g", v);
        break;
    case 2:
        snprintf(text, cap, "%.9g", v);
        break;
    case 3:
        snprintf(text, cap, "%.8e", v);
        break;
    case 4:
        snprintf(text, cap, "%g", v);
        break;
    case 5:
        snprintf(text, cap, "%.6f", v);
        break;
    default:
        snprintf(text, cap, "%.20e", v);
        break;
    }
}

/* Random doubles printed as the data are ("%.16e") and in other printf forms. */
static void test_printf_forms(void **state)
{
    (void)state;
    struct tally t = {0};
    char text[128];
    rng_state = 42;
    for (int i = 0; i < 2000000; i++) {
        double mag = pow(10.0, (double)rng_below(90) - 50.0);
        double v = ((double)(rng_next() >> 11) / 9007199254740992.0) * mag;
        if (rng_below(2))
            v = -v;
        print_form(text, sizeof text, i % 7, v);
        check_one(text, &t);
    }
    check_one("1.3863000000000008e+00", &t);
    check_one("-4.9999999999999989e-01", &t);
    assert_int_equal(t.mismatches, 0);
}

/* Float midpoints printed exactly, and nudged just above and below by far-away digits. */
static void test_halfway_cases(void **state)
{
    (void)state;
    struct tally t = {0};
    char text[512];
    rng_state = 7;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)rng_next() & 0x7f7fffffu; /* finite, below FLT_MAX */
        if (i % 4 == 0)
            bits &= 0x4fffffffu; /* bias toward the fast-path range */
        float f;
        memcpy(&f, &bits, 4);
        float g = nextafterf(f, INFINITY);
        double mid = ((double)f + (double)g) / 2; /* exact: 25 significant bits */
        /* Exact decimal expansion (glibc prints exactly), then variants. */
        int digits = 10 + (int)rng_below(110);
        snprintf(text, sizeof text, "%.*e", i % 3 == 0 ? 130 : digits, mid);
        check_one(text, &t);
        /* Nudge: put a 1 far down the expansion of the exact midpoint. */
        snprintf(text, sizeof text, "%.130e", mid);
        char *e = strchr(text, 'e');
        char exp_part[16];
        snprintf(exp_part, sizeof exp_part, "%s", e);
        size_t keep = (size_t)(e - text);
        if (i % 2) {
            memcpy(text + keep, "0001", 4);
            snprintf(text + keep + 4, sizeof text - keep - 4, "%s", exp_part);
        } else {
            /* Just below: decrement the last nonzero digit, fill with nines. */
            char *d = text + keep - 1;
            while (*d == '0')
                *d-- = '9';
            if (*d != '.')
                (*d)--;
        }
        check_one(text, &t);
        /* 17 to 19 significant digits near the midpoint (the fast path's domain). */
        snprintf(text, sizeof text, "%.*e", 16 + (int)rng_below(3), mid);
        check_one(text, &t);
    }
    assert_int_equal(t.mismatches, 0);
}

static void test_subnormals_and_extremes(void **state)
{
    (void)state;
    struct tally t = {0};
    char text[256];
    rng_state = 99;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)rng_next() & 0x007fffffu;
        if (i % 3 == 0)
            bits |= (uint32_t)rng_below(3) << 23; /* smallest normals */
        if (i % 5 == 0)
            bits = 0x7f000000u | (bits & 0x7fffffu); /* largest binade */
        float f;
        memcpy(&f, &bits, 4);
        snprintf(text, sizeof text, "%.*e", (int)rng_below(30), (double)f);
        check_one(text, &t);
        /* Random digits with an exponent in the subnormal / overflow regions. */
        size_t k = put_digits(text, 1 + rng_below(25));
        int exp10 = i % 2 ? -(int)(38 + rng_below(30)) : (int)(30 + rng_below(12));
        snprintf(text + k, sizeof text - k, "e%d", exp10);
        check_one(text, &t);
    }
    assert_int_equal(t.mismatches, 0);
}

/* Tokens of 30 to 400 digits: the slow path's canonical rewrite. */
static void test_long_tokens(void **state)
{
    (void)state;
    struct tally t = {0};
    char text[1024];
    rng_state = 5;
    for (int i = 0; i < 200000; i++) {
        size_t k = 0;
        if (i % 3 == 0) {
            k += (size_t)sprintf(text, "0.");
            unsigned z = rng_below(60);
            for (unsigned j = 0; j < z; j++)
                text[k++] = '0';
        }
        unsigned n = 30 + rng_below(370);
        k += put_digits(text + k, n);
        if (i % 3 == 1) { /* mostly zeros after a prefix: exercises the sticky digit */
            for (size_t j = k - n + 1 + rng_below(30); j < k; j++)
                text[j] = '0';
            if (rng_below(2))
                text[k - 1] = '1';
        }
        if (i % 3 == 2) {
            size_t at = rng_below(n);
            memmove(text + at + 1, text + at, k - at);
            text[at] = '.';
            k++;
        }
        snprintf(text + k, sizeof text - k, "e%d", (int)rng_below(160) - 100 - (int)(n / 2));
        check_one(text, &t);
    }
    assert_int_equal(t.mismatches, 0);
}

static void test_edge_cases(void **state)
{
    (void)state;
    struct tally t = {0};
    static const char *const cases[] = {
        "",
        " ",
        "+",
        "-",
        ".",
        "-.",
        "+.e5",
        "e5",
        ".e5",
        "5.",
        ".5",
        "-.5",
        "+5.",
        "1e",
        "1e+",
        "1e-",
        "1E5",
        "1e+05",
        "1e-05",
        "00000.000",
        "-0",
        "-0.0e-99",
        "0e999999999999999999999",
        "1e99999999999999999999",
        "1e-99999999999999999999",
        "3.4028235e38",
        "3.4028234e38",
        "3.40282356779733661637539395458142568447e38",
        "3.40282356779733661637539395458142568446e38",
        "3.40282356779733661637539395458142568448e38",
        "340282356779733661637539395458142568447",
        "1.17549435e-38",
        "1.4e-45",
        "7.006492321624085e-46",
        "7.006492321624086e-46",
        "7.0064923216240853546186479164495806564013097093825788587853414194e-46",
        "1e-46",
        "2.5e-45",
        "16777216",
        "16777217",
        "16777218",
        "16777219",
        "33554435",
        "9007199254740993",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        "1e22",
        "1e23",
        "1e27",
        "1e28",
        "1e-27",
        "1e-28",
        "0.000000000000000000000000000001",
        "1.5 ",
        " \n\t 2",
        "\v\f\r3",
        "1..2",
        "1.2.3",
        "--1",
        "+-1",
        "1e1e1",
        "1,5",
        "123abc",
        "0.1",
        "0.2",
        "0.3",
        "1.3863000000000008e+00",
        "9.999999999999999e-01",
        "1.0000000000000000001",
        "0.99999999999999999999",
        "1234567890123456789",
        "12345678901234567890",
        "4.5e15",
        "8.589973e9",
        "8.589974e9",
        "0x",
        "0.000000000000000000000000000000000000000000001",
        "100000000000000000000000000000000000000",
        "1000000000000000000000000000000000000000",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_one(cases[i], &t);
    assert_int_equal(t.mismatches, 0);
}

/* Documented differences from strtof: no hex, inf or nan; bounds respected. */
static void test_not_numbers_and_bounds(void **state)
{
    (void)state;
    float v = 1;
    const char *s = "0x1p3";
    assert_ptr_equal(ecg_parse_float(s, s + 5, &v), s + 1);
    assert_true(v == 0.0f);
    s = "inf";
    assert_ptr_equal(ecg_parse_float(s, s + 3, &v), s);
    s = "-nan";
    assert_ptr_equal(ecg_parse_float(s, s + 4, &v), s);
    s = "infinity";
    assert_ptr_equal(ecg_parse_float(s, s + 8, &v), s);
    /* end cuts the token: only what lies before end counts. */
    s = "1.25e3";
    assert_ptr_equal(ecg_parse_float(s, s + 4, &v), s + 4);
    assert_true(v == 1.25f);
    assert_ptr_equal(ecg_parse_float(s, s + 5, &v), s + 4); /* "1.25e": e has no digits */
    assert_true(v == 1.25f);
    assert_ptr_equal(ecg_parse_float(s, s, &v), s);
    s = "-";
    assert_ptr_equal(ecg_parse_float(s, s + 1, &v), s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_cases),     cmocka_unit_test(test_not_numbers_and_bounds),
        cmocka_unit_test(test_random_strings), cmocka_unit_test(test_printf_forms),
        cmocka_unit_test(test_halfway_cases),  cmocka_unit_test(test_subnormals_and_extremes),
        cmocka_unit_test(test_long_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
