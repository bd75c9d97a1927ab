/*
 * vae.c - the LightVAE network on the CPU (forward and backward) and the outlier score.
 *
 * The reference implementation of the network described in engine/model.h. Everything is
 * computed in double precision, one beat at a time, in a caller-provided work area, so that
 * training and scoring are deterministic, thread-safe (one work area per thread) and match a
 * float64 PyTorch implementation of the same network to ~1e-12 (tests/unit/test_vae.c).
 * It serves the trainer and its calibration, and is the oracle of the float32 SIMD inference
 * path (vae_f32.c), which the CPU backend serves with and the CUDA backend is tested against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "model.h"

/* ---------------------------------------------------------------- layers */

/*
 * conv3 forward: out[o][t] = b[o] + sum_i sum_k w[o][i][k] * in[i][t + k - 1], zero outside
 * [0, t_len). t_len >= 2. The inner loops run branch-free over t so that they vectorise.
 */
static void conv3_fwd(const double *in, size_t cin, size_t t_len, const double *w,
                      const double *b, size_t cout, double *out)
{
    for (size_t o = 0; o < cout; o++) {
        double *y = out + o * t_len;
        for (size_t t = 0; t < t_len; t++)
            y[t] = b[o];
        for (size_t i = 0; i < cin; i++) {
            const double *x = in + i * t_len;
            const double *wk = w + (o * cin + i) * 3;
            const double w0 = wk[0], w1 = wk[1], w2 = wk[2];
            y[0] += w1 * x[0] + w2 * x[1];
            for (size_t t = 1; t + 1 < t_len; t++)
                y[t] += w0 * x[t - 1] + w1 * x[t] + w2 * x[t + 1];
            y[t_len - 1] += w0 * x[t_len - 2] + w1 * x[t_len - 1];
        }
    }
}

/* Dot product of n terms with four partial sums (a fixed order, so results are reproducible). */
static double dot(const double *a, const double *b, size_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += a[j] * b[j];
        s1 += a[j + 1] * b[j + 1];
        s2 += a[j + 2] * b[j + 2];
        s3 += a[j + 3] * b[j + 3];
    }
    for (; j < n; j++)
        s0 += a[j] * b[j];
    return (s0 + s1) + (s2 + s3);
}

/*
 * conv3 backward: given gout (cout x t_len), accumulates gw, gb and, when gin is not NULL, the
 * gradient with respect to the input, gin (cin x t_len).
 */
static void conv3_bwd(const double *in, size_t cin, size_t t_len, const double *w, size_t cout,
                      const double *gout, double *gw, double *gb, double *gin)
{
    for (size_t o = 0; o < cout; o++) {
        const double *g = gout + o * t_len;
        double sum = 0;
        for (size_t t = 0; t < t_len; t++)
            sum += g[t];
        gb[o] += sum;
        for (size_t i = 0; i < cin; i++) {
            const double *x = in + i * t_len;
            const double *wk = w + (o * cin + i) * 3;
            double *gwk = gw + (o * cin + i) * 3;
            gwk[0] += dot(g + 1, x, t_len - 1);
            gwk[1] += dot(g, x, t_len);
            gwk[2] += dot(g, x + 1, t_len - 1);
            if (!gin)
                continue;
            double *gx = gin + i * t_len;
            const double w0 = wk[0], w1 = wk[1], w2 = wk[2];
            gx[0] += w0 * g[1] + w1 * g[0];
            for (size_t t = 1; t + 1 < t_len; t++)
                gx[t] += w0 * g[t + 1] + w1 * g[t] + w2 * g[t - 1];
            gx[t_len - 1] += w1 * g[t_len - 1] + w2 * g[t_len - 2];
        }
    }
}

/* Nearest-neighbour upsampling by 2 of c rows of t_in values. */
static void up2_fwd(const double *in, size_t c, size_t t_in, double *out)
{
    for (size_t j = 0; j < c * t_in; j++) {
        out[2 * j] = in[j];
        out[2 * j + 1] = in[j];
    }
}

