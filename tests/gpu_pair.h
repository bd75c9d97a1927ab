/*
 * gpu_pair.h - the fixture the CPU/CUDA comparison tests share (tests/gpu/test_gpu_parity.c and
 * test_gpu_quality.c): both backends opened with the same configuration, one context each, and
 * the visible skip where there is no device.
 *
 * Include after <cmocka.h> and "backend.h". Everything here is static to each test program.
 */
#ifndef GPU_PAIR_H
#define GPU_PAIR_H

#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "ecg.h"

struct pair {
    const struct ecg_backend_ops *cpu, *gpu;
    void *cpu_state, *gpu_state;
    void *cpu_ctx, *gpu_ctx;
    struct ecg_model *model; /* owned; may be NULL */
};

/* Opens both backends on model (ownership passes to the pair, also on failure). Returns NULL,
 * after saying why, where the build has no CUDA backend or the machine no device. */
static inline struct pair *pair_open(struct ecg_model *model)
{
    const struct ecg_backend_ops *gpu = ecg_cuda_backend_ops();
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = model, .device = -1};
    struct ecg_error err = {0};
    void *gpu_state = NULL;
    if (!gpu || gpu->open(&config, &gpu_state, &err) != ECG_OK) {
        printf("# no CUDA device: %s\n", gpu ? err.message : "this build has no CUDA backend");
        ecg_model_free(model);
        return NULL;
    }
    struct pair *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->model = model;
    p->cpu = &ecg_cpu_backend;
    p->gpu = gpu;
    p->gpu_state = gpu_state;
    assert_int_equal(p->cpu->open(&config, &p->cpu_state, &err), ECG_OK);
    assert_int_equal(p->cpu->ctx_create(p->cpu_state, &p->cpu_ctx, &err), ECG_OK);
    assert_int_equal(p->gpu->ctx_create(p->gpu_state, &p->gpu_ctx, &err), ECG_OK);
    printf("# device: %s\n", p->gpu->device(p->gpu_state));
    return p;
}

/* A cmocka group teardown for a pair in *state (NULL: nothing to do). */
static inline int pair_teardown(void **state)
{
    struct pair *p = *state;
    if (!p)
        return 0;
    p->cpu->ctx_destroy(p->cpu_ctx);
    p->gpu->ctx_destroy(p->gpu_ctx);
    p->cpu->close(p->cpu_state);
    p->gpu->close(p->gpu_state);
    ecg_model_free(p->model);
    free(p);
    return 0;
}

#define NEED_DEVICE(state)                                                                    \
    do {                                                                                      \
        if (!*(state)) {                                                                      \
            printf("# SKIP: no CUDA device on this machine\n");                               \
            skip();                                                                           \
        }                                                                                     \
    } while (0)

#endif /* GPU_PAIR_H */
