/*
 * trace.c - kept recordings (struct ecg_trace): the public object around a backend's kept
 * signal, range checks, and ecg_minmax(), the reference min/max decimation.
 *
 * The backend keeps the samples where its analysis loaded them (engine.c asks it to, through
 * trace_keep, before the worker context is released); this file checks arguments and forwards,
 * so that a range error reads the same on every backend. ecg_minmax() is the reference the CUDA
 * kernel is tested against: per bucket, the extreme values (SSE) and then the first sample
 * holding each, which is exactly what a sequential scan keeping the first of equal values gives.
 */
#include <stdlib.h>
#ifdef __SSE2__
#include <immintrin.h>
#endif

#include "backend.h"
#include "ecg.h"

struct ecg_trace {
    const struct ecg_backend_ops *ops;
    void *backend;
    size_t n;
    size_t bytes;
};

struct ecg_trace *ecg_trace_wrap(const struct ecg_backend_ops *ops, void *backend, size_t n,
                                 size_t bytes)
{
    struct ecg_trace *trace = calloc(1, sizeof *trace);
    if (!trace) {
        ops->trace_free(backend);
        return NULL;
    }
    trace->ops = ops;
    trace->backend = backend;
    trace->n = n;
    trace->bytes = bytes + sizeof *trace;
    return trace;
}

size_t ecg_trace_len(const struct ecg_trace *trace)
{
    return trace ? trace->n : 0;
}

size_t ecg_trace_bytes(const struct ecg_trace *trace)
{
    return trace ? trace->bytes : 0;
}

void ecg_trace_free(struct ecg_trace *trace)
{
    if (!trace)
        return;
    trace->ops->trace_free(trace->backend);
    free(trace);
}

enum ecg_status ecg_trace_minmax(const struct ecg_trace *trace, size_t start, size_t end,
                                 size_t n_buckets, struct ecg_minmax *out, size_t *n_out,
                                 struct ecg_error *err)
{
    *n_out = 0;
    if (!trace || start >= end || end > trace->n || !n_buckets)
        return ecg_fail(err, ECG_ERR_ARG, "bad_range",
                        "samples [%zu, %zu) in %zu buckets: not a range of the %zu samples",
                        start, end, n_buckets, trace ? trace->n : 0);
    size_t buckets = n_buckets < end - start ? n_buckets : end - start;
    enum ecg_status status = trace->ops->trace_minmax(trace->backend, start, end, buckets, out,
                                                      err);
    if (status == ECG_OK)
        *n_out = buckets;
    return status;
}

enum ecg_status ecg_trace_read(const struct ecg_trace *trace, size_t start, size_t n, float *out,
                               struct ecg_error *err)
{
    if (!trace || start > trace->n || n > trace->n - start)
        return ecg_fail(err, ECG_ERR_ARG, "bad_range",
                        "samples [%zu, %zu + %zu): not a range of the %zu samples", start, start,
                        n, trace ? trace->n : 0);
    if (!n)
        return ECG_OK;
    return trace->ops->trace_read(trace->backend, start, n, out, err);
}

/*
 * The smallest and largest value of x[lo, hi) (hi > lo). Min and max are exact whatever the
 * order of comparison, so SSE reduces four lanes at a time; only which of two equal zeros
 * (-0.0, +0.0) comes out may differ from a sequential scan, and the index search below makes
 * the answer the sequential one's anyway.
 */
static void range_min_max(const float *x, size_t lo, size_t hi, float *v_min, float *v_max)
{
    size_t i = lo;
    float mn = x[lo], mx = x[lo];
#ifdef __SSE2__
    if (hi - lo >= 16) {
        __m128 mn0 = _mm_loadu_ps(x + lo), mx0 = mn0, mn1 = mn0, mx1 = mn0;
        for (; i + 8 <= hi; i += 8) {
            __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
            mn0 = _mm_min_ps(mn0, a);
            mx0 = _mm_max_ps(mx0, a);
            mn1 = _mm_min_ps(mn1, b);
            mx1 = _mm_max_ps(mx1, b);
        }
        float lanes_min[4], lanes_max[4];
        _mm_storeu_ps(lanes_min, _mm_min_ps(mn0, mn1));
        _mm_storeu_ps(lanes_max, _mm_max_ps(mx0, mx1));
        for (int k = 0; k < 4; k++) {
            mn = lanes_min[k] < mn ? lanes_min[k] : mn;
            mx = lanes_max[k] > mx ? lanes_max[k] : mx;
        }
    }
#endif
    for (; i < hi; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    *v_min = mn;
    *v_max = mx;
}

/* The first index of x[lo, hi) whose value equals v (one exists). */
static size_t first_equal(const float *x, size_t lo, size_t hi, float v)
{
    size_t i = lo;
#ifdef __SSE2__
    __m128 target = _mm_set1_ps(v);
    for (; i + 4 <= hi; i += 4) {
        int mask = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i), target));
        if (mask)
            return i + (size_t)__builtin_ctz((unsigned)mask);
    }
#endif
    while (i < hi && x[i] != v)
        i++;
    return i;
}

size_t ecg_minmax(const float *x, size_t start, size_t end, size_t n_buckets,
                  struct ecg_minmax *out)
{
    if (start >= end || !n_buckets)
        return 0;
    size_t len = end - start;
    size_t buckets = n_buckets < len ? n_buckets : len;
    for (size_t b = 0; b < buckets; b++) {
        /* 64-bit products, as the CUDA twin computes them: exact for len * buckets < 2^64
         * (a recording of a trillion samples in a million buckets). */
        size_t lo = start + (size_t)((uint64_t)len * b / buckets);
        size_t hi = start + (size_t)((uint64_t)len * (b + 1) / buckets);
        float v_min, v_max;
        range_min_max(x, lo, hi, &v_min, &v_max);
        /* The first sample of each extreme: the sequential scan's answer (it keeps the first
         * of equal values), -0.0 and +0.0 being equal. */
        size_t i_min = first_equal(x, lo, hi, v_min);
        size_t i_max = first_equal(x, lo, hi, v_max);
        out[b].i_min = (int64_t)i_min;
        out[b].i_max = (int64_t)i_max;
        out[b].v_min = x[i_min];
        out[b].v_max = x[i_max];
    }
    return buckets;
}
