/*
 * band.c - the detector's noise-aware band (CPU reference; engine/cpu/noise_core.h has the
 * method and the arithmetic, shared with the CUDA twin gpu/cuda_band.cu). Thread-safe: no state
 * outside the arguments.
 */
#include "cpu.h"
#include "detect_params.h"
#include "noise_core.h"

/* Windows per chunk: the higher and lower bands are filtered a chunk at a time, so that the
 * step's memory does not grow with the recording (2 x about 1 MB whatever its length). */
#define BAND_CHUNK_WINDOWS 1024

size_t cpu_noise_band_work(const struct ecg_plan *plan, size_t n)
{
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    const size_t chunk = BAND_CHUNK_WINDOWS * win + CPU_FILTER_TILE;
    return 6 * n_win * sizeof(double) + 3 * n_win * sizeof(float) +
           (3 * chunk + win) * sizeof(float);
}

/* A gain between two window centres, as fuse_gain_at interpolates it: its value at the run's
 * left centre and the step to the next one. */
struct gain_run {
    float at, step;
};

static struct gain_run gain_run_of(const float *gain, size_t j, bool interpolated)
{
    struct gain_run g = {gain[j], 0.0f};
    if (interpolated)
        g.step = FUSE_FADD(gain[j + 1], -gain[j]);
    return g;
}

/*
 * Step 3's mix of samples [a, b) into f: noise_band_mix at every sample, with the gains taken
 * run by run instead of sample by sample. Between two window centres fuse_gain_at divides the
 * sample's offset by the window twice (the window index, then the fraction); here a run of
 * samples shares its window index, each offset's fraction comes from frac[r] = (float)r /
 * (float)win (the same expression, evaluated once per offset), and each gain's difference is
 * taken once per run (the same rounded value). The same operations on the same values, so the
 * same bits as noise_band_mix (test_robust compares the two), in a loop the compiler vectorises.
 */
static void band_mix_range(const float *keep, const float *take, const float *take2,
                           size_t n_win, size_t win, const float *frac, size_t a, size_t b,
                           float *f, const float *f_hi, const float *f_h2, size_t from)
{
    const size_t centre0 = win / 2;
    size_t i = a;
    while (i < b) {
        size_t j, end, r0 = 0;
        bool interpolated = false;
        if (i <= centre0 || n_win == 1) { /* before the first centre: the first window's gains */
            j = 0;
            end = n_win == 1 ? b : centre0 + 1;
        } else {
            j = (i - centre0) / win;
            if (j + 1 >= n_win) { /* past the last centre: the last window's */
                j = n_win - 1;
                end = b;
            } else {
                r0 = i - centre0 - j * win;
                end = centre0 + (j + 1) * win;
                interpolated = true;
            }
        }
        end = end < b ? end : b;
        const struct gain_run k = gain_run_of(keep, j, interpolated),
                              t = gain_run_of(take, j, interpolated),
                              t2 = gain_run_of(take2, j, interpolated);
        const float *fr = frac + r0;
        const size_t len = end - i;
        float *fi = f + i;
        const float *hi = f_hi + (i - from), *h2 = f_h2 + (i - from); /* they start at from */
        if (interpolated) {
            for (size_t q = 0; q < len; q++) {
                const float kq = FUSE_FADD(k.at, FUSE_FMUL(k.step, fr[q])),
                            tq = FUSE_FADD(t.at, FUSE_FMUL(t.step, fr[q])),
                            t2q = FUSE_FADD(t2.at, FUSE_FMUL(t2.step, fr[q]));
                const float mixed = FUSE_FADD(FUSE_FADD(FUSE_FMUL(kq, fi[q]), FUSE_FMUL(tq, hi[q])),
                                              FUSE_FMUL(t2q, h2[q]));
                fi[q] = kq == 1.0f && tq == 0.0f && t2q == 0.0f ? fi[q] : mixed;
            }
        } else if (!(k.at == 1.0f && t.at == 0.0f && t2.at == 0.0f)) {
            for (size_t q = 0; q < len; q++)
                fi[q] = FUSE_FADD(FUSE_FADD(FUSE_FMUL(k.at, fi[q]), FUSE_FMUL(t.at, hi[q])),
                                  FUSE_FMUL(t2.at, h2[q]));
        }
        i = end;
    }
}

/* The two higher bands' responses (and with f_lo, the lower band's) over samples [a, b) into
 * buffers that start at sample *from (a rounded down to a filter tile). */
