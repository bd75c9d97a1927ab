/*
 * bench_gpu.c - the CUDA backend's figures on a 20M-sample recording tiled from the shared
 * MIT-BIH records (lead 0, 360 Hz): engine start-up, each stage's time, device memory peak, the
 * VAE on every beat, and the input paths (float32 bytes and CSV text parsed on the device,
 * against the host CSV reader). Prints a Markdown table; exits 0 without a device (it says so).
 *
 * usage: bench_gpu [DATA_DIR] [SAMPLES]   (DATA_DIR holds mitdb/; default ../shared/data)
 * With ECG_BENCH_WRITE=DIR it also writes the inputs for bench/gpu.sh's HTTP measurements:
 * DIR/rec.f32, DIR/rec.csv and the model DIR/bench.ecgm.
 * The model has the default architecture and random weights: the cost of the network does not
 * depend on its weights.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecg.h"
#include "cpu/cpu.h"
#include "hrv.h"
#include "quality.h"
#include "model.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef ECG_HAVE_CUDA
#include "../gpu/cuda_stats.h"
#endif

#ifndef ECG_HAVE_CUDA
int main(void)
{
    printf("bench_gpu: this build has no CUDA backend: nothing to measure\n");
    return 0;
}
#else

#define REPEAT 5

static const char *const records[] = {"101", "106", "108", "109", "112", "114", "115", "116",
                                      "118", "119", "122", "124", "201", "203", "205", "207",
                                      "208", "209", "215", "220", "223", "230"};

/* The threads the host's parallel loops (OpenMP) may use. */
static int ecg_bench_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *tile(const char *dir, size_t n)
{
    float *x = malloc(n * sizeof *x);
    size_t have = 0;
    if (!x)
        return NULL;
    while (have < n) {
        for (size_t r = 0; r < sizeof records / sizeof records[0] && have < n; r++) {
            char path[4096];
            struct ecg_signal sig = {0};
            struct ecg_error err = {0};
            struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB, .lead = "0"};
            snprintf(path, sizeof path, "%s/mitdb/%s", dir, records[r]);
            if (ecg_read_file(path, &opts, &sig, &err) != ECG_OK) {
                fprintf(stderr, "%s: %s\n", path, err.message);
                free(x);
                return NULL;
            }
            size_t take = sig.n < n - have ? sig.n : n - have;
            memcpy(x + have, sig.samples, take * sizeof *x);
            have += take;
            ecg_signal_free(&sig);
        }
    }
    return x;
}

static struct ecg_model *bench_model(void)
{
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_model *model = ecg_model_create(&arch, &params, &err);
    if (!model)
        return NULL;
    srand(7);
    for (size_t i = 0; i < model->layout.n_weights; i++)
        model->weights[i] = (float)(((double)rand() / RAND_MAX - 0.5) * 0.8);
    model->calib.rel_center = 0.2;
    model->calib.rel_scale = 0.5;
    return model;
}

struct stage_times {
    double read, resample, filter, detect, embed, encode, quality, total;
    double hrv; /* of the quality stage: NN selection and HRV on the host (ecg_hrv_assess) */
    size_t beats;
};

/* Runs the engine REPEAT times (after one warm-up) and keeps each stage's median. */
static int run(struct ecg_engine *engine, const struct ecg_signal *sig, const void *bytes,
               size_t len, const struct ecg_read_opts *opts, struct stage_times *out)
{
    double t[9][REPEAT];
    for (int r = -1; r < REPEAT; r++) {
        struct ecg_result *res = NULL;
        struct ecg_error err = {0};
        enum ecg_status st = sig ? ecg_engine_analyze(engine, sig, &res, &err)
                                 : ecg_engine_analyze_bytes(engine, bytes, len, opts, &res, &err);
        if (st != ECG_OK) {
            fprintf(stderr, "analyze: %s\n", err.message);
            return -1;
        }
        if (r >= 0) {
            t[0][r] = res->timing.read_ms;
            t[1][r] = res->timing.resample_ms;
            t[2][r] = res->timing.filter_ms;
            t[3][r] = res->timing.detect_ms;
            t[4][r] = res->timing.embed_ms;
            t[5][r] = res->timing.encode_ms;
            t[6][r] = res->timing.total_ms;
            t[7][r] = res->timing.quality_ms;
            double t0 = now_ms();
            if (ecg_hrv_assess(res, &err) != ECG_OK) {
                fprintf(stderr, "hrv: %s\n", err.message);
                ecg_result_free(res);
                return -1;
            }
            t[8][r] = now_ms() - t0;
        }
        out->beats = res->n_beats;
        ecg_result_free(res);
    }
    out->read = median(t[0], REPEAT);
    out->resample = median(t[1], REPEAT);
    out->filter = median(t[2], REPEAT);
    out->detect = median(t[3], REPEAT);
    out->embed = median(t[4], REPEAT);
    out->encode = median(t[5], REPEAT);
    out->total = median(t[6], REPEAT);
    out->quality = median(t[7], REPEAT);
    out->hrv = median(t[8], REPEAT);
    return 0;
}

