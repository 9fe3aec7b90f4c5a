/* cpu_grad_seq_body.h — the computation of the recurrent backward kernels
 * (RNNGrad, GRUGrad, LSTMGrad of cpu_grad_seq.c, whose header comment gives
 * the method), included there once per element type with SEQ_T (float or
 * double), SEQ_S (the name suffix), SEQ_EXP and SEQ_TANH (the type's exp and
 * tanh) and SEQ_GEMM (cpu_gemm_f32, the packed kernel, or cpu_gemm_f64)
 * defined: a float32 model computes in float32 throughout, as the forward
 * kernels and PyTorch do; a float64 model in float64 (the finite-difference
 * tests' models). SeqCell, SeqArgs (the validated node) and the includes
 * come from cpu_grad_seq.c. */

#define SEQ_CAT2(a, b) a##_##b
#define SEQ_CAT(a, b)  SEQ_CAT2(a, b)
#define SEQ_FN(name)   SEQ_CAT(name, SEQ_S)
/* The names below, one set per element type. */
#define SeqRun       SEQ_FN(SeqRun)
#define SeqWork      SEQ_FN(SeqWork)
#define Bufs         SEQ_FN(Bufs)
#define sigm         SEQ_FN(sigm)
#define mm           SEQ_FN(mm)
#define load         SEQ_FN(load)
#define buf_get      SEQ_FN(buf_get)
#define bufs_free    SEQ_FN(bufs_free)
#define step_time    SEQ_FN(step_time)
#define seq_forward  SEQ_FN(seq_forward)
#define seq_backward SEQ_FN(seq_backward)

static SEQ_T sigm(SEQ_T x) {
  return (SEQ_T)1 / ((SEQ_T)1 + SEQ_EXP(-x));
}

/* n elements of t (of type SEQ_T, as every float input: checked) into dst. */
static void load(const OnyxTensor* t, SEQ_T* dst, size_t n) {
  memcpy(dst, cpu_host->tensor_data(t), n * sizeof(SEQ_T));
}

