/*
 * request.c - the request object: creation, its body buffer (appended as chunks arrive, with the
 * size limit checked on every chunk), the body's streaming upload to the device, and freeing.
 *
 * Bodies: a declared Content-Length gets its whole pooled buffer once its memory is reserved
 * (admission.c) and, for an analysis whose engine is up, a streaming upload
 * (ecg_engine_upload_begin, capacity = the length) that svc_request_body feeds after each chunk.
 * A chunked body's buffer is grown by doubling; each time, the upload of the old buffer is freed
 * first and a new one begun on the new buffer (capacity = its size, within the body limit) when
 * that is 1 MiB or larger, its prefix queued at once, so a chunked body streams too, at the price
 * of up to ~2x its bytes copied to the device. Invariant: an upload is freed (waiting for its
 * copies, which read the buffer) before the buffer it reads goes back to the pool, on every
 * path: done, grown, 413 midway, no memory, client gone (svc_request_release_body frees it
 * first).
 *
 * Threading: a request is touched by one thread at a time (see server.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "admission.h"
#include "connections.h"
#include "server.h"

/* First allocation of a body of unknown length (chunked upload). */
#define SVC_BODY_FIRST_BYTES (64u << 10)
/* A chunked body's buffer smaller than this is not streamed to the device: no backend streams
 * less (CUDA's threshold), and small bodies grow often, so skip even asking. */
#define SVC_STREAM_MIN_BYTES ((size_t)1 << 20)

double svc_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

struct svc_request *svc_request_create(struct svc_server *srv, struct MHD_Connection *conn,
                                       bool admin)
{
    struct svc_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->srv = srv;
    req->conn = conn;
    req->admin = admin;
    req->t_start = svc_now_s();
    req->route = SVC_ROUTE_UNKNOWN;
    req->body_limit = srv->cfg.max_body_bytes;
    atomic_fetch_add(&srv->in_flight, 1);
    return req;
}

void svc_request_headers(struct svc_request *req, struct svc_head *head)
{
    struct svc_server *srv = req->srv;
    req->started = true;
    req->head = *head;
    memset(head, 0, sizeof *head);
    const char *method = req->head.method ? req->head.method : "";
    const char *url = req->head.url ? req->head.url : "";
    snprintf(req->method, sizeof req->method, "%s", method);
    snprintf(req->path, sizeof req->path, "%s", url);
    req->route = svc_route_match(url, req->model_name, sizeof req->model_name);
    const char *given = svc_head_header(&req->head, "X-Request-Id");
    if (given && request_id_valid(given))
        snprintf(req->id, sizeof req->id, "%s", given);
    else
        snprintf(req->id, sizeof req->id, "%s-%06" PRIuFAST64, srv->id_prefix,
                 (uint_fast64_t)atomic_fetch_add(&srv->next_id, 1));
}

size_t svc_request_estimate_decoded(const struct svc_request *req, size_t body_bytes,
                                    size_t decoded_bytes)
{
    /* Both the body and what it decodes to are held until the recording is read. */
    size_t reading = svc_memory_estimate(req->multipart ? ECG_FORMAT_AUTO : req->opts.format,
                                         decoded_bytes, req->opts.fs_hz);
    size_t held = decoded_bytes > SIZE_MAX - body_bytes ? SIZE_MAX : decoded_bytes + body_bytes;
    return reading > SIZE_MAX - held ? SIZE_MAX : reading + held;
}

size_t svc_request_estimate(const struct svc_request *req, size_t body_bytes)
{
    if (req->route == SVC_ROUTE_ANALYZE || req->route == SVC_ROUTE_ANALYSES) {
        if (req->coding == SVC_CODING_IDENTITY && !req->multipart)
            return svc_memory_estimate(req->opts.format, body_bytes, req->opts.fs_hz);
        /* A compressed body is reckoned to expand 10 times (CSV gzips 3 to 10 times), within
         * the body limit, which bounds the decompression whatever the ratio (decode_body.c);
         * the job reserves again for the size it really finds (svc_request_estimate_decoded). A
         * form is split into a copy of its parts. */
        size_t limit = req->srv->cfg.max_body_bytes;
        size_t decoded = body_bytes;
        if (req->coding != SVC_CODING_IDENTITY)
            decoded = body_bytes > limit / 10 ? limit : body_bytes * 10;
        return svc_request_estimate_decoded(req, body_bytes, decoded);
    }
    /* decode: cJSON's tree of a small document, and the beats it asks for */
    return body_bytes > SIZE_MAX / 16 ? SIZE_MAX : body_bytes * 16;
}

void svc_request_upload_free(struct svc_request *req)
{
    ecg_upload_free(req->upload);
    req->upload = NULL;
    req->upload_engine = NULL;
    req->upload_cap = 0;
}

