/*
 * params.c - the default preprocessing parameters.
 *
 * They follow the original pipeline (Ricker 30 samples wide and NMS window 180 samples at
 * 250 Hz, beats kept between 100 and 256 samples, zero-padded to 256) expressed in seconds, so
 * that they carry over to any sampling rate. A model records the values it was trained with.
 */
#include "ecg.h"

struct ecg_params ecg_params_default(void)
{
    struct ecg_params params = {
        .analysis_fs_hz = 250.0,
        .ricker_points_s = 30.0 / 250.0,
        .ricker_sigma_s = 4.0 / 250.0,
        .nms_window_s = 0.4,
        .refractory_s = 0.2,
        .pre_r_s = 0.25,
        .beat_min_s = 100.0 / 250.0,
        .beat_max_s = 256.0 / 250.0,
        .beat_len = 256,
        .normalisation = ECG_NORM_MEDIAN_MAD,
    };
    return params;
}
