/*
 * cuda_embed.cu - segmentation, robust normalisation and embedding on the device (twin of
 * engine/cpu/segment.c: cpu_segment and cpu_embed; its comment defines every rule).
 *
 *   segment_kernel   one thread per beat: onset/end in both grids, RR, kept flag, and the
 *                    beat's likeness to its neighbours (cpu/likeness_core.h, the CPU's
 *                    arithmetic in the CPU's order, from the input samples; a batched back
 *                    takes it in a kernel of its own on the pass's side branch,
 *                    small_batch_likeness, beside the embedding and the VAE). The CPU
 *                    carries onset[i] = end[i - 1] along its loop; here thread i recomputes
 *                    beat i - 1's end, which is the same integer arithmetic.
 *   median / MAD     over all n_a samples: a radix sort of a copy (cub::DeviceRadixSort), the
 *                    middle element(s) read on the device, |y - median| sorted again. Exact: the
 *                    same values as the CPU's quickselect, combined with the same float/double
 *                    operations. Short recordings (up to 8,192 analysis samples) take both
 *                    sorts in one block instead (norm_small_kernel): one launch, same values.
 *   embed_kernel     one thread per output value (beat, t): zero-padded normalised rows.
 * Nothing returns to the host.
 */
#include <math.h>
#include <type_traits>

#include <cub/cub.cuh>

#include "cpu/likeness_core.h"
#include "cuda_internal.h"
#include "cuda_small.cuh"
#include "quality.h"

struct segment_args {
    const int64_t *peaks_a, *peaks_in;
    size_t k, n_a, n_in;
    int64_t pre_r, beat_min, beat_max;
    uint32_t up, down;
    double fs_in_hz;
    int64_t *onset, *end;   /* table columns */
    float *rr_ms;
    uint8_t *kept;
    const float *x;         /* the input samples of the lead the R peaks are placed on (n_in) */
    const float *x_extra;   /* n_extra further leads' (n_in each, one after another) */
    size_t n_extra;
    struct likeness_geometry lk; /* the shapes' extent (likeness_geometry_of) */
    float *likeness;        /* table column (likeness_core.h) */
    const float *beat_crest; /* the detector's crest factor at each beat (k) ... */
    float *crest;           /* ... to this table column */
};

static __device__ int64_t to_input(int64_t index_a, uint32_t up, uint32_t down)
{
    int64_t num = 2 * index_a * (int64_t)down + (int64_t)up;
    int64_t den = 2 * (int64_t)up;
    int64_t q = num / den;
    if ((num % den != 0) && (num < 0))
        q--;
    return q;
}

static __device__ int64_t onset_a_of(const struct segment_args *a, size_t i)
{
    int64_t onset = a->peaks_a[i] - a->pre_r;
    if (i > 0) {
        int64_t gap = a->peaks_a[i] - a->peaks_a[i - 1];
        int64_t floor_onset = a->peaks_a[i - 1] + (gap + 1) / 2;
        if (onset < floor_onset)
            onset = floor_onset;
    }
    return onset < 0 ? 0 : onset;
}

static __device__ int64_t end_a_of(const struct segment_args *a, size_t i, int64_t onset)
{
    if (i + 1 < a->k)
        return onset_a_of(a, i + 1);
    int64_t end = onset + a->beat_max;
    if (end > (int64_t)a->n_a)
        end = (int64_t)a->n_a;
    if (end <= a->peaks_a[i])
        end = a->peaks_a[i] + 1;
    return end;
}

/* Input-grid end of beat i given its analysis-grid end (segment.c's clamping). */
static __device__ int64_t end_in_of(const struct segment_args *a, size_t i, int64_t end_a)
{
    int64_t end_in = to_input(end_a, a->up, a->down);
    if (i + 1 < a->k) {
        if (end_in <= a->peaks_in[i])
            end_in = a->peaks_in[i] + 1;
        if (end_in >= a->peaks_in[i + 1])
            end_in = a->peaks_in[i + 1] - 1;
    } else {
        if (end_in > (int64_t)a->n_in)
            end_in = (int64_t)a->n_in;
        if (end_in <= a->peaks_in[i])
            end_in = a->peaks_in[i] + 1;
    }
    return end_in;
}

