/*
 * cuda_batch.cuh - the batch object of gpu/cuda_batch.cu (one per lane), shared with
 * gpu/cuda_batch_small.cu, which runs the batched short pass (a batch's short leads' fronts and
 * backs as one launch per step: cuda_small.cuh) on it. gpu/ only.
 */
#ifndef CUDA_BATCH_CUH
#define CUDA_BATCH_CUH

#include "cuda_internal.h"
#include "cuda_small.cuh"

/*
 * A member context's front (resample, filter, detect_queue) as a CUDA graph: one launch instead
 * of about twenty. The front's launches are a function of the input length, the rate and the
 * context's buffers and device-resident caches (ctx->generation), so a graph captured for one
 * (n_in, fs_in_hz, generation) replays exactly what the stages would queue. A front is captured
 * the second time it runs with the same key, when its first run moved no buffer (so the capture
 * allocates nothing); the graph replays while the key holds.
 */
struct front_graph {
    cudaGraphExec_t exec;       /* NULL: none */
    size_t n_in;
    double fs_in_hz;
    uint64_t generation;        /* the context's when captured */
    size_t n_a;                 /* host state the front leaves: ctx->n_a, ctx->detect_queued */
    bool queued;
    /* the last front run without a graph: its key, and whether it moved nothing */
    size_t last_n_in;
    double last_fs_in_hz;
    uint64_t last_generation;   /* the context's after it */
    bool last_clean;
};

/*
 * A member context's back (embed, encode, the copy of the beat table to h_stage) as a CUDA
 * graph. Its launches are a function of the front's key and of the beat count k (the table's
 * layout, the grids), so a graph is kept per (n_in, fs_in_hz, generation, k, encode); a few per
 * context, as k varies from strip to strip. Captured, as the front, the second time in a row
 * the same key runs, when its first run moved no buffer.
 */
#define BACK_GRAPHS 4
struct back_key {
    size_t n_in;
    double fs_in_hz;
    uint64_t generation;
    size_t k;
    bool encode;
};

struct back_graph {
    cudaGraphExec_t exec[BACK_GRAPHS]; /* NULL: none */
    struct back_key key[BACK_GRAPHS];
    uint64_t last_use[BACK_GRAPHS];
    uint64_t clock;
    struct back_key last;       /* the last back run without a graph, its generation after */
    bool last_clean;            /* ... and whether it moved nothing */
};

/*
 * A batched short pass's kernels (cuda_batch_small.cu: the batched front and back, between the
 * copies in and the copy out) as one CUDA graph: one launch instead of about fifteen, and the
 * kernels run back to back on the device instead of each waiting for the host's next launch.
 * What the kernels are launched with is a function of the pass's shape alone (struct
 * pass_key): its rows, the grids' extents (the largest member's samples, candidates, blocks,
 * beat slots and quality windows), the rate (the plan's taps and the resampler's table size),
 * whether the backs and the VAE run, and where the batch's buffers are. Every member's own
 * values (its buffers, lengths, counts) are read on the device from the row tables, which are
 * copied before the graph runs, so one graph serves every batch of its shape, bit for bit as
 * the launches it holds. A shape's graph is captured the second time the shape runs (a shape
 * seen once costs no more than its launches) and kept, PASS_GRAPHS per batch object, the least
 * recently used out. Strips from a fleet of devices repeat a few shapes (one length, one rate),
 * so the graphs are few and replay.
 */
#define PASS_GRAPHS 96
#define PASS_BUFS 8

struct pass_key {                 /* zeroed before it is filled: compared with memcmp */
    size_t rows, max_n_in, max_n_a, max_cand, max_blocks, max_cap, slots, max_win;
    double fs_in_hz;
    const void *plan;
    const void *bufs[PASS_BUFS];  /* d_pack, d_small, d_out, d_emb, d_latent, d_recon, d_norms,
                                   * h_out_dev */
    bool back, encode;
};

struct pass_graph {
    struct pass_key key;
    bool used;                    /* the entry holds a key */
    bool failed;                  /* its capture failed: its shape runs launch by launch */
    cudaGraphExec_t exec;         /* NULL: seen once, not captured yet */
    uint64_t last_use;
};

