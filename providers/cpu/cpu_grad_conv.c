/* cpu_grad_conv.c — the CPU provider's kernels for the windowed
 * com.onyx.training gradient ops (docs/training.md, "Gradient ops"),
 * float32 and float64, spatial rank 1 to 3:
 *
 *   ConvGrad(dY, X, W) -> dX, dW, dB   per image n and group g, with
 *       col = im2col(X[n, g]) (Cg*K x out):
 *         dW[g] += dY[n, g] (Mg x out) . col^T     (a GEMM)
 *         dX[n, g] = col2im(W[g]^T (Cg*K x Mg) . dY[n, g])   (a GEMM, then
 *                                                     a scatter-add)
 *         dB[m] = sum over n and positions of dY[n, m]
 *       A 1x1 convolution without stride or padding skips im2col/col2im.
 *       float32 with unit strides: dX[n, g] = Wf . B instead, one GEMM of
 *       k = Mg*K per image and group, Wf the transposed W with its taps
 *       flipped and B read from a zero-padded copy of dY[n, g] (dx_conv).
 *       float32 1-D and 2-D windows with unit strides and dilations and at
 *       most 64 channels per group, on AVX-512: direct dW and dX kernels
 *       without im2col or GEMM (cpu_grad_conv_direct.h).
 *   MaxPoolGrad(dY, Indices, X_shape) -> dX   dX[Indices[i]] += dY[i]
 *   AveragePoolGrad(dY, X_shape) -> dX        each output's gradient spread
 *       evenly over the input positions of its window, with AveragePool's
 *       divisor (count_include_pad: the window's taps inside the padded
 *       input; else those inside X)
 *
 * The GEMMs are the provider's (cpu_gemm_f32 / cpu_gemm_f64, cpu_nn.h) on
 * its pool; im2col, col2im and the pools run one row, channel or plane per
 * task, and every sum runs in a fixed order, so results do not depend on
 * the number of threads. Loops over data poll the run's cancellation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_grad_conv_direct.h"
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "cpu_util.h"

#define TRAINING "com.onyx.training"
#define SP       3 /* spatial dims handled; lower ranks are padded with 1s */

static const int32_t T_FLOAT[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
static const OnyxTypeConstraint TC_T[] = {{"T", T_FLOAT, 2}};

/* ======================================================================== */
/* Window geometry                                                          */
/* ======================================================================== */

typedef struct Geo {
  size_t nsp; /* the op's spatial rank: dims SP-nsp..SP-1; the others are 1 */
  int64_t in[SP], k[SP], s[SP], d[SP], pb[SP], pe[SP], out[SP];
  size_t in_size, out_size, k_size;
} Geo;

/* A list attribute of nsp (or 2 nsp for pads) values >= min, or absent
 * (*count 0). */
static OnyxStatus* read_list(OnyxKernelContext* ctx, const char* name, size_t want, int64_t min,
                             int64_t* out, size_t* count) {
  const int64_t* v = cpu_host->node_attr_ints(cpu_host->ctx_node(ctx), name, count);
  if (!*count) return NULL;
  if (*count != want)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "attribute %s has %zu values, expected %zu for X's spatial rank", name,
                         *count, want);
  for (size_t i = 0; i < *count; i++) {
    if (v[i] < min)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld < %lld", name, i,
                           (long long)v[i], (long long)min);
    out[i] = v[i];
  }
  return NULL;
}

/* The geometry of X's spatial dims `in` (nsp of them) and the kernel
 * `kernel`, from the node's strides, dilations, pads, auto_pad and (when
 * ceil_mode) ceil_mode, with AveragePool's and Conv's output-size rules. */
static OnyxStatus* geo_init(OnyxKernelContext* ctx, size_t nsp, const int64_t* in,
                            const int64_t* kernel, bool ceil_mode, Geo* g) {
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  if (nsp < 1 || nsp > SP)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "X has %zu spatial dims; 1 to %d supported",
                         nsp, SP);
  memset(g, 0, sizeof *g);
  g->nsp = nsp;
  for (size_t i = 0; i < SP; i++) {
    g->in[i] = g->k[i] = g->s[i] = g->d[i] = g->out[i] = 1;
    g->pb[i] = g->pe[i] = 0;
  }
  int64_t pads[2 * SP];
  size_t n_s, n_d, n_p;
  OnyxStatus* st;
  if ((st = read_list(ctx, "strides", nsp, 1, g->s, &n_s)) ||
      (st = read_list(ctx, "dilations", nsp, 1, g->d, &n_d)) ||
      (st = read_list(ctx, "pads", 2 * nsp, 0, pads, &n_p)))
    return st;
  size_t len = 0;
  const char* ap = cpu_host->node_attr_string(node, "auto_pad", &len);
  int mode = 0; /* 0 NOTSET, 1 VALID, 2 SAME_UPPER, 3 SAME_LOWER */
  if (ap && len) {
    static const char* const names[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
    mode = -1;
    for (int m = 0; m < 4; m++)
      if (strlen(names[m]) == len && !memcmp(names[m], ap, len)) mode = m;
    if (mode < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%.*s'", (int)len, ap);
  }
  g->in_size = g->out_size = g->k_size = 1;
  for (size_t i = 0; i < nsp; i++) {
    g->in[i] = in[i];
    g->k[i] = kernel[i];
    if (in[i] < 0 || kernel[i] < 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: input %lld, kernel %lld (kernel must be >= 1)", i,
                           (long long)in[i], (long long)kernel[i]);
    if (mode == 0 && n_p) {
      g->pb[i] = pads[i];
      g->pe[i] = pads[i + nsp];
    }
    int64_t eff, t, lim;
    if (!cpu_dilated_extent(g->k[i], g->d[i], &eff))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: the dilated kernel extent overflows", i);
    const int64_t s = g->s[i];
    if (mode >= 2) {
      g->out[i] = in[i] / s + (in[i] % s != 0);
      int64_t total;
      if (!cpu_mul_i64(g->out[i] > 0 ? g->out[i] - 1 : 0, s, &t) || !cpu_add_i64(t, eff, &t) ||
          !cpu_sub_i64(t, in[i], &total))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "spatial dim %zu: the SAME padding overflows", i);
      if (total < 0) total = 0;
      g->pb[i] = mode == 2 ? total / 2 : total - total / 2;
      g->pe[i] = total - g->pb[i];
    }
    if (!cpu_add3_i64(in[i], g->pb[i], g->pe[i], &t) || !cpu_add_i64(t, eff, &lim))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: input + pads + kernel extent overflows int64", i);
    if (mode < 2) {
      const int64_t span = t - eff;
      if (span < 0)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "spatial dim %zu: window of extent %lld is larger than the padded "
                             "input %lld",
                             i, (long long)eff, (long long)t);
      g->out[i] = (ceil_mode ? span / s + (span % s != 0) : span / s) + 1;
      /* a last window that would start inside the end padding is dropped */
      if (ceil_mode && (!cpu_mul_i64(g->out[i] - 1, s, &t) || t >= in[i] + g->pb[i])) g->out[i]--;
    }
    if (!cpu_mul_size(g->in_size, (size_t)g->in[i], &g->in_size) ||
        !cpu_mul_size(g->out_size, (size_t)g->out[i], &g->out_size) ||
        !cpu_mul_size(g->k_size, (size_t)g->k[i], &g->k_size))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "spatial sizes overflow");
  }
  /* The real dims last, the padding 1s first: the innermost loops then
   * run along X's last dim. */
  const size_t off = SP - nsp;
  if (off) {
    int64_t* arrs[] = {g->in, g->k, g->s, g->d, g->out, g->pb, g->pe};
    for (size_t a = 0; a < CPU_ARRAY_LEN(arrs); a++) {
      memmove(arrs[a] + off, arrs[a], nsp * sizeof(int64_t));
      for (size_t i = 0; i < off; i++)
        arrs[a][i] = a < 5 ? 1 : 0;
    }
  }
  return NULL;
}

