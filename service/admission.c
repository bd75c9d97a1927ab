/*
 * admission.c - the checks between a request's headers and its job. See admission.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admission.h"
#include "connections.h"
#include "server.h"

/* Small JSON routes (decode) take at most this much body. */
#define SVC_SMALL_BODY_BYTES (8u << 20)
/* More query options than this are refused (every route knows at most five). */
#define SVC_MAX_QUERY_OPTIONS 16

void svc_admission_check_uri(struct svc_request *req, const char *raw_uri)
{
    const unsigned char *p = (const unsigned char *)raw_uri;
    if (*p != '/') {
        req->uri_problem = "the request target must start with '/'";
        return;
    }
    for (; *p; p++) {
        unsigned value = *p;
        if (*p == '%') {
            if (!isxdigit(p[1]) || !isxdigit(p[2])) {
                req->uri_problem = "a '%' in the request target is not followed by two hex digits";
                return;
            }
            char hex[3] = {(char)p[1], (char)p[2], 0};
            value = (unsigned)strtoul(hex, NULL, 16);
            p += 2;
        }
        if (value < 0x20 || value == 0x7f) {
            req->uri_problem = "the request target holds a control character (raw or "
                               "percent-encoded, %00 included)";
            return;
        }
    }
}

bool svc_request_has_body(const struct svc_request *req)
{
    const char *length = svc_head_header(&req->head, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *encoding = svc_head_header(&req->head, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    return encoding || (length && strcmp(length, "0") != 0);
}

/*
 * A refusal decided from the headers alone (the answer is set). Without a body it goes out at
 * the request's final call, which keeps the connection alive. With a declared body of at most
 * SVC_REFUSED_READ_BYTES that the client sends without waiting for 100 Continue, the body is
 * read and dropped (svc_request_body) and the answer goes out when it ends, the connection kept
 * alive: answering at once and closing with the client's bytes unread would make the kernel
 * reset the connection, and the reset can reach the client before the answer does (RFC 9112
 * section 9.6). Otherwise (the client waits for 100 Continue, the body is chunked or larger) the
 * answer goes out at once with Connection: close and libmicrohttpd reads no more of the body.
 * Returns false (refused), for svc_admission_decide.
 */
static bool refuse(struct svc_request *req)
{
    bool read_and_drop = req->has_length && req->declared_bytes <= SVC_REFUSED_READ_BYTES &&
                         !svc_head_header(&req->head, "Expect");
    if (svc_request_has_body(req) && !read_and_drop)
        req->close_connection = true;
    else
        req->answer_pending = true;
    return false;
}

#define REFUSE(req, ...) (svc_answer_error((req), __VA_ARGS__), refuse(req))

/* Sends a refusal decided after svc_admission_decide() (the answer is set), as refuse() says;
 * nothing stays reserved while a refused body is read. */
static enum MHD_Result refuse_now(struct svc_request *req)
{
    svc_memory_release(&req->srv->memory, req->reserved_bytes);
    req->reserved_bytes = 0;
    refuse(req);
    return req->answer_pending ? MHD_YES : svc_answer_send(req);
}

/* A refusal answered at once with Connection: close whatever the body: the request's framing
 * is not trusted. Returns false. */
static bool refuse_framing(struct svc_request *req)
{
    req->close_connection = true;
    return false;
}

static bool route_is_get(enum svc_route route)
{
    return !strcmp(svc_route_def(route)->method, "GET");
}

/* RFC 9110 token characters (a method, a header name). */
static bool is_token(const char *text)
{
    if (!*text)
        return false;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (!isalnum(*p) && !strchr("!#$%&'*+-.^_`|~", *p))
            return false;
    return true;
}

/* One meaning for the message's framing (RFC 9112 6.3); false with the answer set. */
static bool framing_ok(struct svc_request *req, unsigned long long *declared, bool *has_length)
{
    const struct svc_head *head = &req->head;
    unsigned content_length = 0, transfer_encoding = 0, host = 0;
    const char *bad_name = NULL; /* a header name that is not a token ("Content-Length :") */
    for (size_t i = 0; i < head->n_headers; i++) {
        const char *key = head->headers[i].name;
        if (!bad_name && !is_token(key))
            bad_name = key;
        if (!strcasecmp(key, MHD_HTTP_HEADER_HOST))
            host++;
        if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
            content_length++;
        else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            transfer_encoding++;
    }
    const char *length = svc_head_header(head, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *encoding = svc_head_header(head, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *version = head->version;
    *has_length = false;
    *declared = 0;
    if (bad_name) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_header",
                         "header name \"%.40s\" is not an HTTP token (no spaces before ':')",
                         bad_name);
        return false;
    }
    if (host > 1 || (!host && version && !strcmp(version, "HTTP/1.1"))) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_host",
                         "an HTTP/1.1 request carries exactly one Host header (%u here)",
                         host);
        return false;
    }
    if (content_length > 1) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "conflicting_content_length",
                         "%u Content-Length headers: a message has at most one",
                         content_length);
        return false;
    }
    if (content_length && transfer_encoding) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "content_length_with_transfer_encoding",
                         "Content-Length and Transfer-Encoding together: send one of them");
        return false;
    }
    if (transfer_encoding) {
        if (transfer_encoding > 1 || strcasecmp(encoding, "chunked")) {
            svc_answer_error(req, MHD_HTTP_NOT_IMPLEMENTED, "unsupported_transfer_encoding",
                             "Transfer-Encoding \"%.40s\": only chunked is supported",
                             transfer_encoding > 1 ? "(repeated)" : encoding);
            return false;
        }
        return true;
    }
    if (length) {
        size_t digits = strspn(length, "0123456789");
        errno = 0;
        char *end = NULL;
        unsigned long long value = strtoull(length, &end, 10);
        if (!digits || length[digits] || digits > 19 || errno || *end) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_content_length",
                             "Content-Length \"%.24s\": expected one decimal number", length);
            return false;
        }
        *declared = value;
        *has_length = true;
    }
    return true;
}

