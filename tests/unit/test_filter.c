/*
 * test_filter.c - the Ricker wavelet of the plan and the Ricker filter (cpu_filter).
 *
 * The kernel against the scipy.signal.ricker formula; the filter, by both paths (direct and FFT
 * overlap-save) and by the automatic choice, against a float64 direct 'same' convolution on
 * random signals (fixed seeds) of lengths from 1 sample to past several tiles and blocks,
 * including signals shorter than the kernel, and on a real ECG (ucr/ecg50T, 250 Hz); an impulse
 * comes back centred; no energy wraps from one end of the signal to the other; concurrent calls
 * (FFTW planning from several threads) give the single-threaded result; the direct path's
 * vector builds give the same bits.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/cpu.h"
#include "plan.h"

static uint64_t rng_state;

static double rng_uniform(void)
{
    /* splitmix64 -> [0, 1) */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* A plan at 250 Hz (identity resampling) whose Ricker has `taps` taps (odd) and width
 * sigma_samples. */
static void plan_with_kernel(struct ecg_plan *plan, size_t taps, double sigma_samples)
{
    struct ecg_params params = ecg_params_default();
    params.analysis_fs_hz = 250.0;
    params.ricker_points_s = (double)(taps - 1) / 250.0;
    params.ricker_sigma_s = sigma_samples / 250.0;
    struct ecg_error err = {0};
    if (ecg_plan_init(plan, &params, 250.0, &err) != ECG_OK)
        fail_msg("plan: %s", err.message);
    assert_int_equal(plan->ricker_len, taps);
}

/* numpy.convolve(y - y[0], ricker, "same") in float64 (the level taken off in float, as the
 * filter takes it). */
static void reference_filter(const struct ecg_plan *plan, const float *y, size_t n, double *f)
{
    const size_t taps = plan->ricker_len, half = (taps - 1) / 2;
    for (size_t i = 0; i < n; i++) {
        double acc = 0.0;
        for (size_t k = 0; k < taps; k++) {
            int64_t idx = (int64_t)i + (int64_t)half - (int64_t)k;
            if (idx >= 0 && idx < (int64_t)n)
                acc += (double)plan->ricker[k] * (double)(y[idx] - y[0]);
        }
        f[i] = acc;
    }
}

/* Filters y with `method` and checks max |f - reference| <= tol * max |reference|. */
static void check_filter(const struct ecg_plan *plan, const float *y, size_t n,
                         enum cpu_filter_method method, double tol)
{
    float *f = malloc((n + 1) * sizeof *f);
    double *want = malloc((n + 1) * sizeof *want);
    assert_non_null(f);
    assert_non_null(want);
    f[n] = 12345.0f; /* guard: nothing written past n */
    struct ecg_error err = {0};
    assert_int_equal(cpu_filter_with(plan, y, n, f, method, &err), ECG_OK);
    assert_true(f[n] == 12345.0f);
    reference_filter(plan, y, n, want);
    double scale = 0.0, worst = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(want[i]));
        if (fabs(f[i] - want[i]) > worst) {
            worst = fabs(f[i] - want[i]);
            worst_at = i;
        }
    }
    if (worst > tol * scale)
        fail_msg("method %d, %zu taps, n=%zu: |error| %.3g at %zu (f %.9g, want %.9g), scale %.3g",
                 (int)method, plan->ricker_len, n, worst, worst_at, f[worst_at], want[worst_at],
                 scale);
    free(f);
    free(want);
}

static void test_kernel_formula(void **state)
{
    (void)state;
    struct ecg_params params = ecg_params_default();
    params.ricker_points_s = 30.0 / 250.0;
    params.ricker_sigma_s = 4.0 / 250.0;
    struct ecg_plan plan;
    struct ecg_error err = {0};
    const double rates[] = {250.0, 360.0};
    for (size_t r = 0; r < 2; r++) {
        assert_int_equal(ecg_plan_init(&plan, &params, rates[r], &err), ECG_OK);
        assert_int_equal(plan.ricker_len, 31);
        const double a = 4.0, amplitude = 2.0 / (sqrt(3.0 * a) * pow(M_PI, 0.25));
        size_t peak = 0;
        for (size_t k = 0; k < 31; k++) {
            double t = (double)k - 15.0;
            double want = amplitude * (1.0 - (t / a) * (t / a)) * exp(-t * t / (2.0 * a * a));
            if (fabs(plan.ricker[k] - want) > 1e-7 * amplitude)
                fail_msg("ricker[%zu] = %.9g, want %.9g", k, plan.ricker[k], want);
            assert_true(plan.ricker[k] == plan.ricker[30 - k]);
            if (plan.ricker[k] > plan.ricker[peak])
                peak = k;
        }
        /* positive at the centre, negative side lobes */
        assert_int_equal(peak, 15);
        assert_true(plan.ricker[15] > 0.0f);
        assert_true(plan.ricker[15 - 6] < 0.0f && plan.ricker[15 + 6] < 0.0f);
        ecg_plan_fini(&plan);
    }
}

