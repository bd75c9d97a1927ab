/*
 * test_gpu_parity.c - the CUDA backend against the CPU reference (the oracle), stage by stage
 * and end to end, on the 22 shared MIT-BIH records and on random signals with fixed seeds.
 *
 * Skips every test, visibly, where the build has no CUDA backend or the machine no device.
 * Data: ECG_GPU_DATA (a directory holding mitdb/) overrides ECG_SHARED_DATA, so that a copy of
 * the records can travel to a GPU machine. ECG_GPU_QUICK=1 runs 2 records instead of 22 (for
 * compute-sanitizer, which slows kernels down a hundredfold).
 *
 * Tolerances (what the CUDA backend promises; see the gpu/ sources):
 *   CSV, raw, .npy, EDF parsing   bit-identical values
 *   resample, filter (direct)     |gpu - cpu| <= 1e-6 max|cpu|; bit-identical is expected and
 *                                 the count of differing values is printed
 *   filter (FFT, forced)          |gpu - cpu| <= 2e-5 max|cpu|
 *   detect (same inputs)          identical peaks, except ties caused by a 1-ulp difference of
 *                                 the feature (counted; at most 1 in 2000 beats); none at all
 *                                 in test_detect_blocks (the blocked decision pass and its
 *                                 boundary merge, with default and merge-heavy parameters)
 *   segment/embed                 identical table columns, embedding within 1e-6 abs
 *   latent, score                 |gpu - cpu| <= max(1e-4 |cpu|, 1e-5); outlier flags equal
 *                                 except where the score is within 1e-4 of the threshold
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <edflib.h>

#include "gpu_pair.h"
#include "reader_fixtures.h"

#include "backend.h"
#include "cpu/cpu.h"
#include "ecg.h"
#include "model.h"

static const char *const records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
                                      "118", "119", "122", "124", "201", "203", "205", "207",
                                      "208", "209", "215", "220", "223", "230"};
#define N_RECORDS (sizeof records / sizeof records[0])

/* ---------------------------------------------------------------- fixtures */

/* A model with random weights and a fixed calibration (the network, not its training, is
 * under test). */
static struct ecg_model *random_model(uint64_t seed)
{
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_model *model = ecg_model_create(&arch, &params, &err);
    assert_non_null(model);
    srand((unsigned)seed);
    for (size_t i = 0; i < model->layout.n_weights; i++)
        model->weights[i] = (float)(((double)rand() / RAND_MAX - 0.5) * 0.8);
    for (int l = 0; l < 3; l++)
        model->weights[model->layout.enc_alpha[l]] = 1.0f + 0.1f * (float)l;
    for (int l = 0; l < 2; l++)
        model->weights[model->layout.dec_alpha[l]] = 0.9f;
    model->calib.rr_window = 4;
    model->calib.rel_center = 0.2;
    model->calib.rel_scale = 0.5;
    model->calib.recon_center = -2.0;
    model->calib.recon_scale = 0.7;
    model->calib.rr_center = 0.0;
    model->calib.rr_scale = 0.1;
    model->calib.rr_weight = 1.0;
    model->calib.threshold = 1.5;
    return model;
}

static int setup(void **state)
{
    *state = pair_open(ecg_cuda_backend_ops() ? random_model(7) : NULL);
    return 0;
}

static bool quick(void)
{
    const char *q = getenv("ECG_GPU_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

static size_t n_records(void)
{
    return quick() ? 2 : N_RECORDS;
}

static void record_path(const char *rec, char *path, size_t cap)
{
    const char *dir = getenv("ECG_GPU_DATA");
    snprintf(path, cap, "%s/mitdb/%s", dir && *dir ? dir : ECG_SHARED_DATA, rec);
}

static void read_record(const char *rec, struct ecg_signal *sig)
{
    char path[512];
    struct ecg_error err = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    record_path(rec, path, sizeof path);
    enum ecg_status st = ecg_read_file(path, &opts, sig, &err);
    if (st != ECG_OK)
        fail_msg("%s: %s", path, err.message);
}

/* A synthetic ECG: Gaussian QRS-like pulses with jittered RR, a T wave, baseline wander and
 * noise; or (kind 1) white noise only. */
static float *random_signal(uint64_t seed, double fs, size_t n, int kind)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    srand((unsigned)seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.05 * ((double)rand() / RAND_MAX - 0.5));
    if (kind == 1)
        return x;
    double t = 0.3;
    while (t * fs < (double)n) {
        double amp = 0.8 + 0.6 * (double)rand() / RAND_MAX;
        for (long k = -(long)(0.05 * fs); k <= (long)(0.05 * fs); k++) {
            long i = (long)(t * fs) + k;
            if (i >= 0 && (size_t)i < n)
                x[i] += (float)(amp * exp(-0.5 * pow(k / (0.012 * fs), 2)));
        }
        for (long k = -(long)(0.12 * fs); k <= (long)(0.12 * fs); k++) {
            long i = (long)((t + 0.25) * fs) + k;
            if (i >= 0 && (size_t)i < n)
                x[i] += (float)(0.25 * exp(-0.5 * pow(k / (0.05 * fs), 2)));
        }
        t += 0.6 + 0.5 * (double)rand() / RAND_MAX;
    }
    for (size_t i = 0; i < n; i++)
        x[i] += (float)(0.2 * sin(2 * M_PI * 0.3 * (double)i / fs));
    return x;
}

/* ---------------------------------------------------------------- comparisons */

static float *read_all(const struct ecg_backend_ops *ops, void *ctx, enum ecg_stage_buf which,
                       size_t elem, size_t *n)
{
    struct ecg_error err = {0};
    size_t len = 0;
    assert_int_equal(ops->read_buf(ctx, which, NULL, 0, &len, &err), ECG_OK);
    void *buf = malloc((len ? len : 1) * elem);
    assert_non_null(buf);
    assert_int_equal(ops->read_buf(ctx, which, buf, len, n, &err), ECG_OK);
    assert_int_equal(*n, len);
    return buf;
}

/* Compares two float arrays: max |a - b|, how many differ in their bits; fails past tol. */
static void compare_floats(const char *what, const float *cpu, const float *gpu, size_t n,
                           double rel_tol)
{
    double max_ref = 0, max_diff = 0;
    size_t bits_differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(cpu[i]) > max_ref)
            max_ref = fabs(cpu[i]);
        double d = fabs((double)cpu[i] - (double)gpu[i]);
        if (d > max_diff || isnan(d))
            max_diff = isnan(d) ? INFINITY : d;
        if (memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0)
            bits_differ++;
    }
    printf("#   %-10s n=%zu max|diff|=%.3g (max|ref| %.3g) bit-identical %zu/%zu\n", what, n,
           max_diff, max_ref, n - bits_differ, n);
    if (!(max_diff <= rel_tol * (max_ref > 0 ? max_ref : 1)))
        fail_msg("%s: max |gpu - cpu| = %g exceeds %g x %g", what, max_diff, rel_tol, max_ref);
}

