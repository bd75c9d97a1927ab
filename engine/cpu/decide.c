/*
 * decide.c - stage 4 of the R-peak detector: the adaptive decision over the candidates
 * (Pan-Tompkins-style signal and noise levels, threshold, refractory period, T-wave rejection,
 * weak early candidates in noise, candidates unlike the recording's complexes in noise,
 * search-back (sooner in clean windows, not into a pause, not for a candidate unlike a QRS
 * complex), level decay), run by blocks and merged at the block boundaries.
 *
 * detect.c produces the candidates (stages 1-3) and places the accepted beats (stage 5); the
 * CUDA twin of this file is the block and merge kernels of gpu/cuda_decide.cu, which must make
 * the same decisions with the same double operations in the same order. Thread-safe: no state
 * outside the arguments.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "detect_params.h"
#include "noise_core.h"
#include "select.h"
#include "unlike_core.h"

/*
 * The pass is sequential, but its state forgets: the levels follow the last few peaks, the RR
 * mean the last DETECT_RR_COUNT intervals. So it runs by blocks of CPU_DETECT_BLOCK_S of
 * signal (analysis-grid samples [b B, (b + 1) B), B = round(CPU_DETECT_BLOCK_S fs), W and T
 * likewise; cpu_decide_block_window()), each an independent run (in parallel on the GPU) from
 * fresh state:
 *  - it starts at origin b B - W (W = CPU_DETECT_WARMUP_S; block 0 at 0, which is the plain
 *    pass) and learns its levels from the candidates of [origin, origin + DETECT_LEARN_S) as the
 *    plain pass does from the start of the recording, so that by the block its levels, RR mean,
 *    last beat and last slope (T waves, search-back) are those of a run that has seen the
 *    warm-up; only the decisions on candidates inside the block are kept; a window at the
 *    origin, with no warm-up before it, is warmed on itself (cpu_decide_window);
 *  - it sees the candidates before its horizon, min(n, (b + 1) B + T) (T = CPU_DETECT_TAIL_S,
 *    so that search-back can still fill the end of the block) and ends there as the plain pass
 *    ends at the end of the recording; it stops as soon as it accepts a beat at or past the
 *    block's end, after which no decision inside the block can change (search-back only looks
 *    after the last beat).
 *  - it starts with the shape test's references (unlike_core.h: the last beats taken above the
 *    threshold in clean windows) that a run over the CPU_DETECT_REFS_S before its origin, which
 *    marks nothing, holds at the origin (the references prelude, decide_refs_prelude), and
 *    learns nothing else from it. The references are the recording's clean complexes, from up
 *    to 100 s before the block; a warm-up inside a noisy stretch has none, and without them
 *    the test stayed off for the whole block (electrode motion at 6 dB, lead 0: of the 2,602
 *    false beats taken in noisy windows under the usual beat's height, 1,395 were taken
 *    untested in such blocks; F1 94.90 -> 95.07 % with the prelude, docs/ACCURACY.md item 16);
 * Then the boundary merge (merge_blocks): the first beat of each block is checked against the
 * last beat kept before it, with the pass's own two exclusions: closer than the refractory
 * period, the lower of the two goes (the later on a tie); else closer than DETECT_TWAVE_S with
 * under DETECT_TWAVE_SLOPE of the earlier one's slope, the later goes (a T wave).
 * A recording of at most one block is decided exactly as by the plain pass.
 *
 * The warm-up is long because NPK moves only on noise peaks, which some records hardly have:
 * NPK learnt afresh can stay far from the plain pass's for a minute. With W = 20 s record 203
 * lost 9 beats to the blocks (Se 98.96 %), with 40 s 4 (99.13 %); longer did no better.
 * Where the levels differ at all, candidates near the threshold can be decided otherwise than by
 * the plain pass (14 of 51,393 beats on the 22 MIT-BIH records, 18 of 70,113 on 15 hours).
 */
