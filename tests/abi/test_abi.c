/* test_abi.c — ABI compatibility (docs/abi.md, "Versioning rules"):
 *
 * - the current headers keep every ABI 1.0 field at its 1.0 offset and size
 *   (compared with the frozen copy in tests/abi/v1_0);
 * - a provider compiled against the frozen 1.0 headers loads and runs;
 * - a provider built for a newer minor, whose tables are larger than the
 *   host knows, loads and runs; one that needs the newer host refuses
 *   clearly, and one whose table is too small is refused;
 * - a provider of another major is refused with a message naming both
 *   versions and the library's path.
 * The providers are tests/abi/abi_provider.c; expected messages come from
 * the rules in docs/abi.md, expected values are worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_host_api.h"
#include "abi_fields.h"
#include "abi_layout.h"
#include "ox_session.h"
#include "ox_test_models.h"

static char g_dir[PATH_MAX];

static int setup(void** state) {
  (void)state;
  if (!realpath(ABI_PROVIDER_DIR, g_dir)) {
    fprintf(stderr, "%s: missing (build the onyx_test_abi_* targets)\n", ABI_PROVIDER_DIR);
    return -1;
  }
  /* The ABI providers first, then the build's own (cpu). */
  const char* orig = getenv("ONYX_PROVIDER_PATH");
  char path[3 * PATH_MAX];
  snprintf(path, sizeof path, "%s%s%s", g_dir, orig ? ":" : "", orig ? orig : "");
  setenv("ONYX_PROVIDER_PATH", path, 1);
  return 0;
}

static void lib_path(char* out, size_t size, const char* name) {
  snprintf(out, size, "%s/libonyx_ep_%s.so", g_dir, name);
}

