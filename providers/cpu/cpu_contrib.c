/* cpu_contrib.c — the CPU provider's kernels for the com.onyx ops the graph
 * optimizer fuses into (schemas/schemas_contrib.c lists their semantics):
 * FusedMatMul, FusedConv, Gelu and LayerNormalization, float32. The matrix
 * products go through cpu_gemm_f32 (cpu_nn.h); FusedConv is the provider's
 * Conv kernel with its activation epilogue. */
#include <math.h>
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

/* --- FusedMatMul: Y = A (..., K) x B (K, N) + Bias (N) ------------------------------------ */

/* B packed once at creation when it is a constant (the usual case: a
 * weight), in cpu_gemm_pack_b's layout; the bias is added in the GEMM's
 * epilogue (bias_col), so Y is written once. */
typedef struct FMatMul {
  size_t k, n;
  float* packed; /* NULL: B is packed by the GEMM per run */
} FMatMul;

static OnyxStatus* fmm_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  FMatMul* f = calloc(1, sizeof *f);
  if (!f) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  const OnyxValueInfo* bv = cpu_host->node_input(node, 1);
  const OnyxTensor* b = bv ? cpu_host->value_constant(bv) : NULL;
  if (b && cpu_host->tensor_rank(b) == 2 && cpu_host->tensor_elem_type(b) == ONYX_ELEM_FLOAT32) {
    const int64_t* d = cpu_host->tensor_dims(b);
    f->k = (size_t)d[0];
    f->n = (size_t)d[1];
    size_t floats = f->k && f->n ? cpu_gemm_packed_b_floats(f->k, f->n) : 0;
    f->packed = floats ? aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64) : NULL;
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
  if (!m || !n) return NULL;
  if (!k) {
    for (size_t i = 0; i < m; i++)
      memcpy(yd + i * n, bd, n * sizeof *yd);
    return NULL;
  }
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
               .beta = 0.0,
               .packed_b = packed ? f->packed : NULL,
               .bias_col = bd};
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

/* --- FusedConv: the CPU provider's own Conv kernel (cpu_nn.c), whose create
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
      CDEF("FusedMatMul", TC_T, fmm_create, fmm_compute, fmm_release, NULL, 0),
      CDEF("FusedConv", TC_T, cpu_conv_create, cpu_conv_compute, cpu_conv_release, NULL, 0),
      CDEF("Gelu", TC_T, NULL, gelu_compute, NULL, INPLACE, 1),
      CDEF("LayerNormalization", TC_LN, NULL, ln_compute, NULL, INPLACE, 1),
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
