/*
 * server.c - `ecgd serve`: startup, signals, the drain and shutdown.
 *
 * Startup order: parse the configuration, block the signals the server handles (every thread
 * started later inherits the mask, so only the main thread's sigwait() sees them), start the
 * worker pool and the listeners, and only then load the models and create the engine, so that
 * liveness answers during a slow load while readiness says "loading".
 *
 * Signals: SIGTERM and SIGINT stop the server (below). SIGHUP asks for a rescan of the model
 * directory (svc_server_reload); SIGUSR1 and SIGUSR2 are logged and ignored. None of them ever
 * kills the process; SIGPIPE is ignored (a client gone mid-answer is an error on that socket).
 *
 * Shutdown on SIGTERM/SIGINT: readiness turns false, the main listening socket closes (the admin
 * listener keeps answering probes), requests already accepted run to completion for up to
 * --drain-s. When the drain time is over: bodies still arriving are answered 503 on their socket
 * (connections.c), queued jobs are answered 503, running ones finish; then every computed answer
 * is sent (the wait below) before the listeners stop, and the process exits 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server.h"
#include "service.h"

/* Idle body buffers kept for reuse: twice the body limit, at most this much. */
#define SVC_BODY_POOL_MAX_BYTES ((size_t)1 << 30)
/* After the drain: the longest wait for answers already computed (and 503s) to be sent. */
#define SVC_SEND_GRACE_S 5.0

