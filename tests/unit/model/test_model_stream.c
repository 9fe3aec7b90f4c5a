/* test_model_stream.c — loading a model file reads its large initializers
 * (raw_data of 64 KiB or more) straight from the file into their tensors
 * and unpacks only the rest (host/model/model_load.c): the initializers
 * hold exactly the bytes written, whatever their size, type or storage
 * (raw_data or a typed field), as loading the same bytes from memory gives;
 * files the walk leaves to the whole-file path (a tensor with raw_data
 * twice: the last wins) load as protobuf says; and loading a file of 48 MiB
 * of weights raises the process's peak RSS by about the weights, not twice
 * them (the whole file held beside its unpacked copy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "onnx.pb-c.h"
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_test_models.h"

static void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (uint8_t)(seed >> 24);
  }
}

static const OxValue* find(const OxGraph* g, const char* name) {
  for (size_t i = 0; i < g->n_values; i++)
    if (!strcmp(g->values[i]->name, name)) return g->values[i];
  fail_msg("no value '%s'", name);
  return NULL;
}

typedef struct Init {
  const char* name;
  int type;
  int64_t n;
  size_t width;
  bool typed; /* stored in float_data / int64_data instead of raw_data */
} Init;

static const Init inits[] = {
    {"big_f32", ONYX_ELEM_FLOAT32, 70000, 4, false},   /* 280 KB */
    {"small_f32", ONYX_ELEM_FLOAT32, 16, 4, false},    /* stays in the skeleton */
    {"big_i8", ONYX_ELEM_INT8, 65536 + 3, 1, false},   /* just over the threshold, odd size */
    {"huge_f32", ONYX_ELEM_FLOAT32, 600000, 4, false}, /* 2.4 MB */
    {"typed_f32", ONYX_ELEM_FLOAT32, 20000, 4, true},  /* float_data, not raw_data */
    {"edge_i64", ONYX_ELEM_INT64, 8192, 8, false},     /* exactly 64 KiB */
};
enum { N_INITS = sizeof inits / sizeof *inits };

static uint8_t* init_data(size_t i) {
  const size_t bytes = (size_t)inits[i].n * inits[i].width;
  uint8_t* p = malloc(bytes);
  fill_bytes(p, bytes, (uint32_t)(i + 1) * 7919u);
  if (inits[i].type == ONYX_ELEM_FLOAT32) /* finite floats: exponent bits below all-ones */
    for (size_t k = 3; k < bytes; k += 4)
      p[k] &= 0x3f;
  return p;
}

/* Initializers beside a Relu of X, each also a graph output. */
static OxTestModel* build(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  for (size_t i = 0; i < N_INITS; i++) {
    uint8_t* d = init_data(i);
    Onnx__TensorProto* t = otm_initializer(m, inits[i].name, inits[i].type, 1, &inits[i].n, d);
    if (inits[i].typed) otm_tensor_typed(t);
    otm_output(m, inits[i].name, inits[i].type, 1, &inits[i].n);
    free(d);
  }
  return m;
}

static void check_inits(const OxGraph* g) {
  for (size_t i = 0; i < N_INITS; i++) {
    const OxValue* v = find(g, inits[i].name);
    assert_non_null(v->constant);
    assert_int_equal(v->constant->type, inits[i].type);
    assert_int_equal(v->constant->rank, 1);
    assert_int_equal(v->constant->dims[0], inits[i].n);
    uint8_t* want = init_data(i);
    if (memcmp(v->constant->data, want, (size_t)inits[i].n * inits[i].width))
      fail_msg("initializer %s: bytes differ from those written", inits[i].name);
    free(want);
  }
}

static void test_stream_matches_written(void** state) {
  (void)state;
  unsetenv("ONYX_MMAP_FILES");
  char* dir = otm_temp_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  OxTestModel* m = build();
  assert_true(otm_write(m, path));
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OxGraph* g = NULL;
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);
  check_inits(g);
  assert_int_equal(g->n_nodes, 1);
  assert_string_equal(g->nodes[0]->op_type, "Relu");
  /* the tensor holds the buffer it was read into: ox_alloc_host's 2 MiB
   * alignment for the 2.4 MB one */
  assert_int_equal((uintptr_t)find(g, "huge_f32")->constant->data % ((uintptr_t)2 << 20), 0);
  ox_graph_free(g);
  g = NULL;
  st = ox_model_load_bytes(bytes, len, NULL, "mem", NULL, &g);
  if (st) fail_msg("%s", st->message);
  check_inits(g);
  ox_graph_free(g);
  free(bytes);
  otm_remove_dir(dir);
  free(dir);
}

/* Appends a varint. */
static size_t put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

/* An initializer with two raw_data fields (protobuf: the last wins), left
 * to the whole-file path: the file is put together by hand, the model
 * without its graph, then the graph without its initializer, then the
 * initializer W (raw_data a) with a second raw_data field (b) appended. */
