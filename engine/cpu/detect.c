/*
 * detect.c - R-peak detection (CPU reference).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifndef DEV_ENV_S
#define DEV_ENV_S 0.10
#endif
#ifndef DEV_SQUARE
#define DEV_SQUARE 0
#endif
#ifndef DEV_TH
#define DEV_TH 0.25
#endif
#ifndef DEV_TW
#define DEV_TW 0.5
#endif
#ifndef DEV_SB
#define DEV_SB 1.66
#endif
#ifndef DEV_SBTH
#define DEV_SBTH 0.5
#endif
#ifndef DEV_K
#define DEV_K 1.5
#endif
#ifndef DEV_POLAR
#define DEV_POLAR 1
#endif

size_t cpu_nms(const float *v, size_t n, size_t half, float floor_value, int64_t *peaks)
{
    size_t cap = 2 * half + 2, head = 0, count = 0, n_peaks = 0;
    size_t *dq = malloc(cap * sizeof *dq);
    if (!dq)
        return SIZE_MAX;
    size_t next = 0; /* next index to push */
    for (size_t i = 0; i < n; i++) {
        size_t hi = i + half < n - 1 ? i + half : n - 1;
        while (next <= hi) {
            while (count > 0 && v[dq[(head + count - 1) % cap]] < v[next])
                count--;
            dq[(head + count) % cap] = next;
            count++;
            next++;
        }
        while (dq[head] + half < i) {
            head = (head + 1) % cap;
            count--;
        }
        if (dq[head] == i && v[i] > floor_value)
            peaks[n_peaks++] = (int64_t)i;
    }
    free(dq);
    return n_peaks;
}

struct candidate {
    int64_t pos;
    float height;
    float slope;
};

static size_t secs(double s, double fs)
{
    double v = round(s * fs);
    return v < 1 ? 1 : (size_t)v;
}

static int float_cmp(const void *a, const void *b)
{
    float fa = *(const float *)a, fb = *(const float *)b;
    return (fa > fb) - (fa < fb);
}

static float median_of(float *buf, size_t n)
{
    qsort(buf, n, sizeof *buf, float_cmp);
    return buf[n / 2];
}

