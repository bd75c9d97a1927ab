/*
 * cuda_read_binary.cu - the binary formats converted on the device (cuda_read.cu's
 * cuda_load_from dispatches to them). The bytes are the body's, uploaded to the ctx's fft_buf
 * here or already on the device (a streaming upload, d_src); only the span a conversion needs
 * is uploaded.
 *
 * Raw float32 / float64 / int16: converted on the device exactly as engine/read_raw.c converts
 * them; a non-finite or out-of-range value sets a flag.
 *
 * NumPy .npy (sniffed by its magic under AUTO, as read.c does): the host runs
 * engine/read_npy.c's read_npy_layout() on the preamble and header (every check the host reader
 * makes except the finite one); one thread per sample then assembles the chosen lead's element
 * from its bytes (any alignment, either byte order, C or Fortran order) and converts it as
 * read_npy.c's load_element() does (f4, f8, i1, i2, i4, u1); a non-finite value sets the flag.
 * Only the span of the lead's samples is uploaded.
 *
 * EDF, EDF+, BDF and BDF+ (sniffed by their version fields under AUTO, as read.c does): the host
 * runs engine/read_edf.c's read_edf_layout(), which has EDFlib validate the body through a sparse
 * memfd (header and first data record only, no copy of the rest) and says where the chosen
 * signal's samples lie; one thread per sample then assembles the little-endian 16-bit (EDF) or
 * 24-bit (BDF) value from its record and converts it with engine/edf_convert.h, the very
 * arithmetic read_edf.c applies; a non-finite value sets the flag. So .npy and EDF, like the raw
 * formats, need no host-side conversion.
 *
 * Every loader answers ECG_ERR_UNSUPPORTED (err untouched) for anything it does not convert
 * bit-identically, and the engine then runs the host reader.
 *
 * Threads: one per output sample.
 */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"
#include "edf_convert.h"
extern "C" {
#include "read_internal.h" /* no C++ guards of its own */
}

/* ---------------------------------------------------------------- raw formats */

/* Thread i: sample i from its little-endian bytes; flags a value read_raw.c would refuse. */
static __global__ void raw_kernel(const unsigned char *bytes, size_t n, int format, float *out,
                                  int *bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v;
        if (format == ECG_FORMAT_I16) {
            const unsigned char *b = bytes + 2 * i;
            v = (float)(int16_t)(uint16_t)(b[0] | b[1] << 8);
        } else if (format == ECG_FORMAT_F64) {
            uint64_t u = 0;
            for (int k = 7; k >= 0; k--)
                u = u << 8 | bytes[8 * i + k];
            double d = __longlong_as_double((long long)u);
            if (isfinite(d) && fabs(d) > 3.4028234663852886e38)
                *bad = 1;
            v = (float)d;
        } else {
            const unsigned char *b = bytes + 4 * i;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
            v = __uint_as_float(u);
        }
        if (!isfinite(v))
            *bad = 1;
        out[i] = v;
    }
}

/* ---------------------------------------------------------------- NumPy .npy */

/* The chosen lead's samples in a .npy body (engine/read_npy.c's struct npy_layout). */
struct npy_args {
    const unsigned char *bytes; /* sample 0's first byte */
    size_t n;
    size_t step;                /* bytes from one sample to the next */
    int size;                   /* bytes per element: 1, 2, 4 or 8 */
    char kind;                  /* 'f', 'i' or 'u' */
    bool big_endian;
    float *out;
    int *bad;
};

/* Thread i: sample i, assembled byte by byte (elements may be unaligned, in either order) and
 * converted as read_npy.c's load_element() converts it; flags a non-finite value, which the
 * host reader refuses. */
static __global__ void npy_kernel(struct npy_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * blockDim.x) {
        const unsigned char *b = a.bytes + i * a.step;
        unsigned long long u = 0;
        for (int k = 0; k < a.size; k++) /* most significant byte first */
            u = u << 8 | b[a.big_endian ? k : a.size - 1 - k];
        float v;
        if (a.kind == 'f')
            /* float64: the cast rounds to nearest, out of float range to inf (as on the host) */
            v = a.size == 4 ? __uint_as_float((unsigned)u)
                            : (float)__longlong_as_double((long long)u);
        else if (a.kind == 'i')
            v = a.size == 1   ? (float)(int8_t)(uint8_t)u
                : a.size == 2 ? (float)(int16_t)(uint16_t)u
                              : (float)(int32_t)(uint32_t)u;
        else
            v = (float)(uint8_t)u;
        if (!isfinite(v))
            *a.bad = 1;
        a.out[i] = v;
    }
}

