/*
 * read_json.c - JSON input, read by a streaming scanner (no tree):
 *   {"fs": 360, "signal": [0.1, 0.2, ...], "lead": "MLII"}
 *   {"fs": 360, "signal": [[0.1, 0.5], [0.2, 0.4], ...], "leads": ["MLII", "V5"]}
 *   [0.1, 0.2, ...]
 * "signal" is required: a flat array of numbers (one lead, optionally labelled by "lead"), or a
 * list of rows of equal length (samples x leads), of which opts->lead picks the column by
 * 0-based index or by a name in "leads" (the first column by default), as CSV columns are.
 * "fs" (or "fs_hz") gives the rate; opts->fs_hz is needed only when the document has none (an
 * opts->fs_hz that differs from the document's is refused by the engine: conflicting_fs). A bare array is the signal alone. Other keys are allowed and skipped (any
 * JSON value). One meaning per document: a key given twice in one object, or anything but
 * whitespace after the document, is refused.
 *
 * Memory: the body plus 4 bytes per sample of the chosen lead, whatever the document's size. A
 * first pass checks the whole document's syntax and counts the samples without converting them;
 * the second converts the signal's numbers, the chosen lead's straight into the one array of
 * exactly that size. Numbers follow JSON's grammar strictly and are converted as cJSON does
 * (strtod, then rounded once to float), so answers do not depend on which reader ran; they must
 * be finite and within the float range. Nesting deeper than READ_JSON_MAX_DEPTH is refused.
 * An allocation that fails is ECG_ERR_NOMEM (out_of_memory), never a syntax error.
 *
 * Threading: no shared state.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"
#include "read_internal.h"

#define READ_JSON_MAX_DEPTH 64
/* A longer number is not a sample anyone writes; strtod needs it NUL-terminated in a copy. */
#define READ_JSON_MAX_NUMBER 63

struct span {
    const char *p;
    size_t len;
};

struct scan {
    const char *buf, *p, *end;
    struct ecg_error *err;
    enum ecg_status status;
    /* what the first pass found at the top level */
    bool top_array;
    struct span signal;         /* the signal's value */
    bool have_signal, have_fs, have_lead, have_leads;
    double fs_hz;
    const char *fs_key;         /* the key that gave it */
    struct span lead, leads;    /* string and array values, quotes/brackets included */
    size_t rows, columns;       /* columns 0: a flat signal */
};

/* Line and column (1-based) of p. */
static void position_of(const struct scan *s, const char *at, size_t *line, size_t *column)
{
    *line = 1;
    *column = 1;
    for (const char *t = s->buf; t < at; t++) {
        if (*t == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

static bool fail_at(struct scan *s, const char *at, const char *what)
{
    if (s->status != ECG_OK)
        return false;
    size_t line, column;
    position_of(s, at, &line, &column);
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, at, (size_t)(s->end - at));
    s->status = ecg_fail(s->err, ECG_ERR_FORMAT, "bad_json",
                         "JSON: syntax error at line %zu, column %zu (%s), near \"%s\"", line,
                         column, what, q);
    return false;
}

/* What the value starting at p is, for messages. */
static const char *type_at(const struct scan *s, const char *p)
{
    if (p >= s->end)
        return "nothing";
    switch (*p) {
    case '"': return "a string";
    case '[': return "an array";
    case '{': return "an object";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    case '-': return "a number";
    default: return *p >= '0' && *p <= '9' ? "a number" : NULL;
    }
}

/* A value of the wrong type where the document's meaning needs another: no position needed. */
static bool fail_type(struct scan *s, const char *what, const char *p)
{
    if (s->status == ECG_OK)
        s->status = ecg_fail(s->err, ECG_ERR_FORMAT, "bad_json", "JSON: %s, got %s", what,
                             type_at(s, p));
    return false;
}

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool digits(struct scan *s)
{
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    return s->p > start;
}

/* A number by JSON's grammar; its span in *out. */
static bool scan_number(struct scan *s, struct span *out)
{
    const char *start = s->p;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0')
        s->p++;
    else if (s->p >= s->end || *s->p < '1' || *s->p > '9' || !digits(s))
        return fail_at(s, start, "expected a number");
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!digits(s))
            return fail_at(s, start, "expected digits after '.'");
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!digits(s))
            return fail_at(s, start, "expected digits in the exponent");
    }
    if (s->p - start > READ_JSON_MAX_NUMBER)
        return fail_at(s, start, "number longer than 63 characters");
    out->p = start;
    out->len = (size_t)(s->p - start);
    return true;
}

