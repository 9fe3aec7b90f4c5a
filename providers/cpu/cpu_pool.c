/* cpu_pool.c — the CPU provider's pooling kernels: MaxPool / AveragePool
 * (one N-D window driver), GlobalAveragePool, and the double-precision
 * LpPool, GlobalMaxPool, GlobalLpPool, MaxUnpool and MaxRoiPool. */
#include "cpu_avx2.h"
#include "cpu_nn_common.h"
#include "cpu_nnop_util.h"
#include "cpu_quant.h"
#include "cpu_types.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Pooling: one driver for MaxPool and AveragePool over N-D windows          */
/* ======================================================================== */

/* For each output position, the input positions its window covers (row-major
 * spatial offsets, padding skipped) and, for count_include_pad, how many
 * window positions fall inside the padded input. Built once per compute and
 * shared by every (n, c) plane. */
typedef struct PoolTable {
  size_t* start;  /* out_size + 1: entries of output o are [start[o], start[o+1]) */
  int64_t* offs;  /* out_size * prod(min(k, in)) at most */
  size_t* padded; /* out_size */
} PoolTable;

/* The kernel positions kk in [*a0, *a1) whose input position
 * start + kk * d lies in [lo, hi): computed, never searched, so a kernel of
 * 2^62 taps costs nothing where it misses the input. The callers'
 * geometry keeps every value here inside int64 (geometry_dim). */
static void pool_clip(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t* a0,
                      int64_t* a1) {
  int64_t first = start >= lo ? 0 : (lo - start) / d + ((lo - start) % d != 0);
  int64_t end = hi - 1 - start < 0 ? 0 : (hi - 1 - start) / d + 1;
  if (first > k) first = k;
  if (end > k) end = k;
  *a0 = first;
  *a1 = end > first ? end : first;
}

/* The table, built per output from each dim's clipped tap range (only taps
 * inside X are visited, in the window's row-major order). Polls the run's
 * cancellation through `stop`; false when stopped. */
static bool pool_table_build(const Geometry* g, PoolTable* t, CpuStop* stop) {
  size_t e = 0, acc = 0;
  int64_t oc[MAX_SPATIAL], a0[MAX_SPATIAL], a1[MAX_SPATIAL], kc[MAX_SPATIAL];
  for (size_t o = 0; o < g->out_size; o++) {
    nn_unravel(o, g->out, g->rank, oc);
    t->start[o] = e;
    size_t padded = 1, taps = 1;
    for (size_t i = 0; i < g->rank; i++) {
      const int64_t start = oc[i] * g->s[i] - g->pb[i];
      int64_t p0, p1;
      pool_clip(start, g->k[i], g->d[i], -g->pb[i], g->in[i] + g->pe[i], &p0, &p1);
      padded *= (size_t)(p1 - p0); /* at most k_size, which fits */
      pool_clip(start, g->k[i], g->d[i], 0, g->in[i], &a0[i], &a1[i]);
      taps *= (size_t)(a1[i] - a0[i]);
      kc[i] = a0[i];
    }
    t->padded[o] = padded;
    for (size_t n = 0; n < taps; n++) {
      int64_t off = 0;
      for (size_t i = 0; i < g->rank; i++)
        off = off * g->in[i] + oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];
      t->offs[e++] = off;
      for (size_t i = g->rank; i-- > 0;) {
        if (++kc[i] < a1[i]) break;
        kc[i] = a0[i];
      }
    }
    if (cpu_stop_poll(stop, &acc, taps + 1)) return false;
  }
  t->start[g->out_size] = e;
  return true;
}

typedef struct PoolJob {
  const Geometry* g;
  CpuStop* stop;
  PoolTable t;
  const void* x;
  void* y;
  int64_t* indices; /* MaxPool's optional second output, or NULL */
  int storage_order, count_include_pad;
  int avx512; /* 2-D float32 MaxPool: the machine has AVX-512 ... */
  int avx2;   /* ... or AVX2 */
} PoolJob;

