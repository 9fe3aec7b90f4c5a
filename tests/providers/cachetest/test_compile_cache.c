/* test_compile_cache.c — the compiled-group cache (session option cache_dir)
 * with the cachetest provider: a second session loads the group instead of
 * compiling it; corrupt, truncated, foreign and stale entries and an
 * unwritable folder each only warn (naming the file and the reason), rebuild
 * and give correct outputs; a provider built against ABI 1.0 is never asked
 * for the 1.1 slots. Expected outputs are computed here from the model's
 * definition, y = Relu((x + a) * m). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachetest.h"
#include "onyx/onyx.h"
#include "ox_compile_cache.h"
#include "ox_test_models.h"

#define N 12

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* --- Log capture ------------------------------------------------------------------------ */

static char logbuf[1 << 16];
static size_t loglen;
static int warnings;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  (void)user;
  pthread_mutex_lock(&log_mu);
  if (sev >= ONYX_LOG_WARNING) warnings++;
  int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s\n", msg);
  if (n > 0) loglen += (size_t)n < sizeof logbuf - loglen ? (size_t)n : sizeof logbuf - loglen - 1;
  pthread_mutex_unlock(&log_mu);
}

static void log_reset(void) {
  loglen = 0;
  logbuf[0] = '\0';
  warnings = 0;
}

/* --- Model, sessions ---------------------------------------------------------------------- */

static float add_k(int model, int i) {
  return (float)(i % 5) * 0.25f - 0.5f + (float)model;
}

static const float mul_k = 1.5f;

/* y = Relu((x + a) * m): a per element (it differs between model 0 and 1),
 * m one value. */
static void model_bytes(int model, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(15);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  float a[N];
  for (int i = 0; i < N; i++)
    a[i] = add_k(model, i);
  otm_initializer(m, "a", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4}, a);
  otm_initializer(m, "m", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1}, &mul_k);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  otm_node(m, "Add", "add", "x,a", "s");
  otm_node(m, "Mul", "mul", "s,m", "p");
  otm_node(m, "Relu", "relu", "p", "y");
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static OnyxStatus* open_session(int model, const char* dir, OnyxSession** s) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  model_bytes(model, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
  ok(onyx_session_options_set_log_callback(o, on_log, NULL));
  ok(onyx_session_options_add_provider_init(o, "cachetest", cachetest_init, 1));
  ok(onyx_session_options_set_no_implicit_cpu(o, 1));
  if (dir) ok(onyx_session_options_set_cache_dir(o, dir));
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

/* The number of elements of y that differ from the definition (-1: the run
 * failed); usable from any thread. */
static int wrong_outputs(OnyxSession* s, int model) {
  float x[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)i * 0.3f - 1.0f;
  OnyxValue* in = NULL;
  OnyxValue* out = NULL;
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxStatus* st =
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){3, 4}, 2, x, sizeof x, &in);
  if (!st)
    st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  int wrong = st ? -1 : 0;
  for (int i = 0; !st && i < N; i++) {
    float want = (x[i] + add_k(model, i)) * mul_k;
    wrong +=
        ((const float*)onyx_tensor_data(onyx_value_tensor(out)))[i] != (want > 0.0f ? want : 0.0f);
  }
  onyx_status_release(st);
  onyx_value_release(out);
  onyx_value_release(in);
  return wrong;
}

/* Runs the session and checks y against the definition. */
static void check_outputs(OnyxSession* s, int model) {
  float x[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)i * 0.3f - 1.0f;
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){3, 4}, 2, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const float* y = onyx_tensor_data(onyx_value_tensor(out));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(out)), N);
  int positive = 0;
  for (int i = 0; i < N; i++) {
    float want = (x[i] + add_k(model, i)) * mul_k;
    want = want > 0.0f ? want : 0.0f;
    if (y[i] != want) fail_msg("y[%d] = %g, want %g", i, (double)y[i], (double)want);
    positive += y[i] > 0.0f;
  }
  assert_true(positive > 2 && positive < N); /* the Relu clipped some, not all */
  onyx_value_release(out);
  onyx_value_release(in);
}

/* A session that must succeed; checks its outputs and releases it. */
static void session_ok(int model, const char* dir) {
  OnyxSession* s = NULL;
  ok(open_session(model, dir, &s));
  check_outputs(s, model);
  onyx_session_release(s);
}

