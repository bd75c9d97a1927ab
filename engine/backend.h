/*
 * backend.h - the table of operations a compute backend provides (internal to the engine).
 *
 * The engine (engine/engine.c) orchestrates a request as a fixed sequence of stages and times
 * each; a backend (engine/cpu/ or gpu/) keeps the request's data in its own memory (host arrays
 * for the CPU, device buffers for CUDA) inside a per-worker context, so that no stage round-trips
 * through the host. Only fetch() brings the beat table back.
 *
 * Each stage returns when its work is complete, so that the engine's per-stage timings are real.
 *
 * Threading: open/close are called once per engine. A context is used by one thread at a time
 * (the engine's worker pool guarantees it); different contexts run concurrently. host_alloc/free
 * and the upload_* operations may be called from any thread, outside any context.
 *
 * Streaming uploads (optional upload_* ops and load_upload): the backend copies a request body to
 * its device while the body arrives (into room for the buffer's capacity: the body's length may
 * be known only at the end) and load_upload parses from that copy; the host bytes stay
 * authoritative, so every failure of the copy falls back to load_bytes of the host bytes.
 *
 * No CUDA type may appear here: gpu/ hides its state behind void pointers.
 */
#ifndef ECG_BACKEND_H
#define ECG_BACKEND_H

#include "ecg.h"
#include "plan.h"

struct ecg_quality_window; /* quality.h */