/* Beats detected by one backend and not the other (both ascending). */
static size_t peak_mismatches(const int64_t *a, size_t na, const int64_t *b, size_t nb)
{
    size_t i = 0, j = 0, miss = 0;
    while (i < na || j < nb) {
        if (i < na && j < nb && a[i] == b[j]) {
            i++, j++;
        } else if (j >= nb || (i < na && a[i] < b[j])) {
            miss++, i++;
        } else {
            miss++, j++;
        }
    }
    return miss;
}

/* ---------------------------------------------------------------- stage by stage */

struct stage_totals {
    size_t beats, detect_miss, records;
};

/*
 * Runs one signal through both backends stage by stage. Each GPU stage starts from the CPU's
 * output of the previous stage where a buffer can be injected (input, resampled, filtered).
 */
static void stages_one(struct pair *p, const float *x, size_t n, double fs, const char *label,
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
    assert_int_equal(p->cpu->resample(p->cpu_ctx, &plan, &err), ECG_OK);
    if (p->gpu->resample(p->gpu_ctx, &plan, &err) != ECG_OK)
        fail_msg("gpu resample: %s", err.message);
    float *yc = read_all(p->cpu, p->cpu_ctx, ECG_BUF_RESAMPLED, sizeof(float), &len_c);
    float *yg = read_all(p->gpu, p->gpu_ctx, ECG_BUF_RESAMPLED, sizeof(float), &len_g);
    assert_int_equal(len_c, len_g);
    compare_floats("resample", yc, yg, len_c, 1e-6);
    /* filter, from the CPU's resampled signal */
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_RESAMPLED, yc, len_c, &err), ECG_OK);
    assert_int_equal(p->cpu->filter(p->cpu_ctx, &plan, &err), ECG_OK);
    if (p->gpu->filter(p->gpu_ctx, &plan, &err) != ECG_OK)
        fail_msg("gpu filter: %s", err.message);
    float *fc = read_all(p->cpu, p->cpu_ctx, ECG_BUF_FILTERED, sizeof(float), &len_c);
    float *fg = read_all(p->gpu, p->gpu_ctx, ECG_BUF_FILTERED, sizeof(float), &len_g);
    assert_int_equal(len_c, len_g);
    compare_floats("filter", fc, fg, len_c, 1e-6);
    /* detect, from the CPU's filter response */
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_FILTERED, fc, len_c, &err), ECG_OK);
    assert_int_equal(p->cpu->detect(p->cpu_ctx, &plan, &n_cpu, &err), ECG_OK);
    if (p->gpu->detect(p->gpu_ctx, &plan, &n_gpu, &err) != ECG_OK)
        fail_msg("gpu detect: %s", err.message);
    int64_t *pc = (int64_t *)read_all(p->cpu, p->cpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), &len_c);
    int64_t *pg = (int64_t *)read_all(p->gpu, p->gpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), &len_g);
    size_t miss = peak_mismatches(pc, len_c, pg, len_g);
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
    free(pc);
    free(pg);
    ecg_plan_fini(&plan);
}

static void check_detect_totals(const struct stage_totals *tot)
{
    printf("# detect totals: %zu beats over %zu signals, %zu mismatched (tie exceptions)\n",
           tot->beats, tot->records, tot->detect_miss);
    assert_true(tot->detect_miss * 2000 <= tot->beats);
}

static void test_stages_records(void **state)
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

static void test_stages_random(void **state)
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
static void test_stages_strips(void **state)
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
    assert_int_equal(p->gpu->write_buf(p->gpu_ctx, ECG_BUF_FILTERED, fc, len_c, &err), ECG_OK);
    assert_int_equal(p->cpu->detect(p->cpu_ctx, &plan, &n_cpu, &err), ECG_OK);
    if (p->gpu->detect(p->gpu_ctx, &plan, &n_gpu, &err) != ECG_OK)
        fail_msg("gpu detect: %s", err.message);
    int64_t *pc = (int64_t *)read_all(p->cpu, p->cpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), &len_c);
    int64_t *pg = (int64_t *)read_all(p->gpu, p->gpu_ctx, ECG_BUF_PEAKS, sizeof(int64_t), &len_g);
    size_t miss = peak_mismatches(pc, len_c, pg, len_g);
    printf("# %s: %zu samples at %g Hz, %zu decision blocks: cpu %zu beats, gpu %zu beats, "
           "%zu mismatched\n", label, n, fs,
           cpu_decide_blocks(&plan, ecg_plan_resampled_len(&plan, n)), len_c, len_g, miss);
    *beats += n_cpu;
    free(yc);
    free(fc);
    free(pc);
    free(pg);
    ecg_plan_fini(&plan);
    return miss;
}

static void test_detect_blocks(void **state)
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
static void test_vae_cudnn(void **state)
{
    vae_forced(state, "cudnn", 4);
}

/* The block-per-beat fused kernel (shared memory), the path of other architectures. */
static void test_vae_block(void **state)
{
    vae_forced(state, "block", 6);
}

/* The cuFFT path, forced, against the CPU's FFTW path on a record and a long Ricker. */
static void test_filter_fft(void **state)
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

/* ---------------------------------------------------------------- end to end (engine) */

