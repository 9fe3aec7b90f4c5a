/* gpu_ep.h — internals shared by the CUDA and ROCm providers.
 *
 * One C source set (gpu_provider.c: provider table, options, EP, allocators,
 * copies, streams, events; gpu_ops*.c: the kernels' host side) is compiled
 * into both libonyx_ep_cuda.so and libonyx_ep_rocm.so. What differs per
 * vendor comes from the provider's own folder through GpuVendor (names, PCI
 * id, extra options and kernels, the GEMM). The device code is reached
 * through gpu_rt.h and gpu_kernels.h only. Everything here sees sdk/include
 * and nothing of the host. */
#ifndef ONYX_GPU_EP_H
#define ONYX_GPU_EP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_kernels.h"
#include "gpu_rt.h"
#include "onyx/onyx_ep.h"

#define GPU_STREAM_MAGIC 0x6B057EAu
#define GPU_EVENT_MAGIC  0x6B0E7E4u
#define GPU_ALIGN        256u

typedef struct GpuEp GpuEp;

/* What a provider folder supplies (providers/cuda/cuda_vendor.c,
 * providers/rocm/rocm_vendor.c). */
typedef struct GpuVendor {
  const char* name;     /* "cuda": how configs name it */
  const char* label;    /* "CUDA": in messages ("no CUDA device") */
  const char* vendor;   /* "NVIDIA" */
  const char* version;  /* the provider's version */
  uint32_t pci_vendor;  /* 0x10DE, 0x1002 */
  const char* count_fn; /* "cudaGetDeviceCount" */
  /* Extra option keys, NULL-terminated, listed in the unknown-key error. */
  const char* const* option_keys;
  /* Parses one of option_keys into the EP; error names key and value. */
  OnyxStatus* (*set_option)(GpuEp* g, const char* key, const char* value);
  /* Vendor state (BLAS / DNN handles) once the device is chosen. */
  OnyxStatus* (*ep_init)(GpuEp* g);
  void (*ep_release)(GpuEp* g);
  OnyxStatus* (*register_kernels)(OnyxKernelRegistry* r);
  /* Whether the vendor's BLAS / DNN calls honor use_tf32 (TF32 tensor-core
   * math); where false the option is accepted, logged at info and ignored. */
  bool tf32;
  /* NULL or a reason (a static string) not to take a node this vendor's
   * kernels handle only partly (asymmetric pads, ceil_mode, ...). */
  const char* (*decline)(const OnyxNode* n);
  /* Row-major batched SGEMM (see gpuk_gemm for the argument meaning). */
  OnyxStatus* (*gemm)(GpuEp* g, void* stream, int trans_a, int trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                      const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                      int64_t ldc, int64_t stride_c, int64_t batch);
  /* The same GEMM on float16 / bfloat16 storage (dt), accumulated in
   * float32; NULL: such MatMul / Gemm nodes are declined at placement. */
  OnyxStatus* (*gemm_t)(GpuEp* g, void* stream, GpuDtype dt, int trans_a, int trans_b, int64_t m,
                        int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                        int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
                        void* c, int64_t ldc, int64_t stride_c, int64_t batch);
} GpuVendor;

extern const GpuVendor gpu_vendor;
extern const OnyxHostApi* gpu_host;

typedef struct GpuBlock {
  void* ptr;
  size_t bytes;
} GpuBlock;

