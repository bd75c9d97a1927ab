/*
 * read.c - input reader dispatch: format names and guesses, ecg_read_memory(), ecg_read_file(),
 * and the helpers every reader shares (sample buffer, lead selection, checks, quoting).
 *
 * The format-specific parsers live in read_csv.c, read_raw.c, read_npy.c, read_edf.c,
 * read_json.c and read_wfdb.c; see read_internal.h for their common contract.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ecg.h"
#include "read_internal.h"

/* ---------------------------------------------------------------- signals and format names */

void ecg_signal_free(struct ecg_signal *sig)
{
    if (!sig)
        return;
    free(sig->samples);
    for (size_t i = 0; i < sig->n_extra && i < ECG_MAX_LEADS - 1; i++)
        free(sig->extra[i]);
    memset(sig, 0, sizeof *sig);
}

static const char *const format_names[ECG_FORMAT_COUNT] = {
    [ECG_FORMAT_AUTO] = "auto", [ECG_FORMAT_CSV] = "csv",   [ECG_FORMAT_F32] = "f32",
    [ECG_FORMAT_F64] = "f64",   [ECG_FORMAT_I16] = "i16",   [ECG_FORMAT_NPY] = "npy",
    [ECG_FORMAT_EDF] = "edf",   [ECG_FORMAT_JSON] = "json", [ECG_FORMAT_WFDB] = "wfdb",
};

const char *ecg_format_name(enum ecg_format format)
{
    if ((unsigned)format >= ECG_FORMAT_COUNT)
        return "unknown";
    return format_names[format];
}

/* Names and file extensions, lower case. Several spellings map to one format. */
static const struct {
    const char *name;
    enum ecg_format format;
} format_aliases[] = {
    {"csv", ECG_FORMAT_CSV},     {"txt", ECG_FORMAT_CSV},   {"text", ECG_FORMAT_CSV},
    {"f32", ECG_FORMAT_F32},     {"bin", ECG_FORMAT_F32},   {"raw", ECG_FORMAT_F32},
    {"float32", ECG_FORMAT_F32}, {"f64", ECG_FORMAT_F64},   {"float64", ECG_FORMAT_F64},
    {"i16", ECG_FORMAT_I16},     {"int16", ECG_FORMAT_I16}, {"npy", ECG_FORMAT_NPY},
    {"edf", ECG_FORMAT_EDF},     {"bdf", ECG_FORMAT_EDF},   {"json", ECG_FORMAT_JSON},
    {"wfdb", ECG_FORMAT_WFDB},   {"hea", ECG_FORMAT_WFDB},  {"dat", ECG_FORMAT_WFDB},
};

enum ecg_format ecg_format_from_name(const char *name)
{
    if (!name)
        return ECG_FORMAT_AUTO;
    for (size_t i = 0; i < sizeof format_aliases / sizeof format_aliases[0]; i++)
        if (strcasecmp(name, format_aliases[i].name) == 0)
            return format_aliases[i].format;
    return ECG_FORMAT_AUTO;
}

/* True if PATH.hea exists (a WFDB record named without its extension). */
static bool has_wfdb_header(const char *path)
{
    char hea[PATH_MAX];
    int n = snprintf(hea, sizeof hea, "%s.hea", path);
    if (n < 0 || (size_t)n >= sizeof hea)
        return false;
    struct stat st;
    return stat(hea, &st) == 0 && S_ISREG(st.st_mode);
}

enum ecg_format ecg_format_from_path(const char *path)
{
    if (!path || !*path)
        return ECG_FORMAT_AUTO;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) /* no extension (a leading dot is a hidden file, not one) */
        return has_wfdb_header(path) ? ECG_FORMAT_WFDB : ECG_FORMAT_AUTO;
    if (strcasecmp(dot + 1, "wfdb") == 0) /* "wfdb" is a format name, not an extension */
        return ECG_FORMAT_AUTO;
    enum ecg_format format = ecg_format_from_name(dot + 1);
    if (format == ECG_FORMAT_AUTO && has_wfdb_header(path))
        return ECG_FORMAT_WFDB; /* record names may contain dots ("rec.1") */
    return format;
}

/* ---------------------------------------------------------------- shared helpers */

