/*
 * test_robust.c - the detector on the signals that real monitors produce (issue 10): tall T
 * waves (the UCR demo recording), long sinus pauses, electrode-motion noise on one lead or two,
 * recordings cut into short strips,
 * a lead with no ECG on it beside two that have, leads upside down or in other units,
 * the NSTDB noise mixer itself, and lead selections (lists, "all", embed_lead, 12 columns).
 * Real data from ../shared/data; every figure asserted is printed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "ecg.h"
#include "plan.h"
#include "cpu/cpu.h"
#include "cpu/detect_params.h"
#include "cpu/noise_core.h"
#include "cpu/unlike_core.h"
#include "../lead_off.h"

#define MITDB ECG_SHARED_DATA "/mitdb"
#define NOISE ECG_SHARED_DATA "/noise"

static uint64_t rng_state;
static double rng_normal(void)
{
    /* xorshift64* and Box-Muller: fixed seeds, no libc rand() */
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        u[i] = ((double)((rng_state * 2685821657736338717ULL) >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

static struct ecg_engine *cpu_engine(void)
{
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = 1};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

static struct ecg_result *analyze(struct ecg_engine *engine, const struct ecg_signal *sig)
{
    struct ecg_result *res = NULL;
    struct ecg_error err = {0};
    if (ecg_engine_analyze(engine, sig, &res, &err) != ECG_OK)
        fail_msg("analyze: %s", err.message);
    return res;
}

static void read_record(const char *name, const char *lead, struct ecg_signal *sig,
                        struct ecg_annotations *ann)
{
    char path[256];
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    snprintf(path, sizeof path, "%s/%s", MITDB, name);
    if (ecg_read_file(path, &opts, sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    if (ann && ecg_annotations_read(path, ann, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------ tall T waves */

/*
 * The UCR excerpt the original pipeline was shown on: between 120 and 155 s its T waves are as
 * tall as its QRS complexes. No RR interval may be shorter than 0.6 times the median of the 11
 * around it (a T wave taken for a beat halves one), and the heart rate stays within the
 * recording's true range (a regular rhythm of about 80 to 100 bpm).
 */
static void test_ucr_tall_t_waves(void **state)
{
    (void)state;
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 250.0};
    if (ecg_read_file(ECG_SHARED_DATA "/ucr/ecg50T.txt", &opts, &sig, &err) != ECG_OK)
        fail_msg("ucr: %s", err.message);
    struct ecg_engine *engine = cpu_engine();
    struct ecg_result *res = analyze(engine, &sig);
    const size_t n = res->n_beats;
    assert_true(n > 200);
    size_t short_rr = 0;
    double rr_sum = 0.0, rr_min = INFINITY;
    for (size_t i = 1; i < n; i++) {
        int64_t around[11];
        size_t m = 0;
        for (size_t j = i > 5 ? i - 5 : 1; j < n && j <= i + 5; j++)
            around[m++] = res->r_peak[j] - res->r_peak[j - 1];
        qsort(around, m, sizeof around[0], cmp_i64);
        const double rr = (double)(res->r_peak[i] - res->r_peak[i - 1]);
        if (rr < 0.6 * (double)around[m / 2]) {
            print_message("short RR at %.2f s: %.0f ms\n", (double)res->r_peak[i] / 250.0,
                          rr * 4.0);
            short_rr++;
        }
        rr_sum += rr;
        rr_min = rr < rr_min ? rr : rr_min;
    }
    const double mean_bpm = 60.0 * 250.0 * (double)(n - 1) / rr_sum;
    const double max_bpm = 60.0 * 250.0 / rr_min;
    print_message("ucr: %zu beats, mean %.1f bpm, max %.1f bpm, %zu short RR\n", n, mean_bpm,
                  max_bpm, short_rr);
    assert_int_equal(short_rr, 0);
    assert_true(mean_bpm >= 75.0 && mean_bpm <= 100.0);
    assert_true(max_bpm <= 130.0);
    ecg_result_free(res);
    ecg_engine_destroy(engine);
    ecg_signal_free(&sig);
}

/* ------------------------------------------------------------------ long pauses */

/*
 * Sinus pauses of 2 to 6 s spliced into a real record (both leads): after every 12 to 19 beats,
 * the signal holds its level for the pause, with the record's own high-frequency noise and a
 * slow baseline drift, then goes on with the next beats. No beat may be found inside a pause
 * (small waves and flat baseline are no missed beats, however long the gap) and every beat
 * outside must be, but for one in 900: 8 of the 7,512 are missed (7 before the decision's shape
 * test, unlike_core.h, which takes one more of 205's excerpts, next to a beat already missed).
 */
static void test_long_pauses(void **state)
{
    (void)state;
    const char *records[] = {"122", "112", "115", "205", "220", "101"};
    struct ecg_engine *engine = cpu_engine();
    size_t total_beats = 0, total_pauses = 0, in_pause = 0, missed = 0, extra = 0;
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        for (int all = 0; all < 2; all++) {
            struct ecg_signal rec = {0};
            struct ecg_annotations ann = {0};
            read_record(records[r], all ? "all" : "0", &rec, &ann);
            const double fs = rec.fs_hz;
            const size_t leads = 1 + rec.n_extra;
            struct ecg_signal out = {0};
            out.fs_hz = fs;
            out.samples = malloc(rec.n * 2 * sizeof(float));
            for (size_t l = 1; l < leads; l++)
                out.extra[l - 1] = malloc(rec.n * 2 * sizeof(float));
            out.n_extra = leads - 1;
            int64_t *truth = malloc(ann.n * sizeof *truth), pauses[64][2];
            size_t n_truth = 0, n_pauses = 0, pos = 0;
            rng_state = 0x9e3779b97f4a7c15ULL + r;
            size_t k = 5;
            while (k + 20 < ann.n && n_pauses < 40) {
                const size_t keep = 12 + (size_t)(rng_state % 8);
                const int64_t s0 = ann.sample[k] + (int64_t)(0.45 * fs);
                const int64_t s1 = ann.sample[k + keep] + (int64_t)(0.45 * fs);
                for (size_t b = k + 1; b <= k + keep; b++)
                    truth[n_truth++] = (int64_t)pos + ann.sample[b] - s0;
                for (size_t l = 0; l < leads; l++) {
                    const float *src = l ? rec.extra[l - 1] : rec.samples;
                    float *dst = l ? out.extra[l - 1] : out.samples;
                    memcpy(dst + pos, src + s0, (size_t)(s1 - s0) * sizeof(float));
                }
                pos += (size_t)(s1 - s0);
                const size_t len = (size_t)((2.0 + 4.0 * fabs(fmod(rng_normal(), 1.0))) * fs);
                pauses[n_pauses][0] = (int64_t)pos;
                pauses[n_pauses][1] = (int64_t)(pos + len);
                for (size_t l = 0; l < leads; l++) {
                    float *dst = l ? out.extra[l - 1] : out.samples;
                    const float *src = l ? rec.extra[l - 1] : rec.samples;
                    /* the record's high-frequency noise: first differences of a quiet stretch */
                    const int64_t q = ann.sample[k + keep] + (int64_t)(0.45 * fs);
                    double ss = 0.0;
                    for (int64_t i = q; i < q + (int64_t)(0.1 * fs); i++)
                        ss += (double)(src[i + 1] - src[i]) * (src[i + 1] - src[i]);
                    const double hf = sqrt(ss / (0.1 * fs) / 2.0);
                    const float level = dst[pos - 1];
                    for (size_t i = 0; i < len; i++)
                        dst[pos + i] = level + (float)(hf * rng_normal() +
                                                       0.05 * sin(M_PI * (double)i / (double)len));
                }
                pos += len;
                n_pauses++;
                k += keep;
            }
            out.n = pos;
            struct ecg_result *res = analyze(engine, &out);
            const int64_t tol = (int64_t)(0.15 * fs);
            size_t found = 0;
            for (size_t i = 0; i < res->n_beats; i++) {
                const int64_t p = res->r_peak[i];
                for (size_t j = 0; j < n_pauses; j++)
                    if (p > pauses[j][0] + (int64_t)(0.2 * fs) && p < pauses[j][1] - tol)
                        in_pause++;
                bool near = false;
                for (size_t t = 0; t < n_truth && !near; t++)
                    near = llabs(p - truth[t]) <= tol;
                found += near;
                extra += !near;
            }
            missed += n_truth - (found < n_truth ? found : n_truth);
            total_beats += n_truth;
            total_pauses += n_pauses;
            ecg_result_free(res);
            free(truth);
            ecg_signal_free(&out);
            ecg_signal_free(&rec);
            ecg_annotations_free(&ann);
        }
    }
    print_message("pauses: %zu beats, %zu pauses of 2-6 s: %zu beats inside pauses, %zu missed, "
                  "%zu false\n",
                  total_beats, total_pauses, in_pause, missed, extra);
    assert_true(total_pauses >= 300);
    assert_true(in_pause * 100 <= total_pauses); /* at most one false beat per 100 pauses */
    assert_true(missed * 900 <= total_beats);
    ecg_engine_destroy(engine);
}

/* ------------------------------------------------------------------ electrode motion, two leads */

struct f1 {
    size_t tp, fn, fp;
};

/* Adds res's beats, matched to ann within 150 ms, to s. */
static void add_score(struct f1 *s, const struct ecg_result *res,
                      const struct ecg_annotations *ann, double fs_hz)
{
    struct ecg_match_stats st;
    ecg_match_beats(res->r_peak, res->n_beats, ann->sample, ann->n, fs_hz, 0.150, &st, NULL);
    s->tp += st.tp;
    s->fn += st.fn;
    s->fp += st.fp;
}

static double f1_pct(const struct f1 *s)
{
    return 200.0 * (double)s->tp / (double)(2 * s->tp + s->fn + s->fp);
}

/* Channel 0 of the noise record at path added to sig's first lead at snr_db, measured against
 * the record as it is, the NSTDB way but in noisy stretches of period_s from start_s on. */
static void add_lead_noise(struct ecg_signal *sig, const struct ecg_annotations *ann,
                           const char *path, double snr_db, double start_s, double period_s)
{
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
    struct ecg_signal noise = {0};
    struct ecg_error err = {0};
    if (ecg_read_file(path, &opts, &noise, &err) != ECG_OK)
        fail_msg("noise: %s", err.message);
    double pp, rms;
    assert_int_equal(ecg_nst_amplitudes(sig->samples, sig->n, noise.samples, noise.n, sig->fs_hz,
                                        ann, &pp, &rms, &err),
                     ECG_OK);
    ecg_nst_mix(sig->samples, sig->n, noise.samples, noise.n, sig->fs_hz,
                ecg_nst_gain(snr_db, pp, rms), start_s, period_s);
    ecg_signal_free(&noise);
}

/* The NSTDB mixture of the noise record at path (lead l gets channel first + l) at snr_db,
 * measured against the record as it is; then, before the noise goes in, hum_mv of a hum_hz sine
 * on every lead (0: none), so that the hum does not raise the noise's level with the QRS
 * amplitude it adds to. */
static void add_noise_hum(struct ecg_signal *sig, const struct ecg_annotations *ann,
                          const char *path, long first, double snr_db, double hum_mv,
                          double hum_hz)
{
    for (size_t l = 0; l <= sig->n_extra; l++) {
        char channel[8];
        snprintf(channel, sizeof channel, "%ld", first + (long)l);
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = channel};
        struct ecg_signal noise = {0};
        struct ecg_error err = {0};
        if (ecg_read_file(path, &opts, &noise, &err) != ECG_OK)
            fail_msg("noise: %s", err.message);
        float *x = l ? sig->extra[l - 1] : sig->samples;
        double pp, rms;
        assert_int_equal(ecg_nst_amplitudes(x, sig->n, noise.samples, noise.n, sig->fs_hz, ann,
                                            &pp, &rms, &err),
                         ECG_OK);
        for (size_t i = 0; hum_mv > 0 && i < sig->n; i++)
            x[i] += (float)(hum_mv * sin(2 * M_PI * hum_hz * (double)i / sig->fs_hz + 0.3));
        ecg_nst_mix(x, sig->n, noise.samples, noise.n, sig->fs_hz,
                    ecg_nst_gain(snr_db, pp, rms), ECG_NST_START_S, ECG_NST_PERIOD_S);
        ecg_signal_free(&noise);
    }
}

static void add_em_noise_hum(struct ecg_signal *sig, const struct ecg_annotations *ann,
                             long first, double snr_db, double hum_mv, double hum_hz)
{
    add_noise_hum(sig, ann, NOISE "/em_a", first, snr_db, hum_mv, hum_hz);
}

static void add_em_noise(struct ecg_signal *sig, const struct ecg_annotations *ann, long first,
                         double snr_db)
{
    add_em_noise_hum(sig, ann, first, snr_db, 0.0, 0.0);
}

/*
 * Mains hum under electrode motion at 6 dB (both leads, the 22 records): 0.2 mV of 60 Hz moves
 * detection's F1 by under 0.1 point (record by record it moves both ways: 101 gains false beats,
 * 207's flutter loses some), and the quality verdict, which takes the line out of each second
 * where it holds half of the second difference's energy, flags about as many beats as without
 * the hum (before: 18.0 % of the beats against 2.3 %; now 2.8 %).
 */
static void test_hum_under_noise(void **state)
{
    (void)state;
    const char *records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
                             "118", "119", "122", "124", "201", "203", "205", "207",
                             "208", "209", "215", "220", "223", "230"};
    struct ecg_engine *engine = cpu_engine();
    struct f1 score[2] = {{0}};
    size_t flagged[2] = {0}, beats[2] = {0};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++)
        for (int hum = 0; hum < 2; hum++) {
            struct ecg_signal sig = {0};
            struct ecg_annotations ann = {0};
            read_record(records[r], "all", &sig, &ann);
            add_em_noise_hum(&sig, &ann, 0, 6.0, hum ? 0.2 : 0.0, 60.0);
            struct ecg_result *res = analyze(engine, &sig);
            add_score(&score[hum], res, &ann, sig.fs_hz);
            for (size_t b = 0; b < res->n_beats; b++)
                flagged[hum] += !res->readable[b];
            beats[hum] += res->n_beats;
            ecg_result_free(res);
            ecg_annotations_free(&ann);
            ecg_signal_free(&sig);
        }
    print_message("em_a 6 dB without / with 0.2 mV of 60 Hz: F1 %.3f / %.3f %%, beats flagged "
                  "%zu of %zu / %zu of %zu\n", f1_pct(&score[0]), f1_pct(&score[1]), flagged[0],
                  beats[0], flagged[1], beats[1]);
    assert_true(fabs(f1_pct(&score[1]) - f1_pct(&score[0])) < 0.1);
    assert_true(flagged[1] <= flagged[0] + beats[1] / 100);
    ecg_engine_destroy(engine);
}

/*
 * Electrode-motion noise at 6 dB, the NSTDB way, on records where it floods a single lead with
 * false beats: detection on both leads beats each lead alone (F1 over the records).
 */
static void test_two_leads_beat_one(void **state)
{
    (void)state;
    const char *records[] = {"101", "115", "124", "220"};
    struct ecg_engine *engine = cpu_engine();
    struct f1 score[3] = {{0}}; /* lead 0, lead 1, both */
    const char *leads[3] = {"0", "1", "all"};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        for (int w = 0; w < 3; w++) {
            struct ecg_signal sig = {0};
            struct ecg_annotations ann = {0};
            read_record(records[r], leads[w], &sig, &ann);
            add_em_noise(&sig, &ann, w == 1 ? 1 : 0, 6.0);
            struct ecg_result *res = analyze(engine, &sig);
            add_score(&score[w], res, &ann, sig.fs_hz);
            ecg_result_free(res);
            ecg_annotations_free(&ann);
            ecg_signal_free(&sig);
        }
    }
    print_message("em 6 dB, F1: lead 0 %.2f %%, lead 1 %.2f %%, both %.2f %%\n",
                  f1_pct(&score[0]), f1_pct(&score[1]), f1_pct(&score[2]));
    assert_true(f1_pct(&score[2]) > f1_pct(&score[0]) + 1.0);
    assert_true(f1_pct(&score[2]) > f1_pct(&score[1]) + 1.0);
    ecg_engine_destroy(engine);
}

/* Adds a third lead to a two-lead sig: noise alone (channel 0 of noise record noise_name, at
 * its own amplitude), labelled noise_name. */
/* The first n samples of the first channel of NSTDB noise recording noise_name into out. */
static void read_noise(const char *noise_name, size_t n, float *out)
{
    char path[256];
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
    struct ecg_signal noise = {0};
    struct ecg_error err = {0};
    snprintf(path, sizeof path, "%s/%s", NOISE, noise_name);
    if (ecg_read_file(path, &opts, &noise, &err) != ECG_OK)
        fail_msg("noise: %s", err.message);
    assert_true(noise.n >= n);
    memcpy(out, noise.samples, n * sizeof *out);
    ecg_signal_free(&noise);
}

static void add_noise_lead(struct ecg_signal *sig, const char *noise_name)
{
    assert_true(sig->n_extra == 1);
    sig->extra[1] = malloc(sig->n * sizeof *sig->extra[1]);
    assert_non_null(sig->extra[1]);
    read_noise(noise_name, sig->n, sig->extra[1]);
    snprintf(sig->extra_lead[1], sizeof sig->extra_lead[1], "%s", noise_name);
    sig->n_extra = 2;
}

/* The errors (missed + false beats) of the detector on record's leads 0 and 1, with a third
 * lead of noise alone (add_noise_lead; noise_name NULL: no third lead). */
static size_t errors_with_noise_lead(struct ecg_engine *engine, const char *record,
                                     const char *noise_name)
{
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    read_record(record, "all", &sig, &ann);
    if (noise_name)
        add_noise_lead(&sig, noise_name);
    struct ecg_result *res = analyze(engine, &sig);
    assert_int_equal(res->n_leads, noise_name ? 3 : 2);
    struct ecg_match_stats st;
    ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, sig.fs_hz, 0.150, &st, NULL);
    ecg_result_free(res);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    return st.fn + st.fp;
}

