/*
 * metrics.h - the service's Prometheus metrics, rendered as text at GET /metrics.
 *
 * Base units (seconds, bytes), prefix ecgd_. Counters and the duration histogram live in one
 * struct svc_metrics guarded by its own mutex (updates are a handful of additions per request);
 * gauges that change on every request (in flight, queued) are atomics owned by the server and
 * passed in when rendering.
 *
 * Threading: every function may be called from any thread.
 */
#ifndef SVC_METRICS_H
#define SVC_METRICS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ecg.h"
#include "routes.h"

#define SVC_N_DURATION_BUCKETS 16
#define SVC_N_STATUS_SLOTS 16
#define SVC_N_BATCH_SIZE_BUCKETS 9   /* 1 2 4 ... 128, +Inf */
#define SVC_N_BATCH_DELAY_BUCKETS 10 /* 50 us .. 25 ms, +Inf */

/* Pipeline stages; their sum is the analysis time less bookkeeping. The whole analysis is a
 * metric of its own (ecgd_analysis_seconds), so that a sum over stages counts nothing twice. */
enum svc_stage {
    SVC_STAGE_READ = 0,
    SVC_STAGE_RESAMPLE,
    SVC_STAGE_FILTER,
    SVC_STAGE_DETECT,
    SVC_STAGE_EMBED,
    SVC_STAGE_ENCODE,
    SVC_STAGE_QUALITY,
    SVC_STAGE_COUNT
};

/* Connection-level events: what hostile or broken clients cause (ecgd_connection_events_total). */
enum svc_conn_event {
    SVC_CONN_EVENT_HEADER_TIMEOUT = 0,   /* headers not complete by --header-timeout-s: 408 */
    SVC_CONN_EVENT_SLOW_UPLOAD,          /* body slower than --min-upload-kib-s: 408 */
    SVC_CONN_EVENT_SLOW_DOWNLOAD,        /* answer read slower than --min-download-kib-s: cut */
    SVC_CONN_EVENT_CLIENT_GONE,          /* client closed mid-body: closed at once */
    SVC_CONN_EVENT_SHUTDOWN,             /* cut when the drain ended */
    SVC_CONN_EVENT_INCOMPLETE_HEADERS,   /* a request line, then the connection ended */
    SVC_CONN_EVENT_LIBMICROHTTPD,        /* libmicrohttpd reported a connection error */
    SVC_CONN_EVENT_COUNT
};

/* Why a request ended without an answer (ecgd_http_requests_aborted_total{reason}). */
enum svc_abort {
    SVC_ABORT_CLIENT = 0,   /* the client closed the connection */
    SVC_ABORT_TIMEOUT,      /* idle past --timeout-s */
    SVC_ABORT_READ_ERROR,   /* the socket failed while reading */
    SVC_ABORT_ERROR,        /* libmicrohttpd gave up on the connection */
    SVC_ABORT_SHUTDOWN,     /* the server stopped */
    SVC_ABORT_COUNT
};

/* Analyses are counted per model; models past this many share the label "other". */
#define SVC_METRIC_MODELS 40

struct svc_model_counters {
    char name[64];
    uint64_t analyses, samples, beats, outliers;
    double seconds;          /* whole analyses (engine time) */
};

struct svc_counters {
    uint64_t requests[SVC_ROUTE_COUNT][SVC_N_STATUS_SLOTS];
    uint64_t duration_buckets[SVC_ROUTE_COUNT][SVC_N_DURATION_BUCKETS];
    double duration_sum[SVC_ROUTE_COUNT];
    uint64_t duration_count[SVC_ROUTE_COUNT];
    uint64_t aborted[SVC_ROUTE_COUNT][SVC_ABORT_COUNT];
    double stage_sum_s[SVC_STAGE_COUNT];
    uint64_t analyses;
    struct svc_model_counters models[SVC_METRIC_MODELS + 1]; /* the last: "other" */
    size_t n_models;
    uint64_t bytes_received;
    uint64_t bytes_sent;
    uint64_t uploads_streamed; /* analyses that read a body streamed to the device */
    uint64_t inline_batched;   /* analyses read and batched by an HTTP thread, no worker */
    /* batched analyses (ecg_timing.batch_size > 0): the size of the batch each ran in, and
     * how long it waited for its batch to start */
    uint64_t batch_size_buckets[SVC_N_BATCH_SIZE_BUCKETS];
    uint64_t batch_size_sum;
    uint64_t batch_delay_buckets[SVC_N_BATCH_DELAY_BUCKETS];
    double batch_delay_sum_s;
    uint64_t batched;
};

struct svc_metrics {
    pthread_mutex_t mutex;
    struct svc_counters c;
    atomic_uint_fast64_t conn_events[SVC_CONN_EVENT_COUNT]; /* lock-free: the reaper counts */
    double start_time_s;     /* Unix time the process started (process_start_time_seconds) */
};

/* Values read at render time from the server object. */
struct svc_metrics_gauges {
    long in_flight;          /* HTTP requests being received, processed or answered */
    long queued;             /* analysis jobs waiting for a worker */
    long busy_workers;       /* analysis jobs running */
    unsigned workers;
    bool ready;
    uint64_t body_reused;    /* request-body buffers served from the pool */
    uint64_t body_allocated; /* request-body buffers newly allocated */
    size_t body_idle_bytes;  /* memory of idle body buffers kept for reuse */
    uint64_t log_suppressed;       /* noise lines dropped by the log rate limit */
    size_t memory_budget_bytes;
    size_t memory_reserved_bytes;
    uint64_t memory_refused;       /* reservations refused (503 memory_busy) */
    long connections;              /* connections open on the listeners */
    const char *backend;     /* "" until the engine exists */
    const char *device;
};

void svc_metrics_init(struct svc_metrics *metrics);
void svc_metrics_fini(struct svc_metrics *metrics);

/* Records one answered request (ecgd_http_requests_total{route,code}, the duration histogram,
 * bytes). */
void svc_metrics_request(struct svc_metrics *metrics, enum svc_route route, unsigned status,
                         double duration_s, uint64_t bytes_in, uint64_t bytes_out);

/* Records one request that ended without an answer: ecgd_http_requests_aborted_total. */
void svc_metrics_aborted(struct svc_metrics *metrics, enum svc_route route, enum svc_abort why,
                         uint64_t bytes_in);

/* Records one finished analysis with the model that ran it ("none" without): stage timings,
 * the whole analysis time and beat counts. */
void svc_metrics_analysis(struct svc_metrics *metrics, const char *model,
                          const struct ecg_timing *timing, uint64_t samples, uint64_t beats,
                          uint64_t outliers);

/* Appends the process_* metrics of the Prometheus conventions: CPU seconds, resident and
 * virtual memory, open and maximum file descriptors, start time (metrics_process.c). */
void svc_metrics_render_process(double start_time_s, struct ecg_buf *out);

/* Records one analysis that parsed its body from the copy streamed to the device while the body
 * arrived (ecg_upload_used_device). */
void svc_metrics_upload_streamed(struct svc_metrics *metrics);

/* Records one analysis read and queued on a batch by an HTTP thread, without a worker
 * (svc_analyze_start), once collected. */
void svc_metrics_inline_batched(struct svc_metrics *metrics);

/* Counts one connection-level event. */
void svc_metrics_conn_event(struct svc_metrics *metrics, enum svc_conn_event event);

/* Renders the Prometheus text exposition format (version 0.0.4) into out. */
void svc_metrics_render(struct svc_metrics *metrics, const struct svc_metrics_gauges *gauges,
                        struct ecg_buf *out);

#endif /* SVC_METRICS_H */
