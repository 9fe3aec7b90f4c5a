/* test_gpu_attention.c — the fused attention of a GPU provider (GPU_NAME;
 * for "gpuemu" the kernel's phases run on the host emulation): com.onyx
 * MultiHeadAttention over a table of shapes (query lengths 1, 7, 65, 130;
 * head sizes 8, 64, 80 and 160, the last above the tiled kernel's limit;
 * batch 1 and 2; causal masks as constants, padding masks, packed Q|K|V),
 * each against the CPU provider's result and against an attention computed
 * here in double (both within 1e-5 relative); and a GPT-style block whose
 * unfused attention the optimizer fuses onto GPU_NAME after placement; and
 * ONNX Attention (opset 23) on the same kernel, against the CPU provider and
 * its definition in double.
 * Without a device the tests skip. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_host_api.h"
#include "ox_ir.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void gpu_required(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st->message);
    ox_status_free(st);
    fail_msg("loading %s: %s", GPU_NAME, msg);
  }
  size_t n = 0;
  OnyxStatus* why = lib->provider->device_count(lib->provider, &n);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  if (!n) {
    fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device: the attention tests need one\n");
    skip();
  }
}

/* A 64-bit LCG: uniform doubles in [0, 1). */
static double uni(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

static float* rand_floats(size_t n, uint64_t* s, double lo, double hi) {
  float* v = malloc((n ? n : 1) * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(lo + (hi - lo) * uni(s));
  return v;
}

/* Creates a session over the model with GPU_NAME then cpu (gpu) or cpu
 * alone; with the GPU, fails unless GPU_NAME takes `gpu_nodes` nodes. */
static OnyxSession* open_session(const uint8_t* bytes, size_t len, bool gpu, size_t gpu_nodes) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = gpu ? "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}"
                        : "{\"providers\": [{\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "attention.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  if (gpu) {
    assert_string_equal(onyx_session_provider_name(s, 0), GPU_NAME);
    if (onyx_session_provider_node_count(s, 0) != gpu_nodes) {
      char* text = NULL;
      ok(onyx_session_explain(s, &text));
      fail_msg("%zu of %zu nodes on " GPU_NAME ":\n%s", onyx_session_provider_node_count(s, 0),
               gpu_nodes, text);
    }
  }
  return s;
}

typedef struct In {
  const char* name;
  const void* data;
  size_t rank;
  const int64_t* dims;
  int32_t type; /* 0: float32 */
} In;

static size_t count_of(const int64_t* dims, size_t rank) {
  size_t n = 1;
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  return n;
}

/* Runs s on the inputs; returns a malloc'd copy of output "Y" (n floats). */
static float* run(OnyxSession* s, const In* in, size_t n_in, size_t n) {
  OnyxValue* v[4] = {NULL};
  const char* names[4];
  assert_true(n_in <= 4);
  for (size_t i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    const int32_t type = in[i].type ? in[i].type : ONYX_ELEM_FLOAT32;
    const size_t size = type == ONYX_ELEM_BOOL ? 1 : sizeof(float);
    ok(onyx_value_create_tensor(type, in[i].dims, in[i].rank, in[i].data,
                                count_of(in[i].dims, in[i].rank) * size, &v[i]));
  }
  const char* out = "Y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, n_in, &out, 1, &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  float* got = malloc((n ? n : 1) * sizeof *got);
  assert_non_null(got);
  memcpy(got, onyx_tensor_data(t), n * sizeof *got);
  onyx_value_release(y);
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(v[i]);
  return got;
}

/* Compares n values; on the first few mismatches prints them, then fails. */
static void expect_near(const float* got, const float* want, size_t n, double tol, const char* what,
                        const char* label) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs((double)want[i])))) {
      if (bad < 5)
        fprintf(stderr, "  %s, %s: Y[%zu] = %.9g, want %.9g\n", label, what, i, got[i], want[i]);
      if (!bad) first = i;
      bad++;
    }
  if (bad)
    fail_msg("%s: %zu of %zu values differ from %s (first at %zu; tolerance %.1e relative)", label,
             bad, n, what, first, tol);
}

