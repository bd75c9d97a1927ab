/*
 * read_edf.c - EDF, EDF+ and BDF(+) recordings through EDFlib.
 *
 * The rate of the chosen signal is smp_in_datarecord / datarecord duration; samples come out in
 * physical units, converted to mV when the physical dimension says uV, mV or V. Leads are picked
 * by label (exact, then case-insensitive) or by index; EDFlib hides the EDF+ "EDF Annotations"
 * signals, so indices count ECG signals only.
 *
 * EDFlib opens paths only: for bytes in memory the reader writes them to an anonymous memfd and
 * opens "/proc/self/fd/N".
 *
 * Conversion: EDFlib hands out the clamped digital values (edfread_digital_samples) and
 * engine/edf_convert.h turns them into mV with EDFlib's own arithmetic (what
 * edfread_physical_samples computes, then the unit's scale), so that the CUDA backend, which
 * includes the same header, converts every sample to the same float. read_edf_layout() is the
 * device's first step: EDFlib validates the body from a sparse memfd (header and first data
 * record written, the rest a hole), with every check of the reader, and the layout says where
 * the chosen signal's bytes lie; gpu/cuda_read.cu converts them.
 *
 * Threading: EDFlib keeps its open files in a global table, and its open and close functions
 * are not thread-safe (it also refuses to open one path twice). One process-wide mutex,
 * edflib_lock, serialises every use of EDFlib; EDF reads are short, so this costs little.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <edflib.h>

#include "ecg.h"
#include "edf_convert.h"
#include "read_internal.h"

/* Guards EDFlib's global file table (see the file comment), and edflib_header. */
static pthread_mutex_t edflib_lock = PTHREAD_MUTEX_INITIALIZER;
/* The header block every EDFlib open fills (~150 KB, which EDFlib clears on each open): one for
 * the process, like EDFlib's own file table, used only under edflib_lock. Allocating it for each
 * read cost a fresh mapping and 37 page faults per read. */
static struct edf_hdr_struct edflib_header;

/* Samples read per EDFlib call. */
#define EDF_CHUNK 65536

/* EDFlib's open error (hdr.filetype after a failed open) as a status and message. */
static enum ecg_status open_error(int code, const char *name, struct ecg_error *err)
{
    const char *why;
    enum ecg_status status = ECG_ERR_FORMAT;
    switch (code) {
    case EDFLIB_MALLOC_ERROR:
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "%s: EDFlib ran out of memory", name);
    case EDFLIB_NO_SUCH_FILE_OR_DIRECTORY:
        return ecg_fail(err, ECG_ERR_NOT_FOUND, "not_found", "%s: no such file", name);
    case EDFLIB_FILE_CONTAINS_FORMAT_ERRORS:
        why = "the header is malformed or the file size does not match it";
        break;
    case EDFLIB_MAXFILES_REACHED:
        return ecg_fail(err, ECG_ERR_BUSY, "busy", "%s: too many EDF files open", name);
    case EDFLIB_FILE_READ_ERROR:
        why = "could not read the header (truncated?)";
        break;
    case EDFLIB_FILE_ALREADY_OPENED:
        return ecg_fail(err, ECG_ERR_BUSY, "busy", "%s: file already open", name);
    case EDFLIB_FILETYPE_ERROR:
        why = "not an EDF or BDF file";
        break;
    case EDFLIB_FILE_IS_DISCONTINUOUS:
        why = "discontinuous EDF+D/BDF+D recordings are not supported";
        status = ECG_ERR_UNSUPPORTED;
        break;
    case EDFLIB_ARCH_ERROR:
        return ecg_fail(err, ECG_ERR_INTERNAL, "internal", "%s: EDFlib architecture error", name);
    default:
        why = "EDFlib could not open it";
        break;
    }
    return ecg_fail(err, status, "bad_edf", "%s: %s (EDFlib error %d)", name, why, code);
}

