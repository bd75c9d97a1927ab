/*
 * detect_params.h - the R-peak detector's constants, shared by the CPU reference
 * (engine/cpu/detect.c) and its CUDA twin (gpu/cuda_detect.cu), which must decide identically.
 *
 * Durations are in seconds and are turned into analysis-grid samples with round(s * fs_a), at
 * least 1 (detect_samples_of). Included from C and from CUDA C++.
 */
#ifndef ECG_DETECT_PARAMS_H
#define ECG_DETECT_PARAMS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define DETECT_ENVELOPE_S 0.10       /* envelope window */
#define DETECT_FLAT_EXP (-16)        /* responses <= 2^-16 of |y[0]|: rounding, a flat envelope */
#define DETECT_MIN_PROMINENCE 0.05   /* a peak rises at least 5 % above its valleys */
#define DETECT_LEARN_S 4.0           /* initial SPK/NPK from this much signal */
#define DETECT_LEARN_TOP 3           /* SPK from the median of the largest 3 candidates */
#define DETECT_LEVEL_GAIN 0.125      /* weight of a new peak in SPK or NPK */
#define DETECT_SEARCHBACK_GAIN 0.25  /* weight of a beat found by search-back in SPK */
#define DETECT_THRESHOLD 0.25        /* threshold = NPK + 0.25 (SPK - NPK) */
#define DETECT_SEARCHBACK_RR 1.66    /* search back after 1.66 mean RR without a beat */
#define DETECT_SEARCHBACK_RR_CLEAN 1.5 /* ... after 1.5 where the envelope's crest factor ... */
#define DETECT_CLEAN_CREST 6.0f      /* ... is at least this (a clean QRS train) */
#define DETECT_SEARCHBACK_TH 0.5     /* search-back threshold, fraction of the threshold */
#ifndef DETECT_SEARCHBACK_MIN
#define DETECT_SEARCHBACK_MIN 0.2    /* ... and above this fraction of the beats' usual height */
#endif
#ifndef DETECT_SEARCHBACK_FAR_RR
#define DETECT_SEARCHBACK_FAR_RR 1.3 /* past this many mean RR after the last beat (a pause) ... */
#endif
#ifndef DETECT_SEARCHBACK_BEAT_RR
#define DETECT_SEARCHBACK_BEAT_RR 0.1 /* ... further than this from a whole number of them ... */
#endif
#ifndef DETECT_SEARCHBACK_FAR_MIN
#define DETECT_SEARCHBACK_FAR_MIN 0.4 /* ... search-back takes only this share of the usual height */
#endif
#ifndef DETECT_SEARCHBACK_PLACE_RR
#define DETECT_SEARCHBACK_PLACE_RR 0.3 /* further than this from a whole number of mean RR ... */
#endif
#ifndef DETECT_SEARCHBACK_ODD_SLOPE
#define DETECT_SEARCHBACK_ODD_SLOPE 2.0 /* ... search-back takes no candidate this much steeper,
                                        * for its height, than the beats */
#endif
/* the shape test (unlike_core.h): where noise raised the threshold, a candidate under
 * DETECT_UNLIKE_HEIGHT of the beats' usual height must be like one of the last
 * DETECT_UNLIKE_REFS beats taken in clean windows, the last beat, or the next candidate at least
 * DETECT_UNLIKE_NEXT_HEIGHT of its height within DETECT_UNLIKE_NEXT_S */
#ifndef DETECT_UNLIKE_MIN
#define DETECT_UNLIKE_MIN 0.55       /* alike: |correlation| of the shapes at least this */
#endif
#define DETECT_UNLIKE_SHIFT_S 0.012  /* ... at a shift of at most this */
#ifndef DETECT_UNLIKE_HEIGHT
#define DETECT_UNLIKE_HEIGHT 1.0
#endif
#define DETECT_UNLIKE_REFS 4         /* (the test waits for two of them) */
#define DETECT_UNLIKE_NEXT_S 2.0
#define DETECT_UNLIKE_NEXT_HEIGHT 0.5
#define DETECT_RR_COUNT 8            /* RR intervals in the running mean */
#define DETECT_DECAY_RR 3.0          /* fruitless search-back: halve SPK once per 3 mean RR */
#define DETECT_TWAVE_S 0.36          /* a candidate closer than this may be a T wave */
#define DETECT_TWAVE_SLOPE 0.5       /* ... if its slope is under half the last beat's */
#define DETECT_SLOPE_S 0.06          /* slope measured within +-60 ms of a candidate */
#define DETECT_REFINE_S 0.075        /* R-peak search, +-75 ms around the mapped candidate */
#define DETECT_BASELINE_S 0.3        /* local baseline: median of x over +-300 ms */
#define DETECT_BASELINE_POINTS 16    /* ... sampled at about 16 points */
#define DETECT_POLARITY_SWITCH 3.0   /* opposite deflection this much larger flips polarity */

#if defined(__CUDACC__)
#define DETECT_FN static inline __host__ __device__
#else
#define DETECT_FN static inline
#endif

/*
 * How many of the largest candidates of the learning period SPK is learnt from when the
 * recording leaves only span samples of it (learn: DETECT_LEARN_S in samples): the
 * DETECT_LEARN_TOP of a full period scaled to the span, round(DETECT_LEARN_TOP span / learn),
 * at least 1. The period is long enough for DETECT_LEARN_TOP beats at any rate the detector
 * takes; a 1-s strip holds one or two, and the median of its three largest candidates would
 * be a T or P wave, which set the threshold under every wave of the strip.
 */
DETECT_FN size_t detect_learn_top(int64_t span, int64_t learn)
{
    if (span >= learn)
        return DETECT_LEARN_TOP;
    const int64_t top = (2 * DETECT_LEARN_TOP * (span > 0 ? span : 0) + learn) / (2 * learn);
    return top < 1 ? 1 : (size_t)top;
}

/* round(seconds * fs) as a sample count, at least 1. */
static inline size_t detect_samples_of(double seconds, double fs_hz)
{
    double v = round(seconds * fs_hz);
    return v < 1.0 ? 1 : (size_t)v;
}

#endif /* ECG_DETECT_PARAMS_H */
