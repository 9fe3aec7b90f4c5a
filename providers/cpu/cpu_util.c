/* cpu_util.c — helpers shared by the CPU provider's kernels (see cpu_util.h). */
#include "cpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- Element types -------------------------------------------------------- */

typedef struct CpuTypeInfo {
  size_t size;
  const char* name; /* ours, for messages */
  const char* onnx; /* TensorProto.DataType name, for Cast-1 */
} CpuTypeInfo;

static const CpuTypeInfo cpu_type_info[ONYX_ELEM_TYPE_COUNT] = {
    [ONYX_ELEM_FLOAT32] = {4, "float32", "FLOAT"},
    [ONYX_ELEM_UINT8] = {1, "uint8", "UINT8"},
    [ONYX_ELEM_INT8] = {1, "int8", "INT8"},
    [ONYX_ELEM_UINT16] = {2, "uint16", "UINT16"},
    [ONYX_ELEM_INT16] = {2, "int16", "INT16"},
    [ONYX_ELEM_INT32] = {4, "int32", "INT32"},
    [ONYX_ELEM_INT64] = {8, "int64", "INT64"},
    [ONYX_ELEM_STRING] = {sizeof(char*), "string", "STRING"},
    [ONYX_ELEM_BOOL] = {1, "bool", "BOOL"},
    [ONYX_ELEM_FLOAT16] = {2, "float16", "FLOAT16"},
    [ONYX_ELEM_FLOAT64] = {8, "float64", "DOUBLE"},
    [ONYX_ELEM_UINT32] = {4, "uint32", "UINT32"},
    [ONYX_ELEM_UINT64] = {8, "uint64", "UINT64"},
    [ONYX_ELEM_COMPLEX64] = {8, "complex64", "COMPLEX64"},
    [ONYX_ELEM_COMPLEX128] = {16, "complex128", "COMPLEX128"},
    [ONYX_ELEM_BFLOAT16] = {2, "bfloat16", "BFLOAT16"},
    [ONYX_ELEM_FLOAT8E4M3FN] = {1, "float8e4m3fn", "FLOAT8E4M3FN"},
    [ONYX_ELEM_FLOAT8E4M3FNUZ] = {1, "float8e4m3fnuz", "FLOAT8E4M3FNUZ"},
    [ONYX_ELEM_FLOAT8E5M2] = {1, "float8e5m2", "FLOAT8E5M2"},
    [ONYX_ELEM_FLOAT8E5M2FNUZ] = {1, "float8e5m2fnuz", "FLOAT8E5M2FNUZ"},
    [ONYX_ELEM_UINT4] = {0, "uint4", "UINT4"},
    [ONYX_ELEM_INT4] = {0, "int4", "INT4"},
    [ONYX_ELEM_FLOAT4E2M1] = {0, "float4e2m1", "FLOAT4E2M1"},
    [ONYX_ELEM_FLOAT8E8M0] = {1, "float8e8m0", "FLOAT8E8M0"},
    [ONYX_ELEM_UINT2] = {0, "uint2", "UINT2"},
    [ONYX_ELEM_INT2] = {0, "int2", "INT2"},
};

static const CpuTypeInfo* cpu_type(int32_t type) {
  if (type <= 0 || type >= ONYX_ELEM_TYPE_COUNT || !cpu_type_info[type].name) return NULL;
  return &cpu_type_info[type];
}

size_t cpu_elem_size(int32_t type) {
  const CpuTypeInfo* t = cpu_type(type);
  return t ? t->size : 0;
}

const char* cpu_elem_name(int32_t type) {
  const CpuTypeInfo* t = cpu_type(type);
  return t ? t->name : "unknown type";
}

int32_t cpu_elem_from_onnx_name(const char* name) {
  for (int32_t i = 1; name && i < ONYX_ELEM_TYPE_COUNT; i++)
    if (cpu_type_info[i].onnx && strcmp(cpu_type_info[i].onnx, name) == 0) return i;
  return ONYX_ELEM_UNDEFINED;
}

/* --- Errors ----------------------------------------------------------------- */

