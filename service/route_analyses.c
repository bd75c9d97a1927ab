/*
 * route_analyses.c - analyses as a resource: POST /v1/analyses keeps what it analyses in the
 * server's store (store.h) and answers 201 with its Location; GET /v1/analyses/{id} answers it
 * again, .../signal draws its signal back (min/max decimation computed where the backend keeps
 * the samples: on the GPU with CUDA), .../beats/{k} shows one beat with its VAE reconstruction,
 * DELETE drops it.
 *
 * A large body (at least --async-mb) sent with `Prefer: respond-async` is answered 202 as soon
 * as it is received; the analysis then runs on a worker with a copy of the request (the
 * connection's request is freed when the 202 is sent), and GET on its Location answers 202 with
 * a progress document until it is done, then the analysis (or the error it ended with).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server.h"

/* Most points a signal window may ask for: far more than any screen's pixels. */
#define SIGNAL_MAX_POINTS 200000u
#define SIGNAL_DEFAULT_POINTS 2000u

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool valid_id(const char *text, size_t len)
{
    if (len != SVC_STORE_ID_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return false;
    return true;
}

enum svc_route svc_analyses_match(const char *path, char *id, size_t id_size)
{
    static const char prefix[] = "/v1/analyses/";
    if (strncmp(path, prefix, sizeof prefix - 1))
        return SVC_ROUTE_UNKNOWN;
    const char *segment = path + sizeof prefix - 1;
    const char *slash = strchr(segment, '/');
    size_t len = slash ? (size_t)(slash - segment) : strlen(segment);
    enum svc_route route;
    if (!slash) {
        route = SVC_ROUTE_ANALYSIS;
    } else if (!strcmp(slash, "/signal")) {
        route = SVC_ROUTE_ANALYSIS_SIGNAL;
    } else if (!strncmp(slash, "/beats/", 7) && slash[7] && strlen(slash + 7) <= 12 &&
               strspn(slash + 7, "0123456789") == strlen(slash + 7)) {
        route = SVC_ROUTE_ANALYSIS_BEAT;
    } else {
        return SVC_ROUTE_UNKNOWN;
    }
    /* A malformed id is a path of no resource: 404 like any other unknown id. */
    if (!len || len >= id_size)
        return SVC_ROUTE_UNKNOWN;
    memcpy(id, segment, len);
    id[len] = '\0';
    return route;
}

bool svc_analyses_prepare(struct svc_request *req)
{
    if (!svc_analyze_prepare(req))
        return false;
    /* A kept analysis is answered as JSON (its beats as a WFDB annotation file: /v1/analyze). */
    const char *format = svc_head_query(&req->head, "format");
    if (format && strcmp(format, "json")) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_format",
                         "format \"%.40s\": /v1/analyses answers json (the beats as a WFDB "
                         "annotation file: POST /v1/analyze?format=wfdb-atr)", format);
        return false;
    }
    req->want_annotations = false;
    const char *prefer = svc_head_header(&req->head, "Prefer");
    req->prefer_async = prefer && strcasestr(prefer, "respond-async") != NULL;
    return true;
}

/* ------------------------------------------------------------------ keeping an analysis */

/* Runs the analysis of req's body into entry (result, trace, embedding). False with an error
 * answer in req. */
static bool analyse_into(struct svc_request *req, struct svc_analysis *entry)
{
    struct ecg_engine *engine = NULL;
    entry->body_bytes = req->body_len;
    entry->result = svc_analyze_body(req, &engine, &entry->trace, &entry->embedding);
    if (!entry->result)
        return false;
    entry->model_entry = svc_model_hold(req->model);
    entry->engine = engine;
    entry->model = ecg_engine_model(engine);
    entry->beat_len = ecg_engine_params(engine)->beat_len;
    snprintf(entry->model_name, sizeof entry->model_name, "%s", req->model->name);
    return true;
}

