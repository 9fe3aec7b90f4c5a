/* gpu_attention.c — the host side of the GPU providers' com.onyx
 * MultiHeadAttention (the op the optimizer's `attention` and `qkv` fusions
 * make; schemas/schemas_contrib.c) and ONNX Attention (opset 23+): the CPU
 * provider's checks and messages (providers/cpu/cpu_contrib.c, mha_compute;
 * providers/cpu/cpu_attention.c), the operands' strides and the mask's
 * broadcast strides, and the launch of gpu_attention.cu's fused kernel on
 * the EP's stream. Compiled into both GPU providers. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
  /* Score matrices at or above this many elements (S x T per head) take the
   * GEMM path (mha_gemm); ONYX_GPU_ATTN_GEMM_MIN, read at creation, moves
   * the threshold (tests take it to 1). */
  int64_t gemm_min;
  /* The GEMM path's scores, heads x S x T floats of device memory, grown as
   * needed and kept with the node: every run of the EP is queued on its one
   * stream, so a later run reuses it only after the earlier one's kernels. */
  pthread_mutex_t lock;
  float* scores;
  size_t scores_floats;
} GpuMha;

/* The GEMM path's default threshold: 512 x 512 scores per head. Below it the
 * fused kernel (gpu_attention.cu) wins, as it never writes the scores; above
 * it, two batched vendor GEMMs (tensor cores under use_tf32) with the mask
 * and the softmax between them beat its FMA loops. */
#define GPU_ATTN_GEMM_MIN (512 * 512)

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
  m->gemm_min = GPU_ATTN_GEMM_MIN;
  const char* env = getenv("ONYX_GPU_ATTN_GEMM_MIN");
  if (env && *env) {
    char* end = NULL;
    long long v = strtoll(env, &end, 10);
    if (*end || v < 1) {
      free(m);
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "ONYX_GPU_ATTN_GEMM_MIN '%s' is not a positive integer", env);
    }
    m->gemm_min = (int64_t)v;
  }
  pthread_mutex_init(&m->lock, NULL);
  *state = m;
  return NULL;
}

