/* test_gemm.c — the CPU provider's fp32 GEMM core against a float64
 * reference on random shapes (edges of every tile size, transposed A and B,
 * odd leading dimensions, alpha/beta, k = 0, operands packed ahead, row and
 * column biases, fused activations, one row of A against a packed B), for every micro-kernel the
 * machine can run (portable, AVX2, AVX-512), and thread-count independence. Compiles the provider's
 * cpu_linalg.c and cpu_gemm.c directly with a minimal host table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_avx2.h"
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
  CpuGemm g = {.m = m,
               .n = n,
               .k = k,
               .a = a,
               .lda = lda,
               .trans_a = ta,
               .b = b,
               .ldb = ldb,
               .c = c,
               .ldc = ldc,
               .alpha = alpha,
               .beta = beta};
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
  CpuGemm g1 = {
      .m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = c1, .ldc = n, .alpha = 1};
  CpuGemm g2 = g1;
  g2.c = c2;
  cpu_gemm_f32(NULL, &g1);
  cpu_gemm_f32((OnyxThreadPool*)&host, &g2);
  assert_memory_equal(c1, c2, m * n * sizeof(float));
  free(a);
  free(b);
  free(c1);
  free(c2);
}

/* Everything at once: op(A) and op(B) either way round, packed ahead or
 * not, row and column biases, an activation; the reference is a plain
 * float64 loop over the unpacked operands. */
typedef struct Case {
  size_t m, n, k;
  int ta, tb, pack_a, pack_b, bias_row, bias_col, act;
  double alpha, beta;
} Case;

static double act_ref(double v, int act) {
  switch (act) {
  case CPU_ACT_RELU:
    return v < 0 ? 0 : v;
  case CPU_ACT_LEAKY_RELU:
    return v < 0 ? 0.25 * v : v;
  case CPU_ACT_CLIP:
    return v < -1.5 ? -1.5 : v > 2.0 ? 2.0 : v;
  default:
    return v;
  }
}

static void check_full(const Case* t, OnyxThreadPool* pool) {
  const size_t m = t->m, n = t->n, k = t->k;
  const size_t lda = (t->ta ? m : k) + (size_t)(rand() % 3);
  const size_t ldb = (t->tb ? k : n) + (size_t)(rand() % 3), ldc = n + (size_t)(rand() % 3);
  const size_t a_rows = t->ta ? k : m, b_rows = t->tb ? n : k;
  float* a = malloc(sizeof(float) * (a_rows * lda + 1));
  float* b = malloc(sizeof(float) * (b_rows * ldb + 1));
  float* c = malloc(sizeof(float) * (m * ldc + 1));
  float* br = malloc(sizeof(float) * (m + 1));
  float* bc = malloc(sizeof(float) * (n + 1));
  float* ap = aligned_alloc(64, (cpu_gemm_packed_a_floats(m, k) * 4 + 64) / 64 * 64);
  float* bp = aligned_alloc(64, (cpu_gemm_packed_b_floats(k, n) * 4 + 64) / 64 * 64);
  double* want = malloc(sizeof(double) * (m * n + 1));
  assert_non_null(a), assert_non_null(b), assert_non_null(c), assert_non_null(want);
  assert_non_null(ap), assert_non_null(bp), assert_non_null(br), assert_non_null(bc);
  for (size_t i = 0; i < a_rows * lda; i++)
    a[i] = rnd();
  for (size_t i = 0; i < b_rows * ldb; i++)
    b[i] = rnd();
  for (size_t i = 0; i < m * ldc; i++)
    c[i] = t->beta == 0 ? NAN : rnd();
  for (size_t i = 0; i < m; i++)
    br[i] = rnd();
  for (size_t i = 0; i < n; i++)
    bc[i] = rnd();
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t p = 0; p < k; p++)
        s += (double)(t->ta ? a[p * lda + i] : a[i * lda + p]) *
             (double)(t->tb ? b[j * ldb + p] : b[p * ldb + j]);
      double v = t->alpha * s + (t->beta == 0 ? 0 : t->beta * c[i * ldc + j]);
      if (t->bias_row) v += br[i];
      if (t->bias_col) v += bc[j];
      want[i * n + j] = act_ref(v, t->act);
    }
  if (t->pack_a) cpu_gemm_pack_a(pool, ap, a, lda, t->ta, m, k);
  if (t->pack_b) cpu_gemm_pack_b(pool, bp, b, ldb, t->tb, k, n);
  CpuGemm g = {.m = m,
               .n = n,
               .k = k,
               .a = a,
               .lda = lda,
               .trans_a = t->ta,
               .b = b,
               .ldb = ldb,
               .trans_b = t->tb,
               .c = c,
               .ldc = ldc,
               .alpha = t->alpha,
               .beta = t->beta,
               .packed_a = t->pack_a ? ap : NULL,
               .packed_b = t->pack_b ? bp : NULL,
               .bias_row = t->bias_row ? br : NULL,
               .bias_col = t->bias_col ? bc : NULL,
               .act = t->act,
               .act_alpha = 0.25f,
               .act_min = -1.5f,
               .act_max = 2.0f};
  cpu_gemm_f32(pool, &g);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      const double got = c[i * ldc + j], w = want[i * n + j];
      if (!(fabs(got - w) <= 1e-3 * (1 + fabs(w))))
        fail_msg("isa %s m=%zu n=%zu k=%zu ta=%d tb=%d pack a/b=%d/%d bias r/c=%d/%d act=%d "
                 "alpha=%g beta=%g: C[%zu,%zu] = %g, want %g",
                 cpu_gemm_isa_name(), m, n, k, t->ta, t->tb, t->pack_a, t->pack_b, t->bias_row,
                 t->bias_col, t->act, t->alpha, t->beta, i, j, got, w);
    }
  /* the rows past m and the columns past n (ldc padding) are untouched */
  for (size_t i = 0; i < m; i++)
    for (size_t j = n; j < ldc; j++)
      if (t->beta == 0) assert_true(isnan(c[i * ldc + j]));
  free(a), free(b), free(c), free(br), free(bc), free(ap), free(bp), free(want);
}

