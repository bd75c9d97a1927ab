/*
 * cuda_detect.cu - R-peak detection on the device (twin of engine/cpu/detect.c; read that file
 * for the method). Steps, all on the ctx's stream; only the beat count goes to the host:
 *   1. envelope: a[i] = |f[i]| (|edge response| within half a kernel of either end), its
 *      maximum (cub::DeviceReduce::Max), then env[i] = the window mean of a quantised to
 *      integers with the CPU's power-of-two scale: integer sums are exact, so env is
 *      bit-identical to the CPU's running sum                          one thread per sample
 *   2. NMS: i is a candidate when env[i] > 0 and env[i] is the leftmost maximum of its window
 *      [i - half, i + half] (what cpu_nms computes)                    one thread per sample
 *   3. compaction of candidate indices (cub::DeviceSelect::Flagged, ascending)
 *   4. candidate height (prominence over the valleys to its neighbours) and slope
 *                                                                      one thread/candidate
 *   5. the adaptive pass, which flags the beats among the candidates: cuda_decide() in
 *      cuda_decide.cu (twin of engine/cpu/decide.c), by blocks of CPU_DETECT_BLOCK_S of signal
 *      with their warm-up, then the boundary merge
 *   6. compaction of accepted candidates; refinement of each to the input grid (windows
 *      bounded by the midpoints to its neighbours, polarity, sampled-baseline median, first
 *      maximum deflection)                                             one thread per beat
 *   7. the CPU's ordering filter (each kept beat at least 2 samples after the last kept one,
 *      in both grids): checked in parallel; when no beat could be dropped (the normal case)
 *      all are copied in parallel, otherwise one thread applies it in sequence.
 * One lead of at most SMALL_MAX samples (short strips: a 10-s strip at 250 Hz is 2,500) takes
 * steps 1-3 in one block (front_small_kernel), the rhythm check in another
 * (cuda_insert.cu's insert_small_kernel) and steps 6-7 in a third (settle_small_kernel, each
 * beat refined by a warp: refine_beat_warp), with the same per-sample functions and block-wide
 * compactions that give what the device-wide ones give: a short strip's front is launched as a
 * CUDA graph per analysis (cuda_batch.cu), whose launch costs the host about 0.2-0.35 us per
 * node (bench/RESULTS.md). A batched pass (cuda_small.cuh) runs the same bodies for all its
 * members at once, steps 1-4 in one kernel and the rhythm check with steps 6-7 in another.
 * cuda_detect() lays out the arguments (cuda_detect_common.cuh) and the scratch they point
 * into for all the steps, cuda_decide()'s included.
 *
 * Exactness: every float/double operation the CPU performs in a data-dependent decision is
 * done here in the same order with explicit round-to-nearest intrinsics (no FMA contraction),
 * so the peaks are identical to the CPU's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "cpu/cpu.h" /* CPU_DETECT_BLOCK_S, CPU_DETECT_WARMUP_S, CPU_DETECT_TAIL_S */
#include "cpu/detect_params.h" /* the detector's constants, shared with detect.c */
#include "cpu/fuse_core.h"     /* FUSE_WINDOW_S */
#include "cpu/noise_core.h"    /* the crest factor that sets the threshold */
#include "cuda_detect_common.cuh"
#include "cuda_small.cuh"

/* ---------------------------------------------------------------- 1-2: envelope and NMS */

/* |f[i]|, or |response to y extended by its end values| near either end (less the first
 * sample's level, as the filter takes it off: detect.c's edge_response). */
static __device__ float abs_value(const struct detect_args *a, size_t i)
{
    const size_t half = a->ricker_len / 2;
    float v;
    if (i >= half && i + half < a->n_a) {
        v = a->f[i];
    } else {
        double acc = 0.0;
        for (size_t k = 0; k < a->ricker_len; k++) {
            int64_t j = (int64_t)i + (int64_t)half - (int64_t)k;
            if (j < 0)
                j = 0;
            if (j > (int64_t)a->n_a - 1)
                j = (int64_t)a->n_a - 1;
            acc = DADD(acc, DMUL((double)a->ricker[k], (double)__fsub_rn(a->y[j], a->y[0])));
        }
        v = (float)acc;
    }
    return fabsf(v);
}

/* Thread i: absf[i] = abs_value(i). */
static __global__ void abs_kernel(struct detect_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n_a;
         i += (size_t)gridDim.x * blockDim.x)
        a.absf[i] = abs_value(&a, i);
}

/* The envelope's quantisation for the largest |response| peak: flat (all zero), or the scale
 * to integers and the unit back. */
struct envelope_scale {
    bool flat;
    float scale;
    double unit;
};

static __device__ struct envelope_scale envelope_scale_of(const struct detect_args *a,
                                                          float peak)
{
    struct envelope_scale e;
    int exponent = 0;
    /* no response, or only the rounding of a constant level: detect.c's envelope() */
    e.flat = !(peak > 0.0f) || !isfinite(peak) ||
             peak <= ldexpf(fabsf(a->y[0]), DETECT_FLAT_EXP);
    e.scale = 1.0f;
    e.unit = 0.0;
    if (!e.flat) {
        /* a whole window of the largest |f| stays below 2^30 */
        const size_t width = 2 * a->half_env + 1;
        int width_bits = 0;
        while (((size_t)1 << width_bits) < width)
            width_bits++;
        frexpf(peak, &exponent);
        e.scale = ldexpf(1.0f, 30 - exponent - width_bits);
        e.unit = __ddiv_rn(1.0, DMUL((double)e.scale, (double)width));
    }
    return e;
}

/* env[i] = (sum of quantised |f| over the window) * unit, as detect.c's envelope. */
static __device__ float envelope_value(const struct detect_args *a,
                                       const struct envelope_scale *e, size_t i)
{
    if (e->flat)
        return 0.0f;
    size_t lo = i > a->half_env ? i - a->half_env : 0;
    size_t hi = i + a->half_env < a->n_a - 1 ? i + a->half_env : a->n_a - 1;
    int32_t sum = 0;
    for (size_t j = lo; j <= hi; j++)
        sum += (int32_t)__fadd_rn(__fmul_rn(a->absf[j], e->scale), 0.5f);
    return (float)DMUL((double)sum, e->unit);
}

/* Thread i: env[i] = envelope_value(i), for the largest |response| *peak. */
static __global__ void envelope_kernel(struct detect_args a)
{
    const struct envelope_scale e = envelope_scale_of(&a, *a.peak);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n_a;
         i += (size_t)gridDim.x * blockDim.x)
        a.env[i] = envelope_value(&a, &e, i);
}

