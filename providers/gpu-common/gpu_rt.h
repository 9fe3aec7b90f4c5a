/* gpu_rt.h — the GPU runtime as the providers' C code sees it.
 *
 * Implemented once in gpu_rt.cu, compiled by nvcc for the CUDA provider and by
 * hipcc for the ROCm provider (gpu_vendor.h maps the names), so the C sources
 * of both providers (options, EP, allocators, copies, streams, kernels' shape
 * logic) are the same file, compiled by the C compiler with the project's
 * warnings and sanitizers. Every function returns the vendor's error code
 * (0: success); gpurt_error_name/string describe it. Streams and events are
 * the vendor's handles as void*. */
#ifndef ONYX_GPU_RT_H
#define ONYX_GPU_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GpuDeviceProps {
  char name[256];
  uint64_t total_mem;
  int cc_major, cc_minor; /* CUDA compute capability; on HIP the gcnArch major/minor */
  int multiprocessors;
  char arch[64]; /* "sm_90", or the HIP gcnArchName */
} GpuDeviceProps;

/* "CUDA" or "HIP". */
const char* gpurt_vendor(void);
int gpurt_device_count(int* n);
int gpurt_device_props(int device, GpuDeviceProps* out);
int gpurt_driver_version(int* v); /* 0 when no driver is installed */
int gpurt_runtime_version(int* v);
const char* gpurt_error_name(int err);
const char* gpurt_error_string(int err);
/* The error code a failed allocation gives (to tell out-of-memory apart). */
int gpurt_error_oom(void);
int gpurt_set_device(int device);
int gpurt_last_error(void); /* and clears it */

int gpurt_malloc(void** p, size_t bytes);
int gpurt_free(void* p);
/* Page-locked host memory, readable by every device of the vendor. */
int gpurt_host_alloc(void** p, size_t bytes);
int gpurt_host_free(void* p);

int gpurt_stream_create(void** s); /* non-blocking with respect to the legacy stream */
int gpurt_stream_destroy(void* s);
int gpurt_stream_sync(void* s);
int gpurt_event_create(void** e); /* no timing */
int gpurt_event_destroy(void* e);
int gpurt_event_record(void* e, void* s);
int gpurt_event_sync(void* e);
int gpurt_stream_wait_event(void* s, void* e);
/* The code gpurt_event_query and gpurt_event_wait_for return while the work
 * before an event is still running (cudaErrorNotReady). */
int gpurt_error_not_ready(void);
/* 0 once the work queued before the event's last record has completed,
 * gpurt_error_not_ready() while it has not, or that work's error. */
int gpurt_event_query(void* e);
/* Waits for that work at most timeout_ms milliseconds (negative: no limit;
 * then the runtime's blocking wait): 0, gpurt_error_not_ready() when the
 * time ran out first, or the work's error. A bounded wait polls the event. */
int gpurt_event_wait_for(void* e, int64_t timeout_ms);

typedef enum GpuCopyKind { GPU_COPY_H2D = 0, GPU_COPY_D2H = 1, GPU_COPY_D2D = 2 } GpuCopyKind;
/* A host <-> device copy on a capturing stream is refused
 * (cudaErrorStreamCaptureUnsupported): a graph would keep the host address. */
int gpurt_memcpy_async(void* dst, const void* src, size_t bytes, GpuCopyKind kind, void* s);
int gpurt_memset_async(void* dst, int value, size_t bytes, void* s);

/* Graphs (CUDA graphs, HIP graphs): the work queued on a stream between
 * begin_capture and end_capture is recorded instead of run (relaxed capture
 * mode: a cudaMalloc of an arena that grows during the capture runs at once
 * and is not recorded; a call that synchronizes the stream still invalidates
 * the capture; other threads are not affected). end_capture returns the recorded graph (also after
 * a failure, when the runtime made one: destroy it); graph_instantiate makes an executable graph
 * that graph_launch queues on a stream in one call. */
int gpurt_stream_begin_capture(void* s);
int gpurt_stream_end_capture(void* s, void** graph);
int gpurt_graph_instantiate(void** exec, void* graph);
int gpurt_graph_destroy(void* graph);
int gpurt_graph_launch(void* exec, void* s);
int gpurt_graph_exec_destroy(void* exec);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_GPU_RT_H */
