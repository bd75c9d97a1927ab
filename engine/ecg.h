/*
 * ecg.h - the public interface of the ecgd engine.
 *
 * This is the only header that the service (service/) and the command line (cli/) include. It
 * covers: status codes and error reports, input readers (CSV, raw binary, .npy, EDF, JSON, WFDB),
 * the preprocessing parameters, models, the engine that runs the pipeline on a backend (from a
 * decoded signal, from raw bytes, or from bytes streamed to the device as they arrive), results
 * and their JSON rendering, and beat-by-beat evaluation against reference annotations.
 *
 * Threading: every function is reentrant. An ecg_engine may be shared by any number of threads;
 * ecg_engine_analyze() takes a worker context from the engine's pool for the duration of the call
 * (blocking while all are busy). Signals, results, models, buffers and streaming uploads are
 * owned by the caller that created them and must not be used by two threads at once unless
 * documented otherwise.
 *
 * Ownership: every _create/_load/_read returns an object the caller frees with the matching
 * _destroy/_free function. Every free function accepts NULL. On failure, outputs are left empty
 * (NULL pointers, zero lengths) and nothing needs to be freed.
 */
#ifndef ECG_H
#define ECG_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ECG_VERSION "0.1.0"

#define ECG_WUR __attribute__((warn_unused_result))

/* ---------------------------------------------------------------- status and errors */

enum ecg_status {
    ECG_OK = 0,
    ECG_ERR_ARG,          /* caller passed an invalid argument (a bug or a bad option) */
    ECG_ERR_NOMEM,        /* host memory allocation failed */
    ECG_ERR_IO,           /* a file could not be opened or read */
    ECG_ERR_FORMAT,       /* input is malformed: message says where and what (HTTP 400) */
    ECG_ERR_UNSUPPORTED,  /* well-formed input the engine cannot analyse: too short, bad rate (422) */
    ECG_ERR_TOO_LARGE,    /* input exceeds a configured limit (413) */
    ECG_ERR_NOT_FOUND,    /* a named model, lead or record does not exist (404 for models) */
    ECG_ERR_MODEL,        /* a model file is corrupt, truncated, or of an unknown version */
    ECG_ERR_DEVICE,       /* a CUDA/cuFFT/cuDNN call failed (503) */
    ECG_ERR_DEVICE_OOM,   /* device memory exhausted for this request (503) */
    ECG_ERR_BUSY,         /* no worker available within the wait limit (503) */
    ECG_ERR_INTERNAL,     /* an invariant was broken: a bug (500) */
    ECG_STATUS_COUNT
};

/* Short stable name of a status ("format", "device_oom"...). Never NULL. */
const char *ecg_status_str(enum ecg_status status);

/*
 * An error report: the status, a short machine-readable code ("bad_csv", "nan_in_input"...) and a
 * human message that says where and what ("line 17: expected a number, got \"abc\"").
 */
#define ECG_ERROR_CODE_LEN 32
#define ECG_ERROR_MSG_LEN 320
struct ecg_error {
    enum ecg_status status;
    char code[ECG_ERROR_CODE_LEN];
    char message[ECG_ERROR_MSG_LEN];
};