struct GpuEp {
  OnyxEp ep; /* first: an OnyxEp* is a GpuEp* */
  int device;
  OnyxAllocator device_alloc; /* ONYX_MEM_DEFAULT: device memory */
  OnyxAllocator pinned_alloc; /* ONYX_MEM_HOST_ACCESSIBLE: page-locked host memory */
  /* Options. */
  uint64_t mem_limit; /* gpu_mem_limit, 0: no limit */
  bool extend_pow2;   /* arena_extend_strategy */
  int conv_algo;      /* cudnn_conv_algo_search: 0 exhaustive, 1 heuristic, 2 default */
  bool use_tf32;      /* use_tf32: TF32 tensor-core math for GEMMs and convolutions */
  /* Live device blocks (sizes for the limit); guarded by mem_lock. */
  pthread_mutex_t mem_lock;
  GpuBlock* blocks;
  size_t n_blocks, cap_blocks;
  uint64_t in_use;
  /* Page-locked staging for copies between this device and pageable host
   * memory (copy_tensors), guarded by stage_lock: stage (stage_bytes, NULL
   * until first needed) is overwritten only after stage_event, recorded
   * behind the last device copy out of it, has completed (stage_pending:
   * recorded and not waited for yet). */
  pthread_mutex_t stage_lock;
  void* stage;
  size_t stage_bytes;
  void* stage_event;
  bool stage_pending;
  /* The vendor's handles (cuBLAS, cuDNN), used under vendor_lock: a handle
   * must not be used by two threads at once. */
  pthread_mutex_t vendor_lock;
  void* vendor_state;
  /* The host's collectives (ONYX_EXT_COLLECTIVES); NULL: no process group. */
  const OnyxCollectivesExt* collectives;
};

struct OnyxStream {
  uint32_t magic;
  GpuEp* owner;
  void* handle; /* cudaStream_t / hipStream_t */
};

struct OnyxEvent {
  uint32_t magic;
  GpuEp* owner;
  void* handle;
};

static inline GpuEp* gpu_ep(OnyxEp* ep) {
  return (GpuEp*)ep;
}

/* "cudaErrorX: text" (the name alone where the text repeats it). */
const char* gpu_err_text(int err, char* buf, size_t len);
/* An error from a vendor call: "cuda: <what>: cudaErrorX: text". */
OnyxStatus* gpu_rt_error(OnyxStatusCode code, int err, const char* what);
/* Parses the EP options (shared and vendor keys) without touching a device. */
OnyxStatus* gpu_parse_options(GpuEp* g, const OnyxOptions* o, size_t device_index);

/* --- kernels: gpu_ops.c ---------------------------------------------------------- */
OnyxStatus* gpu_register_common_kernels(OnyxKernelRegistry* r);
OnyxStatus* gpu_get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b);

/* Per-node kernel state of every GPU kernel: the EP and the op's own data. */
typedef struct GpuKernel {
  GpuEp* ep;
  const OnyxNode* node;
  int32_t op;    /* the op table's code */
  int32_t since; /* the node's resolved opset version */
  float alpha, beta;
  int64_t axis;
  int64_t i0, i1; /* op-specific integers */
} GpuKernel;

/* Kernel create used by every GPU kernel def: user_data is the op code. */
OnyxStatus* gpu_kernel_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state);
void gpu_kernel_release(void* state);
/* Makes the kernel's device current and returns its stream's handle. */
OnyxStatus* gpu_kernel_begin(GpuKernel* k, OnyxKernelContext* ctx, void** stream);
/* An error of a kernel: "<provider>: node 'n' (Op): <message>". */
OnyxStatus* gpu_node_error(const OnyxNode* n, OnyxStatusCode code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A launch result (0: fine) as a status naming the node. */
OnyxStatus* gpu_launch_status(const OnyxNode* n, int err, const char* what);
/* Registers a kernel with the shared create/release. */
OnyxStatus* gpu_register(OnyxKernelRegistry* r, const char* op, int32_t since, int32_t end,
                         const OnyxTypeConstraint* tc, size_t n_tc, const int32_t* in_mem,
                         size_t n_in_mem, const OnyxAlias* alias,
                         OnyxStatus* (*compute)(void*, OnyxKernelContext*), int32_t code);

extern const int32_t gpu_float_types[1];
/* float32, float16 and bfloat16: what the storage-generic kernels take. */
extern const int32_t gpu_real_types[3];
extern const int32_t gpu_host_mem2[2]; /* {DEFAULT, HOST_ACCESSIBLE} */

#endif /* ONYX_GPU_EP_H */
