/*
 * fuzz_wfdb.c - libFuzzer harness for the WFDB record reader (engine/read_wfdb.c).
 *
 * Input: one option byte (as in fuzz_common.h), the header text, a NUL, then the signal file's
 * bytes. They are written to r.hea and r.dat in a private directory on tmpfs (/dev/shm: on a
 * disk file system the truncations and writebacks took 99 % of the time, 281 exec/s against
 * 25,800) and the record is read with ecg_read_file(); the reader's contract is then checked as
 * for the other readers.
 */
#include <stdio.h>
#include <unistd.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char record_dir[64];

/* The record's files and their directory go when the process exits. */
static void remove_record(void)
{
    char path[96];
    snprintf(path, sizeof path, "%s/r.hea", record_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/r.dat", record_dir);
    unlink(path);
    rmdir(record_dir);
}

static int write_all(const char *path, const uint8_t *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t wrote = len ? fwrite(bytes, 1, len, f) : 0;
    return fclose(f) == 0 && wrote == len ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const leads[] = {NULL, "0", "1", "2", "MLII", "V1", "", "99999999999999"};
    if (size < 1)
        return 0;
    if (!record_dir[0]) {
        snprintf(record_dir, sizeof record_dir, "/dev/shm/fuzz-wfdb-XXXXXX");
        if (!mkdtemp(record_dir)) { /* no tmpfs there: slower, but it runs */
            snprintf(record_dir, sizeof record_dir, "/tmp/fuzz-wfdb-XXXXXX");
            if (!mkdtemp(record_dir))
                __builtin_trap();
        }
        atexit(remove_record);
    }
    const uint8_t *hea = data + 1, *end = data + size;
    const uint8_t *nul = memchr(hea, 0, (size_t)(end - hea));
    const uint8_t *dat = nul ? nul + 1 : end;
    size_t hea_len = (size_t)((nul ? nul : end) - hea);

    char hea_path[96], dat_path[96], record[96];
    snprintf(hea_path, sizeof hea_path, "%s/r.hea", record_dir);
    snprintf(dat_path, sizeof dat_path, "%s/r.dat", record_dir);
    snprintf(record, sizeof record, "%s/r", record_dir);
    if (write_all(hea_path, hea, hea_len) != 0 || write_all(dat_path, dat, (size_t)(end - dat)))
        __builtin_trap();

    uint8_t opt = data[0];
    struct ecg_read_opts opts = {
        .format = ECG_FORMAT_WFDB,
        .lead = leads[opt & 7],
        .max_samples = (opt & 0x40) ? 64 : 0,
    };
    struct ecg_signal sig;
    struct ecg_error err = {0};
    enum ecg_status status = ecg_read_file(record, &opts, &sig, &err);
    fuzz_check(status, &sig, &err, opts.max_samples);
    ecg_signal_free(&sig);
    return 0;
}
