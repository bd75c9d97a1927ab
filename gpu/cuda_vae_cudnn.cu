/*
 * cuda_vae_cudnn.cu - the VAE layer by layer: the seven 1-D convolutions (kernel 3, padding 1)
 * as cuDNN 2-D convolutions on NCHW tensors with H = 1 (cudnnConvolutionForward, FMA math only:
 * no TF32), in chunks of VAE_CHUNK beats, with custom kernels between them for what cuDNN has no
 * operation for: bias + Swish + the [1 2 1]/4 blur with stride 2, nearest upsampling by 2, the
 * mean over time of the mu head, the linear layer, and the reconstruction error. The path of
 * architectures too wide for the fused kernels, and ECG_CUDA_VAE=cudnn (cuda_vae.cu chooses).
 *
 * Threads: one per output value in the elementwise kernels; one warp per beat for the error.
 */
#include <math.h>
#include <string.h>

#include "cuda_vae.h"

#define VAE_CHUNK 32768
#define VAE_LAYERS 7 /* enc0 enc1 enc2 mu dec0 dec1 dec2 */

struct conv_layer {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws_bytes;
    const float *d_w;
    int cin, cout, width;
};

/* (n, c, t) of out [N][C][W/2]: blur/2 of vae_swish(in + bias). */
static __global__ void swish_blur_kernel(const float *in, const float *bias, const float *alpha,
                                         size_t n, int c, int w, float *out)
{
    const int w_out = w / 2;
    const size_t total = n * (size_t)c * w_out;
    const float a = *alpha;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(v % w_out);
        size_t row = v / w_out; /* n * C + ch */
        int ch = (int)(row % c);
        const float *x = in + row * w;
        const float b = bias[ch];
        float centre = vae_swish(x[2 * t] + b, a), right = vae_swish(x[2 * t + 1] + b, a);
        float left = t > 0 ? vae_swish(x[2 * t - 1] + b, a) : 0.0f;
        out[v] = 0.25f * left + 0.5f * centre + 0.25f * right;
    }
}

/* (n, z): mu = bias + mean over time of the head's convolution. */
static __global__ void mean_kernel(const float *in, const float *bias, size_t n, int z_dim,
                                   int t3, float *mu)
{
    const size_t total = n * (size_t)z_dim;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x) {
        const float *x = in + v * t3;
        double sum = 0.0;
        for (int t = 0; t < t3; t++)
            sum += (double)x[t];
        mu[v] = (float)((double)bias[v % z_dim] + sum / (double)t3);
    }
}

/* (n, c, p) of out [N][d0][2 * T3]: the linear layer on mu, upsampled by 2. */
static __global__ void fc_up_kernel(const float *mu, const float *fc_w, const float *fc_b,
                                    size_t n, int z_dim, int d0, int t3, float *out)
{
    const int w_out = 2 * t3;
    const size_t total = n * (size_t)d0 * w_out;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(v % w_out);
        size_t row = v / w_out;
        int ch = (int)(row % d0);
        size_t beat = row / d0;
        int j = ch * t3 + p / 2;
        float acc = fc_b[j];
        for (int k = 0; k < z_dim; k++)
            acc += fc_w[(size_t)j * z_dim + k] * mu[beat * z_dim + k];
        out[v] = acc;
    }
}

/* (n, c, p) of out [N][C][2W]: nearest upsampling of vae_swish(in + bias). */
static __global__ void swish_up_kernel(const float *in, const float *bias, const float *alpha,
                                       size_t n, int c, int w, float *out)
{
    const int w_out = 2 * w;
    const size_t total = n * (size_t)c * w_out;
    const float a = *alpha;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(v % w_out);
        size_t row = v / w_out;
        int ch = (int)(row % c);
        out[v] = vae_swish(in[row * w + p / 2] + bias[ch], a);
    }
}

/* One warp per beat: recon = log(mean_t (r_t - x_t)^2 + 1e-6), r = in + bias. */
static __global__ void recon_kernel(const float *in, const float *bias, const float *x, size_t n,
                                    int l_len, double *recon)
{
    const unsigned lane = threadIdx.x & 31u;
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    const size_t n_warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    const float b = bias[0];
    for (size_t i = warp; i < n; i += n_warps) {
        double sum = 0.0;
        for (int t = (int)lane; t < l_len; t += 32) {
            double d = (double)(in[i * l_len + t] + b) - (double)x[i * l_len + t];
            sum += d * d;
        }
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0)
            recon[i] = log(sum / (double)l_len + 1e-6);
    }
}

/* ---------------------------------------------------------------- cuDNN layers */

