/*
 * http.c - answers: the status mapping, JSON error bodies, sending, and the token check.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server.h"

unsigned svc_http_status(enum ecg_status status)
{
    switch (status) {
    case ECG_OK:
        return MHD_HTTP_OK;
    case ECG_ERR_ARG:
    case ECG_ERR_FORMAT:
        return MHD_HTTP_BAD_REQUEST;
    case ECG_ERR_NOT_FOUND:
        return MHD_HTTP_NOT_FOUND;
    case ECG_ERR_TOO_LARGE:
        return MHD_HTTP_CONTENT_TOO_LARGE;
    case ECG_ERR_UNSUPPORTED:
        return MHD_HTTP_UNPROCESSABLE_CONTENT;
    case ECG_ERR_BUSY:
    case ECG_ERR_DEVICE:
    case ECG_ERR_DEVICE_OOM:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case ECG_ERR_MODEL:
    case ECG_ERR_INTERNAL:
    case ECG_ERR_IO:
    case ECG_ERR_NOMEM:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    case ECG_STATUS_COUNT:
        break;
    }
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

/* Resets the answer fields of req (a request answers once, but an error may replace a
 * half-built success). */
static void answer_reset(struct svc_request *req)
{
    ecg_buf_fini(&req->answer);
    req->status = 0;
    req->content_type = NULL;
    req->allow = NULL;
    req->retry_after_s = 0;
    req->www_authenticate = false;
    /* close_connection stays: it is about the connection, not the answer */
    req->location[0] = '\0';
    req->cache_control = NULL;
    req->error_code[0] = '\0';
}

void svc_answer_error(struct svc_request *req, unsigned http_status, const char *code,
                      const char *fmt, ...)
{
    char message[ECG_ERROR_MSG_LEN + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);

    answer_reset(req);
    req->status = http_status;
    req->content_type = "application/json";
    snprintf(req->error_code, sizeof req->error_code, "%s", code);
    cJSON *root = cJSON_CreateObject();
    cJSON *error = cJSON_AddObjectToObject(root, "error");
    char *text = NULL;
    if (error && cJSON_AddNumberToObject(error, "status", http_status) &&
        cJSON_AddStringToObject(error, "code", code) &&
        cJSON_AddStringToObject(error, "message", message))
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (text) {
        ecg_buf_puts(&req->answer, text);
        ecg_buf_puts(&req->answer, "\n");
        cJSON_free(text);
    }
    /* When memory is that short the answer goes out with an empty body (svc_answer_send). */
}

void svc_answer_ecg_error(struct svc_request *req, const struct ecg_error *err)
{
    unsigned http_status = svc_http_status(err->status);
    svc_answer_error(req, http_status, err->code[0] ? err->code : ecg_status_str(err->status),
                     "%s", err->message[0] ? err->message : ecg_status_str(err->status));
    if (http_status == MHD_HTTP_SERVICE_UNAVAILABLE)
        req->retry_after_s = 1;
}

void svc_answer_body(struct svc_request *req, unsigned http_status, struct ecg_buf *body,
                     const char *content_type)
{
    answer_reset(req);
    req->status = http_status;
    req->content_type = content_type;
    req->answer = *body;
    memset(body, 0, sizeof *body);
}

/*
 * An answer stays in memory until the client has read it, however slowly it reads, so one
 * larger than SVC_ANSWER_UNCOUNTED_BYTES is held in the memory budget until the request ends
 * (svc_request_free releases req->reserved_bytes): an analysis's answer within the reservation
 * it already holds, any other answer (a signal window, a kept analysis again, a decoded grid:
 * tiny requests, large answers) by a reservation of its own. Where that does not fit, a request
 * that is safe to repeat (GET, HEAD, a decode) is answered 503 memory_busy instead and its
 * answer freed; an analysis's answer is never thrown away: it is counted all the same, and the
 * requests after it find the budget full. Smaller answers are bounded by the connection limit
 * and covered by the budget's headroom, like libmicrohttpd's own buffers.
 */
#define ANSWER_BUSY_MESSAGE                                                                   \
    "the answer (%zu bytes) does not fit the memory budget now, which answers not yet read by " \
    "their clients hold; retry later"

bool svc_answer_room(struct svc_request *req, size_t estimate_bytes, bool keep)
{
    const size_t before = req->reserved_bytes;
    if (estimate_bytes <= SVC_ANSWER_UNCOUNTED_BYTES)
        return true;
    if (keep)
        svc_memory_count(&req->srv->memory, &req->reserved_bytes, estimate_bytes);
    if (keep ||
        svc_memory_reserve_up_to(&req->srv->memory, &req->reserved_bytes, estimate_bytes)) {
        req->answer_reserved = true;
        req->answer_floor = before;
        return true;
    }
    svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "memory_busy", ANSWER_BUSY_MESSAGE,
                     estimate_bytes);
    req->retry_after_s = 1;
    return false;
}

