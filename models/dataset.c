/*
 * dataset.c - training and evaluation beats: runs the engine's own pipeline (detect, segment,
 * normalise, embed) on recordings, so that a model is trained on exactly what it will score,
 * and labels beats with the reference annotations where there are any.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define MATCH_WINDOW_S 0.150

void ecg_beat_set_fini(struct ecg_beat_set *set)
{
    if (!set)
        return;
    free(set->emb);
    free(set->prem);
    free(set->rr);
    free(set->aami);
    free(set->record);
    memset(set, 0, sizeof *set);
}

static bool reserve(struct ecg_beat_set *set, size_t extra)
{
    if (set->n + extra <= set->cap)
        return true;
    size_t cap = set->cap ? set->cap : 4096;
    while (cap < set->n + extra)
        cap *= 2;
    float *emb = realloc(set->emb, cap * set->beat_len * sizeof *emb);
    if (!emb)
        return false;
    set->emb = emb;
    double *prem = realloc(set->prem, cap * sizeof *prem);
    if (!prem)
        return false;
    set->prem = prem;
    float *rr = realloc(set->rr, cap * 3 * sizeof *rr);
    if (!rr)
        return false;
    set->rr = rr;
    char *aami = realloc(set->aami, cap * sizeof *aami);
    if (!aami)
        return false;
    set->aami = aami;
    uint16_t *record = realloc(set->record, cap * sizeof *record);
    if (!record)
        return false;
    set->record = record;
    set->cap = cap;
    return true;
}

enum ecg_status ecg_beat_set_add(struct ecg_beat_set *set, struct ecg_engine *engine,
                                 const struct ecg_signal *sig, const struct ecg_annotations *ann,
                                 uint32_t rr_window, uint16_t record, struct ecg_error *err)
{
    struct ecg_result *res = NULL;
    float *emb = NULL;
    int64_t *match = NULL;
    char *label = NULL;
    const struct ecg_params *params = ecg_engine_params(engine);
    enum ecg_status st = ecg_engine_analyze_embed(engine, sig, &res, &emb, err);
    if (st != ECG_OK)
        goto out;
    if (set->beat_len == 0)
        set->beat_len = params->beat_len;
    if (set->beat_len != params->beat_len) {
        st = ecg_fail(err, ECG_ERR_ARG, "bad_argument", "beat length %u, the set holds %u",
                      params->beat_len, set->beat_len);
        goto out;
    }
    size_t k = res->n_beats;
    label = calloc(k ? k : 1, 1);
    if (!label)
        goto nomem;
    if (ann && ann->n > 0 && k > 0) {
        match = malloc(ann->n * sizeof *match);
        if (!match)
            goto nomem;
        struct ecg_match_stats stats;
        ecg_match_beats(res->r_peak, k, ann->sample, ann->n, sig->fs_hz, MATCH_WINDOW_S, &stats,
                        match);
        for (size_t j = 0; j < ann->n; j++)
            if (match[j] >= 0 && (size_t)match[j] < k)
                label[match[j]] = ecg_aami_class(ann->symbol[j]);
    }
    size_t kept = 0;
    for (size_t i = 0; i < k; i++)
        kept += res->kept[i] != 0;
    if (!reserve(set, kept))
        goto nomem;
    for (size_t i = 0; i < k; i++) {
        if (!res->kept[i])
            continue;
        size_t j = set->n++;
        memcpy(set->emb + j * set->beat_len, emb + i * set->beat_len,
               set->beat_len * sizeof *emb);
        set->prem[j] = ecg_rr_prematurity(res->rr_ms, k, i, rr_window);
        set->rr[3 * j] = res->rr_ms[i];
        set->rr[3 * j + 1] = i + 1 < k ? res->rr_ms[i + 1] : NAN;
        set->rr[3 * j + 2] = (float)ecg_rr_local_median(res->rr_ms, k, i, rr_window);
        set->aami[j] = label[i];
        set->record[j] = record;
    }
    goto out;
nomem:
    st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot grow the beat set");
out:
    free(label);
    free(match);
    free(emb);
    ecg_result_free(res);
    return st;
}

enum ecg_status ecg_beat_set_add_wfdb(struct ecg_beat_set *set, struct ecg_engine *engine,
                                      const char *dir, const char *name, const char *lead,
                                      bool with_ann, uint32_t rr_window, uint16_t record,
                                      struct ecg_error *err)
{
    char path[4096];
    struct ecg_signal sig = {0};
    struct ecg_annotations ann = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = lead};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    enum ecg_status st = ecg_read_file(path, &opts, &sig, err);
    if (st == ECG_OK && with_ann)
        st = ecg_annotations_read(path, &ann, err);
    if (st == ECG_OK)
        st = ecg_beat_set_add(set, engine, &sig, with_ann ? &ann : NULL, rr_window, record, err);
    ecg_annotations_free(&ann);
    ecg_signal_free(&sig);
    return st;
}
