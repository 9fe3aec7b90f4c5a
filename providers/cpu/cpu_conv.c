/* cpu_conv.c — the Conv kernel (also com.onyx FusedConv's): dispatch among
 * the direct, depthwise, Winograd and small-output paths, im2col + the GEMM
 * core of cpu_gemm.c otherwise, and the fused-activation epilogue.
 *
 * Attributes are read once in `create` into a state struct; shapes are only
 * known in `compute`, where the window geometry is derived and checked. */
#include "cpu_avx2.h"
#include "cpu_conv_depthwise.h"
#include "cpu_conv_direct.h"
#include "cpu_grad_conv_direct.h"
#include "cpu_nchwc.h"
#include "cpu_nchwc_pool.h"
#include "cpu_nn_common.h"
#include "cpu_types.h"
#include "cpu_winograd.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "[3,3]" into buf (truncated to fit), for messages. */
static const char* format_dims(char* buf, size_t size, const int64_t* d, size_t n) {
  size_t len = (size_t)snprintf(buf, size, "[");
  for (size_t i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "", (long long)d[i]);
  if (len < size) snprintf(buf + len, size - len, "]");
  return buf;
}

/* ======================================================================== */
/* Conv                                                                      */
/* ======================================================================== */

typedef struct Im2Col {
  const Geometry* g;
  const void* x; /* one group's channels of one image */
  void* col;     /* (channels * k_size) x out_size */
} Im2Col;

/* Row r of col is channel r / k_size at kernel offset r % k_size; every
 * output position reads one input element of it, or 0 in the padding. The
 * last spatial dim is the inner loop; the others are resolved once per run. */
