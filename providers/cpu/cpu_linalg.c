/* cpu_linalg.c — MatMul and Gemm over the GEMM cores (cpu_gemm.c for
 * float32, a plain loop here for float64, integer loops).
 *
 * A float32 MatMul or Gemm whose B is a constant (an initializer) packs it
 * once at kernel creation into the micro-kernel's panel layout, so a run
 * only packs the activations. */
#include "cpu_nn.h"
#include "cpu_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many multiply-adds a GEMM runs on the calling thread only. */
#define GEMM_INLINE_WORK (64 * 64 * 64)
#define MAX_RANK         16

static size_t min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}

/* ------------------------------------------------------------------------ */
/* Transpose                                                                  */
/* ------------------------------------------------------------------------ */

#define DEFINE_TRANSPOSE(T)                                                                        \
  static void transpose_##T(T* restrict dst, const T* restrict src, size_t rows, size_t cols) {    \
    for (size_t r0 = 0; r0 < rows; r0 += 32)                                                       \
      for (size_t c0 = 0; c0 < cols; c0 += 32)                                                     \
        for (size_t r = r0; r < min_sz(r0 + 32, rows); r++)                                        \
          for (size_t c = c0; c < min_sz(c0 + 32, cols); c++)                                      \
            dst[c * rows + r] = src[r * cols + c];                                                 \
  }
DEFINE_TRANSPOSE(uint32_t)
DEFINE_TRANSPOSE(uint64_t)

void cpu_nn_transpose(void* dst, const void* src, size_t rows, size_t cols, size_t elem_size) {
  if (elem_size == 4)
    transpose_uint32_t(dst, src, rows, cols);
  else
    transpose_uint64_t(dst, src, rows, cols);
}

/* ------------------------------------------------------------------------ */
/* fp64: rows in parallel, a plain i-k-j loop per row                         */
/* ------------------------------------------------------------------------ */

static void gemm_f64_rows(void* user, size_t begin, size_t end) {
  const CpuGemm* g = user;
  const double* a = g->a;
  const double* b = g->b;
  size_t polled = 0;
  for (size_t i = begin; i < end; i++) {
    if (g->stop && cpu_stop_poll(g->stop, &polled, g->n * g->k + 1)) return;
    double* restrict c = (double*)g->c + i * g->ldc;
    for (size_t j = 0; j < g->n; j++)
      c[j] = g->beta == 0.0 ? 0.0 : g->beta * c[j];
    for (size_t p = 0; p < g->k; p++) {
      const double av = g->alpha * (g->trans_a ? a[p * g->lda + i] : a[i * g->lda + p]);
      const double* restrict brow = b + p * g->ldb;
      for (size_t j = 0; j < g->n; j++)
        c[j] += av * brow[j];
    }
  }
}

void cpu_gemm_f64(OnyxThreadPool* pool, const CpuGemm* g) {
  if (g->m == 0 || g->n == 0) return;
  if ((double)g->m * (double)g->n * (double)g->k < GEMM_INLINE_WORK)
    gemm_f64_rows((void*)g, 0, g->m);
  else
    cpu_host->parallel_for(pool, g->m, gemm_f64_rows, (void*)g);
}

/* ------------------------------------------------------------------------ */
/* Integer MatMul: a plain loop. Sums wrap around (computed unsigned), which  */
/* is what every runtime does and keeps UBSan quiet.                          */
/* ------------------------------------------------------------------------ */

/* stop: the run's cancellation, polled per row (NULL: never). */
typedef void (*MatMulFn)(OnyxThreadPool* pool, const void* a, const void* b, void* c, size_t m,
                         size_t n, size_t k, CpuStop* stop);

