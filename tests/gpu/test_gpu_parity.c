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
 *
 * The program is this file and parity_stages.c, parity_engine.c, parity_readers.c (parity.h
 * says what each holds).
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
#include "ecg.h"
#include "model.h"

const char *const records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
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

bool quick(void)
{
    const char *q = getenv("ECG_GPU_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

size_t n_records(void)
{
    return quick() ? 2 : N_RECORDS;
}

static void record_path(const char *rec, char *path, size_t cap)
{
    const char *dir = getenv("ECG_GPU_DATA");
    snprintf(path, cap, "%s/mitdb/%s", dir && *dir ? dir : ECG_SHARED_DATA, rec);
}

void read_record(const char *rec, struct ecg_signal *sig)
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
float *random_signal(uint64_t seed, double fs, size_t n, int kind)
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

float *read_all(const struct ecg_backend_ops *ops, void *ctx, enum ecg_stage_buf which,
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
void compare_floats(const char *what, const float *cpu, const float *gpu, size_t n,
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
size_t peak_mismatches(const int64_t *a, size_t na, const int64_t *b, size_t nb)
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

struct ecg_engine *engine_of(enum ecg_backend_kind kind, const struct ecg_model *model)
{
    struct ecg_engine_config config = {.backend = kind, .model = model, .workers = 2,
                                       .device = -1};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        fail_msg("engine: %s", err.message);
    return engine;
}

/* ---------------------------------------------------------------- errors */

/* A request too big for the device fails with DEVICE_OOM and the context keeps serving. */
void test_oom_recovers(void **state)
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
