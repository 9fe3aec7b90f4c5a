/* gpu_attention.c — the host side of the GPU providers' com.onyx
 * MultiHeadAttention (the op the optimizer's `attention` and `qkv` fusions
 * make; schemas/schemas_contrib.c): the CPU provider's checks and messages
 * (providers/cpu/cpu_contrib.c, mha_compute), the mask's broadcast strides,
 * and the launch of gpu_attention.cu's fused kernel on the EP's stream.
 * Compiled into both GPU providers. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu_attention.h"
#include "gpu_ep.h"

#define H gpu_host

/* The kernel state: the shared one first (gpu_kernel_begin takes it). */
typedef struct GpuMha {
  GpuKernel k;
  int64_t heads;
  float scale;
  /* Mask is a constant whose every element above the diagonal (t > s) is at
   * most GPU_ATTN_MASKED and every one on it (t == s) above
   * GPU_ATTN_MASKED / 10, over mask_s x mask_t query and key rows (the
   * causal mask of a decoder): used when those are S and T. */
  bool causal;
  int64_t mask_s, mask_t;
} GpuMha;

/* Whether the constant mask m (rank 2 to 4, its last two dims the queries
 * and the keys) is causal in GpuMha's sense. */
static bool mask_is_causal(const OnyxTensor* m, int64_t* ms, int64_t* mt) {
  const size_t r = H->tensor_rank(m);
  if (H->tensor_elem_type(m) != ONYX_ELEM_FLOAT32 || r < 2 || r > 4) return false;
  const int64_t* d = H->tensor_dims(m);
  const int64_t S = d[r - 2], T = d[r - 1];
  const size_t n = H->tensor_elem_count(m);
  const float* v = H->tensor_data(m);
  if (S < 1 || T < 2 || !v) return false;
  for (size_t i = 0; i < n; i++) {
    const int64_t t = (int64_t)(i % (size_t)T), s = (int64_t)(i / (size_t)T % (size_t)S);
    if (t > s && !(v[i] <= GPU_ATTN_MASKED)) return false;
    if (t == s && !(v[i] > GPU_ATTN_MASKED / 10)) return false;
  }
  *ms = S;
  *mt = T;
  return true;
}

static OnyxStatus* mha_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)user;
  GpuMha* m = calloc(1, sizeof *m);
  if (!m) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  m->k.ep = gpu_ep(ep);
  m->k.node = node;
  m->k.since = H->node_since_version(node);
  m->heads = H->node_attr_int(node, "num_heads", 0);
  m->scale = H->node_attr_float(node, "scale", 1.0f);
  const OnyxValueInfo* mv = H->node_input_count(node) > 3 ? H->node_input(node, 3) : NULL;
  const OnyxTensor* mc = mv ? H->value_constant(mv) : NULL;
  m->causal = mc && mask_is_causal(mc, &m->mask_s, &m->mask_t);
  *state = m;
  return NULL;
}

static void mha_release(void* state) {
  free(state);
}