/* Scale from the physical dimension to mV; 1 when unknown. */
static double to_millivolts(const char *dim)
{
    char d[16];
    size_t n = 0;
    for (const char *p = dim; *p && n + 1 < sizeof d; p++)
        if (*p != ' ')
            d[n++] = *p;
    d[n] = 0;
    if (strcmp(d, "uV") == 0 || strcmp(d, "\xb5V") == 0 || strcmp(d, "\xc2\xb5V") == 0)
        return 1e-3;
    if (strcmp(d, "V") == 0)
        return 1e3;
    return 1.0;
}

/* Finds the signal named by opts->lead (label or index) among hdr's signals. */
static enum ecg_status pick_signal(const struct edf_hdr_struct *hdr, const char *lead,
                                   const char *name, int *signal, struct ecg_error *err)
{
    long index;
    if (hdr->edfsignals <= 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_edf", "%s holds no signals", name);
    if (read_lead_index(lead, &index)) {
        if (index >= hdr->edfsignals)
            return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                            "%s: lead %ld does not exist (the file has %d signals)", name, index,
                            hdr->edfsignals);
        *signal = (int)index;
        return ECG_OK;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < hdr->edfsignals; i++) {
            char label[sizeof hdr->signalparam[i].label];
            memcpy(label, hdr->signalparam[i].label, sizeof label);
            label[sizeof label - 1] = 0;
            for (size_t n = strlen(label); n && label[n - 1] == ' '; n--)
                label[n - 1] = 0;
            if (pass == 0 ? strcmp(label, lead) == 0 : strcasecmp(label, lead) == 0) {
                *signal = i;
                return ECG_OK;
            }
        }
    }
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, lead, strlen(lead));
    return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found", "%s: no signal labelled \"%s\"", name,
                    q);
}

/* The chosen signal of an open file, checked as read_edf_memory() checks it. */
struct edf_pick {
    int signal; /* EDFlib's index (annotation signals hidden) */
    double fs_hz;
    size_t n;
};

/* Opens path with EDFlib (under edflib_lock, which the caller holds) and picks and checks the
 * signal: every check of the reader but the finite one. On success *handle is open (the caller
 * closes it); on failure it is -1 and err says why, in the reader's words. */
static enum ecg_status open_signal(const char *path, const char *name,
                                   const struct ecg_read_opts *opts, struct edf_hdr_struct *hdr,
                                   int *handle, struct edf_pick *pick, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    *handle = -1;
    if (edfopen_file_readonly(path, hdr, EDFLIB_DO_NOT_READ_ANNOTATIONS) != 0)
        return open_error(hdr->filetype, name, err);
    *handle = hdr->handle;

    int signal = 0;
    status = pick_signal(hdr, opts->lead, name, &signal, err);
    if (status != ECG_OK)
        goto out;
    const struct edf_param_struct *sp = &hdr->signalparam[signal];
    if (hdr->datarecord_duration <= 0 || sp->smp_in_datarecord <= 0) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "bad_edf",
                          "%s: signal %d has no sampling rate (record duration %lld x 100 ns, "
                          "%d samples per record)",
                          name, signal, hdr->datarecord_duration, sp->smp_in_datarecord);
        goto out;
    }
    double fs_hz = (double)sp->smp_in_datarecord * (double)EDFLIB_TIME_DIMENSION /
                   (double)hdr->datarecord_duration;
    status = read_check_rate(fs_hz, name, "bad_edf", err);
    if (status != ECG_OK)
        goto out;
    if (sp->smp_in_file <= 0) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "%s: signal %d holds no samples",
                          name, signal);
        goto out;
    }
    if ((unsigned long long)sp->smp_in_file > SIZE_MAX / sizeof(float)) {
        status = ecg_fail(err, ECG_ERR_TOO_LARGE, "too_many_samples", "%s: %lld samples", name,
                          sp->smp_in_file);
        goto out;
    }
    size_t n = (size_t)sp->smp_in_file;
    status = read_check_count(n, opts, err);
    if (status != ECG_OK)
        goto out;
    pick->signal = signal;
    pick->fs_hz = fs_hz;
    pick->n = n;
