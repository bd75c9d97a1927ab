/* fuzz_npy.c - libFuzzer harness for the npy reader (see fuzz_common.h). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_read(data, size, ECG_FORMAT_NPY);
    return 0;
}
