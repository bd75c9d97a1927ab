/*
 * test_service.c - the service's pure parts: route matching, the status -> HTTP mapping, the
 * configuration parser (flags, environment, precedence, refusals), the metrics exposition, JSON
 * string escaping in logs, the worker pool (every job runs once; cancelled on a stopping pool)
 * and the OpenAPI document's assembly from its parts (merge order, conflicts refused, the
 * embedded parts merged), the slow-download rule (a wait that is the server's own is not held
 * against the client; measured on a real loopback socket). The server itself is tested end to end by tests/e2e/test_http.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "../../service/config.h"
#include "../../service/connections.h"
#include "../../service/jobs.h"
#include "../../service/log.h"
#include "../../service/metrics.h"
#include "../../service/routes.h"
#include "../../service/server.h"

static void test_route_match(void **state)
{
    (void)state;
    char name[64];
    assert_int_equal(svc_route_match("/v1/analyze", name, sizeof name), SVC_ROUTE_ANALYZE);
    assert_string_equal(name, "");
    assert_int_equal(svc_route_match("/healthz", name, sizeof name), SVC_ROUTE_HEALTHZ);
    assert_int_equal(svc_route_match("/v2/health/ready", name, sizeof name), SVC_ROUTE_READY);
    assert_int_equal(svc_route_match("/openapi.json", name, sizeof name), SVC_ROUTE_OPENAPI);
    assert_int_equal(svc_route_match("/v1/models", name, sizeof name), SVC_ROUTE_MODELS);
    assert_int_equal(svc_route_match("/v1/models/default", name, sizeof name), SVC_ROUTE_MODEL);
    assert_string_equal(name, "default");
    assert_int_equal(svc_route_match("/v1/models/mit-bih_v2.1/decode", name, sizeof name),
                     SVC_ROUTE_DECODE);
    assert_string_equal(name, "mit-bih_v2.1");
    /* reload is a route of its own, before the {name} pattern ("reload" is reserved) */
    assert_int_equal(svc_route_match("/v1/models/reload", name, sizeof name), SVC_ROUTE_RELOAD);

    /* Not routes: trailing slashes, empty or hidden names, traversal, other characters,
     * extra segments, names too long. */
    /* The analyses resource (the {id} in name), the dashboard page and its files. */
    assert_int_equal(svc_route_match("/", name, sizeof name), SVC_ROUTE_PAGE);
    assert_int_equal(svc_route_match("/ui/app.js", name, sizeof name), SVC_ROUTE_ASSET);
    assert_string_equal(name, "app.js");
    assert_int_equal(svc_route_match("/v1/analyses", name, sizeof name), SVC_ROUTE_ANALYSES);
    assert_int_equal(svc_route_match("/v1/analyses/0f3a", name, sizeof name), SVC_ROUTE_ANALYSIS);
    assert_string_equal(name, "0f3a");
    assert_int_equal(svc_route_match("/v1/analyses/0f3a/signal", name, sizeof name),
                     SVC_ROUTE_ANALYSIS_SIGNAL);
    assert_int_equal(svc_route_match("/v1/analyses/0f3a/beats/12", name, sizeof name),
                     SVC_ROUTE_ANALYSIS_BEAT);
    assert_string_equal(name, "0f3a");

    /* Not routes: trailing slashes, empty or hidden names, traversal, other characters,
     * extra segments, names too long. */
    static const char *const unknown[] = {
        "/ui/../x",   "/ui/.hidden",        "/ui/",              "/v1/analyses/a/beats/",
        "/v1/analyses/", "/v1/analyses//signal",
        "/v1/analyses/a/beats/1a", "/v1/analyses/a/beats/-1", "/v1/analyses/a/other",
        "/v1/analyses/a/signal/", "/v1/analyses/a/beats/1234567890123",
        "/healthz/",          "/v1/analyze/",      "/v1/models/",
        "/v1/models/..", "/v1/models/.hidden", "/v1/models/a/b",  "/v1/models/a b",
        "/v1/models/a%2Fb", "/v1/models/a/decode/x", "/V1/ANALYZE", "/metricsx",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_int_equal(svc_route_match(unknown[i], name, sizeof name), SVC_ROUTE_UNKNOWN);
    char long_path[128] = "/v1/models/";
    memset(long_path + strlen(long_path), 'a', 64);
    assert_int_equal(svc_route_match(long_path, name, sizeof name), SVC_ROUTE_UNKNOWN);
    long_path[strlen("/v1/models/") + 63] = '\0';
    assert_int_equal(svc_route_match(long_path, name, sizeof name), SVC_ROUTE_MODEL);
    assert_int_equal(strlen(name), 63);

    /* Every route but "other" has a method and an Allow value. */
    for (int r = 0; r < SVC_ROUTE_UNKNOWN; r++) {
        const struct svc_route_def *def = svc_route_def((enum svc_route)r);
        assert_int_equal(def->route, r);
        assert_true(!strcmp(def->method, "GET") || !strcmp(def->method, "POST"));
        assert_non_null(strstr(def->allow, def->method));
    }
    assert_string_equal(svc_route_def(SVC_ROUTE_COUNT)->pattern, "other");
}