/* --- Cache folder -------------------------------------------------------------------------- */

static char dir[256];

static int make_dir(void** state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/onyx-cgc-XXXXXX");
  assert_non_null(mkdtemp(dir));
  cachetest_compiles = cachetest_saves = cachetest_loads = cachetest_refusals = 0;
  cachetest_format = 1;
  cachetest_abi10 = cachetest_slot_misreads = 0;
  log_reset();
  return 0;
}

static int remove_dir(void** state) {
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

/* The entries in the folder: their count, and the first one's path. */
static int entries(char* first, size_t len) {
  int n = 0;
  DIR* d = opendir(dir);
  assert_non_null(d);
  struct dirent* e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (e->d_name[0] == '.') continue;
    assert_null(strstr(e->d_name, ".tmp.")); /* no temporary file is left behind */
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

static void write_file(const char* path, const uint8_t* b, size_t len) {
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, len, f), len);
  fclose(f);
}

/* Cold session then warm session: the entry to tamper with, in `path`. */
static void prime(char* path, size_t len) {
  session_ok(0, dir);
  assert_int_equal(cachetest_compiles, 1);
  assert_int_equal(cachetest_saves, 1);
  assert_int_equal(entries(path, len), 1);
}

/* After tampering: one session warns (naming the file and `reason`),
 * compiles, gives correct outputs and rewrites the entry, which the next
 * session loads without a warning. */
static void expect_rebuild(const char* path, const char* reason) {
  int compiles = cachetest_compiles, saves = cachetest_saves, loads = cachetest_loads;
  log_reset();
  session_ok(0, dir);
  assert_int_equal(warnings, 1);
  if (!strstr(logbuf, path) || !strstr(logbuf, reason))
    fail_msg("expected a warning naming %s and '%s'; log:\n%s", path, reason, logbuf);
  assert_non_null(strstr(logbuf, "compiling it again"));
  assert_int_equal(cachetest_compiles, compiles + 1);
  assert_int_equal(cachetest_saves, saves + 1);
  assert_int_equal(cachetest_loads, loads);
  log_reset();
  session_ok(0, dir);
  assert_int_equal(warnings, 0);
  assert_int_equal(cachetest_compiles, compiles + 1);
  assert_int_equal(cachetest_loads, loads + 1);
}

/* --- Tests ---------------------------------------------------------------------------------- */

static void test_second_session_hits(void** state) {
  (void)state;
  char path[512];
  OnyxSession *cold = NULL, *warm = NULL;
  ok(open_session(0, dir, &cold));
  assert_int_equal(cachetest_compiles, 1);
  assert_int_equal(cachetest_saves, 1);
  assert_int_equal(cachetest_loads, 0);
  assert_int_equal(entries(path, sizeof path), 1);
  assert_non_null(strstr(logbuf, "saved group"));
  ok(open_session(0, dir, &warm));
  assert_int_equal(cachetest_compiles, 1); /* not compiled again */
  assert_int_equal(cachetest_loads, 1);
  assert_int_equal(cachetest_saves, 1);
  assert_non_null(strstr(logbuf, "loaded from"));
  assert_non_null(strstr(logbuf, path));
  assert_int_equal(warnings, 0);
  check_outputs(cold, 0);
  check_outputs(warm, 0);
  onyx_session_release(cold);
  onyx_session_release(warm);
  /* The file is the header and the payload the provider wrote. */
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  assert_true(len > OX_CC_HEADER_BYTES);
  assert_memory_equal(b, OX_CC_MAGIC, 8);
  assert_memory_equal(b + OX_CC_HEADER_BYTES, "CTST", 4);
  free(b);
}

static void test_without_cache_dir(void** state) {
  (void)state;
  session_ok(0, NULL);
  session_ok(0, NULL);
  assert_int_equal(cachetest_compiles, 2);
  assert_int_equal(cachetest_saves, 0);
  assert_int_equal(entries(NULL, 0), 0);
}

static void test_other_content_other_entry(void** state) {
  (void)state;
  session_ok(0, dir);
  session_ok(1, dir); /* another constant: another key */
  assert_int_equal(cachetest_compiles, 2);
  assert_int_equal(entries(NULL, 0), 2);
  session_ok(1, dir);
  session_ok(0, dir);
  assert_int_equal(cachetest_compiles, 2);
  assert_int_equal(cachetest_loads, 2);
}

