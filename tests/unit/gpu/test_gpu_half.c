/* test_gpu_half.c — float16 and bfloat16 models on the shared GPU kernels,
 * run on the test-only provider "gpuemu" (the kernels' per-element bodies on
 * the host; its GEMM a naive loop accumulating the stored values' products).
 *
 * Every expected value is computed here, in double precision, from the
 * values the kernels are given (inputs already rounded to the format), with
 * this file's own rounding (ref_round: nearbyint on the scaled value, to
 * nearest even) and encoding (enc / dec: frexp and ldexp), independent of
 * the provider's bit manipulations. Tolerances come from the format's
 * epsilon (2^-10 for float16, 2^-7 for bfloat16: one unit in the last place
 * relative, twice the rounding of the result) and, for sums, the reduction
 * length times float32's unit roundoff 2^-24 (the kernels accumulate in
 * float) times the sum of the magnitudes.
 *
 * Covered: Cast float32 / float64 <-> float16 / bfloat16 at the edges
 * (zeros, subnormals, the largest finite value, overflow, infinities, NaN,
 * ties) and all 65536 encodings decoded; MatMul (batched, broadcast and
 * partly broadcast batches); Gemm (transA / transB, alpha, beta, C
 * broadcast); an element-wise chain with Where and Less; Softmax;
 * LayerNormalization; ReduceSum; a small float16 / bfloat16 model end to end
 * (MatMul, Add, Relu, LayerNormalization, Softmax) placed wholly on gpuemu, as the explain output
 * says; a float16 node the GPU providers have no kernel for (InstanceNormalization) on the CPU, the
 * reason in the explain output; Clip with float16 bounds on the GPU, and Pow
 * with a float16 base and a float32 exponent declined for its types; Conv
 * and GlobalMaxPool (on cuDNN for cuda, on the CPU for gpuemu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ox_host_api.h"
#include "onyx/onyx.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Skips the test where the provider sees no device (cuda and rocm on a
 * machine without a GPU; gpuemu always has one). */
static void gpu_required(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) fail_msg("loading %s: %s", GPU_NAME, st->message);
  size_t n = 0;
  ox_status_free(lib->provider->device_count(lib->provider, &n));
  ox_provider_lib_release(lib);
  if (!n) {
    fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device on this machine: the test needs a GPU\n");
    skip();
  }
}

/* --- the formats, by this file's own arithmetic ------------------------------------------- */

typedef struct Fmt {
  int type; /* ONYX_ELEM_FLOAT16 / ONYX_ELEM_BFLOAT16 */
  const char* name;
  int mant;       /* stored mantissa bits */
  int ebits;      /* exponent bits */
  int emin, emax; /* of the normal numbers */
  double eps;     /* 2^-mant: one unit in the last place, relative */
} Fmt;

static const Fmt F16 = {ONYX_ELEM_FLOAT16, "float16", 10, 5, -14, 15, 0x1p-10};
static const Fmt BF16 = {ONYX_ELEM_BFLOAT16, "bfloat16", 7, 8, -126, 127, 0x1p-7};

static double fmt_max(const Fmt* f) {
  return ldexp(2.0 - ldexp(1.0, -f->mant), f->emax);
}

/* x rounded to the format: to nearest, ties to even (nearbyint in the
 * default rounding mode), subnormals below 2^emin, overflow to infinity. */
static double ref_round(double x, const Fmt* f) {
  if (x != x || isinf(x) || x == 0.0) return x;
  int e;
  frexp(fabs(x), &e);
  int lead = e - 1;
  if (lead < f->emin) lead = f->emin;
  const double ulp = ldexp(1.0, lead - f->mant);
  const double r = nearbyint(x / ulp) * ulp;
  if (fabs(r) > fmt_max(f)) return x < 0 ? -INFINITY : INFINITY;
  return r == 0.0 ? copysign(0.0, x) : r;
}

/* The encoding of v, which the format holds exactly (NaN: the quiet one). */
static uint16_t enc(double v, const Fmt* f) {
  const uint16_t sign = signbit(v) ? 0x8000u : 0;
  const unsigned all = (1u << f->ebits) - 1u, bias = all >> 1;
  if (v != v) return (uint16_t)(0x7FFFu & ((all << f->mant) | (1u << (f->mant - 1))));
  if (isinf(v)) return (uint16_t)(sign | (all << f->mant));
  const double a = fabs(v);
  if (a == 0.0) return sign;
  int e;
  frexp(a, &e);
  const int lead = e - 1;
  if (lead < f->emin) return (uint16_t)(sign | (unsigned)(a / ldexp(1.0, f->emin - f->mant)));
  const unsigned m = (unsigned)((a / ldexp(1.0, lead) - 1.0) * (double)(1u << f->mant));
  return (uint16_t)(sign | ((unsigned)(lead + (int)bias) << f->mant) | m);
}

static double dec(uint16_t h, const Fmt* f) {
  const unsigned all = (1u << f->ebits) - 1u, bias = all >> 1;
  const unsigned e = (h >> f->mant) & all, m = h & ((1u << f->mant) - 1u);
  double v;
  if (e == all)
    v = m ? NAN : INFINITY;
  else if (!e)
    v = ldexp((double)m, f->emin - f->mant);
  else
    v = ldexp((double)(m + (1u << f->mant)), (int)e - (int)bias - f->mant);
  return (h & 0x8000u) ? -v : v;
}

