/*
 * upload_chunked.c - test_gpu_upload: chunked bodies, begun with their buffer's
 * capacity (a length past it refused), and the service's growth path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "upload.h"

#include "backend.h"
#include "ecg.h"

/* A chunked body: the upload begun with its buffer's capacity, twice the body (the most the
 * service's doubling leaves), fed in uneven steps up to the body's length, which only the
 * analysis learns; the tail of the last 4 MiB batch is pushed there. Same results as
 * analyze_bytes, read from the device copy; a length past the capacity is refused. */
void test_upload_chunked_capacity(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct refs r;
    refs_open(fx, 1, 0, &r);
    /* neither length is a multiple of the 4 MiB batch: a tail is left for the analysis */
    assert_true(fx->csv_len % (4 * MIB) != 0 && r.f32_len % (4 * MIB) != 0);
    stream_and_check(r.engine, fx->csv, fx->csv_len, 2 * fx->csv_len, &r.csv, ECG_FORMAT_CSV,
                     r.ref_csv, "chunked csv");
    stream_and_check(r.engine, fx->samples, r.f32_len, 2 * r.f32_len, &r.f32, ECG_FORMAT_F32,
                     r.ref_f32, "chunked f32");
    /* a buffer just one byte larger than the body: progress never sees it full */
    stream_and_check(r.engine, fx->samples, r.f32_len, r.f32_len + 1, &r.f32, ECG_FORMAT_F32,
                     r.ref_f32, "f32 in a buffer 1 byte larger");
    refs_close(&r);
}

/*
 * The service's growth path for a chunked body (service/server.c, request_body): the body
 * arrives in uneven steps into a buffer that starts at 1 MiB; whenever a step does not fit, the
 * upload is freed, a buffer twice as large is taken, the prefix copied into it, the old buffer
 * poisoned (the pool may hand it to anyone once the upload is freed) and released, and a new
 * upload begun on the new buffer with its capacity, the prefix reported at once. Returns the
 * number of uploads begun; the analysis must read the last one's device copy and equal ref.
 */
static unsigned stream_growing(struct ecg_engine *engine, const void *bytes, size_t len,
                               const struct ecg_read_opts *opts, const struct ecg_result *ref,
                               const char *what)
{
    size_t cap = MIB, filled = 0;
    unsigned begun = 0;
    char *host = ecg_engine_host_alloc(engine, cap);
    assert_non_null(host);
    struct ecg_upload *up = ecg_engine_upload_begin(engine, host, cap, opts->format);
    if (!up)
        fail_msg("%s: upload_begin refused a pinned buffer of %zu bytes", what, cap);
    begun++;
    for (size_t s = 0; filled < len; s++) {
        size_t step = arrival_steps[s % (sizeof arrival_steps / sizeof arrival_steps[0])];
        if (step > len - filled)
            step = len - filled;
        if (step > cap - filled) {
            ecg_upload_free(up); /* first: its copies read the old buffer */
            size_t new_cap = cap;
            while (new_cap < filled + step)
                new_cap *= 2;
            char *grown = ecg_engine_host_alloc(engine, new_cap);
            assert_non_null(grown);
            memcpy(grown, host, filled);
            memset(host, 0xff, cap);
            ecg_engine_host_free(engine, host);
            host = grown;
            cap = new_cap;
            memset(host + filled, 0xff, cap - filled);
            up = ecg_engine_upload_begin(engine, host, cap, opts->format);
            if (!up)
                fail_msg("%s: upload_begin refused the grown buffer of %zu bytes", what, cap);
            begun++;
            ecg_upload_progress(up, filled);
        }
        memcpy(host + filled, (const char *)bytes + filled, step);
        filled += step;
        ecg_upload_progress(up, filled);
    }
    assert_true(cap >= len);
    analyze_on_device(engine, up, len, opts, ref, what);
    ecg_upload_free(up);
    ecg_engine_host_free(engine, host);
    printf("# %s: %zu bytes in a buffer of %zu, %u uploads begun\n", what, len, cap, begun);
    return begun;
}

void test_upload_regrown(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    struct refs r;
    refs_open(fx, 1, 0, &r);
    /* from 1 MiB, with the 64 KiB then 3 MiB first steps: the CSV (over 5 MB even in quick
     * mode) grows to 4 then 16 MiB at least, the float32 body (2.6 MB in quick mode) to 4 MiB */
    assert_true(stream_growing(r.engine, fx->csv, fx->csv_len, &r.csv, r.ref_csv,
                               "grown csv") >= 3);
    assert_true(stream_growing(r.engine, fx->samples, r.f32_len, &r.f32, r.ref_f32,
                               "grown f32") >= 2);
    /* and the r.engine's next upload, in a buffer of the body's size, is unaffected */
    stream_and_check(r.engine, fx->samples, r.f32_len, r.f32_len, &r.f32, ECG_FORMAT_F32, r.ref_f32,
                     "f32 after growth");
    refs_close(&r);
}
