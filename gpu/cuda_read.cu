/*
 * cuda_read.cu - load_bytes: recordings parsed straight into device memory.
 *
 * The bytes reach the device in one of two ways: uploaded here into the ctx's fft_buf (pinned
 * host memory by one DMA, other memory through the pinned double buffer), or already there as
 * the device copy of a streaming upload (cuda_upload.cu calls cuda_load_from with it), which
 * the kernels then read in place: either way they read one device pointer, and the few counters
 * live in fft_buf.
 *
 * Raw samples, .npy and EDF/BDF: cuda_read_binary.cu (load_raw, load_npy, load_edf).
 *
 * CSV (engine/read_csv.c defines the grammar): the host reads only the first non-blank line
 * (delimiter, header, which column), with read_csv.c's rules; the rest is parsed on the device:
 *   1. count the '\n' bytes                      one thread per 16 bytes, block reduction
 *   2. line starts by compaction                 cub::DeviceSelect::If over byte positions
 *   3. one thread per line: blank test, control bytes, the selected field, trimmed, parsed by
 *      parse_token() (cuda_parse_float.cuh): a value, a blank, HARD or BAD
 *   4. HARD tokens (rare: >19 digits, big exponents, float midpoints) are re-parsed on the host
 *      with ecg_parse_float and written back; blank lines are squeezed out by compaction.
 * Anything the fast paths do not accept as a clean file - a BAD field, a missing column,
 * control bytes, a non-finite value, too many samples, a .npy or EDF body the layout step
 * refuses, an unknown or missing option - makes load_bytes answer ECG_ERR_UNSUPPORTED without
 * touching err: the engine then runs the host reader, which accepts or reports the error exactly as
 * ecg_read_memory() does. So the device path never decides an error, and what it accepts it
 * parses bit-identically.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <strings.h>

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "cuda_internal.h"
#include "cuda_parse_float.cuh"
extern "C" {
#include "read_internal.h" /* no C++ guards of its own */
}

enum line_kind { LINE_VALUE = 0, LINE_BLANK = 1, LINE_HARD = 2, LINE_BAD = 3 };

/* ---------------------------------------------------------------- CSV kernels */

/* Counts '\n' in bytes[0, len): each thread a strided range, one atomic per block. */
static __global__ void count_newlines_kernel(const char *bytes, size_t len,
                                             unsigned long long *count)
{
    typedef cub::BlockReduce<unsigned long long, CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage temp;
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        mine += bytes[i] == '\n';
    unsigned long long total = reduce_t(temp).Sum(mine);
    if (threadIdx.x == 0 && total)
        atomicAdd(count, total);
}

/* A line starts at position i of the data region when i is its first byte or follows '\n'. */
struct line_start_pred {
    const char *bytes;
    __host__ __device__ bool operator()(int64_t i) const
    {
        return i == 0 || bytes[i - 1] == '\n';
    }
};

struct csv_args {
    const char *bytes;       /* the data region */
    size_t len;
    const int64_t *starts;   /* line starts */
    size_t n_lines;
    char delim;              /* 0: one column */
    size_t column;
    float *values;           /* n_lines */
    uint8_t *kind;           /* n_lines: enum line_kind */
    unsigned int *counts;    /* [0] blank, [1] hard, [2] bad */
};

static __device__ bool is_blank_char(char c)
{
    return c == ' ' || c == '\t';
}