/* dY's shape must be (n, c, out...). */
static OnyxStatus* check_dy(OnyxKernelContext* ctx, const OnyxTensor* dy, int64_t n, int64_t c,
                            const Geo* g) {
  const size_t r = cpu_host->tensor_rank(dy);
  const int64_t* d = cpu_host->tensor_dims(dy);
  bool ok = r == g->nsp + 2 && d[0] == n && d[1] == c;
  for (size_t i = 0; ok && i < g->nsp; i++)
    ok = d[i + 2] == g->out[SP - g->nsp + i];
  if (ok) return NULL;
  char want[160];
  int at = snprintf(want, sizeof want, "(%lld, %lld", (long long)n, (long long)c);
  for (size_t i = 0; i < g->nsp && at > 0 && (size_t)at < sizeof want; i++)
    at +=
        snprintf(want + at, sizeof want - (size_t)at, ", %lld", (long long)g->out[SP - g->nsp + i]);
  return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                       "dY's shape does not match the forward op's output %s)", want);
}

static bool has_output(const OnyxNode* node, size_t i) {
  return node && i < cpu_host->node_output_count(node) && cpu_host->node_output(node, i) != NULL;
}

/* ======================================================================== */
/* im2col / col2im over 3 spatial dims                                      */
/* ======================================================================== */

typedef struct ColJob {
  const Geo* g;
  int32_t type;
  const void* x; /* im2col: the group's Cg input planes */
  void* col;     /* Cg*K rows of out_size */
  void* dx;      /* col2im: the group's Cg planes of dX */
  size_t kk;     /* K: kernel taps */
  CpuStop* stop;
} ColJob;

/* The outputs o in [*lo, *hi) of a row whose input position o s + base
 * lies in [0, in); computed, not searched. */
