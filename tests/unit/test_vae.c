/*
 * test_vae.c - the LightVAE network (engine/cpu/vae.c) against PyTorch, against finite
 * differences, and the outlier score's parts; the float32 SIMD inference path the CPU backend
 * serves with (engine/cpu/vae_f32.c, each ISA the CPU has) against that double reference, on
 * the fixture, on random networks of another shape, and on all 22 shared MIT-BIH records.
 *
 * tests/data/vae_fixture.bin was written by tests/gpu/make_vae_fixture.py (PyTorch 2.11, float64
 * on the CPU): weights, a batch of 8 beats, eps, and PyTorch's mu, logvar, reconstructions,
 * loss and every parameter gradient. The C network must match within 1e-5 relative.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/cpu.h"
#include "model.h"
#include "plan.h"

#define REL_TOL 1e-5
/* float32 inference against the double reference: latents, reconstruction terms and scores */
#define F32_REL_TOL 1e-4

struct fixture {
    struct ecg_vae_arch arch;
    uint32_t batch, n_weights;
    double kl_weight;
    double *weights, *x, *eps, *mu, *logvar, *recon, *recon_mu, *grad;
    double loss, recon_mse, kl;
    uint8_t *bytes;
};

static uint32_t rd_u32(const uint8_t **p)
{
    uint32_t v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
                 (uint32_t)(*p)[3] << 24;
    *p += 4;
    return v;
}

static double *rd_f64s(const uint8_t **p, const uint8_t *end, size_t n)
{
    assert_true((size_t)(end - *p) >= n * 8);
    double *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = 0;
        for (int b = 0; b < 8; b++)
            bits |= (uint64_t)(*p)[i * 8 + b] << (8 * b);
        memcpy(&v[i], &bits, 8);
    }
    *p += n * 8;
    return v;
}

static void fixture_load(struct fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(ECG_TEST_DATA "/vae_fixture.bin", "rb");
    assert_non_null(f);
    fx->bytes = malloc(1 << 20);
    assert_non_null(fx->bytes);
    size_t len = fread(fx->bytes, 1, 1 << 20, f);
    fclose(f);
    assert_true(len > 64);
    const uint8_t *p = fx->bytes, *end = fx->bytes + len;
    assert_memory_equal(p, "VAEFIX01", 8);
    p += 8;
    fx->arch.beat_len = rd_u32(&p);
    fx->arch.latent_dim = rd_u32(&p);
    for (int i = 0; i < 3; i++)
        fx->arch.enc[i] = rd_u32(&p);
    for (int i = 0; i < 3; i++)
        fx->arch.dec[i] = rd_u32(&p);
    fx->batch = rd_u32(&p);
    fx->n_weights = rd_u32(&p);
    double *klw = rd_f64s(&p, end, 1);
    fx->kl_weight = *klw;
    free(klw);
    size_t b = fx->batch, l = fx->arch.beat_len, z = fx->arch.latent_dim;
    fx->weights = rd_f64s(&p, end, fx->n_weights);
    fx->x = rd_f64s(&p, end, b * l);
    fx->eps = rd_f64s(&p, end, b * z);
    fx->mu = rd_f64s(&p, end, b * z);
    fx->logvar = rd_f64s(&p, end, b * z);
    fx->recon = rd_f64s(&p, end, b * l);
    fx->recon_mu = rd_f64s(&p, end, b * l);
    double *scalars = rd_f64s(&p, end, 3);
    fx->loss = scalars[0];
    fx->recon_mse = scalars[1];
    fx->kl = scalars[2];
    free(scalars);
    fx->grad = rd_f64s(&p, end, fx->n_weights);
    assert_ptr_equal(p, end);
}

static void fixture_free(struct fixture *fx)
{
    free(fx->weights);
    free(fx->x);
    free(fx->eps);
    free(fx->mu);
    free(fx->logvar);
    free(fx->recon);
    free(fx->recon_mu);
    free(fx->grad);
    free(fx->bytes);
}

/* A model with the fixture's architecture and weights (float32-representable: exact). */
static struct ecg_model *fixture_model(const struct fixture *fx)
{
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_create(&fx->arch, &params, &err);
    assert_non_null(m);
    for (size_t i = 0; i < fx->n_weights; i++) {
        m->weights[i] = (float)fx->weights[i];
        assert_true((double)m->weights[i] == fx->weights[i]);
    }
    return m;
}

/*
 * Every element within REL_TOL of the reference, relative to the element, with a floor of
 * 1e-3 of the tensor's largest magnitude for elements that are nearly zero. Returns the worst
 * relative error seen.
 */
