/* cpu_gemm.h — internal to the CPU provider: the float32 GEMM core
 * (cpu_gemm.c) and its float64 loop, the operand packing, and the
 * activations its epilogue applies (CpuAct). Conv (cpu_conv.c and the conv
 * files), MatMul/Gemm (cpu_linalg.c), the contrib ops and the gradient
 * kernels call it; it depends on no kernel family. */
#ifndef CPU_GEMM_H
#define CPU_GEMM_H

#include <math.h>
#include "cpu_kernels.h"
#include "cpu_vmath.h"

/* The activations the GEMM epilogue (and the conv paths) apply to C. */
typedef enum CpuAct {
  CPU_ACT_NONE = 0,
  CPU_ACT_RELU,       /* max(x, 0) */
  CPU_ACT_LEAKY_RELU, /* x < 0 ? act_alpha * x : x */
  CPU_ACT_CLIP,       /* min(max(x, act_min), act_max) */
  /* The row activations (cpu_act_is_row): the vector epilogues store the
   * tile or row first, then cpu_act_row runs the provider's vector
   * polynomials (cpu_vmath.c) over it while it is still in cache. */
  CPU_ACT_HARD_SIGMOID, /* clamp(act_alpha * x + beta, 0, 1), beta carried in act_min */
  CPU_ACT_HARD_SWISH,   /* x * clamp(x / 6 + 1 / 2, 0, 1) */
  CPU_ACT_SIGMOID,      /* 1 / (1 + exp(-x)) */
  CPU_ACT_SILU,         /* x * sigmoid(x) */
  CPU_ACT_TANH          /* tanh(x) */
} CpuAct;

/* act is applied by cpu_act_row after the store, not inside an epilogue's
 * vector registers. */
static inline int cpu_act_is_row(int act) {
  return act >= CPU_ACT_HARD_SIGMOID && act <= CPU_ACT_TANH;
}

