/* test_qgemm.c — the CPU provider's int8 GEMM (providers/cpu/cpu_qgemm.c),
 * compiled into the test with a minimal host table, against a plain int64
 * loop written here: sum_k (a - za[i]) * (b - zb[j]) for every sign
 * combination of A and B, scalar and per-row / per-column zero points,
 * random shapes (1, odd sizes, k not a multiple of 4, k past one k block),
 * the extreme values 0 / 255 and -128 / 127 (where vpmaddubsw would
 * saturate), wrap-around modulo 2^32 past int32, and cancellation; A
 * row-major (read in place by the VNNI path when k is a multiple of 4) and
 * transposed (packed); on every path the machine has
 * (cpu_qgemm_force_isa), and under ONYX_CPU_ISA caps through the ctest
 * variants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_qgemm.h"
#include "cpu_util.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 12345;
static uint32_t next(void) {
  rng = rng * 1664525u + 1013904223u;
  return rng >> 8;
}

/* What the epilogue sees: zero points and the result matrix. */
typedef struct Check {
  bool a_signed, b_signed;
  const int32_t* za; /* per row (m) */
  const int32_t* zb; /* per column (n) */
  size_t m, n, k;
  uint32_t* out; /* m x n, corrected sums modulo 2^32 */
  int* seen;     /* m x n, times written */
} Check;

static void epi(void* user, int32_t* c, size_t ldc, size_t row0, size_t rows, size_t col0,
                size_t cols, const int32_t* rowsum, const int32_t* colsum) {
  Check* ck = user;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      const size_t r = row0 + i, q = col0 + j;
      const uint32_t za = (uint32_t)(ck->za[r] + (ck->a_signed ? 128 : 0));
      const uint32_t zb = (uint32_t)(ck->zb[q] - (ck->b_signed ? 0 : 128));
      const uint32_t v = (uint32_t)c[i * ldc + j] - zb * (uint32_t)rowsum[i] -
                         za * (uint32_t)colsum[j] + (uint32_t)ck->k * za * zb;
      ck->out[r * ck->n + q] = v;
      ck->seen[r * ck->n + q]++;
    }
}

static int value(bool is_signed, int mode) {
  /* mode 0: random; 1: the type's maximum; 2: its minimum */
  if (mode == 1) return is_signed ? 127 : 255;
  if (mode == 2) return is_signed ? -128 : 0;
  const int v = (int)(next() & 255);
  return is_signed ? v - 128 : v;
}

static size_t checked;

/* One product on the current path; fill: 0 random, 1 A max and B min, 2
 * both max, 3 A max and B max with zero points at the other end. */
