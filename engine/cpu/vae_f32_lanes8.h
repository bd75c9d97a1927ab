/*
 * vae_f32_lanes8.h - the 8-lane vector types and splat of the AVX2 and generic instances of the
 * float32 VAE kernels (vae_f32_body.h); included by vae_f32_avx2.c and vae_f32_generic.c only.
 */
#ifndef ECG_VAE_F32_LANES8_H
#define ECG_VAE_F32_LANES8_H

#include <stdint.h>

typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
typedef double vd __attribute__((vector_size(64))); /* the 8 lanes in double */

static inline vf splat(float v)
{
    return (vf){v, v, v, v, v, v, v, v};
}

#endif /* ECG_VAE_F32_LANES8_H */