static void answer_reserve(struct svc_request *req, size_t len)
{
    struct svc_server *srv = req->srv;
    if (req->answer_reserved && len < req->reserved_bytes) {
        /* an estimate held while the answer was built: down to what it came to (not below
         * what the request held before it) */
        size_t keep = len > SVC_ANSWER_UNCOUNTED_BYTES ? len : 0;
        keep = keep > req->answer_floor ? keep : req->answer_floor;
        if (keep < req->reserved_bytes) {
            svc_memory_release(&srv->memory, req->reserved_bytes - keep);
            req->reserved_bytes = keep;
        }
        return;
    }
    if (len <= SVC_ANSWER_UNCOUNTED_BYTES || len <= req->reserved_bytes)
        return;
    if (svc_memory_reserve_up_to(&srv->memory, &req->reserved_bytes, len))
        return;
    bool repeatable = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD") ||
                      req->route == SVC_ROUTE_DECODE;
    if (!repeatable) {
        svc_memory_count(&srv->memory, &req->reserved_bytes, len);
        return;
    }
    svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "memory_busy", ANSWER_BUSY_MESSAGE, len);
    req->retry_after_s = 1;
}

enum MHD_Result svc_answer_send(struct svc_request *req)
{
    if (req->answer.failed) {
        ecg_buf_fini(&req->answer);
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "the answer could not be built: out of memory");
    }
    answer_reserve(req, req->answer.data ? req->answer.len : 0);
    size_t len = req->answer.data ? req->answer.len : 0;
    struct MHD_Response *response;
    if (len) {
        /* The answer's buffer goes to libmicrohttpd as is: no copy of a big beat table. */
        response = MHD_create_response_from_buffer_with_free_callback(len, req->answer.data, free);
        if (response)
            memset(&req->answer, 0, sizeof req->answer);
    } else {
        response = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!response)
        return MHD_NO;
    /* A header that cannot be added (out of memory) is not worth failing the answer. */
    if (req->content_type)
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, req->content_type);
    MHD_add_response_header(response, "X-Request-Id", req->id);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL,
                            req->cache_control ? req->cache_control : "no-store");
    if (req->allow)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, req->allow);
    if (req->retry_after_s) {
        char seconds[16];
        snprintf(seconds, sizeof seconds, "%u", req->retry_after_s);
        MHD_add_response_header(response, MHD_HTTP_HEADER_RETRY_AFTER, seconds);
    }
    if (req->location[0])
        MHD_add_response_header(response, MHD_HTTP_HEADER_LOCATION, req->location);
    svc_cors_headers(req, response);
    if (req->www_authenticate)
        MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"ecgd\"");
    if (req->close_connection || atomic_load(&req->srv->draining))
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    req->bytes_out = len;
    /* Before queueing: once queued, the request may end (and its connection move on) at once. */
    svc_conn_set_phase(req->tracked, SVC_CONN_SENDING);
    enum MHD_Result queued = MHD_queue_response(req->conn, req->status, response);
    MHD_destroy_response(response);
    req->phase = SVC_PHASE_ANSWERED;
    return queued;
}

bool svc_token_ok(const struct svc_request *req)
{
    const char *expected = req->srv->cfg.token;
    size_t expected_len = strlen(expected);
    if (!expected_len)
        return true;
    const char *header = svc_head_header(&req->head, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!header || strncasecmp(header, "Bearer ", 7))
        return false;
    const char *given = header + 7;
    while (*given == ' ')
        given++;
    size_t given_len = strlen(given);
    while (given_len && given[given_len - 1] == ' ')
        given_len--;
    /* Constant time in the given token: every byte of the expected one is compared, whatever
     * the given one holds, and the lengths are folded into the same difference. */
    volatile unsigned char diff = (unsigned char)(given_len != expected_len);
    for (size_t i = 0; i < expected_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)expected[i]);
    }
    return diff == 0;
}

bool svc_parse_decimal(const char *text, double *out)
{
    const char *p = text;
    size_t digits = strspn(p, "0123456789");
    if (!digits)
        return false;
    p += digits;
    if (*p == '.') {
        size_t fraction = strspn(p + 1, "0123456789");
        if (!fraction)
            return false;
        p += 1 + fraction;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        size_t exponent = strspn(p, "0123456789");
        if (!exponent)
            return false;
        p += exponent;
    }
    if (*p)
        return false;
    errno = 0;
    double value = strtod(text, NULL);
    if (errno || !isfinite(value))
        return false;
    *out = value;
    return true;
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first repeated key of one object (sorted, so n log n however many keys), or NULL. */
static const char *object_duplicate_key(const cJSON *object, bool *no_memory)
{
    size_t n = 0;
    for (const cJSON *a = object->child; a; a = a->next)
        n++;
    if (n < 2)
        return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        *no_memory = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *a = object->child; a; a = a->next)
        keys[i++] = a->string ? a->string : "";
    qsort(keys, n, sizeof *keys, compare_keys);
    const char *found = NULL;
    for (i = 1; i < n && !found; i++)
        if (!strcmp(keys[i - 1], keys[i]))
            found = keys[i];
    free(keys);
    return found;
}

const char *svc_json_duplicate_key(const cJSON *item)
{
    bool no_memory = false;
    for (; item; item = item->next) {
        if (cJSON_IsObject(item)) {
            const char *found = object_duplicate_key(item, &no_memory);
            if (found)
                return found;
            if (no_memory)
                return "(out of memory while checking keys)";
        }
        if (item->child) {
            const char *found = svc_json_duplicate_key(item->child);
            if (found)
                return found;
        }
    }
    return NULL;
}