struct detector {
    double spk, npk;                /* signal and noise peak levels */
    double rr[DETECT_RR_COUNT];     /* last RR intervals, samples (ring) */
    size_t n_rr;
    double rr_mean;
    int64_t last;                   /* last beat, -1 before the first */
    float last_slope;
    double slope_level;             /* running mean of the beats' slopes */
    double beat_level;              /* running mean of the heights of beats above threshold */
    size_t after_last;              /* first candidate after the last beat */
    int64_t last_decay;             /* when SPK was last halved (or the last beat) */
    /* search-back: the first of the largest candidates in [after_last, scanned) that lie
     * past the refractory period, kept up to date as candidates go by (no rescans) */
    size_t best, scanned;
    size_t first, final;            /* first and last beat marked (SIZE_MAX: none) */
    /* the shape test's references (unlike_core.h): the last beats taken above the threshold in
     * clean windows, newest first */
    int64_t refs[DETECT_UNLIKE_REFS];
    size_t n_refs;
};

static double detector_threshold(const struct detector *d)
{
    return d->npk + DETECT_THRESHOLD * (d->spk - d->npk);
}

static void detector_accept(struct detector *d, const struct cpu_candidate *cand, size_t k,
                            double gain, const struct cpu_decide_window *w, uint8_t *is_beat)
{
    if (cand[k].pos >= w->emit_lo && cand[k].pos < w->emit_hi) {
        is_beat[k] = 1;
        if (d->first == SIZE_MAX)
            d->first = k;
        d->final = k;
    }
    d->spk = gain * cand[k].height + (1.0 - gain) * d->spk;
    if (d->last >= 0) {
        d->rr[d->n_rr % DETECT_RR_COUNT] = (double)(cand[k].pos - d->last);
        d->n_rr++;
        size_t m = d->n_rr < DETECT_RR_COUNT ? d->n_rr : DETECT_RR_COUNT;
        double sum = 0.0;
        for (size_t q = 0; q < m; q++)
            sum += d->rr[q];
        d->rr_mean = sum / (double)m;
    }
    d->last = cand[k].pos;
    d->last_decay = cand[k].pos;
    d->last_slope = cand[k].slope;
    d->slope_level = DETECT_LEVEL_GAIN * cand[k].slope + (1.0 - DETECT_LEVEL_GAIN) * d->slope_level;
    if (gain == DETECT_LEVEL_GAIN)
        d->beat_level = DETECT_LEVEL_GAIN * cand[k].height + (1.0 - DETECT_LEVEL_GAIN) * d->beat_level;
    if (gain == DETECT_LEVEL_GAIN && cand[k].crest >= DETECT_CLEAN_CREST) {
        memmove(d->refs + 1, d->refs, (DETECT_UNLIKE_REFS - 1) * sizeof d->refs[0]);
        d->refs[0] = cand[k].pos;
        d->n_refs += d->n_refs < DETECT_UNLIKE_REFS;
    }
    d->after_last = k + 1;
    d->best = SIZE_MAX;
    d->scanned = k + 1;
}

/* Whether a gap of this many samples since the last beat (or the origin) calls for
 * search-back: past DETECT_SEARCHBACK_RR mean intervals, or DETECT_SEARCHBACK_RR_CLEAN where
 * the candidate that ends it lies in a clean window. */
static bool searchback_due(const struct detector *d, int64_t gap, bool clean)
{
    return (double)gap > DETECT_SEARCHBACK_RR * d->rr_mean ||
           (clean && (double)gap > DETECT_SEARCHBACK_RR_CLEAN * d->rr_mean);
}

/* Whether the rhythm is regular: noise_core.h's noise_regular_rhythm over the RR ring's filled
 * part. */
static bool detector_regular(const struct detector *d)
{
    const size_t m = d->n_rr < DETECT_RR_COUNT ? d->n_rr : DETECT_RR_COUNT;
    double lo = m ? d->rr[0] : 0.0, hi = lo;
    for (size_t q = 1; q < m; q++) {
        lo = d->rr[q] < lo ? d->rr[q] : lo;
        hi = d->rr[q] > hi ? d->rr[q] : hi;
    }
    return noise_regular_rhythm(d->n_rr, d->rr_mean, lo, hi);
}