/* Beat i's table entries: onset and end on the input grid, RR, kept. */
static __device__ void segment_one(const struct segment_args *a, size_t i)
{
    int64_t onset_a = onset_a_of(a, i);
    int64_t end_a = end_a_of(a, i, onset_a);
    int64_t onset_in;
    if (i == 0) {
        onset_in = onset_a == 0 ? 0 : to_input(onset_a, a->up, a->down);
        if (onset_in >= a->peaks_in[0])
            onset_in = a->peaks_in[0] - 1;
        if (onset_in < 0)
            onset_in = 0;
    } else {
        /* beat i - 1 ends where beat i starts in the analysis grid */
        onset_in = end_in_of(a, i - 1, onset_a);
    }
    a->onset[i] = onset_in;
    a->end[i] = end_in_of(a, i, end_a);
    int64_t length = end_a - onset_a;
    a->kept[i] = length >= a->beat_min && length <= a->beat_max;
    if (i == 0) {
        a->rr_ms[i] = NAN;
    } else {
        const double gap = (double)(a->peaks_in[i] - a->peaks_in[i - 1]);
        a->rr_ms[i] = (float)__ddiv_rn(__dmul_rn(gap, 1000.0), a->fs_in_hz);
    }
}

/* Beat i's likeness (cpu/likeness_core.h) to the table. */
static __device__ void likeness_one(const struct segment_args *a, size_t i)
{
    const float *leads[ECG_MAX_LEADS] = {a->x};
    for (size_t l = 0; l < a->n_extra && l + 1 < ECG_MAX_LEADS; l++)
        leads[l + 1] = a->x_extra + l * a->n_in;
    a->likeness[i] = likeness_of_leads(leads, 1 + a->n_extra, (int64_t)a->n_in, a->peaks_in,
                                       a->k, i, a->lk);
    a->crest[i] = a->beat_crest[i]; /* read with it by the quality verdict */
}

static __global__ void segment_kernel(struct segment_args a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.k;
         i += (size_t)gridDim.x * blockDim.x) {
        segment_one(&a, i);
        likeness_one(&a, i);
    }
}

/* The samples before R where a beat starts: at least one, so that every R has an onset. */
static int64_t segment_pre_r(const struct ecg_plan *plan)
{
    return plan->pre_r > 0 ? (int64_t)plan->pre_r : 1;
}

/* Normalisation constants, computed on the device from sorted copies. */
struct norm {
    float median;
    float scale;
    float inv_scale;
};

/* median_inplace(): middle value, or the mean (in double) of the two middle ones. */
static __device__ float middle_of_sorted(const float *s, size_t n)
{
    size_t mid = n / 2;
    float upper = s[mid];
    if (n % 2 == 1)
        return upper;
    float lower = s[mid - 1];
    return (float)__dmul_rn(0.5, __dadd_rn((double)lower, (double)upper));
}

static __global__ void median_kernel(const float *sorted, size_t n, struct norm *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        out->median = middle_of_sorted(sorted, n);
}

/* dev[i] = |y[i] - median| */
static __global__ void deviation_kernel(const float *y, size_t n, const struct norm *nm,
                                        float *dev)
{
    const float median = nm->median;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dev[i] = fabsf(__fsub_rn(y[i], median));
}

static __global__ void scale_kernel(const float *sorted_dev, size_t n, struct norm *out)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    float mad = middle_of_sorted(sorted_dev, n);
    float scale = 1.0f;
    if (mad > 0.0f && isfinite(mad))
        scale = __fmul_rn(1.4826f, mad);
    out->scale = scale;
    out->inv_scale = __fdiv_rn(1.0f, scale);
}

