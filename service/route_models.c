/*
 * route_models.c - GET /v1/models, GET /v1/models/{name} and POST /v1/models/{name}/decode.
 *
 * Decoding turns latent points into generated beats with the model's decoder: either the points
 * given ({"latent": [[x, y], ...]}) or a square grid over the latent plane ({"grid": {"n": 8,
 * "range": 3}}), the "grid of fake heartbeats" of the original notebook: n x n points, rows from
 * +range down to -range on the second axis, columns from -range to +range on the first.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "server.h"

#define DECODE_MAX_POINTS 4096u
#define DECODE_MAX_GRID 64u
#define DECODE_MAX_RANGE 100.0

void svc_models_list(struct svc_request *req)
{
    struct ecg_buf body = {0};
    svc_registry_write_list(&req->srv->registry, &body);
    svc_answer_body(req, MHD_HTTP_OK, &body, "application/json");
}

/* The model file entry named {name}, held; NULL with a 404 answer set ("none" has no file). */
static struct svc_model *model_of_path(struct svc_request *req)
{
    struct svc_model *entry = svc_registry_acquire(&req->srv->registry, req->model_name);
    if (entry && !entry->model) {
        svc_model_release(entry);
        entry = NULL;
    }
    if (!entry)
        svc_answer_error(req, MHD_HTTP_NOT_FOUND, "model_not_found", "no model named \"%s\"",
                         req->model_name);
    return entry;
}

void svc_model_get(struct svc_request *req)
{
    struct svc_model *entry = model_of_path(req);
    if (!entry)
        return;
    struct ecg_buf body = {0};
    ecg_model_write_json(entry->model, &body);
    ecg_buf_puts(&body, "\n");
    svc_model_release(entry);
    svc_answer_body(req, MHD_HTTP_OK, &body, "application/json");
}

bool svc_reload_prepare(struct svc_request *req)
{
    if (!req->srv->cfg.token[0]) {
        svc_answer_error(req, MHD_HTTP_FORBIDDEN, "forbidden",
                         "POST /v1/models/reload needs a server started with a token "
                         "(ECGD_TOKEN); without one, send SIGHUP to the process");
        return false;
    }
    return true;
}

void svc_reload_run(struct svc_request *req)
{
    struct ecg_buf body = {0};
    struct ecg_error err = {0};
    if (svc_registry_reload(&req->srv->registry, &body, &err) != ECG_OK) {
        ecg_buf_fini(&body);
        svc_answer_error(req, err.status == ECG_ERR_NOT_FOUND ? MHD_HTTP_CONFLICT
                                                              : svc_http_status(err.status),
                         err.code, "%s", err.message);
        return;
    }
    svc_answer_body(req, MHD_HTTP_OK, &body, "application/json");
}

bool svc_decode_prepare(struct svc_request *req)
{
    req->model = model_of_path(req);
    if (!req->model)
        return false;
    const char *type = svc_head_header(&req->head, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t media_len = type ? strcspn(type, ";") : 0;
    while (media_len && type[media_len - 1] == ' ')
        media_len--;
    if (!type || media_len != 16 || strncasecmp(type, "application/json", 16)) {
        svc_answer_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                         "decode takes application/json, got \"%s\"", type ? type : "(none)");
        return false;
    }
    return true;
}

/* Reads a finite number. */
static bool json_number(const cJSON *item, double *out)
{
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return false;
    *out = item->valuedouble;
    return true;
}