static void mha_release(void* state) {
  GpuMha* m = state;
  if (!m) return;
  if (m->scores) (void)gpurt_free(m->scores);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* Attention as GEMMs, batch by batch over all heads at once: S = scale Q K'
 * (one strided batched GEMM over the heads), S += mask (broadcast), rows of
 * S through Softmax, Y = S V (another). The same sums as the fused kernel
 * but with the scores in device memory. */
static OnyxStatus* mha_gemm(GpuMha* m, const GpuAttn* a, void* stream) {
  const OnyxNode* n = m->k.node;
  size_t floats;
  if (__builtin_mul_overflow((size_t)a->h, (size_t)a->s, &floats) ||
      __builtin_mul_overflow(floats, (size_t)a->t, &floats) || floats > SIZE_MAX / sizeof(float))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "the attention scores do not fit in memory");
  pthread_mutex_lock(&m->lock);
  if (m->scores_floats < floats) {
    void* p = NULL;
    int err = gpurt_set_device(m->k.ep->device);
    if (!err) err = gpurt_malloc(&p, floats * sizeof(float));
    if (err) {
      pthread_mutex_unlock(&m->lock);
      return gpu_launch_status(n, err, "allocating the attention scores");
    }
    /* The old buffer may still be read by queued kernels: wait for them. */
    if (m->scores) {
      (void)gpurt_stream_sync(stream);
      (void)gpurt_free(m->scores);
    }
    m->scores = p;
    m->scores_floats = floats;
  }
  float* sc = m->scores;
  pthread_mutex_unlock(&m->lock);
  const int64_t st = a->s * a->t;
  GpuEp* g = m->k.ep;
  for (int64_t b = 0; b < a->b; b++) {
    OnyxStatus* e = gpu_vendor.gemm(g, stream, 0, 1, a->s, a->t, a->d, a->scale,
                                    a->q + b * a->qs[0], a->qs[2], a->qs[1], a->k + b * a->ks[0],
                                    a->ks[2], a->ks[1], 0.0f, sc, a->t, st, a->h);
    if (e) return e;
    if (a->mask) {
      GpuIter it = {.rank = 3, .dims = {a->h, a->s, a->t}};
      const int64_t own[3] = {st, a->t, 1};
      for (int i = 0; i < 3; i++) {
        it.strides[0][i] = own[i];
        it.strides[1][i] = own[i];
        it.strides[2][i] = a->ms[i + 1];
      }
      it.offset[2] = b * a->ms[0];
      int err = gpuk_binary(GPU_ADD, sc, (const float*)a->mask, sc, &it, stream);
      if (err) return gpu_launch_status(n, err, "attention mask");
    }
    int err = gpuk_softmax(sc, sc, a->h * a->s, a->t, 1, 0, stream);
    if (err) return gpu_launch_status(n, err, "attention softmax");
    e = gpu_vendor.gemm(g, stream, 0, 0, a->s, a->dv, a->t, 1.0f, sc, a->t, st, a->v + b * a->vs[0],
                        a->vs[2], a->vs[1], 0.0f, a->y + b * a->ys[0], a->ys[2], a->ys[1], a->h);
    if (e) return e;
  }
  return NULL;
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
  const int64_t D = hidden / heads, ld = qd[2], ldkv = packed ? ld : hidden;
  GpuAttn a = {.q = qp,
               .k = packed ? (qp ? qp + hidden : NULL) : H->tensor_data(k),
               .v = packed ? (qp ? qp + 2 * hidden : NULL) : H->tensor_data(v),
               .b = qd[0],
               .h = heads,
               .s = qd[1],
               .t = kd[1],
               .d = D,
               .dv = D,
               .group = 1,
               .mask_len = kd[1],
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
      if (__builtin_mul_overflow(stride, dim, &stride))
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Mask's dims are too large");
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
  /* Y, Q, K and V are not empty here, so these products are within their element counts. */
  const int64_t qs[3] = {qd[1] * ld, D, ld}, kvs[3] = {kd[1] * ldkv, D, ldkv},
                ys[3] = {qd[1] * hidden, D, hidden};
  memcpy(a.qs, qs, sizeof qs);
  memcpy(a.ks, kvs, sizeof kvs);
  memcpy(a.vs, kvs, sizeof kvs);
  memcpy(a.ys, ys, sizeof ys);
  if (a.s * a.t >= m->gemm_min && gpu_vendor.gemm) return mha_gemm(m, &a, stream);
  return gpu_launch_status(n, gpuk_attention(&a, stream), "attention kernel");
}

/* --- ONNX Attention (opset 23, 24) ------------------------------------------------------------
 * The CPU provider's semantics (providers/cpu/cpu_attention.c) for what the kernel takes: Q, K,
 * V 4-D [B, heads, S, size] or 3-D [B, S, heads * size] (q_num_heads / kv_num_heads), grouped
 * query heads, scale (0: 1 / sqrt(head size)), is_causal (key j masked for query i when
 * j > i), a bool or float32 attn_mask broadcasting to [B, Hq, Sq, T] (shorter than T: -inf
 * past it), a row whose every key is masked gives 0; float32 Y only. Declined at partitioning
 * (gpu_attention_decline): past_key / past_value, nonpad_kv_seqlen, the present_key,
 * present_value and qk_matmul_output outputs, softcap. */

typedef struct GpuAttn23 {
  GpuKernel k;
  int64_t q_heads, kv_heads;
  float scale;
  bool causal;
} GpuAttn23;

static bool is_attention(const OnyxNode* n) {
  const char* d = H->node_domain(n);
  return !strcmp(H->node_op_type(n), "Attention") && (!d || !*d);
}

static bool has_input(const OnyxNode* n, size_t i) {
  return i < H->node_input_count(n) && H->node_input(n, i);
}

static bool has_output(const OnyxNode* n, size_t i) {
  return i < H->node_output_count(n) && H->node_output(n, i);
}

const char* gpu_attention_decline(const OnyxNode* n) {
  if (!is_attention(n)) return NULL;
  if (has_input(n, 4) || has_input(n, 5))
    return "Attention with past_key / past_value (a KV cache) is not supported on the GPU";
  if (has_input(n, 6)) return "Attention with nonpad_kv_seqlen is not supported on the GPU";
  if (has_output(n, 1) || has_output(n, 2) || has_output(n, 3))
    return "Attention's present_key, present_value and qk_matmul_output outputs are not "
           "supported on the GPU";
  if (H->node_attr_float(n, "softcap", 0.0f) != 0.0f)
    return "Attention with softcap is not supported on the GPU";
  return NULL;
}

static void attn23_release(void* state) {
  free(state);
}

static OnyxStatus* attn23_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)user;
  const char* why = gpu_attention_decline(node);
  if (why) return gpu_node_error(node, ONYX_NOT_IMPLEMENTED, "%s", why);
  const int64_t mode = H->node_attr_int(node, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return gpu_node_error(node, ONYX_INVALID_MODEL,
                          "qk_matmul_output_mode %lld is not 0, 1, 2 or 3", (long long)mode);
  GpuAttn23* m = calloc(1, sizeof *m);
  if (!m) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  m->k.ep = gpu_ep(ep);
  m->k.node = node;
  m->k.since = H->node_since_version(node);
  m->q_heads = H->node_attr_int(node, "q_num_heads", 0);
  m->kv_heads = H->node_attr_int(node, "kv_num_heads", 0);
  m->scale = H->node_attr_float(node, "scale", 0.0f);
  m->causal = H->node_attr_int(node, "is_causal", 0) != 0;
  if (m->q_heads < 0 || m->kv_heads < 0) {
    free(m);
    return gpu_node_error(node, ONYX_INVALID_MODEL,
                          "q_num_heads/kv_num_heads must not be negative");
  }
  *state = m;
  return NULL;
}

