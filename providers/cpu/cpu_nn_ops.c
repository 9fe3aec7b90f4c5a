/* cpu_nn_ops.c — the CPU provider's nn_ops kernel family: shared helpers,
 * normalizations (InstanceNormalization, GroupNormalization,
 * RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN),
 * pooling (LpPool, GlobalMaxPool, GlobalLpPool, MaxUnpool, MaxRoiPool), the
 * losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) and
 * NonMaxSuppression. Resize and the samplers live in cpu_resize.c,
 * ConvTranspose / Col2Im / DeformConv in cpu_conv_transpose.c, the RNNs in
 * cpu_rnn.c.
 *
 * Most kernels here compute in double: inputs of any floating type are
 * converted into scratch buffers, results converted back. Instance and
 * group normalization read float32/float64 in place (halves through a
 * float copy), with statistics in double, blocks split over the pool. */
#include "cpu_nn_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const int32_t nnop_types_f[4] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16,
                                 ONYX_ELEM_BFLOAT16};
const int32_t nnop_types_resize[12] = {ONYX_ELEM_FLOAT32,  ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16,
                                       ONYX_ELEM_BFLOAT16, ONYX_ELEM_INT8,    ONYX_ELEM_UINT8,
                                       ONYX_ELEM_INT16,    ONYX_ELEM_UINT16,  ONYX_ELEM_INT32,
                                       ONYX_ELEM_UINT32,   ONYX_ELEM_INT64,   ONYX_ELEM_UINT64};

#define MAX_SP 8 /* spatial dims of the window ops */

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

OnyxStatus* nnop_scratch(OnyxKernelContext* ctx, size_t bytes, void** out) {
  *out = cpu_host->ctx_scratch(ctx, bytes ? bytes : 1);
  return *out ? NULL : cpu_oom(ctx);
}

OnyxStatus* nnop_load_d(OnyxKernelContext* ctx, const OnyxTensor* t, double** out) {
  const size_t n = cpu_host->tensor_elem_count(t);
  OnyxStatus* st = nnop_scratch(ctx, n * sizeof(double), (void**)out);
  if (st) return st;
  const int32_t type = cpu_host->tensor_elem_type(t);
  const void* data = cpu_host->tensor_data(t);
  double* o = *out;
  if (type == ONYX_ELEM_FLOAT32) {
    for (size_t i = 0; i < n; i++)
      o[i] = ((const float*)data)[i];
  } else if (type == ONYX_ELEM_FLOAT64) {
    cpu_memcpy(o, data, n * sizeof(double));
  } else {
    for (size_t i = 0; i < n; i++) {
      CpuNum v;
      if (!cpu_num_load(type, data, i, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "element type %s is not numeric",
                             cpu_elem_name(type));
      o[i] = cpu_num_as_double(v);
    }
  }
  return NULL;
}

OnyxStatus* nnop_load_f(OnyxKernelContext* ctx, const OnyxTensor* t, float** out) {
  const size_t n = cpu_host->tensor_elem_count(t);
  const int32_t type = cpu_host->tensor_elem_type(t);
  const void* data = cpu_host->tensor_data(t);
  OnyxStatus* st = nnop_scratch(ctx, n * sizeof(float), (void**)out);
  if (st) return st;
  float* o = *out;
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    cpu_memcpy(o, data, n * sizeof(float));
    break;
  case ONYX_ELEM_FLOAT16:
    for (size_t i = 0; i < n; i++)
      o[i] = cpu_f16_to_f32(((const uint16_t*)data)[i]);
    break;
  case ONYX_ELEM_BFLOAT16:
    for (size_t i = 0; i < n; i++)
      o[i] = cpu_bf16_to_f32(((const uint16_t*)data)[i]);
    break;
  default:
    for (size_t i = 0; i < n; i++) {
      CpuNum v;
      if (!cpu_num_load(type, data, i, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "element type %s is not numeric",
                             cpu_elem_name(type));
      o[i] = (float)cpu_num_as_double(v);
    }
  }
  return NULL;
}

static void store_one(int32_t type, void* data, size_t i, double x) {
  CpuNum v;
  if (type == ONYX_ELEM_FLOAT16 || type == ONYX_ELEM_BFLOAT16 || type == ONYX_ELEM_FLOAT32 ||
      type == ONYX_ELEM_FLOAT64) {
    v.kind = CPU_NUM_FLT;
    v.v.f = x;
  } else {
    v.kind = CPU_NUM_FLT;
    v.v.f = nearbyint(x);
  }
  cpu_num_store(type, data, i, v);
}

void nnop_store_d(OnyxTensor* y, const double* v, size_t n) {
  const int32_t type = cpu_host->tensor_elem_type(y);
  void* data = cpu_host->tensor_mutable_data(y);
  if (type == ONYX_ELEM_FLOAT64) {
    cpu_memcpy(data, v, n * sizeof(double));
  } else if (type == ONYX_ELEM_FLOAT32) {
    for (size_t i = 0; i < n; i++)
      ((float*)data)[i] = (float)v[i];
  } else {
    for (size_t i = 0; i < n; i++)
      store_one(type, data, i, v[i]);
  }
}

void nnop_store_f(OnyxTensor* y, const float* v, size_t n) {
  const int32_t type = cpu_host->tensor_elem_type(y);
  void* data = cpu_host->tensor_mutable_data(y);
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    cpu_memcpy(data, v, n * sizeof(float));
    break;
  case ONYX_ELEM_FLOAT16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t*)data)[i] = cpu_f32_to_f16(v[i]);
    break;
  case ONYX_ELEM_BFLOAT16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t*)data)[i] = cpu_f32_to_bf16(v[i]);
    break;
  default:
    for (size_t i = 0; i < n; i++)
      store_one(type, data, i, v[i]);
  }
}

bool nnop_has_output(const OnyxNode* node, size_t i) {
  return node && i < cpu_host->node_output_count(node) && cpu_host->node_output(node, i) != NULL;
}

bool nnop_has_input(const OnyxKernelContext* ctx, size_t i) {
  return i < cpu_host->ctx_input_count(ctx) && cpu_host->ctx_input(ctx, i) != NULL;
}