static bool is_loaded(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

static void ok(OnyxStatus* st) {
  if (st) fprintf(stderr, "unexpected error: %s\n", onyx_status_message(st));
  assert_null(st);
}

/* --- Layout: the current headers against the frozen 1.0 copy -------------------------------- */

static void test_v1_0_fields_keep_offsets_and_sizes(void** state) {
  (void)state;
  size_t n = 0;
  for (; abi_fields_v1_0[n].type; n++) {
    const AbiField* old = &abi_fields_v1_0[n];
    const AbiField* cur = &abi_fields_current[n];
    assert_string_equal(old->type, cur->type);
    assert_string_equal(old->field, cur->field);
    if (old->offset != cur->offset || old->size != cur->size)
      fprintf(stderr, "%s.%s: ABI 1.0 offset %zu size %zu, now offset %zu size %zu\n", old->type,
              old->field, old->offset, old->size, cur->offset, cur->size);
    assert_int_equal(old->offset, cur->offset);
    assert_int_equal(old->size, cur->size);
  }
  assert_null(abi_fields_current[n].type);
  /* Every struct's field count is covered: 6 + 3 + 3 + 3 + 3 + 7 + 7 + 7 + 5 + 4 + 17 + 14
   * + 72 + 15 + 17, counted in onyx_types.h / onyx_ep.h 1.0 by hand. */
  assert_int_equal(n, 183);
  /* A table's last 1.0 field ends exactly at its pinned 1.0 size (no field
   * was left out of the list); checked for the two tables providers fill. */
  for (size_t i = 0; i < n; i++) {
    const AbiField* f = &abi_fields_v1_0[i];
    if (!strcmp(f->type, "OnyxProvider") && !strcmp(f->field, "release"))
      assert_int_equal(f->offset + f->size, ONYX_ABI_V1_0_PROVIDER_SIZE);
    if (!strcmp(f->type, "OnyxEp") && !strcmp(f->field, "release"))
      assert_int_equal(f->offset + f->size, ONYX_ABI_V1_0_EP_SIZE);
    if (!strcmp(f->type, "OnyxHostApi") && !strcmp(f->field, "infer_set_output"))
      assert_int_equal(f->offset + f->size, ONYX_ABI_V1_0_HOST_API_SIZE);
  }
}

static void test_struct_sizes_per_minor(void** state) {
  (void)state;
  for (size_t i = 0; abi_structs_v1_0[i].type; i++) {
    const AbiStruct* old = &abi_structs_v1_0[i];
    const AbiStruct* cur = &abi_structs_current[i];
    assert_string_equal(old->type, cur->type);
    assert_int_equal(old->abi_major, 1);
    assert_int_equal(old->abi_minor, 0);
    assert_int_equal(cur->abi_major, ONYX_ABI_VERSION_MAJOR);
    /* The frozen headers have exactly the pinned 1.0 sizes. */
    assert_int_equal(old->size, old->pinned);
    if (cur->grows)
      assert_true(cur->size >= old->size);
    else
      assert_int_equal(cur->size, old->size);
    /* Same minor, same sizes: growing a struct needs a minor bump. */
    if (cur->abi_minor == 0) assert_int_equal(cur->size, old->size);
  }
  /* The host's own table says what it is. */
  const OnyxHostApi* h = ox_host_api();
  assert_int_equal(h->abi_major, ONYX_ABI_VERSION_MAJOR);
  assert_int_equal(h->abi_minor, ONYX_ABI_VERSION_MINOR);
  assert_int_equal(h->struct_size, sizeof(OnyxHostApi));
}

/* The fields ABI 1.1 appends, in order, each a pointer (8 bytes on x86-64
 * and AArch64): OnyxHostApi's start at 568, where 1.0 ends, and the last
 * one ends at the pinned 1.1 size, 664; OnyxEp's start at 136 and end at
 * 160. The offsets are counted by hand from those starts. */
static void test_v1_1_fields_at_their_offsets(void** state) {
  (void)state;
  static const struct {
    const char* field;
    size_t offset, want;
  } host[] = {
      {"value_consumer_count", offsetof(OnyxHostApi, value_consumer_count), 568},
      {"value_consumer", offsetof(OnyxHostApi, value_consumer), 576},
      {"value_is_graph_output", offsetof(OnyxHostApi, value_is_graph_output), 584},
      {"edit_replace", offsetof(OnyxHostApi, edit_replace), 592},
      {"edit_set_attr_int", offsetof(OnyxHostApi, edit_set_attr_int), 600},
      {"edit_set_attr_float", offsetof(OnyxHostApi, edit_set_attr_float), 608},
      {"edit_set_attr_ints", offsetof(OnyxHostApi, edit_set_attr_ints), 616},
      {"edit_set_attr_string", offsetof(OnyxHostApi, edit_set_attr_string), 624},
      {"blob_write", offsetof(OnyxHostApi, blob_write), 632},
      {"ctx_should_stop", offsetof(OnyxHostApi, ctx_should_stop), 640},
      {"tensor_string_len", offsetof(OnyxHostApi, tensor_string_len), 648},
      {"node_attr_strings_lens", offsetof(OnyxHostApi, node_attr_strings_lens), 656},
  };
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
    if (host[i].offset != host[i].want)
      fail_msg("OnyxHostApi.%s at %zu, want %zu", host[i].field, host[i].offset, host[i].want);
  assert_int_equal(ONYX_ABI_V1_0_HOST_API_SIZE, 568);
  assert_int_equal(ONYX_ABI_V1_1_HOST_API_SIZE, 664);
  assert_int_equal(sizeof(OnyxHostApi), ONYX_ABI_V1_1_HOST_API_SIZE);
  assert_int_equal(offsetof(OnyxEp, transform), 136);
  assert_int_equal(offsetof(OnyxEp, save_compiled), 144);
  assert_int_equal(offsetof(OnyxEp, load_compiled), 152);
  assert_int_equal(sizeof(OnyxEp), ONYX_ABI_V1_1_EP_SIZE);
  assert_int_equal(ONYX_ABI_V1_1_EP_SIZE, 160);
  /* The host fills every 1.1 slot. */
  const OnyxHostApi* h = ox_host_api();
  assert_non_null(h->tensor_string_len);
  assert_non_null(h->ctx_should_stop);
  assert_non_null(h->node_attr_strings_lens);
}

/* --- Loading providers of other versions -------------------------------------------------- */

/* X[2,3] -> Add(X, X) -> s -> Mul(s, X) -> Y, so Y = 2 * X * X. */
static OnyxStatus* try_session(const char* first, const char* second, OnyxSession** s) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, first, NULL, 0, 1));
  if (second) ok(onyx_session_options_add_provider(o, second, NULL, 0, 1));
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Add", "add", "X,X", "s");
  otm_node(m, "Mul", "mul", "s,X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  free(bytes);
  onyx_session_options_release(o);
  return st;
}

static OnyxSession* open_session(const char* first, const char* second) {
  OnyxSession* s = NULL;
  ok(try_session(first, second, &s));
  return s;
}

static void expect_two_x_squared(OnyxSession* s) {
  const float x[6] = {-2, -1, 0, 1, 2, 3};
  const float want[6] = {8, 2, 0, 2, 8, 18};
  OnyxValue *in = NULL, *out = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &in));
  ok(onyx_session_run(s, NULL, (const char*[]){"X"}, (const OnyxValue* const*)&in, 1,
                      (const char*[]){"Y"}, 1, &out));
  const float* y = onyx_tensor_data(onyx_value_tensor(out));
  for (int i = 0; i < 6; i++)
    assert_float_equal(y[i], want[i], 0);
  onyx_value_release(out);
  onyx_value_release(in);
}

static void test_provider_built_against_v1_0_headers_runs(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  lib_path(path, sizeof path, "abiold");
  OnyxSession* s = open_session("abiold", "cpu");
  const OnyxProvider* p = s->prog.eps[0].lib->provider;
  assert_int_equal(p->abi_major, 1);
  assert_int_equal(p->abi_minor, 0);
  assert_int_equal(p->struct_size, ONYX_ABI_V1_0_PROVIDER_SIZE);
  /* Add ran on it (default placement: its registry), Mul on the CPU. */
  assert_string_equal(onyx_session_provider_name(s, 0), "abiold");
  assert_int_equal(onyx_session_provider_node_count(s, 0), 1);
  assert_int_equal(onyx_session_provider_node_count(s, 1), 1);
  expect_two_x_squared(s);
  onyx_session_release(s);
  assert_false(is_loaded(path));
}

