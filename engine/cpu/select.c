/*
 * select.c - quickselect, small medians, and the exact median/MAD of long signals (select.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSSE3__) && defined(__POPCNT__)
#include <immintrin.h>
#define SELECT_SSSE3 1
#endif

#include "select.h"

static inline uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

/* Uniform-enough index below span, by multiply-shift (no division) for spans under 2^32. */
static inline size_t random_below(uint64_t *state, size_t span)
{
    uint64_t r = next_random(state);
    if (span <= UINT32_MAX)
        return (size_t)(((r >> 32) * (uint64_t)span) >> 32);
    return (size_t)(r % span);
}

/*
 * Iterative quickselect: pivot the median of three pseudo-random elements, three-way (Dutch
 * flag) partition, so runs of equal values - common in quantised ECG - are settled in one pass
 * instead of degrading to O(n^2). Expected O(n) whatever the input order.
 */
float cpu_select_rank(float *v, size_t n, size_t rank)
{
    size_t lo = 0, hi = n; /* the answer lies in v[lo..hi) */
    uint64_t state = 0x9e3779b97f4a7c15ULL ^ n; /* fixed seed: the result never depends on it */
    while (hi - lo > 1) {
        /* Median of three pseudo-random positions: no input order (sorted, V-shaped, organ
         * pipe) can make the pivots bad on purpose. */
        size_t span = hi - lo;
        float a = v[lo + random_below(&state, span)], b = v[lo + random_below(&state, span)],
              c = v[lo + random_below(&state, span)];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        /* [lo, lt) < pivot, [lt, i) == pivot, [gt, hi) > pivot */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            float val = v[i];
            if (val < pivot) {
                v[i++] = v[lt];
                v[lt++] = val;
            } else if (val > pivot) {
                v[i] = v[--gt];
                v[gt] = val;
            } else {
                i++;
            }
        }
        if (rank < lt)
            hi = lt;
        else if (rank >= gt)
            lo = gt;
        else
            return pivot; /* v[lt..gt) all equal the pivot: rank is settled */
    }
    return v[lo];
}

float cpu_median_inplace(float *v, size_t n)
{
    size_t mid = n / 2;
    float upper = cpu_select_rank(v, n, mid);
    if (n % 2 == 1)
        return upper;
    /* After the selection every value left of mid is <= upper: the lower middle is their max. */
    float lower = v[0];
    for (size_t i = 1; i < mid; i++)
        if (v[i] > lower)
            lower = v[i];
    return (float)(0.5 * ((double)lower + (double)upper));
}

/* ------------------------------------------------------------------ median and MAD */

/*
 * The values of ranks r_lo and r_hi (r_lo <= r_hi <= r_lo + 1: a median's pair) among w[0..n),
 * for the few values select_pair leaves to it. Quickselect with a three-way partition written
 * out of place and branch-free: each value is stored both at the front of tmp (kept when below
 * the pivot) and at its back (kept when above), and only the two counts move, so no comparison
 * steers a branch and no store waits for a load (quickselect's in-place three-way partition
 * mispredicts about every other value of a signal: 3-4x slower on a 10-s strip). w and tmp
 * (n values each) are scratch; they swap roles at each step. Pivot: the median of three
 * pseudo-random values (fixed seed), as cpu_select_rank. The values returned are the exact
 * order statistics, so the result is the same whatever the order of the steps.
 */
#define SELECT_SORT_BELOW 24

static void small_select_pair(float *w, float *tmp, size_t n, size_t r_lo, size_t r_hi,
                              float *out_lo, float *out_hi)
{
    uint64_t state = 0x9e3779b97f4a7c15ULL ^ n;
    for (;;) {
        if (n < SELECT_SORT_BELOW) { /* insertion sort of the last few */
            for (size_t i = 1; i < n; i++) {
                float x = w[i];
                size_t j = i;
                for (; j > 0 && w[j - 1] > x; j--)
                    w[j] = w[j - 1];
                w[j] = x;
            }
            *out_lo = w[r_lo];
            *out_hi = w[r_hi];
            return;
        }
        float a = w[random_below(&state, n)], b = w[random_below(&state, n)],
              c = w[random_below(&state, n)];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        size_t below = 0, above = 0;
        for (size_t i = 0; i < n; i++) {
            float x = w[i];
            tmp[below] = x;
            tmp[n - 1 - above] = x;
            below += x < pivot;
            above += x > pivot;
        }
        const size_t equal_end = n - above; /* ranks [below, equal_end) equal the pivot */
        if (r_hi < below) { /* both among the values below */
            float *t = w;
            w = tmp;
            tmp = t;
            n = below;
            continue;
        }
        if (r_lo >= equal_end) { /* both among the values above */
            float *t = w;
            w = tmp + equal_end;
            tmp = t;
            n = above;
            r_lo -= equal_end;
            r_hi -= equal_end;
            continue;
        }
        /* at least one rank in [below, equal_end), or r_lo = below - 1 and r_hi = equal_end:
         * the pivot's neighbours are the largest value below it and the smallest above */
        if (r_lo < below) {
            float m = tmp[0];
            for (size_t i = 1; i < below; i++)
                m = tmp[i] > m ? tmp[i] : m;
            *out_lo = m;
        } else {
            *out_lo = pivot;
        }
        if (r_hi >= equal_end) {
            float m = tmp[equal_end];
            for (size_t i = equal_end + 1; i < n; i++)
                m = tmp[i] < m ? tmp[i] : m;
            *out_hi = m;
        } else {
            *out_hi = pivot;
        }
        return;
    }
}

