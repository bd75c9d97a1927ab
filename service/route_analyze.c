/*
 * route_analyze.c - POST /v1/analyze: the recording in the body, options in the query.
 *
 * The format comes from Content-Type:
 *   text/csv (also text/plain)             CSV, one column per lead (needs fs)
 *   application/octet-stream[; dtype=D]    raw little-endian samples, D = float32 (default),
 *                                          int16 or float64; dtype may also be a query option
 *   application/x-npy (also application/npy)   NumPy .npy
 *   application/edf (also application/x-edf)   EDF, EDF+ or BDF
 *   application/json                       {"fs": 360, "signal": [...], "lead": "MLII"}, or a bare array
 *   multipart/form-data                    a form with one file part (its format from the file
 *                                          name's extension, else from the part's Content-Type),
 *                                          or a WFDB record: its .hea and .dat as two file parts
 * Content-Encoding gzip, deflate or zstd is undone first (decode_body.c), with the body limit
 * applied to the decompressed size.
 * Query: fs (Hz), lead (index or name, a comma list or "all"), embed_lead, model (a name from
 * /v1/models), include (comma list), dtype, format (json or wfdb-atr). Unknown query options are
 * refused (and repeated ones, admission.c), so that a typo cannot silently change an analysis;
 * an fs that disagrees with the rate the recording carries is refused by the engine
 * (conflicting_fs).
 *
 * The answer is ecg_result_write_json()'s document, the same bytes `ecgd analyze` prints for the
 * same input and options (apart from timing_ms).
 *
 * A body the server streamed to the device while it arrived (server.c, ecg_engine_upload_begin;
 * with a Content-Length or chunked) is analysed from that copy (ecg_engine_analyze_upload with
 * the body's final length: same answer, without uploading the whole body again once it is
 * complete); ecgd_uploads_streamed_total counts those analyses.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server.h"

/* Media types and their formats. */
static const struct {
    const char *media;
    enum ecg_format format;
} media_types[] = {
    {"text/csv", ECG_FORMAT_CSV},
    {"text/plain", ECG_FORMAT_CSV},
    {"application/octet-stream", ECG_FORMAT_F32},
    {"application/x-npy", ECG_FORMAT_NPY},
    {"application/npy", ECG_FORMAT_NPY},
    {"application/edf", ECG_FORMAT_EDF},
    {"application/x-edf", ECG_FORMAT_EDF},
    {"application/json", ECG_FORMAT_JSON},
    {"multipart/form-data", ECG_FORMAT_AUTO}, /* the format of the file part(s) */
};

static const struct {
    const char *name;
    enum ecg_format format;
} dtypes[] = {
    {"float32", ECG_FORMAT_F32}, {"f32", ECG_FORMAT_F32}, {"<f4", ECG_FORMAT_F32},
    {"int16", ECG_FORMAT_I16},   {"i16", ECG_FORMAT_I16}, {"<i2", ECG_FORMAT_I16},
    {"float64", ECG_FORMAT_F64}, {"f64", ECG_FORMAT_F64}, {"<f8", ECG_FORMAT_F64},
};

static bool dtype_parse(const char *text, size_t len, enum ecg_format *out)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strlen(dtypes[i].name) == len && !strncasecmp(dtypes[i].name, text, len)) {
            *out = dtypes[i].format;
            return true;
        }
    return false;
}

