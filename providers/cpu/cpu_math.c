/* cpu_math.c — the CPU provider's math kernel family: unary math
 * (trigonometry, rounding, Sign, Reciprocal), activations with attributes
 * (Elu, Selu, Celu, LeakyRelu, HardSigmoid, HardSwish, Softplus, Softsign,
 * ThresholdedRelu, Shrink, Mish, Swish, Gelu), IsNaN/IsInf, Not,
 * BitwiseNot, and the axis ops Hardmax and LogSoftmax.
 *
 * Float activations are written once per op as an expression over `x` and
 * the attribute values a, b, g; float32 and float64 loops come from it, and
 * float16/bfloat16 run the float32 loop over converted blocks. Binary ops
 * (logic, bitwise, comparisons, Mod, PRelu, variadic Max/Min/Sum/Mean) live in
 * cpu_elementwise.c with the shared broadcasting engine; Cast, CastLike and
 * BitCast in cpu_math_cast.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_util.h"
#include "cpu_vmath.h"

/* cpu_math_cast.c */
OnyxStatus* cpu_register_math_cast(OnyxKernelRegistry* r);
double cpu_math_f8_value(int32_t type, uint8_t code); /* float8 types and e8m0 */

/* ========================================================================= */
/* Float unary ops with attributes                                            */
/* ========================================================================= */

typedef struct UParams {
  double a, b, g;
  int mode; /* Gelu: 1 = tanh approximation */
} UParams;

typedef void (*UF32)(const UParams* p, const float* restrict x, float* restrict y, size_t n);
typedef void (*UF64)(const UParams* p, const double* restrict x, double* restrict y, size_t n);

#define UDEF(name, EXPR) UDEF32(name, EXPR) UDEF64(name, EXPR)
#define UDEF32(name, EXPR)                                                                         \
  static void name##_f32(const UParams* p, const float* restrict px, float* restrict y,            \
                         size_t n) {                                                               \
    const float a = (float)p->a, b = (float)p->b, g = (float)p->g;                                 \
    const int mode = p->mode;                                                                      \
    (void)a, (void)b, (void)g, (void)mode;                                                         \
    for (size_t i = 0; i < n; i++) {                                                               \
      const float x = px[i];                                                                       \
      y[i] = (float)(EXPR);                                                                        \
    }                                                                                              \
  }
#define UDEF64(name, EXPR)                                                                         \
  static void name##_f64(const UParams* p, const double* restrict px, double* restrict y,          \
                         size_t n) {                                                               \
    const double a = p->a, b = p->b, g = p->g;                                                     \
    const int mode = p->mode;                                                                      \
    (void)a, (void)b, (void)g, (void)mode;                                                         \
    for (size_t i = 0; i < n; i++) {                                                               \
      const double x = px[i];                                                                      \
      y[i] = (double)(EXPR);                                                                       \
    }                                                                                              \
  }