static OnyxStatus* cpu_error_v(const OnyxNode* node, OnyxStatusCode code, const char* fmt,
                               va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (!node) return cpu_host->status_create(code, "CPU kernel: %s", msg);
  const char* name = cpu_host->node_name(node);
  return cpu_host->status_create(code, "%s node '%s': %s", cpu_host->node_op_type(node),
                                 name ? name : "", msg);
}

OnyxStatus* cpu_error(const OnyxNode* node, OnyxStatusCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  OnyxStatus* st = cpu_error_v(node, code, fmt, ap);
  va_end(ap);
  return st;
}

OnyxStatus* cpu_ctx_error(const OnyxKernelContext* ctx, OnyxStatusCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  OnyxStatus* st = cpu_error_v(cpu_host->ctx_node(ctx), code, fmt, ap);
  va_end(ap);
  return st;
}

OnyxStatus* cpu_oom(const OnyxKernelContext* ctx) {
  return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory");
}

/* --- Cancellation --------------------------------------------------------------- */

bool cpu_should_stop(const OnyxKernelContext* ctx) {
  /* ctx_should_stop arrived with ABI 1.1: an older host's table is shorter. */
  if (cpu_host->struct_size <
      offsetof(OnyxHostApi, ctx_should_stop) + sizeof cpu_host->ctx_should_stop)
    return false;
  return cpu_host->ctx_should_stop && cpu_host->ctx_should_stop(ctx) != 0;
}

OnyxStatus* cpu_cancelled(const OnyxKernelContext* ctx, const char* op) {
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  if (!op) op = node ? cpu_host->node_op_type(node) : "kernel";
  return cpu_ctx_error(ctx, ONYX_CANCELLED, "%s stopped: the run was cancelled", op);
}

/* --- Reading inputs ------------------------------------------------------------ */

static OnyxStatus* cpu_check_int_tensor(const OnyxKernelContext* ctx, const OnyxTensor* t,
                                        const char* what) {
  int32_t type = cpu_host->tensor_elem_type(t);
  if (type != ONYX_ELEM_INT64 && type != ONYX_ELEM_INT32)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input '%s' must be int32 or int64, not %s",
                         what, cpu_elem_name(type));
  if (cpu_host->tensor_rank(t) > 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input '%s' must be 1-D, got rank %zu", what,
                         cpu_host->tensor_rank(t));
  return NULL;
}

static void cpu_ints_to_i64(const OnyxTensor* t, int64_t* out, size_t n) {
  const void* data = cpu_host->tensor_data(t);
  if (cpu_host->tensor_elem_type(t) == ONYX_ELEM_INT64) {
    cpu_memcpy(out, data, n * sizeof(int64_t));
    return;
  }
  const int32_t* p = data;
  for (size_t i = 0; i < n; i++)
    out[i] = p[i];
}

OnyxStatus* cpu_read_ints(const OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                          int64_t* out, size_t cap, size_t* count) {
  OnyxStatus* st = cpu_check_int_tensor(ctx, t, what);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(t);
  if (n > cap)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "input '%s' has %zu values, at most %zu allowed", what, n, cap);
  cpu_ints_to_i64(t, out, n);
  *count = n;
  return NULL;
}

OnyxStatus* cpu_read_ints_scratch(OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                                  int64_t** out, size_t* count) {
  OnyxStatus* st = cpu_check_int_tensor(ctx, t, what);
  if (st) return st;
  size_t n = cpu_host->tensor_elem_count(t);
  int64_t* buf = cpu_host->ctx_scratch(ctx, (n ? n : 1) * sizeof(int64_t));
  if (!buf) return cpu_oom(ctx);
  cpu_ints_to_i64(t, buf, n);
  *out = buf;
  *count = n;
  return NULL;
}

bool cpu_norm_axis(int64_t axis, size_t rank, bool inclusive, size_t* out) {
  int64_t r = (int64_t)rank;
  int64_t hi = inclusive ? r : r - 1;
  if (axis < -r || axis > hi) return false;
  *out = (size_t)(axis < 0 ? axis + r : axis);
  return true;
}

