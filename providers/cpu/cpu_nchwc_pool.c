/* cpu_nchwc_pool.c — see cpu_nchwc_pool.h. The vector bodies are compiled
 * for their ISA with target attributes and called only after the path
 * check (cpu_nchwc_path), so the library still runs without AVX2. */
#include "cpu_nchwc_pool.h"

#include "cpu_nchwc.h"
#include "cpu_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define NCP_X86 1
#include <immintrin.h>
#else
#define NCP_X86 0
#endif

/* The vector body a run of this block takes (CPU_NCHWC_SCALAR: none). */
static int pool_path(size_t block) {
  const int p = cpu_nchwc_path();
  if (block == 16 && p >= CPU_NCHWC_AVX512) return CPU_NCHWC_AVX512;
  if (block == 8 && p >= CPU_NCHWC_AVX2) return CPU_NCHWC_AVX2;
  return CPU_NCHWC_SCALAR;
}

static size_t blocks_of(size_t c, size_t block) {
  return c / block + (c % block != 0);
}

bool cpu_nchwc_pool_extent(size_t in, size_t k, size_t s, size_t d, size_t p0, size_t p1,
                           bool ceil_mode, size_t* out) {
  int64_t span, padded;
  if (s < 1 || in > INT64_MAX / 4 || p0 > INT32_MAX || p1 > INT32_MAX || k > INT32_MAX ||
      d > INT32_MAX || s > INT32_MAX || !cpu_dilated_extent((int64_t)k, (int64_t)d, &span) ||
      !cpu_add3_i64((int64_t)in, (int64_t)p0, (int64_t)p1, &padded) || padded < span)
    return false;
  const int64_t rest = padded - span, si = (int64_t)s;
  int64_t o = rest / si + (ceil_mode && rest % si != 0) + 1;
  /* ceil_mode: a last window starting past the input and its leading pad
   * is dropped */
  if (ceil_mode && (o - 1) * si >= (int64_t)in + (int64_t)p0) o--;
  *out = (size_t)o;
  return true;
}

/* The taps kk in [*a0, *a1) of a k-tap window (dilation d) starting at
 * `start` whose position start + kk * d lies in [lo, hi). */
static inline void tap_range(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi,
                             int64_t* a0, int64_t* a1) {
  int64_t first, end;
  if (d == 1) {
    first = start >= lo ? 0 : lo - start;
    end = hi - start;
  } else {
    first = start >= lo ? 0 : (lo - start + d - 1) / d;
    end = hi - 1 - start < 0 ? 0 : (hi - 1 - start) / d + 1;
  }
  if (first > k) first = k;
  if (end > k) end = k;
  *a0 = first;
  *a1 = end > first ? end : first;
}

/* One output row's window rows: the taps inside X and, for
 * count_include_pad, those inside the padded input. */
typedef struct RowTaps {
  int64_t r0, r1, rows_padded;
  const float* xp; /* the plane [h, w, block] */
  float* yr;       /* the output row [ow, block] */
} RowTaps;

static RowTaps row_taps(const CpuNchwcPool* p, size_t r) {
  const size_t plane = r / p->oh, oy = r % p->oh;
  RowTaps t = {.xp = p->x + plane * p->h * p->w * p->block,
               .yr = p->y + (plane * p->oh + oy) * p->ow * p->block};
  const int64_t ys = (int64_t)(oy * p->sh) - (int64_t)p->pt;
  tap_range(ys, (int64_t)p->kh, (int64_t)p->dh, 0, (int64_t)p->h, &t.r0, &t.r1);
  int64_t q0, q1;
  tap_range(ys, (int64_t)p->kh, (int64_t)p->dh, -(int64_t)p->pt, (int64_t)(p->h + p->pb), &q0, &q1);
  t.rows_padded = q1 - q0;
  return t;
}

/* Output column ox's window columns inside X, and the divisor of an
 * average (0: the window holds no counted tap). */