#define DEFINE_IM2COL(T)                                                                           \
  static void im2col_rows_##T(void* user, size_t begin, size_t end) {                              \
    const Im2Col* job = user;                                                                      \
    const Geometry* g = job->g;                                                                    \
    const size_t last = g->rank - 1, w_out = (size_t)g->out[last];                                 \
    const size_t outer = g->out_size / w_out;                                                      \
    for (size_t r = begin; r < end; r++) {                                                         \
      const T* x = (const T*)job->x + (r / g->k_size) * g->in_size;                                \
      T* dst = (T*)job->col + r * g->out_size;                                                     \
      int64_t kc[MAX_SPATIAL], oc[MAX_SPATIAL];                                                    \
      nn_unravel(r % g->k_size, g->k, g->rank, kc);                                                \
      for (size_t q = 0; q < outer; q++, dst += w_out) {                                           \
        nn_unravel(q, g->out, last, oc);                                                           \
        int64_t off = 0, valid = 1;                                                                \
        for (size_t i = 0; i < last; i++) {                                                        \
          const int64_t xi = oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];                         \
          valid &= xi >= 0 && xi < g->in[i];                                                       \
          off = off * g->in[i] + (valid ? xi : 0);                                                 \
        }                                                                                          \
        if (!valid) {                                                                              \
          memset(dst, 0, w_out * sizeof(T));                                                       \
          continue;                                                                                \
        }                                                                                          \
        const int64_t x0 = kc[last] * g->d[last] - g->pb[last], s = g->s[last];                    \
        const int64_t n_in = g->in[last];                                                          \
        const T* row = x + off * n_in;                                                             \
        for (size_t o = 0; o < w_out; o++) {                                                       \
          const int64_t xi = (int64_t)o * s + x0;                                                  \
          dst[o] = xi >= 0 && xi < n_in ? row[xi] : (T)0;                                          \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_IM2COL(float)
DEFINE_IM2COL(double)

typedef struct ConvState {
  WindowAttrs w;
  /* A constant float32 W packed per group as GEMM A operands (mg x kdim
   * each, `group_floats` apart), or NULL. */
  float* packed_w;
  size_t packed_m, packed_k, group_floats;
  /* com.onyx FusedConv: the activation the GEMM epilogue applies. */
  int act; /* CpuAct */
  float act_alpha, act_min, act_max;
  /* W transformed for Winograd F(4x4, 3x3) at creation, or NULL. */
  CpuWinograd* wino;
  /* Small outputs (see CONV_SMALL_OUT): W^T packed as the GEMM's B operand
   * (kdim x m), for Y^T = im2col(X)^T W^T, or NULL. */
  float* packed_wt;
  size_t packed_wt_m, packed_wt_k;
  /* W packed for the direct AVX-512 path (cpu_conv_direct.h), or NULL. */
  CpuConvDirect* direct;
} ConvState;

/* Where the direct path is missing (no AVX-512, or ONYX_CPU_CONV_DIRECT=0):
 * at most this many output positions per image, a 2-D group-1 Conv with at
 * least CONV_SMALL_M output channels computes Y^T (positions x channels)
 * instead of Y: the GEMM's rows are then the few positions (7 x 7 = 49 fill
 * 7 of 8-row panels) and its columns the many channels (full 32-wide
 * panels), where Y = W x im2col would leave most of each 32-wide B panel
 * empty (ResNet-18's 512-channel 7x7 layers, standalone: 2.3 -> 1.3 ms
 * each; the direct path does them in 1.1). */
#define CONV_SMALL_OUT 64
#define CONV_SMALL_M   64

void cpu_conv_release(void* state) {
  ConvState* s = state;
  if (!s) return;
  free(s->packed_w);
  free(s->packed_wt);
  cpu_winograd_free(s->wino);
  cpu_conv_direct_free(s->direct);
  free(s);
}

/* Packs W (m, c/group, kernel...) when it is a constant float32 tensor. */
/* Packs W (m, c/group, kernel...) as the GEMM's A operand (mg x kdim per
 * group) when it is a constant float32 tensor. */
static void conv_pack_weights(ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  if (!wt || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(wt) < 3)
    return;
  const int64_t* d = cpu_host->tensor_dims(wt);
  const size_t group = (size_t)s->w.group, m = (size_t)d[0];
  const size_t kdim = cpu_dims_product(d, 1, cpu_host->tensor_rank(wt));
  if (m == 0 || kdim == 0 || m % group != 0) return;
  const size_t mg = m / group, per = cpu_gemm_packed_a_floats(mg, kdim);
  float* p = cpu_gemm_alloc_packed(per * group);
  if (!p) return; /* packed per run instead */
  const float* src = cpu_host->tensor_data(wt);
  for (size_t g = 0; g < group; g++)
    cpu_gemm_pack_a(NULL, p + g * per, src + g * mg * kdim, kdim, 0, mg, kdim);
  s->packed_w = p, s->packed_m = mg, s->packed_k = kdim, s->group_floats = per;
}

/* W^T packed as the B operand when the output's static shape has at most
 * CONV_SMALL_OUT positions (2-D, group 1, float32 constant W with at least
 * CONV_SMALL_M output channels). True when made. */
static bool conv_prepare_small(ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  const OnyxValueInfo* yv = cpu_host->node_output(node, 0);
  if (!wt || !yv || s->w.group != 1 || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 ||
      cpu_host->tensor_rank(wt) != 4 || cpu_host->value_rank(yv) != 4)
    return false;
  const int64_t* yd = cpu_host->value_dims(yv);
  const int64_t* d = cpu_host->tensor_dims(wt);
  /* one output position: the GEMM's one-column path (W x X) instead */
  if (yd[2] <= 0 || yd[3] <= 0 || yd[2] * yd[3] > CONV_SMALL_OUT || yd[2] * yd[3] == 1 ||
      d[0] < CONV_SMALL_M)
    return false;
  const size_t m = (size_t)d[0], kdim = cpu_dims_product(d, 1, 4);
  if (kdim == 0) return false;
  float* p = cpu_gemm_alloc_packed(cpu_gemm_packed_b_floats(kdim, m));
  if (!p) return false;
  /* op(B) = W^T (kdim x m): W is stored m x kdim, i.e. transposed. */
  cpu_gemm_pack_b(NULL, p, cpu_host->tensor_data(wt), kdim, 1, kdim, m);
  s->packed_wt = p, s->packed_wt_m = m, s->packed_wt_k = kdim;
  return true;
}

/* Where both could run, Winograd takes n images of oh x ow outputs only
 * with at least this many 4x4 tiles: below, its transformed weights (4x or
 * 16/9 the size of W) are streamed from memory for too few tiles, and the
 * direct path wins or ties (ResNet-18's 256-channel 14x14 layers in the
 * model at 1 thread: F(4x4) 1.32-1.55 ms, F(2x2) 1.17, direct 1.19; its
 * 512-channel 7x7 ones: F(2x2) 2.3 ms, direct 1.34). */
#define CONV_WINOGRAD_OVER_DIRECT_TILES 32

static bool conv_winograd_over_direct(size_t n, size_t oh, size_t ow) {
  return n * ((oh + 3) / 4) * ((ow + 3) / 4) >= CONV_WINOGRAD_OVER_DIRECT_TILES;
}

/* Output extent of a 3x3 unit-stride window over `in` along spatial dim i
 * (0 or 1), or 0 when unknown. */
static size_t conv_static_out(const WindowAttrs* w, int64_t in, size_t i) {
  if (in < 0) return 0;
  if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) return (size_t)in;
  int64_t padded = in;
  if (w->auto_pad != PAD_VALID && w->n_pads == 4 &&
      !cpu_add3_i64(in, w->pads[i], w->pads[i + 2], &padded))
    return 0; /* the run reports the overflow */
  return padded >= 3 ? (size_t)(padded - 2) : 0;
}

/* Transforms a constant float32 W (m, c, 3, 3) for the Winograd path when
 * the conv qualifies (cpu_winograd.h), unless X's static shape already
 * shows too few tiles for it to pay. */
static bool conv_prepare_winograd(ConvState* s, const OnyxNode* node, bool direct) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  if (!cpu_winograd_enabled() || !wt || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 ||
      cpu_host->tensor_rank(wt) != 4)
    return false;
  const WindowAttrs* w = &s->w;
  const int64_t* d = cpu_host->tensor_dims(wt);
  if ((w->n_strides && w->n_strides != 2) || (w->n_dilations && w->n_dilations != 2) ||
      (w->n_kernel && (w->n_kernel != 2 || w->kernel[0] != d[2] || w->kernel[1] != d[3])))
    return false;
  if (!cpu_winograd_applies((size_t)d[0], (size_t)d[1], (size_t)d[2], (size_t)d[3],
                            w->n_strides ? (size_t)w->strides[0] : 1,
                            w->n_strides ? (size_t)w->strides[1] : 1,
                            w->n_dilations ? (size_t)w->dilations[0] : 1,
                            w->n_dilations ? (size_t)w->dilations[1] : 1, (size_t)w->group))
    return false;
  /* X's static shape, when known, picks the output tile (4x4, or 2x2 for
   * small images) or shows too few tiles for the path to pay. */
  size_t tile = 4, batch = 0, oh = 0, ow = 0;
  const OnyxValueInfo* xv = cpu_host->node_input(node, 0);
  if (xv && cpu_host->value_rank(xv) == 4) {
    const int64_t* xd = cpu_host->value_dims(xv);
    oh = conv_static_out(w, xd[2], 0), ow = conv_static_out(w, xd[3], 1);
    batch = xd[0] > 0 ? (size_t)xd[0] : 0;
    if (oh && ow && !(tile = cpu_winograd_pick_tile(batch ? batch : 1, oh, ow))) return false;
    if (oh && ow && direct && !conv_winograd_over_direct(batch ? batch : 1, oh, ow)) return false;
  }
  s->wino = cpu_winograd_create(cpu_host->tensor_data(wt), (size_t)d[0], (size_t)d[1], tile);
  /* With X's shape static, every run takes the Winograd path: no im2col
   * copy of W is needed (a run that did not fit would pack W per call). */
  return s->wino && batch && oh && ow && cpu_winograd_pays(s->wino, batch, oh, ow);
}

/* Whether the direct path (cpu_conv_direct.h) takes this conv: a machine
 * with the AVX-512 kernel, a constant float32 W (m, c, kh, kw) with a window
 * larger than 1x1 (pointwise convs are plain GEMMs, faster there), group 1.
 * With the AVX2 kernel, strided windows only: on the AVX2 machine measured
 * (Zen 3) the unit-stride layers ran faster through Winograd and the
 * small-output GEMM, the strided ones lost a third of their time to im2col. */
static bool conv_direct_applies(const ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  const int kernel = cpu_conv_direct_kernel();
  if (!wt || s->w.group != 1 || kernel == CPU_CONV_DIRECT_NONE ||
      cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(wt) != 4)
    return false;
  if (kernel == CPU_CONV_DIRECT_AVX2) {
    bool strided = false;
    for (size_t i = 0; i < s->w.n_strides; i++)
      strided |= s->w.strides[i] > 1;
    if (!strided) return false;
  }
  const int64_t* d = cpu_host->tensor_dims(wt);
  return d[2] * d[3] > 1 && d[0] > 0 && d[1] > 0;
}

