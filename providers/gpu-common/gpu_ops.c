/* gpu_ops.c — the host side of the shared GPU kernels: kernel state, shape
 * logic, argument checking, and the launch of gpu_kernels.cu's kernels on the
 * EP's stream. Shape-carrying inputs (Reshape's shape, Slice's starts, ...)
 * are declared ONYX_MEM_HOST_ACCESSIBLE so they are read here, on the host.
 * Compiled into both GPU providers. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_attention.h"
#include "gpu_ep.h"
#include "gpu_grad_ops.h"
#include "gpu_kernels_body.h"

#define H gpu_host

const int32_t gpu_float_types[1] = {ONYX_ELEM_FLOAT32};
const int32_t gpu_real_types[3] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16};
const int32_t gpu_host_mem2[2] = {ONYX_MEM_DEFAULT, ONYX_MEM_HOST_ACCESSIBLE};
/* Every input after the first in host memory (Slice, Clip, ...). */
static const int32_t g_host_mem_rest[5] = {ONYX_MEM_DEFAULT, ONYX_MEM_HOST_ACCESSIBLE,
                                           ONYX_MEM_HOST_ACCESSIBLE, ONYX_MEM_HOST_ACCESSIBLE,
                                           ONYX_MEM_HOST_ACCESSIBLE};
static const int32_t g_bool_types[1] = {ONYX_ELEM_BOOL};
static const int32_t g_index_types[2] = {ONYX_ELEM_INT32, ONYX_ELEM_INT64};
static const int32_t g_int64_types[1] = {ONYX_ELEM_INT64};
/* Element types the data-movement kernels copy (1, 2, 4 or 8 bytes). */
static const int32_t g_any_types[13] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16, ONYX_ELEM_INT8,
    ONYX_ELEM_INT16,   ONYX_ELEM_INT32,   ONYX_ELEM_INT64,   ONYX_ELEM_UINT8,    ONYX_ELEM_UINT16,
    ONYX_ELEM_UINT32,  ONYX_ELEM_UINT64,  ONYX_ELEM_BOOL};
static const int32_t g_cast_types[9] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_UINT8,   ONYX_ELEM_INT8,
                                        ONYX_ELEM_INT32,   ONYX_ELEM_INT64,   ONYX_ELEM_BOOL,
                                        ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16};
static const OnyxAlias g_view = {0, 0, ONYX_ALIAS_VIEW};

/* ---------------------------------------------------------------------------------- */
/* Common helpers                                                                      */
/* ---------------------------------------------------------------------------------- */

OnyxStatus* gpu_node_error(const OnyxNode* n, OnyxStatusCode code, const char* fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return H->status_create(code, "%s: node '%s' (%s): %s", gpu_vendor.name,
                          n ? H->node_name(n) : "?", n ? H->node_op_type(n) : "?", msg);
}

OnyxStatus* gpu_launch_status(const OnyxNode* n, int err, const char* what) {
  if (!err) return NULL;
  if (err < 0)
    return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "%s: element type or size not supported", what);
  char buf[256];
  return gpu_node_error(n, ONYX_RUNTIME_ERROR, "%s: %s", what, gpu_err_text(err, buf, sizeof buf));
}

OnyxStatus* gpu_kernel_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  GpuKernel* k = calloc(1, sizeof *k);
  if (!k) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  k->ep = gpu_ep(ep);
  k->node = node;
  k->op = (int32_t)(intptr_t)user;
  k->since = H->node_since_version(node);
  *state = k;
  return NULL;
}

void gpu_kernel_release(void* state) {
  free(state);
}

OnyxStatus* gpu_kernel_begin(GpuKernel* k, OnyxKernelContext* ctx, void** stream) {
  OnyxStream* s = H->ctx_stream(ctx);
  if (!s || s->magic != GPU_STREAM_MAGIC || s->owner != k->ep)
    return gpu_node_error(k->node, ONYX_RUNTIME_ERROR, "the host gave no stream of this EP");
  int err = gpurt_set_device(k->ep->device);
  if (err) return gpu_launch_status(k->node, err, "selecting the device");
  *stream = s->handle;
  return NULL;
}

OnyxStatus* gpu_register(OnyxKernelRegistry* r, const char* op, int32_t since, int32_t end,
                         const OnyxTypeConstraint* tc, size_t n_tc, const int32_t* in_mem,
                         size_t n_in_mem, const OnyxAlias* alias,
                         OnyxStatus* (*compute)(void*, OnyxKernelContext*), int32_t code) {
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = op,
                     .since_version = since,
                     .end_version = end,
                     .type_constraints = tc,
                     .type_constraint_count = n_tc,
                     .input_mem_types = in_mem,
                     .input_mem_type_count = n_in_mem,
                     .aliases = alias,
                     .alias_count = alias ? 1 : 0,
                     .create = gpu_kernel_create,
                     .compute = compute,
                     .release = gpu_kernel_release,
                     .user_data = (void*)(intptr_t)code};
  return H->register_kernel(r, &d);
}

/* A kernel of the com.onyx ops the host's fusions make (FusedMatMul, Gelu,
 * LayerNormalization); `create` NULL: the shared one. */
static OnyxStatus*
gpu_register_contrib(OnyxKernelRegistry* r, const char* op, const OnyxTypeConstraint* tc,
                     size_t n_tc, OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**),
                     OnyxStatus* (*compute)(void*, OnyxKernelContext*), int32_t code) {
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "com.onyx",
                     .op_type = op,
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = n_tc,
                     .create = create ? create : gpu_kernel_create,
                     .compute = compute,
                     .release = gpu_kernel_release,
                     .user_data = (void*)(intptr_t)code};
  return H->register_kernel(r, &d);
}

static size_t elem_size(OnyxElemType t) {
  switch (t) {
  case ONYX_ELEM_BOOL:
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_UINT8:
    return 1;
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
    return 2;
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_UINT32:
  case ONYX_ELEM_FLOAT32:
    return 4;
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT64:
  case ONYX_ELEM_FLOAT64:
    return 8;
  default:
    return 0;
  }
}

/* The storage type of a float32 / float16 / bfloat16 tensor; -1 for another. */
static int dtype_of(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT32    ? GPU_F32
         : t == ONYX_ELEM_FLOAT16  ? GPU_F16
         : t == ONYX_ELEM_BFLOAT16 ? GPU_BF16
                                   : -1;
}

static const char* dtype_name(int dt) {
  return dt == GPU_F16 ? "float16" : dt == GPU_BF16 ? "bfloat16" : "float32";
}

/* The storage type of t (an input named `what` in errors), which must be
 * float32, float16 or bfloat16. */
static OnyxStatus* input_dtype(const OnyxNode* n, const OnyxTensor* t, const char* what,
                               GpuDtype* dt) {
  const int d = dtype_of(H->tensor_elem_type(t));
  *dt = GPU_F32;
  if (d < 0)
    return gpu_node_error(n, ONYX_NOT_IMPLEMENTED,
                          "%s has element type %d; the GPU kernel takes float32, float16 or "
                          "bfloat16",
                          what, (int)H->tensor_elem_type(t));
  *dt = (GpuDtype)d;
  return NULL;
}

/* That tensor t has storage type dt (an operand of the same kernel). */
static OnyxStatus* same_dtype(const OnyxNode* n, const OnyxTensor* t, const char* what,
                              GpuDtype dt) {
  if (!t || dtype_of(H->tensor_elem_type(t)) == (int)dt) return NULL;
  return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%s must be %s like the first input", what,
                        dtype_name(dt));
}

static OnyxStatus* check_rank(const OnyxNode* n, size_t rank, const char* what) {
  if (rank <= GPU_MAX_RANK) return NULL;
  return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "%s has rank %zu; the GPU kernels take at most %d",
                        what, rank, GPU_MAX_RANK);
}

static void dense_strides(const int64_t* dims, size_t rank, int64_t* strides) {
  int64_t s = 1;
  for (size_t d = rank; d-- > 0;) {
    strides[d] = s;
    s *= dims[d];
  }
}

static int64_t prod(const int64_t* dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; i++)
    p *= dims[i];
  return p;
}

/* Reads a host-memory integer tensor (int64 or int32) into out[max]. */
static OnyxStatus* read_ints(const OnyxNode* n, const OnyxTensor* t, const char* what, int64_t* out,
                             size_t max, size_t* count) {
  *count = 0;
  if (!t) return NULL;
  OnyxElemType type = H->tensor_elem_type(t);
  size_t c = H->tensor_elem_count(t);
  if (type != ONYX_ELEM_INT64 && type != ONYX_ELEM_INT32)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%s must be int64 or int32", what);
  if (c > max)
    return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "%s has %zu values; at most %zu supported", what,
                          c, max);
  if (H->tensor_memory(t)->kind != ONYX_DEVICE_CPU)
    return gpu_node_error(n, ONYX_RUNTIME_ERROR, "%s is not in host memory", what);
  const void* p = H->tensor_data(t);
  for (size_t i = 0; i < c; i++)
    out[i] = type == ONYX_ELEM_INT64 ? ((const int64_t*)p)[i] : ((const int32_t*)p)[i];
  *count = c;
  return NULL;
}

