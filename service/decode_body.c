/*
 * decode_body.c - Content-Encoding (zlib, libzstd) and multipart/form-data (libmicrohttpd's
 * post processor) for request bodies.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>
#include <zstd.h>

#include "decode_body.h"

const char *const svc_coding_names[] = {"identity", "gzip", "x-gzip", "deflate", "zstd", NULL};

bool svc_coding_parse(const char *header, enum svc_coding *out)
{
    static const enum svc_coding codings[] = {SVC_CODING_IDENTITY, SVC_CODING_GZIP,
                                              SVC_CODING_GZIP, SVC_CODING_DEFLATE,
                                              SVC_CODING_ZSTD};
    *out = SVC_CODING_IDENTITY;
    if (!header)
        return true;
    while (*header == ' ' || *header == '\t')
        header++;
    size_t len = strlen(header);
    while (len && (header[len - 1] == ' ' || header[len - 1] == '\t'))
        len--;
    if (!len)
        return true;
    for (size_t i = 0; svc_coding_names[i]; i++)
        if (strlen(svc_coding_names[i]) == len && !strncasecmp(svc_coding_names[i], header, len)) {
            *out = codings[i];
            return true;
        }
    return false;
}

/* Output buffer that grows by doubling up to a hard limit. */
struct sink {
    char *data;
    size_t len, cap, limit;
};

/* Room for at least one more byte; false when the limit is reached or memory is out. */
static bool sink_grow(struct sink *s, bool *too_large)
{
    if (s->len < s->cap)
        return true;
    if (s->cap >= s->limit) {
        *too_large = true;
        return false;
    }
    size_t cap = s->cap ? s->cap * 2 : 64u << 10;
    /* One byte past the limit, so that output reaching it exactly is told from output beyond. */
    if (cap > s->limit + 1 || cap < s->cap)
        cap = s->limit + 1;
    char *grown = realloc(s->data, cap);
    if (!grown)
        return false;
    s->data = grown;
    s->cap = cap;
    return true;
}

static enum ecg_status inflate_body(bool gzip_or_zlib, const char *in, size_t in_len,
                                    struct sink *s, bool *too_large, struct ecg_error *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 + 32: zlib or gzip header, detected; -15: raw deflate, which some clients send as
     * "deflate" (RFC 9110 says zlib, but browsers of old sent raw). */
    int window = gzip_or_zlib ? 15 + 32 : 15;
    const unsigned char *p = (const unsigned char *)in;
    if (!gzip_or_zlib && in_len >= 2 && (p[0] & 0x0f) == 8 && ((p[0] << 8) | p[1]) % 31 == 0)
        window = 15;       /* a zlib header */
    else if (!gzip_or_zlib)
        window = -15;
    if (inflateInit2(&z, window) != Z_OK)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "zlib: cannot start inflating");
    enum ecg_status status = ECG_OK;
    size_t done = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (!sink_grow(s, too_large)) {
            status = *too_large ? ECG_ERR_TOO_LARGE
                                : ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                                           "no memory for the decompressed body");
            goto out;
        }
        size_t in_step = in_len - done > UINT32_MAX ? UINT32_MAX : in_len - done;
        size_t out_step = s->cap - s->len > UINT32_MAX ? UINT32_MAX : s->cap - s->len;
        z.next_in = (unsigned char *)(p + done);
        z.avail_in = (uInt)in_step;
        z.next_out = (unsigned char *)s->data + s->len;
        z.avail_out = (uInt)out_step;
        rc = inflate(&z, Z_NO_FLUSH);
        done += in_step - z.avail_in;
        s->len += out_step - z.avail_out;
        if (rc == Z_BUF_ERROR && done == in_len && z.avail_out) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_encoding",
                              "the %s body is truncated after %zu bytes",
                              gzip_or_zlib ? "gzip" : "deflate", in_len);
            goto out;
        }
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_encoding",
                              "the body is not valid %s data at byte %zu: %s",
                              gzip_or_zlib ? "gzip" : "deflate", done,
                              z.msg ? z.msg : "corrupt");
            goto out;
        }
    }
    if (done != in_len)
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_encoding",
                          "%zu bytes follow the end of the compressed stream", in_len - done);
out:
    inflateEnd(&z);
    return status;
}

static enum ecg_status zstd_body(const char *in, size_t in_len, struct sink *s, bool *too_large,
                                 struct ecg_error *err)
{
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "zstd: cannot start");
    enum ecg_status status = ECG_OK;
    ZSTD_inBuffer input = {in, in_len, 0};
    size_t remaining = 1;
    while (input.pos < input.size || remaining) {
        if (!sink_grow(s, too_large)) {
            status = *too_large ? ECG_ERR_TOO_LARGE
                                : ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                                           "no memory for the decompressed body");
            goto out;
        }
        ZSTD_outBuffer output = {s->data, s->cap, s->len};
        size_t before = input.pos;
        remaining = ZSTD_decompressStream(z, &output, &input);
        s->len = output.pos;
        if (ZSTD_isError(remaining)) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_encoding",
                              "the body is not valid zstd data at byte %zu: %s", input.pos,
                              ZSTD_getErrorName(remaining));
            goto out;
        }
        if (remaining && input.pos == input.size && input.pos == before && output.pos < s->cap) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_encoding",
                              "the zstd body is truncated after %zu bytes", in_len);
            goto out;
        }
    }