#define DEFINE_INT_MATMUL(T, UT)                                                                   \
  static void matmul_##T(OnyxThreadPool* pool, const void* av, const void* bv, void* cv, size_t m, \
                         size_t n, size_t k, CpuStop* stop) {                                      \
    const T* a = av;                                                                               \
    const T* b = bv;                                                                               \
    T* c = cv;                                                                                     \
    size_t polled = 0;                                                                             \
    for (size_t i = 0; i < m; i++)                                                                 \
      for (size_t j = 0; j < n; j++) {                                                             \
        if (cpu_stop_poll(stop, &polled, k + 1)) return;                                           \
        UT acc = 0;                                                                                \
        for (size_t p = 0; p < k; p++)                                                             \
          acc += (UT)a[i * k + p] * (UT)b[p * n + j];                                              \
        c[i * n + j] = (T)acc;                                                                     \
      }                                                                                            \
    (void)pool;                                                                                    \
  }
DEFINE_INT_MATMUL(int32_t, uint32_t)
DEFINE_INT_MATMUL(int64_t, uint64_t)
DEFINE_INT_MATMUL(uint32_t, uint32_t)
DEFINE_INT_MATMUL(uint64_t, uint64_t)

static void matmul_float(OnyxThreadPool* pool, const void* a, const void* b, void* c, size_t m,
                         size_t n, size_t k, CpuStop* stop) {
  const CpuGemm g = {.m = m,
                     .n = n,
                     .k = k,
                     .a = a,
                     .lda = k,
                     .b = b,
                     .ldb = n,
                     .c = c,
                     .ldc = n,
                     .alpha = 1.0,
                     .stop = stop};
  cpu_gemm_f32(pool, &g);
}

static void matmul_double(OnyxThreadPool* pool, const void* a, const void* b, void* c, size_t m,
                          size_t n, size_t k, CpuStop* stop) {
  const CpuGemm g = {.m = m,
                     .n = n,
                     .k = k,
                     .a = a,
                     .lda = k,
                     .b = b,
                     .ldb = n,
                     .c = c,
                     .ldc = n,
                     .alpha = 1.0,
                     .stop = stop};
  cpu_gemm_f64(pool, &g);
}

static const struct {
  OnyxElemType type;
  size_t size;
  MatMulFn fn;
} MATMUL_TYPES[] = {
    {ONYX_ELEM_FLOAT32, 4, matmul_float},   {ONYX_ELEM_FLOAT64, 8, matmul_double},
    {ONYX_ELEM_INT32, 4, matmul_int32_t},   {ONYX_ELEM_INT64, 8, matmul_int64_t},
    {ONYX_ELEM_UINT32, 4, matmul_uint32_t}, {ONYX_ELEM_UINT64, 8, matmul_uint64_t},
};

/* ------------------------------------------------------------------------ */
/* MatMul: numpy semantics                                                    */
/* ------------------------------------------------------------------------ */

/* The shapes of one MatMul call after 1-D promotion and batch broadcasting. */
typedef struct MatMulShape {
  size_t m, n, k;
  size_t batch_rank;
  int64_t batch[MAX_RANK];   /* output batch dims */
  int64_t a_batch[MAX_RANK]; /* right-aligned, padded with 1 */
  int64_t b_batch[MAX_RANK];
  int64_t out[MAX_RANK + 2];
  size_t out_rank;
} MatMulShape;

static void align_batch(int64_t* dst, size_t rank, const int64_t* dims, size_t n) {
  for (size_t i = 0; i < rank; i++)
    dst[i] = i + n < rank ? 1 : dims[i + n - rank];
}