static void test_http_status(void **state)
{
    (void)state;
    assert_int_equal(svc_http_status(ECG_OK), 200);
    assert_int_equal(svc_http_status(ECG_ERR_FORMAT), 400);
    assert_int_equal(svc_http_status(ECG_ERR_ARG), 400);
    assert_int_equal(svc_http_status(ECG_ERR_NOT_FOUND), 404);
    assert_int_equal(svc_http_status(ECG_ERR_TOO_LARGE), 413);
    assert_int_equal(svc_http_status(ECG_ERR_UNSUPPORTED), 422);
    assert_int_equal(svc_http_status(ECG_ERR_BUSY), 503);
    assert_int_equal(svc_http_status(ECG_ERR_DEVICE), 503);
    assert_int_equal(svc_http_status(ECG_ERR_DEVICE_OOM), 503);
    assert_int_equal(svc_http_status(ECG_ERR_MODEL), 500);
    assert_int_equal(svc_http_status(ECG_ERR_INTERNAL), 500);
    assert_int_equal(svc_http_status(ECG_ERR_IO), 500);
    assert_int_equal(svc_http_status(ECG_ERR_NOMEM), 500);
    /* An input problem is never a server error, and no error is a success. */
    for (int s = 1; s < ECG_STATUS_COUNT; s++) {
        unsigned http = svc_http_status((enum ecg_status)s);
        assert_true(http >= 400 && http <= 599);
    }
    assert_int_equal(svc_http_status(ECG_STATUS_COUNT), 500);
}

static enum svc_config_action parse(struct svc_config *cfg, int argc, const char **argv)
{
    FILE *sink = fopen("/dev/null", "w");
    assert_non_null(sink);
    enum svc_config_action action = svc_config_parse(cfg, argc, (char **)argv, sink, sink);
    fclose(sink);
    return action;
}

static const char *const all_vars[] = {
    "ECGD_PORT", "ECGD_BIND", "ECGD_BACKEND", "ECGD_DEVICE", "ECGD_MODEL_DIR", "ECGD_MODEL",
    "ECGD_WORKERS", "ECGD_IO_THREADS", "ECGD_MAX_BODY_MB", "ECGD_TIMEOUT_S",
    "ECGD_QUEUE_DEPTH", "ECGD_DRAIN_S", "ECGD_TOKEN", "ECGD_MAX_BATCH", "ECGD_BATCH_WINDOW_US",
    "ECGD_BATCH_LANES", "ECGD_BATCH_DEPTH", "ECG_BATCH_ANY", "ECG_CUDA_BATCH",
};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++)
        unsetenv(all_vars[i]);
}