OnyxStatus* cpu_mark_axes(const OnyxKernelContext* ctx, const int64_t* axes, size_t n, size_t rank,
                          bool* mark) {
  for (size_t i = 0; i < n; i++) {
    size_t d;
    if (!cpu_norm_axis(axes[i], rank, false, &d) || mark[d])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "axis %lld is out of range for rank %zu or repeated", (long long)axes[i],
                           rank);
    mark[d] = true;
  }
  return NULL;
}

size_t cpu_dims_product(const int64_t* dims, size_t begin, size_t end) {
  size_t p = 1;
  for (size_t i = begin; i < end; i++)
    p *= (size_t)dims[i];
  return p;
}

int cpu_node_const_flag(const OnyxNode* node, size_t i) {
  if (i >= cpu_host->node_input_count(node)) return 0;
  const OnyxValueInfo* v = cpu_host->node_input(node, i);
  if (!v) return 0;
  const OnyxTensor* t = cpu_host->value_constant(v);
  if (!t) return -1;
  CpuNum x;
  if (cpu_host->tensor_elem_count(t) == 0 ||
      !cpu_num_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), 0, &x))
    return 0;
  return cpu_num_as_double(x) != 0.0;
}

/* --- float16 / bfloat16 ----------------------------------------------------------- */

float cpu_f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Rounds |x| to a binary format with `mbits` mantissa bits and exponent bias
 * `bias` (nearest even, by nearbyint in the default rounding mode). Scaling by
 * powers of two is exact, so there is a single rounding. */
static uint32_t cpu_round_to_minifloat(double a, int mbits, int bias, double overflow) {
  uint32_t inf = (uint32_t)(2 * bias + 1) << mbits;
  if (a >= overflow) return inf;
  double min_normal = ldexp(1.0, 1 - bias);
  if (a < min_normal) return (uint32_t)nearbyint(ldexp(a, bias - 1 + mbits));
  int e;
  double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  double mant = nearbyint(ldexp(2.0 * f - 1.0, mbits));
  /* A mantissa that rounds up to 2^mbits carries into the exponent. */
  return ((uint32_t)(e - 1 + bias) << mbits) + (uint32_t)mant;
}

uint16_t cpu_f64_to_f16(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return sign | 0x7e00;
  /* 65520 is halfway between 65504 (max) and 2^16: ties to even -> inf. */
  return sign | (uint16_t)cpu_round_to_minifloat(fabs(x), 10, 15, 65520.0);
}

float cpu_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t cpu_f64_to_bf16(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return sign | 0x7fc0;
  double overflow = ldexp(2.0 - ldexp(1.0, -8), 127);
  return sign | (uint16_t)cpu_round_to_minifloat(fabs(x), 7, 127, overflow);
}

uint16_t cpu_f32_to_bf16(float x) {
  return cpu_f64_to_bf16(x);
}

/* --- Scalars ------------------------------------------------------------------------ */

bool cpu_num_load(int32_t type, const void* data, size_t i, CpuNum* out) {
  switch (type) {
#define CPU_LOAD(E, T, K, F)                                                                       \
  case E:                                                                                          \
    out->kind = K;                                                                                 \
    out->v.F = ((const T*)data)[i];                                                                \
    return true;
    CPU_LOAD(ONYX_ELEM_INT8, int8_t, CPU_NUM_SINT, i)
    CPU_LOAD(ONYX_ELEM_INT16, int16_t, CPU_NUM_SINT, i)
    CPU_LOAD(ONYX_ELEM_INT32, int32_t, CPU_NUM_SINT, i)
    CPU_LOAD(ONYX_ELEM_INT64, int64_t, CPU_NUM_SINT, i)
    CPU_LOAD(ONYX_ELEM_BOOL, uint8_t, CPU_NUM_UINT, u)
    CPU_LOAD(ONYX_ELEM_UINT8, uint8_t, CPU_NUM_UINT, u)
    CPU_LOAD(ONYX_ELEM_UINT16, uint16_t, CPU_NUM_UINT, u)
    CPU_LOAD(ONYX_ELEM_UINT32, uint32_t, CPU_NUM_UINT, u)
    CPU_LOAD(ONYX_ELEM_UINT64, uint64_t, CPU_NUM_UINT, u)
    CPU_LOAD(ONYX_ELEM_FLOAT32, float, CPU_NUM_FLT, f)
    CPU_LOAD(ONYX_ELEM_FLOAT64, double, CPU_NUM_FLT, f)
#undef CPU_LOAD
  case ONYX_ELEM_FLOAT16:
    out->kind = CPU_NUM_FLT;
    out->v.f = cpu_f16_to_f32(((const uint16_t*)data)[i]);
    return true;
  case ONYX_ELEM_BFLOAT16:
    out->kind = CPU_NUM_FLT;
    out->v.f = cpu_bf16_to_f32(((const uint16_t*)data)[i]);
    return true;
  default:
    return false;
  }
}

