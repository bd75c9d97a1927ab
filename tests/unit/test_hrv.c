/*
 * test_hrv.c - heart rate and HRV over normal-to-normal intervals (engine/hrv.c,
 * docs/RHYTHM.md): every measure against a direct computation (or a value worked out by hand) on
 * synthetic RR series; LF and HF against sines of known power; the NN selection on synthetic
 * ectopic, flagged and missed beats, and on MIT-BIH records with frequent PVCs (119, 208) with
 * an artefact inserted, judged by the reference annotations.
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
#include "hrv.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MITDB ECG_SHARED_DATA "/mitdb"

/* An RR series: rr[0] = NaN (no interval before the first beat), t[i] the beat times. */
struct series {
    double *rr, *t;
    uint8_t *nn;
    size_t n;
};

static struct series series_new(size_t n)
{
    struct series s = {.n = n};
    s.rr = calloc(n, sizeof *s.rr);
    s.t = calloc(n, sizeof *s.t);
    s.nn = calloc(n, 1);
    assert_true(s.rr && s.t && s.nn);
    s.rr[0] = NAN;
    return s;
}

static void series_times(struct series *s)
{
    s->t[0] = 0.0;
    for (size_t i = 1; i < s->n; i++)
        s->t[i] = s->t[i - 1] + s->rr[i] / 1000.0;
}

static void series_free(struct series *s)
{
    free(s->rr);
    free(s->t);
    free(s->nn);
}

static struct ecg_hrv hrv_of(struct series *s, const uint8_t *bad)
{
    struct ecg_error err = {0};
    struct ecg_hrv h;
    series_times(s);
    assert_int_equal(ecg_hrv_select_nn(s->rr, bad, s->n, s->nn, &err), ECG_OK);
    assert_int_equal(ecg_hrv_compute(s->rr, s->nn, s->t, s->n, &h, &err), ECG_OK);
    return h;
}

/* The definitions, computed the plain way over the intervals rr[1..n-1] (all NN). */
struct direct {
    double mean, sdnn, rmssd, pnn50, sd1, sd2, hr_min, hr_max;
};

static struct direct direct_of(const double *rr, size_t n)
{
    struct direct d = {0};
    size_t m = n - 1;
    double sum = 0, lo = INFINITY, hi = 0;
    for (size_t i = 1; i < n; i++) {
        sum += rr[i];
        lo = fmin(lo, rr[i]);
        hi = fmax(hi, rr[i]);
    }
    d.mean = sum / (double)m;
    double var = 0;
    for (size_t i = 1; i < n; i++)
        var += (rr[i] - d.mean) * (rr[i] - d.mean);
    d.sdnn = sqrt(var / (double)(m - 1));
    double dsum = 0, dsq = 0, over = 0;
    for (size_t i = 2; i < n; i++) {
        double diff = rr[i] - rr[i - 1];
        dsum += diff;
        dsq += diff * diff;
        over += fabs(diff) > 50.0;
    }
    size_t k = m - 1;
    d.rmssd = sqrt(dsq / (double)k);
    d.pnn50 = 100.0 * over / (double)k;
    double dmean = dsum / (double)k, dvar = 0;
    for (size_t i = 2; i < n; i++)
        dvar += (rr[i] - rr[i - 1] - dmean) * (rr[i] - rr[i - 1] - dmean);
    double sdsd = sqrt(dvar / (double)(k - 1));
    d.sd1 = sdsd / sqrt(2.0);
    d.sd2 = sqrt(2.0 * d.sdnn * d.sdnn - 0.5 * sdsd * sdsd);
    d.hr_min = 60000.0 / hi;
    d.hr_max = 60000.0 / lo;
    return d;
}

