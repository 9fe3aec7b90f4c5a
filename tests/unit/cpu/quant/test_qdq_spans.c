/* test_qdq_spans.c — QuantizeLinear / DequantizeLinear between float32 and
 * int8 / uint8 (the span kernels of cpu_quant.c) through the public API,
 * per tensor and per axis, with and without a zero point, at lengths around
 * the vector widths (8, 16) and past one parallel chunk, against loops
 * written here in double: x / scale rounded to float32, rounded half to
 * even, NaN to 0, plus the zero point, saturated; and (x - zp) * scale
 * rounded to float32. The inputs mix random values with exact ties (scale
 * a power of two), NaN, infinities and values far out of range. Also
 * com.microsoft QLinearAdd on rows long enough for the vector paths, each
 * operand contiguous or broadcast, against ONNX Runtime's float32 formula
 * (a - za) * (as / cs) + (b - zb) * (bs / cs), rounded half to even, plus
 * zc, saturated, evaluated here with each float32 step rounded from double;
 * and com.microsoft QLinearMul the same way against
 * float32((a - za) * (b - zb)) * float32(float32(as * bs) / cs) (the
 * integer product exact, one float32 rounding). Every element must match exactly; ctest repeats it
 * under ONYX_CPU_ISA caps. */
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

static uint32_t rng = 777;
static uint32_t next(void) {
  rng = rng * 1664525u + 1013904223u;
  return rng >> 8;
}

static OnyxValue* run_model(OxTestModel* m, int threads) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* opts = NULL;
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_options_set_threads(opts, threads);
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

typedef struct SpanCase {
  size_t outer, d, inner; /* x is [outer, d, inner] */
  bool per_axis;          /* scale / zero point [d] along axis 1, else scalars */
  bool is_signed;
  bool with_zp;
  int threads;
} SpanCase;

/* A float32 x: random over about ±2.5 steps of the largest scale past the
 * range, with exact ties, specials and huge values mixed in. */
static float rand_x(float scale) {
  switch (next() % 16) {
  case 0:
    return NAN;
  case 1:
    return (next() & 1) ? INFINITY : -INFINITY;
  case 2:
    return (next() & 1) ? 1e30f : -1e30f;
  case 3:
  case 4: /* an exact tie k + 0.5 steps */
    return ((float)((int)(next() % 601) - 300) + 0.5f) * scale;
  default:
    return ((float)(int)(next() % 2000001) - 1000000.0f) * 4e-4f * scale;
  }
}

static float scale_of(size_t c) {
  /* Powers of two keep the ties exact; one odd scale rounds the quotient. */
  static const float S[] = {0.5f, 0.0625f, 2.0f, 0.013f, 1.0f / 1024};
  return S[c % 5];
}

