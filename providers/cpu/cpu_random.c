/* cpu_random.c — random generators: RandomUniform, RandomNormal, their
 * *Like forms, Multinomial and Bernoulli.
 *
 * The generator is Onyx's own and counter-based: value i of run r of a
 * kernel is splitmix64's output function applied to (run key + (i + 1) *
 * golden ratio), where the run key mixes the kernel's key with r. The key
 * comes from the `seed` attribute when it is given (the same seed gives the
 * same sequence of outputs in every session: run 0, run 1, ...), else from
 * the clock and a process-wide counter. Values therefore differ from ONNX
 * Runtime's and numpy's for the same seed; only the distributions agree.
 * Normal values use the Box-Muller transform; RandomUniform's values lie in
 * [low, high) after rounding to the output type. */
#include "cpu_quant.h"
#include "cpu_util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t draw(uint64_t run_key, uint64_t i) {
  return mix64(run_key + (i + 1) * GOLDEN);
}

/* Uniform in [0, 1) and in (0, 1]. */
static double unit(uint64_t v) {
  return (double)(v >> 11) * 0x1.0p-53;
}
static double unit_open0(uint64_t v) {
  return ((double)(v >> 11) + 1.0) * 0x1.0p-53;
}

typedef enum RandKind { R_UNIFORM, R_NORMAL, R_MULTINOMIAL, R_BERNOULLI } RandKind;

typedef struct RandState {
  RandKind kind;
  bool like; /* shape from the input */
  uint64_t key;
  atomic_uint_fast64_t runs;
  double a, b; /* low/high or mean/scale */
  int32_t out_type;
  int64_t sample_size;
  int64_t shape[CPU_MAX_RANK];
  size_t rank;
} RandState;

static atomic_uint_fast64_t g_unseeded;

static OnyxStatus* rand_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  RandState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  const uintptr_t u = (uintptr_t)user_data;
  s->kind = (RandKind)(u & 7);
  s->like = (u & 8) != 0;
  OnyxStatus* st = NULL;
  if (cpu_host->node_attr_type(node, "seed") == ONYX_ATTR_FLOAT) {
    const float seed = cpu_host->node_attr_float(node, "seed", 0.0f);
    uint32_t bits;
    memcpy(&bits, &seed, sizeof bits);
    s->key = mix64(bits ^ 0x5EEDULL);
  } else {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    s->key = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                   mix64(atomic_fetch_add(&g_unseeded, 1) + (uintptr_t)s));
  }
  atomic_init(&s->runs, 0);
  if (s->kind == R_UNIFORM) {
    s->a = cpu_host->node_attr_float(node, "low", 0.0f);
    s->b = cpu_host->node_attr_float(node, "high", 1.0f);
    if (s->b < s->a)
      st = cpu_error(node, ONYX_INVALID_ARGUMENT, "high (%g) is below low (%g)", s->b, s->a);
  } else if (s->kind == R_NORMAL) {
    s->a = cpu_host->node_attr_float(node, "mean", 0.0f);
    s->b = cpu_host->node_attr_float(node, "scale", 1.0f);
  }
  s->sample_size = cpu_host->node_attr_int(node, "sample_size", 1);
  if (!st && s->kind == R_MULTINOMIAL && s->sample_size < 0)
    st = cpu_error(node, ONYX_INVALID_ARGUMENT, "sample_size must be >= 0, got %lld",
                   (long long)s->sample_size);
  const OnyxValueInfo* y = cpu_host->node_output(node, 0);
  s->out_type = y ? cpu_host->value_elem_type(y) : ONYX_ELEM_UNDEFINED;
  if (!st && !s->like && (s->kind == R_UNIFORM || s->kind == R_NORMAL)) {
    size_t n = 0;
    const int64_t* shape = cpu_host->node_attr_ints(node, "shape", &n);
    if (n > CPU_MAX_RANK)
      st = cpu_error(node, ONYX_NOT_IMPLEMENTED, "shape has %zu dims; at most %d", n, CPU_MAX_RANK);
    for (size_t i = 0; !st && i < n; i++) {
      if (shape[i] < 0)
        st = cpu_error(node, ONYX_INVALID_ARGUMENT, "shape[%zu] = %lld is negative", i,
                       (long long)shape[i]);
      s->shape[i] = shape[i];
    }
    s->rank = n;
  }
  if (st) {
    free(s);
    return st;
  }
  *state = s;
  return NULL;
}

