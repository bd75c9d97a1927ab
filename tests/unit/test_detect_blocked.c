/*
 * test_detect_blocked.c - the R-peak detector's blocked decision pass (engine/cpu/decide.c).
 *
 * The blocked decision pass (cpu_decide: blocks of CPU_DETECT_BLOCK_S with a warm-up, then the
 * boundary merge) against a brute force that decides each block's window with the plain
 * sequential pass (no early stop), windows derived from the documented constants, and merges by
 * the documented rule: on MIT-BIH records (30 blocks each), on random candidate streams, on
 * hand-made streams where the runs of two blocks disagree at the boundary (each merge rule once),
 * and on a synthetic 6-minute recording with its events across block boundaries. Never two beats
 * closer than the refractory period; one block is exactly the plain pass. And search-back's
 * pause rule on hand-made streams.
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
#include "cpu/noise_core.h" /* NOISE_CREST_CLEAN: the candidates below sit in clean signal */
#include "plan.h"
#include "detect_synth.h"

#define MITDB ECG_SHARED_DATA "/mitdb"

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
        cpu_decide_window(plan, cand, n_cand, NULL, &w, mine, &first, &last);
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
    assert_int_equal(cpu_decide(plan, cand, n_cand, NULL, n_a, got, &err), ECG_OK);
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
    cpu_decide_window(plan, cand, n_cand, NULL, &w, is_beat, &first, &last);
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
        assert_int_equal(cpu_decide(&plan, cand, n_cand, NULL, n_a, blocked, &err), ECG_OK);
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
        assert_int_equal(cpu_decide(&plan, cand, n_c1, NULL, n_one, blocked, &err), ECG_OK);
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
            cand[n_cand++] = (struct cpu_candidate){pos, h, s, NOISE_CREST_CLEAN};
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
    c[(*n)++] = (struct cpu_candidate){pos, height, slope, NOISE_CREST_CLEAN};
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
        assert_int_equal(cpu_decide(&plan, c, n, NULL, n_a, is_beat, &err), ECG_OK);
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

/*
 * Search-back in pauses and for candidates unlike a QRS complex (decide.c,
 * searchback_passes_over), on hand-made streams at 250 Hz: beats of height and slope 1 every 200
 * samples (0.8 s) with two noise peaks of 0.05 between each, then 5 s without a beat and the
 * train again. A small deflection (height 0.25: over search-back's floors, under the threshold;
 * slope 0.25, in the beats' proportion) 1.5 intervals after the last beat is a P wave or noise
 * in a pause, and search-back passes it over, and 2.8 intervals after it too; the same
 * deflection 1 or 2 intervals after the last beat lies where the rhythm's missed beats lie and
 * is taken; in an irregular rhythm (intervals of 120 and 280 samples in turn) it is taken
 * wherever it comes. Twice as steep as it is high (slope 0.5), it is passed over off the
 * rhythm's places whatever the rhythm, and taken on them.
 */
static size_t pause_stream(struct cpu_candidate *c, bool irregular, int64_t small_after,
                           float small_slope, int64_t *small_pos)
{
    size_t n = 0;
    int64_t pos = 40, last = 0;
    for (int b = 0; b < 30; b++) { /* 24 s of beats */
        const int64_t rr = irregular ? (b % 2 ? 120 : 280) : 200;
        put(c, &n, pos, 1.0f, 1.0f);
        put(c, &n, pos + rr / 3, 0.05f, 0.05f);
        put(c, &n, pos + 2 * rr / 3, 0.05f, 0.05f);
        last = pos;
        pos += rr;
    }
    /* the pause: noise peaks every 70 samples, the small deflection among them */
    const int64_t resume = last + 1250;
    *small_pos = last + small_after;
    for (int64_t p = last + 70; p < resume - 30; p += 70) {
        if (*small_pos > p - 70 && *small_pos <= p)
            put(c, &n, *small_pos, 0.25f, small_slope);
        else
            put(c, &n, p, 0.05f, 0.05f);
    }
    for (int b = 0; b < 10; b++)
        put(c, &n, resume + 200 * b, 1.0f, 1.0f);
    return n;
}

static void test_searchback_pause(void **state)
{
    (void)state;
    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    assert_int_equal(ecg_plan_init(&plan, &params, 250.0, &err), ECG_OK);
    const size_t n_a = 250 * 45;
    assert_int_equal(cpu_decide_blocks(&plan, n_a), 1);
    struct cpu_candidate c[256];
    uint8_t is_beat[256];
    const struct {
        bool irregular;
        int64_t after;
        float slope;
        bool taken;
        const char *what;
    } cases[] = {
        {false, 300, 0.25f, false, "regular rhythm, 1.5 intervals into a pause"},
        {false, 560, 0.25f, false, "regular rhythm, 2.8 intervals into a pause"},
        {false, 200, 0.25f, true, "regular rhythm, one interval after the last beat"},
        {false, 400, 0.25f, true, "regular rhythm, two intervals after the last beat"},
        {true, 300, 0.25f, true, "irregular rhythm, 1.5 mean intervals into a pause"},
        {true, 300, 0.5f, false, "irregular rhythm, 1.5 mean intervals on, twice too steep"},
        {false, 300, 0.5f, false, "regular rhythm, 1.5 intervals on, twice too steep"},
        {true, 200, 0.5f, true, "irregular rhythm, one mean interval on, twice too steep"},
        {true, 300, 0.45f, true, "irregular rhythm, 1.5 mean intervals on, 1.8 times too steep"},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int64_t small_pos = -1;
        const size_t n =
            pause_stream(c, cases[t].irregular, cases[t].after, cases[t].slope, &small_pos);
        assert_true(n <= sizeof c / sizeof c[0]);
        assert_int_equal(cpu_decide(&plan, c, n, NULL, n_a, is_beat, &err), ECG_OK);
        size_t beats = 0, small = 0;
        for (size_t k = 0; k < n; k++) {
            beats += is_beat[k];
            if (c[k].pos == small_pos)
                small = is_beat[k];
            if (c[k].height == 0.05f && is_beat[k])
                fail_msg("%s: the noise peak at %lld taken", cases[t].what,
                         (long long)c[k].pos);
        }
        print_message("%s: %zu beats, the small deflection %s\n", cases[t].what, beats,
                      small ? "taken" : "passed over");
        assert_int_equal(beats, 40 + (size_t)cases[t].taken);
        assert_int_equal(small, cases[t].taken);
    }
    ecg_plan_fini(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocked_records),
        cmocka_unit_test(test_blocked_merge_random),
        cmocka_unit_test(test_blocked_merge_cases),
        cmocka_unit_test(test_blocked_long_synthetic),
        cmocka_unit_test(test_searchback_pause),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
