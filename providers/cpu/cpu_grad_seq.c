/* cpu_grad_seq.c — the backward kernels of the recurrent ops, in the
 * com.onyx.training domain (docs/training.md, "Gradient ops"; schemas:
 * schemas/schemas_training_seq.c), float32 and float64:
 *
 *   RNNGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?
 *   GRUGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?                linear_before_reset
 *   LSTMGrad(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, dY?, dY_h?, dY_c?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?, d_initial_c?, dP?
 *   ResizeGrad(dY, X_shape, scales?) -> dX   (at the end of this file)
 *
 * with the forward op's hidden_size, direction and layout, and its default
 * activations (Tanh for RNN; Sigmoid and Tanh for GRU; Sigmoid, Tanh, Tanh
 * for LSTM), no clip and no input_forget (the gradient rules refuse the
 * others). Gate orders are ONNX's: GRU z, r, h; LSTM i, o, f, c; peepholes
 * P = [Pi, Po, Pf].
 *
 * Method, per direction, in double:
 *  - The forward pass is recomputed (the gates are not saved by the forward
 *    op): the input projection X W^T of every step is one GEMM, then each
 *    step one GEMM H_{t-1} R^T over the batch, storing the gate activations,
 *    H_{t-1} and (LSTM) C_{t-1}, C_t of every step.
 *  - The backward pass walks the steps in reverse: dH (and dC) start at
 *    dY_h (dY_c); each active step adds dY[t], forms the gradients of the
 *    gates' pre-activations dG, and carries dH_{t-1} = dG R (a GEMM) plus the
 *    direct paths (GRU's z ⊙ dH, LSTM's f ⊙ dC and the peepholes).
 *    dR += dG^T H_{t-1} per step (a GEMM); dG of every step is kept, so
 *    dX += dG W and dW = dG^T X are one GEMM each over all steps.
 *  - A batch entry past its sequence length is inactive at that step: its
 *    state passes through unchanged (so does its gradient) and its gates
 *    get no gradient; like the forward kernel, direction reverse processes
 *    steps len-1 .. 0 of each entry.
 * The GEMMs are cpu_gemm_f64 on the session's pool; every sum runs in a
 * fixed order, so results do not depend on the number of threads. Polls
 * cancellation once per step of each pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "cpu_nnop_util.h"
#include "cpu_util.h"

#define TRAINING "com.onyx.training"

static const int32_t T_LENS[] = {ONYX_ELEM_INT32};
static const OnyxTypeConstraint TC_T[] = {{"T", cpu_types_float, 2}, {"T1", T_LENS, 1}};
static const OnyxTypeConstraint TC_RZ[] = {{"T", cpu_types_float, 2}};

typedef enum SeqCell { SEQ_RNN, SEQ_GRU, SEQ_LSTM } SeqCell;

/* Input slots by cell. */
typedef struct SeqSlots {
  int b, lens, h0, c0, p, dy, dyh, dyc; /* -1: the cell has none */
  int o_dh0, o_dc0, o_dp;
} SeqSlots;

static const SeqSlots SLOTS[3] = {
    {3, 4, 5, -1, -1, 6, 7, -1, 4, -1, -1},
    {3, 4, 5, -1, -1, 6, 7, -1, 4, -1, -1},
    {3, 4, 5, 6, 7, 8, 9, 10, 4, 5, 6},
};

static double sigm(double x) {
  return 1.0 / (1.0 + exp(-x));
}

/* A present input (NULL when absent or empty-named). */
static const OnyxTensor* opt_in(OnyxKernelContext* ctx, int slot) {
  if (slot < 0 || (size_t)slot >= cpu_host->ctx_input_count(ctx)) return NULL;
  return cpu_host->ctx_input(ctx, (size_t)slot);
}

/* n elements of t as doubles into dst. */
static void to_double(const OnyxTensor* t, double* dst, size_t n) {
  const void* d = cpu_host->tensor_data(t);
  if (cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT32)
    for (size_t i = 0; i < n; i++)
      dst[i] = ((const float*)d)[i];
  else
    memcpy(dst, d, n * sizeof(double));
}

/* Whether tensor t has exactly the dims want[0..rank). */
static bool dims_are(const OnyxTensor* t, const int64_t* want, size_t rank) {
  const size_t r = cpu_host->tensor_rank(t);
  const int64_t* d = cpu_host->tensor_dims(t);
  if (r != rank) return false;
  for (size_t i = 0; i < rank; i++)
    if (d[i] != want[i]) return false;
  return true;
}