static struct ecg_engine *engine_of(enum ecg_backend_kind kind, const struct ecg_model *model)
{
    struct ecg_engine_config config = {.backend = kind, .model = model, .workers = 2,
                                       .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

static void compare_results(const struct ecg_result *c, const struct ecg_result *g,
                            double threshold, size_t *mismatch)
{
    size_t miss = peak_mismatches(c->r_peak, c->n_beats, g->r_peak, g->n_beats);
    *mismatch += miss;
    if (miss)
        return;
    size_t k = c->n_beats, z = c->latent_dim;
    assert_memory_equal(c->onset, g->onset, k * sizeof(int64_t));
    assert_memory_equal(c->end, g->end, k * sizeof(int64_t));
    assert_memory_equal(c->kept, g->kept, k);
    for (size_t i = 0; i < k; i++) {
        if (!c->kept[i] || !c->score)
            continue;
        for (size_t d = 0; d < z; d++) {
            double a = c->latent[i * z + d], b = g->latent[i * z + d];
            if (!(fabs(a - b) <= fmax(1e-4 * fabs(a), 1e-5)))
                fail_msg("beat %zu latent %zu: gpu %.8g cpu %.8g", i, d, b, a);
        }
        if (!(fabs(c->score[i] - g->score[i]) <= fmax(1e-4 * fabs(c->score[i]), 1e-5)))
            fail_msg("beat %zu score: gpu %.8g cpu %.8g", i, g->score[i], c->score[i]);
        if (c->outlier[i] != g->outlier[i])
            assert_true(fabs(c->score[i] - threshold) < 1e-4);
    }
}

static void test_engine_records(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_engine *cpu = engine_of(ECG_BACKEND_CPU, p->model);
    struct ecg_engine *gpu = engine_of(ECG_BACKEND_CUDA, p->model);
    assert_string_equal(ecg_engine_backend(gpu), "cuda");
    size_t beats = 0, miss = 0;
    for (size_t r = 0; r < n_records(); r++) {
        struct ecg_signal sig = {0};
        struct ecg_result *rc = NULL, *rg = NULL;
        struct ecg_error err = {0};
        read_record(records[r], &sig);
        assert_int_equal(ecg_engine_analyze(cpu, &sig, &rc, &err), ECG_OK);
        if (ecg_engine_analyze(gpu, &sig, &rg, &err) != ECG_OK)
            fail_msg("record %s on cuda: %s", records[r], err.message);
        size_t before = miss;
        compare_results(rc, rg, p->model->calib.threshold, &miss);
        printf("# engine record %s: %zu beats (cpu) %zu (gpu), %zu mismatched; cpu %.1f ms, "
               "gpu %.1f ms\n", records[r], rc->n_beats, rg->n_beats, miss - before,
               rc->timing.total_ms, rg->timing.total_ms);
        beats += rc->n_beats;
        ecg_result_free(rc);
        ecg_result_free(rg);
        ecg_signal_free(&sig);
    }
    printf("# engine totals: %zu beats, %zu mismatched\n", beats, miss);
    assert_true(miss * 2000 <= beats);
    ecg_engine_destroy(cpu);
    ecg_engine_destroy(gpu);
}

/* Several threads share one CUDA engine (one stream per worker context): each result must
 * equal the CPU's, whatever runs beside it. */
struct concurrent_job {
    struct ecg_engine *engine;
    const struct ecg_signal *sig;
    const struct ecg_result *expect;
    int rounds;
    size_t mismatched;
    int failures;
};

static void *concurrent_worker(void *arg)
{
    struct concurrent_job *job = arg;
    for (int r = 0; r < job->rounds; r++) {
        struct ecg_result *res = NULL;
        struct ecg_error err = {0};
        if (ecg_engine_analyze(job->engine, job->sig, &res, &err) != ECG_OK) {
            job->failures++;
            continue;
        }
        if (res->n_beats != job->expect->n_beats ||
            memcmp(res->r_peak, job->expect->r_peak, res->n_beats * sizeof(int64_t)) != 0 ||
            memcmp(res->score, job->expect->score, res->n_beats * sizeof(float)) != 0)
            job->mismatched++;
        ecg_result_free(res);
    }
    return NULL;
}

/* Runs the jobs on threads of their own; frees each job's expected result and signal; asserts
 * that every analysis succeeded with the expected result. what labels the printed line. */
static void run_concurrent(struct concurrent_job *jobs, int n, struct ecg_result **expect,
                           struct ecg_signal *sig, const char *what)
{
    pthread_t tid[8];
    size_t mismatched = 0;
    int failures = 0;
    assert_true(n <= 8);
    for (int t = 0; t < n; t++)
        assert_int_equal(pthread_create(&tid[t], NULL, concurrent_worker, &jobs[t]), 0);
    for (int t = 0; t < n; t++) {
        pthread_join(tid[t], NULL);
        mismatched += jobs[t].mismatched;
        failures += jobs[t].failures;
        ecg_result_free(expect[t]);
        ecg_signal_free(&sig[t]);
    }
    printf("# %s: %d threads x %d analyses on %s: %d failed, %zu differed\n", what, n,
           jobs[0].rounds, ecg_engine_device(jobs[0].engine), failures, mismatched);
    assert_int_equal(failures, 0);
    assert_int_equal(mismatched, 0);
}

static void test_engine_concurrent(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    enum { THREADS = 4 };
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = p->model,
                                       .workers = THREADS, .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *gpu = ecg_engine_create(&config, &err);
    if (!gpu)
        fail_msg("engine: %s", err.message);
    struct ecg_signal sig[THREADS];
    struct ecg_result *expect[THREADS];
    struct concurrent_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&sig[t], 0, sizeof sig[t]);
        read_record(records[t * 5], &sig[t]);
        /* the reference: the same engine, alone (equal to the CPU per test_engine_records) */
        assert_int_equal(ecg_engine_analyze(gpu, &sig[t], &expect[t], &err), ECG_OK);
        jobs[t] = (struct concurrent_job){gpu, &sig[t], expect[t], quick() ? 2 : 6, 0, 0};
    }
    run_concurrent(jobs, THREADS, expect, sig, "concurrent, one engine");
    ecg_engine_destroy(gpu);
}

/*
 * Several GPUs (CUDA_VISIBLE_DEVICES decides which): an engine on every visible device spreads
 * its workers over them; analyses running concurrently on all of them, and an engine on the
 * second device alone, must give the first device's results exactly. Skips with one device.
 */
static void test_multi_device(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    enum { THREADS = 4 };
    struct ecg_error err = {0};
    struct ecg_engine_config one = {.backend = ECG_BACKEND_CUDA, .model = p->model,
                                    .workers = 1, .device = 0};
    struct ecg_engine_config second = one, all = one;
    second.device = 1;
    all.device = -1;
    all.workers = THREADS;
    struct ecg_engine *e1 = ecg_engine_create(&second, &err);
    if (!e1) {
        printf("# SKIP: one CUDA device visible (%s)\n", err.message);
        skip();
    }
    struct ecg_engine *e0 = ecg_engine_create(&one, &err);
    struct ecg_engine *e_all = ecg_engine_create(&all, &err);
    if (!e0 || !e_all)
        fail_msg("engine: %s", err.message);
    printf("# devices: %s | first %s | second %s\n", ecg_engine_device(e_all),
           ecg_engine_device(e0), ecg_engine_device(e1));
    assert_non_null(strstr(ecg_engine_device(e_all), " x"));
    struct ecg_signal sig[THREADS];
    struct ecg_result *expect[THREADS];
    struct concurrent_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        struct ecg_result *r1 = NULL;
        memset(&sig[t], 0, sizeof sig[t]);
        read_record(records[t * 5 + 1], &sig[t]);
        assert_int_equal(ecg_engine_analyze(e0, &sig[t], &expect[t], &err), ECG_OK);
        assert_int_equal(ecg_engine_analyze(e1, &sig[t], &r1, &err), ECG_OK);
        assert_int_equal(r1->n_beats, expect[t]->n_beats);
        assert_memory_equal(r1->r_peak, expect[t]->r_peak, r1->n_beats * sizeof(int64_t));
        assert_memory_equal(r1->latent, expect[t]->latent,
                            r1->n_beats * r1->latent_dim * sizeof(float));
        assert_memory_equal(r1->score, expect[t]->score, r1->n_beats * sizeof(float));
        ecg_result_free(r1);
        jobs[t] = (struct concurrent_job){e_all, &sig[t], expect[t], quick() ? 2 : 6, 0, 0};
    }
    run_concurrent(jobs, THREADS, expect, sig, "multi-device");
    ecg_engine_destroy(e_all);
    ecg_engine_destroy(e1);
    ecg_engine_destroy(e0);
}