/*
 * The R peaks are placed, and the beats embedded, on the first lead: where that lead is a loose
 * electrode (a lead of muscle noise first, then the record's two leads), the analysis passes it
 * over for the next lead that shows the beats, and says so (lead_passed_over); the beats are the
 * ones found with the noise lead last, placed as closely (under 10 ms from the annotations on
 * average; 44 ms on the noise before). Named by embed_lead, the first lead is kept. The
 * record's two leads alone both show the beats (agreement over 0.9) and keep their order.
 */
static void test_noise_lead_first(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    const char *records[] = {"101", "208"};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        read_record(records[r], "all", &sig, &ann);
        struct ecg_result *two = analyze(engine, &sig);
        assert_true(two->lead_agree[0] > 0.9 && two->lead_agree[1] > 0.9 &&
                    two->lead_passed_over[0] == '\0');
        char first_name[32];
        snprintf(first_name, sizeof first_name, "%s", sig.lead);
        add_noise_lead(&sig, "ma");
        struct ecg_result *last = analyze(engine, &sig);
        float *swap = sig.samples; /* the noise lead first, then the record's two */
        sig.samples = sig.extra[1];
        sig.extra[1] = sig.extra[0];
        sig.extra[0] = swap;
        snprintf(sig.extra_lead[1], sizeof sig.extra_lead[1], "%s", sig.extra_lead[0]);
        snprintf(sig.extra_lead[0], sizeof sig.extra_lead[0], "%s", first_name);
        snprintf(sig.lead, sizeof sig.lead, "ma");
        struct ecg_result *first = analyze(engine, &sig);
        sig.lead_chosen = true;
        struct ecg_result *kept = analyze(engine, &sig);
        double err_ms[2];
        struct ecg_result *placed[2] = {first, kept};
        for (int k = 0; k < 2; k++) {
            struct ecg_match_stats st;
            ecg_match_beats(placed[k]->r_peak, placed[k]->n_beats, ann.sample, ann.n, sig.fs_hz,
                            0.150, &st, NULL);
            err_ms[k] = st.tp ? st.abs_err_ms_sum / (double)st.tp : 0.0;
        }
        print_message("%s, a muscle-noise lead first: passed over for %s (agreement %.2f, %.2f, "
                      "%.2f), %zu beats (noise lead last: %zu), mean error %.1f ms (kept: %.1f "
                      "ms)\n", records[r], first->lead, first->lead_agree[0],
                      first->lead_agree[1], first->lead_agree[2], first->n_beats, last->n_beats,
                      err_ms[0], err_ms[1]);
        assert_string_equal(first->lead_passed_over, "ma");
        assert_string_equal(first->lead, first_name);
        /* the answer says it: signal.lead_passed_over, and each lead's agreement */
        struct ecg_buf json = {0};
        ecg_result_write_json(first, engine, ECG_INCLUDE_ALL, &json);
        cJSON *doc = cJSON_Parse(json.data);
        assert_non_null(doc);
        assert_string_equal(
            cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "signal"), "lead_passed_over")->valuestring,
            "ma");
        cJSON *leads = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "quality"), "leads");
        assert_int_equal(cJSON_GetArraySize(leads), 3);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(leads, 1), "lead")->valuestring,
                            "ma");
        assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(leads, 0), "agreement")->valuedouble >
                    0.9);
        assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(leads, 1), "agreement")->valuedouble <
                    0.1);
        cJSON_Delete(doc);
        ecg_buf_fini(&json);
        assert_int_equal(first->n_beats, last->n_beats);
        assert_true(err_ms[0] < 10.0 && err_ms[1] > 20.0);
        assert_string_equal(kept->lead, "ma");
        assert_true(kept->lead_passed_over[0] == '\0' && kept->lead_agree[0] < 0.5);
        ecg_result_free(two);
        ecg_result_free(last);
        ecg_result_free(first);
        ecg_result_free(kept);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
    ecg_engine_destroy(engine);
}

