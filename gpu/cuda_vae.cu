/*
 * cuda_vae.cu - the VAE encoder and decoder and the outlier score on the device (twin of
 * engine/cpu/vae.c; engine/model.h describes the network and the score).
 *
 * Three paths compute the latent mean and the reconstruction error of every beat (cuda_vae.h):
 * - warp (the default for the default architecture, cuda_vae_warp.cu): one warp per beat,
 *   every activation in registers, the convolution weights as constant-bank operands.
 * - block (this file; any architecture whose activations fit in shared memory;
 *   ECG_CUDA_VAE=block forces it): a persistent grid of blocks, each carrying one beat at a time
 *   through the whole network in two shared-memory buffers, the weights staged next to them;
 *   only mu and the error leave the block. Memory traffic is the embedding read once, so the
 *   cost is arithmetic, shared-memory loads and barriers.
 * - cuDNN (cuda_vae_cudnn.cu; ECG_CUDA_VAE=cudnn, or an architecture too wide for shared
 *   memory): cuDNN convolutions layer by layer with custom kernels between them.
 * All compute in float (with double sums for the means and the error) and stay within ~1e-6
 * of the CPU's double reference. The logvar head is not needed for scoring and is not computed.
 *
 * The score: the level (median error of the kept beats: a radix sort of a copy, NaN for beats
 * not kept sorting last), then one thread per beat for the RR prematurity (its local median by
 * insertion into at most 128 values) and ecg_score_combine()'s formula. Every beat is encoded
 * (rows of beats not kept are zero) and the score kernel masks those not kept (NaN latent and
 * score, outlier 0).
 *
 * Threads: a block per beat in the block kernel; one thread per beat for the score.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "cuda_internal.h"
#include "cuda_small.cuh"
#include "cuda_vae.h"

struct score_args {
    const double *recon;
    const double *level;     /* device scalar: median recon of the kept beats (NaN if none) */
    const uint8_t *kept;
    const float *rr_ms;
    size_t k;
    int z_dim;
    float *latent, *score;
    uint8_t *outlier;
    uint32_t rr_window;
    double recon_center, recon_scale, rel_center, rel_scale, rr_center, rr_scale, rr_weight;
    double threshold;
};

/* ecg_rr_prematurity() for beat i (ecg_rr_local_median() inlined). */
static __device__ double prematurity(const struct score_args *a, size_t i)
{
    double near[128];
    size_t n = 0;
    float rr = a->rr_ms[i];
    if (!(rr > 0) || !isfinite(rr) || a->rr_window == 0 || a->rr_window > 64)
        return 0.0;
    size_t lo = i > a->rr_window ? i - a->rr_window : 0;
    size_t hi = i + a->rr_window < a->k ? i + a->rr_window : a->k - 1;
    for (size_t j = lo; j <= hi; j++) {
        float v = a->rr_ms[j];
        if (j != i && v > 0 && isfinite(v)) {
            /* insertion keeps near[] sorted */
            size_t t = n++;
            while (t > 0 && near[t - 1] > (double)v) {
                near[t] = near[t - 1];
                t--;
            }
            near[t] = v;
        }
    }
    if (n == 0)
        return 0.0;
    double m = n % 2 ? near[n / 2] : 0.5 * (near[n / 2 - 1] + near[n / 2]);
    return (m - (double)rr) / m;
}

/* recon of beats not kept becomes NaN (they take no part in the level). */
static __global__ void mask_recon_kernel(double *recon, const uint8_t *kept, size_t k,
                                         double *copy)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < k;
         i += (size_t)gridDim.x * blockDim.x) {
        if (!kept[i])
            recon[i] = NAN;
        copy[i] = recon[i];
    }
}

/* ecg_recon_level() from the sorted recon values: NaN (positive, from NAN) sort last. */
static __device__ double level_of_sorted(const double *sorted, size_t k)
{
    size_t lo = 0, hi = k; /* m = the first NaN: finite values come first */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (isnan(sorted[mid]))
            hi = mid;
        else
            lo = mid + 1;
    }
    const size_t m = lo;
    return m == 0 ? NAN : (m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]));
}

