/*
 * anomaly_cv.c - development tool: the inter-patient two-fold cross-validation of the outlier
 * score on the 22 shared MIT-BIH records, with a beat cache so that score variants can be
 * compared quickly. The shipped protocol is `ecgd train --cv` (cli/train.c); this tool prints
 * more diagnostics (AUC of each score term alone).
 *
 * It prints, for the shipped score, the pooled AUCs (V, abnormal, S, F vs N) and the flag rates
 * for several RR weights (the AUCs do not depend on the threshold), and for the RR term alone.
 * The exploratory variants reported in models/README.md were computed by earlier versions of
 * this tool from the same beat set.
 *
 * Build: make build/libecg.a && cc -O2 -std=c11 -D_GNU_SOURCE -Iengine -Imodels \
 *        models/tools/anomaly_cv.c build/libecg.a -o build/anomaly_cv -lmicrohttpd -lcjson \
 *        -lfftw3f -lfftw3f_threads -ledf -lz -lzstd -lcrypto -lm -lpthread   (plus the CUDA libraries in a
 *        CUDA build)
 * Usage: anomaly_cv DB_DIR [--cache FILE] [--epochs N] [--seed S] [--rr-weight W]
 *        [--enc a,b,c] [--dec a,b,c] [--latent Z] [--lr X] [--batch B] [--cosine 0|1]
 *        [--rr-window W]   (the cache holds RR terms for one window: use one cache per W)
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
    uint32_t rr_window = 4;
    opts.epochs = 10;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cache")) cache = argv[i + 1];
        else if (!strcmp(argv[i], "--epochs")) opts.epochs = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) opts.seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rr-weight")) rr_weight = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--rr-window")) rr_window = (uint32_t)atoi(argv[i + 1]);
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
            if (ecg_beat_set_add_wfdb(&set, engine, db, records[r], NULL, true, rr_window,
                                      (uint16_t)r, &err) != ECG_OK) {
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

    /* the shipped score with several RR weights, and each term alone */
    enum { NW = 6 };
    static const double weights[NW] = {0.0, 0.5, 0.75, 1.0, 1.5, 2.0};
    struct ecg_anomaly_acc acc[NW + 1];
    memset(acc, 0, sizeof acc);
    for (int fold = 0; fold < 2; fold++) {
        bool in_train[22], in_test[22];
        for (int r = 0; r < 22; r++) {
            in_train[r] = (r % 2) == fold;
            in_test[r] = !in_train[r];
        }
        struct ecg_model *m = ecg_train_on(&set, in_train, true, &arch, &opts, rr_window,
                                           rr_weight, 99.0, &err);
        if (!m) { fprintf(stderr, "train: %s\n", err.message); return 1; }
        fprintf(stderr, "fold %d: %llu beats, loss %.4f, recon %.3f/%.3f rel %.3f/%.3f "
                "rr %.4f/%.4f thr %.3f\n", fold, (unsigned long long)m->prov.train_beats,
                m->prov.final_loss, m->calib.recon_center, m->calib.recon_scale,
                m->calib.rel_center, m->calib.rel_scale, m->calib.rr_center, m->calib.rr_scale,
                m->calib.threshold);
        for (int v = 0; v < NW; v++) {
            m->calib.rr_weight = weights[v];
            if (ecg_anomaly_add(&acc[v], m, &set, in_test, 2, &err) != ECG_OK) return 1;
        }
        /* RR term only: huge reconstruction scales flatten the other terms */
        m->calib.rr_weight = 1.0;
        m->calib.recon_scale = m->calib.rel_scale = 1e9;
        if (ecg_anomaly_add(&acc[NW], m, &set, in_test, 2, &err) != ECG_OK) return 1;
        ecg_model_free(m);
    }
    for (int v = 0; v <= NW; v++) {
        struct ecg_anomaly_eval ev;
        ecg_anomaly_finish(&acc[v], &ev);
        if (v < NW)
            printf("rr_weight %.2f", weights[v]);
        else
            printf("RR only     ");
        printf(": AUC V %.4f abnormal %.4f S %.4f F %.4f | flagged N %.2f%% V %.1f%%\n",
               ev.auc_v, ev.auc_abnormal, ev.auc_s, ev.auc_f,
               100.0 * (double)ev.flagged[0] / (double)ev.n[0],
               100.0 * (double)ev.flagged[2] / (double)ev.n[2]);
        ecg_anomaly_acc_fini(&acc[v]);
    }
    ecg_beat_set_fini(&set);
    return 0;
}
