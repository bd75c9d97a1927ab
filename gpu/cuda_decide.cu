/*
 * cuda_decide.cu - stage 4 of the R-peak detector on the device, the adaptive decision over the
 * candidates (twin of engine/cpu/decide.c; read that file for the method and why it runs by
 * blocks). cuda_detect() of cuda_detect.cu finds the candidates, calls cuda_decide() to flag
 * the beats among them, then refines the flagged ones. Steps, on the ctx's stream:
 *   0. each block's references prelude (a block after the first: the pass over the
 *      CPU_DETECT_REFS_S before its warm-up, marking nothing, for the shape test's references
 *      it holds at the warm-up's start; decide.c's decide_refs_prelude())
 *                                                                      one thread per block
 *   1. the sequential pass (levels, refractory, T-wave test, search-back, level decay) within
 *      each block of CPU_DETECT_BLOCK_S of signal, from fresh state CPU_DETECT_WARMUP_S before
 *      it but for step 0's references (decide.c's cpu_decide_window() on
 *      cpu_decide_block_window()), the blocks independent             one thread per block
 *   2. the boundary merge of the blocks' beats (decide.c's merge_blocks())
 *                                                     one thread (its block stages the ends)
 *
 * Exactness: every double operation of a decision is done in the CPU's order with explicit
 * round-to-nearest intrinsics (no FMA contraction), so the flags are identical to the CPU's;
 * the shape test's correlations are unlike_core.h's, written once for both.
 *
 * The search-back keeps a running "best so far" over [after_last, k), as the CPU does, instead
 * of rescanning the range at every candidate; it finds the same candidate (first index of the
 * largest height among those past the refractory period, accepted only if above the
 * search-back floor).
 */
#include <stdint.h>

#include "cpu/detect_params.h" /* the detector's constants, shared with decide.c */
#include "cpu/noise_core.h"    /* noise_threshold_at, step 3's two tests */
#include "cpu/unlike_core.h"   /* the shape test */
#include "cuda_detect_common.cuh"
#include "cuda_small.cuh"

/* ---------------------------------------------------------------- 1: the pass by blocks */

/*
 * Where the decision pass reads the candidates (positions, heights, slopes) and each crest
 * window's threshold factor (noise_threshold_factor): the global arrays, the factor taken from
 * the window's crest at each candidate (a long record's blocks: every load waits for the L2),
 * or a copy the CUDA block staged in shared memory with the factors it took once per window
 * and looked up for each candidate (a batched short lead: all its candidates fit), read at
 * shared-memory latency, which also takes the factor's division and the window index's
 * (64-bit) division off the pass's one thread. The same values either way.
 */
struct cand_global {
    const int64_t *cpos;
    const float *height, *slope, *crest;
    __device__ int64_t pos(size_t k) const { return __ldg(&cpos[k]); }
    __device__ float h(size_t k) const { return __ldg(&height[k]); }
    __device__ float sl(size_t k) const { return __ldg(&slope[k]); }
    __device__ double factor(size_t w) const
    {
        return noise_threshold_factor(__ldg(&crest[w]), DETECT_THRESHOLD);
    }
    /* candidate k's, at pos (its position): its window's factor */
    __device__ double factor_at(size_t k, int64_t pos, size_t crest_win) const
    {
        return factor((size_t)pos / crest_win);
    }
    /* ... and whether its window is clean (crest factor at least DETECT_CLEAN_CREST) */
    __device__ bool clean_at(size_t k, int64_t pos, size_t crest_win) const
    {
        return __ldg(&crest[(size_t)pos / crest_win]) >= DETECT_CLEAN_CREST;
    }
};