enum ecg_status sample_buf_reserve(struct sample_buf *sb, size_t extra, struct ecg_error *err)
{
    if (extra <= sb->cap - sb->n)
        return ECG_OK;
    if (extra > SIZE_MAX / sizeof(float) - sb->n)
        return ecg_fail(err, ECG_ERR_TOO_LARGE, "too_many_samples", "too many samples");
    size_t need = sb->n + extra;
    if (sb->max && need > sb->max)
        return ecg_fail(err, ECG_ERR_TOO_LARGE, "too_many_samples",
                        "more than the limit of %zu samples", sb->max);
    size_t cap = sb->cap ? sb->cap : 4096;
    while (cap < need)
        cap = cap > SIZE_MAX / sizeof(float) / 2 ? need : cap * 2;
    if (sb->max && cap > sb->max)
        cap = sb->max;
    float *grown = realloc(sb->v, cap * sizeof(float));
    if (!grown)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", cap);
    sb->v = grown;
    sb->cap = cap;
    return ECG_OK;
}

void sample_buf_fini(struct sample_buf *sb)
{
    free(sb->v);
    memset(sb, 0, sizeof *sb);
}

bool read_lead_index(const char *lead, long *index)
{
    *index = 0;
    if (!lead || !*lead)
        return true;
    long value = 0;
    for (const char *p = lead; *p; p++) {
        if (*p < '0' || *p > '9') {
            *index = -1;
            return false;
        }
        value = value > (LONG_MAX - 9) / 10 ? LONG_MAX : value * 10 + (*p - '0');
    }
    *index = value;
    return true;
}

enum ecg_status read_check_rate(double fs_hz, const char *format_name, const char *code,
                                struct ecg_error *err)
{
    if (!isfinite(fs_hz) || fs_hz <= 0)
        return ecg_fail(err, ECG_ERR_FORMAT, code, "%s: sampling rate %g Hz is not positive",
                        format_name, fs_hz);
    return ECG_OK;
}

enum ecg_status read_rate_from_opts(const struct ecg_read_opts *opts, const char *format_name,
                                    double *fs_hz, struct ecg_error *err)
{
    double fs = opts ? opts->fs_hz : 0;
    if (fs == 0)
        return ecg_fail(err, ECG_ERR_ARG, "fs_required", "%s carries no sampling rate: give fs",
                        format_name);
    if (!isfinite(fs) || fs < 0)
        return ecg_fail(err, ECG_ERR_ARG, "bad_fs", "sampling rate %g Hz is not positive", fs);
    *fs_hz = fs;
    return ECG_OK;
}

enum ecg_status read_check_finite(const float *v, size_t n, const char *format_name,
                                  struct ecg_error *err)
{
    /* Blocks of 64 tested with no branch (the compiler's vectors: a NaN or an infinity has
     * every exponent bit set), then the first bad sample found one by one: a 10-s strip is
     * checked in a fraction of a microsecond, where an exit per sample kept it scalar. */
    enum { BLOCK = 64 };
    for (size_t start = 0; start < n; start += BLOCK) {
        size_t len = n - start < BLOCK ? n - start : BLOCK;
        uint32_t bad = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t bits;
            memcpy(&bits, &v[start + i], sizeof bits);
            bad |= (bits & 0x7f800000u) == 0x7f800000u;
        }
        if (!bad)
            continue;
        for (size_t i = start; i < start + len; i++) {
            if (!isfinite(v[i]))
                return ecg_fail(err, ECG_ERR_FORMAT, "nan_in_input", "%s: sample %zu is %s",
                                format_name, i, isnan(v[i]) ? "NaN" : "infinite");
        }
    }
    return ECG_OK;
}

enum ecg_status read_check_count(size_t n, const struct ecg_read_opts *opts, struct ecg_error *err)
{
    if (opts && opts->max_samples && n > opts->max_samples)
        return ecg_fail(err, ECG_ERR_TOO_LARGE, "too_many_samples",
                        "%zu samples exceed the limit of %zu", n, opts->max_samples);
    return ECG_OK;
}

void read_quote(char *dst, size_t cap, const char *src, size_t len)
{
    size_t o = 0;
    size_t shown = len < READ_QUOTE_MAX ? len : READ_QUOTE_MAX;
    if (cap == 0)
        return;
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)src[i];
        char piece[5];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            piece[0] = (char)c, piece[1] = 0;
        else
            snprintf(piece, sizeof piece, "\\x%02x", c);
        size_t pl = strlen(piece);
        if (o + pl + 4 >= cap)
            break;
        memcpy(dst + o, piece, pl);
        o += pl;
    }
    if (shown < len && o + 4 <= cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = 0;
}

