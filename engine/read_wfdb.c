/*
 * read_wfdb.c - WFDB records (PhysioNet): header (.hea), signal file (.dat) in formats 212 and
 * 16, and reference annotations (.atr, MIT format).
 *
 * Only single-segment records whose selected signal lives in a format-212 or format-16 file are
 * read; everything else is refused with a message naming the header line. Samples are converted
 * to physical units as (adu - baseline) / gain. Every read is bounds-checked: a .dat shorter than
 * the header claims is an error, not a short signal.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"
#include "read_internal.h"

#define WFDB_MAX_SIGNALS 64
#define WFDB_LINE_MAX 1024

struct wfdb_signal {
    char file[256];
    int format;
    double gain;
    long baseline;
    char description[64];
};

struct wfdb_header {
    int n_signals;
    double fs_hz;
    long n_samples; /* per signal; -1 if the header does not say */
    struct wfdb_signal sig[WFDB_MAX_SIGNALS];
};

/* Reads a whole file into memory. On success *data is malloc'd (NUL-terminated). */
static enum ecg_status slurp(const char *path, char **data, size_t *len, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ecg_fail(err, ECG_ERR_IO, "io_error", "%s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: cannot seek", path);
        goto out;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: cannot tell size", path);
        goto out;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%s: %ld bytes", path, size);
        goto out;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "%s: short read", path);
        goto out;
    }
    buf[size] = '\0';
    *data = buf;
    *len = (size_t)size;
    buf = NULL;
out:
    free(buf);
    fclose(f);
    return status;
}

/* Splits "dir/rec.hea" / "dir/rec" into the record base path "dir/rec" and directory "dir/". */
static void record_paths(const char *path, char *base, size_t base_cap, char *dir, size_t dir_cap)
{
    snprintf(base, base_cap, "%s", path);
    size_t n = strlen(base);
    if (n > 4 && (strcmp(base + n - 4, ".hea") == 0 || strcmp(base + n - 4, ".dat") == 0 ||
                  strcmp(base + n - 4, ".atr") == 0))
        base[n - 4] = '\0';
    snprintf(dir, dir_cap, "%s", base);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        dir[0] = '\0';
}

/* Parses one signal specification line of a header. */
static enum ecg_status parse_signal_line(const char *line, int lineno, const char *hea,
                                         struct wfdb_signal *sig, struct ecg_error *err)
{
    char file[256], fmt[64], gain[64] = "", desc[64] = "";
    long adcres = 0, adczero = 0, initval = 0, checksum = 0, blocksize = 0;
    int consumed = 0;
    int got = sscanf(line, "%255s %63s %63s %ld %ld %ld %ld %ld %n", file, fmt, gain, &adcres,
                     &adczero, &initval, &checksum, &blocksize, &consumed);
    if (got < 2)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s line %d: expected \"FILE FORMAT ...\"",
                        hea, lineno);
    if (got >= 8 && consumed > 0) {
        snprintf(desc, sizeof desc, "%s", line + consumed);
        desc[strcspn(desc, "\r\n")] = '\0';
    }
    snprintf(sig->file, sizeof sig->file, "%s", file);
    char *endp = NULL;
    long format = strtol(fmt, &endp, 10);
    if (endp == fmt || (*endp != '\0' && *endp != 'x' && *endp != ':' && *endp != '+'))
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s line %d: bad format \"%s\"", hea,
                        lineno, fmt);
    if (*endp != '\0')
        return ecg_fail(err, ECG_ERR_UNSUPPORTED, "unsupported_wfdb",
                        "%s line %d: format modifiers (\"%s\") are not supported", hea, lineno,
                        fmt);
    sig->format = (int)format;
    sig->gain = 200.0; /* WFDB's default when the field is absent or zero */
    sig->baseline = got >= 5 ? adczero : 0;
    if (got >= 3) {
        double g = strtod(gain, &endp);
        if (endp == gain || !(g >= 0.0) || !isfinite(g))
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s line %d: bad gain \"%s\"", hea,
                            lineno, gain);
        if (g > 0.0)
            sig->gain = g;
        if (*endp == '(') {
            char *close = NULL;
            long b = strtol(endp + 1, &close, 10);
            if (close == endp + 1 || *close != ')')
                return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s line %d: bad baseline in \"%s\"",
                                hea, lineno, gain);
            sig->baseline = b;
        }
    }
    snprintf(sig->description, sizeof sig->description, "%s", desc);
    return ECG_OK;
}