static const char *skip_spaces(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/*
 * Parses "type/subtype; key=value; ..." into the format. A dtype parameter is returned through
 * dtype_format (left as is when absent). Returns false with an error answer set.
 */
static bool content_type_parse(struct svc_request *req, const char *header,
                               enum ecg_format *format, enum ecg_format *dtype_format,
                               bool *has_dtype)
{
    if (!header || !*skip_spaces(header)) {
        svc_answer_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "missing_content_type",
                         "Content-Type is required: text/csv, application/octet-stream, "
                         "application/x-npy, application/edf or application/json");
        return false;
    }
    const char *p = skip_spaces(header);
    size_t media_len = strcspn(p, ";");
    while (media_len && (p[media_len - 1] == ' ' || p[media_len - 1] == '\t'))
        media_len--;
    bool known = false;
    for (size_t i = 0; i < sizeof media_types / sizeof media_types[0]; i++)
        if (strlen(media_types[i].media) == media_len &&
            !strncasecmp(media_types[i].media, p, media_len)) {
            *format = media_types[i].format;
            known = true;
            req->multipart = media_types[i].format == ECG_FORMAT_AUTO;
        }
    if (!known) {
        svc_answer_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                         "unsupported Content-Type \"%.*s\": use text/csv, "
                         "application/octet-stream, application/x-npy, application/edf or "
                         "application/json", (int)(media_len > 80 ? 80 : media_len), p);
        return false;
    }
    p += strcspn(p, ";");
    while (*p == ';') {
        p = skip_spaces(p + 1);
        size_t param_len = strcspn(p, ";");
        const char *eq = memchr(p, '=', param_len);
        if (eq && (size_t)(eq - p) == 5 && !strncasecmp(p, "dtype", 5)) {
            const char *value = eq + 1;
            size_t value_len = param_len - (size_t)(value - p);
            while (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
                value_len--;
            if (value_len >= 2 && value[0] == '"' && value[value_len - 1] == '"')
                value++, value_len -= 2;
            if (!dtype_parse(value, value_len, dtype_format)) {
                svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_dtype",
                                 "dtype \"%.*s\": expected float32, int16 or float64",
                                 (int)(value_len > 40 ? 40 : value_len), value);
                return false;
            }
            *has_dtype = true;
        }
        /* Other parameters (charset, header=present...) do not change the reading. */
        p += param_len;
    }
    return true;
}

/* The query options of POST /v1/analyze. */
static const char *const query_names[] = {"fs", "lead", "embed_lead", "model", "include",
                                          "dtype", "format", "overlap_s", NULL};

/* The answer's media types: the JSON document, or the beats as a WFDB annotation file. */
#define WFDB_ANNOTATION_TYPE "application/x-wfdb-annotation"
static const char *const answer_types[] = {"application/json", WFDB_ANNOTATION_TYPE};

void svc_route_details(enum svc_route route, FILE *file)
{
    if (route == SVC_ROUTE_DECODE)
        fprintf(file, "  content-type application/json\n");
    svc_analyses_details(route, file);
    if (route != SVC_ROUTE_ANALYZE && route != SVC_ROUTE_ANALYSES)
        return;
    for (size_t i = 0; query_names[i]; i++)
        fprintf(file, "  query %s\n", query_names[i]);
    for (size_t i = 0; i < sizeof media_types / sizeof media_types[0]; i++)
        fprintf(file, "  content-type %s\n", media_types[i].media);
    for (size_t i = 0; svc_coding_names[i]; i++)
        fprintf(file, "  content-encoding %s\n", svc_coding_names[i]);
    if (route != SVC_ROUTE_ANALYZE)
        return; /* /v1/analyses answers JSON only */
    for (size_t i = 0; i < sizeof answer_types / sizeof answer_types[0]; i++)
        fprintf(file, "  accept %s\n", answer_types[i]);
}

static const char *query(struct svc_request *req, const char *key)
{
    return svc_head_query(&req->head, key);
}

