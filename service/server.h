/*
 * server.h - the server object and the per-request state shared by the service's files.
 *
 * One struct svc_server holds everything mutable the service has (configuration, the HTTP
 * listeners and their connections, the models and engines, the worker pool, the memory budget,
 * metrics, counters); there are no other globals. One struct svc_request lives from a request's
 * request line to libmicrohttpd's completion callback; its body is received into one buffer
 * taken from the server's body pool (body_pool.h): sized from Content-Length when the client
 * declares one (after its worst case is reserved in the memory budget, memory.h), so a
 * known-length upload is copied exactly once and never grown; grown by doubling only for chunked
 * uploads. The buffer goes back to the pool once the job is done (or the request refused). The
 * pool keeps at most twice --max-body-mb (and at most 1 GiB) of idle buffers. An analysis body
 * is also streamed to the device while it arrives (request.c).
 *
 * Files, each depending only on those after it:
 *   server.c       startup, signals, drain and shutdown
 *   connections.c  listeners, libmicrohttpd callbacks, connection deadlines (connections.h)
 *   admission.c    framing, token, route, limits, memory and admission slots (admission.h)
 *   route_*.c      the routes: GET answers on the HTTP thread, POST jobs on the worker pool
 *   request.c, http.c, memory.c, body_pool.c, jobs.c, metrics.c, log.c: shared services
 *   head.c         the request's head (headers and query), the only thing the checks read
 *
 * Request flow: the URI callback creates the request and checks the raw target; when the headers
 * arrive connections.c hands their fields over as the request's head (head.h) and admission.c
 * checks them, answering errors before any body byte is read. The body is
 * appended as it arrives (request.c), with the size limit checked on every chunk. When it is
 * complete, GET routes are answered on the HTTP thread; POST routes take an admission slot and
 * become a job for the worker pool while the connection is suspended, and the job leaves its
 * answer in the request for the HTTP thread to send when the connection resumes.
 *
 * Threading: a request is touched by one thread at a time (its HTTP thread, or while suspended
 * its worker). Server fields are either immutable after start or atomics; metrics, the
 * registry, the connection list and the body pool have their own mutexes.
 */
#ifndef SVC_SERVER_H
#define SVC_SERVER_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "body_pool.h"
#include "config.h"
#include "connections.h"
#include "decode_body.h"
#include "ecg.h"
#include "head.h"
#include "jobs.h"
#include "log.h"
#include "memory.h"
#include "metrics.h"
#include "registry.h"
#include "routes.h"
#include "store.h"

/* One listening daemon; its address is the libmicrohttpd callbacks' closure. */
struct svc_listener {
    struct svc_server *srv;
    struct MHD_Daemon *daemon;
    bool admin;                   /* --admin-port: probes and metrics only */
};

struct svc_server {
    struct svc_config cfg;
    struct svc_listener main;
    struct svc_listener admin;    /* daemon NULL without --admin-port */
    struct svc_conns conns;
    struct svc_memory memory;
    struct svc_log_limiter noise; /* connection-level log lines, rate-limited */
    struct svc_metrics metrics;
    struct svc_registry registry;
    struct svc_jobs jobs;
    struct svc_body_pool bodies;  /* request-body buffers, reused across requests */
    struct svc_store store;       /* analyses kept for browsing (/v1/analyses) */
    atomic_bool ready;            /* engine and default model loaded (release/acquire) */
    atomic_bool draining;         /* SIGTERM received */
    atomic_bool closing;          /* drain over: bodies still arriving are refused */
    atomic_long in_flight;        /* requests between headers and completion */
    atomic_long admitted;         /* POST work requests holding an admission slot */
    atomic_long batched;          /* analyses queued on a batch by an HTTP thread, not yet
                                   * collected (svc_analyze_start / svc_analyze_finish) */
    atomic_uint_fast64_t next_id;
    char id_prefix[12];           /* random per process, so ids differ across replicas */
    /* written once before `ready` is set, read only after */
    char backend[16];
    char device[256];
    char note[256];
    struct ecg_buf openapi;       /* the OpenAPI document, built once at start (openapi.c) */
};

enum svc_phase {
    SVC_PHASE_RECEIVING = 0,  /* headers seen, body streaming in */
    SVC_PHASE_WORKING,        /* job queued or running; connection suspended */
    SVC_PHASE_ANSWERED,       /* answer queued with libmicrohttpd */
};