/* The analysis as JSON: the answer of /v1/analyze with the id first. */
static void analysis_json(const struct svc_analysis *entry, unsigned include, struct ecg_buf *out)
{
    struct ecg_buf doc = {0};
    ecg_result_write_json(entry->result, entry->engine, include, &doc);
    ecg_buf_printf(out, "{\"id\":\"%s\",", entry->id);
    if (doc.len > 1 && doc.data[0] == '{')
        ecg_buf_append(out, doc.data + 1, doc.len - 1);
    else
        out->failed = true;
    if (doc.failed)
        out->failed = true;
    ecg_buf_fini(&doc);
}

void svc_analyses_run(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    struct ecg_buf body = {0};
    struct svc_analysis *entry = svc_analysis_create();
    if (!entry) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                         "no memory (or no random id) for a new analysis");
        req->retry_after_s = 1;
        return;
    }
    if (!analyse_into(req, entry))
        goto out;
    entry->state = SVC_ANALYSIS_DONE;
    if (!svc_store_add(&srv->store, entry)) {
        svc_answer_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "too_large_to_keep",
                         "the analysis of %zu samples needs more memory than the store's cap "
                         "of %zu bytes (--store-mb); /v1/analyze answers it without keeping it",
                         entry->result->n_samples, srv->store.cap_bytes);
        goto out;
    }
    analysis_json(entry, req->include, &body);
    if (body.failed) {
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "the answer could not be built: out of memory");
        goto out;
    }
    svc_answer_body(req, MHD_HTTP_CREATED, &body, "application/json");
    snprintf(req->location, sizeof req->location, "/v1/analyses/%s", entry->id);
out:
    ecg_buf_fini(&body);
    svc_analysis_put(entry);
}

/* ------------------------------------------------------------------ asynchronous analyses */

/* The worker's copy of an asynchronous request: the body, the options, the entry. */
struct async_job {
    struct svc_request req;   /* first: the job pointer is the request pointer */
    struct svc_analysis *entry;
};

static void async_run(struct svc_job *job, bool cancelled)
{
    struct async_job *a = (struct async_job *)job;
    struct svc_request *req = &a->req;
    struct svc_server *srv = req->srv;
    struct svc_analysis *entry = a->entry;
    bool done = false;
    if (cancelled)
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                         "the server shut down before the analysis ran");
    else
        done = analyse_into(req, entry);
    if (!done) {
        entry->status = req->status;
        entry->error = req->answer;
        memset(&req->answer, 0, sizeof req->answer);
    }
    svc_store_finish(&srv->store, entry, done ? SVC_ANALYSIS_DONE : SVC_ANALYSIS_FAILED);
    svc_analysis_put(entry);
    svc_request_release_body(req);
    svc_model_release(req->model);
    svc_memory_release(&srv->memory, req->reserved_bytes);
    ecg_buf_fini(&req->answer);
    atomic_fetch_sub(&srv->admitted, 1);
    free(a);
}

