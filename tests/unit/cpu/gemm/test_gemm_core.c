/* test_gemm_core.c — the CPU provider's fp32 GEMM core (cpu_gemm.c) beyond
 * the arithmetic that tests/unit/cpu/gemm/test_gemm.c covers: the per-thread A
 * packing buffer (grown, reused, used by several threads at once, freed at
 * thread exit: LeakSanitizer checks that), a nested GEMM on a thread whose
 * buffer is in use, the packed-A transpose path with k not a multiple of 8,
 * narrow last B panels, the floating-point mode (flush-to-zero while the
 * tiles run, the caller's MXCSR restored) and the packed-operand allocator.
 * Every product is checked against a float64 reference computed here, for
 * every micro-kernel the machine has. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TEST_X86 1
#else
#define TEST_X86 0
#endif

/* A pool stand-in: runs the range in chunks of 2 on this thread. */
static void fake_parallel_for(OnyxThreadPool* p, size_t n, void (*fn)(void*, size_t, size_t),
                              void* u) {
  (void)p;
  for (size_t i = 0; i < n; i += 2)
    fn(u, i, i + 2 < n ? i + 2 : n);
}
static size_t fake_pool_size(const OnyxThreadPool* p) {
  return p ? 3 : 1;
}
static OnyxHostApi host = {.parallel_for = fake_parallel_for, .thread_pool_size = fake_pool_size};
const OnyxHostApi* cpu_host = &host;

static int max_isa_level(void) {
#if TEST_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

/* Small integers: every product and sum is exact in float, so the GEMM
 * must match the reference exactly whatever its summation order. */
static float small_int(unsigned* seed) {
  *seed = *seed * 1103515245u + 12345u;
  return (float)((int)((*seed >> 16) % 7) - 3);
}

/* C = op(A) B (+ bias_col, Relu when `fused`) on m x n x k, checked exactly
 * against a double loop. Returns the number of wrong elements. */
static size_t run_and_check(size_t m, size_t n, size_t k, size_t lda, int fused, unsigned seed,
                            OnyxThreadPool* pool) {
  float* a = malloc(sizeof(float) * (m * lda + 1));
  float* b = malloc(sizeof(float) * (k * n + 1));
  float* c = malloc(sizeof(float) * (m * n + 1));
  float* bias = malloc(sizeof(float) * (n + 1));
  if (!a || !b || !c || !bias) {
    free(a), free(b), free(c), free(bias);
    return (size_t)-1;
  }
  for (size_t i = 0; i < m * lda; i++)
    a[i] = small_int(&seed);
  for (size_t i = 0; i < k * n; i++)
    b[i] = small_int(&seed);
  for (size_t j = 0; j < n; j++)
    bias[j] = small_int(&seed);
  for (size_t i = 0; i < m * n; i++)
    c[i] = NAN; /* beta == 0 never reads C */
  CpuGemm g = {.m = m,
               .n = n,
               .k = k,
               .a = a,
               .lda = lda,
               .b = b,
               .ldb = n,
               .c = c,
               .ldc = n,
               .alpha = 1.0,
               .bias_col = fused ? bias : NULL,
               .act = fused ? CPU_ACT_RELU : CPU_ACT_NONE};
  cpu_gemm_f32(pool, &g);
  size_t bad = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t p = 0; p < k; p++)
        s += (double)a[i * lda + p] * b[p * n + j];
      if (fused) {
        s += bias[j];
        s = s < 0 ? 0 : s;
      }
      if (c[i * n + j] != (float)s) bad++;
    }
  free(a), free(b), free(c), free(bias);
  return bad;
}

/* The thread's buffer grows (small, large, larger) and is reused by smaller
 * calls; shapes cover narrow last panels (n = 32q + 1 .. 16) and full ones. */
static void test_buffer_grows_and_is_reused(void** state) {
  (void)state;
  const size_t shapes[][3] = {{8, 32, 8},       {70, 49, 300},  {130, 97, 700}, {9, 17, 5},
                              {256, 200, 1100}, {16, 48, 260},  {33, 80, 1},    {128, 64, 128},
                              {64, 1040, 70},   {300, 33, 513}, {1, 1, 1},      {129, 129, 129}};
  for (int level = 0; level <= max_isa_level(); level++) {
    cpu_gemm_force_isa(level);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      const size_t bad = run_and_check(m, n, k, k + s % 3, (int)(s % 2), (unsigned)(s + 1),
                                       s % 3 == 0 ? (OnyxThreadPool*)&host : NULL);
      if (bad)
        fail_msg("isa %s m=%zu n=%zu k=%zu: %zu wrong elements", cpu_gemm_isa_name(), m, n, k, bad);
    }
  }
  cpu_gemm_force_isa(-1);
}