/* Its transpose: gin[j] = gout[2j] + gout[2j + 1]. */
static void up2_bwd(const double *gout, size_t c, size_t t_in, double *gin)
{
    for (size_t j = 0; j < c * t_in; j++)
        gin[j] = gout[2 * j] + gout[2 * j + 1];
}

/* swish: s = a * sigmoid(alpha * a), n values; keeps the sigmoids in sg for the backward. */
static void swish_fwd(const double *a, size_t n, double alpha, double *s, double *sg)
{
    for (size_t j = 0; j < n; j++) {
        sg[j] = 1.0 / (1.0 + exp(-alpha * a[j]));
        s[j] = a[j] * sg[j];
    }
}

/* swish backward: ga = gs * ds/da; returns sum of gs * ds/dalpha. */
static double swish_bwd(const double *a, const double *sg, size_t n, double alpha,
                        const double *gs, double *ga)
{
    double galpha = 0;
    for (size_t j = 0; j < n; j++) {
        double d = sg[j] * (1 - sg[j]);
        ga[j] = gs[j] * (sg[j] + alpha * a[j] * d);
        galpha += gs[j] * a[j] * a[j] * d;
    }
    return galpha;
}

/* blur/2: out[c][t] = in[c][2t-1]/4 + in[c][2t]/2 + in[c][2t+1]/4 (zero padding), T even. */
static void blur_fwd(const double *in, size_t c, size_t t_in, double *out)
{
    size_t t_out = t_in / 2;
    for (size_t ch = 0; ch < c; ch++) {
        const double *x = in + ch * t_in;
        double *y = out + ch * t_out;
        y[0] = 0.5 * x[0] + 0.25 * x[1];
        for (size_t t = 1; t < t_out; t++)
            y[t] = 0.25 * x[2 * t - 1] + 0.5 * x[2 * t] + 0.25 * x[2 * t + 1];
    }
}

/* blur/2 backward: gin (c x t_in) = transpose of the blur applied to gout. */
static void blur_bwd(const double *gout, size_t c, size_t t_in, double *gin)
{
    size_t t_out = t_in / 2;
    for (size_t ch = 0; ch < c; ch++) {
        const double *g = gout + ch * t_out;
        double *gx = gin + ch * t_in;
        gx[0] = 0.5 * g[0];
        for (size_t t = 0; t + 1 < t_out; t++) {
            gx[2 * t + 1] = 0.25 * (g[t] + g[t + 1]);
            gx[2 * t + 2] = 0.5 * g[t + 1];
        }
        gx[t_in - 1] = 0.25 * g[t_out - 1];
    }
}

/* ---------------------------------------------------------------- activations */

/* The activations of one beat, carved out of a work area. */
struct acts {
    double *a[3], *sg[3], *s[3], *b[3]; /* encoder: conv out, sigmoids, swish out, blur out */
    double *hm, *hl;                    /* head outputs before the mean, Z x T3 each */
    double *h0;                         /* decoder input, d0 x T3 */
    double *u[3];                       /* upsampled inputs of the decoder convolutions */
    double *da[2], *dsg[2], *ds[2];     /* decoder conv outs, sigmoids, swish outs */
    double *out;                        /* L */
    double *z;                          /* Z */
};

static size_t enc_len(const struct ecg_vae_arch *arch, int l)
{
    return (size_t)arch->beat_len >> l; /* conv l runs at L / 2^l */
}

