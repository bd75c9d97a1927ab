/*
 * test_detect.c - the R-peak detector (engine/cpu/detect.c).
 *
 * - Non-maximum suppression (cpu_nms) against a brute-force scan of every window, on random
 *   signals with many ties and plateaus (fixed seeds), for many window sizes.
 * - Synthetic ECGs with known R peaks: normal rhythm, tachycardia, ventricular bigeminy (wide
 *   inverted beats), an inverted lead, a pause, a sudden drop in amplitude, huge artefacts at
 *   the start and later on (thresholds must recover), a large DC offset, several sampling
 *   rates; every beat found within a few samples of its true peak, nothing else.
 * - The output contract: ascending peaks, at least 2 samples apart in both grids, none at
 *   sample 0, analysis-grid positions matching the input-grid ones.
 * - The blocked decision pass (cpu_decide: blocks of CPU_DETECT_BLOCK_S with a warm-up, then the
 *   boundary merge) against a brute force that decides each block's window with the plain
 *   sequential pass (no early stop), windows derived from the documented constants, and merges
 *   by the documented rule: on MIT-BIH records (30 blocks each), on random candidate streams,
 *   on hand-made streams where the runs of two blocks disagree at the boundary (each merge rule
 *   once), and on a synthetic 6-minute recording with its events across block boundaries.
 *   Never two beats closer than the refractory period; one block is exactly the plain pass.
 * - Accuracy on the 22 MIT-BIH records of ECG_SHARED_DATA (lead 0), scored beat by beat as
 *   WFDB's bxb does (150 ms window, whole records, detections inside reference ventricular
 *   flutter/fibrillation episodes not counted): sensitivity and positive predictivity of at
 *   least 99.7 % in total and mean |R-peak error| under 10 ms.
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

#define MITDB ECG_SHARED_DATA "/mitdb"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static double rng_gauss(void)
{
    double u = rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(2.0 * M_PI * v);
}

/* ------------------------------------------------------------------ NMS */

/* i is a peak iff v[i] > floor, every earlier sample of its window is smaller and every later
 * one is not larger. */
static size_t nms_brute(const float *v, size_t n, size_t half, float floor_value, int64_t *out)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] > floor_value))
            continue;
        bool peak = true;
        size_t lo = i >= half ? i - half : 0, hi = i + half < n ? i + half : n - 1;
        for (size_t j = lo; j < i && peak; j++)
            peak = v[j] < v[i];
        for (size_t j = i + 1; j <= hi && peak; j++)
            peak = v[j] <= v[i];
        if (peak)
            out[count++] = (int64_t)i;
    }
    return count;
}

