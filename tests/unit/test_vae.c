/*
 * test_vae.c - the LightVAE network (engine/cpu/vae.c) against PyTorch, against finite
 * differences, and the outlier score's parts.
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

#define REL_TOL 1e-5

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
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_create(&fx.arch, &params, &err);
    assert_non_null(m);
    for (size_t i = 0; i < fx.n_weights; i++) {
        m->weights[i] = (float)fx.weights[i];
        assert_true((double)m->weights[i] == fx.weights[i]);
    }
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_matches_pytorch),
        cmocka_unit_test(test_fixture_float_path),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_rr_prematurity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
