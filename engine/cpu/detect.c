/*
 * detect.c - R-peak detection (CPU reference of the detector).
 *
 * The detector works on the Ricker response f (a band-pass centred near 14 Hz, where QRS energy
 * lies; where a window's energy says electrode-motion-like noise, the filter stage has mixed in a
 * higher band: cpu_noise_band, noise_core.h step 1) and reports each beat at the true peak of its
 * QRS in the input signal x. Stages 1, 2, 3
 * and 5 are data-parallel (the CUDA backend runs them as kernels); stage 4 is a sequential pass
 * over the candidates, a few per second, run by independent blocks of one minute of signal (one
 * GPU thread each) and merged at the block boundaries: it lives in decide.c.
 *
 * 1. Envelope. e[i] = mean of |f| over a centred window of DETECT_ENVELOPE_S. It merges the
 *    two or three lobes that one QRS complex leaves in f, whatever its polarity, into one bump.
 *    The window sums are exact integer sums of |f| in fixed point (see envelope()), so any
 *    backend that sums the same integers gets the same envelope, bit for bit. Near both ends of
 *    the recording f is recomputed with the signal extended by its end values instead of the
 *    zeros of the 'same' convolution, so that a DC offset does not turn the edges into steps
 *    that look like beats.
 *    With several leads, each lead gets its envelope and the candidates come from their fusion
 *    (fuse.c, fuse_core.h): each lead scaled to a beat level of 1 and weighed by how readable it
 *    is around each second (the crest factor of its envelope), so that noise on one lead is
 *    outvoted by the others wherever they are clean. One lead alone is used as it is.
 * 2. Candidates. Non-maximum suppression (cpu_nms) of e with a window of nms_window samples:
 *    a sample is a candidate when it is the largest of the window centred on it (the leftmost
 *    of equal maxima). With the default 0.4 s window, candidates are at least 0.2 s apart (up
 *    to 300 bpm).
 * 3. Attributes of each candidate: its height, the prominence of e over the higher of the two
 *    valleys separating it from the neighbouring candidates (a raised noise floor or a
 *    constant signal scores nothing; the first and the last candidate, whose outer valley the
 *    recording's end cuts, over their inner valley alone, unless the candidate sits on the end
 *    sample itself, its peak beyond the recording), and the steepest slope of y within
 *    +-DETECT_SLOPE_S (to tell T waves from QRS complexes).
 * 4. Adaptive decision, after Pan and Tompkins (IEEE TBME 32(3), 1985): running estimates of
 *    the signal peak level (SPK) and the noise peak level (NPK), learnt robustly on the first
 *    DETECT_LEARN_S (so one artefact there does not set them); a candidate is a beat when it
 *    exceeds NPK + DETECT_THRESHOLD (SPK - NPK) (a higher fraction where the envelope's crest
 *    factor around it says noise fills the floor: noise_core.h step 2) and lies at least
 *    `refractory` after the previous beat; one within DETECT_TWAVE_S of the previous beat whose
 *    slope is under DETECT_TWAVE_SLOPE times the previous beat's is a T wave (noise); when no
 *    beat has come for DETECT_SEARCHBACK_RR times the mean of the last DETECT_RR_COUNT RR
 *    intervals, the largest candidate since the last beat above DETECT_SEARCHBACK_TH of the
 *    (usual) threshold is taken as a missed beat (search-back), and when even that finds
 *    nothing SPK decays, so that a huge artefact taken for a beat cannot silence the rest of
 *    the recording. Peaks that are not beats update NPK, so the threshold follows the noise as
 *    well as the signal.
 *    Against tall T waves, wide ventricular beats and long pauses (decide.c): the T-wave test
 *    compares the candidate's slope with the steeper of the last beat's and the beats' usual
 *    slope (a wide beat's second lobe is as steep as the beat, not as a QRS), and guards
 *    search-back as well (a T wave taken once for a missed beat shortens the RR mean, which
 *    calls search-back earlier, which takes the next T wave: the UCR recording's failure); and
 *    search-back takes nothing under DETECT_SEARCHBACK_MIN of the beats' usual height, however
 *    long the gap (a sinus pause is not a run of missed beats), nor, in a regular rhythm,
 *    under DETECT_SEARCHBACK_FAR_MIN of it further than DETECT_SEARCHBACK_FAR_RR mean
 *    intervals after the last beat and off the rhythm's places (its missed beats lie a whole
 *    number of intervals after the last one found; elsewhere in a long gap lies a pause, and a
 *    small wave there is a P wave or noise), nor, off those places, a candidate
 *    DETECT_SEARCHBACK_ODD_SLOPE times steeper for its height than the beats (a complex of any
 *    size keeps their proportion of slope to QRS-band height; noise and P waves do not).
 *    Then the rhythm check (insert.c, insert_core.h): a beat that splits one regular RR
 *    interval in two without the strength of its neighbours is an artefact and goes.
 *    The pass runs by blocks of CPU_DETECT_BLOCK_S (60 s), each from fresh state started
 *    CPU_DETECT_WARMUP_S (40 s) earlier (the first, with nothing before it, from the levels a
 *    first pass over its own window learnt), then a merge at the block boundaries: decide.c.
 *    A recording of at most one block is decided by the plain pass.
 * 5. Refinement. Each beat is mapped to the input grid (ecg_plan_to_input) and its R peak is
 *    the largest deflection of x from its local baseline (median over +-DETECT_BASELINE_S)
 *    within +-DETECT_REFINE_S, in the beat's polarity. The polarity is that of the largest lobe
 *    of f near the beat (the steepest deflection), unless x deflects the other way more than
 *    DETECT_POLARITY_SWITCH times as far (wide ventricular beats, whose steepest edge is not
 *    their peak). The windows of neighbouring beats never overlap.
 *
 *
 * Output: R peaks ascending, at least 2 samples apart in both grids and none on the first or
 * the last sample (segmentation needs room for an onset; and a peak on an end sample lies
 * beyond the recording: the strip that holds it reports it, so a recording posted as
 * consecutive strips gets each beat once); peaks_a[i] is the analysis sample nearest to
 * peaks_in[i].
 *
 * Accuracy on the 22 MIT-BIH records of ../shared/data/mitdb, scored beat by beat against the
 * reference annotations within 150 ms as WFDB's bxb does (detections inside reference
 * ventricular flutter episodes not counted): both leads Se 99.87 %, +P 99.86 %; lead 0 alone
 * Se 99.81 %, +P 99.91 %; mean |R-peak error| 3.9 ms (tests/unit/test_detect.c asserts both).
 * Under noise, the NSTDB way: docs/ACCURACY.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cpu.h"
#include "detect_params.h"
#include "fuse_core.h"
#include "noise_core.h"
#include "select.h"

/* ------------------------------------------------------------------ 1. envelope */

