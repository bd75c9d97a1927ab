/*
 * config.c - defaults, ECGD_* environment variables and command-line options of `ecgd serve`.
 *
 * One table lists every setting with its flag, its variable, its bounds and its help line. The
 * environment is applied first and the command line second, so a flag wins over its variable.
 * Every value is checked completely (no trailing garbage, no silent wrap-around).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "cpus.h"

enum opt_kind { OPT_STR, OPT_UINT, OPT_INT, OPT_BACKEND, OPT_MB };

struct opt_def {
    const char *flag;     /* "--port" */
    const char *env;      /* "ECGD_PORT" */
    enum opt_kind kind;
    size_t offset;        /* of the field in struct svc_config */
    size_t size;          /* of a string field */
    long long min, max;   /* bounds of a number */
    const char *metavar;
    const char *help;
};

#define FIELD(name) offsetof(struct svc_config, name), sizeof(((struct svc_config *)0)->name)

static const struct opt_def opts[] = {
    {"--port", "ECGD_PORT", OPT_UINT, FIELD(port), 0, 65535, "N",
     "TCP port to listen on (0 = any free port; default 8080)"},
    {"--bind", "ECGD_BIND", OPT_STR, FIELD(bind), 0, 0, "ADDR",
     "numeric IPv4 or IPv6 address to listen on (default 0.0.0.0)"},
    {"--backend", "ECGD_BACKEND", OPT_BACKEND, FIELD(backend), 0, 0, "auto|cpu|cuda",
     "compute backend (default auto: CUDA when a device exists, else cpu)"},
    {"--device", "ECGD_DEVICE", OPT_INT, FIELD(device), -1, 64, "N",
     "CUDA device ordinal, -1 = every visible device (default -1)"},
    {"--model-dir", "ECGD_MODEL_DIR", OPT_STR, FIELD(model_dir), 0, 0, "DIR",
     "directory of .ecgm model files served under /v1/models (default models)"},
    {"--model", "ECGD_MODEL", OPT_STR, FIELD(model), 0, 0, "NAME|PATH",
     "default model: a name in the model directory, a path to a .ecgm file, or none "
     "(default default)"},
    {"--workers", "ECGD_WORKERS", OPT_UINT, FIELD(workers), 1, SVC_MAX_WORKERS, "N",
     "concurrent analyses = engine worker contexts (default: the CPUs this process may use - "
     "its affinity mask, capped by its cgroup's cpu.max quota; where the CUDA backend "
     "batches, at least --max-batch, as a batch's analyses wait in workers)"},
    {"--io-threads", "ECGD_IO_THREADS", OPT_UINT, FIELD(io_threads), 1, 64, "N",
     "HTTP threads in the libmicrohttpd pool (default: the workers, given or default, at "
     "least 2, at most 64)"},
    {"--max-body-mb", "ECGD_MAX_BODY_MB", OPT_MB, FIELD(max_body_bytes), 1, 1u << 20, "MB",
     "largest request body in MiB, checked while it streams (default 256)"},
    {"--timeout-s", "ECGD_TIMEOUT_S", OPT_UINT, FIELD(timeout_s), 1, 86400, "S",
     "idle connection timeout in seconds: stops slow clients (default 30)"},
    {"--queue-depth", "ECGD_QUEUE_DEPTH", OPT_UINT, FIELD(queue_depth), 0, 1u << 20, "N",
     "analyses that may wait beyond the busy workers before 503 (default 64)"},
    {"--drain-s", "ECGD_DRAIN_S", OPT_UINT, FIELD(drain_s), 0, 3600, "S",
     "on SIGTERM, longest wait for in-flight requests (default 25)"},
    {"--token", "ECGD_TOKEN", OPT_STR, FIELD(token), 0, 0, "TOKEN",
     "require 'Authorization: Bearer TOKEN' on /v1/ routes (default: none; prefer the "
     "variable, a flag shows in ps)"},
    {"--admin-port", "ECGD_ADMIN_PORT", OPT_INT, FIELD(admin_port), -1, 65535, "N",
     "second listener for /healthz, /readyz, /v2/health/... and /metrics with its own small "
     "connection budget, so probes are never starved (-1 = none, 0 = any free port; default -1)"},
    {"--header-timeout-s", "ECGD_HEADER_TIMEOUT_S", OPT_UINT, FIELD(header_timeout_s), 1, 3600,
     "S", "the request line and headers must arrive within this (default 10)"},
    {"--min-upload-kib-s", "ECGD_MIN_UPLOAD_KIB_S", OPT_UINT, FIELD(min_upload_kib_s), 0,
     1u << 20, "KIB", "bodies arriving slower than this on average are cut with 408, after "
     "--header-timeout-s of grace (0 = no minimum; default 4)"},
    {"--min-download-kib-s", "ECGD_MIN_DOWNLOAD_KIB_S", OPT_UINT, FIELD(min_download_kib_s), 0,
     1u << 20, "KIB", "answers the client reads slower than this on average are cut, after "
     "--header-timeout-s of grace (0 = no minimum; default 4)"},
    {"--send-buffer-kib", "ECGD_SEND_BUFFER_KIB", OPT_UINT, FIELD(send_buffer_kib), 0, 1u << 20,
     "KIB", "kernel send buffer of each connection on the main port, which bounds the socket "
     "memory a client that does not read can hold (0 = the kernel's autotuning, up to "
     "net.ipv4.tcp_wmem; default 0)"},
    {"--max-conns-per-ip", "ECGD_MAX_CONNS_PER_IP", OPT_UINT, FIELD(max_conns_per_ip), 0,
     1u << 20, "N", "connections one client address may hold (0 = no limit; default 64)"},
    {"--memory-budget-mb", "ECGD_MEMORY_BUDGET_MB", OPT_MB, FIELD(memory_budget_bytes), 0,
     1u << 24, "MB", "memory the requests may reserve together; a request whose worst case "
     "does not fit gets 503 + Retry-After (0 = 3/4 of the cgroup memory.max, else of RAM; "
     "default 0)"},
    {"--store-mb", "ECGD_STORE_MB", OPT_MB, FIELD(store_bytes), 1, 1u << 20, "MB",
     "memory cap in MiB of the analyses kept for browsing (/v1/analyses; host and device "
     "memory; never written to disk; default 1024)"},
    {"--store-ttl-s", "ECGD_STORE_TTL_S", OPT_UINT, FIELD(store_ttl_s), 1, 30u * 86400u, "S",
     "a kept analysis unused for this long is dropped (default 3600)"},
    {"--async-mb", "ECGD_ASYNC_MB", OPT_MB, FIELD(async_min_bytes), 0, 1u << 20, "MB",
     "POST /v1/analyses bodies of at least this many MiB sent with Prefer: respond-async are "
     "answered 202 at once (default 100)"},
    {"--cors-origin", "ECGD_CORS_ORIGIN", OPT_STR, FIELD(cors_origin), 0, 0, "ORIGINS",
     "origins allowed to call the API from a browser, comma-separated "
     "(https://a.example,https://b.example) or *; the token is still required (default: "
     "none)"},
    {"--max-batch", "ECGD_MAX_BATCH", OPT_UINT, FIELD(max_batch), 1, 1024, "N",
     "CUDA backend: short analyses (one lead, at most 131072 samples) arriving together run as "
     "one batch of at most N on each batcher, with the same answers (1 = each on its own pass, "
     "as does ECG_CUDA_BATCH=0; the CPU backend never batches; default 64)"},
    {"--batch-window-us", "ECGD_BATCH_WINDOW_US", OPT_UINT, FIELD(batch_window_us), 0, 100000,
     "US", "how long a batch waits for more analyses after its first one, in microseconds "
     "(default 100)"},
    {"--batch-lanes", "ECGD_BATCH_LANES", OPT_UINT, FIELD(batch_lanes), 1, ECG_BATCH_LANES_MAX,
     "N", "CUDA backend: batchers per GPU, each queuing its batches from a thread of its own "
     "(ECG_CUDA_BATCH_LANES overrides it; default 2)"},
    {"--batch-depth", "ECGD_BATCH_DEPTH", OPT_UINT, FIELD(batch_depth), 1, ECG_BATCH_DEPTH_MAX,
     "N", "CUDA backend: batches each batcher keeps in flight: it collects and launches the next "
     "while the GPU runs the one before (1 = each batch to its end first; ECG_BATCH_DEPTH "
     "overrides it; default 2)"},
};