/*
 * Whether search-back passes candidate c over (past the last beat's refractory period and T
 * wave). Both rules ask how far c lies from the rhythm's places, the whole numbers of mean
 * intervals (one at least) after the last beat, and so apply only after a first beat:
 *  - a pause: in a regular rhythm, further than DETECT_SEARCHBACK_FAR_RR mean intervals after
 *    the last beat, further than DETECT_SEARCHBACK_BEAT_RR from a place and under
 *    DETECT_SEARCHBACK_FAR_MIN of the beats' usual height. The rhythm's missed beats lie on its
 *    places (one interval on, or more where the complexes shrank: a run of small beats); what
 *    lies elsewhere in a long gap lies in a pause (a sinus arrest, an AV block's dropped beat),
 *    and a small wave there is a P wave or noise. An irregular rhythm (atrial fibrillation) has
 *    no expected place: its small beats are taken wherever they come.
 *  - unlike a QRS complex: further than DETECT_SEARCHBACK_PLACE_RR from a place and, measured
 *    against the beats' usual slope and height, DETECT_SEARCHBACK_ODD_SLOPE times steeper than
 *    it is high. A complex of any size keeps the beats' proportion (its slope and its QRS-band
 *    height both scale with its amplitude); muscle noise's sharp spikes, electrode motion's
 *    steps and the slow P wave, which the QRS band damps more than its slope, do not.
 */
static bool searchback_passes_over(const struct detector *d, const struct cpu_candidate *c)
{
    if (d->last < 0)
        return false;
    const bool in_pause =
        (double)(c->pos - d->last) > DETECT_SEARCHBACK_FAR_RR * d->rr_mean &&
        (double)c->height <= DETECT_SEARCHBACK_FAR_MIN * d->beat_level && detector_regular(d);
    const bool odd = (double)c->slope * d->beat_level >=
                     DETECT_SEARCHBACK_ODD_SLOPE * (double)c->height * d->slope_level;
    if (!in_pause && !odd)
        return false;
    const double intervals = (double)(c->pos - d->last) / d->rr_mean;
    const double place = intervals < 1.0 ? 1.0 : floor(intervals + 0.5);
    const double off = fabs(intervals - place);
    return (in_pause && off > DETECT_SEARCHBACK_BEAT_RR) ||
           (odd && off > DETECT_SEARCHBACK_PLACE_RR);
}

/* The slope a candidate close behind the last beat must approach to be a beat rather than its
 * T wave: the last beat's, or the beats' usual slope when that is steeper (the second lobe of a
 * wide ventricular beat is as steep as the beat itself, but not as steep as the usual QRS). */
static double twave_reference(const struct detector *d)
{
    return (double)d->last_slope > d->slope_level ? (double)d->last_slope : d->slope_level;
}

/* noise_core.h's step 3 for candidate c (window factor t): an early, weak candidate, then the
 * range of the last intervals (the ring's filled part) for the rhythm's regularity. */
static bool detector_premature_weak(const struct detector *d, const struct cpu_candidate *c,
                                    double t)
{
    return noise_premature_weak(t, DETECT_THRESHOLD, c->pos - d->last, c->height, d->beat_level,
                                d->rr_mean) &&
           detector_regular(d);
}

/* Whether the shapes at a and b are alike on some lead (unlike_core.h), lead 0 first. */
static bool shapes_alike(const struct cpu_shapes *s, struct unlike_geometry u, int64_t a,
                         int64_t b)
{
    for (size_t l = 0; l < s->n_leads; l++)
        if (unlike_alike(s->leads[l].y, (int64_t)s->n, u, a, b))
            return true;
    return false;
}

/*
 * The shape test (unlike_core.h) for candidate k: whether it is like the last beat, the next
 * candidate at least DETECT_UNLIKE_NEXT_HEIGHT of its height within u.next samples, or one of
 * the references. A candidate no complex of the recording vouches for is noise.
 */
