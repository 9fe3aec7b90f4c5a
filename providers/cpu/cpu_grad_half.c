/* cpu_grad_half.c — the float16 and bfloat16 kernels that mixed-precision
 * training needs beyond cpu_half.c's MatMul, Conv and Softmax: Gemm (a
 * listed op of the forward pass, and the weight gradient of a MatMul over a
 * batch of rows) and com.onyx.training ConvGrad (the gradient of Conv and
 * ConvTranspose). As in cpu_half.c the operands are widened to float32
 * once, the work runs in float32 (Gemm through the float32 GEMM core,
 * ConvGrad as direct loops: the half-precision convolutions trained on the
 * CPU are small), and the result is rounded to nearest even on the way
 * out. */
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

/* --- ConvGrad --------------------------------------------------------------------------------- */

/* ConvGrad(dY, X, W) -> dX, dW, dB of Y = Conv(X, W, B) with the node's
 * strides, dilations, pads (or auto_pad) and group; 1 to 3 spatial dims:
 *   dX[n, c, i]  = sum over m of its group, kernel taps t, output points o
 *                  with i = o * s - pb + t * d of dY[n, m, o] W[m, c', t]
 *   dW[m, c', t] = sum over n, o of dY[n, m, o] X[n, c, o * s - pb + t * d]
 *   dB[m]        = sum over n, o of dY[n, m, o]
 * (c = group * C/G + c'; taps reading padding add nothing). */
enum { GH_SP = 3 };

typedef struct ConvGeo {
  size_t nsp;
  int64_t in[GH_SP], k[GH_SP], out[GH_SP], s[GH_SP], d[GH_SP], pb[GH_SP];
  size_t in_size, k_size, out_size;
} ConvGeo;

static OnyxStatus* conv_geo(OnyxKernelContext* ctx, const int64_t* xd, const int64_t* wd,
                            size_t nsp, ConvGeo* g) {
  const OnyxHostApi* H = cpu_host;
  const OnyxNode* node = H->ctx_node(ctx);
  size_t n_s = 0, n_d = 0, n_p = 0, n_k = 0, len = 0;
  const int64_t* st = H->node_attr_ints(node, "strides", &n_s);
  const int64_t* dl = H->node_attr_ints(node, "dilations", &n_d);
  const int64_t* pads = H->node_attr_ints(node, "pads", &n_p);
  const int64_t* ks = H->node_attr_ints(node, "kernel_shape", &n_k);
  const char* ap = H->node_attr_string(node, "auto_pad", &len);
  int mode = 0; /* 0 NOTSET, 1 VALID, 2 SAME_UPPER, 3 SAME_LOWER */
  static const char* const modes[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
  if (ap && len) {
    mode = -1;
    for (int m = 0; m < 4; m++)
      if (strlen(modes[m]) == len && !memcmp(modes[m], ap, len)) mode = m;
    if (mode < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%.*s'", (int)len, ap);
  }
  if ((n_s && n_s != nsp) || (n_d && n_d != nsp) || (n_p && n_p != 2 * nsp) || (n_k && n_k != nsp))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "strides, dilations, kernel_shape (%zu values each) and pads (%zu) do "
                         "not fit %zu spatial dims",
                         nsp, 2 * nsp, nsp);
  g->nsp = nsp;
  g->in_size = g->k_size = g->out_size = 1;
  for (size_t i = 0; i < nsp; i++) {
    g->in[i] = xd[2 + i];
    g->k[i] = wd[2 + i];
    g->s[i] = n_s ? st[i] : 1;
    g->d[i] = n_d ? dl[i] : 1;
    if (n_k && ks[i] != g->k[i])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "kernel_shape does not match W's dims");
    if (g->s[i] < 1 || g->d[i] < 1 || g->k[i] < 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: stride %lld, dilation %lld, kernel %lld (each >= 1)",
                           i, (long long)g->s[i], (long long)g->d[i], (long long)g->k[i]);
    int64_t eff = 0, t = 0, span = 0;
    if (!cpu_dilated_extent(g->k[i], g->d[i], &eff))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: the dilated kernel extent overflows", i);
    int64_t pb = mode == 0 && n_p ? pads[i] : 0, pe = mode == 0 && n_p ? pads[i + nsp] : 0;
    if (pb < 0 || pe < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "spatial dim %zu: negative pads", i);
    if (mode >= 2) {
      int64_t out = g->in[i] / g->s[i] + (g->in[i] % g->s[i] != 0), total = 0;
      if (!cpu_mul_i64(out > 0 ? out - 1 : 0, g->s[i], &t) || !cpu_add_i64(t, eff, &t) ||
          !cpu_sub_i64(t, g->in[i], &total))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "spatial dim %zu: the SAME padding overflows", i);
      if (total < 0) total = 0;
      pb = mode == 2 ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    if (!cpu_add3_i64(g->in[i], pb, pe, &span))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "spatial dim %zu: pads overflow", i);
    g->pb[i] = pb;
    g->out[i] = span < eff ? 0 : (span - eff) / g->s[i] + 1;
    g->in_size *= (size_t)g->in[i];
    g->k_size *= (size_t)g->k[i];
    g->out_size *= (size_t)g->out[i];
  }
  return NULL;
}

/* The input offset (within one plane) that output point o reads through
 * tap t, or -1 when it falls in the padding. */
