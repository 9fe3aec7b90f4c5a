/* cpu_quant_mm.c — quantized products: MatMulInteger and QLinearMatMul
 * (numpy matmul broadcasting; per-tensor, per-row and per-column zero points
 * and scales), ConvInteger and QLinearConv (N-D, groups, pads / auto_pad,
 * strides, dilations; per-output-channel weight zero points and scales).
 *
 * Plus com.microsoft QLinearAdd, QLinearMul and QLinearGlobalAveragePool (ONNX
 * Runtime's signatures).
 *
 * Two paths. uint8/int8 operands with float32 scales (and for QLinear*
 * sums of at most FAST_MAX_K terms) run on the int8 GEMM (cpu_qgemm.c):
 * int32 sums, zero points applied through row and column sums in the
 * epilogue, QLinear* requantized in float32 (sum * m, m = a_scale *
 * b_scale / y_scale rounded to float32 at each step, half to even, plus
 * the output zero point, saturated); depthwise convolutions run a direct
 * int32 loop. Everything else (float8, float16/bfloat16 scales, a per-row
 * a_scale, longer QLinear sums) accumulates operands minus their zero
 * points in double, exact for 8/16-bit operands up to 2^37 terms, and
 * scales the sum the same way in double. */
#include "cpu_qgemm.h"
#include "cpu_quant.h"
#include "cpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

static OnyxStatus* scratch(OnyxKernelContext* ctx, size_t bytes, void** out) {
  *out = cpu_host->ctx_scratch(ctx, bytes ? bytes : 1);
  return *out ? NULL : cpu_oom(ctx);
}

/* A zero point or scale: one value, one per row / column, or one per row /
 * column of each batch matrix. */
typedef enum { QP_NONE, QP_SCALAR, QP_VEC, QP_BATCH } QpMode;
typedef struct QParam {
  QpMode mode;
  int32_t type;
  const void* data;
} QParam;

/* Value for batch matrix `b`, row/column `i` of `len`. */
static double qp_get(const QParam* p, size_t b, size_t i, size_t len) {
  switch (p->mode) {
  case QP_NONE:
    return 0.0;
  case QP_SCALAR:
    return cpu_q_load(p->type, p->data, 0);
  case QP_VEC:
    return cpu_q_load(p->type, p->data, i);
  default:
    return cpu_q_load(p->type, p->data, b * len + i);
  }
}

/* Classifies parameter t of operand x (dims xd, rank xr): `row` true for A
 * (one per row, shape [M] or [..., M, 1]), false for B (shape [N] or
 * [..., 1, N]). */
static OnyxStatus* qp_init(OnyxKernelContext* ctx, const char* what, const OnyxTensor* t,
                           const int64_t* xd, size_t xr, bool row, QParam* p) {
  memset(p, 0, sizeof *p);
  if (!t) return NULL;
  p->type = cpu_host->tensor_elem_type(t);
  p->data = cpu_host->tensor_data(t);
  const size_t n = cpu_host->tensor_elem_count(t), r = cpu_host->tensor_rank(t);
  const int64_t* d = cpu_host->tensor_dims(t);
  if (n == 1) {
    p->mode = QP_SCALAR;
    return NULL;
  }
  const size_t len = xr >= 2 ? (size_t)xd[row ? xr - 2 : xr - 1] : xr == 1 ? (size_t)xd[0] : 1;
  if (r == 1 && (size_t)d[0] == len && xr >= 2) {
    p->mode = QP_VEC;
    return NULL;
  }
  if (r == xr && xr >= 2) {
    bool ok = true;
    for (size_t i = 0; i < r; i++) {
      int64_t want = xd[i];
      if (row && i == r - 1) want = 1;
      if (!row && i == r - 2) want = 1;
      ok = ok && d[i] == want;
    }
    if (ok) {
      p->mode = QP_BATCH;
      return NULL;
    }
  }
  return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                       "%s has %zu elements; expected one, or one per %s of the matrix", what, n,
                       row ? "row" : "column");
}

/* --- matmul geometry ------------------------------------------------------------- */

typedef struct MmPlan {
  size_t m, k, n, batch;
  int64_t out[CPU_MAX_RANK];
  size_t out_rank;
  size_t* a_idx; /* per output batch: the batch matrix of A, of B */
  size_t* b_idx;
} MmPlan;

static OnyxStatus* mm_plan(OnyxKernelContext* ctx, const OnyxTensor* a, const OnyxTensor* b,
                           MmPlan* p) {
  size_t ra = cpu_host->tensor_rank(a), rb = cpu_host->tensor_rank(b);
  const int64_t* da = cpu_host->tensor_dims(a);
  const int64_t* db = cpu_host->tensor_dims(b);
  if (ra == 0 || rb == 0 || ra > CPU_MAX_RANK || rb > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "matmul operands must have rank 1..%d (got %zu and %zu)", CPU_MAX_RANK, ra,
                         rb);
  p->m = ra == 1 ? 1 : (size_t)da[ra - 2];
  p->k = (size_t)da[ra - 1];
  const size_t kb = rb == 1 ? (size_t)db[0] : (size_t)db[rb - 2];
  p->n = rb == 1 ? 1 : (size_t)db[rb - 1];
  if (kb != p->k)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "matmul inner dims differ: A has K = %zu, B has K = %zu", p->k, kb);
  const size_t ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
  const size_t br = ba > bb ? ba : bb;
  int64_t bd[CPU_MAX_RANK];
  for (size_t i = 0; i < br; i++) {
    const int64_t x = i + ba >= br ? da[i + ba - br] : 1;
    const int64_t y = i + bb >= br ? db[i + bb - br] : 1;
    if (x != y && x != 1 && y != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "matmul batch dims do not broadcast: %lld vs %lld", (long long)x,
                           (long long)y);
    bd[i] = x == 1 ? y : x;
  }
  p->batch = cpu_dims_product(bd, 0, br);
  p->out_rank = 0;
  for (size_t i = 0; i < br; i++)
    p->out[p->out_rank++] = bd[i];
  if (ra > 1) p->out[p->out_rank++] = (int64_t)p->m;
  if (rb > 1) p->out[p->out_rank++] = (int64_t)p->n;
  OnyxStatus* st = scratch(ctx, 2 * (p->batch ? p->batch : 1) * sizeof(size_t), (void**)&p->a_idx);
  if (st) return st;
  p->b_idx = p->a_idx + (p->batch ? p->batch : 1);
  for (size_t q = 0; q < p->batch; q++) {
    size_t rem = q, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t i = br; i-- > 0;) {
      const size_t c = rem % (size_t)bd[i];
      rem /= (size_t)bd[i];
      if (i + ba >= br) {
        const size_t dim = (size_t)da[i + ba - br];
        ia += (dim == 1 ? 0 : c) * sa;
        sa *= dim;
      }
      if (i + bb >= br) {
        const size_t dim = (size_t)db[i + bb - br];
        ib += (dim == 1 ? 0 : c) * sb;
        sb *= dim;
      }
    }
    p->a_idx[q] = ia;
    p->b_idx[q] = ib;
  }
  return NULL;
}

/* --- the shared product ---------------------------------------------------------- */

/* What turns an accumulated row into output values. */
typedef struct MmOut {
  int quantized; /* 0: int32 output (MatMulInteger / ConvInteger) */
  QParam a_scale, b_scale, y_scale, y_zp;
  int32_t scale_type, y_type;
  int64_t lo, hi;
  const int32_t* bias; /* QLinearConv: per output channel */
} MmOut;

/* Stores acc (value of row `row`, column `col`) as output element `i`. */
static void mm_store(const MmOut* o, void* y, size_t i, double acc, size_t ba, size_t row,
                     size_t bb, size_t col, size_t m, size_t n) {
  if (!o->quantized) {
    ((int32_t*)y)[i] = (int32_t)(uint32_t)(int64_t)acc;
    return;
  }
  const int32_t t = o->scale_type;
  const double as = qp_get(&o->a_scale, ba, row, m), bs = qp_get(&o->b_scale, bb, col, n);
  const double mult = cpu_q_round_to(t, cpu_q_round_to(t, as * bs) /
                                            cpu_q_round_to(t, qp_get(&o->y_scale, 0, 0, 1)));
  const double v = acc * mult + qp_get(&o->y_zp, 0, 0, 1);
  if (cpu_q_is_small_float(o->y_type)) {
    ((uint8_t*)y)[i] = cpu_q_small_float_encode(o->y_type, v, true);
    return;
  }
  const double r = isnan(v) ? qp_get(&o->y_zp, 0, 0, 1) : rint(v);
  cpu_q_store_int(o->y_type, y, i,
                  r <= (double)o->lo   ? o->lo
                  : r >= (double)o->hi ? o->hi
                                       : (int64_t)r);
}

typedef struct MmJob {
  const MmPlan* p;
  const MmOut* o;
  const double* a; /* A - zp, m x k, this batch */
  const double* b; /* B - zp, k x n */
  void* y;
  size_t y_off; /* element offset of this batch's output */
  size_t ba, bb;
  double* acc; /* n per row, per thread chunk: allocated per call */
  int failed;
  CpuStop* stop; /* the run's cancellation, polled per row */
} MmJob;

static void mm_rows(void* user, size_t begin, size_t end) {
  MmJob* j = user;
  const size_t k = j->p->k, n = j->p->n;
  double* acc = malloc((n ? n : 1) * sizeof *acc);
  if (!acc) {
    j->failed = 1;
    return;
  }
  size_t polled = 0;
  for (size_t r = begin; r < end; r++) {
    if (cpu_stop_poll(j->stop, &polled, k * n + 1)) break;
    for (size_t c = 0; c < n; c++)
      acc[c] = 0.0;
    for (size_t q = 0; q < k; q++) {
      const double av = j->a[r * k + q];
      if (av == 0.0) continue;
      const double* brow = j->b + q * n;
      for (size_t c = 0; c < n; c++)
        acc[c] += av * brow[c];
    }
    for (size_t c = 0; c < n; c++)
      mm_store(j->o, j->y, j->y_off + r * n + c, acc[c], j->ba, r, j->bb, c, j->p->m, n);
  }
  free(acc);
}

/* Loads batch matrix `idx` of x (rows x cols) minus its zero point. */
static void load_minus_zp(double* dst, const OnyxTensor* x, size_t idx, size_t rows, size_t cols,
                          const QParam* zp, bool per_row) {
  const int32_t t = cpu_host->tensor_elem_type(x);
  const void* d = cpu_host->tensor_data(x);
  const size_t base = idx * rows * cols;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      const double z = per_row ? qp_get(zp, idx, r, rows) : qp_get(zp, idx, c, cols);
      dst[r * cols + c] = cpu_q_load(t, d, base + r * cols + c) - z;
    }
}

static OnyxStatus* mm_run(OnyxKernelContext* ctx, const OnyxTensor* a, const OnyxTensor* b,
                          const QParam* azp, const QParam* bzp, const MmOut* o) {
  MmPlan p;
  OnyxStatus* st = mm_plan(ctx, a, b, &p);
  if (st) return st;
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, p.out, p.out_rank, &y);
  if (st) return st;
  if (p.batch == 0 || p.m == 0 || p.n == 0) return NULL;
  double *am, *bm;
  if ((st = scratch(ctx, p.m * p.k * sizeof(double), (void**)&am)) ||
      (st = scratch(ctx, p.k * p.n * sizeof(double), (void**)&bm)))
    return st;
  CpuStop stop = {.ctx = ctx};
  MmJob j = {
      .p = &p, .o = o, .a = am, .b = bm, .y = cpu_host->tensor_mutable_data(y), .stop = &stop};
  for (size_t q = 0; q < p.batch; q++) {
    load_minus_zp(am, a, p.a_idx[q], p.m, p.k, azp, true);
    load_minus_zp(bm, b, p.b_idx[q], p.k, p.n, bzp, false);
    j.y_off = q * p.m * p.n;
    j.ba = p.a_idx[q];
    j.bb = p.b_idx[q];
    if (cpu_q_packed_bits(o->y_type))
      mm_rows(&j, 0, p.m);
    else
      cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), p.m, mm_rows, &j);
    if (j.failed) return cpu_oom(ctx);
    if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
  }
  return NULL;
}

/* --- the int8 GEMM path (cpu_qgemm.c) ---------------------------------------------- */

