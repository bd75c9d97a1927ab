/*
 * server.c - `ecgd serve`: startup, the libmicrohttpd glue, request lifecycle, admission control
 * and graceful shutdown.
 *
 * Bodies: a declared Content-Length gets its whole pooled buffer when the headers arrive and, for
 * an analysis whose engine is up, a streaming upload (ecg_engine_upload_begin, capacity = the
 * length) that request_body feeds after each chunk. A chunked body's buffer is grown by doubling
 * in request_body; each time, the upload of the old buffer is freed first and a new one begun on
 * the new buffer (capacity = its size, within the body limit) when that is 1 MiB or larger, its
 * prefix queued at once, so a chunked body streams too, at the price of up to ~2x its bytes
 * copied to the device. Invariant: an upload is freed (waiting for its copies, which read the
 * buffer) before the buffer it reads goes back to the pool, on every path: done, grown, 413
 * midway, no memory, client gone (svc_request_release_body frees it first).
 *
 * Startup order: parse the configuration, block SIGTERM/SIGINT (every thread started later
 * inherits the mask, so only the main thread's sigwait() sees them), start the worker pool and
 * the HTTP listener, and only then load the models and create the engine, so that liveness
 * answers during a slow load while readiness says "loading".
 *
 * Shutdown on SIGTERM/SIGINT: readiness turns false, the listening socket closes
 * (MHD_quiesce_daemon), requests already accepted run to completion for up to --drain-s, queued
 * jobs left after that are answered 503, and the process exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "service.h"

/* Small JSON routes (decode) take at most this much body. */
#define SVC_SMALL_BODY_BYTES (8u << 20)
/* First allocation of a body of unknown length (chunked upload). */
#define SVC_BODY_FIRST_BYTES (64u << 10)
/* A chunked body's buffer smaller than this is not streamed to the device: no backend streams
 * less (CUDA's threshold), and small bodies grow often, so skip even asking. */
#define SVC_STREAM_MIN_BYTES ((size_t)1 << 20)
/* Idle body buffers kept for reuse: twice the body limit, at most this much. */
#define SVC_BODY_POOL_MAX_BYTES ((size_t)1 << 30)
/*
 * Per-connection memory of libmicrohttpd: half of it is the read buffer, which bounds the recv()
 * calls and the upload chunks we see. Measured (2-core dev box, 80 MB upload): 256 KiB gives
 * ~1,600 chunks of ~75 KB, 1 MiB ~235 chunks of ~500 KB, with no difference in receive time
 * (the socket delivers less than the buffer holds); but 1 MiB halved GET /healthz throughput
 * (63k/45k -> 31k/30k req/s), as libmicrohttpd resets the larger pool on every request.
 */
#define SVC_CONNECTION_MEMORY (256u << 10)
#define SVC_CONNECTION_LIMIT 4096u
/* After a 413 written mid-stream, bytes still read (and dropped) before closing: see
 * request_refuse_stream(). */
#define SVC_REFUSED_DRAIN_BYTES (64u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ request lifecycle */