static void check_nms(const float *v, size_t n, size_t half, float floor_value)
{
    int64_t *got = malloc((n + 1) * sizeof *got), *want = malloc((n + 1) * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    size_t n_got = 12345;
    struct ecg_error err = {0};
    assert_int_equal(cpu_nms(v, n, half, floor_value, got, &n_got, &err), ECG_OK);
    size_t n_want = nms_brute(v, n, half, floor_value, want);
    if (n_got != n_want)
        fail_msg("n=%zu half=%zu floor=%g: %zu peaks, brute force %zu", n, half,
                 (double)floor_value, n_got, n_want);
    for (size_t i = 0; i < n_got; i++) {
        if (got[i] != want[i])
            fail_msg("n=%zu half=%zu: peak %zu at %lld, brute force %lld", n, half, i,
                     (long long)got[i], (long long)want[i]);
        if (i > 0)
            assert_true((size_t)(got[i] - got[i - 1]) > half); /* documented spacing */
    }
    free(got);
    free(want);
}

static void test_nms_hand_cases(void **state)
{
    (void)state;
    int64_t p[8];
    size_t n = 0;
    struct ecg_error err = {0};
    /* A plateau yields one peak, at its left end. */
    const float plateau[] = {0, 3, 3, 3, 0};
    assert_int_equal(cpu_nms(plateau, 5, 1, 0.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 1);
    assert_int_equal(p[0], 1);
    /* Equal peaks further apart than the window both count; closer, the leftmost wins. */
    const float twins[] = {0, 5, 0, 0, 5, 0};
    assert_int_equal(cpu_nms(twins, 6, 2, 0.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cpu_nms(twins, 6, 3, 0.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 1);
    assert_int_equal(p[0], 1);
    /* The floor is strict. */
    assert_int_equal(cpu_nms(twins, 6, 3, 5.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 0);
    /* A monotonic ramp: only its top end. */
    const float ramp[] = {1, 2, 3, 4, 5, 6, 7};
    assert_int_equal(cpu_nms(ramp, 7, 2, 0.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 1);
    assert_int_equal(p[0], 6);
    /* Empty input. */
    assert_int_equal(cpu_nms(ramp, 0, 2, 0.0f, p, &n, &err), ECG_OK);
    assert_int_equal(n, 0);
}

static void test_nms_random_vs_brute_force(void **state)
{
    (void)state;
    const size_t lengths[] = {1, 2, 3, 4, 5, 9, 17, 64, 333, 2000};
    const size_t halves[] = {0, 1, 2, 3, 4, 7, 25, 90, 500};
    rng_state = 12345;
    float *v = malloc(2000 * sizeof *v);
    assert_non_null(v);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        for (size_t hi = 0; hi < sizeof halves / sizeof halves[0]; hi++) {
            for (int kind = 0; kind < 4; kind++) {
                size_t n = lengths[li];
                double walk = 0.0;
                for (size_t i = 0; i < n; i++) {
                    switch (kind) {
                    case 0: /* few levels: ties everywhere */
                        v[i] = (float)(rng_next() % 4);
                        break;
                    case 1: /* plateaus: runs of equal values */
                        v[i] = (i > 0 && rng_next() % 3) ? v[i - 1] : (float)(rng_next() % 6);
                        break;
                    case 2: /* quantised random walk, like a smooth envelope */
                        walk += rng_gauss();
                        v[i] = (float)round(walk);
                        break;
                    default: /* continuous */
                        v[i] = (float)rng_gauss();
                        break;
                    }
                }
                check_nms(v, n, halves[hi], -1e30f);
                check_nms(v, n, halves[hi], 1.0f);
            }
        }
    }
    free(v);
}

/* ------------------------------------------------------------------ synthetic ECG */

struct synth {
    float *x;
    size_t n;
    double fs;
    int64_t truth[1024]; /* true R peaks, input grid */
    size_t n_truth;
};

static void add_gauss(float *x, size_t n, double fs, double centre_s, double sigma_s, double amp)
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
static void add_beat(struct synth *s, double t, double amp, int kind, double rr_s)
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

static void synth_init(struct synth *s, double fs, double seconds)
{
    memset(s, 0, sizeof *s);
    s->fs = fs;
    s->n = (size_t)(fs * seconds);
    s->x = calloc(s->n, sizeof *s->x);
    assert_non_null(s->x);
}

/* Baseline wander, mains-free noise and an offset, then the true peaks moved to the QRS
 * extremum of the final signal (within 10 ms of where the beat was placed). */
static void synth_finish(struct synth *s, double noise_mv, double offset_mv, double sign)
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
static void run_detector(const float *x, size_t n, double fs, int64_t **peaks_a,
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
static void expect_beats(const struct synth *s, const char *what, int64_t tol)
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

static void test_synthetic_rhythms(void **state)
{
    (void)state;
    struct synth s;
    const double rates[] = {360.0, 250.0, 1000.0, 128.0};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        double fs = rates[r];
        int64_t tol = (int64_t)ceil(0.006 * fs) + 1; /* a few ms */
        char what[64];

        rng_state = 1;
        synth_init(&s, fs, 30.0);
        for (double t = 0.6; t < 29.5; t += 0.8)
            add_beat(&s, t, 1.2, 0, 0.8);
        synth_finish(&s, 0.02, 0.0, 1.0);
        snprintf(what, sizeof what, "75 bpm at %g Hz", fs);
        expect_beats(&s, what, tol);
        free(s.x);

        /* Tachycardia, 190 bpm. */
        rng_state = 2;
        synth_init(&s, fs, 20.0);
        for (double t = 0.5; t < 19.6; t += 60.0 / 190.0)
            add_beat(&s, t, 1.0, 0, 60.0 / 190.0);
        synth_finish(&s, 0.02, 0.0, 1.0);
        snprintf(what, sizeof what, "190 bpm at %g Hz", fs);
        expect_beats(&s, what, tol);
        free(s.x);

        /* Ventricular bigeminy: normal beat, premature wide inverted beat 0.42 s later. */
        rng_state = 3;
        synth_init(&s, fs, 30.0);
        for (double t = 0.6; t < 28.5; t += 1.5) {
            add_beat(&s, t, 1.0, 0, 1.0);
            add_beat(&s, t + 0.42, 1.0, 1, 0.42);
        }
        synth_finish(&s, 0.02, 0.0, 1.0);
        snprintf(what, sizeof what, "bigeminy at %g Hz", fs);
        expect_beats(&s, what, tol + (int64_t)ceil(0.004 * fs));
        free(s.x);
    }

    /* Inverted lead: the R peaks are the negative extremes. */
    rng_state = 4;
    synth_init(&s, 360.0, 30.0);
    for (double t = 0.6; t < 29.5; t += 0.9)
        add_beat(&s, t, 1.0, 0, 0.9);
    synth_finish(&s, 0.02, 0.0, -1.0);
    expect_beats(&s, "inverted lead", 3);
    free(s.x);

    /* A 4 s pause (sinus arrest): no beat invented in it, the beats after it found. */
    rng_state = 5;
    synth_init(&s, 360.0, 30.0);
    for (double t = 0.6; t < 29.5; t += 0.85) {
        if (t > 10.0 && t < 14.0)
            continue;
        add_beat(&s, t, 1.0, 0, 0.85);
    }
    synth_finish(&s, 0.02, 0.0, 1.0);
    expect_beats(&s, "pause", 3);
    free(s.x);

    /* The amplitude drops to a quarter at 12 s: thresholds adapt (search-back finds the first
     * small ones). */
    rng_state = 6;
    synth_init(&s, 360.0, 40.0);
    for (double t = 0.6; t < 39.5; t += 0.8)
        add_beat(&s, t, t < 12.0 ? 1.6 : 0.4, 0, 0.8);
    synth_finish(&s, 0.01, 0.0, 1.0);
    expect_beats(&s, "amplitude drop", 3);
    free(s.x);

    /* A huge artefact in the learning period (electrode pop, 15 mV): the thresholds it sets
     * must not silence the recording. The artefact itself may count as one beat. */
    rng_state = 8;
    synth_init(&s, 360.0, 30.0);
    add_gauss(s.x, s.n, s.fs, 0.5, 0.02, 15.0);
    for (double t = 1.3; t < 29.5; t += 0.8)
        add_beat(&s, t, 1.0, 0, 0.8);
    synth_finish(&s, 0.02, 0.0, 1.0);
    {
        int64_t *pa = NULL, *pi = NULL;
        size_t k = 0;
        run_detector(s.x, s.n, s.fs, &pa, &pi, &k, NULL);
        size_t first = k > 0 && pi[0] < (int64_t)(0.9 * s.fs) ? 1 : 0; /* the artefact */
        if (k - first != s.n_truth)
            fail_msg("artefact at start: %zu beats after it, %zu true", k - first, s.n_truth);
        /* all but the first few beats after the artefact at their true peaks */
        for (size_t i = 0; i < s.n_truth; i++)
            assert_true(llabs(pi[first + i] - s.truth[i]) <= 3);
        free(pa);
        free(pi);
    }
    free(s.x);

    /* A huge artefact later on (60 mV, once): accepted as a beat it inflates the signal level
     * far above the beats; the level must come back down (within a few seconds) instead of
     * silencing the rest of the recording. */
    rng_state = 9;
    synth_init(&s, 360.0, 60.0);
    for (double t = 0.6; t < 59.5; t += 0.8)
        add_beat(&s, t, 1.0, 0, 0.8);
    add_gauss(s.x, s.n, s.fs, 20.25, 0.015, 60.0);
    synth_finish(&s, 0.02, 0.0, 1.0);
    {
        int64_t *pa = NULL, *pi = NULL;
        size_t k = 0, found = 0, late = 0;
        run_detector(s.x, s.n, s.fs, &pa, &pi, &k, NULL);
        for (size_t i = 0; i < s.n_truth; i++) {
            bool hit = false;
            for (size_t j = 0; j < k && !hit; j++)
                hit = llabs(pi[j] - s.truth[i]) <= 3;
            found += hit;
            late += s.truth[i] > (int64_t)(26.0 * s.fs) && hit;
        }
        size_t late_truth = 0;
        for (size_t i = 0; i < s.n_truth; i++)
            late_truth += s.truth[i] > (int64_t)(26.0 * s.fs);
        assert_int_equal(late, late_truth); /* every beat from 26 s on */
        assert_true(found + 8 >= s.n_truth);
        assert_true(k <= found + 1); /* nothing extra but the artefact */
        free(pa);
        free(pi);
    }
    free(s.x);

    /* A 3 mV offset: no beats at the recording's edges. */
    rng_state = 7;
    synth_init(&s, 360.0, 20.0);
    for (double t = 0.7; t < 19.4; t += 0.8)
        add_beat(&s, t, 1.0, 0, 0.8);
    synth_finish(&s, 0.02, 3.0, 1.0);
    expect_beats(&s, "DC offset", 3);
    free(s.x);
}

static void test_degenerate_inputs(void **state)
{
    (void)state;
    int64_t *pa = NULL, *pi = NULL;
    size_t k = 99;
    float *x = malloc(3600 * sizeof *x);
    assert_non_null(x);
    /* Flat (zero and constant): no beats. */
    for (size_t i = 0; i < 3600; i++)
        x[i] = 0.0f;
    run_detector(x, 3600, 360.0, &pa, &pi, &k, NULL);
    assert_int_equal(k, 0);
    free(pa);
    free(pi);
    for (size_t i = 0; i < 3600; i++)
        x[i] = -1.25f;
    run_detector(x, 3600, 360.0, &pa, &pi, &k, NULL);
    assert_int_equal(k, 0);
    free(pa);
    free(pi);
    /* Too short to analyse: no beats, no error. */
    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 360.0, &err), ECG_OK);
    float y[1] = {0}, f[1] = {0};
    assert_int_equal(cpu_detect(&plan, x, 1, y, f, 1, &pa, &pi, &k, &err), ECG_OK);
    assert_int_equal(k, 0);
    assert_null(pa);
    assert_null(pi);
    ecg_plan_fini(&plan);
    free(x);
}

/* ------------------------------------------------------------------ blocked decision */

/*
 * The reference for cpu_decide(): each block's window decided by the plain sequential pass
 * (no early stop), windows derived here from the documented constants, then the documented
 * boundary merge. Adds to conflicts[] the boundary conflicts the merge resolved: [0] refractory,
 * the earlier beat dropped; [1] refractory, the later dropped; [2] T wave, the later dropped.
 */
static void decide_brute_force(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                               size_t n_cand, size_t n_a, uint8_t *is_beat, size_t conflicts[3])
{
    const int64_t block = llround(CPU_DETECT_BLOCK_S * plan->fs_a_hz);
    const int64_t warmup = llround(CPU_DETECT_WARMUP_S * plan->fs_a_hz);
    const int64_t tail = llround(CPU_DETECT_TAIL_S * plan->fs_a_hz);
    const int64_t twave = llround(0.36 * plan->fs_a_hz);
    const int64_t refractory = (int64_t)plan->refractory;
    size_t n_blocks = 0;
    while (n_blocks == 0 || (int64_t)n_blocks * block < (int64_t)n_a)
        n_blocks++;
    assert_int_equal(n_blocks, cpu_decide_blocks(plan, n_a));
    memset(is_beat, 0, n_cand);
    int64_t prev = -1; /* last kept beat so far */
    for (size_t b = 0; b < n_blocks; b++) {
        struct cpu_decide_window w = {
            .origin = (int64_t)b * block - warmup < 0 ? 0 : (int64_t)b * block - warmup,
            .emit_lo = (int64_t)b * block,
            .emit_hi = (int64_t)(b + 1) * block,
            .horizon = (int64_t)(b + 1) * block + tail,
            .stop_early = false,
        };
        if (w.horizon > (int64_t)n_a)
            w.horizon = (int64_t)n_a;
        struct cpu_decide_window lib;
        cpu_decide_block_window(plan, n_a, b, &lib);
        assert_int_equal(lib.origin, w.origin);
        assert_int_equal(lib.emit_lo, w.emit_lo);
        assert_int_equal(lib.emit_hi, w.emit_hi);
        assert_int_equal(lib.horizon, w.horizon);
        uint8_t *mine = calloc(n_cand ? n_cand : 1, 1);
        assert_non_null(mine);
        size_t first, last;
        cpu_decide_window(plan, cand, n_cand, &w, mine, &first, &last);
        bool at_first = true;
        for (size_t k = 0; k < n_cand; k++) {
            if (!mine[k])
                continue;
            assert_true(cand[k].pos >= w.emit_lo && cand[k].pos < w.emit_hi);
            if (at_first && prev >= 0) { /* the block's first beat against the last kept */
                const int64_t gap = cand[k].pos - cand[prev].pos;
                bool drop = false;
                if (gap < refractory) {
                    if (cand[k].height > cand[prev].height) {
                        is_beat[prev] = 0;
                        conflicts[0]++;
                    } else {
                        drop = true;
                        conflicts[1]++;
                    }
                } else if (gap < twave &&
                           (double)cand[k].slope < 0.5 * (double)cand[prev].slope) {
                    drop = true;
                    conflicts[2]++;
                }
                at_first = false;
                if (drop)
                    continue;
            }
            at_first = false;
            is_beat[k] = 1;
            prev = (int64_t)k;
        }
        free(mine);
    }
}

/* cpu_decide() against the brute force, and no two beats closer than the refractory period. */
static void check_blocked(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                          size_t n_cand, size_t n_a, const char *what, size_t conflicts[3])
{
    uint8_t *got = malloc(n_cand ? n_cand : 1), *want = malloc(n_cand ? n_cand : 1);
    assert_non_null(got);
    assert_non_null(want);
    struct ecg_error err = {0};
    memset(got, 0x5a, n_cand);
    assert_int_equal(cpu_decide(plan, cand, n_cand, n_a, got, &err), ECG_OK);
    decide_brute_force(plan, cand, n_cand, n_a, want, conflicts);
    int64_t last = -1;
    size_t beats = 0;
    for (size_t k = 0; k < n_cand; k++) {
        if (got[k] != want[k])
            fail_msg("%s: candidate %zu at %lld: blocked %d, brute force %d", what, k,
                     (long long)cand[k].pos, got[k], want[k]);
        if (!got[k])
            continue;
        if (last >= 0 && cand[k].pos - last < (int64_t)plan->refractory)
            fail_msg("%s: beats at %lld and %lld, closer than the refractory period", what,
                     (long long)last, (long long)cand[k].pos);
        last = cand[k].pos;
        beats++;
    }
    assert_true(beats > 0);
    free(got);
    free(want);
}

/* The plain pass over the whole recording (one window). */
static void decide_plain(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                         size_t n_cand, size_t n_a, uint8_t *is_beat)
{
    struct cpu_decide_window w = {0, 0, (int64_t)n_a, (int64_t)n_a, false};
    size_t first, last;
    memset(is_beat, 0, n_cand);
    cpu_decide_window(plan, cand, n_cand, &w, is_beat, &first, &last);
}

/* On real records (30 blocks each) and on a recording of one block, where the blocked pass is
 * the plain one. */
static void test_blocked_records(void **state)
{
    (void)state;
    const char *names[] = {"108", "203", "207"};
    size_t tested = 0, differ = 0, beats = 0;
    for (size_t r = 0; r < sizeof names / sizeof names[0]; r++) {
        char path[256];
        struct ecg_signal sig = {0};
        struct ecg_error err = {0};
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
        snprintf(path, sizeof path, "%s/%s", MITDB, names[r]);
        if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK)
            fail_msg("%s: %s", path, err.message);
        struct ecg_params params = ecg_params_default();
        struct ecg_plan plan;
        assert_int_equal(ecg_plan_init(&plan, &params, sig.fs_hz, &err), ECG_OK);
        size_t n_a = ecg_plan_resampled_len(&plan, sig.n);
        float *y = malloc(n_a * sizeof *y), *f = malloc(n_a * sizeof *f);
        assert_non_null(y);
        assert_non_null(f);
        assert_int_equal(cpu_resample(&plan, sig.samples, sig.n, y, &err), ECG_OK);
        assert_int_equal(cpu_filter(&plan, y, n_a, f, &err), ECG_OK);
        struct cpu_candidate *cand = NULL;
        size_t n_cand = 0;
        assert_int_equal(cpu_detect_candidates(&plan, y, f, n_a, &cand, &n_cand, &err), ECG_OK);
        assert_true(cpu_decide_blocks(&plan, n_a) >= 30);
        size_t conflicts[3] = {0};
        check_blocked(&plan, cand, n_cand, n_a, names[r], conflicts);

        /* Against the plain pass over the whole record: few decisions differ. */
        uint8_t *blocked = malloc(n_cand), *plain = malloc(n_cand);
        assert_non_null(blocked);
        assert_non_null(plain);
        assert_int_equal(cpu_decide(&plan, cand, n_cand, n_a, blocked, &err), ECG_OK);
        decide_plain(&plan, cand, n_cand, n_a, plain);
        for (size_t k = 0; k < n_cand; k++) {
            differ += blocked[k] != plain[k];
            beats += plain[k];
        }

        /* The first minute alone: one block, decided exactly as by the plain pass. */
        size_t n_one = (size_t)llround(CPU_DETECT_BLOCK_S * plan.fs_a_hz), n_c1 = 0;
        while (n_c1 < n_cand && cand[n_c1].pos < (int64_t)n_one)
            n_c1++;
        assert_int_equal(cpu_decide_blocks(&plan, n_one), 1);
        assert_int_equal(cpu_decide(&plan, cand, n_c1, n_one, blocked, &err), ECG_OK);
        decide_plain(&plan, cand, n_c1, n_one, plain);
        assert_memory_equal(blocked, plain, n_c1);

        free(blocked);
        free(plain);
        free(cand);
        free(y);
        free(f);
        ecg_plan_fini(&plan);
        ecg_signal_free(&sig);
        tested++;
    }
    print_message("blocked vs plain pass: %zu of %zu beats differ\n", differ, beats);
    assert_int_equal(tested, 3);
    assert_true(differ * 200 < beats); /* under 0.5 % */
}

/*
 * Random candidate streams (fixed seeds) with a small NMS window, so that candidates come
 * closer than the refractory period and the boundary merge has conflicts to resolve: the
 * blocked decision equals the brute force, and never leaves two beats closer than the
 * refractory period.
 */
static void test_blocked_merge_random(void **state)
{
    (void)state;
    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 250.0, &err), ECG_OK);
    const size_t n_a = (size_t)(250.0 * 60.0 * 12.5); /* 12.5 blocks */
    struct cpu_candidate *cand = malloc(n_a / 4 * sizeof *cand);
    assert_non_null(cand);
    size_t conflicts[3] = {0};
    for (uint64_t seed = 1; seed <= 40; seed++) {
        rng_state = seed;
        size_t n_cand = 0;
        int64_t pos = (int64_t)(rng_next() % 50);
        while (pos < (int64_t)n_a) {
            /* beats every 0.5-1.2 s, with noise peaks and near-duplicates between them */
            bool beat = rng_uniform() < 0.55;
            float h = beat ? (float)(0.6 + 0.8 * rng_uniform()) : (float)(0.4 * rng_uniform());
            if (rng_uniform() < 0.02)
                h *= 10.0f; /* an artefact */
            float s = (float)(0.1 + rng_uniform());
            cand[n_cand++] = (struct cpu_candidate){pos, h, s};
            pos += 10 + (int64_t)(rng_next() % (seed % 2 ? 120 : 250));
        }
        char what[64];
        snprintf(what, sizeof what, "random candidates, seed %llu", (unsigned long long)seed);
        check_blocked(&plan, cand, n_cand, n_a, what, conflicts);
    }
    print_message("boundary conflicts resolved: %zu refractory (earlier dropped), %zu "
                  "refractory (later dropped), %zu T wave\n",
                  conflicts[0], conflicts[1], conflicts[2]);
    /* Since the T-wave test also guards search-back (a candidate close behind a beat and
     * flatter than the usual beat is no missed beat), these streams no longer make the blocks
     * disagree at their boundaries: the merge's three rules are exercised one by one by
     * test_blocked_merge_cases. */
    free(cand);
    ecg_plan_fini(&plan);
}