/*
 * Exact selection in large arrays by histogram narrowing. One level: the minimum and maximum,
 * a histogram of SELECT_BUCKETS equal-width buckets between them (four interleaved copies of
 * 32-bit counts, which stay in L1 and keep runs of equal values from serialising on one
 * counter), then the values of the buckets holding the wanted ranks are gathered (branch-free)
 * into a new, much smaller array. The bucket index is a monotone function of the value (IEEE
 * rounding is monotone), so the buckets partition the values in order and the ranks carry over
 * exactly. Levels repeat until SELECT_SMALL values remain, which quickselect finishes. Each
 * level rescales to the gathered values' own range, so even a few huge outliers (all other
 * values in one bucket) cost only one more level. Typically: three passes over the input.
 */
#define SELECT_BUCKETS 4096u
#define SELECT_LANES 4
#define SELECT_SMALL 65536
#define SELECT_CHUNK ((size_t)1 << 30) /* 32-bit counts cannot overflow within a chunk */

static inline float select_value(const float *v, size_t i, float center, bool deviation)
{
    return deviation ? fabsf(v[i] - center) : v[i];
}

/* Monotone in w; inv_width is finite and positive, so t is never NaN (w - lo may overflow to
 * +Inf for extreme ranges, which lands in the last bucket as it should). */
static inline uint32_t select_bucket(float w, float lo, float inv_width)
{
    float t = (w - lo) * inv_width;
    return t < (float)SELECT_BUCKETS ? (uint32_t)t : SELECT_BUCKETS - 1;
}

/* The passes below are written once and instantiated for deviation = false and true (the
 * always_inline bodies see a constant), so that each inner loop is branch-free and
 * vectorisable. */
#define SELECT_INLINE static inline __attribute__((always_inline))

SELECT_INLINE void min_max_body(const float *v, size_t n, float center, bool deviation,
                                float *lo, float *hi)
{
    float mins[8], maxs[8]; /* independent lanes, so the loop vectorises */
    for (int l = 0; l < 8; l++)
        mins[l] = maxs[l] = select_value(v, 0, center, deviation);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) {
            float w = select_value(v, i + (size_t)l, center, deviation);
            mins[l] = w < mins[l] ? w : mins[l];
            maxs[l] = w > maxs[l] ? w : maxs[l];
        }
    }
    for (; i < n; i++) {
        float w = select_value(v, i, center, deviation);
        mins[0] = w < mins[0] ? w : mins[0];
        maxs[0] = w > maxs[0] ? w : maxs[0];
    }
    *lo = mins[0];
    *hi = maxs[0];
    for (int l = 1; l < 8; l++) {
        *lo = mins[l] < *lo ? mins[l] : *lo;
        *hi = maxs[l] > *hi ? maxs[l] : *hi;
    }
}

SELECT_INLINE void histogram_body(const float *v, size_t n, float center, bool deviation,
                                  float lo, float inv_width, size_t *hist)
{
    uint32_t lanes[SELECT_LANES][SELECT_BUCKETS];
    memset(hist, 0, SELECT_BUCKETS * sizeof *hist);
    for (size_t start = 0; start < n; start += SELECT_CHUNK) {
        size_t end = n - start > SELECT_CHUNK ? start + SELECT_CHUNK : n;
        memset(lanes, 0, sizeof lanes);
        size_t i = start;
        for (; i + SELECT_LANES <= end; i += SELECT_LANES)
            for (size_t l = 0; l < SELECT_LANES; l++)
                lanes[l][select_bucket(select_value(v, i + l, center, deviation), lo,
                                       inv_width)]++;
        for (; i < end; i++)
            lanes[0][select_bucket(select_value(v, i, center, deviation), lo, inv_width)]++;
        for (int l = 0; l < SELECT_LANES; l++)
            for (uint32_t b = 0; b < SELECT_BUCKETS; b++)
                hist[b] += lanes[l][b];
    }
}

