/* test_iobinding.c — IO binding through the public API: preallocated outputs
 * written in place, session-allocated outputs reused across runs, values on
 * another memory (an in-process provider with its own allocator), and the
 * errors. Expected values are computed by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

/* y = Relu(x + b), b = [1, -2, 0.5]; z = x * 2 (Add x,x). */
static OnyxSession* make_session(const OnyxSessionOptions* o) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, -2, 0.5f});
  otm_node(m, "Add", "add", "x,b", "s");
  otm_node(m, "Relu", "relu", "s", "y");
  otm_node(m, "Add", "twice", "x,x", "z");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  free(bytes);
  otm_free(m);
  return s;
}

static OnyxValue* f32(const float* data, int64_t d0, int64_t d1) {
  OnyxValue* v = NULL;
  int64_t dims[2] = {d0, d1};
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 2, data,
                                  data ? (size_t)(d0 * d1) * sizeof(float) : 0, &v));
  return v;
}

static float* data_of(OnyxValue* v) {
  return (float*)onyx_tensor_data(onyx_value_tensor(v));
}

static void check6(const float* got, const float* want) {
  for (int i = 0; i < 6; i++)
    assert_float_equal(got[i], want[i], 0);
}

/* Preallocated outputs: written in place; the input's data is read anew at
 * every run; nothing is reallocated between runs. */
static void test_preallocated_outputs_in_place(void** state) {
  (void)state;
  OnyxSession* s = make_session(NULL);
  OnyxValue* x = f32((float[]){0, 1, 2, -3, 4, -5}, 2, 3);
  OnyxValue* y = f32(NULL, 2, 3);
  OnyxValue* z = f32(NULL, 2, 3);
  float* yd = data_of(y);
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  ots_ok(onyx_io_binding_bind_input(b, "x", x));
  ots_ok(onyx_io_binding_bind_output(b, "y", y));
  ots_ok(onyx_io_binding_bind_output(b, "z", z));
  assert_int_equal(onyx_io_binding_output_count(b), 2);
  assert_string_equal(onyx_io_binding_output_name(b, 0), "y");
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  /* relu([0,1,2,-3,4,-5] + [1,-2,.5,1,-2,.5]) = [1,0,2.5,0,2,0] */
  check6(data_of(y), (float[]){1, 0, 2.5f, 0, 2, 0});
  check6(data_of(z), (float[]){0, 2, 4, -6, 8, -10});
  /* New input contents, same buffers. */
  float* xd = data_of(x);
  for (int i = 0; i < 6; i++)
    xd[i] = (float)(i - 2); /* [-2,-1,0,1,2,3] */
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  assert_ptr_equal(data_of(y), yd);
  /* relu([-1,-3,.5,2,0,3.5]) */
  check6(data_of(y), (float[]){0, 0, 0.5f, 2, 0, 3.5f});
  check6(data_of(z), (float[]){-4, -2, 0, 2, 4, 6});
  /* get_outputs shares the bound memory. */
  OnyxValue* got[2] = {0};
  ots_ok(onyx_io_binding_get_outputs(b, got, 2));
  assert_ptr_equal(data_of(got[0]), yd);
  assert_ptr_equal(data_of(got[1]), data_of(z));
  onyx_values_release(got, 2);
  /* The binding holds references: the caller's values may go first. */
  onyx_value_release(x);
  onyx_value_release(z);
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  check6(yd, (float[]){0, 0, 0.5f, 2, 0, 3.5f});
  onyx_io_binding_release(b);
  onyx_value_release(y);
  onyx_session_release(s);
}

/* Session-allocated outputs: the buffer is reused when nobody holds it, and a
 * held value keeps its run's result. */
static void test_session_allocated_outputs_reused(void** state) {
  (void)state;
  OnyxSession* s = make_session(NULL);
  OnyxValue* x = f32((float[]){0, 1, 2, -3, 4, -5}, 2, 3);
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  ots_ok(onyx_io_binding_bind_input(b, "x", x));
  ots_ok(onyx_io_binding_bind_output_to_device(b, "z", NULL));
  ots_expect_error(onyx_io_binding_get_outputs(b, (OnyxValue* [1]){0}, 1), ONYX_INVALID_ARGUMENT,
                   "has not run");
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* first = NULL;
  ots_ok(onyx_io_binding_get_outputs(b, &first, 1));
  const float* p1 = data_of(first);
  check6(p1, (float[]){0, 2, 4, -6, 8, -10});
  onyx_value_release(first);
  data_of(x)[0] = 10; /* z[0] = 20 */
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* second = NULL;
  ots_ok(onyx_io_binding_get_outputs(b, &second, 1));
  assert_ptr_equal(data_of(second), p1); /* reused */
  assert_float_equal(data_of(second)[0], 20, 0);
  /* Held across a run: the run writes elsewhere, the held value is intact. */
  data_of(x)[0] = 7;
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* third = NULL;
  ots_ok(onyx_io_binding_get_outputs(b, &third, 1));
  assert_ptr_not_equal(data_of(third), data_of(second));
  assert_float_equal(data_of(second)[0], 20, 0);
  assert_float_equal(data_of(third)[0], 14, 0);
  onyx_value_release(second);
  onyx_value_release(third);
  onyx_io_binding_release(b);
  onyx_value_release(x);
  onyx_session_release(s);
}

