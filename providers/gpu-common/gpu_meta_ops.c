/* gpu_meta_ops.c — Shape and Size on the GPU providers: they read only the
 * input's dims, never its data, and write their int64 result to host
 * memory (output_mem_types ONYX_MEM_HOST_ACCESSIBLE) on the host, with no
 * device work. Taking them keeps a device tensor whose shape the CPU's
 * shape arithmetic needs (a training graph's MaxPoolGrad X_shape, the
 * gradients of Flatten and GlobalAveragePool) from being copied to the
 * host for the CPU provider's Shape. The placement rule (gpu_ops.c,
 * gpu_get_capability) takes them only when their input is produced on the
 * GPU, and their consumers are placed as if they ran on the CPU. */
#include <stdint.h>
#include <string.h>

#include "gpu_ep.h"
#include "gpu_grad_ops.h"

#define H gpu_host

enum { META_SHAPE = 1, META_SIZE };

static const int32_t g_out_host[1] = {ONYX_MEM_HOST_ACCESSIBLE};

bool gpu_meta_op(const OnyxNode* n) {
  const char* d = H->node_domain(n);
  const char* op = H->node_op_type(n);
  return (!d || !*d || !strcmp(d, "ai.onnx")) && (!strcmp(op, "Shape") || !strcmp(op, "Size"));
}

static OnyxStatus* meta_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* stream;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &stream);
  if (st) return st;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  if (!x) return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "the input is missing");
  const int64_t r = (int64_t)H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  OnyxTensor* y;
  if (k->op == META_SIZE) {
    st = H->ctx_output(ctx, 0, NULL, 0, &y);
    if (st) return st;
    *(int64_t*)H->tensor_mutable_data(y) = (int64_t)H->tensor_elem_count(x);
    return NULL;
  }
  /* Opset 15's start / end: negative counts from the back, both clamped to
   * [0, rank]; an empty range gives an empty shape. */
  int64_t start = 0, end = r;
  if (k->since >= 15) {
    start = H->node_attr_int(k->node, "start", 0);
    end = H->node_attr_int(k->node, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
  }
  const int64_t len = end > start ? end - start : 0;
  st = H->ctx_output(ctx, 0, &len, 1, &y);
  if (st) return st;
  if (len) memcpy(H->tensor_mutable_data(y), d + start, (size_t)len * sizeof *d);
  return NULL;
}

OnyxStatus* gpu_register_meta_kernels(OnyxKernelRegistry* r) {
  static const struct {
    const char* op;
    int32_t since, code;
  } defs[] = {{"Shape", 1, META_SHAPE}, {"Size", 1, META_SIZE}};
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < sizeof defs / sizeof defs[0]; i++) {
    const OnyxKernelDef d = {.struct_size = sizeof d,
                             .domain = "",
                             .op_type = defs[i].op,
                             .since_version = defs[i].since,
                             .end_version = ONYX_OPSET_LATEST,
                             .output_mem_types = g_out_host,
                             .output_mem_type_count = 1,
                             .create = gpu_kernel_create,
                             .compute = meta_compute,
                             .release = gpu_kernel_release,
                             .user_data = (void*)(intptr_t)defs[i].code};
    st = H->register_kernel(r, &d);
  }
  return st;
}
