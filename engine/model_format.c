/*
 * model_format.c - model objects and the .ecgm file format (models/FORMAT.md): load, verify, save,
 * describe.
 *
 * Reading is defensive: the file is read whole (at most ECG_MODEL_MAX_FILE_BYTES), the header
 * is checked (size, magic, version, flags, payload length, CRC-32) before any field is parsed,
 * then every field is read through a bounds-checked cursor and validated, so that a truncated,
 * corrupt, future or absurd file is refused with a message that names what is wrong.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "model.h"

/* ---------------------------------------------------------------- architecture */

struct ecg_vae_arch ecg_vae_arch_default(void)
{
    struct ecg_vae_arch arch = {
        .beat_len = 256, .latent_dim = 2, .enc = {4, 8, 16}, .dec = {8, 4, 2}};
    return arch;
}

enum ecg_status ecg_vae_arch_check(const struct ecg_vae_arch *arch, struct ecg_error *err)
{
    if (arch->beat_len < ECG_MODEL_MIN_BEAT_LEN || arch->beat_len > ECG_MODEL_MAX_BEAT_LEN)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims", "beat_len %u outside [%u, %u]",
                        arch->beat_len, ECG_MODEL_MIN_BEAT_LEN, ECG_MODEL_MAX_BEAT_LEN);
    if (arch->beat_len % 8 != 0)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims",
                        "beat_len %u is not a multiple of 8 (three stride-2 stages)",
                        arch->beat_len);
    if (arch->latent_dim < 1 || arch->latent_dim > ECG_MODEL_MAX_LATENT)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims", "latent_dim %u outside [1, %u]",
                        arch->latent_dim, ECG_MODEL_MAX_LATENT);
    for (int i = 0; i < 3; i++) {
        if (arch->enc[i] < 1 || arch->enc[i] > ECG_MODEL_MAX_CHANNELS)
            return ecg_fail(err, ECG_ERR_MODEL, "model_dims",
                            "encoder width %d is %u, outside [1, %u]", i, arch->enc[i],
                            ECG_MODEL_MAX_CHANNELS);
        if (arch->dec[i] < 1 || arch->dec[i] > ECG_MODEL_MAX_CHANNELS)
            return ecg_fail(err, ECG_ERR_MODEL, "model_dims",
                            "decoder width %d is %u, outside [1, %u]", i, arch->dec[i],
                            ECG_MODEL_MAX_CHANNELS);
    }
    return ECG_OK;
}

bool ecg_vae_layout_init(struct ecg_vae_layout *layout, const struct ecg_vae_arch *arch)
{
    if (ecg_vae_arch_check(arch, NULL) != ECG_OK)
        return false;
    size_t off = 0;
    size_t in = 1;
    for (int l = 0; l < 3; l++) {
        size_t out = arch->enc[l];
        layout->enc_w[l] = off;
        off += out * in * 3;
        layout->enc_b[l] = off;
        off += out;
        layout->enc_alpha[l] = off;
        off += 1;
        in = out;
    }
    size_t z = arch->latent_dim;
    layout->mu_w = off;
    off += z * in * 3;
    layout->mu_b = off;
    off += z;
    layout->logvar_w = off;
    off += z * in * 3;
    layout->logvar_b = off;
    off += z;
    size_t fc_out = (size_t)arch->dec[0] * (arch->beat_len / 8);
    layout->fc_w = off;
    off += fc_out * z;
    layout->fc_b = off;
    off += fc_out;
    in = arch->dec[0];
    for (int l = 0; l < 3; l++) {
        size_t out = l < 2 ? arch->dec[l + 1] : 1;
        layout->dec_w[l] = off;
        off += out * in * 3;
        layout->dec_b[l] = off;
        off += out;
        if (l < 2) {
            layout->dec_alpha[l] = off;
            off += 1;
        }
        in = out;
    }
    layout->n_weights = off;
    return true;
}

/* ---------------------------------------------------------------- model objects */

void ecg_model_free(struct ecg_model *model)
{
    if (!model)
        return;
    free(model->weights);
    free(model->calib.quantiles);
    free(model->prov.records);
    free(model->prov.loss_curve);
    free(model);
}

