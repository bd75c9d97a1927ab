/*
 * vae_f32_body.h - the body of the float32 SIMD VAE kernels (vae_f32.h), included once per
 * instruction set by vae_f32_avx512.c, vae_f32_avx2.c and vae_f32_generic.c after they define:
 *   vf, vi, vd        the vector types: LANES floats, int32s and doubles
 *   splat(v)          a vf of LANES copies of v
 *   VAE_F32_SUFFIX    the suffix of the exported names (avx512, avx2, generic)
 *   vfma(a, b, c)     a * b + c on vf (fused where the ISA has it)
 *   vmax(a, b)        lane-wise max of two vf, vmin(a, b) lane-wise min
 *   vrcp(x)           1 / x to about 1 ulp
 * Not a header of its own: it defines functions and must not be included anywhere else.
 *
 * Lanes are beats: vf holds sample t of LANES beats, so every loop below is the scalar
 * network of engine/model.h written once and executed for LANES beats; there are no horizontal
 * operations. Each loop's order of additions is fixed, so results are reproducible.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define VAE_F32_CAT2(a, b) a##_##b
#define VAE_F32_CAT(a, b) VAE_F32_CAT2(a, b)
#define VAE_F32_NAME(base) VAE_F32_CAT(base, VAE_F32_SUFFIX)

/*
 * Half the lanes of a vf, in double: vdh is half a vd, one register wide where vd is two (GCC
 * moves a vector wider than the ISA's registers through the stack, lane group by lane group:
 * the double sums below took a sixth of a group's time that way). lo_half and hi_half convert
 * lanes [0, LANES/2) and [LANES/2, LANES) exactly; join_halves rounds two halves back to one vf.
 */
typedef double vdh __attribute__((vector_size(sizeof(vd) / 2)));
typedef float vfh __attribute__((vector_size(sizeof(vf) / 2)));

static inline vdh lo_half(vf v)
{
    vfh h;
    memcpy(&h, &v, sizeof h);
    return __builtin_convertvector(h, vdh);
}

static inline vdh hi_half(vf v)
{
    vfh h;
    memcpy(&h, (const char *)&v + sizeof h, sizeof h);
    return __builtin_convertvector(h, vdh);
}

static inline vf join_halves(vdh lo, vdh hi)
{
    vfh l = __builtin_convertvector(lo, vfh), h = __builtin_convertvector(hi, vfh);
    vf v;
    memcpy(&v, &l, sizeof l);
    memcpy((char *)&v + sizeof l, &h, sizeof h);
    return v;
}

/* exp(x) to ~2 ulp (Cephes' expf: round to x / ln 2, a degree-6 polynomial of the remainder,
 * the power of two put in the exponent bits); x clamped to [-87, 88] so 2^n stays normal. */
static inline vf vexp(vf x)
{
    x = vmin(vmax(x, splat(-87.0f)), splat(88.0f));
    /* round to nearest by the 1.5 * 2^23 trick: exact for |x / ln 2| < 2^22 */
    vf n = vfma(x, splat(1.44269504088896341f), splat(12582912.0f)) - splat(12582912.0f);
    vf r = vfma(n, splat(-0.693359375f), x);
    r = vfma(n, splat(2.12194440e-4f), r);
    vf p = splat(1.9875691500e-4f);
    p = vfma(p, r, splat(1.3981999507e-3f));
    p = vfma(p, r, splat(8.3334519073e-3f));
    p = vfma(p, r, splat(4.1665795894e-2f));
    p = vfma(p, r, splat(1.6666665459e-1f));
    p = vfma(p, r, splat(5.0000001201e-1f));
    p = vfma(p * r, r, r + splat(1.0f));
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)e;
}

/* swish in place: a = a * sigmoid(alpha a) = a / (1 + exp(-alpha a)), n vectors. */
static inline vf swish(vf a, vf minus_alpha)
{
    return a * vrcp(splat(1.0f) + vexp(minus_alpha * a));
}

static inline void swish_row(vf *a, size_t n, float alpha)
{
    const vf minus_alpha = splat(-alpha);
    for (size_t t = 0; t < n; t++)
        a[t] = swish(a[t], minus_alpha);
}

