/* cpu_contrib.c — the CPU provider's kernels for the com.onyx ops the graph
 * optimizer fuses into (schemas/schemas_contrib.c lists their semantics):
 * FusedMatMul, FusedConv, Gelu and LayerNormalization, float32. The matrix
 * products go through cpu_gemm_f32 (cpu_nn.h); FusedConv is the provider's
 * Conv kernel with its activation epilogue. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "cpu_util.h"
#include "cpu_vmath.h"

#define CONTRIB "com.onyx"

static const int32_t F32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint TC_T[] = {{"T", F32, 1}};
static const OnyxTypeConstraint TC_LN[] = {{"T", F32, 1}, {"U", F32, 1}};
static const OnyxAlias INPLACE[] = {{0, 0, ONYX_ALIAS_INPLACE}};
/* FusedMatMul's Y may take its residual Z's buffer: C starts as Z. */
static const OnyxAlias Z_INPLACE[] = {{3, 0, ONYX_ALIAS_INPLACE}};

/* --- FusedMatMul: Y = act(A (..., K) x B (K, N) + Bias (N) [+ Z (Y's shape)]) ------------- */

/* B packed once at creation when it is a constant (the usual case: a
 * weight), in cpu_gemm_pack_b's layout; the bias is added in the GEMM's
 * epilogue (bias_col), so Y is written once. */
typedef struct FMatMul {
  size_t k, n;
  float* packed;     /* NULL: B is packed by the GEMM per run */
  CpuActivation act; /* the optional `activation`, applied in the epilogue */
  bool gelu;         /* activation "Gelu": com.onyx Gelu's kernel on each tile */
} FMatMul;

static OnyxStatus* fmm_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  FMatMul* f = calloc(1, sizeof *f);
  if (!f) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t len = 0;
  const char* an = cpu_host->node_attr_string(node, "activation", &len);
  f->gelu = an && len == 4 && memcmp(an, "Gelu", 4) == 0;
  OnyxStatus* st = f->gelu ? NULL : cpu_read_activation(node, &f->act);
  if (st) { /* cpu_read_activation's list is FusedConv's: name FusedMatMul's */
    cpu_host->status_release(st);
    free(f);
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "activation '%.*s' not supported (Relu, LeakyRelu, Clip or Gelu)", (int)len,
                     an);
  }
  const OnyxValueInfo* bv = cpu_host->node_input(node, 1);
  const OnyxTensor* b = bv ? cpu_host->value_constant(bv) : NULL;
  if (b && cpu_host->tensor_rank(b) == 2 && cpu_host->tensor_elem_type(b) == ONYX_ELEM_FLOAT32) {
    const int64_t* d = cpu_host->tensor_dims(b);
    f->k = (size_t)d[0];
    f->n = (size_t)d[1];
    size_t floats = f->k && f->n ? cpu_gemm_packed_b_floats(f->k, f->n) : 0;
    f->packed = floats ? cpu_gemm_alloc_packed(floats) : NULL;
    if (f->packed) cpu_gemm_pack_b(NULL, f->packed, cpu_host->tensor_data(b), f->n, 0, f->k, f->n);
  }
  *state = f;
  return NULL;
}

static void fmm_release(void* state) {
  FMatMul* f = state;
  if (f) free(f->packed);
  free(f);
}

static OnyxStatus* fmm_compute(void* state, OnyxKernelContext* ctx) {
  const FMatMul* f = state;
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* bias = cpu_host->ctx_input(ctx, 2);
  size_t ra = cpu_host->tensor_rank(a), rb = cpu_host->tensor_rank(b);
  const int64_t* da = cpu_host->tensor_dims(a);
  const int64_t* db = cpu_host->tensor_dims(b);
  if (ra < 2 || rb != 2 || da[ra - 1] != db[0])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "A and B do not multiply (B must be 2-D)");
  size_t k = (size_t)db[0], n = (size_t)db[1], m = cpu_dims_product(da, 0, ra - 1);
  if (!bias || cpu_host->tensor_elem_count(bias) != n)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Bias must hold %zu elements", n);
  int64_t dy[16];
  if (ra > 16) return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu above 16", ra);
  memcpy(dy, da, ra * sizeof *dy);
  dy[ra - 1] = (int64_t)n;
  OnyxTensor* y = NULL;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dy, ra, &y);
  if (st) return st;
  float* yd = cpu_host->tensor_mutable_data(y);
  const float* bd = cpu_host->tensor_data(bias);
  /* Z, the residual: C starts from it (Y in Z's buffer when the planner
   * gave it, else a copy) and the epilogue adds the product and the bias. */
  const OnyxTensor* z = cpu_host->ctx_input_count(ctx) > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  if (z) {
    const size_t rz = cpu_host->tensor_rank(z);
    if (cpu_host->tensor_elem_type(z) != ONYX_ELEM_FLOAT32 || rz != ra ||
        memcmp(cpu_host->tensor_dims(z), dy, ra * sizeof *dy) != 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "Z must be float32 of Y's shape (A's with its last dim %zu)", n);
  }
  if (!m || !n) return NULL;
  if (z && cpu_host->tensor_data(z) != yd)
    memcpy(yd, cpu_host->tensor_data(z), m * n * sizeof(float));
  bool packed = f && f->packed && f->k == k && f->n == n;
  CpuGemm g = {.m = m,
               .n = n,
               .k = k,
               .a = cpu_host->tensor_data(a),
               .lda = k,
               .b = packed ? NULL : cpu_host->tensor_data(b),
               .ldb = n,
               .c = yd,
               .ldc = n,
               .alpha = 1.0,
               .beta = z ? 1.0 : 0.0,
               .packed_b = packed ? f->packed : NULL,
               .bias_col = bd,
               .act = f ? f->act.act : CPU_ACT_NONE,
               .act_alpha = f ? f->act.alpha : 0.0f,
               .act_min = f ? f->act.min : 0.0f,
               .act_max = f ? f->act.max : 0.0f,
               .post_row = f && f->gelu ? cpu_gelu_f32 : NULL};
  cpu_gemm_f32(cpu_host->ctx_thread_pool(ctx), &g);
  return NULL;
}