static OnyxStatus* matmul_shape(const OnyxNode* node, const OnyxTensor* a, const OnyxTensor* b,
                                MatMulShape* s) {
  const size_t ra = cpu_host->tensor_rank(a), rb = cpu_host->tensor_rank(b);
  const int64_t* da = cpu_host->tensor_dims(a);
  const int64_t* db = cpu_host->tensor_dims(b);
  if (ra == 0 || rb == 0 || ra > MAX_RANK || rb > MAX_RANK)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "inputs must have rank 1..%d, got ranks %zu and %zu", MAX_RANK, ra, rb);
  s->m = ra == 1 ? 1 : (size_t)da[ra - 2];
  s->k = (size_t)da[ra - 1];
  const size_t kb = rb == 1 ? (size_t)db[0] : (size_t)db[rb - 2];
  s->n = rb == 1 ? 1 : (size_t)db[rb - 1];
  if (s->k != kb)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "inner dimensions differ: A has K=%zu, B has K=%zu", s->k, kb);
  const size_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
  s->batch_rank = na > nb ? na : nb;
  align_batch(s->a_batch, s->batch_rank, da, na);
  align_batch(s->b_batch, s->batch_rank, db, nb);
  for (size_t i = 0; i < s->batch_rank; i++) {
    const int64_t x = s->a_batch[i], y = s->b_batch[i];
    if (x != y && x != 1 && y != 1)
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "batch dimension %zu cannot broadcast: %lld vs %lld", i, (long long)x,
                       (long long)y);
    s->batch[i] = x == 1 ? y : x;
    s->out[i] = s->batch[i];
  }
  s->out_rank = s->batch_rank;
  if (ra > 1) s->out[s->out_rank++] = (int64_t)s->m;
  if (rb > 1) s->out[s->out_rank++] = (int64_t)s->n;
  return NULL;
}

/* Element offset of batch `index` into a tensor with (broadcast) batch dims
 * `dims`, each matrix holding `mat` elements. */
static size_t batch_offset(const MatMulShape* s, const int64_t* dims, size_t index, size_t mat) {
  size_t off = 0, stride = mat;
  for (size_t i = s->batch_rank; i-- > 0;) {
    const size_t coord = index % (size_t)s->batch[i];
    index /= (size_t)s->batch[i];
    if (dims[i] != 1) off += coord * stride;
    stride *= (size_t)dims[i];
  }
  return off;
}

typedef struct MatMulJob {
  const MatMulShape* s;
  MatMulFn fn;
  size_t esize;
  const char* a;
  const char* b;
  char* c;
  OnyxThreadPool* inner_pool; /* NULL when batches are what runs in parallel */
  CpuStop* stop;
} MatMulJob;

static void matmul_batches(void* user, size_t begin, size_t end) {
  const MatMulJob* j = user;
  const MatMulShape* s = j->s;
  for (size_t i = begin; i < end; i++) {
    if (cpu_stop_seen(j->stop)) return;
    const size_t ao = batch_offset(s, s->a_batch, i, s->m * s->k);
    const size_t bo = batch_offset(s, s->b_batch, i, s->k * s->n);
    j->fn(j->inner_pool, j->a + ao * j->esize, j->b + bo * j->esize,
          j->c + i * s->m * s->n * j->esize, s->m, s->n, s->k, j->stop);
  }
}

/* A constant 2-D float32 B, packed once. */
typedef struct PackedB {
  size_t k, n;
  float* data; /* cpu_gemm_pack_b layout, or NULL */
} PackedB;

static float* alloc_floats(size_t n) {
  return cpu_gemm_alloc_packed(n);
}

/* Packs input 1 when it is a constant 2-D float32 tensor (op(B) = B^T when
 * trans). Leaves p->data NULL otherwise, or when memory is short (the
 * kernel then packs per run). */
static void pack_const_b(const OnyxNode* node, int trans, PackedB* p) {
  const OnyxValueInfo* bv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* b = bv ? cpu_host->value_constant(bv) : NULL;
  p->data = NULL;
  if (!b || cpu_host->tensor_rank(b) != 2 || cpu_host->tensor_elem_type(b) != ONYX_ELEM_FLOAT32)
    return;
  const int64_t* d = cpu_host->tensor_dims(b);
  p->k = (size_t)d[trans ? 1 : 0];
  p->n = (size_t)d[trans ? 0 : 1];
  if (p->k == 0 || p->n == 0) return;
  p->data = alloc_floats(cpu_gemm_packed_b_floats(p->k, p->n));
  if (p->data)
    cpu_gemm_pack_b(NULL, p->data, cpu_host->tensor_data(b), (size_t)d[1], trans, p->k, p->n);
}