/* f[i], or, within half a kernel of either end, the response to y extended by its end values
 * (less the first sample's level, as filter.c takes it off). */
static inline float edge_response(const struct ecg_plan *plan, const float *y, const float *f,
                                  size_t n, size_t i)
{
    const size_t half = plan->ricker_len / 2;
    if (i >= half && i + half < n)
        return f[i];
    double acc = 0.0;
    for (size_t k = 0; k < plan->ricker_len; k++) {
        int64_t j = (int64_t)i + (int64_t)half - (int64_t)k;
        if (j < 0)
            j = 0;
        if (j > (int64_t)n - 1)
            j = (int64_t)n - 1;
        acc += (double)plan->ricker[k] * (double)(y[j] - y[0]);
    }
    return (float)acc;
}

/* |response| at j: |f[j]| inside, the precomputed end-extended response near the ends. */
static inline float abs_response(const float *f, const float *head, size_t n_head,
                                 const float *tail, size_t tail_start, size_t j)
{
    if (j < n_head)
        return head[j];
    if (j >= tail_start)
        return tail[j - tail_start];
    return fabsf(f[j]);
}

/*
 * The window sums are taken over |f| in fixed point: q = (int32)(|f| * scale + 0.5f), with
 * scale a power of two chosen per recording so that a whole window of the largest |f| stays
 * below 2^30. Integer sums are exact and associative: any backend summing the same integers,
 * sequentially or by a parallel scan, gets a bit-identical envelope. scale being a power of two,
 * |f| * scale is exact, so the rounding is the same with or without a fused multiply-add. The
 * scale cancels in every decision of the detector (all are comparisons or ratios of heights).
 *
 * The running window sum goes block by block: the differences q[i + half] - q[i - half - 1]
 * (vectorisable), their prefix sum (one integer add per sample), the conversion to float
 * (vectorisable). Near the ends, where the response comes from head/tail, one sample at a time.
 */
#define ENVELOPE_BLOCK 1024