/* The host's share of the quality stage on this recording: the verdict (ecg_quality_assess, from
 * the windows' features) and NN selection + HRV (ecg_hrv_assess), on the engine's result; median
 * of REPEAT runs each. */
static int host_quality(struct ecg_engine *engine, const struct ecg_signal *sig)
{
    struct ecg_error err = {0};
    struct ecg_result *res = NULL;
    if (ecg_engine_analyze(engine, sig, &res, &err) != ECG_OK) {
        fprintf(stderr, "analyze: %s\n", err.message);
        return -1;
    }
    struct ecg_quality_geometry g = ecg_quality_geometry_of(sig->n, sig->fs_hz);
    struct ecg_quality_window *w = malloc(g.n_win * sizeof *w);
    if (!w) {
        ecg_result_free(res);
        return -1;
    }
    double t0 = now_ms();
    cpu_quality_features(sig->samples, sig->n, sig->fs_hz, w);
    double t_features = now_ms() - t0;
    /* the same with the parallel loops on one thread, then on every thread */
    for (int pass = 0; pass < 2; pass++) {
#ifdef _OPENMP
        int saved = omp_get_max_threads();
        if (pass == 0)
            omp_set_num_threads(1);
#else
        if (pass == 1)
            break;
#endif
        double tv[REPEAT], th[REPEAT];
        for (int r = 0; r < REPEAT; r++) {
            ecg_quality_fini(res);
            t0 = now_ms();
            enum ecg_status st = ecg_quality_assess(w, NULL, 0, g.n_win, res, &err);
            tv[r] = now_ms() - t0;
            t0 = now_ms();
            if (st == ECG_OK)
                st = ecg_hrv_assess(res, &err);
            th[r] = now_ms() - t0;
            if (st != ECG_OK) {
                fprintf(stderr, "quality: %s\n", err.message);
                free(w);
                ecg_result_free(res);
                return -1;
            }
        }
        printf("host share of the quality stage (%zu windows, %zu beats, %d threads at most): "
               "verdict %.2f ms, NN selection + HRV %.2f ms (medians of %d)\n", g.n_win,
               res->n_beats, ecg_bench_threads(), median(tv, REPEAT), median(th, REPEAT),
               REPEAT);
#ifdef _OPENMP
        omp_set_num_threads(saved);
#endif
    }
    printf("the CPU features of the same windows: %.1f ms\n", t_features);
    free(w);
    ecg_result_free(res);
    return 0;
}

/* The CSV text of the recording: "time_s,value" rows, about 23 bytes each. */
static char *csv_of(const float *x, size_t n, size_t *len)
{
    size_t cap = n * 32 + 64, used = 0;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used, "%.3f,%.9f\n", (double)i / 360.0,
                                 (double)x[i]);
    *len = used;
    return text;
}

/* Multiply-adds of the default network for one beat: the seven convolutions (kernel 3) and
 * the linear layer (the logvar head is not computed). */
static double vae_macs_per_beat(void)
{
    struct ecg_vae_arch a = ecg_vae_arch_default();
    double l = a.beat_len, z = a.latent_dim;
    return 3.0 * (1 * a.enc[0] * l + a.enc[0] * a.enc[1] * l / 2 + a.enc[1] * a.enc[2] * l / 4 +
                  a.enc[2] * z * l / 8 + a.dec[0] * a.dec[1] * l / 4 +
                  a.dec[1] * a.dec[2] * l / 2 + a.dec[2] * l) +
           z * a.dec[0] * l / 8;
}

/*
 * The VAE target is stated for 90k beats: tile a recording long enough to give at least that
 * many (from the beats per sample of the main run) and time the encode stage on each path.
 */