static void run_case(const SpanCase* c) {
  const size_t n = c->outer * c->d * c->inner, ns = c->per_axis ? c->d : 1;
  float* x = malloc(n * sizeof *x);
  float* sc = malloc(ns * sizeof *sc);
  uint8_t* zp = malloc(ns);
  uint8_t* q = malloc(n);
  assert_non_null(x);
  assert_non_null(sc);
  assert_non_null(zp);
  assert_non_null(q);
  for (size_t i = 0; i < ns; i++) {
    sc[i] = scale_of(i + (size_t)c->is_signed);
    zp[i] = c->with_zp ? (uint8_t)(next() & 255) : 0;
  }
  for (size_t i = 0; i < n; i++)
    x[i] = rand_x(sc[c->per_axis ? (i / c->inner) % c->d : 0]);
  const OnyxElemType qt = c->is_signed ? ONYX_ELEM_INT8 : ONYX_ELEM_UINT8;
  const int64_t dims[3] = {(int64_t)c->outer, (int64_t)c->d, (int64_t)c->inner};
  const int64_t sd[1] = {(int64_t)c->d};

  /* QuantizeLinear */
  OxTestModel* m = otm_new(21);
  otm_initializer(m, "X", ONYX_ELEM_FLOAT32, 3, dims, x);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, c->per_axis ? 1 : 0, c->per_axis ? sd : NULL, sc);
  if (c->with_zp) {
    otm_initializer(m, "z", qt, c->per_axis ? 1 : 0, c->per_axis ? sd : NULL, zp);
    otm_node(m, "QuantizeLinear", "q", "X,s,z", "Y");
  } else {
    OxTestNode* nd = otm_node(m, "QuantizeLinear", "q", "X,s", "Y");
    otm_attr_int(nd, "output_dtype", qt);
  }
  otm_output(m, "Y", qt, 3, dims);
  OnyxValue* y = run_model(m, c->threads);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), qt);
  const uint8_t* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++) {
    const size_t p = c->per_axis ? (i / c->inner) % c->d : 0;
    const double z = c->is_signed ? (double)(int8_t)zp[p] : (double)zp[p];
    const double lo = c->is_signed ? -128 : 0, hi = c->is_signed ? 127 : 255;
    double v = (double)(float)((double)x[i] / (double)sc[p]);
    v = isnan(v) ? 0.0 : rint(v);
    v += z;
    v = v < lo ? lo : v > hi ? hi : v;
    const int64_t want = (int64_t)v;
    const int64_t g = c->is_signed ? (int64_t)(int8_t)got[i] : (int64_t)got[i];
    if (g != want)
      fail_msg("QuantizeLinear n=%zu: element %zu (x=%.9g, scale %.9g, zp %g) = %lld, want %lld", n,
               i, (double)x[i], (double)sc[p], z, (long long)g, (long long)want);
    q[i] = got[i];
  }
  onyx_value_release(y);

  /* DequantizeLinear of those bytes, plus random ones */
  for (size_t i = 0; i < n; i += 3)
    q[i] = (uint8_t)(next() & 255);
  m = otm_new(21);
  otm_initializer(m, "X", qt, 3, dims, q);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, c->per_axis ? 1 : 0, c->per_axis ? sd : NULL, sc);
  if (c->with_zp) {
    otm_initializer(m, "z", qt, c->per_axis ? 1 : 0, c->per_axis ? sd : NULL, zp);
    otm_node(m, "DequantizeLinear", "dq", "X,s,z", "Y");
  } else
    otm_node(m, "DequantizeLinear", "dq", "X,s", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, dims);
  y = run_model(m, c->threads);
  t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  const float* f = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++) {
    const size_t p = c->per_axis ? (i / c->inner) % c->d : 0;
    const int v = c->is_signed ? (int8_t)q[i] : q[i];
    const int z = c->is_signed ? (int8_t)zp[p] : zp[p];
    const float want = (float)((double)(v - z) * (double)sc[p]);
    if (memcmp(&f[i], &want, sizeof want))
      fail_msg("DequantizeLinear n=%zu: element %zu = %.9g, want %.9g", n, i, (double)f[i],
               (double)want);
  }
  onyx_value_release(y);
  free(x);
  free(sc);
  free(zp);
  free(q);
}

static void test_per_tensor(void** state) {
  (void)state;
  static const size_t N[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 4096, 4097, 3 * 4096 + 13};
  for (size_t k = 0; k < sizeof N / sizeof N[0]; k++)
    for (int sgn = 0; sgn < 2; sgn++)
      for (int z = 0; z < 2; z++) {
        const SpanCase c = {1, N[k], 1, false, sgn == 1, z == 1, 1 + (int)(k & 1)};
        run_case(&c);
      }
}

static void test_per_axis(void** state) {
  (void)state;
  static const size_t S[][3] = {{1, 3, 1},  {2, 5, 7},  {1, 4, 16},
                                {3, 2, 17}, {2, 6, 49}, {1, 2, 5000}};
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++)
    for (int sgn = 0; sgn < 2; sgn++)
      for (int z = 0; z < 2; z++) {
        const SpanCase c = {S[k][0], S[k][1], S[k][2], true, sgn == 1, z == 1, 1 + (int)(k & 1)};
        run_case(&c);
      }
}

/* QLinearAdd (QLinearMul when mul): A [rows, len]; B by `bshape`: 0 [rows,
 * len], 1 [len], 2 [rows, 1], 3 a scalar. */
