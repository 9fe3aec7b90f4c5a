/* test_qops.c — the CPU provider's quantized products on the int8 GEMM
 * (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) through the
 * public API, on random operands against plain loops written here: the
 * integer sums exactly, then QLinear*'s requantization rint(sum * m) + zp
 * with m = float32(float32(a_scale * b_scale) / y_scale) saturated to the
 * output type. A reference product within 1e-4 of a rounding tie may come
 * out either way (the kernels multiply in float32) and is allowed one step
 * either side; every other element must match exactly. Covers every
 * signedness of A / B / Y, per-tensor and per-column (per-channel) zero
 * points and scales, batches, B constant (prepacked at creation) or
 * computed (packed per run), conv groups, depthwise, pads, strides,
 * dilations, 1-D / 2-D / 3-D, 2-D with channels in 4s (read where they
 * lie on the VNNI path), and com.onyx QLinearConv (x and y channels-last)
 * on every group-1 case; ctest repeats it under ONYX_CPU_ISA caps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

static uint32_t rng = 4242;
static uint32_t next(void) {
  rng = rng * 1664525u + 1013904223u;
  return rng >> 8;
}
/* A random value of an 8-bit type as its byte. */
static uint8_t rand_byte(void) {
  return (uint8_t)(next() & 255);
}
static int64_t as_int(bool is_signed, uint8_t b) {
  return is_signed ? (int64_t)(int8_t)b : (int64_t)b;
}
static OnyxElemType t8(bool is_signed) {
  return is_signed ? ONYX_ELEM_INT8 : ONYX_ELEM_UINT8;
}

static OnyxValue* run_model(OxTestModel* m) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* opts = NULL;
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_options_set_threads(opts, 2);
  if (!st) st = onyx_session_create_from_bytes(opts, bytes, len, NULL, &s);
  onyx_session_options_release(opts);
  free(bytes);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  const char* name = "Y";
  OnyxValue* y = NULL;
  st = onyx_session_run(s, NULL, NULL, NULL, 0, &name, 1, &y);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  onyx_session_release(s);
  return y;
}

/* The requantized reference of an exact sum, and whether it sits within
 * 1e-4 of a rounding tie. */
static int64_t requant(int64_t acc, float mult, int64_t zp, bool y_signed, bool* near_tie) {
  const double v = (double)acc * (double)mult;
  const double f = v - floor(v);
  *near_tie = fabs(f - 0.5) < 1e-4;
  double r = rint(v) + (double)zp;
  const double lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
  r = r < lo ? lo : r > hi ? hi : r;
  return (int64_t)r;
}

static void check_q(const char* what, size_t i, int64_t got, int64_t want, bool near_tie) {
  if (got == want || (near_tie && llabs(got - want) <= 1)) return;
  fail_msg("%s: element %zu = %lld, want %lld", what, i, (long long)got, (long long)want);
}

static size_t products;

/* --- MatMulInteger / QLinearMatMul ----------------------------------------------------- */

typedef struct MmCase {
  size_t batch, m, k, n;
  bool a_signed, b_signed, y_signed;
  bool b_batched;  /* B [batch, k, n], else [k, n] */
  bool b_computed; /* B through an Identity: not a constant at creation */
  bool per_column; /* b scale / zero point per column */
  bool qlinear;
  bool bz_zero; /* every b zero point 0 */
} MmCase;

