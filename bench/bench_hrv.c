/*
 * bench_hrv.c - the cost of the HRV's LF and HF band powers (engine/hrv.c: the Lomb-Scargle
 * periodogram on its grid, up to ~1e7 point-frequency terms a series), for NN series of 30
 * minutes to 15 hours of beats, by each build of the sums' loop this CPU has (portable, AVX2,
 * AVX-512 and the one the engine takes), on one thread and on all of OpenMP's. Self-contained
 * (synthetic series, no data files), ~10 s.
 *
 * Prints one line per measurement: "RESULT name=hrv_band_powers intervals=N way=W threads=T
 * ms=M" (the median of BENCH_REPEATS), after a table of the same figures.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "hrv.h"

#define BENCH_REPEATS 5

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* An NN series of n intervals: 900 ms with an LF and an HF oscillation and some noise, at the
 * times the intervals end. */
static void series(size_t n, double *t, double *rr)
{
    uint64_t state = 7;
    double at = 0.0;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(state >> 11) / 9007199254740992.0;
        rr[i] = 900.0 + 30.0 * sin(2.0 * M_PI * 0.1 * at) + 20.0 * sin(2.0 * M_PI * 0.25 * at) +
                10.0 * (u - 0.5);
        at += rr[i] / 1000.0;
        t[i] = at;
    }
}

int main(void)
{
    /* 30 min, 2 h, 5 h, 9 h (the last series split by frequency too) and 15 h of beats */
    const size_t lengths[] = {2000, 8000, 20000, 32000, 60000};
    bool have_avx2 = false, have_avx512 = false;
#if defined(__x86_64__)
    have_avx2 = __builtin_cpu_supports("avx2");
    have_avx512 = __builtin_cpu_supports("avx512f");
#endif
    const struct {
        enum ecg_hrv_way way;
        const char *name;
        bool available;
    } ways[] = {{ECG_HRV_PORTABLE, "portable", true},
                {ECG_HRV_AVX2, "avx2", have_avx2},
                {ECG_HRV_AVX512, "avx512", have_avx512},
                {ECG_HRV_BEST, "best", true}};
    int all_threads = 1;
#ifdef _OPENMP
    all_threads = omp_get_max_threads();
#endif
    printf("| intervals | build | threads | ms (median of %d) |\n|---|---|---|---|\n",
           BENCH_REPEATS);
    char lines[256][160];
    size_t n_lines = 0;
    for (size_t q = 0; q < sizeof lengths / sizeof *lengths; q++) {
        const size_t n = lengths[q];
        double *t = malloc(n * sizeof *t), *rr = malloc(n * sizeof *rr);
        if (!t || !rr) {
            fprintf(stderr, "bench_hrv: out of memory\n");
            return 1;
        }
        series(n, t, rr);
        for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
            if (!ways[w].available)
                continue;
            const int threads[] = {1, all_threads};
            for (int k = 0; k < (all_threads > 1 ? 2 : 1); k++) {
#ifdef _OPENMP
                omp_set_num_threads(threads[k]);
#endif
                double ms[BENCH_REPEATS];
                for (int r = 0; r < BENCH_REPEATS; r++) {
                    struct ecg_error err = {0};
                    double lf, hf, t0 = now_ms();
                    if (ecg_hrv_band_powers(t, rr, n, ways[w].way, &lf, &hf, &err) != ECG_OK) {
                        fprintf(stderr, "bench_hrv: %s\n", err.message);
                        return 1;
                    }
                    ms[r] = now_ms() - t0;
                }
                qsort(ms, BENCH_REPEATS, sizeof *ms, cmp_double);
                printf("| %zu | %s | %d | %.2f |\n", n, ways[w].name, threads[k],
                       ms[BENCH_REPEATS / 2]);
                if (n_lines < sizeof lines / sizeof *lines)
                    snprintf(lines[n_lines++], sizeof lines[0],
                             "RESULT name=hrv_band_powers intervals=%zu way=%s threads=%d ms=%.3f",
                             n, ways[w].name, threads[k], ms[BENCH_REPEATS / 2]);
            }
        }
#ifdef _OPENMP
        omp_set_num_threads(all_threads);
#endif
        free(t);
        free(rr);
    }
    for (size_t i = 0; i < n_lines; i++)
        puts(lines[i]);
    return 0;
}
