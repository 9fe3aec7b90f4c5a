/* bench_optim.c — one AdamW step over 10M float32 parameters in 100 tensors
 * of 100,000, three ways: one fused AdamWOptimizer node (n = 100), 100
 * AdamWOptimizer nodes of one tensor each, and 100
 * ai.onnx.preview.training Adam nodes (the per-tensor ONNX op). Prints the
 * median ms per step of `runs` runs (outputs allocated by the session in
 * each run, inputs made once). Not a ctest: a measurement tool. With
 * BENCH_PROFILE=prefix each way also writes a profile (prefix0.json for the
 * fused node, 1, 2), whose node events give the kernels' own time;
 * BENCH_BIND=1 binds the outputs to buffers made once; BENCH_ONLY=k runs
 * way k alone.
 *
 *   bench_optim [threads (default 0: the session's default)] [runs (default 7)]
 *               [tensors (100)] [elements per tensor (100000)]
 *   (ONYX_PROVIDER_PATH=<build>/lib) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

static int NT = 100;         /* tensors */
static int64_t PER = 100000; /* elements per tensor */

static void ok(OnyxStatus* st) {
  if (st) {
    fprintf(stderr, "error: %s\n", onyx_status_message(st));
    exit(1);
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of the whole process: with 1 thread, the step's work without
 * the time other processes took the core away (a loaded machine). */
static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef enum Mode { FUSED, PER_TENSOR, PREVIEW } Mode;

static OnyxSession* build(Mode mode, int threads) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.training", 1);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  const int64_t d[] = {PER};
  otm_input(m, "lr", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_input(m, "step", ONYX_ELEM_INT64, 0, NULL);
  static const char* const g[] = {"P", "G", "M", "V"};
  char nm[32];
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < NT; t++) {
      snprintf(nm, sizeof nm, "%s%d", g[k], t);
      otm_input(m, nm, ONYX_ELEM_FLOAT32, 1, d);
    }
  static const char* const o[] = {"Po", "Mo", "Vo"};
  for (int k = 0; k < 3; k++)
    for (int t = 0; t < NT; t++) {
      snprintf(nm, sizeof nm, "%s%d", o[k], t);
      otm_output(m, nm, ONYX_ELEM_FLOAT32, 1, d);
    }
  const size_t cap = 16 * 4 * (size_t)NT + 64;
  char* ins = malloc(cap);
  char* outs = malloc(cap);
  if (mode == FUSED) {
    strcpy(ins, "lr,step");
    outs[0] = 0;
    for (int k = 0; k < 4; k++)
      for (int t = 0; t < NT; t++) {
        snprintf(nm, sizeof nm, ",%s%d", g[k], t);
        strcat(ins, nm);
      }
    for (int k = 0; k < 3; k++)
      for (int t = 0; t < NT; t++) {
        snprintf(nm, sizeof nm, "%s%s%d", outs[0] ? "," : "", o[k], t);
        strcat(outs, nm);
      }
    OxTestNode* n = otm_node(m, "AdamWOptimizer", "adamw", ins, outs);
    otm_node_domain(n, "com.onyx.training");
    otm_attr_int(n, "n", NT);
  } else {
    for (int t = 0; t < NT; t++) {
      snprintf(ins, cap, "lr,step,P%d,G%d,M%d,V%d", t, t, t, t);
      snprintf(outs, cap, "Po%d,Mo%d,Vo%d", t, t, t);
      snprintf(nm, sizeof nm, "opt%d", t);
      OxTestNode* n = otm_node(m, mode == PREVIEW ? "Adam" : "AdamWOptimizer", nm, ins, outs);
      otm_node_domain(n, mode == PREVIEW ? "ai.onnx.preview.training" : "com.onyx.training");
      if (mode == PER_TENSOR) otm_attr_int(n, "n", 1);
    }
  }
  free(ins);
  free(outs);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* so = NULL;
  ok(onyx_session_options_create(&so));
  if (threads > 0) ok(onyx_session_options_set_threads(so, threads));
  /* BENCH_PROFILE=prefix: a profile per way (prefix0.json, ...), whose node
   * events time the optimizer kernels without the run's own overhead. */
  const char* prof = getenv("BENCH_PROFILE");
  char path[512];
  if (prof) {
    snprintf(path, sizeof path, "%s%d.json", prof, (int)mode);
    ok(onyx_session_options_set_profile(so, path));
  }
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(so, bytes, len, NULL, &s));
  onyx_session_options_release(so);
  free(bytes);
  return s;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 0;
  const int runs = argc > 2 ? atoi(argv[2]) : 7;
  if (argc > 3) NT = atoi(argv[3]);
  if (argc > 4) PER = atoll(argv[4]);
  if (runs < 1 || NT < 1 || NT > 100000 || PER < 1) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const size_t n_in = 2 + 4 * NT, n_out = 3 * NT;
  OnyxValue** in = calloc(n_in, sizeof *in);
  char(*names)[16] = calloc(n_in + n_out, 16);
  const char** in_names = calloc(n_in, sizeof *in_names);
  const char** out_names = calloc(n_out, sizeof *out_names);
  const float lr = 1e-3f;
  const int64_t step = 5, d[] = {PER};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &lr, sizeof lr, &in[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_INT64, NULL, 0, &step, sizeof step, &in[1]));
  in_names[0] = "lr";
  in_names[1] = "step";
  float* buf = malloc((size_t)PER * sizeof *buf);
  static const char* const g[] = {"P", "G", "M", "V"};
  uint32_t r = 12345;
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < NT; t++) {
      for (int64_t i = 0; i < PER; i++) {
        r = r * 1664525u + 1013904223u;
        buf[i] = (float)(r >> 8) / 16777216.0f * (k == 3 ? 0.1f : 2.0f) - (k == 3 ? 0 : 1.0f);
      }
      const size_t j = 2 + (size_t)k * NT + (size_t)t;
      snprintf(names[j], 16, "%s%d", g[k], t);
      in_names[j] = names[j];
      ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, buf, (size_t)PER * sizeof *buf, &in[j]));
    }
  free(buf);
  static const char* const o[] = {"Po", "Mo", "Vo"};
  for (int k = 0; k < 3; k++)
    for (int t = 0; t < NT; t++) {
      const size_t j = (size_t)k * NT + (size_t)t;
      snprintf(names[n_in + j], 16, "%s%d", o[k], t);
      out_names[j] = names[n_in + j];
    }
  static const char* const label[] = {"one fused AdamWOptimizer node", "AdamWOptimizer per tensor",
                                      "preview.training Adam per tensor"};
  printf("%d tensors of %lld float32 elements\n", NT, (long long)PER);
  OnyxValue** got = calloc(n_out, sizeof *got);
  double* t_ms = calloc((size_t)runs, sizeof *t_ms);
  double* c_ms = calloc((size_t)runs, sizeof *c_ms);
  const char* only = getenv("BENCH_ONLY"); /* 0, 1 or 2: that way alone (for perf) */
  for (int mode = 0; mode < 3; mode++) {
    if (only && atoi(only) != mode) continue;
    OnyxSession* s = build((Mode)mode, threads);
    /* BENCH_BIND=1: outputs bound to buffers made once (an I/O binding), so
     * that a step does not page in fresh output memory. */
    OnyxIoBinding* b = NULL;
    OnyxValue** bound = NULL;
    if (getenv("BENCH_BIND")) {
      ok(onyx_io_binding_create(s, &b));
      for (size_t i = 0; i < n_in; i++)
        ok(onyx_io_binding_bind_input(b, in_names[i], in[i]));
      bound = calloc(n_out, sizeof *bound);
      float* zero = calloc((size_t)PER, sizeof *zero);
      for (size_t i = 0; i < n_out; i++) {
        ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, zero, (size_t)PER * sizeof *zero,
                                    &bound[i]));
        ok(onyx_io_binding_bind_output(b, out_names[i], bound[i]));
      }
      free(zero);
    }
    for (int it = -1; it < runs; it++) { /* run -1: warm-up */
      const double t0 = now_ms(), c0 = cpu_ms();
      if (b)
        ok(onyx_session_run_with_binding(s, NULL, b));
      else
        ok(onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, n_in, out_names, n_out,
                            got));
      const double t1 = now_ms(), c1 = cpu_ms();
      if (!b) onyx_values_release(got, n_out);
      if (it >= 0) {
        t_ms[it] = t1 - t0;
        c_ms[it] = c1 - c0;
      }
    }
    qsort(t_ms, (size_t)runs, sizeof *t_ms, cmp_d);
    qsort(c_ms, (size_t)runs, sizeof *c_ms, cmp_d);
    printf("%-34s %8.2f ms/step wall (median of %d; min %.2f), %8.2f ms CPU (min %.2f)\n",
           label[mode], t_ms[runs / 2], runs, t_ms[0], c_ms[runs / 2], c_ms[0]);
    if (b) {
      onyx_io_binding_release(b);
      onyx_values_release(bound, n_out);
      free(bound);
    }
    onyx_session_release(s);
  }
  onyx_values_release(in, n_in);
  free(in);
  free(names);
  free(in_names);
  free(out_names);
  free(got);
  free(t_ms);
  free(c_ms);
  return 0;
}