const char* nnop_attr_str(const OnyxNode* node, const char* name, const char* def, char* buf,
                          size_t size) {
  size_t len = 0;
  const char* s = cpu_host->node_attr_string(node, name, &len);
  if (!s) {
    s = def;
    len = strlen(def);
  }
  if (len >= size) len = size - 1;
  memcpy(buf, s, len);
  buf[len] = '\0';
  return buf;
}

bool nnop_attr_is(const OnyxNode* node, const char* name, const char* def, const char* value) {
  char buf[64];
  return strcmp(nnop_attr_str(node, name, def, buf, sizeof buf), value) == 0;
}

OnyxStatus* nnop_node_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  *state = (void*)node;
  return NULL;
}

bool nnop_scalar_d(const OnyxKernelContext* ctx, size_t i, double* out) {
  if (!nnop_has_input(ctx, i)) return false;
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (cpu_host->tensor_elem_count(t) == 0) return false;
  CpuNum v;
  if (!cpu_num_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), 0, &v)) return false;
  *out = cpu_num_as_double(v);
  return true;
}

/* Output 0 with x's shape, for the element-wise normalizations. */
static OnyxStatus* out_like(OnyxKernelContext* ctx, const OnyxTensor* x, OnyxTensor** y) {
  return cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), y);
}

static OnyxStatus* need_rank(const OnyxNode* node, const OnyxTensor* t, const char* what,
                             size_t min_rank) {
  const size_t r = cpu_host->tensor_rank(t);
  if (r < min_rank)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s has rank %zu; at least %zu is required", what,
                     r, min_rank);
  if (r > CPU_MAX_RANK)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "%s has rank %zu; at most %d is supported", what,
                     r, CPU_MAX_RANK);
  return NULL;
}

/* A per-channel parameter (scale, bias) of `want` elements. */
static OnyxStatus* load_param(OnyxKernelContext* ctx, const OnyxNode* node, size_t i,
                              const char* what, size_t want, double** out) {
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (!t) return cpu_error(node, ONYX_INVALID_ARGUMENT, "input %s is missing", what);
  if (cpu_host->tensor_elem_count(t) != want)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s has %zu elements, expected %zu", what,
                     cpu_host->tensor_elem_count(t), want);
  return nnop_load_d(ctx, t, out);
}

/* ======================================================================== */
/* InstanceNormalization, GroupNormalization                                 */
/* ======================================================================== */

/* Group normalization over blocks of `cpg` channels x `inner` values (an
 * instance normalization is one channel per group); statistics in double,
 * data in float (float32, halves) or double, blocks split over the pool. */
typedef struct NormJob {
  const void* x;
  void* y;
  bool f32;
  size_t groups, cpg, inner;
  const double *sc, *b;
  bool per_channel; /* scale/bias per channel, else per group */
  double eps;
} NormJob;

#define DEFINE_NORM_BLOCKS(T)                                                                      \
  static void norm_blocks_##T(void* user, size_t begin, size_t end) {                              \
    const NormJob* j = user;                                                                       \
    const size_t len = j->cpg * j->inner;                                                          \
    for (size_t i = begin; i < end; i++) {                                                         \
      const T* x = (const T*)j->x + i * len;                                                       \
      T* y = (T*)j->y + i * len;                                                                   \
      double mean = 0, var = 0;                                                                    \
      for (size_t k = 0; k < len; k++)                                                             \
        mean += x[k];                                                                              \
      mean /= (double)len;                                                                         \
      for (size_t k = 0; k < len; k++)                                                             \
        var += ((double)x[k] - mean) * ((double)x[k] - mean);                                      \
      const double inv = 1.0 / sqrt(var / (double)len + j->eps);                                   \
      const size_t gi = i % j->groups;                                                             \
      for (size_t ch = 0; ch < j->cpg; ch++) {                                                     \
        const size_t p = j->per_channel ? gi * j->cpg + ch : gi;                                   \
        const double a = inv * j->sc[p], c = j->b[p] - mean * a;                                   \
        const T* xr = x + ch * j->inner;                                                           \
        T* yr = y + ch * j->inner;                                                                 \
        for (size_t k = 0; k < j->inner; k++)                                                      \
          yr[k] = (T)(xr[k] * a + c);                                                              \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_NORM_BLOCKS(float)
DEFINE_NORM_BLOCKS(double)

/* Runs a NormJob (x, y and f32 filled in here) for X of [n, groups*cpg, inner]. */
static OnyxStatus* norm_run(OnyxKernelContext* ctx, const OnyxTensor* x, OnyxTensor* y, size_t n,
                            NormJob* j) {
  const int32_t type = cpu_host->tensor_elem_type(x);
  const size_t total = n * j->groups * j->cpg * j->inner;
  OnyxStatus* st;
  j->f32 = type != ONYX_ELEM_FLOAT64;
  if (total == 0) return NULL;
  if (type == ONYX_ELEM_FLOAT32 || type == ONYX_ELEM_FLOAT64) {
    j->x = cpu_host->tensor_data(x);
    j->y = cpu_host->tensor_mutable_data(y);
  } else {
    float* xf;
    if ((st = nnop_load_f(ctx, x, &xf)) || (st = nnop_scratch(ctx, total * sizeof(float), &j->y)))
      return st;
    j->x = xf;
  }
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), n * j->groups,
                         j->f32 ? norm_blocks_float : norm_blocks_double, j);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64) nnop_store_f(y, j->y, total);
  return NULL;
}

static OnyxStatus* instnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  NormJob j = {.groups = c,
               .cpg = 1,
               .inner = cpu_dims_product(d, 2, r),
               .per_channel = true,
               .eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f)};
  double *sc, *b;
  OnyxTensor* y;
  if ((st = load_param(ctx, node, 1, "scale", c, &sc)) ||
      (st = load_param(ctx, node, 2, "B", c, &b)) || (st = out_like(ctx, x, &y)))
    return st;
  j.sc = sc;
  j.b = b;
  return norm_run(ctx, x, y, n, &j);
}

