/*
 * read_csv_time.c - CSV files whose first column is time (or a sample index), as spreadsheets,
 * loggers and WFDB's rdsamp -p write them.
 *
 * Analysing such a column as the ECG gives a silent wrong answer (one "beat", lead "time_s").
 * So when no lead is chosen, the file has a second column and its first looks like time - a
 * header naming it so, or, without a header, first rows rising by steady steps - the whole
 * column is verified: strictly increasing with no gaps (every step within half to one and a half
 * times the mean, which allows the rounding of exported times), then skipped. Time in seconds,
 * or milliseconds when its header says "ms", gives the rate, (n - 1) / (t_last - t_first),
 * rounded to a whole number of Hz when within 0.1% of one; an fs
 * given too must agree within 1% (else conflicting_fs); a sample index column (0, 1, 2... or a
 * header "sample"/"index") gives no rate, so fs stays required. The signal records which column
 * was skipped and whether the rate came from it; the answer reports both.
 *
 * A header naming the first column time whose values do not rise is an error (bad_csv), not a
 * guess. Choosing a lead explicitly (lead=0 too) turns all of this off.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ecg.h"
#include "read_internal.h"

/* How many data rows the peek looks at. */
#define PEEK_ROWS 16

enum time_kind {
    TIME_NONE = 0,
    TIME_SECONDS,
    TIME_MILLISECONDS,
    TIME_INDEX,       /* sample numbers: no rate */
};

struct time_peek {
    enum time_kind kind;
    bool named;       /* a header named it */
    char name[32];
};

/* A line [ls, le) and the next one's start, skipping blank lines. False at the end. */
static bool next_line(const char **p, const char *end, const char **ls, const char **le)
{
    while (*p < end) {
        const char *nl = memchr(*p, '\n', (size_t)(end - *p));
        const char *e = nl ? nl : end;
        *ls = *p;
        *le = e > *ls && e[-1] == '\r' ? e - 1 : e;
        *p = nl ? nl + 1 : end;
        const char *s = *ls;
        while (s < *le && (*s == ' ' || *s == '\t'))
            s++;
        if (s < *le)
            return true;
    }
    return false;
}

/* The first field of a line, trimmed and unquoted. */
static void first_field(const char *ls, const char *le, char delim, const char **s,
                        const char **e)
{
    const char *d = delim ? memchr(ls, delim, (size_t)(le - ls)) : NULL;
    *s = ls;
    *e = d ? d : le;
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
    if (*e - *s >= 2 && (**s == '"' || **s == '\'') && (*e)[-1] == **s)
        (*s)++, (*e)--;
}

/* The kind of time a header name announces, or TIME_NONE. */
static enum time_kind kind_of_name(const char *s, size_t len)
{
    char name[32];
    if (len == 0 || len >= sizeof name)
        return TIME_NONE;
    for (size_t i = 0; i < len; i++)
        name[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i]);
    name[len] = '\0';
    static const char *const index_names[] = {"sample", "samples", "index", "idx", "n", "#"};
    for (size_t i = 0; i < sizeof index_names / sizeof index_names[0]; i++)
        if (!strcmp(name, index_names[i]))
            return TIME_INDEX;
    static const char *const time_names[] = {"t", "s", "ms", "sec", "secs", "seconds",
                                             "timestamp", "elapsed", "elapsed time"};
    bool timed = !strncmp(name, "time", 4);
    for (size_t i = 0; !timed && i < sizeof time_names / sizeof time_names[0]; i++)
        timed = !strcmp(name, time_names[i]);
    if (!timed)
        return TIME_NONE;
    /* "ms", "time_ms", "time (ms)", "time [msec]" */
    bool ms = strstr(name, "ms") || strstr(name, "msec") || strstr(name, "millisec");
    return ms ? TIME_MILLISECONDS : TIME_SECONDS;
}

/* Whether [s, e) is a number, as read_csv_column reads the fields of a file with this
 * delimiter (a ',' in a number is its decimal mark with ';' or tab between fields); its value. */
static bool field_number(const char *s, const char *e, char delim, double *value)
{
    char copy[64];
    const size_t n = (size_t)(e - s);
    if (n == 0 || n >= sizeof copy)
        return false;
    memcpy(copy, s, n);
    copy[n] = '\0';
    char *comma = memchr(copy, ',', n);
    if (comma && (delim == ';' || delim == '\t') && !memchr(copy, '.', n))
        *comma = '.';
    float v;
    if (ecg_parse_float(copy, copy + n, &v) != copy + n || !isfinite(v))
        return false;
    *value = strtod(copy, NULL);
    return true;
}

