/* test_npy.c — the .npy reader and writer of the `onyx` command (host/cli/npy.c):
 * files built byte by byte here (as numpy writes them), every refusal with
 * the file's name in the message, and a fuzz-style loop of mutated headers
 * that must each parse consistently or fail cleanly (ASan/UBSan builds
 * check the "cleanly"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../../host/cli/npy.h"

/* A .npy file: magic, version, header length, header (padded with spaces
 * to a multiple of 64 bytes with the prefix, '\n' last), data. */
static size_t build(unsigned char* out, size_t cap, int major, const char* header, const void* data,
                    size_t nbytes) {
  size_t prefix = major == 1 ? 10 : 12, hn = strlen(header);
  size_t total = ((prefix + hn + 1 + 63) / 64) * 64, hlen = total - prefix;
  assert_true(total + nbytes <= cap);
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (unsigned char)major;
  out[7] = 0;
  for (size_t i = 0; i < prefix - 8; i++)
    out[8 + i] = (unsigned char)(hlen >> (8 * i));
  memcpy(out + prefix, header, hn);
  memset(out + prefix + hn, ' ', hlen - hn - 1);
  out[total - 1] = '\n';
  memcpy(out + total, data, nbytes);
  return total + nbytes;
}

static void test_float32_v1(void** state) {
  (void)state;
  unsigned char buf[512];
  const float x[6] = {1, 2, 3, 4, 5, -6.5f};
  size_t n = build(buf, sizeof buf, 1,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", x, sizeof x);
  NpyArray a;
  char err[256];
  assert_int_equal(npy_parse(buf, n, "x.npy", &a, err, sizeof err), 0);
  assert_int_equal(a.type, NPY_FLOAT32);
  assert_int_equal(a.rank, 2);
  assert_int_equal(a.dims[0], 2);
  assert_int_equal(a.dims[1], 3);
  assert_int_equal(a.count, 6);
  assert_memory_equal(a.data, x, sizeof x);
  npy_free(&a);
}

static void test_versions_and_types(void** state) {
  (void)state;
  unsigned char buf[512];
  const int64_t y[3] = {7, -1, 1LL << 40};
  NpyArray a;
  char err[256];
  /* 2.0 and 3.0 have a 4-byte header length; key order and spacing are free. */
  for (int major = 2; major <= 3; major++) {
    size_t n = build(buf, sizeof buf, major,
                     "{\"shape\":(3,),\"fortran_order\":False,\"descr\":\"<i8\"}", y, sizeof y);
    assert_int_equal(npy_parse(buf, n, "y.npy", &a, err, sizeof err), 0);
    assert_int_equal(a.type, NPY_INT64);
    assert_int_equal(a.rank, 1);
    assert_int_equal(a.dims[0], 3);
    assert_memory_equal(a.data, y, sizeof y);
    npy_free(&a);
  }
  /* A scalar: shape (), one element. */
  const double d = 2.25;
  size_t n = build(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': ()}", &d,
                   sizeof d);
  assert_int_equal(npy_parse(buf, n, "d.npy", &a, err, sizeof err), 0);
  assert_int_equal(a.rank, 0);
  assert_int_equal(a.count, 1);
  assert_true(*(double*)a.data == 2.25);
  npy_free(&a);
  /* One-byte types, and an empty array. */
  const unsigned char u[2] = {0, 255};
  n = build(buf, sizeof buf, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", u, 2);
  assert_int_equal(npy_parse(buf, n, "u.npy", &a, err, sizeof err), 0);
  assert_int_equal(a.type, NPY_UINT8);
  npy_free(&a);
  n = build(buf, sizeof buf, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 4), }", u,
            0);
  assert_int_equal(npy_parse(buf, n, "b.npy", &a, err, sizeof err), 0);
  assert_int_equal(a.type, NPY_BOOL);
  assert_int_equal(a.count, 0);
  npy_free(&a);
}

/* Each malformed file is refused with its name and the expected phrase in the message. */
static void expect_error(const unsigned char* buf, size_t n, const char* phrase) {
  NpyArray a;
  char err[256] = "";
  assert_int_equal(npy_parse(buf, n, "bad.npy", &a, err, sizeof err), -1);
  assert_null(a.data);
  if (strncmp(err, "bad.npy: ", 9) || !strstr(err, phrase))
    fail_msg("message '%s', wanted '%s'", err, phrase);
}

