/*
 * quality_features.c - the CPU reference of the signal-quality features (engine/quality.h
 * defines them; gpu/cuda_quality.cu is the CUDA twin, bit-identical).
 *
 * Exactness is what lets the twin match bit for bit: min/max and equality tests of floats,
 * integer counts, and double sums accumulated in the order quality_core.h defines (interleaved
 * lanes combined by a fixed tree), with the per-sample arithmetic in quality_core.h, shared with
 * the twin. Here one thread walks each window with the QUALITY_LANES lanes side by side in
 * blocks of QUALITY_LANES samples, so that the lanes' sums are independent chains the processor
 * overlaps (a single running double sum is latency-bound); each lane still takes its own
 * samples in increasing order, which is all the definition asks.
 */
#include <string.h>

#include "cpu.h"
#include "quality_core.h"

#define LANE(i, a) (((i) - (a)) & (QUALITY_LANES - 1))

/* Combines lanes p[0..QUALITY_LANES) into p[0] by the tree of quality_core.h. */
static inline __attribute__((always_inline)) void merge_tree(struct quality_lane *p, bool sums)
{
    for (size_t step = 1; step < QUALITY_LANES; step *= 2)
        for (size_t l = 0; l < QUALITY_LANES; l += 2 * step) {
            if (sums)
                quality_merge_sums(&p[l], &p[l + step]);
            else
                quality_merge_extremes(&p[l], &p[l + step]);
        }
}

/* The QRS-band moments of samples [from, to) of the window starting at a, into the lanes. */
static inline __attribute__((always_inline)) void qrs_moments(const float *x, size_t a, size_t from, size_t to, size_t lag,
                        struct quality_lane *p)
{
    double s1[QUALITY_LANES], s2[QUALITY_LANES], s3[QUALITY_LANES], s4[QUALITY_LANES];
    for (size_t l = 0; l < QUALITY_LANES; l++)
        s1[l] = s2[l] = s3[l] = s4[l] = 0.0;
    size_t i = from;
    for (; i < to && LANE(i, a); i++)
        quality_qrs_term(x, i, lag, &s1[LANE(i, a)], &s2[LANE(i, a)], &s3[LANE(i, a)],
                         &s4[LANE(i, a)]);
    for (; i + QUALITY_LANES <= to; i += QUALITY_LANES)
        for (size_t l = 0; l < QUALITY_LANES; l++)
            quality_qrs_term(x, i + l, lag, &s1[l], &s2[l], &s3[l], &s4[l]);
    for (; i < to; i++)
        quality_qrs_term(x, i, lag, &s1[LANE(i, a)], &s2[LANE(i, a)], &s3[LANE(i, a)],
                         &s4[LANE(i, a)]);
    for (size_t l = 0; l < QUALITY_LANES; l++) {
        p[l].s1 = s1[l];
        p[l].s2 = s2[l];
        p[l].s3 = s3[l];
        p[l].s4 = s4[l];
    }
}

/* The HF second-difference energy of samples [from, to) without the spikes over cap, and the
 * count of the terms kept, into the lanes. */
static inline __attribute__((always_inline)) void hf_energy(const float *x, size_t a,
                                                            size_t from, size_t to, size_t lag,
                                                            double cap, struct quality_lane *p)
{
    double h2[QUALITY_LANES] = {0};
    uint32_t kept[QUALITY_LANES] = {0};
    size_t i = from;
    for (; i < to && LANE(i, a); i++)
        quality_hf_term(x, i, lag, cap, &h2[LANE(i, a)], &kept[LANE(i, a)]);
    for (; i + QUALITY_LANES <= to; i += QUALITY_LANES)
        for (size_t l = 0; l < QUALITY_LANES; l++)
            quality_hf_term(x, i + l, lag, cap, &h2[l], &kept[l]);
    for (; i < to; i++)
        quality_hf_term(x, i, lag, cap, &h2[LANE(i, a)], &kept[LANE(i, a)]);
    for (size_t l = 0; l < QUALITY_LANES; l++) {
        p[l].h2 = h2[l];
        p[l].hf_n = kept[l];
    }
}

/* Four lanes side by side (GCC and clang vector extensions: each element the scalar code's
 * product and sum, rounded the same way; no contraction into an FMA under ISO C). */
typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

#define MAINS_PHASES_MAX 2048 /* samples a window holds at ECG_FS_MAX_HZ, and some */

/*
 * The phases of a window's samples at each mains frequency, c[f][k] and s[f][k] for k = i - a
 * in [0, len), as the lanes turn them: lane k mod QUALITY_LANES from its first sample by
 * quality_mains_step's turns (the very doubles the CUDA twin turns on the fly). Taken once per
 * recording, so that each window's fit sums are plain products (no chain of turns per window).
 */
