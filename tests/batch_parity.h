/*
 * batch_parity.h - the dynamic batcher's parity check, shared by tests/unit/test_batch.c (the
 * CPU backend batched through engine/batch.c's stage-by-stage runner) and
 * tests/gpu/test_gpu_batch.c (the CUDA backend's own batches).
 *
 * 64 requests of mixed lengths (1 s .. 80 s of MIT-BIH records), rates (360 Hz as recorded,
 * 180 and 120 Hz by decimation, 720 Hz by repeating samples) and formats (CSV, raw float32,
 * raw int16, a decoded signal), plus requests that must not be batched or must fail (0.5 s: too
 * short; a malformed CSV; two leads), are analysed by 64 threads at once on an engine that
 * batches, and one by one on an engine that does not. Every answer must be identical: the same
 * status and error, and the same JSON (every field but timing_ms) and beat arrays, byte for
 * byte. Nearly all must have been batched, and one batch must have held several analyses, or
 * the test proved nothing. ECG_GPU_DATA (a directory holding mitdb/) overrides ECG_SHARED_DATA.
 *
 * Include after <cmocka.h> and "ecg.h". Everything here is static to each test program.
 */
#ifndef BATCH_PARITY_H
#define BATCH_PARITY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARITY_REQUESTS 64
#define PARITY_RECORDS_DIR ECG_SHARED_DATA "/mitdb"
/* ECG_GPU_DATA (a directory holding mitdb/) overrides ECG_SHARED_DATA, as in the GPU tests. */
static void parity_record_path(char *path, size_t cap, const char *name)
{
    const char *dir = getenv("ECG_GPU_DATA");
    if (dir && *dir)
        snprintf(path, cap, "%s/mitdb/%s", dir, name);
    else
        snprintf(path, cap, "%s/%s", PARITY_RECORDS_DIR, name);
}

struct parity_request {
    char *body;               /* the bytes posted (NULL: a decoded signal) */
    size_t len;
    struct ecg_signal signal; /* the decoded signal's request */
    struct ecg_read_opts opts;
    char label[96];
    /* the answers: [0] alone, [1] batched */
    enum ecg_status status[2];
    struct ecg_error err[2];
    struct ecg_result *result[2];
    struct ecg_buf json[2];
};

struct parity_run {
    struct ecg_engine *engine;
    struct parity_request *req;
    pthread_barrier_t *start;
    int which;
};

/* Samples [start, start + n) of src at a rate of fs_in, turned into rate_hz (a divisor or
 * double of 360 Hz). Returns the new count. */
static size_t parity_resample(const float *src, size_t n, unsigned rate_hz, float *out)
{
    size_t m = 0;
    if (rate_hz == 720) {
        for (size_t i = 0; i < n; i++) {
            out[m++] = src[i];
            out[m++] = src[i];
        }
        return m;
    }
    const size_t step = 360 / rate_hz;
    for (size_t i = 0; i < n; i += step)
        out[m++] = src[i];
    return m;
}

/* The requests of a check: mixed shapes, some refused; or every one 10 s at 360 Hz, none
 * refused (the same front in every batch slot, so that the CUDA batches' front graphs are
 * captured and replayed), from any of the records; or that from two fixed strips only (two
 * beat counts, so that the backs' graphs, kept per beat count, are replayed too); or every one
 * 3,600 samples said to be at 250 Hz (a record's samples as they are, a slower rhythm: the
 * shipped model's rate, so the analysis takes them without resampling). */
enum parity_shape { PARITY_MIXED = 0, PARITY_UNIFORM = 1, PARITY_REPEAT = 2, PARITY_AT_250 = 3 };

/* Requests per check of one shape (uniform, repeat): ECG_PARITY_REQUESTS (2..64) where a slow
 * tool (compute-sanitizer racecheck) must see fewer analyses, else PARITY_REQUESTS. The mixed
 * check always sends all 64 (its last three are the refusals and the two-lead request). */
static int parity_requests(void)
{
    const char *v = getenv("ECG_PARITY_REQUESTS");
    long n = v && *v ? strtol(v, NULL, 10) : PARITY_REQUESTS;
    return n < 2 ? 2 : n > PARITY_REQUESTS ? PARITY_REQUESTS : (int)n;
}