/* Deterministic values in [-1, 1). */
static double uniform(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return (double)(*s >> 8) / 8388608.0 - 1.0;
}

/* n values in [-scale, scale) rounded to the format: as doubles and as the
 * format's encodings. */
static void fill(const Fmt* f, uint32_t seed, double scale, size_t n, double* v, uint16_t* h) {
  for (size_t i = 0; i < n; i++) {
    v[i] = ref_round(scale * uniform(&seed), f);
    h[i] = enc(v[i], f);
  }
}

/* --- sessions ------------------------------------------------------------------------------ */

/* A session over m (consumed), GPU_NAME first and the CPU provider after. */
static OnyxSession* session(OxTestModel* m, bool optimize) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  static const char cfg[] = "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}";
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "half.json"));
  if (!optimize) ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

typedef struct In {
  const char* name;
  int type;
  const void* data;
  size_t rank;
  int64_t dims[4];
} In;

static size_t type_bytes(int type) {
  return type == ONYX_ELEM_FLOAT64 ? 8 : type == ONYX_ELEM_FLOAT32 ? 4 : 2;
}

static size_t count_of(const int64_t* dims, size_t rank) {
  size_t n = 1;
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  return n;
}

/* Runs s and returns outputs out_names[0..n_out) (to release). */
static void run(OnyxSession* s, const In* in, size_t n_in, const char* const* out_names,
                size_t n_out, OnyxValue** out) {
  const char* names[4];
  OnyxValue* vals[4] = {NULL};
  assert_true(n_in <= 4);
  for (size_t i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    ok(onyx_value_create_tensor((OnyxElemType)in[i].type, in[i].dims, in[i].rank, in[i].data,
                                count_of(in[i].dims, in[i].rank) * type_bytes(in[i].type),
                                &vals[i]));
  }
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)vals, n_in, out_names, n_out, out));
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(vals[i]);
}

/* Output v decoded to doubles (malloc'd), checking its type and count. */
static double* decoded(OnyxValue* v, const Fmt* f, size_t want) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_int_equal(onyx_tensor_elem_type(t), f ? f->type : ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_elem_count(t), want);
  double* y = malloc((want ? want : 1) * sizeof *y);
  assert_non_null(y);
  for (size_t i = 0; i < want; i++)
    y[i] = f ? dec(((const uint16_t*)onyx_tensor_data(t))[i], f)
             : ((const float*)onyx_tensor_data(t))[i];
  return y;
}

/* Every node of the session on GPU_NAME, none declined by it. */
static void all_on_gpu(OnyxSession* s) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  size_t nodes = 0;
  char* end = strstr(text, "\nfused groups:"); /* the node lines come before it */
  if (end) *end = '\0';
  for (const char* p = strstr(text, " -> "); p; p = strstr(p + 4, " -> ")) {
    if (strncmp(p + 4, GPU_NAME, strlen(GPU_NAME)) != 0)
      fail_msg("a node is not on " GPU_NAME ":\n%s", text);
    nodes++;
  }
  if (!nodes || strstr(text, "declined by " GPU_NAME)) fail_msg("explain:\n%s", text);
  onyx_free(text);
}

static void check_close(const char* what, const Fmt* f, size_t i, double got, double want,
                        double tol) {
  if (!(fabs(got - want) <= tol))
    fail_msg("%s (%s): element %zu is %.9g, the float64 reference %.9g (tolerance %.3g)", what,
             f->name, i, got, want, tol);
}

/* --- Cast ------------------------------------------------------------------------------------ */

/* x (float32) -> Cast to f -> h -> Cast to float32 -> y: h holds the
 * reference rounding's encoding, y its value. */
