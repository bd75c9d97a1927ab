/*
 * bench_vae.c - throughput of the CPU VAE: encode + decode + score of beats with the float32
 * SIMD path the backend serves with (engine/cpu/vae_f32.c: the automatic choice, the baseline
 * build, and AVX2 where the choice is AVX-512; whole recordings and 12-beat requests; 1 and 2
 * threads) against the double reference (engine/cpu/vae.c) in the same run, and the time of one training epoch on 50,000 beats on 2 threads (models/train.c).
 * Self-contained (no arguments, no data files: synthetic beats, seeded weights), ~15 s.
 *
 * Prints one line per measurement and a closing "RESULT name=vae_cpu ..." line.
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

static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
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

/* The scorers compared: the double reference (what cpu_vae_score ran before the float32 path)
 * and the float32 SIMD path with each ISA. */
enum scorer { DOUBLE_REF, F32_AUTO, F32_GENERIC, F32_AVX2, F32_AVX512 };
static const char *const scorer_name[] = {"double reference", "float32 SIMD (auto: %s)",
                                          "float32 SIMD, generic", "float32 SIMD, AVX2+FMA",
                                          "float32 SIMD, AVX-512"};

/* The double reference of the score: ecg_vae_score_parts, the level, ecg_score_combine. */
static enum ecg_status score_double(const struct ecg_model *m, const float *emb,
                                    const uint8_t *kept, const float *rr, size_t k,
                                    float *latent, float *score, uint8_t *outlier)
{
    double *parts = malloc(3 * k * sizeof *parts);
    if (!parts)
        return ECG_ERR_NOMEM;
    enum ecg_status st = ecg_vae_score_parts(m, emb, kept, rr, k, latent, parts, parts + k, NULL);
    if (st == ECG_OK) {
        double level = ecg_recon_level(parts, k, parts + 2 * k);
        for (size_t i = 0; i < k; i++) {
            double sc = kept[i] ? ecg_score_combine(&m->calib, parts[i], level, parts[k + i]) : NAN;
            score[i] = (float)sc;
            outlier[i] = kept[i] && sc > m->calib.threshold;
        }
    }
    free(parts);
    return st;
}

struct score_job {
    const struct ecg_model *model;
    enum scorer scorer;
    size_t per_call; /* beats per call: a request's worth */
    const float *emb, *rr;
    const uint8_t *kept;
    size_t lo, hi;
    float *latent, *score;
    uint8_t *outlier;
    enum ecg_status st;
    double cpu_s; /* the thread's CPU time: what it cost its core, whatever else ran */
};

static void *score_worker(void *p)
{
    struct score_job *j = p;
    size_t z = j->model->arch.latent_dim, l = j->model->arch.beat_len;
    struct cpu_vae_scratch scratch = {0};
    static const enum cpu_vae_isa isa[] = {CPU_VAE_ISA_AUTO, CPU_VAE_ISA_AUTO,
                                           CPU_VAE_ISA_GENERIC, CPU_VAE_ISA_AVX2,
                                           CPU_VAE_ISA_AVX512};
    j->st = ECG_OK;
    double cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (size_t lo = j->lo; lo < j->hi && j->st == ECG_OK; lo += j->per_call) {
        size_t n = j->hi - lo < j->per_call ? j->hi - lo : j->per_call;
        if (j->scorer == DOUBLE_REF)
            j->st = score_double(j->model, j->emb + lo * l, j->kept + lo, j->rr + lo, n,
                                 j->latent + lo * z, j->score + lo, j->outlier + lo);
        else
            j->st = cpu_vae_score_with(j->model, j->emb + lo * l, j->kept + lo, j->rr + lo, n,
                                       isa[j->scorer], &scratch, j->latent + lo * z, NULL,
                                       j->score + lo, j->outlier + lo, NULL);
    }
    j->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    cpu_vae_scratch_fini(&scratch);
    return NULL;
}

/* Scores n beats split over `threads` threads, per_call beats per call; returns the elapsed
 * seconds or -1, and in *cpu_s the CPU seconds of the busiest thread. */
