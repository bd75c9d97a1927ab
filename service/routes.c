/*
 * routes.c - the route table and path matching.
 */
#include <string.h>

#include "routes.h"
#include "server.h"

static const struct svc_route_def route_defs[SVC_ROUTE_COUNT] = {
    [SVC_ROUTE_ANALYZE] = {SVC_ROUTE_ANALYZE, "/v1/analyze", "POST", "POST", true},
    [SVC_ROUTE_MODELS] = {SVC_ROUTE_MODELS, "/v1/models", "GET", "GET, HEAD", true},
    [SVC_ROUTE_MODEL] = {SVC_ROUTE_MODEL, "/v1/models/{name}", "GET", "GET, HEAD", true},
    [SVC_ROUTE_DECODE] = {SVC_ROUTE_DECODE, "/v1/models/{name}/decode", "POST", "POST", true},
    [SVC_ROUTE_RELOAD] = {SVC_ROUTE_RELOAD, "/v1/models/reload", "POST", "POST", true},
    [SVC_ROUTE_INFO] = {SVC_ROUTE_INFO, "/v1/info", "GET", "GET, HEAD", true},
    [SVC_ROUTE_HEALTHZ] = {SVC_ROUTE_HEALTHZ, "/healthz", "GET", "GET, HEAD", false},
    [SVC_ROUTE_READYZ] = {SVC_ROUTE_READYZ, "/readyz", "GET", "GET, HEAD", false},
    [SVC_ROUTE_LIVE] = {SVC_ROUTE_LIVE, "/v2/health/live", "GET", "GET, HEAD", false},
    [SVC_ROUTE_READY] = {SVC_ROUTE_READY, "/v2/health/ready", "GET", "GET, HEAD", false},
    [SVC_ROUTE_METRICS] = {SVC_ROUTE_METRICS, "/metrics", "GET", "GET, HEAD", false},
    [SVC_ROUTE_OPENAPI] = {SVC_ROUTE_OPENAPI, "/openapi.json", "GET", "GET, HEAD", false},
    [SVC_ROUTE_ANALYSES] = {SVC_ROUTE_ANALYSES, "/v1/analyses", "POST", "POST", true},
    [SVC_ROUTE_ANALYSIS] = {SVC_ROUTE_ANALYSIS, "/v1/analyses/{id}", "GET", "GET, HEAD, DELETE",
                            true},
    [SVC_ROUTE_ANALYSIS_SIGNAL] = {SVC_ROUTE_ANALYSIS_SIGNAL, "/v1/analyses/{id}/signal", "GET",
                                   "GET, HEAD", true},
    [SVC_ROUTE_ANALYSIS_BEAT] = {SVC_ROUTE_ANALYSIS_BEAT, "/v1/analyses/{id}/beats/{k}", "GET",
                                 "GET, HEAD", true},
    [SVC_ROUTE_PAGE] = {SVC_ROUTE_PAGE, "/", "GET", "GET, HEAD", false},
    [SVC_ROUTE_ASSET] = {SVC_ROUTE_ASSET, "/ui/{file}", "GET", "GET, HEAD", false},
    [SVC_ROUTE_UNKNOWN] = {SVC_ROUTE_UNKNOWN, "other", "", "", false},
};

const struct svc_route_def *svc_route_def(enum svc_route route)
{
    if ((unsigned)route >= SVC_ROUTE_COUNT)
        route = SVC_ROUTE_UNKNOWN;
    return &route_defs[route];
}

static bool valid_model_name(const char *name, size_t len)
{
    if (len == 0 || len > 63 || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

bool svc_route_allows(const struct svc_route_def *def, const char *method)
{
    size_t len = strlen(method);
    for (const char *p = def->allow; len && (p = strstr(p, method)); p += len)
        if ((p == def->allow || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0'))
            return true;
    return false;
}

enum svc_route svc_route_match(const char *path, char *name, size_t name_size)
{
    static const enum svc_route fixed[] = {
        SVC_ROUTE_ANALYZE, SVC_ROUTE_MODELS, SVC_ROUTE_INFO,    SVC_ROUTE_HEALTHZ,
        SVC_ROUTE_READYZ,  SVC_ROUTE_LIVE,   SVC_ROUTE_READY,   SVC_ROUTE_METRICS,
        SVC_ROUTE_OPENAPI, SVC_ROUTE_ANALYSES, SVC_ROUTE_PAGE,
        SVC_ROUTE_RELOAD, /* before /v1/models/{name}: "reload" is reserved */
    };
    if (name_size)
        name[0] = '\0';
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(path, route_defs[fixed[i]].pattern))
            return fixed[i];
    if (!strncmp(path, "/v1/analyses/", 13))
        return svc_analyses_match(path, name, name_size);
    static const char ui[] = "/ui/";
    if (!strncmp(path, ui, sizeof ui - 1)) {
        const char *file = path + sizeof ui - 1;
        size_t len = strnlen(file, name_size);
        if (!valid_model_name(file, len) || len >= name_size)
            return SVC_ROUTE_UNKNOWN;
        memcpy(name, file, len);
        name[len] = '\0';
        return SVC_ROUTE_ASSET;
    }

    static const char prefix[] = "/v1/models/";
    if (strncmp(path, prefix, sizeof prefix - 1))
        return SVC_ROUTE_UNKNOWN;
    const char *segment = path + sizeof prefix - 1;
    const char *slash = strchr(segment, '/');
    size_t len = slash ? (size_t)(slash - segment) : strlen(segment);
    enum svc_route route;
    if (!slash)
        route = SVC_ROUTE_MODEL;
    else if (!strcmp(slash, "/decode"))
        route = SVC_ROUTE_DECODE;
    else
        return SVC_ROUTE_UNKNOWN;
    if (!valid_model_name(segment, len) || len >= name_size)
        return SVC_ROUTE_UNKNOWN;
    memcpy(name, segment, len);
    name[len] = '\0';
    return route;
}

void svc_routes_print(FILE *file, svc_route_details_fn details)
{
    for (int route = 0; route < SVC_ROUTE_UNKNOWN; route++) {
        const char *allow = route_defs[route].allow;
        while (*allow) {
            size_t len = strcspn(allow, ", ");
            fprintf(file, "%.*s %s\n", (int)len, allow, route_defs[route].pattern);
            allow += len;
            allow += strspn(allow, ", ");
        }
        if (details)
            details((enum svc_route)route, file);
    }
}