struct svc_request {
    struct svc_job job;
    struct svc_server *srv;
    struct MHD_Connection *conn;
    enum svc_route route;
    enum svc_phase phase;
    char model_name[64];      /* {name} of model routes, {id} of analyses, {file} of assets */
    char method[12];
    char path[256];           /* for the access log (truncated) */
    char id[64];
    bool admin;               /* arrived on the admin listener */
    bool started;             /* headers seen (svc_request_headers) */
    struct svc_head head;     /* method, path, version, headers, query: what the checks read */
    const char *uri_problem;  /* why the raw request target is refused; NULL = fine */
    struct svc_conn *tracked; /* its connection (connections.c); NULL when untracked */
    size_t reserved_bytes;    /* held in the memory budget */
    bool answer_reserved;     /* reserved_bytes holds an answer's estimate (svc_answer_room) */
    size_t answer_floor;      /* ... over this much, held before it (a request body's) */
    double t_start;
    uint64_t bytes_in;
    uint64_t bytes_out;
    bool admitted;
    bool has_length;          /* a valid Content-Length, of declared_bytes */
    unsigned long long declared_bytes;

    /* body: one buffer from srv->bodies, grown only for chunked uploads */
    char *body;
    size_t body_len, body_cap;
    size_t body_limit;        /* max_body_bytes, or less for small JSON routes */
    bool body_too_large;      /* crossed body_limit: stored bytes freed, the rest discarded */
    bool body_no_memory;      /* the buffer could not grow: stored bytes freed */
    uint64_t discarded;       /* bytes received after the limit was crossed */
    bool refused_on_socket;   /* the 413 went out on the socket mid-stream; draining briefly */
    bool job_done;            /* set by the worker (or the batch) before it resumes the
                               * connection */
    struct ecg_pending *pending; /* its analysis queued on a batch (svc_analyze_start), until
                                  * collected */
    struct ecg_engine *pending_engine; /* ... on this engine (the model's, held) */
    /* the body streamed to the device as it arrives (analyze, when the model's engine exists
     * and its backend streams this body); freed before the body buffer goes back or is grown */
    struct ecg_upload *upload;
    struct ecg_engine *upload_engine; /* the engine it was begun on */
    size_t upload_cap;                /* its capacity: the declared length, or for a chunked body
                                       * the buffer's size within the limit */

    /* analysis options (POST /v1/analyze), parsed from headers and query */
    struct ecg_read_opts opts;
    enum svc_coding coding;   /* Content-Encoding: undone by the job before reading */
    bool multipart;           /* multipart/form-data: the file part(s) are the recording */
    bool want_annotations;    /* answer with a WFDB annotation file instead of JSON */
    enum ecg_format dtype_format; /* raw sample type from dtype (float32 by default) */
    char lead[ECG_MAX_LEADS * 33]; /* a lead, a comma list or "all" */
    char embed_lead[32];
    double overlap_s;         /* overlap_s: the leading seconds whose beats are not reported */
    unsigned include;
    struct svc_model *model;  /* held (svc_registry_acquire) until the request is freed */

    /* the answer, filled by a handler or a job, sent by the HTTP thread */
    unsigned status;
    struct ecg_buf answer;
    const char *content_type;
    const char *allow;        /* Allow header (405) */
    char error_code[40];      /* the error answer's code, for the access log; "" otherwise */
    unsigned retry_after_s;   /* Retry-After header when > 0 */
    bool www_authenticate;    /* 401 */
    bool close_connection;    /* Connection: close (framing not trusted, or a body left unread) */
    bool answer_pending;      /* a refusal decided from the headers, sent at the final call */
    char location[96];        /* Location header when not empty */
    const char *cache_control; /* Cache-Control header; NULL = no-store */
    bool prefer_async;        /* POST /v1/analyses with Prefer: respond-async */
};

/* ---- server.c: the server object */

/*
 * Creates the server object from the command line (argv[0] "serve"): configuration, metrics,
 * body pool, memory budget, registry (no model loaded yet) and store; no thread, no listener.
 * NULL with *exit_code set when the process should end instead: --help or --list-routes (0,
 * printed), a bad option (2), no memory or an OpenAPI part that does not merge (1).
 */
struct svc_server *svc_server_create(int argc, char **argv, int *exit_code);

/* Frees what svc_server_create made, once the listeners and the workers are stopped. NULL is a
 * no-op. */
void svc_server_destroy(struct svc_server *srv);

/* ---- request.c: the request object and its body */

/* Monotonic seconds. */
double svc_now_s(void);

/* A new request (counted in flight) on conn; NULL when out of memory. */
struct svc_request *svc_request_create(struct svc_server *srv, struct MHD_Connection *conn,
                                       bool admin);