static inline double softplus_d(double x) {
  /* log(1 + e^x) without overflow for large x. */
  return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static inline double sigmoid_m(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
static inline double gelu_d(double x, int mode) {
  if (mode == 1) {
    const double k = 0.79788456080286535588; /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
  }
  return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}
static inline double clamp01(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

UDEF(acos, acos(x))
UDEF(acosh, acosh(x))
UDEF(asin, asin(x))
UDEF(asinh, asinh(x))
UDEF(atan, atan(x))
UDEF(atanh, atanh(x))
UDEF(cos, cos(x))
UDEF(cosh, cosh(x))
UDEF(sin, sin(x))
UDEF(sinh, sinh(x))
UDEF(tan, tan(x))
UDEF(ceil, ceil(x))
UDEF(floor, floor(x))
UDEF(round, rint(x)) /* half to even under the default rounding mode */
UDEF(reciprocal, 1 / x)
UDEF(leakyrelu, x < 0 ? a * x : x)
/* float32 Elu, Selu, Celu, HardSigmoid, HardSwish, Softplus (Mish below): cpu_vmath.c's
 * vector kernels (the wrappers below); float64 here. */
UDEF64(elu, x < 0 ? a * expm1(x) : x)
UDEF64(selu, x <= 0 ? g * (a * expm1(x)) : g * x)
UDEF64(celu, x != x ? x : (x > 0 ? x : 0) + fmin(0.0, a* expm1(x / a)))
UDEF64(hardsigmoid, clamp01(a* x + b))
UDEF64(hardswish, x* clamp01(x / 6.0 + 0.5))
UDEF64(softplus, softplus_d(x))
static void hardsigmoid_f32(const UParams* p, const float* restrict x, float* restrict y,
                            size_t n) {
  cpu_hardsigmoid_f32(x, y, n, (float)p->a, (float)p->b);
}
static void hardswish_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  (void)p;
  cpu_hardswish_f32(x, y, n);
}
static void softplus_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  (void)p;
  cpu_softplus_f32(x, y, n);
}
static void elu_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  cpu_elu_f32(x, y, n, (float)p->a);
}
static void selu_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  cpu_selu_f32(x, y, n, (float)p->a, (float)p->g);
}
static void celu_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  cpu_celu_f32(x, y, n, (float)p->a);
}
UDEF(softsign, x / (1 + fabs((double)x)))
UDEF(thresholdedrelu, x > a ? x : 0)
UDEF(shrink, x<-a ? x + b : x> a ? x - b : 0)
UDEF64(mish, x* tanh(softplus_d(x)))
static void mish_f32(const UParams* p, const float* restrict x, float* restrict y, size_t n) {
  (void)p;
  cpu_mish_f32(x, y, n); /* cpu_vmath.c */
}
UDEF(swish, x* sigmoid_m(a*(double)x))
UDEF(gelu, gelu_d(x, mode))

/* An op: loops, the kernel's first version, and up to three float
 * attributes read into a, b, g (name NULL: unused) with their defaults. */
typedef struct FUnOp {
  const char* name;
  int32_t since;
  UF32 f32;
  UF64 f64;
  const char* attr[3];
  float def[3];
} FUnOp;

#define FOP(op, since, fn)                                                                         \
  {                                                                                                \
    op, since, fn##_f32, fn##_f64, {NULL, NULL, NULL}, {                                           \
      0, 0, 0                                                                                      \
    }                                                                                              \
  }
#define FOPA(op, since, fn, a0, d0, a1, d1, a2, d2)                                                \
  {                                                                                                \
    op, since, fn##_f32, fn##_f64, {a0, a1, a2}, {                                                 \
      d0, d1, d2                                                                                   \
    }                                                                                              \
  }

static const FUnOp fun_ops[] = {
    FOP("Acos", 7, acos),
    FOP("Acosh", 9, acosh),
    FOP("Asin", 7, asin),
    FOP("Asinh", 9, asinh),
    FOP("Atan", 7, atan),
    FOP("Atanh", 9, atanh),
    FOP("Cos", 7, cos),
    FOP("Cosh", 9, cosh),
    FOP("Sin", 7, sin),
    FOP("Sinh", 9, sinh),
    FOP("Tan", 7, tan),
    FOP("Ceil", 1, ceil),
    FOP("Floor", 1, floor),
    FOP("Round", 11, round),
    FOP("Reciprocal", 1, reciprocal),
    FOPA("Elu", 1, elu, "alpha", 1.0f, NULL, 0, NULL, 0),
    FOPA("Selu", 1, selu, "alpha", 1.67326319217681884765625f, NULL, 0, "gamma",
         1.05070102214813232421875f),
    FOPA("Celu", 12, celu, "alpha", 1.0f, NULL, 0, NULL, 0),
    FOPA("LeakyRelu", 1, leakyrelu, "alpha", 0.01f, NULL, 0, NULL, 0),
    FOPA("HardSigmoid", 1, hardsigmoid, "alpha", 0.2f, "beta", 0.5f, NULL, 0),
    FOP("HardSwish", 14, hardswish),
    FOP("Softplus", 1, softplus),
    FOP("Softsign", 1, softsign),
    FOPA("ThresholdedRelu", 10, thresholdedrelu, "alpha", 1.0f, NULL, 0, NULL, 0),
    FOPA("Shrink", 9, shrink, "lambd", 0.5f, "bias", 0.0f, NULL, 0),
    FOP("Mish", 18, mish),
    FOPA("Swish", 24, swish, "alpha", 1.0f, NULL, 0, NULL, 0),
    FOP("Gelu", 20, gelu),
};