static enum ecg_status band_chunk(const struct ecg_plan *plan, const float *y, size_t n, size_t a,
                                  size_t b, float *f_hi, float *f_h2, float *f_lo, size_t *from,
                                  struct ecg_error *err)
{
    *from = a / CPU_FILTER_TILE * CPU_FILTER_TILE;
    enum ecg_status status =
        cpu_filter_taps(plan->ricker_hi, plan->ricker_hi_len, y, n, *from, b, f_hi, err);
    if (status == ECG_OK)
        status = cpu_filter_taps(plan->ricker_h2, plan->ricker_h2_len, y, n, *from, b, f_h2, err);
    if (status == ECG_OK && f_lo)
        status = cpu_filter_taps(plan->ricker_lo, plan->ricker_lo_len, y, n, *from, b, f_lo, err);
    return status;
}

enum ecg_status cpu_noise_band(const struct ecg_plan *plan, const float *y, float *f, size_t n,
                               void *work, struct ecg_error *err)
{
    if (n == 0)
        return ECG_OK;
    const size_t win = detect_samples_of(NOISE_WINDOW_S, plan->fs_a_hz);
    const size_t n_win = n / win + (n % win ? 1 : 0);
    const size_t chunk = BAND_CHUNK_WINDOWS * win + CPU_FILTER_TILE;
    /* work: lo | hi | peak | mean | peak_hi | peak_h2 (doubles, per window) | keep | take |
     * take2 (floats, per window) | f_hi | f_h2 | f_lo (floats, one chunk) | frac (win floats) */
    double *d = work;
    const struct noise_band_measures m = {d, d + n_win, d + 2 * n_win, d + 3 * n_win,
                                          d + 4 * n_win, d + 5 * n_win};
    float *keep = (float *)(d + 6 * n_win), *take = keep + n_win, *take2 = take + n_win;
    float *f_hi = take2 + n_win, *f_h2 = f_hi + chunk, *f_lo = f_h2 + chunk;
    float *frac = f_lo + chunk; /* step 3: frac[r] = r / win, win of them */
    enum ecg_status status = ECG_OK;
    /* 1. each window's indices and peaks, a chunk of windows at a time (on one thread: the step
     * is a few short loops per chunk, which OpenMP's fork and join would cost more than) */
    for (size_t j0 = 0; j0 < n_win && status == ECG_OK; j0 += BAND_CHUNK_WINDOWS) {
        const size_t j1 = j0 + BAND_CHUNK_WINDOWS < n_win ? j0 + BAND_CHUNK_WINDOWS : n_win;
        const size_t b = j1 * win < n ? j1 * win : n;
        size_t from;
        status = band_chunk(plan, y, n, j0 * win, b, f_hi, f_h2, f_lo, &from, err);
        if (status != ECG_OK)
            break;
        for (size_t j = j0; j < j1; j++) {
            /* window j's samples, in the chunk's buffers and in f */
            const size_t a = j * win, len = a + win < n ? win : n - a;
            const struct noise_band_measures mj = {m.lo + j,      m.hi + j,      m.peak + j,
                                                   m.mean + j,    m.peak_hi + j, m.peak_h2 + j};
            noise_band_window(f + a, f_hi + (a - from), f_lo + (a - from), f_h2 + (a - from),
                              len, len, 0, &mj);
        }
    }
    if (status != ECG_OK)
        return status;
    /* 2. each window's gains */
    for (size_t j = 0; j < n_win; j++)
        noise_band_gains(&m, n_win, j, &keep[j], &take[j], &take2[j]);
    bool frac_ready = false;
    /* 3. the mix, in the chunks whose samples interpolate between gains of which one is not
     * (1, 0, 0) (elsewhere noise_band_mix gives f itself, so those are skipped). The higher
     * bands are filtered again there: keeping them from step 1 would cost 8 bytes per sample
     * for the whole recording, against two short convolutions of the chunks that need them. */
    for (size_t j0 = 0; j0 < n_win && status == ECG_OK; j0 += BAND_CHUNK_WINDOWS) {
        const size_t j1 = j0 + BAND_CHUNK_WINDOWS < n_win ? j0 + BAND_CHUNK_WINDOWS : n_win;
        bool any = false;
        for (size_t j = j0 > 0 ? j0 - 1 : 0; j < j1 + 1 && j < n_win && !any; j++)
            any = keep[j] != 1.0f || take[j] != 0.0f || take2[j] != 0.0f;
        if (!any)
            continue;
        const size_t a = j0 * win, b = j1 * win < n ? j1 * win : n;
        size_t from;
        status = band_chunk(plan, y, n, a, b, f_hi, f_h2, NULL, &from, err);
        if (status != ECG_OK)
            break;
        if (!frac_ready) {
            for (size_t r = 0; r < win; r++)
                frac[r] = (float)r / (float)win; /* fuse_gain_at's fraction at offset r */
            frac_ready = true;
        }
        band_mix_range(keep, take, take2, n_win, win, frac, a, b, f, f_hi, f_h2, from);
    }
    return status;
}
