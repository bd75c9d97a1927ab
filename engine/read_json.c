/*
 * read_json.c - JSON input: {"fs": 360, "signal": [0.1, 0.2, ...], "lead": "MLII"}.
 *
 * Parsed with cJSON. "signal" (a flat array of numbers) is required; "fs" (or "fs_hz") gives the
 * rate and wins over opts->fs_hz, which is needed only when the document has none; "lead" is
 * an optional label. A bare array [0.1, 0.2, ...] is accepted as the signal alone. Other keys
 * are ignored. Numbers must be finite and within the float range; each is rounded once from the
 * double cJSON reads to float.
 *
 * Threading: cJSON_ParseWithLengthOpts reports the error position through its own output
 * argument, so the reader never touches cJSON's global error pointer.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ecg.h"
#include "read_internal.h"

/* Line and column (1-based) of byte offset `at`. */
static void position_of(const char *buf, size_t at, size_t *line, size_t *column)
{
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < at; i++) {
        if (buf[i] == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

static const char *type_name(const cJSON *item)
{
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsArray(item))
        return "an array";
    if (cJSON_IsObject(item))
        return "an object";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsNumber(item))
        return "a number";
    return "something else";
}

enum ecg_status read_json(const char *buf, size_t len, const struct ecg_read_opts *opts,
                          struct ecg_signal *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    cJSON *doc = NULL;
    float *samples = NULL;
    const char *parse_end = NULL;

    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "JSON input is empty");
    doc = cJSON_ParseWithLengthOpts(buf, len, &parse_end, false);
    if (!doc) {
        size_t at =
            parse_end && parse_end >= buf && parse_end <= buf + len ? (size_t)(parse_end - buf) : 0;
        size_t line, column;
        position_of(buf, at, &line, &column);
        char q[4 * READ_QUOTE_MAX + 8];
        read_quote(q, sizeof q, buf + at, len - at);
        status =
            ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                     "JSON: syntax error at line %zu, column %zu, near \"%s\"", line, column, q);
        goto out;
    }
    /* Only whitespace may follow the document. */
    for (const char *t = parse_end; t && t < buf + len; t++) {
        if (*t != ' ' && *t != '\t' && *t != '\r' && *t != '\n') {
            size_t line, column;
            position_of(buf, (size_t)(t - buf), &line, &column);
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                              "JSON: unexpected text after the document at line %zu, column %zu",
                              line, column);
            goto out;
        }
    }

    const cJSON *signal = NULL;
    double fs_hz = 0;
    if (cJSON_IsArray(doc)) {
        signal = doc;
    } else if (cJSON_IsObject(doc)) {
        signal = cJSON_GetObjectItemCaseSensitive(doc, "signal");
        if (!signal) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                              "JSON: no \"signal\" array in the document");
            goto out;
        }
        if (!cJSON_IsArray(signal)) {
            status =
                ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                         "JSON: \"signal\" must be an array of numbers, got %s", type_name(signal));
            goto out;
        }
        const cJSON *fs = cJSON_GetObjectItemCaseSensitive(doc, "fs");
        if (!fs)
            fs = cJSON_GetObjectItemCaseSensitive(doc, "fs_hz");
        if (fs) {
            if (!cJSON_IsNumber(fs)) {
                status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                                  "JSON: \"fs\" must be a number, got %s", type_name(fs));
                goto out;
            }
            fs_hz = fs->valuedouble;
            status = read_check_rate(fs_hz, "JSON", "bad_json", err);
            if (status != ECG_OK)
                goto out;
        }
        const cJSON *lead = cJSON_GetObjectItemCaseSensitive(doc, "lead");
        if (lead) {
            if (!cJSON_IsString(lead)) {
                status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                                  "JSON: \"lead\" must be a string, got %s", type_name(lead));
                goto out;
            }
            read_set_lead(out, lead->valuestring, strlen(lead->valuestring));
        }
    } else {
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                          "JSON: expected an object {\"fs\": ..., \"signal\": [...]}, got %s",
                          type_name(doc));
        goto out;
    }

    /* The document holds one lead: any other choice does not exist. */
    long index;
    if (read_lead_index(opts->lead, &index) ? index != 0 : strcmp(opts->lead, out->lead) != 0) {
        char q[4 * READ_QUOTE_MAX + 8];
        read_quote(q, sizeof q, opts->lead, strlen(opts->lead));
        status = ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                          "JSON holds one lead (\"%s\"): lead \"%s\" does not exist", out->lead, q);
        goto out;
    }
    if (fs_hz == 0) {
        status = read_rate_from_opts(opts, "this JSON document (no \"fs\")", &fs_hz, err);
        if (status != ECG_OK)
            goto out;
    }

    size_t n = (size_t)cJSON_GetArraySize(signal);
    if (n == 0) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "JSON: \"signal\" is empty");
        goto out;
    }
    status = read_check_count(n, opts, err);
    if (status != ECG_OK)
        goto out;
    samples = malloc(n * sizeof *samples);
    if (!samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", n);
        goto out;
    }
    size_t i = 0;
    for (const cJSON *item = signal->child; item; item = item->next, i++) {
        if (!cJSON_IsNumber(item)) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                              "JSON: signal[%zu] must be a number, got %s", i, type_name(item));
            goto out;
        }
        double v = item->valuedouble;
        float f = (float)v;
        if (!isfinite(v) || !isfinite(f)) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "nan_in_input",
                              "JSON: signal[%zu] (%g) is not a finite float", i, v);
            goto out;
        }
        samples[i] = f;
    }
    out->samples = samples;
    out->n = n;
    out->fs_hz = fs_hz;
    samples = NULL;
out:
    free(samples);
    cJSON_Delete(doc);
    if (status != ECG_OK)
        memset(out, 0, sizeof *out);
    return status;
}