out:
    if (status != ECG_OK) {
        edfclose_file(*handle);
        *handle = -1;
    }
    return status;
}

/* The calibration of signal sp: EDFlib's bitvalue and offset, and the unit's scale to mV. */
static void calibration(const struct edf_param_struct *sp, double *bitvalue, double *offset,
                        double *scale)
{
    *bitvalue = edf_bitvalue(sp->phys_min, sp->phys_max, sp->dig_min, sp->dig_max);
    *offset = edf_offset(sp->phys_max, sp->dig_max, *bitvalue);
    *scale = to_millivolts(sp->physdimension);
}

/* Reads the EDF file at path (opened by EDFlib); name is what messages call it. EDFlib hands
 * out the clamped digital values; edf_convert.h turns them into mV, as the device does. */
static enum ecg_status read_edf_path(const char *path, const char *name,
                                     const struct ecg_read_opts *opts, struct ecg_signal *out,
                                     struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct edf_hdr_struct *hdr = NULL;
    int *chunk = NULL;
    float *samples = NULL;
    int handle = -1;
    struct edf_pick pick = {0};

    pthread_mutex_lock(&edflib_lock);
    hdr = &edflib_header;
    status = open_signal(path, name, opts, hdr, &handle, &pick, err);
    if (status != ECG_OK)
        goto out;
    size_t n = pick.n;
    int signal = pick.signal;
    const struct edf_param_struct *sp = &hdr->signalparam[signal];
    /* The chunk no larger than the signal: a short recording does not pay for 256 KB. */
    chunk = malloc((n < EDF_CHUNK ? n : EDF_CHUNK) * sizeof *chunk);
    samples = malloc(n * sizeof *samples);
    if (!chunk || !samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", n);
        goto out;
    }
    double bitvalue, offset, scale;
    calibration(sp, &bitvalue, &offset, &scale);
    for (size_t done = 0; done < n;) {
        int want = n - done < EDF_CHUNK ? (int)(n - done) : EDF_CHUNK;
        int got = edfread_digital_samples(handle, signal, want, chunk);
        if (got != want) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_edf",
                              "%s: signal %d: read %d of %d samples at sample %zu (truncated?)",
                              name, signal, got, want, done);
            goto out;
        }
        for (int i = 0; i < got; i++)
            samples[done + (size_t)i] = edf_to_mv(chunk[i], bitvalue, offset, scale);
        done += (size_t)got;
    }
    status = read_check_finite(samples, n, name, err);
    if (status != ECG_OK)
        goto out;
    read_set_lead(out, sp->label, strnlen(sp->label, sizeof sp->label));
    out->samples = samples;
    out->n = n;
    out->fs_hz = pick.fs_hz;
    samples = NULL;
out:
    if (handle >= 0)
        edfclose_file(handle);
    pthread_mutex_unlock(&edflib_lock);
    free(samples);
    free(chunk);
    if (status != ECG_OK)
        memset(out, 0, sizeof *out);
    return status;
}

enum ecg_status read_edf_file(const char *path, const struct ecg_read_opts *opts,
                              struct ecg_signal *out, struct ecg_error *err)
{
    static const struct ecg_read_opts defaults = {0};
    return read_edf_path(path, path, opts ? opts : &defaults, out, err);
}