static inline size_t col_taps(const CpuNchwcPool* p, const RowTaps* t, size_t ox, int64_t* c0,
                              int64_t* c1) {
  const int64_t xs = (int64_t)(ox * p->sw) - (int64_t)p->pl;
  tap_range(xs, (int64_t)p->kw, (int64_t)p->dw, 0, (int64_t)p->w, c0, c1);
  if (!p->count_include_pad) return (size_t)((t->r1 - t->r0) * (*c1 - *c0));
  int64_t q0, q1;
  tap_range(xs, (int64_t)p->kw, (int64_t)p->dw, -(int64_t)p->pl, (int64_t)(p->w + p->pr), &q0, &q1);
  return (size_t)(t->rows_padded * (q1 - q0));
}

static void pool_row_scalar(const CpuNchwcPool* p, size_t r) {
  const RowTaps t = row_taps(p, r);
  const size_t b = p->block;
  const int64_t ys = (int64_t)((r % p->oh) * p->sh) - (int64_t)p->pt;
  const int64_t dh = (int64_t)p->dh, dw = (int64_t)p->dw, w = (int64_t)p->w;
  for (size_t ox = 0; ox < p->ow; ox++) {
    int64_t c0, c1;
    const size_t count = col_taps(p, &t, ox, &c0, &c1);
    const int64_t xs = (int64_t)(ox * p->sw) - (int64_t)p->pl;
    float* y = t.yr + ox * b;
    float acc[16];
    if (t.r0 == t.r1 || c0 == c1) {
      for (size_t l = 0; l < b; l++)
        y[l] = p->max ? -INFINITY : 0.0f;
      continue;
    }
    const float* first = t.xp + (size_t)(((ys + t.r0 * dh) * w + xs + c0 * dw) * (int64_t)b);
    for (size_t l = 0; l < b; l++)
      acc[l] = p->max ? first[l] : 0.0f;
    for (int64_t u = t.r0; u < t.r1; u++) {
      const float* row = t.xp + (size_t)((ys + u * dh) * w * (int64_t)b);
      for (int64_t v = c0; v < c1; v++) {
        const float* tap = row + (size_t)((xs + v * dw) * (int64_t)b);
        for (size_t l = 0; l < b; l++) {
          if (!p->max)
            acc[l] += tap[l];
          else if (tap[l] > acc[l])
            acc[l] = tap[l];
        }
      }
    }
    for (size_t l = 0; l < b; l++)
      y[l] = p->max ? acc[l] : count ? acc[l] / (float)count : 0.0f;
  }
}

#if NCP_X86
/* One output row on a vector path: V a vector of B floats. The window's
 * taps in row-major order; the maximum as max(tap, best), which keeps best
 * unless tap > best (the scalar loop's comparison, NaN included). */
#define NCP_DEFINE(isa, tgt, V, B, LOAD, STORE, SET1, MAX, ADD, DIV)                               \
  __attribute__((target(tgt))) static void pool_row_##isa(const CpuNchwcPool* p, size_t r) {       \
    const RowTaps t = row_taps(p, r);                                                              \
    const int64_t ys = (int64_t)((r % p->oh) * p->sh) - (int64_t)p->pt;                            \
    const int64_t dh = (int64_t)p->dh, dw = (int64_t)p->dw, w = (int64_t)p->w;                     \
    for (size_t ox = 0; ox < p->ow; ox++) {                                                        \
      int64_t c0, c1;                                                                              \
      const size_t count = col_taps(p, &t, ox, &c0, &c1);                                          \
      const int64_t xs = (int64_t)(ox * p->sw) - (int64_t)p->pl;                                   \
      float* y = t.yr + ox * B;                                                                    \
      if (t.r0 == t.r1 || c0 == c1) {                                                              \
        STORE(y, SET1(p->max ? -INFINITY : 0.0f));                                                 \
        continue;                                                                                  \
      }                                                                                            \
      if (p->max) {                                                                                \
        V best = LOAD(t.xp + (size_t)(((ys + t.r0 * dh) * w + xs + c0 * dw) * B));                 \
        for (int64_t u = t.r0; u < t.r1; u++) {                                                    \
          const float* row = t.xp + (size_t)((ys + u * dh) * w * B);                               \
          for (int64_t v = c0; v < c1; v++)                                                        \
            best = MAX(LOAD(row + (size_t)((xs + v * dw) * B)), best);                             \
        }                                                                                          \
        STORE(y, best);                                                                            \
      } else {                                                                                     \
        V sum = SET1(0.0f);                                                                        \
        for (int64_t u = t.r0; u < t.r1; u++) {                                                    \
          const float* row = t.xp + (size_t)((ys + u * dh) * w * B);                               \
          for (int64_t v = c0; v < c1; v++)                                                        \
            sum = ADD(sum, LOAD(row + (size_t)((xs + v * dw) * B)));                               \
        }                                                                                          \
        STORE(y, count ? DIV(sum, SET1((float)count)) : SET1(0.0f));                               \
      }                                                                                            \
    }                                                                                              \
  }