/* QLinear* sums exact in int32 for every 8-bit operand and zero point:
 * k * 255 * 255 < 2^31. Longer sums take the double path. */
#define FAST_MAX_K 32768

static bool is_8bit(int32_t t) {
  return t == ONYX_ELEM_UINT8 || t == ONYX_ELEM_INT8;
}

/* Turns the GEMM's raw sums into outputs: the zero-point corrections (see
 * cpu_qgemm.h), the optional bias, and for QLinear* the requantization in
 * float32 (sum * (a_scale * b_scale / y_scale), rounded half to even, plus
 * the output zero point, saturated). Output element of GEMM row r, column
 * c: y_off + r * rstride + c * cstride. */
typedef struct QEpi {
  bool quantized, y_signed;
  bool nonfinite;  /* some multiplier is NaN or infinite */
  bool za_uniform; /* every row has the same za (za[row0] stands for all) */
  uint32_t k;
  const int32_t* za;   /* per GEMM row, shifted (za') */
  const int32_t* zb;   /* per GEMM column, shifted (zb') */
  const int32_t* bias; /* per GEMM column, or NULL */
  const float* mult;   /* per GEMM column */
  float lo, hi;        /* the output range minus its zero point */
  int32_t yzp;
  void* y;
  size_t y_off, rstride, cstride;
} QEpi;

#if defined(__x86_64__) && defined(__GNUC__)
#define QMM_TR16 1
/* dst[j * ds + i] = src[i * ss + j] for a 16 x 16 byte tile, in SSE2
 * registers: four rounds of byte interleaves pairing rows i and i + 8
 * transpose the tile. */
static inline void tr16x16(const uint8_t* src, size_t ss, uint8_t* dst, size_t ds) {
  __m128i a[16], b[16];
  for (int i = 0; i < 16; i++)
    a[i] = _mm_loadu_si128((const __m128i*)(src + (size_t)i * ss));
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < 8; i++) {
      b[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
      b[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
    }
    memcpy(a, b, sizeof a);
  }
  for (int i = 0; i < 16; i++)
    _mm_storeu_si128((__m128i*)(dst + (size_t)i * ds), a[i]);
}
#else
#define QMM_TR16 0
#endif

/* The epilogue's loops (and the depthwise loop) compiled for AVX2 too,
 * picked at load (ifunc): the baseline SSE2 has no 32-bit vector multiply.
 * Same results either way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QEPI_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QEPI_CLONES
#endif

/* Requantizes the corrected sums v[0..cnt) into dst[0..cnt) (the byte of
 * the int8 or uint8 result); per-column multiplier and bias from
 * mult[i * mstep], bias[i * mstep] (mstep 0: one column). v is modified. */
QEPI_CLONES static void q_requant(const QEpi* e, int32_t* v, size_t cnt, uint8_t* dst,
                                  const float* mult, const int32_t* bias, size_t mstep) {
  if (bias)
    for (size_t i = 0; i < cnt; i++)
      v[i] = (int32_t)((uint32_t)v[i] + (uint32_t)bias[i * mstep]);
  const float lo = e->lo, hi = e->hi;
  const int32_t zp = e->yzp;
  if (e->nonfinite) { /* a NaN or infinite multiplier: NaN gives the zero point */
    for (size_t i = 0; i < cnt; i++) {
      float t = (float)v[i] * mult[i * mstep];
      t = isnan(t) ? 0.0f : t < lo ? lo : t > hi ? hi : rintf(t);
      dst[i] = (uint8_t)((int32_t)t + zp);
    }
    return;
  }
  for (size_t i = 0; i < cnt; i++) {
    float t = (float)v[i] * mult[i * mstep];
    t = t < lo ? lo : t;
    t = t > hi ? hi : t;
    /* round half to even: |t| < 2^22, so adding 1.5 * 2^23 leaves no
     * fraction bits */
    t = (t + 12582912.0f) - 12582912.0f;
    dst[i] = (uint8_t)((int32_t)t + zp);
  }
}

/* Stores the corrected sums v[0..cnt) at y[at + i]: int32, or requantized. */
static void q_store(const QEpi* e, int32_t* v, size_t cnt, size_t at, const float* mult,
                    const int32_t* bias, size_t mstep) {
  if (!e->quantized)
    memcpy((int32_t*)e->y + at, v, cnt * sizeof *v);
  else
    q_requant(e, v, cnt, (uint8_t*)e->y + at, mult, bias, mstep);
}

#if QMM_TR16
/* One row of a block corrected and requantized in one pass, as q_epi's
 * correction and q_requant compute it: v[j] = c[j] - zb[j] * rs + ctb[j]
 * (wrapping; ctb = the per-column correction plus the bias), then
 * (float)v * mult[j] clamped to [lo, hi], rounded half to even (vcvtps2dq
 * under the default MXCSR rounding, the same value as q_requant's
 * 1.5 * 2^23 trick for |t| < 2^22), plus the zero point; dst[j] gets the
 * low byte. 16 columns a step, the tail masked. */
__attribute__((target("avx512f"))) static void q_row_avx512(const int32_t* c, size_t cols,
                                                            const uint32_t* ctb, const int32_t* zb,
                                                            uint32_t rs, const float* mult,
                                                            const QEpi* e, uint8_t* dst) {
  const __m512i vrs = _mm512_set1_epi32((int32_t)rs), vzp = _mm512_set1_epi32(e->yzp);
  const __m512 vlo = _mm512_set1_ps(e->lo), vhi = _mm512_set1_ps(e->hi);
  for (size_t j = 0; j < cols; j += 16) {
    const __mmask16 mk = cols - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - j)) - 1);
    __m512i v = _mm512_add_epi32(_mm512_maskz_loadu_epi32(mk, c + j),
                                 _mm512_maskz_loadu_epi32(mk, ctb + j));
    if (zb) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(mk, zb + j), vrs));
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_maskz_loadu_ps(mk, mult + j));
    t = _mm512_min_ps(_mm512_max_ps(t, vlo), vhi);
    _mm512_mask_cvtepi32_storeu_epi8(dst + j, mk, _mm512_add_epi32(_mm512_cvtps_epi32(t), vzp));
  }
}

/* q_epi for a requantized output with one za and finite multipliers on the
 * AVX-512 paths: each row corrected and requantized in one pass
 * (q_row_avx512) straight into y (MatMul) or into 16-row strips that
 * tr16x16 turns into channel runs (Conv). False when it does not apply. */
static bool q_epi_avx512(const QEpi* e, int32_t* c, size_t ldc, size_t row0, size_t rows,
                         size_t col0, size_t cols, const int32_t* rowsum, const int32_t* colsum) {
  if (!e->quantized || e->nonfinite || !e->za_uniform || cpu_qgemm_isa() < CPU_QGEMM_AVX512BW)
    return false;
  const uint32_t k = e->k, za = (uint32_t)e->za[row0];
  const int32_t* zb = e->zb + col0;
  uint32_t ctb[CPU_QGEMM_MAX_BLOCK];
  bool zb_zero = true;
  for (size_t j = 0; j < cols; j++) {
    ctb[j] = k * za * (uint32_t)zb[j] - za * (uint32_t)colsum[j] +
             (e->bias ? (uint32_t)e->bias[col0 + j] : 0u);
    zb_zero = zb_zero && zb[j] == 0;
  }
  const int32_t* zbr = zb_zero ? NULL : zb; /* int8 weights with zero point 0: no product */
  const float* mult = e->mult + col0;
  if (e->cstride == 1) {
    for (size_t i = 0; i < rows; i++)
      q_row_avx512(c + i * ldc, cols, ctb, zbr, (uint32_t)rowsum[i], mult, e,
                   (uint8_t*)e->y + e->y_off + (row0 + i) * e->rstride + col0);
    return true;
  }
  uint8_t t8[16 * CPU_QGEMM_MAX_BLOCK];
  for (size_t i0 = 0; i0 < rows; i0 += 16) {
    const size_t ni = rows - i0 < 16 ? rows - i0 : 16;
    for (size_t i = 0; i < ni; i++)
      q_row_avx512(c + (i0 + i) * ldc, cols, ctb, zbr, (uint32_t)rowsum[i0 + i], mult, e,
                   t8 + i * cols);
    uint8_t* y0 = (uint8_t*)e->y + e->y_off + col0 * e->cstride + row0 + i0;
    size_t j = 0;
    if (ni == 16)
      for (; j + 16 <= cols; j += 16)
        tr16x16(t8 + j, cols, y0 + j * e->cstride, e->cstride);
    for (; j < cols; j++) {
      uint8_t* y = y0 + j * e->cstride;
      for (size_t i = 0; i < ni; i++)
        y[i] = t8[i * cols + j];
    }
  }
  return true;
}
#endif

QEPI_CLONES static void q_epi(void* user, int32_t* c, size_t ldc, size_t row0, size_t rows,
                              size_t col0, size_t cols, const int32_t* rowsum,
                              const int32_t* colsum) {
  const QEpi* e = user;
#if QMM_TR16
  if (q_epi_avx512(e, c, ldc, row0, rows, col0, cols, rowsum, colsum)) return;
#endif
  const uint32_t k = e->k;
  /* the zero-point corrections in place, row by row (vectorizable) */
  const int32_t* zb = e->zb + col0;
  if (e->za_uniform) { /* one za: its terms are per column */
    const uint32_t za = (uint32_t)e->za[row0];
    uint32_t ct[CPU_QGEMM_MAX_BLOCK];
    bool zb_zero = true;
    for (size_t j = 0; j < cols; j++) {
      ct[j] = k * za * (uint32_t)zb[j] - za * (uint32_t)colsum[j];
      zb_zero = zb_zero && zb[j] == 0;
    }
    for (size_t i = 0; i < rows; i++) {
      const uint32_t rs = (uint32_t)rowsum[i];
      int32_t* ci = c + i * ldc;
      if (zb_zero) /* int8 weights with zero point 0: no product at all */
        for (size_t j = 0; j < cols; j++)
          ci[j] = (int32_t)((uint32_t)ci[j] + ct[j]);
      else
        for (size_t j = 0; j < cols; j++)
          ci[j] = (int32_t)((uint32_t)ci[j] - (uint32_t)zb[j] * rs + ct[j]);
    }
  } else {
    for (size_t i = 0; i < rows; i++) {
      const uint32_t za = (uint32_t)e->za[row0 + i], rs = (uint32_t)rowsum[i];
      int32_t* ci = c + i * ldc;
      for (size_t j = 0; j < cols; j++)
        ci[j] = (int32_t)((uint32_t)ci[j] - (uint32_t)zb[j] * rs - za * (uint32_t)colsum[j] +
                          k * za * (uint32_t)zb[j]);
    }
  }
  if (e->cstride == 1) { /* MatMul: a row of the block is a run of y */
    for (size_t i = 0; i < rows; i++)
      q_store(e, c + i * ldc, cols, e->y_off + (row0 + i) * e->rstride + col0, e->mult + col0,
              e->bias ? e->bias + col0 : NULL, 1);
    return;
  }
  /* Conv: a column of the block (one channel) is a run of y. Quantized:
   * strips of 16 rows requantized row by row into bytes, then written out
   * a channel at a time. */
  if (e->quantized) {
    uint8_t t8[16 * CPU_QGEMM_MAX_BLOCK];
    for (size_t i0 = 0; i0 < rows; i0 += 16) {
      const size_t ni = rows - i0 < 16 ? rows - i0 : 16;
      for (size_t i = 0; i < ni; i++)
        q_requant(e, c + (i0 + i) * ldc, cols, t8 + i * cols, e->mult + col0,
                  e->bias ? e->bias + col0 : NULL, 1);
      uint8_t* y0 = (uint8_t*)e->y + e->y_off + col0 * e->cstride + row0 + i0;
      size_t j = 0;
#if QMM_TR16
      if (ni == 16) /* 16 channels' runs of 16 outputs at a time */
        for (; j + 16 <= cols; j += 16)
          tr16x16(t8 + j, cols, y0 + j * e->cstride, e->cstride);
#endif
      for (; j < cols; j++) {
        uint8_t* y = y0 + j * e->cstride;
        for (size_t i = 0; i < ni; i++)
          y[i] = t8[i * cols + j];
      }
    }
    return;
  }
  int32_t v[CPU_QGEMM_MAX_BLOCK];
  for (size_t j = 0; j < cols; j++) {
    for (size_t i = 0; i < rows; i++)
      v[i] = c[i * ldc + j];
    q_store(e, v, rows, e->y_off + (col0 + j) * e->cstride + row0, e->mult + col0 + j,
            e->bias ? e->bias + col0 + j : NULL, 0);
  }
}