static OnyxStatus* groupnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const int64_t g = cpu_host->node_attr_int(node, "num_groups", 0);
  if (g < 1 || c % (size_t)g != 0)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "num_groups %lld must be >= 1 and divide the %zu channels", (long long)g, c);
  /* Opset 18: scale and bias per group; opset 21: per channel. */
  const bool per_channel = cpu_host->node_since_version(node) >= 21;
  NormJob j = {.groups = (size_t)g,
               .cpg = c / (size_t)g,
               .inner = cpu_dims_product(d, 2, r),
               .per_channel = per_channel,
               .eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f)};
  const size_t np = per_channel ? c : (size_t)g;
  double *sc, *b;
  OnyxTensor* y;
  if ((st = load_param(ctx, node, 1, "scale", np, &sc)) ||
      (st = load_param(ctx, node, 2, "bias", np, &b)) || (st = out_like(ctx, x, &y)))
    return st;
  j.sc = sc;
  j.b = b;
  return norm_run(ctx, x, y, n, &j);
}

/* ======================================================================== */
/* RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN         */
/* ======================================================================== */

static OnyxStatus* rmsnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* sct = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = need_rank(node, x, "input X", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t axis;
  const int64_t a = cpu_host->node_attr_int(node, "axis", -1);
  if (!cpu_norm_axis(a, r, false, &axis))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)a, r);
  const double eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  /* scale broadcasts to the normalized dims d[axis:]. */
  const size_t nr = r - axis, sr = cpu_host->tensor_rank(sct);
  const int64_t* sd = cpu_host->tensor_dims(sct);
  if (sr > nr)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "scale has rank %zu; it must broadcast to the %zu normalized dims", sr, nr);
  int64_t sstride[CPU_MAX_RANK];
  int64_t acc = 1;
  for (size_t k = nr; k-- > 0;) {
    const size_t si = k + sr >= nr ? k + sr - nr : SIZE_MAX;
    const int64_t sdim = si == SIZE_MAX ? 1 : sd[si];
    if (sdim != 1 && sdim != d[axis + k])
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "scale dim %zu is %lld; it does not broadcast to input dim %zu (%lld)", si,
                       (long long)sdim, axis + k, (long long)d[axis + k]);
    sstride[k] = sdim == 1 ? 0 : acc;
    acc *= sdim;
  }
  const size_t outer = cpu_dims_product(d, 0, axis), inner = cpu_dims_product(d, axis, r);
  double *xv, *sv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_load_d(ctx, sct, &sv)) ||
      (st = nnop_scratch(ctx, outer * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t o = 0; o < outer; o++) {
    const double* xr = xv + o * inner;
    double ss = 0;
    for (size_t i = 0; i < inner; i++)
      ss += xr[i] * xr[i];
    const double inv = 1.0 / sqrt(ss / (double)inner + eps);
    for (size_t i = 0; i < inner; i++) {
      size_t rem = i, soff = 0;
      for (size_t k = nr; k-- > 0;) {
        soff += (rem % (size_t)d[axis + k]) * (size_t)sstride[k];
        rem /= (size_t)d[axis + k];
      }
      yv[o * inner + i] = xr[i] * inv * sv[soff];
    }
  }
  nnop_store_d(y, yv, outer * inner);
  return NULL;
}

static OnyxStatus* lpnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t axis;
  const int64_t a = cpu_host->node_attr_int(node, "axis", -1);
  const int64_t p = cpu_host->node_attr_int(node, "p", 2);
  if (!cpu_norm_axis(a, r, false, &axis))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)a, r);
  if (p != 1 && p != 2)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "p must be 1 or 2, got %lld", (long long)p);
  const size_t outer = cpu_dims_product(d, 0, axis), n = (size_t)d[axis];
  const size_t inner = cpu_dims_product(d, axis + 1, r);
  double *xv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, outer * n * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      const size_t base = o * n * inner + i;
      double norm = 0;
      for (size_t k = 0; k < n; k++) {
        const double v = xv[base + k * inner];
        norm += p == 1 ? fabs(v) : v * v;
      }
      if (p == 2) norm = sqrt(norm);
      for (size_t k = 0; k < n; k++)
        yv[base + k * inner] = norm == 0 ? 0 : xv[base + k * inner] / norm;
    }
  nnop_store_d(y, yv, outer * n * inner);
  return NULL;
}

static OnyxStatus* mvn_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input X", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t na = 0;
  const int64_t* axes = cpu_host->node_attr_ints(node, "axes", &na);
  static const int64_t def_axes[] = {0, 2, 3};
  if (!axes) {
    axes = def_axes;
    na = 3;
  }
  bool mark[CPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    size_t ax;
    if (!cpu_norm_axis(axes[i], r, false, &ax))
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                       (long long)axes[i], r);
    mark[ax] = true;
  }
  const size_t total = cpu_dims_product(d, 0, r);
  double *xv, *yv, *mean, *sq;
  size_t kept = 1, red = 1;
  for (size_t k = 0; k < r; k++)
    *(mark[k] ? &red : &kept) *= (size_t)d[k];
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)) ||
      (st = nnop_scratch(ctx, kept * sizeof(double), (void**)&mean)) ||
      (st = nnop_scratch(ctx, kept * sizeof(double), (void**)&sq)))
    return st;
  if (total == 0) return NULL;
  /* Index of each element among the kept (not reduced) positions. */
  memset(mean, 0, kept * sizeof(double));
  memset(sq, 0, kept * sizeof(double));
  size_t* key;
  if ((st = nnop_scratch(ctx, total * sizeof(size_t), (void**)&key))) return st;
  for (size_t i = 0; i < total; i++) {
    size_t rem = i, k = 0, mul = 1;
    for (size_t a = r; a-- > 0;) {
      const size_t c = rem % (size_t)d[a];
      rem /= (size_t)d[a];
      if (!mark[a]) {
        k += c * mul;
        mul *= (size_t)d[a];
      }
    }
    key[i] = k;
    mean[k] += xv[i];
    sq[k] += xv[i] * xv[i];
  }
  for (size_t k = 0; k < kept; k++) {
    mean[k] /= (double)red;
    const double var = sq[k] / (double)red - mean[k] * mean[k];
    sq[k] = sqrt(var > 0 ? var : 0) + 1e-9;
  }
  for (size_t i = 0; i < total; i++)
    yv[i] = (xv[i] - mean[key[i]]) / sq[key[i]];
  nnop_store_d(y, yv, total);
  return NULL;
}

