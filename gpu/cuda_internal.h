/*
 * cuda_internal.h - the CUDA backend's state, per-worker contexts and stage entry points
 * (gpu/ only; CUDA types are allowed here and nowhere outside gpu/).
 *
 * Layout of the backend:
 *   cuda_backend.cu   the ops table: open/close, contexts, load
 *   cuda_fetch.cu     fetch (the beat table to the host), read_buf/write_buf (test hooks)
 *   cuda_read.cu      load_bytes: CSV parsed on the device; dispatch of the other formats
 *   cuda_read_binary.cu  raw float32/float64/int16, .npy and EDF/BDF converted on the device
 *   cuda_upload.cu    streaming uploads: request bodies copied to the device as they arrive,
 *                     and load_upload, which parses from that copy (cuda_read.cu's parsers)
 *   cuda_resample.cu  polyphase resampler            (twin of engine/cpu/resample.c)
 *   cuda_filter.cu    Ricker filter through cuFFT    (twin of engine/cpu/filter.c)
 *   cuda_detect.cu    NMS candidates, refinement (twin of engine/cpu/detect.c)
 *   cuda_decide.cu    the detector's adaptive pass (twin of engine/cpu/decide.c)
 *   cuda_embed.cu     segmentation, median/MAD, embedding (twin of segment.c / embed)
 *   cuda_quality.cu   signal-quality features (twin of engine/cpu/quality_features.c)
 *   cuda_trace.cu     kept traces and their min/max decimation (twin of engine/trace.c)
 *   cuda_batch.cu     dynamic batching: a batch's analyses run stage by stage over contexts
 *                     of the batch's own, each with the stages' own kernels (batch_* ops)
 *   cuda_vae.cu       VAE: the path choice, the block-per-beat kernel, the score (twin of
 *                     engine/cpu/vae.c); cuda_vae_warp.cu (the default architecture, one warp
 *                     per beat) and cuda_vae_cudnn.cu (cuDNN layer by layer), see cuda_vae.h
 *
 * Ownership and threading: one struct cuda_state per engine, created by open() and read-only
 * afterwards except next_ctx, next_upload and each device's upload_held (atomics). It holds one
 * entry per device used (model weights on that device, the device's memory pool, the stream that
 * carries streaming uploads of request bodies). A struct cuda_ctx belongs to one worker: its
 * stream, its cuDNN handle, its cuFFT plans and its device buffers. One thread at a time uses a
 * ctx; every entry point first makes the ctx's device current for the calling thread.
 *
 * Memory: every device buffer comes from the device's stream-ordered pool (cudaMallocAsync on
 * the ctx's stream) and grows on demand; the pool keeps freed memory up to a release threshold
 * so that steady-state requests allocate nothing from the driver. An allocation failure is
 * ECG_ERR_DEVICE_OOM for that request only.
 *
 * Every stage synchronises its stream before returning: stage timings measured by the engine
 * are then real, and a device fault is reported by the stage that caused it. A batch's contexts
 * (defer_sync) skip the waits that are only there for that: their stages queue work and return,
 * and a fault is reported by the next wait (the beat count after detect, or the fetch).
 */
#ifndef ECG_GPU_CUDA_INTERNAL_H
#define ECG_GPU_CUDA_INTERNAL_H

#include <stdint.h>
#include <time.h>

#include <cuda_runtime.h>
#include <cufft.h>
#include <cudnn.h>

#include "backend.h"
#include "cuda_check.h"
#include "model.h"

/* Monotonic seconds, for the host's own waits and timings. */
static inline double cuda_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CUDA_MAX_DEVICES 16
#define CUDA_FFT_CACHE 4                 /* cuFFT plans kept per ctx (by padded length) */
#define CUDA_POOL_KEEP_BYTES (4ull << 30) /* memory the pool keeps cached after frees */
#define CUDA_STAGE_CHUNK (8u << 20)      /* pinned staging chunk for host-to-device input */
#define CUDA_THREADS 256                 /* default block size */
/* Streaming uploads (cuda_upload.cu): bodies below this stay on today's path (they are not
 * pinned either: cuda_backend.cu's CUDA_PIN_MIN_BYTES); copies go in steps of at least
 * CUDA_UPLOAD_STEP; a device holds at most CUDA_UPLOAD_BUDGET_MAX (and an eighth of its memory)
 * in uploads not yet analysed, so that queued bodies cannot starve the analyses of memory. */