/* Several threads run GEMMs at once, each on its own buffer; the threads
 * exit afterwards (their buffers are freed by the key's destructor). */
typedef struct Worker {
  unsigned seed;
  size_t bad;
} Worker;

static void* worker_main(void* p) {
  Worker* w = p;
  for (int i = 0; i < 12; i++) {
    const size_t m = 1 + (w->seed * 7 + (unsigned)i * 31) % 150;
    const size_t n = 1 + (w->seed * 13 + (unsigned)i * 17) % 120;
    const size_t k = 1 + (w->seed * 5 + (unsigned)i * 57) % 400;
    w->bad += run_and_check(m, n, k, k, i % 2, w->seed * 100 + (unsigned)i, NULL);
  }
  return NULL;
}

static void test_threads_at_once(void** state) {
  (void)state;
  enum { THREADS = 4 };
  pthread_t th[THREADS];
  Worker w[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (Worker){(unsigned)(t + 1), 0};
    assert_int_equal(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    assert_int_equal(pthread_join(th[t], NULL), 0);
    assert_int_equal(w[t].bad, 0);
  }
}

/* A GEMM started from inside another one on the same thread (here from the
 * on-demand B callback), while the outer call's A buffer is in use: the
 * inner call must not take that buffer, and both results must be right. */
typedef struct Nested {
  const float* b; /* k x n, row-major */
  size_t n, k;
  size_t inner_bad;
  int calls;
} Nested;

static void pack_b_nested(void* user, float* dst, size_t panel, size_t k0, size_t k1) {
  Nested* t = user;
  if (t->calls++ == 0) t->inner_bad += run_and_check(40, 50, 60, 61, 1, 99, NULL);
  const size_t nr = cpu_gemm_nr();
  for (size_t q = k0; q < k1; q++)
    for (size_t j = 0; j < nr; j++) {
      const size_t col = panel * nr + j;
      dst[(q - k0) * nr + j] = col < t->n ? t->b[q * t->n + col] : 0.0f;
    }
}

static void test_nested_call(void** state) {
  (void)state;
  const size_t m = 50, n = 45, k = 70;
  unsigned seed = 5;
  float* a = malloc(sizeof(float) * m * k);
  float* b = malloc(sizeof(float) * k * n);
  float* c = malloc(sizeof(float) * m * n);
  assert_non_null(a), assert_non_null(b), assert_non_null(c);
  for (size_t i = 0; i < m * k; i++)
    a[i] = small_int(&seed);
  for (size_t i = 0; i < k * n; i++)
    b[i] = small_int(&seed);
  /* warm the thread's buffer with a larger A first, so the outer call of
   * this test takes the cached buffer */
  assert_int_equal(run_and_check(200, 20, 300, 300, 0, 3, NULL), 0);
  Nested t = {b, n, k, 0, 0};
  CpuGemm g = {.m = m,
               .n = n,
               .k = k,
               .a = a,
               .lda = k,
               .c = c,
               .ldc = n,
               .alpha = 1.0,
               .pack_b_fn = pack_b_nested,
               .pack_b_user = &t};
  cpu_gemm_f32(NULL, &g);
  assert_true(t.calls > 0);
  assert_int_equal(t.inner_bad, 0);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t p = 0; p < k; p++)
        s += (double)a[i * k + p] * b[p * n + j];
      assert_float_equal(c[i * n + j], s, 0);
    }
  free(a), free(b), free(c);
}

/* op(A) packed ahead by cpu_gemm_pack_a (the vectorized transpose for full
 * panels, a scalar tail for k % 8) against the same A unpacked, both
 * exact; odd lda so the row starts are unaligned. */