bool svc_analyses_async(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (!req->prefer_async || req->body_len < srv->cfg.async_min_bytes || !req->admitted)
        return false;
    /* A form is split by libmicrohttpd's post processor, which reads the boundary from the
     * connection: it is analysed while the connection is there, answered synchronously. */
    if (req->multipart)
        return false;
    struct async_job *a = calloc(1, sizeof *a);
    struct svc_analysis *entry = a ? svc_analysis_create() : NULL;
    if (!entry) {
        free(a);
        return false; /* answered synchronously instead */
    }
    entry->state = SVC_ANALYSIS_RUNNING;
    entry->body_bytes = req->body_len;
    if (!svc_store_add(&srv->store, entry)) {
        svc_analysis_put(entry);
        free(a);
        return false;
    }
    /* The copy takes the body, the options, the admission slot and the memory reserved for
     * the analysis; the streamed device copy is dropped (the analysis reads the host bytes),
     * so nothing of the copy points into req. */
    a->req = *req;
    struct svc_request *copy = &a->req;
    copy->conn = NULL;
    copy->tracked = NULL;
    memset(&copy->head, 0, sizeof copy->head); /* req's, and libmicrohttpd's strings */
    copy->upload = NULL;
    copy->upload_engine = NULL;
    copy->upload_cap = 0;
    memset(&copy->answer, 0, sizeof copy->answer);
    if (copy->opts.lead)
        copy->opts.lead = copy->lead;
    if (copy->opts.embed_lead)
        copy->opts.embed_lead = copy->embed_lead;
    ecg_upload_free(req->upload);
    req->upload = NULL;
    req->model = NULL; /* the copy holds the model entry now */
    req->body = NULL;
    req->body_len = req->body_cap = 0;
    req->admitted = false;
    req->reserved_bytes = 0;
    a->entry = entry; /* the job's reference; the store holds its own */
    copy->job.run = async_run;

    struct ecg_buf body = {0};
    ecg_buf_printf(&body,
                   "{\"id\":\"%s\",\"status\":\"running\",\"body_bytes\":%zu,"
                   "\"elapsed_ms\":0}\n", entry->id, copy->body_len);
    char location[sizeof req->location];
    snprintf(location, sizeof location, "/v1/analyses/%s", entry->id);
    if (!svc_jobs_submit(&srv->jobs, &copy->job)) {
        async_run(&copy->job, true);
        ecg_buf_fini(&body);
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                         "the server is shutting down; retry on another instance");
        req->retry_after_s = 1;
        return true;
    }
    svc_answer_body(req, MHD_HTTP_ACCEPTED, &body, "application/json");
    memcpy(req->location, location, sizeof location);
    return true;
}

/* ------------------------------------------------------------------ reading an analysis */

/* Refuses query parameters outside known (NULL-terminated); list names them for the message. */
static bool query_only(struct svc_request *req, const char *const *known, const char *list)
{
    const char *unknown = svc_head_unknown_query(&req->head, known);
    if (unknown)
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "unknown_parameter",
                         "unknown query parameter \"%.40s\" (expected %s)", unknown, list);
    return !unknown;
}

static const char *query(struct svc_request *req, const char *key)
{
    return svc_head_query(&req->head, key);
}

/* Parses a number query parameter within [lo, hi]; absent leaves *out. False with an answer. */
static bool query_number(struct svc_request *req, const char *key, double lo, double hi,
                         double *out)
{
    const char *text = query(req, key);
    if (!text)
        return true;
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (!*text || end == text || *end || errno || !isfinite(value) || value < lo || value > hi) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                         "%s: expected a number from %g to %g, got \"%.40s\"", key, lo, hi, text);
        return false;
    }
    *out = value;
    return true;
}

static void put_float(struct ecg_buf *out, float value)
{
    if (isfinite(value))
        ecg_buf_printf(out, "%.9g", value);
    else
        ecg_buf_puts(out, "null");
}

static void put_floats(struct ecg_buf *out, const char *key, const float *values, size_t n)
{
    ecg_buf_printf(out, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        if (i)
            ecg_buf_puts(out, ",");
        put_float(out, values[i]);
    }
    ecg_buf_puts(out, "]");
}

/* A window or beat that could not be read: the engine's error, or no memory for it. */
static void answer_read_failure(struct svc_request *req, const struct ecg_error *err,
                                const char *what)
{
    if (err->code[0])
        svc_answer_ecg_error(req, err);
    else
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory", "no memory for %s",
                         what);
}

static void answer_json(struct svc_request *req, unsigned status, struct ecg_buf *body)
{
    if (body->failed) {
        ecg_buf_fini(body);
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "the answer could not be built: out of memory");
        return;
    }
    svc_answer_body(req, status, body, "application/json");
}

static const char *const signal_options[] = {"lead", "start_s", "end_s", "points", NULL};
static const char *const analysis_options[] = {"include", NULL};

void svc_analyses_details(enum svc_route route, FILE *file)
{
    const char *const *names = route == SVC_ROUTE_ANALYSIS          ? analysis_options
                               : route == SVC_ROUTE_ANALYSIS_SIGNAL ? signal_options
                                                                    : NULL;
    for (; names && *names; names++)
        fprintf(file, "  query %s\n", *names);
}