static inline int32_t quantise(float magnitude, float scale)
{
    return (int32_t)(magnitude * scale + 0.5f);
}

static enum ecg_status envelope(const struct ecg_plan *plan, const float *y, const float *f,
                                size_t n, float *env, struct ecg_error *err)
{
    const size_t half = detect_samples_of(DETECT_ENVELOPE_S, plan->fs_a_hz) / 2;
    const size_t width = 2 * half + 1;
    const size_t edge = plan->ricker_len / 2;
    const size_t n_head = edge < n ? edge : n, tail_start = n > edge ? n - edge : 0;
    float *head = malloc((n_head + (n - tail_start) + 1) * sizeof *head);
    if (!head)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: envelope ends");
    float *tail = head + n_head;
    for (size_t j = 0; j < n_head; j++)
        head[j] = fabsf(edge_response(plan, y, f, n, j));
    for (size_t j = tail_start; j < n; j++)
        tail[j - tail_start] = fabsf(edge_response(plan, y, f, n, j));

    /* The largest |response|. */
    float lanes[8] = {0};
    size_t i = n_head;
#ifdef __SSE2__
    {
        const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
        __m128 m0 = _mm_setzero_ps(), m1 = _mm_setzero_ps();
        for (; i + 8 <= tail_start; i += 8) {
            m0 = _mm_max_ps(m0, _mm_and_ps(_mm_loadu_ps(f + i), abs_mask));
            m1 = _mm_max_ps(m1, _mm_and_ps(_mm_loadu_ps(f + i + 4), abs_mask));
        }
        _mm_storeu_ps(lanes, m0);
        _mm_storeu_ps(lanes + 4, m1);
    }
#endif
    for (; i < tail_start; i++)
        lanes[0] = fabsf(f[i]) > lanes[0] ? fabsf(f[i]) : lanes[0];
    for (size_t j = 0; j < n_head; j++)
        lanes[0] = head[j] > lanes[0] ? head[j] : lanes[0];
    for (size_t j = tail_start; j < n; j++)
        lanes[0] = tail[j - tail_start] > lanes[0] ? tail[j - tail_start] : lanes[0];
    float peak = 0.0f;
    for (size_t l = 0; l < 8; l++)
        peak = lanes[l] > peak ? lanes[l] : peak;
    /* No response, or only the float rounding of a constant level (the filter takes y[0]'s
     * level off, so a constant signal leaves ulps, which the scale below would magnify into a
     * rhythm): a flat envelope, as for a zero signal. */
    if (!(peak > 0.0f) || !isfinite(peak) || peak <= ldexpf(fabsf(y[0]), DETECT_FLAT_EXP)) {
        memset(env, 0, n * sizeof *env);
        free(head);
        return ECG_OK;
    }
    int exponent, width_bits = 0;
    frexpf(peak, &exponent); /* peak < 2^exponent */
    while (((size_t)1 << width_bits) < width)
        width_bits++;
    const float scale = ldexpf(1.0f, 30 - exponent - width_bits);
    const double unit = 1.0 / ((double)scale * (double)width);

    /* sum = window sum of q over [i - half, i + half] as i advances. */
    int32_t sum = 0;
    for (size_t j = 0; j < half && j < n; j++)
        sum += quantise(abs_response(f, head, n_head, tail, tail_start, j), scale);
    /* Interior: both ends of the window inside [n_head, tail_start). */
    const size_t inner_lo = n_head + half + 1;
    const size_t inner_hi = tail_start > half ? tail_start - half : 0;
    for (i = 0; i < n; i++) {
        if (i == inner_lo && inner_lo < inner_hi && width < ENVELOPE_BLOCK) {
            /* q of samples [i - half - 1, i + ENVELOPE_BLOCK + half): each quantised once */
            int32_t q[2 * ENVELOPE_BLOCK], block[ENVELOPE_BLOCK];
            for (; i + ENVELOPE_BLOCK <= inner_hi; i += ENVELOPE_BLOCK) {
                const float *from = f + i - half - 1;
                for (size_t j = 0; j < ENVELOPE_BLOCK + width; j++)
                    q[j] = quantise(fabsf(from[j]), scale);
                for (size_t j = 0; j < ENVELOPE_BLOCK; j++)
                    block[j] = q[j + width] - q[j];
                for (size_t j = 0; j < ENVELOPE_BLOCK; j++) {
                    sum += block[j];
                    block[j] = sum;
                }
                for (size_t j = 0; j < ENVELOPE_BLOCK; j++)
                    env[i + j] = (float)((double)block[j] * unit);
            }
            if (i >= n)
                break;
        }
        if (i + half < n)
            sum += quantise(abs_response(f, head, n_head, tail, tail_start, i + half), scale);
        if (i > half)
            sum -= quantise(abs_response(f, head, n_head, tail, tail_start, i - half - 1), scale);
        env[i] = (float)((double)sum * unit);
    }
    free(head);
    return ECG_OK;
}