static bool conv_prepare_direct(ConvState* s, const OnyxNode* node) {
  const OnyxTensor* wt = cpu_host->value_constant(cpu_host->node_input(node, 1));
  const int64_t* d = cpu_host->tensor_dims(wt);
  s->direct = cpu_conv_direct_create(cpu_host->tensor_data(wt), (size_t)d[0], (size_t)d[1],
                                     (size_t)d[2], (size_t)d[3]);
  return s->direct != NULL;
}

/* FusedConv's `activation` (absent on a plain Conv). */
OnyxStatus* cpu_read_activation(const OnyxNode* node, CpuActivation* out) {
  size_t len = 0;
  const char* a = cpu_host->node_attr_string(node, "activation", &len);
  *out = (CpuActivation){CPU_ACT_NONE, 0.0f, 0.0f, 0.0f};
  if (!a || len == 0) return NULL;
  if (len == 4 && memcmp(a, "Relu", 4) == 0) {
    out->act = CPU_ACT_RELU;
  } else if (len == 9 && memcmp(a, "LeakyRelu", 9) == 0) {
    out->act = CPU_ACT_LEAKY_RELU;
    out->alpha = cpu_host->node_attr_float(node, "alpha", 0.01f);
  } else if (len == 4 && memcmp(a, "Clip", 4) == 0) {
    out->act = CPU_ACT_CLIP;
    out->min = cpu_host->node_attr_float(node, "clip_min", -INFINITY);
    out->max = cpu_host->node_attr_float(node, "clip_max", INFINITY);
  } else if (len == 11 && memcmp(a, "HardSigmoid", 11) == 0) {
    out->act = CPU_ACT_HARD_SIGMOID;
    out->alpha = cpu_host->node_attr_float(node, "alpha", 0.2f);
    out->min = cpu_host->node_attr_float(node, "beta", 0.5f); /* beta rides in min */
  } else if (len == 9 && memcmp(a, "HardSwish", 9) == 0) {
    out->act = CPU_ACT_HARD_SWISH;
  } else if (len == 7 && memcmp(a, "Sigmoid", 7) == 0) {
    out->act = CPU_ACT_SIGMOID;
  } else if (len == 4 && memcmp(a, "Silu", 4) == 0) {
    out->act = CPU_ACT_SILU;
  } else if (len == 4 && memcmp(a, "Tanh", 4) == 0) {
    out->act = CPU_ACT_TANH;
  } else {
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "activation '%.*s' not supported (Relu, LeakyRelu, Clip, HardSigmoid, "
                     "HardSwish, Sigmoid, Silu or Tanh)",
                     (int)len, a);
  }
  return NULL;
}

static OnyxStatus* conv_read_activation(ConvState* s, const OnyxNode* node) {
  CpuActivation a;
  OnyxStatus* st = cpu_read_activation(node, &a);
  s->act = a.act, s->act_alpha = a.alpha, s->act_min = a.min, s->act_max = a.max;
  return st;
}

OnyxStatus* cpu_conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  ConvState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = cpu_window_attrs_read(node, &s->w);
  if (!st) st = conv_read_activation(s, node);
  if (st) {
    free(s);
    return st;
  }
  /* One path per conv, and only its weights packed, where X's static shape
   * shows which: Winograd where enough 4x4 tiles fill its GEMMs (or, where
   * the direct path is missing, any tiles at all); the direct path for
   * other windows larger than 1x1 on AVX-512 machines; the transposed GEMM
   * for small outputs; im2col + GEMM. Without a static shape, Winograd's
   * and the direct path's weights are both made and each run picks. */
  const bool direct = conv_direct_applies(s, node);
  if (!conv_prepare_winograd(s, node, direct) && !(direct && conv_prepare_direct(s, node)) &&
      !conv_prepare_small(s, node))
    conv_pack_weights(s, node);
  *state = s;
  return NULL;
}

/* Shapes of one Conv call: X (n, c, ...), W (m, c / group, kernel...). */
typedef struct ConvShape {
  size_t n, c, m, cg, mg;
  Geometry g;
  int64_t out[MAX_RANK];
  size_t out_rank;
} ConvShape;

static OnyxStatus* conv_shape(const WindowAttrs* w, const OnyxTensor* x, const OnyxTensor* wt,
                              const OnyxTensor* b, ConvShape* cs) {
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t* dw = cpu_host->tensor_dims(wt);
  if (r < 3 || cpu_host->tensor_rank(wt) != r)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "X (rank %zu) and W (rank %zu) must have the same rank >= 3", r,
                     cpu_host->tensor_rank(wt));
  cs->n = (size_t)dx[0], cs->c = (size_t)dx[1], cs->m = (size_t)dw[0], cs->cg = (size_t)dw[1];
  const size_t group = (size_t)w->group;
  if (cs->c != cs->cg * group || cs->m % group != 0)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "group %zu does not fit: X has %zu channels, W is %zu x %zu (needs X "
                     "channels = W.shape[1] * group and W.shape[0] divisible by group)",
                     group, cs->c, cs->m, cs->cg);
  cs->mg = cs->m / group;
  if (w->n_kernel && (w->n_kernel != r - 2 || memcmp(w->kernel, dw + 2, w->n_kernel * 8) != 0)) {
    char ks[128], ws[128];
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape %s does not match W's spatial dims %s",
                     format_dims(ks, sizeof ks, w->kernel, w->n_kernel),
                     format_dims(ws, sizeof ws, dw + 2, r - 2));
  }
  if (b && (cpu_host->tensor_rank(b) != 1 || (size_t)cpu_host->tensor_dims(b)[0] != cs->m))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "B must be 1-D of size M = %zu", cs->m);
  OnyxStatus* st = cpu_geometry_init(w, r - 2, dx + 2, dw + 2, &cs->g);
  if (st) return st;
  cs->out[0] = (int64_t)cs->n, cs->out[1] = (int64_t)cs->m;
  memcpy(cs->out + 2, cs->g.out, (r - 2) * sizeof(int64_t));
  cs->out_rank = r;
  return NULL;
}

/* A 1x1 window with unit strides and no padding reads X as it is. */
static int conv_is_pointwise(const Geometry* g) {
  for (size_t i = 0; i < g->rank; i++)
    if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] || g->pe[i]) return 0;
  return 1;
}

/* Y rows of one image start as the bias (then GEMM adds with beta = 1). */
static void conv_fill_bias(void* y, const void* bias, OnyxElemType t, size_t m, size_t os) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < os; j++)
      if (t == ONYX_ELEM_FLOAT32)
        ((float*)y)[i * os + j] = ((const float*)bias)[i];
      else
        ((double*)y)[i * os + j] = ((const double*)bias)[i];
}

