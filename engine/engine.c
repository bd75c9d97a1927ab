/*
 * engine.c - the backend-neutral orchestration of a request.
 *
 * An engine owns one opened backend and a pool of worker contexts. ecg_engine_analyze() takes a
 * free context (waiting while all are busy), builds the plan for the input's rate, runs the
 * stages in order, timing each, and fetches the beat table. The backend keeps the data between
 * stages, so this file never touches samples beyond handing the input over.
 *
 * Input comes as a decoded signal, as raw bytes (the backend's own parser first, the host
 * readers when it declines), or as a streaming upload (struct ecg_upload: a buffer of a given
 * capacity plus the backend's device copy of it; the analysis names the final length, at most
 * the capacity, and prefers a free context on the copy's device).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "batch.h"
#include "cpu/cpu.h" /* cpu_quality_features: the further leads' quality features */
#include "cpu/fuse_core.h" /* FUSE_AGREE_SPAN: the span of a lead's agreement */
#include "ecg.h"
#include "hrv.h"
#include "plan.h"
#include "quality.h"

/* A growable array of quality features, kept between requests. */
struct window_buf {
    struct ecg_quality_window *w;
    size_t cap;
};

/* Windows (seconds) of a recording from which its quality windows are classified beside a
 * device's stages (result_assess_beside). */
#define QUALITY_BESIDE_MIN 8192

struct ecg_engine {
    const struct ecg_backend_ops *ops;
    void *state;
    const struct ecg_model *model;
    struct ecg_params params;
    uint32_t latent_dim;
    char note[ECG_ERROR_MSG_LEN + 64];

    pthread_mutex_t lock;
    pthread_cond_t released;
    unsigned n_ctx;
    void **ctx;
    bool *busy;
    /* Each context's last plan, reused while requests keep the same input rate (designing the
     * resampler's filter costs more than a short strip's analysis at some rates). Used only
     * by the thread holding the context. */
    struct ecg_plan *plans;
    struct window_buf *windows; /* per worker context: the quality features of a request,
                                 * its first lead's n_win windows, then each further lead's */
    struct ecg_batcher *batcher; /* dynamic batching (batch.h), NULL when off */
    size_t beside_min;           /* windows from which the quality classification runs beside
                                  * the stages (QUALITY_BESIDE_MIN on a device, else never) */
};

/* A streaming upload: the host bytes (authoritative) and the backend's copy of them. */
struct ecg_upload {
    struct ecg_engine *engine;
    void *backend;           /* the backend's upload (ops->upload_*) */
    const void *buf;
    size_t cap;              /* the most bytes buf will hold: progress clamps, analysis checks */
    bool used_device;        /* the last analysis parsed from the device copy */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *ecg_backend_kind_name(enum ecg_backend_kind kind)
{
    switch (kind) {
    case ECG_BACKEND_AUTO: return "auto";
    case ECG_BACKEND_CPU: return "cpu";
    case ECG_BACKEND_CUDA: return "cuda";
    }
    return "unknown";
}

bool ecg_backend_kind_parse(const char *name, enum ecg_backend_kind *out)
{
    static const enum ecg_backend_kind kinds[] = {ECG_BACKEND_AUTO, ECG_BACKEND_CPU,
                                                  ECG_BACKEND_CUDA};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (name && strcmp(name, ecg_backend_kind_name(kinds[i])) == 0) {
            *out = kinds[i];
            return true;
        }
    }
    return false;
}

/* Opens the backend the config asks for; AUTO tries CUDA first and records why it fell back. */
static enum ecg_status open_backend(struct ecg_engine *engine,
                                    const struct ecg_engine_config *config, struct ecg_error *err)
{
    const struct ecg_backend_ops *cuda = ecg_cuda_backend_ops();
    if (config->backend == ECG_BACKEND_CUDA && !cuda)
        return ecg_fail(err, ECG_ERR_DEVICE, "no_cuda", "this build of ecgd has no CUDA backend");
    if (config->backend != ECG_BACKEND_CPU && cuda) {
        struct ecg_error cuda_err = {0};
        enum ecg_status status = cuda->open(config, &engine->state, &cuda_err);
        if (status == ECG_OK) {
            engine->ops = cuda;
            return ECG_OK;
        }
        if (config->backend == ECG_BACKEND_CUDA) {
            if (err)
                *err = cuda_err;
            return status;
        }
        snprintf(engine->note, sizeof engine->note, "CUDA unavailable (%s): using the CPU",
                 cuda_err.message);
    } else if (config->backend == ECG_BACKEND_AUTO) {
        snprintf(engine->note, sizeof engine->note, "built without CUDA: using the CPU");
    }
    engine->ops = &ecg_cpu_backend;
    return ecg_cpu_backend.open(config, &engine->state, err);
}

/* Batching is on with max_batch > 1 on a backend that batches (CUDA), unless ECG_CUDA_BATCH=0
 * (tests and benchmarks compare the two without another configuration). ECG_BATCH_ANY=1 batches
 * on any backend (tests of the batcher without a device: the CPU backend gains nothing, as
 * batch.c then runs a batch's analyses one after another). */
/* Batches a batcher keeps in flight: config->batch_depth (0 = ECG_BATCH_DEPTH_DEFAULT), unless
 * ECG_BATCH_DEPTH (1..ECG_BATCH_DEPTH_MAX) says otherwise. */
static unsigned batch_depth(const struct ecg_engine_config *config)
{
    const char *v = getenv("ECG_BATCH_DEPTH");
    long n = config->batch_depth ? (long)config->batch_depth : (long)ECG_BATCH_DEPTH_DEFAULT;
    if (v && *v)
        n = strtol(v, NULL, 10);
    return n < 1 ? 1u : n > (long)ECG_BATCH_DEPTH_MAX ? ECG_BATCH_DEPTH_MAX : (unsigned)n;
}