/* GET .../signal: the window [start_s, end_s) reduced to about `points` points. */
static void get_signal(struct svc_request *req, const struct svc_analysis *entry)
{
    const char *const *known = signal_options;
    const struct ecg_result *r = entry->result;
    struct ecg_minmax *buckets = NULL;
    float *raw = NULL;
    struct ecg_buf body = {0};
    struct ecg_error err = {0};
    if (!query_only(req, known, "lead, start_s, end_s or points"))
        return;
    const char *lead = query(req, "lead");
    if (lead && strcmp(lead, "0") && strcmp(lead, r->lead)) {
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "lead_not_kept",
                         "lead \"%.31s\": the analysis kept its analysed lead only (\"%s\", "
                         "or 0)", lead, r->lead);
        return;
    }
    double duration_s = (double)r->n_samples / r->fs_hz;
    double start_s = 0.0, end_s = duration_s, points = SIGNAL_DEFAULT_POINTS;
    if (!query_number(req, "start_s", 0.0, 1e9, &start_s) ||
        !query_number(req, "end_s", 0.0, 1e9, &end_s) ||
        !query_number(req, "points", 2, SIGNAL_MAX_POINTS, &points))
        return;
    size_t start = (size_t)floor(start_s * r->fs_hz);
    double end_samples = ceil(end_s * r->fs_hz);
    size_t end = end_samples >= (double)r->n_samples ? r->n_samples : (size_t)end_samples;
    if (start >= end) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "empty_window",
                         "start_s %g and end_s %g hold no sample of the %.3f s recording",
                         start_s, end_s, duration_s);
        return;
    }
    size_t n_points = (size_t)points, len = end - start, n_out = 0;
    bool decimated = len > n_points;
    /* each point: its index (the digits of end, a comma) and its value (%.9g, a comma) */
    size_t index_digits = (size_t)snprintf(NULL, 0, "%zu", end);
    if (!svc_answer_room(req, (decimated ? n_points : len) * (index_digits + 18) + 512, false))
        return;
    ecg_buf_printf(&body,
                   "{\"id\":\"%s\",\"lead\":\"%s\",\"fs_hz\":%.17g,\"n_samples\":%zu,"
                   "\"start\":%zu,\"end\":%zu,\"decimated\":%s",
                   entry->id, r->lead, r->fs_hz, r->n_samples, start, end,
                   decimated ? "true" : "false");
    if (!decimated) {
        raw = malloc(len * sizeof *raw);
        if (!raw || ecg_trace_read(entry->trace, start, len, raw, &err) != ECG_OK)
            goto fail;
        ecg_buf_printf(&body, ",\"buckets\":0,\"i\":[");
        for (size_t i = 0; i < len; i++)
            ecg_buf_printf(&body, i ? ",%zu" : "%zu", start + i);
        ecg_buf_puts(&body, "]");
        put_floats(&body, "v", raw, len);
    } else {
        size_t want = n_points / 2;
        buckets = malloc(want * sizeof *buckets);
        if (!buckets ||
            ecg_trace_minmax(entry->trace, start, end, want, buckets, &n_out, &err) != ECG_OK)
            goto fail;
        /* Each bucket's extremes in time order (one point when they are the same sample). */
        ecg_buf_printf(&body, ",\"buckets\":%zu,\"i\":[", n_out);
        for (size_t b = 0; b < n_out; b++) {
            const struct ecg_minmax *m = &buckets[b];
            int64_t first = m->i_min < m->i_max ? m->i_min : m->i_max;
            int64_t second = m->i_min < m->i_max ? m->i_max : m->i_min;
            ecg_buf_printf(&body, b ? ",%lld" : "%lld", (long long)first);
            if (second != first)
                ecg_buf_printf(&body, ",%lld", (long long)second);
        }
        ecg_buf_puts(&body, "],\"v\":[");
        for (size_t b = 0; b < n_out; b++) {
            const struct ecg_minmax *m = &buckets[b];
            float first = m->i_min < m->i_max ? m->v_min : m->v_max;
            float second = m->i_min < m->i_max ? m->v_max : m->v_min;
            if (b)
                ecg_buf_puts(&body, ",");
            put_float(&body, first);
            if (m->i_min != m->i_max) {
                ecg_buf_puts(&body, ",");
                put_float(&body, second);
            }
        }
        ecg_buf_puts(&body, "]");
    }
    ecg_buf_puts(&body, "}\n");
    answer_json(req, MHD_HTTP_OK, &body);
    goto out;