static int vae_at_90k(struct ecg_engine *gpu, const char *dir, size_t n, size_t beats)
{
    static const char *const paths[] = {"warp", "block", "cudnn"};
    size_t n90 = (size_t)((double)n * 90000.0 / (double)(beats ? beats : 1) * 1.02);
    float *x = tile(dir, n90);
    struct ecg_signal sig = {.samples = x, .n = n90, .fs_hz = 360.0};
    struct stage_times t[3] = {{0}};
    if (!x)
        return 1;
    for (int i = 0; i < 3; i++) {
        setenv("ECG_CUDA_VAE", paths[i], 1);
        if (run(gpu, &sig, NULL, 0, NULL, &t[i]))
            return 1;
    }
    unsetenv("ECG_CUDA_VAE");
    setenv("ECG_CUDA_PROFILE", "1", 1); /* the network / score split, on stderr */
    {
        struct ecg_result *res = NULL;
        struct ecg_error err = {0};
        if (ecg_engine_analyze(gpu, &sig, &res, &err) != ECG_OK)
            return 1;
        ecg_result_free(res);
    }
    unsetenv("ECG_CUDA_PROFILE");
    const double macs = vae_macs_per_beat() * (double)t[0].beats;
    printf("\nVAE encode + decode + score on %zu beats (%zu samples; target <= 2 ms for 90k "
           "beats; PyTorch anchor 108 ms):\n\n| path | ms (median of %d) | beats/s | "
           "floor: %.2f GFLOP at 67 TFLOP/s FP32 |\n|---|---|---|---|\n",
           t[0].beats, n90, REPEAT, 2.0 * macs / 1e9);
    for (int i = 0; i < 3; i++)
        printf("| %s | %.3f | %.3g | %.3f ms |\n", paths[i], t[i].encode,
               (double)t[i].beats / (t[i].encode * 1e-3), 2.0 * macs / 67e12 * 1e3);
    free(x);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "../shared/data";
    size_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000000;
    struct ecg_error err = {0};
    struct ecg_model *model = bench_model();
    if (!model)
        return 1;
    double t0 = now_ms();
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CUDA, .model = model,
                                       .workers = 1, .device = -1};
    struct ecg_engine *gpu = ecg_engine_create(&config, &err);
    double t_create = now_ms() - t0;
    if (!gpu) {
        printf("bench_gpu: no CUDA engine (%s): nothing to measure\n", err.message);
        return 0;
    }
    float *x = tile(dir, n);
    if (!x) {
        fprintf(stderr, "bench_gpu: no data in %s\n", dir);
        return 1;
    }
    struct ecg_signal sig = {.samples = x, .n = n, .fs_hz = 360.0};
    printf("# GPU benchmark: %s\n\n", ecg_engine_device(gpu));
    printf("recording: %zu samples at 360 Hz (%.1f h), tiled from the 22 MIT-BIH records, "
           "lead 0\n\n", n, (double)n / 360.0 / 3600.0);

    struct stage_times g = {0}, g_fft = {0}, g_cudnn = {0}, g_f32 = {0}, g_csv = {0}, c = {0};
    size_t used_now = 0, used_peak = 0, reserved_peak = 0;
    cuda_memory_reset_peak();
    if (run(gpu, &sig, NULL, 0, NULL, &g))
        return 1;
    cuda_memory_stats(&used_now, &used_peak, &reserved_peak);
    setenv("ECG_CUDA_FILTER", "fft", 1);
    if (run(gpu, &sig, NULL, 0, NULL, &g_fft))
        return 1;
    unsetenv("ECG_CUDA_FILTER");
    setenv("ECG_CUDA_VAE", "cudnn", 1);
    if (run(gpu, &sig, NULL, 0, NULL, &g_cudnn))
        return 1;
    unsetenv("ECG_CUDA_VAE");
    /* one more run with the detector's step timings (stderr) */
    setenv("ECG_CUDA_PROFILE", "1", 1);
    {
        struct ecg_result *res = NULL;
        if (ecg_engine_analyze(gpu, &sig, &res, &err) != ECG_OK)
            return 1;
        ecg_result_free(res);
    }
    unsetenv("ECG_CUDA_PROFILE");

    /* float32 bytes, parsed on the device */
    struct ecg_read_opts f32 = {.format = ECG_FORMAT_F32, .fs_hz = 360.0};
    if (run(gpu, NULL, x, n * sizeof(float), &f32, &g_f32))
        return 1;
    /* CSV text, parsed on the device; the host reader on the same bytes */
    size_t csv_len = 0;
    char *csv = csv_of(x, n, &csv_len);
    const char *write_dir = getenv("ECG_BENCH_WRITE");
    if (write_dir && csv) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rec.f32", write_dir);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f) != 0)
            fprintf(stderr, "bench_gpu: cannot write %s\n", path);
        snprintf(path, sizeof path, "%s/rec.csv", write_dir);
        f = fopen(path, "wb");
        if (!f || fwrite(csv, 1, csv_len, f) != csv_len || fclose(f) != 0)
            fprintf(stderr, "bench_gpu: cannot write %s\n", path);
        snprintf(path, sizeof path, "%s/bench.ecgm", write_dir);
        if (ecg_model_save(model, path, &err) != ECG_OK)
            fprintf(stderr, "bench_gpu: %s\n", err.message);
    }
    struct ecg_read_opts csv_opts = {.format = ECG_FORMAT_CSV, .fs_hz = 360.0, .lead = "1"};
    if (!csv || run(gpu, NULL, csv, csv_len, &csv_opts, &g_csv))
        return 1;
    setenv("ECG_CUDA_PROFILE", "1", 1); /* the device CSV parser's split, on stderr */
    {
        struct ecg_result *res = NULL;
        if (ecg_engine_analyze_bytes(gpu, csv, csv_len, &csv_opts, &res, &err) != ECG_OK)
            return 1;
        ecg_result_free(res);
    }
    unsetenv("ECG_CUDA_PROFILE");
    struct ecg_signal parsed = {0};
    t0 = now_ms();
    if (ecg_read_memory(csv, csv_len, &csv_opts, &parsed, &err) != ECG_OK) {
        fprintf(stderr, "host csv: %s\n", err.message);
        return 1;
    }
    double t_host_csv = now_ms() - t0;
    ecg_signal_free(&parsed);

    /* the CPU backend on the same recording, once */
    config.backend = ECG_BACKEND_CPU;
    struct ecg_engine *cpu = ecg_engine_create(&config, &err);
    struct ecg_result *rc = NULL;
    if (!cpu || ecg_engine_analyze(cpu, &sig, &rc, &err) != ECG_OK) {
        fprintf(stderr, "cpu: %s\n", err.message);
        return 1;
    }
    c.read = rc->timing.read_ms;
    c.resample = rc->timing.resample_ms;
    c.filter = rc->timing.filter_ms;
    c.detect = rc->timing.detect_ms;
    c.embed = rc->timing.embed_ms;
    c.encode = rc->timing.encode_ms;
    c.total = rc->timing.total_ms;
    c.quality = rc->timing.quality_ms;
    c.beats = rc->n_beats;
    ecg_result_free(rc);

    const double n_a = (double)n * 25.0 / 36.0;
    printf("engine start (ecg_engine_create: CUDA context, model upload, cuDNN handle): "
           "%.1f ms\n", t_create);
    printf("beats: %zu (gpu) %zu (cpu)\n", g.beats, c.beats);
    printf("device memory (stream-ordered pool): peak in use %.1f MiB, peak reserved %.1f MiB\n",
           (double)used_peak / 1048576.0, (double)reserved_peak / 1048576.0);
    printf("host CSV reader on the same %.1f MB: %.1f ms\n\n", (double)csv_len / 1e6,
           t_host_csv);
    printf("| stage | GPU ms (median of %d) | CPU ms (1 run) | bytes moved on the device | "
           "floor at 3.35 TB/s |\n|---|---|---|---|---|\n", REPEAT);
