/*
 * fuzz_parse_float.c - differential fuzzing of ecg_parse_float() against strtof().
 *
 * Both must agree bit for bit on the value and on the end of the number. Inputs that strtof
 * reads as hex floats, "inf" or "nan" (outside ecg_parse_float's documented grammar) are
 * skipped: any x, i or n in the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        char c = (char)(data[i] | 0x20);
        if (c == 'x' || c == 'i' || c == 'n')
            return 0;
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t len = strlen(text); /* strtof stops at a NUL: so does the comparison */
    char *want_end;
    float want = strtof(text, &want_end);

    /* ecg_parse_float gets an exact-size buffer without the NUL. */
    char *exact = malloc(len ? len : 1);
    if (!exact) {
        free(text);
        return 0;
    }
    memcpy(exact, text, len);
    float got;
    const char *got_end = ecg_parse_float(exact, exact + len, &got);
    uint32_t wb, gb;
    memcpy(&wb, &want, 4);
    memcpy(&gb, &got, 4);
    if (wb != gb || (size_t)(want_end - text) != (size_t)(got_end - exact)) {
        fprintf(stderr, "mismatch on \"%s\": strtof %a end %zu, ecg_parse_float %a end %zu\n", text,
                (double)want, (size_t)(want_end - text), (double)got, (size_t)(got_end - exact));
        __builtin_trap();
    }
    free(exact);
    free(text);
    return 0;
}
