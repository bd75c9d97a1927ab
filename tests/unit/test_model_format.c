/*
 * test_model_format.c - the .ecgm model file format (engine/model_format.c, models/FORMAT.md):
 * round trip, description, and hostile files (each refused with its own message), plus the
 * SHA-256 and CRC-32 the format relies on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model.h"

/* ---------------------------------------------------------------- helpers */

static struct ecg_model *sample_model(void)
{
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_create(&arch, &params, &err);
    assert_non_null(m);
    for (size_t i = 0; i < m->layout.n_weights; i++)
        m->weights[i] = (float)sin(0.37 * (double)i) * 0.3f;
    m->calib.rr_window = 4;
    m->calib.recon_center = -1.25;
    m->calib.recon_scale = 0.75;
    m->calib.rel_center = 0.03;
    m->calib.rel_scale = 0.5;
    m->calib.rr_center = 0.01;
    m->calib.rr_scale = 0.04;
    m->calib.rr_weight = 0.5;
    m->calib.threshold = 3.5;
    m->calib.percentile = 99.0;
    free(m->calib.quantiles);
    m->calib.n_quantiles = 101;
    m->calib.quantiles = malloc(101 * sizeof(double));
    assert_non_null(m->calib.quantiles);
    for (int q = 0; q <= 100; q++)
        m->calib.quantiles[q] = -3.0 + 0.06 * q;
    free(m->prov.records);
    m->prov.records = strdup("mitdb:101,106 lead 0");
    m->prov.train_beats = 4242;
    m->prov.epochs = 3;
    m->prov.beats_mode = ECG_BEATS_NORMAL;
    m->prov.batch_size = 64;
    m->prov.learning_rate = 2e-3;
    m->prov.schedule = 1;
    m->prov.kl_weight = 0.1;
    m->prov.final_loss = 0.125;
    m->prov.seed = 12345678901ull;
    m->prov.loss_curve = malloc(3 * sizeof(float));
    assert_non_null(m->prov.loss_curve);
    m->prov.loss_curve[0] = 1.5f;
    m->prov.loss_curve[1] = 0.5f;
    m->prov.loss_curve[2] = 0.125f;
    return m;
}

