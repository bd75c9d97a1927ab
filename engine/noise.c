/*
 * noise.c - noise stress test records made the MIT-BIH Noise Stress Test Database way (Moody,
 * Muldrow and Mark, Computers in Cardiology 11:381-384, 1984; WFDB's `nst` and `sigamp`).
 *
 * A clean ECG lead x gets noise from a noise recording added in alternating stretches: clean up
 * to start_s (5 min), then noisy and clean by turns every period_s (2 min). The noise is scaled
 * so that in the noisy stretches the signal-to-noise ratio is snr_db, where
 *  - the signal's size is the peak-to-peak amplitude of its normal QRS complexes: max - min of x
 *    within +-50 ms of each reference beat of the normal class (N, L, R, e, j: nst's sigamp takes
 *    'N' alone, which leaves bundle-branch-block records such as 109 unmeasurable), trimmed mean (the largest and smallest
 *    5 % of the measurements left out) over the first 300 such beats, as `sigamp -a` measures it;
 *  - the noise's size is its RMS amplitude with the baseline removed: the RMS about the mean of
 *    each 1-second window, trimmed mean over the first 300 windows, as `sigamp -r` measures it;
 *  - gain = 10^(-snr/20) * sqrt(2) / 4 * pp / rms, nst's formula (for a sine wave whose peak to
 *    peak is pp, SNR = 10 log10(signal power / noise power)).
 * The noise is read from its own start alongside the record and wraps at its end. As nst does,
 * an offset keeps the output continuous where the gain switches, so a stretch starts and ends
 * without a step.
 *
 * Pure and reentrant; every buffer is the caller's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

#define QRS_HALF_WINDOW_S 0.050
#define RMS_WINDOW_S 1.0
#define TRIM_FRACTION 0.05
#define MAX_MEASUREMENTS 300 /* sigamp's default -n: the first 300 beats or windows */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Mean of v[0..n) without its smallest and largest TRIM_FRACTION (sorts v). */
static double trimmed_mean(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t cut = (size_t)((double)n * TRIM_FRACTION);
    double sum = 0.0;
    for (size_t i = cut; i < n - cut; i++)
        sum += v[i];
    return sum / (double)(n - 2 * cut);
}

enum ecg_status ecg_nst_amplitudes(const float *x, size_t n, const float *noise, size_t n_noise,
                                   double fs_hz, const struct ecg_annotations *ann,
                                   double *qrs_pp, double *noise_rms, struct ecg_error *err)
{
    const size_t half = (size_t)llround(QRS_HALF_WINDOW_S * fs_hz);
    const size_t win = (size_t)llround(RMS_WINDOW_S * fs_hz);
    size_t n_pp = 0, n_win = n_noise / (win ? win : 1);
    if (n_win > MAX_MEASUREMENTS)
        n_win = MAX_MEASUREMENTS;
    double *v = malloc(((ann->n > n_win ? ann->n : n_win) + 1) * sizeof *v);
    if (!v)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "noise mixer: %zu beats", ann->n);
    for (size_t b = 0; b < ann->n && n_pp < MAX_MEASUREMENTS; b++) {
        int64_t r = ann->sample[b];
        if (ecg_aami_class(ann->symbol[b]) != 'N' || r < (int64_t)half || r + (int64_t)half >= (int64_t)n)
            continue;
        float lo = x[r], hi = x[r];
        for (int64_t i = r - (int64_t)half; i <= r + (int64_t)half; i++) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
        }
        v[n_pp++] = (double)hi - (double)lo;
    }
    if (n_pp == 0) {
        free(v);
        return ecg_fail(err, ECG_ERR_UNSUPPORTED, "no_normal_beats",
                        "noise mixer: the record has no normal beat to measure QRS amplitude on");
    }
    *qrs_pp = trimmed_mean(v, n_pp);
    if (n_win == 0) {
        free(v);
        return ecg_fail(err, ECG_ERR_UNSUPPORTED, "noise_too_short",
                        "noise mixer: the noise recording is shorter than %g s", RMS_WINDOW_S);
    }
    for (size_t w = 0; w < n_win; w++) {
        const float *p = noise + w * win;
        double mean = 0.0, ss = 0.0;
        for (size_t i = 0; i < win; i++)
            mean += p[i];
        mean /= (double)win;
        for (size_t i = 0; i < win; i++)
            ss += ((double)p[i] - mean) * ((double)p[i] - mean);
        v[w] = sqrt(ss / (double)win);
    }
    *noise_rms = trimmed_mean(v, n_win);
    free(v);
    if (!(*noise_rms > 0.0))
        return ecg_fail(err, ECG_ERR_UNSUPPORTED, "flat_noise", "noise mixer: the noise is flat");
    return ECG_OK;
}

double ecg_nst_gain(double snr_db, double qrs_pp, double noise_rms)
{
    return pow(10.0, -snr_db / 20.0) * sqrt(2.0) / 4.0 * qrs_pp / noise_rms;
}

bool ecg_nst_noisy(double t_s, double start_s, double period_s)
{
    return t_s >= start_s && fmod(t_s - start_s, 2.0 * period_s) < period_s;
}

void ecg_nst_mix(float *x, size_t n, const float *noise, size_t n_noise, double fs_hz,
                 double gain, double start_s, double period_s)
{
    ecg_nst_mix_from(x, n, noise, n_noise, 0, fs_hz, gain, start_s, period_s);
}

void ecg_nst_mix_from(float *x, size_t n, const float *noise, size_t n_noise, size_t from,
                      double fs_hz, double gain, double start_s, double period_s)
{
    double offset = 0.0, g = 0.0, prev_out = 0.0, prev_in = 0.0, prev_noise = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double nz = n_noise ? noise[(i % n_noise + from % n_noise) % n_noise] : 0.0;
        const double want = ecg_nst_noisy((double)i / fs_hz, start_s, period_s) ? gain : 0.0;
        if (want != g && i > 0) {
            /* nst: keep the output continuous across the switch */
            g = want;
            offset = prev_in + g * prev_noise - prev_out;
        } else {
            g = want;
        }
        prev_in = x[i];
        prev_noise = nz;
        x[i] = (float)((double)x[i] + g * nz - offset);
        prev_out = x[i];
    }
}