static void test_config(void **state)
{
    (void)state;
    struct svc_config cfg;
    clear_env();

    const char *plain[] = {"serve"};
    assert_int_equal(parse(&cfg, 1, plain), SVC_CONFIG_RUN);
    assert_string_equal(cfg.bind, "0.0.0.0");
    assert_int_equal(cfg.port, 8080);
    assert_int_equal(cfg.backend, ECG_BACKEND_AUTO);
    assert_string_equal(cfg.model_dir, "models");
    assert_string_equal(cfg.model, "default");
    assert_int_equal(cfg.max_body_bytes, (size_t)256 << 20);
    assert_true(cfg.workers >= 1 && cfg.io_threads >= 2);
    assert_string_equal(cfg.token, "");

    /* The environment sets, flags (both spellings) win. */
    setenv("ECGD_PORT", "9000", 1);
    setenv("ECGD_WORKERS", "3", 1);
    setenv("ECGD_BACKEND", "cpu", 1);
    setenv("ECGD_TOKEN", "t0k", 1);
    const char *flags[] = {"serve", "--workers", "5", "--max-body-mb=2", "--bind", "::1"};
    assert_int_equal(parse(&cfg, 6, flags), SVC_CONFIG_RUN);
    assert_int_equal(cfg.port, 9000);
    assert_int_equal(cfg.workers, 5);
    assert_int_equal(cfg.io_threads, 5);
    assert_int_equal(cfg.backend, ECG_BACKEND_CPU);
    assert_int_equal(cfg.max_body_bytes, (size_t)2 << 20);
    assert_string_equal(cfg.bind, "::1");
    assert_string_equal(cfg.token, "t0k");
    clear_env();

    /* A leading "serve" in argv[1] (the whole command line) is skipped. */
    const char *whole[] = {"ecgd", "serve", "--port", "1"};
    assert_int_equal(parse(&cfg, 4, whole), SVC_CONFIG_RUN);
    assert_int_equal(cfg.port, 1);

    /* Refusals: out of range, trailing junk, unknown names, missing values, empty model. */
    const char *bad[][3] = {
        {"serve", "--port", "65536"},   {"serve", "--port", "80x"},
        {"serve", "--workers", "0"},    {"serve", "--backend", "tpu"},
        {"serve", "--frobnicate", "1"}, {"serve", "--model", ""},
        {"serve", "--timeout-s", "-1"}, {"serve", "--max-body-mb", "99999999999"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse(&cfg, 3, bad[i]), SVC_CONFIG_EXIT_USAGE);
    const char *missing[] = {"serve", "--port"};
    assert_int_equal(parse(&cfg, 2, missing), SVC_CONFIG_EXIT_USAGE);
    setenv("ECGD_QUEUE_DEPTH", "lots", 1);
    assert_int_equal(parse(&cfg, 1, plain), SVC_CONFIG_EXIT_USAGE);
    clear_env();

    const char *help[] = {"serve", "--help"};
    assert_int_equal(parse(&cfg, 2, help), SVC_CONFIG_EXIT_OK);
    const char *routes[] = {"serve", "--list-routes"};
    assert_int_equal(parse(&cfg, 2, routes), SVC_CONFIG_LIST_ROUTES);

    /* The JSON form redacts the token. */
    snprintf(cfg.token, sizeof cfg.token, "secret-value");
    struct ecg_buf json = {0};
    svc_config_write_json(&cfg, &json);
    assert_false(json.failed);
    assert_null(strstr(json.data, "secret-value"));
    assert_non_null(strstr(json.data, "\"token\":\"(set)\""));
    ecg_buf_fini(&json);
}

/* Dynamic batching is on by default where the engine batches (ECG_BATCH_ANY=1 stands in for a
 * CUDA device here), and the default workers then rise to --max-batch, since a batch's analyses
 * wait in workers, and the HTTP threads with them (up to 64), since they then read short bodies
 * and write their answers; an operator's --workers or ECGD_WORKERS is kept, and so is an
 * operator's --io-threads. The CPU backend never batches and keeps the CPU count. */
static void test_config_batching(void **state)
{
    (void)state;
    struct svc_config cfg;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cpus = online < 1 ? 1u : online > 64 ? 64u : (unsigned)online;
    unsigned io = cpus < 2 ? 2u : cpus;
    clear_env();

    const char *cpu[] = {"serve", "--backend", "cpu"};
    assert_int_equal(parse(&cfg, 3, cpu), SVC_CONFIG_RUN);
    assert_int_equal(cfg.max_batch, 64);
    assert_int_equal(cfg.batch_window_us, 100);
    assert_int_equal(cfg.batch_lanes, 2);
    assert_int_equal(cfg.batch_depth, 2);
    assert_int_equal(cfg.workers, cpus);
    assert_int_equal(cfg.io_threads, io);

    setenv("ECG_BATCH_ANY", "1", 1);
    assert_int_equal(parse(&cfg, 3, cpu), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, cpus > 64 ? cpus : 64);
    assert_int_equal(cfg.io_threads, 64);
    const char *io_given[] = {"serve", "--backend", "cpu", "--io-threads", "6"};
    assert_int_equal(parse(&cfg, 5, io_given), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, cpus > 64 ? cpus : 64);
    assert_int_equal(cfg.io_threads, 6);
    const char *wide[] = {"serve", "--backend", "cpu", "--max-batch", "100", "--batch-lanes", "3",
                          "--batch-depth", "2"};
    assert_int_equal(parse(&cfg, 9, wide), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, 100);
    assert_int_equal(cfg.batch_lanes, 3);
    assert_int_equal(cfg.batch_depth, 2);
    const char *too_deep[] = {"serve", "--backend", "cpu", "--batch-depth", "5"};
    assert_int_equal(parse(&cfg, 5, too_deep), SVC_CONFIG_EXIT_USAGE);
    const char *given[] = {"serve", "--backend", "cpu", "--workers", "8"};
    assert_int_equal(parse(&cfg, 5, given), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, 8);
    assert_int_equal(cfg.io_threads, 8);
    setenv("ECGD_WORKERS", "7", 1);
    assert_int_equal(parse(&cfg, 3, cpu), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, 7);
    unsetenv("ECGD_WORKERS");
    const char *off[] = {"serve", "--backend", "cpu", "--max-batch", "1"};
    assert_int_equal(parse(&cfg, 5, off), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, cpus);
    setenv("ECG_CUDA_BATCH", "0", 1);
    assert_int_equal(parse(&cfg, 3, cpu), SVC_CONFIG_RUN);
    assert_int_equal(cfg.workers, cpus);

    const char *bad[][3] = {{"serve", "--batch-lanes", "0"}, {"serve", "--batch-lanes", "9"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse(&cfg, 3, bad[i]), SVC_CONFIG_EXIT_USAGE);
    clear_env();
}

static void test_metrics_render(void **state)
{
    (void)state;
    struct svc_metrics metrics;
    svc_metrics_init(&metrics);
    svc_metrics_request(&metrics, SVC_ROUTE_ANALYZE, 200, 0.0005, 1000, 200);
    svc_metrics_request(&metrics, SVC_ROUTE_ANALYZE, 200, 0.3, 2000, 300);
    svc_metrics_request(&metrics, SVC_ROUTE_ANALYZE, 400, 0.002, 10, 90);
    svc_metrics_request(&metrics, SVC_ROUTE_UNKNOWN, 404, 100.0, 0, 70);
    svc_metrics_request(&metrics, SVC_ROUTE_HEALTHZ, 299, 0.001, 0, 28); /* "other" code */
    struct ecg_timing timing = {.read_ms = 1500, .filter_ms = 250, .total_ms = 2000};
    svc_metrics_analysis(&metrics, "default", &timing, 5000, 7, 2);
    svc_metrics_aborted(&metrics, SVC_ROUTE_ANALYZE, SVC_ABORT_CLIENT, 500);
    struct svc_metrics_gauges gauges = {
        .in_flight = 3, .queued = 1, .busy_workers = 2, .workers = 4, .ready = true,
        .backend = "cpu", .device = "a \"quoted\" device",
    };
    struct ecg_buf text = {0};
    svc_metrics_render(&metrics, &gauges, &text);
    assert_false(text.failed);
    static const char *const expected[] = {
        "ecgd_http_requests_total{route=\"/v1/analyze\",code=\"200\"} 2\n",
        "ecgd_http_requests_total{route=\"/v1/analyze\",code=\"400\"} 1\n",
        "ecgd_http_requests_total{route=\"other\",code=\"404\"} 1\n",
        "ecgd_http_requests_total{route=\"/healthz\",code=\"other\"} 1\n",
        /* cumulative buckets */
        "ecgd_http_request_duration_seconds_bucket{route=\"/v1/analyze\",le=\"0.001\"} 1\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"/v1/analyze\",le=\"0.0025\"} 2\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"/v1/analyze\",le=\"0.25\"} 2\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"/v1/analyze\",le=\"0.5\"} 3\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"/v1/analyze\",le=\"+Inf\"} 3\n",
        "ecgd_http_request_duration_seconds_count{route=\"/v1/analyze\"} 3\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"other\",le=\"60\"} 0\n",
        "ecgd_http_request_duration_seconds_bucket{route=\"other\",le=\"+Inf\"} 1\n",
        "ecgd_engine_stage_seconds_sum{stage=\"read\"} 1.5\n",
        "ecgd_engine_stage_seconds_sum{stage=\"filter\"} 0.25\n",
        "ecgd_engine_stage_seconds_count{stage=\"encode\"} 1\n",
        "ecgd_analysis_seconds_total{model=\"default\"} 2\n",
        "ecgd_analyses_total{model=\"default\"} 1\n",
        "ecgd_http_requests_aborted_total{route=\"/v1/analyze\",reason=\"client_abort\"} 1\n",
        "ecgd_http_received_bytes_total 3510\n",
        "ecgd_http_sent_bytes_total 688\n",
        "ecgd_beats_analysed_total{model=\"default\"} 7\n",
        "ecgd_outlier_beats_total{model=\"default\"} 2\n",
        "ecgd_samples_analysed_total{model=\"default\"} 5000\n",
        "# TYPE process_cpu_seconds_total counter\n",
        "# TYPE process_open_fds gauge\n",
        "ecgd_http_requests_in_flight 3\n",
        "ecgd_analysis_queued 1\n",
        "ecgd_ready 1\n",
        "ecgd_build_info{version=\"" ECG_VERSION
        "\",backend=\"cpu\",device=\"a \\\"quoted\\\" device\"} 1\n",
        "# TYPE ecgd_http_request_duration_seconds histogram\n",
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        if (!strstr(text.data, expected[i]))
            fail_msg("missing line: %s", expected[i]);
    }
    /* No route without traffic shows up. */
    assert_null(strstr(text.data, "route=\"/v1/info\""));
    ecg_buf_fini(&text);
    svc_metrics_fini(&metrics);
}

static void test_json_string(void **state)
{
    (void)state;
    struct ecg_buf out = {0};
    svc_json_string(&out, "a\"b\\c\n\x01 \xc3\xa9 \xff \xe2\x82 z");
    assert_false(out.failed);
    assert_string_equal(out.data,
                        "\"a\\\"b\\\\c\\u000a\\u0001 \xc3\xa9 \\ufffd \\ufffd\\ufffd z\"");
    ecg_buf_fini(&out);
    svc_json_string(&out, NULL);
    assert_string_equal(out.data, "\"\"");
    ecg_buf_fini(&out);
}

/* ---- the worker pool */

struct counting_job {
    struct svc_job job;
    atomic_int *ran;
    atomic_int *cancelled;
    atomic_bool *gate; /* when not NULL, the job waits for it */
};

static void counting_run(struct svc_job *job, bool cancelled)
{
    struct counting_job *cj = (struct counting_job *)job;
    while (cj->gate && !atomic_load(cj->gate))
        ;
    atomic_fetch_add(cancelled ? cj->cancelled : cj->ran, 1);
}

static void test_jobs_all_run(void **state)
{
    (void)state;
    struct svc_jobs jobs;
    struct ecg_error err = {0};
    assert_int_equal(svc_jobs_start(&jobs, 3, &err), ECG_OK);
    atomic_int ran = 0, cancelled = 0;
    struct counting_job list[200];
    for (size_t i = 0; i < 200; i++) {
        list[i] = (struct counting_job){{NULL, counting_run}, &ran, &cancelled, NULL};
        assert_true(svc_jobs_submit(&jobs, &list[i].job));
    }
    svc_jobs_stop(&jobs, false);
    assert_int_equal(atomic_load(&ran), 200);
    assert_int_equal(atomic_load(&cancelled), 0);
}

struct stopper {
    struct svc_jobs *jobs;
};

static void *stop_thread(void *arg)
{
    svc_jobs_stop(((struct stopper *)arg)->jobs, true);
    return NULL;
}

static void test_jobs_cancel(void **state)
{
    (void)state;
    struct svc_jobs jobs;
    struct ecg_error err = {0};
    assert_int_equal(svc_jobs_start(&jobs, 1, &err), ECG_OK);
    atomic_int ran = 0, cancelled = 0;
    atomic_bool gate = false;
    struct counting_job blocker = {{NULL, counting_run}, &ran, &cancelled, &gate};
    struct counting_job queued[5];
    assert_true(svc_jobs_submit(&jobs, &blocker.job));
    for (size_t i = 0; i < 5; i++) {
        queued[i] = (struct counting_job){{NULL, counting_run}, &ran, &cancelled, NULL};
        assert_true(svc_jobs_submit(&jobs, &queued[i].job));
    }
    /* Stop (with cancel) while the blocker holds the only worker. */
    while (atomic_load(&jobs.running) == 0)
        ;
    struct stopper stopper = {&jobs};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, stop_thread, &stopper), 0);
    for (;;) {
        pthread_mutex_lock(&jobs.mutex);
        bool stopping = jobs.stopping;
        pthread_mutex_unlock(&jobs.mutex);
        if (stopping)
            break;
    }
    struct counting_job late = {{NULL, counting_run}, &ran, &cancelled, NULL};
    assert_false(svc_jobs_submit(&jobs, &late.job)); /* refused once stopping */
    atomic_store(&gate, true);
    pthread_join(thread, NULL);
    assert_int_equal(atomic_load(&ran), 1);
    assert_int_equal(atomic_load(&cancelled), 5);
}

