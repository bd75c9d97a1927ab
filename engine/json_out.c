/*
 * json_out.c - the JSON answer shared by `ecgd analyze`, the service and the dashboard.
 *
 * The per-beat arrays dominate the output (a 20-hour recording has ~100k beats), so numbers are
 * printed by hand-written formatters straight into the output buffer rather than one cJSON node
 * or one snprintf per number. Floats are printed with 6 significant digits (%.6g-style, shortest
 * form without trailing zeros); NaN becomes null. The output is deterministic apart from
 * "timing_ms".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ecg.h"

/* Writes the decimal form of v; returns the number of characters. */
static size_t format_int(int64_t v, char *out)
{
    char tmp[24];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10,
                               1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21,
                               1e22};

static double pow10_int(int e)
{
    if (e >= 0 && e <= 22)
        return POW10[e];
    if (e < 0 && e >= -22)
        return 1.0 / POW10[-e];
    return pow(10.0, e);
}

/*
 * Writes v with 6 significant digits, like printf's %.6g (fixed notation for exponents -5..5,
 * otherwise d.ddddde+XX), or "null" for NaN/Inf. Returns the number of characters (<= 16).
 */
static size_t format_g6(double v, char *out)
{
    if (!isfinite(v)) {
        memcpy(out, "null", 4);
        return 4;
    }
    size_t len = 0;
    if (v < 0) {
        out[len++] = '-';
        v = -v;
    }
    if (v == 0.0) {
        out[len++] = '0';
        return len;
    }
    int e = (int)floor(log10(v));
    double scaled = v * pow10_int(5 - e);
    double frac = scaled - floor(scaled);
    if (fabs(frac - 0.5) < 1e-6) {
        /* Near a rounding tie the scaled product is not exact enough: let printf round the
         * exact binary value (ties to even), as %.6g does. Rare. */
        int n = snprintf(out + len, 16, "%.6g", v);
        return len + (size_t)n;
    }
    int64_t digits = (int64_t)llround(scaled);
    if (digits >= 1000000) { /* rounding carried into a new digit: 999999.7 -> 1000000 */
        digits /= 10;
        e++;
    } else if (digits < 100000) { /* log10 landed just below an integer */
        digits = (int64_t)llround(v * pow10_int(6 - e));
        e--;
    }
    char d[6];
    for (int i = 5; i >= 0; i--) {
        d[i] = (char)('0' + digits % 10);
        digits /= 10;
    }
    int last = 5; /* index of the last significant non-zero digit */
    while (last > 0 && d[last] == '0')
        last--;
    if (e >= -5 && e <= 5) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++)
                out[len++] = d[i];
            if (last > e) {
                out[len++] = '.';
                for (int i = e + 1; i <= last; i++)
                    out[len++] = d[i];
            }
        } else {
            out[len++] = '0';
            out[len++] = '.';
            for (int i = 0; i < -e - 1; i++)
                out[len++] = '0';
            for (int i = 0; i <= last; i++)
                out[len++] = d[i];
        }
        return len;
    }
    out[len++] = d[0];
    if (last > 0) {
        out[len++] = '.';
        for (int i = 1; i <= last; i++)
            out[len++] = d[i];
    }
    out[len++] = 'e';
    out[len++] = e < 0 ? '-' : '+';
    int ae = e < 0 ? -e : e;
    if (ae < 10)
        out[len++] = '0';
    len += format_int(ae, out + len);
    return len;
}

/*
 * Writes v with exactly `decimals` (1..6) digits after the point, as printf's %.Nf, without
 * printf where that is safe: |v| * 10^decimals below 2^31, whose double product is within
 * 2^-22 of the exact one, and not within 1e-6 of a rounding tie, so rounding the product to the
 * nearest integer rounds the exact binary value as printf does. Elsewhere (large values, near
 * ties, which printf settles on the exact value, ties to even; NaN and infinities) it is printf.
 * Writes at most cap - 1 characters (the fast path at most 18) and returns their number.
 */
