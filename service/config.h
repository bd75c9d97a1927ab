/*
 * config.h - the service's configuration: defaults, ECGD_* environment variables and command-line
 * options, with one table describing all three (config.c), so that `--help`, `--print-config`
 * and the parser cannot drift apart.
 *
 * Threading: filled once on the main thread before the server starts; read-only afterwards.
 */
#ifndef SVC_CONFIG_H
#define SVC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ecg.h"

#define SVC_DEFAULT_PORT 8080u
#define SVC_DEFAULT_BIND "0.0.0.0"
#define SVC_DEFAULT_MODEL_DIR "models"
#define SVC_DEFAULT_MODEL "default"
#define SVC_DEFAULT_MAX_BODY_MB 256u
#define SVC_DEFAULT_TIMEOUT_S 30u
#define SVC_DEFAULT_QUEUE_DEPTH 64u
#define SVC_DEFAULT_DRAIN_S 25u
#define SVC_MAX_WORKERS 256u
#define SVC_DEFAULT_HEADER_TIMEOUT_S 10u
#define SVC_DEFAULT_MIN_UPLOAD_KIB_S 4u
#define SVC_DEFAULT_MIN_DOWNLOAD_KIB_S 4u
#define SVC_DEFAULT_MAX_CONNS_PER_IP 64u
#define SVC_DEFAULT_STORE_MB 1024u
#define SVC_DEFAULT_STORE_TTL_S 3600u
#define SVC_DEFAULT_ASYNC_MB 100u
#define SVC_DEFAULT_MAX_BATCH 64u
/* 100 us: a batch waits this long at most for the analyses still being read (CSV bodies take the
 * HTTP threads ~40 us to read on an H100 host); against 200 us, the 10-s CSV cells gained 4.5 %
 * and float32 1 % with 64 HTTP threads (bench/RESULTS.md, session 12) */
#define SVC_DEFAULT_BATCH_WINDOW_US 100u

struct svc_config {
    char bind[64];                 /* numeric IPv4 or IPv6 address to listen on */
    unsigned port;                 /* 0 = any free port (logged at start) */
    enum ecg_backend_kind backend;
    int device;                    /* CUDA device ordinal, -1 = every visible device */
    char model_dir[512];
    char model[512];               /* default model: a name in model_dir, a path, or "none" */
    unsigned workers;              /* analysis threads = engine worker contexts; default: the
                                    * CPUs this process may use (cpus.h) */
    char cpus_note[96];            /* how that default was found (logged) */
    unsigned io_threads;           /* libmicrohttpd thread pool size */
    size_t max_body_bytes;
    unsigned timeout_s;            /* idle connection timeout */
    unsigned queue_depth;          /* analyses allowed to wait beyond the busy workers */
    unsigned drain_s;              /* longest wait for in-flight requests at shutdown */
    char token[256];               /* bearer token for /v1/ routes; "" = none */
    int admin_port;                /* probes and metrics listener; -1 = none, 0 = any free port */
    unsigned header_timeout_s;     /* request line and headers must arrive within this */
    unsigned min_upload_kib_s;     /* slower bodies are cut (after header_timeout_s of grace) */
    unsigned min_download_kib_s;   /* answers read slower are cut (after the same grace) */
    unsigned send_buffer_kib;      /* SO_SNDBUF of the main port's connections; 0 = the kernel's */
    unsigned max_conns_per_ip;     /* connections one client address may hold; 0 = no limit */
    size_t memory_budget_bytes;    /* 0 = from the cgroup limit, else from physical memory */
    size_t store_bytes;            /* memory cap of the analyses kept for browsing */
    unsigned store_ttl_s;          /* a kept analysis unused this long is dropped */
    size_t async_min_bytes;        /* Prefer: respond-async is honoured from this body size */
    char cors_origin[1024];        /* allowed origins, comma-separated, or "*"; "" = none */
    unsigned max_batch;            /* analyses per GPU batch; 1 = no batching */
    unsigned batch_window_us;      /* how long a batch waits for more after its first one */
    unsigned batch_lanes;          /* batchers per GPU */
    unsigned batch_depth;          /* batches in flight per batcher */
};

enum svc_config_action {
    SVC_CONFIG_RUN = 0,     /* start the server */
    SVC_CONFIG_EXIT_OK,     /* --help or --print-config: done, exit 0 */
    SVC_CONFIG_EXIT_USAGE,  /* bad option or value: message printed, exit 2 */
    SVC_CONFIG_LIST_ROUTES, /* --list-routes: the caller prints the route table, exit 0 */
};

/*
 * Fills cfg from the defaults, then the environment, then argv (argv[0] is "serve"). Prints help,
 * the effective configuration or errors to out/errs. Never exits the process.
 */
enum svc_config_action svc_config_parse(struct svc_config *cfg, int argc, char **argv, FILE *out,
                                        FILE *errs);

/* Writes the configuration as one JSON object (token redacted) into out. */
void svc_config_write_json(const struct svc_config *cfg, struct ecg_buf *out);

#endif /* SVC_CONFIG_H */
