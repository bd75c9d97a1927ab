/*
 * eval.c - `ecgd eval`: score the detector, and the model's outlier scores, on annotated WFDB
 * records.
 *
 * Detection is scored beat by beat as ANSI/AAMI EC57 and WFDB's bxb do: a detected R peak matches
 * a reference beat annotation within 150 ms, every beat symbol counts, over whole records, except
 * that episodes of ventricular flutter or fibrillation (marked '[' ... ']' in the reference) are
 * left out, as the standard and bxb leave them out; the share of each AAMI class's reference
 * beats (N, S, V, F, Q) that is matched is reported too (EC57's ventricular sensitivity).
 * With a model, the scores of detected beats matched to reference beats give ROC-AUCs for
 * V vs N-class and abnormal (S, V, F, Q classes) vs N-class beats, and the outlier flag's
 * sensitivity and false-positive rate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ecg.h"

#define MATCH_WINDOW_S 0.150
#define MAX_RECORDS 512

struct score_lists {
    float *v[5];     /* per AAMI class: N S V F Q */
    size_t n[5], cap[5];
    size_t flagged[5];
};

static int class_index(char aami)
{
    const char *classes = "NSVFQ";
    const char *p = aami ? strchr(classes, aami) : NULL;
    return p ? (int)(p - classes) : -1;
}

static bool push_score(struct score_lists *s, int cls, float v)
{
    if (s->n[cls] == s->cap[cls]) {
        size_t cap = s->cap[cls] ? s->cap[cls] * 2 : 1024;
        float *p = realloc(s->v[cls], cap * sizeof *p);
        if (!p)
            return false;
        s->v[cls] = p;
        s->cap[cls] = cap;
    }
    s->v[cls][s->n[cls]++] = v;
    return true;
}

struct record_stats {
    char name[64];
    size_t n_ref;
    struct ecg_match_stats m;
    size_t n_ref_noisy;
    struct ecg_match_stats noisy; /* the noisy stretches of a noise stress test */
    struct ecg_match_stats whole; /* nothing left out: VF episodes counted too */
    /* of m's true and false detections, those the answer flags readable = false */
    size_t tp_unreadable, fp_unreadable;
    size_t pauses, inside_pauses; /* --pauses: the pauses made, the detections inside them */
    size_t class_beats[5], class_tp[5]; /* m's reference beats per AAMI class, and those found */
};

/* A noise stress test: noise record path and SNR; path NULL for none. */
struct stress {
    const char *path;
    double snr_db;
    double offset_s; /* where in the noise record the mixing starts (it wraps to its start) */
    bool pauses;     /* --pauses: sinus pauses made by taking beats out (take_beats_out) */
    bool blocked;    /* --blocked-pauses: ... that keep the P waves of the beats taken out */
};

/* ------------------------------------------------------------------ --pauses */

#define PAUSES_MAX 128
#define PAUSE_MIN_S 2.0     /* a pause lasts 2 to 6 s, from one kept beat to the next */
#define PAUSE_MAX_S 6.0
#define PAUSE_EVERY_MIN 40  /* beats kept between pauses: 40 to 79 */
#define PAUSE_EVERY_SPAN 40
#define PAUSE_P_FROM_S 0.26 /* --blocked-pauses: a beat's P wave, this long before its R peak */
#define PAUSE_P_TO_S 0.06   /* ... to this long before it */

