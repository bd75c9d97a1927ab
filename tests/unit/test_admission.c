/*
 * test_admission.c - the decisions the service takes from a request's head alone
 * (svc_admission_decide, service/admission.h) and the head's lookups (service/head.h), without a
 * socket: framing refusals close the connection, the token is checked before 404/405, repeated
 * and unknown query options are refused by name, an admitted analysis carries its options.
 * tests/fuzz/fuzz_request.c drives the same function with millions of heads; the HTTP suites
 * check the same answers over real connections.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../service/admission.h"
#include "../../service/server.h"

#define TOKEN "t0ken"

struct decision {
    bool admitted;
    unsigned status;
    char code[64];
    bool close_connection, answer_pending;
    double fs_hz;
};

/* A copy of fields, as connections.c hands the request over a fresh array. */
static struct svc_field *fields_copy(const struct svc_field *fields, size_t n)
{
    struct svc_field *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (n)
        memcpy(copy, fields, n * sizeof *copy);
    return copy;
}

/* Decides one request: method, raw target, decoded path, headers and query arguments. */
static struct decision decide(struct svc_server *srv, const char *method, const char *raw,
                              const char *path, const struct svc_field *headers,
                              size_t n_headers, const struct svc_field *query, size_t n_query)
{
    struct svc_request *req = svc_request_create(srv, NULL, false);
    assert_non_null(req);
    svc_admission_check_uri(req, raw);
    struct svc_head head = {
        .method = method, .url = path, .version = "HTTP/1.1",
        .headers = fields_copy(headers, n_headers), .n_headers = n_headers,
        .query = fields_copy(query, n_query), .n_query = n_query,
    };
    svc_request_headers(req, &head);
    struct decision d = {.admitted = svc_admission_decide(req)};
    d.status = req->status;
    d.close_connection = req->close_connection;
    d.answer_pending = req->answer_pending;
    d.fs_hz = req->opts.fs_hz;
    const char *code = req->answer.data ? strstr(req->answer.data, "\"code\":\"") : NULL;
    if (code)
        snprintf(d.code, sizeof d.code, "%.*s", (int)strcspn(code + 8, "\""), code + 8);
    svc_request_free(req);
    return d;
}

static int setup(void **state)
{
    char *args[] = {"serve", "--model", "none", "--token", TOKEN, NULL};
    int exit_code = 0;
    struct svc_server *srv = svc_server_create(5, args, &exit_code);
    struct ecg_error err = {0};
    if (!srv || svc_registry_load(&srv->registry, &err) != ECG_OK)
        return -1;
    atomic_store(&srv->ready, true);
    *state = srv;
    return 0;
}

static int teardown(void **state)
{
    svc_server_destroy(*state);
    return 0;
}

static const struct svc_field authorized[] = {
    {"Host", "x"}, {"Authorization", "Bearer " TOKEN}, {"Content-Type", "text/csv"},
    {"Content-Length", "12"}};

static void test_head_lookup(void **state)
{
    (void)state;
    struct svc_field headers[] = {{"content-type", "text/csv"}, {"Content-Type", "x/y"}};
    struct svc_field query[] = {{"fs", NULL}, {"lead", "MLII"}, {"FS", "250"}};
    struct svc_head head = {.headers = headers, .n_headers = 2, .query = query, .n_query = 3};
    /* the first match, any case; a key without '=' reads as absent but is seen as a key */
    assert_string_equal(svc_head_header(&head, "CONTENT-TYPE"), "text/csv");
    assert_null(svc_head_header(&head, "Content-Length"));
    assert_null(svc_head_query(&head, "fs"));
    assert_string_equal(svc_head_query(&head, "Lead"), "MLII");
    const char *const known[] = {"fs", "lead", NULL};
    assert_string_equal(svc_head_unknown_query(&head, known), "FS");
    head.n_query = 2;
    assert_null(svc_head_unknown_query(&head, known));
}

static void test_framing(void **state)
{
    struct svc_server *srv = *state;
    struct svc_field twice[] = {{"Host", "x"}, {"Authorization", "Bearer " TOKEN},
                                {"Content-Length", "5"}, {"content-length", "6"}};
    struct decision d = decide(srv, "POST", "/v1/analyze", "/v1/analyze", twice, 4, NULL, 0);
    assert_false(d.admitted);
    assert_int_equal(d.status, 400);
    assert_string_equal(d.code, "conflicting_content_length");
    assert_true(d.close_connection);
    assert_false(d.answer_pending);

    struct svc_field both[] = {{"Host", "x"}, {"Content-Length", "5"},
                               {"Transfer-Encoding", "chunked"}};
    d = decide(srv, "POST", "/v1/analyze", "/v1/analyze", both, 3, NULL, 0);
    assert_string_equal(d.code, "content_length_with_transfer_encoding");
    assert_true(d.close_connection);

    struct svc_field gzip[] = {{"Host", "x"}, {"Transfer-Encoding", "gzip"}};
    d = decide(srv, "POST", "/v1/analyze", "/v1/analyze", gzip, 2, NULL, 0);
    assert_int_equal(d.status, 501);

    d = decide(srv, "GET", "/healthz%00.json", "/healthz", authorized, 1, NULL, 0);
    assert_int_equal(d.status, 400);
    assert_string_equal(d.code, "bad_uri");

    struct svc_field spaced[] = {{"Host", "x"}, {"Content-Length ", "5"}};
    d = decide(srv, "GET", "/healthz", "/healthz", spaced, 2, NULL, 0);
    assert_string_equal(d.code, "bad_header");
    struct svc_field no_host[] = {{"Accept", "*/*"}};
    d = decide(srv, "GET", "/healthz", "/healthz", no_host, 1, NULL, 0);
    assert_string_equal(d.code, "bad_host");
}

