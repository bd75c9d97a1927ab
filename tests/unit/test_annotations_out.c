/*
 * test_annotations_out.c - the WFDB annotation writer (ecg_result_write_wfdb_annotations) read
 * back with the project's own reader (ecg_annotations_read), beat for beat: the analysis of a
 * shared MIT-BIH record (101, with the bundled model, so outliers are written as 'Q'), and a
 * hand-made train with gaps that need SKIP words (over 1023 samples, over 65535, at sample 0).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ecg.h"

/* Writes result as an annotation file in a temporary directory and reads it back. */
static void round_trip(const struct ecg_result *result, struct ecg_annotations *ann)
{
    char dir[] = "/tmp/ecg-atr-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/out.atr", dir);
    struct ecg_buf atr = {0};
    ecg_result_write_wfdb_annotations(result, &atr);
    assert_false(atr.failed);
    /* words, SKIP words with their 2 extra words, and the 0 word at the end */
    assert_int_equal(atr.len % 2, 0);
    assert_int_equal(atr.data[atr.len - 1] | atr.data[atr.len - 2], 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(atr.data, 1, atr.len, f), atr.len);
    assert_int_equal(fclose(f), 0);
    ecg_buf_fini(&atr);
    struct ecg_error err = {0};
    assert_int_equal(ecg_annotations_read(path, ann, &err), ECG_OK);
    unlink(path);
    rmdir(dir);
}

static void test_record_101(void **state)
{
    (void)state;
    char record[512];
    snprintf(record, sizeof record, "%s/mitdb/101", ECG_SHARED_DATA);
    struct ecg_error err = {0};
    struct ecg_signal sig = {0};
    struct ecg_read_opts opts = {.format = ECG_FORMAT_WFDB};
    if (ecg_read_file(record, &opts, &sig, &err) != ECG_OK) {
        print_message("shared data not found: %s\n", err.message);
        skip();
    }
    struct ecg_model *model = ecg_model_load("models/default.ecgm", &err);
    assert_non_null(model);
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU, .model = model, .workers = 1};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    assert_non_null(engine);
    struct ecg_result *result = NULL;
    assert_int_equal(ecg_engine_analyze(engine, &sig, &result, &err), ECG_OK);
    assert_true(result->n_beats > 1800);

    struct ecg_annotations ann = {0};
    round_trip(result, &ann);
    assert_int_equal(ann.n, result->n_beats);
    size_t outliers = 0;
    for (size_t i = 0; i < ann.n; i++) {
        assert_int_equal(ann.sample[i], result->r_peak[i]);
        bool outlier = result->kept[i] && result->outlier[i];
        assert_int_equal(ann.symbol[i], outlier ? 'Q' : 'N');
        outliers += outlier;
    }
    assert_true(outliers > 0); /* both symbols were exercised */
    assert_int_equal(ann.n_vf, 0);
    ecg_annotations_free(&ann);
    ecg_result_free(result);
    ecg_engine_destroy(engine);
    ecg_model_free(model);
    ecg_signal_free(&sig);
}

static void test_long_gaps(void **state)
{
    (void)state;
    int64_t peaks[] = {0, 1023, 1024, 2048, 70000, 70001, 5000000, 5001000};
    size_t n = sizeof peaks / sizeof peaks[0];
    uint8_t kept[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    struct ecg_result result = {.n_beats = n, .r_peak = peaks, .kept = kept, .fs_hz = 360};
    struct ecg_annotations ann = {0};
    round_trip(&result, &ann);
    assert_int_equal(ann.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ann.sample[i], peaks[i]);
        assert_int_equal(ann.symbol[i], 'N'); /* no model: no outliers */
    }
    ecg_annotations_free(&ann);

    struct ecg_result empty = {.n_beats = 0, .fs_hz = 360};
    round_trip(&empty, &ann);
    assert_int_equal(ann.n, 0);
    ecg_annotations_free(&ann);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_gaps),
        cmocka_unit_test(test_record_101),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
