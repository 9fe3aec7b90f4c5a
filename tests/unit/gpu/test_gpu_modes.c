/* test_gpu_modes.c — a GPU provider's precision mode and fused convolutions
 * (GPU_NAME: "cuda", "rocm" or the test-only "gpuemu"; one executable each,
 * like test_gpu.c).
 *
 * Without a device: the option use_tf32 takes 0 / 1 (true / false) and
 * rejects anything else with a message naming the option and the values it
 * takes; the unknown-option error lists it; the CUDA provider registers
 * com.onyx FusedConv (float32), the others do not (so the optimizer never
 * fuses a Conv they run).
 *
 * With a device (gpuemu has one, cuda and rocm skip here): use_tf32 is
 * logged; MatMul (and on cuda, Conv) is exact float32 by default and with
 * use_tf32 0, and within TF32's rounding with use_tf32 1, on inputs chosen
 * so that the float32 result is exact (1 + 2^-12 has 12 mantissa bits; TF32
 * keeps 10); on cuda, Conv + Relu / LeakyRelu / Clip become one FusedConv on
 * the GPU (plain, grouped and depthwise convolutions, with and without a
 * bias), a model's own FusedConv with a residual Z runs there too, and a
 * depthwise Conv is claimed, each against a direct convolution computed
 * here in double precision. */
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
#include "ox_ir.h"
#include "ox_options.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#if !defined(GPU_NAME) || !defined(GPU_LABEL) || !defined(GPU_COUNT_FN) || !defined(GPU_PCI)
#error "GPU_NAME, GPU_LABEL, GPU_COUNT_FN and GPU_PCI come from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void expect(OnyxStatus* st, OnyxStatusCode code, const char* frag1, const char* frag2) {
  if (!st) fail_msg("expected an error containing '%s'", frag1);
  if (st->code != code || !strstr(st->message, frag1) || (frag2 && !strstr(st->message, frag2)))
    fprintf(stderr, "message (code %d): %s\n", (int)st->code, st->message);
  assert_int_equal(st->code, code);
  assert_non_null(strstr(st->message, frag1));
  if (frag2) assert_non_null(strstr(st->message, frag2));
  ox_status_free(st);
}

static OxProviderLib* acquire(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) fail_msg("loading %s: %s", GPU_NAME, st->message);
  return lib;
}

static bool have_device(void) {
  OxProviderLib* lib = acquire();
  size_t n = 0;
  OnyxStatus* why = lib->provider->device_count(lib->provider, &n);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  return n > 0;
}

static void gpu_required(void) {
  if (!have_device()) {
    fprintf(stderr, "[  SKIP    ] no " GPU_LABEL " device on this machine: the device tests "
                    "did not run (they need a GPU)\n");
    skip();
  }
}

/* create_ep with the given key/value pairs (NULL-terminated) on device 0. */
static OnyxStatus* create_with(const char* key, ...) {
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  va_list ap;
  va_start(ap, key);
  for (const char* k = key; k; k = va_arg(ap, const char*)) {
    const char* v = va_arg(ap, const char*);
    ok(ox_options_set(&opts, k, v));
  }
  va_end(ap);
  OnyxEpCreateArgs args = {.struct_size = sizeof args, .device_index = 0, .options = &opts};
  OnyxEp* ep = NULL;
  OnyxStatus* st = lib->provider->create_ep(lib->provider, &args, &ep);
  if (!st) {
    assert_non_null(ep);
    ep->release(ep);
  } else {
    assert_null(ep);
  }
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
  return st;
}

/* --- use_tf32 without a device ---------------------------------------------------------- */

static void test_tf32_bad_values(void** state) {
  (void)state;
  static const char* const bad[] = {"2", "yes", "on", "-1", "TRUE", "1.0", " 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "option 'use_tf32' has value '%s'", bad[i]);
    expect(create_with("use_tf32", bad[i], NULL), ONYX_INVALID_CONFIG, want,
           "expected 0 (float32, the default) or 1 (TF32");
  }
}

static void test_unknown_option_lists_tf32(void** state) {
  (void)state;
  expect(create_with("use_tf23", "1", NULL), ONYX_INVALID_CONFIG,
         GPU_NAME ": unknown option 'use_tf23' (known: ", "use_tf32");
}

/* The values it takes pass validation: then the device check (no device) or
 * an EP (with one). */