/* The micro-kernels this machine can run: 0 portable, 1 AVX2, 2 AVX-512. */
static int max_isa_level(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

/* m in [1, m_span], n in [n_lo, n_lo + n_span), k in [0, k_span), and every
 * feature at random. */
static Case random_case(int m_span, int n_lo, int n_span, int k_span) {
  return (Case){.m = (size_t)(rand() % m_span + 1),
                .n = (size_t)(rand() % n_span + n_lo),
                .k = (size_t)(rand() % k_span),
                .ta = rand() % 2,
                .tb = rand() % 2,
                .pack_a = rand() % 2,
                .pack_b = rand() % 2,
                .bias_row = rand() % 2,
                .bias_col = rand() % 2,
                .act = rand() % 4,
                .alpha = (rand() % 3) - 0.5,
                .beta = (rand() % 3) * 0.5};
}

static void test_every_kernel_every_feature(void** state) {
  (void)state;
  const int top = max_isa_level();
  for (int level = 0; level <= top; level++) {
    cpu_gemm_force_isa(level);
    srand(7 + (unsigned)level);
    for (int it = 0; it < 120; it++) {
      const Case t = random_case(40, 1, 80, 600);
      check_full(&t, it % 2 ? (OnyxThreadPool*)&host : NULL);
    }
    /* 256 columns or more: the 4 x 24 kernel on AVX2 (last panels of 8, 16
     * or 24 columns, last row panels of 1 to 4 rows) */
    for (int it = 0; it < 40; it++) {
      const Case t = random_case(30, 256, 80, 300);
      check_full(&t, it % 2 ? (OnyxThreadPool*)&host : NULL);
    }
  }
  cpu_gemm_force_isa(-1);
}

/* Shapes of the benchmark models, packed B and a bias column, as MatMul and
 * Gemm run them (k crosses several k blocks). */
static void test_model_shapes(void** state) {
  (void)state;
  srand(3);
  const Case cases[] = {
      {.m = 64, .n = 1024, .k = 784, .pack_b = 1, .bias_col = 1, .act = CPU_ACT_RELU, .alpha = 1},
      {.m = 128, .n = 96, .k = 768, .pack_b = 1, .alpha = 1},
      {.m = 64, .n = 196, .k = 1152, .pack_a = 1, .pack_b = 1, .bias_row = 1, .alpha = 1},
      {.m = 13, .n = 49, .k = 513, .pack_a = 1, .tb = 1, .bias_row = 1, .alpha = 1, .beta = 1},
      {.m = 33, .n = 10, .k = 257, .ta = 1, .tb = 1, .act = CPU_ACT_CLIP, .alpha = 2, .beta = 0.5},
      /* n a multiple of 48 from 384 on: the 8 x 48 kernel on AVX-512, with B
       * packed ahead or per call, transposed or not; from 256 on the 4 x 24
       * kernel on AVX2 (with A packed ahead and B by cpu_gemm_pack_b, A is
       * packed again in 4-row panels) */
      {.m = 128, .n = 768, .k = 768, .pack_b = 1, .bias_col = 1, .alpha = 1},
      {.m = 37, .n = 432, .k = 300, .tb = 1, .bias_row = 1, .act = CPU_ACT_LEAKY_RELU, .alpha = 1},
      {.m = 20, .n = 480, .k = 65, .pack_a = 1, .pack_b = 1, .tb = 1, .alpha = 0.5, .beta = 1},
      {.m = 9, .n = 384, .k = 1000, .ta = 1, .bias_col = 1, .act = CPU_ACT_RELU, .alpha = 1},
      /* more rows than a tile with packed B (matmul_1024): on one thread each
       * row block's A is packed just before its tiles, transposed or not */
      {.m = 300, .n = 200, .k = 520, .pack_b = 1, .bias_row = 1, .alpha = 1},
      {.m = 277, .n = 70, .k = 300, .ta = 1, .pack_b = 1, .act = CPU_ACT_RELU, .alpha = 1},
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(cases); i++) {
    check_full(&cases[i], (OnyxThreadPool*)&host);
    check_full(&cases[i], NULL);
  }
}

/* One row of A with B packed ahead (a Gemm or MatMul at batch 1): the row
 * path streams each packed panel once. Column counts around every panel
 * width (8 .. 48, the wide panels from 256 and 384 columns on), k around
 * its 4 interleaved partial sums, B transposed or not, every epilogue
 * feature; on every micro-kernel, with and without the pool. */
static void test_one_row_packed_b(void** state) {
  (void)state;
  static const size_t NS[] = {1, 7, 8, 15, 16, 17, 24, 31, 32, 33, 47, 48, 49, 100, 256, 432, 1000};
  static const size_t KS[] = {1, 2, 3, 4, 5, 7, 8, 9, 63, 257, 1280};
  const int top = max_isa_level();
  for (int level = 0; level <= top; level++) {
    cpu_gemm_force_isa(level);
    srand(11 + (unsigned)level);
    for (size_t i = 0; i < CPU_ARRAY_LEN(NS); i++)
      for (size_t q = 0; q < CPU_ARRAY_LEN(KS); q++) {
        const int f = (int)(i * CPU_ARRAY_LEN(KS) + q);
        const Case t = {.m = 1,
                        .n = NS[i],
                        .k = KS[q],
                        .tb = f % 2,
                        .pack_b = 1,
                        .bias_row = f % 3 == 0,
                        .bias_col = f % 5 < 3,
                        .act = f % 4,
                        .alpha = f % 7 == 0 ? -0.5 : 1,
                        .beta = f % 6 == 1 ? 0.5 : 0};
        check_full(&t, f % 2 ? (OnyxThreadPool*)&host : NULL);
      }
  }
  cpu_gemm_force_isa(-1);
}

/* k = 0: C = beta * C + biases, then the activation. */
static void test_k_zero_epilogue(void** state) {
  (void)state;
  float c[6] = {1, -2, 3, -4, 5, -6};
  const float br[2] = {10, -20}, bc[3] = {1, 2, 3};
  CpuGemm g = {.m = 2,
               .n = 3,
               .k = 0,
               .a = c,
               .lda = 1,
               .b = c,
               .ldb = 3,
               .c = c,
               .ldc = 3,
               .alpha = 1,
               .beta = 2,
               .bias_row = br,
               .bias_col = bc,
               .act = CPU_ACT_RELU};
  cpu_gemm_f32(NULL, &g);
  /* row 0: 2*{1,-2,3} + 10 + {1,2,3} = {13, 8, 19}; row 1: 2*{-4,5,-6} - 20 + {1,2,3} */
  const float want[6] = {13, 8, 19, 0, 0, 0};
  for (int i = 0; i < 6; i++)
    assert_float_equal(c[i], want[i], 1e-6);
}

/* B produced on demand (pack_b_fn, as Conv's im2col does): the callback
 * here writes the NR-wide panel rows straight from a row-major B. */
typedef struct RawB {
  const float* b;
  size_t ldb, n;
  int calls;
} RawB;

static void pack_from_raw(void* user, float* dst, size_t panel, size_t k0, size_t k1) {
  RawB* r = user;
  const size_t nr = cpu_gemm_nr();
  r->calls++;
  for (size_t q = k0; q < k1; q++)
    for (size_t j = 0; j < nr; j++) {
      const size_t col = panel * nr + j;
      dst[(q - k0) * nr + j] = col < r->n ? r->b[q * r->ldb + col] : 0.0f;
    }
}

static void test_b_on_demand(void** state) {
  (void)state;
  srand(11);
  const size_t shapes[][3] = {{64, 3136 / 8, 576}, {13, 49, 300}, {70, 33, 1}, {8, 32, 256}};
  for (int level = 0; level <= max_isa_level(); level++) {
    cpu_gemm_force_isa(level);
    for (size_t s = 0; s < CPU_ARRAY_LEN(shapes); s++) {
      const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      float* a = malloc(sizeof(float) * m * k);
      float* b = malloc(sizeof(float) * k * n);
      float* c = malloc(sizeof(float) * m * n);
      float* br = malloc(sizeof(float) * m);
      assert_non_null(a), assert_non_null(b), assert_non_null(c), assert_non_null(br);
      for (size_t i = 0; i < m * k; i++)
        a[i] = rnd();
      for (size_t i = 0; i < k * n; i++)
        b[i] = rnd();
      for (size_t i = 0; i < m; i++)
        br[i] = rnd();
      RawB raw = {b, n, n, 0};
      CpuGemm g = {.m = m,
                   .n = n,
                   .k = k,
                   .a = a,
                   .lda = k,
                   .c = c,
                   .ldc = n,
                   .alpha = 1,
                   .bias_row = br,
                   .act = CPU_ACT_RELU,
                   .pack_b_fn = pack_from_raw,
                   .pack_b_user = &raw};
      cpu_gemm_f32(s % 2 ? (OnyxThreadPool*)&host : NULL, &g);
      assert_true(raw.calls > 0);
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
          double acc = br[i];
          for (size_t p = 0; p < k; p++)
            acc += (double)a[i * k + p] * b[p * n + j];
          acc = acc < 0 ? 0 : acc;
          if (!(fabs(c[i * n + j] - acc) <= 1e-3 * (1 + fabs(acc))))
            fail_msg("isa %s m=%zu n=%zu k=%zu: C[%zu,%zu] = %g, want %g", cpu_gemm_isa_name(), m,
                     n, k, i, j, c[i * n + j], acc);
        }
      free(a), free(b), free(c), free(br);
    }
  }
  cpu_gemm_force_isa(-1);
}

