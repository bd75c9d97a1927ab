/*
 * plan.c - derives the per-request plan (plan.h) from the parameters and the input rate.
 *
 * Resampling ratio. fs_a = fs_in * up / down, where up/down is the best rational approximation
 * of analysis_fs_hz / fs_in with up <= PLAN_UP_MAX (the smallest such up among equally good
 * ones; exact whenever an exact ratio with up <= PLAN_UP_MAX exists: 360 -> 25/36, 256 ->
 * 125/128, 1000 -> 1/4). An input already at the analysis rate gets up == down == 1 and no
 * filter. The rate actually used is recorded in fs_a_hz and everything downstream works from it;
 * it differs from analysis_fs_hz by at most ~0.1 % (fs_in near 100 Hz, non-integer) and usually
 * by nothing.
 *
 * Anti-aliasing prototype. A Kaiser-windowed sinc designed at the upsampled rate up * fs_in:
 * cutoff (-6 dB) at 0.45 * min(fs_in, fs_a), transition band 0.1 * min(fs_in, fs_a) wide, so the
 * pass band is flat to 0.4 * min(fs_in, fs_a) (>= 40 Hz for every accepted rate) and the stop band
 * starts at the Nyquist frequency of the slower of the two rates, attenuated by PLAN_STOP_DB.
 * Odd length, symmetric (linear phase), so the group delay fir_delay = (fir_len - 1) / 2
 * upsampled samples is an integer; the resampler adds it back, so y[j] is the signal at input
 * time j / fs_a exactly (zero latency). Taps are computed in double, each of the `up` polyphase
 * branches is normalised to sum to exactly 1 (the prototype's gain is `up`, DC passes with gain 1
 * on every output sample, with no ripple at the phase period), then rounded to float once, so
 * the CPU and CUDA backends share bit-identical taps.
 *
 * Ricker wavelet: the scipy.signal.ricker formula A (1 - (t/a)^2) exp(-t^2 / (2 a^2)),
 * A = 2 / (sqrt(3 a) pi^(1/4)), with a = ricker_sigma_s * fs_a samples, over
 * 2 * round(ricker_points_s * fs_a / 2) + 1 samples centred on t = 0 (30 points at 250 Hz ->
 * 31 taps, t = -15..15). Positive at the centre, so a positive QRS gives a positive response
 * maximum. Three more Ricker kernels of fixed widths serve the detector's noise-aware band
 * (engine/cpu/noise_core.h): ricker_hi, ricker_h2 and ricker_lo.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "cpu/noise_core.h" /* the noise-aware bands' widths */

#define PLAN_UP_MAX 256u         /* bounds the polyphase table (fir_len grows with up) */
#define PLAN_STOP_DB 65.0        /* Kaiser design attenuation; tests require >= 60 dB */
#define PLAN_CUTOFF 0.45         /* cutoff, fraction of min(fs_in, fs_a) */
#define PLAN_TRANSITION 0.10     /* transition width, fraction of min(fs_in, fs_a) */
#define PLAN_RICKER_MAX_S 2.0    /* longest Ricker support accepted, seconds */

/* Zeroth-order modified Bessel function of the first kind, by its power series (converges
 * fast for the beta values a Kaiser window uses, beta < 20). */
static double bessel_i0(double x)
{
    double sum = 1.0, term = 1.0;
    double half_x_sq = 0.25 * x * x;
    for (int k = 1; k < 200; k++) {
        term *= half_x_sq / ((double)k * (double)k);
        sum += term;
        if (term < sum * 1e-17)
            break;
    }
    return sum;
}

/* Best up/down with up <= PLAN_UP_MAX for ratio = fs_target / fs_in, reduced. */
static void choose_ratio(double fs_in_hz, double fs_target_hz, uint32_t *up, uint32_t *down)
{
    double best_err = INFINITY;
    uint32_t best_up = 1, best_down = 1;
    for (uint32_t u = 1; u <= PLAN_UP_MAX; u++) {
        double d = round((double)u * fs_in_hz / fs_target_hz);
        if (d < 1.0)
            d = 1.0;
        double err = fabs(fs_in_hz * (double)u / d - fs_target_hz);
        /* strictly better by more than rounding noise, so the smallest up wins ties */
        if (err < best_err - 1e-12 * fs_target_hz) {
            best_err = err;
            best_up = u;
            best_down = (uint32_t)d;
        }
    }
    uint32_t a = best_up, b = best_down;
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    *up = best_up / a;
    *down = best_down / a;
}