/* ---------------------------------------------------------------- EDF / BDF */

/* The chosen signal in an EDF/BDF body (engine/read_internal.h's struct edf_layout). */
struct edf_args {
    const unsigned char *bytes; /* sample 0's first byte: record 0's copy of the signal */
    size_t n;
    size_t samples_per_record;
    size_t record_bytes;        /* from one record's copy of the signal to the next */
    int bytes_per_sample;       /* 2 (EDF) or 3 (BDF) */
    int dig_min, dig_max;
    double bitvalue, offset, scale;
    float *out;
    int *bad;
};

/* Thread i: sample i, in record i / samples_per_record at position i % samples_per_record,
 * assembled from its bytes, clamped and converted by edf_convert.h as read_edf.c does; flags a
 * non-finite value, which the host reader refuses. */
static __global__ void edf_kernel(struct edf_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t record = i / a.samples_per_record, pos = i - record * a.samples_per_record;
        const unsigned char *b =
            a.bytes + record * a.record_bytes + pos * (size_t)a.bytes_per_sample;
        float v = edf_to_mv(edf_digital(b, a.bytes_per_sample, a.dig_min, a.dig_max), a.bitvalue,
                            a.offset, a.scale);
        if (!isfinite(v))
            *a.bad = 1;
        a.out[i] = v;
    }
}

/* Bytes [off, off + len) of the body on the device, for a conversion kernel, and a zeroed flag
 * for it to raise in fft_buf: *d_span is d_src + off when the body is already on the device (a
 * streaming upload), else fft_buf after uploading buf[off, off + len) there (the flag then
 * follows the bytes). Queued on the ctx's stream; fft_buf is not otherwise used. */
static enum ecg_status device_span(struct cuda_ctx *ctx, const void *buf, const char *d_src,
                                   size_t off, size_t len, const unsigned char **d_span,
                                   int **d_bad, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    ECG_TRY(dbuf_reserve(ctx, &ctx->fft_buf, (d_src ? 0 : len) + 256, err));
    *d_bad = (int *)((char *)ctx->fft_buf.ptr + (d_src ? 0 : (len + 127) & ~(size_t)127));
    CUDA_TRY(cudaMemsetAsync(*d_bad, 0, sizeof(int), ctx->stream));
    if (!d_src)
        ECG_TRY(upload_bytes(ctx, ctx->fft_buf.ptr, (const char *)buf + off, len, err));
    *d_span = d_src ? (const unsigned char *)d_src + off : (const unsigned char *)ctx->fft_buf.ptr;
out:
    return status;
}

/* Waits for the conversion queued after device_span() and reads its flag: UNSUPPORTED when a
 * value was raised (the host reader then reports it), ECG_OK otherwise. */
static enum ecg_status span_flag(struct cuda_ctx *ctx, const int *d_bad, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    ECG_TRY(stage_reserve(ctx, sizeof(int), err));
    CUDA_TRY(cudaMemcpyAsync(ctx->h_stage, d_bad, sizeof(int), cudaMemcpyDeviceToHost,
                             ctx->stream));
    ECG_TRY(ctx_sync(ctx, "load", err));
    if (*(int *)ctx->h_stage)
        status = ECG_ERR_UNSUPPORTED;
out:
    return status;
}

/* Raw samples: status UNSUPPORTED hands the input back to the host reader. d_src: the bytes
 * already on the device (a streaming upload), or NULL to upload buf here. */
enum ecg_status load_raw(struct cuda_ctx *ctx, const void *buf, size_t len,
                                const char *d_src, int format, const struct ecg_read_opts *opts,
                                size_t *n_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    size_t size = format == ECG_FORMAT_F64 ? 8 : format == ECG_FORMAT_I16 ? 2 : 4;
    size_t n = len / size;
    const unsigned char *d_bytes;
    int *d_bad;
    if (len == 0 || len % size != 0 || (opts->lead && *opts->lead && strcmp(opts->lead, "0")) ||
        (opts->max_samples && n > opts->max_samples))
        return ECG_ERR_UNSUPPORTED;
    ECG_TRY(dbuf_reserve(ctx, &ctx->input, n * sizeof(float), err));
    ECG_TRY(device_span(ctx, buf, d_src, 0, len, &d_bytes, &d_bad, err));
    raw_kernel<<<grid_for(n), CUDA_THREADS, 0, ctx->stream>>>(d_bytes, n, format,
                                                              (float *)ctx->input.ptr, d_bad);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(span_flag(ctx, d_bad, err));
    *n_out = n;
out:
    return status;
}

