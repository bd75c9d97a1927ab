/*
 * vae_f32.h - the LightVAE's inference pass (encoder mean, decoder, reconstruction error) in
 * float32 SIMD on the CPU: the serving path of the CPU backend and the reference the CUDA
 * kernels are tested against. engine/cpu/vae.c keeps the double-precision network for the
 * trainer and as the oracle this one is tested against (tests/unit/test_vae.c).
 *
 * Beats are processed a group at a time, one beat per SIMD lane (8 lanes, 16 with AVX-512):
 * every array of a group is laid out [row][time][lane], so each lane performs exactly the
 * scalar arithmetic of its own beat and a beat's result never depends on which beats share its
 * group (nor on the thread). The same kernel source (vae_f32_body.h) is compiled three times:
 * for AVX-512 (vae_f32_avx512.c, and vae_f32_avx512vl.c with 8 lanes for small groups), for
 * AVX2 + FMA (vae_f32_avx2.c) and for the build's baseline ISA (vae_f32_generic.c); the choice
 * is made at run time from the CPU's features. They differ
 * by fused versus separate multiply-adds and the reciprocal's first estimate (a few float ulps).
 *
 * Threading: the functions keep no state; a scratch area is used by one thread at a time.
 */
#ifndef ECG_VAE_F32_H
#define ECG_VAE_F32_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPU_VAE_MAX_LANES 16
#define CPU_VAE_ALIGN 64 /* bytes: group arrays hold whole SIMD vectors */

/*
 * One group of LANES beats (the kernel's lanes) through the network. x: beat_len x LANES
 * floats (beat b's sample t at x[t * LANES + b]); work: cpu_vae_group_work_len() floats; both
 * CPU_VAE_ALIGN aligned. Writes mu (latent_dim x LANES, [z][lane]) and sq_err (LANES doubles, as aligned):
 * the sum over t of (decoder(mu)_t - x_t)^2. Lanes are independent; unused lanes may hold
 * anything.
 */
typedef void cpu_vae_group_fn(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                              const float *w, const float *x, float *work, float *mu,
                              double *sq_err);
cpu_vae_group_fn cpu_vae_group_generic;
cpu_vae_group_fn cpu_vae_group_avx2;
cpu_vae_group_fn cpu_vae_group_avx512;
cpu_vae_group_fn cpu_vae_group_avx512vl;

/* Floats of work area for one group of `lanes` beats. */
size_t cpu_vae_group_work_len(const struct ecg_vae_arch *arch, size_t lanes);

/*
 * One group of LANES decodes: z (latent_dim x LANES, [z][lane]) -> out (beat_len x
 * LANES, [t][lane]); same alignment and work area as above.
 */
typedef void cpu_vae_decode_fn(const struct ecg_vae_arch *arch, const struct ecg_vae_layout *ly,
                               const float *w, const float *z, float *work, float *out);
cpu_vae_decode_fn cpu_vae_decode_generic;
cpu_vae_decode_fn cpu_vae_decode_avx2;
cpu_vae_decode_fn cpu_vae_decode_avx512;
cpu_vae_decode_fn cpu_vae_decode_avx512vl;

/* One compiled instance of the kernels, and the 8-lane kernel that gives the same bits for
 * groups of at most 8 beats (the same as group where lanes is 8). */
struct cpu_vae_kernels {
    size_t lanes;
    cpu_vae_group_fn *group;
    cpu_vae_decode_fn *decode;
    cpu_vae_group_fn *group8;
};

#ifdef __cplusplus
}
#endif

#endif /* ECG_VAE_F32_H */