double cpu_num_as_double(CpuNum v) {
  switch (v.kind) {
  case CPU_NUM_SINT:
    return (double)v.v.i;
  case CPU_NUM_UINT:
    return (double)v.v.u;
  default:
    return v.v.f;
  }
}

/* The integer a float converts to: truncated, saturated to [lo, hi], NaN 0. */
static int64_t cpu_f2i(double f, int64_t lo, int64_t hi) {
  if (isnan(f)) return 0;
  double t = trunc(f);
  if (t <= (double)lo) return lo;
  if (t >= (double)hi) return hi; /* (double)INT64_MAX rounds up to 2^63: still exact here */
  return (int64_t)t;
}

static uint64_t cpu_f2u(double f, uint64_t hi) {
  if (isnan(f)) return 0;
  double t = trunc(f);
  if (t <= 0) return 0;
  if (t >= (double)hi) return hi;
  return (uint64_t)t;
}

/* The bits of an integer result: wrapped for integer sources, saturated for
 * floating-point ones. Signed limits given for signed targets. */
static uint64_t cpu_int_bits(CpuNum v, bool is_signed, int64_t lo, uint64_t hi) {
  switch (v.kind) {
  case CPU_NUM_SINT:
    return (uint64_t)v.v.i;
  case CPU_NUM_UINT:
    return v.v.u;
  default:
    return is_signed ? (uint64_t)cpu_f2i(v.v.f, lo, (int64_t)hi) : cpu_f2u(v.v.f, hi);
  }
}

bool cpu_num_store(int32_t type, void* data, size_t i, CpuNum v) {
  switch (type) {
#define CPU_STORE_INT(E, T, S, LO, HI)                                                             \
  case E:                                                                                          \
    ((T*)data)[i] = (T)cpu_int_bits(v, S, LO, HI);                                                 \
    return true;
    CPU_STORE_INT(ONYX_ELEM_INT8, int8_t, true, INT8_MIN, INT8_MAX)
    CPU_STORE_INT(ONYX_ELEM_INT16, int16_t, true, INT16_MIN, INT16_MAX)
    CPU_STORE_INT(ONYX_ELEM_INT32, int32_t, true, INT32_MIN, INT32_MAX)
    CPU_STORE_INT(ONYX_ELEM_INT64, int64_t, true, INT64_MIN, INT64_MAX)
    CPU_STORE_INT(ONYX_ELEM_UINT8, uint8_t, false, 0, UINT8_MAX)
    CPU_STORE_INT(ONYX_ELEM_UINT16, uint16_t, false, 0, UINT16_MAX)
    CPU_STORE_INT(ONYX_ELEM_UINT32, uint32_t, false, 0, UINT32_MAX)
    CPU_STORE_INT(ONYX_ELEM_UINT64, uint64_t, false, 0, UINT64_MAX)
#undef CPU_STORE_INT
  case ONYX_ELEM_BOOL:
    ((uint8_t*)data)[i] = v.kind == CPU_NUM_FLT ? v.v.f != 0.0 : v.v.u != 0;
    return true;
  case ONYX_ELEM_FLOAT32:
    /* Straight from the integer: going through double could round twice. */
    ((float*)data)[i] = v.kind == CPU_NUM_SINT   ? (float)v.v.i
                        : v.kind == CPU_NUM_UINT ? (float)v.v.u
                                                 : (float)v.v.f;
    return true;
  case ONYX_ELEM_FLOAT64:
    ((double*)data)[i] = cpu_num_as_double(v);
    return true;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)data)[i] = cpu_f64_to_f16(cpu_num_as_double(v));
    return true;
  case ONYX_ELEM_BFLOAT16:
    ((uint16_t*)data)[i] = cpu_f64_to_bf16(cpu_num_as_double(v));
    return true;
  default:
    return false;
  }
}