/* Designs the anti-aliasing prototype into plan->fir (see the file comment). */
static enum ecg_status design_fir(struct ecg_plan *plan, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    double *taps = NULL;
    const uint32_t up = plan->up;
    const double fs_up = (double)up * plan->fs_in_hz;
    const double fs_min = fmin(plan->fs_in_hz, plan->fs_a_hz);
    const double cutoff = PLAN_CUTOFF * fs_min / fs_up;        /* cycles per upsampled sample */
    const double transition = PLAN_TRANSITION * fs_min / fs_up;
    const double beta = 0.1102 * (PLAN_STOP_DB - 8.7);
    /* Kaiser's length estimate, rounded up to odd so the delay is an integer. */
    size_t len = (size_t)ceil((PLAN_STOP_DB - 7.95) / (2.285 * 2.0 * M_PI * transition)) + 1;
    len |= 1;
    const size_t half = (len - 1) / 2;

    taps = malloc(len * sizeof *taps);
    plan->fir = malloc(len * sizeof *plan->fir);
    if (!taps || !plan->fir) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "plan: %zu filter taps", len);
        goto out;
    }
    const double i0_beta = bessel_i0(beta);
    for (size_t k = 0; k <= half; k++) { /* one half, mirrored: exactly symmetric */
        double t = (double)half - (double)k;
        double ratio = t / (double)half;
        double window = bessel_i0(beta * sqrt(fmax(0.0, 1.0 - ratio * ratio))) / i0_beta;
        double x = 2.0 * cutoff * t;
        double sinc = t == 0.0 ? 1.0 : sin(M_PI * x) / (M_PI * x);
        taps[k] = taps[len - 1 - k] = 2.0 * cutoff * sinc * window;
    }
    /* Normalise each polyphase branch (taps k = p, p + up, ...) to sum to 1. */
    for (uint32_t p = 0; p < up && p < len; p++) {
        double sum = 0.0;
        for (size_t k = p; k < len; k += up)
            sum += taps[k];
        for (size_t k = p; k < len; k += up)
            taps[k] /= sum;
    }
    for (size_t k = 0; k < len; k++)
        plan->fir[k] = (float)taps[k];
    plan->fir_len = len;
    plan->fir_delay = half;
out:
    free(taps);
    return status;
}

/* Builds a Ricker kernel of width sigma_s over points_s (see the file comment) into *taps
 * (malloc'd) and *taps_len. */
static enum ecg_status design_ricker(double fs_a, double sigma_s, double points_s, float **taps,
                                     size_t *taps_len, struct ecg_error *err)
{
    const double a = sigma_s * fs_a;
    const long half = lround(0.5 * points_s * fs_a);
    const size_t len = 2 * (size_t)half + 1;

    float *ricker = malloc(len * sizeof *ricker);
    if (!ricker)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "plan: %zu Ricker taps", len);
    const double amplitude = 2.0 / (sqrt(3.0 * a) * pow(M_PI, 0.25));
    for (size_t k = 0; k < len; k++) {
        double t = (double)k - (double)half;
        double q = (t / a) * (t / a);
        double value = amplitude * (1.0 - q) * exp(-0.5 * q);
        /* Far tails of a long support are below float resolution relative to the centre, and
         * their products with the signal are denormals that slow every multiply tenfold. */
        ricker[k] = fabs(value) < 1e-10 * amplitude ? 0.0f : (float)value;
    }
    *taps = ricker;
    *taps_len = len;
    return ECG_OK;
}