struct ecg_model *ecg_model_create(const struct ecg_vae_arch *arch,
                                   const struct ecg_params *params, struct ecg_error *err)
{
    struct ecg_model *model = NULL;
    if (ecg_vae_arch_check(arch, err) != ECG_OK)
        return NULL;
    if (params->beat_len != arch->beat_len) {
        ecg_fail(err, ECG_ERR_ARG, "model_dims", "params.beat_len %u differs from beat_len %u",
                 params->beat_len, arch->beat_len);
        return NULL;
    }
    model = calloc(1, sizeof *model);
    if (!model)
        goto nomem;
    model->arch = *arch;
    model->params = *params;
    if (!ecg_vae_layout_init(&model->layout, arch))
        goto nomem; /* unreachable: arch was checked */
    model->weights = calloc(model->layout.n_weights, sizeof *model->weights);
    model->calib.quantiles = calloc(2, sizeof *model->calib.quantiles);
    model->prov.records = strdup("");
    if (!model->weights || !model->calib.quantiles || !model->prov.records)
        goto nomem;
    /* a neutral calibration: z-scores of raw values, threshold at 3 */
    model->calib.rr_window = 2;
    model->calib.recon_scale = 1.0;
    model->calib.rel_scale = 1.0;
    model->calib.rr_scale = 1.0;
    model->calib.rr_weight = 1.0;
    model->calib.threshold = 3.0;
    model->calib.percentile = 99.0;
    model->calib.n_quantiles = 2;
    snprintf(model->name, sizeof model->name, "untrained");
    return model;
nomem:
    ecg_model_free(model);
    ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate a model");
    return NULL;
}

/* ---------------------------------------------------------------- CRC-32, SHA-256 */

uint32_t ecg_crc32(uint32_t crc, const void *data, size_t len)
{
    /* zlib's crc32 takes at most UINT_MAX bytes per call */
    const Bytef *p = data;
    uLong value = crc;
    while (len) {
        uInt step = len > UINT_MAX ? UINT_MAX : (uInt)len;
        value = crc32(value, p, step);
        p += step;
        len -= step;
    }
    return (uint32_t)value;
}

void ecg_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    /* EVP_Digest fails only without memory: then the digest reads as zeros, which no file has */
    if (EVP_Digest(data, len, digest, &digest_len, EVP_sha256(), NULL) != 1 || digest_len != 32)
        memset(digest, 0, 32);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/* ---------------------------------------------------------------- little-endian writer */

static void put_u32(struct ecg_buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ecg_buf_append(b, (const char *)x, 4);
}