/* im2col straight into the GEMM's packed-B layout, for 2-D convolutions,
 * one L1-sized slice at a time while the GEMM runs (so the im2col matrix is
 * never stored whole): rows [k0, k1) of panel p, i.e. of output positions
 * [p * nr, p * nr + nr) (zero past the last position). Row r is input
 * channel r / k_size at kernel offset r % k_size; the positions of a panel
 * fall into runs that share an output row, each read from one input row. */
#define NR_MAX_PANEL 64 /* widest packed-B panel a micro-kernel uses */

typedef struct PackCol {
  const Geometry* g;
  const float* x; /* one group's channels of one image */
  size_t nr;
  int avx512; /* the AVX-512 GEMM kernel (NR 32) runs: copy runs with masks */
  int avx2;   /* the AVX2 one runs */
} PackCol;

#if CPU_NN_X86
/* d[t] = src[t * sw] for t in [lo, hi), 0 for the rest of [0, run), run <=
 * 32: masked loads (no access, hence no fault, on masked-off lanes) or
 * masked gathers for strides above 1. */
__attribute__((target("avx512f"))) static void
copy_run_avx512(float* d, const float* src, int64_t lo, int64_t hi, int64_t run, int64_t sw) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t h = 0; h < run; h += 16) {
    const int64_t a = lo - h, b = hi - h, e = run - h;
    const uint32_t below_b = b <= 0 ? 0 : b >= 16 ? 0xFFFFu : (1u << b) - 1;
    const uint32_t below_a = a <= 0 ? 0 : a >= 16 ? 0xFFFFu : (1u << a) - 1;
    const __mmask16 valid = (__mmask16)(below_b & ~below_a);
    const __mmask16 store = (__mmask16)(e >= 16 ? 0xFFFFu : (1u << e) - 1);
    __m512 v;
    if (sw == 1) {
      v = _mm512_maskz_loadu_ps(valid, src + h);
    } else if (sw == 2) {
      /* the 32 floats from src + 2h hold the 16 wanted ones at even lanes */
      const int64_t bb = b > 16 ? 16 : b;
      const int64_t s0 = 2 * (a > 0 ? a : 0), s1 = bb <= 0 ? 0 : 2 * bb - 1;
      const uint64_t span =
          s1 <= s0 ? 0 : (s1 - s0 >= 64 ? ~0ull : ((1ull << (s1 - s0)) - 1)) << s0;
      const __m512 lo16 = _mm512_maskz_loadu_ps((__mmask16)(span & 0xFFFF), src + 2 * h);
      const __m512 hi16 = _mm512_maskz_loadu_ps((__mmask16)(span >> 16), src + 2 * h + 16);
      const __m512i even =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      v = _mm512_maskz_permutex2var_ps(valid, lo16, even, hi16);
    } else {
      const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sw));
      v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, idx, src + h * sw, 4);
    }
    _mm512_mask_storeu_ps(d + h, store, v);
  }
}

/* The same with AVX2, 8 floats at a time: masked loads (no access on
 * masked-off lanes), stride 2 as the even lanes of two masked loads, other
 * strides by a masked gather; full stores except at the run's end (AVX2's
 * masked store is slow on AMD cores). */
__attribute__((target("avx2,fma,avx"))) static void
copy_run_avx2(float* d, const float* src, int64_t lo, int64_t hi, int64_t run, int64_t sw) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t h = 0; h < run; h += 8) {
    const int64_t a = lo - h < 0 ? 0 : lo - h, b = hi - h > 8 ? 8 : hi - h;
    /* lanes [a, b) are read */
    const __m256i valid = _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)a - 1)),
                                           _mm256_cmpgt_epi32(_mm256_set1_epi32((int)b), lane));
    __m256 v;
    if (b <= a) {
      v = _mm256_setzero_ps();
    } else if (sw == 1) {
      v = _mm256_maskload_ps(src + h, valid);
    } else if (sw == 2) {
      /* floats [2a, 2b - 1) from src + 2h: lanes of the two loads */
      const __m256i s0 = _mm256_set1_epi32((int)(2 * a) - 1),
                    s1 = _mm256_set1_epi32((int)(2 * b - 1));
      const __m256i hi_lane = _mm256_add_epi32(lane, _mm256_set1_epi32(8));
      const __m256i m0 =
          _mm256_and_si256(_mm256_cmpgt_epi32(lane, s0), _mm256_cmpgt_epi32(s1, lane));
      const __m256i m1 =
          _mm256_and_si256(_mm256_cmpgt_epi32(hi_lane, s0), _mm256_cmpgt_epi32(s1, hi_lane));
      const __m256 e =
          _mm256_shuffle_ps(_mm256_maskload_ps(src + 2 * h, m0),
                            _mm256_maskload_ps(src + 2 * h + 8, m1), _MM_SHUFFLE(2, 0, 2, 0));
      v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    } else {
      const __m256i idx = _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)sw));
      v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src + h * sw, idx,
                                   _mm256_castsi256_ps(valid), 4);
    }
    cpu_store_first_avx2(d + h, v, run - h);
  }
}

/* im2col_body's rows for one full interior run of 16 positions: `rows`
 * rows from (c, kh, kw) on, each 16 floats at stride sw from input row
 * ih0 + kh * dh, column iw0 + kw * dw, or zeros above and below the image.
 * Stride 2 takes the even lanes of 31 floats (the last 8 through a mask,
 * so nothing past the window is read). */
__attribute__((target("avx2,fma,avx"))) static void
im2col_rows16_avx2(const float* x, float* dst, size_t rows, int64_t c, int64_t kh, int64_t kw,
                   int64_t ih_n, int64_t iw_n, int64_t kh_n, int64_t kw_n, int64_t dh, int64_t dw,
                   int64_t sw, int64_t ih0, int64_t iw0) {
  const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
  for (size_t r = 0; r < rows; r++, dst += 16) {
    const int64_t ih = ih0 + kh * dh;
    if (ih < 0 || ih >= ih_n) {
      _mm256_storeu_ps(dst, _mm256_setzero_ps());
      _mm256_storeu_ps(dst + 8, _mm256_setzero_ps());
    } else {
      const float* src = x + (c * ih_n + ih) * iw_n + iw0 + kw * dw;
      if (sw == 1) {
        _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
        _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
      } else {
        const __m256 e0 = _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8),
                                            _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 e1 =
            _mm256_shuffle_ps(_mm256_loadu_ps(src + 16), _mm256_maskload_ps(src + 24, seven),
                              _MM_SHUFFLE(2, 0, 2, 0));
        _mm256_storeu_ps(dst, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e0),
                                                                     _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(dst + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e1),
                                                                         _MM_SHUFFLE(3, 1, 2, 0))));
      }
    }
    if (++kw == kw_n) {
      kw = 0;
      if (++kh == kh_n) kh = 0, c++;
    }
  }
}
#endif