static void run_mm(const MmCase* c) {
  const size_t bb = c->b_batched ? c->batch : 1;
  uint8_t* a = malloc(c->batch * c->m * c->k + 1);
  uint8_t* b = malloc(bb * c->k * c->n + 1);
  uint8_t bz[64];
  float bs[64];
  assert_true(c->n <= 64);
  for (size_t i = 0; i < c->batch * c->m * c->k; i++)
    a[i] = rand_byte();
  for (size_t i = 0; i < bb * c->k * c->n; i++)
    b[i] = rand_byte();
  const uint8_t az = rand_byte();
  for (size_t j = 0; j < c->n; j++) {
    bz[j] = c->bz_zero ? 0 : c->per_column || j == 0 ? rand_byte() : bz[0];
    bs[j] = c->per_column || j == 0 ? 0.001f + (float)(next() % 1000) * 1e-5f : bs[0];
  }
  const float as = 0.02f, ys = 0.75f + (float)(next() % 100) * 0.01f;
  const uint8_t yz = rand_byte();
  OxTestModel* m = otm_new(13);
  otm_initializer(m, "A", t8(c->a_signed), 3,
                  (int64_t[]){(int64_t)c->batch, (int64_t)c->m, (int64_t)c->k}, a);
  if (c->b_batched)
    otm_initializer(m, c->b_computed ? "B0" : "B", t8(c->b_signed), 3,
                    (int64_t[]){(int64_t)bb, (int64_t)c->k, (int64_t)c->n}, b);
  else
    otm_initializer(m, c->b_computed ? "B0" : "B", t8(c->b_signed), 2,
                    (int64_t[]){(int64_t)c->k, (int64_t)c->n}, b);
  if (c->b_computed) otm_node(m, "Identity", "id", "B0", "B");
  const size_t nz = c->per_column ? c->n : 1;
  const int64_t zdims[1] = {(int64_t)c->n};
  otm_initializer(m, "az", t8(c->a_signed), 0, NULL, &az);
  otm_initializer(m, "bz", t8(c->b_signed), c->per_column ? 1 : 0, c->per_column ? zdims : NULL,
                  bz);
  const int64_t out[3] = {(int64_t)c->batch, (int64_t)c->m, (int64_t)c->n};
  if (c->qlinear) {
    otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
    otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, c->per_column ? 1 : 0, c->per_column ? zdims : NULL,
                    bs);
    otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
    otm_initializer(m, "yz", t8(c->y_signed), 0, NULL, &yz);
    otm_node(m, "QLinearMatMul", "q", "A,as,az,B,bs,bz,ys,yz", "Y");
    otm_output(m, "Y", t8(c->y_signed), 3, out);
  } else {
    otm_node(m, "MatMulInteger", "q", "A,B,az,bz", "Y");
    otm_output(m, "Y", ONYX_ELEM_INT32, 3, out);
  }
  (void)nz;
  OnyxValue* y = run_model(m);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), c->qlinear ? t8(c->y_signed) : ONYX_ELEM_INT32);
  const void* got = onyx_tensor_data(t);
  for (size_t q = 0; q < c->batch; q++)
    for (size_t i = 0; i < c->m; i++)
      for (size_t j = 0; j < c->n; j++) {
        int64_t acc = 0;
        const uint8_t* bm = b + (c->b_batched ? q : 0) * c->k * c->n;
        for (size_t p = 0; p < c->k; p++)
          acc += (as_int(c->a_signed, a[(q * c->m + i) * c->k + p]) - as_int(c->a_signed, az)) *
                 (as_int(c->b_signed, bm[p * c->n + j]) - as_int(c->b_signed, bz[j]));
        const size_t at = (q * c->m + i) * c->n + j;
        if (!c->qlinear) {
          if (((const int32_t*)got)[at] != (int32_t)acc)
            fail_msg("MatMulInteger: element %zu = %d, want %lld", at, ((const int32_t*)got)[at],
                     (long long)acc);
          continue;
        }
        const float mult = (float)((float)(as * bs[j]) / ys);
        bool tie;
        const int64_t want = requant(acc, mult, as_int(c->y_signed, yz), c->y_signed, &tie);
        const int64_t g = c->y_signed ? ((const int8_t*)got)[at] : ((const uint8_t*)got)[at];
        check_q("QLinearMatMul", at, g, want, tie);
      }
  onyx_value_release(y);
  free(a);
  free(b);
  products++;
}