static OnyxStatus* lrn_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const size_t inner = cpu_dims_product(d, 2, r);
  const int64_t size = cpu_host->node_attr_int(node, "size", 0);
  const double alpha = cpu_host->node_attr_float(node, "alpha", 1e-4f);
  const double beta = cpu_host->node_attr_float(node, "beta", 0.75f);
  const double bias = cpu_host->node_attr_float(node, "bias", 1.0f);
  if (size < 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "size must be >= 1, got %lld", (long long)size);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  double *xv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, n * c * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < (int64_t)c; ch++)
      for (size_t i = 0; i < inner; i++) {
        double ss = 0;
        /* The window clipped to the channels, without forming ch - lo or
         * ch + hi (size may be as large as int64 holds). */
        const int64_t k0 = lo > ch ? 0 : ch - lo;
        const int64_t k1 = hi > (int64_t)c - 1 - ch ? (int64_t)c - 1 : ch + hi;
        for (int64_t k = k0; k <= k1; k++) {
          const double v = xv[(b * c + (size_t)k) * inner + i];
          ss += v * v;
        }
        const size_t at = (b * c + (size_t)ch) * inner + i;
        yv[at] = xv[at] / pow(bias + alpha / (double)size * ss, beta);
      }
  nnop_store_d(y, yv, n * c * inner);
  return NULL;
}

/* ======================================================================== */
/* LpPool, GlobalMaxPool, GlobalLpPool                                       */
/* ======================================================================== */

/* p of LpPool / GlobalLpPool: a float attribute in opset 1, an int after. */
static double read_p(const OnyxNode* node) {
  if (cpu_host->node_attr_type(node, "p") == ONYX_ATTR_FLOAT)
    return cpu_host->node_attr_float(node, "p", 2.0f);
  return (double)cpu_host->node_attr_int(node, "p", 2);
}

/* Geometry of a sliding window over `n` spatial dims. */
typedef struct Win {
  size_t n;
  int64_t in[MAX_SP], k[MAX_SP], s[MAX_SP], d[MAX_SP], pb[MAX_SP], pe[MAX_SP], out[MAX_SP];
} Win;

static OnyxStatus* attr_list(const OnyxNode* node, const char* name, size_t want, int64_t def,
                             int64_t min, int64_t* out) {
  size_t cnt = 0;
  const int64_t* v = cpu_host->node_attr_ints(node, name, &cnt);
  if (v && cnt != want)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute %s has %zu values, expected %zu", name,
                     cnt, want);
  for (size_t i = 0; i < want; i++) {
    out[i] = v ? v[i] : def;
    if (out[i] < min)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld < %lld", name, i,
                       (long long)out[i], (long long)min);
    if (out[i] > ((int64_t)1 << 31))
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld is too large", name,
                       i, (long long)out[i]);
  }
  return NULL;
}

/* Reads kernel_shape, strides, dilations, pads, auto_pad and ceil_mode of a
 * pooling node for input spatial dims `in`. */
static OnyxStatus* win_init(const OnyxNode* node, const int64_t* in, size_t n, Win* w) {
  OnyxStatus* st;
  if (n == 0 || n > MAX_SP)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "input has %zu spatial dims; 1..%d supported", n,
                     MAX_SP);
  size_t nk = 0;
  cpu_host->node_attr_ints(node, "kernel_shape", &nk);
  if (nk != n)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape has %zu values; the input has %zu spatial dims", nk, n);
  int64_t pads[2 * MAX_SP];
  w->n = n;
  if ((st = attr_list(node, "kernel_shape", n, 1, 1, w->k)) ||
      (st = attr_list(node, "strides", n, 1, 1, w->s)) ||
      (st = attr_list(node, "dilations", n, 1, 1, w->d)) ||
      (st = attr_list(node, "pads", 2 * n, 0, 0, pads)))
    return st;
  char ap[32];
  nnop_attr_str(node, "auto_pad", "NOTSET", ap, sizeof ap);
  const int ceil_mode = cpu_host->node_attr_int(node, "ceil_mode", 0) != 0;
  for (size_t i = 0; i < n; i++) {
    w->in[i] = in[i];
    /* kernel, strides, dilations and pads are at most 2^31 (attr_list), so
     * eff fits; a run-time dim near INT64_MAX (an empty batch) may not */
    const int64_t eff = (w->k[i] - 1) * w->d[i] + 1;
    int64_t padded;
    if (in[i] < 0 || !cpu_add3_i64(in[i], 2 * ((int64_t)1 << 31), eff, &padded))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: integer overflow: input %lld with the window and pads", i,
                       (long long)in[i]);
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
      w->out[i] = in[i] / w->s[i] + (in[i] % w->s[i] != 0);
      int64_t total = (w->out[i] > 0 ? w->out[i] - 1 : 0) * w->s[i] + eff - in[i];
      if (total < 0) total = 0;
      w->pb[i] = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
      w->pe[i] = total - w->pb[i];
      continue;
    }
    if (!strcmp(ap, "VALID")) {
      w->pb[i] = w->pe[i] = 0;
    } else if (!strcmp(ap, "NOTSET") || ap[0] == '\0') {
      w->pb[i] = pads[i];
      w->pe[i] = pads[i + n];
    } else {
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
    }
    const int64_t span = in[i] + w->pb[i] + w->pe[i] - eff;
    if (span < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: the window (extent %lld) is larger than the padded "
                       "input (%lld)",
                       i, (long long)eff, (long long)(in[i] + w->pb[i] + w->pe[i]));
    w->out[i] = span / w->s[i] + (ceil_mode && span % w->s[i] != 0) + 1;
    if (ceil_mode && (w->out[i] - 1) * w->s[i] >= in[i] + w->pb[i]) w->out[i]--;
  }
  return NULL;
}

