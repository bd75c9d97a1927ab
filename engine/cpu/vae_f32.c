/*
 * vae_f32.c - the CPU backend's VAE stage in float32: packs the kept beats of a request into
 * groups of the kernel's lanes, runs the SIMD kernels of vae_f32.h on them (AVX-512 or AVX2 +
 * FMA where the CPU has them, the baseline build otherwise), and combines the score exactly as
 * the double reference of vae.c does (engine/model.h defines it).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "vae_f32.h"

size_t cpu_vae_group_work_len(const struct ecg_vae_arch *arch, size_t lanes)
{
    size_t l_len = arch->beat_len;
    size_t a_len = arch->enc[0] * (l_len / 2), b_len = arch->enc[1] * (l_len / 4);
    if (arch->enc[2] * (l_len / 8) > a_len)
        a_len = arch->enc[2] * (l_len / 8);
    if (arch->dec[1] * (l_len / 4) > a_len)
        a_len = arch->dec[1] * (l_len / 4);
    if (arch->dec[0] * (l_len / 8) > b_len)
        b_len = arch->dec[0] * (l_len / 8);
    if (arch->dec[2] * (l_len / 2) > b_len)
        b_len = arch->dec[2] * (l_len / 2);
    return (l_len + a_len + b_len) * lanes; /* L is a multiple of 8: whole vectors */
}

static bool have_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static bool have_avx512(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

bool cpu_vae_isa_available(enum cpu_vae_isa isa)
{
    switch (isa) {
    case CPU_VAE_ISA_AUTO:
    case CPU_VAE_ISA_GENERIC: return true;
    case CPU_VAE_ISA_AVX2: return have_avx2();
    case CPU_VAE_ISA_AVX512: return have_avx512();
    }
    return false;
}

enum cpu_vae_isa cpu_vae_isa_resolve(enum cpu_vae_isa isa)
{
    if (isa != CPU_VAE_ISA_AUTO)
        return isa;
    return have_avx512() ? CPU_VAE_ISA_AVX512 : have_avx2() ? CPU_VAE_ISA_AVX2
                                                            : CPU_VAE_ISA_GENERIC;
}

const char *cpu_vae_isa_name(enum cpu_vae_isa isa)
{
    switch (cpu_vae_isa_resolve(isa)) {
    case CPU_VAE_ISA_AVX512: return "avx512";
    case CPU_VAE_ISA_AVX2: return "avx2+fma";
    default: return "generic";
    }
}

static struct cpu_vae_kernels kernels(enum cpu_vae_isa isa)
{
    switch (cpu_vae_isa_resolve(isa)) {
#if defined(__x86_64__)
    case CPU_VAE_ISA_AVX512: return (struct cpu_vae_kernels){16, cpu_vae_group_avx512,
                                                             cpu_vae_decode_avx512,
                                                             cpu_vae_group_avx512vl};
#endif
#if defined(__x86_64__) || defined(__i386__)
    case CPU_VAE_ISA_AVX2: return (struct cpu_vae_kernels){8, cpu_vae_group_avx2,
                                                           cpu_vae_decode_avx2, cpu_vae_group_avx2};
#endif
    default: return (struct cpu_vae_kernels){8, cpu_vae_group_generic, cpu_vae_decode_generic,
                                             cpu_vae_group_generic};
    }
}

void cpu_vae_scratch_fini(struct cpu_vae_scratch *s)
{
    if (!s)
        return;
    free(s->mem);
    s->mem = NULL;
    s->cap_bytes = 0;
}

/* Makes s hold at least bytes (CPU_VAE_ALIGN aligned); keeps it when large enough. */
static enum ecg_status scratch_reserve(struct cpu_vae_scratch *s, size_t bytes,
                                       struct ecg_error *err)
{
    if (bytes <= s->cap_bytes)
        return ECG_OK;
    bytes = (bytes + 2 * bytes / 8 + CPU_VAE_ALIGN - 1) / CPU_VAE_ALIGN * CPU_VAE_ALIGN;
    void *p = aligned_alloc(CPU_VAE_ALIGN, bytes);
    if (!p)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu bytes of VAE "
                        "work area", bytes);
    free(s->mem);
    s->mem = p;
    s->cap_bytes = bytes;
    return ECG_OK;
}

/* The floats of one group's arrays, rounded to whole alignment units. */
static size_t round_floats(size_t n)
{
    const size_t unit = CPU_VAE_ALIGN / sizeof(float);
    return (n + unit - 1) / unit * unit;
}