static bool batching_wanted(const struct ecg_engine_config *config, bool backend_batches)
{
    const char *env = getenv("ECG_CUDA_BATCH");
    const char *any = getenv("ECG_BATCH_ANY");
    if (config->max_batch <= 1 || (env && strcmp(env, "0") == 0))
        return false;
    return backend_batches || (any && strcmp(any, "1") == 0);
}

/* From how many windows the quality classification runs beside the stages: QUALITY_BESIDE_MIN
 * where they run on a device, else never (SIZE_MAX); ECG_QUALITY_BESIDE=0 never, =1 from one
 * window on any backend (tests of that path without a device, A/B on one). */
static size_t beside_min(const struct ecg_backend_ops *ops)
{
    const char *v = getenv("ECG_QUALITY_BESIDE");
    if (v && strcmp(v, "0") == 0)
        return SIZE_MAX;
    if (v && strcmp(v, "1") == 0)
        return 1;
    return ops->stages_on_device ? QUALITY_BESIDE_MIN : SIZE_MAX;
}

bool ecg_engine_would_batch(const struct ecg_engine_config *config)
{
    const struct ecg_backend_ops *cuda = ecg_cuda_backend_ops();
    bool on_cuda = cuda && config->backend != ECG_BACKEND_CPU &&
                   (config->backend == ECG_BACKEND_CUDA || ecg_cuda_device_visible());
    return batching_wanted(config, on_cuda && cuda->batch_run != NULL);
}

struct ecg_engine *ecg_engine_create(const struct ecg_engine_config *config, struct ecg_error *err)
{
    struct ecg_engine *engine = calloc(1, sizeof *engine);
    if (!engine) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "engine");
        return NULL;
    }
    pthread_mutex_init(&engine->lock, NULL);
    pthread_cond_init(&engine->released, NULL);
    engine->model = config->model;
    engine->params = ecg_params_default();
    if (config->model) {
        struct ecg_model_info info;
        ecg_model_get_info(config->model, &info);
        engine->params = info.params;
        engine->latent_dim = info.latent_dim;
    }
    if (open_backend(engine, config, err) != ECG_OK)
        goto fail;
    engine->beside_min = beside_min(engine->ops);
    engine->n_ctx = config->workers ? config->workers : 1;
    engine->ctx = calloc(engine->n_ctx, sizeof *engine->ctx);
    engine->busy = calloc(engine->n_ctx, sizeof *engine->busy);
    engine->plans = calloc(engine->n_ctx, sizeof *engine->plans);
    engine->windows = calloc(engine->n_ctx, sizeof *engine->windows);
    if (!engine->ctx || !engine->busy || !engine->plans || !engine->windows) {
        ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "worker contexts");
        goto fail;
    }
    for (unsigned i = 0; i < engine->n_ctx; i++) {
        if (engine->ops->ctx_create(engine->state, &engine->ctx[i], err) != ECG_OK)
            goto fail;
    }
    if (batching_wanted(config, engine->ops->batch_run != NULL)) {
        engine->batcher = ecg_batcher_create(engine->ops, engine->state, &engine->params,
                                             engine->model != NULL, config->max_batch,
                                             config->batch_window_us, batch_depth(config),
                                             err);
        if (!engine->batcher)
            goto fail;
    }
    return engine;
fail:
    ecg_engine_destroy(engine);
    return NULL;
}

void ecg_engine_destroy(struct ecg_engine *engine)
{
    if (!engine)
        return;
    ecg_batcher_destroy(engine->batcher); /* runs what is queued first */
    if (engine->ctx) {
        for (unsigned i = 0; i < engine->n_ctx; i++) {
            if (engine->ctx[i])
                engine->ops->ctx_destroy(engine->ctx[i]);
        }
    }
    if (engine->ops && engine->state)
        engine->ops->close(engine->state);
    if (engine->plans)
        for (unsigned i = 0; i < engine->n_ctx; i++)
            ecg_plan_fini(&engine->plans[i]);
    free(engine->plans);
    if (engine->windows)
        for (unsigned i = 0; i < engine->n_ctx; i++)
            free(engine->windows[i].w);
    free(engine->windows);
    free(engine->ctx);
    free(engine->busy);
    pthread_cond_destroy(&engine->released);
    pthread_mutex_destroy(&engine->lock);
    free(engine);
}

const char *ecg_engine_backend(const struct ecg_engine *engine)
{
    return engine->ops->name;
}

const char *ecg_engine_device(const struct ecg_engine *engine)
{
    return engine->ops->device(engine->state);
}

const char *ecg_engine_note(const struct ecg_engine *engine)
{
    return engine->note;
}

const struct ecg_params *ecg_engine_params(const struct ecg_engine *engine)
{
    return &engine->params;
}

const struct ecg_model *ecg_engine_model(const struct ecg_engine *engine)
{
    return engine->model;
}

/* Takes a free context, waiting while all are busy. With an upload, a free context that can
 * read its device copy wins over the other free ones (never waited for: a context on another
 * device reads the host bytes, as fast as before streaming existed). */
static unsigned acquire_ctx(struct ecg_engine *engine, const struct ecg_upload *upload)
{
    bool (*prefers)(void *, void *) = upload ? engine->ops->upload_prefers_ctx : NULL;
    pthread_mutex_lock(&engine->lock);
    for (;;) {
        unsigned pick = engine->n_ctx;
        for (unsigned i = 0; i < engine->n_ctx; i++) {
            if (engine->busy[i])
                continue;
            if (pick == engine->n_ctx)
                pick = i;
            if (!prefers || prefers(upload->backend, engine->ctx[i])) {
                pick = i;
                break;
            }
        }
        if (pick < engine->n_ctx) {
            engine->busy[pick] = true;
            pthread_mutex_unlock(&engine->lock);
            return pick;
        }
        pthread_cond_wait(&engine->released, &engine->lock);
    }
}