/* --- MultiHeadAttention nodes: GPU against the CPU provider and a double reference ------ */

typedef enum MaskKind { MASK_NONE, MASK_CAUSAL, MASK_PAD, MASK_CAUSAL_PAD } MaskKind;

typedef struct Case {
  int64_t b, s, heads, d;
  MaskKind mask;
  bool packed;
} Case;

/* Y of the attention in double: per (b, h, s) the softmax over t of
 * scale * q . k + mask, times V; q, k, v rows ld apart (packed: one array). */
static void reference(const Case* c, const float* q, const float* k, const float* v, int64_t ld,
                      const float* causal, const float* pad, float scale, float* y) {
  const int64_t S = c->s, T = c->s, D = c->d, hd = c->heads * D;
  double* sc = malloc((size_t)T * sizeof *sc);
  assert_non_null(sc);
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t h = 0; h < c->heads; h++)
      for (int64_t i = 0; i < S; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < T; t++) {
          double dot = 0;
          for (int64_t d = 0; d < D; d++)
            dot += (double)q[(b * S + i) * ld + h * D + d] * k[(b * T + t) * ld + h * D + d];
          sc[t] = (double)scale * dot;
          if (causal) sc[t] += causal[i * T + t];
          if (pad) sc[t] += pad[b * T + t];
          mx = fmax(mx, sc[t]);
        }
        for (int64_t t = 0; t < T; t++)
          sum += sc[t] = exp(sc[t] - mx);
        for (int64_t d = 0; d < D; d++) {
          double acc = 0;
          for (int64_t t = 0; t < T; t++)
            acc += sc[t] / sum * v[(b * T + t) * ld + h * D + d];
          y[(b * S + i) * hd + h * D + d] = (float)acc;
        }
      }
  free(sc);
}

/* One case: a model of one MultiHeadAttention node (a causal mask is a
 * constant [S, T] with -1e9 above the diagonal, the fused GPT block's; a
 * padding mask a graph input [B, 1, 1, T], -10000 on each batch's last keys;
 * both together: their sum, a constant [B, 1, S, T]). */