static double check_close(const char *what, const double *got, const double *want, size_t n,
                          double tol)
{
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double denom = fmax(fabs(want[i]), 1e-3 * scale);
        double rel = denom > 0 ? fabs(got[i] - want[i]) / denom : fabs(got[i]);
        if (!(rel <= tol)) {
            print_error("%s[%zu]: got %.12g, want %.12g (rel %.3g)\n", what, i, got[i], want[i],
                        rel);
            fail();
        }
        worst = fmax(worst, rel);
    }
    return worst;
}

static void test_fixture_matches_pytorch(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_load(&fx);
    struct ecg_vae_arch def = ecg_vae_arch_default();
    assert_memory_equal(&fx.arch, &def, sizeof def);
    struct ecg_vae_layout ly;
    assert_true(ecg_vae_layout_init(&ly, &fx.arch));
    assert_int_equal(ly.n_weights, fx.n_weights);
    assert_int_equal(ly.n_weights, 1622);

    size_t b = fx.batch, l = fx.arch.beat_len, z = fx.arch.latent_dim;
    double *work = malloc(ecg_vae_work_len(&fx.arch) * sizeof *work);
    double *grad = calloc(ly.n_weights, sizeof *grad);
    double *mu = malloc(b * z * sizeof *mu), *lv = malloc(b * z * sizeof *lv);
    double *recon = malloc(b * l * sizeof *recon), *recon_mu = malloc(b * l * sizeof *recon_mu);
    double *mu2 = malloc(z * sizeof *mu2), *lv2 = malloc(z * sizeof *lv2);
    assert_true(work && grad && mu && lv && recon && recon_mu && mu2 && lv2);
    double loss = 0, mse_sum = 0, kl_sum = 0;
    for (size_t i = 0; i < b; i++) {
        double mse, kl;
        loss += ecg_vae_train_beat(&fx.arch, &ly, fx.weights, fx.x + i * l, fx.eps + i * z,
                                   fx.kl_weight, 1.0 / (double)b, grad, mu + i * z, lv + i * z,
                                   recon + i * l, &mse, &kl, work);
        mse_sum += mse;
        kl_sum += kl;
        /* the inference path gives the same mu, logvar, and decodes mu like PyTorch */
        ecg_vae_encode(&fx.arch, &ly, fx.weights, fx.x + i * l, mu2, lv2, work);
        for (size_t k = 0; k < z; k++) {
            assert_true(mu2[k] == mu[i * z + k]);
            assert_true(lv2[k] == lv[i * z + k]);
        }
        ecg_vae_decode(&fx.arch, &ly, fx.weights, mu2, recon_mu + i * l, work);
    }
    loss /= (double)b;
    double worst = 0;
    worst = fmax(worst, check_close("mu", mu, fx.mu, b * z, REL_TOL));
    worst = fmax(worst, check_close("logvar", lv, fx.logvar, b * z, REL_TOL));
    worst = fmax(worst, check_close("recon", recon, fx.recon, b * l, REL_TOL));
    worst = fmax(worst, check_close("recon_mu", recon_mu, fx.recon_mu, b * l, REL_TOL));
    worst = fmax(worst, check_close("grad", grad, fx.grad, ly.n_weights, REL_TOL));
    assert_true(fabs(loss - fx.loss) <= REL_TOL * fabs(fx.loss));
    assert_true(fabs(mse_sum / (double)b - fx.recon_mse) <= REL_TOL * fabs(fx.recon_mse));
    assert_true(fabs(kl_sum / (double)b - fx.kl) <= REL_TOL * fabs(fx.kl));
    /* in double precision the agreement is far tighter than the contract */
    assert_true(worst < 1e-8);
    print_message("worst relative difference to PyTorch: %.3g\n", worst);

    free(work);
    free(grad);
    free(mu);
    free(lv);
    free(recon);
    free(recon_mu);
    free(mu2);
    free(lv2);
    fixture_free(&fx);
}

/* The float model path (cpu_vae_score, ecg_model_decode) on the fixture's weights, which are
 * float32-representable. */