#define N_OPTS (sizeof opts / sizeof opts[0])

static void config_defaults(struct svc_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->bind, sizeof cfg->bind, "%s", SVC_DEFAULT_BIND);
    cfg->port = SVC_DEFAULT_PORT;
    cfg->backend = ECG_BACKEND_AUTO;
    cfg->device = -1;
    snprintf(cfg->model_dir, sizeof cfg->model_dir, "%s", SVC_DEFAULT_MODEL_DIR);
    snprintf(cfg->model, sizeof cfg->model, "%s", SVC_DEFAULT_MODEL);
    /* The CPUs this process may use (affinity, cgroup quota), not the host's. */
    unsigned cpus = svc_cpus_available(NULL, cfg->cpus_note, sizeof cfg->cpus_note);
    cfg->workers = cpus > 64 ? 64u : cpus;
    cfg->io_threads = 0; /* derived from workers after parsing */
    cfg->max_body_bytes = (size_t)SVC_DEFAULT_MAX_BODY_MB << 20;
    cfg->timeout_s = SVC_DEFAULT_TIMEOUT_S;
    cfg->queue_depth = SVC_DEFAULT_QUEUE_DEPTH;
    cfg->drain_s = SVC_DEFAULT_DRAIN_S;
    cfg->admin_port = -1;
    cfg->header_timeout_s = SVC_DEFAULT_HEADER_TIMEOUT_S;
    cfg->min_upload_kib_s = SVC_DEFAULT_MIN_UPLOAD_KIB_S;
    cfg->min_download_kib_s = SVC_DEFAULT_MIN_DOWNLOAD_KIB_S;
    cfg->max_conns_per_ip = SVC_DEFAULT_MAX_CONNS_PER_IP;
    cfg->store_bytes = (size_t)SVC_DEFAULT_STORE_MB << 20;
    cfg->store_ttl_s = SVC_DEFAULT_STORE_TTL_S;
    cfg->async_min_bytes = (size_t)SVC_DEFAULT_ASYNC_MB << 20;
    cfg->max_batch = SVC_DEFAULT_MAX_BATCH;
    cfg->batch_window_us = SVC_DEFAULT_BATCH_WINDOW_US;
    cfg->batch_lanes = ECG_BATCH_LANES_DEFAULT;
    cfg->batch_depth = ECG_BATCH_DEPTH_DEFAULT;
}

