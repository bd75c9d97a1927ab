/*
 * params.c - the default preprocessing parameters.
 *
 * They follow the original pipeline (Ricker 30 samples wide with a = 4 at 250 Hz, beats kept
 * between 100 and 256 samples, zero-padded to 256) expressed in seconds, so that they carry over
 * to any sampling rate. A model records the values it was trained with.
 *
 * Detection departs from the original on purpose. The original took the maxima of the Ricker
 * response in a 180-sample (0.72 s) window as beats, which cannot see two beats closer than
 * 0.36 s (tachycardia, bigeminy, premature beats). Here the NMS window of 0.4 s only proposes
 * candidates (at least 0.2 s apart, i.e. up to 300 bpm), and the adaptive logic of
 * engine/cpu/detect.c (thresholds, a 0.2 s refractory period, T-wave rejection, search-back)
 * decides which are beats. pre_r = 0.25 s puts the P wave inside the beat (onset to the next
 * beat's onset: P-QRS-T).
 *
 * Beats are kept up to 2.0 s long, not 1.024 s as in the original: its gate dropped every beat
 * followed by a long RR interval, i.e. most premature ventricular beats (compensatory pause) and
 * every beat below 59 bpm. A kept beat longer than beat_len samples is embedded as its first
 * beat_len samples (onset + 1.024 s covers P-QRS-T). models/README.md has the effect on scores.
 */
#include "ecg.h"

struct ecg_params ecg_params_default(void)
{
    struct ecg_params params = {
        .analysis_fs_hz = 250.0,
        .ricker_points_s = 30.0 / 250.0,
        .ricker_sigma_s = 4.0 / 250.0,
        .nms_window_s = 0.4,           /* candidates; the original used 180 / 250.0 */
        .refractory_s = 0.2,
        .pre_r_s = 0.25,
        .beat_min_s = 100.0 / 250.0,
        .beat_max_s = 2.0,             /* the original: 256 / 250.0; see above */
        .beat_len = 256,
        .normalisation = ECG_NORM_MEDIAN_MAD,
    };
    return params;
}
