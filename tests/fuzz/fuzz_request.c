/*
 * fuzz_request.c - libFuzzer harness for the HTTP request path's decisions: everything the
 * service decides from a request's head (service/admission.h, svc_admission_decide: URI, method,
 * framing, CORS preflight, token, route, method, repeated query options, body limit, readiness,
 * and each route's Content-Type and query checks), in process, without sockets or threads. The
 * service's own code runs on a head (service/head.h) as connections.c would hand it over;
 * fuzz_http drives the whole server over sockets, at a thousandth of the speed.
 *
 * Input: one option byte, then a request as text: a request line "METHOD TARGET [VERSION]" and
 * header lines "Name: value" up to an empty line (CR before LF dropped; the body, if any, and
 * the version text ignored).
 * Option bits: 1 a token is configured, 2 the admin listener, 4 the models still loading,
 * 8 HTTP/1.0 (else HTTP/1.1). The target is split as libmicrohttpd splits it: the path before
 * '?', percent-decoded by libmicrohttpd's own MHD_http_unescape; the query's arguments at '&',
 * each key from its value at the first '=' (no '=': a NULL value), both decoded likewise. A
 * header line without ':' is dropped (libmicrohttpd refuses the request before the service
 * sees it); a header value loses the blanks around it, as libmicrohttpd trims them.
 *
 * Checked after each decision (a broken rule traps):
 *   - a refusal has its answer: 204 for a preflight, else a 4xx/5xx whose body is the JSON error
 *     {"error":{"status","code","message"}} with the same status; it is either sent now with
 *     Connection: close or left pending for the final call, never both or neither;
 *   - with a token configured and no "Bearer <token>" sent, a /v1 path is answered 401, 204 (a
 *     preflight), or one of the framing refusals decided before the token: never a 404, 405 or
 *     anything that tells what the path accepts;
 *   - an admitted request has a known route that allows its method (on the admin listener only
 *     probes and metrics), at most one Content-Length and no Transfer-Encoding but chunked
 *     beside none, no query key twice, a declared length within its body limit, and for an
 *     analysis a model, a format and a sampling rate that is 0 or positive and finite; its
 *     memory estimate (svc_request_estimate) covers at least its declared body.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admission.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TOKEN "s3cret-token"

/* [0]: no token, no CORS origin; [1]: a token and an allowed origin. */
static struct svc_server *servers[2];

#define FAIL(why)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "fuzz_request: %s\n", why);                                            \
        __builtin_trap();                                                                      \
    } while (0)

static struct svc_server *server_start(char **args, int n)
{
    int exit_code = 0;
    struct svc_server *srv = svc_server_create(n, args, &exit_code);
    struct ecg_error err = {0};
    if (!srv || svc_registry_load(&srv->registry, &err) != ECG_OK)
        FAIL("the server object could not be created");
    atomic_store(&srv->ready, true);
    return srv;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char *plain[] = {"serve", "--model", "none", "--max-body-mb", "64", "--memory-budget-mb",
                     "512", NULL};
    char *guarded[] = {"serve", "--model", "none", "--max-body-mb", "64", "--memory-budget-mb",
                       "512", "--token", TOKEN, "--cors-origin", "https://a.example", NULL};
    servers[0] = server_start(plain, (int)(sizeof plain / sizeof plain[0]) - 1);
    servers[1] = server_start(guarded, (int)(sizeof guarded / sizeof guarded[0]) - 1);
    return 0;
}

/* Up to this many headers and query arguments are kept; more are dropped (libmicrohttpd's
 * 256 KiB connection pool holds fewer real ones than the fuzzer's 4 KiB inputs allow anyway). */
#define MAX_FIELDS 64