static __global__ void level_kernel(const double *sorted, size_t k, double *level)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *level = level_of_sorted(sorted, k);
}

/* Beat i's score and outlier flag (NaN latent and score, no flag, for a beat not kept). */
static __device__ void score_one(const struct score_args *a, size_t i)
{
    if (!a->kept[i]) {
        for (int z = 0; z < a->z_dim; z++)
            a->latent[i * a->z_dim + z] = NAN;
        a->score[i] = NAN;
        a->outlier[i] = 0;
        return;
    }
    /* ecg_score_combine() */
    const double recon = a->recon[i];
    const double prem = prematurity(a, i);
    const double z_abs = (recon - a->recon_center) / a->recon_scale;
    const double z_rel = (recon - *a->level - a->rel_center) / a->rel_scale;
    const double z_rr = (prem - a->rr_center) / a->rr_scale;
    const double z = z_rel > z_abs ? z_rel : z_abs; /* NaN level: z_abs alone */
    const double s = isnan(recon) ? NAN : z + a->rr_weight * (z_rr > 0 ? z_rr : 0);
    a->score[i] = (float)s;
    a->outlier[i] = s > a->threshold;
}

static __global__ void score_kernel(struct score_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.k;
         i += (size_t)gridDim.x * blockDim.x)
        score_one(&a, i);
}

/* The model's calibration, what every score_args carries. */
static void score_calib(const struct ecg_model *model, struct score_args *sa)
{
    sa->z_dim = (int)model->arch.latent_dim;
    sa->rr_window = model->calib.rr_window;
    sa->recon_center = model->calib.recon_center;
    sa->recon_scale = model->calib.recon_scale;
    sa->rel_center = model->calib.rel_center;
    sa->rel_scale = model->calib.rel_scale;
    sa->rr_center = model->calib.rr_center;
    sa->rr_scale = model->calib.rr_scale;
    sa->rr_weight = model->calib.rr_weight;
    sa->threshold = model->calib.threshold;
}

/* Scores every beat from its reconstruction error (recon, k doubles) and the RR column. */
static enum ecg_status launch_score(struct cuda_ctx *ctx, const struct ecg_model *model,
                                   size_t k, double *recon, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct table_layout t;
    struct score_args sa;
    char *table = (char *)ctx->table.ptr;
    size_t temp = 0, keys = (k * sizeof(double) + 255) & ~(size_t)255;
    double *d_copy, *d_sorted, *d_level;
    table_layout(k, model->arch.latent_dim, &t);
    /* the level: median recon of the kept beats, by a radix sort of a copy (scratch is free:
     * the embedding's sort keys are no longer needed) */
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, 2 * keys + 256, err));
    d_copy = (double *)ctx->scratch.ptr;
    d_sorted = (double *)((char *)ctx->scratch.ptr + keys);
    d_level = (double *)((char *)ctx->scratch.ptr + 2 * keys);
    mask_recon_kernel<<<grid_for(k), CUDA_THREADS, 0, ctx->stream>>>(
        recon, (const uint8_t *)(table + t.kept), k, d_copy);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cub::DeviceRadixSort::SortKeys(NULL, temp, d_copy, d_sorted, k, 0, 64,
                                            ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp, err));
    CUDA_TRY(cub::DeviceRadixSort::SortKeys(ctx->cub_temp.ptr, temp, d_copy, d_sorted, k, 0, 64,
                                            ctx->stream));
    level_kernel<<<1, 1, 0, ctx->stream>>>(d_sorted, k, d_level);
    CUDA_LAUNCH_CHECK();
    sa.level = d_level;
    sa.recon = recon;
    sa.kept = (const uint8_t *)(table + t.kept);
    sa.rr_ms = (const float *)(table + t.rr_ms);
    sa.k = k;
    sa.latent = (float *)(table + t.latent);
    sa.score = (float *)(table + t.score);
    sa.outlier = (uint8_t *)(table + t.outlier);
    score_calib(model, &sa);
    score_kernel<<<grid_for(k), CUDA_THREADS, 0, ctx->stream>>>(sa);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* ---------------------------------------------------------------- fused path */