/* Fills *points (n x dim floats, malloc'd) from the request; error answer set on failure. */
static bool decode_points(struct svc_request *req, const cJSON *root, unsigned dim,
                          float **points, size_t *n)
{
    const cJSON *latent = cJSON_GetObjectItemCaseSensitive(root, "latent");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(root, "grid");
    if (!latent == !grid) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_decode_request",
                         "give exactly one of \"latent\" (a list of points) or \"grid\"");
        return false;
    }
    if (latent) {
        int count = cJSON_GetArraySize(latent);
        if (!cJSON_IsArray(latent) || count < 1 || (unsigned)count > DECODE_MAX_POINTS) {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_latent",
                             "\"latent\" must be a list of 1 to %u points", DECODE_MAX_POINTS);
            return false;
        }
        float *values = malloc((size_t)count * dim * sizeof *values);
        if (!values) {
            svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                             "%d latent points", count);
            return false;
        }
        size_t i = 0;
        const cJSON *point;
        cJSON_ArrayForEach(point, latent) {
            if (!cJSON_IsArray(point) || cJSON_GetArraySize(point) != (int)dim) {
                svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_latent",
                                 "latent[%zu]: expected a list of %u numbers", i, dim);
                free(values);
                return false;
            }
            size_t j = 0;
            const cJSON *coordinate;
            cJSON_ArrayForEach(coordinate, point) {
                double value;
                if (!json_number(coordinate, &value) || fabs(value) > 1e6) {
                    svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_latent",
                                     "latent[%zu][%zu]: expected a finite number of magnitude "
                                     "at most 1e6", i, j);
                    free(values);
                    return false;
                }
                values[i * dim + j++] = (float)value;
            }
            i++;
        }
        *points = values;
        *n = i;
        return true;
    }

    double grid_n = 0, range = 0;
    const cJSON *n_item = cJSON_IsObject(grid) ? cJSON_GetObjectItemCaseSensitive(grid, "n") : NULL;
    if (!json_number(n_item, &grid_n) ||
        grid_n != floor(grid_n) || grid_n < 1 || grid_n > DECODE_MAX_GRID) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_grid",
                         "\"grid\" needs an integer \"n\" in [1, %u]", DECODE_MAX_GRID);
        return false;
    }
    const cJSON *range_item = cJSON_GetObjectItemCaseSensitive(grid, "range");
    if (!range_item) {
        range = 3.0;
    } else if (!json_number(range_item, &range) || range <= 0 || range > DECODE_MAX_RANGE) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_grid",
                         "\"grid.range\" must be a number in (0, %g]", DECODE_MAX_RANGE);
        return false;
    }
    if (dim != 2) {
        svc_answer_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "grid_needs_2d",
                         "a grid covers a 2-D latent plane; model \"%s\" has %u dimensions",
                         req->model->name, dim);
        return false;
    }
    size_t side = (size_t)grid_n;
    float *values = malloc(side * side * 2 * sizeof *values);
    if (!values) {
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory", "grid %zu", side);
        return false;
    }
    for (size_t row = 0; row < side; row++)
        for (size_t col = 0; col < side; col++) {
            double step = side > 1 ? 2.0 * range / (double)(side - 1) : 0.0;
            double x = side > 1 ? -range + step * (double)col : 0.0;
            double y = side > 1 ? range - step * (double)row : 0.0;
            values[(row * side + col) * 2] = (float)x;
            values[(row * side + col) * 2 + 1] = (float)y;
        }
    *points = values;
    *n = side * side;
    return true;
}

static void put_floats(struct ecg_buf *body, const float *values, size_t n)
{
    ecg_buf_puts(body, "[");
    for (size_t i = 0; i < n; i++) {
        if (isfinite(values[i]))
            ecg_buf_printf(body, i ? ",%.7g" : "%.7g", (double)values[i]);
        else
            ecg_buf_puts(body, i ? ",null" : "null");
    }
    ecg_buf_puts(body, "]");
}

void svc_decode_run(struct svc_request *req)
{
    cJSON *root = NULL;
    float *points = NULL, *beats = NULL;
    const char *parse_end = NULL;
    root = cJSON_ParseWithLengthOpts(req->body ? req->body : "", req->body_len, &parse_end, 0);
    if (!cJSON_IsObject(root)) {
        size_t at = parse_end && req->body ? (size_t)(parse_end - req->body) : 0;
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_json",
                         "byte %zu: expected a JSON object", at);
        goto out;
    }
    /* One meaning: nothing after the document, no key given twice. */
    for (const char *t = parse_end; t < req->body + req->body_len; t++)
        if (*t != ' ' && *t != '\t' && *t != '\r' && *t != '\n') {
            svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_json",
                             "byte %zu: unexpected text after the JSON document",
                             (size_t)(t - req->body));
            goto out;
        }
    const char *repeated = svc_json_duplicate_key(root);
    if (repeated) {
        svc_answer_error(req, MHD_HTTP_BAD_REQUEST, "bad_json",
                         "key \"%.40s\" appears more than once in one object", repeated);
        goto out;
    }
    struct ecg_model_info info;
    ecg_model_get_info(req->model->model, &info);
    size_t n = 0;
    if (!decode_points(req, root, info.latent_dim, &points, &n))
        goto out;
    /* each beat: beat_len values (%.9g and a comma), its point and the brackets */
    if (!svc_answer_room(req, n * ((size_t)info.beat_len * 17 + 64) + 1024, false))
        goto out;
    beats = malloc(n * info.beat_len * sizeof *beats);
    if (!beats) {
        svc_answer_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
                         "%zu beats of %u samples", n, info.beat_len);
        goto out;
    }
    struct ecg_error err = {0};
    if (ecg_model_decode(req->model->model, points, n, beats, &err) != ECG_OK) {
        svc_answer_ecg_error(req, &err);
        goto out;
    }
    struct ecg_buf body = {0};
    ecg_buf_puts(&body, "{\"model\":");
    svc_json_string(&body, req->model->name);
    ecg_buf_printf(&body, ",\"beat_len\":%u,\"latent_dim\":%u,\"fs_hz\":%.9g,\"n\":%zu,"
                          "\"latent\":[", info.beat_len, info.latent_dim,
                   info.params.analysis_fs_hz, n);
    for (size_t i = 0; i < n; i++) {
        if (i)
            ecg_buf_puts(&body, ",");
        put_floats(&body, points + i * info.latent_dim, info.latent_dim);
    }
    ecg_buf_puts(&body, "],\"beats\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            ecg_buf_puts(&body, ",");
        put_floats(&body, beats + i * info.beat_len, info.beat_len);
    }
    ecg_buf_puts(&body, "]}\n");
    svc_answer_body(req, MHD_HTTP_OK, &body, "application/json");
out:
    cJSON_Delete(root);
    free(points);
    free(beats);
}
