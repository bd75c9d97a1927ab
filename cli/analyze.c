/*
 * analyze.c - `ecgd analyze`: run the whole pipeline on one recording and print the JSON answer.
 */
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
            "The format is guessed from the file name when not given. CSV and raw formats need\n"
            "--fs. --lead MLII,V1 or --lead all detects on several leads (the beat table and the\n"
            "model read the first, or --embed-lead). The model defaults to %s; --model none\n"
            "analyses the signal only.\n",
            cli_default_model_path());
}

static bool is_value_option(const char *arg)
{
    static const char *const names[] = {"--format", "--fs",      "--lead",   "--embed-lead",
                                        "--model",  "--backend", "--include"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(arg, names[i]) == 0)
            return true;
    }
    return false;
}

int cli_analyze(int argc, char **argv)
{
    struct ecg_read_opts opts = {0};
    const char *path = NULL, *model_path = cli_default_model_path(), *include_list = NULL;
    enum ecg_backend_kind backend = ECG_BACKEND_AUTO;
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    struct ecg_model *model = NULL;
    struct ecg_engine *engine = NULL;
    struct ecg_result *result = NULL;
    struct ecg_buf out = {0};
    unsigned include = ECG_INCLUDE_ALL;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            analyze_usage(stdout);
            return 0;
        } else if (is_value_option(a) && !v) {
            fprintf(stderr, "ecgd analyze: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--format") == 0) {
            opts.format = ecg_format_from_name(v);
            if (opts.format == ECG_FORMAT_AUTO) {
                fprintf(stderr, "ecgd analyze: unknown format \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--fs") == 0) {
            char *end = NULL;
            opts.fs_hz = strtod(v, &end);
            if (end == v || *end || !(opts.fs_hz > 0)) {
                fprintf(stderr, "ecgd analyze: --fs expects a positive rate in Hz, got \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--lead") == 0) {
            opts.lead = v;
            i++;
        } else if (strcmp(a, "--embed-lead") == 0) {
            opts.embed_lead = v;
            i++;
        } else if (strcmp(a, "--model") == 0) {
            model_path = strcmp(v, "none") == 0 ? NULL : v;
            i++;
        } else if (strcmp(a, "--backend") == 0) {
            if (!ecg_backend_kind_parse(v, &backend)) {
                fprintf(stderr, "ecgd analyze: unknown backend \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--include") == 0) {
            include_list = v;
            i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "ecgd analyze: unknown option %s\n", a);
            analyze_usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "ecgd analyze: one FILE only\n");
            return 2;
        }
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
    if (ecg_engine_analyze(engine, &sig, &result, &err) != ECG_OK) {
        fprintf(stderr, "ecgd analyze: %s: %s\n", path, err.message);
        goto out;
    }
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
