/*
 * cuda_detect.cu - R-peak detection on the device (twin of engine/cpu/detect.c; read that file
 * for the method). Steps, all on the ctx's stream, nothing through the host but the count:
 *   1. feature: env[i] = mean of |f| over i +- half_env       one thread per sample
 *   2. NMS: i is a candidate when env[i] > 0 and env[i] is the first maximum of its window
 *      [i - half, i + half] (the CPU's monotone deque keeps exactly that)   one thread/sample
 *   3. compaction of candidate indices (cub::DeviceSelect::Flagged: ascending)
 *   4. candidate slope: max |y[t+1] - y[t]| around each                 one thread/candidate
 *   5. the sequential adaptive pass (thresholds, refractory, T-wave test, search-back)
 *      in one thread: candidates are a few per second of signal
 *   6. compaction of accepted candidates, then refinement to the input grid: polarity from f,
 *      baseline = median of x around the beat (exact selection by counting ranks), first
 *      maximum of sign * (x - baseline)                                  one warp per beat
 *
 * Exactness: every float/double operation the CPU performs in a data-dependent decision is
 * done here in the same order with explicit round-to-nearest intrinsics (no FMA contraction).
 * The one difference is the feature's window sum: the CPU keeps a running double sum, this
 * sums each window afresh in double; the two round to the same float except when the running
 * sum's drift (~1e-13 relative) straddles a float rounding boundary, which the parity test
 * counts (a 1-ulp change in env alters a decision only in an exact tie).
 *
 * The search-back scan keeps a running "best so far" over [seg, k) instead of rescanning the
 * whole range at every candidate (the CPU's O(k^2) worst case in long beat-free stretches);
 * the best it finds is the same candidate (first index of maximum height among those past the
 * refractory period), so the decisions are identical.
 */
#include <math.h>
#include <string.h>

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "cuda_internal.h"

/* The detector's constants: keep equal to detect.c's. */
#define DEV_ENV_S 0.10
#define DEV_TH 0.25
#define DEV_TW 0.5
#define DEV_SB 1.66
#define DEV_SBTH 0.5

#ifdef __CUDA_ARCH__
#define DMUL(a, b) __dmul_rn((a), (b))
#define DADD(a, b) __dadd_rn((a), (b))
#define DSUB(a, b) __dsub_rn((a), (b))
#else
#define DMUL(a, b) ((a) * (b))
#define DADD(a, b) ((a) + (b))
#define DSUB(a, b) ((a) - (b))
#endif

/* detect.c's secs(): round(s * fs), at least 1. */
static size_t secs(double s, double fs)
{
    double v = round(s * fs);
    return v < 1 ? 1 : (size_t)v;
}

/* Everything the kernels need, by value. */
struct detect_args {
    const float *x;      /* input, n_in */
    const float *y;      /* resampled, n_a */
    const float *f;      /* filtered, n_a */
    size_t n_in, n_a;
    float *env;          /* n_a */
    uint8_t *flag;       /* n_a: candidate flags, then (first n_cand) beat flags */
    int64_t *cpos;       /* candidates, ascending */
    int64_t *n_cand;     /* device scalar */
    float *height, *slope;
    int64_t *beats_a;    /* accepted candidates' positions */
    int64_t *n_beats;    /* device scalar */
    int64_t *peaks_in;   /* the table's r_peak column */
    size_t half_env, half_nms, slope_win;
    int64_t refractory, twave, learn;
    double fs;
    size_t win_in, bwin_in, win_a;
    uint32_t up, down;
};

/* ---------------------------------------------------------------- 1-2: feature and NMS */

static __global__ void envelope_kernel(struct detect_args a)
{
    const double denom = (double)(2 * a.half_env + 1);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n_a;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t lo = i > a.half_env ? i - a.half_env : 0;
        size_t hi = i + a.half_env + 1 < a.n_a ? i + a.half_env + 1 : a.n_a;
        double acc = 0.0;
        for (size_t t = lo; t < hi; t++)
            acc = __dadd_rn(acc, fabs((double)a.f[t]));
        a.env[i] = (float)__ddiv_rn(acc, denom);
    }
}