static void check_case(const Case* c) {
  const int64_t S = c->s, T = c->s, hd = c->heads * c->d, ld = c->packed ? 3 * hd : hd;
  const float scale = 1.0f / sqrtf((float)c->d);
  char label[160];
  snprintf(label, sizeof label, "B %lld S %lld heads %lld D %lld mask %s%s", (long long)c->b,
           (long long)S, (long long)c->heads, (long long)c->d,
           c->mask == MASK_NONE     ? "none"
           : c->mask == MASK_CAUSAL ? "causal"
           : c->mask == MASK_PAD    ? "padding"
                                    : "causal+padding",
           c->packed ? " packed" : "");
  uint64_t seed = (uint64_t)(c->b * 1000003 + S * 1009 + c->d * 31 + c->mask * 7 + c->packed);
  const size_t nq = (size_t)(c->b * S * ld), nkv = (size_t)(c->b * T * hd);
  float* q = rand_floats(nq, &seed, -1.0, 1.0);
  float* k = c->packed ? NULL : rand_floats(nkv, &seed, -1.0, 1.0);
  float* v = c->packed ? NULL : rand_floats(nkv, &seed, -1.0, 1.0);
  float* causal = NULL;
  float* pad = NULL;
  if (c->mask == MASK_CAUSAL || c->mask == MASK_CAUSAL_PAD) {
    causal = malloc((size_t)(S * T) * sizeof *causal);
    assert_non_null(causal);
    for (int64_t i = 0; i < S; i++)
      for (int64_t t = 0; t < T; t++)
        causal[i * T + t] = t > i ? -1e9f : 0.0f;
  }
  if (c->mask == MASK_PAD || c->mask == MASK_CAUSAL_PAD) {
    pad = malloc((size_t)(c->b * T) * sizeof *pad);
    assert_non_null(pad);
    for (int64_t b = 0; b < c->b; b++)
      for (int64_t t = 0; t < T; t++) /* batch b pads its last (T / 4 + b) keys, never key 0 */
        pad[b * T + t] = t > 0 && t >= T - (T / 4 + b) ? -10000.0f : 0.0f;
  }
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx", 1);
  const int64_t qdims[3] = {c->b, S, ld}, kvdims[3] = {c->b, T, hd}, ydims[3] = {c->b, S, hd};
  const int64_t pdims[4] = {c->b, 1, 1, T}, cpdims[4] = {c->b, 1, S, T};
  otm_input(m, "q", ONYX_ELEM_FLOAT32, 3, qdims);
  if (!c->packed) {
    otm_input(m, "k", ONYX_ELEM_FLOAT32, 3, kvdims);
    otm_input(m, "v", ONYX_ELEM_FLOAT32, 3, kvdims);
  }
  float* both = NULL;
  if (c->mask == MASK_CAUSAL) {
    otm_initializer(m, "mask", ONYX_ELEM_FLOAT32, 2, (int64_t[]){S, T}, causal);
  } else if (c->mask == MASK_PAD) {
    otm_input(m, "mask", ONYX_ELEM_FLOAT32, 4, pdims);
  } else if (c->mask == MASK_CAUSAL_PAD) {
    both = malloc((size_t)(c->b * S * T) * sizeof *both);
    assert_non_null(both);
    for (int64_t b = 0; b < c->b; b++)
      for (int64_t i = 0; i < S * T; i++)
        both[b * S * T + i] = causal[i] + pad[b * T + i % T];
    otm_initializer(m, "mask", ONYX_ELEM_FLOAT32, 4, cpdims, both);
  }
  char ins[32];
  snprintf(ins, sizeof ins, "%s%s", c->packed ? "q,," : "q,k,v", c->mask ? ",mask" : "");
  if (c->packed && !c->mask) snprintf(ins, sizeof ins, "q");
  OxTestNode* nd = otm_node(m, "MultiHeadAttention", "attn", ins, "Y");
  otm_node_domain(nd, "com.onyx");
  otm_attr_int(nd, "num_heads", c->heads);
  otm_attr_float(nd, "scale", scale);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, ydims);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  In in[4] = {{"q", q, 3, qdims, 0}};
  size_t n_in = 1;
  if (!c->packed) {
    in[n_in++] = (In){"k", k, 3, kvdims, 0};
    in[n_in++] = (In){"v", v, 3, kvdims, 0};
  }
  if (c->mask == MASK_PAD) in[n_in++] = (In){"mask", pad, 4, pdims, 0};
  const size_t ny = (size_t)(c->b * S * hd);
  OnyxSession* sg = open_session(bytes, len, true, 1);
  float* g = run(sg, in, n_in, ny);
  onyx_session_release(sg);
  OnyxSession* sc = open_session(bytes, len, false, 0);
  float* want_cpu = run(sc, in, n_in, ny);
  onyx_session_release(sc);
  float* want = malloc(ny * sizeof *want);
  assert_non_null(want);
  reference(c, q, c->packed ? q + hd : k, c->packed ? q + 2 * hd : v, ld, causal, pad, scale, want);
  expect_near(g, want_cpu, ny, 1e-5, "the CPU provider", label);
  expect_near(g, want, ny, 1e-5, "the double reference", label);
  free(bytes);
  free(q);
  free(k);
  free(v);
  free(causal);
  free(pad);
  free(both);
  free(g);
  free(want_cpu);
  free(want);
}

static void test_mha_table(void** state) {
  (void)state;
  gpu_required();
  static const int64_t seqs[] = {1, 7, 65, 130}, dims[] = {8, 64, 80};
  size_t n = 0;
  for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int mk = MASK_NONE; mk <= MASK_CAUSAL_PAD; mk++)
        for (int packed = 0; packed < 2; packed++) {
          /* batch 2 and 3 heads on half of the cases, 1 x 2 on the others */
          const bool big = (si + di + (size_t)mk + (size_t)packed) % 2 == 0;
          const Case c = {big ? 2 : 1, seqs[si], big ? 3 : 2, dims[di], (MaskKind)mk, packed};
          check_case(&c);
          n++;
        }
  assert_int_equal(n, 4 * 3 * 4 * 2);
}