/*
 * A lead that carries no ECG at all (a loose electrode: the noise stress test's muscle and
 * electrode-motion recordings alone, at their own amplitude, as a third lead) must not cost the
 * beats the other two leads show (the fusion's agreement, fuse_core.h step 3a). On four records
 * of fast and multiform rhythms, where a noise lead cost most: at most 1.6 times the two leads'
 * errors (measured: 70 errors with two leads, 70 with the muscle-noise lead, 108 with the
 * electrode-motion lead). Before step 3a such a lead weighed a tenth to a fifth of the fused
 * envelope, like a clean V1, and the records made 342 and 278 errors.
 */
static void test_noise_lead(void **state)
{
    (void)state;
    const char *records[] = {"203", "208", "209", "215"};
    const char *noises[] = {"ma", "em_a"};
    struct ecg_engine *engine = cpu_engine();
    size_t two = 0, three[2] = {0, 0};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        two += errors_with_noise_lead(engine, records[r], NULL);
        for (int k = 0; k < 2; k++)
            three[k] += errors_with_noise_lead(engine, records[r], noises[k]);
    }
    print_message("errors: two leads %zu, with a lead of muscle noise %zu, of electrode motion "
                  "%zu\n", two, three[0], three[1]);
    for (int k = 0; k < 2; k++)
        assert_true(three[k] * 5 <= two * 8);
    ecg_engine_destroy(engine);
}

/* Electrode motion at snr_db, the NSTDB way, on lead (a selection) of each record: the beats
 * matched within 150 ms, summed over the records. */
/* The detector's score on the records with the noise record at path mixed in at snr_db. */
static struct f1 noise_score(const char *const *records, size_t n_records, const char *lead,
                             const char *path, double snr_db)
{
    struct ecg_engine *engine = cpu_engine();
    struct f1 score = {0};
    for (size_t r = 0; r < n_records; r++) {
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        read_record(records[r], lead, &sig, &ann);
        add_noise_hum(&sig, &ann, path, 0, snr_db, 0.0, 0.0);
        struct ecg_result *res = analyze(engine, &sig);
        struct ecg_match_stats st;
        ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, sig.fs_hz, 0.150, &st,
                        NULL);
        score.tp += st.tp;
        score.fn += st.fn;
        score.fp += st.fp;
        ecg_result_free(res);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
    ecg_engine_destroy(engine);
    print_message("%s %g dB, lead %s: TP %zu, FN %zu, FP %zu, F1 %.2f %%\n", path, snr_db, lead,
                  score.tp, score.fn, score.fp, f1_pct(&score));
    return score;
}

