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
#include "read_internal.h"

/* Guards EDFlib's global file table (see the file comment). */
static pthread_mutex_t edflib_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* Reads the EDF file at path (opened by EDFlib); name is what messages call it. */
static enum ecg_status read_edf_path(const char *path, const char *name,
                                     const struct ecg_read_opts *opts, struct ecg_signal *out,
                                     struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct edf_hdr_struct *hdr = NULL;
    double *chunk = NULL;
    float *samples = NULL;
    int handle = -1;

    pthread_mutex_lock(&edflib_lock);
    hdr = calloc(1, sizeof *hdr); /* ~100 KB: not for the stack */
    chunk = malloc(EDF_CHUNK * sizeof *chunk);
    if (!hdr || !chunk) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate EDF buffers");
        goto out;
    }
    if (edfopen_file_readonly(path, hdr, EDFLIB_DO_NOT_READ_ANNOTATIONS) != 0) {
        status = open_error(hdr->filetype, name, err);
        goto out;
    }
    handle = hdr->handle;

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
    samples = malloc(n * sizeof *samples);
    if (!samples) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "cannot allocate %zu samples", n);
        goto out;
    }
    double scale = to_millivolts(sp->physdimension);
    for (size_t done = 0; done < n;) {
        int want = n - done < EDF_CHUNK ? (int)(n - done) : EDF_CHUNK;
        int got = edfread_physical_samples(handle, signal, want, chunk);
        if (got != want) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "bad_edf",
                              "%s: signal %d: read %d of %d samples at sample %zu (truncated?)",
                              name, signal, got, want, done);
            goto out;
        }
        for (int i = 0; i < got; i++)
            samples[done + (size_t)i] = (float)(chunk[i] * scale);
        done += (size_t)got;
    }
    status = read_check_finite(samples, n, name, err);
    if (status != ECG_OK)
        goto out;
    read_set_lead(out, sp->label, strnlen(sp->label, sizeof sp->label));
    out->samples = samples;
    out->n = n;
    out->fs_hz = fs_hz;
    samples = NULL;
out:
    if (handle >= 0)
        edfclose_file(handle);
    pthread_mutex_unlock(&edflib_lock);
    free(samples);
    free(chunk);
    free(hdr);
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
