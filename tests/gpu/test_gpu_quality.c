/*
 * test_gpu_quality.c - the CUDA signal-quality features (gpu/cuda_quality.cu) against the CPU
 * reference (engine/cpu/quality_features.c): bit-identical, window by window, on the 22 shared
 * MIT-BIH records, on their mixtures with the NSTDB noises (bw, ma, em_a at 12, 0 and -6 dB
 * by RMS), and on random signals of many rates and lengths (noise, synthetic ECG, flat lines,
 * clipping, sines, signed zeros, huge and tiny values); then the engines end to end: the same
 * quality report, per-beat quality, NN flags and HRV on both backends.
 *
 * Tolerance: none. The features are exact (engine/quality.h says why), so every byte of every
 * window must match; so must the verdict drawn from them on the host, also where a long
 * recording's windows are classified beside the GPU's stages.
 *
 * Skips, visibly, where the build has no CUDA backend or the machine no device. Data:
 * ECG_GPU_DATA (a directory holding mitdb/ and noise/) overrides ECG_SHARED_DATA.
 * ECG_GPU_QUICK=1 runs 2 records instead of 22 (for compute-sanitizer).
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

#include "backend.h"
#include "ecg.h"
#include "gpu_pair.h"
#include "plan.h"
#include "quality.h"

static const char *const records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
                                      "118", "119", "122", "124", "201", "203", "205", "207",
                                      "208", "209", "215", "220", "223", "230"};
#define N_RECORDS (sizeof records / sizeof records[0])

static int setup(void **state)
{
    *state = pair_open(NULL);
    return 0;
}

static size_t n_records(void)
{
    const char *q = getenv("ECG_GPU_QUICK");
    return q && *q && strcmp(q, "0") != 0 ? 2 : N_RECORDS;
}

static void read_data(const char *sub, const char *name, struct ecg_signal *sig)
{
    char path[512];
    const char *dir = getenv("ECG_GPU_DATA");
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    snprintf(path, sizeof path, "%s/%s/%s", dir && *dir ? dir : ECG_SHARED_DATA, sub, name);
    if (ecg_read_file(path, &opts, sig, &err) != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

/* Loads x into both backends, computes the features on each, and requires every byte equal.
 * Returns the number of windows. */
static size_t compare_features(struct pair *p, const float *x, size_t n, double fs_hz,
                               const char *what)
{
    struct ecg_error err = {0};
    struct ecg_plan plan = {0};
    struct ecg_params params = ecg_params_default();
    assert_int_equal(ecg_plan_init(&plan, &params, fs_hz, &err), ECG_OK);
    struct ecg_quality_geometry g = ecg_quality_geometry_of(n, fs_hz);
    struct ecg_quality_window *wc = calloc(g.n_win, sizeof *wc);
    struct ecg_quality_window *wg = calloc(g.n_win, sizeof *wg);
    assert_true(wc && wg);
    assert_int_equal(p->cpu->load(p->cpu_ctx, x, n, &err), ECG_OK);
    if (p->gpu->load(p->gpu_ctx, x, n, &err) != ECG_OK)
        fail_msg("%s: cuda load: %s", what, err.message);
    assert_int_equal(p->cpu->quality(p->cpu_ctx, &plan, wc, g.n_win, &err), ECG_OK);
    if (p->gpu->quality(p->gpu_ctx, &plan, wg, g.n_win, &err) != ECG_OK)
        fail_msg("%s: cuda quality: %s", what, err.message);
    for (size_t j = 0; j < g.n_win; j++) {
        /* field by field: the struct's padding is not part of the contract */
        const struct ecg_quality_window *a = &wc[j], *b = &wg[j];
        bool same = a->n == b->n && a->n_repeat == b->n_repeat && a->n_at_max == b->n_at_max &&
                    a->n_at_min == b->n_at_min && a->qrs_n == b->qrs_n && a->hf_n == b->hf_n &&
                    !memcmp(&a->x_min, &b->x_min, sizeof a->x_min) &&
                    !memcmp(&a->x_max, &b->x_max, sizeof a->x_max) &&
                    !memcmp(&a->qrs_s1, &b->qrs_s1, sizeof a->qrs_s1) &&
                    !memcmp(&a->qrs_s2, &b->qrs_s2, sizeof a->qrs_s2) &&
                    !memcmp(&a->qrs_s3, &b->qrs_s3, sizeof a->qrs_s3) &&
                    !memcmp(&a->qrs_s4, &b->qrs_s4, sizeof a->qrs_s4) &&
                    !memcmp(&a->hf_s2, &b->hf_s2, sizeof a->hf_s2);
        if (!same)
            fail_msg("%s: window %zu of %zu differs: cpu n=%u rep=%u max=%u min=%u s2=%.17g "
                     "h2=%.17g, gpu n=%u rep=%u max=%u min=%u s2=%.17g h2=%.17g", what, j,
                     g.n_win, a->n, a->n_repeat, a->n_at_max, a->n_at_min, a->qrs_s2, a->hf_s2,
                     b->n, b->n_repeat, b->n_at_max, b->n_at_min, b->qrs_s2, b->hf_s2);
    }
    free(wc);
    free(wg);
    ecg_plan_fini(&plan);
    return g.n_win;
}