struct mains_phases {
    double c[ECG_QUALITY_MAINS][MAINS_PHASES_MAX], s[ECG_QUALITY_MAINS][MAINS_PHASES_MAX];
};

/* Fills ph for windows of g->len samples; false when they are longer than it holds. */
static bool mains_phases_make(const struct ecg_quality_geometry *g, struct mains_phases *ph)
{
    if (g->len > MAINS_PHASES_MAX)
        return false;
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++)
        for (size_t l = 0; l < QUALITY_LANES && l < g->len; l++) {
            struct ecg_quality_turn t = quality_lane_phase(g, f, l);
            double sink_c = 0.0, sink_s = 0.0;
            for (size_t k = l; k < g->len; k += QUALITY_LANES) {
                ph->c[f][k] = t.c;
                ph->s[f][k] = t.s;
                quality_mains_step(0.0, &sink_c, &sink_s, &t.c, &t.s, g->mains_lane[f].c,
                                   g->mains_lane[f].s);
            }
        }
    return true;
}

/* The mains line's fit sums of window [a, b), into the lanes: quality_mains_term's products and
 * sums, four lanes to a vector, each lane's samples in increasing order; ph NULL (windows
 * longer than the table): quality_mains_term itself, turning as it goes. */
static inline __attribute__((always_inline)) void mains_sums(const float *x, size_t a, size_t b,
                                                             const struct ecg_quality_geometry *g,
                                                             const struct mains_phases *ph,
                                                             struct quality_lane *p)
{
    if (!ph) {
        struct ecg_quality_turn t[QUALITY_LANES][ECG_QUALITY_MAINS];
        for (size_t l = 0; l < QUALITY_LANES; l++)
            for (size_t f = 0; f < ECG_QUALITY_MAINS; f++)
                t[l][f] = quality_lane_phase(g, f, l);
        for (size_t i = a; i < b; i++)
            quality_mains_term(&p[LANE(i, a)], t[LANE(i, a)], x, a, i, g);
        return;
    }
    const double first = (double)x[a];
    const float *xa = x + a;
    const size_t len = b - a;
    const v4d base = {first, first, first, first};
    for (size_t f = 0; f < ECG_QUALITY_MAINS; f++) {
        const double *pc = ph->c[f], *ps = ph->s[f];
        v4d mc_lo = {0}, mc_hi = {0}, ms_lo = {0}, ms_hi = {0}; /* lanes 0-3 and 4-7 */
        size_t k = 0;
        for (; k + QUALITY_LANES <= len; k += QUALITY_LANES) {
            v4f x_lo, x_hi;
            v4d c_lo, c_hi, s_lo, s_hi;
            memcpy(&x_lo, xa + k, sizeof x_lo);
            memcpy(&x_hi, xa + k + 4, sizeof x_hi);
            memcpy(&c_lo, pc + k, sizeof c_lo);
            memcpy(&c_hi, pc + k + 4, sizeof c_hi);
            memcpy(&s_lo, ps + k, sizeof s_lo);
            memcpy(&s_hi, ps + k + 4, sizeof s_hi);
            const v4d v_lo = __builtin_convertvector(x_lo, v4d) - base;
            const v4d v_hi = __builtin_convertvector(x_hi, v4d) - base;
            mc_lo += v_lo * c_lo;
            mc_hi += v_hi * c_hi;
            ms_lo += v_lo * s_lo;
            ms_hi += v_hi * s_hi;
        }
        double mc[QUALITY_LANES], ms[QUALITY_LANES];
        memcpy(mc, &mc_lo, sizeof mc_lo);
        memcpy(mc + 4, &mc_hi, sizeof mc_hi);
        memcpy(ms, &ms_lo, sizeof ms_lo);
        memcpy(ms + 4, &ms_hi, sizeof ms_hi);
        for (; k < len; k++) { /* the last, partial row */
            const double v = (double)xa[k] - first;
            mc[k & (QUALITY_LANES - 1)] += v * pc[k];
            ms[k & (QUALITY_LANES - 1)] += v * ps[k];
        }
        for (size_t l = 0; l < QUALITY_LANES; l++) {
            p[l].mc[f] = mc[l];
            p[l].ms[f] = ms[l];
        }
    }
}