/* A float32 / float16 / bfloat16 scalar in host memory (Clip's min / max),
 * as float. */
static OnyxStatus* read_scalar(const OnyxNode* n, const OnyxTensor* t, float* out) {
  if (!t) return NULL;
  const int dt = dtype_of(H->tensor_elem_type(t));
  if (dt < 0 || H->tensor_elem_count(t) != 1 || H->tensor_memory(t)->kind != ONYX_DEVICE_CPU)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "min / max must be one float32, float16 or bfloat16 value in host "
                          "memory");
  *out = gpub_ld(H->tensor_data(t), 0, dt);
  return NULL;
}

/* Normalizes an axis into [0, rank); error names the node. */
static OnyxStatus* norm_axis(const OnyxNode* n, int64_t axis, size_t rank, int64_t* out) {
  int64_t r = (int64_t)rank;
  *out = 0;
  if (axis < -r || axis >= r)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                          (long long)axis, rank);
  *out = axis < 0 ? axis + r : axis;
  return NULL;
}

/* Numpy broadcasting of k (<= 3) inputs: output dims and, per input, the
 * element strides over the output's dims (0 where broadcast). */
static OnyxStatus* broadcast(const OnyxNode* n, size_t k, const OnyxTensor* const* in,
                             int64_t* dims, size_t* rank, int64_t strides[3][GPU_MAX_RANK]) {
  size_t r = 0;
  for (size_t i = 0; i < k; i++) {
    size_t ri = H->tensor_rank(in[i]);
    OnyxStatus* st = check_rank(n, ri, "an input");
    if (st) return st;
    if (ri > r) r = ri;
  }
  for (size_t d = 0; d < r; d++)
    dims[d] = 1;
  for (size_t i = 0; i < k; i++) {
    size_t ri = H->tensor_rank(in[i]);
    const int64_t* di = H->tensor_dims(in[i]);
    for (size_t d = 0; d < ri; d++) {
      int64_t v = di[d], *o = &dims[r - ri + d];
      if (v == *o || v == 1) continue;
      if (*o != 1)
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "input %zu dim %zu is %lld, which does not broadcast with %lld", i, d,
                              (long long)v, (long long)*o);
      *o = v;
    }
  }
  for (size_t i = 0; i < k; i++) {
    size_t ri = H->tensor_rank(in[i]);
    const int64_t* di = H->tensor_dims(in[i]);
    int64_t dense[GPU_MAX_RANK];
    dense_strides(di, ri, dense);
    for (size_t d = 0; d < r; d++) {
      strides[i][d] = 0;
      if (d >= r - ri) {
        size_t s = d - (r - ri);
        strides[i][d] = di[s] == 1 ? 0 : dense[s];
      }
    }
  }
  *rank = r;
  return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Element-wise                                                                         */
/* ---------------------------------------------------------------------------------- */

enum {
  CODE_BINARY = 100,
  CODE_UNARY = 200,
  CODE_WHERE = 300,
  CODE_SOFTMAX,
  CODE_LOG_SOFTMAX,
  CODE_LAYERNORM,
  CODE_REDUCE_SUM,
  CODE_REDUCE_MEAN,
  CODE_REDUCE_MAX,
  CODE_REDUCE_MIN,
  CODE_TRANSPOSE,
  CODE_CONCAT,
  CODE_SPLIT,
  CODE_SLICE,
  CODE_GATHER,
  CODE_CAST,
  CODE_EXPAND,
  CODE_RESHAPE,
  CODE_FLATTEN,
  CODE_SQUEEZE,
  CODE_UNSQUEEZE,
  CODE_MATMUL,
  CODE_GEMM,
  CODE_FUSED_MATMUL,
};

static OnyxStatus* binary_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* in[2] = {H->ctx_input(ctx, 0), H->ctx_input(ctx, 1)};
  GpuDtype dt;
  st = input_dtype(k->node, in[0], "A", &dt);
  if (!st) st = same_dtype(k->node, in[1], "B", dt);
  if (st) return st;
  int64_t dims[GPU_MAX_RANK], strides[3][GPU_MAX_RANK];
  size_t rank;
  st = broadcast(k->node, 2, in, dims, &rank, strides);
  if (st) return st;
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  GpuIter it = {.rank = (int32_t)rank};
  memcpy(it.dims, dims, sizeof dims);
  dense_strides(dims, rank, it.strides[0]);
  memcpy(it.strides[1], strides[0], sizeof strides[0]);
  memcpy(it.strides[2], strides[1], sizeof strides[1]);
  int err = gpuk_binary_t(dt, (GpuBinaryOp)(k->op - CODE_BINARY), H->tensor_data(in[0]),
                          H->tensor_data(in[1]), H->tensor_mutable_data(y), &it, s);
  return gpu_launch_status(k->node, err, "element-wise kernel");
}

static OnyxStatus* unary_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  GpuDtype dt;
  st = input_dtype(k->node, x, "X", &dt);
  if (st) return st;
  GpuUnaryOp op = (GpuUnaryOp)(k->op - CODE_UNARY);
  float alpha = 0.0f, beta = 0.0f;
  const OnyxNode* n = k->node;
  switch (op) {
  case GPU_LEAKY_RELU:
    alpha = H->node_attr_float(n, "alpha", 0.01f);
    break;
  case GPU_ELU:
    alpha = H->node_attr_float(n, "alpha", 1.0f);
    break;
  case GPU_HARD_SIGMOID:
    alpha = H->node_attr_float(n, "alpha", 0.2f);
    beta = H->node_attr_float(n, "beta", 0.5f);
    break;
  case GPU_CLIP:
    alpha = -FLT_MAX;
    beta = FLT_MAX;
    if (k->since < 11) {
      alpha = H->node_attr_float(n, "min", -FLT_MAX);
      beta = H->node_attr_float(n, "max", FLT_MAX);
    } else {
      size_t ni = H->ctx_input_count(ctx);
      if (ni > 1) st = read_scalar(n, H->ctx_input(ctx, 1), &alpha);
      if (!st && ni > 2) st = read_scalar(n, H->ctx_input(ctx, 2), &beta);
      if (st) return st;
    }
    break;
  case GPU_GELU: {
    const char* a = H->node_attr_string(n, "approximate", NULL);
    if (a && !strcmp(a, "tanh")) op = GPU_GELU_TANH;
    break;
  }
  default:
    break;
  }
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  int err = gpuk_unary_t(dt, op, H->tensor_data(x), H->tensor_mutable_data(y),
                         (int64_t)H->tensor_elem_count(x), alpha, beta, s);
  return gpu_launch_status(n, err, "element-wise kernel");
}

static OnyxStatus* where_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* in[3] = {H->ctx_input(ctx, 0), H->ctx_input(ctx, 1), H->ctx_input(ctx, 2)};
  int64_t dims[GPU_MAX_RANK], strides[3][GPU_MAX_RANK];
  size_t rank;
  st = broadcast(k->node, 3, in, dims, &rank, strides);
  if (st) return st;
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  GpuIter it = {.rank = (int32_t)rank};
  memcpy(it.dims, dims, sizeof dims);
  dense_strides(dims, rank, it.strides[0]);
  memcpy(it.strides[1], strides[0], sizeof strides[0]);
  memcpy(it.strides[2], strides[1], sizeof strides[1]);
  int err = gpuk_where(H->tensor_data(in[0]), H->tensor_data(in[1]), H->tensor_data(in[2]),
                       H->tensor_mutable_data(y), &it, strides[2], 0,
                       (int)elem_size(H->tensor_elem_type(in[1])), s);
  return gpu_launch_status(k->node, err, "Where kernel");
}

/* ---------------------------------------------------------------------------------- */
/* Softmax, LayerNormalization, reductions                                              */
/* ---------------------------------------------------------------------------------- */

static OnyxStatus* softmax_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  int64_t axis;
  st = norm_axis(k->node, H->node_attr_int(k->node, "axis", k->since < 13 ? 1 : -1), rank, &axis);
  if (st) return st;
  int64_t outer, len, inner;
  if (k->since < 13) { /* the input is coerced to 2-D [prod(:axis), prod(axis:)] */
    outer = prod(dims, 0, (size_t)axis);
    len = prod(dims, (size_t)axis, rank);
    inner = 1;
  } else {
    outer = prod(dims, 0, (size_t)axis);
    len = dims[axis];
    inner = prod(dims, (size_t)axis + 1, rank);
  }
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  GpuDtype dt;
  st = input_dtype(k->node, x, "input", &dt);
  if (st) return st;
  int err = gpuk_softmax_t(dt, H->tensor_data(x), H->tensor_mutable_data(y), outer, len, inner,
                           k->op == CODE_LOG_SOFTMAX, s);
  return gpu_launch_status(k->node, err, "softmax kernel");
}