struct cand_staged {
    const int64_t *cpos; /* shared memory, all of the lead's candidates and windows */
    const float *height, *slope;
    const double *factors;
    const double *cand_factors; /* each candidate's window's factor, taken by the staging */
    const uint8_t *cand_clean;  /* ... and whether that window is clean */
    __device__ int64_t pos(size_t k) const { return cpos[k]; }
    __device__ float h(size_t k) const { return height[k]; }
    __device__ float sl(size_t k) const { return slope[k]; }
    __device__ double factor(size_t w) const { return factors[w]; }
    /* the value factor_at of cand_global gives, looked up by the staging threads in parallel:
     * the pass's one thread neither divides (64 bits) nor waits for a second load */
    __device__ double factor_at(size_t k, int64_t, size_t) const { return cand_factors[k]; }
    __device__ bool clean_at(size_t k, int64_t, size_t) const { return cand_clean[k] != 0; }
};

/* The first candidate at or after pos (n_cand if none): decide.c's first_candidate_from(). */
template <class Src>
static __device__ size_t first_candidate_from(const Src &src, size_t n_cand, int64_t pos)
{
    size_t lo = 0, hi = n_cand;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (src.pos(mid) < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* decide.c's shapes_alike(): the shapes at p and q alike on some lead, lead 0 first. */
static __device__ bool leads_alike(const struct detect_args &a, int64_t p, int64_t q)
{
    for (size_t l = 0; l < a.n_leads; l++) {
        const float *y = l == 0 ? a.y : a.y_extra + (l - 1) * a.n_a;
        if (unlike_alike(y, (int64_t)a.n_a, a.unlike, p, q))
            return true;
    }
    return false;
}

/*
 * One thread (one per CUDA block, so that no two runs share a warp and diverge), reading the
 * candidates from src: the sequential decision pass over block b's window, decide.c's
 * cpu_decide_block_window() and cpu_decide_window() (read there why the pass runs by
 * blocks): fresh state at the origin (block start minus the warm-up), levels learnt from the
 * candidates of its first DETECT_LEARN_S, candidates seen up to the horizon, beats marked only
 * inside the block, and a stop at the first beat at or past the block's end. Blocks mark
 * disjoint candidates, so threads never write the same flag. block_first[b] and
 * block_last[b] get the first and last beat marked (k = SIZE_MAX: none), with what
 * merge_kernel needs of them. A block after the first starts with the references a.refs[b]
 * that its prelude left.
 * With Prelude, block b's references prelude instead (decide.c's decide_refs_prelude): the
 * same pass over [origin - a.refs_reach, origin) (from 0 where that is nearer), marking nothing
 * and without the shape test, its references at the end to a.refs[b]; nothing for block 0,
 * whose window starts at 0.
 * (Run in a step of its own rather than by the pass when it first asks the test: that call
 * site alone cost the batched 10-s strips' pass 7.5 us of its one thread, in a pass that
 * never makes it.)
 *
 * Written for one thread's latency: the state lives in registers (no arrays indexed at run
 * time, which would put it in local memory), and the RR mean keeps a running sum of the last
 * DETECT_RR_COUNT intervals. The CPU re-adds them in ring order each time; RR intervals are
 * whole numbers of samples, so every partial sum is an exact integer in double and both give
 * the same sum, hence the same mean.
 */
template <bool Prelude, class Src>
static __device__ __forceinline__ void block_body(struct detect_args a, size_t b, size_t n_cand,
                                                  const Src &src)
{
    uint8_t *__restrict__ flag = a.flag;

    /* the window (cpu_decide_block_window), or its prelude's */
    const int64_t emit_lo = (int64_t)b * a.block, emit_hi = emit_lo + a.block;
    const int64_t start = emit_lo > a.warmup ? emit_lo - a.warmup : 0;
    if (Prelude && start == 0)
        return;
    const int64_t origin = !Prelude ? start : start > a.refs_reach ? start - a.refs_reach : 0;
    const int64_t horizon = Prelude ? start
                            : emit_hi + a.tail < (int64_t)a.n_a ? emit_hi + a.tail
                                                                : (int64_t)a.n_a;
    const size_t k_lo = first_candidate_from(src, n_cand, origin);

    double spk = 0.0, npk = 0.0, rr_mean = a.fs, rr_sum = 0.0;
    double r0 = 0, r1 = 0, r2 = 0, r3 = 0, r4 = 0, r5 = 0, r6 = 0, r7 = 0; /* newest first */
    size_t n_rr = 0, after_last = k_lo;
    int64_t last = -1;
    float last_slope = 0.0f;
    /* running search-back maximum over [after_last, scanned) among candidates past the
     * refractory period of the last beat */
    size_t scanned = k_lo, best = SIZE_MAX;
    float best_h = 0.0f;
    double sb_limit = DMUL(DETECT_SEARCHBACK_RR, rr_mean); /* search back past this gap */
    double sb_clean = DMUL(DETECT_SEARCHBACK_RR_CLEAN, rr_mean); /* ... or this, if clean */
    double slope_level = 0.0, beat_level = 0.0; /* the beats' usual slope and height */
    int64_t last_decay = origin; /* when SPK was last halved (or the last beat) */
    size_t first_mark = SIZE_MAX, last_mark = SIZE_MAX;
    /* PAUSE_LIMITS(): taken at each beat accepted (none before the first: no rule applies) */
    static_assert(DETECT_RR_COUNT == 8, "the RR ring is r0 .. r7");
    double pause_gap = 0.0, pause_height = 0.0;
    bool regular = false;
    /* the shape test's references (decide.c's refs): the last beats taken above the threshold
     * in clean windows, newest first */
    static_assert(DETECT_UNLIKE_REFS == 4, "the references are ref0 .. ref3");
    int64_t ref0 = 0, ref1 = 0, ref2 = 0, ref3 = 0;
    size_t n_refs = 0;
    if (!Prelude && origin != 0) { /* the prelude's */
        const struct decide_refs r = a.refs[b];
        ref0 = r.ref[0];
        ref1 = r.ref[1];
        ref2 = r.ref[2];
        ref3 = r.ref[3];
        n_refs = (size_t)r.n;
    }

    {
        /* detector_learn(): SPK half the median of the DETECT_LEARN_TOP largest candidates of
         * the learning period (fewer where the recording ends first: detect_learn_top), NPK
         * half the median candidate (at most half of SPK) */
        float heights[64], top0 = 0.0f, top1 = 0.0f, top2 = 0.0f;
        size_t m = 0;
        const int64_t learn_end = origin + a.learn;
        const size_t learn_top = detect_learn_top(horizon - origin, a.learn);
        for (size_t k = k_lo; k < n_cand && src.pos(k) < learn_end; k++) {
            float h = src.h(k);
            if (m < 64)
                heights[m++] = h;
            /* insert into top0 >= top1 >= top2 as decide.c's loop does */
            if (h > top0) {
                float moved = top0;
                top0 = h;
                h = moved;
            }
            if (h > top1) {
                float moved = top1;
                top1 = h;
                h = moved;
            }
            if (h > top2)
                top2 = h;
        }
        const size_t n_top = m < learn_top ? m : learn_top;
        const float top_mid = n_top / 2 == 0 ? top0 : top1; /* top[n_top / 2], n_top <= 3 */
        spk = n_top ? DMUL(0.5, (double)top_mid) : 0.0;
        npk = m ? DMUL(0.5, (double)median_small(heights, m)) : 0.0;
        if (npk > DMUL(0.5, spk))
            npk = DMUL(0.5, spk);
    }

/* decide.c's twave_reference(): the last beat's slope, or the usual one when steeper */
#define TWAVE_REFERENCE ((double)last_slope > slope_level ? (double)last_slope : slope_level)

/* What changes only when a beat is accepted, taken then: decide.c's searchback_passes_over()
 * asks of a search-back candidate whether it lies further than pause_gap after the last beat,
 * is at most pause_height high and the rhythm regular; regular is detector_regular() (the
 * range of the newest min(n_rr, 8) intervals, in registers), which detector_premature_weak()
 * asks too */
#define RR_SPAN(r, i)                                                                      \
    if (n_rr > (i)) {                                                                      \
        rs_lo = (r) < rs_lo ? (r) : rs_lo;                                                 \
        rs_hi = (r) > rs_hi ? (r) : rs_hi;                                                 \
    }
#define PAUSE_LIMITS()                                                                     \
    do {                                                                                   \
        pause_gap = DMUL(DETECT_SEARCHBACK_FAR_RR, rr_mean);                               \
        pause_height = DMUL(DETECT_SEARCHBACK_FAR_MIN, beat_level);                        \
        double rs_lo = n_rr ? r0 : 0.0, rs_hi = rs_lo;                                     \
        RR_SPAN(r1, 1) RR_SPAN(r2, 2) RR_SPAN(r3, 3) RR_SPAN(r4, 4) RR_SPAN(r5, 5)         \
        RR_SPAN(r6, 6) RR_SPAN(r7, 7)                                                      \
        regular = noise_regular_rhythm(n_rr, rr_mean, rs_lo, rs_hi);                       \
    } while (0)

/* detector_accept(): the beat is marked only inside the block */
#define ACCEPT(kk, gain)                                                                   \
    do {                                                                                   \
        const size_t acc_k = (kk);                                                         \
        const int64_t acc_pos = src.pos(acc_k);                                            \
        if (marking && acc_pos >= emit_lo && acc_pos < emit_hi) {                          \
            flag[acc_k] = 1;                                                               \
            if (first_mark == SIZE_MAX)                                                    \
                first_mark = acc_k;                                                        \
            last_mark = acc_k;                                                             \
        }                                                                                  \
        spk = DADD(DMUL((gain), (double)src.h(acc_k)), DMUL(1.0 - (gain), spk));           \
        if (last >= 0) {                                                                   \
            const double rr_new = (double)(acc_pos - last);                                \
            if (n_rr >= DETECT_RR_COUNT)                                                   \
                rr_sum -= r7;                                                              \
            r7 = r6; r6 = r5; r5 = r4; r4 = r3; r3 = r2; r2 = r1; r1 = r0; r0 = rr_new;    \
            rr_sum += rr_new;                                                              \
            n_rr++;                                                                        \
            const size_t acc_m = n_rr < DETECT_RR_COUNT ? n_rr : DETECT_RR_COUNT;         \
            /* dividing by a power of two is an exact scaling: the same double, cheaper */ \
            rr_mean = acc_m == 8   ? DMUL(rr_sum, 0.125)                                   \
                      : acc_m == 4 ? DMUL(rr_sum, 0.25)                                    \
                      : acc_m == 2 ? DMUL(rr_sum, 0.5)                                     \
                      : acc_m == 1 ? rr_sum                                                \
                                   : __ddiv_rn(rr_sum, (double)acc_m);                     \
        }                                                                                  \
        sb_limit = DMUL(DETECT_SEARCHBACK_RR, rr_mean);                                    \
        sb_clean = DMUL(DETECT_SEARCHBACK_RR_CLEAN, rr_mean);                              \
        last = acc_pos;                                                                    \
        last_decay = acc_pos;                                                              \
        last_slope = src.sl(acc_k);                                                        \
        slope_level = DADD(DMUL(DETECT_LEVEL_GAIN, (double)last_slope),                    \
                           DMUL(1.0 - DETECT_LEVEL_GAIN, slope_level));                    \
        if ((gain) == DETECT_LEVEL_GAIN)                                                   \
            beat_level = DADD(DMUL(DETECT_LEVEL_GAIN, (double)src.h(acc_k)),               \
                              DMUL(1.0 - DETECT_LEVEL_GAIN, beat_level));                  \
        if ((gain) == DETECT_LEVEL_GAIN && src.clean_at(acc_k, acc_pos, a.crest_win)) {    \
            ref3 = ref2; ref2 = ref1; ref1 = ref0; ref0 = acc_pos;                         \
            n_refs += n_refs < DETECT_UNLIKE_REFS;                                         \
        }                                                                                  \
        after_last = acc_k + 1;                                                            \
        PAUSE_LIMITS();                                                                    \
    } while (0)

    /* decide.c's cpu_decide_window(): a window at the recording's start has no warm-up
     * before it, so it is decided twice, the first pass marking nothing and the second starting
     * from what the first learnt of the beats (warm_levels: SPK, the RR intervals and their
     * mean, the usual slope and height; NPK as learnt, at most half of SPK) */
    const double npk_learnt = npk;
    const bool warm_up = !Prelude && origin == 0; /* (a prelude is one pass) */
    for (int pass = warm_up ? 0 : 1; pass < 2; pass++) {
        const bool marking = !Prelude && pass == 1;
        if (marking && warm_up) {
            npk = npk_learnt;
            if (npk > DMUL(0.5, spk))
                npk = DMUL(0.5, spk);
            sb_limit = DMUL(DETECT_SEARCHBACK_RR, rr_mean);
            sb_clean = DMUL(DETECT_SEARCHBACK_RR_CLEAN, rr_mean);
            after_last = k_lo;
            last = -1;
            last_slope = 0.0f;
            scanned = k_lo;
            best = SIZE_MAX;
            best_h = 0.0f;
            last_decay = origin;
            n_refs = 0; /* detector_learn() starts the second pass without references */
        }
        for (size_t k = k_lo;; k++) {
            const int64_t pos_k = k < n_cand ? src.pos(k) : 0;
            const bool end = k == n_cand || pos_k >= horizon;
            const int64_t pos = end ? horizon : pos_k;
            /* search back (from the origin until the first beat), possibly for several missed
             * beats in a row; sooner where candidate k's window is clean (decide.c's
             * searchback_due: its window's cleanness asked only when the gap lies between the
             * two limits) */
            while ((double)(pos - (last >= 0 ? last : origin)) > sb_limit ||
                   (!end && (double)(pos - (last >= 0 ? last : origin)) > sb_clean &&
                    src.clean_at(k, pos, a.crest_win))) {
                const double threshold = DADD(npk, DMUL(DETECT_THRESHOLD, DSUB(spk, npk)));
                const double floor_height = DMUL(DETECT_SEARCHBACK_TH, threshold);
                if (scanned < after_last) {
                    scanned = after_last;
                    best = SIZE_MAX;
                }
                for (; scanned < k; scanned++) {
                    const int64_t gap = src.pos(scanned) - last;
                    if (last >= 0 && gap < a.refractory)
                        continue;
                    if (last >= 0 && gap < a.twave &&
                        (double)src.sl(scanned) < DMUL(DETECT_TWAVE_SLOPE, TWAVE_REFERENCE))
                        continue; /* a T wave is no missed beat */
                    const float hs = src.h(scanned);
                    if (last >= 0) {
                        const bool in_pause = regular && (double)gap > pause_gap &&
                                              (double)hs <= pause_height;
                        const bool odd = DMUL((double)src.sl(scanned), beat_level) >=
                                         DMUL(DMUL(DETECT_SEARCHBACK_ODD_SLOPE, (double)hs),
                                              slope_level);
                        if (in_pause || odd) {
                            /* how far from the rhythm's places (searchback_passes_over) */
                            const double intervals = __ddiv_rn((double)gap, rr_mean);
                            const double place =
                                intervals < 1.0 ? 1.0 : floor(DADD(intervals, 0.5));
                            const double off = fabs(DSUB(intervals, place));
                            if ((in_pause && off > DETECT_SEARCHBACK_BEAT_RR) ||
                                (odd && off > DETECT_SEARCHBACK_PLACE_RR))
                                continue; /* a pause, or unlike a QRS complex */
                        }
                    }
                    if (best == SIZE_MAX || hs > best_h) {
                        best = scanned;
                        best_h = hs;
                    }
                }
                if (best != SIZE_MAX && (double)best_h > floor_height &&
                    (double)best_h > DMUL(DETECT_SEARCHBACK_MIN, beat_level)) {
                    ACCEPT(best, DETECT_SEARCHBACK_GAIN);
                    scanned = after_last;
                    best = SIZE_MAX;
                    if (marking && last >= emit_hi)
                        goto done;
                    continue;
                }
                /* nothing even at the lowered threshold: halve SPK, at most once per
                 * DETECT_DECAY_RR mean RR and never below twice NPK, and look again */
                if ((double)(pos - last_decay) <= DMUL(DETECT_DECAY_RR, rr_mean) ||
                    spk <= DMUL(2.0, npk))
                    break;
                spk = DMUL(spk, 0.5);
                last_decay = pos;
            }
            if (end)
                break;
            if (last >= 0 && pos - last < a.refractory)
                continue;
            const float h = src.h(k);
            /* the threshold rises where noise fills the floor between beats (noise_core.h) */
            const double t = src.factor_at(k, pos, a.crest_win);
            bool noise = (double)h <= noise_threshold_at(spk, npk, t) ||
                         (last >= 0 && pos - last < a.twave &&
                          (double)src.sl(k) < DMUL(DETECT_TWAVE_SLOPE, TWAVE_REFERENCE));
            if (!noise && last >= 0 &&
                noise_premature_weak(t, DETECT_THRESHOLD, pos - last, h, beat_level, rr_mean)) {
                /* ... and there, in a regular rhythm, an early beat must be as strong as the usual
                 * one (noise_core.h, step 3; decide.c's detector_premature_weak) */
                noise = regular;
            }
            if (noise) {
                npk = DADD(DMUL(DETECT_LEVEL_GAIN, (double)h), DMUL(1.0 - DETECT_LEVEL_GAIN, npk));
                continue;
            }
            /* ... and there a candidate not stronger than the usual beat must look like one of
             * the recording's complexes: the last beat, the next candidate at least half as high
             * (within DETECT_UNLIKE_NEXT_S), a reference (decide.c's detector_alike); what it
             * rejects teaches NPK nothing */
            if (!Prelude && t > DETECT_THRESHOLD && n_refs >= 2 &&
                (double)h < DMUL(DETECT_UNLIKE_HEIGHT, beat_level)) {
                bool alike = last >= 0 && leads_alike(a, pos, last);
                for (size_t q = k + 1; !alike && q < n_cand && src.pos(q) - pos < a.unlike.next;
                     q++) {
                    if ((double)src.h(q) >= DMUL(DETECT_UNLIKE_NEXT_HEIGHT, (double)h)) {
                        alike = leads_alike(a, pos, src.pos(q));
                        break;
                    }
                }
                alike = alike || leads_alike(a, pos, ref0) || leads_alike(a, pos, ref1) ||
                        (n_refs > 2 && leads_alike(a, pos, ref2)) ||
                        (n_refs > 3 && leads_alike(a, pos, ref3));
                if (!alike)
                    continue;
            }
            ACCEPT(k, DETECT_LEVEL_GAIN);
            if (marking && last >= emit_hi)
                break;
        }
    }
#undef ACCEPT
#undef PAUSE_LIMITS
#undef RR_SPAN
#undef TWAVE_REFERENCE
done:
    if constexpr (Prelude) {
        const struct decide_refs r = {{ref0, ref1, ref2, ref3}, (int64_t)n_refs};
        a.refs[b] = r;
    } else {
        struct block_end ends[2];
        for (int e = 0; e < 2; e++) {
            const size_t k = e == 0 ? first_mark : last_mark;
            ends[e].k = k;
            ends[e].pos = k != SIZE_MAX ? src.pos(k) : 0;
            ends[e].height = k != SIZE_MAX ? src.h(k) : 0.0f;
            ends[e].slope = k != SIZE_MAX ? src.sl(k) : 0.0f;
        }
        a.block_first[b] = ends[0];
        a.block_last[b] = ends[1];
    }
}

template <bool Prelude>
static __global__ void block_kernel(struct detect_args a, size_t n_blocks)
{
    const size_t b = blockIdx.x;
    if (b >= n_blocks || threadIdx.x != 0)
        return;
    const struct cand_global src = {a.cpos, a.height, a.slope, a.crest};
    block_body<Prelude>(a, b, (size_t)*a.n_cand, src);
}

/*
 * The batched front's (cuda_small.cuh): member blockIdx.y's decision block blockIdx.x. A short
 * lead's candidates and crest windows fit in shared memory: the block's DECIDE_THREADS threads
 * copy the candidates there and take each window's threshold factor and each candidate's
 * window's cleanness (the shape test's references are beats of clean windows), and the pass's
 * thread reads them, instead of waiting for the L2 at every candidate and accepted beat (two
 * dependent loads each: the position, then its window's crest) and dividing for the factor
 * there.
 * A lead with more falls back to the global arrays. Same values, same order: the same flags.
 * With Prelude, the blocks' references preludes (block_body).
 */
#define DECIDE_THREADS 128
#define DECIDE_STAGE 1024 /* candidates staged (25 bytes each) */
#define DECIDE_CREST 256  /* crest windows staged */

template <bool Prelude>
static __global__ void __launch_bounds__(DECIDE_THREADS)
    block_batch_kernel(const struct small_front *ms)
{
    __shared__ int64_t s_pos[DECIDE_STAGE];
    __shared__ float s_height[DECIDE_STAGE], s_slope[DECIDE_STAGE];
    __shared__ double s_factor[DECIDE_CREST];
    __shared__ double s_cand_factor[DECIDE_STAGE];
    __shared__ uint8_t s_cand_clean[DECIDE_STAGE];
    pdl_step_begin();
    const struct small_front *m = &ms[blockIdx.y];
    const struct detect_args a = m->a;
    const size_t b = blockIdx.x;
    if (b >= m->n_blocks || (Prelude && (int64_t)b * a.block <= a.warmup))
        return; /* the whole CUDA block: no barrier below is left waiting (a block whose
                 * window starts at 0 has no prelude) */
    const size_t n_cand = (size_t)*a.n_cand;
    if (n_cand > DECIDE_STAGE || m->n_win > DECIDE_CREST) {
        const struct cand_global src = {a.cpos, a.height, a.slope, a.crest};
        if (threadIdx.x == 0)
            block_body<Prelude>(a, b, n_cand, src);
        return;
    }
    for (size_t k = threadIdx.x; k < n_cand; k += DECIDE_THREADS) {
        s_pos[k] = a.cpos[k];
        s_height[k] = a.height[k];
        s_slope[k] = a.slope[k];
    }
    for (size_t w = threadIdx.x; w < m->n_win; w += DECIDE_THREADS)
        s_factor[w] = noise_threshold_factor(a.crest[w], DETECT_THRESHOLD);
    __syncthreads();
    for (size_t k = threadIdx.x; k < n_cand; k += DECIDE_THREADS) {
        const size_t w = (size_t)s_pos[k] / a.crest_win;
        s_cand_factor[k] = s_factor[w];
        s_cand_clean[k] = a.crest[w] >= DETECT_CLEAN_CREST;
    }
    __syncthreads();
    const struct cand_staged src = {s_pos, s_height, s_slope, s_factor, s_cand_factor,
                                    s_cand_clean};
    if (threadIdx.x == 0)
        block_body<Prelude>(a, b, n_cand, src);
}

/* ---------------------------------------------------------------- 2: boundary merge */

#define MERGE_THREADS 256

/*
 * decide.c's merge_blocks(), by thread 0 of one block: the first beat of each block against
 * the last beat kept before it: closer than the refractory period, the lower goes (the later on
 * a tie); else closer than DETECT_TWAVE_S with under DETECT_TWAVE_SLOPE of the earlier's
 * slope, the later goes. The block's threads stage the blocks' ends, MERGE_THREADS at a time,
 * in shared memory, so that thread 0 walks them at shared-memory latency. A block's last beat
 * is dropped only with its first (when they are the same beat), so the last kept beat is
 * tracked in registers (the CPU reads its flag back).
 */
static __device__ __forceinline__ void merge_body(struct detect_args a, size_t n_blocks)
{
    __shared__ struct block_end s_first[MERGE_THREADS], s_last[MERGE_THREADS];
    struct block_end prev;
    bool have_prev = false;
    prev.k = SIZE_MAX;
    prev.pos = 0;
    prev.height = prev.slope = 0.0f;
    for (size_t b0 = 0; b0 < n_blocks; b0 += MERGE_THREADS) {
        const size_t count = n_blocks - b0 < MERGE_THREADS ? n_blocks - b0 : MERGE_THREADS;
        __syncthreads(); /* thread 0 is done with the previous chunk */
        for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
            s_first[j] = a.block_first[b0 + j];
            s_last[j] = a.block_last[b0 + j];
        }
        __syncthreads();
        if (threadIdx.x != 0)
            continue;
        for (size_t j = 0; j < count; j++) {
            const struct block_end f = s_first[j];
            if (f.k == SIZE_MAX)
                continue;
            bool f_kept = true;
            if (have_prev) {
                const int64_t gap = f.pos - prev.pos;
                if (gap < a.refractory) {
                    if (f.height > prev.height) {
                        a.flag[prev.k] = 0;
                    } else {
                        a.flag[f.k] = 0;
                        f_kept = false;
                    }
                } else if (gap < a.twave &&
                           (double)f.slope < DMUL(DETECT_TWAVE_SLOPE, (double)prev.slope)) {
                    a.flag[f.k] = 0;
                    f_kept = false;
                }
            }
            const struct block_end l = s_last[j];
            if (l.k != f.k || f_kept) {
                prev = l;
                have_prev = true;
            }
        }
    }
}

static __global__ void merge_kernel(struct detect_args a, size_t n_blocks)
{
    merge_body(a, n_blocks);
}

/* The batched front's (cuda_small.cuh): member blockIdx.y's merge. */
static __global__ void merge_batch_kernel(const struct small_front *ms)
{
    pdl_step_begin();
    merge_body(ms[blockIdx.y].a, ms[blockIdx.y].n_blocks);
}

/* ---------------------------------------------------------------- entry point */

/* Contract in cuda_internal.h. The caller, cuda_detect(), has entered ctx and laid out a and the
 * scratch it points into (block_first and block_last for n_blocks blocks). */
extern "C" enum ecg_status cuda_decide(struct cuda_ctx *ctx, const struct detect_args *a,
                                       size_t n_blocks, struct detect_profile *prof,
                                       struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;

    if (n_blocks > 1) { /* the references preludes of the blocks after the first */
        block_kernel<true><<<(unsigned)n_blocks, 1, 0, ctx->stream>>>(*a, n_blocks);
        CUDA_LAUNCH_CHECK();
    }
    block_kernel<false><<<(unsigned)n_blocks, 1, 0, ctx->stream>>>(*a, n_blocks);
    CUDA_LAUNCH_CHECK();
    profile_mark(prof, ctx->stream, "blocks");
    merge_kernel<<<1, MERGE_THREADS, 0, ctx->stream>>>(*a, n_blocks);
    CUDA_LAUNCH_CHECK();
    profile_mark(prof, ctx->stream, "merge");
out:
    return status;
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_decide(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_blocks, cudaEvent_t mark,
                                   struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    if (max_blocks > 1) /* the references preludes of the blocks after the first */
        CUDA_TRY(pdl_launch(dim3((unsigned)max_blocks, (unsigned)k), DECIDE_THREADS, 0, stream,
                            block_batch_kernel<true>, members));
    CUDA_TRY(pdl_launch(dim3((unsigned)max_blocks, (unsigned)k), DECIDE_THREADS, 0, stream,
                        block_batch_kernel<false>, members));
    if (mark)
        small_mark(mark, stream);
    /* one decision block per member (every lead under CPU_DETECT_BLOCK_S): no boundary to
     * merge (merge_body keeps a lone block's beats as they are) */
    if (max_blocks < 2)
        goto out;
    CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), MERGE_THREADS, 0, stream, merge_batch_kernel,
                        members));
out:
    return status;
}
