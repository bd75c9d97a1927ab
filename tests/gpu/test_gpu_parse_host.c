/*
 * test_gpu_parse_host.c - the CUDA backend's CSV number routine, run on the host, against
 * ecg_parse_float (which is bit-identical to strtof). Needs a CUDA build, not a device: it runs
 * in CI. The same routine runs in the device kernels; test_gpu_parity checks it there end to end.
 *
 * Every token the routine accepts (TOKEN_OK) must parse to the same bits and use every byte;
 * HARD tokens (left to the host) must be valid numbers; BAD tokens must not be whole numbers
 * (leading spaces aside: CSV fields reach the routine trimmed).
 */
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
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

#ifdef ECG_HAVE_CUDA
/* One token against the reference; counts the kinds. */
static void check_token(const char *tok, size_t counts[3])
{
    size_t len = strlen(tok);
    float gpu = 0, host = 0;
    int kind = cuda_parse_token_host(tok, tok + len, &gpu);
    const char *end = ecg_parse_float(tok, tok + len, &host);
    assert_true(kind >= 0 && kind <= 2);
    counts[kind]++;
    if (kind == 0) {
        if (end != tok + len || memcmp(&gpu, &host, sizeof gpu) != 0)
            fail_msg("\"%s\": device routine %a, ecg_parse_float %a (used %td of %zu bytes)", tok,
                     (double)gpu, (double)host, end - tok, len);
    } else if (kind == 1) {
        assert_true(end == tok + len);
    } else {
        assert_true(end != tok + len || len == 0);
    }
}

static void test_random_tokens(void **state)
{
    (void)state;
    unsigned seed = 2024;
    size_t counts[3] = {0};
    char tok[160], digits[64];
    for (int it = 0; it < 400000; it++) {
        int shape = rand_r(&seed) % 10;
        int nd = 1 + rand_r(&seed) % (shape == 9 ? 40 : 12);
        for (int i = 0; i < nd; i++)
            digits[i] = (char)('0' + rand_r(&seed) % 10);
        digits[nd] = 0;
        int point = rand_r(&seed) % (nd + 1);
        const char *sign = rand_r(&seed) % 3 == 0 ? "-" : (rand_r(&seed) % 9 == 0 ? "+" : "");
        if (shape <= 5) {
            snprintf(tok, sizeof tok, "%s%.*s.%s", sign, point, digits, digits + point);
        } else if (shape <= 7) {
            snprintf(tok, sizeof tok, "%s%se%d", sign, digits, rand_r(&seed) % 80 - 40);
        } else if (shape == 8) {
            uint32_t u = (uint32_t)rand_r(&seed) ^ ((uint32_t)rand_r(&seed) << 16);
            float f;
            memcpy(&f, &u, sizeof f);
            if (!isfinite(f))
                f = 1.5f;
            snprintf(tok, sizeof tok, "%.*g", 1 + rand_r(&seed) % 9, (double)f);
        } else {
            snprintf(tok, sizeof tok, "%s%s", sign, digits);
        }
        check_token(tok, counts);
    }
    printf("# random tokens: %zu parsed on the device path, %zu left to the host, %zu bad\n",
           counts[0], counts[1], counts[2]);
    assert_true(counts[0] > 300000); /* the fast path covers ordinary numbers */
}

/* Exact float midpoints: double rounding would go wrong on them; they must go to the host or
 * come out right. */
static void test_midpoints(void **state)
{
    (void)state;
    unsigned seed = 7;
    size_t counts[3] = {0};
    char tok[64];
    for (int i = 0; i < 100000; i++) {
        uint32_t u = 0x3f800000u + (uint32_t)rand_r(&seed) % 0x800000u, v = u + 1;
        float lo, hi;
        memcpy(&lo, &u, sizeof lo);
        memcpy(&hi, &v, sizeof hi);
        snprintf(tok, sizeof tok, "%.17g", ((double)lo + (double)hi) / 2);
        check_token(tok, counts);
    }
    printf("# midpoints: %zu device path, %zu host\n", counts[0], counts[1]);
}

static void test_edge_tokens(void **state)
{
    (void)state;
    static const char *const good[] = {"0", "-0", "+0", "0.0", "-0.000", ".5", "5.", "1e5",
                                       "1E-5", "-1.5e+3", "3.4028234e38", "1.17549435e-38",
                                       "0.1", "123456789", "16777217", "9007199254740993",
                                       "00000000000000000000001.5", "1.000000000000000000001"};
    static const char *const bad[] = {"", "-", "+", ".", "e5", "1e", "1e+", "1.5x", "0x10",
                                      "nan", "inf", "1 ", "--1", "1..2"};
    size_t counts[3] = {0};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        check_token(good[i], counts);
    assert_int_equal(counts[2], 0);
    memset(counts, 0, sizeof counts);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_token(bad[i], counts);
    assert_int_equal(counts[2], sizeof bad / sizeof bad[0]);
}
#endif

#ifndef ECG_HAVE_CUDA
static void test_no_cuda(void **state)
{
    (void)state;
    printf("# SKIP: this build has no CUDA backend\n");
    skip();
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef ECG_HAVE_CUDA
        cmocka_unit_test(test_random_tokens),
        cmocka_unit_test(test_midpoints),
        cmocka_unit_test(test_edge_tokens),
#else
        cmocka_unit_test(test_no_cuda),
#endif
    };
    return cmocka_run_group_tests_name("gpu_parse_host", tests, NULL, NULL);
}