#define ROW(name, gv, cv, bytes)                                                               \
    printf("| %s | %.2f | %.1f | %.0f MB | %.3f ms |\n", name, gv, cv, (bytes) / 1e6,         \
           (bytes) / 3.35e12 * 1e3)
    ROW("load (float32 H2D, pinned staging)", g.read, c.read, (double)n * 4);
    ROW("resample 360->250 (polyphase, 64 taps/branch)", g.resample, c.resample,
        (double)n * 4 + n_a * 4);
    ROW("filter, direct 31 taps", g.filter, c.filter, n_a * 8);
    ROW("filter, cuFFT (forced)", g_fft.filter, 0.0, n_a * 8 * 3);
    ROW("detect", g.detect, c.detect, n_a * 4 * 6);
    ROW("segment + median/MAD + embed", g.embed, c.embed,
        n_a * 4 * 2 * 8 + (double)g.beats * 256 * 4);
    ROW("VAE encode + decode + score, warp kernel", g.encode, c.encode,
        (double)g.beats * 256 * 4);
    ROW("VAE, cuDNN layer by layer (forced)", g_cudnn.encode, 0.0,
        (double)g.beats * 256 * 4 * 14);
    ROW("quality: features (device), verdict, NN selection, HRV (host)", g.quality, c.quality,
        (double)n * 4 * 2);
    printf("| of which NN selection + HRV on the host (ecg_hrv_assess, %d threads at most) | "
           "%.2f | - | - | - |\n", ecg_bench_threads(), g.hrv);
    ROW("total (engine)", g.total, c.total, 0.0);
    printf("\n| input path | parse ms (device, incl. upload) | total ms | bytes |\n"
           "|---|---|---|---|\n");
    printf("| float32 bytes (load_bytes) | %.2f | %.2f | %.1f MB |\n", g_f32.read, g_f32.total,
           (double)n * 4 / 1e6);
    printf("| CSV text (load_bytes) | %.2f | %.2f | %.1f MB |\n", g_csv.read, g_csv.total,
           (double)csv_len / 1e6);
    printf("| CSV text, host reader (ecg_read_memory) | %.1f | - | %.1f MB |\n", t_host_csv,
           (double)csv_len / 1e6);
    if (host_quality(gpu, &sig))
        return 1;
    if (vae_at_90k(gpu, dir, n, g.beats))
        return 1;
    ecg_engine_destroy(gpu);
    ecg_engine_destroy(cpu);
    ecg_model_free(model);
    free(csv);
    free(x);
    return 0;
}
#endif
