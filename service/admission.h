/*
 * admission.h - what a request must pass before work starts on it, in order: one unambiguous
 * meaning (strict framing and URI, no repeated query option), the token, the route and method,
 * the body limit, the route's own checks, the memory budget (reserved from the declared size
 * when the headers arrive), and once the body is complete an admission slot (at most workers +
 * queue depth analyses between a complete body and their answer) before the job goes to the
 * worker pool.
 *
 * Layering: connections.c calls these; these call the routes (route_*.c); the routes call
 * neither.
 *
 * Threading: called on the request's HTTP thread.
 */
#ifndef SVC_ADMISSION_H
#define SVC_ADMISSION_H

#include <microhttpd.h>
#include <stdbool.h>

struct svc_request;

/* A request refused from its headers whose declared body is at most this long, sent without
 * Expect: 100-continue, has its body read and dropped before the answer (admission.c refuse). */
#define SVC_REFUSED_READ_BYTES (16u << 20)

/* Remembers what is wrong with the request target as the client sent it (before
 * libmicrohttpd decodes it): control characters, raw or percent-encoded (%00 ends a C string,
 * so "/healthz%00.json" would read as "/healthz"), bad escapes, no leading '/'. */
void svc_admission_check_uri(struct svc_request *req, const char *raw_uri);

/*
 * Decides from the request's head alone (head.h: no socket, no libmicrohttpd), in order: headers
 * stored, URI, method, framing (Content-Length, Transfer-Encoding, Host, header names), CORS
 * preflight, token, route on this listener, method, repeated or too many query options, body
 * limit, readiness, and the route's own checks of Content-Type and query (svc_*_prepare).
 * True when the request may go on (req->opts and friends set; nothing reserved yet). False with
 * the answer set in req and either req->close_connection (send it now and close: the framing is
 * not trusted, or a body is announced that is not read: chunked, longer than
 * SVC_REFUSED_READ_BYTES, or awaited with Expect) or req->answer_pending (send it at the final
 * call, once a small declared body has been read and dropped).
 * Reserves nothing and sends nothing: a harness calls it as the server does.
 */
bool svc_admission_decide(struct svc_request *req);

/* The headers are in: svc_admission_decide(), then for an admitted POST the memory reservation
 * and body buffer of a declared length. A refusal is answered as svc_admission_decide says: at
 * once with Connection: close, or at the final call. */
enum MHD_Result svc_admission_headers(struct svc_request *req);

/* The body is complete (or there is none): answers GET routes and body errors, or admits the
 * request and hands it to the worker pool. Also the call that sends a finished job's answer. */
enum MHD_Result svc_admission_complete(struct svc_request *req);

/* True when the request announces a body (a Content-Length above 0, or a Transfer-Encoding). */
bool svc_request_has_body(const struct svc_request *req);

#endif /* SVC_ADMISSION_H */
