/*
 * upload_many.c - test_gpu_upload: several uploads in flight on one engine, four
 * threads on an engine of two workers, and device memory that neither leaks nor grows by more
 * than the body. ECG_GPU_QUICK=1 skips these.
 */
#include <pthread.h>
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
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

/* Several uploads in flight on one engine, fed interleaved, analysed in another order. */
void test_upload_several_at_once(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
    struct refs r;
    refs_open(fx, 2, 0, &r);
    enum { N_UP = 3 };
    const void *src[N_UP] = {fx->csv, fx->samples, fx->csv};
    size_t len[N_UP] = {fx->csv_len, r.f32_len, fx->csv_len};
    const struct ecg_read_opts *opts[N_UP] = {&r.csv, &r.f32, &r.csv};
    const struct ecg_result *ref[N_UP] = {r.ref_csv, r.ref_f32, r.ref_csv};
    char *host[N_UP];
    struct ecg_upload *up[N_UP];
    size_t filled[N_UP] = {0};
    for (int i = 0; i < N_UP; i++) {
        host[i] = ecg_engine_host_alloc(r.engine, len[i]);
        assert_non_null(host[i]);
        up[i] = ecg_engine_upload_begin(r.engine, host[i], len[i], opts[i]->format);
        assert_non_null(up[i]);
    }
    for (size_t s = 0;; s++) {
        bool more = false;
        for (int i = 0; i < N_UP; i++) {
            size_t step = arrival_steps[(s + (size_t)i) %
                                        (sizeof arrival_steps / sizeof arrival_steps[0])];
            if (step > len[i] - filled[i])
                step = len[i] - filled[i];
            memcpy(host[i] + filled[i], (const char *)src[i] + filled[i], step);
            filled[i] += step;
            ecg_upload_progress(up[i], filled[i]);
            more = more || filled[i] < len[i];
        }
        if (!more)
            break;
    }
    for (int i = N_UP - 1; i >= 0; i--) {
        struct ecg_error err = {0};
        struct ecg_result *result = NULL;
        if (ecg_engine_analyze_upload(r.engine, up[i], len[i], opts[i], &result, &err) != ECG_OK)
            fail_msg("upload %d: %s", i, err.message);
        assert_true(ecg_upload_used_device(up[i]));
        assert_same_result(ref[i], result, "several at once");
        ecg_result_free(result);
    }
    for (int i = 0; i < N_UP; i++) {
        ecg_upload_free(up[i]);
        ecg_engine_host_free(r.engine, host[i]);
    }
    refs_close(&r);
}

/* Four threads, each streaming and analysing bodies on an engine of two workers (every visible
 * device): the workers and the device's upload stream are contended. */
struct thread_arg {
    struct ecg_engine *engine;
    const struct fixture *fx;
    const struct ecg_result *ref_csv, *ref_f32;
    int index;
    int used_device;
    char failure[ECG_ERROR_MSG_LEN + 64];
};

static void *upload_thread(void *p)
{
    struct thread_arg *t = p;
    const struct fixture *fx = t->fx;
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    for (int round = 0; round < 3 && !t->failure[0]; round++) {
        bool is_csv = (round + t->index) % 2 == 0;
        const void *src = is_csv ? (const void *)fx->csv : (const void *)fx->samples;
        size_t len = is_csv ? fx->csv_len : fx->n * sizeof(float);
        const struct ecg_read_opts *opts = is_csv ? &csv : &f32;
        char *host = ecg_engine_host_alloc(t->engine, len);
        if (!host) {
            snprintf(t->failure, sizeof t->failure, "host_alloc");
            break;
        }
        struct ecg_upload *up = ecg_engine_upload_begin(t->engine, host, len, opts->format);
        if (!up) {
            snprintf(t->failure, sizeof t->failure, "round %d: upload_begin refused", round);
        } else {
            arrive(up, host, src, len, (size_t)t->index);
            struct ecg_error err = {0};
            struct ecg_result *result = NULL;
            char why[128];
            if (ecg_engine_analyze_upload(t->engine, up, len, opts, &result, &err) != ECG_OK)
                snprintf(t->failure, sizeof t->failure, "round %d: %s", round, err.message);
            else if (!same_result(is_csv ? t->ref_csv : t->ref_f32, result, why, sizeof why))
                snprintf(t->failure, sizeof t->failure, "round %d (%s): %s", round,
                         is_csv ? "csv" : "f32", why);
            t->used_device += ecg_upload_used_device(up);
            ecg_result_free(result);
        }
        ecg_upload_free(up);
        ecg_engine_host_free(t->engine, host);
    }
    return NULL;
}