fail:
    answer_read_failure(req, &err, "the window");
out:
    ecg_buf_fini(&body);
    free(buckets);
    free(raw);
}

/* GET .../beats/{k}: the beat's samples, its embedding and VAE reconstruction, latent, score. */
static void get_beat(struct svc_request *req, const struct svc_analysis *entry)
{
    static const char *const known[] = {NULL};
    const struct ecg_result *r = entry->result;
    const char *k_text = strrchr(req->path, '/') + 1;
    unsigned long long k = strtoull(k_text, NULL, 10);
    struct ecg_buf body = {0};
    struct ecg_error err = {0};
    float *samples = NULL, *recon = NULL;
    if (!query_only(req, known, "none"))
        return;
    if (k >= r->n_beats) {
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "beat_not_found",
                         "beat %.20s: the analysis has %zu beats (0 to %zu)", k_text, r->n_beats,
                         r->n_beats ? r->n_beats - 1 : 0);
        return;
    }
    int64_t onset = r->onset[k] < 0 ? 0 : r->onset[k];
    int64_t end = r->end[k] > (int64_t)r->n_samples ? (int64_t)r->n_samples : r->end[k];
    size_t len = end > onset ? (size_t)(end - onset) : 0;
    bool kept = r->kept[k] != 0;
    samples = malloc((len ? len : 1) * sizeof *samples);
    if (!samples || (len && ecg_trace_read(entry->trace, (size_t)onset, len, samples, &err)))
        goto fail;
    ecg_buf_printf(&body,
                   "{\"id\":\"%s\",\"beat\":%llu,\"r_peak\":%lld,\"r_peak_s\":%.4f,"
                   "\"onset\":%lld,\"end\":%lld,\"fs_hz\":%.17g,\"kept\":%s,\"rr_ms\":",
                   entry->id, k, (long long)r->r_peak[k], (double)r->r_peak[k] / r->fs_hz,
                   (long long)onset, (long long)end, r->fs_hz, kept ? "true" : "false");
    put_float(&body, r->rr_ms[k]);
    put_floats(&body, "samples", samples, len);
    ecg_buf_printf(&body, ",\"beat_len\":%u", entry->beat_len);
    if (kept && entry->embedding)
        put_floats(&body, "embedded", entry->embedding + k * entry->beat_len, entry->beat_len);
    else
        ecg_buf_puts(&body, ",\"embedded\":null");
    if (kept && entry->model && r->latent) {
        const float *latent = r->latent + k * r->latent_dim;
        recon = malloc(entry->beat_len * sizeof *recon);
        if (!recon || ecg_model_decode(entry->model, latent, 1, recon, &err) != ECG_OK)
            goto fail;
        put_floats(&body, "reconstruction", recon, entry->beat_len);
        put_floats(&body, "latent", latent, r->latent_dim);
        ecg_buf_puts(&body, ",\"score\":");
        put_float(&body, r->score[k]);
        ecg_buf_printf(&body, ",\"outlier\":%s", r->outlier[k] ? "true" : "false");
    } else {
        ecg_buf_puts(&body, ",\"reconstruction\":null,\"latent\":null,\"score\":null,"
                            "\"outlier\":false");
    }
    ecg_buf_puts(&body, "}\n");
    answer_json(req, MHD_HTTP_OK, &body);
    goto out;
fail:
    answer_read_failure(req, &err, "the beat");
out:
    ecg_buf_fini(&body);
    free(samples);
    free(recon);
}

