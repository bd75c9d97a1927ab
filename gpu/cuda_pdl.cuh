/*
 * cuda_pdl.cuh - the batched short pass's kernels launched as programmatic dependents
 * (compute capability 9.0 and later): each may be launched, and its blocks made resident,
 * while the kernel before it on the stream is still running, and waits on the device for that
 * kernel to end before it reads anything (pdl_step_begin). The pass is a chain of short,
 * one-block-per-member kernels; without this, each one's launch starts only once the previous
 * has drained, a gap per step that the chain pays a dozen times. The kernels do the same work
 * on the same values: the same bits. Inside a captured graph the launches become programmatic
 * edges.
 *
 * Rules:
 *   - a kernel launched with pdl_launch must call pdl_step_begin() in every thread before it
 *     reads or writes anything another kernel of the pass touches;
 *   - pdl_step_begin() is a no-op for a kernel launched the ordinary way, and on devices
 *     before 9.0 (where pdl_launch launches the ordinary way);
 *   - a kernel that waits for more than the kernel before it on its stream (an event from
 *     another stream: the side branch's join) is launched the ordinary way.
 *
 * ECG_CUDA_BATCH_PDL=0 launches every kernel the ordinary way (for A/B; docs/SERVICE.md).
 */
#ifndef CUDA_PDL_CUH
#define CUDA_PDL_CUH

#include <stdlib.h>
#include <string.h>
#include <utility>

#include <cuda_runtime.h>

/* In every thread of a pdl_launch'ed kernel, first: waits until the kernel before it on the
 * stream has ended (its writes visible), then lets the next one launch. That one waits for
 * this kernel's end in turn, so each step still sees every earlier step's writes. */
static __device__ __forceinline__ void pdl_step_begin(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Whether pdl_launch launches programmatic dependents on the current device: compute 9.0 and
 * later, unless ECG_CUDA_BATCH_PDL=0. */
static inline bool pdl_on(void)
{
    static int env = -1; /* a benign race: every thread computes the same value */
    int dev = 0, major = 0;
    if (env < 0) {
        const char *v = getenv("ECG_CUDA_BATCH_PDL");
        env = v && strcmp(v, "0") == 0 ? 0 : 1;
    }
    if (!env || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        return false;
    return major >= 9;
}

/* kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the kernel
 * before it on stream where pdl_on(). The launch's error, as cudaGetLastError would give it. */
template <typename... Params, typename... Args>
static inline cudaError_t pdl_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                     void (*kernel)(Params...), Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1] = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_on() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

#endif /* CUDA_PDL_CUH */
