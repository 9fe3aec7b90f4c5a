/* cpu_optim.c — the CPU provider's optimizer kernels: the fused
 * multi-tensor optimizers of com.onyx.training (SGDOptimizer,
 * AdamWOptimizer, LambOptimizer, ClipGradNorm; second half of the file,
 * docs/training.md "Optimizer ops") and the optimizers of
 * ai.onnx.preview.training (Adagrad, Momentum, Adam, opset 1), float and
 * double, the latter computed in double, one tensor after the other.
 *
 * Preview ops: R (learning rate, scalar), T (update count, int64 scalar), then n
 * tensors X, n gradients G and n (Adagrad, Momentum) or 2n (Adam) state
 * tensors; outputs: n new X, then the new states. Formulas of the ONNX spec:
 *   G' = norm_coefficient * X + G
 *   Adagrad:  r = R / (1 + T * decay_factor); H' = H + G'^2;
 *             X' = X - r * G' / (sqrt(H') + epsilon)
 *   Momentum: b = T > 0 ? beta : 1; V' = alpha * V + b * G';
 *             standard X' = X - R * V'; nesterov X' = X - R * (G' + alpha * V')
 *   Adam:     V' = alpha * V + (1 - alpha) * G'; H' = beta * H + (1 - beta) * G'^2;
 *             r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
 *             X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon)) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "cpu_util.h"

typedef enum CfOpt { CF_ADAGRAD, CF_MOMENTUM, CF_ADAM } CfOpt;

typedef struct CfOptState {
  CfOpt op;
  double decay, eps, norm, norm_post, alpha, beta;
  bool nesterov;
} CfOptState;

static OnyxStatus* cf_opt_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  CfOptState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->op = (CfOpt)(intptr_t)user;
  const OnyxHostApi* H = cpu_host;
  s->norm = H->node_attr_float(node, "norm_coefficient", 0.0f);
  s->eps = H->node_attr_float(node, "epsilon", 1e-6f);
  s->decay = H->node_attr_float(node, "decay_factor", 0.0f);
  s->norm_post = H->node_attr_float(node, "norm_coefficient_post", 0.0f);
  s->alpha = H->node_attr_float(node, "alpha", s->op == CF_ADAM ? 0.9f : 0.0f);
  s->beta = H->node_attr_float(node, "beta", s->op == CF_ADAM ? 0.999f : 0.0f);
  if (s->op == CF_MOMENTUM) {
    const char* mode = H->node_attr_string(node, "mode", NULL);
    s->nesterov = mode && !strcmp(mode, "nesterov");
    if (!mode || (!s->nesterov && strcmp(mode, "standard"))) {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "'mode' must be \"standard\" or \"nesterov\"");
    }
  }
  *state = s;
  return NULL;
}

static double cf_get(const OnyxTensor* t, size_t i) {
  const void* d = cpu_host->tensor_data(t);
  return cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT64 ? ((const double*)d)[i]
                                                            : (double)((const float*)d)[i];
}

static void cf_set(OnyxTensor* t, size_t i, double v) {
  void* d = cpu_host->tensor_mutable_data(t);
  if (cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT64)
    ((double*)d)[i] = v;
  else
    ((float*)d)[i] = (float)v;
}

static bool cf_same_shape(const OnyxTensor* a, const OnyxTensor* b) {
  const OnyxHostApi* H = cpu_host;
  if (H->tensor_rank(a) != H->tensor_rank(b) || H->tensor_elem_type(a) != H->tensor_elem_type(b))
    return false;
  return !H->tensor_rank(a) ||
         !memcmp(H->tensor_dims(a), H->tensor_dims(b), H->tensor_rank(a) * sizeof(int64_t));
}

static OnyxStatus* cf_opt_compute(void* state, OnyxKernelContext* ctx) {
  const CfOptState* s = state;
  const OnyxHostApi* H = cpu_host;
  size_t n_in = H->ctx_input_count(ctx), per = s->op == CF_ADAM ? 4 : 3;
  if (n_in < 2 + per || (n_in - 2) % per)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "has %zu inputs; it needs R, T and %zu tensors per optimized tensor", n_in,
                         per);
  size_t n = (n_in - 2) / per;
  const OnyxTensor* R = H->ctx_input(ctx, 0);
  const OnyxTensor* T = H->ctx_input(ctx, 1);
  if (!R || !T || H->tensor_elem_count(R) != 1 || H->tensor_elem_count(T) != 1 ||
      H->tensor_elem_type(T) != ONYX_ELEM_INT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "R and T must be scalars (T int64)");
  double r = cf_get(R, 0);
  int64_t t = *(const int64_t*)H->tensor_data(T);
  if (H->ctx_output_count(ctx) > n * (per - 1))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "has more outputs than %zu", n * (per - 1));
  if (s->op == CF_ADAGRAD) r = r / (1.0 + (double)t * s->decay);
  if (s->op == CF_ADAM && t > 0)
    r = r * sqrt(1.0 - pow(s->beta, (double)t)) / (1.0 - pow(s->alpha, (double)t));
  for (size_t k = 0; k < n; k++) {
    const OnyxTensor* X = H->ctx_input(ctx, 2 + k);
    const OnyxTensor* G = H->ctx_input(ctx, 2 + n + k);
    const OnyxTensor* V = H->ctx_input(ctx, 2 + 2 * n + k);
    const OnyxTensor* W = s->op == CF_ADAM ? H->ctx_input(ctx, 2 + 3 * n + k) : NULL;
    if (!X || !G || !V || (s->op == CF_ADAM && !W) || !cf_same_shape(X, G) ||
        !cf_same_shape(X, V) || (W && !cf_same_shape(X, W)))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "tensor %zu: X, its gradient and its states must have one type and "
                           "shape",
                           k);
    OnyxTensor *xo = NULL, *vo = NULL, *wo = NULL;
    const int64_t* dims = H->tensor_dims(X);
    size_t rank = H->tensor_rank(X);
    OnyxStatus* st = H->ctx_output(ctx, k, dims, rank, &xo);
    if (!st && H->ctx_output_count(ctx) > n + k) st = H->ctx_output(ctx, n + k, dims, rank, &vo);
    if (!st && W && H->ctx_output_count(ctx) > 2 * n + k)
      st = H->ctx_output(ctx, 2 * n + k, dims, rank, &wo);
    if (st) return st;
    size_t count = H->tensor_elem_count(X);
    for (size_t i = 0; i < count; i++) {
      double x = cf_get(X, i), g = s->norm * x + cf_get(G, i), v = cf_get(V, i), xn, vn, wn = 0;
      if (s->op == CF_ADAGRAD) {
        vn = v + g * g;
        xn = x - r * g / (sqrt(vn) + s->eps);
      } else if (s->op == CF_MOMENTUM) {
        vn = s->alpha * v + (t > 0 ? s->beta : 1.0) * g;
        xn = s->nesterov ? x - r * (g + s->alpha * vn) : x - r * vn;
      } else {
        vn = s->alpha * v + (1.0 - s->alpha) * g;
        wn = s->beta * cf_get(W, i) + (1.0 - s->beta) * g * g;
        xn = (1.0 - s->norm_post) * (x - r * vn / (sqrt(wn) + s->eps));
      }
      if (xo) cf_set(xo, i, xn);
      if (vo) cf_set(vo, i, vn);
      if (wo) cf_set(wo, i, wn);
    }
  }
  return NULL;
}

static const int32_t cf_t1[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
static const int32_t cf_t2[] = {ONYX_ELEM_INT64};
static const OnyxTypeConstraint cf_opt_tc[] = {
    {"T1", cf_t1, 2}, {"T2", cf_t2, 1}, {"T3", cf_t1, 2}};

static const OnyxTypeConstraint opt_tc[] = {{"T1", cf_t1, 2}, {"T", cf_t1, 2}};

/* ======================================================================== */
/* Fused multi-tensor optimizers of com.onyx.training (opset 1)             */
/* ======================================================================== */

