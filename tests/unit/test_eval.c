/*
 * test_eval.c - beat-by-beat matching (ecg_match_beats), ROC-AUC (ecg_roc_auc) and the AAMI
 * class table (ecg_aami_class), on hand-made cases whose answers are worked out in the comments,
 * plus matching against a brute-force greedy on random beat trains (fixed seed).
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

#define FS 360.0
#define WINDOW 0.150 /* 54 samples at 360 Hz */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static struct ecg_match_stats match(const int64_t *det, size_t n_det, const int64_t *ref,
                                    size_t n_ref, int64_t *m)
{
    struct ecg_match_stats st;
    memset(&st, 0xff, sizeof st); /* every field must be written */
    ecg_match_beats(det, n_det, ref, n_ref, FS, WINDOW, &st, m);
    return st;
}

static void test_match_exact(void **state)
{
    (void)state;
    const int64_t ref[] = {100, 400, 700};
    int64_t m[3];
    struct ecg_match_stats st = match(ref, 3, ref, 3, m);
    assert_int_equal(st.tp, 3);
    assert_int_equal(st.fn, 0);
    assert_int_equal(st.fp, 0);
    assert_true(st.abs_err_ms_sum == 0.0);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], 1);
    assert_int_equal(m[2], 2);
}

/* 54 samples is within 150 ms at 360 Hz (bxb matches |T - t| <= window); 55 is not. */
static void test_match_window_edge(void **state)
{
    (void)state;
    const int64_t ref[] = {1000, 2000};
    const int64_t det[] = {1054, 1945};
    int64_t m[2];
    struct ecg_match_stats st = match(det, 2, ref, 2, m);
    assert_int_equal(st.tp, 1);
    assert_int_equal(st.fn, 1);
    assert_int_equal(st.fp, 1);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], -1);
    assert_true(fabs(st.abs_err_ms_sum - 54.0 * 1000.0 / FS) < 1e-9);
}

/* Two detections around one reference beat: the nearer one matches, the other is extra. */
static void test_match_duplicates(void **state)
{
    (void)state;
    const int64_t ref[] = {500};
    const int64_t det[] = {480, 510, 530};
    int64_t m[1];
    struct ecg_match_stats st = match(det, 3, ref, 1, m);
    assert_int_equal(st.tp, 1);
    assert_int_equal(st.fn, 0);
    assert_int_equal(st.fp, 2);
    assert_int_equal(m[0], 1);
    assert_true(fabs(st.abs_err_ms_sum - 10.0 * 1000.0 / FS) < 1e-9);

    /* Two references equally near one detection: the earlier reference takes it. */
    const int64_t ref2[] = {100, 140};
    const int64_t det2[] = {120};
    int64_t m2[2];
    st = match(det2, 1, ref2, 2, m2);
    assert_int_equal(st.tp, 1);
    assert_int_equal(st.fn, 1);
    assert_int_equal(st.fp, 0);
    assert_int_equal(m2[0], 0);
    assert_int_equal(m2[1], -1);
}

/*
 * Nearest first. refs 0, 50, 100; dets 30, 60: pair distances 0-30: 30, 50-30: 20, 50-60: 10,
 * 100-60: 40 (0-60 is 60 > 54, out). Nearest first: (50, 60) then (0, 30); 100 is missed.
 * A greedy scan in time order that let ref 0 take det 30 and ref 50 take det 60 happens to
 * agree here; the chain below is where it would not.
 */
static void test_match_nearest_first(void **state)
{
    (void)state;
    const int64_t ref[] = {0, 50, 100};
    const int64_t det[] = {30, 60};
    int64_t m[3];
    struct ecg_match_stats st = match(det, 2, ref, 3, m);
    assert_int_equal(st.tp, 2);
    assert_int_equal(st.fn, 1);
    assert_int_equal(st.fp, 0);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], 1);
    assert_int_equal(m[2], -1);

    /*
     * Chain: ref 0, det 10, ref 19, det 27. Distances: 0-10: 10, 19-10: 9, 19-27: 8. Nearest
     * first pairs (19, 27), then (0, 10): two matches. A scan that gave det 10 to its nearest
     * reference (19) would leave ref 0 and det 27 unmatched.
     */
    const int64_t ref2[] = {0, 19};
    const int64_t det2[] = {10, 27};
    int64_t m2[2];
    st = match(det2, 2, ref2, 2, m2);
    assert_int_equal(st.tp, 2);
    assert_int_equal(st.fn, 0);
    assert_int_equal(st.fp, 0);
    assert_int_equal(m2[0], 0);
    assert_int_equal(m2[1], 1);
    assert_true(fabs(st.abs_err_ms_sum - 18.0 * 1000.0 / FS) < 1e-9);
}