static void test_matmul(void** state) {
  (void)state;
  static const size_t SH[][4] = {{1, 1, 1, 1},   {1, 3, 5, 7},     {2, 9, 37, 33},
                                 {3, 17, 4, 64}, {1, 70, 130, 40}, {2, 1, 300, 5}};
  for (size_t s = 0; s < sizeof SH / sizeof SH[0]; s++)
    for (int v = 0; v < 16; v++) {
      MmCase c = {SH[s][0],
                  SH[s][1],
                  SH[s][2],
                  SH[s][3],
                  v & 1,
                  (v >> 1) & 1,
                  (v >> 2) & 1,
                  (v + (int)s) % 3 == 0,
                  (v + (int)s) % 4 == 1,
                  (v >> 3) & 1,
                  true,
                  false};
      c.bz_zero = (v + (int)s) % 5 == 2;
      run_mm(&c);
      c.qlinear = false;
      run_mm(&c);
    }
}

/* --- ConvInteger / QLinearConv ----------------------------------------------------------- */

typedef struct ConvCase {
  size_t n, c, m, group, ns;
  size_t in[3], k[3], s[3], d[3], pb[3], pe[3];
  bool x_signed, w_signed, y_signed, per_channel, bias, w_computed, qlinear;
  bool wz_zero; /* every weight zero point 0 (the common symmetric int8 weights) */
  bool nhwc;    /* com.onyx QLinearConv: x and y channels-last ([N, spatial..., C]) */
} ConvCase;