/* ------------------------------------------------------------------ 2. non-maximum suppression */

/* Indices i with v[i] > v[i - 1] and v[i] >= v[i + 1] (a missing neighbour always passes),
 * ascending; returns their count (at most n / 2 + 1: no two are adjacent). */
static size_t local_maxima(const float *v, size_t n, size_t *local)
{
    size_t count = 0, i = 1;
    if (n == 1 || v[0] >= v[1])
        local[count++] = 0;
#ifdef __SSE2__
    /* Four at a time; the comparisons (and their NaN behaviour) are the scalar ones. */
    for (; i + 4 < n; i += 4) {
        __m128 mid = _mm_loadu_ps(v + i);
        __m128 rises = _mm_cmpgt_ps(mid, _mm_loadu_ps(v + i - 1));
        __m128 holds = _mm_cmpge_ps(mid, _mm_loadu_ps(v + i + 1));
        unsigned bits = (unsigned)_mm_movemask_ps(_mm_and_ps(rises, holds));
        while (bits) {
            local[count++] = i + (size_t)__builtin_ctz(bits);
            bits &= bits - 1;
        }
    }
#endif
    for (; i + 1 < n; i++)
        if (v[i] > v[i - 1] && v[i] >= v[i + 1])
            local[count++] = i;
    if (n > 1 && v[n - 1] > v[n - 2])
        local[count++] = n - 1;
    return count;
}

/*
 * The maximum of a window is at a local maximum inside it (v[j] > v[j-1], v[j] >= v[j+1]) or at
 * one of its two ends. So the scan first keeps the local maxima (a cheap pass over every
 * sample), then slides a monotonic deque of local maxima over the window [i - half, i + half]:
 * values strictly decrease from front to back, and a newcomer evicts only strictly smaller
 * values, so of equal maxima the leftmost stays in front. Local maximum i is a peak when it is
 * at the front and beats both window ends (v[i] > v[i - half], v[i] >= v[i + half]). Each
 * index enters and leaves the deque once: O(n) whatever half is.
 */
enum ecg_status cpu_nms(const float *v, size_t n, size_t half, float floor_value, int64_t *peaks,
                        size_t *n_peaks, struct ecg_error *err)
{
    size_t cap = 1; /* a power of two >= the most local maxima a window can hold */
    while (cap < half + 2)
        cap <<= 1;
    const size_t mask = cap - 1;
    size_t *deque = NULL, *local = NULL;
    size_t n_local = 0, head = 0, count = 0, next = 0, found = 0;

    *n_peaks = 0;
    if (n == 0)
        return ECG_OK;
    deque = malloc(cap * sizeof *deque);
    /* Local maxima are at least 2 apart, except at index 0. */
    local = malloc((n / 2 + 2) * sizeof *local);
    if (!deque || !local) {
        free(deque);
        free(local);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "nms: %zu samples", n);
    }
    if (half == 0) { /* every sample is the maximum of its own window */
        for (size_t i = 0; i < n; i++)
            if (v[i] > floor_value)
                peaks[found++] = (int64_t)i;
        goto out;
    }
    n_local = local_maxima(v, n, local);

    for (size_t m = 0; m < n_local; m++) {
        const size_t i = local[m];
        while (count > 0 && deque[head] + half < i) { /* left the window */
            head = (head + 1) & mask;
            count--;
        }
        for (; next < n_local && local[next] <= i + half; next++) {
            while (count > 0 && v[deque[(head + count - 1) & mask]] < v[local[next]])
                count--;
            deque[(head + count) & mask] = local[next];
            count++;
        }
        if (deque[head] != i || !(v[i] > floor_value))
            continue;
        const size_t left = i >= half ? i - half : 0;
        const size_t right = half < n - 1 - i ? i + half : n - 1;
        if ((left < i && !(v[i] > v[left])) || (right > i && !(v[i] >= v[right])))
            continue;
        peaks[found++] = (int64_t)i;
    }
out:
    free(deque);
    free(local);
    *n_peaks = found;
    return ECG_OK;
}