/* No memory for packing A: each tile packs A slices itself, same results. */
static void test_without_pack_memory(void** state) {
  (void)state;
  srand(5);
  cpu_gemm_test_fail_alloc(1);
  for (int level = 0; level <= max_isa_level(); level++) {
    cpu_gemm_force_isa(level);
    for (int it = 0; it < 30; it++) {
      Case t = {.m = (size_t)(rand() % 40 + 1),
                .n = (size_t)(rand() % 80 + 1),
                .k = (size_t)(rand() % 600),
                .ta = rand() % 2,
                .tb = rand() % 2,
                .pack_b = rand() % 2,
                .bias_row = rand() % 2,
                .bias_col = rand() % 2,
                .act = rand() % 4,
                .alpha = 1.5,
                .beta = (rand() % 3) * 0.5};
      check_full(&t, it % 2 ? (OnyxThreadPool*)&host : NULL);
    }
  }
  cpu_gemm_force_isa(-1);
  cpu_gemm_test_fail_alloc(0);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma,avx"))) static void store_first(float* d, const float* src,
                                                                size_t n) {
  cpu_store_first_avx2(d, _mm256_loadu_ps(src), n);
}
#endif

/* The AVX2 kernels' tail store (no masked stores): lanes [0, n) land in
 * order and nothing past them is touched, for every n from 0 to 9. */
static void test_store_first(void** state) {
  (void)state;
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx2")) skip();
  const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (size_t n = 0; n <= 9; n++) {
    float d[12];
    for (size_t i = 0; i < 12; i++)
      d[i] = -1.0f;
    store_first(d + 1, src, n);
    assert_true(d[0] == -1.0f);
    for (size_t i = 0; i < 11; i++)
      assert_true(d[1 + i] == (i < n && i < 8 ? src[i] : -1.0f));
  }
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_shapes),
      cmocka_unit_test(test_edge_shapes),
      cmocka_unit_test(test_thread_count_independent),
      cmocka_unit_test(test_every_kernel_every_feature),
      cmocka_unit_test(test_model_shapes),
      cmocka_unit_test(test_one_row_packed_b),
      cmocka_unit_test(test_k_zero_epilogue),
      cmocka_unit_test(test_b_on_demand),
      cmocka_unit_test(test_without_pack_memory),
      cmocka_unit_test(test_store_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