static void test_fixture_float_path(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_load(&fx);
    struct ecg_error err = {0};
    struct ecg_model *m = fixture_model(&fx);
    size_t b = fx.batch, l = fx.arch.beat_len, z = fx.arch.latent_dim;
    float *emb = malloc(b * l * sizeof *emb), *latent = malloc(b * z * sizeof *latent);
    float *score = malloc(b * sizeof *score), *rr = malloc(b * sizeof *rr);
    float *dec = malloc(b * l * sizeof *dec);
    uint8_t kept[8] = {1, 1, 1, 0, 1, 1, 1, 1}, outlier[8];
    assert_true(emb && latent && score && rr && dec && b == 8);
    for (size_t i = 0; i < b * l; i++)
        emb[i] = (float)fx.x[i];
    for (size_t i = 0; i < b; i++)
        rr[i] = i == 0 ? NAN : 800.0f;
    rr[5] = 560.0f; /* premature */
    assert_int_equal(cpu_vae_score(m, emb, kept, rr, b, latent, score, outlier, &err), ECG_OK);
    double *recon = malloc(b * sizeof *recon), *prem = malloc(b * sizeof *prem);
    assert_int_equal(ecg_vae_score_parts(m, emb, kept, rr, b, NULL, recon, prem, &err), ECG_OK);
    /* the recording level: median of the 7 kept beats' recon terms */
    double sorted[8] = {0}, scratch[8];
    size_t n_kept = 0;
    for (size_t i = 0; i < b; i++)
        if (kept[i])
            sorted[n_kept++] = recon[i];
    for (size_t i = 1; i < n_kept; i++)
        for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    double level = sorted[n_kept / 2];
    assert_true(isnan(recon[3]));
    assert_true(ecg_recon_level(recon, b, scratch) == level);
    for (size_t i = 0; i < b; i++) {
        if (!kept[i]) {
            assert_true(isnan(score[i]) && isnan(latent[i * z]) && outlier[i] == 0);
            continue;
        }
        for (size_t k = 0; k < z; k++)
            assert_true(fabs(latent[i * z + k] - fx.mu[i * z + k]) <=
                        1e-6 * fmax(fabs(fx.mu[i * z + k]), 1e-2));
        /* recon from PyTorch's recon_mu */
        double mse = 0;
        for (size_t t = 0; t < l; t++)
            mse += (fx.recon_mu[i * l + t] - fx.x[i * l + t]) *
                   (fx.recon_mu[i * l + t] - fx.x[i * l + t]);
        double want = log(mse / (double)l + 1e-6);
        assert_true(fabs(recon[i] - want) <= 1e-6 * fabs(want));
        double s = ecg_score_combine(&m->calib, recon[i], level, prem[i]);
        assert_true(fabs(score[i] - s) <= 1e-5 * fmax(1, fabs(s)));
        assert_int_equal(outlier[i], s > m->calib.threshold);
    }
    /* beat 5 is 30% premature: the neutral calibration adds 0.3 to its recon z-score */
    assert_true(fabs(prem[5] - 0.3) < 1e-6);
    assert_true(fabs(score[5] - (fmax(recon[5], recon[5] - level) + 0.3)) < 1e-5);
    assert_true(prem[0] == 0.0 && prem[1] == 0.0);

    /* decode of PyTorch's mu reproduces PyTorch's recon_mu */
    float *mus = malloc(b * z * sizeof *mus);
    assert_non_null(mus);
    for (size_t i = 0; i < b * z; i++)
        mus[i] = (float)fx.mu[i];
    assert_int_equal(ecg_model_decode(m, mus, b, dec, &err), ECG_OK);
    for (size_t i = 0; i < b * l; i++)
        assert_true(fabs(dec[i] - fx.recon_mu[i]) <= 1e-5 * fmax(fabs(fx.recon_mu[i]), 0.1));
    mus[3] = NAN;
    assert_int_equal(ecg_model_decode(m, mus, b, dec, &err), ECG_ERR_ARG);
    assert_string_equal(err.code, "bad_latent");

    free(mus);
    free(recon);
    free(prem);
    free(emb);
    free(latent);
    free(score);
    free(rr);
    free(dec);
    ecg_model_free(m);
    fixture_free(&fx);
}