/* One thread per line: read_csv.c's data-row rules for one line. */
static __global__ void csv_line_kernel(struct csv_args a)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < a.n_lines;
         j += (size_t)gridDim.x * blockDim.x) {
        const char *ls = a.bytes + a.starts[j];
        const char *next = j + 1 < a.n_lines ? a.bytes + a.starts[j + 1] : a.bytes + a.len;
        const char *le = next;
        if (le > ls && le[-1] == '\n')
            le--;
        if (le > ls && le[-1] == '\r')
            le--;
        int kind = LINE_VALUE;
        float v = 0.0f;
        /* blank line: only spaces, tabs and carriage returns */
        const char *s = ls;
        while (s < le && (is_blank_char(*s) || *s == '\r'))
            s++;
        if (s == le) {
            kind = LINE_BLANK;
        } else {
            for (const char *c = ls; c < le; c++) {
                unsigned char u = (unsigned char)*c;
                if (u < 0x20 && u != '\t') {
                    kind = LINE_BAD;
                    break;
                }
            }
        }
        if (kind == LINE_VALUE) {
            const char *fs = ls;
            for (size_t col = 0; col < a.column && kind == LINE_VALUE; col++) {
                const char *d = fs;
                while (d < le && *d != a.delim)
                    d++;
                if (!a.delim || d == le)
                    kind = LINE_BAD; /* missing column */
                else
                    fs = d + 1;
            }
            if (kind == LINE_VALUE) {
                const char *fe = fs;
                if (a.delim)
                    while (fe < le && *fe != a.delim)
                        fe++;
                else
                    fe = le;
                while (fs < fe && (*fs == ' ' || (*fs == '\t' && a.delim != '\t')))
                    fs++;
                while (fe > fs && (fe[-1] == ' ' || (fe[-1] == '\t' && a.delim != '\t')))
                    fe--;
                int t = parse_token(fs, fe, &v);
                kind = t == TOKEN_OK ? LINE_VALUE : t == TOKEN_HARD ? LINE_HARD : LINE_BAD;
            }
        }
        a.values[j] = v;
        a.kind[j] = (uint8_t)kind;
        if (kind != LINE_VALUE)
            atomicAdd(&a.counts[kind - 1], 1u);
    }
}

struct kind_is {
    const uint8_t *kind;
    uint8_t want;
    __host__ __device__ bool operator()(int64_t j) const { return kind[j] == want; }
};

struct kind_is_not {
    const uint8_t *kind;
    uint8_t skip;
    __host__ __device__ bool operator()(int64_t j) const { return kind[j] != skip; }
};

/* values[idx[h]] = fixed[h] */
static __global__ void scatter_kernel(const int64_t *idx, const float *fixed, size_t n,
                                      float *values)
{
    for (size_t h = blockIdx.x * (size_t)blockDim.x + threadIdx.x; h < n;
         h += (size_t)gridDim.x * blockDim.x)
        values[idx[h]] = fixed[h];
}

static __global__ void gather_kernel(const int64_t *idx, const float *values, size_t n,
                                     float *out)
{
    for (size_t h = blockIdx.x * (size_t)blockDim.x + threadIdx.x; h < n;
         h += (size_t)gridDim.x * blockDim.x)
        out[h] = values[idx[h]];
}

/* ---------------------------------------------------------------- host-side CSV header */

/* read_csv.c's first-line analysis, or false when the host reader should take the input. */
struct csv_head {
    size_t data_off;         /* first byte of the data rows */
    char delim;
    size_t column;
    char lead[32];
};

static const char *host_line_end(const char *p, const char *end, const char **next)
{
    const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
    if (!nl) {
        *next = end;
        nl = end;
    } else {
        *next = nl + 1;
    }
    if (nl > p && nl[-1] == '\r')
        nl--;
    return nl;
}

static void host_trim(char delim, const char **fs, const char **fe)
{
    const char *s = *fs, *e = *fe;
    while (s < e && (*s == ' ' || (*s == '\t' && delim != '\t')))
        s++;
    while (e > s && (e[-1] == ' ' || (e[-1] == '\t' && delim != '\t')))
        e--;
    *fs = s;
    *fe = e;
}

static const char *host_field_end(char delim, const char *p, const char *le)
{
    if (!delim)
        return le;
    const char *d = (const char *)memchr(p, delim, (size_t)(le - p));
    return d ? d : le;
}

static bool host_looks_like_name(const char *s, const char *e)
{
    static const char *const specials[] = {"nan", "inf", "infinity", "null", "none"};
    if (s == e)
        return false;
    char c = *s;
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '"' || c == '\''))
        return false;
    size_t len = (size_t)(e - s);
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        if (len == strlen(specials[i]) && strncasecmp(s, specials[i], len) == 0)
            return false;
    return true;
}

