/*
 * parity_stages.c - test_gpu_parity, stage by stage: each CUDA stage against the CPU's
 * from the same input (the records, random signals at many rates, short strips, the blocked
 * detector, the VAE paths and the cuFFT filter forced). Tolerances: test_gpu_parity.c.
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

#include "parity.h"

#include "backend.h"
#include "cpu/cpu.h"
#include "ecg.h"
#include "model.h"

/* ---------------------------------------------------------------- stage by stage */

/* Runs one stage (the CPU's and the GPU's op: resample or filter) on both backends, reads the
 * float buffer buf of each and compares them (1e-6 of the largest value); returns the CPU's
 * (its length in *len) and in *gpu the GPU's, both for the caller to free. */
typedef enum ecg_status (*stage_op)(void *ctx, const struct ecg_plan *plan,
                                    struct ecg_error *err);
static float *float_stage_both(struct pair *p, const struct ecg_plan *plan, stage_op cpu_op,
                               stage_op gpu_op, enum ecg_stage_buf buf, const char *name,
                               float **gpu, size_t *len)
{
    struct ecg_error err = {0};
    size_t len_g;
    assert_int_equal(cpu_op(p->cpu_ctx, plan, &err), ECG_OK);
    if (gpu_op(p->gpu_ctx, plan, &err) != ECG_OK)
        fail_msg("gpu %s: %s", name, err.message);
    float *c = read_all(p->cpu, p->cpu_ctx, buf, sizeof(float), len);
    *gpu = read_all(p->gpu, p->gpu_ctx, buf, sizeof(float), &len_g);
    assert_int_equal(*len, len_g);
    compare_floats(name, c, *gpu, *len, 1e-6);
    return c;
}

/* Detection on both backends from the CPU's filter response fc (len samples, written to the
 * GPU first): the beat counts each reports, the lengths of their peak lists, and the number of
 * peaks that differ (peak_mismatches). */
static size_t detect_both(struct pair *p, const struct ecg_plan *plan, const float *fc,
                          size_t len, size_t *n_cpu, size_t *n_gpu, size_t *len_c, size_t *len_g)
{
    struct ecg_error err = {0};
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_FILTERED, fc, len, &err), ECG_OK);
    assert_int_equal(p->cpu->detect(p->cpu_ctx, plan, n_cpu, &err), ECG_OK);
    if (p->gpu->detect(p->gpu_ctx, plan, n_gpu, &err) != ECG_OK)
        fail_msg("gpu detect: %s", err.message);
    int64_t *pc = (int64_t *)read_all(p->cpu, p->cpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), len_c);
    int64_t *pg = (int64_t *)read_all(p->gpu, p->gpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), len_g);
    size_t miss = peak_mismatches(pc, *len_c, pg, *len_g);
    free(pc);
    free(pg);
    return miss;
}

/*
 * Runs one signal through both backends stage by stage. Each GPU stage starts from the CPU's
 * output of the previous stage where a buffer can be injected (input, resampled, filtered).
 */
void stages_one(struct pair *p, const float *x, size_t n, double fs, const char *label,
                struct stage_totals *tot)
{
    struct ecg_error err = {0};
    struct ecg_plan plan;
    struct ecg_params params = p->model->params;
    size_t n_cpu = 0, n_gpu = 0, len_c, len_g;
    assert_int_equal(ecg_plan_init(&plan, &params, fs, &err), ECG_OK);
    printf("# %s: %zu samples at %g Hz (up %u / down %u)\n", label, n, fs, plan.up, plan.down);