/*
 * The worker count when neither --workers nor ECGD_WORKERS gave one: the number of CPUs, and at
 * least max_batch where the engine will batch (CUDA): a batched analysis waits for its batch in
 * its worker, so fewer workers than max_batch would cap every batch at the worker count (64
 * workers for 64-wide batches on 4 lanes measured best on an H100 host, bench/RESULTS.md). The
 * CPU backend never batches, and keeps the CPU count.
 */
static unsigned default_workers(const struct svc_config *cfg)
{
    struct ecg_engine_config engine = {.backend = cfg->backend, .max_batch = cfg->max_batch};
    if (cfg->workers >= cfg->max_batch || !ecg_engine_would_batch(&engine))
        return cfg->workers;
    return cfg->max_batch < SVC_MAX_WORKERS ? cfg->max_batch : SVC_MAX_WORKERS;
}

/* Parses a whole decimal integer within [min, max]; false on anything else. */
static bool parse_integer(const char *text, long long min, long long max, long long *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end = NULL;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || value < min || value > max)
        return false;
    *out = value;
    return true;
}

/* Stores one value; prints why it is refused to errs and returns false. */
static bool opt_set(const struct opt_def *opt, const char *value, const char *source,
                    struct svc_config *cfg, FILE *errs)
{
    char *field = (char *)cfg + opt->offset;
    long long number = 0;
    switch (opt->kind) {
    case OPT_STR:
        if (strlen(value) >= opt->size) {
            fprintf(errs, "ecgd serve: %s: value too long (at most %zu characters)\n", source,
                    opt->size - 1);
            return false;
        }
        memcpy(field, value, strlen(value) + 1);
        return true;
    case OPT_BACKEND:
        if (!ecg_backend_kind_parse(value, (enum ecg_backend_kind *)(void *)field)) {
            fprintf(errs, "ecgd serve: %s: expected auto, cpu or cuda, got \"%s\"\n", source,
                    value);
            return false;
        }
        return true;
    case OPT_UINT:
    case OPT_INT:
    case OPT_MB:
        if (!parse_integer(value, opt->min, opt->max, &number)) {
            fprintf(errs, "ecgd serve: %s: expected an integer in [%lld, %lld], got \"%s\"\n",
                    source, opt->min, opt->max, value);
            return false;
        }
        if (opt->kind == OPT_UINT)
            *(unsigned *)(void *)field = (unsigned)number;
        else if (opt->kind == OPT_INT)
            *(int *)(void *)field = (int)number;
        else
            *(size_t *)(void *)field = (size_t)number << 20;
        return true;
    }
    return false;
}

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: ecgd serve [options]\n"
            "\n"
            "Serves ECG analysis over HTTP. Every option can also be set by its environment\n"
            "variable; an option on the command line wins over its variable.\n"
            "\n"
            "options:\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s %s", opts[i].flag, opts[i].metavar);
        fprintf(out, "  %-28s %s\n      %s\n", left, opts[i].env, opts[i].help);
    }
    fprintf(out,
            "  --print-config\n      print the effective configuration as JSON and exit\n"
            "  --list-routes\n      print the HTTP routes (METHOD PATH) and exit\n"
            "  --help\n      this text\n");
    fprintf(out,
            "\n"
            "routes: POST /v1/analyze, GET /v1/models, GET /v1/models/{name},\n"
            "        POST /v1/models/{name}/decode, POST /v1/models/reload, GET /v1/info,\n"
            "        GET /healthz, GET /readyz, GET /v2/health/live, GET /v2/health/ready,\n"
            "        GET /metrics, GET /openapi.json,\n"
            "        POST /v1/analyses, GET|DELETE /v1/analyses/{id}, GET .../signal,\n"
            "        GET .../beats/{k}, GET / (the dashboard page)\n"
            "signals: SIGTERM or SIGINT stop accepting, finish in-flight requests (up to\n"
            "        --drain-s), then exit 0. SIGHUP rescans the model directory as\n"
            "        POST /v1/models/reload does (logged); SIGUSR1 and SIGUSR2 are logged\n"
            "        and ignored. Access logs are JSON lines on stderr.\n");
}

