/* cpu_quant.c — the CPU provider's quant family: element access for the
 * quantized types, QuantizeLinear / DequantizeLinear (per-tensor, per-axis
 * and blocked; integer, packed 4/2-bit, float8 and float4e2m1 types) and
 * DynamicQuantizeLinear. cpu_register_quant also registers the kernels of
 * cpu_quant_mm.c (QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger).
 *
 * Rounding: QuantizeLinear divides in the precision of the scale (or of
 * the `precision` attribute), rounds half to even, adds the zero point and
 * saturates to the output type; NaN quantizes to the zero point. */
#include "cpu_quant.h"
#include "cpu_qgemm.h"
#include "cpu_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QUANT_X86 1
#else
#define QUANT_X86 0
#endif

/* --- Element access -------------------------------------------------------------- */

unsigned cpu_q_packed_bits(int32_t type) {
  switch (type) {
  case ONYX_ELEM_INT4:
  case ONYX_ELEM_UINT4:
  case ONYX_ELEM_FLOAT4E2M1:
    return 4;
  case ONYX_ELEM_INT2:
  case ONYX_ELEM_UINT2:
    return 2;
  default:
    return 0;
  }
}

bool cpu_q_is_int(int32_t type) {
  switch (type) {
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_UINT8:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_INT4:
  case ONYX_ELEM_UINT4:
  case ONYX_ELEM_INT2:
  case ONYX_ELEM_UINT2:
    return true;
  default:
    return false;
  }
}

bool cpu_q_is_small_float(int32_t type) {
  switch (type) {
  case ONYX_ELEM_FLOAT8E4M3FN:
  case ONYX_ELEM_FLOAT8E4M3FNUZ:
  case ONYX_ELEM_FLOAT8E5M2:
  case ONYX_ELEM_FLOAT8E5M2FNUZ:
  case ONYX_ELEM_FLOAT4E2M1:
    return true;
  default:
    return false;
  }
}

void cpu_q_int_range(int32_t type, int64_t* lo, int64_t* hi) {
  switch (type) {
  case ONYX_ELEM_INT8:
    *lo = INT8_MIN, *hi = INT8_MAX;
    return;
  case ONYX_ELEM_UINT8:
    *lo = 0, *hi = UINT8_MAX;
    return;
  case ONYX_ELEM_INT16:
    *lo = INT16_MIN, *hi = INT16_MAX;
    return;
  case ONYX_ELEM_UINT16:
    *lo = 0, *hi = UINT16_MAX;
    return;
  case ONYX_ELEM_INT4:
    *lo = -8, *hi = 7;
    return;
  case ONYX_ELEM_UINT4:
    *lo = 0, *hi = 15;
    return;
  case ONYX_ELEM_INT2:
    *lo = -2, *hi = 1;
    return;
  case ONYX_ELEM_UINT2:
    *lo = 0, *hi = 3;
    return;
  default:
    *lo = INT32_MIN, *hi = INT32_MAX;
    return;
  }
}

/* The raw bits of packed element i. */
static unsigned packed_get(const void* data, size_t i, unsigned bits) {
  const size_t per = 8 / bits;
  const unsigned shift = (unsigned)(i % per) * bits;
  return (((const uint8_t*)data)[i / per] >> shift) & ((1u << bits) - 1);
}

static void packed_set(void* data, size_t i, unsigned bits, unsigned v) {
  const size_t per = 8 / bits;
  const unsigned shift = (unsigned)(i % per) * bits, mask = ((1u << bits) - 1) << shift;
  uint8_t* b = (uint8_t*)data + i / per;
  *b = (uint8_t)((*b & ~mask) | ((v << shift) & mask));
}

int64_t cpu_q_load_int(int32_t type, const void* data, size_t i) {
  switch (type) {
  case ONYX_ELEM_INT8:
    return ((const int8_t*)data)[i];
  case ONYX_ELEM_UINT8:
    return ((const uint8_t*)data)[i];
  case ONYX_ELEM_INT16:
    return ((const int16_t*)data)[i];
  case ONYX_ELEM_UINT16:
    return ((const uint16_t*)data)[i];
  case ONYX_ELEM_INT32:
    return ((const int32_t*)data)[i];
  case ONYX_ELEM_UINT4:
    return packed_get(data, i, 4);
  case ONYX_ELEM_INT4: {
    unsigned v = packed_get(data, i, 4);
    return v >= 8 ? (int64_t)v - 16 : (int64_t)v;
  }
  case ONYX_ELEM_UINT2:
    return packed_get(data, i, 2);
  case ONYX_ELEM_INT2: {
    unsigned v = packed_get(data, i, 2);
    return v >= 2 ? (int64_t)v - 4 : (int64_t)v;
  }
  default:
    return 0;
  }
}