static void test_match_empty(void **state)
{
    (void)state;
    const int64_t beats[] = {10, 20, 30};
    int64_t m[3] = {7, 7, 7};
    struct ecg_match_stats st = match(NULL, 0, beats, 3, m);
    assert_int_equal(st.tp, 0);
    assert_int_equal(st.fn, 3);
    assert_int_equal(st.fp, 0);
    assert_int_equal(m[0], -1);
    assert_int_equal(m[2], -1);
    st = match(beats, 3, NULL, 0, NULL);
    assert_int_equal(st.tp, 0);
    assert_int_equal(st.fn, 0);
    assert_int_equal(st.fp, 3);
    st = match(NULL, 0, NULL, 0, NULL);
    assert_int_equal(st.tp + st.fn + st.fp, 0);
}

/*
 * Random beat trains against a brute-force nearest-first greedy (O(n^2) per step): same counts
 * and the same match array. Dense trains (beats closer than the window) make chains common.
 */
static void test_match_random_vs_brute_force(void **state)
{
    (void)state;
    rng_state = 20240601;
    for (int trial = 0; trial < 300; trial++) {
        size_t n_ref = rng_next() % 40, n_det = rng_next() % 40;
        int64_t ref[40], det[40], m[40], expect[40];
        int64_t spacing = 20 + (int64_t)(rng_next() % 200);
        int64_t t = 0;
        for (size_t i = 0; i < n_ref; i++)
            ref[i] = (t += 1 + (int64_t)(rng_next() % (uint64_t)spacing));
        t = 0;
        for (size_t i = 0; i < n_det; i++)
            det[i] = (t += 1 + (int64_t)(rng_next() % (uint64_t)spacing));
        struct ecg_match_stats st = match(det, n_det, ref, n_ref, m);

        bool ref_used[40] = {false}, det_used[40] = {false};
        size_t tp = 0;
        double err_ms = 0.0;
        for (size_t i = 0; i < n_ref; i++)
            expect[i] = -1;
        for (;;) {
            int64_t best = INT64_MAX;
            size_t bi = 0, bj = 0;
            for (size_t i = 0; i < n_ref; i++) {
                for (size_t j = 0; j < n_det; j++) {
                    int64_t d = llabs(ref[i] - det[j]);
                    if (ref_used[i] || det_used[j] || d > 54 || d >= best)
                        continue;
                    best = d; /* strict: ties keep the earlier ref, then the earlier det */
                    bi = i;
                    bj = j;
                }
            }
            if (best == INT64_MAX)
                break;
            ref_used[bi] = det_used[bj] = true;
            expect[bi] = (int64_t)bj;
            tp++;
            err_ms += (double)best * 1000.0 / FS;
        }
        assert_int_equal(st.tp, tp);
        assert_int_equal(st.fn, n_ref - tp);
        assert_int_equal(st.fp, n_det - tp);
        assert_true(fabs(st.abs_err_ms_sum - err_ms) < 1e-6);
        for (size_t i = 0; i < n_ref; i++)
            assert_int_equal(m[i], expect[i]);
    }
}

/* ------------------------------------------------------------------ ROC-AUC */