void test_upload_threads(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
    struct ecg_engine *engine = engine_open(fx, 2, -1);
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = fx->fs_hz};
    struct ecg_result *ref_csv =
        analyze_reference(engine, fx->tiles, fx->csv, fx->csv_len, &csv);
    struct ecg_result *ref_f32 =
        analyze_reference(engine, fx->tiles, fx->samples, fx->n * sizeof(float), &f32);
    enum { N_THREADS = 4 };
    struct thread_arg args[N_THREADS];
    pthread_t threads[N_THREADS];
    int used = 0;
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (struct thread_arg){.engine = engine, .fx = fx, .ref_csv = ref_csv,
                                      .ref_f32 = ref_f32, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, upload_thread, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        if (args[i].failure[0])
            fail_msg("thread %d: %s", i, args[i].failure);
        used += args[i].used_device;
    }
    /* on one device every analysis finds a context there; on several, one on another device
     * reads the host bytes (same answer), so only count */
    printf("# %d of %d threaded analyses read the device copy\n", used, 3 * N_THREADS);
    assert_true(used > 0);
    ecg_result_free(ref_csv);
    ecg_result_free(ref_f32);
    ecg_engine_destroy(engine);
}

/* Device memory: an upload holds its body's size until its analysis loads, then gives it back
 * (the peak of a streamed analysis is at most the body above a host-bytes one); twenty uploads
 * leave nothing behind. */
void test_upload_memory(void **state)
{
    struct fixture *fx = fixture_or_skip(state);
    skip_if_quick();
#ifdef ECG_HAVE_CUDA
    struct ecg_engine *engine = engine_open(fx, 1, 0);
    struct ecg_read_opts csv = {.format = ECG_FORMAT_CSV, .fs_hz = fx->fs_hz};
    struct ecg_error err = {0};
    size_t len = fx->csv_len, now = 0, peak = 0, reserved = 0, after_first = 0;
    struct ecg_result *ref = analyze_reference(engine, fx->tiles, fx->csv, len, &csv);
    char *host = ecg_engine_host_alloc(engine, len);
    assert_non_null(host);
    memcpy(host, fx->csv, len);

    /* the context's buffers are warm: what a host-bytes analysis holds at most (a warm one may
     * allocate nothing, so the peak since the reset may read 0: take what is in use too) */
    struct ecg_result *result = NULL;
    cuda_memory_reset_peak();
    if (ecg_engine_analyze_bytes(engine, host, len, &csv, &result, &err) != ECG_OK)
        fail_msg("analyze_bytes: %s", err.message);
    ecg_result_free(result);
    cuda_memory_stats(&now, &peak, &reserved);
    size_t peak_bytes = peak > now ? peak : now;

    for (int round = 0; round < 20; round++) {
        result = NULL;
        if (round == 0)
            cuda_memory_reset_peak();
        struct ecg_upload *up = ecg_engine_upload_begin(engine, host, len, ECG_FORMAT_CSV);
        assert_non_null(up);
        ecg_upload_progress(up, len);
        if (ecg_engine_analyze_upload(engine, up, len, &csv, &result, &err) != ECG_OK)
            fail_msg("round %d: %s", round, err.message);
        assert_true(ecg_upload_used_device(up));
        assert_same_result(ref, result, "memory rounds");
        ecg_result_free(result);
        ecg_upload_free(up);
        if (round == 0) {
            cuda_memory_stats(&now, &peak, &reserved);
            printf("# device memory peak: host bytes %.1f MiB, streamed %.1f MiB (body %.1f "
                   "MiB)\n", (double)peak_bytes / MIB, (double)peak / MIB, (double)len / MIB);
            assert_true(peak <= peak_bytes + len + 16 * MIB);
            /* a new analysis's buffers from the last upload's round are in use from here */
            after_first = now;
        }
    }
    cuda_memory_stats(&now, &peak, &reserved);
    printf("# device memory in use: after 1 upload %.1f MiB, after 20 %.1f MiB\n",
           (double)after_first / MIB, (double)now / MIB);
    /* at most the last upload's free may still be pending in stream order */
    assert_true(now <= after_first + len + MIB);
    ecg_engine_host_free(engine, host);
    ecg_result_free(ref);
    ecg_engine_destroy(engine);
#else
    (void)fx;
    printf("# SKIP: memory statistics need a CUDA build\n");
    skip();
#endif
}
