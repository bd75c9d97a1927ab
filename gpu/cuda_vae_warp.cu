/*
 * cuda_vae_warp.cu - the VAE of the default architecture (L = 256, Z = 2, encoder 4 8 16,
 * decoder 8 4 2; engine/model.h) with one warp per beat and every activation in registers.
 *
 * Why a second fused kernel: the block-per-beat kernel of cuda_vae.cu keeps activations in
 * shared memory, so each multiply-add costs one or two shared-memory loads and every layer a
 * barrier; on an H100 that bound it at ~2 ms for 70k beats while the network needs only ~54k
 * multiply-adds per beat (~10 GFLOP for 90k beats, ~0.15 ms of FP32 peak). Here lane j of the
 * warp owns time positions [8j, 8j + 8) of the beat, [4j, 4j + 4) after the first blur, and so on
 * down to position j after the third: a layer reads its inputs from the lane's own registers and
 * takes the one neighbouring position on each side from the next lane with a shuffle. The
 * convolution weights (756 floats, 3 KB) travel in the kernel's parameter space
 * (__grid_constant__), so with every loop unrolled each multiply-add reads its weight as a
 * constant-bank operand: no load instruction at all. Only the linear layer's weights, indexed
 * by lane, come from global memory.
 *
 * The arithmetic is the block kernel's, operation for operation (same float accumulation order,
 * zero padding as adding a product with zero); only the mean over time of the mu head and the
 * error sum, in double, are summed as a tree instead of in order.
 *
 * Threads: one warp per beat, grid-stride over beats, 256 threads per block.
 */
#include <math.h>

#include "cuda_internal.h"
#include "cuda_pdl.cuh"
#include "cuda_vae.h"

namespace {

/* The default architecture, fixed at compile time so that every loop unrolls. */
constexpr int L = 256, Z = 2, E0 = 4, E1 = 8, E2 = 16, D0 = 8, D1 = 4, D2 = 2;
constexpr int WARP = 32;
constexpr int T3 = L / 8;        /* positions after the third blur: one per lane */
constexpr int THREADS = 256;
static_assert(T3 == WARP, "the layout puts one position per lane at the deepest level");

/* The convolution weights and biases, [out][in][3] as in the model file. */
struct warp_weights {
    float enc_w0[E0][1][3], enc_b0[E0], enc_a0;
    float enc_w1[E1][E0][3], enc_b1[E1], enc_a1;
    float enc_w2[E2][E1][3], enc_b2[E2], enc_a2;
    float mu_w[Z][E2][3], mu_b[Z];
    float dec_w0[D1][D0][3], dec_b0[D1], dec_a0;
    float dec_w1[D2][D1][3], dec_b1[D2], dec_a1;
    float dec_w2[1][D2][3], dec_b2[1];
};

struct warp_args {
    struct warp_weights w;
    const float *fc_w, *fc_b;    /* [D0 * T3][Z] and [D0 * T3], device */
    const float *emb;            /* [k][L] */
    size_t k;
    float *latent;               /* [k][Z] */
    double *recon;               /* [k] */
};

/* Value of the previous lane (0 for lane 0: the zero padding left of the beat). */
__device__ __forceinline__ float from_left(float v, unsigned lane)
{
    float u = __shfl_up_sync(0xffffffffu, v, 1);
    return lane == 0 ? 0.0f : u;
}

/* Value of the next lane (0 for the last lane: the zero padding right of the beat). */
__device__ __forceinline__ float from_right(float v, unsigned lane)
{
    float u = __shfl_down_sync(0xffffffffu, v, 1);
    return lane == WARP - 1 ? 0.0f : u;
}

/*
 * Kernel-3 convolution with padding 1 of in [CIN][PIN] (this lane's positions), the input
 * upsampled by 2 (nearest) first when UP: out [COUT][P], P = PIN or 2 PIN. When SWISH, out
 * becomes swish(out, alpha). Same accumulation order as block_conv3_t in cuda_vae.cu.
 */
template <int CIN, int COUT, int PIN, bool UP, bool SWISH>
__device__ __forceinline__ void conv3(const float (&in)[CIN][PIN], const float (&w)[COUT][CIN][3],
                                      const float (&b)[COUT], float alpha, unsigned lane,
                                      float (&out)[COUT][UP ? 2 * PIN : PIN])
{
    constexpr int P = UP ? 2 * PIN : PIN;
    float left[CIN], right[CIN];
#pragma unroll
    for (int i = 0; i < CIN; i++) {
        left[i] = from_left(in[i][PIN - 1], lane);
        right[i] = from_right(in[i][0], lane);
    }
#pragma unroll
    for (int o = 0; o < COUT; o++) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            float acc = b[o];
#pragma unroll
            for (int i = 0; i < CIN; i++) {
                const float xl = p == 0 ? left[i] : in[i][UP ? (p - 1) / 2 : p - 1];
                const float xc = in[i][UP ? p / 2 : p];
                const float xr = p == P - 1 ? right[i] : in[i][UP ? (p + 1) / 2 : p + 1];
                acc += w[o][i][0] * xl;
                acc += w[o][i][1] * xc;
                acc += w[o][i][2] * xr;
            }
            out[o][p] = SWISH ? vae_swish(acc, alpha) : acc;
        }
    }
}

