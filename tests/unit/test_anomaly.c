/*
 * test_anomaly.c - the trainer, the calibration and the outlier score on real MIT-BIH records:
 * a smaller, faster run of the inter-patient cross-validation of models/README.md (12 of the
 * 22 shared records, alternating between two folds, 3 epochs), the engine scoring with a saved
 * model exactly as the evaluation does, and the trainer's determinism.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "train.h"

#define MITDB ECG_SHARED_DATA "/mitdb"
#define N_RECORDS 12
#define RR_WINDOW 2

static const char *records[N_RECORDS] = {"101", "106", "109", "114", "116", "119",
                                         "205", "208", "209", "215", "220", "223"};

struct state {
    struct ecg_engine *engine;
    struct ecg_beat_set set;
};

static int setup(void **st)
{
    struct state *s = calloc(1, sizeof *s);
    struct ecg_error err = {0};
    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .workers = 1};
    if (!s)
        return -1;
    s->engine = ecg_engine_create(&cfg, &err);
    if (!s->engine) {
        fprintf(stderr, "engine: %s\n", err.message);
        return -1;
    }
    for (int r = 0; r < N_RECORDS; r++) {
        if (ecg_beat_set_add_wfdb(&s->set, s->engine, MITDB, records[r], NULL, true, RR_WINDOW,
                                  (uint16_t)r, &err) != ECG_OK) {
            fprintf(stderr, "%s: %s\n", records[r], err.message);
            return -1;
        }
    }
    *st = s;
    return 0;
}

static int teardown(void **st)
{
    struct state *s = *st;
    ecg_beat_set_fini(&s->set);
    ecg_engine_destroy(s->engine);
    free(s);
    return 0;
}

static struct ecg_train_opts small_opts(void)
{
    struct ecg_train_opts opts = ecg_train_opts_default();
    opts.epochs = 3;
    opts.seed = 11;
    opts.threads = 2;
    return opts;
}

/* The beat set: every record contributes, labels come from the reference annotations. */
static void test_beat_set(void **st)
{
    struct state *s = *st;
    const struct ecg_beat_set *set = &s->set;
    size_t per_class[6] = {0}, per_record[N_RECORDS] = {0};
    assert_int_equal(set->beat_len, 256);
    for (size_t i = 0; i < set->n; i++) {
        const char *p = set->aami[i] ? strchr("NSVFQ", set->aami[i]) : NULL;
        per_class[p ? p - "NSVFQ" : 5]++;
        assert_true(set->record[i] < N_RECORDS);
        per_record[set->record[i]]++;
        assert_true(isfinite(set->prem[i]));
    }
    for (int r = 0; r < N_RECORDS; r++)
        assert_true(per_record[r] > 1000); /* 30 min of ECG each */
    /* nearly every kept beat matches a reference beat */
    assert_true(per_class[5] < set->n / 100);
    assert_true(per_class[0] > 15000);
    assert_true(per_class[2] > 1000); /* V */
    assert_true(per_class[1] > 200);  /* S */
}