/* ------------------------------------------------------------------ 3. candidates */

/* struct cpu_candidate (cpu.h): position (analysis grid), height (prominence of the
 * envelope at pos), slope (steepest |y[i+1] - y[i]| near pos). */

/* min(v[lo..hi]), hi >= lo; independent lanes so that the loop vectorises. */
static float range_min(const float *v, size_t lo, size_t hi)
{
    float lanes[8];
    for (int l = 0; l < 8; l++)
        lanes[l] = v[lo];
    size_t i = lo;
    for (; i + 8 <= hi + 1; i += 8)
        for (int l = 0; l < 8; l++)
            lanes[l] = v[i + (size_t)l] < lanes[l] ? v[i + (size_t)l] : lanes[l];
    for (; i <= hi; i++)
        lanes[0] = v[i] < lanes[0] ? v[i] : lanes[0];
    float m = lanes[0];
    for (int l = 1; l < 8; l++)
        m = lanes[l] < m ? lanes[l] : m;
    return m;
}

/*
 * A candidate's height is its prominence: how far the envelope rises above the higher of the
 * two valleys (envelope minima) that separate it from the neighbouring candidates. A flat or
 * slowly varying envelope (a constant signal, the floor of a noisy stretch) then scores
 * nothing, whatever its level. Each envelope sample lies between two consecutive candidates, so
 * all the valleys cost one pass.
 */
/* The steepest |y[i+1] - y[i]| within +-reach of c. */
static float steepest(const float *y, size_t n, size_t c, size_t reach)
{
    size_t lo = c > reach ? c - reach : 0;
    size_t hi = c + reach < n - 1 ? c + reach : n - 1;
    float slope = 0.0f;
    for (size_t i = lo; i < hi; i++) {
        float d = fabsf(y[i + 1] - y[i]);
        slope = d > slope ? d : slope;
    }
    return slope;
}

/* With several leads (gain non-NULL: n_leads x n_win, fuse.c), a candidate's slope is the
 * leads' slopes weighed by their gains at the candidate, as the envelope is. */
/* The envelope's crest factor per window of NOISE_WINDOW_S (noise_core.h, step 2): crest gets
 * n / win rounded up entries. */
static enum ecg_status envelope_crest(const float *env, size_t n, size_t win, float *crest,
                                      struct ecg_error *err)
{
    const size_t n_win = n / win + (n % win ? 1 : 0);
    double *peak = malloc(2 * n_win * sizeof *peak);
    if (!peak)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: %zu windows", n_win);
    double *mean = peak + n_win;
    for (size_t j = 0; j < n_win; j++) {
        float p;
        fuse_window_stats(env, n, win, j, &p, &mean[j]);
        peak[j] = p;
    }
    for (size_t j = 0; j < n_win; j++)
        crest[j] = noise_crest(peak, mean, n_win, j);
    free(peak);
    return ECG_OK;
}

static void describe_candidates(const struct ecg_plan *plan, const struct cpu_lead *leads,
                                size_t n_leads, const float *gain, size_t n_win,
                                const float *env, const float *crest, size_t n,
                                const int64_t *pos, size_t n_cand, struct cpu_candidate *cand)
{
    const size_t reach = detect_samples_of(DETECT_SLOPE_S, plan->fs_a_hz);
    const size_t win = cpu_fuse_window(plan);
    /* minimum since the previous candidate */
    float left_valley = n_cand ? range_min(env, 0, (size_t)pos[0]) : 0.0f;
    for (size_t k = 0; k < n_cand; k++) {
        const size_t c = (size_t)pos[k];
        const size_t next = k + 1 < n_cand ? (size_t)pos[k + 1] : n - 1;
        const float right_valley = range_min(env, c, next);
        float valley = left_valley > right_valley ? left_valley : right_valley;
        if (n_cand > 1 && k == 0 && c > 0)
            valley = right_valley; /* the recording starts inside its left valley */
        else if (n_cand > 1 && k == n_cand - 1 && c < n - 1)
            valley = left_valley; /* ... or ends inside its right one */

        float slope = gain ? 0.0f : steepest(leads[0].y, n, c, reach);
        if (gain) {
            for (size_t l = 0; l < n_leads; l++)
                slope += fuse_gain_at(gain + l * n_win, n_win, win, c) *
                         steepest(leads[l].y, n, c, reach);
        }
        float prominence = env[c] - valley;
        if (prominence < DETECT_MIN_PROMINENCE * env[c])
            prominence = 0.0f; /* a ripple on a plateau, not a peak */
        cand[k] = (struct cpu_candidate){pos[k], prominence, slope, crest[c / win]};
        left_valley = right_valley;
    }
}

