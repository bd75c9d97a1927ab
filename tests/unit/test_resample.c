/*
 * test_resample.c - the plan (engine/plan.c) and the polyphase resampler (cpu_resample).
 *
 * Plan: rate validation, rational ratios for common and odd rates, the anti-aliasing prototype's
 * frequency response (pass-band ripple < 0.1 dB to 40 Hz, >= 60 dB stop band) for 360, 1000 and
 * 128 Hz inputs, window lengths, the length formula and the index mapping.
 * Resampler: against a float64 evaluation of the defining sum (random inputs with a fixed seed,
 * many lengths and rates, and an MIT-BIH excerpt), DC gain and edge hold, sine tones end to end
 * (gain, phase, alias and image products), and time alignment of a spike and of a QRS-like bump.
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

static void plan_at(struct ecg_plan *plan, double fs_in_hz)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    enum ecg_status status = ecg_plan_init(plan, &params, fs_in_hz, &err);
    if (status != ECG_OK)
        fail_msg("plan at %g Hz: %s", fs_in_hz, err.message);
}

/* Runs cpu_resample into a fresh array of ecg_plan_resampled_len() floats. */
static float *resample(const struct ecg_plan *plan, const float *x, size_t n, size_t *n_out)
{
    *n_out = ecg_plan_resampled_len(plan, n);
    float *y = malloc((*n_out ? *n_out : 1) * sizeof *y);
    assert_non_null(y);
    struct ecg_error err = {0};
    assert_int_equal(cpu_resample(plan, x, n, y, &err), ECG_OK);
    return y;
}

/* The defining sum of plan.h in float64, with the documented edge hold:
 * y[j] = sum_k fir[k] * xup[j * down - k + fir_delay], xup[m] = x[clamp(m / up)] where
 * m % up == 0, else 0. */
static double reference_output(const struct ecg_plan *plan, const float *x, size_t n, size_t j)
{
    double acc = 0.0;
    int64_t up = plan->up;
    for (size_t k = 0; k < plan->fir_len; k++) {
        int64_t m = (int64_t)j * plan->down - (int64_t)k + (int64_t)plan->fir_delay;
        int64_t r = ((m % up) + up) % up;
        if (r != 0)
            continue;
        int64_t i = (m - r) / up;
        if (i < 0)
            i = 0;
        if (i > (int64_t)n - 1)
            i = (int64_t)n - 1;
        acc += (double)plan->fir[k] * (double)x[i];
    }
    return acc;
}

/* |H(f)| / up of the prototype at f Hz (the prototype runs at up * fs_in). */
static double prototype_gain(const struct ecg_plan *plan, double f_hz)
{
    double w = 2.0 * M_PI * f_hz / ((double)plan->up * plan->fs_in_hz);
    double re = 0.0, im = 0.0;
    for (size_t k = 0; k < plan->fir_len; k++) {
        double phase = w * ((double)k - (double)plan->fir_delay);
        re += plan->fir[k] * cos(phase);
        im -= plan->fir[k] * sin(phase);
    }
    return hypot(re, im) / (double)plan->up;
}

/* ---------------------------------------------------------------- plan */

static void test_plan_rejects_bad_rates(void **state)
{
    (void)state;
    const double bad[] = {99.0, 2001.0, 99.999, 2000.001, 0.0, -250.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ecg_plan plan;
        memset(&plan, 0xab, sizeof plan);
        struct ecg_params params = ecg_params_default();
        struct ecg_error err = {0};
        assert_int_equal(ecg_plan_init(&plan, &params, bad[i], &err), ECG_ERR_UNSUPPORTED);
        assert_string_equal(err.code, "bad_rate");
        char rate[32];
        snprintf(rate, sizeof rate, "%g Hz", bad[i]);
        if (!strstr(err.message, rate))
            fail_msg("message \"%s\" does not name the rate \"%s\"", err.message, rate);
        /* left empty */
        assert_null(plan.fir);
        assert_null(plan.ricker);
        assert_int_equal(plan.up, 0);
        ecg_plan_fini(&plan);
    }
    /* the bounds themselves are accepted */
    struct ecg_plan plan;
    plan_at(&plan, 100.0);
    ecg_plan_fini(&plan);
    plan_at(&plan, 2000.0);
    ecg_plan_fini(&plan);

    struct ecg_params params = ecg_params_default();
    params.ricker_sigma_s = 0.0;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 360.0, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_params");
    assert_null(plan.fir);
    params = ecg_params_default();
    params.refractory_s = -0.1;
    assert_int_equal(ecg_plan_init(&plan, &params, 360.0, &err), ECG_ERR_ARG);
    assert_non_null(strstr(err.message, "refractory_s"));
    assert_null(plan.fir);
    assert_null(plan.ricker);
}

