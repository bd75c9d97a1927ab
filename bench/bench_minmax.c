/*
 * bench_minmax.c - the CPU reference of the dashboard's signal windows: ecg_minmax() of a
 * 20-hour, 360 Hz recording (25.92 M samples) into 1,000 buckets (the 2,000 points of
 * GET /v1/analyses/{id}/signal), and of a 10-second window. Wall and thread CPU time, median of
 * 15, so that a loaded machine still shows what the reduction itself costs. Anchor in the same
 * run: one plain pass summing the same samples (memory bandwidth). Self-contained (synthetic
 * data, fixed seed), ~5 s.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ecg.h"

#define N_SAMPLES (20u * 3600u * 360u)
#define RUNS 15

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile float sink;

/* Median wall and CPU milliseconds of RUNS calls of what (0: minmax of the whole recording,
 * 1: a 10-s window, 2: the summing pass). */
static void measure(const float *x, int what, struct ecg_minmax *out, double *wall, double *cpu)
{
    double w[RUNS], c[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
        if (what == 0) {
            ecg_minmax(x, 0, N_SAMPLES, 1000, out);
        } else if (what == 1) {
            ecg_minmax(x, N_SAMPLES / 2, N_SAMPLES / 2 + 3600, 1000, out);
        } else {
            float sum = 0.0f;
            for (size_t i = 0; i < N_SAMPLES; i++)
                sum += x[i];
            sink = sum;
        }
        w[r] = clock_ms(CLOCK_MONOTONIC) - w0;
        c[r] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    qsort(w, RUNS, sizeof w[0], compare);
    qsort(c, RUNS, sizeof c[0], compare);
    *wall = w[RUNS / 2];
    *cpu = c[RUNS / 2];
}

int main(void)
{
    float *x = malloc((size_t)N_SAMPLES * sizeof *x);
    struct ecg_minmax *out = malloc(1000 * sizeof *out);
    if (!x || !out) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t state = 42;
    for (size_t i = 0; i < N_SAMPLES; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(state >> 11) / 9007199254740992.0 - 0.5) + (i % 300 < 20);
    }
    double wall[3], cpu[3];
    for (int what = 0; what < 3; what++)
        measure(x, what, out, &wall[what], &cpu[what]);
    printf("| ecg_minmax, 1,000 buckets | wall ms | thread CPU ms |\n|---|---|---|\n");
    printf("| 20 h at 360 Hz (%u samples) | %.2f | %.2f |\n", N_SAMPLES, wall[0], cpu[0]);
    printf("| a 10-s window (3,600 samples) | %.3f | %.3f |\n", wall[1], cpu[1]);
    printf("| anchor: one summing pass over the 20 h | %.2f | %.2f |\n", wall[2], cpu[2]);
    printf("20 h reduction / summing pass (CPU time): %.2fx\n", cpu[0] / cpu[2]);
    free(x);
    free(out);
    return 0;
}