void read_set_lead(struct ecg_signal *sig, const char *label, size_t len)
{
    while (len && isspace((unsigned char)*label))
        label++, len--;
    while (len && isspace((unsigned char)label[len - 1]))
        len--;
    size_t i = 0;
    for (; i < len && i + 1 < sizeof sig->lead; i++) {
        unsigned char c = (unsigned char)label[i];
        sig->lead[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    sig->lead[i] = 0;
}

/* ---------------------------------------------------------------- dispatch */

/* Guesses the format of bytes in memory from their first bytes; AUTO if it cannot tell. */
static enum ecg_format sniff_format(const unsigned char *b, size_t len)
{
    if (len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return ECG_FORMAT_NPY;
    if (len >= 8 && (memcmp(b, "0       ", 8) == 0 || memcmp(b, "\377BIOSEMI", 8) == 0))
        return ECG_FORMAT_EDF;
    size_t i = 0;
    if (len >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0) /* UTF-8 byte order mark */
        i = 3;
    while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'))
        i++;
    if (i < len && (b[i] == '{' || b[i] == '['))
        return ECG_FORMAT_JSON;
    /* Text: no control bytes other than whitespace among the first 512 (UTF-8 is fine; binary
     * samples hold zero or control bytes almost at once). */
    size_t probe = len < 512 ? len : 512;
    for (size_t k = 0; k < probe; k++)
        if ((b[k] < 0x20 && b[k] != '\t' && b[k] != '\r' && b[k] != '\n') || b[k] == 0x7f)
            return ECG_FORMAT_AUTO;
    return ECG_FORMAT_CSV;
}

bool read_is_csv(enum ecg_format format, const void *buf, size_t len)
{
    if (format == ECG_FORMAT_AUTO && buf)
        format = sniff_format(buf, len);
    return format == ECG_FORMAT_CSV;
}

static enum ecg_status read_memory_one(const void *buf, size_t len,
                                       const struct ecg_read_opts *opts, struct ecg_signal *out,
                                       struct ecg_error *err)
{
    static const struct ecg_read_opts defaults = {0};
    if (!out)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no output signal");
    memset(out, 0, sizeof *out);
    if (!opts)
        opts = &defaults;
    if (!buf && len)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no input buffer");
    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "input is empty");

    enum ecg_format format = opts->format;
    if (format == ECG_FORMAT_AUTO) {
        format = sniff_format(buf, len);
        if (format == ECG_FORMAT_AUTO)
            return ecg_fail(err, ECG_ERR_ARG, "format_required",
                            "cannot tell the format of this binary input: give the format "
                            "(csv, f32, f64, i16, npy, edf, json)");
    }
    switch (format) {
    case ECG_FORMAT_CSV:
        return read_csv(buf, len, opts, out, err);
    case ECG_FORMAT_F32:
    case ECG_FORMAT_F64:
    case ECG_FORMAT_I16:
        return read_raw(buf, len, format, opts, out, err);
    case ECG_FORMAT_NPY:
        return read_npy(buf, len, opts, out, err);
    case ECG_FORMAT_EDF:
        return read_edf_memory(buf, len, opts, out, err);
    case ECG_FORMAT_JSON:
        return read_json(buf, len, opts, out, err);
    case ECG_FORMAT_WFDB:
        return ecg_fail(err, ECG_ERR_ARG, "format_unsupported",
                        "WFDB records need their .hea and .dat files: read them from files");
    case ECG_FORMAT_AUTO:
    case ECG_FORMAT_COUNT:
        break;
    }
    return ecg_fail(err, ECG_ERR_ARG, "bad_format", "unknown input format %d", (int)format);
}

/* Reads a whole regular file into a new buffer (*data, *len). */
static enum ecg_status slurp_file(const char *path, char **data, size_t *len, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    char *bytes = NULL;
    size_t have = 0, cap = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        status =
            ecg_fail(err, errno == ENOENT ? ECG_ERR_NOT_FOUND : ECG_ERR_IO,
                     errno == ENOENT ? "not_found" : "io_error", "%s: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: %s", path, strerror(errno));
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: is a directory", path);
        goto out;
    }
    /* Regular files are read in one allocation; pipes and devices grow as they come. */
    cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 65536;
    for (;;) {
        if (have == cap || !bytes) {
            size_t next = bytes ? cap * 2 : cap;
            char *grown = realloc(bytes, next);
            if (!grown) {
                status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                                  "%s: cannot allocate %zu bytes", path, next);
                goto out;
            }
            bytes = grown;
            cap = next;
        }
        ssize_t got = read(fd, bytes + have, cap - have);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: %s", path, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        have += (size_t)got;
    }
    *data = bytes;
    *len = have;
    bytes = NULL;
out:
    free(bytes);
    if (fd >= 0)
        close(fd);
    return status;
}