static void run_qadd(size_t rows, size_t len, int bshape, bool is_signed, int threads, bool mul) {
  const char* op = mul ? "QLinearMul" : "QLinearAdd";
  const size_t n = rows * len;
  const size_t nb = bshape == 0 ? n : bshape == 1 ? len : bshape == 2 ? rows : 1;
  uint8_t* a = malloc(n);
  uint8_t* b = malloc(nb);
  assert_non_null(a);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++)
    a[i] = (uint8_t)(next() & 255);
  for (size_t i = 0; i < nb; i++)
    b[i] = (uint8_t)(next() & 255);
  const uint8_t za = (uint8_t)(next() & 255), zb = (uint8_t)(next() & 255);
  const uint8_t zc = (uint8_t)(next() & 255);
  /* Power-of-two ratios make exact ties; 0.013 / 0.05 does not. */
  const float as = (len & 1) ? 0.013f : 0.25f, bs = 0.0625f, cs = (len & 1) ? 0.05f : 0.5f;
  const OnyxElemType qt = is_signed ? ONYX_ELEM_INT8 : ONYX_ELEM_UINT8;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.microsoft", 1);
  const int64_t ad[2] = {(int64_t)rows, (int64_t)len};
  otm_initializer(m, "A", qt, 2, ad, a);
  if (bshape == 0) otm_initializer(m, "B", qt, 2, ad, b);
  if (bshape == 1) otm_initializer(m, "B", qt, 1, (int64_t[]){(int64_t)len}, b);
  if (bshape == 2) otm_initializer(m, "B", qt, 2, (int64_t[]){(int64_t)rows, 1}, b);
  if (bshape == 3) otm_initializer(m, "B", qt, 0, NULL, b);
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
  otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 0, NULL, &bs);
  otm_initializer(m, "cs", ONYX_ELEM_FLOAT32, 0, NULL, &cs);
  otm_initializer(m, "za", qt, 0, NULL, &za);
  otm_initializer(m, "zb", qt, 0, NULL, &zb);
  otm_initializer(m, "zc", qt, 0, NULL, &zc);
  otm_node_domain(otm_node(m, op, "q", "A,as,za,B,bs,zb,cs,zc", "Y"), "com.microsoft");
  otm_output(m, "Y", qt, 2, ad);
  OnyxValue* y = run_model(m, threads);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const uint8_t* got = onyx_tensor_data(t);
  const float ra = (float)((double)as / (double)cs), rb = (float)((double)bs / (double)cs);
  const float rm = (float)((double)(float)((double)as * (double)bs) / (double)cs);
  for (size_t i = 0; i < n; i++) {
    const size_t r = i / len, col = i % len;
    const size_t bi = bshape == 0 ? i : bshape == 1 ? col : bshape == 2 ? r : 0;
    const int xa = is_signed ? (int8_t)a[i] : a[i], xb = is_signed ? (int8_t)b[bi] : b[bi];
    const int ia = is_signed ? (int8_t)za : za, ib = is_signed ? (int8_t)zb : zb;
    const float pa = (float)((double)(xa - ia) * (double)ra);
    const float pb = (float)((double)(xb - ib) * (double)rb);
    const double prod = (double)(xa - ia) * (double)(xb - ib); /* exact */
    double v = mul ? rint((double)(float)((double)(float)prod * (double)rm))
                   : rint((double)(float)((double)pa + (double)pb));
    v += is_signed ? (double)(int8_t)zc : (double)zc;
    const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    v = v < lo ? lo : v > hi ? hi : v;
    const int64_t g = is_signed ? (int64_t)(int8_t)got[i] : (int64_t)got[i];
    if (g != (int64_t)v)
      fail_msg("%s [%zu, %zu] B shape %d: element %zu = %lld, want %lld", op, rows, len, bshape, i,
               (long long)g, (long long)v);
  }
  onyx_value_release(y);
  free(a);
  free(b);
}

static void test_qlinear_add(void** state) {
  (void)state;
  static const size_t L[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 768};
  for (size_t k = 0; k < sizeof L / sizeof L[0]; k++)
    for (int bshape = 0; bshape < 4; bshape++)
      for (int sgn = 0; sgn < 2; sgn++)
        run_qadd(3, L[k], bshape, sgn == 1, 1 + (int)(k & 1), false);
}

static void test_qlinear_mul(void** state) {
  (void)state;
  static const size_t L[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 768};
  for (size_t k = 0; k < sizeof L / sizeof L[0]; k++)
    for (int bshape = 0; bshape < 4; bshape++)
      for (int sgn = 0; sgn < 2; sgn++)
        run_qadd(3, L[k], bshape, sgn == 1, 1 + (int)(k & 1), true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_per_tensor),
      cmocka_unit_test(test_per_axis),
      cmocka_unit_test(test_qlinear_add),
      cmocka_unit_test(test_qlinear_mul),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