static void assert_matches_direct(const struct ecg_hrv *h, const double *rr, size_t n)
{
    struct direct d = direct_of(rr, n);
    assert_int_equal(h->n_nn, n - 1);
    assert_int_equal(h->n_successive, n - 2);
    assert_float_equal(h->nn_mean_ms, d.mean, 1e-9 * d.mean);
    assert_float_equal(h->hr_mean_bpm, 60000.0 / d.mean, 1e-9);
    assert_float_equal(h->hr_min_bpm, d.hr_min, 1e-9);
    assert_float_equal(h->hr_max_bpm, d.hr_max, 1e-9);
    assert_float_equal(h->sdnn_ms, d.sdnn, 1e-9 * (1 + d.sdnn));
    assert_float_equal(h->rmssd_ms, d.rmssd, 1e-9 * (1 + d.rmssd));
    assert_float_equal(h->pnn50_pct, d.pnn50, 1e-9);
    assert_float_equal(h->sd1_ms, d.sd1, 1e-6 * (1 + d.sd1));
    assert_float_equal(h->sd2_ms, d.sd2, 1e-6 * (1 + d.sd2));
}

/* Values worked out by hand: diffs 10 -20 30 -40 20 40 -80. */
static void test_by_hand(void **state)
{
    const double rr[] = {NAN, 1000, 1010, 990, 1020, 980, 1000, 1040, 960};
    struct series s = series_new(9);
    memcpy(s.rr, rr, sizeof rr);
    struct ecg_hrv h = hrv_of(&s, NULL);
    assert_int_equal(h.n_intervals, 8);
    assert_int_equal(h.n_nn, 8);
    assert_float_equal(h.nn_mean_ms, 1000.0, 1e-9);
    assert_float_equal(h.hr_mean_bpm, 60.0, 1e-9);
    assert_float_equal(h.hr_max_bpm, 62.5, 1e-9);           /* 60000 / 960 */
    assert_float_equal(h.hr_min_bpm, 60000.0 / 1040, 1e-9);
    /* squares of the deviations: 0 100 100 400 400 0 1600 1600 = 4200, / 7 */
    assert_float_equal(h.sdnn_ms, sqrt(4200.0 / 7.0), 1e-9);
    /* 100 + 400 + 900 + 1600 + 400 + 1600 + 6400 = 11400, / 7 */
    assert_float_equal(h.rmssd_ms, sqrt(11400.0 / 7.0), 1e-9);
    assert_float_equal(h.pnn50_pct, 100.0 / 7.0, 1e-9);      /* only |-80| > 50 */
    assert_true(isnan(h.lf_ms2) && isnan(h.hf_ms2) && isnan(h.lf_hf)); /* 8 s < 2 min */
    assert_matches_direct(&h, s.rr, s.n);
    series_free(&s);
}

static void test_alternating_and_constant(void **state)
{
    struct series s = series_new(301);
    for (size_t i = 1; i < s.n; i++)
        s.rr[i] = i % 2 ? 800.0 : 900.0;
    struct ecg_hrv h = hrv_of(&s, NULL);
    assert_matches_direct(&h, s.rr, s.n);
    assert_float_equal(h.rmssd_ms, 100.0, 1e-9);
    assert_float_equal(h.pnn50_pct, 100.0, 1e-9);
    for (size_t i = 1; i < s.n; i++)
        s.rr[i] = 1000.0;
    h = hrv_of(&s, NULL);
    assert_float_equal(h.hr_mean_bpm, 60.0, 1e-9);
    assert_true(h.sdnn_ms == 0.0 && h.rmssd_ms == 0.0 && h.pnn50_pct == 0.0);
    assert_true(h.sd1_ms == 0.0 && h.sd2_ms == 0.0);
    /* 300 s of a constant rhythm: no spectral power (but defined) */
    assert_true(h.lf_ms2 == 0.0 && h.hf_ms2 == 0.0);
    series_free(&s);
}