static OnyxStatus* matmul_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep, (void)user_data;
  PackedB* p = calloc(1, sizeof *p);
  if (!p) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  pack_const_b(node, 0, p);
  *state = p;
  return NULL;
}

static void matmul_release(void* state) {
  PackedB* p = state;
  if (!p) return;
  free(p->data);
  free(p);
}

static OnyxStatus* matmul_compute(void* state, OnyxKernelContext* ctx) {
  const PackedB* packed = state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 1);
  MatMulShape s;
  OnyxStatus* st = matmul_shape(node, a, b, &s);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, s.out, s.out_rank, &y))) return st;
  const OnyxElemType t = cpu_host->tensor_elem_type(a);
  size_t ti = 0;
  while (ti < CPU_ARRAY_LEN(MATMUL_TYPES) && MATMUL_TYPES[ti].type != t)
    ti++;
  if (ti == CPU_ARRAY_LEN(MATMUL_TYPES) || cpu_host->tensor_elem_type(b) != t)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "element type %d not supported", (int)t);
  const size_t batches = cpu_dims_product(s.batch, 0, s.batch_rank);
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  CpuStop stop = {.ctx = ctx};
  MatMulJob job = {&s,
                   MATMUL_TYPES[ti].fn,
                   MATMUL_TYPES[ti].size,
                   cpu_host->tensor_data(a),
                   cpu_host->tensor_data(b),
                   cpu_host->tensor_mutable_data(y),
                   pool,
                   &stop};
  /* B shared by every batch and A not broadcast: one tall GEMM, better
   * parallelism than many short ones. */
  int a_full = 1;
  for (size_t i = 0; i < s.batch_rank; i++)
    a_full &= s.a_batch[i] == s.batch[i];
  if (a_full && cpu_dims_product(s.b_batch, 0, s.batch_rank) == 1) {
    if (packed && packed->data && t == ONYX_ELEM_FLOAT32 && packed->k == s.k && packed->n == s.n &&
        cpu_host->tensor_rank(b) == 2) {
      const CpuGemm g = {.m = batches * s.m,
                         .n = s.n,
                         .k = s.k,
                         .a = job.a,
                         .lda = s.k,
                         .c = job.c,
                         .ldc = s.n,
                         .alpha = 1.0,
                         .packed_b = packed->data,
                         .stop = &stop};
      cpu_gemm_f32(pool, &g);
      return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
    }
    job.fn(pool, job.a, job.b, job.c, batches * s.m, s.n, s.k, &stop);
    return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
  }
  if (batches >= cpu_host->thread_pool_size(pool) && batches > 1) {
    job.inner_pool = NULL;
    cpu_host->parallel_for(pool, batches, matmul_batches, &job);
  } else {
    matmul_batches(&job, 0, batches);
  }
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Gemm                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct GemmState {
  const OnyxNode* node;
  int trans_a, trans_b;
  double alpha, beta;
  int legacy;       /* opset 1-6: the `broadcast` attribute governs C */
  int legacy_bcast; /* its value */
  PackedB packed;   /* constant float32 B, packed once */
} GemmState;

/* Opset 1-6 and 7+ differ only in how C may broadcast. */
static const int GEMM_LEGACY = 1, GEMM_MODERN = 0;

static void gemm_release(void* state) {
  GemmState* s = state;
  if (!s) return;
  free(s->packed.data);
  free(s);
}

static OnyxStatus* gemm_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  GemmState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->trans_a = cpu_host->node_attr_int(node, "transA", 0) != 0;
  s->trans_b = cpu_host->node_attr_int(node, "transB", 0) != 0;
  s->alpha = cpu_host->node_attr_float(node, "alpha", 1.0f);
  s->beta = cpu_host->node_attr_float(node, "beta", 1.0f);
  s->legacy = *(const int*)user_data;
  s->legacy_bcast = (int)cpu_host->node_attr_int(node, "broadcast", 0);
  pack_const_b(node, s->trans_b, &s->packed);
  *state = s;
  return NULL;
}