/* Two-fold inter-patient cross-validation with the records of the test set. */
static void test_cross_validation(void **st)
{
    struct state *s = *st;
    struct ecg_train_opts opts = small_opts();
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_anomaly_acc acc = {0};
    struct ecg_error err = {0};
    for (int fold = 0; fold < 2; fold++) {
        bool in_train[N_RECORDS], in_test[N_RECORDS];
        for (int r = 0; r < N_RECORDS; r++) {
            in_train[r] = r % 2 == fold;
            in_test[r] = !in_train[r];
        }
        struct ecg_model *m = ecg_train_on(&s->set, in_train, true, &arch, &opts, RR_WINDOW,
                                           1.0, 99.0, &err);
        assert_non_null(m);
        /* the loss went down, and the calibration describes the training scores */
        assert_true(m->prov.loss_curve[2] < m->prov.loss_curve[0]);
        assert_true(m->calib.n_quantiles == 101 && m->calib.percentile == 99.0);
        assert_true(m->calib.quantiles[99] == m->calib.threshold);
        /* max(z_abs, z_rel) >= z_abs, whose median is 0; the RR term only adds */
        assert_true(m->calib.quantiles[50] >= 0.0 && m->calib.quantiles[50] < 2.0);
        assert_int_equal(m->calib.rr_window, RR_WINDOW);
        assert_true(m->prov.beats_mode == ECG_BEATS_NORMAL);
        assert_int_equal(ecg_anomaly_add(&acc, m, &s->set, in_test, 2, &err), ECG_OK);
        ecg_model_free(m);
    }
    struct ecg_anomaly_eval ev;
    ecg_anomaly_finish(&acc, &ev);
    print_message("12-record CV, 3 epochs: AUC V %.4f abnormal %.4f S %.4f; flagged N %.2f%% "
                  "V %.1f%%\n",
                  ev.auc_v, ev.auc_abnormal, ev.auc_s, 100.0 * ev.flagged[0] / ev.n[0],
                  100.0 * ev.flagged[2] / ev.n[2]);
    assert_true(ev.auc_v >= 0.97);
    assert_true(ev.auc_abnormal >= 0.90);
    assert_true(ev.auc_s >= 0.92);
    /* the outlier flag: few false positives, a useful share of V beats */
    assert_true(ev.flagged[0] < ev.n[0] / 25);
    assert_true(ev.flagged[2] > ev.n[2] / 2);
    ecg_anomaly_acc_fini(&acc);
}

/*
 * A model trained and saved here, loaded and run by the engine on a record, gives the same
 * latent points and scores as the evaluation path, and the threshold flags beats.
 */
static void test_engine_scores_match(void **st)
{
    struct state *s = *st;
    struct ecg_train_opts opts = small_opts();
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_error err = {0};
    bool in_train[N_RECORDS] = {false};
    in_train[0] = in_train[3] = in_train[4] = in_train[10] = true; /* 101 114 116 220 */
    struct ecg_model *m = ecg_train_on(&s->set, in_train, true, &arch, &opts, RR_WINDOW, 1.0,
                                       99.0, &err);
    assert_non_null(m);
    char path[] = "/tmp/ecgd_anomaly_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ecg_model_save(m, path, &err), ECG_OK);
    struct ecg_model *loaded = ecg_model_load(path, &err);
    assert_non_null(loaded);
    unlink(path);

    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .model = loaded, .workers = 1};
    struct ecg_engine *engine = ecg_engine_create(&cfg, &err);
    assert_non_null(engine);
    struct ecg_signal sig = {0};
    struct ecg_read_opts ropts = {.format = ECG_FORMAT_WFDB};
    assert_int_equal(ecg_read_file(MITDB "/208", &ropts, &sig, &err), ECG_OK);
    struct ecg_result *res = NULL;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &res, &err), ECG_OK);
    assert_non_null(res->score);
    assert_int_equal(res->latent_dim, 2);

    /* the set's beats of record 208 (index 7) are the result's kept beats, in order */
    size_t first = 0;
    while (first < s->set.n && s->set.record[first] != 7)
        first++;
    double *recon = malloc(s->set.n * sizeof *recon);
    assert_non_null(recon);
    size_t j = first, flagged = 0, flagged_abn = 0, kept = 0;
    size_t count = 0;
    while (first + count < s->set.n && s->set.record[first + count] == 7)
        count++;
    assert_int_equal(ecg_model_recon(loaded, s->set.emb + first * 256, count, 1, recon, &err),
                     ECG_OK);
    double *scratch = malloc(count * sizeof *scratch);
    assert_non_null(scratch);
    double level = ecg_recon_level(recon, count, scratch);
    free(scratch);
    for (size_t i = 0; i < res->n_beats; i++) {
        if (!res->kept[i]) {
            assert_true(isnan(res->score[i]));
            assert_int_equal(res->outlier[i], 0);
            continue;
        }
        kept++;
        double want =
            ecg_score_combine(&loaded->calib, recon[j - first], level, s->set.prem[j]);
        assert_true(fabs(res->score[i] - want) <= 1e-4 * fmax(1.0, fabs(want)));
        assert_true(isfinite(res->latent[2 * i]) && isfinite(res->latent[2 * i + 1]));
        assert_int_equal(res->outlier[i], res->score[i] > loaded->calib.threshold);
        flagged += res->outlier[i];
        flagged_abn += res->outlier[i] && s->set.aami[j] != 'N';
        j++;
    }
    assert_int_equal(kept, count);
    print_message("record 208: %zu of %zu kept beats flagged, %zu of them not N\n", flagged,
                  kept, flagged_abn);
    /* 208 has ~1000 kept V beats among ~2900: the flag fires, mostly on abnormal beats */
    assert_true(flagged >= 300 && flagged < kept / 2);
    assert_true(flagged_abn * 10 > flagged * 9);

    free(recon);
    ecg_result_free(res);
    ecg_signal_free(&sig);
    ecg_engine_destroy(engine);
    ecg_model_free(loaded);
    ecg_model_free(m);
}