/* The headers are in: takes over head (left empty) and sets method, path, route and id. */
void svc_request_headers(struct svc_request *req, struct svc_head *head);

/* Worst-case memory of this request with a body of body_bytes (memory.h). */
size_t svc_request_estimate(const struct svc_request *req, size_t body_bytes);
/* The same for a body of body_bytes known to decode (Content-Encoding) to decoded_bytes. */
size_t svc_request_estimate_decoded(const struct svc_request *req, size_t body_bytes,
                                    size_t decoded_bytes);

/*
 * Begins streaming req->body (of which the first cap bytes may be filled) to the device when the
 * request is an analysis whose model's engine is up (creating one here would stall this HTTP
 * thread) and its backend streams this body; otherwise leaves req->upload NULL. Any earlier
 * upload must have been freed. Never blocks on the device.
 */
void svc_request_upload_begin(struct svc_request *req, size_t cap);

/* Frees req's streaming upload, if any: waits for its copies, which read req->body. */
void svc_request_upload_free(struct svc_request *req);

/* Appends an upload chunk to the body, checking the limit and the budget as the data streams. */
enum MHD_Result svc_request_body(struct svc_request *req, const char *data, size_t size);

/* Writes an error answer on the socket mid-body (once per connection), then drains briefly. */
enum MHD_Result svc_request_refuse_stream(struct svc_request *req, unsigned status,
                                          const char *code, const char *message);

/* Frees req's streaming upload (waiting for its copies, which read the body) and hands req's
 * body buffer back to the server's pool (no-op without one); body stays empty. */
void svc_request_release_body(struct svc_request *req);

/* Releases everything the request holds (slot, reservation, body, answer) and frees it. */
void svc_request_free(struct svc_request *req);

/* ---- http.c: answers */

/* Maps an engine status to its HTTP status. One exhaustive switch. */
unsigned svc_http_status(enum ecg_status status);

/* Sets req's answer to the JSON error {"error":{"status","code","message"}}. */
void svc_answer_error(struct svc_request *req, unsigned http_status, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Sets req's answer from an engine error (status mapped by svc_http_status; 503s get
 * Retry-After). */
void svc_answer_ecg_error(struct svc_request *req, const struct ecg_error *err);

/* Sets req's answer to body (taken over; left zeroed) with the given status and type. */
void svc_answer_body(struct svc_request *req, unsigned http_status, struct ecg_buf *body,
                     const char *content_type);

/* Answers up to this size are not counted in the memory budget (http.c answer_reserve). */
#define SVC_ANSWER_UNCOUNTED_BYTES (64u << 10)

/* Before building a large answer to a request that reserved nothing (a GET, a decode): holds
 * up to estimate_bytes (at least the answer's size) in the memory budget, so that answers being
 * built count too, not only those being sent. False, with req answered 503 memory_busy, when it
 * does not fit now; with keep (an answer that cannot be asked for again: DELETE ...?include=)
 * it is counted whether it fits or not. The reservation comes down to the answer's real size,
 * not below what the request held before, when it is sent. */
bool svc_answer_room(struct svc_request *req, size_t estimate_bytes, bool keep);

/* Queues req's answer with libmicrohttpd (on the HTTP thread); an answer over
 * SVC_ANSWER_UNCOUNTED_BYTES is held in the memory budget until the request ends. MHD_NO only
 * when even that failed, which closes the connection. */
enum MHD_Result svc_answer_send(struct svc_request *req);

/* True when no token is configured or the request carries it (constant-time comparison). */
bool svc_token_ok(const struct svc_request *req);

/* Parses a whole plain decimal number ("360", "0.5", "1e3"): no sign, no hex, no spaces, no
 * "inf" or "nan". False on anything else. */
bool svc_parse_decimal(const char *text, double *out);

/* The first key that appears twice in one object anywhere in the document, or NULL. */
const char *svc_json_duplicate_key(const cJSON *item);

/* ---- route_status.c, route_models.c: GET routes, answered on the HTTP thread */
void svc_route_get(struct svc_request *req);

/* ---- route_analyze.c */

/* Checks Content-Type and query of POST /v1/analyze when the headers arrive. Returns false
 * with an error answer set. */