static bool csv_head_read(const char *buf, size_t len, const struct ecg_read_opts *opts,
                          struct csv_head *h)
{
    const char *end = buf + len, *p = buf, *next = buf, *ls = buf, *le = buf;
    long index = 0;
    const char *name;
    bool header = false;
    memset(h, 0, sizeof *h);
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    for (;;) {
        if (p >= end)
            return false;
        ls = p;
        le = host_line_end(p, end, &next);
        const char *s = ls;
        while (s < le && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s < le)
            break;
        p = next;
    }
    for (const char *c = ls; c < le; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t')
            return false;
    /* ';' files (whose numbers may have decimal commas: read_csv.c), files of one number per
     * line with a decimal comma or split by ',' (read_csv.c's comma_file), and files whose
     * first column may be time (read_csv_time.c) go to the host reader */
    if (memchr(ls, ';', (size_t)(le - ls)) || read_csv_decimal_comma_likely(buf, len) ||
        read_csv_time_column_likely(buf, len, opts))
        return false;
    /* read_csv.c's choice (a tab that separates text beside a ',' makes it tab; the ',' in
     * those numbers are then decimal marks, which the device parser refuses to the host) */
    h->delim = read_csv_delimiter(ls, le);
    name = read_lead_index(opts->lead, &index) ? NULL : opts->lead;
    /* a header row: for a lead chosen by name, any field that looks like a name; for an
     * index, the chosen field itself (read_csv.c's rule) */
    {
        size_t col = 0;
        for (const char *q = ls;; col++) {
            const char *fe = host_field_end(h->delim, q, le), *s = q, *e = fe;
            host_trim(h->delim, &s, &e);
            if ((name || (index >= 0 && col == (size_t)index)) && host_looks_like_name(s, e))
                header = true;
            if (fe == le)
                break;
            q = fe + 1;
        }
    }
    if (!header) {
        if (name || index < 0)
            return false;
        h->column = (size_t)index;
        h->data_off = (size_t)(ls - buf); /* the first line is data */
        return true;
    }
    /* header_select(): exact name, then case-insensitive; or the label of column index */
    for (int pass = 0; pass < 2; pass++) {
        size_t col = 0;
        for (const char *q = ls;;) {
            const char *fe = host_field_end(h->delim, q, le), *s = q, *e = fe;
            host_trim(h->delim, &s, &e);
            if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s)
                s++, e--;
            size_t flen = (size_t)(e - s);
            bool match = name ? (flen == strlen(name) &&
                                 (pass == 0 ? strncmp(s, name, flen) == 0
                                            : strncasecmp(s, name, flen) == 0))
                              : (long)col == index;
            if (match) {
                struct ecg_signal sig;
                memset(&sig, 0, sizeof sig);
                read_set_lead(&sig, s, flen);
                memcpy(h->lead, sig.lead, sizeof h->lead);
                h->column = col;
                h->data_off = (size_t)(next - buf);
                return true;
            }
            if (fe == le)
                break;
            q = fe + 1;
            col++;
        }
        if (!name)
            return false;
    }
    return false;
}

