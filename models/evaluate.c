/*
 * evaluate.c - training on a subset of records and scoring another: the building blocks of the
 * inter-patient cross-validation behind `ecgd train --cv` and tests/unit/test_anomaly.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static int class_index(char aami)
{
    const char *classes = "NSVFQ";
    const char *p = aami ? strchr(classes, aami) : NULL;
    return p ? (int)(p - classes) : -1;
}

/* Copies the beats of set selected by pick into a new contiguous array; *idx gets their
 * indices in set. Returns the count, or SIZE_MAX when out of memory. */
static size_t gather(const struct ecg_beat_set *set, const bool *pick, float **beats,
                     size_t **idx)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        n += pick[i];
    *beats = malloc((n ? n : 1) * set->beat_len * sizeof **beats);
    *idx = malloc((n ? n : 1) * sizeof **idx);
    if (!*beats || !*idx) {
        free(*beats);
        free(*idx);
        *beats = NULL;
        *idx = NULL;
        return SIZE_MAX;
    }
    size_t j = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (!pick[i])
            continue;
        memcpy(*beats + j * set->beat_len, set->emb + i * set->beat_len,
               set->beat_len * sizeof **beats);
        (*idx)[j++] = i;
    }
    return n;
}

static size_t record_count(const struct ecg_beat_set *set)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        if ((size_t)set->record[i] + 1 > n)
            n = (size_t)set->record[i] + 1;
    return n;
}

/*
 * Reconstruction term of every beat of the records with use[record] (recon[i], NaN for the
 * others) and the level (median) of each such record (level_rec, record_count entries).
 */
static enum ecg_status record_levels(const struct ecg_model *model,
                                     const struct ecg_beat_set *set, const bool *use,
                                     unsigned threads, double *recon, double *level_rec,
                                     struct ecg_error *err)
{
    enum ecg_status st = ECG_OK;
    float *beats = NULL;
    size_t *idx = NULL;
    double *part = NULL, *scratch = NULL;
    size_t n_rec = record_count(set);
    bool *pick = malloc((set->n ? set->n : 1) * sizeof *pick);
    if (!pick)
        goto nomem;
    for (size_t i = 0; i < set->n; i++) {
        pick[i] = use[set->record[i]];
        recon[i] = NAN;
    }
    size_t n = gather(set, pick, &beats, &idx);
    if (n == SIZE_MAX)
        goto nomem;
    part = malloc((n ? n : 1) * sizeof *part);
    scratch = malloc((n ? n : 1) * sizeof *scratch);
    if (!part || !scratch)
        goto nomem;
    st = ecg_model_recon(model, beats, n, threads, part, err);
    if (st != ECG_OK)
        goto out;
    for (size_t j = 0; j < n; j++)
        recon[idx[j]] = part[j];
    for (size_t r = 0; r < n_rec; r++) {
        size_t m = 0;
        for (size_t j = 0; j < n; j++)
            if (set->record[idx[j]] == r)
                part[m++] = recon[idx[j]];
        level_rec[r] = ecg_recon_level(part, m, scratch);
    }
    goto out;
nomem:
    st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate evaluation buffers");
out:
    free(pick);
    free(beats);
    free(idx);
    free(part);
    free(scratch);
    return st;
}

enum ecg_status ecg_anomaly_add(struct ecg_anomaly_acc *acc, const struct ecg_model *model,
                                const struct ecg_beat_set *set, const bool *in_test,
                                unsigned threads, struct ecg_error *err)
{
    double *recon = malloc((set->n ? set->n : 1) * sizeof *recon);
    double *level = malloc((record_count(set) + 1) * sizeof *level);
    enum ecg_status st = ECG_OK;
    if (!recon || !level)
        goto nomem;
    st = record_levels(model, set, in_test, threads, recon, level, err);
    if (st != ECG_OK)
        goto out;
    for (size_t i = 0; i < set->n; i++) {
        int cls = class_index(set->aami[i]);
        if (!in_test[set->record[i]] || cls < 0)
            continue;
        double s = ecg_score_combine(&model->calib, recon[i], level[set->record[i]],
                                     set->prem[i]);
        if (acc->n[cls] == acc->cap[cls]) {
            size_t cap = acc->cap[cls] ? 2 * acc->cap[cls] : 1024;
            float *grown = realloc(acc->scores[cls], cap * sizeof *grown);
            if (!grown)
                goto nomem;
            acc->scores[cls] = grown;
            acc->cap[cls] = cap;
        }
        acc->scores[cls][acc->n[cls]++] = (float)s;
        acc->flagged[cls] += s > model->calib.threshold;
    }
    goto out;
nomem:
    st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate evaluation buffers");
out:
    free(recon);
    free(level);
    return st;
}

