/* gpu_rt.cu — gpu_rt.h over the CUDA runtime (nvcc) or HIP (hipcc, through
 * gpu_vendor.h). Host code only: no kernels here. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "gpu_rt.h"
#include "gpu_vendor.h"

extern "C" {

const char* gpurt_vendor(void) {
  return ONYX_GPU_VENDOR_NAME;
}

int gpurt_device_count(int* n) {
  *n = 0;
  cudaError_t e = cudaGetDeviceCount(n);
  if (e != cudaSuccess) *n = 0;
  return (int)e;
}

int gpurt_device_props(int device, GpuDeviceProps* out) {
  memset(out, 0, sizeof *out);
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return (int)e;
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_mem = (uint64_t)p.totalGlobalMem;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
#if defined(ONYX_GPU_HIP)
  snprintf(out->arch, sizeof out->arch, "%s", p.gcnArchName);
#else
  snprintf(out->arch, sizeof out->arch, "sm_%d%d", p.major, p.minor);
#endif
  return 0;
}

int gpurt_driver_version(int* v) {
  *v = 0;
  return (int)cudaDriverGetVersion(v);
}

int gpurt_runtime_version(int* v) {
  *v = 0;
  return (int)cudaRuntimeGetVersion(v);
}

const char* gpurt_error_name(int err) {
  const char* s = cudaGetErrorName((cudaError_t)err);
  return s ? s : "unknown error";
}

const char* gpurt_error_string(int err) {
  const char* s = cudaGetErrorString((cudaError_t)err);
  return s ? s : "unknown error";
}

int gpurt_error_oom(void) {
  return (int)cudaErrorMemoryAllocation;
}

int gpurt_set_device(int device) {
  return (int)cudaSetDevice(device);
}

int gpurt_last_error(void) {
  return (int)cudaGetLastError();
}

int gpurt_malloc(void** p, size_t bytes) {
  *p = NULL;
  return (int)cudaMalloc(p, bytes ? bytes : 1);
}

int gpurt_free(void* p) {
  return (int)cudaFree(p);
}

int gpurt_host_alloc(void** p, size_t bytes) {
  *p = NULL;
  return (int)cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable);
}

int gpurt_host_free(void* p) {
  return (int)cudaFreeHost(p);
}

int gpurt_stream_create(void** s) {
  cudaStream_t st = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  *s = e == cudaSuccess ? (void*)st : NULL;
  return (int)e;
}

int gpurt_stream_destroy(void* s) {
  return (int)cudaStreamDestroy((cudaStream_t)s);
}

int gpurt_stream_sync(void* s) {
  return (int)cudaStreamSynchronize((cudaStream_t)s);
}

int gpurt_event_create(void** e) {
  cudaEvent_t ev = NULL;
  cudaError_t r = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *e = r == cudaSuccess ? (void*)ev : NULL;
  return (int)r;
}

int gpurt_event_destroy(void* e) {
  return (int)cudaEventDestroy((cudaEvent_t)e);
}

int gpurt_event_record(void* e, void* s) {
  return (int)cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}

int gpurt_event_sync(void* e) {
  return (int)cudaEventSynchronize((cudaEvent_t)e);
}

int gpurt_stream_wait_event(void* s, void* e) {
  return (int)cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0);
}

int gpurt_error_not_ready(void) {
  return (int)cudaErrorNotReady;
}

int gpurt_event_query(void* e) {
  return (int)cudaEventQuery((cudaEvent_t)e);
}

static int64_t gpurt_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int gpurt_event_wait_for(void* e, int64_t timeout_ms) {
  if (timeout_ms < 0) return (int)cudaEventSynchronize((cudaEvent_t)e);
  /* The runtime has no bounded wait: poll, sleeping 20 us between queries. */
  const int64_t end =
      gpurt_now_us() + (timeout_ms > INT64_MAX / 1000 ? INT64_MAX / 2 : timeout_ms * 1000);
  for (;;) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r != cudaErrorNotReady || gpurt_now_us() >= end) return (int)r;
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
}

int gpurt_memcpy_async(void* dst, const void* src, size_t bytes, GpuCopyKind kind, void* s) {
  if (!bytes) return 0;
  if (kind != GPU_COPY_D2D) {
    /* A graph would record the host address, and a replay would read or
     * write host memory that belonged to the captured run: refused, which
     * fails the capture (the run then executes node by node). */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)s, &cap) == cudaSuccess &&
        cap != cudaStreamCaptureStatusNone)
      return (int)cudaErrorStreamCaptureUnsupported;
  }
  return (int)cudaMemcpyAsync(dst, src, bytes,
                              kind == GPU_COPY_H2D   ? cudaMemcpyHostToDevice
                              : kind == GPU_COPY_D2H ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice,
                              (cudaStream_t)s);
}

int gpurt_memset_async(void* dst, int value, size_t bytes, void* s) {
  if (!bytes) return 0;
  return (int)cudaMemsetAsync(dst, value, bytes, (cudaStream_t)s);
}

int gpurt_stream_begin_capture(void* s) {
  return (int)cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeRelaxed);
}

int gpurt_stream_end_capture(void* s, void** graph) {
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)s, &g);
  *graph = (void*)g;
  return (int)e;
}

int gpurt_graph_instantiate(void** exec, void* graph) {
  cudaGraphExec_t x = NULL;
  cudaError_t e = cudaGraphInstantiateWithFlags(&x, (cudaGraph_t)graph, 0);
  *exec = e == cudaSuccess ? (void*)x : NULL;
  return (int)e;
}

int gpurt_graph_destroy(void* graph) {
  return graph ? (int)cudaGraphDestroy((cudaGraph_t)graph) : 0;
}

int gpurt_graph_launch(void* exec, void* s) {
  return (int)cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s);
}

int gpurt_graph_exec_destroy(void* exec) {
  return exec ? (int)cudaGraphExecDestroy((cudaGraphExec_t)exec) : 0;
}

} /* extern "C" */