static void release_ctx(struct ecg_engine *engine, unsigned slot)
{
    pthread_mutex_lock(&engine->lock);
    engine->busy[slot] = false;
    pthread_cond_signal(&engine->released);
    pthread_mutex_unlock(&engine->lock);
}

/* A result and its arrays are one allocation (a request makes one, not nine), plus the quality
 * segments when there are any. */
void ecg_result_free(struct ecg_result *result)
{
    if (!result)
        return;
    ecg_quality_fini(result);
    free(result);
}

/* Rounds n bytes up to a multiple of 8, for the arrays that follow each other in the block. */
static size_t align8(size_t n)
{
    return (n + 7) / 8 * 8;
}

struct ecg_result *ecg_result_new(size_t k, uint32_t latent_dim, bool with_model)
{
    size_t m = k ? k : 1; /* every array non-NULL */
    size_t i64 = align8(m * sizeof(int64_t)), f32 = align8(m * sizeof(float)), u8 = align8(m);
    size_t bytes = align8(sizeof(struct ecg_result)) + 3 * i64 + 4 * f32 + 3 * u8;
    if (with_model)
        bytes += align8(m * latent_dim * sizeof(float)) + f32 + u8;
    char *block = calloc(1, bytes);
    if (!block)
        return NULL;
    struct ecg_result *r = (struct ecg_result *)block;
    char *p = block + align8(sizeof *r);
    r->n_beats = k;
    for (size_t l = 0; l < ECG_MAX_LEADS; l++)
        r->lead_agree[l] = NAN; /* the backend's fetch sets them where it took them */
    r->r_peak = (int64_t *)p, p += i64;
    r->onset = (int64_t *)p, p += i64;
    r->end = (int64_t *)p, p += i64;
    r->rr_ms = (float *)p, p += f32;
    r->kept = (uint8_t *)p, p += u8;
    r->beat_quality = (float *)p, p += f32;
    r->likeness = (float *)p, p += f32;
    r->crest = (float *)p, p += f32; /* (a per-beat array more: ecg_result_drop_overlap too) */
    for (size_t i = 0; i < k; i++)
        r->likeness[i] = r->crest[i] = NAN; /* until the backend's fetch fills them */
    r->readable = (uint8_t *)p, p += u8;
    r->nn = (uint8_t *)p, p += u8;
    if (with_model) {
        r->latent_dim = latent_dim;
        r->latent = (float *)p, p += align8(m * latent_dim * sizeof(float));
        r->score = (float *)p, p += f32;
        r->outlier = (uint8_t *)p;
    }
    return r;
}

/* Moves the last n - first entries of an array of n entries of size bytes to its front. */
static void drop_front(void *array, size_t first, size_t n, size_t size)
{
    if (array && first)
        memmove(array, (char *)array + first * size, (n - first) * size);
}

enum ecg_status ecg_result_drop_overlap(struct ecg_result *r, double overlap_s,
                                        float *embedding, size_t beat_len, struct ecg_error *err)
{
    const double duration_s = (double)r->n_samples / r->fs_hz;
    if (!isfinite(overlap_s) || overlap_s < 0.0)
        return ecg_fail(err, ECG_ERR_ARG, "bad_overlap",
                        "overlap_s: expected seconds >= 0, got %g", overlap_s);
    const double from = floor(overlap_s * r->fs_hz + 0.5);
    if (from >= (double)r->n_samples)
        return ecg_fail(err, ECG_ERR_ARG, "bad_overlap",
                        "overlap_s: %g s leaves nothing of a recording of %.3f s (%zu samples "
                        "at %g Hz)", overlap_s, duration_s, r->n_samples, r->fs_hz);
    r->overlap_s = overlap_s;
    r->overlap = (size_t)from;
    size_t first = 0, n = r->n_beats;
    while (first < n && r->r_peak[first] < (int64_t)r->overlap)
        first++;
    if (first == 0)
        return ecg_hrv_assess(r, err);
    drop_front(r->r_peak, first, n, sizeof *r->r_peak);
    drop_front(r->onset, first, n, sizeof *r->onset);
    drop_front(r->end, first, n, sizeof *r->end);
    drop_front(r->rr_ms, first, n, sizeof *r->rr_ms);
    drop_front(r->kept, first, n, sizeof *r->kept);
    drop_front(r->beat_quality, first, n, sizeof *r->beat_quality);
    drop_front(r->likeness, first, n, sizeof *r->likeness);
    drop_front(r->crest, first, n, sizeof *r->crest);
    drop_front(r->readable, first, n, sizeof *r->readable);
    drop_front(r->nn, first, n, sizeof *r->nn);
    drop_front(r->latent, first, n, r->latent_dim * sizeof *r->latent);
    drop_front(r->score, first, n, sizeof *r->score);
    drop_front(r->outlier, first, n, sizeof *r->outlier);
    drop_front(embedding, first, n, beat_len * sizeof *embedding);
    r->n_beats = n - first;
    return ecg_hrv_assess(r, err);
}

/* The plan for fs_hz in the context's slot: the one kept from the previous request when the
 * rate is the same, else a new one (the old one is freed). */
static enum ecg_status slot_plan(struct ecg_engine *engine, unsigned slot, double fs_hz,
                                 struct ecg_plan **plan, struct ecg_error *err)
{
    struct ecg_plan *p = &engine->plans[slot];
    *plan = p;
    if (p->fs_in_hz == fs_hz && p->fs_a_hz > 0)
        return ECG_OK;
    ecg_plan_fini(p);
    memset(p, 0, sizeof *p);
    enum ecg_status status = ecg_plan_init(p, &engine->params, fs_hz, err);
    if (status != ECG_OK)
        memset(p, 0, sizeof *p);
    return status;
}

