/*
 * anomaly_cv.c - development tool: the inter-patient two-fold cross-validation of the outlier
 * score on the 22 shared MIT-BIH records, with a beat cache so that score variants can be
 * compared quickly. The shipped protocol is `ecgd train --cv` (cli/train.c); this tool prints
 * more diagnostics (AUC of each score term alone).
 *
 * Build: make BUILD=build build/libecg.a && cc -O2 -std=c11 -D_GNU_SOURCE -Iengine -Imodels \
 *        models/tools/anomaly_cv.c build/libecg.a -o build/anomaly_cv $(LDLIBS)
 * Usage: anomaly_cv DB_DIR [--cache FILE] [--epochs N] [--seed S] [--rr-weight W]
 *        [--enc a,b,c] [--dec a,b,c] [--latent Z] [--lr X] [--batch B]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static const char *records[22] = {"101", "106", "108", "109", "112", "114", "115", "116",
                                  "118", "119", "122", "124", "201", "203", "205", "207",
                                  "208", "209", "215", "220", "223", "230"};

static int load_cache(const char *path, struct ecg_beat_set *set)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint64_t n;
    uint32_t len;
    if (fread(&n, 8, 1, f) != 1 || fread(&len, 4, 1, f) != 1) {
        fclose(f);
        return -1;
    }
    set->n = set->cap = n;
    set->beat_len = len;
    set->emb = malloc(n * len * 4);
    set->prem = malloc(n * 8);
    set->aami = malloc(n);
    set->record = malloc(n * 2);
    set->rr = malloc(n * 12);
    int ok = fread(set->emb, 4, n * len, f) == n * len && fread(set->prem, 8, n, f) == n &&
             fread(set->aami, 1, n, f) == n && fread(set->record, 2, n, f) == n &&
             fread(set->rr, 4, 3 * n, f) == 3 * n;
    fclose(f);
    return ok ? 0 : -1;
}

static void save_cache(const char *path, const struct ecg_beat_set *set)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    uint64_t n = set->n;
    fwrite(&n, 8, 1, f);
    fwrite(&set->beat_len, 4, 1, f);
    fwrite(set->emb, 4, n * set->beat_len, f);
    fwrite(set->prem, 8, n, f);
    fwrite(set->aami, 1, n, f);
    fwrite(set->record, 2, n, f);
    fwrite(set->rr, 4, 3 * n, f);
    fclose(f);
}


static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of recon over the beats of the same record within +-w positions (excluding i). */
static double local_median(const struct ecg_beat_set *set, const double *recon, size_t i,
                           size_t w)
{
    double v[256];
    size_t n = 0;
    size_t lo = i > w ? i - w : 0, hi = i + w < set->n ? i + w : set->n - 1;
    for (size_t j = lo; j <= hi; j++)
        if (j != i && set->record[j] == set->record[i])
            v[n++] = recon[j];
    if (n == 0)
        return recon[i];
    qsort(v, n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void robust(double *v, size_t n, double *c, double *s)
{
    qsort(v, n, sizeof *v, cmpd);
    *c = ecg_quantile_sorted(v, n, 0.5);
    for (size_t i = 0; i < n; i++)
        v[i] = fabs(v[i] - *c);
    qsort(v, n, sizeof *v, cmpd);
    *s = 1.4826 * ecg_quantile_sorted(v, n, 0.5);
    if (*s < 1e-3)
        *s = 1e-3;
}

/* AUCs of score s over the test beats (fold marks): V vs N and abnormal vs N. */
static void aucs(const struct ecg_beat_set *set, const double *s, const bool *test_rec,
                 double *auc_v, double *auc_abn)
{
    float *n_ = malloc(set->n * 4), *v_ = malloc(set->n * 4), *a_ = malloc(set->n * 4);
    size_t nn = 0, nv = 0, na = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (!test_rec[set->record[i]] || !set->aami[i])
            continue;
        if (set->aami[i] == 'N')
            n_[nn++] = (float)s[i];
        else {
            a_[na++] = (float)s[i];
            if (set->aami[i] == 'V')
                v_[nv++] = (float)s[i];
        }
    }
    *auc_v = ecg_roc_auc(v_, nv, n_, nn);
    *auc_abn = ecg_roc_auc(a_, na, n_, nn);
    free(n_);
    free(v_);
    free(a_);
}

static void parse3(const char *s, uint32_t v[3])
{
    sscanf(s, "%u,%u,%u", &v[0], &v[1], &v[2]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: anomaly_cv DB_DIR [options]\n");
        return 2;
    }
    const char *db = argv[1], *cache = NULL;
    struct ecg_train_opts opts = ecg_train_opts_default();
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    double rr_weight = 1.0;
    opts.epochs = 10;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cache")) cache = argv[i + 1];
        else if (!strcmp(argv[i], "--epochs")) opts.epochs = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) opts.seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rr-weight")) rr_weight = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--enc")) parse3(argv[i + 1], arch.enc);
        else if (!strcmp(argv[i], "--dec")) parse3(argv[i + 1], arch.dec);
        else if (!strcmp(argv[i], "--latent")) arch.latent_dim = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lr")) opts.learning_rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--cosine")) opts.cosine = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--batch")) opts.batch_size = (uint32_t)atoi(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    struct ecg_error err = {0};
    struct ecg_beat_set set = {0};
    if (!cache || load_cache(cache, &set) != 0) {
        struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .workers = 1};
        struct ecg_engine *engine = ecg_engine_create(&cfg, &err);
        if (!engine) { fprintf(stderr, "%s\n", err.message); return 1; }
        for (int r = 0; r < 22; r++) {
            if (ecg_beat_set_add_wfdb(&set, engine, db, records[r], NULL, true, 4, (uint16_t)r,
                                      &err) != ECG_OK) {
                fprintf(stderr, "%s: %s\n", records[r], err.message);
                return 1;
            }
            fprintf(stderr, "%s: %zu beats so far\n", records[r], set.n);
        }
        ecg_engine_destroy(engine);
        if (cache)
            save_cache(cache, &set);
    }
    size_t cls[6] = {0};
    for (size_t i = 0; i < set.n; i++) {
        const char *p = set.aami[i] ? strchr("NSVFQ", set.aami[i]) : NULL;
        cls[p ? p - "NSVFQ" : 5]++;
    }
    fprintf(stderr, "beats %zu: N %zu S %zu V %zu F %zu Q %zu unlabelled %zu\n", set.n, cls[0],
            cls[1], cls[2], cls[3], cls[4], cls[5]);

    /* variants: recording-level median of the reconstruction term */
    enum { NV = 5 };
    static const char *vname[NV] = {"abs", "rel", ".5abs+.5rel", "abs+.5rel", "max(abs,rel)"};
    double *sc[NV];
    for (int v = 0; v < NV; v++)
        sc[v] = calloc(set.n, sizeof(double));
    double *recon_all = malloc(set.n * sizeof(double)), *tmp = malloc(set.n * sizeof(double));
    double *rel = malloc(set.n * sizeof(double));
    bool all_rec[22];
    for (int r = 0; r < 22; r++)
        all_rec[r] = true;
    for (int fold = 0; fold < 2; fold++) {
        bool in_train[22];
        for (int r = 0; r < 22; r++)
            in_train[r] = (r % 2) == fold;
        struct ecg_model *m = ecg_train_on(&set, in_train, true, &arch, &opts, 4, rr_weight,
                                           99.0, &err);
        if (!m) return 1;
        if (ecg_model_recon(m, set.emb, set.n, 2, recon_all, &err))
            return 1;
        for (int r = 0; r < 22; r++) {
            size_t nt = 0;
            for (size_t i = 0; i < set.n; i++)
                if (set.record[i] == r)
                    tmp[nt++] = recon_all[i];
            qsort(tmp, nt, sizeof *tmp, cmpd);
            double med = ecg_quantile_sorted(tmp, nt, 0.5);
            for (size_t i = 0; i < set.n; i++)
                if (set.record[i] == r)
                    rel[i] = recon_all[i] - med;
        }
        size_t nt = 0;
        for (size_t i = 0; i < set.n; i++)
            if (in_train[set.record[i]] && set.aami[i] == 'N')
                tmp[nt++] = rel[i];
        double rc, rs;
        robust(tmp, nt, &rc, &rs);
        const struct ecg_score_calib *c = &m->calib;
        for (size_t i = 0; i < set.n; i++) {
            if (in_train[set.record[i]])
                continue;
            double za = (recon_all[i] - c->recon_center) / c->recon_scale;
            double zr = (rel[i] - rc) / rs;
            double zp = fmax(0, (set.prem[i] - c->rr_center) / c->rr_scale);
            sc[0][i] = za + zp;
            sc[1][i] = zr + zp;
            sc[2][i] = 0.5 * za + 0.5 * zr + zp;
            sc[3][i] = za + 0.5 * zr + zp;
            sc[4][i] = fmax(za, zr) + zp;
        }
        ecg_model_free(m);
    }
    for (int v = 0; v < NV; v++) {
        double av, aa;
        aucs(&set, sc[v], all_rec, &av, &aa);
        printf("%-14s: AUC V %.4f abnormal %.4f\n", vname[v], av, aa);
    }
    return 0;
    struct ecg_anomaly_acc acc = {0}, acc_recon = {0}, acc_rr = {0};
    for (int fold = 0; fold < 2; fold++) {
        bool in_train[22], in_test[22];
        for (int r = 0; r < 22; r++) {
            in_train[r] = (r % 2) == fold;
            in_test[r] = !in_train[r];
        }
        struct ecg_model *m = ecg_train_on(&set, in_train, true, &arch, &opts, 4, rr_weight,
                                           99.0, &err);
        if (!m) { fprintf(stderr, "train: %s\n", err.message); return 1; }
        fprintf(stderr, "fold %d: %llu beats, loss %.4f, recon %.3f/%.3f rr %.4f/%.4f thr %.3f\n",
                fold, (unsigned long long)m->prov.train_beats, m->prov.final_loss,
                m->calib.recon_center, m->calib.recon_scale, m->calib.rr_center,
                m->calib.rr_scale, m->calib.threshold);
        if (ecg_anomaly_add(&acc, m, &set, in_test, 2, &err) != ECG_OK) return 1;
        double w = m->calib.rr_weight;
        m->calib.rr_weight = 0;
        if (ecg_anomaly_add(&acc_recon, m, &set, in_test, 2, &err) != ECG_OK) return 1;
        m->calib.rr_weight = w;
        m->calib.recon_scale = 1e6;
        if (ecg_anomaly_add(&acc_rr, m, &set, in_test, 2, &err) != ECG_OK) return 1;
        ecg_model_free(m);
    }
    struct ecg_anomaly_eval ev, ev_recon, ev_rr;
    ecg_anomaly_finish(&acc, &ev);
    ecg_anomaly_finish(&acc_recon, &ev_recon);
    ecg_anomaly_finish(&acc_rr, &ev_rr);
    printf("combined: AUC V %.4f abnormal %.4f S %.4f\n", ev.auc_v, ev.auc_abnormal, ev.auc_s);
    printf("recon   : AUC V %.4f abnormal %.4f S %.4f\n", ev_recon.auc_v, ev_recon.auc_abnormal,
           ev_recon.auc_s);
    printf("rr      : AUC V %.4f abnormal %.4f S %.4f\n", ev_rr.auc_v, ev_rr.auc_abnormal,
           ev_rr.auc_s);
    const char *names = "NSVFQ";
    for (int c = 0; c < 5; c++)
        printf("  %c: %zu scored, %zu flagged (%.2f%%)\n", names[c], ev.n[c], ev.flagged[c],
               ev.n[c] ? 100.0 * (double)ev.flagged[c] / (double)ev.n[c] : 0.0);
    ecg_anomaly_acc_fini(&acc);
    ecg_anomaly_acc_fini(&acc_recon);
    ecg_anomaly_acc_fini(&acc_rr);
    ecg_beat_set_fini(&set);
    return 0;
}
