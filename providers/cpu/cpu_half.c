/* cpu_half.c — MatMul, Conv and Softmax on float16 and bfloat16, computed in float32
 * (what the spec allows for these types): the inputs are widened once, the
 * work runs in float32 (MatMul through the fp32 GEMM core, Conv as a direct
 * loop — the half-precision models of the suites are small), and the result
 * is rounded to nearest even on the way out. */
#include <math.h>
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

/* --- MatMul ----------------------------------------------------------------------------------- */

static OnyxStatus* matmul_half(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor *a = H->ctx_input(ctx, 0), *b = H->ctx_input(ctx, 1);
  size_t ra = H->tensor_rank(a), rb = H->tensor_rank(b);
  if (!ra || !rb || ra > CPU_MAX_RANK || rb > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "operands of rank %zu and %zu", ra, rb);
  /* 1-D operands are promoted ([K] -> [1, K] for A, [K, 1] for B). */
  int64_t A[CPU_MAX_RANK + 1], B[CPU_MAX_RANK + 1];
  size_t na = ra < 2 ? 2 : ra, nb = rb < 2 ? 2 : rb;
  if (ra == 1) {
    A[0] = 1;
    A[1] = H->tensor_dims(a)[0];
  } else {
    memcpy(A, H->tensor_dims(a), ra * sizeof *A);
  }
  if (rb == 1) {
    B[0] = H->tensor_dims(b)[0];
    B[1] = 1;
  } else {
    memcpy(B, H->tensor_dims(b), rb * sizeof *B);
  }
  int64_t M = A[na - 2], K = A[na - 1], N = B[nb - 1];
  if (B[nb - 2] != K)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "inner dims %lld and %lld differ",
                         (long long)K, (long long)B[nb - 2]);
  /* Batch dims broadcast (numpy rules). */
  size_t nbatch_a = na - 2, nbatch_b = nb - 2;
  size_t r = nbatch_a > nbatch_b ? nbatch_a : nbatch_b;
  int64_t batch[CPU_MAX_RANK], sa[CPU_MAX_RANK], sb[CPU_MAX_RANK];
  int64_t stride_a = M * K, stride_b = K * N;
  for (size_t i = r; i-- > 0;) {
    int64_t da = i >= r - nbatch_a ? A[i - (r - nbatch_a)] : 1;
    int64_t db = i >= r - nbatch_b ? B[i - (r - nbatch_b)] : 1;
    if (da != db && da != 1 && db != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "batch dims %lld and %lld do not broadcast",
                           (long long)da, (long long)db);
    batch[i] = da > db ? da : db;
    sa[i] = da == 1 ? 0 : stride_a;
    sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  /* Output dims: batch, then M (unless A was 1-D), then N (unless B was 1-D). */
  int64_t od[CPU_MAX_RANK + 2];
  size_t orank = 0;
  for (size_t i = 0; i < r; i++)
    od[orank++] = batch[i];
  if (ra > 1) od[orank++] = M;
  if (rb > 1) od[orank++] = N;
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, od, orank, &y);
  float *fa, *fb;
  if (!st) st = widen(ctx, a, &fa);
  if (!st) st = widen(ctx, b, &fb);
  if (st) return st;
  size_t batches = cpu_dims_product(batch, 0, r);
  size_t per = (size_t)(M * N);
  float* fy = H->ctx_scratch(ctx, (batches * per + 1) * sizeof *fy);
  if (!fy) return cpu_oom(ctx);
  for (size_t bi = 0; bi < batches; bi++) {
    int64_t oa = 0, ob = 0;
    size_t rem = bi;
    for (size_t i = r; i-- > 0;) {
      int64_t idx = (int64_t)(rem % (size_t)batch[i]);
      rem /= (size_t)batch[i];
      oa += idx * sa[i];
      ob += idx * sb[i];
    }
    CpuGemm g = {.m = (size_t)M,
                 .n = (size_t)N,
                 .k = (size_t)K,
                 .a = fa + oa,
                 .lda = (size_t)K,
                 .b = fb + ob,
                 .ldb = (size_t)N,
                 .c = fy + bi * per,
                 .ldc = (size_t)N,
                 .alpha = 1.0,
                 .beta = 0.0};
    cpu_gemm_f32(H->ctx_thread_pool(ctx), &g);
  }
  narrow(y, fy, batches * per);
  return NULL;
}

/* --- Conv ---------------------------------------------------------------------------------------
 */

typedef struct ConvHalf {
  int64_t group;
  const int64_t *kernel, *strides, *dilations, *pads;
  size_t n_kernel, n_strides, n_dilations, n_pads;
  const char* auto_pad;
} ConvHalf;

