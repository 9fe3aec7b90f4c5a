/* cpu_conv_transpose.c — ConvTranspose (1..22), Col2Im (18) and DeformConv
 * (19, 22).
 *
 * ConvTranspose is a GEMM per image and group (W^T x X gives, for every
 * input position, the contribution of each kernel tap to each output
 * channel) followed by col2im, which adds each column into the output at
 * position in * stride - pad + tap * dilation; Col2Im is that second half
 * alone. DeformConv gathers bilinear samples at the offset tap positions
 * (im2col, scaled by the mask) and multiplies by W. float32, float16 and
 * bfloat16 compute in float32 (cpu_gemm_f32), float64 in double. */
#include "cpu_nn.h"
#include "cpu_nnop_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SP 8

/* Geometry shared by the col2im scatter: `ns` spatial dims. */
typedef struct Col2ImGeo {
  size_t ns;
  int64_t out[MAX_SP], in[MAX_SP], k[MAX_SP], s[MAX_SP], d[MAX_SP], pb[MAX_SP];
  size_t out_sz, in_sz, k_sz;
} Col2ImGeo;

/* The three element counts; an error naming the node when one overflows. */
static OnyxStatus* geo_sizes(const OnyxNode* node, Col2ImGeo* g) {
  g->out_sz = g->in_sz = g->k_sz = 1;
  for (size_t i = 0; i < g->ns; i++)
    if (g->out[i] < 0 || g->in[i] < 0 || g->k[i] < 0 ||
        !cpu_mul_size(g->out_sz, (size_t)g->out[i], &g->out_sz) ||
        !cpu_mul_size(g->in_sz, (size_t)g->in[i], &g->in_sz) ||
        !cpu_mul_size(g->k_sz, (size_t)g->k[i], &g->k_sz))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "integer overflow: the spatial sizes (spatial dim %zu) do not fit in size_t",
                       i);
  return NULL;
}