static struct f1 em_score(const char *const *records, size_t n_records, const char *lead,
                          double snr_db)
{
    return noise_score(records, n_records, lead, NOISE "/em_a", snr_db);
}

/*
 * The noise-aware steps (engine/cpu/noise_core.h) under electrode motion at 0 dB, both leads, on
 * the same four records: F1 at least 85 % (89.2 % measured at f01defd, with 1,427 false beats;
 * 81.4 % before the noise-aware steps, with 2,821).
 */
static void test_em_zero_db(void **state)
{
    (void)state;
    const char *const records[] = {"101", "115", "124", "220"};
    const struct f1 score = em_score(records, sizeof records / sizeof records[0], "all", 0.0);
    assert_true(f1_pct(&score) >= 85.0);
}

/*
 * Step 3 (weak early candidates in noise) on real noise: electrode motion at 6 dB on the first
 * lead of four records whose regular rhythms it floods with early false beats. Measured: TP
 * 8,469, FP 736 (before the step: TP 8,471, FP 843); with the shape test after it
 * (unlike_core.h) TP 8,462, FP 611, and 8,463 and 709 with the shape test but not step 3. The
 * bound sits between the last two, so the test fails without the step; the true beats may not
 * fall by more than a handful.
 */
static void test_em_early_beats(void **state)
{
    (void)state;
    const char *const records[] = {"101", "115", "122", "230"};
    const struct f1 score = em_score(records, sizeof records / sizeof records[0], "0", 6.0);
    assert_true(score.fp <= 660);
    assert_true(score.tp >= 8450);
}

/*
 * The shape test (engine/cpu/unlike_core.h) by itself, at 250 Hz: a QRS complex is like itself
 * upside down and shifted by two samples (a ventricular beat pointing the other way, a peak
 * placed a little differently) but not shifted by twenty, and unlike a burst of noise.
 */
static void test_unlike_shapes(void **state)
{
    (void)state;
    const double fs = 250.0;
    const int64_t n = 1000;
    float y[1000];
    uint64_t seed = 12345;
    for (int64_t i = 0; i < n; i++) {
        const double a = (double)(i - 200), b = (double)(i - 502);
        y[i] = (float)(exp(-a * a / 18.0) - 0.4 * exp(-(a - 7) * (a - 7) / 12.0) -
                       (exp(-b * b / 18.0) - 0.4 * exp(-(b - 7) * (b - 7) / 12.0)));
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        if (i >= 780 && i < 820)
            y[i] += (float)((double)(seed >> 40) / (double)(1ULL << 24) - 0.5);
    }
    const struct unlike_geometry u = unlike_geometry_of(fs);
    assert_int_equal(u.shift, 3);
    assert_true(unlike_alike(y, n, u, 200, 500));  /* upside down, two samples later */
    assert_true(unlike_alike(y, n, u, 500, 200));
    assert_false(unlike_alike(y, n, u, 200, 480)); /* twenty samples off: not the same place */
    assert_false(unlike_alike(y, n, u, 800, 200)); /* noise */
    assert_false(unlike_alike(y, n, u, 200, 800));
    assert_true(unlike_alike(y, n, u, 5, 200));    /* too near the start to be tested */
}

/*
 * The shape test in the decision, lead 0 of four records with muscle noise and electrode motion
 * at 6 dB: in the noisy windows a candidate no stronger than the usual beat that is like no
 * complex of the recording counts as noise. Measured: muscle noise TP 7,373 -> 7,352 and FP 414
 * -> 321, electrode motion TP 7,399 -> 7,389 and FP 1,038 -> 871. The bounds sit between, so
 * the test fails without it; the true beats may not fall by more than a handful.
 */
static void test_unlike_in_noise(void **state)
{
    (void)state;
    const char *const records[] = {"101", "115", "124", "220"};
    const struct f1 ma = noise_score(records, 4, "0", NOISE "/ma", 6.0);
    const struct f1 em = em_score(records, 4, "0", 6.0);
    assert_true(ma.fp <= 365);
    assert_true(ma.tp >= 7340);
    assert_true(em.fp <= 955);
    assert_true(em.tp >= 7375);
}

/*
 * The shape test keeps its references across the decision's blocks (decide.c's references
 * prelude): lead 0 of 101, 115, 124 and 220 under electrode motion at 6 dB in stretches of 5
 * minutes from 120 s (noisy 120-420 s, 720-1,020 s, ...), longer than a block's 40-s warm-up, so
 * that most noisy blocks start inside the noise, where a warm-up finds no clean beat. Without
 * the prelude the test stayed off in those blocks: FP 956, TP 7,399; with it FP 882, TP 7,394
 * (FP 859 with a prelude of 120 s, which reaches further into such a stretch).
 */