static OnyxStatus* lppool_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(node, x, "input X", 3);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), ns = r - 2;
  Win w;
  if ((st = win_init(node, d + 2, ns, &w))) return st;
  const double p = read_p(node);
  if (!(p > 0)) return cpu_error(node, ONYX_INVALID_ARGUMENT, "p must be positive, got %g", p);
  int64_t od[CPU_MAX_RANK] = {d[0], d[1]};
  size_t in_sz = 1, out_sz = 1, k_sz = 1;
  for (size_t i = 0; i < ns; i++) {
    od[2 + i] = w.out[i];
    if (!cpu_mul_size(in_sz, (size_t)w.in[i], &in_sz) ||
        !cpu_mul_size(out_sz, (size_t)w.out[i], &out_sz) ||
        !cpu_mul_size(k_sz, (size_t)w.k[i], &k_sz))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "integer overflow: the spatial sizes do not fit in size_t");
  }
  const size_t planes = (size_t)d[0] * (size_t)d[1];
  OnyxTensor* y;
  double *xv, *yv;
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, planes * out_sz * sizeof(double), (void**)&yv)))
    return st;
  for (size_t pl = 0; pl < planes; pl++)
    for (size_t o = 0; o < out_sz; o++) {
      int64_t oc[MAX_SP], kc[MAX_SP];
      size_t rem = o;
      for (size_t i = ns; i-- > 0;) {
        oc[i] = (int64_t)(rem % (size_t)w.out[i]);
        rem /= (size_t)w.out[i];
      }
      double acc = 0;
      for (size_t kk = 0; kk < k_sz; kk++) {
        /* kernel_shape sets the window's size: a long one can be stopped */
        if ((kk & (CPU_STOP_INTERVAL - 1)) == CPU_STOP_INTERVAL - 1 && cpu_should_stop(ctx))
          return cpu_cancelled(ctx, "LpPool");
        size_t rk = kk, off = 0;
        bool inside = true;
        for (size_t i = ns; i-- > 0;) {
          kc[i] = (int64_t)(rk % (size_t)w.k[i]);
          rk /= (size_t)w.k[i];
        }
        for (size_t i = 0; i < ns && inside; i++) {
          const int64_t pos = oc[i] * w.s[i] - w.pb[i] + kc[i] * w.d[i];
          if (pos < 0 || pos >= w.in[i]) inside = false;
          off = off * (size_t)w.in[i] + (size_t)(inside ? pos : 0);
        }
        if (inside) acc += pow(fabs(xv[pl * in_sz + off]), p);
      }
      yv[pl * out_sz + o] = pow(acc, 1.0 / p);
    }
  nnop_store_d(y, yv, planes * out_sz);
  return NULL;
}

static const int GLOBAL_MAX = 0, GLOBAL_LP = 1;

typedef struct GlobalState {
  const OnyxNode* node;
  int kind;
} GlobalState;

static OnyxStatus* global_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  GlobalState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->kind = *(const int*)user_data;
  *state = s;
  return NULL;
}

static OnyxStatus* global_compute(void* state, OnyxKernelContext* ctx) {
  const GlobalState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = need_rank(s->node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  int64_t od[CPU_MAX_RANK];
  for (size_t i = 0; i < r; i++)
    od[i] = i < 2 ? d[i] : 1;
  const size_t planes = (size_t)d[0] * (size_t)d[1], inner = cpu_dims_product(d, 2, r);
  const double p = read_p(s->node);
  if (!(p > 0)) return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "p must be positive, got %g", p);
  if (inner == 0 && s->kind == GLOBAL_MAX && planes > 0)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "the input's spatial size is 0");
  OnyxTensor* y;
  double *xv, *yv;
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, planes * sizeof(double), (void**)&yv)))
    return st;
  for (size_t pl = 0; pl < planes; pl++) {
    const double* v = xv + pl * inner;
    double acc = s->kind == GLOBAL_MAX ? -INFINITY : 0;
    for (size_t i = 0; i < inner; i++)
      if (s->kind == GLOBAL_MAX)
        acc = v[i] > acc || isnan(v[i]) ? v[i] : acc;
      else
        acc += pow(fabs(v[i]), p);
    yv[pl] = s->kind == GLOBAL_MAX ? acc : pow(acc, 1.0 / p);
  }
  nnop_store_d(y, yv, planes);
  return NULL;
}

/* ======================================================================== */
/* MaxUnpool, MaxRoiPool                                                     */
/* ======================================================================== */