/* round(seconds * fs) as a sample count; false if negative, not finite or too large. */
static bool samples_of(double seconds, double fs_hz, uint32_t *out)
{
    double v = round(seconds * fs_hz);
    if (!isfinite(v) || v < 0.0 || v > (double)UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

enum ecg_status ecg_plan_init(struct ecg_plan *plan, const struct ecg_params *params,
                              double fs_in_hz, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    if (!plan || !params)
        return ecg_fail(err, ECG_ERR_ARG, "bad_argument", "plan: NULL plan or parameters");
    memset(plan, 0, sizeof *plan);

    if (!(fs_in_hz >= ECG_FS_MIN_HZ && fs_in_hz <= ECG_FS_MAX_HZ))
        return ecg_fail(err, ECG_ERR_UNSUPPORTED, "bad_rate",
                        "sampling rate %g Hz is outside the supported range [%g, %g] Hz",
                        fs_in_hz, ECG_FS_MIN_HZ, ECG_FS_MAX_HZ);
    if (!(params->analysis_fs_hz >= ECG_FS_MIN_HZ && params->analysis_fs_hz <= ECG_FS_MAX_HZ))
        return ecg_fail(err, ECG_ERR_ARG, "bad_params",
                        "analysis rate %g Hz is outside [%g, %g] Hz", params->analysis_fs_hz,
                        ECG_FS_MIN_HZ, ECG_FS_MAX_HZ);
    double sigma = params->ricker_sigma_s * params->analysis_fs_hz;
    if (!(sigma >= 0.5 && params->ricker_sigma_s <= PLAN_RICKER_MAX_S))
        return ecg_fail(err, ECG_ERR_ARG, "bad_params",
                        "ricker_sigma_s %g must be between half a sample and %g s",
                        params->ricker_sigma_s, PLAN_RICKER_MAX_S);
    if (!(params->ricker_points_s * params->analysis_fs_hz >= 3.0 &&
          params->ricker_points_s <= PLAN_RICKER_MAX_S))
        return ecg_fail(err, ECG_ERR_ARG, "bad_params",
                        "ricker_points_s %g must span 3 samples to %g s",
                        params->ricker_points_s, PLAN_RICKER_MAX_S);
    if (params->beat_len == 0)
        return ecg_fail(err, ECG_ERR_ARG, "bad_params", "beat_len must be positive");

    plan->params = *params;
    plan->fs_in_hz = fs_in_hz;
    if (fs_in_hz == params->analysis_fs_hz) {
        plan->up = plan->down = 1;
    } else {
        choose_ratio(fs_in_hz, params->analysis_fs_hz, &plan->up, &plan->down);
    }
    plan->fs_a_hz = fs_in_hz * (double)plan->up / (double)plan->down;
    plan->beat_len = params->beat_len;

    const struct {
        double seconds;
        uint32_t *samples;
        const char *name;
    } windows[] = {
        {params->nms_window_s, &plan->nms_window, "nms_window_s"},
        {params->refractory_s, &plan->refractory, "refractory_s"},
        {params->pre_r_s, &plan->pre_r, "pre_r_s"},
        {params->beat_min_s, &plan->beat_min, "beat_min_s"},
        {params->beat_max_s, &plan->beat_max, "beat_max_s"},
    };
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        if (!samples_of(windows[i].seconds, plan->fs_a_hz, windows[i].samples)) {
            status = ecg_fail(err, ECG_ERR_ARG, "bad_params", "%s = %g is not a valid duration",
                              windows[i].name, windows[i].seconds);
            goto out;
        }
    }

    if (plan->up != 1 || plan->down != 1) {
        status = design_fir(plan, err);
        if (status != ECG_OK)
            goto out;
    }
    status = design_ricker(plan->fs_a_hz, params->ricker_sigma_s, params->ricker_points_s,
                           &plan->ricker, &plan->ricker_len, err);
    if (status == ECG_OK)
        status = design_ricker(plan->fs_a_hz, NOISE_HI_SIGMA_S, NOISE_HI_POINTS_S,
                               &plan->ricker_hi, &plan->ricker_hi_len, err);
    if (status == ECG_OK)
        status = design_ricker(plan->fs_a_hz, NOISE_H2_SIGMA_S, NOISE_HI_POINTS_S,
                               &plan->ricker_h2, &plan->ricker_h2_len, err);
    if (status == ECG_OK)
        status = design_ricker(plan->fs_a_hz, NOISE_LO_SIGMA_S, NOISE_LO_POINTS_S,
                               &plan->ricker_lo, &plan->ricker_lo_len, err);
out:
    if (status != ECG_OK)
        ecg_plan_fini(plan);
    return status;
}

void ecg_plan_fini(struct ecg_plan *plan)
{
    if (!plan)
        return;
    free(plan->fir);
    free(plan->ricker);
    free(plan->ricker_hi);
    free(plan->ricker_h2);
    free(plan->ricker_lo);
    memset(plan, 0, sizeof *plan);
}

/*
 * Output j sits at input time j * down / up (in input samples); the last one produced is the
 * last that does not lie beyond the last input sample: n_a = floor((n_in - 1) * up / down) + 1,
 * and 0 for an empty input.
 */
size_t ecg_plan_resampled_len(const struct ecg_plan *plan, size_t n_in)
{
    if (n_in == 0)
        return 0;
    return (size_t)(((uint64_t)(n_in - 1) * plan->up) / plan->down) + 1;
}

/* round(index_a * down / up), halves rounded up, in exact integer arithmetic (floor division
 * so that negative indices round the same way). */
int64_t ecg_plan_to_input(const struct ecg_plan *plan, int64_t index_a)
{
    int64_t num = 2 * index_a * (int64_t)plan->down + (int64_t)plan->up;
    int64_t den = 2 * (int64_t)plan->up;
    int64_t q = num / den;
    if ((num % den != 0) && (num < 0))
        q--;
    return q;
}

size_t ecg_plan_fft_len(size_t n)
{
    size_t best = 1;
    while (best < n)
        best *= 2;
    for (size_t p7 = 1; p7 < best; p7 *= 7)
        for (size_t p5 = p7; p5 < best; p5 *= 5)
            for (size_t p3 = p5; p3 < best; p3 *= 3) {
                size_t v = p3;
                while (v < n)
                    v *= 2;
                if (v < best)
                    best = v;
            }
    return best;
}