/* SGDOptimizer, AdamWOptimizer, LambOptimizer and ClipGradNorm update all n
 * tensors of a node in one kernel call: the tensors are cut into chunks of
 * at most OPT_CHUNK elements (a chunk never spans two tensors), and one
 * parallel_for runs the chunks of every tensor. Chunk boundaries depend on
 * the tensor sizes only, and the norms (LAMB's per tensor, ClipGradNorm's
 * global one) are float64 sums per chunk added up in chunk order after the
 * loop, so every result is the same for any thread count. The ABI's alias
 * hints name fixed input/output indices, which a variadic op's layout does
 * not have: the outputs are always written to fresh buffers. */

#define OPT_CHUNK    ((size_t)1 << 14)
#define OPT_PARALLEL ((size_t)1 << 15) /* fewer elements run on the calling thread */

typedef enum OptKind { OPT_SGD, OPT_ADAMW, OPT_LAMB, OPT_CLIP } OptKind;

typedef struct OptState {
  OptKind kind;
  size_t n; /* tensors per group */
  double momentum, dampening, wd, beta1, beta2, eps;
  bool nesterov;
} OptState;

typedef struct OptChunk {
  size_t t, b, e; /* tensor t, elements [b, e) */
} OptChunk;

typedef struct OptJob {
  const OptState* s;
  int32_t elem; /* ONYX_ELEM_FLOAT32 or FLOAT64 */
  int isa;
  int pass; /* LAMB and ClipGradNorm: 1 (sums) or 2 (update) */
  bool has_m, first, clip;
  const void** in[4]; /* groups P, G, M, V (ClipGradNorm: G) */
  void** out[3];      /* groups P', M', V' (ClipGradNorm: G'); entries NULL when absent */
  const OptChunk* chunks;
  double* sums;  /* 2 per chunk */
  double* ratio; /* LAMB's trust ratio per tensor */
  double lr, step_size, decay, bc2_sqrt, inv_bc1, inv_bc2, coef;
  CpuStop stop;
} OptJob;