/* Whether i is a candidate: env[i] > 0 and the leftmost maximum of its window. */
static __device__ bool nms_flag(const struct detect_args *a, size_t i)
{
    const float v = a->env[i];
    bool peak = v > 0.0f;
    if (peak) {
        size_t lo = i > a->half_nms ? i - a->half_nms : 0;
        size_t hi = i + a->half_nms < a->n_a - 1 ? i + a->half_nms : a->n_a - 1;
        /* nearest neighbours first: most samples are ruled out at once */
        for (size_t d = 1; peak && (d <= i - lo || i + d <= hi); d++) {
            if (d <= i - lo && a->env[i - d] >= v)
                peak = false;
            if (i + d <= hi && a->env[i + d] > v)
                peak = false;
        }
    }
    return peak;
}

static __global__ void nms_kernel(struct detect_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n_a;
         i += (size_t)gridDim.x * blockDim.x)
        a.flag[i] = nms_flag(&a, i);
}

/* ---------------------------------------------------------------- 4: candidate features */

/* Thread k < max_cand: height (prominence) and slope of candidate k (detect.c's
 * describe_candidates), and flag[k] cleared so that the flags can mark accepted candidates
 * next (the NMS flags were consumed by the compaction). The valley between two candidates is
 * the minimum of env over [pos[k], pos[k + 1]]; thread k scans its two valleys itself. */
static __device__ __forceinline__ void candidate_one(const struct detect_args *a, size_t k)
{
    const size_t n_cand = (size_t)*a->n_cand;
    a->flag[k] = 0;
    if (k >= n_cand)
        return;
    const size_t c = (size_t)a->cpos[k];
    const size_t prev = k > 0 ? (size_t)a->cpos[k - 1] : 0;
    const size_t next = k + 1 < n_cand ? (size_t)a->cpos[k + 1] : a->n_a - 1;
    const float *env = a->env;
    float left_valley = env[prev];
    for (size_t i = prev + 1; i <= c; i++)
        left_valley = env[i] < left_valley ? env[i] : left_valley;
    float right_valley = env[c];
    for (size_t i = c + 1; i <= next; i++)
        right_valley = env[i] < right_valley ? env[i] : right_valley;
    float valley = left_valley > right_valley ? left_valley : right_valley;
    if (n_cand > 1 && k == 0 && c > 0)
        valley = right_valley; /* the recording starts inside its left valley */
    else if (n_cand > 1 && k == n_cand - 1 && c < a->n_a - 1)
        valley = left_valley; /* ... or ends inside its right one */
    size_t lo = c > a->slope_win ? c - a->slope_win : 0;
    size_t hi = c + a->slope_win < a->n_a - 1 ? c + a->slope_win : a->n_a - 1;
    float s = 0.0f;
    for (size_t i = lo; i < hi; i++) {
        float d = fabsf(__fsub_rn(a->y[i + 1], a->y[i]));
        s = d > s ? d : s;
    }
    float prominence = __fsub_rn(env[c], valley);
    if ((double)prominence < DMUL(DETECT_MIN_PROMINENCE, (double)env[c]))
        prominence = 0.0f; /* a ripple on a plateau, not a peak */
    a->height[k] = prominence;
    a->slope[k] = s;
}

static __device__ __forceinline__ void candidate_body(struct detect_args a, size_t max_cand)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < max_cand;
         k += (size_t)gridDim.x * blockDim.x)
        candidate_one(&a, k);
}

static __global__ void candidate_kernel(struct detect_args a, size_t max_cand)
{
    candidate_body(a, max_cand);
}

/* ---------------------------------------------------------------- 6-7: refinement */

/* ecg_plan_to_input(): round(index_a * down / up), halves up, floor division. */
static __device__ int64_t to_input(int64_t index_a, uint32_t up, uint32_t down)
{
    int64_t num = 2 * index_a * (int64_t)down + (int64_t)up;
    int64_t den = 2 * (int64_t)up;
    int64_t q = num / den;
    if ((num % den != 0) && (num < 0))
        q--;
    return q;
}

static __device__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Accepted candidate b of n_acc on the input grid (*ci) and its search window [*lo, *hi]
 * there (empty when *lo > *hi): detect.c's refine_all, the window of one beat. */
static __device__ void refine_window(const struct detect_args *a, size_t b, size_t n_acc,
                                     int64_t *ci_out, int64_t *lo_out, int64_t *hi_out)
{
    const int64_t n_in = (int64_t)a->n_in;
    const int64_t ci = clamp64(to_input(a->beats_c[b], a->up, a->down), 0, n_in - 1);
    int64_t lo = ci - a->reach_in, hi = ci + a->reach_in;
    if (b > 0) {
        int64_t mid = (to_input(a->beats_c[b - 1], a->up, a->down) + ci) / 2 + 1;
        if (lo < mid)
            lo = mid;
    }
    if (b + 1 < n_acc) {
        int64_t mid = (ci + to_input(a->beats_c[b + 1], a->up, a->down)) / 2;
        if (hi > mid)
            hi = mid;
    }
    *ci_out = ci;
    *lo_out = clamp64(lo, 0, n_in - 1);
    *hi_out = clamp64(hi, 0, n_in - 1);
}

/* Beat b refined to input sample best: ref_in[b] and ref_a[b] (the analysis grid's), unless
 * the CPU drops it there (ref_in[b] stays -1). */
static __device__ void refine_keep(const struct detect_args *a, size_t b, int64_t best)
{
    const int64_t n_a = (int64_t)a->n_a;
    /* to_analysis(): round(i * up / down), halves up */
    int64_t r_a = (2 * best * (int64_t)a->up + (int64_t)a->down) / (2 * (int64_t)a->down);
    if (r_a > n_a - 1)
        r_a = n_a - 1;
    if (best < 1 || r_a < 1 || best >= (int64_t)a->n_in - 1)
        return;
    a->ref_in[b] = best;
    a->ref_a[b] = r_a;
}

/* The polarity the peak is searched with: the larger lobe's sign, switched when the samples'
 * deviation from the baseline on the other side is DETECT_POLARITY_SWITCH times as large
 * (up, down: the largest deviation above and below it). */
static __device__ __forceinline__ int refine_polarity(int sign, float up, float down)
{
    if (sign > 0 && (double)down > DMUL(DETECT_POLARITY_SWITCH, (double)up))
        return -1;
    if (sign < 0 && (double)up > DMUL(DETECT_POLARITY_SWITCH, (double)down))
        return 1;
    return sign;
}

/* Accepted candidate b of n_acc refined to the input grid (detect.c's refine_all body and
 * refine_peak): ref_in[b] and ref_a[b], or ref_in[b] = -1 when the CPU would skip it before
 * the ordering test. */