/* A small deterministic generator for the tests (splitmix64). */
static uint64_t rng_state;
static double rng_uniform(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static double beat_loss(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                        const double *w, const double *x, const double *eps, double *grad,
                        double *work)
{
    return ecg_vae_train_beat(arch, ly, w, x, eps, 0.1, 1.0, grad, NULL, NULL, NULL, NULL, NULL,
                              work);
}

/* Central differences on every weight of a smaller architecture (L = 64, Z = 3) with random
 * weights, on two beats. */
static void test_finite_differences(void **state)
{
    (void)state;
    struct ecg_vae_arch arch = {.beat_len = 64, .latent_dim = 3, .enc = {3, 5, 6},
                                .dec = {4, 3, 2}};
    struct ecg_vae_layout ly;
    assert_true(ecg_vae_layout_init(&ly, &arch));
    size_t n = ly.n_weights, l = arch.beat_len;
    double *w = malloc(n * sizeof *w), *grad = calloc(n, sizeof *grad);
    double *scratch = calloc(n, sizeof *scratch);
    double *work = malloc(ecg_vae_work_len(&arch) * sizeof *work);
    double x[2][64], eps[2][3];
    assert_true(w && grad && scratch && work);
    rng_state = 7;
    for (size_t i = 0; i < n; i++)
        w[i] = (rng_uniform() - 0.5) * 0.8;
    for (int a = 0; a < 3; a++)
        w[ly.enc_alpha[a]] = 0.5 + rng_uniform();
    for (int a = 0; a < 2; a++)
        w[ly.dec_alpha[a]] = 0.5 + rng_uniform();
    for (int b = 0; b < 2; b++) {
        for (size_t t = 0; t < l; t++)
            x[b][t] = 3.0 * sin(0.2 * (double)t + b) + rng_uniform() - 0.5;
        for (int k = 0; k < 3; k++)
            eps[b][k] = 2.0 * rng_uniform() - 1.0;
    }
    for (int b = 0; b < 2; b++)
        beat_loss(&arch, &ly, w, x[b], eps[b], grad, work);

    size_t checked = 0;
    double gscale = 0;
    for (size_t i = 0; i < n; i++)
        gscale = fmax(gscale, fabs(grad[i]));
    for (size_t i = 0; i < n; i++) {
        const double h = 1e-5 * fmax(1.0, fabs(w[i]));
        double keep = w[i], lp = 0, lm = 0;
        w[i] = keep + h;
        for (int b = 0; b < 2; b++)
            lp += beat_loss(&arch, &ly, w, x[b], eps[b], scratch, work);
        w[i] = keep - h;
        for (int b = 0; b < 2; b++)
            lm += beat_loss(&arch, &ly, w, x[b], eps[b], scratch, work);
        w[i] = keep;
        double fd = (lp - lm) / (2 * h);
        double denom = fmax(fabs(grad[i]), 1e-4 * gscale);
        if (fabs(fd - grad[i]) > 1e-5 * denom) {
            print_error("weight %zu: analytic %.10g, finite difference %.10g\n", i, grad[i], fd);
            fail();
        }
        checked++;
    }
    assert_int_equal(checked, n);
    free(w);
    free(grad);
    free(scratch);
    free(work);
}

static void test_rr_prematurity(void **state)
{
    (void)state;
    float rr[9] = {NAN, 800, 810, 790, 500, 1100, 800, 805, 795};
    /* beat 4: neighbours 1..3 and 5..8 (window 4): median of 800 810 790 1100 800 805 795 */
    assert_true(fabs(ecg_rr_prematurity(rr, 9, 4, 4) - (800.0 - 500.0) / 800.0) < 1e-12);
    /* the compensatory pause is late, not premature */
    assert_true(ecg_rr_prematurity(rr, 9, 5, 4) < -0.3);
    assert_true(ecg_rr_prematurity(rr, 9, 0, 4) == 0.0);      /* no RR */
    /* beat 1 with window 1: neighbours 0 (NaN, skipped) and 2 */
    assert_true(fabs(ecg_rr_prematurity(rr, 9, 1, 1) - (810.0 - 800.0) / 810.0) < 1e-12);
    float lone[2] = {NAN, 700};
    assert_true(ecg_rr_prematurity(lone, 2, 1, 4) == 0.0);    /* no neighbour with an RR */
    assert_true(ecg_rr_prematurity(NULL, 2, 1, 4) == 0.0);

    struct ecg_score_calib c = {.recon_center = 1.0, .recon_scale = 2.0, .rel_center = 0.5,
                                .rel_scale = 0.5, .rr_center = 0.01, .rr_scale = 0.05,
                                .rr_weight = 0.5};
    /* z_abs = (5 - 1) / 2 = 2; z_rel = (5 - 4 - 0.5) / 0.5 = 1: the larger counts */
    assert_true(fabs(ecg_score_combine(&c, 5.0, 4.0, 0.01) - 2.0) < 1e-12);
    assert_true(fabs(ecg_score_combine(&c, 5.0, 4.0, -0.5) - 2.0) < 1e-12); /* late: no bonus */
    assert_true(fabs(ecg_score_combine(&c, 5.0, 4.0, 0.26) - (2.0 + 0.5 * 5.0)) < 1e-12);
    /* a beat far above its own recording's level: z_rel = (5 - 2 - 0.5) / 0.5 = 5 */
    assert_true(fabs(ecg_score_combine(&c, 5.0, 2.0, 0.01) - 5.0) < 1e-12);
    assert_true(fabs(ecg_score_combine(&c, 5.0, NAN, 0.01) - 2.0) < 1e-12); /* no level */
    assert_true(isnan(ecg_score_combine(&c, NAN, 4.0, 0.2)));
    double vals[5] = {3.0, NAN, 1.0, 2.0, 10.0}, scratch[5];
    assert_true(ecg_recon_level(vals, 5, scratch) == 2.5);
    assert_true(ecg_recon_level(vals, 3, scratch) == 2.0);
    assert_true(isnan(ecg_recon_level(vals + 1, 1, scratch)));
}

/* ---------------------------------------------------------------- float32 against double */

/* The double reference of cpu_vae_score: ecg_vae_score_parts, the level, ecg_score_combine. */
struct scored {
    float *latent, *score;
    double *recon;
    uint8_t *outlier;
};

static void scored_alloc(struct scored *r, size_t k, size_t z_dim)
{
    r->latent = malloc((k ? k : 1) * z_dim * sizeof *r->latent);
    r->score = malloc((k ? k : 1) * sizeof *r->score);
    r->recon = malloc((k ? k : 1) * sizeof *r->recon);
    r->outlier = malloc(k ? k : 1);
    assert_true(r->latent && r->score && r->recon && r->outlier);
}

static void scored_free(struct scored *r)
{
    free(r->latent);
    free(r->score);
    free(r->recon);
    free(r->outlier);
}

static void score_double(const struct ecg_model *m, const float *emb, const uint8_t *kept,
                         const float *rr, size_t k, struct scored *out)
{
    struct ecg_error err = {0};
    double *parts = malloc(3 * k * sizeof *parts);
    assert_non_null(parts);
    assert_int_equal(ecg_vae_score_parts(m, emb, kept, rr, k, out->latent, parts, parts + k, &err),
                     ECG_OK);
    double level = ecg_recon_level(parts, k, parts + 2 * k);
    for (size_t i = 0; i < k; i++) {
        double sc = kept[i] ? ecg_score_combine(&m->calib, parts[i], level, parts[k + i]) : NAN;
        out->recon[i] = parts[i];
        out->score[i] = (float)sc;
        out->outlier[i] = kept[i] && sc > m->calib.threshold;
    }
    free(parts);
}

/* The worst differences of float32 to double seen by a test. */
struct f32_worst {
    double latent, recon, score; /* relative: |f - d| / max(|d|, floor) */
    double latent_pure;          /* relative without a floor (latents only) */
    double gpu_latent, gpu_score; /* the share used of the CUDA parity suite's tolerance,
                                   * |f - d| <= max(1e-4 |d|, 1e-5) */
    size_t beats, flags, outliers;
};

/* Compares f (float32 path) to d (double) on k beats: values within F32_REL_TOL relative (to
 * the value, floored at 1e-2 for latents, 0.1 for reconstruction terms and 1 for scores, which
 * are z-scores), NaN exactly where d has NaN, identical outlier flags. */
static void compare_f32(const char *what, const struct scored *f, const struct scored *d,
                        const uint8_t *kept, size_t k, size_t z_dim, struct f32_worst *w)
{
    for (size_t i = 0; i < k; i++) {
        if (!kept[i]) {
            assert_true(isnan(f->score[i]) && isnan(f->recon[i]) && f->outlier[i] == 0);
            for (size_t z = 0; z < z_dim; z++)
                assert_true(isnan(f->latent[i * z_dim + z]));
            continue;
        }
        for (size_t z = 0; z < z_dim; z++) {
            double a = f->latent[i * z_dim + z], b = d->latent[i * z_dim + z];
            double rel = fabs(a - b) / fmax(fabs(b), 1e-2);
            if (!(rel <= F32_REL_TOL))
                fail_msg("%s: beat %zu latent %zu: float32 %.9g, double %.9g", what, i, z, a, b);
            w->latent = fmax(w->latent, rel);
            if (fabs(b) > 0)
                w->latent_pure = fmax(w->latent_pure, fabs(a - b) / fabs(b));
            w->gpu_latent = fmax(w->gpu_latent, fabs(a - b) / fmax(1e-4 * fabs(b), 1e-5));
        }
        /* recon is a logarithm: near 0 (an MSE near 1) its relative error means nothing */
        double rel = fabs(f->recon[i] - d->recon[i]) / fmax(fabs(d->recon[i]), 0.1);
        if (!(rel <= F32_REL_TOL))
            fail_msg("%s: beat %zu recon: float32 %.12g, double %.12g", what, i, f->recon[i],
                     d->recon[i]);
        w->recon = fmax(w->recon, rel);
        rel = fabs((double)f->score[i] - d->score[i]) / fmax(fabs(d->score[i]), 1.0);
        if (!(rel <= F32_REL_TOL))
            fail_msg("%s: beat %zu score: float32 %.9g, double %.9g", what, i, f->score[i],
                     d->score[i]);
        w->score = fmax(w->score, rel);
        w->gpu_score = fmax(w->gpu_score, fabs((double)f->score[i] - d->score[i]) /
                                              fmax(1e-4 * fabs(d->score[i]), 1e-5));
        if (f->outlier[i] != d->outlier[i])
            fail_msg("%s: beat %zu outlier flag: float32 %d, double %d (score %.9g, %.9g)", what,
                     i, f->outlier[i], d->outlier[i], f->score[i], d->score[i]);
        w->flags++;
        w->outliers += d->outlier[i];
        w->beats++;
    }
}

/* Every ISA this CPU can run, AUTO first. */
static size_t isas(enum cpu_vae_isa out[4])
{
    size_t n = 0;
    out[n++] = CPU_VAE_ISA_AUTO;
    out[n++] = CPU_VAE_ISA_GENERIC;
    if (cpu_vae_isa_available(CPU_VAE_ISA_AVX2))
        out[n++] = CPU_VAE_ISA_AVX2;
    if (cpu_vae_isa_available(CPU_VAE_ISA_AVX512))
        out[n++] = CPU_VAE_ISA_AVX512;
    return n;
}

/* Scores with the float32 path (one scratch reused over the calls) and checks it against the
 * double reference. */
static void check_f32(const char *what, const struct ecg_model *m, const float *emb,
                      const uint8_t *kept, const float *rr, size_t k, struct f32_worst *w)
{
    size_t z_dim = m->arch.latent_dim;
    struct scored d, f;
    scored_alloc(&d, k, z_dim);
    scored_alloc(&f, k, z_dim);
    score_double(m, emb, kept, rr, k, &d);
    enum cpu_vae_isa list[4];
    size_t n_isa = isas(list);
    struct cpu_vae_scratch scratch = {0};
    struct ecg_error err = {0};
    for (size_t a = 0; a < n_isa; a++) {
        assert_int_equal(cpu_vae_score_with(m, emb, kept, rr, k, list[a], &scratch, f.latent,
                                            f.recon, f.score, f.outlier, &err),
                         ECG_OK);
        compare_f32(what, &f, &d, kept, k, z_dim, w);
    }
    cpu_vae_scratch_fini(&scratch);
    scored_free(&d);
    scored_free(&f);
}

/* The fixture's network and beats: float32 within 1e-4 of double (in fact ~1e-6), on every ISA;
 * cpu_vae_score (AUTO, its own work area) gives the same as cpu_vae_score_with. */
static void test_f32_fixture(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_load(&fx);
    struct ecg_error err = {0};
    struct ecg_model *m = fixture_model(&fx);
    size_t b = fx.batch, l = fx.arch.beat_len, z = fx.arch.latent_dim;
    float *emb = malloc(b * l * sizeof *emb);
    float rr[8] = {NAN, 800, 790, 810, 805, 560, 800, 800};
    uint8_t kept[8] = {1, 1, 1, 0, 1, 1, 1, 1};
    assert_non_null(emb);
    for (size_t i = 0; i < b * l; i++)
        emb[i] = (float)fx.x[i];
    struct f32_worst w = {0};
    check_f32("fixture", m, emb, kept, rr, b, &w);
    enum cpu_vae_isa all[4];
    assert_int_equal(w.beats, 7 * isas(all));

    struct scored f, g;
    scored_alloc(&f, b, z);
    scored_alloc(&g, b, z);
    struct cpu_vae_scratch scratch = {0};
    assert_int_equal(cpu_vae_score(m, emb, kept, rr, b, f.latent, f.score, f.outlier, &err),
                     ECG_OK);
    assert_int_equal(cpu_vae_score_with(m, emb, kept, rr, b, CPU_VAE_ISA_AUTO, &scratch,
                                        g.latent, NULL, g.score, g.outlier, &err),
                     ECG_OK);
    assert_memory_equal(f.latent, g.latent, b * z * sizeof *f.latent);
    assert_memory_equal(f.score, g.score, b * sizeof *f.score);
    assert_memory_equal(f.outlier, g.outlier, b);
    print_message("float32 vs double on the fixture: latent %.2g, recon %.2g, score %.2g "
                  "(relative)\n", w.latent, w.recon, w.score);
    cpu_vae_scratch_fini(&scratch);
    cpu_vae_scratch_fini(NULL);
    scored_free(&f);
    scored_free(&g);
    free(emb);
    ecg_model_free(m);
    fixture_free(&fx);
}

/*
 * Random networks of another shape (L = 64, Z = 3, odd widths: the unpaired input row of the
 * convolutions), random beats of which some are not kept, k not a multiple of the 8 lanes.
 * Then the lanes' independence: each beat scored alone, or in a request of another size, gets
 * bit for bit the same latent and reconstruction term as in the whole request (with AVX-512,
 * alone means the 8-lane kernel and in the request the 16-lane one).
 */
static void test_f32_other_shape(void **state)
{
    (void)state;
    struct ecg_vae_arch arch = {.beat_len = 64, .latent_dim = 3, .enc = {3, 5, 7},
                                .dec = {5, 3, 3}};
    struct ecg_params params = ecg_params_default();
    params.beat_len = arch.beat_len;
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_create(&arch, &params, &err);
    assert_non_null(m);
    const size_t k = 21, l = arch.beat_len, z_dim = arch.latent_dim;
    float *emb = malloc(k * l * sizeof *emb), rr[21];
    uint8_t kept[21];
    assert_non_null(emb);
    struct f32_worst w = {0};
    rng_state = 99;
    for (int trial = 0; trial < 4; trial++) {
        for (size_t i = 0; i < m->layout.n_weights; i++)
            m->weights[i] = (float)((rng_uniform() - 0.5) * 0.8);
        for (int a = 0; a < 3; a++)
            m->weights[m->layout.enc_alpha[a]] = (float)(0.5 + rng_uniform());
        for (int a = 0; a < 2; a++)
            m->weights[m->layout.dec_alpha[a]] = (float)(0.5 + rng_uniform());
        for (size_t i = 0; i < k; i++) {
            kept[i] = rng_uniform() > 0.2;
            rr[i] = (float)(600 + 400 * rng_uniform());
            for (size_t t = 0; t < l; t++)
                emb[i * l + t] =
                    (float)(3.0 * sin(0.2 * (double)t + (double)i) + rng_uniform() - 0.5);
        }
        check_f32("other shape", m, emb, kept, rr, k, &w);
    }
    assert_true(w.beats > 40);

    size_t n_kept = 0;
    for (size_t i = 0; i < k; i++)
        n_kept += kept[i];
    assert_true(n_kept > 8); /* a group wider than 8 lanes where the CPU has them */
    struct scored all, one;
    scored_alloc(&all, k, z_dim);
    scored_alloc(&one, k, z_dim);
    struct cpu_vae_scratch scratch = {0};
    assert_int_equal(cpu_vae_score_with(m, emb, kept, rr, k, CPU_VAE_ISA_AUTO, &scratch,
                                        all.latent, all.recon, NULL, NULL, &err),
                     ECG_OK);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(cpu_vae_score_with(m, emb + i * l, kept + i, rr + i, 1, CPU_VAE_ISA_AUTO,
                                            &scratch, one.latent, one.recon, NULL, NULL, &err),
                         ECG_OK);
        if (!kept[i])
            continue;
        assert_memory_equal(one.latent, all.latent + i * z_dim, z_dim * sizeof *one.latent);
        assert_memory_equal(one.recon, all.recon + i, sizeof *one.recon);
    }
    /* the last 13 beats as a request of their own: other groups, same values */
    assert_int_equal(cpu_vae_score_with(m, emb + 8 * l, kept + 8, rr + 8, k - 8, CPU_VAE_ISA_AUTO,
                                        &scratch, one.latent, one.recon, NULL, NULL, &err),
                     ECG_OK);
    for (size_t i = 8; i < k; i++)
        if (kept[i])
            assert_memory_equal(one.recon + (i - 8), all.recon + i, sizeof *one.recon);
    /* an empty request writes nothing and succeeds; missing inputs are refused */
    assert_int_equal(cpu_vae_score_with(m, emb, kept, rr, 0, CPU_VAE_ISA_AUTO, &scratch, NULL,
                                        NULL, NULL, NULL, &err),
                     ECG_OK);
    assert_int_equal(cpu_vae_score_with(m, NULL, kept, rr, 3, CPU_VAE_ISA_AUTO, &scratch, NULL,
                                        NULL, NULL, NULL, &err),
                     ECG_ERR_ARG);
    print_message("float32 vs double, other shape: latent %.2g, recon %.2g, score %.2g\n",
                  w.latent, w.recon, w.score);
    cpu_vae_scratch_fini(&scratch);
    scored_free(&all);
    scored_free(&one);
    free(emb);
    ecg_model_free(m);
}