/* One of Q, K, V as [B, heads, S, size] with the element strides of b, h and s. */
typedef struct Bhsd {
  int64_t b, h, s, d;
  int64_t st[3];
} Bhsd;

static OnyxStatus* read_bhsd(const OnyxNode* n, const OnyxTensor* t, const char* what,
                             int64_t heads_attr, const char* attr, Bhsd* out) {
  const size_t rank = H->tensor_rank(t);
  const int64_t* d = H->tensor_dims(t);
  /* The strides are products of the dims: within the element count unless the tensor is
   * empty, and then unused (the kernel reads no element of it). */
  const bool empty = H->tensor_elem_count(t) == 0;
  if (rank == 4) {
    *out = (Bhsd){d[0], d[1], d[2], d[3], {0, 0, 0}};
    if (!empty) {
      out->st[0] = d[1] * d[2] * d[3];
      out->st[1] = d[2] * d[3];
      out->st[2] = d[3];
    }
    return NULL;
  }
  if (rank != 3)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%s has rank %zu; Attention wants 3 or 4", what,
                          rank);
  if (heads_attr <= 0)
    return gpu_node_error(n, ONYX_INVALID_MODEL, "%s is 3-D, which needs the attribute %s", what,
                          attr);
  if (d[2] % heads_attr)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "%s's last dim %lld is not a multiple of %s = %lld", what,
                          (long long)d[2], attr, (long long)heads_attr);
  const int64_t size = d[2] / heads_attr;
  *out = (Bhsd){d[0], heads_attr, d[1], size, {0, 0, 0}};
  if (!empty) {
    out->st[0] = d[1] * d[2];
    out->st[1] = size;
    out->st[2] = d[2];
  }
  return NULL;
}