#ifdef __cplusplus
extern "C" {
#endif

struct ecg_quality_window; /* engine/quality.h */

/*
 * One analysis of a batch (engine/batch.c). The engine fills the inputs and reads the outputs;
 * the backend's batch_run fills the outputs of every member it is given, and hands each member
 * back with ecg_batch_member_done as soon as that member's outputs are final.
 */
struct ecg_batch_member {
    /* inputs: one lead of n samples (host memory, read-only during the batch) and its plan */
    const float *samples;
    size_t n;
    const struct ecg_plan *plan;
    uint32_t latent_dim;         /* the model's (ecg_batch_result sizes the result with it) */
    bool with_model;             /* the engine has a model: encode runs */
    /* the signal-quality features of the samples (engine/quality.h): n_win windows of the
     * geometry ecg_quality_geometry_of(n, plan->fs_in_hz) go to windows. A batch may compute
     * them on the device with the rest (bit for bit the host's: gpu/cuda_quality.cu) and then
     * sets windows_done; otherwise the engine computes them on the host afterwards. */
    struct ecg_quality_window *windows;
    size_t n_win;
    bool windows_done;
    /* outputs */
    struct ecg_result *result;   /* from ecg_batch_result(), owned by the member afterwards */
    enum ecg_status status;      /* ECG_OK, else err says why */
    struct ecg_error err;
    bool retry_alone;            /* the failure was the batch's (memory), not this input's: the
                                  * engine runs the analysis on its own pass instead */
    /* engine/batch.c's bookkeeping */
    struct ecg_batch_member *next;
    double enqueued_ms, queue_ms;
    unsigned batch_size;
    void (*done)(void *arg);     /* what ecg_batch_member_done calls: the waiting thread's
                                  * semaphore, or an asynchronous caller's callback */
    void *done_arg;
};

/* A result sized for k beats for member m (NULL when out of memory), stored in m->result. */
struct ecg_result *ecg_batch_result(struct ecg_batch_member *m, size_t k);
/* engine/batch.c: m's outputs (status, err, result, retry_alone) are final; its thread goes on
 * with them at once, while the batch runs on. batch_run calls it exactly once per member, as
 * the last thing it does with that member: m may be gone as soon as it returns. */
void ecg_batch_member_done(struct ecg_batch_member *m);

/* Intermediate buffers a test can read back or inject, stage by stage. */
enum ecg_stage_buf {
    ECG_BUF_INPUT = 0,  /* float[n_in]: the loaded signal, input grid */
    ECG_BUF_RESAMPLED,  /* float[n_a]: the signal at the analysis rate */
    ECG_BUF_FILTERED,   /* float[n_a]: the Ricker filter response */
    ECG_BUF_PEAKS,      /* int64[k]: R peaks, input grid (after detect) */
    ECG_BUF_EMBED,      /* float[k * beat_len]: normalised, zero-padded beats (after embed) */
    ECG_BUF_LATENT,     /* float[k * latent_dim] (after encode) */
    ECG_BUF_SCORE,      /* float[k] (after encode) */
    ECG_BUF_COUNT
};

struct ecg_backend_ops {
    const char *name; /* "cpu" / "cuda" */

    /* Opens the backend once per engine: device context, library handles, model upload.
     * model may be NULL. Returns ECG_ERR_DEVICE if no usable device. */
    enum ecg_status (*open)(const struct ecg_engine_config *config, void **state,
                            struct ecg_error *err);
    void (*close)(void *state);
    /* Human description of the device; valid until close. */
    const char *(*device)(void *state);

    /* Per-worker context: scratch buffers, stream, plans. */
    enum ecg_status (*ctx_create)(void *state, void **ctx, struct ecg_error *err);
    void (*ctx_destroy)(void *ctx);

    /* Pipeline stages, in this order. Each works on the data the previous stage left in ctx. */
    enum ecg_status (*load)(void *ctx, const float *samples, size_t n, struct ecg_error *err);
    /* Optional (NULL = the engine reads on the host, then calls load): takes the raw bytes of
     * a recording in a format the backend parses itself. Returns ECG_ERR_UNSUPPORTED (without
     * touching err) for a format it does not handle, so the engine falls back to the host
     * reader; any other failure is final. Sets *n and *fs_hz of the loaded signal. */
    enum ecg_status (*load_bytes)(void *ctx, const void *buf, size_t len,
                                  const struct ecg_read_opts *opts, size_t *n, double *fs_hz,
                                  char lead[32], struct ecg_error *err);
    /* Further leads of the recording just loaded (n samples each, same rate), which detection
     * fuses with the first; resample and filter treat them as they treat the first. Called
     * after load/load_bytes only for a recording of several leads; a load forgets them. */
    enum ecg_status (*load_extra)(void *ctx, const float *const *leads, size_t n_leads, size_t n,
                                  struct ecg_error *err);
    enum ecg_status (*resample)(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
    enum ecg_status (*filter)(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
    /* Finds R peaks; sets *n_beats. */
    enum ecg_status (*detect)(void *ctx, const struct ecg_plan *plan, size_t *n_beats,
                              struct ecg_error *err);
    /* Segments into beats, RR intervals, kept flags; normalises and embeds kept beats. */
    enum ecg_status (*embed)(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
    /* Runs the VAE encoder and scores kept beats. Only called when the engine has a model. */
    enum ecg_status (*encode)(void *ctx, const struct ecg_plan *plan, struct ecg_error *err);
    /* Signal-quality features (engine/quality.h) of the loaded input, copied to the host:
     * n_win entries, the windows of ecg_quality_geometry_of(n_in, plan->fs_in_hz). Exact
     * arithmetic: both backends give bit-identical features. Needs only load. */
    enum ecg_status (*quality)(void *ctx, const struct ecg_plan *plan,
                               struct ecg_quality_window *windows, size_t n_win,
                               struct ecg_error *err);
    /* Copies the beat table into result, whose arrays the engine has allocated for n_beats
     * (latent/score/outlier are NULL when there is no model). */
    enum ecg_status (*fetch)(void *ctx, struct ecg_result *result, struct ecg_error *err);

    /* Test hooks: copy an intermediate buffer out (up to cap elements; *n gets its length) or
     * replace it (the next stage then starts from the injected data). */
    enum ecg_status (*read_buf)(void *ctx, enum ecg_stage_buf which, void *host, size_t cap,
                                size_t *n, struct ecg_error *err);
    enum ecg_status (*write_buf)(void *ctx, enum ecg_stage_buf which, const void *host, size_t n,
                                 struct ecg_error *err);

    /* Optional, both or neither (NULL = malloc/free): host memory that load_bytes reads fastest
     * (CUDA: pinned, DMA'd without a staging copy). host_alloc returns NULL when out of memory;
     * host_free accepts NULL and only pointers from this backend's host_alloc. Any thread. */
    void *(*host_alloc)(void *state, size_t bytes);
    void (*host_free)(void *state, void *ptr);

    /* Optional, all or none (NULL = no streaming upload; ecg.h describes the feature): a
     * recording copied to the device while its host buffer fills.
     * upload_begin: starts the upload of at most cap bytes that will arrive in host (from
     *   host_alloc, at least cap bytes; cap is the final length when the caller knows it, else
     *   the buffer's capacity). ECG_ERR_UNSUPPORTED (err untouched) when streaming brings
     *   nothing; any other failure (device memory) may fill err, which the engine ignores. On
     *   failure *up is NULL and nothing is left to undo. Called from any thread (the service: an
     *   HTTP thread); never blocks on the device.
     * upload_progress: host[0, filled) is final (filled <= cap: the engine clamps); queues
     *   copies. Never blocks; a failure is kept in up (the load then reads the host bytes).
     * upload_free: waits for the copies that read host, frees up and its device memory.
     * upload_prefers_ctx: true when ctx can read up's device copy (same device); the engine
     *   then picks that ctx among the free ones. Called under the engine's lock: cheap.
     * load_upload: load_bytes of host[0, len) (len <= cap, checked by the engine; every byte of
     *   it final), copying what progress has not and reading its device copy where it can; same
     *   contract as load_bytes, ECG_ERR_UNSUPPORTED included (the engine then runs the host
     *   reader on the host bytes). *from_device is set true when the loaded signal was parsed
     *   from the device copy (false otherwise, on every path).
     * One thread at a time per upload (the engine's caller guarantees it). */
    enum ecg_status (*upload_begin)(void *state, const void *host, size_t cap,
                                    enum ecg_format format, void **up, struct ecg_error *err);
    void (*upload_progress)(void *up, size_t filled);
    void (*upload_free)(void *up);
    bool (*upload_prefers_ctx)(void *up, void *ctx);
    enum ecg_status (*load_upload)(void *ctx, void *up, size_t len,
                                   const struct ecg_read_opts *opts, size_t *n, double *fs_hz,
                                   char lead[32], bool *from_device, struct ecg_error *err);

    /* Kept traces (ecg.h, struct ecg_trace), all four required:
     * trace_keep: copies the ctx's loaded input signal (ECG_BUF_INPUT) into new memory of the
     *   backend's own (CUDA: device memory on the ctx's device); *bytes gets what it holds.
     * trace_minmax: ecg_minmax() of the kept samples, computed where they are (the engine has
     *   checked the range; B = min(n_buckets, end - start) >= 1). Any thread, concurrently on
     *   the same trace.
     * trace_read: copies samples [start, start + n) to host. Any thread.
     * trace_free: frees it (NULL ok). */
    enum ecg_status (*trace_keep)(void *ctx, void **trace, size_t *bytes, struct ecg_error *err);
    enum ecg_status (*trace_minmax)(void *trace, size_t start, size_t end, size_t n_buckets,
                                    struct ecg_minmax *out, struct ecg_error *err);
    enum ecg_status (*trace_read)(void *trace, size_t start, size_t n, float *host,
                                  struct ecg_error *err);
    void (*trace_free)(void *trace);

    /* Optional, all or none (NULL: engine/batch.c runs a batch's members one after another
     * through the stages above, on a context of its own): dynamic batching.
     * batch_lanes: how many batchers the engine starts (CUDA: config->batch_lanes per device).
     * batch_create: what the batches of lane (< batch_lanes) run on, for up to max_batch
     *   members (CUDA: contexts on the lane's device, pinned memory); *batch NULL on failure.
     * batch_run: analyses n <= max_batch members, each exactly as load + resample + filter +
     *   detect + embed + encode (when m->with_model) + fetch would on a context of its own:
     *   identical beat tables, member by member (the quality features are the engine's). Fills
     *   every member's status, err, result and retry_alone, then hands it back
     *   (ecg_batch_member_done: each as soon as its own outputs are final, not at the end of
     *   the batch); a failing member never fails the others. Called by the lane's batcher
     *   thread only.
     * batch_destroy: frees it (NULL ok).
     * Optional again, all or none: batch_run in two halves, so that a lane keeps several
     * batches in flight, each on a batch object of its own (engine/batch.c).
     * batch_launch: batch_run's first half: queues the batch's device work and returns without
     *   waiting for it (members that fail here are handed back at once).
     * batch_ready: whether the device work batch_launch queued is done (it does not wait),
     *   so that batch_finish would not wait for the device.
     * batch_finish: the second half: waits for what is left and hands every member still
     *   held back, as batch_run does. launch then finish on one batch is batch_run. */
    unsigned (*batch_lanes)(void *state);
    enum ecg_status (*batch_create)(void *state, unsigned lane, unsigned max_batch, void **batch,
                                    struct ecg_error *err);
    void (*batch_run)(void *batch, struct ecg_batch_member *const *members, size_t n);
    void (*batch_destroy)(void *batch);
    void (*batch_launch)(void *batch, struct ecg_batch_member *const *members, size_t n);
    bool (*batch_ready)(void *batch);
    void (*batch_finish)(void *batch, struct ecg_batch_member *const *members, size_t n);

    /* The stages from resample to encode run on a device, the calling thread waiting: the
     * engine then classifies a long recording's quality windows on a host thread beside them
     * (engine.c). false (the CPU backend) where the stages take the host's cores themselves. */
    bool stages_on_device;
};

/* engine/engine.c: a result and its arrays in one allocation for k beats (NULL: no memory). */
struct ecg_result *ecg_result_new(size_t k, uint32_t latent_dim, bool with_model);
/* engine/engine.c: the verdict and the rhythm statistics of a result whose beat table, samples
 * and rate are filled, from its quality features (the first lead's n_win windows, then the
 * n_extra further leads' n_win each: ecg_quality_assess): host code shared by every backend,
 * batched or not; the time it takes is added to timing->quality_ms. */
enum ecg_status ecg_result_assess(struct ecg_result *result,
                                  const struct ecg_quality_window *windows, size_t n_win,
                                  size_t n_extra, struct ecg_timing *timing,
                                  struct ecg_error *err);

/* engine/trace.c: wraps a backend trace of n samples into the public object (NULL when out of
 * memory: the backend trace is then freed). */
struct ecg_trace *ecg_trace_wrap(const struct ecg_backend_ops *ops, void *backend, size_t n,
                                 size_t bytes);

extern const struct ecg_backend_ops ecg_cpu_backend;
/* NULL in a build without CUDA. Defined by the one file that decides (engine/backends.c). */
const struct ecg_backend_ops *ecg_cuda_backend_ops(void);
/* Whether a CUDA device is visible (cudaGetDeviceCount > 0), without opening the backend; false
 * in a build without CUDA. Defined there too. */
bool ecg_cuda_device_visible(void);

#ifdef __cplusplus
}
#endif

#endif /* ECG_BACKEND_H */