void cpu_q_store_int(int32_t type, void* data, size_t i, int64_t v) {
  switch (type) {
  case ONYX_ELEM_INT8:
    ((int8_t*)data)[i] = (int8_t)v;
    return;
  case ONYX_ELEM_UINT8:
    ((uint8_t*)data)[i] = (uint8_t)v;
    return;
  case ONYX_ELEM_INT16:
    ((int16_t*)data)[i] = (int16_t)v;
    return;
  case ONYX_ELEM_UINT16:
    ((uint16_t*)data)[i] = (uint16_t)v;
    return;
  case ONYX_ELEM_INT32:
    ((int32_t*)data)[i] = (int32_t)v;
    return;
  case ONYX_ELEM_INT4:
  case ONYX_ELEM_UINT4:
    packed_set(data, i, 4, (unsigned)(v & 15));
    return;
  case ONYX_ELEM_INT2:
  case ONYX_ELEM_UINT2:
    packed_set(data, i, 2, (unsigned)(v & 3));
    return;
  default:
    return;
  }
}

/* Layout of a small float type. */
typedef struct SmallFloat {
  int ebits, mbits, bias;
  double max;
  uint8_t max_code; /* positive max */
  bool uz;          /* one zero, NaN = 0x80 (the FNUZ types) */
  bool inf;         /* E5M2: infinities */
  bool nan;         /* has a NaN at all (float4e2m1 has none) */
} SmallFloat;

static const SmallFloat* small_float(int32_t type) {
  static const SmallFloat e4m3fn = {4, 3, 7, 448.0, 0x7E, false, false, true};
  static const SmallFloat e4m3fnuz = {4, 3, 8, 240.0, 0x7F, true, false, true};
  static const SmallFloat e5m2 = {5, 2, 15, 57344.0, 0x7B, false, true, true};
  static const SmallFloat e5m2fnuz = {5, 2, 16, 57344.0, 0x7F, true, false, true};
  static const SmallFloat e2m1 = {2, 1, 1, 6.0, 0x7, false, false, false};
  switch (type) {
  case ONYX_ELEM_FLOAT8E4M3FN:
    return &e4m3fn;
  case ONYX_ELEM_FLOAT8E4M3FNUZ:
    return &e4m3fnuz;
  case ONYX_ELEM_FLOAT8E5M2:
    return &e5m2;
  case ONYX_ELEM_FLOAT8E5M2FNUZ:
    return &e5m2fnuz;
  default:
    return &e2m1;
  }
}

uint8_t cpu_q_small_float_encode(int32_t type, double v, bool saturate) {
  const SmallFloat* f = small_float(type);
  const int width = 1 + f->ebits + f->mbits;
  const uint8_t sign = signbit(v) ? (uint8_t)(1u << (width - 1)) : 0;
  const uint8_t nan_code = f->uz ? 0x80 : (uint8_t)(0x7F | sign);
  if (!f->nan) saturate = true;
  if (isnan(v)) return f->nan ? nan_code : f->max_code;
  if (isinf(v)) {
    if (f->uz) return 0x80;
    if (saturate) return (uint8_t)(f->max_code | sign);
    return f->inf ? (uint8_t)(0x7C | sign) : nan_code;
  }
  const double a = fabs(v);
  if (a == 0) return f->uz ? 0 : sign;
  int e;
  frexp(a, &e);
  int ex = e - 1;
  const int emin = 1 - f->bias;
  if (ex < emin) ex = emin;
  double r = rint(ldexp(a, f->mbits - ex)); /* round half to even */
  if (r >= ldexp(1.0, f->mbits + 1)) {
    ex++;
    r = ldexp(r, -1);
  }
  if (ldexp(r, ex - f->mbits) > f->max) {
    if (saturate) return (uint8_t)(f->max_code | sign);
    return f->inf ? (uint8_t)(0x7C | sign) : nan_code;
  }
  if (r == 0) return f->uz ? 0 : sign;
  const unsigned ri = (unsigned)r, implicit = 1u << f->mbits;
  unsigned code = ri < implicit ? ri : ((unsigned)(ex + f->bias) << f->mbits) | (ri - implicit);
  return (uint8_t)(code | sign);
}

double cpu_q_small_float_decode(int32_t type, uint8_t code) {
  const SmallFloat* f = small_float(type);
  const int width = 1 + f->ebits + f->mbits;
  code &= (uint8_t)((1u << width) - 1);
  if (f->uz && code == 0x80) return NAN;
  const bool neg = (code >> (width - 1)) & 1;
  const unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1);
  const unsigned m = code & ((1u << f->mbits) - 1);
  double v;
  if (f->nan && !f->uz && !f->inf && (code & 0x7F) == 0x7F) return NAN; /* E4M3FN */
  if (f->inf && e == 31) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  } else {
    v = ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
  }
  return neg ? -v : v;
}

