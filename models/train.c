/*
 * train.c - the VAE trainer (Adam on MSE + kl_weight * KL) and the score calibration.
 *
 * Determinism: every random draw (initial weights, the shuffle, the reparameterisation noise)
 * comes from one splitmix64 stream seeded by opts->seed and drawn on the calling thread. Each
 * batch is cut into TRAIN_CHUNKS fixed chunks; worker threads take chunks round-robin and
 * accumulate each chunk's gradient in its own buffer, and the chunks are summed in chunk order.
 * The result is therefore bit-identical for a seed whatever the number of threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train.h"

#define TRAIN_CHUNKS 8
#define MAX_THREADS 64

struct ecg_train_opts ecg_train_opts_default(void)
{
    struct ecg_train_opts opts = {.epochs = 30, .batch_size = 64, .learning_rate = 2e-3,
                                  .cosine = true, .kl_weight = 0.1, .seed = 1, .threads = 2,
                                  .progress = false};
    return opts;
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rng_uniform(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

static double rng_normal(uint64_t *state)
{
    double u1 = rng_uniform(state), u2 = rng_uniform(state);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* Uniform integer in [0, n). */
static size_t rng_below(uint64_t *state, size_t n)
{
    return (size_t)(rng_uniform(state) * (double)n);
}

/* ---------------------------------------------------------------- initialisation */

/* PyTorch's default for Conv1d and Linear: weights and biases uniform in +-1/sqrt(fan_in). */
static void init_tensor(double *w, size_t n, size_t fan_in, uint64_t *rng)
{
    double bound = 1.0 / sqrt((double)fan_in);
    for (size_t i = 0; i < n; i++)
        w[i] = (2.0 * rng_uniform(rng) - 1.0) * bound;
}

static void init_weights(const struct ecg_vae_arch *a, const struct ecg_vae_layout *ly,
                         double *w, uint64_t *rng)
{
    size_t in = 1;
    for (int l = 0; l < 3; l++) {
        init_tensor(w + ly->enc_w[l], a->enc[l] * in * 3, in * 3, rng);
        init_tensor(w + ly->enc_b[l], a->enc[l], in * 3, rng);
        w[ly->enc_alpha[l]] = 1.0;
        in = a->enc[l];
    }
    init_tensor(w + ly->mu_w, a->latent_dim * in * 3, in * 3, rng);
    init_tensor(w + ly->mu_b, a->latent_dim, in * 3, rng);
    init_tensor(w + ly->logvar_w, a->latent_dim * in * 3, in * 3, rng);
    init_tensor(w + ly->logvar_b, a->latent_dim, in * 3, rng);
    size_t fc_out = (size_t)a->dec[0] * (a->beat_len / 8);
    init_tensor(w + ly->fc_w, fc_out * a->latent_dim, a->latent_dim, rng);
    init_tensor(w + ly->fc_b, fc_out, a->latent_dim, rng);
    in = a->dec[0];
    for (int l = 0; l < 3; l++) {
        size_t out = l < 2 ? a->dec[l + 1] : 1;
        init_tensor(w + ly->dec_w[l], out * in * 3, in * 3, rng);
        init_tensor(w + ly->dec_b[l], out, in * 3, rng);
        if (l < 2)
            w[ly->dec_alpha[l]] = 1.0;
        in = out;
    }
}

/* ---------------------------------------------------------------- one batch on threads */

struct batch_job {
    const struct ecg_vae_arch *arch;
    const struct ecg_vae_layout *layout;
    const double *w;
    const float *beats;
    const size_t *index;     /* the batch's beat indices */
    const double *eps;       /* batch x latent_dim */
    size_t batch;
    double kl_weight;
    double *chunk_grad;      /* TRAIN_CHUNKS x n_weights */
    double chunk_loss[TRAIN_CHUNKS], chunk_mse[TRAIN_CHUNKS], chunk_kl[TRAIN_CHUNKS];
    double **work;           /* per thread */
    double **x;              /* per thread, beat_len doubles */
    unsigned threads;
};

struct worker_arg {
    struct batch_job *job;
    unsigned id;
};