static void test_tf32_valid_values(void** state) {
  (void)state;
  static const char* const good[] = {"0", "1", "true", "false"};
  bool dev = have_device();
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    OnyxStatus* st = create_with("use_tf32", good[i], "gpu_mem_limit", "1073741824", NULL);
    if (dev)
      ok(st);
    else
      expect(st, ONYX_NO_DEVICE, "no " GPU_LABEL " device", NULL);
  }
}

/* cuda registers com.onyx FusedConv for float32, so the optimizer may fuse a
 * Conv it runs with its activation; the others have no Conv at all. */
static void test_fused_conv_registry(void** state) {
  (void)state;
  OxProviderLib* lib = acquire();
  int found = 0;
  for (size_t i = 0; i < ox_kreg_count(lib->kernels); i++) {
    const OnyxKernelDef* d = &ox_kreg_at(lib->kernels, i)->def;
    if (strcmp(d->op_type, "FusedConv")) continue;
    found++;
    assert_string_equal(d->domain, "com.onyx");
    assert_int_equal(d->since_version, 1);
    assert_int_equal(d->type_constraint_count, 1);
    assert_int_equal(d->type_constraints[0].type_count, 1);
    assert_int_equal(d->type_constraints[0].types[0], ONYX_ELEM_FLOAT32);
  }
#ifdef GPU_IS_CUDA
  assert_int_equal(found, 1);
#else
  assert_int_equal(found, 0);
#endif
  ox_provider_lib_release(lib);
}

/* --- sessions ----------------------------------------------------------------------------------
 */

typedef struct LogCapture {
  char text[16384];
} LogCapture;

static void capture(void* user, OnyxLogSeverity sev, const char* msg) {
  LogCapture* c = user;
  size_t used = strlen(c->text);
  snprintf(c->text + used, sizeof c->text - used, "[%d] %s\n", (int)sev, msg);
}

/* A session over the model (consumed) with the provider's options (a JSON
 * object's members, "" for none) and the CPU provider after it, logging at
 * info into log. */
static OnyxSession* session(OxTestModel* m, const char* options, bool optimize, LogCapture* log) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  char cfg[512];
  snprintf(cfg, sizeof cfg,
           "{\"providers\": [{\"name\": \"" GPU_NAME "\", \"options\": {%s}}, {\"name\": "
           "\"cpu\"}], \"session\": {\"log_severity\": \"info\"}}",
           options);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "modes.json"));
  if (!optimize) ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  if (log) ok(onyx_session_options_set_log_callback(o, capture, log));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  if (st && log) fprintf(stderr, "%s", log->text);
  ok(st);
  return s;
}

/* Runs s on up to two float inputs ("x", then "z" when z_dims is given) and
 * returns output "y" (malloc'd) with its element count. */
static float* run(OnyxSession* s, const float* x, const int64_t* x_dims, size_t x_rank,
                  const float* z, const int64_t* z_dims, size_t z_rank, size_t* count) {
  const char* names[2] = {"x", "z"};
  OnyxValue* in[2] = {NULL, NULL};
  size_t n_in = z ? 2 : 1;
  const float* data[2] = {x, z};
  const int64_t* dims[2] = {x_dims, z_dims};
  size_t ranks[2] = {x_rank, z_rank};
  for (size_t i = 0; i < n_in; i++) {
    size_t n = 1;
    for (size_t d = 0; d < ranks[i]; d++)
      n *= (size_t)dims[i][d];
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims[i], ranks[i], data[i], n * sizeof(float),
                                &in[i]));
  }
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n_in, &out_name, 1, &out));
  const OnyxTensor* t = onyx_value_tensor(out);
  size_t n = onyx_tensor_elem_count(t);
  float* y = malloc(n * sizeof *y);
  assert_non_null(y);
  memcpy(y, onyx_tensor_data(t), n * sizeof *y);
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(in[i]);
  onyx_value_release(out);
  *count = n;
  return y;
}

/* The explain line of node `name` (into line), or fails. */
static void node_line(OnyxSession* s, const char* name, char* line, size_t cap) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  char key[128];
  snprintf(key, sizeof key, "\n  %s ", name);
  const char* at = strstr(text, key);
  if (!at) { /* a node a fusion made from `name` is named "<name>/opt<N>" */
    snprintf(key, sizeof key, "\n  %s/opt", name);
    at = strstr(text, key);
  }
  if (!at) fail_msg("no node '%s' (or '%s/opt<N>') in:\n%s", name, name, text);
  at += 3;
  snprintf(line, cap, "%.*s", (int)strcspn(at, "\n"), at);
  if (strstr(text, "declined by " GPU_NAME)) fprintf(stderr, "%s", text);
  assert_null(strstr(text, "declined by " GPU_NAME));
  onyx_free(text);
}