static __device__ void refine_beat(const struct detect_args *a, size_t b, size_t n_acc)
{
    const int64_t n_in = (int64_t)a->n_in, n_a = (int64_t)a->n_a;
    const int64_t c = a->beats_c[b];
    int64_t ci, lo, hi;
    refine_window(a, b, n_acc, &ci, &lo, &hi);
    a->ref_in[b] = -1;
    if (lo > hi)
        return;
    /* polarity of the larger lobe of f */
    float f_max = 0.0f, f_min = 0.0f;
    for (int64_t i = clamp64(c - a->lobe_reach, 0, n_a - 1);
         i <= clamp64(c + a->lobe_reach, 0, n_a - 1); i++) {
        if (a->f[i] > f_max)
            f_max = a->f[i];
        if (a->f[i] < f_min)
            f_min = a->f[i];
    }
    int sign = f_max >= -f_min ? 1 : -1;
    /* baseline: median of every stride-th sample around ci */
    int64_t b_lo = clamp64(ci - a->base_reach, 0, n_in - 1);
    int64_t b_hi = clamp64(ci + a->base_reach, 0, n_in - 1);
    const int64_t stride = (b_hi - b_lo) / DETECT_BASELINE_POINTS + 1;
    float pts[DETECT_BASELINE_POINTS + 2];
    size_t nb = 0;
    for (int64_t i = b_lo; i <= b_hi; i += stride)
        pts[nb++] = a->x[i];
    const float base = median_small(pts, nb);
    float up = 0.0f, down = 0.0f;
    for (int64_t i = lo; i <= hi; i++) {
        float dev = __fsub_rn(a->x[i], base);
        if (dev > up)
            up = dev;
        if (-dev > down)
            down = -dev;
    }
    sign = refine_polarity(sign, up, down);
    int64_t best = lo;
    float best_dev = -INFINITY;
    for (int64_t i = lo; i <= hi; i++) {
        float dev = __fmul_rn((float)sign, __fsub_rn(a->x[i], base));
        if (dev > best_dev) {
            best_dev = dev;
            best = i;
        }
    }
    refine_keep(a, b, best);
}

static __global__ void refine_kernel(struct detect_args a)
{
    const size_t n_acc = (size_t)*a.n_acc;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < n_acc;
         b += (size_t)gridDim.x * blockDim.x)
        refine_beat(&a, b, n_acc);
}

/* Whether refined beat b could be dropped by the ordering test (refine_all's): it was dropped
 * itself, or it is not at least 2 samples after the one before it in both grids. */
/*
 * refine_beat(a, b, n_acc) by the 32 lanes of one warp (a short lead's steps 6-7): each loop
 * over the beat's samples is split among the lanes, each lane taking every 32nd index in
 * ascending order, and the lanes' partial results are combined by shuffles into exactly the
 * sequential loop's: the largest and smallest lobe values and deviations from 0 (a maximum
 * does not depend on the order it is taken in; a lane starts from 0 as the loop does, so a
 * signed zero never differs), and the first index of the largest deviation (the lanes' own
 * first, then the lowest index among equal values: the loop's strict ">"). The baseline's
 * points are gathered by the lanes and their median taken by lane 0 with median_small, as the
 * loop does. Lane 0 writes ref_in[b] and ref_a[b]. pts: the warp's scratch for the points.
 * One thread per beat walked ~150 samples in order while the block's other warps waited
 * (ncu: most of the step's time); the warp takes about 5 per lane.
 */
#define LANES 32u
static __device__ void refine_beat_warp(const struct detect_args *a, size_t b, size_t n_acc,
                                        unsigned lane, float *pts)
{
    const int64_t n_in = (int64_t)a->n_in, n_a = (int64_t)a->n_a;
    const int64_t c = a->beats_c[b];
    int64_t ci, lo, hi;
    refine_window(a, b, n_acc, &ci, &lo, &hi);
    if (lane == 0)
        a->ref_in[b] = -1;
    if (lo > hi)
        return;
    /* polarity of the larger lobe of f */
    float f_max = 0.0f, f_min = 0.0f;
    const int64_t l_lo = clamp64(c - a->lobe_reach, 0, n_a - 1);
    const int64_t l_hi = clamp64(c + a->lobe_reach, 0, n_a - 1);
    for (int64_t i = l_lo + lane; i <= l_hi; i += LANES) {
        const float v = a->f[i];
        if (v > f_max)
            f_max = v;
        if (v < f_min)
            f_min = v;
    }
    for (unsigned o = LANES / 2; o > 0; o /= 2) {
        const float hi_o = __shfl_xor_sync(0xffffffffu, f_max, o);
        const float lo_o = __shfl_xor_sync(0xffffffffu, f_min, o);
        f_max = hi_o > f_max ? hi_o : f_max;
        f_min = lo_o < f_min ? lo_o : f_min;
    }
    int sign = f_max >= -f_min ? 1 : -1;
    /* baseline: median of every stride-th sample around ci */
    const int64_t b_lo = clamp64(ci - a->base_reach, 0, n_in - 1);
    const int64_t b_hi = clamp64(ci + a->base_reach, 0, n_in - 1);
    const int64_t stride = (b_hi - b_lo) / DETECT_BASELINE_POINTS + 1;
    const size_t nb = (size_t)((b_hi - b_lo) / stride + 1); /* the loop's count, <= 17 */
    if (lane < nb)
        pts[lane] = a->x[b_lo + (int64_t)lane * stride];
    __syncwarp();
    float base = 0.0f;
    if (lane == 0)
        base = median_small(pts, nb);
    base = __shfl_sync(0xffffffffu, base, 0);
    __syncwarp(); /* pts is free for the next beat */
    float up = 0.0f, down = 0.0f;
    for (int64_t i = lo + lane; i <= hi; i += LANES) {
        const float dev = __fsub_rn(a->x[i], base);
        if (dev > up)
            up = dev;
        if (-dev > down)
            down = -dev;
    }
    for (unsigned o = LANES / 2; o > 0; o /= 2) {
        const float up_o = __shfl_xor_sync(0xffffffffu, up, o);
        const float down_o = __shfl_xor_sync(0xffffffffu, down, o);
        up = up_o > up ? up_o : up;
        down = down_o > down ? down_o : down;
    }
    sign = refine_polarity(sign, up, down);
    int64_t best = lo;
    float best_dev = -INFINITY;
    for (int64_t i = lo + lane; i <= hi; i += LANES) {
        const float dev = __fmul_rn((float)sign, __fsub_rn(a->x[i], base));
        if (dev > best_dev) {
            best_dev = dev;
            best = i;
        }
    }
    for (unsigned o = LANES / 2; o > 0; o /= 2) {
        const float dev_o = __shfl_xor_sync(0xffffffffu, best_dev, o);
        const int64_t best_o = __shfl_xor_sync(0xffffffffu, best, o);
        if (dev_o > best_dev || (dev_o == best_dev && best_o < best)) {
            best_dev = dev_o;
            best = best_o;
        }
    }
    if (lane == 0)
        refine_keep(a, b, best);
}
#undef LANES