/* The network's shape and weights, by value for the fused kernel. */
struct vae_net {
    const float *w;          /* the model's weights on the device */
    struct ecg_vae_layout ly;
    int l_len, z_dim, enc[3], dec[3];
    int buf;                 /* floats in each of the two shared-memory buffers */
    int staged;              /* floats reserved for weights in shared memory (0: global) */
    int n_weights;
};

/*
 * out[o][t] = b[o] + sum_i sum_k w[o][i][k] * u[i][t + k - 1] for t < t_out (zero outside),
 * u = in, or in upsampled by 2 (nearest) when up2; then swish(alpha) when alpha is given.
 * The block's threads share the outputs; in may be global or shared memory. CIN > 0 fixes the
 * input width at compile time (the loops unroll); CIN == 0 reads it from cin.
 */
template <int CIN>
static __device__ void block_conv3_t(const float *in, int cin, int t_out, bool up2,
                                     const float *w, const float *b, int cout,
                                     const float *alpha, float *out)
{
    const int n_in = CIN > 0 ? CIN : cin;
    const int t_in = up2 ? t_out / 2 : t_out;
    const float a = alpha ? *alpha : 0.0f;
    for (int v = threadIdx.x; v < cout * t_out; v += blockDim.x) {
        const int o = v / t_out, t = v - o * t_out;
        float acc = b[o];
        const int pl = t - 1, pr = t + 1;
        const int il = up2 ? (pl >> 1) : pl, ic = up2 ? (t >> 1) : t, ir = up2 ? (pr >> 1) : pr;
        const bool has_l = pl >= 0, has_r = pr < t_out;
        const float *wk = w + o * n_in * 3;
#pragma unroll
        for (int i = 0; i < (CIN > 0 ? CIN : 1); i++) {
            /* CIN == 0: this runs once and the loop below does the work */
            if (CIN == 0)
                break;
            const float *x = in + i * t_in;
            if (has_l)
                acc += wk[3 * i] * x[il];
            acc += wk[3 * i + 1] * x[ic];
            if (has_r)
                acc += wk[3 * i + 2] * x[ir];
        }
        if (CIN == 0) {
            for (int i = 0; i < n_in; i++) {
                const float *x = in + i * t_in;
                if (has_l)
                    acc += wk[3 * i] * x[il];
                acc += wk[3 * i + 1] * x[ic];
                if (has_r)
                    acc += wk[3 * i + 2] * x[ir];
            }
        }
        out[v] = alpha ? vae_swish(acc, a) : acc;
    }
}

static __device__ void block_conv3(const float *in, int cin, int t_out, bool up2, const float *w,
                                   const float *b, int cout, const float *alpha, float *out)
{
    switch (cin) {
    case 1: block_conv3_t<1>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    case 2: block_conv3_t<2>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    case 4: block_conv3_t<4>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    case 8: block_conv3_t<8>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    case 16: block_conv3_t<16>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    default: block_conv3_t<0>(in, cin, t_out, up2, w, b, cout, alpha, out); break;
    }
}

/* out[c][t] = in[c][2t-1]/4 + in[c][2t]/2 + in[c][2t+1]/4 (zero padding). */
static __device__ void block_blur(const float *in, int c, int t_in, float *out)
{
    const int t_out = t_in / 2;
    for (int v = threadIdx.x; v < c * t_out; v += blockDim.x) {
        const int ch = v / t_out, t = v % t_out;
        const float *x = in + ch * t_in;
        out[v] = (t > 0 ? 0.25f * x[2 * t - 1] : 0.0f) + 0.5f * x[2 * t] + 0.25f * x[2 * t + 1];
    }
}

/*
 * One beat at a time per block (grid-stride over beats): the whole encoder, the mean of the mu
 * head, the decoder on mu and the reconstruction error, in two shared-memory buffers; nothing
 * but the latent mean and the error leaves the block. (Carrying two beats per pass, to halve
 * the barriers per beat, measured slower on H100: 2.40 ms against 1.99 ms for 70 k beats.)
 */