/* Writes the values whose bucket lies in [b_lo, b_hi] to out (room for their count + 1). */
SELECT_INLINE size_t gather_body(const float *v, size_t n, float center, bool deviation,
                                 float lo, float inv_width, uint32_t b_lo, uint32_t b_hi,
                                 float *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        float w = select_value(v, i, center, deviation);
        uint32_t b = select_bucket(w, lo, inv_width);
        out[m] = w;
        m += b - b_lo <= b_hi - b_lo; /* b_lo <= b <= b_hi, unsigned */
    }
    return m;
}

static void select_min_max(const float *v, size_t n, float center, bool deviation, float *lo,
                           float *hi)
{
    if (deviation)
        min_max_body(v, n, center, true, lo, hi);
    else
        min_max_body(v, n, center, false, lo, hi);
}

static void select_histogram(const float *v, size_t n, float center, bool deviation, float lo,
                             float inv_width, size_t *hist)
{
    if (deviation)
        histogram_body(v, n, center, true, lo, inv_width, hist);
    else
        histogram_body(v, n, center, false, lo, inv_width, hist);
}

static size_t select_gather(const float *v, size_t n, float center, bool deviation, float lo,
                            float inv_width, uint32_t b_lo, uint32_t b_hi, float *out)
{
    if (deviation)
        return gather_body(v, n, center, true, lo, inv_width, b_lo, b_hi, out);
    return gather_body(v, n, center, false, lo, inv_width, b_lo, b_hi, out);
}

/*
 * Values of ranks r_lo <= r_hi of w[i] = v[i], or |v[i] - center| when deviation (i < n, n > 0,
 * no NaN). v is not modified. Fails only with ECG_ERR_NOMEM.
 */
static enum ecg_status select_pair(const float *v, size_t n, float center, bool deviation,
                                   size_t r_lo, size_t r_hi, float *out_lo, float *out_hi,
                                   struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    float *owned = NULL; /* the values gathered by the previous level */
    size_t *hist = NULL;
    for (;;) {
        float lo = 0.0f, hi = 0.0f, inv_width = 0.0f;
        if (n > SELECT_SMALL) { /* few values go straight to the selection below */
            select_min_max(v, n, center, deviation, &lo, &hi);
            if (!(lo < hi)) { /* all equal */
                *out_lo = *out_hi = lo;
                break;
            }
            inv_width = (float)((double)SELECT_BUCKETS / ((double)hi - (double)lo));
        }
        if (n <= SELECT_SMALL || !isfinite(inv_width)) { /* few values, or a tiny range */
            float *small = malloc(2 * n * sizeof *small);
            if (!small) {
                status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "median: %zu values", n);
                break;
            }
            for (size_t i = 0; i < n; i++)
                small[i] = select_value(v, i, center, deviation);
            small_select_pair(small, small + n, n, r_lo, r_hi, out_lo, out_hi);
            free(small);
            break;
        }
        if (!hist && !(hist = malloc(SELECT_BUCKETS * sizeof *hist))) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "median: histogram");
            break;
        }
        select_histogram(v, n, center, deviation, lo, inv_width, hist);
        size_t below = 0, rank = r_lo;
        uint32_t b_lo = 0;
        while (rank >= hist[b_lo]) {
            rank -= hist[b_lo];
            below += hist[b_lo];
            b_lo++;
        }
        uint32_t b_hi = b_lo;
        size_t count = hist[b_lo];
        while (r_hi - below >= count) {
            b_hi++;
            count += hist[b_hi];
        }
        count = hist[b_lo];
        if (b_hi != b_lo) {
            /* The two ranks straddle a bucket boundary (everything between is empty): one
             * rank at a time, each of which narrows to a single bucket and so progresses. */
            float unused;
            status = select_pair(v, n, center, deviation, r_lo, r_lo, out_lo, &unused, err);
            if (status == ECG_OK)
                status = select_pair(v, n, center, deviation, r_hi, r_hi, &unused, out_hi, err);
            break;
        }
        float *gathered = malloc((count + 1) * sizeof *gathered); /* +1: branch-free writes */
        if (!gathered) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "median: %zu values", count);
            break;
        }
        size_t m = select_gather(v, n, center, deviation, lo, inv_width, b_lo, b_lo, gathered);
        free(owned);
        owned = gathered;
        v = gathered;
        n = m;
        center = 0.0f;
        deviation = false;
        r_lo -= below;
        r_hi -= below;
    }
    free(owned);
    free(hist);
    return status;
}