/* Random RR series (fixed seed): the measures against the direct computation. */
static void test_random(void **state)
{
    uint64_t x = 12345;
    for (int trial = 0; trial < 20; trial++) {
        struct series s = series_new(50 + (size_t)trial * 37);
        for (size_t i = 1; i < s.n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            /* 700..900 ms: never premature nor long against the local median */
            s.rr[i] = 700.0 + 200.0 * (double)(x >> 11) / 9007199254740992.0;
        }
        struct ecg_hrv h = hrv_of(&s, NULL);
        assert_matches_direct(&h, s.rr, s.n);
        series_free(&s);
    }
}

/* A sine modulation of amplitude A has power A^2 / 2 in its band and next to none in the other. */
static void test_lf_hf(void **state)
{
    const double freq[] = {0.1, 0.25}, amp = 40.0;
    for (size_t k = 0; k < 2; k++) {
        struct series s = series_new(400);
        double t = 0;
        for (size_t i = 1; i < s.n; i++) {
            s.rr[i] = 900.0 + amp * sin(2.0 * M_PI * freq[k] * t);
            t += s.rr[i] / 1000.0;
        }
        struct ecg_hrv h = hrv_of(&s, NULL);
        assert_true(s.t[s.n - 1] >= 120.0);
        double in = k == 0 ? h.lf_ms2 : h.hf_ms2, out = k == 0 ? h.hf_ms2 : h.lf_ms2;
        printf("# %.2f Hz: LF %.1f HF %.1f ms^2 (expected %.1f in band)\n", freq[k], h.lf_ms2,
               h.hf_ms2, amp * amp / 2);
        assert_float_equal(in, amp * amp / 2, 0.1 * amp * amp / 2);
        assert_true(out < 0.03 * in);
        assert_float_equal(h.lf_hf, h.lf_ms2 / h.hf_ms2, 1e-12 * h.lf_hf);

        /* the band power (rotated cos/sin) against the direct periodogram on a finer grid */
        size_t m = 4001;
        double *f = malloc(m * sizeof *f), *p = malloc(m * sizeof *p);
        double *tn = malloc(s.n * sizeof *tn), *yn = malloc(s.n * sizeof *yn);
        assert_true(f && p && tn && yn);
        size_t n = 0;
        for (size_t i = 0; i < s.n; i++) {
            if (s.nn[i]) {
                tn[n] = s.t[i];
                yn[n++] = s.rr[i];
            }
        }
        double lo = k == 0 ? ECG_HRV_LF_LO : ECG_HRV_HF_LO;
        double hi = k == 0 ? ECG_HRV_LF_HI : ECG_HRV_HF_HI;
        for (size_t j = 0; j < m; j++)
            f[j] = lo + (hi - lo) * (double)j / (double)(m - 1);
        ecg_hrv_lomb(tn, yn, n, f, m, p);
        double direct = 0;
        for (size_t j = 1; j < m; j++)
            direct += 0.5 * (p[j] + p[j - 1]) * (f[j] - f[j - 1]);
        assert_float_equal(in, direct, 0.02 * direct);
        free(f);
        free(p);
        free(tn);
        free(yn);
        series_free(&s);
    }
}

