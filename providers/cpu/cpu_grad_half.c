/* cpu_grad_half.c — the float16 and bfloat16 kernels that mixed-precision
 * training needs beyond cpu_half.c's MatMul, Conv and Softmax: Gemm (a
 * listed op of the forward pass, and the weight gradient of a MatMul over a
 * batch of rows). As in cpu_half.c the operands are widened to float32
 * once, the product runs through the float32 GEMM core (float32
 * accumulation, as tensor cores do), and the result is rounded to nearest
 * even on the way out. */
#include <stdlib.h>
#include <string.h>

#include "cpu_nn.h"
#include "cpu_util.h"

static OnyxStatus* widen(OnyxKernelContext* ctx, const OnyxTensor* t, float** out) {
  const OnyxHostApi* H = cpu_host;
  size_t n = H->tensor_elem_count(t);
  int32_t type = H->tensor_elem_type(t);
  const uint16_t* src = H->tensor_data(t);
  float* f = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *f);
  if (!f) return cpu_oom(ctx);
  for (size_t i = 0; i < n; i++)
    f[i] = type == ONYX_ELEM_BFLOAT16 ? cpu_bf16_to_f32(src[i]) : cpu_f16_to_f32(src[i]);
  *out = f;
  return NULL;
}

static void narrow(OnyxTensor* t, const float* src, size_t n) {
  int32_t type = cpu_host->tensor_elem_type(t);
  uint16_t* dst = cpu_host->tensor_mutable_data(t);
  for (size_t i = 0; i < n; i++)
    dst[i] = type == ONYX_ELEM_BFLOAT16 ? cpu_f32_to_bf16(src[i]) : cpu_f32_to_f16(src[i]);
}

/* --- Gemm ------------------------------------------------------------------------------------- */

typedef struct GemmHalf {
  int trans_a, trans_b;
  float alpha, beta;
} GemmHalf;

static OnyxStatus* gemm_half_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                    void** state) {
  (void)ep, (void)user_data;
  const OnyxHostApi* H = cpu_host;
  GemmHalf* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->trans_a = H->node_attr_int(node, "transA", 0) != 0;
  s->trans_b = H->node_attr_int(node, "transB", 0) != 0;
  s->alpha = H->node_attr_float(node, "alpha", 1.0f);
  s->beta = H->node_attr_float(node, "beta", 1.0f);
  *state = s;
  return NULL;
}

static OnyxStatus* gemm_half(void* state, OnyxKernelContext* ctx) {
  const GemmHalf* s = state;
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor *a = H->ctx_input(ctx, 0), *b = H->ctx_input(ctx, 1);
  const OnyxTensor* c = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  if (H->tensor_rank(a) != 2 || H->tensor_rank(b) != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "A and B must be matrices (ranks %zu, %zu)",
                         H->tensor_rank(a), H->tensor_rank(b));
  const int64_t *da = H->tensor_dims(a), *db = H->tensor_dims(b);
  int64_t M = s->trans_a ? da[1] : da[0], K = s->trans_a ? da[0] : da[1];
  int64_t KB = s->trans_b ? db[1] : db[0], N = s->trans_b ? db[0] : db[1];
  if (K != KB)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "inner dims %lld and %lld differ",
                         (long long)K, (long long)KB);
  /* C broadcasts to [M, N] (unidirectionally): its dims, right-aligned. */
  int64_t cm = 1, cn = 1;
  if (c) {
    size_t rc = H->tensor_rank(c);
    const int64_t* dc = H->tensor_dims(c);
    if (rc > 2) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "C has rank %zu (at most 2)", rc);
    if (rc >= 1) cn = dc[rc - 1];
    if (rc == 2) cm = dc[0];
    if ((cm != 1 && cm != M) || (cn != 1 && cn != N))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "C [%lld, %lld] does not broadcast to [%lld, %lld]", (long long)cm,
                           (long long)cn, (long long)M, (long long)N);
  }
  int64_t od[2] = {M, N};
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, od, 2, &y);
  float *fa = NULL, *fb = NULL, *fc = NULL;
  if (!st) st = widen(ctx, a, &fa);
  if (!st) st = widen(ctx, b, &fb);
  if (!st && c) st = widen(ctx, c, &fc);
  if (st) return st;
  size_t count = (size_t)M * (size_t)N;
  float* fy = H->ctx_scratch(ctx, (count ? count : 1) * sizeof *fy);
  if (!fy) return cpu_oom(ctx);
  if (count && K > 0) {
    CpuGemm g = {.m = (size_t)M,
                 .n = (size_t)N,
                 .k = (size_t)K,
                 .a = fa,
                 .lda = (size_t)da[1],
                 .trans_a = s->trans_a,
                 .b = fb,
                 .ldb = (size_t)db[1],
                 .trans_b = s->trans_b,
                 .c = fy,
                 .ldc = (size_t)N,
                 .alpha = s->alpha,
                 .beta = 0.0};
    cpu_gemm_f32(H->ctx_thread_pool(ctx), &g);
  } else if (count) {
    memset(fy, 0, count * sizeof *fy);
  }
  for (int64_t i = 0; fc && i < M; i++)
    for (int64_t j = 0; j < N; j++)
      fy[i * N + j] += s->beta * fc[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
  narrow(y, fy, count);
  return NULL;
}

/* --- Registration ----------------------------------------------------------------------------- */

static const int32_t grad_half_types[] = {ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16};
static const OnyxTypeConstraint grad_half_tc[] = {
    {"T", grad_half_types, CPU_ARRAY_LEN(grad_half_types)}};

static const CpuKernelSpec grad_half_specs[] = {
    {"Gemm", 7, ONYX_OPSET_LATEST, grad_half_tc, 1, gemm_half_create, gemm_half, cpu_free_state,
     NULL},
};

OnyxStatus* cpu_register_grad_half(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, grad_half_specs, CPU_ARRAY_LEN(grad_half_specs));
}