/* ONNX's Indices: the flat index into X, with the spatial part in row-major
 * order (storage_order 0) or column-major (storage_order 1). */
static int64_t pool_index(const PoolJob* j, size_t plane, int64_t off) {
  if (off < 0) return -1;
  int64_t spatial = off;
  if (j->storage_order) {
    int64_t c[MAX_SPATIAL], stride = 1;
    nn_unravel((size_t)off, j->g->in, j->g->rank, c);
    spatial = 0;
    for (size_t i = 0; i < j->g->rank; i++)
      spatial += c[i] * stride, stride *= j->g->in[i];
  }
  return (int64_t)(plane * j->g->in_size) + spatial;
}

#define DEFINE_MAXPOOL(T, LOWEST)                                                                  \
  static void maxpool_planes_##T(void* user, size_t begin, size_t end) {                           \
    const PoolJob* j = user;                                                                       \
    const size_t os = j->g->out_size;                                                              \
    size_t acc = 0;                                                                                \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        if (cpu_stop_poll(j->stop, &acc, j->t.start[o + 1] - j->t.start[o] + 1)) return;           \
        T best = LOWEST;                                                                           \
        int64_t arg = -1;                                                                          \
        for (size_t e = j->t.start[o]; e < j->t.start[o + 1]; e++) {                               \
          const T v = x[j->t.offs[e]];                                                             \
          if (arg < 0 || v > best) best = v, arg = j->t.offs[e];                                   \
        }                                                                                          \
        y[o] = best;                                                                               \
        if (j->indices) j->indices[p * os + o] = pool_index(j, p, arg);                            \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_MAXPOOL(float, -INFINITY)
DEFINE_MAXPOOL(double, -INFINITY)
DEFINE_MAXPOOL(int8_t, INT8_MIN)
DEFINE_MAXPOOL(uint8_t, 0)

/* 64-byte aligned: the gather loop's speed depends on where its branches
 * fall (32-byte boundaries), which code elsewhere in the file would
 * otherwise shift (a 30% swing measured on an AVX-512 Xeon). */