/* A feature buffer, grown to n windows (what it holds is kept). */
static enum ecg_status grow_windows(struct window_buf *b, size_t n, struct ecg_error *err)
{
    if (n > b->cap) {
        struct ecg_quality_window *grown = realloc(b->w, n * sizeof *grown);
        if (!grown)
            return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu windows", n);
        b->w = grown;
        b->cap = n;
    }
    return ECG_OK;
}

/* The slot's feature buffer, grown to n windows. */
static enum ecg_status slot_windows(struct ecg_engine *engine, unsigned slot, size_t n,
                                    struct ecg_quality_window **w, struct ecg_error *err)
{
    enum ecg_status status = grow_windows(&engine->windows[slot], n, err);
    *w = engine->windows[slot].w;
    return status;
}

/* The shared body of the analyze entry points: input is a decoded signal, or raw bytes (bytes and
 * len), possibly with a streaming upload of those same bytes. */
struct analyze_input {
    const struct ecg_signal *signal;
    const void *bytes;
    size_t len;
    const struct ecg_read_opts *opts;
    struct ecg_upload *upload;
    struct ecg_trace **trace; /* keep the loaded signal here (ecg_engine_analyze_keep) */
};

/* The labels of the leads an analysis used, the first one the model's. */
struct lead_names {
    size_t n;
    char name[ECG_MAX_LEADS][32];
    char time_column[32];  /* a CSV's time column skipped (read_csv_time.c), or "" */
    bool fs_from_time;     /* the rate was measured from it */
    bool decimal_comma;    /* its numbers were read with a decimal comma */
};

/* Loads a decoded signal, all its leads, into the context. The quality features of the
 * further leads are taken here, on the host, while their samples are at hand (the backends'
 * quality operation reads the first lead; cpu_quality_features is the arithmetic both
 * backends' features equal bit for bit): windows gets them after the first lead's n_win. */
static enum ecg_status load_signal(const struct ecg_backend_ops *ops, void *ctx,
                                   const struct ecg_signal *sig, size_t *n, double *fs_hz,
                                   struct lead_names *leads, struct window_buf *windows,
                                   struct ecg_error *err)
{
    *n = sig->n;
    *fs_hz = sig->fs_hz;
    leads->n = 1 + sig->n_extra;
    snprintf(leads->name[0], 32, "%s", sig->lead);
    for (size_t i = 0; i < sig->n_extra; i++)
        snprintf(leads->name[i + 1], 32, "%s", sig->extra_lead[i]);
    snprintf(leads->time_column, sizeof leads->time_column, "%s", sig->time_column);
    leads->fs_from_time = sig->fs_from_time;
    leads->decimal_comma = sig->decimal_comma;
    if (!sig->samples || sig->n == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "the recording has no samples");
    if (sig->n_extra >= ECG_MAX_LEADS)
        return ecg_fail(err, ECG_ERR_ARG, "bad_lead", "more than %d leads", ECG_MAX_LEADS);
    enum ecg_status status = ops->load(ctx, sig->samples, sig->n, err);
    if (status == ECG_OK && sig->n_extra > 0)
        status = ops->load_extra(ctx, (const float *const *)sig->extra, sig->n_extra, sig->n,
                                 err);
    /* (at a rate no plan takes the analysis stops before the verdict: nothing to take) */
    if (status == ECG_OK && sig->n_extra > 0 && sig->fs_hz >= ECG_FS_MIN_HZ &&
        sig->fs_hz <= ECG_FS_MAX_HZ) {
        const size_t n_win = ecg_quality_geometry_of(sig->n, sig->fs_hz).n_win;
        status = grow_windows(windows, (1 + sig->n_extra) * n_win, err);
        for (size_t i = 0; status == ECG_OK && i < sig->n_extra; i++)
            cpu_quality_features(sig->extra[i], sig->n, sig->fs_hz,
                                 windows->w + (1 + i) * n_win);
    }
    return status;
}

/* Loads the input into the context: raw bytes go to the backend's own parser when it has one. */
static enum ecg_status load_input(struct ecg_engine *engine, void *ctx,
                                  const struct analyze_input *in, size_t *n, double *fs_hz,
                                  struct lead_names *leads, struct window_buf *windows,
                                  struct ecg_error *err)
{
    const struct ecg_backend_ops *ops = engine->ops;
    char *lead = leads->name[0];
    leads->n = 1;
    if (in->signal)
        return load_signal(ops, ctx, in->signal, n, fs_hz, leads, windows, err);
    /* One lead: a lead list is read on the host before (analyze_leads), since the backends' own
     * parsers read one lead. */
    if (in->upload) {
        bool from_device = false;
        enum ecg_status status = ops->load_upload(ctx, in->upload->backend, in->len, in->opts, n,
                                                  fs_hz, lead, &from_device, err);
        in->upload->used_device = status == ECG_OK && from_device;
        if (status != ECG_ERR_UNSUPPORTED)
            return status;
    } else if (ops->load_bytes) {
        enum ecg_status status = ops->load_bytes(ctx, in->bytes, in->len, in->opts, n, fs_hz,
                                                 lead, err);
        if (status != ECG_ERR_UNSUPPORTED)
            return status;
    }
    struct ecg_signal sig = {0};
    enum ecg_status status = ecg_read_memory(in->bytes, in->len, in->opts, &sig, err);
    if (status != ECG_OK)
        return status;
    status = load_signal(ops, ctx, &sig, n, fs_hz, leads, windows, err);
    ecg_signal_free(&sig);
    return status;
}

/* True when opts give a rate (fs) that is not the one the recording carries (fs_hz). */
static bool fs_conflicts(const struct ecg_read_opts *opts, double fs_hz)
{
    return opts && opts->fs_hz > 0 && fabs(opts->fs_hz - fs_hz) > 1e-9 * fs_hz;
}

