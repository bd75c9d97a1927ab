/*
 * detect_synth.h - what the detector's tests share (test_detect.c, test_detect_blocked.c): a
 * seeded random generator, synthetic ECGs with known R peaks (P, QRS and T waves as Gaussians,
 * normal and ventricular beats, baseline wander, noise, offset), and the detector run on them
 * with its output contract checked.
 *
 * Include after <cmocka.h>. Everything here is static to each test program.
 */
#ifndef DETECT_SYNTH_H
#define DETECT_SYNTH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "plan.h"


static uint64_t rng_state;

static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline double rng_uniform(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static inline double rng_gauss(void)
{
    double u = rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(2.0 * M_PI * v);
}

/* ------------------------------------------------------------------ synthetic ECG */

struct synth {
    float *x;
    size_t n;
    double fs;
    int64_t truth[1024]; /* true R peaks, input grid */
    size_t n_truth;
};

static inline void add_gauss(float *x, size_t n, double fs, double centre_s, double sigma_s, double amp)
{
    int64_t c = (int64_t)llround(centre_s * fs), reach = (int64_t)ceil(5.0 * sigma_s * fs);
    for (int64_t i = c - reach; i <= c + reach; i++) {
        if (i < 0 || i >= (int64_t)n)
            continue;
        double t = ((double)i / fs - centre_s) / sigma_s;
        x[i] += (float)(amp * exp(-0.5 * t * t));
    }
}

/*
 * A beat at time t: P, QRS and T waves. kind 0: normal narrow QRS (R peak amp); kind 1:
 * premature ventricular beat, wide and inverted, no P wave. The true R peak is the sample of
 * the QRS extremum, found numerically after all waves are in place.
 */
static inline void add_beat(struct synth *s, double t, double amp, int kind, double rr_s)
{
    double qt = 0.25 * sqrt(rr_s); /* T wave closer at fast rates */
    if (kind == 0) {
        add_gauss(s->x, s->n, s->fs, t - 0.16, 0.025, 0.12 * amp);
        add_gauss(s->x, s->n, s->fs, t - 0.025, 0.008, -0.12 * amp);
        add_gauss(s->x, s->n, s->fs, t, 0.010, amp);
        add_gauss(s->x, s->n, s->fs, t + 0.028, 0.009, -0.2 * amp);
        add_gauss(s->x, s->n, s->fs, t + qt, 0.045, 0.3 * amp);
    } else {
        add_gauss(s->x, s->n, s->fs, t, 0.030, -1.6 * amp);
        add_gauss(s->x, s->n, s->fs, t + 0.07, 0.025, 0.3 * amp);
        add_gauss(s->x, s->n, s->fs, t + qt + 0.05, 0.06, 0.45 * amp);
    }
    s->truth[s->n_truth++] = (int64_t)llround(t * s->fs);
}

static inline void synth_init(struct synth *s, double fs, double seconds)
{
    memset(s, 0, sizeof *s);
    s->fs = fs;
    s->n = (size_t)(fs * seconds);
    s->x = calloc(s->n, sizeof *s->x);
    assert_non_null(s->x);
}

/* Baseline wander, mains-free noise and an offset, then the true peaks moved to the QRS
 * extremum of the final signal (within 10 ms of where the beat was placed). */
static inline void synth_finish(struct synth *s, double noise_mv, double offset_mv, double sign)
{
    for (size_t i = 0; i < s->n; i++) {
        double t = (double)i / s->fs;
        s->x[i] = (float)(sign * s->x[i] + offset_mv + 0.15 * sin(2.0 * M_PI * 0.25 * t) +
                          noise_mv * rng_gauss());
    }
    int64_t reach = (int64_t)(0.01 * s->fs);
    for (size_t b = 0; b < s->n_truth; b++) {
        int64_t c = s->truth[b], best = c;
        double best_dev = -1.0;
        for (int64_t i = c - reach; i <= c + reach; i++) {
            if (i < 0 || i >= (int64_t)s->n)
                continue;
            double mag = fabs((double)s->x[i] - offset_mv);
            if (mag > best_dev) {
                best_dev = mag;
                best = i;
            }
        }
        s->truth[b] = best;
    }
}

/* Runs plan, resample, filter and detect at the synthetic signal's rate. */
static inline void run_detector(const float *x, size_t n, double fs, int64_t **peaks_a,
                         int64_t **peaks_in, size_t *k, struct ecg_plan *plan_out)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_plan plan;
    if (ecg_plan_init(&plan, &params, fs, &err) != ECG_OK)
        fail_msg("plan: %s", err.message);
    size_t n_a = ecg_plan_resampled_len(&plan, n);
    float *y = malloc(n_a * sizeof *y), *f = malloc(n_a * sizeof *f);
    assert_non_null(y);
    assert_non_null(f);
    assert_int_equal(cpu_resample(&plan, x, n, y, &err), ECG_OK);
    assert_int_equal(cpu_filter(&plan, y, n_a, f, &err), ECG_OK);
    if (cpu_detect(&plan, x, n, y, f, n_a, peaks_a, peaks_in, k, &err) != ECG_OK)
        fail_msg("detect: %s", err.message);
    /* The output contract. */
    for (size_t i = 0; i < *k; i++) {
        assert_true((*peaks_in)[i] >= 1 && (*peaks_in)[i] < (int64_t)n);
        assert_true((*peaks_a)[i] >= 1 && (*peaks_a)[i] < (int64_t)n_a);
        if (i > 0) {
            assert_true((*peaks_in)[i] >= (*peaks_in)[i - 1] + 2);
            assert_true((*peaks_a)[i] >= (*peaks_a)[i - 1] + 2);
        }
        /* peaks_a is the analysis sample nearest to peaks_in */
        double exact = (double)(*peaks_in)[i] * plan.fs_a_hz / fs;
        assert_true(fabs((double)(*peaks_a)[i] - exact) <= 0.5 + 1e-9);
    }
    free(y);
    free(f);
    if (plan_out)
        *plan_out = plan;
    else
        ecg_plan_fini(&plan);
}

/* Every true peak found within tol samples, and nothing else. */
static inline void expect_beats(const struct synth *s, const char *what, int64_t tol)
{
    int64_t *pa = NULL, *pi = NULL;
    size_t k = 0;
    run_detector(s->x, s->n, s->fs, &pa, &pi, &k, NULL);
    if (k != s->n_truth) {
        for (size_t i = 0; i < k; i++)
            print_message("  detected %lld\n", (long long)pi[i]);
        fail_msg("%s: %zu beats detected, %zu true", what, k, s->n_truth);
    }
    for (size_t i = 0; i < k; i++) {
        if (llabs(pi[i] - s->truth[i]) > tol)
            fail_msg("%s: beat %zu at %lld, true peak %lld", what, i, (long long)pi[i],
                     (long long)s->truth[i]);
    }
    free(pa);
    free(pi);
}

#endif /* DETECT_SYNTH_H */