/* The same table through the GEMM path (two batched vendor GEMMs with the
 * mask and Softmax between them), which takes score matrices of at least
 * ONYX_GPU_ATTN_GEMM_MIN elements: 1 sends every case there. */
static void test_mha_table_gemm(void** state) {
  (void)state;
  gpu_required();
  assert_int_equal(setenv("ONYX_GPU_ATTN_GEMM_MIN", "1", 1), 0);
  static const int64_t seqs[] = {1, 7, 65, 130}, dims[] = {8, 64, 80};
  size_t n = 0;
  for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int mk = MASK_NONE; mk <= MASK_CAUSAL_PAD; mk++)
        for (int packed = 0; packed < 2; packed++) {
          const bool big = (si + di + (size_t)mk + (size_t)packed) % 2 == 1;
          const Case c = {big ? 2 : 1, seqs[si], big ? 3 : 2, dims[di], (MaskKind)mk, packed};
          check_case(&c);
          n++;
        }
  assert_int_equal(unsetenv("ONYX_GPU_ATTN_GEMM_MIN"), 0);
  assert_int_equal(n, 4 * 3 * 4 * 2);
}

/* Heads above the tiled kernel's 128 columns take the one-row kernel. */
static void test_mha_large_head(void** state) {
  (void)state;
  gpu_required();
  const Case cases[] = {{2, 33, 2, 160, MASK_NONE, false},
                        {1, 40, 1, 136, MASK_CAUSAL, true},
                        {2, 9, 2, 200, MASK_PAD, false}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i]);
}

/* --- ONNX Attention (opset 23) ----------------------------------------------------------- */

typedef enum AMask { AM_NONE, AM_FLOAT_SHORT, AM_BOOL } AMask;

typedef struct ACase {
  int64_t b, hq, hkv, sq, t, d, dv;
  bool three_d, causal;
  AMask mask;
  float scale; /* 0: the default 1 / sqrt(d) */
} ACase;

/* Element (b, h, s, e) of a [B, heads, S, size] operand stored 4-D or 3-D. */
static size_t at4(bool three_d, int64_t heads, int64_t S, int64_t size, int64_t b, int64_t h,
                  int64_t s, int64_t e) {
  return (size_t)(three_d ? ((b * S + s) * heads + h) * size + e
                          : ((b * heads + h) * S + s) * size + e);
}

/* Attention-23 in double: bias = the mask (bool: 0 or -inf; float: its value, -inf past its
 * length) and -inf above the diagonal with is_causal; a row whose every bias is -inf gives 0. */
static void reference23(const ACase* c, const float* q, const float* k, const float* v,
                        const void* mask, int64_t mlen, float* y) {
  const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->d);
  double* sc = malloc((size_t)(c->t ? c->t : 1) * sizeof *sc);
  assert_non_null(sc);
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t h = 0; h < c->hq; h++) {
      const int64_t hk = h / (c->hq / c->hkv);
      for (int64_t i = 0; i < c->sq; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < c->t; t++) {
          double dot = 0, bias = 0;
          for (int64_t e = 0; e < c->d; e++)
            dot += (double)q[at4(c->three_d, c->hq, c->sq, c->d, b, h, i, e)] *
                   k[at4(c->three_d, c->hkv, c->t, c->d, b, hk, t, e)];
          if (c->mask == AM_BOOL) /* [Sq, T] */
            bias = ((const uint8_t*)mask)[i * c->t + t] ? 0.0 : -INFINITY;
          if (c->mask == AM_FLOAT_SHORT) /* [B, 1, 1, mlen] */
            bias = t < mlen ? ((const float*)mask)[b * mlen + t] : -INFINITY;
          if (c->causal && t > i) bias = -INFINITY;
          sc[t] = scale * dot + bias;
          mx = fmax(mx, sc[t]);
        }
        for (int64_t t = 0; t < c->t; t++)
          sum += sc[t] = mx == -INFINITY ? 0.0 : exp(sc[t] - mx);
        for (int64_t e = 0; e < c->dv; e++) {
          double acc = 0;
          for (int64_t t = 0; t < c->t && sum > 0; t++)
            acc += sc[t] / sum * v[at4(c->three_d, c->hkv, c->t, c->dv, b, hk, t, e)];
          y[at4(c->three_d, c->hq, c->sq, c->dv, b, h, i, e)] = (float)acc;
        }
      }
    }
  free(sc);
}

