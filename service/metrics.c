/*
 * metrics.c - Prometheus counters, the request duration histogram and the text rendering.
 */
#include <string.h>
#include <time.h>

#include "metrics.h"

/* Upper bounds (seconds) of the request duration histogram; the last bucket is +Inf. */
static const double duration_bounds[SVC_N_DURATION_BUCKETS - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
};

/* HTTP statuses with a slot of their own; anything else counts in the last slot ("other"). */
static const unsigned status_slots[SVC_N_STATUS_SLOTS - 1] = {
    200, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429, 500, 503, 204,
};

static const char *const conn_event_names[SVC_CONN_EVENT_COUNT] = {
    "header_timeout", "slow_upload", "slow_download", "client_gone", "shutdown", "incomplete_headers",
    "libmicrohttpd",
};

static const double batch_size_bounds[SVC_N_BATCH_SIZE_BUCKETS - 1] = {
    1, 2, 4, 8, 16, 32, 64, 128,
};
static const double batch_delay_bounds[SVC_N_BATCH_DELAY_BUCKETS - 1] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
};

/* The bucket of value among bounds (n - 1 upper bounds, then +Inf). */
static size_t bucket_of(const double *bounds, size_t n, double value)
{
    size_t b = 0;
    while (b < n - 1 && value > bounds[b])
        b++;
    return b;
}

static const char *const stage_names[SVC_STAGE_COUNT] = {
    "read", "resample", "filter", "detect", "embed", "encode", "quality",
};

static const char *const abort_names[SVC_ABORT_COUNT] = {
    "client_abort", "timeout", "read_error", "error", "shutdown",
};

void svc_metrics_init(struct svc_metrics *metrics)
{
    memset(metrics, 0, sizeof *metrics);
    pthread_mutex_init(&metrics->mutex, NULL);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    metrics->start_time_s = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

void svc_metrics_conn_event(struct svc_metrics *metrics, enum svc_conn_event event)
{
    if ((unsigned)event < SVC_CONN_EVENT_COUNT)
        atomic_fetch_add(&metrics->conn_events[event], 1);
}

void svc_metrics_fini(struct svc_metrics *metrics)
{
    if (metrics)
        pthread_mutex_destroy(&metrics->mutex);
}

static size_t status_slot(unsigned status)
{
    for (size_t i = 0; i < SVC_N_STATUS_SLOTS - 1; i++)
        if (status_slots[i] == status)
            return i;
    return SVC_N_STATUS_SLOTS - 1;
}

void svc_metrics_request(struct svc_metrics *metrics, enum svc_route route, unsigned status,
                         double duration_s, uint64_t bytes_in, uint64_t bytes_out)
{
    if ((unsigned)route >= SVC_ROUTE_COUNT)
        route = SVC_ROUTE_UNKNOWN;
    size_t bucket = 0;
    while (bucket < SVC_N_DURATION_BUCKETS - 1 && duration_s > duration_bounds[bucket])
        bucket++;
    pthread_mutex_lock(&metrics->mutex);
    metrics->c.requests[route][status_slot(status)]++;
    metrics->c.duration_buckets[route][bucket]++;
    metrics->c.duration_sum[route] += duration_s;
    metrics->c.duration_count[route]++;
    metrics->c.bytes_received += bytes_in;
    metrics->c.bytes_sent += bytes_out;
    pthread_mutex_unlock(&metrics->mutex);
}

void svc_metrics_aborted(struct svc_metrics *metrics, enum svc_route route, enum svc_abort why,
                         uint64_t bytes_in)
{
    if ((unsigned)route >= SVC_ROUTE_COUNT)
        route = SVC_ROUTE_UNKNOWN;
    if ((unsigned)why >= SVC_ABORT_COUNT)
        why = SVC_ABORT_ERROR;
    pthread_mutex_lock(&metrics->mutex);
    metrics->c.aborted[route][why]++;
    metrics->c.bytes_received += bytes_in;
    pthread_mutex_unlock(&metrics->mutex);
}

/* The counters of a model, added on first use (under the mutex). */
static struct svc_model_counters *model_counters(struct svc_counters *c, const char *model)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].name, model))
            return &c->models[i];
    struct svc_model_counters *slot = &c->models[SVC_METRIC_MODELS];
    if (c->n_models < SVC_METRIC_MODELS)
        slot = &c->models[c->n_models++];
    if (!slot->name[0] || slot == &c->models[SVC_METRIC_MODELS])
        snprintf(slot->name, sizeof slot->name, "%s",
                 slot == &c->models[SVC_METRIC_MODELS] ? "other" : model);
    return slot;
}