static void test_unlike_across_blocks(void **state)
{
    (void)state;
    const char *const records[] = {"101", "115", "124", "220"};
    struct ecg_engine *engine = cpu_engine();
    struct f1 score = {0};
    for (size_t r = 0; r < 4; r++) {
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        read_record(records[r], "0", &sig, &ann);
        add_lead_noise(&sig, &ann, NOISE "/em_a", 6.0, 120.0, 300.0);
        struct ecg_result *res = analyze(engine, &sig);
        add_score(&score, res, &ann, sig.fs_hz);
        ecg_result_free(res);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
    print_message("em_a 6 dB in 5-min stretches, lead 0: TP %zu, FN %zu, FP %zu\n", score.tp,
                  score.fn, score.fp);
    assert_true(score.fp <= 905);
    assert_true(score.tp >= 7370);
    ecg_engine_destroy(engine);
}

/*
 * A run of complexes of a shape the recording has not shown before is kept: record 205's
 * ventricular tachycardia at 298-306 s (lead 0) fills the floor between beats, so the threshold
 * is raised and the shape test applies, and its first complex is like none of the sinus beats;
 * each is like the one before or after it. Without those two references (the sinus beats'
 * alone) the run lost 3 of its 21 beats.
 */
static void test_unlike_keeps_runs(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    read_record("205", "0", &sig, &ann);
    struct ecg_result *res = analyze(engine, &sig);
    /* the run's annotations, and the beats found within the matching window of them */
    const int64_t lo = (int64_t)(298.5 * sig.fs_hz), hi = (int64_t)(306.0 * sig.fs_hz);
    const int64_t tol = (int64_t)(0.15 * sig.fs_hz);
    size_t a0 = 0, a1, b0 = 0, b1;
    while (a0 < ann.n && ann.sample[a0] < lo)
        a0++;
    for (a1 = a0; a1 < ann.n && ann.sample[a1] <= hi; a1++)
        ;
    while (b0 < res->n_beats && res->r_peak[b0] < lo - tol)
        b0++;
    for (b1 = b0; b1 < res->n_beats && res->r_peak[b1] <= hi + tol; b1++)
        ;
    struct ecg_match_stats st;
    ecg_match_beats(res->r_peak + b0, b1 - b0, ann.sample + a0, a1 - a0, sig.fs_hz, 0.150, &st,
                    NULL);
    print_message("205's ventricular run: %zu of %zu beats found\n", st.tp, a1 - a0);
    assert_true(a1 - a0 >= 20);
    assert_int_equal(st.tp, a1 - a0);
    ecg_result_free(res);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

/*
 * A DC offset changes nothing (filter.c takes the first sample's level off): record 119's first
 * lead with 500 mV added (raw amplifier output keeps an electrode's offset potential; here 500
 * times this record's QRS) gives exactly the beats of the record as it is, and so do 20 10-s
 * strips of it with 50 mV. Before the level was taken off: 5 more false beats on the record,
 * and 2 of the strips changed.
 */
static void test_dc_offset(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    struct ecg_signal sig = {0};
    read_record("119", "0", &sig, NULL);
    struct ecg_result *plain = analyze(engine, &sig);
    for (size_t i = 0; i < sig.n; i++)
        sig.samples[i] += 500.0f;
    struct ecg_result *moved = analyze(engine, &sig);
    for (size_t i = 0; i < sig.n; i++)
        sig.samples[i] -= 500.0f;
    assert_int_equal(moved->n_beats, plain->n_beats);
    assert_memory_equal(moved->r_peak, plain->r_peak, plain->n_beats * sizeof *plain->r_peak);
    size_t changed = 0, strips = 0;
    const size_t strip = (size_t)(10.0 * sig.fs_hz);
    for (size_t at = 0; at + strip <= sig.n && strips < 20; at += 9 * strip, strips++) {
        struct ecg_signal part = sig;
        part.samples = sig.samples + at;
        part.n = strip;
        part.n_extra = 0;
        struct ecg_result *a = analyze(engine, &part);
        for (size_t i = 0; i < strip; i++)
            part.samples[i] += 50.0f;
        struct ecg_result *b = analyze(engine, &part);
        for (size_t i = 0; i < strip; i++)
            part.samples[i] -= 50.0f;
        changed += a->n_beats != b->n_beats ||
                   memcmp(a->r_peak, b->r_peak, a->n_beats * sizeof *a->r_peak) != 0;
        ecg_result_free(a);
        ecg_result_free(b);
    }
    print_message("dc offset: %zu beats either way; %zu of %zu 10-s strips changed by 50 mV\n",
                  plain->n_beats, changed, strips);
    assert_true(strips == 20);
    assert_true(changed == 0);
    ecg_result_free(plain);
    ecg_result_free(moved);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

/*
 * Blind to sign and scale: a lead recorded upside down (electrodes swapped), or in other units
 * (a gain of 100 or 1/100 x), has the same beats, on real records of multiform ventricular
 * beats (203, 208: their wide complexes swing both ways) and both leads. Nothing in the
 * detector may hang on an absolute amplitude or a direction. (Measured on all 22 records with
 * `ecgd eval`, gain x 100 in the header and every lead inverted: identical reports,
 * docs/ACCURACY.md.)
 */
static void test_sign_and_scale(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    const char *records[] = {"203", "208"};
    const float factors[] = {-1.0f, 100.0f, 0.01f, -0.01f};
    size_t beats = 0;
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        struct ecg_signal sig = {0};
        read_record(records[r], "all", &sig, NULL);
        struct ecg_result *plain = analyze(engine, &sig);
        beats += plain->n_beats;
        for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++) {
            struct ecg_signal other = sig;
            float *copies[2];
            for (size_t l = 0; l < 2; l++) {
                const float *x = l ? sig.extra[0] : sig.samples;
                copies[l] = malloc(sig.n * sizeof *copies[l]);
                assert_non_null(copies[l]);
                for (size_t i = 0; i < sig.n; i++)
                    copies[l][i] = x[i] * factors[f];
            }
            other.samples = copies[0];
            other.extra[0] = copies[1];
            struct ecg_result *res = analyze(engine, &other);
            if (res->n_beats != plain->n_beats ||
                memcmp(res->r_peak, plain->r_peak, plain->n_beats * sizeof *plain->r_peak) != 0)
                fail_msg("%s x %g: %zu beats against %zu, or placed elsewhere", records[r],
                         (double)factors[f], res->n_beats, plain->n_beats);
            ecg_result_free(res);
            free(copies[0]);
            free(copies[1]);
        }
        ecg_result_free(plain);
        ecg_signal_free(&sig);
    }
    print_message("sign and scale: %zu beats, the same under x -1, 100, 0.01, -0.01\n", beats);
    ecg_engine_destroy(engine);
}

/*
 * Search-back sooner in clean windows (decide.c, searchback_due): record 201's aberrated atrial
 * premature beats, each a little under the threshold and followed by a pause just short of
 * 1.66 mean intervals. Both leads: 7 missed, no false beat (18 missed before, the bound sits
 * between), the clean windows' rule adding no false beat.
 */
static void test_clean_searchback(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    read_record("201", "all", &sig, &ann);
    struct ecg_result *res = analyze(engine, &sig);
    struct ecg_match_stats st;
    ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, sig.fs_hz, 0.150, &st, NULL);
    print_message("201, both leads: TP %zu, FN %zu, FP %zu\n", st.tp, st.fn, st.fp);
    assert_true(st.fn <= 12);
    assert_true(st.fp == 0);
    ecg_result_free(res);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
}

/*
 * The band step sample by sample from noise_core.h's functions, as the CUDA twin takes it (each
 * window's measures from the whole-signal responses, each window's gains, noise_band_mix at
 * every sample): what cpu_noise_band must give bit for bit, chunks, runs and all.
 */
static void band_by_sample(const struct ecg_plan *plan, const float *y, float *f, size_t n)
{
    struct ecg_error err = {0};
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    float *r = malloc(3 * n * sizeof *r), *g = malloc(3 * n_win * sizeof *g);
    double *d = malloc(6 * n_win * sizeof *d);
    assert_true(r && g && d);
    float *f_hi = r, *f_h2 = r + n, *f_lo = r + 2 * n;
    assert_int_equal(cpu_filter_taps(plan->ricker_hi, plan->ricker_hi_len, y, n, 0, n, f_hi, &err),
                     ECG_OK);
    assert_int_equal(cpu_filter_taps(plan->ricker_h2, plan->ricker_h2_len, y, n, 0, n, f_h2, &err),
                     ECG_OK);
    assert_int_equal(cpu_filter_taps(plan->ricker_lo, plan->ricker_lo_len, y, n, 0, n, f_lo, &err),
                     ECG_OK);
    const struct noise_band_measures m = {d, d + n_win, d + 2 * n_win, d + 3 * n_win,
                                          d + 4 * n_win, d + 5 * n_win};
    for (size_t j = 0; j < n_win; j++)
        noise_band_window(f, f_hi, f_lo, f_h2, n, win, j, &m);
    float *keep = g, *take = g + n_win, *take2 = g + 2 * n_win;
    for (size_t j = 0; j < n_win; j++)
        noise_band_gains(&m, n_win, j, &keep[j], &take[j], &take2[j]);
    for (size_t i = 0; i < n; i++)
        f[i] = noise_band_mix(keep, take, take2, n_win, win, i, f[i], f_hi[i], f_h2[i]);
    free(r);
    free(g);
    free(d);
}

static float *band_input(const struct ecg_plan *plan, const struct ecg_signal *sig, float **f,
                         size_t *n_a)
{
    struct ecg_error err = {0};
    *n_a = ecg_plan_resampled_len(plan, sig->n);
    float *y = malloc(*n_a * sizeof *y);
    *f = malloc(*n_a * sizeof **f);
    assert_non_null(y);
    assert_non_null(*f);
    assert_int_equal(cpu_resample(plan, sig->samples, sig->n, y, &err), ECG_OK);
    assert_int_equal(cpu_filter(plan, y, *n_a, *f, &err), ECG_OK);
    return y;
}

/*
 * The noise-aware band (step 1), on record 220, whose clean ECG keeps the usual band (records
 * with wide or slow complexes, bundle-branch blocks, read the higher band even when clean, at no
 * cost: docs/ACCURACY.md): clean, its response is left bit for bit; under electrode motion at
 * 0 dB the band changes where the noise is (the noisy stretches) and hardly elsewhere; under
 * muscle noise it stays off (the high index blocks it); and the result does not depend on the
 * number of threads, and is the step's taken sample by sample (band_by_sample), bit for bit.
 */