/* Request i: record, stretch, rate and format chosen from i (fixed: the test is reproducible). */
static void parity_make(struct parity_request *r, int i, const struct ecg_signal *records,
                        size_t n_records, enum parity_shape shape)
{
    static const unsigned rates[] = {360, 180, 120, 720};
    static const double seconds[] = {1, 2, 3.5, 10, 10, 17, 30, 45, 60, 80};
    const bool uniform = shape != PARITY_MIXED;
    const struct ecg_signal *rec =
        &records[shape == PARITY_REPEAT ? (size_t)(i % 2) : (size_t)i % n_records];
    const unsigned rate = shape == PARITY_AT_250 ? 250 : uniform ? 360 : rates[(i / 3) % 4];
    double dur = uniform ? 10.0 : seconds[(i * 7) % 10];
    if (i == 61 && !uniform)
        dur = 0.5; /* too short: refused, by the same error both ways */
    size_t n_src = (size_t)(dur * 360.0);
    size_t start = shape == PARITY_REPEAT ? 36000u * (size_t)(i % 2 + 1)
                                          : ((size_t)i * 104729u) % (rec->n - n_src);
    float *x = malloc(2 * n_src * sizeof *x + 16);
    assert_non_null(x);
    size_t n = rate == 250 ? n_src : parity_resample(rec->samples + start, n_src, rate, x);
    if (rate == 250)
        memcpy(x, rec->samples + start, n_src * sizeof *x);
    memset(r, 0, sizeof *r);
    r->opts.fs_hz = rate;
    const int format = (i == 62 || i == 63) && !uniform ? 4 + (i - 62) : i % 4;
    snprintf(r->label, sizeof r->label, "request %d: %g s at %u Hz, format %d", i, dur, rate,
             format);
    struct ecg_buf text = {0};
    switch (format) {
    case 0: /* CSV, one column, every float written exactly */
        r->opts.format = ECG_FORMAT_CSV;
        for (size_t k = 0; k < n; k++)
            ecg_buf_printf(&text, "%.9g\n", (double)x[k]);
        break;
    case 1: /* raw float32 */
        r->opts.format = ECG_FORMAT_F32;
        ecg_buf_append(&text, (const char *)x, n * sizeof *x);
        break;
    case 2: /* raw int16 of the samples in microvolts */
        r->opts.format = ECG_FORMAT_I16;
        for (size_t k = 0; k < n; k++) {
            int16_t v = (int16_t)(x[k] * 1000.0f);
            ecg_buf_append(&text, (const char *)&v, sizeof v);
        }
        break;
    case 3: /* a decoded signal (ecg_engine_analyze) */
        r->signal.samples = x;
        r->signal.n = n;
        r->signal.fs_hz = rate;
        snprintf(r->signal.lead, sizeof r->signal.lead, "MLII");
        x = NULL;
        break;
    case 4: /* a malformed CSV: refused by the same error both ways */
        r->opts.format = ECG_FORMAT_CSV;
        for (size_t k = 0; k < n; k++)
            ecg_buf_printf(&text, k == n / 2 ? "0.1x\n" : "%.9g\n", (double)x[k]);
        break;
    default: /* two leads, both the same: never batched */
        r->opts.format = ECG_FORMAT_CSV;
        r->opts.lead = "0,1";
        for (size_t k = 0; k < n; k++)
            ecg_buf_printf(&text, "%.9g,%.9g\n", (double)x[k], (double)x[k]);
        break;
    }
    free(x);
    if (format != 3) {
        r->body = text.data;
        r->len = text.len;
    }
}

static void *parity_thread(void *arg)
{
    struct parity_run *run = arg;
    struct parity_request *r = run->req;
    const int w = run->which;
    if (run->start)
        pthread_barrier_wait(run->start);
    if (r->body)
        r->status[w] = ecg_engine_analyze_bytes(run->engine, r->body, r->len, &r->opts,
                                                &r->result[w], &r->err[w]);
    else
        r->status[w] = ecg_engine_analyze(run->engine, &r->signal, &r->result[w], &r->err[w]);
    if (r->status[w] == ECG_OK)
        ecg_result_write_json(r->result[w], run->engine,
                              ECG_INCLUDE_ALL & ~(unsigned)ECG_INCLUDE_TIMING, &r->json[w]);
    return NULL;
}

/* The arrays of two results, byte for byte. */
static void parity_same_arrays(const struct parity_request *r)
{
    const struct ecg_result *a = r->result[0], *b = r->result[1];
    const size_t k = a->n_beats;
    assert_int_equal(b->n_beats, k);
    assert_int_equal(a->latent_dim, b->latent_dim);
    assert_true((a->latent == NULL) == (b->latent == NULL));
    if (k == 0)
        return;
    assert_memory_equal(a->r_peak, b->r_peak, k * sizeof *a->r_peak);
    assert_memory_equal(a->onset, b->onset, k * sizeof *a->onset);
    assert_memory_equal(a->end, b->end, k * sizeof *a->end);
    assert_memory_equal(a->rr_ms, b->rr_ms, k * sizeof *a->rr_ms);
    assert_memory_equal(a->likeness, b->likeness, k * sizeof *a->likeness);
    assert_memory_equal(a->crest, b->crest, k * sizeof *a->crest);
    assert_memory_equal(a->kept, b->kept, k);
    assert_memory_equal(a->beat_quality, b->beat_quality, k * sizeof *a->beat_quality);
    assert_memory_equal(a->nn, b->nn, k);
    if (a->latent) {
        assert_memory_equal(a->latent, b->latent, k * a->latent_dim * sizeof(float));
        assert_memory_equal(a->score, b->score, k * sizeof(float));
        assert_memory_equal(a->outlier, b->outlier, k);
    }
}