/* The output side of QEpi from MmOut: range and zero point. */
static void q_epi_out(QEpi* e, const MmOut* o) {
  e->quantized = o->quantized != 0;
  if (!e->quantized) return;
  e->y_signed = o->y_type == ONYX_ELEM_INT8;
  e->yzp = (int32_t)qp_get(&o->y_zp, 0, 0, 1);
  e->lo = (float)(o->lo - e->yzp);
  e->hi = (float)(o->hi - e->yzp);
}

/* a_scale * b_scale / y_scale rounded to float32 at each step, as the
 * double path computes it. */
static float q_mult(double as, double bs, double ys) {
  return (float)((float)(as * bs) / (float)ys);
}

static OnyxStatus* qgemm_status(OnyxKernelContext* ctx, CpuQgemmResult r) {
  if (r == CPU_QGEMM_OOM) return cpu_oom(ctx);
  if (r == CPU_QGEMM_STOPPED) return cpu_cancelled(ctx, NULL);
  return NULL;
}

/* A constant 2-D B of MatMulInteger / QLinearMatMul, packed at creation. */
typedef struct MmState {
  bool packed;
  CpuQgemmB b;
} MmState;

static OnyxStatus* mm_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  MmState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  const size_t bi = user_data ? 3 : 1; /* QLinearMatMul's B is input 3 */
  const OnyxValueInfo* bv =
      cpu_host->node_input_count(node) > bi ? cpu_host->node_input(node, bi) : NULL;
  const OnyxTensor* b = bv ? cpu_host->value_constant(bv) : NULL;
  if (b && cpu_host->tensor_rank(b) == 2 && is_8bit(cpu_host->tensor_elem_type(b))) {
    const int64_t* d = cpu_host->tensor_dims(b);
    /* left unpacked when memory is short: the run packs it */
    s->packed = cpu_qgemm_pack_b(&s->b, cpu_host->tensor_data(b),
                                 cpu_host->tensor_elem_type(b) == ONYX_ELEM_INT8, (size_t)d[0],
                                 (size_t)d[1], (size_t)d[1], 1);
  }
  *state = s;
  return NULL;
}

static void mm_release(void* state) {
  MmState* s = state;
  if (!s) return;
  cpu_qgemm_free_b(&s->b);
  free(s);
}

/* The product on the int8 GEMM; *taken false (and nothing done) when the
 * operands need the double path: other types, a per-row a_scale, scales
 * not float32, or a QLinear sum longer than FAST_MAX_K. */
static OnyxStatus* mm_fast(OnyxKernelContext* ctx, const MmState* s, const OnyxTensor* a,
                           const OnyxTensor* b, const QParam* azp, const QParam* bzp,
                           const MmOut* o, bool* taken) {
  *taken = false;
  const int32_t at = cpu_host->tensor_elem_type(a), bt = cpu_host->tensor_elem_type(b);
  if (!is_8bit(at) || !is_8bit(bt)) return NULL;
  if (o->quantized &&
      (!is_8bit(o->y_type) || o->scale_type != ONYX_ELEM_FLOAT32 || o->a_scale.mode != QP_SCALAR ||
       o->b_scale.type != ONYX_ELEM_FLOAT32 || o->y_scale.type != ONYX_ELEM_FLOAT32))
    return NULL;
  MmPlan p;
  OnyxStatus* st = mm_plan(ctx, a, b, &p);
  if (st) return st;
  if (o->quantized && p.k > FAST_MAX_K) return NULL;
  *taken = true;
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, p.out, p.out_rank, &y);
  if (st) return st;
  if (p.batch == 0 || p.m == 0 || p.n == 0) return NULL;
  const bool a_signed = at == ONYX_ELEM_INT8, b_signed = bt == ONYX_ELEM_INT8;
  /* B of rank <= 2 is shared by every batch: one GEMM over batch * m rows */
  const bool flat = cpu_host->tensor_rank(b) <= 2;
  const size_t gemms = flat ? 1 : p.batch, rows = flat ? p.batch * p.m : p.m;
  int32_t *za, *zb;
  float* mult;
  if ((st = scratch(ctx, rows * sizeof *za, (void**)&za)) ||
      (st = scratch(ctx, p.n * sizeof *zb, (void**)&zb)) ||
      (st = scratch(ctx, p.n * sizeof *mult, (void**)&mult)))
    return st;
  const uint8_t* ad = cpu_host->tensor_data(a);
  const uint8_t* bd = cpu_host->tensor_data(b);
  QEpi e = {.k = (uint32_t)p.k,
            .za = za,
            .za_uniform = azp->mode == QP_NONE || azp->mode == QP_SCALAR,
            .zb = zb,
            .mult = mult,
            .y = cpu_host->tensor_mutable_data(y),
            .rstride = p.n,
            .cstride = 1};
  q_epi_out(&e, o);
  const double as = o->quantized ? qp_get(&o->a_scale, 0, 0, 1) : 0.0;
  const double ys = o->quantized ? qp_get(&o->y_scale, 0, 0, 1) : 1.0;
  CpuStop stop = {.ctx = ctx};
  for (size_t q = 0; q < gemms; q++) {
    const size_t ai = flat ? 0 : p.a_idx[q], bi = flat ? 0 : p.b_idx[q];
    for (size_t r = 0; r < rows; r++) /* flat: row r is row r % m of batch r / m */
      za[r] = (int32_t)qp_get(azp, flat ? r / p.m : ai, r % p.m, p.m) + (a_signed ? 128 : 0);
    bool rowsums = false; /* A's row sums only where some zb' is not 0 */
    for (size_t c = 0; c < p.n; c++) {
      zb[c] = (int32_t)qp_get(bzp, bi, c, p.n) - (b_signed ? 0 : 128);
      rowsums = rowsums || zb[c] != 0;
      if (o->quantized) mult[c] = q_mult(as, qp_get(&o->b_scale, bi, c, p.n), ys);
      if (o->quantized && !isfinite(mult[c])) e.nonfinite = true;
    }
    /* B packed at creation, or packed here for this product */
    CpuQgemmB local;
    const bool own = !(s && s->packed && s->b.k == p.k && s->b.n == p.n && flat);
    if (own && !cpu_qgemm_pack_b(&local, bd + bi * p.k * p.n, b_signed, p.k, p.n, p.n, 1))
      return cpu_oom(ctx);
    const CpuQgemmB* pb = own ? &local : &s->b;
    e.y_off = q * p.m * p.n;
    const CpuQgemmResult r = cpu_qgemm(cpu_host->ctx_thread_pool(ctx), &stop, ad + ai * p.m * p.k,
                                       a_signed, rows, p.k, 1, pb, rowsums, q_epi, &e);
    if (own) cpu_qgemm_free_b(&local);
    if ((st = qgemm_status(ctx, r))) return st;
  }
  return NULL;
}

static const OnyxTensor* opt_input(OnyxKernelContext* ctx, size_t i) {
  return i < cpu_host->ctx_input_count(ctx) ? cpu_host->ctx_input(ctx, i) : NULL;
}

static OnyxStatus* matmul_integer_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 1);
  QParam azp, bzp;
  OnyxStatus* st = qp_init(ctx, "a_zero_point", opt_input(ctx, 2), cpu_host->tensor_dims(a),
                           cpu_host->tensor_rank(a), true, &azp);
  if (!st)
    st = qp_init(ctx, "b_zero_point", opt_input(ctx, 3), cpu_host->tensor_dims(b),
                 cpu_host->tensor_rank(b), false, &bzp);
  if (st) return st;
  MmOut o = {.quantized = 0, .y_type = ONYX_ELEM_INT32};
  bool taken;
  st = mm_fast(ctx, state, a, b, &azp, &bzp, &o, &taken);
  if (st || taken) return st;
  return mm_run(ctx, a, b, &azp, &bzp, &o);
}

/* y_scale / y_zero_point of QLinear*: one value each. */
static OnyxStatus* scalar_param(OnyxKernelContext* ctx, const char* what, const OnyxTensor* t,
                                QParam* p) {
  memset(p, 0, sizeof *p);
  if (!t) return NULL;
  if (cpu_host->tensor_elem_count(t) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must have one element, it has %zu", what,
                         cpu_host->tensor_elem_count(t));
  p->mode = QP_SCALAR;
  p->type = cpu_host->tensor_elem_type(t);
  p->data = cpu_host->tensor_data(t);
  return NULL;
}

static void out_params(MmOut* o, int32_t y_type, int32_t scale_type) {
  o->quantized = 1;
  o->y_type = y_type;
  o->scale_type = scale_type;
  cpu_q_int_range(y_type, &o->lo, &o->hi);
}

static OnyxStatus* qlinear_matmul_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 3);
  const int64_t* da = cpu_host->tensor_dims(a);
  const int64_t* db = cpu_host->tensor_dims(b);
  const size_t ra = cpu_host->tensor_rank(a), rb = cpu_host->tensor_rank(b);
  QParam azp, bzp;
  MmOut o;
  memset(&o, 0, sizeof o);
  OnyxStatus* st = qp_init(ctx, "a_scale", cpu_host->ctx_input(ctx, 1), da, ra, true, &o.a_scale);
  if (!st) st = qp_init(ctx, "a_zero_point", cpu_host->ctx_input(ctx, 2), da, ra, true, &azp);
  if (!st) st = qp_init(ctx, "b_scale", cpu_host->ctx_input(ctx, 4), db, rb, false, &o.b_scale);
  if (!st) st = qp_init(ctx, "b_zero_point", cpu_host->ctx_input(ctx, 5), db, rb, false, &bzp);
  if (!st) st = scalar_param(ctx, "y_scale", cpu_host->ctx_input(ctx, 6), &o.y_scale);
  if (!st) st = scalar_param(ctx, "y_zero_point", cpu_host->ctx_input(ctx, 7), &o.y_zp);
  if (st) return st;
  const int32_t yt = cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 7));
  out_params(&o, yt, cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 1)));
  bool taken;
  st = mm_fast(ctx, state, a, b, &azp, &bzp, &o, &taken);
  if (st || taken) return st;
  return mm_run(ctx, a, b, &azp, &bzp, &o);
}

/* --- convolution ------------------------------------------------------------------ */

#define MAXS 8

typedef struct ConvAttrs {
  int64_t kernel[MAXS], strides[MAXS], dilations[MAXS], pads[2 * MAXS];
  size_t n_kernel, n_strides, n_dilations, n_pads;
  int auto_pad; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
  int64_t group;
  int quantized;
  bool nhwc; /* com.onyx QLinearConv: x and y channels-last, group 1 */
} ConvAttrs;

/* The attributes, and w packed per group for the int8 GEMM at creation
 * when it is a constant (packed NULL: packed per run). */
typedef struct ConvState {
  ConvAttrs a;
  size_t groups;
  CpuQgemmB* packed;
} ConvState;

static void conv_release(void* state) {
  ConvState* s = state;
  if (!s) return;
  for (size_t i = 0; s->packed && i < s->groups; i++)
    cpu_qgemm_free_b(&s->packed[i]);
  free(s->packed);
  free(s);
}

/* Group gi of w (m x cg x k_size) as the GEMM's B: row r = kk * cg + c
 * (kernel offset kk, input channel c: the im2col order, in which one
 * kernel offset of every channel is one run of x's channels-last copy),
 * column j = output channel gi * mg + j. */
/* The GEMM's k for a group of cg channels and ks kernel offsets: cg * ks,
 * rounded up to a multiple of 4 when ks > 1 (never the pointwise case, whose
 * A is x's channels-last copy itself). The extra k entries are x's zero
 * point in A (im2col pads each row with it), so (a - za)(b - zb) adds 0
 * whatever B holds there, and on the VNNI path the GEMM reads A in place
 * (k a multiple of 4) instead of packing it: ResNet's 7x7 stem over 3
 * channels has k = 147. */
static size_t conv_k_padded(size_t cg, size_t ks) {
  const size_t rows = cg * ks;
  return ks > 1 && rows <= SIZE_MAX - 3 ? (rows + 3) / 4 * 4 : rows;
}

