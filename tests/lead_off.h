/*
 * lead_off.h - electrodes off, the way a monitor records it: every lead held at its last value
 * for LEAD_OFF_LEN_S, from LEAD_OFF_START_S and every LEAD_OFF_EVERY_S after (starts and
 * lengths off the quality verdict's 1-s windows, as real ones are). Shared by
 * tests/unit/test_robust.c (the beats and the verdict) and tests/gpu/test_gpu_leads.c (the
 * same beats on both backends).
 */
#ifndef ECG_TEST_LEAD_OFF_H
#define ECG_TEST_LEAD_OFF_H

#include <math.h>

#include "ecg.h"

#define LEAD_OFF_START_S 100.37
#define LEAD_OFF_EVERY_S 300.0
#define LEAD_OFF_LEN_S 20.5

/* Holds every lead of sig at its value at the stretch's start, over each stretch. */
static inline void lead_off_stretches(struct ecg_signal *sig)
{
    for (double t = LEAD_OFF_START_S; (t + LEAD_OFF_LEN_S) * sig->fs_hz < (double)sig->n;
         t += LEAD_OFF_EVERY_S) {
        size_t a = (size_t)(t * sig->fs_hz), b = (size_t)((t + LEAD_OFF_LEN_S) * sig->fs_hz);
        for (size_t l = 0; l <= sig->n_extra; l++) {
            float *x = l ? sig->extra[l - 1] : sig->samples;
            for (size_t i = a + 1; i < b; i++)
                x[i] = x[a];
        }
    }
}

/* How far sample i lies inside a stretch (s, to its nearer edge), or -1 outside them. */
static inline double lead_off_depth(int64_t i, double fs_hz)
{
    double t = (double)i / fs_hz - LEAD_OFF_START_S;
    if (t < 0)
        return -1.0;
    double into = fmod(t, LEAD_OFF_EVERY_S);
    return into < LEAD_OFF_LEN_S ? fmin(into, LEAD_OFF_LEN_S - into) : -1.0;
}

#endif /* ECG_TEST_LEAD_OFF_H */