static __global__ void vae_fused_kernel(struct vae_net net, const float *emb, size_t k,
                                        float *latent, double *recon)
{
    extern __shared__ float smem[];
    float *w_local = smem;                         /* the weights, when staged */
    float *buf_a = smem + net.staged, *buf_b = buf_a + net.buf;
    float *mu = buf_b + net.buf;
    double *partial = (double *)(mu + ((net.z_dim + 1) & ~1));
    const float *w = net.w;
    if (net.staged) {
        /* every warp reads each weight many times per beat: keep them next to the SMs */
        for (int i = threadIdx.x; i < net.n_weights; i += blockDim.x)
            w_local[i] = net.w[i];
        __syncthreads();
        w = w_local;
    }
    const struct ecg_vae_layout *ly = &net.ly;
    const int l_len = net.l_len, t3 = l_len / 8;
    for (size_t beat = blockIdx.x; beat < k; beat += gridDim.x) {
        const float *x = emb + beat * l_len;
        /* encoder */
        block_conv3(x, 1, l_len, false, w + ly->enc_w[0], w + ly->enc_b[0], net.enc[0],
                    w + ly->enc_alpha[0], buf_b);
        __syncthreads();
        block_blur(buf_b, net.enc[0], l_len, buf_a);
        __syncthreads();
        block_conv3(buf_a, net.enc[0], l_len / 2, false, w + ly->enc_w[1], w + ly->enc_b[1],
                    net.enc[1], w + ly->enc_alpha[1], buf_b);
        __syncthreads();
        block_blur(buf_b, net.enc[1], l_len / 2, buf_a);
        __syncthreads();
        block_conv3(buf_a, net.enc[1], l_len / 4, false, w + ly->enc_w[2], w + ly->enc_b[2],
                    net.enc[2], w + ly->enc_alpha[2], buf_b);
        __syncthreads();
        block_blur(buf_b, net.enc[2], l_len / 4, buf_a);
        __syncthreads();
        block_conv3(buf_a, net.enc[2], t3, false, w + ly->mu_w, w + ly->mu_b, net.z_dim, NULL,
                    buf_b);
        __syncthreads();
        for (int z = threadIdx.x; z < net.z_dim; z += blockDim.x) {
            double sum = 0.0;
            for (int t = 0; t < t3; t++)
                sum += (double)buf_b[z * t3 + t];
            mu[z] = (float)(sum / (double)t3);
            latent[beat * net.z_dim + z] = mu[z];
        }
        __syncthreads();
        /* decoder: linear layer, then three upsampling convolutions */
        for (int j = threadIdx.x; j < net.dec[0] * t3; j += blockDim.x) {
            float acc = w[ly->fc_b + j];
            for (int q = 0; q < net.z_dim; q++)
                acc += w[ly->fc_w + (size_t)j * net.z_dim + q] * mu[q];
            buf_a[j] = acc;
        }
        __syncthreads();
        block_conv3(buf_a, net.dec[0], l_len / 4, true, w + ly->dec_w[0], w + ly->dec_b[0],
                    net.dec[1], w + ly->dec_alpha[0], buf_b);
        __syncthreads();
        block_conv3(buf_b, net.dec[1], l_len / 2, true, w + ly->dec_w[1], w + ly->dec_b[1],
                    net.dec[2], w + ly->dec_alpha[1], buf_a);
        __syncthreads();
        block_conv3(buf_a, net.dec[2], l_len, true, w + ly->dec_w[2], w + ly->dec_b[2], 1, NULL,
                    buf_b);
        __syncthreads();
        /* reconstruction error: block reduction in double */
        double sum = 0.0;
        for (int t = threadIdx.x; t < l_len; t += blockDim.x) {
            double d = (double)buf_b[t] - (double)x[t];
            sum += d * d;
        }
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if ((threadIdx.x & 31) == 0)
            partial[threadIdx.x >> 5] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            double total = 0.0;
            for (unsigned q = 0; q < blockDim.x >> 5; q++)
                total += partial[q];
            recon[beat] = log(total / (double)l_len + 1e-6);
        }
        __syncthreads();
    }
}