/* The median of rr[i-5 .. i+5] within 1..n-1, each value placed by a plain sort (qsort). */
static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_by_sort(const double *rr, size_t n, size_t i)
{
    double v[11];
    size_t lo = i > 6 ? i - 5 : 1, hi = i + 5 < n - 1 ? i + 5 : n - 1, m = 0;
    for (size_t k = lo; k <= hi; k++)
        v[m++] = rr[k];
    qsort(v, m, sizeof *v, cmp_d);
    return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

/* The ways this CPU can take (AVX2 and AVX-512 only where it has them). */
static size_t hrv_ways(enum ecg_hrv_way way[4])
{
    size_t k = 0;
    way[k++] = ECG_HRV_BEST;
    way[k++] = ECG_HRV_PORTABLE;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        way[k++] = ECG_HRV_AVX2;
    if (__builtin_cpu_supports("avx512f"))
        way[k++] = ECG_HRV_AVX512;
#endif
    return k;
}

/*
 * The local medians, whole windows by a selection network: on every one of the 2,048 0-1
 * windows of 11 (by the 0-1 principle, a network that selects the middle of each selects the
 * middle of every input), and on random series of every length from 1 to 70 and of 20,000 (the
 * OpenMP blocks) with many ties, against a plain sort, the same bits every way.
 */
static void test_local_medians(void **state)
{
    (void)state;
    enum ecg_hrv_way way[4];
    const size_t n_ways = hrv_ways(way);
    /* 0-1 inputs: intervals 1..11 of a series of 12 hold the bits; whole window at 6 only.
     * Then 5 groups of 4 windows: a series of 12 + 3 puts the bits in four neighbours' windows */
    for (unsigned bits = 0; bits < 2048; bits++) {
        double rr[16], med[16];
        rr[0] = NAN;
        for (int k = 0; k < 15; k++)
            rr[k + 1] = (double)((bits >> (k % 11)) & 1);
        for (size_t w = 0; w < n_ways; w++) {
            for (size_t n = 12; n <= 16; n += 4) {
                ecg_hrv_local_medians(rr, n, med, way[w]);
                for (size_t i = 1; i < n; i++)
                    if (med[i] != median_by_sort(rr, n, i))
                        fail_msg("0-1 bits %#x, n %zu, way %d: interval %zu median %g, not %g",
                                 bits, n, (int)way[w], i, med[i], median_by_sort(rr, n, i));
            }
        }
    }
    uint64_t seed = 99;
    const size_t big = 20000;
    double *rr = malloc(big * sizeof *rr), *med = malloc(big * sizeof *med);
    assert_true(rr && med);
    for (size_t n = 1; n <= big; n = n < 70 ? n + 1 : big) {
        for (int rep = 0; rep < (n < 70 ? 20 : 2); rep++) {
            rr[0] = NAN;
            for (size_t i = 1; i < n; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                /* few distinct values (ties) in half the runs, any in the rest */
                rr[i] = rep % 2 ? 300.0 + (double)(seed >> 40) / 16.0
                                : 600.0 + 40.0 * (double)((seed >> 60) % 5);
            }
            for (size_t w = 0; w < n_ways; w++) {
                memset(med, 0, n * sizeof *med);
                ecg_hrv_local_medians(rr, n, med, way[w]);
                for (size_t i = 1; i < n; i++)
                    if (memcmp(&med[i], &(double){median_by_sort(rr, n, i)}, sizeof(double)))
                        fail_msg("n %zu, way %d: interval %zu median %.17g, not %.17g", n,
                                 (int)way[w], i, med[i], median_by_sort(rr, n, i));
            }
        }
        if (n == big)
            break;
    }
    printf("# local medians: %zu ways, every 0-1 window and random series of 1-70 and %zu\n",
           n_ways, big);
    free(rr);
    free(med);
}

/* Regular 800 ms; a premature beat with its compensatory pause, a flagged beat, a missed beat. */
static void test_nn_selection(void **state)
{
    struct series s = series_new(100);
    uint8_t bad[100] = {0};
    for (size_t i = 1; i < s.n; i++)
        s.rr[i] = 800.0 + (i % 3) * 10.0;
    s.rr[50] = 560.0;  /* premature */
    s.rr[51] = 1040.0; /* its compensatory pause */
    bad[70] = 1;       /* unreadable or flagged by the model */
    s.rr[85] = 1600.0; /* a missed beat */
    struct ecg_hrv h = hrv_of(&s, bad);
    const size_t excluded[] = {0, 50, 51, 70, 71, 85};
    for (size_t i = 0, e = 0; i < s.n; i++) {
        bool out = e < 6 && excluded[e] == i;
        e += out;
        if (s.nn[i] != !out)
            fail_msg("interval %zu: nn %d", i, s.nn[i]);
    }
    assert_int_equal(h.n_intervals, 99);
    assert_int_equal(h.n_nn, 94);
    /* successive pairs: both intervals NN and adjacent */
    size_t pairs = 0;
    for (size_t i = 1; i < s.n; i++)
        pairs += s.nn[i] && s.nn[i - 1];
    assert_int_equal(h.n_successive, pairs);
    assert_float_equal(h.hr_max_bpm, 60000.0 / 800.0, 1e-9);
    assert_float_equal(h.hr_min_bpm, 60000.0 / 820.0, 1e-9);
    series_free(&s);
}

/*
 * Records with frequent PVCs and an artefact: 30 s of white noise (1 mV RMS) from 600 s. Judged
 * by the reference annotations: the NN intervals join two normal beats, none touches the
 * artefact, most normal-to-normal reference intervals are used, and the NN heart rate is the
 * reference's.
 */
static void test_nn_on_records(void **state)
{
    const char *names[] = {"119", "208"};
    struct ecg_error err = {0};
    /* the service's configuration: the bundled model flags abnormal beats (outliers) */
    struct ecg_model *model = ecg_model_load("models/default.ecgm", &err);
    if (!model)
        fail_msg("model: %s", err.message);
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = 1, .model = model};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    assert_non_null(engine);
    for (size_t r = 0; r < 2; r++) {
        char path[256];
        struct ecg_signal sig = {0};
        struct ecg_annotations ann = {0};
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
        snprintf(path, sizeof path, "%s/%s", MITDB, names[r]);
        assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
        assert_int_equal(ecg_annotations_read(path, &ann, &err), ECG_OK);
        uint64_t x = 7;
        for (size_t i = 600 * 360; i < 630 * 360; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            double u1 = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            double u2 = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
            sig.samples[i] += (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
        }
        struct ecg_result *res = NULL;
        assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);

        /* the reference symbol of each detection (0 when it matches none) */
        int64_t *match = malloc(ann.n * sizeof *match);
        char *sym = calloc(res->n_beats, 1);
        assert_true(match && sym);
        struct ecg_match_stats m = {0};
        ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, 360.0, 0.15, &m, match);
        for (size_t j = 0; j < ann.n; j++) {
            if (match[j] >= 0)
                sym[match[j]] = ecg_aami_class(ann.symbol[j]);
        }
        size_t nn = 0, nn_normal = 0, in_artefact = 0;
        double nn_sum = 0;
        for (size_t i = 1; i < res->n_beats; i++) {
            if (!res->nn[i])
                continue;
            nn++;
            nn_sum += (double)(res->r_peak[i] - res->r_peak[i - 1]) / 360.0;
            nn_normal += sym[i] == 'N' && sym[i - 1] == 'N';
            double t0 = (double)res->r_peak[i - 1] / 360.0, t1 = (double)res->r_peak[i] / 360.0;
            in_artefact += t1 > 600.0 && t0 < 630.0;
        }
        /* the reference's normal-to-normal intervals, outside the artefact */
        size_t ref_nn = 0;
        double ref_sum = 0;
        for (size_t j = 1; j < ann.n; j++) {
            double t0 = (double)ann.sample[j - 1] / 360.0, t1 = (double)ann.sample[j] / 360.0;
            if (ecg_aami_class(ann.symbol[j]) == 'N' && ecg_aami_class(ann.symbol[j - 1]) == 'N' &&
                !(t1 > 598.0 && t0 < 632.0)) {
                ref_nn++;
                ref_sum += t1 - t0;
            }
        }
        double hr = 60.0 / (nn_sum / (double)nn), ref_hr = 60.0 / (ref_sum / (double)ref_nn);
        printf("# %s: %zu NN intervals of %zu (%zu reference N-N), %zu join two N beats; "
               "HR %.2f (reference N-N %.2f); SDNN %.1f ms\n", names[r], nn, res->n_beats - 1,
               ref_nn, nn_normal, hr, ref_hr, res->hrv.sdnn_ms);
        if (getenv("ECG_TEST_VERBOSE")) {
            size_t pairs[5][5] = {{0}};
            const char *cls = "NSVFQ";
            for (size_t i = 1; i < res->n_beats; i++) {
                const char *a = strchr(cls, sym[i - 1] ? sym[i - 1] : 'Q');
                const char *b = strchr(cls, sym[i] ? sym[i] : 'Q');
                if (res->nn[i] && a && b)
                    pairs[a - cls][b - cls]++;
            }
            for (int a = 0; a < 5; a++)
                for (int b = 0; b < 5; b++)
                    if (pairs[a][b])
                        printf("#   NN %c-%c: %zu\n", cls[a], cls[b], pairs[a][b]);
        }
        assert_int_equal(nn, res->hrv.n_nn);
        assert_int_equal(in_artefact, 0);
        assert_true((double)nn_normal >= 0.8 * (double)ref_nn);
        if (r == 0) {
            /* 119: uniform PVCs in bigeminy, premature and flagged by the model: every NN
             * interval joins two normal beats */
            assert_true((double)nn_normal >= 0.995 * (double)nn);
            assert_float_equal(hr, ref_hr, 0.005 * ref_hr);
        } else {
            /* 208: ~1000 PVCs and ~370 fusion beats, many barely premature against a rhythm
             * that is itself half ectopic, and not all flagged by the model: NN keeps a share
             * of intervals touching them (a known limit: RR and the model's flag only), but
             * far less than all intervals do, and the rate stays the reference's */
            size_t all_touch = 0, nn_touch = 0;
            for (size_t i = 1; i < res->n_beats; i++) {
                bool touch = sym[i] == 'V' || sym[i - 1] == 'V';
                all_touch += touch;
                nn_touch += touch && res->nn[i];
            }
            printf("#   intervals touching a PVC: %.1f %% of all, %.1f %% of NN\n",
                   100.0 * (double)all_touch / (double)(res->n_beats - 1),
                   100.0 * (double)nn_touch / (double)nn);
            assert_true((double)nn_touch / (double)nn <
                        0.5 * (double)all_touch / (double)(res->n_beats - 1));
            assert_float_equal(hr, ref_hr, 0.02 * ref_hr);
        }
        assert_float_equal(res->hrv.hr_mean_bpm, hr, 1e-6 * hr);
        free(match);
        free(sym);
        ecg_result_free(res);
        ecg_annotations_free(&ann);
        ecg_signal_free(&sig);
    }
    ecg_engine_destroy(engine);
    ecg_model_free(model);
}