/* A string (escapes checked, control characters refused); its span, quotes included. */
static bool scan_string(struct scan *s, struct span *out)
{
    const char *start = s->p;
    s->p++; /* the opening quote */
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = (unsigned char)*s->p;
        if (c < 0x20)
            return fail_at(s, s->p, "control character in a string");
        if (c == '\\') {
            s->p++;
            if (s->p >= s->end)
                break;
            if (*s->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (s->p + i >= s->end || !strchr("0123456789abcdefABCDEF", s->p[i]) ||
                        !s->p[i])
                        return fail_at(s, s->p, "bad \\u escape");
                s->p += 4;
            } else if (!strchr("\"\\/bfnrt", *s->p) || !*s->p) {
                return fail_at(s, s->p - 1, "bad escape in a string");
            }
        }
        s->p++;
    }
    if (s->p >= s->end)
        return fail_at(s, start, "unterminated string");
    s->p++;
    out->p = start;
    out->len = (size_t)(s->p - start);
    return true;
}

static bool scan_literal(struct scan *s, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(s->end - s->p) < len || memcmp(s->p, word, len))
        return fail_at(s, s->p, "expected a value");
    s->p += len;
    return true;
}

static int compare_spans(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static bool span_is(struct span key, const char *quoted)
{
    return key.len == strlen(quoted) && !memcmp(key.p, quoted, key.len);
}

static bool scan_value(struct scan *s, int depth, bool top);

/* An object; at the top level its known members are noted. Keys are compared as written. */
static bool scan_object(struct scan *s, int depth, bool top)
{
    struct span *keys = NULL;
    size_t n_keys = 0, cap_keys = 0;
    bool ok = false;
    s->p++; /* '{' */
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return true;
    }
    for (;;) {
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"') {
            fail_at(s, s->p, "expected a key in quotes");
            goto out;
        }
        struct span key;
        if (!scan_string(s, &key))
            goto out;
        if (n_keys == cap_keys) {
            size_t cap = cap_keys ? cap_keys * 2 : 8;
            struct span *grown = realloc(keys, cap * sizeof *keys);
            if (!grown) {
                s->status = ecg_fail(s->err, ECG_ERR_NOMEM, "out_of_memory",
                                     "JSON: no memory for the keys of an object");
                goto out;
            }
            keys = grown;
            cap_keys = cap;
        }
        keys[n_keys++] = key;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') {
            fail_at(s, s->p, "expected ':' after a key");
            goto out;
        }
        s->p++;
        skip_ws(s);
        const char *value_start = s->p;
        bool signal = top && span_is(key, "\"signal\"");
        if (!scan_value(s, depth + 1, signal))
            goto out;
        struct span value = {value_start, (size_t)(s->p - value_start)};
        if (signal) {
            s->signal = value;
            s->have_signal = true;
        } else if (top && (span_is(key, "\"fs\"") || span_is(key, "\"fs_hz\""))) {
            if (*value.p != '-' && (*value.p < '0' || *value.p > '9')) {
                fail_type(s, "\"fs\" must be a number", value.p);
                goto out;
            }
            if (s->have_fs && !span_is(key, s->fs_key)) {
                fail_at(s, key.p, "\"fs\" and \"fs_hz\" both given");
                goto out;
            }
            s->fs_key = span_is(key, "\"fs\"") ? "\"fs\"" : "\"fs_hz\"";
            char number[READ_JSON_MAX_NUMBER + 1];
            size_t len = value.len < READ_JSON_MAX_NUMBER ? value.len : READ_JSON_MAX_NUMBER;
            memcpy(number, value.p, len);
            number[len] = '\0';
            s->fs_hz = strtod(number, NULL);
            s->have_fs = true;
        } else if (top && span_is(key, "\"lead\"")) {
            if (*value.p != '"') {
                fail_type(s, "\"lead\" must be a string", value.p);
                goto out;
            }
            s->lead = value;
            s->have_lead = true;
        } else if (top && span_is(key, "\"leads\"")) {
            if (*value.p != '[') {
                fail_type(s, "\"leads\" must be a list of names", value.p);
                goto out;
            }
            s->leads = value;
            s->have_leads = true;
        }
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            break;
        }
        fail_at(s, s->p, "expected ',' or '}' in an object");
        goto out;
    }
    /* One meaning: a key given twice is refused, at any depth. */
    qsort(keys, n_keys, sizeof *keys, compare_spans);
    for (size_t i = 1; i < n_keys; i++)
        if (!compare_spans(&keys[i - 1], &keys[i])) {
            char q[4 * READ_QUOTE_MAX + 8];
            read_quote(q, sizeof q, keys[i].p + 1, keys[i].len - 2);
            s->status = ecg_fail(s->err, ECG_ERR_FORMAT, "bad_json",
                                 "JSON: key \"%s\" appears more than once in one object", q);
            goto out;
        }
    ok = true;
out:
    free(keys);
    return ok;
}

/*
 * An array; its element count in *count. Level 1 is the signal: numbers (a flat signal), or rows
 * of numbers of equal length (s->columns); level 2 is one such row (numbers only); level 0 any
 * array.
 */