/* Y = beta * C broadcast to (m, n); C of rank 0..2, unidirectional. */
#define DEFINE_FILL_C(T)                                                                           \
  static void fill_c_##T(T* y, const T* c, size_t m, size_t n, size_t sm, size_t sn, T beta) {     \
    for (size_t i = 0; i < m; i++)                                                                 \
      for (size_t j = 0; j < n; j++)                                                               \
        y[i * n + j] = beta * c[i * sm + j * sn];                                                  \
  }
DEFINE_FILL_C(float)
DEFINE_FILL_C(double)

static OnyxStatus* gemm_apply_c(const GemmState* s, const OnyxTensor* c, OnyxTensor* y, size_t m,
                                size_t n) {
  const size_t rank = cpu_host->tensor_rank(c);
  const int64_t* d = cpu_host->tensor_dims(c);
  const size_t cm = rank == 2 ? (size_t)d[0] : 1, cn = rank >= 1 ? (size_t)d[rank - 1] : 1;
  int ok = rank <= 2 && (cm == 1 || cm == m) && (cn == 1 || cn == n);
  if (s->legacy && !s->legacy_bcast) ok = rank == 2 && cm == m && cn == n;
  if (!ok)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "C of rank %zu (%zu x %zu) does not broadcast to (%zu, %zu)", rank, cm, cn, m,
                     n);
  const size_t sm = cm == 1 ? 0 : cn, sn = cn == 1 ? 0 : 1;
  if (cpu_host->tensor_elem_type(y) == ONYX_ELEM_FLOAT32)
    fill_c_float(cpu_host->tensor_mutable_data(y), cpu_host->tensor_data(c), m, n, sm, sn,
                 (float)s->beta);
  else
    fill_c_double(cpu_host->tensor_mutable_data(y), cpu_host->tensor_data(c), m, n, sm, sn,
                  s->beta);
  return NULL;
}