static __global__ void nms_kernel(struct detect_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n_a;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = a.env[i];
        bool peak = v > 0.0f;
        if (peak) {
            size_t lo = i > a.half_nms ? i - a.half_nms : 0;
            size_t hi = i + a.half_nms < a.n_a - 1 ? i + a.half_nms : a.n_a - 1;
            /* nearest neighbours first: most samples are ruled out at once */
            for (size_t d = 1; peak && (d <= i - lo || i + d <= hi); d++) {
                if (d <= i - lo && a.env[i - d] >= v)
                    peak = false;
                if (i + d <= hi && a.env[i + d] > v)
                    peak = false;
            }
        }
        a.flag[i] = peak;
    }
}

/* ---------------------------------------------------------------- 4: candidate features */

/* Thread k < max_cand: features of candidate k, and flag[k] cleared so that the flags can
 * mark accepted candidates next (the NMS flags were consumed by the compaction). */
static __global__ void candidate_kernel(struct detect_args a, size_t max_cand)
{
    const size_t n_cand = (size_t)*a.n_cand;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < max_cand;
         k += (size_t)gridDim.x * blockDim.x) {
        a.flag[k] = 0;
        if (k >= n_cand)
            continue;
        size_t c = (size_t)a.cpos[k];
        size_t lo = c > a.slope_win ? c - a.slope_win : 0;
        size_t hi = c + a.slope_win < a.n_a - 1 ? c + a.slope_win : a.n_a - 1;
        float s = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float d = fabsf(__fsub_rn(a.y[i + 1], a.y[i]));
            if (d > s)
                s = d;
        }
        a.height[k] = a.env[c];
        a.slope[k] = s;
    }
}

/* ---------------------------------------------------------------- 5: adaptive pass */

/* State of the sequential decision, as detect.c's locals. */
struct adaptive {
    double spk, npk, rr[8], rr_avg;
    size_t n_rr, seg;
    int64_t last;
    float last_slope;
};

static __device__ void accept(struct adaptive *s, const struct detect_args *a, size_t kk, double w)
{
    a->flag[kk] = 1;
    s->spk = DADD(DMUL(w, (double)a->height[kk]), DMUL(1.0 - w, s->spk));
    if (s->last >= 0) {
        s->rr[s->n_rr % 8] = (double)(a->cpos[kk] - s->last);
        s->n_rr++;
        size_t m = s->n_rr < 8 ? s->n_rr : 8;
        double sum = 0;
        for (size_t q = 0; q < m; q++)
            sum = DADD(sum, s->rr[q]);
        s->rr_avg = __ddiv_rn(sum, (double)m);
    }
    s->last = a->cpos[kk];
    s->last_slope = a->slope[kk];
    s->seg = kk + 1;
}

