/*
 * analyze.c - `ecgd analyze`: run the whole pipeline on one recording and print the JSON answer.
 */
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ecg.h"

const char *cli_default_model_path(void)
{
    static char path[4096];
    const char *dir = getenv("ECGD_MODEL_DIR");
    snprintf(path, sizeof path, "%s/default.ecgm", dir && *dir ? dir : "models");
    return path;
}

static void analyze_usage(FILE *out)
{
    fprintf(out,
            "usage: ecgd analyze FILE [--format csv|f32|f64|i16|npy|edf|json|wfdb] [--fs HZ]\n"
            "                         [--lead N|NAME|LIST|all] [--embed-lead N|NAME]\n"
            "                         [--model PATH|none] [--backend auto|cpu|cuda]\n"
            "                         [--include beats,latent,score,summary,timing]\n"
            "                         [--annotations OUT.atr] [--overlap S]\n"
            "The format is guessed from the file name when not given. CSV and raw formats need\n"
            "--fs. --lead MLII,V1 or --lead all detects on several leads (the beat table and the\n"
            "model read the first, or --embed-lead). The model defaults to %s; --model none\n"
            "analyses the signal only. --annotations also writes the beats as a WFDB annotation\n"
            "file (rdann, bxb and ecgd eval --test read it). --overlap S: the first S seconds\n"
            "repeat the end of the strip before; their beats are not reported (overlap_s).\n"
            "Options take their value as --fs 360 or --fs=360.\n",
            cli_default_model_path());
}

int cli_analyze(int argc, char **argv)
{
    struct ecg_read_opts opts = {0};
    const char *path = NULL, *model_path = cli_default_model_path(), *include_list = NULL;
    const char *annotations_path = NULL;
    enum ecg_backend_kind backend = ECG_BACKEND_AUTO;
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    struct ecg_model *model = NULL;
    struct ecg_engine *engine = NULL;
    struct ecg_result *result = NULL;
    struct ecg_buf out = {0};
    unsigned include = ECG_INCLUDE_ALL;
    double overlap_s = 0.0;
    int rc = 1;

    enum { OPT_FORMAT = 256, OPT_FS, OPT_LEAD, OPT_EMBED_LEAD, OPT_MODEL, OPT_BACKEND,
           OPT_INCLUDE, OPT_ANNOTATIONS, OPT_OVERLAP };
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"fs", required_argument, NULL, OPT_FS},
        {"lead", required_argument, NULL, OPT_LEAD},
        {"embed-lead", required_argument, NULL, OPT_EMBED_LEAD},
        {"model", required_argument, NULL, OPT_MODEL},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"include", required_argument, NULL, OPT_INCLUDE},
        {"annotations", required_argument, NULL, OPT_ANNOTATIONS},
        {"overlap", required_argument, NULL, OPT_OVERLAP},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case 'h':
            analyze_usage(stdout);
            return 0;
        case OPT_FORMAT:
            opts.format = ecg_format_from_name(v);
            if (opts.format == ECG_FORMAT_AUTO) {
                fprintf(stderr, "ecgd analyze: unknown format \"%s\"\n", v);
                return 2;
            }
            break;
        case OPT_FS:
            if (!cli_parse_rate(v, &opts.fs_hz)) {
                fprintf(stderr, "ecgd analyze: --fs expects a positive rate in Hz, got \"%s\"\n", v);
                return 2;
            }
            break;
        case OPT_LEAD:
            opts.lead = v;
            break;
        case OPT_EMBED_LEAD:
            opts.embed_lead = v;
            break;
        case OPT_MODEL:
            model_path = strcmp(v, "none") == 0 ? NULL : v;
            break;
        case OPT_BACKEND:
            if (!ecg_backend_kind_parse(v, &backend)) {
                fprintf(stderr, "ecgd analyze: unknown backend \"%s\"\n", v);
                return 2;
            }
            break;
        case OPT_INCLUDE:
            include_list = v;
            break;
        case OPT_ANNOTATIONS:
            annotations_path = v;
            break;
        case OPT_OVERLAP: {
            char *end = NULL;
            overlap_s = strtod(v, &end);
            if (end == v || *end || !isfinite(overlap_s) || overlap_s < 0.0) {
                fprintf(stderr, "ecgd analyze: --overlap expects seconds >= 0, got \"%s\"\n", v);
                return 2;
            }
            break;
        }
        default:
            cli_bad_option("ecgd analyze", c, argv);
            analyze_usage(stderr);
            return 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (path) {
            fprintf(stderr, "ecgd analyze: one FILE only\n");
            return 2;
        }
        path = argv[i];
    }
    if (!path) {
        analyze_usage(stderr);
        return 2;
    }
    if (include_list && !ecg_include_parse(include_list, &include, &err)) {
        fprintf(stderr, "ecgd analyze: %s\n", err.message);
        return 2;
    }
    if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK) {
        fprintf(stderr, "ecgd analyze: %s: %s\n", path, err.message);
        goto out;
    }
    if (model_path) {
        model = ecg_model_load(model_path, &err);
        if (!model) {
            fprintf(stderr, "ecgd analyze: model %s: %s\n", model_path, err.message);
            goto out;
        }
    }
    struct ecg_engine_config config = {.backend = backend, .model = model, .workers = 1,
                                       .device = 0};
    engine = ecg_engine_create(&config, &err);
    if (!engine) {
        fprintf(stderr, "ecgd analyze: %s\n", err.message);
        goto out;
    }
    if (*ecg_engine_note(engine) && backend != ECG_BACKEND_AUTO)
        fprintf(stderr, "ecgd analyze: %s\n", ecg_engine_note(engine));
    if (ecg_engine_analyze(engine, &sig, &result, &err) != ECG_OK ||
        (overlap_s > 0.0 && ecg_result_drop_overlap(result, overlap_s, NULL, 0, &err) != ECG_OK)) {
        fprintf(stderr, "ecgd analyze: %s: %s\n", path, err.message);
        goto out;
    }
    if (annotations_path && cli_write_annotations(result, annotations_path) != 0)
        goto out;
    ecg_result_write_json(result, engine, include, &out);
    if (out.failed) {
        fprintf(stderr, "ecgd analyze: out of memory writing the answer\n");
        goto out;
    }
    if (fwrite(out.data, 1, out.len, stdout) != out.len || fflush(stdout) != 0) {
        fprintf(stderr, "ecgd analyze: cannot write to stdout\n");
        goto out;
    }
    rc = 0;
out:
    ecg_buf_fini(&out);
    ecg_result_free(result);
    ecg_engine_destroy(engine);
    ecg_model_free(model);
    ecg_signal_free(&sig);
    return rc;
}
