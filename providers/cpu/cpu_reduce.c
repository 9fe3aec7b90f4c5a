/* cpu_reduce.c — ReduceSum and ReduceMean over any set of axes.
 *
 * One pass over the input in memory order, each element added to its
 * output slot; floats accumulate in double, integers in uint64_t (wrapping,
 * never undefined). Correct for any axes and empty tensors; not yet fast. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

/* What distinguishes the kernels: the op, and whether axes come from the
 * attribute (ReduceSum < 13, ReduceMean < 18) or from input 1. */
typedef struct ReduceMode {
  bool mean;
  bool axes_input;
} ReduceMode;

typedef struct ReduceState {
  ReduceMode mode;
  const int64_t* axes; /* attribute form; owned by the node */
  size_t n_axes;
  bool keepdims;
  bool noop_with_empty_axes;
} ReduceState;

static OnyxStatus* reduce_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ReduceState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->mode = *(const ReduceMode*)user;
  if (!s->mode.axes_input) s->axes = cpu_host->node_attr_ints(node, "axes", &s->n_axes);
  s->keepdims = cpu_host->node_attr_int(node, "keepdims", 1) != 0;
  s->noop_with_empty_axes = cpu_host->node_attr_int(node, "noop_with_empty_axes", 0) != 0;
  *out = s;
  return NULL;
}

/* The axes to reduce, marked in `mark`; *noop when the input passes through
 * unchanged (empty axes with noop_with_empty_axes). No axes: all of them. */
static OnyxStatus* reduce_axes(OnyxKernelContext* ctx, const ReduceState* s, size_t rank,
                               bool* mark, bool* noop) {
  const int64_t* axes = s->axes;
  size_t n = s->n_axes;
  *noop = false;
  if (s->mode.axes_input && cpu_host->ctx_input_count(ctx) > 1 && cpu_host->ctx_input(ctx, 1)) {
    int64_t* buf;
    OnyxStatus* st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "axes", &buf, &n);
    if (st) return st;
    axes = buf;
  }
  if (n == 0) {
    *noop = s->noop_with_empty_axes;
    for (size_t d = 0; d < rank; d++)
      mark[d] = true;
    return NULL;
  }
  return cpu_mark_axes(ctx, axes, n, rank, mark);
}

/* Adds every input element into acc[out offset]: an odometer over the input
 * dims, the output offset moving by out_strides (0 along reduced dims). */