static size_t format_fixed(double v, int decimals, char *out, size_t cap)
{
    const double scaled = fabs(v) * POW10[decimals];
    const double frac = scaled - floor(scaled);
    if (!(scaled < 2147483648.0) || fabs(frac - 0.5) < 1e-6) {
        int n = snprintf(out, cap, "%.*f", decimals, v);
        return n <= 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    }
    const uint64_t units = (uint64_t)llround(scaled);
    const uint64_t one = (uint64_t)POW10[decimals];
    size_t len = 0;
    if (signbit(v))
        out[len++] = '-'; /* printf's "-0.000" for a negative value that rounds to zero too */
    len += format_int((int64_t)(units / one), out + len);
    out[len++] = '.';
    uint64_t f = units % one;
    for (int i = decimals - 1; i >= 0; i--) {
        out[len + (size_t)i] = (char)('0' + f % 10);
        f /= 10;
    }
    return len + (size_t)decimals;
}

/* Appends a JSON string with escaping. */
static void put_string(struct ecg_buf *out, const char *s)
{
    ecg_buf_append(out, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            ecg_buf_append(out, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            ecg_buf_append(out, esc, 6);
        } else {
            ecg_buf_append(out, (const char *)p, 1);
        }
    }
    ecg_buf_append(out, "\"", 1);
}

static void put_number(struct ecg_buf *out, double v)
{
    char tmp[32];
    ecg_buf_append(out, tmp, format_g6(v, tmp));
}

/* Per-element callback writing one array entry into tmp; returns its length. */
typedef size_t (*element_fn)(const struct ecg_result *r, size_t i, char *tmp);

static size_t el_r_peak(const struct ecg_result *r, size_t i, char *t) { return format_int(r->r_peak[i], t); }
static size_t el_onset(const struct ecg_result *r, size_t i, char *t) { return format_int(r->onset[i], t); }
static size_t el_end(const struct ecg_result *r, size_t i, char *t) { return format_int(r->end[i], t); }
static size_t el_rr(const struct ecg_result *r, size_t i, char *t) { return format_g6(r->rr_ms[i], t); }
static size_t el_score(const struct ecg_result *r, size_t i, char *t) { return format_g6(r->score[i], t); }

static size_t el_bool(const uint8_t *v, size_t i, char *t)
{
    if (v[i]) {
        memcpy(t, "true", 4);
        return 4;
    }
    memcpy(t, "false", 5);
    return 5;
}
static size_t el_kept(const struct ecg_result *r, size_t i, char *t) { return el_bool(r->kept, i, t); }
static size_t el_readable(const struct ecg_result *r, size_t i, char *t) { return el_bool(r->readable, i, t); }
static size_t el_nn(const struct ecg_result *r, size_t i, char *t) { return el_bool(r->nn, i, t); }
static size_t el_quality(const struct ecg_result *r, size_t i, char *t) { return format_g6(r->beat_quality[i], t); }

/* A plain boolean: false for beats not scored (scored says which were). */
static size_t el_outlier(const struct ecg_result *r, size_t i, char *t)
{
    if (!r->kept[i]) {
        memcpy(t, "false", 5);
        return 5;
    }
    return el_bool(r->outlier, i, t);
}

/* The R peak's time in seconds from the recording's start, to 0.1 ms. */
static size_t el_r_peak_s(const struct ecg_result *r, size_t i, char *t)
{
    return format_fixed((double)r->r_peak[i] / r->fs_hz, 4, t, 24);
}

static size_t el_latent(const struct ecg_result *r, size_t i, char *t)
{
    if (!r->kept[i]) {
        memcpy(t, "null", 4);
        return 4;
    }
    size_t len = 0;
    t[len++] = '[';
    for (uint32_t d = 0; d < r->latent_dim; d++) {
        if (d)
            t[len++] = ',';
        len += format_g6(r->latent[i * r->latent_dim + d], t + len);
    }
    t[len++] = ']';
    return len;
}

