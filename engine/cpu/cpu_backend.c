/*
 * cpu_backend.c - the CPU backend's table of operations: the reference pipeline in plain C.
 *
 * A context holds the request's arrays on the host; each stage calls the pure function of
 * cpu.h on them. Buffers (signal, beat tables, embedding, scores, the VAE's work area) grow to
 * the largest request a context has seen and are reused, so a steady stream of requests
 * allocates nothing here; only the detector's peak lists are allocated per request (cpu_detect
 * returns them).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu.h"
#include "likeness_core.h"
#include "quality.h"

struct cpu_state {
    const struct ecg_model *model;
    uint32_t latent_dim;
};

struct cpu_ctx {
    const struct cpu_state *state;
    float *x;           /* input, n_in */
    size_t n_in, cap_in;
    float *y, *f;       /* resampled and filtered, n_a */
    size_t n_a, cap_a;
    /* further leads (load_extra): input, resampled, filtered */
    size_t n_extra;
    double lead_agree[ECG_MAX_LEADS]; /* the detector's, per lead (ecg_result.lead_agree) */
    float *x_extra[ECG_MAX_LEADS - 1], *y_extra[ECG_MAX_LEADS - 1], *f_extra[ECG_MAX_LEADS - 1];
    size_t cap_in_extra[ECG_MAX_LEADS - 1], cap_a_extra[ECG_MAX_LEADS - 1];
    int64_t *peaks_a, *peaks_in;
    float *beat_crest;  /* the detector's crest factor at each beat (cpu_detect_leads) */
    size_t k;
    int64_t *onset, *end;
    float *rr_ms;
    float *likeness; /* likeness_core.h, after embed */
    double *likeness_cross; /* its pairs' cross sums (k * LIKENESS_REACH) */
    double *likeness_sum; /* each beat's own sums (2 k) */
    size_t cap_cross, cap_sum;
    uint8_t *kept;
    float *emb;         /* k x beat_len */
    uint32_t beat_len;
    float *latent, *score;
    uint8_t *outlier;
    size_t cap_k, cap_emb, cap_latent; /* entries the beat arrays above have room for */
    struct cpu_vae_scratch vae;
    double *band;       /* the noise-aware band's work area (cpu_noise_band_work bytes) */
    size_t cap_band;
    bool embedded, encoded; /* emb and the scores hold this request's beats */
};

static enum ecg_status cpu_open(const struct ecg_engine_config *config, void **state,
                                struct ecg_error *err)
{
    struct cpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cpu backend");
    s->model = config->model;
    if (s->model) {
        struct ecg_model_info info;
        ecg_model_get_info(s->model, &info);
        s->latent_dim = info.latent_dim;
    }
    *state = s;
    return ECG_OK;
}

static void cpu_close(void *state)
{
    free(state);
}

static const char *cpu_device(void *state)
{
    return "cpu";
}

/* Forgets the request's beats: the detector's peak lists are freed, the tables kept. */
static void reset_beats(struct cpu_ctx *c)
{
    free(c->peaks_a);
    free(c->peaks_in);
    free(c->beat_crest);
    c->peaks_a = c->peaks_in = NULL;
    c->beat_crest = NULL;
    c->k = 0;
    c->embedded = c->encoded = false;
}

/* Grows *p to n elements of elem bytes (at least one), keeping it when large enough. */
static enum ecg_status grow_array(void **p, size_t *cap, size_t n, size_t elem,
                                  struct ecg_error *err)
{
    if (n == 0)
        n = 1;
    if (n <= *cap)
        return ECG_OK;
    n += n / 4; /* strips of a similar length do not grow it every time */
    void *q = realloc(*p, n * elem);
    if (!q)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                        "cpu backend: %zu entries of %zu bytes", n, elem);
    *p = q;
    *cap = n;
    return ECG_OK;
}

/* Room for k beats in every per-beat table (all have cap_k entries). */
static enum ecg_status reserve_beats(struct cpu_ctx *c, size_t k, struct ecg_error *err)
{
    if (k <= c->cap_k && c->cap_k > 0)
        return ECG_OK;
    struct {
        void **p;
        size_t elem;
    } tables[] = {{(void **)&c->onset, sizeof *c->onset}, {(void **)&c->end, sizeof *c->end},
                  {(void **)&c->rr_ms, sizeof *c->rr_ms}, {(void **)&c->kept, 1},
                  {(void **)&c->likeness, sizeof *c->likeness},
                  {(void **)&c->score, sizeof *c->score}, {(void **)&c->outlier, 1}};
    size_t cap = c->cap_k;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        cap = c->cap_k; /* each table grows from the same capacity to the same one */
        enum ecg_status st = grow_array(tables[i].p, &cap, k, tables[i].elem, err);
        if (st != ECG_OK)
            return st;
    }
    c->cap_k = cap;
    return ECG_OK;
}