typedef struct FUnState {
  const FUnOp* op;
  UParams p;
} FUnState;

static OnyxStatus* fun_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  const FUnOp* op = user;
  FUnState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->op = op;
  double* dst[3] = {&s->p.a, &s->p.b, &s->p.g};
  for (int k = 0; k < 3; k++)
    *dst[k] = op->attr[k] ? cpu_host->node_attr_float(node, op->attr[k], op->def[k]) : 0.0;
  if (op->f32 == gelu_f32) {
    size_t len = 0;
    const char* ap = cpu_host->node_attr_string(node, "approximate", &len);
    if (ap && len == 4 && memcmp(ap, "tanh", 4) == 0) {
      s->p.mode = 1;
    } else if (ap && !(len == 4 && memcmp(ap, "none", 4) == 0)) {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL,
                       "attribute 'approximate' must be 'none' or 'tanh', is '%.*s'", (int)len, ap);
    }
  }
  if (op->f32 == celu_f32 && s->p.a == 0) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "attribute 'alpha' must not be 0");
  }
  *state = s;
  return NULL;
}

/* Half types: convert blocks to float, run the float32 loop, round back. */
#define HALF_BLOCK 256

typedef struct FUnJob {
  const FUnState* s;
  int32_t type;
  const void* x;
  void* y;
} FUnJob;

static void fun_range(const FUnJob* j, size_t begin, size_t end) {
  const UParams* p = &j->s->p;
  switch (j->type) {
  case ONYX_ELEM_FLOAT32:
    j->s->op->f32(p, (const float*)j->x + begin, (float*)j->y + begin, end - begin);
    return;
  case ONYX_ELEM_FLOAT64:
    j->s->op->f64(p, (const double*)j->x + begin, (double*)j->y + begin, end - begin);
    return;
  default: {
    bool bf = j->type == ONYX_ELEM_BFLOAT16;
    const uint16_t* x = j->x;
    uint16_t* y = j->y;
    float in[HALF_BLOCK], out[HALF_BLOCK];
    for (size_t i = begin; i < end; i += HALF_BLOCK) {
      size_t m = end - i < HALF_BLOCK ? end - i : HALF_BLOCK;
      for (size_t k = 0; k < m; k++)
        in[k] = bf ? cpu_bf16_to_f32(x[i + k]) : cpu_f16_to_f32(x[i + k]);
      j->s->op->f32(p, in, out, m);
      for (size_t k = 0; k < m; k++)
        y[i + k] = bf ? cpu_f32_to_bf16(out[k]) : cpu_f32_to_f16(out[k]);
    }
  }
  }
}

/* Work items of the thread pool: blocks of this many elements. */
#define PAR_BLOCK 16384

typedef struct FUnTaskJob {
  FUnJob job;
  size_t n;
} FUnTaskJob;

static void fun_task_clamped(void* user, size_t begin, size_t end) {
  const FUnTaskJob* t = user;
  for (size_t b = begin; b < end; b++) {
    size_t lo = b * PAR_BLOCK, hi = lo + PAR_BLOCK < t->n ? lo + PAR_BLOCK : t->n;
    fun_range(&t->job, lo, hi);
  }
}

static OnyxStatus* fun_compute(void* state, OnyxKernelContext* ctx) {
  const FUnState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t type = cpu_host->tensor_elem_type(x);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64 && type != ONYX_ELEM_FLOAT16 &&
      type != ONYX_ELEM_BFLOAT16)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "element type %s not supported",
                         cpu_elem_name(type));
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(x);
  if (n == 0) return NULL;
  FUnTaskJob t = {{s, type, cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y)}, n};
  size_t blocks = (n + PAR_BLOCK - 1) / PAR_BLOCK;
  if (blocks > 1)
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), blocks, fun_task_clamped, &t);
  else
    fun_range(&t.job, 0, n);
  return NULL;
}

/* ========================================================================= */
/* Sign, Not, BitwiseNot, IsNaN, IsInf                                        */
/* ========================================================================= */

typedef void (*MapFn)(const void* x, void* y, size_t n);

