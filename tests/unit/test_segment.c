/*
 * test_segment.c - segmentation (cpu_segment), embedding (cpu_embed) and the order statistics
 * they rest on (engine/cpu/select.c).
 *
 * - Selection, median and median/MAD against sorting, on random arrays with ties, negative
 *   values and signed zeros (fixed seeds), odd and even lengths.
 * - Segmentation of hand-placed peaks whose boundaries are worked out in the comments (a first
 *   beat clipped at 0, beats closer than pre_r, a last beat cut by the end of the recording).
 * - Invariants on real records (MIT-BIH 208, 207: many premature beats, blocks, flutter): onset
 *   < R < end, end[i] == onset[i + 1], kept exactly when the analysis-grid length lies within
 *   [beat_min, beat_max], RR intervals from the input-grid R peaks.
 * - Embedding: each kept row is the robustly normalised signal from the beat's onset, zero
 *   padded; rows of beats not kept are zero; the normalisation uses the median and 1.4826 MAD
 *   of the whole resampled signal.
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
#include "cpu/select.h"
#include "plan.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int float_cmp(const void *a, const void *b)
{
    float fa = *(const float *)a, fb = *(const float *)b;
    return (fa > fb) - (fa < fb);
}

static float sorted_median(const float *v, size_t n)
{
    float *s = malloc(n * sizeof *s);
    assert_non_null(s);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, float_cmp);
    float m = n % 2 ? s[n / 2] : (float)(0.5 * ((double)s[n / 2 - 1] + (double)s[n / 2]));
    free(s);
    return m;
}

static void fill_random(float *v, size_t n, int kind)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: /* heavy ties */
            v[i] = (float)((int)(rng_next() % 7) - 3);
            break;
        case 1: /* signed zeros and tiny values */
            v[i] = (rng_next() % 3 == 0) ? -0.0f : (float)((int)(rng_next() % 5) - 2) * 1e-30f;
            break;
        default: /* continuous, wide range */
            v[i] = (float)((double)(int64_t)(rng_next() >> 1) / 9.2e18 * 200.0 - 100.0);
            break;
        }
    }
}

static void test_select_against_sort(void **state)
{
    (void)state;
    /* 23..25: around the insertion sort that finishes the median's selection; 2500 and
     * 20000: a 10-s and an 80-s strip at 250 Hz */
    const size_t lengths[] = {1, 2, 3, 4, 5, 10, 23, 24, 25, 101, 1000, 2500, 4097, 20000};
    rng_state = 99;
    float *v = malloc(20000 * sizeof *v), *w = malloc(20000 * sizeof *w);
    assert_non_null(v);
    assert_non_null(w);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        size_t n = lengths[li];
        for (int kind = 0; kind < 3; kind++) {
            fill_random(v, n, kind);
            memcpy(w, v, n * sizeof *w);
            qsort(w, n, sizeof *w, float_cmp);
            for (int r = 0; r < 5; r++) {
                size_t rank = rng_next() % n;
                float *c = malloc(n * sizeof *c);
                assert_non_null(c);
                memcpy(c, v, n * sizeof *c);
                float got = cpu_select_rank(c, n, rank);
                assert_true(got == w[rank]);
                for (size_t i = 0; i < n; i++) /* partitioned around rank */
                    assert_true(i < rank ? c[i] <= got : (i > rank ? c[i] >= got : true));
                free(c);
            }
            memcpy(w, v, n * sizeof *w);
            assert_true(cpu_median_inplace(w, n) == sorted_median(v, n));

            /* Radix median/MAD: exact, and v untouched. */
            memcpy(w, v, n * sizeof *w);
            float median = NAN, mad = NAN;
            struct ecg_error err = {0};
            assert_int_equal(cpu_median_mad(v, n, &median, &mad, &err), ECG_OK);
            assert_memory_equal(v, w, n * sizeof *v);
            float expect_median = sorted_median(v, n);
            assert_true(median == expect_median);
            for (size_t i = 0; i < n; i++)
                w[i] = fabsf(v[i] - expect_median);
            assert_true(mad == sorted_median(w, n));
        }
    }
    free(v);
    free(w);
}

/* MAD of an ascending array around m without a second sort: the deviations of the values
 * below m, taken downwards, and of those from m up, are two ascending runs; merge to the
 * middle. */