static OnyxStatus* conv_half_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  ConvHalf* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->group = H->node_attr_int(node, "group", 1);
  s->kernel = H->node_attr_ints(node, "kernel_shape", &s->n_kernel);
  s->strides = H->node_attr_ints(node, "strides", &s->n_strides);
  s->dilations = H->node_attr_ints(node, "dilations", &s->n_dilations);
  s->pads = H->node_attr_ints(node, "pads", &s->n_pads);
  size_t len = 0;
  s->auto_pad = H->node_attr_string(node, "auto_pad", &len);
  if (s->group < 1) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "group must be positive");
  }
  *out = s;
  return NULL;
}

static OnyxStatus* conv_half(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const ConvHalf* s = state;
  const OnyxTensor *x = H->ctx_input(ctx, 0), *w = H->ctx_input(ctx, 1);
  const OnyxTensor* bias = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  size_t rank = H->tensor_rank(x);
  const int64_t *xd = H->tensor_dims(x), *wd = H->tensor_dims(w);
  size_t sp = rank - 2;
  if (rank < 3 || rank > 5 || H->tensor_rank(w) != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X and W must both have rank 3 to 5");
  int64_t N = xd[0], C = xd[1], OC = wd[0], G = s->group, CG = C / G;
  if (C % G || OC % G || wd[1] != CG)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%lld input channels, W [%lld, %lld, ...] and group %lld do not fit",
                         (long long)C, (long long)OC, (long long)wd[1], (long long)G);
  if (bias && H->tensor_elem_count(bias) != (size_t)OC)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "B has %zu values for %lld channels",
                         H->tensor_elem_count(bias), (long long)OC);
  int64_t k[3], st[3], dl[3], pb[3], pe[3], od[5] = {N, OC};
  for (size_t i = 0; i < sp; i++) {
    k[i] = wd[2 + i];
    st[i] = i < s->n_strides ? s->strides[i] : 1;
    dl[i] = i < s->n_dilations ? s->dilations[i] : 1;
    pb[i] = i < s->n_pads / 2 ? s->pads[i] : 0;
    pe[i] = i < s->n_pads / 2 ? s->pads[sp + i] : 0;
    const int64_t in = xd[2 + i];
    int64_t span, t, lim;
    if (st[i] < 1 || pb[i] < 0 || pe[i] < 0 || in < 0 || !cpu_dilated_extent(k[i], dl[i], &span))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: strides %lld, dilations %lld, pads %lld/%lld or "
                           "kernel %lld is out of range (or the dilated kernel overflows)",
                           i, (long long)st[i], (long long)dl[i], (long long)pb[i],
                           (long long)pe[i], (long long)k[i]);
    if (s->auto_pad && (!strcmp(s->auto_pad, "SAME_UPPER") || !strcmp(s->auto_pad, "SAME_LOWER"))) {
      const int64_t out = in / st[i] + (in % st[i] != 0);
      int64_t total = 0;
      if (!cpu_mul_i64(out > 0 ? out - 1 : 0, st[i], &t) || !cpu_add_i64(t, span, &t) ||
          !cpu_sub_i64(t, in, &total))
        total = INT64_MAX; /* refused below */
      if (total < 0) total = 0;
      pb[i] = !strcmp(s->auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    } else if (s->auto_pad && !strcmp(s->auto_pad, "VALID")) {
      pb[i] = pe[i] = 0;
    }
    /* every index below stays within in + pb + pe + span */
    if (!cpu_add3_i64(in, pb[i], pe[i], &t) || !cpu_add_i64(t, span, &lim))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: integer overflow: input %lld + pads %lld + %lld + "
                           "dilated kernel extent %lld does not fit in int64",
                           i, (long long)in, (long long)pb[i], (long long)pe[i], (long long)span);
    od[2 + i] = (t - span) / st[i] + 1;
    if (t < span || od[2 + i] < 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the kernel is larger than the input");
  }
  for (size_t i = sp; i < 3; i++) { /* unused trailing dims act as size 1 */
    k[i] = st[i] = dl[i] = 1;
    pb[i] = pe[i] = 0;
    od[2 + i] = 1;
  }
  int64_t in3[3] = {sp > 0 ? xd[2] : 1, sp > 1 ? xd[3] : 1, sp > 2 ? xd[4] : 1};
  OnyxTensor* y = NULL;
  OnyxStatus* e = H->ctx_output(ctx, 0, od, rank, &y);
  float *fx, *fw, *fb = NULL;
  if (!e) e = widen(ctx, x, &fx);
  if (!e) e = widen(ctx, w, &fw);
  if (!e && bias) e = widen(ctx, bias, &fb);
  if (e) return e;
  size_t out_n = H->tensor_elem_count(y);
  float* fy = H->ctx_scratch(ctx, (out_n + 1) * sizeof *fy);
  if (!fy) return cpu_oom(ctx);
  int64_t O0 = od[2], O1 = od[3], O2 = od[4];
  /* exact whenever they are used (X and W not empty); unsigned, so an empty
   * tensor's large dims cannot overflow into undefined behaviour */
  const int64_t in_plane = (int64_t)((uint64_t)in3[0] * (uint64_t)in3[1] * (uint64_t)in3[2]);
  const int64_t k_plane = (int64_t)((uint64_t)k[0] * (uint64_t)k[1] * (uint64_t)k[2]);
  float* out = fy;
  for (int64_t n = 0; n < N; n++)
    for (int64_t oc = 0; oc < OC; oc++) {
      int64_t g = oc / (OC / G);
      const float* wk = fw + oc * CG * k_plane;
      for (int64_t o0 = 0; o0 < O0; o0++)
        for (int64_t o1 = 0; o1 < O1; o1++)
          for (int64_t o2 = 0; o2 < O2; o2++) {
            float acc = fb ? fb[oc] : 0.0f;
            for (int64_t c = 0; c < CG; c++) {
              const float* xc = fx + (n * C + g * CG + c) * in_plane;
              const float* wc = wk + c * k_plane;
              for (int64_t a0 = 0; a0 < k[0]; a0++) {
                int64_t i0 = o0 * st[0] - pb[0] + a0 * dl[0];
                if (i0 < 0 || i0 >= in3[0]) continue;
                for (int64_t a1 = 0; a1 < k[1]; a1++) {
                  int64_t i1 = o1 * st[1] - pb[1] + a1 * dl[1];
                  if (i1 < 0 || i1 >= in3[1]) continue;
                  for (int64_t a2 = 0; a2 < k[2]; a2++) {
                    int64_t i2 = o2 * st[2] - pb[2] + a2 * dl[2];
                    if (i2 < 0 || i2 >= in3[2]) continue;
                    acc += xc[(i0 * in3[1] + i1) * in3[2] + i2] * wc[(a0 * k[1] + a1) * k[2] + a2];
                  }
                }
              }
            }
            *out++ = acc;
          }
    }
  narrow(y, fy, out_n);
  return NULL;
}