/* cols: [channels * k_sz, in_sz]; adds into out: [channels, out_sz]. */
#define DEFINE_COL2IM(T)                                                                           \
  static void col2im_##T(const Col2ImGeo* g, size_t channels, const T* cols, T* out) {             \
    int64_t kc[MAX_SP], ic[MAX_SP];                                                                \
    for (size_t kk = 0; kk < g->k_sz; kk++) {                                                      \
      size_t rem = kk;                                                                             \
      for (size_t i = g->ns; i-- > 0;) {                                                           \
        kc[i] = (int64_t)(rem % (size_t)g->k[i]);                                                  \
        rem /= (size_t)g->k[i];                                                                    \
      }                                                                                            \
      for (size_t p = 0; p < g->in_sz; p++) {                                                      \
        rem = p;                                                                                   \
        for (size_t i = g->ns; i-- > 0;) {                                                         \
          ic[i] = (int64_t)(rem % (size_t)g->in[i]);                                               \
          rem /= (size_t)g->in[i];                                                                 \
        }                                                                                          \
        size_t off = 0;                                                                            \
        int inside = 1;                                                                            \
        for (size_t i = 0; i < g->ns && inside; i++) {                                             \
          const int64_t pos = ic[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];                        \
          if (pos < 0 || pos >= g->out[i]) inside = 0;                                             \
          off = off * (size_t)g->out[i] + (size_t)(inside ? pos : 0);                              \
        }                                                                                          \
        if (!inside) continue;                                                                     \
        for (size_t c = 0; c < channels; c++)                                                      \
          out[c * g->out_sz + off] += cols[(c * g->k_sz + kk) * g->in_sz + p];                     \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_COL2IM(float)
DEFINE_COL2IM(double)

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

/* ======================================================================== */
/* ConvTranspose                                                             */
/* ======================================================================== */

static OnyxStatus* convt_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* bias = nnop_has_input(ctx, 2) ? cpu_host->ctx_input(ctx, 2) : NULL;
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* wd = cpu_host->tensor_dims(w);
  if (r < 3 || r > MAX_SP + 2)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "input X has rank %zu; 3..%d supported", r,
                     MAX_SP + 2);
  const size_t ns = r - 2;
  const int64_t group = cpu_host->node_attr_int(node, "group", 1);
  if (cpu_host->tensor_rank(w) != r)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "weight W has rank %zu; X has rank %zu",
                     cpu_host->tensor_rank(w), r);
  if (group < 1 || xd[1] % group != 0 || wd[0] != xd[1])
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "X has %lld channels but W has %lld input channels (group %lld)",
                     (long long)xd[1], (long long)wd[0], (long long)group);
  const size_t n = (size_t)xd[0], cin = (size_t)xd[1], g = (size_t)group;
  const size_t cin_g = cin / g, cout_g = (size_t)wd[1], cout = cout_g * g;
  Col2ImGeo geo = {.ns = ns};
  int64_t opad[MAX_SP], pads[2 * MAX_SP];
  OnyxStatus* st;
  if ((st = attr_list(node, "strides", ns, 1, 1, geo.s)) ||
      (st = attr_list(node, "dilations", ns, 1, 1, geo.d)) ||
      (st = attr_list(node, "output_padding", ns, 0, 0, opad)) ||
      (st = attr_list(node, "pads", 2 * ns, 0, 0, pads)))
    return st;
  size_t nk = 0;
  const int64_t* ks = cpu_host->node_attr_ints(node, "kernel_shape", &nk);
  for (size_t i = 0; i < ns; i++) {
    geo.k[i] = ks && nk == ns ? ks[i] : wd[2 + i];
    if (geo.k[i] != wd[2 + i])
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "kernel_shape[%zu] = %lld disagrees with W's dim %lld", i,
                       (long long)geo.k[i], (long long)wd[2 + i]);
    geo.in[i] = xd[2 + i];
  }
  char ap[32];
  nnop_attr_str(node, "auto_pad", "NOTSET", ap, sizeof ap);
  const bool same_upper = !strcmp(ap, "SAME_UPPER"), same_lower = !strcmp(ap, "SAME_LOWER");
  if (!same_upper && !same_lower && strcmp(ap, "VALID") && strcmp(ap, "NOTSET") && ap[0])
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
  size_t nos = 0;
  const int64_t* os = cpu_host->node_attr_ints(node, "output_shape", &nos);
  if (os && nos != ns && nos != r)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "output_shape has %zu values; %zu spatial dims expected", nos, ns);
  for (size_t i = 0; i < ns; i++) {
    /* strides, dilations, pads are at most 2^31 (attr_list); the dims and
     * output_shape may be anything */
    int64_t eff, full, t;
    bool fits = cpu_dilated_extent(geo.k[i], geo.d[i], &eff) &&
                cpu_mul_i64(geo.s[i], xd[2 + i] - 1, &t) && cpu_add3_i64(t, opad[i], eff, &full);
    if (fits && (os || same_upper || same_lower)) {
      int64_t want = 0, total = 0;
      fits = (os ? (want = os[nos - ns + i], true) : cpu_mul_i64(xd[2 + i], geo.s[i], &want)) &&
             cpu_sub_i64(full, want, &total) && total > INT64_MIN + 1;
      geo.out[i] = want;
      /* Floor division: a negative total pads (extends) the end. */
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      geo.pb[i] = same_upper ? half : total - half;
    } else if (fits) {
      if (!strcmp(ap, "VALID")) pads[i] = pads[i + ns] = 0;
      geo.pb[i] = pads[i];
      fits = cpu_sub_i64(full, pads[i], &t) && cpu_sub_i64(t, pads[i + ns], &geo.out[i]);
    }
    if (!fits)
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: integer overflow computing the output size from X's dim "
                       "%lld, kernel %lld, strides, dilations, pads, output_padding and "
                       "output_shape",
                       i, (long long)xd[2 + i], (long long)geo.k[i]);
    if (geo.out[i] < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "output spatial dim %zu would be %lld", i,
                       (long long)geo.out[i]);
  }
  if ((st = geo_sizes(node, &geo))) return st;
  int64_t od[MAX_SP + 2] = {(int64_t)n, (int64_t)cout};
  for (size_t i = 0; i < ns; i++)
    od[2 + i] = geo.out[i];
  if (bias && cpu_host->tensor_elem_count(bias) != cout)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "bias B has %zu values; %zu output channels",
                     cpu_host->tensor_elem_count(bias), cout);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y))) return st;
  const size_t total = n * cout * geo.out_sz, m = cout_g * geo.k_sz;
  if (total == 0) return NULL;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const bool f64 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT64;
  const size_t es = f64 ? sizeof(double) : sizeof(float);
  void *xv, *wv, *bv = NULL, *yv, *cols;
  if (f64) {
    if ((st = nnop_load_d(ctx, x, (double**)&xv)) || (st = nnop_load_d(ctx, w, (double**)&wv)) ||
        (bias && (st = nnop_load_d(ctx, bias, (double**)&bv))))
      return st;
  } else {
    if ((st = nnop_load_f(ctx, x, (float**)&xv)) || (st = nnop_load_f(ctx, w, (float**)&wv)) ||
        (bias && (st = nnop_load_f(ctx, bias, (float**)&bv))))
      return st;
  }
  if ((st = nnop_scratch(ctx, total * es, &yv)) ||
      (st = nnop_scratch(ctx, m * geo.in_sz * es, &cols)))
    return st;
  memset(yv, 0, total * es);
  CpuStop stop = {.ctx = ctx};
  for (size_t b = 0; b < n; b++)
    for (size_t gi = 0; gi < g; gi++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      CpuGemm gm = {.m = m,
                    .n = geo.in_sz,
                    .k = cin_g,
                    .a = (const char*)wv + gi * cin_g * m * es,
                    .lda = m,
                    .trans_a = 1,
                    .b = (const char*)xv + (b * cin + gi * cin_g) * geo.in_sz * es,
                    .ldb = geo.in_sz,
                    .c = cols,
                    .ldc = geo.in_sz,
                    .alpha = 1,
                    .beta = 0,
                    .stop = &stop};
      char* dst = (char*)yv + (b * cout + gi * cout_g) * geo.out_sz * es;
      if (f64)
        cpu_gemm_f64(pool, &gm);
      else
        cpu_gemm_f32(pool, &gm);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
      if (f64)
        col2im_double(&geo, cout_g, cols, (double*)dst);
      else
        col2im_float(&geo, cout_g, cols, (float*)dst);
    }
  if (bv)
    for (size_t b = 0; b < n; b++)
      for (size_t c = 0; c < cout; c++)
        for (size_t i = 0; i < geo.out_sz; i++) {
          const size_t at = (b * cout + c) * geo.out_sz + i;
          if (f64)
            ((double*)yv)[at] += ((double*)bv)[c];
          else
            ((float*)yv)[at] += ((float*)bv)[c];
        }
  if (f64)
    nnop_store_d(y, yv, total);
  else
    nnop_store_f(y, yv, total);
  return NULL;
}