static void run_conv(const ConvCase* c) {
  const size_t cg = c->c / c->group, mg = c->m / c->group;
  size_t in_size = 1, ks = 1, out_size = 1, out[3];
  for (size_t i = 0; i < c->ns; i++) {
    in_size *= c->in[i];
    ks *= c->k[i];
    out[i] = (c->in[i] + c->pb[i] + c->pe[i] - (c->d[i] * (c->k[i] - 1) + 1)) / c->s[i] + 1;
    out_size *= out[i];
  }
  uint8_t* x = malloc(c->n * c->c * in_size);
  uint8_t* xh = malloc(c->n * c->c * in_size); /* x channels-last */
  uint8_t* w = malloc(c->m * cg * ks);
  uint8_t wz[64];
  float ws[64];
  int32_t bias[64];
  assert_true(c->m <= 64);
  for (size_t i = 0; i < c->n * c->c * in_size; i++)
    x[i] = rand_byte();
  for (size_t img = 0; img < c->n; img++)
    for (size_t ch = 0; ch < c->c; ch++)
      for (size_t p = 0; p < in_size; p++)
        xh[(img * in_size + p) * c->c + ch] = x[(img * c->c + ch) * in_size + p];
  for (size_t i = 0; i < c->m * cg * ks; i++)
    w[i] = rand_byte();
  for (size_t j = 0; j < c->m; j++) {
    wz[j] = c->wz_zero ? 0 : c->per_channel || j == 0 ? rand_byte() : wz[0];
    ws[j] = c->per_channel || j == 0 ? 0.0005f + (float)(next() % 1000) * 1e-5f : ws[0];
    bias[j] = (int32_t)(next() % 20001) - 10000;
  }
  const uint8_t xz = rand_byte(), yz = rand_byte();
  const float xs = 0.05f, ys = 0.5f + (float)(next() % 100) * 0.02f;
  int64_t xd[5] = {(int64_t)c->n, (int64_t)c->c}, wd[5] = {(int64_t)c->m, (int64_t)cg},
          yd[5] = {(int64_t)c->n, (int64_t)c->m};
  int64_t pads[6], strides[3], dil[3];
  for (size_t i = 0; i < c->ns; i++) {
    xd[2 + i] = (int64_t)c->in[i];
    wd[2 + i] = (int64_t)c->k[i];
    yd[2 + i] = (int64_t)out[i];
    pads[i] = (int64_t)c->pb[i];
    pads[c->ns + i] = (int64_t)c->pe[i];
    strides[i] = (int64_t)c->s[i];
    dil[i] = (int64_t)c->d[i];
  }
  const int rank = (int)c->ns + 2;
  const int64_t mdim[1] = {(int64_t)c->m};
  if (c->nhwc) { /* [N, spatial..., C] */
    for (size_t i = 0; i < c->ns; i++) {
      xd[1 + i] = (int64_t)c->in[i];
      yd[1 + i] = (int64_t)out[i];
    }
    xd[rank - 1] = (int64_t)c->c;
    yd[rank - 1] = (int64_t)c->m;
  }
  OxTestModel* m = otm_new(13);
  if (c->nhwc) otm_add_opset(m, "com.onyx", 1);
  otm_initializer(m, "x", t8(c->x_signed), rank, xd, c->nhwc ? xh : x);
  otm_initializer(m, c->w_computed ? "w0" : "w", t8(c->w_signed), rank, wd, w);
  if (c->w_computed) otm_node(m, "Identity", "id", "w0", "w");
  otm_initializer(m, "xz", t8(c->x_signed), 0, NULL, &xz);
  otm_initializer(m, "wz", t8(c->w_signed), c->per_channel ? 1 : 0, c->per_channel ? mdim : NULL,
                  wz);
  OxTestNode* node;
  if (c->qlinear) {
    otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
    otm_initializer(m, "ws", ONYX_ELEM_FLOAT32, c->per_channel ? 1 : 0,
                    c->per_channel ? mdim : NULL, ws);
    otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
    otm_initializer(m, "yz", t8(c->y_signed), 0, NULL, &yz);
    if (c->bias) otm_initializer(m, "b", ONYX_ELEM_INT32, 1, mdim, bias);
    node = otm_node(m, "QLinearConv", "q",
                    c->bias ? "x,xs,xz,w,ws,wz,ys,yz,b" : "x,xs,xz,w,ws,wz,ys,yz", "Y");
    if (c->nhwc) {
      otm_node_domain(node, "com.onyx");
      otm_attr_int(node, "channels_last", 1);
    }
    otm_output(m, "Y", t8(c->y_signed), rank, yd);
  } else {
    node = otm_node(m, "ConvInteger", "q", "x,w,xz,wz", "Y");
    otm_output(m, "Y", ONYX_ELEM_INT32, rank, yd);
  }
  otm_attr_int(node, "group", (int64_t)c->group);
  otm_attr_ints(node, "pads", 2 * c->ns, pads);
  otm_attr_ints(node, "strides", c->ns, strides);
  otm_attr_ints(node, "dilations", c->ns, dil);
  OnyxValue* y = run_model(m);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), c->qlinear ? t8(c->y_signed) : ONYX_ELEM_INT32);
  assert_int_equal(onyx_tensor_elem_count(t), c->n * c->m * out_size);
  const void* got = onyx_tensor_data(t);
  for (size_t img = 0; img < c->n; img++)
    for (size_t oc = 0; oc < c->m; oc++) {
      const size_t gi = oc / mg;
      for (size_t p = 0; p < out_size; p++) {
        size_t o[3] = {0}, rem = p;
        for (size_t i = c->ns; i-- > 0;) {
          o[i] = rem % out[i];
          rem /= out[i];
        }
        int64_t acc = 0;
        for (size_t ic = 0; ic < cg; ic++)
          for (size_t kk = 0; kk < ks; kk++) {
            size_t kc[3] = {0}, kr = kk, off = 0;
            for (size_t i = c->ns; i-- > 0;) {
              kc[i] = kr % c->k[i];
              kr /= c->k[i];
            }
            bool inside = true;
            for (size_t i = 0; i < c->ns; i++) {
              const long long xi =
                  (long long)(o[i] * c->s[i] + kc[i] * c->d[i]) - (long long)c->pb[i];
              inside = inside && xi >= 0 && xi < (long long)c->in[i];
              off = off * c->in[i] + (size_t)(xi < 0 ? 0 : xi);
            }
            if (!inside) continue; /* padding: x equals its zero point */
            const uint8_t xv = x[((img * c->c) + gi * cg + ic) * in_size + off];
            const uint8_t wv = w[(oc * cg + ic) * ks + kk];
            acc += (as_int(c->x_signed, xv) - as_int(c->x_signed, xz)) *
                   (as_int(c->w_signed, wv) - as_int(c->w_signed, wz[oc]));
          }
        const size_t at =
            c->nhwc ? (img * out_size + p) * c->m + oc : (img * c->m + oc) * out_size + p;
        if (!c->qlinear) {
          if (((const int32_t*)got)[at] != (int32_t)acc)
            fail_msg("ConvInteger: element %zu = %d, want %lld", at, ((const int32_t*)got)[at],
                     (long long)acc);
          continue;
        }
        if (c->bias) acc += bias[oc];
        const float mult = (float)((float)(xs * ws[oc]) / ys);
        bool tie;
        const int64_t want = requant(acc, mult, as_int(c->y_signed, yz), c->y_signed, &tie);
        const int64_t g = c->y_signed ? ((const int8_t*)got)[at] : ((const uint8_t*)got)[at];
        check_q("QLinearConv", at, g, want, tie);
      }
    }
  onyx_value_release(y);
  free(x);
  free(xh);
  free(w);
  products++;
}

