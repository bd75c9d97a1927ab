/*
 * cuda_small.cuh - short fronts of several analyses at once: a batch's members whose lead takes
 * the one-block path (one lead, at most SMALL_MAX analysis samples, the direct filter) run the
 * kernels of that path once for the whole batch, each block reading its member's arguments from
 * a table on the device (grid y = the member), instead of once per member (cuda_batch.cu).
 *
 * Each context records the arguments its own front last used (struct small_front: cuda_resample,
 * filter_small and detect_steps fill it as they run, whether the stages run, are captured into
 * a graph, or not), each part with the generation it was made in and the recording's length. A
 * record is whole for a recording of n_in samples at fs_in_hz while all three parts were made
 * for that length in the context's current generation: no buffer they point into has moved,
 * no device-resident cache (resampler table, taps) has changed. The batched kernels call the
 * very bodies of the one-context kernels with those arguments, so each member's values are the
 * ones its own front gives, bit for bit.
 */
#ifndef CUDA_SMALL_CUH
#define CUDA_SMALL_CUH

#include "cpu/likeness_core.h"
#include "cpu/noise_core.h"
#include "cuda_detect_common.cuh"
#include "cuda_pdl.cuh"
#include "quality.h"

/* The resampler's arguments (cuda_resample.cu). */
struct resample_args {
    const float *x;
    size_t n;
    const float *table; /* up rows x width */
    size_t width;
    uint32_t up, down;
    uint64_t delay;
    float *y;
    size_t n_out;
    bool fma_path;
};

/* The band step's windows and its scratch (cuda_filter.cu: the ctx's stage scratch): the higher
 * and lower responses, then per window the indices, peaks and gains. */
struct band_layout {
    size_t n, win, n_win;
    float *f_hi, *f_h2, *f_lo;
    struct noise_band_measures m;
    float *keep, *take, *take2;
};

struct small_front {
    /* the record's parts: the length and generation each was made for (host) */
    size_t rs_n_in, filter_n_in, detect_n_in;
    uint64_t rs_generation, filter_generation, detect_generation;
    double fs_in_hz;
    /* what the batched kernels read */
    size_t off;                /* the member's first sample in the batch's samples (device) */
    float *input;              /* its samples go here (n_in floats; a batched pass's row reads
                                * them in the batch's samples instead, unless it scatters) */
    bool identity;             /* no resampling: they go to resampled as well */
    struct resample_args rs;   /* the resampler's arguments otherwise */
    float *filtered;
    struct band_layout band;   /* input and output of the filter: rs.y / filtered */
    struct detect_args a;
    size_t n_win, max_cand, n_blocks;
};

/* ECG_CUDA_BATCH_TIMES=1's marks between the steps of a batched pass: ev recorded on stream,
 * as an event node when the stream is being captured into a graph (external: its replays
 * record it); a failure only loses the mark. */