static inline void valid_range(int64_t base, int64_t s, int64_t in, int64_t out, int64_t* lo,
                               int64_t* hi) {
  int64_t l = base >= 0 ? 0 : (-base + s - 1) / s;
  int64_t h = in - 1 - base < 0 ? 0 : (in - 1 - base) / s + 1;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* Row r = c * K + tap of col: X[c] at each output's input position for the
 * tap, 0 in the padding. */
#define IM2COL_ROW(T)                                                                              \
  static void im2col_row_##T(const ColJob* j, size_t r) {                                          \
    const Geo* g = j->g;                                                                           \
    const size_t c = r / j->kk, tap = r % j->kk;                                                   \
    const int64_t k2 = (int64_t)(tap % (size_t)g->k[2]);                                           \
    const int64_t k1 = (int64_t)(tap / (size_t)g->k[2] % (size_t)g->k[1]);                         \
    const int64_t k0 = (int64_t)(tap / (size_t)g->k[2] / (size_t)g->k[1]);                         \
    const T* x = (const T*)j->x + c * g->in_size;                                                  \
    T* out = (T*)j->col + r * g->out_size;                                                         \
    /* the tap's valid outputs along the last dim: the same on every row */                        \
    const int64_t base = k2 * g->d[2] - g->pb[2], s2 = g->s[2];                                    \
    int64_t vlo, vhi;                                                                              \
    valid_range(base, s2, g->in[2], g->out[2], &vlo, &vhi);                                        \
    for (int64_t o0 = 0; o0 < g->out[0]; o0++) {                                                   \
      const int64_t i0 = o0 * g->s[0] - g->pb[0] + k0 * g->d[0];                                   \
      for (int64_t o1 = 0; o1 < g->out[1]; o1++) {                                                 \
        const int64_t i1 = o1 * g->s[1] - g->pb[1] + k1 * g->d[1];                                 \
        const bool in01 = i0 >= 0 && i0 < g->in[0] && i1 >= 0 && i1 < g->in[1];                    \
        const T* xrow =                                                                            \
            x + ((size_t)(in01 ? i0 : 0) * (size_t)g->in[1] + (size_t)(in01 ? i1 : 0)) *           \
                    (size_t)g->in[2];                                                              \
        const int64_t lo = in01 ? vlo : 0, hi = in01 ? vhi : 0;                                    \
        for (int64_t o2 = 0; o2 < lo; o2++)                                                        \
          out[o2] = (T)0;                                                                          \
        if (s2 == 1)                                                                               \
          for (int64_t o2 = lo; o2 < hi; o2++)                                                     \
            out[o2] = xrow[o2 + base];                                                             \
        else                                                                                       \
          for (int64_t o2 = lo; o2 < hi; o2++)                                                     \
            out[o2] = xrow[o2 * s2 + base];                                                        \
        for (int64_t o2 = hi; o2 < g->out[2]; o2++)                                                \
          out[o2] = (T)0;                                                                          \
        out += g->out[2];                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
IM2COL_ROW(float)
IM2COL_ROW(double)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GRAD_CONV_X86 1
/* im2col_row_float for a unit stride along the last dim with AVX-512: each
 * output row (zeros, the copied run, zeros) is written 16 floats a masked
 * load and store at a time; masked-off lanes are not read, so the padding
 * needs no bounds. The same values as im2col_row_float. */
__attribute__((target("avx512f"))) static void im2col_row_f32_avx512(const ColJob* j, size_t r) {
  const Geo* g = j->g;
  const size_t c = r / j->kk, tap = r % j->kk;
  const int64_t k2 = (int64_t)(tap % (size_t)g->k[2]);
  const int64_t k1 = (int64_t)(tap / (size_t)g->k[2] % (size_t)g->k[1]);
  const int64_t k0 = (int64_t)(tap / (size_t)g->k[2] / (size_t)g->k[1]);
  const float* x = (const float*)j->x + c * g->in_size;
  float* out = (float*)j->col + r * g->out_size;
  const int64_t base = k2 * g->d[2] - g->pb[2], n2 = g->out[2];
  int64_t vlo, vhi;
  valid_range(base, 1, g->in[2], n2, &vlo, &vhi);
  for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
    const int64_t i0 = o0 * g->s[0] - g->pb[0] + k0 * g->d[0];
    for (int64_t o1 = 0; o1 < g->out[1]; o1++, out += n2) {
      const int64_t i1 = o1 * g->s[1] - g->pb[1] + k1 * g->d[1];
      const bool in01 = i0 >= 0 && i0 < g->in[0] && i1 >= 0 && i1 < g->in[1];
      const int64_t lo = in01 ? vlo : 0, hi = in01 ? vhi : 0;
      /* row start + base: the input position of output 0 (masked below) */
      const float* xrow =
          x +
          ((size_t)(in01 ? i0 : 0) * (size_t)g->in[1] + (size_t)(in01 ? i1 : 0)) * (size_t)g->in[2];
      for (int64_t h = 0; h < n2; h += 16) {
        const int64_t a = lo - h, b = hi - h, e = n2 - h;
        const uint32_t below_b = b <= 0 ? 0 : b >= 16 ? 0xFFFFu : (1u << b) - 1;
        const uint32_t below_a = a <= 0 ? 0 : a >= 16 ? 0xFFFFu : (1u << a) - 1;
        const __mmask16 valid = (__mmask16)(below_b & ~below_a);
        const __mmask16 store = (__mmask16)(e >= 16 ? 0xFFFFu : (1u << e) - 1);
        const __m512 v =
            valid ? _mm512_maskz_loadu_ps(valid, xrow + (base + h)) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(out + h, store, v);
      }
    }
  }
}
#else
#define GRAD_CONV_X86 0
#endif

static void im2col_rows(void* user, size_t begin, size_t end) {
  const ColJob* j = user;
  size_t acc = 0;
#if GRAD_CONV_X86
  const bool avx512 =
      j->type == ONYX_ELEM_FLOAT32 && j->g->s[2] == 1 && cpu_gemm_isa_level() == CPU_ISA_AVX512;
#endif
  for (size_t r = begin; r < end; r++) {
    if (cpu_stop_poll(j->stop, &acc, j->g->out_size + 1)) return;
#if GRAD_CONV_X86
    if (avx512) {
      im2col_row_f32_avx512(j, r);
      continue;
    }
#endif
    if (j->type == ONYX_ELEM_FLOAT32)
      im2col_row_float(j, r);
    else
      im2col_row_double(j, r);
  }
}

/* Channel c of dX: zero, then each tap's col row added at its input
 * positions, taps in order. */
#define COL2IM_CH(T)                                                                               \
  static void col2im_ch_##T(const ColJob* j, size_t c) {                                           \
    const Geo* g = j->g;                                                                           \
    T* x = (T*)j->dx + c * g->in_size;                                                             \
    memset(x, 0, g->in_size * sizeof(T));                                                          \
    const T* col = (const T*)j->col + c * j->kk * g->out_size;                                     \
    for (int64_t k0 = 0; k0 < g->k[0]; k0++)                                                       \
      for (int64_t k1 = 0; k1 < g->k[1]; k1++)                                                     \
        for (int64_t k2 = 0; k2 < g->k[2]; k2++) {                                                 \
          /* the tap's valid outputs along the last dim: the same on every row */                  \
          const int64_t base = k2 * g->d[2] - g->pb[2], s2 = g->s[2];                              \
          int64_t lo, hi;                                                                          \
          valid_range(base, s2, g->in[2], g->out[2], &lo, &hi);                                    \
          for (int64_t o0 = 0; o0 < g->out[0]; o0++) {                                             \
            const int64_t i0 = o0 * g->s[0] - g->pb[0] + k0 * g->d[0];                             \
            for (int64_t o1 = 0; o1 < g->out[1]; o1++, col += g->out[2]) {                         \
              const int64_t i1 = o1 * g->s[1] - g->pb[1] + k1 * g->d[1];                           \
              if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) continue;                  \
              /* dX and col never overlap (separate buffers) */                                    \
              T* restrict xrow =                                                                   \
                  x + ((size_t)i0 * (size_t)g->in[1] + (size_t)i1) * (size_t)g->in[2];             \
              const T* restrict crow = col;                                                        \
              if (s2 == 1)                                                                         \
                for (int64_t o2 = lo; o2 < hi; o2++)                                               \
                  xrow[o2 + base] += crow[o2];                                                     \
              else                                                                                 \
                for (int64_t o2 = lo; o2 < hi; o2++)                                               \
                  xrow[o2 * s2 + base] += crow[o2];                                                \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
  }
COL2IM_CH(float)
COL2IM_CH(double)

static void col2im_chs(void* user, size_t begin, size_t end) {
  const ColJob* j = user;
  size_t acc = 0;
  for (size_t c = begin; c < end; c++) {
    if (cpu_stop_poll(j->stop, &acc, j->kk * j->g->out_size + 1)) return;
    if (j->type == ONYX_ELEM_FLOAT32)
      col2im_ch_float(j, c);
    else
      col2im_ch_double(j, c);
  }
}

/* ======================================================================== */
/* ConvGrad                                                                 */
/* ======================================================================== */

typedef struct BiasJob {
  int32_t type;
  const void* dy;
  void* db;
  size_t n, m, os;
  CpuStop* stop;
} BiasJob;

static void bias_rows(void* user, size_t begin, size_t end) {
  const BiasJob* j = user;
  size_t acc = 0;
  for (size_t m = begin; m < end; m++) {
    if (cpu_stop_poll(j->stop, &acc, j->n * j->os + 1)) return;
    double s = 0;
    for (size_t n = 0; n < j->n; n++) {
      const size_t base = (n * j->m + m) * j->os;
      if (j->type == ONYX_ELEM_FLOAT32)
        for (size_t i = 0; i < j->os; i++)
          s += ((const float*)j->dy)[base + i];
      else
        for (size_t i = 0; i < j->os; i++)
          s += ((const double*)j->dy)[base + i];
    }
    if (j->type == ONYX_ELEM_FLOAT32)
      ((float*)j->db)[m] = (float)s;
    else
      ((double*)j->db)[m] = s;
  }
}

static void gemm(int32_t type, OnyxThreadPool* pool, const CpuGemm* g) {
  if (type == ONYX_ELEM_FLOAT32)
    cpu_gemm_f32(pool, g);
  else
    cpu_gemm_f64(pool, g);
}

/* ======================================================================== */
/* dX of a unit-stride convolution as a convolution of dY                   */
/* ======================================================================== */

/* With unit strides, X position i meets output i + pb - t d through tap t
 * (per spatial dim). With dY copied into Dp, each plane padded to
 * pd = in + (k - 1) d positions per dim, output o at o + (k - 1) d - pb,
 * position i takes tap t's contribution from Dp[i + (k - 1 - t) d], so
 *   dX[n, g, c, i] = sum over m, t' of Wf[c][(m, t')] Dp[m, i + t' d],
 *   Wf[c][(m, t')] = W[g mg + m, c, K - 1 - t'] (every spatial dim flipped,
 *   which reverses the flat tap index).
 * One GEMM per image and group, dX (cg x in) = Wf (cg x mg K) . B, with
 * the rows (m, t') x columns i of B written panel by panel as the GEMM asks
 * (pack_b_fn): a panel's columns split into runs along X's last dim, each
 * a contiguous slice of Dp. No col matrix, no col2im scatter, and the GEMM's
 * k is mg K instead of mg. Outputs whose windows lie wholly in the padding
 * (pads past the kernel's extent) reach no X position and are left out of
 * Dp. */
enum { DX_NR_MAX = 64 };

typedef struct DxPanel {
  const Geo* g;
  const float* dp; /* the group's padded dY planes of one image */
  size_t plane;    /* floats per padded plane */
  size_t pd[SP];   /* padded dims */
  size_t nr;       /* panel width: cpu_gemm_nr() */
} DxPanel;

/* The runs of panel `panel`: its columns' X positions split where X's last
 * dim wraps; run q fills panel columns [col[q], col[q] + len[q]) from Dp
 * offset off[q] on (plus the row's tap offset). */
static size_t dx_runs(const DxPanel* j, size_t panel, size_t* cols, size_t* col, size_t* len,
                      size_t* off) {
  const Geo* g = j->g;
  const size_t nr = j->nr, n = g->in_size, c0 = panel * nr;
  const size_t in1 = (size_t)g->in[1], in2 = (size_t)g->in[2];
  size_t runs = 0;
  *cols = n - c0 < nr ? n - c0 : nr;
  for (size_t jj = 0, i = c0; jj < *cols; runs++) {
    const size_t i2 = i % in2, i1 = i / in2 % in1, i0 = i / in2 / in1;
    const size_t l = *cols - jj < in2 - i2 ? *cols - jj : in2 - i2;
    col[runs] = jj;
    len[runs] = l;
    off[runs] = (i0 * j->pd[1] + i1) * j->pd[2] + i2;
    jj += l;
    i += l;
  }
  return runs;
}

/* Dp's offsets of B's rows (m, t'), stepped along without divisions (a
 * panel row is a few dozen floats: a division per row would cost more than
 * its copy). */
typedef struct DxRow {
  size_t m, t0, t1, t2, off;
} DxRow;

static inline void dx_row_start(const DxPanel* j, size_t r, DxRow* w) {
  const Geo* g = j->g;
  const size_t kk = g->k_size, kw = (size_t)g->k[2], kh = (size_t)g->k[1];
  const size_t t = r % kk;
  w->m = r / kk;
  w->t2 = t % kw;
  w->t1 = t / kw % kh;
  w->t0 = t / kw / kh;
  w->off = w->m * j->plane +
           (w->t0 * (size_t)g->d[0] * j->pd[1] + w->t1 * (size_t)g->d[1]) * j->pd[2] +
           w->t2 * (size_t)g->d[2];
}

static inline void dx_row_next(const DxPanel* j, DxRow* w) {
  const Geo* g = j->g;
  if (++w->t2 < (size_t)g->k[2]) {
    w->off += (size_t)g->d[2];
    return;
  }
  w->t2 = 0;
  if (++w->t1 == (size_t)g->k[1]) {
    w->t1 = 0;
    if (++w->t0 == (size_t)g->k[0]) {
      w->t0 = 0;
      w->m++;
    }
  }
  w->off =
      w->m * j->plane + (w->t0 * (size_t)g->d[0] * j->pd[1] + w->t1 * (size_t)g->d[1]) * j->pd[2];
}

#if GRAD_CONV_X86
/* The runs copied 16 floats a masked load and store at a time: the runs
 * are short (a row of a small image), where a memcpy call per run costs
 * more than the copy. */
__attribute__((target("avx512f"))) static void dx_panel_avx512(void* user, float* dst, size_t panel,
                                                               size_t k0, size_t k1) {
  const DxPanel* j = user;
  size_t cols, col[DX_NR_MAX], len[DX_NR_MAX], off[DX_NR_MAX];
  const size_t runs = dx_runs(j, panel, &cols, col, len, off), nr = j->nr;
  DxRow w;
  dx_row_start(j, k0, &w);
  for (size_t r = k0; r < k1; r++, dst += nr, dx_row_next(j, &w)) {
    const float* src = j->dp + w.off;
    for (size_t q = 0; q < runs; q++)
      for (size_t h = 0; h < len[q]; h += 16) {
        const size_t e = len[q] - h;
        const __mmask16 mk = (__mmask16)(e >= 16 ? 0xFFFFu : (1u << e) - 1);
        _mm512_mask_storeu_ps(dst + col[q] + h, mk, _mm512_maskz_loadu_ps(mk, src + off[q] + h));
      }
    for (size_t c = cols; c < nr; c++)
      dst[c] = 0.0f;
  }
}
#endif

static void dx_panel(void* user, float* dst, size_t panel, size_t k0, size_t k1) {
  const DxPanel* j = user;
  size_t cols, col[DX_NR_MAX], len[DX_NR_MAX], off[DX_NR_MAX];
  const size_t runs = dx_runs(j, panel, &cols, col, len, off), nr = j->nr;
  DxRow w;
  dx_row_start(j, k0, &w);
  for (size_t r = k0; r < k1; r++, dst += nr, dx_row_next(j, &w)) {
    const float* src = j->dp + w.off;
    for (size_t q = 0; q < runs; q++) {
      const float* s = src + off[q];
      float* d = dst + col[q];
      for (size_t t = 0; t < len[q]; t++)
        d[t] = s[t];
    }
    for (size_t c = cols; c < nr; c++)
      dst[c] = 0.0f;
  }
}

/* Dp for planes [0, planes) of dY (os each) into dp (plane each). */
static void dx_pad(const Geo* g, const size_t* pd, size_t plane, const float* dy, size_t planes,
                   float* dp) {
  int64_t lead[SP];
  for (size_t i = 0; i < SP; i++)
    lead[i] = (g->k[i] - 1) * g->d[i] - g->pb[i];
  memset(dp, 0, planes * plane * sizeof(float));
  /* output columns o2 whose padded position o2 + lead[2] is in [0, pd[2]) */
  const int64_t lo2 = lead[2] < 0 ? -lead[2] : 0;
  int64_t hi2 = (int64_t)pd[2] - lead[2];
  if (hi2 > g->out[2]) hi2 = g->out[2];
  for (size_t m = 0; m < planes; m++)
    for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
      const int64_t p0 = o0 + lead[0];
      if (p0 < 0 || p0 >= (int64_t)pd[0]) continue;
      for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
        const int64_t p1 = o1 + lead[1];
        if (p1 < 0 || p1 >= (int64_t)pd[1] || lo2 >= hi2) continue;
        const float* s = dy + m * g->out_size +
                         ((size_t)o0 * (size_t)g->out[1] + (size_t)o1) * (size_t)g->out[2];
        float* d = dp + m * plane + ((size_t)p0 * pd[1] + (size_t)p1) * pd[2];
        memcpy(d + lo2 + lead[2], s + lo2, (size_t)(hi2 - lo2) * sizeof(float));
      }
    }
}

/* The path applies: float32, unit strides, a panel no wider than
 * DX_NR_MAX, and the padded planes' sizes computable. */
static bool dx_conv_applies(const Geo* g, int32_t type, size_t* pd, size_t* plane) {
  if (type != ONYX_ELEM_FLOAT32 || cpu_gemm_nr() > DX_NR_MAX) return false;
  size_t p = 1;
  for (size_t i = 0; i < SP; i++) {
    int64_t ext;
    if (g->s[i] != 1 || !cpu_mul_i64(g->k[i] - 1, g->d[i], &ext) ||
        !cpu_add_i64(ext, g->in[i], &ext) || !cpu_mul_size(p, (size_t)ext, &p))
      return false;
    pd[i] = (size_t)ext;
  }
  *plane = p;
  return true;
}

/* dX for every image and group; wf_pack: scratch for the packed Wf of one
 * group, dp: for mg padded planes. */
static OnyxStatus* dx_conv(OnyxKernelContext* ctx, const Geo* g, const size_t* pd, size_t plane,
                           const float* dy, const float* w, float* dx, size_t n, size_t group,
                           size_t cg, size_t mg, float* wf, float* wf_pack, float* dp,
                           CpuStop* stop) {
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const size_t kk = g->k_size, kdim = mg * kk, c = group * cg, m = group * mg;
  DxPanel pj = {g, dp, plane, {pd[0], pd[1], pd[2]}, cpu_gemm_nr()};
  void (*panel_fn)(void*, float*, size_t, size_t, size_t) = dx_panel;
#if GRAD_CONV_X86
  if (cpu_gemm_isa_level() == CPU_ISA_AVX512) panel_fn = dx_panel_avx512;
#endif
  for (size_t gi = 0; gi < group; gi++) {
    /* Wf of group gi: row c, column (m, t') = W[gi mg + m, c, K - 1 - t'] */
    for (size_t ci = 0; ci < cg; ci++)
      for (size_t mi = 0; mi < mg; mi++) {
        const float* src = w + ((gi * mg + mi) * cg + ci) * kk;
        float* d = wf + ci * kdim + mi * kk;
        for (size_t t = 0; t < kk; t++)
          d[t] = src[kk - 1 - t];
      }
    cpu_gemm_pack_a(NULL, wf_pack, wf, kdim, 0, cg, kdim);
    for (size_t ni = 0; ni < n; ni++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      dx_pad(g, pd, plane, dy + (ni * m + gi * mg) * g->out_size, mg, dp);
      const CpuGemm gm = {.m = cg,
                          .n = g->in_size,
                          .k = kdim,
                          .a = wf,
                          .lda = kdim,
                          .packed_a = wf_pack,
                          .c = dx + (ni * c + gi * cg) * g->in_size,
                          .ldc = g->in_size,
                          .alpha = 1.0,
                          .beta = 0.0,
                          .pack_b_fn = panel_fn,
                          .pack_b_user = &pj,
                          .stop = stop};
      cpu_gemm_f32(pool, &gm);
      if (cpu_stop_seen(stop)) return cpu_cancelled(ctx, NULL);
    }
  }
  return NULL;
}

/* The direct kernels apply: float32 on a machine that runs them, at most
 * 2 spatial dims (Geo's leading dims are then 1s without padding), unit
 * strides and dilations, and at most CPU_GRAD_CONV_DIRECT_MAX_CH channels
 * per group on either side. */
static bool direct_applies(const Geo* g, int32_t type, size_t cg, size_t mg) {
  if (type != ONYX_ELEM_FLOAT32 || g->nsp > 2 || cg > CPU_GRAD_CONV_DIRECT_MAX_CH ||
      mg > CPU_GRAD_CONV_DIRECT_MAX_CH || !cpu_grad_conv_direct_available())
    return false;
  for (size_t i = 0; i < SP; i++)
    if (g->s[i] != 1 || g->d[i] != 1) return false;
  return true;
}

static OnyxStatus* conv_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 2);
  const int32_t type = cpu_host->tensor_elem_type(x);
  if ((type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64) ||
      (int32_t)cpu_host->tensor_elem_type(dy) != type ||
      (int32_t)cpu_host->tensor_elem_type(w) != type)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "dY, X and W must share one type, float32 or float64");
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* wd = cpu_host->tensor_dims(w);
  if (r < 3 || r > 2 + SP || cpu_host->tensor_rank(w) != r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X and W must both be 3-D to 5-D (1 to 3 spatial dims), got %zu-D and "
                         "%zu-D",
                         r, cpu_host->tensor_rank(w));
  const int64_t group = cpu_host->node_attr_int(node, "group", 1);
  const int64_t c = xd[1], m = wd[0];
  if (group < 1 || c % group || m % group || wd[1] != c / group)
    return cpu_ctx_error(
        ctx, ONYX_INVALID_ARGUMENT,
        "group %lld does not fit X's %lld channels and W's shape (%lld, %lld, ...)",
        (long long)group, (long long)c, (long long)wd[0], (long long)wd[1]);
  const size_t nsp = r - 2;
  size_t nks = 0;
  const int64_t* ks = cpu_host->node_attr_ints(node, "kernel_shape", &nks);
  if (nks && (nks != nsp || memcmp(ks, wd + 2, nsp * sizeof *ks)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "kernel_shape does not match W's spatial dims");
  Geo g;
  OnyxStatus* st = geo_init(ctx, nsp, xd + 2, wd + 2, false, &g);
  if (st || (st = check_dy(ctx, dy, xd[0], m, &g))) return st;
  const bool want_dx = has_output(node, 0), want_dw = has_output(node, 1),
             want_db = has_output(node, 2);
  OnyxTensor *tdx = NULL, *tdw = NULL, *tdb = NULL;
  if (want_dx && (st = cpu_host->ctx_output(ctx, 0, xd, r, &tdx))) return st;
  if (want_dw && (st = cpu_host->ctx_output(ctx, 1, wd, r, &tdw))) return st;
  if (want_db && (st = cpu_host->ctx_output(ctx, 2, wd, 1, &tdb))) return st;
  const size_t es = cpu_elem_size(type), n = (size_t)xd[0];
  const size_t cg = (size_t)(c / group), mg = (size_t)(m / group), os = g.out_size;
  size_t ck;
  if (!cpu_mul_size(cg, g.k_size, &ck))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "channels x kernel taps overflows");
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  CpuStop stop = {.ctx = ctx};
  if (tdb && m) {
    if (!n || !os)
      memset(cpu_host->tensor_mutable_data(tdb), 0, (size_t)m * es);
    else {
      BiasJob bj = {
          type, cpu_host->tensor_data(dy), cpu_host->tensor_mutable_data(tdb), n, (size_t)m, os,
          &stop};
      cpu_host->parallel_for(n * (size_t)m * os >= 32768 ? pool : NULL, (size_t)m, bias_rows, &bj);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
  }
  if ((!tdx && !tdw) || !n || !cg || !mg || !os || !ck) {
    /* nothing to sum: zeros (the GEMMs below overwrite them otherwise) */
    if (tdw && cpu_host->tensor_elem_count(tdw))
      memset(cpu_host->tensor_mutable_data(tdw), 0, cpu_host->tensor_elem_count(tdw) * es);
    if (tdx && cpu_host->tensor_elem_count(tdx))
      memset(cpu_host->tensor_mutable_data(tdx), 0, cpu_host->tensor_elem_count(tdx) * es);
    return NULL;
  }
  /* A 1x1 window without stride or padding: col is X itself and dX is
   * the GEMM's output. */
  bool pointwise = g.k_size == 1;
  for (size_t i = 0; i < SP; i++)
    pointwise = pointwise && g.s[i] == 1 && g.pb[i] == 0 && g.pe[i] == 0;
  /* float32 2-D (or 1-D) windows with unit strides and dilations and few
   * channels: the direct kernels (cpu_grad_conv_direct.h), no im2col. */
  float* direct_scratch = NULL;
  const bool direct = !pointwise && direct_applies(&g, type, cg, mg);
  if (direct) {
    size_t fw = 0, fx = 0;
    const CpuGradConv2d d2 = {.n = n,
                              .c = cg,
                              .m = mg,
                              .ih = (size_t)g.in[1],
                              .iw = (size_t)g.in[2],
                              .oh = (size_t)g.out[1],
                              .ow = (size_t)g.out[2],
                              .kh = (size_t)g.k[1],
                              .kw = (size_t)g.k[2]};
    if ((tdw && !cpu_grad_conv_dw_scratch(&d2, &fw)) ||
        (tdx && !cpu_grad_conv_dx_scratch(&d2, &fx)))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "the padded planes of X or dY do not fit in memory");
    if (!(direct_scratch = cpu_host->ctx_scratch(ctx, (fw > fx ? fw : fx) * sizeof(float))))
      return cpu_oom(ctx);
  }
  /* Scratch: col (ck x os) unless pointwise; colT (os x ck) for the
   * float64 dW (its GEMM takes no transposed B). */
  const bool need_colt = tdw && type == ONYX_ELEM_FLOAT64;
  size_t col_elems = 0, bytes = 0;
  if (!cpu_mul_size(ck, os, &col_elems) ||
      !cpu_mul_size(col_elems, (pointwise || direct ? 0 : 1) + (need_colt ? 1 : 0), &bytes) ||
      !cpu_mul_size(bytes, es, &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "the im2col matrix (%zu x %zu) does not fit in memory", ck, os);
  char* scratch = NULL;
  if (bytes && !(scratch = cpu_host->ctx_scratch(ctx, bytes))) return cpu_oom(ctx);
  char* col = pointwise ? NULL : scratch;
  char* colt = need_colt ? scratch + (pointwise ? 0 : col_elems * es) : NULL;
  /* dX: with unit strides a convolution of dY (dx_conv); otherwise per
   * image a GEMM into dcol, scattered by col2im (pointwise: dX directly). */
  size_t pd[SP], plane = 0;
  const bool dx_direct = tdx && !pointwise && !direct && dx_conv_applies(&g, type, pd, &plane);
  char* dcol = NULL;
  if (tdx && !pointwise && !direct && !dx_direct &&
      !(dcol = cpu_host->ctx_scratch(ctx, col_elems * es)))
    return cpu_oom(ctx);
  if (dx_direct) {
    const size_t kdim = mg * g.k_size;
    size_t wf_n, dp_n;
    float *wf = NULL, *wf_pack = NULL, *dp = NULL;
    if (cpu_mul_size(cg, kdim, &wf_n) && cpu_mul_size(mg, plane, &dp_n) && wf_n < SIZE_MAX / 8 &&
        dp_n < SIZE_MAX / 8) {
      wf = cpu_host->ctx_scratch(ctx, wf_n * sizeof(float));
      wf_pack = cpu_host->ctx_scratch(ctx, cpu_gemm_packed_a_floats(cg, kdim) * sizeof(float));
      dp = cpu_host->ctx_scratch(ctx, dp_n * sizeof(float));
    }
    if (!wf || !wf_pack || !dp) return cpu_oom(ctx);
    OnyxStatus* dst = dx_conv(ctx, &g, pd, plane, cpu_host->tensor_data(dy),
                              cpu_host->tensor_data(w), cpu_host->tensor_mutable_data(tdx), n,
                              (size_t)group, cg, mg, wf, wf_pack, dp, &stop);
    if (dst) return dst;
  }
  const char* xdat = cpu_host->tensor_data(x);
  const char* wdat = cpu_host->tensor_data(w);
  const char* ydat = cpu_host->tensor_data(dy);
  if (direct) {
    const CpuGradConv2d d2 = {.n = n,
                              .c = cg,
                              .m = mg,
                              .xc = (size_t)c,
                              .yc = (size_t)m,
                              .ih = (size_t)g.in[1],
                              .iw = (size_t)g.in[2],
                              .oh = (size_t)g.out[1],
                              .ow = (size_t)g.out[2],
                              .kh = (size_t)g.k[1],
                              .kw = (size_t)g.k[2],
                              .pt = (size_t)g.pb[1],
                              .pl = (size_t)g.pb[2]};
    for (size_t gi = 0; gi < (size_t)group; gi++) {
      const float* xg = (const float*)xdat + gi * cg * g.in_size;
      const float* yg = (const float*)ydat + gi * mg * os;
      if (tdw)
        cpu_grad_conv_dw(pool, &d2, xg, yg,
                         (float*)cpu_host->tensor_mutable_data(tdw) + gi * mg * ck, direct_scratch,
                         &stop);
      if (tdx && !cpu_stop_seen(&stop))
        cpu_grad_conv_dx(pool, &d2, yg, (const float*)wdat + gi * mg * ck,
                         (float*)cpu_host->tensor_mutable_data(tdx) + gi * cg * g.in_size,
                         direct_scratch, &stop);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
    return NULL;
  }
  for (size_t ni = 0; ni < n; ni++)
    for (size_t gi = 0; gi < (size_t)group; gi++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const char* xg = xdat + (ni * (size_t)c + gi * cg) * g.in_size * es;
      const char* yg = ydat + (ni * (size_t)m + gi * mg) * os * es;
      const char* wg = wdat + gi * mg * ck * es;
      const char* cols = pointwise ? xg : col;
      if (tdw) {
        if (!pointwise) {
          ColJob cj = {&g, type, xg, col, NULL, g.k_size, &stop};
          cpu_host->parallel_for(col_elems >= 32768 ? pool : NULL, ck, im2col_rows, &cj);
          if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
        }
        if (need_colt) cpu_nn_transpose(colt, cols, ck, os, es);
        /* dW[g] (mg x ck) += dY[n, g] (mg x os) . col^T (os x ck) */
        const CpuGemm gm = {.m = mg,
                            .n = ck,
                            .k = os,
                            .a = yg,
                            .lda = os,
                            .b = need_colt ? (const void*)colt : (const void*)cols,
                            .ldb = need_colt ? ck : os,
                            .trans_b = need_colt ? 0 : 1,
                            .c = (char*)cpu_host->tensor_mutable_data(tdw) + gi * mg * ck * es,
                            .ldc = ck,
                            .alpha = 1.0,
                            .beta = ni ? 1.0 : 0.0,
                            .stop = &stop};
        gemm(type, pool, &gm);
        if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
      }
      if (tdx && !dx_direct) {
        char* dxg =
            (char*)cpu_host->tensor_mutable_data(tdx) + (ni * (size_t)c + gi * cg) * g.in_size * es;
        /* dcol (ck x os) = W[g]^T (ck x mg) . dY[n, g] (mg x os) */
        const CpuGemm gm = {.m = ck,
                            .n = os,
                            .k = mg,
                            .a = wg,
                            .lda = ck,
                            .trans_a = 1,
                            .b = yg,
                            .ldb = os,
                            .c = pointwise ? dxg : dcol,
                            .ldc = os,
                            .alpha = 1.0,
                            .beta = 0.0,
                            .stop = &stop};
        gemm(type, pool, &gm);
        if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
        if (!pointwise) {
          ColJob cj = {&g, type, NULL, dcol, dxg, g.k_size, &stop};
          cpu_host->parallel_for(col_elems >= 32768 ? pool : NULL, cg, col2im_chs, &cj);
          if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
        }
      }
    }
  return NULL;
}

/* ======================================================================== */
/* MaxPoolGrad, AveragePoolGrad                                             */
/* ======================================================================== */

/* X_shape (int64, 1-D, 3 to 5 values) into xd; *count elements of X. */
static OnyxStatus* read_x_shape(OnyxKernelContext* ctx, const OnyxTensor* t, int64_t* xd,
                                size_t* rank, size_t* count) {
  OnyxStatus* st = cpu_read_ints(ctx, t, "X_shape", xd, 2 + SP, rank);
  if (st) return st;
  if (cpu_host->tensor_rank(t) != 1 || *rank < 3)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X_shape must be 1-D with 3 to 5 values (N, C, spatial...)");
  for (size_t i = 0; i < *rank; i++)
    if (xd[i] < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is %lld (negative)", i,
                           (long long)xd[i]);
  if (!cpu_dims_count(xd, *rank, count))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape's element count overflows");
  return NULL;
}

static OnyxStatus* maxpool_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* ind = cpu_host->ctx_input(ctx, 1);
  const int32_t type = cpu_host->tensor_elem_type(dy);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY must be float32 or float64");
  if (cpu_host->node_attr_int(node, "storage_order", 0) != 0)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED,
                         "storage_order 1 (column-major Indices) is not supported");
  const size_t yr = cpu_host->tensor_rank(dy);
  if (cpu_host->tensor_elem_type(ind) != ONYX_ELEM_INT64 || cpu_host->tensor_rank(ind) != yr ||
      (yr && memcmp(cpu_host->tensor_dims(ind), cpu_host->tensor_dims(dy), yr * sizeof(int64_t))))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Indices must be int64 with dY's shape");
  int64_t xd[2 + SP];
  size_t xr, xc;
  OnyxStatus* st = read_x_shape(ctx, cpu_host->ctx_input(ctx, 2), xd, &xr, &xc);
  if (st) return st;
  OnyxTensor* dx;
  if ((st = cpu_host->ctx_output(ctx, 0, xd, xr, &dx))) return st;
  const size_t es = cpu_elem_size(type), count = cpu_host->tensor_elem_count(dy);
  if (xc) memset(cpu_host->tensor_mutable_data(dx), 0, xc * es);
  const int64_t* idx = cpu_host->tensor_data(ind);
  const void* y = cpu_host->tensor_data(dy);
  void* out = cpu_host->tensor_mutable_data(dx);
  /* In order i = 0, 1, ...: a deterministic sum where windows overlap. */
  for (size_t i = 0; i < count; i++) {
    if ((i & (CPU_STOP_INTERVAL - 1)) == 0 && i && cpu_should_stop(ctx))
      return cpu_cancelled(ctx, NULL);
    const int64_t v = idx[i];
    if (v < 0 || (uint64_t)v >= xc)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "Indices[%zu] = %lld is outside X's %zu elements", i, (long long)v, xc);
    if (type == ONYX_ELEM_FLOAT32)
      ((float*)out)[v] += ((const float*)y)[i];
    else
      ((double*)out)[v] += ((const double*)y)[i];
  }
  return NULL;
}