static void put_u64(struct ecg_buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f64(struct ecg_buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_u64(b, bits);
}

static void put_f32(struct ecg_buf *b, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_u32(b, bits);
}

enum ecg_status ecg_model_serialize(const struct ecg_model *model, struct ecg_buf *out,
                                    struct ecg_error *err)
{
    struct ecg_buf pl = {0};
    const struct ecg_vae_arch *a = &model->arch;
    const struct ecg_params *p = &model->params;
    const struct ecg_score_calib *c = &model->calib;
    const struct ecg_provenance *v = &model->prov;

    put_u32(&pl, a->beat_len);
    put_u32(&pl, a->latent_dim);
    for (int i = 0; i < 3; i++)
        put_u32(&pl, a->enc[i]);
    for (int i = 0; i < 3; i++)
        put_u32(&pl, a->dec[i]);
    put_u32(&pl, (uint32_t)model->layout.n_weights);

    put_f64(&pl, p->analysis_fs_hz);
    put_f64(&pl, p->ricker_points_s);
    put_f64(&pl, p->ricker_sigma_s);
    put_f64(&pl, p->nms_window_s);
    put_f64(&pl, p->refractory_s);
    put_f64(&pl, p->pre_r_s);
    put_f64(&pl, p->beat_min_s);
    put_f64(&pl, p->beat_max_s);
    put_u32(&pl, p->beat_len);
    put_u32(&pl, p->normalisation);

    put_u32(&pl, 1); /* score kind */
    put_u32(&pl, c->rr_window);
    put_f64(&pl, c->recon_center);
    put_f64(&pl, c->recon_scale);
    put_f64(&pl, c->rel_center);
    put_f64(&pl, c->rel_scale);
    put_f64(&pl, c->rr_center);
    put_f64(&pl, c->rr_scale);
    put_f64(&pl, c->rr_weight);
    put_f64(&pl, c->threshold);
    put_f64(&pl, c->percentile);
    put_u32(&pl, c->n_quantiles);
    for (uint32_t i = 0; i < c->n_quantiles; i++)
        put_f64(&pl, c->quantiles[i]);

    size_t records_len = v->records ? strlen(v->records) : 0;
    put_u64(&pl, v->train_beats);
    put_u32(&pl, v->epochs);
    put_u32(&pl, v->beats_mode);
    put_u32(&pl, v->batch_size);
    put_u32(&pl, v->schedule);
    put_f64(&pl, v->learning_rate);
    put_f64(&pl, v->kl_weight);
    put_f64(&pl, v->final_loss);
    put_u64(&pl, v->seed);
    put_u32(&pl, (uint32_t)records_len);
    ecg_buf_append(&pl, v->records ? v->records : "", records_len);
    for (uint32_t i = 0; i < v->epochs; i++)
        put_f32(&pl, v->loss_curve ? v->loss_curve[i] : 0.0f);

    for (size_t i = 0; i < model->layout.n_weights; i++)
        put_f32(&pl, model->weights[i]);

    if (pl.failed) {
        ecg_buf_fini(&pl);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot serialise the model");
    }
    ecg_buf_append(out, ECG_MODEL_MAGIC, 8);
    put_u32(out, ECG_MODEL_VERSION);
    put_u32(out, 0); /* flags */
    put_u64(out, pl.len);
    put_u32(out, ecg_crc32(0, pl.data, pl.len));
    put_u32(out, 0); /* reserved */
    ecg_buf_append(out, pl.data, pl.len);
    ecg_buf_fini(&pl);
    if (out->failed)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot serialise the model");
    return ECG_OK;
}

enum ecg_status ecg_model_save(struct ecg_model *model, const char *path, struct ecg_error *err)
{
    struct ecg_buf bytes = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    enum ecg_status st = ecg_model_serialize(model, &bytes, err);
    if (st != ECG_OK)
        goto out;
    size_t tmp_len = strlen(path) + 16;
    tmp = malloc(tmp_len);
    if (!tmp) {
        st = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate a path");
        goto out;
    }
    snprintf(tmp, tmp_len, "%s.tmp%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        st = ecg_fail(err, ECG_ERR_IO, "model_io", "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    if (fwrite(bytes.data, 1, bytes.len, f) != bytes.len || fflush(f) != 0) {
        st = ecg_fail(err, ECG_ERR_IO, "model_io", "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        st = ecg_fail(err, ECG_ERR_IO, "model_io", "%s: close failed: %s", tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = ecg_fail(err, ECG_ERR_IO, "model_io", "%s: cannot rename to %s: %s", tmp, path,
                      strerror(errno));
        goto out;
    }
    free(tmp);
    tmp = NULL;
    ecg_sha256_hex(bytes.data, bytes.len, model->sha256);
out:
    if (f)
        fclose(f);
    if (tmp) {
        remove(tmp);
        free(tmp);
    }
    ecg_buf_fini(&bytes);
    return st;
}

/* ---------------------------------------------------------------- bounds-checked reader */

struct reader {
    const uint8_t *p;
    size_t len, pos;
    const char *failed_at; /* name of the first field that did not fit, or NULL */
    size_t failed_need;
};

static bool take(struct reader *r, size_t n, const char *field, const uint8_t **at)
{
    if (r->failed_at)
        return false;
    if (n > r->len - r->pos) {
        r->failed_at = field;
        r->failed_need = n;
        return false;
    }
    *at = r->p + r->pos;
    r->pos += n;
    return true;
}

static uint32_t le32(const uint8_t *x)
{
    return (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
}

static uint64_t le64(const uint8_t *x)
{
    return (uint64_t)le32(x) | (uint64_t)le32(x + 4) << 32;
}

static uint32_t get_u32(struct reader *r, const char *field)
{
    const uint8_t *at;
    return take(r, 4, field, &at) ? le32(at) : 0;
}

static uint64_t get_u64(struct reader *r, const char *field)
{
    const uint8_t *at;
    return take(r, 8, field, &at) ? le64(at) : 0;
}

static double get_f64(struct reader *r, const char *field)
{
    uint64_t bits = get_u64(r, field);
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

static float f32_at(const uint8_t *x)
{
    uint32_t bits = le32(x);
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Reports a field that ran past the payload; the caller returns after it. */
static enum ecg_status short_payload(const struct reader *r, struct ecg_error *err)
{
    return ecg_fail(err, ECG_ERR_MODEL, "model_truncated",
                    "payload ends at byte %zu while reading %s (%zu more bytes needed)", r->len,
                    r->failed_at, r->failed_need - (r->len - r->pos));
}

/* A double field must be finite and within [lo, hi]. */
static enum ecg_status check_range(double v, double lo, double hi, const char *field,
                                   struct ecg_error *err)
{
    if (!isfinite(v) || v < lo || v > hi)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "%s = %g outside [%g, %g]", field, v,
                        lo, hi);
    return ECG_OK;
}

static enum ecg_status parse_params(struct reader *r, struct ecg_model *m, struct ecg_error *err)
{
    struct ecg_params *p = &m->params;
    p->analysis_fs_hz = get_f64(r, "params.analysis_fs_hz");
    p->ricker_points_s = get_f64(r, "params.ricker_points_s");
    p->ricker_sigma_s = get_f64(r, "params.ricker_sigma_s");
    p->nms_window_s = get_f64(r, "params.nms_window_s");
    p->refractory_s = get_f64(r, "params.refractory_s");
    p->pre_r_s = get_f64(r, "params.pre_r_s");
    p->beat_min_s = get_f64(r, "params.beat_min_s");
    p->beat_max_s = get_f64(r, "params.beat_max_s");
    p->beat_len = get_u32(r, "params.beat_len");
    p->normalisation = get_u32(r, "params.normalisation");
    if (r->failed_at)
        return short_payload(r, err);
    enum ecg_status st;
    if ((st = check_range(p->analysis_fs_hz, 50, 2000, "params.analysis_fs_hz", err)) ||
        (st = check_range(p->ricker_points_s, 1e-4, 1, "params.ricker_points_s", err)) ||
        (st = check_range(p->ricker_sigma_s, 1e-5, 1, "params.ricker_sigma_s", err)) ||
        (st = check_range(p->nms_window_s, 1e-3, 10, "params.nms_window_s", err)) ||
        (st = check_range(p->refractory_s, 0, 10, "params.refractory_s", err)) ||
        (st = check_range(p->pre_r_s, 0, 10, "params.pre_r_s", err)) ||
        (st = check_range(p->beat_min_s, 1e-3, 10, "params.beat_min_s", err)) ||
        (st = check_range(p->beat_max_s, p->beat_min_s, 10, "params.beat_max_s", err)))
        return st;
    if (p->beat_len != m->arch.beat_len)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value",
                        "params.beat_len %u differs from the architecture's beat_len %u",
                        p->beat_len, m->arch.beat_len);
    if (p->normalisation != ECG_NORM_MEDIAN_MAD)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "unknown normalisation %u",
                        p->normalisation);
    return ECG_OK;
}

static enum ecg_status parse_calib(struct reader *r, struct ecg_model *m, struct ecg_error *err)
{
    struct ecg_score_calib *c = &m->calib;
    uint32_t kind = get_u32(r, "score.kind");
    c->rr_window = get_u32(r, "score.rr_window");
    c->recon_center = get_f64(r, "score.recon_center");
    c->recon_scale = get_f64(r, "score.recon_scale");
    c->rel_center = get_f64(r, "score.rel_center");
    c->rel_scale = get_f64(r, "score.rel_scale");
    c->rr_center = get_f64(r, "score.rr_center");
    c->rr_scale = get_f64(r, "score.rr_scale");
    c->rr_weight = get_f64(r, "score.rr_weight");
    c->threshold = get_f64(r, "score.threshold");
    c->percentile = get_f64(r, "score.percentile");
    c->n_quantiles = get_u32(r, "score.n_quantiles");
    if (r->failed_at)
        return short_payload(r, err);
    if (kind != 1)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "unknown score kind %u", kind);
    if (c->rr_window < 1 || c->rr_window > 64)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "score.rr_window %u outside [1, 64]",
                        c->rr_window);
    enum ecg_status st;
    if ((st = check_range(c->recon_center, -1e6, 1e6, "score.recon_center", err)) ||
        (st = check_range(c->recon_scale, 1e-12, 1e6, "score.recon_scale", err)) ||
        (st = check_range(c->rel_center, -1e6, 1e6, "score.rel_center", err)) ||
        (st = check_range(c->rel_scale, 1e-12, 1e6, "score.rel_scale", err)) ||
        (st = check_range(c->rr_center, -1e6, 1e6, "score.rr_center", err)) ||
        (st = check_range(c->rr_scale, 1e-12, 1e6, "score.rr_scale", err)) ||
        (st = check_range(c->rr_weight, 0, 1e6, "score.rr_weight", err)) ||
        (st = check_range(c->threshold, -1e9, 1e9, "score.threshold", err)))
        return st;
    if (!(c->percentile > 0 && c->percentile < 100))
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "score.percentile %g outside (0, 100)",
                        c->percentile);
    if (c->n_quantiles < 2 || c->n_quantiles > ECG_MODEL_MAX_QUANTILES)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims", "score.n_quantiles %u outside [2, %u]",
                        c->n_quantiles, ECG_MODEL_MAX_QUANTILES);
    c->quantiles = malloc(c->n_quantiles * sizeof *c->quantiles);
    if (!c->quantiles)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate quantiles");
    for (uint32_t i = 0; i < c->n_quantiles; i++)
        c->quantiles[i] = get_f64(r, "score.quantiles");
    if (r->failed_at)
        return short_payload(r, err);
    for (uint32_t i = 0; i < c->n_quantiles; i++) {
        if (!isfinite(c->quantiles[i]))
            return ecg_fail(err, ECG_ERR_MODEL, "model_value", "score quantile %u is %g", i,
                            c->quantiles[i]);
        if (i > 0 && c->quantiles[i] < c->quantiles[i - 1])
            return ecg_fail(err, ECG_ERR_MODEL, "model_value",
                            "score quantiles not ascending at %u (%g < %g)", i, c->quantiles[i],
                            c->quantiles[i - 1]);
    }
    return ECG_OK;
}

