/*
 * model.h - the VAE model: architecture, weights, preprocessing parameters, score calibration
 * and training provenance, as held in memory and in a .ecgm file (FORMAT.md).
 *
 * Internal to the engine, the trainer and the backends (gpu/ includes it to upload weights);
 * the service and the CLI see only the opaque struct ecg_model of ecg.h.
 *
 * The network (LightVAE, engine/cpu/vae.c) for beat length L, encoder widths e0 e1 e2, decoder
 * widths d0 d1 d2 and latent dimension Z:
 *   encoder  x[1][L]
 *            -> conv3(1->e0)  -> swish(alpha0) -> blur/2  -> [e0][L/2]
 *            -> conv3(e0->e1) -> swish(alpha1) -> blur/2  -> [e1][L/4]
 *            -> conv3(e1->e2) -> swish(alpha2) -> blur/2  -> [e2][L/8]
 *            -> conv3(e2->Z) mean over time = mu;  conv3(e2->Z) mean over time = logvar
 *   decoder  z[Z] -> linear(Z -> d0*L/8) viewed as [d0][L/8]
 *            -> up2 -> conv3(d0->d1) -> swish(alpha3)
 *            -> up2 -> conv3(d1->d2) -> swish(alpha4)
 *            -> up2 -> conv3(d2->1)  -> [1][L]
 * conv3 is a 1-D convolution, kernel 3, padding 1, stride 1, with bias (PyTorch's
 * cross-correlation convention). swish(a)(x) = x * sigmoid(a * x) with one learnable scalar a
 * per layer. blur/2 is the fixed depthwise filter [1 2 1]/4 with stride 2 and zero padding 1.
 * up2 is nearest-neighbour upsampling by 2.
 *
 * Weights are one float array in this order (the file stores the same order), each convolution
 * weight laid out [out][in][3] and the linear weight [out][in] as in PyTorch:
 *   for l in 0..2: enc_w[l] enc_b[l] enc_alpha[l]
 *   mu_w mu_b logvar_w logvar_b fc_w fc_b
 *   for l in 0..2: dec_w[l] dec_b[l] (dec_alpha[l] for l < 2)
 * struct ecg_vae_layout gives every offset.
 *
 * Threading: a loaded model is immutable and may be shared by any number of threads.
 */
#ifndef ECG_MODEL_H
#define ECG_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ecg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ECG_MODEL_MAGIC "ECGMODEL"   /* 8 bytes, no terminator in the file */
#define ECG_MODEL_VERSION 1u
#define ECG_MODEL_HEADER_BYTES 32u
#define ECG_MODEL_MAX_FILE_BYTES (64u << 20)

/* Bounds a file's architecture must respect (anything outside is refused as absurd). */
#define ECG_MODEL_MIN_BEAT_LEN 16u
#define ECG_MODEL_MAX_BEAT_LEN 4096u
#define ECG_MODEL_MAX_LATENT 64u
#define ECG_MODEL_MAX_CHANNELS 256u
#define ECG_MODEL_MAX_QUANTILES 10001u
#define ECG_MODEL_MAX_RECORDS_LEN 4096u
#define ECG_MODEL_MAX_EPOCHS 100000u

struct ecg_vae_arch {
    uint32_t beat_len;     /* L, a multiple of 8 */
    uint32_t latent_dim;   /* Z */
    uint32_t enc[3];       /* encoder widths e0 e1 e2 */
    uint32_t dec[3];       /* decoder widths d0 d1 d2 */
};

/* Offsets (in floats) of every tensor in the weight array, and its total size. */
struct ecg_vae_layout {
    size_t enc_w[3], enc_b[3], enc_alpha[3];
    size_t mu_w, mu_b, logvar_w, logvar_b;
    size_t fc_w, fc_b;
    size_t dec_w[3], dec_b[3], dec_alpha[2];
    size_t n_weights;
};