/* --- Broadcasting ------------------------------------------------------------------- */

/* Dim d (counted in the output's rank) of a shape right-aligned to it. */
static int64_t cpu_aligned_dim(const int64_t* dims, size_t rank, size_t out_rank, size_t d) {
  size_t pad = out_rank - rank;
  return d < pad ? 1 : dims[d - pad];
}

OnyxStatus* cpu_bcast_shape(const OnyxKernelContext* ctx, size_t n, const int64_t* const* dims,
                            const size_t* ranks, int64_t* out_dims, size_t* out_rank) {
  size_t r = 0;
  for (size_t k = 0; k < n; k++)
    r = ranks[k] > r ? ranks[k] : r;
  if (r > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds the CPU provider's %d", r,
                         CPU_MAX_RANK);
  for (size_t d = 0; d < r; d++) {
    int64_t out = 1;
    for (size_t k = 0; k < n; k++) {
      if (ranks[k] > r) continue;
      int64_t v = cpu_aligned_dim(dims[k], ranks[k], r, d);
      if (v == 1 || v == out) continue;
      if (out != 1)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "shapes cannot broadcast: dim %zu is %lld in one input and %lld in "
                             "input %zu",
                             d, (long long)out, (long long)v, k);
      out = v;
    }
    out_dims[d] = out;
  }
  *out_rank = r;
  return NULL;
}

void cpu_bcast_plan(CpuBcast* b, const int64_t* out_dims, size_t out_rank, size_t n,
                    const int64_t* const* dims, const size_t* ranks) {
  b->n_in = n;
  size_t count = 0;
  /* The output was allocated, so its count fits; 0 also when it does not. */
  b->count = cpu_dims_count(out_dims, out_rank, &count) ? count : 0;
  if (b->count == 0) {
    /* Nothing runs. The other dims of an empty tensor may be as large as a
     * model declares (0 x 2^62 x 3): their strides would overflow, so none
     * are computed. A non-empty output holds every input's elements, so
     * below every stride and product fits. */
    b->rank = 1;
    b->dims[0] = 0;
    for (size_t k = 0; k < n; k++)
      b->strides[k][0] = 0;
    return;
  }
  int64_t full[CPU_BCAST_MAX_IN][CPU_MAX_RANK];
  for (size_t k = 0; k < n; k++) {
    int64_t s = 1;
    for (size_t d = out_rank; d-- > 0;) {
      int64_t v = cpu_aligned_dim(dims[k], ranks[k], out_rank, d);
      full[k][d] = v == 1 ? 0 : s;
      s *= v;
    }
  }
  size_t r = 0;
  for (size_t d = 0; d < out_rank; d++) {
    if (out_dims[d] == 1) continue; /* contributes nothing to any offset */
    bool merge = r > 0;
    for (size_t k = 0; merge && k < n; k++)
      merge = b->strides[k][r - 1] == full[k][d] * out_dims[d];
    if (merge) {
      b->dims[r - 1] *= out_dims[d];
      for (size_t k = 0; k < n; k++)
        b->strides[k][r - 1] = full[k][d];
      continue;
    }
    b->dims[r] = out_dims[d];
    for (size_t k = 0; k < n; k++)
      b->strides[k][r] = full[k][d];
    r++;
  }
  if (r == 0) { /* a scalar output: one row of one element */
    b->dims[0] = 1;
    for (size_t k = 0; k < n; k++)
      b->strides[k][0] = 0;
    r = 1;
  }
  b->rank = r;
}