double cpu_q_load(int32_t type, const void* data, size_t i) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    return ((const float*)data)[i];
  case ONYX_ELEM_FLOAT64:
    return ((const double*)data)[i];
  case ONYX_ELEM_FLOAT16:
    return cpu_f16_to_f32(((const uint16_t*)data)[i]);
  case ONYX_ELEM_BFLOAT16:
    return cpu_bf16_to_f32(((const uint16_t*)data)[i]);
  case ONYX_ELEM_INT64:
    return (double)((const int64_t*)data)[i];
  case ONYX_ELEM_UINT32:
    return ((const uint32_t*)data)[i];
  case ONYX_ELEM_UINT64:
    return (double)((const uint64_t*)data)[i];
  case ONYX_ELEM_BOOL:
    return ((const uint8_t*)data)[i] != 0;
  case ONYX_ELEM_FLOAT8E4M3FN:
  case ONYX_ELEM_FLOAT8E4M3FNUZ:
  case ONYX_ELEM_FLOAT8E5M2:
  case ONYX_ELEM_FLOAT8E5M2FNUZ:
    return cpu_q_small_float_decode(type, ((const uint8_t*)data)[i]);
  case ONYX_ELEM_FLOAT4E2M1:
    return cpu_q_small_float_decode(type, (uint8_t)packed_get(data, i, 4));
  case ONYX_ELEM_FLOAT8E8M0: {
    const uint8_t e = ((const uint8_t*)data)[i];
    return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127);
  }
  default:
    return (double)cpu_q_load_int(type, data, i);
  }
}

double cpu_q_round_to(int32_t type, double x) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    return (double)(float)x;
  case ONYX_ELEM_FLOAT16:
    return cpu_f16_to_f32(cpu_f64_to_f16(x));
  case ONYX_ELEM_BFLOAT16:
    return cpu_bf16_to_f32(cpu_f64_to_bf16(x));
  default:
    return x;
  }
}

void cpu_q_store_float(int32_t type, void* data, size_t i, double v) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    ((float*)data)[i] = (float)v;
    return;
  case ONYX_ELEM_FLOAT64:
    ((double*)data)[i] = v;
    return;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)data)[i] = cpu_f64_to_f16(v);
    return;
  case ONYX_ELEM_BFLOAT16:
    ((uint16_t*)data)[i] = cpu_f64_to_bf16(v);
    return;
  default:
    return;
  }
}

OnyxStatus* cpu_q_register_defs(OnyxKernelRegistry* r, OnyxKernelDef* defs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    defs[i].struct_size = sizeof defs[i];
    defs[i].domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}

/* --- QuantizeLinear / DequantizeLinear ------------------------------------------- */

typedef struct QState {
  int64_t axis, block_size;
  int saturate;
  int32_t precision; /* 0: the scale's type */
  int32_t out_type;
} QState;

static OnyxStatus* q_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  QState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->axis = cpu_host->node_attr_int(node, "axis", 1);
  s->block_size = cpu_host->node_attr_int(node, "block_size", 0);
  s->saturate = cpu_host->node_attr_int(node, "saturate", 1) != 0;
  s->precision = (int32_t)cpu_host->node_attr_int(node, "precision", 0);
  const OnyxValueInfo* y = cpu_host->node_output(node, 0);
  s->out_type = y ? cpu_host->value_elem_type(y) : ONYX_ELEM_UNDEFINED;
  if (s->block_size < 0) {
    const long long b = (long long)s->block_size;
    free(s);
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "block_size must be >= 0, got %lld", b);
  }
  *state = s;
  return NULL;
}

/* How scale / zero point elements map onto x: x is seen as [outer, d, inner];
 * element (o, a, i) uses parameter o * so + (a / block) * sa + i * si. */
typedef struct QPlan {
  size_t outer, d, inner, block;
  size_t so, sa, si;
} QPlan;

static bool same_dims(const OnyxTensor* a, const OnyxTensor* b) {
  size_t r = cpu_host->tensor_rank(a);
  return r == cpu_host->tensor_rank(b) &&
         (r == 0 || !memcmp(cpu_host->tensor_dims(a), cpu_host->tensor_dims(b), r * 8));
}

static OnyxStatus* q_plan(OnyxKernelContext* ctx, const QState* s, const OnyxTensor* x,
                          const OnyxTensor* scale, const OnyxTensor* zp, QPlan* p) {
  const size_t rank = cpu_host->tensor_rank(x), srank = cpu_host->tensor_rank(scale);
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* sd = cpu_host->tensor_dims(scale);
  const size_t count = cpu_host->tensor_elem_count(x), scount = cpu_host->tensor_elem_count(scale);
  memset(p, 0, sizeof *p);
  p->block = 1;
  if (zp && !same_dims(zp, scale) && !(cpu_host->tensor_elem_count(zp) == 1 && scount == 1))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "the zero point's shape must match the scale's (%zu vs %zu elements)",
                         cpu_host->tensor_elem_count(zp), scount);
  if (s->block_size == 0 && scount == 1) { /* per tensor: one row per element */
    p->outer = 1, p->d = count, p->inner = 1;
    return NULL;
  }
  size_t axis;
  if (!cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                         (long long)s->axis, rank);
  p->outer = cpu_dims_product(xd, 0, axis);
  p->d = (size_t)xd[axis];
  p->inner = cpu_dims_product(xd, axis + 1, rank);
  if (s->block_size == 0) {
    if (srank != 1 || (size_t)sd[0] != p->d)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "per-axis scale must be 1-D of length %zu (x's axis %zu); it has %zu "
                           "elements and rank %zu",
                           p->d, axis, scount, srank);
    p->sa = 1;
    return NULL;
  }
  if (srank != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "blocked quantization: the scale's rank %zu differs from x's rank %zu",
                         srank, rank);
  const size_t b = (size_t)s->block_size, nb = p->d ? (p->d + b - 1) / b : 0;
  for (size_t i = 0; i < rank; i++) {
    const int64_t want = i == axis ? (int64_t)nb : xd[i];
    if (sd[i] != want && !(i == axis && p->d == 0))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "blocked quantization: scale dim %zu is %lld, expected %lld (block_size "
                           "%zu along axis %zu)",
                           i, (long long)sd[i], (long long)want, b, axis);
  }
  p->block = b;
  p->sa = p->inner;
  p->so = (size_t)sd[axis] * p->inner;
  p->si = 1;
  return NULL;
}