static void cast_edges(const Fmt* f) {
  static float x[1200];
  size_t n = 0;
  const double edges[] = {0.0,
                          -0.0,
                          0x1p-24,           /* smallest float16 subnormal */
                          0x1p-25,           /* its half: a tie, to even 0 */
                          0x1.000002p-25,    /* past the tie: 2^-24 */
                          0x3p-25,           /* 1.5 * 2^-24: a tie, to even 2^-23 */
                          0x1p-14,           /* smallest float16 normal */
                          0x1p-14 - 0x1p-25, /* tie between 1023 * 2^-24 and 2^-14 */
                          65504.0,           /* float16's largest */
                          65519.0,           /* rounds to 65504 */
                          65520.0,           /* the midpoint to 2^16: inf */
                          -1e6,
                          1.0 + 0x1p-11,           /* float16 tie: to even 1 */
                          1.0 + 0x3p-11,           /* float16 tie: to even 1 + 2^-9 */
                          1.0 + 0x1p-11 + 0x1p-20, /* past the tie: 1 + 2^-10 */
                          1.0 + 0x1p-8,            /* bfloat16 tie: to even 1 */
                          1.0 + 0x3p-8,            /* bfloat16 tie: to even 1 + 2^-6 */
                          0.1,
                          -3.14159265,
                          FLT_MAX,               /* bfloat16: inf */
                          3.3895313892515355e38, /* bfloat16's largest */
                          0x1p-126,              /* float's smallest normal */
                          0x1p-133,              /* bfloat16's smallest subnormal */
                          0x1p-149,              /* float's smallest subnormal */
                          1e-40,
                          INFINITY,
                          -INFINITY};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
    x[n++] = (float)edges[i];
  x[n++] = NAN;
  uint32_t seed = 7;
  while (n < sizeof x / sizeof x[0]) { /* magnitudes from 2^-30 to 2^30 */
    const double u = uniform(&seed), e = 30.0 * uniform(&seed);
    x[n++] = (float)(u * exp2(e));
  }
  OxTestModel* m = otm_new(19);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){(int64_t)n});
  otm_output(m, "h", f->type, 1, (int64_t[]){(int64_t)n});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){(int64_t)n});
  otm_attr_int(otm_node(m, "Cast", "to_half", "x", "h"), "to", f->type);
  otm_attr_int(otm_node(m, "Cast", "to_float", "h", "y"), "to", ONYX_ELEM_FLOAT32);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in = {"x", ONYX_ELEM_FLOAT32, x, 1, {(int64_t)n}};
  const char* outs[2] = {"h", "y"};
  OnyxValue* out[2] = {NULL};
  run(s, &in, 1, outs, 2, out);
  const uint16_t* h = onyx_tensor_data(onyx_value_tensor(out[0]));
  const float* y = onyx_tensor_data(onyx_value_tensor(out[1]));
  for (size_t i = 0; i < n; i++) {
    const double want = ref_round(x[i], f);
    if (want != want) {
      if (!isnan(y[i]) || (h[i] & 0x7FFFu) <= (enc(INFINITY, f) & 0x7FFFu))
        fail_msg("%s: NaN became 0x%04x / %g", f->name, h[i], y[i]);
      continue;
    }
    if (h[i] != enc(want, f) || (double)y[i] != want || !signbit(y[i]) != !signbit(want))
      fail_msg("%s: %a became 0x%04x (%a); round to nearest even gives 0x%04x (%a)", f->name,
               (double)x[i], h[i], (double)y[i], enc(want, f), want);
  }
  onyx_value_release(out[0]);
  onyx_value_release(out[1]);
  onyx_session_release(s);
}

/* Every encoding of f -> Cast to float32: the value dec gives (exact). */
static void cast_all_encodings(const Fmt* f) {
  static uint16_t h[65536];
  for (size_t i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  OxTestModel* m = otm_new(19);
  otm_input(m, "h", f->type, 1, (int64_t[]){65536});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){65536});
  otm_attr_int(otm_node(m, "Cast", "widen", "h", "y"), "to", ONYX_ELEM_FLOAT32);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in = {"h", f->type, h, 1, {65536}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  const float* y = onyx_tensor_data(onyx_value_tensor(out));
  for (size_t i = 0; i < 65536; i++) {
    const double want = dec((uint16_t)i, f);
    if (want != want ? !isnan(y[i]) : ((double)y[i] != want || !signbit(y[i]) != !signbit(want)))
      fail_msg("%s 0x%04zx: %.9g, expected %.9g", f->name, i, y[i], want);
  }
  onyx_value_release(out);
  onyx_session_release(s);
}

/* float64 -> f rounds once: 1 + 2^-11 + 2^-40 is past float16's tie (a
 * float32 step first would make it the tie and round it down to 1). */