static double score_run(const struct ecg_model *m, enum scorer scorer, size_t per_call,
                        const float *emb, const float *rr, const uint8_t *kept, size_t n,
                        unsigned threads, float *latent, float *score, uint8_t *outlier,
                        double *cpu_s)
{
    struct score_job jobs[2];
    pthread_t tid[2];
    double t0 = now_s();
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (struct score_job){m,      scorer, per_call, emb,   rr,      kept,  t * n / threads,
                                     (t + 1) * n / threads, latent, score, outlier, ECG_OK, 0};
        if (pthread_create(&tid[t], NULL, score_worker, &jobs[t]) != 0)
            return -1;
    }
    for (unsigned t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double dt = now_s() - t0;
    *cpu_s = 0;
    for (unsigned t = 0; t < threads; t++) {
        if (jobs[t].st != ECG_OK)
            return -1;
        *cpu_s = fmax(*cpu_s, jobs[t].cpu_s);
    }
    return dt;
}

/* Best of BENCH_REPEATS runs, printed; returns beats/s of wall-clock time (0 on failure) and
 * in *per_cpu_s beats per CPU-second of a thread (on a shared machine the wall clock counts
 * the time other processes held the core; the CPU time does not). */
static double measure(const struct ecg_model *m, enum scorer scorer, size_t per_call,
                      unsigned threads, const float *emb, const float *rr, const uint8_t *kept,
                      size_t n, float *latent, float *score, uint8_t *outlier, double *per_cpu_s)
{
    double best = INFINITY, best_cpu = INFINITY;
    for (int r = 0; r < BENCH_REPEATS; r++) {
        double cpu_s;
        double dt = score_run(m, scorer, per_call, emb, rr, kept, n, threads, latent, score,
                              outlier, &cpu_s);
        if (dt < 0)
            return 0;
        best = fmin(best, dt);
        best_cpu = fmin(best_cpu, cpu_s);
    }
    char name[64];
    snprintf(name, sizeof name, scorer_name[scorer], cpu_vae_isa_name(CPU_VAE_ISA_AUTO));
    double per_thread = (double)n / threads;
    printf("encode+decode+score, %s, %zu beats, %zu per call, %u thread%s: %.0f beats/s "
           "(%.0f ms, best of %d); %.0f beats per CPU-second of a thread\n",
           name, n, per_call, threads, threads > 1 ? "s" : "", (double)n / best, 1e3 * best,
           BENCH_REPEATS, per_thread / best_cpu);
    *per_cpu_s = per_thread / best_cpu;
    return (double)n / best;
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

    /* a whole recording per call (as before), then a 10-second strip's 12 beats per call */
    /* a whole recording per call (as before), then a 10-second strip's 12 beats per call */
    double c_ref, c_f32, c_gen, c_avx2 = 0, c_strip, c_two, avx2 = 0;
    double ref = measure(m, DOUBLE_REF, n, 1, emb, rr, kept, n, latent, score, outlier, &c_ref);
    double f32 = measure(m, F32_AUTO, n, 1, emb, rr, kept, n, latent, score, outlier, &c_f32);
    double gen = measure(m, F32_GENERIC, n, 1, emb, rr, kept, n, latent, score, outlier, &c_gen);
    if (cpu_vae_isa_available(CPU_VAE_ISA_AVX2) &&
        cpu_vae_isa_resolve(CPU_VAE_ISA_AUTO) != CPU_VAE_ISA_AVX2)
        avx2 = measure(m, F32_AVX2, n, 1, emb, rr, kept, n, latent, score, outlier, &c_avx2);
    double strip = measure(m, F32_AUTO, 12, 1, emb, rr, kept, n, latent, score, outlier,
                           &c_strip);
    double two = measure(m, F32_AUTO, n, 2, emb, rr, kept, n, latent, score, outlier, &c_two);
    if (ref <= 0 || f32 <= 0 || gen <= 0 || strip <= 0 || two <= 0) {
        fprintf(stderr, "bench_vae: scoring failed\n");
        goto out;
    }
    printf("RESULT name=vae_cpu beats=%zu auto=%s double_1t=%.0f f32_1t=%.0f "
           "f32_generic_1t=%.0f f32_avx2_1t=%.0f f32_strip12_1t=%.0f f32_2t=%.0f speedup_1t=%.2f | "
           "per CPU-second: double=%.0f f32=%.0f f32_generic=%.0f f32_avx2=%.0f f32_strip12=%.0f "
           "speedup=%.2f\n",
           n, cpu_vae_isa_name(CPU_VAE_ISA_AUTO), ref, f32, gen, avx2, strip, two, f32 / ref,
           c_ref, c_f32, c_gen, c_avx2, c_strip, c_f32 / c_ref);
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