#define DEFINE_AVGPOOL(T)                                                                          \
  __attribute__((aligned(64))) static void avgpool_planes_##T(void* user, size_t begin,            \
                                                              size_t end) {                        \
    const PoolJob* j = user;                                                                       \
    const size_t os = j->g->out_size;                                                              \
    size_t acc = 0;                                                                                \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        if (cpu_stop_poll(j->stop, &acc, j->t.start[o + 1] - j->t.start[o] + 1)) return;           \
        T sum = 0;                                                                                 \
        for (size_t e = j->t.start[o]; e < j->t.start[o + 1]; e++)                                 \
          sum += x[j->t.offs[e]];                                                                  \
        const size_t n =                                                                           \
            j->count_include_pad ? j->t.padded[o] : j->t.start[o + 1] - j->t.start[o];             \
        y[o] = n > 0 ? sum / (T)n : (T)0;                                                          \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_AVGPOOL(float)
DEFINE_AVGPOOL(double)

/* float32 2-D MaxPool without Indices, straight from the geometry: for
 * each output, the window's valid rows and columns are clipped once, and
 * the maximum is taken in the table driver's order (row-major over the
 * window, the first valid element first, then `>`), so NaN handling and
 * results match it exactly. */
static inline float maxpool2d_one(const float* x, const Geometry* g, int64_t h0, int64_t a0,
                                  int64_t a1, int64_t ow) {
  const int64_t iw_n = g->in[1], kw_n = g->k[1], dh = g->d[0], dw = g->d[1];
  const int64_t w0 = ow * g->s[1] - g->pb[1];
  int64_t b0, b1;
  pool_clip(w0, kw_n, dw, 0, iw_n, &b0, &b1);
  if (a0 == a1 || b0 == b1) return -INFINITY; /* the window misses the input */
  /* Seeded with the first valid element, which `v > best` then skips: the
   * select compiles to maxss, which keeps `best` on unordered. Indices are
   * formed in int64 and only then added to x: w0 may lie far before the
   * row (pads of 2^61), which a pointer must never reach. */
  float best = x[(h0 + a0 * dh) * iw_n + w0 + b0 * dw];
  for (int64_t a = a0; a < a1; a++) {
    const float* row = x + (h0 + a * dh) * iw_n;
    for (int64_t b = b0; b < b1; b++) {
      const float v = row[w0 + b * dw];
      best = v > best ? v : best;
    }
  }
  return best;
}

#if CPU_NN_X86
/* n outputs (a multiple of 16) of one row whose windows lie wholly inside X,
 * window of output t at base + t * sw (sw 1 or 2, unit column dilation):
 * maxpool2d_one's order and rule on 16 outputs at a time, one per lane
 * (stride 2 takes the even lanes of 31 loaded floats, never reading past
 * the last window). */
__attribute__((target("avx512f"))) static void maxpool_row16_avx512(const float* base,
                                                                    int64_t row_step, int64_t kh,
                                                                    int64_t kw, int64_t sw,
                                                                    int64_t n, float* yr) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t t = 0; t < n; t += 16) {
    const float* b0 = base + t * sw;
    __m512 best = _mm512_setzero_ps();
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++) {
        const float* r = b0 + a * row_step + b;
        const __m512 v =
            sw == 1 ? _mm512_loadu_ps(r)
                    : _mm512_permutex2var_ps(_mm512_loadu_ps(r), even,
                                             _mm512_maskz_loadu_ps((__mmask16)0x7FFF, r + 16));
        /* seeded with the first element, then `v > best ? v : best`, which
         * is max_ps(v, best) exactly (it returns its second operand on
         * NaN and on equal values) */
        best = a == 0 && b == 0 ? v : _mm512_max_ps(v, best);
      }
    _mm512_storeu_ps(yr + t, best);
  }
}

/* The same with AVX2, 8 outputs at a time (stride 2: the even lanes of 15
 * floats, the second half loaded with a mask). */
__attribute__((target("avx2,avx"))) static void maxpool_row8_avx2(const float* base,
                                                                  int64_t row_step, int64_t kh,
                                                                  int64_t kw, int64_t sw, int64_t n,
                                                                  float* yr) {
  const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
  for (int64_t t = 0; t < n; t += 8) {
    const float* b0 = base + t * sw;
    __m256 best = _mm256_setzero_ps();
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++) {
        const float* r = b0 + a * row_step + b;
        __m256 v;
        if (sw == 1) {
          v = _mm256_loadu_ps(r);
        } else {
          /* [r0 r2 r8 r10 | r4 r6 r12 r14], then the 64-bit pairs in order */
          const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(r), _mm256_maskload_ps(r + 8, seven),
                                             _MM_SHUFFLE(2, 0, 2, 0));
          v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
        }
        /* max_ps(v, best) is `v > best ? v : best` (as above) */
        best = a == 0 && b == 0 ? v : _mm256_max_ps(v, best);
      }
    _mm256_storeu_ps(yr + t, best);
  }
}
#endif