#define MAP_DEF(name, s, T, TY, EXPR)                                                              \
  static void name##_##s(const void* px, void* py, size_t n) {                                     \
    const T* restrict a = px;                                                                      \
    TY* restrict y = py;                                                                           \
    for (size_t i = 0; i < n; i++) {                                                               \
      T x = a[i];                                                                                  \
      y[i] = (TY)(EXPR);                                                                           \
    }                                                                                              \
  }

#define M_SINT(X, A)                                                                               \
  X(A, i8, int8_t, ONYX_ELEM_INT8)                                                                 \
  X(A, i16, int16_t, ONYX_ELEM_INT16)                                                              \
  X(A, i32, int32_t, ONYX_ELEM_INT32)                                                              \
  X(A, i64, int64_t, ONYX_ELEM_INT64)
#define M_UINT(X, A)                                                                               \
  X(A, u8, uint8_t, ONYX_ELEM_UINT8)                                                               \
  X(A, u16, uint16_t, ONYX_ELEM_UINT16)                                                            \
  X(A, u32, uint32_t, ONYX_ELEM_UINT32)                                                            \
  X(A, u64, uint64_t, ONYX_ELEM_UINT64)
#define M_FLT(X, A)                                                                                \
  X(A, f32, float, ONYX_ELEM_FLOAT32)                                                              \
  X(A, f64, double, ONYX_ELEM_FLOAT64)
#define M_HALF(X, A)                                                                               \
  X(A, f16, uint16_t, ONYX_ELEM_FLOAT16)                                                           \
  X(A, bf16, uint16_t, ONYX_ELEM_BFLOAT16)
#define M_ENTRY(op, s, T, E) [E] = op##_##s,

static inline float ld_f16(uint16_t v) {
  return cpu_f16_to_f32(v);
}
static inline float ld_bf16(uint16_t v) {
  return cpu_bf16_to_f32(v);
}
static inline uint16_t st_f16(float v) {
  return cpu_f32_to_f16(v);
}
static inline uint16_t st_bf16(float v) {
  return cpu_f32_to_bf16(v);
}

/* Sign: NaN stays NaN (x is returned when neither comparison holds). */
#define DEF_SIGN(A, s, T, E)   MAP_DEF(sign, s, T, T, x > 0 ? (T)1 : x < 0 ? (T)-1 : x)
#define DEF_SIGN_U(A, s, T, E) MAP_DEF(sign, s, T, T, x > 0 ? 1 : 0)
#define DEF_SIGN_H(A, s, T, E)                                                                     \
  MAP_DEF(sign, s, uint16_t, uint16_t,                                                             \
          ld_##s(x) > 0   ? st_##s(1.0f)                                                           \
          : ld_##s(x) < 0 ? st_##s(-1.0f)                                                          \
                          : x)
#define DEF_BNOT(A, s, T, E) MAP_DEF(bnot, s, T, T, ~x)
M_SINT(DEF_SIGN, _)
M_UINT(DEF_SIGN_U, _)
M_FLT(DEF_SIGN, _)
M_HALF(DEF_SIGN_H, _)
M_SINT(DEF_BNOT, _)
M_UINT(DEF_BNOT, _)
MAP_DEF(not, b8, uint8_t, uint8_t, !x)

typedef struct MapOp {
  const char* name;
  int32_t since;
  MapFn fn[ONYX_ELEM_TYPE_COUNT];
} MapOp;

static const MapOp map_ops[] = {
    {"Sign",
     9,
     {M_SINT(M_ENTRY, sign) M_UINT(M_ENTRY, sign) M_FLT(M_ENTRY, sign) M_HALF(M_ENTRY, sign)}},
    {"BitwiseNot", 18, {M_SINT(M_ENTRY, bnot) M_UINT(M_ENTRY, bnot)}},
    {"Not", 1, {[ONYX_ELEM_BOOL] = not_b8}},
};

static OnyxStatus* map_compute(void* state, OnyxKernelContext* ctx) {
  const MapOp* op = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t type = cpu_host->tensor_elem_type(x);
  if (!op->fn[type])
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "element type %s not supported",
                         cpu_elem_name(type));
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(x);
  if (n) op->fn[type](cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y), n);
  return NULL;
}

/* IsInf (which infinities count comes from detect_negative/positive) and
 * IsNaN, for every floating-point type including the 8-bit ones. */
typedef struct IsInfState {
  bool neg, pos;
  bool nan; /* IsNaN */
} IsInfState;

