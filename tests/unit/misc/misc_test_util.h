/* misc_test_util.h — running one small model through a session for the misc
 * family's tests. Header-only: each test is one executable. */
#ifndef MISC_TEST_UTIL_H
#define MISC_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

static inline void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Creates a session from the model, runs it with the given float inputs and
 * returns output `want` (index among outputs) or the run/create error. */
typedef struct Feed {
  const char* name;
  int elem;
  int rank;
  int64_t dims[4];
  const void* data;
} Feed;

static inline OnyxStatus* run(OxTestModel* m, const Feed* feeds, size_t n, const char* const* outs,
                              size_t n_out, OnyxValue** got) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  if (st) return st;
  OnyxValue* in[8] = {0};
  const char* names[8];
  for (size_t i = 0; i < n; i++) {
    names[i] = feeds[i].name;
    size_t count = 1;
    for (int d = 0; d < feeds[i].rank; d++)
      count *= (size_t)feeds[i].dims[d];
    size_t elem = feeds[i].elem == ONYX_ELEM_STRING
                      ? sizeof(char*)
                      : onyx_elem_type_size((OnyxElemType)feeds[i].elem);
    size_t bytes = count * elem;
    ok(onyx_value_create_tensor((OnyxElemType)feeds[i].elem, feeds[i].dims, (size_t)feeds[i].rank,
                                feeds[i].data, bytes, &in[i]));
  }
  st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n, outs, n_out, got);
  onyx_values_release(in, n);
  onyx_session_release(s);
  return st;
}

static inline void expect_floats(const OnyxValue* v, const float* want, size_t n,
                                 const int64_t* dims, size_t rank) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_rank(t), rank);
  assert_memory_equal(onyx_tensor_dims(t), dims, rank * sizeof *dims);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (fabsf(got[i] - want[i]) > 1e-5f + 1e-5f * fabsf(want[i]))
      fail_msg("element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

#endif /* MISC_TEST_UTIL_H */