    assert_int_equal(p->cpu->load(p->cpu_ctx, x, n, &err), ECG_OK);
    assert_int_equal(p->gpu->load(p->gpu_ctx, x, n, &err), ECG_OK);
    /* resample */
    float *yg, *yc = float_stage_both(p, &plan, p->cpu->resample, p->gpu->resample,
                                      ECG_BUF_RESAMPLED, "resample", &yg, &len_c);
    /* filter, from the CPU's resampled signal */
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_RESAMPLED, yc, len_c, &err), ECG_OK);
    float *fg, *fc = float_stage_both(p, &plan, p->cpu->filter, p->gpu->filter,
                                      ECG_BUF_FILTERED, "filter", &fg, &len_c);
    /* detect, from the CPU's filter response */
    size_t miss = detect_both(p, &plan, fc, len_c, &n_cpu, &n_gpu, &len_c, &len_g);
    printf("#   detect     cpu %zu beats, gpu %zu beats, %zu mismatched\n", len_c, len_g, miss);
    tot->beats += len_c;
    tot->detect_miss += miss;
    tot->records++;
    /* embed and encode: comparable beat by beat when the peaks agree */
    assert_int_equal(p->cpu->embed(p->cpu_ctx, &plan, &err), ECG_OK);
    if (p->gpu->embed(p->gpu_ctx, &plan, &err) != ECG_OK)
        fail_msg("gpu embed: %s", err.message);
    if (miss == 0) {
        float *ec = read_all(p->cpu, p->cpu_ctx, ECG_BUF_EMBED, sizeof(float), &len_c);
        float *eg = read_all(p->gpu, p->gpu_ctx, ECG_BUF_EMBED, sizeof(float), &len_g);
        assert_int_equal(len_c, len_g);
        compare_floats("embed", ec, eg, len_c, 1e-6);
        free(ec);
        free(eg);
    }
    assert_int_equal(p->cpu->encode(p->cpu_ctx, &plan, &err), ECG_OK);
    if (p->gpu->encode(p->gpu_ctx, &plan, &err) != ECG_OK)
        fail_msg("gpu encode: %s", err.message);
    if (miss == 0 && n_cpu > 0) {
        struct ecg_result rc = {0}, rg = {0};
        size_t k = n_cpu, z = p->model->arch.latent_dim;
        struct ecg_result *r[2] = {&rc, &rg};
        for (int s = 0; s < 2; s++) {
            r[s]->n_beats = k;
            r[s]->latent_dim = (uint32_t)z;
            r[s]->r_peak = malloc(k * sizeof(int64_t));
            r[s]->onset = malloc(k * sizeof(int64_t));
            r[s]->end = malloc(k * sizeof(int64_t));
            r[s]->rr_ms = malloc(k * sizeof(float));
            r[s]->likeness = malloc(k * sizeof(float));
            r[s]->crest = malloc(k * sizeof(float));
            r[s]->kept = malloc(k);
            r[s]->latent = malloc(k * z * sizeof(float));
            r[s]->score = malloc(k * sizeof(float));
            r[s]->outlier = malloc(k);
        }
        assert_int_equal(p->cpu->fetch(p->cpu_ctx, &rc, &err), ECG_OK);
        if (p->gpu->fetch(p->gpu_ctx, &rg, &err) != ECG_OK)
            fail_msg("gpu fetch: %s", err.message);
        assert_memory_equal(rc.r_peak, rg.r_peak, k * sizeof(int64_t));
        assert_memory_equal(rc.onset, rg.onset, k * sizeof(int64_t));
        assert_memory_equal(rc.end, rg.end, k * sizeof(int64_t));
        assert_memory_equal(rc.kept, rg.kept, k);
        for (size_t i = 1; i < k; i++)
            assert_true(rc.rr_ms[i] == rg.rr_ms[i]);
        /* the beats' likeness (likeness_core.h): the same bits, NaN where none compares */
        assert_memory_equal(rc.likeness, rg.likeness, k * sizeof(float));
        /* and the detector's crest factor at each beat (the verdict's too): the same bits */
        assert_memory_equal(rc.crest, rg.crest, k * sizeof(float));
        for (size_t i = 0; i < k; i++)
            assert_false(isnan(rc.crest[i]));
        double max_rel_latent = 0, max_rel_score = 0;
        size_t flag_diff = 0, kept = 0;
        for (size_t i = 0; i < k; i++) {
            if (!rc.kept[i]) {
                assert_true(isnan(rg.score[i]) && rg.outlier[i] == 0);
                continue;
            }
            kept++;
            for (size_t d = 0; d < z; d++) {
                double c = rc.latent[i * z + d], g = rg.latent[i * z + d];
                double e = fabs(g - c) / fmax(fabs(c), 0.1);
                if (e > max_rel_latent || isnan(e))
                    max_rel_latent = isnan(e) ? INFINITY : e;
                if (!(fabs(g - c) <= fmax(1e-4 * fabs(c), 1e-5)))
                    fail_msg("beat %zu latent %zu: gpu %.8g cpu %.8g", i, d, g, c);
            }
            double c = rc.score[i], g = rg.score[i];
            double e = fabs(g - c) / fmax(fabs(c), 0.1);
            if (e > max_rel_score || isnan(e))
                max_rel_score = isnan(e) ? INFINITY : e;
            if (!(fabs(g - c) <= fmax(1e-4 * fabs(c), 1e-5)))
                fail_msg("beat %zu score: gpu %.8g cpu %.8g", i, g, c);
            if (rc.outlier[i] != rg.outlier[i]) {
                flag_diff++;
                assert_true(fabs(c - p->model->calib.threshold) < 1e-4);
            }
        }
        printf("#   encode     %zu kept beats: max rel err latent %.2e score %.2e, outlier "
               "flags differing %zu\n", kept, max_rel_latent, max_rel_score, flag_diff);
        for (int s = 0; s < 2; s++) {
            free(r[s]->r_peak);
            free(r[s]->onset);
            free(r[s]->end);
            free(r[s]->rr_ms);
            free(r[s]->likeness);
            free(r[s]->crest);
            free(r[s]->kept);
            free(r[s]->latent);
            free(r[s]->score);
            free(r[s]->outlier);
        }
    }
    free(yc);
    free(yg);
    free(fc);
    free(fg);
    ecg_plan_fini(&plan);
}