/* ------------------------------------------------------------------ 5. refinement */

/* Nearest analysis-grid index of input index i: round(i * up / down), halves up. */
static int64_t to_analysis(const struct ecg_plan *plan, int64_t i)
{
    return (2 * i * (int64_t)plan->up + (int64_t)plan->down) / (2 * (int64_t)plan->down);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/*
 * R peak in the input grid of the beat found at analysis index c, searched within
 * [lo_in, hi_in] (already clipped to the beat's own neighbourhood). scratch holds the baseline
 * window (2 * baseline reach + 1 floats).
 */
static int64_t refine_peak(const struct ecg_plan *plan, const float *x, size_t n_in,
                           const float *f, size_t n_a, int64_t c, int64_t lo_in, int64_t hi_in,
                           float *scratch)
{
    const int64_t lobe_reach = (int64_t)detect_samples_of(DETECT_REFINE_S, plan->fs_a_hz);
    const int64_t base_reach = (int64_t)detect_samples_of(DETECT_BASELINE_S, plan->fs_in_hz);
    const int64_t ci = clamp64(ecg_plan_to_input(plan, c), 0, (int64_t)n_in - 1);

    /* Polarity of the steepest deflection: the larger lobe of f. */
    float f_max = 0.0f, f_min = 0.0f;
    for (int64_t i = clamp64(c - lobe_reach, 0, (int64_t)n_a - 1);
         i <= clamp64(c + lobe_reach, 0, (int64_t)n_a - 1); i++) {
        if (f[i] > f_max)
            f_max = f[i];
        if (f[i] < f_min)
            f_min = f[i];
    }
    int sign = f_max >= -f_min ? 1 : -1;

    int64_t b_lo = clamp64(ci - base_reach, 0, (int64_t)n_in - 1);
    int64_t b_hi = clamp64(ci + base_reach, 0, (int64_t)n_in - 1);
    /* Every stride-th sample: DETECT_BASELINE_POINTS are plenty for a median. */
    const int64_t stride = (b_hi - b_lo) / DETECT_BASELINE_POINTS + 1;
    size_t nb = 0;
    for (int64_t i = b_lo; i <= b_hi; i += stride)
        scratch[nb++] = x[i];
    const float base = cpu_median_inplace(scratch, nb);

    float up = 0.0f, down = 0.0f;
    for (int64_t i = lo_in; i <= hi_in; i++) {
        float dev = x[i] - base;
        if (dev > up)
            up = dev;
        if (-dev > down)
            down = -dev;
    }
    if (sign > 0 && down > DETECT_POLARITY_SWITCH * up)
        sign = -1;
    else if (sign < 0 && up > DETECT_POLARITY_SWITCH * down)
        sign = 1;

    int64_t best = lo_in;
    float best_dev = -INFINITY;
    for (int64_t i = lo_in; i <= hi_in; i++) {
        float dev = (float)sign * (x[i] - base);
        if (dev > best_dev) { /* strict: the earliest of equal peaks */
            best_dev = dev;
            best = i;
        }
    }
    return best;
}

/*
 * Refines every beat and writes the R peaks to peaks_in and their analysis-grid positions to
 * peaks_a. Beats are kept in order with at least 2 samples between neighbours in both grids and
 * none on the first sample (segmentation needs room for an onset before each R peak) or the
 * last (the largest deflection there is the upstroke of a complex whose peak lies beyond the
 * recording); a beat that would break this is dropped. Returns the number written.
 */
static size_t refine_all(const struct ecg_plan *plan, const float *x, size_t n_in,
                         const float *f, size_t n_a, const struct cpu_candidate *cand,
                         const uint8_t *is_beat, size_t n_cand, float *scratch,
                         int64_t *peaks_a, int64_t *peaks_in)
{
    const int64_t reach = (int64_t)detect_samples_of(DETECT_REFINE_S, plan->fs_in_hz);
    size_t n = 0;
    int64_t prev_c = -1;
    for (size_t k = 0; k < n_cand; k++) {
        if (!is_beat[k])
            continue;
        const int64_t c = cand[k].pos;
        size_t nk = k + 1;
        while (nk < n_cand && !is_beat[nk])
            nk++;
        const int64_t ci = clamp64(ecg_plan_to_input(plan, c), 0, (int64_t)n_in - 1);
        int64_t lo = ci - reach, hi = ci + reach;
        if (prev_c >= 0) { /* stay past the midpoint to the previous beat */
            int64_t mid = (ecg_plan_to_input(plan, prev_c) + ci) / 2 + 1;
            if (lo < mid)
                lo = mid;
        }
        if (nk < n_cand) { /* and before the midpoint to the next one */
            int64_t mid = (ci + ecg_plan_to_input(plan, cand[nk].pos)) / 2;
            if (hi > mid)
                hi = mid;
        }
        lo = clamp64(lo, 0, (int64_t)n_in - 1);
        hi = clamp64(hi, 0, (int64_t)n_in - 1);
        prev_c = c;
        if (lo > hi)
            continue;
        int64_t r_in = refine_peak(plan, x, n_in, f, n_a, c, lo, hi, scratch);
        int64_t r_a = to_analysis(plan, r_in);
        if (r_a > (int64_t)n_a - 1)
            r_a = (int64_t)n_a - 1;
        if (r_in < 1 || r_a < 1 || r_in >= (int64_t)n_in - 1)
            continue;
        if (n > 0 && (r_in < peaks_in[n - 1] + 2 || r_a < peaks_a[n - 1] + 2))
            continue;
        peaks_in[n] = r_in;
        peaks_a[n] = r_a;
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ entry point */

/* cpu_detect_candidates_leads, and the envelope's crest factor per window of
 * cpu_fuse_window() samples to *crest_out when it is not NULL (malloc'd; NULL when there are
 * no candidates, and then no beats to read it). */
static enum ecg_status detect_candidates(const struct ecg_plan *plan,
                                         const struct cpu_lead *leads, size_t n_leads,
                                         size_t n_a, struct cpu_candidate **cand,
                                         size_t *n_cand, double *agree, float **crest_out,
                                         struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    float *env = NULL, *lead_env[FUSE_MAX_LEADS] = {NULL}, *gain = NULL, *crest = NULL;
    int64_t *pos = NULL;
    struct cpu_candidate *out = NULL;
    size_t count = 0, n_win = 0;

    *cand = NULL;
    *n_cand = 0;
    if (n_a < 2)
        return ECG_OK;
    if (n_leads < 1 || n_leads > FUSE_MAX_LEADS)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "detect: %zu leads", n_leads);
    /* NMS peaks are more than half a window apart. */
    const size_t half = plan->nms_window / 2;
    const size_t max_cand = n_a / (half + 1) + 1;
    env = malloc(n_a * sizeof *env);
    pos = malloc(max_cand * sizeof *pos);
    if (!env || !pos) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                          "detect: no memory for the envelope of %zu samples", n_a);
        goto out;
    }
    if (n_leads == 1) {
        status = envelope(plan, leads[0].y, leads[0].f, n_a, env, err);
    } else {
        for (size_t l = 0; l < n_leads && status == ECG_OK; l++) {
            lead_env[l] = malloc(n_a * sizeof *lead_env[l]);
            status = lead_env[l] ? envelope(plan, leads[l].y, leads[l].f, n_a, lead_env[l], err)
                                 : ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                                            "detect: envelope of lead %zu", l);
        }
        if (status == ECG_OK)
            status = cpu_fuse(plan, (const float *const *)lead_env, n_leads, n_a, env, &gain,
                              &n_win, agree, err);
    }
    if (status != ECG_OK)
        goto out;
    status = cpu_nms(env, n_a, half, 0.0f, pos, &count, err);
    if (status != ECG_OK)
        goto out;
    if (count == 0)
        goto out;
    out = malloc(count * sizeof *out);
    if (!out) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                          "detect: no memory for %zu candidates", count);
        goto out;
    }
    crest = malloc((n_a / cpu_fuse_window(plan) + 1) * sizeof *crest);
    status = crest ? envelope_crest(env, n_a, cpu_fuse_window(plan), crest, err)
                   : ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: crest factors");
    if (status != ECG_OK)
        goto out;
    describe_candidates(plan, leads, n_leads, gain, n_win, env, crest, n_a, pos, count, out);
    *cand = out;
    *n_cand = count;
    out = NULL;
    if (crest_out) {
        *crest_out = crest;
        crest = NULL;
    }