void svc_metrics_analysis(struct svc_metrics *metrics, const char *model,
                          const struct ecg_timing *timing, uint64_t samples, uint64_t beats,
                          uint64_t outliers)
{
    const double stage_ms[SVC_STAGE_COUNT] = {
        timing->read_ms,   timing->resample_ms, timing->filter_ms, timing->detect_ms,
        timing->embed_ms,  timing->encode_ms,   timing->quality_ms,
    };
    pthread_mutex_lock(&metrics->mutex);
    for (size_t i = 0; i < SVC_STAGE_COUNT; i++)
        if (stage_ms[i] > 0)
            metrics->c.stage_sum_s[i] += stage_ms[i] / 1000.0;
    metrics->c.analyses++;
    struct svc_model_counters *m = model_counters(&metrics->c, model ? model : "none");
    m->analyses++;
    m->samples += samples;
    m->beats += beats;
    m->outliers += outliers;
    if (timing->total_ms > 0)
        m->seconds += timing->total_ms / 1000.0;
    if (timing->batch_size > 0) {
        const double delay_s = timing->queue_ms / 1000.0;
        metrics->c.batch_size_buckets[bucket_of(batch_size_bounds, SVC_N_BATCH_SIZE_BUCKETS,
                                                timing->batch_size)]++;
        metrics->c.batch_size_sum += timing->batch_size;
        metrics->c.batch_delay_buckets[bucket_of(batch_delay_bounds, SVC_N_BATCH_DELAY_BUCKETS,
                                                 delay_s)]++;
        metrics->c.batch_delay_sum_s += delay_s;
        metrics->c.batched++;
    }
    pthread_mutex_unlock(&metrics->mutex);
}

void svc_metrics_upload_streamed(struct svc_metrics *metrics)
{
    pthread_mutex_lock(&metrics->mutex);
    metrics->c.uploads_streamed++;
    pthread_mutex_unlock(&metrics->mutex);
}

void svc_metrics_inline_batched(struct svc_metrics *metrics)
{
    pthread_mutex_lock(&metrics->mutex);
    metrics->c.inline_batched++;
    pthread_mutex_unlock(&metrics->mutex);
}

/* Appends a label value with the escapes the exposition format requires. */
static void put_label(struct ecg_buf *out, const char *value)
{
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            ecg_buf_printf(out, "\\%c", *p);
        else if (*p == '\n')
            ecg_buf_puts(out, "\\n");
        else
            ecg_buf_append(out, p, 1);
    }
}