/* The key of this run. */
static uint64_t run_key(RandState* s) {
  const uint64_t r = atomic_fetch_add(&s->runs, 1);
  return mix64(s->key ^ mix64(r * 0xD1B54A32D192ED03ULL + 1));
}

/* The next value of `type` below v (v finite, representable). */
static double prev_value(int32_t type, double v) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    return nextafterf((float)v, -INFINITY);
  case ONYX_ELEM_FLOAT64:
    return nextafter(v, -INFINITY);
  default: {
    const bool bf = type == ONYX_ELEM_BFLOAT16;
    uint16_t h = bf ? cpu_f64_to_bf16(v) : cpu_f64_to_f16(v);
    if ((h & 0x7FFF) == 0)
      h = 0x8001;
    else if (h & 0x8000)
      h++;
    else
      h--;
    return bf ? cpu_bf16_to_f32(h) : cpu_f16_to_f32(h);
  }
  }
}

static OnyxStatus* rand_compute(void* state, OnyxKernelContext* ctx) {
  RandState* s = state;
  const int64_t* dims = s->shape;
  size_t rank = s->rank;
  if (s->like) {
    const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
    dims = cpu_host->tensor_dims(x);
    rank = cpu_host->tensor_rank(x);
  }
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  const int32_t t = cpu_host->tensor_elem_type(y);
  void* yd = cpu_host->tensor_mutable_data(y);
  const size_t n = cpu_host->tensor_elem_count(y);
  const uint64_t key = run_key(s);
  for (size_t i = 0; i < n; i++) {
    if (s->kind == R_UNIFORM) {
      cpu_q_store_float(t, yd, i, s->a + (s->b - s->a) * unit(draw(key, i)));
      /* Rounding to the output type may reach `high`: step below it. */
      for (int guard = 0; guard < 4 && s->b > s->a && cpu_q_load(t, yd, i) >= s->b; guard++) {
        const double p = prev_value(t, cpu_q_load(t, yd, i));
        cpu_q_store_float(t, yd, i, p >= s->a ? p : s->a);
      }
    } else {
      const uint64_t pair = i & ~(size_t)1;
      const double r = sqrt(-2.0 * log(unit_open0(draw(key, pair))));
      const double th = 2.0 * M_PI * unit(draw(key, pair + 1));
      const double z = (i & 1) ? r * sin(th) : r * cos(th);
      cpu_q_store_float(t, yd, i, s->a + s->b * z);
    }
  }
  return NULL;
}