/* One thread: the whole sequential decision over the candidates. */
static __global__ void adaptive_kernel(struct detect_args a)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    const size_t n_cand = (size_t)*a.n_cand;
    struct adaptive s;
    float hbuf[64];
    size_t nh = 0;
    s.spk = 0;
    for (size_t k = 0; k < n_cand && a.cpos[k] < a.learn; k++) {
        float h = a.height[k];
        if (nh < 64) {
            /* insertion keeps hbuf sorted: its middle element is qsort's */
            size_t t = nh++;
            while (t > 0 && hbuf[t - 1] > h) {
                hbuf[t] = hbuf[t - 1];
                t--;
            }
            hbuf[t] = h;
        }
        if (h > s.spk)
            s.spk = h;
    }
    s.npk = nh ? DMUL(0.5, (double)hbuf[nh / 2]) : 0;
    s.spk = DMUL(s.spk, 0.5);
    if (s.npk > s.spk)
        s.npk = DMUL(0.5, s.spk);
    s.n_rr = 0;
    s.rr_avg = a.fs;
    s.last = -1;
    s.last_slope = 0;
    s.seg = 0;
    /* running search-back maximum over [seg, scanned) among candidates past refractory */
    size_t scanned = 0, best = SIZE_MAX;

    for (size_t k = 0; k <= n_cand; k++) {
        int64_t now = k < n_cand ? a.cpos[k] : (int64_t)a.n_a;
        while (s.last >= 0 && (double)(now - s.last) > DMUL(DEV_SB, s.rr_avg)) {
            double th1 = DADD(s.npk, DMUL(DEV_TH, DSUB(s.spk, s.npk)));
            if (scanned < s.seg) {
                scanned = s.seg;
                best = SIZE_MAX;
            }
            for (; scanned < k; scanned++) {
                size_t j = scanned;
                if (a.cpos[j] - s.last < a.refractory)
                    continue;
                if (best == SIZE_MAX || a.height[j] > a.height[best])
                    best = j;
            }
            if (best == SIZE_MAX || !((double)a.height[best] > DMUL(DEV_SBTH, th1)))
                break;
            accept(&s, &a, best, 0.25);
            scanned = s.seg;
            best = SIZE_MAX;
        }
        if (k == n_cand)
            break;
        int64_t pos = a.cpos[k];
        float h = a.height[k];
        if (s.last >= 0 && pos - s.last < a.refractory)
            continue;
        double th1 = DADD(s.npk, DMUL(DEV_TH, DSUB(s.spk, s.npk)));
        if ((double)h > th1) {
            if (s.last >= 0 && pos - s.last < a.twave &&
                (double)a.slope[k] < DMUL(DEV_TW, (double)s.last_slope)) {
                s.npk = DADD(DMUL(0.125, (double)h), DMUL(0.875, s.npk));
                continue;
            }
            accept(&s, &a, k, 0.125);
        } else {
            s.npk = DADD(DMUL(0.125, (double)h), DMUL(0.875, s.npk));
        }
    }
}

/* ---------------------------------------------------------------- 6: refinement */

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

/* One warp per beat b: polarity, baseline median, refined peak. */
static __global__ void refine_kernel(struct detect_args a)
{
    const size_t n_beats = (size_t)*a.n_beats;
    const unsigned lane = threadIdx.x & 31u;
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    const size_t n_warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t b = warp; b < n_beats; b += n_warps) {
        const int64_t c = a.beats_a[b];
        /* polarity from the filter response (max/min start at 0 as on the CPU) */
        size_t lo = (size_t)c > a.win_a ? (size_t)c - a.win_a : 0;
        size_t hi = (size_t)c + a.win_a < a.n_a ? (size_t)c + a.win_a : a.n_a - 1;
        float fmax = 0, fmin = 0;
        for (size_t i = lo + lane; i <= hi; i += 32) {
            fmax = fmaxf(fmax, a.f[i]);
            fmin = fminf(fmin, a.f[i]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            fmax = fmaxf(fmax, __shfl_xor_sync(0xffffffffu, fmax, o));
            fmin = fminf(fmin, __shfl_xor_sync(0xffffffffu, fmin, o));
        }
        const float sign = fmax >= -fmin ? 1.0f : -1.0f;
        int64_t ci = to_input(c, a.up, a.down);
        if (ci >= (int64_t)a.n_in)
            ci = (int64_t)a.n_in - 1;
        /* baseline: the element of rank nb / 2 of x[blo..bhi] (qsort then [nb / 2]) */
        size_t blo = (size_t)ci > a.bwin_in ? (size_t)ci - a.bwin_in : 0;
        size_t bhi = (size_t)ci + a.bwin_in < a.n_in ? (size_t)ci + a.bwin_in : a.n_in - 1;
        size_t nb = bhi - blo + 1, rank = nb / 2;
        float base = 0.0f;
        bool found = false;
        for (size_t j0 = 0; j0 < nb && !found; j0 += 32) {
            size_t j = j0 + lane;
            bool mine = false;
            float v = 0.0f;
            if (j < nb) {
                v = a.x[blo + j];
                size_t less = 0, less_eq = 0;
                for (size_t t = 0; t < nb; t++) {
                    float u = a.x[blo + t];
                    less += u < v;
                    less_eq += u <= v;
                }
                mine = less <= rank && rank < less_eq;
            }
            unsigned hits = __ballot_sync(0xffffffffu, mine);
            if (hits) {
                base = __shfl_sync(0xffffffffu, v, __ffs(hits) - 1);
                found = true;
            }
        }
        /* first maximum of sign * (x - base) over [rlo, rhi] */
        size_t rlo = (size_t)ci > a.win_in ? (size_t)ci - a.win_in : 0;
        size_t rhi = (size_t)ci + a.win_in < a.n_in ? (size_t)ci + a.win_in : a.n_in - 1;
        float bestv = -INFINITY;
        size_t best = rlo;
        for (size_t i = rlo + lane; i <= rhi; i += 32) {
            float v = __fmul_rn(sign, __fsub_rn(a.x[i], base));
            if (v > bestv) {
                bestv = v;
                best = i;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bestv, o);
            unsigned long long oi = __shfl_xor_sync(0xffffffffu, (unsigned long long)best, o);
            if (ov > bestv || (ov == bestv && oi < best)) {
                bestv = ov;
                best = (size_t)oi;
            }
        }
        if (lane == 0)
            a.peaks_in[b] = (int64_t)best;
    }
}