static void check_attention23(const ACase* c) {
  char label[160];
  snprintf(label, sizeof label,
           "Attention B %lld Hq %lld Hkv %lld Sq %lld T %lld D %lld Dv %lld %s%s mask %d",
           (long long)c->b, (long long)c->hq, (long long)c->hkv, (long long)c->sq, (long long)c->t,
           (long long)c->d, (long long)c->dv, c->three_d ? "3-D" : "4-D",
           c->causal ? " causal" : "", (int)c->mask);
  uint64_t seed = (uint64_t)(c->sq * 7919 + c->t * 104729 + c->d * 31 + c->dv + c->mask);
  int64_t qd[4], kd[4], vd[4], yd[4];
  const size_t rank = c->three_d ? 3 : 4;
  if (c->three_d) {
    memcpy(qd, (int64_t[]){c->b, c->sq, c->hq * c->d}, 3 * sizeof(int64_t));
    memcpy(kd, (int64_t[]){c->b, c->t, c->hkv * c->d}, 3 * sizeof(int64_t));
    memcpy(vd, (int64_t[]){c->b, c->t, c->hkv * c->dv}, 3 * sizeof(int64_t));
    memcpy(yd, (int64_t[]){c->b, c->sq, c->hq * c->dv}, 3 * sizeof(int64_t));
  } else {
    memcpy(qd, (int64_t[]){c->b, c->hq, c->sq, c->d}, 4 * sizeof(int64_t));
    memcpy(kd, (int64_t[]){c->b, c->hkv, c->t, c->d}, 4 * sizeof(int64_t));
    memcpy(vd, (int64_t[]){c->b, c->hkv, c->t, c->dv}, 4 * sizeof(int64_t));
    memcpy(yd, (int64_t[]){c->b, c->hq, c->sq, c->dv}, 4 * sizeof(int64_t));
  }
  float* q = rand_floats(count_of(qd, rank), &seed, -1.0, 1.0);
  float* k = rand_floats(count_of(kd, rank), &seed, -1.0, 1.0);
  float* v = rand_floats(count_of(vd, rank), &seed, -1.0, 1.0);
  const int64_t mlen = c->t - c->t / 3; /* the short float mask's keys */
  const int64_t fmd[4] = {c->b, 1, 1, mlen}, bmd[2] = {c->sq, c->t};
  void* mask = NULL;
  if (c->mask == AM_FLOAT_SHORT) {
    mask = rand_floats((size_t)(c->b * mlen), &seed, -2.0, 2.0);
  } else if (c->mask == AM_BOOL) { /* random, with query row 1 wholly masked */
    uint8_t* mb = malloc((size_t)(c->sq * c->t) + 1);
    assert_non_null(mb);
    for (int64_t i = 0; i < c->sq * c->t; i++)
      mb[i] = i / c->t != 1 && uni(&seed) < 0.7;
    mask = mb;
  }
  OxTestModel* m = otm_new(23);
  otm_input(m, "Q", ONYX_ELEM_FLOAT32, (int)rank, qd);
  otm_input(m, "K", ONYX_ELEM_FLOAT32, (int)rank, kd);
  otm_input(m, "V", ONYX_ELEM_FLOAT32, (int)rank, vd);
  if (c->mask == AM_FLOAT_SHORT) otm_input(m, "M", ONYX_ELEM_FLOAT32, 4, fmd);
  if (c->mask == AM_BOOL) otm_input(m, "M", ONYX_ELEM_BOOL, 2, bmd);
  OxTestNode* nd = otm_node(m, "Attention", "attention", c->mask ? "Q,K,V,M" : "Q,K,V", "Y");
  if (c->three_d) {
    otm_attr_int(nd, "q_num_heads", c->hq);
    otm_attr_int(nd, "kv_num_heads", c->hkv);
  }
  if (c->causal) otm_attr_int(nd, "is_causal", 1);
  if (c->scale != 0.0f) otm_attr_float(nd, "scale", c->scale);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, (int)rank, yd);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[4] = {{"Q", q, rank, qd, 0},
                    {"K", k, rank, kd, 0},
                    {"V", v, rank, vd, 0},
                    {"M", mask, c->mask == AM_BOOL ? 2 : 4, c->mask == AM_BOOL ? bmd : fmd,
                     c->mask == AM_BOOL ? ONYX_ELEM_BOOL : 0}};
  const size_t n_in = c->mask ? 4 : 3, ny = count_of(yd, rank);
  OnyxSession* sg = open_session(bytes, len, true, 1);
  float* g = run(sg, in, n_in, ny);
  onyx_session_release(sg);
  OnyxSession* sc = open_session(bytes, len, false, 0);
  float* want_cpu = run(sc, in, n_in, ny);
  onyx_session_release(sc);
  float* want = malloc(ny * sizeof *want);
  assert_non_null(want);
  reference23(c, q, k, v, mask, mlen, want);
  expect_near(g, want_cpu, ny, 1e-5, "the CPU provider", label);
  expect_near(g, want, ny, 1e-5, "the double reference", label);
  free(bytes);
  free(q);
  free(k);
  free(v);
  free(mask);
  free(g);
  free(want_cpu);
  free(want);
}

