/* cpu_math_cast.c — Cast, CastLike and BitCast for every element type pair
 * the ONNX spec lists: numbers of any width (float16/bfloat16 rounding to
 * nearest even), the 8-bit floats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, with
 * `saturate`), E8M0 (with `round_mode`), the packed 4-bit float E2M1 and
 * 4/2-bit integers (two or four per byte, low bits first), bool and string.
 *
 * Every element goes through one intermediate number (CpuNum, see
 * cpu_util.h): integers stay exact, floating point becomes a double (exact
 * for every source float type). Integer targets wrap (packed ones keep their
 * low bits); float to integer truncates toward zero and saturates. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_math_cast(OnyxKernelRegistry* r);

/* ========================================================================= */
/* Small floats                                                               */
/* ========================================================================= */

/* How a format spends its special codes. */
typedef enum MiniKind {
  MINI_FN,   /* E4M3FN: no infinity, NaN = S.1111.111 */
  MINI_IEEE, /* E5M2: infinities and NaNs like IEEE */
  MINI_FNUZ, /* no infinity, no -0, NaN = 0x80 */
  MINI_FP4   /* E2M1: neither infinity nor NaN; always saturates */
} MiniKind;

typedef struct MiniFmt {
  int ebits, mbits, bias;
  double maxv;      /* largest finite value */
  unsigned maxcode; /* its code */
  MiniKind kind;
} MiniFmt;

static const MiniFmt fmt_e4m3fn = {4, 3, 7, 448.0, 0x7E, MINI_FN};
static const MiniFmt fmt_e4m3fnuz = {4, 3, 8, 240.0, 0x7F, MINI_FNUZ};
static const MiniFmt fmt_e5m2 = {5, 2, 15, 57344.0, 0x7B, MINI_IEEE};
static const MiniFmt fmt_e5m2fnuz = {5, 2, 16, 57344.0, 0x7F, MINI_FNUZ};
static const MiniFmt fmt_e2m1 = {2, 1, 1, 6.0, 0x7, MINI_FP4};

static const MiniFmt* mini_fmt(int32_t type) {
  switch (type) {
  case ONYX_ELEM_FLOAT8E4M3FN:
    return &fmt_e4m3fn;
  case ONYX_ELEM_FLOAT8E4M3FNUZ:
    return &fmt_e4m3fnuz;
  case ONYX_ELEM_FLOAT8E5M2:
    return &fmt_e5m2;
  case ONYX_ELEM_FLOAT8E5M2FNUZ:
    return &fmt_e5m2fnuz;
  case ONYX_ELEM_FLOAT4E2M1:
    return &fmt_e2m1;
  default:
    return NULL;
  }
}

static double mini_decode(const MiniFmt* f, unsigned code) {
  unsigned sbit = 1u << (f->ebits + f->mbits);
  unsigned mag = code & (sbit - 1);
  bool neg = (code & sbit) != 0;
  unsigned field = mag >> f->mbits, mant = mag & ((1u << f->mbits) - 1);
  switch (f->kind) {
  case MINI_FN:
    if (mag == sbit - 1) return NAN;
    break;
  case MINI_IEEE:
    if (field == (1u << f->ebits) - 1) return mant ? NAN : neg ? -INFINITY : INFINITY;
    break;
  case MINI_FNUZ:
    if (code == sbit) return NAN;
    break;
  case MINI_FP4:
    break;
  }
  double v = field == 0 ? ldexp((double)mant, 1 - f->bias - f->mbits)
                        : ldexp(1.0 + ldexp((double)mant, -f->mbits), (int)field - f->bias);
  return neg ? -v : v;
}