enum ecg_status ecg_result_assess(struct ecg_result *result,
                                  const struct ecg_quality_window *windows, size_t n_win,
                                  size_t n_extra, struct ecg_timing *timing,
                                  struct ecg_error *err)
{
    double t = now_ms();
    enum ecg_status status = ecg_quality_assess(windows, n_extra ? windows + n_win : NULL,
                                                n_extra, n_win, result, err);
    if (status == ECG_OK)
        status = ecg_hrv_assess(result, err);
    timing->quality_ms += now_ms() - t;
    return status;
}

/*
 * A long recording's quality windows classified on a host thread of their own while a device
 * runs the stages from resample to encode (ops->stages_on_device, from QUALITY_BESIDE_MIN
 * windows; ECG_QUALITY_BESIDE overrides it: beside_min()): the classification needs
 * only the windows' features, which the device computes first from the loaded samples, and it
 * is the verdict's costly half (five medians over every window, each window's context and
 * test; ~3 ms for 15 h of signal), which would otherwise follow the stages. The thread runs
 * the same function on the same windows, so the report is the same bits (test_gpu_quality
 * compares a recording long enough for this path with the CPU backend's).
 */
struct quality_beside {
    const struct ecg_quality_window *windows; /* the first lead's, then the further leads' */
    size_t n_win, n_extra;
    double fs_hz;
    float *score;     /* (1 + n_extra) n_win scores, then as many reasons (one block) */
    uint8_t *reason;
    enum ecg_status status;
    struct ecg_error err;
    pthread_t thread;
    bool started;     /* a thread runs it (else it ran, or runs, in the caller's) */
};

static void *quality_beside_main(void *arg)
{
    struct quality_beside *q = arg;
    q->status = ecg_quality_classify_leads(q->windows, q->n_extra ? q->windows + q->n_win : NULL,
                                           q->n_extra, q->n_win, q->fs_hz, q->reason, q->score,
                                           &q->err);
    return NULL;
}

/* Starts classifying windows[0, (1 + n_extra) n_win) on a thread (in the caller's when no
 * thread starts). */
static enum ecg_status quality_beside_start(struct quality_beside *q,
                                            const struct ecg_quality_window *windows,
                                            size_t n_win, size_t n_extra, double fs_hz,
                                            struct ecg_error *err)
{
    q->windows = windows;
    q->n_win = n_win;
    q->n_extra = n_extra;
    q->fs_hz = fs_hz;
    const size_t n = (1 + n_extra) * (n_win ? n_win : 1);
    q->score = malloc(n * (sizeof *q->score + 1));
    if (!q->score)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "quality: %zu windows", n_win);
    q->reason = (uint8_t *)(q->score + n);
    q->started = pthread_create(&q->thread, NULL, quality_beside_main, q) == 0;
    if (!q->started)
        quality_beside_main(q);
    return ECG_OK;
}

/* Waits for the classification (nothing to wait for when none started). */
static void quality_beside_join(struct quality_beside *q)
{
    if (q->started)
        pthread_join(q->thread, NULL);
    q->started = false;
}

/* ecg_result_assess from the windows q classified: waits for it, then the rest of the verdict
 * and the rhythm statistics; the time from the wait on is added to timing->quality_ms. */
static enum ecg_status result_assess_beside(struct ecg_result *result, struct quality_beside *q,
                                            struct ecg_timing *timing, struct ecg_error *err)
{
    double t = now_ms();
    quality_beside_join(q);
    enum ecg_status status = q->status;
    if (status != ECG_OK)
        *err = q->err;
    else
        status = ecg_quality_apply(q->reason, q->score, q->n_win, q->n_extra + 1, result, err);
    if (status == ECG_OK)
        status = ecg_hrv_assess(result, err);
    timing->quality_ms += now_ms() - t;
    return status;
}

/* One pass of the pipeline on one worker context; called through analyze_leads only, which
 * hands it a lead list as a decoded signal. */
static enum ecg_status analyze_alone(struct ecg_engine *engine, const struct analyze_input *in,
                                     struct ecg_result **out, float **embedding,
                                     struct ecg_error *err)
{
    const struct ecg_backend_ops *ops = engine->ops;
    struct ecg_plan *plan = NULL;
    struct ecg_result *result = NULL;
    struct ecg_timing timing = {0};
    float *emb = NULL;
    struct ecg_quality_window *windows = NULL;
    struct ecg_quality_geometry quality_geom = {0};
    size_t n_in = 0, n_beats = 0;
    double fs_hz = 0.0;
    struct lead_names leads = {0};
    struct quality_beside beside = {0};
    bool early = false; /* the quality features before the stages, classified beside them */
    enum ecg_status status;

    *out = NULL;
    if (embedding)
        *embedding = NULL;
    unsigned slot = acquire_ctx(engine, in->upload);
    void *ctx = engine->ctx[slot];
    double t0 = now_ms(), t = t0, t_next;

#define STAGE(field, call)                                                                     \
    do {                                                                                       \
        status = (call);                                                                       \
        t_next = now_ms();                                                                     \
        timing.field = t_next - t;                                                             \
        t = t_next;                                                                            \
        if (status != ECG_OK)                                                                  \
            goto out;                                                                          \
    } while (0)