static bool conv_pack_group(CpuQgemmB* dst, const uint8_t* w, bool sgn, size_t gi, size_t mg,
                            size_t cg, size_t ks) {
  const size_t rows = cg * ks, kp = conv_k_padded(cg, ks);
  const uint8_t* src = w + gi * mg * rows;
  if ((cg == 1 || ks == 1) && kp == rows) /* the orders agree */
    return cpu_qgemm_pack_b(dst, src, sgn, rows, mg, 1, rows);
  size_t bytes;
  if (!cpu_mul_size(kp, mg, &bytes)) return false;
  uint8_t* t = calloc(bytes ? bytes : 1, 1); /* the padding k entries 0 */
  if (!t) return false;
  for (size_t j = 0; j < mg; j++)
    for (size_t c = 0; c < cg; c++)
      for (size_t kk = 0; kk < ks; kk++)
        t[j * kp + kk * cg + c] = src[j * rows + c * ks + kk];
  const bool ok = cpu_qgemm_pack_b(dst, t, sgn, kp, mg, 1, kp);
  free(t);
  return ok;
}

/* Packs a constant 8-bit w per group; leaves s->packed NULL when w is not
 * one, its shape does not fit the groups, or memory is short. */
static void conv_prepack(const OnyxNode* node, ConvState* s) {
  const size_t wi = s->a.quantized ? 3 : 1;
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > wi ? cpu_host->node_input(node, wi) : NULL;
  const OnyxTensor* w = wv ? cpu_host->value_constant(wv) : NULL;
  if (!w || cpu_host->tensor_rank(w) < 3 || !is_8bit(cpu_host->tensor_elem_type(w))) return;
  const int64_t* d = cpu_host->tensor_dims(w);
  const size_t m = (size_t)d[0], cg = (size_t)d[1], groups = (size_t)s->a.group;
  size_t ks = 1;
  for (size_t i = 2; i < cpu_host->tensor_rank(w); i++)
    if (!cpu_mul_size(ks, (size_t)d[i], &ks)) return;
  if (m == 0 || cg == 0 || ks == 0 || m % groups != 0 || cg > SIZE_MAX / ks) return;
  const size_t mg = m / groups;
  if (cg == 1 && mg == 1) return; /* depthwise: the direct loop, no GEMM */
  CpuQgemmB* p = calloc(groups, sizeof *p);
  if (!p) return;
  const uint8_t* wd = cpu_host->tensor_data(w);
  const bool sgn = cpu_host->tensor_elem_type(w) == ONYX_ELEM_INT8;
  for (size_t gi = 0; gi < groups; gi++)
    if (!conv_pack_group(&p[gi], wd, sgn, gi, mg, cg, ks)) {
      for (size_t i = 0; i < gi; i++)
        cpu_qgemm_free_b(&p[i]);
      free(p);
      return;
    }
  s->packed = p;
  s->groups = groups;
}

static OnyxStatus* conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state);

/* com.onyx QLinearConv: channels_last 1 and group 1 (the qdq fusion's
 * channels-last chains). */
static OnyxStatus* conv_nhwc_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                    void** state) {
  if (cpu_host->node_attr_int(node, "channels_last", 0) != 1 ||
      cpu_host->node_attr_int(node, "group", 1) != 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "com.onyx QLinearConv needs channels_last 1 and group 1");
  OnyxStatus* st = conv_create(ep, node, user_data, state);
  if (!st) ((ConvState*)*state)->a.nhwc = true;
  return st;
}

static OnyxStatus* read_list(const OnyxNode* node, const char* name, int64_t* out, size_t cap,
                             size_t* n, int64_t min) {
  size_t count = 0;
  const int64_t* v = cpu_host->node_attr_ints(node, name, &count);
  if (count > cap)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "attribute %s has %zu values; at most %zu", name,
                     count, cap);
  for (size_t i = 0; i < count; i++) {
    if (v[i] < min)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld < %lld", name, i,
                       (long long)v[i], (long long)min);
    out[i] = v[i];
  }
  *n = count;
  return NULL;
}

static OnyxStatus* conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  ConvState* cs = calloc(1, sizeof *cs);
  if (!cs) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  ConvAttrs* a = &cs->a;
  a->quantized = user_data != NULL;
  OnyxStatus* st = read_list(node, "kernel_shape", a->kernel, MAXS, &a->n_kernel, 1);
  if (!st) st = read_list(node, "strides", a->strides, MAXS, &a->n_strides, 1);
  if (!st) st = read_list(node, "dilations", a->dilations, MAXS, &a->n_dilations, 1);
  if (!st) st = read_list(node, "pads", a->pads, 2 * MAXS, &a->n_pads, 0);
  a->group = cpu_host->node_attr_int(node, "group", 1);
  if (!st && a->group < 1)
    st =
        cpu_error(node, ONYX_INVALID_ARGUMENT, "group must be >= 1, got %lld", (long long)a->group);
  size_t len = 0;
  const char* ap = cpu_host->node_attr_string(node, "auto_pad", &len);
  if (!st && ap && len) {
    static const char* const names[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
    a->auto_pad = -1;
    for (int i = 0; i < 4; i++)
      if (strlen(names[i]) == len && !memcmp(names[i], ap, len)) a->auto_pad = i;
    if (a->auto_pad < 0)
      st = cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%.*s'", (int)len, ap);
  }
  if (st) {
    free(cs);
    return st;
  }
  conv_prepack(node, cs);
  *state = cs;
  return NULL;
}

typedef struct ConvGeo {
  size_t ns; /* spatial dims */
  int64_t in[MAXS], k[MAXS], s[MAXS], d[MAXS], pb[MAXS], out[MAXS];
  size_t in_size, out_size, k_size;
} ConvGeo;

static OnyxStatus* conv_geo(OnyxKernelContext* ctx, const ConvAttrs* a, const int64_t* xd,
                            const int64_t* wd, size_t ns, ConvGeo* g) {
  if (ns == 0 || ns > MAXS)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "%zu spatial dims; 1..%d are supported", ns,
                         MAXS);
  if ((a->n_kernel && a->n_kernel != ns) || (a->n_strides && a->n_strides != ns) ||
      (a->n_dilations && a->n_dilations != ns) ||
      (a->auto_pad == 0 && a->n_pads && a->n_pads != 2 * ns))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "kernel_shape/strides/dilations/pads do not match %zu spatial dims", ns);
  g->ns = ns;
  g->in_size = g->out_size = g->k_size = 1;
  for (size_t i = 0; i < ns; i++) {
    g->in[i] = xd[i];
    g->k[i] = wd[i];
    if (a->n_kernel && a->kernel[i] != wd[i])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "kernel_shape[%zu] = %lld does not match W's dim %lld", i,
                           (long long)a->kernel[i], (long long)wd[i]);
    g->s[i] = a->n_strides ? a->strides[i] : 1;
    g->d[i] = a->n_dilations ? a->dilations[i] : 1;
    int64_t pb = a->n_pads ? a->pads[i] : 0, pe = a->n_pads ? a->pads[i + ns] : 0;
    int64_t eff, t, lim;
    if (g->in[i] < 0 || g->s[i] < 1 || !cpu_dilated_extent(g->k[i], g->d[i], &eff))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: input %lld, kernel %lld, strides %lld, dilations "
                           "%lld: an invalid value or an integer overflow",
                           i, (long long)g->in[i], (long long)g->k[i], (long long)g->s[i],
                           (long long)g->d[i]);
    if (a->auto_pad == 1 || a->auto_pad == 2) {
      g->out[i] = g->in[i] / g->s[i] + (g->in[i] % g->s[i] != 0);
      int64_t total;
      if (!cpu_mul_i64(g->out[i] > 0 ? g->out[i] - 1 : 0, g->s[i], &t) ||
          !cpu_add_i64(t, eff, &t) || !cpu_sub_i64(t, g->in[i], &total))
        total = -1; /* reported below */
      if (total < 0) total = 0;
      pb = a->auto_pad == 1 ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (a->auto_pad == 3) {
      pb = pe = 0;
    }
    /* every index the kernel derives stays within in + pb + pe + eff */
    if (pb < 0 || pe < 0 || !cpu_add3_i64(g->in[i], pb, pe, &t) || !cpu_add_i64(t, eff, &lim))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "spatial dim %zu: integer overflow: input %lld + pads %lld + %lld + "
                           "dilated kernel extent %lld does not fit in int64",
                           i, (long long)g->in[i], (long long)pb, (long long)pe, (long long)eff);
    if (a->auto_pad != 1 && a->auto_pad != 2) {
      const int64_t span = t - eff;
      if (span < 0)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "spatial dim %zu: the window (%lld) is larger than the padded input "
                             "(%lld)",
                             i, (long long)eff, (long long)t);
      g->out[i] = span / g->s[i] + 1;
    }
    g->pb[i] = pb;
    if (!cpu_mul_size(g->in_size, (size_t)g->in[i], &g->in_size) ||
        !cpu_mul_size(g->out_size, (size_t)g->out[i], &g->out_size) ||
        !cpu_mul_size(g->k_size, (size_t)g->k[i], &g->k_size))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "integer overflow: the spatial sizes do not fit in size_t");
  }
  return NULL;
}

typedef struct ConvJob {
  const ConvGeo* g;
  const double* col; /* (cg * k_size) x out_size */
  const OnyxTensor* w;
  size_t m0, cg, batch_img;
  const QParam* wzp;
  const MmOut* o;
  void* y;
  size_t y_off; /* output element of (image, channel m0) */
  size_t m_total;
  int failed;
  CpuStop* stop; /* the run's cancellation, polled per output channel */
} ConvJob;

static void conv_channels(void* user, size_t begin, size_t end) {
  ConvJob* j = user;
  const ConvGeo* g = j->g;
  const size_t rows = j->cg * g->k_size, os = g->out_size;
  const int32_t wt = cpu_host->tensor_elem_type(j->w);
  const void* wd = cpu_host->tensor_data(j->w);
  double* acc = malloc((os ? os : 1) * sizeof *acc);
  if (!acc) {
    j->failed = 1;
    return;
  }
  size_t polled = 0;
  for (size_t mi = begin; mi < end; mi++) {
    if (cpu_stop_poll(j->stop, &polled, rows * os + 1)) break;
    const size_t m = j->m0 + mi;
    const double z = qp_get(j->wzp, 0, m, j->m_total);
    for (size_t p = 0; p < os; p++)
      acc[p] = j->o->bias ? (double)j->o->bias[m] : 0.0;
    for (size_t r = 0; r < rows; r++) {
      const double wv = cpu_q_load(wt, wd, m * rows + r) - z;
      if (wv == 0.0) continue;
      const double* c = j->col + r * os;
      for (size_t p = 0; p < os; p++)
        acc[p] += wv * c[p];
    }
    for (size_t p = 0; p < os; p++)
      mm_store(j->o, j->y, j->y_off + mi * os + p, acc[p], 0, 0, 0, m, 1, j->m_total);
  }
  free(acc);
}

/* col[r][p] for one image and channel group: x - x_zp, 0 in the padding. */
static void conv_im2col(double* col, const ConvGeo* g, const OnyxTensor* x, size_t x_off, size_t cg,
                        double xzp) {
  const int32_t t = cpu_host->tensor_elem_type(x);
  const void* xd = cpu_host->tensor_data(x);
  const size_t os = g->out_size;
  for (size_t r = 0; r < cg * g->k_size; r++) {
    const size_t c = r / g->k_size;
    int64_t kc[MAXS];
    size_t rem = r % g->k_size;
    for (size_t i = g->ns; i-- > 0;) {
      kc[i] = (int64_t)(rem % (size_t)g->k[i]);
      rem /= (size_t)g->k[i];
    }
    for (size_t p = 0; p < os; p++) {
      size_t prem = p, off = 0, mul = 1;
      bool ok = true;
      for (size_t i = g->ns; i-- > 0;) {
        const int64_t oc = (int64_t)(prem % (size_t)g->out[i]);
        prem /= (size_t)g->out[i];
        const int64_t xi = oc * g->s[i] - g->pb[i] + kc[i] * g->d[i];
        ok = ok && xi >= 0 && xi < g->in[i];
        off += (size_t)(ok ? xi : 0) * mul;
        mul *= (size_t)g->in[i];
      }
      col[r * os + p] = ok ? cpu_q_load(t, xd, x_off + c * g->in_size + off) - xzp : 0.0;
    }
  }
}