/* Rounds x to nearest even at the format's precision. */
static unsigned mini_encode(const MiniFmt* f, double x, bool saturate) {
  unsigned sbit = 1u << (f->ebits + f->mbits);
  unsigned maxcode = f->maxcode;
  unsigned sign = signbit(x) ? sbit : 0;
  bool sat = saturate || f->kind == MINI_FP4;
  unsigned overflow = f->kind == MINI_FN     ? (sign | (sbit - 1))
                      : f->kind == MINI_IEEE ? (sign | (((1u << f->ebits) - 1) << f->mbits))
                      : f->kind == MINI_FNUZ ? sbit
                                             : (sign | maxcode);
  if (isnan(x)) {
    switch (f->kind) {
    case MINI_FN:
      return sbit - 1;
    case MINI_IEEE:
      return (((1u << f->ebits) - 1) << f->mbits) | (1u << (f->mbits - 1));
    case MINI_FNUZ:
      return sbit;
    case MINI_FP4:
      return sbit; /* no NaN: -0, as the ONNX reference does */
    }
  }
  if (isinf(x)) return sat ? (sign | maxcode) : overflow;
  double a = fabs(x);
  int emin = 1 - f->bias;
  int e = a == 0 ? emin : ilogb(a);
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - f->mbits);
  double r = nearbyint(a / q) * q;
  if (r > f->maxv) return sat ? (sign | maxcode) : overflow;
  if (r == 0) return f->kind == MINI_FNUZ ? 0 : sign;
  e = ilogb(r);
  unsigned code;
  if (e < emin)
    code = (unsigned)(r / ldexp(1.0, emin - f->mbits));
  else
    code = ((unsigned)(e + f->bias) << f->mbits) |
           ((unsigned)(r / ldexp(1.0, e - f->mbits)) - (1u << f->mbits));
  return sign | code;
}

/* E8M0: a power of two 2^(code - 127); 0xFF is NaN; no sign, no zero.
 * round_mode: 0 up, 1 down, 2 nearest (ties up). */
static double e8m0_decode(unsigned code) {
  return code == 0xFF ? NAN : ldexp(1.0, (int)code - 127);
}

static unsigned e8m0_encode(double x, bool saturate, int round_mode) {
  if (isnan(x)) return 0xFF;
  double a = fabs(x);
  if (isinf(a)) return saturate ? 0xFE : 0xFF;
  if (a == 0) return 0;
  int m_exp;
  double m = frexp(a, &m_exp); /* a = m * 2^m_exp, m in [0.5, 1) */
  int e = m_exp - 1;           /* a = (2m) * 2^e, 2m in [1, 2) */
  if (2 * m > 1.0) {
    if (round_mode == 0 || (round_mode == 2 && 2 * m >= 1.5)) e++;
  }
  int code = e + 127;
  if (code < 0) return 0;
  if (code > 254) return saturate ? 0xFE : 0xFF;
  return (unsigned)code;
}

/* For IsNaN/IsInf (cpu_math.c): an 8-bit float element as a double. */
double cpu_math_f8_value(int32_t type, uint8_t code);
double cpu_math_f8_value(int32_t type, uint8_t code) {
  const MiniFmt* f = mini_fmt(type);
  return f ? mini_decode(f, code) : e8m0_decode(code);
}

/* ========================================================================= */
/* Loading and storing any element                                            */
/* ========================================================================= */