static void layer_fini(struct conv_layer *l)
{
    if (l->x)
        (void)cudnnDestroyTensorDescriptor(l->x);
    if (l->y)
        (void)cudnnDestroyTensorDescriptor(l->y);
    if (l->w)
        (void)cudnnDestroyFilterDescriptor(l->w);
    if (l->conv)
        (void)cudnnDestroyConvolutionDescriptor(l->conv);
    memset(l, 0, sizeof *l);
}

static enum ecg_status layer_init(struct conv_layer *l, const float *d_w, int cin, int cout,
                                  int width, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    memset(l, 0, sizeof *l);
    l->d_w = d_w;
    l->cin = cin;
    l->cout = cout;
    l->width = width;
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->x));
    CUDNN_TRY(cudnnCreateTensorDescriptor(&l->y));
    CUDNN_TRY(cudnnCreateFilterDescriptor(&l->w));
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(&l->conv));
    CUDNN_TRY(cudnnSetFilter4dDescriptor(l->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cout, cin, 1,
                                         3));
    CUDNN_TRY(cudnnSetConvolution2dDescriptor(l->conv, 0, 1, 1, 1, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_TRY(cudnnSetConvolutionMathType(l->conv, CUDNN_FMA_MATH));
out:
    return status;
}

/* Sets the batch size and picks the algorithm (cuDNN's heuristic, FMA math only). */
static enum ecg_status layer_shape(cudnnHandle_t handle, struct conv_layer *l, int n,
                                   struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int returned = 0;
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l->cin, 1,
                                         l->width));
    CUDNN_TRY(cudnnSetTensor4dDescriptor(l->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l->cout, 1,
                                         l->width));
    CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(handle, l->x, l->w, l->conv, l->y, 8,
                                                     &returned, perf));
    l->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    for (int i = 0; i < returned; i++) {
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) {
            l->algo = perf[i].algo;
            break;
        }
    }
    CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(handle, l->x, l->w, l->conv, l->y, l->algo,
                                                      &l->ws_bytes));
out:
    return status;
}

static enum ecg_status layer_run(cudnnHandle_t handle, const struct conv_layer *l,
                                 const float *in, float *out, void *ws, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(cudnnConvolutionForward(handle, &one, l->x, in, l->w, l->d_w, l->conv, l->algo, ws,
                                      l->ws_bytes, &zero, l->y, out));
out:
    return status;
}