/*
 * The score (README.md): for a kept beat with normalised samples x and reconstruction
 * r = decoder(mu(x)),
 *   recon   = log(mean_t (r_t - x_t)^2 + 1e-6)
 *   level   = median of recon over the kept beats of the same recording (the request)
 *   prem    = (m - rr) / m, m = median of the RR of the rr_window beats on each side (NaN
 *             skipped; prem = 0 if rr or m is missing)
 *   z_abs   = (recon - recon_center) / recon_scale
 *   z_rel   = (recon - level - rel_center) / rel_scale
 *   z_rr    = (prem - rr_center) / rr_scale
 *   score   = max(z_abs, z_rel) + rr_weight * max(0, z_rr)
 * The centres and scales are the median and 1.4826 * MAD of the training beats' values (level
 * taken over each training recording's kept beats). z_abs compares the beat with the training
 * population, z_rel with the other beats of its own recording (patients differ in how well
 * their normal beats reconstruct). A beat is an outlier when score > threshold.
 */
struct ecg_score_calib {
    uint32_t rr_window;        /* beats on each side of the local RR median */
    double recon_center, recon_scale;
    double rel_center, rel_scale;
    double rr_center, rr_scale;
    double rr_weight;
    double threshold;          /* the percentile-th percentile of the training scores */
    double percentile;         /* in (0, 100) */
    uint32_t n_quantiles;      /* quantiles[q] = q/(n-1) quantile of the training scores */
    double *quantiles;         /* owned */
};

enum ecg_beats_mode { ECG_BEATS_NORMAL = 0, ECG_BEATS_ALL = 1 };

struct ecg_provenance {
    char *records;             /* owned, NUL-terminated, e.g. "mitdb:101,106 lead 0" */
    uint64_t train_beats;
    uint32_t epochs;
    uint32_t beats_mode;       /* enum ecg_beats_mode */
    uint32_t batch_size;
    uint32_t schedule;         /* 0 = constant step size, 1 = cosine decay */
    double learning_rate;      /* Adam step size (of the first epoch) */
    double kl_weight;
    double final_loss;
    uint64_t seed;
    float *loss_curve;         /* owned, epochs values (mean training loss per epoch) */
};

struct ecg_model {
    char name[64];
    char sha256[65];           /* of the whole file it was loaded from or saved to; "" if neither */
    struct ecg_vae_arch arch;
    struct ecg_vae_layout layout;
    struct ecg_params params;
    float *weights;            /* owned, layout.n_weights */
    struct ecg_score_calib calib;
    struct ecg_provenance prov;
};

/* ---------------------------------------------------------------- model objects (model_format.c) */

/* Fills layout for arch. Returns false when arch is outside the bounds above (no message). */
bool ecg_vae_layout_init(struct ecg_vae_layout *layout, const struct ecg_vae_arch *arch);

/* The default architecture: L = 256, Z = 2, encoder 4 8 16, decoder 8 4 2. */
struct ecg_vae_arch ecg_vae_arch_default(void);

/* Checks arch against the bounds; on failure fills err (ECG_ERR_MODEL, code "model_dims"). */
enum ecg_status ecg_vae_arch_check(const struct ecg_vae_arch *arch, struct ecg_error *err) ECG_WUR;

/*
 * Creates a model with zero weights, an empty calibration (threshold +inf) and empty
 * provenance. Returns NULL and fills err on bad dimensions or out of memory.
 */
struct ecg_model *ecg_model_create(const struct ecg_vae_arch *arch,
                                   const struct ecg_params *params, struct ecg_error *err) ECG_WUR;

/*
 * Parses and verifies a model held in memory (the bytes of a .ecgm file). name labels the
 * model (copied, may be NULL). Same contract as ecg_model_load.
 */
struct ecg_model *ecg_model_parse(const void *buf, size_t len, const char *name,
                                  struct ecg_error *err) ECG_WUR;

/* Serialises model into out (appended). Returns ECG_ERR_NOMEM if the buffer failed. */
enum ecg_status ecg_model_serialize(const struct ecg_model *model, struct ecg_buf *out,
                                    struct ecg_error *err) ECG_WUR;