static void cast_from_double(const Fmt* f) {
  static double x[300];
  size_t n = 0;
  x[n++] = 1.0 + 0x1p-11 + 0x1p-40;
  x[n++] = -(1.0 + 0x1p-8 + 0x1p-40);
  x[n++] = 65520.0 - 0x1p-30;
  x[n++] = 1e300;
  x[n++] = 0x1p-25 + 0x1p-60;
  uint32_t seed = 99;
  while (n < sizeof x / sizeof x[0])
    x[n++] = uniform(&seed) * exp2(20.0 * uniform(&seed));
  OxTestModel* m = otm_new(19);
  otm_input(m, "x", ONYX_ELEM_FLOAT64, 1, (int64_t[]){(int64_t)n});
  otm_output(m, "h", f->type, 1, (int64_t[]){(int64_t)n});
  otm_attr_int(otm_node(m, "Cast", "narrow", "x", "h"), "to", f->type);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in = {"x", ONYX_ELEM_FLOAT64, x, 1, {(int64_t)n}};
  const char* outs[1] = {"h"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  const uint16_t* h = onyx_tensor_data(onyx_value_tensor(out));
  for (size_t i = 0; i < n; i++)
    if (h[i] != enc(ref_round(x[i], f), f))
      fail_msg("%s: %.17g became 0x%04x, expected 0x%04x", f->name, x[i], h[i],
               enc(ref_round(x[i], f), f));
  onyx_value_release(out);
  onyx_session_release(s);
}

static void test_cast_float16(void** state) {
  (void)state;
  gpu_required();
  cast_edges(&F16);
  cast_all_encodings(&F16);
  cast_from_double(&F16);
}

static void test_cast_bfloat16(void** state) {
  (void)state;
  gpu_required();
  cast_edges(&BF16);
  cast_all_encodings(&BF16);
  cast_from_double(&BF16);
}

/* --- MatMul and Gemm ----------------------------------------------------------------------- */

/* A [ba..., M, K] x B [bb..., K, N] on f against the float64 sum of the
 * stored values' products, batches broadcast numpy-style (rank 4 both). */
static void matmul_case(const Fmt* f, const int64_t* da, const int64_t* db) {
  const int64_t M = da[2], K = da[3], N = db[3];
  int64_t dy[4] = {da[0] > db[0] ? da[0] : db[0], da[1] > db[1] ? da[1] : db[1], M, N};
  const size_t na = count_of(da, 4), nb = count_of(db, 4), ny = count_of(dy, 4);
  double* a = malloc(na * sizeof *a);
  double* b = malloc(nb * sizeof *b);
  uint16_t* ha = malloc(na * sizeof *ha);
  uint16_t* hb = malloc(nb * sizeof *hb);
  assert_true(a && b && ha && hb);
  fill(f, 11, 2.0, na, a, ha);
  fill(f, 12, 2.0, nb, b, hb);
  OxTestModel* m = otm_new(17);
  otm_input(m, "a", f->type, 4, da);
  otm_input(m, "b", f->type, 4, db);
  otm_output(m, "y", f->type, 4, dy);
  otm_node(m, "MatMul", "mm", "a,b", "y");
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in[2] = {{"a", f->type, ha, 4, {da[0], da[1], da[2], da[3]}},
              {"b", f->type, hb, 4, {db[0], db[1], db[2], db[3]}}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, in, 2, outs, 1, &out);
  double* y = decoded(out, f, ny);
  for (int64_t p0 = 0; p0 < dy[0]; p0++)
    for (int64_t p1 = 0; p1 < dy[1]; p1++) {
      const int64_t ia = ((da[0] == 1 ? 0 : p0) * da[1] + (da[1] == 1 ? 0 : p1)) * M * K;
      const int64_t ib = ((db[0] == 1 ? 0 : p0) * db[1] + (db[1] == 1 ? 0 : p1)) * K * N;
      const int64_t iy = (p0 * dy[1] + p1) * M * N;
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double ref = 0, mag = 0;
          for (int64_t q = 0; q < K; q++) {
            ref += a[ia + i * K + q] * b[ib + q * N + j];
            mag += fabs(a[ia + i * K + q] * b[ib + q * N + j]);
          }
          const double tol = f->eps * fabs(ref) + (double)K * 0x1p-24 * mag + 0x1p-24;
          check_close("MatMul", f, (size_t)(iy + i * N + j), y[iy + i * N + j], ref, tol);
        }
    }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
  free(a), free(b), free(ha), free(hb);
}

static void matmul_all(const Fmt* f) {
  matmul_case(f, (int64_t[]){2, 3, 5, 37}, (int64_t[]){1, 1, 37, 6}); /* B broadcast */
  matmul_case(f, (int64_t[]){2, 3, 4, 9}, (int64_t[]){2, 3, 9, 7});   /* batched */
  matmul_case(f, (int64_t[]){2, 1, 3, 8}, (int64_t[]){1, 3, 8, 5});   /* partly broadcast */
}

static void test_matmul_float16(void** state) {
  (void)state;
  gpu_required();
  matmul_all(&F16);
}

static void test_matmul_bfloat16(void** state) {
  (void)state;
  gpu_required();
  matmul_all(&BF16);
}

