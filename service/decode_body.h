/*
 * decode_body.h - request bodies as clients send them: Content-Encoding (gzip, deflate, zstd)
 * and multipart/form-data (browser forms, `curl -F`).
 *
 * Decompression uses zlib (gzip, deflate: zlib or raw) and libzstd, streaming into a buffer that
 * never grows past the body limit: a body whose decompressed size crosses it is refused
 * (body_too_large) as soon as it does, whatever its compressed size, so a small "bomb" costs at
 * most the limit in memory and the time to fill it.
 *
 * Multipart bodies are split with libmicrohttpd's post processor; each part is kept with its
 * field name, file name and Content-Type.
 *
 * Threading: plain functions on caller-owned data; called from the worker running the job.
 */
#ifndef SVC_DECODE_BODY_H
#define SVC_DECODE_BODY_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "ecg.h"

enum svc_coding {
    SVC_CODING_IDENTITY = 0,
    SVC_CODING_GZIP,
    SVC_CODING_DEFLATE,
    SVC_CODING_ZSTD,
};

/* Parses a Content-Encoding header value (NULL = identity). False for a coding not supported
 * (or a list of several codings). */
bool svc_coding_parse(const char *header, enum svc_coding *out);

/* The names a Content-Encoding may take, NULL-terminated (for --list-routes). */
extern const char *const svc_coding_names[];

/*
 * Decompresses in[0, in_len) into *out (malloc'd; *out_len bytes), at most limit bytes.
 * Returns ECG_OK; ECG_ERR_TOO_LARGE (code body_too_large) when the output would pass limit;
 * ECG_ERR_FORMAT (code bad_encoding) for data that is not valid in that coding or is truncated;
 * ECG_ERR_NOMEM. On failure *out is NULL.
 */
enum ecg_status svc_body_decompress(enum svc_coding coding, const char *in, size_t in_len,
                                    size_t limit, char **out, size_t *out_len,
                                    struct ecg_error *err) ECG_WUR;

#define SVC_MAX_PARTS 4

struct svc_part {
    char name[64];           /* form field name */
    char filename[256];      /* "" for a plain field */
    char content_type[128];  /* "" when the part gives none */
    char *data;              /* malloc'd */
    size_t len, cap;
};

struct svc_multipart {
    struct svc_part parts[SVC_MAX_PARTS];
    size_t n_parts;
};

/*
 * Splits a multipart/form-data body (of the request on conn, whose headers give the boundary)
 * into its parts. At most SVC_MAX_PARTS parts and limit bytes of part data in all. Returns
 * ECG_OK, or ECG_ERR_FORMAT (bad_multipart) / ECG_ERR_TOO_LARGE / ECG_ERR_NOMEM with err set;
 * free with svc_multipart_fini() in every case.
 */
enum ecg_status svc_multipart_split(struct MHD_Connection *conn, const char *body, size_t len,
                                    size_t limit, struct svc_multipart *out,
                                    struct ecg_error *err) ECG_WUR;
void svc_multipart_fini(struct svc_multipart *mp);

#endif /* SVC_DECODE_BODY_H */