/* Features of window j (quality.h: struct ecg_quality_window). */
static inline __attribute__((always_inline)) void window_features(const float *x, size_t n, const struct ecg_quality_geometry *g,
                            const struct mains_phases *ph, size_t j, struct ecg_quality_window *w)
{
    size_t a = j * g->len, b = a + g->len < n ? a + g->len : n;
    struct quality_lane p[QUALITY_LANES];
    for (size_t l = 0; l < QUALITY_LANES; l++)
        p[l] = quality_lane_start(x[a]);
    /* first walk: extremes by lane (the tree settles ties), repeats */
    float lo[QUALITY_LANES], hi[QUALITY_LANES];
    for (size_t l = 0; l < QUALITY_LANES; l++)
        lo[l] = hi[l] = x[a];
    size_t i = a;
    for (; i + QUALITY_LANES <= b; i += QUALITY_LANES)
        for (size_t l = 0; l < QUALITY_LANES; l++) {
            lo[l] = x[i + l] < lo[l] ? x[i + l] : lo[l];
            hi[l] = x[i + l] > hi[l] ? x[i + l] : hi[l];
        }
    for (; i < b; i++) {
        lo[LANE(i, a)] = x[i] < lo[LANE(i, a)] ? x[i] : lo[LANE(i, a)];
        hi[LANE(i, a)] = x[i] > hi[LANE(i, a)] ? x[i] : hi[LANE(i, a)];
    }
    uint32_t repeat = 0;
    for (i = a > 0 ? a : 1; i < b; i++)
        repeat += x[i] == x[i - 1];
    for (size_t l = 0; l < QUALITY_LANES; l++) {
        p[l].lo = lo[l];
        p[l].hi = hi[l];
    }
    merge_tree(p, false);
    float w_lo = p[0].lo, w_hi = p[0].hi;
    const double cap = quality_spike_cap(w_lo, w_hi);
    /* second walk: plateaus at the extremes, then the sums lane by lane */
    uint32_t at_max = 0, at_min = 0;
    for (i = a; i < b; i++)
        if ((x[i] == w_hi || x[i] == w_lo) && quality_plateau(x, n, i)) {
            at_max += x[i] == w_hi;
            at_min += x[i] == w_lo;
        }
    for (size_t l = 0; l < QUALITY_LANES; l++)
        p[l] = quality_lane_start(x[a]);
    if (a + g->lag_qrs < b)
        qrs_moments(x, a, a + g->lag_qrs, b, g->lag_qrs, p);
    if (a + g->lag_hf + g->lag_hf < b)
        hf_energy(x, a, a + g->lag_hf, b - g->lag_hf, g->lag_hf, cap, p);
    mains_sums(x, a, b, g, ph, p);
    merge_tree(p, true);
    struct quality_line line = quality_mains_line(&p[0], a, b, g);
    if (line.f >= 0) { /* hum: the moments and second difference again, the line taken out */
        struct quality_lane q[QUALITY_LANES];
        struct ecg_quality_turn t[QUALITY_LANES];
        for (size_t l = 0; l < QUALITY_LANES; l++) {
            q[l] = quality_lane_start(x[a]);
            t[l] = quality_lane_phase(g, (size_t)line.f, l);
        }
        for (i = a; i < b; i++)
            quality_lineless_term(&q[LANE(i, a)], &t[LANE(i, a)], x, a, b, i, g, &line, cap);
        merge_tree(q, true);
        p[0].s1 = q[0].s1;
        p[0].s2 = q[0].s2;
        p[0].s3 = q[0].s3;
        p[0].s4 = q[0].s4;
        p[0].h2 = q[0].h2;
        p[0].hf_n = q[0].hf_n;
    }
    p[0].lo = w_lo;
    p[0].hi = w_hi;
    p[0].repeat = repeat;
    p[0].at_max = at_max;
    p[0].at_min = at_min;
    p[0].qrs_n = (uint32_t)(a + g->lag_qrs < b ? b - a - g->lag_qrs : 0);
    quality_window_of(&p[0], a, b, w);
}

/*
 * Every window, compiled twice: for the baseline and with AVX2 (the lanes' double sums four to
 * a register instead of two: a 10-s strip in 5.8 us instead of 7.0 on the development VM). The
 * same operations in the same order either way (AVX2 without FMA, and ISO C allows no
 * contraction), hence the same bits.
 */
static inline __attribute__((always_inline)) void all_windows(
    const float *x, size_t n, const struct ecg_quality_geometry *g,
    const struct mains_phases *ph, struct ecg_quality_window *windows)
{
    for (size_t j = 0; j < g->n_win; j++)
        window_features(x, n, g, ph, j, &windows[j]);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void all_windows_avx2(
    const float *x, size_t n, const struct ecg_quality_geometry *g,
    const struct mains_phases *ph, struct ecg_quality_window *windows)
{
    all_windows(x, n, g, ph, windows);
}
#endif

void cpu_quality_features(const float *x, size_t n, double fs_hz,
                          struct ecg_quality_window *windows)
{
    struct ecg_quality_geometry g = ecg_quality_geometry_of(n, fs_hz);
    struct mains_phases phases; /* 64 KiB */
    const struct mains_phases *ph = mains_phases_make(&g, &phases) ? &phases : NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        all_windows_avx2(x, n, &g, ph, windows);
        return;
    }
#endif
    all_windows(x, n, &g, ph, windows);
}