static enum ecg_status read_file_one(const char *path, const struct ecg_read_opts *opts,
                                     struct ecg_signal *out, struct ecg_error *err)
{
    static const struct ecg_read_opts defaults = {0};
    enum ecg_status status = ECG_OK;
    char *data = NULL;
    size_t len = 0;

    if (!out)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no output signal");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no input path");
    if (!opts)
        opts = &defaults;

    enum ecg_format format = opts->format;
    if (format == ECG_FORMAT_AUTO)
        format = ecg_format_from_path(path);
    if (format == ECG_FORMAT_WFDB) {
        /* A record is named by its base path; "rec.dat" stands for "rec". */
        size_t plen = strlen(path);
        if (plen > 4 && strcasecmp(path + plen - 4, ".dat") == 0) {
            char base[PATH_MAX];
            if (plen - 4 >= sizeof base)
                return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "path too long");
            memcpy(base, path, plen - 4);
            base[plen - 4] = 0;
            return read_wfdb_file(base, opts, out, err);
        }
        return read_wfdb_file(path, opts, out, err);
    }
    if (format == ECG_FORMAT_EDF)
        return read_edf_file(path, opts, out, err);

    status = slurp_file(path, &data, &len, err);
    if (status != ECG_OK)
        goto out;
    struct ecg_read_opts resolved = *opts;
    resolved.format = format; /* AUTO here lets ecg_read_memory sniff the content */
    status = read_memory_one(data, len, &resolved, out, err);
    if (status != ECG_OK && err && strncmp(err->message, path, strlen(path)) != 0) {
        /* Prefix the file name so that the message says where (cut to fit). */
        size_t cap = sizeof err->message;
        size_t plen = strnlen(path, cap / 2);
        size_t mlen = strnlen(err->message, cap - 1);
        if (plen + 2 + mlen >= cap)
            mlen = cap - 1 - plen - 2;
        memmove(err->message + plen + 2, err->message, mlen);
        memcpy(err->message, path, plen);
        memcpy(err->message + plen, ": ", 2);
        err->message[plen + 2 + mlen] = 0;
    }
out:
    free(data);
    return status;
}

/* ---------------------------------------------------------------- several leads */

bool ecg_lead_is_list(const char *selection)
{
    return selection && (strchr(selection, ',') || strcasecmp(selection, "all") == 0);
}

enum ecg_status ecg_lead_list_parse(const char *selection, char *store, size_t cap,
                                    const char **names, size_t *n, bool *all,
                                    struct ecg_error *err)
{
    *n = 0;
    *all = false;
    if (!selection || !*selection)
        return ECG_OK;
    if (strcasecmp(selection, "all") == 0) {
        *all = true;
        return ECG_OK;
    }
    size_t used = 0;
    for (const char *p = selection;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (a == b)
            return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                            "lead list \"%.64s\": an empty name at character %zu", selection,
                            (size_t)(a - selection) + 1);
        if (*n == ECG_MAX_LEADS)
            return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                            "lead list \"%.64s\": more than %d leads", selection, ECG_MAX_LEADS);
        size_t len = (size_t)(b - a);
        if (used + len + 1 > cap || len >= 32)
            return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                            "lead list \"%.64s\": a name is too long", selection);
        memcpy(store + used, a, len);
        store[used + len] = 0;
        for (size_t i = 0; i < *n; i++)
            if (strcmp(names[i], store + used) == 0)
                return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                                "lead list \"%.64s\": lead \"%s\" is named twice", selection,
                                names[i]);
        names[(*n)++] = store + used;
        used += len + 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    return ECG_OK;
}

/* Where a lead list is read: memory, a file, or a WFDB record in memory. */
struct read_source {
    const void *buf;
    size_t len;
    const char *path;
    const struct wfdb_memory *wfdb;
};

static enum ecg_status read_one(const struct read_source *src, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err)
{
    if (src->wfdb)
        return read_wfdb_memory(src->wfdb, opts, out, err);
    return src->path ? read_file_one(src->path, opts, out, err)
                     : read_memory_one(src->buf, src->len, opts, out, err);
}