#define OPT_INLINE static inline __attribute__((always_inline))
#define OPT_SQRT   sqrtf
#define OPT_T      float
#define OPT_S      f32
#include "cpu_optim_body.h"
#undef OPT_SQRT
#undef OPT_T
#undef OPT_S
#define OPT_SQRT sqrt
#define OPT_T    double
#define OPT_S    f64
#include "cpu_optim_body.h"
#undef OPT_SQRT
#undef OPT_T
#undef OPT_S

/* One chunk of the job's current pass. */
OPT_INLINE void opt_chunk(const OptJob* j, size_t c) {
  const OptChunk* k = &j->chunks[c];
  const bool f = j->elem == ONYX_ELEM_FLOAT32;
  switch (j->s->kind) {
  case OPT_SGD:
    f ? opt_sgd_f32(j, k->t, k->b, k->e) : opt_sgd_f64(j, k->t, k->b, k->e);
    break;
  case OPT_ADAMW:
    f ? opt_adamw_f32(j, k->t, k->b, k->e) : opt_adamw_f64(j, k->t, k->b, k->e);
    break;
  case OPT_LAMB:
    if (j->pass == 1)
      f ? opt_lamb1_f32(j, k->t, k->b, k->e, &j->sums[2 * c])
        : opt_lamb1_f64(j, k->t, k->b, k->e, &j->sums[2 * c]);
    else
      f ? opt_lamb2_f32(j, k->t, k->b, k->e) : opt_lamb2_f64(j, k->t, k->b, k->e);
    break;
  case OPT_CLIP:
    if (j->pass == 1)
      j->sums[2 * c] = f ? opt_sumsq_f32(j, k->t, k->b, k->e) : opt_sumsq_f64(j, k->t, k->b, k->e);
    else
      f ? opt_scale_f32(j, k->t, k->b, k->e) : opt_scale_f64(j, k->t, k->b, k->e);
    break;
  }
}