static OnyxStatus* maxunpool_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* idx = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = need_rank(node, x, "input X", 3);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), ns = r - 2;
  if (ns > MAX_SP)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "at most %d spatial dims are supported", MAX_SP);
  if (cpu_host->tensor_elem_count(idx) != cpu_host->tensor_elem_count(x))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "I has %zu elements; X has %zu",
                     cpu_host->tensor_elem_count(idx), cpu_host->tensor_elem_count(x));
  int64_t k[MAX_SP], s[MAX_SP], pads[2 * MAX_SP], od[CPU_MAX_RANK];
  size_t nk = 0;
  cpu_host->node_attr_ints(node, "kernel_shape", &nk);
  if (nk != ns)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape has %zu values; the input has %zu spatial dims", nk, ns);
  if ((st = attr_list(node, "kernel_shape", ns, 1, 1, k)) ||
      (st = attr_list(node, "strides", ns, 1, 1, s)) ||
      (st = attr_list(node, "pads", 2 * ns, 0, 0, pads)))
    return st;
  od[0] = d[0];
  od[1] = d[1];
  for (size_t i = 0; i < ns; i++) {
    /* k, s, pads are at most 2^31 (attr_list); X's dims may be anything */
    int64_t t;
    if (!cpu_mul_i64(d[2 + i] - 1, s[i], &t) || !cpu_add_i64(t, k[i], &t) ||
        !cpu_sub_i64(t, pads[i] + pads[i + ns], &od[2 + i]))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: integer overflow: X's dim %lld times strides[%zu] = %lld",
                       i, (long long)d[2 + i], i, (long long)s[i]);
  }
  for (size_t i = 0; i < r; i++)
    if (od[i] < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "output dim %zu would be negative", i);
  int64_t dflt[CPU_MAX_RANK];
  memcpy(dflt, od, r * sizeof *od);
  size_t dflt_total;
  if (!cpu_dims_count(dflt, r, &dflt_total))
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "integer overflow: the unpooled size does not fit in size_t");
  if (nnop_has_input(ctx, 2)) {
    int64_t shp[CPU_MAX_RANK];
    size_t cnt = 0;
    if ((st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 2), "output_shape", shp, CPU_MAX_RANK,
                            &cnt)))
      return st;
    if (cnt != r)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "output_shape has %zu values; X has rank %zu",
                       cnt, r);
    for (size_t i = 0; i < r; i++) {
      if (shp[i] < (i < 2 ? d[i] : od[i]) || (i < 2 && shp[i] != d[i]))
        return cpu_error(node, ONYX_INVALID_ARGUMENT,
                         "output_shape[%zu] = %lld is smaller than the unpooled size %lld", i,
                         (long long)shp[i], (long long)(i < 2 ? d[i] : od[i]));
      od[i] = shp[i];
    }
  }
  OnyxTensor* y;
  double *xv, *yv;
  const size_t total = cpu_dims_product(od, 0, r), n = cpu_host->tensor_elem_count(x);
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)))
    return st;
  memset(yv, 0, total * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    cpu_num_load(cpu_host->tensor_elem_type(idx), cpu_host->tensor_data(idx), i, &v);
    const int64_t j = v.v.i;
    /* Indices are flat positions in MaxPool's input, whose shape is the
     * default unpooled one (dflt); a larger output_shape keeps coordinates. */
    if (j < 0 || (size_t)j >= dflt_total)
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "index %lld in I is outside the unpooled tensor (%zu elements)",
                       (long long)j, dflt_total);
    size_t rem = (size_t)j, at = 0, mul = 1;
    for (size_t a = r; a-- > 0;) {
      at += (rem % (size_t)dflt[a]) * mul;
      rem /= (size_t)dflt[a];
      mul *= (size_t)od[a];
    }
    yv[at] = xv[i];
  }
  nnop_store_d(y, yv, total);
  return NULL;
}

static OnyxStatus* maxroipool_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* rois = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = need_rank(node, x, "input X", 4);
  if (st) return st;
  if (cpu_host->tensor_rank(x) != 4 || cpu_host->tensor_rank(rois) != 2 ||
      cpu_host->tensor_dims(rois)[1] != 5)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "X must be [N,C,H,W] and rois [num_rois,5]; got ranks %zu and %zu",
                     cpu_host->tensor_rank(x), cpu_host->tensor_rank(rois));
  size_t np = 0;
  const int64_t* ps = cpu_host->node_attr_ints(node, "pooled_shape", &np);
  if (!ps || np != 2 || ps[0] < 1 || ps[1] < 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "pooled_shape must be two positive values");
  const double scale = cpu_host->node_attr_float(node, "spatial_scale", 1.0f);
  const int64_t* d = cpu_host->tensor_dims(x);
  const int64_t nr = cpu_host->tensor_dims(rois)[0], c = d[1], h = d[2], wd = d[3];
  const int64_t ph = ps[0], pw = ps[1];
  int64_t od[4] = {nr, c, ph, pw};
  OnyxTensor* y;
  double *xv, *rv, *yv;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 4, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_load_d(ctx, rois, &rv)) ||
      (st = nnop_scratch(ctx, (size_t)(nr * c * ph * pw) * sizeof(double), (void**)&yv)))
    return st;
  for (int64_t n = 0; n < nr; n++) {
    const double* roi = rv + n * 5;
    int64_t b;
    if (!cpu_double_to_i64(roi[0], &b) || b < 0 || b >= d[0])
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "roi %lld has batch index %g of %lld",
                       (long long)n, roi[0], (long long)d[0]);
    for (int k = 1; k < 5; k++)
      if (!(fabs(roi[k] * scale) < 1e15))
        return cpu_error(node, ONYX_INVALID_ARGUMENT,
                         "roi %lld has a non-finite or huge coordinate", (long long)n);
    const int64_t x1 = (int64_t)round(roi[1] * scale), y1 = (int64_t)round(roi[2] * scale);
    const int64_t x2 = (int64_t)round(roi[3] * scale), y2 = (int64_t)round(roi[4] * scale);
    const int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1, rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
    const double bh = (double)rh / (double)ph, bw = (double)rw / (double)pw;
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t i = 0; i < ph; i++)
        for (int64_t j = 0; j < pw; j++) {
          int64_t hs = (int64_t)floor((double)i * bh) + y1,
                  he = (int64_t)ceil((double)(i + 1) * bh) + y1;
          int64_t ws = (int64_t)floor((double)j * bw) + x1,
                  we = (int64_t)ceil((double)(j + 1) * bw) + x1;
          hs = hs < 0 ? 0 : (hs > h ? h : hs);
          he = he < 0 ? 0 : (he > h ? h : he);
          ws = ws < 0 ? 0 : (ws > wd ? wd : ws);
          we = we < 0 ? 0 : (we > wd ? wd : we);
          double m = -INFINITY;
          bool any = false;
          for (int64_t yy = hs; yy < he; yy++)
            for (int64_t xx = ws; xx < we; xx++) {
              const double v = xv[((b * c + ch) * h + yy) * wd + xx];
              if (!any || v > m) m = v;
              any = true;
            }
          yv[((n * c + ch) * ph + i) * pw + j] = any ? m : 0;
        }
  }
  nnop_store_d(y, yv, (size_t)(nr * c * ph * pw));
  return NULL;
}

/* ======================================================================== */
/* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss                        */
/* ======================================================================== */

typedef enum Reduction { RED_NONE, RED_SUM, RED_MEAN } Reduction;

typedef struct LossState {
  const OnyxNode* node;
  Reduction reduction;
  bool has_ignore;
  int64_t ignore_index;
  bool softmax; /* SoftmaxCrossEntropyLoss */
} LossState;