NCP_DEFINE(avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps,
           _mm512_max_ps, _mm512_add_ps, _mm512_div_ps)
NCP_DEFINE(avx2, "avx2,fma", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
           _mm256_max_ps, _mm256_add_ps, _mm256_div_ps)
#endif

typedef struct PoolJob {
  const CpuNchwcPool* p;
  int path;
  CpuStop stop;
} PoolJob;

static void pool_tasks(void* user, size_t begin, size_t end) {
  PoolJob* j = user;
  const CpuNchwcPool* p = j->p;
  size_t polled = 0;
  for (size_t r = begin; r < end; r++) {
    if (cpu_stop_poll(&j->stop, &polled, p->ow * p->kh * p->kw)) return;
    switch (j->path) {
#if NCP_X86
    case CPU_NCHWC_AVX512:
      pool_row_avx512(p, r);
      break;
    case CPU_NCHWC_AVX2:
      pool_row_avx2(p, r);
      break;
#endif
    default:
      pool_row_scalar(p, r);
    }
  }
}

OnyxStatus* cpu_nchwc_pool_run(OnyxKernelContext* ctx, const CpuNchwcPool* p) {
  if (p->block != 8 && p->block != 16)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "block %zu is not 8 or 16", p->block);
  size_t rows;
  if (!cpu_mul_size(p->n * p->cb, p->oh, &rows))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "too many output rows");
  if (!rows || !p->ow) return NULL;
  PoolJob j = {.p = p, .path = pool_path(p->block), .stop = {.ctx = ctx}};
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, pool_tasks, &j);
  if (cpu_stop_seen(&j.stop)) return cpu_cancelled(ctx, NULL);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Per-channel affine (batch normalization)                                  */
/* ------------------------------------------------------------------------ */

typedef struct AffineJob {
  const float *x, *s, *t;
  float* y;
  size_t cb, hw, block;
  int path;
  bool relu;
} AffineJob;

#if NCP_X86
__attribute__((target("avx512f"))) static void affine16(const AffineJob* j, size_t plane) {
  const size_t off = plane * j->hw * 16, c = plane % j->cb * 16;
  const __m512 s = _mm512_loadu_ps(j->s + c), t = _mm512_loadu_ps(j->t + c);
  const __m512 lo = _mm512_set1_ps(j->relu ? 0.0f : -INFINITY);
  for (size_t q = 0; q < j->hw; q++)
    _mm512_storeu_ps(
        j->y + off + q * 16,
        _mm512_max_ps(lo, _mm512_fmadd_ps(_mm512_loadu_ps(j->x + off + q * 16), s, t)));
}
__attribute__((target("avx2,fma"))) static void affine8(const AffineJob* j, size_t plane) {
  const size_t off = plane * j->hw * 8, c = plane % j->cb * 8;
  const __m256 s = _mm256_loadu_ps(j->s + c), t = _mm256_loadu_ps(j->t + c);
  const __m256 lo = _mm256_set1_ps(j->relu ? 0.0f : -INFINITY);
  for (size_t q = 0; q < j->hw; q++)
    _mm256_storeu_ps(j->y + off + q * 8,
                     _mm256_max_ps(lo, _mm256_fmadd_ps(_mm256_loadu_ps(j->x + off + q * 8), s, t)));
}
#endif