static bool request_id_valid(const char *id)
{
    size_t len = strlen(id);
    if (!len || len > 63)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static struct svc_request *request_create(struct svc_server *srv, struct MHD_Connection *conn,
                                          const char *url, const char *method)
{
    struct svc_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->srv = srv;
    req->conn = conn;
    req->t_start = now_s();
    snprintf(req->method, sizeof req->method, "%s", method);
    snprintf(req->path, sizeof req->path, "%s", url);
    req->route = svc_route_match(url, req->model_name, sizeof req->model_name);
    const char *given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    if (given && request_id_valid(given))
        snprintf(req->id, sizeof req->id, "%s", given);
    else
        snprintf(req->id, sizeof req->id, "%s-%06" PRIuFAST64, srv->id_prefix,
                 (uint_fast64_t)atomic_fetch_add(&srv->next_id, 1));
    req->body_limit = srv->cfg.max_body_bytes;
    atomic_fetch_add(&srv->in_flight, 1);
    return req;
}

/* Frees req's streaming upload, if any: waits for its copies, which read req->body. */
static void request_upload_free(struct svc_request *req)
{
    ecg_upload_free(req->upload);
    req->upload = NULL;
    req->upload_engine = NULL;
    req->upload_cap = 0;
}

/*
 * Begins streaming req->body (of which the first cap bytes may be filled) to the device when the
 * request is an analysis whose model's engine is up (creating one here would stall this HTTP
 * thread) and its backend streams this body; otherwise leaves req->upload NULL. Any earlier
 * upload must have been freed. Never blocks on the device.
 */
static void request_upload_begin(struct svc_request *req, size_t cap)
{
    if (req->route != SVC_ROUTE_ANALYZE || req->upload || !req->body || !cap)
        return;
    struct ecg_engine *engine = svc_registry_engine_if_created(&req->srv->registry, req->model);
    if (!engine)
        return;
    req->upload = ecg_engine_upload_begin(engine, req->body, cap, req->opts.format);
    if (req->upload) {
        req->upload_engine = engine;
        req->upload_cap = cap;
    }
}

void svc_request_release_body(struct svc_request *req)
{
    /* The upload's copies read the body: they must be over before anyone else may write it. */
    request_upload_free(req);
    svc_body_pool_put(&req->srv->bodies, req->body, req->body_cap);
    req->body = NULL;
    req->body_cap = 0;
}

static void request_free(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (req->admitted)
        atomic_fetch_sub(&srv->admitted, 1);
    atomic_fetch_sub(&srv->in_flight, 1);
    svc_request_release_body(req);
    ecg_buf_fini(&req->answer);
    free(req);
}

static const char *termination_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "ok";
    case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client_abort";
    }
    return "unknown";
}

/* libmicrohttpd calls this once per request that reached the access handler: metrics, the
 * access log line, and freeing the request. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct svc_server *srv = cls;
    struct svc_request *req = *con_cls;
    (void)conn;
    if (!req)
        return;
    *con_cls = NULL;
    double duration_s = now_s() - req->t_start;
    unsigned status = req->phase == SVC_PHASE_ANSWERED ? req->status : 0;
    uint64_t bytes_out = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? req->bytes_out : 0;
    svc_metrics_request(&srv->metrics, req->route, status, duration_s, req->bytes_in, bytes_out);

    struct ecg_buf line = {0};
    svc_log_begin(&line, status >= 500 || status == 0 ? "warn" : "info", "request");
    ecg_buf_puts(&line, ",\"request_id\":");
    svc_json_string(&line, req->id);
    ecg_buf_puts(&line, ",\"method\":");
    svc_json_string(&line, req->method);
    ecg_buf_puts(&line, ",\"path\":");
    svc_json_string(&line, req->path);
    ecg_buf_printf(&line,
                   ",\"route\":\"%s\",\"status\":%u,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                   "\"duration_ms\":%.3f,\"outcome\":\"%s\"",
                   svc_route_def(req->route)->pattern, status,
                   (unsigned long long)req->bytes_in, (unsigned long long)bytes_out,
                   duration_s * 1000.0, termination_name(toe));
    svc_log_end(&line);
    request_free(req);
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
    } else {
        svc_decode_run(req);
    }
    svc_request_release_body(req);
    req->job_done = true;
    MHD_resume_connection(req->conn);
}

/* True when the request announces a body (a Content-Length above 0, or chunked). */
static bool request_has_body(const struct svc_request *req)
{
    const char *length = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *encoding = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_TRANSFER_ENCODING);
    return encoding || (length && strcmp(length, "0") != 0);
}

/*
 * Sends a refusal decided from the headers alone. With a body still to come, the answer goes out
 * now and libmicrohttpd discards the body and closes the connection; without one it goes out
 * at the request's final call, which keeps the connection alive.
 */
static enum MHD_Result answer_refusal(struct svc_request *req)
{
    if (request_has_body(req))
        return svc_answer_send(req);
    req->answer_pending = true;
    return MHD_YES;
}

#define REFUSE(req, ...) (svc_answer_error((req), __VA_ARGS__), answer_refusal(req))

static bool route_is_get(enum svc_route route)
{
    return !strcmp(svc_route_def(route)->method, "GET");
}