typedef struct QJob {
  const QState* s;
  const QPlan* p;
  int32_t xt, st, zt, yt, prec;
  const void *x, *scale, *zp;
  void* y;
  int64_t lo, hi;
} QJob;

/* --- float32 <-> int8 / uint8 spans ------------------------------------------------- */

/* The common case of the QDQ models: float32 x and scale, int8 / uint8 y, one
 * scale and zero point over a contiguous span. Each path computes exactly
 * what the general loop does: x / scale divided in float32 (correctly
 * rounded, as the double quotient rounded to float32 is), rounded half to
 * even, NaN to 0, the zero point added, saturated to [lo, hi]; and for
 * DequantizeLinear (float)(x - zero point) * scale in float32. The ISA path
 * is the int8 GEMM's (cpu_qgemm_isa: cpuid capped by ONYX_CPU_ISA). */
static void q_span_scalar(const float* x, size_t n, float sc, float z, float lo, float hi, bool s8,
                          void* y) {
  for (size_t i = 0; i < n; i++) {
    float q = rintf(x[i] / sc);
    if (isnan(q)) q = 0.0f;
    q += z;
    q = q < lo ? lo : q > hi ? hi : q;
    if (s8)
      ((int8_t*)y)[i] = (int8_t)(int32_t)q;
    else
      ((uint8_t*)y)[i] = (uint8_t)(int32_t)q;
  }
}

static void dq_span_scalar(const void* x, size_t n, float sc, int32_t z, bool s8, float* y) {
  for (size_t i = 0; i < n; i++) {
    const int32_t v = s8 ? ((const int8_t*)x)[i] : ((const uint8_t*)x)[i];
    y[i] = (float)(v - z) * sc;
  }
}

#if QUANT_X86
__attribute__((target("avx512f"))) static void q_span_avx512(const float* x, size_t n, float sc,
                                                             float z, float lo, float hi, void* y) {
  const __m512 vs = _mm512_set1_ps(sc), vz = _mm512_set1_ps(z);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int8_t* out = y;
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
    q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q); /* NaN -> 0 */
    q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, vz), vlo), vhi);
    /* In range now: the low byte of each int32 is the result, signed or not. */
    _mm512_mask_cvtepi32_storeu_epi8(out + i, m, _mm512_cvtps_epi32(q));
  }
}

__attribute__((target("avx512f"))) static void dq_span_avx512(const void* x, size_t n, float sc,
                                                              int32_t z, bool s8, float* y) {
  const __m512 vs = _mm512_set1_ps(sc);
  const __m512i vz = _mm512_set1_epi32(z);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128((const __m128i*)((const uint8_t*)x + i));
    const __m512i v = s8 ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, vz)), vs));
  }
  dq_span_scalar((const uint8_t*)x + i, n - i, sc, z, s8, y + i);
}

__attribute__((target("avx2"))) static void q_span_avx2(const float* x, size_t n, float sc, float z,
                                                        float lo, float hi, bool s8, void* y) {
  const __m256 vs = _mm256_set1_ps(sc), vz = _mm256_set1_ps(z);
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  /* Byte 0 of each int32 to the low 4 bytes of its 128-bit lane, then the
   * two lanes' dwords together. */
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  uint8_t* out = y;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 q = _mm256_div_ps(_mm256_loadu_ps(x + i), vs);
    q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q)); /* NaN -> 0 */
    q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, vz), vlo), vhi);
    __m256i v = _mm256_shuffle_epi8(_mm256_cvtps_epi32(q), pick);
    v = _mm256_permutevar8x32_epi32(v, join);
    _mm_storel_epi64((__m128i*)(out + i), _mm256_castsi256_si128(v));
  }
  q_span_scalar(x + i, n - i, sc, z, lo, hi, s8, out + i);
}