/* Deterministic uniform numbers in [0, 1) (xorshift64*), seeded per record. */
static double pause_uniform(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

/*
 * --pauses: sinus pauses made from the record by taking beats out, the way a sinus arrest
 * does. After every 40 to 79 beats, the beats within a drawn 2-6 s after one are taken out of
 * the annotations and their samples, from 0.45 s after that beat to 0.25 s before the next one
 * kept, replaced on every lead by a level going from the one end to the other with the record's
 * own high-frequency noise (that of the 0.1 s after the next beat's T wave) and a slow 0.05-mV
 * swell; every other sample and beat keeps its time. No pause is made over a ventricular
 * flutter episode. pauses gets each pause's [start, end) (input samples), *n_pauses their count.
 * With blocked (--blocked-pauses), each beat taken out leaves its P wave in the pause (the
 * record's samples from PAUSE_P_FROM_S to PAUSE_P_TO_S before its R peak, less the straight line
 * between their ends, added to the level): the non-conducted P waves of a second-degree AV
 * block, where the atria keep their rhythm and the ventricles pause.
 */
static enum ecg_status take_beats_out(struct ecg_signal *sig, struct ecg_annotations *ann,
                                      const char *record, bool blocked, int64_t (*pauses)[2],
                                      size_t *n_pauses, struct ecg_error *err)
{
    const double fs = sig->fs_hz;
    const int64_t n = (int64_t)sig->n;
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (const char *c = record; *c; c++)
        seed = (seed ^ (uint64_t)(unsigned char)*c) * 0x100000001B3ULL;
    bool *gone = calloc(ann->n ? ann->n : 1, sizeof *gone);
    /* a pause's samples as they were, for the P waves (the longest pause and its margins) */
    float *was = blocked ? malloc((size_t)((PAUSE_MAX_S + 1.0) * fs) * sizeof *was) : NULL;
    if (!gone || (blocked && !was)) {
        free(gone);
        free(was);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "pauses");
    }
    *n_pauses = 0;
    size_t k = 10;
    while (k + 20 < ann->n && *n_pauses < PAUSES_MAX) {
        const double gap = (PAUSE_MIN_S + (PAUSE_MAX_S - PAUSE_MIN_S) * pause_uniform(&seed)) * fs;
        size_t j = k + 1;
        while (j + 1 < ann->n && (double)(ann->sample[j + 1] - ann->sample[k]) < gap)
            j++;
        const int64_t a = ann->sample[k] + (int64_t)(0.45 * fs);
        const int64_t b = ann->sample[j] - (int64_t)(0.25 * fs);
        const int64_t q = ann->sample[j] + (int64_t)(0.45 * fs);
        bool flutter = false;
        for (size_t v = 0; v < ann->n_vf; v++)
            flutter |= ann->vf_start[v] < b && ann->vf_end[v] >= a;
        if (j >= k + 2 && b > a && a > 0 && q + (int64_t)(0.1 * fs) + 1 < n && !flutter) {
            for (size_t m = k + 1; m < j; m++)
                gone[m] = true;
            for (size_t l = 0; l <= sig->n_extra; l++) {
                float *x = l ? sig->extra[l - 1] : sig->samples;
                double ss = 0.0;
                const int64_t hf_n = (int64_t)(0.1 * fs);
                for (int64_t i = q; i < q + hf_n; i++)
                    ss += ((double)x[i + 1] - x[i]) * ((double)x[i + 1] - x[i]);
                const double hf = sqrt(ss / (double)hf_n / 2.0);
                if (blocked)
                    memcpy(was, x + a, (size_t)(b - a) * sizeof *was);
                const double from = x[a - 1], to = x[b], len = (double)(b - a);
                for (int64_t i = a; i < b; i++) {
                    /* a standard normal number (Box-Muller) */
                    const double u1 = pause_uniform(&seed), u2 = pause_uniform(&seed);
                    const double z = sqrt(-2.0 * log(u1 > 0.0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
                    const double t = (double)(i - a) / len;
                    x[i] = (float)(from + (to - from) * t + hf * z + 0.05 * sin(M_PI * t));
                }
                for (size_t m = k + 1; blocked && m < j; m++) {
                    const int64_t lo = ann->sample[m] - (int64_t)(PAUSE_P_FROM_S * fs);
                    const int64_t hi = ann->sample[m] - (int64_t)(PAUSE_P_TO_S * fs);
                    if (lo < a || hi >= b)
                        continue;
                    const double e0 = was[lo - a], e1 = was[hi - a];
                    for (int64_t i = lo; i <= hi; i++) {
                        const double t = (double)(i - lo) / (double)(hi - lo);
                        x[i] += (float)(was[i - a] - (e0 + (e1 - e0) * t));
                    }
                }
            }
            pauses[*n_pauses][0] = a;
            pauses[*n_pauses][1] = b;
            (*n_pauses)++;
        }
        k = j + PAUSE_EVERY_MIN + (size_t)(PAUSE_EVERY_SPAN * pause_uniform(&seed));
    }
    size_t kept = 0;
    for (size_t i = 0; i < ann->n; i++)
        if (!gone[i]) {
            ann->sample[kept] = ann->sample[i];
            ann->symbol[kept] = ann->symbol[i];
            kept++;
        }
    ann->n = kept;
    free(gone);
    free(was);
    return ECG_OK;
}

/* The channel of the noise record that nst adds to the k-th selected lead: the lead's own
 * index in the record (nst pairs ECG signal i with noise signal i modulo the noise's count),
 * which is k itself for "all" and for leads chosen by name. */
static long noise_channel(const char *selection, size_t k)
{
    char store[ECG_MAX_LEADS * 33];
    const char *names[ECG_MAX_LEADS];
    size_t n = 0;
    bool all = false;
    struct ecg_error ignored;
    if (ecg_lead_list_parse(selection, store, sizeof store, names, &n, &all, &ignored) != ECG_OK)
        return (long)k;
    const char *token = n == 0 && !all && k == 0 ? selection : (k < n ? names[k] : NULL);
    char *end = NULL;
    long index = token ? strtol(token, &end, 10) : (long)k;
    return token && end != token && *end == '\0' ? index : (long)k;
}

/* Adds the stress test's noise to one lead (samples) of sig, from the noise record's channel. */
static enum ecg_status add_noise_lead(const struct stress *st, long channel,
                                      const struct ecg_annotations *ann, float *samples, size_t n,
                                      double fs_hz, struct ecg_error *err)
{
    struct ecg_signal noise = {0};
    char noise_lead[16];
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = noise_lead};
    snprintf(noise_lead, sizeof noise_lead, "%ld", channel);
    enum ecg_status status = ecg_read_file(st->path, &opts, &noise, err);
    if (status == ECG_ERR_NOT_FOUND && channel > 0) { /* modulo the noise's channel count */
        snprintf(noise_lead, sizeof noise_lead, "%ld", channel % 2);
        status = ecg_read_file(st->path, &opts, &noise, err);
    }
    if (status != ECG_OK)
        return status;
    if (fabs(noise.fs_hz - fs_hz) > 1e-9) {
        status = ecg_fail(err, ECG_ERR_UNSUPPORTED, "rate_mismatch",
                          "noise %s is sampled at %g Hz, the record at %g Hz", st->path,
                          noise.fs_hz, fs_hz);
        goto out;
    }
    double pp = 0.0, rms = 0.0;
    status = ecg_nst_amplitudes(samples, n, noise.samples, noise.n, fs_hz, ann, &pp, &rms, err);
    if (status != ECG_OK)
        goto out;
    /* --noise-offset: the same noise at the same gain (its RMS is taken over the whole record
     * above), read from another point: the record's noisy stretches meet other noise. */
    const size_t from =
        noise.n ? (size_t)fmod(floor(st->offset_s * fs_hz + 0.5), (double)noise.n) : 0;
    ecg_nst_mix_from(samples, n, noise.samples, noise.n, from, fs_hz,
                     ecg_nst_gain(st->snr_db, pp, rms), ECG_NST_START_S, ECG_NST_PERIOD_S);
out:
    ecg_signal_free(&noise);
    return status;
}

/* Adds the stress test's noise to every selected lead of sig. */
static enum ecg_status add_noise(const struct stress *st, const char *lead,
                                 const struct ecg_annotations *ann, struct ecg_signal *sig,
                                 struct ecg_error *err)
{
    enum ecg_status status = add_noise_lead(st, noise_channel(lead, 0), ann, sig->samples,
                                            sig->n, sig->fs_hz, err);
    for (size_t i = 0; i < sig->n_extra && status == ECG_OK; i++)
        status = add_noise_lead(st, noise_channel(lead, i + 1), ann, sig->extra[i], sig->n,
                                sig->fs_hz, err);
    return status;
}

/* Keeps the entries of v[0..n) (and their idx) that lie in a noisy stretch; returns the count. */
static size_t keep_noisy(int64_t *v, size_t n, double fs_hz)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ecg_nst_noisy((double)v[i] / fs_hz, ECG_NST_START_S, ECG_NST_PERIOD_S))
            v[k++] = v[i];
    return k;
}