static void test_newer_minor_provider_runs_in_older_host(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  lib_path(path, sizeof path, "abinewer");
  OnyxSession* s = open_session("abinewer", "abiold");
  const OnyxProvider* p = s->prog.eps[0].lib->provider;
  assert_int_equal(p->abi_major, ONYX_ABI_VERSION_MAJOR);
  assert_int_equal(p->abi_minor, ONYX_ABI_VERSION_MINOR + 1);
  assert_true(p->struct_size > sizeof(OnyxProvider));           /* a larger table ... */
  assert_true(s->prog.eps[0].ep->struct_size > sizeof(OnyxEp)); /* ... and a larger EP */
  /* Its kernel definition was larger too; the registry kept what it knows. */
  assert_int_equal(ox_kreg_count(s->prog.eps[0].lib->kernels), 1);
  assert_string_equal(ox_kreg_at(s->prog.eps[0].lib->kernels, 0)->def.op_type, "Mul");
  /* Mul on abinewer (its own get_capability), Add on the 1.0 provider. */
  assert_int_equal(onyx_session_provider_node_count(s, 0), 1);
  assert_int_equal(onyx_session_provider_node_count(s, 1), 1);
  expect_two_x_squared(s);
  char* explain = NULL;
  ok(onyx_session_explain(s, &explain));
  assert_non_null(strstr(explain, "abinewer: only Mul")); /* its decline reason */
  onyx_free(explain);
  onyx_session_release(s);
  assert_false(is_loaded(path));
}

static void expect_refused(const char* name, OnyxStatusCode code, const char* fragment) {
  char path[2 * PATH_MAX], named[3 * PATH_MAX];
  lib_path(path, sizeof path, name);
  snprintf(named, sizeof named, "provider library '%s'", path);
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), name, NULL, &lib);
  assert_non_null(st);
  assert_null(lib);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code || !strstr(msg, named) || !strstr(msg, fragment))
    fprintf(stderr, "message: %s\nwant: %s ... %s\n", msg, named, fragment);
  assert_int_equal(onyx_status_code(st), code);
  assert_non_null(strstr(msg, named));
  assert_non_null(strstr(msg, fragment));
  onyx_status_release(st);
  assert_false(is_loaded(path)); /* a refusal unloads */
}

static void test_newer_minor_needing_newer_host_refuses_clearly(void** state) {
  (void)state;
  char want[256];
  snprintf(want, sizeof want,
           "onyx_provider_init failed: abineeds needs a host of ABI %d.%d or newer (host API "
           "table of %zu bytes); this host implements ABI %d.%d (%zu bytes)",
           ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR + 1, sizeof(OnyxHostApi) + sizeof(void*),
           ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR, sizeof(OnyxHostApi));
  expect_refused("abineeds", ONYX_ABI_MISMATCH, want);
}

static void test_newer_minor_with_too_small_table_is_refused(void** state) {
  (void)state;
  char want[256];
  snprintf(want, sizeof want, "provider table struct_size %zu is smaller than the ABI 1.0 minimum",
           offsetof(OnyxProvider, device_count));
  expect_refused("abismall", ONYX_ABI_MISMATCH, want);
}

static void test_other_major_is_refused_naming_both_versions(void** state) {
  (void)state;
  char path[2 * PATH_MAX], want[3 * PATH_MAX];
  lib_path(path, sizeof path, "abimajor");
  snprintf(want, sizeof want,
           "provider library '%s' was built for Onyx ABI %d.0; this host implements ABI %d.%d",
           path, ONYX_ABI_VERSION_MAJOR + 1, ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR);
  expect_refused("abimajor", ONYX_ABI_MISMATCH, want);
  /* Through a session the same message comes back, and nothing is left. */
  OnyxSession* s = NULL;
  OnyxStatus* st = try_session("abimajor", NULL, &s);
  assert_null(s);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_ABI_MISMATCH);
  assert_non_null(strstr(onyx_status_message(st), want));
  onyx_status_release(st);
  assert_false(is_loaded(path));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_v1_0_fields_keep_offsets_and_sizes),
      cmocka_unit_test(test_struct_sizes_per_minor),
      cmocka_unit_test(test_v1_1_fields_at_their_offsets),
      cmocka_unit_test(test_provider_built_against_v1_0_headers_runs),
      cmocka_unit_test(test_newer_minor_provider_runs_in_older_host),
      cmocka_unit_test(test_newer_minor_needing_newer_host_refuses_clearly),
      cmocka_unit_test(test_newer_minor_with_too_small_table_is_refused),
      cmocka_unit_test(test_other_major_is_refused_naming_both_versions),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