static void test_flipped_payload_byte(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  b[len - 3] ^= 0x40; /* in the payload's last bytes */
  write_file(path, b, len);
  free(b);
  expect_rebuild(path, "checksum mismatch");
}

static void test_flipped_magic(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  b[1] ^= 0xff;
  write_file(path, b, len);
  free(b);
  expect_rebuild(path, "bad magic");
}

static void test_truncated(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  write_file(path, b, len - 5);
  expect_rebuild(path, "truncated");
  write_file(path, b, 20); /* inside the header */
  expect_rebuild(path, "truncated");
  free(b);
}

static void test_huge_length(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  for (int i = 0; i < 8; i++)
    b[OX_CC_OFF_LENGTH + i] = i == 7 ? 0x40 : 0; /* 2^62 bytes */
  write_file(path, b, len);
  free(b);
  expect_rebuild(path, "over the limit");
}

/* An entry of another group under this group's name: its header's key echo
 * gives it away. */
static void test_foreign_key(void** state) {
  (void)state;
  char path0[512], other[512];
  prime(path0, sizeof path0);
  session_ok(1, dir);
  assert_int_equal(entries(NULL, 0), 2);
  /* The entry of model 1: the one that is not path0. */
  DIR* d = opendir(dir);
  struct dirent* e;
  other[0] = '\0';
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      char p[512];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (strcmp(p, path0)) snprintf(other, sizeof other, "%s", p);
    }
  closedir(d);
  assert_true(other[0]);
  size_t len = 0;
  uint8_t* b = read_file(other, &len);
  write_file(path0, b, len);
  free(b);
  expect_rebuild(path0, "key mismatch");
}

/* An entry of another host entry format. */
static void test_other_entry_format(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  b[OX_CC_OFF_FORMAT] = 2;
  write_file(path, b, len);
  free(b);
  expect_rebuild(path, "entry format 2");
}

/* A payload that passes every host check (its checksum is resealed) but that
 * the provider refuses: the provider's message is in the warning. */
static void test_provider_refuses_payload(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  size_t len = 0;
  uint8_t* b = read_file(path, &len);
  uint8_t* payload = b + OX_CC_HEADER_BYTES;
  payload[8] ^= 1; /* the op count */
  uint64_t sum = ox_cc_checksum(payload, len - OX_CC_HEADER_BYTES);
  for (int i = 0; i < 8; i++)
    b[OX_CC_OFF_CHECKSUM + i] = (uint8_t)(sum >> (8 * i));
  write_file(path, b, len);
  free(b);
  expect_rebuild(path, "provider 'cachetest' refused it: provider 'cachetest': entry for another "
                       "group");
  assert_int_equal(cachetest_refusals, 1);
}

/* The provider's payload format moved on: the old entry is stale. */
static void test_stale_entry(void** state) {
  (void)state;
  char path[512];
  prime(path, sizeof path);
  cachetest_format = 2;
  expect_rebuild(path, "stale entry: payload format differs");
}

static void test_unwritable_dir(void** state) {
  (void)state;
  /* A folder below a regular file cannot be made by anyone, root included. */
  char file[512], bad[600];
  snprintf(file, sizeof file, "%s/plain-file", dir);
  write_file(file, (const uint8_t*)"x", 1);
  snprintf(bad, sizeof bad, "%s/cache", file);
  session_ok(0, bad);
  assert_int_equal(cachetest_compiles, 1);
  assert_int_equal(cachetest_saves, 1);
  assert_int_equal(warnings, 1);
  assert_non_null(strstr(logbuf, "cannot save group"));
  assert_non_null(strstr(logbuf, bad));
  session_ok(0, bad); /* still works, still compiles */
  assert_int_equal(cachetest_compiles, 2);
  unlink(file);
}

static void test_abi10_ep_slots_not_read(void** state) {
  (void)state;
  cachetest_abi10 = 1;
  session_ok(0, dir);
  session_ok(0, dir);
  assert_int_equal(cachetest_compiles, 2);
  assert_int_equal(cachetest_slot_misreads, 0);
  assert_int_equal(entries(NULL, 0), 0);
}