static enum ecg_status parse_prov(struct reader *r, struct ecg_model *m, struct ecg_error *err)
{
    struct ecg_provenance *v = &m->prov;
    v->train_beats = get_u64(r, "provenance.train_beats");
    v->epochs = get_u32(r, "provenance.epochs");
    v->beats_mode = get_u32(r, "provenance.beats_mode");
    v->batch_size = get_u32(r, "provenance.batch_size");
    v->schedule = get_u32(r, "provenance.schedule");
    v->learning_rate = get_f64(r, "provenance.learning_rate");
    v->kl_weight = get_f64(r, "provenance.kl_weight");
    v->final_loss = get_f64(r, "provenance.final_loss");
    v->seed = get_u64(r, "provenance.seed");
    uint32_t records_len = get_u32(r, "provenance.records_len");
    if (r->failed_at)
        return short_payload(r, err);
    if (v->epochs > ECG_MODEL_MAX_EPOCHS)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims", "provenance.epochs %u above %u",
                        v->epochs, ECG_MODEL_MAX_EPOCHS);
    if (v->beats_mode > ECG_BEATS_ALL)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "unknown provenance.beats_mode %u",
                        v->beats_mode);
    if (v->schedule > 1)
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "unknown provenance.schedule %u",
                        v->schedule);
    if (records_len > ECG_MODEL_MAX_RECORDS_LEN)
        return ecg_fail(err, ECG_ERR_MODEL, "model_dims", "provenance.records_len %u above %u",
                        records_len, ECG_MODEL_MAX_RECORDS_LEN);
    enum ecg_status st;
    if ((st = check_range(v->learning_rate, 0, 1e3, "provenance.learning_rate", err)) ||
        (st = check_range(v->kl_weight, 0, 1e6, "provenance.kl_weight", err)) ||
        (st = check_range(v->final_loss, -1e30, 1e30, "provenance.final_loss", err)))
        return st;
    const uint8_t *at;
    if (!take(r, records_len, "provenance.records", &at))
        return short_payload(r, err);
    if (memchr(at, 0, records_len))
        return ecg_fail(err, ECG_ERR_MODEL, "model_value", "provenance.records holds a NUL byte");
    v->records = malloc((size_t)records_len + 1);
    v->loss_curve = malloc(((size_t)v->epochs + 1) * sizeof *v->loss_curve);
    if (!v->records || !v->loss_curve)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate provenance");
    memcpy(v->records, at, records_len);
    v->records[records_len] = '\0';
    if (!take(r, (size_t)v->epochs * 4, "provenance.loss_curve", &at))
        return short_payload(r, err);
    for (uint32_t i = 0; i < v->epochs; i++)
        v->loss_curve[i] = f32_at(at + 4 * (size_t)i);
    return ECG_OK;
}