static int64_t conv_at(const ConvGeo* g, size_t o, size_t t) {
  int64_t at = 0;
  int64_t oi[GH_SP], ti[GH_SP];
  for (size_t i = g->nsp; i-- > 0;) {
    oi[i] = (int64_t)(o % (size_t)g->out[i]);
    o /= (size_t)g->out[i];
    ti[i] = (int64_t)(t % (size_t)g->k[i]);
    t /= (size_t)g->k[i];
  }
  for (size_t i = 0; i < g->nsp; i++) {
    int64_t p = oi[i] * g->s[i] - g->pb[i] + ti[i] * g->d[i];
    if (p < 0 || p >= g->in[i]) return -1;
    at = at * g->in[i] + p;
  }
  return at;
}

static bool has_output(const OnyxNode* node, size_t i) {
  return node && i < cpu_host->node_output_count(node) && cpu_host->node_output(node, i) != NULL;
}

static OnyxStatus* conv_grad_half(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = cpu_host;
  const OnyxNode* node = H->ctx_node(ctx);
  const OnyxTensor *dy = H->ctx_input(ctx, 0), *x = H->ctx_input(ctx, 1), *w = H->ctx_input(ctx, 2);
  size_t r = H->tensor_rank(x);
  if (r < 3 || r > 2 + GH_SP || H->tensor_rank(w) != r || H->tensor_rank(dy) != r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "dY, X and W must be 3-D to 5-D of one rank (%zu-D, %zu-D, %zu-D)",
                         H->tensor_rank(dy), r, H->tensor_rank(w));
  const int64_t *xd = H->tensor_dims(x), *wd = H->tensor_dims(w), *yd = H->tensor_dims(dy);
  int64_t group = H->node_attr_int(node, "group", 1);
  int64_t C = xd[1], M = wd[0];
  if (group < 1 || C % group || M % group || wd[1] != C / group)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "group %lld does not fit X's %lld channels and W [%lld, %lld, ...]",
                         (long long)group, (long long)C, (long long)wd[0], (long long)wd[1]);
  ConvGeo g = {0};
  OnyxStatus* st = conv_geo(ctx, xd, wd, r - 2, &g);
  if (st) return st;
  bool same = yd[0] == xd[0] && yd[1] == M;
  for (size_t i = 0; same && i < g.nsp; i++)
    same = yd[2 + i] == g.out[i];
  if (!same)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "dY's shape is not Conv's output shape for X, W and the attributes");
  OnyxTensor *tdx = NULL, *tdw = NULL, *tdb = NULL;
  bool want_dx = has_output(node, 0), want_dw = has_output(node, 1), want_db = has_output(node, 2);
  if (want_dx && (st = H->ctx_output(ctx, 0, xd, r, &tdx))) return st;
  if (want_dw && (st = H->ctx_output(ctx, 1, wd, r, &tdw))) return st;
  if (want_db && (st = H->ctx_output(ctx, 2, wd, 1, &tdb))) return st;
  float *fy = NULL, *fx = NULL, *fw = NULL;
  if ((st = widen(ctx, dy, &fy)) || (st = widen(ctx, x, &fx)) || (st = widen(ctx, w, &fw)))
    return st;
  size_t N = (size_t)xd[0], cg = (size_t)(C / group), mg = (size_t)(M / group);
  size_t nx = H->tensor_elem_count(x), nw = H->tensor_elem_count(w);
  float* gx = want_dx ? H->ctx_scratch(ctx, (nx ? nx : 1) * sizeof *gx) : NULL;
  float* gw = want_dw ? H->ctx_scratch(ctx, (nw ? nw : 1) * sizeof *gw) : NULL;
  float* gb = want_db ? H->ctx_scratch(ctx, ((size_t)M ? (size_t)M : 1) * sizeof *gb) : NULL;
  if ((want_dx && !gx) || (want_dw && !gw) || (want_db && !gb)) return cpu_oom(ctx);
  if (gx) memset(gx, 0, nx * sizeof *gx);
  if (gw) memset(gw, 0, nw * sizeof *gw);
  if (gb) memset(gb, 0, (size_t)M * sizeof *gb);
  for (size_t n = 0; n < N; n++)
    for (size_t m = 0; m < (size_t)M; m++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const float* dym = fy + (n * (size_t)M + m) * g.out_size;
      size_t c0 = m / mg * cg;
      for (size_t o = 0; gb && o < g.out_size; o++)
        gb[m] += dym[o];
      for (size_t c = 0; c < cg; c++) {
        const float* xp = fx + (n * (size_t)C + c0 + c) * g.in_size;
        float* gxp = gx ? gx + (n * (size_t)C + c0 + c) * g.in_size : NULL;
        const float* wp = fw + (m * cg + c) * g.k_size;
        float* gwp = gw ? gw + (m * cg + c) * g.k_size : NULL;
        for (size_t t = 0; t < g.k_size; t++)
          for (size_t o = 0; o < g.out_size; o++) {
            int64_t at = conv_at(&g, o, t);
            if (at < 0) continue;
            if (gxp) gxp[at] += dym[o] * wp[t];
            if (gwp) gwp[t] += dym[o] * xp[at];
          }
      }
    }
  if (tdx) narrow(tdx, gx, nx);
  if (tdw) narrow(tdw, gw, nw);
  if (tdb) narrow(tdb, gb, (size_t)M);
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
  OnyxStatus* st = cpu_register_specs(r, grad_half_specs, CPU_ARRAY_LEN(grad_half_specs));
  if (st) return st;
  const OnyxKernelDef conv_grad = {.struct_size = sizeof(OnyxKernelDef),
                                   .domain = "com.onyx.training",
                                   .op_type = "ConvGrad",
                                   .since_version = 1,
                                   .end_version = ONYX_OPSET_LATEST,
                                   .type_constraints = grad_half_tc,
                                   .type_constraint_count = CPU_ARRAY_LEN(grad_half_tc),
                                   .compute = conv_grad_half};
  return cpu_host->register_kernel(r, &conv_grad);
}