static void render_requests(const struct svc_counters *m, struct ecg_buf *out)
{
    ecg_buf_puts(out, "# HELP ecgd_http_requests_total HTTP requests answered, by route and "
                      "status.\n"
                      "# TYPE ecgd_http_requests_total counter\n");
    for (int route = 0; route < SVC_ROUTE_COUNT; route++)
        for (size_t slot = 0; slot < SVC_N_STATUS_SLOTS; slot++) {
            if (!m->requests[route][slot])
                continue;
            char code[16];
            if (slot < SVC_N_STATUS_SLOTS - 1)
                snprintf(code, sizeof code, "%u", status_slots[slot]);
            else
                snprintf(code, sizeof code, "other");
            ecg_buf_printf(out, "ecgd_http_requests_total{route=\"%s\",code=\"%s\"} %llu\n",
                           svc_route_def((enum svc_route)route)->pattern, code,
                           (unsigned long long)m->requests[route][slot]);
        }

    ecg_buf_puts(out, "# HELP ecgd_http_request_duration_seconds Time from the request's "
                      "headers to the end of its answer.\n"
                      "# TYPE ecgd_http_request_duration_seconds histogram\n");
    for (int route = 0; route < SVC_ROUTE_COUNT; route++) {
        if (!m->duration_count[route])
            continue;
        const char *label = svc_route_def((enum svc_route)route)->pattern;
        uint64_t cumulative = 0;
        for (size_t b = 0; b < SVC_N_DURATION_BUCKETS; b++) {
            cumulative += m->duration_buckets[route][b];
            if (b < SVC_N_DURATION_BUCKETS - 1)
                ecg_buf_printf(out,
                               "ecgd_http_request_duration_seconds_bucket{route=\"%s\","
                               "le=\"%g\"} %llu\n",
                               label, duration_bounds[b], (unsigned long long)cumulative);
            else
                ecg_buf_printf(out,
                               "ecgd_http_request_duration_seconds_bucket{route=\"%s\","
                               "le=\"+Inf\"} %llu\n",
                               label, (unsigned long long)cumulative);
        }
        ecg_buf_printf(out, "ecgd_http_request_duration_seconds_sum{route=\"%s\"} %.9g\n", label,
                       m->duration_sum[route]);
        ecg_buf_printf(out, "ecgd_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
                       label, (unsigned long long)m->duration_count[route]);
    }

    ecg_buf_puts(out, "# HELP ecgd_http_requests_aborted_total HTTP requests that ended without "
                      "an answer, by route and reason.\n"
                      "# TYPE ecgd_http_requests_aborted_total counter\n");
    for (int route = 0; route < SVC_ROUTE_COUNT; route++)
        for (int why = 0; why < SVC_ABORT_COUNT; why++)
            if (m->aborted[route][why])
                ecg_buf_printf(out,
                               "ecgd_http_requests_aborted_total{route=\"%s\",reason=\"%s\"} "
                               "%llu\n",
                               svc_route_def((enum svc_route)route)->pattern, abort_names[why],
                               (unsigned long long)m->aborted[route][why]);
}

/* Per-model analysis counters: one metric each, labelled model. */
static void render_models(const struct svc_counters *m, struct ecg_buf *out)
{
    static const struct {
        const char *name, *type, *help;
    } metrics[] = {
        {"ecgd_analyses_total", "counter", "Recordings analysed successfully, by model."},
        {"ecgd_samples_analysed_total", "counter", "Input samples analysed, by model."},
        {"ecgd_beats_analysed_total", "counter", "Beats detected in analysed recordings."},
        {"ecgd_outlier_beats_total", "counter", "Beats scored above the model's threshold."},
        {"ecgd_analysis_seconds_total", "counter",
         "Engine time of whole analyses, by model (the stages of ecgd_engine_stage_seconds, "
         "plus bookkeeping)."},
    };
    for (size_t k = 0; k < sizeof metrics / sizeof metrics[0]; k++) {
        ecg_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", metrics[k].name, metrics[k].help,
                       metrics[k].name, metrics[k].type);
        for (size_t i = 0; i <= SVC_METRIC_MODELS; i++) {
            const struct svc_model_counters *c = &m->models[i];
            if (!c->analyses)
                continue;
            ecg_buf_printf(out, "%s{model=\"", metrics[k].name);
            put_label(out, c->name);
            if (k == 4)
                ecg_buf_printf(out, "\"} %.9g\n", c->seconds);
            else
                ecg_buf_printf(out, "\"} %llu\n",
                               (unsigned long long)(k == 0   ? c->analyses
                                                    : k == 1 ? c->samples
                                                    : k == 2 ? c->beats
                                                             : c->outliers));
        }
    }
}