static bool detector_alike(const struct detector *d, const struct cpu_shapes *s,
                           struct unlike_geometry u, const struct cpu_candidate *cand,
                           size_t n_cand, size_t k)
{
    const int64_t pos = cand[k].pos;
    if (d->last >= 0 && shapes_alike(s, u, pos, d->last))
        return true;
    for (size_t q = k + 1; q < n_cand && cand[q].pos - pos < u.next; q++) {
        if ((double)cand[q].height >= DETECT_UNLIKE_NEXT_HEIGHT * (double)cand[k].height) {
            if (shapes_alike(s, u, pos, cand[q].pos))
                return true;
            break;
        }
    }
    for (size_t r = 0; r < d->n_refs; r++)
        if (shapes_alike(s, u, pos, d->refs[r]))
            return true;
    return false;
}

static void detector_noise(struct detector *d, const struct cpu_candidate *c)
{
    d->npk = DETECT_LEVEL_GAIN * c->height + (1.0 - DETECT_LEVEL_GAIN) * d->npk;
}

/*
 * Fresh state at origin, candidate k_lo the first at or after it. Initial levels from the
 * candidates of the first DETECT_LEARN_S: SPK half the median of the DETECT_LEARN_TOP largest
 * (a robust "typical beat": one artefact among them does not set it; fewer where the
 * recording ends before the period does, detect_learn_top), NPK half the median candidate (at
 * most half of SPK).
 */
static void detector_learn(struct detector *d, const struct cpu_candidate *cand, size_t k_lo,
                           size_t n_cand, int64_t origin, int64_t horizon, double fs_hz)
{
    float heights[64], top[DETECT_LEARN_TOP] = {0};
    size_t m = 0;
    const int64_t learn_len = (int64_t)detect_samples_of(DETECT_LEARN_S, fs_hz);
    const int64_t learn = origin + learn_len;
    const size_t learn_top = detect_learn_top(horizon - origin, learn_len);
    for (size_t k = k_lo; k < n_cand && cand[k].pos < learn; k++) {
        if (m < sizeof heights / sizeof heights[0])
            heights[m++] = cand[k].height;
        float h = cand[k].height; /* insert into top[], kept in descending order */
        for (size_t t = 0; t < DETECT_LEARN_TOP; t++) {
            if (h > top[t]) {
                float moved = top[t];
                top[t] = h;
                h = moved;
            }
        }
    }
    size_t n_top = m < learn_top ? m : learn_top;
    memset(d, 0, sizeof *d);
    d->spk = n_top ? 0.5 * top[n_top / 2] : 0.0;
    d->npk = m ? 0.5 * cpu_median_inplace(heights, m) : 0.0;
    if (d->npk > 0.5 * d->spk)
        d->npk = 0.5 * d->spk;
    d->rr_mean = fs_hz; /* 60 bpm until two beats are known */
    d->last = -1;
    d->last_decay = origin;
    d->after_last = k_lo;
    d->scanned = k_lo;
    d->best = SIZE_MAX;
    d->first = d->final = SIZE_MAX;
}

