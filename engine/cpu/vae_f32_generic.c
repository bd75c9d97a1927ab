/*
 * vae_f32_generic.c - the float32 VAE kernels (vae_f32_body.h) for the build's baseline ISA:
 * GCC's generic vectors, lowered to whatever SIMD the target has (SSE on x86-64, NEON on arm64)
 * or to scalar code. Multiply and add are separate operations here (ISO C contracts nothing).
 */
#include <stdint.h>

#include "vae_f32.h"

/* 32-byte vectors cross only static inline functions here, never an ABI boundary: the Makefile
 * builds this file with -Wno-psabi (GCC notes the ABI of such arguments even under a pragma) */
#include "vae_f32_lanes8.h"

static inline vf vfma(vf a, vf b, vf c)
{
    return a * b + c;
}

/* Lane-wise selects through the comparison masks (-1 where true). */
static inline vf vmax(vf a, vf b)
{
    vi a_wins = a > b;
    return (vf)((a_wins & (vi)a) | (~a_wins & (vi)b));
}

static inline vf vmin(vf a, vf b)
{
    vi a_wins = a < b;
    return (vf)((a_wins & (vi)a) | (~a_wins & (vi)b));
}

static inline vf vrcp(vf x)
{
    return (vf){1, 1, 1, 1, 1, 1, 1, 1} / x;
}

#define VAE_F32_SUFFIX generic
#include "vae_f32_body.h"