/* Merges parts; returns the status, the document in *out (the caller frees it). */
static enum ecg_status merge_texts(const char *const *texts, size_t n, struct ecg_buf *out,
                                   struct ecg_error *err)
{
    struct svc_openapi_part parts[4];
    static const char *const names[] = {"one.json", "two.json", "three.json", "four.json"};
    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++)
        parts[i] = (struct svc_openapi_part){names[i], texts[i]};
    return svc_openapi_merge(parts, n, out, err);
}

/* The refusal of texts: ECG_ERR_INTERNAL, code openapi_part, a message holding want. */
static void merge_refused(const char *const *texts, size_t n, const char *want)
{
    struct ecg_buf out = {0};
    struct ecg_error err = {0};
    assert_int_equal(merge_texts(texts, n, &out, &err), ECG_ERR_INTERNAL);
    assert_string_equal(err.code, "openapi_part");
    if (!strstr(err.message, want))
        fail_msg("\"%s\" lacks \"%s\"", err.message, want);
    ecg_buf_fini(&out);
}

static void test_openapi_merge(void **state)
{
    (void)state;
    /* objects merge member by member, keys in the order they first appear */
    const char *const parts[] = {"{\"a\": 1, \"o\": {\"x\": {\"p\": true}}}",
                                 "{\"o\": {\"y\": [1, 2], \"x\": {\"q\": \"s\"}}, \"b\": null}",
                                 "{\"o\": {}}"};
    struct ecg_buf out = {0};
    struct ecg_error err = {0};
    assert_int_equal(merge_texts(parts, 3, &out, &err), ECG_OK);
    cJSON *want = cJSON_Parse("{\"a\": 1, \"o\": {\"x\": {\"p\": true, \"q\": \"s\"}, "
                              "\"y\": [1, 2]}, \"b\": null}");
    char *want_text = cJSON_Print(want);
    assert_non_null(want_text);
    assert_int_equal(out.len, strlen(want_text) + 1);
    assert_memory_equal(out.data, want_text, strlen(want_text));
    assert_int_equal(out.data[out.len - 1], '\n');
    free(want_text);
    cJSON_Delete(want);
    ecg_buf_fini(&out);

    /* a value two parts define, an object against a value, a part that is not an object */
    const char *const twice[] = {"{\"o\": {\"x\": 1}}", "{\"o\": {\"x\": 1}}"};
    merge_refused(twice, 2, "part two.json: \"o/x\" is defined twice");
    const char *const shapes[] = {"{\"o\": {\"x\": {}}}", "{\"o\": {\"x\": 3}}"};
    merge_refused(shapes, 2, "\"o/x\"");
    const char *const again_in_one[] = {"{\"k\": 1, \"k\": 2}"};
    merge_refused(again_in_one, 1, "part one.json: \"k\" is defined twice");
    const char *const array[] = {"{}", "[1]"};
    merge_refused(array, 2, "part two.json is not a JSON object");
    const char *const broken[] = {"{\"a\": 1,\n \"b\": }"};
    merge_refused(broken, 1, "part one.json is not valid JSON (byte 15)");

    /* the embedded parts: one OpenAPI 3.1 document, the same bytes every time */
    struct ecg_buf again = {0};
    assert_int_equal(svc_openapi_build(&out, &err), ECG_OK);
    assert_int_equal(svc_openapi_build(&again, &err), ECG_OK);
    assert_int_equal(out.len, again.len);
    assert_memory_equal(out.data, again.data, out.len);
    cJSON *doc = cJSON_Parse(out.data);
    assert_non_null(doc);
    assert_string_equal(cJSON_GetObjectItem(doc, "openapi")->valuestring, "3.1.0");
    static const char *const top[] = {"openapi", "info", "servers", "tags", "paths", "components"};
    static const char *const comps[] = {"securitySchemes", "parameters", "headers", "schemas",
                                        "responses"};
    size_t i = 0;
    for (cJSON *item = doc->child; item; item = item->next, i++)
        assert_string_equal(item->string, top[i]);
    assert_int_equal(i, 6);
    i = 0;
    for (cJSON *item = cJSON_GetObjectItem(doc, "components")->child; item; item = item->next, i++)
        assert_string_equal(item->string, comps[i]);
    assert_int_equal(i, 5);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "paths"), "/v1/analyze"));
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "paths"), "/openapi.json"));
    cJSON_Delete(doc);
    ecg_buf_fini(&out);
    ecg_buf_fini(&again);
}