/* ---------------------------------------------------------------- readers on the device */

/* Loads bytes on the GPU and on the host; the samples must be bit-identical. */
static void bytes_parity(struct pair *p, const char *buf, size_t len,
                         const struct ecg_read_opts *opts, const char *what, bool expect_device)
{
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    size_t n = 0, got = 0;
    double fs = 0;
    char lead[32] = "";
    if (ecg_read_memory(buf, len, opts, &sig, &err) != ECG_OK)
        fail_msg("%s: the host reader refused it: %s", what, err.message);
    enum ecg_status st = p->gpu->load_bytes(p->gpu_ctx, buf, len, opts, &n, &fs, lead, &err);
    if (st == ECG_ERR_UNSUPPORTED) {
        printf("#   %s: handed to the host reader\n", what);
        if (expect_device)
            fail_msg("%s: the device parser refused a clean input", what);
        ecg_signal_free(&sig);
        return;
    }
    if (st != ECG_OK)
        fail_msg("%s: %s", what, err.message);
    assert_int_equal(n, sig.n);
    assert_true(fs == sig.fs_hz);
    assert_string_equal(lead, sig.lead);
    float *v = read_all(p->gpu, p->gpu_ctx, ECG_BUF_INPUT, sizeof(float), &got);
    assert_int_equal(got, sig.n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&v[i], &sig.samples[i], sizeof(float)) != 0) {
            if (differ < 5)
                printf("#   sample %zu: gpu %a host %a\n", i, v[i], sig.samples[i]);
            differ++;
        }
    printf("#   %s: %zu samples, %zu differ in their bits\n", what, n, differ);
    assert_int_equal(differ, 0);
    free(v);
    ecg_signal_free(&sig);
}

/* bytes_parity() of a body the device must convert, from a copy in the backend's pinned host
 * memory when pinned (the DMA path, and a span from an offset of it), else from body itself. */
static void bytes_parity_from(struct pair *p, const unsigned char *body, size_t len,
                              const struct ecg_read_opts *opts, const char *what, bool pinned)
{
    void *copy = NULL;
    if (pinned && p->gpu->host_alloc) {
        copy = p->gpu->host_alloc(p->gpu_state, len);
        assert_non_null(copy);
        memcpy(copy, body, len);
    }
    bytes_parity(p, (const char *)(copy ? copy : body), len, opts, what, true);
    if (copy)
        p->gpu->host_free(p->gpu_state, copy);
}

/* Random decimal tokens of every shape the grammar allows, hard ones included. */
static void random_token(char *out, size_t cap, unsigned *seed)
{
    int shape = rand_r(seed) % 10;
    char digits[64];
    int nd = 1 + rand_r(seed) % (shape == 9 ? 30 : 9); /* < 10^38: in float range */
    for (int i = 0; i < nd; i++)
        digits[i] = (char)('0' + rand_r(seed) % 10);
    digits[nd] = 0;
    int point = rand_r(seed) % (nd + 1);
    const char *sign = rand_r(seed) % 3 == 0 ? "-" : (rand_r(seed) % 7 == 0 ? "+" : "");
    if (shape <= 5) {
        snprintf(out, cap, "%s%.*s.%s", sign, point, digits, digits + point);
    } else if (shape <= 7) {
        snprintf(out, cap, "%s%.*s.%se%d", sign, point ? point : 1, digits,
                 digits + (point ? point : 1), rand_r(seed) % 60 - 30);
    } else if (shape == 8) {
        float f = (float)rand_r(seed) / (float)RAND_MAX * 10.0f - 5.0f;
        snprintf(out, cap, "%.9g", (double)f);
    } else {
        snprintf(out, cap, "%s%s", sign, digits);
    }
}

static void test_csv_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
    unsigned seed = 1234;
    size_t lines = quick() ? 20000 : 400000;
    struct ecg_buf text = {0};
    char tok[128];
    /* one column */
    for (size_t i = 0; i < lines; i++) {
        random_token(tok, sizeof tok, &seed);
        ecg_buf_printf(&text, "%s\n", tok);
    }
    assert_false(text.failed);
    bytes_parity(p, text.data, text.len, &opts, "csv random tokens", true);
    ecg_buf_fini(&text);
    /* three columns, CRLF, a header, blank lines, spaces; select by name. Comma-separated,
     * and a first column that is no time axis: semicolons (which may come with decimal
     * commas) and a likely time column go to the host reader by design (cuda_read.cu). */
    ecg_buf_puts(&text, "\xef\xbb\xbf resp , MLII ,V5\r\n");
    for (size_t i = 0; i < lines / 4; i++) {
        random_token(tok, sizeof tok, &seed);
        ecg_buf_printf(&text, "%g , %s ,1.5\r\n", (double)(i % 7) * 0.25, tok);
        if (i % 1000 == 7)
            ecg_buf_puts(&text, "  \r\n");
    }
    opts.lead = "mlii";
    bytes_parity(p, text.data, text.len, &opts, "csv header/blank/crlf", true);
    ecg_buf_fini(&text);
    /* the shared excerpt */
    {
        char path[512];
        snprintf(path, sizeof path, "%s/mitdb_100s.csv", ECG_TEST_DATA);
        FILE *f = fopen(path, "rb");
        if (f) {
            char chunk[65536];
            size_t got;
            while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
                ecg_buf_append(&text, chunk, got);
            fclose(f);
            opts.lead = "V1";
            bytes_parity(p, text.data, text.len, &opts, "mitdb_100s.csv lead V1", true);
            opts.lead = NULL;
            bytes_parity(p, text.data, text.len, &opts, "mitdb_100s.csv lead 0", true);
            ecg_buf_fini(&text);
        }
    }
    /* bad inputs go back to the host, which reports them */
    static const char *const bad[] = {"1.0\n2.0\nabc\n", "1.0\nnan\n", "1e40\n1\n", "1,2\n3\n",
                                      "1\n\x01\n"};
    opts.lead = "1";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = 0;
        double fs = 0;
        char lead[32];
        struct ecg_error err = {0};
        enum ecg_status st =
            p->gpu->load_bytes(p->gpu_ctx, bad[i], strlen(bad[i]), &opts, &n, &fs, lead, &err);
        assert_int_equal(st, ECG_ERR_UNSUPPORTED);
    }
}

