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

#ifdef _OPENMP
#include <omp.h>
#endif

/* No product contracted into a sum (a fused multiply-add rounds once where the baseline build
 * rounds twice): every build of the band powers' loop gives the same bits. GCC contracts
 * nothing in ISO C mode; clang does by default. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

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

/* Intervals from which the NN selection runs in parallel (OpenMP; each interval's flags depend
 * on its neighbourhood only, so the thread count changes no result), and the intervals each of
 * its blocks takes. */
#define NN_PARALLEL_MIN 16384
#define NN_BLOCK 4096

/* Interval i's flags (bit 0 premature or bad, bit 1 no NN interval of itself) against its local
 * median med. */
static inline uint8_t nn_flag_of(const double *rr_ms, const uint8_t *bad, size_t i, double med)
{
    bool premature = rr_ms[i] < ECG_HRV_PREMATURE * med;
    bool own = !(rr_ms[i] > 0) || rr_ms[i] > ECG_HRV_LONG * med;
    return (uint8_t)((premature || (bad && bad[i])) | own << 1);
}

/*
 * The local median of a whole window (2 * ECG_HRV_LOCAL_HALF + 1 = 11 intervals) by a
 * selection network: the comparators of Batcher's merge-exchange sort of 11 (Knuth, TAOCP
 * 5.2.2, algorithm M) that lead to the middle output, 31 of its 37. A network's output is the
 * value the insertion sort of local_median() puts in the middle (tests/unit/test_hrv.c checks
 * it on every 0-1 input, which by the 0-1 principle covers every input, and against a plain
 * sort on random series with ties), and it has no branch to mispredict: the windows of
 * NN_LANES intervals side by side compile to vector min and max.
 */
static const unsigned char median11_net[][2] = {
    {0, 8}, {1, 9}, {2, 10}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {4, 8}, {5, 9}, {6, 10}, {0, 2},
    {1, 3}, {4, 6}, {5, 7}, {8, 10}, {2, 8}, {3, 9}, {2, 4}, {3, 5}, {6, 8}, {7, 9}, {0, 1},
    {2, 3}, {4, 5}, {6, 7}, {8, 9}, {1, 8}, {3, 10}, {3, 6}, {5, 8}, {5, 6},
};
#define NN_LANES 4
#define NN_WIN (2 * ECG_HRV_LOCAL_HALF + 1)

_Static_assert(NN_WIN == 11, "median11_net is the network of 11 inputs");

/* Intervals from i0 (whole windows only: i0 > HALF, i1 + HALF <= n) in groups of NN_LANES while
 * a whole group fits before i1, their local medians into med[]; returns where it stopped. */
static inline __attribute__((always_inline)) size_t median_whole_body(const double *restrict rr_ms,
                                                                    size_t i0, size_t i1,
                                                                    double *restrict med)
{
    size_t i = i0;
    for (; i + NN_LANES <= i1; i += NN_LANES) {
        double v[NN_WIN][NN_LANES];
        for (int k = 0; k < NN_WIN; k++)
            for (int l = 0; l < NN_LANES; l++)
                v[k][l] = rr_ms[i + l + k - ECG_HRV_LOCAL_HALF];
#pragma GCC unroll 31
        for (size_t c = 0; c < sizeof median11_net / sizeof median11_net[0]; c++) {
            double *a = v[median11_net[c][0]], *b = v[median11_net[c][1]];
            for (int l = 0; l < NN_LANES; l++) {
                double lo = a[l] < b[l] ? a[l] : b[l], hi = a[l] < b[l] ? b[l] : a[l];
                a[l] = lo;
                b[l] = hi;
            }
        }
        for (int l = 0; l < NN_LANES; l++)
            med[i + l] = v[NN_WIN / 2][l];
    }
    return i;
}

