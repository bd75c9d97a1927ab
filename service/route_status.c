/*
 * route_status.c - GET routes about the server itself: liveness, readiness, info, metrics and the
 * OpenAPI document. All are cheap and answered on the HTTP thread.
 *
 * Liveness never depends on the model or the engine: it says the process serves HTTP.
 * Readiness turns true once the engine and the default model are loaded, and false again when
 * a shutdown starts, so that a load balancer stops sending work first.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "server.h"

static void answer_json(struct svc_request *req, unsigned status, cJSON *root)
{
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "the answer could not be built: out of memory");
        return;
    }
    struct ecg_buf body = {0};
    ecg_buf_puts(&body, text);
    ecg_buf_puts(&body, "\n");
    cJSON_free(text);
    svc_answer_body(req, status, &body, "application/json");
}

static void route_live(struct svc_request *req)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    cJSON_AddBoolToObject(root, "live", true);
    answer_json(req, MHD_HTTP_OK, root);
}

static void route_ready(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    bool ready = atomic_load(&srv->ready) && !atomic_load(&srv->draining);
    const char *reason = ready                              ? "ok"
                         : atomic_load(&srv->draining)      ? "shutting_down"
                                                            : "loading";
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", reason);
    cJSON_AddBoolToObject(root, "ready", ready);
    answer_json(req, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, root);
    if (!ready)
        req->retry_after_s = 1;
}

static void route_info(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    bool ready = atomic_load(&srv->ready);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "name", "ecgd");
    cJSON_AddStringToObject(root, "version", ECG_VERSION);
    cJSON_AddBoolToObject(root, "ready", ready);
    cJSON_AddStringToObject(root, "backend", ready ? srv->backend : "");
    cJSON_AddStringToObject(root, "device", ready ? srv->device : "");
    cJSON_AddStringToObject(root, "note", ready ? srv->note : "");
    char default_model[64] = "";
    if (ready)
        svc_registry_default_name(&srv->registry, default_model, sizeof default_model);
    cJSON_AddStringToObject(root, "default_model", default_model);
    cJSON_AddNumberToObject(root, "workers", srv->cfg.workers);
    cJSON_AddNumberToObject(root, "queue_depth", srv->cfg.queue_depth);
    cJSON_AddNumberToObject(root, "max_body_bytes", (double)srv->cfg.max_body_bytes);
    cJSON *build = cJSON_AddObjectToObject(root, "build");
    if (build) {
        cJSON_AddStringToObject(build, "compiler", __VERSION__);
        cJSON_AddStringToObject(build, "date", __DATE__ " " __TIME__);
#ifdef ECG_HAVE_CUDA
        cJSON_AddBoolToObject(build, "cuda", true);
#else
        cJSON_AddBoolToObject(build, "cuda", false);
#endif
        cJSON_AddStringToObject(build, "libmicrohttpd", MHD_get_version());
        cJSON_AddStringToObject(build, "cjson", cJSON_Version());
    }
    answer_json(req, MHD_HTTP_OK, root);
}

static void route_metrics(struct svc_request *req)
{
    struct svc_server *srv = req->srv;
    bool ready = atomic_load(&srv->ready);
    struct svc_metrics_gauges gauges = {
        .in_flight = atomic_load(&srv->in_flight),
        .queued = atomic_load(&srv->jobs.queued),
        .busy_workers = atomic_load(&srv->jobs.running),
        .workers = srv->cfg.workers,
        .body_reused = atomic_load(&srv->bodies.reused),
        .body_allocated = atomic_load(&srv->bodies.allocated),
        .body_idle_bytes = svc_body_pool_idle_bytes(&srv->bodies),
        .ready = ready && !atomic_load(&srv->draining),
        .log_suppressed = svc_log_suppressed(&srv->noise),
        .memory_budget_bytes = srv->memory.budget_bytes,
        .memory_reserved_bytes = atomic_load(&srv->memory.reserved_bytes),
        .memory_refused = atomic_load(&srv->memory.refused),
        .connections = svc_connections_count(srv),
        .backend = ready ? srv->backend : "",
        .device = ready ? srv->device : "",
    };
    struct ecg_buf body = {0};
    svc_metrics_render(&srv->metrics, &gauges, &body);
    svc_store_metrics(&srv->store, &body);
    svc_answer_body(req, MHD_HTTP_OK, &body, "text/plain; version=0.0.4; charset=utf-8");
}

static void route_openapi(struct svc_request *req)
{
    const struct ecg_buf *doc = &req->srv->openapi;
    struct ecg_buf body = {0};
    ecg_buf_append(&body, doc->data, doc->len);
    svc_answer_body(req, MHD_HTTP_OK, &body, "application/json");
}

void svc_route_get(struct svc_request *req)
{
    switch (req->route) {
    case SVC_ROUTE_HEALTHZ:
    case SVC_ROUTE_LIVE:
        route_live(req);
        return;
    case SVC_ROUTE_READYZ:
    case SVC_ROUTE_READY:
        route_ready(req);
        return;
    case SVC_ROUTE_INFO:
        route_info(req);
        return;
    case SVC_ROUTE_METRICS:
        route_metrics(req);
        return;
    case SVC_ROUTE_OPENAPI:
        route_openapi(req);
        return;
    case SVC_ROUTE_MODELS:
        svc_models_list(req);
        return;
    case SVC_ROUTE_MODEL:
        svc_model_get(req);
        return;
    case SVC_ROUTE_ANALYSIS:
    case SVC_ROUTE_ANALYSIS_SIGNAL:
    case SVC_ROUTE_ANALYSIS_BEAT:
        svc_analyses_get(req);
        return;
    case SVC_ROUTE_PAGE:
    case SVC_ROUTE_ASSET:
        svc_web_get(req);
        return;
    case SVC_ROUTE_ANALYZE:
    case SVC_ROUTE_ANALYSES:
    case SVC_ROUTE_DECODE:
    case SVC_ROUTE_RELOAD:
    case SVC_ROUTE_UNKNOWN:
    case SVC_ROUTE_COUNT:
        break;
    }
    svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                     "route %d has no GET handler", (int)req->route);
}