static OnyxStatus* layernorm_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  const OnyxTensor* scale = H->ctx_input(ctx, 1);
  const OnyxTensor* bias = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  st = check_rank(k->node, rank, "X");
  if (st) return st;
  int64_t axis;
  st = norm_axis(k->node, H->node_attr_int(k->node, "axis", -1), rank, &axis);
  if (st) return st;
  GpuDtype dt;
  st = input_dtype(k->node, x, "X", &dt);
  if (!st) st = same_dtype(k->node, scale, "Scale", dt);
  if (!st) st = same_dtype(k->node, bias, "B", dt);
  if (st) return st;
  int64_t rows = prod(dims, 0, (size_t)axis), cols = prod(dims, (size_t)axis, rank);
  if ((int64_t)H->tensor_elem_count(scale) != cols ||
      (bias && (int64_t)H->tensor_elem_count(bias) != cols))
    return gpu_node_error(k->node, ONYX_NOT_IMPLEMENTED,
                          "Scale and B must have the %lld elements of the normalized shape "
                          "(broadcast Scale / B are not supported on the GPU)",
                          (long long)cols);
  OnyxTensor *y, *mean = NULL, *inv = NULL;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  int64_t sdims[GPU_MAX_RANK];
  for (size_t d = 0; d < rank; d++)
    sdims[d] = (int64_t)d < axis ? dims[d] : 1;
  if (!st && H->ctx_output_count(ctx) > 1 && H->node_output(k->node, 1))
    st = H->ctx_output(ctx, 1, sdims, rank, &mean);
  if (!st && H->ctx_output_count(ctx) > 2 && H->node_output(k->node, 2))
    st = H->ctx_output(ctx, 2, sdims, rank, &inv);
  if (st) return st;
  /* Mean and InvStdDev (type U) are float32 whatever X's type. */
  if ((mean && H->tensor_elem_type(mean) != ONYX_ELEM_FLOAT32) ||
      (inv && H->tensor_elem_type(inv) != ONYX_ELEM_FLOAT32))
    return gpu_node_error(k->node, ONYX_NOT_IMPLEMENTED,
                          "Mean and InvStdDev must be float32 (stash_type 1) on the GPU");
  int err = gpuk_layernorm_t(dt, H->tensor_data(x), H->tensor_data(scale),
                             bias ? H->tensor_data(bias) : NULL, H->tensor_mutable_data(y),
                             mean ? H->tensor_mutable_data(mean) : NULL,
                             inv ? H->tensor_mutable_data(inv) : NULL, rows, cols,
                             H->node_attr_float(k->node, "epsilon", 1e-5f), s);
  return gpu_launch_status(k->node, err, "LayerNormalization kernel");
}

static OnyxStatus* reduce_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  st = check_rank(n, rank, "data");
  if (st) return st;
  /* Axes: an input from ReduceSum 13 / ReduceMean, ReduceMax 18 on. */
  int axes_input = k->since >= (k->op == CODE_REDUCE_SUM ? 13 : 18);
  int64_t axes[GPU_MAX_RANK];
  size_t n_axes = 0;
  if (axes_input) {
    if (H->ctx_input_count(ctx) > 1)
      st = read_ints(n, H->ctx_input(ctx, 1), "axes", axes, GPU_MAX_RANK, &n_axes);
  } else {
    size_t c = 0;
    const int64_t* a = H->node_attr_ints(n, "axes", &c);
    if (c > GPU_MAX_RANK) st = gpu_node_error(n, ONYX_INVALID_ARGUMENT, "too many axes");
    for (size_t i = 0; !st && i < c; i++)
      axes[i] = a[i];
    n_axes = c;
  }
  if (st) return st;
  bool keep = H->node_attr_int(n, "keepdims", 1) != 0;
  bool noop = axes_input && H->node_attr_int(n, "noop_with_empty_axes", 0) != 0;
  bool reduced[GPU_MAX_RANK] = {false};
  for (size_t i = 0; i < n_axes; i++) {
    int64_t a;
    st = norm_axis(n, axes[i], rank, &a);
    if (st) return st;
    reduced[a] = true;
  }
  if (!n_axes && !noop)
    for (size_t d = 0; d < rank; d++)
      reduced[d] = true;
  int64_t strides[GPU_MAX_RANK], out_dims[GPU_MAX_RANK];
  dense_strides(dims, rank, strides);
  GpuReduce r = {0};
  size_t out_rank = 0;
  int64_t n_out = 1, n_red = 1;
  for (size_t d = 0; d < rank; d++) {
    if (reduced[d]) {
      r.red_dims[r.red_rank] = dims[d];
      r.red_strides[r.red_rank++] = strides[d];
      n_red *= dims[d];
      if (keep) out_dims[out_rank++] = 1;
    } else {
      r.kept_dims[r.kept_rank] = dims[d];
      r.kept_strides[r.kept_rank++] = strides[d];
      n_out *= dims[d];
      out_dims[out_rank++] = dims[d];
    }
  }
  /* An empty reduction gives the op's identity (0, NaN for the mean, -inf for
   * max, +inf for min), as the ONNX reference does. */
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, out_dims, out_rank, &y);
  if (st) return st;
  static const GpuReduceOp ops[] = {GPU_REDUCE_SUM, GPU_REDUCE_MEAN, GPU_REDUCE_MAX,
                                    GPU_REDUCE_MIN};
  GpuDtype dt;
  st = input_dtype(n, x, "data", &dt);
  if (st) return st;
  int err = gpuk_reduce_t(dt, ops[k->op - CODE_REDUCE_SUM], H->tensor_data(x),
                          H->tensor_mutable_data(y), n_out, n_red, &r, s);
  return gpu_launch_status(n, err, "reduction kernel");
}

/* ---------------------------------------------------------------------------------- */
/* Data movement                                                                        */
/* ---------------------------------------------------------------------------------- */

static OnyxStatus* transpose_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  st = check_rank(k->node, rank, "data");
  if (st) return st;
  size_t np = 0;
  const int64_t* perm = H->node_attr_ints(k->node, "perm", &np);
  int64_t p[GPU_MAX_RANK];
  bool seen[GPU_MAX_RANK] = {false};
  if (np && np != rank)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "perm has %zu entries for rank %zu", np,
                          rank);
  for (size_t i = 0; i < rank; i++) {
    p[i] = np ? perm[i] : (int64_t)(rank - 1 - i);
    if (p[i] < 0 || p[i] >= (int64_t)rank || seen[p[i]])
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "perm is not a permutation");
    seen[p[i]] = true;
  }
  int64_t in_strides[GPU_MAX_RANK], out_dims[GPU_MAX_RANK];
  dense_strides(dims, rank, in_strides);
  GpuIter it = {.rank = (int32_t)rank};
  for (size_t i = 0; i < rank; i++) {
    out_dims[i] = dims[p[i]];
    it.dims[i] = out_dims[i];
    it.strides[1][i] = in_strides[p[i]];
  }
  dense_strides(out_dims, rank, it.strides[0]);
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, out_dims, rank, &y);
  if (st) return st;
  int err = gpuk_copy(H->tensor_data(x), H->tensor_mutable_data(y), &it,
                      (int)elem_size(H->tensor_elem_type(x)), s);
  return gpu_launch_status(k->node, err, "Transpose kernel");
}

static OnyxStatus* concat_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  size_t ni = H->ctx_input_count(ctx);
  const OnyxTensor* x0 = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x0);
  st = check_rank(k->node, rank, "input 0");
  if (st) return st;
  int64_t axis;
  st = norm_axis(k->node, H->node_attr_int(k->node, "axis", 0), rank, &axis);
  if (st) return st;
  int64_t out_dims[GPU_MAX_RANK];
  memcpy(out_dims, H->tensor_dims(x0), rank * sizeof *out_dims);
  out_dims[axis] = 0;
  for (size_t i = 0; i < ni; i++) {
    const OnyxTensor* xi = H->ctx_input(ctx, i);
    const int64_t* di = H->tensor_dims(xi);
    if (H->tensor_rank(xi) != rank)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "input %zu has rank %zu, not %zu", i,
                            H->tensor_rank(xi), rank);
    for (size_t d = 0; d < rank; d++)
      if ((int64_t)d != axis && di[d] != out_dims[d])
        return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                              "input %zu dim %zu is %lld, expected %lld", i, d, (long long)di[d],
                              (long long)out_dims[d]);
    out_dims[axis] += di[axis];
  }
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, out_dims, rank, &y);
  if (st) return st;
  int64_t out_strides[GPU_MAX_RANK];
  dense_strides(out_dims, rank, out_strides);
  int64_t at = 0;
  int es = (int)elem_size(H->tensor_elem_type(x0));
  for (size_t i = 0; i < ni; i++) {
    const OnyxTensor* xi = H->ctx_input(ctx, i);
    const int64_t* di = H->tensor_dims(xi);
    GpuIter it = {.rank = (int32_t)rank};
    memcpy(it.dims, di, rank * sizeof *di);
    memcpy(it.strides[0], out_strides, sizeof out_strides);
    dense_strides(di, rank, it.strides[1]);
    it.offset[0] = at * out_strides[axis];
    at += di[axis];
    int err = gpuk_copy(H->tensor_data(xi), H->tensor_mutable_data(y), &it, es, s);
    if (err) return gpu_launch_status(k->node, err, "Concat kernel");
  }
  return NULL;
}