/* Writes "name":[...] for n elements. Elements are at most 16 chars each, latents 2 + 17*dim. */
static void put_array(struct ecg_buf *out, bool *first, const char *name,
                      const struct ecg_result *r, element_fn fn, size_t max_width)
{
    if (!*first)
        ecg_buf_append(out, ",", 1);
    *first = false;
    put_string(out, name);
    ecg_buf_append(out, ":[", 2);
    for (size_t i = 0; i < r->n_beats; i++) {
        char *tail = ecg_buf_reserve(out, max_width + 1);
        if (!tail)
            return;
        size_t len = 0;
        if (i)
            tail[len++] = ',';
        len += fn(r, i, tail + len);
        out->len += len;
    }
    ecg_buf_append(out, "]", 1);
    if (!out->failed)
        out->data[out->len] = '\0';
}

/* The rhythm summary: heart rate and HRV over the normal-to-normal intervals only (hrv.c). */
static void put_summary(struct ecg_buf *out, const struct ecg_result *r)
{
    const struct ecg_hrv *h = &r->hrv;
    size_t kept = 0, outliers = 0;
    for (size_t i = 0; i < r->n_beats; i++) {
        kept += r->kept[i];
        if (r->outlier && r->kept[i])
            outliers += r->outlier[i];
    }
    ecg_buf_printf(out, ",\"summary\":{\"beats\":%zu,\"kept\":%zu", r->n_beats, kept);
    if (r->outlier)
        ecg_buf_printf(out, ",\"outliers\":%zu", outliers);
    ecg_buf_printf(out, ",\"intervals\":{\"all\":%zu,\"nn\":%zu,\"nn_successive\":%zu,"
                   "\"used\":\"nn\"}", h->n_intervals, h->n_nn, h->n_successive);
    const struct {
        const char *open; /* text before the value: key, and the object it opens or closes */
        double v;
    } rows[] = {{",\"heart_rate_bpm\":{\"mean\":", h->hr_mean_bpm},
                {",\"min\":", h->hr_min_bpm},
                {",\"max\":", h->hr_max_bpm},
                {"},\"rr_ms\":{\"mean\":", h->nn_mean_ms},
                {",\"sdnn\":", h->sdnn_ms},
                {",\"rmssd\":", h->rmssd_ms},
                {"},\"hrv\":{\"sdnn_ms\":", h->sdnn_ms},
                {",\"rmssd_ms\":", h->rmssd_ms},
                {",\"pnn50_pct\":", h->pnn50_pct},
                {",\"sd1_ms\":", h->sd1_ms},
                {",\"sd2_ms\":", h->sd2_ms},
                {",\"lf_ms2\":", h->lf_ms2},
                {",\"hf_ms2\":", h->hf_ms2},
                {",\"lf_hf\":", h->lf_hf}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ecg_buf_puts(out, rows[i].open);
        put_number(out, rows[i].v);
    }
    ecg_buf_puts(out, "}}");
}

/* The quality verdict and the unreadable stretches (quality.c), in seconds and samples; with
 * several leads, each lead's own usable fraction. */