__attribute__((target("avx2"))) static void dq_span_avx2(const void* x, size_t n, float sc,
                                                         int32_t z, bool s8, float* y) {
  const __m256 vs = _mm256_set1_ps(sc);
  const __m256i vz = _mm256_set1_epi32(z);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64((const __m128i*)((const uint8_t*)x + i));
    const __m256i v = s8 ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, vz)), vs));
  }
  dq_span_scalar((const uint8_t*)x + i, n - i, sc, z, s8, y + i);
}
#endif

static void q_span(CpuQgemmIsa isa, const float* x, size_t n, float sc, int32_t z, bool s8,
                   void* y) {
  const float lo = s8 ? -128.0f : 0.0f, hi = s8 ? 127.0f : 255.0f;
#if QUANT_X86
  if (isa >= CPU_QGEMM_AVX512BW) {
    q_span_avx512(x, n, sc, (float)z, lo, hi, y);
    return;
  }
  if (isa == CPU_QGEMM_AVX2) {
    q_span_avx2(x, n, sc, (float)z, lo, hi, s8, y);
    return;
  }
#endif
  (void)isa;
  q_span_scalar(x, n, sc, (float)z, lo, hi, s8, y);
}

static void dq_span(CpuQgemmIsa isa, const void* x, size_t n, float sc, int32_t z, bool s8,
                    float* y) {
#if QUANT_X86
  if (isa >= CPU_QGEMM_AVX512BW) {
    dq_span_avx512(x, n, sc, z, s8, y);
    return;
  }
  if (isa == CPU_QGEMM_AVX2) {
    dq_span_avx2(x, n, sc, z, s8, y);
    return;
  }
#endif
  (void)isa;
  dq_span_scalar(x, n, sc, z, s8, y);
}

/* Elements per parallel chunk of a per-tensor span. */
#define Q_CHUNK 4096

typedef struct QFastJob {
  CpuQgemmIsa isa;
  bool quantize, s8;
  const QPlan* p;
  const void* x;
  void* y;
  const float* scale;
  const void* zp; /* int8 / uint8 as s8, or NULL */
  size_t count;   /* per tensor: elements; else 0 and rows of p->inner */
} QFastJob;

/* Units are Q_CHUNK-element chunks (per tensor) or rows of the plan (per
 * axis: one scale over p->inner contiguous elements). */
static void qdq_fast_units(void* user, size_t begin, size_t end) {
  const QFastJob* j = user;
  for (size_t u = begin; u < end; u++) {
    size_t off, n, si;
    if (j->count) {
      off = u * Q_CHUNK;
      n = j->count - off < Q_CHUNK ? j->count - off : Q_CHUNK;
      si = 0;
    } else {
      off = u * j->p->inner;
      n = j->p->inner;
      si = (u / j->p->d) * j->p->so + (u % j->p->d) * j->p->sa;
    }
    const int32_t z = !j->zp ? 0 : j->s8 ? ((const int8_t*)j->zp)[si] : ((const uint8_t*)j->zp)[si];
    if (j->quantize)
      q_span(j->isa, (const float*)j->x + off, n, j->scale[si], z, j->s8, (uint8_t*)j->y + off);
    else
      dq_span(j->isa, (const uint8_t*)j->x + off, n, j->scale[si], z, j->s8, (float*)j->y + off);
  }
}

/* Runs the span kernels when the types and the plan allow (true), else
 * leaves it to the general loop. */
static bool qdq_fast(OnyxKernelContext* ctx, bool quantize, const QPlan* p, int32_t xt, int32_t st,
                     int32_t zt, int32_t yt, int32_t prec, const void* x, const void* scale,
                     const void* zp, void* y) {
  const int32_t qt = quantize ? yt : xt, ft = quantize ? xt : yt;
  if (ft != ONYX_ELEM_FLOAT32 || st != ONYX_ELEM_FLOAT32 || p->block != 1 ||
      (qt != ONYX_ELEM_INT8 && qt != ONYX_ELEM_UINT8) || (zp && zt != qt) ||
      (quantize && prec != ONYX_ELEM_FLOAT32))
    return false;
  const size_t total = p->outer * p->d * p->inner;
  QFastJob j = {.isa = cpu_qgemm_isa(),
                .quantize = quantize,
                .s8 = qt == ONYX_ELEM_INT8,
                .p = p,
                .x = x,
                .y = y,
                .scale = scale,
                .zp = zp,
                .count = p->so == 0 && p->sa == 0 ? total : 0};
  const size_t units = j.count ? (total + Q_CHUNK - 1) / Q_CHUNK : p->outer * p->d;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), units, qdq_fast_units, &j);
  return true;
}