/*
 * Headers received: route, method, token, readiness, declared size, route-specific checks and
 * admission. Refusals are decided before a body byte is read. GET routes are answered at the
 * request's final call.
 */
static enum MHD_Result request_begin(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    const struct svc_route_def *def = svc_route_def(req->route);
    if (req->route == SVC_ROUTE_UNKNOWN)
        return REFUSE(req, MHD_HTTP_NOT_FOUND, "not_found", "no route %s %.200s", req->method,
                      req->path);

    bool is_get = route_is_get(req->route);
    bool method_ok = is_get ? !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD")
                            : !strcmp(req->method, def->method);
    if (!method_ok) {
        svc_answer_error(req, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                         "%s does not accept %s (allowed: %s)", def->pattern, req->method,
                         def->allow);
        req->allow = def->allow;
        return answer_refusal(req);
    }
    if (def->needs_token && !svc_token_ok(srv, req->conn)) {
        svc_answer_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                         "missing or wrong bearer token (Authorization: Bearer ...)");
        req->www_authenticate = true;
        return answer_refusal(req);
    }
    bool needs_models = req->route == SVC_ROUTE_ANALYZE || req->route == SVC_ROUTE_MODELS ||
                        req->route == SVC_ROUTE_MODEL || req->route == SVC_ROUTE_DECODE;
    if (needs_models && !atomic_load(&srv->ready)) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                         "the engine and models are still loading");
        req->retry_after_s = 5;
        return answer_refusal(req);
    }
    if (is_get)
        return MHD_YES;

    if (req->route == SVC_ROUTE_DECODE && req->body_limit > SVC_SMALL_BODY_BYTES)
        req->body_limit = SVC_SMALL_BODY_BYTES;
    const char *length = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long declared = 0;
    if (length) {
        char *end = NULL;
        errno = 0;
        declared = strtoull(length, &end, 10);
        if (errno || end == length || *end || declared > req->body_limit)
            return REFUSE(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "Content-Length %.24s exceeds the limit of %zu bytes", length,
                          req->body_limit);
    }
    bool prepared = req->route == SVC_ROUTE_ANALYZE ? svc_analyze_prepare(req)
                                                    : svc_decode_prepare(req);
    if (!prepared)
        return answer_refusal(req);

    /* Admission: at most workers + queue_depth analyses between headers and answer. */
    long admitted = atomic_fetch_add(&srv->admitted, 1) + 1;
    req->admitted = true;
    long capacity = (long)srv->cfg.workers + (long)srv->cfg.queue_depth;
    if (admitted > capacity) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded",
                         "%ld analyses in progress, the limit is %ld (workers + queue depth); "
                         "retry later", admitted - 1, capacity);
        req->retry_after_s = 1;
        return answer_refusal(req);
    }
    /* A declared length gets its whole buffer now: the upload is then copied once, never grown. */
    if (declared) {
        req->body = svc_body_pool_get(&srv->bodies, (size_t)declared, 0, &req->body_cap);
        if (!req->body)
            return REFUSE(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                          "no memory for a body of %llu bytes", declared);
        /* Streamed to the device as it arrives; the body is exactly this long. */
        request_upload_begin(req, (size_t)declared);
    }
    return MHD_YES;
}

/*
 * When a client keeps streaming long after its body crossed the limit, libmicrohttpd (0.9.x)
 * offers no way to answer before the body ends. Rather than read an unbounded stream, write the
 * 413 answer on the socket ourselves, then keep reading for at most SVC_REFUSED_DRAIN_BYTES
 * before closing: closing at once, with the client's bytes unread, resets the connection, and
 * a client still sending (curl) then fails on its send and never reads the 413. Given the
 * moment, a client sees the answer and stops; the connection closes when it does, at the end of
 * its body, or after the drain budget.
 */
