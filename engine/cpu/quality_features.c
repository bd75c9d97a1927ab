/*
 * quality_features.c - the CPU reference of the signal-quality features (engine/quality.h
 * defines them; gpu/cuda_quality.cu is the CUDA twin, bit-identical).
 *
 * Exactness is what lets the twin match bit for bit: min/max and equality tests of floats,
 * integer counts, and double sums accumulated in sample order. The build compiles C in ISO mode
 * (-std=c11), where GCC does not contract a * b + c into a fused multiply-add, and nothing here
 * is reassociated; the CUDA twin spells every operation with an explicit _rn intrinsic.
 */
#include "cpu.h"
#include "quality.h"

/* Features of window j (quality.h: struct ecg_quality_window). */
static void window_features(const float *x, size_t n, const struct ecg_quality_geometry *g,
                            size_t j, struct ecg_quality_window *w)
{
    size_t a = j * g->len, b = a + g->len < n ? a + g->len : n;
    float lo = x[a], hi = x[a];
    uint32_t repeat = 0;
    for (size_t i = a; i < b; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        repeat += i > 0 && x[i] == x[i - 1];
    }
    uint32_t at_max = 0, at_min = 0, qrs_n = 0, hf_n = 0;
    double s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, h2 = 0.0;
    for (size_t i = a; i < b; i++) {
        bool left_eq = i > 0 && x[i - 1] == x[i];
        bool right_eq = i + 1 < n && x[i + 1] == x[i];
        at_max += x[i] == hi && (left_eq || right_eq);
        at_min += x[i] == lo && (left_eq || right_eq);
        if (i >= a + g->lag_qrs) {
            double d = (double)x[i] - (double)x[i - g->lag_qrs];
            double d2 = d * d;
            s1 += d;
            s2 += d2;
            s3 += d2 * d;
            s4 += d2 * d2;
            qrs_n++;
        }
        if (i >= a + g->lag_hf && i + g->lag_hf < b) {
            double h = ((double)x[i + g->lag_hf] - (double)x[i]) -
                       ((double)x[i] - (double)x[i - g->lag_hf]);
            h2 += h * h;
            hf_n++;
        }
    }
    w->n = (uint32_t)(b - a);
    w->n_repeat = repeat;
    w->n_at_max = at_max;
    w->n_at_min = at_min;
    w->qrs_n = qrs_n;
    w->hf_n = hf_n;
    w->x_min = lo;
    w->x_max = hi;
    w->qrs_s1 = s1;
    w->qrs_s2 = s2;
    w->qrs_s3 = s3;
    w->qrs_s4 = s4;
    w->hf_s2 = h2;
}

void cpu_quality_features(const float *x, size_t n, double fs_hz,
                          struct ecg_quality_window *windows)
{
    struct ecg_quality_geometry g = ecg_quality_geometry_of(n, fs_hz);
    for (size_t j = 0; j < g.n_win; j++)
        window_features(x, n, &g, j, &windows[j]);
}