#define GPU_STEPS 16
#define PACK_ALIGN 32 /* floats: a member's samples in the pack start on 128-byte boundaries */

/*
 * Where a lane's time goes (ECG_CUDA_BATCH_TIMES=1, 2 or 3 prints it when the batch object is
 * destroyed, at shutdown; =1 adds the device's time by step, from events recorded between
 * the steps, in the pass graphs too; =3 the pass's device time as a whole, =3:K also up to
 * step K's mark alone): seconds in each step of cuda_batch_run, and the part of steps 2
 * and 3 spent waiting for the device. Kept by the lane's own thread: no atomics.
 */
struct batch_times {
    double since;               /* when the batch object was made */
    double front, back, fetch;  /* steps 1, 2, 3 (seconds, all batches) */
    double wait_count, wait_table; /* ... of which waiting for counts / tables */
    double done;                /* ... of step 3: handing members back */
    double pack;                /* ... of step 1: the members' samples into the pack */
    double rows;                /* ... of step 1: a batched pass's rows (small_front_queue) */
    double small_split, small_done; /* ... of step 2: a batched back's members' tables split
                                     * into their results, and their hand-back */
    double front_launch;        /* ... of step 1: cudaGraphLaunch of replayed fronts */
    double back_launch;         /* ... of step 2: cudaGraphLaunch of replayed backs */
    double pass_launch;         /* ... of step 1: cudaGraphLaunch of replayed batched passes */
    unsigned long long batches, members, front_replays, back_replays, pass_replays;
    unsigned long long small_rows;  /* members whose front ran in a batched short front */
    unsigned long long back_rows;   /* ... and whose back ran in a batched back */
    /* the device's time in the steps of the batched passes (events on their stream, waited
     * for with the pass): copies in, the resampler (and the samples scattered to each
     * member's input, where the rows do not read them in place: cuda_batch_small.cu), the
     * filter's direct responses and band, the detector's steps 1-4, decision blocks and their
     * merge, steps 5-7 (rhythm check, refinement, order; two marks between them come
     * consecutively: cuda_small.cuh), the wait for the side branch (quality features,
     * normalisation: pass_launches), embedding, VAE, score, tables gathered, copy out */
    cudaEvent_t ev[GPU_STEPS + 1];
    double gpu_ms[GPU_STEPS];
    unsigned long long gpu_passes;
    /* ECG_CUDA_BATCH_TIMES=3: only the marks around the pass (ev[1], after the copies in, and
     * ev[15], after it), outside its graph: its device time with nothing recorded between
     * its kernels, which would stand between each and the next (cuda_pdl.cuh) */
    bool ends_only;
    double pass_ms;
    int split;                  /* ECG_CUDA_BATCH_TIMES=3:K: also ev[K], one mark inside */
    double split_ms;            /* ... ev[1] to ev[K] */
    size_t front_nodes, back_nodes, pass_nodes; /* in the last front, back and pass graph captured */
};