    STAGE(read_ms, load_input(engine, ctx, in, &n_in, &fs_hz, &leads, &engine->windows[slot],
                              err));
    /* A rate given with a recording that carries its own (JSON "fs", EDF, WFDB) must agree with
     * it: neither may silently win over the other. */
    if (fs_conflicts(in->opts, fs_hz)) {
        status = ecg_fail(err, ECG_ERR_ARG, "conflicting_fs",
                          "fs=%g was given, but the recording says %g Hz: give one, or the same",
                          in->opts->fs_hz, fs_hz);
        goto out;
    }
    status = slot_plan(engine, slot, fs_hz, &plan, err);
    if (status != ECG_OK)
        goto out;
    if ((double)n_in / fs_hz < ECG_MIN_DURATION_S) {
        status = ecg_fail(err, ECG_ERR_UNSUPPORTED, "too_short",
                          "the recording lasts %.3f s (%zu samples at %g Hz); at least %g s are "
                          "needed", (double)n_in / fs_hz, n_in, fs_hz, ECG_MIN_DURATION_S);
        goto out;
    }
    quality_geom = ecg_quality_geometry_of(n_in, fs_hz);
    status = slot_windows(engine, slot, quality_geom.n_win, &windows, err);
    if (status != ECG_OK)
        goto out;
    early = quality_geom.n_win >= engine->beside_min;
    if (early) {
        STAGE(quality_ms, ops->quality(ctx, plan, windows, quality_geom.n_win, err));
        status = quality_beside_start(&beside, windows, quality_geom.n_win, leads.n - 1, fs_hz,
                                      err);
        if (status != ECG_OK)
            goto out;
        t = now_ms();
    }
    STAGE(resample_ms, ops->resample(ctx, plan, err));
    STAGE(filter_ms, ops->filter(ctx, plan, err));
    STAGE(detect_ms, ops->detect(ctx, plan, &n_beats, err));
    STAGE(embed_ms, ops->embed(ctx, plan, err));
    if (engine->model)
        STAGE(encode_ms, ops->encode(ctx, plan, err));
    if (!early)
        STAGE(quality_ms, ops->quality(ctx, plan, windows, quality_geom.n_win, err));
#undef STAGE

    result = ecg_result_new(n_beats, engine->latent_dim, engine->model != NULL);
    if (!result) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "result for %zu beats", n_beats);
        goto out;
    }
    status = ops->fetch(ctx, result, err);
    if (status != ECG_OK)
        goto out;
    if (embedding) {
        size_t count = n_beats * plan->beat_len, got = 0;
        emb = malloc((count ? count : 1) * sizeof *emb);
        if (!emb) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "embedding");
            goto out;
        }
        status = ops->read_buf(ctx, ECG_BUF_EMBED, emb, count, &got, err);
        if (status != ECG_OK)
            goto out;
        if (got != count) {
            status = ecg_fail(err, ECG_ERR_INTERNAL, "internal",
                              "embedding has %zu values, expected %zu", got, count);
            goto out;
        }
    }
    if (in->trace) {
        void *kept = NULL;
        size_t kept_bytes = 0;
        status = ops->trace_keep(ctx, &kept, &kept_bytes, err);
        if (status != ECG_OK)
            goto out;
        *in->trace = ecg_trace_wrap(ops, kept, n_in, kept_bytes);
        if (!*in->trace) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "trace");
            goto out;
        }
    }
    result->n_samples = n_in;
    result->fs_hz = fs_hz;
    snprintf(result->lead, sizeof result->lead, "%s", leads.name[0]);
    result->n_leads = leads.n;
    memcpy(result->leads, leads.name, sizeof result->leads);
    status = early ? result_assess_beside(result, &beside, &timing, err)
                   : ecg_result_assess(result, windows, quality_geom.n_win, leads.n - 1, &timing,
                                       err);
    if (status != ECG_OK)
        goto out;
    snprintf(result->time_column, sizeof result->time_column, "%s", leads.time_column);
    result->fs_from_time = leads.fs_from_time;
    result->decimal_comma = leads.decimal_comma;
    timing.total_ms = now_ms() - t0;
    result->timing = timing;
    *out = result;
    result = NULL;
    if (embedding) {
        *embedding = emb;
        emb = NULL;
    }
out:
    quality_beside_join(&beside); /* it reads the slot's windows: before the slot goes back */
    free(beside.score);
    if (status != ECG_OK && in->trace) {
        ecg_trace_free(*in->trace);
        *in->trace = NULL;
    }
    release_ctx(engine, slot);
    ecg_result_free(result);
    free(emb);
    return status;
}

/*
 * The lead the R peaks are placed on and the model reads. Detection fuses every lead, but the
 * beat table reads the first: a first lead that is a loose electrode's noise would place every R
 * peak on a noise spike near its beat (44 ms off on average on MIT-BIH with a lead of muscle
 * noise first) and embed noise. With two leads or more the detector says how much of the
 * recording each lead shows the beats in (ecg_result.lead_agree: fuse_core.h step 3a, against
 * the fused envelope, before any R peak is placed): where the first lead shows them in under
 * LEAD_SILENT of it (a lead of noise alone: 0.07 or less on MIT-BIH, up to 0.57 where a stress
 * test mixed the first lead's own noise into it) and a later one in at least LEAD_SHOWS (a lead
 * with the heart on it: 0.97 or more, 0.85 under the stress tests; docs/ACCURACY.md), the
 * analysis runs again with the first such lead first, unless the caller named the first
 * (embed_lead). With two leads half the fused envelope is the first lead's own and there is no
 * third to vote, so the agreement must span LEAD_PAIR_MIN_S of recording (FUSE_AGREE_SPAN
 * windows, the span it is counted over): on shorter strips of noisy records the two real leads
 * of MIT-BIH measured under LEAD_SILENT and over LEAD_SHOWS now and then.
 */
#define LEAD_SILENT 0.5
#define LEAD_SHOWS 0.9
#define LEAD_PAIR_MIN_S (FUSE_AGREE_SPAN * FUSE_WINDOW_S)