/* Same seed, same weights, whatever the number of threads; another seed, other weights. */
static void test_training_is_deterministic(void **st)
{
    struct state *s = *st;
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    size_t n = 600;
    struct ecg_model *m[3];
    for (int k = 0; k < 3; k++) {
        struct ecg_train_opts opts = small_opts();
        opts.epochs = 2;
        opts.batch_size = 50;
        opts.threads = k == 1 ? 1 : 3;
        opts.seed = k == 2 ? 12 : 11;
        m[k] = ecg_model_create(&arch, &params, &err);
        assert_non_null(m[k]);
        assert_int_equal(ecg_vae_train(m[k], s->set.emb, n, &opts, &err), ECG_OK);
        assert_int_equal(m[k]->prov.train_beats, n);
        assert_int_equal(m[k]->prov.epochs, 2);
    }
    size_t bytes = m[0]->layout.n_weights * sizeof(float);
    assert_memory_equal(m[0]->weights, m[1]->weights, bytes);
    assert_true(m[0]->prov.final_loss == m[1]->prov.final_loss);
    assert_memory_not_equal(m[0]->weights, m[2]->weights, bytes);
    for (int k = 0; k < 3; k++)
        ecg_model_free(m[k]);

    struct ecg_train_opts bad = small_opts();
    bad.epochs = 0;
    struct ecg_model *x = ecg_model_create(&arch, &params, &err);
    assert_non_null(x);
    assert_int_equal(ecg_vae_train(x, s->set.emb, n, &bad, &err), ECG_ERR_ARG);
    assert_int_equal(
        ecg_model_calibrate(x, s->set.emb, s->set.prem, NULL, 1, 4, 1.0, 99.0, 1, &err),
        ECG_ERR_ARG);
    ecg_model_free(x);
}

static void test_quantile(void **st)
{
    (void)st;
    double v[5] = {1, 2, 3, 4, 10};
    assert_true(ecg_quantile_sorted(v, 5, 0.0) == 1.0);
    assert_true(ecg_quantile_sorted(v, 5, 0.5) == 3.0);
    assert_true(fabs(ecg_quantile_sorted(v, 5, 0.9) - 7.6) < 1e-12); /* numpy: 7.6 */
    assert_true(ecg_quantile_sorted(v, 5, 1.0) == 10.0);
    assert_true(isnan(ecg_quantile_sorted(v, 0, 0.5)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantile),
        cmocka_unit_test(test_beat_set),
        cmocka_unit_test(test_training_is_deterministic),
        cmocka_unit_test(test_engine_scores_match),
        cmocka_unit_test(test_cross_validation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