/* Appends a candidate. */
static void put(struct cpu_candidate *c, size_t *n, int64_t pos, float height, float slope)
{
    c[(*n)++] = (struct cpu_candidate){pos, height, slope};
}

/* The decision on the candidate at pos. */
static int beat_at(const struct cpu_candidate *c, const uint8_t *is_beat, size_t n, int64_t pos)
{
    for (size_t k = 0; k < n; k++)
        if (c[k].pos == pos)
            return is_beat[k];
    fail_msg("no candidate at %lld", (long long)pos);
    return -1;
}

/*
 * Each rule of the boundary merge, on candidate streams made so that the runs of blocks 0 and
 * 1 (2 blocks of 15000 samples at 250 Hz; block 1 starts at 15000, warm-up from 5000) disagree
 * at the boundary. Beats of height 1 every 200 samples; the two runs learn different noise
 * levels (NPK), and NPK stays where it was learnt because the only noise peaks after the
 * learning period fall within the refractory period of a beat (where the pass ignores them):
 *  A. block 0 learns a low NPK (noise in [0, 1000)), block 1 a high one: block 0 takes a small
 *     peak L at 14990 and ignores the beat F at 15020 (refractory); block 1 ignores L, takes F.
 *     The merge keeps the higher, F.
 *  B. block 1 learns a low NPK (noise in [5000, 6000)), block 0 a high one: block 1 takes a
 *     small peak at 14960, so ignores L (0.9) at 14995 and takes F (0.5) at 15020; block 0
 *     takes L only. The merge keeps the higher, L.
 *  C. as A, but F comes at 15060 with a third of L's slope: block 0 calls it a T wave, block 1
 *     a beat. The merge drops F.
 */