/* The lead to read instead of the first (1..n_leads - 1), or 0 to keep it. */
static size_t lead_instead(const struct ecg_signal *sig, const struct ecg_result *result)
{
    if (sig->n_extra == 0 || sig->lead_chosen || !(result->lead_agree[0] < LEAD_SILENT))
        return 0; /* NAN (one lead) keeps the first lead */
    if (sig->n_extra == 1 && (double)sig->n / sig->fs_hz < LEAD_PAIR_MIN_S)
        return 0;
    for (size_t l = 1; l <= sig->n_extra && l < ECG_MAX_LEADS; l++)
        if (result->lead_agree[l] >= LEAD_SHOWS)
            return l; /* the next lead, in the caller's order, that shows the beats */
    return 0;
}

/* analyze_alone, with several leads read on the host first (load_input would read them there
 * anyway), and again with another lead first where the first shows no beats (lead_instead). */
static enum ecg_status analyze_leads(struct ecg_engine *engine, const struct analyze_input *in,
                                     struct ecg_result **out, float **embedding,
                                     struct ecg_error *err)
{
    struct analyze_input local = *in;
    struct ecg_signal own = {0};
    double read_ms = 0.0;
    if (!in->signal && in->opts && ecg_lead_is_list(in->opts->lead)) {
        const double t0 = now_ms();
        enum ecg_status status = ecg_read_memory(in->bytes, in->len, in->opts, &own, err);
        if (status != ECG_OK)
            return status;
        read_ms = now_ms() - t0;
        local.signal = &own;
    }
    enum ecg_status status = analyze_alone(engine, &local, out, embedding, err);
    const struct ecg_signal *sig = local.signal;
    const size_t k = status == ECG_OK && sig ? lead_instead(sig, *out) : 0;
    if (k > 0) {
        struct ecg_signal view = *sig; /* the same samples, lead k first (not owned) */
        view.samples = sig->extra[k - 1];
        view.extra[k - 1] = sig->samples;
        snprintf(view.lead, sizeof view.lead, "%s", sig->extra_lead[k - 1]);
        snprintf(view.extra_lead[k - 1], sizeof view.extra_lead[k - 1], "%s", sig->lead);
        local.signal = &view;
        if (local.trace) { /* the second pass keeps its own */
            ecg_trace_free(*local.trace);
            *local.trace = NULL;
        }
        struct ecg_result *again = NULL;
        float *emb = NULL;
        status = analyze_alone(engine, &local, &again, embedding ? &emb : NULL, err);
        if (status == ECG_OK) {
            snprintf(again->lead_passed_over, sizeof again->lead_passed_over, "%s", sig->lead);
            again->timing.total_ms += (*out)->timing.total_ms; /* both passes */
        }
        ecg_result_free(*out);
        *out = again;
        if (embedding) {
            free(*embedding);
            *embedding = emb;
        }
    }
    if (status == ECG_OK) {
        (*out)->timing.read_ms += read_ms;
        (*out)->timing.total_ms += read_ms;
    }
    ecg_signal_free(&own);
    return status;
}

/* Batches what the batcher takes (batching on; no embedding, kept trace or streamed upload),
 * runs the rest alone, a recording the batched path has already read with its decoded signal. */
static enum ecg_status analyze(struct ecg_engine *engine, const struct analyze_input *in,
                               struct ecg_result **out, float **embedding, struct ecg_error *err)
{
    if (!engine->batcher || embedding || in->trace || in->upload)
        return analyze_leads(engine, in, out, embedding, err);
    struct ecg_signal own = {0};
    const struct ecg_signal *decoded = NULL;
    *out = NULL;
    const struct ecg_batch_input batch_in = {.signal = in->signal, .bytes = in->bytes,
                                             .len = in->len, .opts = in->opts,
                                             .latent_dim = engine->latent_dim,
                                             .with_model = engine->model != NULL};
    enum ecg_status status = ecg_batcher_analyze(engine->batcher, &batch_in, &own, &decoded, out,
                                                 err);
    if (status == ECG_ERR_UNSUPPORTED) {
        struct analyze_input alone = *in;
        if (decoded)
            alone.signal = decoded;
        status = analyze_leads(engine, &alone, out, embedding, err);
    }
    ecg_signal_free(&own);
    return status;
}

enum ecg_status ecg_engine_analyze(struct ecg_engine *engine, const struct ecg_signal *signal,
                                   struct ecg_result **out, struct ecg_error *err)
{
    struct analyze_input in = {.signal = signal};
    return analyze(engine, &in, out, NULL, err);
}

enum ecg_status ecg_engine_analyze_embed(struct ecg_engine *engine,
                                         const struct ecg_signal *signal,
                                         struct ecg_result **out, float **embedding,
                                         struct ecg_error *err)
{
    struct analyze_input in = {.signal = signal};
    return analyze(engine, &in, out, embedding, err);
}

enum ecg_status ecg_engine_analyze_bytes(struct ecg_engine *engine, const void *buf, size_t len,
                                         const struct ecg_read_opts *opts,
                                         struct ecg_result **out, struct ecg_error *err)
{
    struct ecg_read_opts defaults = {0};
    struct analyze_input in = {.bytes = buf, .len = len, .opts = opts ? opts : &defaults};
    return analyze(engine, &in, out, NULL, err);
}

/* An analysis queued on a batch by ecg_engine_analyze_async: its job, and the signal read. */
struct ecg_pending {
    struct ecg_engine *engine;
    struct ecg_signal own;
    struct ecg_batch_job job;
};