static enum ecg_status parse_header(const char *text, const char *hea, struct wfdb_header *h,
                                    struct ecg_error *err)
{
    int lineno = 0, signals_seen = 0;
    bool record_line = false;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[WFDB_LINE_MAX];
        lineno++;
        if (len >= sizeof line)
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s line %d: line too long", hea,
                            lineno);
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol ? eol + 1 : p + len;
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        if (*s == '\0' || *s == '#')
            continue;
        if (!record_line) {
            char name[128], nsig[32], fs[64] = "";
            long nsamp = -1;
            int got = sscanf(s, "%127s %31s %63s %ld", name, nsig, fs, &nsamp);
            if (got < 2)
                return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                                "%s line %d: expected \"RECORD NSIG [FS [NSAMP]]\"", hea, lineno);
            if (strchr(name, '/'))
                return ecg_fail(err, ECG_ERR_UNSUPPORTED, "unsupported_wfdb",
                                "%s line %d: multi-segment records are not supported", hea, lineno);
            char *endp = NULL;
            long n = strtol(nsig, &endp, 10);
            if (*endp != '\0' || n < 1 || n > WFDB_MAX_SIGNALS)
                return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                                "%s line %d: bad signal count \"%s\"", hea, lineno, nsig);
            h->n_signals = (int)n;
            h->fs_hz = 250.0; /* WFDB default */
            if (got >= 3) {
                double f = strtod(fs, &endp);
                /* finite too: "18e0360" is a number to strtod, an infinite rate to no one */
                if (endp == fs || !(f > 0.0) || !isfinite(f) ||
                    (*endp != '\0' && *endp != '/' && *endp != '('))
                    return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                                    "%s line %d: bad sampling frequency \"%s\"", hea, lineno, fs);
                h->fs_hz = f;
            }
            h->n_samples = got >= 4 ? nsamp : -1;
            record_line = true;
            continue;
        }
        if (signals_seen >= h->n_signals)
            continue; /* trailing info lines */
        enum ecg_status st = parse_signal_line(s, lineno, hea, &h->sig[signals_seen], err);
        if (st != ECG_OK)
            return st;
        signals_seen++;
    }
    if (!record_line)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s: no record line", hea);
    if (signals_seen < h->n_signals)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s: header declares %d signals, lists %d",
                        hea, h->n_signals, signals_seen);
    return ECG_OK;
}

/* Picks the signal by 0-based index or description. */
static enum ecg_status pick_signal(const struct wfdb_header *h, const char *lead, const char *hea,
                                   int *which, struct ecg_error *err)
{
    long index = 0;
    if (read_lead_index(lead, &index)) {
        if (index < 0 || index >= h->n_signals)
            return ecg_fail(err, ECG_ERR_NOT_FOUND, "no_such_lead",
                            "%s: lead %ld requested, record has %d", hea, index, h->n_signals);
        *which = (int)index;
        return ECG_OK;
    }
    for (int i = 0; i < h->n_signals; i++) {
        if (strcmp(h->sig[i].description, lead) == 0) {
            *which = i;
            return ECG_OK;
        }
    }
    return ecg_fail(err, ECG_ERR_NOT_FOUND, "no_such_lead", "%s: no lead named \"%s\"", hea, lead);
}

/* Decodes signal `which` of the frames in data into physical units. Signals sharing a file are
 * interleaved frame by frame; format 212 packs pairs of consecutive samples into 3 bytes. */
