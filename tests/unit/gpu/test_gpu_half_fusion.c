/* test_gpu_half_fusion.c — the host's fusions on float16 and bfloat16 models
 * (host/optimizer/opt_fusion.c) where the GPU provider has the fused
 * kernels, run on GPU_NAME ("gpuemu": the shared kernels' bodies on the
 * host; cuda and rocm skip without a device).
 *
 * - MatMul + Add(bias) + Gelu (the erf pattern an exporter writes, its
 *   constants in the model's type) becomes com.onyx FusedMatMul + com.onyx
 *   Gelu on GPU_NAME, nothing of the pattern left;
 * - MatMul + Add(bias) + Relu with a 2-D x becomes Gemm, then one com.onyx
 *   FusedMatMul with activation Relu;
 * - the LayerNormalization pattern (ReduceMean, Sub, Pow, ReduceMean, Add,
 *   Sqrt, Div, Mul, Add) becomes one LayerNormalization on GPU_NAME;
 * - the same models on the CPU provider alone keep every node (the CPU
 *   provider has no float16 / bfloat16 fused kernels) and still run.
 *
 * Expected values are computed here in double precision from the inputs as
 * the format holds them, with this file's own rounding and encoding. The
 * fused kernels compute in float32 and round once: a result is within a
 * few units of the format's last place (eps: 2^-10 for float16, 2^-7 for
 * bfloat16) of the exact value, plus float32's unit roundoff 2^-24 times
 * the reduction length and magnitudes for sums. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ox_host_api.h"
#include "onyx/onyx.h"
#include "ox_providers.h"
#include "ox_session.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Skips the test where the provider sees no device. */
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
  int type;
  const char* name;
  int mant, ebits, emin, emax;
  double eps; /* 2^-mant */
} Fmt;

static const Fmt F16 = {ONYX_ELEM_FLOAT16, "float16", 10, 5, -14, 15, 0x1p-10};
static const Fmt BF16 = {ONYX_ELEM_BFLOAT16, "bfloat16", 7, 8, -126, 127, 0x1p-7};

/* x rounded to the format, to nearest even (finite values in range). */
static double ref_round(double x, const Fmt* f) {
  if (x == 0.0) return x;
  int e;
  frexp(fabs(x), &e);
  int lead = e - 1;
  if (lead < f->emin) lead = f->emin;
  const double ulp = ldexp(1.0, lead - f->mant);
  return nearbyint(x / ulp) * ulp;
}

/* The encoding of v, which the format holds exactly (finite). */
static uint16_t enc(double v, const Fmt* f) {
  const uint16_t sign = signbit(v) ? 0x8000u : 0;
  const unsigned bias = ((1u << f->ebits) - 1u) >> 1;
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

static double uniform(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return (double)(*s >> 8) / 8388608.0 - 1.0;
}

static void fill(const Fmt* f, uint32_t seed, double scale, size_t n, double* v, uint16_t* h) {
  for (size_t i = 0; i < n; i++) {
    v[i] = ref_round(scale * uniform(&seed), f);
    h[i] = enc(v[i], f);
  }
}

/* A one-element constant c of the format, as an initializer. */
static void scalar_init(OxTestModel* m, const char* name, const Fmt* f, double c) {
  const uint16_t h = enc(ref_round(c, f), f);
  otm_initializer(m, name, f->type, 0, NULL, &h);
}

/* --- sessions ------------------------------------------------------------------------------ */

/* A session over m (consumed) at the extended level: GPU_NAME first and the
 * CPU provider after, or the CPU provider alone. */
static OnyxSession* session(OxTestModel* m, bool gpu) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const char* cfg = gpu ? "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}"
                        : "{\"providers\": [{\"name\": \"cpu\"}]}";
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "half_fusion.json"));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_EXTENDED));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

/* Nodes of op `op`; with ep non-NULL, each must be on that provider. */
static size_t count_op(const OnyxSession* s, const char* op, const char* ep) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    if (strcmp(nd->op_type, op)) continue;
    n++;
    if (ep) {
      assert_true(nd->ep >= 0);
      if (strcmp(s->prog.eps[nd->ep].name, ep))
        fail_msg("%s '%s' is on %s, not %s", op, nd->name, s->prog.eps[nd->ep].name, ep);
    }
  }
  return n;
}