/* --- use_tf32 with a device --------------------------------------------------------------- */

static OxTestModel* matmul_model(const float* w) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){64, 256});
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 2, (int64_t[]){256, 64}, w);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){64, 64});
  otm_node(m, "MatMul", "mm", "x,w", "y");
  return m;
}

static void test_tf32_logged(void** state) {
  (void)state;
  gpu_required();
  LogCapture log = {{0}};
  static float w[256 * 64];
  OnyxSession* s = session(matmul_model(w), "\"use_tf32\": true", true, &log);
#ifdef GPU_IS_CUDA
  const char* want = "option 'use_tf32' is on: MatMul, Gemm and convolutions may use TF32";
#else
  const char* want = "option 'use_tf32' is accepted and has no effect";
#endif
  if (!strstr(log.text, want)) fail_msg("log lacks '%s':\n%s", want, log.text);
  onyx_session_release(s);
}

/* x = 1 + 2^-12 everywhere ([64, 256]), w = 1: every product sums 256 values
 * of 1 + 2^-12, exactly 256 + 2^-4 in float32 in any order (each partial sum
 * is a multiple of 2^-12 below 512, where float32's step is 2^-15). TF32
 * rounds x to 1 (10 mantissa bits): 256. */
static void test_matmul_float32_unless_tf32(void** state) {
  (void)state;
  gpu_required();
  static float x[64 * 256], w[256 * 64];
  const float v = 1.0f + ldexpf(1.0f, -12);
  for (size_t i = 0; i < 64 * 256; i++)
    x[i] = v, w[i] = 1.0f;
  const double exact = 256.0 + ldexp(1.0, -4);
  static const char* const modes[] = {"", "\"use_tf32\": 0", "\"use_tf32\": 1"};
  for (size_t mode = 0; mode < 3; mode++) {
    OnyxSession* s = session(matmul_model(w), modes[mode], true, NULL);
    char line[256];
    node_line(s, "mm", line, sizeof line);
    if (!strstr(line, "-> " GPU_NAME)) fail_msg("MatMul not on " GPU_NAME ": %s", line);
    size_t n = 0;
    float* y = run(s, x, (int64_t[]){64, 256}, 2, NULL, NULL, 0, &n);
    assert_int_equal(n, 64 * 64);
    size_t rounded = 0;
    for (size_t i = 0; i < n; i++) {
      if (mode < 2 && y[i] != exact)
        fail_msg("%s: y[%zu] = %.9g, float32 gives exactly %.9g", modes[mode], i, y[i], exact);
      /* TF32 may round each x down to 1: between 256 and the exact value. */
      if (y[i] < 256.0 - 1e-3 || y[i] > exact + 1e-3)
        fail_msg("%s: y[%zu] = %.9g outside [256, %.9g]", modes[mode], i, y[i], exact);
      rounded += y[i] != exact;
    }
    if (mode == 2)
      fprintf(stderr, "use_tf32 1: %zu of %zu MatMul outputs show TF32 rounding (%s)\n", rounded, n,
              rounded ? "tensor cores used" : "float32 kernel chosen");
    free(y);
    onyx_session_release(s);
  }
}

/* --- copies through the staging buffer ------------------------------------------------------ */

/* A pattern of pair i, round r: distinct per pair, round and element. */
static uint32_t pattern(size_t i, size_t r, size_t k) {
  return (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u) ^ (uint32_t)(k * 2246822519u);
}

/* copy_tensors between pageable host memory and the device: several pairs
 * per call (staged ones packed into the page-locked buffer, one of 20 MiB
 * left to the runtime), sources overwritten as soon as a host -> device call
 * returns, calls queued back to back without waiting (each must wait for
 * the previous use of the buffer), the buffer grown past its first size,
 * then everything copied back to pageable memory and compared. */
