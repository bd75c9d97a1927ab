/*
 * vae_f32_avx2.c - the float32 VAE kernels (vae_f32_body.h) compiled for AVX2 with fused
 * multiply-adds. Called only where the CPU reports both (vae_f32.c checks at run time); the
 * rest of the build keeps its baseline ISA.
 */
#include <stdint.h>

#include "vae_f32.h"

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC target("avx2,fma")
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

/* 1 / x from the 12-bit estimate and one Newton step: ~1 ulp, a third of a division's time */
static inline vf vrcp(vf x)
{
    __m256 r = _mm256_rcp_ps((__m256)x);
    __m256 e = _mm256_fnmadd_ps((__m256)x, r, _mm256_set1_ps(1.0f));
    return (vf)_mm256_fmadd_ps(e, r, r);
}

#define VAE_F32_SUFFIX avx2
#include "vae_f32_body.h"

#endif /* x86 */
