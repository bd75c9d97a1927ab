/* fuzz_raw.c - libFuzzer harness for the raw f32/f64/i16 readers and format sniffing. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_read(data, size, ECG_FORMAT_F32);
    fuzz_read(data, size, ECG_FORMAT_F64);
    fuzz_read(data, size, ECG_FORMAT_I16);
    fuzz_read(data, size, ECG_FORMAT_AUTO); /* sniffs and dispatches to any reader */
    return 0;
}
