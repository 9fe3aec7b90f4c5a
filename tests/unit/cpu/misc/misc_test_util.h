/* misc_test_util.h — output checks for the misc family's tests (sessions
 * and runs: ox_test_session.h). Header-only: each test is one executable. */
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
#include "ox_test_session.h"

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
