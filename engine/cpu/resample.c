/*
 * resample.c - polyphase rational resampler (CPU reference): fs_in -> fs_a = fs_in * up / down.
 *
 * Definition (plan.h): y[j] = sum_k fir[k] * xup[j * down - k + fir_delay], xup being x
 * upsampled by `up` with zeros. With m = j * down + fir_delay, p = m mod up and i = m div up,
 * only the taps k = p + up * t meet a non-zero of xup, so
 *     y[j] = sum_t fir[p + up * t] * x[i - t],
 * a short dot product (about fir_len / up taps) against the branch p of the filter. The branches
 * are laid out once per call as a table of `up` rows of `width` floats, each row reversed and
 * zero-padded at the front to a multiple of 8, so that every output is one contiguous dot
 * product of a row with x[i - width + 1 .. i]: O(n_out * fir_len / up), vectorised with AVX2/FMA
 * when the CPU has it (chosen at run time; the build targets x86-64-v2).
 *
 * Edges: samples before the start hold the first value and samples past the end hold the last
 * one (x[-1] = x[0], x[n] = x[n - 1]). Holding keeps a baseline offset from turning into a step
 * at each end, which the Ricker filter would otherwise answer like a QRS. The CUDA backend must
 * use the same rule.
 *
 * Threading: no state outside the call; thread-safe. One allocation per call (the table).
 */
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RESAMPLE_X86 1
#endif

#include "cpu.h"

#define LANES 8 /* table rows are padded to a multiple of this */

/* The loop state of the resampler: branch p and input index i of the current output. */
struct polyphase {
    const float *table; /* up rows x width */
    size_t width;
    uint32_t up;
    size_t step_i;      /* down / up */
    uint32_t step_p;    /* down % up */
};