static void affine_tasks(void* user, size_t begin, size_t end) {
  const AffineJob* j = user;
  for (size_t plane = begin; plane < end; plane++) {
    switch (j->path) {
#if NCP_X86
    case CPU_NCHWC_AVX512:
      affine16(j, plane);
      break;
    case CPU_NCHWC_AVX2:
      affine8(j, plane);
      break;
#endif
    default: {
      const size_t b = j->block, off = plane * j->hw * b, c = plane % j->cb * b;
      for (size_t q = 0; q < j->hw; q++)
        for (size_t l = 0; l < b; l++) {
          const float v = fmaf(j->x[off + q * b + l], j->s[c + l], j->t[c + l]);
          j->y[off + q * b + l] = j->relu && v < 0.0f ? 0.0f : v;
        }
    }
    }
  }
}

void cpu_nchwc_affine(OnyxKernelContext* ctx, const float* x, const float* s, const float* t,
                      float* y, size_t n, size_t cb, size_t hw, size_t block, bool relu) {
  AffineJob j = {.relu = relu,

                 .x = x,
                 .s = s,
                 .t = t,
                 .y = y,
                 .cb = cb,
                 .hw = hw,
                 .block = block,
                 .path = pool_path(block)};
  if (n && cb && hw)
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), n * cb, affine_tasks, &j);
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct PoolState {
  size_t k[2], s[2], pads[4], d[2];
  bool max, ceil_mode, count_include_pad;
} PoolState;

/* Window attribute `name` with `count` values in [lo, INT32_MAX]. */
static OnyxStatus* pool_ints(const OnyxNode* node, const char* name, size_t count, int64_t lo,
                             size_t* out) {
  size_t k = 0;
  const int64_t* v = cpu_host->node_attr_ints(node, name, &k);
  if (!v || k != count)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute '%s' must have %zu values", name,
                     count);
  for (size_t i = 0; i < count; i++) {
    if (v[i] < lo || v[i] > INT32_MAX)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute '%s' value %lld is out of range",
                       name, (long long)v[i]);
    out[i] = (size_t)v[i];
  }
  return NULL;
}

static OnyxStatus* pool_create(const OnyxNode* node, bool max, void** state) {
  PoolState ps = {.max = max};
  OnyxStatus* st = pool_ints(node, "kernel_shape", 2, 1, ps.k);
  if (!st) st = pool_ints(node, "strides", 2, 1, ps.s);
  if (!st) st = pool_ints(node, "pads", 4, 0, ps.pads);
  if (!st) st = pool_ints(node, "dilations", 2, 1, ps.d);
  if (st) return st;
  ps.ceil_mode = cpu_host->node_attr_int(node, "ceil_mode", 0) != 0;
  ps.count_include_pad = !max && cpu_host->node_attr_int(node, "count_include_pad", 0) != 0;
  PoolState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *s = ps;
  *state = s;
  return NULL;
}

static OnyxStatus* maxpool_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  return pool_create(node, true, state);
}

static OnyxStatus* avgpool_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  return pool_create(node, false, state);
}

static void state_release(void* state) {
  free(state);
}

static OnyxStatus* pool_compute(void* state, OnyxKernelContext* ctx) {
  const PoolState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int64_t* d = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 5 || (d[4] != 8 && d[4] != 16))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X must be blocked 5-D [N, C/block, H, W, block] with block 8 or 16");
  CpuNchwcPool p = {.x = cpu_host->tensor_data(x),
                    .n = (size_t)d[0],
                    .cb = (size_t)d[1],
                    .h = (size_t)d[2],
                    .w = (size_t)d[3],
                    .block = (size_t)d[4],
                    .kh = s->k[0],
                    .kw = s->k[1],
                    .sh = s->s[0],
                    .sw = s->s[1],
                    .dh = s->d[0],
                    .dw = s->d[1],
                    .pt = s->pads[0],
                    .pl = s->pads[1],
                    .pb = s->pads[2],
                    .pr = s->pads[3],
                    .max = s->max,
                    .count_include_pad = s->count_include_pad};
  if (!cpu_nchwc_pool_extent(p.h, p.kh, p.sh, p.dh, p.pt, p.pb, s->ceil_mode, &p.oh) ||
      !cpu_nchwc_pool_extent(p.w, p.kw, p.sw, p.dw, p.pl, p.pr, s->ceil_mode, &p.ow))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "the pooling window does not fit the padded %zux%zu input", p.h, p.w);
  const int64_t yd[5] = {d[0], d[1], (int64_t)p.oh, (int64_t)p.ow, d[4]};
  OnyxTensor* y = NULL;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, yd, 5, &y);
  if (st) return st;
  p.y = cpu_host->tensor_mutable_data(y);
  return cpu_nchwc_pool_run(ctx, &p);
}