static void put_quality(struct ecg_buf *out, const struct ecg_result *r)
{
    const struct ecg_quality_report *q = &r->quality;
    ecg_buf_puts(out, ",\"quality\":{\"verdict\":");
    put_string(out, ecg_quality_verdict_name((enum ecg_quality_verdict)q->verdict));
    ecg_buf_puts(out, ",\"reason\":");
    if (q->reason == ECG_QUALITY_OK)
        ecg_buf_puts(out, "null");
    else
        put_string(out, ecg_quality_reason_name((enum ecg_quality_reason)q->reason));
    ecg_buf_puts(out, ",\"usable_fraction\":");
    put_number(out, q->usable_fraction);
    ecg_buf_puts(out, ",\"segments\":[");
    for (size_t i = 0; i < q->n_segments; i++) {
        const struct ecg_quality_segment *s = &q->segments[i];
        ecg_buf_puts(out, i ? ",{\"start\":" : "{\"start\":");
        put_number(out, (double)s->start / r->fs_hz);
        ecg_buf_puts(out, ",\"end\":");
        put_number(out, (double)s->end / r->fs_hz);
        ecg_buf_printf(out, ",\"start_sample\":%lld,\"end_sample\":%lld,\"reason\":",
                       (long long)s->start, (long long)s->end);
        put_string(out, ecg_quality_reason_name((enum ecg_quality_reason)s->reason));
        ecg_buf_puts(out, "}");
    }
    ecg_buf_puts(out, "]");
    if (q->n_leads > 1) { /* several leads: the verdict reads them together, and each alone */
        ecg_buf_puts(out, ",\"leads\":[");
        for (size_t l = 0; l < q->n_leads && l < r->n_leads; l++) {
            ecg_buf_puts(out, l ? ",{\"lead\":" : "{\"lead\":");
            put_string(out, r->leads[l]);
            ecg_buf_puts(out, ",\"usable_fraction\":");
            put_number(out, q->lead_usable[l]);
            if (!isnan(r->lead_agree[l])) { /* two leads or more: what detection saw */
                ecg_buf_puts(out, ",\"agreement\":");
                put_number(out, r->lead_agree[l]);
            }
            ecg_buf_puts(out, "}");
        }
        ecg_buf_puts(out, "]");
    }
    ecg_buf_puts(out, "}");
}

static void put_timing(struct ecg_buf *out, const struct ecg_timing *t)
{
    const struct {
        const char *name;
        double v;
    } rows[] = {{"read", t->read_ms},     {"resample", t->resample_ms}, {"filter", t->filter_ms},
                {"detect", t->detect_ms}, {"embed", t->embed_ms},       {"encode", t->encode_ms},
                {"quality", t->quality_ms}, {"total", t->total_ms}};
    ecg_buf_puts(out, ",\"timing_ms\":{");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char num[32];
        if (i)
            ecg_buf_puts(out, ",");
        put_string(out, rows[i].name);
        ecg_buf_puts(out, ":");
        ecg_buf_append(out, num, format_fixed(rows[i].v, 3, num, sizeof num));
    }
    ecg_buf_puts(out, "}");
}

