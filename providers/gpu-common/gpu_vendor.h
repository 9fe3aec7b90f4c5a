/* gpu_vendor.h — the one place that knows which GPU vendor a build is for.
 *
 * The device sources of providers/gpu-common are written once in the CUDA
 * dialect (cudaMalloc, cudaStream_t, __global__, <<<>>>). Built by nvcc they
 * use CUDA as is; built by hipcc (ONYX_GPU_HIP defined) this header maps the
 * few CUDA runtime names they use to HIP. Only .cu files include it: the C
 * sources of the providers see the vendor through gpu_rt.h alone. */
#ifndef ONYX_GPU_VENDOR_H
#define ONYX_GPU_VENDOR_H

#if defined(ONYX_GPU_HIP)
#include <hip/hip_runtime.h>
#define cudaError_t                       hipError_t
#define cudaSuccess                       hipSuccess
#define cudaErrorNoDevice                 hipErrorNoDevice
#define cudaErrorMemoryAllocation         hipErrorOutOfMemory
#define cudaStream_t                      hipStream_t
#define cudaEvent_t                       hipEvent_t
#define cudaDeviceProp                    hipDeviceProp_t
#define cudaGetDeviceCount                hipGetDeviceCount
#define cudaGetDeviceProperties           hipGetDeviceProperties
#define cudaSetDevice                     hipSetDevice
#define cudaGetErrorName                  hipGetErrorName
#define cudaGetErrorString                hipGetErrorString
#define cudaGetLastError                  hipGetLastError
#define cudaMalloc                        hipMalloc
#define cudaFree                          hipFree
#define cudaHostAlloc(p, n, f)            hipHostMalloc((p), (n), (f))
#define cudaHostAllocPortable             hipHostMallocPortable
#define cudaFreeHost                      hipHostFree
#define cudaStreamCreateWithFlags         hipStreamCreateWithFlags
#define cudaStreamNonBlocking             hipStreamNonBlocking
#define cudaStreamDestroy                 hipStreamDestroy
#define cudaStreamSynchronize             hipStreamSynchronize
#define cudaStreamWaitEvent               hipStreamWaitEvent
#define cudaEventCreateWithFlags          hipEventCreateWithFlags
#define cudaEventDisableTiming            hipEventDisableTiming
#define cudaEventDestroy                  hipEventDestroy
#define cudaEventRecord                   hipEventRecord
#define cudaEventSynchronize              hipEventSynchronize
#define cudaEventQuery                    hipEventQuery
#define cudaErrorNotReady                 hipErrorNotReady
#define cudaMemcpyAsync                   hipMemcpyAsync
#define cudaMemcpyDefault                 hipMemcpyDefault
#define cudaMemcpyHostToDevice            hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost            hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice          hipMemcpyDeviceToDevice
#define cudaMemsetAsync                   hipMemsetAsync
#define cudaDriverGetVersion              hipDriverGetVersion
#define cudaRuntimeGetVersion             hipRuntimeGetVersion
#define cudaStreamCaptureStatus           hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone       hipStreamCaptureStatusNone
#define cudaStreamIsCapturing             hipStreamIsCapturing
#define cudaErrorStreamCaptureUnsupported hipErrorStreamCaptureUnsupported
#define cudaGraph_t                       hipGraph_t
#define cudaGraphExec_t                   hipGraphExec_t
#define cudaStreamBeginCapture            hipStreamBeginCapture
#define cudaStreamCaptureModeRelaxed      hipStreamCaptureModeRelaxed
#define cudaStreamEndCapture              hipStreamEndCapture
#define cudaGraphInstantiateWithFlags     hipGraphInstantiateWithFlags
#define cudaGraphDestroy                  hipGraphDestroy
#define cudaGraphLaunch                   hipGraphLaunch
#define cudaGraphExecDestroy              hipGraphExecDestroy
#define ONYX_GPU_VENDOR_NAME              "HIP"
/* Lanes of one wavefront: 64 on CDNA (gfx90a), 32 on RDNA in wave32 mode, so
 * device code reads the width from warpSize (GPU_WARP_SIZE); the host sizes
 * grids for the widest (GPU_WARP_MAX: a wider warp covers more rows per
 * block). */
#define GPU_WARP_SIZE warpSize
#define GPU_WARP_MAX  64
/* v from the lane whose id is this lane's XOR mask (a butterfly step). Every
 * lane of the wavefront must execute it. */
#define GPU_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#else
#include <cuda_runtime.h>
#define ONYX_GPU_VENDOR_NAME  "CUDA"
/* 32 lanes on every NVIDIA GPU: a constant, so shuffle loops unroll. */
#define GPU_WARP_SIZE         32
#define GPU_WARP_MAX          32
#define GPU_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#endif

#endif /* ONYX_GPU_VENDOR_H */