static void test_plan_ratios(void **state)
{
    (void)state;
    const struct {
        double fs_in;
        uint32_t up, down;
    } exact[] = {
        {360.0, 25, 36}, {1000.0, 1, 4}, {128.0, 125, 64}, {256.0, 125, 128},
        {500.0, 1, 2},   {2000.0, 1, 8}, {100.0, 5, 2},    {250.0, 1, 1},
        {187.5, 4, 3},   {1024.0, 125, 512},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        struct ecg_plan plan;
        plan_at(&plan, exact[i].fs_in);
        if (plan.up != exact[i].up || plan.down != exact[i].down)
            fail_msg("%g Hz: got %u/%u, want %u/%u", exact[i].fs_in, plan.up, plan.down,
                     exact[i].up, exact[i].down);
        assert_true(plan.fs_a_hz == 250.0);
        ecg_plan_fini(&plan);
    }
    /* identity: no filter at all */
    struct ecg_plan plan;
    plan_at(&plan, 250.0);
    assert_null(plan.fir);
    assert_int_equal(plan.fir_len, 0);
    ecg_plan_fini(&plan);

    /* any rate: bounded up, fs_a close to 250 and exactly fs_in * up / down */
    for (double fs = 100.0; fs <= 2000.0; fs += 0.73) {
        plan_at(&plan, fs);
        assert_true(plan.up >= 1 && plan.up <= 256);
        assert_true(plan.fs_a_hz == fs * plan.up / plan.down);
        if (fabs(plan.fs_a_hz - 250.0) > 250.0 * 2e-3)
            fail_msg("%g Hz: fs_a %.6f", fs, plan.fs_a_hz);
        if (plan.fir) {
            assert_true(plan.fir_len % 2 == 1);
            assert_int_equal(plan.fir_delay, (plan.fir_len - 1) / 2);
        }
        ecg_plan_fini(&plan);
    }
    /* a non-integer EDF rate */
    plan_at(&plan, 128.5);
    assert_true(plan.up <= 256);
    assert_true(fabs(plan.fs_a_hz - 250.0) < 0.025);
    ecg_plan_fini(&plan);
}

static void test_plan_prototype(void **state)
{
    (void)state;
    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 2000.0, 100.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        struct ecg_plan plan;
        plan_at(&plan, rates[r]);
        /* symmetric (linear phase), every branch sums to 1 (DC gain 1 on every output) */
        for (size_t k = 0; k < plan.fir_len; k++)
            assert_true(plan.fir[k] == plan.fir[plan.fir_len - 1 - k]);
        for (uint32_t p = 0; p < plan.up; p++) {
            double sum = 0.0;
            for (size_t k = p; k < plan.fir_len; k += plan.up)
                sum += plan.fir[k];
            if (fabs(sum - 1.0) > 1e-5)
                fail_msg("%g Hz: branch %u sums to %.8f", rates[r], p, sum);
        }
        /* pass band: flat within 0.1 dB to 40 Hz */
        double worst_pass = 0.0;
        for (double f = 0.0; f <= 40.0; f += 0.25) {
            double db = 20.0 * log10(prototype_gain(&plan, f));
            if (fabs(db) > worst_pass)
                worst_pass = fabs(db);
        }
        if (worst_pass >= 0.1)
            fail_msg("%g Hz: pass-band ripple %.4f dB", rates[r], worst_pass);
        /* stop band: from the Nyquist frequency of the slower rate (the output's when
         * downsampling, the input's when upsampling: its images) to half the upsampled rate */
        double stop_lo = 0.5 * fmin(plan.fs_in_hz, plan.fs_a_hz);
        double stop_hi = 0.5 * plan.up * plan.fs_in_hz;
        double worst_stop = -INFINITY;
        for (double f = stop_lo; f <= stop_hi; f += (stop_hi - stop_lo) / 4000.0) {
            double db = 20.0 * log10(prototype_gain(&plan, f) + 1e-30);
            if (db > worst_stop)
                worst_stop = db;
        }
        if (worst_stop > -60.0)
            fail_msg("%g Hz: stop band only %.2f dB", rates[r], worst_stop);
        if (plan.fs_in_hz > plan.fs_a_hz)
            assert_true(stop_lo <= 0.5 * plan.fs_a_hz + 1e-9);
        ecg_plan_fini(&plan);
    }
}