/* --strips S [--strip-overlap O]: strips of len_s seconds, each posted with the overlap_s
 * seconds before it (0: none). */
struct strips {
    double len_s, overlap_s;
};

/* The beats of sig analysed as consecutive strips of len_s seconds, as a monitor that posts
 * short strips gets them: each strip analysed alone, its beats moved to the record's grid. With
 * an overlap, each strip after the first is analysed with the overlap_s seconds before it (as
 * far as the record goes back), and only its beats from its own first sample on are kept: those
 * of the overlap were the strip before's to report. The tail shorter than a strip is not
 * analysed; *n_used says how many samples were. merged owns r_peak, kept, readable and, when
 * the engine scores beats, score and outlier (free with merged_free). */
static enum ecg_status analyze_strips(struct ecg_engine *engine, const struct ecg_signal *sig,
                                      const struct strips *strips, struct ecg_result *merged,
                                      size_t *n_used, struct ecg_error *err)
{
    const size_t len = (size_t)floor(strips->len_s * sig->fs_hz + 0.5);
    const size_t overlap = (size_t)floor(strips->overlap_s * sig->fs_hz + 0.5);
    size_t cap = 0;
    bool scored = false;
    *n_used = 0;
    for (size_t at = 0; len > 0 && at + len <= sig->n; at += len) {
        struct ecg_signal part = *sig;
        const size_t before = at < overlap ? at : overlap; /* the overlap's samples */
        part.samples = sig->samples + at - before;
        part.n = before + len;
        for (size_t i = 0; i < sig->n_extra; i++)
            part.extra[i] = sig->extra[i] + at - before;
        struct ecg_result *res = NULL;
        enum ecg_status status = ecg_engine_analyze(engine, &part, &res, err);
        if (status != ECG_OK)
            return status;
        const size_t need = merged->n_beats + res->n_beats;
        if (need > cap) {
            cap = need * 2 + 64;
            int64_t *r = realloc(merged->r_peak, cap * sizeof *r);
            merged->r_peak = r ? r : merged->r_peak;
            float *sc = realloc(merged->score, cap * sizeof *sc);
            merged->score = sc ? sc : merged->score;
            uint8_t *k = realloc(merged->kept, cap);
            merged->kept = k ? k : merged->kept;
            uint8_t *u = realloc(merged->readable, cap);
            merged->readable = u ? u : merged->readable;
            uint8_t *o = realloc(merged->outlier, cap);
            merged->outlier = o ? o : merged->outlier;
            if (!r || !sc || !k || !u || !o) {
                ecg_result_free(res);
                return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "strip beats");
            }
        }
        scored = scored || res->score;
        /* the overlap's beats left out as the service leaves them (overlap_s) */
        if (before > 0 && ecg_result_drop_overlap(res, (double)before / sig->fs_hz, NULL, 0,
                                                  err) != ECG_OK) {
            ecg_result_free(res);
            return err->status;
        }
        for (size_t i = 0; i < res->n_beats; i++) {
            const size_t j = merged->n_beats + i;
            merged->r_peak[j] = res->r_peak[i] - (int64_t)before + (int64_t)at;
            merged->kept[j] = res->kept[i];
            merged->readable[j] = res->readable ? res->readable[i] : 1;
            merged->score[j] = res->score ? res->score[i] : NAN;
            merged->outlier[j] = res->outlier ? res->outlier[i] : 0;
        }
        merged->n_beats += res->n_beats;
        ecg_result_free(res);
        *n_used = at + len;
    }
    if (!scored) { /* no model: no scores, as for a whole record */
        free(merged->score);
        free(merged->outlier);
        merged->score = NULL;
        merged->outlier = NULL;
    }
    return ECG_OK;
}