static OnyxStatus* conv_run(OnyxKernelContext* ctx, const ConvAttrs* a, const OnyxTensor* x,
                            const OnyxTensor* w, double xzp, const QParam* wzp, const MmOut* o) {
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* wd = cpu_host->tensor_dims(w);
  if (r < 3 || cpu_host->tensor_rank(w) != r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "x (rank %zu) and w (rank %zu) must have the same rank >= 3", r,
                         cpu_host->tensor_rank(w));
  const size_t n = (size_t)xd[0], c = (size_t)xd[1], m = (size_t)wd[0], cg = (size_t)wd[1];
  const size_t group = (size_t)a->group;
  if (c != cg * group || m % group != 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "group %zu does not fit x's %zu channels and w's shape %zu x %zu", group,
                         c, m, cg);
  ConvGeo g;
  OnyxStatus* st = conv_geo(ctx, a, xd + 2, wd + 2, r - 2, &g);
  if (st) return st;
  int64_t out[MAXS + 2] = {(int64_t)n, (int64_t)m};
  memcpy(out + 2, g.out, (r - 2) * sizeof(int64_t));
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, out, r, &y);
  if (st) return st;
  if (n == 0 || m == 0 || g.out_size == 0) return NULL;
  double* col;
  if ((st = scratch(ctx, cg * g.k_size * g.out_size * sizeof(double), (void**)&col))) return st;
  const size_t mg = m / group;
  CpuStop stop = {.ctx = ctx};
  ConvJob j = {.g = &g,
               .stop = &stop,
               .col = col,
               .w = w,
               .cg = cg,
               .wzp = wzp,
               .o = o,
               .y = cpu_host->tensor_mutable_data(y),
               .m_total = m};
  for (size_t img = 0; img < n; img++)
    for (size_t gi = 0; gi < group; gi++) {
      conv_im2col(col, &g, x, (img * c + gi * cg) * g.in_size, cg, xzp);
      j.m0 = gi * mg;
      j.y_off = (img * m + gi * mg) * g.out_size;
      cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), mg, conv_channels, &j);
      if (j.failed) return cpu_oom(ctx);
      if (cpu_stop_seen(&stop) || cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
    }
  return NULL;
}

/* --- convolution on the int8 GEMM ------------------------------------------------ */

/* One image and group as a GEMM: rows are the output positions, columns
 * the group's output channels, k runs over (kernel offset, input channel).
 * x's group is first copied channels-last (position-major, xt[p * cg + c]);
 * A is then xt itself for a 1x1 kernel with unit strides and no padding,
 * else its im2col (positions x k), where each kernel offset of a position
 * is one run of cg bytes of xt, or of x's zero point in the padding (which
 * then adds nothing). B is w's group in the same k order, packed once at
 * creation when w is a constant. Depthwise (one input and one output
 * channel per group) runs a direct loop instead. */

/* 1x1 kernel, unit strides and dilations, no padding. */
static bool conv_is_pointwise(const ConvGeo* g) {
  for (size_t i = 0; i < g->ns; i++)
    if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] != 0 || g->out[i] != g->in[i]) return false;
  return true;
}

/* xt[p * cg + c] = x[c * in_size + p]. On x86-64, tiles of 16 channels x
 * 16 positions go through tr16x16, the rest byte by byte: one scattered byte store per element cost
 * as much as a fifth of a 3x3 convolution's GEMM. */
static void conv_to_hwc(uint8_t* xt, const uint8_t* x, size_t cg, size_t in_size) {
  size_t c0 = 0, p_full = 0;
#if QMM_TR16
  p_full = in_size / 16 * 16;
  for (; c0 + 16 <= cg; c0 += 16)
    for (size_t p0 = 0; p0 < p_full; p0 += 16)
      tr16x16(x + c0 * in_size + p0, in_size, xt + p0 * cg + c0, cg);
      /* channels [0, c0) are done for positions [0, p_full) */
#endif
  for (size_t c = 0; c < cg; c++)
    for (size_t p = c < c0 ? p_full : 0; p < in_size; p++)
      xt[p * cg + c] = x[c * in_size + p];
}

/* im2col of the channels-last xt into col (out_size rows of k_size * cg
 * bytes, then `extra` more of the pad value, conv_k_padded). With
 * the last spatial dim's dilation 1, the kernel offsets along it read
 * neighbouring positions of xt, so each row of the kernel is one run of up
 * to k_last * cg bytes (a 7x7 kernel over 3 channels: 21 bytes, not seven
 * runs of 3), the part in the padding the zero point. */
static void conv_im2col_hwc(uint8_t* col, const ConvGeo* g, const uint8_t* xt, size_t cg,
                            size_t extra, uint8_t pad) {
  const size_t last = g->ns - 1;
  const int64_t kl = g->k[last], il = g->in[last], sl = g->s[last], dl = g->d[last];
  const size_t rows = g->k_size / (size_t)kl; /* kernel offsets of the other dims */
  int64_t oc[MAXS] = {0};
  uint8_t* dst = col;
  for (size_t p = 0; p < g->out_size; p++) {
    int64_t kc[MAXS] = {0};
    const int64_t x0 = oc[last] * sl - g->pb[last]; /* last dim's input at kernel offset 0 */
    for (size_t kr = 0; kr < rows; kr++) {
      size_t off = 0; /* the other dims' position in xt, in units of il */
      bool ok = true;
      for (size_t i = 0; i < last; i++) {
        const int64_t xi = oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];
        ok = ok && xi >= 0 && xi < g->in[i];
        off = off * (size_t)g->in[i] + (size_t)(ok ? xi : 0);
      }
      if (!ok) {
        memset(dst, pad, (size_t)kl * cg);
      } else if (dl == 1) {
        /* kernel offsets [a, b) fall inside the row */
        int64_t a = x0 < 0 ? -x0 : 0, b = il - x0 < kl ? il - x0 : kl;
        if (a > kl) a = kl;
        if (b < a) b = a;
        /* the interior (most positions): one copy and no calls for empty
         * padding runs */
        if (a) memset(dst, pad, (size_t)a * cg);
        if (b > a)
          memcpy(dst + (size_t)a * cg, xt + (off * (size_t)il + (size_t)(x0 + a)) * cg,
                 (size_t)(b - a) * cg);
        if (b < kl) memset(dst + (size_t)b * cg, pad, (size_t)(kl - b) * cg);
      } else {
        for (int64_t t = 0; t < kl; t++) {
          const int64_t xi = x0 + t * dl;
          if (xi >= 0 && xi < il)
            memcpy(dst + (size_t)t * cg, xt + (off * (size_t)il + (size_t)xi) * cg, cg);
          else
            memset(dst + (size_t)t * cg, pad, cg);
        }
      }
      dst += (size_t)kl * cg;
      for (size_t i = last; i-- > 0;) /* next kernel row, the last of the other dims fastest */
        if (++kc[i] < g->k[i])
          break;
        else
          kc[i] = 0;
    }
    if (extra) memset(dst, pad, extra);
    dst += extra;
    for (size_t i = g->ns; i-- > 0;) /* next output position */
      if (++oc[i] < g->out[i])
        break;
      else
        oc[i] = 0;
  }
}

typedef struct PadJob {
  uint8_t* xp;
  const ConvGeo* g;
  const uint8_t* xt;
  size_t cg, wp;
  uint8_t pad;
} PadJob;

/* Rows [begin, end) of conv_pad_hwc's xp. */
static void conv_pad_rows(void* user, size_t begin, size_t end) {
  const PadJob* j = user;
  const ConvGeo* g = j->g;
  const size_t cg = j->cg, wp = j->wp;
  const size_t H = (size_t)g->in[0], W = (size_t)g->in[1];
  const size_t p0 = (size_t)g->pb[0], p1 = (size_t)g->pb[1];
  const size_t n = p1 >= wp ? 0 : W < wp - p1 ? W : wp - p1; /* positions copied per row */
  for (size_t h = begin; h < end; h++) {
    uint8_t* row = j->xp + h * wp * cg;
    const bool in = h >= p0 && h - p0 < H && n;
    if (!in) {
      memset(row, j->pad, wp * cg);
      continue;
    }
    memset(row, j->pad, p1 * cg);
    memcpy(row + p1 * cg, j->xt + (h - p0) * W * cg, n * cg);
    memset(row + (p1 + n) * cg, j->pad, (wp - p1 - n) * cg);
  }
}

/* The 2-D channels-last xt (in[0] x in[1] positions of cg bytes) into
 * xp, hp x wp positions with the begin pads of zero point `pad` before
 * it, the rest of xp `pad` too; rows and columns past xp (never read by a
 * tap) are left out. The rows are split over the pool, so that the copy
 * does not leave the other threads idle between two GEMMs. */
static void conv_pad_hwc(OnyxThreadPool* pool, uint8_t* xp, const ConvGeo* g, const uint8_t* xt,
                         size_t cg, size_t hp, size_t wp, uint8_t pad) {
  PadJob j = {.xp = xp, .g = g, .xt = xt, .cg = cg, .wp = wp, .pad = pad};
  cpu_host->parallel_for(pool, hp, conv_pad_rows, &j);
}

/* Depthwise planes: plane q is channel q % c of image q / c. */
typedef struct DwJob {
  const ConvGeo* g;
  const uint8_t* x;
  const uint8_t* w;
  bool x_signed, w_signed;
  int32_t xz;
  const QParam* wzp;
  const QEpi* e;
  size_t c;
  size_t hp, wp; /* 2-D: the padded plane's size */
  CpuStop* stop;
  int failed;
} DwJob;

QEPI_CLONES static void dw_planes(void* user, size_t begin, size_t end) {
  DwJob* j = user;
  const ConvGeo* g = j->g;
  const size_t ks = g->k_size, os = g->out_size;
  int32_t* acc = malloc(os * sizeof *acc + ks * sizeof(int32_t) + j->hp * j->wp);
  if (!acc) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  int32_t* wv = acc + os;
  size_t polled = 0;
  for (size_t q = begin; q < end; q++) {
    if (cpu_stop_poll(j->stop, &polled, os * ks + 1)) break;
    const size_t ch = q % j->c;
    const int32_t wz = (int32_t)qp_get(j->wzp, 0, ch, j->c);
    for (size_t kk = 0; kk < ks; kk++) {
      const uint8_t raw = j->w[ch * ks + kk];
      wv[kk] = (j->w_signed ? (int32_t)(int8_t)raw : (int32_t)raw) - wz;
    }
    const uint8_t* x = j->x + q * g->in_size;
    memset(acc, 0, os * sizeof *acc);
    if (g->ns == 2) {
      /* The plane padded with x's zero point into hp x wp (every tap then
       * lands inside, the padding adding (zx - zx) * w = 0): rows of
       * outputs accumulate sum x * w along rows of the padded plane with no
       * edge cases, and zx * sum(w) comes off at the end. */
      uint8_t* pad = (uint8_t*)(wv + ks);
      const size_t hp = j->hp, wp = j->wp, W = (size_t)g->in[1];
      memset(pad, (uint8_t)j->xz, hp * wp);
      for (size_t ih = 0; ih < (size_t)g->in[0] && ih + (size_t)g->pb[0] < hp; ih++) {
        const size_t at = (size_t)g->pb[1];
        if (at < wp)
          memcpy(pad + (ih + (size_t)g->pb[0]) * wp + at, x + ih * W, W < wp - at ? W : wp - at);
      }
      uint32_t wsum = 0;
      for (size_t kk = 0; kk < ks; kk++)
        wsum += (uint32_t)wv[kk];
      const uint32_t zterm = (uint32_t)j->xz * wsum;
      const size_t OW = (size_t)g->out[1], sw = (size_t)g->s[1];
      for (size_t oh = 0; oh < (size_t)g->out[0]; oh++) {
        uint32_t* a = (uint32_t*)(acc + oh * OW);
        for (size_t ow = 0; ow < OW; ow++)
          a[ow] = 0u - zterm;
        for (size_t kh = 0; kh < (size_t)g->k[0]; kh++) {
          const uint8_t* row = pad + (oh * (size_t)g->s[0] + kh * (size_t)g->d[0]) * wp;
          for (size_t kw = 0; kw < (size_t)g->k[1]; kw++) {
            const uint8_t* r = row + kw * (size_t)g->d[1];
            const int32_t wk = wv[kh * (size_t)g->k[1] + kw];
            if (j->x_signed)
              for (size_t ow = 0; ow < OW; ow++)
                a[ow] += (uint32_t)((int32_t)(int8_t)r[ow * sw] * wk);
            else if (sw == 1)
              for (size_t ow = 0; ow < OW; ow++)
                a[ow] += (uint32_t)((int32_t)r[ow] * wk);
            else
              for (size_t ow = 0; ow < OW; ow++)
                a[ow] += (uint32_t)((int32_t)r[ow * sw] * wk);
          }
        }
      }
    } else {
      int64_t oc[MAXS] = {0};
      for (size_t p = 0; p < os; p++) {
        int64_t kc[MAXS] = {0};
        uint32_t sum = 0; /* wraps modulo 2^32, as the GEMM's sums do */
        for (size_t kk = 0; kk < ks; kk++) {
          size_t off = 0;
          bool ok = true;
          for (size_t i = 0; i < g->ns; i++) {
            const int64_t xi = oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];
            ok = ok && xi >= 0 && xi < g->in[i];
            off = off * (size_t)g->in[i] + (size_t)(ok ? xi : 0);
          }
          if (ok)
            sum += (uint32_t)(((j->x_signed ? (int32_t)(int8_t)x[off] : (int32_t)x[off]) - j->xz) *
                              wv[kk]);
          for (size_t i = g->ns; i-- > 0;)
            if (++kc[i] < g->k[i])
              break;
            else
              kc[i] = 0;
        }
        acc[p] = (int32_t)sum;
        for (size_t i = g->ns; i-- > 0;)
          if (++oc[i] < g->out[i])
            break;
          else
            oc[i] = 0;
      }
    }
    q_store(j->e, acc, os, q * os, j->e->mult + ch, j->e->bias ? j->e->bias + ch : NULL, 0);
  }
  free(acc);
}