static void test_conv(void** state) {
  (void)state;
  /* n, c, m, group, ns, in, k, s, d, pb, pe */
  /* the geometry; the flags are set per variant below */
#define GEO(...)                                                                                   \
  { __VA_ARGS__, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  static const ConvCase BASE[] = {
      GEO(1, 8, 16, 1, 2, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),   /* 3x3, pad 1 */
      GEO(2, 6, 8, 1, 2, {7, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}),     /* pointwise */
      GEO(1, 5, 7, 1, 2, {8, 9}, {2, 3}, {2, 1}, {1, 2}, {1, 0}, {0, 2}),     /* odd all */
      GEO(2, 6, 4, 2, 2, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 1}),     /* groups */
      GEO(1, 12, 12, 12, 2, {10, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), /* depthwise */
      GEO(2, 4, 4, 4, 2, {9, 9}, {3, 3}, {2, 2}, {2, 1}, {2, 1}, {1, 0}),     /* dw, strided */
      GEO(1, 6, 12, 6, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),    /* 2 per group */
      GEO(1, 3, 5, 1, 1, {17}, {4}, {3}, {1}, {2}, {1}),                      /* 1-D */
      GEO(1, 4, 4, 4, 1, {13}, {5}, {1}, {2}, {3}, {3}),                      /* 1-D dw */
      GEO(1, 3, 4, 1, 3, {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}),
      GEO(1, 64, 3, 1, 2, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),    /* k = 576 */
      GEO(1, 16, 40, 1, 2, {20, 20}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), /* 400 rows */
      GEO(1, 40, 8, 1, 2, {7, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),    /* 16-ch tiles */
      GEO(1, 3, 8, 1, 2, {11, 12}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}),   /* 7x7 stem */
      GEO(1, 2, 3, 1, 2, {4, 5}, {3, 9}, {1, 1}, {1, 1}, {1, 7}, {1, 6}),     /* wide pads */
      GEO(1, 8, 33, 1, 2, {19, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}),   /* row/col tails */
      /* channels in 4s, read in place (segments): strides, a dilation along
       * the height, uneven pads, batches, a kernel row past 1024 bytes */
      GEO(1, 8, 12, 1, 2, {9, 10}, {3, 3}, {2, 2}, {2, 1}, {1, 1}, {0, 1}),
      GEO(2, 4, 9, 1, 2, {7, 13}, {5, 3}, {1, 2}, {1, 1}, {2, 0}, {2, 1}),
      GEO(1, 384, 8, 1, 2, {4, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      GEO(1, 16, 20, 2, 2, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), /* 2 groups of 8 */
  };
#undef GEO

  for (size_t b = 0; b < sizeof BASE / sizeof BASE[0]; b++)
    for (int v = 0; v < 8; v++) {
      ConvCase c = BASE[b];
      c.x_signed = v & 1;
      c.w_signed = (v >> 1) & 1;
      c.y_signed = (v >> 2) & 1;
      c.per_channel = (v + (int)b) % 2 == 0;
      c.bias = (v + (int)b) % 3 != 0;
      c.w_computed = (v + (int)b) % 4 == 3;
      c.wz_zero = (v + (int)b) % 3 == 1;
      c.qlinear = true;
      run_conv(&c);
      if (c.group == 1) { /* the channels-last variant of the same product */
        c.nhwc = true;
        run_conv(&c);
        c.nhwc = false;
      }
      c.qlinear = false;
      run_conv(&c);
    }
}

/* Saturation both ways and a zero point at the end of the range: x all
 * 255 against weights all -128 and all 127, one output channel each. */
static void test_conv_saturates(void** state) {
  (void)state;
  uint8_t x[16], w[2 * 4];
  memset(x, 255, sizeof x);
  for (int i = 0; i < 4; i++) {
    w[i] = (uint8_t)(int8_t)-128;
    w[4 + i] = 127;
  }
  const uint8_t xz = 0, yz = 128;
  const int8_t wz = 0;
  const float xs = 1.0f, ws = 1.0f, ys = 1.0f;
  OxTestModel* m = otm_new(13);
  otm_initializer(m, "x", ONYX_ELEM_UINT8, 4, (int64_t[]){1, 1, 4, 4}, x);
  otm_initializer(m, "w", ONYX_ELEM_INT8, 4, (int64_t[]){2, 1, 2, 2}, w);
  otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
  otm_initializer(m, "xz", ONYX_ELEM_UINT8, 0, NULL, &xz);
  otm_initializer(m, "ws", ONYX_ELEM_FLOAT32, 0, NULL, &ws);
  otm_initializer(m, "wz", ONYX_ELEM_INT8, 0, NULL, &wz);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "yz", ONYX_ELEM_UINT8, 0, NULL, &yz);
  otm_node(m, "QLinearConv", "q", "x,xs,xz,w,ws,wz,ys,yz", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){1, 2, 3, 3});
  OnyxValue* y = run_model(m);
  const uint8_t* got = onyx_tensor_data(onyx_value_tensor(y));
  /* 4 * 255 * -128 = -130560 -> 0; 4 * 255 * 127 = 129540 -> 255 */
  for (int i = 0; i < 9; i++) {
    assert_int_equal(got[i], 0);
    assert_int_equal(got[9 + i], 255);
  }
  onyx_value_release(y);
}

/* --- com.microsoft QLinearAdd / QLinearGlobalAveragePool ------------------------------- */

/* Requantized double reference v; ties within 1e-3 may round either way
 * (the kernel computes in float32). */
static void check_ref(const char* what, size_t i, int64_t got, double v, int64_t zp,
                      bool is_signed) {
  const double f = v - floor(v);
  const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  double r = rint(v) + (double)zp;
  r = r < lo ? lo : r > hi ? hi : r;
  check_q(what, i, got, (int64_t)r, fabs(f - 0.5) < 1e-3);
}

static void run_qadd(bool is_signed, const int64_t* bd, size_t br) {
  uint8_t a[24], b[24];
  for (int i = 0; i < 24; i++) {
    a[i] = rand_byte();
    b[i] = rand_byte();
  }
  const uint8_t za = rand_byte(), zb = rand_byte(), zc = rand_byte();
  const float as = 0.03f, bs = 0.07f, cs = 0.05f;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.microsoft", 1);
  otm_initializer(m, "A", t8(is_signed), 3, (int64_t[]){2, 3, 4}, a);
  otm_initializer(m, "B", t8(is_signed), (int)br, bd, b);
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
  otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 0, NULL, &bs);
  otm_initializer(m, "cs", ONYX_ELEM_FLOAT32, 0, NULL, &cs);
  otm_initializer(m, "za", t8(is_signed), 0, NULL, &za);
  otm_initializer(m, "zb", t8(is_signed), 0, NULL, &zb);
  otm_initializer(m, "zc", t8(is_signed), 0, NULL, &zc);
  otm_node_domain(otm_node(m, "QLinearAdd", "q", "A,as,za,B,bs,zb,cs,zc", "Y"), "com.microsoft");
  otm_output(m, "Y", t8(is_signed), 3, (int64_t[]){2, 3, 4});
  OnyxValue* y = run_model(m);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), 24);
  const uint8_t* got = onyx_tensor_data(t);
  for (size_t i = 0; i < 24; i++) {
    /* B's element for A's [i0, i1, i2] under numpy broadcasting */
    const size_t i0 = i / 12, i1 = (i / 4) % 3, i2 = i % 4;
    size_t bi = 0;
    if (br == 1) bi = i2;                    /* [4] */
    if (br == 2) bi = i1;                    /* [3, 1] */
    if (br == 3) bi = i0 * 12 + i1 * 4 + i2; /* [2, 3, 4] */
    const double v = ((double)(as_int(is_signed, a[i]) - as_int(is_signed, za)) * as +
                      (double)(as_int(is_signed, b[bi]) - as_int(is_signed, zb)) * bs) /
                     cs;
    check_ref("QLinearAdd", i, as_int(is_signed, got[i]), v, as_int(is_signed, zc), is_signed);
  }
  onyx_value_release(y);
}