static OnyxStatus* split_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  st = check_rank(n, rank, "input");
  if (st) return st;
  int64_t axis;
  st = norm_axis(n, H->node_attr_int(n, "axis", 0), rank, &axis);
  if (st) return st;
  size_t no = H->ctx_output_count(ctx);
  int64_t* sizes = calloc(no ? no : 1, sizeof *sizes);
  if (!sizes) return gpu_node_error(n, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t ns = 0;
  if (k->since >= 13) {
    if (H->ctx_input_count(ctx) > 1 && H->ctx_input(ctx, 1))
      st = read_ints(n, H->ctx_input(ctx, 1), "split", sizes, no, &ns);
  } else {
    const int64_t* a = H->node_attr_ints(n, "split", &ns);
    if (ns > no) ns = no + 1; /* reported below */
    for (size_t i = 0; i < ns && i < no; i++)
      sizes[i] = a[i];
  }
  int64_t total = 0;
  if (!st && ns && ns != no)
    st = gpu_node_error(n, ONYX_INVALID_ARGUMENT, "split has %zu sizes for %zu outputs", ns, no);
  if (!st && !ns) { /* equal parts; from opset 18 the last may be smaller */
    int64_t part = (dims[axis] + (int64_t)no - 1) / (int64_t)no;
    if (k->since < 18 && dims[axis] % (int64_t)no)
      st = gpu_node_error(n, ONYX_INVALID_ARGUMENT, "dim %lld does not split into %zu equal parts",
                          (long long)dims[axis], no);
    for (size_t i = 0; i < no; i++) {
      int64_t left = dims[axis] - part * (int64_t)i;
      sizes[i] = left < part ? (left > 0 ? left : 0) : part;
    }
  }
  for (size_t i = 0; !st && i < no; i++) {
    if (sizes[i] < 0) st = gpu_node_error(n, ONYX_INVALID_ARGUMENT, "negative split size");
    total += sizes[i];
  }
  if (!st && total != dims[axis])
    st = gpu_node_error(n, ONYX_INVALID_ARGUMENT, "split sizes add up to %lld, not %lld",
                        (long long)total, (long long)dims[axis]);
  int64_t in_strides[GPU_MAX_RANK];
  dense_strides(dims, rank, in_strides);
  int64_t at = 0;
  int es = (int)elem_size(H->tensor_elem_type(x));
  for (size_t i = 0; !st && i < no; i++) {
    int64_t od[GPU_MAX_RANK];
    memcpy(od, dims, rank * sizeof *od);
    od[axis] = sizes[i];
    int64_t start = at;
    at += sizes[i];
    if (!H->node_output(n, i)) continue;
    OnyxTensor* y;
    st = H->ctx_output(ctx, i, od, rank, &y);
    if (st) break;
    GpuIter it = {.rank = (int32_t)rank};
    memcpy(it.dims, od, rank * sizeof *od);
    dense_strides(od, rank, it.strides[0]);
    memcpy(it.strides[1], in_strides, sizeof in_strides);
    it.offset[1] = start * in_strides[axis];
    int err = gpuk_copy(H->tensor_data(x), H->tensor_mutable_data(y), &it, es, s);
    st = gpu_launch_status(n, err, "Split kernel");
  }
  free(sizes);
  return st;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

static OnyxStatus* slice_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* dims = H->tensor_dims(x);
  st = check_rank(n, rank, "data");
  if (st) return st;
  size_t ni = H->ctx_input_count(ctx);
  int64_t starts[GPU_MAX_RANK], ends[GPU_MAX_RANK], axes[GPU_MAX_RANK], steps[GPU_MAX_RANK];
  size_t ns = 0, ne = 0, na = 0, nst = 0;
  st = read_ints(n, H->ctx_input(ctx, 1), "starts", starts, GPU_MAX_RANK, &ns);
  if (!st) st = read_ints(n, H->ctx_input(ctx, 2), "ends", ends, GPU_MAX_RANK, &ne);
  if (!st && ni > 3) st = read_ints(n, H->ctx_input(ctx, 3), "axes", axes, GPU_MAX_RANK, &na);
  if (!st && ni > 4) st = read_ints(n, H->ctx_input(ctx, 4), "steps", steps, GPU_MAX_RANK, &nst);
  if (st) return st;
  if (ne != ns || (na && na != ns) || (nst && nst != ns))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "starts, ends, axes and steps must have the same length");
  int64_t b[GPU_MAX_RANK], step[GPU_MAX_RANK], len[GPU_MAX_RANK];
  bool set[GPU_MAX_RANK] = {false};
  for (size_t d = 0; d < rank; d++) {
    b[d] = 0;
    step[d] = 1;
    len[d] = dims[d];
  }
  for (size_t i = 0; i < ns; i++) {
    int64_t a;
    st = norm_axis(n, na ? axes[i] : (int64_t)i, rank, &a);
    if (st) return st;
    if (set[a]) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "axis %lld repeats", (long long)a);
    set[a] = true;
    int64_t dim = dims[a], sp = nst ? steps[i] : 1, lo = starts[i], hi = ends[i];
    if (sp == 0) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "a step is 0");
    if (lo < 0) lo += dim;
    if (hi < 0) hi += dim;
    if (sp > 0) {
      lo = clamp64(lo, 0, dim);
      hi = clamp64(hi, 0, dim);
      len[a] = hi > lo ? (hi - lo + sp - 1) / sp : 0;
    } else {
      lo = clamp64(lo, -1, dim - 1);
      hi = clamp64(hi, -1, dim - 1);
      len[a] = lo > hi ? (lo - hi + (-sp) - 1) / (-sp) : 0;
    }
    b[a] = lo;
    step[a] = sp;
  }
  int64_t in_strides[GPU_MAX_RANK];
  dense_strides(dims, rank, in_strides);
  GpuIter it = {.rank = (int32_t)rank};
  for (size_t d = 0; d < rank; d++) {
    it.dims[d] = len[d];
    it.strides[1][d] = in_strides[d] * step[d];
    if (len[d]) it.offset[1] += b[d] * in_strides[d];
  }
  dense_strides(len, rank, it.strides[0]);
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, len, rank, &y);
  if (st) return st;
  int err = gpuk_copy(H->tensor_data(x), H->tensor_mutable_data(y), &it,
                      (int)elem_size(H->tensor_elem_type(x)), s);
  return gpu_launch_status(n, err, "Slice kernel");
}

static OnyxStatus* gather_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  const OnyxTensor* idx = H->ctx_input(ctx, 1);
  size_t rank = H->tensor_rank(x), ir = H->tensor_rank(idx);
  const int64_t* dims = H->tensor_dims(x);
  int64_t axis;
  st = norm_axis(k->node, H->node_attr_int(k->node, "axis", 0), rank, &axis);
  if (st) return st;
  size_t out_rank = rank - 1 + ir;
  st = check_rank(k->node, out_rank, "the output");
  if (st) return st;
  int64_t od[GPU_MAX_RANK];
  size_t r = 0;
  for (size_t d = 0; d < (size_t)axis; d++)
    od[r++] = dims[d];
  for (size_t d = 0; d < ir; d++)
    od[r++] = H->tensor_dims(idx)[d];
  for (size_t d = (size_t)axis + 1; d < rank; d++)
    od[r++] = dims[d];
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, od, out_rank, &y);
  if (st) return st;
  int err =
      gpuk_gather(H->tensor_data(x), H->tensor_data(idx),
                  H->tensor_elem_type(idx) == ONYX_ELEM_INT64, H->tensor_mutable_data(y),
                  prod(dims, 0, (size_t)axis), dims[axis], prod(dims, (size_t)axis + 1, rank),
                  (int64_t)H->tensor_elem_count(idx), (int)elem_size(H->tensor_elem_type(x)), s);
  return gpu_launch_status(k->node, err, "Gather kernel");
}

static OnyxStatus* cast_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  int from = (int)H->tensor_elem_type(x), to = (int)H->tensor_elem_type(y);
  int err;
  if (from == to)
    err = gpurt_memcpy_async(H->tensor_mutable_data(y), H->tensor_data(x), H->tensor_byte_size(x),
                             GPU_COPY_D2D, s);
  else
    err = gpuk_cast(H->tensor_data(x), from, H->tensor_mutable_data(y), to,
                    (int64_t)H->tensor_elem_count(x), s);
  return gpu_launch_status(k->node, err, "Cast kernel");
}