/* Runs s on one input of f and returns output "y" decoded (malloc'd). */
static double* run1(OnyxSession* s, const Fmt* f, const uint16_t* x, size_t rank,
                    const int64_t* dims, size_t want) {
  size_t count = 1;
  for (size_t d = 0; d < rank; d++)
    count *= (size_t)dims[d];
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor((OnyxElemType)f->type, dims, rank, x, count * 2, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  onyx_value_release(in);
  const OnyxTensor* t = onyx_value_tensor(out);
  assert_int_equal(onyx_tensor_elem_type(t), f->type);
  assert_int_equal(onyx_tensor_elem_count(t), want);
  double* y = malloc(want * sizeof *y);
  assert_non_null(y);
  for (size_t i = 0; i < want; i++)
    y[i] = dec(((const uint16_t*)onyx_tensor_data(t))[i], f);
  onyx_value_release(out);
  return y;
}

static void check_close(const char* what, const Fmt* f, size_t i, double got, double want,
                        double tol) {
  if (!(fabs(got - want) <= tol))
    fail_msg("%s (%s): element %zu is %.9g, the float64 reference %.9g (tolerance %.3g)", what,
             f->name, i, got, want, tol);
}

/* --- MatMul + Add + Gelu -------------------------------------------------------------------- */

enum { GB = 2, GS = 3, GK = 24, GN = 16 };

/* y = Gelu(x W + bias) with x [GB, GS, GK] (3-D: com.onyx FusedMatMul, not
 * Gemm), the Gelu written as 0.5 * p * (1 + erf(p / sqrt(2))). */
static OxTestModel* gelu_model(const Fmt* f, const uint16_t* hw, const uint16_t* hb) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 3, (int64_t[]){GB, GS, GK});
  otm_initializer(m, "w", f->type, 2, (int64_t[]){GK, GN}, hw);
  otm_initializer(m, "bias", f->type, 1, (int64_t[]){GN}, hb);
  scalar_init(m, "sqrt2", f, sqrt(2.0));
  scalar_init(m, "one", f, 1.0);
  scalar_init(m, "half", f, 0.5);
  otm_output(m, "y", f->type, 3, (int64_t[]){GB, GS, GN});
  otm_node(m, "MatMul", "mm", "x,w", "xw");
  otm_node(m, "Add", "add", "xw,bias", "p");
  otm_node(m, "Div", "div", "p,sqrt2", "ps");
  otm_node(m, "Erf", "erf", "ps", "e");
  otm_node(m, "Add", "add1", "e,one", "e1");
  otm_node(m, "Mul", "mul", "p,e1", "pe");
  otm_node(m, "Mul", "mulh", "pe,half", "y");
  return m;
}