static void check_detect_totals(const struct stage_totals *tot)
{
    printf("# detect totals: %zu beats over %zu signals, %zu mismatched (tie exceptions)\n",
           tot->beats, tot->records, tot->detect_miss);
    assert_true(tot->detect_miss * 2000 <= tot->beats);
}

void test_stages_records(void **state)
{
    NEED_DEVICE(state);
    struct stage_totals tot = {0};
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        read_record(records[r], &sig);
        char label[64];
        snprintf(label, sizeof label, "record %s", records[r]);
        stages_one(*state, sig.samples, sig.n, sig.fs_hz, label, &tot);
        ecg_signal_free(&sig);
    }
    check_detect_totals(&tot);
}

void test_stages_random(void **state)
{
    NEED_DEVICE(state);
    /* 499 Hz: 250/499, a branch table too large for shared memory (the global-memory kernel) */
    static const double rates[] = {360, 250, 500, 1000, 128, 200, 499};
    struct stage_totals tot = {0};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        for (int kind = 0; kind < 2; kind++) {
            size_t n = (size_t)(rates[i] * (quick() ? 60 : 600));
            float *x = random_signal(100 + i * 2 + (uint64_t)kind, rates[i], n, kind);
            char label[64];
            snprintf(label, sizeof label, "random %s seed %zu", kind ? "noise" : "ecg",
                     100 + i * 2 + (size_t)kind);
            stages_one(*state, x, n, rates[i], label, &tot);
            free(x);
        }
    }
    check_detect_totals(&tot);
}

/*
 * Short strips, the service's common request: 10 s and 30 s of every record (normalised in one
 * block on the device), and strips at 250 Hz (no resampling) of 8,192 and 8,193 samples, on
 * either side of the one-block bound, stage by stage against the CPU.
 */