static inline __attribute__((always_inline)) void
im2col_body(const PackCol* j, float* dst, size_t p, size_t k0, size_t k1, const int vec) {
  const Geometry* g = j->g;
  const size_t nr = j->nr, ow_n = (size_t)g->out[1], os = g->out_size;
  const int64_t ih_n = g->in[0], iw_n = g->in[1], kh_n = g->k[0], kw_n = g->k[1];
  const int64_t sh = g->s[0], sw = g->s[1], dh = g->d[0], dw = g->d[1];
  const size_t o0 = p * nr, cols = os - o0 < nr ? os - o0 : nr;
  /* The panel's runs, the same for every row: start column, length and the
   * window origin (kernel offset 0) in the input. */
  int64_t run_j[NR_MAX_PANEL + 1], run_len[NR_MAX_PANEL + 1], run_ih[NR_MAX_PANEL + 1],
      run_iw[NR_MAX_PANEL + 1];
  size_t runs = 0;
  for (size_t jj = 0, o = o0; jj < cols && runs <= NR_MAX_PANEL; runs++) {
    const size_t oh = o / ow_n, ow = o % ow_n;
    const size_t run = cols - jj < ow_n - ow ? cols - jj : ow_n - ow;
    run_j[runs] = (int64_t)jj, run_len[runs] = (int64_t)run;
    run_ih[runs] = (int64_t)oh * sh - g->pb[0];
    run_iw[runs] = (int64_t)ow * sw - g->pb[1];
    jj += run, o += run;
  }
  /* (c, kh, kw) of row k0, then stepped along. */
  int64_t c = (int64_t)(k0 / g->k_size), kk = (int64_t)(k0 % g->k_size);
  int64_t kh = kk / kw_n, kw = kk % kw_n;
#if CPU_NN_X86
  /* AVX2, one full run of 16 positions whose windows lie inside the input
   * rows for every kernel column (most panels of a wide image): each row
   * is 16 (strided) floats or zeros, without the per-run bounds. */
  if (vec == 2 && nr == 16 && runs == 1 && cols == nr && (sw == 1 || sw == 2) && run_iw[0] >= 0 &&
      run_iw[0] + 15 * sw + (kw_n - 1) * dw < iw_n) {
    im2col_rows16_avx2(j->x, dst, k1 - k0, c, kh, kw, ih_n, iw_n, kh_n, kw_n, dh, dw, sw, run_ih[0],
                       run_iw[0]);
    return;
  }
#endif
  for (size_t r = k0; r < k1; r++, dst += nr) {
    const float* xc = j->x + c * ih_n * iw_n;
    for (size_t q = 0; q < runs; q++) {
      const int64_t ih = run_ih[q] + kh * dh, run = run_len[q];
      float* d = dst + run_j[q];
      if (ih < 0 || ih >= ih_n) {
        for (int64_t t = 0; t < run; t++)
          d[t] = 0.0f;
        continue;
      }
      const float* row = xc + ih * iw_n;
      const int64_t iw = run_iw[q] + kw * dw;
      /* t in [lo, hi) reads inside the row */
      int64_t lo = 0, hi = run;
      if (sw == 1) {
        if (iw < 0) lo = -iw;
        if (iw + hi > iw_n) hi = iw_n - iw;
      } else {
        /* t reads inside the row while 0 <= iw + t * sw < iw_n: ceilings
         * taken as (a - 1) / sw + 1, which cannot overflow for any stride. */
        if (iw < 0) lo = (-iw - 1) / sw + 1;
        const int64_t inside = iw >= iw_n ? 0 : (iw_n - iw - 1) / sw + 1;
        if (hi > inside) hi = inside;
      }
      if (hi < 0) hi = 0;
      if (lo > hi) lo = hi;
#if CPU_NN_X86
      if (vec == 1) {
        copy_run_avx512(d, row + iw, lo, hi, run, sw);
        continue;
      }
      if (vec == 2) {
        copy_run_avx2(d, row + iw, lo, hi, run, sw);
        continue;
      }
#else
      (void)vec;
#endif
      for (int64_t t = 0; t < lo; t++)
        d[t] = 0.0f;
      if (sw == 1) {
        const float* src = row + iw;
        for (int64_t t = lo; t < hi; t++)
          d[t] = src[t];
      } else {
        for (int64_t t = lo; t < hi; t++)
          d[t] = row[iw + t * sw];
      }
      for (int64_t t = hi; t < run; t++)
        d[t] = 0.0f;
    }
    for (size_t t = cols; t < nr; t++)
      dst[t] = 0.0f;
    if (++kw == kw_n) {
      kw = 0;
      if (++kh == kh_n) kh = 0, c++;
    }
  }
}

#if CPU_NN_X86
__attribute__((target("avx512f"))) static void im2col_panel_avx512(const PackCol* j, float* dst,
                                                                   size_t p, size_t k0, size_t k1) {
  im2col_body(j, dst, p, k0, k1, 1);
}

/* vec: 1 the AVX-512 copies, 2 the AVX2 ones, 0 portable. */
__attribute__((target("avx2,fma,avx"))) static void
im2col_panel_avx2(const PackCol* j, float* dst, size_t p, size_t k0, size_t k1) {
  im2col_body(j, dst, p, k0, k1, 2);
}
#endif

static void im2col_panel(void* user, float* dst, size_t p, size_t k0, size_t k1) {
  const PackCol* j = user;
#if CPU_NN_X86
  if (j->avx512) {
    im2col_panel_avx512(j, dst, p, k0, k1);
    return;
  }
  if (j->avx2) {
    im2col_panel_avx2(j, dst, p, k0, k1);
    return;
  }
#endif
  im2col_body(j, dst, p, k0, k1, 0);
}

/* FusedConv's activation on one value (NaN kept, as the GEMM epilogue). */
static float conv_act(float v, const ConvState* s) {
  return cpu_act_apply(v, s->act, s->act_alpha, s->act_min, s->act_max);
}

/* Y^T (os x m) = im2col(X)^T (os x kdim) x W^T (packed B), per image, then
 * transposed into Y; the bias (per column of Y^T) and the activation ride in
 * the GEMM's epilogue. */