#define VAE_FUSED_THREADS 128

/* Shared memory the fused kernel needs for arch, or 0 when it would not fit. */
static size_t fused_smem_bytes(const struct ecg_vae_arch *arch, int *buf_floats)
{
    size_t l = arch->beat_len, widest = l; /* the reconstruction */
    size_t sizes[] = {arch->enc[0] * l, arch->enc[1] * (l / 2), arch->enc[2] * (l / 4),
                      (size_t)arch->latent_dim * (l / 8), arch->dec[0] * (l / 8),
                      arch->dec[1] * (l / 4), arch->dec[2] * (l / 2)};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > widest)
            widest = sizes[i];
    size_t bytes = 2 * widest * sizeof(float) + (arch->latent_dim + 2) * sizeof(float) +
                   (VAE_FUSED_THREADS / 32) * sizeof(double) + 16;
    *buf_floats = (int)widest;
    return bytes <= 48 * 1024 ? bytes : 0;
}

/* Weights worth staging in shared memory next to the activations (an even count keeps the
 * buffers after them 8-byte aligned), or 0 when they would not fit. */
static int fused_staged_weights(size_t n_weights, size_t act_bytes)
{
    size_t even = (n_weights + 1) & ~(size_t)1;
    return act_bytes + even * sizeof(float) <= 48 * 1024 ? (int)even : 0;
}

static enum ecg_status encode_fused(struct cuda_ctx *ctx, size_t smem, int buf_floats,
                                    bool warp, double **recon_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const struct ecg_model *model = ctx->state->model;
    const size_t k = ctx->n_beats;
    struct vae_net net;
    struct table_layout t;
    double *recon;
    unsigned blocks;
    net.w = ctx->dev->model.d_weights;
    net.ly = model->layout;
    net.l_len = (int)model->arch.beat_len;
    net.z_dim = (int)model->arch.latent_dim;
    for (int i = 0; i < 3; i++) {
        net.enc[i] = (int)model->arch.enc[i];
        net.dec[i] = (int)model->arch.dec[i];
    }
    net.buf = buf_floats;
    net.n_weights = (int)model->layout.n_weights;
    net.staged = fused_staged_weights(model->layout.n_weights, smem);
    smem += (size_t)net.staged * sizeof(float);
    ECG_TRY(dbuf_reserve(ctx, &ctx->vae_work, k * sizeof(double), err));
    recon = (double *)ctx->vae_work.ptr;
    table_layout(k, (size_t)net.z_dim, &t);
    if (warp) {
        ECG_TRY(vae_warp_launch(ctx, k, (float *)((char *)ctx->table.ptr + t.latent), recon,
                                err));
    } else {
        /* a persistent grid: each block stages the weights once and then loops over beats */
        blocks = (unsigned)(ctx->dev->sm_count * 8);
        if ((size_t)blocks > k)
            blocks = (unsigned)k;
        vae_fused_kernel<<<blocks, VAE_FUSED_THREADS, smem, ctx->stream>>>(
            net, (const float *)ctx->emb.ptr, k, (float *)((char *)ctx->table.ptr + t.latent),
            recon);
        CUDA_LAUNCH_CHECK();
    }
    *recon_out = recon;
out:
    return status;
}

/* Prints the network's and the score's device time (ECG_CUDA_PROFILE), then destroys ev. */
static void profile_report(cudaEvent_t ev[3], const char *path, size_t k)
{
    float net_ms = 0.0f, score_ms = 0.0f;
    if (cudaEventElapsedTime(&net_ms, ev[0], ev[1]) == cudaSuccess &&
        cudaEventElapsedTime(&score_ms, ev[1], ev[2]) == cudaSuccess)
        fprintf(stderr, "cuda vae profile: %zu beats, %s network %.3f ms, score %.3f ms\n", k,
                path, net_ms, score_ms);
    (void)cudaGetLastError();
    for (int i = 0; i < 3; i++)
        (void)cudaEventDestroy(ev[i]);
}