static void merged_free(struct ecg_result *merged)
{
    free(merged->r_peak);
    free(merged->kept);
    free(merged->readable);
    free(merged->score);
    free(merged->outlier);
}

/* Evaluates one record; appends matched beats' scores to scores when the result has them. */
static enum ecg_status eval_record(struct ecg_engine *engine, const char *dir, const char *record,
                                   const char *lead, const struct stress *st,
                                   const char *test_path, const struct strips *strips,
                                   struct record_stats *rs,
                                   struct score_lists *scores, struct ecg_error *err)
{
    char path[4096];
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0}, test = {0};
    struct ecg_result *res = NULL, tested = {0}, merged = {0};
    int64_t *match = NULL, *ref = NULL, *det = NULL;
    size_t *ref_index = NULL, *det_index = NULL;
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    enum ecg_status status;

    snprintf(path, sizeof path, "%s/%s", dir, record);
    snprintf(rs->name, sizeof rs->name, "%s", record);
    status = ecg_read_file(path, &opts, &sig, err);
    if (status != ECG_OK)
        goto out;
    status = ecg_annotations_read(path, &ann, err);
    if (status != ECG_OK)
        goto out;
    int64_t pauses[PAUSES_MAX][2];
    size_t n_pauses = 0;
    if (st->pauses) {
        status = take_beats_out(&sig, &ann, record, st->blocked, pauses, &n_pauses, err);
        if (status != ECG_OK)
            goto out;
    }
    if (st->path) {
        status = add_noise(st, lead, &ann, &sig, err);
        if (status != ECG_OK)
            goto out;
    }
    if (test_path) {
        /* --test: the beats of an annotation file (ecgd analyze --annotations, or any
         * detector's) stand for the detections */
        status = ecg_annotations_read(test_path, &test, err);
        if (status != ECG_OK)
            goto out;
        tested.n_beats = test.n;
        tested.r_peak = test.sample;
        res = &tested;
    } else if (strips->len_s > 0.0) {
        /* --strips: only the samples the strips cover are scored */
        size_t n_used = 0;
        res = &merged;
        status = analyze_strips(engine, &sig, strips, &merged, &n_used, err);
        if (status != ECG_OK)
            goto out;
        while (ann.n > 0 && ann.sample[ann.n - 1] >= (int64_t)n_used)
            ann.n--;
    } else {
        status = ecg_engine_analyze(engine, &sig, &res, err);
        if (status != ECG_OK)
            goto out;
    }
    /* EC57: beats and detections inside VF episodes are left out of the comparison. */
    size_t n_ref = 0, n_det = 0;
    match = malloc((ann.n ? ann.n : 1) * sizeof *match);
    ref = malloc((ann.n ? ann.n : 1) * sizeof *ref);
    ref_index = malloc((ann.n ? ann.n : 1) * sizeof *ref_index);
    det = malloc((res->n_beats ? res->n_beats : 1) * sizeof *det);
    det_index = malloc((res->n_beats ? res->n_beats : 1) * sizeof *det_index);
    if (!match || !ref || !ref_index || !det || !det_index) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "match table");
        goto out;
    }
    for (size_t i = 0; i < ann.n; i++) {
        if (!ecg_annotations_in_vf(&ann, ann.sample[i])) {
            ref[n_ref] = ann.sample[i];
            ref_index[n_ref++] = i;
        }
    }
    for (size_t i = 0; i < res->n_beats; i++) {
        if (!ecg_annotations_in_vf(&ann, res->r_peak[i])) {
            det[n_det] = res->r_peak[i];
            det_index[n_det++] = i;
        }
    }
    rs->n_ref = n_ref;
    rs->pauses = n_pauses;
    for (size_t i = 0; i < res->n_beats; i++) /* test_robust's margins: 0.2 s and the window */
        for (size_t p = 0; p < n_pauses; p++)
            rs->inside_pauses += res->r_peak[i] > pauses[p][0] + (int64_t)(0.2 * sig.fs_hz) &&
                                 res->r_peak[i] < pauses[p][1] -
                                                      (int64_t)(MATCH_WINDOW_S * sig.fs_hz);
    ecg_match_beats(det, n_det, ref, n_ref, sig.fs_hz, MATCH_WINDOW_S, &rs->m, match);
    for (size_t j = 0; j < n_ref; j++) { /* what share of each class of beats is found */
        int cls = class_index(ecg_aami_class(ann.symbol[ref_index[j]]));
        if (cls >= 0) {
            rs->class_beats[cls]++;
            rs->class_tp[cls] += match[j] >= 0;
        }
    }
    if (res->readable) {
        /* how the quality verdict's flags split the true and the false detections */
        uint8_t *hit = calloc(n_det ? n_det : 1, 1);
        if (!hit) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "match table");
            goto out;
        }
        for (size_t j = 0; j < n_ref; j++)
            if (match[j] >= 0)
                hit[match[j]] = 1;
        for (size_t k = 0; k < n_det; k++) {
            bool flagged = !res->readable[det_index[k]];
            rs->tp_unreadable += flagged && hit[k];
            rs->fp_unreadable += flagged && !hit[k];
        }
        free(hit);
    }
    ecg_match_beats(res->r_peak, res->n_beats, ann.sample, ann.n, sig.fs_hz, MATCH_WINDOW_S,
                    &rs->whole, NULL);
    if (st->path) {
        /* the noisy stretches alone (after the scores below have read the full lists) */
        int64_t *ref_noisy = malloc((n_ref ? n_ref : 1) * sizeof *ref_noisy);
        int64_t *det_noisy = malloc((n_det ? n_det : 1) * sizeof *det_noisy);
        if (!ref_noisy || !det_noisy) {
            free(ref_noisy);
            free(det_noisy);
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "match table");
            goto out;
        }
        memcpy(ref_noisy, ref, n_ref * sizeof *ref);
        memcpy(det_noisy, det, n_det * sizeof *det);
        size_t nr = keep_noisy(ref_noisy, n_ref, sig.fs_hz);
        size_t nd = keep_noisy(det_noisy, n_det, sig.fs_hz);
        rs->n_ref_noisy = nr;
        ecg_match_beats(det_noisy, nd, ref_noisy, nr, sig.fs_hz, MATCH_WINDOW_S, &rs->noisy,
                        NULL);
        free(ref_noisy);
        free(det_noisy);
    }
    if (res->score) {
        for (size_t j = 0; j < n_ref; j++) {
            size_t i = ref_index[j];
            int64_t d = match[j] < 0 ? -1 : (int64_t)det_index[match[j]];
            int cls = class_index(ecg_aami_class(ann.symbol[i]));
            if (d < 0 || cls < 0 || !res->kept[d] || !isfinite(res->score[d]))
                continue;
            if (!push_score(scores, cls, res->score[d])) {
                status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "scores");
                goto out;
            }
            scores->flagged[cls] += res->outlier[d];
        }
    }