static enum MHD_Result request_refuse_stream(struct svc_request *req)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char body[256], head[512];
    int body_len = snprintf(body, sizeof body,
                            "{\"error\":{\"status\":413,\"code\":\"body_too_large\",\"message\":"
                            "\"the body exceeds the limit of %zu bytes\"}}\n",
                            req->body_limit);
    int head_len = snprintf(head, sizeof head,
                            "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
                            "Content-Length: %d\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n",
                            body_len, req->id);
    if (info && head_len > 0 && body_len > 0) {
        ssize_t sent = send(info->connect_fd, head, (size_t)head_len, MSG_NOSIGNAL);
        if (sent == head_len)
            sent = send(info->connect_fd, body, (size_t)body_len, MSG_NOSIGNAL);
        if (sent > 0) {
            shutdown(info->connect_fd, SHUT_WR);
            req->phase = SVC_PHASE_ANSWERED;
            req->status = MHD_HTTP_CONTENT_TOO_LARGE;
            req->bytes_out = (uint64_t)body_len;
            req->refused_on_socket = true;
            req->discarded = 0;
            return MHD_YES; /* drained by on_request() */
        }
    }
    return MHD_NO; /* libmicrohttpd closes the connection */
}

/* Appends an upload chunk to the body, checking the limit as the data streams. */
static enum MHD_Result request_body(struct svc_request *req, const char *data, size_t size)
{
    req->bytes_in += size;
    if (route_is_get(req->route))
        return MHD_YES; /* a GET body means nothing here: discard it */
    if (req->body_too_large || req->body_no_memory) {
        req->discarded += size;
        /* Past twice the limit (and at least 16 MiB) the stream is refused on the spot. */
        size_t budget = req->body_limit > (16u << 20) ? req->body_limit : (16u << 20);
        return req->discarded > budget ? request_refuse_stream(req) : MHD_YES;
    }
    if (size > req->body_limit - req->body_len) {
        /* Crossed: free what we hold at once; the 413 goes out when the body ends. */
        req->body_too_large = true;
        req->discarded = size;
        svc_request_release_body(req);
        return MHD_YES;
    }
    if (size > req->body_cap - req->body_len) {
        /* Only a chunked upload gets here: double, starting from the largest idle buffer the
         * pool has within the limit, so a stream like the previous one is not grown at all.
         * The upload of the old buffer goes first: its copies read that buffer, and its device
         * memory and budget are better returned before the new one's are asked for. */
        request_upload_free(req);
        size_t need = req->body_len + size;
        size_t cap = req->body_cap ? req->body_cap : SVC_BODY_FIRST_BYTES;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        if (cap > req->body_limit)
            cap = req->body_limit;
        size_t grown_cap = 0;
        char *grown = svc_body_pool_get(&req->srv->bodies, cap,
                                        req->body ? 0 : req->body_limit, &grown_cap);
        if (!grown) {
            req->body_no_memory = true;
            svc_request_release_body(req);
            return MHD_YES;
        }
        if (req->body_len)
            memcpy(grown, req->body, req->body_len);
        svc_request_release_body(req);
        req->body = grown;
        req->body_cap = grown_cap;
        /* Streamed again, from the new buffer, which the body fills at most up to the limit;
         * the prefix already there is queued at once (copied now if 4 MiB or more: progress
         * batches). */
        size_t stream_cap = grown_cap < req->body_limit ? grown_cap : req->body_limit;
        if (stream_cap >= SVC_STREAM_MIN_BYTES) {
            request_upload_begin(req, stream_cap);
            ecg_upload_progress(req->upload, req->body_len);
        }
    }
    memcpy(req->body + req->body_len, data, size);
    req->body_len += size;
    if (req->upload)
        ecg_upload_progress(req->upload, req->body_len); /* queues a copy; never waits */
    return MHD_YES;
}