static size_t median_whole_base(const double *rr_ms, size_t i0, size_t i1, double *med)
{
    return median_whole_body(rr_ms, i0, i1, med);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static size_t median_whole_avx2(const double *rr_ms, size_t i0,
                                                                size_t i1, double *med)
{
    return median_whole_body(rr_ms, i0, i1, med);
}
#endif

/* The local medians of intervals [i0, i1) of n: whole windows by the network in groups (in AVX2
 * when avx2), the rest (windows cut by either end, a group's remainder) one by one by
 * local_median. */
static void local_medians(const double *rr_ms, size_t n, size_t i0, size_t i1, double *med,
                          bool avx2)
{
    const size_t lo = ECG_HRV_LOCAL_HALF + 1; /* the first whole window's interval */
    const size_t hi = n > ECG_HRV_LOCAL_HALF ? n - ECG_HRV_LOCAL_HALF : 0; /* past the last */
    size_t w0 = i0 > lo ? i0 : lo, w1 = i1 < hi ? i1 : hi;
    if (w0 >= w1)
        w0 = w1 = i1;
    for (size_t i = i0; i < w0; i++)
        med[i] = local_median(rr_ms, n, i);
    size_t i = w0;
#if defined(__x86_64__)
    if (avx2)
        i = median_whole_avx2(rr_ms, w0, w1, med);
    else
#endif
        i = median_whole_base(rr_ms, w0, w1, med);
    (void)avx2;
    for (; i < i1; i++)
        med[i] = local_median(rr_ms, n, i);
}

/* The AVX2 build of the local medians for way (AVX-512 takes it too: it has no build of its
 * own there). */
static bool way_avx2(enum ecg_hrv_way way)
{
#if defined(__x86_64__)
    return way == ECG_HRV_AVX2 || way == ECG_HRV_AVX512 ||
           (way == ECG_HRV_BEST && __builtin_cpu_supports("avx2"));
#else
    (void)way;
    return false;
#endif
}

void ecg_hrv_local_medians(const double *rr_ms, size_t n, double *med, enum ecg_hrv_way way)
{
    const bool avx2 = way_avx2(way);
    if (n >= NN_PARALLEL_MIN) { /* short ones stay out of OpenMP: ecg_parallel.h */
        const size_t blocks = (n - 1 + NN_BLOCK - 1) / NN_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t b = 0; b < blocks; b++) {
            size_t i0 = 1 + b * NN_BLOCK, i1 = i0 + NN_BLOCK < n ? i0 + NN_BLOCK : n;
            local_medians(rr_ms, n, i0, i1, med, avx2);
        }
    } else if (n > 1) {
        local_medians(rr_ms, n, 1, n, med, avx2);
    }
}

enum ecg_status ecg_hrv_select_nn(const double *rr_ms, const uint8_t *bad, size_t n,
                                  uint8_t *nn, struct ecg_error *err)
{
    if (!n)
        return ECG_OK;
    /* per beat: bit 0, an ectopic or bad beat (it spoils the intervals on both sides of it);
     * bit 1, an interval that is no NN interval of itself (not positive, or long) */
    double *med = malloc(n * (sizeof *med + 1)); /* n local medians, then n flags */
    if (!med)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu beats", n);
    uint8_t *flag = (uint8_t *)(med + n);
    ecg_hrv_local_medians(rr_ms, n, med, ECG_HRV_BEST);
    flag[0] = (uint8_t)(2 | (bad && bad[0]));
    for (size_t i = 1; i < n; i++)
        flag[i] = nn_flag_of(rr_ms, bad, i, med[i]);
    for (size_t i = 0; i < n; i++)
        nn[i] = !(flag[i] || (i > 0 && flag[i - 1] & 1));
    free(med);
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
 * LF and HF band powers: trapezoids of the Lomb-Scargle PSD (the same periodogram as
 * ecg_hrv_lomb) on one uniform grid over [LF_LO, HF_HI] whose step divides HRV_GRID_UNIT, so
 * that every band edge is a grid point. The step is at most 1 / (8 span) (8 points per spectral
 * line, whose width is 1 / span), coarsened for long recordings so that the grid costs at most
 * about LOMB_MAX_TERMS point-frequency terms (a 15-hour Holter of 57,000 NN intervals gets
 * 0.002 Hz; its spectrum is broadband, not lines).
 *
 * Cost. Each point's cos and sin are advanced from one frequency to the next by a rotation
 * instead of recomputed (two sincos per point in all). The sums over the points are split into
 * LOMB_LANES interleaved lanes (point i in lane i mod LOMB_LANES, each lane in increasing i,
 * the lanes combined by a fixed tree), which the compiler vectorises and the processor
 * overlaps; long series are also split into blocks summed in parallel (below). The order is
 * fixed, so the result depends neither on the machine, the thread count nor the backend.
 * Frequencies are taken in chunks of LOMB_CHUNK so that the lanes' sums stay in cache.
 *
 * A series with fewer than half of LOMB_BLOCKS blocks of points (under 8 x LOMB_BLOCK_MIN
 * intervals: from about 10 minutes to 9 hours of beats, whose grid still costs up to
 * LOMB_MAX_TERMS, ~5 ms on one core) is split by frequency as well: each chunk starts from its
 * own first frequency's cos and sin (each point's turned by whole chunks first), so every block
 * of every chunk runs in parallel. (With 8 blocks or more the blocks alone keep enough threads
 * busy, and the per-chunk starts would cost more memory traffic than they save.) That choice
 * depends on the series alone; test_hrv checks both ways against the direct periodogram.
 */