bool svc_analyze_prepare(struct svc_request *req);
/* The job: reads and analyses the body, sets the answer (on a worker thread). */
void svc_analyze_run(struct svc_request *req);
/*
 * The way without a worker for a short body on an engine that batches (CUDA): on the HTTP
 * thread, with the connection suspended, svc_analyze_start reads the body and queues its
 * analysis on a batch (false: not taken, run the job instead); the batch's thread sets job_done
 * and resumes the connection; svc_analyze_finish, back on the HTTP thread, collects the result
 * and sets the answer (false: the batch could not take it after all, run the job).
 */
bool svc_analyze_start(struct svc_request *req);
bool svc_analyze_finish(struct svc_request *req);
/* Collects and drops a batched analysis whose request ends unanswered (the client left). */
void svc_analyze_drop(struct svc_request *req);
/* Prints the query options, content types and codings a route takes, for --list-routes
 * (svc_route_details_fn). */
void svc_route_details(enum svc_route route, FILE *file);

/*
 * Runs the engine on req's body (from its streamed device copy when there is one), records the
 * analysis metrics and gives the body back. With trace not NULL, also keeps the signal and the
 * embedded beats (ecg_engine_analyze_keep). Returns the result and its engine, or NULL with an
 * error answer set.
 */
struct ecg_result *svc_analyze_body(struct svc_request *req, struct ecg_engine **engine,
                                    struct ecg_trace **trace, float **embedding);

/* ---- route_analyses.c: /v1/analyses, analyses kept in srv->store */

/* The {id} of an analyses path (SVC_ROUTE_ANALYSIS*), or SVC_ROUTE_UNKNOWN. */
enum svc_route svc_analyses_match(const char *path, char *id, size_t id_size);
/* Checks POST /v1/analyses when the headers arrive (as svc_analyze_prepare, plus Prefer). */
bool svc_analyses_prepare(struct svc_request *req);
/* Once the body is in: when the client asked for it and the body is large, hands the body to
 * an asynchronous analysis and sets the 202 answer; returns true then (send it). */
bool svc_analyses_async(struct svc_request *req);
/* The job of POST /v1/analyses: analyses, keeps, answers 201 (on a worker thread). */
void svc_analyses_run(struct svc_request *req);
/* The query options of the analyses routes, for --list-routes (svc_route_details). */
void svc_analyses_details(enum svc_route route, FILE *file);
/* GET/DELETE /v1/analyses/{id}, GET .../signal, GET .../beats/{k} (on the HTTP thread). */
void svc_analyses_get(struct svc_request *req);

/* ---- cors.c: cross-origin requests (--cors-origin) */

/* Answers an OPTIONS request (preflight): 204 with Allow, and the CORS headers when the
 * Origin is allowed. */
void svc_cors_preflight(struct svc_request *req);
/* Adds Access-Control-Allow-Origin and friends to an answer when the Origin is allowed. */
void svc_cors_headers(const struct svc_request *req, struct MHD_Response *response);

/* ---- web.c: the dashboard page and its assets, embedded in the binary */
void svc_web_get(struct svc_request *req);

/* ---- route_models.c */
void svc_models_list(struct svc_request *req);
void svc_model_get(struct svc_request *req);
/* Checks POST /v1/models/{name}/decode when the headers arrive. */
bool svc_decode_prepare(struct svc_request *req);
/* The job: decodes the latents or grid of the JSON body, sets the answer (on a worker). */
void svc_decode_run(struct svc_request *req);
/* POST /v1/models/reload: refused (403) when the server has no token. */
bool svc_reload_prepare(struct svc_request *req);
/* The job: svc_registry_reload(), its report as the answer (409 when the default is gone). */
void svc_reload_run(struct svc_request *req);

/* ---- openapi.c: the OpenAPI document, assembled from the parts in service/openapi/ */
struct svc_openapi_part {
    const char *name; /* for error messages: "schemas.json" */
    const char *text; /* a JSON object, NUL-terminated */
};

/*
 * Merges n parts, in order, into one document appended to out (indented, one final newline):
 * objects merge member by member, keys in the order they first appear. ECG_ERR_INTERNAL (code
 * "openapi_part", the message naming the part and the key path) when a part is not a JSON
 * object or defines a value an earlier part already has (other than an object to merge into);
 * ECG_ERR_NOMEM when memory runs out. out may hold part of the document on failure.
 */
enum ecg_status svc_openapi_merge(const struct svc_openapi_part *parts, size_t n,
                                  struct ecg_buf *out, struct ecg_error *err) ECG_WUR;

/* svc_openapi_merge() of the parts embedded in the binary: what GET /openapi.json serves. */
enum ecg_status svc_openapi_build(struct ecg_buf *out, struct ecg_error *err) ECG_WUR;

#endif /* SVC_SERVER_H */