static void test_features_records(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_signal noise[3] = {{0}};
    const char *noise_names[] = {"bw", "ma", "em_a"};
    const double snr_db[] = {12.0, 0.0, -6.0};
    for (size_t k = 0; k < 3; k++)
        read_data("noise", noise_names[k], &noise[k]);
    size_t windows = 0;
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        read_data("mitdb", records[r], &sig);
        windows += compare_features(p, sig.samples, sig.n, sig.fs_hz, records[r]);
        /* mixtures: noise scaled to the record's RMS over the SNR, from minute 5 on */
        double mean = 0, var = 0;
        for (size_t i = 0; i < sig.n; i++)
            mean += sig.samples[i];
        mean /= (double)sig.n;
        for (size_t i = 0; i < sig.n; i++)
            var += (sig.samples[i] - mean) * (sig.samples[i] - mean);
        float *mix = malloc(sig.n * sizeof *mix);
        assert_non_null(mix);
        for (size_t k = 0; k < 3; k++) {
            double nvar = 0;
            for (size_t i = 0; i < noise[k].n; i++)
                nvar += (double)noise[k].samples[i] * noise[k].samples[i];
            double gain = sqrt(var / (double)sig.n / (nvar / (double)noise[k].n)) *
                          pow(10.0, -snr_db[r % 3] / 20.0);
            for (size_t i = 0; i < sig.n; i++)
                mix[i] = sig.samples[i] + (i >= 300 * 360 ? (float)(gain *
                                           noise[k].samples[i % noise[k].n]) : 0.0f);
            char what[64];
            snprintf(what, sizeof what, "%s + %s at %g dB", records[r], noise_names[k],
                     snr_db[r % 3]);
            windows += compare_features(p, mix, sig.n, sig.fs_hz, what);
        }
        /* mains hum, 0.3 mV from minute 5 on (50 Hz on even records, 60 on odd): windows whose
         * line is taken out (quality_core.h) beside windows that keep their samples */
        const double hz = r % 2 ? 60.0 : 50.0;
        for (size_t i = 0; i < sig.n; i++)
            mix[i] = sig.samples[i] +
                     (i >= 300 * 360 ? (float)(0.3 * sin(2 * M_PI * hz * (double)i / sig.fs_hz))
                                     : 0.0f);
        char what[64];
        snprintf(what, sizeof what, "%s + %g Hz hum", records[r], hz);
        windows += compare_features(p, mix, sig.n, sig.fs_hz, what);
        /* pacemaker spikes, 2 mV every 0.8 s from minute 5 on, the hum kept on odd records:
         * second differences left out of the HF sums as spikes (quality_spike_cap), with and
         * without the line taken out */
        const float spike[] = {0.5f, 2.0f, 0.6f, -0.8f, -0.3f};
        for (size_t i = 0; i < sig.n; i++) {
            if (r % 2 == 0 || i < 300 * 360)
                mix[i] = sig.samples[i];
            if (i >= 300 * 360 && (i - 300 * 360) % 288 < 5)
                mix[i] += spike[(i - 300 * 360) % 288];
        }
        snprintf(what, sizeof what, "%s + pacemaker spikes%s", records[r], r % 2 ? " + hum" : "");
        windows += compare_features(p, mix, sig.n, sig.fs_hz, what);
        free(mix);
        ecg_signal_free(&sig);
    }
    for (size_t k = 0; k < 3; k++)
        ecg_signal_free(&noise[k]);
    printf("# %zu windows bit-identical\n", windows);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double uniform(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static void test_features_random(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    const double rates[] = {100.0, 128.0, 250.0, 256.0, 360.0, 499.0, 500.0, 1000.0, 2000.0};
    uint64_t seed = 0x2545f4914f6cdd1dull;
    size_t windows = 0;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        for (int kind = 0; kind < 7; kind++) {
            double fs = rates[r];
            /* 2 s to ~2 min, with a partial last window */
            size_t n = (size_t)(fs * (2.0 + 110.0 * uniform(&seed))) + (size_t)kind;
            float *x = malloc(n * sizeof *x);
            assert_non_null(x);
            for (size_t i = 0; i < n; i++) {
                double t = (double)i / fs, u = uniform(&seed) - 0.5;
                switch (kind) {
                case 0: x[i] = (float)u; break;                              /* noise */
                case 1: x[i] = (float)(fmod(t, 0.8) < 0.03 ? 1.5 : 0.1 * u); break; /* spikes */
                case 2: x[i] = 0.25f; break;                                  /* flat */
                case 3: x[i] = (float)fmin(0.4, fmax(-0.4, sin(2 * M_PI * 1.1 * t) +
                                                               0.2 * u)); break; /* clipped */
                case 4: x[i] = (float)sin(2 * M_PI * 7.0 * t); break;         /* sine */
                case 5: x[i] = u < 0 ? -0.0f : 0.0f; break;                   /* signed zeros */
                default: x[i] = (float)(u * (i % 2 ? 3e30 : 1e-30)); break;   /* huge, tiny */
                }
            }
            char what[64];
            snprintf(what, sizeof what, "random kind %d at %g Hz, %zu samples", kind, fs, n);
            windows += compare_features(p, x, n, fs, what);
            free(x);
        }
    }
    printf("# %zu windows bit-identical\n", windows);
}

