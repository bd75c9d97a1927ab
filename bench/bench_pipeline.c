/*
 * bench_pipeline.c - times every stage of the CPU pipeline on a 20M-sample recording tiled from
 * the shared MIT-BIH records (lead MLII, 360 Hz), and the CSV reader against glibc's strtod on
 * the same text, and the cost of each lead added to the detection, in one run.
 *
 * usage: bench_pipeline [SAMPLES] [DATA_DIR] [MODEL]   (defaults: 20000000 ../shared/data/mitdb
 * models/default.ecgm). Prints a Markdown table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecg.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Tiles lead 0 of every record in dir/RECORDS into n samples. */
static float *tile_records(const char *dir, size_t n)
{
    char path[4096], name[64];
    snprintf(path, sizeof path, "%s/RECORDS", dir);
    FILE *list = fopen(path, "r");
    if (!list)
        return NULL;
    float *all = NULL;
    size_t have = 0;
    while (fscanf(list, "%63s", name) == 1) {
        struct ecg_signal sig = {0};
        struct ecg_error err = {0};
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK) {
            fprintf(stderr, "%s: %s\n", path, err.message);
            continue;
        }
        float *grown = realloc(all, (have + sig.n) * sizeof *all);
        if (!grown) {
            ecg_signal_free(&sig);
            break;
        }
        all = grown;
        memcpy(all + have, sig.samples, sig.n * sizeof *all);
        have += sig.n;
        ecg_signal_free(&sig);
    }
    fclose(list);
    if (!have) {
        free(all);
        return NULL;
    }
    float *out = malloc(n * sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        out[i] = all[i % have];
    free(all);
    return out;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000000;
    const char *dir = argc > 2 ? argv[2] : "../shared/data/mitdb";
    const char *model_path = argc > 3 ? argv[3] : "models/default.ecgm";
    struct ecg_error err = {0};
    struct ecg_buf csv = {0};

    float *x = tile_records(dir, n);
    if (!x) {
        fprintf(stderr, "bench_pipeline: cannot read records from %s\n", dir);
        return 1;
    }
    /* The original data's form: 17 significant digits, e.g. 1.3863000000000008e+00. */
    for (size_t i = 0; i < n; i++)
        ecg_buf_printf(&csv, "%.16e\n", (double)x[i]);
    if (csv.failed)
        return 1;

    double best_parse = 1e9;
    struct ecg_signal sig = {0};
    for (int rep = 0; rep < 3; rep++) {
        struct ecg_read_opts opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360};
        ecg_signal_free(&sig);
        double t = now_s();
        if (ecg_read_memory(csv.data, csv.len, &opts, &sig, &err) != ECG_OK) {
            fprintf(stderr, "bench_pipeline: csv: %s\n", err.message);
            return 1;
        }
        t = now_s() - t;
        best_parse = t < best_parse ? t : best_parse;
    }
    double t_strtod = now_s();
    char *p = csv.data;
    double checksum = 0;
    for (size_t i = 0; i < n; i++)
        checksum += strtod(p, &p);
    t_strtod = now_s() - t_strtod;

    struct ecg_model *model = ecg_model_load(model_path, &err);
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .model = model, .workers = 1};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine) {
        fprintf(stderr, "bench_pipeline: %s\n", err.message);
        return 1;
    }
    struct ecg_result *res = NULL;
    struct ecg_timing best = {.total_ms = 1e12};
    for (int rep = 0; rep < 3; rep++) {
        ecg_result_free(res);
        res = NULL;
        if (ecg_engine_analyze(engine, &sig, &res, &err) != ECG_OK) {
            fprintf(stderr, "bench_pipeline: analyze: %s\n", err.message);
            return 1;
        }
        if (res->timing.total_ms < best.total_ms)
            best = res->timing;
    }
    double mb = (double)csv.len / 1e6;
    double fds_ms = best.filter_ms + best.detect_ms + best.embed_ms;
    printf("| stage | time | throughput |\n|---|---|---|\n");
    printf("| CSV parse, ecgd (%.0f MB, %zu lines, 1 core) | %.1f ms | %.0f MB/s |\n", mb, n,
           best_parse * 1e3, mb / best_parse);
    printf("| CSV numbers, glibc strtod (same text) | %.1f ms | %.0f MB/s (ecgd is %.2fx) |\n",
           t_strtod * 1e3, mb / t_strtod, t_strtod / best_parse);
    printf("| resample 360 -> 250 Hz | %.1f ms | %.1f M samples/s |\n", best.resample_ms,
           (double)n / best.resample_ms / 1e3);
    printf("| Ricker filter | %.1f ms | %.1f M samples/s |\n", best.filter_ms,
           (double)n / best.filter_ms / 1e3);
    printf("| detect | %.1f ms | %.1f M samples/s |\n", best.detect_ms,
           (double)n / best.detect_ms / 1e3);
    printf("| segment + embed | %.1f ms | %.1f M samples/s |\n", best.embed_ms,
           (double)n / best.embed_ms / 1e3);
    printf("| filter + detect + segment | %.1f ms | %.1f M samples/s |\n", fds_ms,
           (double)n / fds_ms / 1e3);
    printf("| quality (features, verdict, NN selection, HRV) | %.1f ms | %.1f M samples/s; "
           "%.1f %% of filter + detect (%.1f ms) |\n", best.quality_ms,
           (double)n / best.quality_ms / 1e3, 100.0 * best.quality_ms /
           (best.filter_ms + best.detect_ms), best.filter_ms + best.detect_ms);
    if (model)
        printf("| VAE encode + score (%zu beats) | %.1f ms | %.0f beats/s |\n", res->n_beats,
               best.encode_ms, (double)res->n_beats / best.encode_ms * 1e3);
    printf("| total (from samples in memory) | %.1f ms | %zu beats |\n", best.total_ms,
           res->n_beats);
    /* The cost of each added lead: the same recording with one and with three more leads
     * (the signal reversed and scaled: other data, the same amount of work per lead). */
    double per_lead[4] = {0};
    for (size_t leads = 1; leads <= 4; leads += 3) {
        struct ecg_signal multi = sig;
        multi.n_extra = leads - 1;
        for (size_t l = 0; l + 1 < leads; l++) {
            multi.extra[l] = malloc(n * sizeof(float));
            if (!multi.extra[l])
                return 1;
            for (size_t i = 0; i < n; i++)
                multi.extra[l][i] = (0.5f + 0.25f * (float)l) * sig.samples[n - 1 - i];
        }
        double best_ms = 1e12;
        for (int rep = 0; rep < 3; rep++) {
            struct ecg_result *r = NULL;
            if (ecg_engine_analyze(engine, &multi, &r, &err) != ECG_OK) {
                fprintf(stderr, "bench_pipeline: %zu leads: %s\n", leads, err.message);
                return 1;
            }
            double ms = r->timing.resample_ms + r->timing.filter_ms + r->timing.detect_ms;
            best_ms = ms < best_ms ? ms : best_ms;
            ecg_result_free(r);
        }
        per_lead[leads - 1] = best_ms;
        for (size_t l = 0; l + 1 < leads; l++)
            free(multi.extra[l]);
    }
    printf("| resample + filter + detect, 1 lead | %.1f ms | %.1f M samples/s |\n", per_lead[0],
           (double)n / per_lead[0] / 1e3);
    printf("| resample + filter + detect, 4 leads | %.1f ms | +%.1f ms per added lead "
           "(%.2fx one lead's cost) |\n",
           per_lead[3], (per_lead[3] - per_lead[0]) / 3.0,
           (per_lead[3] - per_lead[0]) / 3.0 / per_lead[0]);
    fprintf(stderr, "(checksum %g)\n", checksum);
    ecg_result_free(res);
    ecg_engine_destroy(engine);
    ecg_model_free(model);
    ecg_signal_free(&sig);
    ecg_buf_fini(&csv);
    free(x);
    return 0;
}
