/*
 * bench_readers.c - throughput of the input readers on one core: ecg_parse_float() against
 * strtof(), and ecg_read_memory() on CSV (the original data form, one value like
 * "1.3863000000000008e+00" per line, ~23 bytes a line; the short "-0.005" form of the UCR
 * file; and a 10-s strip as a client POSTs it, 2,500 lines of "%g" millivolts on a 5-uV grid,
 * ~14.5 KB, read again and again from the cache), raw float32, .npy and JSON. Self-contained
 * (synthetic data, fixed seed), ~10 s.
 *
 * Prints one line per measurement: "<name>: <MB/s> MB/s, <M values/s> M values/s (best of N)";
 * the strip adds the microseconds one read of it takes, and the two ways of reading its short
 * lines (a word at a time, eight lines at a time in AVX2) are timed alone on it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecg.h"
#include "read_internal.h" /* csv_short_word, csv_short_avx2: the strip's two ways */

#define BENCH_VALUES 8000000u
#define BENCH_REPEATS 3
#define STRIP_VALUES 2500u /* 10 s at 250 Hz */
#define STRIP_READS 4000u  /* per timed repeat: ~58 MB of text */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An ECG-like value in mV: pulses on a slow wave plus noise. */
static double sample_at(size_t i, uint64_t *state)
{
    double t = (double)i / 250.0;
    double phase = fmod(t * 1.2, 1.0) - 0.5;
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double noise = ((double)(*state >> 11) / 9007199254740992.0 - 0.5) * 0.05;
    return exp(-phase * phase / 2e-4) + 0.3 * sin(0.3 * t) + noise;
}

static void report(const char *name, size_t bytes, size_t values, double best_s)
{
    printf("%s: %.0f MB/s, %.1f M values/s (best of %d)\n", name, (double)bytes / best_s / 1e6,
           (double)values / best_s / 1e6, BENCH_REPEATS);
}

static int bench_read(const char *name, const void *buf, size_t len, enum ecg_format format,
                      size_t want_n)
{
    struct ecg_read_opts opts = {.format = format, .fs_hz = 250};
    double best = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        struct ecg_signal sig;
        struct ecg_error err = {0};
        double t0 = now_s();
        enum ecg_status status = ecg_read_memory(buf, len, &opts, &sig, &err);
        double dt = now_s() - t0;
        if (status != ECG_OK || sig.n != want_n) {
            fprintf(stderr, "bench_readers: %s: %s (%zu values)\n", name, err.message, sig.n);
            return 1;
        }
        ecg_signal_free(&sig);
        best = dt < best ? dt : best;
    }
    report(name, len, want_n, best);
    return 0;
}

/* The short strip: read STRIP_READS times per repeat, as a server reads one body per request. */
static int bench_strip(const char *name, const char *buf, size_t len, size_t want_n)
{
    struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 250};
    double best = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double t0 = now_s();
        for (unsigned k = 0; k < STRIP_READS; k++) {
            struct ecg_signal sig;
            struct ecg_error err = {0};
            enum ecg_status status = ecg_read_memory(buf, len, &opts, &sig, &err);
            if (status != ECG_OK || sig.n != want_n) {
                fprintf(stderr, "bench_readers: %s: %s (%zu values)\n", name, err.message, sig.n);
                return 1;
            }
            ecg_signal_free(&sig);
        }
        double dt = (now_s() - t0) / STRIP_READS;
        best = dt < best ? dt : best;
    }
    printf("%s: %.0f MB/s, %.1f M values/s, %.1f us per %zu-byte strip (best of %d)\n", name,
           (double)len / best / 1e6, (double)want_n / best / 1e6, best * 1e6, len, BENCH_REPEATS);
    return 0;
}

/* The strip's short lines alone, one way (word: 0, AVX2: 1): microseconds per strip. */
static int bench_short_way(int avx2, const char *buf, size_t len, size_t want_n)
{
    static float values[STRIP_VALUES];
    double best = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double t0 = now_s();
        size_t n = 0;
        for (unsigned k = 0; k < STRIP_READS; k++) {
            const char *p = buf;
            bool full;
            n = avx2 ? csv_short_avx2(buf, buf + len, &p, values, STRIP_VALUES, &full)
                     : csv_short_word(buf, buf + len, &p, values, STRIP_VALUES, &full);
        }
        double dt = (now_s() - t0) / STRIP_READS;
        best = dt < best ? dt : best;
        /* the run leaves the last ~72 bytes to the reader's other paths */
        if (n + 16 < want_n) {
            fprintf(stderr, "bench_readers: the short lines stopped after %zu values\n", n);
            return 1;
        }
    }
    printf("csv short lines, %s: %.1f us per strip (best of %d)\n",
           avx2 ? "eight at a time (AVX2)" : "a word at a time", best * 1e6, BENCH_REPEATS);
    return 0;
}