out:
    for (size_t l = 0; l < FUSE_MAX_LEADS; l++)
        free(lead_env[l]);
    free(gain);
    free(crest);
    free(env);
    free(pos);
    free(out);
    return status;
}

enum ecg_status cpu_detect_candidates_leads(const struct ecg_plan *plan,
                                            const struct cpu_lead *leads, size_t n_leads,
                                            size_t n_a, struct cpu_candidate **cand,
                                            size_t *n_cand, double *agree,
                                            struct ecg_error *err)
{
    return detect_candidates(plan, leads, n_leads, n_a, cand, n_cand, agree, NULL, err);
}

enum ecg_status cpu_detect_candidates(const struct ecg_plan *plan, const float *y,
                                      const float *f, size_t n_a, struct cpu_candidate **cand,
                                      size_t *n_cand, struct ecg_error *err)
{
    const struct cpu_lead lead = {y, f};
    return cpu_detect_candidates_leads(plan, &lead, 1, n_a, cand, n_cand, NULL, err);
}

enum ecg_status cpu_detect(const struct ecg_plan *plan, const float *x, size_t n_in,
                           const float *y, const float *f, size_t n_a, int64_t **peaks_a,
                           int64_t **peaks_in, size_t *n_peaks, struct ecg_error *err)
{
    const struct cpu_lead lead = {y, f};
    return cpu_detect_leads(plan, x, n_in, &lead, 1, n_a, peaks_a, peaks_in, n_peaks, NULL, NULL,
                            err);
}