/*
 * The fast path, from SAMPLE_MID_MIN values: bracket the wanted ranks with a deterministic
 * subsample (every stride-th value), then one branch-free pass counts the values below the
 * bracket and gathers those inside it, and the branch-free quickselect (small_select_pair)
 * finishes on the few gathered values; it also picks the bracket's ends in the subsample. Up
 * to a million values every 16th value is sampled and the bracket is SAMPLE_MID_MARGIN
 * standard deviations of the subsample rank wide (a 10-s strip: 2,500 values, ~150 sampled,
 * ~1,000 gathered); beyond, SAMPLE_SIZE values are sampled and the bracket is SAMPLE_MARGIN
 * wide. Missing the ranks takes data whose order is correlated with the stride (or, at 4
 * standard deviations, about one recording in 15,000); then, or when the gathered values would
 * not fit the buffer, *done stays false and the caller falls back to select_pair. Exact either
 * way. Median and MAD of UCR excerpts, this machine (tests/unit/test_segment.c checks the
 * values against a sort): 2,500 values 12.5 -> 8.3 us, 20,000 76 -> 34 us, 65,536 326 -> 94
 * us, 500,000 2.07 -> 0.86 ms against quickselect or the histogram levels alone.
 */
#define SAMPLE_SIZE 65536
#define SAMPLE_MARGIN 8.0
#define SAMPLE_MID_MIN 2048   /* fewer values: the branch-free quickselect alone */
#define SAMPLE_MID_STRIDE 16  /* mid: every 16th value sampled ... */
#define SAMPLE_MID_MARGIN 4.0 /* ... and the bracket 4 standard deviations of its rank wide */

#ifdef SELECT_SSSE3
/* Byte shuffles that pack the floats selected by a 4-bit mask to the front of a vector. */
static const uint8_t pack_shuffle[16][16] = {
#define L(k) 4 * (k), 4 * (k) + 1, 4 * (k) + 2, 4 * (k) + 3
#define Z 0x80, 0x80, 0x80, 0x80
    {Z, Z, Z, Z},          {L(0), Z, Z, Z},       {L(1), Z, Z, Z},       {L(0), L(1), Z, Z},
    {L(2), Z, Z, Z},       {L(0), L(2), Z, Z},    {L(1), L(2), Z, Z},    {L(0), L(1), L(2), Z},
    {L(3), Z, Z, Z},       {L(0), L(3), Z, Z},    {L(1), L(3), Z, Z},    {L(0), L(1), L(3), Z},
    {L(2), L(3), Z, Z},    {L(0), L(2), L(3), Z}, {L(1), L(2), L(3), Z}, {L(0), L(1), L(2), L(3)},
#undef L
#undef Z
};
#endif

/*
 * Counts the values below a and gathers those in [a, b] into out (room for cap + 4 values; past
 * cap values it stops storing but goes on counting, so that the caller sees the overflow).
 * Four at a time with SSE where the CPU has SSSE3 (packing by byte shuffle), else one at a
 * time, branch-free.
 */
SELECT_INLINE void bracket_body(const float *v, size_t n, float center, bool deviation, float a,
                                float b, float *out, size_t cap, size_t *below, size_t *inside)
{
    size_t lt = 0, m = 0, i = 0;
#ifdef SELECT_SSSE3
    const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b), vc = _mm_set1_ps(center);
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    for (; i + 4 <= n; i += 4) {
        __m128 w = _mm_loadu_ps(v + i);
        if (deviation)
            w = _mm_and_ps(_mm_sub_ps(w, vc), abs_mask);
        unsigned below_mask = (unsigned)_mm_movemask_ps(_mm_cmplt_ps(w, va));
        unsigned in_mask = (unsigned)_mm_movemask_ps(
            _mm_and_ps(_mm_cmpge_ps(w, va), _mm_cmple_ps(w, vb)));
        lt += (size_t)_mm_popcnt_u32(below_mask);
        if (m <= cap) { /* out has cap + 4 slots */
            __m128i packed = _mm_shuffle_epi8(
                _mm_castps_si128(w), _mm_loadu_si128((const __m128i *)pack_shuffle[in_mask]));
            _mm_storeu_si128((__m128i *)(out + m), packed);
        }
        m += (size_t)_mm_popcnt_u32(in_mask);
    }