static void answer_missing(struct svc_request *req, bool expired)
{
    if (expired)
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "expired",
                         "analysis %s expired: the store dropped it (time to live or memory "
                         "cap); analyse the recording again", req->model_name);
    else
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no analysis %.40s",
                         req->model_name);
}

/* Parses include= into *include (all when absent); false with an error answer. */
static bool include_option(struct svc_request *req, unsigned *include)
{
    const char *list = query(req, "include");
    struct ecg_error err = {0};
    *include = ECG_INCLUDE_ALL;
    if (!query_only(req, analysis_options, "include"))
        return false;
    if (list && !ecg_include_parse(list, include, &err)) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, err.code, "%s", err.message);
        return false;
    }
    return true;
}

/* An upper bound of analysis_json's size: the beat table's rows, the quality segments, and the
 * rest (a 30-min record with every part: ~95 bytes a beat). */
static size_t analysis_json_estimate(const struct svc_analysis *entry)
{
    const struct ecg_result *r = entry->result;
    return r->n_beats * 400 + r->quality.n_segments * 200 + (64u << 10);
}

/* DELETE: 204; with include=, 200 and the analysis as it was (taken and dropped at once). */
static void delete_analysis(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    unsigned include = 0;
    bool expired = false;
    if (!include_option(req, &include))
        return;
    struct svc_analysis *entry = query(req, "include")
                                     ? svc_store_get(&srv->store, req->model_name, &expired)
                                     : NULL;
    if (!svc_store_delete(&srv->store, req->model_name)) {
        answer_missing(req, false);
    } else if (entry && svc_analysis_state(&srv->store, entry) == SVC_ANALYSIS_DONE) {
        struct ecg_buf body = {0};
        /* the analysis is gone: its answer is counted whether it fits or not */
        (void)svc_answer_room(req, analysis_json_estimate(entry), true);
        analysis_json(entry, include, &body);
        answer_json(req, MHD_HTTP_OK, &body);
        ecg_buf_fini(&body);
    } else {
        svc_answer_body(req, MHD_HTTP_NO_CONTENT, &(struct ecg_buf){0}, NULL);
    }
    svc_analysis_put(entry);
}

void svc_analyses_get(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    bool expired = false;
    if (!valid_id(req->model_name, strlen(req->model_name))) {
        answer_missing(req, false);
        return;
    }
    if (!strcmp(req->method, "DELETE")) {
        delete_analysis(req);
        return;
    }
    struct svc_analysis *entry = svc_store_get(&srv->store, req->model_name, &expired);
    if (!entry) {
        answer_missing(req, expired);
        return;
    }
    struct ecg_buf body = {0};
    switch (svc_analysis_state(&srv->store, entry)) {
    case SVC_ANALYSIS_RUNNING:
        ecg_buf_printf(&body,
                       "{\"id\":\"%s\",\"status\":\"running\",\"body_bytes\":%llu,"
                       "\"elapsed_ms\":%.0f}\n", entry->id,
                       (unsigned long long)entry->body_bytes,
                       (mono_s() - entry->created_s) * 1000.0);
        answer_json(req, MHD_HTTP_ACCEPTED, &body);
        snprintf(req->location, sizeof req->location, "/v1/analyses/%s", entry->id);
        break;
    case SVC_ANALYSIS_FAILED:
        ecg_buf_append(&body, entry->error.data, entry->error.len);
        answer_json(req, entry->status ? entry->status : 500, &body);
        break;
    case SVC_ANALYSIS_DONE:
        if (req->route == SVC_ROUTE_ANALYSIS_SIGNAL) {
            get_signal(req, entry);
        } else if (req->route == SVC_ROUTE_ANALYSIS_BEAT) {
            get_beat(req, entry);
        } else {
            unsigned include = 0;
            if (!include_option(req, &include) ||
                !svc_answer_room(req, analysis_json_estimate(entry), false))
                break;
            analysis_json(entry, include, &body);
            answer_json(req, MHD_HTTP_OK, &body);
        }
        break;
    }
    ecg_buf_fini(&body);
    svc_analysis_put(entry);
}