/* Y = alpha A^T B^T + beta C, A [K, M], B [N, K], C [N] broadcast over rows. */
static void gemm_case(const Fmt* f) {
  enum { M = 6, K = 45, N = 7 };
  const float alpha = 0.5f, beta = 2.0f;
  double a[K * M], b[N * K], c[N];
  uint16_t ha[K * M], hb[N * K], hc[N];
  fill(f, 21, 1.5, K * M, a, ha);
  fill(f, 22, 1.5, N * K, b, hb);
  fill(f, 23, 3.0, N, c, hc);
  OxTestModel* m = otm_new(17);
  otm_input(m, "a", f->type, 2, (int64_t[]){K, M});
  otm_input(m, "b", f->type, 2, (int64_t[]){N, K});
  otm_input(m, "c", f->type, 1, (int64_t[]){N});
  otm_output(m, "y", f->type, 2, (int64_t[]){M, N});
  OxTestNode* g = otm_node(m, "Gemm", "gemm", "a,b,c", "y");
  otm_attr_int(g, "transA", 1);
  otm_attr_int(g, "transB", 1);
  otm_attr_float(g, "alpha", alpha);
  otm_attr_float(g, "beta", beta);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in[3] = {
      {"a", f->type, ha, 2, {K, M}}, {"b", f->type, hb, 2, {N, K}}, {"c", f->type, hc, 1, {N}}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, in, 3, outs, 1, &out);
  double* y = decoded(out, f, M * N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ab = 0, mag = 0;
      for (int q = 0; q < K; q++) {
        ab += a[q * M + i] * b[j * K + q];
        mag += fabs(a[q * M + i] * b[j * K + q]);
      }
      const double ref = alpha * ab + beta * c[j];
      const double tol =
          f->eps * fabs(ref) + (double)(K + 2) * 0x1p-24 * (alpha * mag + beta * fabs(c[j]));
      check_close("Gemm", f, (size_t)(i * N + j), y[i * N + j], ref, tol);
    }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void test_gemm_float16(void** state) {
  (void)state;
  gpu_required();
  gemm_case(&F16);
}

static void test_gemm_bfloat16(void** state) {
  (void)state;
  gpu_required();
  gemm_case(&BF16);
}

/* --- element-wise, Softmax, LayerNormalization, ReduceSum --------------------------------- */

/* t1 = x + b (b broadcast over rows), t2 = t1 * t1, t3 = Sigmoid(t2 - x),
 * y = Where(x < b, t3, x): each node's result rounded to f, as the kernels
 * store it. A value that float32 arithmetic puts on the other side of a
 * rounding boundary differs by one unit; the chain doubles it at most twice. */
static void chain_case(const Fmt* f) {
  enum { R = 5, C = 24 };
  double x[R * C], b[C];
  uint16_t hx[R * C], hb[C];
  fill(f, 31, 3.0, R * C, x, hx);
  fill(f, 32, 3.0, C, b, hb);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){R, C});
  otm_input(m, "b", f->type, 1, (int64_t[]){C});
  otm_output(m, "y", f->type, 2, (int64_t[]){R, C});
  otm_node(m, "Add", "add", "x,b", "t1");
  otm_node(m, "Mul", "mul", "t1,t1", "t2");
  otm_node(m, "Sub", "sub", "t2,x", "t2x");
  otm_node(m, "Sigmoid", "sig", "t2x", "t3");
  otm_node(m, "Less", "less", "x,b", "lt");
  otm_node(m, "Where", "where", "lt,t3,x", "y");
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in[2] = {{"x", f->type, hx, 2, {R, C}}, {"b", f->type, hb, 1, {C}}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, in, 2, outs, 1, &out);
  double* y = decoded(out, f, R * C);
  for (int i = 0; i < R * C; i++) {
    const double bi = b[i % C];
    const double t1 = ref_round(x[i] + bi, f), t2 = ref_round(t1 * t1, f);
    const double t2x = ref_round(t2 - x[i], f), t3 = ref_round(1.0 / (1.0 + exp(-t2x)), f);
    const double ref = x[i] < bi ? t3 : x[i];
    const double tol = x[i] < bi ? 8.0 * f->eps * (fabs(ref) + 0x1p-14) : 0.0;
    check_close("Add, Mul, Sub, Sigmoid, Less, Where", f, (size_t)i, y[i], ref, tol);
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void softmax_case(const Fmt* f) {
  enum { R = 4, L = 37 };
  double x[R * L];
  uint16_t hx[R * L];
  fill(f, 41, 6.0, R * L, x, hx);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){R, L});
  otm_output(m, "y", f->type, 2, (int64_t[]){R, L});
  otm_attr_int(otm_node(m, "Softmax", "sm", "x", "y"), "axis", -1);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in = {"x", f->type, hx, 2, {R, L}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  double* y = decoded(out, f, R * L);
  for (int r = 0; r < R; r++) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < L; j++)
      mx = fmax(mx, x[r * L + j]);
    for (int j = 0; j < L; j++)
      sum += exp(x[r * L + j] - mx);
    for (int j = 0; j < L; j++) {
      const double ref = exp(x[r * L + j] - mx) / sum;
      const double tol = f->eps * ref + (double)L * 0x1p-24 * ref + 0x1p-24;
      check_close("Softmax", f, (size_t)(r * L + j), y[r * L + j], ref, tol);
    }
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void layernorm_case(const Fmt* f) {
  enum { R = 6, C = 48 };
  double x[R * C], sc[C], bi[C];
  uint16_t hx[R * C], hs[C], hbi[C];
  fill(f, 51, 4.0, R * C, x, hx);
  fill(f, 52, 2.0, C, sc, hs);
  fill(f, 53, 1.0, C, bi, hbi);
  const float epsilon = 1e-5f;
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){R, C});
  otm_input(m, "s", f->type, 1, (int64_t[]){C});
  otm_input(m, "b", f->type, 1, (int64_t[]){C});
  otm_output(m, "y", f->type, 2, (int64_t[]){R, C});
  OxTestNode* n = otm_node(m, "LayerNormalization", "ln", "x,s,b", "y");
  otm_attr_int(n, "axis", -1);
  otm_attr_float(n, "epsilon", epsilon);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in[3] = {
      {"x", f->type, hx, 2, {R, C}}, {"s", f->type, hs, 1, {C}}, {"b", f->type, hbi, 1, {C}}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, in, 3, outs, 1, &out);
  double* y = decoded(out, f, R * C);
  for (int r = 0; r < R; r++) {
    double mean = 0, var = 0;
    for (int j = 0; j < C; j++)
      mean += x[r * C + j];
    mean /= C;
    for (int j = 0; j < C; j++)
      var += (x[r * C + j] - mean) * (x[r * C + j] - mean);
    var /= C;
    const double inv = 1.0 / sqrt(var + (double)epsilon);
    for (int j = 0; j < C; j++) {
      const double norm = (x[r * C + j] - mean) * inv * sc[j];
      const double ref = norm + bi[j];
      const double tol = f->eps * fabs(ref) + (double)C * 0x1p-24 * (fabs(norm) + fabs(bi[j]) + 1);
      check_close("LayerNormalization", f, (size_t)(r * C + j), y[r * C + j], ref, tol);
    }
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

/* ReduceSum over the middle axis of [3, 40, 5] (the strided layout). */
static void reduce_case(const Fmt* f) {
  enum { A = 3, B = 40, C = 5 };
  double x[A * B * C];
  uint16_t hx[A * B * C];
  fill(f, 61, 2.0, A * B * C, x, hx);
  static const int64_t axes[1] = {1};
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 3, (int64_t[]){A, B, C});
  otm_initializer(m, "axes", ONYX_ELEM_INT64, 1, (int64_t[]){1}, axes);
  otm_output(m, "y", f->type, 2, (int64_t[]){A, C});
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "x,axes", "y"), "keepdims", 0);
  OnyxSession* s = session(m, false);
  all_on_gpu(s);
  In in = {"x", f->type, hx, 3, {A, B, C}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  double* y = decoded(out, f, A * C);
  for (int i = 0; i < A; i++)
    for (int k = 0; k < C; k++) {
      double ref = 0, mag = 0;
      for (int j = 0; j < B; j++) {
        ref += x[(i * B + j) * C + k];
        mag += fabs(x[(i * B + j) * C + k]);
      }
      check_close("ReduceSum", f, (size_t)(i * C + k), y[i * C + k], ref,
                  f->eps * fabs(ref) + (double)B * 0x1p-24 * mag);
    }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void test_elementwise_float16(void** state) {
  (void)state;
  gpu_required();
  chain_case(&F16);
  softmax_case(&F16);
  layernorm_case(&F16);
  reduce_case(&F16);
}

static void test_elementwise_bfloat16(void** state) {
  (void)state;
  gpu_required();
  chain_case(&BF16);
  softmax_case(&BF16);
  layernorm_case(&BF16);
  reduce_case(&BF16);
}

/* --- a model end to end, and placement --------------------------------------------------- */

/* y = Softmax(LayerNorm(Relu(x W + bias))), every tensor of f, the weights
 * initializers: with the optimizer (MatMul, Add and Relu fused into one
 * FusedMatMul, which rounds once where the graph rounds twice) and without,
 * every node on GPU_NAME. The reference rounds each node's result to f;
 * float32 arithmetic may round a value the other way on the way, so the
 * tolerance allows a few units of f. */
static void model_case(const Fmt* f, bool optimize) {
  enum { R = 4, K = 32, N = 16 };
  double x[R * K], w[K * N], bias[N], sc[N], sh[N];
  uint16_t hx[R * K], hw[K * N], hbias[N], hsc[N], hsh[N];
  fill(f, 71, 1.0, R * K, x, hx);
  fill(f, 72, 0.5, K * N, w, hw);
  fill(f, 73, 0.5, N, bias, hbias);
  fill(f, 74, 1.5, N, sc, hsc);
  fill(f, 75, 0.5, N, sh, hsh);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){R, K});
  otm_initializer(m, "w", f->type, 2, (int64_t[]){K, N}, hw);
  otm_initializer(m, "bias", f->type, 1, (int64_t[]){N}, hbias);
  otm_initializer(m, "scale", f->type, 1, (int64_t[]){N}, hsc);
  otm_initializer(m, "shift", f->type, 1, (int64_t[]){N}, hsh);
  otm_output(m, "y", f->type, 2, (int64_t[]){R, N});
  otm_node(m, "MatMul", "mm", "x,w", "xw");
  otm_node(m, "Add", "add", "xw,bias", "pre");
  otm_node(m, "Relu", "relu", "pre", "act");
  otm_attr_int(otm_node(m, "LayerNormalization", "ln", "act,scale,shift", "norm"), "axis", -1);
  otm_attr_int(otm_node(m, "Softmax", "sm", "norm", "y"), "axis", -1);
  OnyxSession* s = session(m, optimize);
  all_on_gpu(s);
  In in = {"x", f->type, hx, 2, {R, K}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  double* y = decoded(out, f, R * N);
  for (int r = 0; r < R; r++) {
    double act[N], norm[N], mean = 0, var = 0;
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int q = 0; q < K; q++)
        acc += x[r * K + q] * w[q * N + j];
      const double pre = ref_round(ref_round(acc, f) + bias[j], f);
      act[j] = pre > 0 ? pre : 0;
      mean += act[j];
    }
    mean /= N;
    for (int j = 0; j < N; j++)
      var += (act[j] - mean) * (act[j] - mean);
    var /= N;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < N; j++) {
      norm[j] = ref_round((act[j] - mean) / sqrt(var + 1e-5) * sc[j] + sh[j], f);
      mx = fmax(mx, norm[j]);
    }
    for (int j = 0; j < N; j++)
      sum += exp(norm[j] - mx);
    for (int j = 0; j < N; j++) {
      const double ref = exp(norm[j] - mx) / sum;
      check_close(optimize ? "model (optimized)" : "model", f, (size_t)(r * N + j), y[r * N + j],
                  ref, 16.0 * f->eps * ref + 0x1p-20);
    }
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void test_model_float16(void** state) {
  (void)state;
  gpu_required();
  model_case(&F16, false);
  model_case(&F16, true);
}