#define CUDA_UPLOAD_MIN_BYTES ((size_t)1 << 20)
#define CUDA_UPLOAD_STEP ((size_t)4 << 20)
#define CUDA_UPLOAD_BUDGET_MAX ((size_t)2 << 30)

/* The model on one device. */
struct cuda_model {
    float *d_weights;        /* layout.n_weights floats, in the order of model.h */
};

struct cuda_device {
    int ordinal;
    cudaMemPool_t pool;
    struct cuda_model model; /* d_weights NULL when the engine has no model */
    int sm_count;            /* multiprocessors: sizes persistent grids */
    int vae_warp_per_sm;     /* resident blocks of the warp-per-beat VAE kernel per SM */
    char name[256];
    /* streaming uploads (cuda_upload.cu): their copies, from any thread, go on this stream */
    cudaStream_t upload_stream;
    size_t upload_budget;    /* bytes uploads may hold on this device */
    size_t upload_held;      /* bytes they hold now (atomic) */
};

struct cuda_state {
    const struct ecg_model *model;
    int n_devices;
    struct cuda_device dev[CUDA_MAX_DEVICES];
    unsigned next_ctx;       /* round-robin of contexts over devices (atomic) */
    unsigned next_upload;    /* round-robin of uploads over devices (atomic) */
    unsigned lanes_per_device; /* batchers per device (dynamic batching) */
    char description[512];
};

/* A growable device buffer. Contents are not kept across growth. */
struct dbuf {
    void *ptr;
    size_t cap;              /* bytes */
};

/* A cached cuFFT plan pair and the Ricker spectrum for one padded length. */
struct fft_entry {
    size_t n_pad;            /* 0 = unused slot */
    cufftHandle r2c, c2r;
    size_t work_bytes;       /* the larger of the two plans' work areas */
    float2 *d_spectrum;      /* n_pad / 2 + 1 bins of the Ricker taps, scaled by 1 / n_pad */
    float *h_taps;           /* the taps the spectrum was made from (cache key with n_pad) */
    size_t n_taps;
    uint64_t last_use;
};

struct small_front;

struct cuda_ctx {
    struct cuda_state *state;
    struct cuda_device *dev;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    bool defer_sync;         /* a batch's context: ctx_stage_done() does not wait */
    /* a batch's context under ECG_CUDA_BATCH_SPIN_US: ctx_sync records this event (blocking
     * sync), polls it for spin_us, then sleeps on it; NULL: cudaStreamSynchronize */
    cudaEvent_t wait_event;
    double spin_us;

    /* the request in flight */
    double fs_in_hz;
    size_t n_in;             /* input samples */
    size_t n_a;              /* analysis samples (after resample) */
    size_t n_beats;          /* after detect */
    /* with three leads or more, each lead's agreement with the beats (ecg_result.lead_agree,
     * fuse_core.h step 3a), copied after the counts; n_agree leads (0: none) */
    size_t n_agree;
    double lead_agree[ECG_MAX_LEADS];
    size_t latent_dim;       /* the model's, 0 without a model */
    size_t emb_len;          /* floats in emb (n_beats * beat_len after embed) */
    bool encoded;            /* latent/score hold this request's values */
    bool detect_queued;      /* detect_queue left counts for detect_collect to read */
    /* the arguments of its last short front (cuda_small.cuh), for a batch's batched front */
    struct small_front *small;
    /* bumped whenever a buffer moves or a device-resident cache (resampler table, taps, cuFFT
     * plans) changes: a captured CUDA graph (cuda_batch.cu) is valid while it stays the same */
    uint64_t generation;

    /* further leads (load_extra): n_extra x n_in inputs, n_extra x n_a resampled and filtered */
    size_t n_extra;
    struct dbuf extra_input, extra_resampled, extra_filtered;