/* Packed integers: bits per element, and whether they are signed. */
static int packed_bits(int32_t type, bool* is_signed) {
  *is_signed = type == ONYX_ELEM_INT4 || type == ONYX_ELEM_INT2;
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

static unsigned packed_get(const void* data, size_t i, int bits) {
  size_t per = 8 / (size_t)bits;
  unsigned byte = ((const uint8_t*)data)[i / per];
  return (byte >> ((i % per) * (size_t)bits)) & ((1u << bits) - 1);
}

/* The destination is zeroed before the first store. */
static void packed_put(void* data, size_t i, int bits, unsigned v) {
  size_t per = 8 / (size_t)bits;
  uint8_t* p = (uint8_t*)data + i / per;
  *p = (uint8_t)(*p | ((v & ((1u << bits) - 1)) << ((i % per) * (size_t)bits)));
}

static bool load_any(int32_t type, const void* data, size_t i, CpuNum* out) {
  const MiniFmt* f = mini_fmt(type);
  bool sgn;
  int bits = packed_bits(type, &sgn);
  if (f && bits) { /* float4 */
    *out = (CpuNum){.kind = CPU_NUM_FLT, .v.f = mini_decode(f, packed_get(data, i, bits))};
    return true;
  }
  if (f) {
    *out = (CpuNum){.kind = CPU_NUM_FLT, .v.f = mini_decode(f, ((const uint8_t*)data)[i])};
    return true;
  }
  if (type == ONYX_ELEM_FLOAT8E8M0) {
    *out = (CpuNum){.kind = CPU_NUM_FLT, .v.f = e8m0_decode(((const uint8_t*)data)[i])};
    return true;
  }
  if (bits) {
    unsigned v = packed_get(data, i, bits);
    if (sgn) {
      int64_t s = (int64_t)v;
      if (v & (1u << (bits - 1))) s -= (int64_t)1 << bits;
      *out = (CpuNum){.kind = CPU_NUM_SINT, .v.i = s};
    } else {
      *out = (CpuNum){.kind = CPU_NUM_UINT, .v.u = v};
    }
    return true;
  }
  return cpu_num_load(type, data, i, out);
}

/* The integer bits of v for a wrapping store: floating point truncates
 * toward zero and saturates to int64 (NaN gives 0). */
static uint64_t num_int_bits(CpuNum v) {
  switch (v.kind) {
  case CPU_NUM_SINT:
    return (uint64_t)v.v.i;
  case CPU_NUM_UINT:
    return v.v.u;
  default:
    if (isnan(v.v.f)) return 0;
    if (v.v.f <= -0x1p63) return (uint64_t)INT64_MIN;
    if (v.v.f >= 0x1p63) return (uint64_t)INT64_MAX;
    return (uint64_t)(int64_t)v.v.f;
  }
}

typedef struct CastOpts {
  bool saturate;
  int round_mode;
} CastOpts;

static bool store_any(int32_t type, void* data, size_t i, CpuNum v, const CastOpts* o) {
  const MiniFmt* f = mini_fmt(type);
  bool sgn;
  int bits = packed_bits(type, &sgn);
  if (f && bits) {
    packed_put(data, i, bits, mini_encode(f, cpu_num_as_double(v), true));
    return true;
  }
  if (f) {
    ((uint8_t*)data)[i] = (uint8_t)mini_encode(f, cpu_num_as_double(v), o->saturate);
    return true;
  }
  if (type == ONYX_ELEM_FLOAT8E8M0) {
    ((uint8_t*)data)[i] = (uint8_t)e8m0_encode(cpu_num_as_double(v), o->saturate, o->round_mode);
    return true;
  }
  if (bits) {
    packed_put(data, i, bits, (unsigned)(num_int_bits(v) & 0xFF));
    return true;
  }
  return cpu_num_store(type, data, i, v);
}

/* Numbers to text: integers exactly, floats with the fewest digits that
 * read back to the same value ("0.5", "1e+20", "NaN", "INF", "-INF"). */
static void format_num(CpuNum v, int32_t from, char* buf, size_t cap) {
  if (from == ONYX_ELEM_BOOL) {
    snprintf(buf, cap, "%d", v.v.u ? 1 : 0);
    return;
  }
  switch (v.kind) {
  case CPU_NUM_SINT:
    snprintf(buf, cap, "%lld", (long long)v.v.i);
    return;
  case CPU_NUM_UINT:
    snprintf(buf, cap, "%llu", (unsigned long long)v.v.u);
    return;
  default:
    break;
  }
  double d = v.v.f;
  if (isnan(d)) {
    snprintf(buf, cap, "NaN");
    return;
  }
  if (isinf(d)) {
    snprintf(buf, cap, d < 0 ? "-INF" : "INF");
    return;
  }
  bool single = from != ONYX_ELEM_FLOAT64;
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, d);
    double back = strtod(buf, NULL);
    if (single ? (float)back == (float)d : back == d) return;
  }
}

/* Text to a number: an integer literal stays exact, anything else goes
 * through strtod (which reads "inf", "nan", exponents). */