static OnyxStatus* conv_small_f32(const ConvState* cst, OnyxKernelContext* ctx, const ConvShape* cs,
                                  const OnyxTensor* x, const OnyxTensor* b, const float* z,
                                  OnyxTensor* y) {
  const size_t os = cs->g.out_size, kdim = cs->cg * cs->g.k_size, m = cs->mg;
  /* a pointwise conv's im2col matrix is the image itself */
  const int pointwise = conv_is_pointwise(&cs->g);
  float *col = NULL, *yt = NULL;
  OnyxStatus* st = pointwise ? NULL : nn_scratch(ctx, kdim * os * sizeof(float), (void**)&col);
  if (!st) st = nn_scratch(ctx, os * m * sizeof(float), (void**)&yt);
  if (st) return st;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const float* xd = cpu_host->tensor_data(x);
  float* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs->n; n++) {
    if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
    const float* xn = xd + n * cs->c * cs->g.in_size;
    if (!pointwise) {
      Im2Col ij = {&cs->g, xn, col};
      cpu_host->parallel_for(pool, kdim, im2col_rows_float, &ij);
    }
    const CpuGemm g = {.m = os,
                       .n = m,
                       .k = kdim,
                       .a = pointwise ? xn : col, /* stored kdim x os: op(A) = col^T */
                       .lda = os,
                       .trans_a = 1,
                       .packed_b = cst->packed_wt,
                       .c = yt,
                       .ldc = m,
                       .alpha = 1.0,
                       .bias_col = b ? cpu_host->tensor_data(b) : NULL,
                       /* with Z the activation follows its sum, below */
                       .act = z ? CPU_ACT_NONE : cst->act,
                       .act_alpha = cst->act_alpha,
                       .act_min = cst->act_min,
                       .act_max = cst->act_max,
                       .stop = &stop};
    cpu_gemm_f32(pool, &g);
    if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    float* yn = yd + n * m * os;
    const float* zn = z ? z + n * m * os : NULL;
    if (!zn) { /* blocked: a column of Y^T at a time read m floats apart */
      cpu_nn_transpose(yn, yt, os, m, sizeof(float));
      continue;
    }
    for (size_t c = 0; c < m; c++)
      for (size_t p = 0; p < os; p++)
        yn[c * os + p] = conv_act(yt[p * m + c] + zn[c * os + p], cst);
  }
  return NULL;
}

/* A 2-D conv's run for the paths with their own kernels (Winograd, direct). */
static CpuConvRun conv_run(const ConvState* cst, const ConvShape* cs, const OnyxTensor* x,
                           const OnyxTensor* b, const float* z, OnyxTensor* y) {
  const Geometry* g = &cs->g;
  return (CpuConvRun){.x = cpu_host->tensor_data(x),
                      .y = cpu_host->tensor_mutable_data(y),
                      .bias = b ? cpu_host->tensor_data(b) : NULL,
                      .z = z,
                      .n = cs->n,
                      .h = (size_t)g->in[0],
                      .w = (size_t)g->in[1],
                      .oh = (size_t)g->out[0],
                      .ow = (size_t)g->out[1],
                      .sh = (size_t)g->s[0],
                      .sw = (size_t)g->s[1],
                      .dh = (size_t)g->d[0],
                      .dw = (size_t)g->d[1],
                      .pad_top = (size_t)g->pb[0],
                      .pad_left = (size_t)g->pb[1],
                      .act = cst->act,
                      .act_alpha = cst->act_alpha,
                      .act_min = cst->act_min,
                      .act_max = cst->act_max};
}

typedef struct ConvRowAct {
  const ConvState* s;
  float* y;
  size_t plane;
} ConvRowAct;

static void conv_row_act_planes(void* user, size_t begin, size_t end) {
  const ConvRowAct* j = user;
  for (size_t i = begin; i < end; i++)
    cpu_act_row(j->y + i * j->plane, j->y + i * j->plane, j->plane, j->s->act, j->s->act_alpha,
                j->s->act_min, j->s->act_max);
}

/* A row activation (cpu_act_is_row) over all of Y, plane by plane, for the
 * Winograd and direct paths, whose vector epilogues have only the
 * piecewise-linear ones: they store Y (with Z added) without it. */
static OnyxStatus* conv_row_act(const ConvState* cst, OnyxKernelContext* ctx, const ConvShape* cs,
                                OnyxTensor* y) {
  if (!cpu_act_is_row(cst->act)) return NULL;
  ConvRowAct j = {cst, cpu_host->tensor_mutable_data(y), cs->g.out_size};
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), cs->n * cs->m, conv_row_act_planes, &j);
  return NULL;
}

/* The direct path copies each image zero-padded to the extent its windows
 * cover; with pads or dilations far beyond the input that copy would dwarf
 * it, and the im2col path, whose memory follows the output, runs instead. */
static bool conv_direct_padding_fits(const Geometry* g) {
  size_t plane = 1;
  for (size_t i = 0; i < g->rank; i++) {
    int64_t ext;
    if (!cpu_mul_i64(g->out[i] - 1, g->s[i], &ext) ||
        !cpu_add_i64(ext, (g->k[i] - 1) * g->d[i] + 1, &ext) ||
        !cpu_mul_size(plane, (size_t)ext, &plane))
      return false;
  }
  return plane <= 4 * g->in_size + 65536;
}

/* Groups of at most this many input channels run on the direct depthwise
 * kernel (cpu_conv_depthwise.c, which sums a group's cg channels per output
 * plane) where its path is AVX2, instead of one im2col GEMM of mg rows per
 * group, whose im2col costs about as much as its few rows of FMAs. On
 * regnet_y_400mf's 3x3 convs in groups of 8 (1 thread, sum of per-node
 * minima) the depthwise kernel takes 6.1 ms on the AVX2 path against the
 * GEMM's 7.9; on the AVX-512 path the GEMM is the faster (5.1 against 5.4
 * ms), so it keeps those convs. */
#define CONV_GROUPED_DW_MAX_CG 8

static bool conv_grouped_direct(size_t cg) {
  return cg == 1 || (cg <= CONV_GROUPED_DW_MAX_CG && cpu_conv_depthwise_path() == CPU_DW_AVX2);
}

/* float32 Conv: one GEMM per (image, group) with W as the packed A operand
 * (packed at creation when constant), the im2col matrix as B (packed slice
 * by slice from X for 2-D windows; X itself for pointwise ones; stored
 * whole only for other ranks) and the bias and activation applied by the
 * GEMM's epilogue. */