    /* stage buffers */
    struct dbuf input;       /* float[n_in] */
    struct dbuf resampled;   /* float[n_a] */
    struct dbuf filtered;    /* float[n_a] */
    struct dbuf peaks_a;     /* int64[n_beats], analysis grid */
    struct dbuf beat_crest;  /* float[n_beats]: the detector's crest factor at each beat */
    struct dbuf table;       /* the beat table, laid out by table_layout() */
    struct dbuf emb;         /* float[n_beats * beat_len] */
    /* scratch */
    struct dbuf scratch;     /* temporary arrays of one stage */
    struct dbuf cub_temp;    /* CUB temporary storage */
    struct dbuf fft_buf;     /* in-place R2C/C2R buffer */
    struct dbuf fft_work;    /* cuFFT work area */
    struct dbuf vae_work;    /* activations and cuDNN work space */
    /* the resampler's branch table, kept while the next request needs the same one */
    struct dbuf rs_table;    /* on the device */
    float *h_rs_table;       /* host copy of what rs_table holds (malloc'd) */
    size_t rs_table_bytes;   /* 0: rs_table holds nothing valid */
    /* the detector's copy of the plan's Ricker taps, kept while the taps stay the same */
    struct dbuf ricker;      /* float[ricker_len] on the device */
    float *h_ricker;         /* host copy of what ricker holds (malloc'd) */
    size_t ricker_len;       /* 0: ricker holds nothing valid */

    /* pinned host staging */
    void *h_chunk[2];        /* CUDA_STAGE_CHUNK bytes each, double-buffered input upload */
    cudaEvent_t chunk_free[2];
    void *h_stage;           /* grown: beat table download and small transfers */
    size_t h_stage_cap;

    struct fft_entry fft[CUDA_FFT_CACHE];
    uint64_t fft_clock;
};

/* Offsets (bytes) of the beat table's columns for k beats and latent dimension z, each column
 * at a multiple of 256 bytes; the host's and the device's (a batched back lays out its members'
 * tables on the device, where their beat counts are). */