static enum ecg_status decode_samples(const struct wfdb_header *h, int first, int count,
                                      int which, const unsigned char *data, size_t len,
                                      const char *dat, float *out, size_t n_frames,
                                      struct ecg_error *err)
{
    const struct wfdb_signal *sig = &h->sig[which];
    size_t stride = (size_t)count;
    size_t pos_in_frame = (size_t)(which - first);
    size_t need = sig->format == 16 ? n_frames * stride * 2 : (n_frames * stride * 3 + 1) / 2;
    if (len < need)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                        "%s: %zu bytes, header implies at least %zu", dat, len, need);
    double scale = 1.0 / sig->gain;
    for (size_t i = 0; i < n_frames; i++) {
        size_t k = i * stride + pos_in_frame; /* index in the interleaved sample stream */
        int v;
        if (sig->format == 16) {
            v = (int16_t)(data[2 * k] | (data[2 * k + 1] << 8));
        } else {
            const unsigned char *b = data + (k / 2) * 3;
            if (k % 2 == 0)
                v = b[0] | ((b[1] & 0x0f) << 8);
            else
                v = b[2] | ((b[1] & 0xf0) << 4);
            if (v & 0x800)
                v -= 0x1000;
        }
        /* in double: a header's baseline may be any long (LONG_MAX from "1055...5") */
        out[i] = (float)(((double)v - (double)sig->baseline) * scale);
    }
    return ECG_OK;
}

/* Where the signal file of a record comes from: a file beside the header, or memory. */
struct dat_source {
    const char *dir;        /* files: the header's directory ("" or ending in '/') */
    const char *name;       /* memory: the file name the data was sent under */
    const char *data;       /* memory: the bytes */
    size_t len;
};

/* The record from its header text and signal file: both readers' common part. */
static enum ecg_status read_wfdb_record(const char *text, size_t text_len, const char *hea,
                                        const struct dat_source *src,
                                        const struct ecg_read_opts *opts,
                                        struct ecg_signal *out, struct ecg_error *err)
{
    enum ecg_status status;
    char dat[PATH_MAX * 2];
    char *file_data = NULL;
    const char *data = NULL;
    size_t data_len = 0;
    float *samples = NULL;
    struct wfdb_header *h = calloc(1, sizeof *h);

    memset(out, 0, sizeof *out);
    if (!h)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "WFDB header");
    if (memchr(text, '\0', text_len)) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb", "%s: binary data in header", hea);
        goto out;
    }
    status = parse_header(text, hea, h, err);
    if (status != ECG_OK)
        goto out;
    int which = 0;
    status = pick_signal(h, opts ? opts->lead : NULL, hea, &which, err);
    if (status != ECG_OK)
        goto out;
    const struct wfdb_signal *sig = &h->sig[which];
    if (sig->format != 212 && sig->format != 16) {
        status = ecg_fail(err, ECG_ERR_UNSUPPORTED, "unsupported_wfdb",
                          "%s: signal %d has format %d; formats 212 and 16 are supported", hea,
                          which, sig->format);
        goto out;
    }
    /* Signals stored in the same file form one interleaved group. */
    int first = which, count = 0;
    while (first > 0 && strcmp(h->sig[first - 1].file, sig->file) == 0)
        first--;
    while (first + count < h->n_signals && strcmp(h->sig[first + count].file, sig->file) == 0) {
        if (h->sig[first + count].format != sig->format) {
            status = ecg_fail(err, ECG_ERR_UNSUPPORTED, "unsupported_wfdb",
                              "%s: signals sharing %s have different formats", hea, sig->file);
            goto out;
        }
        count++;
    }
    if (strchr(sig->file, '/') || strcmp(sig->file, "-") == 0) {
        status = ecg_fail(err, ECG_ERR_UNSUPPORTED, "unsupported_wfdb",
                          "%s: signal file \"%s\" must be a plain name beside the header", hea,
                          sig->file);
        goto out;
    }
    if (src->dir) {
        snprintf(dat, sizeof dat, "%s%s", src->dir, sig->file);
        status = slurp(dat, &file_data, &data_len, err);
        if (status != ECG_OK)
            goto out;
        data = file_data;
    } else {
        if (strcmp(src->name, sig->file) != 0) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                              "%s: signal %d is in \"%s\", but the signal file sent is \"%s\"",
                              hea, which, sig->file, src->name);
            goto out;
        }
        snprintf(dat, sizeof dat, "%s", src->name);
        data = src->data;
        data_len = src->len;
    }
    size_t bytes_per_frame_x2 = sig->format == 16 ? 4 * (size_t)count : 3 * (size_t)count;
    size_t frames = (data_len * 2) / bytes_per_frame_x2;
    if (h->n_samples >= 0) {
        if ((size_t)h->n_samples > frames) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_wfdb",
                              "%s: header declares %ld samples, %s holds %zu", hea, h->n_samples,
                              dat, frames);
            goto out;
        }
        frames = (size_t)h->n_samples;
    }
    if (frames == 0) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "%s: no samples", dat);
        goto out;
    }
    status = read_check_count(frames, opts, err);
    if (status != ECG_OK)
        goto out;
    samples = malloc(frames * sizeof *samples);
    if (!samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%zu samples", frames);
        goto out;
    }
    status = decode_samples(h, first, count, which, (const unsigned char *)data, data_len, dat,
                            samples, frames, err);
    if (status != ECG_OK)
        goto out;
    out->samples = samples;
    out->n = frames;
    out->fs_hz = h->fs_hz;
    read_set_lead(out, sig->description, strlen(sig->description));
    samples = NULL;