static bool parse_num(const char* s, CpuNum* out) {
  if (!s) s = "";
  char* end;
  errno = 0;
  long long i = strtoll(s, &end, 10);
  if (end != s && *end == 0 && errno == 0) {
    *out = (CpuNum){.kind = CPU_NUM_SINT, .v.i = i};
    return true;
  }
  errno = 0;
  unsigned long long u = strtoull(s, &end, 10);
  if (end != s && *end == 0 && errno == 0 && s[0] != '-') {
    *out = (CpuNum){.kind = CPU_NUM_UINT, .v.u = u};
    return true;
  }
  double d = strtod(s, &end);
  if (end == s) return false;
  while (*end == ' ')
    end++;
  if (*end) return false;
  *out = (CpuNum){.kind = CPU_NUM_FLT, .v.f = d};
  return true;
}

/* ========================================================================= */
/* Kernels                                                                    */
/* ========================================================================= */

typedef enum CastWhich { CAST_V1, CAST, CAST_LIKE } CastWhich;

typedef struct CastState {
  int32_t to; /* CastLike: from input 1 at run time */
  CastOpts o;
} CastState;

static OnyxStatus* cast_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  CastWhich which = (CastWhich)(uintptr_t)user;
  CastState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->o.saturate = cpu_host->node_attr_int(node, "saturate", 1) != 0;
  size_t len = 0;
  const char* rm = cpu_host->node_attr_string(node, "round_mode", &len);
  if (rm && len == 4 && memcmp(rm, "down", 4) == 0)
    s->o.round_mode = 1;
  else if (rm && len == 7 && memcmp(rm, "nearest", 7) == 0)
    s->o.round_mode = 2;
  else if (rm && !(len == 2 && memcmp(rm, "up", 2) == 0)) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'round_mode' must be up, down or nearest, is '%.*s'", (int)len, rm);
  }
  if (which == CAST_V1) {
    const char* name = cpu_host->node_attr_string(node, "to", &len);
    char buf[32] = {0};
    if (name && len < sizeof buf) memcpy(buf, name, len);
    s->to = cpu_elem_from_onnx_name(buf);
    if (s->to == ONYX_ELEM_UNDEFINED) {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "attribute 'to' names no type: '%s'", buf);
    }
  } else if (which == CAST) {
    int64_t to = cpu_host->node_attr_int(node, "to", ONYX_ELEM_UNDEFINED);
    if (to <= ONYX_ELEM_UNDEFINED || to >= ONYX_ELEM_TYPE_COUNT || to == ONYX_ELEM_COMPLEX64 ||
        to == ONYX_ELEM_COMPLEX128) {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "attribute 'to' is not a castable type: %lld",
                       (long long)to);
    }
    s->to = (int32_t)to;
  }
  *state = s;
  return NULL;
}

static bool is_packed(int32_t type) {
  bool sgn;
  return packed_bits(type, &sgn) != 0;
}

/* Plain loops for the conversions models use most; false when (from, to)
 * has none and the generic per-element path must run. Each gives exactly
 * the generic path's result (integer to float rounds once, to nearest). */
