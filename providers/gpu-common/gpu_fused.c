/* gpu_fused.c — the host side of com.onyx FusedElementwise on the GPU
 * providers (the op the optimizer's fuse_elementwise pass makes; schema in
 * schemas/schemas_fused.c): the node's program checked once at kernel
 * creation (a model may carry a hostile one), then per run the inputs'
 * numpy broadcast, Y's allocation and the launch of gpu_fused.cu's kernel on
 * the EP's stream. Compiled into both GPU providers. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_ep.h"
#include "gpu_fused.h"

#define H gpu_host

typedef struct GpuFused {
  GpuKernel k; /* first: gpu_kernel_begin takes it */
  GpuFeProgram prog;
} GpuFused;

static OnyxStatus* fused_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)user;
  size_t n_prog = 0, n_imm = 0;
  if (H->node_attr_type(node, "program") != ONYX_ATTR_INTS)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "attribute 'program' (ints) is required");
  const int64_t* prog = H->node_attr_ints(node, "program", &n_prog);
  const float* imm = NULL;
  const OnyxAttrType it = H->node_attr_type(node, "immediates");
  if (it == ONYX_ATTR_FLOATS) {
    imm = H->node_attr_floats(node, "immediates", &n_imm);
  } else if (it != ONYX_ATTR_UNDEFINED) {
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "attribute 'immediates' must be floats");
  }
  GpuFused* f = calloc(1, sizeof *f);
  if (!f) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  int64_t at, value;
  const char* why =
      gpu_fused_check(prog, n_prog, imm, n_imm, H->node_input_count(node), &f->prog, &at, &value);
  if (why) {
    free(f);
    if (at < 0)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "attribute 'program': %s (%lld)", why,
                            (long long)value);
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "attribute 'program': instruction %lld: %s (%lld)", (long long)at, why,
                          (long long)value);
  }
  f->k.ep = gpu_ep(ep);
  f->k.node = node;
  f->k.since = H->node_since_version(node);
  *state = f;
  return NULL;
}

static void fused_release(void* state) {
  free(state);
}

static OnyxStatus* fused_compute(void* state, OnyxKernelContext* ctx) {
  GpuFused* f = state;
  const OnyxNode* n = f->k.node;
  void* stream;
  OnyxStatus* st = gpu_kernel_begin(&f->k, ctx, &stream);
  if (st) return st;
  const size_t n_in = H->ctx_input_count(ctx);
  if (n_in < 1 || n_in > GPU_FE_MAX_INPUTS)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%zu inputs; 1 to 8 are supported", n_in);
  GpuFeArgs* a = calloc(1, sizeof *a);
  if (!a) return gpu_node_error(n, ONYX_OUT_OF_MEMORY, "out of memory");
  /* Y's dims: the numpy broadcast of every input. */
  size_t rank = 0;
  const OnyxTensor* in[GPU_FE_MAX_INPUTS];
  for (size_t j = 0; j < n_in; j++) {
    in[j] = H->ctx_input(ctx, j);
    if (!in[j] || H->tensor_elem_type(in[j]) != ONYX_ELEM_FLOAT32) {
      free(a);
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "input %zu must be a float32 tensor", j);
    }
    const size_t r = H->tensor_rank(in[j]);
    if (r > GPU_MAX_RANK) {
      free(a);
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "input %zu has rank %zu; at most %d", j, r,
                            GPU_MAX_RANK);
    }
    if (r > rank) rank = r;
  }
  int64_t dims[GPU_MAX_RANK];
  for (size_t d = 0; d < rank; d++)
    dims[d] = 1;
  for (size_t j = 0; j < n_in; j++) {
    const size_t r = H->tensor_rank(in[j]);
    const int64_t* dj = H->tensor_dims(in[j]);
    for (size_t d = 0; d < r; d++) {
      int64_t* o = &dims[rank - r + d];
      if (dj[d] == *o || dj[d] == 1) continue;
      if (*o != 1) {
        const long long was = (long long)*o;
        free(a);
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "input %zu dim %zu is %lld, which does not broadcast with %lld", j, d,
                              (long long)dj[d], was);
      }
      *o = dj[d];
    }
  }
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  if (st) {
    free(a);
    return st;
  }
  a->n = (int64_t)H->tensor_elem_count(y);
  a->n_in = (int32_t)n_in;
  a->rank = (int32_t)rank;
  a->flat = 1;
  a->y = H->tensor_mutable_data(y);
  memcpy(a->dims, dims, rank * sizeof *dims);
  for (size_t j = 0; j < n_in; j++) {
    const size_t r = H->tensor_rank(in[j]);
    const int64_t* dj = H->tensor_dims(in[j]);
    a->x[j] = H->tensor_data(in[j]);
    const int64_t cnt = (int64_t)H->tensor_elem_count(in[j]);
    a->full[j] = cnt == a->n && cnt != 1;
    if (!a->full[j] && cnt != 1) a->flat = 0;
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t dd = d >= rank - r ? dj[d - (rank - r)] : 1;
      a->strides[j][d] = dd == 1 ? 0 : stride;
      stride *= dd;
    }
  }
  a->prog = f->prog;
  const int err = gpuk_fused(a, stream);
  free(a);
  return gpu_launch_status(n, err, "fused element-wise kernel");
}

OnyxStatus* gpu_register_fused_kernels(OnyxKernelRegistry* r) {
  static const OnyxTypeConstraint tc[] = {{"T", gpu_float_types, 1}};
  const OnyxKernelDef d = {.struct_size = sizeof d,
                           .domain = "com.onyx",
                           .op_type = "FusedElementwise",
                           .since_version = 1,
                           .end_version = ONYX_OPSET_LATEST,
                           .type_constraints = tc,
                           .type_constraint_count = 1,
                           .create = fused_create,
                           .compute = fused_compute,
                           .release = fused_release};
  return H->register_kernel(r, &d);
}