static OnyxStatus* expand_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  int64_t shape[GPU_MAX_RANK];
  size_t ns = 0;
  st = read_ints(k->node, H->ctx_input(ctx, 1), "shape", shape, GPU_MAX_RANK, &ns);
  if (st) return st;
  size_t xr = H->tensor_rank(x);
  st = check_rank(k->node, xr, "input");
  if (st) return st;
  const int64_t* xd = H->tensor_dims(x);
  size_t r = xr > ns ? xr : ns;
  int64_t od[GPU_MAX_RANK], xs[GPU_MAX_RANK];
  dense_strides(xd, xr, xs);
  GpuIter it = {.rank = (int32_t)r};
  for (size_t d = 0; d < r; d++) {
    int64_t a = d >= r - xr ? xd[d - (r - xr)] : 1;
    int64_t b = d >= r - ns ? shape[d - (r - ns)] : 1;
    if (a != b && a != 1 && b != 1)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                            "input dim %lld does not broadcast to shape dim %lld", (long long)a,
                            (long long)b);
    od[d] = a == 1 ? b : a;
    it.dims[d] = od[d];
    it.strides[1][d] = (d >= r - xr && a != 1) ? xs[d - (r - xr)] : 0;
  }
  dense_strides(od, r, it.strides[0]);
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, od, r, &y);
  if (st) return st;
  int err = gpuk_copy(H->tensor_data(x), H->tensor_mutable_data(y), &it,
                      (int)elem_size(H->tensor_elem_type(x)), s);
  return gpu_launch_status(k->node, err, "Expand kernel");
}

/* ---------------------------------------------------------------------------------- */
/* Views: Reshape, Flatten, Squeeze, Unsqueeze (no copy, no device work)                */
/* ---------------------------------------------------------------------------------- */

static OnyxStatus* view_out(GpuKernel* k, OnyxKernelContext* ctx, const int64_t* dims,
                            size_t rank) {
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  int64_t count = prod(dims, 0, rank);
  if (count != (int64_t)H->tensor_elem_count(x))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                          "the new shape has %lld elements, the input %zu", (long long)count,
                          H->tensor_elem_count(x));
  OnyxTensor* y;
  return H->ctx_output_view(ctx, 0, 0, dims, rank, &y);
}

static OnyxStatus* reshape_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  int64_t shape[GPU_MAX_RANK];
  size_t ns = 0;
  OnyxStatus* st = read_ints(k->node, H->ctx_input(ctx, 1), "shape", shape, GPU_MAX_RANK, &ns);
  if (st) return st;
  bool allowzero = k->since >= 14 && H->node_attr_int(k->node, "allowzero", 0) != 0;
  const int64_t* xd = H->tensor_dims(x);
  size_t xr = H->tensor_rank(x);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < ns; i++) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= xr)
        return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "shape[%zu] is 0 past the input rank",
                              i);
      shape[i] = xd[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "two -1 in shape");
      infer = (int)i;
    } else if (shape[i] < 0) {
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "shape[%zu] is %lld", i,
                            (long long)shape[i]);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    int64_t total = (int64_t)H->tensor_elem_count(x);
    if (!known || total % known)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "cannot infer the -1 dim");
    shape[infer] = total / known;
  }
  return view_out(k, ctx, shape, ns);
}

static OnyxStatus* flatten_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t r = H->tensor_rank(x);
  int64_t axis = H->node_attr_int(k->node, "axis", 1);
  if (axis < 0) axis += (int64_t)r;
  if (axis < 0 || axis > (int64_t)r)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "axis is out of range for rank %zu", r);
  const int64_t* d = H->tensor_dims(x);
  int64_t shape[2] = {prod(d, 0, (size_t)axis), prod(d, (size_t)axis, r)};
  return view_out(k, ctx, shape, 2);
}

/* Squeeze / Unsqueeze axes: an attribute before opset 13, an input after. */
static OnyxStatus* read_axes(GpuKernel* k, OnyxKernelContext* ctx, int64_t* axes, size_t* n) {
  *n = 0;
  if (k->since >= 13) {
    if (H->ctx_input_count(ctx) > 1 && H->ctx_input(ctx, 1))
      return read_ints(k->node, H->ctx_input(ctx, 1), "axes", axes, GPU_MAX_RANK, n);
    return NULL;
  }
  size_t c = 0;
  const int64_t* a = H->node_attr_ints(k->node, "axes", &c);
  if (c > GPU_MAX_RANK) return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "too many axes");
  memcpy(axes, a, c * sizeof *a);
  *n = c;
  return NULL;
}

static OnyxStatus* squeeze_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t r = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  OnyxStatus* st = check_rank(k->node, r, "input");
  if (st) return st;
  int64_t axes[GPU_MAX_RANK];
  size_t na;
  st = read_axes(k, ctx, axes, &na);
  if (st) return st;
  bool drop[GPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    int64_t a;
    st = norm_axis(k->node, axes[i], r, &a);
    if (st) return st;
    if (d[a] != 1)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "cannot squeeze axis %lld of size %lld",
                            (long long)a, (long long)d[a]);
    drop[a] = true;
  }
  int64_t shape[GPU_MAX_RANK];
  size_t ns = 0;
  for (size_t i = 0; i < r; i++)
    if (!(na ? drop[i] : d[i] == 1)) shape[ns++] = d[i];
  return view_out(k, ctx, shape, ns);
}

static OnyxStatus* unsqueeze_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t r = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  int64_t axes[GPU_MAX_RANK];
  size_t na;
  OnyxStatus* st = read_axes(k, ctx, axes, &na);
  if (st) return st;
  size_t out_r = r + na;
  st = check_rank(k->node, out_r, "the output");
  if (st) return st;
  bool add[GPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    int64_t a;
    st = norm_axis(k->node, axes[i], out_r, &a);
    if (st) return st;
    if (add[a])
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "axis %lld repeats", (long long)a);
    add[a] = true;
  }
  int64_t shape[GPU_MAX_RANK];
  size_t j = 0;
  for (size_t i = 0; i < out_r; i++)
    shape[i] = add[i] ? 1 : d[j++];
  return view_out(k, ctx, shape, out_r);
}

/* ---------------------------------------------------------------------------------- */
/* MatMul and Gemm through the vendor's GEMM                                            */
/* ---------------------------------------------------------------------------------- */

/* One (batched) GEMM through the vendor: its SGEMM for float32, its gemm_t
 * (float32 accumulation) for float16 / bfloat16. Strides and leading
 * dimensions are in elements. */
static OnyxStatus* vendor_gemm(GpuKernel* k, void* s, GpuDtype dt, int ta, int tb, int64_t m,
                               int64_t n, int64_t kk, float alpha, const void* a, int64_t lda,
                               int64_t sa, const void* b, int64_t ldb, int64_t sb, float beta,
                               void* c, int64_t ldc, int64_t sc, int64_t batch) {
  if (dt == GPU_F32)
    return gpu_vendor.gemm(k->ep, s, ta, tb, m, n, kk, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                           sc, batch);
  if (!gpu_vendor.gemm_t)
    return gpu_node_error(k->node, ONYX_NOT_IMPLEMENTED, "no %s GEMM in the %s provider",
                          dtype_name(dt), gpu_vendor.name);
  return gpu_vendor.gemm_t(k->ep, s, dt, ta, tb, m, n, kk, alpha, a, lda, sa, b, ldb, sb, beta, c,
                           ldc, sc, batch);
}