static OnyxStatus* shape_err(OnyxKernelContext* ctx, const char* what, const int64_t* want,
                             size_t rank) {
  char buf[96] = "";
  size_t o = 0;
  for (size_t i = 0; i < rank && o < sizeof buf - 24; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%lld", i ? ", " : "", (long long)want[i]);
  return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must have shape [%s]", what, buf);
}

/* C (m x n) = A (m x k, or k x m when ta) B (k x n) + beta C. */
static void mm(OnyxThreadPool* pool, size_t m, size_t n, size_t k, const double* a, size_t lda,
               int ta, const double* b, size_t ldb, double* c, size_t ldc, double beta) {
  if (!m || !n) return;
  if (!k) {
    if (beta == 0.0)
      for (size_t i = 0; i < m; i++)
        memset(c + i * ldc, 0, n * sizeof(double));
    return;
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
               .alpha = 1,
               .beta = beta};
  cpu_gemm_f64(pool, &g);
}

/* Writes doubles src (n of them) to output tensor `out` of type `type`. */
static void from_double(OnyxTensor* out, int32_t type, const double* src, size_t n) {
  void* d = cpu_host->tensor_mutable_data(out);
  if (type == ONYX_ELEM_FLOAT32)
    for (size_t i = 0; i < n; i++)
      ((float*)d)[i] = (float)src[i];
  else
    memcpy(d, src, n * sizeof(double));
}

/* The scratch of one run, freed together. */
#define SEQ_BUFS 24
typedef struct Bufs {
  double* p[SEQ_BUFS];
  size_t n;
} Bufs;

static double* buf_get(Bufs* bf, size_t a, size_t b, size_t c, bool* oom) {
  size_t n;
  if (*oom || !cpu_mul_size(a, b, &n) || !cpu_mul_size(n, c, &n) || bf->n >= SEQ_BUFS) {
    *oom = true;
    return NULL;
  }
  double* p = calloc(n ? n : 1, sizeof(double));
  if (!p) {
    *oom = true;
    return NULL;
  }
  bf->p[bf->n++] = p;
  return p;
}

static void bufs_free(Bufs* bf) {
  for (size_t i = 0; i < bf->n; i++)
    free(bf->p[i]);
}

typedef struct SeqRun {
  SeqCell cell;
  bool lbr;
  size_t S, N, I, H, G, GH, nd;
  bool reverse;
  const int64_t* lens;
  /* inputs in layout 0, double */
  const double *x, *w, *r, *bias, *peep, *h0, *c0, *dy, *dyh, *dyc;
  /* outputs (zeroed), layout 0 */
  double *dx, *dw, *dr, *db, *dh0, *dc0, *dp;
  OnyxThreadPool* pool;
} SeqRun;

/* Scratch of one direction. */
typedef struct SeqWork {
  double *xw, *gates, *hprev, *cprev, *cnew, *rech, *hr, *dg, *dgr, *dgt, *dh, *dc, *dhn, *dcn, *da,
      *tmp;
} SeqWork;

/* The batch row b's time index at step s, or -1 when inactive. */
static int64_t step_time(const SeqRun* q, bool rev, size_t s, size_t b) {
  if ((int64_t)s >= q->lens[b]) return -1;
  return rev ? q->lens[b] - 1 - (int64_t)s : (int64_t)s;
}

/* The forward pass of direction d, saving what the backward reads. */
static bool seq_forward(const SeqRun* q, SeqWork* k, size_t d, bool rev, CpuStop* stop) {
  const size_t N = q->N, H = q->H, GH = q->GH, I = q->I;
  const double* W = q->w + d * GH * I;
  const double* R = q->r + d * GH * H;
  const double* wb = q->bias ? q->bias + d * 2 * GH : NULL;
  const double* rb = wb ? wb + GH : NULL;
  const double* P = q->peep ? q->peep + d * 3 * H : NULL;
  /* xw = X W^T (+ Wb): W^T through trans_a on a transposed view is not
   * available for B, so W is transposed into tmp first. */
  cpu_nn_transpose(k->tmp, W, GH, I, sizeof(double));
  mm(q->pool, q->S * N, GH, I, q->x, I, 0, k->tmp, GH, k->xw, GH, 0.0);
  double* hcur = k->dhn; /* the running state (the backward reuses these buffers) */
  double* ccur = k->dcn;
  for (size_t b = 0; b < N; b++)
    for (size_t j = 0; j < H; j++) {
      hcur[b * H + j] = q->h0 ? q->h0[(d * N + b) * H + j] : 0;
      ccur[b * H + j] = q->c0 ? q->c0[(d * N + b) * H + j] : 0;
    }
  /* R^T for the per-step products. */
  cpu_nn_transpose(k->tmp, R, GH, H, sizeof(double));
  const bool split = q->cell == SEQ_GRU && !q->lbr;
  const size_t n1 = split ? 2 * H : GH;
  size_t polled = 0;
  for (size_t s = 0; s < q->S; s++) {
    if (cpu_stop_poll(stop, &polled, N * GH * (H + 1) + 1)) return false;
    double* hp = k->hprev + s * N * H;
    double* cp = k->cprev + s * N * H;
    double* gs = k->gates + s * N * GH;
    memcpy(hp, hcur, N * H * sizeof(double));
    memcpy(cp, ccur, N * H * sizeof(double));
    /* hr[:, 0..n1) = H_{t-1} R^T */
    mm(q->pool, N, n1, H, hp, H, 0, k->tmp, GH, k->hr, GH, 0.0);
    for (size_t b = 0; b < N; b++) {
      const int64_t t = step_time(q, rev, s, b);
      if (t < 0) continue;
      const double* xg = k->xw + ((size_t)t * N + b) * GH;
      double* hr = k->hr + b * GH;
      double* g = gs + b * GH;
      const double* hpb = hp + b * H;
      double* hc = hcur + b * H;
      double* cc = ccur + b * H;
      for (size_t j = 0; j < n1; j++)
        g[j] = xg[j] + hr[j] + (wb ? wb[j] + rb[j] : 0);
      if (q->cell == SEQ_RNN) {
        for (size_t j = 0; j < H; j++)
          hc[j] = g[j] = tanh(g[j]);
      } else if (q->cell == SEQ_GRU) {
        for (size_t j = 0; j < 2 * H; j++)
          g[j] = sigm(g[j]);
        double* rh = k->rech + (s * N + b) * H;
        if (split) {
          /* (r ⊙ H_{t-1}) R_h^T */
          for (size_t j = 0; j < H; j++) {
            double acc = 0;
            for (size_t m = 0; m < H; m++)
              acc += g[H + m] * hpb[m] * k->tmp[m * GH + 2 * H + j];
            rh[j] = acc + (rb ? rb[2 * H + j] : 0);
          }
          for (size_t j = 0; j < H; j++)
            g[2 * H + j] = tanh(xg[2 * H + j] + (wb ? wb[2 * H + j] : 0) + rh[j]);
        } else {
          /* g[2H..3H) holds xw + hr + Wb + Rb; split it back apart. */
          for (size_t j = 0; j < H; j++) {
            rh[j] = hr[2 * H + j] + (rb ? rb[2 * H + j] : 0);
            g[2 * H + j] = tanh(xg[2 * H + j] + (wb ? wb[2 * H + j] : 0) + g[H + j] * rh[j]);
          }
        }
        for (size_t j = 0; j < H; j++)
          hc[j] = (1 - g[j]) * g[2 * H + j] + g[j] * hpb[j];
      } else {
        const double* cpb = cp + b * H;
        double* cn = k->cnew + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          double gi = g[j], gf = g[2 * H + j];
          if (P) {
            gi += P[j] * cpb[j];
            gf += P[2 * H + j] * cpb[j];
          }
          g[j] = sigm(gi);
          g[2 * H + j] = sigm(gf);
          g[3 * H + j] = tanh(g[3 * H + j]);
          cn[j] = g[2 * H + j] * cpb[j] + g[j] * g[3 * H + j];
          double go = g[H + j] + (P ? P[H + j] * cn[j] : 0);
          g[H + j] = sigm(go);
          cc[j] = cn[j];
          hc[j] = g[H + j] * tanh(cn[j]);
        }
      }
    }
  }
  return true;
}