void svc_request_upload_begin(struct svc_request *req, size_t cap)
{
    bool analysis = req->route == SVC_ROUTE_ANALYZE || req->route == SVC_ROUTE_ANALYSES;
    if (!analysis || req->upload || !req->body || !cap || req->coding != SVC_CODING_IDENTITY ||
        req->multipart)
        return; /* compressed and multipart bodies are decoded on the host first */
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
    svc_request_upload_free(req);
    svc_body_pool_put(&req->srv->bodies, req->body, req->body_cap);
    req->body = NULL;
    req->body_cap = 0;
}

void svc_request_free(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    if (req->admitted)
        atomic_fetch_sub(&srv->admitted, 1);
    atomic_fetch_sub(&srv->in_flight, 1);
    svc_analyze_drop(req);
    svc_request_release_body(req);
    svc_model_release(req->model);
    svc_memory_release(&srv->memory, req->reserved_bytes);
    ecg_buf_fini(&req->answer);
    svc_head_fini(&req->head);
    free(req);
}

/*
 * When a client keeps streaming long after its body crossed the limit (or the server closes
 * while it streams), libmicrohttpd (0.9.x) offers no way to answer before the body ends. Rather
 * than read an unbounded stream, write the answer on the socket ourselves (once per connection:
 * svc_conn_claim_socket), then keep reading for at most SVC_REFUSED_DRAIN_BYTES before closing:
 * closing at once, with the client's bytes unread, resets the connection, and a client still
 * sending (curl) then fails on its send and never reads the answer. Given the moment, a client
 * sees the answer and stops; the connection closes when it does, at the end of its body, or
 * after the drain budget.
 */
enum MHD_Result svc_request_refuse_stream(struct svc_request *req, unsigned status,
                                          const char *code, const char *message)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info || !svc_conn_claim_socket(req->tracked))
        return MHD_NO; /* libmicrohttpd closes the connection */
    long sent = svc_socket_write_error(info->connect_fd, status, code, message, req->id);
    if (sent > 0) {
        req->phase = SVC_PHASE_ANSWERED;
        snprintf(req->error_code, sizeof req->error_code, "%s", code);
        req->status = status;
        req->bytes_out = (uint64_t)sent;
        req->refused_on_socket = true;
        req->discarded = 0;
        return MHD_YES; /* drained by the access handler */
    }
    return MHD_NO;
}

enum MHD_Result svc_request_body(struct svc_request *req, const char *data, size_t size)
{
    req->bytes_in += size;
    svc_conn_progress(req->tracked, req->bytes_in);
    if (atomic_load(&req->srv->closing))
        return svc_request_refuse_stream(req, 503, "shutting_down",
                                         "the server is shutting down; retry on another instance");
    if (req->answer_pending) {
        /* refused from its headers: a small declared body, read and dropped (admission.c) */
        req->discarded += size;
        return MHD_YES;
    }
    if (req->body_too_large || req->body_no_memory) {
        req->discarded += size;
        /* Past twice the limit (and at least 16 MiB) the stream is refused on the spot. */
        size_t budget = req->body_limit > (16u << 20) ? req->body_limit : (16u << 20);
        if (req->discarded <= budget)
            return MHD_YES;
        char message[96];
        snprintf(message, sizeof message, "the body exceeds the limit of %zu bytes",
                 req->body_limit);
        return svc_request_refuse_stream(req, 413, "body_too_large", message);
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
        svc_request_upload_free(req);
        size_t need = req->body_len + size;
        size_t cap = req->body_cap ? req->body_cap : SVC_BODY_FIRST_BYTES;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        if (cap > req->body_limit)
            cap = req->body_limit;
        /* The grown buffer counts against the memory budget while both exist. */
        size_t reserve = svc_request_estimate(req, cap);
        bool reserved = svc_memory_reserve_up_to(&req->srv->memory, &req->reserved_bytes,
                                                 reserve);
        size_t grown_cap = 0;
        char *grown = reserved ? svc_body_pool_get(&req->srv->bodies, cap,
                                                   req->body ? 0 : req->body_limit, &grown_cap)
                               : NULL;
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
         * the prefix already there is queued at once. */
        size_t stream_cap = grown_cap < req->body_limit ? grown_cap : req->body_limit;
        if (stream_cap >= SVC_STREAM_MIN_BYTES) {
            svc_request_upload_begin(req, stream_cap);
            ecg_upload_progress(req->upload, req->body_len);
        }
    }
    memcpy(req->body + req->body_len, data, size);
    req->body_len += size;
    if (req->upload)
        ecg_upload_progress(req->upload, req->body_len); /* queues a copy; never waits */
    return MHD_YES;
}