void ecg_result_write_json(const struct ecg_result *r, const struct ecg_engine *engine,
                           unsigned include, struct ecg_buf *out)
{
    const struct ecg_model *model = ecg_engine_model(engine);
    ecg_buf_puts(out, "{\"ecgd_version\":\"" ECG_VERSION "\",\"backend\":");
    put_string(out, ecg_engine_backend(engine));
    if (model) {
        struct ecg_model_info info;
        ecg_model_get_info(model, &info);
        ecg_buf_puts(out, ",\"model\":{\"name\":");
        put_string(out, info.name);
        ecg_buf_puts(out, ",\"sha256\":");
        put_string(out, info.sha256);
        ecg_buf_puts(out, ",\"fs_hz\":");
        put_number(out, info.params.analysis_fs_hz);
        ecg_buf_printf(out, ",\"beat_len\":%u,\"latent_dim\":%u}", info.beat_len,
                       info.latent_dim);
    }
    ecg_buf_printf(out, ",\"signal\":{\"samples\":%zu,\"fs_hz\":", r->n_samples);
    put_number(out, r->fs_hz);
    ecg_buf_puts(out, ",\"duration_s\":");
    put_number(out, r->fs_hz > 0 ? (double)r->n_samples / r->fs_hz : NAN);
    ecg_buf_puts(out, ",\"lead\":");
    put_string(out, r->lead);
    ecg_buf_puts(out, ",\"leads\":[");
    for (size_t i = 0; i < r->n_leads || i == 0; i++) {
        if (i)
            ecg_buf_puts(out, ",");
        put_string(out, r->n_leads ? r->leads[i] : r->lead);
    }
    ecg_buf_puts(out, "]");
    if (r->lead_passed_over[0]) { /* the first lead selected showed no beats: lead was read */
        ecg_buf_puts(out, ",\"lead_passed_over\":");
        put_string(out, r->lead_passed_over);
    }
    if (r->time_column[0]) {
        ecg_buf_puts(out, ",\"time_column\":");
        put_string(out, r->time_column);
        ecg_buf_puts(out, r->fs_from_time ? ",\"fs_from\":\"time_column\"" : ",\"fs_from\":\"fs\"");
    }
    if (r->decimal_comma)
        ecg_buf_puts(out, ",\"decimal_mark\":\",\"");
    if (r->overlap_s > 0.0) { /* the previous strip's end: its beats were not reported */
        ecg_buf_puts(out, ",\"overlap_s\":");
        put_number(out, r->overlap_s);
        ecg_buf_printf(out, ",\"overlap_samples\":%zu", r->overlap);
    }
    ecg_buf_puts(out, "}");
    put_quality(out, r);
    if (include & ECG_INCLUDE_SUMMARY)
        put_summary(out, r);
    bool with_model = r->latent != NULL;
    unsigned beat_parts = ECG_INCLUDE_BEATS | (with_model ? ECG_INCLUDE_LATENT | ECG_INCLUDE_SCORE : 0);
    if (include & beat_parts) {
        bool first = true;
        ecg_buf_puts(out, ",\"beats\":{");
        if (include & ECG_INCLUDE_BEATS) {
            put_array(out, &first, "r_peak", r, el_r_peak, 20);
            put_array(out, &first, "r_peak_s", r, el_r_peak_s, 24);
            put_array(out, &first, "onset", r, el_onset, 20);
            put_array(out, &first, "end", r, el_end, 20);
            put_array(out, &first, "rr_ms", r, el_rr, 16);
            put_array(out, &first, "kept", r, el_kept, 5);
            if (r->beat_quality && r->readable) {
                put_array(out, &first, "quality", r, el_quality, 16);
                put_array(out, &first, "readable", r, el_readable, 5);
            }
            if (r->nn)
                put_array(out, &first, "nn", r, el_nn, 5);
        }
        if (with_model && (include & ECG_INCLUDE_LATENT))
            put_array(out, &first, "latent", r, el_latent, 2 + 17 * (size_t)r->latent_dim);
        if (with_model && (include & ECG_INCLUDE_SCORE)) {
            put_array(out, &first, "score", r, el_score, 16);
            put_array(out, &first, "scored", r, el_kept, 5);
            put_array(out, &first, "outlier", r, el_outlier, 5);
        }
        ecg_buf_puts(out, "}");
    }
    if (include & ECG_INCLUDE_TIMING)
        put_timing(out, &r->timing);
    ecg_buf_puts(out, "}\n");
}

bool ecg_include_parse(const char *list, unsigned *mask, struct ecg_error *err)
{
    static const struct {
        const char *name;
        unsigned bits;
    } parts[] = {{"beats", ECG_INCLUDE_BEATS},   {"latent", ECG_INCLUDE_LATENT},
                 {"score", ECG_INCLUDE_SCORE},   {"summary", ECG_INCLUDE_SUMMARY},
                 {"timing", ECG_INCLUDE_TIMING}, {"all", ECG_INCLUDE_ALL}};
    unsigned bits = 0;
    const char *p = list;
    if (!p || !*p) {
        *mask = ECG_INCLUDE_ALL;
        return true;
    }
    while (*p) {
        size_t len = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            if (strlen(parts[i].name) == len && strncmp(parts[i].name, p, len) == 0) {
                bits |= parts[i].bits;
                found = true;
            }
        }
        if (!found) {
            ecg_fail(err, ECG_ERR_FORMAT, "bad_include",
                     "include: unknown part \"%.*s\" (expected beats, latent, score, summary, "
                     "timing or all)", (int)(len > 32 ? 32 : len), p);
            return false;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    *mask = bits;
    return true;
}