static OnyxStatus* isinf_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  IsInfState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->nan = user != NULL;
  s->neg = cpu_host->node_attr_int(node, "detect_negative", 1) != 0;
  s->pos = cpu_host->node_attr_int(node, "detect_positive", 1) != 0;
  *state = s;
  return NULL;
}

static OnyxStatus* isinf_compute(void* state, OnyxKernelContext* ctx) {
  const IsInfState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t type = cpu_host->tensor_elem_type(x);
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(x);
  const void* xd = cpu_host->tensor_data(x);
  uint8_t* yd = cpu_host->tensor_mutable_data(y);
  for (size_t i = 0; i < n; i++) {
    double v;
    switch (type) {
    case ONYX_ELEM_FLOAT32:
      v = ((const float*)xd)[i];
      break;
    case ONYX_ELEM_FLOAT64:
      v = ((const double*)xd)[i];
      break;
    case ONYX_ELEM_FLOAT16:
      v = ld_f16(((const uint16_t*)xd)[i]);
      break;
    case ONYX_ELEM_BFLOAT16:
      v = ld_bf16(((const uint16_t*)xd)[i]);
      break;
    case ONYX_ELEM_FLOAT8E4M3FN:
    case ONYX_ELEM_FLOAT8E4M3FNUZ:
    case ONYX_ELEM_FLOAT8E5M2:
    case ONYX_ELEM_FLOAT8E5M2FNUZ:
      v = cpu_math_f8_value(type, ((const uint8_t*)xd)[i]);
      break;
    default:
      return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "element type %s not supported",
                           cpu_elem_name(type));
    }
    yd[i] = s->nan ? isnan(v) != 0 : isinf(v) && ((v > 0 && s->pos) || (v < 0 && s->neg));
  }
  return NULL;
}

/* ========================================================================= */
/* Hardmax and LogSoftmax                                                     */
/* ========================================================================= */

/* Opset < 13 views the input as 2-D [prod(d < axis), prod(d >= axis)] and
 * works on rows (default axis 1); opset 13 works along one axis (default
 * -1). Either way: outer blocks of `len` values spaced `inner` apart. */
typedef struct AxisState {
  bool hardmax;
  bool coerce2d;
  int64_t axis;
} AxisState;

static OnyxStatus* axis_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  AxisState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->hardmax = user != NULL;
  s->coerce2d = cpu_host->node_since_version(node) < 13;
  s->axis = cpu_host->node_attr_int(node, "axis", s->coerce2d ? 1 : -1);
  *state = s;
  return NULL;
}

static double axis_load(int32_t type, const void* d, size_t i) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    return ((const float*)d)[i];
  case ONYX_ELEM_FLOAT64:
    return ((const double*)d)[i];
  case ONYX_ELEM_FLOAT16:
    return ld_f16(((const uint16_t*)d)[i]);
  default:
    return ld_bf16(((const uint16_t*)d)[i]);
  }
}

static void axis_store(int32_t type, void* d, size_t i, double v) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    ((float*)d)[i] = (float)v;
    break;
  case ONYX_ELEM_FLOAT64:
    ((double*)d)[i] = v;
    break;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)d)[i] = cpu_f64_to_f16(v);
    break;
  default:
    ((uint16_t*)d)[i] = cpu_f64_to_bf16(v);
    break;
  }
}