/* A 2-D convolution whose weights were not packed at creation (they are a
 * run-time input: a training model's forward convs read the weights the
 * optimizer updates) with few channels, unit strides and dilations, no
 * bias, residual or activation: ConvGrad's direct kernel
 * (cpu_grad_conv_direct.h) computes it without im2col, which at 16
 * channels and 16 x 16 images moves as much data as the GEMM does work.
 * Returns false when it does not apply; else true, with the run's status in
 * *st. */
static bool conv_unpacked_small_f32(const ConvState* cst, OnyxKernelContext* ctx,
                                    const ConvShape* cs, const OnyxTensor* x, const OnyxTensor* wt,
                                    const OnyxTensor* b, const float* z, OnyxTensor* y,
                                    OnyxStatus** st) {
  const Geometry* ge = &cs->g;
  if (cst->packed_w || cst->packed_wt || cst->direct || cst->wino || b || z ||
      cst->act != CPU_ACT_NONE || ge->rank != 2 || cst->w.group != 1 ||
      cs->c > CPU_GRAD_CONV_DIRECT_MAX_CH || cs->m > CPU_GRAD_CONV_DIRECT_MAX_CH || ge->s[0] != 1 ||
      ge->s[1] != 1 || ge->d[0] != 1 || ge->d[1] != 1 || !cs->n || !cs->c || !cs->m ||
      !ge->in_size || !ge->out_size || !cpu_grad_conv_direct_available())
    return false; /* empty convolutions too: the general path handles them */
  const CpuGradConv2d g = {.n = cs->n,
                           .c = cs->c,
                           .m = cs->m,
                           .xc = cs->c,
                           .yc = cs->m,
                           .ih = (size_t)ge->in[0],
                           .iw = (size_t)ge->in[1],
                           .oh = (size_t)ge->out[0],
                           .ow = (size_t)ge->out[1],
                           .kh = (size_t)ge->k[0],
                           .kw = (size_t)ge->k[1],
                           .pt = (size_t)ge->pb[0],
                           .pl = (size_t)ge->pb[1]};
  size_t floats, bytes;
  if (!cpu_grad_conv_fwd_scratch(&g, &floats) || !cpu_mul_size(floats, sizeof(float), &bytes) ||
      !bytes)
    return false;
  float* scratch = NULL;
  *st = nn_scratch(ctx, bytes, (void**)&scratch);
  if (*st) return true;
  CpuStop stop = {.ctx = ctx};
  cpu_grad_conv_fwd(cpu_host->ctx_thread_pool(ctx), &g, cpu_host->tensor_data(x),
                    cpu_host->tensor_data(wt), cpu_host->tensor_mutable_data(y), scratch, &stop);
  if (cpu_stop_seen(&stop)) *st = cpu_cancelled(ctx, NULL);
  return true;
}