/* The first query key given twice (exact case), or NULL; *too_many when there are more than
 * SVC_MAX_QUERY_OPTIONS keys (checked up to there). */
static const char *repeated_query(const struct svc_head *head, bool *too_many)
{
    *too_many = false;
    for (size_t i = 0; i < head->n_query; i++) {
        if (i == SVC_MAX_QUERY_OPTIONS) {
            *too_many = true;
            return NULL;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(head->query[k].name, head->query[i].name))
                return head->query[i].name;
    }
    return NULL;
}

/* The route may be reached on this listener: the admin port serves probes and metrics only. */
static bool route_on_listener(const struct svc_request *req)
{
    if (!req->admin)
        return true;
    switch (req->route) {
    case SVC_ROUTE_HEALTHZ:
    case SVC_ROUTE_READYZ:
    case SVC_ROUTE_LIVE:
    case SVC_ROUTE_READY:
    case SVC_ROUTE_METRICS:
        return true;
    default:
        return false;
    }
}

static bool path_needs_token(const struct svc_request *req)
{
    return !strncmp(req->path, "/v1/", 4) || !strcmp(req->path, "/v1") ||
           svc_route_def(req->route)->needs_token;
}

bool svc_admission_decide(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    const struct svc_route_def *def = svc_route_def(req->route);
    if (req->head.incomplete) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                         "no memory to hold the request's headers");
        req->retry_after_s = 1;
        return refuse_framing(req);
    }
    if (req->uri_problem) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_uri", "%s", req->uri_problem);
        return refuse_framing(req);
    }
    if (!is_token(req->method)) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_method",
                         "the request method is not an HTTP token");
        return refuse_framing(req);
    }
    unsigned long long declared = 0;
    if (!framing_ok(req, &declared, &req->has_length))
        return refuse_framing(req);
    req->declared_bytes = declared;

    /* CORS preflights carry no token (browsers never send one): answered for known routes. */
    if (!strcmp(req->method, "OPTIONS") && req->route != SVC_ROUTE_UNKNOWN &&
        route_on_listener(req)) {
        svc_cors_preflight(req);
        return refuse(req);
    }
    /* The token first: without it, which paths exist and what they accept is not told. */
    if (path_needs_token(req) && !svc_token_ok(req)) {
        svc_answer_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                         "missing or wrong bearer token (Authorization: Bearer ...)");
        req->www_authenticate = true;
        return refuse(req);
    }
    if (req->route == SVC_ROUTE_UNKNOWN || !route_on_listener(req))
        return REFUSE(req, MHD_HTTP_NOT_FOUND, "not_found", "no route %s %.200s%s", req->method,
                      req->path, req->admin ? " on the admin port" : "");
    bool is_get = route_is_get(req->route);
    if (!svc_route_allows(def, req->method)) {
        svc_answer_error(req, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                         "%s does not accept %s (allowed: %s)", def->pattern, req->method,
                         def->allow);
        req->allow = def->allow;
        return refuse(req);
    }
    bool too_many = false;
    const char *repeated = repeated_query(&req->head, &too_many);
    if (repeated)
        return REFUSE(req, MHD_HTTP_BAD_REQUEST, "repeated_parameter",
                      "query parameter \"%.40s\" is given more than once", repeated);
    if (too_many)
        return REFUSE(req, MHD_HTTP_BAD_REQUEST, "too_many_parameters",
                      "more than %d query parameters", SVC_MAX_QUERY_OPTIONS);

    /* GET routes take no body; decode takes a small one. */
    if (is_get)
        req->body_limit = 0;
    else if ((req->route == SVC_ROUTE_DECODE || req->route == SVC_ROUTE_RELOAD) &&
             req->body_limit > SVC_SMALL_BODY_BYTES)
        req->body_limit = SVC_SMALL_BODY_BYTES;
    if (declared > req->body_limit)
        return REFUSE(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      is_get ? "%s takes no body (Content-Length %llu)"
                             : "%s: Content-Length %llu exceeds the limit of %zu bytes",
                      def->pattern, declared, req->body_limit);

    bool needs_models = req->route == SVC_ROUTE_ANALYZE || req->route == SVC_ROUTE_MODELS ||
                        req->route == SVC_ROUTE_MODEL || req->route == SVC_ROUTE_DECODE ||
                        req->route == SVC_ROUTE_ANALYSES || req->route == SVC_ROUTE_RELOAD;
    if (needs_models && !atomic_load(&srv->ready)) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                         "the engine and models are still loading");
        req->retry_after_s = 5;
        return refuse(req);
    }
    if (is_get)
        return true;

    bool prepared = req->route == SVC_ROUTE_ANALYZE    ? svc_analyze_prepare(req)
                    : req->route == SVC_ROUTE_ANALYSES ? svc_analyses_prepare(req)
                    : req->route == SVC_ROUTE_RELOAD   ? svc_reload_prepare(req)
                                                       : svc_decode_prepare(req);
    return prepared || refuse(req);
}