/* Fills err (if not NULL) and returns status, so callers can write `return ecg_fail(...)`. */
enum ecg_status ecg_fail(struct ecg_error *err, enum ecg_status status, const char *code,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------- growable byte buffer */

/* A growable byte buffer used for JSON output. Zero-initialise before first use. */
struct ecg_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed; /* set when an allocation failed; further appends are ignored */
};
void ecg_buf_append(struct ecg_buf *buf, const char *bytes, size_t len);
void ecg_buf_puts(struct ecg_buf *buf, const char *str);
void ecg_buf_printf(struct ecg_buf *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ensures room for extra more bytes; returns a pointer to the free tail or NULL on failure. */
char *ecg_buf_reserve(struct ecg_buf *buf, size_t extra);
void ecg_buf_fini(struct ecg_buf *buf);

/* ---------------------------------------------------------------- signals and readers */

/* Most leads one recording may bring to an analysis (a 12-lead ECG and then some). */
#define ECG_MAX_LEADS 16

/*
 * A recording, as float32 samples in physical units (mV where known): the first selected lead
 * in samples, and, when the read options selected several leads, the others in extra (same n,
 * same rate). Detection uses every lead; the beat table and the model read the first.
 */
struct ecg_signal {
    float *samples;   /* owned; n values */
    size_t n;
    double fs_hz;     /* sampling rate */
    char lead[32];    /* lead label if the format has one ("MLII"), else its index ("0") or "" */
    size_t n_extra;                          /* further leads, at most ECG_MAX_LEADS - 1 */
    float *extra[ECG_MAX_LEADS - 1];         /* owned; n values each */
    char extra_lead[ECG_MAX_LEADS - 1][32];  /* their labels, as lead */
    char time_column[32]; /* CSV: the time (or sample index) column skipped, by its header
                           * name or "column 1"; "" when there was none */
    bool fs_from_time;    /* fs_hz was measured from that time column */
    bool decimal_comma;   /* CSV: numbers were read with ',' as their decimal mark */
    bool lead_chosen;     /* the first lead was named by embed_lead: the engine reads it even
                           * where it shows no beats (ecg_engine_analyze) */
};
void ecg_signal_free(struct ecg_signal *sig); /* frees every lead, zeroes the struct; NULL ok */

enum ecg_format {
    ECG_FORMAT_AUTO = 0, /* guess from file name (readers from files) */
    ECG_FORMAT_CSV,
    ECG_FORMAT_F32,      /* raw little-endian float32 */
    ECG_FORMAT_F64,      /* raw little-endian float64 */
    ECG_FORMAT_I16,      /* raw little-endian int16 */
    ECG_FORMAT_NPY,
    ECG_FORMAT_EDF,      /* EDF, EDF+ and BDF */
    ECG_FORMAT_JSON,
    ECG_FORMAT_WFDB,     /* .hea + .dat; files only */
    ECG_FORMAT_COUNT
};
const char *ecg_format_name(enum ecg_format format);        /* "csv", "f32"...; never NULL */
enum ecg_format ecg_format_from_name(const char *name);       /* AUTO if unknown */
enum ecg_format ecg_format_from_path(const char *path);       /* by extension; AUTO if unknown */

struct ecg_read_opts {
    enum ecg_format format;
    double fs_hz;        /* required for formats that carry no rate (CSV, raw); 0 = not given */
    const char *lead;    /* column/lead by 0-based index ("1") or by name ("MLII"); NULL = first.
                          * A comma list ("MLII,V1", "0,1") or "all" selects several leads
                          * (ecg_lead_list_parse()). */
    const char *embed_lead; /* with several leads, the one the model reads (index or name, one of
                             * those selected); NULL = the first selected */
    size_t max_samples;  /* 0 = no limit; more samples fail with ECG_ERR_TOO_LARGE */
};

/*
 * Lead selections. ecg_lead_list_parse() splits a selection into its leads: "all" (any case)
 * gives *all = true and no names; otherwise up to ECG_MAX_LEADS comma-separated names or
 * indices, spaces around them ignored, none empty, none twice (ECG_ERR_ARG, code "bad_lead",
 * naming the culprit). names[i] points into store (cap bytes). NULL or "" selects lead 0 alone
 * (n = 0, *all = false). ecg_lead_is_list() says whether a selection names several leads.
 */
enum ecg_status ecg_lead_list_parse(const char *selection, char *store, size_t cap,
                                    const char **names, size_t *n, bool *all,
                                    struct ecg_error *err) ECG_WUR;
bool ecg_lead_is_list(const char *selection);

/*
 * Reads a recording held in memory. WFDB is refused (it needs several files). On success fills
 * *out (caller frees with ecg_signal_free). On failure returns the status, fills err with where
 * and what, and leaves *out empty. Never reads past buf[len - 1]. NaN and Inf are refused.
 */
enum ecg_status ecg_read_memory(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/*
 * Reads a WFDB record held in memory: the header text (sent as hea_name) and the signal file
 * that holds the selected leads, which must be the one the header names (dat_name, without a
 * directory). Formats 212 and 16, as from files; opts->lead may be a list or "all", as for
 * files. Same contract as ecg_read_memory().
 */
enum ecg_status ecg_read_wfdb_memory(const char *hea_name, const char *hea, size_t hea_len,
                                     const char *dat_name, const void *dat, size_t dat_len,
                                     const struct ecg_read_opts *opts, struct ecg_signal *out,
                                     struct ecg_error *err) ECG_WUR;

/* Reads a file (for WFDB, PATH is the record path with or without ".hea"). Same contract. */
enum ecg_status ecg_read_file(const char *path, const struct ecg_read_opts *opts,
                              struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/*
 * Parses a float exactly as strtof() would for the same characters, and faster. Parses the
 * longest valid prefix of [p, end); returns a pointer past it, or p when there is no number.
 * Accepts what strtof accepts for decimal input (sign, digits, '.', exponent); hex floats,
 * "inf" and "nan" are not numbers here (the readers refuse them).
 */
const char *ecg_parse_float(const char *p, const char *end, float *out);

/* ---------------------------------------------------------------- annotations (evaluation) */

/*
 * Reference beat annotations of a WFDB record (MIT format .atr): the beats, and the episodes of
 * ventricular flutter or fibrillation (between '[' and ']' marks), which ANSI/AAMI EC57 and
 * WFDB's bxb exclude from beat-by-beat detection statistics.
 */
struct ecg_annotations {
    int64_t *sample;  /* R-peak sample index, input grid */
    char *symbol;     /* MIT beat symbol: N L R e j A a J S V E F / f Q */
    size_t n;
    int64_t *vf_start; /* VF episodes [vf_start[i], vf_end[i]], input grid */
    int64_t *vf_end;
    size_t n_vf;
};
enum ecg_status ecg_annotations_read(const char *path, struct ecg_annotations *out,
                                     struct ecg_error *err) ECG_WUR;
void ecg_annotations_free(struct ecg_annotations *ann);
/* True when sample lies inside one of the record's VF episodes. */
bool ecg_annotations_in_vf(const struct ecg_annotations *ann, int64_t sample);

/* AAMI class of an MIT beat symbol: 'N', 'S', 'V', 'F', 'Q', or 0 for a non-beat symbol. */
char ecg_aami_class(char symbol);

/* ---------------------------------------------------------------- preprocessing parameters */

/*
 * Every parameter of the signal pipeline. A model records the parameters it was trained with and
 * the engine always runs with its model's parameters, so that the two cannot drift apart.
 * Durations are in seconds so they carry over to any sampling rate.
 */
struct ecg_params {
    double analysis_fs_hz;     /* rate the pipeline runs at (250) */
    double ricker_points_s;    /* Ricker support in seconds (30 samples at 250 Hz = 0.12 s) */
    double ricker_sigma_s;     /* Ricker width parameter a, in seconds */
    double nms_window_s;       /* NMS window of beat candidates (0.4 s; the original 0.72 s) */
    double refractory_s;       /* minimum distance between two beats */
    double pre_r_s;            /* beat onset = R - pre_r */
    double beat_min_s;         /* shorter beats are flagged and not embedded (100 samples) */
    double beat_max_s;         /* longer beats likewise (256 samples) */
    uint32_t beat_len;         /* embedding length in samples at the analysis rate (256) */
    uint32_t normalisation;    /* enum ecg_norm */
};
enum ecg_norm { ECG_NORM_MEDIAN_MAD = 1 };
struct ecg_params ecg_params_default(void);

/* ---------------------------------------------------------------- models */

struct ecg_model; /* opaque: architecture, weights, parameters, calibration, provenance */

/* Loads and verifies a model file. On failure returns NULL and fills err. */
struct ecg_model *ecg_model_load(const char *path, struct ecg_error *err) ECG_WUR;
void ecg_model_free(struct ecg_model *model);

struct ecg_model_info {
    char name[64];             /* file name without extension */
    char sha256[65];           /* of the whole file, hex */
    uint32_t beat_len;
    uint32_t latent_dim;
    uint32_t channels[3];      /* encoder widths */
    struct ecg_params params;
    double threshold;          /* outlier threshold on the score */
    double threshold_percentile;
    /* provenance */
    char records[256];
    uint64_t train_beats;
    uint32_t epochs;
    double final_loss;
    uint64_t seed;
};
void ecg_model_get_info(const struct ecg_model *model, struct ecg_model_info *info);

/* Writes the model's metadata (info, calibration, provenance) as a JSON object. */
void ecg_model_write_json(const struct ecg_model *model, struct ecg_buf *out);

/*
 * Runs the decoder on n latent points (n x latent_dim floats) and writes n x beat_len samples
 * to out (caller allocates). CPU reference implementation.
 */
enum ecg_status ecg_model_decode(const struct ecg_model *model, const float *latent, size_t n,
                                 float *out, struct ecg_error *err) ECG_WUR;

/* ---------------------------------------------------------------- the engine */

enum ecg_backend_kind { ECG_BACKEND_AUTO = 0, ECG_BACKEND_CPU, ECG_BACKEND_CUDA };
const char *ecg_backend_kind_name(enum ecg_backend_kind kind);
/* Parses "auto", "cpu", "cuda"; returns false if unknown. */
bool ecg_backend_kind_parse(const char *name, enum ecg_backend_kind *out);

struct ecg_engine_config {
    enum ecg_backend_kind backend;
    const struct ecg_model *model; /* borrowed; must outlive the engine; NULL = signal only */
    unsigned workers;              /* worker contexts (CUDA: one stream each); 0 = 1 */
    int device;                    /* CUDA device ordinal; -1 = every visible device */
    /* Dynamic batching (engine/batch.c): analyses of at most ECG_BATCH_MAX_SAMPLES samples that
     * arrive within batch_window_us of the first one waiting run as one batch, at most max_batch
     * of them, on one of the batchers (batch_lanes per device). max_batch <= 1 (or
     * ECG_CUDA_BATCH=0 in the environment) leaves every analysis on its own pass. Answers are
     * identical either way. batch_lanes: batchers per CUDA device, 0 = ECG_BATCH_LANES_DEFAULT
     * (ECG_CUDA_BATCH_LANES in the environment, 1..8, overrides it). batch_depth: batches a
     * batcher keeps in flight (it launches the next while the device runs the one before), 0 =
     * ECG_BATCH_DEPTH_DEFAULT (ECG_BATCH_DEPTH in the environment, 1..4, overrides it); 1 runs
     * each batch to its end before the next. */
    unsigned max_batch;
    unsigned batch_window_us;
    unsigned batch_lanes;
    unsigned batch_depth;
};
#define ECG_BATCH_LANES_DEFAULT 2u
#define ECG_BATCH_LANES_MAX 8u
#define ECG_BATCH_DEPTH_DEFAULT 2u
#define ECG_BATCH_DEPTH_MAX 4u
/* The longest recording (samples, one lead) a batch takes; longer ones keep their own pass. */
#define ECG_BATCH_MAX_SAMPLES ((size_t)1 << 17)

struct ecg_engine;

/*
 * Creates an engine: opens the backend (CUDA context, cuFFT/cuDNN handles, model upload) once.
 * With ECG_BACKEND_AUTO, picks CUDA when a device is present and falls back to the CPU otherwise;
 * the choice and the reason are available from ecg_engine_describe(). Returns NULL on failure.
 */
struct ecg_engine *ecg_engine_create(const struct ecg_engine_config *config,
                                     struct ecg_error *err) ECG_WUR;
void ecg_engine_destroy(struct ecg_engine *engine);

/*
 * Whether an engine created with config would batch (max_batch > 1, ECG_CUDA_BATCH not 0, on a
 * backend that batches), decided without creating it: AUTO counts as CUDA when a CUDA device is
 * visible. A batched analysis waits for its batch in its caller's thread, so a caller that sizes
 * its thread pool before creating the engine (the service's --workers) asks this first.
 */
bool ecg_engine_would_batch(const struct ecg_engine_config *config);

/* "cpu" or "cuda". */
const char *ecg_engine_backend(const struct ecg_engine *engine);
/* Human description of the backend's device ("NVIDIA H100 80GB HBM3, CUDA 13.0" / "cpu"). */
const char *ecg_engine_device(const struct ecg_engine *engine);
/* Why AUTO picked what it picked ("no CUDA device: falling back to cpu"), or "". */
const char *ecg_engine_note(const struct ecg_engine *engine);
const struct ecg_params *ecg_engine_params(const struct ecg_engine *engine);
const struct ecg_model *ecg_engine_model(const struct ecg_engine *engine);

/* Stage timings in milliseconds. */
struct ecg_timing {
    double read_ms, resample_ms, filter_ms, detect_ms, embed_ms, encode_ms, total_ms;
    double quality_ms; /* quality features and verdict, rhythm statistics */
    /* Batched analyses only (batch_size > 0): the time spent queued before the batch started,
     * and how many analyses the batch held. The device stages of a batch run for all of its
     * analyses at once: their share is in total_ms, the per-stage fields stay 0. */
    double queue_ms;
    unsigned batch_size;
};

/* ---------------------------------------------------------------- signal quality and rhythm */

/* Why a stretch of signal cannot be read (docs/RHYTHM.md defines each). */
enum ecg_quality_reason {
    ECG_QUALITY_OK = 0,
    ECG_QUALITY_FLAT,     /* "flat": no signal (constant or almost, at the recording's level) */
    ECG_QUALITY_LEAD_OFF, /* "lead_off": stuck still at a level outside the recording's range */
    ECG_QUALITY_CLIPPED,  /* "clipped": the waves cut flat at the recording's extreme value */
    ECG_QUALITY_NOISE,    /* "noise": broadband noise swamps the QRS complexes */
    ECG_QUALITY_NOT_ECG,  /* "not_ecg": a smooth signal without QRS spikes (a sine...) */
    ECG_QUALITY_REASON_COUNT
};
/* "ok", "flat", "lead_off", "clipped", "noise", "not_ecg"; never NULL. */
const char *ecg_quality_reason_name(enum ecg_quality_reason reason);

/* The recording's verdict, from the share of its time that is readable. */
enum ecg_quality_verdict {
    ECG_VERDICT_GOOD = 0,  /* "good": usable_fraction >= ECG_QUALITY_GOOD_FRACTION */
    ECG_VERDICT_DEGRADED,  /* "degraded": between the two */
    ECG_VERDICT_UNREADABLE /* "unreadable": usable_fraction < ECG_QUALITY_READABLE_FRACTION */
};
#define ECG_QUALITY_GOOD_FRACTION 0.95
#define ECG_QUALITY_READABLE_FRACTION 0.5
/* "good", "degraded", "unreadable"; never NULL. */
const char *ecg_quality_verdict_name(enum ecg_quality_verdict verdict);

/* An unreadable stretch, input grid: samples [start, end). */
struct ecg_quality_segment {
    int64_t start, end;
    uint8_t reason; /* enum ecg_quality_reason, never OK */
};

struct ecg_quality_report {
    struct ecg_quality_segment *segments; /* ascending, disjoint */
    size_t n_segments;
    double usable_fraction; /* share of the recording's samples outside every segment */
    uint8_t verdict;        /* enum ecg_quality_verdict */
    uint8_t reason;         /* the reason covering most unreadable time (OK when none) */
    size_t n_leads;         /* leads the verdict read (the analysis's), and each one's own */
    double lead_usable[ECG_MAX_LEADS]; /* usable fraction: a window is readable where any is */
};

/*
 * Heart rate and heart-rate variability over normal-to-normal (NN) intervals only
 * (engine/hrv.c; docs/RHYTHM.md gives every definition). NaN where too few intervals.
 */
struct ecg_hrv {
    size_t n_intervals;    /* RR intervals in the recording (beats - 1) */
    size_t n_nn;           /* NN intervals used */
    size_t n_successive;   /* pairs of adjacent NN intervals (RMSSD, pNN50, SD1) */
    double hr_mean_bpm, hr_min_bpm, hr_max_bpm;
    double nn_mean_ms, sdnn_ms, rmssd_ms, pnn50_pct, sd1_ms, sd2_ms;
    double lf_ms2, hf_ms2, lf_hf; /* Lomb-Scargle; NaN for recordings under 2 minutes */
};

/* The analysis of one recording. Columnar per-beat arrays of length n_beats. */
struct ecg_result {
    size_t n_beats;
    int64_t *r_peak;   /* R-peak sample index, input grid */
    int64_t *onset;    /* beat onset, input grid (may be < 0 for a first beat: clipped to 0) */
    int64_t *end;      /* beat end (exclusive), input grid */
    float *rr_ms;      /* RR interval to the previous beat; NaN for the first */
    uint8_t *kept;     /* 1 if the beat's length is plausible and it was embedded */
    /* present when the engine has a model; NULL otherwise */
    float *latent;     /* n_beats x latent_dim; NaN for beats not kept */
    float *score;      /* NaN for beats not kept */
    uint8_t *outlier;  /* 0/1; 0 for beats not kept */
    uint32_t latent_dim;
    /* the signal */
    size_t n_samples;
    double fs_hz;
    char lead[32];     /* the lead the beat table and the model read */
    char lead_passed_over[32]; /* the first lead selected, when it showed no beats and lead was
                                * read instead (ecg_engine_analyze); "" otherwise */
    double overlap_s;  /* the overlap the caller declared (ecg_result_drop_overlap), 0: none */
    size_t overlap;    /* ... in samples: no beat before this one is reported */
    /* with two leads or more, each lead's agreement with the beats as detection saw it: the
     * mean over the seconds of its fusion factor (engine/cpu/fuse_core.h step 3a: 0 = no
     * beats where the others have them, 1 = agrees; it weighs from three leads); NAN with one,
     * leads[] order */
    double lead_agree[ECG_MAX_LEADS];
    size_t n_leads;    /* the leads detection used: leads[0] is lead, then the others */
    char leads[ECG_MAX_LEADS][32];
    char time_column[32];  /* CSV: the time column skipped (ecg_signal), or "" */
    bool fs_from_time;     /* fs_hz was measured from it */
    bool decimal_comma;    /* CSV numbers read with a decimal comma (ecg_signal) */
    struct ecg_timing timing;
    /* signal quality (engine/quality.c) */
    float *beat_quality;   /* 0 (unreadable) .. 1, the quality of the stretch at the R peak */
    float *likeness;       /* how alike each beat's complex is to its neighbours' (-1 .. 1, NaN
                            * where none compares; engine/cpu/likeness_core.h): the backend's
                            * fetch fills it, the quality verdict reads it; not reported */
    float *crest;          /* the detector's envelope crest factor (window peak over the floor
                            * between beats; engine/cpu/noise_core.h step 2) in the 1-s window
                            * of each beat's R peak, NaN until the backend's fetch fills it:
                            * the quality verdict reads it; not reported */
    uint8_t *readable;     /* 1 when the R peak lies outside every unreadable segment */
    struct ecg_quality_report quality;
    /* rhythm (engine/hrv.c) */
    uint8_t *nn;           /* 1 when rr_ms[i] is a normal-to-normal interval used by hrv */
    struct ecg_hrv hrv;
};
void ecg_result_free(struct ecg_result *result);

/*
 * A strip posted with the end of the strip before it: the first overlap_s seconds of the
 * recording repeat what the previous request held, so that the detector learns from them and a
 * complex split by the previous cut is seen whole, but their beats were the previous answer's.
 * Drops the beats whose R peak lies before sample round(overlap_s fs) from every per-beat array
 * (and, with beat_len > 0, from the n_beats x beat_len embedding rows), sets overlap_s and
 * overlap, and takes the rhythm statistics again over the beats left (the first one's rr_ms
 * still measured from the overlap's last beat). The signal and its quality verdict still
 * describe the whole recording. ECG_ERR_ARG (code "bad_overlap") when overlap_s is not a
 * finite number >= 0 or leaves no sample of the recording; ECG_ERR_NOMEM.
 */
enum ecg_status ecg_result_drop_overlap(struct ecg_result *result, double overlap_s,
                                        float *embedding, size_t beat_len,
                                        struct ecg_error *err) ECG_WUR;

/*
 * Analyses one recording: resample, filter, detect, segment, embed and (with a model) encode and
 * score. Thread-safe. On success *out is a new result; on failure NULL and err says why
 * (ECG_ERR_UNSUPPORTED for a rate outside 100..2000 Hz or a recording too short to analyse).
 * With several leads, detection reads them all, and the R peaks are placed, the beats embedded
 * and scored on the first; where the first shows no beats (a loose electrode:
 * result->lead_agree) and a later one does (with two leads, over at least 91 s), the analysis
 * runs again with that lead first and result->lead_passed_over names the lead passed over,
 * unless the signal's lead_chosen says the caller named the first (embed_lead).
 */
enum ecg_status ecg_engine_analyze(struct ecg_engine *engine, const struct ecg_signal *signal,
                                   struct ecg_result **out, struct ecg_error *err) ECG_WUR;

/*
 * Reads and analyses a recording given as the bytes of a file or request body, in one call.
 * Equivalent to ecg_read_memory() + ecg_engine_analyze(), but lets the backend take the bytes
 * straight into its own memory (the CUDA backend parses CSV and binary formats on the GPU).
 * The service uses this entry point. Same contract as ecg_engine_analyze(); reader errors are
 * reported exactly as ecg_read_memory() reports them. result->timing.read_ms covers parsing.
 */
enum ecg_status ecg_engine_analyze_bytes(struct ecg_engine *engine, const void *buf, size_t len,
                                         const struct ecg_read_opts *opts,
                                         struct ecg_result **out, struct ecg_error *err) ECG_WUR;

/*
 * Asynchronous analysis of a short recording on an engine that batches (the CUDA backend with
 * dynamic batching): the calling thread reads the bytes as ecg_engine_analyze_bytes() would and
 * queues the analysis on a batch without waiting for it. ECG_OK: queued, *out set (before done
 * can run); done(arg) is then called exactly once, from one of the engine's threads, when the
 * result can be collected with ecg_engine_analyze_collect(). done must be quick and must not
 * block (wake whoever collects, nothing more). ECG_ERR_UNSUPPORTED: not taken, *out NULL, done
 * never called: no batching on this engine, a recording the batches do not take (several leads,
 * longer than ECG_BATCH_MAX_SAMPLES), one the reader refuses, or the engine stopping; analyse it
 * with ecg_engine_analyze_bytes(), which gives its answer or its error. buf and opts are not
 * kept. The engine must outlive what it queued: collect every pending analysis before
 * ecg_engine_destroy() (the service holds the engine's model until the request ends).
 */
struct ecg_pending;
enum ecg_status ecg_engine_analyze_async(struct ecg_engine *engine, const void *buf, size_t len,
                                         const struct ecg_read_opts *opts,
                                         void (*done)(void *arg), void *arg,
                                         struct ecg_pending **out) ECG_WUR;

/*
 * Once done has been called: the result, or the error, exactly as ecg_engine_analyze_bytes()
 * would have given them for the same bytes, and frees p. ECG_ERR_UNSUPPORTED, err untouched:
 * the batch could not take it after all (short of device memory): analyse the bytes with
 * ecg_engine_analyze_bytes(). Thread-safe (any thread, once per pending analysis).
 */
enum ecg_status ecg_engine_analyze_collect(struct ecg_pending *p, struct ecg_result **out,
                                           struct ecg_error *err) ECG_WUR;

/*
 * Host memory for the bytes later given to ecg_engine_analyze_bytes(): memory the engine's
 * backend reads fastest (CUDA: pinned host memory, uploaded by DMA straight from the buffer
 * instead of through a staging copy; CPU: plain malloc). Any other memory works as well, only
 * slower. Allocating pinned memory is slow: keep and reuse these buffers (the service pools
 * them). Returns NULL when out of memory. Free with ecg_engine_host_free() on the same engine,
 * before the engine is destroyed; ecg_engine_host_free() accepts NULL. Thread-safe.
 */
void *ecg_engine_host_alloc(struct ecg_engine *engine, size_t bytes);
void ecg_engine_host_free(struct ecg_engine *engine, void *ptr);

/*
 * Streaming upload: a recording copied to the device while it arrives (the service receives a
 * request body chunk by chunk). The host buffer stays authoritative: the device copy is only an
 * optimisation, and the analysis is byte-identical to ecg_engine_analyze_bytes() of the same
 * bytes whether the copy is used, failed, or was never made.
 *
 * Lifecycle: ecg_engine_upload_begin() once the buffer exists, with its capacity (the most bytes
 * the recording will fill: its length when known in advance, the buffer's size when not),
 * ecg_upload_progress() each time more of it is filled, ecg_engine_analyze_upload() with the
 * final length once all of it is, ecg_upload_free() always (also to cancel midway), before buf is
 * freed or reused and before the engine is destroyed. A body of unknown length that outgrows its
 * buffer is moved to a larger one: free the upload first (its copies read the old buffer), then
 * begin a new one on the new buffer and report the prefix already there with progress.
 *
 * Threading: one upload is used by one thread at a time; it may move between threads (the
 * service begins and feeds it on an HTTP thread and analyses and frees it on a worker) when the
 * hand-over itself synchronises (a queue under a mutex). Different uploads are independent.
 */
struct ecg_upload;

/*
 * Starts copying a recording of at most cap bytes to the device while it arrives in buf (memory
 * from ecg_engine_host_alloc() of at least cap bytes, filled front to back). cap is the length
 * of a recording whose length is known, or the buffer's capacity when it is not (the device then
 * holds cap bytes until the analysis). Returns NULL, with nothing to undo, when streaming brings
 * nothing (CPU backend; a format the device does not parse: only CSV, F32, F64, I16 and AUTO
 * stream; buf not pinned; cap below the backend's threshold, 1 MiB for CUDA) or cannot start
 * (device memory, the device's budget of bytes held by uploads): the caller then uses
 * ecg_engine_analyze_bytes() as before. Never blocks on the device.
 */
struct ecg_upload *ecg_engine_upload_begin(struct ecg_engine *engine, const void *buf, size_t cap,
                                           enum ecg_format format);

/*
 * buf[0, filled) now holds final bytes that will not change: queues their copy (batched: the
 * CUDA backend copies in steps of 4 MiB, the rest when filled reaches cap, and otherwise at the
 * analysis, which alone knows where a recording of unknown length ends). Cheap; never blocks on
 * the device; a failure is remembered (the analysis then reads the host bytes), never reported.
 * up NULL is a no-op; filled beyond the upload's capacity counts as its capacity.
 */
void ecg_upload_progress(struct ecg_upload *up, size_t filled);

/*
 * ecg_engine_analyze_bytes() of the upload's buf[0, len) (len <= the capacity given to begin;
 * every byte of [0, len) must be final), reading the bytes already on the device where it can:
 * same contract, same results. The device copy is consumed by the first analysis (a second one
 * reads the host bytes). Does not free up. ECG_ERR_ARG when up is NULL or len exceeds its
 * capacity; an upload begun on another engine is analysed from its host bytes.
 */
enum ecg_status ecg_engine_analyze_upload(struct ecg_engine *engine, struct ecg_upload *up,
                                          size_t len, const struct ecg_read_opts *opts,
                                          struct ecg_result **out, struct ecg_error *err) ECG_WUR;

/* True when the last ecg_engine_analyze_upload() of up parsed the recording from its device
 * copy (false before any analysis, and when the analysis fell back to the host bytes). For
 * metrics and tests. up NULL: false. */
bool ecg_upload_used_device(const struct ecg_upload *up);

/* Waits for the copies in flight (they read buf) and frees the device memory; NULL ok. Must be
 * called before buf is freed or reused. May block briefly (one copy step); never fails. */
void ecg_upload_free(struct ecg_upload *up);

/*
 * Like ecg_engine_analyze(), and also hands back the embedded beats the model sees: *embedding is
 * a malloc'd n_beats x beat_len array (rows of beats not kept are zero), freed by the caller.
 * For the trainer and evaluation tools.
 */
enum ecg_status ecg_engine_analyze_embed(struct ecg_engine *engine,
                                         const struct ecg_signal *signal,
                                         struct ecg_result **out, float **embedding,
                                         struct ecg_error *err) ECG_WUR;

/*
 * Kept recordings, for browsing an analysis after it is answered (the service's /v1/analyses):
 * a trace is the input-grid signal of one analysis kept in the backend's memory (device memory
 * with CUDA, host memory on the CPU), reduced there for drawing and read back in small windows.
 *
 * Ownership and threading: a trace belongs to its caller and must be freed (ecg_trace_free)
 * before its engine is destroyed. Reading a trace (len, bytes, minmax, read) is thread-safe:
 * several threads may reduce the same trace at once; freeing it must wait for them.
 */
struct ecg_trace;

/*
 * ecg_engine_analyze_bytes() (up NULL) or ecg_engine_analyze_upload() (up not NULL; buf is
 * ignored) that also keeps the loaded signal as *trace and, when embedding is not NULL, hands
 * back the embedded beats as ecg_engine_analyze_embed() does. Same contract; on failure *out,
 * *trace and *embedding are NULL.
 */
enum ecg_status ecg_engine_analyze_keep(struct ecg_engine *engine, struct ecg_upload *up,
                                        const void *buf, size_t len,
                                        const struct ecg_read_opts *opts, struct ecg_result **out,
                                        struct ecg_trace **trace, float **embedding,
                                        struct ecg_error *err) ECG_WUR;

/*
 * ecg_engine_analyze() of a signal decoded already (a WFDB record sent as two parts) with the
 * options it was read with (opts->fs_hz, when set, must agree with signal->fs_hz:
 * conflicting_fs), keeping it as *trace when trace is not NULL and handing back the embedded
 * beats when embedding is not NULL. Same contract as ecg_engine_analyze_keep().
 */
enum ecg_status ecg_engine_analyze_signal_keep(struct ecg_engine *engine,
                                               const struct ecg_signal *signal,
                                               const struct ecg_read_opts *opts,
                                               struct ecg_result **out, struct ecg_trace **trace,
                                               float **embedding, struct ecg_error *err) ECG_WUR;

/* Samples in the trace, and the bytes of memory it holds (host or device). NULL: 0. */
size_t ecg_trace_len(const struct ecg_trace *trace);
size_t ecg_trace_bytes(const struct ecg_trace *trace);

/*
 * Min/max decimation (the reduction of M4 without first/last): the samples [start, end) are cut
 * into B = min(n_buckets, end - start) buckets, bucket b covering
 * [start + floor(b * len / B), start + floor((b + 1) * len / B)), and out[b] gets the index and
 * value of its smallest and of its largest sample (of equal values, the first). The CPU backend
 * computes it with ecg_minmax() (the reference), CUDA on the device copy; results are identical.
 * *n_out gets B. ECG_ERR_ARG when start >= end, end > len or n_buckets is 0.
 */
struct ecg_minmax {
    int64_t i_min, i_max;
    float v_min, v_max;
};
enum ecg_status ecg_trace_minmax(const struct ecg_trace *trace, size_t start, size_t end,
                                 size_t n_buckets, struct ecg_minmax *out, size_t *n_out,
                                 struct ecg_error *err) ECG_WUR;
/* The same reduction of host samples x (the reference); returns B. */
size_t ecg_minmax(const float *x, size_t start, size_t end, size_t n_buckets,
                  struct ecg_minmax *out);

/* Copies samples [start, start + n) of the trace into out. ECG_ERR_ARG when out of range. */
enum ecg_status ecg_trace_read(const struct ecg_trace *trace, size_t start, size_t n, float *out,
                               struct ecg_error *err) ECG_WUR;
void ecg_trace_free(struct ecg_trace *trace);

/* Shortest recording the engine analyses, in seconds (shorter ones get ECG_ERR_UNSUPPORTED). */
#define ECG_MIN_DURATION_S 1.0

/* Which optional parts of the JSON answer to include (bit mask). */
enum ecg_include {
    ECG_INCLUDE_BEATS = 1u << 0,   /* r_peak, onset, end, rr_ms, kept */
    ECG_INCLUDE_LATENT = 1u << 1,
    ECG_INCLUDE_SCORE = 1u << 2,   /* score and outlier */
    ECG_INCLUDE_SUMMARY = 1u << 3,
    ECG_INCLUDE_TIMING = 1u << 4,
    ECG_INCLUDE_ALL = 0x1f
};
/* Parses a comma list ("latent,score"); returns false and names the bad token in err. */
bool ecg_include_parse(const char *list, unsigned *mask, struct ecg_error *err);

/*
 * Appends the beats of result as a WFDB annotation file (MIT format, what .atr files hold) to
 * out: one annotation per beat at its R peak (input grid), 'N', or 'Q' for a beat scored as an
 * outlier. WFDB's rdann and bxb read it, as does ecg_annotations_read(). engine/write_wfdb.c.
 */
void ecg_result_write_wfdb_annotations(const struct ecg_result *result, struct ecg_buf *out);

/*
 * Renders the result as the JSON document shared by the CLI and the service (schema in
 * README.md). model may be NULL. The output is deterministic apart from "timing_ms".
 */
void ecg_result_write_json(const struct ecg_result *result, const struct ecg_engine *engine,
                           unsigned include, struct ecg_buf *out);

/* ---------------------------------------------------------------- evaluation */

/*
 * Beat-by-beat comparison of detected R peaks with reference annotations (ANSI/AAMI EC57 style,
 * as WFDB's bxb): a detection matches the nearest unmatched reference beat within window_s.
 */
struct ecg_match_stats {
    size_t tp, fn, fp;
    double abs_err_ms_sum; /* sum of |detected - reference| over matches */
};
/* match (optional, length n_ref) receives the index of the detection matched to each reference
 * beat, or -1. */
void ecg_match_beats(const int64_t *detected, size_t n_detected, const int64_t *reference,
                     size_t n_reference, double fs_hz, double window_s,
                     struct ecg_match_stats *stats, int64_t *match);

/* ROC-AUC of scores for positives vs negatives (ties count one half). NaN if a class is empty. */
double ecg_roc_auc(const float *pos, size_t n_pos, const float *neg, size_t n_neg);

/* ---------------------------------------------------------------- noise stress test */

/*
 * Noise stress test records made the MIT-BIH Noise Stress Test Database way (WFDB's nst; the
 * method is described in engine/noise.c). ecg_nst_amplitudes() measures the record's normal QRS
 * peak-to-peak amplitude (from its reference annotations) and the noise's baseline-free RMS;
 * ecg_nst_gain() turns them and an SNR into nst's noise gain; ecg_nst_mix() adds gain x noise
 * to x in place in alternating stretches (clean before start_s, then noisy and clean by turns of
 * period_s: 300 and 120 s in the NSTDB), with the noise wrapping at its end (ecg_nst_mix_from:
 * the noise read from its sample `from` on, the record's sample 0 meeting it);
 * ecg_nst_noisy() says whether time t_s lies in a noisy stretch.
 */
#define ECG_NST_START_S 300.0
#define ECG_NST_PERIOD_S 120.0
enum ecg_status ecg_nst_amplitudes(const float *x, size_t n, const float *noise, size_t n_noise,
                                   double fs_hz, const struct ecg_annotations *ann,
                                   double *qrs_pp, double *noise_rms,
                                   struct ecg_error *err) ECG_WUR;
double ecg_nst_gain(double snr_db, double qrs_pp, double noise_rms);
void ecg_nst_mix(float *x, size_t n, const float *noise, size_t n_noise, double fs_hz,
                 double gain, double start_s, double period_s);
void ecg_nst_mix_from(float *x, size_t n, const float *noise, size_t n_noise, size_t from,
                      double fs_hz, double gain, double start_s, double period_s);
bool ecg_nst_noisy(double t_s, double start_s, double period_s);

#ifdef __cplusplus
}
#endif

#endif /* ECG_H */