static OnyxStatus* conv_fast(OnyxKernelContext* ctx, const ConvState* s, const OnyxTensor* x,
                             const OnyxTensor* w, const QParam* xzp, const QParam* wzp,
                             const MmOut* o, bool* taken) {
  *taken = false;
  const int32_t xt_type = cpu_host->tensor_elem_type(x), wt = cpu_host->tensor_elem_type(w);
  if (!is_8bit(xt_type) || !is_8bit(wt)) return NULL;
  if (o->quantized &&
      (o->a_scale.type != ONYX_ELEM_FLOAT32 || o->b_scale.type != ONYX_ELEM_FLOAT32 ||
       o->y_scale.type != ONYX_ELEM_FLOAT32 || !is_8bit(o->y_type)))
    return NULL;
  const ConvAttrs* a = &s->a;
  const bool nhwc = a->nhwc;
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* xd = cpu_host->tensor_dims(x);
  const int64_t* wd = cpu_host->tensor_dims(w);
  if (r < 3 || cpu_host->tensor_rank(w) != r) return NULL; /* the double path reports it */
  int64_t xcf[MAXS + 2]; /* channels-last x's dims as [N, C, spatial...] */
  if (nhwc) {
    if (r > MAXS + 2) return NULL;
    xcf[0] = xd[0];
    xcf[1] = xd[r - 1];
    for (size_t i = 1; i + 1 < r; i++)
      xcf[i + 1] = xd[i];
    xd = xcf;
    if (a->group != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "channels-last QLinearConv needs group 1, not %lld",
                           (long long)a->group);
  }
  const size_t n = (size_t)xd[0], c = (size_t)xd[1], m = (size_t)wd[0], cg = (size_t)wd[1];
  const size_t group = (size_t)a->group;
  if (c != cg * group || m % group != 0) return NULL;
  ConvGeo g;
  OnyxStatus* st = conv_geo(ctx, a, xd + 2, wd + 2, r - 2, &g);
  if (st) return st;
  size_t rows, col_bytes, xt_bytes;
  if (!cpu_mul_size(cg, g.k_size, &rows)) return NULL;
  const size_t kp = conv_k_padded(cg, g.k_size); /* the GEMM's k: rows padded */
  if (!cpu_mul_size(kp, g.out_size, &col_bytes) || !cpu_mul_size(cg, g.in_size, &xt_bytes))
    return NULL;
  if (o->quantized && kp > FAST_MAX_K) return NULL;
  *taken = true;
  int64_t out[MAXS + 2] = {(int64_t)n, (int64_t)m};
  memcpy(out + 2, g.out, (r - 2) * sizeof(int64_t));
  if (nhwc) { /* [N, spatial..., M] */
    memcpy(out + 1, g.out, (r - 2) * sizeof(int64_t));
    out[r - 1] = (int64_t)m;
  }
  OnyxTensor* y;
  st = cpu_host->ctx_output(ctx, 0, out, r, &y);
  if (st) return st;
  if (n == 0 || m == 0 || g.out_size == 0) return NULL;
  const size_t mg = m / group;
  const bool x_signed = xt_type == ONYX_ELEM_INT8, w_signed = wt == ONYX_ELEM_INT8;
  const bool depthwise = !nhwc && cg == 1 && mg == 1, pointwise = conv_is_pointwise(&g);
  int32_t *za = NULL, *zb;
  float* mult;
  uint8_t *xt = NULL, *col = NULL;
  if ((!depthwise && (st = scratch(ctx, g.out_size * sizeof *za, (void**)&za))) ||
      (st = scratch(ctx, m * sizeof *zb, (void**)&zb)) ||
      (st = scratch(ctx, m * sizeof *mult, (void**)&mult)))
    return st;
  const int32_t xz = (int32_t)qp_get(xzp, 0, 0, 1);
  for (size_t p = 0; za && p < g.out_size; p++)
    za[p] = xz + (x_signed ? 128 : 0);
  const double as = o->quantized ? qp_get(&o->a_scale, 0, 0, 1) : 0.0;
  const double ys = o->quantized ? qp_get(&o->y_scale, 0, 0, 1) : 1.0;
  QEpi e = {.k = (uint32_t)kp,
            .za = za,
            .za_uniform = true,
            .mult = mult,
            .bias = o->bias,
            .y = cpu_host->tensor_mutable_data(y),
            .rstride = nhwc ? m : 1, /* GEMM row: output position; column: channel */
            .cstride = nhwc ? 1 : g.out_size};
  q_epi_out(&e, o);
  for (size_t j = 0; j < m; j++) {
    zb[j] = (int32_t)qp_get(wzp, 0, j, m) - (w_signed ? 0 : 128);
    if (o->quantized) mult[j] = q_mult(as, qp_get(&o->b_scale, 0, j, m), ys);
    if (o->quantized && !isfinite(mult[j])) e.nonfinite = true;
  }
  const uint8_t* xdata = cpu_host->tensor_data(x);
  const uint8_t* wdata = cpu_host->tensor_data(w);
  CpuStop stop = {.ctx = ctx};
  if (depthwise) {
    /* 2-D: the padded plane covers every tap of every output */
    size_t hp = 0, wp = 0;
    if (g.ns == 2) {
      hp = (size_t)((g.out[0] - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1);
      wp = (size_t)((g.out[1] - 1) * g.s[1] + (g.k[1] - 1) * g.d[1] + 1);
      if (hp > SIZE_MAX / (wp ? wp : 1) || hp * wp > SIZE_MAX / 2 - g.out_size * 8 - g.k_size * 8)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the padded plane does not fit in memory");
    }
    DwJob dj = {.g = &g,
                .hp = hp,
                .wp = wp,
                .x = xdata,
                .w = wdata,
                .x_signed = x_signed,
                .w_signed = w_signed,
                .xz = xz,
                .wzp = wzp,
                .e = &e,
                .c = c,
                .stop = &stop};
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), n * c, dw_planes, &dj);
    if (dj.failed) return cpu_oom(ctx);
    if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    return NULL;
  }
  const bool prepacked =
      s->packed && s->packed[0].k == kp && s->packed[0].n == mg && s->groups == group;
  /* 2-D, unit dilation along the width, whole groups of 4 channels: the
   * GEMM reads A's rows from x's channels-last copy padded with x's zero
   * point (hp x wp positions, every tap inside), kernel row by kernel row
   * (cpu_qgemm_seg), instead of from im2col rows. */
  CpuQgemmSegA seg = {0};
  size_t hp = 0, wp = 0, pad_bytes = 0;
  bool segmented = false;
  if (prepacked && !pointwise && g.ns == 2 && g.d[1] == 1 && cg % 4 == 0 && kp == rows) {
    hp = (size_t)((g.out[0] - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1);
    wp = (size_t)((g.out[1] - 1) * g.s[1] + g.k[1]);
    seg = (CpuQgemmSegA){.n_seg = (size_t)g.k[0],
                         .seg_len = (size_t)g.k[1] * cg,
                         .seg_stride = (size_t)g.d[0] * wp * cg,
                         .per_line = (size_t)g.out[1],
                         .row_step = (size_t)g.s[1] * cg,
                         .line_step = (size_t)g.s[0] * wp * cg};
    segmented = cpu_mul_size(hp, wp, &pad_bytes) && cpu_mul_size(pad_bytes, cg, &pad_bytes) &&
                cpu_qgemm_seg_ok(&s->packed[0], &seg);
  }
  /* x's channels-last copy and its im2col (or padded copy): buffers kept
   * per thread */
  CpuQBuf *own_xt = NULL, *own_col = NULL;
  if (!nhwc) xt = cpu_qgemm_buf_acquire(2, xt_bytes, &own_xt);
  if (!pointwise) col = cpu_qgemm_buf_acquire(3, segmented ? pad_bytes : col_bytes, &own_col);
  for (size_t gi = 0; gi < group && !st; gi++) {
    if ((!nhwc && !xt) || (!pointwise && !col)) {
      st = cpu_oom(ctx);
      break;
    }
    CpuQgemmB local;
    const CpuQgemmB* pb = prepacked ? &s->packed[gi] : &local;
    if (!prepacked && !conv_pack_group(&local, wdata, w_signed, gi, mg, cg, g.k_size)) {
      st = cpu_oom(ctx);
      break;
    }
    e.zb = zb + gi * mg;
    bool rowsums = false; /* A's row sums only where some zb' of the group is not 0 */
    for (size_t j = 0; j < mg; j++)
      rowsums = rowsums || e.zb[j] != 0;
    e.mult = mult + gi * mg;
    e.bias = o->bias ? o->bias + gi * mg : NULL;
    CpuQgemmResult res = CPU_QGEMM_OK;
    for (size_t img = 0; img < n && res == CPU_QGEMM_OK; img++) {
      /* x's channels-last image: x itself (nhwc), else the copy */
      const uint8_t* xin = nhwc ? xdata + img * xt_bytes : xt;
      if (!nhwc) conv_to_hwc(xt, xdata + (img * c + gi * cg) * g.in_size, cg, g.in_size);
      e.y_off = nhwc ? img * g.out_size * m : (img * m + gi * mg) * g.out_size;
      if (pointwise) {
        res = cpu_qgemm(cpu_host->ctx_thread_pool(ctx), &stop, xin, x_signed, g.out_size, cg, 1, pb,
                        rowsums, q_epi, &e);
      } else if (segmented) {
        conv_pad_hwc(cpu_host->ctx_thread_pool(ctx), col, &g, xin, cg, hp, wp, (uint8_t)xz);
        seg.base = col;
        res = cpu_qgemm_seg(cpu_host->ctx_thread_pool(ctx), &stop, &seg, x_signed, g.out_size, pb,
                            rowsums, q_epi, &e);
      } else {
        conv_im2col_hwc(col, &g, xin, cg, kp - rows, (uint8_t)xz);
        res = cpu_qgemm(cpu_host->ctx_thread_pool(ctx), &stop, col, x_signed, g.out_size, kp, 1, pb,
                        rowsums, q_epi, &e);
      }
    }
    if (!prepacked) cpu_qgemm_free_b(&local);
    st = qgemm_status(ctx, res);
  }
  if (!nhwc) cpu_qgemm_buf_release(xt, own_xt);
  if (!pointwise) cpu_qgemm_buf_release(col, own_col);
  return st;
}

