/*
 * read_npy.c - NumPy .npy arrays, format versions 1.0, 2.0 and 3.0.
 *
 * Layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.x, uint32 LE for 2.x/3.x),
 * then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (n,), } padded
 * with spaces and a newline, then the raw data. The dict is parsed strictly: exactly those
 * three keys, each once, nothing else (a trailing comma is allowed, as numpy writes one).
 *
 * Accepted arrays: 1-D (one lead) or 2-D samples x leads, in C or Fortran order; dtypes
 * float32/float64/int16/int32 ('<' little-endian, '>' big-endian converted, '=' native), and
 * int8/uint8 ('|'). The data must be exactly as long as the shape says. The format carries no
 * rate, so opts->fs_hz is required; leads are chosen by index (there are no labels), and the
 * signal's lead label stays empty.
 *
 * Two steps: read_npy_layout() checks everything but the values (preamble, header, shape, data
 * size, lead, sample limit, rate) and says where the chosen lead's elements lie; read_npy()
 * then converts them and refuses NaN/Inf. The CUDA backend (gpu/cuda_read.cu) calls the layout
 * step itself and converts the elements on the device exactly as load_element() does here,
 * handing anything the layout refuses or any non-finite value back to read_npy(), so that the
 * errors are always this file's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"
#include "read_internal.h"

#define NPY_MAX_DIMS 2

struct npy_header {
    char kind;   /* 'f', 'i' or 'u' */
    size_t size; /* bytes per element */
    bool big_endian;
    bool fortran_order;
    int ndim;
    size_t shape[NPY_MAX_DIMS];
};

/* A cursor over the header text, for the strict dict parser. */
struct npy_cursor {
    const char *p;
    const char *end;
    const char *start;
};

static void skip_spaces(struct npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static enum ecg_status npy_syntax(const struct npy_cursor *c, const char *expected,
                                  struct ecg_error *err)
{
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, c->p, (size_t)(c->end - c->p));
    return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy header, byte %zu: expected %s, got \"%s\"",
                    (size_t)(c->p - c->start), expected, q);
}

static bool accept(struct npy_cursor *c, char ch)
{
    skip_spaces(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...") without escapes; [*s, *s + *n) gets its content. */
static enum ecg_status parse_string(struct npy_cursor *c, const char **s, size_t *n,
                                    struct ecg_error *err)
{
    skip_spaces(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return npy_syntax(c, "a quoted string", err);
    char quote = *c->p++;
    const char *close = memchr(c->p, quote, (size_t)(c->end - c->p));
    if (!close)
        return npy_syntax(c, "a closing quote", err);
    *s = c->p;
    *n = (size_t)(close - c->p);
    c->p = close + 1;
    return ECG_OK;
}

static enum ecg_status parse_descr(struct npy_cursor *c, struct npy_header *h,
                                   struct ecg_error *err)
{
    const char *s = NULL;
    size_t n = 0;
    enum ecg_status status = parse_string(c, &s, &n, err);
    if (status != ECG_OK)
        return status;
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, s, n);
    if (n != 3 || (s[1] != 'f' && s[1] != 'i' && s[1] != 'u') || s[2] < '1' || s[2] > '8')
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy dtype \"%s\" is not supported: use <f4, <f8, <i2 or <i4", q);
    h->kind = s[1];
    h->size = (size_t)(s[2] - '0');
    bool known = (h->kind == 'f' && (h->size == 4 || h->size == 8)) ||
                 (h->kind == 'i' && (h->size == 1 || h->size == 2 || h->size == 4)) ||
                 (h->kind == 'u' && h->size == 1);
    if (!known)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy dtype \"%s\" is not supported: use <f4, <f8, <i2 or <i4", q);
    switch (s[0]) {
    case '<':
        h->big_endian = false;
        break;
    case '>':
        h->big_endian = true;
        break;
    case '=':
        h->big_endian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;
        break;
    case '|':
        if (h->size != 1)
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                            "npy dtype \"%s\": '|' (no byte order) only fits 1-byte types", q);
        h->big_endian = false;
        break;
    default:
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy dtype \"%s\": unknown byte order '%c'",
                        q, s[0]);
    }
    return ECG_OK;
}