out:
    free(samples);
    free(file_data);
    free(h);
    return status;
}

enum ecg_status read_wfdb_file(const char *path, const struct ecg_read_opts *opts,
                               struct ecg_signal *out, struct ecg_error *err)
{
    char base[PATH_MAX], dir[PATH_MAX], hea[PATH_MAX + 8];
    char *text = NULL;
    size_t text_len = 0;

    memset(out, 0, sizeof *out);
    record_paths(path, base, sizeof base, dir, sizeof dir);
    snprintf(hea, sizeof hea, "%s.hea", base);
    enum ecg_status status = slurp(hea, &text, &text_len, err);
    if (status != ECG_OK)
        return status;
    struct dat_source src = {.dir = dir};
    status = read_wfdb_record(text, text_len, hea, &src, opts, out, err);
    free(text);
    return status;
}

enum ecg_status read_wfdb_memory(const struct wfdb_memory *rec, const struct ecg_read_opts *opts,
                                 struct ecg_signal *out, struct ecg_error *err)
{
    const char *hea = rec->hea;
    size_t hea_len = rec->hea_len;
    /* The header parser reads a NUL-terminated text. */
    char *text = malloc(hea_len + 1);
    memset(out, 0, sizeof *out);
    if (!text)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "WFDB header");
    memcpy(text, hea, hea_len);
    text[hea_len] = '\0';
    struct dat_source src = {.name = rec->dat_name, .data = rec->dat, .len = rec->dat_len};
    enum ecg_status status = read_wfdb_record(text, hea_len, rec->hea_name, &src, opts, out, err);
    free(text);
    return status;
}

/* ---------------------------------------------------------------- annotations */

/* MIT annotation codes 1..41 to their symbols (WFDB's ecgcodes.h); ' ' = unused code. */
static const char ANNOTATION_SYMBOLS[] = " NLRaVFJASEj/Q~ | sT*D\"=pB^t+u?![]exf()r";

enum {
    ANN_VFON = 32,
    ANN_VFOFF = 33,
    ANN_SKIP = 59,
    ANN_NUM = 60,
    ANN_SUB = 61,
    ANN_CHN = 62,
    ANN_AUX = 63,
};

/* Opens a VF episode at a '[' mark or closes the open one at a ']' mark. An episode still open at
 * the end of the record lasts to its end. */
