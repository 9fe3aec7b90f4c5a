/* test_gemm.c — the CPU provider's fp32 GEMM core against a float64
 * reference on random shapes (edges of every tile size, transposed A, odd
 * leading dimensions, alpha/beta, k = 0), and thread-count independence.
 * Compiles the provider's cpu_linalg.c directly with a minimal host table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_nn.h"
#include "cpu_util.h"

/* A pool stand-in: runs the range in chunks of 3 on this thread, so the
 * tiling across "workers" is exercised deterministically. */
static void fake_parallel_for(OnyxThreadPool* p, size_t n, void (*fn)(void*, size_t, size_t),
                              void* u) {
  (void)p;
  for (size_t i = 0; i < n; i += 3)
    fn(u, i, i + 3 < n ? i + 3 : n);
}
static size_t fake_pool_size(const OnyxThreadPool* p) {
  return p ? 4 : 1;
}
static OnyxHostApi host = {.parallel_for = fake_parallel_for, .thread_pool_size = fake_pool_size};
const OnyxHostApi* cpu_host = &host;

static float rnd(void) {
  return (float)(rand() % 200 - 100) / 50.0f;
}

static void check_case(size_t m, size_t n, size_t k, int ta, double alpha, double beta,
                       OnyxThreadPool* pool) {
  size_t lda = (ta ? m : k) + (size_t)(rand() % 3), ldb = n + (size_t)(rand() % 3);
  size_t ldc = n + (size_t)(rand() % 3);
  size_t a_rows = ta ? k : m;
  float* a = malloc(sizeof(float) * (a_rows * lda + 1));
  float* b = malloc(sizeof(float) * (k * ldb + 1));
  float* c = malloc(sizeof(float) * (m * ldc + 1));
  double* want = malloc(sizeof(double) * (m * n + 1));
  for (size_t i = 0; i < a_rows * lda; i++)
    a[i] = rnd();
  for (size_t i = 0; i < k * ldb; i++)
    b[i] = rnd();
  /* beta == 0 must ignore C entirely, even NaN there */
  for (size_t i = 0; i < m * ldc; i++)
    c[i] = beta == 0 ? NAN : rnd();
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t p = 0; p < k; p++)
        s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
      want[i * n + j] = alpha * s + (beta == 0 ? 0 : beta * c[i * ldc + j]);
    }
  CpuGemm g = {m, n, k, a, lda, ta, b, ldb, c, ldc, alpha, beta};
  cpu_gemm_f32(pool, &g);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double got = c[i * ldc + j], w = want[i * n + j];
      if (!(fabs(got - w) <= 1e-3 * (1 + fabs(w))))
        fail_msg("m=%zu n=%zu k=%zu trans_a=%d alpha=%g beta=%g: C[%zu,%zu] = %g, want %g", m, n, k,
                 ta, alpha, beta, i, j, got, w);
    }
  free(a);
  free(b);
  free(c);
  free(want);
}

static void test_random_shapes(void** state) {
  (void)state;
  srand(1);
  for (int it = 0; it < 200; it++) {
    size_t m = (size_t)(rand() % 70 + 1), n = (size_t)(rand() % 130 + 1);
    size_t k = (size_t)(rand() % 300);
    check_case(m, n, k, rand() % 2, (rand() % 3) - 0.5, (rand() % 3) * 0.5,
               it % 2 ? (OnyxThreadPool*)&host : NULL);
  }
}

static void test_edge_shapes(void** state) {
  (void)state;
  const size_t sizes[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 65};
  for (size_t i = 0; i < CPU_ARRAY_LEN(sizes); i++)
    for (size_t j = 0; j < CPU_ARRAY_LEN(sizes); j += 3)
      check_case(sizes[i], sizes[j], sizes[(i + j) % CPU_ARRAY_LEN(sizes)], 0, 1, 0, NULL);
}

/* Each element of C is summed in one fixed order: the pool must not change bits. */
static void test_thread_count_independent(void** state) {
  (void)state;
  size_t m = 67, n = 129, k = 257;
  float* a = malloc(sizeof(float) * m * k);
  float* b = malloc(sizeof(float) * k * n);
  float* c1 = calloc(m * n, sizeof(float));
  float* c2 = calloc(m * n, sizeof(float));
  for (size_t i = 0; i < m * k; i++)
    a[i] = rnd();
  for (size_t i = 0; i < k * n; i++)
    b[i] = rnd();
  CpuGemm g1 = {m, n, k, a, k, 0, b, n, c1, n, 1, 0};
  CpuGemm g2 = {m, n, k, a, k, 0, b, n, c2, n, 1, 0};
  cpu_gemm_f32(NULL, &g1);
  cpu_gemm_f32((OnyxThreadPool*)&host, &g2);
  assert_memory_equal(c1, c2, m * n * sizeof(float));
  free(a);
  free(b);
  free(c1);
  free(c2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_shapes),
      cmocka_unit_test(test_edge_shapes),
      cmocka_unit_test(test_thread_count_independent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