static inline void small_mark(cudaEvent_t ev, cudaStream_t stream)
{
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess)
        capturing = cudaStreamCaptureStatusNone;
    if ((capturing == cudaStreamCaptureStatusActive
             ? cudaEventRecordWithFlags(ev, stream, cudaEventRecordExternal)
             : cudaEventRecord(ev, stream)) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ctx's record (made on first use); NULL when out of memory (nothing is recorded then). */
struct small_front *small_record(struct cuda_ctx *ctx);
/* Whether ctx's record is whole for n_in samples at fs_in_hz (see above). */
bool small_record_whole(const struct cuda_ctx *ctx, size_t n_in, double fs_in_hz);

/*
 * The batched front's launches, queued on stream, for k members whose records (on the device:
 * members) are whole for the same plan, i.e. the same rate. samples: the batch's samples on the
 * device (member j's at members[j].off); scatter: small_batch_load's first kernel copies them
 * to each member's input (and resampled) buffer, for rows that point at their contexts'
 * buffers; without it the rows point at the samples themselves (cuda_batch_small.cu).
 * counts: 3 int64 per member (candidates, accepted, beats: what each context's own front
 * copies to its h_stage). The max_* are the largest of
 * the members' values (the grids). marks (NULL: none): 5 events recorded between the
 * detector's steps (steps 1-4 | decision blocks | their merge | steps 5-7: the candidates'
 * features (step 4) are computed in steps 1-3's kernel and the rhythm check (step 5) in steps
 * 6-7's, so marks 0 and 1, and 3 and 4, follow one another; with one decision block per
 * member the merge does not run), for timing; mark (NULL: none), the one between a step's two
 * kernels (the direct responses and the band; the decision blocks and their merge).
 */
enum ecg_status small_batch_load(cudaStream_t stream, const float *samples,
                                 const struct small_front *members, size_t k,
                                 const struct small_front *first, size_t max_n_in,
                                 size_t max_n_a, bool scatter, struct ecg_error *err);
enum ecg_status small_batch_filter(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_n_a, const struct ecg_plan *plan,
                                   cudaEvent_t mark, struct ecg_error *err);
enum ecg_status small_batch_detect(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_cand, size_t max_blocks, int64_t *counts,
                                   cudaEvent_t *marks, struct ecg_error *err);
enum ecg_status small_batch_decide(cudaStream_t stream, const struct small_front *members,
                                   size_t k, size_t max_blocks, cudaEvent_t mark,
                                   struct ecg_error *err);
/*
 * The batched back: the members of a batched front go on, on the same stream and with no wait
 * for their beat counts, through segmentation, normalisation, embedding, the VAE and the score,
 * each step launched once for all of them, and their tables are gathered, with their counts and
 * the signal-quality features of their samples (the host would otherwise compute them:
 * engine/batch.c), into one pinned host buffer that the kernels write through its device
 * address (no copy after the pass). The beat counts stay on the device: every kernel reads its
 * member's (counts[2]) and lays its table out for it (table_layout); the grids are sized for each
 * member's largest possible count, its max_cand, which the host knows. As for the front, each
 * block calls the body of the one-context kernel, so a member's table is bit for bit its own
 * back's.
 */
#define SMALL_BACK_BEATS 1024   /* the most candidates a member of a batched back may have */
#define SMALL_BACK_SAMPLES 8192 /* ... and analysis samples (one-block normalisation) */
#define SMALL_BACK_NORM_BYTES 16 /* scratch per member for its normalisation constants */

/* One member of a batched back (a row of a table on the device). */
struct small_back {
    const float *y;            /* the resampled lead, n_a samples */
    const int64_t *peaks_a;    /* its beats on the analysis grid */
    const float *beat_crest;   /* the detector's crest factor at each of them */
    char *table;               /* the context's beat table: the r_peak column holds the beats */
    size_t n_a, n_in;
    const int64_t *counts;     /* its 3 counts from the front (beats at [2]) */
    size_t cap;                /* beat slots: the member's max_cand (its count's bound) */
    size_t slot;               /* its first slot in the batch's embedding, latents and errors */
    size_t out;                /* its table's offset in the batch's output */
    bool encode;               /* the VAE and the score run for it */
    /* its signal-quality features (engine/quality.h), from its samples in the batch's pack */
    size_t x_off;              /* its first sample in the pack (n_in samples) */
    struct ecg_quality_geometry quality;
    size_t quality_out;        /* its windows' offset in the batch's output */
};

/* What segmentation and the embedding take from the plan (one rate: one plan per batch). */
struct small_back_plan {
    int64_t pre_r, beat_min, beat_max;
    uint32_t up, down;
    double fs_in_hz;
    size_t beat_len, z_dim;
    struct likeness_geometry lk; /* the beats' likeness (likeness_core.h) */
};

/* What segmentation and the embedding take from plan (cuda_embed.cu's rules). */
void small_back_plan_of(const struct ecg_plan *plan, size_t z_dim, struct small_back_plan *p);
/* Segmentation and the embedding of every member (cuda_embed.cu), with the normalisation
 * constants small_batch_norm left in norms: emb gets cap rows of beat_len values per member
 * from its slot on (rows past its count are zero). */
enum ecg_status small_batch_embed(cudaStream_t stream, const struct small_back *members,
                                  size_t k, const struct small_back_plan *plan, size_t max_cap,
                                  const void *norms, float *emb, struct ecg_error *err);
/* Every member's normalisation constants (median and scale of its filtered lead: one block
 * each) to norms, SMALL_BACK_NORM_BYTES per member; max_n_a: the most analysis samples of
 * any. Needs only the filtered leads: it may run beside the detection. */
enum ecg_status small_batch_norm(cudaStream_t stream, const struct small_back *members,
                                 size_t k, size_t max_n_a, void *norms, struct ecg_error *err);
/* The VAE over every slot and the score of the members that encode (cuda_vae.cu): latent (z
 * per slot) and recon (one per slot) are scratch; the latents of the kept beats go to each
 * member's table with the scores; mark (NULL: none) is recorded between the VAE and the
 * score, for timing. */
enum ecg_status small_batch_encode(cudaStream_t stream, const struct cuda_device *dev,
                                   const struct ecg_model *model,
                                   const struct small_back *members, size_t k, size_t slots,
                                   const float *emb, float *latent, double *recon,
                                   cudaEvent_t mark, struct ecg_error *err);
/* Every member's quality windows (gpu/cuda_quality.cu's kernel, per member; max_win: the most
 * windows of any) to out + its quality_out. */
enum ecg_status small_batch_quality(cudaStream_t stream, const struct small_back *members,
                                    size_t k, size_t max_win, const float *pack, char *out,
                                    struct ecg_error *err);
/* Every member's beats' likeness (cpu/likeness_core.h) into its table's column, from its
 * samples in the pack (from its x_off) and its R peaks: needs only the detection. */
enum ecg_status small_batch_likeness(cudaStream_t stream, const struct small_back *members,
                                     size_t k, const struct small_back_plan *plan,
                                     size_t max_cap, const float *pack, struct ecg_error *err);
/* Every member's table (laid out for its count) to out + its out offset, and its 3 counts to
 * out's start (3 int64 a member, in row order). */
enum ecg_status small_batch_gather(cudaStream_t stream, const struct small_back *members,
                                   size_t k, size_t z_dim, size_t max_cap, char *out,
                                   struct ecg_error *err);

#endif /* CUDA_SMALL_CUH */