/* 4-D and 3-D operands, grouped heads, a value head size other than the
 * query's, is_causal (also with fewer queries than keys), a float mask
 * shorter than the keys, a bool mask with a wholly masked row (zeros), an
 * explicit scale, and heads past the tiled kernel's 128 columns. */
static void test_attention23(void** state) {
  (void)state;
  gpu_required();
  const ACase cases[] = {
      {2, 4, 2, 65, 65, 64, 64, false, true, AM_NONE, 0.0f},
      {1, 4, 4, 7, 130, 80, 48, true, false, AM_FLOAT_SHORT, 0.0f},
      {2, 6, 2, 33, 33, 8, 16, true, true, AM_BOOL, 0.3f},
      {1, 2, 1, 20, 50, 32, 32, false, true, AM_FLOAT_SHORT, 0.0f},
      {1, 2, 2, 9, 9, 160, 136, false, false, AM_BOOL, 0.0f},
      {2, 2, 1, 40, 40, 144, 144, true, true, AM_NONE, 0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_attention23(&cases[i]);
}

/* --- the GPT block's attention, fused onto the GPU -------------------------------------- */

/* X [1, S, C] -> q, k, v = X Wi + bi -> heads (Reshape, Transpose) -> softmax(q k^T / sqrt(D)
 * + causal) v -> merge (Transpose, Reshape) -> Y: the attention of bench/zoo_models.py's GPT
 * block as torch exports it. With GPU_NAME first the optimizer must leave one com.onyx
 * MultiHeadAttention on it, packed (one FusedMatMul for the three projections), and the
 * output must match the CPU provider's. */
static void test_gpt_attention_fuses(void** state) {
  (void)state;
  gpu_required();
  enum { S = 40, C = 32, HEADS = 4, D = C / HEADS };
  uint64_t seed = 99;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, S, C});
  float* w[3];
  float* bias[3];
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    char wn[8], bn[8], mm[8], add[8], pr[8], rs[8], tr[8];
    w[i] = rand_floats(C * C, &seed, -0.3, 0.3);
    bias[i] = rand_floats(C, &seed, -0.1, 0.1);
    snprintf(wn, sizeof wn, "W%s", names[i]);
    snprintf(bn, sizeof bn, "b%s", names[i]);
    otm_initializer(m, wn, ONYX_ELEM_FLOAT32, 2, (int64_t[]){C, C}, w[i]);
    otm_initializer(m, bn, ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, bias[i]);
    snprintf(mm, sizeof mm, "m%s", names[i]);
    snprintf(pr, sizeof pr, "p%s", names[i]);
    snprintf(add, sizeof add, "a%s", names[i]);
    snprintf(rs, sizeof rs, "r%s", names[i]);
    snprintf(tr, sizeof tr, "t%s", names[i]);
    char io[32];
    snprintf(io, sizeof io, "X,%s", wn);
    otm_node(m, "MatMul", mm, io, mm);
    snprintf(io, sizeof io, "%s,%s", mm, bn);
    otm_node(m, "Add", add, io, pr);
    snprintf(io, sizeof io, "%s,heads", pr);
    otm_node(m, "Reshape", rs, io, rs);
    OxTestNode* t = otm_node(m, "Transpose", tr, rs, tr);
    otm_attr_ints(t, "perm", 4, i == 1 ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3});
  }
  otm_initializer(m, "heads", ONYX_ELEM_INT64, 1, (int64_t[]){4}, (int64_t[]){1, S, HEADS, D});
  otm_initializer(m, "merged", ONYX_ELEM_INT64, 1, (int64_t[]){3}, (int64_t[]){1, S, C});
  const float root = sqrtf((float)D);
  otm_initializer(m, "root", ONYX_ELEM_FLOAT32, 0, NULL, &root);
  float* causal = malloc(S * S * sizeof *causal);
  assert_non_null(causal);
  for (int i = 0; i < S; i++)
    for (int t = 0; t < S; t++)
      causal[i * S + t] = t > i ? -1e9f : 0.0f;
  otm_initializer(m, "causal", ONYX_ELEM_FLOAT32, 2, (int64_t[]){S, S}, causal);
  otm_node(m, "MatMul", "scores", "tq,tk", "scores");
  otm_node(m, "Div", "scaled", "scores,root", "scaled");
  otm_node(m, "Add", "masked", "scaled,causal", "masked");
  OxTestNode* sm = otm_node(m, "Softmax", "softmax", "masked", "probs");
  otm_attr_int(sm, "axis", -1);
  otm_node(m, "MatMul", "context", "probs,tv", "context");
  OxTestNode* t = otm_node(m, "Transpose", "merge_t", "context", "merge_t");
  otm_attr_ints(t, "perm", 4, (int64_t[]){0, 2, 1, 3});
  otm_node(m, "Reshape", "merge", "merge_t,merged", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, S, C});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  /* Two nodes on the GPU: the packed projection and the attention. */
  OnyxSession* sg = open_session(bytes, len, true, 2);
  char* text = NULL;
  ok(onyx_session_explain(sg, &text));
  if (!strstr(text, "MultiHeadAttention") || !strstr(text, "FusedMatMul"))
    fail_msg("the attention is not fused on " GPU_NAME ":\n%s", text);
  onyx_free(text);
  float* x = rand_floats(S * C, &seed, -1.0, 1.0);
  const In in = {"X", x, 3, (int64_t[]){1, S, C}, 0};
  float* g = run(sg, &in, 1, S * C);
  onyx_session_release(sg);
  OnyxSession* sc = open_session(bytes, len, false, 0);
  float* want = run(sc, &in, 1, S * C);
  onyx_session_release(sc);
  expect_near(g, want, S * C, 1e-5, "the CPU provider", "GPT attention");
  for (int i = 0; i < 3; i++) {
    free(w[i]);
    free(bias[i]);
  }
  free(causal);
  free(x);
  free(g);
  free(want);
  free(bytes);
}

/* The vendor runtimes leak a little each time the provider is unloaded and
 * loaded again (LeakSanitizer reports it from "<unknown module>"): the
 * provider stays mapped for the whole process, as in test_gpu.c. */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mha_table),           cmocka_unit_test(test_mha_table_gemm),
      cmocka_unit_test(test_mha_large_head),      cmocka_unit_test(test_attention23),
      cmocka_unit_test(test_gpt_attention_fuses),
  };
  return cmocka_run_group_tests(tests, keep_mapped, NULL);
}