bool svc_analyze_prepare(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    const char *unknown = svc_head_unknown_query(&req->head, query_names);
    if (unknown) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "unknown_parameter",
                         "unknown query parameter \"%.40s\" (expected fs, lead, embed_lead, "
                         "model, include, dtype, format or overlap_s)", unknown);
        return false;
    }

    enum ecg_format format = ECG_FORMAT_AUTO, dtype_format = ECG_FORMAT_F32;
    bool has_dtype = false;
    const char *content_type = svc_head_header(&req->head, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!content_type_parse(req, content_type, &format, &dtype_format, &has_dtype))
        return false;
    const char *coding = svc_head_header(&req->head, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (!svc_coding_parse(coding, &req->coding)) {
        svc_answer_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_encoding",
                         "Content-Encoding \"%.40s\": use gzip, deflate, zstd or identity "
                         "(one coding)", coding);
        return false;
    }
    const char *dtype = query(req, "dtype");
    if (dtype) {
        enum ecg_format query_format;
        if (!dtype_parse(dtype, strlen(dtype), &query_format)) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_dtype",
                             "dtype \"%.40s\": expected float32, int16 or float64", dtype);
            return false;
        }
        if (has_dtype && query_format != dtype_format) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "conflicting_dtype",
                             "the dtype of the query and of the Content-Type differ");
            return false;
        }
        dtype_format = query_format;
        has_dtype = true;
    }
    if (has_dtype && format != ECG_FORMAT_F32 && !req->multipart) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "dtype_not_applicable",
                         "dtype applies to application/octet-stream only");
        return false;
    }
    if (format == ECG_FORMAT_F32)
        format = dtype_format;
    req->opts.format = format;
    req->dtype_format = dtype_format; /* for an application/octet-stream file part */

    const char *fs = query(req, "fs");
    if (fs) {
        double fs_hz = 0;
        if (!svc_parse_decimal(fs, &fs_hz) || !(fs_hz > 0)) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_fs",
                             "fs: expected a positive decimal sampling rate in Hz, got \"%.40s\"",
                             fs);
            return false;
        }
        req->opts.fs_hz = fs_hz;
    }

    /* The answer: JSON, or a WFDB annotation file (format=wfdb-atr, or asked for by Accept) */
    const char *answer_format = query(req, "format");
    const char *accept = svc_head_header(&req->head, MHD_HTTP_HEADER_ACCEPT);
    if (answer_format && strcmp(answer_format, "json") && strcmp(answer_format, "wfdb-atr")) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_format",
                         "format \"%.40s\": expected json or wfdb-atr", answer_format);
        return false;
    }
    req->want_annotations = answer_format ? !strcmp(answer_format, "wfdb-atr")
                                          : accept && strcasestr(accept, WFDB_ANNOTATION_TYPE);

    const char *lead = query(req, "lead");
    if (lead) {
        if (!*lead || strlen(lead) >= sizeof req->lead ||
            (!ecg_lead_is_list(lead) && strlen(lead) >= sizeof req->embed_lead)) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_lead",
                             "lead: expected a column index or a lead name of 1 to %zu "
                             "characters, a comma list of them or \"all\"",
                             sizeof req->embed_lead - 1);
            return false;
        }
        memcpy(req->lead, lead, strlen(lead) + 1);
        req->opts.lead = req->lead;
        if (ecg_lead_is_list(lead)) { /* refuse a malformed list before the body arrives */
            char store[ECG_MAX_LEADS * 33];
            const char *names[ECG_MAX_LEADS];
            size_t n_names;
            bool all;
            struct ecg_error lerr = {0};
            if (ecg_lead_list_parse(lead, store, sizeof store, names, &n_names, &all, &lerr) !=
                ECG_OK) {
                svc_answer_error(req, MHD_HTTP_BAD_REQUEST, lerr.code, "lead: %s", lerr.message);
                return false;
            }
        }
    }
    const char *embed_lead = query(req, "embed_lead");
    if (embed_lead) {
        if (!*embed_lead || strlen(embed_lead) >= sizeof req->embed_lead) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_lead",
                             "embed_lead: expected a column index or a lead name of 1 to %zu "
                             "characters", sizeof req->embed_lead - 1);
            return false;
        }
        memcpy(req->embed_lead, embed_lead, strlen(embed_lead) + 1);
        req->opts.embed_lead = req->embed_lead;
    }

    /* overlap_s: the body starts with the end of the strip before (checked against the
     * recording's length once it is read: ecg_result_drop_overlap) */
    const char *overlap = query(req, "overlap_s");
    req->overlap_s = 0.0;
    if (overlap && (!svc_parse_decimal(overlap, &req->overlap_s) || !(req->overlap_s >= 0.0) ||
                    !isfinite(req->overlap_s))) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_overlap",
                         "overlap_s: expected seconds >= 0 (a decimal number), got \"%.40s\"",
                         overlap);
        return false;
    }

    struct ecg_error err = {0};
    req->include = ECG_INCLUDE_ALL;
    const char *include = query(req, "include");
    if (include && !ecg_include_parse(include, &req->include, &err)) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, err.code, "%s", err.message);
        return false;
    }

    /* "none": the signal-only engine; held until the request ends (a reload may replace it) */
    const char *model = query(req, "model");
    req->model = svc_registry_acquire(&srv->registry, model);
    if (!req->model) {
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "model_not_found",
                         "no model named \"%.63s\" (GET /v1/models lists them; \"none\": no "
                         "model)", model);
        return false;
    }
    return true;
}

/* The file name of a form part without any directory a client put in it. */
static const char *part_basename(const struct svc_part *part)
{
    const char *slash = strrchr(part->filename, '/');
    const char *backslash = strrchr(part->filename, '\\');
    const char *base = slash > backslash ? slash : backslash;
    return base ? base + 1 : part->filename;
}

