/*
 * bench_dsp.c - throughput of the CPU resampler and Ricker filter (engine/cpu/resample.c,
 * engine/cpu/filter.c) on a 20M-sample synthetic recording, and the direct/FFT crossover of the
 * filter over kernel lengths. Self-contained (no arguments, no data files), ~10 s.
 *
 * Prints one line per measurement: "<name>: <M samples/s> M samples/s (<ms> ms, best of N)".
 * Throughput counts input samples per second.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/cpu.h"
#include "plan.h"

#define BENCH_N 20000000u      /* the headline size */
#define BENCH_CROSS_N 2000000u /* crossover table: throughput per sample does not depend on n */
#define BENCH_REPEATS 3

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A noisy ECG-like test signal: a 1.2 Hz train of narrow pulses on a wandering baseline. */
static void synth(float *x, size_t n, double fs_hz)
{
    uint64_t state = 42;
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / fs_hz;
        double phase = fmod(t * 1.2, 1.0) - 0.5;
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double noise = ((double)(state >> 11) / 9007199254740992.0 - 0.5) * 0.05;
        x[i] = (float)(exp(-phase * phase / (2.0 * 0.01 * 0.01)) + 0.3 * sin(0.3 * t) + noise);
    }
}

static int bench_resample(const float *x, size_t n, double fs_in_hz, float *y)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_plan plan;
    struct ecg_error err = {0};
    if (ecg_plan_init(&plan, &params, fs_in_hz, &err) != ECG_OK) {
        fprintf(stderr, "bench_dsp: plan for %g Hz: %s\n", fs_in_hz, err.message);
        return 1;
    }
    double best = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double t0 = now_s();
        if (cpu_resample(&plan, x, n, y, &err) != ECG_OK) {
            fprintf(stderr, "bench_dsp: resample: %s\n", err.message);
            ecg_plan_fini(&plan);
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    printf("resample %g->%g Hz (up %u, down %u, %zu taps, %zu per output), n=%zu: "
           "%.1f M samples/s (%.1f ms, best of %d)\n",
           fs_in_hz, plan.fs_a_hz, plan.up, plan.down, plan.fir_len,
           (plan.fir_len + plan.up - 1) / plan.up, n, (double)n / best * 1e-6, best * 1e3,
           BENCH_REPEATS);
    ecg_plan_fini(&plan);
    return 0;
}

/* Times one filter path for a Ricker of `taps` taps; returns seconds or -1 on error. */
static double time_filter(const float *y, size_t n, size_t taps, enum cpu_filter_method method,
                          float *f)
{
    struct ecg_params params = ecg_params_default();
    params.ricker_points_s = (double)(taps - 1) / params.analysis_fs_hz;
    struct ecg_plan plan;
    struct ecg_error err = {0};
    if (ecg_plan_init(&plan, &params, params.analysis_fs_hz, &err) != ECG_OK) {
        fprintf(stderr, "bench_dsp: plan: %s\n", err.message);
        return -1.0;
    }
    double best = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double t0 = now_s();
        if (cpu_filter_with(&plan, y, n, f, method, &err) != ECG_OK) {
            fprintf(stderr, "bench_dsp: filter: %s\n", err.message);
            best = -1.0;
            break;
        }
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    ecg_plan_fini(&plan);
    return best;
}

int main(void)
{
    int rc = 1;
    float *x = malloc(BENCH_N * sizeof *x);
    float *y = malloc(BENCH_N * sizeof *y * 3); /* up to 128 -> 250 Hz */
    if (!x || !y) {
        fprintf(stderr, "bench_dsp: out of memory\n");
        goto out;
    }
    synth(x, BENCH_N, 360.0);
    const double rates[] = {360.0, 1000.0, 500.0, 128.0, 256.0};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (bench_resample(x, BENCH_N, rates[i], y))
            goto out;

    struct ecg_plan plan;
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    if (ecg_plan_init(&plan, &params, params.analysis_fs_hz, &err) != ECG_OK)
        goto out;
    const size_t taps = plan.ricker_len;
    ecg_plan_fini(&plan);
    const char *names[] = {"auto", "direct", "fft"};
    for (int m = CPU_FILTER_AUTO; m <= CPU_FILTER_FFT; m++) {
        double dt = time_filter(x, BENCH_N, taps, (enum cpu_filter_method)m, y);
        if (dt < 0)
            goto out;
        printf("filter %s, Ricker %zu taps, n=%u: %.1f M samples/s (%.1f ms, best of %d)\n",
               names[m], taps, BENCH_N, BENCH_N / dt * 1e-6, dt * 1e3, BENCH_REPEATS);
    }

    printf("filter crossover, n=%u (M samples/s; auto takes direct up to %d taps):\n",
           BENCH_CROSS_N, CPU_FILTER_DIRECT_MAX_TAPS);
    const size_t lengths[] = {15, 31, 47, 63, 79, 95, 103, 111, 127, 159, 191, 255};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        double direct = time_filter(x, BENCH_CROSS_N, lengths[i], CPU_FILTER_DIRECT, y);
        double fft = time_filter(x, BENCH_CROSS_N, lengths[i], CPU_FILTER_FFT, y);
        if (direct < 0 || fft < 0)
            goto out;
        printf("  %3zu taps: direct %7.1f  fft %7.1f  -> %s\n", lengths[i],
               BENCH_CROSS_N / direct * 1e-6, BENCH_CROSS_N / fft * 1e-6,
               direct <= fft ? "direct" : "fft");
    }
    rc = 0;
out:
    free(x);
    free(y);
    return rc;
}