/* ======================================================================== */
/* Col2Im                                                                    */
/* ======================================================================== */

static OnyxStatus* col2im_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int64_t img[MAX_SP], blk[MAX_SP];
  size_t ni = 0, nb = 0;
  OnyxStatus* st;
  if ((st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "image_shape", img, MAX_SP, &ni)) ||
      (st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 2), "block_shape", blk, MAX_SP, &nb)))
    return st;
  if (ni != nb || ni == 0)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "image_shape (%zu values) and block_shape (%zu) must have the same length", ni,
                     nb);
  const size_t ns = ni;
  const int64_t* xd = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 3)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "input must be [N, C*prod(block), L], got rank %zu", cpu_host->tensor_rank(x));
  Col2ImGeo geo = {.ns = ns};
  int64_t pads[2 * MAX_SP];
  if ((st = attr_list(node, "strides", ns, 1, 1, geo.s)) ||
      (st = attr_list(node, "dilations", ns, 1, 1, geo.d)) ||
      (st = attr_list(node, "pads", 2 * ns, 0, 0, pads)))
    return st;
  for (size_t i = 0; i < ns; i++) {
    if (img[i] < 0 || blk[i] < 1)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "image_shape/block_shape dim %zu is invalid",
                       i);
    geo.out[i] = img[i];
    geo.k[i] = blk[i];
    geo.pb[i] = pads[i];
    int64_t eff, t, span;
    if (!cpu_dilated_extent(blk[i], geo.d[i], &eff) ||
        !cpu_add3_i64(img[i], pads[i], pads[i + ns], &t) || !cpu_sub_i64(t, eff, &span))
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: integer overflow from image_shape %lld, block_shape %lld, "
                       "dilations and pads",
                       i, (long long)img[i], (long long)blk[i]);
    if (span < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "block dim %zu exceeds the padded image", i);
    geo.in[i] = span / geo.s[i] + 1;
  }
  if ((st = geo_sizes(node, &geo))) return st;
  if (geo.k_sz > (size_t)INT64_MAX || xd[1] % (int64_t)geo.k_sz != 0 || (size_t)xd[2] != geo.in_sz)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "input is [%lld, %lld, %lld]; dim 1 must be a multiple of %zu and dim 2 "
                     "equal %zu",
                     (long long)xd[0], (long long)xd[1], (long long)xd[2], geo.k_sz, geo.in_sz);
  const size_t n = (size_t)xd[0], c = (size_t)xd[1] / geo.k_sz;
  int64_t od[MAX_SP + 2] = {(int64_t)n, (int64_t)c};
  for (size_t i = 0; i < ns; i++)
    od[2 + i] = img[i];
  OnyxTensor* y;
  double *xv, *yv;
  const size_t total = n * c * geo.out_sz;
  if ((st = cpu_host->ctx_output(ctx, 0, od, ns + 2, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)))
    return st;
  memset(yv, 0, total * sizeof(double));
  for (size_t b = 0; b < n; b++)
    col2im_double(&geo, c, xv + b * c * geo.k_sz * geo.in_sz, yv + b * c * geo.out_sz);
  nnop_store_d(y, yv, total);
  return NULL;
}