/* Whether a lead list's source is CSV text (a file by its name, memory by its content). */
static bool source_is_csv(const struct read_source *src, const struct ecg_read_opts *opts)
{
    if (src->wfdb)
        return false;
    if (src->path)
        return read_is_csv(opts->format == ECG_FORMAT_AUTO ? ecg_format_from_path(src->path)
                                                           : opts->format, NULL, 0);
    return read_is_csv(opts->format, src->buf, src->len);
}

/*
 * The time column of a CSV read as a lead list (read_csv_time.c recognises one only when no
 * lead is chosen): the file is read once as if none were, and what that finds - the column
 * skipped, the rate it gives - applies to the list: "all" starts after the time column, and the
 * rate comes from it when fs is not given. A time column that contradicts fs is an error
 * (conflicting_fs); any other failure of this probe (a first column that is not a number, no
 * rate at all) is left to the reads of the leads themselves, which say what is wrong with them.
 */
static enum ecg_status probe_time_column(const struct read_source *src,
                                         const struct ecg_read_opts *opts, char *time_column,
                                         size_t time_column_size, double *fs_from_time,
                                         struct ecg_error *err)
{
    time_column[0] = '\0';
    *fs_from_time = 0;
    if (!source_is_csv(src, opts))
        return ECG_OK;
    struct ecg_read_opts plain = *opts;
    struct ecg_signal probe = {0};
    struct ecg_error probe_err = {0};
    plain.lead = NULL;
    plain.embed_lead = NULL;
    enum ecg_status status = read_one(src, &plain, &probe, &probe_err);
    if (status == ECG_OK) {
        snprintf(time_column, time_column_size, "%s", probe.time_column);
        if (probe.fs_from_time)
            *fs_from_time = probe.fs_hz;
    } else if (!strcmp(probe_err.code, "conflicting_fs")) {
        if (err)
            *err = probe_err;
        ecg_signal_free(&probe);
        return status;
    }
    ecg_signal_free(&probe);
    return ECG_OK;
}

/* Moves lead sig into out as an extra lead (or as the first), labelled by name when it has no
 * label of its own. */
static enum ecg_status add_lead(struct ecg_signal *out, struct ecg_signal *sig, const char *name,
                                struct ecg_error *err)
{
    if (!sig->lead[0])
        snprintf(sig->lead, sizeof sig->lead, "%s", name);
    if (!out->samples) {
        *out = *sig;
        memset(sig, 0, sizeof *sig);
        return ECG_OK;
    }
    if (sig->n != out->n || sig->fs_hz != out->fs_hz)
        return ecg_fail(err, ECG_ERR_FORMAT, "leads_differ",
                        "lead \"%s\" has %zu samples at %g Hz, lead \"%s\" %zu at %g Hz: the "
                        "leads of one analysis must share length and rate",
                        sig->lead, sig->n, sig->fs_hz, out->lead, out->n, out->fs_hz);
    out->extra[out->n_extra] = sig->samples;
    snprintf(out->extra_lead[out->n_extra], sizeof out->extra_lead[0], "%s", sig->lead);
    out->n_extra++;
    memset(sig, 0, sizeof *sig);
    return ECG_OK;
}

/* Makes the lead named (by label or index) embed the first one. */
static enum ecg_status put_first(struct ecg_signal *out, const char *embed,
                                 const char *const *names, struct ecg_error *err)
{
    for (size_t i = 0; i <= out->n_extra; i++) {
        const char *label = i == 0 ? out->lead : out->extra_lead[i - 1];
        bool match = strcmp(label, embed) == 0 || (names && strcmp(names[i], embed) == 0);
        if (!match)
            continue;
        if (i > 0) {
            float *s = out->samples;
            char tmp[32];
            out->samples = out->extra[i - 1];
            out->extra[i - 1] = s;
            memcpy(tmp, out->lead, sizeof tmp);
            memcpy(out->lead, out->extra_lead[i - 1], sizeof tmp);
            memcpy(out->extra_lead[i - 1], tmp, sizeof tmp);
        }
        return ECG_OK;
    }
    return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                    "embed_lead \"%.32s\" is not one of the selected leads", embed);
}

/*
 * A lead list: each lead read by the one-lead reader in turn (a lead "all" selects counts up
 * from 0 until the reader has no such lead), joined into one signal. Reading a text format once
 * per lead costs a parse per lead; the readers stream at about 1 GB/s, so 12 leads of a long
 * CSV still read in well under the time of their analysis.
 */