static bool scan_array(struct scan *s, int depth, int level, size_t *count)
{
    bool rows = false;
    *count = 0;
    s->p++; /* '[' */
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return true;
    }
    for (;;) {
        skip_ws(s);
        const char *at = s->p;
        if (level == 1 && *count == 0)
            rows = at < s->end && *at == '[';
        if (level == 0) {
            if (!scan_value(s, depth + 1, false))
                return false;
        } else if (!rows) {
            struct span number;
            const char *type = type_at(s, at);
            if (type && strcmp(type, "a number")) {
                char what[64];
                snprintf(what, sizeof what, level == 2 ? "signal rows must hold numbers only"
                                                       : "signal[%zu] must be a number", *count);
                return fail_type(s, what, at);
            }
            if (!scan_number(s, &number))
                return false;
        } else {
            size_t width = 0;
            if (at >= s->end || *at != '[')
                return fail_at(s, at, "signal rows must be lists of numbers");
            if (depth + 1 > READ_JSON_MAX_DEPTH || !scan_array(s, depth + 1, 2, &width))
                return false;
            if (!width || (*count && width != s->columns)) {
                char what[96];
                snprintf(what, sizeof what, "signal row %zu has %zu values, expected %zu", *count,
                         width, *count ? s->columns : (size_t)1);
                return fail_at(s, at, what);
            }
            s->columns = width;
        }
        (*count)++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            break;
        }
        return fail_at(s, s->p, "expected ',' or ']' in an array");
    }
    if (level == 1)
        s->rows = *count;
    return true;
}

static bool scan_value(struct scan *s, int depth, bool is_signal)
{
    if (depth > READ_JSON_MAX_DEPTH)
        return fail_at(s, s->p, "nesting too deep");
    skip_ws(s);
    if (s->p >= s->end)
        return fail_at(s, s->p, "expected a value");
    if (is_signal && *s->p != '[') {
        if (!type_at(s, s->p))
            return fail_at(s, s->p, "expected a value");
        return fail_type(s, "\"signal\" must be an array of numbers", s->p);
    }
    struct span ignored;
    size_t count;
    switch (*s->p) {
    case '{':
        return scan_object(s, depth, false);
    case '[':
        return scan_array(s, depth, is_signal ? 1 : 0, &count);
    case '"':
        return scan_string(s, &ignored);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        return scan_number(s, &ignored);
    }
}

/* Converts one number span as cJSON does (strtod, then once to float). */
static bool convert(const struct span *number, float *out, double *as_double)
{
    char text[READ_JSON_MAX_NUMBER + 1];
    memcpy(text, number->p, number->len);
    text[number->len] = '\0';
    double v = strtod(text, NULL);
    *as_double = v;
    *out = (float)v;
    return isfinite(v) && isfinite(*out);
}

/* Copies the decoded text of a simple JSON string (quotes included in span) into dst. */
static void string_text(struct span quoted, char *dst, size_t cap)
{
    size_t n = 0;
    for (size_t i = 1; i + 1 < quoted.len && n + 1 < cap; i++) {
        char c = quoted.p[i];
        if (c == '\\' && i + 2 < quoted.len) {
            c = quoted.p[++i];
            if (c == 'u') {
                i += 4; /* non-ASCII names are not matched; kept as '?' */
                c = '?';
            } else if (c == 'n' || c == 't' || c == 'r' || c == 'b' || c == 'f') {
                c = ' ';
            }
        }
        dst[n++] = c;
    }
    dst[n] = '\0';
}

/* The column the options choose: an index, or a name among "leads". */
static enum ecg_status choose_column(struct scan *s, const struct ecg_read_opts *opts,
                                     struct ecg_signal *out, size_t *column)
{
    long index = 0;
    bool by_index = read_lead_index(opts->lead, &index);
    char name[64];
    if (s->have_leads) {
        struct scan names = *s;
        names.p = s->leads.p + 1;
        names.end = s->leads.p + s->leads.len;
        size_t i = 0;
        for (;;) {
            skip_ws(&names);
            if (names.p >= names.end || *names.p == ']')
                break;
            struct span label;
            if (*names.p != '"')
                return ecg_fail(s->err, ECG_ERR_FORMAT, "bad_json",
                                "JSON: \"leads\" must be a list of strings");
            if (!scan_string(&names, &label))
                return names.status;
            string_text(label, name, sizeof name);
            if (by_index ? (long)i == index : !strcmp(name, opts->lead)) {
                *column = i;
                read_set_lead(out, name, strlen(name));
            }
            i++;
            skip_ws(&names);
            if (names.p < names.end && *names.p == ',')
                names.p++;
        }
        if (i != s->columns)
            return ecg_fail(s->err, ECG_ERR_FORMAT, "bad_json",
                            "JSON: \"leads\" names %zu leads, the signal rows hold %zu", i,
                            s->columns);
    }
    if (by_index && index >= 0 && (size_t)index < s->columns) {
        *column = (size_t)index;
        return ECG_OK;
    }
    if (!by_index && out->lead[0])
        return ECG_OK;
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, opts->lead, strlen(opts->lead));
    return ecg_fail(s->err, ECG_ERR_NOT_FOUND, "lead_not_found",
                    "JSON holds %zu leads%s: lead \"%s\" does not exist", s->columns,
                    s->have_leads ? "" : " (no \"leads\" names them)", q);
}

