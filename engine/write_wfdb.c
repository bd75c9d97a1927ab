/*
 * write_wfdb.c - an analysis as a WFDB annotation file (MIT format, as .atr files are written),
 * so that the field's own tools read it: rdann lists it, bxb scores it against a reference,
 * `ecgd eval --test FILE` does the same here.
 *
 * Format (WFDB's "MIT format", see annot(5)): 16-bit little-endian words, the annotation code in
 * the high 6 bits and the time since the previous annotation (in samples) in the low 10; a
 * longer gap is a SKIP word (code 59) followed by the gap as a 32-bit PDP-11 long (high 16 bits
 * first, each half little-endian) and the annotation with time 0; a 0 word ends the file.
 * Each detected beat is one annotation at its R peak, in the input's sample grid: 'N' (code 1)
 * - ecgd detects beats, it does not classify them - or 'Q' (code 13, "unclassifiable") for a
 * beat the model scores as an outlier.
 */
#include <stdint.h>

#include "ecg.h"

#define MIT_CODE_N 1
#define MIT_CODE_Q 13
#define MIT_CODE_SKIP 59

static void put_word(struct ecg_buf *out, unsigned word)
{
    unsigned char b[2] = {(unsigned char)(word & 0xff), (unsigned char)(word >> 8)};
    ecg_buf_append(out, (const char *)b, 2);
}

void ecg_result_write_wfdb_annotations(const struct ecg_result *r, struct ecg_buf *out)
{
    int64_t previous = 0;
    for (size_t i = 0; i < r->n_beats; i++) {
        int64_t gap = r->r_peak[i] - previous;
        unsigned code = r->outlier && r->kept[i] && r->outlier[i] ? MIT_CODE_Q : MIT_CODE_N;
        if (gap < 0)
            gap = 0; /* peaks are in order; never write a negative time */
        if (gap > 1023) {
            uint32_t skip = (uint32_t)(gap > INT32_MAX ? INT32_MAX : gap);
            put_word(out, MIT_CODE_SKIP << 10);
            put_word(out, skip >> 16);
            put_word(out, skip & 0xffff);
            gap -= (int64_t)skip;
        }
        put_word(out, (code << 10) | (unsigned)gap);
        previous = r->r_peak[i];
    }
    put_word(out, 0);
}