static OnyxStatus* multinomial_compute(void* state, OnyxKernelContext* ctx) {
  RandState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  if (cpu_host->tensor_rank(x) != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be [batch, classes], rank %zu",
                         cpu_host->tensor_rank(x));
  const int64_t* xd = cpu_host->tensor_dims(x);
  const size_t batch = (size_t)xd[0], classes = (size_t)xd[1], ns = (size_t)s->sample_size;
  if (classes == 0 && ns > 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cannot sample from zero classes");
  const int64_t od[2] = {xd[0], s->sample_size};
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, od, 2, &y);
  if (st) return st;
  double* cum = cpu_host->ctx_scratch(ctx, (classes ? classes : 1) * sizeof(double));
  if (!cum) return cpu_oom(ctx);
  const int32_t xt = cpu_host->tensor_elem_type(x), yt = cpu_host->tensor_elem_type(y);
  const void* xdata = cpu_host->tensor_data(x);
  void* yd = cpu_host->tensor_mutable_data(y);
  const uint64_t key = run_key(s);
  for (size_t b = 0; b < batch; b++) {
    double max = -INFINITY, total = 0.0;
    for (size_t c = 0; c < classes; c++) {
      const double v = cpu_q_load(xt, xdata, b * classes + c);
      if (isnan(v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input[%zu][%zu] is NaN", b, c);
      if (v > max) max = v;
    }
    for (size_t c = 0; c < classes; c++) {
      total += max == -INFINITY ? 1.0 : exp(cpu_q_load(xt, xdata, b * classes + c) - max);
      cum[c] = total;
    }
    for (size_t k = 0; k < ns; k++) {
      const double u = unit(draw(key, b * ns + k)) * total;
      size_t lo = 0, hi = classes - 1;
      while (lo < hi) { /* first class whose cumulative weight exceeds u */
        const size_t mid = lo + (hi - lo) / 2;
        if (cum[mid] > u)
          hi = mid;
        else
          lo = mid + 1;
      }
      if (yt == ONYX_ELEM_INT64)
        ((int64_t*)yd)[b * ns + k] = (int64_t)lo;
      else
        ((int32_t*)yd)[b * ns + k] = (int32_t)lo;
    }
  }
  return NULL;
}

static OnyxStatus* bernoulli_compute(void* state, OnyxKernelContext* ctx) {
  RandState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxTensor* y;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y);
  if (st) return st;
  const int32_t xt = cpu_host->tensor_elem_type(x), yt = cpu_host->tensor_elem_type(y);
  const void* xd = cpu_host->tensor_data(x);
  void* yd = cpu_host->tensor_mutable_data(y);
  const size_t n = cpu_host->tensor_elem_count(x);
  const uint64_t key = run_key(s);
  for (size_t i = 0; i < n; i++) {
    const CpuNum v = {.kind = CPU_NUM_UINT, .v.u = unit(draw(key, i)) < cpu_q_load(xt, xd, i)};
    if (!cpu_num_store(yt, yd, i, v))
      return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "cannot store %s values", cpu_elem_name(yt));
  }
  return NULL;
}

/* --- Registration --------------------------------------------------------------------- */

#define TC(name, arr)                                                                              \
  { name, arr, CPU_ARRAY_LEN(arr) }
static const OnyxTypeConstraint TC_RAND[] = {TC("T", cpu_types_real)};
static const OnyxTypeConstraint TC_LIKE[] = {TC("T1", cpu_types_copyable),
                                             TC("T2", cpu_types_real)};
static const OnyxTypeConstraint TC_MULTI[] = {TC("T1", cpu_types_real), TC("T2", cpu_types_index)};
static const OnyxTypeConstraint TC_BERN[] = {TC("T1", cpu_types_real),
                                             TC("T2", cpu_types_numeric_bool)};

#define KR(op, since, tc, kind, comp)                                                              \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = ONYX_OPSET_LATEST,                       \
    .type_constraints = tc, .type_constraint_count = CPU_ARRAY_LEN(tc), .create = rand_create,     \
    .compute = comp, .release = cpu_free_state, .user_data = (void*)(uintptr_t)(kind)              \
  }

OnyxStatus* cpu_register_random(OnyxKernelRegistry* r) {
  OnyxKernelDef defs[] = {
      KR("RandomUniform", 1, TC_RAND, R_UNIFORM, rand_compute),
      KR("RandomNormal", 1, TC_RAND, R_NORMAL, rand_compute),
      KR("RandomUniformLike", 1, TC_LIKE, R_UNIFORM | 8, rand_compute),
      KR("RandomNormalLike", 1, TC_LIKE, R_NORMAL | 8, rand_compute),
      KR("Multinomial", 7, TC_MULTI, R_MULTINOMIAL, multinomial_compute),
      KR("Bernoulli", 15, TC_BERN, R_BERNOULLI, bernoulli_compute),
  };
  return cpu_q_register_defs(r, defs, CPU_ARRAY_LEN(defs));
}
