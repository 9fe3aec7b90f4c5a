/* test_onednn_cache.c — the oneDNN provider's compiled-group cache entries
 * (dnnl_compile.c: save_compiled / load_compiled): a second session loads
 * the chain from the cache (the log says so) with every stage's weights taken
 * from the entry, and computes exactly what the first one did, which matches
 * the CPU provider; a stored layout the primitive did not choose makes that
 * stage reorder as without a cache; entries of another oneDNN build, another
 * ISA, payload format or stage count, and corrupt or truncated ones, are
 * refused with the reason, rebuilt and rewritten; a group with a symbolic
 * batch caches no plan and still works. Tampered entries are resealed
 * (ox_cc_checksum) so that the provider's own checks are the ones tested. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dnnl_ep.h"
#include "onyx/onyx.h"
#include "ox_compile_cache.h"
#include "ox_test_models.h"

#define C  16
#define HH 9
#define WW 7
#define NX (C * HH * WW)

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static char logbuf[1 << 16];
static size_t loglen;
static int warnings;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  (void)user;
  if (sev >= ONYX_LOG_WARNING) warnings++;
  int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s\n", msg);
  if (n > 0) loglen += (size_t)n < sizeof logbuf - loglen ? (size_t)n : sizeof logbuf - loglen - 1;
}

static void log_reset(void) {
  loglen = 0;
  logbuf[0] = '\0';
  warnings = 0;
}

/* y = Relu(Conv2(Relu(Conv1(x)))), 16 -> 16 channels, 3x3, pads 1: one
 * two-stage chain on oneDNN. `batch` "1" or a symbolic "N". */