static void test_stream_duplicate_raw_data(void** state) {
  (void)state;
  const int64_t n = 20000; /* 80 KB: a large field */
  const size_t blen = (size_t)n * sizeof(float);
  float* a = malloc(blen);
  float* b = malloc(blen);
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = (float)(-i);
  }
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 1, &n, a);
  otm_output(m, "W", ONYX_ELEM_FLOAT32, 1, &n);
  uint8_t* mb = NULL;
  size_t ml = 0;
  otm_serialize(m, &mb, &ml);
  otm_free(m);
  Onnx__ModelProto* mp = onnx__model_proto__unpack(NULL, ml, mb);
  assert_non_null(mp);
  free(mb);
  Onnx__GraphProto* graph = mp->graph;
  Onnx__TensorProto* w = graph->initializer[0];

  /* W, then raw_data again: key (9 << 3) | 2, b's length, b's bytes */
  const size_t wl = onnx__tensor_proto__get_packed_size(w);
  uint8_t* wb = malloc(wl + 16 + blen);
  onnx__tensor_proto__pack(w, wb);
  size_t wpos = wl;
  wb[wpos++] = 0x4a;
  wpos += put_varint(wb + wpos, blen);
  memcpy(wb + wpos, b, blen);
  wpos += blen;
  /* the graph without initializers, then field 5 holding W */
  graph->n_initializer = 0;
  const size_t gl = onnx__graph_proto__get_packed_size(graph);
  uint8_t* gb = malloc(gl + 16 + wpos);
  onnx__graph_proto__pack(graph, gb);
  graph->n_initializer = 1;
  size_t gpos = gl;
  gb[gpos++] = 0x2a;
  gpos += put_varint(gb + gpos, wpos);
  memcpy(gb + gpos, wb, wpos);
  gpos += wpos;
  free(wb);
  /* the model without its graph, then field 7 holding the graph */
  mp->graph = NULL;
  const size_t hl = onnx__model_proto__get_packed_size(mp);
  uint8_t* file = malloc(hl + 16 + gpos);
  onnx__model_proto__pack(mp, file);
  mp->graph = graph;
  size_t fpos = hl;
  file[fpos++] = 0x3a;
  fpos += put_varint(file + fpos, gpos);
  memcpy(file + fpos, gb, gpos);
  fpos += gpos;
  free(gb);
  onnx__model_proto__free_unpacked(mp, NULL);

  char* dir = otm_temp_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  assert_true(otm_write_file(path, file, fpos));
  OxGraph* g = NULL;
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);
  const OxValue* v = find(g, "W");
  assert_int_equal(v->constant->count, (size_t)n);
  assert_memory_equal(v->constant->data, b, blen); /* the last raw_data */
  ox_graph_free(g);
  g = NULL;
  st = ox_model_load_bytes(file, fpos, NULL, "mem", NULL, &g);
  if (st) fail_msg("%s", st->message);
  assert_memory_equal(find(g, "W")->constant->data, b, blen);
  ox_graph_free(g);
  free(file);
  free(a);
  free(b);
  otm_remove_dir(dir);
  free(dir);
}

static long peak_rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) v = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return v;
}

/* 48 MiB of weights in 12 initializers: the file is written by a child
 * process (building and serializing it takes memory of its own), then
 * this process's peak RSS is read before and after loading it. */
static void test_stream_peak_memory(void** state) {
  (void)state;
  /* sanitizers and valgrind keep shadow memory of their own beside the data */
  const char* preload = getenv("LD_PRELOAD");
  bool instrumented = preload && strstr(preload, "vgpreload");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  instrumented = true;
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  instrumented = true;
#endif
#endif
  if (peak_rss_kib() < 0 || instrumented) {
    print_message("skipped: no /proc/self/status, or a sanitizer or valgrind\n");
    skip();
  }
  unsetenv("ONYX_MMAP_FILES"); /* the mapped path reads the file whole */
  enum { PARTS = 12 };
  const int64_t n = (int64_t)1 << 20; /* 4 MiB of float32 each */
  char* dir = otm_temp_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    OxTestModel* m = otm_new(17);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
    otm_node(m, "Relu", "relu", "X", "Y");
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
    for (int i = 0; i < PARTS; i++) {
      char name[16];
      snprintf(name, sizeof name, "W%d", i);
      otm_initializer(m, name, ONYX_ELEM_FLOAT32, 1, &n, NULL);
      otm_output(m, name, ONYX_ELEM_FLOAT32, 1, &n);
    }
    _exit(otm_write(m, path) ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const long before = peak_rss_kib();
  OxGraph* g = NULL;
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);
  const long after = peak_rss_kib();
  const long weights = PARTS * 4 * 1024; /* KiB */
  print_message("peak RSS: %ld KiB before, %ld after loading %ld KiB of weights\n", before, after,
                weights);
  /* whole-file loading holds the file and the copies: about 2x */
  assert_true(after - before < weights + weights / 4);
  ox_graph_free(g);
  otm_remove_dir(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_matches_written),
      cmocka_unit_test(test_stream_duplicate_raw_data),
      cmocka_unit_test(test_stream_peak_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