/* ---------------------------------------------------------------- entry point */

extern "C" enum ecg_status cuda_detect(void *ctx_ptr, const struct ecg_plan *plan,
                                       size_t *n_beats_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct detect_args a;
    struct table_layout t;
    size_t n_a, max_cand, off, temp_bytes = 0, temp_bytes2 = 0;
    char *base;
    int64_t *h_counts;
    thrust::counting_iterator<int64_t> counter(0);
    unsigned refine_blocks;

    *n_beats_out = 0;
    ECG_TRY(ctx_enter(ctx, err));
    ctx->n_beats = 0;
    n_a = ctx->n_a;
    if (n_a == 0)
        goto out;
    memset(&a, 0, sizeof a);
    a.half_env = secs(DEV_ENV_S, plan->fs_a_hz) / 2;
    a.half_nms = plan->nms_window / 2;
    a.slope_win = secs(0.06, plan->fs_a_hz);
    a.refractory = (int64_t)plan->refractory;
    a.twave = (int64_t)secs(0.36, plan->fs_a_hz);
    a.learn = (int64_t)secs(2.0, plan->fs_a_hz);
    a.fs = plan->fs_a_hz;
    a.win_in = secs(0.075, plan->fs_in_hz);
    a.bwin_in = secs(0.3, plan->fs_in_hz);
    a.win_a = secs(0.075, plan->fs_a_hz);
    a.up = plan->up;
    a.down = plan->down;
    a.x = (const float *)ctx->input.ptr;
    a.y = (const float *)ctx->resampled.ptr;
    a.f = (const float *)ctx->filtered.ptr;
    a.n_in = ctx->n_in;
    a.n_a = n_a;
    /* candidates are more than half_nms apart */
    max_cand = n_a / (a.half_nms + 1) + 2;

    /* scratch: env | flags | cpos | height | slope | beats_a | counts(2) */
    {
        size_t bytes = 0;
        bytes += (n_a * sizeof(float) + 255) & ~(size_t)255;
        bytes += (n_a + 255) & ~(size_t)255;
        bytes += (max_cand * sizeof(int64_t) + 255) & ~(size_t)255;
        bytes += 2 * ((max_cand * sizeof(float) + 255) & ~(size_t)255);
        bytes += (max_cand * sizeof(int64_t) + 255) & ~(size_t)255;
        bytes += 256;
        ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, bytes, err));
    }
    base = (char *)ctx->scratch.ptr;
    off = 0;
    a.env = (float *)(base + off);      off += (n_a * sizeof(float) + 255) & ~(size_t)255;
    a.flag = (uint8_t *)(base + off);   off += (n_a + 255) & ~(size_t)255;
    a.cpos = (int64_t *)(base + off);   off += (max_cand * sizeof(int64_t) + 255) & ~(size_t)255;
    a.height = (float *)(base + off);   off += (max_cand * sizeof(float) + 255) & ~(size_t)255;
    a.slope = (float *)(base + off);    off += (max_cand * sizeof(float) + 255) & ~(size_t)255;
    a.beats_a = (int64_t *)(base + off); off += (max_cand * sizeof(int64_t) + 255) & ~(size_t)255;
    a.n_cand = (int64_t *)(base + off);
    a.n_beats = a.n_cand + 1;

    envelope_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    nms_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cub::DeviceSelect::Flagged(NULL, temp_bytes, counter, a.flag, a.cpos, a.n_cand,
                                        (int64_t)n_a, ctx->stream));
    CUDA_TRY(cub::DeviceSelect::Flagged(NULL, temp_bytes2, (const int64_t *)a.cpos, a.flag,
                                        a.beats_a, a.n_beats, (int64_t)max_cand, ctx->stream));
    if (temp_bytes2 > temp_bytes)
        temp_bytes = temp_bytes2;
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp_bytes, err));
    CUDA_TRY(cub::DeviceSelect::Flagged(ctx->cub_temp.ptr, temp_bytes, counter, a.flag, a.cpos,
                                        a.n_cand, (int64_t)n_a, ctx->stream));
    candidate_kernel<<<grid_for(max_cand), CUDA_THREADS, 0, ctx->stream>>>(a, max_cand);
    CUDA_LAUNCH_CHECK();
    adaptive_kernel<<<1, 1, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    /* accepted candidates' positions, ascending (flags past n_cand are clear) */
    CUDA_TRY(cub::DeviceSelect::Flagged(ctx->cub_temp.ptr, temp_bytes, (const int64_t *)a.cpos,
                                        a.flag,
                                        a.beats_a, a.n_beats, (int64_t)max_cand, ctx->stream));
    /* the count goes to the host: the engine sizes the beat table with it */
    ECG_TRY(stage_reserve(ctx, 2 * sizeof(int64_t), err));
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, a.n_cand, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost,
                             ctx->stream));
    ECG_TRY(ctx_sync(ctx, "detect", err));
    h_counts = (int64_t *)ctx->h_stage;
    ctx->n_beats = (size_t)h_counts[1];

    table_layout(ctx->n_beats, ctx->latent_dim, &t);
    ECG_TRY(dbuf_reserve(ctx, &ctx->table, t.bytes, err));
    ECG_TRY(dbuf_reserve(ctx, &ctx->peaks_a, (ctx->n_beats + 1) * sizeof(int64_t), err));
    if (ctx->n_beats) {
        CUDA_TRY(cudaMemcpyAsync(ctx->peaks_a.ptr, a.beats_a, ctx->n_beats * sizeof(int64_t),
                                 cudaMemcpyDeviceToDevice, ctx->stream));
        a.peaks_in = (int64_t *)((char *)ctx->table.ptr + t.r_peak);
        refine_blocks = (unsigned)((ctx->n_beats * 32 + CUDA_THREADS - 1) / CUDA_THREADS);
        if (refine_blocks > 65535u)
            refine_blocks = 65535u;
        refine_kernel<<<refine_blocks, CUDA_THREADS, 0, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
    }
    ECG_TRY(ctx_sync(ctx, "detect", err));
    *n_beats_out = ctx->n_beats;
out:
    if (status != ECG_OK)
        ctx->n_beats = 0;
    return status;
}