static void maxpool2d_planes_f32(void* user, size_t begin, size_t end) {
  const PoolJob* j = user;
  const Geometry* g = j->g;
  const int64_t ih_n = g->in[0], iw_n = g->in[1], oh_n = g->out[0], ow_n = g->out[1];
  const int64_t kh_n = g->k[0], kw_n = g->k[1], sh = g->s[0], sw = g->s[1];
  const int64_t dh = g->d[0], dw = g->d[1], ph = g->pb[0], pw = g->pb[1];
  /* Outputs [lo, hi) have their whole window inside a row. */
  int64_t lo = pw / sw + (pw % sw != 0);
  if (lo > ow_n) lo = ow_n;
  int64_t hi = lo;
  while (hi < ow_n && hi * sw - pw + (kw_n - 1) * dw < iw_n)
    hi++;
  /* the taps one output reads at most (its window clipped to X) */
  const size_t taps = (size_t)(kh_n < ih_n ? kh_n : ih_n) * (size_t)(kw_n < iw_n ? kw_n : iw_n);
  size_t acc = 0;
  for (size_t p = begin; p < end; p++) {
    const float* x = (const float*)j->x + p * g->in_size;
    float* y = (float*)j->y + p * g->out_size;
    for (int64_t oh = 0; oh < oh_n; oh++) {
      if (cpu_stop_poll(j->stop, &acc, 1)) return;
      const int64_t h0 = oh * sh - ph;
      /* kernel rows a in [a0, a1) land inside the input */
      int64_t a0, a1;
      pool_clip(h0, kh_n, dh, 0, ih_n, &a0, &a1);
      float* yr = y + oh * ow_n;
      int64_t ow = 0;
#if CPU_NN_X86
      const int64_t vl = j->avx512 ? 16 : j->avx2 ? 8 : 0;
      if (vl && (sw == 1 || sw == 2) && dw == 1 && hi - lo >= vl && a1 > a0) {
        /* the rows [a0, a1) of the windows of [lo, hi), vl at a time, the
         * last vl overlapping the ones before (the same values again) */
        for (; ow < lo; ow++)
          yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        /* the first valid row; columns from lo * sw - pw >= 0 on */
        const float* base = x + (h0 + a0 * dh) * iw_n;
        const int64_t nv = (hi - lo) / vl * vl;
        void (*row)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float*) =
            vl == 16 ? maxpool_row16_avx512 : maxpool_row8_avx2;
        /* one valid row needs no step (a huge dh would overflow it) */
        const int64_t step = a1 - a0 > 1 ? dh * iw_n : 0;
        row(base + (lo * sw - pw), step, a1 - a0, kw_n, sw, nv, yr + lo);
        if (nv < hi - lo)
          row(base + ((hi - vl) * sw - pw), step, a1 - a0, kw_n, sw, vl, yr + hi - vl);
        ow = hi;
        size_t work;
        if (__builtin_mul_overflow((size_t)(hi - lo), taps, &work)) work = SIZE_MAX;
        if (cpu_stop_poll(j->stop, &acc, work)) return;
      }
#endif
      if (ow == 0 && a0 == 0 && a1 == kh_n) {
        /* Whole windows eight at a time: eight independent running maxima
         * in the same order and rule as maxpool2d_one (so the same results)
         * instead of one serial chain of compares per output. */
        for (; ow < lo; ow++)
          yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        for (; ow + 8 <= hi; ow += 8) {
          const float* base = x + (h0 * iw_n + ow * sw - pw); /* inside X: [lo, hi) */
          float best[8];
          for (int k = 0; k < 8; k++)
            best[k] = base[k * sw];
          for (int64_t a = 0; a < kh_n; a++)
            for (int64_t b = 0; b < kw_n; b++) {
              const float* r = base + a * dh * iw_n + b * dw;
              for (int k = 0; k < 8; k++) {
                const float v = r[k * sw];
                best[k] = v > best[k] ? v : best[k];
              }
            }
          memcpy(yr + ow, best, sizeof best);
          if (cpu_stop_poll(j->stop, &acc, 8 * taps)) return;
        }
      }
      for (; ow < ow_n; ow++) {
        yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        if (cpu_stop_poll(j->stop, &acc, taps + 1)) return;
      }
    }
  }
}

typedef void (*PlaneFn)(void* user, size_t begin, size_t end);

static const struct {
  OnyxElemType type;
  PlaneFn max, avg;
} POOL_TYPES[] = {
    {ONYX_ELEM_FLOAT32, maxpool_planes_float, avgpool_planes_float},
    {ONYX_ELEM_FLOAT64, maxpool_planes_double, avgpool_planes_double},
    {ONYX_ELEM_INT8, maxpool_planes_int8_t, NULL},
    {ONYX_ELEM_UINT8, maxpool_planes_uint8_t, NULL},
};