static OnyxStatus* attn23_compute(void* state, OnyxKernelContext* ctx) {
  GpuAttn23* m = state;
  const OnyxNode* n = m->k.node;
  void* stream;
  OnyxStatus* st = gpu_kernel_begin(&m->k, ctx, &stream);
  if (st) return st;
  const size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* in[4] = {NULL, NULL, NULL, NULL};
  for (size_t i = 0; i < n_in && i < 4; i++)
    in[i] = H->ctx_input(ctx, i);
  if (!in[0] || !in[1] || !in[2])
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Q, K and V are required");
  Bhsd q, k, v;
  st = read_bhsd(n, in[0], "Q", m->q_heads, "q_num_heads", &q);
  if (!st) st = read_bhsd(n, in[1], "K", m->kv_heads, "kv_num_heads", &k);
  if (!st) st = read_bhsd(n, in[2], "V", m->kv_heads, "kv_num_heads", &v);
  if (st) return st;
  if (q.b != k.b || q.b != v.b || k.h != v.h || k.s != v.s || q.d != k.d)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "Q [%lld,%lld heads,%lld,%lld], K [%lld,%lld heads,%lld,%lld] and V "
                          "[%lld,%lld heads,%lld,%lld] disagree",
                          (long long)q.b, (long long)q.h, (long long)q.s, (long long)q.d,
                          (long long)k.b, (long long)k.h, (long long)k.s, (long long)k.d,
                          (long long)v.b, (long long)v.h, (long long)v.s, (long long)v.d);
  if (k.h == 0 || q.h % k.h)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "%lld query heads are not a multiple of %lld key/value heads",
                          (long long)q.h, (long long)k.h);
  GpuAttn a = {.q = H->tensor_data(in[0]),
               .k = H->tensor_data(in[1]),
               .v = H->tensor_data(in[2]),
               .b = q.b,
               .h = q.h,
               .s = q.s,
               .t = k.s,
               .d = q.d,
               .dv = v.d,
               .group = q.h / k.h,
               .qs = {q.st[0], q.st[1], q.st[2]},
               .ks = {k.st[0], k.st[1], k.st[2]},
               .vs = {v.st[0], v.st[1], v.st[2]},
               .scale = m->scale != 0.0f ? m->scale : 1.0f / sqrtf((float)q.d),
               .causal_mask = m->causal,
               .causal = m->causal,
               .zero_masked_rows = 1};
  if (in[3]) { /* attn_mask: broadcast onto [B, Hq, Sq, T]; its last dim may be shorter */
    const size_t rank = H->tensor_rank(in[3]);
    const int64_t* md = H->tensor_dims(in[3]);
    const OnyxElemType t = H->tensor_elem_type(in[3]);
    const int64_t target[4] = {q.b, q.h, q.s, k.s};
    if (t != ONYX_ELEM_BOOL && t != ONYX_ELEM_FLOAT32)
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "attn_mask must be bool or float32");
    if (rank < 1 || rank > 4)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attn_mask has rank %zu; want 1 to 4", rank);
    int64_t dims[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < rank; i++)
      dims[4 - rank + i] = md[i];
    if (dims[3] > k.s)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "attn_mask's last dim %lld is longer than the key length %lld",
                            (long long)dims[3], (long long)k.s);
    int64_t stride = 1;
    for (int i = 3; i >= 0; i--) {
      if (i < 3 && dims[i] != 1 && dims[i] != target[i])
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "attn_mask dim %d is %lld, which does not broadcast to %lld", i,
                              (long long)dims[i], (long long)target[i]);
      a.ms[i] = dims[i] == 1 ? 0 : stride;
      if (__builtin_mul_overflow(stride, dims[i], &stride))
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attn_mask's dims are too large");
    }
    a.mask = H->tensor_data(in[3]);
    a.mask_bool = t == ONYX_ELEM_BOOL;
    a.mask_len = dims[3];
  }
  const bool three_d = H->tensor_rank(in[0]) == 3;
  int64_t hdv;
  if (__builtin_mul_overflow(q.h, v.d, &hdv))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "Y's dims are too large");
  const int64_t y3[3] = {q.b, q.s, hdv}, y4[4] = {q.b, q.h, q.s, v.d};
  OnyxTensor* y = NULL;
  st = H->ctx_output(ctx, 0, three_d ? y3 : y4, three_d ? 3 : 4, &y);
  if (st || H->tensor_elem_count(y) == 0) return st;
  a.y = H->tensor_mutable_data(y);
  /* Y is not empty here, so these products are within its element count. */
  if (three_d) { /* [B, Sq, Hq * Dv] */
    a.ys[0] = q.s * hdv;
    a.ys[1] = v.d;
    a.ys[2] = hdv;
  } else { /* [B, Hq, Sq, Dv] */
    a.ys[0] = q.h * q.s * v.d;
    a.ys[1] = q.s * v.d;
    a.ys[2] = v.d;
  }
  return gpu_launch_status(n, gpuk_attention(&a, stream), "attention kernel");
}

OnyxStatus* gpu_register_attention_kernels(OnyxKernelRegistry* r) {
  static const int32_t mask_types[2] = {ONYX_ELEM_BOOL, ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc23[] = {
      {"T1", gpu_float_types, 1}, {"T2", gpu_float_types, 1}, {"U", mask_types, 2}};
  const OnyxKernelDef d23 = {.struct_size = sizeof d23,
                             .domain = "",
                             .op_type = "Attention",
                             .since_version = 23,
                             .end_version = ONYX_OPSET_LATEST,
                             .type_constraints = tc23,
                             .type_constraint_count = 3,
                             .create = attn23_create,
                             .compute = attn23_compute,
                             .release = attn23_release};
  OnyxStatus* st = H->register_kernel(r, &d23);
  if (st) return st;
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