/* Parameters with known values (the defaults may be tuned; these are not). */
static struct ecg_params fixed_params(void)
{
    struct ecg_params params = ecg_params_default();
    params.analysis_fs_hz = 250.0;
    params.ricker_points_s = 30.0 / 250.0;
    params.ricker_sigma_s = 4.0 / 250.0;
    params.nms_window_s = 180.0 / 250.0;
    params.refractory_s = 0.2;
    params.pre_r_s = 0.25;
    params.beat_min_s = 100.0 / 250.0;
    params.beat_max_s = 256.0 / 250.0;
    params.beat_len = 256;
    return params;
}

static void test_plan_windows(void **state)
{
    (void)state;
    const double rates[] = {250.0, 360.0, 1000.0, 128.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        struct ecg_params params = fixed_params();
        struct ecg_plan plan;
        struct ecg_error err = {0};
        assert_int_equal(ecg_plan_init(&plan, &params, rates[r], &err), ECG_OK);
        assert_int_equal(plan.nms_window, 180);
        assert_int_equal(plan.refractory, 50);
        assert_int_equal(plan.pre_r, 63); /* 62.5 rounds up */
        assert_int_equal(plan.beat_min, 100);
        assert_int_equal(plan.beat_max, 256);
        assert_int_equal(plan.beat_len, 256);
        assert_int_equal(plan.ricker_len, 31);
        ecg_plan_fini(&plan);

        /* the defaults, whatever they are, go through the same rounding */
        params = ecg_params_default();
        assert_int_equal(ecg_plan_init(&plan, &params, rates[r], &err), ECG_OK);
        assert_int_equal(plan.nms_window, lround(params.nms_window_s * plan.fs_a_hz));
        assert_int_equal(plan.refractory, lround(params.refractory_s * plan.fs_a_hz));
        assert_int_equal(plan.pre_r, lround(params.pre_r_s * plan.fs_a_hz));
        assert_int_equal(plan.beat_min, lround(params.beat_min_s * plan.fs_a_hz));
        assert_int_equal(plan.beat_max, lround(params.beat_max_s * plan.fs_a_hz));
        assert_int_equal(plan.beat_len, params.beat_len);
        assert_int_equal(plan.ricker_len,
                         2 * lround(0.5 * params.ricker_points_s * plan.fs_a_hz) + 1);
        ecg_plan_fini(&plan);
    }
    /* counts follow fs_a, not the nominal 250 Hz */
    struct ecg_params params = fixed_params();
    params.analysis_fs_hz = 500.0;
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 360.0, &err), ECG_OK);
    assert_true(plan.fs_a_hz == 500.0);
    assert_int_equal(plan.up, 25);
    assert_int_equal(plan.down, 18);
    assert_int_equal(plan.nms_window, 360);
    assert_int_equal(plan.beat_min, 200);
    assert_int_equal(plan.ricker_len, 61);
    ecg_plan_fini(&plan);
    ecg_plan_fini(NULL);
}

static void test_resampled_len(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 360.0);
    assert_int_equal(ecg_plan_resampled_len(&plan, 0), 0);
    assert_int_equal(ecg_plan_resampled_len(&plan, 1), 1);
    assert_int_equal(ecg_plan_resampled_len(&plan, 2), 1);  /* 0.69 */
    assert_int_equal(ecg_plan_resampled_len(&plan, 3), 2);  /* 1.39 */
    assert_int_equal(ecg_plan_resampled_len(&plan, 360), 250);
    assert_int_equal(ecg_plan_resampled_len(&plan, 361), 251);
    assert_int_equal(ecg_plan_resampled_len(&plan, 650000), 451389);
    ecg_plan_fini(&plan);
    plan_at(&plan, 250.0);
    assert_int_equal(ecg_plan_resampled_len(&plan, 12345), 12345);
    ecg_plan_fini(&plan);

    /* in general: the last output lies at or before the last input, the next one after it */
    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 2000.0, 100.0, 256.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        plan_at(&plan, rates[r]);
        for (size_t n = 1; n < 3000; n += 7) {
            size_t n_a = ecg_plan_resampled_len(&plan, n);
            assert_true((uint64_t)(n_a - 1) * plan.down <= (uint64_t)(n - 1) * plan.up);
            assert_true((uint64_t)n_a * plan.down > (uint64_t)(n - 1) * plan.up);
        }
        ecg_plan_fini(&plan);
    }
}