out:
    free(match);
    free(ref);
    free(det);
    free(ref_index);
    free(det_index);
    if (res != &tested && res != &merged)
        ecg_result_free(res);
    merged_free(&merged);
    ecg_annotations_free(&test);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    return status;
}

static double pct(size_t num, size_t den)
{
    return den ? 100.0 * (double)num / (double)den : NAN;
}

/* Reads DIR/RECORDS into names (one per line). Returns the count, or -1. */
static int read_record_list(const char *dir, char names[][64], int max)
{
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/RECORDS", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n \t")] = '\0';
        if (line[0])
            snprintf(names[n++], 64, "%.63s", line);
    }
    fclose(f);
    return n;
}

static void print_anomaly(const struct score_lists *s, bool json)
{
    /* abnormal = S + V + F + Q */
    size_t n_abn = s->n[1] + s->n[2] + s->n[3] + s->n[4];
    float *abn = malloc((n_abn ? n_abn : 1) * sizeof *abn);
    if (!abn)
        return;
    size_t k = 0, flagged_abn = 0;
    for (int c = 1; c < 5; c++) {
        memcpy(abn + k, s->v[c], s->n[c] * sizeof *abn);
        k += s->n[c];
        flagged_abn += s->flagged[c];
    }
    double auc_v = ecg_roc_auc(s->v[2], s->n[2], s->v[0], s->n[0]);
    double auc_abn = ecg_roc_auc(abn, n_abn, s->v[0], s->n[0]);
    double sens = pct(flagged_abn, n_abn), fpr = pct(s->flagged[0], s->n[0]);
    if (json) {
        printf(",\"anomaly\":{\"beats\":{\"N\":%zu,\"S\":%zu,\"V\":%zu,\"F\":%zu,\"Q\":%zu},"
               "\"auc_v_vs_n\":%.4f,\"auc_abnormal_vs_n\":%.4f,"
               "\"outlier_sensitivity_pct\":%.2f,\"outlier_fpr_pct\":%.2f}",
               s->n[0], s->n[1], s->n[2], s->n[3], s->n[4], auc_v, auc_abn, sens, fpr);
    } else {
        printf("\nanomaly scores (matched beats: N %zu, S %zu, V %zu, F %zu, Q %zu)\n", s->n[0],
               s->n[1], s->n[2], s->n[3], s->n[4]);
        printf("  ROC-AUC V vs N          %.4f\n", auc_v);
        printf("  ROC-AUC abnormal vs N   %.4f\n", auc_abn);
        printf("  outlier flag: sensitivity %.2f%% (abnormal), false-positive rate %.2f%% (N)\n",
               sens, fpr);
    }
    free(abn);
}

/* The sensitivity by AAMI class of the scored beats (EC57's set): of each class's reference
 * beats, the share a detection matched (EC57 reports the ventricular class's). */
static void print_classes(const struct record_stats *t, bool json)
{
    const char *names = "NSVFQ";
    printf(json ? ",\"classes\":{" : "found by beat class (AAMI):");
    for (int c = 0; c < 5; c++) {
        const double se = pct(t->class_tp[c], t->class_beats[c]);
        if (json && !t->class_beats[c]) /* no beat of the class: no share (null) */
            printf("%s\"%c\":{\"beats\":0,\"tp\":0,\"se_pct\":null}", c ? "," : "", names[c]);
        else if (json)
            printf("%s\"%c\":{\"beats\":%zu,\"tp\":%zu,\"se_pct\":%.3f}", c ? "," : "",
                   names[c], t->class_beats[c], t->class_tp[c], se);
        else if (!t->class_beats[c])
            printf("%s %c none", c ? "," : "", names[c]);
        else
            printf("%s %c %zu of %zu (%.2f %%)", c ? "," : "", names[c], t->class_tp[c],
                   t->class_beats[c], se);
    }
    printf(json ? "}" : "\n");
}