/* The slow-download rule: a client that has acknowledged everything written so far is not the
 * reason an answer is slow, whatever the clock says; one that leaves bytes waiting is cut past
 * the grace at an average under the minimum, and not before. */
static void test_download_verdict(void **state)
{
    (void)state;
    const double grace = 10.0, min = 4096.0;
    /* nothing waits: the timing restarts, however long and however little was read */
    assert_int_equal(svc_download_verdict(30.0, 0, 0, grace, min), SVC_DOWNLOAD_RESTART);
    assert_int_equal(svc_download_verdict(0.5, 0, 0, grace, min), SVC_DOWNLOAD_RESTART);
    /* bytes wait: within the grace, kept; past it, cut under the minimum average, kept at it */
    assert_int_equal(svc_download_verdict(9.9, 0, 1, grace, min), SVC_DOWNLOAD_KEEP);
    assert_int_equal(svc_download_verdict(10.5, 10.5 * min - 1, 1, grace, min), SVC_DOWNLOAD_CUT);
    assert_int_equal(svc_download_verdict(10.5, 10.5 * min, 1 << 20, grace, min),
                     SVC_DOWNLOAD_KEEP);
    assert_int_equal(svc_download_verdict(60.0, 0, 100, grace, min), SVC_DOWNLOAD_CUT);
}