static void test_staged_copies(void** state) {
  (void)state;
  gpu_required();
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  OnyxEpCreateArgs args = {.struct_size = sizeof args, .device_index = 0, .options = &opts};
  OnyxEp* ep = NULL;
  ok(lib->provider->create_ep(lib->provider, &args, &ep));
  const OnyxAllocator* dev = ep->get_allocator(ep, ONYX_MEM_DEFAULT);
  OnyxStream* s = NULL;
  ok(ep->create_stream(ep, &s));
  enum { PAIRS = 5, ROUNDS = 12 };
  /* Element counts (uint32): 100 bytes, 1 KiB, 3 MiB (past the first 1 MiB
   * buffer), 20 MiB (above the 16 MiB staged per copy), 64 KiB. */
  const size_t count[PAIRS] = {25, 256, 3 << 18, 5 << 20, 1 << 14};
  uint32_t* host[PAIRS];
  void* devp[ROUNDS][PAIRS];
  OxTensor* th[PAIRS];
  OxTensor* td[ROUNDS][PAIRS];
  for (size_t i = 0; i < PAIRS; i++) {
    host[i] = malloc(count[i] * sizeof(uint32_t));
    assert_non_null(host[i]);
    int64_t d = (int64_t)count[i];
    ok(ox_tensor_wrap(ONYX_ELEM_UINT32, &d, 1, host[i], &OX_HOST_MEMORY, &th[i]));
    for (size_t r = 0; r < ROUNDS; r++) {
      devp[r][i] = dev->alloc(dev->ctx, count[i] * sizeof(uint32_t), 256);
      assert_non_null(devp[r][i]);
      ok(ox_tensor_wrap(ONYX_ELEM_UINT32, &d, 1, devp[r][i], &dev->device, &td[r][i]));
    }
  }
  /* Host -> device, one call per round, no wait in between. */
  for (size_t r = 0; r < ROUNDS; r++) {
    for (size_t i = 0; i < PAIRS; i++)
      for (size_t k = 0; k < count[i]; k++)
        host[i][k] = pattern(i, r, k);
    const OnyxTensor* from[PAIRS];
    OnyxTensor* to[PAIRS];
    for (size_t i = 0; i < PAIRS; i++)
      from[i] = th[i], to[i] = td[r][i];
    ok(ep->copy_tensors(ep, from, to, PAIRS, s));
    for (size_t i = 0; i < PAIRS; i++) /* reused at once */
      memset(host[i], 0xA5, count[i] * sizeof(uint32_t));
  }
  /* Device -> device then device -> host in one call (the staged and the
   * direct ones), round by round. */
  for (size_t r = 0; r < ROUNDS; r++) {
    const OnyxTensor* from[PAIRS];
    OnyxTensor* to[PAIRS];
    for (size_t i = 0; i < PAIRS; i++)
      from[i] = td[r][i], to[i] = th[i];
    ok(ep->copy_tensors(ep, from, to, PAIRS, s));
    for (size_t i = 0; i < PAIRS; i++)
      for (size_t k = 0; k < count[i]; k++)
        if (host[i][k] != pattern(i, r, k))
          fail_msg("round %zu pair %zu element %zu: %08x, copied %08x", r, i, k, host[i][k],
                   pattern(i, r, k));
  }
  /* A mixed call: host -> device, device -> device, device -> host, with the
   * staged pairs of both directions in the buffer at once. */
  for (size_t k = 0; k < count[1]; k++)
    host[1][k] = pattern(1, 99, k);
  const OnyxTensor* from[3] = {th[1], td[0][1], td[1][1]};
  OnyxTensor* to[3] = {td[0][1], td[1][1], th[1]};
  ok(ep->copy_tensors(ep, from, to, 3, s));
  ok(ep->sync_stream(ep, s));
  for (size_t k = 0; k < count[1]; k++)
    assert_int_equal(host[1][k], pattern(1, 99, k));
  for (size_t i = 0; i < PAIRS; i++) {
    ox_tensor_free(th[i]);
    free(host[i]);
    for (size_t r = 0; r < ROUNDS; r++) {
      ox_tensor_free(td[r][i]);
      dev->free(dev->ctx, devp[r][i]);
    }
  }
  ep->release_stream(ep, s);
  ep->release(ep);
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
}

/* --- convolutions (cuda) -----------------------------------------------------------------------
 */

#ifdef GPU_IS_CUDA
typedef struct ConvCase {
  const char* act; /* NULL: a plain Conv */
  float alpha, lo, hi;
  bool bias, z;
  int64_t n, c, h, w, m, group, stride, dil;
} ConvCase;

static size_t elems(const int64_t* d, size_t r) {
  size_t n = 1;
  for (size_t i = 0; i < r; i++)
    n *= (size_t)d[i];
  return n;
}