void test_stages_strips(void **state)
{
    NEED_DEVICE(state);
    static const double seconds[] = {10.0, 30.0};
    struct stage_totals tot = {0};
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        read_record(records[r], &sig);
        for (size_t s = 0; s < 2; s++) {
            size_t n = (size_t)(seconds[s] * sig.fs_hz);
            size_t start = (size_t)((double)(37 * (r + 1) + 11 * s) * sig.fs_hz) % (sig.n - n);
            char label[64];
            snprintf(label, sizeof label, "record %s, %g s strip", records[r], seconds[s]);
            stages_one(*state, sig.samples + start, n, sig.fs_hz, label, &tot);
        }
        ecg_signal_free(&sig);
    }
    static const size_t edge[] = {8192, 8193};
    for (size_t i = 0; i < 2; i++) {
        float *x = random_signal(300 + i, 250.0, edge[i], 0);
        char label[64];
        snprintf(label, sizeof label, "random ecg, %zu samples at 250 Hz", edge[i]);
        stages_one(*state, x, edge[i], 250.0, label, &tot);
        free(x);
    }
    check_detect_totals(&tot);
}

/*
 * The detector's blocked decision pass (detect.c: blocks of CPU_DETECT_BLOCK_S, each with its
 * own warm-up, then the boundary merge) on signals of many blocks, whose length is no multiple
 * of a block: with the default parameters, and with a short NMS window and a long refractory
 * period, so that candidates come closer than the refractory period and the merge has
 * conflicts to resolve. Both backends detect from the same filter response; the peaks must be
 * identical (no tie exception is needed on these signals).
 */
static size_t detect_pair(struct pair *p, const float *x, size_t n, double fs,
                          const struct ecg_params *params, const char *label, size_t *beats)
{
    struct ecg_error err = {0};
    struct ecg_plan plan;
    size_t n_cpu = 0, n_gpu = 0, len_c, len_g;
    assert_int_equal(ecg_plan_init(&plan, params, fs, &err), ECG_OK);
    assert_int_equal(p->cpu->load(p->cpu_ctx, x, n, &err), ECG_OK);
    assert_int_equal(p->gpu->load(p->gpu_ctx, x, n, &err), ECG_OK);
    assert_int_equal(p->cpu->resample(p->cpu_ctx, &plan, &err), ECG_OK);
    float *yc = read_all(p->cpu, p->cpu_ctx, ECG_BUF_RESAMPLED, sizeof(float), &len_c);
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_RESAMPLED, yc, len_c, &err), ECG_OK);
    assert_int_equal(p->cpu->filter(p->cpu_ctx, &plan, &err), ECG_OK);
    float *fc = read_all(p->cpu, p->cpu_ctx, ECG_BUF_FILTERED, sizeof(float), &len_c);
    size_t miss = detect_both(p, &plan, fc, len_c, &n_cpu, &n_gpu, &len_c, &len_g);
    printf("# %s: %zu samples at %g Hz, %zu decision blocks: cpu %zu beats, gpu %zu beats, "
           "%zu mismatched\n", label, n, fs,
           cpu_decide_blocks(&plan, ecg_plan_resampled_len(&plan, n)), len_c, len_g, miss);
    *beats += n_cpu;
    free(yc);
    free(fc);
    ecg_plan_fini(&plan);
    return miss;
}

void test_detect_blocks(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    size_t miss = 0, beats = 0;
    for (int variant = 0; variant < 2; variant++) {
        struct ecg_params params = p->model->params;
        if (variant == 1) {
            params.nms_window_s = 0.1;
            params.refractory_s = 0.3;
        }
        const char *kind = variant ? "short NMS window, long refractory" : "default";
        char label[128];
        for (size_t r = 0; r < (quick() ? 1 : 4); r++) {
            const char *rec = (const char *[]){"203", "207", "108", "201"}[r];
            struct ecg_signal sig = {0};
            read_record(rec, &sig);
            snprintf(label, sizeof label, "blocks: record %s, %s", rec, kind);
            miss += detect_pair(p, sig.samples, sig.n, sig.fs_hz, &params, label, &beats);
            ecg_signal_free(&sig);
        }
        size_t n = (size_t)(500.0 * (quick() ? 150.3 : 1234.5));
        float *x = random_signal(300 + (uint64_t)variant, 500.0, n, 0);
        snprintf(label, sizeof label, "blocks: random ecg, %s", kind);
        miss += detect_pair(p, x, n, 500.0, &params, label, &beats);
        free(x);
    }
    printf("# blocks: %zu beats, %zu mismatched\n", beats, miss);
    assert_true(beats > 0);
    assert_int_equal(miss, 0);
}