static void test_model_bfloat16(void** state) {
  (void)state;
  gpu_required();
  model_case(&BF16, false);
  model_case(&BF16, true);
}

/* A float16 node the GPU providers have no kernel for (InstanceNormalization)
 * runs on the CPU provider and the explain output says why, while the
 * float16 Relu after it stays on the GPU. */
static void test_refused_node_explained(void** state) {
  (void)state;
  gpu_required();
  uint16_t sc[2] = {enc(2.0, &F16), enc(-1.0, &F16)}, bi[2] = {enc(0.5, &F16), enc(0.25, &F16)};
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT16, 3, (int64_t[]){1, 2, 4});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT16, 1, (int64_t[]){2}, sc);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT16, 1, (int64_t[]){2}, bi);
  otm_output(m, "y", ONYX_ELEM_FLOAT16, 3, (int64_t[]){1, 2, 4});
  otm_attr_float(otm_node(m, "InstanceNormalization", "norm", "x,s,b", "p"), "epsilon", 0.0f);
  otm_node(m, "Relu", "relu", "p", "y");
  OnyxSession* s = session(m, false);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  const char* at = strstr(text, "\n  norm ");
  const char* relu = strstr(text, "\n  relu ");
  if (!at || !relu || strncmp(strstr(at, " -> ") + 4, "cpu", 3) != 0 ||
      strncmp(strstr(relu, " -> ") + 4, GPU_NAME, strlen(GPU_NAME)) != 0 ||
      !strstr(at, "declined by " GPU_NAME ": no kernel for InstanceNormalization"))
    fail_msg("expected norm on cpu, declined by " GPU_NAME " with the reason, and relu on " GPU_NAME
             ":\n%s",
             text);
  onyx_free(text);
  /* Each channel's 4 values -1, 1, -1, 1 (mean 0, variance 1) normalize to
   * themselves: y = Relu(s * x + b), exact in float16. */
  static const double xv[8] = {-1, 1, -1, 1, 3, 5, 3, 5};
  uint16_t x[8];
  for (int i = 0; i < 8; i++)
    x[i] = enc(xv[i], &F16);
  In in = {"x", ONYX_ELEM_FLOAT16, x, 3, {1, 2, 4}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  double* y = decoded(out, &F16, 8);
  for (int i = 0; i < 8; i++) {
    const int c = i / 4;
    const double norm = c == 0 ? xv[i] : xv[i] - 4.0; /* channel 1: mean 4, variance 1 */
    const double ref = fmax(dec(sc[c], &F16) * norm + dec(bi[c], &F16), 0.0);
    check_close("InstanceNormalization, Relu", &F16, (size_t)i, y[i], ref, 0.0);
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

/* Conv (3x3, pads 1, a bias) then GlobalMaxPool, float16 and bfloat16: on
 * cuda both run on cuDNN (placement checked); gpuemu has no convolutions or
 * pools, so there they run on the CPU and only the values are checked. The
 * reference rounds the convolution's outputs to the format (the node
 * boundary) and takes their maximum per channel. */
static void conv_pool_case(const Fmt* f) {
  enum { C = 3, K = 4, S = 6 };
  double x[C * S * S], w[K * C * 9], b[K];
  uint16_t hx[C * S * S], hw[K * C * 9], hb[K];
  fill(f, 81, 1.0, C * S * S, x, hx);
  fill(f, 82, 0.5, K * C * 9, w, hw);
  fill(f, 83, 0.5, K, b, hb);
  OxTestModel* m = otm_new(22); /* Conv takes bfloat16 from opset 22 */
  otm_input(m, "x", f->type, 4, (int64_t[]){1, C, S, S});
  otm_initializer(m, "w", f->type, 4, (int64_t[]){K, C, 3, 3}, hw);
  otm_initializer(m, "b", f->type, 1, (int64_t[]){K}, hb);
  otm_output(m, "y", f->type, 4, (int64_t[]){1, K, 1, 1});
  OxTestNode* conv = otm_node(m, "Conv", "conv", "x,w,b", "c");
  otm_attr_ints(conv, "pads", 4, (int64_t[]){1, 1, 1, 1});
  otm_node(m, "GlobalMaxPool", "pool", "c", "y");
  OnyxSession* s = session(m, false);
  if (!strcmp(GPU_NAME, "cuda")) all_on_gpu(s);
  In in = {"x", f->type, hx, 4, {1, C, S, S}};
  const char* outs[1] = {"y"};
  OnyxValue* out = NULL;
  run(s, &in, 1, outs, 1, &out);
  double* y = decoded(out, f, K);
  for (int k = 0; k < K; k++) {
    double c[S * S], cmag = 0;
    for (int i = 0; i < S; i++)
      for (int j = 0; j < S; j++) {
        double acc = b[k], mag = fabs(b[k]);
        for (int ci = 0; ci < C; ci++)
          for (int u = 0; u < 3; u++)
            for (int v = 0; v < 3; v++) {
              const int r = i + u - 1, q = j + v - 1;
              if (r < 0 || r >= S || q < 0 || q >= S) continue;
              const double t = x[(ci * S + r) * S + q] * w[((k * C + ci) * 3 + u) * 3 + v];
              acc += t;
              mag += fabs(t);
            }
        c[i * S + j] = ref_round(acc, f);
        cmag = fmax(cmag, mag);
      }
    double ref = -INFINITY;
    for (int i = 0; i < S * S; i++)
      ref = fmax(ref, c[i]);
    /* One unit of the format in the convolution's outputs (float32
     * accumulation over 28 terms may round the other way). */
    const double tol = f->eps * fabs(ref) + 28.0 * 0x1p-24 * cmag;
    check_close("Conv, GlobalMaxPool", f, (size_t)k, y[k], ref, tol);
  }
  free(y);
  onyx_value_release(out);
  onyx_session_release(s);
}

static void test_conv_pool(void** state) {
  (void)state;
  gpu_required();
  conv_pool_case(&F16);
  conv_pool_case(&BF16);
}

/* Clip with float16 min / max inputs (read on the host) runs on the GPU,
 * exact; Pow with a float16 base and a float32 exponent is declined (the
 * kernels take one storage type) with that reason, and runs on the CPU. */
static void test_clip_and_mixed_pow(void** state) {
  (void)state;
  gpu_required();
  const uint16_t lo = enc(-1.0, &F16), hi = enc(1.5, &F16);
  static const float e[6] = {2.0f, 1.0f, 0.5f, 3.0f, 0.0f, 2.0f};
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT16, 1, (int64_t[]){6});
  otm_initializer(m, "lo", ONYX_ELEM_FLOAT16, 0, NULL, &lo);
  otm_initializer(m, "hi", ONYX_ELEM_FLOAT16, 0, NULL, &hi);
  otm_initializer(m, "e", ONYX_ELEM_FLOAT32, 1, (int64_t[]){6}, e);
  otm_output(m, "c", ONYX_ELEM_FLOAT16, 1, (int64_t[]){6});
  otm_output(m, "p", ONYX_ELEM_FLOAT16, 1, (int64_t[]){6});
  otm_node(m, "Clip", "clip", "x,lo,hi", "c");
  otm_node(m, "Pow", "pow", "x,e", "p");
  OnyxSession* s = session(m, false);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  const char* clip = strstr(text, "\n  clip ");
  const char* pow_ = strstr(text, "\n  pow ");
  if (!clip || !pow_ || strncmp(strstr(clip, " -> ") + 4, GPU_NAME, strlen(GPU_NAME)) != 0 ||
      strncmp(strstr(pow_, " -> ") + 4, "cpu", 3) != 0 ||
      !strstr(pow_, "declined by " GPU_NAME ": Pow with an exponent of another type than the base"))
    fail_msg("expected clip on " GPU_NAME ", pow on cpu declined for its types:\n%s", text);
  onyx_free(text);
  static const double xv[6] = {-2.5, -1.0, 0.25, 1.5, 3.0, -0.5};
  uint16_t x[6];
  for (int i = 0; i < 6; i++)
    x[i] = enc(xv[i], &F16);
  In in = {"x", ONYX_ELEM_FLOAT16, x, 1, {6}};
  const char* outs[2] = {"c", "p"};
  OnyxValue* out[2] = {NULL};
  run(s, &in, 1, outs, 2, out);
  double* c = decoded(out[0], &F16, 6);
  for (int i = 0; i < 6; i++)
    check_close("Clip", &F16, (size_t)i, c[i], fmin(fmax(xv[i], -1.0), 1.5), 0.0);
  free(c);
  onyx_value_release(out[0]);
  onyx_value_release(out[1]);
  onyx_session_release(s);
}

/* Keeps the provider mapped for the whole process (see test_gpu.c). */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cast_float16),
      cmocka_unit_test(test_cast_bfloat16),
      cmocka_unit_test(test_matmul_float16),
      cmocka_unit_test(test_matmul_bfloat16),
      cmocka_unit_test(test_gemm_float16),
      cmocka_unit_test(test_gemm_bfloat16),
      cmocka_unit_test(test_elementwise_float16),
      cmocka_unit_test(test_elementwise_bfloat16),
      cmocka_unit_test(test_model_float16),
      cmocka_unit_test(test_model_bfloat16),
      cmocka_unit_test(test_refused_node_explained),
      cmocka_unit_test(test_clip_and_mixed_pow),
      cmocka_unit_test(test_conv_pool),
  };
  return cmocka_run_group_tests_name("gpu_half_" GPU_NAME, tests, keep_mapped, NULL);
}