static __device__ bool order_suspect(const struct detect_args *a, size_t b)
{
    bool bad = a->ref_in[b] < 0;
    if (b > 0 && !bad)
        bad = a->ref_in[b] < a->ref_in[b - 1] + 2 || a->ref_a[b] < a->ref_a[b - 1] + 2;
    return bad;
}

/* The ordering test in sequence, writing the final peaks and their count (one thread). */
static __device__ void order_sequential(const struct detect_args *a, size_t n_acc)
{
    size_t n = 0;
    int64_t last_in = 0, last_a = 0;
    for (size_t b = 0; b < n_acc; b++) {
        const int64_t r_in = a->ref_in[b];
        if (r_in < 0)
            continue;
        const int64_t r_a = a->ref_a[b];
        if (n > 0 && (r_in < last_in + 2 || r_a < last_a + 2))
            continue;
        a->peaks_in[n] = r_in;
        a->peaks_a[n] = r_a;
        last_in = r_in;
        last_a = r_a;
        n++;
    }
    *a->n_beats = (int64_t)n;
}

/* Thread b: flags (in *a.order_bad) a refined beat that the ordering test could drop: none
 * in the normal case, and then all are kept as they are. */
static __global__ void order_check_kernel(struct detect_args a)
{
    const size_t n_acc = (size_t)*a.n_acc;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < n_acc;
         b += (size_t)gridDim.x * blockDim.x)
        if (order_suspect(&a, b))
            atomicOr(a.order_bad, 1);
}

/* Thread b: when no beat is flagged, every refined beat is kept: copy them all. */
static __global__ void order_copy_kernel(struct detect_args a)
{
    if (*a.order_bad)
        return;
    const size_t n_acc = (size_t)*a.n_acc;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < n_acc;
         b += (size_t)gridDim.x * blockDim.x) {
        a.peaks_in[b] = a.ref_in[b];
        a.peaks_a[b] = a.ref_a[b];
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *a.n_beats = (int64_t)n_acc;
}

/* One thread, only when a beat was flagged: refine_all's ordering test in sequence (each kept
 * beat at least 2 samples after the last kept one, in both grids), writing the final peaks. */
static __global__ void order_kernel(struct detect_args a)
{
    if (blockIdx.x != 0 || threadIdx.x != 0 || !*a.order_bad)
        return;
    order_sequential(&a, (size_t)*a.n_acc);
}

/* Thread j: window j's envelope peak and mean (fuse_window_stats). */
static __global__ void crest_stats_kernel(struct detect_args a, size_t n_win)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n_win;
         j += (size_t)gridDim.x * blockDim.x) {
        float p;
        fuse_window_stats(a.env, a.n_a, a.crest_win, j, &p, &a.crest_mean[j]);
        a.crest_peak[j] = p;
    }
}

/* Thread j: window j's crest factor (noise_crest), which sets its candidates' threshold. */
static __global__ void crest_kernel(struct detect_args a, size_t n_win)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n_win;
         j += (size_t)gridDim.x * blockDim.x)
        a.crest[j] = noise_crest(a.crest_peak, a.crest_mean, n_win, j);
}

/* ---------------------------------------------------------------- 1-3 in one block */

/*
 * Steps 1-3 for one lead of at most SMALL_MAX samples (a 10-s strip at 250 Hz is 2,500), in
 * one block of DETECT_SMALL_THREADS instead of about nine launches (abs, max, envelope, the crest
 * windows' statistics and factors, NMS, the compaction's two): the same per-sample functions
 * between block barriers, the maximum by a block reduction (exact: the same value as
 * cub::DeviceReduce::Max), the compaction by a block scan over contiguous runs (the same
 * indices in the same ascending order as cub::DeviceSelect::Flagged). Writes what the
 * separate kernels write: absf, *peak, env, crest_peak/mean, crest, flag, cpos, *n_cand.
 */
#define SMALL_ITEMS 8
#define SMALL_MAX ((size_t)DETECT_SMALL_THREADS * SMALL_ITEMS)

/* The candidate's position, as the accepted ones are compacted (values cpos). */
struct cpos_of {
    const int64_t *cpos;
    __device__ int64_t operator()(size_t i) const { return cpos[i]; }
};

/* The larger of two values, as the device-wide maximum takes it ((x < y) ? y : x). */
struct max_of {
    __device__ float operator()(float x, float y) const { return x < y ? y : x; }
};

/*
 * The steps read around each sample (the envelope sums |f| over a window, the crest statistics
 * walk each one-second window on one thread, NMS looks at its neighbours): they read the
 * block's own copies of absf and then env in shared memory (stage), written as the global ones
 * are, instead of the global ones, whose every load would wait for the L2. Same values, same
 * order: the same bits.
 */
static __device__ __forceinline__ void front_small_body(struct detect_args a, size_t n_win,
                                                        size_t max_cand)
{
    typedef cub::BlockReduce<float, DETECT_SMALL_THREADS> block_max;
    __shared__ union {
        typename block_max::TempStorage max;
        detect_small_scan::TempStorage scan;
    } temp;
    __shared__ float peak;
    __shared__ float stage[SMALL_MAX]; /* absf, then env */
    const size_t n = a.n_a;
    struct detect_args staged = a;     /* the same arguments, reading the staged copy */
    float env[SMALL_ITEMS];
    staged.absf = stage;
    staged.env = stage;
    float local = -INFINITY;
    for (size_t i = threadIdx.x; i < n; i += DETECT_SMALL_THREADS) {
        const float v = abs_value(&a, i);
        a.absf[i] = v;
        stage[i] = v;
        local = max_of()(local, v);
    }
    const float top = block_max(temp.max).Reduce(local, max_of());
    if (threadIdx.x == 0) {
        peak = top;
        *a.peak = top;
    }
    __syncthreads(); /* absf and peak; temp is reused below */
    const struct envelope_scale e = envelope_scale_of(&a, peak);
#pragma unroll
    for (int k = 0; k < SMALL_ITEMS; k++) { /* env[] in registers: n <= SMALL_MAX */
        const size_t i = threadIdx.x + (size_t)k * DETECT_SMALL_THREADS;
        if (i < n) {
            env[k] = envelope_value(&staged, &e, i);
            a.env[i] = env[k];
        }
    }
    __syncthreads(); /* every read of the staged absf done */
#pragma unroll
    for (int k = 0; k < SMALL_ITEMS; k++) {
        const size_t i = threadIdx.x + (size_t)k * DETECT_SMALL_THREADS;
        if (i < n)
            stage[i] = env[k];
    }
    __syncthreads();
    for (size_t j = threadIdx.x; j < n_win; j += DETECT_SMALL_THREADS) {
        float p;
        fuse_window_stats(stage, a.n_a, a.crest_win, j, &p, &a.crest_mean[j]);
        a.crest_peak[j] = p;
    }
    __syncthreads();
    for (size_t j = threadIdx.x; j < n_win; j += DETECT_SMALL_THREADS)
        a.crest[j] = noise_crest(a.crest_peak, a.crest_mean, n_win, j);
    __syncthreads();
    for (size_t i = threadIdx.x; i < n; i += DETECT_SMALL_THREADS)
        a.flag[i] = nms_flag(&staged, i);
    __syncthreads();
    block_compact(a.flag, n, index_of(), a.cpos, a.n_cand, temp.scan);
    if (!max_cand)
        return;
    /* step 4 in the same block (the batched front): the candidates' valleys walk the staged
     * env; the compaction's flags, positions and count are read after the barrier */
    __syncthreads();
    for (size_t k = threadIdx.x; k < max_cand; k += DETECT_SMALL_THREADS)
        candidate_one(&staged, k);
}