#endif
    for (; i < n; i++) {
        float w = select_value(v, i, center, deviation);
        lt += w < a;
        out[m < cap ? m : cap] = w; /* slot cap takes the overflow, if any */
        m += (w >= a) & (w <= b);
    }
    *below = lt;
    *inside = m;
}

static enum ecg_status select_pair_sampled(const float *v, size_t n, float center, bool deviation,
                                           size_t r_lo, size_t r_hi, float *out_lo,
                                           float *out_hi, bool *done, struct ecg_error *err)
{
    *done = false;
    if (n < SAMPLE_MID_MIN)
        return ECG_OK;
    /* mid: a short recording's few thousand values, between quickselect alone (below) and the
     * histogram levels (select_pair, from SELECT_SMALL), sampled more densely and bracketed
     * more tightly; the selections run by the branch-free quickselect */
    const bool mid = n < 16 * (size_t)SAMPLE_SIZE;
    const size_t stride = mid ? SAMPLE_MID_STRIDE : n / SAMPLE_SIZE, m = n / stride;
    const double p = ((double)r_lo + 0.5) / (double)n;
    const double spread = sqrt((double)m * p * (1.0 - p));
    const double margin = mid ? SAMPLE_MID_MARGIN * spread + 4.0 : SAMPLE_MARGIN * spread + 16.0;
    const double lo_rank = p * (double)m - margin, hi_rank = p * (double)m + margin;
    const size_t cap = (size_t)(4.0 * (hi_rank - lo_rank) * (double)stride) + 1024;
    enum ecg_status status = ECG_OK;
    /* the sample and its scratch, then the gathered values and theirs */
    float *sample = malloc((2 * m + 2 * (cap + 4)) * sizeof *sample);
    float *gathered = sample ? sample + 2 * m : NULL;
    if (!sample) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "median: %zu values", cap);
        goto out;
    }
    float a = -INFINITY, b = INFINITY, unused;
    for (int end = 0; end < 2; end++) {
        const double rank = end ? hi_rank : lo_rank;
        if (end ? rank >= (double)(m - 1) : rank <= 0.0)
            continue;
        for (size_t i = 0; i < m; i++) /* again each time: the selection reorders it */
            sample[i] = select_value(v, i * stride, center, deviation);
        small_select_pair(sample, sample + m, m, (size_t)rank, (size_t)rank, end ? &unused : &a,
                          end ? &b : &unused);
    }
    size_t below, inside;
    if (deviation)
        bracket_body(v, n, center, true, a, b, gathered, cap, &below, &inside);
    else
        bracket_body(v, n, center, false, a, b, gathered, cap, &below, &inside);
    if (inside > cap || below > r_lo || below + inside <= r_hi)
        goto out; /* the bracket missed: the caller takes the slow path */
    small_select_pair(gathered, gathered + cap + 4, inside, r_lo - below, r_hi - below, out_lo,
                      out_hi);
    *done = true;
out:
    free(sample);
    return status;
}

/* Values of ranks r_lo <= r_hi (see select_pair), by the fast path when it succeeds. */
static enum ecg_status select_ranks(const float *v, size_t n, float center, bool deviation,
                                    size_t r_lo, size_t r_hi, float *out_lo, float *out_hi,
                                    struct ecg_error *err)
{
    bool done = false;
    enum ecg_status status =
        select_pair_sampled(v, n, center, deviation, r_lo, r_hi, out_lo, out_hi, &done, err);
    if (status != ECG_OK || done)
        return status;
    return select_pair(v, n, center, deviation, r_lo, r_hi, out_lo, out_hi, err);
}

enum ecg_status cpu_median_mad(const float *v, size_t n, float *median, float *mad,
                               struct ecg_error *err)
{
    const size_t r_lo = (n - 1) / 2, r_hi = n / 2;
    float lo, hi;
    enum ecg_status status = select_ranks(v, n, 0.0f, false, r_lo, r_hi, &lo, &hi, err);
    if (status != ECG_OK)
        return status;
    *median = (float)(0.5 * ((double)lo + (double)hi));
    status = select_ranks(v, n, *median, true, r_lo, r_hi, &lo, &hi, err);
    if (status != ECG_OK)
        return status;
    *mad = (float)(0.5 * ((double)lo + (double)hi));
    return ECG_OK;
}