static OnyxStatus* conv_compute_f32(const ConvState* cst, OnyxKernelContext* ctx,
                                    const ConvShape* cs, const OnyxTensor* x, const OnyxTensor* wt,
                                    const OnyxTensor* b, const float* z, OnyxTensor* y) {
  const WindowAttrs* w = &cst->w;
  /* one input channel per group: the direct depthwise kernel; also small
   * groups (RegNet's 8 channels) on AVX2 machines */
  if (cs->g.rank == 2 && w->group > 1 && conv_grouped_direct(cs->cg) &&
      cpu_conv_depthwise_enabled()) {
    const CpuDepthwiseRun dw = {conv_run(cst, cs, x, b, z, y),
                                cpu_host->tensor_data(wt),
                                cs->c,
                                cs->m,
                                cs->cg,
                                (size_t)cs->g.k[0],
                                (size_t)cs->g.k[1]};
    return cpu_conv_depthwise_run(ctx, &dw);
  }
  OnyxStatus* tst = NULL;
  if (conv_unpacked_small_f32(cst, ctx, cs, x, wt, b, z, y, &tst)) return tst;
  const size_t os = cs->g.out_size, kdim = cs->cg * cs->g.k_size;
  const int pointwise = conv_is_pointwise(&cs->g), direct = !pointwise && cs->g.rank == 2;
  OnyxStatus* st;
  float* col = NULL;
  size_t col_bytes;
  if (!cpu_mul_size(kdim, os, &col_bytes) || !cpu_mul_size(col_bytes, sizeof(float), &col_bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: the im2col matrix (%zu x %zu) does not fit in memory",
                         kdim, os);
  if (!pointwise && !direct && (st = nn_scratch(ctx, col_bytes, (void**)&col))) return st;
  const Geometry* ge = &cs->g;
  const size_t oh = (size_t)ge->out[0], ow = ge->rank > 1 ? (size_t)ge->out[1] : 1;
  const int wino = cst->wino && ge->rank == 2 && w->group == 1 && cs->mg == cst->wino->oc &&
                   cs->cg == cst->wino->ic && ge->k[0] == 3 && ge->k[1] == 3 && ge->s[0] == 1 &&
                   ge->s[1] == 1 && ge->d[0] == 1 && ge->d[1] == 1 &&
                   cpu_winograd_pays(cst->wino, cs->n, oh, ow);
  /* the direct path exists only where it was available at creation */
  const CpuConvDirect* dc = cst->direct;
  if (dc && ge->rank == 2 && w->group == 1 && cs->m == dc->oc && cs->cg == dc->ic &&
      conv_direct_padding_fits(ge) && (size_t)ge->k[0] == dc->kh && (size_t)ge->k[1] == dc->kw &&
      !(wino && conv_winograd_over_direct(cs->n, oh, ow))) {
    CpuConvRun run = conv_run(cst, cs, x, b, z, y);
    if (cpu_act_is_row(run.act)) run.act = CPU_ACT_NONE; /* conv_row_act below */
    OnyxStatus* dst = cpu_conv_direct_run(dc, ctx, &run);
    return dst ? dst : conv_row_act(cst, ctx, cs, y);
  }
  if (cst->packed_wt && ge->rank == 2 && w->group == 1 && cs->mg == cst->packed_wt_m &&
      kdim == cst->packed_wt_k && os <= CONV_SMALL_OUT && os > 1)
    return conv_small_f32(cst, ctx, cs, x, b, z, y);
  if (wino) {
    CpuConvRun run = conv_run(cst, cs, x, b, z, y);
    if (cpu_act_is_row(run.act)) run.act = CPU_ACT_NONE; /* conv_row_act below */
    OnyxStatus* wst = cpu_winograd_conv(cst->wino, ctx, &run);
    return wst ? wst : conv_row_act(cst, ctx, cs, y);
  }
  const int packed = cst->packed_w && cst->packed_m == cs->mg && cst->packed_k == kdim;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const float* xd = cpu_host->tensor_data(x);
  const float* wd = cpu_host->tensor_data(wt);
  const float* bias = b ? cpu_host->tensor_data(b) : NULL;
  float* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs->n; n++)
    for (size_t grp = 0; grp < (size_t)w->group; grp++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const float* xg = xd + (n * cs->c + grp * cs->cg) * cs->g.in_size;
      PackCol job = {&cs->g, xg, cpu_gemm_nr(), cpu_gemm_isa_level() == CPU_ISA_AVX512,
                     cpu_gemm_isa_level() == CPU_ISA_AVX2};
      CpuGemm g = {.m = cs->mg,
                   .n = os,
                   .k = kdim,
                   .a = wd + grp * cs->mg * kdim,
                   .lda = kdim,
                   .packed_a = packed ? cst->packed_w + grp * cst->group_floats : NULL,
                   .b = pointwise ? xg : col,
                   .ldb = os,
                   .c = yd + (n * cs->m + grp * cs->mg) * os,
                   .ldc = os,
                   .alpha = 1.0,
                   .beta = z ? 1.0 : 0.0, /* C starts as Z */
                   .bias_row = bias ? bias + grp * cs->mg : NULL,
                   .act = cst->act,
                   .act_alpha = cst->act_alpha,
                   .act_min = cst->act_min,
                   .act_max = cst->act_max,
                   .stop = &stop};
      if (z) memcpy(g.c, z + (n * cs->m + grp * cs->mg) * os, cs->mg * os * sizeof(float));
      if (direct) {
        g.pack_b_fn = im2col_panel;
        g.pack_b_user = &job;
      } else if (!pointwise) {
        Im2Col ij = {&cs->g, xg, col};
        cpu_host->parallel_for(pool, kdim, im2col_rows_float, &ij);
      }
      cpu_gemm_f32(pool, &g);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
  return NULL;
}

OnyxStatus* cpu_conv_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = &((const ConvState*)state)->w;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* wt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* b = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  /* FusedConv's residual Z */
  const OnyxTensor* zt = cpu_host->ctx_input_count(ctx) > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  ConvShape cs;
  OnyxStatus* st = conv_shape(w, x, wt, b, &cs);
  if (st) return st;
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  if (zt && (t != ONYX_ELEM_FLOAT32 || cpu_host->tensor_elem_type(zt) != ONYX_ELEM_FLOAT32 ||
             cpu_host->tensor_rank(zt) != cs.out_rank ||
             memcmp(cpu_host->tensor_dims(zt), cs.out, cs.out_rank * sizeof(int64_t)) != 0)) {
    char zs[128], ys[128];
    return cpu_error(
        w->node, ONYX_INVALID_ARGUMENT,
        "Z must be a float32 tensor of Y's shape %s (no broadcasting), got %s",
        format_dims(ys, sizeof ys, cs.out, cs.out_rank),
        format_dims(zs, sizeof zs, cpu_host->tensor_dims(zt), cpu_host->tensor_rank(zt)));
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cs.out, cs.out_rank, &y))) return st;
  const size_t es = cpu_elem_size(t), os = cs.g.out_size;
  size_t kdim, col_bytes;
  if (!cpu_mul_size(cs.cg, cs.g.k_size, &kdim) || !cpu_mul_size(kdim, os, &col_bytes) ||
      !cpu_mul_size(col_bytes, es, &col_bytes))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "integer overflow: the im2col matrix (%zu channels x %zu taps x %zu "
                     "outputs) does not fit in memory",
                     cs.cg, cs.g.k_size, os);
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  if (t == ONYX_ELEM_FLOAT32)
    return conv_compute_f32(state, ctx, &cs, x, wt, b, zt ? cpu_host->tensor_data(zt) : NULL, y);
  if (((const ConvState*)state)->act != CPU_ACT_NONE)
    return cpu_error(w->node, ONYX_NOT_IMPLEMENTED, "a fused activation needs float32");
  const int pointwise = conv_is_pointwise(&cs.g);
  void* col = NULL;
  if (!pointwise && (st = nn_scratch(ctx, col_bytes, &col))) return st;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const char* xd = cpu_host->tensor_data(x);
  const char* wd = cpu_host->tensor_data(wt);
  char* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs.n; n++)
    for (size_t grp = 0; grp < (size_t)w->group; grp++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const char* xg = xd + (n * cs.c + grp * cs.cg) * cs.g.in_size * es;
      char* yg = yd + (n * cs.m + grp * cs.mg) * os * es;
      if (!pointwise) {
        Im2Col job = {&cs.g, xg, col};
        cpu_host->parallel_for(
            pool, kdim, t == ONYX_ELEM_FLOAT32 ? im2col_rows_float : im2col_rows_double, &job);
      }
      if (b)
        conv_fill_bias(yg, (const char*)cpu_host->tensor_data(b) + grp * cs.mg * es, t, cs.mg, os);
      const CpuGemm g = {.m = cs.mg,
                         .n = os,
                         .k = kdim,
                         .a = wd + grp * cs.mg * kdim * es,
                         .lda = kdim,
                         .b = pointwise ? xg : col,
                         .ldb = os,
                         .c = yg,
                         .ldc = os,
                         .alpha = 1.0,
                         .beta = b ? 1.0 : 0.0,
                         .stop = &stop};
      if (t == ONYX_ELEM_FLOAT32)
        cpu_gemm_f32(pool, &g);
      else
        cpu_gemm_f64(pool, &g);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const OnyxTypeConstraint T_FLOATS[] = {{"T", cpu_types_float, 2}};

#define KDEF(op, since, end, tc, cr, comp, rel, ud)                                                \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .create = cr, .compute = comp, .release = rel,     \
    .user_data = (void*)(ud)                                                                       \
  }

OnyxStatus* cpu_register_conv(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      KDEF("Conv", 1, latest, T_FLOATS, cpu_conv_create, cpu_conv_compute, cpu_conv_release, NULL),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxKernelDef* d = &defs[i];
    d->struct_size = sizeof *d;
    d->domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, d);
    if (st) return st;
  }
  /* the blocked-layout convs, pools and batch normalization the layout
   * pass rewrites Conv chains into */
  OnyxStatus* st = cpu_register_nchwc(r);
  return st ? st : cpu_register_nchwc_pool(r);
}