/*
 * Writes model to path (via a temporary file and rename, so a reader never sees half a file)
 * and sets model->sha256 to the file's digest. On failure the path is left untouched.
 */
enum ecg_status ecg_model_save(struct ecg_model *model, const char *path,
                               struct ecg_error *err) ECG_WUR;

/* CRC-32 (IEEE 802.3) of len bytes, continuing from crc (start with 0): zlib's crc32. */
uint32_t ecg_crc32(uint32_t crc, const void *data, size_t len);

/* SHA-256 of len bytes as 64 lowercase hex digits and a NUL: OpenSSL's libcrypto (EVP). */
void ecg_sha256_hex(const void *data, size_t len, char hex[65]);

/* ---------------------------------------------------------------- the network (vae.c) */

/*
 * The network in double precision on one beat at a time (the trainer's, and the reference of
 * the float32 inference path of engine/cpu/vae_f32.h). Weights are given as doubles in the
 * order of the layout (callers convert the model's floats once). Work areas are plain arrays of
 * doubles sized by ecg_vae_work_len; a work area is used by one thread at a time.
 */
size_t ecg_vae_work_len(const struct ecg_vae_arch *arch);

/* Encoder: x (L) -> mu, logvar (Z each). */
void ecg_vae_encode(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *layout,
                    const double *w, const double *x, double *mu, double *logvar, double *work);

/* Decoder: z (Z) -> out (L). */
void ecg_vae_decode(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *layout,
                    const double *w, const double *z, double *out, double *work);

/*
 * Training step on one beat: forward with z = mu + exp(logvar / 2) * eps, then backward of
 *   loss = (1/L) sum_t (out_t - x_t)^2 + kl_weight * KL,
 *   KL   = -1/2 sum_z (1 + logvar - mu^2 - exp(logvar)),
 * multiplied by `scale` (1/batch for a batch mean), accumulated into grad (n_weights doubles).
 * Writes mu, logvar, out when not NULL. Returns the beat's (unscaled) loss; *recon_mse and
 * *kl receive its parts when not NULL.
 */
double ecg_vae_train_beat(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *layout,
                          const double *w, const double *x, const double *eps, double kl_weight,
                          double scale, double *grad, double *mu, double *logvar, double *out,
                          double *recon_mse, double *kl, double *work);

/*
 * Per-beat score parts: recon = log(mean squared error of decoder(mu) + 1e-6) for each kept
 * beat (NaN otherwise), mu (k x Z, NaN rows for beats not kept), and prem (the RR prematurity,
 * defined for every beat), in double precision. Used by the trainer's calibration, and as the
 * oracle of the float32 path the CPU backend serves with (cpu_vae_score, engine/cpu/vae_f32.c).
 * Returns ECG_ERR_NOMEM if work areas cannot be allocated.
 */
enum ecg_status ecg_vae_score_parts(const struct ecg_model *model, const float *emb,
                                    const uint8_t *kept, const float *rr_ms, size_t k,
                                    float *latent, double *recon, double *prem,
                                    struct ecg_error *err) ECG_WUR;

/* Median RR (ms) of the beats within window positions of beat i, i excluded, NaN and
 * non-positive values skipped; NaN when there are none. */
double ecg_rr_local_median(const float *rr_ms, size_t k, size_t i, uint32_t window);

/* RR prematurity of beat i (see struct ecg_score_calib); 0 when rr_ms[i] or the median is
 * missing. */
double ecg_rr_prematurity(const float *rr_ms, size_t k, size_t i, uint32_t window);

/* Combines the parts into the score with the model's calibration. NaN recon gives NaN. */
double ecg_score_combine(const struct ecg_score_calib *calib, double recon, double level,
                         double prem);

/* The recording level: median of the finite values of recon[0..n) (NaN skipped); NaN if none.
 * Reorders nothing; uses scratch (n doubles). */
double ecg_recon_level(const double *recon, size_t n, double *scratch);

#ifdef __cplusplus
}
#endif

#endif /* ECG_MODEL_H */
