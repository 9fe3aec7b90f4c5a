/* test_dlpack.c — DLPack import and export: zero-copy both ways, the deleter
 * contract (called exactly once, when the last user lets go; never on a
 * refused import), and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

/* A producer's tensor: counts its deleter calls. */
typedef struct Producer {
  DLManagedTensor m;
  float data[6];
  int64_t shape[2];
  int64_t strides[2];
  int deleted;
} Producer;

static void producer_delete(DLManagedTensor* m) {
  ((Producer*)m->manager_ctx)->deleted++;
}

static void producer_init(Producer* p) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < 6; i++)
    p->data[i] = (float)i - 2; /* [-2,-1,0,1,2,3] */
  p->shape[0] = 2;
  p->shape[1] = 3;
  p->m.dl_tensor = (DLTensor){.data = p->data,
                              .device = {kDLCPU, 0},
                              .ndim = 2,
                              .dtype = {kDLFloat, 32, 1},
                              .shape = p->shape,
                              .strides = NULL,
                              .byte_offset = 0};
  p->m.manager_ctx = p;
  p->m.deleter = producer_delete;
}

static void test_import_zero_copy_and_deleter(void** state) {
  (void)state;
  Producer p;
  producer_init(&p);
  OnyxValue* v = NULL;
  ots_ok(onyx_value_from_dlpack(&p.m, &v));
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_ptr_equal(onyx_tensor_data(t), p.data); /* no copy */
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_rank(t), 2);
  assert_int_equal(onyx_tensor_dims(t)[1], 3);
  assert_int_equal(onyx_tensor_memory(t)->kind, ONYX_DEVICE_CPU);
  /* Run a model on it: y = Relu(x). */
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "r", "x", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  otm_free(m);
  OnyxIoBinding* b = NULL;
  ots_ok(onyx_io_binding_create(s, &b));
  ots_ok(onyx_io_binding_bind_input(b, "x", v));
  ots_ok(onyx_io_binding_bind_output_to_device(b, "y", NULL));
  onyx_value_release(v); /* the binding still holds the producer's memory */
  assert_int_equal(p.deleted, 0);
  ots_ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* y = NULL;
  ots_ok(onyx_io_binding_get_outputs(b, &y, 1));
  const float want[6] = {0, 0, 0, 1, 2, 3};
  for (int i = 0; i < 6; i++)
    assert_float_equal(((const float*)onyx_tensor_data(onyx_value_tensor(y)))[i], want[i], 0);
  onyx_value_release(y);
  onyx_io_binding_release(b);
  assert_int_equal(p.deleted, 1); /* exactly once, when the last holder let go */
  onyx_session_release(s);
}

static void test_import_refusals_keep_ownership(void** state) {
  (void)state;
  Producer p;
  producer_init(&p);
  OnyxValue* v = NULL;
  p.m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
  ots_expect_error(onyx_value_from_dlpack(&p.m, &v), ONYX_NOT_IMPLEMENTED, "4 lanes");
  p.m.dl_tensor.dtype = (DLDataType){kDLOpaqueHandle, 64, 1};
  ots_expect_error(onyx_value_from_dlpack(&p.m, &v), ONYX_NOT_IMPLEMENTED,
                   "type code 3 with 64 bits");
  p.m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
  p.m.dl_tensor.device = (DLDevice){kDLVulkan, 0};
  ots_expect_error(onyx_value_from_dlpack(&p.m, &v), ONYX_NOT_IMPLEMENTED, "device type 7");
  p.m.dl_tensor.device = (DLDevice){kDLCPU, 0};
  /* A transposed view: strides (1, 2) over shape (2, 3) is not compact. */
  p.strides[0] = 1;
  p.strides[1] = 2;
  p.m.dl_tensor.strides = p.strides;
  ots_expect_error(onyx_value_from_dlpack(&p.m, &v), ONYX_NOT_IMPLEMENTED, "non-contiguous");
  assert_null(v);
  assert_int_equal(p.deleted, 0);
  /* Compact strides (3, 1) and a byte offset are fine. */
  p.strides[0] = 3;
  p.strides[1] = 1;
  p.shape[0] = 1;
  p.m.dl_tensor.byte_offset = 3 * sizeof(float);
  ots_ok(onyx_value_from_dlpack(&p.m, &v));
  assert_ptr_equal(onyx_tensor_data(onyx_value_tensor(v)), &p.data[3]);
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(v)), 3);
  onyx_value_release(v);
  assert_int_equal(p.deleted, 1);
}

static void test_export_zero_copy(void** state) {
  (void)state;
  int64_t dims[2] = {3, 2};
  const int32_t src[6] = {5, -6, 7, -8, 9, -10};
  OnyxValue* v = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_INT32, dims, 2, src, sizeof src, &v));
  DLManagedTensor* m = NULL;
  ots_ok(onyx_value_to_dlpack(v, &m));
  assert_ptr_equal(m->dl_tensor.data, onyx_tensor_data(onyx_value_tensor(v)));
  assert_int_equal(m->dl_tensor.device.device_type, kDLCPU);
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.shape[0], 3);
  assert_int_equal(m->dl_tensor.shape[1], 2);
  assert_null(m->dl_tensor.strides);
  assert_int_equal(m->dl_tensor.dtype.code, kDLInt);
  assert_int_equal(m->dl_tensor.dtype.bits, 32);
  assert_int_equal(m->dl_tensor.dtype.lanes, 1);
  /* The export outlives the value. */
  onyx_value_release(v);
  const int32_t* d = m->dl_tensor.data;
  for (int i = 0; i < 6; i++)
    assert_int_equal(d[i], src[i]);
  /* Round trip: importing it back is zero-copy too, and the deleter chain
   * frees everything once (checked by ASan/LSan). */
  OnyxValue* back = NULL;
  ots_ok(onyx_value_from_dlpack(m, &back));
  assert_ptr_equal(onyx_tensor_data(onyx_value_tensor(back)), d);
  assert_int_equal(onyx_tensor_elem_type(onyx_value_tensor(back)), ONYX_ELEM_INT32);
  onyx_value_release(back);
}

static void test_export_refusals(void** state) {
  (void)state;
  OnyxValue* v = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_BOOL, (int64_t[]){2}, 1, (uint8_t[]){1, 0}, 2, &v));
  DLManagedTensor* m = NULL;
  ots_expect_error(onyx_value_to_dlpack(v, &m), ONYX_NOT_IMPLEMENTED, "bool has no DLPack");
  assert_null(m);
  onyx_value_release(v);
  const char* strs[1] = {"a"};
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_STRING, (int64_t[]){1}, 1, strs, sizeof strs, &v));
  ots_expect_error(onyx_value_to_dlpack(v, &m), ONYX_NOT_IMPLEMENTED, "string has no DLPack");
  onyx_value_release(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_import_zero_copy_and_deleter),
      cmocka_unit_test(test_import_refusals_keep_ownership),
      cmocka_unit_test(test_export_zero_copy),
      cmocka_unit_test(test_export_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