/* Fills with small values that vary and repeat rarely. */
static void fill(float* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((int)((i * 37 + (size_t)seed * 11) % 23) - 11) / 8.0f;
}

/* Direct convolution, pads 1, 3 x 3 kernel, in double, then bias, z and the
 * activation; mag[i]: the sum of the magnitudes of y[i]'s terms (the scale
 * of float32 rounding in any algorithm cuDNN picks: GEMM, FFT, Winograd). */
static void conv_ref(const ConvCase* cc, const float* x, const float* w, const float* b,
                     const float* z, const int64_t* yd, double* y, double* mag) {
  const int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
  for (int64_t n = 0; n < yd[0]; n++)
    for (int64_t o = 0; o < yd[1]; o++)
      for (int64_t i = 0; i < yd[2]; i++)
        for (int64_t j = 0; j < yd[3]; j++) {
          double acc = b ? b[o] : 0.0, m = fabs(acc);
          const int64_t g = o / mg;
          for (int64_t c = 0; c < cg; c++)
            for (int64_t kh = 0; kh < 3; kh++)
              for (int64_t kw = 0; kw < 3; kw++) {
                int64_t hi = i * cc->stride - 1 + kh * cc->dil;
                int64_t wi = j * cc->stride - 1 + kw * cc->dil;
                if (hi < 0 || hi >= cc->h || wi < 0 || wi >= cc->w) continue;
                double t = (double)x[((n * cc->c + g * cg + c) * cc->h + hi) * cc->w + wi] *
                           w[((o * cg + c) * 3 + kh) * 3 + kw];
                acc += t;
                m += fabs(t);
              }
          size_t at = (size_t)(((n * yd[1] + o) * yd[2] + i) * yd[3] + j);
          if (z) acc += z[at], m += fabs(z[at]);
          mag[at] = m;
          if (cc->act && !strcmp(cc->act, "Relu")) acc = acc < 0 ? 0 : acc;
          if (cc->act && !strcmp(cc->act, "LeakyRelu")) acc = acc < 0 ? acc * cc->alpha : acc;
          if (cc->act && !strcmp(cc->act, "Clip"))
            acc = acc < cc->lo ? cc->lo : acc > cc->hi ? cc->hi : acc;
          y[at] = acc;
        }
}

/* Conv (+ act) through the optimizer, or the model's own FusedConv with Z
 * (cc->z, optimizer off), on [cuda, cpu]: the conv node runs on cuda as
 * FusedConv (or Conv without act) and matches conv_ref. */
