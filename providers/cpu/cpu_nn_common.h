/* cpu_nn_common.h — internal to the CPU provider: what the Conv, pooling and
 * normalization files (cpu_conv.c, cpu_pool.c, cpu_norm.c) share: the rank
 * limits, scratch memory, the window attributes and geometry of Conv /
 * MaxPool / AveragePool (cpu_nn_common.c), and the x86 intrinsics switch. */
#ifndef CPU_NN_COMMON_H
#define CPU_NN_COMMON_H

#include "cpu_nn.h"
#include "cpu_util.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_NN_X86 1
#else
#define CPU_NN_X86 0
#endif

#define MAX_SPATIAL 8
#define MAX_RANK    (MAX_SPATIAL + 2)

/* Scratch memory of the context (freed after compute); an error names the
 * size. */
static inline OnyxStatus* nn_scratch(OnyxKernelContext* ctx, size_t bytes, void** out) {
  *out = cpu_host->ctx_scratch(ctx, bytes ? bytes : 1);
  return *out ? NULL
              : cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "no scratch memory (%zu bytes)", bytes);
}

/* An output that the node actually produces (optional outputs may be absent). */
static inline int nn_has_output(const OnyxNode* n, size_t i) {
  return i < cpu_host->node_output_count(n) && cpu_host->node_output(n, i) != NULL;
}

/* Row-major coordinates of `index` in `dims`. */
static inline void nn_unravel(size_t index, const int64_t* dims, size_t rank, int64_t* coord) {
  for (size_t i = rank; i-- > 0;) {
    coord[i] = (int64_t)(index % (size_t)dims[i]);
    index /= (size_t)dims[i];
  }
}

/* Window attributes (Conv, MaxPool, AveragePool), read once at create. */
typedef enum AutoPad { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } AutoPad;

typedef struct WindowAttrs {
  const OnyxNode* node;
  int64_t kernel[MAX_SPATIAL];
  size_t n_kernel;
  int64_t strides[MAX_SPATIAL];
  size_t n_strides;
  int64_t dilations[MAX_SPATIAL];
  size_t n_dilations;
  int64_t pads[2 * MAX_SPATIAL];
  size_t n_pads;
  AutoPad auto_pad;
  int64_t group;
  int ceil_mode, count_include_pad, storage_order;
  int is_max; /* pooling: MaxPool rather than AveragePool */
} WindowAttrs;

/* Reads the window attributes of node n into w; an error names the
 * attribute. */
OnyxStatus* cpu_window_attrs_read(const OnyxNode* n, WindowAttrs* w);

/* Everything a window op needs about its spatial dims, per dim. */
typedef struct Geometry {
  size_t rank;
  int64_t in[MAX_SPATIAL], k[MAX_SPATIAL], s[MAX_SPATIAL], d[MAX_SPATIAL];
  int64_t pb[MAX_SPATIAL], pe[MAX_SPATIAL], out[MAX_SPATIAL];
  size_t in_size, out_size, k_size;
} Geometry;

/* The geometry of a window op over an input whose `rank` spatial dims are
 * `in`, with kernel dims `kernel`; every size checked to fit. */
OnyxStatus* cpu_geometry_init(const WindowAttrs* w, size_t rank, const int64_t* in,
                              const int64_t* kernel, Geometry* g);

#endif /* CPU_NN_COMMON_H */