/* C (m x n) = A (m x k, or k x m when ta) B (k x n) + beta C. */
static void mm(OnyxThreadPool* pool, size_t m, size_t n, size_t k, const SEQ_T* a, size_t lda,
               int ta, const SEQ_T* b, size_t ldb, SEQ_T* c, size_t ldc, double beta) {
  if (!m || !n) return;
  if (!k) {
    if (beta == 0.0)
      for (size_t i = 0; i < m; i++)
        memset(c + i * ldc, 0, n * sizeof(SEQ_T));
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
  SEQ_GEMM(pool, &g);
}

/* The scratch of one run, freed together. */
#define SEQ_BUFS 24
typedef struct Bufs {
  SEQ_T* p[SEQ_BUFS];
  size_t n;
} Bufs;

static SEQ_T* buf_get(Bufs* bf, size_t a, size_t b, size_t c, bool* oom) {
  size_t n;
  if (*oom || !cpu_mul_size(a, b, &n) || !cpu_mul_size(n, c, &n) || bf->n >= SEQ_BUFS) {
    *oom = true;
    return NULL;
  }
  SEQ_T* p = calloc(n ? n : 1, sizeof(SEQ_T));
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
  /* inputs in layout 0 */
  const SEQ_T *x, *w, *r, *bias, *peep, *h0, *c0, *dy, *dyh, *dyc;
  /* outputs (zeroed), layout 0 */
  SEQ_T *dx, *dw, *dr, *db, *dh0, *dc0, *dp;
  OnyxThreadPool* pool;
} SeqRun;

/* Scratch of one direction. */
typedef struct SeqWork {
  SEQ_T *xw, *gates, *hprev, *cprev, *cnew, *rech, *hr, *dg, *dgr, *dgt, *dh, *dc, *dhn, *dcn, *da,
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
  const SEQ_T* W = q->w + d * GH * I;
  const SEQ_T* R = q->r + d * GH * H;
  const SEQ_T* wb = q->bias ? q->bias + d * 2 * GH : NULL;
  const SEQ_T* rb = wb ? wb + GH : NULL;
  const SEQ_T* P = q->peep ? q->peep + d * 3 * H : NULL;
  /* xw = X W^T (+ Wb): W^T through trans_a on a transposed view is not
   * available for B, so W is transposed into tmp first. */
  cpu_nn_transpose(k->tmp, W, GH, I, sizeof(SEQ_T));
  mm(q->pool, q->S * N, GH, I, q->x, I, 0, k->tmp, GH, k->xw, GH, 0.0);
  SEQ_T* hcur = k->dhn; /* the running state (the backward reuses these buffers) */
  SEQ_T* ccur = k->dcn;
  for (size_t b = 0; b < N; b++)
    for (size_t j = 0; j < H; j++) {
      hcur[b * H + j] = q->h0 ? q->h0[(d * N + b) * H + j] : 0;
      ccur[b * H + j] = q->c0 ? q->c0[(d * N + b) * H + j] : 0;
    }
  /* R^T for the per-step products. */
  cpu_nn_transpose(k->tmp, R, GH, H, sizeof(SEQ_T));
  const bool split = q->cell == SEQ_GRU && !q->lbr;
  const size_t n1 = split ? 2 * H : GH;
  size_t polled = 0;
  for (size_t s = 0; s < q->S; s++) {
    if (cpu_stop_poll(stop, &polled, N * GH * (H + 1) + 1)) return false;
    SEQ_T* hp = k->hprev + s * N * H;
    SEQ_T* cp = k->cprev + s * N * H;
    SEQ_T* gs = k->gates + s * N * GH;
    memcpy(hp, hcur, N * H * sizeof(SEQ_T));
    memcpy(cp, ccur, N * H * sizeof(SEQ_T));
    /* hr[:, 0..n1) = H_{t-1} R^T */
    mm(q->pool, N, n1, H, hp, H, 0, k->tmp, GH, k->hr, GH, 0.0);
    for (size_t b = 0; b < N; b++) {
      const int64_t t = step_time(q, rev, s, b);
      if (t < 0) continue;
      const SEQ_T* xg = k->xw + ((size_t)t * N + b) * GH;
      SEQ_T* hr = k->hr + b * GH;
      SEQ_T* g = gs + b * GH;
      const SEQ_T* hpb = hp + b * H;
      SEQ_T* hc = hcur + b * H;
      SEQ_T* cc = ccur + b * H;
      for (size_t j = 0; j < n1; j++)
        g[j] = xg[j] + hr[j] + (wb ? wb[j] + rb[j] : 0);
      if (q->cell == SEQ_RNN) {
        for (size_t j = 0; j < H; j++)
          hc[j] = g[j] = SEQ_TANH(g[j]);
      } else if (q->cell == SEQ_GRU) {
        for (size_t j = 0; j < 2 * H; j++)
          g[j] = sigm(g[j]);
        SEQ_T* rh = k->rech + (s * N + b) * H;
        if (split) {
          /* (r ⊙ H_{t-1}) R_h^T */
          for (size_t j = 0; j < H; j++) {
            SEQ_T acc = 0;
            for (size_t m = 0; m < H; m++)
              acc += g[H + m] * hpb[m] * k->tmp[m * GH + 2 * H + j];
            rh[j] = acc + (rb ? rb[2 * H + j] : 0);
          }
          for (size_t j = 0; j < H; j++)
            g[2 * H + j] = SEQ_TANH(xg[2 * H + j] + (wb ? wb[2 * H + j] : 0) + rh[j]);
        } else {
          /* g[2H..3H) holds xw + hr + Wb + Rb; split it back apart. */
          for (size_t j = 0; j < H; j++) {
            rh[j] = hr[2 * H + j] + (rb ? rb[2 * H + j] : 0);
            g[2 * H + j] = SEQ_TANH(xg[2 * H + j] + (wb ? wb[2 * H + j] : 0) + g[H + j] * rh[j]);
          }
        }
        for (size_t j = 0; j < H; j++)
          hc[j] = (1 - g[j]) * g[2 * H + j] + g[j] * hpb[j];
      } else {
        const SEQ_T* cpb = cp + b * H;
        SEQ_T* cn = k->cnew + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          SEQ_T gi = g[j], gf = g[2 * H + j];
          if (P) {
            gi += P[j] * cpb[j];
            gf += P[2 * H + j] * cpb[j];
          }
          g[j] = sigm(gi);
          g[2 * H + j] = sigm(gf);
          g[3 * H + j] = SEQ_TANH(g[3 * H + j]);
          cn[j] = g[2 * H + j] * cpb[j] + g[j] * g[3 * H + j];
          SEQ_T go = g[H + j] + (P ? P[H + j] * cn[j] : 0);
          g[H + j] = sigm(go);
          cc[j] = cn[j];
          hc[j] = g[H + j] * SEQ_TANH(cn[j]);
        }
      }
    }
  }
  return true;
}

