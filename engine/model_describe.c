/*
 * model_describe.c - a model's description: ecg_model_get_info() for the engine and the service, and
 * ecg_model_write_json() for `GET /v1/models` and `ecgd analyze` (architecture, preprocessing
 * parameters, score calibration and training provenance).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model.h"

void ecg_model_get_info(const struct ecg_model *model, struct ecg_model_info *info)
{
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", model->name);
    snprintf(info->sha256, sizeof info->sha256, "%s", model->sha256);
    info->beat_len = model->arch.beat_len;
    info->latent_dim = model->arch.latent_dim;
    memcpy(info->channels, model->arch.enc, sizeof info->channels);
    info->params = model->params;
    info->threshold = model->calib.threshold;
    info->threshold_percentile = model->calib.percentile;
    snprintf(info->records, sizeof info->records, "%s",
             model->prov.records ? model->prov.records : "");
    info->train_beats = model->prov.train_beats;
    info->epochs = model->prov.epochs;
    info->final_loss = model->prov.final_loss;
    info->seed = model->prov.seed;
}

static void json_string(struct ecg_buf *out, const char *s)
{
    ecg_buf_puts(out, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            ecg_buf_printf(out, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            ecg_buf_printf(out, "\\u%04x", *p);
        else
            ecg_buf_append(out, (const char *)p, 1);
    }
    ecg_buf_puts(out, "\"");
}

/* JSON has no NaN or infinity: those become null. */
static void json_number(struct ecg_buf *out, double v)
{
    if (isfinite(v))
        ecg_buf_printf(out, "%.17g", v);
    else
        ecg_buf_puts(out, "null");
}

void ecg_model_write_json(const struct ecg_model *model, struct ecg_buf *out)
{
    const struct ecg_vae_arch *a = &model->arch;
    const struct ecg_params *p = &model->params;
    const struct ecg_score_calib *c = &model->calib;
    const struct ecg_provenance *v = &model->prov;
    ecg_buf_puts(out, "{\"name\":");
    json_string(out, model->name);
    ecg_buf_puts(out, ",\"sha256\":");
    json_string(out, model->sha256);
    ecg_buf_printf(out, ",\"format_version\":%u", ECG_MODEL_VERSION);
    ecg_buf_printf(out,
                   ",\"architecture\":{\"kind\":\"light_vae\",\"beat_len\":%u,\"latent_dim\":%u,"
                   "\"encoder_channels\":[%u,%u,%u],\"decoder_channels\":[%u,%u,%u],"
                   "\"n_weights\":%zu}",
                   a->beat_len, a->latent_dim, a->enc[0], a->enc[1], a->enc[2], a->dec[0],
                   a->dec[1], a->dec[2], model->layout.n_weights);
    ecg_buf_puts(out, ",\"params\":{\"analysis_fs_hz\":");
    json_number(out, p->analysis_fs_hz);
    ecg_buf_puts(out, ",\"ricker_points_s\":");
    json_number(out, p->ricker_points_s);
    ecg_buf_puts(out, ",\"ricker_sigma_s\":");
    json_number(out, p->ricker_sigma_s);
    ecg_buf_puts(out, ",\"nms_window_s\":");
    json_number(out, p->nms_window_s);
    ecg_buf_puts(out, ",\"refractory_s\":");
    json_number(out, p->refractory_s);
    ecg_buf_puts(out, ",\"pre_r_s\":");
    json_number(out, p->pre_r_s);
    ecg_buf_puts(out, ",\"beat_min_s\":");
    json_number(out, p->beat_min_s);
    ecg_buf_puts(out, ",\"beat_max_s\":");
    json_number(out, p->beat_max_s);
    ecg_buf_printf(out, ",\"beat_len\":%u,\"normalisation\":\"%s\"}", p->beat_len,
                   p->normalisation == ECG_NORM_MEDIAN_MAD ? "median_mad" : "unknown");
    ecg_buf_printf(out, ",\"score\":{\"definition\":\"recon_z + rr_weight * max(0, rr_z)\","
                        "\"rr_window\":%u,\"recon_center\":",
                   c->rr_window);
    json_number(out, c->recon_center);
    ecg_buf_puts(out, ",\"recon_scale\":");
    json_number(out, c->recon_scale);
    ecg_buf_puts(out, ",\"rel_center\":");
    json_number(out, c->rel_center);
    ecg_buf_puts(out, ",\"rel_scale\":");
    json_number(out, c->rel_scale);
    ecg_buf_puts(out, ",\"rr_center\":");
    json_number(out, c->rr_center);
    ecg_buf_puts(out, ",\"rr_scale\":");
    json_number(out, c->rr_scale);
    ecg_buf_puts(out, ",\"rr_weight\":");
    json_number(out, c->rr_weight);
    ecg_buf_puts(out, ",\"threshold\":");
    json_number(out, c->threshold);
    ecg_buf_puts(out, ",\"threshold_percentile\":");
    json_number(out, c->percentile);
    ecg_buf_puts(out, ",\"quantiles\":[");
    for (uint32_t i = 0; i < c->n_quantiles; i++) {
        if (i)
            ecg_buf_puts(out, ",");
        json_number(out, c->quantiles[i]);
    }
    ecg_buf_puts(out, "]},\"provenance\":{\"records\":");
    json_string(out, v->records ? v->records : "");
    ecg_buf_printf(out, ",\"train_beats\":%llu,\"beats\":\"%s\",\"epochs\":%u,\"batch_size\":%u",
                   (unsigned long long)v->train_beats,
                   v->beats_mode == ECG_BEATS_ALL ? "all" : "normal", v->epochs, v->batch_size);
    ecg_buf_printf(out, ",\"schedule\":\"%s\",\"learning_rate\":",
                   v->schedule ? "cosine" : "constant");
    json_number(out, v->learning_rate);
    ecg_buf_puts(out, ",\"kl_weight\":");
    json_number(out, v->kl_weight);
    ecg_buf_puts(out, ",\"final_loss\":");
    json_number(out, v->final_loss);
    ecg_buf_printf(out, ",\"seed\":%llu,\"loss_curve\":[", (unsigned long long)v->seed);
    for (uint32_t i = 0; i < v->epochs; i++) {
        if (i)
            ecg_buf_puts(out, ",");
        json_number(out, v->loss_curve ? v->loss_curve[i] : NAN);
    }
    ecg_buf_puts(out, "]}}");
}