void cpu_bcast_run(const CpuBcast* b, CpuBcastRowFn fn, void* user) {
  if (b->count == 0) return;
  size_t r = b->rank, n = b->n_in;
  size_t len = (size_t)b->dims[r - 1];
  int64_t idx[CPU_MAX_RANK] = {0}, off[CPU_BCAST_MAX_IN] = {0}, step[CPU_BCAST_MAX_IN];
  for (size_t k = 0; k < n; k++)
    step[k] = b->strides[k][r - 1];
  for (size_t out = 0; out < b->count; out += len) {
    fn(user, off, step, out, len);
    /* Advance the outer dims like an odometer. */
    for (size_t d = r - 1; d-- > 0;) {
      for (size_t k = 0; k < n; k++)
        off[k] += b->strides[k][d];
      if (++idx[d] < b->dims[d]) break;
      for (size_t k = 0; k < n; k++)
        off[k] -= b->strides[k][d] * b->dims[d];
      idx[d] = 0;
    }
  }
}

/* --- Copies --------------------------------------------------------------------------- */

void cpu_memcpy(void* dst, const void* src, size_t n) {
  if (n) memcpy(dst, src, n);
}

/* Copies string si of src to di of dst with its byte length, NUL bytes
 * included (a 1.0 host has no tensor_string_len: up to the first NUL). */
static OnyxStatus* cpu_copy_string(OnyxTensor* dst, size_t di, const OnyxTensor* src, size_t si) {
  const OnyxHostApi* H = cpu_host;
  const char* s = H->tensor_string(src, si);
  if (!s) s = "";
  bool has_len =
      H->struct_size >= offsetof(OnyxHostApi, tensor_string_len) + sizeof H->tensor_string_len &&
      H->tensor_string_len;
  return H->tensor_set_string(dst, di, s, has_len ? H->tensor_string_len(src, si) : strlen(s));
}

OnyxStatus* cpu_copy_elems(OnyxTensor* dst, size_t dst_off, const OnyxTensor* src, size_t src_off,
                           size_t n) {
  int32_t type = cpu_host->tensor_elem_type(src);
  if (type == ONYX_ELEM_STRING) {
    for (size_t i = 0; i < n; i++) {
      OnyxStatus* st = cpu_copy_string(dst, dst_off + i, src, src_off + i);
      if (st) return st;
    }
    return NULL;
  }
  size_t es = cpu_elem_size(type);
  if (n == 0) return NULL;
  cpu_memcpy((char*)cpu_host->tensor_mutable_data(dst) + dst_off * es,
             (const char*)cpu_host->tensor_data(src) + src_off * es, n * es);
  return NULL;
}

/* One row of a strided copy: n elements, source step `step` elements. */
static void cpu_copy_row(char* d, const char* s, size_t es, int64_t step, size_t n) {
  if (step == 1) {
    cpu_memcpy(d, s, n * es);
    return;
  }
  ptrdiff_t sb = (ptrdiff_t)step * (ptrdiff_t)es;
  switch (es) { /* constant sizes let the compiler turn memcpy into moves */
  case 1:
    for (size_t i = 0; i < n; i++, s += sb)
      d[i] = *s;
    break;
  case 2:
    for (size_t i = 0; i < n; i++, s += sb)
      memcpy(d + 2 * i, s, 2);
    break;
  case 4:
    for (size_t i = 0; i < n; i++, s += sb)
      memcpy(d + 4 * i, s, 4);
    break;
  case 8:
    for (size_t i = 0; i < n; i++, s += sb)
      memcpy(d + 8 * i, s, 8);
    break;
  default:
    for (size_t i = 0; i < n; i++, s += sb)
      memcpy(d + es * i, s, es);
    break;
  }
}