static enum ecg_status cpu_ctx_create(void *state, void **ctx, struct ecg_error *err)
{
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cpu context");
    c->state = state;
    *ctx = c;
    return ECG_OK;
}

static void cpu_ctx_destroy(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (!c)
        return;
    reset_beats(c);
    free(c->onset);
    free(c->end);
    free(c->rr_ms);
    free(c->likeness);
    free(c->likeness_cross);
    free(c->likeness_sum);
    free(c->kept);
    free(c->emb);
    free(c->band);
    free(c->latent);
    free(c->score);
    free(c->outlier);
    cpu_vae_scratch_fini(&c->vae);
    free(c->x);
    free(c->y);
    free(c->f);
    for (size_t i = 0; i < ECG_MAX_LEADS - 1; i++) {
        free(c->x_extra[i]);
        free(c->y_extra[i]);
        free(c->f_extra[i]);
    }
    free(c);
}

static enum ecg_status grow(float **buf, size_t *cap, size_t n, struct ecg_error *err)
{
    if (n <= *cap)
        return ECG_OK;
    float *p = realloc(*buf, n * sizeof *p);
    if (!p)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%zu samples", n);
    *buf = p;
    *cap = n;
    return ECG_OK;
}

static enum ecg_status cpu_load(void *ctx, const float *samples, size_t n, struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    reset_beats(c);
    c->n_in = c->n_a = 0;
    enum ecg_status status = grow(&c->x, &c->cap_in, n, err);
    if (status != ECG_OK)
        return status;
    memcpy(c->x, samples, n * sizeof *samples);
    c->n_in = n;
    c->n_extra = 0;
    return ECG_OK;
}

static enum ecg_status cpu_load_extra(void *ctx, const float *const *leads, size_t n_leads,
                                      size_t n, struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    if (n_leads > ECG_MAX_LEADS - 1 || n != c->n_in)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "%zu extra leads of %zu samples",
                        n_leads, n);
    for (size_t i = 0; i < n_leads; i++) {
        enum ecg_status status = grow(&c->x_extra[i], &c->cap_in_extra[i], n, err);
        if (status != ECG_OK)
            return status;
        memcpy(c->x_extra[i], leads[i], n * sizeof *leads[i]);
    }
    c->n_extra = n_leads;
    return ECG_OK;
}

static enum ecg_status cpu_resample_stage(void *ctx, const struct ecg_plan *plan,
                                          struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    size_t n_a = ecg_plan_resampled_len(plan, c->n_in);
    size_t cap = c->cap_a;
    enum ecg_status status = grow(&c->y, &cap, n_a, err);
    if (status == ECG_OK)
        status = grow(&c->f, &c->cap_a, n_a, err);
    if (status != ECG_OK)
        return status;
    c->n_a = n_a;
    for (size_t i = 0; i < c->n_extra; i++) {
        size_t cap_y = c->cap_a_extra[i];
        status = grow(&c->y_extra[i], &cap_y, n_a, err);
        if (status == ECG_OK)
            status = grow(&c->f_extra[i], &c->cap_a_extra[i], n_a, err);
        if (status == ECG_OK)
            status = cpu_resample(plan, c->x_extra[i], c->n_in, c->y_extra[i], err);
        if (status != ECG_OK)
            return status;
    }
    return cpu_resample(plan, c->x, c->n_in, c->y, err);
}

static enum ecg_status cpu_filter_stage(void *ctx, const struct ecg_plan *plan,
                                        struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    const size_t work = cpu_noise_band_work(plan, c->n_a);
    enum ecg_status status = grow_array((void **)&c->band, &c->cap_band,
                                        (work + sizeof(double) - 1) / sizeof(double),
                                        sizeof(double), err);
    for (size_t i = 0; i < c->n_extra && status == ECG_OK; i++) {
        status = cpu_filter(plan, c->y_extra[i], c->n_a, c->f_extra[i], err);
        if (status == ECG_OK)
            status = cpu_noise_band(plan, c->y_extra[i], c->f_extra[i], c->n_a, c->band, err);
    }
    if (status == ECG_OK)
        status = cpu_filter(plan, c->y, c->n_a, c->f, err);
    if (status == ECG_OK)
        status = cpu_noise_band(plan, c->y, c->f, c->n_a, c->band, err);
    return status;
}