/* The [1 2 1]/4 blur with stride 2 and zero padding: in [C][P] -> out [C][P / 2]. */
template <int C, int P>
__device__ __forceinline__ void blur2(const float (&in)[C][P], unsigned lane,
                                      float (&out)[C][P / 2])
{
#pragma unroll
    for (int c = 0; c < C; c++) {
        const float left = from_left(in[c][P - 1], lane);
#pragma unroll
        for (int m = 0; m < P / 2; m++) {
            const float l = m == 0 ? left : in[c][2 * m - 1];
            out[c][m] = 0.25f * l + 0.5f * in[c][2 * m] + 0.25f * in[c][2 * m + 1];
        }
    }
}

__device__ __forceinline__ double warp_sum(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(THREADS) vae_warp_kernel(const __grid_constant__ warp_args a)
{
    pdl_step_begin(); /* launched as the batched pass's next step (cuda_pdl.cuh) */
    const struct warp_weights &w = a.w;
    const unsigned lane = threadIdx.x & (WARP - 1);
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / WARP;
    const size_t n_warps = (size_t)gridDim.x * blockDim.x / WARP;
    for (size_t beat = warp; beat < a.k; beat += n_warps) {
        /* this lane's 8 samples */
        float x[1][L / WARP];
        const float4 *src = (const float4 *)(a.emb + beat * L + lane * (L / WARP));
        const float4 v0 = __ldg(src), v1 = __ldg(src + 1);
        x[0][0] = v0.x, x[0][1] = v0.y, x[0][2] = v0.z, x[0][3] = v0.w;
        x[0][4] = v1.x, x[0][5] = v1.y, x[0][6] = v1.z, x[0][7] = v1.w;

        /* encoder: 8 -> 4 -> 2 -> 1 positions per lane */
        float h0[E0][8], g0[E0][4];
        conv3<1, E0, 8, false, true>(x, w.enc_w0, w.enc_b0, w.enc_a0, lane, h0);
        blur2<E0, 8>(h0, lane, g0);
        float h1[E1][4], g1[E1][2];
        conv3<E0, E1, 4, false, true>(g0, w.enc_w1, w.enc_b1, w.enc_a1, lane, h1);
        blur2<E1, 4>(h1, lane, g1);
        float h2[E2][2], g2[E2][1];
        conv3<E1, E2, 2, false, true>(g1, w.enc_w2, w.enc_b2, w.enc_a2, lane, h2);
        blur2<E2, 2>(h2, lane, g2);
        float head[Z][1];
        conv3<E2, Z, 1, false, false>(g2, w.mu_w, w.mu_b, 0.0f, lane, head);
        float mu[Z];
#pragma unroll
        for (int z = 0; z < Z; z++)
            mu[z] = (float)(warp_sum((double)head[z][0]) / (double)T3);
        if (lane < Z)
            a.latent[beat * Z + lane] = lane == 0 ? mu[0] : mu[1];

        /* decoder: the linear layer at position lane, then 1 -> 2 -> 4 -> 8 positions */
        float d0[D0][1];
#pragma unroll
        for (int c = 0; c < D0; c++) {
            const int j = c * T3 + (int)lane;
            float acc = __ldg(a.fc_b + j);
#pragma unroll
            for (int q = 0; q < Z; q++)
                acc += __ldg(a.fc_w + (size_t)j * Z + q) * mu[q];
            d0[c][0] = acc;
        }
        float e0[D1][2];
        conv3<D0, D1, 1, true, true>(d0, w.dec_w0, w.dec_b0, w.dec_a0, lane, e0);
        float e1[D2][4];
        conv3<D1, D2, 2, true, true>(e0, w.dec_w1, w.dec_b1, w.dec_a1, lane, e1);
        float r[1][8];
        conv3<D2, 1, 4, true, false>(e1, w.dec_w2, w.dec_b2, 0.0f, lane, r);

        /* reconstruction error */
        double sum = 0.0;
#pragma unroll
        for (int p = 0; p < 8; p++) {
            const double d = (double)r[0][p] - (double)x[0][p];
            sum += d * d;
        }
        sum = warp_sum(sum);
        if (lane == 0)
            a.recon[beat] = log(sum / (double)L + 1e-6);
    }
}

/* Copies n floats of the model's weights at offset off into dst. */
void take(const struct ecg_model *model, size_t off, float *dst, size_t n)
{
    memcpy(dst, model->weights + off, n * sizeof(float));
}

} /* namespace */