void ecg_anomaly_finish(const struct ecg_anomaly_acc *acc, struct ecg_anomaly_eval *out)
{
    memset(out, 0, sizeof *out);
    for (int c = 0; c < 5; c++) {
        out->n[c] = acc->n[c];
        out->flagged[c] = acc->flagged[c];
    }
    out->auc_v = ecg_roc_auc(acc->scores[2], acc->n[2], acc->scores[0], acc->n[0]);
    out->auc_s = ecg_roc_auc(acc->scores[1], acc->n[1], acc->scores[0], acc->n[0]);
    out->auc_f = ecg_roc_auc(acc->scores[3], acc->n[3], acc->scores[0], acc->n[0]);
    size_t n_abn = acc->n[1] + acc->n[2] + acc->n[3] + acc->n[4];
    float *abn = malloc((n_abn ? n_abn : 1) * sizeof *abn);
    if (!abn) {
        out->auc_abnormal = NAN;
        return;
    }
    size_t j = 0;
    for (int c = 1; c < 5; c++) {
        memcpy(abn + j, acc->scores[c], acc->n[c] * sizeof *abn);
        j += acc->n[c];
    }
    out->auc_abnormal = ecg_roc_auc(abn, n_abn, acc->scores[0], acc->n[0]);
    free(abn);
}

void ecg_anomaly_acc_fini(struct ecg_anomaly_acc *acc)
{
    if (!acc)
        return;
    for (int c = 0; c < 5; c++)
        free(acc->scores[c]);
    memset(acc, 0, sizeof *acc);
}

struct ecg_model *ecg_train_on(const struct ecg_beat_set *set, const bool *in_train,
                               bool normal_only, const struct ecg_vae_arch *arch,
                               const struct ecg_train_opts *opts, uint32_t rr_window,
                               double rr_weight, double percentile, struct ecg_error *err)
{
    struct ecg_model *model = NULL;
    float *beats = NULL;
    size_t *idx = NULL;
    double *prem = NULL, *level = NULL, *recon = NULL, *level_rec = NULL;
    bool *pick = malloc((set->n ? set->n : 1) * sizeof *pick);
    if (!pick)
        goto nomem;
    for (size_t i = 0; i < set->n; i++)
        pick[i] = in_train[set->record[i]] && (!normal_only || set->aami[i] == 'N');
    size_t n = gather(set, pick, &beats, &idx);
    if (n == SIZE_MAX)
        goto nomem;
    prem = malloc((n ? n : 1) * sizeof *prem);
    level = malloc((n ? n : 1) * sizeof *level);
    recon = malloc((set->n ? set->n : 1) * sizeof *recon);
    level_rec = malloc((record_count(set) + 1) * sizeof *level_rec);
    if (!prem || !level || !recon || !level_rec)
        goto nomem;
    for (size_t j = 0; j < n; j++)
        prem[j] = set->prem[idx[j]];
    struct ecg_params params = ecg_params_default();
    params.beat_len = arch->beat_len;
    model = ecg_model_create(arch, &params, err);
    if (!model)
        goto out;
    /* each training beat's level is that of all kept beats of its recording, as when scoring */
    if (ecg_vae_train(model, beats, n, opts, err) != ECG_OK ||
        record_levels(model, set, in_train, opts->threads, recon, level_rec, err) != ECG_OK)
        goto fail;
    for (size_t j = 0; j < n; j++)
        level[j] = level_rec[set->record[idx[j]]];
    if (ecg_model_calibrate(model, beats, prem, level, n, rr_window, rr_weight, percentile,
                            opts->threads, err) != ECG_OK)
        goto fail;
    model->prov.beats_mode = normal_only ? ECG_BEATS_NORMAL : ECG_BEATS_ALL;
    goto out;
fail:
    ecg_model_free(model);
    model = NULL;
    goto out;
nomem:
    ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate training beats");
out:
    free(pick);
    free(beats);
    free(idx);
    free(prem);
    free(level);
    free(recon);
    free(level_rec);
    return model;
}