/* NchwcBatchNormalization: s and t folded at creation, padded with zeros
 * to a multiple of 16 channels (so that either block reads whole ones). */
typedef struct BnState {
  size_t c;
  float *s, *t;
  bool relu; /* activation "Relu": max(y, 0) */
} BnState;

static void bn_release(void* state) {
  BnState* b = state;
  if (!b) return;
  free(b->s);
  free(b->t);
  free(b);
}

static OnyxStatus* bn_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  static const char* const NAMES[] = {"scale", "B", "mean", "var"};
  const float* in[4];
  int64_t c = -1;
  if (cpu_host->node_input_count(node) != 5)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "takes X, scale, B, mean and var");
  for (size_t i = 0; i < 4; i++) {
    const OnyxValueInfo* v = cpu_host->node_input(node, i + 1);
    const OnyxTensor* t = v ? cpu_host->value_constant(v) : NULL;
    if (!t || cpu_host->tensor_elem_type(t) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(t) != 1)
      return cpu_error(node, ONYX_NOT_IMPLEMENTED, "%s must be a constant float32 1-D tensor",
                       NAMES[i]);
    const int64_t ci = cpu_host->tensor_dims(t)[0];
    if (ci < 1 || ci > INT32_MAX || (c >= 0 && ci != c))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "%s holds %lld values; scale, B, mean and var must hold C >= 1 each",
                       NAMES[i], (long long)ci);
    c = ci;
    in[i] = cpu_host->tensor_data(t);
  }
  const double eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  size_t alen = 0;
  const char* act = cpu_host->node_attr_string(node, "activation", &alen);
  const bool relu = act && alen == 4 && !memcmp(act, "Relu", 4);
  if (act && alen && !relu)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "activation must be \"\" or \"Relu\"");
  const size_t padded = blocks_of((size_t)c, 16) * 16;
  BnState* b = calloc(1, sizeof *b);
  if (b) {
    b->s = calloc(padded, sizeof *b->s);
    b->t = calloc(padded, sizeof *b->t);
  }
  if (!b || !b->s || !b->t) {
    bn_release(b);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  b->c = (size_t)c;
  b->relu = relu;
  for (size_t i = 0; i < b->c; i++) {
    const double s = (double)in[0][i] / sqrt((double)in[3][i] + eps);
    b->s[i] = (float)s;
    b->t[i] = (float)((double)in[1][i] - (double)in[2][i] * s);
  }
  *state = b;
  return NULL;
}

static OnyxStatus* bn_compute(void* state, OnyxKernelContext* ctx) {
  const BnState* b = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int64_t* d = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 5 || (d[4] != 8 && d[4] != 16) ||
      (size_t)d[1] != blocks_of(b->c, (size_t)d[4]))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X must be blocked 5-D holding the %zu channels of scale in blocks of 8 "
                         "or 16",
                         b->c);
  OnyxTensor* y = NULL;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, d, 5, &y);
  if (st) return st;
  cpu_nchwc_affine(ctx, cpu_host->tensor_data(x), b->s, b->t, cpu_host->tensor_mutable_data(y),
                   (size_t)d[0], (size_t)d[1], (size_t)d[2] * (size_t)d[3], (size_t)d[4], b->relu);
  return NULL;
}

OnyxStatus* cpu_register_nchwc_pool(OnyxKernelRegistry* r) {
  /* NchwcBatchNormalization's Y may take X's buffer. */
  const OnyxKernelDef defs[] = {
      CPU_NCHWC_DEF("NchwcMaxPool", maxpool_create, pool_compute, state_release, NULL, 0),
      CPU_NCHWC_DEF("NchwcAveragePool", avgpool_create, pool_compute, state_release, NULL, 0),
      CPU_NCHWC_DEF("NchwcBatchNormalization", bn_create, bn_compute, bn_release, cpu_nchwc_inplace,
                    1),
  };
  return cpu_nchwc_register_defs(r, defs, sizeof defs / sizeof defs[0]);
}