/* The lower-case extension of a form part's file name, or "". */
static const char *part_extension(const struct svc_part *part)
{
    const char *base = part_basename(part);
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot + 1 : "";
}

/*
 * The format of a form's single file part: from its file name's extension (curl -F and browsers
 * send application/octet-stream for types they do not know), else from its Content-Type; an
 * octet-stream part takes dtype. False with an error answer set.
 */
static bool part_format(struct svc_request *req, const struct svc_part *part,
                        enum ecg_format *format)
{
    enum ecg_format by_name = ecg_format_from_name(part_extension(part));
    if (by_name == ECG_FORMAT_WFDB) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_multipart",
                         "file \"%.64s\": a WFDB record needs its .hea and its .dat, sent as two "
                         "file parts of the form", part_basename(part));
        return false;
    }
    if (by_name != ECG_FORMAT_AUTO) {
        bool raw = by_name == ECG_FORMAT_F32 || by_name == ECG_FORMAT_F64 ||
                   by_name == ECG_FORMAT_I16;
        *format = raw && by_name == ECG_FORMAT_F32 ? req->dtype_format : by_name;
        return true;
    }
    size_t media_len = strcspn(part->content_type, ";");
    for (size_t i = 0; i < sizeof media_types / sizeof media_types[0]; i++)
        if (media_types[i].format != ECG_FORMAT_AUTO && strlen(media_types[i].media) == media_len &&
            !strncasecmp(media_types[i].media, part->content_type, media_len)) {
            *format = media_types[i].format == ECG_FORMAT_F32 ? req->dtype_format
                                                              : media_types[i].format;
            return true;
        }
    svc_answer_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                     "file \"%.64s\" (%.64s): name it .csv, .txt, .f32, .f64, .i16, .npy, .edf, "
                     ".bdf, .json or .hea + .dat, or give its part a known Content-Type",
                     part_basename(part), part->content_type[0] ? part->content_type : "no type");
    return false;
}

/*
 * The recording of a multipart body: one file part (*bytes, *len, req->opts.format set), or a
 * WFDB record as a .hea and a .dat part (read into *sig, *have_signal set). Plain form fields are
 * refused: options go in the query, where they are checked. False with an error answer set.
 */
static bool multipart_input(struct svc_request *req, const struct svc_multipart *mp,
                            const char **bytes, size_t *len, struct ecg_signal *sig,
                            bool *have_signal)
{
    const struct svc_part *hea = NULL, *dat = NULL;
    for (size_t i = 0; i < mp->n_parts; i++) {
        const struct svc_part *part = &mp->parts[i];
        if (!part->filename[0]) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_multipart",
                             "form field \"%.64s\" is not a file: give options (fs, lead, model, "
                             "include, dtype) in the query string", part->name);
            return false;
        }
        if (!strcasecmp(part_extension(part), "hea"))
            hea = part;
        else if (!strcasecmp(part_extension(part), "dat"))
            dat = part;
    }
    if (mp->n_parts == 1)
        return part_format(req, &mp->parts[0], &req->opts.format) &&
               (*bytes = mp->parts[0].data, *len = mp->parts[0].len, true);
    if (mp->n_parts != 2 || !hea || !dat) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_multipart",
                         "the form holds %zu files: send one recording, or a WFDB record's .hea "
                         "and .dat", mp->n_parts);
        return false;
    }
    struct ecg_error err = {0};
    if (ecg_read_wfdb_memory(part_basename(hea), hea->data, hea->len, part_basename(dat),
                             dat->data, dat->len, &req->opts, sig, &err) != ECG_OK) {
        svc_answer_ecg_error(req, &err);
        return false;
    }
    *have_signal = true;
    return true;
}

/* Records the analysis metrics of a result. */
static void count_analysis(struct svc_server *srv, const struct svc_request *req,
                           const struct ecg_result *result)
{
    uint64_t outliers = 0;
    if (result->outlier)
        for (size_t i = 0; i < result->n_beats; i++)
            outliers += result->outlier[i] != 0;
    svc_metrics_analysis(&srv->metrics, req->model->name, &result->timing, result->n_samples,
                         result->n_beats, outliers);
}

