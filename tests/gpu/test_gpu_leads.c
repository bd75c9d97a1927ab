/*
 * test_gpu_leads.c - CPU/CUDA parity of the noise-robust detector (issue 10): the CUDA engine
 * must find exactly the CPU's beats on the 22 shared records with both leads fused, on their
 * noise stress test mixtures (electrode motion, muscle, baseline wander; one lead and two), with
 * a third lead of noise alone (the fusion's agreement step), on UCR's tall T waves and on
 * random multi-lead signals. Both engines run without a model: the
 * VAE's parity is test_gpu_parity's. Skipped, visibly, where there is no CUDA device.
 * ECG_GPU_DATA names the data directory on the device (mitdb/, noise/, ucr/).
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
#include "../lead_off.h"

static const char *const records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
                                      "118", "119", "122", "124", "201", "203", "205", "207",
                                      "208", "209", "215", "220", "223", "230"};
#define N_RECORDS (sizeof records / sizeof records[0])

static const char *data_dir(void)
{
    const char *dir = getenv("ECG_GPU_DATA");
    return dir && *dir ? dir : ECG_SHARED_DATA;
}

struct engines {
    struct ecg_engine *cpu, *gpu;
};

static int setup(void **state)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .workers = 1, .device = -1};
    struct ecg_engine *gpu = ecg_engine_create(&config, &err);
    if (!gpu) {
        printf("# no CUDA device: %s\n", err.message);
        *state = NULL;
        return 0;
    }
    struct engines *e = calloc(1, sizeof *e);
    config.backend = ECG_BACKEND_CPU;
    e->cpu = ecg_engine_create(&config, &err);
    e->gpu = gpu;
    *state = e;
    return e->cpu ? 0 : -1;
}

static int teardown(void **state)
{
    struct engines *e = *state;
    if (e) {
        ecg_engine_destroy(e->cpu);
        ecg_engine_destroy(e->gpu);
        free(e);
    }
    return 0;
}

#define NEED_DEVICE(state)                                                                    \
    do {                                                                                      \
        if (!*(state)) {                                                                      \
            printf("# SKIP: no CUDA device on this machine\n");                               \
            skip();                                                                           \
        }                                                                                     \
    } while (0)

/* Analyses sig on both engines; returns the number of beats that differ (position or count). */
static size_t compare(struct engines *e, const struct ecg_signal *sig, const char *what,
                      size_t *beats)
{
    struct ecg_result *rc = NULL, *rg = NULL;
    struct ecg_error err = {0};
    if (ecg_engine_analyze(e->cpu, sig, &rc, &err) != ECG_OK)
        fail_msg("%s on cpu: %s", what, err.message);
    if (ecg_engine_analyze(e->gpu, sig, &rg, &err) != ECG_OK)
        fail_msg("%s on cuda: %s", what, err.message);
    size_t differ = rc->n_beats > rg->n_beats ? rc->n_beats - rg->n_beats
                                              : rg->n_beats - rc->n_beats;
    size_t k = rc->n_beats < rg->n_beats ? rc->n_beats : rg->n_beats;
    for (size_t i = 0; i < k; i++)
        differ += rc->r_peak[i] != rg->r_peak[i];
    assert_int_equal(rc->n_leads, rg->n_leads);
    /* the lead the peaks were placed on, and why: the same on both (engine.c, lead_instead) */
    assert_string_equal(rc->lead, rg->lead);
    assert_string_equal(rc->lead_passed_over, rg->lead_passed_over);
    for (size_t l = 0; l < ECG_MAX_LEADS; l++)
        if (!(isnan(rc->lead_agree[l]) && isnan(rg->lead_agree[l])) &&
            rc->lead_agree[l] != rg->lead_agree[l])
            fail_msg("%s: lead %zu's agreement %.17g on cpu, %.17g on cuda", what, l,
                     rc->lead_agree[l], rg->lead_agree[l]);
    if (differ)
        printf("# %s: cpu %zu beats, cuda %zu, %zu differ\n", what, rc->n_beats, rg->n_beats,
               differ);
    *beats += rc->n_beats;
    ecg_result_free(rc);
    ecg_result_free(rg);
    return differ;
}