/* Carves one set of activations from p (NULL: only count); returns the doubles used. */
static size_t acts_carve(const struct ecg_vae_arch *arch, double *p, struct acts *ac)
{
    size_t used = 0;
    size_t l_len = arch->beat_len, t3 = l_len / 8;
#define CARVE(dst, count)                        \
    do {                                         \
        (dst) = p ? p + used : NULL;             \
        used += (count);                         \
    } while (0)
    for (int l = 0; l < 3; l++) {
        CARVE(ac->a[l], arch->enc[l] * enc_len(arch, l));
        CARVE(ac->sg[l], arch->enc[l] * enc_len(arch, l));
        CARVE(ac->s[l], arch->enc[l] * enc_len(arch, l));
        CARVE(ac->b[l], arch->enc[l] * enc_len(arch, l + 1));
    }
    CARVE(ac->hm, arch->latent_dim * t3);
    CARVE(ac->hl, arch->latent_dim * t3);
    CARVE(ac->h0, arch->dec[0] * t3);
    CARVE(ac->u[0], arch->dec[0] * (l_len / 4));
    CARVE(ac->da[0], arch->dec[1] * (l_len / 4));
    CARVE(ac->dsg[0], arch->dec[1] * (l_len / 4));
    CARVE(ac->ds[0], arch->dec[1] * (l_len / 4));
    CARVE(ac->u[1], arch->dec[1] * (l_len / 2));
    CARVE(ac->da[1], arch->dec[2] * (l_len / 2));
    CARVE(ac->dsg[1], arch->dec[2] * (l_len / 2));
    CARVE(ac->ds[1], arch->dec[2] * (l_len / 2));
    CARVE(ac->u[2], arch->dec[2] * l_len);
    CARVE(ac->out, l_len);
    CARVE(ac->z, arch->latent_dim);
#undef CARVE
    return used;
}

size_t ecg_vae_work_len(const struct ecg_vae_arch *arch)
{
    struct acts ac;
    /* forward activations, and the same again for their gradients, plus mu/logvar grads */
    return 2 * acts_carve(arch, NULL, &ac) + 4 * (size_t)arch->latent_dim;
}

static void encode_acts(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                        const double *w, const double *x, struct acts *ac, double *mu,
                        double *logvar)
{
    const double *in = x;
    size_t cin = 1;
    for (int l = 0; l < 3; l++) {
        size_t t = enc_len(arch, l), c = arch->enc[l];
        conv3_fwd(in, cin, t, w + ly->enc_w[l], w + ly->enc_b[l], c, ac->a[l]);
        swish_fwd(ac->a[l], c * t, w[ly->enc_alpha[l]], ac->s[l], ac->sg[l]);
        blur_fwd(ac->s[l], c, t, ac->b[l]);
        in = ac->b[l];
        cin = c;
    }
    size_t z_dim = arch->latent_dim, t3 = arch->beat_len / 8;
    conv3_fwd(in, cin, t3, w + ly->mu_w, w + ly->mu_b, z_dim, ac->hm);
    conv3_fwd(in, cin, t3, w + ly->logvar_w, w + ly->logvar_b, z_dim, ac->hl);
    for (size_t z = 0; z < z_dim; z++) {
        double sm = 0, sl = 0;
        for (size_t t = 0; t < t3; t++) {
            sm += ac->hm[z * t3 + t];
            sl += ac->hl[z * t3 + t];
        }
        mu[z] = sm / (double)t3;
        logvar[z] = sl / (double)t3;
    }
}

static void decode_acts(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                        const double *w, const double *z, struct acts *ac)
{
    size_t z_dim = arch->latent_dim, l_len = arch->beat_len, t3 = l_len / 8;
    size_t fc_out = arch->dec[0] * t3;
    const double *fw = w + ly->fc_w, *fb = w + ly->fc_b;
    for (size_t j = 0; j < fc_out; j++) {
        double v = fb[j];
        for (size_t k = 0; k < z_dim; k++)
            v += fw[j * z_dim + k] * z[k];
        ac->h0[j] = v;
    }
    up2_fwd(ac->h0, arch->dec[0], t3, ac->u[0]);
    conv3_fwd(ac->u[0], arch->dec[0], l_len / 4, w + ly->dec_w[0], w + ly->dec_b[0],
              arch->dec[1], ac->da[0]);
    swish_fwd(ac->da[0], arch->dec[1] * (l_len / 4), w[ly->dec_alpha[0]], ac->ds[0],
              ac->dsg[0]);
    up2_fwd(ac->ds[0], arch->dec[1], l_len / 4, ac->u[1]);
    conv3_fwd(ac->u[1], arch->dec[1], l_len / 2, w + ly->dec_w[1], w + ly->dec_b[1],
              arch->dec[2], ac->da[1]);
    swish_fwd(ac->da[1], arch->dec[2] * (l_len / 2), w[ly->dec_alpha[1]], ac->ds[1],
              ac->dsg[1]);
    up2_fwd(ac->ds[1], arch->dec[2], l_len / 2, ac->u[2]);
    conv3_fwd(ac->u[2], arch->dec[2], l_len, w + ly->dec_w[2], w + ly->dec_b[2], 1, ac->out);
}