static void test_blocked_merge_cases(void **state)
{
    (void)state;
    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 250.0, &err), ECG_OK);
    assert_int_equal(plan.refractory, 50);
    const size_t n_a = 30000;
    assert_int_equal(cpu_decide_blocks(&plan, n_a), 2);
    struct cpu_candidate c[512];
    uint8_t is_beat[512];
    for (int scenario = 0; scenario < 3; scenario++) {
        size_t n = 0, conflicts[3] = {0};
        for (int64_t p = 200; p < (int64_t)n_a; p += 200) {
            if (p == 15000) { /* the boundary */
                if (scenario == 0) {
                    put(c, &n, 14990, 0.35f, 1.0f);
                    put(c, &n, 15020, 1.0f, 1.0f);
                } else if (scenario == 1) {
                    put(c, &n, 14960, 0.35f, 1.0f);
                    put(c, &n, 14995, 0.9f, 1.0f);
                    put(c, &n, 15020, 0.5f, 1.0f);
                } else {
                    put(c, &n, 14990, 0.35f, 1.0f);
                    put(c, &n, 15060, 1.0f, 0.3f);
                }
                continue;
            }
            put(c, &n, p, 1.0f, 1.0f);
            if (scenario != 1 && p < 1000) { /* noise outside the refractory period */
                put(c, &n, p + 60, 0.02f, 0.1f);
                put(c, &n, p + 130, 0.02f, 0.1f);
            }
            if (scenario == 1 && p >= 5000 && p < 6000) { /* noise inside it */
                put(c, &n, p + 15, 0.02f, 0.1f);
                put(c, &n, p + 30, 0.02f, 0.1f);
            }
        }
        char what[32];
        snprintf(what, sizeof what, "merge case %c", 'A' + scenario);
        check_blocked(&plan, c, n, n_a, what, conflicts);
        assert_int_equal(conflicts[scenario], 1);
        assert_int_equal(conflicts[0] + conflicts[1] + conflicts[2], 1);
        assert_int_equal(cpu_decide(&plan, c, n, n_a, is_beat, &err), ECG_OK);
        assert_int_equal(beat_at(c, is_beat, n, 14800), 1);
        if (scenario == 0) {
            assert_int_equal(beat_at(c, is_beat, n, 14990), 0);
            assert_int_equal(beat_at(c, is_beat, n, 15020), 1);
        } else if (scenario == 1) {
            assert_int_equal(beat_at(c, is_beat, n, 14960), 0);
            assert_int_equal(beat_at(c, is_beat, n, 14995), 1);
            assert_int_equal(beat_at(c, is_beat, n, 15020), 0);
        } else {
            assert_int_equal(beat_at(c, is_beat, n, 14990), 1);
            assert_int_equal(beat_at(c, is_beat, n, 15060), 0);
        }
        assert_int_equal(beat_at(c, is_beat, n, 15200), 1);
    }
    ecg_plan_fini(&plan);
}