/*
 * LF and HF of the series s (every interval NN): the same bits with one thread and with four,
 * and equal to the direct periodogram (ecg_hrv_lomb, each term from its own cos and sin) on
 * band_powers' grid (hrv.c: the step divides 0.01 Hz, is at most 1 / (8 span), and coarse
 * enough for 1e7 point-frequency terms) to within 1e-9, although the band powers advance cos
 * and sin by rotations. Returns the number of frequencies.
 */
static size_t check_band_powers(struct series *s)
{
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    struct ecg_hrv one = hrv_of(s, NULL);
#ifdef _OPENMP
    omp_set_num_threads(4);
#endif
    struct ecg_hrv four = hrv_of(s, NULL);
#ifdef _OPENMP
    omp_set_num_threads(saved);
#endif
    assert_memory_equal(&one.lf_ms2, &four.lf_ms2, sizeof one.lf_ms2);
    assert_memory_equal(&one.hf_ms2, &four.hf_ms2, sizeof one.hf_ms2);
    const size_t n = s->n - 1;
    assert_int_equal(one.n_nn, n);
    /* every build of the sums' loop this CPU has: the same bits (the NN series: intervals 1..) */
    enum ecg_hrv_way way[4];
    const size_t n_ways = hrv_ways(way);
    for (size_t w = 0; w < n_ways; w++) {
        struct ecg_error err = {0};
        double lf_w, hf_w;
        assert_int_equal(ecg_hrv_band_powers(s->t + 1, s->rr + 1, n, way[w], &lf_w, &hf_w, &err),
                         ECG_OK);
        if (memcmp(&lf_w, &one.lf_ms2, sizeof lf_w) || memcmp(&hf_w, &one.hf_ms2, sizeof hf_w))
            fail_msg("way %d: LF %.17g HF %.17g, not %.17g %.17g", (int)way[w], lf_w, hf_w,
                     one.lf_ms2, one.hf_ms2);
    }
    const double span = s->t[s->n - 1] - s->t[1];
    const double target =
        fmax(1.0 / (8.0 * span), (ECG_HRV_HF_HI - ECG_HRV_LF_LO) * (double)n / 1e7);
    const double step = 0.01 / ceil(0.01 / target);
    size_t m = (size_t)lround((ECG_HRV_HF_HI - ECG_HRV_LF_LO) / step) + 1;
    size_t k_mid = (size_t)lround((ECG_HRV_LF_HI - ECG_HRV_LF_LO) / step);
    double *f = malloc(m * sizeof *f), *p = malloc(m * sizeof *p);
    assert_true(f && p);
    for (size_t k = 0; k < m; k++)
        f[k] = ECG_HRV_LF_LO + (double)k * step;
    ecg_hrv_lomb(s->t + 1, s->rr + 1, n, f, m, p);
    double lf = 0, hf = 0;
    for (size_t k = 1; k < m; k++)
        *(k <= k_mid ? &lf : &hf) += 0.5 * (p[k] + p[k - 1]) * step;
    printf("# %zu intervals, %zu frequencies: LF %.6f HF %.6f ms^2 (direct %.6f %.6f), %zu ways\n",
           n, m, one.lf_ms2, one.hf_ms2, lf, hf, n_ways);
    assert_float_equal(one.lf_ms2, lf, 1e-9 * lf);
    assert_float_equal(one.hf_ms2, hf, 1e-9 * hf);
    free(f);
    free(p);
    return m;
}