static const struct opt_def *opt_find(const char *flag, size_t flag_len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(opts[i].flag) == flag_len && !strncmp(opts[i].flag, flag, flag_len))
            return &opts[i];
    return NULL;
}

enum svc_config_action svc_config_parse(struct svc_config *cfg, int argc, char **argv, FILE *out,
                                        FILE *errs)
{
    bool workers_given = false;
    config_defaults(cfg);
    for (size_t i = 0; i < N_OPTS; i++) {
        const char *value = getenv(opts[i].env);
        if (value && *value && !opt_set(&opts[i], value, opts[i].env, cfg, errs))
            return SVC_CONFIG_EXIT_USAGE;
        workers_given |= value && *value && opts[i].offset == offsetof(struct svc_config, workers);
    }

    bool print_config = false, list_routes = false;
    int first = 1;
    if (argc > 1 && !strcmp(argv[1], "serve"))
        first = 2;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_help(out);
            return SVC_CONFIG_EXIT_OK;
        }
        if (!strcmp(arg, "--print-config")) {
            print_config = true;
            continue;
        }
        if (!strcmp(arg, "--list-routes")) {
            list_routes = true;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t flag_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt_def *opt = strncmp(arg, "--", 2) ? NULL : opt_find(arg, flag_len);
        if (!opt) {
            fprintf(errs, "ecgd serve: unknown option \"%s\" (see ecgd serve --help)\n", arg);
            return SVC_CONFIG_EXIT_USAGE;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(errs, "ecgd serve: %s needs a value\n", opt->flag);
                return SVC_CONFIG_EXIT_USAGE;
            }
            value = argv[++i];
        }
        if (!opt_set(opt, value, opt->flag, cfg, errs))
            return SVC_CONFIG_EXIT_USAGE;
        workers_given |= opt->offset == offsetof(struct svc_config, workers);
    }

    if (!workers_given)
        cfg->workers = default_workers(cfg);
    /* The HTTP threads follow the workers, the batching ones included: where the engine
     * batches, an HTTP thread reads a short body and writes its answer itself (a worker's part
     * otherwise), and libmicrohttpd keeps a connection on one thread, so with fewer threads
     * than busy clients, answers queue behind each other's reading and writing on a thread
     * while other cores idle (64 threads against 16 on a 16-core H100 host, 64 clients of
     * 10-s strips: bench/RESULTS.md, session 12). */
    if (!cfg->io_threads)
        cfg->io_threads = cfg->workers < 2 ? 2 : cfg->workers > 64 ? 64 : cfg->workers;
    if (!cfg->model[0]) {
        fprintf(errs, "ecgd serve: --model must not be empty (use \"none\" for no model)\n");
        return SVC_CONFIG_EXIT_USAGE;
    }
    if (list_routes)
        return SVC_CONFIG_LIST_ROUTES;
    if (print_config) {
        struct ecg_buf json = {0};
        svc_config_write_json(cfg, &json);
        if (json.failed) {
            ecg_buf_fini(&json);
            fprintf(errs, "ecgd serve: out of memory\n");
            return SVC_CONFIG_EXIT_USAGE;
        }
        fprintf(out, "%s\n", json.data);
        ecg_buf_fini(&json);
        return SVC_CONFIG_EXIT_OK;
    }
    return SVC_CONFIG_RUN;
}