static void eval_usage(FILE *out)
{
    fprintf(out, "usage: ecgd eval [--json] [--lead N|NAME] [--model PATH|none] "
                 "[--backend auto|cpu|cuda] [--noise NAME|PATH --snr DB [--noise-offset S]] "
                 "[--strips S [--strip-overlap O]] [--pauses|--blocked-pauses] DIR [RECORD...]\n"
                 "Reports Se / +P per record and in total, and the share of each AAMI beat class "
                 "(N S V F Q) found.\n"
                 "Detection uses every lead of the records (--lead all) unless --lead names one "
                 "or a list.\n"
                 "Without RECORD names, reads DIR/RECORDS. The model defaults to %s when it "
                 "exists; --model none scores detection only.\n"
                 "--noise runs the MIT-BIH noise stress test: noise from the WFDB record NAME "
                 "(bw, ma, em_a: DIR/../noise/NAME) or PATH,\nadded from minute 5 in alternating "
                 "2-minute stretches at --snr DB (default 6); the noisy stretches are also "
                 "scored alone.\n"
                 "--noise-offset S reads the noise from its second S on (wrapping to its start), "
                 "at the same gain: 120 gives\nthe noisy stretches the noise that the standard "
                 "test leaves out, a check on noise no tuning has seen.\n"
                 "--strips S analyses each record as consecutive strips of S seconds, each alone "
                 "(as a monitor posting short\nstrips has them analysed), and scores the beats of "
                 "all strips against the part of the record they cover.\n"
                 "--strip-overlap O posts each strip after the first with the O seconds before "
                 "it, whose beats it does not report\n(a monitor's strips overlapping by O s).\n"
                 "--pauses makes sinus pauses of 2-6 s by taking beats out (every 40-79 beats; "
                 "before any noise is added)\nand counts the detections inside them.\n"
                 "--blocked-pauses does the same but leaves each beat's P wave in its pause (the "
                 "non-conducted P waves\nof a second-degree AV block).\n"
                 "--test FILE.atr DIR RECORD scores the beats of a WFDB annotation file (ecgd "
                 "analyze --annotations, or any detector's) against the record's reference "
                 "instead of running the detector. Options take their value as --lead 1 or "
                 "--lead=1.\n",
                 cli_default_model_path());
}