static void check_case(size_t m, size_t n, size_t k, bool as, bool bs, int zmode, int fill,
                       size_t rs_pad, bool a_transposed) {
  const size_t lda = k + rs_pad;
  uint8_t* a = malloc((a_transposed ? k * m : m * lda) + 1);
  uint8_t* b = malloc(k * n + 1);
  int32_t* za = malloc((m + 1) * sizeof *za);
  int32_t* zb = malloc((n + 1) * sizeof *zb);
  uint32_t* out = malloc((m * n + 1) * sizeof *out);
  int* seen = calloc(m * n + 1, sizeof *seen);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(za);
  assert_non_null(zb);
  assert_non_null(out);
  assert_non_null(seen);
  const int amode = fill == 0 ? 0 : 1, bmode = fill == 0 ? 0 : fill == 1 ? 2 : 1;
  for (size_t i = 0; i < m; i++)
    for (size_t q = 0; q < k; q++) {
      const int v = value(as, amode);
      a[a_transposed ? q * m + i : i * lda + q] = (uint8_t)v;
    }
  for (size_t i = 0; i < k * n; i++)
    b[i] = (uint8_t)value(bs, bmode);
  /* zmode 0: zero; 1: one random value; 2: random per row / column; 3: the
   * far end of the range from the data */
  const int za0 = value(as, 0), zb0 = value(bs, 0);
  for (size_t i = 0; i < m; i++)
    za[i] = zmode == 0 ? 0 : zmode == 1 ? za0 : zmode == 2 ? value(as, 0) : value(as, 2);
  for (size_t j = 0; j < n; j++)
    zb[j] = zmode == 0 ? 0 : zmode == 1 ? zb0 : zmode == 2 ? value(bs, 0) : value(bs, 2);
  CpuQgemmB pb;
  assert_true(cpu_qgemm_pack_b(&pb, b, bs, k, n, n, 1));
  Check ck = {as, bs, za, zb, m, n, k, out, seen};
  /* the row sums are asked for only where some shifted zb is not 0, as the
   * kernels ask: without them the epilogue gets zeros, which zb' = 0 ignores */
  bool rowsums = false;
  for (size_t j = 0; j < n; j++)
    rowsums = rowsums || zb[j] - (bs ? 0 : 128) != 0;
  const CpuQgemmResult res = cpu_qgemm(ctx_pool, NULL, a, as, m, a_transposed ? 1 : lda,
                                       a_transposed ? m : 1, &pb, rowsums, epi, &ck);
  assert_int_equal(res, CPU_QGEMM_OK);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      int64_t want = 0;
      for (size_t q = 0; q < k; q++) {
        const uint8_t ra = a[a_transposed ? q * m + i : i * lda + q], rb = b[q * n + j];
        const int64_t av = as ? (int8_t)ra : ra, bv = bs ? (int8_t)rb : rb;
        want += (av - za[i]) * (bv - zb[j]);
      }
      if (seen[i * n + j] != 1 || out[i * n + j] != (uint32_t)want)
        fail_msg("%s: m %zu n %zu k %zu a %s b %s zmode %d fill %d: C[%zu][%zu] = %d (written "
                 "%d times), want %lld",
                 cpu_qgemm_isa_name(cpu_qgemm_isa()), m, n, k, as ? "s8" : "u8", bs ? "s8" : "u8",
                 zmode, fill, i, j, (int32_t)out[i * n + j], seen[i * n + j], (long long)want);
    }
  cpu_qgemm_free_b(&pb);
  free(a);
  free(b);
  free(za);
  free(zb);
  free(out);
  free(seen);
  checked++;
}

/* Runs body on every path up to what the machine (and ONYX_CPU_ISA) has. */
static void for_each_path(void (*body)(void)) {
  const CpuQgemmIsa top = cpu_qgemm_isa();
  for (int isa = 0; isa <= (int)top; isa++) {
    cpu_qgemm_force_isa(isa);
    assert_int_equal(cpu_qgemm_isa(), isa);
    body();
  }
  cpu_qgemm_force_isa(-1);
}

static void shapes_body(void) {
  static const size_t SH[][3] = {{1, 1, 1},     {1, 17, 5},  {3, 1, 7},      {7, 33, 3},
                                 {9, 31, 4},    {13, 65, 9}, {2, 2, 1030},   {64, 64, 64},
                                 {97, 70, 43},  {1, 300, 2}, {100, 257, 19}, {17, 9, 600},
                                 {20, 40, 1100}};
  for (size_t s = 0; s < CPU_ARRAY_LEN(SH); s++)
    for (int signs = 0; signs < 4; signs++) {
      const size_t zm = (s + (size_t)signs) % 4;
      for (int pool = 0; pool < 2; pool++) {
        ctx_pool = pool ? (OnyxThreadPool*)&host : NULL;
        check_case(SH[s][0], SH[s][1], SH[s][2], signs & 1, signs & 2, (int)zm, 0, s % 3,
                   s % 2 == 1);
      }
    }
  ctx_pool = NULL;
}

static void test_shapes(void** state) {
  (void)state;
  for_each_path(shapes_body);
}