/* Rows r in [begin, end) are (o, a) pairs of the plan. */
static void quantize_rows(void* user, size_t begin, size_t end) {
  const QJob* j = user;
  const QPlan* p = j->p;
  const bool small = cpu_q_is_small_float(j->yt);
  for (size_t r = begin; r < end; r++) {
    const size_t o = r / p->d, a = r % p->d, base = r * p->inner;
    const size_t s0 = o * p->so + (a / p->block) * p->sa;
    for (size_t i = 0; i < p->inner; i++) {
      const size_t si = s0 + i * p->si;
      const double sc = cpu_q_round_to(j->prec, cpu_q_load(j->st, j->scale, si));
      const double xv = cpu_q_round_to(j->prec, cpu_q_load(j->xt, j->x, base + i));
      const double q = cpu_q_round_to(j->prec, xv / sc);
      if (small) {
        const double z = j->zp ? cpu_q_load(j->zt, j->zp, si) : 0.0;
        const uint8_t code = cpu_q_small_float_encode(j->yt, q + z, j->s->saturate);
        if (j->yt == ONYX_ELEM_FLOAT4E2M1)
          packed_set(j->y, base + i, 4, code);
        else
          ((uint8_t*)j->y)[base + i] = code;
        continue;
      }
      const int64_t z = j->zp ? cpu_q_load_int(j->zt, j->zp, si) : 0;
      double v = isnan(q) ? 0.0 : rint(q) + (double)z;
      int64_t iv = v <= (double)j->lo ? j->lo : v >= (double)j->hi ? j->hi : (int64_t)v;
      cpu_q_store_int(j->yt, j->y, base + i, iv);
    }
  }
}

static OnyxStatus* quantize_compute(void* state, OnyxKernelContext* ctx) {
  const QState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* scale = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* zp = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  QPlan p;
  OnyxStatus* st = q_plan(ctx, s, x, scale, zp, &p);
  if (st) return st;
  const int32_t yt = zp ? (int32_t)cpu_host->tensor_elem_type(zp) : s->out_type;
  if (!cpu_q_is_int(yt) && !cpu_q_is_small_float(yt))
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "cannot quantize to %s", cpu_elem_name(yt));
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  QJob j = {.s = s,
            .p = &p,
            .xt = cpu_host->tensor_elem_type(x),
            .st = cpu_host->tensor_elem_type(scale),
            .zt = zp ? cpu_host->tensor_elem_type(zp) : ONYX_ELEM_UNDEFINED,
            .yt = yt,
            .x = cpu_host->tensor_data(x),
            .scale = cpu_host->tensor_data(scale),
            .zp = zp ? cpu_host->tensor_data(zp) : NULL,
            .y = cpu_host->tensor_mutable_data(y)};
  j.prec = s->precision ? s->precision : j.st;
  if (j.prec == ONYX_ELEM_FLOAT8E8M0) j.prec = ONYX_ELEM_FLOAT32;
  if (j.xt == ONYX_ELEM_INT32 && j.prec == ONYX_ELEM_INT32) j.prec = ONYX_ELEM_FLOAT64;
  cpu_q_int_range(yt, &j.lo, &j.hi);
  const size_t rows = p.outer * p.d;
  if (rows == 0 || p.inner == 0) return NULL;
  if (qdq_fast(ctx, true, &p, j.xt, j.st, j.zt, yt, j.prec, j.x, j.scale, j.zp, j.y)) return NULL;
  if (cpu_q_packed_bits(yt)) {
    /* Neighbours share bytes: one thread, and the padding bits stay 0. */
    memset(j.y, 0, cpu_host->tensor_byte_size(y));
    quantize_rows(&j, 0, rows);
  } else
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, quantize_rows, &j);
  return NULL;
}

static void dequantize_rows(void* user, size_t begin, size_t end) {
  const QJob* j = user;
  const QPlan* p = j->p;
  const bool is_int = cpu_q_is_int(j->xt);
  for (size_t r = begin; r < end; r++) {
    const size_t o = r / p->d, a = r % p->d, base = r * p->inner;
    const size_t s0 = o * p->so + (a / p->block) * p->sa;
    for (size_t i = 0; i < p->inner; i++) {
      const size_t si = s0 + i * p->si;
      const float sc = (float)cpu_q_load(j->st, j->scale, si);
      float diff;
      if (is_int) {
        const int64_t z = j->zp ? cpu_q_load_int(j->zt, j->zp, si) : 0;
        diff = (float)(cpu_q_load_int(j->xt, j->x, base + i) - z);
      } else {
        const float z = j->zp ? (float)cpu_q_load(j->zt, j->zp, si) : 0.0f;
        diff = (float)cpu_q_load(j->xt, j->x, base + i) - z;
      }
      cpu_q_store_float(j->yt, j->y, base + i, (double)(diff * sc));
    }
  }
}