static OnyxStatus* matmul_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* A = H->ctx_input(ctx, 0);
  const OnyxTensor* B = H->ctx_input(ctx, 1);
  size_t ra = H->tensor_rank(A), rb = H->tensor_rank(B);
  if (!ra || !rb) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "MatMul of a scalar");
  st = check_rank(n, ra > rb ? ra : rb, "an input");
  if (st) return st;
  const int64_t* da = H->tensor_dims(A);
  const int64_t* db = H->tensor_dims(B);
  int64_t M = ra == 1 ? 1 : da[ra - 2], K = da[ra - 1];
  int64_t Kb = rb == 1 ? db[0] : db[rb - 2], N = rb == 1 ? 1 : db[rb - 1];
  if (K != Kb)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "inner dims differ: %lld and %lld",
                          (long long)K, (long long)Kb);
  GpuDtype dt;
  st = input_dtype(n, A, "A", &dt);
  if (!st) st = same_dtype(n, B, "B", dt);
  if (st) return st;
  const size_t es = elem_size(H->tensor_elem_type(A));
  /* Batch dims: numpy broadcasting of da[:-2] and db[:-2]. */
  size_t ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, br = ba > bb ? ba : bb;
  int64_t bd[GPU_MAX_RANK];
  for (size_t d = 0; d < br; d++) {
    int64_t x = d >= br - ba ? da[d - (br - ba)] : 1;
    int64_t y = d >= br - bb ? db[d - (br - bb)] : 1;
    if (x != y && x != 1 && y != 1)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "batch dims %lld and %lld do not broadcast",
                            (long long)x, (long long)y);
    bd[d] = x == 1 ? y : x;
  }
  int64_t od[GPU_MAX_RANK];
  size_t orank = 0;
  for (size_t d = 0; d < br; d++)
    od[orank++] = bd[d];
  if (ra > 1) od[orank++] = M;
  if (rb > 1) od[orank++] = N;
  OnyxTensor* Y;
  st = H->ctx_output(ctx, 0, od, orank, &Y);
  if (st) return st;
  int64_t batch = prod(bd, 0, br), batch_a = prod(da, 0, ba), batch_b = prod(db, 0, bb);
  const char* a = H->tensor_data(A);
  const char* b = H->tensor_data(B);
  char* y = H->tensor_mutable_data(Y);
  if (!batch || !M || !N) return NULL;
  if (!K) /* an empty sum: zeros (a BLAS refuses a leading dimension of 0) */
    return gpu_launch_status(n, gpurt_memset_async(y, 0, (size_t)(batch * M * N) * es, s),
                             "zeroing Y");
  if ((batch_a == batch || batch_a == 1) && (batch_b == batch || batch_b == 1))
    return vendor_gemm(k, s, dt, 0, 0, M, N, K, 1.0f, a, K, batch_a == 1 ? 0 : M * K, b, N,
                       batch_b == 1 ? 0 : K * N, 0.0f, y, N, M * N, batch);
  /* Partly broadcast batches: one GEMM per batch, operands located by index. */
  for (int64_t i = 0; i < batch && !st; i++) {
    int64_t rest = i, oa = 0, ob = 0, sa = 1, sb = 1;
    for (size_t d = br; d-- > 0;) {
      int64_t c = rest % bd[d];
      rest /= bd[d];
      if (d >= br - ba) {
        int64_t dim = da[d - (br - ba)];
        oa += (dim == 1 ? 0 : c) * sa;
        sa *= dim;
      }
      if (d >= br - bb) {
        int64_t dim = db[d - (br - bb)];
        ob += (dim == 1 ? 0 : c) * sb;
        sb *= dim;
      }
    }
    st = vendor_gemm(k, s, dt, 0, 0, M, N, K, 1.0f, a + (size_t)(oa * M * K) * es, K, 0,
                     b + (size_t)(ob * K * N) * es, N, 0, 0.0f, y + (size_t)(i * M * N) * es, N, 0,
                     1);
  }
  return st;
}

static OnyxStatus* gemm_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* A = H->ctx_input(ctx, 0);
  const OnyxTensor* B = H->ctx_input(ctx, 1);
  const OnyxTensor* C = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  if (H->tensor_rank(A) != 2 || H->tensor_rank(B) != 2)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "A and B must be 2-D");
  int ta = H->node_attr_int(n, "transA", 0) != 0, tb = H->node_attr_int(n, "transB", 0) != 0;
  float alpha = H->node_attr_float(n, "alpha", 1.0f), beta = H->node_attr_float(n, "beta", 1.0f);
  const int64_t* da = H->tensor_dims(A);
  const int64_t* db = H->tensor_dims(B);
  int64_t M = ta ? da[1] : da[0], K = ta ? da[0] : da[1];
  int64_t Kb = tb ? db[1] : db[0], N = tb ? db[0] : db[1];
  if (K != Kb)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "inner dims differ: %lld and %lld",
                          (long long)K, (long long)Kb);
  GpuDtype dt;
  st = input_dtype(n, A, "A", &dt);
  if (!st) st = same_dtype(n, B, "B", dt);
  if (!st) st = same_dtype(n, C, "C", dt);
  if (st) return st;
  const int es = (int)elem_size(H->tensor_elem_type(A));
  int64_t od[2] = {M, N};
  OnyxTensor* Y;
  st = H->ctx_output(ctx, 0, od, 2, &Y);
  if (st) return st;
  void* y = H->tensor_mutable_data(Y);
  if (!M || !N) return NULL;
  if (C && beta != 0.0f) { /* Y = broadcast C, then Y = alpha AB + beta Y */
    size_t rc = H->tensor_rank(C);
    const int64_t* dc = H->tensor_dims(C);
    if (rc > 2) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "C has rank %zu", rc);
    int64_t cm = rc == 2 ? dc[0] : 1, cn = rc >= 1 ? dc[rc - 1] : 1;
    if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "C does not broadcast to [%lld, %lld]",
                            (long long)M, (long long)N);
    GpuIter it = {.rank = 2, .dims = {M, N}};
    it.strides[0][0] = N;
    it.strides[0][1] = 1;
    it.strides[1][0] = cm == 1 ? 0 : cn;
    it.strides[1][1] = cn == 1 ? 0 : 1;
    int err = gpuk_copy(H->tensor_data(C), y, &it, es, s);
    if (err) return gpu_launch_status(n, err, "Gemm bias broadcast");
  } else {
    beta = 0.0f;
  }
  return vendor_gemm(k, s, dt, ta, tb, M, N, K, alpha, H->tensor_data(A), da[1], 0,
                     H->tensor_data(B), db[1], 0, beta, y, N, 0, 1);
}

/* ---------------------------------------------------------------------------------- */
/* com.onyx FusedMatMul: Y = act(A (..., K) x B (K, N) + Bias (N) [+ Z (Y's shape)])      */
/* ---------------------------------------------------------------------------------- */

/* The `activation` of a FusedMatMul node as a GpuActivation, or -1 (with
 * *why) for one the GPU does not apply. */
static int fused_activation(const OnyxNode* n, const char** why) {
  size_t len = 0;
  const char* a = H->node_attr_string(n, "activation", &len);
  *why = NULL;
  if (!a || !len) return GPU_ACT_NONE;
  if (len == 4 && !memcmp(a, "Relu", 4)) return GPU_ACT_RELU;
  if (len == 9 && !memcmp(a, "LeakyRelu", 9)) return GPU_ACT_LEAKY_RELU;
  if (len == 4 && !memcmp(a, "Clip", 4)) return GPU_ACT_CLIP;
  if (len == 4 && !memcmp(a, "Gelu", 4)) return GPU_ACT_GELU;
  *why = "FusedMatMul activation not supported on the GPU (Relu, LeakyRelu, Clip or Gelu)";
  return -1;
}

/* Reads the activation and its parameters once: i0 the GpuActivation,
 * alpha LeakyRelu's slope, or alpha / beta Clip's bounds. */
static OnyxStatus* fused_matmul_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  const char* why = NULL;
  int act = fused_activation(node, &why);
  if (act < 0) {
    size_t len = 0;
    const char* a = H->node_attr_string(node, "activation", &len);
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                          "activation '%.*s' not supported (Relu, LeakyRelu, Clip or Gelu)",
                          (int)len, a ? a : "");
  }
  OnyxStatus* st = gpu_kernel_create(ep, node, user, state);
  if (st) return st;
  GpuKernel* k = *state;
  k->i0 = act;
  if (act == GPU_ACT_LEAKY_RELU) k->alpha = H->node_attr_float(node, "alpha", 0.01f);
  if (act == GPU_ACT_CLIP) {
    k->alpha = H->node_attr_float(node, "clip_min", -INFINITY);
    k->beta = H->node_attr_float(node, "clip_max", INFINITY);
  }
  return NULL;
}

/* One GEMM of the vendor's (cuBLAS / rocBLAS / the tiled kernel) over A as
 * [M, K] rows, then one pass of the epilogue kernel adds Bias and Z and
 * applies the activation. */
static OnyxStatus* fused_matmul_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxNode* n = k->node;
  const OnyxTensor* A = H->ctx_input(ctx, 0);
  const OnyxTensor* B = H->ctx_input(ctx, 1);
  const OnyxTensor* bias = H->ctx_input(ctx, 2);
  const OnyxTensor* Z = H->ctx_input_count(ctx) > 3 ? H->ctx_input(ctx, 3) : NULL;
  size_t ra = H->tensor_rank(A), rb = H->tensor_rank(B);
  st = check_rank(n, ra, "A");
  if (st) return st;
  const int64_t* da = H->tensor_dims(A);
  const int64_t* db = H->tensor_dims(B);
  if (ra < 2 || rb != 2 || da[ra - 1] != db[0])
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "A (rank %zu) and B (rank %zu) do not multiply (A of rank >= 2, B 2-D, "
                          "A's last dim B's first)",
                          ra, rb);
  int64_t K = db[0], N = db[1], M = prod(da, 0, ra - 1);
  GpuDtype dt;
  st = input_dtype(n, A, "A", &dt);
  if (!st) st = same_dtype(n, B, "B", dt);
  if (!st) st = same_dtype(n, bias, "Bias", dt);
  if (st) return st;
  if (!bias || (int64_t)H->tensor_elem_count(bias) != N)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Bias must hold %lld elements", (long long)N);
  int64_t dy[GPU_MAX_RANK];
  memcpy(dy, da, ra * sizeof *dy);
  dy[ra - 1] = N;
  if (Z && (dtype_of(H->tensor_elem_type(Z)) != (int)dt || H->tensor_rank(Z) != ra ||
            memcmp(H->tensor_dims(Z), dy, ra * sizeof *dy) != 0))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "Z must be %s of Y's shape (A's with its last dim %lld)", dtype_name(dt),
                          (long long)N);
  OnyxTensor* Y;
  st = H->ctx_output(ctx, 0, dy, ra, &Y);
  if (st) return st;
  if (!M || !N) return NULL;
  void* y = H->tensor_mutable_data(Y);
  if (K)
    st = vendor_gemm(k, s, dt, 0, 0, M, N, K, 1.0f, H->tensor_data(A), K, 0, H->tensor_data(B), N,
                     0, 0.0f, y, N, 0, 1);
  else /* an empty sum: zeros (a BLAS refuses a leading dimension of 0) */
    st = gpu_launch_status(
        n, gpurt_memset_async(y, 0, (size_t)(M * N) * elem_size(H->tensor_elem_type(A)), s),
        "zeroing Y");
  if (st) return st;
  GpuActivation act = (GpuActivation)k->i0;
  float alpha = act == GPU_ACT_LEAKY_RELU ? k->alpha : 0.0f;
  float lo = act == GPU_ACT_CLIP ? k->alpha : 0.0f, hi = act == GPU_ACT_CLIP ? k->beta : 0.0f;
  int err = gpuk_epilogue_t(dt, y, H->tensor_data(bias), Z ? H->tensor_data(Z) : NULL, M, N, act,
                            alpha, lo, hi, s);
  return gpu_launch_status(n, err, "FusedMatMul epilogue kernel");
}