enum ecg_status cpu_detect_leads(const struct ecg_plan *plan, const float *x, size_t n_in,
                                 const struct cpu_lead *leads, size_t n_leads, size_t n_a,
                                 int64_t **peaks_a, int64_t **peaks_in, size_t *n_peaks,
                                 double *agree, float **beat_crest, struct ecg_error *err)
{
    const float *f = leads[0].f;
    enum ecg_status status = ECG_OK;
    float *scratch = NULL, *crest = NULL, *out_crest = NULL;
    int64_t *out_a = NULL, *out_in = NULL;
    struct cpu_candidate *cand = NULL;
    uint8_t *is_beat = NULL;
    size_t n_cand = 0, n_beats = 0;

    *peaks_a = NULL;
    *peaks_in = NULL;
    *n_peaks = 0;
    if (beat_crest)
        *beat_crest = NULL;
    if (n_a < 2 || n_in < 2)
        return ECG_OK;

    status = detect_candidates(plan, leads, n_leads, n_a, &cand, &n_cand, agree,
                               beat_crest ? &crest : NULL, err);
    if (status != ECG_OK)
        goto out;
    is_beat = calloc(n_cand ? n_cand : 1, 1);
    scratch = malloc((2 * detect_samples_of(DETECT_BASELINE_S, plan->fs_in_hz) + 1) * sizeof *scratch);
    out_a = malloc((n_cand ? n_cand : 1) * sizeof *out_a);
    out_in = malloc((n_cand ? n_cand : 1) * sizeof *out_in);
    if (!is_beat || !scratch || !out_a || !out_in) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                          "detect: no memory for %zu candidates", n_cand);
        goto out;
    }
    const struct cpu_shapes shapes = {leads, n_leads, n_a};
    status = cpu_decide(plan, cand, n_cand, &shapes, n_a, is_beat, err);
    if (status != ECG_OK)
        goto out;
    status = cpu_reject_insertions(cand, n_cand, is_beat, err);
    if (status != ECG_OK)
        goto out;
    n_beats = refine_all(plan, x, n_in, f, n_a, cand, is_beat, n_cand, scratch, out_a, out_in);
    if (beat_crest) {
        /* each beat's window's crest factor (beats exist only where candidates, and so the
         * crest windows, do) */
        const size_t win = cpu_fuse_window(plan);
        out_crest = malloc((n_beats ? n_beats : 1) * sizeof *out_crest);
        if (!out_crest) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                              "detect: no memory for %zu beats", n_beats);
            goto out;
        }
        for (size_t b = 0; b < n_beats; b++)
            out_crest[b] = crest[(size_t)out_a[b] / win];
        *beat_crest = out_crest;
        out_crest = NULL;
    }

    *peaks_a = out_a;
    *peaks_in = out_in;
    *n_peaks = n_beats;
    out_a = out_in = NULL;
out:
    free(crest);
    free(out_crest);
    free(cand);
    free(is_beat);
    free(scratch);
    free(out_a);
    free(out_in);
    return status;
}