static void read_record(const char *rec, const char *lead, struct ecg_signal *sig,
                        struct ecg_annotations *ann)
{
    char path[512];
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    snprintf(path, sizeof path, "%s/mitdb/%s", data_dir(), rec);
    if (ecg_read_file(path, &opts, sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    if (ann && ecg_annotations_read(path, ann, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

/* The NSTDB mixture of noise record `noise` at snr_db, channel l to lead l. */
static void mix(struct ecg_signal *sig, const struct ecg_annotations *ann, const char *noise,
                double snr_db)
{
    for (size_t l = 0; l <= sig->n_extra; l++) {
        char path[512], channel[8];
        snprintf(path, sizeof path, "%s/noise/%s", data_dir(), noise);
        snprintf(channel, sizeof channel, "%zu", l % 2);
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = channel};
        struct ecg_signal nz = {0};
        struct ecg_error err = {0};
        if (ecg_read_file(path, &opts, &nz, &err) != ECG_OK)
            fail_msg("%s: %s", path, err.message);
        float *x = l ? sig->extra[l - 1] : sig->samples;
        double pp, rms;
        assert_int_equal(ecg_nst_amplitudes(x, sig->n, nz.samples, nz.n, sig->fs_hz, ann, &pp,
                                            &rms, &err),
                         ECG_OK);
        ecg_nst_mix(x, sig->n, nz.samples, nz.n, sig->fs_hz, ecg_nst_gain(snr_db, pp, rms),
                    ECG_NST_START_S, ECG_NST_PERIOD_S);
        ecg_signal_free(&nz);
    }
}

/* A third lead of noise alone: channel 0 of noise record `noise` (the fusion's step 3a). */
static void add_noise_lead(struct ecg_signal *sig, const char *noise)
{
    char path[512];
    snprintf(path, sizeof path, "%s/noise/%s", data_dir(), noise);
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
    struct ecg_signal nz = {0};
    struct ecg_error err = {0};
    if (ecg_read_file(path, &opts, &nz, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    assert_true(nz.n >= sig->n && sig->n_extra == 1);
    sig->extra[1] = malloc(sig->n * sizeof *sig->extra[1]);
    assert_non_null(sig->extra[1]);
    memcpy(sig->extra[1], nz.samples, sig->n * sizeof *sig->extra[1]);
    snprintf(sig->extra_lead[1], sizeof sig->extra_lead[1], "%s", noise);
    sig->n_extra = 2;
    ecg_signal_free(&nz);
}

/* The 22 records: both leads clean, their stress-test mixtures with one lead and two, and both
 * leads with a third lead of noise alone (clean, and mixed). */
static void test_records_and_mixtures(void **state)
{
    NEED_DEVICE(state);
    struct engines *e = *state;
    static const struct {
        const char *lead, *noise;
        double snr_db;
        const char *third; /* a third lead of this noise record alone */
        bool third_first;  /* ... put first: the peaks go to the next lead (lead_passed_over) */
        bool lead_off;     /* every lead held still over the stretches of lead_off.h */
    } sets[] = {{"all", NULL, 0, NULL, false, false},   {"all", "em_a", 6, NULL, false, false},
                {"all", "em_a", 0, NULL, false, false}, {"all", "ma", 6, NULL, false, false},
                {"0", "em_a", 6, NULL, false, false},   {"0", "ma", 0, NULL, false, false},
                {"1", "bw", 0, NULL, false, false},     {"all", NULL, 0, "em_a", false, false},
                {"all", "em_a", 6, "ma", false, false}, {"all", NULL, 0, "ma", true, false},
                {"all", NULL, 0, NULL, false, true},    {"all", "em_a", 6, NULL, false, true}};
    size_t beats = 0, differ = 0;
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        size_t set_beats = 0, set_differ = 0;
        for (size_t r = 0; r < N_RECORDS; r++) {
            struct ecg_signal sig = {0};
            struct ecg_annotations ann = {0};
            read_record(records[r], sets[s].lead, &sig, &ann);
            if (sets[s].third)
                add_noise_lead(&sig, sets[s].third);
            if (sets[s].third_first) { /* noise, lead 0, lead 1 */
                float *noise = sig.extra[1];
                char name[32];
                snprintf(name, sizeof name, "%s", sig.lead);
                sig.extra[1] = sig.extra[0];
                sig.extra[0] = sig.samples;
                sig.samples = noise;
                snprintf(sig.extra_lead[1], sizeof sig.extra_lead[1], "%s", sig.extra_lead[0]);
                snprintf(sig.extra_lead[0], sizeof sig.extra_lead[0], "%s", name);
                snprintf(sig.lead, sizeof sig.lead, "%s", sets[s].third);
            }
            if (sets[s].noise)
                mix(&sig, &ann, sets[s].noise, sets[s].snr_db);
            if (sets[s].lead_off)
                lead_off_stretches(&sig);
            char what[96];
            snprintf(what, sizeof what, "%s lead %s%s%s %s %g dB%s", records[r], sets[s].lead,
                     sets[s].third ? (sets[s].third_first ? " after " : " + ") : "",
                     sets[s].third ? sets[s].third : "",
                     sets[s].noise ? sets[s].noise : "clean", sets[s].snr_db,
                     sets[s].lead_off ? ", leads off" : "");
            set_differ += compare(e, &sig, what, &set_beats);
            ecg_annotations_free(&ann);
            ecg_signal_free(&sig);
        }
        printf("# lead %s%s%s, %s %g dB%s: %zu beats, %zu differ\n", sets[s].lead,
               sets[s].third ? (sets[s].third_first ? " after a lead of " : " + a lead of ")
                             : "",
               sets[s].third ? sets[s].third : "",
               sets[s].noise ? sets[s].noise : "clean", sets[s].snr_db,
               sets[s].lead_off ? ", 20.5-s stretches with every lead held still" : "",
               set_beats, set_differ);
        beats += set_beats;
        differ += set_differ;
    }
    printf("# records and mixtures: %zu beats, %zu differ\n", beats, differ);
    assert_int_equal(differ, 0);
}

/* UCR's tall T waves, and random signals of 2 to 4 leads at several rates and lengths. */
static void test_ucr_and_random(void **state)
{
    NEED_DEVICE(state);
    struct engines *e = *state;
    size_t beats = 0, differ = 0;
    struct ecg_signal sig = {0};
    struct ecg_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/ucr/ecg50T.txt", data_dir());
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 250.0};
    if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
    differ += compare(e, &sig, "ucr", &beats);
    ecg_signal_free(&sig);

    uint64_t rng = 0x2545f4914f6cdd1dULL;
    static const double rates[] = {250.0, 360.0, 500.0, 128.0};
    for (int t = 0; t < 12; t++) {
        struct ecg_signal s = {0};
        s.fs_hz = rates[t % 4];
        s.n = (size_t)(s.fs_hz * (t < 6 ? 20.0 : 150.0));
        s.n_extra = 1 + (size_t)(t % 3);
        for (size_t l = 0; l <= s.n_extra; l++) {
            float *x = malloc(s.n * sizeof *x);
            assert_non_null(x);
            double period = 0.5 + 0.7 * (double)((rng >> 20) % 1000) / 1000.0;
            for (size_t i = 0; i < s.n; i++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                double u = (double)(rng >> 11) / 9007199254740992.0 - 0.5;
                double tt = fmod((double)i / s.fs_hz, period);
                double qrs = exp(-(tt - 0.2) * (tt - 0.2) / 2e-4) * (l == 1 ? -0.7 : 1.0);
                x[i] = (float)(qrs * (t % 2) + (0.2 + 0.3 * (double)l) * u);
            }
            if (l == 0)
                s.samples = x;
            else
                s.extra[l - 1] = x;
        }
        char what[64];
        snprintf(what, sizeof what, "random %d (%zu leads, %g Hz)", t, s.n_extra + 1, s.fs_hz);
        differ += compare(e, &s, what, &beats);
        ecg_signal_free(&s);
    }
    printf("# ucr and random: %zu beats, %zu differ\n", beats, differ);
    assert_int_equal(differ, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_and_mixtures),
        cmocka_unit_test(test_ucr_and_random),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