static void test_to_input(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 360.0);
    assert_int_equal(ecg_plan_to_input(&plan, 0), 0);
    assert_int_equal(ecg_plan_to_input(&plan, 1), 1);    /* 1.44 */
    assert_int_equal(ecg_plan_to_input(&plan, 2), 3);    /* 2.88 */
    assert_int_equal(ecg_plan_to_input(&plan, 250), 360);
    assert_int_equal(ecg_plan_to_input(&plan, -1), -1);  /* -1.44 */
    assert_int_equal(ecg_plan_to_input(&plan, 451388), 649999);
    ecg_plan_fini(&plan);

    plan_at(&plan, 187.5); /* 4/3: exact halves occur */
    assert_int_equal(ecg_plan_to_input(&plan, 2), 2);    /* 1.5 rounds up */
    assert_int_equal(ecg_plan_to_input(&plan, -2), -1);  /* -1.5 rounds up too */
    assert_int_equal(ecg_plan_to_input(&plan, 6), 5);    /* 4.5 */
    ecg_plan_fini(&plan);

    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 187.5, 2000.0, 250.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        plan_at(&plan, rates[r]);
        for (int64_t j = -5000; j < 200000; j += 3) {
            /* r - 1/2 <= j * down / up < r + 1/2, in integers */
            int64_t got = ecg_plan_to_input(&plan, j);
            int64_t twice = 2 * j * (int64_t)plan.down;
            int64_t up = plan.up;
            if (!(2 * up * got - up <= twice && twice < 2 * up * got + up))
                fail_msg("%g Hz: to_input(%lld) = %lld", rates[r], (long long)j,
                         (long long)got);
        }
        ecg_plan_fini(&plan);
    }
}

/* ---------------------------------------------------------------- resampler */

static void test_identity(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 250.0);
    float x[1000];
    rng_state = 7;
    for (size_t i = 0; i < 1000; i++)
        x[i] = (float)(rng_uniform() - 0.5);
    size_t n_out;
    float *y = resample(&plan, x, 1000, &n_out);
    assert_int_equal(n_out, 1000);
    assert_memory_equal(x, y, sizeof x);
    free(y);
    ecg_plan_fini(&plan);
}

/* cpu_resample against the float64 reference on random input; returns the worst relative
 * error. Covers inputs shorter than the filter (edge code only) and long ones (vector path). */
static void check_against_reference(double fs_in, const float *x, size_t n, double tol)
{
    struct ecg_plan plan;
    plan_at(&plan, fs_in);
    size_t n_out;
    float *y = resample(&plan, x, n, &n_out);
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(x[i]));
    for (size_t j = 0; j < n_out; j++) {
        double want = reference_output(&plan, x, n, j);
        if (fabs(y[j] - want) > tol * scale)
            fail_msg("%g Hz, n=%zu: y[%zu] = %.9g, want %.9g", fs_in, n, j, y[j], want);
    }
    free(y);
    ecg_plan_fini(&plan);
}

static void test_against_reference_random(void **state)
{
    (void)state;
    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 2000.0, 100.0, 256.0, 499.7};
    const size_t lengths[] = {1, 2, 3, 5, 17, 64, 100, 1000, 4099};
    float *x = malloc(4099 * sizeof *x);
    assert_non_null(x);
    rng_state = 12345;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            for (size_t i = 0; i < lengths[l]; i++)
                x[i] = (float)(2.0 * rng_uniform() - 1.0 + 0.5); /* with an offset */
            check_against_reference(rates[r], x, lengths[l], 2e-6);
        }
    }
    free(x);
}

/* MIT-BIH 101, lead MLII, first 10 s: format 212 decoded here, in physical units. */
static float *read_mitdb_excerpt(size_t n)
{
    FILE *fp = fopen(ECG_SHARED_DATA "/mitdb/101.dat", "rb");
    if (!fp)
        fail_msg("cannot open %s", ECG_SHARED_DATA "/mitdb/101.dat");
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[3];
        assert_int_equal(fread(b, 1, 3, fp), 3);
        int v = b[0] | ((b[1] & 0x0f) << 8); /* first sample of the pair: lead 0 */
        if (v >= 2048)
            v -= 4096;
        x[i] = (float)((v - 1024) / 200.0);
    }
    fclose(fp);
    return x;
}