/* Whether cuda_encode on a context of this engine may be captured into a CUDA graph (batches,
 * cuda_batch.cu): a fused path (warp or block: launches only, nothing the host waits for), not
 * cuDNN (its handle and work space are made on first use) and no ECG_CUDA_PROFILE timers. */
bool cuda_encode_capturable(const struct ecg_model *model)
{
    const char *force = getenv("ECG_CUDA_VAE");
    int buf_floats = 0;
    if (!model || getenv("ECG_CUDA_PROFILE") || (force && !strcmp(force, "cudnn")))
        return false;
    return fused_smem_bytes(&model->arch, &buf_floats) != 0;
}

/* ---------------------------------------------------------------- batched backs */

/*
 * The score of the members of a batched back, a block each: the level from the masked errors
 * in CUB's radix order (as the device-wide sort of launch_score), then score_one per beat, with
 * the kept beats' latents copied from the batch's slots to the member's table, where its own
 * VAE would have put them. A member has at most SMALL_BACK_BEATS beats, so the order is taken
 * by rank instead of by a radix sort (sixteen passes over 64-bit keys, each waiting on its
 * block scan): each beat's rank is the number of beats before it in that order, ties broken by
 * index, as the stable radix sort breaks them; its value goes to its rank. The same sorted
 * values, so the same level, bit for bit.
 */
#define SCORE_SMALL_THREADS 256

/* A double's place in CUB's radix order for doubles (its TwiddleIn): the bits, sign flipped,
 * or every bit flipped for a negative sign; compared as unsigned integers. */
static __device__ __forceinline__ unsigned long long radix_order(double v)
{
    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
    return bits >> 63 ? ~bits : bits | 0x8000000000000000ull;
}