struct ecg_result *svc_analyze_body(struct svc_request *req, struct ecg_engine **engine_out,
                                    struct ecg_trace **trace, float **embedding)
{
    struct svc_server *srv = req->srv;
    struct ecg_error err = {0};
    struct ecg_result *result = NULL;
    char *decoded = NULL;
    struct svc_multipart form = {0};
    struct ecg_signal signal = {0};
    bool have_signal = false;
    const char *bytes = req->body;
    size_t len = req->body_len;

    if (!req->body_len) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "empty_body",
                         "the request body is empty: send the recording");
        return NULL;
    }
    struct ecg_engine *engine = svc_registry_engine(&srv->registry, req->model, &err);
    if (!engine) {
        svc_answer_ecg_error(req, &err);
        return NULL;
    }
    if (req->coding != SVC_CODING_IDENTITY) {
        if (svc_body_decompress(req->coding, req->body, req->body_len, srv->cfg.max_body_bytes,
                                &decoded, &len, &err) != ECG_OK) {
            svc_answer_ecg_error(req, &err);
            goto out;
        }
        /* The admission reckoned a 10-fold expansion: what the body really decodes to (within
         * the body limit) is what the reading costs, and must fit the budget too. */
        size_t need = svc_request_estimate_decoded(req, req->body_len, len);
        if (need > srv->memory.budget_bytes) {
            svc_answer_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                             "the body decompresses to %zu bytes, which may need up to %zu bytes "
                             "to analyse, more than the whole memory budget (%zu bytes)", len,
                             need, srv->memory.budget_bytes);
            goto out;
        }
        if (!svc_memory_reserve_up_to(&srv->memory, &req->reserved_bytes, need)) {
            svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "memory_busy",
                             "the body decompresses to %zu bytes: their analysis does not fit in "
                             "the memory budget now; retry later", len);
            req->retry_after_s = 1;
            goto out;
        }
        bytes = decoded;
        svc_request_release_body(req);
    }
    if (req->multipart) {
        if (svc_multipart_split(req->conn, bytes, len, srv->cfg.max_body_bytes, &form, &err) !=
            ECG_OK) {
            svc_answer_ecg_error(req, &err);
            goto out;
        }
        if (!multipart_input(req, &form, &bytes, &len, &signal, &have_signal))
            goto out;
    }
    /* The body streamed to the device while it arrived (server.c) when that could start on
     * this very engine and the body fits the upload (always: server.c begins uploads within
     * the buffer and the limit; never for compressed or multipart bodies); otherwise the host
     * bytes alone. */
    bool streamed = !have_signal && req->upload && req->upload_engine == engine &&
                    req->body_len <= req->upload_cap && bytes == req->body;
    enum ecg_status status;
    if (have_signal) /* a WFDB record: read from its two parts already */
        status = ecg_engine_analyze_signal_keep(engine, &signal, &req->opts, &result, trace,
                                                embedding, &err);
    else if (trace)
        status = ecg_engine_analyze_keep(engine, streamed ? req->upload : NULL, bytes, len,
                                         &req->opts, &result, trace, embedding, &err);
    else if (streamed)
        status = ecg_engine_analyze_upload(engine, req->upload, req->body_len, &req->opts,
                                           &result, &err);
    else
        status = ecg_engine_analyze_bytes(engine, bytes, len, &req->opts, &result, &err);
    if (streamed && ecg_upload_used_device(req->upload))
        svc_metrics_upload_streamed(&srv->metrics);
    if (status == ECG_OK && req->overlap_s > 0.0 &&
        (status = ecg_result_drop_overlap(result, req->overlap_s, embedding ? *embedding : NULL,
                                          ecg_engine_params(engine)->beat_len, &err)) != ECG_OK) {
        /* an overlap as long as the recording: nothing kept, as when the analysis fails */
        ecg_result_free(result);
        result = NULL;
        if (trace) {
            ecg_trace_free(*trace);
            *trace = NULL;
        }
        if (embedding) {
            free(*embedding);
            *embedding = NULL;
        }
    }
    if (status != ECG_OK) {
        svc_answer_ecg_error(req, &err);
        goto out;
    }
    count_analysis(srv, req, result);
    *engine_out = engine;
out:
    /* The recording is no longer needed: its buffers go back before the answer is rendered. */
    svc_request_release_body(req);
    ecg_signal_free(&signal);
    svc_multipart_fini(&form);
    free(decoded);
    return result;
}