static void name_from_path(char name[64], const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (n > 63)
        n = 63;
    memcpy(name, base, n);
    name[n] = '\0';
}

struct ecg_model *ecg_model_parse(const void *buf, size_t len, const char *name,
                                  struct ecg_error *err)
{
    const uint8_t *bytes = buf;
    struct ecg_model *m = NULL;
    if (len == 0) {
        ecg_fail(err, ECG_ERR_MODEL, "model_truncated", "model file is empty");
        return NULL;
    }
    if (len < ECG_MODEL_HEADER_BYTES) {
        ecg_fail(err, ECG_ERR_MODEL, "model_truncated",
                 "model file truncated in its header: %zu bytes, the header needs %u", len,
                 ECG_MODEL_HEADER_BYTES);
        return NULL;
    }
    if (memcmp(bytes, ECG_MODEL_MAGIC, 8) != 0) {
        ecg_fail(err, ECG_ERR_MODEL, "model_magic",
                 "not an ecgd model file (bad magic, expected \"%s\")", ECG_MODEL_MAGIC);
        return NULL;
    }
    uint32_t version = le32(bytes + 8);
    uint32_t flags = le32(bytes + 12);
    uint64_t payload_len = le64(bytes + 16);
    uint32_t crc_stored = le32(bytes + 24);
    if (version == 0) {
        ecg_fail(err, ECG_ERR_MODEL, "model_version", "invalid model format version 0");
        return NULL;
    }
    if (version > ECG_MODEL_VERSION) {
        ecg_fail(err, ECG_ERR_MODEL, "model_version",
                 "model format version %u is newer than this build reads (%u)", version,
                 ECG_MODEL_VERSION);
        return NULL;
    }
    if (flags != 0) {
        ecg_fail(err, ECG_ERR_MODEL, "model_flags", "unknown header flags 0x%x", flags);
        return NULL;
    }
    size_t have = len - ECG_MODEL_HEADER_BYTES;
    if (payload_len > have) {
        ecg_fail(err, ECG_ERR_MODEL, "model_truncated",
                 "model file truncated: header promises %llu payload bytes, file has %zu",
                 (unsigned long long)payload_len, have);
        return NULL;
    }
    if (payload_len < have) {
        ecg_fail(err, ECG_ERR_MODEL, "model_trailing",
                 "%zu unexpected bytes after the model payload", have - (size_t)payload_len);
        return NULL;
    }
    const uint8_t *payload = bytes + ECG_MODEL_HEADER_BYTES;
    uint32_t crc = ecg_crc32(0, payload, have);
    if (crc != crc_stored) {
        ecg_fail(err, ECG_ERR_MODEL, "model_checksum",
                 "model file corrupt: CRC-32 of the payload is %08x, header says %08x", crc,
                 crc_stored);
        return NULL;
    }