/* The backward pass of direction d (after seq_forward). */
static bool seq_backward(const SeqRun* q, SeqWork* k, size_t d, bool rev, CpuStop* stop) {
  const size_t N = q->N, H = q->H, GH = q->GH, I = q->I, S = q->S;
  const double* W = q->w + d * GH * I;
  const double* R = q->r + d * GH * H;
  const double* P = q->peep ? q->peep + d * 3 * H : NULL;
  double* dR = q->dr + d * GH * H;
  double* dWb = q->db + d * 2 * GH;
  double* dRb = dWb + GH;
  double* dP = q->dp + d * 3 * H;
  const bool split = q->cell == SEQ_GRU && !q->lbr;
  const size_t n1 = split ? 2 * H : GH;
  double* dh = k->dh;
  double* dc = k->dc;
  for (size_t i = 0; i < N * H; i++) {
    dh[i] = q->dyh ? q->dyh[d * N * H + i] : 0;
    dc[i] = q->dyc ? q->dyc[d * N * H + i] : 0;
  }
  memset(k->dg, 0, S * N * GH * sizeof(double));
  size_t polled = 0;
  for (size_t s = S; s-- > 0;) {
    if (cpu_stop_poll(stop, &polled, N * GH * (H + 1) + 1)) return false;
    const double* hp = k->hprev + s * N * H;
    const double* cp = k->cprev + s * N * H;
    const double* gs = k->gates + s * N * GH;
    memset(k->dgr, 0, N * GH * sizeof(double));
    for (size_t b = 0; b < N; b++) {
      const int64_t t = step_time(q, rev, s, b);
      double* dhb = dh + b * H;
      double* dhn = k->dhn + b * H;
      double* dcb = dc + b * H;
      double* dcn = k->dcn + b * H;
      if (t < 0) {
        /* inactive: the state passed through */
        memcpy(dhn, dhb, H * sizeof(double));
        memcpy(dcn, dcb, H * sizeof(double));
        continue;
      }
      const double* dyr = q->dy ? q->dy + (((size_t)t * q->nd + d) * N + b) * H : NULL;
      if (dyr)
        for (size_t j = 0; j < H; j++)
          dhb[j] += dyr[j];
      const double* g = gs + b * GH;
      const double* hpb = hp + b * H;
      double* dgx = k->dg + ((size_t)t * N + b) * GH;
      double* dgr = k->dgr + b * GH;
      memset(dhn, 0, H * sizeof(double));
      memset(dcn, 0, H * sizeof(double));
      if (q->cell == SEQ_RNN) {
        for (size_t j = 0; j < H; j++)
          dgx[j] = dgr[j] = dhb[j] * (1 - g[j] * g[j]);
      } else if (q->cell == SEQ_GRU) {
        const double* rh = k->rech + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          const double z = g[j], hh = g[2 * H + j];
          dgx[j] = dgr[j] = dhb[j] * (hpb[j] - hh) * z * (1 - z);
          const double dhp = dhb[j] * (1 - z) * (1 - hh * hh);
          dgx[2 * H + j] = dhp;
          /* linear_before_reset: h~ = tanh(xw + r ⊙ (H R_h^T + Rb_h)) */
          dgr[2 * H + j] = split ? dhp : dhp * g[H + j];
          dhn[j] = dhb[j] * z;
          if (!split) {
            const double dr = dhp * rh[j];
            dgx[H + j] = dgr[H + j] = dr * g[H + j] * (1 - g[H + j]);
          }
        }
      } else {
        const double* cpb = cp + b * H;
        const double* cn = k->cnew + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          const double ig = g[j], og = g[H + j], fg = g[2 * H + j], cg = g[3 * H + j];
          const double tc = tanh(cn[j]);
          const double dop = dhb[j] * tc * og * (1 - og);
          double dcj = dcb[j] + dhb[j] * og * (1 - tc * tc) + (P ? dop * P[H + j] : 0);
          const double dip = dcj * cg * ig * (1 - ig);
          const double dfp = dcj * cpb[j] * fg * (1 - fg);
          const double dcp = dcj * ig * (1 - cg * cg);
          dgx[j] = dgr[j] = dip;
          dgx[H + j] = dgr[H + j] = dop;
          dgx[2 * H + j] = dgr[2 * H + j] = dfp;
          dgx[3 * H + j] = dgr[3 * H + j] = dcp;
          dcn[j] = dcj * fg + (P ? dip * P[j] + dfp * P[2 * H + j] : 0);
          if (P) {
            dP[j] += dip * cpb[j];
            dP[H + j] += dop * cn[j];
            dP[2 * H + j] += dfp * cpb[j];
          }
        }
      }
    }
    if (split) {
      /* GRU, h gate on a = r ⊙ H_{t-1}: da = dG_h R_h, then r's gradient. */
      mm(q->pool, N, H, H, k->dgr + 2 * H, GH, 0, R + 2 * H * H, H, k->da, H, 0.0);
      for (size_t b = 0; b < N; b++) {
        const int64_t t = step_time(q, rev, s, b);
        if (t < 0) continue;
        const double* g = gs + b * GH;
        const double* hpb = hp + b * H;
        double* dgx = k->dg + ((size_t)t * N + b) * GH;
        double* dgr = k->dgr + b * GH;
        double* a = k->tmp + b * H;
        for (size_t j = 0; j < H; j++) {
          const double da = k->da[b * H + j];
          dgx[H + j] = dgr[H + j] = da * hpb[j] * g[H + j] * (1 - g[H + j]);
          k->dhn[b * H + j] += da * g[H + j];
          a[j] = g[H + j] * hpb[j];
        }
      }
      /* dR_h += dG_h^T a */
      mm(q->pool, H, H, N, k->dgr + 2 * H, GH, 1, k->tmp, H, dR + 2 * H * H, H, 1.0);
    }
    /* dH_{t-1} += dG[:, 0..n1) R[0..n1); dR[0..n1) += dG^T H_{t-1} */
    mm(q->pool, N, H, n1, k->dgr, GH, 0, R, H, k->dhn, H, 1.0);
    mm(q->pool, n1, H, N, k->dgr, GH, 1, hp, H, dR, H, 1.0);
    for (size_t b = 0; b < N; b++) {
      if (step_time(q, rev, s, b) < 0) continue;
      for (size_t j = 0; j < GH; j++)
        dRb[j] += k->dgr[b * GH + j];
    }
    double* sw = dh;
    dh = k->dhn;
    k->dhn = sw;
    sw = dc;
    dc = k->dcn;
    k->dcn = sw;
  }
  k->dh = dh;
  k->dc = dc;
  for (size_t i = 0; i < N * H; i++) {
    q->dh0[d * N * H + i] = dh[i];
    if (q->dc0) q->dc0[d * N * H + i] = dc[i];
  }
  /* dWb = sum of dG; dX += dG W; dW = dG^T X over every step. */
  for (size_t i = 0; i < S * N; i++)
    for (size_t j = 0; j < GH; j++)
      dWb[j] += k->dg[i * GH + j];
  mm(q->pool, S * N, I, GH, k->dg, GH, 0, W, I, q->dx, I, d ? 1.0 : 0.0);
  mm(q->pool, GH, I, S * N, k->dg, GH, 1, q->x, I, q->dw + d * GH * I, I, 0.0);
  return true;
}