static void test_auc_hand_cases(void **state)
{
    (void)state;
    const float sep_pos[] = {1, 2, 3}, sep_neg[] = {0, -1};
    assert_true(ecg_roc_auc(sep_pos, 3, sep_neg, 2) == 1.0);
    assert_true(ecg_roc_auc(sep_neg, 2, sep_pos, 3) == 0.0);

    const float one[] = {1};
    assert_true(ecg_roc_auc(one, 1, one, 1) == 0.5); /* a tie counts one half */

    /*
     * pos {1, 2, 2, 3}, neg {2, 0}: pairs won: 1 > 0 (1); 2 > 0 and 2 = 2 (1.5, twice);
     * 3 > both (2). Total 1 + 1.5 + 1.5 + 2 = 6 of 8 pairs: 0.75.
     */
    const float pos[] = {2, 1, 3, 2}, neg[] = {2, 0};
    assert_true(fabs(ecg_roc_auc(pos, 4, neg, 2) - 0.75) < 1e-12);

    /* All equal: 0.5 whatever the counts. */
    const float flat_pos[] = {5, 5, 5}, flat_neg[] = {5, 5};
    assert_true(ecg_roc_auc(flat_pos, 3, flat_neg, 2) == 0.5);
}

static void test_auc_nan_and_empty(void **state)
{
    (void)state;
    const float pos[] = {1, NAN, 3}, neg[] = {2, NAN};
    /* NaN scores are ignored: pos {1, 3} vs neg {2}: 1 of 2 pairs. */
    assert_true(fabs(ecg_roc_auc(pos, 3, neg, 2) - 0.5) < 1e-12);
    assert_true(isnan(ecg_roc_auc(pos, 3, NULL, 0)));
    assert_true(isnan(ecg_roc_auc(NULL, 0, neg, 2)));
    const float only_nan[] = {NAN};
    assert_true(isnan(ecg_roc_auc(only_nan, 1, neg, 2)));
}

/* Against the O(n^2) definition on random scores with many ties (fixed seed). */
static void test_auc_random_vs_pairs(void **state)
{
    (void)state;
    rng_state = 77;
    for (int trial = 0; trial < 50; trial++) {
        size_t np = 1 + rng_next() % 300, nn = 1 + rng_next() % 300;
        float *p = malloc(np * sizeof *p), *q = malloc(nn * sizeof *q);
        assert_non_null(p);
        assert_non_null(q);
        for (size_t i = 0; i < np; i++)
            p[i] = (float)(rng_next() % 20) * 0.5f - 3.0f;
        for (size_t i = 0; i < nn; i++)
            q[i] = (float)(rng_next() % 17) * 0.5f - 4.0f;
        double wins = 0.0;
        for (size_t i = 0; i < np; i++)
            for (size_t j = 0; j < nn; j++)
                wins += p[i] > q[j] ? 1.0 : (p[i] == q[j] ? 0.5 : 0.0);
        double expect = wins / ((double)np * (double)nn);
        assert_true(fabs(ecg_roc_auc(p, np, q, nn) - expect) < 1e-12);
        free(p);
        free(q);
    }
}

static void test_aami_classes(void **state)
{
    (void)state;
    const char *normal = "NLRej", *supra = "AaJS", *ventricular = "VE", *unknown = "/fQ";
    for (const char *c = normal; *c; c++)
        assert_int_equal(ecg_aami_class(*c), 'N');
    for (const char *c = supra; *c; c++)
        assert_int_equal(ecg_aami_class(*c), 'S');
    for (const char *c = ventricular; *c; c++)
        assert_int_equal(ecg_aami_class(*c), 'V');
    assert_int_equal(ecg_aami_class('F'), 'F');
    for (const char *c = unknown; *c; c++)
        assert_int_equal(ecg_aami_class(*c), 'Q');
    const char *not_beats = "+~|\"[]!xp t^=()us*D@?";
    for (const char *c = not_beats; *c; c++)
        assert_int_equal(ecg_aami_class(*c), 0);
    assert_int_equal(ecg_aami_class('\0'), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_exact),
        cmocka_unit_test(test_match_window_edge),
        cmocka_unit_test(test_match_duplicates),
        cmocka_unit_test(test_match_nearest_first),
        cmocka_unit_test(test_match_empty),
        cmocka_unit_test(test_match_random_vs_brute_force),
        cmocka_unit_test(test_auc_hand_cases),
        cmocka_unit_test(test_auc_nan_and_empty),
        cmocka_unit_test(test_auc_random_vs_pairs),
        cmocka_unit_test(test_aami_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
