/*
 * cuda_vae.h - the VAE's paths on the device, shared by the files that implement them
 * (gpu/ only):
 *   cuda_vae.cu        cuda_encode(): picks the path; the block-per-beat fused kernel; the score
 *   cuda_vae_warp.cu   the default architecture, one warp per beat (vae_warp_launch)
 *   cuda_vae_cudnn.cu  cuDNN layer by layer, any architecture (encode_cudnn)
 * Each path leaves the latent means in the beat table and the reconstruction errors
 * log(mean (r - x)^2 + 1e-6) in a device array; cuda_vae.cu then scores the beats.
 */
#ifndef ECG_GPU_CUDA_VAE_H
#define ECG_GPU_CUDA_VAE_H

#include "cuda_internal.h"

/* The learnable Swish of model.h, x * sigmoid(alpha x): one definition for every path. */
static __device__ __forceinline__ float vae_swish(float x, float alpha)
{
    return x / (1.0f + expf(-alpha * x));
}

/* Whether vae_warp_launch() handles arch (the default architecture of engine/model.h). */
bool vae_warp_supports(const struct ecg_vae_arch *arch);

/* Blocks of the warp-per-beat kernel resident per multiprocessor on the current device (at
 * least 1), asked once per device (cuda_device.vae_warp_per_sm) rather than per launch. */
int vae_warp_blocks_per_sm(void);
/* Queues, on ctx's stream, the latent mean of each of the k beats of ctx->emb into latent
 * ([k][Z]) and its reconstruction error into recon ([k]). */
enum ecg_status vae_warp_launch(struct cuda_ctx *ctx, size_t k, float *latent, double *recon,
                                struct ecg_error *err);
/* The same for the k beats of emb ([k][L], device) on stream: a batched back's. */
enum ecg_status vae_warp_launch_on(cudaStream_t stream, const struct cuda_device *dev,
                                   const struct ecg_model *model, const float *emb, size_t k,
                                   float *latent, double *recon, struct ecg_error *err);

/* The cuDNN path on ctx->emb: latents into the beat table, errors into *recon_out (device
 * memory in ctx->vae_work, k doubles). Queued on ctx's stream. */
enum ecg_status encode_cudnn(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                             double **recon_out, struct ecg_error *err);

#endif /* ECG_GPU_CUDA_VAE_H */
