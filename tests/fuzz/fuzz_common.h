/*
 * fuzz_common.h - shared checks for the reader fuzz harnesses (libFuzzer).
 *
 * Each harness feeds the input to one reader through ecg_read_memory() and then checks the
 * reader's contract: on success a non-empty signal of finite samples and a positive rate; on
 * failure an empty output and a message. A broken contract traps, which libFuzzer reports.
 * The first input byte picks reader options (lead, limit), so the fuzzer explores them too.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

static inline void fuzz_check(enum ecg_status status, const struct ecg_signal *sig,
                              const struct ecg_error *err, size_t max_samples)
{
    if (status == ECG_OK) {
        if (!sig->samples || sig->n == 0 || !(sig->fs_hz > 0) || !isfinite(sig->fs_hz))
            __builtin_trap();
        if (max_samples && sig->n > max_samples)
            __builtin_trap();
        for (size_t i = 0; i < sig->n; i++)
            if (!isfinite(sig->samples[i]))
                __builtin_trap();
        if (memchr(sig->lead, 0, sizeof sig->lead) == NULL)
            __builtin_trap();
    } else {
        if (sig->samples || sig->n)
            __builtin_trap();
        if (err->status != status || err->message[0] == 0 ||
            memchr(err->message, 0, sizeof err->message) == NULL)
            __builtin_trap();
    }
}

/* Reads data[1..] with the given format; data[0] chooses options. */
static inline void fuzz_read(const uint8_t *data, size_t size, enum ecg_format format)
{
    static const char *const leads[] = {NULL, "0", "1", "2", "MLII", "V1", "", "99999999999999"};
    if (size < 1)
        return;
    uint8_t opt = data[0];
    struct ecg_read_opts opts = {
        .format = format,
        .fs_hz = (opt & 0x80) ? 0 : 360,
        .lead = leads[opt & 7],
        .max_samples = (opt & 0x40) ? 64 : 0,
    };
    /* An exact-size copy: any read past the end is caught by ASan. */
    size_t len = size - 1;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return;
    memcpy(copy, data + 1, len);
    struct ecg_signal sig;
    struct ecg_error err = {0};
    enum ecg_status status = ecg_read_memory(copy, len, &opts, &sig, &err);
    fuzz_check(status, &sig, &err, opts.max_samples);
    ecg_signal_free(&sig);
    free(copy);
}

#endif /* FUZZ_COMMON_H */
