/*
 * batch.h - dynamic batching of short analyses (internal to the engine), in the spirit of
 * Triton's dynamic batcher.
 *
 * A batcher holds ops->batch_lanes lanes (CUDA: config->batch_lanes per device; one for a
 * backend without batch operations). Each lane has a FIFO of waiting analyses and one thread:
 * it takes the first analysis waiting, keeps collecting until max_batch are there, or
 * window_us have passed since that first one arrived, or no other analysis is on its way to
 * that lane (announced: its body being read), and runs them as one batch (ops->batch_run, or
 * the stages one member after another on a context of its own). Analyses go to the lanes in
 * turn. Each member is handed back to its thread as soon as its own outputs are final, and
 * that thread sleeps until then on a semaphore of its own (no broadcast wakes the others).
 * Where the backend splits a batch into its launch and its finish, a lane keeps up to its
 * depth of batches in flight: it collects and launches the next batch while the device runs
 * the one before, so an analysis waits for the host's part of the lane's cycle, not the pass.
 *
 * The batcher also keeps the plans of the rates it has seen (a plan costs more to design than a
 * short strip costs to analyse), shared by the batches that use them.
 *
 * Threading: every function may be called from any thread, except destroy (once, when no other
 * call is running or can start). A member belongs to its caller; the batcher only links it into
 * a queue and hands it to one batch run. destroy drains: every member queued is run first.
 */
#ifndef ECG_BATCH_H
#define ECG_BATCH_H

#include "backend.h"
#include "quality.h"

struct ecg_batcher;

/* Starts the lanes' threads, each with up to depth batches in flight (1..ECG_BATCH_DEPTH_MAX;
 * 1 where the backend cannot launch a batch without waiting for it); NULL with err filled on
 * failure (nothing left running). */
struct ecg_batcher *ecg_batcher_create(const struct ecg_backend_ops *ops, void *state,
                                       const struct ecg_params *params, bool with_model,
                                       unsigned max_batch, unsigned window_us, unsigned depth,
                                       struct ecg_error *err);
/* Runs what is queued, stops the threads, frees everything (NULL ok). */
void ecg_batcher_destroy(struct ecg_batcher *b);

/* The plan for fs_hz, shared (ecg_plan_init's status and err on failure). Hand it back with
 * ecg_batcher_plan_put once the batch that used it has run. */
enum ecg_status ecg_batcher_plan_get(struct ecg_batcher *b, double fs_hz,
                                     const struct ecg_plan **plan, struct ecg_error *err);
void ecg_batcher_plan_put(struct ecg_batcher *b, const struct ecg_plan *plan);

/* One member through ops's stages on ctx (load .. encode, fetch into ecg_batch_result): what
 * the engine's own pass does for the beat table, the quality features left to the engine. The
 * batcher's stage-by-stage runner for a backend without batch operations. m is not handed
 * back. */
enum ecg_status ecg_batch_run_stages(const struct ecg_backend_ops *ops, void *ctx,
                                     struct ecg_batch_member *m);

/* An analysis on its way to the batcher (reading its body): announce picks its lane (in turn)
 * and returns it; that lane's batch waits for it within its window, and stops waiting at once
 * when none is on its way to it. Every announce is followed by one ecg_batcher_queue or one
 * ecg_batcher_withdraw with the lane it returned. */
unsigned ecg_batcher_announce(struct ecg_batcher *b);
void ecg_batcher_withdraw(struct ecg_batcher *b, unsigned lane);

/* An analysis the engine offers the batcher: a decoded signal, or bytes to read with opts. */
struct ecg_batch_input {
    const struct ecg_signal *signal;
    const void *bytes;
    size_t len;
    const struct ecg_read_opts *opts;
    uint32_t latent_dim;
    bool with_model;
};

/* Quality windows of a batched analysis kept in its job (80 s at 1 s each; more are allocated). */
#define ECG_BATCH_JOB_WINDOWS 96

/*
 * An analysis on its way through the batcher: what ecg_batcher_begin read and prepared, the
 * member it queues, and what ecg_batcher_finish needs for the verdict. Owned by the caller (a
 * stack frame for ecg_batcher_analyze, the engine's ecg_pending for an asynchronous analysis).
 */
struct ecg_batch_job {
    struct ecg_batch_member m;
    const struct ecg_signal *sig;     /* the recording read (in->signal, or the caller's own) */
    struct ecg_quality_geometry geom;
    struct ecg_quality_window *windows; /* stack_windows, or allocated for a longer recording */
    struct ecg_timing timing;
    double t0;
    unsigned lane;
    bool announced, queued;
    struct ecg_quality_window stack_windows[ECG_BATCH_JOB_WINDOWS]; /* last: not cleared */
};

/*
 * An analysis through the batcher: read on the host (in the calling thread), the features of
 * signal quality on the host (cpu_quality_features: bit-identical to the CUDA twin by
 * contract), the beat table from a batch, then the verdict and the rhythm statistics as the
 * engine's own pass draws them (ecg_result_assess). Returns ECG_ERR_UNSUPPORTED, err untouched,
 * for an analysis that takes its own pass instead (several leads, too long, a batch short of
 * memory): *decoded then points at the signal read (when it was: in->signal, or own, which the
 * caller frees), which that pass reuses. A recording the host reader refuses, or whose rate or
 * length the engine refuses, goes that way too, so that its error is the engine's own.
 * It is the three steps below in a row, the caller's thread asleep while the batch runs.
 */
enum ecg_status ecg_batcher_analyze(struct ecg_batcher *b, const struct ecg_batch_input *in,
                                    struct ecg_signal *own, const struct ecg_signal **decoded,
                                    struct ecg_result **out, struct ecg_error *err);

/*
 * The steps of ecg_batcher_analyze, for a caller that does not wait (ecg_engine_analyze_async):
 *   begin   reads in (unless given decoded), checks that it can be batched and takes its
 *           plan, in the calling thread. ECG_OK: ready to queue; otherwise
 *           ECG_ERR_UNSUPPORTED (*decoded as above) or ECG_ERR_NOMEM.
 *   queue   queues a begun job on its lane and returns at once; done(arg) is called once, from
 *           the lane's thread, when the batch hands the job back (it must not block: it should
 *           only wake whoever calls finish). False when the batcher is stopping: nothing queued,
 *           done never called.
 *   finish  after done: the result, as ecg_batcher_analyze gives it (ECG_ERR_UNSUPPORTED: the
 *           batch could not take it, run it alone); the quality features computed here, on
 *           the host, unless the batch computed them on the device.
 *   fini    after any of them: the plan, the windows and an announce not queued go back.
 * The job and own must stay put from begin to fini.
 */
enum ecg_status ecg_batcher_begin(struct ecg_batcher *b, const struct ecg_batch_input *in,
                                  struct ecg_signal *own, const struct ecg_signal **decoded,
                                  struct ecg_batch_job *job, struct ecg_error *err);
bool ecg_batcher_queue(struct ecg_batcher *b, struct ecg_batch_job *job, void (*done)(void *),
                       void *arg);
enum ecg_status ecg_batcher_finish(struct ecg_batch_job *job, struct ecg_result **out,
                                   struct ecg_error *err);
void ecg_batcher_job_fini(struct ecg_batcher *b, struct ecg_batch_job *job);

#endif /* ECG_BATCH_H */