/* Kernel taps kk in [*a0, *a1) whose position start + kk d lies in
 * [lo, hi); computed, never searched. */
static void clip_taps(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t* a0,
                      int64_t* a1) {
  int64_t first = start >= lo ? 0 : (lo - start) / d + ((lo - start) % d != 0);
  int64_t end = hi - 1 - start < 0 ? 0 : (hi - 1 - start) / d + 1;
  if (first > k) first = k;
  if (end > k) end = k;
  *a0 = first;
  *a1 = end > first ? end : first;
}

typedef struct AvgJob {
  const Geo* g;
  int32_t type;
  bool include_pad;
  const void* dy;
  void* dx;
  CpuStop* stop;
} AvgJob;

static void avg_planes(void* user, size_t begin, size_t end) {
  const AvgJob* j = user;
  const Geo* g = j->g;
  size_t acc = 0;
  for (size_t p = begin; p < end; p++) {
    if (cpu_stop_poll(j->stop, &acc, g->out_size + g->in_size)) return;
    size_t o = 0;
    for (int64_t o0 = 0; o0 < g->out[0]; o0++)
      for (int64_t o1 = 0; o1 < g->out[1]; o1++)
        for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {
          const int64_t oc[SP] = {o0, o1, o2};
          int64_t a0[SP], a1[SP], start[SP];
          size_t padded = 1, taps = 1;
          for (size_t i = 0; i < SP; i++) {
            int64_t p0, p1;
            start[i] = oc[i] * g->s[i] - g->pb[i];
            clip_taps(start[i], g->k[i], g->d[i], -g->pb[i], g->in[i] + g->pe[i], &p0, &p1);
            padded *= (size_t)(p1 - p0);
            clip_taps(start[i], g->k[i], g->d[i], 0, g->in[i], &a0[i], &a1[i]);
            taps *= (size_t)(a1[i] - a0[i]);
          }
          const size_t div = j->include_pad ? padded : taps;
          if (!taps || !div) continue;
          const size_t at = p * g->out_size + o;
          const double v = (j->type == ONYX_ELEM_FLOAT32 ? (double)((const float*)j->dy)[at]
                                                         : ((const double*)j->dy)[at]) /
                           (double)div;
          for (int64_t t0 = a0[0]; t0 < a1[0]; t0++)
            for (int64_t t1 = a0[1]; t1 < a1[1]; t1++) {
              const size_t row =
                  p * g->in_size + ((size_t)(start[0] + t0 * g->d[0]) * (size_t)g->in[1] +
                                    (size_t)(start[1] + t1 * g->d[1])) *
                                       (size_t)g->in[2];
              for (int64_t t2 = a0[2]; t2 < a1[2]; t2++) {
                const size_t xi = row + (size_t)(start[2] + t2 * g->d[2]);
                if (j->type == ONYX_ELEM_FLOAT32)
                  ((float*)j->dx)[xi] += (float)v;
                else
                  ((double*)j->dx)[xi] += v;
              }
            }
        }
  }
}