/* The next line of [*p, end) without its CR LF or LF, NUL-terminated in place. NULL at the end. */
static char *next_line(char **p, char *end)
{
    if (*p >= end)
        return NULL;
    char *line = *p;
    char *lf = memchr(line, '\n', (size_t)(end - line));
    char *stop = lf ? lf : end;
    *p = lf ? lf + 1 : end;
    if (stop > line && stop[-1] == '\r')
        stop--;
    *stop = '\0';
    return line;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        s[--len] = '\0';
    return s;
}

/* Splits the query (NUL-terminated, written in place) into fields, decoded. */
static size_t split_query(char *query, struct svc_field *fields, size_t cap)
{
    size_t n = 0;
    while (query && n < cap) {
        char *amp = strchr(query, '&');
        if (amp)
            *amp = '\0';
        if (*query) {
            char *eq = strchr(query, '=');
            if (eq) {
                *eq = '\0';
                MHD_http_unescape(eq + 1);
            }
            MHD_http_unescape(query);
            fields[n].name = query;
            fields[n].value = eq ? eq + 1 : NULL;
            n++;
        }
        query = amp ? amp + 1 : NULL;
    }
    return n;
}

/* The number of headers named name (any case). */
static unsigned header_count(const struct svc_head *head, const char *name)
{
    unsigned count = 0;
    for (size_t i = 0; i < head->n_headers; i++)
        count += !strcasecmp(head->headers[i].name, name);
    return count;
}

/* The refusals decided before the token (the framing is not trusted, or no memory). */
static bool decided_before_token(const char *code)
{
    static const char *const codes[] = {
        "out_of_memory", "bad_uri", "bad_method", "bad_header", "bad_host",
        "conflicting_content_length", "content_length_with_transfer_encoding",
        "unsupported_transfer_encoding", "bad_content_length", NULL};
    for (const char *const *c = codes; *c; c++)
        if (!strcmp(code, *c))
            return true;
    return false;
}

/* Checks a refusal's answer; leaves its error code in code ("" for a 204). */
static void check_refusal(const struct svc_request *req, char *code, size_t code_size)
{
    if (req->close_connection == req->answer_pending)
        FAIL("a refusal is neither sent now nor pending, or both");
    code[0] = '\0';
    if (req->status == 204)
        return;
    if (req->status < 400 || req->status > 599)
        FAIL("a refusal with a status outside 4xx/5xx");
    if (!req->answer.data || req->answer.failed)
        FAIL("a refusal without its JSON body");
    cJSON *root = cJSON_ParseWithLength(req->answer.data, req->answer.len);
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(error, "status");
    const cJSON *code_item = cJSON_GetObjectItemCaseSensitive(error, "code");
    const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
    if (!cJSON_IsNumber(status) || status->valuedouble != (double)req->status ||
        !cJSON_IsString(code_item) || !code_item->valuestring[0] || !cJSON_IsString(message))
        FAIL("a refusal's body is not the JSON error of its status");
    snprintf(code, code_size, "%s", code_item->valuestring);
    cJSON_Delete(root);
}

static bool on_admin_port(enum svc_route route)
{
    return route == SVC_ROUTE_HEALTHZ || route == SVC_ROUTE_READYZ || route == SVC_ROUTE_LIVE ||
           route == SVC_ROUTE_READY || route == SVC_ROUTE_METRICS;
}