/* One histogram: counts per bucket (cumulated here), sum and count. */
static void render_histogram(struct ecg_buf *out, const char *name, const char *help,
                             const double *bounds, const uint64_t *buckets, size_t n, double sum,
                             uint64_t count)
{
    uint64_t cumulative = 0;
    ecg_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t b = 0; b < n; b++) {
        cumulative += buckets[b];
        if (b < n - 1)
            ecg_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[b],
                           (unsigned long long)cumulative);
        else
            ecg_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                           (unsigned long long)cumulative);
    }
    ecg_buf_printf(out, "%s_sum %.9g\n%s_count %llu\n", name, sum, name,
                   (unsigned long long)count);
}

void svc_metrics_render(struct svc_metrics *metrics, const struct svc_metrics_gauges *gauges,
                        struct ecg_buf *out)
{
    struct svc_counters m;
    pthread_mutex_lock(&metrics->mutex);
    m = metrics->c; /* a consistent snapshot; rendering happens outside the lock */
    pthread_mutex_unlock(&metrics->mutex);

    render_requests(&m, out);
    render_models(&m, out);

    ecg_buf_puts(out, "# HELP ecgd_engine_stage_seconds Engine time per pipeline stage, summed "
                      "over analyses.\n"
                      "# TYPE ecgd_engine_stage_seconds summary\n");
    for (size_t i = 0; i < SVC_STAGE_COUNT; i++) {
        ecg_buf_printf(out, "ecgd_engine_stage_seconds_sum{stage=\"%s\"} %.9g\n",
                       stage_names[i], m.stage_sum_s[i]);
        ecg_buf_printf(out, "ecgd_engine_stage_seconds_count{stage=\"%s\"} %llu\n",
                       stage_names[i], (unsigned long long)m.analyses);
    }
    render_histogram(out, "ecgd_batch_size",
                     "Batched analyses (--max-batch), by the number of analyses in their batch.",
                     batch_size_bounds, m.batch_size_buckets, SVC_N_BATCH_SIZE_BUCKETS,
                     (double)m.batch_size_sum, m.batched);
    render_histogram(out, "ecgd_batch_queue_delay_seconds",
                     "Batched analyses, by the time they waited for their batch to start.",
                     batch_delay_bounds, m.batch_delay_buckets, SVC_N_BATCH_DELAY_BUCKETS,
                     m.batch_delay_sum_s, m.batched);
    ecg_buf_printf(out,
                   "# HELP ecgd_http_received_bytes_total Request body bytes received.\n"
                   "# TYPE ecgd_http_received_bytes_total counter\n"
                   "ecgd_http_received_bytes_total %llu\n"
                   "# HELP ecgd_http_sent_bytes_total Response body bytes sent.\n"
                   "# TYPE ecgd_http_sent_bytes_total counter\n"
                   "ecgd_http_sent_bytes_total %llu\n"
                   "# HELP ecgd_uploads_streamed_total Analyses that parsed a request body copied "
                   "to the device while it arrived.\n"
                   "# TYPE ecgd_uploads_streamed_total counter\n"
                   "ecgd_uploads_streamed_total %llu\n"
                   "# HELP ecgd_analyses_inline_total Analyses whose body the HTTP thread read "
                   "and queued on a batch itself, without a worker.\n"
                   "# TYPE ecgd_analyses_inline_total counter\n"
                   "ecgd_analyses_inline_total %llu\n",
                   (unsigned long long)m.bytes_received, (unsigned long long)m.bytes_sent,
                   (unsigned long long)m.uploads_streamed, (unsigned long long)m.inline_batched);
    ecg_buf_printf(out,
                   "# HELP ecgd_http_requests_in_flight HTTP requests being received, processed "
                   "or answered.\n"
                   "# TYPE ecgd_http_requests_in_flight gauge\n"
                   "ecgd_http_requests_in_flight %ld\n"
                   "# HELP ecgd_analysis_queued Analyses waiting for a worker.\n"
                   "# TYPE ecgd_analysis_queued gauge\n"
                   "ecgd_analysis_queued %ld\n"
                   "# HELP ecgd_analysis_running Analyses running on a worker.\n"
                   "# TYPE ecgd_analysis_running gauge\n"
                   "ecgd_analysis_running %ld\n"
                   "# HELP ecgd_workers Analysis workers (engine contexts).\n"
                   "# TYPE ecgd_workers gauge\n"
                   "ecgd_workers %u\n"
                   "# HELP ecgd_ready 1 when the engine and the default model are loaded.\n"
                   "# TYPE ecgd_ready gauge\n"
                   "ecgd_ready %d\n",
                   gauges->in_flight, gauges->queued, gauges->busy_workers, gauges->workers,
                   gauges->ready ? 1 : 0);
    ecg_buf_printf(out,
                   "# HELP ecgd_body_buffers_total Request-body buffers handed out, reused from "
                   "the pool or newly allocated.\n"
                   "# TYPE ecgd_body_buffers_total counter\n"
                   "ecgd_body_buffers_total{source=\"reused\"} %llu\n"
                   "ecgd_body_buffers_total{source=\"allocated\"} %llu\n"
                   "# HELP ecgd_body_pool_idle_bytes Memory of idle request-body buffers kept for "
                   "reuse.\n"
                   "# TYPE ecgd_body_pool_idle_bytes gauge\n"
                   "ecgd_body_pool_idle_bytes %zu\n",
                   (unsigned long long)gauges->body_reused,
                   (unsigned long long)gauges->body_allocated, gauges->body_idle_bytes);
    ecg_buf_puts(out, "# HELP ecgd_connection_events_total Connections cut or ended by what "
                      "clients did: deadlines, slow or abandoned uploads, shutdown, errors.\n"
                      "# TYPE ecgd_connection_events_total counter\n");
    for (size_t i = 0; i < SVC_CONN_EVENT_COUNT; i++)
        ecg_buf_printf(out, "ecgd_connection_events_total{event=\"%s\"} %llu\n",
                       conn_event_names[i],
                       (unsigned long long)atomic_load(&metrics->conn_events[i]));
    ecg_buf_printf(out,
                   "# HELP ecgd_log_lines_suppressed_total Connection-level log lines dropped by "
                   "the log rate limit.\n"
                   "# TYPE ecgd_log_lines_suppressed_total counter\n"
                   "ecgd_log_lines_suppressed_total %llu\n"
                   "# HELP ecgd_connections Connections open on the listeners.\n"
                   "# TYPE ecgd_connections gauge\n"
                   "ecgd_connections %ld\n"
                   "# HELP ecgd_memory_budget_bytes Memory the requests may reserve together.\n"
                   "# TYPE ecgd_memory_budget_bytes gauge\n"
                   "ecgd_memory_budget_bytes %zu\n"
                   "# HELP ecgd_memory_reserved_bytes Memory reserved by requests now.\n"
                   "# TYPE ecgd_memory_reserved_bytes gauge\n"
                   "ecgd_memory_reserved_bytes %zu\n"
                   "# HELP ecgd_memory_refused_total Requests refused (503) because their worst "
                   "case did not fit the memory budget.\n"
                   "# TYPE ecgd_memory_refused_total counter\n"
                   "ecgd_memory_refused_total %llu\n",
                   (unsigned long long)gauges->log_suppressed, gauges->connections,
                   gauges->memory_budget_bytes, gauges->memory_reserved_bytes,
                   (unsigned long long)gauges->memory_refused);
    ecg_buf_puts(out, "# HELP ecgd_build_info Version, backend and device of this server.\n"
                      "# TYPE ecgd_build_info gauge\n"
                      "ecgd_build_info{version=\"" ECG_VERSION "\",backend=\"");
    put_label(out, gauges->backend);
    ecg_buf_puts(out, "\",device=\"");
    put_label(out, gauges->device);
    ecg_buf_puts(out, "\"} 1\n");
    svc_metrics_render_process(metrics->start_time_s, out);
}