static void test_raw_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    size_t n = 100003;
    unsigned seed = 99;
    unsigned char *buf = malloc(n * 8);
    assert_non_null(buf);
    for (size_t i = 0; i < n * 8; i++)
        buf[i] = (unsigned char)rand_r(&seed);
    /* float32 and float64 need finite values: build them */
    float *f = (float *)buf;
    for (size_t i = 0; i < n; i++)
        f[i] = (float)rand_r(&seed) / (float)RAND_MAX * 20.0f - 10.0f;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_F32, .fs_hz = 250};
    bytes_parity(p, (const char *)buf, n * 4, &opts, "f32", true);
    double *d = (double *)buf;
    for (size_t i = 0; i < n; i++)
        d[i] = ((double)rand_r(&seed) / RAND_MAX - 0.5) * 1e3;
    opts.format = ECG_FORMAT_F64;
    bytes_parity(p, (const char *)buf, n * 8, &opts, "f64", true);
    opts.format = ECG_FORMAT_I16;
    bytes_parity(p, (const char *)buf, n * 2, &opts, "i16", true);
    f[17] = NAN;
    opts.format = ECG_FORMAT_F32;
    size_t got = 0;
    double fs;
    char lead[32];
    struct ecg_error err = {0};
    assert_int_equal(p->gpu->load_bytes(p->gpu_ctx, buf, n * 4, &opts, &got, &fs, lead, &err),
                     ECG_ERR_UNSUPPORTED);
    free(buf);
}

/* ---------------------------------------------------------------- .npy on the device */

/* One .npy array of the tests. */
struct npy_case {
    const char *what;
    const char *descr;           /* "<f4", ">f8", "|u1"... */
    size_t leads;                /* 0: 1-D (n,); else 2-D (n, leads) */
    bool fortran;
    const char *lead;            /* opts.lead */
    int major;                   /* header version 1, 2 or 3 */
    size_t misalign;             /* offset of the data mod 64 (numpy writes 0) */
    enum ecg_format format;      /* NPY, or AUTO for the sniffer */
    bool pinned;                 /* in the backend's host memory (one DMA from an offset) */
};

/* Random bits of one element: any for integers; for floats finite values of every class,
 * float64 ones chosen to stress the cast to float (rounding, subnormal results, underflow to
 * zero, -0, values just above FLT_MAX that round down to it). */
static uint64_t npy_random_bits(char kind, size_t size, unsigned *seed)
{
    uint64_t u = (uint64_t)rand_r(seed) << 42 ^ (uint64_t)rand_r(seed) << 21 ^
                 (uint64_t)rand_r(seed);
    if (kind != 'f')
        return u;
    if (size == 4) {
        uint32_t b = (uint32_t)u;
        if ((b >> 23 & 0xffu) == 0xffu)
            b ^= 1u << 23; /* NaN/Inf -> a finite value */
        return b;
    }
    static const double special[] = {3.4028235e38, -3.4028235e38, 3.4028234663852886e38, 1e-40,
                                     -1e-42,       1e-50,         -0.0,                  0.0,
                                     1.0000000596046448, 1.0000001788139343};
    int pick = rand_r(seed) % 40;
    double d;
    if (pick < (int)(sizeof special / sizeof special[0])) {
        d = special[pick];
    } else {
        /* mantissa 1.xxx with 52 random bits, exponent in [-160, 126]: float normals,
         * subnormals and zeros, never past FLT_MAX */
        double m = 1.0 + (double)(u & ((1ull << 52) - 1)) / 4503599627370496.0;
        d = ldexp(m, rand_r(seed) % 287 - 160) * (rand_r(seed) & 1 ? -1 : 1);
    }
    memcpy(&u, &d, sizeof u);
    return u;
}

/* The .npy body of case c with n rows of random elements (seeded); *len its length. */
static unsigned char *npy_build(const struct npy_case *c, size_t n, unsigned seed, size_t *len)
{
    char dict[256], shape[64];
    if (c->leads)
        snprintf(shape, sizeof shape, "(%zu, %zu)", n, c->leads);
    else
        snprintf(shape, sizeof shape, "(%zu,)", n);
    int dict_len =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                 c->descr, c->fortran ? "True" : "False", shape);
    assert_true(dict_len > 0 && (size_t)dict_len < sizeof dict);
    size_t pre = c->major == 1 ? 10 : 12, header_len = (size_t)dict_len + 1; /* + '\n' */
    while ((pre + header_len) % 64 != c->misalign)
        header_len++;
    size_t size = (size_t)(c->descr[2] - '0'), elements = n * (c->leads ? c->leads : 1);
    *len = pre + header_len + elements * size;
    unsigned char *b = malloc(*len);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)c->major;
    b[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        b[8 + k] = (unsigned char)(header_len >> (8 * k));
    memset(b + pre, ' ', header_len);
    memcpy(b + pre, dict, (size_t)dict_len);
    b[pre + header_len - 1] = '\n';
    unsigned char *data = b + pre + header_len;
    for (size_t e = 0; e < elements; e++) {
        uint64_t bits = npy_random_bits(c->descr[1], size, &seed);
        unsigned char *elem = data + e * size;
        for (size_t k = 0; k < size; k++) /* byte k of the little-endian value */
            elem[c->descr[0] == '>' ? size - 1 - k : k] = (unsigned char)(bits >> 8 * k);
    }
    return b;
}

/* A body the device declines: load_bytes answers UNSUPPORTED without filling err, and the
 * CUDA engine then reports the host reader's error word for word. */
static void body_declined(struct pair *p, struct ecg_engine *engine, const unsigned char *body,
                          size_t len, const struct ecg_read_opts *opts, const char *what,
                          enum ecg_status want, const char *want_text)
{
    struct ecg_error host = {0}, dev = {0}, eng = {0};
    struct ecg_signal sig = {0};
    struct ecg_result *result = NULL;
    size_t n = 0;
    double fs = 0;
    char lead[32] = "";
    assert_int_equal(ecg_read_memory(body, len, opts, &sig, &host), want);
    if (!strstr(host.message, want_text))
        fail_msg("%s: host error \"%s\" lacks \"%s\"", what, host.message, want_text);
    assert_int_equal(p->gpu->load_bytes(p->gpu_ctx, body, len, opts, &n, &fs, lead, &dev),
                     ECG_ERR_UNSUPPORTED);
    assert_int_equal(dev.status, ECG_OK);
    assert_string_equal(dev.message, "");
    assert_int_equal(ecg_engine_analyze_bytes(engine, body, len, opts, &result, &eng), want);
    assert_null(result);
    assert_string_equal(eng.code, host.code);
    assert_string_equal(eng.message, host.message);
    printf("#   %s: handed to the host reader: %s\n", what, host.message);
}