/* --- Gelu ----------------------------------------------------------------------------------- */

typedef struct EwJob {
  const float* x;
  float* y;
} EwJob;

static void gelu_range(void* user, size_t begin, size_t end) {
  EwJob* j = user;
  cpu_gelu_f32(j->x + begin, j->y + begin, end - begin);
}

static OnyxStatus* gelu_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  EwJob j = {cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y)};
  size_t count = cpu_host->tensor_elem_count(x);
  cpu_host->parallel_for(count > 16384 ? cpu_host->ctx_thread_pool(ctx) : NULL, count, gelu_range,
                         &j);
  return NULL;
}

/* --- LayerNormalization (com.onyx, for models below opset 17) --------------------------------- */

typedef struct LnJob {
  const float *x, *scale, *bias;
  float* y;
  size_t width;
  float eps;
} LnJob;

static void ln_rows(void* user, size_t begin, size_t end) {
  const LnJob* j = user;
  size_t w = j->width;
  for (size_t r = begin; r < end; r++) {
    const float* x = j->x + r * w;
    float* y = j->y + r * w;
    double mean = 0, var = 0;
    for (size_t i = 0; i < w; i++)
      mean += x[i];
    mean /= (double)w;
    for (size_t i = 0; i < w; i++)
      var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= (double)w;
    float inv = (float)(1.0 / sqrt(var + j->eps));
    for (size_t i = 0; i < w; i++) {
      float v = (float)(x[i] - mean) * inv * j->scale[i];
      y[i] = j->bias ? v + j->bias[i] : v;
    }
  }
}

static OnyxStatus* ln_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* scale = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* bias = cpu_host->ctx_input(ctx, 2);
  size_t rank = cpu_host->tensor_rank(x);
  const int64_t* dims = cpu_host->tensor_dims(x);
  size_t axis;
  if (!cpu_norm_axis(cpu_host->node_attr_int(node, "axis", -1), rank, false, &axis) ||
      axis + 1 != rank)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "only the last axis is normalized here");
  size_t width = (size_t)dims[rank - 1];
  if (cpu_host->tensor_elem_count(scale) != width ||
      (bias && cpu_host->tensor_elem_count(bias) != width))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Scale and B must hold %zu elements", width);
  OnyxTensor* y = NULL;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, rank, &y);
  if (st || !width) return st;
  LnJob j = {cpu_host->tensor_data(x),
             cpu_host->tensor_data(scale),
             bias ? cpu_host->tensor_data(bias) : NULL,
             cpu_host->tensor_mutable_data(y),
             width,
             cpu_host->node_attr_float(node, "epsilon", 1e-5f)};
  size_t rows = cpu_host->tensor_elem_count(x) / width;
  cpu_host->parallel_for(rows * width > 16384 ? cpu_host->ctx_thread_pool(ctx) : NULL, rows,
                         ln_rows, &j);
  return NULL;
}

/* --- MultiHeadAttention ------------------------------------------------------------------------
 * Y[b, s, h*D + d] = sum_t softmax_t(scale * Q_bh[s] . K_bh[t] + Mask[b, h, s, t]) V_bh[t, d]
 * with Q [B, S, H*D], K and V [B, T, H*D] (head h is columns h*D .. h*D + D - 1) and an
 * optional additive Mask broadcasting to [B, H, S, T]; or, without K and V, Q packed as
 * [B, S, 3*H*D] (queries, keys, values side by side: the optimizer's one GEMM for the three
 * projections). One task per (b, h): two GEMMs that read the heads in place (strided), and
 * the softmax rows between them, in an S x T buffer of the task's own. */