static void test_against_reference_mitdb(void **state)
{
    (void)state;
    const size_t n = 3600;
    float *x = read_mitdb_excerpt(n);
    /* real ECG: R peaks of ~1-2 mV over a baseline of ~-0.3 mV */
    float lo = x[0], hi = x[0];
    for (size_t i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    assert_true(hi - lo > 0.5f && hi - lo < 5.0f);
    check_against_reference(360.0, x, n, 2e-6);
    /* and the same record read as if it came at other rates */
    check_against_reference(128.0, x, n, 2e-6);
    check_against_reference(1000.0, x, n, 2e-6);
    free(x);
}

static void test_dc_and_edge_hold(void **state)
{
    (void)state;
    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 2000.0, 100.0};
    const size_t lengths[] = {1, 5, 50, 20000};
    float *x = malloc(20000 * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < 20000; i++)
        x[i] = 3.7f;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        struct ecg_plan plan;
        plan_at(&plan, rates[r]);
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            size_t n_out;
            float *y = resample(&plan, x, lengths[l], &n_out);
            for (size_t j = 0; j < n_out; j++)
                if (fabsf(y[j] - 3.7f) > 3.7f * 1e-5f)
                    fail_msg("%g Hz, n=%zu: y[%zu] = %.7g, want 3.7", rates[r], lengths[l], j,
                             y[j]);
            free(y);
        }
        ecg_plan_fini(&plan);
    }
    free(x);
}

/* Least-squares fit y[j] ~ a cos(w t) + b sin(w t) over [j0, j1); returns the residual RMS. */
static double fit_tone(const float *y, size_t j0, size_t j1, double f_hz, double fs_hz,
                       double *a, double *b)
{
    double cc = 0, ss = 0, cs = 0, yc = 0, ys = 0;
    for (size_t j = j0; j < j1; j++) {
        double w = 2.0 * M_PI * f_hz * (double)j / fs_hz;
        double c = cos(w), s = sin(w);
        cc += c * c;
        ss += s * s;
        cs += c * s;
        yc += y[j] * c;
        ys += y[j] * s;
    }
    double det = cc * ss - cs * cs;
    *a = (yc * ss - ys * cs) / det;
    *b = (ys * cc - yc * cs) / det;
    double res = 0.0;
    for (size_t j = j0; j < j1; j++) {
        double w = 2.0 * M_PI * f_hz * (double)j / fs_hz;
        double e = y[j] - (*a * cos(w) + *b * sin(w));
        res += e * e;
    }
    return sqrt(res / (double)(j1 - j0));
}

static void test_tones(void **state)
{
    (void)state;
    const double rates[] = {360.0, 1000.0, 128.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        struct ecg_plan plan;
        plan_at(&plan, rates[r]);
        const double fs_in = plan.fs_in_hz, fs_a = plan.fs_a_hz;
        const size_t n = (size_t)(fs_in * 20.0);
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        /* pass band: a unit sine of phase 0.3 comes out with gain 1 (0.1 dB), the same phase at
         * the same times (alignment), and nothing else above -60 dB (aliases, images) */
        const double pass[] = {0.5, 1.0, 5.0, 11.3, 20.0, 33.3, 40.0};
        for (size_t t = 0; t < sizeof pass / sizeof pass[0]; t++) {
            for (size_t i = 0; i < n; i++)
                x[i] = (float)sin(2.0 * M_PI * pass[t] * (double)i / fs_in + 0.3);
            size_t n_out;
            float *y = resample(&plan, x, n, &n_out);
            double a, b;
            double res = fit_tone(y, (size_t)(2 * fs_a), n_out - (size_t)(2 * fs_a), pass[t],
                                  fs_a, &a, &b);
            double gain_db = 20.0 * log10(hypot(a, b));
            double phase = atan2(a, b); /* a cos + b sin = A sin(w t + phase) */
            double res_db = 20.0 * log10(res / sqrt(0.5));
            if (fabs(gain_db) >= 0.1 || fabs(phase - 0.3) > 1e-3 || res_db > -60.0)
                fail_msg("%g Hz input, %g Hz tone: gain %.4f dB, phase %.5f, residual %.1f dB",
                         fs_in, pass[t], gain_db, phase, res_db);
            free(y);
        }
        /* stop band (downsampling): tones above the output's Nyquist frequency, which would
         * alias into the analysis band, come out 60 dB down */
        for (double f = 0.5 * fs_a + 0.5; f < 0.5 * fs_in && fs_in > fs_a; f += 17.3) {
            for (size_t i = 0; i < n; i++)
                x[i] = (float)sin(2.0 * M_PI * f * (double)i / fs_in);
            size_t n_out;
            float *y = resample(&plan, x, n, &n_out);
            double rms = 0.0;
            size_t j0 = (size_t)(2 * fs_a), j1 = n_out - (size_t)(2 * fs_a);
            for (size_t j = j0; j < j1; j++)
                rms += (double)y[j] * y[j];
            double db = 20.0 * log10(sqrt(rms / (double)(j1 - j0)) / sqrt(0.5));
            if (db > -60.0)
                fail_msg("%g Hz input, %g Hz tone: only %.1f dB down", fs_in, f, db);
            free(y);
        }
        free(x);
        ecg_plan_fini(&plan);
    }
}