static void gelu_case(const Fmt* f) {
  enum { M = GB * GS };
  double x[M * GK], w[GK * GN], b[GN];
  uint16_t hx[M * GK], hw[GK * GN], hb[GN];
  fill(f, 11, 2.0, M * GK, x, hx);
  fill(f, 12, 0.5, GK * GN, w, hw);
  fill(f, 13, 0.5, GN, b, hb);
  OnyxSession* s = session(gelu_model(f, hw, hb), true);
  assert_int_equal(count_op(s, "FusedMatMul", GPU_NAME), 1);
  assert_int_equal(count_op(s, "Gelu", GPU_NAME), 1);
  assert_int_equal(s->prog.graph->n_nodes, 2);
  const int64_t dims[3] = {GB, GS, GK};
  double* y = run1(s, f, hx, 3, dims, M * GN);
  for (int r = 0; r < M; r++)
    for (int j = 0; j < GN; j++) {
      double acc = b[j], mag = fabs(b[j]);
      for (int q = 0; q < GK; q++) {
        acc += x[r * GK + q] * w[q * GN + j];
        mag += fabs(x[r * GK + q] * w[q * GN + j]);
      }
      /* FusedMatMul rounds p once to f; Gelu (slope at most 1.13) rounds
       * again: an error of eps |p| in p moves y by at most 1.13 eps |p|. */
      const double ref = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
      const double tol = f->eps * (fabs(ref) + 1.2 * fabs(acc)) + (double)GK * 0x1p-24 * mag;
      check_close("FusedMatMul + Gelu", f, (size_t)(r * GN + j), y[r * GN + j], ref, tol);
    }
  free(y);
  onyx_session_release(s);

  /* The CPU provider alone: every node kept, and the model runs. */
  s = session(gelu_model(f, hw, hb), false);
  assert_int_equal(s->prog.graph->n_nodes, 7);
  assert_int_equal(count_op(s, "MatMul", "cpu"), 1);
  assert_int_equal(count_op(s, "Erf", "cpu"), 1);
  assert_int_equal(count_op(s, "FusedMatMul", NULL), 0);
  assert_int_equal(count_op(s, "Gelu", NULL), 0);
  y = run1(s, f, hx, 3, dims, M * GN);
  for (int r = 0; r < M; r++)
    for (int j = 0; j < GN; j++) {
      double acc = b[j], mag = fabs(b[j]);
      for (int q = 0; q < GK; q++) {
        acc += x[r * GK + q] * w[q * GN + j];
        mag += fabs(x[r * GK + q] * w[q * GN + j]);
      }
      /* Each of the seven nodes rounds to f: a few units more. */
      const double ref = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
      const double tol = 8.0 * f->eps * (fabs(ref) + fabs(acc)) + (double)GK * 0x1p-24 * mag;
      check_close("MatMul + Add + Gelu pattern (CPU)", f, (size_t)(r * GN + j), y[r * GN + j], ref,
                  tol);
    }
  free(y);
  onyx_session_release(s);
}

/* y = Relu(x W + bias) with x 2-D: matmul_add makes a Gemm, whose Relu
 * then joins it as com.onyx FusedMatMul with activation Relu. */
static void gemm_relu_case(const Fmt* f) {
  enum { R = 5, K = 20, N = 12 };
  double x[R * K], w[K * N], b[N];
  uint16_t hx[R * K], hw[K * N], hb[N];
  fill(f, 31, 1.0, R * K, x, hx);
  fill(f, 32, 0.5, K * N, w, hw);
  fill(f, 33, 0.5, N, b, hb);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){R, K});
  otm_initializer(m, "w", f->type, 2, (int64_t[]){K, N}, hw);
  otm_initializer(m, "bias", f->type, 1, (int64_t[]){N}, hb);
  otm_output(m, "y", f->type, 2, (int64_t[]){R, N});
  otm_node(m, "MatMul", "mm", "x,w", "xw");
  otm_node(m, "Add", "add", "xw,bias", "p");
  otm_node(m, "Relu", "relu", "p", "y");
  OnyxSession* s = session(m, true);
  assert_int_equal(count_op(s, "FusedMatMul", GPU_NAME), 1);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  assert_string_equal(ox_node_attr_string(s->prog.graph->nodes[0], "activation", ""), "Relu");
  const int64_t dims[2] = {R, K};
  double* y = run1(s, f, hx, 2, dims, R * N);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < N; j++) {
      double acc = b[j], mag = fabs(b[j]);
      for (int q = 0; q < K; q++) {
        acc += x[r * K + q] * w[q * N + j];
        mag += fabs(x[r * K + q] * w[q * N + j]);
      }
      /* one rounding of the result to f, float32 sums before it */
      const double ref = acc > 0 ? acc : 0;
      check_close("FusedMatMul (Relu)", f, (size_t)(r * N + j), y[r * N + j], ref,
                  f->eps * fabs(ref) + (double)K * 0x1p-24 * mag);
    }
  free(y);
  onyx_session_release(s);
}

/* --- LayerNormalization ------------------------------------------------------------------- */

enum { LR = 5, LC = 32 };