static enum ecg_status cpu_detect_stage(void *ctx, const struct ecg_plan *plan, size_t *n_beats,
                                        struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    reset_beats(c);
    for (size_t l = 0; l < ECG_MAX_LEADS; l++)
        c->lead_agree[l] = NAN; /* under three leads the detector takes none */
    struct cpu_lead leads[ECG_MAX_LEADS] = {{c->y, c->f}};
    for (size_t i = 0; i < c->n_extra; i++)
        leads[i + 1] = (struct cpu_lead){c->y_extra[i], c->f_extra[i]};
    enum ecg_status status = cpu_detect_leads(plan, c->x, c->n_in, leads, 1 + c->n_extra,
                                              c->n_a, &c->peaks_a, &c->peaks_in, &c->k,
                                              c->lead_agree, &c->beat_crest, err);
    *n_beats = status == ECG_OK ? c->k : 0;
    return status;
}

static enum ecg_status cpu_embed_stage(void *ctx, const struct ecg_plan *plan,
                                       struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    size_t k = c->k;
    c->beat_len = plan->beat_len;
    enum ecg_status st = reserve_beats(c, k, err);
    if (st == ECG_OK)
        st = grow_array((void **)&c->emb, &c->cap_emb, k * plan->beat_len, sizeof *c->emb, err);
    if (st == ECG_OK)
        st = grow_array((void **)&c->likeness_cross, &c->cap_cross, k * LIKENESS_REACH,
                        sizeof *c->likeness_cross, err);
    if (st == ECG_OK)
        st = grow_array((void **)&c->likeness_sum, &c->cap_sum, 2 * k, sizeof *c->likeness_sum,
                        err);
    if (st != ECG_OK)
        return st;
    cpu_segment(plan, c->peaks_a, c->peaks_in, k, c->n_a, c->n_in, c->onset, c->end, c->rr_ms,
                c->kept);
    const struct likeness_geometry g = likeness_geometry_of(plan->fs_in_hz);
    const float *leads[ECG_MAX_LEADS] = {c->x};
    for (size_t l = 0; l < c->n_extra; l++)
        leads[l + 1] = c->x_extra[l];
    likeness_all(leads, 1 + c->n_extra, (int64_t)c->n_in, c->peaks_in, k, g, c->likeness_sum,
                 c->likeness_cross, c->likeness);
    st = cpu_embed(plan, c->y, c->n_a, c->peaks_a, c->kept, k, c->emb, err);
    c->embedded = st == ECG_OK;
    return st;
}

static enum ecg_status cpu_encode_stage(void *ctx, const struct ecg_plan *plan,
                                        struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    const struct cpu_state *s = c->state;
    if (!s->model)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "encode called without a model");
    enum ecg_status status =
        grow_array((void **)&c->latent, &c->cap_latent, c->k * s->latent_dim, sizeof *c->latent,
                   err);
    if (status != ECG_OK)
        return status;
    status = cpu_vae_score_with(s->model, c->emb, c->kept, c->rr_ms, c->k, CPU_VAE_ISA_AUTO,
                                &c->vae, c->latent, NULL, c->score, c->outlier, err);
    c->encoded = status == ECG_OK;
    return status;
}

static enum ecg_status cpu_quality_stage(void *ctx, const struct ecg_plan *plan,
                                         struct ecg_quality_window *windows, size_t n_win,
                                         struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    struct ecg_quality_geometry g = ecg_quality_geometry_of(c->n_in, plan->fs_in_hz);
    if (g.n_win != n_win)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "quality: %zu windows, expected %zu",
                        n_win, g.n_win);
    cpu_quality_features(c->x, c->n_in, plan->fs_in_hz, windows);
    return ECG_OK;
}

static enum ecg_status cpu_fetch(void *ctx, struct ecg_result *r, struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    if (r->n_beats != c->k)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "fetch of %zu beats, have %zu",
                        r->n_beats, c->k);
    size_t k = c->k;
    for (size_t l = 0; l < ECG_MAX_LEADS; l++)
        r->lead_agree[l] = l <= c->n_extra ? c->lead_agree[l] : NAN;
    memcpy(r->r_peak, c->peaks_in, k * sizeof *r->r_peak);
    memcpy(r->onset, c->onset, k * sizeof *r->onset);
    memcpy(r->end, c->end, k * sizeof *r->end);
    memcpy(r->rr_ms, c->rr_ms, k * sizeof *r->rr_ms);
    memcpy(r->kept, c->kept, k * sizeof *r->kept);
    memcpy(r->likeness, c->likeness, k * sizeof *r->likeness);
    if (k)
        memcpy(r->crest, c->beat_crest, k * sizeof *r->crest);
    if (r->latent) {
        if (!c->encoded)
            return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "fetch of scores before encode");
        memcpy(r->latent, c->latent, k * r->latent_dim * sizeof *r->latent);
        memcpy(r->score, c->score, k * sizeof *r->score);
        memcpy(r->outlier, c->outlier, k * sizeof *r->outlier);
    }
    return ECG_OK;
}