/* Every zero-point mode with every sign combination. */
static void zero_points_body(void) {
  for (int zm = 0; zm < 4; zm++)
    for (int signs = 0; signs < 4; signs++)
      check_case(11, 37, 21, signs & 1, signs & 2, zm, 0, 0, false);
}

static void test_zero_points(void** state) {
  (void)state;
  for_each_path(zero_points_body);
}

/* 255 x -128 and 255 x 127 in every product: the pair sums of vpmaddubsw
 * would saturate (2 * 255 * 127 > 32767); here they must not. */
static void saturation_body(void) {
  for (int fill = 1; fill <= 3; fill++)
    for (int signs = 0; signs < 4; signs++)
      for (int zm = 0; zm < 4; zm += 3)
        check_case(10, 35, 67, signs & 1, signs & 2, zm, fill, 0, false);
}

static void test_saturation(void** state) {
  (void)state;
  for_each_path(saturation_body);
}

/* k = 70000 at the extremes: 70000 * 255 * 255 passes 2^31, and the
 * corrected sums must agree with the exact ones modulo 2^32. */
static void wrap_body(void) {
  check_case(2, 3, 70000, false, true, 3, 1, 0, false);
  check_case(1, 2, 70000, true, false, 3, 2, 0, false);
}

static void test_wrap(void** state) {
  (void)state;
  for_each_path(wrap_body);
}

static int stop_calls;
static int32_t fake_should_stop(const OnyxKernelContext* c) {
  (void)c;
  stop_calls++;
  return 1;
}

static void cancel_body(void) {
  const size_t m = 200, n = 200, k = 2000;
  uint8_t* a = calloc(m * k, 1);
  uint8_t* b = calloc(k * n, 1);
  int32_t za[200] = {0}, zb[200] = {0};
  uint32_t* out = calloc(m * n, sizeof *out);
  int* seen = calloc(m * n, sizeof *seen);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(out);
  assert_non_null(seen);
  CpuQgemmB pb;
  assert_true(cpu_qgemm_pack_b(&pb, b, true, k, n, n, 1));
  host.struct_size = sizeof host;
  host.ctx_should_stop = fake_should_stop;
  stop_calls = 0;
  CpuStop stop = {.ctx = (const OnyxKernelContext*)&host};
  Check ck = {false, true, za, zb, m, n, k, out, seen};
  ctx_pool = (OnyxThreadPool*)&host;
  assert_int_equal(cpu_qgemm(ctx_pool, &stop, a, false, m, k, 1, &pb, true, epi, &ck),
                   CPU_QGEMM_STOPPED);
  assert_true(stop_calls >= 1 && stop_calls <= 2);
  host.struct_size = 0;
  host.ctx_should_stop = NULL;
  ctx_pool = NULL;
  cpu_qgemm_free_b(&pb);
  free(a);
  free(b);
  free(out);
  free(seen);
}

static void test_cancel(void** state) {
  (void)state;
  for_each_path(cancel_body);
}

static void test_paths_named(void** state) {
  (void)state;
  const char* cap = getenv("ONYX_CPU_ISA");
  if (cap && !strcmp(cap, "generic")) assert_int_equal(cpu_qgemm_isa(), CPU_QGEMM_SCALAR);
  if (cap && !strcmp(cap, "avx2")) assert_true(cpu_qgemm_isa() <= CPU_QGEMM_AVX2);
  if (cap && !strcmp(cap, "avx512")) assert_true(cpu_qgemm_isa() <= CPU_QGEMM_AVX512BW);
  printf("int8 GEMM path: %s (checked %zu products so far)\n", cpu_qgemm_isa_name(cpu_qgemm_isa()),
         checked);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),     cmocka_unit_test(test_zero_points),
      cmocka_unit_test(test_saturation), cmocka_unit_test(test_wrap),
      cmocka_unit_test(test_cancel),     cmocka_unit_test(test_paths_named)};
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_free(); /* the GEMM takes no scratch; the fake host's table has it */
  return failed;
}