out:
    ZSTD_freeDStream(z);
    return status;
}

enum ecg_status svc_body_decompress(enum svc_coding coding, const char *in, size_t in_len,
                                    size_t limit, char **out, size_t *out_len,
                                    struct ecg_error *err)
{
    struct sink s = {NULL, 0, 0, limit};
    bool too_large = false;
    enum ecg_status status;
    *out = NULL;
    *out_len = 0;
    switch (coding) {
    case SVC_CODING_GZIP:
    case SVC_CODING_DEFLATE:
        status = inflate_body(coding == SVC_CODING_GZIP, in, in_len, &s, &too_large, err);
        break;
    case SVC_CODING_ZSTD:
        status = zstd_body(in, in_len, &s, &too_large, err);
        break;
    case SVC_CODING_IDENTITY:
    default:
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal", "no coding to undo");
        break;
    }
    if (status == ECG_OK && s.len > limit) {
        too_large = true;
        status = ECG_ERR_TOO_LARGE;
    }
    if (too_large)
        status = ecg_fail(err, ECG_ERR_TOO_LARGE, "body_too_large",
                          "the decompressed body exceeds the limit of %zu bytes", limit);
    if (status != ECG_OK) {
        free(s.data);
        return status;
    }
    *out = s.data;
    *out_len = s.len;
    return ECG_OK;
}

/* ---------------------------------------------------------------- multipart/form-data */

struct split_state {
    struct svc_multipart *mp;
    size_t total, limit;
    enum ecg_status status;
    struct ecg_error *err;
};

static enum MHD_Result on_part_data(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *filename, const char *content_type,
                                    const char *transfer_encoding, const char *data,
                                    uint64_t off, size_t size)
{
    struct split_state *st = cls;
    struct svc_multipart *mp = st->mp;
    (void)kind;
    (void)transfer_encoding;
    struct svc_part *part = mp->n_parts ? &mp->parts[mp->n_parts - 1] : NULL;
    bool same = part && off > 0 && !strcmp(part->name, key ? key : "") &&
                !strcmp(part->filename, filename ? filename : "");
    if (!same) {
        if (mp->n_parts == SVC_MAX_PARTS) {
            st->status = ecg_fail(st->err, ECG_ERR_FORMAT, "bad_multipart",
                                  "more than %d parts in the form", SVC_MAX_PARTS);
            return MHD_NO;
        }
        part = &mp->parts[mp->n_parts++];
        snprintf(part->name, sizeof part->name, "%s", key ? key : "");
        snprintf(part->filename, sizeof part->filename, "%s", filename ? filename : "");
        snprintf(part->content_type, sizeof part->content_type, "%s",
                 content_type ? content_type : "");
    }
    if (size > st->limit - st->total) {
        st->status = ecg_fail(st->err, ECG_ERR_TOO_LARGE, "body_too_large",
                              "the form's files exceed the limit of %zu bytes", st->limit);
        return MHD_NO;
    }
    st->total += size;
    if (part->len + size > part->cap) {
        size_t cap = part->cap ? part->cap : 64u << 10;
        while (cap < part->len + size)
            cap *= 2;
        char *grown = realloc(part->data, cap);
        if (!grown) {
            st->status = ecg_fail(st->err, ECG_ERR_NOMEM, "out_of_memory",
                                  "no memory for the form's part \"%s\"", part->name);
            return MHD_NO;
        }
        part->data = grown;
        part->cap = cap;
    }
    if (size)
        memcpy(part->data + part->len, data, size);
    part->len += size;
    return MHD_YES;
}

enum ecg_status svc_multipart_split(struct MHD_Connection *conn, const char *body, size_t len,
                                    size_t limit, struct svc_multipart *out,
                                    struct ecg_error *err)
{
    memset(out, 0, sizeof *out);
    struct split_state st = {out, 0, limit, ECG_OK, err};
    struct MHD_PostProcessor *pp = MHD_create_post_processor(conn, 64u << 10, on_part_data, &st);
    if (!pp)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_multipart",
                        "multipart/form-data needs a boundary parameter in Content-Type");
    enum MHD_Result fed = MHD_post_process(pp, body, len);
    enum MHD_Result done = MHD_destroy_post_processor(pp);
    if (st.status != ECG_OK)
        return st.status;
    if (fed != MHD_YES || done != MHD_YES)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_multipart",
                        "the multipart/form-data body is malformed or truncated (no closing "
                        "boundary)");
    if (!out->n_parts)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_multipart", "the form holds no part");
    return ECG_OK;
}

void svc_multipart_fini(struct svc_multipart *mp)
{
    if (!mp)
        return;
    for (size_t i = 0; i < mp->n_parts; i++)
        free(mp->parts[i].data);
    memset(mp, 0, sizeof *mp);
}
