/*
 * cuda_vae_warp.h - the warp-per-beat VAE kernel of the default architecture
 * (gpu/cuda_vae_warp.cu), used by cuda_encode() in cuda_vae.cu when the model's architecture
 * is the one it was compiled for.
 */
#ifndef ECG_GPU_CUDA_VAE_WARP_H
#define ECG_GPU_CUDA_VAE_WARP_H

#include "cuda_internal.h"

/* Whether vae_warp_launch() handles arch (the default architecture of models/model.h). */
bool vae_warp_supports(const struct ecg_vae_arch *arch);

/* Queues, on ctx's stream, the latent mean of each of the k beats of ctx->emb into latent
 * ([k][Z]) and its reconstruction error log(mean (r - x)^2 + 1e-6) into recon ([k]). */
enum ecg_status vae_warp_launch(struct cuda_ctx *ctx, size_t k, float *latent, double *recon,
                                struct ecg_error *err);

#endif /* ECG_GPU_CUDA_VAE_WARP_H */