static bool peek(const char *buf, size_t len, const struct ecg_read_opts *opts,
                 struct time_peek *tp)
{
    const char *p = buf, *end = buf + len, *ls, *le, *s, *e;
    memset(tp, 0, sizeof *tp);
    if (opts->lead && *opts->lead)
        return false; /* a lead was chosen: the caller knows its file */
    if (len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
        p += 3;
    if (!next_line(&p, end, &ls, &le))
        return false;
    char delim = read_csv_delimiter(ls, le);
    if (!delim)
        return false; /* one column: nothing to skip */
    first_field(ls, le, delim, &s, &e);
    double value;
    if (!field_number(s, e, delim, &value)) {
        /* a header row */
        tp->kind = kind_of_name(s, (size_t)(e - s));
        tp->named = true;
        snprintf(tp->name, sizeof tp->name, "%.*s", (int)(e - s), s);
        return tp->kind != TIME_NONE;
    }
    /* No header: the first rows' first fields, rising by steady steps? */
    double prev = 0, first_step = 0;
    bool integers = true;
    size_t rows = 0;
    p = ls;
    while (rows < PEEK_ROWS && next_line(&p, end, &ls, &le)) {
        first_field(ls, le, delim, &s, &e);
        if (!field_number(s, e, delim, &value))
            return false;
        integers = integers && value == floor(value);
        if (rows == 1)
            first_step = value - prev;
        if (rows >= 1) {
            double step = value - prev;
            if (!(step > 0) || step < 0.5 * first_step || step > 1.5 * first_step)
                return false;
        }
        prev = value;
        rows++;
    }
    if (rows < PEEK_ROWS)
        return false;
    tp->kind = integers && first_step == 1 ? TIME_INDEX : TIME_SECONDS;
    snprintf(tp->name, sizeof tp->name, "column 1");
    return true;
}

bool read_csv_time_column_likely(const char *buf, size_t len, const struct ecg_read_opts *opts)
{
    struct time_peek tp;
    return peek(buf, len, opts, &tp);
}

/* Checks the whole time column: strictly increasing, no gaps. Sets *fs_hz for time columns. */
static enum ecg_status check_time(const struct ecg_signal *t, const struct time_peek *tp,
                                  double *fs_hz, struct ecg_error *err)
{
    double span = (double)t->samples[t->n - 1] - (double)t->samples[0];
    double mean_step = t->n > 1 ? span / (double)(t->n - 1) : 0;
    for (size_t i = 1; i < t->n; i++) {
        double step = (double)t->samples[i] - (double)t->samples[i - 1];
        if (!(step > 0) || step < 0.5 * mean_step || step > 1.5 * mean_step)
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_csv",
                            "column 1 (\"%s\") looks like %s but does not rise steadily: data "
                            "row %zu goes from %g to %g (mean step %g); choose the signal with "
                            "lead=",
                            tp->name, tp->kind == TIME_INDEX ? "a sample index" : "time", i + 1,
                            (double)t->samples[i - 1], (double)t->samples[i], mean_step);
    }
    *fs_hz = 0;
    if (tp->kind == TIME_SECONDS || tp->kind == TIME_MILLISECONDS) {
        *fs_hz = (tp->kind == TIME_MILLISECONDS ? 1000.0 : 1.0) / mean_step;
        /* Exported times are rounded (360 Hz in milliseconds: steps of 2 and 3 ms): a rate
         * within 0.1% of a whole number of Hz is that number. */
        if (fabs(*fs_hz - round(*fs_hz)) < 1e-3 * *fs_hz)
            *fs_hz = round(*fs_hz);
    }
    return ECG_OK;
}

enum ecg_status read_csv(const char *buf, size_t len, const struct ecg_read_opts *opts,
                         struct ecg_signal *out, struct ecg_error *err)
{
    struct time_peek tp;
    if (!peek(buf, len, opts, &tp))
        return read_csv_column(buf, len, opts, out, err);

    /* The time column first, at a placeholder rate (the readers want one). */
    struct ecg_signal time = {0};
    struct ecg_read_opts column_opts = *opts;
    column_opts.fs_hz = 1000;
    column_opts.lead = "0";
    enum ecg_status status = read_csv_column(buf, len, &column_opts, &time, err);
    if (status != ECG_OK)
        return status;
    double time_fs = 0;
    status = check_time(&time, &tp, &time_fs, err);
    ecg_signal_free(&time);
    if (status != ECG_OK) {
        if (tp.named)
            return status;
        /* Without a header, a column that only started like a ramp is a signal after all. */
        if (err)
            memset(err, 0, sizeof *err);
        return read_csv_column(buf, len, opts, out, err);
    }
    if (time_fs > 0 && opts->fs_hz > 0 && fabs(opts->fs_hz - time_fs) > 0.01 * time_fs)
        return ecg_fail(err, ECG_ERR_ARG, "conflicting_fs",
                        "fs=%g was given, but the time column \"%s\" says %.6g Hz: give one, or "
                        "the same", opts->fs_hz, tp.name, time_fs);
    column_opts.lead = "1";
    column_opts.fs_hz = opts->fs_hz > 0 ? opts->fs_hz : time_fs;
    if (!(column_opts.fs_hz > 0)) /* a sample index and no fs */
        column_opts.fs_hz = opts->fs_hz;
    status = read_csv_column(buf, len, &column_opts, out, err);
    if (status != ECG_OK)
        return status;
    snprintf(out->time_column, sizeof out->time_column, "%s", tp.name);
    out->fs_from_time = !(opts->fs_hz > 0) && time_fs > 0;
    return ECG_OK;
}