static float dot_portable(const float *h, const float *x, size_t len)
{
    /* LANES independent partial sums, which the compiler keeps in vector registers (one float
     * sum could not be vectorised without licence to reassociate it). */
    float acc[LANES] = {0};
    for (size_t k = 0; k < len; k += LANES)
        for (size_t l = 0; l < LANES; l++)
            acc[l] += h[k + l] * x[k + l];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Outputs [j0, j1) whose whole support lies inside x; p, i are the state at j0. */
static void run_portable(const struct polyphase *pp, const float *x, size_t j0, size_t j1,
                         uint32_t p, size_t i, float *y)
{
    for (size_t j = j0; j < j1; j++) {
        y[j] = dot_portable(pp->table + (size_t)p * pp->width, x + i + 1 - pp->width, pp->width);
        i += pp->step_i;
        p += pp->step_p;
        if (p >= pp->up) {
            p -= pp->up;
            i++;
        }
    }
}

#ifdef RESAMPLE_X86
__attribute__((target("avx2,fma"))) static void run_avx2(const struct polyphase *pp,
                                                         const float *x, size_t j0, size_t j1,
                                                         uint32_t p, size_t i, float *y)
{
    const size_t width = pp->width;
    for (size_t j = j0; j < j1; j++) {
        const float *h = pp->table + (size_t)p * width;
        const float *xs = x + i + 1 - width;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        size_t k = 0;
        for (; k + 2 * LANES <= width; k += 2 * LANES) {
            acc0 = _mm256_fmadd_ps(_mm256_load_ps(h + k), _mm256_loadu_ps(xs + k), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_load_ps(h + k + LANES),
                                   _mm256_loadu_ps(xs + k + LANES), acc1);
        }
        if (k < width)
            acc0 = _mm256_fmadd_ps(_mm256_load_ps(h + k), _mm256_loadu_ps(xs + k), acc0);
        acc0 = _mm256_add_ps(acc0, acc1);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        y[j] = _mm_cvtss_f32(s);
        i += pp->step_i;
        p += pp->step_p;
        if (p >= pp->up) {
            p -= pp->up;
            i++;
        }
    }
}

static bool have_avx2_fma(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* One output near an edge: same dot product with the input index clamped (edge hold). */
static float edge_output(const struct polyphase *pp, const float *x, size_t n, uint32_t p,
                         size_t i)
{
    const float *h = pp->table + (size_t)p * pp->width;
    double acc = 0.0;
    for (size_t s = 0; s < pp->width; s++) {
        /* input index i + 1 - width + s, clamped to [0, n - 1] */
        size_t idx = i + 1 + s < pp->width ? 0 : i + 1 + s - pp->width;
        if (idx > n - 1)
            idx = n - 1;
        acc += (double)h[s] * (double)x[idx];
    }
    return (float)acc;
}

enum ecg_status cpu_resample(const struct ecg_plan *plan, const float *x, size_t n, float *y,
                             struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    float *table = NULL;
    if (!plan || (n > 0 && (!x || !y)))
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "cpu_resample: NULL argument");
    if (n == 0)
        return ECG_OK;
    if (plan->up == 1 && plan->down == 1) {
        memcpy(y, x, n * sizeof *y);
        return ECG_OK;
    }
    if (!plan->fir || plan->fir_len == 0 || plan->up == 0 || plan->down == 0)
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "cpu_resample: plan has no filter");

    const uint32_t up = plan->up;
    const size_t branch_len = (plan->fir_len + up - 1) / up;
    const size_t width = (branch_len + LANES - 1) / LANES * LANES;
    table = aligned_alloc(32, (size_t)up * width * sizeof *table);
    if (!table) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory",
                          "cpu_resample: polyphase table of %u x %zu taps", up, width);
        goto out;
    }
    for (uint32_t p = 0; p < up; p++) {
        for (size_t s = 0; s < width; s++) {
            size_t k = p + (size_t)up * (width - 1 - s);
            table[(size_t)p * width + s] = k < plan->fir_len ? plan->fir[k] : 0.0f;
        }
    }
    const struct polyphase pp = {
        .table = table,
        .width = width,
        .up = up,
        .step_i = plan->down / up,
        .step_p = plan->down % up,
    };

    /* Outputs j whose support [i - width + 1, i] lies inside [0, n - 1] form one run
     * [j_lo, j_hi): i = (j * down + fir_delay) / up is non-decreasing in j. */
    const size_t n_out = ecg_plan_resampled_len(plan, n);
    size_t j = 0, i = plan->fir_delay / up;
    uint32_t p = (uint32_t)(plan->fir_delay % up);
    while (j < n_out && i + 1 < width) {
        y[j] = edge_output(&pp, x, n, p, i);
        j++;
        i += pp.step_i;
        p += pp.step_p;
        if (p >= up) {
            p -= up;
            i++;
        }
    }
    /* j_hi = the first j whose i passes n - 1: i(j) <= n - 1 <=> j * down + fir_delay < n * up */
    size_t j_hi = 0;
    if ((uint64_t)n * up > plan->fir_delay)
        j_hi = (size_t)(((uint64_t)n * up - plan->fir_delay - 1) / plan->down) + 1;
    if (j_hi > n_out)
        j_hi = n_out;
    if (j_hi > j) {
#ifdef RESAMPLE_X86
        if (have_avx2_fma())
            run_avx2(&pp, x, j, j_hi, p, i, y);
        else
            run_portable(&pp, x, j, j_hi, p, i, y);
#else
        run_portable(&pp, x, j, j_hi, p, i, y);
#endif
        uint64_t m = (uint64_t)j_hi * plan->down + plan->fir_delay;
        i = (size_t)(m / up);
        p = (uint32_t)(m % up);
        j = j_hi;
    }
    for (; j < n_out; j++) {
        y[j] = edge_output(&pp, x, n, p, i);
        i += pp.step_i;
        p += pp.step_p;
        if (p >= up) {
            p -= up;
            i++;
        }
    }
out:
    free(table);
    return status;
}
