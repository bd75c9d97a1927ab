/*
 * trace.c - kept recordings (struct ecg_trace): the public object around a backend's kept
 * signal, range checks, and ecg_minmax(), the reference min/max decimation.
 *
 * The backend keeps the samples where its analysis loaded them (engine.c asks it to, through
 * trace_keep, before the worker context is released); this file only checks arguments and
 * forwards, so that a range error reads the same on every backend.
 */
#include <stdlib.h>

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
        size_t i_min = lo, i_max = lo;
        for (size_t i = lo + 1; i < hi; i++) {
            if (x[i] < x[i_min])
                i_min = i;
            if (x[i] > x[i_max])
                i_max = i;
        }
        out[b].i_min = (int64_t)i_min;
        out[b].i_max = (int64_t)i_max;
        out[b].v_min = x[i_min];
        out[b].v_max = x[i_max];
    }
    return buckets;
}
