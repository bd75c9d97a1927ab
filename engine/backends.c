/*
 * backends.c - the one file that decides which backends this build has.
 *
 * The CPU backend is always present. The CUDA backend exists when the build defines
 * ECG_HAVE_CUDA (the Makefile does whenever nvcc is found); it still runs on a machine without a
 * GPU, where opening it fails and the engine falls back to the CPU.
 */
#include "backend.h"

#ifdef ECG_HAVE_CUDA
extern const struct ecg_backend_ops ecg_cuda_backend;
int cuda_device_count(void); /* gpu/cuda_backend.cu */

const struct ecg_backend_ops *ecg_cuda_backend_ops(void)
{
    return &ecg_cuda_backend;
}

bool ecg_cuda_device_visible(void)
{
    return cuda_device_count() > 0;
}
#else
const struct ecg_backend_ops *ecg_cuda_backend_ops(void)
{
    return NULL;
}

bool ecg_cuda_device_visible(void)
{
    return false;
}
#endif