enum ecg_status read_edf_memory(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    int fd = -1;

    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "EDF input is empty");
    if (len < 256)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_edf",
                        "EDF input truncated: %zu bytes, the fixed header alone is 256", len);
    fd = memfd_create("ecg-edf", MFD_CLOEXEC);
    if (fd < 0) {
        status = ecg_fail(err, ECG_ERR_IO, "io_error", "memfd_create: %s", strerror(errno));
        goto out;
    }
    for (size_t done = 0; done < len;) {
        ssize_t wrote = write(fd, (const char *)buf + done, len - done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0) {
            status = ecg_fail(err, ECG_ERR_IO, "io_error", "memfd write: %s", strerror(errno));
            goto out;
        }
        done += (size_t)wrote;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    status = read_edf_path(path, "EDF input", opts, out, err);
out:
    if (fd >= 0)
        close(fd);
    return status;
}

/* ---------------------------------------------------------------- layout for the device */

/* EDFlib versions whose open was checked to read only the header, the file size and (EDF+/BDF+)
 * the first data record when annotations are not read: 1.22 from its source, 1.23 from both its
 * source and tests. Another version makes the layout step decline. */
#define EDFLIB_LAYOUT_MIN_VERSION 122
#define EDFLIB_LAYOUT_MAX_VERSION 123

/* EDFlib refuses records larger than this (BDF; EDF: 10 MiB). */
#define EDF_RECORD_MAX (15u * 1024 * 1024)

/* An integer header field as EDFlib accepts one: an optional sign, digits, trailing spaces. */
static bool header_int(const unsigned char *field, size_t width, long *value)
{
    size_t i = 0;
    bool negative = false, digits = false;
    long v = 0;
    if (i < width && (field[i] == '+' || field[i] == '-'))
        negative = field[i++] == '-';
    for (; i < width && field[i] >= '0' && field[i] <= '9'; i++) {
        v = v * 10 + (field[i] - '0'); /* at most 8 digits: no overflow */
        digits = true;
    }
    for (; i < width; i++)
        if (field[i] != ' ')
            return false;
    *value = negative ? -v : v;
    return digits;
}

/* Writes buf[0, len) to fd at offset 0. */
static bool write_all(int fd, const unsigned char *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t wrote = pwrite(fd, buf + done, len - done, (off_t)done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            return false;
        done += (size_t)wrote;
    }
    return true;
}

enum ecg_status read_edf_layout(const void *buf, size_t len, const struct ecg_read_opts *opts,
                                struct edf_layout *out, struct ecg_error *err)
{
    static const struct ecg_read_opts defaults = {0};
    enum ecg_status status = ECG_OK;
    const unsigned char *b = buf;
    struct edf_hdr_struct *hdr = NULL;
    long spr[EDFLIB_MAXSIGNALS];
    long signals = 0;
    size_t header_bytes, record_bytes = 0;
    int bytes_per_sample, handle = -1, fd = -1;
    bool locked = false;
    struct edf_pick pick = {0};
    struct edf_layout l;

    memset(&l, 0, sizeof l);
    if (!opts)
        opts = &defaults;
    /* before EDFlib has seen the body: anything odd is the host reader's to word */
    if (len < 256 || len > (size_t)INT64_MAX || edflib_version() < EDFLIB_LAYOUT_MIN_VERSION ||
        edflib_version() > EDFLIB_LAYOUT_MAX_VERSION)
        return ECG_ERR_UNSUPPORTED;
    if (!header_int(b + 252, 4, &signals) || signals < 1 || signals > EDFLIB_MAXSIGNALS)
        return ECG_ERR_UNSUPPORTED;
    header_bytes = 256 * ((size_t)signals + 1);
    if (header_bytes > len)
        return ECG_ERR_UNSUPPORTED;
    bytes_per_sample = b[0] == 0xff ? 3 : 2; /* EDFlib's test: a first byte of -1 means BDF */
    for (long i = 0; i < signals; i++) {
        if (!header_int(b + 256 + signals * 216 + i * 8, 8, &spr[i]) || spr[i] < 1)
            return ECG_ERR_UNSUPPORTED;
        record_bytes += (size_t)spr[i] * (size_t)bytes_per_sample;
    }
    if (record_bytes > EDF_RECORD_MAX)
        return ECG_ERR_UNSUPPORTED;