/* read.c's sniff_format() for text: would AUTO read these bytes as CSV? */
static bool sniff_is_csv(const unsigned char *b, size_t len)
{
    if (len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return false;
    if (len >= 8 && (memcmp(b, "0       ", 8) == 0 || memcmp(b, "\xff" "BIOSEMI", 8) == 0))
        return false;
    size_t i = 0;
    if (len >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'))
        i++;
    if (i < len && (b[i] == '{' || b[i] == '['))
        return false;
    size_t probe = len < 512 ? len : 512;
    for (size_t k = 0; k < probe; k++)
        if ((b[k] < 0x20 && b[k] != '\t' && b[k] != '\r' && b[k] != '\n') || b[k] >= 0x7f)
            return false;
    return true;
}

/* ---------------------------------------------------------------- entry points */

extern "C" int cuda_parse_token_host(const char *s, const char *e, float *out)
{
    return parse_token(s, e, out);
}


/* Re-parses the HARD lines on the host (they are rare) and writes their values back. */
static enum ecg_status resolve_hard(struct cuda_ctx *ctx, const char *data,
                                    const struct csv_args *a, size_t n_hard, int64_t *d_idx,
                                    size_t *bad, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    int64_t *h_idx = NULL, *h_starts = NULL;
    float *h_fix = NULL;
    size_t temp = 0;
    struct kind_is pred;
    thrust::counting_iterator<int64_t> counter(0);
    int64_t *d_count = d_idx + n_hard;
    float *d_fix = (float *)(d_count + 1);
    pred.kind = a->kind;
    pred.want = LINE_HARD;
    CUDA_TRY(cub::DeviceSelect::If(NULL, temp, counter, d_idx, d_count, (int64_t)a->n_lines, pred,
                                   ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp, err));
    CUDA_TRY(cub::DeviceSelect::If(ctx->cub_temp.ptr, temp, counter, d_idx, d_count,
                                   (int64_t)a->n_lines, pred, ctx->stream));
    h_idx = (int64_t *)malloc(n_hard * sizeof *h_idx);
    h_starts = (int64_t *)malloc(n_hard * sizeof *h_starts);
    h_fix = (float *)malloc(n_hard * sizeof *h_fix);
    if (!h_idx || !h_starts || !h_fix) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "csv: %zu hard values", n_hard);
        goto out;
    }
    CUDA_TRY(cudaMemcpyAsync(h_idx, d_idx, n_hard * sizeof *h_idx, cudaMemcpyDeviceToHost,
                             ctx->stream));
    ECG_TRY(ctx_sync(ctx, "load", err));
    for (size_t h = 0; h < n_hard; h++)
        CUDA_TRY(cudaMemcpyAsync(&h_starts[h], a->starts + h_idx[h], sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, ctx->stream));
    ECG_TRY(ctx_sync(ctx, "load", err));
    for (size_t h = 0; h < n_hard; h++) {
        const char *ls = data + h_starts[h], *next, *end = data + a->len;
        const char *le = host_line_end(ls, end, &next), *fs = ls, *fe;
        for (size_t col = 0; col < a->column; col++)
            fs = (const char *)memchr(fs, a->delim, (size_t)(le - fs)) + 1;
        fe = host_field_end(a->delim, fs, le);
        host_trim(a->delim, &fs, &fe);
        float v = 0;
        const char *q = ecg_parse_float(fs, fe, &v);
        if (q != fe || !isfinite(v))
            (*bad)++;
        h_fix[h] = v;
    }
    CUDA_TRY(cudaMemcpyAsync(d_fix, h_fix, n_hard * sizeof *h_fix, cudaMemcpyHostToDevice,
                             ctx->stream));
    scatter_kernel<<<grid_for(n_hard), CUDA_THREADS, 0, ctx->stream>>>(d_idx, d_fix, n_hard,
                                                                       a->values);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(ctx_sync(ctx, "load", err));
out:
    free(h_idx);
    free(h_starts);
    free(h_fix);
    return status;
}

/* CSV: status UNSUPPORTED hands the input back to the host reader. d_src: the bytes already on
 * the device (a streaming upload of buf[0, len)), or NULL to upload the data rows here. */