static void serialize(const struct ecg_model *m, struct ecg_buf *out)
{
    struct ecg_error err = {0};
    memset(out, 0, sizeof *out);
    assert_int_equal(ecg_model_serialize(m, out, &err), ECG_OK);
    assert_true(out->len > ECG_MODEL_HEADER_BYTES);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void putf64(uint8_t *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put64(p, bits);
}

/* Rewrites the header's payload length and CRC for a payload that was edited on purpose. */
static void reseal(uint8_t *file, size_t len)
{
    put64(file + 16, len - ECG_MODEL_HEADER_BYTES);
    put32(file + 24, ecg_crc32(0, file + ECG_MODEL_HEADER_BYTES, len - ECG_MODEL_HEADER_BYTES));
}

/* Parses bytes and expects a refusal with this code and a message containing `needle`. */
static void expect_refused(const uint8_t *bytes, size_t len, const char *code, const char *needle)
{
    struct ecg_error err = {0};
    struct ecg_model *m = ecg_model_parse(bytes, len, "broken", &err);
    if (m) {
        ecg_model_free(m);
        print_error("accepted a broken file (expected %s)\n", needle);
        fail();
    }
    assert_int_equal(err.status, ECG_ERR_MODEL);
    assert_string_equal(err.code, code);
    if (!strstr(err.message, needle)) {
        print_error("message \"%s\" lacks \"%s\"\n", err.message, needle);
        fail();
    }
}

/* Payload offsets (FORMAT.md) of a few fields, plus the header's 32 bytes. */
#define OFF(payload_offset) (ECG_MODEL_HEADER_BYTES + (payload_offset))
#define OFF_BEAT_LEN OFF(0)
#define OFF_LATENT OFF(4)
#define OFF_ENC1 OFF(12)
#define OFF_N_WEIGHTS OFF(32)
#define OFF_FS OFF(36)
#define OFF_PARAMS_BEAT_LEN OFF(100)
#define OFF_NORM OFF(104)
#define OFF_PERCENTILE OFF(180)
#define OFF_N_QUANTILES OFF(188)
#define OFF_QUANTILES OFF(192)

/* ---------------------------------------------------------------- tests */

static void test_sha256_vectors(void **state)
{
    (void)state;
    char hex[65];
    ecg_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    ecg_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ecg_sha256_hex(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a' (FIPS 180-2 appendix B.3) */
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    ecg_sha256_hex(a, 1000000, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
    assert_int_equal(ecg_crc32(0, "123456789", 9), 0xcbf43926u);
    assert_int_equal(ecg_crc32(ecg_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct ecg_model *m = sample_model();
    char path[] = "/tmp/ecgd_model_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct ecg_error err = {0};
    assert_int_equal(ecg_model_save(m, path, &err), ECG_OK);
    assert_int_equal(strlen(m->sha256), 64);

    struct ecg_model *r = ecg_model_load(path, &err);
    assert_non_null(r);
    assert_string_equal(r->sha256, m->sha256);
    assert_memory_equal(&r->arch, &m->arch, sizeof m->arch);
    assert_memory_equal(&r->layout, &m->layout, sizeof m->layout);
    assert_memory_equal(&r->params, &m->params, sizeof m->params);
    assert_memory_equal(r->weights, m->weights, m->layout.n_weights * sizeof(float));
    assert_int_equal(r->calib.rr_window, 4);
    assert_true(r->calib.recon_center == -1.25 && r->calib.recon_scale == 0.75);
    assert_true(r->calib.rel_center == 0.03 && r->calib.rel_scale == 0.5);
    assert_true(r->calib.rr_center == 0.01 && r->calib.rr_scale == 0.04);
    assert_true(r->calib.rr_weight == 0.5 && r->calib.threshold == 3.5);
    assert_true(r->calib.percentile == 99.0);
    assert_int_equal(r->calib.n_quantiles, 101);
    assert_memory_equal(r->calib.quantiles, m->calib.quantiles, 101 * sizeof(double));
    assert_string_equal(r->prov.records, "mitdb:101,106 lead 0");
    assert_int_equal(r->prov.train_beats, 4242);
    assert_int_equal(r->prov.epochs, 3);
    assert_int_equal(r->prov.batch_size, 64);
    assert_true(r->prov.learning_rate == 2e-3 && r->prov.final_loss == 0.125);
    assert_true(r->prov.schedule == 1 && r->prov.kl_weight == 0.1);
    assert_true(r->prov.seed == 12345678901ull);
    assert_true(r->prov.loss_curve[1] == 0.5f);

    /* the digest is that of the file's bytes */
    struct ecg_buf bytes;
    serialize(m, &bytes);
    char hex[65];
    ecg_sha256_hex(bytes.data, bytes.len, hex);
    assert_string_equal(hex, r->sha256);
    /* saving is deterministic: the re-serialised loaded model is byte-identical */
    struct ecg_buf again;
    serialize(r, &again);
    assert_int_equal(again.len, bytes.len);
    assert_memory_equal(again.data, bytes.data, bytes.len);

    struct ecg_model_info info;
    ecg_model_get_info(r, &info);
    assert_string_equal(info.name, strrchr(path, '/') + 1);
    assert_string_equal(info.sha256, r->sha256);
    assert_int_equal(info.beat_len, 256);
    assert_int_equal(info.latent_dim, 2);
    assert_int_equal(info.channels[0], 4);
    assert_int_equal(info.channels[2], 16);
    assert_true(info.params.analysis_fs_hz == 250.0);
    assert_true(info.threshold == 3.5 && info.threshold_percentile == 99.0);
    assert_string_equal(info.records, "mitdb:101,106 lead 0");
    assert_int_equal(info.train_beats, 4242);
    assert_int_equal(info.epochs, 3);
    assert_true(info.final_loss == 0.125);
    assert_true(info.seed == 12345678901ull);

    struct ecg_buf json = {0};
    ecg_model_write_json(r, &json);
    assert_false(json.failed);
    assert_non_null(strstr(json.data, "\"threshold\":3.5"));
    assert_non_null(strstr(json.data, "\"encoder_channels\":[4,8,16]"));
    assert_non_null(strstr(json.data, "\"records\":\"mitdb:101,106 lead 0\""));
    assert_non_null(strstr(json.data, "\"loss_curve\":[1.5,0.5,0.125]"));
    assert_non_null(strstr(json.data, "\"n_weights\":1622"));
    assert_non_null(strstr(json.data, "\"schedule\":\"cosine\""));
    assert_int_equal(json.data[json.len - 1], '}');

    ecg_buf_fini(&json);
    ecg_buf_fini(&bytes);
    ecg_buf_fini(&again);
    ecg_model_free(r);
    ecg_model_free(m);
    unlink(path);
}

static void test_missing_file(void **state)
{
    (void)state;
    struct ecg_error err = {0};
    assert_null(ecg_model_load("/nonexistent/dir/none.ecgm", &err));
    assert_int_equal(err.status, ECG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "/nonexistent/dir/none.ecgm"));
}

/* Header-level damage: each kind has its own message. */
static void test_broken_headers(void **state)
{
    (void)state;
    struct ecg_model *m = sample_model();
    struct ecg_buf good;
    serialize(m, &good);
    size_t len = good.len;
    uint8_t *b = malloc(len + 16);
    assert_non_null(b);
    const uint8_t *g = (const uint8_t *)good.data;

    expect_refused(g, 0, "model_truncated", "model file is empty");
    expect_refused(g, 20, "model_truncated", "truncated in its header: 20 bytes");

    memcpy(b, g, len);
    b[0] = 'X';
    expect_refused(b, len, "model_magic", "bad magic");

    memcpy(b, g, len);
    put32(b + 8, 2);
    expect_refused(b, len, "model_version", "version 2 is newer than this build reads (1)");

    memcpy(b, g, len);
    put32(b + 8, 0);
    expect_refused(b, len, "model_version", "invalid model format version 0");

    memcpy(b, g, len);
    put32(b + 12, 4);
    expect_refused(b, len, "model_flags", "unknown header flags 0x4");

    expect_refused(g, len - 10, "model_truncated", "header promises");

    memcpy(b, g, len);
    memset(b + len, 0, 3);
    expect_refused(b, len + 3, "model_trailing", "3 unexpected bytes after the model payload");

    memcpy(b, g, len);
    b[len - 5] ^= 0x40; /* a bit flip inside the weights */
    expect_refused(b, len, "model_checksum", "corrupt: CRC-32");

    /* an absurd payload length in the header is a truncation, not an allocation */
    memcpy(b, g, len);
    put64(b + 16, UINT64_MAX);
    expect_refused(b, len, "model_truncated", "header promises 18446744073709551615");

    free(b);
    ecg_buf_fini(&good);
    ecg_model_free(m);
}

/* Payload-level damage behind a valid checksum (a crafted or mis-written file). */
static void test_broken_payloads(void **state)
{
    (void)state;
    struct ecg_model *m = sample_model();
    struct ecg_buf good;
    serialize(m, &good);
    size_t len = good.len;
    uint8_t *b = malloc(len + 64);
    assert_non_null(b);
    const uint8_t *g = (const uint8_t *)good.data;

    /* the untouched copy parses */
    struct ecg_error err = {0};
    struct ecg_model *ok = ecg_model_parse(g, len, "ok", &err);
    assert_non_null(ok);
    ecg_model_free(ok);

#define EDIT(stmt, code, needle)                   \
    do {                                           \
        memcpy(b, g, len);                         \
        stmt;                                      \
        reseal(b, len);                            \
        expect_refused(b, len, code, needle);      \
    } while (0)

    EDIT(put32(b + OFF_BEAT_LEN, 1000000), "model_dims", "beat_len 1000000 outside [16, 4096]");
    EDIT(put32(b + OFF_BEAT_LEN, 260), "model_dims", "beat_len 260 is not a multiple of 8");
    EDIT(put32(b + OFF_LATENT, 0), "model_dims", "latent_dim 0 outside [1, 64]");
    EDIT(put32(b + OFF_ENC1, 100000), "model_dims", "encoder width 1 is 100000");
    EDIT(put32(b + OFF_N_WEIGHTS, 1621), "model_dims",
         "weight count 1621 does not match the architecture (1622)");
    EDIT(putf64(b + OFF_FS, 0.0), "model_value", "params.analysis_fs_hz = 0 outside");
    EDIT(putf64(b + OFF_FS, NAN), "model_value", "params.analysis_fs_hz = nan");
    EDIT(put32(b + OFF_PARAMS_BEAT_LEN, 128), "model_value",
         "params.beat_len 128 differs from the architecture's beat_len 256");
    EDIT(put32(b + OFF_NORM, 9), "model_value", "unknown normalisation 9");
    EDIT(putf64(b + OFF(140), 0.0), "model_value", "score.rel_scale = 0 outside");
    EDIT(putf64(b + OFF_PERCENTILE, 100.0), "model_value", "score.percentile 100 outside");
    EDIT(put32(b + OFF_N_QUANTILES, 4000000000u), "model_dims",
         "score.n_quantiles 4000000000 outside");
    EDIT(putf64(b + OFF_QUANTILES + 8 * 50, 99.0), "model_value",
         "score quantiles not ascending at 51");
    /* a NaN in the last weight */
    EDIT(putf64(b + len - 8, NAN), "model_value", "weight 1621 is not finite");

    /* a payload cut short (header and checksum agree with the shorter payload) */
    memcpy(b, g, len);
    reseal(b, len - 6);
    expect_refused(b, len - 6, "model_truncated", "payload ends at byte");
    expect_refused(b, len - 6, "model_truncated", "while reading weights");
    memcpy(b, g, OFF_FS + 20);
    reseal(b, OFF_FS + 20);
    expect_refused(b, OFF_FS + 20, "model_truncated", "while reading params.ricker_sigma_s");

    /* extra bytes inside the checksummed payload */
    memcpy(b, g, len);
    memset(b + len, 0, 4);
    reseal(b, len + 4);
    expect_refused(b, len + 4, "model_trailing", "4 unread bytes at the end of the payload");
#undef EDIT
    free(b);
    ecg_buf_fini(&good);
    ecg_model_free(m);
}

/* Truncation at every length is refused, never crashes and never reads past the end. */
static void test_every_truncation(void **state)
{
    (void)state;
    struct ecg_model *m = sample_model();
    struct ecg_buf good;
    serialize(m, &good);
    for (size_t n = 0; n < good.len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so a sanitiser catches over-reads */
        assert_non_null(copy);
        memcpy(copy, good.data, n);
        struct ecg_error err = {0};
        struct ecg_model *r = ecg_model_parse(copy, n, "cut", &err);
        assert_null(r);
        assert_int_equal(err.status, ECG_ERR_MODEL);
        free(copy);
    }
    ecg_buf_fini(&good);
    ecg_model_free(m);
}

static void test_create_rejects_bad_arch(void **state)
{
    (void)state;
    struct ecg_vae_arch arch = ecg_vae_arch_default();
    struct ecg_params params = ecg_params_default();
    struct ecg_error err = {0};
    arch.dec[2] = 0;
    assert_null(ecg_model_create(&arch, &params, &err));
    assert_string_equal(err.code, "model_dims");
    assert_non_null(strstr(err.message, "decoder width 2 is 0"));
    arch = ecg_vae_arch_default();
    arch.beat_len = 128;
    assert_null(ecg_model_create(&arch, &params, &err));
    assert_non_null(strstr(err.message, "differs from beat_len 128"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_broken_headers),
        cmocka_unit_test(test_broken_payloads),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_create_rejects_bad_arch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