static OnyxStatus* axis_compute(void* state, OnyxKernelContext* ctx) {
  const AxisState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t type = cpu_host->tensor_elem_type(x);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64 && type != ONYX_ELEM_FLOAT16 &&
      type != ONYX_ELEM_BFLOAT16)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "element type %s not supported",
                         cpu_elem_name(type));
  size_t rank = cpu_host->tensor_rank(x);
  const int64_t* dims = cpu_host->tensor_dims(x);
  size_t axis;
  /* Opset < 13 accepts axis == rank (an empty trailing block of size 1). */
  if (!cpu_norm_axis(s->axis, rank, s->coerce2d, &axis) || (rank == 0 && !s->coerce2d))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  size_t outer = cpu_dims_product(dims, 0, axis);
  size_t len = s->coerce2d ? cpu_dims_product(dims, axis, rank) : (size_t)dims[axis];
  size_t inner = s->coerce2d ? 1 : cpu_dims_product(dims, axis + 1, rank);
  if (outer * len * inner == 0) return NULL;
  const void* xd = cpu_host->tensor_data(x);
  void* yd = cpu_host->tensor_mutable_data(y);
  for (size_t o = 0; o < outer; o++) {
    for (size_t in = 0; in < inner; in++) {
      size_t base = o * len * inner + in;
      double mx = axis_load(type, xd, base);
      size_t arg = 0;
      bool nan = isnan(mx);
      for (size_t k = 1; k < len; k++) {
        double v = axis_load(type, xd, base + k * inner);
        if (isnan(v)) nan = true;
        if (v > mx) {
          mx = v;
          arg = k;
        }
      }
      if (s->hardmax) {
        for (size_t k = 0; k < len; k++)
          axis_store(type, yd, base + k * inner, k == arg ? 1.0 : 0.0);
        continue;
      }
      double sum = 0;
      for (size_t k = 0; k < len; k++)
        sum += exp(axis_load(type, xd, base + k * inner) - mx);
      double lse = nan ? NAN : log(sum) + mx;
      for (size_t k = 0; k < len; k++)
        axis_store(type, yd, base + k * inner, axis_load(type, xd, base + k * inner) - lse);
    }
  }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

static const OnyxTypeConstraint flt_tc[] = {{"T", cpu_types_real, CPU_ARRAY_LEN(cpu_types_real)}};
static const int32_t isx_types[] = {ONYX_ELEM_FLOAT32,      ONYX_ELEM_FLOAT64,
                                    ONYX_ELEM_FLOAT16,      ONYX_ELEM_BFLOAT16,
                                    ONYX_ELEM_FLOAT8E4M3FN, ONYX_ELEM_FLOAT8E4M3FNUZ,
                                    ONYX_ELEM_FLOAT8E5M2,   ONYX_ELEM_FLOAT8E5M2FNUZ};
static const OnyxTypeConstraint isx_tc[] = {{"T1", isx_types, CPU_ARRAY_LEN(isx_types)},
                                            {"T2", cpu_types_bool, 1}};

static const CpuKernelSpec axis_specs[] = {
    {"Hardmax", 1, ONYX_OPSET_LATEST, flt_tc, 1, axis_create, axis_compute, cpu_free_state,
     (void*)1},
    {"LogSoftmax", 1, ONYX_OPSET_LATEST, flt_tc, 1, axis_create, axis_compute, cpu_free_state,
     NULL},
    {"IsInf", 10, ONYX_OPSET_LATEST, isx_tc, 2, isinf_create, isinf_compute, cpu_free_state, NULL},
    {"IsNaN", 9, ONYX_OPSET_LATEST, isx_tc, 2, isinf_create, isinf_compute, cpu_free_state,
     (void*)1},
};

static OnyxStatus* register_map(OnyxKernelRegistry* r, const MapOp* op) {
  int32_t types[ONYX_ELEM_TYPE_COUNT];
  size_t n = 0;
  for (int32_t t = 1; t < ONYX_ELEM_TYPE_COUNT; t++)
    if (op->fn[t]) types[n++] = t;
  const OnyxTypeConstraint tc[] = {{"T", types, n}};
  CpuKernelSpec spec = {op->name,    op->since, ONYX_OPSET_LATEST, tc, 1, NULL,
                        map_compute, NULL,      (void*)op};
  return cpu_register_specs(r, &spec, 1);
}

OnyxStatus* cpu_register_math(OnyxKernelRegistry* r) {
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < CPU_ARRAY_LEN(fun_ops); i++) {
    CpuKernelSpec spec = {
        fun_ops[i].name, fun_ops[i].since, ONYX_OPSET_LATEST, flt_tc, 1, fun_create,
        fun_compute,     cpu_free_state,   (void*)&fun_ops[i]};
    st = cpu_register_specs(r, &spec, 1);
  }
  for (size_t i = 0; !st && i < CPU_ARRAY_LEN(map_ops); i++)
    st = register_map(r, &map_ops[i]);
  if (!st) st = cpu_register_specs(r, axis_specs, CPU_ARRAY_LEN(axis_specs));
  return st ? st : cpu_register_math_cast(r);
}