static void check_admitted(const struct svc_request *req)
{
    const struct svc_head *head = &req->head;
    if (req->route == SVC_ROUTE_UNKNOWN || !svc_route_allows(svc_route_def(req->route),
                                                             req->method))
        FAIL("admitted without a route that takes its method");
    if (req->admin && !on_admin_port(req->route))
        FAIL("the admin listener admitted a route other than probes and metrics");
    unsigned lengths = header_count(head, "Content-Length");
    unsigned encodings = header_count(head, "Transfer-Encoding");
    const char *encoding = svc_head_header(head, "Transfer-Encoding");
    if (lengths > 1 || (lengths && encodings) || encodings > 1 ||
        (encoding && strcasecmp(encoding, "chunked")))
        FAIL("admitted with an ambiguous framing");
    for (size_t i = 0; i < head->n_query; i++)
        for (size_t k = 0; k < i; k++)
            if (!strcmp(head->query[i].name, head->query[k].name))
                FAIL("admitted with a query option given twice");
    if (req->has_length && req->declared_bytes > req->body_limit)
        FAIL("admitted with a declared body over its limit");
    if (req->route == SVC_ROUTE_ANALYZE || req->route == SVC_ROUTE_ANALYSES) {
        if (!req->model || !(req->opts.fs_hz >= 0) || !isfinite(req->opts.fs_hz))
            FAIL("an admitted analysis without a model or with a bad rate");
        size_t declared = (size_t)req->declared_bytes;
        if (svc_request_estimate(req, declared) < declared)
            FAIL("a memory estimate below the body it is for");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t options = data[0];
    struct svc_server *srv = servers[options & 1];
    atomic_store(&srv->ready, !(options & 4));

    /* A NUL-terminated copy the head's strings point into (an exact size: ASan sees overruns). */
    size_t len = size - 1;
    char *text = malloc(len + 1);
    /* at most one header per line, one query argument per '&' (and one more) */
    size_t lines = 1, amps = 1;
    for (size_t i = 1; i < size; i++) {
        lines += data[i] == '\n';
        amps += data[i] == '&';
    }
    struct svc_field *headers = malloc((lines < MAX_FIELDS ? lines : MAX_FIELDS) * sizeof *headers);
    struct svc_field *query = malloc((amps < MAX_FIELDS ? amps : MAX_FIELDS) * sizeof *query);
    struct svc_request *req = svc_request_create(srv, NULL, (options & 2) != 0);
    if (!text || !headers || !query || !req)
        FAIL("out of memory");
    memcpy(text, data + 1, len);
    text[len] = '\0';

    char *p = text, *end = text + len;
    char *request_line = next_line(&p, end);
    char *space = request_line ? strchr(request_line, ' ') : NULL;
    if (space)
        *space = '\0';
    char *target = space ? space + 1 : text + len; /* no target: the copy's final NUL */
    char *version_text = strchr(target, ' '); /* " HTTP/1.1": the option bit says which */
    if (version_text)
        *version_text = '\0';
    size_t n_headers = 0;
    for (char *line; (line = next_line(&p, end)) && *line && n_headers < MAX_FIELDS &&
                     n_headers < lines;) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        headers[n_headers].name = line;
        headers[n_headers].value = trim(colon + 1);
        n_headers++;
    }

    /* The raw target first (the URI callback's check), then its decoded parts. */
    svc_admission_check_uri(req, target);
    char *question = strchr(target, '?');
    if (question)
        *question = '\0';
    size_t n_query = split_query(question ? question + 1 : NULL, query,
                                 amps < MAX_FIELDS ? amps : MAX_FIELDS);
    MHD_http_unescape(target);

    struct svc_head head = {
        .method = request_line ? request_line : "",
        .url = target,
        .version = (options & 8) ? "HTTP/1.0" : "HTTP/1.1",
        .headers = headers,
        .n_headers = n_headers,
        .query = query,
        .n_query = n_query,
    };
    svc_request_headers(req, &head);
    bool admitted = svc_admission_decide(req);

    const char *auth = svc_head_header(&req->head, "Authorization");
    bool v1 = !strncmp(req->head.url, "/v1/", 4) || !strcmp(req->head.url, "/v1");
    bool without_token = (options & 1) && v1 && !(auth && strstr(auth, TOKEN));
    char code[64];
    if (admitted) {
        check_admitted(req);
        if (without_token)
            FAIL("a /v1 path admitted without the token");
    } else {
        check_refusal(req, code, sizeof code);
        if (without_token && req->status != 204 && req->status != 401 &&
            !decided_before_token(code))
            FAIL("a /v1 path answered without the token by something other than 401");
    }
    svc_request_free(req);
    free(text);
    return 0;
}