struct cuda_batch {
    struct cuda_state *state;
    struct cuda_device *dev;
    unsigned max_batch;
    bool use_graphs;            /* unless ECG_CUDA_BATCH_GRAPHS=0 */
    bool back_graphs;           /* use_graphs, and the encode can be captured */
    struct front_graph *graph;  /* per member context */
    struct back_graph *back;    /* per member context */
    struct cuda_ctx **member;   /* max_batch contexts on dev */
    bool *live;                 /* per member of the batch running: no failure so far */
    float *h_pack;              /* pinned: every member's samples, one after the other, each
                                 * from a multiple of PACK_ALIGN floats */
    size_t h_pack_bytes;
    size_t *off;                /* per member: its first sample in the pack */
    /* the batched short front and back (cuda_small.cuh), unless ECG_CUDA_BATCH_SMALL=0
     * (neither) or =front (the front alone) */
    bool small_fronts, small_backs;
    bool encode_batchable;      /* the model's VAE can run in a batched back */
    int *small_row;             /* per member: its row of the tables, -1: its front runs alone */
    /* the fronts' table, pinned and on the device, and the backs' table right after its rows
     * in the same allocation (cuda_batch_small.cu), so that one copy takes both */
    struct small_front *h_small, *d_small;
    struct small_back *h_back, *d_back;
    void *d_norms;              /* the backs' scratch: SMALL_BACK_NORM_BYTES per row */
    /* what comes back: 3 counts per row (candidates, accepted, beats), then, after a batched
     * back, each row's table and quality windows; pinned (h_out). d_out: the same layout on the
     * device, where the detection leaves the counts (the backs read them there) */
    char *h_out, *d_out;
    char *h_out_dev;            /* h_out's address on the device (pinned memory is mapped): a
                                 * batched back's last kernels write the counts, the tables and
                                 * the quality features there themselves, with no copy after */
    size_t h_out_bytes, d_out_bytes;
    float *d_pack;              /* the pack on the device */
    size_t d_pack_bytes;
    float *d_emb, *d_latent;    /* a batched back's embedding and latents, per slot */
    double *d_recon;            /* ... and reconstruction errors */
    size_t d_emb_bytes, d_latent_bytes, d_recon_bytes;
    bool pass_graphs;           /* the batched passes' graphs (struct pass_graph): use_graphs */
    struct pass_graph *pass;    /* PASS_GRAPHS */
    uint64_t pass_clock;
    int pass_ran;               /* the batch being run's pass: 0 launch by launch, 1 its graph
                                 * replayed, 2 captured (and launched) */
    unsigned small_first;       /* the member on whose stream the batched front runs */
    size_t n_run;               /* members of the batch launched and not finished; 0: none
                                 * (or its launch failed them all) */
    size_t n_small;             /* rows in the batch being run */
    bool back_on;               /* ... and their backs run batched after it */
    unsigned lane;
    struct batch_times times;
    /* the side branch of a batched pass with backs (pass_launches): the quality features from
     * the start, the normalisation once the filter is done, joined before the embedding */
    bool branch;                /* unless ECG_CUDA_BATCH_BRANCH=0 (then in line) */
    /* a batched pass's rows read each member's samples in the pack's copy on the device, unless
     * ECG_CUDA_BATCH_SCATTER=1: its first kernel then copies them to each member's input */
    bool scatter;
    /* ECG_CUDA_BATCH_DOZE_US=N: the lane sleeps until N us after a batched pass's launch
     * before it polls for its end (the cores go to the HTTP threads meanwhile) */
    double doze_us;
    double pass_launched;       /* cuda_now_s() after the pass's launch */
    cudaStream_t side;
    cudaEvent_t fork, filtered, join, detected;
};

/* Grows *buf (a void ** in disguise), pinned host memory or (device) device memory, to hold
 * bytes, with room to spare; what: what it holds, for the error. Called between batches only. */
enum ecg_status bytes_reserve(void *buf_ptr, size_t *cap, size_t bytes, bool device,
                              const char *what, struct ecg_error *err);
/* Records member i's failure: its status and error, retry_alone for a lack of memory. */
void member_fail(struct cuda_batch *b, struct ecg_batch_member *m, unsigned i,
                 enum ecg_status status);

/* The bytes of the row tables' allocation for max_batch rows of each. */
size_t small_rows_bytes(unsigned max_batch);

/* gpu/cuda_batch_small.cu. Step 1 of cuda_batch_run for the members whose front (and back) can
 * run batched: sets b->small_row, b->n_small and b->back_on, queues the pass on the first such
 * member's stream; a failure fails those members (handed back). */
void small_front_queue(struct cuda_batch *b, struct ecg_batch_member *const *members, size_t n,
                       size_t total);
/* Step 2's start: waits for the batched pass; gives its members their beat counts and, after a
 * batched back, their results (handed back). */
void small_front_collect(struct cuda_batch *b, struct ecg_batch_member *const *members,
                         size_t n);
/* The name of step i of a batched pass (ECG_CUDA_BATCH_TIMES). */
const char *small_step_name(int i);

#endif /* CUDA_BATCH_CUH */