static void test_noise_band(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_params params = ecg_params_default();
    const struct {
        const char *noise; /* NULL: clean */
        double snr_db;
    } cases[] = {{NULL, 0.0}, {"em_a", 0.0}, {"ma", 6.0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        read_record("220", "0", &sig, &ann);
        if (cases[c].noise) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", NOISE, cases[c].noise);
            add_lead_noise(&sig, &ann, path, cases[c].snr_db, ECG_NST_START_S,
                           ECG_NST_PERIOD_S);
        }
        struct ecg_plan plan;
        assert_int_equal(ecg_plan_init(&plan, &params, sig.fs_hz, &err), ECG_OK);
        size_t n_a;
        float *f, *y = band_input(&plan, &sig, &f, &n_a);
        float *mixed = malloc(n_a * sizeof *mixed), *serial = malloc(n_a * sizeof *serial);
        double *work = malloc(cpu_noise_band_work(&plan, n_a));
        assert_non_null(mixed);
        assert_non_null(serial);
        assert_non_null(work);
        memcpy(mixed, f, n_a * sizeof *f);
        assert_int_equal(cpu_noise_band(&plan, y, mixed, n_a, work, &err), ECG_OK);
        memcpy(serial, f, n_a * sizeof *f);
#ifdef _OPENMP
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
#endif
        assert_int_equal(cpu_noise_band(&plan, y, serial, n_a, work, &err), ECG_OK);
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        assert_memory_equal(mixed, serial, n_a * sizeof *f);
        /* the same bits as the step taken sample by sample (the CUDA twin's way) */
        memcpy(serial, f, n_a * sizeof *f);
        band_by_sample(&plan, y, serial, n_a);
        assert_memory_equal(mixed, serial, n_a * sizeof *f);
        size_t changed[2] = {0}, total[2] = {0}; /* clean, noisy stretches */
        for (size_t i = 0; i < n_a; i++) {
            const int noisy = cases[c].noise &&
                              ecg_nst_noisy((double)i / plan.fs_a_hz, ECG_NST_START_S,
                                            ECG_NST_PERIOD_S);
            total[noisy]++;
            changed[noisy] += mixed[i] != f[i];
        }
        const double clean_pct = 100.0 * (double)changed[0] / (double)total[0];
        const double noisy_pct = total[1] ? 100.0 * (double)changed[1] / (double)total[1] : 0.0;
        print_message("220 %s %g dB: band changed %.1f %% of the noisy stretches' samples, "
                      "%.1f %% of the others'\n",
                      cases[c].noise ? cases[c].noise : "clean", cases[c].snr_db, noisy_pct,
                      clean_pct);
        if (!cases[c].noise) {
            assert_int_equal(changed[0], 0);
        } else if (strcmp(cases[c].noise, "em_a") == 0) {
            assert_true(noisy_pct >= 30.0);
            assert_true(clean_pct <= 5.0);
        } else {
            assert_true(noisy_pct <= 10.0);
        }
        free(work);
        free(serial);
        free(mixed);
        free(f);
        free(y);
        ecg_plan_fini(&plan);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
}

/* The noise-aware threshold (step 2): Pan-Tompkins' own where the envelope's crest factor is
 * clean, twice its fraction where it is low, linear between. */
static void test_noise_threshold(void **state)
{
    (void)state;
    const double spk = 2.0, npk = 0.4;
    assert_true(noise_threshold(spk, npk, 9.0f, 0.25) == npk + 0.25 * (spk - npk));
    assert_true(noise_threshold(spk, npk, (float)NOISE_CREST_CLEAN, 0.25) ==
                npk + 0.25 * (spk - npk));
    assert_true(fabs(noise_threshold(spk, npk, 3.25f, 0.25) - (npk + 0.375 * (spk - npk))) <
                1e-12);
    assert_true(noise_threshold(spk, npk, (float)NOISE_CREST_NOISY, 0.25) ==
                npk + NOISE_THRESHOLD_NOISY * (spk - npk));
    assert_true(noise_threshold(spk, npk, 1.0f, 0.25) == npk + NOISE_THRESHOLD_NOISY * (spk - npk));
}

/* Step 3's verdict, as decide.c takes it: the candidate's test, then the rhythm's. */
static bool step3(double t, int64_t gap, float height, size_t n_rr, double lo, double hi)
{
    const double rr = 200.0, level = 1.0;
    return noise_premature_weak(t, DETECT_THRESHOLD, gap, height, level, rr) &&
           noise_regular_rhythm(n_rr, rr, lo, hi);
}

/* Step 3's verdict: noise only when every condition holds (a raised threshold, an early gap, a
 * weak height, a regular rhythm of enough intervals); each one alone turns it off. */
static void test_noise_premature_weak(void **state)
{
    (void)state;
    const double base = DETECT_THRESHOLD;
    const double noisy = noise_threshold_factor((float)NOISE_CREST_NOISY, base);
    const double mild = noise_threshold_factor(3.75f, base); /* raised a sixth of the way */
    /* a weak candidate at 0.5 RR (200) in a noisy window of a regular rhythm (intervals
     * 190-210) */
    assert_true(step3(noisy, 100, 0.5f, 8, 190.0, 210.0));
    assert_false(step3(base, 100, 0.5f, 8, 190.0, 210.0));
    assert_false(step3(mild, 100, 0.5f, 8, 190.0, 210.0));
    assert_false(step3(noisy, 130, 0.5f, 8, 190.0, 210.0));
    assert_false(step3(noisy, 100, 0.8f, 8, 190.0, 210.0));
    assert_false(step3(noisy, 100, 0.5f, 3, 190.0, 210.0));
    /* bigeminy: intervals alternating 140 and 260 (range 0.6 of the mean) */
    assert_false(step3(noisy, 100, 0.5f, 8, 140.0, 260.0));
    assert_true(step3(noisy, 129, 0.79f, 4, 150.0, 250.0));
    /* each test alone */
    assert_true(noise_premature_weak(noisy, base, 100, 0.5f, 1.0, 200.0));
    assert_false(noise_regular_rhythm(8, 200.0, 140.0, 260.0));
    assert_true(noise_regular_rhythm(4, 200.0, 150.0, 250.0));
}

/* ------------------------------------------------------------------ the noise mixer */

/*
 * The mixer follows nst: the record is untouched before minute 5 and in every other 2-minute
 * stretch after it but for a constant offset (which keeps the output continuous), and in the
 * noisy stretches the added noise, baseline removed per second, has the RMS that the requested
 * SNR gives for the measured QRS amplitude: rms = 10^(-snr/20) * sqrt(2) / 4 * pp.
 */
static void test_noise_mixer(void **state)
{
    (void)state;
    struct ecg_signal sig = {0}, clean = {0}, noise = {0};
    struct ecg_annotations ann = {0};
    struct ecg_error err = {0};
    read_record("115", "0", &sig, &ann);
    read_record("115", "0", &clean, NULL);
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
    assert_int_equal(ecg_read_file(NOISE "/ma", &opts, &noise, &err), ECG_OK);
    double pp, rms;
    assert_int_equal(ecg_nst_amplitudes(sig.samples, sig.n, noise.samples, noise.n, sig.fs_hz,
                                        &ann, &pp, &rms, &err),
                     ECG_OK);
    const double snr = 6.0, gain = ecg_nst_gain(snr, pp, rms);
    ecg_nst_mix(sig.samples, sig.n, noise.samples, noise.n, sig.fs_hz, gain, ECG_NST_START_S,
                ECG_NST_PERIOD_S);
    const size_t fs = 360;
    for (size_t i = 0; i < 300 * fs; i++)
        assert_true(sig.samples[i] == clean.samples[i]);
    /* a clean stretch: a constant offset from the record */
    const float offset = sig.samples[420 * fs + 10] - clean.samples[420 * fs + 10];
    for (size_t i = 420 * fs + 10; i < 540 * fs - 10; i++)
        assert_true(fabsf(sig.samples[i] - clean.samples[i] - offset) < 1e-4f);
    /* a noisy stretch: the added noise's per-second, baseline-free RMS, median over seconds */
    double per_second[128];
    size_t m = 0;
    for (size_t s = 302; s < 418; s++, m++) {
        double mean = 0.0, ss = 0.0;
        for (size_t i = s * fs; i < (s + 1) * fs; i++)
            mean += (double)sig.samples[i] - clean.samples[i];
        mean /= (double)fs;
        for (size_t i = s * fs; i < (s + 1) * fs; i++) {
            double d = (double)sig.samples[i] - clean.samples[i] - mean;
            ss += d * d;
        }
        per_second[m] = sqrt(ss / (double)fs);
    }
    double want = pow(10.0, -snr / 20.0) * sqrt(2.0) / 4.0 * pp;
    double sum = 0.0;
    for (size_t i = 0; i < m; i++)
        sum += per_second[i];
    double got = sum / (double)m;
    print_message("QRS pp %.3f mV, noise rms %.4f, gain %.3f; added rms %.4f, wanted %.4f\n", pp,
                  rms, gain, got, want);
    assert_true(pp > 0.5 && pp < 5.0);
    assert_true(fabs(got - want) < 0.25 * want); /* the record's noise stretches vary */
    ecg_signal_free(&noise);
    ecg_signal_free(&clean);
    ecg_signal_free(&sig);
    ecg_annotations_free(&ann);
}

/* ------------------------------------------------------------------ lead selections */

/*
 * A 12-column CSV (MLII, V1 and ten combinations of them, as derived leads are) read with
 * lead=all gives 12 leads and the beats of the two-lead analysis; lists, names and embed_lead
 * select and order; duplicates, empty names and an embed_lead outside the selection are
 * refused with bad_lead.
 */
static void test_lead_selections(void **state)
{
    (void)state;
    struct ecg_signal rec = {0};
    read_record("119", "all", &rec, NULL);
    const size_t n = 360 * 60;
    size_t cap = n * 12 * 16 + 256, len = 0;
    char *csv = malloc(cap);
    assert_non_null(csv);
    len += (size_t)snprintf(csv + len, cap - len, "MLII,V1");
    for (int c = 2; c < 12; c++)
        len += (size_t)snprintf(csv + len, cap - len, ",D%d", c);
    csv[len++] = '\n';
    for (size_t i = 0; i < n; i++) {
        const float a = rec.samples[i], b = rec.extra[0][i];
        len += (size_t)snprintf(csv + len, cap - len, "%.3f,%.3f", a, b);
        for (int c = 2; c < 12; c++)
            len += (size_t)snprintf(csv + len, cap - len, ",%.3f",
                                    (double)a * cos(0.3 * c) + (double)b * sin(0.3 * c));
        csv[len++] = '\n';
    }
    struct ecg_error err = {0};
    struct ecg_signal all = {0}, pick = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = "all"};
    assert_int_equal(ecg_read_memory(csv, len, &opts, &all, &err), ECG_OK);
    assert_int_equal(all.n_extra, 11);
    assert_string_equal(all.lead, "MLII");
    assert_string_equal(all.extra_lead[10], "D11");
    struct ecg_engine *engine = cpu_engine();
    struct ecg_result *res12 = analyze(engine, &all);
    assert_int_equal(res12->n_leads, 12);
    assert_string_equal(res12->leads[1], "V1");

    opts.lead = "V1, MLII";
    opts.embed_lead = "MLII";
    assert_int_equal(ecg_read_memory(csv, len, &opts, &pick, &err), ECG_OK);
    assert_string_equal(pick.lead, "MLII"); /* embed_lead first */
    assert_int_equal(pick.n_extra, 1);
    assert_string_equal(pick.extra_lead[0], "V1");
    struct ecg_result *res2 = analyze(engine, &pick);
    /* twelve leads, two of them independent: the same beats within 50 ms, nearly all */
    struct ecg_match_stats st;
    ecg_match_beats(res12->r_peak, res12->n_beats, res2->r_peak, res2->n_beats, 360.0, 0.05, &st,
                    NULL);
    print_message("12 leads: %zu beats, 2 leads: %zu beats, %zu matched\n", res12->n_beats,
                  res2->n_beats, st.tp);
    assert_true(res2->n_beats > 60);
    assert_true(st.tp + 2 >= res2->n_beats && st.fp <= 2);
    ecg_result_free(res12);
    ecg_result_free(res2);
    ecg_signal_free(&pick);
    ecg_signal_free(&all);

    const char *bad[][2] = {{"MLII,MLII", NULL}, {"MLII,,V1", NULL}, {"MLII,V1", "D5"},
                            {"0", "V1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ecg_read_opts b = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = bad[i][0],
                                  .embed_lead = bad[i][1]};
        struct ecg_signal s = {0};
        assert_int_not_equal(ecg_read_memory(csv, len, &b, &s, &err), ECG_OK);
        assert_string_equal(err.code, "bad_lead");
        assert_null(s.samples);
    }
    struct ecg_read_opts missing = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = "MLII,V9"};
    struct ecg_signal s = {0};
    assert_int_equal(ecg_read_memory(csv, len, &missing, &s, &err), ECG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "V9"));
    ecg_engine_destroy(engine);
    free(csv);
    ecg_signal_free(&rec);
}