/*
 * A synthetic recording of 6 minutes (6 blocks) with its events across block boundaries: an
 * amplitude drop at 59 s, a 4 s pause over the 120 s boundary, tachycardia (190 bpm) from
 * 170 s to 250 s (over the 180 s and 240 s boundaries), then back to 75 bpm at a third of the
 * amplitude: every beat found at its true peak, nothing else, and the blocked decision equal
 * to its brute force.
 */
static void test_blocked_long_synthetic(void **state)
{
    (void)state;
    struct synth s;
    rng_state = 21;
    synth_init(&s, 360.0, 360.0);
    double t = 0.6;
    while (t < 359.5) {
        double rr = t >= 170.0 && t < 250.0 ? 60.0 / 190.0 : 0.8;
        /* The amplitude drops 2 s after the tachycardia ends: a beat 0.32 s behind the last
         * one and under half its slope is a T wave to the detector, search-back included. */
        double amp = t < 59.0 ? 1.6 : (t < 252.0 ? 1.0 : 0.35);
        if (!(t > 118.0 && t < 122.0))
            add_beat(&s, t, amp, 0, rr);
        t += rr;
    }
    synth_finish(&s, 0.005, 0.0, 1.0);
    expect_beats(&s, "6 minutes over 6 blocks", 3);

    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, s.fs, &err), ECG_OK);
    size_t n_a = ecg_plan_resampled_len(&plan, s.n);
    assert_int_equal(cpu_decide_blocks(&plan, n_a), 6);
    float *y = malloc(n_a * sizeof *y), *f = malloc(n_a * sizeof *f);
    assert_non_null(y);
    assert_non_null(f);
    assert_int_equal(cpu_resample(&plan, s.x, s.n, y, &err), ECG_OK);
    assert_int_equal(cpu_filter(&plan, y, n_a, f, &err), ECG_OK);
    struct cpu_candidate *cand = NULL;
    size_t n_cand = 0;
    assert_int_equal(cpu_detect_candidates(&plan, y, f, n_a, &cand, &n_cand, &err), ECG_OK);
    size_t conflicts[3] = {0};
    check_blocked(&plan, cand, n_cand, n_a, "6 minutes", conflicts);
    free(cand);
    free(y);
    free(f);
    ecg_plan_fini(&plan);
    free(s.x);
}

