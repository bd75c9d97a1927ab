/*
 * openapi.c - the OpenAPI 3.1 document of the service, assembled from parts embedded in the
 * binary.
 *
 * The source is service/openapi/ (*.json), one valid JSON document per part, each holding a slice
 * of the whole (base.json: openapi, info, servers, tags; paths-*.json: "paths" by topic;
 * components.json, schemas.json, responses.json: "components"). The assembler copies each part's
 * bytes into .rodata at build time (.incbin, paths relative to the repository root where make
 * runs), each followed by a NUL; the Makefile lists the parts as prerequisites of this object.
 * svc_openapi_build() parses the parts in the order of the table below and merges them into one
 * document: objects merge key by key, in the order keys first appear; any other value defined
 * by two parts is an error (a typo would otherwise silently win). The server builds it once at
 * start and serves the same bytes for its lifetime. tests/e2e/test_openapi.sh lints and checks
 * the served document; tests/unit/test_service.c checks the merge.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

#define OPENAPI_PART(symbol, file)                                                            \
    __asm__(".section .rodata\n"                                                              \
            ".type " #symbol ", @object\n" #symbol ":\n"                                      \
            ".incbin \"service/openapi/" file "\"\n"                                          \
            ".byte 0\n"                                                                       \
            ".previous\n");                                                                   \
    extern const char symbol[]

OPENAPI_PART(svc_openapi_base, "base.json");
OPENAPI_PART(svc_openapi_paths_analyze, "paths-analyze.json");
OPENAPI_PART(svc_openapi_paths_analyses, "paths-analyses.json");
OPENAPI_PART(svc_openapi_paths_operations, "paths-operations.json");
OPENAPI_PART(svc_openapi_components, "components.json");
OPENAPI_PART(svc_openapi_schemas, "schemas.json");
OPENAPI_PART(svc_openapi_responses, "responses.json");

/* In document order: the merged document's keys come in the order they first appear. */
static const struct svc_openapi_part parts[] = {
    {"base.json", svc_openapi_base},
    {"paths-analyze.json", svc_openapi_paths_analyze},
    {"paths-analyses.json", svc_openapi_paths_analyses},
    {"paths-operations.json", svc_openapi_paths_operations},
    {"components.json", svc_openapi_components},
    {"schemas.json", svc_openapi_schemas},
    {"responses.json", svc_openapi_responses},
};

/* Moves every member of from into into (from is left empty); where of the error message is the
 * path of the objects so far ("components/schemas"). */
static enum ecg_status merge_object(cJSON *into, cJSON *from, const char *part, char *where,
                                    size_t where_cap, struct ecg_error *err)
{
    while (from->child) {
        cJSON *item = cJSON_DetachItemViaPointer(from, from->child);
        cJSON *have = cJSON_GetObjectItemCaseSensitive(into, item->string);
        if (!have) {
            if (!cJSON_AddItemToObject(into, item->string, item)) {
                cJSON_Delete(item);
                return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                                "OpenAPI document: out of memory");
            }
            continue;
        }
        size_t at = strlen(where);
        snprintf(where + at, where_cap - at, "%s%s", at ? "/" : "", item->string);
        if (!cJSON_IsObject(have) || !cJSON_IsObject(item)) {
            cJSON_Delete(item);
            return ecg_fail(err, ECG_ERR_INTERNAL, "openapi_part",
                            "OpenAPI part %s: \"%s\" is defined twice (here and in an "
                            "earlier part, or twice here)",
                            part, where);
        }
        enum ecg_status st = merge_object(have, item, part, where, where_cap, err);
        cJSON_Delete(item);
        if (st != ECG_OK)
            return st;
        where[at] = 0;
    }
    return ECG_OK;
}

enum ecg_status svc_openapi_merge(const struct svc_openapi_part *list, size_t n,
                                  struct ecg_buf *out, struct ecg_error *err)
{
    enum ecg_status st = ECG_OK;
    cJSON *doc = cJSON_CreateObject(), *part = NULL;
    char *text = NULL;
    char where[256];
    if (!doc) {
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "OpenAPI document: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *end = NULL;
        part = cJSON_ParseWithOpts(list[i].text, &end, true);
        if (!part) {
            st = ecg_fail(err, ECG_ERR_INTERNAL, "openapi_part",
                          "OpenAPI part %s is not valid JSON (byte %td)", list[i].name,
                          end ? end - list[i].text : (ptrdiff_t)0);
            goto out;
        }
        if (!cJSON_IsObject(part)) {
            st = ecg_fail(err, ECG_ERR_INTERNAL, "openapi_part",
                          "OpenAPI part %s is not a JSON object", list[i].name);
            goto out;
        }
        where[0] = 0;
        st = merge_object(doc, part, list[i].name, where, sizeof where, err);
        if (st != ECG_OK)
            goto out;
        cJSON_Delete(part);
        part = NULL;
    }
    text = cJSON_Print(doc);
    if (!text) {
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "OpenAPI document: out of memory");
        goto out;
    }
    ecg_buf_puts(out, text);
    ecg_buf_puts(out, "\n");
    if (out->failed)
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "OpenAPI document: out of memory");
out:
    free(text);
    cJSON_Delete(part);
    cJSON_Delete(doc);
    return st;
}

enum ecg_status svc_openapi_build(struct ecg_buf *out, struct ecg_error *err)
{
    return svc_openapi_merge(parts, sizeof parts / sizeof parts[0], out, err);
}