/*
 * Short recordings (at most NORM_SMALL_MAX analysis samples, ~33 s at 250 Hz): the median and
 * the MAD in one block, each from a block-wide radix sort in registers and shared memory, in
 * place of a copy, two device-wide sorts and three small kernels (~15 launches, which for a
 * 10-second strip cost far more than the arithmetic). Same sort order (CUB's float radix
 * order), same middle values, same scale arithmetic: the same norm bit for bit.
 */
#define NORM_SMALL_THREADS 256 /* 1,024 threads of 2-8 keys sort slower here (H100: 24 -> 39 us) */
#define NORM_SMALL_ITEMS 32
#define NORM_SMALL_MAX ((size_t)NORM_SMALL_THREADS * NORM_SMALL_ITEMS)

/* middle_of_sorted() of the first n keys of a block-sorted set (blocked arrangement: thread t
 * holds ranks [t * ITEMS, (t + 1) * ITEMS)). Every thread gets the value. */
template <int ITEMS>
static __device__ float block_middle(const float (&keys)[ITEMS], size_t n, float *two)
{
    const size_t mid = n / 2;
    for (int j = 0; j < ITEMS; j++) {
        const size_t rank = (size_t)threadIdx.x * ITEMS + j;
        if (rank == mid)
            two[1] = keys[j];
        if (n % 2 == 0 && rank + 1 == mid)
            two[0] = keys[j];
    }
    __syncthreads();
    const float upper = two[1];
    const float value = n % 2 == 1
                            ? upper
                            : (float)__dmul_rn(0.5, __dadd_rn((double)two[0], (double)upper));
    __syncthreads(); /* two[] may be written again */
    return value;
}

/* The block's body of norm_small_kernel (every thread of a NORM_SMALL_THREADS block), for
 * n <= NORM_SMALL_THREADS * ITEMS: the fewer items, the shorter the sort. The keys past n are
 * padding that sorts after every sample, so the first n sorted keys, and the middle values, do
 * not depend on ITEMS. */
template <int ITEMS>
static __device__ void norm_small_body(const float *y, size_t n, struct norm *out)
{
    typedef cub::BlockRadixSort<float, NORM_SMALL_THREADS, ITEMS> block_sort;
    __shared__ typename block_sort::TempStorage temp;
    __shared__ float two[2];
    float keys[ITEMS];
    const size_t first = (size_t)threadIdx.x * ITEMS;
    /* +inf pads the block past n: it sorts after every (finite) sample */
    for (int j = 0; j < ITEMS; j++)
        keys[j] = first + j < n ? y[first + j] : INFINITY;
    block_sort(temp).Sort(keys);
    const float median = block_middle(keys, n, two);
    for (int j = 0; j < ITEMS; j++)
        keys[j] = first + j < n ? fabsf(__fsub_rn(y[first + j], median)) : INFINITY;
    __syncthreads(); /* temp is reused */
    block_sort(temp).Sort(keys);
    const float mad = block_middle(keys, n, two);
    if (threadIdx.x == 0) {
        float scale = 1.0f;
        if (mad > 0.0f && isfinite(mad))
            scale = __fmul_rn(1.4826f, mad);
        out->median = median;
        out->scale = scale;
        out->inv_scale = __fdiv_rn(1.0f, scale);
    }
}

template <int ITEMS>
static __global__ void __launch_bounds__(NORM_SMALL_THREADS)
    norm_small_kernel(const float *y, size_t n, struct norm *out)
{
    norm_small_body<ITEMS>(y, n, out);
}

/* launch(items) with the items per thread of the one-block sort of n keys (at most
 * NORM_SMALL_MAX): the fewest of 8, 16 and 32 that hold n (a std::integral_constant, for the
 * kernel's template argument). */
template <typename Launch>
static void norm_small_launch(size_t n, Launch launch)
{
    if (n <= (size_t)NORM_SMALL_THREADS * 8)
        launch(std::integral_constant<int, 8>());
    else if (n <= (size_t)NORM_SMALL_THREADS * 16)
        launch(std::integral_constant<int, 16>());
    else
        launch(std::integral_constant<int, NORM_SMALL_ITEMS>());
}