void ecg_vae_encode(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *layout,
                    const double *w, const double *x, double *mu, double *logvar, double *work)
{
    struct acts ac;
    acts_carve(arch, work, &ac);
    encode_acts(arch, layout, w, x, &ac, mu, logvar);
}

void ecg_vae_decode(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *layout,
                    const double *w, const double *z, double *out, double *work)
{
    struct acts ac;
    acts_carve(arch, work, &ac);
    decode_acts(arch, layout, w, z, &ac);
    memcpy(out, ac.out, arch->beat_len * sizeof *out);
}

double ecg_vae_train_beat(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                          const double *w, const double *x, const double *eps, double kl_weight,
                          double scale, double *grad, double *mu_out, double *logvar_out,
                          double *out, double *recon_mse, double *kl_out, double *work)
{
    struct acts ac, gr;
    size_t used = acts_carve(arch, work, &ac);
    used += acts_carve(arch, work + used, &gr);
    size_t z_dim = arch->latent_dim, l_len = arch->beat_len, t3 = l_len / 8;
    double *mu = work + used, *logvar = mu + z_dim, *g_mu = logvar + z_dim, *g_lv = g_mu + z_dim;

    encode_acts(arch, ly, w, x, &ac, mu, logvar);
    for (size_t k = 0; k < z_dim; k++)
        ac.z[k] = mu[k] + exp(0.5 * logvar[k]) * eps[k];
    decode_acts(arch, ly, w, ac.z, &ac);

    double mse = 0, kl = 0;
    for (size_t t = 0; t < l_len; t++) {
        double d = ac.out[t] - x[t];
        mse += d * d;
        gr.out[t] = scale * 2.0 * d / (double)l_len;
    }
    mse /= (double)l_len;
    for (size_t k = 0; k < z_dim; k++)
        kl += -0.5 * (1.0 + logvar[k] - mu[k] * mu[k] - exp(logvar[k]));

    /* decoder, last layer first */
    size_t d0 = arch->dec[0], d1 = arch->dec[1], d2 = arch->dec[2];
    memset(gr.u[2], 0, d2 * l_len * sizeof(double));
    conv3_bwd(ac.u[2], d2, l_len, w + ly->dec_w[2], 1, gr.out, grad + ly->dec_w[2],
              grad + ly->dec_b[2], gr.u[2]);
    up2_bwd(gr.u[2], d2, l_len / 2, gr.ds[1]);
    grad[ly->dec_alpha[1]] += swish_bwd(ac.da[1], ac.dsg[1], d2 * (l_len / 2),
                                        w[ly->dec_alpha[1]], gr.ds[1], gr.da[1]);
    memset(gr.u[1], 0, d1 * (l_len / 2) * sizeof(double));
    conv3_bwd(ac.u[1], d1, l_len / 2, w + ly->dec_w[1], d2, gr.da[1], grad + ly->dec_w[1],
              grad + ly->dec_b[1], gr.u[1]);
    up2_bwd(gr.u[1], d1, l_len / 4, gr.ds[0]);
    grad[ly->dec_alpha[0]] += swish_bwd(ac.da[0], ac.dsg[0], d1 * (l_len / 4),
                                        w[ly->dec_alpha[0]], gr.ds[0], gr.da[0]);
    memset(gr.u[0], 0, d0 * (l_len / 4) * sizeof(double));
    conv3_bwd(ac.u[0], d0, l_len / 4, w + ly->dec_w[0], d1, gr.da[0], grad + ly->dec_w[0],
              grad + ly->dec_b[0], gr.u[0]);
    up2_bwd(gr.u[0], d0, t3, gr.h0);
    size_t fc_out = d0 * t3;
    const double *fw = w + ly->fc_w;
    for (size_t k = 0; k < z_dim; k++)
        gr.z[k] = 0;
    for (size_t j = 0; j < fc_out; j++) {
        grad[ly->fc_b + j] += gr.h0[j];
        for (size_t k = 0; k < z_dim; k++) {
            grad[ly->fc_w + j * z_dim + k] += gr.h0[j] * ac.z[k];
            gr.z[k] += fw[j * z_dim + k] * gr.h0[j];
        }
    }

    /* reparameterisation and KL */
    for (size_t k = 0; k < z_dim; k++) {
        double sd = exp(0.5 * logvar[k]);
        g_mu[k] = gr.z[k] + scale * kl_weight * mu[k];
        g_lv[k] = gr.z[k] * eps[k] * 0.5 * sd + scale * kl_weight * 0.5 * (exp(logvar[k]) - 1);
    }

    /* heads: the mean over time spreads each gradient evenly */
    for (size_t k = 0; k < z_dim; k++)
        for (size_t t = 0; t < t3; t++) {
            gr.hm[k * t3 + t] = g_mu[k] / (double)t3;
            gr.hl[k * t3 + t] = g_lv[k] / (double)t3;
        }
    size_t e2 = arch->enc[2];
    memset(gr.b[2], 0, e2 * t3 * sizeof(double));
    conv3_bwd(ac.b[2], e2, t3, w + ly->mu_w, z_dim, gr.hm, grad + ly->mu_w, grad + ly->mu_b,
              gr.b[2]);
    conv3_bwd(ac.b[2], e2, t3, w + ly->logvar_w, z_dim, gr.hl, grad + ly->logvar_w,
              grad + ly->logvar_b, gr.b[2]);

    /* encoder, last layer first */
    for (int l = 2; l >= 0; l--) {
        size_t t = enc_len(arch, l), c = arch->enc[l];
        blur_bwd(gr.b[l], c, t, gr.s[l]);
        grad[ly->enc_alpha[l]] +=
            swish_bwd(ac.a[l], ac.sg[l], c * t, w[ly->enc_alpha[l]], gr.s[l], gr.a[l]);
        const double *in = l > 0 ? ac.b[l - 1] : x;
        size_t cin = l > 0 ? arch->enc[l - 1] : 1;
        double *gin = NULL;
        if (l > 0) {
            gin = gr.b[l - 1];
            memset(gin, 0, cin * t * sizeof(double));
        }
        conv3_bwd(in, cin, t, w + ly->enc_w[l], c, gr.a[l], grad + ly->enc_w[l],
                  grad + ly->enc_b[l], gin);
    }

    if (mu_out)
        memcpy(mu_out, mu, z_dim * sizeof *mu);
    if (logvar_out)
        memcpy(logvar_out, logvar, z_dim * sizeof *logvar);
    if (out)
        memcpy(out, ac.out, l_len * sizeof *out);
    if (recon_mse)
        *recon_mse = mse;
    if (kl_out)
        *kl_out = kl;
    return mse + kl_weight * kl;
}