static struct ecg_engine *engine_of(enum ecg_backend_kind kind)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = kind, .workers = 1, .device = -1};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

/* The same quality report, and (when the beats agree, which the main parity suite checks) the
 * same per-beat quality, NN flags and HRV, bit for bit; returns whether the beats agreed. */
static bool same_quality(const struct ecg_result *rc, const struct ecg_result *rg)
{
    const struct ecg_quality_report *qc = &rc->quality, *qg = &rg->quality;
    assert_int_equal(qc->verdict, qg->verdict);
    assert_int_equal(qc->reason, qg->reason);
    assert_true(qc->usable_fraction == qg->usable_fraction);
    assert_int_equal(qc->n_segments, qg->n_segments);
    assert_true(qc->n_segments >= 2);
    for (size_t s = 0; s < qc->n_segments; s++) {
        assert_int_equal(qc->segments[s].start, qg->segments[s].start);
        assert_int_equal(qc->segments[s].end, qg->segments[s].end);
        assert_int_equal(qc->segments[s].reason, qg->segments[s].reason);
    }
    if (rc->n_beats != rg->n_beats ||
        memcmp(rc->r_peak, rg->r_peak, rc->n_beats * sizeof *rc->r_peak))
        return false;
    size_t k = rc->n_beats;
    assert_memory_equal(rc->beat_quality, rg->beat_quality, k * sizeof(float));
    assert_memory_equal(rc->readable, rg->readable, k);
    assert_memory_equal(rc->nn, rg->nn, k);
    assert_memory_equal(&rc->hrv, &rg->hrv, sizeof rc->hrv);
    return true;
}

/* The engines end to end: the same verdict, segments, and (when the beats agree, which the
 * main parity suite checks) the same per-beat quality, NN flags and HRV, bit for bit. */