    /* EDFlib opens paths: a sparse memfd as long as the body, holding what EDFlib reads */
    fd = memfd_create("ecg-edf-layout", MFD_CLOEXEC);
    if (fd < 0)
        return ECG_ERR_UNSUPPORTED;
    if (!write_all(fd, b, header_bytes + record_bytes < len ? header_bytes + record_bytes : len) ||
        ftruncate(fd, (off_t)len) != 0) {
        status = ECG_ERR_UNSUPPORTED;
        goto out;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    pthread_mutex_lock(&edflib_lock);
    locked = true;
    hdr = &edflib_header;
    status = open_signal(path, "EDF input", opts, hdr, &handle, &pick, err);
    if (status != ECG_OK)
        goto out;

    /* EDFlib hides the annotation signals: find the chosen one among all, and check that this
     * parse of the header agrees with EDFlib's wherever EDFlib shows its own */
    const char *annotation = hdr->filetype == EDFLIB_FILETYPE_EDFPLUS   ? "EDF Annotations "
                             : hdr->filetype == EDFLIB_FILETYPE_BDFPLUS ? "BDF Annotations "
                                                                        : NULL;
    bool bdf = hdr->filetype == EDFLIB_FILETYPE_BDF || hdr->filetype == EDFLIB_FILETYPE_BDFPLUS;
    bool edf = hdr->filetype == EDFLIB_FILETYPE_EDF || hdr->filetype == EDFLIB_FILETYPE_EDFPLUS;
    status = ECG_ERR_UNSUPPORTED; /* until the layout is certain */
    if ((!bdf && !edf) || bytes_per_sample != (bdf ? 3 : 2))
        goto out;
    size_t offset = 0, raw = (size_t)signals;
    int visible = 0;
    for (size_t i = 0; i < (size_t)signals; i++) {
        const unsigned char *label = b + 256 + i * 16;
        size_t bytes = (size_t)spr[i] * (size_t)bytes_per_sample;
        if (annotation && memcmp(label, annotation, 16) == 0) {
            offset += bytes; /* hidden by EDFlib, but in every record */
            continue;
        }
        if (visible >= hdr->edfsignals)
            goto out;
        const struct edf_param_struct *sp = &hdr->signalparam[visible];
        if (sp->smp_in_datarecord != spr[i] || strncmp(sp->label, (const char *)label, 16) != 0)
            goto out;
        if (visible == pick.signal) {
            raw = i;
            l.signal_offset = offset;
        }
        visible++;
        offset += bytes;
    }
    if (visible != hdr->edfsignals || raw == (size_t)signals || hdr->datarecords_in_file < 1)
        goto out;
    l.records = (size_t)hdr->datarecords_in_file;
    if (l.records > (len - header_bytes) / record_bytes ||
        header_bytes + l.records * record_bytes != len)
        goto out;
    l.samples_per_record = (size_t)spr[raw];
    if (pick.n != l.records * l.samples_per_record)
        goto out;

    const struct edf_param_struct *sp = &hdr->signalparam[pick.signal];
    l.header_bytes = header_bytes;
    l.record_bytes = record_bytes;
    l.n = pick.n;
    l.bytes_per_sample = bytes_per_sample;
    l.dig_min = sp->dig_min;
    l.dig_max = sp->dig_max;
    calibration(sp, &l.bitvalue, &l.offset, &l.scale);
    l.fs_hz = pick.fs_hz;
    {
        struct ecg_signal named;
        memset(&named, 0, sizeof named);
        read_set_lead(&named, sp->label, strnlen(sp->label, sizeof sp->label));
        memcpy(l.lead, named.lead, sizeof l.lead);
    }
    *out = l;
    status = ECG_OK;
out:
    if (handle >= 0)
        edfclose_file(handle);
    if (locked)
        pthread_mutex_unlock(&edflib_lock);
    if (fd >= 0)
        close(fd);
    return status;
}
