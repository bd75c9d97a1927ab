/*
 * vae_f32_avx512vl.c - the float32 VAE kernels (vae_f32_body.h) with 8-lane vectors and the
 * AVX-512 instruction forms: the groups of at most 8 beats (a short request, a request's last
 * few beats) where the AVX-512 kernels are chosen, at half the cost of a 16-lane group. Same
 * operations as vae_f32_avx512.c lane for lane (the same 14-bit reciprocal estimate, then one
 * Newton step), so a beat gets the same bits whichever of the two ran it (tests/unit/test_vae.c
 * checks it).
 */
#include <stdint.h>

#include "vae_f32.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512vl,fma")
#include <immintrin.h>

#include "vae_f32_lanes8.h"

static inline vf vfma(vf a, vf b, vf c)
{
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}

static inline vf vmax(vf a, vf b)
{
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
}

static inline vf vmin(vf a, vf b)
{
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
}

static inline vf vrcp(vf x)
{
    __m256 r = _mm256_rcp14_ps((__m256)x);
    __m256 e = _mm256_fnmadd_ps((__m256)x, r, _mm256_set1_ps(1.0f));
    return (vf)_mm256_fmadd_ps(e, r, r);
}

#define VAE_F32_SUFFIX avx512vl
#include "vae_f32_body.h"

#endif /* x86-64 */