static void test_engine_quality(void **state)
{
    NEED_DEVICE(state);
    struct ecg_engine *cpu = engine_of(ECG_BACKEND_CPU), *gpu = engine_of(ECG_BACKEND_CUDA);
    size_t same_beats = 0;
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        struct ecg_result *rc = NULL, *rg = NULL;
        struct ecg_error err = {0};
        read_data("mitdb", records[r], &sig);
        /* an unreadable stretch: white noise at 100-120 s, a flat line at 200-210 s */
        uint64_t seed = 99 + r;
        for (size_t i = 100 * 360; i < 120 * 360; i++)
            sig.samples[i] += (float)(2.0 * (uniform(&seed) - 0.5));
        for (size_t i = 200 * 360; i < 210 * 360; i++)
            sig.samples[i] = 0.0f;
        assert_int_equal(ecg_engine_analyze(cpu, &sig, &rc, &err), ECG_OK);
        if (ecg_engine_analyze(gpu, &sig, &rg, &err) != ECG_OK)
            fail_msg("record %s on cuda: %s", records[r], err.message);
        same_beats += same_quality(rc, rg);
        printf("# record %s: %s, %zu segments, usable %.4f; beats %s\n", records[r],
               ecg_quality_verdict_name(rc->quality.verdict), rc->quality.n_segments,
               rc->quality.usable_fraction,
               rc->n_beats == rg->n_beats ? "same count" : "differ");
        ecg_result_free(rc);
        ecg_result_free(rg);
        ecg_signal_free(&sig);
    }
    printf("# %zu of %zu records with identical beats: per-beat quality and HRV identical\n",
           same_beats, n_records());
    ecg_engine_destroy(cpu);
    ecg_engine_destroy(gpu);
}

/*
 * A recording long enough (every record in a row: 11 hours, ~39,700 windows) that the engine
 * classifies its quality windows on a host thread while the GPU runs the stages (engine.c,
 * result_assess_beside), with noisy and flat stretches: the same report as the CPU backend's.
 */
static void test_engine_quality_long(void **state)
{
    NEED_DEVICE(state);
    struct ecg_engine *cpu = engine_of(ECG_BACKEND_CPU), *gpu = engine_of(ECG_BACKEND_CUDA);
    struct ecg_signal sig = {.fs_hz = 360.0};
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal rec = {0};
        read_data("mitdb", records[r], &rec);
        float *grown = realloc(sig.samples, (sig.n + rec.n) * sizeof *grown);
        assert_non_null(grown);
        sig.samples = grown;
        memcpy(sig.samples + sig.n, rec.samples, rec.n * sizeof *grown);
        sig.n += rec.n;
        ecg_signal_free(&rec);
    }
    uint64_t seed = 7;
    for (size_t s = 600; s + 30 < sig.n / 360; s += 3600) { /* each hour: noise, then flat */
        for (size_t i = s * 360; i < (s + 20) * 360; i++)
            sig.samples[i] += (float)(2.0 * (uniform(&seed) - 0.5));
        for (size_t i = (s + 20) * 360; i < (s + 30) * 360; i++)
            sig.samples[i] = 0.0f;
    }
    struct ecg_result *rc = NULL, *rg = NULL;
    struct ecg_error err = {0};
    assert_int_equal(ecg_engine_analyze(cpu, &sig, &rc, &err), ECG_OK);
    if (ecg_engine_analyze(gpu, &sig, &rg, &err) != ECG_OK)
        fail_msg("cuda: %s", err.message);
    bool beats = same_quality(rc, rg);
    printf("# %zu samples (%.1f h): %s, %zu segments, usable %.4f; beats %s%s\n", sig.n,
           (double)sig.n / 360.0 / 3600.0, ecg_quality_verdict_name(rc->quality.verdict),
           rc->quality.n_segments, rc->quality.usable_fraction,
           beats ? "identical" : "differ", beats ? ": per-beat quality and HRV identical" : "");
    ecg_result_free(rc);
    ecg_result_free(rg);
    ecg_signal_free(&sig);
    ecg_engine_destroy(cpu);
    ecg_engine_destroy(gpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features_random),
        cmocka_unit_test(test_features_records),
        cmocka_unit_test(test_engine_quality),
        cmocka_unit_test(test_engine_quality_long),
    };
    return cmocka_run_group_tests(tests, setup, pair_teardown);
}
