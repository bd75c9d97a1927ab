/*
 * train.h - training data, the VAE trainer, score calibration and the inter-patient
 * cross-validation (models/dataset.c, models/train.c, models/evaluate.c).
 *
 * Used by `ecgd train` (cli/train.c), tests/unit/test_anomaly.c and bench/bench_vae.c.
 *
 * Threading: a beat set is owned by one thread. ecg_vae_train and ecg_model_calibrate start
 * their own worker threads (opts->threads) and join them before returning; results do not
 * depend on the number of threads (the work is split into fixed chunks reduced in a fixed
 * order).
 */
#ifndef ECG_TRAIN_H
#define ECG_TRAIN_H

#include "model.h"

/* ---------------------------------------------------------------- beat sets (dataset.c) */

/* Kept beats gathered from recordings, with what the score and the evaluation need. */
struct ecg_beat_set {
    uint32_t beat_len;
    size_t n, cap;
    float *emb;        /* n x beat_len: the engine's normalised, zero-padded beats */
    double *prem;      /* RR prematurity (ecg_rr_prematurity with rr_window) */
    float *rr;         /* 3 per beat: own RR, next beat's RR, local RR median (ms; NaN if none) */
    char *aami;        /* AAMI class of the matched reference beat ('N' 'S' 'V' 'F' 'Q'), 0 if
                        * the record has no annotations or the beat matched none */
    uint16_t *record;  /* index of the recording it came from (caller's numbering) */
};
void ecg_beat_set_fini(struct ecg_beat_set *set);

/*
 * Analyses sig with engine (a CPU engine without a model) and appends its kept beats to set.
 * With ann (may be NULL), each detected beat is matched to the reference beats within 150 ms
 * (ecg_match_beats) and labelled with the reference's AAMI class. On failure set keeps the
 * beats it had.
 */
enum ecg_status ecg_beat_set_add(struct ecg_beat_set *set, struct ecg_engine *engine,
                                 const struct ecg_signal *sig, const struct ecg_annotations *ann,
                                 uint32_t rr_window, uint16_t record,
                                 struct ecg_error *err) ECG_WUR;

/* Reads WFDB record dir/name (lead: NULL = first), its annotations when with_ann, and adds it. */
enum ecg_status ecg_beat_set_add_wfdb(struct ecg_beat_set *set, struct ecg_engine *engine,
                                      const char *dir, const char *name, const char *lead,
                                      bool with_ann, uint32_t rr_window, uint16_t record,
                                      struct ecg_error *err) ECG_WUR;

/* ---------------------------------------------------------------- training (train.c) */

struct ecg_train_opts {
    uint32_t epochs;          /* passes over the data */
    uint32_t batch_size;      /* beats per Adam step */
    double learning_rate;     /* Adam step size (of the first epoch when cosine) */
    bool cosine;              /* decay the step size as 0.5 (1 + cos(pi e / epochs)) */
    double kl_weight;         /* loss = MSE + kl_weight * KL */
    uint64_t seed;            /* weight initialisation, shuffling and eps */
    unsigned threads;         /* worker threads (0 = 2) */
    bool progress;            /* one line per epoch on stderr */
};
/* 30 epochs, batch 64, step 2e-3 with cosine decay, KL weight 0.1, seed 1, 2 threads */
struct ecg_train_opts ecg_train_opts_default(void);

/*
 * Initialises model's weights from opts->seed (PyTorch's default uniform initialisation, swish
 * alphas 1) and trains them with Adam on the n beats (n x beat_len floats) for opts->epochs.
 * Fills the provenance's epochs, batch size, learning rate, seed, train_beats, final_loss and
 * loss_curve (records and beats_mode are the caller's). Weights are left rounded to float.
 */
enum ecg_status ecg_vae_train(struct ecg_model *model, const float *beats, size_t n,
                              const struct ecg_train_opts *opts, struct ecg_error *err) ECG_WUR;

/*
 * Calibrates the score on the training beats: the centres and scales of the absolute and
 * relative reconstruction terms and of the RR term (median, 1.4826 * MAD), rr_weight, the
 * threshold at `percentile` of the training scores and a 101-entry quantile table. prem holds
 * the beats' RR prematurity, computed with rr_window (stored in the model); level the median
 * reconstruction term of each beat's recording (NULL: the beats form one recording).
 */
enum ecg_status ecg_model_calibrate(struct ecg_model *model, const float *beats,
                                    const double *prem, const double *level, size_t n,
                                    uint32_t rr_window, double rr_weight, double percentile,
                                    unsigned threads, struct ecg_error *err) ECG_WUR;

/* Per-beat reconstruction term (log MSE) of n beats, on `threads` threads. */
enum ecg_status ecg_model_recon(const struct ecg_model *model, const float *beats, size_t n,
                                unsigned threads, double *recon, struct ecg_error *err) ECG_WUR;

/* The q-quantile (0..1) of n values with linear interpolation (numpy's default); sorts v. */
double ecg_quantile_sorted(const double *sorted, size_t n, double q);

/* ---------------------------------------------------------------- evaluation (evaluate.c) */

struct ecg_anomaly_eval {
    size_t n[5];              /* scored beats per AAMI class N S V F Q */
    size_t flagged[5];        /* of which flagged as outliers */
    double auc_v;             /* V vs N-class */
    double auc_abnormal;      /* S+V+F+Q vs N-class */
    double auc_s;             /* S vs N-class */
    double auc_f;             /* F vs N-class */
};

/*
 * Scores the beats of set whose record satisfies in_test[record] with model (each record's
 * level taken over all its beats, as the engine does) and accumulates per-class scores; beats
 * without a class are skipped. Call ecg_anomaly_finish to get AUCs.
 */
struct ecg_anomaly_acc {
    float *scores[5];
    size_t n[5], cap[5], flagged[5];
};
enum ecg_status ecg_anomaly_add(struct ecg_anomaly_acc *acc, const struct ecg_model *model,
                                const struct ecg_beat_set *set, const bool *in_test,
                                unsigned threads, struct ecg_error *err) ECG_WUR;
void ecg_anomaly_finish(const struct ecg_anomaly_acc *acc, struct ecg_anomaly_eval *out);
void ecg_anomaly_acc_fini(struct ecg_anomaly_acc *acc);

/*
 * Trains a model on the beats of the records with in_train[record] (N-class beats only when
 * normal_only), calibrates it, and returns it. The caller frees it.
 */
struct ecg_model *ecg_train_on(const struct ecg_beat_set *set, const bool *in_train,
                               bool normal_only, const struct ecg_vae_arch *arch,
                               const struct ecg_train_opts *opts, uint32_t rr_window,
                               double rr_weight, double percentile,
                               struct ecg_error *err) ECG_WUR;

#endif /* ECG_TRAIN_H */
