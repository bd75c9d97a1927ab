/*
 * cuda_detect_common.cuh - what the detector's two CUDA files share (gpu/ only): the argument
 * block every detector kernel takes by value, the per-block beat ends that the decision hands to
 * the boundary merge, the round-to-nearest double macros, the small median, and the step timer.
 *
 * cuda_detect.cu (candidates, refinement: twin of engine/cpu/detect.c) lays out the arguments
 * and the scratch they point into, and calls cuda_decide() of cuda_decide.cu (the adaptive pass:
 * twin of engine/cpu/decide.c) between the two. The project builds without relocatable device
 * code, so device helpers used by both files live here as static inline functions, compiled
 * into each.
 */
#ifndef ECG_GPU_CUDA_DETECT_COMMON_CUH
#define ECG_GPU_CUDA_DETECT_COMMON_CUH

#include <stdint.h>

#include <cub/cub.cuh>

#include "cpu/insert_core.h" /* the rhythm check (insert_small_body) */
#include "cpu/unlike_core.h" /* the decision's shape test */
#include "cuda_internal.h"

/* Double operations rounded to nearest, never contracted into an FMA: the CPU's arithmetic. */
#define DMUL(a, b) __dmul_rn((a), (b))
#define DADD(a, b) __dadd_rn((a), (b))
#define DSUB(a, b) __dsub_rn((a), (b))

/* A block's first or last marked beat, for the boundary merge: candidate k (SIZE_MAX: the block
 * marked none), its position, height and slope. */
struct block_end {
    int64_t pos;
    size_t k;
    float height, slope;
};

/* The shape test's references a decision block starts from (decide.c's references prelude):
 * ref[0, n) newest first. */
struct decide_refs {
    int64_t ref[DETECT_UNLIKE_REFS];
    int64_t n;
};

/* Everything the kernels of both files need, by value. */
struct detect_args {
    const float *x;      /* input, n_in */
    const float *y;      /* resampled, n_a */
    const float *y_extra; /* the further leads' resampled signals, (n_leads - 1) x n_a */
    size_t n_leads;      /* the leads detection reads (the decision's shape test asks each) */
    struct unlike_geometry unlike; /* the shape test's shapes and shifts (unlike_core.h) */
    const float *f;      /* filtered, n_a */
    const float *ricker; /* the plan's taps (device copy) */
    size_t ricker_len;
    size_t n_in, n_a;
    float *absf;         /* n_a: |f| with recomputed edges */
    float *peak;         /* device scalar: max of absf */
    float *env;          /* n_a */
    uint8_t *flag;       /* n_a: candidate flags, then (first max_cand) beat flags */
    int64_t *cpos;       /* candidates, ascending */
    int64_t *n_cand;     /* device scalar */
    float *height, *slope;
    float *crest;        /* per window of crest_win samples: the envelope's crest factor */
    size_t crest_win;
    double *crest_peak, *crest_mean; /* per window: the envelope's peak and mean */
    int64_t *beats_c;    /* accepted candidates' positions (analysis grid) */
    int64_t *n_acc;      /* device scalar: accepted candidates */
    int64_t *ref_in, *ref_a; /* refined positions per accepted candidate, -1 = dropped */
    int64_t *n_beats;    /* device scalar: final beats */
    int *order_bad;      /* device scalar: a refined beat needs the sequential ordering test */
    int64_t *peaks_in;   /* the table's r_peak column */
    int64_t *peaks_a;    /* the ctx's analysis-grid peaks */
    float *beat_crest;   /* the ctx's: crest[peaks_a[b] / crest_win] per beat (the quality
                          * verdict's, beside the likeness) */
    size_t half_env, half_nms, slope_win;
    int64_t refractory, twave, learn;
    int64_t block, warmup, tail; /* the decision pass's blocks (decide.c), samples */
    struct block_end *block_first, *block_last; /* per block: first and last beat marked */
    struct decide_refs *refs; /* per block: its references prelude's (block 0: unused) */
    int64_t refs_reach;  /* the prelude's length (CPU_DETECT_REFS_S), samples */
    double fs;
    int64_t reach_in, lobe_reach, base_reach;
    uint32_t up, down;
    /* the rhythm check after the decision (cuda_insert.cu), max_cand entries each */
    int64_t *ins_k;      /* the flagged candidates' indices */
    int64_t *ins_pos;    /* their positions */
    float *ins_h;        /* their heights */
    uint8_t *ins_mark;   /* verdicts */
    int64_t *n_ins;      /* device scalar: flagged candidates */
};

/* The fusion of several leads' envelopes (cuda_fuse.cu; engine/cpu/fuse_core.h). */
struct fuse_args {
    const float *lead_env; /* n_leads x n_a: each lead's envelope */
    const float *y_extra;  /* (n_leads - 1) x n_a: the further leads' resampled signals */
    size_t n_leads, n_a;
    size_t win, n_win;     /* statistics window, samples, and the number of windows */
    double *peak, *mean, *level, *weight; /* n_leads x n_win each */
    float *gain;           /* n_leads x n_win */
    /* step 3a, with three leads or more (NULL otherwise): the window peaks' positions,
     * (n_leads + 1) x n_win (the fused envelope's last), and the leads' agreements */
    int64_t *at;
    double *agree;         /* n_leads x n_win */
    int64_t reach;         /* FUSE_AGREE_S in analysis samples */
};

/* Steps 1-4 of cuda_fuse.cu (and 3a, 3 and 4 again with f->at set): the fused envelope into
 * env (n_a floats); queued on the stream. */
enum ecg_status cuda_fuse(struct cuda_ctx *ctx, const struct fuse_args *f, float *env,
                          struct ecg_error *err);