static void test_random_vs_reference(void **state)
{
    (void)state;
    const size_t taps[] = {31, 201};
    const size_t lengths[] = {1,    2,    7,    15,   30,   31,   32,    100,   200,
                              201,  202,  4095, 4096, 4097, 8191, 10000, 50003, 200001};
    const enum cpu_filter_method methods[] = {CPU_FILTER_AUTO, CPU_FILTER_DIRECT, CPU_FILTER_FFT};
    float *y = malloc(200001 * sizeof *y);
    assert_non_null(y);
    rng_state = 2024;
    for (size_t t = 0; t < sizeof taps / sizeof taps[0]; t++) {
        struct ecg_plan plan;
        plan_with_kernel(&plan, taps[t], 4.0 * (double)taps[t] / 31.0);
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            for (size_t i = 0; i < lengths[l]; i++)
                y[i] = (float)(2.0 * rng_uniform() - 1.0 + 0.3);
            for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++)
                check_filter(&plan, y, lengths[l], methods[m], 1e-5);
        }
        ecg_plan_fini(&plan);
    }
    free(y);
}

/* ucr/ecg50T.txt: 50,000 samples of a real ECG at 250 Hz, one value per line. */
static float *read_ucr(size_t *n)
{
    FILE *fp = fopen(ECG_SHARED_DATA "/ucr/ecg50T.txt", "r");
    if (!fp)
        fail_msg("cannot open %s", ECG_SHARED_DATA "/ucr/ecg50T.txt");
    size_t cap = 50000, count = 0;
    float *x = malloc(cap * sizeof *x);
    assert_non_null(x);
    float v;
    while (count < cap && fscanf(fp, "%f", &v) == 1)
        x[count++] = v;
    fclose(fp);
    *n = count;
    return x;
}

static void test_real_ecg(void **state)
{
    (void)state;
    size_t n;
    float *x = read_ucr(&n);
    assert_int_equal(n, 50000);
    struct ecg_plan plan;
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 250.0, &err), ECG_OK);
    check_filter(&plan, x, n, CPU_FILTER_AUTO, 1e-5);
    check_filter(&plan, x, n, CPU_FILTER_DIRECT, 1e-5);
    check_filter(&plan, x, n, CPU_FILTER_FFT, 1e-5);
    ecg_plan_fini(&plan);
    free(x);
}

/* An impulse returns the kernel centred on it; a positive QRS-like bump gives a positive
 * response maximum at the bump. */
static void test_centring_and_sign(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_with_kernel(&plan, 31, 4.0);
    const size_t n = 6000;
    float *y = calloc(n, sizeof *y);
    float *f = malloc(n * sizeof *f);
    assert_non_null(y);
    assert_non_null(f);
    struct ecg_error err = {0};
    const enum cpu_filter_method methods[] = {CPU_FILTER_DIRECT, CPU_FILTER_FFT};
    for (size_t m = 0; m < 2; m++) {
        memset(y, 0, n * sizeof *y);
        y[4100] = 1.0f; /* in the second tile / block */
        assert_int_equal(cpu_filter_with(&plan, y, n, f, methods[m], &err), ECG_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0.0;
            if (i + 15 >= 4100 && i <= 4100 + 15)
                want = plan.ricker[i + 15 - 4100];
            if (fabs(f[i] - want) > 1e-6)
                fail_msg("method %d: impulse response f[%zu] = %.9g, want %.9g", (int)methods[m],
                         i, f[i], want);
        }
        for (size_t i = 0; i < n; i++) {
            double d = ((double)i - 3000.3) / 2.5; /* sigma 10 ms at 250 Hz */
            y[i] = (float)(1.5 * exp(-0.5 * d * d) - 0.2);
        }
        assert_int_equal(cpu_filter_with(&plan, y, n, f, methods[m], &err), ECG_OK);
        size_t peak = 100;
        for (size_t i = 100; i < n - 100; i++)
            if (f[i] > f[peak])
                peak = i;
        assert_int_equal(peak, 3000);
        assert_true(f[peak] > 0.5f);
    }
    free(y);
    free(f);
    ecg_plan_fini(&plan);
}

/* Energy at one end of the signal must not appear at the other (no circular wrap-around). */
/* A constant level reaches the filter as nothing (the first sample's level is taken off):
 * a constant signal filters to exactly zero by every method, and a signal with a level 500
 * times its waves filters as the signal without it, to float rounding of that level. */