struct table_layout {
    size_t r_peak, onset, end, rr_ms, likeness, crest, kept, latent, score, outlier, bytes;
};
static __host__ __device__ inline size_t table_align(size_t x)
{
    return (x + 255) & ~(size_t)255;
}
static __host__ __device__ inline void table_layout(size_t k, size_t z, struct table_layout *t)
{
    size_t off = 0;
    t->r_peak = off;  off = table_align(off + k * sizeof(int64_t));
    t->onset = off;   off = table_align(off + k * sizeof(int64_t));
    t->end = off;     off = table_align(off + k * sizeof(int64_t));
    t->rr_ms = off;   off = table_align(off + k * sizeof(float));
    t->likeness = off; off = table_align(off + k * sizeof(float));
    t->crest = off;   off = table_align(off + k * sizeof(float));
    t->kept = off;    off = table_align(off + k);
    t->latent = off;  off = table_align(off + k * z * sizeof(float));
    t->score = off;   off = table_align(off + k * sizeof(float));
    t->outlier = off; off = table_align(off + k);
    t->bytes = off;
}
#ifdef __cplusplus
extern "C" {
#endif

/* Grows buf to at least bytes (contents lost). ECG_ERR_DEVICE_OOM when the pool is exhausted. */
enum ecg_status dbuf_reserve(struct cuda_ctx *ctx, struct dbuf *buf, size_t bytes,
                             struct ecg_error *err);
void dbuf_release(struct cuda_ctx *ctx, struct dbuf *buf);
/* Grows the pinned staging buffer. */
enum ecg_status stage_reserve(struct cuda_ctx *ctx, size_t bytes, struct ecg_error *err);
/* Copies len host bytes to d_dst through the pinned double buffer (overlapping memcpy and
 * DMA). Returns once the copies are queued and the host buffer may be reused. */
enum ecg_status upload_bytes(struct cuda_ctx *ctx, void *d_dst, const void *src, size_t len,
                             struct ecg_error *err);
/* True when host memory [p, p + len) is page-locked (len > 0), so the device can DMA it. */
/* memcpy between host buffers, on several threads when long (cuda_backend.cu). */
void stage_copy(void *dst, const void *src, size_t len);
bool host_is_pinned(const void *p, size_t len);
/* Makes the ctx's device current and checks that the ctx is usable. */
enum ecg_status ctx_enter(struct cuda_ctx *ctx, struct ecg_error *err);
/* Waits for the ctx's stream and reports a failure of anything queued on it. */
enum ecg_status ctx_sync(struct cuda_ctx *ctx, const char *stage, struct ecg_error *err);
/* The end of a stage whose results stay on the device: ctx_sync, except on a batch's context
 * (defer_sync), where it returns at once. */
enum ecg_status ctx_stage_done(struct cuda_ctx *ctx, const char *stage, struct ecg_error *err);
/* A context on dev (batch: no staging chunks for pageable uploads, and defer_sync set); same
 * contract as the ctx_create op. */
enum ecg_status cuda_ctx_create_on(struct cuda_state *state, struct cuda_device *dev, bool batch,
                                   struct cuda_ctx **out, struct ecg_error *err);
void cuda_ctx_free(struct cuda_ctx *ctx);
/* Forgets everything downstream of the input (a new request starts). */
void ctx_reset_request(struct cuda_ctx *ctx);
/* fetch, in two halves: fetch_queue copies the beat table to h_stage (queued, no wait; nothing
 * with no beats), fetch_copy waits and splits it into result (sized for ctx->n_beats). */
enum ecg_status fetch_queue(struct cuda_ctx *ctx, struct ecg_error *err);
enum ecg_status fetch_copy(struct cuda_ctx *ctx, struct ecg_result *result,
                           struct ecg_error *err);
/* fetch_copy's split alone, for a caller that has waited for the copy itself. */
enum ecg_status fetch_split(struct cuda_ctx *ctx, struct ecg_result *result,
                            struct ecg_error *err);
/* The split of a table of k beats (latent dimension z) that lies at h on the host; encoded:
 * the VAE ran (the latents and scores are there). */
enum ecg_status table_split(const char *h, size_t k, size_t z, bool encoded,
                            struct ecg_result *result, struct ecg_error *err);
/* The backend ops of the same names (backend.h), in cuda_fetch.cu. */
enum ecg_status cuda_fetch(void *ctx, struct ecg_result *result, struct ecg_error *err);
enum ecg_status cuda_read_buf(void *ctx, enum ecg_stage_buf which, void *host, size_t cap,
                              size_t *n, struct ecg_error *err);
enum ecg_status cuda_write_buf(void *ctx, enum ecg_stage_buf which, const void *host, size_t n,
                               struct ecg_error *err);

/* Stage entry points (one per operation family; each source file exports one). */
enum ecg_status cuda_load_bytes(void *ctx, const void *buf, size_t len,
                                const struct ecg_read_opts *opts, size_t *n, double *fs_hz,
                                char lead[32], struct ecg_error *err);
/* The binary formats (cuda_read_binary.cu), called by cuda_load_from: d_src is the body's device
 * copy or NULL (upload it); ECG_ERR_UNSUPPORTED hands the body to the host reader. */
enum ecg_status load_raw(struct cuda_ctx *ctx, const void *buf, size_t len, const char *d_src,
                         int format, const struct ecg_read_opts *opts, size_t *n_out,
                         struct ecg_error *err);
enum ecg_status load_npy(struct cuda_ctx *ctx, const void *buf, size_t len, const char *d_src,
                         const struct ecg_read_opts *opts, size_t *n_out, struct ecg_error *err);
enum ecg_status load_edf(struct cuda_ctx *ctx, const void *buf, size_t len, const char *d_src,
                         const struct ecg_read_opts *opts, size_t *n_out, double *fs_out,
                         char lead[32], struct ecg_error *err);
/* cuda_load_bytes() of buf, reading the bytes from d_bytes, a device copy of buf[0, len) on the
 * ctx's device that is complete in the ctx's stream order, instead of uploading them (d_bytes
 * NULL: upload them, which is cuda_load_bytes). The host bytes are still read (CSV header, rare
 * hard tokens). Same contract as cuda_load_bytes. */
enum ecg_status cuda_load_from(struct cuda_ctx *ctx, const void *buf, size_t len,
                               const char *d_bytes, const struct ecg_read_opts *opts, size_t *n,
                               double *fs_hz, char lead[32], struct ecg_error *err);
/* Streaming uploads (cuda_upload.cu), the backend ops of the same names (backend.h): begun with
 * the host buffer's capacity, loaded with the body's final length (at most that). */
enum ecg_status cuda_upload_begin(void *state, const void *host, size_t cap,
                                  enum ecg_format format, void **up, struct ecg_error *err);
void cuda_upload_progress(void *up, size_t filled);
void cuda_upload_free(void *up);
bool cuda_upload_prefers_ctx(void *up, void *ctx);
enum ecg_status cuda_load_upload(void *ctx, void *up, size_t len,
                                 const struct ecg_read_opts *opts, size_t *n, double *fs_hz,
                                 char lead[32], bool *from_device, struct ecg_error *err);
enum ecg_status cuda_load_extra(void *ctx, const float *const *leads, size_t n_leads, size_t n,
                                struct ecg_error *err);
/* Kept traces (cuda_trace.cu), the backend ops of the same names (backend.h). */
enum ecg_status cuda_trace_keep(void *ctx, void **trace, size_t *bytes, struct ecg_error *err);
enum ecg_status cuda_trace_minmax(void *trace, size_t start, size_t end, size_t buckets,
                                  struct ecg_minmax *out, struct ecg_error *err);
enum ecg_status cuda_trace_read(void *trace, size_t start, size_t n, float *host,
                                struct ecg_error *err);
void cuda_trace_free(void *trace);
enum ecg_status cuda_resample(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
enum ecg_status cuda_filter(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
enum ecg_status cuda_detect(void *ctx, const struct ecg_plan *plan, size_t *n_beats,
                            struct ecg_error *err);
/* cuda_detect() in two halves: detect_queue queues every step and the copy of the counts to
 * h_stage without waiting; detect_collect waits for them and sets ctx->n_beats. */
enum ecg_status detect_queue(struct cuda_ctx *ctx, const struct ecg_plan *plan,
                             struct ecg_error *err);
enum ecg_status detect_collect(struct cuda_ctx *ctx, size_t *n_beats, struct ecg_error *err);
/* cuda_detect()'s step 5 (cuda_decide.cu): queues the adaptive pass over n_blocks blocks and
 * the boundary merge, flagging the beats among a's candidates, and marks them in prof; does not
 * wait. A failed launch returns its status with err filled. The structs are in
 * cuda_detect_common.cuh. */
struct detect_args;
struct detect_profile;
enum ecg_status cuda_decide(struct cuda_ctx *ctx, const struct detect_args *a, size_t n_blocks,
                            struct detect_profile *prof, struct ecg_error *err);
enum ecg_status cuda_embed(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
enum ecg_status cuda_encode(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
/* Whether cuda_encode may be captured into a CUDA graph (cuda_vae.cu: a fused path, no timers). */
bool cuda_encode_capturable(const struct ecg_model *model);
/* Whether a batched back (cuda_small.cuh) can encode with model: the warp path. */
bool cuda_encode_batchable(const struct ecg_model *model);
/* Signal-quality features (cuda_quality.cu; the backend op of that name, backend.h). */
enum ecg_status cuda_quality(void *ctx, const struct ecg_plan *plan,
                             struct ecg_quality_window *windows, size_t n_win,
                             struct ecg_error *err);
/* Whether the CPU reference takes its AVX2/FMA code paths on this host: the device kernels
 * that mirror it bit for bit follow the same arithmetic. */
bool cuda_host_has_avx2_fma(void);
/* Frees the cuFFT plans of a ctx. */
void cuda_filter_release(struct cuda_ctx *ctx);

/* Dynamic batching (cuda_batch.cu), the backend ops of the same names (backend.h). */
unsigned cuda_batch_lanes(void *state);
enum ecg_status cuda_batch_create(void *state, unsigned lane, unsigned max_batch, void **batch,
                                  struct ecg_error *err);
void cuda_batch_run(void *batch, struct ecg_batch_member *const *members, size_t n);
void cuda_batch_launch(void *batch, struct ecg_batch_member *const *members, size_t n);
bool cuda_batch_ready(void *batch);
void cuda_batch_finish(void *batch, struct ecg_batch_member *const *members, size_t n);
void cuda_batch_destroy(void *batch);

/* Statistics for benchmarks (declared for C in gpu/cuda_stats.h). */
int cuda_memory_stats(size_t *used_now, size_t *used_peak, size_t *reserved_peak);
void cuda_memory_reset_peak(void);

#ifdef __cplusplus
}
#endif

/* Grid size for n elements at CUDA_THREADS per block (capped; kernels are grid-stride). */
static inline unsigned grid_for(size_t n)
{
    size_t blocks = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 65535u * 8u)
        blocks = 65535u * 8u;
    return (unsigned)blocks;
}

#endif /* ECG_GPU_CUDA_INTERNAL_H */