/* The float32 decoder against the double one, on every ISA, on a grid of latent points. */
static void test_f32_decode(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_load("models/default.ecgm", &err);
    assert_non_null(m);
    const size_t n = 11, l = m->arch.beat_len, z_dim = m->arch.latent_dim;
    float *latent = malloc(n * z_dim * sizeof *latent), *out = malloc(n * l * sizeof *out);
    double *work = malloc(ecg_vae_work_len(&m->arch) * sizeof *work);
    double *w = malloc(m->layout.n_weights * sizeof *w), zd[64], ref[4096];
    assert_true(latent && out && work && w && z_dim <= 64 && l <= 4096);
    for (size_t i = 0; i < m->layout.n_weights; i++)
        w[i] = m->weights[i];
    for (size_t i = 0; i < n * z_dim; i++)
        latent[i] = (float)(-3.0 + 6.0 * (double)((i * 7) % 23) / 22.0);
    enum cpu_vae_isa list[4];
    size_t n_isa = isas(list);
    double worst = 0;
    for (size_t a = 0; a < n_isa; a++) {
        assert_int_equal(cpu_vae_decode_with(m, latent, n, list[a], out, &err), ECG_OK);
        for (size_t i = 0; i < n; i++) {
            double scale = 0;
            for (size_t z = 0; z < z_dim; z++)
                zd[z] = latent[i * z_dim + z];
            ecg_vae_decode(&m->arch, &m->layout, w, zd, ref, work);
            for (size_t t = 0; t < l; t++)
                scale = fmax(scale, fabs(ref[t]));
            for (size_t t = 0; t < l; t++) {
                double d = fabs(out[i * l + t] - ref[t]) / scale;
                assert_true(d <= F32_REL_TOL);
                worst = fmax(worst, d);
            }
        }
    }
    print_message("float32 vs double decoder: %.2g of the beat's peak\n", worst);
    free(latent);
    free(out);
    free(work);
    free(w);
    ecg_model_free(m);
}