static bool cast_fast(int32_t from, int32_t to, const void* src, void* dst, size_t n) {
#define CAST_LOOP(FT, TT, EXPR)                                                                    \
  do {                                                                                             \
    const FT* restrict x_ = src;                                                                   \
    TT* restrict y_ = dst;                                                                         \
    for (size_t i = 0; i < n; i++) {                                                               \
      FT v = x_[i];                                                                                \
      y_[i] = (EXPR);                                                                              \
    }                                                                                              \
  } while (0)
#define PAIR(a, b) ((a)*ONYX_ELEM_TYPE_COUNT + (b))
  switch (PAIR(from, to)) {
  case PAIR(ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16):
    CAST_LOOP(float, uint16_t, cpu_f32_to_f16(v));
    return true;
  case PAIR(ONYX_ELEM_FLOAT16, ONYX_ELEM_FLOAT32):
    CAST_LOOP(uint16_t, float, cpu_f16_to_f32(v));
    return true;
  case PAIR(ONYX_ELEM_FLOAT32, ONYX_ELEM_BFLOAT16):
    CAST_LOOP(float, uint16_t, cpu_f32_to_bf16(v));
    return true;
  case PAIR(ONYX_ELEM_BFLOAT16, ONYX_ELEM_FLOAT32):
    CAST_LOOP(uint16_t, float, cpu_bf16_to_f32(v));
    return true;
  case PAIR(ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64):
    CAST_LOOP(float, double, (double)v);
    return true;
  case PAIR(ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT32):
    CAST_LOOP(double, float, (float)v);
    return true;
  case PAIR(ONYX_ELEM_INT64, ONYX_ELEM_FLOAT32):
    CAST_LOOP(int64_t, float, (float)v);
    return true;
  case PAIR(ONYX_ELEM_INT32, ONYX_ELEM_FLOAT32):
    CAST_LOOP(int32_t, float, (float)v);
    return true;
  case PAIR(ONYX_ELEM_INT64, ONYX_ELEM_INT32):
    CAST_LOOP(int64_t, int32_t, (int32_t)(uint32_t)(uint64_t)v);
    return true;
  case PAIR(ONYX_ELEM_INT32, ONYX_ELEM_INT64):
    CAST_LOOP(int32_t, int64_t, (int64_t)v);
    return true;
  case PAIR(ONYX_ELEM_BOOL, ONYX_ELEM_FLOAT32):
    CAST_LOOP(uint8_t, float, v ? 1.0f : 0.0f);
    return true;
  case PAIR(ONYX_ELEM_BOOL, ONYX_ELEM_INT64):
    CAST_LOOP(uint8_t, int64_t, v ? 1 : 0);
    return true;
  default:
    return false;
  }
#undef PAIR
#undef CAST_LOOP
}

static OnyxStatus* cast_run(const CastState* s, OnyxKernelContext* ctx, int32_t to) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t from = cpu_host->tensor_elem_type(x);
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(x);
  if (n == 0) return NULL;
  const void* src = cpu_host->tensor_data(x);
  void* dst = cpu_host->tensor_mutable_data(y);
  if (from == to) {
    if (!is_packed(from)) return cpu_copy_elems(y, 0, x, 0, n);
    cpu_memcpy(dst, src, cpu_host->tensor_byte_size(y));
    return NULL;
  }
  if (cast_fast(from, to, src, dst, n)) return NULL;
  if (is_packed(to)) memset(dst, 0, cpu_host->tensor_byte_size(y));
  char buf[64];
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    if (from == ONYX_ELEM_STRING) {
      const char* text = ((const char* const*)src)[i];
      if (!parse_num(text, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "element %zu ('%.40s') is not a number", i,
                             text ? text : "");
    } else if (!load_any(from, src, i, &v)) {
      goto unsupported;
    }
    if (to == ONYX_ELEM_STRING) {
      format_num(v, from, buf, sizeof buf);
      if ((st = cpu_host->tensor_set_string(y, i, buf, strlen(buf)))) return st;
    } else if (!store_any(to, dst, i, v, &s->o)) {
      goto unsupported;
    }
  }
  return NULL;
unsupported:
  return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "cast from %s to %s not supported",
                       cpu_elem_name(from), cpu_elem_name(to));
}

static OnyxStatus* cast_compute(void* state, OnyxKernelContext* ctx) {
  const CastState* s = state;
  return cast_run(s, ctx, s->to);
}

static OnyxStatus* castlike_compute(void* state, OnyxKernelContext* ctx) {
  const CastState* s = state;
  const OnyxTensor* like = cpu_host->ctx_input(ctx, 1);
  if (!like) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input 'target_type' is missing");
  return cast_run(s, ctx, cpu_host->tensor_elem_type(like));
}

/* BitCast: the same bytes seen as another type of the same width. */
typedef struct BitCastState {
  int32_t to;
} BitCastState;

static OnyxStatus* bitcast_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  int64_t to = cpu_host->node_attr_int(node, "to", ONYX_ELEM_UNDEFINED);
  if (to <= ONYX_ELEM_UNDEFINED || to >= ONYX_ELEM_TYPE_COUNT || to == ONYX_ELEM_STRING ||
      cpu_elem_size((int32_t)to) == 0)
    return cpu_error(node, ONYX_INVALID_MODEL, "attribute 'to' is not a fixed-size type: %lld",
                     (long long)to);
  BitCastState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->to = (int32_t)to;
  *state = s;
  return NULL;
}