static PlaneFn pool_fn(OnyxElemType t, int is_max) {
  for (size_t i = 0; i < CPU_ARRAY_LEN(POOL_TYPES); i++)
    if (POOL_TYPES[i].type == t) return is_max ? POOL_TYPES[i].max : POOL_TYPES[i].avg;
  return NULL;
}

typedef struct PoolState {
  WindowAttrs w;
} PoolState;

static OnyxStatus* pool_create_common(const OnyxNode* node, int is_max, void** state) {
  PoolState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = cpu_window_attrs_read(node, &s->w);
  if (!st && s->w.n_kernel == 0)
    st = cpu_error(s->w.node, ONYX_INVALID_ARGUMENT, "kernel_shape is required");
  if (st) {
    free(s);
    return st;
  }
  s->w.is_max = is_max;
  *state = s;
  return NULL;
}

static OnyxStatus* maxpool_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** st) {
  (void)ep, (void)user_data;
  return pool_create_common(node, 1, st);
}

static OnyxStatus* avgpool_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** st) {
  (void)ep, (void)user_data;
  return pool_create_common(node, 0, st);
}

static OnyxStatus* pool_alloc_table(OnyxKernelContext* ctx, const Geometry* g, PoolTable* t,
                                    CpuStop* stop) {
  void *a, *b, *c;
  OnyxStatus* st;
  /* a window's taps inside X: at most min(kernel, input) per dim */
  size_t taps = 1, entries;
  for (size_t i = 0; i < g->rank; i++)
    taps *= (size_t)(g->k[i] < g->in[i] ? g->k[i] : g->in[i]); /* <= in_size */
  if (!cpu_mul_size(g->out_size, taps, &entries) ||
      !cpu_mul_size(entries, sizeof(int64_t), &entries))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: %zu outputs x %zu kernel taps (kernel_shape) do "
                         "not fit in memory",
                         g->out_size, taps);
  if ((st = nn_scratch(ctx, (g->out_size + 1) * sizeof(size_t), &a)) ||
      (st = nn_scratch(ctx, entries, &b)) ||
      (st = nn_scratch(ctx, g->out_size * sizeof(size_t), &c)))
    return st;
  t->start = a, t->offs = b, t->padded = c;
  if (!pool_table_build(g, t, stop)) return cpu_cancelled(ctx, NULL);
  return NULL;
}