    m = calloc(1, sizeof *m);
    if (!m) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate a model");
        return NULL;
    }
    struct reader r = {.p = payload, .len = have};
    m->arch.beat_len = get_u32(&r, "arch.beat_len");
    m->arch.latent_dim = get_u32(&r, "arch.latent_dim");
    for (int i = 0; i < 3; i++)
        m->arch.enc[i] = get_u32(&r, "arch.encoder_widths");
    for (int i = 0; i < 3; i++)
        m->arch.dec[i] = get_u32(&r, "arch.decoder_widths");
    uint32_t n_weights = get_u32(&r, "arch.n_weights");
    if (r.failed_at) {
        short_payload(&r, err);
        goto fail;
    }
    if (ecg_vae_arch_check(&m->arch, err) != ECG_OK)
        goto fail;
    ecg_vae_layout_init(&m->layout, &m->arch);
    if (n_weights != m->layout.n_weights) {
        ecg_fail(err, ECG_ERR_MODEL, "model_dims",
                 "weight count %u does not match the architecture (%zu)", n_weights,
                 m->layout.n_weights);
        goto fail;
    }
    if (parse_params(&r, m, err) != ECG_OK || parse_calib(&r, m, err) != ECG_OK ||
        parse_prov(&r, m, err) != ECG_OK)
        goto fail;
    const uint8_t *at;
    if (!take(&r, m->layout.n_weights * 4, "weights", &at)) {
        short_payload(&r, err);
        goto fail;
    }
    m->weights = malloc(m->layout.n_weights * sizeof *m->weights);
    if (!m->weights) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate weights");
        goto fail;
    }
    for (size_t i = 0; i < m->layout.n_weights; i++) {
        m->weights[i] = f32_at(at + 4 * i);
        if (!isfinite(m->weights[i])) {
            ecg_fail(err, ECG_ERR_MODEL, "model_value", "weight %zu is not finite (%g)", i,
                     (double)m->weights[i]);
            goto fail;
        }
    }
    if (r.pos != r.len) {
        ecg_fail(err, ECG_ERR_MODEL, "model_trailing", "%zu unread bytes at the end of the payload",
                 r.len - r.pos);
        goto fail;
    }
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    ecg_sha256_hex(buf, len, m->sha256);
    return m;