static void *batch_worker(void *p)
{
    struct worker_arg *arg = p;
    struct batch_job *job = arg->job;
    size_t n_w = job->layout->n_weights, l_len = job->arch->beat_len;
    size_t z_dim = job->arch->latent_dim;
    double *x = job->x[arg->id], *work = job->work[arg->id];
    for (size_t c = arg->id; c < TRAIN_CHUNKS; c += job->threads) {
        double *g = job->chunk_grad + c * n_w;
        memset(g, 0, n_w * sizeof *g);
        double loss = 0, mse_sum = 0, kl_sum = 0;
        size_t lo = c * job->batch / TRAIN_CHUNKS, hi = (c + 1) * job->batch / TRAIN_CHUNKS;
        for (size_t b = lo; b < hi; b++) {
            const float *row = job->beats + job->index[b] * l_len;
            for (size_t t = 0; t < l_len; t++)
                x[t] = row[t];
            double mse, kl;
            loss += ecg_vae_train_beat(job->arch, job->layout, job->w, x, job->eps + b * z_dim,
                                       job->kl_weight, 1.0 / (double)job->batch, g, NULL, NULL,
                                       NULL, &mse, &kl, work);
            mse_sum += mse;
            kl_sum += kl;
        }
        job->chunk_loss[c] = loss;
        job->chunk_mse[c] = mse_sum;
        job->chunk_kl[c] = kl_sum;
    }
    return NULL;
}

/* Runs the batch on job->threads threads (the calling thread is worker 0). A thread that
 * cannot be started has its chunks run here, so the result never depends on it. */
static void run_batch(struct batch_job *job)
{
    pthread_t tid[MAX_THREADS];
    struct worker_arg args[MAX_THREADS];
    unsigned started = 0;
    for (unsigned t = 1; t < job->threads; t++) {
        args[t] = (struct worker_arg){job, t};
        if (pthread_create(&tid[t], NULL, batch_worker, &args[t]) != 0)
            break;
        started = t;
    }
    args[0] = (struct worker_arg){job, 0};
    batch_worker(&args[0]);
    for (unsigned t = 1; t <= started; t++)
        pthread_join(tid[t], NULL);
    for (unsigned t = started + 1; t < job->threads; t++) {
        args[t] = (struct worker_arg){job, t};
        batch_worker(&args[t]);
    }
}