/* --- Softmax ------------------------------------------------------------------------------------
 */

/* Before opset 13 the input is seen as 2-D [outer, inner] split at `axis`
 * and each row of `inner` values is normalized; from 13, one axis. */
static OnyxStatus* softmax_half(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = cpu_host;
  const OnyxNode* node = H->ctx_node(ctx);
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  bool legacy = H->node_since_version(node) < 13;
  int64_t axis = H->node_attr_int(node, "axis", legacy ? 1 : -1);
  size_t ax = 0;
  if (!cpu_norm_axis(axis, rank, legacy, &ax) || (!legacy && ax >= rank))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                         (long long)axis, rank);
  size_t outer = cpu_dims_product(d, 0, ax);
  size_t len = legacy ? cpu_dims_product(d, ax, rank) : (size_t)d[ax];
  size_t inner = legacy ? 1 : cpu_dims_product(d, ax + 1, rank);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, d, rank, &y);
  float* f;
  if (!st) st = widen(ctx, x, &f);
  if (st) return st;
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      float* row = f + o * len * inner + i;
      float mx = -INFINITY, sum = 0.0f;
      for (size_t k = 0; k < len; k++)
        mx = row[k * inner] > mx ? row[k * inner] : mx;
      for (size_t k = 0; k < len; k++) {
        row[k * inner] = expf(row[k * inner] - mx);
        sum += row[k * inner];
      }
      for (size_t k = 0; k < len; k++)
        row[k * inner] /= sum;
    }
  narrow(y, f, H->tensor_elem_count(x));
  return NULL;
}

/* --- Registration -------------------------------------------------------------------------------
 */

static const int32_t half_types[] = {ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16};
static const OnyxTypeConstraint half_tc[] = {{"T", half_types, CPU_ARRAY_LEN(half_types)}};

static const CpuKernelSpec half_specs[] = {
    {"MatMul", 1, ONYX_OPSET_LATEST, half_tc, 1, NULL, matmul_half, NULL, NULL},
    {"Conv", 1, ONYX_OPSET_LATEST, half_tc, 1, conv_half_create, conv_half, cpu_free_state, NULL},
    {"Softmax", 1, ONYX_OPSET_LATEST, half_tc, 1, NULL, softmax_half, NULL, NULL},
};

OnyxStatus* cpu_register_half(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, half_specs, CPU_ARRAY_LEN(half_specs));
}