/* ---------------------------------------------------------------- score */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ecg_rr_local_median(const float *rr_ms, size_t k, size_t i, uint32_t window)
{
    double near[128];
    size_t n = 0;
    if (!rr_ms || window == 0 || window > 64 || i >= k)
        return NAN;
    size_t lo = i > window ? i - window : 0;
    size_t hi = i + window < k ? i + window : k - 1;
    for (size_t j = lo; j <= hi; j++)
        if (j != i && rr_ms[j] > 0 && isfinite(rr_ms[j]))
            near[n++] = rr_ms[j];
    if (n == 0)
        return NAN;
    /* at most 128 values, called for every beat: an insertion sort beats qsort's calls */
    for (size_t a = 1; a < n; a++) {
        double v = near[a];
        size_t b = a;
        for (; b > 0 && near[b - 1] > v; b--)
            near[b] = near[b - 1];
        near[b] = v;
    }
    return n % 2 ? near[n / 2] : 0.5 * (near[n / 2 - 1] + near[n / 2]);
}

double ecg_rr_prematurity(const float *rr_ms, size_t k, size_t i, uint32_t window)
{
    if (!rr_ms || i >= k || !(rr_ms[i] > 0) || !isfinite(rr_ms[i]))
        return 0.0;
    double m = ecg_rr_local_median(rr_ms, k, i, window);
    return isnan(m) ? 0.0 : (m - rr_ms[i]) / m;
}

