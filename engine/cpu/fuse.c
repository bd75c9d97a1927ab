/*
 * fuse.c - the fused QRS envelope of several leads (CPU reference; fuse_core.h has the method and
 * the arithmetic, shared with the CUDA twin gpu/cuda_fuse.cu). Thread-safe: no state outside the
 * arguments.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu.h"
#include "detect_params.h"
#include "fuse_core.h"

size_t cpu_fuse_window(const struct ecg_plan *plan)
{
    return detect_samples_of(FUSE_WINDOW_S, plan->fs_a_hz);
}

/* Step 4: fused[i] = the leads' envelopes weighed by their gains at i, in lead order. */
static void fuse_sum(const float *const *env, size_t n_leads, size_t n, const float *gain,
                     size_t n_win, size_t win, float *fused)
{
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (size_t l = 0; l < n_leads; l++)
            acc += fuse_gain_at(gain + l * n_win, n_win, win, i) * env[l][i];
        fused[i] = acc;
    }
}

enum ecg_status cpu_fuse(const struct ecg_plan *plan, const float *const *env, size_t n_leads,
                         size_t n, float *fused, float **gain_out, size_t *n_win_out,
                         double *agree_out, struct ecg_error *err)
{
    const size_t win = cpu_fuse_window(plan);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    /* step 3a: each lead's agreement is measured from two leads on (a loose electrode is told
     * even then, engine.c's lead_instead), and weighs from three (two cannot outvote) */
    const bool measure = n_leads >= 2;
    const bool weigh = n_leads >= 3;
    double *peak = malloc(2 * n_leads * n_win * sizeof *peak);
    double *level = malloc(2 * n_leads * n_win * sizeof *level);
    float *gain = calloc(n_leads * n_win, sizeof *gain); /* calloc: n_win may be 0 */
    int64_t *at = measure ? malloc((n_leads + 1) * n_win * sizeof *at) : NULL;
    double *agree = measure ? malloc(n_leads * n_win * sizeof *agree) : NULL;
    *gain_out = NULL;
    *n_win_out = 0;
    if (!peak || !level || !gain || (measure && (!at || !agree)) || n_leads > FUSE_MAX_LEADS) {
        free(peak);
        free(level);
        free(gain);
        free(at);
        free(agree);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "fuse: %zu leads of %zu samples",
                        n_leads, n);
    }
    double *mean = peak + n_leads * n_win, *weight = level + n_leads * n_win;
    for (size_t l = 0; l < n_leads; l++) {
        for (size_t j = 0; j < n_win; j++) {
            float p;
            fuse_window_stats(env[l], n, win, j, &p, &mean[l * n_win + j]);
            peak[l * n_win + j] = p;
        }
    }
    for (size_t l = 0; l < n_leads; l++)
        for (size_t j = 0; j < n_win; j++)
            fuse_window_weight(peak + l * n_win, mean + l * n_win, n_win, j,
                               &level[l * n_win + j], &weight[l * n_win + j]);
    for (size_t j = 0; j < n_win; j++)
        fuse_window_gains(level, weight, NULL, n_leads, n_win, j, gain);
    fuse_sum(env, n_leads, n, gain, n_win, win, fused);
    if (measure) { /* step 3a, then (three leads or more) steps 3 and 4 again */
        const int64_t reach = (int64_t)detect_samples_of(FUSE_AGREE_S, plan->fs_a_hz);
        for (size_t l = 0; l < n_leads; l++)
            for (size_t j = 0; j < n_win; j++)
                at[l * n_win + j] = fuse_window_peak_at(env[l], n, win, j);
        for (size_t j = 0; j < n_win; j++)
            at[n_leads * n_win + j] = fuse_window_peak_at(fused, n, win, j);
        for (size_t l = 0; l < n_leads; l++)
            for (size_t j = 0; j < n_win; j++)
                agree[l * n_win + j] = fuse_window_agreement(at + l * n_win, at + n_leads * n_win,
                                                             n_win, j, reach);
        if (weigh) {
            for (size_t j = 0; j < n_win; j++)
                fuse_window_gains(level, weight, agree, n_leads, n_win, j, gain);
            fuse_sum(env, n_leads, n, gain, n_win, win, fused);
        }
    }
    for (size_t l = 0; agree_out && l < n_leads; l++)
        agree_out[l] = measure ? fuse_agreement_mean(agree, n_win, l) : NAN;
    free(peak);
    free(level);
    free(at);
    free(agree);
    *gain_out = gain;
    *n_win_out = n_win;
    return ECG_OK;
}