static OnyxStatus* mha_compute(void* state, OnyxKernelContext* ctx) {
  GpuMha* m = state;
  const OnyxNode* n = m->k.node;
  void* stream;
  OnyxStatus* st = gpu_kernel_begin(&m->k, ctx, &stream);
  if (st) return st;
  const size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* q = H->ctx_input(ctx, 0);
  const OnyxTensor* k = n_in > 1 ? H->ctx_input(ctx, 1) : NULL;
  const OnyxTensor* v = n_in > 2 ? H->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* mask = n_in > 3 ? H->ctx_input(ctx, 3) : NULL;
  if (!q) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Q is required");
  if (!k != !v)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "K and V must both be given, or both be absent (Q packed as Q|K|V)");
  const bool packed = !k;
  if (H->tensor_rank(q) != 3 || (!packed && (H->tensor_rank(k) != 3 || H->tensor_rank(v) != 3)))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Q, K and V must be 3-D [batch, seq, hidden]");
  const int64_t* qd = H->tensor_dims(q);
  const int64_t hidden = packed ? qd[2] / 3 : qd[2];
  if (packed && qd[2] % 3)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "packed Q|K|V: the last dim %lld is not a multiple of 3",
                          (long long)qd[2]);
  const int64_t qkv[3] = {qd[0], qd[1], hidden};
  const int64_t *kd = packed ? qkv : H->tensor_dims(k), *vd = packed ? qkv : H->tensor_dims(v);
  const int64_t heads = m->heads;
  if (heads <= 0 || hidden % heads)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "num_heads %lld does not divide the hidden size %lld", (long long)heads,
                          (long long)hidden);
  if (kd[0] != qd[0] || vd[0] != qd[0] || kd[2] != hidden || vd[2] != hidden || vd[1] != kd[1])
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "Q [%lld,%lld,%lld], K [%lld,%lld,%lld] and V [%lld,%lld,%lld] do not "
                          "agree",
                          (long long)qd[0], (long long)qd[1], (long long)qd[2], (long long)kd[0],
                          (long long)kd[1], (long long)kd[2], (long long)vd[0], (long long)vd[1],
                          (long long)vd[2]);
  const float* qp = H->tensor_data(q);
  GpuAttn a = {.q = qp,
               .k = packed ? (qp ? qp + hidden : NULL) : H->tensor_data(k),
               .v = packed ? (qp ? qp + 2 * hidden : NULL) : H->tensor_data(v),
               .b = qd[0],
               .h = heads,
               .s = qd[1],
               .t = kd[1],
               .d = hidden / heads,
               .ld = qd[2],
               .scale = m->scale};
  if (mask) {
    const size_t mr = H->tensor_rank(mask);
    const int64_t* md = H->tensor_dims(mask);
    const int64_t full[4] = {qd[0], heads, qd[1], kd[1]};
    if (H->tensor_elem_type(mask) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Mask must be float32");
    if (mr > 4)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Mask has rank %zu (at most 4)", mr);
    int64_t stride = 1;
    for (size_t i = 4; i-- > 0;) {
      const int64_t dim = i + mr >= 4 ? md[i + mr - 4] : 1;
      if (dim != 1 && dim != full[i])
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "Mask dim %zu is %lld: it must be 1 or %lld to broadcast to "
                              "[batch, heads, seq, kv_seq]",
                              i, (long long)dim, (long long)full[i]);
      a.ms[i] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    a.mask = H->tensor_data(mask);
    /* The constant seen at creation, over exactly these queries and keys. */
    a.causal = m->causal && mr >= 2 && md[mr - 2] == m->mask_s && md[mr - 1] == m->mask_t &&
               m->mask_s == qd[1] && m->mask_t == kd[1];
  }
  OnyxTensor* y = NULL;
  st = H->ctx_output(ctx, 0, qkv, 3, &y);
  if (st || H->tensor_elem_count(y) == 0) return st;
  a.y = H->tensor_mutable_data(y);
  if (a.t == 0) /* no keys: an empty sum */
    return gpu_launch_status(
        n, gpurt_memset_async(a.y, 0, H->tensor_elem_count(y) * sizeof(float), stream),
        "zeroing Y");
  return gpu_launch_status(n, gpuk_attention(&a, stream), "attention kernel");
}

OnyxStatus* gpu_register_attention_kernels(OnyxKernelRegistry* r) {
  static const OnyxTypeConstraint tc[] = {{"T", gpu_float_types, 1}};
  const OnyxKernelDef d = {.struct_size = sizeof d,
                           .domain = "com.onyx",
                           .op_type = "MultiHeadAttention",
                           .since_version = 1,
                           .end_version = ONYX_OPSET_LATEST,
                           .type_constraints = tc,
                           .type_constraint_count = 1,
                           .create = mha_create,
                           .compute = mha_compute,
                           .release = mha_release};
  return H->register_kernel(r, &d);
}