static enum ecg_status read_leads(const struct read_source *src,
                                  const struct ecg_read_opts *opts, struct ecg_signal *out,
                                  struct ecg_error *err)
{
    static const struct ecg_read_opts defaults = {0};
    char store[ECG_MAX_LEADS * 33];
    const char *names[ECG_MAX_LEADS];
    char index_names[ECG_MAX_LEADS][8];
    size_t n = 0;
    bool all = false, decimal_comma = false;
    enum ecg_status status;

    if (!opts)
        opts = &defaults;
    if (!ecg_lead_is_list(opts->lead)) {
        status = read_one(src, opts, out, err);
        const char *embed = opts->embed_lead, *chosen = opts->lead && *opts->lead ? opts->lead : "0";
        if (status == ECG_OK && embed && strcmp(out->lead, embed) != 0 &&
            strcmp(chosen, embed) != 0) {
            ecg_signal_free(out);
            return ecg_fail(err, ECG_ERR_ARG, "bad_lead",
                            "embed_lead \"%.32s\" is not one of the selected leads",
                            opts->embed_lead);
        }
        return status;
    }
    memset(out, 0, sizeof *out);
    status = ecg_lead_list_parse(opts->lead, store, sizeof store, names, &n, &all, err);
    if (status != ECG_OK)
        return status;
    char time_column[32];
    double fs_from_time = 0;
    status = probe_time_column(src, opts, time_column, sizeof time_column, &fs_from_time, err);
    if (status != ECG_OK)
        return status;
    if (all) {
        size_t first = time_column[0] ? 1 : 0; /* the time column is no lead */
        for (n = 0; n < ECG_MAX_LEADS; n++) {
            snprintf(index_names[n], sizeof index_names[n], "%zu", n + first);
            names[n] = index_names[n];
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct ecg_read_opts one = *opts;
        struct ecg_signal sig = {0};
        one.lead = names[i];
        one.embed_lead = NULL;
        if (fs_from_time > 0)
            one.fs_hz = fs_from_time;
        status = read_one(src, &one, &sig, err);
        if (status == ECG_ERR_NOT_FOUND && all && i > 0) {
            n = i;
            status = ECG_OK;
            break;
        }
        decimal_comma = decimal_comma || (status == ECG_OK && sig.decimal_comma);
        if (status == ECG_OK)
            status = add_lead(out, &sig, names[i], err);
        ecg_signal_free(&sig);
        if (status != ECG_OK)
            goto fail;
    }
    if (opts->embed_lead) {
        status = put_first(out, opts->embed_lead, names, err);
        if (status != ECG_OK)
            goto fail;
        out->lead_chosen = true;
    }
    snprintf(out->time_column, sizeof out->time_column, "%s", time_column);
    out->fs_from_time = fs_from_time > 0;
    out->decimal_comma = decimal_comma;
    return ECG_OK;
fail:
    ecg_signal_free(out);
    return status;
}

enum ecg_status ecg_read_memory(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err)
{
    const struct read_source src = {.buf = buf, .len = len};
    if (!out)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no output signal");
    return read_leads(&src, opts, out, err);
}

enum ecg_status ecg_read_file(const char *path, const struct ecg_read_opts *opts,
                              struct ecg_signal *out, struct ecg_error *err)
{
    const struct read_source src = {.path = path};
    if (!out)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no output signal");
    if (!path || !*path) {
        memset(out, 0, sizeof *out);
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no input path");
    }
    return read_leads(&src, opts, out, err);
}

enum ecg_status ecg_read_wfdb_memory(const char *hea_name, const char *hea, size_t hea_len,
                                     const char *dat_name, const void *dat, size_t dat_len,
                                     const struct ecg_read_opts *opts, struct ecg_signal *out,
                                     struct ecg_error *err)
{
    const struct wfdb_memory rec = {.hea_name = hea_name, .hea = hea, .hea_len = hea_len,
                                    .dat_name = dat_name, .dat = dat, .dat_len = dat_len};
    const struct read_source src = {.wfdb = &rec};
    if (!out)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no output signal");
    memset(out, 0, sizeof *out);
    if (!hea || !dat || !hea_name || !dat_name)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "a WFDB record needs its header and "
                        "its signal file");
    return read_leads(&src, opts, out, err);
}