static void model_bytes(const char* batch, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(15);
  char shape[64];
  snprintf(shape, sizeof shape, "%s,%d,%d,%d", batch, C, HH, WW);
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, shape);
  static float w1[C * C * 9], w2[C * C * 9], b[C];
  for (int i = 0; i < C * C * 9; i++) {
    w1[i] = (float)((i * 37) % 23 - 11) / 60.0f;
    w2[i] = (float)((i * 53) % 29 - 14) / 70.0f;
  }
  for (int i = 0; i < C; i++)
    b[i] = (float)(i % 5 - 2) / 10.0f;
  otm_initializer(m, "w1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C, C, 3, 3}, w1);
  otm_initializer(m, "w2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C, C, 3, 3}, w2);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, b);
  otm_output_s(m, "y", ONYX_ELEM_FLOAT32, shape);
  OxTestNode* c1 = otm_node(m, "Conv", "conv1", "x,w1,b", "c1");
  otm_attr_ints(c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_node(m, "Relu", "relu1", "c1", "r1");
  OxTestNode* c2 = otm_node(m, "Conv", "conv2", "r1,w2,b", "c2");
  otm_attr_ints(c2, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_node(m, "Relu", "relu2", "c2", "y");
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static char dir[256];

static OnyxSession* open_session(const char* provider, const char* batch, const char* cache) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  model_bytes(batch, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
  ok(onyx_session_options_set_log_callback(o, on_log, NULL));
  ok(onyx_session_options_add_provider(o, provider, NULL, 0, 1));
  if (cache) ok(onyx_session_options_set_cache_dir(o, cache));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

/* y for a fixed x (malloc'ed). */
static float* run(OnyxSession* s) {
  static float x[NX];
  for (int i = 0; i < NX; i++)
    x[i] = sinf(0.37f * (float)i);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, C, HH, WW}, 4, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(out)), NX);
  float* y = malloc(sizeof(float) * NX);
  assert_non_null(y);
  memcpy(y, onyx_tensor_data(onyx_value_tensor(out)), sizeof(float) * NX);
  onyx_value_release(out);
  onyx_value_release(in);
  return y;
}

static float* reference;

/* One onednn session through the cache: its output, checked against the
 * CPU provider's. */
static float* run_cached(const char* batch) {
  OnyxSession* s = open_session("onednn", batch, dir);
  float* y = run(s);
  onyx_session_release(s);
  int positive = 0;
  for (int i = 0; i < NX; i++) {
    if (fabsf(y[i] - reference[i]) > 1e-4f + 1e-4f * fabsf(reference[i]))
      fail_msg("element %d: onednn %.7g, cpu %.7g", i, (double)y[i], (double)reference[i]);
    positive += y[i] > 0.0f;
  }
  assert_true(positive > 50 && positive < NX);
  return y;
}

static int setup(void** state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/onyx-dnnl-cgc-XXXXXX");
  assert_non_null(mkdtemp(dir));
  log_reset();
  return 0;
}

static int teardown(void** state) {
  (void)state;
  DIR* d = opendir(dir);
  if (d) {
    struct dirent* e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[512];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
  return 0;
}

static int entries(char* first, size_t len) {
  int n = 0;
  DIR* d = opendir(dir);
  assert_non_null(d);
  struct dirent* e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 6 || strcmp(e->d_name + l - 6, OX_CC_SUFFIX)) continue;
    if (!n && first) snprintf(first, len, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

static uint8_t* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Writes the entry back with its payload checksum recomputed. */
static void write_resealed(const char* path, uint8_t* b, size_t len) {
  uint64_t sum = ox_cc_checksum(b + OX_CC_HEADER_BYTES, len - OX_CC_HEADER_BYTES);
  for (int i = 0; i < 8; i++)
    b[OX_CC_OFF_CHECKSUM + i] = (uint8_t)(sum >> (8 * i));
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, len, f), len);
  fclose(f);
}

static uint32_t get32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static void put32(uint8_t* p, uint32_t v) {
  memcpy(p, &v, 4);
}

static int count(const char* needle) {
  int n = 0;
  for (const char* p = logbuf; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

/* Cold then warm: the warm session loads the chain, builds no plan from the
 * plain weights, and its output is the cold one's, bit for bit. */
static void test_warm_equals_cold(void** state) {
  (void)state;
  float* cold = run_cached("1");
  assert_int_equal(count("saved group"), 1);
  assert_int_equal(count("loaded from"), 0);
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  const uint8_t* p = b + OX_CC_HEADER_BYTES;
  assert_memory_equal(p, DNNL_CACHE_MAGIC, 8);
  assert_int_equal(get32(p + DNNL_CACHE_OFF_STAGES), 2); /* conv1+relu1, conv2+relu2 */
  assert_int_equal(get32(p + DNNL_CACHE_OFF_PLANS), 1);
  /* Both convolutions' weights are stored: at least 2 x 16x16x3x3 floats. */
  assert_true(len > OX_CC_HEADER_BYTES + DNNL_CACHE_HEADER_BYTES + 2 * C * C * 9 * sizeof(float));
  free(b);
  log_reset();
  float* warm = run_cached("1");
  assert_int_equal(warnings, 0);
  assert_int_equal(count("loaded from"), 1);
  assert_int_equal(count("saved group"), 0);
  assert_int_equal(count("in another layout"), 0); /* every stage took the stored weights */
  assert_memory_equal(cold, warm, sizeof(float) * NX);
  free(cold);
  free(warm);
}

/* A tampered (resealed) entry: one warning naming the file and `want`,
 * correct outputs, the entry rewritten and loaded by the next session. */
static void expect_refused(const char* path, const char* want) {
  log_reset();
  free(run_cached("1"));
  assert_int_equal(warnings, 1);
  if (!strstr(logbuf, path) || !strstr(logbuf, want))
    fail_msg("expected a warning naming %s with '%s'; log:\n%s", path, want, logbuf);
  assert_int_equal(count("saved group"), 1);
  log_reset();
  free(run_cached("1"));
  assert_int_equal(warnings, 0);
  assert_int_equal(count("loaded from"), 1);
}

static void tamper(size_t payload_off, uint32_t value, const char* want) {
  free(run_cached("1"));
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  put32(b + OX_CC_HEADER_BYTES + payload_off, value);
  write_resealed(path, b, len);
  free(b);
  expect_refused(path, want);
}

static void test_other_onednn_version(void** state) {
  (void)state;
  tamper(DNNL_CACHE_OFF_VERSION, 99, "entry made by oneDNN 99.");
}

static void test_other_isa(void** state) {
  (void)state;
  tamper(DNNL_CACHE_OFF_ISA, 0x7fff0000, "entry made for CPU ISA other (0x7fff0000)");
}

static void test_other_payload_format(void** state) {
  (void)state;
  tamper(DNNL_CACHE_OFF_FORMAT, 7, "entry payload format 7; this provider reads 1");
}

static void test_other_stage_count(void** state) {
  (void)state;
  tamper(DNNL_CACHE_OFF_STAGES, 9, "entry has 9 stages");
}

/* Cut inside the weights, resealed: the provider's bounded reads refuse it. */
static void test_truncated_payload(void** state) {
  (void)state;
  free(run_cached("1"));
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  uint64_t n = len - 1000 - OX_CC_HEADER_BYTES;
  for (int i = 0; i < 8; i++)
    b[OX_CC_OFF_LENGTH + i] = (uint8_t)(n >> (8 * i));
  write_resealed(path, b, len - 1000);
  free(b);
  expect_refused(path, "entry truncated or malformed");
}

/* A flipped weight byte without resealing: the host's checksum catches it. */
static void test_corrupt_weights(void** state) {
  (void)state;
  free(run_cached("1"));
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  b[len - 100] ^= 0x10;
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, len, f), len);
  fclose(f);
  free(b);
  expect_refused(path, "checksum mismatch");
}

/* A stored weights layout the primitive did not choose (resealed): that
 * stage reorders the model's weights as without a cache, says so at verbose
 * level, and computes the same; it is not an error. */
static void test_other_layout_reorders(void** state) {
  (void)state;
  float* cold = run_cached("1");
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  /* Stage 0: after the header, the plan's shapes and its u32 flag comes its
   * dnnl_memory_desc_t, whose dims start 8 bytes in. */
  size_t md = OX_CC_HEADER_BYTES + DNNL_CACHE_HEADER_BYTES +
              sizeof(int64_t) * DNNL_MAX_CHAIN_IN * (DNNL_MAX_RANK + 1) + 4;
  assert_int_equal(get32(b + md - 4), 1);
  b[md + 8] ^= 0x01;
  write_resealed(path, b, len);
  free(b);
  log_reset();
  float* warm = run_cached("1");
  assert_int_equal(warnings, 0);
  assert_int_equal(count("loaded from"), 1);
  assert_int_equal(count("in another layout"), 1); /* stage 0 only */
  assert_memory_equal(cold, warm, sizeof(float) * NX);
  free(cold);
  free(warm);
}

/* A symbolic batch: the entry holds no plan (shapes are known only at run
 * time); the warm session still loads it and computes correctly. */
static void test_symbolic_batch(void** state) {
  (void)state;
  free(run_cached("N"));
  char path[512];
  assert_int_equal(entries(path, sizeof path), 1);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  assert_int_equal(get32(b + OX_CC_HEADER_BYTES + DNNL_CACHE_OFF_PLANS), 0);
  assert_int_equal(len, OX_CC_HEADER_BYTES + DNNL_CACHE_HEADER_BYTES);
  free(b);
  log_reset();
  free(run_cached("N"));
  assert_int_equal(warnings, 0);
  assert_int_equal(count("loaded from"), 1);
}

static int group_setup(void** state) {
  (void)state;
  OnyxSession* cpu = open_session("cpu", "1", NULL);
  reference = run(cpu);
  onyx_session_release(cpu);
  return 0;
}

static int group_teardown(void** state) {
  (void)state;
  free(reference);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_warm_equals_cold, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_onednn_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_isa, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_payload_format, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_stage_count, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_payload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_weights, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_layout_reorders, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolic_batch, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