/* ------------------------------------------------------------------ MIT-BIH */

struct record_score {
    size_t ref, tp, fn, fp, fp_vf;
    double err_ms;
};

/* Scores one record as `ecgd eval` does: the engine (CPU backend, no model) on the leads
 * selected by lead ("all": every lead, the product's default; "0": the first alone). */
static void score_record(const char *name, const char *lead, struct record_score *rs)
{
    char path[256];
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = 1};
    struct ecg_result *res = NULL;
    snprintf(path, sizeof path, "%s/%s", MITDB, name);
    if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    if (ecg_annotations_read(path, &ann, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    assert_non_null(engine);
    if (ecg_engine_analyze(engine, &sig, &res, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    assert_int_equal(res->n_leads, strcmp(lead, "all") == 0 ? 2 : 1);
    const size_t k = res->n_beats;
    const int64_t *pi = res->r_peak;

    /* EC57 / bxb: detections inside reference VF episodes are not counted. */
    int64_t *det = malloc((k ? k : 1) * sizeof *det);
    assert_non_null(det);
    size_t n_det = 0;
    rs->fp_vf = 0;
    for (size_t i = 0; i < k; i++) {
        if (ecg_annotations_in_vf(&ann, pi[i]))
            rs->fp_vf++;
        else
            det[n_det++] = pi[i];
    }
    struct ecg_match_stats st;
    ecg_match_beats(det, n_det, ann.sample, ann.n, sig.fs_hz, 0.150, &st, NULL);
    rs->ref = ann.n;
    rs->tp = st.tp;
    rs->fn = st.fn;
    rs->fp = st.fp;
    rs->err_ms = st.abs_err_ms_sum;
    free(det);
    ecg_result_free(res);
    ecg_engine_destroy(engine);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
}

/* The 22 records with the leads selected by lead; per-record floors (no record may fall apart,
 * however hard) and the totals' Se and +P floors, in percent. */
static void mitdb_accuracy(const char *lead, double min_record_se, double min_se, double min_pp)
{
    FILE *list = fopen(MITDB "/RECORDS", "r");
    if (!list)
        fail_msg("cannot open %s", MITDB "/RECORDS");
    char name[64];
    struct record_score total = {0};
    int records = 0;
    print_message("lead %s\nrecord   ref     TP   FN   FP  Se%%     +P%%    err_ms  (FP in VF)\n",
                  lead);
    while (fscanf(list, "%63s", name) == 1) {
        struct record_score rs = {0};
        score_record(name, lead, &rs);
        print_message("%-6s %5zu  %5zu %4zu %4zu %7.3f %7.3f %6.2f  (%zu)\n", name, rs.ref, rs.tp,
                      rs.fn, rs.fp, 100.0 * (double)rs.tp / (double)(rs.tp + rs.fn),
                      100.0 * (double)rs.tp / (double)(rs.tp + rs.fp), rs.err_ms / (double)rs.tp,
                      rs.fp_vf);
        assert_true(100.0 * (double)rs.tp >= min_record_se * (double)(rs.tp + rs.fn));
        assert_true((double)rs.tp >= 0.98 * (double)(rs.tp + rs.fp));
        total.ref += rs.ref;
        total.tp += rs.tp;
        total.fn += rs.fn;
        total.fp += rs.fp;
        total.fp_vf += rs.fp_vf;
        total.err_ms += rs.err_ms;
        records++;
    }
    fclose(list);
    double se = 100.0 * (double)total.tp / (double)(total.tp + total.fn);
    double pp = 100.0 * (double)total.tp / (double)(total.tp + total.fp);
    double err_ms = total.err_ms / (double)total.tp;
    print_message("total  %5zu  %5zu %4zu %4zu %7.3f %7.3f %6.2f  (%zu)\n", total.ref, total.tp,
                  total.fn, total.fp, se, pp, err_ms, total.fp_vf);
    assert_int_equal(records, 22);
    assert_int_equal(total.ref, 51021); /* every beat annotation of the 22 records */
    assert_true(se >= min_se);
    assert_true(pp >= min_pp);
    assert_true(err_ms < 10.0);
}

/* Both leads, as `ecgd eval` runs by default: Se and +P at least 99.85 % (issue 10). */
static void test_mitdb_accuracy(void **state)
{
    (void)state;
    mitdb_accuracy("all", 99.0, 99.85, 99.85);
}

/* The first lead alone (MLII), as one-lead recordings are analysed: the rhythm check trades a
 * few beats of irregular rhythms (203: atrial flutter and fibrillation with multiform ventricular
 * beats) for fewer false beats in noise, so one record may drop to 98.9 %. */
static void test_mitdb_accuracy_one_lead(void **state)
{
    (void)state;
    mitdb_accuracy("0", 98.9, 99.8, 99.9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nms_hand_cases),
        cmocka_unit_test(test_nms_random_vs_brute_force),
        cmocka_unit_test(test_synthetic_rhythms),
        cmocka_unit_test(test_degenerate_inputs),
        cmocka_unit_test(test_blocked_records),
        cmocka_unit_test(test_blocked_merge_random),
        cmocka_unit_test(test_blocked_merge_cases),
        cmocka_unit_test(test_blocked_long_synthetic),
        cmocka_unit_test(test_mitdb_accuracy),
        cmocka_unit_test(test_mitdb_accuracy_one_lead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