static enum ecg_status add_vf_mark(struct ecg_annotations *ann, bool on, int64_t t,
                                   const char *atr, struct ecg_error *err)
{
    bool open_episode = ann->n_vf > 0 && ann->vf_end[ann->n_vf - 1] == INT64_MAX;
    if (!on) {
        if (open_episode)
            ann->vf_end[ann->n_vf - 1] = t;
        return ECG_OK;
    }
    if (open_episode)
        return ECG_OK;
    int64_t *s = realloc(ann->vf_start, (ann->n_vf + 1) * sizeof *s);
    if (!s)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%s: VF episodes", atr);
    ann->vf_start = s;
    int64_t *e = realloc(ann->vf_end, (ann->n_vf + 1) * sizeof *e);
    if (!e)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%s: VF episodes", atr);
    ann->vf_end = e;
    ann->vf_start[ann->n_vf] = t;
    ann->vf_end[ann->n_vf] = INT64_MAX;
    ann->n_vf++;
    return ECG_OK;
}

bool ecg_annotations_in_vf(const struct ecg_annotations *ann, int64_t sample)
{
    for (size_t i = 0; i < ann->n_vf; i++) {
        if (sample >= ann->vf_start[i] && sample <= ann->vf_end[i])
            return true;
    }
    return false;
}

enum ecg_status ecg_annotations_read(const char *path, struct ecg_annotations *out,
                                     struct ecg_error *err)
{
    enum ecg_status status;
    char base[PATH_MAX], dir[PATH_MAX], atr[PATH_MAX + 8];
    char *data = NULL;
    size_t len = 0, cap = 0, n = 0;
    int64_t *sample = NULL;
    char *symbol = NULL;

    memset(out, 0, sizeof *out);
    record_paths(path, base, sizeof base, dir, sizeof dir);
    snprintf(atr, sizeof atr, "%s.atr", base);
    status = slurp(atr, &data, &len, err);
    if (status != ECG_OK)
        return status;
    const unsigned char *b = (const unsigned char *)data;
    int64_t t = 0;
    size_t pos = 0;
    while (pos + 2 <= len) {
        unsigned word = b[pos] | (b[pos + 1] << 8);
        unsigned code = word >> 10, interval = word & 0x3ff;
        pos += 2;
        if (code == 0 && interval == 0)
            break; /* end of annotations */
        if (code == ANN_SKIP) {
            if (pos + 4 > len) {
                status = ecg_fail(err, ECG_ERR_FORMAT, "bad_annotations",
                                  "%s byte %zu: truncated SKIP", atr, pos);
                goto out;
            }
            /* PDP-11 order: high 16-bit word first, each word little-endian. */
            int32_t skip = (int32_t)((uint32_t)(b[pos] | (b[pos + 1] << 8)) << 16 |
                                     (uint32_t)(b[pos + 2] | (b[pos + 3] << 8)));
            t += skip;
            pos += 4;
            continue;
        }
        if (code == ANN_AUX) {
            pos += interval + (interval & 1);
            continue;
        }
        if (code == ANN_NUM || code == ANN_SUB || code == ANN_CHN)
            continue;
        t += interval;
        if (code == ANN_VFON || code == ANN_VFOFF) {
            status = add_vf_mark(out, code == ANN_VFON, t, atr, err);
            if (status != ECG_OK)
                goto out;
            continue;
        }
        if (code == 0 || code >= sizeof ANNOTATION_SYMBOLS - 1)
            continue;
        char sym = ANNOTATION_SYMBOLS[code];
        if (!ecg_aami_class(sym))
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            int64_t *ns = realloc(sample, ncap * sizeof *ns);
            if (!ns) {
                status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "annotations");
                goto out;
            }
            sample = ns;
            char *nsym = realloc(symbol, ncap);
            if (!nsym) {
                status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "annotations");
                goto out;
            }
            symbol = nsym;
            cap = ncap;
        }
        sample[n] = t;
        symbol[n] = sym;
        n++;
    }
    out->sample = sample;
    out->symbol = symbol;
    out->n = n;
    sample = NULL;
    symbol = NULL;
out:
    if (status != ECG_OK) {
        free(out->vf_start);
        free(out->vf_end);
        memset(out, 0, sizeof *out);
    }
    free(sample);
    free(symbol);
    free(data);
    return status;
}

void ecg_annotations_free(struct ecg_annotations *ann)
{
    if (!ann)
        return;
    free(ann->sample);
    free(ann->symbol);
    free(ann->vf_start);
    free(ann->vf_end);
    memset(ann, 0, sizeof *ann);
}
