/*
 * server.h - the server object and the per-request state shared by the service's files.
 *
 * One struct svc_server holds everything mutable the service has (configuration, the HTTP
 * daemon, the models and engines, the worker pool, metrics, counters); there are no other
 * globals. One struct svc_request lives from a request's headers to libmicrohttpd's completion
 * callback; its body is received into one buffer taken from the server's body pool
 * (body_pool.h): sized from Content-Length when the client declares one, so a known-length
 * upload is copied exactly once (libmicrohttpd's read buffer -> the body) and never grown; grown
 * by doubling only for chunked uploads. The buffer goes back to the pool once the job is done (or
 * the request refused), so steady traffic receives into memory that is already mapped (and, with
 * the CUDA backend, pinned: the engine DMAs it without a staging copy). The pool keeps at most
 * twice --max-body-mb (and at most 1 GiB) of idle buffers. An analysis body is also streamed to
 * the device while it arrives (ecg_engine_upload_begin: the CUDA backend copies it in 4 MiB steps
 * as the chunks come in), so the analysis finds it there: a declared length from the first
 * chunk, a chunked body once its buffer is 1 MiB or larger, begun again on each growth (the old
 * upload freed first). The host buffer stays authoritative, and an upload is always freed before
 * the buffer it reads goes back to the pool.
 *
 * Request flow: the access handler (server.c) routes and checks a request as soon as its headers
 * arrive (token, method, Content-Length, Content-Type, query, admission), answering errors
 * before any body byte is read. The body is appended as it arrives, with the size limit checked
 * on every chunk. GET routes are answered directly on the HTTP thread (they are cheap); POST
 * routes become a job for the worker pool while the connection is suspended, and the job leaves
 * its answer in the request for the HTTP thread to send when the connection resumes.
 *
 * Threading: a request is touched by one thread at a time (its HTTP thread, or while suspended
 * its worker). Server fields are either immutable after start or atomics; metrics, the
 * registry and the body pool have their own mutexes.
 */
#ifndef SVC_SERVER_H
#define SVC_SERVER_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "body_pool.h"
#include "config.h"
#include "ecg.h"
#include "jobs.h"
#include "metrics.h"
#include "registry.h"
#include "routes.h"

struct svc_server {
    struct svc_config cfg;
    struct MHD_Daemon *daemon;
    struct svc_metrics metrics;
    struct svc_registry registry;
    struct svc_jobs jobs;
    struct svc_body_pool bodies;  /* request-body buffers, reused across requests */
    atomic_bool ready;            /* engine and default model loaded (release/acquire) */
    atomic_bool draining;         /* SIGTERM received */
    atomic_long in_flight;        /* requests between headers and completion */
    atomic_long admitted;         /* POST work requests holding an admission slot */
    atomic_uint_fast64_t next_id;
    char id_prefix[12];           /* random per process, so ids differ across replicas */
    /* written once before `ready` is set, read only after */
    char backend[16];
    char device[256];
    char note[256];
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
    char model_name[64];      /* {name} of model routes; "" elsewhere */
    char method[12];
    char path[256];           /* for the access log (truncated) */
    char id[64];
    double t_start;
    uint64_t bytes_in;
    uint64_t bytes_out;
    bool admitted;

    /* body: one buffer from srv->bodies, grown only for chunked uploads */
    char *body;
    size_t body_len, body_cap;
    size_t body_limit;        /* max_body_bytes, or less for small JSON routes */
    bool body_too_large;      /* crossed body_limit: stored bytes freed, the rest discarded */
    bool body_no_memory;      /* the buffer could not grow: stored bytes freed */
    uint64_t discarded;       /* bytes received after the limit was crossed */
    bool refused_on_socket;   /* the 413 went out on the socket mid-stream; draining briefly */
    bool job_done;            /* set by the worker before it resumes the connection */
    /* the body streamed to the device as it arrives (analyze, when the model's engine exists
     * and its backend streams this body); freed before the body buffer goes back or is grown */
    struct ecg_upload *upload;
    struct ecg_engine *upload_engine; /* the engine it was begun on */
    size_t upload_cap;                /* its capacity: the declared length, or for a chunked body
                                       * the buffer's size within the limit */

    /* analysis options (POST /v1/analyze), parsed from headers and query */
    struct ecg_read_opts opts;
    char lead[32];
    unsigned include;
    struct svc_model *model;

    /* the answer, filled by a handler or a job, sent by the HTTP thread */
    unsigned status;
    struct ecg_buf answer;
    const char *content_type;
    const char *allow;        /* Allow header (405) */
    unsigned retry_after_s;   /* Retry-After header when > 0 */
    bool www_authenticate;    /* 401 */
    bool answer_pending;      /* a refusal decided from the headers, sent at the final call */
};

/* ---- server.c */

/* Frees req's streaming upload (waiting for its copies, which read the body) and hands req's
 * body buffer back to the server's pool (no-op without one); body stays empty. */
void svc_request_release_body(struct svc_request *req);

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

/* Queues req's answer with libmicrohttpd (on the HTTP thread). MHD_NO only when even that
 * failed, which closes the connection. */
enum MHD_Result svc_answer_send(struct svc_request *req);

/* True when the request carries the configured bearer token (constant-time comparison). */
bool svc_token_ok(const struct svc_server *srv, struct MHD_Connection *conn);

/* ---- route_status.c, route_models.c: GET routes, answered on the HTTP thread */
void svc_route_get(struct svc_request *req);

/* ---- route_analyze.c */

/* Checks Content-Type and query of POST /v1/analyze when the headers arrive. Returns false
 * with an error answer set. */
bool svc_analyze_prepare(struct svc_request *req);
/* The job: reads and analyses the body, sets the answer (on a worker thread). */
void svc_analyze_run(struct svc_request *req);
/* Prints the query options, content types and codings a route takes, for --list-routes
 * (svc_route_details_fn). */
void svc_route_details(enum svc_route route, FILE *file);

/* ---- route_models.c */
void svc_models_list(struct svc_request *req);
void svc_model_get(struct svc_request *req);
/* Checks POST /v1/models/{name}/decode when the headers arrive. */
bool svc_decode_prepare(struct svc_request *req);
/* The job: decodes the latents or grid of the JSON body, sets the answer (on a worker). */
void svc_decode_run(struct svc_request *req);

/* ---- openapi.c: the OpenAPI document embedded from service/openapi.json */
const char *svc_openapi_json(size_t *len);

#endif /* SVC_SERVER_H */