static OnyxStatus* dequantize_compute(void* state, OnyxKernelContext* ctx) {
  const QState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* scale = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* zp = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  QPlan p;
  OnyxStatus* st = q_plan(ctx, s, x, scale, zp, &p);
  if (st) return st;
  const int32_t xt = cpu_host->tensor_elem_type(x);
  if (zp && (int32_t)cpu_host->tensor_elem_type(zp) != xt)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "x is %s but x_zero_point is %s",
                         cpu_elem_name(xt), cpu_elem_name(cpu_host->tensor_elem_type(zp)));
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  QJob j = {.s = s,
            .p = &p,
            .xt = xt,
            .st = cpu_host->tensor_elem_type(scale),
            .zt = zp ? xt : ONYX_ELEM_UNDEFINED,
            .yt = cpu_host->tensor_elem_type(y),
            .x = cpu_host->tensor_data(x),
            .scale = cpu_host->tensor_data(scale),
            .zp = zp ? cpu_host->tensor_data(zp) : NULL,
            .y = cpu_host->tensor_mutable_data(y)};
  const size_t rows = p.outer * p.d;
  if (rows == 0 || p.inner == 0) return NULL;
  if (qdq_fast(ctx, false, &p, j.xt, j.st, j.zt, j.yt, 0, j.x, j.scale, j.zp, j.y)) return NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, dequantize_rows, &j);
  return NULL;
}

/* --- DynamicQuantizeLinear ---------------------------------------------------------- */

static OnyxStatus* dynamic_quantize_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t n = cpu_host->tensor_elem_count(x);
  const float* xd = cpu_host->tensor_data(x);
  OnyxTensor *y, *ys, *yz;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (!st) st = cpu_host->ctx_output(ctx, 1, NULL, 0, &ys);
  if (!st) st = cpu_host->ctx_output(ctx, 2, NULL, 0, &yz);
  if (st) return st;
  /* The ONNX function body, step by step in float32. */
  float lo = 0.0f, hi = 0.0f;
  for (size_t i = 0; i < n; i++) {
    if (xd[i] < lo) lo = xd[i];
    if (xd[i] > hi) hi = xd[i];
  }
  const float scale = (hi - lo) / 255.0f;
  float zpf = 0.0f;
  if (scale > 0.0f) {
    zpf = 0.0f - lo / scale;
    zpf = zpf < 0.0f ? 0.0f : zpf > 255.0f ? 255.0f : zpf;
    zpf = rintf(zpf);
  }
  const uint8_t zp = (uint8_t)zpf;
  uint8_t* yd = cpu_host->tensor_mutable_data(y);
  for (size_t i = 0; i < n; i++) {
    float q = scale > 0.0f ? rintf(xd[i] / scale) + (float)zp : (float)zp;
    if (isnan(q)) q = (float)zp;
    yd[i] = (uint8_t)(q < 0.0f ? 0.0f : q > 255.0f ? 255.0f : q);
  }
  *(float*)cpu_host->tensor_mutable_data(ys) = scale;
  *(uint8_t*)cpu_host->tensor_mutable_data(yz) = zp;
  return NULL;
}

/* --- Registration --------------------------------------------------------------------- */

#define ELEM(x) ONYX_ELEM_##x
static const int32_t F32[] = {ELEM(FLOAT32)};
static const int32_t U8[] = {ELEM(UINT8)};
static const int32_t Q_X10[] = {ELEM(FLOAT32), ELEM(INT32)};
static const int32_t Q_X19[] = {ELEM(FLOAT32), ELEM(FLOAT16), ELEM(BFLOAT16), ELEM(INT32)};
static const int32_t Q_S24[] = {ELEM(FLOAT32), ELEM(FLOAT16), ELEM(BFLOAT16), ELEM(INT32),
                                ELEM(FLOAT8E8M0)};
static const int32_t Q_S[] = {ELEM(FLOAT32), ELEM(FLOAT16), ELEM(BFLOAT16)};
static const int32_t Q_S_E8[] = {ELEM(FLOAT32), ELEM(FLOAT16), ELEM(BFLOAT16), ELEM(FLOAT8E8M0)};
static const int32_t Q_Y10[] = {ELEM(INT8), ELEM(UINT8)};
static const int32_t Q_Y19[] = {ELEM(INT8),           ELEM(UINT8),      ELEM(FLOAT8E4M3FN),
                                ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ)};
static const int32_t Q_Y21[] = {
    ELEM(INT8),           ELEM(UINT8),      ELEM(INT16),          ELEM(UINT16), ELEM(FLOAT8E4M3FN),
    ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ), ELEM(INT4),   ELEM(UINT4)};
static const int32_t Q_Y23[] = {ELEM(INT8),       ELEM(UINT8),          ELEM(INT16),
                                ELEM(UINT16),     ELEM(FLOAT8E4M3FN),   ELEM(FLOAT8E4M3FNUZ),
                                ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ), ELEM(INT4),
                                ELEM(UINT4),      ELEM(FLOAT4E2M1)};
static const int32_t Q_Y25[] = {
    ELEM(INT8),           ELEM(UINT8),      ELEM(INT16),          ELEM(UINT16), ELEM(FLOAT8E4M3FN),
    ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ), ELEM(INT4),   ELEM(UINT4),
    ELEM(FLOAT4E2M1),     ELEM(INT2),       ELEM(UINT2)};
static const int32_t DQ_X10[] = {ELEM(INT8), ELEM(UINT8), ELEM(INT32)};
static const int32_t DQ_X19[] = {ELEM(INT8),          ELEM(UINT8),          ELEM(INT32),
                                 ELEM(FLOAT8E4M3FN),  ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2),
                                 ELEM(FLOAT8E5M2FNUZ)};