int cli_eval(int argc, char **argv)
{
    static char names[MAX_RECORDS][64];
    bool json = false, model_given = false;
    const char *dir = NULL, *lead = "all", *model_path = cli_default_model_path();
    enum ecg_backend_kind backend = ECG_BACKEND_AUTO;
    int n_names = 0, rc = 1;
    struct ecg_error err = {0};
    struct ecg_model *model = NULL;
    struct ecg_engine *engine = NULL;
    struct record_stats *stats = NULL;
    struct score_lists scores = {0};
    struct stress stress = {.path = NULL, .snr_db = 6.0};
    const char *noise_name = NULL, *test_path = NULL;
    struct strips strips = {0.0, 0.0};
    static char noise_path[4096];
    char **args = cli_split_equals(argc, argv, &argc);
    if (!args) {
        fprintf(stderr, "ecgd eval: too many arguments\n");
        return 2;
    }
    argv = args;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eval_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--pauses") == 0) {
            stress.pauses = true;
        } else if (strcmp(a, "--blocked-pauses") == 0) {
            stress.pauses = stress.blocked = true;
        } else if ((strcmp(a, "--lead") == 0 || strcmp(a, "--model") == 0 ||
                    strcmp(a, "--backend") == 0 || strcmp(a, "--noise") == 0 ||
                    strcmp(a, "--snr") == 0 || strcmp(a, "--test") == 0 ||
                    strcmp(a, "--noise-offset") == 0 || strcmp(a, "--strips") == 0 ||
                    strcmp(a, "--strip-overlap") == 0) && !v) {
            fprintf(stderr, "ecgd eval: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--lead") == 0) {
            lead = argv[++i];
        } else if (strcmp(a, "--test") == 0) {
            test_path = argv[++i];
        } else if (strcmp(a, "--noise") == 0) {
            noise_name = argv[++i];
        } else if (strcmp(a, "--snr") == 0) {
            char *end = NULL;
            stress.snr_db = strtod(v, &end);
            if (end == v || *end || !isfinite(stress.snr_db)) {
                fprintf(stderr, "ecgd eval: --snr needs a number of dB, got \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--noise-offset") == 0) {
            char *end = NULL;
            stress.offset_s = strtod(v, &end);
            if (end == v || *end || !isfinite(stress.offset_s) || stress.offset_s < 0.0) {
                fprintf(stderr, "ecgd eval: --noise-offset needs seconds >= 0, got \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--strips") == 0) {
            char *end = NULL;
            strips.len_s = strtod(v, &end);
            if (end == v || *end || !isfinite(strips.len_s) || strips.len_s <= 0.0) {
                fprintf(stderr, "ecgd eval: --strips needs seconds > 0, got \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--strip-overlap") == 0) {
            char *end = NULL;
            strips.overlap_s = strtod(v, &end);
            if (end == v || *end || !isfinite(strips.overlap_s) || strips.overlap_s < 0.0) {
                fprintf(stderr, "ecgd eval: --strip-overlap needs seconds >= 0, got \"%s\"\n",
                        v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--model") == 0) {
            model_path = strcmp(v, "none") == 0 ? NULL : v;
            model_given = true;
            i++;
        } else if (strcmp(a, "--backend") == 0) {
            if (!ecg_backend_kind_parse(v, &backend)) {
                fprintf(stderr, "ecgd eval: unknown backend \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "ecgd eval: unknown option %s\n", a);
            eval_usage(stderr);
            return 2;
        } else if (!dir) {
            dir = a;
        } else if (n_names < MAX_RECORDS) {
            snprintf(names[n_names++], 64, "%s", a);
        }
    }
    if (!dir) {
        eval_usage(stderr);
        return 2;
    }
    if (stress.offset_s > 0.0 && !noise_name) {
        fprintf(stderr, "ecgd eval: --noise-offset shifts the noise of --noise: name one\n");
        return 2;
    }
    if (test_path && n_names != 1) {
        fprintf(stderr, "ecgd eval: --test scores one RECORD: name it after DIR\n");
        return 2;
    }
    if (strips.overlap_s > 0.0 && !(strips.len_s > 0.0)) {
        fprintf(stderr, "ecgd eval: --strip-overlap needs --strips\n");
        return 2;
    }
    if (test_path && strips.len_s > 0.0) {
        fprintf(stderr, "ecgd eval: --test scores a file's beats; --strips runs the detector: "
                        "give one\n");
        return 2;
    }
    if (test_path && stress.pauses) {
        fprintf(stderr, "ecgd eval: --test scores a file's beats, found on the record as it is; "
                        "--pauses changes the record: give one\n");
        return 2;
    }
    if (test_path)
        model_path = NULL; /* the file's beats are scored, not the engine's */
    if (n_names == 0) {
        n_names = read_record_list(dir, names, MAX_RECORDS);
        if (n_names <= 0) {
            fprintf(stderr, "ecgd eval: no records given and no %s/RECORDS\n", dir);
            return 2;
        }
    }
    if (noise_name) {
        if (strchr(noise_name, '/'))
            snprintf(noise_path, sizeof noise_path, "%s", noise_name);
        else
            snprintf(noise_path, sizeof noise_path, "%s/../noise/%s", dir, noise_name);
        stress.path = noise_path;
    }
    if (model_path) {
        FILE *probe = fopen(model_path, "rb");
        if (probe || model_given) {
            if (probe)
                fclose(probe);
            model = ecg_model_load(model_path, &err);
            if (!model) {
                fprintf(stderr, "ecgd eval: model %s: %s\n", model_path, err.message);
                goto out;
            }
        }
    }
    struct ecg_engine_config config = {.backend = backend, .model = model, .workers = 1};
    engine = ecg_engine_create(&config, &err);
    if (!engine) {
        fprintf(stderr, "ecgd eval: %s\n", err.message);
        goto out;
    }
    stats = calloc((size_t)n_names, sizeof *stats);
    if (!stats)
        goto out;
    struct record_stats total = {.name = "total"};
    double err_sum = 0;
    if (json) {
        printf("{\"backend\":\"%s\",\"lead\":\"%s\",\"window_ms\":%.0f,",
               ecg_engine_backend(engine), lead, MATCH_WINDOW_S * 1e3);
        if (strips.len_s > 0.0)
            printf("\"strips_s\":%g,\"strip_overlap_s\":%g,\"records\":[", strips.len_s,
                   strips.overlap_s);
        else
            printf("\"strips_s\":null,\"records\":[");
    } else {
        if (strips.len_s > 0.0)
            printf("each record analysed as consecutive %g-s strips, each alone%s; the beats of "
                   "the part they cover scored\n", strips.len_s,
                   strips.overlap_s > 0.0 ? " with the overlap before it" : "");
        printf("%-8s %7s %7s %5s %5s %8s %8s %9s\n", "record", "beats", "TP", "FN", "FP", "Se%",
               "+P%", "|err| ms");
    }
    for (int r = 0; r < n_names; r++) {
        struct record_stats *rs = &stats[r];
        if (eval_record(engine, dir, names[r], lead, &stress, test_path, &strips, rs, &scores,
                        &err) !=
            ECG_OK) {
            fprintf(stderr, "ecgd eval: %s: %s\n", names[r], err.message);
            goto out;
        }
        double mean_err = rs->m.tp ? rs->m.abs_err_ms_sum / (double)rs->m.tp : NAN;
        if (json)
            printf("%s{\"record\":\"%s\",\"beats\":%zu,\"tp\":%zu,\"fn\":%zu,\"fp\":%zu,"
                   "\"se_pct\":%.3f,\"ppv_pct\":%.3f,\"mean_abs_err_ms\":%.2f}",
                   r ? "," : "", rs->name, rs->n_ref, rs->m.tp, rs->m.fn, rs->m.fp,
                   pct(rs->m.tp, rs->m.tp + rs->m.fn), pct(rs->m.tp, rs->m.tp + rs->m.fp),
                   mean_err);
        else
            printf("%-8s %7zu %7zu %5zu %5zu %8.3f %8.3f %9.2f\n", rs->name, rs->n_ref, rs->m.tp,
                   rs->m.fn, rs->m.fp, pct(rs->m.tp, rs->m.tp + rs->m.fn),
                   pct(rs->m.tp, rs->m.tp + rs->m.fp), mean_err);
        fflush(stdout);
        total.n_ref += rs->n_ref;
        total.m.tp += rs->m.tp;
        total.m.fn += rs->m.fn;
        total.m.fp += rs->m.fp;
        total.tp_unreadable += rs->tp_unreadable;
        total.pauses += rs->pauses;
        total.inside_pauses += rs->inside_pauses;
        total.fp_unreadable += rs->fp_unreadable;
        total.n_ref_noisy += rs->n_ref_noisy;
        total.whole.tp += rs->whole.tp;
        total.whole.fn += rs->whole.fn;
        total.whole.fp += rs->whole.fp;
        total.noisy.tp += rs->noisy.tp;
        total.noisy.fn += rs->noisy.fn;
        total.noisy.fp += rs->noisy.fp;
        for (int c = 0; c < 5; c++) {
            total.class_beats[c] += rs->class_beats[c];
            total.class_tp[c] += rs->class_tp[c];
        }
        err_sum += rs->m.abs_err_ms_sum;
    }
    double se = pct(total.m.tp, total.m.tp + total.m.fn);
    double ppv = pct(total.m.tp, total.m.tp + total.m.fp);
    double mean_err = total.m.tp ? err_sum / (double)total.m.tp : NAN;
    double f1 = 2.0 * se * ppv / (se + ppv);
    const struct ecg_match_stats *nm = &total.noisy, *wm = &total.whole;
    double w_se = pct(wm->tp, wm->tp + wm->fn), w_ppv = pct(wm->tp, wm->tp + wm->fp);
    double n_se = pct(nm->tp, nm->tp + nm->fn), n_ppv = pct(nm->tp, nm->tp + nm->fp);
    if (json) {
        printf("],\"total\":{\"beats\":%zu,\"tp\":%zu,\"fn\":%zu,\"fp\":%zu,\"se_pct\":%.3f,"
               "\"ppv_pct\":%.3f,\"f1_pct\":%.3f,\"mean_abs_err_ms\":%.2f}",
               total.n_ref, total.m.tp, total.m.fn, total.m.fp, se, ppv, f1, mean_err);
        printf(",\"nothing_left_out\":{\"tp\":%zu,\"fn\":%zu,\"fp\":%zu,\"se_pct\":%.3f,"
               "\"ppv_pct\":%.3f,\"f1_pct\":%.3f}",
               wm->tp, wm->fn, wm->fp, w_se, w_ppv, 2.0 * w_se * w_ppv / (w_se + w_ppv));
        if (stress.path)
            printf(",\"noise\":{\"record\":\"%s\",\"snr_db\":%g,\"offset_s\":%g,"
                   "\"noisy_stretches\":{"
                   "\"beats\":%zu,\"tp\":%zu,\"fn\":%zu,\"fp\":%zu,\"se_pct\":%.3f,"
                   "\"ppv_pct\":%.3f,\"f1_pct\":%.3f}}",
                   stress.path, stress.snr_db, stress.offset_s, total.n_ref_noisy, nm->tp, nm->fn, nm->fp, n_se,
                   n_ppv, 2.0 * n_se * n_ppv / (n_se + n_ppv));
        print_classes(&total, true);
        if (stress.pauses)
            printf(",\"pauses\":{\"count\":%zu,\"p_waves\":%s,\"detections_inside\":%zu}",
                   total.pauses, stress.blocked ? "true" : "false", total.inside_pauses);
        printf(",\"flagged_unreadable\":{\"tp\":%zu,\"fp\":%zu,\"tp_pct\":%.3f,"
               "\"fp_pct\":%.3f}", total.tp_unreadable, total.fp_unreadable,
               pct(total.tp_unreadable, total.m.tp), pct(total.fp_unreadable, total.m.fp));
        if (model)
            print_anomaly(&scores, true);
        printf("}\n");
    } else {
        printf("%-8s %7zu %7zu %5zu %5zu %8.3f %8.3f %9.2f\n", "total", total.n_ref, total.m.tp,
               total.m.fn, total.m.fp, se, ppv, mean_err);
        printf("F1 %.3f %%\n", f1);
        printf("nothing left out (ventricular flutter episodes counted): TP %zu, FN %zu, FP %zu, "
               "Se %.3f %%, +P %.3f %%, F1 %.3f %%\n",
               wm->tp, wm->fn, wm->fp, w_se, w_ppv, 2.0 * w_se * w_ppv / (w_se + w_ppv));
        print_classes(&total, false);
        if (stress.path)
            printf("noise %s at %g dB from its second %g; noisy stretches alone: %zu beats, TP "
                   "%zu, FN %zu, FP %zu, Se %.3f %%, +P %.3f %%, F1 %.3f %%\n",
                   stress.path, stress.snr_db, stress.offset_s, total.n_ref_noisy, nm->tp, nm->fn, nm->fp, n_se,
                   n_ppv, 2.0 * n_se * n_ppv / (n_se + n_ppv));
        if (stress.pauses)
            printf("pauses of 2-6 s made by taking beats out%s: %zu; detections inside them: %zu\n",
                   stress.blocked ? ", their P waves left" : "", total.pauses,
                   total.inside_pauses);
        printf("flagged unreadable by the quality verdict (beats.readable = false): %zu of %zu "
               "true beats (%.2f %%), %zu of %zu false beats (%.2f %%)\n", total.tp_unreadable,
               total.m.tp, pct(total.tp_unreadable, total.m.tp), total.fp_unreadable,
               total.m.fp, pct(total.fp_unreadable, total.m.fp));
        if (model)
            print_anomaly(&scores, false);
    }
    rc = 0;
out:
    for (int c = 0; c < 5; c++)
        free(scores.v[c]);
    free(stats);
    ecg_engine_destroy(engine);
    ecg_model_free(model);
    return rc;
}
