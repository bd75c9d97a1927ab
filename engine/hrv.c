/*
 * hrv.c - heart rate and HRV over normal-to-normal intervals (hrv.h; docs/RHYTHM.md).
 *
 * Time-domain measures follow NeuroKit2's hrv_time (sample standard deviations, ddof = 1);
 * SD1/SD2 follow its hrv_nonlinear (Poincare plot through the successive differences); LF and HF
 * are band powers (0.04-0.15 Hz, 0.15-0.4 Hz, as in NeuroKit2 and HeartPy) of a Lomb-Scargle
 * periodogram of the NN series at its own beat times, no resampling. One difference, on purpose:
 * successive differences (RMSSD, pNN50, SD1) use only pairs of NN intervals that share a beat,
 * where NeuroKit2 differences its filtered array, pairing intervals across a removed beat.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hrv.h"

/* Work bound of the LF and HF band powers together: points x frequencies. */
#define LOMB_MAX_TERMS 1e7

/* Median of the RR intervals [i - HALF, i + HALF] (indices 1..n-1 only). */
static double local_median(const double *rr_ms, size_t n, size_t i)
{
    double v[2 * ECG_HRV_LOCAL_HALF + 1];
    size_t lo = i > ECG_HRV_LOCAL_HALF + 1 ? i - ECG_HRV_LOCAL_HALF : 1;
    size_t hi = i + ECG_HRV_LOCAL_HALF < n - 1 ? i + ECG_HRV_LOCAL_HALF : n - 1;
    size_t m = 0;
    for (size_t k = lo; k <= hi; k++) {
        /* insertion sort: at most 11 values */
        size_t j = m++;
        while (j > 0 && v[j - 1] > rr_ms[k]) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = rr_ms[k];
    }
    return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

enum ecg_status ecg_hrv_select_nn(const double *rr_ms, const uint8_t *bad, size_t n,
                                  uint8_t *nn, struct ecg_error *err)
{
    if (!n)
        return ECG_OK;
    uint8_t *excluded = calloc(n, 1);
    if (!excluded)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu beats", n);
    excluded[0] = 1;
    for (size_t i = 1; i < n; i++) {
        double med = local_median(rr_ms, n, i);
        bool premature = rr_ms[i] < ECG_HRV_PREMATURE * med;
        if (!(rr_ms[i] > 0) || rr_ms[i] > ECG_HRV_LONG * med)
            excluded[i] = 1;
        /* an ectopic or bad beat i spoils the intervals on both sides of it */
        if (premature || (bad && bad[i])) {
            excluded[i] = 1;
            if (i + 1 < n)
                excluded[i + 1] = 1;
        }
    }
    if (bad && bad[0] && n > 1)
        excluded[1] = 1;
    for (size_t i = 0; i < n; i++)
        nn[i] = !excluded[i];
    free(excluded);
    return ECG_OK;
}

/*
 * One frequency of the Lomb-Scargle periodogram from the sums over the points (v = y - mean,
 * angles w (t - t0)): sum v cos, sum v sin, sum cos 2a, sum sin 2a. The offset tau of the
 * classical form enters through tan(2 w tau) = sum sin 2a / sum cos 2a.
 */
static double lomb_point(double sum_c, double sum_s, double sum_c2, double sum_s2, size_t n,
                         double span)
{
    if (!n)
        return NAN;
    double two_wtau = atan2(sum_s2, sum_c2);
    double ct = cos(0.5 * two_wtau), st = sin(0.5 * two_wtau);
    double yc = ct * sum_c + st * sum_s, ys = ct * sum_s - st * sum_c;
    double cc = 0.5 * (double)n + 0.5 * (cos(two_wtau) * sum_c2 + sin(two_wtau) * sum_s2);
    double ss = (double)n - cc;
    double p = 0.5 * ((cc > 0 ? yc * yc / cc : 0) + (ss > 0 ? ys * ys / ss : 0));
    /* A sine of amplitude A gives a peak of A^2 n / 4 and width 1 / span: 2 span / n makes the
     * integral A^2 / 2, its variance (white noise likewise integrates to its variance up to the
     * mean Nyquist frequency n / (2 span)). */
    return p * 2.0 * span / (double)n;
}

void ecg_hrv_lomb(const double *t, const double *y, size_t n, const double *freq, size_t m,
                  double *psd)
{
    double mean = 0.0;
    for (size_t i = 0; i < n; i++)
        mean += y[i];
    mean /= n ? (double)n : 1.0;
    double span = n > 1 ? t[n - 1] - t[0] : 0.0;
    for (size_t k = 0; k < m; k++) {
        double w = 2.0 * M_PI * freq[k];
        double sum_c = 0, sum_s = 0, sum_c2 = 0, sum_s2 = 0;
        for (size_t i = 0; i < n; i++) {
            double a = w * (t[i] - t[0]), c = cos(a), s = sin(a), v = y[i] - mean;
            sum_c += v * c;
            sum_s += v * s;
            sum_c2 += c * c - s * s;
            sum_s2 += 2.0 * c * s;
        }
        psd[k] = lomb_point(sum_c, sum_s, sum_c2, sum_s2, n, span);
    }
}

/*
 * Band power [lo, hi]: trapezoid of the Lomb-Scargle PSD on a uniform grid of step
 * 1 / (8 span) (8 points per spectral line, whose width is 1 / span), coarsened for long
 * recordings so that the band costs at most LOMB_MAX_TERMS point-frequency terms (a 15-hour
 * Holter of 70,000 intervals: 0.0025 Hz; its spectrum is broadband, not lines). The same
 * periodogram as ecg_hrv_lomb, with each point's cos and sin advanced from one
 * frequency to the next by a rotation instead of recomputed (a 24-hour Holter has ~100k points
 * and ~700 frequencies).
 */
static enum ecg_status band_power(const double *t, const double *y, size_t n, double lo,
                                  double hi, double *power, struct ecg_error *err)
{
    double span = t[n - 1] - t[0];
    double step = fmax(1.0 / (8.0 * span), (ECG_HRV_HF_HI - ECG_HRV_LF_LO) * (double)n /
                                               LOMB_MAX_TERMS);
    size_t m = (size_t)ceil((hi - lo) / step) + 1;
    double df = (hi - lo) / (double)(m - 1);
    double *rot = malloc(5 * n * sizeof *rot);
    if (!rot)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu intervals", n);
    double *c = rot, *s = rot + n, *dc = rot + 2 * n, *ds = rot + 3 * n, *v = rot + 4 * n;
    double mean = 0.0;
    for (size_t i = 0; i < n; i++)
        mean += y[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) {
        double dt = t[i] - t[0];
        c[i] = cos(2.0 * M_PI * lo * dt);
        s[i] = sin(2.0 * M_PI * lo * dt);
        dc[i] = cos(2.0 * M_PI * df * dt);
        ds[i] = sin(2.0 * M_PI * df * dt);
        v[i] = y[i] - mean;
    }
    double sum = 0, prev = 0;
    for (size_t k = 0; k < m; k++) {
        double sum_c = 0, sum_s = 0, sum_c2 = 0, sum_s2 = 0;
        for (size_t i = 0; i < n; i++) {
            sum_c += v[i] * c[i];
            sum_s += v[i] * s[i];
            sum_c2 += c[i] * c[i] - s[i] * s[i];
            sum_s2 += 2.0 * c[i] * s[i];
            double cn = c[i] * dc[i] - s[i] * ds[i];
            s[i] = s[i] * dc[i] + c[i] * ds[i];
            c[i] = cn;
        }
        double p = lomb_point(sum_c, sum_s, sum_c2, sum_s2, n, span);
        if (k)
            sum += 0.5 * (prev + p) * df;
        prev = p;
    }
    *power = sum;
    free(rot);
    return ECG_OK;
}

static void time_domain(const double *rr_ms, const uint8_t *nn, size_t n, struct ecg_hrv *h)
{
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!nn[i])
            continue;
        h->n_nn++;
        sum += rr_ms[i];
        lo = fmin(lo, rr_ms[i]);
        hi = fmax(hi, rr_ms[i]);
    }
    if (!h->n_nn)
        return;
    double mean = sum / (double)h->n_nn, sq = 0, dsum = 0, dsq = 0;
    size_t over50 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!nn[i])
            continue;
        sq += (rr_ms[i] - mean) * (rr_ms[i] - mean);
        if (i > 0 && nn[i - 1]) {
            double d = rr_ms[i] - rr_ms[i - 1];
            h->n_successive++;
            dsum += d;
            dsq += d * d;
            over50 += fabs(d) > 50.0;
        }
    }
    h->nn_mean_ms = mean;
    h->hr_mean_bpm = 60000.0 / mean;
    h->hr_min_bpm = 60000.0 / hi;
    h->hr_max_bpm = 60000.0 / lo;
    if (h->n_nn > 1) {
        h->sdnn_ms = sqrt(sq / (double)(h->n_nn - 1));
    }
    size_t k = h->n_successive;
    if (k) {
        h->rmssd_ms = sqrt(dsq / (double)k);
        h->pnn50_pct = 100.0 * (double)over50 / (double)k;
    }
    if (k > 1) {
        double dmean = dsum / (double)k;
        double sdsd2 = (dsq - (double)k * dmean * dmean) / (double)(k - 1);
        sdsd2 = sdsd2 > 0 ? sdsd2 : 0;
        h->sd1_ms = sqrt(0.5 * sdsd2);
        if (isfinite(h->sdnn_ms)) {
            double v = 2.0 * h->sdnn_ms * h->sdnn_ms - 0.5 * sdsd2;
            h->sd2_ms = sqrt(v > 0 ? v : 0);
        }
    }
}