/* ---------------------------------------------------------------------------------- */
/* Registration                                                                         */
/* ---------------------------------------------------------------------------------- */

#define TC(name, list)                                                                             \
  { name, list, sizeof list / sizeof list[0] }

OnyxStatus* gpu_register_common_kernels(OnyxKernelRegistry* r) {
  OnyxStatus* st = NULL;
  /* The float kernels take float32, float16 and bfloat16 storage alike. */
  const OnyxTypeConstraint tf[] = {TC("T", gpu_real_types)};
  const OnyxTypeConstraint tpow[] = {TC("T", gpu_real_types), TC("T1", gpu_real_types)};
  const OnyxTypeConstraint tcmp[] = {TC("T", gpu_real_types), TC("T1", g_bool_types)};
  const OnyxTypeConstraint twhere[] = {TC("B", g_bool_types), TC("T", g_any_types)};
  const OnyxTypeConstraint tany[] = {TC("T", g_any_types)};
  const OnyxTypeConstraint tgather[] = {TC("T", g_any_types), TC("Tind", g_index_types)};
  const OnyxTypeConstraint tcast[] = {TC("T1", g_cast_types), TC("T2", g_cast_types)};
  /* LayerNormalization: X, Scale, B and Y of T; Mean and InvStdDev float32. */
  const OnyxTypeConstraint tln[] = {TC("T", gpu_real_types), TC("U", gpu_float_types)};
  const OnyxTypeConstraint ti64[] = {TC("T", g_any_types), TC("T1", g_int64_types)};
  static const struct {
    const char* op;
    int32_t since, code;
  } bin[] = {{"Add", 7, GPU_ADD},
             {"Sub", 7, GPU_SUB},
             {"Mul", 7, GPU_MUL},
             {"Div", 7, GPU_DIV},
             {"Equal", 7, GPU_EQUAL},
             {"Less", 7, GPU_LESS},
             {"Greater", 7, GPU_GREATER},
             {"LessOrEqual", 12, GPU_LESS_EQUAL},
             {"GreaterOrEqual", 12, GPU_GREATER_EQUAL}};
  for (size_t i = 0; !st && i < sizeof bin / sizeof bin[0]; i++) {
    bool cmp = bin[i].code >= GPU_EQUAL;
    st = gpu_register(r, bin[i].op, bin[i].since, ONYX_OPSET_LATEST, cmp ? tcmp : tf, cmp ? 2 : 1,
                      NULL, 0, NULL, binary_compute, CODE_BINARY + bin[i].code);
  }
  /* Pow 7-11 has one constraint T; from 12 the exponent has its own T1. */
  if (!st)
    st = gpu_register(r, "Pow", 7, 11, tf, 1, NULL, 0, NULL, binary_compute, CODE_BINARY + GPU_POW);
  if (!st)
    st = gpu_register(r, "Pow", 12, ONYX_OPSET_LATEST, tpow, 2, NULL, 0, NULL, binary_compute,
                      CODE_BINARY + GPU_POW);
  static const struct {
    const char* op;
    int32_t since, code;
  } un[] = {{"Relu", 6, GPU_RELU},
            {"Sigmoid", 6, GPU_SIGMOID},
            {"Tanh", 6, GPU_TANH},
            {"Erf", 9, GPU_ERF},
            {"Gelu", 20, GPU_GELU},
            {"LeakyRelu", 6, GPU_LEAKY_RELU},
            {"Abs", 6, GPU_ABS},
            {"Neg", 6, GPU_NEG},
            {"Exp", 6, GPU_EXP},
            {"Log", 6, GPU_LOG},
            {"Sqrt", 6, GPU_SQRT},
            {"Reciprocal", 6, GPU_RECIPROCAL},
            {"Floor", 6, GPU_FLOOR},
            {"Ceil", 6, GPU_CEIL},
            {"Elu", 6, GPU_ELU},
            {"HardSigmoid", 6, GPU_HARD_SIGMOID},
            {"Softplus", 1, GPU_SOFTPLUS},
            {"Sin", 7, GPU_SIN},
            {"Cos", 7, GPU_COS}};
  for (size_t i = 0; !st && i < sizeof un / sizeof un[0]; i++)
    st = gpu_register(r, un[i].op, un[i].since, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL,
                      unary_compute, CODE_UNARY + un[i].code);
  /* Clip: attributes min/max before 11, host-memory inputs after. */
  if (!st)
    st = gpu_register(r, "Clip", 6, 10, tf, 1, NULL, 0, NULL, unary_compute, CODE_UNARY + GPU_CLIP);
  if (!st)
    st = gpu_register(r, "Clip", 11, ONYX_OPSET_LATEST, tf, 1, g_host_mem_rest, 3, NULL,
                      unary_compute, CODE_UNARY + GPU_CLIP);
  if (!st)
    st = gpu_register(r, "Where", 9, ONYX_OPSET_LATEST, twhere, 2, NULL, 0, NULL, where_compute,
                      CODE_WHERE);
  if (!st)
    st = gpu_register(r, "Softmax", 1, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL, softmax_compute,
                      CODE_SOFTMAX);
  if (!st)
    st = gpu_register(r, "LogSoftmax", 1, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL, softmax_compute,
                      CODE_LOG_SOFTMAX);
  if (!st)
    st = gpu_register(r, "LayerNormalization", 17, ONYX_OPSET_LATEST, tln, 2, NULL, 0, NULL,
                      layernorm_compute, CODE_LAYERNORM);
  /* Reductions: axes attribute, then (ReduceSum 13, the others 18) an input. */
  static const struct {
    const char* op;
    int32_t input_from, code;
  } red[] = {{"ReduceSum", 13, CODE_REDUCE_SUM},
             {"ReduceMean", 18, CODE_REDUCE_MEAN},
             {"ReduceMax", 18, CODE_REDUCE_MAX},
             {"ReduceMin", 18, CODE_REDUCE_MIN}};
  for (size_t i = 0; !st && i < sizeof red / sizeof red[0]; i++) {
    st = gpu_register(r, red[i].op, 1, red[i].input_from - 1, tf, 1, NULL, 0, NULL, reduce_compute,
                      red[i].code);
    if (!st)
      st = gpu_register(r, red[i].op, red[i].input_from, ONYX_OPSET_LATEST, tf, 1, gpu_host_mem2, 2,
                        NULL, reduce_compute, red[i].code);
  }
  if (!st)
    st = gpu_register(r, "Transpose", 1, ONYX_OPSET_LATEST, tany, 1, NULL, 0, NULL,
                      transpose_compute, CODE_TRANSPOSE);
  if (!st)
    st = gpu_register(r, "Concat", 4, ONYX_OPSET_LATEST, tany, 1, NULL, 0, NULL, concat_compute,
                      CODE_CONCAT);
  if (!st) st = gpu_register(r, "Split", 2, 12, tany, 1, NULL, 0, NULL, split_compute, CODE_SPLIT);
  if (!st)
    st = gpu_register(r, "Split", 13, ONYX_OPSET_LATEST, tany, 1, gpu_host_mem2, 2, NULL,
                      split_compute, CODE_SPLIT);
  if (!st)
    st = gpu_register(r, "Slice", 10, ONYX_OPSET_LATEST, tany, 1, g_host_mem_rest, 5, NULL,
                      slice_compute, CODE_SLICE);
  if (!st)
    st = gpu_register(r, "Gather", 1, ONYX_OPSET_LATEST, tgather, 2, NULL, 0, NULL, gather_compute,
                      CODE_GATHER);
  if (!st)
    st = gpu_register(r, "Cast", 6, ONYX_OPSET_LATEST, tcast, 2, NULL, 0, NULL, cast_compute,
                      CODE_CAST);
  if (!st)
    st = gpu_register(r, "Expand", 8, ONYX_OPSET_LATEST, tany, 1, gpu_host_mem2, 2, NULL,
                      expand_compute, CODE_EXPAND);
  if (!st)
    st = gpu_register(r, "Reshape", 5, ONYX_OPSET_LATEST, tany, 1, gpu_host_mem2, 2, &g_view,
                      reshape_compute, CODE_RESHAPE);
  if (!st)
    st = gpu_register(r, "Flatten", 1, ONYX_OPSET_LATEST, tany, 1, NULL, 0, &g_view,
                      flatten_compute, CODE_FLATTEN);
  if (!st)
    st =
        gpu_register(r, "Squeeze", 1, 12, tany, 1, NULL, 0, &g_view, squeeze_compute, CODE_SQUEEZE);
  if (!st)
    st = gpu_register(r, "Squeeze", 13, ONYX_OPSET_LATEST, ti64, 1, gpu_host_mem2, 2, &g_view,
                      squeeze_compute, CODE_SQUEEZE);
  if (!st)
    st = gpu_register(r, "Unsqueeze", 1, 12, tany, 1, NULL, 0, &g_view, unsqueeze_compute,
                      CODE_UNSQUEEZE);
  if (!st)
    st = gpu_register(r, "Unsqueeze", 13, ONYX_OPSET_LATEST, ti64, 1, gpu_host_mem2, 2, &g_view,
                      unsqueeze_compute, CODE_UNSQUEEZE);
  if (!st)
    st = gpu_register(r, "MatMul", 1, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL, matmul_compute,
                      CODE_MATMUL);
  if (!st)
    st = gpu_register(r, "Gemm", 7, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL, gemm_compute,
                      CODE_GEMM);
  /* The com.onyx ops of the host's fusions (opt_fusion.c): taken after
   * placement only where this registry has them. */
  if (!st)
    st = gpu_register_contrib(r, "FusedMatMul", tf, 1, fused_matmul_create, fused_matmul_compute,
                              CODE_FUSED_MATMUL);
  if (!st) st = gpu_register_contrib(r, "Gelu", tf, 1, NULL, unary_compute, CODE_UNARY + GPU_GELU);
  if (!st)
    st = gpu_register_contrib(r, "LayerNormalization", tln, 2, NULL, layernorm_compute,
                              CODE_LAYERNORM);
  /* com.onyx MultiHeadAttention: gpu_attention.c */
  if (!st) st = gpu_register_attention_kernels(r);
  if (!st) st = gpu_register_grad_kernels(r); /* com.onyx.training: gpu_grad_ops.c */
  if (!st) st = gpu_register_meta_kernels(r); /* Shape, Size: gpu_meta_ops.c */
  return st;
}