static void run_conv_case(const ConvCase* cc) {
  const int64_t xd[4] = {cc->n, cc->c, cc->h, cc->w};
  const int64_t wd[4] = {cc->m, cc->c / cc->group, 3, 3};
  const int64_t span = 2 * cc->dil + 1;
  const int64_t yd[4] = {cc->n, cc->m, (cc->h + 2 - span) / cc->stride + 1,
                         (cc->w + 2 - span) / cc->stride + 1};
  float* x = malloc(elems(xd, 4) * sizeof *x);
  float* w = malloc(elems(wd, 4) * sizeof *w);
  float* b = malloc((size_t)cc->m * sizeof *b);
  float* z = malloc(elems(yd, 4) * sizeof *z);
  double* want = malloc(elems(yd, 4) * sizeof *want);
  double* mag = malloc(elems(yd, 4) * sizeof *mag);
  assert_true(x && w && b && z && want && mag);
  fill(x, elems(xd, 4), 1);
  fill(w, elems(wd, 4), 2);
  fill(b, (size_t)cc->m, 3);
  fill(z, elems(yd, 4), 4);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, xd);
  if (cc->z) otm_input(m, "z", ONYX_ELEM_FLOAT32, 4, yd);
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, wd, w);
  if (cc->bias) otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cc->m}, b);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, yd);
  const char* conv_out = cc->act && !cc->z ? "c" : "y";
  OxTestNode* conv;
  if (cc->z) {
    otm_add_opset(m, "com.onyx", 1);
    conv = otm_node(m, "FusedConv", "conv", cc->bias ? "x,w,b,z" : "x,w,,z", "y");
    otm_node_domain(conv, "com.onyx");
    otm_attr_string(conv, "activation", cc->act);
    if (!strcmp(cc->act, "LeakyRelu")) otm_attr_float(conv, "alpha", cc->alpha);
  } else {
    conv = otm_node(m, "Conv", "conv", cc->bias ? "x,w,b" : "x,w", conv_out);
  }
  otm_attr_ints(conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_attr_ints(conv, "strides", 2, (const int64_t[]){cc->stride, cc->stride});
  otm_attr_ints(conv, "dilations", 2, (const int64_t[]){cc->dil, cc->dil});
  otm_attr_int(conv, "group", cc->group);
  if (cc->act && !cc->z) {
    if (!strcmp(cc->act, "Clip")) {
      otm_initializer(m, "lo", ONYX_ELEM_FLOAT32, 0, NULL, &cc->lo);
      otm_initializer(m, "hi", ONYX_ELEM_FLOAT32, 0, NULL, &cc->hi);
      otm_node(m, "Clip", "act", "c,lo,hi", "y");
    } else {
      OxTestNode* a = otm_node(m, cc->act, "act", "c", "y");
      if (!strcmp(cc->act, "LeakyRelu")) otm_attr_float(a, "alpha", cc->alpha);
    }
  }
  LogCapture log = {{0}};
  OnyxSession* s = session(m, "", !cc->z, &log);
  char line[256];
  node_line(s, "conv", line, sizeof line);
  const char* want_op = cc->act ? "FusedConv" : "Conv";
  if (!strstr(line, want_op) || !strstr(line, "-> " GPU_NAME))
    fail_msg("%s (group %lld): not a %s on " GPU_NAME ": %s\n%s", cc->act ? cc->act : "Conv",
             (long long)cc->group, want_op, line, log.text);
  size_t n = 0;
  float* y = run(s, x, xd, 4, cc->z ? z : NULL, yd, 4, &n);
  assert_int_equal(n, elems(yd, 4));
  conv_ref(cc, x, w, cc->bias ? b : NULL, cc->z ? z : NULL, yd, want, mag);
  /* A wrong bias, Z or activation is off by 1/64 or more (the inputs are
   * multiples of 1/8); rounding stays far below 1e-4 of the terms' sum. */
  for (size_t i = 0; i < n; i++)
    if (fabs(y[i] - want[i]) > 1e-4 * mag[i] + 1e-6)
      fail_msg("%s (group %lld, bias %d, z %d): y[%zu] = %.7g, expected %.7g",
               cc->act ? cc->act : "Conv", (long long)cc->group, cc->bias, cc->z, i, y[i], want[i]);
  free(y);
  onyx_session_release(s);
  free(x);
  free(w);
  free(b);
  free(z);
  free(want);
  free(mag);
}

/* Conv + activation becomes FusedConv on the GPU: Relu with a bias (one
 * cuDNN call), Relu without one and the other activations (convolution, then
 * one element-wise pass); plain, grouped and depthwise (group == channels). */
