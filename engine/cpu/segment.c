/*
 * segment.c - segmentation of the detected beats and their normalised, zero-padded embedding
 * (CPU reference).
 *
 * Beat boundaries are decided in the analysis grid, where the embedding reads them, and mapped
 * to the input grid for the result:
 *   onset_a[i] = max(R_a[i] - pre_r, R_a[i-1] + ceil((R_a[i] - R_a[i-1]) / 2), 0)
 * i.e. pre_r samples before the R peak, but never before the midpoint to the previous R peak (a
 * beat closer than pre_r to its predecessor would otherwise start before the predecessor's own
 * R peak), and never before the first sample. Beat i ends (exclusive) where beat i+1 begins; the
 * last beat ends at onset + beat_max or the end of the recording, whichever comes first (and
 * always after its R peak). A beat is kept when its analysis-grid length end - onset lies within
 * [beat_min, beat_max].
 *
 * (A pre_r of 0 counts as 1, so that the onset always precedes the R peak.)
 *
 * Both functions need peaks that increase by at least 2 samples in both grids and none at
 * sample 0, which cpu_detect() guarantees.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "select.h"

/* Onset of beat i in the analysis grid (see the file comment). */
static int64_t onset_a_of(const struct ecg_plan *plan, const int64_t *peaks_a, size_t i)
{
    int64_t pre_r = plan->pre_r > 0 ? (int64_t)plan->pre_r : 1; /* onset before R */
    int64_t onset = peaks_a[i] - pre_r;
    if (i > 0) {
        int64_t gap = peaks_a[i] - peaks_a[i - 1];
        int64_t floor_onset = peaks_a[i - 1] + (gap + 1) / 2;
        if (onset < floor_onset)
            onset = floor_onset;
    }
    return onset < 0 ? 0 : onset;
}

/* End (exclusive) of beat i in the analysis grid. */
static int64_t end_a_of(const struct ecg_plan *plan, const int64_t *peaks_a, size_t k, size_t n_a,
                        size_t i, int64_t onset)
{
    if (i + 1 < k)
        return onset_a_of(plan, peaks_a, i + 1);
    int64_t end = onset + (int64_t)plan->beat_max;
    if (end > (int64_t)n_a)
        end = (int64_t)n_a;
    if (end <= peaks_a[i])
        end = peaks_a[i] + 1;
    return end;
}

static bool length_kept(const struct ecg_plan *plan, int64_t length)
{
    return length >= (int64_t)plan->beat_min && length <= (int64_t)plan->beat_max;
}

/*
 * Input-grid boundaries are the analysis-grid ones mapped with ecg_plan_to_input(), then held
 * strictly between the neighbouring input-grid R peaks (rounding between grids must not move an
 * onset onto or past an R peak), so onset[i] < r[i] < end[i] and end[i] == onset[i + 1].
 */
void cpu_segment(const struct ecg_plan *plan, const int64_t *peaks_a, const int64_t *peaks_in,
                 size_t k, size_t n_a, size_t n_in, int64_t *onset, int64_t *end, float *rr_ms,
                 uint8_t *kept)
{
    int64_t onset_a = k ? onset_a_of(plan, peaks_a, 0) : 0;
    int64_t onset_in = 0;
    for (size_t i = 0; i < k; i++) {
        int64_t end_a = end_a_of(plan, peaks_a, k, n_a, i, onset_a);
        if (i == 0) {
            onset_in = onset_a == 0 ? 0 : ecg_plan_to_input(plan, onset_a);
            if (onset_in >= peaks_in[0])
                onset_in = peaks_in[0] - 1;
            if (onset_in < 0)
                onset_in = 0;
        }
        int64_t end_in = ecg_plan_to_input(plan, end_a);
        if (i + 1 < k) {
            if (end_in <= peaks_in[i])
                end_in = peaks_in[i] + 1;
            if (end_in >= peaks_in[i + 1])
                end_in = peaks_in[i + 1] - 1;
        } else {
            if (end_in > (int64_t)n_in)
                end_in = (int64_t)n_in;
            if (end_in <= peaks_in[i])
                end_in = peaks_in[i] + 1;
        }
        onset[i] = onset_in;
        end[i] = end_in;
        kept[i] = length_kept(plan, end_a - onset_a);
        rr_ms[i] = i == 0 ? NAN
                          : (float)((double)(peaks_in[i] - peaks_in[i - 1]) * 1000.0 /
                                    plan->fs_in_hz);
        onset_a = end_a;
        onset_in = end_in;
    }
}

/*
 * Normalisation: z = (y - median(y)) / (1.4826 * MAD(y)), both over the whole resampled
 * recording (every sample, beats kept or not), so a beat's row does not depend on which other
 * beats were kept. A flat recording (MAD == 0) is only centred (scale 1).
 */
enum ecg_status cpu_embed(const struct ecg_plan *plan, const float *y, size_t n_a,
                          const int64_t *peaks_a, const uint8_t *kept, size_t k, float *emb,
                          struct ecg_error *err)
{
    const size_t beat_len = plan->beat_len;
    float median = 0.0f, scale = 1.0f;

    if (k == 0)
        return ECG_OK;
    if (n_a > 0) {
        float mad = 0.0f;
        enum ecg_status status = cpu_median_mad(y, n_a, &median, &mad, err);
        if (status != ECG_OK)
            return status;
        if (mad > 0.0f && isfinite(mad))
            scale = 1.4826f * mad;
    }
    const float inv_scale = 1.0f / scale;

    int64_t onset = onset_a_of(plan, peaks_a, 0);
    for (size_t i = 0; i < k; i++) {
        int64_t end = end_a_of(plan, peaks_a, k, n_a, i, onset);
        float *row = emb + i * beat_len;
        size_t len = 0;
        if (kept[i]) {
            int64_t avail = (end < (int64_t)n_a ? end : (int64_t)n_a) - onset;
            len = avail < (int64_t)beat_len ? (size_t)avail : beat_len;
            for (size_t t = 0; t < len; t++)
                row[t] = (y[onset + (int64_t)t] - median) * inv_scale;
        }
        memset(row + len, 0, (beat_len - len) * sizeof *row); /* each element written once */
        onset = end;
    }
    return ECG_OK;
}
