/*
 * cuda_check.h - turning CUDA, cuFFT and cuDNN failures into ecg_status values (gpu/ only).
 *
 * Every library call in gpu/ goes through one of the *_TRY macros. On failure they fill the
 * function's `struct ecg_error *err` with file:line, the call and the library's own message,
 * set the function's local `status` and jump to its `out:` label, so cleanup stays in one place.
 * An allocation failure (cudaErrorMemoryAllocation, CUFFT_ALLOC_FAILED,
 * CUDNN_STATUS_ALLOC_FAILED) becomes ECG_ERR_DEVICE_OOM ("device_oom"), which the service
 * answers with 503 while the backend keeps serving; anything else becomes ECG_ERR_DEVICE.
 *
 * Usage:
 *     enum ecg_status status = ECG_OK;
 *     CUDA_TRY(cudaMemsetAsync(d_x, 0, bytes, stream));
 *   out:
 *     return status;
 *
 * Threading: the helpers are reentrant; they touch only err and the calling thread's CUDA
 * error state (cudaGetLastError clears a non-sticky error so the next request starts clean).
 */
#ifndef ECG_GPU_CUDA_CHECK_H
#define ECG_GPU_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <cufft.h>
#include <cudnn.h>

#include "ecg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill err from a failed call and return the status to use (DEVICE or DEVICE_OOM). */
enum ecg_status cuda_fail(struct ecg_error *err, cudaError_t code, const char *file, int line,
                          const char *call);
enum ecg_status cufft_fail(struct ecg_error *err, cufftResult code, const char *file, int line,
                           const char *call);
enum ecg_status cudnn_fail(struct ecg_error *err, cudnnStatus_t code, const char *file, int line,
                           const char *call);
/* cuFFT has no message function: a table of its result codes. */
const char *cufft_result_str(cufftResult code);

#ifdef __cplusplus
}
#endif

#define CUDA_TRY(call)                                                                  \
    do {                                                                                \
        cudaError_t try_code_ = (call);                                                 \
        if (try_code_ != cudaSuccess) {                                                 \
            status = cuda_fail(err, try_code_, __FILE__, __LINE__, #call);              \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

/* After a kernel launch: a bad launch configuration shows up here, not at the next call. */
#define CUDA_LAUNCH_CHECK() CUDA_TRY(cudaGetLastError())

#define CUFFT_TRY(call)                                                                 \
    do {                                                                                \
        cufftResult try_code_ = (call);                                                 \
        if (try_code_ != CUFFT_SUCCESS) {                                               \
            status = cufft_fail(err, try_code_, __FILE__, __LINE__, #call);             \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

#define CUDNN_TRY(call)                                                                 \
    do {                                                                                \
        cudnnStatus_t try_code_ = (call);                                               \
        if (try_code_ != CUDNN_STATUS_SUCCESS) {                                        \
            status = cudnn_fail(err, try_code_, __FILE__, __LINE__, #call);             \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

/* Propagates an ecg_status from a helper that already filled err. */
#define ECG_TRY(expr)                                                                   \
    do {                                                                                \
        status = (expr);                                                                \
        if (status != ECG_OK)                                                           \
            goto out;                                                                   \
    } while (0)

#endif /* ECG_GPU_CUDA_CHECK_H */
