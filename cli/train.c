/*
 * train.c - `ecgd train`: trains and calibrates a VAE model on WFDB records or on one
 * recording, or runs the inter-patient cross-validation of the outlier score (--cv).
 *
 *   ecgd train --db DIR [RECORD...] [options] --out PATH
 *   ecgd train FILE --fs HZ [--format F] [options] --out PATH
 *   ecgd train --db DIR [RECORD...] --cv [options]
 *
 * Beats come from the engine's own pipeline (CPU backend, default parameters), so a model is
 * trained on exactly what it scores. With --db, beats are matched to the reference annotations
 * and by default only normal-class (AAMI N) beats are used; --beats all uses every kept beat.
 * Progress goes to stderr; the summary goes to stdout.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ecg.h"
#include "train.h"

#define MAX_RECORDS 1024

struct train_args {
    const char *db, *file, *out, *lead, *format;
    const char *records[MAX_RECORDS];
    int n_records;
    double fs_hz;
    bool all_beats, cv;
    struct ecg_train_opts opts;
    struct ecg_vae_arch arch;
    double percentile, rr_weight;
    uint32_t rr_window;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ecgd train --db DIR [RECORD...] [options] --out PATH\n"
            "       ecgd train FILE --fs HZ [--format F] [options] --out PATH\n"
            "       ecgd train --db DIR [RECORD...] --cv [options]\n"
            "options:\n"
            "  --beats normal|all   training beats: reference normal-class only (default) or all\n"
            "  --epochs N           passes over the training beats (30)\n"
            "  --seed S             initialisation, shuffling and noise (1)\n"
            "  --batch N            beats per Adam step (64)\n"
            "  --lr X               Adam learning rate of the first epoch (0.002)\n"
            "  --schedule S         cosine (decays the rate to 0 over the epochs; default) or\n"
            "                       constant\n"
            "  --threads N          worker threads (2)\n"
            "  --percentile P       outlier threshold percentile of the training scores (99)\n"
            "  --rr-weight W        weight of the RR prematurity term of the score (1)\n"
            "  --rr-window N        beats on each side of the local RR median (2)\n"
            "  --lead N|NAME        lead of the recordings (first)\n"
            "  --enc A,B,C          encoder widths (4,8,16)\n"
            "  --dec A,B,C          decoder widths (8,4,2)\n"
            "  --cv                 two-fold inter-patient cross-validation: records alternate\n"
            "                       between the folds; prints ROC-AUCs, writes no model\n"
            "Without RECORD, every record of DIR/RECORDS (or every DIR/*.hea) is used.\n");
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-')
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_widths(const char *s, uint32_t w[3])
{
    char extra;
    return sscanf(s, "%u,%u,%u%c", &w[0], &w[1], &w[2], &extra) == 3;
}

/* Parses argv; returns 0 on success, 2 on bad usage (message printed), -1 after --help. */
static int parse_args(int argc, char **argv, struct train_args *a)
{
    memset(a, 0, sizeof *a);
    a->opts = ecg_train_opts_default();
    a->opts.progress = true;
    a->arch = ecg_vae_arch_default();
    a->percentile = 99.0;
    a->rr_weight = 1.0;
    a->rr_window = 2;
    /* getopt_long: --opt VALUE and --opt=VALUE; each option is then handled by its name */
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},          {"cv", no_argument, NULL, 0},
        {"db", required_argument, NULL, 0},        {"out", required_argument, NULL, 0},
        {"lead", required_argument, NULL, 0},      {"format", required_argument, NULL, 0},
        {"fs", required_argument, NULL, 0},        {"schedule", required_argument, NULL, 0},
        {"beats", required_argument, NULL, 0},     {"rr-window", required_argument, NULL, 0},
        {"epochs", required_argument, NULL, 0},    {"batch", required_argument, NULL, 0},
        {"threads", required_argument, NULL, 0},   {"seed", required_argument, NULL, 0},
        {"lr", required_argument, NULL, 0},        {"percentile", required_argument, NULL, 0},
        {"rr-weight", required_argument, NULL, 0}, {"enc", required_argument, NULL, 0},
        {"dec", required_argument, NULL, 0},       {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int opt, index = 0;
    while ((opt = getopt_long(argc, argv, ":h", options, &index)) != -1) {
        char name[32];
        snprintf(name, sizeof name, "--%s", opt == 0 ? options[index].name : "help");
        const char *arg = name;
        const char *val = optarg;
        char *end = NULL;
        if (opt == ':' || opt == '?') {
            cli_bad_option("ecgd train", opt, argv);
            if (opt == '?')
                usage(stderr);
            return 2;
        } else if (opt == 'h') {
            usage(stdout);
            return -1;
        } else if (!strcmp(arg, "--cv")) {
            a->cv = true;
        } else if (!strcmp(arg, "--db")) {
            a->db = val;
        } else if (!strcmp(arg, "--out")) {
            a->out = val;
        } else if (!strcmp(arg, "--lead")) {
            a->lead = val;
        } else if (!strcmp(arg, "--format")) {
            a->format = val;
        } else if (!strcmp(arg, "--fs")) {
            if (!cli_parse_rate(val, &a->fs_hz)) {
                fprintf(stderr, "ecgd train: --fs expects a rate in Hz, got \"%s\"\n", val);
                return 2;
            }
        } else if (!strcmp(arg, "--schedule")) {
            if (!strcmp(val, "cosine") || !strcmp(val, "constant")) {
                a->opts.cosine = !strcmp(val, "cosine");
            } else {
                fprintf(stderr, "ecgd train: --schedule expects cosine or constant, got \"%s\"\n",
                        val);
                return 2;
            }
        } else if (!strcmp(arg, "--beats")) {
            if (!strcmp(val, "all"))
                a->all_beats = true;
            else if (strcmp(val, "normal") != 0) {
                fprintf(stderr, "ecgd train: --beats expects normal or all, got \"%s\"\n", val);
                return 2;
            }
        } else if (!strcmp(arg, "--rr-window")) {
            uint32_t v;
            if (!parse_u32(val, &v) || v < 1 || v > 64) {
                fprintf(stderr, "ecgd train: --rr-window expects a count in [1, 64], got \"%s\"\n",
                        val);
                return 2;
            }
            a->rr_window = v;
        } else if (!strcmp(arg, "--epochs") || !strcmp(arg, "--batch") ||
                   !strcmp(arg, "--threads")) {
            uint32_t v;
            if (!parse_u32(val, &v) || v == 0 || v > ECG_MODEL_MAX_EPOCHS) {
                fprintf(stderr, "ecgd train: %s expects a count in [1, %u], got \"%s\"\n", arg,
                        ECG_MODEL_MAX_EPOCHS, val);
                return 2;
            }
            if (!strcmp(arg, "--epochs"))
                a->opts.epochs = v;
            else if (!strcmp(arg, "--batch"))
                a->opts.batch_size = v;
            else
                a->opts.threads = v > 64 ? 64 : v;
        } else if (!strcmp(arg, "--seed")) {
            errno = 0;
            a->opts.seed = strtoull(val, &end, 10);
            if (errno || *end || val[0] == '-') {
                fprintf(stderr, "ecgd train: --seed expects an integer, got \"%s\"\n", val);
                return 2;
            }
        } else if (!strcmp(arg, "--lr") || !strcmp(arg, "--percentile") ||
                   !strcmp(arg, "--rr-weight")) {
            double v = strtod(val, &end);
            if (*end || !isfinite(v) || v < 0) {
                fprintf(stderr, "ecgd train: %s expects a number, got \"%s\"\n", arg, val);
                return 2;
            }
            if (!strcmp(arg, "--lr"))
                a->opts.learning_rate = v;
            else if (!strcmp(arg, "--percentile"))
                a->percentile = v;
            else
                a->rr_weight = v;
        } else if (!strcmp(arg, "--enc") || !strcmp(arg, "--dec")) {
            if (!parse_widths(val, !strcmp(arg, "--enc") ? a->arch.enc : a->arch.dec)) {
                fprintf(stderr, "ecgd train: %s expects three widths A,B,C, got \"%s\"\n", arg,
                        val);
                return 2;
            }
        }
    }
    for (int i = optind; i < argc; i++) {
        if (a->db) {
            if (a->n_records == MAX_RECORDS) {
                fprintf(stderr, "ecgd train: more than %d records\n", MAX_RECORDS);
                return 2;
            }
            a->records[a->n_records++] = argv[i];
        } else if (!a->file) {
            a->file = argv[i];
        } else {
            fprintf(stderr, "ecgd train: unexpected argument \"%s\"\n", argv[i]);
            return 2;
        }
    }
    if (!a->db == !a->file) {
        fprintf(stderr, "ecgd train: give either --db DIR or one FILE\n");
        usage(stderr);
        return 2;
    }
    if (a->cv && !a->db) {
        fprintf(stderr, "ecgd train: --cv needs annotated records (--db)\n");
        return 2;
    }
    if (!a->cv && !a->out) {
        fprintf(stderr, "ecgd train: --out PATH is required\n");
        return 2;
    }
    if (!(a->opts.learning_rate > 0) || !(a->percentile > 0 && a->percentile < 100)) {
        fprintf(stderr, "ecgd train: --lr must be > 0 and --percentile in (0, 100)\n");
        return 2;
    }
    struct ecg_error err = {0};
    if (ecg_vae_arch_check(&a->arch, &err) != ECG_OK) {
        fprintf(stderr, "ecgd train: %s\n", err.message);
        return 2;
    }
    return 0;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Fills a->records from DIR/RECORDS, or else from DIR/\*.hea. names holds the storage. */
static int list_records(struct train_args *a, char (*names)[64])
{
    char path[4096];
    snprintf(path, sizeof path, "%s/RECORDS", a->db);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (f) {
        char line[256];
        while (n < MAX_RECORDS && fgets(line, sizeof line, f)) {
            size_t len = strcspn(line, "\r\n");
            if (len == 0 || len >= 64)
                continue;
            memcpy(names[n], line, len);
            names[n][len] = '\0';
            a->records[n] = names[n];
            n++;
        }
        fclose(f);
    } else {
        DIR *d = opendir(a->db);
        if (!d) {
            fprintf(stderr, "ecgd train: %s: %s\n", a->db, strerror(errno));
            return -1;
        }
        struct dirent *e;
        while (n < MAX_RECORDS && (e = readdir(d))) {
            size_t len = strlen(e->d_name);
            if (len < 5 || len >= 64 + 4 || strcmp(e->d_name + len - 4, ".hea") != 0)
                continue;
            memcpy(names[n], e->d_name, len - 4);
            names[n][len - 4] = '\0';
            a->records[n] = names[n];
            n++;
        }
        closedir(d);
        qsort(a->records, (size_t)n, sizeof a->records[0], cmp_str);
    }
    if (n == 0) {
        fprintf(stderr, "ecgd train: no records in %s\n", a->db);
        return -1;
    }
    a->n_records = n;
    return 0;
}

/* Builds the provenance string "DIRNAME:R1,R2,... lead L". */
static char *records_string(const struct train_args *a)
{
    struct ecg_buf b = {0};
    if (a->db) {
        const char *base = strrchr(a->db, '/');
        base = base && base[1] ? base + 1 : a->db;
        ecg_buf_printf(&b, "%s:", base);
        for (int i = 0; i < a->n_records; i++)
            ecg_buf_printf(&b, "%s%s", i ? "," : "", a->records[i]);
    } else {
        const char *base = strrchr(a->file, '/');
        ecg_buf_printf(&b, "file:%s", base ? base + 1 : a->file);
    }
    ecg_buf_printf(&b, " lead %s", a->lead ? a->lead : "first");
    if (b.failed) {
        ecg_buf_fini(&b);
        return NULL;
    }
    if (b.len > ECG_MODEL_MAX_RECORDS_LEN) {
        b.len = ECG_MODEL_MAX_RECORDS_LEN;
        b.data[b.len] = '\0';
    }
    return b.data;
}

static void print_eval(const char *label, const struct ecg_anomaly_eval *ev)
{
    size_t n_abn = ev->n[1] + ev->n[2] + ev->n[3] + ev->n[4];
    size_t f_abn = ev->flagged[1] + ev->flagged[2] + ev->flagged[3] + ev->flagged[4];
    printf("%-8s AUC V vs N %.4f  abnormal vs N %.4f  S vs N %.4f  F vs N %.4f | beats N %zu "
           "S %zu V %zu F %zu Q %zu | flag: sens V %.1f%% abnormal %.1f%%, false positives (N) "
           "%.2f%%\n",
           label, ev->auc_v, ev->auc_abnormal, ev->auc_s, ev->auc_f, ev->n[0], ev->n[1], ev->n[2],
           ev->n[3],
           ev->n[4], ev->n[2] ? 100.0 * (double)ev->flagged[2] / (double)ev->n[2] : NAN,
           n_abn ? 100.0 * (double)f_abn / (double)n_abn : NAN,
           ev->n[0] ? 100.0 * (double)ev->flagged[0] / (double)ev->n[0] : NAN);
}

static int run_cv(const struct train_args *a, const struct ecg_beat_set *set)
{
    struct ecg_anomaly_acc total = {0};
    struct ecg_error err = {0};
    int rc = 0;
    bool *in_train = calloc((size_t)a->n_records, sizeof *in_train);
    bool *in_test = calloc((size_t)a->n_records, sizeof *in_test);
    if (!in_train || !in_test) {
        fprintf(stderr, "ecgd train: out of memory\n");
        rc = 1;
        goto out;
    }
    for (int fold = 0; fold < 2; fold++) {
        for (int r = 0; r < a->n_records; r++) {
            in_train[r] = r % 2 == fold;
            in_test[r] = !in_train[r];
        }
        fprintf(stderr, "fold %d: training on records", fold + 1);
        for (int r = 0; r < a->n_records; r++)
            if (in_train[r])
                fprintf(stderr, " %s", a->records[r]);
        fprintf(stderr, "\n");
        struct ecg_model *m = ecg_train_on(set, in_train, !a->all_beats, &a->arch, &a->opts,
                                           a->rr_window, a->rr_weight, a->percentile, &err);
        if (!m) {
            fprintf(stderr, "ecgd train: %s\n", err.message);
            rc = 1;
            goto out;
        }
        struct ecg_anomaly_acc acc = {0};
        enum ecg_status st = ecg_anomaly_add(&acc, m, set, in_test, a->opts.threads, &err);
        if (st == ECG_OK)
            st = ecg_anomaly_add(&total, m, set, in_test, a->opts.threads, &err);
        if (st == ECG_OK) {
            struct ecg_anomaly_eval ev;
            ecg_anomaly_finish(&acc, &ev);
            char label[32];
            snprintf(label, sizeof label, "fold %d", fold + 1);
            print_eval(label, &ev);
            fflush(stdout);
        }
        ecg_anomaly_acc_fini(&acc);
        ecg_model_free(m);
        if (st != ECG_OK) {
            fprintf(stderr, "ecgd train: %s\n", err.message);
            rc = 1;
            goto out;
        }
    }
    struct ecg_anomaly_eval ev;
    ecg_anomaly_finish(&total, &ev);
    print_eval("pooled", &ev);
out:
    ecg_anomaly_acc_fini(&total);
    free(in_train);
    free(in_test);
    return rc;
}

static int train_and_save(const struct train_args *a, const struct ecg_beat_set *set)
{
    struct ecg_error err = {0};
    int rc = 1;
    bool *all = malloc((size_t)(a->n_records ? a->n_records : 1) * sizeof *all);
    struct ecg_model *m = NULL;
    if (!all) {
        fprintf(stderr, "ecgd train: out of memory\n");
        return 1;
    }
    for (int r = 0; r < (a->n_records ? a->n_records : 1); r++)
        all[r] = true;
    m = ecg_train_on(set, all, !a->all_beats && a->db, &a->arch, &a->opts, a->rr_window,
                     a->rr_weight, a->percentile, &err);
    if (!m) {
        fprintf(stderr, "ecgd train: %s\n", err.message);
        goto out;
    }
    free(m->prov.records);
    m->prov.records = records_string(a);
    if (!m->prov.records) {
        fprintf(stderr, "ecgd train: out of memory\n");
        goto out;
    }
    if (ecg_model_save(m, a->out, &err) != ECG_OK) {
        fprintf(stderr, "ecgd train: %s\n", err.message);
        goto out;
    }
    const struct ecg_score_calib *c = &m->calib;
    printf("wrote %s (sha256 %s)\n", a->out, m->sha256);
    printf("trained on %llu beats (%s), %u epochs, final loss %.5f, seed %llu\n",
           (unsigned long long)m->prov.train_beats,
           m->prov.beats_mode == ECG_BEATS_ALL ? "all kept beats" : "normal-class beats",
           m->prov.epochs, m->prov.final_loss, (unsigned long long)m->prov.seed);
    printf("loss curve:");
    for (uint32_t e = 0; e < m->prov.epochs; e++)
        printf(" %.4f", (double)m->prov.loss_curve[e]);
    printf("\ncalibration: recon %.4f +- %.4f, recon - level %.4f +- %.4f, rr prematurity "
           "%.4f +- %.4f, rr weight %.2f\n",
           c->recon_center, c->recon_scale, c->rel_center, c->rel_scale, c->rr_center,
           c->rr_scale, c->rr_weight);
    printf("threshold %.4f at the %g percentile of the training scores (median %.4f, 90%% %.4f, "
           "99%% %.4f, max %.4f)\n",
           c->threshold, c->percentile, c->quantiles[50], c->quantiles[90], c->quantiles[99],
           c->quantiles[100]);
    rc = 0;
out:
    ecg_model_free(m);
    free(all);
    return rc;
}

int cli_train(int argc, char **argv)
{
    struct train_args a;
    static char names[MAX_RECORDS][64];
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (a.db && a.n_records == 0 && list_records(&a, names) != 0)
        return 1;

    struct ecg_error err = {0};
    struct ecg_engine_config cfg = {.backend = ECG_BACKEND_CPU, .workers = 1};
    struct ecg_engine *engine = ecg_engine_create(&cfg, &err);
    struct ecg_beat_set set = {0};
    if (!engine) {
        fprintf(stderr, "ecgd train: %s\n", err.message);
        return 1;
    }
    rc = 1;
    if (a.db) {
        for (int r = 0; r < a.n_records; r++) {
            size_t before = set.n, normal = 0;
            if (ecg_beat_set_add_wfdb(&set, engine, a.db, a.records[r], a.lead, true,
                                      a.rr_window, (uint16_t)r, &err) != ECG_OK) {
                fprintf(stderr, "ecgd train: %s/%s: %s\n", a.db, a.records[r], err.message);
                goto out;
            }
            for (size_t i = before; i < set.n; i++)
                normal += set.aami[i] == 'N';
            fprintf(stderr, "%s: %zu beats kept, %zu normal-class\n", a.records[r],
                    set.n - before, normal);
        }
    } else {
        struct ecg_read_opts opts = {.fs_hz = a.fs_hz, .lead = a.lead};
        if (a.format) {
            opts.format = ecg_format_from_name(a.format);
            if (opts.format == ECG_FORMAT_AUTO) {
                fprintf(stderr, "ecgd train: unknown format \"%s\"\n", a.format);
                rc = 2;
                goto out;
            }
        }
        struct ecg_signal sig = {0};
        enum ecg_status st = ecg_read_file(a.file, &opts, &sig, &err);
        if (st == ECG_OK)
            st = ecg_beat_set_add(&set, engine, &sig, NULL, a.rr_window, 0, &err);
        ecg_signal_free(&sig);
        if (st != ECG_OK) {
            fprintf(stderr, "ecgd train: %s: %s\n", a.file, err.message);
            goto out;
        }
        a.all_beats = true; /* no annotations: every kept beat */
        fprintf(stderr, "%s: %zu beats kept\n", a.file, set.n);
    }
    if (set.n < 2) {
        fprintf(stderr, "ecgd train: too few beats to train on (%zu)\n", set.n);
        goto out;
    }
    rc = a.cv ? run_cv(&a, &set) : train_and_save(&a, &set);
out:
    ecg_beat_set_fini(&set);
    ecg_engine_destroy(engine);
    return rc;
}