/*
 * Two leads, the first a loose electrode's noise (NSTDB's muscle-noise recording alone), the
 * second the record's first lead: with no third lead to vote, the agreement is measured all
 * the same (fuse_core.h step 3a), and over a recording of at least 91 s the first lead is
 * passed over (engine.c's lead_instead): the R peaks on the ECG, not on noise spikes near the
 * beats. Before, two leads had no agreement and kept the noise lead: mean error 44.1 ms on 101
 * (46.8 on 208), now 1.9 (5.5). A 60-s strip keeps its first lead (two leads' agreement over
 * fewer seconds is not evidence enough), as does embed_lead.
 */
static void test_noise_lead_first_two(void **state)
{
    (void)state;
    struct ecg_engine *engine = cpu_engine();
    const char *records[] = {"101", "208"};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        read_record(records[r], "all", &sig, &ann);
        char first_name[32];
        snprintf(first_name, sizeof first_name, "%s", sig.lead);
        memcpy(sig.extra[0], sig.samples, sig.n * sizeof *sig.samples); /* ECG second */
        read_noise("ma", sig.n, sig.samples);                               /* noise first */
        snprintf(sig.extra_lead[0], sizeof sig.extra_lead[0], "%s", first_name);
        snprintf(sig.lead, sizeof sig.lead, "ma");
        struct ecg_result *res = analyze(engine, &sig);
        struct ecg_match_stats st;
        ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, sig.fs_hz, 0.150, &st,
                        NULL);
        const double err_ms = st.tp ? st.abs_err_ms_sum / (double)st.tp : 0.0;
        const size_t n = sig.n;
        sig.n = (size_t)(60.0 * sig.fs_hz);
        struct ecg_result *strip = analyze(engine, &sig);
        sig.n = n;
        sig.lead_chosen = true;
        struct ecg_result *kept = analyze(engine, &sig);
        print_message("%s, two leads, muscle noise first: lead %s (passed over: %s; agreement "
                      "%.3f, %.3f), Se %.2f %%, mean error %.1f ms; a 60-s strip keeps %s\n",
                      records[r], res->lead, res->lead_passed_over, res->lead_agree[0],
                      res->lead_agree[1], 100.0 * (double)st.tp / (double)(st.tp + st.fn),
                      err_ms, strip->lead);
        assert_string_equal(res->lead_passed_over, "ma");
        assert_string_equal(res->lead, first_name);
        assert_true(res->lead_agree[0] > 0.9 && res->lead_agree[1] < 0.1);
        assert_true(err_ms < 10.0);
        assert_string_equal(strip->lead, "ma");
        assert_true(strip->lead_passed_over[0] == '\0');
        assert_string_equal(kept->lead, "ma");
        assert_true(kept->lead_passed_over[0] == '\0');
        ecg_result_free(res);
        ecg_result_free(strip);
        ecg_result_free(kept);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
    ecg_engine_destroy(engine);
}

/* ------------------------------------------------------------------ short strips */

/*
 * Record name (with electrode-motion noise at em_snr_db the NSTDB way, unless NAN) analysed as
 * consecutive strips of strip_s seconds, each alone, as a monitor that posts strips gets it
 * analysed; the beats found, moved to the record's grid, are matched within 150 ms against the
 * reference beats of the span the strips cover, into sum.
 */
static void strips_score(struct ecg_engine *engine, const char *name, double strip_s,
                         double em_snr_db, struct ecg_match_stats *sum)
{
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    read_record(name, "all", &sig, &ann);
    if (!isnan(em_snr_db))
        add_em_noise(&sig, &ann, 0, em_snr_db);
    const size_t len = (size_t)(strip_s * sig.fs_hz + 0.5);
    int64_t *det = malloc(sig.n / 50 * sizeof *det); /* at most one beat per 50 samples */
    assert_non_null(det);
    size_t n_det = 0, used = 0;
    for (size_t at = 0; at + len <= sig.n; at += len) {
        struct ecg_signal part = sig;
        part.samples = sig.samples + at;
        part.n = len;
        for (size_t l = 0; l < sig.n_extra; l++)
            part.extra[l] = sig.extra[l] + at;
        struct ecg_result *res = analyze(engine, &part);
        for (size_t i = 0; i < res->n_beats; i++) {
            assert_true(res->r_peak[i] > 0 && res->r_peak[i] < (int64_t)len - 1);
            det[n_det++] = res->r_peak[i] + (int64_t)at;
        }
        ecg_result_free(res);
        used = at + len;
    }
    size_t n_ref = 0;
    while (n_ref < ann.n && ann.sample[n_ref] < (int64_t)used)
        n_ref++;
    struct ecg_match_stats m = {0};
    ecg_match_beats(det, n_det, ann.sample, n_ref, sig.fs_hz, 0.150, &m, NULL);
    sum->tp += m.tp;
    sum->fn += m.fn;
    sum->fp += m.fp;
    free(det);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
}