static __global__ void __launch_bounds__(DETECT_SMALL_THREADS)
    front_small_kernel(struct detect_args a, size_t n_win)
{
    front_small_body(a, n_win, 0);
}

/* The batched front's (cuda_small.cuh): member blockIdx.y's steps 1-3 and its candidates'
 * features (step 4). */
static __global__ void __launch_bounds__(DETECT_SMALL_THREADS)
    front_small_batch_kernel(const struct small_front *ms)
{
    pdl_step_begin();
    front_small_body(ms[blockIdx.y].a, ms[blockIdx.y].n_win, ms[blockIdx.y].max_cand);
}

/* Steps 6 and 7 in one block (a short lead, with front_small_kernel): the accepted
 * candidates compacted (block_compact: the same positions in the same order), each refined
 * by a warp (refine_beat_warp), then the ordering check and the copy or the sequential test,
 * in place of the order flag's memset and six launches. Same functions, same peaks. */
static __device__ __forceinline__ void settle_small_body(struct detect_args a, size_t max_cand)
{
    __shared__ detect_small_scan::TempStorage temp;
    __shared__ int bad;
    __shared__ float pts[DETECT_SMALL_THREADS / 32][DETECT_BASELINE_POINTS + 2];
    cpos_of positions;
    positions.cpos = a.cpos;
    block_compact(a.flag, max_cand, positions, a.beats_c, a.n_acc, temp);
    if (threadIdx.x == 0)
        bad = 0;
    __syncthreads();
    const size_t n_acc = (size_t)*a.n_acc;
    /* a warp per beat (refine_beat_warp: the same peaks as refine_beat) */
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (size_t b = warp; b < n_acc; b += DETECT_SMALL_THREADS / 32)
        refine_beat_warp(&a, b, n_acc, lane, pts[warp]);
    __syncthreads();
    for (size_t b = threadIdx.x; b < n_acc; b += DETECT_SMALL_THREADS)
        if (order_suspect(&a, b))
            atomicOr(&bad, 1);
    __syncthreads();
    if (bad) {
        if (threadIdx.x == 0) {
            *a.order_bad = 1;
            order_sequential(&a, n_acc);
        }
        return;
    }
    for (size_t b = threadIdx.x; b < n_acc; b += DETECT_SMALL_THREADS) {
        a.peaks_in[b] = a.ref_in[b];
        a.peaks_a[b] = a.ref_a[b];
    }
    if (threadIdx.x == 0) {
        *a.order_bad = 0;
        *a.n_beats = (int64_t)n_acc;
    }
}

/* Beat b's crest factor: its analysis-grid peak's window's (cpu_detect_leads' beat_crest). */
static __device__ __forceinline__ void beat_crest_one(const struct detect_args *a, size_t b)
{
    a->beat_crest[b] = a->crest[(size_t)a->peaks_a[b] / a->crest_win];
}

/* Thread b: beat b's crest factor, once the peaks are final (a long lead's). */
static __global__ void beat_crest_kernel(struct detect_args a)
{
    const size_t n = (size_t)*a.n_beats;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < n;
         b += (size_t)gridDim.x * blockDim.x)
        beat_crest_one(&a, b);
}

/* The block's threads: every beat's crest factor, after a barrier that follows the peaks
 * settle_small_body writes (by one thread when it orders them in sequence). */
static __device__ __forceinline__ void beat_crest_block(const struct detect_args *a)
{
    const size_t n = (size_t)*a->n_beats;
    for (size_t b = threadIdx.x; b < n; b += DETECT_SMALL_THREADS)
        beat_crest_one(a, b);
}

static __global__ void __launch_bounds__(DETECT_SMALL_THREADS)
    settle_small_kernel(struct detect_args a, size_t max_cand)
{
    settle_small_body(a, max_cand);
    __syncthreads();
    beat_crest_block(&a);
}

/* The batched front's (cuda_small.cuh): member blockIdx.y's rhythm check (step 5, what
 * cuda_insert.cu's insert_small_kernel runs) and steps 6-7 in one block, then its counts
 * (candidates, accepted, beats) into counts[3 * member], as its own front copies them. The
 * barrier between them makes the check's cleared flags visible to the compaction, as the
 * kernel boundary of a lone front does. */
static __global__ void __launch_bounds__(DETECT_SMALL_THREADS)
    settle_small_batch_kernel(const struct small_front *ms, int64_t *counts)
{
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    insert_small_body(m->a, m->max_cand);
    __syncthreads();
    settle_small_body(m->a, m->max_cand);
    __syncthreads();
    beat_crest_block(&m->a);
    if (threadIdx.x == 0)
        for (int c = 0; c < 3; c++)
            counts[3 * (size_t)blockIdx.y + c] = m->a.n_cand[c];
}

/* ---------------------------------------------------------------- entry point */

#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

/* Prints the times between the marks (when the timer is on) and destroys the events. */
static void profile_report(struct detect_profile *p)
{
    if (p->on && p->n > 1 && cudaEventSynchronize(p->ev[p->n - 1]) == cudaSuccess) {
        fprintf(stderr, "cuda detect profile:");
        for (int i = 1; i < p->n; i++) {
            float ms = 0;
            (void)cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]);
            fprintf(stderr, " %s %.3f ms%s", p->name[i], ms, i + 1 < p->n ? "," : "\n");
        }
    }
    for (int i = 0; i < p->n; i++)
        (void)cudaEventDestroy(p->ev[i]);
    p->n = 0;
}

/* The plan's Ricker taps on the device (ctx->ricker), uploaded only when they differ from the
 * ones the ctx's previous request left there: the upload goes through h_stage and must wait
 * for the stream, a synchronisation per request otherwise. */
