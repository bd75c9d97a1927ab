/* fuzz_csv.c - libFuzzer harness for the csv reader (see fuzz_common.h). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_read(data, size, ECG_FORMAT_CSV);
    return 0;
}