/*
 * Short strips keep their beats. A dashboard or a device fleet posts a recording as
 * consecutive strips; every cut then falls somewhere in a beat. Before, a beat whose R peak lay
 * within about 40 ms of a cut was found by neither strip (the envelope's peak had no valley
 * beyond the cut, so its prominence read as a plateau's), and a 1-s strip learnt its threshold
 * from the median of its three largest candidates, a T or a P wave when it holds one beat:
 * five records (101, 106, 118: right bundle branch block, 119: ventricular bigeminy, 208:
 * multiform ventricular beats) cut into 10-s strips lost 0.96 % of their beats (Se 99.04 %),
 * into 2-s strips 2.5 %, and 1-s strips were refused. Now (both leads, 150 ms): 10-s strips
 * Se / +P 99.77 / 99.78 %, 2-s 99.61 / 98.65 %, 1-s 99.10 / 96.36 %, and no beat is placed on
 * a strip's first or last sample.
 */
static void test_short_strips(void **state)
{
    (void)state;
    static const char *records[] = {"101", "106", "118", "119", "208"};
    static const struct {
        double strip_s, min_se, min_ppv;
    } cases[] = {{10.0, 99.6, 99.6}, {2.0, 99.4, 98.2}, {1.0, 98.9, 96.0}};
    struct ecg_engine *engine = cpu_engine();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ecg_match_stats sum = {0};
        for (size_t r = 0; r < sizeof records / sizeof records[0]; r++)
            strips_score(engine, records[r], cases[c].strip_s, NAN, &sum);
        const double se = 100.0 * (double)sum.tp / (double)(sum.tp + sum.fn);
        const double ppv = 100.0 * (double)sum.tp / (double)(sum.tp + sum.fp);
        print_message("%g-s strips: TP %zu FN %zu FP %zu, Se %.3f %%, +P %.3f %%\n",
                      cases[c].strip_s, sum.tp, sum.fn, sum.fp, se, ppv);
        assert_true(se >= cases[c].min_se);
        assert_true(ppv >= cases[c].min_ppv);
    }
    ecg_engine_destroy(engine);
}

/*
 * A noisy strip is decided from levels it settles itself. A strip has no warm-up before it:
 * the detector learnt its levels on the strip's first seconds, and where those were noisy it
 * kept a threshold that a longer run would have corrected; now the first pass over a
 * recording's first window only learns, and the second decides from what it learnt of the
 * beats (decide.c's self warm-up). Five records where electrode motion at 6 dB floods single
 * strips with false beats (101, 106, 108, 124, 201), 10-s strips, both leads: one pass F1
 * 92.42 % (+P 86.41 %), two passes 93.96 % (+P 89.22 %).
 */
static void test_noisy_strips(void **state)
{
    (void)state;
    static const char *records[] = {"101", "106", "108", "124", "201"};
    struct ecg_engine *engine = cpu_engine();
    struct ecg_match_stats sum = {0};
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++)
        strips_score(engine, records[r], 10.0, 6.0, &sum);
    const struct f1 score = {sum.tp, sum.fn, sum.fp};
    const double ppv = 100.0 * (double)sum.tp / (double)(sum.tp + sum.fp);
    print_message("10-s strips at em_a 6 dB: TP %zu FN %zu FP %zu, +P %.2f %%, F1 %.2f %%\n",
                  sum.tp, sum.fn, sum.fp, ppv, f1_pct(&score));
    assert_true(f1_pct(&score) >= 93.5);
    assert_true(ppv >= 88.5);
    ecg_engine_destroy(engine);
}

/* ------------------------------------------------------------------ a lead off */

/*
 * Both electrodes off for 20.5 s every 5 minutes (every lead held still, as a monitor holds
 * its last value), on two-lead records: no beat inside a stretch, each stretch in the quality
 * verdict, and the false beats elsewhere as few as on the intact record plus one at most per
 * stretch (the reconnection's step). Before the fusion kept a dead stretch out of each lead's
 * beat level (fuse_core.h steps 2-3), the filters' flat residual there was scaled up to the
 * beats' level: 60 beats inside the 30 stretches and 89 false beats in all, against the
 * intact records' 11.
 */
static void test_lead_off(void **state)
{
    (void)state;
    const char *records[] = {"101", "106", "112", "209", "220"};
    struct ecg_engine *engine = cpu_engine();
    size_t inside = 0, stretches = 0, unflagged = 0, fp_off = 0, fp_intact = 0;
    for (size_t r = 0; r < sizeof records / sizeof records[0]; r++) {
        for (int off = 0; off < 2; off++) {
            struct ecg_signal sig = {0};
            struct ecg_annotations ann = {0};
            read_record(records[r], "all", &sig, &ann);
            assert_int_equal(sig.n_extra, 1);
            if (off)
                lead_off_stretches(&sig);
            struct ecg_result *res = analyze(engine, &sig);
            /* the reference beats a stretch hides are not scored */
            size_t kept = 0;
            for (size_t k = 0; k < ann.n; k++)
                if (!off || lead_off_depth(ann.sample[k], sig.fs_hz) < 0)
                    ann.sample[kept++] = ann.sample[k];
            struct ecg_match_stats st;
            ecg_match_beats(res->r_peak, res->n_beats, ann.sample, kept, sig.fs_hz, 0.150, &st,
                            NULL);
            *(off ? &fp_off : &fp_intact) += st.fp;
            for (size_t b = 0; off && b < res->n_beats; b++)
                inside += lead_off_depth(res->r_peak[b], sig.fs_hz) > 0.3;
            for (double t = LEAD_OFF_START_S;
                 off && (t + LEAD_OFF_LEN_S) * sig.fs_hz < (double)sig.n; t += LEAD_OFF_EVERY_S) {
                int64_t a = (int64_t)((t + 1.0) * sig.fs_hz);
                int64_t b = (int64_t)((t + LEAD_OFF_LEN_S - 1.0) * sig.fs_hz);
                bool covered = false;
                for (size_t g = 0; g < res->quality.n_segments; g++) {
                    const struct ecg_quality_segment *seg = &res->quality.segments[g];
                    covered |= seg->start <= a && seg->end >= b &&
                               (seg->reason == ECG_QUALITY_FLAT ||
                                seg->reason == ECG_QUALITY_LEAD_OFF);
                }
                stretches++;
                unflagged += !covered;
            }
            ecg_result_free(res);
            ecg_annotations_free(&ann);
            ecg_signal_free(&sig);
        }
    }
    print_message("lead off (%zu stretches of %.1f s): %zu beats inside them, %zu not in the "
                  "verdict; false beats %zu (intact records %zu)\n",
                  stretches, LEAD_OFF_LEN_S, inside, unflagged, fp_off, fp_intact);
    assert_true(stretches >= 25);
    assert_int_equal(inside, 0);
    assert_int_equal(unflagged, 0);
    assert_true(fp_off <= fp_intact + stretches);
    ecg_engine_destroy(engine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ucr_tall_t_waves),  cmocka_unit_test(test_long_pauses),
        cmocka_unit_test(test_two_leads_beat_one), cmocka_unit_test(test_em_zero_db),
        cmocka_unit_test(test_em_early_beats),     cmocka_unit_test(test_noise_premature_weak),
        cmocka_unit_test(test_unlike_shapes),      cmocka_unit_test(test_unlike_in_noise),
        cmocka_unit_test(test_unlike_keeps_runs), cmocka_unit_test(test_unlike_across_blocks),
        cmocka_unit_test(test_clean_searchback),    cmocka_unit_test(test_dc_offset),
        cmocka_unit_test(test_noise_band),         cmocka_unit_test(test_noise_threshold),
        cmocka_unit_test(test_noise_mixer),
        cmocka_unit_test(test_lead_selections),    cmocka_unit_test(test_noise_lead),
        cmocka_unit_test(test_sign_and_scale),     cmocka_unit_test(test_noise_lead_first),
        cmocka_unit_test(test_noise_lead_first_two),
        cmocka_unit_test(test_short_strips),       cmocka_unit_test(test_noisy_strips),
        cmocka_unit_test(test_lead_off),          cmocka_unit_test(test_hum_under_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