/* A VAE path other than the default (the warp-per-beat kernel), forced by ECG_CUDA_VAE, on
 * two records against the CPU. */
static void vae_forced(void **state, const char *path, size_t first)
{
    NEED_DEVICE(state);
    struct stage_totals tot = {0};
    setenv("ECG_CUDA_VAE", path, 1);
    for (size_t r = 0; r < 2; r++) {
        struct ecg_signal sig = {0};
        char label[64];
        read_record(records[(first + r) % n_records()], &sig);
        snprintf(label, sizeof label, "record %s, %s VAE", records[(first + r) % n_records()],
                 path);
        stages_one(*state, sig.samples, sig.n, sig.fs_hz, label, &tot);
        ecg_signal_free(&sig);
    }
    unsetenv("ECG_CUDA_VAE");
    check_detect_totals(&tot);
}

/* The layer-by-layer cuDNN path. */
void test_vae_cudnn(void **state)
{
    vae_forced(state, "cudnn", 4);
}

/* The block-per-beat fused kernel (shared memory), the path of other architectures. */
void test_vae_block(void **state)
{
    vae_forced(state, "block", 6);
}

/* The cuFFT path, forced, against the CPU's FFTW path on a record and a long Ricker (each then
 * followed by the noise-aware band, as the filter stage is). */
void test_filter_fft(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    read_record("208", &sig);
    struct ecg_params params = ecg_params_default();
    for (int variant = 0; variant < 2; variant++) {
        if (variant == 1)
            params.ricker_points_s = 1.0; /* 251 taps: cpu_filter takes FFTW itself */
        struct ecg_plan plan;
        assert_int_equal(ecg_plan_init(&plan, &params, sig.fs_hz, &err), ECG_OK);
        size_t n_a = ecg_plan_resampled_len(&plan, sig.n);
        float *y = malloc(n_a * sizeof *y), *fc = malloc(n_a * sizeof *fc), *fg;
        assert_int_equal(cpu_resample(&plan, sig.samples, sig.n, y, &err), ECG_OK);
        assert_int_equal(cpu_filter_with(&plan, y, n_a, fc, CPU_FILTER_FFT, &err), ECG_OK);
        /* the filter stage ends with the detector's noise-aware band on both backends */
        double *work = malloc(cpu_noise_band_work(&plan, n_a));
        assert_non_null(work);
        assert_int_equal(cpu_noise_band(&plan, y, fc, n_a, work, &err), ECG_OK);
        free(work);
        setenv("ECG_CUDA_FILTER", "fft", 1);
        assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_RESAMPLED, y, n_a, &err), ECG_OK);
        enum ecg_status st = p->gpu->filter(p->gpu_ctx, &plan, &err);
        unsetenv("ECG_CUDA_FILTER");
        if (st != ECG_OK)
            fail_msg("gpu fft filter: %s", err.message);
        size_t len = 0;
        fg = read_all(p->gpu, p->gpu_ctx, ECG_BUF_FILTERED, sizeof(float), &len);
        assert_int_equal(len, n_a);
        printf("# cuFFT filter, %zu taps:\n", plan.ricker_len);
        compare_floats("filter fft", fc, fg, n_a, 2e-5);
        free(y);
        free(fc);
        free(fg);
        ecg_plan_fini(&plan);
    }
    ecg_signal_free(&sig);
}