/* Rows long enough for the vector paths (150: two steps of 64, one of 16
 * and a tail of 6): A [2, 150] with B [2, 150], B [150] or one value,
 * QLinearAdd or QLinearMul, C's scale small enough to saturate both ends or
 * not, against the double formula. */
static void run_qbinary_long(bool is_signed, bool mul, int bmode, float cs) {
  enum { R = 2, L = 150 };
  uint8_t a[R * L], b[R * L];
  for (int i = 0; i < R * L; i++) {
    a[i] = rand_byte();
    b[i] = rand_byte();
  }
  const uint8_t za = rand_byte(), zb = rand_byte(), zc = rand_byte();
  const float as = 0.03f, bs = 0.07f;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.microsoft", 1);
  otm_initializer(m, "A", t8(is_signed), 2, (int64_t[]){R, L}, a);
  if (bmode == 0) otm_initializer(m, "B", t8(is_signed), 2, (int64_t[]){R, L}, b);
  if (bmode == 1) otm_initializer(m, "B", t8(is_signed), 1, (int64_t[]){L}, b);
  if (bmode == 2) otm_initializer(m, "B", t8(is_signed), 1, (int64_t[]){1}, b);
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
  otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 0, NULL, &bs);
  otm_initializer(m, "cs", ONYX_ELEM_FLOAT32, 0, NULL, &cs);
  otm_initializer(m, "za", t8(is_signed), 0, NULL, &za);
  otm_initializer(m, "zb", t8(is_signed), 0, NULL, &zb);
  otm_initializer(m, "zc", t8(is_signed), 0, NULL, &zc);
  otm_node_domain(otm_node(m, mul ? "QLinearMul" : "QLinearAdd", "q", "A,as,za,B,bs,zb,cs,zc", "Y"),
                  "com.microsoft");
  otm_output(m, "Y", t8(is_signed), 2, (int64_t[]){R, L});
  OnyxValue* y = run_model(m);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), R * L);
  const uint8_t* got = onyx_tensor_data(t);
  for (size_t i = 0; i < R * L; i++) {
    const size_t bi = bmode == 0 ? i : bmode == 1 ? i % L : 0;
    const double da = (double)(as_int(is_signed, a[i]) - as_int(is_signed, za));
    const double db = (double)(as_int(is_signed, b[bi]) - as_int(is_signed, zb));
    const double v = mul ? da * db * as * bs / cs : (da * as + db * bs) / cs;
    check_ref(mul ? "QLinearMul" : "QLinearAdd", i, as_int(is_signed, got[i]), v,
              as_int(is_signed, zc), is_signed);
  }
  onyx_value_release(y);
}