/* ---------------------------------------------------------------------------------- */
/* Capability                                                                           */
/* ---------------------------------------------------------------------------------- */

static bool is_view_op(const char* op) {
  return !strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
         !strcmp(op, "Unsqueeze");
}

/* Pointers claimed so far in one get_capability call (open addressing). */
typedef struct NodeSet {
  const OnyxNode** slots;
  size_t cap;
} NodeSet;

static size_t node_hash(const OnyxNode* n, size_t cap) {
  uintptr_t v = (uintptr_t)n;
  v ^= v >> 17;
  v *= 0x9E3779B97F4A7C15ull;
  return (size_t)(v >> 7) & (cap - 1);
}

static void set_add(NodeSet* s, const OnyxNode* n) {
  size_t i = node_hash(n, s->cap);
  while (s->slots[i] && s->slots[i] != n)
    i = (i + 1) & (s->cap - 1);
  s->slots[i] = n;
}

static bool set_has(const NodeSet* s, const OnyxNode* n) {
  size_t i = node_hash(n, s->cap);
  while (s->slots[i]) {
    if (s->slots[i] == n) return true;
    i = (i + 1) & (s->cap - 1);
  }
  return false;
}

/* 1 if every non-constant input of n (the first alone where first_only) is
 * produced by a node claimed here. */
static bool inputs_here(const OnyxNode* n, const NodeSet* claimed, bool first_only) {
  for (size_t i = 0; i < (first_only ? 1 : H->node_input_count(n)); i++) {
    const OnyxValueInfo* v = H->node_input(n, i);
    if (!v || H->value_constant(v)) continue;
    const OnyxNode* p = H->value_producer(v);
    if (!p || !set_has(claimed, p)) return false;
  }
  return true;
}

/* Why a node the registry matches is not taken here for its element types,
 * or NULL: Pow with a base and an exponent of different types (the kernel
 * takes one storage type); a float16 / bfloat16 GEMM where the vendor has no
 * gemm_t. */
static const char* type_decline(const OnyxNode* node) {
  const char* op = H->node_op_type(node);
  if (!H->node_input_count(node) || !H->node_input(node, 0)) return NULL;
  const int dt = dtype_of(H->value_elem_type(H->node_input(node, 0)));
  if (!strcmp(op, "Pow") && H->node_input_count(node) > 1 && H->node_input(node, 1) &&
      dtype_of(H->value_elem_type(H->node_input(node, 1))) != dt)
    return "Pow with an exponent of another type than the base";
  if ((dt == GPU_F16 || dt == GPU_BF16) && !gpu_vendor.gemm_t &&
      (!strcmp(op, "MatMul") || !strcmp(op, "Gemm") || !strcmp(op, "FusedMatMul")))
    return "no float16 / bfloat16 GEMM in this provider";
  return NULL;
}

/* Claims what the registry matches, except what the vendor's kernels take
 * only partly. View ops and integer (shape-arithmetic) nodes are "cheap":
 * taken only when their inputs are already produced here, so that shape
 * computations stay on the CPU and data does not go back and forth. (This
 * is decided here rather than with host->mark_cheap: see
 * docs/providers/cuda.md, "Placement".) */
OnyxStatus* gpu_get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  size_t n = H->graph_node_count(g);
  NodeSet claimed = {NULL, 16};
  while (claimed.cap < 2 * n + 2)
    claimed.cap *= 2;
  claimed.slots = calloc(claimed.cap, sizeof *claimed.slots);
  if (!claimed.slots)
    return H->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    const OnyxNode* node = H->graph_node(g, i);
    const char* why = NULL;
    if (!H->has_kernel(b, node, &why)) {
      H->decline_node(b, node, why ? why : "no GPU kernel");
      continue;
    }
    const char* vendor_why = gpu_vendor.decline ? gpu_vendor.decline(node) : NULL;
    if (!vendor_why && !strcmp(H->node_op_type(node), "FusedMatMul"))
      (void)fused_activation(node, &vendor_why);
    if (!vendor_why) vendor_why = gpu_attention_decline(node);
    if (!vendor_why) vendor_why = type_decline(node);
    if (vendor_why) {
      H->decline_node(b, node, vendor_why);
      continue;
    }
    const OnyxValueInfo* in0 = H->node_input_count(node) ? H->node_input(node, 0) : NULL;
    const OnyxValueInfo* out0 = H->node_output_count(node) ? H->node_output(node, 0) : NULL;
    if ((in0 && H->value_rank(in0) > GPU_MAX_RANK) ||
        (out0 && H->value_rank(out0) > GPU_MAX_RANK)) {
      H->decline_node(b, node, "rank above 8");
      continue;
    }
    OnyxElemType t = in0 ? H->value_elem_type(in0) : ONYX_ELEM_UNDEFINED;
    /* GatherGrad's first input is X_shape (int64, read on the host); its
     * work is float. */
    /* Shape and Size read only the dims: taken after a GPU producer (no
     * copy of their input to the host), and left out of `claimed` so that
     * the shape arithmetic they feed stays on the CPU. */
    const bool meta = gpu_meta_op(node);
    bool cheap = meta || is_view_op(H->node_op_type(node)) ||
                 ((t == ONYX_ELEM_INT64 || t == ONYX_ELEM_INT32) &&
                  strcmp(H->node_op_type(node), "GatherGrad") != 0);
    /* A view of float data made here is taken wherever its shape input
     * (read in host memory) was computed: the data stays on the GPU. */
    const bool float_view = is_view_op(H->node_op_type(node)) && t != ONYX_ELEM_INT64 &&
                            t != ONYX_ELEM_INT32 && H->node_input_count(node) > 0;
    if (cheap && !inputs_here(node, &claimed, float_view)) {
      H->decline_node(b, node,
                      "cheap on the GPU (a view or integer shape arithmetic) and its inputs are "
                      "not produced there");
      continue;
    }
    st = H->claim_node(b, node);
    if (!st && !meta) set_add(&claimed, node);
  }
  free(claimed.slots);
  return st;
}