/* w's zero point or scale: one value or one per output channel. */
static OnyxStatus* channel_param(OnyxKernelContext* ctx, const char* what, const OnyxTensor* t,
                                 size_t m, QParam* p) {
  memset(p, 0, sizeof *p);
  if (!t) return NULL;
  p->type = cpu_host->tensor_elem_type(t);
  p->data = cpu_host->tensor_data(t);
  const size_t count = cpu_host->tensor_elem_count(t);
  if (count == 1) {
    p->mode = QP_SCALAR;
    return NULL;
  }
  if (cpu_host->tensor_rank(t) == 1 && count == m) {
    p->mode = QP_VEC;
    return NULL;
  }
  return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                       "%s has %zu elements; expected one, or one per output channel (%zu)", what,
                       count, m);
}

static OnyxStatus* conv_integer_compute(void* state, OnyxKernelContext* ctx) {
  const ConvAttrs* a = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* xz = opt_input(ctx, 2);
  if (cpu_host->tensor_rank(w) < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "w must have rank >= 3");
  QParam xzp, wzp;
  OnyxStatus* st = scalar_param(ctx, "x_zero_point", xz, &xzp);
  if (!st)
    st = channel_param(ctx, "w_zero_point", opt_input(ctx, 3), (size_t)cpu_host->tensor_dims(w)[0],
                       &wzp);
  if (st) return st;
  MmOut o = {.quantized = 0, .y_type = ONYX_ELEM_INT32};
  bool taken;
  st = conv_fast(ctx, state, x, w, &xzp, &wzp, &o, &taken);
  if (st || taken) return st;
  return conv_run(ctx, a, x, w, qp_get(&xzp, 0, 0, 1), &wzp, &o);
}

/* QLinearConv's output: per-channel multiplier from x_scale * w_scale[m]. */
static OnyxStatus* qlinear_conv_compute(void* state, OnyxKernelContext* ctx) {
  const ConvAttrs* a = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 3);
  if (cpu_host->tensor_rank(w) < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "w must have rank >= 3");
  const size_t m = (size_t)cpu_host->tensor_dims(w)[0];
  QParam xzp, wzp;
  MmOut o;
  memset(&o, 0, sizeof o);
  OnyxStatus* st = scalar_param(ctx, "x_scale", cpu_host->ctx_input(ctx, 1), &o.a_scale);
  if (!st) st = scalar_param(ctx, "x_zero_point", cpu_host->ctx_input(ctx, 2), &xzp);
  if (!st) st = channel_param(ctx, "w_scale", cpu_host->ctx_input(ctx, 4), m, &o.b_scale);
  if (!st) st = channel_param(ctx, "w_zero_point", cpu_host->ctx_input(ctx, 5), m, &wzp);
  if (!st) st = scalar_param(ctx, "y_scale", cpu_host->ctx_input(ctx, 6), &o.y_scale);
  if (!st) st = scalar_param(ctx, "y_zero_point", cpu_host->ctx_input(ctx, 7), &o.y_zp);
  if (st) return st;
  const OnyxTensor* bias = opt_input(ctx, 8);
  if (bias) {
    if (cpu_host->tensor_elem_count(bias) != m)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "B has %zu elements, expected %zu",
                           cpu_host->tensor_elem_count(bias), m);
    o.bias = cpu_host->tensor_data(bias);
  }
  out_params(&o, cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 7)), ONYX_ELEM_FLOAT32);
  bool taken;
  st = conv_fast(ctx, state, x, w, &xzp, &wzp, &o, &taken);
  if (st || taken) return st;
  if (a->nhwc)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED,
                         "channels-last QLinearConv: only 8-bit x, w, y with float32 scales, "
                         "rank 3 to %d, and at most %d products per output",
                         MAXS + 2, FAST_MAX_K);
  return conv_run(ctx, a, x, w, qp_get(&xzp, 0, 0, 1), &wzp, &o);
}

/* --- com.microsoft QLinearAdd / QLinearMul / QLinearGlobalAveragePool ---------------- */

/* ONNX Runtime's contrib signatures, the targets of the QDQ fusions
 * (Dequantize -> Add or Mul -> Quantize, Dequantize -> GlobalAveragePool
 * -> Quantize). Scales and zero points are one value each (per-tensor). */

/* A scale: one float32 value. */
static OnyxStatus* qc_scale(OnyxKernelContext* ctx, const char* what, size_t i, float* out) {
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (cpu_host->tensor_elem_count(t) != 1 || cpu_host->tensor_elem_type(t) != ONYX_ELEM_FLOAT32)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be one float32 value", what);
  *out = *(const float*)cpu_host->tensor_data(t);
  return NULL;
}

/* A zero point: absent (0) or one value of the data's type. */
static OnyxStatus* qc_zp(OnyxKernelContext* ctx, const char* what, size_t i, int32_t type,
                         int32_t* out) {
  const OnyxTensor* t = opt_input(ctx, i);
  *out = 0;
  if (!t) return NULL;
  if (cpu_host->tensor_elem_count(t) != 1 || (int32_t)cpu_host->tensor_elem_type(t) != type)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be one %s value", what,
                         cpu_elem_name(type));
  *out = (int32_t)cpu_q_load_int(type, cpu_host->tensor_data(t), 0);
  return NULL;
}

/* v rounded half to even, plus zp, saturated to the 8-bit type; NaN gives
 * zp. */
static int32_t qc_quant(double v, int32_t zp, bool is_signed) {
  const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  const double r = isnan(v) ? (double)zp : rint(v) + zp;
  return (int32_t)(r < lo ? lo : r > hi ? hi : r);
}

typedef struct QAdd {
  const uint8_t *a, *b;
  uint8_t* c;
  bool is_signed;
  bool mul; /* QLinearMul: (a - za) * (b - zb) * ra */
  int32_t za, zb, zc;
  float ra, rb; /* QLinearAdd: A_scale / C_scale, B_scale / C_scale; QLinearMul: ra =
                   A_scale * B_scale / C_scale */
} QAdd;

/* c[i] = quantized (a - za) * ra + (b - zb) * rb (QLinearAdd) or
 * (float)((a - za) * (b - zb)) * ra (QLinearMul: the integer product is
 * exact, one float32 rounding) over a span, with A and B each contiguous
 * (step 1) or one value (step 0); the same float32 arithmetic as the scalar
 * loop (multiplies and an add, never fused), vector paths by the int8
 * GEMM's ISA choice. Returns how many leading elements it did (a multiple
 * of the vector width); the caller finishes the rest. */
#if defined(__x86_64__) && defined(__GNUC__)
/* AVX-512: s clamped first to [lo - zc - 1, hi - zc + 1] (where the
 * rounded sum plus zc saturates anyway), rounded to nearest even, zc added
 * in int32, then saturated to bytes by the packs, 64 elements a step; the
 * same result as rounding, adding and clamping in float. Scales of 1e30 and
 * up (the sums could reach inf and NaN) take the scalar loop. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i
qadd16_avx512(const QAdd* q, const uint8_t* a, bool a1, const uint8_t* b, bool b1, __m512 ra,
              __m512 rb, __m512i za, __m512i zb, __m512 lo, __m512 hi, __m512i zc) {
  const __m128i xa = a1 ? _mm_loadu_si128((const __m128i*)a) : _mm_set1_epi8((char)a[0]);
  const __m128i xb = b1 ? _mm_loadu_si128((const __m128i*)b) : _mm_set1_epi8((char)b[0]);
  const __m512i va = q->is_signed ? _mm512_cvtepi8_epi32(xa) : _mm512_cvtepu8_epi32(xa);
  const __m512i vb = q->is_signed ? _mm512_cvtepi8_epi32(xb) : _mm512_cvtepu8_epi32(xb);
  const __m512i da = _mm512_sub_epi32(va, za), db = _mm512_sub_epi32(vb, zb);
  __m512 s = q->mul ? _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(da, db)), ra)
                    : _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(da), ra),
                                    _mm512_mul_ps(_mm512_cvtepi32_ps(db), rb));
  s = _mm512_min_ps(_mm512_max_ps(s, lo), hi);
  return _mm512_add_epi32(
      _mm512_cvt_roundps_epi32(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zc);
}

__attribute__((target("avx512f,avx512bw"))) static size_t
qadd_span_avx512(const QAdd* q, const uint8_t* a, bool a1, const uint8_t* b, bool b1, uint8_t* c,
                 size_t len) {
  if (!(fabsf(q->ra) < 1e30f) || !(fabsf(q->rb) < 1e30f)) return 0;
  const __m512 ra = _mm512_set1_ps(q->ra), rb = _mm512_set1_ps(q->rb);
  const __m512i za = _mm512_set1_epi32(q->za), zb = _mm512_set1_epi32(q->zb);
  const __m512i zc = _mm512_set1_epi32(q->zc);
  const float tlo = q->is_signed ? -128.0f : 0.0f, thi = q->is_signed ? 127.0f : 255.0f;
  const __m512 lo = _mm512_set1_ps(tlo - (float)q->zc - 1.0f);
  const __m512 hi = _mm512_set1_ps(thi - (float)q->zc + 1.0f);
  /* after the two packs, 128-bit lane l holds dwords: chunk l of r0, r1,
   * r2, r3; dword j of the result is chunk j % 4 of r[j / 4] */
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    __m512i r[4];
    for (int t = 0; t < 4; t++)
      r[t] = qadd16_avx512(q, a + (a1 ? i + 16 * (size_t)t : 0), a1,
                           b + (b1 ? i + 16 * (size_t)t : 0), b1, ra, rb, za, zb, lo, hi, zc);
    const __m512i w01 = _mm512_packs_epi32(r[0], r[1]), w23 = _mm512_packs_epi32(r[2], r[3]);
    const __m512i v = q->is_signed ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
    _mm512_storeu_si512((void*)(c + i), _mm512_permutexvar_epi32(order, v));
  }
  const __m512i blo = _mm512_set1_epi32((int)tlo), bhi = _mm512_set1_epi32((int)thi);
  for (; i + 16 <= len; i += 16) {
    __m512i r =
        qadd16_avx512(q, a + (a1 ? i : 0), a1, b + (b1 ? i : 0), b1, ra, rb, za, zb, lo, hi, zc);
    r = _mm512_min_epi32(_mm512_max_epi32(r, blo), bhi);
    _mm_storeu_si128((__m128i*)(c + i), _mm512_cvtepi32_epi8(r));
  }
  return i;
}

__attribute__((target("avx2"))) static size_t qadd_span_avx2(const QAdd* q, const uint8_t* a,
                                                             bool a1, const uint8_t* b, bool b1,
                                                             uint8_t* c, size_t len) {
  const __m256 ra = _mm256_set1_ps(q->ra), rb = _mm256_set1_ps(q->rb);
  const __m256i za = _mm256_set1_epi32(q->za), zb = _mm256_set1_epi32(q->zb);
  const __m256 zc = _mm256_set1_ps((float)q->zc);
  const __m256 lo = _mm256_set1_ps(q->is_signed ? -128.0f : 0.0f);
  const __m256 hi = _mm256_set1_ps(q->is_signed ? 127.0f : 255.0f);
  /* Byte 0 of each int32 to the low 4 bytes of its 128-bit lane, then the
   * two lanes' dwords together. */
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m128i xa = a1 ? _mm_loadl_epi64((const __m128i*)(a + i)) : _mm_set1_epi8((char)a[0]);
    const __m128i xb = b1 ? _mm_loadl_epi64((const __m128i*)(b + i)) : _mm_set1_epi8((char)b[0]);
    const __m256i va = q->is_signed ? _mm256_cvtepi8_epi32(xa) : _mm256_cvtepu8_epi32(xa);
    const __m256i vb = q->is_signed ? _mm256_cvtepi8_epi32(xb) : _mm256_cvtepu8_epi32(xb);
    const __m256i da = _mm256_sub_epi32(va, za), db = _mm256_sub_epi32(vb, zb);
    const __m256 s = q->mul ? _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(da, db)), ra)
                            : _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(da), ra),
                                            _mm256_mul_ps(_mm256_cvtepi32_ps(db), rb));
    __m256 v = _mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> zc */
    v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, zc), lo), hi);
    __m256i w = _mm256_shuffle_epi8(_mm256_cvtps_epi32(v), pick);
    w = _mm256_permutevar8x32_epi32(w, join);
    _mm_storel_epi64((__m128i*)(c + i), _mm256_castsi256_si128(w));
  }
  return i;
}
#endif