/* The whole body is in: answer a body error, or hand the request to the worker pool. */
static enum MHD_Result request_end(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (req->phase == SVC_PHASE_WORKING) {
        if (!req->job_done)
            return MHD_YES; /* not ours to answer yet */
        return svc_answer_send(req);
    }
    if (req->answer_pending)
        return svc_answer_send(req);
    if (route_is_get(req->route)) {
        svc_route_get(req);
        return svc_answer_send(req);
    }
    if (req->body_too_large) {
        svc_answer_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                         "the body exceeds the limit of %zu bytes", req->body_limit);
        return svc_answer_send(req);
    }
    if (req->body_no_memory) {
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                         "no memory to hold the body");
        req->retry_after_s = 1;
        return svc_answer_send(req);
    }
    req->phase = SVC_PHASE_WORKING;
    req->job.run = request_job;
    MHD_suspend_connection(req->conn);
    if (!svc_jobs_submit(&srv->jobs, &req->job)) {
        MHD_resume_connection(req->conn);
        req->phase = SVC_PHASE_RECEIVING;
        svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                         "the server is shutting down; retry on another instance");
        req->retry_after_s = 1;
        return svc_answer_send(req);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct svc_server *srv = cls;
    struct svc_request *req = *con_cls;
    (void)version;
    if (!req) {
        req = request_create(srv, conn, url, method);
        if (!req)
            return MHD_NO; /* not even memory for the request: nothing better to do */
        *con_cls = req;
        return request_begin(req);
    }
    if (req->phase == SVC_PHASE_ANSWERED) {
        if (req->refused_on_socket) {
            bool body_ended = *upload_data_size == 0;
            req->discarded += *upload_data_size;
            *upload_data_size = 0;
            return body_ended || req->discarded > SVC_REFUSED_DRAIN_BYTES ? MHD_NO : MHD_YES;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        return request_body(req, upload_data, size);
    }
    return request_end(req);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char message[512];
    (void)cls;
    vsnprintf(message, sizeof message, fmt, ap);
    size_t len = strlen(message);
    while (len && (message[len - 1] == '\n' || message[len - 1] == '\r'))
        message[--len] = '\0';
    svc_log("warn", "libmicrohttpd", "%s", message);
}

/* ------------------------------------------------------------------ startup and shutdown */

static struct MHD_Daemon *daemon_start(struct svc_server *srv, struct ecg_error *err)
{
    const struct svc_config *cfg = &srv->cfg;
    struct sockaddr_in addr4;
    struct sockaddr_in6 addr6;
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC;
    memset(&addr4, 0, sizeof addr4);
    memset(&addr6, 0, sizeof addr6);
    if (inet_pton(AF_INET, cfg->bind, &addr4.sin_addr) == 1) {
        addr4.sin_family = AF_INET;
        addr4.sin_port = htons((uint16_t)cfg->port);
        addr = (const struct sockaddr *)&addr4;
    } else if (inet_pton(AF_INET6, cfg->bind, &addr6.sin6_addr) == 1) {
        addr6.sin6_family = AF_INET6;
        addr6.sin6_port = htons((uint16_t)cfg->port);
        addr = (const struct sockaddr *)&addr6;
        flags |= MHD_USE_IPv6;
    } else {
        ecg_fail(err, ECG_ERR_ARG, "bad_bind",
                 "--bind \"%s\": expected a numeric IPv4 or IPv6 address", cfg->bind);
        return NULL;
    }
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->io_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SVC_CONNECTION_MEMORY,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)SVC_CONNECTION_LIMIT,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_END);
    if (!daemon)
        ecg_fail(err, ECG_ERR_IO, "listen_failed", "cannot listen on %s port %u: %s", cfg->bind,
                 cfg->port, errno ? strerror(errno) : "libmicrohttpd refused the options");
    return daemon;
}

/* Waits until no request is in flight or the drain time is over; true when drained. */
static bool drain(struct svc_server *srv)
{
    double deadline = now_s() + srv->cfg.drain_s;
    while (atomic_load(&srv->in_flight) > 0) {
        if (now_s() >= deadline)
            return false;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return true;
}

static void id_prefix_init(struct svc_server *srv)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t mix = (uint32_t)ts.tv_nsec ^ ((uint32_t)getpid() << 16) ^ (uint32_t)ts.tv_sec;
    mix ^= mix >> 13;
    mix *= 0x5bd1e995u;
    mix ^= mix >> 15;
    snprintf(srv->id_prefix, sizeof srv->id_prefix, "%08x", mix);
}