static const char *const mitdb_records[] = {
    "101", "106", "108", "109", "112", "114", "115", "116", "118", "119", "122",
    "124", "201", "203", "205", "207", "208", "209", "215", "220", "223", "230"};

/*
 * The shipped model on all 22 shared MIT-BIH records (30 minutes each), beats from the CPU
 * pipeline: float32 latents and scores within 1e-4 of double, and the same outlier flags.
 */
static void test_f32_mitdb(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_load("models/default.ecgm", &err);
    assert_non_null(m);
    struct f32_worst w = {0};
    size_t n_rec = sizeof mitdb_records / sizeof mitdb_records[0];
    for (size_t r = 0; r < n_rec; r++) {
        char path[256];
        struct ecg_signal sig = {0};
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
        snprintf(path, sizeof path, "%s/mitdb/%s", ECG_SHARED_DATA, mitdb_records[r]);
        assert_int_equal(ecg_read_file(path, &opts, &sig, &err), ECG_OK);
        struct ecg_plan plan;
        assert_int_equal(ecg_plan_init(&plan, &m->params, sig.fs_hz, &err), ECG_OK);
        size_t n_a = ecg_plan_resampled_len(&plan, sig.n), k = 0;
        float *y = malloc(n_a * sizeof *y), *f = malloc(n_a * sizeof *f);
        int64_t *peaks_a = NULL, *peaks_in = NULL;
        assert_true(y && f);
        assert_int_equal(cpu_resample(&plan, sig.samples, sig.n, y, &err), ECG_OK);
        assert_int_equal(cpu_filter(&plan, y, n_a, f, &err), ECG_OK);
        assert_int_equal(cpu_detect(&plan, sig.samples, sig.n, y, f, n_a, &peaks_a, &peaks_in,
                                    &k, &err),
                         ECG_OK);
        assert_true(k > 1000);
        int64_t *onset = malloc(k * sizeof *onset), *end = malloc(k * sizeof *end);
        float *rr = malloc(k * sizeof *rr), *emb = malloc(k * plan.beat_len * sizeof *emb);
        uint8_t *kept = malloc(k);
        assert_true(onset && end && rr && emb && kept);
        cpu_segment(&plan, peaks_a, peaks_in, k, n_a, sig.n, onset, end, rr, kept);
        assert_int_equal(cpu_embed(&plan, y, n_a, peaks_a, kept, k, emb, &err), ECG_OK);
        check_f32(mitdb_records[r], m, emb, kept, rr, k, &w);
        free(onset);
        free(end);
        free(rr);
        free(emb);
        free(kept);
        free(peaks_a);
        free(peaks_in);
        free(y);
        free(f);
        ecg_plan_fini(&plan);
        ecg_signal_free(&sig);
    }
    enum cpu_vae_isa all[4];
    print_message("float32 vs double on %zu records, %zu ISAs (auto: %s): %zu beat scorings, "
                  "%zu outlier flags identical (%zu outliers); worst relative difference: latent "
                  "%.2g (%.2g without a floor), recon %.2g, score %.2g; share of the CUDA parity "
                  "tolerance used: latent %.3f, score %.3f\n",
                  n_rec, isas(all), cpu_vae_isa_name(CPU_VAE_ISA_AUTO), w.beats, w.flags,
                  w.outliers, w.latent, w.latent_pure, w.recon, w.score, w.gpu_latent,
                  w.gpu_score);
    assert_true(w.beats > 22 * 1000 * 2);
    assert_true(w.outliers > 0);
    ecg_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_matches_pytorch),
        cmocka_unit_test(test_fixture_float_path),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_rr_prematurity),
        cmocka_unit_test(test_f32_fixture),
        cmocka_unit_test(test_f32_other_shape),
        cmocka_unit_test(test_f32_decode),
        cmocka_unit_test(test_f32_mitdb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
