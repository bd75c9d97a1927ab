/*
 * routes.h - the HTTP route table: every path the service answers, its methods, and whether it
 * needs the bearer token. The router, the metrics labels, `--list-routes` and the OpenAPI test
 * all read this one table.
 *
 * Threading: the table is immutable.
 */
#ifndef SVC_ROUTES_H
#define SVC_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum svc_route {
    SVC_ROUTE_ANALYZE = 0,
    SVC_ROUTE_MODELS,
    SVC_ROUTE_MODEL,
    SVC_ROUTE_DECODE,
    SVC_ROUTE_RELOAD,
    SVC_ROUTE_INFO,
    SVC_ROUTE_HEALTHZ,
    SVC_ROUTE_READYZ,
    SVC_ROUTE_LIVE,
    SVC_ROUTE_READY,
    SVC_ROUTE_METRICS,
    SVC_ROUTE_OPENAPI,
    SVC_ROUTE_ANALYSES,         /* POST /v1/analyses */
    SVC_ROUTE_ANALYSIS,         /* GET, DELETE /v1/analyses/{id} */
    SVC_ROUTE_ANALYSIS_SIGNAL,
    SVC_ROUTE_ANALYSIS_BEAT,
    SVC_ROUTE_PAGE,             /* the dashboard at / */
    SVC_ROUTE_ASSET,            /* its files under /ui/ */
    SVC_ROUTE_UNKNOWN,     /* no such path: 404 (one metrics label for all of them) */
    SVC_ROUTE_COUNT
};

struct svc_route_def {
    enum svc_route route;
    const char *pattern;   /* "/v1/models/{name}"; also the metrics label */
    const char *method;    /* "GET" (answered on the HTTP thread) or "POST" (a job) */
    const char *allow;     /* the methods accepted; Allow header of 405 and OPTIONS answers */
    bool needs_token;      /* when a token is configured */
};

/* The definition of a route; SVC_ROUTE_UNKNOWN has pattern "other". */
const struct svc_route_def *svc_route_def(enum svc_route route);

/*
 * Matches a request path. Returns the route (SVC_ROUTE_UNKNOWN if none) and copies the {name}
 * segment of model routes into name (size name_size); a name that is not a valid model name
 * ([A-Za-z0-9._-], 1..63 characters, not starting with '.') makes the path unknown. Analyses
 * routes copy their {id} into name (svc_analyses_match), assets their {file}.
 */
enum svc_route svc_route_match(const char *path, char *name, size_t name_size);

/* Prints a route's details as indented "  KIND VALUE" lines (see svc_routes_print). */
typedef void (*svc_route_details_fn)(enum svc_route route, FILE *file);

/*
 * Prints every route for `ecgd serve --list-routes`: one "METHOD PATH" line per method it
 * accepts (HEAD included), each followed by the lines details (may be NULL) prints for it:
 * "  query NAME", "  content-type TYPE", "  content-encoding CODING", "  accept TYPE". The
 * OpenAPI test compares this with the document, both ways.
 */
void svc_routes_print(FILE *file, svc_route_details_fn details);

/* True when the route accepts method (one of its allow list). */
bool svc_route_allows(const struct svc_route_def *def, const char *method);

#endif /* SVC_ROUTES_H */