/* The first candidate at or after pos (n_cand if none). */
static size_t first_candidate_from(const struct cpu_candidate *cand, size_t n_cand, int64_t pos)
{
    size_t lo = 0, hi = n_cand;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cand[mid].pos < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * One pass over the window. With seed, the levels start from the seed's (warm_levels) instead
 * of the learning stretch's; with refs_from, the shape test's references start from its (the
 * references prelude's); with end_state, the detector's state at the pass's end is copied
 * there.
 */
static void decide_pass(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                        size_t n_cand, const struct cpu_shapes *shapes,
                        const struct cpu_decide_window *w, uint8_t *is_beat, size_t *first,
                        size_t *last, const struct detector *seed,
                        const struct detector *refs_from, struct detector *end_state);

/*
 * The levels a pass starts from when it follows a pass over the same window (the self
 * warm-up): what the first pass learnt of the beats, as it left them at its end: the signal
 * level, the RR intervals and their mean, the beats' usual slope and height. The noise level
 * is learnt afresh (detector_learn's, at most half the signal level): it moves only on
 * candidates taken for noise, which in a clean stretch are rare, so a run's last value can
 * still hold the beats an artefact's recovery took for noise (a 60-mV electrode pop: with it
 * carried, the beats came back 2.4 s later). The last beat (its place, its slope) is not
 * carried either: the second pass starts again at the origin.
 */
static void warm_levels(struct detector *d, const struct detector *seed)
{
    d->spk = seed->spk;
    if (d->npk > 0.5 * d->spk)
        d->npk = 0.5 * d->spk;
    memcpy(d->rr, seed->rr, sizeof d->rr);
    d->n_rr = seed->n_rr;
    d->rr_mean = seed->rr_mean;
    d->slope_level = seed->slope_level;
    d->beat_level = seed->beat_level;
}

/*
 * The references prelude of a window that does not start at the recording's start (the file
 * comment): one pass over [origin - CPU_DETECT_REFS_S, origin) (from the recording's start
 * where that is nearer), from fresh state, marking nothing and without the shape test (its
 * references are beats of clean windows, where the test is not asked: with the test, the 32
 * sets of docs/ACCURACY.md item 16 were decided the same); *end gets its state at the origin,
 * of which the window's pass takes only the references.
 */
static void decide_refs_prelude(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                                size_t n_cand, const struct cpu_decide_window *w,
                                uint8_t *is_beat, struct detector *end)
{
    const int64_t reach = (int64_t)detect_samples_of(CPU_DETECT_REFS_S, plan->fs_a_hz);
    struct cpu_decide_window pre = {
        .origin = w->origin > reach ? w->origin - reach : 0,
        .emit_lo = -1,
        .emit_hi = -1, /* marks nothing */
        .horizon = w->origin,
        .stop_early = false,
    };
    size_t unused_first, unused_last;
    decide_pass(plan, cand, n_cand, NULL, &pre, is_beat, &unused_first, &unused_last, NULL,
                NULL, end);
}

/*
 * A window that starts at the recording's start has no warm-up before it (a block after it
 * starts CPU_DETECT_WARMUP_S earlier, to decide from levels a run has settled): it is decided
 * twice, the first pass over the whole window marking nothing, the second starting from the
 * levels the first reached at its end (warm_levels), as if the window had been seen before.
 * Only the start of a recording changes: levels learnt on its first seconds are what a strip
 * has, and where those seconds are noisy they set a threshold that the rest of a run would have
 * corrected (10-s strips at em_a 6 dB: 3,306 false beats with one pass, 2,308 with two; whole
 * records, whose first minute is clean, decide the same either way).
 */
void cpu_decide_window(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                       size_t n_cand, const struct cpu_shapes *shapes,
                       const struct cpu_decide_window *w, uint8_t *is_beat, size_t *first,
                       size_t *last)
{
    if (w->origin != 0) {
        struct detector prelude;
        decide_refs_prelude(plan, cand, n_cand, w, is_beat, &prelude);
        decide_pass(plan, cand, n_cand, shapes, w, is_beat, first, last, NULL, &prelude, NULL);
        return;
    }
    struct cpu_decide_window learn = *w;
    learn.emit_lo = learn.emit_hi = -1; /* marks nothing */
    learn.stop_early = false;
    struct detector warm;
    size_t unused_first, unused_last;
    decide_pass(plan, cand, n_cand, shapes, &learn, is_beat, &unused_first, &unused_last, NULL,
                NULL, &warm);
    decide_pass(plan, cand, n_cand, shapes, w, is_beat, first, last, &warm, NULL, NULL);
}

static void decide_pass(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                        size_t n_cand, const struct cpu_shapes *shapes,
                        const struct cpu_decide_window *w, uint8_t *is_beat, size_t *first,
                        size_t *last, const struct detector *seed,
                        const struct detector *refs_from, struct detector *end_state)
{
    const double fs = plan->fs_a_hz;
    const int64_t refractory = (int64_t)plan->refractory;
    const int64_t twave = (int64_t)detect_samples_of(DETECT_TWAVE_S, fs);
    const struct unlike_geometry shape = unlike_geometry_of(fs);
    const size_t k_lo = first_candidate_from(cand, n_cand, w->origin);
    struct detector d;
    detector_learn(&d, cand, k_lo, n_cand, w->origin, w->horizon, fs);
    if (seed)
        warm_levels(&d, seed);
    if (refs_from) { /* the references prelude's */
        memcpy(d.refs, refs_from->refs, sizeof d.refs);
        d.n_refs = refs_from->n_refs;
    }

    for (size_t k = k_lo;; k++) {
        const bool end = k == n_cand || cand[k].pos >= w->horizon;
        const int64_t now = end ? w->horizon : cand[k].pos;
        /* Search back (from the origin until the first beat), possibly for several missed
         * beats in a row; sooner where the next candidate's window is clean (crest factor at
         * least DETECT_CLEAN_CREST): there a candidate under the threshold is a small beat
         * (an aberrated premature one before its pause) more often than noise. */
        while (searchback_due(&d, now - (d.last >= 0 ? d.last : w->origin),
                              !end && cand[k].crest >= DETECT_CLEAN_CREST)) {
            for (; d.scanned < k; d.scanned++) {
                const size_t j = d.scanned;
                if (d.last >= 0 && cand[j].pos - d.last < refractory)
                    continue;
                if (d.last >= 0 && cand[j].pos - d.last < twave &&
                    cand[j].slope < DETECT_TWAVE_SLOPE * twave_reference(&d))
                    continue;
                if (searchback_passes_over(&d, &cand[j]))
                    continue;
                if (d.best == SIZE_MAX || cand[j].height > cand[d.best].height)
                    d.best = j;
            }
            if (d.best != SIZE_MAX &&
                cand[d.best].height > DETECT_SEARCHBACK_TH * detector_threshold(&d) &&
                cand[d.best].height > DETECT_SEARCHBACK_MIN * d.beat_level) {
                detector_accept(&d, cand, d.best, DETECT_SEARCHBACK_GAIN, w, is_beat);
                if (w->stop_early && d.last >= w->emit_hi)
                    goto out;
                continue;
            }
            /* Nothing even at the lowered threshold: SPK is stale (an artefact inflated it,
             * or the signal shrank). Halve it, at most once per DETECT_DECAY_RR mean RR of
             * silence and never below twice NPK, and look again; a real pause costs only a
             * lower threshold for its duration. */
            if ((double)(now - d.last_decay) <= DETECT_DECAY_RR * d.rr_mean ||
                d.spk <= 2.0 * d.npk)
                break;
            d.spk *= 0.5;
            d.last_decay = now;
        }
        if (end)
            break;
        const struct cpu_candidate *c = &cand[k];
        if (d.last >= 0 && c->pos - d.last < refractory)
            continue;
        /* the threshold rises where noise fills the floor between beats (noise_core.h) */
        const double t = noise_threshold_factor(c->crest, DETECT_THRESHOLD);
        if (c->height <= noise_threshold_at(d.spk, d.npk, t)) {
            detector_noise(&d, c);
            continue;
        }
        if (d.last >= 0 && c->pos - d.last < twave &&
            c->slope < DETECT_TWAVE_SLOPE * twave_reference(&d)) {
            detector_noise(&d, c);
            continue;
        }
        /* ... and there, in a regular rhythm, an early beat must be as strong as the usual one
         * (noise_core.h, step 3) */
        if (d.last >= 0 && detector_premature_weak(&d, c, t)) {
            detector_noise(&d, c);
            continue;
        }
        /* ... and there a candidate not stronger than the usual beat must look like one of the
         * recording's complexes (unlike_core.h). What it rejects teaches NPK nothing: a run of
         * complexes of a shape not seen before (a ventricular tachycardia's first beats)
         * would otherwise raise the threshold over the run. */
        if (shapes && t > DETECT_THRESHOLD && d.n_refs >= 2 &&
            (double)c->height < DETECT_UNLIKE_HEIGHT * d.beat_level &&
            !detector_alike(&d, shapes, shape, cand, n_cand, k))
            continue;
        detector_accept(&d, cand, k, DETECT_LEVEL_GAIN, w, is_beat);
        if (w->stop_early && d.last >= w->emit_hi)
            break;
    }
out:
    *first = d.first;
    *last = d.final;
    if (end_state)
        *end_state = d;
}

/* Block length, warm-up and tail in analysis-grid samples. */
static void block_geometry(const struct ecg_plan *plan, int64_t *block, int64_t *warmup,
                           int64_t *tail)
{
    *block = (int64_t)detect_samples_of(CPU_DETECT_BLOCK_S, plan->fs_a_hz);
    *warmup = (int64_t)detect_samples_of(CPU_DETECT_WARMUP_S, plan->fs_a_hz);
    *tail = (int64_t)detect_samples_of(CPU_DETECT_TAIL_S, plan->fs_a_hz);
}

size_t cpu_decide_blocks(const struct ecg_plan *plan, size_t n_a)
{
    int64_t block, warmup, tail;
    block_geometry(plan, &block, &warmup, &tail);
    return n_a <= (size_t)block ? 1 : (n_a + (size_t)block - 1) / (size_t)block;
}

void cpu_decide_block_window(const struct ecg_plan *plan, size_t n_a, size_t b,
                             struct cpu_decide_window *w)
{
    int64_t block, warmup, tail;
    block_geometry(plan, &block, &warmup, &tail);
    const int64_t lo = (int64_t)b * block, hi = lo + block;
    w->origin = lo > warmup ? lo - warmup : 0;
    w->emit_lo = lo;
    w->emit_hi = hi;
    w->horizon = hi + tail < (int64_t)n_a ? hi + tail : (int64_t)n_a;
    w->stop_early = true;
}

/*
 * The boundary merge. first[b] and last[b] are the first and last beats block b marked
 * (SIZE_MAX: none); blocks are in order, so the last beat kept before block b is the last
 * kept beat of the nearest earlier block that has one.
 */
static void merge_blocks(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                         size_t n_blocks, const size_t *first, const size_t *last,
                         uint8_t *is_beat)
{
    const int64_t refractory = (int64_t)plan->refractory;
    const int64_t twave = (int64_t)detect_samples_of(DETECT_TWAVE_S, plan->fs_a_hz);
    size_t prev = SIZE_MAX;
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t f = first[b];
        if (f == SIZE_MAX)
            continue;
        if (prev != SIZE_MAX) {
            const int64_t gap = cand[f].pos - cand[prev].pos;
            if (gap < refractory) {
                if (cand[f].height > cand[prev].height)
                    is_beat[prev] = 0;
                else
                    is_beat[f] = 0;
            } else if (gap < twave && cand[f].slope < DETECT_TWAVE_SLOPE * cand[prev].slope) {
                is_beat[f] = 0;
            }
        }
        if (is_beat[last[b]])
            prev = last[b];
    }
}

enum ecg_status cpu_decide(const struct ecg_plan *plan, const struct cpu_candidate *cand,
                           size_t n_cand, const struct cpu_shapes *shapes, size_t n_a,
                           uint8_t *is_beat, struct ecg_error *err)
{
    const size_t n_blocks = cpu_decide_blocks(plan, n_a);
    size_t *first = malloc(2 * n_blocks * sizeof *first);
    if (!first)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: %zu blocks", n_blocks);
    size_t *last = first + n_blocks;
    memset(is_beat, 0, n_cand);
    for (size_t b = 0; b < n_blocks; b++) {
        struct cpu_decide_window w;
        cpu_decide_block_window(plan, n_a, b, &w);
        cpu_decide_window(plan, cand, n_cand, shapes, &w, is_beat, &first[b], &last[b]);
    }
    merge_blocks(plan, cand, n_blocks, first, last, is_beat);
    free(first);
    return ECG_OK;
}