static __global__ void __launch_bounds__(SCORE_SMALL_THREADS)
    score_batch_kernel(const struct small_back *members, struct score_args base,
                       const float *latents, const double *recons)
{
    __shared__ unsigned long long order[SMALL_BACK_BEATS];
    __shared__ double sorted[SMALL_BACK_BEATS];
    __shared__ double level;
    pdl_step_begin();
    const struct small_back *m = &members[blockIdx.y];
    if (!m->encode)
        return; /* the whole block */
    const size_t k = (size_t)m->counts[2];
    struct table_layout t;
    struct score_args a = base;
    table_layout(k, (size_t)base.z_dim, &t);
    a.recon = recons + m->slot;
    a.kept = (const uint8_t *)(m->table + t.kept);
    a.rr_ms = (const float *)(m->table + t.rr_ms);
    a.k = k;
    a.latent = (float *)(m->table + t.latent);
    a.score = (float *)(m->table + t.score);
    a.outlier = (uint8_t *)(m->table + t.outlier);
    a.level = &level;
    for (size_t i = threadIdx.x; i < k; i += SCORE_SMALL_THREADS)
        order[i] = radix_order(a.kept[i] ? a.recon[i] : NAN);
    __syncthreads();
    for (size_t i = threadIdx.x; i < k; i += SCORE_SMALL_THREADS) {
        const unsigned long long key = order[i];
        size_t rank = 0;
        for (size_t j = 0; j < k; j++)
            rank += order[j] < key || (order[j] == key && j < i);
        sorted[rank] = a.kept[i] ? a.recon[i] : NAN;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        level = level_of_sorted(sorted, k);
    __syncthreads();
    for (size_t i = threadIdx.x; i < k; i += blockDim.x) {
        if (a.kept[i])
            for (int z = 0; z < a.z_dim; z++)
                a.latent[i * a.z_dim + z] = latents[(m->slot + i) * a.z_dim + z];
        score_one(&a, i);
    }
}

/* Whether a batched back can encode with this model: the warp path, as cuda_encode takes it
 * (the default architecture, not forced elsewhere, no profile timers). */
bool cuda_encode_batchable(const struct ecg_model *model)
{
    const char *force = getenv("ECG_CUDA_VAE");
    return cuda_encode_capturable(model) && vae_warp_supports(&model->arch) &&
           !(force && (!strcmp(force, "block") || !strcmp(force, "cudnn")));
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_encode(cudaStream_t stream, const struct cuda_device *dev,
                                   const struct ecg_model *model,
                                   const struct small_back *members, size_t k, size_t slots,
                                   const float *emb, float *latent, double *recon,
                                   cudaEvent_t mark, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct score_args base;
    memset(&base, 0, sizeof base);
    score_calib(model, &base);
    status = vae_warp_launch_on(stream, dev, model, emb, slots, latent, recon, err);
    if (status != ECG_OK)
        return status;
    if (mark)
        small_mark(mark, stream);
    CUDA_TRY(pdl_launch(dim3(1, (unsigned)k), SCORE_SMALL_THREADS, 0, stream, score_batch_kernel,
                        members, base, (const float *)latent, (const double *)recon));
out:
    return status;
}

/*
 * The path: the warp-per-beat kernel (cuda_vae_warp.cu) for the default architecture, else the
 * block-per-beat fused kernel when the activations fit in shared memory, else cuDNN layer by
 * layer. ECG_CUDA_VAE=block or =cudnn forces one of the latter two (tests and benchmarks
 * compare them).
 */
extern "C" enum ecg_status cuda_encode(void *ctx_ptr, const struct ecg_plan *plan,
                                       struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    const struct ecg_model *model = ctx->state->model;
    const char *force = getenv("ECG_CUDA_VAE");
    const bool profile = getenv("ECG_CUDA_PROFILE") != NULL;
    cudaEvent_t ev[3] = {NULL, NULL, NULL};
    const char *path;
    double *recon = NULL;
    size_t smem;
    int buf_floats = 0;
    ECG_TRY(ctx_enter(ctx, err));
    ctx->encoded = false;
    if (!model || !ctx->dev->model.d_weights) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal", "cuda_encode: no model");
        goto out;
    }
    if (ctx->n_beats == 0) {
        ctx->encoded = true;
        goto out;
    }
    if (plan->beat_len != model->arch.beat_len || ctx->emb_len != ctx->n_beats * plan->beat_len) {
        status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                          "cuda_encode: embedding of %zu values for %zu beats of %u",
                          ctx->emb_len, ctx->n_beats, plan->beat_len);
        goto out;
    }
    if (profile) {
        for (int i = 0; i < 3; i++)
            CUDA_TRY(cudaEventCreate(&ev[i]));
        CUDA_TRY(cudaEventRecord(ev[0], ctx->stream));
    }
    smem = fused_smem_bytes(&model->arch, &buf_floats);
    if (force && !strcmp(force, "cudnn"))
        smem = 0;
    if (smem && vae_warp_supports(&model->arch) && !(force && !strcmp(force, "block"))) {
        path = "warp";
        ECG_TRY(encode_fused(ctx, smem, buf_floats, true, &recon, err));
    } else if (smem) {
        path = "block";
        ECG_TRY(encode_fused(ctx, smem, buf_floats, false, &recon, err));
    } else {
        path = "cudnn";
        if (!ctx->cudnn) { /* a batch's context makes its handle when it first needs it */
            CUDNN_TRY(cudnnCreate(&ctx->cudnn));
            CUDNN_TRY(cudnnSetStream(ctx->cudnn, ctx->stream));
        }
        ECG_TRY(encode_cudnn(ctx, plan, &recon, err));
    }
    if (profile)
        CUDA_TRY(cudaEventRecord(ev[1], ctx->stream));
    ECG_TRY(launch_score(ctx, model, ctx->n_beats, recon, err));
    if (profile)
        CUDA_TRY(cudaEventRecord(ev[2], ctx->stream));
    ECG_TRY(ctx_stage_done(ctx, "encode", err));
    ctx->encoded = true;
    if (profile) {
        profile_report(ev, path, ctx->n_beats);
        ev[0] = NULL;
    }
out:
    if (ev[0])
        for (int i = 0; i < 3; i++)
            if (ev[i])
                (void)cudaEventDestroy(ev[i]);
    return status;
}