/*
 * One pass of conv3 over input rows xa and xb (xb NULL: xa alone) of t_len vectors, with
 * weights wa[3] and wb[3], added to y, or to the bias when `first` (then y is only written).
 * Inlined with constant first and xb, so each variant is a straight loop.
 */
static inline void conv3_pass(vf *y, const vf *xa, const vf *xb, const float *wa,
                              const float *wb, size_t t_len, bool first, float bias)
{
    const size_t last = t_len - 1;
    const vf a0 = splat(wa[0]), a1 = splat(wa[1]), a2 = splat(wa[2]), vb = splat(bias);
    if (xb) {
        const vf b0 = splat(wb[0]), b1 = splat(wb[1]), b2 = splat(wb[2]);
        y[0] = vfma(b2, xb[1], vfma(b1, xb[0], vfma(a2, xa[1], vfma(a1, xa[0], first ? vb : y[0]))));
        for (size_t t = 1; t < last; t++) {
            vf acc = vfma(a0, xa[t - 1], first ? vb : y[t]);
            acc = vfma(a1, xa[t], acc);
            acc = vfma(a2, xa[t + 1], acc);
            acc = vfma(b0, xb[t - 1], acc);
            acc = vfma(b1, xb[t], acc);
            y[t] = vfma(b2, xb[t + 1], acc);
        }
        y[last] = vfma(b1, xb[last], vfma(b0, xb[last - 1], vfma(a1, xa[last],
                                      vfma(a0, xa[last - 1], first ? vb : y[last]))));
        return;
    }
    y[0] = vfma(a2, xa[1], vfma(a1, xa[0], first ? vb : y[0]));
    for (size_t t = 1; t < last; t++)
        y[t] = vfma(a2, xa[t + 1], vfma(a1, xa[t], vfma(a0, xa[t - 1], first ? vb : y[t])));
    y[last] = vfma(a1, xa[last], vfma(a0, xa[last - 1], first ? vb : y[last]));
}

/*
 * One output row of conv3 (kernel 3, padding 1): y[t] = bias + sum_i sum_k w[i][k] in[i][t+k-1]
 * over cin input rows of t_len vectors; w points at this output's [cin][3] weights. Input rows
 * go in pairs so that each pass over y does six multiply-adds per load and store; the first
 * pass starts from the bias.
 */
static inline void conv3_row(const vf *in, size_t cin, size_t t_len, const float *w, float bias,
                             vf *y)
{
    size_t i;
    if (cin >= 2) {
        conv3_pass(y, in, in + t_len, w, w + 3, t_len, true, bias);
        i = 2;
    } else {
        conv3_pass(y, in, NULL, w, NULL, t_len, true, bias);
        i = 1;
    }
    for (; i + 2 <= cin; i += 2)
        conv3_pass(y, in + i * t_len, in + (i + 1) * t_len, w + 3 * i, w + 3 * i + 3, t_len,
                   false, 0.0f);
    if (i < cin)
        conv3_pass(y, in + i * t_len, NULL, w + 3 * i, NULL, t_len, false, 0.0f);
}

/*
 * conv3 of the nearest-neighbour upsampling by 2 of in (cin rows of t_in vectors), one output
 * row of 2 t_in vectors, without forming the upsampled rows: with u[t] = in[t / 2],
 *   y[2s]     = w0 in[s-1] + (w1 + w2) in[s]
 *   y[2s + 1] = (w0 + w1) in[s] + w2 in[s+1]          (in[-1] = in[t_in] = 0)
 * which is a third fewer multiply-adds than the convolution of u.
 */
static inline void conv3_up2_row(const vf *in, size_t cin, size_t t_in, const float *w,
                                 float bias, vf *y)
{
    const size_t last = t_in - 1;
    for (size_t t = 0; t < 2 * t_in; t++)
        y[t] = splat(bias);
    for (size_t i = 0; i < cin; i++) {
        const vf *x = in + i * t_in;
        const vf w0 = splat(w[3 * i]), w2 = splat(w[3 * i + 2]);
        const vf w12 = splat(w[3 * i + 1] + w[3 * i + 2]), w01 = splat(w[3 * i] + w[3 * i + 1]);
        y[0] = vfma(w12, x[0], y[0]);
        y[1] = vfma(w2, x[1], vfma(w01, x[0], y[1]));
        for (size_t s = 1; s < last; s++) {
            y[2 * s] = vfma(w12, x[s], vfma(w0, x[s - 1], y[2 * s]));
            y[2 * s + 1] = vfma(w2, x[s + 1], vfma(w01, x[s], y[2 * s + 1]));
        }
        y[2 * last] = vfma(w12, x[last], vfma(w0, x[last - 1], y[2 * last]));
        y[2 * last + 1] = vfma(w01, x[last], y[2 * last + 1]);
    }
}