/* Chunks [begin, end) compiled for each ISA level; same arithmetic (no FMA
 * contraction in ISO C mode), so the same bits on every level. */
static void opt_run_generic(const OptJob* j, size_t begin, size_t end, size_t* acc) {
  for (size_t c = begin; c < end; c++) {
    if (cpu_stop_poll((CpuStop*)&j->stop, acc, j->chunks[c].e - j->chunks[c].b)) return;
    opt_chunk(j, c);
  }
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma,avx"))) static void opt_run_avx2(const OptJob* j, size_t begin,
                                                                 size_t end, size_t* acc) {
  for (size_t c = begin; c < end; c++) {
    if (cpu_stop_poll((CpuStop*)&j->stop, acc, j->chunks[c].e - j->chunks[c].b)) return;
    opt_chunk(j, c);
  }
}
__attribute__((target("avx512f,avx512vl,avx2,fma,avx"))) static void
opt_run_avx512(const OptJob* j, size_t begin, size_t end, size_t* acc) {
  for (size_t c = begin; c < end; c++) {
    if (cpu_stop_poll((CpuStop*)&j->stop, acc, j->chunks[c].e - j->chunks[c].b)) return;
    opt_chunk(j, c);
  }
}
#endif

static void opt_task(void* user, size_t begin, size_t end) {
  OptJob* j = user;
  size_t acc = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (j->isa >= CPU_ISA_AVX512) {
    opt_run_avx512(j, begin, end, &acc);
    return;
  }
  if (j->isa >= CPU_ISA_AVX2) {
    opt_run_avx2(j, begin, end, &acc);
    return;
  }
#endif
  opt_run_generic(j, begin, end, &acc);
}

static OnyxStatus* opt_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  const OnyxHostApi* H = cpu_host;
  OptState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->kind = (OptKind)(intptr_t)user;
  const int64_t n = H->node_attr_int(node, "n", -1);
  const char* bad = NULL;
  if (n < 1 || (uint64_t)n > SIZE_MAX / 16) bad = "attribute n must be at least 1";
  s->n = n < 1 ? 0 : (size_t)n;
  if (s->kind == OPT_SGD) {
    s->momentum = H->node_attr_float(node, "momentum", 0.0f);
    s->dampening = H->node_attr_float(node, "dampening", 0.0f);
    s->wd = H->node_attr_float(node, "weight_decay", 0.0f);
    const int64_t nest = H->node_attr_int(node, "nesterov", 0);
    s->nesterov = nest != 0;
    if (!(s->momentum >= 0)) bad = "momentum must be >= 0";
    if (!isfinite(s->dampening)) bad = "dampening must be finite";
    if (nest != 0 && nest != 1) bad = "nesterov must be 0 or 1";
    if (s->nesterov && (s->momentum <= 0 || s->dampening != 0))
      bad = "nesterov needs momentum > 0 and dampening 0";
  } else if (s->kind != OPT_CLIP) {
    const bool lamb = s->kind == OPT_LAMB;
    s->beta1 = H->node_attr_float(node, "beta1", 0.9f);
    s->beta2 = H->node_attr_float(node, "beta2", 0.999f);
    s->eps = H->node_attr_float(node, "epsilon", lamb ? 1e-6f : 1e-8f);
    s->wd = H->node_attr_float(node, "weight_decay", lamb ? 0.0f : 0.01f);
    if (!(s->beta1 >= 0 && s->beta1 < 1)) bad = "beta1 must be in [0, 1)";
    if (!(s->beta2 >= 0 && s->beta2 < 1)) bad = "beta2 must be in [0, 1)";
    if (!(s->eps >= 0) || !isfinite(s->eps)) bad = "epsilon must be finite and >= 0";
  }
  if (!(s->wd >= 0) || !isfinite(s->wd)) bad = "weight_decay must be finite and >= 0";
  if (bad) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "%s", bad);
  }
  *state = s;
  return NULL;
}