static void test_packed_a_matches(void** state) {
  (void)state;
  const size_t ks[] = {1, 7, 8, 9, 15, 16, 17, 63, 257};
  for (int level = 0; level <= max_isa_level(); level++) {
    cpu_gemm_force_isa(level);
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
      const size_t m = 21, n = 35, k = ks[t], lda = k + 3;
      unsigned seed = (unsigned)(t + 40);
      float* a = malloc(sizeof(float) * m * lda);
      float* b = malloc(sizeof(float) * k * n);
      float* c = malloc(sizeof(float) * m * n);
      float* ap =
          aligned_alloc(64, (cpu_gemm_packed_a_floats(m, k) * sizeof(float) + 63) / 64 * 64);
      assert_non_null(a), assert_non_null(b), assert_non_null(c), assert_non_null(ap);
      for (size_t i = 0; i < m * lda; i++)
        a[i] = small_int(&seed);
      for (size_t i = 0; i < k * n; i++)
        b[i] = small_int(&seed);
      cpu_gemm_pack_a(NULL, ap, a, lda, 0, m, k);
      CpuGemm g = {.m = m,
                   .n = n,
                   .k = k,
                   .a = a,
                   .lda = lda,
                   .packed_a = ap,
                   .b = b,
                   .ldb = n,
                   .c = c,
                   .ldc = n,
                   .alpha = 1.0};
      cpu_gemm_f32(NULL, &g);
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
          double s = 0;
          for (size_t p = 0; p < k; p++)
            s += (double)a[i * lda + p] * b[p * n + j];
          if (c[i * n + j] != (float)s)
            fail_msg("isa %s k=%zu: C[%zu,%zu] = %g, want %g", cpu_gemm_isa_name(), k, i, j,
                     c[i * n + j], s);
        }
      free(a), free(b), free(c), free(ap);
    }
  }
  cpu_gemm_force_isa(-1);
}

/* x86: the tiles run with flush-to-zero / denormals-are-zero (subnormal
 * operands count as 0: a lone 1e-40 * 1 gives 0, not 1e-40), and the
 * caller's MXCSR comes back unchanged. */
static void test_denormal_mode(void** state) {
  (void)state;
  if (getenv("ONYX_UNDER_VALGRIND")) {
    /* memcheck runs SSE arithmetic on the host's own rounding and ignores
     * MXCSR's FTZ/DAZ bits: the flush cannot be observed there. */
    printf("skip: valgrind does not emulate flush-to-zero\n");
    skip();
  }
#if TEST_X86
  const float tiny = 1e-40f; /* subnormal: below FLT_MIN = 1.18e-38 */
  assert_true(tiny > 0.0f && tiny < 1.17549435e-38f);
  for (int level = 0; level <= max_isa_level(); level++) {
    cpu_gemm_force_isa(level);
    const unsigned before = _mm_getcsr();
    float a[2 * 3] = {tiny, 0, 0, 2, 1, 0}; /* row 0: (tiny, 0, 0), row 1: (2, 1, 0) */
    float b[3 * 2] = {1, 1, 0, 4, 0, 0};
    float c[2 * 2];
    CpuGemm g = {
        .m = 2, .n = 2, .k = 3, .a = a, .lda = 3, .b = b, .ldb = 2, .c = c, .ldc = 2, .alpha = 1.0};
    cpu_gemm_f32(NULL, &g);
    assert_int_equal(_mm_getcsr(), before);
    /* row 0: tiny*1 and tiny*1 flushed; row 1: (2*1 + 1*0, 2*1 + 1*4) */
    assert_true(c[0] == 0.0f && c[1] == 0.0f);
    assert_true(c[2] == 2.0f && c[3] == 6.0f);
  }
  cpu_gemm_force_isa(-1);
#else
  skip();
#endif
}

/* cpu_gemm_alloc_packed: 64-byte aligned below 2 MiB, 2 MiB aligned from
 * there (huge pages asked for), every byte usable, NULL on a size that
 * overflows. */
static void test_alloc_packed(void** state) {
  (void)state;
  const size_t sizes[] = {0, 1, 1000, (2u << 20) / 4 - 1, (2u << 20) / 4, 3u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    float* p = cpu_gemm_alloc_packed(sizes[i]);
    assert_non_null(p);
    const size_t bytes = sizes[i] * sizeof(float);
    assert_int_equal((uintptr_t)p % (bytes >= (2u << 20) ? (2u << 20) : 64), 0);
    for (size_t j = 0; j < sizes[i]; j++)
      p[j] = (float)j;
    if (sizes[i]) assert_float_equal(p[sizes[i] - 1], (float)(sizes[i] - 1), 0);
    free(p);
  }
  assert_null(cpu_gemm_alloc_packed(SIZE_MAX / 2));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer_grows_and_is_reused),
      cmocka_unit_test(test_threads_at_once),
      cmocka_unit_test(test_nested_call),
      cmocka_unit_test(test_packed_a_matches),
      cmocka_unit_test(test_denormal_mode),
      cmocka_unit_test(test_alloc_packed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