/* swish, then blur/2 of one row: out[t] = s[2t-1]/4 + s[2t]/2 + s[2t+1]/4 with s = swish(a)
 * (zero padding), t < t_len/2; each swish is computed once and never stored. */
static inline void swish_blur_row(const vf *a, size_t t_len, float alpha, vf *out)
{
    const vf half = splat(0.5f), quarter = splat(0.25f), minus_alpha = splat(-alpha);
    vf prev = splat(0.0f); /* s[2t - 1] */
    for (size_t t = 0; t < t_len / 2; t++) {
        vf even = swish(a[2 * t], minus_alpha), odd = swish(a[2 * t + 1], minus_alpha);
        out[t] = vfma(half, even, quarter * (prev + odd));
        prev = odd;
    }
}

/* Where a group's arrays live in its work area (in vectors). */
struct vae_f32_areas {
    vf *row;  /* one convolution output row, beat_len */
    vf *a, *b; /* ping-pong activations */
};

static struct vae_f32_areas vae_f32_carve(const struct ecg_vae_arch *arch, float *work)
{
    size_t l_len = arch->beat_len;
    size_t a_len = arch->enc[0] * (l_len / 2);
    if (arch->enc[2] * (l_len / 8) > a_len)
        a_len = arch->enc[2] * (l_len / 8);
    if (arch->dec[1] * (l_len / 4) > a_len)
        a_len = arch->dec[1] * (l_len / 4);
    struct vae_f32_areas ar;
    ar.row = (vf *)work;
    ar.a = ar.row + l_len;
    ar.b = ar.a + a_len;
    return ar;
}

/* decoder(z) into ar->row (beat_len vectors); z: latent_dim vectors. Uses ar->a and ar->b. */
static void decode_group(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                         const float *w, const vf *z, const struct vae_f32_areas *ar)
{
    size_t z_dim = arch->latent_dim, l_len = arch->beat_len, t3 = l_len / 8;
    size_t d0 = arch->dec[0], d1 = arch->dec[1], d2 = arch->dec[2];
    const float *fw = w + ly->fc_w, *fb = w + ly->fc_b;
    for (size_t j = 0; j < d0 * t3; j++) { /* linear, viewed as [d0][L/8] */
        vf v = splat(fb[j]);
        for (size_t k = 0; k < z_dim; k++)
            v = vfma(splat(fw[j * z_dim + k]), z[k], v);
        ar->b[j] = v;
    }
    const float *w0 = w + ly->dec_w[0], *b0 = w + ly->dec_b[0];
    for (size_t o = 0; o < d1; o++)
        conv3_up2_row(ar->b, d0, t3, w0 + o * d0 * 3, b0[o], ar->a + o * (l_len / 4));
    swish_row(ar->a, d1 * (l_len / 4), w[ly->dec_alpha[0]]);
    const float *w1 = w + ly->dec_w[1], *b1 = w + ly->dec_b[1];
    for (size_t o = 0; o < d2; o++)
        conv3_up2_row(ar->a, d1, l_len / 4, w1 + o * d1 * 3, b1[o], ar->b + o * (l_len / 2));
    swish_row(ar->b, d2 * (l_len / 2), w[ly->dec_alpha[1]]);
    conv3_up2_row(ar->b, d2, l_len / 2, w + ly->dec_w[2], w[ly->dec_b[2]], ar->row);
}