/* ======================================================================== */
/* DeformConv                                                                */
/* ======================================================================== */

static double bilinear_zero(const double* pl, int64_t h, int64_t w, double y, double x) {
  if (!(y > -1 && y < (double)h && x > -1 && x < (double)w)) return 0; /* NaN too */
  if (y <= -1 || y >= (double)h || x <= -1 || x >= (double)w) return 0;
  const int64_t y0 = (int64_t)floor(y), x0 = (int64_t)floor(x);
  const double ly = y - (double)y0, lx = x - (double)x0;
  double v = 0;
  for (int dy = 0; dy < 2; dy++)
    for (int dx = 0; dx < 2; dx++) {
      const int64_t yy = y0 + dy, xx = x0 + dx;
      if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
      v += (dy ? ly : 1 - ly) * (dx ? lx : 1 - lx) * pl[yy * w + xx];
    }
  return v;
}

static OnyxStatus* deform_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* offt = cpu_host->ctx_input(ctx, 2);
  const OnyxTensor* bias = nnop_has_input(ctx, 3) ? cpu_host->ctx_input(ctx, 3) : NULL;
  const OnyxTensor* maskt = nnop_has_input(ctx, 4) ? cpu_host->ctx_input(ctx, 4) : NULL;
  if (cpu_host->tensor_rank(x) != 4 || cpu_host->tensor_rank(w) != 4 ||
      cpu_host->tensor_rank(offt) != 4)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "X, W and offset must be 4-D (2 spatial dims are supported)");
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* wd = cpu_host->tensor_dims(w);
  const int64_t* fd = cpu_host->tensor_dims(offt);
  const int64_t group = cpu_host->node_attr_int(node, "group", 1);
  const int64_t og = cpu_host->node_attr_int(node, "offset_group", 1);
  if (group < 1 || og < 1 || xd[1] % group || xd[1] % og || wd[0] % group || wd[1] * group != xd[1])
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "X has %lld channels; W is [%lld, %lld, ...] with group %lld, offset_group "
                     "%lld",
                     (long long)xd[1], (long long)wd[0], (long long)wd[1], (long long)group,
                     (long long)og);
  int64_t k[2] = {1, 1}, s[2] = {1, 1}, dl[2] = {1, 1}, pads[4] = {0}; /* set below */
  OnyxStatus* st;
  if ((st = attr_list(node, "strides", 2, 1, 1, s)) ||
      (st = attr_list(node, "dilations", 2, 1, 1, dl)) ||
      (st = attr_list(node, "pads", 4, 0, 0, pads)))
    return st;
  size_t nk = 0;
  const int64_t* ks = cpu_host->node_attr_ints(node, "kernel_shape", &nk);
  k[0] = ks && nk == 2 ? ks[0] : wd[2];
  k[1] = ks && nk == 2 ? ks[1] : wd[3];
  if (k[0] != wd[2] || k[1] != wd[3])
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape [%lld, %lld] disagrees with W's spatial dims [%lld, %lld]",
                     (long long)k[0], (long long)k[1], (long long)wd[2], (long long)wd[3]);
  if (k[0] < 1 || k[1] < 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "the kernel [%lld, %lld] is empty",
                     (long long)k[0], (long long)k[1]);
  const int64_t n = xd[0], c = xd[1], h = xd[2], wi = xd[3], oc = wd[0];
  int64_t eh, ew, th, tw, ksz, og2k;
  if (!cpu_dilated_extent(k[0], dl[0], &eh) || !cpu_dilated_extent(k[1], dl[1], &ew) ||
      !cpu_add3_i64(h, pads[0], pads[2], &th) || !cpu_add3_i64(wi, pads[1], pads[3], &tw) ||
      !cpu_mul_i64(k[0], k[1], &ksz) || !cpu_mul_i64(og, ksz, &og2k) ||
      !cpu_mul_i64(og2k, 2, &og2k))
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "integer overflow computing the output size from X's dims [%lld, %lld], "
                     "the kernel [%lld, %lld], dilations, pads and offset_group",
                     (long long)h, (long long)wi, (long long)k[0], (long long)k[1]);
  const int64_t oh = (th - eh) / s[0] + 1, ow = (tw - ew) / s[1] + 1;
  if (th < eh || tw < ew || oh < 1 || ow < 1 || fd[0] != n || fd[1] != og2k || fd[2] != oh ||
      fd[3] != ow)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "offset must be [%lld, %lld, %lld, %lld]",
                     (long long)n, (long long)og2k, (long long)oh, (long long)ow);
  if (maskt && cpu_host->tensor_elem_count(maskt) != (size_t)(n * og * ksz * oh * ow))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "mask must be [%lld, %lld, %lld, %lld]",
                     (long long)n, (long long)(og * ksz), (long long)oh, (long long)ow);
  if (bias && cpu_host->tensor_elem_count(bias) != (size_t)oc)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "bias B must have %lld values", (long long)oc);
  const int64_t od[4] = {n, oc, oh, ow};
  OnyxTensor* y;
  double *xv, *wv, *fv, *mv = NULL, *bv = NULL, *yv, *cols;
  const size_t l = (size_t)(oh * ow), total = (size_t)(n * oc) * l;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 4, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_load_d(ctx, w, &wv)) || (st = nnop_load_d(ctx, offt, &fv)) ||
      (maskt && (st = nnop_load_d(ctx, maskt, &mv))) ||
      (bias && (st = nnop_load_d(ctx, bias, &bv))) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)) ||
      (st = nnop_scratch(ctx, (size_t)(c * ksz) * l * sizeof(double), (void**)&cols)))
    return st;
  const int64_t cpg = c / group, ocpg = oc / group, cpo = c / og;
  CpuStop stop = {.ctx = ctx};
  for (int64_t b = 0; b < n; b++) {
    for (int64_t ch = 0; ch < c; ch++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const int64_t g = ch / cpo;
      const double* pl = xv + (b * c + ch) * h * wi;
      for (int64_t kk = 0; kk < ksz; kk++) {
        const int64_t ki = kk / k[1], kj = kk % k[1];
        const double* offh = fv + ((b * og + g) * 2 * ksz + 2 * kk) * (int64_t)l;
        const double* offw = offh + l;
        const double* msk = mv ? mv + ((b * og + g) * ksz + kk) * (int64_t)l : NULL;
        double* col = cols + (ch * ksz + kk) * (int64_t)l;
        for (int64_t i = 0; i < oh; i++)
          for (int64_t j = 0; j < ow; j++) {
            const int64_t p = i * ow + j;
            const double yy = (double)(i * s[0] - pads[0] + ki * dl[0]) + offh[p];
            const double xx = (double)(j * s[1] - pads[1] + kj * dl[1]) + offw[p];
            double v = bilinear_zero(pl, h, wi, yy, xx);
            if (msk) v *= msk[p];
            col[p] = v;
          }
      }
    }
    for (int64_t gi = 0; gi < group; gi++) {
      CpuGemm gm = {.m = (size_t)ocpg,
                    .n = l,
                    .k = (size_t)(cpg * ksz),
                    .a = wv + gi * ocpg * cpg * ksz,
                    .lda = (size_t)(cpg * ksz),
                    .trans_a = 0,
                    .b = cols + gi * cpg * ksz * (int64_t)l,
                    .ldb = l,
                    .c = yv + (b * oc + gi * ocpg) * (int64_t)l,
                    .ldc = l,
                    .alpha = 1,
                    .beta = 0,
                    .stop = &stop};
      cpu_gemm_f64(cpu_host->ctx_thread_pool(ctx), &gm);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
    if (bv)
      for (int64_t o = 0; o < oc; o++)
        for (size_t p = 0; p < l; p++)
          yv[(size_t)(b * oc + o) * l + p] += bv[o];
  }
  nnop_store_d(y, yv, total);
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const OnyxTypeConstraint TC_T[] = {{"T", cpu_types_real, 4}};

OnyxStatus* cpu_register_conv_transpose(OnyxKernelRegistry* r) {
  const int32_t latest = ONYX_OPSET_LATEST;
  const CpuKernelSpec specs[] = {
      {"ConvTranspose", 1, latest, TC_T, 1, nnop_node_create, convt_compute, NULL, NULL},
      {"Col2Im", 18, latest, TC_T, 1, nnop_node_create, col2im_compute, NULL, NULL},
      {"DeformConv", 19, latest, TC_T, 1, nnop_node_create, deform_compute, NULL, NULL},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