/* The backward pass of direction d (after seq_forward). */
static bool seq_backward(const SeqRun* q, SeqWork* k, size_t d, bool rev, CpuStop* stop) {
  const size_t N = q->N, H = q->H, GH = q->GH, I = q->I, S = q->S;
  const SEQ_T* W = q->w + d * GH * I;
  const SEQ_T* R = q->r + d * GH * H;
  const SEQ_T* P = q->peep ? q->peep + d * 3 * H : NULL;
  SEQ_T* dR = q->dr + d * GH * H;
  SEQ_T* dWb = q->db + d * 2 * GH;
  SEQ_T* dRb = dWb + GH;
  SEQ_T* dP = q->dp + d * 3 * H;
  const bool split = q->cell == SEQ_GRU && !q->lbr;
  const size_t n1 = split ? 2 * H : GH;
  SEQ_T* dh = k->dh;
  SEQ_T* dc = k->dc;
  for (size_t i = 0; i < N * H; i++) {
    dh[i] = q->dyh ? q->dyh[d * N * H + i] : 0;
    dc[i] = q->dyc ? q->dyc[d * N * H + i] : 0;
  }
  memset(k->dg, 0, S * N * GH * sizeof(SEQ_T));
  size_t polled = 0;
  for (size_t s = S; s-- > 0;) {
    if (cpu_stop_poll(stop, &polled, N * GH * (H + 1) + 1)) return false;
    const SEQ_T* hp = k->hprev + s * N * H;
    const SEQ_T* cp = k->cprev + s * N * H;
    const SEQ_T* gs = k->gates + s * N * GH;
    memset(k->dgr, 0, N * GH * sizeof(SEQ_T));
    for (size_t b = 0; b < N; b++) {
      const int64_t t = step_time(q, rev, s, b);
      SEQ_T* dhb = dh + b * H;
      SEQ_T* dhn = k->dhn + b * H;
      SEQ_T* dcb = dc + b * H;
      SEQ_T* dcn = k->dcn + b * H;
      if (t < 0) {
        /* inactive: the state passed through */
        memcpy(dhn, dhb, H * sizeof(SEQ_T));
        memcpy(dcn, dcb, H * sizeof(SEQ_T));
        continue;
      }
      const SEQ_T* dyr = q->dy ? q->dy + (((size_t)t * q->nd + d) * N + b) * H : NULL;
      if (dyr)
        for (size_t j = 0; j < H; j++)
          dhb[j] += dyr[j];
      const SEQ_T* g = gs + b * GH;
      const SEQ_T* hpb = hp + b * H;
      SEQ_T* dgx = k->dg + ((size_t)t * N + b) * GH;
      SEQ_T* dgr = k->dgr + b * GH;
      memset(dhn, 0, H * sizeof(SEQ_T));
      memset(dcn, 0, H * sizeof(SEQ_T));
      if (q->cell == SEQ_RNN) {
        for (size_t j = 0; j < H; j++)
          dgx[j] = dgr[j] = dhb[j] * (1 - g[j] * g[j]);
      } else if (q->cell == SEQ_GRU) {
        const SEQ_T* rh = k->rech + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          const SEQ_T z = g[j], hh = g[2 * H + j];
          dgx[j] = dgr[j] = dhb[j] * (hpb[j] - hh) * z * (1 - z);
          const SEQ_T dhp = dhb[j] * (1 - z) * (1 - hh * hh);
          dgx[2 * H + j] = dhp;
          /* linear_before_reset: h~ = SEQ_TANH(xw + r ⊙ (H R_h^T + Rb_h)) */
          dgr[2 * H + j] = split ? dhp : dhp * g[H + j];
          dhn[j] = dhb[j] * z;
          if (!split) {
            const SEQ_T dr = dhp * rh[j];
            dgx[H + j] = dgr[H + j] = dr * g[H + j] * (1 - g[H + j]);
          }
        }
      } else {
        const SEQ_T* cpb = cp + b * H;
        const SEQ_T* cn = k->cnew + (s * N + b) * H;
        for (size_t j = 0; j < H; j++) {
          const SEQ_T ig = g[j], og = g[H + j], fg = g[2 * H + j], cg = g[3 * H + j];
          const SEQ_T tc = SEQ_TANH(cn[j]);
          const SEQ_T dop = dhb[j] * tc * og * (1 - og);
          SEQ_T dcj = dcb[j] + dhb[j] * og * (1 - tc * tc) + (P ? dop * P[H + j] : 0);
          const SEQ_T dip = dcj * cg * ig * (1 - ig);
          const SEQ_T dfp = dcj * cpb[j] * fg * (1 - fg);
          const SEQ_T dcp = dcj * ig * (1 - cg * cg);
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
        const SEQ_T* g = gs + b * GH;
        const SEQ_T* hpb = hp + b * H;
        SEQ_T* dgx = k->dg + ((size_t)t * N + b) * GH;
        SEQ_T* dgr = k->dgr + b * GH;
        SEQ_T* a = k->tmp + b * H;
        for (size_t j = 0; j < H; j++) {
          const SEQ_T da = k->da[b * H + j];
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
    SEQ_T* sw = dh;
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

/* The node's gradients: the inputs in layout 0, per direction the forward
 * pass recomputed and the backward pass, the outputs in the node's layout. */
static OnyxStatus* SEQ_FN(seq_run)(OnyxKernelContext* ctx, const SeqArgs* a) {
  const OnyxNode* node = a->node;
  const SeqCell cell = a->cell;
  const size_t nd = a->nd;
  const bool reverse = a->reverse;
  const int64_t layout = a->layout, S = (int64_t)a->S;
  const int64_t* xd = a->xd;
  const int64_t *wdims = a->wdims, *rdims = a->rdims, *bdims = a->bdims, *hdims = a->hdims,
                *pdims = a->pdims;
  const OnyxTensor *X = a->X, *Wt = a->W, *Rt = a->R, *Bt = a->B, *Lt = a->lens, *H0 = a->h0,
                   *C0 = a->c0, *Pt = a->p, *dY = a->dy, *dYh = a->dyh, *dYc = a->dyc;
  SeqRun q = {.cell = cell,
              .lbr = a->lbr,
              .S = a->S,
              .N = a->N,
              .I = a->I,
              .H = a->H,
              .G = a->G,
              .GH = a->GH,
              .nd = nd,
              .reverse = reverse,
              .pool = a->pool};
  Bufs bf = {0};
  bool oom = false;
  const size_t SN = q.S * q.N, NH = q.N * q.H;
  int64_t* lens = malloc((q.N ? q.N : 1) * sizeof *lens);
  oom = !lens;
  SEQ_T* x = buf_get(&bf, SN, q.I, 1, &oom);
  SEQ_T* w = buf_get(&bf, nd, q.GH, q.I, &oom);
  SEQ_T* r = buf_get(&bf, nd, q.GH, q.H, &oom);
  SEQ_T* bias = Bt ? buf_get(&bf, nd, 2, q.GH, &oom) : NULL;
  SEQ_T* peep = Pt ? buf_get(&bf, nd, 3, q.H, &oom) : NULL;
  SEQ_T* h0 = H0 ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  SEQ_T* c0 = C0 ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  SEQ_T* dy = dY ? buf_get(&bf, SN, nd, q.H, &oom) : NULL;
  SEQ_T* dyh = dYh ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  SEQ_T* dyc = dYc ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  SEQ_T* tmpin = buf_get(&bf, SN + q.N, nd, q.H > q.I ? q.H : q.I, &oom);
  q.dx = buf_get(&bf, SN, q.I, 1, &oom);
  q.dw = buf_get(&bf, nd, q.GH, q.I, &oom);
  q.dr = buf_get(&bf, nd, q.GH, q.H, &oom);
  q.db = buf_get(&bf, nd, 2, q.GH, &oom);
  q.dh0 = buf_get(&bf, nd, NH, 1, &oom);
  q.dc0 = cell == SEQ_LSTM ? buf_get(&bf, nd, NH, 1, &oom) : NULL;
  q.dp = buf_get(&bf, nd, 3, q.H, &oom);
  SeqWork k = {0};
  SEQ_T* work = NULL;
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
  if (!oom && !big && total < SIZE_MAX / sizeof(SEQ_T))
    work = malloc((total ? total : 1) * sizeof(SEQ_T));
  if (oom || !work) {
    free(work);
    free(lens);
    bufs_free(&bf);
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory for the recurrent gradient");
  }
  SEQ_T* wp = work;
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
  memset(work, 0, total * sizeof(SEQ_T));

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
    /* Inputs in layout 0. */
    if (layout) {
      load(X, tmpin, SN * q.I);
      for (size_t b = 0; b < q.N; b++)
        for (size_t t = 0; t < q.S; t++)
          memcpy(x + (t * q.N + b) * q.I, tmpin + (b * q.S + t) * q.I, q.I * sizeof(SEQ_T));
    } else {
      load(X, x, SN * q.I);
    }
    load(Wt, w, nd * q.GH * q.I);
    load(Rt, r, nd * q.GH * q.H);
    if (Bt) load(Bt, bias, nd * 2 * q.GH);
    if (Pt) load(Pt, peep, nd * 3 * q.H);
    const OnyxTensor* states[] = {H0, C0, dYh, dYc};
    SEQ_T* sdst[] = {h0, c0, dyh, dyc};
    for (size_t i = 0; i < 4; i++) {
      if (!states[i]) continue;
      if (!layout) {
        load(states[i], sdst[i], nd * NH);
        continue;
      }
      load(states[i], tmpin, nd * NH);
      for (size_t b = 0; b < q.N; b++)
        for (size_t e = 0; e < nd; e++)
          memcpy(sdst[i] + (e * q.N + b) * q.H, tmpin + (b * nd + e) * q.H, q.H * sizeof(SEQ_T));
    }
    if (dY) {
      if (!layout) {
        load(dY, dy, SN * nd * q.H);
      } else {
        load(dY, tmpin, SN * nd * q.H);
        for (size_t b = 0; b < q.N; b++)
          for (size_t t = 0; t < q.S; t++)
            for (size_t e = 0; e < nd; e++)
              memcpy(dy + ((t * nd + e) * q.N + b) * q.H, tmpin + ((b * q.S + t) * nd + e) * q.H,
                     q.H * sizeof(SEQ_T));
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
    const SEQ_T* src[7] = {q.dx, q.dw, q.dr, q.db, q.dh0, q.dc0, q.dp};
    const size_t count[7] = {SN * q.I, nd * q.GH * q.I, nd * q.GH * q.H, nd * 2 * q.GH,
                             nd * NH,  nd * NH,         nd * 3 * q.H};
    const size_t n_out = cell == SEQ_LSTM ? 7 : 5;
    for (size_t o = 0; o < n_out && !st; o++) {
      if (!nnop_has_output(node, o)) continue;
      OnyxTensor* out;
      if ((st = cpu_host->ctx_output(ctx, o, dims[o], ranks[o], &out))) break;
      const SEQ_T* v = src[o];
      if (layout && o == 0) {
        for (size_t b = 0; b < q.N; b++)
          for (size_t t = 0; t < q.S; t++)
            memcpy(tmpin + (b * q.S + t) * q.I, q.dx + (t * q.N + b) * q.I, q.I * sizeof(SEQ_T));
        v = tmpin;
      } else if (layout && (o == 4 || o == 5)) {
        for (size_t b = 0; b < q.N; b++)
          for (size_t e = 0; e < nd; e++)
            memcpy(tmpin + (b * nd + e) * q.H, src[o] + (e * q.N + b) * q.H, q.H * sizeof(SEQ_T));
        v = tmpin;
      }
      memcpy(cpu_host->tensor_mutable_data(out), v, count[o] * sizeof(SEQ_T));
    }
  }
  free(work);
  free(lens);
  bufs_free(&bf);
  return st;
}

#undef SeqRun
#undef SeqWork
#undef Bufs
#undef sigm
#undef mm
#undef load
#undef buf_get
#undef bufs_free
#undef step_time
#undef seq_forward
#undef seq_backward
#undef SEQ_FN
#undef SEQ_CAT
#undef SEQ_CAT2