/* What the rule reads, on a real TCP connection over loopback: bytes written that the peer has
 * not taken wait in the socket; once the peer has read them all, nothing waits. */
static void test_socket_bytes_waiting(void **state)
{
    (void)state;
    int lst = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lst >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    assert_int_equal(bind(lst, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(lst, 1), 0);
    assert_int_equal(getsockname(lst, (struct sockaddr *)&addr, &alen), 0);
    int client = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(client, (struct sockaddr *)&addr, sizeof addr), 0);
    int server = accept(lst, NULL, NULL);
    assert_true(server >= 0);
    uint64_t waiting = 1;
    assert_true(svc_socket_bytes_waiting(server, &waiting));
    assert_int_equal(waiting, 0);

    /* the client does not read: the server writes until the socket takes no more (the client's
     * window is full), and what lies beyond that window waits */
    static char chunk[1 << 16];
    memset(chunk, 'x', sizeof chunk);
    size_t written = 0;
    ssize_t w = 0;
    for (int i = 0; i < 4096 && (w = send(server, chunk, sizeof chunk, MSG_DONTWAIT)) > 0; i++)
        written += (size_t)w;
    assert_true(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    assert_true(svc_socket_bytes_waiting(server, &waiting));
    assert_true(waiting > 0);

    /* the client reads everything: within a few seconds nothing waits any more */
    size_t got = 0;
    static char sink[1 << 16];
    const time_t deadline = time(NULL) + 10;
    while (time(NULL) < deadline) {
        struct pollfd p = {.fd = client, .events = POLLIN};
        if (poll(&p, 1, 50) > 0) {
            ssize_t r = recv(client, sink, sizeof sink, 0);
            assert_true(r > 0);
            got += (size_t)r;
        }
        if (got == written && svc_socket_bytes_waiting(server, &waiting) && waiting == 0)
            break;
    }
    assert_int_equal(got, written);
    assert_true(svc_socket_bytes_waiting(server, &waiting));
    assert_int_equal(waiting, 0);
    close(server);
    close(client);
    close(lst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_match),   cmocka_unit_test(test_http_status),
        cmocka_unit_test(test_config),        cmocka_unit_test(test_config_batching),
        cmocka_unit_test(test_metrics_render),
        cmocka_unit_test(test_json_string),   cmocka_unit_test(test_jobs_all_run),
        cmocka_unit_test(test_jobs_cancel),   cmocka_unit_test(test_openapi_merge),
        cmocka_unit_test(test_download_verdict), cmocka_unit_test(test_socket_bytes_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
