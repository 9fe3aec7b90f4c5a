/* ox_test_session.h — sessions and status checks shared by the unit tests
 * that go through the public API (CMocka tests; link onyx_test_session and
 * libonyx or the host's core).
 *
 *   ots_ok(onyx_session_create_from_bytes(...));   // fails the test on error
 *   ots_expect_error(st, ONYX_STATUS_INVALID_ARGUMENT, "axis");
 *   OtsFeed x = {"x", ONYX_ELEM_FLOAT32, 2, {2, 3}, data};
 *   OnyxValue* y = NULL;
 *   ots_ok(ots_run(m, &x, 1, (const char*[]){"y"}, 1, &y));
 *
 * ots_run and ots_run_values build a session from the model (default
 * options), run it once, release the session and the inputs they created,
 * and return the create or run error; the model stays the caller's. */
#ifndef OX_TEST_SESSION_H
#define OX_TEST_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

/* Fails the test with the status's message when st is an error. */
void ots_ok(OnyxStatus* st);

/* Checks that st is an error of the given code whose message contains
 * needle (fails the test otherwise), then releases it. */
void ots_expect_error(OnyxStatus* st, OnyxStatusCode code, const char* needle);

/* An input tensor of ots_run: rank <= 4; data holds the elements (char*
 * pointers for ONYX_ELEM_STRING). */
typedef struct OtsFeed {
  const char* name;
  int elem;
  int rank;
  int64_t dims[4];
  const void* data;
} OtsFeed;

/* Runs m with up to 8 tensor inputs made from feeds and returns the n_out
 * outputs named in outs through got, or the create/run error. */
OnyxStatus* ots_run(OxTestModel* m, const OtsFeed* feeds, size_t n, const char* const* outs,
                    size_t n_out, OnyxValue** got);

/* Runs m with the given input values (n_in may be 0) and returns the n_out
 * outputs named in outs through got, or the create/run error. */
OnyxStatus* ots_run_values(OxTestModel* m, const char* const* in_names, const OnyxValue* const* ins,
                           size_t n_in, const char* const* outs, size_t n_out, OnyxValue** got);

#endif /* OX_TEST_SESSION_H */