static enum ecg_status load_csv(struct cuda_ctx *ctx, const char *buf, size_t len,
                                const char *d_src, const struct ecg_read_opts *opts,
                                size_t *n_out, char lead[32], struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct csv_head head;
    struct csv_args a;
    const char *data;
    size_t data_len, n_lines, off, temp = 0, n_samples, bad_hard = 0;
    unsigned long long *d_newlines;
    unsigned int *h_counts;
    const char *base;
    int64_t *d_count, *d_idx;
    struct line_start_pred starts_pred;
    struct kind_is_not keep_pred;
    thrust::counting_iterator<int64_t> counter(0);
    const bool profile = getenv("ECG_CUDA_PROFILE") != NULL;
    struct timespec t_start, t_uploaded, t_done;

    clock_gettime(CLOCK_MONOTONIC, &t_start);
    if (!csv_head_read(buf, len, opts, &head))
        return ECG_ERR_UNSUPPORTED;
    data = buf + head.data_off;
    data_len = len - head.data_off;
    if (data_len == 0)
        return ECG_ERR_UNSUPPORTED;

    /* fft_buf: the data rows (when uploaded here) | counters; scratch: starts | values | kind |
     * idx ...; base: the data rows on the device, wherever they are */
    ECG_TRY(dbuf_reserve(ctx, &ctx->fft_buf, (d_src ? 0 : data_len) + 512, err));
    off = d_src ? 0 : (data_len + 255) & ~(size_t)255;
    d_newlines = (unsigned long long *)((char *)ctx->fft_buf.ptr + off);
    base = d_src ? d_src + head.data_off : (const char *)ctx->fft_buf.ptr;
    CUDA_TRY(cudaMemsetAsync(d_newlines, 0, 256, ctx->stream));
    if (!d_src)
        ECG_TRY(upload_bytes(ctx, ctx->fft_buf.ptr, data, data_len, err));
    count_newlines_kernel<<<grid_for(data_len / 16 + 1), CUDA_THREADS, 0, ctx->stream>>>(
        base, data_len, d_newlines);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(stage_reserve(ctx, 64, err));
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, d_newlines, sizeof(unsigned long long),
                             cudaMemcpyDeviceToHost, ctx->stream));
    ECG_TRY(ctx_sync(ctx, "load", err));
    clock_gettime(CLOCK_MONOTONIC, &t_uploaded);
    n_lines = (size_t)*(unsigned long long *)ctx->h_stage + (data[data_len - 1] != '\n');
    if (n_lines == 0)
        return ECG_ERR_UNSUPPORTED;
    if (opts->max_samples && n_lines > opts->max_samples) {
        /* blank lines could bring it under the limit: let the host decide */
        return ECG_ERR_UNSUPPORTED;
    }

    {
        size_t starts_b = (n_lines * sizeof(int64_t) + 255) & ~(size_t)255;
        size_t values_b = (n_lines * sizeof(float) + 255) & ~(size_t)255;
        size_t kind_b = (n_lines + 255) & ~(size_t)255;
        ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, 2 * starts_b + values_b + kind_b + 1024, err));
        char *s = (char *)ctx->scratch.ptr;
        a.starts = (const int64_t *)s;
        d_idx = (int64_t *)(s + starts_b);
        a.values = (float *)(s + 2 * starts_b);
        a.kind = (uint8_t *)(s + 2 * starts_b + values_b);
        a.counts = (unsigned int *)(s + 2 * starts_b + values_b + kind_b);
        d_count = (int64_t *)(s + 2 * starts_b + values_b + kind_b + 256);
    }
    a.bytes = base;
    a.len = data_len;
    a.n_lines = n_lines;
    a.delim = head.delim;
    a.column = head.column;
    starts_pred.bytes = base;
    CUDA_TRY(cub::DeviceSelect::If(NULL, temp, counter, (int64_t *)a.starts, d_count,
                                   (int64_t)data_len, starts_pred, ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp, err));
    CUDA_TRY(cub::DeviceSelect::If(ctx->cub_temp.ptr, temp, counter, (int64_t *)a.starts,
                                   d_count, (int64_t)data_len, starts_pred, ctx->stream));
    CUDA_TRY(cudaMemsetAsync(a.counts, 0, 3 * sizeof(unsigned int), ctx->stream));
    csv_line_kernel<<<grid_for(n_lines), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, a.counts, 3 * sizeof(unsigned int),
                             cudaMemcpyDeviceToHost, ctx->stream));
    ECG_TRY(ctx_sync(ctx, "load", err));
    h_counts = (unsigned int *)ctx->h_stage;
    {
        size_t n_blank = h_counts[0], n_hard = h_counts[1], n_bad = h_counts[2];
        if (n_bad)
            return ECG_ERR_UNSUPPORTED;
        /* many HARD tokens: the host reader is as fast; few: fix them up (the index and value
         * arrays share the starts-sized area, hence the bound) */
        if (n_hard > 65536 || 3 * n_hard + 4 > 2 * n_lines)
            return ECG_ERR_UNSUPPORTED;
        if (n_hard)
            ECG_TRY(resolve_hard(ctx, data, &a, n_hard, d_idx, &bad_hard, err));
        if (bad_hard)
            return ECG_ERR_UNSUPPORTED;
        n_samples = n_lines - n_blank;
        if (n_samples == 0 || (opts->max_samples && n_samples > opts->max_samples))
            return ECG_ERR_UNSUPPORTED;
        ECG_TRY(dbuf_reserve(ctx, &ctx->input, n_samples * sizeof(float), err));
        if (n_blank == 0) {
            CUDA_TRY(cudaMemcpyAsync(ctx->input.ptr, a.values, n_samples * sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx->stream));
        } else {
            keep_pred.kind = a.kind;
            keep_pred.skip = LINE_BLANK;
            temp = 0;
            CUDA_TRY(cub::DeviceSelect::If(NULL, temp, counter, d_idx, d_count,
                                           (int64_t)n_lines, keep_pred, ctx->stream));
            ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp, err));
            CUDA_TRY(cub::DeviceSelect::If(ctx->cub_temp.ptr, temp, counter, d_idx, d_count,
                                           (int64_t)n_lines, keep_pred, ctx->stream));
            gather_kernel<<<grid_for(n_samples), CUDA_THREADS, 0, ctx->stream>>>(
                d_idx, a.values, n_samples, (float *)ctx->input.ptr);
            CUDA_LAUNCH_CHECK();
        }
    }
    ECG_TRY(ctx_sync(ctx, "load", err));
    *n_out = n_samples;
    memcpy(lead, head.lead, 32);
    clock_gettime(CLOCK_MONOTONIC, &t_done);
    if (profile)
        fprintf(stderr, "cuda csv profile: %zu bytes, %zu lines: upload + newline count %.3f ms, "
                "line split + parse + compaction %.3f ms\n", data_len, n_lines,
                (double)(t_uploaded.tv_sec - t_start.tv_sec) * 1e3 +
                    (double)(t_uploaded.tv_nsec - t_start.tv_nsec) * 1e-6,
                (double)(t_done.tv_sec - t_uploaded.tv_sec) * 1e3 +
                    (double)(t_done.tv_nsec - t_uploaded.tv_nsec) * 1e-6);