static void test_token_first(void **state)
{
    struct svc_server *srv = *state;
    const struct svc_field *anonymous = authorized; /* Host alone */
    /* without the token nothing tells whether a /v1 path exists or what it accepts */
    struct decision d = decide(srv, "GET", "/v1/nothing", "/v1/nothing", anonymous, 1, NULL, 0);
    assert_int_equal(d.status, 401);
    assert_true(d.answer_pending);
    d = decide(srv, "DELETE", "/v1/models", "/v1/models", anonymous, 1, NULL, 0);
    assert_int_equal(d.status, 401);
    /* with it: 404 and 405 */
    d = decide(srv, "GET", "/v1/nothing", "/v1/nothing", authorized, 2, NULL, 0);
    assert_int_equal(d.status, 404);
    d = decide(srv, "DELETE", "/v1/models", "/v1/models", authorized, 2, NULL, 0);
    assert_int_equal(d.status, 405);
    /* probes need none */
    d = decide(srv, "GET", "/healthz", "/healthz", anonymous, 1, NULL, 0);
    assert_true(d.admitted);
}

static void test_query(void **state)
{
    struct svc_server *srv = *state;
    struct svc_field repeated[] = {{"fs", "360"}, {"fs", "250"}};
    struct decision d = decide(srv, "POST", "/v1/analyze?fs=360&fs=250", "/v1/analyze",
                               authorized, 4, repeated, 2);
    assert_int_equal(d.status, 400);
    assert_string_equal(d.code, "repeated_parameter");
    /* a small declared body sent at once: read and dropped, answered at its end, kept alive */
    assert_false(d.close_connection);
    assert_true(d.answer_pending);

    /* the client waits for 100 Continue: answered now and closed, the body never sent */
    struct svc_field expecting[] = {{"Host", "x"}, {"Authorization", "Bearer " TOKEN},
                                    {"Content-Length", "12"}, {"Expect", "100-continue"}};
    d = decide(srv, "POST", "/v1/analyze?fs=360&fs=250", "/v1/analyze", expecting, 4,
               repeated, 2);
    assert_string_equal(d.code, "repeated_parameter");
    assert_true(d.close_connection);
    assert_false(d.answer_pending);
    /* a chunked body, or one longer than SVC_REFUSED_READ_BYTES: not read either */
    struct svc_field chunked[] = {{"Host", "x"}, {"Authorization", "Bearer " TOKEN},
                                  {"Transfer-Encoding", "chunked"}};
    d = decide(srv, "POST", "/v1/analyze?fs=360&fs=250", "/v1/analyze", chunked, 3, repeated,
               2);
    assert_true(d.close_connection);
    char length[32];
    snprintf(length, sizeof length, "%u", SVC_REFUSED_READ_BYTES + 1u);
    struct svc_field large[] = {{"Host", "x"}, {"Content-Length", length}};
    d = decide(srv, "POST", "/v1/analyze", "/v1/analyze", large, 2, NULL, 0);
    assert_int_equal(d.status, 401);
    assert_true(d.close_connection);
    snprintf(length, sizeof length, "%u", SVC_REFUSED_READ_BYTES);
    d = decide(srv, "POST", "/v1/analyze", "/v1/analyze", large, 2, NULL, 0);
    assert_int_equal(d.status, 401);
    assert_true(d.answer_pending);

    struct svc_field hex[] = {{"fs", "0x168"}};
    d = decide(srv, "POST", "/v1/analyze?fs=0x168", "/v1/analyze", authorized, 4, hex, 1);
    assert_string_equal(d.code, "bad_fs");
    struct svc_field unknown[] = {{"fz", "360"}};
    d = decide(srv, "POST", "/v1/analyze?fz=360", "/v1/analyze", authorized, 4, unknown, 1);
    assert_string_equal(d.code, "unknown_parameter");

    struct svc_field fine[] = {{"fs", "360"}, {"lead", "MLII"}};
    d = decide(srv, "POST", "/v1/analyze?fs=360&lead=MLII", "/v1/analyze", authorized, 4, fine,
               2);
    assert_true(d.admitted);
    assert_int_equal(d.status, 0);
    assert_true(d.fs_hz == 360.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_lookup),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_token_first),
        cmocka_unit_test(test_query),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