static void test_npy_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    static const struct npy_case cases[] = {
        {"npy <f4", "<f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy <f8 unaligned", "<f8", 0, false, NULL, 1, 3, ECG_FORMAT_NPY, false},
        {"npy <i2 unaligned", "<i2", 0, false, "0", 1, 1, ECG_FORMAT_NPY, false},
        {"npy |i1", "|i1", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy |u1", "|u1", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy <i4 unaligned", "<i4", 0, false, NULL, 1, 2, ECG_FORMAT_NPY, false},
        {"npy >f4 (big-endian)", ">f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false},
        {"npy >f8 (big-endian), sniffed", ">f8", 0, false, NULL, 1, 5, ECG_FORMAT_AUTO, false},
        {"npy <f4 (n, 3) C order, lead 1", "<f4", 3, false, "1", 1, 0, ECG_FORMAT_NPY, false},
        {"npy >i2 (n, 3) C order, lead 2", ">i2", 3, false, "2", 1, 7, ECG_FORMAT_NPY, false},
        {"npy <f4 (n, 3) Fortran, lead 2", "<f4", 3, true, "2", 1, 0, ECG_FORMAT_NPY, false},
        {"npy <f8 (n, 3) Fortran, lead 2, pinned", "<f8", 3, true, "2", 1, 0, ECG_FORMAT_NPY,
         true},
        {"npy <f4 v2.0", "<f4", 0, false, NULL, 2, 0, ECG_FORMAT_NPY, false},
        {"npy <i2 v3.0 (n, 2) Fortran, lead 1", "<i2", 2, true, "1", 3, 0, ECG_FORMAT_NPY,
         false},
    };
    size_t rows = quick() ? 20011 : 100003;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct npy_case *c = &cases[i];
        size_t len = 0;
        unsigned char *body = npy_build(c, c->leads ? rows / 3 : rows, 500 + (unsigned)i, &len);
        struct ecg_read_opts opts = {.format = c->format, .fs_hz = 360, .lead = c->lead};
        bytes_parity_from(p, body, len, &opts, c->what, c->pinned);
        free(body);
    }

    /* declined: the host reader decides, and its error reaches the caller unchanged */
    struct ecg_engine *engine = engine_of(ECG_BACKEND_CUDA, p->model);
    struct ecg_read_opts opts = {.format = ECG_FORMAT_NPY, .fs_hz = 360};
    size_t len = 0;
    const struct npy_case f4 = {"", "<f4", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false};
    unsigned char *body = npy_build(&f4, 1000, 1, &len);
    size_t data_at = len - 1000 * 4;
    float nan_value = NAN;
    unsigned char saved[4];
    memcpy(saved, body + data_at + 17 * 4, 4);
    memcpy(body + data_at + 17 * 4, &nan_value, 4);
    body_declined(p, engine, body, len, &opts, "npy NaN", ECG_ERR_FORMAT, "sample 17 is NaN");
    memcpy(body + data_at + 17 * 4, saved, 4);
    opts.format = ECG_FORMAT_AUTO;
    body_declined(p, engine, body, len - 1, &opts, "npy truncated", ECG_ERR_FORMAT,
                  "data size mismatch");
    opts.format = ECG_FORMAT_NPY;
    opts.lead = "1";
    body_declined(p, engine, body, len, &opts, "npy lead 1 of 1", ECG_ERR_NOT_FOUND,
                  "lead 1 does not exist");
    opts.lead = NULL;
    opts.max_samples = 999;
    body_declined(p, engine, body, len, &opts, "npy over max_samples", ECG_ERR_TOO_LARGE,
                  "exceed the limit of 999");
    opts.max_samples = 0;
    unsigned char *key = memmem(body, len, "'descr'", 7);
    assert_non_null(key);
    key[5] = 'x';
    body_declined(p, engine, body, len, &opts, "npy bad header", ECG_ERR_FORMAT,
                  "unknown key \"descx\"");
    free(body);
    const struct npy_case f8 = {"", "<f8", 0, false, NULL, 1, 0, ECG_FORMAT_NPY, false};
    body = npy_build(&f8, 100, 2, &len);
    double huge = 1e300;
    memcpy(body + len - 100 * 8 + 5 * 8, &huge, 8);
    body_declined(p, engine, body, len, &opts, "npy f8 out of float range", ECG_ERR_FORMAT,
                  "sample 5 is infinite");
    free(body);
    ecg_engine_destroy(engine);
}

/* ---------------------------------------------------------------- EDF and BDF on the device */

/* Signals of the EDF fixtures: different samples per record, calibrations with a non-trivial
 * bitvalue and offset (asymmetric ranges), units in mV, uV (scaled) and an unknown one. */
struct edf_sig {
    const char *label, *unit;
    int spr;                      /* samples per data record */
    double phys_min, phys_max;
    int dig_min[2], dig_max[2];   /* [0] EDF, [1] BDF */
};

static const struct edf_sig edf_sigs[] = {
    {"MLII", "mV", 360, -3.25, 12.5, {-2048, -600000}, {2047, 600000}},
    {"V1", "uV", 180, -5000, 4000, {-32768, -8388608}, {32767, 8388607}},
    {"Resp", "Ohm", 25, 0, 1000, {-100, -100}, {3000, 3000}},
};
#define EDF_SIGS (sizeof edf_sigs / sizeof edf_sigs[0])

/* One EDF body of the tests. */
struct edf_case {
    const char *what;
    int filetype;          /* EDFLIB_FILETYPE_EDFPLUS or _BDFPLUS (what EDFlib writes) */
    bool plain;            /* "EDF+C"/"BDF+C" blanked: plain EDF/BDF, whose annotation signal
                            * becomes an ordinary one */
    const char *lead;
    int duration;          /* data record duration, units of 10 us */
    enum ecg_format format;
    bool pinned;
};

/* Where sample i of raw signal sig (annotation signals counted) lies in an EDF body, read from
 * the header as the format defines it. */
static size_t edf_sample_at(const unsigned char *b, int sig, size_t i)
{
    char field[9] = "";
    memcpy(field, b + 252, 4);
    field[4] = 0;
    int ns = atoi(field), bps = b[0] == 0xff ? 3 : 2;
    size_t record = 0, before = 0, spr = 0;
    for (int k = 0; k < ns; k++) {
        memcpy(field, b + 256 + ns * 216 + k * 8, 8);
        field[8] = 0;
        size_t n = (size_t)atoi(field);
        if (k < sig)
            before += n * (size_t)bps;
        if (k == sig)
            spr = n;
        record += n * (size_t)bps;
    }
    return 256 * (size_t)(ns + 1) + i / spr * record + before + i % spr * (size_t)bps;
}