static OnyxStatus* bitcast_compute(void* state, OnyxKernelContext* ctx) {
  const BitCastState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int32_t from = cpu_host->tensor_elem_type(x);
  if (from == ONYX_ELEM_STRING || cpu_elem_size(from) != cpu_elem_size(s->to))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%s and %s differ in width; BitCast needs equal widths",
                         cpu_elem_name(from), cpu_elem_name(s->to));
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  cpu_memcpy(cpu_host->tensor_mutable_data(y), cpu_host->tensor_data(x),
             cpu_host->tensor_elem_count(x) * cpu_elem_size(from));
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

static const int32_t castable[] = {
    ONYX_ELEM_FLOAT32,        ONYX_ELEM_UINT8,      ONYX_ELEM_INT8,
    ONYX_ELEM_UINT16,         ONYX_ELEM_INT16,      ONYX_ELEM_INT32,
    ONYX_ELEM_INT64,          ONYX_ELEM_STRING,     ONYX_ELEM_BOOL,
    ONYX_ELEM_FLOAT16,        ONYX_ELEM_FLOAT64,    ONYX_ELEM_UINT32,
    ONYX_ELEM_UINT64,         ONYX_ELEM_BFLOAT16,   ONYX_ELEM_FLOAT8E4M3FN,
    ONYX_ELEM_FLOAT8E4M3FNUZ, ONYX_ELEM_FLOAT8E5M2, ONYX_ELEM_FLOAT8E5M2FNUZ,
    ONYX_ELEM_UINT4,          ONYX_ELEM_INT4,       ONYX_ELEM_FLOAT4E2M1,
    ONYX_ELEM_FLOAT8E8M0,     ONYX_ELEM_UINT2,      ONYX_ELEM_INT2};
static const int32_t bitcastable[] = {
    ONYX_ELEM_FLOAT32,        ONYX_ELEM_UINT8,          ONYX_ELEM_INT8,
    ONYX_ELEM_UINT16,         ONYX_ELEM_INT16,          ONYX_ELEM_INT32,
    ONYX_ELEM_INT64,          ONYX_ELEM_BOOL,           ONYX_ELEM_FLOAT16,
    ONYX_ELEM_FLOAT64,        ONYX_ELEM_UINT32,         ONYX_ELEM_UINT64,
    ONYX_ELEM_COMPLEX64,      ONYX_ELEM_COMPLEX128,     ONYX_ELEM_BFLOAT16,
    ONYX_ELEM_FLOAT8E4M3FN,   ONYX_ELEM_FLOAT8E4M3FNUZ, ONYX_ELEM_FLOAT8E5M2,
    ONYX_ELEM_FLOAT8E5M2FNUZ, ONYX_ELEM_FLOAT8E8M0};

static const OnyxTypeConstraint cast_tc[] = {{"T1", castable, CPU_ARRAY_LEN(castable)},
                                             {"T2", castable, CPU_ARRAY_LEN(castable)}};
static const OnyxTypeConstraint bitcast_tc[] = {{"T1", bitcastable, CPU_ARRAY_LEN(bitcastable)},
                                                {"T2", bitcastable, CPU_ARRAY_LEN(bitcastable)}};

static const CpuKernelSpec cast_specs[] = {
    {"Cast", 1, 5, cast_tc, 2, cast_create, cast_compute, cpu_free_state, (void*)CAST_V1},
    {"Cast", 6, ONYX_OPSET_LATEST, cast_tc, 2, cast_create, cast_compute, cpu_free_state,
     (void*)CAST},
    {"CastLike", 15, ONYX_OPSET_LATEST, cast_tc, 2, cast_create, castlike_compute, cpu_free_state,
     (void*)CAST_LIKE},
    {"BitCast", 26, ONYX_OPSET_LATEST, bitcast_tc, 2, bitcast_create, bitcast_compute,
     cpu_free_state, NULL},
};

OnyxStatus* cpu_register_math_cast(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, cast_specs, CPU_ARRAY_LEN(cast_specs));
}