static void test_binding_errors(void** state) {
  (void)state;
  OnyxSession* s = make_session(NULL);
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  OnyxValue* x = f32((float[]){0, 1, 2, -3, 4, -5}, 2, 3);
  OnyxValue* wrong = f32(NULL, 3, 2);
  ots_expect_error(onyx_io_binding_bind_input(b, "nope", x), ONYX_INVALID_ARGUMENT,
                   "unknown input 'nope'");
  ots_expect_error(onyx_io_binding_bind_input(b, "x", wrong), ONYX_INVALID_ARGUMENT,
                   "expected shape float32[2,3]");
  ots_expect_error(onyx_io_binding_bind_output(b, "w", x), ONYX_INVALID_ARGUMENT,
                   "unknown output 'w'");
  ots_expect_error(onyx_session_run_with_binding(s, NULL, b), ONYX_INVALID_ARGUMENT,
                   "no output is bound");
  ots_ok(onyx_io_binding_bind_output_to_device(b, "y", NULL));
  ots_expect_error(onyx_session_run_with_binding(s, NULL, b), ONYX_INVALID_ARGUMENT,
                   "input 'x' is not bound");
  OnyxMemoryDevice gpu = {.kind = ONYX_DEVICE_GPU, .vendor_id = 0x10de, .alignment = 256};
  ots_expect_error(onyx_io_binding_bind_output_to_device(b, "z", &gpu), ONYX_INVALID_ARGUMENT,
                   "no provider of the session serves");
  ots_ok(onyx_io_binding_bind_input(b, "x", x));
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  /* Clearing drops the bindings. */
  onyx_io_binding_clear(b);
  assert_int_equal(onyx_io_binding_output_count(b), 0);
  ots_expect_error(onyx_session_run_with_binding(s, NULL, b), ONYX_INVALID_ARGUMENT,
                   "no output is bound");
  /* A binding of another session. */
  OnyxSession* s2 = make_session(NULL);
  ots_expect_error(onyx_session_run_with_binding(s2, NULL, b), ONYX_INVALID_ARGUMENT,
                   "another session");
  onyx_session_release(s2);
  onyx_io_binding_release(b);
  onyx_value_release(x);
  onyx_value_release(wrong);
  onyx_session_release(s);
}

/* --- another memory: an in-process provider that serves its own allocator --------- */
static const OnyxHostApi* dev_host;
static int dev_copies;
#define DEV_VENDOR 0xfeedu

static void* dev_alloc(void* ctx, size_t bytes, size_t alignment) {
  (void)ctx;
  (void)alignment;
  return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
}
static void dev_free(void* ctx, void* p) {
  (void)ctx;
  free(p);
}
static const OnyxAllocator dev_allocator = {
    .struct_size = sizeof(OnyxAllocator),
    .device = {.kind = ONYX_DEVICE_OTHER, .vendor_id = DEV_VENDOR, .alignment = 64},
    .alloc = dev_alloc,
    .free = dev_free};