enum ecg_status cpu_vae_score_with(const struct ecg_model *model, const float *emb,
                                   const uint8_t *kept, const float *rr_ms, size_t k,
                                   enum cpu_vae_isa isa, struct cpu_vae_scratch *scratch,
                                   float *latent, double *recon_out, float *score,
                                   uint8_t *outlier, struct ecg_error *err)
{
    if (!model || !scratch || (k > 0 && (!emb || !kept)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cpu_vae_score: missing input");
    if (k == 0)
        return ECG_OK;
    const struct ecg_vae_arch *arch = &model->arch;
    const struct cpu_vae_kernels kern = kernels(isa);
    const size_t lanes = kern.lanes, l_len = arch->beat_len, z_dim = arch->latent_dim;
    size_t n_work = round_floats(cpu_vae_group_work_len(arch, lanes));
    size_t n_x = round_floats(l_len * lanes), n_mu = round_floats(z_dim * lanes);
    size_t n_err = round_floats(2 * lanes); /* doubles */
    size_t floats = n_work + n_x + n_mu + n_err;
    enum ecg_status st = scratch_reserve(scratch, floats * sizeof(float) + 3 * k * sizeof(double),
                                         err);
    if (st != ECG_OK)
        return st;
    float *work = scratch->mem, *x = work + n_work, *mu = x + n_x;
    double *sq_err = (double *)(mu + n_mu);
    double *recon = (double *)(mu + n_mu + n_err), *prem = recon + k, *level_scratch = prem + k;
    size_t members[CPU_VAE_MAX_LANES], used = 0;
    for (size_t i = 0; i <= k; i++) {
        if (i < k) {
            recon[i] = NAN;
            if (latent && !kept[i])
                for (size_t z = 0; z < z_dim; z++)
                    latent[i * z_dim + z] = NAN;
            if (!kept[i])
                continue;
            members[used++] = i;
            if (used < lanes)
                continue;
        }
        if (used == 0)
            break;
        /* a last group of at most 8 beats takes the 8-lane kernel (same bits, half the work) */
        size_t g_lanes = used <= 8 ? 8 : lanes;
        /* transpose the group's rows into lanes; idle lanes see zeros */
        for (size_t b = 0; b < g_lanes; b++) {
            const float *row = b < used ? emb + members[b] * l_len : NULL;
            for (size_t t = 0; t < l_len; t++)
                x[t * g_lanes + b] = row ? row[t] : 0.0f;
        }
        (g_lanes == 8 ? kern.group8 : kern.group)(arch, &model->layout, model->weights, x, work,
                                                  mu, sq_err);
        for (size_t b = 0; b < used; b++) {
            size_t beat = members[b];
            if (latent)
                for (size_t z = 0; z < z_dim; z++)
                    latent[beat * z_dim + z] = mu[z * g_lanes + b];
            recon[beat] = log(sq_err[b] / (double)l_len + 1e-6);
        }
        used = 0;
    }

    double level = ecg_recon_level(recon, k, level_scratch); /* NaN rows: not kept */
    for (size_t i = 0; i < k; i++) {
        prem[i] = ecg_rr_prematurity(rr_ms, k, i, model->calib.rr_window);
        double s = kept[i] ? ecg_score_combine(&model->calib, recon[i], level, prem[i]) : NAN;
        if (score)
            score[i] = (float)s;
        if (outlier)
            outlier[i] = kept[i] && s > model->calib.threshold;
        if (recon_out)
            recon_out[i] = recon[i];
    }
    return ECG_OK;
}

enum ecg_status cpu_vae_score(const struct ecg_model *model, const float *emb,
                              const uint8_t *kept, const float *rr_ms, size_t k, float *latent,
                              float *score, uint8_t *outlier, struct ecg_error *err)
{
    struct cpu_vae_scratch scratch = {0};
    enum ecg_status st = cpu_vae_score_with(model, emb, kept, rr_ms, k, CPU_VAE_ISA_AUTO,
                                            &scratch, latent, NULL, score, outlier, err);
    cpu_vae_scratch_fini(&scratch);
    return st;
}

enum ecg_status cpu_vae_decode_with(const struct ecg_model *model, const float *latent, size_t n,
                                    enum cpu_vae_isa isa, float *out, struct ecg_error *err)
{
    if (!model || (n > 0 && (!latent || !out)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "ecg_model_decode: missing input");
    const struct ecg_vae_arch *arch = &model->arch;
    const struct cpu_vae_kernels kern = kernels(isa);
    const size_t lanes = kern.lanes, l_len = arch->beat_len, z_dim = arch->latent_dim;
    for (size_t i = 0; i < n * z_dim; i++)
        if (!isfinite(latent[i]))
            return ecg_fail(err, ECG_ERR_ARG, "bad_latent", "latent point %zu: value %zu is %g",
                            i / z_dim, i % z_dim, (double)latent[i]);
    struct cpu_vae_scratch scratch = {0};
    size_t n_work = round_floats(cpu_vae_group_work_len(arch, lanes));
    size_t n_z = round_floats(z_dim * lanes);
    enum ecg_status st = scratch_reserve(
        &scratch, (n_work + n_z + round_floats(l_len * lanes)) * sizeof(float), err);
    if (st != ECG_OK)
        return st;
    float *work = scratch.mem, *z = work + n_work, *rows = z + n_z;
    for (size_t first = 0; first < n; first += lanes) {
        size_t used = n - first < lanes ? n - first : lanes;
        for (size_t b = 0; b < lanes; b++)
            for (size_t j = 0; j < z_dim; j++)
                z[j * lanes + b] = b < used ? latent[(first + b) * z_dim + j] : 0.0f;
        kern.decode(arch, &model->layout, model->weights, z, work, rows);
        for (size_t b = 0; b < used; b++)
            for (size_t t = 0; t < l_len; t++)
                out[(first + b) * l_len + t] = rows[t * lanes + b];
    }
    cpu_vae_scratch_fini(&scratch);
    return ECG_OK;
}