static OnyxStatus* loss_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  char red[32];
  nnop_attr_str(node, "reduction", "mean", red, sizeof red);
  Reduction rd;
  if (!strcmp(red, "none"))
    rd = RED_NONE;
  else if (!strcmp(red, "sum"))
    rd = RED_SUM;
  else if (!strcmp(red, "mean"))
    rd = RED_MEAN;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown reduction '%s'", red);
  LossState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->reduction = rd;
  s->has_ignore = cpu_host->node_attr_type(node, "ignore_index") != ONYX_ATTR_UNDEFINED;
  s->ignore_index = cpu_host->node_attr_int(node, "ignore_index", 0);
  s->softmax = user_data != NULL;
  *state = s;
  return NULL;
}

static OnyxStatus* loss_compute(void* state, OnyxKernelContext* ctx) {
  const LossState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* t = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = need_rank(s->node, x, s->softmax ? "scores" : "input", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const size_t inner = cpu_dims_product(d, 2, r);
  const int64_t* td = cpu_host->tensor_dims(t);
  bool ok = cpu_host->tensor_rank(t) == r - 1 && td[0] == d[0];
  for (size_t i = 2; ok && i < r; i++)
    ok = td[i - 1] == d[i];
  if (!ok)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "the target's shape must be the input's without dim 1 (C)");
  double *xv, *w = NULL;
  if ((st = nnop_load_d(ctx, x, &xv))) return st;
  if (nnop_has_input(ctx, 2) && (st = load_param(ctx, s->node, 2, "weight", c, &w))) return st;
  const size_t total = n * c * inner, cnt = n * inner;
  if (s->softmax) /* log-softmax along dim 1, in place */
    for (size_t b = 0; b < n; b++)
      for (size_t i = 0; i < inner; i++) {
        double* v = xv + b * c * inner + i;
        double mx = -INFINITY, sum = 0;
        for (size_t k = 0; k < c; k++)
          mx = v[k * inner] > mx ? v[k * inner] : mx;
        for (size_t k = 0; k < c; k++)
          sum += exp(v[k * inner] - mx);
        const double lse = mx + log(sum);
        for (size_t k = 0; k < c; k++)
          v[k * inner] -= lse;
      }
  double *loss, *wt;
  if ((st = nnop_scratch(ctx, cnt * sizeof(double), (void**)&loss)) ||
      (st = nnop_scratch(ctx, cnt * sizeof(double), (void**)&wt)))
    return st;
  const int32_t tt = cpu_host->tensor_elem_type(t);
  const void* tdata = cpu_host->tensor_data(t);
  double loss_sum = 0, w_sum = 0;
  for (size_t b = 0; b < n; b++)
    for (size_t i = 0; i < inner; i++) {
      const size_t at = b * inner + i;
      const int64_t cls =
          tt == ONYX_ELEM_INT32 ? ((const int32_t*)tdata)[at] : ((const int64_t*)tdata)[at];
      if (s->has_ignore && cls == s->ignore_index) {
        loss[at] = 0;
        wt[at] = 0;
        continue;
      }
      if (cls < 0 || (size_t)cls >= c)
        return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                         "target value %lld is outside the class range [0, %zu)", (long long)cls,
                         c);
      wt[at] = w ? w[cls] : 1.0;
      loss[at] = -xv[(b * c + (size_t)cls) * inner + i] * wt[at];
      loss_sum += loss[at];
      w_sum += wt[at];
    }
  OnyxTensor* y;
  if (s->reduction == RED_NONE) {
    if ((st = cpu_host->ctx_output(ctx, 0, td, r - 1, &y))) return st;
    nnop_store_d(y, loss, cnt);
  } else {
    if ((st = cpu_host->ctx_output(ctx, 0, NULL, 0, &y))) return st;
    double v = s->reduction == RED_SUM ? loss_sum : loss_sum / w_sum;
    nnop_store_d(y, &v, 1);
  }
  if (s->softmax && nnop_has_output(s->node, 1)) {
    OnyxTensor* lp;
    if ((st = cpu_host->ctx_output(ctx, 1, d, r, &lp))) return st;
    nnop_store_d(lp, xv, total);
  }
  return NULL;
}

/* ======================================================================== */
/* NonMaxSuppression                                                         */
/* ======================================================================== */

typedef struct NmsCand {
  double score;
  int64_t index;
} NmsCand;

static int nms_cmp(const void* a, const void* b) {
  const NmsCand *x = a, *y = b;
  /* A total order: NaN scores sort last. */
  const bool xn = isnan(x->score), yn = isnan(y->score);
  if (xn != yn) return xn ? 1 : -1;
  if (!xn && x->score != y->score) return x->score > y->score ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Box as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2. */
static void nms_box(const double* b, bool center, double* o) {
  if (center) {
    o[0] = b[1] - b[3] / 2;
    o[1] = b[0] - b[2] / 2;
    o[2] = b[1] + b[3] / 2;
    o[3] = b[0] + b[2] / 2;
  } else {
    o[0] = fmin(b[0], b[2]);
    o[1] = fmin(b[1], b[3]);
    o[2] = fmax(b[0], b[2]);
    o[3] = fmax(b[1], b[3]);
  }
}

static double nms_iou(const double* a, const double* b) {
  const double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]);
  const double iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0;
}