OnyxStatus* cpu_copy_strided(OnyxTensor* dst, const OnyxTensor* src, size_t rank,
                             const int64_t* dims, const int64_t* src_strides, int64_t src_offset) {
  return cpu_copy_strided_ctx(NULL, dst, src, rank, dims, src_strides, src_offset);
}

/* Rows [r0, r1) of a strided copy of fixed-size elements (rows of `len`
 * elements along the last axis): the source offset of row r0 from its
 * index, then an odometer over the outer axes. */
typedef struct CpuStridedJob {
  char* d;
  const char* s;
  size_t es, len, rank;
  const int64_t* dims;
  const int64_t* strides;
  int64_t offset;
  CpuStop stop;
} CpuStridedJob;

static void cpu_strided_rows(void* user, size_t r0, size_t r1) {
  CpuStridedJob* j = user;
  const size_t rank = j->rank;
  int64_t idx[CPU_MAX_RANK] = {0}, off = j->offset;
  size_t r = r0, polled = 0;
  for (size_t k = rank ? rank - 1 : 0; k-- > 0;) {
    idx[k] = (int64_t)(r % (size_t)j->dims[k]);
    r /= (size_t)j->dims[k];
    off += idx[k] * j->strides[k];
  }
  const int64_t step = rank ? j->strides[rank - 1] : 0;
  for (size_t row = r0; row < r1; row++) {
    if (cpu_stop_poll(&j->stop, &polled, j->len)) return;
    cpu_copy_row(j->d + row * j->len * j->es, j->s + off * (int64_t)j->es, j->es, step, j->len);
    for (size_t k = rank ? rank - 1 : 0; k-- > 0;) {
      off += j->strides[k];
      if (++idx[k] < j->dims[k]) break;
      off -= j->strides[k] * j->dims[k];
      idx[k] = 0;
    }
  }
}

/* Copies of at least this many bytes are split by rows over the kernel's
 * thread pool (each row is written by one task, so the result does not
 * depend on the thread count); smaller ones run on the calling thread. */
#define CPU_COPY_PARALLEL_BYTES ((size_t)256 << 10)

OnyxStatus* cpu_copy_strided_ctx(const OnyxKernelContext* ctx, OnyxTensor* dst,
                                 const OnyxTensor* src, size_t rank, const int64_t* dims,
                                 const int64_t* src_strides, int64_t src_offset) {
  size_t count = cpu_dims_product(dims, 0, rank), next_poll = CPU_STOP_INTERVAL;
  if (count == 0) return NULL;
  int32_t type = cpu_host->tensor_elem_type(src);
  size_t es = cpu_elem_size(type);
  size_t len = rank ? (size_t)dims[rank - 1] : 1;
  int64_t step = rank ? src_strides[rank - 1] : 0;
  char* d = cpu_host->tensor_mutable_data(dst);
  const char* s = cpu_host->tensor_data(src);
  OnyxThreadPool* pool = ctx ? cpu_host->ctx_thread_pool(ctx) : NULL;
  if (type != ONYX_ELEM_STRING && es && pool && count / len > 1 &&
      count >= CPU_COPY_PARALLEL_BYTES / es) {
    CpuStridedJob j = {.d = d,
                       .s = s,
                       .es = es,
                       .len = len,
                       .rank = rank,
                       .dims = dims,
                       .strides = src_strides,
                       .offset = src_offset,
                       .stop = {.ctx = ctx}};
    cpu_host->parallel_for(pool, count / len, cpu_strided_rows, &j);
    return cpu_stop_seen(&j.stop) ? cpu_cancelled(ctx, NULL) : NULL;
  }
  int64_t idx[CPU_MAX_RANK] = {0}, off = src_offset;
  for (size_t out = 0; out < count; out += len) {
    if (ctx && out >= next_poll) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      next_poll = out + CPU_STOP_INTERVAL;
    }
    if (type == ONYX_ELEM_STRING) {
      for (size_t i = 0; i < len; i++) {
        OnyxStatus* st = cpu_copy_string(dst, out + i, src, (size_t)(off + (int64_t)i * step));
        if (st) return st;
      }
    } else {
      cpu_copy_row(d + out * es, s + off * (int64_t)es, es, step, len);
    }
    for (size_t k = rank ? rank - 1 : 0; k-- > 0;) {
      off += src_strides[k];
      if (++idx[k] < dims[k]) break;
      off -= src_strides[k] * dims[k];
      idx[k] = 0;
    }
  }
  return NULL;
}