/* Waits until no request is in flight or `seconds` are over; true when none is left. */
static bool wait_idle(struct svc_server *srv, double seconds)
{
    double deadline = svc_now_s() + seconds;
    while (atomic_load(&srv->in_flight) > 0) {
        if (svc_now_s() >= deadline)
            return false;
        struct timespec pause = {0, 10 * 1000 * 1000};
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

/*
 * SIGHUP: hot reload of the model directory (svc_registry_reload, as POST /v1/models/reload
 * does): requests in flight keep the models they hold; new ones see the new list. Logged either
 * way ("models_reloaded", or "reload_failed" with nothing changed).
 */
static void svc_server_reload(struct svc_server *srv)
{
    struct ecg_error err = {0};
    if (!atomic_load(&srv->ready)) {
        svc_log("warn", "reload_failed", "SIGHUP before the models were loaded: ignored");
        return;
    }
    if (svc_registry_reload(&srv->registry, NULL, &err) != ECG_OK)
        svc_log("error", "reload_failed", "SIGHUP: %s (%s)", err.message, err.code);
}

/* Waits for SIGTERM or SIGINT, handling the other signals in the set meanwhile. */
static int wait_stop_signal(struct svc_server *srv, const sigset_t *signals)
{
    for (;;) {
        int signal_number = 0;
        if (sigwait(signals, &signal_number) != 0)
            continue;
        switch (signal_number) {
        case SIGTERM:
        case SIGINT:
            return signal_number;
        case SIGHUP:
            svc_server_reload(srv);
            break;
        default:
            svc_log("info", "signal", "%s ignored (in flight: %ld, connections: %ld)",
                    signal_number == SIGUSR1 ? "SIGUSR1" : "SIGUSR2",
                    atomic_load(&srv->in_flight), svc_connections_count(srv));
            break;
        }
    }
}

struct svc_server *svc_server_create(int argc, char **argv, int *exit_code)
{
    struct svc_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        fprintf(stderr, "ecgd serve: out of memory\n");
        *exit_code = 1;
        return NULL;
    }
    switch (svc_config_parse(&srv->cfg, argc, argv, stdout, stderr)) {
    case SVC_CONFIG_RUN:
        break;
    case SVC_CONFIG_EXIT_OK:
        free(srv);
        *exit_code = 0;
        return NULL;
    case SVC_CONFIG_LIST_ROUTES:
        svc_routes_print(stdout, svc_route_details);
        free(srv);
        *exit_code = 0;
        return NULL;
    case SVC_CONFIG_EXIT_USAGE:
        free(srv);
        *exit_code = 2;
        return NULL;
    }
    struct ecg_error err = {0};
    if (svc_openapi_build(&srv->openapi, &err) != ECG_OK) {
        fprintf(stderr, "ecgd serve: %s\n", err.message);
        ecg_buf_fini(&srv->openapi);
        free(srv);
        *exit_code = 1;
        return NULL;
    }
    svc_metrics_init(&srv->metrics);
    svc_log_limiter_init(&srv->noise);
    size_t pool_bytes = srv->cfg.max_body_bytes > SVC_BODY_POOL_MAX_BYTES / 2
                            ? SVC_BODY_POOL_MAX_BYTES
                            : 2 * srv->cfg.max_body_bytes;
    svc_body_pool_init(&srv->bodies, pool_bytes);
    svc_memory_init(&srv->memory, srv->cfg.memory_budget_bytes, &srv->bodies);
    svc_registry_init(&srv->registry, &srv->cfg);
    svc_store_init(&srv->store, srv->cfg.store_bytes, srv->cfg.store_ttl_s);
    atomic_init(&srv->ready, false);
    atomic_init(&srv->draining, false);
    atomic_init(&srv->closing, false);
    atomic_init(&srv->in_flight, 0);
    atomic_init(&srv->admitted, 0);
    atomic_init(&srv->batched, 0);
    atomic_init(&srv->next_id, 1);
    id_prefix_init(srv);
    return srv;
}

void svc_server_destroy(struct svc_server *srv)
{
    if (!srv)
        return;
    svc_body_pool_fini(&srv->bodies); /* before the engine that allocated them goes */
    svc_store_fini(&srv->store);      /* its traces live in the engines' memory */
    svc_registry_fini(&srv->registry);
    svc_log_limiter_fini(&srv->noise);
    svc_metrics_fini(&srv->metrics);
    ecg_buf_fini(&srv->openapi);
    free(srv);
}

int ecg_service_main(int argc, char **argv)
{
    struct ecg_error err = {0};
    int rc = 1;
    bool jobs_started = false, listening = false;
    struct svc_server *srv = svc_server_create(argc, argv, &rc);
    if (!srv)
        return rc;

    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    sigaddset(&signals, SIGUSR1);
    sigaddset(&signals, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (svc_jobs_start(&srv->jobs, srv->cfg.workers, &err) != ECG_OK)
        goto out;
    jobs_started = true;
    if (svc_listeners_start(srv, &err) != ECG_OK)
        goto out;
    listening = true;

    struct ecg_buf line = {0};
    svc_log_begin(&line, "info", "listening");
    ecg_buf_puts(&line, ",\"bind\":");
    svc_json_string(&line, srv->cfg.bind);
    ecg_buf_printf(&line, ",\"port\":%u,\"admin_port\":%u,\"memory_budget_bytes\":%zu,"
                          "\"memory_budget_from\":\"%s\",\"version\":\"%s\",\"config\":",
                   svc_listener_port(srv, false), svc_listener_port(srv, true),
                   srv->memory.budget_bytes, srv->memory.budget_source, ECG_VERSION);
    svc_config_write_json(&srv->cfg, &line);
    svc_log_end(&line);

    double load_start = svc_now_s();
    if (svc_registry_load(&srv->registry, &err) != ECG_OK)
        goto out;
    struct svc_model *first = svc_registry_acquire(&srv->registry, NULL);
    struct ecg_engine *engine = first->engine;
    char default_name[64];
    snprintf(default_name, sizeof default_name, "%s", first->name);
    svc_model_release(first); /* the registry keeps its first default until the end */
    /* Bodies from now on in memory the backend reads fastest (no body exists before ready). */
    svc_body_pool_set_engine(&srv->bodies, engine);
    snprintf(srv->backend, sizeof srv->backend, "%s", ecg_engine_backend(engine));
    snprintf(srv->device, sizeof srv->device, "%s", ecg_engine_device(engine));
    snprintf(srv->note, sizeof srv->note, "%s", ecg_engine_note(engine));
    atomic_store(&srv->ready, true);
    svc_log("info", "ready", "default model %s, %zu model(s), backend %s, loaded in %.3f s",
            default_name, srv->registry.n_models, srv->backend, svc_now_s() - load_start);

    int signal_number = wait_stop_signal(srv, &signals);
    svc_log("info", "shutdown", "%s: draining %ld in-flight request(s) for up to %u s",
            signal_number == SIGTERM ? "SIGTERM" : "SIGINT", atomic_load(&srv->in_flight),
            srv->cfg.drain_s);
    rc = 0;

out:
    if (rc != 0)
        svc_log("error", "startup_failed", "%s (%s)", err.message, err.code);
    atomic_store(&srv->draining, true);
    bool drained = true;
    if (listening) {
        svc_listeners_quiesce(srv);
        if (rc == 0)
            drained = wait_idle(srv, srv->cfg.drain_s);
        /* Drain over: bodies still arriving get 503 on their socket, idle connections close. */
        atomic_store(&srv->closing, true);
        svc_listeners_closing(srv);
    }
    /* Queued jobs left after the drain time are answered 503; running ones finish. Every
     * suspended connection is resumed before the listeners stop. */
    if (jobs_started)
        svc_jobs_stop(&srv->jobs, !drained);
    /* Every answer computed or decided (503s included) goes out before the sockets close. */
    bool sent = !listening || wait_idle(srv, SVC_SEND_GRACE_S);
    /* A batch resumes the connections of its analyses when it ends (it always does, within
     * milliseconds): none may be left to resume on a stopped listener. */
    while (atomic_load(&srv->batched) > 0)
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 1000 * 1000}, NULL);
    if (listening)
        svc_listeners_stop(srv);
    svc_server_destroy(srv);
    if (rc == 0)
        svc_log("info", "stopped", "%s", drained ? "all requests finished"
                                         : sent ? "drain time over: queued analyses and bodies "
                                                  "still arriving were answered 503"
                                                : "drain time over: some connections were cut");
    return rc;
}