static const OnyxAllocator* dev_get_allocator(OnyxEp* ep, OnyxMemType t) {
  (void)ep;
  return t == ONYX_MEM_DEFAULT ? &dev_allocator : NULL;
}
static int dev_ours(const OnyxMemoryDevice* m) {
  return m->kind == ONYX_DEVICE_OTHER && m->vendor_id == DEV_VENDOR;
}
static int dev_can_copy(OnyxEp* ep, const OnyxMemoryDevice* a, const OnyxMemoryDevice* b) {
  (void)ep;
  return (dev_ours(a) || a->kind == ONYX_DEVICE_CPU) && (dev_ours(b) || b->kind == ONYX_DEVICE_CPU);
}
static OnyxStatus* dev_copy(OnyxEp* ep, const OnyxTensor* const* src, OnyxTensor* const* dst,
                            size_t n, OnyxStream* stream) {
  (void)ep;
  (void)stream;
  for (size_t i = 0; i < n; i++) {
    memcpy(dev_host->tensor_mutable_data(dst[i]), dev_host->tensor_data(src[i]),
           dev_host->tensor_byte_size(src[i]));
    dev_copies++;
  }
  return NULL;
}
static void dev_release(OnyxEp* ep) {
  (void)ep;
}
static OnyxStatus* dev_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}
static OnyxStatus* dev_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  static OnyxEp ep = {.struct_size = sizeof ep,
                      .get_allocator = dev_get_allocator,
                      .can_copy = dev_can_copy,
                      .copy_tensors = dev_copy,
                      .release = dev_release};
  ep.provider = p;
  *out = &ep;
  return NULL;
}
static const OnyxProvider dev_provider = {.struct_size = sizeof dev_provider,
                                          .abi_major = ONYX_ABI_VERSION_MAJOR,
                                          .abi_minor = ONYX_ABI_VERSION_MINOR,
                                          .name = "fakedev",
                                          .vendor = "test",
                                          .version = "1",
                                          .device_count = dev_count,
                                          .create_ep = dev_create};
static OnyxStatus* dev_init(const OnyxHostApi* host, const OnyxProvider** out) {
  dev_host = host;
  *out = &dev_provider;
  return NULL;
}

/* y on the provider's memory; then that value fed back as the input. */
static void test_outputs_and_inputs_on_another_memory(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  ots_ok(onyx_session_options_add_provider_init(o, "fakedev", dev_init, 1));
  ots_ok(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  OnyxSession* s = make_session(o);
  onyx_session_options_release(o);
  OnyxValue* x = f32((float[]){0, 1, 2, -3, 4, -5}, 2, 3);
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  ots_ok(onyx_io_binding_bind_input(b, "x", x));
  ots_ok(onyx_io_binding_bind_output_to_device(b, "y", &dev_allocator.device));
  dev_copies = 0;
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  assert_int_equal(dev_copies, 1); /* host result -> device */
  OnyxValue* y = NULL;
  ots_ok(onyx_io_binding_get_outputs(b, &y, 1));
  const OnyxMemoryDevice* m = onyx_tensor_memory(onyx_value_tensor(y));
  assert_int_equal(m->kind, ONYX_DEVICE_OTHER);
  assert_int_equal(m->vendor_id, DEV_VENDOR);
  check6(onyx_tensor_data(onyx_value_tensor(y)), (float[]){1, 0, 2.5f, 0, 2, 0});
  /* Feed the device value back: staged to host, then y = relu(y + b). */
  OnyxIoBinding* b2 = NULL;
  ots_ok(onyx_io_binding_create(s, &b2));
  ots_ok(onyx_io_binding_bind_input(b2, "x", y));
  OnyxValue* out = f32(NULL, 2, 3);
  ots_ok(onyx_io_binding_bind_output(b2, "y", out));
  ots_ok(onyx_session_run_with_binding(s, NULL, b2));
  assert_int_equal(dev_copies, 2); /* device input -> host */
  /* relu([1,0,2.5,0,2,0] + [1,-2,.5,1,-2,.5]) = [2,0,3,1,0,.5] */
  check6(data_of(out), (float[]){2, 0, 3, 1, 0, 0.5f});
  onyx_value_release(y);
  onyx_io_binding_release(b2);
  onyx_io_binding_release(b);
  onyx_value_release(out);
  onyx_value_release(x);
  onyx_session_release(s);
}

/* A preallocated output of the wrong shape for what the run produces, with a
 * symbolic model dim: the error names the output and both shapes. */
static void test_preallocated_shape_mismatch(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N");
  otm_node(m, "Relu", "r", "x", "y");
  otm_output_s(m, "y", ONYX_ELEM_FLOAT32, "N");
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  otm_free(m);
  OnyxValue *x = NULL, *y = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){3}, 1, (float[]){-1, 2, -3},
                                  3 * sizeof(float), &x));
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){4}, 1, NULL, 0, &y));
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  ots_ok(onyx_io_binding_bind_input(b, "x", x));
  ots_ok(onyx_io_binding_bind_output(b, "y", y));
  ots_expect_error(onyx_session_run_with_binding(s, NULL, b), ONYX_INVALID_ARGUMENT,
                   "output 'y': the bound tensor is float32[4] but the run produced float32[3]");
  onyx_io_binding_release(b);
  onyx_value_release(x);
  onyx_value_release(y);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_preallocated_outputs_in_place),
      cmocka_unit_test(test_session_allocated_outputs_reused),
      cmocka_unit_test(test_binding_errors),
      cmocka_unit_test(test_outputs_and_inputs_on_another_memory),
      cmocka_unit_test(test_preallocated_shape_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