typedef struct MhaJob {
  const float *q, *k, *v, *mask;
  float* y;
  size_t b, h, s, t, d;
  size_t ld;         /* Q's, K's and V's row stride: H*D, or 3*H*D when packed */
  size_t mstride[4]; /* Mask strides over [B, H, S, T]; 0 where it broadcasts */
  float scale;
  float* scores; /* one S x T block per chunk, from the run's scratch */
  size_t tasks, chunks;
  atomic_size_t next; /* the next task to claim */
} MhaJob;

/* Chunk c (one per thread) claims tasks until none is left and runs them
 * in its own score block: claimed, not dealt, so a thread that runs slower
 * (or joins late) on a shared machine takes fewer. */
static void mha_chunks(void* user, size_t begin, size_t end) {
  MhaJob* j = user;
  for (size_t c = begin; c < end; c++) {
    const size_t hd = j->h * j->d, ld = j->ld;
    float* sc = j->scores + c * j->s * j->t;
    for (size_t task; (task = atomic_fetch_add(&j->next, 1)) < j->tasks;) {
      const size_t bi = task / j->h, hi = task % j->h;
      const float* q = j->q + bi * j->s * ld + hi * j->d;
      const float* k = j->k + bi * j->t * ld + hi * j->d;
      const float* v = j->v + bi * j->t * ld + hi * j->d;
      /* scores (S x T) = scale * Q_bh (S x D) * K_bh^T; K_bh is T x D with rows ld apart. A
       * mask row that every query row shares (BERT's [B, 1, 1, T] padding mask) is the
       * GEMM's column bias, added in its epilogue. */
      const float* mrow = j->mask ? j->mask + bi * j->mstride[0] + hi * j->mstride[1] : NULL;
      const int mask_as_bias = j->mask && j->mstride[2] == 0 && j->mstride[3] == 1;
      const CpuGemm g1 = {.m = j->s,
                          .n = j->t,
                          .k = j->d,
                          .a = q,
                          .lda = ld,
                          .b = k,
                          .ldb = ld,
                          .trans_b = 1,
                          .c = sc,
                          .ldc = j->t,
                          .alpha = j->scale,
                          .bias_col = mask_as_bias ? mrow : NULL};
      cpu_gemm_f32(NULL, &g1);
      for (size_t si = 0; si < j->s; si++) {
        float* row = sc + si * j->t;
        if (j->mask && !mask_as_bias) {
          const float* m = mrow + si * j->mstride[2];
          if (j->mstride[3] == 1)
            for (size_t ti = 0; ti < j->t; ti++)
              row[ti] += m[ti];
          else
            for (size_t ti = 0; ti < j->t; ti++)
              row[ti] += m[ti * j->mstride[3]];
        }
        cpu_softmax_row_f32(row, row, j->t);
      }
      /* Y_bh (S x D, rows hd apart) = P (S x T) * V_bh (T x D, rows ld apart). */
      const CpuGemm g2 = {.m = j->s,
                          .n = j->d,
                          .k = j->t,
                          .a = sc,
                          .lda = j->t,
                          .b = v,
                          .ldb = ld,
                          .c = j->y + bi * j->s * hd + hi * j->d,
                          .ldc = hd,
                          .alpha = 1.0};
      cpu_gemm_f32(NULL, &g2);
    }
  }
}