static void test_fused_conv_activations(void** state) {
  (void)state;
  gpu_required();
  const ConvCase cases[] = {
      {.act = "Relu",
       .bias = true,
       .n = 2,
       .c = 4,
       .h = 7,
       .w = 6,
       .m = 6,
       .group = 1,
       .stride = 1,
       .dil = 1},
      {.act = "Relu",
       .bias = false,
       .n = 1,
       .c = 4,
       .h = 9,
       .w = 8,
       .m = 4,
       .group = 4,
       .stride = 1,
       .dil = 1},
      {.act = "LeakyRelu",
       .alpha = 0.1f,
       .bias = true,
       .n = 2,
       .c = 6,
       .h = 8,
       .w = 8,
       .m = 6,
       .group = 6,
       .stride = 2,
       .dil = 1},
      {.act = "Clip",
       .lo = -0.5f,
       .hi = 0.75f,
       .bias = true,
       .n = 1,
       .c = 4,
       .h = 9,
       .w = 7,
       .m = 8,
       .group = 2,
       .stride = 1,
       .dil = 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_conv_case(&cases[i]);
}

/* A model's own com.onyx FusedConv with a residual Z (the optimizer writes
 * Z only for the CPU provider): Relu with a bias in one cuDNN call with
 * alpha2 = 1, LeakyRelu as separate passes. */
static void test_fused_conv_with_z(void** state) {
  (void)state;
  gpu_required();
  const ConvCase cases[] = {
      {.act = "Relu",
       .bias = true,
       .z = true,
       .n = 2,
       .c = 4,
       .h = 6,
       .w = 6,
       .m = 4,
       .group = 1,
       .stride = 1,
       .dil = 1},
      {.act = "LeakyRelu",
       .alpha = 0.2f,
       .bias = false,
       .z = true,
       .n = 1,
       .c = 4,
       .h = 5,
       .w = 7,
       .m = 4,
       .group = 4,
       .stride = 1,
       .dil = 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_conv_case(&cases[i]);
}

/* A depthwise Conv (group == channels, one filter each) is claimed by cuda
 * (cuDNN's group count), not declined. */
static void test_depthwise_conv_claimed(void** state) {
  (void)state;
  gpu_required();
  const ConvCase c = {
      .bias = true, .n = 1, .c = 8, .h = 10, .w = 10, .m = 8, .group = 8, .stride = 1, .dil = 1};
  run_conv_case(&c);
}

/* Conv with x = 1 + 2^-12 ([1, 64, 8, 8]), w = 1 ([16, 64, 3, 3]), pads 1,
 * IMPLICIT_PRECOMP_GEMM: each output is taps x 64 x (1 + 2^-12), exact in
 * float32 (multiples of 2^-12 below 1024); TF32 rounds x to 1. */
static void test_conv_float32_unless_tf32(void** state) {
  (void)state;
  gpu_required();
  static float x[64 * 8 * 8], w[16 * 64 * 9];
  const float v = 1.0f + ldexpf(1.0f, -12);
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
    x[i] = v;
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    w[i] = 1.0f;
  static const char* const modes[] = {
      "\"cudnn_conv_algo_search\": \"DEFAULT\"",
      "\"cudnn_conv_algo_search\": \"DEFAULT\", \"use_tf32\": \"0\"",
      "\"cudnn_conv_algo_search\": \"DEFAULT\", \"use_tf32\": \"1\"", "\"use_tf32\": \"1\""};
  for (size_t mode = 0; mode < 4; mode++) {
    OxTestModel* m = otm_new(17);
    otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 64, 8, 8});
    otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, (int64_t[]){16, 64, 3, 3}, w);
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 16, 8, 8});
    OxTestNode* c = otm_node(m, "Conv", "conv", "x,w", "y");
    otm_attr_ints(c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    OnyxSession* s = session(m, modes[mode], true, NULL);
    size_t n = 0;
    float* y = run(s, x, (int64_t[]){1, 64, 8, 8}, 4, NULL, NULL, 0, &n);
    assert_int_equal(n, 16 * 64);
    size_t rounded = 0;
    for (size_t i = 0; i < n; i++) {
      int64_t r = (int64_t)(i / 8 % 8), col = (int64_t)(i % 8);
      int64_t taps = (3 - (r == 0) - (r == 7)) * (3 - (col == 0) - (col == 7));
      double exact = (double)taps * 64 * (1.0 + ldexp(1.0, -12));
      double lo = (double)taps * 64;
      if (mode < 2 && y[i] != exact)
        fail_msg("%s: y[%zu] = %.9g, float32 gives exactly %.9g", modes[mode], i, y[i], exact);
      /* TF32 (and with EXHAUSTIVE search, Winograd or FFT) rounding. */
      if (y[i] < lo * (1 - 1e-4) || y[i] > exact * (1 + 1e-4))
        fail_msg("%s: y[%zu] = %.9g outside [%.9g, %.9g]", modes[mode], i, y[i], lo, exact);
      rounded += y[i] != exact;
    }
    if (mode >= 2)
      fprintf(stderr, "%s: %zu of %zu Conv outputs differ from float32's exact value\n",
              modes[mode], rounded, n);
    free(y);
    onyx_session_release(s);
  }
}
#endif

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
      cmocka_unit_test(test_tf32_bad_values),
      cmocka_unit_test(test_unknown_option_lists_tf32),
      cmocka_unit_test(test_tf32_valid_values),
      cmocka_unit_test(test_fused_conv_registry),
      cmocka_unit_test(test_tf32_logged),
      cmocka_unit_test(test_matmul_float32_unless_tf32),
      cmocka_unit_test(test_staged_copies),
#ifdef GPU_IS_CUDA
      cmocka_unit_test(test_fused_conv_activations),
      cmocka_unit_test(test_fused_conv_with_z),
      cmocka_unit_test(test_depthwise_conv_claimed),
      cmocka_unit_test(test_conv_float32_unless_tf32),
#endif
  };
  return cmocka_run_group_tests_name("gpu_modes_" GPU_NAME, tests, keep_mapped, NULL);
}