static enum ecg_status parse_bool(struct npy_cursor *c, bool *value, struct ecg_error *err)
{
    skip_spaces(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        *value = true;
        c->p += 4;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        *value = false;
        c->p += 5;
    } else {
        return npy_syntax(c, "True or False", err);
    }
    return ECG_OK;
}

/* A tuple of non-negative integers: "()", "(n,)", "(n, m)", with an optional trailing comma. */
static enum ecg_status parse_shape(struct npy_cursor *c, struct npy_header *h,
                                   struct ecg_error *err)
{
    if (!accept(c, '('))
        return npy_syntax(c, "a shape tuple", err);
    h->ndim = 0;
    for (;;) {
        if (accept(c, ')'))
            break;
        skip_spaces(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return npy_syntax(c, "a dimension", err);
        size_t dim = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (dim > (SIZE_MAX - 9) / 10)
                return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy shape: dimension too large");
            dim = dim * 10 + (size_t)(*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2 long suffix */
            c->p++;
        if (h->ndim == NPY_MAX_DIMS)
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                            "npy arrays of more than 2 dimensions are not supported: use "
                            "samples x leads");
        h->shape[h->ndim++] = dim;
        if (accept(c, ')'))
            break;
        if (!accept(c, ','))
            return npy_syntax(c, "',' or ')' in the shape", err);
    }
    return ECG_OK;
}

/* Parses the header dict [text, text + len). */
static enum ecg_status parse_header(const char *text, size_t len, struct npy_header *h,
                                    struct ecg_error *err)
{
    struct npy_cursor c = {.p = text, .end = text + len, .start = text};
    enum ecg_status status;
    bool have_descr = false, have_order = false, have_shape = false;

    if (!accept(&c, '{'))
        return npy_syntax(&c, "'{'", err);
    for (;;) {
        if (accept(&c, '}'))
            break;
        const char *key = NULL;
        size_t key_len = 0;
        status = parse_string(&c, &key, &key_len, err);
        if (status != ECG_OK)
            return status;
        if (!accept(&c, ':'))
            return npy_syntax(&c, "':'", err);
        bool *seen;
        if (key_len == 5 && memcmp(key, "descr", 5) == 0) {
            seen = &have_descr;
            status = parse_descr(&c, h, err);
        } else if (key_len == 13 && memcmp(key, "fortran_order", 13) == 0) {
            seen = &have_order;
            status = parse_bool(&c, &h->fortran_order, err);
        } else if (key_len == 5 && memcmp(key, "shape", 5) == 0) {
            seen = &have_shape;
            status = parse_shape(&c, h, err);
        } else {
            char q[4 * READ_QUOTE_MAX + 8];
            read_quote(q, sizeof q, key, key_len);
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy header: unknown key \"%s\"", q);
        }
        if (status != ECG_OK)
            return status;
        if (*seen) {
            char q[4 * READ_QUOTE_MAX + 8];
            read_quote(q, sizeof q, key, key_len);
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy header: key \"%s\" repeated", q);
        }
        *seen = true;
        if (accept(&c, '}'))
            break;
        if (!accept(&c, ','))
            return npy_syntax(&c, "',' or '}'", err);
    }
    /* Padding: spaces, then the newline that ends the header. */
    skip_spaces(&c);
    if (c.p < c.end && *c.p == '\n')
        c.p++;
    skip_spaces(&c);
    if (c.p != c.end)
        return npy_syntax(&c, "the end of the header", err);
    if (!have_descr || !have_order || !have_shape)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy header lacks %s",
                        !have_descr   ? "'descr'"
                        : !have_order ? "'fortran_order'"
                                      : "'shape'");
    return ECG_OK;
}

/* One element as a float (decoded byte by byte: any alignment, either byte order). */
static float load_element(const unsigned char *b, const struct npy_layout *l)
{
    unsigned char le[8];
    for (size_t k = 0; k < l->size; k++)
        le[k] = l->big_endian ? b[l->size - 1 - k] : b[k];
    uint64_t u = 0;
    for (size_t k = l->size; k-- > 0;)
        u = u << 8 | le[k];
    switch (l->kind) {
    case 'f':
        if (l->size == 4) {
            uint32_t u32 = (uint32_t)u;
            float f;
            memcpy(&f, &u32, sizeof f);
            return f;
        } else {
            double d;
            memcpy(&d, &u, sizeof d);
            /* Out of float range becomes inf, which the finite check then refuses. */
            return (float)d;
        }
    case 'i':
        if (l->size == 1)
            return (float)(int8_t)(uint8_t)u;
        if (l->size == 2)
            return (float)(int16_t)(uint16_t)u;
        return (float)(int32_t)(uint32_t)u;
    default:
        return (float)(uint8_t)u;
    }
}