/* Writes case c with EDFlib (n_records data records of random digital values, seeded; + types
 * with annotations) into a temporary file and returns its bytes; *len their count. A few values
 * of MLII are then set outside its digital range, which the readers clamp. */
static unsigned char *edf_build(const struct edf_case *c, int n_records, unsigned seed,
                                size_t *len)
{
    char path[] = "/tmp/ecg-parity-edf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    bool bdf = c->filetype == EDFLIB_FILETYPE_BDFPLUS;
    int h = edfopen_file_writeonly(path, c->filetype, (int)EDF_SIGS);
    if (h < 0)
        fail_msg("edfopen_file_writeonly: %d", h);
    assert_int_equal(edf_set_datarecord_duration(h, c->duration), 0);
    for (int s = 0; s < (int)EDF_SIGS; s++) {
        const struct edf_sig *e = &edf_sigs[s];
        assert_int_equal(edf_set_samplefrequency(h, s, e->spr), 0);
        assert_int_equal(edf_set_digital_minimum(h, s, e->dig_min[bdf]), 0);
        assert_int_equal(edf_set_digital_maximum(h, s, e->dig_max[bdf]), 0);
        assert_int_equal(edf_set_physical_minimum(h, s, e->phys_min), 0);
        assert_int_equal(edf_set_physical_maximum(h, s, e->phys_max), 0);
        assert_int_equal(edf_set_label(h, s, e->label), 0);
        assert_int_equal(edf_set_physical_dimension(h, s, e->unit), 0);
    }
    int *values = malloc(edf_sigs[0].spr * sizeof *values);
    assert_non_null(values);
    for (int r = 0; r < n_records; r++) {
        for (int s = 0; s < (int)EDF_SIGS; s++) {
            const struct edf_sig *e = &edf_sigs[s];
            long span = (long)e->dig_max[bdf] - e->dig_min[bdf] + 1;
            for (int i = 0; i < e->spr; i++)
                values[i] = (int)(e->dig_min[bdf] +
                                  (long)(((unsigned long)rand_r(&seed) << 16 ^
                                          (unsigned long)rand_r(&seed)) % (unsigned long)span));
            assert_int_equal(edfwrite_digital_samples(h, values), 0);
        }
    }
    free(values);
    if (c->filetype == EDFLIB_FILETYPE_EDFPLUS || c->filetype == EDFLIB_FILETYPE_BDFPLUS)
        for (int a = 0; a < 12; a++)
            assert_int_equal(edfwrite_annotation_utf8(h, 3000LL * a + 7, -1, "beat"), 0);
    assert_int_equal(edfclose_file(h), 0);
    unsigned char *b = load_file(path, len);
    unlink(path);
    if (c->plain)
        memcpy(b + 192, "     ", 5);
    /* out-of-range values of MLII, in records 0 and 1 and the last */
    static const unsigned char high[3] = {0xff, 0x7f, 0x00}, low[3] = {0x00, 0x80, 0xff};
    static const unsigned char high24[3] = {0xff, 0xff, 0x7f}, low24[3] = {0x00, 0x00, 0x80};
    size_t where[] = {3, (size_t)edf_sigs[0].spr + 5, (size_t)n_records * edf_sigs[0].spr - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        const unsigned char *value = bdf ? (k % 2 ? low24 : high24) : (k % 2 ? low : high);
        memcpy(b + edf_sample_at(b, 0, where[k]), value, bdf ? 3 : 2);
    }
    return b;
}

/* Moves the last signal of an EDF body (EDFlib writes the annotation signal last) to the front,
 * in the header and in every data record, so that the data signals follow it. */
static void edf_last_first(unsigned char *b, size_t len)
{
    static const int widths[] = {16, 80, 8, 8, 8, 8, 8, 80, 8, 32};
    char field[9] = "";
    memcpy(field, b + 252, 4);
    int ns = atoi(field), bps = b[0] == 0xff ? 3 : 2;
    size_t at = 256, record = 0, last = 0;
    unsigned char tmp[80];
    for (size_t f = 0; f < sizeof widths / sizeof widths[0]; f++) {
        size_t w = (size_t)widths[f];
        memcpy(tmp, b + at + (size_t)(ns - 1) * w, w);
        memmove(b + at + w, b + at, (size_t)(ns - 1) * w);
        memcpy(b + at, tmp, w);
        at += (size_t)ns * w;
    }
    for (int k = 0; k < ns; k++) { /* samples per record: the moved signal's now come first */
        memcpy(field, b + 256 + ns * 216 + k * 8, 8);
        field[8] = 0;
        record += (size_t)atoi(field) * (size_t)bps;
        if (k == 0)
            last = (size_t)atoi(field) * (size_t)bps;
    }
    unsigned char *moved = malloc(last);
    assert_non_null(moved);
    for (size_t r = at; r + record <= len; r += record) {
        memcpy(moved, b + r + record - last, last);
        memmove(b + r + last, b + r, record - last);
        memcpy(b + r, moved, last);
    }
    free(moved);
}