static const int32_t DQ_X21[] = {ELEM(INT8),           ELEM(UINT8),      ELEM(INT16),
                                 ELEM(UINT16),         ELEM(INT32),      ELEM(FLOAT8E4M3FN),
                                 ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ),
                                 ELEM(INT4),           ELEM(UINT4)};
static const int32_t DQ_X23[] = {ELEM(INT8),           ELEM(UINT8),      ELEM(INT16),
                                 ELEM(UINT16),         ELEM(INT32),      ELEM(FLOAT8E4M3FN),
                                 ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ),
                                 ELEM(INT4),           ELEM(UINT4),      ELEM(FLOAT4E2M1)};
static const int32_t DQ_X25[] = {
    ELEM(INT8),         ELEM(UINT8),          ELEM(INT16),      ELEM(UINT16),         ELEM(INT32),
    ELEM(FLOAT8E4M3FN), ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ), ELEM(INT4),
    ELEM(UINT4),        ELEM(FLOAT4E2M1),     ELEM(INT2),       ELEM(UINT2)};

#define TC(name, arr)                                                                              \
  { name, arr, CPU_ARRAY_LEN(arr) }
static const OnyxTypeConstraint TC_Q10[] = {TC("T1", Q_X10), TC("T2", Q_Y10)};
static const OnyxTypeConstraint TC_Q19[] = {TC("T1", Q_X19), TC("T2", Q_Y19)};
static const OnyxTypeConstraint TC_Q21[] = {TC("T1", Q_X19), TC("T2", Q_Y21)};
static const OnyxTypeConstraint TC_Q23[] = {TC("T1", Q_X19), TC("T2", Q_X19), TC("T3", Q_Y23)};
static const OnyxTypeConstraint TC_Q24[] = {TC("T1", Q_X19), TC("T2", Q_S24), TC("T3", Q_Y23)};
static const OnyxTypeConstraint TC_Q25[] = {TC("T1", Q_X19), TC("T2", Q_S24), TC("T3", Q_Y25)};
static const OnyxTypeConstraint TC_DQ10[] = {TC("T", DQ_X10)};
static const OnyxTypeConstraint TC_DQ19[] = {TC("T1", DQ_X19), TC("T2", Q_S)};
static const OnyxTypeConstraint TC_DQ21[] = {TC("T1", DQ_X21), TC("T2", Q_S)};
static const OnyxTypeConstraint TC_DQ23[] = {TC("T1", DQ_X23), TC("T2", Q_S), TC("T3", Q_S)};
static const OnyxTypeConstraint TC_DQ24[] = {TC("T1", DQ_X23), TC("T2", Q_S_E8), TC("T3", Q_S)};
static const OnyxTypeConstraint TC_DQ25[] = {TC("T1", DQ_X25), TC("T2", Q_S_E8), TC("T3", Q_S)};
static const OnyxTypeConstraint TC_DYNQ[] = {TC("T1", F32), TC("T2", U8)};

#define KQ(op, since, end, tc, comp)                                                               \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .create = q_create, .compute = comp,               \
    .release = cpu_free_state                                                                      \
  }

OnyxStatus* cpu_register_quant(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      KQ("QuantizeLinear", 10, 12, TC_Q10, quantize_compute),
      KQ("QuantizeLinear", 13, 18, TC_Q10, quantize_compute),
      KQ("QuantizeLinear", 19, 20, TC_Q19, quantize_compute),
      KQ("QuantizeLinear", 21, 22, TC_Q21, quantize_compute),
      KQ("QuantizeLinear", 23, 23, TC_Q23, quantize_compute),
      KQ("QuantizeLinear", 24, 24, TC_Q24, quantize_compute),
      KQ("QuantizeLinear", 25, latest, TC_Q25, quantize_compute),
      KQ("DequantizeLinear", 10, 12, TC_DQ10, dequantize_compute),
      KQ("DequantizeLinear", 13, 18, TC_DQ10, dequantize_compute),
      KQ("DequantizeLinear", 19, 20, TC_DQ19, dequantize_compute),
      KQ("DequantizeLinear", 21, 22, TC_DQ21, dequantize_compute),
      KQ("DequantizeLinear", 23, 23, TC_DQ23, dequantize_compute),
      KQ("DequantizeLinear", 24, 24, TC_DQ24, dequantize_compute),
      KQ("DequantizeLinear", 25, latest, TC_DQ25, dequantize_compute),
      {.op_type = "DynamicQuantizeLinear",
       .since_version = 11,
       .end_version = latest,
       .type_constraints = TC_DYNQ,
       .type_constraint_count = CPU_ARRAY_LEN(TC_DYNQ),
       .compute = dynamic_quantize_compute},
  };
  OnyxStatus* st = cpu_q_register_defs(r, defs, CPU_ARRAY_LEN(defs));
  if (!st) st = cpu_register_quant_mm(r);
  return st;
}