static void test_refusals(void** state) {
  (void)state;
  unsigned char buf[512];
  const float x[4] = {0};
  static const struct {
    const char* header;
    size_t nbytes;
    const char* phrase;
  } cases[] = {
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, "fortran_order is True"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16, "big-endian"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "not supported"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 12, "truncated data"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", 12, "bytes after the data"},
      {"{'descr': '<f4', 'fortran_order': False, }", 16, "missing 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", 16, "unknown key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 2]}", 16, "must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -2)}", 16, "must hold integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 16,
       "overflows int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4)}", 16,
       "overflows"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", 16, "after the closing"},
      {"'descr': '<f4'", 16, "expected '{'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = build(buf, sizeof buf, 1, cases[i].header, x, cases[i].nbytes);
    expect_error(buf, n, cases[i].phrase);
  }
  size_t n =
      build(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", x, 16);
  buf[0] = 'X';
  expect_error(buf, n, "no \\x93NUMPY magic");
  buf[0] = 0x93;
  buf[6] = 4;
  expect_error(buf, n, "version 4.0");
  buf[6] = 1;
  buf[8] = 0xff; /* header longer than the file */
  buf[9] = 0xff;
  expect_error(buf, n, "truncated .npy header");
  expect_error(buf, 9, "magic");
}

/* xorshift32: the mutations below are the same on every run. */
static uint32_t next(uint32_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static void test_fuzz_mutations(void** state) {
  (void)state;
  unsigned char good[256], buf[256];
  const int32_t x[6] = {1, 2, 3, 4, 5, 6};
  size_t n = build(good, sizeof good, 1,
                   "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", x, sizeof x);
  static const char kBytes[] = "{}()',: 0123456789TrueFals<>|if\x00\n\xff";
  uint32_t seed = 0x2545f491u;
  int accepted = 0;
  for (int iter = 0; iter < 20000; iter++) {
    memcpy(buf, good, n);
    size_t len = n;
    int edits = 1 + (int)(next(&seed) % 4);
    for (int k = 0; k < edits; k++) {
      uint32_t r = next(&seed);
      size_t pos = next(&seed) % len;
      if (r % 3 == 0) /* overwrite with a byte that matters to the parser */
        buf[pos] = (unsigned char)kBytes[next(&seed) % (sizeof kBytes - 1)];
      else if (r % 3 == 1) /* random byte */
        buf[pos] = (unsigned char)next(&seed);
      else /* truncate */
        len = pos + 1;
    }
    NpyArray a;
    char err[128];
    if (npy_parse(buf, len, "f.npy", &a, err, sizeof err) == 0) {
      /* Accepted: the data must be exactly what the shape says. */
      size_t count = 1;
      for (size_t i = 0; i < a.rank; i++)
        count *= (size_t)a.dims[i];
      assert_int_equal(count, a.count);
      assert_true(a.count * a.elem_size <= len);
      accepted++;
      npy_free(&a);
    } else {
      assert_null(a.data);
      assert_memory_equal(err, "f.npy: ", 7);
    }
  }
  /* Mutations of the padding keep the file valid: some must be accepted. */
  assert_true(accepted > 0);
}

static void test_save_load_roundtrip(void** state) {
  (void)state;
  char path[] = "/tmp/onyx_test_npy_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  const float x[2][3][1] = {{{1}, {2}, {3}}, {{4}, {5}, {6}}};
  const int64_t dims[3] = {2, 3, 1};
  char err[256];
  assert_int_equal(npy_save(path, NPY_FLOAT32, dims, 3, x, err, sizeof err), 0);
  NpyArray a;
  assert_int_equal(npy_load(path, &a, err, sizeof err), 0);
  assert_int_equal(a.rank, 3);
  assert_int_equal(a.dims[2], 1);
  assert_memory_equal(a.data, x, sizeof x);
  npy_free(&a);
  /* A 1-D array is written with numpy's trailing comma: (5,). */
  const int64_t d1 = 5;
  const int64_t v[5] = {0, 1, 2, 3, 4};
  assert_int_equal(npy_save(path, NPY_INT64, &d1, 1, v, err, sizeof err), 0);
  assert_int_equal(npy_load(path, &a, err, sizeof err), 0);
  assert_int_equal(a.rank, 1);
  assert_int_equal(a.dims[0], 5);
  assert_memory_equal(a.data, v, sizeof v);
  npy_free(&a);
  remove(path);
  assert_int_equal(npy_load(path, &a, err, sizeof err), -1);
  assert_non_null(strstr(err, path));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_float32_v1),
      cmocka_unit_test(test_versions_and_types),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_fuzz_mutations),
      cmocka_unit_test(test_save_load_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