static OnyxStatus* seq_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const char* op = cpu_host->node_op_type(node);
  const SeqCell cell = !strcmp(op, "LSTMGrad")  ? SEQ_LSTM
                       : !strcmp(op, "GRUGrad") ? SEQ_GRU
                                                : SEQ_RNN;
  const SeqSlots* sl = &SLOTS[cell];
  const OnyxTensor* X = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* Wt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* Rt = cpu_host->ctx_input(ctx, 2);
  const int32_t type = cpu_host->tensor_elem_type(X);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be float32 or float64");
  const int64_t hidden = cpu_host->node_attr_int(node, "hidden_size", 0);
  if (hidden < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "hidden_size must be >= 1, got %lld",
                         (long long)hidden);
  char dir[32];
  nnop_attr_str(node, "direction", "forward", dir, sizeof dir);
  size_t nd = 1;
  bool reverse = false;
  if (!strcmp(dir, "reverse"))
    reverse = true;
  else if (!strcmp(dir, "bidirectional"))
    nd = 2;
  else if (strcmp(dir, "forward"))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "unknown direction '%s'", dir);
  const int64_t layout = cpu_host->node_attr_int(node, "layout", 0);
  if (layout != 0 && layout != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "layout must be 0 or 1, got %lld",
                         (long long)layout);
  const size_t xr = cpu_host->tensor_rank(X);
  const int64_t* xd = cpu_host->tensor_dims(X);
  if (xr != 3) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be 3-D, not %zu-D", xr);
  SeqRun q = {.cell = cell,
              .lbr = cpu_host->node_attr_int(node, "linear_before_reset", 0) != 0,
              .S = (size_t)(layout ? xd[1] : xd[0]),
              .N = (size_t)(layout ? xd[0] : xd[1]),
              .I = (size_t)xd[2],
              .H = (size_t)hidden,
              .G = cell == SEQ_RNN   ? 1
                   : cell == SEQ_GRU ? 3
                                     : 4,
              .nd = nd,
              .reverse = reverse,
              .pool = cpu_host->ctx_thread_pool(ctx)};
  if (!cpu_mul_size(q.G, q.H, &q.GH) || q.GH > (size_t)INT64_MAX / 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "hidden_size %lld is too large",
                         (long long)hidden);
  const int64_t S = (int64_t)q.S, N = (int64_t)q.N, I = (int64_t)q.I, H = hidden,
                GH = (int64_t)q.GH, D = (int64_t)nd;
  const int64_t wdims[3] = {D, GH, I}, rdims[3] = {D, GH, H}, bdims[2] = {D, 2 * GH},
                pdims[2] = {D, 3 * H}, ldims[1] = {N};
  const int64_t hdims[3] = {layout ? N : D, layout ? D : N, H};
  const int64_t ydims[4] = {layout ? N : S, layout ? S : D, layout ? D : N, H};
  if (!dims_are(Wt, wdims, 3)) return shape_err(ctx, "W", wdims, 3);
  if (!dims_are(Rt, rdims, 3)) return shape_err(ctx, "R", rdims, 3);
  const OnyxTensor* Bt = opt_in(ctx, sl->b);
  const OnyxTensor* Lt = opt_in(ctx, sl->lens);
  const OnyxTensor* H0 = opt_in(ctx, sl->h0);
  const OnyxTensor* C0 = opt_in(ctx, sl->c0);
  const OnyxTensor* Pt = opt_in(ctx, sl->p);
  const OnyxTensor* dY = opt_in(ctx, sl->dy);
  const OnyxTensor* dYh = opt_in(ctx, sl->dyh);
  const OnyxTensor* dYc = opt_in(ctx, sl->dyc);
  if (Bt && !dims_are(Bt, bdims, 2)) return shape_err(ctx, "B", bdims, 2);
  if (Lt && !dims_are(Lt, ldims, 1)) return shape_err(ctx, "sequence_lens", ldims, 1);
  if (H0 && !dims_are(H0, hdims, 3)) return shape_err(ctx, "initial_h", hdims, 3);
  if (C0 && !dims_are(C0, hdims, 3)) return shape_err(ctx, "initial_c", hdims, 3);
  if (Pt && !dims_are(Pt, pdims, 2)) return shape_err(ctx, "P", pdims, 2);
  if (dY && !dims_are(dY, ydims, 4)) return shape_err(ctx, "dY", ydims, 4);
  if (dYh && !dims_are(dYh, hdims, 3)) return shape_err(ctx, "dY_h", hdims, 3);
  if (dYc && !dims_are(dYc, hdims, 3)) return shape_err(ctx, "dY_c", hdims, 3);
  const OnyxTensor* same[] = {Wt, Rt, Bt, H0, C0, Pt, dY, dYh, dYc};
  for (size_t i = 0; i < CPU_ARRAY_LEN(same); i++)
    if (same[i] && (int32_t)cpu_host->tensor_elem_type(same[i]) != type)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "every float input must have X's type");

  Bufs bf = {0};
  bool oom = false;
  const size_t SN = q.S * q.N, NH = q.N * q.H;
  int64_t* lens = malloc((q.N ? q.N : 1) * sizeof *lens);
  oom = !lens;
  double* x = buf_get(&bf, SN, q.I, 1, &oom);
  double* w = buf_get(&bf, nd, q.GH, q.I, &oom);
  double* r = buf_get(&bf, nd, q.GH, q.H, &oom);
  double* bias = Bt ? buf_get(&bf, nd, 2, q.GH, &oom) : NULL;
  double* peep = Pt ? buf_get(&bf, nd, 3, q.H, &oom) : NULL;
  double* h0 = H0 ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  double* c0 = C0 ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  double* dy = dY ? buf_get(&bf, SN, nd, q.H, &oom) : NULL;
  double* dyh = dYh ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  double* dyc = dYc ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  double* tmpin = buf_get(&bf, SN + q.N, nd, q.H > q.I ? q.H : q.I, &oom);
  q.dx = buf_get(&bf, SN, q.I, 1, &oom);
  q.dw = buf_get(&bf, nd, q.GH, q.I, &oom);
  q.dr = buf_get(&bf, nd, q.GH, q.H, &oom);
  q.db = buf_get(&bf, nd, 2, q.GH, &oom);
  q.dh0 = buf_get(&bf, nd, NH, 1, &oom);
  q.dc0 = cell == SEQ_LSTM ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  q.dp = buf_get(&bf, nd, 3, q.H, &oom);
  SeqWork k = {0};
  double* work = NULL;
  const size_t sgh = SN * q.GH, snh = SN * q.H;
  size_t tmp_n = q.GH * (q.I > q.H ? q.I : q.H);
  if (tmp_n < NH) tmp_n = NH;
  /* xw, gates, dg: S*N*GH each; hprev, cprev, cnew, rech: S*N*H each;
   * hr, dgr: N*GH; dh, dc, dhn, dcn, da: N*H; tmp. */
  size_t total = 0;
  bool big = sgh > SIZE_MAX / 3 || snh > SIZE_MAX / 4;
  if (!big) {
    total = 3 * sgh;
    big = total > SIZE_MAX - 4 * snh;
    total += 4 * snh;
  }
  size_t extra;
  if (!big && cpu_mul_size(q.N, 2 * q.GH + 5 * q.H, &extra) && total <= SIZE_MAX - extra - tmp_n)
    total += extra + tmp_n;
  else
    big = true;
  if (!oom && !big && total < SIZE_MAX / sizeof(double)) work = malloc((total ? total : 1) * 8);
  if (oom || !work) {
    free(work);
    free(lens);
    bufs_free(&bf);
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory for the recurrent gradient");
  }
  double* wp = work;
  k.xw = wp, wp += sgh;
  k.gates = wp, wp += sgh;
  k.dg = wp, wp += sgh;
  k.hprev = wp, wp += snh;
  k.cprev = wp, wp += snh;
  k.cnew = wp, wp += snh;
  k.rech = wp, wp += snh;
  k.hr = wp, wp += q.N * q.GH;
  k.dgr = wp, wp += q.N * q.GH;
  k.dh = wp, wp += NH;
  k.dc = wp, wp += NH;
  k.dhn = wp, wp += NH;
  k.dcn = wp, wp += NH;
  k.da = wp, wp += NH;
  k.tmp = wp;
  memset(work, 0, total * sizeof(double));

  OnyxStatus* st = NULL;
  for (size_t b = 0; b < q.N; b++) {
    lens[b] = (int64_t)q.S;
    if (Lt) {
      lens[b] = ((const int32_t*)cpu_host->tensor_data(Lt))[b];
      if (lens[b] < 0 || lens[b] > S) {
        st = cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "sequence_lens[%zu] = %lld is not in [0, %lld]", b, (long long)lens[b],
                           (long long)S);
        break;
      }
    }
  }
  q.lens = lens;
  if (!st) {
    /* Inputs to double, in layout 0. */
    if (layout) {
      to_double(X, tmpin, SN * q.I);
      for (size_t b = 0; b < q.N; b++)
        for (size_t t = 0; t < q.S; t++)
          memcpy(x + (t * q.N + b) * q.I, tmpin + (b * q.S + t) * q.I, q.I * sizeof(double));
    } else {
      to_double(X, x, SN * q.I);
    }
    to_double(Wt, w, nd * q.GH * q.I);
    to_double(Rt, r, nd * q.GH * q.H);
    if (Bt) to_double(Bt, bias, nd * 2 * q.GH);
    if (Pt) to_double(Pt, peep, nd * 3 * q.H);
    const OnyxTensor* states[] = {H0, C0, dYh, dYc};
    double* sdst[] = {h0, c0, dyh, dyc};
    for (size_t i = 0; i < 4; i++) {
      if (!states[i]) continue;
      if (!layout) {
        to_double(states[i], sdst[i], nd * NH);
        continue;
      }
      to_double(states[i], tmpin, nd * NH);
      for (size_t b = 0; b < q.N; b++)
        for (size_t e = 0; e < nd; e++)
          memcpy(sdst[i] + (e * q.N + b) * q.H, tmpin + (b * nd + e) * q.H, q.H * sizeof(double));
    }
    if (dY) {
      if (!layout) {
        to_double(dY, dy, SN * nd * q.H);
      } else {
        to_double(dY, tmpin, SN * nd * q.H);
        for (size_t b = 0; b < q.N; b++)
          for (size_t t = 0; t < q.S; t++)
            for (size_t e = 0; e < nd; e++)
              memcpy(dy + ((t * nd + e) * q.N + b) * q.H, tmpin + ((b * q.S + t) * nd + e) * q.H,
                     q.H * sizeof(double));
      }
    }
    q.x = x, q.w = w, q.r = r, q.bias = bias, q.peep = peep, q.h0 = h0, q.c0 = c0;
    q.dy = dy, q.dyh = dyh, q.dyc = dyc;
    CpuStop stop = {.ctx = ctx};
    for (size_t d = 0; d < nd && !st; d++) {
      const bool rev = reverse || d == 1;
      if (!seq_forward(&q, &k, d, rev, &stop) || !seq_backward(&q, &k, d, rev, &stop))
        st = cpu_cancelled(ctx, NULL);
    }
  }
  /* Outputs, in the node's layout. */
  if (!st) {
    const int64_t* dims[7] = {xd, wdims, rdims, bdims, hdims, hdims, pdims};
    const size_t ranks[7] = {3, 3, 3, 2, 3, 3, 2};
    const double* src[7] = {q.dx, q.dw, q.dr, q.db, q.dh0, q.dc0, q.dp};
    const size_t count[7] = {SN * q.I, nd * q.GH * q.I, nd * q.GH * q.H, nd * 2 * q.GH,
                             nd * NH,  nd * NH,         nd * 3 * q.H};
    const size_t n_out = cell == SEQ_LSTM ? 7 : 5;
    for (size_t o = 0; o < n_out && !st; o++) {
      if (!nnop_has_output(node, o)) continue;
      OnyxTensor* out;
      if ((st = cpu_host->ctx_output(ctx, o, dims[o], ranks[o], &out))) break;
      const double* v = src[o];
      if (layout && o == 0) {
        for (size_t b = 0; b < q.N; b++)
          for (size_t t = 0; t < q.S; t++)
            memcpy(tmpin + (b * q.S + t) * q.I, q.dx + (t * q.N + b) * q.I, q.I * sizeof(double));
        v = tmpin;
      } else if (layout && (o == 4 || o == 5)) {
        for (size_t b = 0; b < q.N; b++)
          for (size_t e = 0; e < nd; e++)
            memcpy(tmpin + (b * nd + e) * q.H, src[o] + (e * q.N + b) * q.H, q.H * sizeof(double));
        v = tmpin;
      }
      from_double(out, type, v, count[o]);
    }
  }
  free(work);
  free(lens);
  bufs_free(&bf);
  return st;
}

