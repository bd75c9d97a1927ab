/*
 * test_gpu_batch.c - the CUDA backend's dynamic batches (gpu/cuda_batch.cu) against each
 * analysis alone on the same device: tests/batch_parity.h's 64 concurrent requests of mixed
 * lengths, rates and formats, with the shipped model, batched by up to 64 within 2 ms, must
 * give the answers of the unbatched engine (ECG_CUDA_BATCH unset, --max-batch 1) byte for
 * byte. Skips, visibly, where there is no device.
 *
 * ECG_BATCH_TEST_MODEL may name another model file (compute-sanitizer runs use the same one).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ecg.h"
#include "batch_parity.h"

static struct ecg_engine *cuda_engine(struct ecg_model *model, unsigned max_batch,
                                      unsigned window_us)
{
    struct ecg_error err = {0};
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = model, .workers = 4,
                                       .device = -1, .max_batch = max_batch,
                                       .batch_window_us = window_us};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    if (!engine)
        printf("# no CUDA engine: %s\n", err.message);
    return engine;
}

static void test_cuda_batches_match_lone_answers(void **state)
{
    struct ecg_error err = {0};
    const char *path = getenv("ECG_BATCH_TEST_MODEL");
    struct ecg_model *model = ecg_model_load(path && *path ? path : "models/default.ecgm", &err);
    if (!model)
        fail_msg("model: %s", err.message);
    unsetenv("ECG_CUDA_BATCH");
    struct ecg_engine *alone = cuda_engine(model, 1, 0);
    if (!alone) {
        ecg_model_free(model);
        skip();
    }
    struct ecg_engine *batched = cuda_engine(model, 64, 2000);
    assert_non_null(batched);
    unsigned largest = parity_check(alone, batched);
    assert_true(largest >= 2 && largest <= 64);
    /* and once more on the same engine: contexts and pinned memory reused across batches */
    largest = parity_check(alone, batched);
    assert_true(largest >= 2);
    ecg_engine_destroy(batched);
    ecg_engine_destroy(alone);
    ecg_model_free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_batches_match_lone_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