/* Each lead's step-3a factor averaged over the windows (fuse_agreement_mean) into out[0,
 * n_leads), on the device; f->at set. Queued. */
enum ecg_status cuda_fuse_agree_mean(struct cuda_ctx *ctx, const struct fuse_args *f,
                                     double *out, struct ecg_error *err);
/* Step 5: every candidate's slope (a->slope) from every lead, once a->cpos and a->n_cand hold
 * the candidates (at most max_cand). */
enum ecg_status cuda_fuse_slopes(struct cuda_ctx *ctx, const struct fuse_args *f,
                                 const struct detect_args *a, size_t max_cand,
                                 struct ecg_error *err);
/* The rhythm check (cuda_insert.cu): clears the flags (a->flag, max_cand candidates) of the
 * beats the decision flagged that are insertions; uses a->ins_* as scratch. Queued; small: in
 * one block (a short lead, DETECT_SMALL_THREADS). */
enum ecg_status cuda_reject_insertions(struct cuda_ctx *ctx, const struct detect_args *a,
                                       size_t max_cand, bool small, struct ecg_error *err);

/*
 * Short leads (cuda_detect.cu's SMALL_MAX analysis samples) run several of the detector's steps
 * in one block of DETECT_SMALL_THREADS each (front_small_kernel, insert_small_kernel,
 * settle_small_kernel), in place of a launch per step.
 */
#define DETECT_SMALL_THREADS 1024

/* The index itself, as the counting iterator gives it to cub::DeviceSelect::Flagged. */
struct index_of {
    __device__ int64_t operator()(size_t i) const { return (int64_t)i; }
};

/* One block's ordered compaction, what cub::DeviceSelect::Flagged writes: out[] = value(i) for
 * every i < n with flag[i], ascending, and *count their number (every thread of the block
 * calls it; thread t takes a contiguous run of the indices, a block scan gives its offset). */
typedef cub::BlockScan<int, DETECT_SMALL_THREADS> detect_small_scan;
template <typename Value>
static __device__ void block_compact(const uint8_t *flag, size_t n, Value value, int64_t *out,
                                     int64_t *count, detect_small_scan::TempStorage &temp)
{
    const size_t per = (n + DETECT_SMALL_THREADS - 1) / DETECT_SMALL_THREADS;
    const size_t first = (size_t)threadIdx.x * per;
    const size_t last = first + per < n ? first + per : n;
    int here = 0, offset = 0, total = 0;
    for (size_t i = first; i < last; i++)
        here += flag[i] != 0;
    detect_small_scan(temp).ExclusiveSum(here, offset, total);
    for (size_t i = first; i < last; i++)
        if (flag[i])
            out[offset++] = value(i);
    if (threadIdx.x == 0)
        *count = total;
}

static __device__ __forceinline__ void gather_beat(const struct detect_args *a, size_t b)
{
    const size_t k = (size_t)a->ins_k[b];
    a->ins_pos[b] = a->cpos[k];
    a->ins_h[b] = a->height[k];
}

/* The rhythm check's steps 1-4 (cuda_insert.cu) in one block, for a short lead: the same
 * functions between block barriers, the compaction by block_compact (the same indices in the
 * same order). */
static __device__ __forceinline__ void insert_small_body(struct detect_args a, size_t max_cand)
{
    __shared__ detect_small_scan::TempStorage temp;
    block_compact(a.flag, max_cand, index_of(), a.ins_k, a.n_ins, temp);
    __syncthreads();
    const size_t n = (size_t)*a.n_ins;
    for (size_t b = threadIdx.x; b < max_cand && b < n; b += DETECT_SMALL_THREADS)
        gather_beat(&a, b);
    __syncthreads();
    for (size_t b = threadIdx.x; b < max_cand && b < n; b += DETECT_SMALL_THREADS)
        a.ins_mark[b] = insert_is_artefact(a.ins_pos, a.ins_h, n, b);
    __syncthreads();
    for (size_t b = threadIdx.x; b < max_cand && b < n; b += DETECT_SMALL_THREADS)
        if (a.ins_mark[b])
            a.flag[a.ins_k[b]] = 0;
}

/* cpu_median_inplace() of n <= 64 values: sorted in place, middle or mean of the two middle. */
static __device__ inline float median_small(float *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        float h = v[i];
        size_t t = i;
        while (t > 0 && v[t - 1] > h) {
            v[t] = v[t - 1];
            t--;
        }
        v[t] = h;
    }
    if (n % 2 == 1)
        return v[n / 2];
    return (float)DMUL(0.5, DADD((double)v[n / 2 - 1], (double)v[n / 2]));
}

/* With ECG_CUDA_PROFILE set, the detector times its steps with CUDA events and prints the
 * split to stderr (for the benchmark's explanation of the stage time). cuda_detect() owns the
 * timer and prints it; both files mark their steps. */
#define DETECT_PROFILE_MAX 10
struct detect_profile {
    bool on;
    int n;
    cudaEvent_t ev[DETECT_PROFILE_MAX];
    const char *name[DETECT_PROFILE_MAX];
};

static inline void profile_mark(struct detect_profile *p, cudaStream_t stream, const char *name)
{
    if (!p->on || p->n >= DETECT_PROFILE_MAX)
        return;
    if (cudaEventCreate(&p->ev[p->n]) != cudaSuccess) {
        (void)cudaGetLastError();
        p->on = false;
        return;
    }
    (void)cudaEventRecord(p->ev[p->n], stream);
    p->name[p->n++] = name;
}

#endif /* ECG_GPU_CUDA_DETECT_COMMON_CUH */