enum ecg_status read_npy_layout(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct npy_layout *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const unsigned char *b = buf;
    struct npy_header h = {0};
    double fs_hz = 0;

    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "npy input is empty");
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "not a .npy file: the magic \"\\x93NUMPY\" is missing");
    unsigned major = b[6], minor = b[7];
    size_t header_len, header_at;
    if (major == 1) {
        header_len = (size_t)b[8] | (size_t)b[9] << 8;
        header_at = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                            "npy file truncated: %zu bytes, the preamble needs 12", len);
        header_len = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        header_at = 12;
    } else {
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", major,
                        minor);
    }
    if (minor != 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", major,
                        minor);
    if (header_len > len - header_at)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy header claims %zu bytes but only %zu follow", header_len,
                        len - header_at);
    status = parse_header((const char *)b + header_at, header_len, &h, err);
    if (status != ECG_OK)
        return status;

    status = read_rate_from_opts(opts, "npy", &fs_hz, err);
    if (status != ECG_OK)
        return status;
    if (h.ndim == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy holds a scalar (shape ()), not a signal");
    size_t n = h.shape[0];
    size_t leads = h.ndim == 2 ? h.shape[1] : 1;
    if (leads != 0 && n > SIZE_MAX / leads / h.size)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy", "npy shape (%zu, %zu) is too large", n,
                        leads);
    size_t want = n * leads * h.size, have = len - header_at - header_len;
    if (want != have)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_npy",
                        "npy data size mismatch: the shape needs %zu bytes, the file holds %zu",
                        want, have);
    if (n == 0 || leads == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "npy array is empty");

    long index;
    if (!read_lead_index(opts->lead, &index)) {
        char q[4 * READ_QUOTE_MAX + 8];
        read_quote(q, sizeof q, opts->lead, strlen(opts->lead));
        return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                        "npy has no lead names: give a lead index, not \"%s\"", q);
    }
    if ((size_t)index >= leads)
        return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                        "lead %ld does not exist: the array has %zu lead%s", index, leads,
                        leads == 1 ? "" : "s");
    status = read_check_count(n, opts, err);
    if (status != ECG_OK)
        return status;

    out->data_offset = header_at + header_len;
    out->kind = h.kind;
    out->size = h.size;
    out->big_endian = h.big_endian;
    out->n = n;
    /* C order: element (i, j) at i * leads + j; Fortran order: at j * n + i. */
    out->stride = h.fortran_order ? 1 : leads;
    out->first = h.fortran_order ? (size_t)index * n : (size_t)index;
    out->fs_hz = fs_hz;
    return ECG_OK;
}

enum ecg_status read_npy(const void *buf, size_t len, const struct ecg_read_opts *opts,
                         struct ecg_signal *out, struct ecg_error *err)
{
    struct npy_layout l;
    float *samples = NULL;
    enum ecg_status status = read_npy_layout(buf, len, opts, &l, err);
    if (status != ECG_OK)
        goto out;

    samples = malloc(l.n * sizeof *samples);
    if (!samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", l.n);
        goto out;
    }
    const unsigned char *data = (const unsigned char *)buf + l.data_offset;
    bool host_order = l.big_endian == (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
    if (l.kind == 'f' && l.size == 4 && l.stride == 1 && host_order) {
        memcpy(samples, data + l.first * 4, l.n * 4); /* contiguous float32 in host order */
    } else {
        for (size_t i = 0; i < l.n; i++)
            samples[i] = load_element(data + (l.first + i * l.stride) * l.size, &l);
    }
    status = read_check_finite(samples, l.n, "npy", err);
    if (status != ECG_OK)
        goto out;
    out->samples = samples;
    out->n = l.n;
    out->fs_hz = l.fs_hz;
    samples = NULL;
out:
    free(samples);
    return status;
}