static OnyxStatus* mha_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  const OnyxTensor* q = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* k = n_in > 1 ? cpu_host->ctx_input(ctx, 1) : NULL;
  const OnyxTensor* v = n_in > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* mask = n_in > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  const int64_t heads = cpu_host->node_attr_int(node, "num_heads", 0);
  if (!k != !v)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "K and V must both be given, or both be absent (Q packed as Q|K|V)");
  const int packed = !k;
  if (cpu_host->tensor_rank(q) != 3 ||
      (!packed && (cpu_host->tensor_rank(k) != 3 || cpu_host->tensor_rank(v) != 3)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Q, K and V must be 3-D [batch, seq, hidden]");
  const int64_t* qd = cpu_host->tensor_dims(q);
  /* the hidden size H*D: Q's last dim, or a third of it packed */
  const int64_t hidden = packed ? qd[2] / 3 : qd[2];
  if (packed && qd[2] % 3)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "packed Q|K|V: the last dim %lld is not a multiple of 3",
                         (long long)qd[2]);
  const int64_t qkv[3] = {qd[0], qd[1], hidden};
  const int64_t *kd = packed ? qkv : cpu_host->tensor_dims(k),
                *vd = packed ? qkv : cpu_host->tensor_dims(v);
  if (heads <= 0 || hidden % heads)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "num_heads %lld does not divide the hidden size %lld", (long long)heads,
                         (long long)hidden);
  if (kd[0] != qd[0] || vd[0] != qd[0] || kd[2] != hidden || vd[2] != hidden || vd[1] != kd[1])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "Q [%lld,%lld,%lld], K [%lld,%lld,%lld] and V [%lld,%lld,%lld] do not "
                         "agree",
                         (long long)qd[0], (long long)qd[1], (long long)qd[2], (long long)kd[0],
                         (long long)kd[1], (long long)kd[2], (long long)vd[0], (long long)vd[1],
                         (long long)vd[2]);
  const float* qp = cpu_host->tensor_data(q);
  MhaJob j = {.q = qp,
              .k = !packed ? cpu_host->tensor_data(k)
                   : qp    ? qp + hidden
                           : NULL,
              .v = !packed ? cpu_host->tensor_data(v)
                   : qp    ? qp + 2 * hidden
                           : NULL,
              .b = (size_t)qd[0],
              .h = (size_t)heads,
              .s = (size_t)qd[1],
              .t = (size_t)kd[1],
              .d = (size_t)(hidden / heads),
              .ld = (size_t)qd[2],
              .scale = cpu_host->node_attr_float(node, "scale", 1.0f)};
  if (mask) {
    const size_t mr = cpu_host->tensor_rank(mask);
    const int64_t* md = cpu_host->tensor_dims(mask);
    const int64_t full[4] = {qd[0], heads, qd[1], kd[1]};
    if (mr > 4)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Mask has rank %zu (at most 4)", mr);
    size_t stride = 1;
    for (size_t i = 4; i-- > 0;) {
      const int64_t dim = i + mr >= 4 ? md[i + mr - 4] : 1;
      if (dim != 1 && dim != full[i])
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "Mask dim %zu is %lld: it must be 1 or %lld to broadcast to "
                             "[batch, heads, seq, kv_seq]",
                             i, (long long)dim, (long long)full[i]);
      j.mstride[i] = dim == 1 ? 0 : stride;
      stride *= (size_t)dim;
    }
    j.mask = cpu_host->tensor_data(mask);
  }
  OnyxTensor* y = NULL;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, qkv, 3, &y);
  if (st || cpu_host->tensor_elem_count(y) == 0) return st;
  j.y = cpu_host->tensor_mutable_data(y);
  if (j.t == 0) { /* no keys: an empty sum */
    memset(j.y, 0, cpu_host->tensor_elem_count(y) * sizeof(float));
    return NULL;
  }
  j.tasks = j.b * j.h;
  const double work = (double)j.s * (double)j.t * (double)j.d * (double)j.tasks;
  OnyxThreadPool* pool = work > 65536 ? cpu_host->ctx_thread_pool(ctx) : NULL;
  const size_t threads = cpu_host->thread_pool_size(pool);
  j.chunks = j.tasks < threads ? j.tasks : threads;
  if (j.s && j.t > SIZE_MAX / sizeof(float) / j.s / j.chunks)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "a %zu x %zu score block is too large", j.s,
                         j.t);
  j.scores = cpu_host->ctx_scratch(ctx, j.chunks * j.s * j.t * sizeof(float));
  if (!j.scores)
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory for %zu score blocks of %zu x %zu",
                         j.chunks, j.s, j.t);
  atomic_init(&j.next, 0);
  cpu_host->parallel_for(pool, j.chunks, mha_chunks, &j);
  return NULL;
}

/* --- FusedConv: the CPU provider's own Conv kernel (cpu_conv.c), whose create
 * reads the `activation` attribute and applies it in the GEMM's epilogue. */

#define CDEF(op, tc, cr, comp, rel, al, nal)                                                       \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = CONTRIB, .op_type = op, .since_version = 1,    \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = tc,                                      \
    .type_constraint_count = sizeof(tc) / sizeof(tc[0]), .aliases = al, .alias_count = nal,        \
    .create = cr, .compute = comp, .release = rel                                                  \
  }

OnyxStatus* cpu_register_contrib(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      CDEF("FusedMatMul", TC_T, fmm_create, fmm_compute, fmm_release, Z_INPLACE, 1),
      CDEF("FusedConv", TC_T, cpu_conv_create, cpu_conv_compute, cpu_conv_release, NULL, 0),
      CDEF("Gelu", TC_T, NULL, gelu_compute, NULL, INPLACE, 1),
      CDEF("LayerNormalization", TC_LN, NULL, ln_compute, NULL, INPLACE, 1),
      CDEF("MultiHeadAttention", TC_T, NULL, mha_compute, NULL, NULL, 0),
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return cpu_register_fused_ew(r); /* com.onyx FusedElementwise: cpu_fused_ew.c */
}