/*
 * Runs the check: alone (one by one) on engine_alone, then batched (all at once) on
 * engine_batch (shape: see enum parity_shape). Returns the largest batch seen.
 */
static inline unsigned parity_check(struct ecg_engine *engine_alone,
                                    struct ecg_engine *engine_batch,
                                    enum parity_shape shape)
{
    const bool uniform = shape != PARITY_MIXED;
    const int n_req = uniform ? parity_requests() : PARITY_REQUESTS;
    static const char *const names[] = {"101", "106", "108", "119", "203", "208"};
    struct ecg_signal records[sizeof names / sizeof names[0]];
    const size_t n_records = sizeof names / sizeof names[0];
    struct parity_request *req = calloc(PARITY_REQUESTS, sizeof *req);
    struct parity_run runs[PARITY_REQUESTS];
    pthread_t threads[PARITY_REQUESTS];
    pthread_barrier_t start;
    unsigned largest = 0;
    size_t ok = 0, batched = 0;
    assert_non_null(req);
    memset(records, 0, sizeof records);
    for (size_t i = 0; i < n_records; i++) {
        char path[256];
        struct ecg_error err = {0};
        struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
        parity_record_path(path, sizeof path, names[i]);
        if (ecg_read_file(path, &opts, &records[i], &err) != ECG_OK)
            fail_msg("%s: %s", path, err.message);
    }
    for (int i = 0; i < n_req; i++)
        parity_make(&req[i], i, records, n_records, shape);

    for (int i = 0; i < n_req; i++) {
        runs[i] = (struct parity_run){.engine = engine_alone, .req = &req[i], .which = 0};
        parity_thread(&runs[i]);
    }
    assert_int_equal(pthread_barrier_init(&start, NULL, (unsigned)n_req), 0);
    for (int i = 0; i < n_req; i++) {
        runs[i] = (struct parity_run){.engine = engine_batch, .req = &req[i], .start = &start,
                                      .which = 1};
        assert_int_equal(pthread_create(&threads[i], NULL, parity_thread, &runs[i]), 0);
    }
    for (int i = 0; i < n_req; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);

    for (int i = 0; i < n_req; i++) {
        struct parity_request *r = &req[i];
        if (r->status[0] != r->status[1] || strcmp(r->err[0].code, r->err[1].code) ||
            strcmp(r->err[0].message, r->err[1].message))
            fail_msg("%s: alone %s (%s), batched %s (%s)", r->label,
                     ecg_status_str(r->status[0]), r->err[0].message,
                     ecg_status_str(r->status[1]), r->err[1].message);
        if (r->status[0] != ECG_OK)
            continue;
        ok++;
        if (r->json[0].len != r->json[1].len ||
            memcmp(r->json[0].data, r->json[1].data, r->json[0].len) != 0) {
            size_t at = 0;
            while (at < r->json[0].len && at < r->json[1].len &&
                   r->json[0].data[at] == r->json[1].data[at])
                at++;
            at = at > 80 ? at - 80 : 0;
            fail_msg("%s: answers differ from byte %zu:\nalone   %.240s\nbatched %.240s",
                     r->label, at, r->json[0].data + at, r->json[1].data + at);
        }
        parity_same_arrays(r);
        assert_int_equal(r->result[0]->timing.batch_size, 0);
        if (r->result[1]->timing.batch_size > 0)
            batched++;
        if (r->result[1]->timing.batch_size > largest)
            largest = r->result[1]->timing.batch_size;
    }
    printf("# %zu of %d requests answered (the others refused alike), %zu of them batched, "
           "largest batch %u\n", ok, n_req, batched, largest);
    if (uniform) {
        assert_int_equal(ok, n_req);
        assert_int_equal(batched, n_req);
    } else {
        /* 0.5 s, the malformed CSV: refused; two leads: answered alone */
        assert_int_equal(req[61].status[1], ECG_ERR_UNSUPPORTED);
        assert_int_not_equal(req[62].status[1], ECG_OK);
        assert_int_equal(req[63].status[1], ECG_OK);
        assert_int_equal(req[63].result[1]->timing.batch_size, 0);
        assert_true(ok >= PARITY_REQUESTS - 2);
        assert_true(batched >= PARITY_REQUESTS - 3);
    }

    for (int i = 0; i < n_req; i++) {
        for (int w = 0; w < 2; w++) {
            ecg_result_free(req[i].result[w]);
            free(req[i].json[w].data);
        }
        free(req[i].body);
        free(req[i].signal.samples);
    }
    for (size_t i = 0; i < n_records; i++)
        ecg_signal_free(&records[i]);
    free(req);
    return largest;
}

#endif /* BATCH_PARITY_H */