static OnyxStatus* nms_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* bt = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* stt = cpu_host->ctx_input(ctx, 1);
  if (cpu_host->tensor_rank(bt) != 3 || cpu_host->tensor_dims(bt)[2] != 4)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "boxes must be [num_batches, spatial_dimension, 4]");
  if (cpu_host->tensor_rank(stt) != 3)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "scores must be [num_batches, num_classes, spatial_dimension]");
  const int64_t* bd = cpu_host->tensor_dims(bt);
  const int64_t* sd = cpu_host->tensor_dims(stt);
  if (sd[0] != bd[0] || sd[2] != bd[1])
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "boxes [%lld,%lld,4] and scores [%lld,%lld,%lld] disagree", (long long)bd[0],
                     (long long)bd[1], (long long)sd[0], (long long)sd[1], (long long)sd[2]);
  const size_t nb = (size_t)bd[0], ns = (size_t)bd[1], nc = (size_t)sd[1];
  double mx = 0, iou_th = 0, score_th = 0;
  if (nnop_scalar_d(ctx, 2, &mx) && mx < 0) mx = 0;
  nnop_scalar_d(ctx, 3, &iou_th);
  const bool has_score_th = nnop_scalar_d(ctx, 4, &score_th);
  const int64_t cpb = cpu_host->node_attr_int(node, "center_point_box", 0);
  if (cpb != 0 && cpb != 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "center_point_box must be 0 or 1, got %lld",
                     (long long)cpb);
  const size_t max_out = mx > (double)ns ? ns : (size_t)mx;
  OnyxStatus* st;
  double *bv, *sv, *boxes;
  NmsCand* cand;
  size_t* keep;
  int64_t* sel;
  const size_t cap = nb * nc * max_out;
  if ((st = nnop_load_d(ctx, bt, &bv)) || (st = nnop_load_d(ctx, stt, &sv)) ||
      (st = nnop_scratch(ctx, ns * 4 * sizeof(double), (void**)&boxes)) ||
      (st = nnop_scratch(ctx, ns * sizeof(NmsCand), (void**)&cand)) ||
      (st = nnop_scratch(ctx, ns * sizeof(size_t), (void**)&keep)) ||
      (st = nnop_scratch(ctx, cap * 3 * sizeof(int64_t), (void**)&sel)))
    return st;
  size_t count = 0;
  /* up to ns^2 overlap tests per class: polled per candidate */
  CpuStop stop = {.ctx = ctx};
  size_t polled = 0;
  for (size_t b = 0; b < nb && max_out > 0; b++) {
    for (size_t i = 0; i < ns; i++)
      nms_box(bv + (b * ns + i) * 4, cpb == 1, boxes + i * 4);
    for (size_t c = 0; c < nc; c++) {
      size_t nk = 0, kept = 0;
      for (size_t i = 0; i < ns; i++) {
        const double sc = sv[(b * nc + c) * ns + i];
        if (has_score_th && !(sc > score_th)) continue;
        cand[nk].score = sc;
        cand[nk++].index = (int64_t)i;
      }
      qsort(cand, nk, sizeof *cand, nms_cmp);
      for (size_t i = 0; i < nk && kept < max_out; i++) {
        if (cpu_stop_poll(&stop, &polled, kept + 1)) return cpu_cancelled(ctx, NULL);
        const double* bx = boxes + cand[i].index * 4;
        bool ok = true;
        for (size_t k = 0; k < kept && ok; k++)
          if (nms_iou(bx, boxes + keep[k] * 4) > iou_th) ok = false;
        if (!ok) continue;
        keep[kept++] = (size_t)cand[i].index;
        sel[count * 3] = (int64_t)b;
        sel[count * 3 + 1] = (int64_t)c;
        sel[count * 3 + 2] = cand[i].index;
        count++;
      }
    }
  }
  const int64_t od[2] = {(int64_t)count, 3};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 2, &y))) return st;
  cpu_memcpy(cpu_host->tensor_mutable_data(y), sel, count * 3 * sizeof(int64_t));
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const int32_t I64[] = {ONYX_ELEM_INT64};
static const int32_t IDX[] = {ONYX_ELEM_INT32, ONYX_ELEM_INT64};
static const OnyxTypeConstraint TC_T[] = {{"T", nnop_types_f, 4}};
static const OnyxTypeConstraint TC_RMS[] = {{"T", nnop_types_f, 4}, {"V", nnop_types_f, 4}};
static const OnyxTypeConstraint TC_UNPOOL[] = {{"T1", nnop_types_f, 4}, {"T2", I64, 1}};
static const OnyxTypeConstraint TC_LOSS[] = {{"T", nnop_types_f, 4}, {"Tind", IDX, 2}};

#define SPEC(op, since, end, tc, cr, comp, rel, ud)                                                \
  { op, since, end, tc, CPU_ARRAY_LEN(tc), cr, comp, rel, (void*)(ud) }
#define NODE_SPEC(op, since, end, tc, comp)                                                        \
  SPEC(op, since, end, tc, nnop_node_create, comp, NULL, NULL)

static const int SCE_FLAG = 1;

OnyxStatus* cpu_register_nn_ops(OnyxKernelRegistry* r) {
  const int32_t latest = ONYX_OPSET_LATEST;
  const CpuKernelSpec specs[] = {
      NODE_SPEC("InstanceNormalization", 1, latest, TC_T, instnorm_compute),
      NODE_SPEC("GroupNormalization", 18, latest, TC_T, groupnorm_compute),
      NODE_SPEC("RMSNormalization", 23, latest, TC_RMS, rmsnorm_compute),
      NODE_SPEC("LpNormalization", 1, latest, TC_T, lpnorm_compute),
      NODE_SPEC("MeanVarianceNormalization", 9, latest, TC_T, mvn_compute),
      NODE_SPEC("LRN", 1, latest, TC_T, lrn_compute),
      NODE_SPEC("LpPool", 1, latest, TC_T, lppool_compute),
      SPEC("GlobalMaxPool", 1, latest, TC_T, global_create, global_compute, cpu_free_state,
           &GLOBAL_MAX),
      SPEC("GlobalLpPool", 1, latest, TC_T, global_create, global_compute, cpu_free_state,
           &GLOBAL_LP),
      NODE_SPEC("MaxUnpool", 9, latest, TC_UNPOOL, maxunpool_compute),
      NODE_SPEC("MaxRoiPool", 1, latest, TC_T, maxroipool_compute),
      SPEC("NegativeLogLikelihoodLoss", 12, latest, TC_LOSS, loss_create, loss_compute,
           cpu_free_state, NULL),
      SPEC("SoftmaxCrossEntropyLoss", 12, latest, TC_LOSS, loss_create, loss_compute,
           cpu_free_state, &SCE_FLAG),
      {"NonMaxSuppression", 10, latest, NULL, 0, nnop_node_create, nms_compute, NULL, NULL},
  };
  OnyxStatus* st = cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
  if (st) return st;
  if ((st = cpu_register_nn_ops_resize(r)) || (st = cpu_register_nn_ops_conv(r))) return st;
  return cpu_register_rnn(r);
}
