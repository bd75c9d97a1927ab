/*
 * cors.c - cross-origin requests: a dashboard served from another origin may call the API when
 * its origin is listed in --cors-origin (exact "scheme://host[:port]" entries, comma-separated,
 * or "*"). None is allowed by default.
 *
 * Preflights (OPTIONS with Origin and Access-Control-Request-Method) are answered 204 for every
 * route without the token: browsers never send credentials on a preflight. The request that
 * follows still needs the token where one is configured; its answer (errors included, so that
 * the page can read a 401) carries Access-Control-Allow-Origin with the request's own origin
 * and Vary: Origin. Without an allowed Origin, OPTIONS still answers 204 with Allow, and no
 * answer carries a CORS header.
 */
#include <string.h>

#include "server.h"

/* The request's Origin when the configuration allows it, else NULL. */
static const char *allowed_origin(const struct svc_request *req)
{
    const char *list = req->srv->cfg.cors_origin;
    const char *origin = svc_head_header(&req->head, "Origin");
    if (!origin || !*origin || !*list)
        return NULL;
    size_t len = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t entry = strcspn(p, ", ");
        if ((entry == 1 && *p == '*') || (entry == len && !strncmp(p, origin, len)))
            return origin;
        p += entry;
    }
    return NULL;
}

void svc_cors_preflight(struct svc_request *req)
{
    const struct svc_route_def *def = svc_route_def(req->route);
    svc_answer_body(req, MHD_HTTP_NO_CONTENT, &(struct ecg_buf){0}, NULL);
    req->allow = def->allow;
}

void svc_cors_headers(const struct svc_request *req, struct MHD_Response *response)
{
    if (!req->conn)
        return;
    const char *origin = allowed_origin(req);
    MHD_add_response_header(response, "Vary", "Origin");
    if (!origin)
        return;
    MHD_add_response_header(response, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(response, "Access-Control-Expose-Headers",
                            "Location, X-Request-Id, Retry-After");
    if (strcmp(req->method, "OPTIONS"))
        return;
    char methods[64];
    snprintf(methods, sizeof methods, "%s, OPTIONS", svc_route_def(req->route)->allow);
    MHD_add_response_header(response, "Access-Control-Allow-Methods", methods);
    MHD_add_response_header(response, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, Prefer, X-Request-Id");
    MHD_add_response_header(response, "Access-Control-Max-Age", "600");
}
