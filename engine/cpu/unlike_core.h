/*
 * unlike_core.h - the decision pass's shape test, beside noise_core.h's steps: in a window
 * where noise has raised the threshold, a candidate that is not stronger than the usual beat
 * must look like a QRS complex of this recording, or it counts as noise. Shared by the CPU
 * reference (engine/cpu/decide.c) and its CUDA twin (gpu/cuda_decide.cu), written once so that
 * both compute the same bits (likeness_core.h's sums, in the same order, without contraction).
 *
 * A shape is likeness_core.h's: the QRS-band difference d[t] = y[t] - y[t - lag] over
 * [c - pre, c + post] of the analysis grid, on every lead detection reads. Two candidates are
 * alike when, on some lead and at some shift of the second by at most DETECT_UNLIKE_SHIFT_S,
 * the absolute Pearson correlation of their shapes reaches DETECT_UNLIKE_MIN. The absolute
 * value: a ventricular beat whose complex points the other way than the sinus beats' still
 * has a QRS complex's shape; the shift: the envelope's peak, which a candidate's position is,
 * sits a few milliseconds differently on complexes of different widths.
 *
 * Why it holds beyond the records it was measured on: heart beats repeat the complexes of
 * their rhythm (a run of ventricular tachycardia is like its own previous beat, a bigeminy's
 * premature beat like the next one); what electrode motion and muscle noise leave in the QRS
 * band does not repeat the patient's complex. The candidates it is compared with are the
 * rhythm's own: the last beats taken in clean windows (crest factor at least
 * DETECT_CLEAN_CREST, where a beat is a beat; from before the decision's block too, decide.c's
 * references prelude), the last beat taken, and the next candidate at least half as high (the
 * second beat of a run that starts with an unfamiliar shape).
 */
#ifndef ECG_UNLIKE_CORE_H
#define ECG_UNLIKE_CORE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "detect_params.h"
#include "likeness_core.h"

/* The shape's extent (likeness_geometry_of at the analysis rate), the largest shift and how far
 * after a candidate the next one is looked for, in analysis samples (DETECT_UNLIKE_SHIFT_S and
 * DETECT_UNLIKE_NEXT_S, rounded): taken once per recording, on the host. */
struct unlike_geometry {
    struct likeness_geometry g;
    int64_t shift, next;
};

static inline struct unlike_geometry unlike_geometry_of(double fs_a_hz)
{
    struct unlike_geometry u;
    u.g = likeness_geometry_of(fs_a_hz);
    u.shift = (int64_t)detect_samples_of(DETECT_UNLIKE_SHIFT_S, fs_a_hz);
    u.next = (int64_t)detect_samples_of(DETECT_UNLIKE_NEXT_S, fs_a_hz);
    return u;
}

/* Whether the shapes at a and b are alike on one lead's analysis-grid signal y of n samples (the
 * file comment): true where a's shape does not fit the recording (no test there), false where
 * no shift of b's does (b vouches for nothing). Stops at the first correlation that suffices.
 * The callers ask each lead in turn, lead 0 first. */
LIKENESS_FN bool unlike_alike(const float *y, int64_t n, struct unlike_geometry u, int64_t a,
                              int64_t b)
{
    if (!likeness_fits(a, n, u.g))
        return true;
    for (int64_t sh = -u.shift; sh <= u.shift; sh++) {
        if (!likeness_fits(b + sh, n, u.g))
            continue;
        if (fabs(likeness_pair(y, a, b + sh, u.g)) >= DETECT_UNLIKE_MIN)
            return true;
    }
    return false;
}

#endif /* ECG_UNLIKE_CORE_H */