enum ecg_status ecg_hrv_compute(const double *rr_ms, const uint8_t *nn, const double *t_s,
                                size_t n, struct ecg_hrv *h, struct ecg_error *err)
{
    memset(h, 0, sizeof *h);
    h->n_intervals = n ? n - 1 : 0;
    h->hr_mean_bpm = h->hr_min_bpm = h->hr_max_bpm = NAN;
    h->nn_mean_ms = h->sdnn_ms = h->rmssd_ms = h->pnn50_pct = h->sd1_ms = h->sd2_ms = NAN;
    h->lf_ms2 = h->hf_ms2 = h->lf_hf = NAN;
    time_domain(rr_ms, nn, n, h);
    if (h->n_nn < 3)
        return ECG_OK;
    double *buf = malloc(2 * h->n_nn * sizeof *buf);
    if (!buf)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu intervals", h->n_nn);
    double *t = buf, *y = buf + h->n_nn;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (nn[i]) {
            t[m] = t_s[i];
            y[m++] = rr_ms[i];
        }
    }
    enum ecg_status status = ECG_OK;
    if (t[m - 1] - t[0] >= ECG_HRV_MIN_SPECTRAL_S) {
        status = band_power(t, y, m, ECG_HRV_LF_LO, ECG_HRV_LF_HI, &h->lf_ms2, err);
        if (status == ECG_OK)
            status = band_power(t, y, m, ECG_HRV_HF_LO, ECG_HRV_HF_HI, &h->hf_ms2, err);
        if (status == ECG_OK)
            h->lf_hf = h->hf_ms2 > 0 ? h->lf_ms2 / h->hf_ms2 : NAN;
    }
    free(buf);
    return status;
}

enum ecg_status ecg_hrv_assess(struct ecg_result *r, struct ecg_error *err)
{
    size_t n = r->n_beats, m = n ? n : 1;
    /* one block: RR intervals, beat times, then the bad-beat flags */
    double *rr = malloc(m * (2 * sizeof *rr + 1));
    uint8_t *bad = rr ? (uint8_t *)(rr + 2 * m) : NULL;
    enum ecg_status status = ECG_OK;
    if (!rr) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu beats", n);
        goto out;
    }
    if (!r->nn) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal", "hrv: no room for the NN flags");
        goto out;
    }
    double *t = rr + m;
    for (size_t i = 0; i < n; i++) {
        t[i] = (double)r->r_peak[i] / r->fs_hz;
        rr[i] = i ? 1000.0 * (double)(r->r_peak[i] - r->r_peak[i - 1]) / r->fs_hz : NAN;
        bad[i] = (r->readable && !r->readable[i]) ||
                 (r->outlier && r->kept && r->kept[i] && r->outlier[i]);
    }
    status = ecg_hrv_select_nn(rr, bad, n, r->nn, err);
    if (status == ECG_OK)
        status = ecg_hrv_compute(rr, r->nn, t, n, &r->hrv, err);
out:
    free(rr);
    return status;
}
