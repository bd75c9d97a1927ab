/*
 * reader_fixtures.h - helpers shared by the reader tests (test_readers.c, test_readers_hostile.c):
 * reading from memory, building .npy and EDF fixtures, a private temporary directory, the
 * reference signal, and the check every hostile case makes (status, message, empty output).
 *
 * Include after <cmocka.h>. Everything here is static to each test program.
 */
#ifndef READER_FIXTURES_H
#define READER_FIXTURES_H

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <edflib.h>

#include "ecg.h"

static inline enum ecg_status read_mem(const void *bytes, size_t len, enum ecg_format format,
                                       double fs_hz, const char *lead, struct ecg_signal *sig,
                                       struct ecg_error *err)
{
    struct ecg_read_opts opts = {.format = format, .fs_hz = fs_hz, .lead = lead};
    memset(err, 0, sizeof *err);
    return ecg_read_memory(bytes, len, &opts, sig, err);
}

/* A growable byte string for building binary fixtures. */
struct bytes {
    unsigned char *data;
    size_t len;
};

static inline void bytes_add(struct bytes *b, const void *src, size_t len)
{
    b->data = realloc(b->data, b->len + len + 1);
    assert_non_null(b->data);
    memcpy(b->data + b->len, src, len);
    b->len += len;
}

/* An .npy file: version major.0, header dict padded to a multiple of 64, then data. */
static inline struct bytes make_npy(int major, const char *dict, const void *data, size_t data_len)
{
    struct bytes b = {0};
    size_t pre = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    size_t padded = (pre + hlen + 63) / 64 * 64 - pre;
    unsigned char head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    head[8] = (unsigned char)(padded & 0xff);
    head[9] = (unsigned char)(padded >> 8 & 0xff);
    head[10] = (unsigned char)(padded >> 16 & 0xff);
    head[11] = (unsigned char)(padded >> 24 & 0xff);
    bytes_add(&b, head, pre);
    bytes_add(&b, dict, strlen(dict));
    for (size_t i = hlen; i < padded; i++)
        bytes_add(&b, " ", 1);
    bytes_add(&b, "\n", 1);
    if (data_len)
        bytes_add(&b, data, data_len);
    return b;
}

/* A temporary directory for file fixtures, removed by the group teardown. */
static char tmp_dir[64];

static inline void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp_dir, name);
}

static inline void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static inline void *load_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    void *data = malloc((size_t)size);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return data;
}

/* The reference signal: k / 1000 mV with k in [-3000, 3000] (exact in every format). */
#define REF_FS 360
#define REF_N (REF_FS * 4)
static float ref_signal[REF_N];

static inline void make_reference(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < REF_N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = (int)((s >> 33) % 6001) - 3000;
        ref_signal[i] = (float)k / 1000.0f;
    }
}

/*
 * Writes an EDF+ or BDF+ file (EDFlib writes only those) with two signals, "MLII" in mV (the
 * reference) and "V1" in uV (the negated reference, so -1000 times its values), plus an annotation
 * for the + types. Digital values are written (EDFlib's physical writer truncates toward zero): one
 * digital step is 0.001 mV for EDF and 0.00001 mV for BDF.
 */
static inline void write_edf(const char *path, int filetype)
{
    int h = edfopen_file_writeonly(path, filetype, 2);
    if (h < 0)
        fail_msg("edfopen_file_writeonly(%s): %d", path, h);
    bool bdf = filetype == EDFLIB_FILETYPE_BDFPLUS;
    /* Limits whose physical values fit EDF's 8-character fields exactly (+-32 or +-80 mV). */
    int dig_max = bdf ? 8000000 : 32000, dig_min = -dig_max;
    int per_mv = bdf ? 100000 : 1000; /* digital steps per mV */
    for (int sig = 0; sig < 2; sig++) {
        double unit = sig == 0 ? 1.0 : 1000.0; /* physical units per mV */
        assert_int_equal(edf_set_samplefrequency(h, sig, REF_FS), 0);
        assert_int_equal(edf_set_digital_maximum(h, sig, dig_max), 0);
        assert_int_equal(edf_set_digital_minimum(h, sig, dig_min), 0);
        assert_int_equal(edf_set_physical_maximum(h, sig, dig_max * unit / per_mv), 0);
        assert_int_equal(edf_set_physical_minimum(h, sig, dig_min * unit / per_mv), 0);
        assert_int_equal(edf_set_label(h, sig, sig == 0 ? "MLII" : "V1"), 0);
        assert_int_equal(edf_set_physical_dimension(h, sig, sig == 0 ? "mV" : "uV"), 0);
    }
    int buf[REF_FS];
    for (int rec = 0; rec < REF_N / REF_FS; rec++) {
        for (int sig = 0; sig < 2; sig++) {
            for (int i = 0; i < REF_FS; i++) {
                int k = (int)lrintf(ref_signal[rec * REF_FS + i] * 1000.0f) * (per_mv / 1000);
                buf[i] = sig == 0 ? k : -k;
            }
            assert_int_equal(edfwrite_digital_samples(h, buf), 0);
        }
    }
    assert_int_equal(edfwrite_annotation_utf8(h, 10000000, -1, "test event"), 0);
    assert_int_equal(edfclose_file(h), 0);
}

static inline void assert_matches_reference(const struct ecg_signal *sig, float sign,
                                            float tolerance)
{
    assert_int_equal(sig->n, REF_N);
    size_t bad = 0;
    for (size_t i = 0; i < REF_N; i++) {
        float want = sign * ref_signal[i];
        if (tolerance == 0 ? memcmp(&sig->samples[i], &want, sizeof want) != 0
                           : fabsf(sig->samples[i] - want) > tolerance) {
            if (bad < 5)
                fprintf(stderr, "sample %zu: got %.9g want %.9g\n", i, sig->samples[i], want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}
static inline void check_hostile(const char *name, enum ecg_status status,
                                 const struct ecg_signal *sig, const struct ecg_error *err,
                                 enum ecg_status want, const char *message)
{
    if (status != want || !strstr(err->message, message))
        fprintf(stderr, "case \"%s\": status %s (want %s), message \"%s\" (want \"%s\")\n", name,
                ecg_status_str(status), ecg_status_str(want), err->message, message);
    assert_int_equal(status, want);
    assert_non_null(strstr(err->message, message));
    assert_int_equal(err->status, want);
    assert_true(err->code[0] != 0);
    assert_null(sig->samples);
    assert_int_equal(sig->n, 0);
}

/* Group setup and teardown: the reference signal and a private temporary directory. */
static inline int fixtures_setup(void **state)
{
    (void)state;
    make_reference();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ecg-readers-XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static inline int fixtures_teardown(void **state)
{
    (void)state;
    DIR *dir = opendir(tmp_dir);
    if (!dir)
        return -1;
    struct dirent *entry;
    char path[512];
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmp_dir, entry->d_name);
        unlink(path);
    }
    closedir(dir);
    return rmdir(tmp_dir);
}

#endif /* READER_FIXTURES_H */