/* An RR series of n beats: two sines (LF and HF) and uniform noise, from seed. */
static struct series sines_series(size_t n, uint64_t seed, double lf_hz, double hf_hz)
{
    struct series s = series_new(n);
    for (size_t i = 1; i < s.n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(seed >> 11) / 9007199254740992.0;
        double tt = (double)i * 0.9;
        s.rr[i] = 900.0 + 30.0 * sin(2.0 * M_PI * lf_hz * tt) +
                  20.0 * sin(2.0 * M_PI * hf_hz * tt) + 10.0 * (u - 0.5);
    }
    return s;
}

/* A Holter-length series (20 hours, 80,000 intervals: the band powers are split into 16 blocks
 * of points, summed in parallel; grid 0.0025 Hz): check_band_powers. */
static void test_long_series_blocks(void **state)
{
    (void)state;
    struct series s = sines_series(80001, 12345, 0.1, 0.3);
    assert_int_equal(check_band_powers(&s), 145);
    series_free(&s);
}

/* Series of fewer than 8 blocks of points (under 32,768 intervals: here 30 minutes, 1.5, 2, 5
 * and 8 hours of beats, up to ~1e7 point-frequency terms: 1, 1, 1, 4 and 7 blocks) are also
 * split by frequency, each chunk starting from its own cos and sin: check_band_powers, with more
 * than one chunk. */
static void test_short_series_chunks(void **state)
{
    (void)state;
    const size_t lengths[] = {2001, 6001, 8191, 20001, 32767};
    for (size_t q = 0; q < 5; q++) {
        struct series s = sines_series(lengths[q], 777 + q, 0.08, 0.27);
        assert_true(check_band_powers(&s) > 128);
        series_free(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_hand),      cmocka_unit_test(test_alternating_and_constant),
        cmocka_unit_test(test_random),       cmocka_unit_test(test_lf_hf),
        cmocka_unit_test(test_nn_selection), cmocka_unit_test(test_nn_on_records),
        cmocka_unit_test(test_long_series_blocks), cmocka_unit_test(test_local_medians),
        cmocka_unit_test(test_short_series_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