static OnyxStatus* avgpool_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const int32_t type = cpu_host->tensor_elem_type(dy);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY must be float32 or float64");
  int64_t xd[2 + SP];
  size_t xr, xc;
  OnyxStatus* st = read_x_shape(ctx, cpu_host->ctx_input(ctx, 1), xd, &xr, &xc);
  if (st) return st;
  size_t nks = 0;
  const int64_t* ks = cpu_host->node_attr_ints(node, "kernel_shape", &nks);
  if (nks != xr - 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "kernel_shape has %zu values, expected %zu (X's spatial rank)", nks,
                         xr - 2);
  Geo g;
  if ((st = geo_init(ctx, xr - 2, xd + 2, ks, cpu_host->node_attr_int(node, "ceil_mode", 0) != 0,
                     &g)) ||
      (st = check_dy(ctx, dy, xd[0], xd[1], &g)))
    return st;
  OnyxTensor* dx;
  if ((st = cpu_host->ctx_output(ctx, 0, xd, xr, &dx))) return st;
  if (!xc) return NULL;
  memset(cpu_host->tensor_mutable_data(dx), 0, xc * cpu_elem_size(type));
  const size_t planes = (size_t)xd[0] * (size_t)xd[1];
  CpuStop stop = {.ctx = ctx};
  AvgJob j = {&g,
              type,
              cpu_host->node_attr_int(node, "count_include_pad", 0) != 0,
              cpu_host->tensor_data(dy),
              cpu_host->tensor_mutable_data(dx),
              &stop};
  cpu_host->parallel_for(xc >= 32768 ? cpu_host->ctx_thread_pool(ctx) : NULL, planes, avg_planes,
                         &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* Registration                                                             */
/* ======================================================================== */

#define GDEF(op, comp)                                                                             \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = TRAINING, .op_type = op, .since_version = 1,   \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = TC_T,                                    \
    .type_constraint_count = CPU_ARRAY_LEN(TC_T), .compute = comp                                  \
  }

OnyxStatus* cpu_register_grad_conv(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      GDEF("ConvGrad", conv_grad_compute),
      GDEF("MaxPoolGrad", maxpool_grad_compute),
      GDEF("AveragePoolGrad", avgpool_grad_compute),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