/* sigmoid in double without overflow: cpu_vmath.c's scalar rule. */
static inline double cpu_act_sigmoid_d(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

static inline double cpu_act_clamp01_d(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

/* The activation act (a CpuAct) of one value; NaN is kept. The scalar form of
 * every epilogue (GEMM, Winograd, Conv with a residual Z); the row
 * activations as cpu_vmath.c's scalar paths compute them. */
static inline float cpu_act_apply(float x, int act, float alpha, float lo, float hi) {
  switch (act) {
  case CPU_ACT_RELU:
    return x < 0.0f ? 0.0f : x;
  case CPU_ACT_LEAKY_RELU:
    return x < 0.0f ? x * alpha : x;
  case CPU_ACT_CLIP:
    return x < lo ? lo : x > hi ? hi : x;
  case CPU_ACT_HARD_SIGMOID:
    return (float)cpu_act_clamp01_d((double)alpha * x + lo);
  case CPU_ACT_HARD_SWISH:
    return (float)(x * cpu_act_clamp01_d(x / 6.0 + 0.5));
  case CPU_ACT_SIGMOID:
    return (float)cpu_act_sigmoid_d(x);
  case CPU_ACT_SILU:
    return x * (float)cpu_act_sigmoid_d(x);
  case CPU_ACT_TANH:
    return tanhf(x);
  default:
    return x;
  }
}

/* y[i] = act(x[i]) for n values (x and y may alias): the row activations
 * through cpu_vmath.c's AVX-512 / AVX2 / scalar paths (ONYX_CPU_ISA caps
 * them), the others through cpu_act_apply. */
static inline void cpu_act_row(const float* x, float* y, size_t n, int act, float alpha, float lo,
                               float hi) {
  switch (act) {
  case CPU_ACT_HARD_SIGMOID:
    cpu_hardsigmoid_f32(x, y, n, alpha, lo);
    return;
  case CPU_ACT_HARD_SWISH:
    cpu_hardswish_f32(x, y, n);
    return;
  case CPU_ACT_SIGMOID:
    cpu_sigmoid_f32(x, y, n);
    return;
  case CPU_ACT_SILU:
    cpu_silu_f32(x, y, n);
    return;
  case CPU_ACT_TANH:
    cpu_tanh_f32(x, y, n);
    return;
  default:
    for (size_t i = 0; i < n; i++)
      y[i] = cpu_act_apply(x[i], act, alpha, lo, hi);
  }
}

/* C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, row-major
 * with leading dimensions in elements. op(A) is A, or A stored k x m when
 * trans_a; op(B) is B, or B stored n x k when trans_b (float32 only; the
 * float64 loop needs trans_b == 0). beta == 0 overwrites C without reading
 * it (so NaN garbage does not leak).
 *
 * float32 extras (cpu_gemm.c): packed_a / packed_b, when set, replace a / b
 * with operands packed by cpu_gemm_pack_a / cpu_gemm_pack_b (weights packed
 * once at kernel creation; with both set, `a` is needed too: a B that
 * cpu_gemm_pack_b packed for the AVX2 4 x 24 kernel takes A packed again in
 * its 4-row panels); bias_row (m values) and bias_col (n values) are
 * added and the activation `act` applied on the way out, saving passes over
 * C. */
typedef struct CpuGemm {
  size_t m, n, k;
  const void* a;
  size_t lda;
  int trans_a;
  const void* b;
  size_t ldb;
  void* c;
  size_t ldc;
  double alpha, beta;
  int trans_b;
  const float* packed_a;
  const float* packed_b;
  const float* bias_row;
  const float* bias_col;
  int act; /* CpuAct */
  float act_alpha, act_min, act_max;
  /* B produced on demand instead of read (b, packed_b unused): writes rows
   * [k0, k1) of packed panel `panel` (columns panel * NR ...; zero past n)
   * as (k1 - k0) x NR floats to dst. May run on any pool thread. */
  void (*pack_b_fn)(void* user, float* dst, size_t panel, size_t k0, size_t k1);
  void* pack_b_user;
  /* packed_b was packed by the caller in panels of cpu_gemm_nr() columns
   * (not by cpu_gemm_pack_b, whose panel width may depend on n). */
  int packed_b_base;
  /* Applied in place (x == y) to each row of each tile of C once its last
   * k block is stored, while the tile is still in cache: FusedMatMul's
   * Gelu. NULL: none. */
  void (*post_row)(const float* x, float* y, size_t n);
  /* Polled once per k block of each tile (NULL: never): once stopped, the
   * remaining tiles are skipped and C is left incomplete; the caller checks
   * cpu_stop_seen. */
  struct CpuStop* stop;
} CpuGemm;

/* Splits C into tiles run on `pool` (NULL: the calling thread only). Each
 * element of C is summed over k in a fixed order, so results do not depend
 * on the number of threads. Picks the AVX-512, AVX2 or portable micro-kernel
 * at run time. One column (n == 1, op(B) contiguous, A given row major, no
 * post_row) runs as a dot product per row of A instead; one row (m == 1, A
 * given and contiguous, B packed, no post_row) as one pass over each packed
 * panel of B. */
void cpu_gemm_f32(OnyxThreadPool* pool, const CpuGemm* g);
/* A plain loop for float64: correct, not fast. */
void cpu_gemm_f64(OnyxThreadPool* pool, const CpuGemm* g);

/* Packed operands for cpu_gemm_f32 (layouts in cpu_gemm.c; they depend on
 * the micro-kernel the machine gets, so pack in the same process). Sizes in
 * floats; buffers should be 64-byte aligned. pool may be NULL. */
size_t cpu_gemm_packed_a_floats(size_t m, size_t k);
size_t cpu_gemm_packed_b_floats(size_t k, size_t n);
void cpu_gemm_pack_a(OnyxThreadPool* pool, float* dst, const float* a, size_t lda, int trans_a,
                     size_t m, size_t k);
void cpu_gemm_pack_b(OnyxThreadPool* pool, float* dst, const float* b, size_t ldb, int trans_b,
                     size_t k, size_t n);
/* Memory for a packed operand of `floats` floats (free() it): 64-byte
 * aligned, and from 2 MiB up 2 MiB aligned with transparent huge pages
 * asked for (a packed weight is streamed from memory on every run; with
 * 4 KiB pages each 4 KiB of it costs a TLB miss, a two-level page walk in a
 * VM). NULL without memory. */
float* cpu_gemm_alloc_packed(size_t floats);
/* The micro-kernel's register tile: packed A panels hold MR rows, packed B
 * panels NR columns (K x NR floats each, panel p at p * K * NR). */
size_t cpu_gemm_mr(void);
size_t cpu_gemm_nr(void);
/* "avx512", "avx2" or "generic". */
const char* cpu_gemm_isa_name(void);
/* The same as a number, for dispatch on hot paths (a softmax row, a conv
 * call): CPU_ISA_GENERIC, CPU_ISA_AVX2 or CPU_ISA_AVX512. The GEMM's own
 * level also asks for avx512vl and avx512dq (cpu_isa_level does not). */
#ifndef CPU_ISA_LEVELS_DEFINED
#define CPU_ISA_LEVELS_DEFINED
enum { CPU_ISA_GENERIC = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };
#endif
int cpu_gemm_isa_level(void);
/* Tests: pin the micro-kernel (0 portable, 1 AVX2, 2 AVX-512; -1 detect).
 * Never ask for more than the machine has. */
void cpu_gemm_force_isa(int level);
/* Tests: make the packing buffer's allocation fail (the on-the-fly path). */
void cpu_gemm_test_fail_alloc(int on);

#endif /* CPU_GEMM_H */