enum MHD_Result svc_admission_headers(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (!svc_admission_decide(req))
        return req->answer_pending ? MHD_YES : svc_answer_send(req);
    if (route_is_get(req->route))
        return MHD_YES;
    req->opts.max_samples = svc_memory_max_samples(&srv->memory);

    /* A declared length: its worst case is reserved and its whole buffer taken now, so the
     * upload is copied once, never grown. */
    unsigned long long declared = req->declared_bytes;
    if (req->has_length && declared) {
        size_t estimate = svc_request_estimate(req, (size_t)declared);
        if (estimate > srv->memory.budget_bytes) {
            svc_answer_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                             "a body of %llu bytes may need up to %zu bytes to analyse, more "
                             "than the whole memory budget (%zu bytes)", declared, estimate,
                             srv->memory.budget_bytes);
            return refuse_now(req);
        }
        if (!svc_memory_reserve_up_to(&srv->memory, &req->reserved_bytes, estimate)) {
            svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "memory_busy",
                             "a body of %llu bytes may need %zu bytes, more than the memory "
                             "budget has free now (%zu bytes); retry later", declared, estimate,
                             srv->memory.budget_bytes);
            req->retry_after_s = 1;
            return refuse_now(req);
        }
        req->body = svc_body_pool_get(&srv->bodies, (size_t)declared, 0, &req->body_cap);
        if (!req->body) {
            svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                             "no memory for a body of %llu bytes", declared);
            req->retry_after_s = 1;
            return refuse_now(req);
        }
        /* Streamed to the device as it arrives; the body is exactly this long. */
        svc_request_upload_begin(req, (size_t)declared);
    }
    return MHD_YES;
}