static OxTestModel* ln_model(const Fmt* f, const uint16_t* hg, const uint16_t* hb) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", f->type, 2, (int64_t[]){LR, LC});
  otm_initializer(m, "gamma", f->type, 1, (int64_t[]){LC}, hg);
  otm_initializer(m, "beta", f->type, 1, (int64_t[]){LC}, hb);
  scalar_init(m, "two", f, 2.0);
  scalar_init(m, "eps", f, 1e-5);
  otm_output(m, "y", f->type, 2, (int64_t[]){LR, LC});
  static const int64_t last[1] = {-1};
  otm_attr_ints(otm_node(m, "ReduceMean", "mean", "x", "mu"), "axes", 1, last);
  otm_node(m, "Sub", "sub", "x,mu", "d");
  otm_node(m, "Pow", "pow", "d,two", "d2");
  otm_attr_ints(otm_node(m, "ReduceMean", "var", "d2", "v"), "axes", 1, last);
  otm_node(m, "Add", "adde", "v,eps", "ve");
  otm_node(m, "Sqrt", "sqrt", "ve", "sd");
  otm_node(m, "Div", "div", "d,sd", "nrm");
  otm_node(m, "Mul", "mulg", "nrm,gamma", "sc");
  otm_node(m, "Add", "addb", "sc,beta", "y");
  return m;
}

/* The reference of row r: exact mean and variance of the stored x, the
 * epsilon as the model's constant holds it. */
static void ln_reference(const Fmt* f, const double* x, const double* g, const double* b, int r,
                         double* ref, double* norm) {
  double mean = 0, var = 0;
  for (int j = 0; j < LC; j++)
    mean += x[r * LC + j];
  mean /= LC;
  for (int j = 0; j < LC; j++)
    var += (x[r * LC + j] - mean) * (x[r * LC + j] - mean);
  var /= LC;
  const double inv = 1.0 / sqrt(var + ref_round(1e-5, f));
  for (int j = 0; j < LC; j++) {
    norm[j] = (x[r * LC + j] - mean) * inv * g[j];
    ref[j] = norm[j] + b[j];
  }
}

static void layernorm_case(const Fmt* f) {
  double x[LR * LC], g[LC], b[LC];
  uint16_t hx[LR * LC], hg[LC], hb[LC];
  fill(f, 21, 3.0, LR * LC, x, hx);
  fill(f, 22, 1.5, LC, g, hg);
  fill(f, 23, 1.0, LC, b, hb);
  const int64_t dims[2] = {LR, LC};
  for (int gpu = 1; gpu >= 0; gpu--) {
    OnyxSession* s = session(ln_model(f, hg, hb), gpu);
    if (gpu) {
      assert_int_equal(count_op(s, "LayerNormalization", GPU_NAME), 1);
      assert_int_equal(s->prog.graph->n_nodes, 1);
    } else {
      assert_int_equal(count_op(s, "LayerNormalization", NULL), 0);
      assert_int_equal(count_op(s, "ReduceMean", "cpu"), 2);
      assert_int_equal(s->prog.graph->n_nodes, 9);
    }
    double* y = run1(s, f, hx, 2, dims, LR * LC);
    for (int r = 0; r < LR; r++) {
      double ref[LC], norm[LC];
      ln_reference(f, x, g, b, r, ref, norm);
      for (int j = 0; j < LC; j++) {
        /* fused: float32 throughout, one rounding of the result; the
         * pattern rounds each of its nine results (the variance among
         * them), a few units of f more. */
        const double tol =
            gpu ? f->eps * fabs(ref[j]) + (double)LC * 0x1p-24 * (fabs(norm[j]) + fabs(b[j]) + 1)
                : 12.0 * f->eps * (fabs(norm[j]) + fabs(b[j]));
        check_close(gpu ? "LayerNormalization (fused)" : "LayerNormalization pattern (CPU)", f,
                    (size_t)(r * LC + j), y[r * LC + j], ref[j], tol);
      }
    }
    free(y);
    onyx_session_release(s);
  }
}

static void test_fusion_float16(void** state) {
  (void)state;
  gpu_required();
  gelu_case(&F16);
  gemm_relu_case(&F16);
  layernorm_case(&F16);
}

static void test_fusion_bfloat16(void** state) {
  (void)state;
  gpu_required();
  gelu_case(&BF16);
  gemm_relu_case(&BF16);
  layernorm_case(&BF16);
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
      cmocka_unit_test(test_fusion_float16),
      cmocka_unit_test(test_fusion_bfloat16),
  };
  return cmocka_run_group_tests_name("gpu_half_fusion_" GPU_NAME, tests, keep_mapped, NULL);
}