/* --- Registration ----------------------------------------------------------------------- */

OnyxStatus* cpu_register_specs(OnyxKernelRegistry* r, const CpuKernelSpec* specs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const CpuKernelSpec* s = &specs[i];
    OnyxKernelDef d = {
        .struct_size = sizeof d,
        .domain = "",
        .op_type = s->op_type,
        .since_version = s->since_version,
        .end_version = s->end_version,
        .type_constraints = s->tc,
        .type_constraint_count = s->tc_count,
        .create = s->create,
        .compute = s->compute,
        .release = s->release,
        .user_data = s->user_data,
    };
    OnyxStatus* st = cpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}

void cpu_free_state(void* state) {
  free(state);
}

/* A product past int64 saturates: only a tensor with a zero dim can have one
 * (any other's element count was checked), and no element of it is ever
 * addressed through the strides. */
void cpu_dense_strides(const int64_t* dims, size_t rank, int64_t* strides) {
  int64_t s = 1;
  for (size_t d = rank; d-- > 0;) {
    strides[d] = s;
    if (__builtin_mul_overflow(s, dims[d], &s)) s = INT64_MAX;
  }
}

OnyxStatus* cpu_check_rank(const OnyxKernelContext* ctx, size_t rank) {
  if (rank <= CPU_MAX_RANK) return NULL;
  return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds the CPU provider's %d", rank,
                       CPU_MAX_RANK);
}

OnyxStatus* cpu_f32_input(OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                          const float** out) {
  const OnyxHostApi* H = cpu_host;
  size_t n = H->tensor_elem_count(t);
  int32_t type = H->tensor_elem_type(t);
  const void* data = H->tensor_data(t);
  if (type == ONYX_ELEM_FLOAT32) {
    *out = data;
    return NULL;
  }
  float* f = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *f);
  if (!f) return cpu_oom(ctx);
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    if (!cpu_num_load(type, data, i, &v))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s has element type %s, not a number", what,
                           cpu_elem_name(type));
    f[i] = (float)cpu_num_as_double(v);
  }
  *out = f;
  return NULL;
}

OnyxStatus* cpu_f32_output(OnyxKernelContext* ctx, size_t i, const int64_t* dims, size_t rank,
                           const float* src) {
  const OnyxHostApi* H = cpu_host;
  if (i >= H->ctx_output_count(ctx)) return NULL;
  const OnyxNode* node = H->ctx_node(ctx);
  if (node && !H->node_output(node, i)) return NULL;
  OnyxTensor* t = NULL;
  OnyxStatus* st = H->ctx_output(ctx, i, dims, rank, &t);
  if (st) return st;
  int32_t type = H->tensor_elem_type(t);
  size_t n = cpu_dims_product(dims, 0, rank);
  void* data = H->tensor_mutable_data(t);
  if (type == ONYX_ELEM_FLOAT32) {
    cpu_memcpy(data, src, n * sizeof *src);
    return NULL;
  }
  for (size_t k = 0; k < n; k++)
    cpu_num_store(type, data, k, (CpuNum){.kind = CPU_NUM_FLT, .v.f = src[k]});
  return NULL;
}

int cpu_isa_level(void) {
  static _Atomic int cached = -1;
  int p = cached;
  if (p < 0) {
    p = CPU_ISA_GENERIC;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
      p = CPU_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      p = CPU_ISA_AVX2;
    const char* cap = getenv("ONYX_CPU_ISA");
    if (cap && !strcmp(cap, "generic")) p = CPU_ISA_GENERIC;
    if (cap && !strcmp(cap, "avx2") && p > CPU_ISA_AVX2) p = CPU_ISA_AVX2;
#endif
    cached = p;
  }
  return p;
}