static enum ecg_status ricker_on_device(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                        struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const size_t bytes = plan->ricker_len * sizeof(float);
    if (ctx->ricker_len == plan->ricker_len && ctx->h_ricker &&
        memcmp(ctx->h_ricker, plan->ricker, bytes) == 0)
        return ECG_OK;
    ctx->generation++;
    ctx->ricker_len = 0;
    free(ctx->h_ricker);
    ctx->h_ricker = (float *)malloc(bytes ? bytes : 1);
    if (!ctx->h_ricker) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cuda_detect: taps");
        goto out;
    }
    memcpy(ctx->h_ricker, plan->ricker, bytes);
    ECG_TRY(dbuf_reserve(ctx, &ctx->ricker, bytes ? bytes : 1, err));
    ECG_TRY(stage_reserve(ctx, bytes + 64, err));
    ECG_TRY(ctx_sync(ctx, "detect", err)); /* the staging buffer is free */
    memcpy(ctx->h_stage, plan->ricker, bytes);
    CUDA_TRY(cudaMemcpyAsync(ctx->ricker.ptr, ctx->h_stage, bytes, cudaMemcpyHostToDevice,
                             ctx->stream));
    ctx->ricker_len = plan->ricker_len;
out:
    return status;
}

/* Where in the detector's 256-byte scalars (int64 words from n_cand) each lead's agreement
 * goes with two leads or more: words AGREE_AT to AGREE_AT + n_leads (16 leads: 192 bytes). */
#define AGREE_AT 8

/* Steps 1-7 and the copy of the counts to h_stage, queued on the ctx's stream; with nothing to
 * detect (fewer than 2 samples) queues nothing and sets ctx->n_beats to 0 for good. */