static OnyxStatus* pool_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = &((const PoolState*)state)->w;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  if (r < 3 || w->n_kernel != r - 2)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "X has rank %zu but kernel_shape has %zu values (expected rank - 2)", r,
                     w->n_kernel);
  const PlaneFn fn = pool_fn(cpu_host->tensor_elem_type(x), w->is_max);
  if (!fn)
    return cpu_error(w->node, ONYX_NOT_IMPLEMENTED, "element type %d not supported",
                     (int)cpu_host->tensor_elem_type(x));
  CpuStop stop = {.ctx = ctx};
  PoolJob job = {.x = cpu_host->tensor_data(x),
                 .stop = &stop,
                 .storage_order = w->storage_order,
                 .count_include_pad = w->count_include_pad};
  Geometry g;
  OnyxStatus* st = cpu_geometry_init(w, r - 2, dx + 2, w->kernel, &g);
  if (st) return st;
  job.g = &g;
  int64_t out[MAX_RANK] = {dx[0], dx[1]};
  memcpy(out + 2, g.out, (r - 2) * sizeof(int64_t));
  OnyxTensor *y, *ind = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, out, r, &y))) return st;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  if (w->is_max && node && nn_has_output(node, 1) &&
      (st = cpu_host->ctx_output(ctx, 1, out, r, &ind)))
    return st;
  const size_t planes = (size_t)dx[0] * (size_t)dx[1];
  if (planes == 0 || g.out_size == 0) return NULL;
  const int32_t xt = cpu_host->tensor_elem_type(x);
  if (w->is_max && !ind && g.rank == 2 && (xt == ONYX_ELEM_UINT8 || xt == ONYX_ELEM_INT8) &&
      g.pb[0] >= 0 && g.pb[1] >= 0) { /* cpu_qpool.c: the quantized CNNs' MaxPool */
    const CpuQMaxPool2d q = {(size_t)g.in[0],      (size_t)g.in[1],
                             (size_t)g.out[0],     (size_t)g.out[1],
                             (size_t)g.k[0],       (size_t)g.k[1],
                             (size_t)g.s[0],       (size_t)g.s[1],
                             (size_t)g.d[0],       (size_t)g.d[1],
                             (size_t)g.pb[0],      (size_t)g.pb[1],
                             xt == ONYX_ELEM_INT8, 1};
    bool oom = false;
    if (cpu_qmaxpool2d(ctx, &q, job.x, cpu_host->tensor_mutable_data(y), planes, &stop, &oom)) {
      if (oom) return cpu_oom(ctx);
      return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
    }
  }
  if (w->is_max && !ind && g.rank == 2 && xt == ONYX_ELEM_FLOAT32) {
    job.y = cpu_host->tensor_mutable_data(y);
    job.avx512 = cpu_gemm_isa_level() == CPU_ISA_AVX512;
    job.avx2 = cpu_gemm_isa_level() == CPU_ISA_AVX2;
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, maxpool2d_planes_f32, &job);
    return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
  }
  if ((st = pool_alloc_table(ctx, &g, &job.t, &stop))) return st;
  job.y = cpu_host->tensor_mutable_data(y);
  job.indices = ind ? cpu_host->tensor_mutable_data(ind) : NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, fn, &job);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* GlobalAveragePool                                                         */
/* ======================================================================== */

typedef struct PlaneJob {
  const void* x;
  void* y;
  size_t size; /* elements per plane */
} PlaneJob;

#define DEFINE_GLOBAL_AVG(T)                                                                       \
  static void global_avg_##T(void* user, size_t begin, size_t end) {                               \
    const PlaneJob* j = user;                                                                      \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->size;                                                   \
      double sum = 0;                                                                              \
      for (size_t i = 0; i < j->size; i++)                                                         \
        sum += x[i];                                                                               \
      ((T*)j->y)[p] = j->size ? (T)(sum / (double)j->size) : (T)0;                                 \
    }                                                                                              \
  }
DEFINE_GLOBAL_AVG(double)

/* float32 planes summed in double as the loop above, in 8 independent
 * partial sums (lane l takes elements l, l + 8, ...; combined pairwise at
 * the end): one serial chain of double adds ran at the adder's latency, a
 * tenth of efficientnet_b0's run in its 17 GlobalAveragePools. The order is
 * fixed, so results do not depend on the thread count. */
static void global_avg_float(void* user, size_t begin, size_t end) {
  const PlaneJob* j = user;
  for (size_t p = begin; p < end; p++) {
    const float* x = (const float*)j->x + p * j->size;
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= j->size; i += 8)
      for (size_t l = 0; l < 8; l++)
        s[l] += (double)x[i + l];
    double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < j->size; i++)
      sum += x[i];
    ((float*)j->y)[p] = j->size ? (float)(sum / (double)j->size) : 0.0f;
  }
}