static void test_alignment(void **state)
{
    (void)state;
    const double rates[] = {360.0, 1000.0, 128.0, 128.5, 2000.0, 100.0, 256.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        struct ecg_plan plan;
        plan_at(&plan, rates[r]);
        const double fs_in = plan.fs_in_hz, fs_a = plan.fs_a_hz;
        const size_t n = (size_t)(fs_in * 10.0);
        float *x = calloc(n, sizeof *x);
        assert_non_null(x);

        /* A QRS-like Gaussian bump (sigma 15 ms) at a time off both grids: the output follows
         * the bump sampled at j / fs_a, so its peak sits where the input's does. */
        const double t0 = 4.01234, sigma = 0.015;
        for (size_t i = 0; i < n; i++) {
            double d = (double)i / fs_in - t0;
            x[i] = (float)exp(-d * d / (2.0 * sigma * sigma));
        }
        size_t n_out;
        float *y = resample(&plan, x, n, &n_out);
        size_t peak = 0;
        for (size_t j = 0; j < n_out; j++) {
            double d = (double)j / fs_a - t0;
            double want = exp(-d * d / (2.0 * sigma * sigma));
            if (fabs(y[j] - want) > 2e-3)
                fail_msg("%g Hz: bump y[%zu] = %.6f, want %.6f", fs_in, j, y[j], want);
            if (y[j] > y[peak])
                peak = j;
        }
        /* a parabola through the logarithms: exact for a Gaussian */
        double l = log(y[peak - 1]), c = log(y[peak]), rr = log(y[peak + 1]);
        double peak_at = (double)peak + 0.5 * (l - rr) / (l - 2.0 * c + rr);
        if (fabs(peak_at - t0 * fs_a) > 0.05)
            fail_msg("%g Hz: bump peak at %.4f, want %.4f", fs_in, peak_at, t0 * fs_a);
        free(y);

        /* A spike: the response is centred on the spike's time (centroid within 0.5 sample). */
        memset(x, 0, n * sizeof *x);
        const size_t spike = n / 2 + 3;
        x[spike] = 1.0f;
        y = resample(&plan, x, n, &n_out);
        double m0 = 0.0, m1 = 0.0;
        for (size_t j = 0; j < n_out; j++) {
            m0 += y[j];
            m1 += (double)j * y[j];
        }
        double want = (double)spike * plan.up / plan.down;
        if (fabs(m1 / m0 - want) > 0.5)
            fail_msg("%g Hz: spike response centred at %.4f, want %.4f", fs_in, m1 / m0, want);
        free(y);
        free(x);
        ecg_plan_fini(&plan);
    }
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 360.0);
    struct ecg_error err = {0};
    float y[4];
    assert_int_equal(cpu_resample(&plan, NULL, 10, y, &err), ECG_ERR_ARG);
    assert_int_equal(cpu_resample(NULL, y, 1, y, &err), ECG_ERR_ARG);
    assert_int_equal(cpu_resample(&plan, NULL, 0, NULL, &err), ECG_OK);
    ecg_plan_fini(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_rejects_bad_rates),
        cmocka_unit_test(test_plan_ratios),
        cmocka_unit_test(test_plan_prototype),
        cmocka_unit_test(test_plan_windows),
        cmocka_unit_test(test_resampled_len),
        cmocka_unit_test(test_to_input),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_against_reference_random),
        cmocka_unit_test(test_against_reference_mitdb),
        cmocka_unit_test(test_dc_and_edge_hold),
        cmocka_unit_test(test_tones),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