static float sorted_mad(const float *sorted, size_t n, float m)
{
    size_t split = 0;
    while (split < n && sorted[split] < m)
        split++;
    size_t lo = split, hi = split; /* next below: sorted[lo - 1]; next above: sorted[hi] */
    float prev = 0.0f, cur = 0.0f;
    for (size_t rank = 0; rank <= n / 2; rank++) {
        float down = lo > 0 ? fabsf(sorted[lo - 1] - m) : INFINITY;
        float up = hi < n ? fabsf(sorted[hi] - m) : INFINITY;
        prev = cur;
        if (down <= up) {
            cur = down;
            lo--;
        } else {
            cur = up;
            hi++;
        }
    }
    return n % 2 ? cur : (float)(0.5 * ((double)prev + (double)cur));
}

/*
 * Arrays from 2,048 values take a sampled fast path (every 16th value sampled up to a million,
 * every n / 65536th beyond), or its fallback when the subsample is misleading: values periodic
 * with the sampling stride (the subsample sees one value), a sorted ramp, ties, and two equal
 * halves (the two middle ranks in different buckets); at the paths' edges (2,047 and 2,048, a
 * million) and in between, even and odd.
 */
static void median_mad_kinds(size_t n, size_t stride)
{
    float *v = malloc(n * sizeof *v), *w = malloc(n * sizeof *w);
    assert_non_null(v);
    assert_non_null(w);
    rng_state = 4242;
    for (int kind = 0; kind < 5; kind++) {
        for (size_t size = n - 1; size <= n; size++) { /* even and odd */
            for (size_t i = 0; i < size; i++) {
                switch (kind) {
                case 0:
                    v[i] = (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 4.0 - 1.0);
                    break;
                case 1:
                    v[i] = (float)(rng_next() % 9) * 0.25f;
                    break;
                case 2: /* what the subsample sees is constant */
                    v[i] = i % stride == 0 ? 5.0f : (float)(rng_next() % 1000) * 0.001f;
                    break;
                case 3:
                    v[i] = (float)i * 1e-3f - 7.0f;
                    break;
                default:
                    v[i] = i < size / 2 ? -1.0f : 2.0f;
                    break;
                }
            }
            float median = NAN, mad = NAN;
            struct ecg_error err = {0};
            assert_int_equal(cpu_median_mad(v, size, &median, &mad, &err), ECG_OK);
            memcpy(w, v, size * sizeof *w);
            qsort(w, size, sizeof *w, float_cmp);
            double middle_sum = (double)w[size / 2 - 1] + (double)w[size / 2];
            float expect = size % 2 ? w[size / 2] : (float)(0.5 * middle_sum);
            if (median != expect)
                fail_msg("kind %d n %zu: median %.9g, expected %.9g", kind, size, (double)median,
                         (double)expect);
            float expect_mad = sorted_mad(w, size, expect);
            if (mad != expect_mad)
                fail_msg("kind %d n %zu: MAD %.9g, expected %.9g", kind, size, (double)mad,
                         (double)expect_mad);
        }
    }
    free(v);
    free(w);
}

static void test_median_mad_large(void **state)
{
    (void)state;
    const size_t mid[] = {2048, 2501, 20001, 65537, 300001, (1u << 20) - 1};
    for (size_t i = 0; i < sizeof mid / sizeof *mid; i++)
        median_mad_kinds(mid[i], 16);
    median_mad_kinds((1u << 20) + 1, ((1u << 20) + 1) / 65536);
}

/* ------------------------------------------------------------------ segmentation */

static void plan_with(struct ecg_plan *plan, double fs_hz, double beat_max_s)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    params.beat_max_s = beat_max_s;
    if (ecg_plan_init(plan, &params, fs_hz, &err) != ECG_OK)
        fail_msg("plan: %s", err.message);
}

static void plan_at(struct ecg_plan *plan, double fs_hz)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    if (ecg_plan_init(plan, &params, fs_hz, &err) != ECG_OK)
        fail_msg("plan: %s", err.message);
}

/* At 250 Hz the two grids coincide, so every boundary can be worked out by hand. The original
 * pipeline's gate (100..256 samples) keeps the hand-worked lengths small. */