int main(void)
{
    int rc = 1;
    size_t n = BENCH_VALUES;
    char *text = malloc((size_t)n * 32), *short_text = malloc((size_t)n * 16);
    char *json = malloc((size_t)n * 16 + 64), *strip = malloc(STRIP_VALUES * 16);
    unsigned char *raw = malloc((size_t)n * 4 + 128);
    if (!text || !short_text || !json || !raw || !strip)
        goto out;

    size_t len = 0, short_len = 0, json_len = 0;
    uint64_t state = 42;
    json_len += (size_t)sprintf(json, "{\"fs\": 250, \"signal\": [");
    for (size_t i = 0; i < n; i++) {
        double v = sample_at(i, &state);
        len += (size_t)sprintf(text + len, "%.16e\n", v);
        short_len += (size_t)sprintf(short_text + short_len, "%.3g\n", v);
        json_len += (size_t)sprintf(json + json_len, "%s%.3g", i ? "," : "", v);
        float f = (float)v;
        memcpy(raw + 128 + 4 * i, &f, 4); /* little-endian host assumed for the fixture */
    }
    json_len += (size_t)sprintf(json + json_len, "]}");
    /* The strip: values quantised to 5 uV (200 ADC units per mV, as MIT-BIH), then "%g". */
    size_t strip_len = 0;
    state = 7;
    for (size_t i = 0; i < STRIP_VALUES; i++)
        strip_len +=
            (size_t)sprintf(strip + strip_len, "%g\n", round(sample_at(i, &state) * 200.0) / 200.0);

    /* ecg_parse_float vs strtof on the data form. */
    double best_fast = INFINITY, best_strtof = INFINITY;
    volatile float sink = 0;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double t0 = now_s();
        const char *p = text, *end = text + len;
        float sum = 0;
        while (p < end) {
            float v;
            p = ecg_parse_float(p, end, &v) + 1;
            sum += v;
        }
        double dt = now_s() - t0;
        best_fast = dt < best_fast ? dt : best_fast;
        t0 = now_s();
        p = text;
        float sum2 = 0;
        while (p < end) {
            char *q;
            sum2 += strtof(p, &q);
            p = q + 1;
        }
        dt = now_s() - t0;
        best_strtof = dt < best_strtof ? dt : best_strtof;
        if (sum != sum2) {
            fprintf(stderr, "bench_readers: ecg_parse_float and strtof disagree\n");
            goto out;
        }
        sink = sum;
    }
    (void)sink;
    report("ecg_parse_float, \"%.16e\" values", len, n, best_fast);
    report("strtof, \"%.16e\" values", len, n, best_strtof);

    if (bench_read("csv, \"%.16e\" one column", text, len, ECG_FORMAT_CSV, n) ||
        bench_read("csv, \"%.3g\" one column", short_text, short_len, ECG_FORMAT_CSV, n) ||
        bench_strip("csv, 10-s strip \"%g\" mV one column", strip, strip_len, STRIP_VALUES) ||
        bench_short_way(0, strip, strip_len, STRIP_VALUES) ||
        (__builtin_cpu_supports("avx2") && bench_short_way(1, strip, strip_len, STRIP_VALUES)) ||
        bench_read("json, \"%.3g\" values", json, json_len, ECG_FORMAT_JSON, n))
        goto out;

    /* .npy v1 header padded to 128 bytes, then the float32 data. */
    char header[128];
    int hl = snprintf(header + 10, sizeof header - 10,
                      "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", n);
    memset(header + 10 + hl, ' ', sizeof header - 10 - (size_t)hl);
    header[127] = '\n';
    memcpy(header, "\x93NUMPY\x01\x00", 8);
    header[8] = 118;
    header[9] = 0;
    memcpy(raw, header, 128);
    if (bench_read("npy <f4", raw, 128 + 4 * n, ECG_FORMAT_NPY, n) ||
        bench_read("raw f32", raw + 128, 4 * n, ECG_FORMAT_F32, n))
        goto out;
    rc = 0;
out:
    free(text);
    free(short_text);
    free(json);
    free(raw);
    free(strip);
    return rc;
}