enum ecg_status ecg_engine_analyze_async(struct ecg_engine *engine, const void *buf, size_t len,
                                         const struct ecg_read_opts *opts,
                                         void (*done)(void *arg), void *arg,
                                         struct ecg_pending **out)
{
    struct ecg_read_opts defaults = {0};
    struct ecg_error ignored = {0};
    const struct ecg_signal *decoded = NULL;
    *out = NULL;
    if (!engine->batcher)
        return ECG_ERR_UNSUPPORTED;
    struct ecg_pending *p = malloc(sizeof *p);
    if (!p)
        return ECG_ERR_UNSUPPORTED;
    p->engine = engine;
    memset(&p->own, 0, sizeof p->own);
    const struct ecg_batch_input in = {.bytes = buf, .len = len, .opts = opts ? opts : &defaults,
                                       .latent_dim = engine->latent_dim,
                                       .with_model = engine->model != NULL};
    if (ecg_batcher_begin(engine->batcher, &in, &p->own, &decoded, &p->job, &ignored) == ECG_OK) {
        *out = p; /* before the queue: done may run at once, and whoever it wakes reads *out */
        if (ecg_batcher_queue(engine->batcher, &p->job, done, arg))
            return ECG_OK;
        *out = NULL;
    }
    ecg_batcher_job_fini(engine->batcher, &p->job);
    ecg_signal_free(&p->own);
    free(p);
    return ECG_ERR_UNSUPPORTED;
}

enum ecg_status ecg_engine_analyze_collect(struct ecg_pending *p, struct ecg_result **out,
                                           struct ecg_error *err)
{
    *out = NULL;
    enum ecg_status status = ecg_batcher_finish(&p->job, out, err);
    ecg_batcher_job_fini(p->engine->batcher, &p->job);
    ecg_signal_free(&p->own);
    free(p);
    return status;
}

struct ecg_upload *ecg_engine_upload_begin(struct ecg_engine *engine, const void *buf, size_t cap,
                                           enum ecg_format format)
{
    if (!engine || !buf || !cap)
        return NULL;
    const struct ecg_backend_ops *ops = engine->ops;
    if (!ops->upload_begin || !ops->upload_progress || !ops->upload_free ||
        !ops->upload_prefers_ctx || !ops->load_upload)
        return NULL;
    struct ecg_upload *up = calloc(1, sizeof *up);
    if (!up)
        return NULL;
    /* Whatever went wrong, the caller's answer is the same: no streaming, read the host bytes. */
    struct ecg_error ignored = {0};
    if (ops->upload_begin(engine->state, buf, cap, format, &up->backend, &ignored) != ECG_OK ||
        !up->backend) {
        free(up);
        return NULL;
    }
    up->engine = engine;
    up->buf = buf;
    up->cap = cap;
    return up;
}

void ecg_upload_progress(struct ecg_upload *up, size_t filled)
{
    if (!up)
        return;
    up->engine->ops->upload_progress(up->backend, filled < up->cap ? filled : up->cap);
}

enum ecg_status ecg_engine_analyze_upload(struct ecg_engine *engine, struct ecg_upload *up,
                                          size_t len, const struct ecg_read_opts *opts,
                                          struct ecg_result **out, struct ecg_error *err)
{
    *out = NULL;
    if (!up)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "analyze_upload: NULL upload");
    up->used_device = false;
    /* The backend's device copy holds cap bytes: a longer body cannot be what was streamed. */
    if (len > up->cap)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                        "analyze_upload: length %zu exceeds the upload's capacity of %zu bytes",
                        len, up->cap);
    if (up->engine != engine)
        return ecg_engine_analyze_bytes(engine, up->buf, len, opts, out, err);
    struct ecg_read_opts defaults = {0};
    struct analyze_input in = {.bytes = up->buf, .len = len, .opts = opts ? opts : &defaults,
                               .upload = up};
    return analyze(engine, &in, out, NULL, err);
}

enum ecg_status ecg_engine_analyze_keep(struct ecg_engine *engine, struct ecg_upload *up,
                                        const void *buf, size_t len,
                                        const struct ecg_read_opts *opts, struct ecg_result **out,
                                        struct ecg_trace **trace, float **embedding,
                                        struct ecg_error *err)
{
    struct ecg_read_opts defaults = {0};
    struct analyze_input in = {.bytes = buf, .len = len, .opts = opts ? opts : &defaults,
                               .trace = trace};
    *out = NULL;
    *trace = NULL;
    if (embedding)
        *embedding = NULL;
    if (up) {
        up->used_device = false;
        if (len > up->cap)
            return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                            "analyze_keep: length %zu exceeds the upload's capacity of %zu "
                            "bytes", len, up->cap);
        in.bytes = up->buf;
        in.upload = up->engine == engine ? up : NULL;
    }
    return analyze(engine, &in, out, embedding, err);
}

enum ecg_status ecg_engine_analyze_signal_keep(struct ecg_engine *engine,
                                               const struct ecg_signal *signal,
                                               const struct ecg_read_opts *opts,
                                               struct ecg_result **out, struct ecg_trace **trace,
                                               float **embedding, struct ecg_error *err)
{
    struct analyze_input in = {.signal = signal, .opts = opts, .trace = trace};
    *out = NULL;
    if (trace)
        *trace = NULL;
    if (embedding)
        *embedding = NULL;
    return analyze(engine, &in, out, embedding, err);
}

bool ecg_upload_used_device(const struct ecg_upload *up)
{
    return up && up->used_device;
}

void ecg_upload_free(struct ecg_upload *up)
{
    if (!up)
        return;
    up->engine->ops->upload_free(up->backend);
    free(up);
}

void *ecg_engine_host_alloc(struct ecg_engine *engine, size_t bytes)
{
    if (!bytes)
        bytes = 1; /* never malloc(0): NULL must mean failure */
    if (engine->ops->host_alloc && engine->ops->host_free)
        return engine->ops->host_alloc(engine->state, bytes);
    return malloc(bytes);
}

void ecg_engine_host_free(struct ecg_engine *engine, void *ptr)
{
    if (!ptr)
        return;
    if (engine->ops->host_alloc && engine->ops->host_free)
        engine->ops->host_free(engine->state, ptr);
    else
        free(ptr);
}
