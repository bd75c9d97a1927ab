/*
 * bench_vae.c - throughput of the CPU VAE (engine/cpu/vae.c, models/train.c): encode + score
 * of beats on 1 and 2 threads, and the time of one training epoch on 50,000 beats on 2 threads.
 * Self-contained (no arguments, no data files: synthetic beats, seeded weights), ~10 s.
 *
 * Prints one line per measurement: "<name>: <beats/s> beats/s (<ms> ms, best of N)".
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "train.h"

#define BENCH_BEATS 50000u
#define BENCH_REPEATS 3

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ECG-like beats: a QRS spike, a T wave, noise, and a zero-padded tail of varying length. */
static void synth_beats(float *emb, float *rr_ms, size_t n, size_t len)
{
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        size_t used = 150 + (size_t)(u * 100);
        for (size_t t = 0; t < len; t++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double noise = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.2;
            double q = ((double)t - 62.0) / 4.0, tw = ((double)t - 140.0 - 20.0 * u) / 15.0;
            emb[i * len + t] = t < used ? (float)(8.0 * exp(-0.5 * q * q) +
                                                  2.0 * exp(-0.5 * tw * tw) + noise)
                                        : 0.0f;
        }
        rr_ms[i] = (float)(600.0 + 400.0 * u);
    }
}

struct score_job {
    const struct ecg_model *model;
    const float *emb, *rr;
    const uint8_t *kept;
    size_t lo, hi;
    float *latent, *score;
    uint8_t *outlier;
    enum ecg_status st;
};

static void *score_worker(void *p)
{
    struct score_job *j = p;
    size_t z = j->model->arch.latent_dim, l = j->model->arch.beat_len;
    j->st = cpu_vae_score(j->model, j->emb + j->lo * l, j->kept + j->lo, j->rr + j->lo,
                          j->hi - j->lo, j->latent + j->lo * z, j->score + j->lo,
                          j->outlier + j->lo, NULL);
    return NULL;
}

/* Scores n beats split over `threads` threads; returns the elapsed seconds or -1. */
static double score_run(const struct ecg_model *m, const float *emb, const float *rr,
                        const uint8_t *kept, size_t n, unsigned threads, float *latent,
                        float *score, uint8_t *outlier)
{
    struct score_job jobs[2];
    pthread_t tid[2];
    double t0 = now_s();
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (struct score_job){m, emb, rr, kept, t * n / threads, (t + 1) * n / threads,
                                     latent, score, outlier, ECG_OK};
        if (pthread_create(&tid[t], NULL, score_worker, &jobs[t]) != 0)
            return -1;
    }
    for (unsigned t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double dt = now_s() - t0;
    for (unsigned t = 0; t < threads; t++)
        if (jobs[t].st != ECG_OK)
            return -1;
    return dt;
}

int main(void)
{
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    size_t n = BENCH_BEATS, len = arch.beat_len;
    int rc = 1;
    struct ecg_model *m = ecg_model_create(&arch, &params, &err);
    float *emb = malloc(n * len * sizeof *emb), *rr = malloc(n * sizeof *rr);
    float *latent = malloc(n * arch.latent_dim * sizeof *latent);
    float *score = malloc(n * sizeof *score);
    uint8_t *kept = malloc(n), *outlier = malloc(n);
    if (!m || !emb || !rr || !latent || !score || !kept || !outlier) {
        fprintf(stderr, "bench_vae: out of memory\n");
        goto out;
    }
    synth_beats(emb, rr, n, len);
    memset(kept, 1, n);

    /* training: one epoch on all beats, 2 threads (this also gives the scorer real weights) */
    struct ecg_train_opts opts = ecg_train_opts_default();
    opts.epochs = 1;
    opts.threads = 2;
    double t0 = now_s();
    if (ecg_vae_train(m, emb, n, &opts, &err) != ECG_OK) {
        fprintf(stderr, "bench_vae: train: %s\n", err.message);
        goto out;
    }
    double train_s = now_s() - t0;
    printf("train epoch (%u beats, batch %u, 2 threads): %.0f beats/s (%.0f ms, 1 run)\n",
           BENCH_BEATS, opts.batch_size, (double)n / train_s, 1e3 * train_s);

    for (unsigned threads = 1; threads <= 2; threads++) {
        double best = INFINITY;
        for (int r = 0; r < BENCH_REPEATS; r++) {
            double dt = score_run(m, emb, rr, kept, n, threads, latent, score, outlier);
            if (dt < 0) {
                fprintf(stderr, "bench_vae: scoring failed\n");
                goto out;
            }
            best = fmin(best, dt);
        }
        printf("encode+score (%u beats, %u thread%s): %.0f beats/s (%.0f ms, best of %d)\n",
               BENCH_BEATS, threads, threads > 1 ? "s" : "", (double)n / best, 1e3 * best,
               BENCH_REPEATS);
    }
    rc = 0;
out:
    ecg_model_free(m);
    free(emb);
    free(rr);
    free(latent);
    free(score);
    free(kept);
    free(outlier);
    return rc;
}