static void test_level(void **state)
{
    (void)state;
    const enum cpu_filter_method methods[] = {CPU_FILTER_DIRECT, CPU_FILTER_FFT};
    const size_t n = 5000;
    float *y = malloc(n * sizeof *y), *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g);
    assert_non_null(y);
    assert_non_null(f);
    assert_non_null(g);
    struct ecg_plan plan;
    plan_with_kernel(&plan, 31, 4.0);
    for (size_t m = 0; m < 2; m++) {
        struct ecg_error err = {0};
        for (size_t i = 0; i < n; i++)
            y[i] = -1.25f;
        assert_int_equal(cpu_filter_with(&plan, y, n, f, methods[m], &err), ECG_OK);
        for (size_t i = 0; i < n; i++)
            if (f[i] != 0.0f)
                fail_msg("method %zu: a constant filters to %.3g at %zu", m, f[i], i);
        for (size_t i = 0; i < n; i++)
            y[i] = (float)sin(0.05 * (double)i) * (i % 200 < 10 ? 1.0f : 0.1f);
        assert_int_equal(cpu_filter_with(&plan, y, n, f, methods[m], &err), ECG_OK);
        for (size_t i = 0; i < n; i++)
            y[i] += 500.0f;
        assert_int_equal(cpu_filter_with(&plan, y, n, g, methods[m], &err), ECG_OK);
        double worst = 0.0, top = 0.0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)g[i] - (double)f[i]));
            top = fmax(top, fabs((double)f[i]));
        }
        if (!(worst < 1e-3 * top))
            fail_msg("method %zu: an offset of 500 moved the response by %.3g (peak %.3g)", m,
                     worst, top);
    }
    ecg_plan_fini(&plan);
    free(y);
    free(f);
    free(g);
}

static void test_no_wrap(void **state)
{
    (void)state;
    const size_t taps[] = {31, 201};
    const size_t lengths[] = {300, 3000, 5000, 100000};
    const enum cpu_filter_method methods[] = {CPU_FILTER_AUTO, CPU_FILTER_DIRECT, CPU_FILTER_FFT};
    for (size_t t = 0; t < 2; t++) {
        struct ecg_plan plan;
        plan_with_kernel(&plan, taps[t], 4.0);
        const size_t half = (taps[t] - 1) / 2;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            const size_t n = lengths[l];
            float *y = calloc(n, sizeof *y);
            float *f = malloc(n * sizeof *f);
            assert_non_null(y);
            assert_non_null(f);
            for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
                for (int side = 0; side < 2; side++) {
                    /* 20 large samples at one end (after the first sample, whose level the
                     * filter takes off); the other end must stay silent */
                    memset(y, 0, n * sizeof *y);
                    for (size_t i = 0; i < 20; i++)
                        y[side ? 1 + i : n - 1 - i] = 1000.0f;
                    struct ecg_error err = {0};
                    assert_int_equal(cpu_filter_with(&plan, y, n, f, methods[m], &err), ECG_OK);
                    double loud = 0.0, quiet = 0.0;
                    for (size_t i = 0; i < n; i++) {
                        size_t from_end = side ? i : n - 1 - i; /* distance from the loud end */
                        if (from_end < 21 + half)
                            loud += (double)f[i] * f[i];
                        else
                            quiet += (double)f[i] * f[i];
                    }
                    assert_true(loud > 1.0);
                    if (quiet > 1e-12 * loud)
                        fail_msg("method %d, %zu taps, n=%zu, side %d: %.3g of %.3g leaked",
                                 (int)methods[m], taps[t], n, side, quiet, loud);
                }
            }
            free(y);
            free(f);
        }
        ecg_plan_fini(&plan);
    }
}

struct worker {
    const struct ecg_plan *plan;
    const float *y;
    size_t n;
    float *f;
    enum ecg_status status;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct ecg_error err = {0};
    w->status = ECG_OK;
    for (int rep = 0; rep < 20 && w->status == ECG_OK; rep++)
        w->status = cpu_filter_with(w->plan, w->y, w->n, w->f, CPU_FILTER_FFT, &err);
    return NULL;
}

/* Several threads filtering at once, with lengths that need new FFTW plans, get exactly the
 * single-threaded result. */