static void test_segment_hand_made(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_with(&plan, 250.0, 256.0 / 250.0);
    assert_int_equal(plan.up, 1);
    const int64_t pre = plan.pre_r; /* 0.25 s: 62 or 63 samples */
    assert_true(pre >= 62 && pre <= 63);
    assert_int_equal(plan.beat_min, 100);
    assert_int_equal(plan.beat_max, 256);

    const int64_t peaks[] = {10, 300, 360, 700, 1000};
    int64_t onset[5], end[5];
    float rr[5];
    uint8_t kept[5];
    cpu_segment(&plan, peaks, peaks, 5, 1100, 1100, onset, end, rr, kept);
    /* beat 0: 10 - pre < 0, clipped to 0 */
    assert_int_equal(onset[0], 0);
    /* beat 1: 300 - pre; the midpoint bound 10 + 145 = 155 is earlier */
    assert_int_equal(onset[1], 300 - pre);
    /* beat 2 is 60 samples after beat 1, closer than pre: it starts at the midpoint, 330 */
    assert_int_equal(onset[2], 330);
    assert_int_equal(onset[3], 700 - pre);
    assert_int_equal(onset[4], 1000 - pre);
    for (int i = 0; i < 4; i++)
        assert_int_equal(end[i], onset[i + 1]);
    /* the last beat: onset + beat_max would pass the end of the recording (1100) */
    assert_int_equal(end[4], 1100);
    /* lengths 300 - pre (kept), 330 - 300 + pre < 100 (not), 700 - pre - 330 > 256 (not),
     * 300 (not), 1100 - 1000 + pre in [163, 164] (kept) */
    const uint8_t want_kept[] = {1, 0, 0, 0, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(kept[i], want_kept[i]);
    assert_true(isnan(rr[0]));
    assert_true(rr[1] == 1160.0f);
    assert_true(rr[2] == 240.0f);
    assert_true(rr[3] == 1360.0f);
    assert_true(rr[4] == 1200.0f);

    /* A last beat far from the end ends beat_max after its onset. */
    const int64_t lone[] = {500};
    cpu_segment(&plan, lone, lone, 1, 5000, 5000, onset, end, rr, kept);
    assert_int_equal(onset[0], 500 - pre);
    assert_int_equal(end[0], 500 - pre + 256);
    assert_int_equal(kept[0], 1);

    /* No beats: nothing written, nothing read. */
    cpu_segment(&plan, NULL, NULL, 0, 100, 100, NULL, NULL, NULL, NULL);
    ecg_plan_fini(&plan);
}

/* Runs the pipeline up to detection on a record; the caller frees everything. */
struct detected {
    struct ecg_signal sig;
    struct ecg_plan plan;
    float *y, *f;
    size_t n_a;
    int64_t *peaks_a, *peaks_in;
    size_t k;
};

static void detect_record(const char *name, struct detected *d)
{
    char path[256];
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    memset(d, 0, sizeof *d);
    snprintf(path, sizeof path, "%s/mitdb/%s", ECG_SHARED_DATA, name);
    if (ecg_read_file(path, &opts, &d->sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    plan_at(&d->plan, d->sig.fs_hz);
    d->n_a = ecg_plan_resampled_len(&d->plan, d->sig.n);
    d->y = malloc(d->n_a * sizeof *d->y);
    d->f = malloc(d->n_a * sizeof *d->f);
    assert_non_null(d->y);
    assert_non_null(d->f);
    assert_int_equal(cpu_resample(&d->plan, d->sig.samples, d->sig.n, d->y, &err), ECG_OK);
    assert_int_equal(cpu_filter(&d->plan, d->y, d->n_a, d->f, &err), ECG_OK);
    assert_int_equal(cpu_detect(&d->plan, d->sig.samples, d->sig.n, d->y, d->f, d->n_a,
                                &d->peaks_a, &d->peaks_in, &d->k, &err),
                     ECG_OK);
    assert_true(d->k > 1000);
}

static void detected_free(struct detected *d)
{
    free(d->y);
    free(d->f);
    free(d->peaks_a);
    free(d->peaks_in);
    ecg_plan_fini(&d->plan);
    ecg_signal_free(&d->sig);
}

/* Analysis-grid onset of beat i, from the rule documented in segment.c. */
static int64_t expected_onset_a(const struct ecg_plan *plan, const int64_t *pa, size_t i)
{
    int64_t onset = pa[i] - (int64_t)plan->pre_r;
    if (i > 0 && onset < pa[i - 1] + (pa[i] - pa[i - 1] + 1) / 2)
        onset = pa[i - 1] + (pa[i] - pa[i - 1] + 1) / 2;
    return onset < 0 ? 0 : onset;
}

static void check_segmentation(const char *name)
{
    struct detected d;
    detect_record(name, &d);
    size_t k = d.k;
    int64_t *onset = malloc(k * sizeof *onset), *end = malloc(k * sizeof *end);
    float *rr = malloc(k * sizeof *rr);
    uint8_t *kept = malloc(k);
    assert_non_null(onset);
    assert_non_null(end);
    assert_non_null(rr);
    assert_non_null(kept);
    cpu_segment(&d.plan, d.peaks_a, d.peaks_in, k, d.n_a, d.sig.n, onset, end, rr, kept);

    size_t n_kept = 0;
    assert_true(onset[0] >= 0);
    assert_true(end[k - 1] <= (int64_t)d.sig.n);
    for (size_t i = 0; i < k; i++) {
        if (!(onset[i] < d.peaks_in[i] && d.peaks_in[i] < end[i]))
            fail_msg("%s beat %zu: onset %lld, R %lld, end %lld", name, i, (long long)onset[i],
                     (long long)d.peaks_in[i], (long long)end[i]);
        if (i + 1 < k)
            assert_int_equal(end[i], onset[i + 1]);
        int64_t on_a = expected_onset_a(&d.plan, d.peaks_a, i);
        int64_t end_a = i + 1 < k ? expected_onset_a(&d.plan, d.peaks_a, i + 1)
                                  : on_a + (int64_t)d.plan.beat_max;
        if (end_a > (int64_t)d.n_a)
            end_a = (int64_t)d.n_a;
        int64_t len_a = end_a - on_a;
        assert_int_equal(kept[i], len_a >= (int64_t)d.plan.beat_min &&
                                      len_a <= (int64_t)d.plan.beat_max);
        /* the input-grid beat is the analysis-grid one, mapped */
        double len_in_a = (double)(end[i] - onset[i]) * d.plan.fs_a_hz / d.sig.fs_hz;
        assert_true(fabs(len_in_a - (double)len_a) <= 2.0);
        if (i == 0) {
            assert_true(isnan(rr[0]));
        } else {
            float want = (float)((double)(d.peaks_in[i] - d.peaks_in[i - 1]) * 1000.0 /
                                 d.sig.fs_hz);
            assert_true(rr[i] == want);
        }
        n_kept += kept[i];
    }
    /* Most beats are of plausible length (in 207, not the ~400 flutter waves). */
    print_message("%s: %zu of %zu beats kept\n", name, n_kept, k);
    assert_true(n_kept > k * 7 / 10);
    free(onset);
    free(end);
    free(rr);
    free(kept);
    detected_free(&d);
}

static void test_segment_invariants_mitdb(void **state)
{
    (void)state;
    check_segmentation("208");
    check_segmentation("207");
}

/* ------------------------------------------------------------------ embedding */

static void test_embed(void **state)
{
    (void)state;
    struct detected d;
    detect_record("119", &d);
    size_t k = d.k;
    const size_t len = d.plan.beat_len;
    int64_t *onset = malloc(k * sizeof *onset), *end = malloc(k * sizeof *end);
    float *rr = malloc(k * sizeof *rr), *emb = malloc(k * len * sizeof *emb);
    uint8_t *kept = malloc(k);
    assert_non_null(onset);
    assert_non_null(end);
    assert_non_null(rr);
    assert_non_null(emb);
    assert_non_null(kept);
    cpu_segment(&d.plan, d.peaks_a, d.peaks_in, k, d.n_a, d.sig.n, onset, end, rr, kept);
    kept[3] = 0; /* a beat not kept, whatever its length */
    for (size_t i = 0; i < k * len; i++)
        emb[i] = NAN; /* every element must be written */
    struct ecg_error err = {0};
    assert_int_equal(cpu_embed(&d.plan, d.y, d.n_a, d.peaks_a, kept, k, emb, &err), ECG_OK);

    float median = sorted_median(d.y, d.n_a);
    float *dev = malloc(d.n_a * sizeof *dev);
    assert_non_null(dev);
    for (size_t i = 0; i < d.n_a; i++)
        dev[i] = fabsf(d.y[i] - median);
    float scale = 1.4826f * sorted_median(dev, d.n_a);
    free(dev);
    assert_true(scale > 0.0f);

    for (size_t i = 0; i < k; i++) {
        const float *row = emb + i * len;
        if (!kept[i]) {
            for (size_t t = 0; t < len; t++)
                assert_true(row[t] == 0.0f);
            continue;
        }
        int64_t on_a = expected_onset_a(&d.plan, d.peaks_a, i);
        int64_t end_a = i + 1 < k ? expected_onset_a(&d.plan, d.peaks_a, i + 1)
                                  : on_a + (int64_t)d.plan.beat_max;
        if (end_a > (int64_t)d.n_a)
            end_a = (int64_t)d.n_a;
        size_t beat = (size_t)(end_a - on_a);
        for (size_t t = 0; t < len; t++) {
            float want = t < beat ? (d.y[on_a + (int64_t)t] - median) * (1.0f / scale) : 0.0f;
            if (fabsf(row[t] - want) > 1e-5f * (1.0f + fabsf(want)))
                fail_msg("beat %zu sample %zu: %g, expected %g", i, t, (double)row[t],
                         (double)want);
        }
        /* The R peak sits pre_r into the row (no clamping happens at normal rates). */
        if (i > 0 && on_a == d.peaks_a[i] - (int64_t)d.plan.pre_r)
            assert_true(fabsf(row[d.plan.pre_r] - (d.y[d.peaks_a[i]] - median) / scale) <
                        1e-4f);
    }
    free(onset);
    free(end);
    free(rr);
    free(emb);
    free(kept);
    detected_free(&d);
}

/* A flat recording has no spread: rows are centred only (all zero), never NaN or Inf. */
static void test_embed_flat(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 250.0);
    size_t n = 2000;
    float *y = malloc(n * sizeof *y), *emb = malloc(2 * plan.beat_len * sizeof *emb);
    assert_non_null(y);
    assert_non_null(emb);
    for (size_t i = 0; i < n; i++)
        y[i] = 0.75f;
    const int64_t peaks[] = {400, 600};
    const uint8_t kept[] = {1, 1};
    struct ecg_error err = {0};
    assert_int_equal(cpu_embed(&plan, y, n, peaks, kept, 2, emb, &err), ECG_OK);
    for (size_t i = 0; i < 2 * plan.beat_len; i++)
        assert_true(emb[i] == 0.0f);
    free(y);
    free(emb);
    ecg_plan_fini(&plan);
}

/* The default gate keeps beats up to 2.0 s: a beat followed by a compensatory pause (here 1.6 s
 * to the next onset) is kept and embedded as its first beat_len samples; a 2.4 s gap is not. */
static void test_segment_default_gate(void **state)
{
    (void)state;
    struct ecg_plan plan;
    plan_at(&plan, 250.0);
    assert_int_equal(plan.beat_max, 500);
    const int64_t peaks[] = {300, 500, 900, 1500};
    int64_t onset[4], end[4];
    float rr[4];
    uint8_t kept[4];
    cpu_segment(&plan, peaks, peaks, 4, 3000, 3000, onset, end, rr, kept);
    assert_int_equal(end[1] - onset[1], 400); /* 1.6 s */
    assert_int_equal(kept[1], 1);
    assert_int_equal(end[2] - onset[2], 600); /* 2.4 s */
    assert_int_equal(kept[2], 0);
    size_t n_a = 3000;
    float *y = malloc(n_a * sizeof *y);
    float *emb = malloc(4 * plan.beat_len * sizeof *emb);
    assert_non_null(y);
    assert_non_null(emb);
    for (size_t i = 0; i < n_a; i++)
        y[i] = (float)((i * 37) % 101) - 50.0f;
    struct ecg_error err = {0};
    assert_int_equal(cpu_embed(&plan, y, n_a, peaks, kept, 4, emb, &err), ECG_OK);
    /* Row 1 is full (400 > 256 samples: truncated, no zero padding); row 2 is all zero. */
    const float *row1 = emb + plan.beat_len, *row2 = emb + 2 * plan.beat_len;
    size_t nonzero1 = 0, nonzero2 = 0;
    for (size_t t = 0; t < plan.beat_len; t++) {
        nonzero1 += row1[t] != 0.0f;
        nonzero2 += row2[t] != 0.0f;
    }
    assert_true(nonzero1 > plan.beat_len * 9 / 10);
    assert_int_equal(nonzero2, 0);
    free(y);
    free(emb);
    ecg_plan_fini(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_against_sort),
        cmocka_unit_test(test_median_mad_large),
        cmocka_unit_test(test_segment_hand_made),
        cmocka_unit_test(test_segment_default_gate),
        cmocka_unit_test(test_segment_invariants_mitdb),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_embed_flat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