static enum ecg_status detect_steps(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                    struct detect_profile *prof, bool *queued,
                                    struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct detect_args a;
    struct table_layout t;
    size_t n_a, max_cand, off, bytes, temp_bytes = 0, temp2 = 0, temp3 = 0, k_max, n_blocks;
    char *base;
    thrust::counting_iterator<int64_t> counter(0);
    struct fuse_args fz;
    size_t n_leads = 1;
    bool small = false;

    memset(&fz, 0, sizeof fz);
    *queued = false;
    ECG_TRY(ctx_enter(ctx, err));
    ctx->n_beats = 0;
    ctx->n_agree = 0;
    ctx->emb_len = 0;
    ctx->encoded = false;
    n_a = ctx->n_a;
    memset(&a, 0, sizeof a);
    if (n_a < 2 || ctx->n_in < 2)
        goto out;
    a.half_env = detect_samples_of(DETECT_ENVELOPE_S, plan->fs_a_hz) / 2;
    a.half_nms = plan->nms_window / 2;
    a.slope_win = detect_samples_of(DETECT_SLOPE_S, plan->fs_a_hz);
    a.refractory = (int64_t)plan->refractory;
    a.twave = (int64_t)detect_samples_of(DETECT_TWAVE_S, plan->fs_a_hz);
    a.learn = (int64_t)detect_samples_of(DETECT_LEARN_S, plan->fs_a_hz);
    /* cpu_decide_blocks() and the geometry of cpu_decide_block_window() */
    a.block = (int64_t)detect_samples_of(CPU_DETECT_BLOCK_S, plan->fs_a_hz);
    a.warmup = (int64_t)detect_samples_of(CPU_DETECT_WARMUP_S, plan->fs_a_hz);
    a.tail = (int64_t)detect_samples_of(CPU_DETECT_TAIL_S, plan->fs_a_hz);
    a.refs_reach = (int64_t)detect_samples_of(CPU_DETECT_REFS_S, plan->fs_a_hz);
    n_blocks = n_a <= (size_t)a.block ? 1 : (n_a + (size_t)a.block - 1) / (size_t)a.block;
    a.fs = plan->fs_a_hz;
    a.reach_in = (int64_t)detect_samples_of(DETECT_REFINE_S, plan->fs_in_hz);
    a.lobe_reach = (int64_t)detect_samples_of(DETECT_REFINE_S, plan->fs_a_hz);
    a.base_reach = (int64_t)detect_samples_of(DETECT_BASELINE_S, plan->fs_in_hz);
    a.up = plan->up;
    a.down = plan->down;
    a.x = (const float *)ctx->input.ptr;
    a.y = (const float *)ctx->resampled.ptr;
    a.f = (const float *)ctx->filtered.ptr;
    a.ricker_len = plan->ricker_len;
    a.n_in = ctx->n_in;
    a.n_a = n_a;
    /* candidates are more than half_nms apart */
    max_cand = n_a / (a.half_nms + 1) + 2;

    n_leads = 1 + ctx->n_extra;
    fz.n_leads = n_leads;
    fz.n_a = n_a;
    fz.win = detect_samples_of(FUSE_WINDOW_S, plan->fs_a_hz);
    fz.n_win = n_a / fz.win + (n_a % fz.win ? 1 : 0);
    fz.y_extra = (const float *)ctx->extra_resampled.ptr;
    a.y_extra = fz.y_extra;
    a.n_leads = n_leads;
    a.unlike = unlike_geometry_of(plan->fs_a_hz);

    /* scratch: absf | env | flags | cpos | height | slope | beats_c | ref_in | ref_a |
     * block_first | block_last | refs | scalars | ins_k | ins_pos | ins_h | ins_mark |
     * crest_peak | crest_mean | crest, and
     * with several leads lead_env | peak | mean | level | weight | gain, and with three or
     * more at | agree */
    bytes = 2 * ALIGN256(n_a * sizeof(float)) + ALIGN256(n_a) +
            4 * ALIGN256(max_cand * sizeof(int64_t)) + 2 * ALIGN256(max_cand * sizeof(float)) +
            2 * ALIGN256(n_blocks * sizeof(struct block_end)) +
            ALIGN256(n_blocks * sizeof(struct decide_refs)) + 256 +
            2 * ALIGN256(max_cand * sizeof(int64_t)) + ALIGN256(max_cand * sizeof(float)) +
            ALIGN256(max_cand) +
            2 * ALIGN256(fz.n_win * sizeof(double)) + ALIGN256(fz.n_win * sizeof(float));
    if (n_leads > 1)
        bytes += ALIGN256(n_leads * n_a * sizeof(float)) +
                 4 * ALIGN256(n_leads * fz.n_win * sizeof(double)) +
                 ALIGN256(n_leads * fz.n_win * sizeof(float));
    if (n_leads > 1) /* the fusion's step 3a: at | agree */
        bytes += ALIGN256((n_leads + 1) * fz.n_win * sizeof(int64_t)) +
                 ALIGN256(n_leads * fz.n_win * sizeof(double));
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, bytes, err));
    base = (char *)ctx->scratch.ptr;
    off = 0;
    a.absf = (float *)(base + off);     off += ALIGN256(n_a * sizeof(float));
    a.env = (float *)(base + off);      off += ALIGN256(n_a * sizeof(float));
    a.flag = (uint8_t *)(base + off);   off += ALIGN256(n_a);
    a.cpos = (int64_t *)(base + off);   off += ALIGN256(max_cand * sizeof(int64_t));
    a.beats_c = (int64_t *)(base + off); off += ALIGN256(max_cand * sizeof(int64_t));
    a.ref_in = (int64_t *)(base + off); off += ALIGN256(max_cand * sizeof(int64_t));
    a.ref_a = (int64_t *)(base + off);  off += ALIGN256(max_cand * sizeof(int64_t));
    a.height = (float *)(base + off);   off += ALIGN256(max_cand * sizeof(float));
    a.slope = (float *)(base + off);    off += ALIGN256(max_cand * sizeof(float));
    a.block_first = (struct block_end *)(base + off);
    off += ALIGN256(n_blocks * sizeof(struct block_end));
    a.block_last = (struct block_end *)(base + off);
    off += ALIGN256(n_blocks * sizeof(struct block_end));
    a.refs = (struct decide_refs *)(base + off);
    off += ALIGN256(n_blocks * sizeof(struct decide_refs));
    a.n_cand = (int64_t *)(base + off);
    a.n_acc = a.n_cand + 1;
    a.n_beats = a.n_cand + 2;
    a.peak = (float *)(a.n_cand + 3);
    a.order_bad = (int *)(a.n_cand + 4);
    a.n_ins = a.n_cand + 5;
    off += 256;
    a.ins_k = (int64_t *)(base + off);   off += ALIGN256(max_cand * sizeof(int64_t));
    a.ins_pos = (int64_t *)(base + off); off += ALIGN256(max_cand * sizeof(int64_t));
    a.ins_h = (float *)(base + off);     off += ALIGN256(max_cand * sizeof(float));
    a.ins_mark = (uint8_t *)(base + off); off += ALIGN256(max_cand);
    a.crest_win = fz.win;
    a.crest_peak = (double *)(base + off); off += ALIGN256(fz.n_win * sizeof(double));
    a.crest_mean = (double *)(base + off); off += ALIGN256(fz.n_win * sizeof(double));
    a.crest = (float *)(base + off);       off += ALIGN256(fz.n_win * sizeof(float));
    if (n_leads > 1) {
        fz.lead_env = (const float *)(base + off); off += ALIGN256(n_leads * n_a * sizeof(float));
        double **stats[4] = {&fz.peak, &fz.mean, &fz.level, &fz.weight};
        for (int q = 0; q < 4; q++) {
            *stats[q] = (double *)(base + off);
            off += ALIGN256(n_leads * fz.n_win * sizeof(double));
        }
        fz.gain = (float *)(base + off); off += ALIGN256(n_leads * fz.n_win * sizeof(float));
    }
    if (n_leads > 1) {
        fz.at = (int64_t *)(base + off); off += ALIGN256((n_leads + 1) * fz.n_win * sizeof(int64_t));
        fz.agree = (double *)(base + off); off += ALIGN256(n_leads * fz.n_win * sizeof(double));
        fz.reach = (int64_t)detect_samples_of(FUSE_AGREE_S, plan->fs_a_hz);
    }
    small = n_leads == 1 && n_a <= SMALL_MAX; /* steps 1-3 and 7 in one block each */
    if (!small)
        CUDA_TRY(cudaMemsetAsync(a.order_bad, 0, sizeof(int), ctx->stream));

    ECG_TRY(ricker_on_device(ctx, plan, err));
    a.ricker = (const float *)ctx->ricker.ptr;
    ECG_TRY(stage_reserve(ctx, 3 * sizeof(int64_t), err)); /* the counts */

    CUDA_TRY(cub::DeviceReduce::Max(NULL, temp_bytes, a.absf, a.peak, (int64_t)n_a,
                                    ctx->stream));
    CUDA_TRY(cub::DeviceSelect::Flagged(NULL, temp2, counter, a.flag, a.cpos, a.n_cand,
                                        (int64_t)n_a, ctx->stream));
    CUDA_TRY(cub::DeviceSelect::Flagged(NULL, temp3, (const int64_t *)a.cpos, a.flag,
                                        a.beats_c, a.n_acc, (int64_t)max_cand, ctx->stream));
    if (temp2 > temp_bytes)
        temp_bytes = temp2;
    if (temp3 > temp_bytes)
        temp_bytes = temp3;
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp_bytes, err));

    profile_mark(prof, ctx->stream, "start");
    if (small) {
        front_small_kernel<<<1, DETECT_SMALL_THREADS, 0, ctx->stream>>>(a, fz.n_win);
        CUDA_LAUNCH_CHECK();
        profile_mark(prof, ctx->stream, "select");
        goto candidates;
    }
    /* each lead's envelope (the first lead's straight into env when it is the only one) */
    for (size_t l = 0; l < n_leads; l++) {
        struct detect_args al = a;
        if (l > 0) {
            al.y = (const float *)ctx->extra_resampled.ptr + (l - 1) * n_a;
            al.f = (const float *)ctx->extra_filtered.ptr + (l - 1) * n_a;
        }
        if (n_leads > 1)
            al.env = (float *)fz.lead_env + l * n_a;
        abs_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(al);
        CUDA_LAUNCH_CHECK();
        CUDA_TRY(cub::DeviceReduce::Max(ctx->cub_temp.ptr, temp_bytes, al.absf, al.peak,
                                        (int64_t)n_a, ctx->stream));
        envelope_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(al);
        CUDA_LAUNCH_CHECK();
    }
    if (n_leads > 1)
        ECG_TRY(cuda_fuse(ctx, &fz, a.env, err));
    if (fz.at) /* each lead's agreement, after the counts in the scalars (copied with them) */
        ECG_TRY(cuda_fuse_agree_mean(ctx, &fz, (double *)(a.n_cand + AGREE_AT), err));
    crest_stats_kernel<<<grid_for(fz.n_win), CUDA_THREADS, 0, ctx->stream>>>(a, fz.n_win);
    CUDA_LAUNCH_CHECK();
    crest_kernel<<<grid_for(fz.n_win), CUDA_THREADS, 0, ctx->stream>>>(a, fz.n_win);
    CUDA_LAUNCH_CHECK();
    profile_mark(prof, ctx->stream, "envelope");
    nms_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    profile_mark(prof, ctx->stream, "nms");
    CUDA_TRY(cub::DeviceSelect::Flagged(ctx->cub_temp.ptr, temp_bytes, counter, a.flag, a.cpos,
                                        a.n_cand, (int64_t)n_a, ctx->stream));
    profile_mark(prof, ctx->stream, "select");