#define HRV_GRID_UNIT 0.01 /* every band edge (0.04, 0.15, 0.40 Hz) is a multiple of this */

/* The build of the sums' loop a series runs (lomb_chunk): the same arithmetic in each. */
enum lomb_isa { LOMB_BASE, LOMB_AVX2, LOMB_AVX512 };

static enum lomb_isa lomb_isa_of(enum ecg_hrv_way way)
{
#if defined(__x86_64__)
    switch (way) {
    case ECG_HRV_BEST:
        return __builtin_cpu_supports("avx512f") ? LOMB_AVX512
               : __builtin_cpu_supports("avx2")  ? LOMB_AVX2
                                                 : LOMB_BASE;
    case ECG_HRV_AVX2: return LOMB_AVX2;
    case ECG_HRV_AVX512: return LOMB_AVX512;
    case ECG_HRV_PORTABLE: return LOMB_BASE;
    }
#endif
    (void)way;
    return LOMB_BASE;
}
#define LOMB_LANES 8
#define LOMB_CHUNK 128

/* The four Lomb-Scargle sums of one frequency, lane by lane. */
struct lomb_sums {
    double c[LOMB_LANES], s[LOMB_LANES], c2[LOMB_LANES], s2[LOMB_LANES];
};

/* A lane tree: ((0 1) (2 3)) ((4 5) (6 7)). */
static double lane_total(const double *v)
{
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/*
 * Adds the points of one lane group (LOMB_LANES points, state arrays at that group) to the
 * sums of frequencies [0, k_n) of the chunk, advancing each point's rotation as it goes. A
 * point past the end has v = c = s = ds = 0, dc = 1: it adds nothing.
 */
static inline __attribute__((always_inline)) void lomb_group(double *restrict c,
                                                             double *restrict s,
                                                             const double *restrict dc,
                                                             const double *restrict ds,
                                                             const double *restrict v,
                                                             struct lomb_sums *restrict acc,
                                                             size_t k_n)
{
    double cc[LOMB_LANES], ss[LOMB_LANES];
    for (size_t l = 0; l < LOMB_LANES; l++) {
        cc[l] = c[l];
        ss[l] = s[l];
    }
    for (size_t k = 0; k < k_n; k++) {
        for (size_t l = 0; l < LOMB_LANES; l++) {
            acc[k].c[l] += v[l] * cc[l];
            acc[k].s[l] += v[l] * ss[l];
            acc[k].c2[l] += cc[l] * cc[l] - ss[l] * ss[l];
            acc[k].s2[l] += 2.0 * cc[l] * ss[l];
            double cn = cc[l] * dc[l] - ss[l] * ds[l];
            ss[l] = ss[l] * dc[l] + cc[l] * ds[l];
            cc[l] = cn;
        }
    }
    for (size_t l = 0; l < LOMB_LANES; l++) {
        c[l] = cc[l];
        s[l] = ss[l];
    }
}

/*
 * LOMB_SIDE lane groups at once: the same terms added to the same sums in the same order as
 * LOMB_SIDE calls of lomb_group (each frequency's sums take group g's terms, then g + 1's, ...),
 * so the same bits, but the groups' rotations, each a chain of dependent multiplications from
 * one frequency to the next, advance side by side instead of one chain after another, and each
 * frequency's sums are loaded and stored once for all of them.
 */
#define LOMB_SIDE 4
typedef double lomb_vec __attribute__((vector_size(LOMB_LANES * sizeof(double))));

/* Unaligned loads and stores of a lane group (macros: a function taking or returning a vector
 * type would have an ABI that depends on the build). */
#define LOMB_LOAD(x, p) memcpy(&(x), (p), sizeof(lomb_vec))
#define LOMB_STORE(p, x) memcpy((p), &(x), sizeof(lomb_vec))

static inline __attribute__((always_inline)) void lomb_groups_side(double *restrict c,
                                                                   double *restrict s,
                                                                   const double *restrict dc,
                                                                   const double *restrict ds,
                                                                   const double *restrict v,
                                                                   struct lomb_sums *restrict acc,
                                                                   size_t k_n)
{
    lomb_vec cc[LOMB_SIDE], ss[LOMB_SIDE], rc[LOMB_SIDE], rs[LOMB_SIDE], vv[LOMB_SIDE];
    const lomb_vec two = {2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0};
#pragma GCC unroll 4
    for (size_t q = 0; q < LOMB_SIDE; q++) {
        LOMB_LOAD(cc[q], c + q * LOMB_LANES);
        LOMB_LOAD(ss[q], s + q * LOMB_LANES);
        LOMB_LOAD(rc[q], dc + q * LOMB_LANES);
        LOMB_LOAD(rs[q], ds + q * LOMB_LANES);
        LOMB_LOAD(vv[q], v + q * LOMB_LANES);
    }
    for (size_t k = 0; k < k_n; k++) {
        lomb_vec sc, sv, sc2, ss2;
        LOMB_LOAD(sc, acc[k].c);
        LOMB_LOAD(sv, acc[k].s);
        LOMB_LOAD(sc2, acc[k].c2);
        LOMB_LOAD(ss2, acc[k].s2);
#pragma GCC unroll 4
        for (size_t q = 0; q < LOMB_SIDE; q++) {
            sc += vv[q] * cc[q];
            sv += vv[q] * ss[q];
            sc2 += cc[q] * cc[q] - ss[q] * ss[q];
            ss2 += two * cc[q] * ss[q];
            const lomb_vec cn = cc[q] * rc[q] - ss[q] * rs[q];
            ss[q] = ss[q] * rc[q] + cc[q] * rs[q];
            cc[q] = cn;
        }
        LOMB_STORE(acc[k].c, sc);
        LOMB_STORE(acc[k].s, sv);
        LOMB_STORE(acc[k].c2, sc2);
        LOMB_STORE(acc[k].s2, ss2);
    }
#pragma GCC unroll 4
    for (size_t q = 0; q < LOMB_SIDE; q++) {
        LOMB_STORE(c + q * LOMB_LANES, cc[q]);
        LOMB_STORE(s + q * LOMB_LANES, ss[q]);
    }
}

/* One chunk of frequencies over every group: LOMB_SIDE groups at a time by lomb_groups_side
 * when side, the rest one by one. The same arithmetic in every build below (none contracts a
 * product into its sum: AVX2 alone has no FMA, and the AVX-512 build is told not to), so the
 * same bits as the baseline build. Side by side pays where the registers hold four groups'
 * state (AVX-512: 32 registers of 8 doubles; bench_hrv, one core, 2,000-60,000 intervals:
 * 5.9-6.6 ms by AVX2 against 3.9-4.9 ms); with AVX2 or SSE it spills and loses (6.7 -> 8.1
 * ms), so they go one group at a time. */
static inline __attribute__((always_inline)) void lomb_chunk_body(double *c, double *s,
                                                                  const double *dc,
                                                                  const double *ds,
                                                                  const double *v, size_t groups,
                                                                  struct lomb_sums *acc,
                                                                  size_t k_n, bool side)
{
    size_t g = 0;
    for (; side && g + LOMB_SIDE <= groups; g += LOMB_SIDE) {
        size_t o = g * LOMB_LANES;
        lomb_groups_side(c + o, s + o, dc + o, ds + o, v + o, acc, k_n);
    }
    for (; g < groups; g++) {
        size_t o = g * LOMB_LANES;
        lomb_group(c + o, s + o, dc + o, ds + o, v + o, acc, k_n);
    }
}

static void lomb_chunk_base(double *c, double *s, const double *dc, const double *ds,
                            const double *v, size_t groups, struct lomb_sums *acc, size_t k_n)
{
    lomb_chunk_body(c, s, dc, ds, v, groups, acc, k_n, false);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void lomb_chunk_avx2(double *c, double *s,
                                                            const double *dc, const double *ds,
                                                            const double *v, size_t groups,
                                                            struct lomb_sums *acc, size_t k_n)
{
    lomb_chunk_body(c, s, dc, ds, v, groups, acc, k_n, false);
}

/* The same again with AVX-512: one lane group (LOMB_LANES = 8 doubles) is one register, and
 * LOMB_SIDE groups go side by side. AVX-512F has fused multiply-adds, but this file is built as
 * ISO C (-std=c11), where GCC contracts nothing (-ffp-contract=off), and the attribute repeats
 * it (clang, which contracts by default, is told not to by the pragma at the top of the file):
 * every product is rounded before its sum, as in the baseline build, so the bits are the same
 * (test_hrv compares every way). */
#if defined(__clang__)
#define LOMB_AVX512_BUILD __attribute__((target("avx512f")))
#else
#define LOMB_AVX512_BUILD \
    __attribute__((target("avx512f,prefer-vector-width=512"), optimize("fp-contract=off")))
#endif
LOMB_AVX512_BUILD static void lomb_chunk_avx512(double *c, double *s, const double *dc,
                                                const double *ds, const double *v, size_t groups,
                                                struct lomb_sums *acc, size_t k_n)
{
    lomb_chunk_body(c, s, dc, ds, v, groups, acc, k_n, true);
}
#endif

/* Points per block at least, and blocks at most: the points are split into
 * min(LOMB_BLOCKS, n / LOMB_BLOCK_MIN) contiguous blocks of whole lane groups, each summed on
 * its own (in parallel where OpenMP is there), their lane totals then combined by a fixed tree
 * over the blocks. The split depends on n alone, never on the thread count: the result is the
 * same with one thread or sixteen. */
#define LOMB_BLOCK_MIN 4096
#define LOMB_BLOCKS 16

static void lomb_chunk(double *c, double *s, const double *dc, const double *ds,
                       const double *v, size_t groups, struct lomb_sums *acc, size_t k_n,
                       enum lomb_isa isa)
{
    memset(acc, 0, k_n * sizeof *acc);
#if defined(__x86_64__)
    if (isa == LOMB_AVX512) {
        lomb_chunk_avx512(c, s, dc, ds, v, groups, acc, k_n);
        return;
    }
    if (isa == LOMB_AVX2) {
        lomb_chunk_avx2(c, s, dc, ds, v, groups, acc, k_n);
        return;
    }
#endif
    (void)isa;
    lomb_chunk_base(c, s, dc, ds, v, groups, acc, k_n);
}

/* The four sums of chunk frequency j: lane trees per block, then a tree over the blocks. */
static void lomb_totals(const struct lomb_sums *acc, size_t blocks, size_t j, double sum[4])
{
    double t[LOMB_BLOCKS][4];
    for (size_t b = 0; b < blocks; b++) {
        const struct lomb_sums *a = &acc[b * LOMB_CHUNK + j];
        t[b][0] = lane_total(a->c);
        t[b][1] = lane_total(a->s);
        t[b][2] = lane_total(a->c2);
        t[b][3] = lane_total(a->s2);
    }
    for (size_t step = 1; step < blocks; step *= 2)
        for (size_t b = 0; b + step < blocks; b += 2 * step)
            for (int q = 0; q < 4; q++)
                t[b][q] += t[b + step][q];
    for (int q = 0; q < 4; q++)
        sum[q] = t[0][q];
}

/* The points' state for the periodogram: times t and values y (n of them, mean subtracted into
 * v), each point's rotation at LF_LO (c, s) and of one grid step (dc, ds), padded to whole lane
 * groups. */
struct lomb_points {
    const double *t, *y;
    double mean, step;
    size_t n;
    double *c, *s, *dc, *ds, *v;
};

/* Point i's state (padding: nothing added, a unit rotation). */
static void lomb_point_rotation(const struct lomb_points *p, size_t i)
{
    if (i < p->n) {
        double dt = p->t[i] - p->t[0];
        sincos(2.0 * M_PI * ECG_HRV_LF_LO * dt, &p->s[i], &p->c[i]);
        sincos(2.0 * M_PI * p->step * dt, &p->ds[i], &p->dc[i]);
        p->v[i] = p->y[i] - p->mean;
    } else {
        p->c[i] = p->s[i] = p->ds[i] = p->v[i] = 0.0;
        p->dc[i] = 1.0;
    }
}

/* One chunk of frequencies over the points, split into blocks of lane groups. */
struct lomb_blocks {
    const struct lomb_points *p;
    size_t groups, blocks;
    struct lomb_sums *acc;
    size_t k_n;
    enum lomb_isa isa;
};

/* Block b's sums of the chunk (acc + b * LOMB_CHUNK). */
static void lomb_block(const struct lomb_blocks *lb, size_t b)
{
    const struct lomb_points *p = lb->p;
    size_t g0 = lb->groups * b / lb->blocks, g1 = lb->groups * (b + 1) / lb->blocks;
    size_t o = g0 * LOMB_LANES;
    lomb_chunk(p->c + o, p->s + o, p->dc + o, p->ds + o, p->v + o, g1 - g0,
               lb->acc + b * LOMB_CHUNK, lb->k_n, lb->isa);
}

/* Point-frequency terms from which lomb_by_chunks runs its chunks in parallel (fewer: one
 * thread, no OpenMP region; the same sums either way). */
#define LOMB_PARALLEL_TERMS (1u << 20)

/* Frequencies a chunk of lomb_by_chunks takes: half of LOMB_CHUNK, so that even the series with
 * the fewest frequencies there (7 blocks of points, ~300 frequencies) make enough tasks for 16
 * threads. */
#define LOMB_TASK_FREQS 64

/* lomb_by_chunks's tasks: the points (in blocks of lane groups), their per-chunk cos and sin
 * (2 x padded doubles each), each chunk's sums (LOMB_CHUNK apart per block, LOMB_TASK_FREQS
 * used) and the periodogram. */
struct lomb_chunks {
    const struct lomb_points *p;
    size_t groups, blocks, m, chunks;
    enum lomb_isa isa;
    double *rot;
    struct lomb_sums *acc;
};

/* Point i's starting cos and sin in every chunk, at its first frequency LF_LO + j
 * LOMB_TASK_FREQS step: chunk 0's are p's own, each next one the one before turned by the
 * point's rotation of LOMB_TASK_FREQS grid steps (one sincos per point; padding stays 0). */
static void lomb_chunk_starts(const struct lomb_chunks *lc, size_t i)
{
    const struct lomb_points *p = lc->p;
    const size_t padded = lc->groups * LOMB_LANES;
    double c = p->c[i], s = p->s[i], dc = 1.0, ds = 0.0;
    if (i < p->n)
        sincos(2.0 * M_PI * (double)LOMB_TASK_FREQS * p->step * (p->t[i] - p->t[0]), &ds, &dc);
    for (size_t j = 0; j < lc->chunks; j++) {
        lc->rot[2 * j * padded + i] = c;
        lc->rot[(2 * j + 1) * padded + i] = s;
        double cn = c * dc - s * ds;
        s = s * dc + c * ds;
        c = cn;
    }
}

/* Task t: block t % blocks of the points over chunk t / blocks, from the points' starting cos
 * and sin in that chunk (lomb_chunk_starts), advanced by p's one-step rotations within it. */
static void lomb_task(const struct lomb_chunks *lc, size_t t)
{
    const struct lomb_points *p = lc->p;
    const size_t j = t / lc->blocks, b = t % lc->blocks, k0 = j * LOMB_TASK_FREQS;
    const size_t padded = lc->groups * LOMB_LANES;
    const size_t k_n = lc->m - k0 < LOMB_TASK_FREQS ? lc->m - k0 : LOMB_TASK_FREQS;
    const size_t g0 = lc->groups * b / lc->blocks, g1 = lc->groups * (b + 1) / lc->blocks;
    const size_t o = g0 * LOMB_LANES;
    double *c = lc->rot + 2 * j * padded, *s = c + padded;
    lomb_chunk(c + o, s + o, p->dc + o, p->ds + o, p->v + o, g1 - g0,
               lc->acc + (j * lc->blocks + b) * LOMB_CHUNK, k_n, lc->isa);
}

/*
 * The periodogram psd[0, m) of the points p (groups lane groups in blocks as lomb_block splits
 * them), by tasks of one block over one chunk of LOMB_TASK_FREQS frequencies (lomb_task), all in
 * parallel, then each frequency's sums over the blocks by lomb_totals' tree: the same sums in
 * the same order on any number of threads.
 */
static enum ecg_status lomb_by_chunks(const struct lomb_points *p, size_t groups, size_t blocks,
                                      size_t m, enum lomb_isa isa, double *psd,
                                      struct ecg_error *err)
{
    const size_t padded = groups * LOMB_LANES;
    const size_t chunks = (m + LOMB_TASK_FREQS - 1) / LOMB_TASK_FREQS, tasks = chunks * blocks;
    struct lomb_chunks lc = {p, groups, blocks, m, chunks, isa, NULL, NULL};
    lc.rot = malloc(chunks * 2 * padded * sizeof *lc.rot);
    lc.acc = malloc(tasks * LOMB_CHUNK * sizeof *lc.acc);
    if (!lc.rot || !lc.acc) {
        free(lc.rot);
        free(lc.acc);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu frequencies", m);
    }
    int threads = 1; /* one: no OpenMP region at all (ecg_parallel.h) */
#ifdef _OPENMP
    if ((double)m * (double)p->n >= LOMB_PARALLEL_TERMS)
        threads = omp_get_max_threads() < (int)tasks ? omp_get_max_threads() : (int)tasks;
#endif
    if (threads > 1) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
        {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (size_t i = 0; i < padded; i++)
                lomb_chunk_starts(&lc, i);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (size_t t = 0; t < tasks; t++)
                lomb_task(&lc, t);
        }
    } else {
        for (size_t i = 0; i < padded; i++)
            lomb_chunk_starts(&lc, i);
        for (size_t t = 0; t < tasks; t++)
            lomb_task(&lc, t);
    }
    const double span = p->t[p->n - 1] - p->t[0];
    for (size_t k = 0; k < m; k++) {
        double sum[4];
        const size_t j = k / LOMB_TASK_FREQS;
        lomb_totals(lc.acc + j * blocks * LOMB_CHUNK, blocks, k % LOMB_TASK_FREQS, sum);
        psd[k] = lomb_point(sum[0], sum[1], sum[2], sum[3], p->n, span);
    }
    free(lc.rot);
    free(lc.acc);
    return ECG_OK;
}

/* The periodogram psd[0, m) of the points p by blocks alone (lomb_block): chunk after chunk of
 * LOMB_CHUNK frequencies, the points' rotations carried from one chunk to the next, the blocks
 * of each chunk on threads threads. Advances p's cos and sin. */
static enum ecg_status lomb_by_blocks(const struct lomb_points *p, size_t groups, size_t blocks,
                                      size_t m, enum lomb_isa isa, int threads, double *psd,
                                      struct ecg_error *err)
{
    struct lomb_sums *acc = malloc(blocks * LOMB_CHUNK * sizeof *acc);
    if (!acc)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu intervals", p->n);
    const double span = p->t[p->n - 1] - p->t[0];
    for (size_t k0 = 0; k0 < m; k0 += LOMB_CHUNK) {
        size_t k_n = m - k0 < LOMB_CHUNK ? m - k0 : LOMB_CHUNK;
        const struct lomb_blocks lb = {p, groups, blocks, acc, k_n, isa};
        if (threads > 1) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) num_threads(threads)
#endif
            for (size_t b = 0; b < blocks; b++)
                lomb_block(&lb, b);
        } else {
            for (size_t b = 0; b < blocks; b++)
                lomb_block(&lb, b);
        }
        for (size_t j = 0; j < k_n; j++) {
            double sum[4];
            lomb_totals(acc, blocks, j, sum);
            psd[k0 + j] = lomb_point(sum[0], sum[1], sum[2], sum[3], p->n, span);
        }
    }
    free(acc);
    return ECG_OK;
}