/* The cuDNN path: every beat of the request in chunks of VAE_CHUNK, layer by layer. */
enum ecg_status encode_cudnn(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                                    double **recon_out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const struct ecg_model *model = ctx->state->model;
    struct conv_layer layers[VAE_LAYERS];
    struct table_layout t;
    size_t k, per_beat, buf_bytes, ws_max = 0, chunk_max, off;
    int l_len, z_dim, t3, shaped = -1;
    const float *w;
    const struct ecg_vae_layout *ly;
    char *base, *table;
    float *ping, *pong, *latent;
    double *recon;
    void *ws;

    memset(layers, 0, sizeof layers);
    k = ctx->n_beats;
    l_len = (int)model->arch.beat_len;
    z_dim = (int)model->arch.latent_dim;
    t3 = l_len / 8;
    ly = &model->layout;
    w = ctx->dev->model.d_weights;
    ECG_TRY(layer_init(&layers[0], w + ly->enc_w[0], 1, (int)model->arch.enc[0], l_len, err));
    ECG_TRY(layer_init(&layers[1], w + ly->enc_w[1], (int)model->arch.enc[0],
                       (int)model->arch.enc[1], l_len / 2, err));
    ECG_TRY(layer_init(&layers[2], w + ly->enc_w[2], (int)model->arch.enc[1],
                       (int)model->arch.enc[2], l_len / 4, err));
    ECG_TRY(layer_init(&layers[3], w + ly->mu_w, (int)model->arch.enc[2], z_dim, t3, err));
    ECG_TRY(layer_init(&layers[4], w + ly->dec_w[0], (int)model->arch.dec[0],
                       (int)model->arch.dec[1], l_len / 4, err));
    ECG_TRY(layer_init(&layers[5], w + ly->dec_w[1], (int)model->arch.dec[1],
                       (int)model->arch.dec[2], l_len / 2, err));
    ECG_TRY(layer_init(&layers[6], w + ly->dec_w[2], (int)model->arch.dec[2], 1, l_len, err));

    /* the widest activation (C x W) of any layer, for the ping-pong buffers */
    per_beat = 0;
    for (int i = 0; i < VAE_LAYERS; i++) {
        size_t in_size = (size_t)layers[i].cin * layers[i].width;
        size_t out_size = (size_t)layers[i].cout * layers[i].width;
        if (in_size > per_beat)
            per_beat = in_size;
        if (out_size > per_beat)
            per_beat = out_size;
    }
    chunk_max = k < VAE_CHUNK ? k : VAE_CHUNK;
    ECG_TRY(layer_shape(ctx->cudnn, &layers[0], (int)chunk_max, err));
    for (int i = 1; i < VAE_LAYERS; i++)
        ECG_TRY(layer_shape(ctx->cudnn, &layers[i], (int)chunk_max, err));
    shaped = (int)chunk_max;
    for (int i = 0; i < VAE_LAYERS; i++)
        if (layers[i].ws_bytes > ws_max)
            ws_max = layers[i].ws_bytes;
    /* vae_work: ping | pong | recon[k] | cuDNN work space (grown when a shape needs more) */
    buf_bytes = (chunk_max * per_beat * sizeof(float) + 255) & ~(size_t)255;
    off = 2 * buf_bytes + ((k * sizeof(double) + 255) & ~(size_t)255);
    ECG_TRY(dbuf_reserve(ctx, &ctx->vae_work, off + ws_max + 256, err));
    base = (char *)ctx->vae_work.ptr;
    ping = (float *)base;
    pong = (float *)(base + buf_bytes);
    recon = (double *)(base + 2 * buf_bytes);
    ws = base + off;

    table_layout(k, (size_t)z_dim, &t);
    table = (char *)ctx->table.ptr;
    latent = (float *)(table + t.latent);
    for (size_t b0 = 0; b0 < k; b0 += VAE_CHUNK) {
        const size_t n = k - b0 < VAE_CHUNK ? k - b0 : VAE_CHUNK;
        const float *x = (const float *)ctx->emb.ptr + b0 * l_len;
        float *mu = latent + b0 * z_dim;
        if ((int)n != shaped) {
            size_t need = 0;
            for (int i = 0; i < VAE_LAYERS; i++) {
                ECG_TRY(layer_shape(ctx->cudnn, &layers[i], (int)n, err));
                if (layers[i].ws_bytes > need)
                    need = layers[i].ws_bytes;
            }
            shaped = (int)n;
            if (need > ws_max) {
                status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                                  "cuda_encode: cuDNN work space grew for a smaller batch");
                goto out;
            }
        }
        const struct ecg_vae_arch *ar = &model->arch;
        /* encoder */
        ECG_TRY(layer_run(ctx->cudnn, &layers[0], x, ping, ws, err));
        swish_blur_kernel<<<grid_for(n * ar->enc[0] * (l_len / 2)), CUDA_THREADS, 0,
                            ctx->stream>>>(ping, w + ly->enc_b[0], w + ly->enc_alpha[0], n,
                                           (int)ar->enc[0], l_len, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[1], pong, ping, ws, err));
        swish_blur_kernel<<<grid_for(n * ar->enc[1] * (l_len / 4)), CUDA_THREADS, 0,
                            ctx->stream>>>(ping, w + ly->enc_b[1], w + ly->enc_alpha[1], n,
                                           (int)ar->enc[1], l_len / 2, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[2], pong, ping, ws, err));
        swish_blur_kernel<<<grid_for(n * ar->enc[2] * t3), CUDA_THREADS, 0, ctx->stream>>>(
            ping, w + ly->enc_b[2], w + ly->enc_alpha[2], n, (int)ar->enc[2], l_len / 4, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[3], pong, ping, ws, err));
        mean_kernel<<<grid_for(n * z_dim), CUDA_THREADS, 0, ctx->stream>>>(
            ping, w + ly->mu_b, n, z_dim, t3, mu);
        CUDA_LAUNCH_CHECK();
        /* decoder on mu */
        fc_up_kernel<<<grid_for(n * ar->dec[0] * 2 * t3), CUDA_THREADS, 0, ctx->stream>>>(
            mu, w + ly->fc_w, w + ly->fc_b, n, z_dim, (int)ar->dec[0], t3, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[4], pong, ping, ws, err));
        swish_up_kernel<<<grid_for(n * ar->dec[1] * (l_len / 2)), CUDA_THREADS, 0,
                          ctx->stream>>>(ping, w + ly->dec_b[0], w + ly->dec_alpha[0], n,
                                         (int)ar->dec[1], l_len / 4, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[5], pong, ping, ws, err));
        swish_up_kernel<<<grid_for(n * ar->dec[2] * l_len), CUDA_THREADS, 0, ctx->stream>>>(
            ping, w + ly->dec_b[1], w + ly->dec_alpha[1], n, (int)ar->dec[2], l_len / 2, pong);
        CUDA_LAUNCH_CHECK();
        ECG_TRY(layer_run(ctx->cudnn, &layers[6], pong, ping, ws, err));
        recon_kernel<<<grid_for(n * 32), CUDA_THREADS, 0, ctx->stream>>>(
            ping, w + ly->dec_b[2], x, n, l_len, recon + b0);
        CUDA_LAUNCH_CHECK();
    }
    *recon_out = recon;
out:
    for (int i = 0; i < VAE_LAYERS; i++)
        layer_fini(&layers[i]);
    return status;
}