/* ---------------------------------------------------------------- training */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum ecg_status ecg_vae_train(struct ecg_model *model, const float *beats, size_t n,
                              const struct ecg_train_opts *opts, struct ecg_error *err)
{
    const struct ecg_vae_arch *arch = &model->arch;
    const struct ecg_vae_layout *ly = &model->layout;
    size_t n_w = ly->n_weights, z_dim = arch->latent_dim;
    unsigned threads = opts->threads ? opts->threads : 2;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (n == 0 || opts->epochs == 0 || opts->batch_size == 0 || opts->epochs > ECG_MODEL_MAX_EPOCHS)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                        "training needs beats (%zu), epochs in [1, %u] (%u) and a batch size (%u)",
                        n, ECG_MODEL_MAX_EPOCHS, opts->epochs, opts->batch_size);
    size_t batch = opts->batch_size < n ? opts->batch_size : n;

    enum ecg_status st = ECG_OK;
    struct batch_job job = {0};
    double *w = calloc(n_w, sizeof *w), *m1 = calloc(n_w, sizeof *m1);
    double *m2 = calloc(n_w, sizeof *m2), *grad = calloc(n_w, sizeof *grad);
    size_t *order = malloc(n * sizeof *order);
    double *eps = malloc(batch * z_dim * sizeof *eps);
    float *curve = malloc(opts->epochs * sizeof *curve);
    job.chunk_grad = malloc(TRAIN_CHUNKS * n_w * sizeof *job.chunk_grad);
    job.work = calloc(threads, sizeof *job.work);
    job.x = calloc(threads, sizeof *job.x);
    if (!w || !m1 || !m2 || !grad || !order || !eps || !curve || !job.chunk_grad || !job.work ||
        !job.x)
        goto nomem;
    for (unsigned t = 0; t < threads; t++) {
        job.work[t] = malloc(ecg_vae_work_len(arch) * sizeof(double));
        job.x[t] = malloc(arch->beat_len * sizeof(double));
        if (!job.work[t] || !job.x[t])
            goto nomem;
    }
    uint64_t rng = opts->seed;
    init_weights(arch, ly, w, &rng);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    job.arch = arch;
    job.layout = ly;
    job.w = w;
    job.beats = beats;
    job.eps = eps;
    job.kl_weight = opts->kl_weight;
    job.threads = threads;

    const double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;
    uint64_t step = 0;
    double loss_epoch = 0;
    for (uint32_t e = 0; e < opts->epochs; e++) {
        double t0 = now_s();
        /* cosine decay from learning_rate towards 0 over the epochs (or constant) */
        double lr = opts->learning_rate;
        if (opts->cosine)
            lr *= 0.5 * (1.0 + cos(M_PI * (double)e / (double)opts->epochs));
        for (size_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
            size_t j = rng_below(&rng, i + 1);
            size_t tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        double loss_sum = 0, mse_sum = 0, kl_sum = 0;
        for (size_t start = 0; start < n; start += batch) {
            job.batch = start + batch <= n ? batch : n - start;
            job.index = order + start;
            for (size_t k = 0; k < job.batch * z_dim; k++)
                eps[k] = rng_normal(&rng);
            run_batch(&job);
            memset(grad, 0, n_w * sizeof *grad);
            for (int c = 0; c < TRAIN_CHUNKS; c++) {
                const double *g = job.chunk_grad + (size_t)c * n_w;
                for (size_t i = 0; i < n_w; i++)
                    grad[i] += g[i];
                loss_sum += job.chunk_loss[c];
                mse_sum += job.chunk_mse[c];
                kl_sum += job.chunk_kl[c];
            }
            step++;
            double c1 = 1.0 - pow(beta1, (double)step), c2 = 1.0 - pow(beta2, (double)step);
            for (size_t i = 0; i < n_w; i++) {
                m1[i] = beta1 * m1[i] + (1 - beta1) * grad[i];
                m2[i] = beta2 * m2[i] + (1 - beta2) * grad[i] * grad[i];
                w[i] -= lr * (m1[i] / c1) / (sqrt(m2[i] / c2) + adam_eps);
            }
        }
        loss_epoch = loss_sum / (double)n;
        curve[e] = (float)loss_epoch;
        if (!isfinite(loss_epoch)) {
            st = ecg_fail(err, ECG_ERR_INTERNAL, "diverged", "training diverged in epoch %u",
                          e + 1);
            goto out;
        }
        if (opts->progress) {
            double dt = now_s() - t0;
            fprintf(stderr, "epoch %u/%u  loss %.5f  (mse %.5f, kl %.4f)  %.0f beats/s\n", e + 1,
                    opts->epochs, loss_epoch, mse_sum / (double)n, kl_sum / (double)n,
                    dt > 0 ? (double)n / dt : 0.0);
        }
    }
    for (size_t i = 0; i < n_w; i++)
        model->weights[i] = (float)w[i];
    free(model->prov.loss_curve);
    model->prov.loss_curve = curve;
    curve = NULL;
    model->prov.epochs = opts->epochs;
    model->prov.batch_size = opts->batch_size;
    model->prov.learning_rate = opts->learning_rate;
    model->prov.schedule = opts->cosine ? 1 : 0;
    model->prov.kl_weight = opts->kl_weight;
    model->prov.seed = opts->seed;
    model->prov.train_beats = n;
    model->prov.final_loss = loss_epoch;
    goto out;
nomem:
    st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate training buffers");
out:
    if (job.work)
        for (unsigned t = 0; t < threads; t++)
            free(job.work[t]);
    if (job.x)
        for (unsigned t = 0; t < threads; t++)
            free(job.x[t]);
    free(job.work);
    free(job.x);
    free(job.chunk_grad);
    free(w);
    free(m1);
    free(m2);
    free(grad);
    free(order);
    free(eps);
    free(curve);
    return st;
}

/* ---------------------------------------------------------------- calibration */

struct recon_job {
    const struct ecg_model *model;
    const float *beats;
    size_t lo, hi;
    double *recon;
    enum ecg_status st;
    struct ecg_error err;
};

static void *recon_worker(void *p)
{
    struct recon_job *job = p;
    size_t n = job->hi - job->lo;
    uint8_t *kept = malloc(n ? n : 1);
    if (!kept) {
        job->st = ecg_fail(&job->err, ECG_ERR_NOMEM, "out_of_memory", "kept flags");
        return NULL;
    }
    memset(kept, 1, n);
    job->st = ecg_vae_score_parts(job->model, job->beats + job->lo * job->model->arch.beat_len,
                                  kept, NULL, n, NULL, job->recon + job->lo, NULL, &job->err);
    free(kept);
    return NULL;
}