/* Value v of the embedding (row i = v / beat_len, position t = v % beat_len). Whether beat i is
 * kept is segment_one's test on the same onset and end, made here too, so that the embedding
 * does not wait for the table's kept column. */
static __device__ float embed_value(const struct segment_args *a, const float *y, float median,
                                    float inv_scale, size_t beat_len, size_t v)
{
    size_t i = v / beat_len, t = v % beat_len;
    float out = 0.0f;
    const int64_t onset = onset_a_of(a, i);
    const int64_t end = end_a_of(a, i, onset);
    const int64_t length = end - onset;
    if (length >= a->beat_min && length <= a->beat_max) {
        int64_t len = length;
        if (len > (int64_t)beat_len)
            len = (int64_t)beat_len;
        if (onset + len > (int64_t)a->n_a)
            len = (int64_t)a->n_a - onset;
        if ((int64_t)t < len)
            out = __fmul_rn(__fsub_rn(y[onset + (int64_t)t], median), inv_scale);
    }
    return out;
}

/* Thread (i, t) over k * beat_len values: row i of the embedding. */
static __global__ void embed_kernel(struct segment_args a, const float *y, const struct norm *nm,
                                    size_t beat_len, float *emb)
{
    const float median = nm->median, inv_scale = nm->inv_scale;
    const size_t total = a.k * beat_len;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x)
        emb[v] = embed_value(&a, y, median, inv_scale, beat_len, v);
}

extern "C" enum ecg_status cuda_embed(void *ctx_ptr, const struct ecg_plan *plan,
                                      struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct cuda_ctx *ctx = (struct cuda_ctx *)ctx_ptr;
    struct segment_args a;
    struct table_layout t;
    size_t k, n_a, temp_bytes = 0, sort_bytes;
    char *table;
    float *keys_in, *keys_out;
    struct norm *d_norm;
    ECG_TRY(ctx_enter(ctx, err));
    k = ctx->n_beats;
    n_a = ctx->n_a;
    ctx->emb_len = 0;
    if (k == 0)
        goto out;
    table_layout(k, ctx->latent_dim, &t);
    table = (char *)ctx->table.ptr;
    a.peaks_a = (const int64_t *)ctx->peaks_a.ptr;
    a.peaks_in = (const int64_t *)(table + t.r_peak);
    a.k = k;
    a.n_a = n_a;
    a.n_in = ctx->n_in;
    a.pre_r = segment_pre_r(plan);
    a.beat_min = plan->beat_min;
    a.beat_max = plan->beat_max;
    a.up = plan->up;
    a.down = plan->down;
    a.fs_in_hz = plan->fs_in_hz;
    a.onset = (int64_t *)(table + t.onset);
    a.end = (int64_t *)(table + t.end);
    a.rr_ms = (float *)(table + t.rr_ms);
    a.kept = (uint8_t *)(table + t.kept);
    a.x = (const float *)ctx->input.ptr;
    a.x_extra = (const float *)ctx->extra_input.ptr;
    a.n_extra = ctx->n_extra;
    a.lk = likeness_geometry_of(plan->fs_in_hz);
    a.likeness = (float *)(table + t.likeness);
    a.beat_crest = (const float *)ctx->beat_crest.ptr;
    a.crest = (float *)(table + t.crest);
    segment_kernel<<<grid_for(k), CUDA_THREADS, 0, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();

    if (n_a <= NORM_SMALL_MAX) {
        ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, 256, err));
        d_norm = (struct norm *)ctx->scratch.ptr;
        const float *y = (const float *)ctx->resampled.ptr;
        norm_small_launch(n_a, [&](auto items) {
            norm_small_kernel<decltype(items)::value>
                <<<1, NORM_SMALL_THREADS, 0, ctx->stream>>>(y, n_a, d_norm);
        });
        CUDA_LAUNCH_CHECK();
        goto embed;
    }
    /* scratch: keys_in | keys_out | norm */
    sort_bytes = (n_a * sizeof(float) + 255) & ~(size_t)255;
    ECG_TRY(dbuf_reserve(ctx, &ctx->scratch, 2 * sort_bytes + 256, err));
    keys_in = (float *)ctx->scratch.ptr;
    keys_out = (float *)((char *)ctx->scratch.ptr + sort_bytes);
    d_norm = (struct norm *)((char *)ctx->scratch.ptr + 2 * sort_bytes);
    CUDA_TRY(cub::DeviceRadixSort::SortKeys(NULL, temp_bytes, keys_in, keys_out, n_a, 0,
                                            (int)(8 * sizeof(float)), ctx->stream));
    ECG_TRY(dbuf_reserve(ctx, &ctx->cub_temp, temp_bytes, err));
    CUDA_TRY(cudaMemcpyAsync(keys_in, ctx->resampled.ptr, n_a * sizeof(float),
                             cudaMemcpyDeviceToDevice, ctx->stream));
    CUDA_TRY(cub::DeviceRadixSort::SortKeys(ctx->cub_temp.ptr, temp_bytes, keys_in, keys_out,
                                            n_a, 0, (int)(8 * sizeof(float)), ctx->stream));
    median_kernel<<<1, 1, 0, ctx->stream>>>(keys_out, n_a, d_norm);
    CUDA_LAUNCH_CHECK();
    deviation_kernel<<<grid_for(n_a), CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)ctx->resampled.ptr, n_a, d_norm, keys_in);
    CUDA_LAUNCH_CHECK();
    CUDA_TRY(cub::DeviceRadixSort::SortKeys(ctx->cub_temp.ptr, temp_bytes, keys_in, keys_out,
                                            n_a, 0, (int)(8 * sizeof(float)), ctx->stream));
    scale_kernel<<<1, 1, 0, ctx->stream>>>(keys_out, n_a, d_norm);
    CUDA_LAUNCH_CHECK();

