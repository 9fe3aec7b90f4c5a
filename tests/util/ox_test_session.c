/* ox_test_session.c — see ox_test_session.h. */
#include "ox_test_session.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

void ots_ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

void ots_expect_error(OnyxStatus* st, OnyxStatusCode code, const char* needle) {
  if (!st) fail_msg("expected an error containing '%s', got success", needle);
  if (onyx_status_code(st) != code)
    fail_msg("expected code %s, got %s: %s", onyx_status_code_name(code),
             onyx_status_code_name(onyx_status_code(st)), onyx_status_message(st));
  if (!strstr(onyx_status_message(st), needle))
    fail_msg("'%s' not in '%s'", needle, onyx_status_message(st));
  onyx_status_release(st);
}

/* A session of m with default options. */
static OnyxStatus* session_of(OxTestModel* m, OnyxSession** s) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, s);
  free(bytes);
  return st;
}

OnyxStatus* ots_run(OxTestModel* m, const OtsFeed* feeds, size_t n, const char* const* outs,
                    size_t n_out, OnyxValue** got) {
  enum { MAX_FEEDS = 8 };
  if (n > MAX_FEEDS) fail_msg("ots_run: %zu feeds, at most %d", n, (int)MAX_FEEDS);
  OnyxSession* s = NULL;
  OnyxStatus* st = session_of(m, &s);
  if (st) return st;
  OnyxValue* in[MAX_FEEDS] = {0};
  const char* names[MAX_FEEDS];
  for (size_t i = 0; i < n; i++) {
    names[i] = feeds[i].name;
    size_t count = 1;
    for (int d = 0; d < feeds[i].rank; d++)
      count *= (size_t)feeds[i].dims[d];
    const size_t elem = feeds[i].elem == ONYX_ELEM_STRING
                            ? sizeof(char*)
                            : onyx_elem_type_size((OnyxElemType)feeds[i].elem);
    ots_ok(onyx_value_create_tensor((OnyxElemType)feeds[i].elem, feeds[i].dims,
                                    (size_t)feeds[i].rank, feeds[i].data, count * elem, &in[i]));
  }
  st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n, outs, n_out, got);
  onyx_values_release(in, n);
  onyx_session_release(s);
  return st;
}

OnyxStatus* ots_run_values(OxTestModel* m, const char* const* in_names, const OnyxValue* const* ins,
                           size_t n_in, const char* const* outs, size_t n_out, OnyxValue** got) {
  OnyxSession* s = NULL;
  OnyxStatus* st = session_of(m, &s);
  if (st) return st;
  st = onyx_session_run(s, NULL, in_names, ins, n_in, outs, n_out, got);
  onyx_session_release(s);
  return st;
}