enum ecg_status ecg_model_recon(const struct ecg_model *model, const float *beats, size_t n,
                                unsigned threads, double *recon, struct ecg_error *err)
{
    if (threads == 0)
        threads = 2;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    struct recon_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (struct recon_job){.model = model, .beats = beats, .lo = t * n / threads,
                                     .hi = (t + 1) * n / threads, .recon = recon};
        if (t > 0)
            started[t] = pthread_create(&tid[t], NULL, recon_worker, &jobs[t]) == 0;
    }
    recon_worker(&jobs[0]);
    for (unsigned t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            recon_worker(&jobs[t]);
    }
    for (unsigned t = 0; t < threads; t++) {
        if (jobs[t].st != ECG_OK) {
            if (err)
                *err = jobs[t].err;
            return jobs[t].st;
        }
    }
    return ECG_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ecg_quantile_sorted(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return NAN;
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n)
        return sorted[n - 1];
    double frac = pos - (double)i;
    return sorted[i] + frac * (sorted[i + 1] - sorted[i]);
}

/* Median and 1.4826 * MAD of n values (v is reordered). */
static void robust_center_scale(double *v, size_t n, double *center, double *scale)
{
    qsort(v, n, sizeof *v, cmp_double);
    double med = ecg_quantile_sorted(v, n, 0.5);
    for (size_t i = 0; i < n; i++)
        v[i] = fabs(v[i] - med);
    qsort(v, n, sizeof *v, cmp_double);
    *center = med;
    *scale = 1.4826 * ecg_quantile_sorted(v, n, 0.5);
}

enum ecg_status ecg_model_calibrate(struct ecg_model *model, const float *beats,
                                    const double *prem, const double *level, size_t n,
                                    uint32_t rr_window, double rr_weight, double percentile,
                                    unsigned threads, struct ecg_error *err)
{
    if (n < 2 || !(percentile > 0 && percentile < 100) || rr_window < 1 || rr_window > 64 ||
        !(rr_weight >= 0))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                        "calibration needs >= 2 beats (%zu), a percentile in (0, 100) (%g), "
                        "rr_window in [1, 64] (%u), rr_weight >= 0 (%g)",
                        n, percentile, rr_window, rr_weight);
    enum ecg_status st = ECG_OK;
    double *recon = malloc(n * sizeof *recon), *tmp = malloc(n * sizeof *tmp);
    double *lv = malloc(n * sizeof *lv);
    double *quantiles = malloc(101 * sizeof *quantiles);
    if (!recon || !tmp || !lv || !quantiles) {
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "calibration buffers");
        goto out;
    }
    st = ecg_model_recon(model, beats, n, threads, recon, err);
    if (st != ECG_OK)
        goto out;
    double one_level = level ? NAN : ecg_recon_level(recon, n, tmp);
    for (size_t i = 0; i < n; i++)
        lv[i] = level ? level[i] : one_level;
    struct ecg_score_calib *c = &model->calib;
    c->rr_window = rr_window;
    c->rr_weight = rr_weight;
    memcpy(tmp, recon, n * sizeof *tmp);
    robust_center_scale(tmp, n, &c->recon_center, &c->recon_scale);
    for (size_t i = 0; i < n; i++)
        tmp[i] = recon[i] - lv[i];
    robust_center_scale(tmp, n, &c->rel_center, &c->rel_scale);
    memcpy(tmp, prem, n * sizeof *tmp);
    robust_center_scale(tmp, n, &c->rr_center, &c->rr_scale);
    /* degenerate spreads (identical beats, a metronome) would divide by ~0 */
    if (c->recon_scale < 1e-3)
        c->recon_scale = 1e-3;
    if (c->rel_scale < 1e-3)
        c->rel_scale = 1e-3;
    if (c->rr_scale < 1e-3)
        c->rr_scale = 1e-3;
    for (size_t i = 0; i < n; i++)
        tmp[i] = ecg_score_combine(c, recon[i], lv[i], prem[i]);
    qsort(tmp, n, sizeof *tmp, cmp_double);
    for (int q = 0; q <= 100; q++)
        quantiles[q] = ecg_quantile_sorted(tmp, n, q / 100.0);
    free(c->quantiles);
    c->quantiles = quantiles;
    quantiles = NULL;
    c->n_quantiles = 101;
    c->percentile = percentile;
    c->threshold = ecg_quantile_sorted(tmp, n, percentile / 100.0);
out:
    free(recon);
    free(tmp);
    free(lv);
    free(quantiles);
    return st;
}