embed:
    ECG_TRY(dbuf_reserve(ctx, &ctx->emb, k * plan->beat_len * sizeof(float), err));
    embed_kernel<<<grid_for(k * plan->beat_len), CUDA_THREADS, 0, ctx->stream>>>(
        a, (const float *)ctx->resampled.ptr, d_norm, plan->beat_len, (float *)ctx->emb.ptr);
    CUDA_LAUNCH_CHECK();
    ECG_TRY(ctx_stage_done(ctx, "embed", err));
    ctx->emb_len = k * plan->beat_len;
out:
    return status;
}

/* ---------------------------------------------------------------- batched backs */

static_assert(SMALL_BACK_SAMPLES <= NORM_SMALL_MAX, "a batched back normalises in one block");
static_assert(sizeof(struct norm) <= SMALL_BACK_NORM_BYTES, "the host sizes the norms scratch");

/* Member m's segment_args for its beat count, the columns of its table laid out for it. */
static __device__ struct segment_args member_segment_args(const struct small_back *m,
                                                          const struct small_back_plan *p)
{
    struct segment_args a;
    struct table_layout t;
    const size_t k = (size_t)m->counts[2];
    table_layout(k, p->z_dim, &t);
    a.peaks_a = m->peaks_a;
    a.peaks_in = (const int64_t *)(m->table + t.r_peak);
    a.k = k;
    a.n_a = m->n_a;
    a.n_in = m->n_in;
    a.pre_r = p->pre_r;
    a.beat_min = p->beat_min;
    a.beat_max = p->beat_max;
    a.up = p->up;
    a.down = p->down;
    a.fs_in_hz = p->fs_in_hz;
    a.onset = (int64_t *)(m->table + t.onset);
    a.end = (int64_t *)(m->table + t.end);
    a.rr_ms = (float *)(m->table + t.rr_ms);
    a.kept = (uint8_t *)(m->table + t.kept);
    a.x = NULL; /* the pack's: likeness_batch_kernel sets it */
    a.x_extra = NULL; /* a batched back's members have one lead */
    a.n_extra = 0;
    a.lk = p->lk;
    a.likeness = (float *)(m->table + t.likeness);
    a.beat_crest = m->beat_crest;
    a.crest = (float *)(m->table + t.crest);
    return a;
}