static OnyxStatus* gemm_compute(void* state, OnyxKernelContext* ctx) {
  const GemmState* s = state;
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* c = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  if (cpu_host->tensor_rank(a) != 2 || cpu_host->tensor_rank(b) != 2)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "A and B must be 2-D, got ranks %zu and %zu",
                     cpu_host->tensor_rank(a), cpu_host->tensor_rank(b));
  const OnyxElemType t = cpu_host->tensor_elem_type(a);
  if (t != ONYX_ELEM_FLOAT32 && t != ONYX_ELEM_FLOAT64)
    return cpu_error(s->node, ONYX_NOT_IMPLEMENTED, "element type %d not supported", (int)t);
  const int64_t* da = cpu_host->tensor_dims(a);
  const int64_t* db = cpu_host->tensor_dims(b);
  const size_t m = (size_t)da[s->trans_a ? 1 : 0], k = (size_t)da[s->trans_a ? 0 : 1];
  const size_t kb = (size_t)db[s->trans_b ? 1 : 0], n = (size_t)db[s->trans_b ? 0 : 1];
  if (k != kb)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "inner dimensions differ: op(A) is %zu x %zu, op(B) is %zu x %zu", m, k, kb,
                     n);
  OnyxTensor* y;
  const int64_t out[2] = {(int64_t)m, (int64_t)n};
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, out, 2, &y);
  if (st) return st;
  if (m == 0 || n == 0) return NULL;
  const int use_c = c && s->beta != 0.0;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  CpuStop stop = {.ctx = ctx};
  if (t == ONYX_ELEM_FLOAT32) {
    /* C of n values with beta 1 (a bias) is added by the GEMM's epilogue. */
    const size_t cr = use_c ? cpu_host->tensor_rank(c) : 0;
    const int64_t* cd = use_c ? cpu_host->tensor_dims(c) : NULL;
    const int bias =
        use_c && s->beta == 1.0 && (!s->legacy || s->legacy_bcast) &&
        ((cr == 1 && (size_t)cd[0] == n) || (cr == 2 && cd[0] == 1 && (size_t)cd[1] == n));
    if (use_c && !bias && (st = gemm_apply_c(s, c, y, m, n))) return st;
    const int packed = s->packed.data && s->packed.k == k && s->packed.n == n;
    const CpuGemm g = {.m = m,
                       .n = n,
                       .k = k,
                       .a = cpu_host->tensor_data(a),
                       .lda = s->trans_a ? m : k,
                       .trans_a = s->trans_a,
                       .b = cpu_host->tensor_data(b),
                       .ldb = s->trans_b ? k : n,
                       .trans_b = s->trans_b,
                       .packed_b = packed ? s->packed.data : NULL,
                       .bias_col = bias ? cpu_host->tensor_data(c) : NULL,
                       .c = cpu_host->tensor_mutable_data(y),
                       .ldc = n,
                       .alpha = s->alpha,
                       .beta = use_c && !bias ? 1.0 : 0.0,
                       .stop = &stop};
    cpu_gemm_f32(pool, &g);
    return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
  }
  if (use_c && (st = gemm_apply_c(s, c, y, m, n))) return st;
  const void* bdata = cpu_host->tensor_data(b);
  if (s->trans_b) {
    void* tmp = cpu_host->ctx_scratch(ctx, k * n * 8 + 1);
    if (!tmp)
      return cpu_error(s->node, ONYX_OUT_OF_MEMORY, "no scratch for B^T (%zu bytes)", k * n * 8);
    cpu_nn_transpose(tmp, bdata, n, k, 8);
    bdata = tmp;
  }
  const CpuGemm g = {.m = m,
                     .n = n,
                     .k = k,
                     .a = cpu_host->tensor_data(a),
                     .lda = s->trans_a ? m : k,
                     .trans_a = s->trans_a,
                     .b = bdata,
                     .ldb = n,
                     .c = cpu_host->tensor_mutable_data(y),
                     .ldc = n,
                     .alpha = s->alpha,
                     .beta = use_c ? 1.0 : 0.0,
                     .stop = &stop};
  cpu_gemm_f64(pool, &g);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                               */
/* ------------------------------------------------------------------------ */

static const int32_t INTS[] = {ONYX_ELEM_INT32, ONYX_ELEM_INT64, ONYX_ELEM_UINT32,
                               ONYX_ELEM_UINT64};
static const OnyxTypeConstraint T_FLOATS[] = {{"T", cpu_types_float, 2}};
static const OnyxTypeConstraint T_INTS[] = {{"T", INTS, 4}};

OnyxStatus* cpu_register_linalg(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      /* MatMul behaves the same in every version; 9 added integer types. */
      {.op_type = "MatMul",
       .since_version = 1,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = T_FLOATS,
       .type_constraint_count = 1,
       .create = matmul_create,
       .compute = matmul_compute,
       .release = matmul_release},
      {.op_type = "MatMul",
       .since_version = 9,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = T_INTS,
       .type_constraint_count = 1,
       .compute = matmul_compute},
      {.op_type = "Gemm",
       .since_version = 1,
       .end_version = 6,
       .type_constraints = T_FLOATS,
       .type_constraint_count = 1,
       .create = gemm_create,
       .compute = gemm_compute,
       .release = gemm_release,
       .user_data = (void*)&GEMM_LEGACY},
      {.op_type = "Gemm",
       .since_version = 7,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = T_FLOATS,
       .type_constraint_count = 1,
       .create = gemm_create,
       .compute = gemm_compute,
       .release = gemm_release,
       .user_data = (void*)&GEMM_MODERN},
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxKernelDef d = defs[i];
    d.struct_size = sizeof d;
    d.domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}