candidates:
    candidate_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a, max_cand);
    CUDA_LAUNCH_CHECK();
    if (n_leads > 1)
        ECG_TRY(cuda_fuse_slopes(ctx, &fz, &a, max_cand, err));
    profile_mark(prof, ctx->stream, "candidates");
    ECG_TRY(cuda_decide(ctx, &a, n_blocks, prof, err)); /* flags the beats among them */
    ECG_TRY(cuda_reject_insertions(ctx, &a, max_cand, small, err));
    profile_mark(prof, ctx->stream, "insertions");
    /* the final peaks go to the table and peaks_a, both sized for every candidate */
    k_max = max_cand;
    table_layout(k_max, ctx->latent_dim, &t);
    ECG_TRY(dbuf_reserve(ctx, &ctx->table, t.bytes, err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->peaks_a, k_max * sizeof(int64_t), err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->beat_crest, k_max * sizeof(float), err));
    a.peaks_in = (int64_t *)ctx->table.ptr; /* moved to the r_peak column below */
    a.peaks_a = (int64_t *)ctx->peaks_a.ptr;
    a.beat_crest = (float *)ctx->beat_crest.ptr;
    if (small) {
        /* steps 6 and 7 in one block (settle_small_kernel) */
        settle_small_kernel<<<1, DETECT_SMALL_THREADS, 0, ctx->stream>>>(a, max_cand);
        CUDA_LAUNCH_CHECK();
    } else {
        /* accepted candidates' positions, ascending (flags past n_cand are clear) */
        CUDA_TRY(cub::DeviceSelect::Flagged(ctx->cub_temp.ptr, temp_bytes,
                                            (const int64_t *)a.cpos, a.flag, a.beats_c,
                                            a.n_acc, (int64_t)max_cand, ctx->stream));
        profile_mark(prof, ctx->stream, "select2");
        refine_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        profile_mark(prof, ctx->stream, "refine");
        order_check_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        order_copy_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        order_kernel<<<1, 1, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        beat_crest_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
    }
    profile_mark(prof, ctx->stream, "order");
    {
        const size_t words = fz.at ? AGREE_AT + n_leads : 3; /* the counts (and agreements) */
        ECG_TRY(stage_reserve(ctx, words * sizeof(int64_t), err));
        CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, a.n_cand, words * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, ctx->stream));
        ctx->n_agree = fz.at ? n_leads : 0;
    }
    /* The table was laid out for k_max beats with r_peak first (offset 0), where the peaks
     * now are; the other columns of the final layout start earlier, and are written later. */
    *queued = true;
    if (small) { /* the detector's part of the short front's record (cuda_small.cuh) */
        struct small_front *rec = small_record(ctx);
        if (rec) {
            rec->a = a;
            rec->n_win = fz.n_win;
            rec->max_cand = max_cand;
            rec->n_blocks = n_blocks;
            rec->detect_n_in = ctx->n_in;
            rec->detect_generation = ctx->generation;
        }
    } else if (ctx->small) {
        ctx->small->detect_n_in = 0; /* no short front: no batched front may reuse the record */
    }
out:
    return status;
}

/* ---------------------------------------------------------------- batched short fronts */

/* Contract in cuda_small.cuh. */
struct small_front *small_record(struct cuda_ctx *ctx)
{
    if (!ctx->small)
        ctx->small = (struct small_front *)calloc(1, sizeof *ctx->small);
    return ctx->small;
}

bool small_record_whole(const struct cuda_ctx *ctx, size_t n_in, double fs_in_hz)
{
    const struct small_front *s = ctx->small;
    return s && n_in > 0 && s->rs_n_in == n_in && s->filter_n_in == n_in &&
           s->detect_n_in == n_in && s->fs_in_hz == fs_in_hz &&
           s->rs_generation == ctx->generation && s->filter_generation == ctx->generation &&
           s->detect_generation == ctx->generation;
}

enum ecg_status small_batch_detect(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_cand, size_t max_blocks, int64_t *counts,
                                   cudaEvent_t *marks, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    /* steps 1-4: the candidates' features in the same block as steps 1-3 */
    CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), DETECT_SMALL_THREADS, 0, stream,
                        front_small_batch_kernel, members));
    if (marks) {
        small_mark(marks[0], stream);
        small_mark(marks[1], stream);
    }
    ECG_TRY(small_batch_decide(stream, members, k, max_blocks, marks ? marks[2] : NULL, err));
    if (marks)
        small_mark(marks[3], stream);
    if (marks) /* the rhythm check runs in steps 6-7's block */
        small_mark(marks[4], stream);
    CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), DETECT_SMALL_THREADS, 0, stream,
                        settle_small_batch_kernel, members, counts));
out:
    return status;
}

/* Reads the counts detect_steps copied (the stream waited for); sets ctx->n_beats. */
static void detect_counts(struct cuda_ctx *ctx, const struct detect_profile *prof)
{
    const int64_t *h_counts = (const int64_t *)ctx->h_stage;
    ctx->n_beats = (size_t)h_counts[2];
    for (size_t l = 0; l < ctx->n_agree; l++)
        ctx->lead_agree[l] = ((const double *)(h_counts + AGREE_AT))[l];
    if (prof && prof->on)
        fprintf(stderr, "cuda detect: %zu samples, %lld candidates, %lld accepted, %zu beats\n",
                ctx->n_a, (long long)h_counts[0], (long long)h_counts[1], ctx->n_beats);
}

extern "C" enum ecg_status cuda_detect(void *ctx_ptr, const struct ecg_plan *plan,
                                       size_t *n_beats_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct detect_profile prof;
    bool queued = false;
    memset(&prof, 0, sizeof prof);
    prof.on = getenv("ECG_CUDA_PROFILE") != NULL;
    *n_beats_out = 0;
    ECG_TRY(detect_steps(ctx, plan, &prof, &queued, err));
    if (queued) {
        ECG_TRY(ctx_sync(ctx, "detect", err));
        detect_counts(ctx, &prof);
    }
    *n_beats_out = ctx->n_beats;
out:
    profile_report(&prof);
    if (status != ECG_OK)
        ctx->n_beats = 0;
    return status;
}

enum ecg_status detect_queue(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                             struct ecg_error *err)
{
    struct detect_profile off;
    bool queued = false;
    memset(&off, 0, sizeof off); /* no timer: it would wait for its events */
    enum ecg_status status = detect_steps(ctx, plan, &off, &queued, err);
    /* a ctx that queued nothing (n_a < 2) collects 0 beats without waiting */
    ctx->detect_queued = status == ECG_OK && queued;
    return status;
}

enum ecg_status detect_collect(struct cuda_ctx *ctx, size_t *n_beats, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    *n_beats = 0;
    if (ctx->detect_queued) {
        ctx->detect_queued = false;
        ECG_TRY(ctx_sync(ctx, "detect", err));
        detect_counts(ctx, NULL);
    }
    *n_beats = ctx->n_beats;
out:
    if (status != ECG_OK)
        ctx->n_beats = 0;
    return status;
}