#define REDUCE_ACCUM(T, ACC)                                                                       \
  do {                                                                                             \
    const T* p = data;                                                                             \
    ACC* a = acc;                                                                                  \
    for (size_t i = 0; i < count; i++) {                                                           \
      a[off] += (ACC)p[i];                                                                         \
      for (size_t d = rank; d-- > 0;) {                                                            \
        off += out_strides[d];                                                                     \
        if (++idx[d] < dims[d]) break;                                                             \
        off -= out_strides[d] * dims[d];                                                           \
        idx[d] = 0;                                                                                \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void reduce_accumulate(int32_t type, const void* data, const int64_t* dims, size_t rank,
                              const int64_t* out_strides, void* acc) {
  size_t count = cpu_dims_product(dims, 0, rank);
  int64_t idx[CPU_MAX_RANK] = {0}, off = 0;
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    REDUCE_ACCUM(float, double);
    break;
  case ONYX_ELEM_FLOAT64:
    REDUCE_ACCUM(double, double);
    break;
  case ONYX_ELEM_INT32:
    REDUCE_ACCUM(int32_t, uint64_t);
    break;
  default: /* int64 */
    REDUCE_ACCUM(int64_t, uint64_t);
    break;
  }
}

/* Writes acc into y: the sums, or their means over `n` elements. */
static void reduce_store(int32_t type, const void* acc, void* y, size_t out_count, bool mean,
                         size_t n) {
  for (size_t i = 0; i < out_count; i++) {
    if (type == ONYX_ELEM_FLOAT32 || type == ONYX_ELEM_FLOAT64) {
      double v = ((const double*)acc)[i];
      if (mean) v = n ? v / (double)n : NAN; /* mean of nothing: NaN, as numpy */
      if (type == ONYX_ELEM_FLOAT32)
        ((float*)y)[i] = (float)v;
      else
        ((double*)y)[i] = v;
      continue;
    }
    int64_t v = (int64_t)((const uint64_t*)acc)[i];
    if (mean) v = n ? v / (int64_t)n : 0;
    if (type == ONYX_ELEM_INT32)
      ((int32_t*)y)[i] = (int32_t)v;
    else
      ((int64_t*)y)[i] = v;
  }
}

static OnyxStatus* reduce_compute(void* state, OnyxKernelContext* ctx) {
  const ReduceState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  if (rank > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds %d", rank, CPU_MAX_RANK);
  bool mark[CPU_MAX_RANK] = {false}, noop;
  OnyxStatus* st = reduce_axes(ctx, s, rank, mark, &noop);
  if (st) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  OnyxTensor* y;
  if (noop) {
    if ((st = cpu_host->ctx_output(ctx, 0, in, rank, &y))) return st;
    return cpu_copy_elems(y, 0, x, 0, cpu_host->tensor_elem_count(x));
  }
  int64_t out_dims[CPU_MAX_RANK], out_strides[CPU_MAX_RANK];
  size_t out_rank = 0, n = 1;
  for (size_t d = 0; d < rank; d++) {
    if (mark[d]) n *= (size_t)in[d];
    if (!mark[d] || s->keepdims) out_dims[out_rank++] = mark[d] ? 1 : in[d];
  }
  int64_t stride = 1; /* dense strides of the output, 0 along reduced dims */
  for (size_t d = rank; d-- > 0;) {
    out_strides[d] = mark[d] ? 0 : stride;
    if (!mark[d]) stride *= in[d];
  }
  if ((st = cpu_host->ctx_output(ctx, 0, out_dims, out_rank, &y))) return st;
  size_t out_count = cpu_host->tensor_elem_count(y);
  if (out_count == 0) return NULL;
  void* acc = cpu_host->ctx_scratch(ctx, out_count * sizeof(double));
  if (!acc) return cpu_oom(ctx);
  memset(acc, 0, out_count * sizeof(double)); /* 0.0 and 0u share their bits */
  int32_t type = cpu_host->tensor_elem_type(x);
  reduce_accumulate(type, cpu_host->tensor_data(x), in, rank, out_strides, acc);
  reduce_store(type, acc, cpu_host->tensor_mutable_data(y), out_count, s->mode.mean, n);
  return NULL;
}

static const int32_t reduce_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT32,
                                       ONYX_ELEM_INT64};
static const OnyxTypeConstraint reduce_tc[] = {{"T", reduce_types, CPU_ARRAY_LEN(reduce_types)}};

static const ReduceMode sum_attr = {false, false}, sum_input = {false, true};
static const ReduceMode mean_attr = {true, false}, mean_input = {true, true};

#define FREE cpu_free_state
static const CpuKernelSpec reduce_specs[] = {
    {"ReduceSum", 1, 12, reduce_tc, 1, reduce_create, reduce_compute, FREE, (void*)&sum_attr},
    {"ReduceSum", 13, ONYX_OPSET_LATEST, reduce_tc, 1, reduce_create, reduce_compute, FREE,
     (void*)&sum_input},
    {"ReduceMean", 1, 17, reduce_tc, 1, reduce_create, reduce_compute, FREE, (void*)&mean_attr},
    {"ReduceMean", 18, ONYX_OPSET_LATEST, reduce_tc, 1, reduce_create, reduce_compute, FREE,
     (void*)&mean_input},
};

OnyxStatus* cpu_register_reduce(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, reduce_specs, CPU_ARRAY_LEN(reduce_specs));
}