static void test_edf_bits(void **state)
{
    NEED_DEVICE(state);
    struct pair *p = *state;
    static const struct edf_case cases[] = {
        {"EDF+ lead 0 (MLII, mV), sniffed", EDFLIB_FILETYPE_EDFPLUS, false, NULL, 100000,
         ECG_FORMAT_AUTO, false},
        {"EDF+ lead V1 (uV)", EDFLIB_FILETYPE_EDFPLUS, false, "V1", 100000, ECG_FORMAT_EDF, false},
        {"EDF+ lead 2 (Resp), 0.5 s records", EDFLIB_FILETYPE_EDFPLUS, false, "2", 50000,
         ECG_FORMAT_EDF, false},
        {"EDF+ lead resp (case), pinned", EDFLIB_FILETYPE_EDFPLUS, false, "resp", 100000,
         ECG_FORMAT_EDF, true},
        {"BDF+ lead 0, sniffed", EDFLIB_FILETYPE_BDFPLUS, false, "0", 100000, ECG_FORMAT_AUTO,
         false},
        {"BDF+ lead v1 (case, uV), 0.25 s records", EDFLIB_FILETYPE_BDFPLUS, false, "v1", 25000,
         ECG_FORMAT_EDF, false},
        {"BDF+ lead 2", EDFLIB_FILETYPE_BDFPLUS, false, "2", 100000, ECG_FORMAT_EDF, false},
        {"EDF lead 1", EDFLIB_FILETYPE_EDFPLUS, true, "1", 100000, ECG_FORMAT_EDF, false},
        {"EDF lead 3 (the former annotation signal)", EDFLIB_FILETYPE_EDFPLUS, true, "3", 100000,
         ECG_FORMAT_EDF, false},
        {"BDF lead MLII, sniffed", EDFLIB_FILETYPE_BDFPLUS, true, "MLII", 100000,
         ECG_FORMAT_AUTO, false},
        {"BDF lead 2, pinned", EDFLIB_FILETYPE_BDFPLUS, true, "2", 100000, ECG_FORMAT_EDF, true},
    };
    int n_records = quick() ? 60 : 600;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct edf_case *c = &cases[i];
        size_t len = 0;
        unsigned char *body = edf_build(c, n_records, 900 + (unsigned)i, &len);
        struct ecg_read_opts opts = {.format = c->format, .fs_hz = 123, .lead = c->lead};
        bytes_parity_from(p, body, len, &opts, c->what, c->pinned);
        free(body);
    }

    /* EDFlib reads only the first record's annotations when it opens a file without reading
     * them: garbage in the others changes nothing for the host, nor for the device */
    const struct edf_case plus = {"", EDFLIB_FILETYPE_EDFPLUS, false, NULL, 100000,
                                  ECG_FORMAT_EDF, false};
    size_t len = 0;
    unsigned char *body = edf_build(&plus, 50, 7, &len);
    for (size_t r = 1; r < 50; r++)
        body[edf_sample_at(body, (int)EDF_SIGS, 0) + r * (edf_sample_at(body, 0, 360) -
                                                          edf_sample_at(body, 0, 0))] = 0xff;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_EDF, .lead = "V1"};
    bytes_parity(p, (const char *)body, len, &opts, "EDF+ with garbage in later annotations",
                 true);

    /* the annotation signal first, then the data signals (in BDF+ too) */
    size_t moved_len = 0;
    unsigned char *moved = edf_build(&plus, 50, 8, &moved_len);
    edf_last_first(moved, moved_len);
    opts.lead = "Resp";
    bytes_parity(p, (const char *)moved, moved_len, &opts, "EDF+ annotations first, lead Resp",
                 true);
    free(moved);
    const struct edf_case bplus = {"", EDFLIB_FILETYPE_BDFPLUS, false, NULL, 100000,
                                   ECG_FORMAT_EDF, false};
    moved = edf_build(&bplus, 50, 9, &moved_len);
    edf_last_first(moved, moved_len);
    opts.lead = "1";
    bytes_parity(p, (const char *)moved, moved_len, &opts, "BDF+ annotations first, lead 1",
                 true);
    free(moved);

    /* declined: the host reader decides, and its error reaches the caller unchanged */
    struct ecg_engine *engine = engine_of(ECG_BACKEND_CUDA, p->model);
    opts.lead = "9";
    body_declined(p, engine, body, len, &opts, "EDF lead 9 of 3", ECG_ERR_NOT_FOUND,
                  "lead 9 does not exist");
    opts.lead = "aVR";
    body_declined(p, engine, body, len, &opts, "EDF lead aVR", ECG_ERR_NOT_FOUND,
                  "no signal labelled \"aVR\"");
    opts.lead = NULL;
    opts.max_samples = 50 * 360 - 1;
    body_declined(p, engine, body, len, &opts, "EDF over max_samples", ECG_ERR_TOO_LARGE,
                  "exceed the limit of 17999");
    opts.max_samples = 0;
    body_declined(p, engine, body, len - 1, &opts, "EDF truncated", ECG_ERR_FORMAT,
                  "file size does not match");
    body_declined(p, engine, body, 200, &opts, "EDF under 256 bytes", ECG_ERR_FORMAT,
                  "the fixed header alone is 256");
    memcpy(body + 192, "EDF+D", 5);
    body_declined(p, engine, body, len, &opts, "EDF+D", ECG_ERR_UNSUPPORTED,
                  "discontinuous");
    memcpy(body + 192, "EDF+C", 5);
    /* a physical range so wide that every value overflows float */
    size_t ns = EDF_SIGS + 1, phys_min_at = 256 + ns * 104, phys_max_at = 256 + ns * 112;
    unsigned char saved_min[8], saved_max[8];
    memcpy(saved_min, body + phys_min_at, 8);
    memcpy(saved_max, body + phys_max_at, 8);
    memcpy(body + phys_min_at, "-1e300  ", 8);
    memcpy(body + phys_max_at, "1e300   ", 8);
    body_declined(p, engine, body, len, &opts, "EDF values past float", ECG_ERR_FORMAT,
                  "sample 0 is infinite");
    memcpy(body + phys_min_at, saved_min, 8);
    memcpy(body + phys_max_at, saved_max, 8);
    bytes_parity(p, (const char *)body, len, &opts, "EDF+ restored", true);
    free(body);
    ecg_engine_destroy(engine);
}

/* ---------------------------------------------------------------- errors */

/* A request too big for the device fails with DEVICE_OOM and the context keeps serving. */
static void test_oom_recovers(void **state)
{
    NEED_DEVICE(state);
    if (getenv("ECG_GPU_NO_OOM")) { /* under compute-sanitizer, which reports the planted OOM */
        printf("# SKIP: ECG_GPU_NO_OOM set\n");
        skip();
    }
    struct pair *p = *state;
    struct ecg_error err = {0};
    float tiny[4] = {0};
    /* the reservation fails before the host buffer is read */
    enum ecg_status st = p->gpu->write_buf(p->gpu_ctx, ECG_BUF_INPUT, tiny, (size_t)1 << 40, &err);
    printf("# oom: %s: %s\n", ecg_status_str(st), err.message);
    assert_int_equal(st, ECG_ERR_DEVICE_OOM);
    struct stage_totals tot = {0};
    float *x = random_signal(5, 360, 360 * 60, 0);
    stages_one(p, x, 360 * 60, 360, "after oom", &tot);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_bits),
        cmocka_unit_test(test_raw_bits),
        cmocka_unit_test(test_npy_bits),
        cmocka_unit_test(test_edf_bits),
        cmocka_unit_test(test_stages_records),
        cmocka_unit_test(test_stages_random),
        cmocka_unit_test(test_stages_strips),
        cmocka_unit_test(test_detect_blocks),
        cmocka_unit_test(test_filter_fft),
        cmocka_unit_test(test_vae_cudnn),
        cmocka_unit_test(test_vae_block),
        cmocka_unit_test(test_engine_records),
        cmocka_unit_test(test_engine_concurrent),
        cmocka_unit_test(test_multi_device),
        cmocka_unit_test(test_oom_recovers),
    };
    /* ECG_GPU_ONLY=PATTERN runs the matching tests alone (e.g. under a slow sanitizer);
     * ECG_GPU_SKIP=PATTERN leaves the matching ones out. */
    const char *only = getenv("ECG_GPU_ONLY"), *leave = getenv("ECG_GPU_SKIP");
    if (only && *only)
        cmocka_set_test_filter(only);
    if (leave && *leave)
        cmocka_set_skip_filter(leave);
    return cmocka_run_group_tests_name("gpu_parity", tests, setup, pair_teardown);
}