static OnyxStatus* global_avg_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  if (r < 2 || r > MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must have rank 2..%d, got %zu", MAX_RANK,
                         r);
  int64_t out[MAX_RANK];
  for (size_t i = 0; i < r; i++)
    out[i] = i < 2 ? dx[i] : 1;
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, out, r, &y);
  if (st) return st;
  PlaneJob job = {cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y),
                  cpu_dims_product(dx, 2, r)};
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), (size_t)dx[0] * (size_t)dx[1],
                         f32 ? global_avg_float : global_avg_double, &job);
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
  int64_t in[MAX_SPATIAL], k[MAX_SPATIAL], s[MAX_SPATIAL], d[MAX_SPATIAL], pb[MAX_SPATIAL],
      pe[MAX_SPATIAL], out[MAX_SPATIAL];
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
  if (n == 0 || n > MAX_SPATIAL)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "input has %zu spatial dims; 1..%d supported", n,
                     MAX_SPATIAL);
  size_t nk = 0;
  cpu_host->node_attr_ints(node, "kernel_shape", &nk);
  if (nk != n)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape has %zu values; the input has %zu spatial dims", nk, n);
  int64_t pads[2 * MAX_SPATIAL];
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
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 3);
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
      int64_t oc[MAX_SPATIAL], kc[MAX_SPATIAL];
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
  OnyxStatus* st = nnop_need_rank(s->node, x, "input X", 2);
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
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 3);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), ns = r - 2;
  if (ns > MAX_SPATIAL)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "at most %d spatial dims are supported",
                     MAX_SPATIAL);
  if (cpu_host->tensor_elem_count(idx) != cpu_host->tensor_elem_count(x))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "I has %zu elements; X has %zu",
                     cpu_host->tensor_elem_count(idx), cpu_host->tensor_elem_count(x));
  int64_t k[MAX_SPATIAL], s[MAX_SPATIAL], pads[2 * MAX_SPATIAL], od[CPU_MAX_RANK];
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
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 4);
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
/* Registration                                                              */
/* ======================================================================== */

static const int32_t MAXPOOL12[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT8,
                                    ONYX_ELEM_UINT8};
static const OnyxTypeConstraint T_FLOATS[] = {{"T", cpu_types_float, 2}};
static const OnyxTypeConstraint T_MAXPOOL12[] = {{"T", MAXPOOL12, 4}};
static const OnyxTypeConstraint TC_T[] = {{"T", cpu_types_real, 4}};
static const OnyxTypeConstraint TC_UNPOOL[] = {{"T1", cpu_types_real, 4},
                                               {"T2", cpu_types_int64, 1}};

#define KDEF(op, since, end, tc, cr, comp, rel, ud)                                                \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .create = cr, .compute = comp, .release = rel,     \
    .user_data = (void*)(ud)                                                                       \
  }
#define SPEC(op, since, end, tc, cr, comp, rel, ud)                                                \
  { op, since, end, tc, CPU_ARRAY_LEN(tc), cr, comp, rel, (void*)(ud) }
#define NODE_SPEC(op, since, end, tc, comp)                                                        \
  SPEC(op, since, end, tc, nnop_node_create, comp, NULL, NULL)

OnyxStatus* cpu_register_pool(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      /* MaxPool 12 added int8/uint8; attributes missing in older versions
       * read as their defaults, so one implementation serves all. */
      KDEF("MaxPool", 1, 11, T_FLOATS, maxpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("MaxPool", 12, latest, T_MAXPOOL12, maxpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("AveragePool", 1, latest, T_FLOATS, avgpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("GlobalAveragePool", 1, latest, T_FLOATS, NULL, global_avg_compute, NULL, NULL),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxKernelDef* d = &defs[i];
    d->struct_size = sizeof *d;
    d->domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, d);
    if (st) return st;
  }
  const CpuKernelSpec specs[] = {
      NODE_SPEC("LpPool", 1, latest, TC_T, lppool_compute),
      SPEC("GlobalMaxPool", 1, latest, TC_T, global_create, global_compute, cpu_free_state,
           &GLOBAL_MAX),
      SPEC("GlobalLpPool", 1, latest, TC_T, global_create, global_compute, cpu_free_state,
           &GLOBAL_LP),
      NODE_SPEC("MaxUnpool", 9, latest, TC_UNPOOL, maxunpool_compute),
      NODE_SPEC("MaxRoiPool", 1, latest, TC_T, maxroipool_compute),
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
