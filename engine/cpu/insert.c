/*
 * insert.c - the rhythm check after the decision (CPU reference; insert_core.h has the method,
 * shared with the CUDA twin gpu/cuda_insert.cu). Thread-safe.
 */
#include <stdlib.h>

#include "cpu.h"
#include "insert_core.h"

enum ecg_status cpu_reject_insertions(const struct cpu_candidate *cand, size_t n_cand,
                                      uint8_t *is_beat, struct ecg_error *err)
{
    size_t n = 0;
    for (size_t k = 0; k < n_cand; k++)
        n += is_beat[k];
    if (n < 3)
        return ECG_OK;
    int64_t *pos = malloc(n * sizeof *pos);
    float *height = malloc(n * sizeof *height);
    size_t *index = malloc(n * sizeof *index);
    if (!pos || !height || !index) {
        free(pos);
        free(height);
        free(index);
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "detect: %zu beats", n);
    }
    for (size_t k = 0, b = 0; k < n_cand; k++) {
        if (is_beat[k]) {
            pos[b] = cand[k].pos;
            height[b] = cand[k].height;
            index[b++] = k;
        }
    }
    /* every verdict from the decision's beats, then all applied */
    for (size_t b = 0; b < n; b++)
        if (insert_is_artefact(pos, height, n, b))
            is_beat[index[b]] = 2;
    for (size_t b = 0; b < n; b++)
        if (is_beat[index[b]] == 2)
            is_beat[index[b]] = 0;
    free(pos);
    free(height);
    free(index);
    return ECG_OK;
}