enum ecg_status cpu_detect(const struct ecg_plan *plan, const float *x, size_t n_in,
                           const float *y, const float *f, size_t n_a, int64_t **peaks_a,
                           int64_t **peaks_in, size_t *n_peaks, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    float *env = NULL;
    int64_t *cpos = NULL, *beats = NULL, *beats_in = NULL;
    struct candidate *cand = NULL;
    uint8_t *is_beat = NULL;
    size_t n_cand = 0, n_beats = 0;
    const double fs = plan->fs_a_hz;

    *peaks_a = NULL;
    *peaks_in = NULL;
    *n_peaks = 0;
    if (n_a == 0)
        return ECG_OK;

    env = malloc(n_a * sizeof *env);
    cpos = malloc(n_a * sizeof *cpos);
    if (!env || !cpos) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: %zu samples", n_a);
        goto out;
    }
    /* feature */
    {
        size_t half = secs(DEV_ENV_S, fs) / 2;
        double acc = 0;
        size_t lo = 0, hi = 0; /* window [lo, hi) */
        for (size_t i = 0; i < n_a; i++) {
            size_t want_hi = i + half + 1 < n_a ? i + half + 1 : n_a;
            size_t want_lo = i > half ? i - half : 0;
            while (hi < want_hi) {
                double v = DEV_SQUARE ? (double)f[hi] * f[hi] : fabs((double)f[hi]);
                acc += v;
                hi++;
            }
            while (lo < want_lo) {
                double v = DEV_SQUARE ? (double)f[lo] * f[lo] : fabs((double)f[lo]);
                acc -= v;
                lo++;
            }
            env[i] = (float)(acc / (double)(2 * half + 1));
        }
    }
    n_cand = cpu_nms(env, n_a, plan->nms_window / 2, 0.0f, cpos);
    if (n_cand == SIZE_MAX) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: nms");
        goto out;
    }
    cand = malloc((n_cand ? n_cand : 1) * sizeof *cand);
    is_beat = calloc(n_cand ? n_cand : 1, 1);
    if (!cand || !is_beat) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: candidates");
        goto out;
    }
    {
        size_t sw = secs(0.06, fs);
        for (size_t k = 0; k < n_cand; k++) {
            int64_t c = cpos[k];
            size_t lo = (size_t)c > sw ? (size_t)c - sw : 0;
            size_t hi = (size_t)c + sw < n_a - 1 ? (size_t)c + sw : n_a - 1;
            float s = 0;
            for (size_t i = lo; i < hi; i++) {
                float d = fabsf(y[i + 1] - y[i]);
                if (d > s)
                    s = d;
            }
            cand[k] = (struct candidate){c, env[c], s};
        }
    }

    /* sequential adaptive decision */
    {
        const int64_t refractory = (int64_t)plan->refractory;
        const int64_t twave = (int64_t)secs(0.36, fs);
        double spk = 0, npk = 0;
        float hbuf[64];
        size_t nh = 0;
        int64_t learn = (int64_t)secs(2.0, fs);
        for (size_t k = 0; k < n_cand && cand[k].pos < learn; k++) {
            if (nh < 64)
                hbuf[nh++] = cand[k].height;
            if (cand[k].height > spk)
                spk = cand[k].height;
        }
        npk = nh ? 0.5 * median_of(hbuf, nh) : 0;
        spk *= 0.5;
        if (npk > spk)
            npk = 0.5 * spk;
        double rr[8];
        size_t n_rr = 0;
        double rr_avg = fs; /* 1 s */
        int64_t last = -1;
        float last_slope = 0;
        size_t seg = 0; /* first candidate after the last beat */

#define ACCEPT(kk, w)                                                                       \
    do {                                                                                   \
        is_beat[kk] = 1;                                                                   \
        spk = (w) * cand[kk].height + (1 - (w)) * spk;                                     \
        if (last >= 0) {                                                                   \
            rr[n_rr % 8] = (double)(cand[kk].pos - last);                                  \
            n_rr++;                                                                        \
            size_t m = n_rr < 8 ? n_rr : 8;                                                \
            double s_ = 0;                                                                 \
            for (size_t q = 0; q < m; q++)                                                 \
                s_ += rr[q];                                                               \
            rr_avg = s_ / (double)m;                                                       \
        }                                                                                  \
        last = cand[kk].pos;                                                               \
        last_slope = cand[kk].slope;                                                       \
        seg = (kk) + 1;                                                                    \
    } while (0)

        for (size_t k = 0; k <= n_cand; k++) {
            int64_t now = k < n_cand ? cand[k].pos : (int64_t)n_a;
            /* search back */
            while (last >= 0 && (double)(now - last) > DEV_SB * rr_avg) {
                double th1 = npk + DEV_TH * (spk - npk);
                size_t best = SIZE_MAX;
                for (size_t j = seg; j < k; j++) {
                    if (cand[j].pos - last < refractory)
                        continue;
                    if (cand[j].height > DEV_SBTH * th1 &&
                        (best == SIZE_MAX || cand[j].height > cand[best].height))
                        best = j;
                }
                if (best == SIZE_MAX)
                    break;
                ACCEPT(best, 0.25);
            }
            if (k == n_cand)
                break;
            const struct candidate *c = &cand[k];
            if (last >= 0 && c->pos - last < refractory)
                continue;
            double th1 = npk + DEV_TH * (spk - npk);
            if (c->height > th1) {
                if (last >= 0 && c->pos - last < twave && c->slope < DEV_TW * last_slope) {
                    npk = 0.125 * c->height + 0.875 * npk;
                    continue;
                }
                ACCEPT(k, 0.125);
            } else {
                npk = 0.125 * c->height + 0.875 * npk;
            }
        }
#undef ACCEPT
    }
    for (size_t k = 0; k < n_cand; k++)
        n_beats += is_beat[k];
    beats = malloc((n_beats ? n_beats : 1) * sizeof *beats);
    beats_in = malloc((n_beats ? n_beats : 1) * sizeof *beats_in);
    if (!beats || !beats_in) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: beats");
        goto out;
    }
    {
        size_t b = 0;
        const double fs_in = plan->fs_in_hz;
        size_t win = secs(0.075, fs_in), bwin = secs(0.3, fs_in);
        size_t wa = secs(0.075, fs);
        float *tmp = malloc((2 * bwin + 1) * sizeof *tmp);
        if (!tmp) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: refine");
            goto out;
        }
        for (size_t k = 0; k < n_cand; k++) {
            if (!is_beat[k])
                continue;
            int64_t c = cand[k].pos;
            /* polarity from the filter response */
            size_t lo = (size_t)c > wa ? (size_t)c - wa : 0;
            size_t hi = (size_t)c + wa < n_a ? (size_t)c + wa : n_a - 1;
            float fmax = 0, fmin = 0;
            for (size_t i = lo; i <= hi; i++) {
                if (f[i] > fmax)
                    fmax = f[i];
                if (f[i] < fmin)
                    fmin = f[i];
            }
            int sign = fmax >= -fmin ? 1 : -1;
            int64_t ci = ecg_plan_to_input(plan, c);
            if (ci >= (int64_t)n_in)
                ci = (int64_t)n_in - 1;
            size_t blo = (size_t)ci > bwin ? (size_t)ci - bwin : 0;
            size_t bhi = (size_t)ci + bwin < n_in ? (size_t)ci + bwin : n_in - 1;
            size_t nb = 0;
            for (size_t i = blo; i <= bhi; i++)
                tmp[nb++] = x[i];
            float base = median_of(tmp, nb);
            size_t rlo = (size_t)ci > win ? (size_t)ci - win : 0;
            size_t rhi = (size_t)ci + win < n_in ? (size_t)ci + win : n_in - 1;
            {
                float pos = 0, neg = 0;
                for (size_t i = rlo; i <= rhi; i++) {
                    float d = x[i] - base;
                    if (d > pos) pos = d;
                    if (-d > neg) neg = -d;
                }
                if (sign > 0 && neg > DEV_K * pos) sign = -1;
                else if (sign < 0 && pos > DEV_K * neg) sign = 1;
            }
            size_t best = rlo;
            float bestv = -INFINITY;
            for (size_t i = rlo; i <= rhi; i++) {
                float v = DEV_POLAR ? (float)sign * (x[i] - base) : fabsf(x[i] - base);
                if (v > bestv) {
                    bestv = v;
                    best = i;
                }
            }
            beats[b] = c;
            beats_in[b] = (int64_t)best;
            b++;
        }
        free(tmp);
    }
    *peaks_a = beats;
    *peaks_in = beats_in;
    *n_peaks = n_beats;
    beats = beats_in = NULL;
out:
    free(env);
    free(cpos);
    free(cand);
    free(is_beat);
    free(beats);
    free(beats_in);
    return status;
}