enum ecg_status ecg_hrv_band_powers(const double *t, const double *y, size_t n,
                                    enum ecg_hrv_way way, double *lf, double *hf,
                                    struct ecg_error *err)
{
    double span = t[n - 1] - t[0];
    double target = fmax(1.0 / (8.0 * span), (ECG_HRV_HF_HI - ECG_HRV_LF_LO) * (double)n /
                                                  LOMB_MAX_TERMS);
    double step = HRV_GRID_UNIT / ceil(HRV_GRID_UNIT / target);
    size_t k_mid = (size_t)lround((ECG_HRV_LF_HI - ECG_HRV_LF_LO) / step);
    size_t m = (size_t)lround((ECG_HRV_HF_HI - ECG_HRV_LF_LO) / step) + 1;
    size_t groups = (n + LOMB_LANES - 1) / LOMB_LANES, padded = groups * LOMB_LANES;
    size_t blocks = n / LOMB_BLOCK_MIN;
    blocks = blocks < 1 ? 1 : blocks > LOMB_BLOCKS ? LOMB_BLOCKS : blocks;
    /* the points' state, then the periodogram */
    double *state = malloc((5 * padded + m) * sizeof *state);
    if (!state)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "hrv: %zu intervals", n);
    double *c = state, *s = c + padded, *dc = s + padded, *ds = dc + padded, *v = ds + padded;
    double *psd = v + padded;
    double mean = 0.0;
    for (size_t i = 0; i < n; i++)
        mean += y[i];
    mean /= (double)n;
    const enum lomb_isa isa = lomb_isa_of(way);
    int threads = 1; /* one: no OpenMP region at all (ecg_parallel.h) */
