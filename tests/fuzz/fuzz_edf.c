/* fuzz_edf.c - libFuzzer harness for the edf reader (see fuzz_common.h). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_read(data, size, ECG_FORMAT_EDF);
    return 0;
}