fail:
    ecg_model_free(m);
    return NULL;
}

struct ecg_model *ecg_model_load(const char *path, struct ecg_error *err)
{
    struct ecg_model *m = NULL;
    uint8_t *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        ecg_fail(err, errno == ENOENT ? ECG_ERR_NOT_FOUND : ECG_ERR_IO, "model_io",
                 "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1u << 16, len = 0;
    data = malloc(cap);
    if (!data) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate a read buffer");
        goto out;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= ECG_MODEL_MAX_FILE_BYTES + 1u) {
                ecg_fail(err, ECG_ERR_MODEL, "model_too_large", "%s: larger than %u bytes", path,
                         ECG_MODEL_MAX_FILE_BYTES);
                goto out;
            }
            uint8_t *grown = realloc(data, cap * 2);
            if (!grown) {
                ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate a read buffer");
                goto out;
            }
            data = grown;
            cap *= 2;
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                ecg_fail(err, ECG_ERR_IO, "model_io", "%s: read error: %s", path,
                         strerror(errno));
                goto out;
            }
            break;
        }
    }
    if (len > ECG_MODEL_MAX_FILE_BYTES) {
        ecg_fail(err, ECG_ERR_MODEL, "model_too_large", "%s: larger than %u bytes", path,
                 ECG_MODEL_MAX_FILE_BYTES);
        goto out;
    }
    char name[64];
    name_from_path(name, path);
    struct ecg_error inner = {0};
    m = ecg_model_parse(data, len, name, &inner);
    if (!m && err) {
        /* prefix the path so the message says where */
        char msg[ECG_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", inner.message);
        ecg_fail(err, inner.status, inner.code, "%s: %s", path, msg);
    }
out:
    fclose(f);
    free(data);
    return m;
}