/* Renders the answer for result (JSON, or the WFDB annotations asked for) and frees result. */
static void answer_result(struct svc_request *req, struct ecg_engine *engine,
                          struct ecg_result *result)
{
    struct ecg_buf body = {0};
    if (req->want_annotations)
        ecg_result_write_wfdb_annotations(result, &body);
    else
        ecg_result_write_json(result, engine, req->include, &body);
    if (body.failed)
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "the answer for %zu beats could not be built: out of memory",
                         result->n_beats);
    else
        svc_answer_body(req, MHD_HTTP_OK, &body,
                        req->want_annotations ? WFDB_ANNOTATION_TYPE : "application/json");
    ecg_buf_fini(&body);
    ecg_result_free(result);
}

void svc_analyze_run(struct svc_request *req)
{
    struct ecg_engine *engine = NULL;
    struct ecg_result *result = svc_analyze_body(req, &engine, NULL, NULL);
    if (result)
        answer_result(req, engine, result);
}

/*
 * Bodies the HTTP thread reads itself for a batch (svc_analyze_start): up to an 80-s strip at
 * 250 Hz as CSV (116 KB). Reading one costs the HTTP thread at most ~0.7 ms (a 10-s CSV strip
 * ~30 us, about what handing it to a worker and back costs), during which its other
 * connections wait; larger bodies go to a worker. JSON reads ~20x slower than CSV (cJSON: 53
 * MB/s against 1 GB/s, bench/RESULTS.md), so its bound is 32 KiB (~0.6 ms; a 10-s strip at
 * 250 Hz in JSON is ~17 KB).
 */
#define SVC_INLINE_BODY_MAX ((size_t)128 << 10)
#define SVC_INLINE_JSON_MAX ((size_t)32 << 10)

/* The batch's thread: the analysis can be collected. The request is not touched after the
 * resume (its HTTP thread may be collecting it already). */
static void batched_done(void *arg)
{
    struct svc_request *req = arg;
    req->job_done = true;
    MHD_resume_connection(req->conn);
}

bool svc_analyze_start(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    const size_t most =
        req->opts.format == ECG_FORMAT_JSON ? SVC_INLINE_JSON_MAX : SVC_INLINE_BODY_MAX;
    if (req->coding != SVC_CODING_IDENTITY || req->multipart || !req->body_len ||
        req->body_len > most || req->upload)
        return false;
    /* an engine not made yet is made by the job, off the HTTP thread */
    struct ecg_engine *engine = svc_registry_engine_if_created(&srv->registry, req->model);
    if (!engine)
        return false;
    req->job_done = false;
    req->pending_engine = engine;
    atomic_fetch_add(&srv->batched, 1);
    if (ecg_engine_analyze_async(engine, req->body, req->body_len, &req->opts, batched_done, req,
                                 &req->pending) != ECG_OK) {
        atomic_fetch_sub(&srv->batched, 1);
        req->pending_engine = NULL;
        return false;
    }
    return true;
}

bool svc_analyze_finish(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    struct ecg_result *result = NULL;
    struct ecg_error err = {0};
    enum ecg_status status = ecg_engine_analyze_collect(req->pending, &result, &err);
    req->pending = NULL;
    atomic_fetch_sub(&srv->batched, 1);
    if (status == ECG_ERR_UNSUPPORTED)
        return false; /* the body is still held: the job reads it again */
    svc_metrics_inline_batched(&srv->metrics);
    svc_request_release_body(req);
    if (status == ECG_OK && req->overlap_s > 0.0)
        status = ecg_result_drop_overlap(result, req->overlap_s, NULL, 0, &err);
    if (status != ECG_OK) {
        svc_answer_ecg_error(req, &err);
        ecg_result_free(result);
        return true;
    }
    count_analysis(srv, req, result);
    answer_result(req, req->pending_engine, result);
    return true;
}

void svc_analyze_drop(struct svc_request *req)
{
    struct ecg_result *result = NULL;
    struct ecg_error err = {0};
    if (!req->pending)
        return;
    /* job_done: a request ends only once its connection was resumed, by the batch */
    if (ecg_engine_analyze_collect(req->pending, &result, &err) == ECG_OK)
        ecg_result_free(result);
    req->pending = NULL;
    atomic_fetch_sub(&req->srv->batched, 1);
}