static void test_qlinear_add(void** state) {
  (void)state;
  for (int sgn = 0; sgn < 2; sgn++) {
    run_qadd(sgn, (int64_t[]){4}, 1);
    run_qadd(sgn, (int64_t[]){3, 1}, 2);
    run_qadd(sgn, (int64_t[]){2, 3, 4}, 3);
    for (int mul = 0; mul < 2; mul++)
      for (int bmode = 0; bmode < 3; bmode++) {
        run_qbinary_long(sgn, mul, bmode, 0.05f);
        run_qbinary_long(sgn, mul, bmode, mul ? 0.02f : 0.004f); /* saturates */
      }
  }
}

static void run_qgap(bool is_signed, bool channels_last) {
  /* N 2, C 3, spatial 4 x 5 */
  uint8_t x[120];
  for (int i = 0; i < 120; i++)
    x[i] = rand_byte();
  const uint8_t zx = rand_byte(), zy = rand_byte();
  const float xs = 0.04f, ys = 0.02f;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.microsoft", 1);
  otm_initializer(m, "X", t8(is_signed), 4,
                  channels_last ? (int64_t[]){2, 4, 5, 3} : (int64_t[]){2, 3, 4, 5}, x);
  otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "zx", t8(is_signed), 0, NULL, &zx);
  otm_initializer(m, "zy", t8(is_signed), 0, NULL, &zy);
  OxTestNode* n = otm_node(m, "QLinearGlobalAveragePool", "q", "X,xs,zx,ys,zy", "Y");
  otm_node_domain(n, "com.microsoft");
  otm_attr_int(n, "channels_last", channels_last);
  const int64_t yd_first[4] = {2, 3, 1, 1}, yd_last[4] = {2, 1, 1, 3};
  otm_output(m, "Y", t8(is_signed), 4, channels_last ? yd_last : yd_first);
  OnyxValue* y = run_model(m);
  const OnyxTensor* t = onyx_value_tensor(y);
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(onyx_tensor_dims(t)[i], channels_last ? yd_last[i] : yd_first[i]);
  const uint8_t* got = onyx_tensor_data(t);
  for (size_t img = 0; img < 2; img++)
    for (size_t c = 0; c < 3; c++) {
      double sum = 0;
      for (size_t p = 0; p < 20; p++) {
        const size_t at = channels_last ? (img * 20 + p) * 3 + c : (img * 3 + c) * 20 + p;
        sum += (double)(as_int(is_signed, x[at]) - as_int(is_signed, zx)) * xs;
      }
      check_ref("QLinearGlobalAveragePool", img * 3 + c, as_int(is_signed, got[img * 3 + c]),
                sum / 20 / ys, as_int(is_signed, zy), is_signed);
    }
  onyx_value_release(y);
}

static void test_qlinear_gap(void** state) {
  (void)state;
  for (int sgn = 0; sgn < 2; sgn++)
    for (int last = 0; last < 2; last++)
      run_qgap(sgn, last);
}

static void test_count(void** state) {
  (void)state;
  printf("checked %zu quantized products (ONYX_CPU_ISA=%s)\n", products,
         getenv("ONYX_CPU_ISA") ? getenv("ONYX_CPU_ISA") : "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul),         cmocka_unit_test(test_conv),
      cmocka_unit_test(test_conv_saturates), cmocka_unit_test(test_qlinear_add),
      cmocka_unit_test(test_qlinear_gap),    cmocka_unit_test(test_count)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
