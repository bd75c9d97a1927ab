/*
 * read_raw.c - headerless little-endian samples: float32, float64 or int16.
 *
 * The bytes carry no rate, so opts->fs_hz is required. int16 values are taken as they are
 * (no gain is known). The data are decoded byte by byte, so the reader works on any host byte
 * order and any alignment of buf.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"
#include "read_internal.h"

static float load_f32le(const unsigned char *b)
{
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double load_f64le(const unsigned char *b)
{
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = u << 8 | b[i];
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

enum ecg_status read_raw(const void *buf, size_t len, enum ecg_format format,
                         const struct ecg_read_opts *opts, struct ecg_signal *out,
                         struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const unsigned char *bytes = buf;
    const char *name = ecg_format_name(format);
    float *samples = NULL;
    double fs_hz = 0;
    size_t size = format == ECG_FORMAT_F64 ? 8 : format == ECG_FORMAT_I16 ? 2 : 4;

    if (format != ECG_FORMAT_F32 && format != ECG_FORMAT_F64 && format != ECG_FORMAT_I16)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "read_raw: format %d", (int)format);
    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "%s: input is empty", name);
    if (len % size != 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_raw",
                        "%s: %zu bytes is not a multiple of the %zu-byte sample size "
                        "(%zu bytes left over)",
                        name, len, size, len % size);
    status = read_rate_from_opts(opts, "raw binary input", &fs_hz, err);
    if (status != ECG_OK)
        goto out;
    if (opts->lead && *opts->lead && strcmp(opts->lead, "0") != 0) {
        status = ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                          "%s holds one lead: lead \"%.32s\" does not exist", name, opts->lead);
        goto out;
    }
    size_t n = len / size;
    status = read_check_count(n, opts, err);
    if (status != ECG_OK)
        goto out;
    samples = malloc(n * sizeof *samples);
    if (!samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", n);
        goto out;
    }
    bool host_floats = format == ECG_FORMAT_F32 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    if (host_floats)
        memcpy(samples, bytes, n * sizeof *samples);
    for (size_t i = 0; !host_floats && i < n; i++) {
        const unsigned char *b = bytes + i * size;
        if (format == ECG_FORMAT_F32) {
            samples[i] = load_f32le(b);
        } else if (format == ECG_FORMAT_I16) {
            samples[i] = (float)(int16_t)(uint16_t)(b[0] | b[1] << 8);
        } else {
            double d = load_f64le(b);
            if (isfinite(d) && fabs(d) > 3.4028234663852886e38) {
                status = ecg_fail(err, ECG_ERR_FORMAT, "out_of_range",
                                  "%s: sample %zu (%g) is outside the float range", name, i, d);
                goto out;
            }
            samples[i] = (float)d;
        }
    }
    status = read_check_finite(samples, n, name, err);
    if (status != ECG_OK)
        goto out;
    out->samples = samples;
    out->n = n;
    out->fs_hz = fs_hz;
    samples = NULL;
out:
    free(samples);
    return status;
}