/* The host array behind a stage buffer, its element size and length. */
static void *stage_array(struct cpu_ctx *c, enum ecg_stage_buf which, size_t *elem, size_t *n)
{
    switch (which) {
    case ECG_BUF_INPUT: *elem = sizeof(float); *n = c->n_in; return c->x;
    case ECG_BUF_RESAMPLED: *elem = sizeof(float); *n = c->n_a; return c->y;
    case ECG_BUF_FILTERED: *elem = sizeof(float); *n = c->n_a; return c->f;
    case ECG_BUF_PEAKS: *elem = sizeof(int64_t); *n = c->k; return c->peaks_in;
    case ECG_BUF_EMBED: *elem = sizeof(float); *n = c->embedded ? c->k * c->beat_len : 0; return c->emb;
    case ECG_BUF_LATENT:
        *elem = sizeof(float);
        *n = c->encoded ? c->k * c->state->latent_dim : 0;
        return c->latent;
    case ECG_BUF_SCORE: *elem = sizeof(float); *n = c->encoded ? c->k : 0; return c->score;
    case ECG_BUF_COUNT: break;
    }
    *elem = 0;
    *n = 0;
    return NULL;
}

static enum ecg_status cpu_read_buf(void *ctx, enum ecg_stage_buf which, void *host, size_t cap,
                                    size_t *n, struct ecg_error *err)
{
    size_t elem = 0, len = 0;
    void *src = stage_array(ctx, which, &elem, &len);
    if (!elem)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "no stage buffer %d", (int)which);
    *n = len;
    if (len && src)
        memcpy(host, src, (len < cap ? len : cap) * elem);
    return ECG_OK;
}

static enum ecg_status cpu_write_buf(void *ctx, enum ecg_stage_buf which, const void *host,
                                     size_t n, struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    switch (which) {
    case ECG_BUF_INPUT:
        return cpu_load(ctx, host, n, err);
    case ECG_BUF_RESAMPLED:
    case ECG_BUF_FILTERED: {
        float **dst = which == ECG_BUF_RESAMPLED ? &c->y : &c->f;
        size_t cap = c->cap_a;
        enum ecg_status status = grow(&c->y, &cap, n, err);
        if (status == ECG_OK)
            status = grow(&c->f, &c->cap_a, n, err);
        if (status != ECG_OK)
            return status;
        memcpy(*dst, host, n * sizeof(float));
        c->n_a = n;
        return ECG_OK;
    }
    default:
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument",
                        "stage buffer %d cannot be injected on the cpu backend", (int)which);
    }
}

/* ---- kept traces: a host copy of the input; the reduction is ecg_minmax(), the reference */

struct cpu_trace {
    float *x;
    size_t n;
};

static enum ecg_status cpu_trace_keep(void *ctx, void **trace, size_t *bytes,
                                      struct ecg_error *err)
{
    struct cpu_ctx *c = ctx;
    struct cpu_trace *t = calloc(1, sizeof *t);
    float *x = malloc((c->n_in ? c->n_in : 1) * sizeof *x);
    if (!t || !x) {
        free(t);
        free(x);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "trace of %zu samples", c->n_in);
    }
    memcpy(x, c->x, c->n_in * sizeof *x);
    t->x = x;
    t->n = c->n_in;
    *trace = t;
    *bytes = sizeof *t + c->n_in * sizeof *x;
    return ECG_OK;
}

static enum ecg_status cpu_trace_minmax(void *trace, size_t start, size_t end, size_t n_buckets,
                                        struct ecg_minmax *out, struct ecg_error *err)
{
    struct cpu_trace *t = trace;
    (void)err;
    ecg_minmax(t->x, start, end, n_buckets, out);
    return ECG_OK;
}

static enum ecg_status cpu_trace_read(void *trace, size_t start, size_t n, float *host,
                                      struct ecg_error *err)
{
    struct cpu_trace *t = trace;
    (void)err;
    memcpy(host, t->x + start, n * sizeof *host);
    return ECG_OK;
}

static void cpu_trace_free(void *trace)
{
    struct cpu_trace *t = trace;
    if (!t)
        return;
    free(t->x);
    free(t);
}

const struct ecg_backend_ops ecg_cpu_backend = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .device = cpu_device,
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .load = cpu_load,
    .load_extra = cpu_load_extra,
    .load_bytes = NULL,
    .resample = cpu_resample_stage,
    .filter = cpu_filter_stage,
    .detect = cpu_detect_stage,
    .embed = cpu_embed_stage,
    .encode = cpu_encode_stage,
    .quality = cpu_quality_stage,
    .fetch = cpu_fetch,
    .read_buf = cpu_read_buf,
    .write_buf = cpu_write_buf,
    .trace_keep = cpu_trace_keep,
    .trace_minmax = cpu_trace_minmax,
    .trace_read = cpu_trace_read,
    .trace_free = cpu_trace_free,
};