template <int ITEMS>
static __global__ void __launch_bounds__(NORM_SMALL_THREADS)
    norm_small_batch_kernel(const struct small_back *members, struct norm *norms)
{
    const struct small_back *m = &members[blockIdx.y];
    norm_small_body<ITEMS>(m->y, m->n_a, &norms[blockIdx.y]);
}

/* Member blockIdx.y's table entries (the thread of each beat's first value) and its cap rows of
 * the embedding from its slot on: its beats' rows, then zeros. */
static __global__ void segment_embed_batch_kernel(const struct small_back *members,
                                                  struct small_back_plan p,
                                                  const struct norm *norms, float *emb)
{
    const struct small_back *m = &members[blockIdx.y];
    const struct segment_args a = member_segment_args(m, &p);
    const float median = norms[blockIdx.y].median, inv_scale = norms[blockIdx.y].inv_scale;
    const size_t beats = a.k * p.beat_len, total = m->cap * p.beat_len;
    float *rows = emb + m->slot * p.beat_len;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < total;
         v += (size_t)gridDim.x * blockDim.x) {
        if (v < beats && v % p.beat_len == 0)
            segment_one(&a, v / p.beat_len);
        rows[v] = v < beats ? embed_value(&a, m->y, median, inv_scale, p.beat_len, v) : 0.0f;
    }
}

/* Member blockIdx.y's beats' likeness, a thread each. */
static __global__ void likeness_batch_kernel(const struct small_back *members,
                                             struct small_back_plan p, const float *pack)
{
    struct segment_args a = member_segment_args(&members[blockIdx.y], &p);
    a.x = pack + members[blockIdx.y].x_off;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < a.k;
         i += (size_t)gridDim.x * blockDim.x)
        likeness_one(&a, i);
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_likeness(cudaStream_t stream, const struct small_back *members,
                                     size_t k, const struct small_back_plan *plan,
                                     size_t max_cap, const float *pack, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    const unsigned threads = 64; /* a 10-s strip has about 12 beats */
    likeness_batch_kernel<<<dim3((unsigned)((max_cap + threads - 1) / threads), (unsigned)k),
                            threads, 0, stream>>>(members, *plan, pack);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* Contract in cuda_small.cuh. */
void small_back_plan_of(const struct ecg_plan *plan, size_t z_dim, struct small_back_plan *p)
{
    p->pre_r = segment_pre_r(plan);
    p->beat_min = plan->beat_min;
    p->beat_max = plan->beat_max;
    p->up = plan->up;
    p->down = plan->down;
    p->fs_in_hz = plan->fs_in_hz;
    p->beat_len = plan->beat_len;
    p->z_dim = z_dim;
    p->lk = likeness_geometry_of(plan->fs_in_hz);
}

/* Contract in cuda_small.cuh. Every member has at most NORM_SMALL_MAX analysis samples (the
 * short path's bound), so its normalisation takes the one-block sort, as its own back's would. */
enum ecg_status small_batch_norm(cudaStream_t stream, const struct small_back *members,
                                 size_t k, size_t max_n_a, void *norms, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    norm_small_launch(max_n_a, [&](auto items) { /* the longest member's */
        norm_small_batch_kernel<decltype(items)::value>
            <<<dim3(1, (unsigned)k), NORM_SMALL_THREADS, 0, stream>>>(members,
                                                                      (struct norm *)norms);
    });
    CUDA_LAUNCH_CHECK();
out:
    return status;
}

/* Contract in cuda_small.cuh. */
enum ecg_status small_batch_embed(cudaStream_t stream, const struct small_back *members,
                                  size_t k, const struct small_back_plan *plan, size_t max_cap,
                                  const void *norms, float *emb, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    segment_embed_batch_kernel<<<dim3(grid_for(max_cap * plan->beat_len), (unsigned)k),
                                 CUDA_THREADS, 0, stream>>>(members, *plan,
                                                            (const struct norm *)norms, emb);
    CUDA_LAUNCH_CHECK();
out:
    return status;
}