static void qadd_row(void* user, const int64_t* in_off, const int64_t* in_step, size_t out_off,
                     size_t len) {
  const QAdd* q = user;
  const uint8_t* a = q->a + in_off[0];
  const uint8_t* b = q->b + in_off[1];
  size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if ((in_step[0] == 0 || in_step[0] == 1) && (in_step[1] == 0 || in_step[1] == 1)) {
    const CpuQgemmIsa isa = cpu_qgemm_isa();
    if (isa >= CPU_QGEMM_AVX512BW)
      done = qadd_span_avx512(q, a, in_step[0] == 1, b, in_step[1] == 1, q->c + out_off, len);
    else if (isa == CPU_QGEMM_AVX2)
      done = qadd_span_avx2(q, a, in_step[0] == 1, b, in_step[1] == 1, q->c + out_off, len);
  }
#endif
  for (size_t i = done; i < len; i++) {
    const uint8_t x = a[(int64_t)i * in_step[0]], y = b[(int64_t)i * in_step[1]];
    const int32_t xv = q->is_signed ? (int8_t)x : x, yv = q->is_signed ? (int8_t)y : y;
    /* float32: QLinearAdd as ONNX Runtime's kernel, (a - za) * ra + (b -
     * zb) * rb; QLinearMul the product (a - za) * (b - zb) (at most 255^2:
     * exact) times ra */
    const float v = q->mul ? (float)((xv - q->za) * (yv - q->zb)) * q->ra
                           : (float)(xv - q->za) * q->ra + (float)(yv - q->zb) * q->rb;
    q->c[out_off + i] = (uint8_t)qc_quant((double)v, q->zc, q->is_signed);
  }
}

static OnyxStatus* qlinear_binary(OnyxKernelContext* ctx, bool mul) {
  const OnyxTensor* a = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* b = cpu_host->ctx_input(ctx, 3);
  const int32_t t = cpu_host->tensor_elem_type(a);
  if ((int32_t)cpu_host->tensor_elem_type(b) != t)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "A is %s but B is %s", cpu_elem_name(t),
                         cpu_elem_name(cpu_host->tensor_elem_type(b)));
  QAdd q = {.is_signed = t == ONYX_ELEM_INT8, .mul = mul};
  float as, bs, cs;
  OnyxStatus* st = qc_scale(ctx, "A_scale", 1, &as);
  if (!st) st = qc_zp(ctx, "A_zero_point", 2, t, &q.za);
  if (!st) st = qc_scale(ctx, "B_scale", 4, &bs);
  if (!st) st = qc_zp(ctx, "B_zero_point", 5, t, &q.zb);
  if (!st) st = qc_scale(ctx, "C_scale", 6, &cs);
  if (!st) st = qc_zp(ctx, "C_zero_point", 7, t, &q.zc);
  if (st) return st;
  q.ra = mul ? as * bs / cs : as / cs;
  q.rb = bs / cs;
  const int64_t* dims[2] = {cpu_host->tensor_dims(a), cpu_host->tensor_dims(b)};
  const size_t ranks[2] = {cpu_host->tensor_rank(a), cpu_host->tensor_rank(b)};
  int64_t out[CPU_MAX_RANK];
  size_t out_rank;
  if ((st = cpu_check_rank(ctx, ranks[0])) || (st = cpu_check_rank(ctx, ranks[1])) ||
      (st = cpu_bcast_shape(ctx, 2, dims, ranks, out, &out_rank)))
    return st;
  OnyxTensor* c;
  if ((st = cpu_host->ctx_output(ctx, 0, out, out_rank, &c))) return st;
  if (cpu_host->tensor_elem_count(c) == 0) return NULL;
  q.a = cpu_host->tensor_data(a);
  q.b = cpu_host->tensor_data(b);
  q.c = cpu_host->tensor_mutable_data(c);
  CpuBcast plan;
  cpu_bcast_plan(&plan, out, out_rank, 2, dims, ranks);
  cpu_bcast_run(&plan, qadd_row, &q);
  return NULL;
}

static OnyxStatus* qlinear_add_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  return qlinear_binary(ctx, false);
}

static OnyxStatus* qlinear_mul_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  return qlinear_binary(ctx, true);
}

typedef struct QGap {
  int channels_last;
} QGap;

static OnyxStatus* qgap_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  QGap* g = calloc(1, sizeof *g);
  if (!g) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  g->channels_last = cpu_host->node_attr_int(node, "channels_last", 0) != 0;
  *state = g;
  return NULL;
}

static OnyxStatus* qgap_compute(void* state, OnyxKernelContext* ctx) {
  const QGap* g = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int32_t t = cpu_host->tensor_elem_type(x);
  const size_t r = cpu_host->tensor_rank(x);
  if (r < 3 || r > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must have rank 3..%d, it has %zu",
                         CPU_MAX_RANK, r);
  float xs, ys;
  int32_t zx, zy;
  OnyxStatus* st = qc_scale(ctx, "x_scale", 1, &xs);
  if (!st) st = qc_zp(ctx, "x_zero_point", 2, t, &zx);
  if (!st) st = qc_scale(ctx, "y_scale", 3, &ys);
  if (!st) st = qc_zp(ctx, "y_zero_point", 4, t, &zy);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  int64_t out[CPU_MAX_RANK];
  const size_t cdim = g->channels_last ? r - 1 : 1;
  for (size_t i = 0; i < r; i++)
    out[i] = i == 0 || i == cdim ? d[i] : 1;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, out, r, &y))) return st;
  const size_t n = (size_t)d[0], c = (size_t)d[cdim];
  const size_t spatial =
      cpu_dims_product(d, g->channels_last ? 1 : 2, g->channels_last ? r - 1 : r);
  if (n == 0 || c == 0) return NULL;
  const uint8_t* xd = cpu_host->tensor_data(x);
  uint8_t* yd = cpu_host->tensor_mutable_data(y);
  const bool sgn = t == ONYX_ELEM_INT8;
  /* mean(dequantized) / y_scale = (sum - S * zx) * x_scale / (S * y_scale) */
  const double f = spatial ? (double)xs / ((double)spatial * (double)ys) : 0.0;
  size_t polled = 0;
  CpuStop stop = {.ctx = ctx};
  for (size_t img = 0; img < n; img++)
    for (size_t ch = 0; ch < c; ch++) {
      if (cpu_stop_poll(&stop, &polled, spatial + 1)) return cpu_cancelled(ctx, NULL);
      int64_t sum = 0;
      if (g->channels_last) {
        const uint8_t* p = xd + img * spatial * c + ch;
        for (size_t i = 0; i < spatial; i++)
          sum += sgn ? (int8_t)p[i * c] : p[i * c];
      } else {
        const uint8_t* p = xd + (img * c + ch) * spatial;
        for (size_t i = 0; i < spatial; i++)
          sum += sgn ? (int8_t)p[i] : p[i];
      }
      const double v = spatial ? (double)(sum - (int64_t)spatial * zx) * f : 0.0;
      yd[img * c + ch] = (uint8_t)qc_quant(v, zy, sgn);
    }
  return NULL;
}

/* --- Registration ----------------------------------------------------------------- */

#define ELEM(x) ONYX_ELEM_##x
static const int32_t I8U8[] = {ELEM(INT8), ELEM(UINT8)};
static const int32_t I32[] = {ELEM(INT32)};
static const int32_t QL21[] = {ELEM(INT8),           ELEM(UINT8),      ELEM(FLOAT8E4M3FN),
                               ELEM(FLOAT8E4M3FNUZ), ELEM(FLOAT8E5M2), ELEM(FLOAT8E5M2FNUZ)};
static const int32_t TS21[] = {ELEM(FLOAT32), ELEM(FLOAT16), ELEM(BFLOAT16)};
#define TC(name, arr)                                                                              \
  { name, arr, CPU_ARRAY_LEN(arr) }
static const OnyxTypeConstraint TC_INT[] = {TC("T1", I8U8), TC("T2", I8U8), TC("T3", I32)};
static const OnyxTypeConstraint TC_QLMM10[] = {TC("T1", I8U8), TC("T2", I8U8), TC("T3", I8U8)};
static const OnyxTypeConstraint TC_QLMM21[] = {TC("TS", TS21), TC("T1", QL21), TC("T2", QL21),
                                               TC("T3", QL21)};
static const OnyxTypeConstraint TC_QLCONV[] = {TC("T1", I8U8), TC("T2", I8U8), TC("T3", I8U8),
                                               TC("T4", I32)};

static const OnyxTypeConstraint TC_MS[] = {TC("T", I8U8)};

static int quantized_flag = 1;

OnyxStatus* cpu_register_quant_mm(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      {.op_type = "MatMulInteger",
       .since_version = 10,
       .end_version = latest,
       .type_constraints = TC_INT,
       .type_constraint_count = CPU_ARRAY_LEN(TC_INT),
       .create = mm_create,
       .compute = matmul_integer_compute,
       .release = mm_release},
      {.op_type = "QLinearMatMul",
       .since_version = 10,
       .end_version = 20,
       .type_constraints = TC_QLMM10,
       .type_constraint_count = CPU_ARRAY_LEN(TC_QLMM10),
       .create = mm_create,
       .compute = qlinear_matmul_compute,
       .release = mm_release,
       .user_data = &quantized_flag},
      {.op_type = "QLinearMatMul",
       .since_version = 21,
       .end_version = latest,
       .type_constraints = TC_QLMM21,
       .type_constraint_count = CPU_ARRAY_LEN(TC_QLMM21),
       .create = mm_create,
       .compute = qlinear_matmul_compute,
       .release = mm_release,
       .user_data = &quantized_flag},
      {.op_type = "ConvInteger",
       .since_version = 10,
       .end_version = latest,
       .type_constraints = TC_INT,
       .type_constraint_count = CPU_ARRAY_LEN(TC_INT),
       .create = conv_create,
       .compute = conv_integer_compute,
       .release = conv_release},
      {.op_type = "QLinearConv",
       .since_version = 10,
       .end_version = latest,
       .type_constraints = TC_QLCONV,
       .type_constraint_count = CPU_ARRAY_LEN(TC_QLCONV),
       .create = conv_create,
       .compute = qlinear_conv_compute,
       .release = conv_release,
       .user_data = &quantized_flag},
  };
  OnyxStatus* st = cpu_q_register_defs(r, defs, CPU_ARRAY_LEN(defs));
  const OnyxKernelDef ms[] = {
      {.struct_size = sizeof(OnyxKernelDef),
       .domain = "com.microsoft",
       .op_type = "QLinearAdd",
       .since_version = 1,
       .end_version = latest,
       .type_constraints = TC_MS,
       .type_constraint_count = CPU_ARRAY_LEN(TC_MS),
       .compute = qlinear_add_compute},
      {.struct_size = sizeof(OnyxKernelDef),
       .domain = "com.microsoft",
       .op_type = "QLinearMul",
       .since_version = 1,
       .end_version = latest,
       .type_constraints = TC_MS,
       .type_constraint_count = CPU_ARRAY_LEN(TC_MS),
       .compute = qlinear_mul_compute},
      {.struct_size = sizeof(OnyxKernelDef),
       .domain = "com.microsoft",
       .op_type = "QLinearGlobalAveragePool",
       .since_version = 1,
       .end_version = latest,
       .type_constraints = TC_MS,
       .type_constraint_count = CPU_ARRAY_LEN(TC_MS),
       .create = qgap_create,
       .compute = qgap_compute,
       .release = cpu_free_state},
      {.struct_size = sizeof(OnyxKernelDef),
       .domain = "com.onyx",
       .op_type = "QLinearConv",
       .since_version = 1,
       .end_version = latest,
       .type_constraints = TC_QLCONV,
       .type_constraint_count = CPU_ARRAY_LEN(TC_QLCONV),
       .create = conv_nhwc_create,
       .compute = qlinear_conv_compute,
       .release = conv_release,
       .user_data = &quantized_flag},
      {.struct_size = sizeof(OnyxKernelDef),
       .domain = "com.microsoft",
       .op_type = "NhwcMaxPool",
       .since_version = 1,
       .end_version = latest,
       .type_constraints = TC_MS,
       .type_constraint_count = CPU_ARRAY_LEN(TC_MS),
       .create = cpu_qmaxpool_nhwc_create,
       .compute = cpu_qmaxpool_nhwc_compute,
       .release = cpu_free_state},
  };
  for (size_t i = 0; !st && i < CPU_ARRAY_LEN(ms); i++)
    st = cpu_host->register_kernel(r, &ms[i]);
  return st;
}
