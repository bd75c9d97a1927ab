/*
 * vae_f32_avx512.c - the float32 VAE kernels (vae_f32_body.h) compiled for AVX-512F: 16 beats
 * per vector. Called only where the CPU reports AVX-512F (vae_f32.c checks at run time); the
 * rest of the build keeps its baseline ISA.
 */
#include <stdint.h>

#include "vae_f32.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f")
#include <immintrin.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef double vd __attribute__((vector_size(128))); /* the 16 lanes in double */

static inline vf splat(float v)
{
    return (vf){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
}

static inline vf vfma(vf a, vf b, vf c)
{
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}

static inline vf vmax(vf a, vf b)
{
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
}

static inline vf vmin(vf a, vf b)
{
    return (vf)_mm512_min_ps((__m512)a, (__m512)b);
}

/* 1 / x from the 14-bit estimate and one Newton step: about 1 ulp */
static inline vf vrcp(vf x)
{
    __m512 r = _mm512_rcp14_ps((__m512)x);
    __m512 e = _mm512_fnmadd_ps((__m512)x, r, _mm512_set1_ps(1.0f));
    return (vf)_mm512_fmadd_ps(e, r, r);
}

#define VAE_F32_SUFFIX avx512
#include "vae_f32_body.h"

#endif /* x86-64 */