/* The worker pool's entry: runs the route's job, then hands the connection back to
 * libmicrohttpd. The request must not be touched after the resume. */
static void request_job(struct svc_job *job, bool cancelled)
{
    struct svc_request *req = (struct svc_request *)job;
    if (cancelled) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                         "the server is shutting down; retry on another instance");
        req->retry_after_s = 1;
    } else if (req->route == SVC_ROUTE_ANALYZE) {
        svc_analyze_run(req);
    } else if (req->route == SVC_ROUTE_ANALYSES) {
        svc_analyses_run(req);
    } else if (req->route == SVC_ROUTE_RELOAD) {
        svc_reload_run(req);
    } else {
        svc_decode_run(req);
    }
    svc_request_release_body(req);
    req->job_done = true;
    MHD_resume_connection(req->conn);
}

static enum MHD_Result answer_unavailable(struct svc_request *req, const char *code,
                                          const char *message)
{
    svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, code, "%s", message);
    req->retry_after_s = 1;
    return svc_answer_send(req);
}

/* Hands the request to the worker pool, its connection suspended (already, when suspended). */
static enum MHD_Result start_job(struct svc_request *req, bool suspended)
{
    req->phase = SVC_PHASE_WORKING;
    req->job_done = false;
    req->job.run = request_job;
    if (!suspended)
        MHD_suspend_connection(req->conn);
    if (!svc_jobs_submit(&req->srv->jobs, &req->job)) {
        MHD_resume_connection(req->conn);
        req->phase = SVC_PHASE_RECEIVING;
        return answer_unavailable(req, "shutting_down",
                                  "the server is shutting down; retry on another instance");
    }
    return MHD_YES;
}

enum MHD_Result svc_admission_complete(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (req->phase == SVC_PHASE_WORKING) {
        if (!req->job_done)
            return MHD_YES; /* not ours to answer yet */
        /* a batched analysis the batch could not take after all: a worker runs it alone */
        if (req->pending && !svc_analyze_finish(req))
            return start_job(req, true);
        return svc_answer_send(req);
    }
    if (req->answer_pending)
        return svc_answer_send(req);
    if (req->body_too_large) {
        svc_answer_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                         req->body_limit ? "the body exceeds the limit of %zu bytes"
                                         : "this route takes no body (limit %zu bytes)",
                         req->body_limit);
        req->close_connection = true;
        return svc_answer_send(req);
    }
    if (route_is_get(req->route)) {
        svc_route_get(req);
        return svc_answer_send(req);
    }
    if (req->body_no_memory)
        return answer_unavailable(req, "memory_busy",
                                  "no memory in the budget to hold the body; retry later");
    /* Admission: at most workers + queue_depth analyses between a complete body and answer. */
    long admitted = atomic_fetch_add(&srv->admitted, 1) + 1;
    req->admitted = true;
    long capacity = (long)srv->cfg.workers + (long)srv->cfg.queue_depth;
    if (admitted > capacity) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded",
                         "%ld analyses in progress, the limit is %ld (workers + queue depth); "
                         "retry later", admitted - 1, capacity);
        req->retry_after_s = 1;
        return svc_answer_send(req);
    }
    /* The analysis of exactly this body, at its worst case. */
    size_t estimate = svc_request_estimate(req, req->body_len);
    if (!svc_memory_reserve_up_to(&srv->memory, &req->reserved_bytes, estimate))
        return answer_unavailable(req, "memory_busy",
                                  "the analysis does not fit in the memory budget now; retry "
                                  "later");
    if (req->route == SVC_ROUTE_ANALYSES && svc_analyses_async(req))
        return svc_answer_send(req); /* 202: the analysis goes on without this request */
    /* A short body on an engine that batches: read here and queued on a batch, no worker
     * (svc_analyze_start); the connection is suspended first, as the batch may resume it at
     * once. */
    req->phase = SVC_PHASE_WORKING;
    MHD_suspend_connection(req->conn);
    if (req->route == SVC_ROUTE_ANALYZE && svc_analyze_start(req))
        return MHD_YES;
    return start_job(req, true);
}