/* ======================================================================== */
/* ResizeGrad                                                               */
/* ======================================================================== */

typedef enum RzCoord {
  RZ_HALF_PIXEL,
  RZ_HALF_PIXEL_SYM,
  RZ_PYTORCH_HALF_PIXEL,
  RZ_ALIGN_CORNERS,
  RZ_ASYMMETRIC
} RzCoord;
static const char* const RZ_COORD_NAMES[] = {"half_pixel", "half_pixel_symmetric",
                                             "pytorch_half_pixel", "align_corners", "asymmetric"};

/* The input coordinate of output coordinate x along an axis (Resize's
 * coordinate_transformation_mode, as the forward kernel computes it). */
static double rz_coord(RzCoord c, double x, double scale, int64_t in_len, int64_t out_len) {
  switch (c) {
  case RZ_HALF_PIXEL:
    return (x + 0.5) / scale - 0.5;
  case RZ_HALF_PIXEL_SYM: {
    const double adjustment = (double)out_len / (scale * (double)in_len);
    return (double)in_len / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  case RZ_PYTORCH_HALF_PIXEL:
    return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0;
  case RZ_ALIGN_CORNERS:
    return out_len == 1 ? 0 : x * (double)(in_len - 1) / (scale * (double)in_len - 1);
  case RZ_ASYMMETRIC:
    return x / scale;
  }
  return 0;
}

static double rz_cubic(double x, double a) {
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

typedef struct RzPlan {
  RzCoord coord;
  bool cubic, exclude_outside;
  double a;
} RzPlan;

/* The transpose of one interpolation pass along axis `ax`: src has dims
 * `d` with d[ax] = out_len, dst the same with in_len (zeroed by the
 * caller); dst[o, taps(x), i] += w * src[o, x, i]. */
static bool rz_pass_t(const RzPlan* p, const double* src, double* dst, const int64_t* d,
                      size_t rank, size_t ax, int64_t in_len, double scale, CpuStop* stop) {
  size_t outer = 1, inner = 1;
  for (size_t i = 0; i < ax; i++)
    outer *= (size_t)d[i];
  for (size_t i = ax + 1; i < rank; i++)
    inner *= (size_t)d[i];
  const int64_t out_len = d[ax];
  const int64_t radius = p->cubic ? 2 : 1;
  const size_t taps = (size_t)(2 * radius + 1);
  size_t polled = 0;
  for (int64_t x = 0; x < out_len; x++) {
    if (cpu_stop_poll(stop, &polled, outer * inner * taps + 1)) return false;
    double c = rz_coord(p->coord, (double)x, scale, in_len, out_len);
    if (!isfinite(c)) c = 0;
    c = fmin(fmax(c, -(double)in_len - 8), 2.0 * (double)in_len + 8);
    const int64_t first = (int64_t)floor(c) - radius;
    double w[5], sum = 0;
    int64_t idx[5];
    for (size_t t = 0; t < taps; t++) {
      const int64_t j = first + (int64_t)t;
      const double arg = (double)j - c;
      double k = p->cubic ? rz_cubic(arg, p->a) : fmax(0.0, 1 - fabs(arg));
      if (p->exclude_outside && (j < 0 || j >= in_len)) k = 0;
      idx[t] = j < 0 ? 0 : (j >= in_len ? in_len - 1 : j);
      w[t] = k;
      sum += k;
    }
    if (p->exclude_outside && sum != 0)
      for (size_t t = 0; t < taps; t++)
        w[t] /= sum;
    for (size_t o = 0; o < outer; o++) {
      const double* sp = src + (o * (size_t)out_len + (size_t)x) * inner;
      for (size_t t = 0; t < taps; t++) {
        if (w[t] == 0) continue;
        double* dp = dst + (o * (size_t)in_len + (size_t)idx[t]) * inner;
        for (size_t i = 0; i < inner; i++)
          dp[i] += w[t] * sp[i];
      }
    }
  }
  return true;
}

/* ResizeGrad(dY, X_shape, scales?) -> dX: the transpose of Resize's linear
 * or cubic interpolation (mode, coordinate_transformation_mode other than
 * tf_crop_and_resize / tf_half_pixel_for_nn, cubic_coeff_a,
 * exclude_outside, axes; no antialias), one scatter-add pass per resized
 * axis in double, with the forward kernel's taps (cpu_resize.c), polling
 * cancellation once per output coordinate. A resized
 * axis's scale is scales' value, or dY's dim / X's dim without scales (the
 * forward's sizes input with the stretch policy). */
static OnyxStatus* resize_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dY = cpu_host->ctx_input(ctx, 0);
  const int32_t type = cpu_host->tensor_elem_type(dY);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY must be float32 or float64");
  char buf[40];
  RzPlan p = {.a = cpu_host->node_attr_float(node, "cubic_coeff_a", -0.75f),
              .exclude_outside = cpu_host->node_attr_int(node, "exclude_outside", 0) != 0};
  nnop_attr_str(node, "mode", "linear", buf, sizeof buf);
  if (!strcmp(buf, "cubic"))
    p.cubic = true;
  else if (strcmp(buf, "linear"))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "mode must be linear or cubic, not '%s'", buf);
  nnop_attr_str(node, "coordinate_transformation_mode", "half_pixel", buf, sizeof buf);
  size_t ci = 0;
  while (ci < CPU_ARRAY_LEN(RZ_COORD_NAMES) && strcmp(buf, RZ_COORD_NAMES[ci]))
    ci++;
  if (ci == CPU_ARRAY_LEN(RZ_COORD_NAMES))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "coordinate_transformation_mode '%s' is not supported", buf);
  p.coord = (RzCoord)ci;
  const size_t r = cpu_host->tensor_rank(dY);
  const int64_t* yd = cpu_host->tensor_dims(dY);
  int64_t xd[CPU_MAX_RANK];
  size_t xr = 0;
  OnyxStatus* st =
      cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "X_shape", xd, CPU_MAX_RANK, &xr);
  if (st) return st;
  if (xr != r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape has %zu values; dY has rank %zu", xr,
                         r);
  /* The resized axes and their scales. */
  bool resized[CPU_MAX_RANK] = {false};
  double scale[CPU_MAX_RANK];
  size_t na = 0;
  const int64_t* axes = cpu_host->node_attr_ints(node, "axes", &na);
  if (!axes) na = r;
  size_t ax_of[CPU_MAX_RANK];
  for (size_t i = 0; i < na; i++) {
    size_t a = i;
    if (axes && !cpu_norm_axis(axes[i], r, false, &a))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                           (long long)axes[i], r);
    if (resized[a]) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %zu is repeated", a);
    resized[a] = true;
    ax_of[i] = a;
  }
  for (size_t a = 0; a < r; a++) {
    if (xd[a] < 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is negative", a);
    if (!resized[a] && xd[a] != yd[a])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "dY's dim %zu (%lld) differs from X's (%lld) on an axis not resized", a,
                           (long long)yd[a], (long long)xd[a]);
    scale[a] = xd[a] ? (double)yd[a] / (double)xd[a] : 1.0;
  }
  const OnyxTensor* tsc = nnop_has_input(ctx, 2) ? cpu_host->ctx_input(ctx, 2) : NULL;
  if (tsc && cpu_host->tensor_elem_count(tsc) > 0) {
    double* sv;
    if ((st = nnop_load_d(ctx, tsc, &sv))) return st;
    if (cpu_host->tensor_elem_count(tsc) != na)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "scales has %zu values, expected %zu",
                           cpu_host->tensor_elem_count(tsc), na);
    for (size_t i = 0; i < na; i++) {
      if (!(sv[i] > 0) || !isfinite(sv[i]))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "scales[%zu] = %g must be positive", i,
                             sv[i]);
      scale[ax_of[i]] = sv[i];
    }
  }
  OnyxTensor* dx;
  if ((st = cpu_host->ctx_output(ctx, 0, xd, r, &dx))) return st;
  size_t nx = 1, ny = 1, big = 1;
  for (size_t a = 0; a < r; a++) {
    nx *= (size_t)xd[a];
    ny *= (size_t)yd[a];
  }
  /* The largest intermediate: the passes run from the last axis to the
   * first, each taking one axis from dY's length to X's. */
  int64_t cur[CPU_MAX_RANK];
  memcpy(cur, yd, r * sizeof *cur);
  big = ny;
  for (size_t a = r; a-- > 0;) {
    if (!resized[a]) continue;
    cur[a] = xd[a];
    size_t c = 1;
    for (size_t i = 0; i < r; i++)
      if (!cpu_mul_size(c, (size_t)cur[i], &c))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the gradient is too large");
    if (c > big) big = c;
  }
  if (!nx) return NULL;
  double* b0 = malloc((big ? big : 1) * sizeof(double));
  double* b1 = malloc((big ? big : 1) * sizeof(double));
  if (!b0 || !b1) {
    free(b0);
    free(b1);
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  to_double(dY, b0, ny);
  memcpy(cur, yd, r * sizeof *cur);
  CpuStop stop = {.ctx = ctx};
  for (size_t a = r; a-- > 0;) {
    if (!resized[a] ||
        (xd[a] == yd[a] && scale[a] == 1.0 && !p.cubic && p.coord != RZ_ALIGN_CORNERS))
      continue;
    size_t n = 1;
    for (size_t i = 0; i < r; i++)
      n *= i == a ? (size_t)xd[a] : (size_t)cur[i];
    memset(b1, 0, (n ? n : 1) * sizeof(double));
    if (n && !rz_pass_t(&p, b0, b1, cur, r, a, xd[a], scale[a], &stop)) {
      free(b0);
      free(b1);
      return cpu_cancelled(ctx, NULL);
    }
    cur[a] = xd[a];
    double* t = b0;
    b0 = b1;
    b1 = t;
  }
  from_double(dx, type, b0, nx);
  free(b0);
  free(b1);
  return NULL;
}

#define SDEF(op, fn, tc)                                                                           \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = TRAINING, .op_type = op, .since_version = 1,   \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = tc,                                      \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .compute = fn                                      \
  }

OnyxStatus* cpu_register_grad_seq(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      SDEF("RNNGrad", seq_grad_compute, TC_T), SDEF("GRUGrad", seq_grad_compute, TC_T),
      SDEF("LSTMGrad", seq_grad_compute, TC_T), SDEF("ResizeGrad", resize_grad_compute, TC_RZ)};
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