/* Appends a JSON string literal; the values here are configuration, never signal data. */
static void put_string(struct ecg_buf *out, const char *str)
{
    ecg_buf_puts(out, "\"");
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        if (*p == '"' || *p == '\\')
            ecg_buf_printf(out, "\\%c", *p);
        else if (*p < 0x20)
            ecg_buf_printf(out, "\\u%04x", *p);
        else
            ecg_buf_append(out, (const char *)p, 1);
    }
    ecg_buf_puts(out, "\"");
}

void svc_config_write_json(const struct svc_config *cfg, struct ecg_buf *out)
{
    ecg_buf_puts(out, "{\"bind\":");
    put_string(out, cfg->bind);
    ecg_buf_printf(out, ",\"port\":%u,\"backend\":", cfg->port);
    put_string(out, ecg_backend_kind_name(cfg->backend));
    ecg_buf_printf(out, ",\"device\":%d,\"model_dir\":", cfg->device);
    put_string(out, cfg->model_dir);
    ecg_buf_puts(out, ",\"model\":");
    put_string(out, cfg->model);
    ecg_buf_printf(out,
                   ",\"workers\":%u,\"io_threads\":%u,\"max_body_bytes\":%zu,\"timeout_s\":%u,"
                   "\"queue_depth\":%u,\"drain_s\":%u,\"token\":%s,\"admin_port\":%d,"
                   "\"header_timeout_s\":%u,\"min_upload_kib_s\":%u,\"min_download_kib_s\":%u,"
                   "\"send_buffer_kib\":%u,\"max_conns_per_ip\":%u,"
                   "\"memory_budget_bytes\":%zu,\"store_bytes\":%zu,\"store_ttl_s\":%u,"
                   "\"async_min_bytes\":%zu,\"cpus\":",
                   cfg->workers, cfg->io_threads, cfg->max_body_bytes, cfg->timeout_s,
                   cfg->queue_depth, cfg->drain_s, cfg->token[0] ? "\"(set)\"" : "null",
                   cfg->admin_port, cfg->header_timeout_s, cfg->min_upload_kib_s,
                   cfg->min_download_kib_s, cfg->send_buffer_kib, cfg->max_conns_per_ip,
                   cfg->memory_budget_bytes, cfg->store_bytes,
                   cfg->store_ttl_s, cfg->async_min_bytes);
    put_string(out, cfg->cpus_note);
    ecg_buf_puts(out, ",\"cors_origin\":");
    put_string(out, cfg->cors_origin);
    ecg_buf_printf(out,
                   ",\"max_batch\":%u,\"batch_window_us\":%u,\"batch_lanes\":%u,"
                   "\"batch_depth\":%u}",
                   cfg->max_batch, cfg->batch_window_us, cfg->batch_lanes, cfg->batch_depth);
}