#ifdef _OPENMP
    threads = omp_get_max_threads() < (int)blocks ? omp_get_max_threads() : (int)blocks;
#endif
    /* each point's rotation: cos and sin at LF_LO and of one grid step; padding adds nothing */
    const struct lomb_points pts = {t, y, mean, step, n, c, s, dc, ds, v};
    if (threads > 1) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
        for (size_t i = 0; i < padded; i++)
            lomb_point_rotation(&pts, i);
    } else {
        for (size_t i = 0; i < padded; i++)
            lomb_point_rotation(&pts, i);
    }
    enum ecg_status status = blocks < LOMB_BLOCKS / 2 && m > LOMB_TASK_FREQS
                                 ? lomb_by_chunks(&pts, groups, blocks, m, isa, psd, err)
                                 : lomb_by_blocks(&pts, groups, blocks, m, isa, threads, psd, err);
    double band[2] = {0.0, 0.0};
    for (size_t k = 1; status == ECG_OK && k < m; k++)
        band[k > k_mid] += 0.5 * (psd[k - 1] + psd[k]) * step;
    *lf = band[0];
    *hf = band[1];
    free(state);
    return status;
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
        status = ecg_hrv_band_powers(t, y, m, ECG_HRV_BEST, &h->lf_ms2, &h->hf_ms2, err);
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