void VAE_F32_NAME(cpu_vae_group)(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                                 const float *w, const float *xf, float *work, float *muf,
                                 double *sq_err)
{
    const vf *x = (const vf *)xf;
    vf *mu = (vf *)muf;
    struct vae_f32_areas ar = vae_f32_carve(arch, work);
    size_t l_len = arch->beat_len;

    /* encoder: conv, swish and blur one output row at a time, so the row stays in L1 */
    const vf *in = x;
    size_t cin = 1;
    vf *outs[3] = {ar.a, ar.b, ar.a}; /* layer 2 overwrites layer 0's output, consumed by then */
    for (int l = 0; l < 3; l++) {
        size_t t_len = l_len >> l, c = arch->enc[l];
        const float *wl = w + ly->enc_w[l], *bl = w + ly->enc_b[l];
        for (size_t o = 0; o < c; o++) {
            conv3_row(in, cin, t_len, wl + o * cin * 3, bl[o], ar.row);
            swish_blur_row(ar.row, t_len, w[ly->enc_alpha[l]], outs[l] + o * (t_len / 2));
        }
        in = outs[l];
        cin = c;
    }

    /*
     * mu head, in double like the GPU's: the time mean of a conv3 needs only each input row's
     * sum S and its end values,
     *   mean_t conv = bias + (1/T) sum_i (w0 (S_i - last_i) + w1 S_i + w2 (S_i - first_i)),
     * and the mean cancels large terms into a small one, where float sums would lose digits.
     * The logvar head does not enter the score and is not computed. The sums run on the two
     * halves of the lanes (vdh), each one register wide, with the very operations of each lane.
     */
    size_t t3 = l_len / 8, z_dim = arch->latent_dim;
    const float *mw = w + ly->mu_w, *mb = w + ly->mu_b;
    vdh acc_lo[ECG_MODEL_MAX_LATENT], acc_hi[ECG_MODEL_MAX_LATENT];
    for (size_t z = 0; z < z_dim; z++)
        acc_lo[z] = acc_hi[z] = (vdh){0};
    for (size_t i = 0; i < cin; i++) {
        const vf *row = in + i * t3;
        vdh first_lo = lo_half(row[0]), first_hi = hi_half(row[0]);
        vdh sum_lo = first_lo, sum_hi = first_hi;
        for (size_t t = 1; t < t3; t++) {
            sum_lo += lo_half(row[t]);
            sum_hi += hi_half(row[t]);
        }
        vdh no_last_lo = sum_lo - lo_half(row[t3 - 1]), no_first_lo = sum_lo - first_lo;
        vdh no_last_hi = sum_hi - hi_half(row[t3 - 1]), no_first_hi = sum_hi - first_hi;
        for (size_t z = 0; z < z_dim; z++) {
            const float *wz = mw + (z * cin + i) * 3;
            const double w0 = wz[0], w1 = wz[1], w2 = wz[2];
            acc_lo[z] += w0 * no_last_lo + w1 * sum_lo + w2 * no_first_lo;
            acc_hi[z] += w0 * no_last_hi + w1 * sum_hi + w2 * no_first_hi;
        }
    }
    for (size_t z = 0; z < z_dim; z++)
        mu[z] = join_halves(acc_lo[z] / (double)t3 + (double)mb[z],
                            acc_hi[z] / (double)t3 + (double)mb[z]);

    decode_group(arch, ly, w, mu, &ar);
    /* the squared error: float differences, summed in double (as the GPU does) */
    vdh err_lo = (vdh){0}, err_hi = (vdh){0};
    for (size_t t = 0; t < l_len; t++) {
        vf d = ar.row[t] - x[t];
        err_lo += lo_half(d * d);
        err_hi += hi_half(d * d);
    }
    memcpy(sq_err, &err_lo, sizeof err_lo);
    memcpy((char *)sq_err + sizeof err_lo, &err_hi, sizeof err_hi);
}

void VAE_F32_NAME(cpu_vae_decode)(const struct ecg_vae_arch *arch,
                                  const struct ecg_vae_layout *ly, const float *w, const float *z,
                                  float *work, float *out)
{
    struct vae_f32_areas ar = vae_f32_carve(arch, work);
    decode_group(arch, ly, w, (const vf *)z, &ar);
    vf *o = (vf *)out;
    for (size_t t = 0; t < arch->beat_len; t++)
        o[t] = ar.row[t];
}