double ecg_score_combine(const struct ecg_score_calib *calib, double recon, double level,
                         double prem)
{
    double z_abs = (recon - calib->recon_center) / calib->recon_scale;
    double z_rel = (recon - level - calib->rel_center) / calib->rel_scale;
    double z_rr = (prem - calib->rr_center) / calib->rr_scale;
    double z = z_rel > z_abs ? z_rel : z_abs; /* NaN level: z_abs alone */
    if (isnan(recon))
        return NAN;
    return z + calib->rr_weight * (z_rr > 0 ? z_rr : 0);
}

double ecg_recon_level(const double *recon, size_t n, double *scratch)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(recon[i]))
            scratch[m++] = recon[i];
    if (m == 0)
        return NAN;
    qsort(scratch, m, sizeof *scratch, cmp_double);
    return m % 2 ? scratch[m / 2] : 0.5 * (scratch[m / 2 - 1] + scratch[m / 2]);
}

/* Converts the model's float weights to doubles; NULL when out of memory. */
static double *weights_double(const struct ecg_model *model)
{
    double *w = malloc(model->layout.n_weights * sizeof *w);
    if (w)
        for (size_t i = 0; i < model->layout.n_weights; i++)
            w[i] = model->weights[i];
    return w;
}

enum ecg_status ecg_vae_score_parts(const struct ecg_model *model, const float *emb,
                                    const uint8_t *kept, const float *rr_ms, size_t k,
                                    float *latent, double *recon, double *prem,
                                    struct ecg_error *err)
{
    const struct ecg_vae_arch *arch = &model->arch;
    size_t l_len = arch->beat_len, z_dim = arch->latent_dim;
    enum ecg_status st = ECG_OK;
    double *w = weights_double(model);
    double *work = malloc((ecg_vae_work_len(arch) + 2 * l_len + 2 * z_dim) * sizeof *work);
    if (!w || !work) {
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate VAE work areas");
        goto out;
    }
    double *x = work + ecg_vae_work_len(arch), *r = x + l_len, *mu = r + l_len, *lv = mu + z_dim;
    for (size_t i = 0; i < k; i++) {
        if (prem)
            prem[i] = ecg_rr_prematurity(rr_ms, k, i, model->calib.rr_window);
        if (!kept[i]) {
            if (latent)
                for (size_t z = 0; z < z_dim; z++)
                    latent[i * z_dim + z] = NAN;
            if (recon)
                recon[i] = NAN;
            continue;
        }
        const float *row = emb + i * l_len;
        for (size_t t = 0; t < l_len; t++)
            x[t] = row[t];
        ecg_vae_encode(arch, &model->layout, w, x, mu, lv, work);
        if (latent)
            for (size_t z = 0; z < z_dim; z++)
                latent[i * z_dim + z] = (float)mu[z];
        if (recon) {
            ecg_vae_decode(arch, &model->layout, w, mu, r, work);
            double mse = 0;
            for (size_t t = 0; t < l_len; t++)
                mse += (r[t] - x[t]) * (r[t] - x[t]);
            recon[i] = log(mse / (double)l_len + 1e-6);
        }
    }
out:
    free(w);
    free(work);
    return st;
}

enum ecg_status ecg_model_decode(const struct ecg_model *model, const float *latent, size_t n,
                                 float *out, struct ecg_error *err)
{
    /* the float32 decoder of the score (vae_f32.c), so a decoded point is what scoring sees */
    return cpu_vae_decode_with(model, latent, n, CPU_VAE_ISA_AUTO, out, err);
}