bool vae_warp_supports(const struct ecg_vae_arch *arch)
{
    return arch->beat_len == L && arch->latent_dim == Z && arch->enc[0] == E0 &&
           arch->enc[1] == E1 && arch->enc[2] == E2 && arch->dec[0] == D0 &&
           arch->dec[1] == D1 && arch->dec[2] == D2;
}

int vae_warp_blocks_per_sm(void)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vae_warp_kernel, THREADS, 0) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return per_sm > 0 ? per_sm : 1;
}

enum ecg_status vae_warp_launch(struct cuda_ctx *ctx, size_t k, float *latent, double *recon,
                                struct ecg_error *err)
{
    return vae_warp_launch_on(ctx->stream, ctx->dev, ctx->state->model,
                              (const float *)ctx->emb.ptr, k, latent, recon, err);
}

enum ecg_status vae_warp_launch_on(cudaStream_t stream, const struct cuda_device *dev,
                                   const struct ecg_model *model, const float *emb, size_t k,
                                   float *latent, double *recon, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const struct ecg_vae_layout *ly = &model->layout;
    struct warp_args a;
    struct warp_weights *w = &a.w;
    int per_sm = 0;
    size_t blocks;
    take(model, ly->enc_w[0], &w->enc_w0[0][0][0], sizeof w->enc_w0 / sizeof(float));
    take(model, ly->enc_b[0], w->enc_b0, E0);
    take(model, ly->enc_alpha[0], &w->enc_a0, 1);
    take(model, ly->enc_w[1], &w->enc_w1[0][0][0], sizeof w->enc_w1 / sizeof(float));
    take(model, ly->enc_b[1], w->enc_b1, E1);
    take(model, ly->enc_alpha[1], &w->enc_a1, 1);
    take(model, ly->enc_w[2], &w->enc_w2[0][0][0], sizeof w->enc_w2 / sizeof(float));
    take(model, ly->enc_b[2], w->enc_b2, E2);
    take(model, ly->enc_alpha[2], &w->enc_a2, 1);
    take(model, ly->mu_w, &w->mu_w[0][0][0], sizeof w->mu_w / sizeof(float));
    take(model, ly->mu_b, w->mu_b, Z);
    take(model, ly->dec_w[0], &w->dec_w0[0][0][0], sizeof w->dec_w0 / sizeof(float));
    take(model, ly->dec_b[0], w->dec_b0, D1);
    take(model, ly->dec_alpha[0], &w->dec_a0, 1);
    take(model, ly->dec_w[1], &w->dec_w1[0][0][0], sizeof w->dec_w1 / sizeof(float));
    take(model, ly->dec_b[1], w->dec_b1, D2);
    take(model, ly->dec_alpha[1], &w->dec_a1, 1);
    take(model, ly->dec_w[2], &w->dec_w2[0][0][0], sizeof w->dec_w2 / sizeof(float));
    take(model, ly->dec_b[2], w->dec_b2, 1);
    a.fc_w = dev->model.d_weights + ly->fc_w;
    a.fc_b = dev->model.d_weights + ly->fc_b;
    a.emb = emb;
    a.k = k;
    a.latent = latent;
    a.recon = recon;
    /* as many blocks as stay resident (one wave), fewer when there are fewer beats; the
     * occupancy is the device's, asked once (device_init), not per launch */
    per_sm = dev->vae_warp_per_sm;
    blocks = (size_t)(per_sm > 0 ? per_sm : 1) * (size_t)dev->sm_count;
    if (blocks > (k + THREADS / WARP - 1) / (THREADS / WARP))
        blocks = (k + THREADS / WARP - 1) / (THREADS / WARP);
    CUDA_TRY(pdl_launch((unsigned)blocks, THREADS, 0, stream, vae_warp_kernel, a));
out:
    return status;
}