out:
    return status;
}

extern "C" enum ecg_status cuda_load_bytes(void *ctx_ptr, const void *buf, size_t len,
                                           const struct ecg_read_opts *opts, size_t *n,
                                           double *fs_hz, char lead[32], struct ecg_error *err)
{
    return cuda_load_from((struct cuda_ctx *)ctx_ptr, buf, len, NULL, opts, n, fs_hz, lead, err);
}

extern "C" enum ecg_status cuda_load_from(struct cuda_ctx *ctx, const void *buf, size_t len,
                                          const char *d_bytes, const struct ecg_read_opts *opts,
                                          size_t *n, double *fs_hz, char lead[32],
                                          struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    enum ecg_format format;
    size_t count = 0;
    char label[32] = "";
    double rate;
    if (!opts || !buf || len == 0)
        return ECG_ERR_UNSUPPORTED;
    format = opts->format;
    if (format == ECG_FORMAT_AUTO && len >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
        format = ECG_FORMAT_NPY; /* read.c's sniff_format() tests the magic first too */
    else if (format == ECG_FORMAT_AUTO && len >= 8 &&
             (memcmp(buf, "0       ", 8) == 0 || memcmp(buf, "\xff" "BIOSEMI", 8) == 0))
        format = ECG_FORMAT_EDF; /* and then EDF's and BDF's version fields */
    else if (format == ECG_FORMAT_AUTO && sniff_is_csv((const unsigned char *)buf, len))
        format = ECG_FORMAT_CSV;
    if (format != ECG_FORMAT_CSV && format != ECG_FORMAT_F32 && format != ECG_FORMAT_F64 &&
        format != ECG_FORMAT_I16 && format != ECG_FORMAT_NPY && format != ECG_FORMAT_EDF)
        return ECG_ERR_UNSUPPORTED;
    /* EDF carries its rate (opts->fs_hz is ignored, as by the host reader) */
    if (format != ECG_FORMAT_EDF && (!(opts->fs_hz > 0) || !isfinite(opts->fs_hz)))
        return ECG_ERR_UNSUPPORTED; /* the host reader words the missing-rate error */
    rate = opts->fs_hz;
    ECG_TRY(ctx_enter(ctx, err));
    ctx->n_in = ctx->n_a = ctx->n_beats = ctx->emb_len = ctx->n_extra = 0;
    ctx->encoded = false;
    ctx->latent_dim = ctx->state->model ? ctx->state->model->arch.latent_dim : 0;
    if (format == ECG_FORMAT_CSV)
        status = load_csv(ctx, (const char *)buf, len, d_bytes, opts, &count, label, err);
    else if (format == ECG_FORMAT_NPY)
        status = load_npy(ctx, buf, len, d_bytes, opts, &count, err); /* no label, as on the host */
    else if (format == ECG_FORMAT_EDF)
        status = load_edf(ctx, buf, len, d_bytes, opts, &count, &rate, label, err);
    else
        status = load_raw(ctx, buf, len, d_bytes, (int)format, opts, &count, err);
    if (status != ECG_OK)
        goto out;
    ctx->n_in = count;
    *n = count;
    *fs_hz = rate;
    memcpy(lead, label, 32);
out:
    return status;
}