/* A float32/float64 scalar input as a double. */
static OnyxStatus* opt_scalar(OnyxKernelContext* ctx, size_t i, const char* what, double* out) {
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor* t = H->ctx_input(ctx, i);
  const int32_t ty = t ? H->tensor_elem_type(t) : ONYX_ELEM_UNDEFINED;
  if (!t || H->tensor_elem_count(t) != 1 || (ty != ONYX_ELEM_FLOAT32 && ty != ONYX_ELEM_FLOAT64))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be a float32 or float64 scalar",
                         what);
  const void* d = H->tensor_data(t);
  *out = ty == ONYX_ELEM_FLOAT64 ? *(const double*)d : (double)*(const float*)d;
  return NULL;
}

/* The address of output i allocated with dims, or NULL when the node does
 * not have that output. */
static OnyxStatus* opt_output(OnyxKernelContext* ctx, size_t i, const int64_t* dims, size_t rank,
                              void** out) {
  const OnyxHostApi* H = cpu_host;
  *out = NULL;
  if (i >= H->ctx_output_count(ctx)) return NULL;
  const OnyxNode* node = H->ctx_node(ctx);
  if (node && !H->node_output(node, i)) return NULL;
  OnyxTensor* t = NULL;
  OnyxStatus* st = H->ctx_output(ctx, i, dims, rank, &t);
  if (st) return st;
  *out = H->tensor_mutable_data(t);
  return NULL;
}

