/* hostile_bytes.h — strings given with their length (NUL bytes included)
 * for the hostile-string tests: making a string tensor of them and checking
 * a string tensor's exact bytes. Include after <cmocka.h> and onyx/onyx.h. */
#ifndef ONYX_TEST_HOSTILE_BYTES_H
#define ONYX_TEST_HOSTILE_BYTES_H

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* A string given with its length (NULs included). */
typedef struct Bytes {
  const char* p;
  size_t len;
} Bytes;

#define B(lit) ((Bytes){lit, sizeof(lit) - 1})

/* A string tensor [n] (n <= 8) of s[0..n). */
static OnyxValue* strings_value(const Bytes* s, size_t n) {
  const char* p[8];
  size_t len[8];
  assert_true(n <= 8);
  for (size_t i = 0; i < n; i++) {
    p[i] = s[i].p;
    len[i] = s[i].len;
  }
  OnyxValue* v = NULL;
  ok(onyx_value_create_string_tensor((const int64_t[]){(int64_t)n}, 1, p, len, &v));
  return v;
}

/* Asserts that string tensor t holds exactly want[0..n), each string still
 * NUL-terminated after its bytes (the 1.0 contract of the char*). */
static void expect_bytes(const OnyxTensor* t, const Bytes* want, size_t n) {
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_STRING);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const char* const* s = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++) {
    if (onyx_tensor_string_len(t, i) != want[i].len)
      fail_msg("string %zu: length %zu, want %zu", i, onyx_tensor_string_len(t, i), want[i].len);
    assert_memory_equal(s[i], want[i].p, want[i].len);
    assert_int_equal(s[i][want[i].len], '\0');
  }
}

#endif /* ONYX_TEST_HOSTILE_BYTES_H */