static void test_config_and_setter(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  OnyxStatus* st = onyx_session_options_set_cache_dir(o, "");
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  assert_non_null(strstr(onyx_status_message(st), "onyx_session_options_set_cache_dir"));
  onyx_status_release(st);
  ok(onyx_session_options_set_cache_dir(o, NULL));
  char text[512];
  int n = snprintf(text, sizeof text, "{\"session\": {\"cache_dir\": \"%s\"}}", dir);
  ok(onyx_session_options_load_config_text(o, text, (size_t)n, "inline"));
  const char* bad = "{\"session\": {\"cache_dir\": 3}}";
  st = onyx_session_options_load_config_text(o, bad, strlen(bad), "inline");
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_CONFIG);
  assert_non_null(strstr(onyx_status_message(st), "session.cache_dir"));
  onyx_status_release(st);
  /* The config's folder is used. */
  uint8_t* bytes = NULL;
  size_t len = 0;
  model_bytes(0, &bytes, &len);
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  ok(onyx_session_options_add_provider_init(o, "cachetest", cachetest_init, 1));
  ok(onyx_session_options_set_no_implicit_cpu(o, 1));
  for (int i = 0; i < 2; i++) {
    OnyxSession* s = NULL;
    ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
    check_outputs(s, 0);
    onyx_session_release(s);
  }
  assert_int_equal(cachetest_compiles, 1);
  assert_int_equal(cachetest_loads, 1);
  free(bytes);
  onyx_session_options_release(o);
}

/* Sessions on several threads creating and reading one entry at once: every
 * one works, no warning, one complete entry, no temporary file left. */
static void* concurrent_worker(void* arg) {
  int* wrong = arg;
  for (int k = 0; k < 3; k++) {
    OnyxSession* s = NULL;
    OnyxStatus* st = open_session(0, dir, &s);
    int w = st ? -1 : wrong_outputs(s, 0);
    onyx_status_release(st);
    onyx_session_release(s);
    if (w) *wrong = w;
  }
  return NULL;
}

static void test_concurrent_sessions(void** state) {
  (void)state;
  pthread_t t[4];
  int wrong[4] = {0};
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, concurrent_worker, &wrong[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(wrong[i], 0);
  }
  assert_int_equal(warnings, 0);
  assert_int_equal(entries(NULL, 0), 1);
  assert_int_equal(cachetest_compiles + cachetest_loads, 12);
  assert_true(cachetest_compiles >= 1);
}

/* The key's hash: deterministic, sensitive to every byte and to the length,
 * the same whatever the pieces it is fed in. */
static void test_hash(void** state) {
  (void)state;
  uint8_t data[100], a[16], b[16];
  for (int i = 0; i < 100; i++)
    data[i] = (uint8_t)(i * 7);
  OxHash128 h;
  ox_hash128_init(&h, 0);
  ox_hash128_add(&h, data, 100);
  ox_hash128_final(&h, a);
  ox_hash128_init(&h, 0);
  ox_hash128_add(&h, data, 3);
  ox_hash128_add(&h, data + 3, 40);
  ox_hash128_add(&h, data + 43, 57);
  ox_hash128_final(&h, b);
  assert_memory_equal(a, b, 16);
  for (int i = 0; i < 100; i += 9) {
    data[i] ^= 1;
    ox_hash128_init(&h, 0);
    ox_hash128_add(&h, data, 100);
    ox_hash128_final(&h, b);
    assert_memory_not_equal(a, b, 16);
    assert_memory_not_equal(a, b, 8); /* each half changes */
    assert_memory_not_equal(a + 8, b + 8, 8);
    data[i] ^= 1;
  }
  uint8_t zeros[64] = {0};
  ox_hash128_init(&h, 0);
  ox_hash128_add(&h, zeros, 31);
  ox_hash128_final(&h, a);
  ox_hash128_init(&h, 0);
  ox_hash128_add(&h, zeros, 32);
  ox_hash128_final(&h, b);
  assert_memory_not_equal(a, b, 16); /* padding does not hide the length */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_second_session_hits, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_without_cache_dir, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_other_content_other_entry, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_flipped_payload_byte, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_flipped_magic, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_truncated, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_huge_length, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_foreign_key, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_other_entry_format, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_provider_refuses_payload, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_stale_entry, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_unwritable_dir, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_abi10_ep_slots_not_read, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_config_and_setter, make_dir, remove_dir),
      cmocka_unit_test_setup_teardown(test_concurrent_sessions, make_dir, remove_dir),
      cmocka_unit_test(test_hash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