/* .npy: the host checks the preamble and header (engine/read_npy.c's read_npy_layout, which
 * also applies the lead, the sample limit and the rate), the device converts the chosen lead.
 * Status UNSUPPORTED hands the input back to the host reader, which words any error; err is
 * filled only for a device failure. d_src: as for load_raw. Only the bytes from the lead's
 * first sample to the end of its last are uploaded (a Fortran-order lead is contiguous). */
enum ecg_status load_npy(struct cuda_ctx *ctx, const void *buf, size_t len,
                                const char *d_src, const struct ecg_read_opts *opts,
                                size_t *n_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct npy_layout l;
    struct ecg_error host_err;
    struct npy_args a;
    size_t span_off, span_len;
    int *d_bad;
    memset(&host_err, 0, sizeof host_err);
    if (read_npy_layout(buf, len, opts, &l, &host_err) != ECG_OK)
        return ECG_ERR_UNSUPPORTED;
    /* the layout guarantees first + (n - 1) * stride < the element count, so the span ends at
     * or before len: the device copy has no slack */
    span_off = l.data_offset + l.first * l.size;
    span_len = ((l.n - 1) * l.stride + 1) * l.size;
    ECG_TRY(dbuf_reserve(ctx, &ctx->input, l.n * sizeof(float), err));
    ECG_TRY(device_span(ctx, buf, d_src, span_off, span_len, &a.bytes, &d_bad, err));
    a.n = l.n;
    a.step = l.stride * l.size;
    a.size = (int)l.size;
    a.kind = l.kind;
    a.big_endian = l.big_endian;
    a.out = (float *)ctx->input.ptr;
    a.bad = d_bad;
    npy_kernel<<<grid_for(l.n), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(span_flag(ctx, d_bad, err));
    *n_out = l.n;
out:
    return status;
}

/* EDF/EDF+/BDF/BDF+: the host validates the body with EDFlib without copying it
 * (engine/read_edf.c's read_edf_layout, which also applies the lead, the sample limit and the
 * rate checks), the device converts the chosen signal. Status UNSUPPORTED hands the input back to
 * the host reader, which words any error; err is filled only for a device failure. d_src: as for
 * load_raw. Only the bytes from the signal's first sample in record 0 to its last in the last
 * record are uploaded; the rate and the lead label come from the file. */
enum ecg_status load_edf(struct cuda_ctx *ctx, const void *buf, size_t len,
                                const char *d_src, const struct ecg_read_opts *opts,
                                size_t *n_out, double *fs_out, char lead[32],
                                struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct edf_layout l;
    struct ecg_error host_err;
    struct edf_args a;
    size_t span_off, span_len;
    int *d_bad;
    memset(&host_err, 0, sizeof host_err);
    if (read_edf_layout(buf, len, opts, &l, &host_err) != ECG_OK)
        return ECG_ERR_UNSUPPORTED;
    /* the layout guarantees header_bytes + records * record_bytes == len and that the signal's
     * samples_per_record * bytes_per_sample bytes lie inside a record, so the span ends at or
     * before len */
    span_off = l.header_bytes + l.signal_offset;
    span_len = (l.records - 1) * l.record_bytes + l.samples_per_record * (size_t)l.bytes_per_sample;
    ECG_TRY(dbuf_reserve(ctx, &ctx->input, l.n * sizeof(float), err));
    ECG_TRY(device_span(ctx, buf, d_src, span_off, span_len, &a.bytes, &d_bad, err));
    a.n = l.n;
    a.samples_per_record = l.samples_per_record;
    a.record_bytes = l.record_bytes;
    a.bytes_per_sample = l.bytes_per_sample;
    a.dig_min = l.dig_min;
    a.dig_max = l.dig_max;
    a.bitvalue = l.bitvalue;
    a.offset = l.offset;
    a.scale = l.scale;
    a.out = (float *)ctx->input.ptr;
    a.bad = d_bad;
    edf_kernel<<<grid_for(l.n), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(span_flag(ctx, d_bad, err));
    *n_out = l.n;
    *fs_out = l.fs_hz;
    memcpy(lead, l.lead, 32);
out:
    return status;
}