static void test_concurrent(void **state)
{
    (void)state;
    enum { THREADS = 6 };
    struct ecg_plan plan;
    plan_with_kernel(&plan, 31, 4.0);
    const size_t lengths[THREADS] = {777, 1500, 2900, 3001, 6000, 9001};
    struct worker workers[THREADS];
    pthread_t threads[THREADS];
    rng_state = 99;
    for (size_t t = 0; t < THREADS; t++) {
        float *y = malloc(lengths[t] * sizeof *y);
        assert_non_null(y);
        for (size_t i = 0; i < lengths[t]; i++)
            y[i] = (float)(rng_uniform() - 0.5);
        workers[t] = (struct worker){.plan = &plan, .y = y, .n = lengths[t]};
        workers[t].f = malloc(lengths[t] * sizeof(float));
        assert_non_null(workers[t].f);
    }
    for (size_t t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, worker_run, &workers[t]), 0);
    for (size_t t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    for (size_t t = 0; t < THREADS; t++) {
        assert_int_equal(workers[t].status, ECG_OK);
        float *want = malloc(lengths[t] * sizeof *want);
        assert_non_null(want);
        struct ecg_error err = {0};
        assert_int_equal(cpu_filter_with(&plan, workers[t].y, lengths[t], want, CPU_FILTER_FFT,
                                         &err),
                         ECG_OK);
        assert_memory_equal(want, workers[t].f, lengths[t] * sizeof *want);
        free(want);
        free((void *)workers[t].y);
        free(workers[t].f);
    }
    ecg_plan_fini(&plan);
}

/*
 * The direct path's inner loop by every build this CPU has (cpu_filter_taps_isa), on random
 * signals whose lengths leave every kind of remainder (none, under 8, under 32, under 64, past a
 * tile) and kernels of 1 to 95 taps: AVX2 and AVX-512 give the same bits (the same fused
 * multiply-adds in the same order, the same plain tail), BEST gives the widest's, and plain C
 * (no fused multiply-adds) agrees within float rounding.
 */
static void test_isa_builds(void **state)
{
    (void)state;
    const size_t lengths[] = {1, 7, 8, 31, 63, 64, 65, 100, 127, 4095, 4096, 4097, 4096 + 64 + 9,
                              10000};
    const size_t tap_counts[] = {1, 3, 31, 41, 95};
    bool avx2 = false, avx512 = false;
#if defined(__x86_64__)
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    avx512 = avx2 && __builtin_cpu_supports("avx512f");
#endif
    size_t compared = 0;
    rng_state = 77;
    for (size_t t = 0; t < sizeof tap_counts / sizeof *tap_counts; t++) {
        const size_t taps = tap_counts[t];
        float *g = malloc(taps * sizeof *g);
        assert_non_null(g);
        for (size_t k = 0; k < taps; k++)
            g[k] = (float)(rng_uniform() - 0.5);
        for (size_t q = 0; q < sizeof lengths / sizeof *lengths; q++) {
            const size_t n = lengths[q];
            float *y = malloc(n * sizeof *y), *best = malloc(n * sizeof *best);
            float *plain = malloc(n * sizeof *plain), *way = malloc(n * sizeof *way);
            assert_true(y && best && plain && way);
            for (size_t i = 0; i < n; i++)
                y[i] = (float)(2.0 * rng_uniform() - 1.0);
            struct ecg_error err = {0};
            assert_int_equal(cpu_filter_taps_isa(g, taps, y, n, CPU_FILTER_ISA_BEST, best, &err),
                             ECG_OK);
            assert_int_equal(
                cpu_filter_taps_isa(g, taps, y, n, CPU_FILTER_ISA_PORTABLE, plain, &err), ECG_OK);
            for (size_t i = 0; i < n; i++)
                assert_float_equal(plain[i], best[i], 1e-5 * (double)taps);
            const enum cpu_filter_isa fma_ways[] = {CPU_FILTER_ISA_AVX2, CPU_FILTER_ISA_AVX512};
            const bool have[] = {avx2, avx512};
            for (size_t w = 0; w < 2; w++) {
                if (!have[w])
                    continue;
                assert_int_equal(cpu_filter_taps_isa(g, taps, y, n, fma_ways[w], way, &err),
                                 ECG_OK);
                if (memcmp(way, best, n * sizeof *way) != 0)
                    fail_msg("%zu taps, %zu samples: build %d differs from the best build", taps,
                             n, (int)fma_ways[w]);
                compared++;
            }
            free(y);
            free(best);
            free(plain);
            free(way);
        }
        free(g);
    }
    printf("# builds compared bit for bit: %zu (AVX2 %s, AVX-512 %s)\n", compared,
           avx2 ? "yes" : "no", avx512 ? "yes" : "no");
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_with_kernel(&plan, 31, 4.0);
    struct ecg_error err = {0};
    float buf[8] = {0};
    assert_int_equal(cpu_filter(&plan, NULL, 8, buf, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_argument");
    assert_int_equal(cpu_filter(NULL, buf, 8, buf, &err), ECG_ERR_ARG);
    assert_int_equal(cpu_filter(&plan, NULL, 0, NULL, &err), ECG_OK);
    struct ecg_plan empty = {0};
    assert_int_equal(cpu_filter(&empty, buf, 8, buf, &err), ECG_ERR_INTERNAL);
    ecg_plan_fini(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_formula),
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_real_ecg),
        cmocka_unit_test(test_centring_and_sign),
        cmocka_unit_test(test_no_wrap),
        cmocka_unit_test(test_level),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_isa_builds),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