int ecg_service_main(int argc, char **argv)
{
    struct svc_server *srv = calloc(1, sizeof *srv);
    struct ecg_error err = {0};
    int rc = 1;
    bool jobs_started = false;
    if (!srv) {
        fprintf(stderr, "ecgd serve: out of memory\n");
        return 1;
    }
    switch (svc_config_parse(&srv->cfg, argc, argv, stdout, stderr)) {
    case SVC_CONFIG_RUN:
        break;
    case SVC_CONFIG_EXIT_OK:
        free(srv);
        return 0;
    case SVC_CONFIG_LIST_ROUTES:
        svc_routes_print(stdout, svc_route_details);
        free(srv);
        return 0;
    case SVC_CONFIG_EXIT_USAGE:
        free(srv);
        return 2;
    }

    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    svc_metrics_init(&srv->metrics);
    size_t pool_bytes = srv->cfg.max_body_bytes > SVC_BODY_POOL_MAX_BYTES / 2
                            ? SVC_BODY_POOL_MAX_BYTES
                            : 2 * srv->cfg.max_body_bytes;
    svc_body_pool_init(&srv->bodies, pool_bytes);
    svc_registry_init(&srv->registry, &srv->cfg);
    atomic_init(&srv->ready, false);
    atomic_init(&srv->draining, false);
    atomic_init(&srv->in_flight, 0);
    atomic_init(&srv->admitted, 0);
    atomic_init(&srv->next_id, 1);
    id_prefix_init(srv);

    if (svc_jobs_start(&srv->jobs, srv->cfg.workers, &err) != ECG_OK)
        goto out;
    jobs_started = true;
    srv->daemon = daemon_start(srv, &err);
    if (!srv->daemon)
        goto out;

    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    struct ecg_buf line = {0};
    svc_log_begin(&line, "info", "listening");
    ecg_buf_puts(&line, ",\"bind\":");
    svc_json_string(&line, srv->cfg.bind);
    ecg_buf_printf(&line, ",\"port\":%u,\"version\":\"%s\",\"config\":",
                   info ? (unsigned)info->port : srv->cfg.port, ECG_VERSION);
    svc_config_write_json(&srv->cfg, &line);
    svc_log_end(&line);

    double load_start = now_s();
    if (svc_registry_load(&srv->registry, &err) != ECG_OK)
        goto out;
    struct ecg_engine *engine = svc_registry_default(&srv->registry)->engine;
    /* Bodies from now on in memory the backend reads fastest (no body exists before ready). */
    svc_body_pool_set_engine(&srv->bodies, engine);
    snprintf(srv->backend, sizeof srv->backend, "%s", ecg_engine_backend(engine));
    snprintf(srv->device, sizeof srv->device, "%s", ecg_engine_device(engine));
    snprintf(srv->note, sizeof srv->note, "%s", ecg_engine_note(engine));
    atomic_store(&srv->ready, true);
    svc_log("info", "ready", "default model %s, %zu model(s), backend %s, loaded in %.3f s",
            svc_registry_default(&srv->registry)->name, srv->registry.n_models, srv->backend,
            now_s() - load_start);

    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) != 0)
        continue;
    svc_log("info", "shutdown", "%s: draining %ld in-flight request(s) for up to %u s",
            signal_number == SIGTERM ? "SIGTERM" : "SIGINT", atomic_load(&srv->in_flight),
            srv->cfg.drain_s);
    rc = 0;

out:
    if (rc != 0)
        svc_log("error", "startup_failed", "%s (%s)", err.message, err.code);
    atomic_store(&srv->draining, true);
    bool drained = true;
    if (srv->daemon) {
        MHD_socket listener = MHD_quiesce_daemon(srv->daemon);
        if (listener != MHD_INVALID_SOCKET)
            close(listener);
        if (rc == 0)
            drained = drain(srv);
    }
    /* Queued jobs left after the drain time are answered 503; running ones finish. Every
     * suspended connection is resumed before the daemon stops. */
    if (jobs_started)
        svc_jobs_stop(&srv->jobs, !drained);
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    svc_body_pool_fini(&srv->bodies); /* before the engine that allocated them goes */
    svc_registry_fini(&srv->registry);
    svc_metrics_fini(&srv->metrics);
    if (rc == 0)
        svc_log("info", "stopped", "%s", drained ? "all requests finished" :
                "drain time over: remaining requests were cut");
    free(srv);
    return rc;
}