/* Second pass: the chosen lead's numbers into samples (n of them). */
static enum ecg_status fill(struct scan *s, size_t column, float *samples, size_t n)
{
    struct scan pass = *s;
    pass.p = s->signal.p + 1;
    pass.end = s->signal.p + s->signal.len;
    for (size_t i = 0; i < n; i++) {
        for (size_t c = 0; c < (s->columns ? s->columns : 1); c++) {
            while (pass.p < pass.end && strchr(" \t\r\n,[]", *pass.p))
                pass.p++;
            struct span number;
            if (!scan_number(&pass, &number))
                return pass.status; /* not reached: the first pass checked the syntax */
            if (s->columns && c != column)
                continue;
            double v;
            if (!convert(&number, &samples[i], &v)) {
                if (s->columns)
                    return ecg_fail(s->err, ECG_ERR_FORMAT, "nan_in_input",
                                    "JSON: signal[%zu][%zu] (%g) is not a finite float", i,
                                    column, v);
                return ecg_fail(s->err, ECG_ERR_FORMAT, "nan_in_input",
                                "JSON: signal[%zu] (%g) is not a finite float", i, v);
            }
        }
    }
    return ECG_OK;
}

enum ecg_status read_json(const char *buf, size_t len, const struct ecg_read_opts *opts,
                          struct ecg_signal *out, struct ecg_error *err)
{
    struct scan s = {.buf = buf, .p = buf, .end = buf + len, .err = err, .status = ECG_OK};
    float *samples = NULL;
    enum ecg_status status;
    double fs_hz = 0;

    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "JSON input is empty");
    skip_ws(&s);
    if (s.p < s.end && *s.p == '[') {
        s.top_array = true;
        s.signal.p = s.p;
        if (scan_value(&s, 0, true)) {
            s.signal.len = (size_t)(s.p - s.signal.p);
            s.have_signal = true;
        }
    } else if (s.p < s.end && *s.p == '{') {
        scan_object(&s, 0, true);
    } else if (s.p < s.end) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                          "JSON: expected an object {\"fs\": ..., \"signal\": [...]}");
        goto out;
    } else {
        fail_at(&s, s.p, "expected a value");
    }
    if (s.status != ECG_OK) {
        status = s.status;
        goto out;
    }
    skip_ws(&s);
    if (s.p < s.end) {
        size_t line, column;
        position_of(&s, s.p, &line, &column);
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                          "JSON: unexpected text after the document at line %zu, column %zu",
                          line, column);
        goto out;
    }
    if (!s.have_signal) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_json",
                          "JSON: no \"signal\" array in the document");
        goto out;
    }
    if (s.have_fs) {
        fs_hz = s.fs_hz;
        status = read_check_rate(fs_hz, "JSON", "bad_json", err);
        if (status != ECG_OK)
            goto out;
    }
    size_t column = 0;
    if (s.columns) {
        status = choose_column(&s, opts, out, &column);
        if (status != ECG_OK)
            goto out;
    } else {
        if (s.have_lead) {
            char label[64];
            string_text(s.lead, label, sizeof label);
            read_set_lead(out, label, strlen(label));
        }
        /* The document holds one lead: any other choice does not exist. */
        long index;
        if (read_lead_index(opts->lead, &index) ? index != 0
                                                : strcmp(opts->lead, out->lead) != 0) {
            char q[4 * READ_QUOTE_MAX + 8];
            read_quote(q, sizeof q, opts->lead, strlen(opts->lead));
            status = ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                              "JSON holds one lead (\"%s\"): lead \"%s\" does not exist",
                              out->lead, q);
            goto out;
        }
    }
    if (fs_hz == 0) {
        status = read_rate_from_opts(opts, "this JSON document (no \"fs\")", &fs_hz, err);
        if (status != ECG_OK)
            goto out;
    }
    size_t n = s.rows;
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
    status = fill(&s, column, samples, n);
    if (status != ECG_OK)
        goto out;
    out->samples = samples;
    out->n = n;
    out->fs_hz = fs_hz;
    samples = NULL;
out:
    free(samples);
    if (status != ECG_OK)
        memset(out, 0, sizeof *out);
    return status;
}