static OnyxStatus* opt_compute(void* state, OnyxKernelContext* ctx) {
  const OptState* s = state;
  const OnyxHostApi* H = cpu_host;
  static const char* const in_names[] = {"P", "G", "M", "V"};
  const bool clip = s->kind == OPT_CLIP;
  const size_t lead = clip ? 1 : 2;
  const size_t groups = clip ? 1 : s->kind == OPT_SGD ? (s->momentum != 0 ? 3 : 2) : 4;
  const size_t out_groups = clip ? 1 : groups - 1, n = s->n;
  const size_t n_in = H->ctx_input_count(ctx);
  if (n_in != lead + groups * n)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "has %zu inputs; n = %zu needs %zu (%zu scalars and %zu groups of n)",
                         n_in, n, lead + groups * n, lead, groups);
  if (H->ctx_output_count(ctx) > out_groups * n + (clip ? 1 : 0))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "has %zu outputs; n = %zu allows %zu",
                         H->ctx_output_count(ctx), n, out_groups * n + (clip ? 1 : 0));
  OptJob j = {.s = s, .has_m = s->kind == OPT_SGD && groups == 3, .stop = {.ctx = ctx}};
  double lr = 0;
  OnyxStatus* st = opt_scalar(ctx, 0, clip ? "max_norm" : "lr", &lr);
  if (st) return st;
  /* max_norm +inf: no clipping (coef = inf >= 1), as torch's clip_grad_norm_
   * with an infinite max_norm; the training session passes it when no
   * maximum was set. */
  if (!(lr >= 0) || (!clip && !isfinite(lr)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s is %g; it must be %s and >= 0",
                         clip ? "max_norm" : "lr", lr,
                         clip ? "a number (+inf: no clipping)" : "finite");
  int64_t step = 0;
  if (!clip) {
    const OnyxTensor* T = H->ctx_input(ctx, 1);
    if (!T || H->tensor_elem_type(T) != ONYX_ELEM_INT64 || H->tensor_elem_count(T) != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "step must be an int64 scalar");
    step = *(const int64_t*)H->tensor_data(T);
    if (step < 0 || step == INT64_MAX)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "step is %lld; it must be in [0, 2^63 - 1) (the steps already taken)",
                           (long long)step);
  }
  /* Pointer tables, then the chunk list, from the context's scratch. */
  size_t ptr_bytes;
  if (!cpu_mul_size(n, (groups + out_groups) * sizeof(void*), &ptr_bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "n = %zu is too large", n);
  void** ptrs = H->ctx_scratch(ctx, ptr_bytes ? ptr_bytes : 1);
  if (!ptrs) return cpu_oom(ctx);
  for (size_t g = 0; g < groups; g++)
    j.in[g] = (const void**)(ptrs + g * n);
  for (size_t g = 0; g < out_groups; g++)
    j.out[g] = ptrs + (groups + g) * n;
  size_t n_chunks = 0, total = 0;
  for (size_t t = 0; t < n; t++) {
    const OnyxTensor* P = H->ctx_input(ctx, lead + t);
    const int32_t ty = P ? H->tensor_elem_type(P) : ONYX_ELEM_UNDEFINED;
    if (ty != ONYX_ELEM_FLOAT32 && ty != ONYX_ELEM_FLOAT64)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s_%zu must be a float32 or float64 tensor",
                           in_names[clip], t + 1);
    if (t == 0) j.elem = ty;
    const size_t rank = H->tensor_rank(P);
    const int64_t* dims = H->tensor_dims(P);
    for (size_t g = 0; g < groups; g++) {
      const OnyxTensor* X = H->ctx_input(ctx, lead + g * n + t);
      if (!X || (int32_t)H->tensor_elem_type(X) != j.elem)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s_%zu must be a %s tensor like %s_1",
                             in_names[clip + g], t + 1, cpu_elem_name(j.elem), in_names[clip]);
      if (H->tensor_rank(X) != rank ||
          (rank && memcmp(H->tensor_dims(X), dims, rank * sizeof *dims)))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s_%zu must have %s_%zu's shape",
                             in_names[clip + g], t + 1, in_names[clip], t + 1);
      j.in[g][t] = H->tensor_data(X);
    }
    for (size_t g = 0; g < out_groups; g++) {
      st = opt_output(ctx, g * n + t, dims, rank, &j.out[g][t]);
      if (st) return st;
    }
    const size_t c = H->tensor_elem_count(P);
    if (!cpu_add_size(total, c, &total) ||
        !cpu_add_size(n_chunks, c / OPT_CHUNK + (c % OPT_CHUNK != 0), &n_chunks))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the tensors' element count overflows");
  }
  size_t chunk_bytes, sum_bytes, ratio_bytes, all;
  if (!cpu_mul_size(n_chunks, sizeof(OptChunk), &chunk_bytes) ||
      !cpu_mul_size(n_chunks, 2 * sizeof(double), &sum_bytes) ||
      !cpu_mul_size(n, sizeof(double), &ratio_bytes) ||
      !cpu_add_size(chunk_bytes, sum_bytes, &all) || !cpu_add_size(all, ratio_bytes, &all))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the tensors' element count overflows");
  unsigned char* mem = H->ctx_scratch(ctx, all ? all : 1);
  if (!mem) return cpu_oom(ctx);
  OptChunk* chunks = (OptChunk*)(void*)mem;
  j.sums = (double*)(void*)(mem + chunk_bytes);
  j.ratio = (double*)(void*)(mem + chunk_bytes + sum_bytes);
  for (size_t t = 0, c = 0; t < n; t++) {
    const size_t cnt = H->tensor_elem_count(H->ctx_input(ctx, lead + t));
    for (size_t b = 0; b < cnt; b += OPT_CHUNK)
      chunks[c++] = (OptChunk){t, b, cnt - b > OPT_CHUNK ? b + OPT_CHUNK : cnt};
  }
  j.chunks = chunks;
  j.isa = cpu_gemm_isa_level();
  /* Per-step scalars in float64 (PyTorch computes them as Python floats). */
  const double t1 = (double)step + 1.0;
  j.lr = lr;
  j.first = step == 0;
  if (s->kind == OPT_ADAMW) {
    const double bc1 = 1.0 - pow(s->beta1, t1), bc2 = 1.0 - pow(s->beta2, t1);
    j.step_size = lr / bc1;
    j.bc2_sqrt = sqrt(bc2);
    j.decay = 1.0 - lr * s->wd;
  } else if (s->kind == OPT_LAMB) {
    j.inv_bc1 = 1.0 / (1.0 - pow(s->beta1, t1));
    j.inv_bc2 = 1.0 / (1.0 - pow(s->beta2, t1));
  }
  OnyxThreadPool* pool = total >= OPT_PARALLEL ? H->ctx_thread_pool(ctx) : NULL;
  j.pass = 1;
  if (n_chunks) H->parallel_for(pool, n_chunks, opt_task, &j);
  if (cpu_stop_seen(&j.stop)) return cpu_cancelled(ctx, NULL);
  if (s->kind == OPT_LAMB) {
    /* Per-tensor norms from the chunk sums, in chunk order. */
    size_t c = 0;
    for (size_t t = 0; t < n; t++) {
      double sp = 0, su = 0;
      for (; c < n_chunks && chunks[c].t == t; c++) {
        sp += j.sums[2 * c];
        su += j.sums[2 * c + 1];
      }
      const double np = sqrt(sp), nu = sqrt(su);
      j.ratio[t] = np > 0 && nu > 0 ? np / nu : 1.0;
    }
    j.pass = 2;
    if (n_chunks) H->parallel_for(pool, n_chunks, opt_task, &j);
  } else if (clip) {
    double sq = 0;
    for (size_t c = 0; c < n_chunks; c++)
      sq += j.sums[2 * c];
    const double norm = sqrt(sq);
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6),
     * applied when below 1 (NaN too: a non-finite norm spreads, as there). */
    j.coef = lr / (norm + 1e-6);
    j.clip = !(j.coef >= 1.0);
    j.pass = 2;
    if (n_chunks) H->parallel_for(pool, n_chunks, opt_task, &j);
    void* tn = NULL;
    st = opt_output(ctx, n, NULL, 0, &tn);
    if (st) return st;
    if (tn) {
      if (j.elem == ONYX_ELEM_FLOAT64)
        *(double*)tn = norm;
      else
        *(float*)tn = (float)norm;
    }
  }
  return cpu_stop_seen(&j.stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

OnyxStatus* cpu_register_optim(OnyxKernelRegistry* r) {
  static const char* const ops[] = {"Adagrad", "Momentum", "Adam"};
  for (size_t i = 0; i < CPU_ARRAY_LEN(ops); i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "ai.onnx.preview.training",
                       .op_type = ops[i],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = cf_opt_tc,
                       .type_constraint_count = CPU_ARRAY_LEN(cf_opt_tc),
                       .create = cf_opt_create,
                       .compute = cf_opt_compute,
                       .release = cpu_free_state,
                       .user_data = (void*)(intptr_t)i};
    OnyxStatus* st = cpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  static const char* const fused[] = {"SGDOptimizer", "AdamWOptimizer", "LambOptimizer",
                                      "ClipGradNorm"};
  for (size_t i = 0; i < CPU_ARRAY_LEN(fused); i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "com.onyx.training",
                       .op_type = fused[i],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = opt_tc,
                       .type_constraint_count = CPU_ARRAY_LEN(opt_tc),
                       .create = opt_create,
                       .compute = opt_compute,
                       .release = cpu_free_state,
                       .user_data = (void*)(intptr_t)i};
    OnyxStatus* st = cpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}
