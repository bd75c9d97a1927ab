/*
 * read_internal.h - the input readers behind ecg_read_memory() and ecg_read_file() (internal).
 *
 * engine/read.c dispatches on the format; each engine/read_<format>.c parses one format into a
 * struct ecg_signal. Every reader obeys the contract of ecg_read_memory(): on failure it returns
 * the status, fills err with where and what, and leaves *out empty (no allocation to free). It
 * never reads outside [buf, buf + len), refuses NaN and Inf with their position, refuses empty
 * input and enforces opts->max_samples (ECG_ERR_TOO_LARGE).
 *
 * Threading: all functions are reentrant; no global state.
 */
#ifndef ECG_READ_INTERNAL_H
#define ECG_READ_INTERNAL_H

#include "ecg.h"

/* Excerpts of bad input quoted in messages are cut to this many bytes. */
#define READ_QUOTE_MAX 32

/* ---------------------------------------------------------------- one reader per format */

/* CSV/text: one or more columns; rate from opts->fs_hz, or from a time column
 * (read_csv_time.c: recognised, skipped, checked against fs, reported in out->time_column). */
enum ecg_status read_csv(const char *buf, size_t len, const struct ecg_read_opts *opts,
                         struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/* The delimiter of a CSV, picked from its first non-blank line [ls, le): ';', ',' or tab,
 * whichever it holds, in that order (a line with both ';' and ',' is ';'-separated with decimal
 * commas), but tab where a tab separates text on a line with a ',' ("-0,02<TAB>1,5": decimal
 * commas), or 0 for one column. */
char read_csv_delimiter(const char *ls, const char *le);

/* One column of a CSV (opts->lead, default the first), as the file holds it: read_csv.c. */
enum ecg_status read_csv_column(const char *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/*
 * True when, with no lead chosen, a CSV's first column looks like time or a sample index
 * rather than a signal: a header naming it so ("time", "t", "time_s", "time (ms)",
 * "timestamp", "elapsed time", "sample", "index"...), or, without a header, its first rows
 * strictly increasing by steady steps; and there is a second column. read_csv() then verifies
 * the whole column. The CUDA backend hands such files to the host reader.
 */
bool read_csv_time_column_likely(const char *buf, size_t len, const struct ecg_read_opts *opts);

/* True when a CSV's first non-blank line is one number with a decimal comma or a whole number
 * split by ',' ("-0,145", "12,512"): read_csv_column() then scans the whole file to tell one
 * column with decimal commas from two integer columns (read_csv.c). The CUDA backend hands such
 * files to the host reader. */
bool read_csv_decimal_comma_likely(const char *buf, size_t len);

/* Raw little-endian samples: format is ECG_FORMAT_F32, _F64 or _I16; rate from opts->fs_hz. */
enum ecg_status read_raw(const void *buf, size_t len, enum ecg_format format,
                         const struct ecg_read_opts *opts, struct ecg_signal *out,
                         struct ecg_error *err) ECG_WUR;

/* NumPy .npy, versions 1 to 3; rate from opts->fs_hz. */
enum ecg_status read_npy(const void *buf, size_t len, const struct ecg_read_opts *opts,
                         struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/*
 * Where the samples of the chosen lead lie in a .npy file: sample i is the element at
 * buf + data_offset + (first + i * stride) * size, in kind/size/big_endian encoding. Every element
 * of [first, first + (n - 1) * stride] lies inside the data, which ends at the end of the file.
 */
struct npy_layout {
    size_t data_offset; /* bytes from the start of the file to element 0 */
    char kind;          /* 'f' (size 4 or 8), 'i' (size 1, 2 or 4) or 'u' (size 1) */
    size_t size;        /* bytes per element */
    bool big_endian;    /* byte order of the elements ('=' resolved to the host's) */
    size_t n;           /* samples of the chosen lead, > 0 and within opts->max_samples */
    size_t stride;      /* elements between two samples of the lead */
    size_t first;       /* element index of sample 0 */
    double fs_hz;       /* from opts, checked */
};

/* read_npy() up to the conversion: every check but the finite one, with read_npy()'s statuses
 * and messages; fills *out on success, leaves it untouched on failure. Reads only the preamble
 * and header, so it is cheap for any len. */
enum ecg_status read_npy_layout(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct npy_layout *out, struct ecg_error *err) ECG_WUR;

/* EDF, EDF+ and BDF through EDFlib, from a file or from memory (via a memfd). */
enum ecg_status read_edf_file(const char *path, const struct ecg_read_opts *opts,
                              struct ecg_signal *out, struct ecg_error *err) ECG_WUR;
enum ecg_status read_edf_memory(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/*
 * Where the samples of the chosen signal lie in an EDF/BDF body: sample i is stored at
 * buf + header_bytes + (i / samples_per_record) * record_bytes + signal_offset +
 * (i % samples_per_record) * bytes_per_sample, and its value is
 * edf_to_mv(edf_digital(that address, bytes_per_sample, dig_min, dig_max), bitvalue, offset,
 * scale) (engine/edf_convert.h), exactly what read_edf_memory() computes. The body is
 * header_bytes + records * record_bytes long.
 */
struct edf_layout {
    size_t header_bytes;       /* 256 * (signals + 1), annotation signals included */
    size_t record_bytes;       /* one data record: every signal, annotations included */
    size_t signal_offset;      /* bytes from a record's start to the chosen signal's first */
    size_t samples_per_record; /* of the chosen signal, > 0 */
    size_t records;            /* data records in the body, > 0 */
    size_t n;                  /* records * samples_per_record, within opts->max_samples */
    int bytes_per_sample;      /* 2 (EDF, EDF+) or 3 (BDF, BDF+) */
    int dig_min, dig_max;      /* the clamp EDFlib applies */
    double bitvalue, offset;   /* EDFlib's calibration of the signal */
    double scale;              /* physical unit to mV */
    double fs_hz;              /* as read_edf_memory() computes it, checked */
    char lead[32];             /* the lead label read_edf_memory() sets */
};

/* read_edf_memory() up to the conversion: EDFlib validates the body, with read_edf_memory()'s
 * statuses and messages for what it refuses, without the body being copied: EDFlib reads a
 * sparse memfd holding only the header and the first data record (all that EDFlib 1.22/1.23
 * reads when it opens a file without annotations). Returns ECG_ERR_UNSUPPORTED, err untouched,
 * where it declines before EDFlib sees the body (shorter than 256 bytes, a signal count or a
 * samples-per-record field EDFlib would refuse) or cannot state the layout with certainty
 * (another EDFlib version, a header EDFlib reads differently from read_edf.c's parse). Any
 * failure means: let read_edf_memory() decide. Fills *out on success, leaves it untouched on
 * failure. */
enum ecg_status read_edf_layout(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct edf_layout *out, struct ecg_error *err) ECG_WUR;

/* JSON {"fs": 360, "signal": [...], "lead": "MLII"}, or rows of samples x leads: the streaming
 * reader of read_json.c. */
enum ecg_status read_json(const char *buf, size_t len, const struct ecg_read_opts *opts,
                          struct ecg_signal *out, struct ecg_error *err) ECG_WUR;

/* WFDB record (engine/read_wfdb.c): PATH with or without ".hea". */
enum ecg_status read_wfdb_file(const char *path, const struct ecg_read_opts *opts,
                               struct ecg_signal *out, struct ecg_error *err);

/* A WFDB record held in memory: its header text and the signal file the header names. */
struct wfdb_memory {
    const char *hea_name;   /* the names they were sent under, without a directory */
    const char *hea;
    size_t hea_len;
    const char *dat_name;
    const void *dat;
    size_t dat_len;
};

/* One lead (opts->lead) of a WFDB record held in memory (engine/read_wfdb.c). */
enum ecg_status read_wfdb_memory(const struct wfdb_memory *rec, const struct ecg_read_opts *opts,
                                 struct ecg_signal *out, struct ecg_error *err);

/*
 * Short-number lines (read_csv_short.c): from *pp, the run of lines that each hold a number
 * of at most 8 digits and one '.' alone ("-?B\r?\n", as read_csv.c's fast path takes them),
 * read to exactly strtof's bits into v[0, room). Returns how many were read; *pp moves past
 * them. Stops at the first other line (*full false), at a short line with no room left (*full
 * true, *pp at it), or before the last 72 bytes or so of [begin, end). begin is the input's
 * first byte: reads stay inside [begin, end). csv_short_lines takes the fastest the CPU runs;
 * the other two are for tests and benchmarks (csv_short_avx2 only where the CPU has AVX2).
 */
size_t csv_short_lines(const char *begin, const char *end, const char **pp, float *v,
                       size_t room, bool *full);
size_t csv_short_word(const char *begin, const char *end, const char **pp, float *v, size_t room,
                      bool *full);
size_t csv_short_avx2(const char *begin, const char *end, const char **pp, float *v, size_t room,
                      bool *full);

/* Whether a source read as format (AUTO: sniffed from its first bytes, buf[0, len)) is CSV. */
bool read_is_csv(enum ecg_format format, const void *buf, size_t len);

/* ---------------------------------------------------------------- helpers shared by readers */

/*
 * A growing array of samples. Starts zeroed; grows geometrically; refuses to hold more than
 * max samples (0 = no limit). Owned by the reader until handed to an ecg_signal.
 */
struct sample_buf {
    float *v;
    size_t n;
    size_t cap;
    size_t max;
};

/* Makes room for at least `extra` more samples. ECG_ERR_TOO_LARGE past max, ECG_ERR_NOMEM. */
enum ecg_status sample_buf_reserve(struct sample_buf *sb, size_t extra,
                                   struct ecg_error *err) ECG_WUR;
void sample_buf_fini(struct sample_buf *sb);

/*
 * Selects a lead: NULL or "" means index 0; a string of decimal digits is a 0-based index
 * (written to *index, returns true); anything else is a name (returns false, *index = -1).
 * An index too large to be real is clamped to LONG_MAX so that it fails as "not found".
 */
bool read_lead_index(const char *lead, long *index);

/* The rate to use when the format carries none: opts->fs_hz, checked; names the format. */
enum ecg_status read_rate_from_opts(const struct ecg_read_opts *opts, const char *format_name,
                                    double *fs_hz, struct ecg_error *err) ECG_WUR;

/* Checks a rate read from a file: finite and > 0. */
enum ecg_status read_check_rate(double fs_hz, const char *format_name, const char *code,
                                struct ecg_error *err) ECG_WUR;

/* Refuses NaN/Inf: returns ECG_ERR_FORMAT naming the 0-based sample index of the first one. */
enum ecg_status read_check_finite(const float *v, size_t n, const char *format_name,
                                  struct ecg_error *err) ECG_WUR;

/* Checks n against opts->max_samples (0 = no limit). */
enum ecg_status read_check_count(size_t n, const struct ecg_read_opts *opts,
                                 struct ecg_error *err) ECG_WUR;

/*
 * Renders bytes for a message: at most READ_QUOTE_MAX bytes, printable ASCII kept, anything else
 * as \xNN, "..." appended when cut. dst gets a NUL-terminated string (cap >= 4 * 32 + 8 is ample).
 */
void read_quote(char *dst, size_t cap, const char *src, size_t len);

/* Copies a lead label into sig->lead, trimmed of spaces and cut to fit. */
void read_set_lead(struct ecg_signal *sig, const char *label, size_t len);

#endif /* ECG_READ_INTERNAL_H */
