/* cpu_rnn.c — RNN, GRU and LSTM (opsets 1..22): every direction, layout 0
 * and 1, optional bias, sequence_lens and initial states, LSTM peepholes,
 * input_forget and clip, GRU linear_before_reset, and every activation
 * function of the spec with its alpha/beta.
 *
 * The GEMMs run in fp32 (cpu_gemm_f32) for float32, float16 and bfloat16
 * and in fp64 for float64; states and gate math are kept in double. Per
 * direction, the input projection X * W^T for all time steps is one GEMM;
 * each step then adds H_{t-1} * R^T (one GEMM over the batch) and applies
 * the gates. A batch
 * entry past its sequence length keeps its state and writes zeros to Y. */
#include "cpu_nn.h"
#include "cpu_nn_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum Act {
  ACT_RELU,
  ACT_TANH,
  ACT_SIGMOID,
  ACT_AFFINE,
  ACT_LEAKYRELU,
  ACT_THRESHOLDEDRELU,
  ACT_SCALEDTANH,
  ACT_HARDSIGMOID,
  ACT_ELU,
  ACT_SOFTSIGN,
  ACT_SOFTPLUS
} Act;

static const struct {
  const char* name;
  int uses_alpha, uses_beta;
  float alpha, beta;
} ACTS[] = {
    {"Relu", 0, 0, 0, 0},
    {"Tanh", 0, 0, 0, 0},
    {"Sigmoid", 0, 0, 0, 0},
    {"Affine", 1, 1, 1.0f, 0.0f},
    {"LeakyRelu", 1, 0, 0.01f, 0},
    {"ThresholdedRelu", 1, 0, 1.0f, 0},
    {"ScaledTanh", 1, 1, 1.0f, 1.0f},
    {"HardSigmoid", 1, 1, 0.2f, 0.5f},
    {"Elu", 1, 0, 1.0f, 0},
    {"Softsign", 0, 0, 0, 0},
    {"Softplus", 0, 0, 0, 0},
};

typedef struct ActFn {
  Act act;
  double alpha, beta;
} ActFn;

static double act_apply(const ActFn* f, double x) {
  switch (f->act) {
  case ACT_RELU:
    return x > 0 ? x : 0;
  case ACT_TANH:
    return tanh(x);
  case ACT_SIGMOID:
    return 1.0 / (1.0 + exp(-x));
  case ACT_AFFINE:
    return f->alpha * x + f->beta;
  case ACT_LEAKYRELU:
    return x >= 0 ? x : f->alpha * x;
  case ACT_THRESHOLDEDRELU:
    return x > f->alpha ? x : 0;
  case ACT_SCALEDTANH:
    return f->alpha * tanh(f->beta * x);
  case ACT_HARDSIGMOID: {
    const double v = f->alpha * x + f->beta;
    return v < 0 ? 0 : (v > 1 ? 1 : v);
  }
  case ACT_ELU:
    return x >= 0 ? x : f->alpha * (exp(x) - 1);
  case ACT_SOFTSIGN:
    return x / (1 + fabs(x));
  case ACT_SOFTPLUS:
    return log1p(exp(-fabs(x))) + (x > 0 ? x : 0);
  }
  return x;
}

typedef enum Cell { CELL_RNN, CELL_GRU, CELL_LSTM } Cell;

#define MAX_ACTS 6

typedef struct RnnState {
  const OnyxNode* node;
  Cell cell;
  size_t gates, n_acts_per_dir;
  int64_t hidden;
  int num_dir;  /* 1 or 2 */
  bool reverse; /* direction "reverse" (num_dir 1) */
  int layout;
  double clip; /* <= 0: none */
  bool linear_before_reset, input_forget;
  ActFn acts[MAX_ACTS];
} RnnState;

static OnyxStatus* rnn_create_impl(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                   void** state) {
  (void)ep;
  RnnState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *state = s;
  s->node = node;
  s->cell = (Cell)(intptr_t)user_data;
  s->gates = s->cell == CELL_RNN ? 1 : (s->cell == CELL_GRU ? 3 : 4);
  s->n_acts_per_dir = s->cell == CELL_RNN ? 1 : (s->cell == CELL_GRU ? 2 : 3);
  s->hidden = cpu_host->node_attr_int(node, "hidden_size", 0);
  if (s->hidden < 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "hidden_size must be >= 1, got %lld",
                     (long long)s->hidden);
  char buf[32];
  nnop_attr_str(node, "direction", "forward", buf, sizeof buf);
  if (!strcmp(buf, "forward")) {
    s->num_dir = 1;
  } else if (!strcmp(buf, "reverse")) {
    s->num_dir = 1;
    s->reverse = true;
  } else if (!strcmp(buf, "bidirectional")) {
    s->num_dir = 2;
  } else {
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown direction '%s'", buf);
  }
  s->layout = (int)cpu_host->node_attr_int(node, "layout", 0);
  if (s->layout != 0 && s->layout != 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "layout must be 0 or 1, got %d", s->layout);
  s->clip = cpu_host->node_attr_type(node, "clip") != ONYX_ATTR_UNDEFINED
                ? cpu_host->node_attr_float(node, "clip", 0)
                : 0;
  s->linear_before_reset = cpu_host->node_attr_int(node, "linear_before_reset", 0) != 0;
  s->input_forget = cpu_host->node_attr_int(node, "input_forget", 0) != 0;
  /* Activations: defaults per cell, for each direction. */
  const size_t want = s->n_acts_per_dir * (size_t)s->num_dir;
  size_t na = 0, nal = 0, nbe = 0;
  const char* const* names = cpu_host->node_attr_strings(node, "activations", &na);
  const float* alphas = cpu_host->node_attr_floats(node, "activation_alpha", &nal);
  const float* betas = cpu_host->node_attr_floats(node, "activation_beta", &nbe);
  if (names && na != want)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "activations has %zu names, expected %zu", na,
                     want);
  size_t ai = 0, bi = 0;
  for (size_t i = 0; i < want; i++) {
    const char* nm;
    if (names) {
      nm = names[i];
    } else {
      const size_t k = i % s->n_acts_per_dir;
      nm = s->cell == CELL_RNN ? "Tanh" : (k == 0 ? "Sigmoid" : "Tanh");
    }
    int found = -1;
    for (size_t k = 0; k < CPU_ARRAY_LEN(ACTS); k++)
      if (!strcasecmp(nm, ACTS[k].name)) found = (int)k;
    if (found < 0) return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown activation '%s'", nm);
    ActFn* f = &s->acts[i];
    f->act = (Act)found;
    f->alpha = ACTS[found].alpha;
    f->beta = ACTS[found].beta;
    if (ACTS[found].uses_alpha && alphas && ai < nal) f->alpha = alphas[ai++];
    if (ACTS[found].uses_beta && betas && bi < nbe) f->beta = betas[bi++];
  }
  return NULL;
}

static double clipv(const RnnState* s, double v) {
  if (s->clip > 0) return v < -s->clip ? -s->clip : (v > s->clip ? s->clip : v);
  return v;
}

static OnyxStatus* rnn_compute(void* state, OnyxKernelContext* ctx) {
  const RnnState* s = state;
  const OnyxNode* node = s->node;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* rt = cpu_host->ctx_input(ctx, 2);
  if (cpu_host->tensor_rank(x) != 3)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "input X must be 3-D, got rank %zu",
                     cpu_host->tensor_rank(x));
  const int64_t* xd = cpu_host->tensor_dims(x);
  const size_t seq = (size_t)(s->layout ? xd[1] : xd[0]),
               batch = (size_t)(s->layout ? xd[0] : xd[1]);
  const size_t in = (size_t)xd[2], H = (size_t)s->hidden, G = s->gates, nd = (size_t)s->num_dir;
  size_t gh_n, state_sz, bias_sz;
  if (!cpu_mul_size(G, H, &gh_n) || gh_n > (size_t)INT64_MAX ||
      !cpu_mul_size(gh_n, 2 * nd, &bias_sz) || !cpu_mul_size(nd * batch, H, &state_sz) ||
      !cpu_mul_size(state_sz, sizeof(double), &state_sz))
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "integer overflow: hidden_size %zu with %zu gates, %zu directions and batch "
                     "%zu",
                     H, G, nd, batch);
  const int64_t* wd = cpu_host->tensor_dims(w);
  const int64_t* rd = cpu_host->tensor_dims(rt);
  if (cpu_host->tensor_rank(w) != 3 || wd[0] != (int64_t)nd || wd[1] != (int64_t)(G * H) ||
      wd[2] != (int64_t)in)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "W must be [%zu, %zu, %zu]", nd, G * H, in);
  if (cpu_host->tensor_rank(rt) != 3 || rd[0] != (int64_t)nd || rd[1] != (int64_t)(G * H) ||
      rd[2] != (int64_t)H)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "R must be [%zu, %zu, %zu]", nd, G * H, H);
  OnyxStatus* st;
  double *xv, *wv, *rv, *bv = NULL, *h0 = NULL, *c0 = NULL, *pv = NULL;
  int64_t* lens;
  if ((st = nnop_load_d(ctx, x, &xv)) || (st = nnop_load_d(ctx, w, &wv)) ||
      (st = nnop_load_d(ctx, rt, &rv)) ||
      (st = nnop_scratch(ctx, batch * sizeof(int64_t), (void**)&lens)))
    return st;
  if (nnop_has_input(ctx, 3)) {
    const OnyxTensor* b = cpu_host->ctx_input(ctx, 3);
    if (cpu_host->tensor_elem_count(b) != nd * 2 * G * H)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "B must be [%zu, %zu]", nd, 2 * G * H);
    if ((st = nnop_load_d(ctx, b, &bv))) return st;
  }
  for (size_t b = 0; b < batch; b++)
    lens[b] = (int64_t)seq;
  if (nnop_has_input(ctx, 4)) {
    const OnyxTensor* sl = cpu_host->ctx_input(ctx, 4);
    if (cpu_host->tensor_elem_count(sl) != batch)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "sequence_lens must have %zu values", batch);
    for (size_t b = 0; b < batch; b++) {
      CpuNum v;
      cpu_num_load(cpu_host->tensor_elem_type(sl), cpu_host->tensor_data(sl), b, &v);
      lens[b] = v.v.i;
      if (lens[b] < 0 || lens[b] > (int64_t)seq)
        return cpu_error(node, ONYX_INVALID_ARGUMENT,
                         "sequence_lens[%zu] = %lld is outside [0, %zu]", b, (long long)lens[b],
                         seq);
    }
  }
  /* Initial states in [dir][batch][H] order whatever the layout. */
  const size_t state_n = nd * batch * H;
  for (size_t which = 0; which < (s->cell == CELL_LSTM ? 2u : 1u); which++) {
    const size_t idx = which == 0 ? 5 : 6;
    if (!nnop_has_input(ctx, idx)) continue;
    const OnyxTensor* t = cpu_host->ctx_input(ctx, idx);
    if (cpu_host->tensor_elem_count(t) != state_n)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s must have %zu values",
                       which ? "initial_c" : "initial_h", state_n);
    double *raw, *dst;
    if ((st = nnop_load_d(ctx, t, &raw)) ||
        (st = nnop_scratch(ctx, state_n * sizeof(double), (void**)&dst)))
      return st;
    for (size_t d = 0; d < nd; d++)
      for (size_t b = 0; b < batch; b++)
        memcpy(dst + (d * batch + b) * H, raw + (s->layout ? (b * nd + d) : (d * batch + b)) * H,
               H * sizeof(double));
    *(which ? &c0 : &h0) = dst;
  }
  if (s->cell == CELL_LSTM && nnop_has_input(ctx, 7)) {
    const OnyxTensor* p = cpu_host->ctx_input(ctx, 7);
    if (cpu_host->tensor_elem_count(p) != nd * 3 * H)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "P must be [%zu, %zu]", nd, 3 * H);
    if ((st = nnop_load_d(ctx, p, &pv))) return st;
  }
  /* X as [seq][batch][in]. */
  double* xs = xv;
  if (s->layout) {
    if ((st = nnop_scratch(ctx, seq * batch * in * sizeof(double), (void**)&xs))) return st;
    for (size_t b = 0; b < batch; b++)
      for (size_t t = 0; t < seq; t++)
        memcpy(xs + (t * batch + b) * in, xv + (b * seq + t) * in, in * sizeof(double));
  }
  /* float32, float16, bfloat16: the GEMMs run in fp32, on float copies of
   * W, R and X; float64: in fp64. Gate math is in double either way. */
  const bool f32 = cpu_host->tensor_elem_type(x) != ONYX_ELEM_FLOAT64;
  const size_t gh = G * H;
  /* GRU without linear_before_reset multiplies (r ⊙ h) by R_h in the gate
   * loop, reading R^T in double. */
  const bool need_rtr = !f32 || (s->cell == CELL_GRU && !s->linear_before_reset);
  double *yall, *hfin, *cfin, *wt = NULL, *rtr = NULL, *xw = NULL, *hr = NULL, *hcur, *ccur, *hprev,
                              *rgate, *xrow = NULL, *hrow = NULL;
  float *w_f = NULL, *r_f = NULL, *r_packed = NULL, *xs_f = NULL, *xw_f = NULL, *hprev_f = NULL,
        *hr_f = NULL;
  if ((st = nnop_scratch(ctx, seq * nd * batch * H * sizeof(double), (void**)&yall)) ||
      (st = nnop_scratch(ctx, state_n * sizeof(double), (void**)&hfin)) ||
      (st = nnop_scratch(ctx, state_n * sizeof(double), (void**)&cfin)) ||
      (st = nnop_scratch(ctx, batch * H * sizeof(double), (void**)&hcur)) ||
      (st = nnop_scratch(ctx, batch * H * sizeof(double), (void**)&ccur)) ||
      (st = nnop_scratch(ctx, batch * H * sizeof(double), (void**)&hprev)) ||
      (st = nnop_scratch(ctx, H * sizeof(double), (void**)&rgate)) ||
      (need_rtr && (st = nnop_scratch(ctx, H * gh * sizeof(double), (void**)&rtr))))
    return st;
  if (f32) {
    void* raw_packed;
    if ((st = nnop_scratch(ctx, in * gh * sizeof(float), (void**)&w_f)) ||
        (st = nnop_scratch(ctx, gh * H * sizeof(float), (void**)&r_f)) ||
        (st = nnop_scratch(ctx, cpu_gemm_packed_b_floats(H, gh) * sizeof(float) + 64,
                           &raw_packed)) ||
        (st = nnop_scratch(ctx, seq * batch * in * sizeof(float), (void**)&xs_f)) ||
        (st = nnop_scratch(ctx, seq * batch * gh * sizeof(float), (void**)&xw_f)) ||
        (st = nnop_scratch(ctx, H * batch * sizeof(float), (void**)&hprev_f)) ||
        (st = nnop_scratch(ctx, gh * batch * sizeof(float), (void**)&hr_f)) ||
        (st = nnop_scratch(ctx, gh * sizeof(double), (void**)&xrow)) ||
        (st = nnop_scratch(ctx, gh * sizeof(double), (void**)&hrow)))
      return st;
    /* Packed operands want 64-byte alignment. */
    r_packed = (float*)(((uintptr_t)raw_packed + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < seq * batch * in; i++)
      xs_f[i] = (float)xs[i];
  } else if ((st = nnop_scratch(ctx, in * gh * sizeof(double), (void**)&wt)) ||
             (st = nnop_scratch(ctx, seq * batch * gh * sizeof(double), (void**)&xw)) ||
             (st = nnop_scratch(ctx, batch * gh * sizeof(double), (void**)&hr))) {
    return st;
  }
  memset(yall, 0, seq * nd * batch * H * sizeof(double));
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  /* the sequence length and the hidden size set the work: polled per step */
  CpuStop stop = {.ctx = ctx};
  size_t polled = 0;
  for (size_t d = 0; d < nd; d++) {
    const bool rev = s->reverse || d == 1;
    const ActFn* acts = s->acts + d * s->n_acts_per_dir;
    const double* wd_ = wv + d * gh * in;
    const double* rd_ = rv + d * gh * H;
    if (need_rtr) cpu_nn_transpose(rtr, rd_, gh, H, sizeof(double));
    const double* wb = bv ? bv + d * 2 * gh : NULL;
    const double* rb = bv ? wb + gh : NULL;
    const double* peep = pv ? pv + d * 3 * H : NULL;
    /* The input projection of every step: X (seq*batch x in) * W^T. */
    CpuGemm gx = {.m = seq * batch, .n = gh, .k = in, .lda = in, .ldb = gh, .ldc = gh, .alpha = 1};
    if (f32) {
      /* W and R are used as stored (gh x in, gh x H) through trans_b; R is
       * packed once for all the steps. */
      for (size_t i = 0; i < gh * in; i++)
        w_f[i] = (float)wd_[i];
      for (size_t i = 0; i < gh * H; i++)
        r_f[i] = (float)rd_[i];
      cpu_gemm_pack_b(pool, r_packed, r_f, H, 1, H, gh);
      gx.a = xs_f;
      gx.b = w_f;
      gx.ldb = in;
      gx.trans_b = 1;
      gx.c = xw_f;
      if (seq * batch > 0) cpu_gemm_f32(pool, &gx);
    } else {
      cpu_nn_transpose(wt, wd_, gh, in, sizeof(double));
      gx.a = xs;
      gx.b = wt;
      gx.c = xw;
      if (seq * batch > 0) cpu_gemm_f64(pool, &gx);
    }
    for (size_t b = 0; b < batch; b++)
      for (size_t j = 0; j < H; j++) {
        hcur[b * H + j] = h0 ? h0[(d * batch + b) * H + j] : 0;
        ccur[b * H + j] = c0 ? c0[(d * batch + b) * H + j] : 0;
      }
    for (size_t step = 0; step < seq; step++) {
      if (cpu_stop_poll(&stop, &polled, batch * gh * (H + 1) + 1)) return cpu_cancelled(ctx, NULL);
      memcpy(hprev, hcur, batch * H * sizeof(double));
      if (f32) {
        for (size_t i = 0; i < batch * H; i++)
          hprev_f[i] = (float)hprev[i];
        CpuGemm gm = {.m = batch,
                      .n = gh,
                      .k = H,
                      .a = hprev_f,
                      .lda = H,
                      .packed_b = r_packed,
                      .c = hr_f,
                      .ldc = gh,
                      .alpha = 1,
                      .beta = 0};
        cpu_gemm_f32(pool, &gm);
      } else {
        CpuGemm gm = {.m = batch,
                      .n = gh,
                      .k = H,
                      .a = hprev,
                      .lda = H,
                      .b = rtr,
                      .ldb = gh,
                      .c = hr,
                      .ldc = gh,
                      .alpha = 1,
                      .beta = 0};
        cpu_gemm_f64(pool, &gm);
      }
      for (size_t b = 0; b < batch; b++) {
        if ((int64_t)step >= lens[b]) continue;
        const size_t t = rev ? (size_t)lens[b] - 1 - step : step;
        const double* xg;
        const double* hg;
        if (f32) {
          const float* xr = xw_f + (t * batch + b) * gh;
          const float* hrr = hr_f + b * gh;
          for (size_t i = 0; i < gh; i++) {
            xrow[i] = xr[i];
            hrow[i] = hrr[i];
          }
          xg = xrow;
          hg = hrow;
        } else {
          xg = xw + (t * batch + b) * gh;
          hg = hr + b * gh;
        }
        double* hc = hcur + b * H;
        double* cc = ccur + b * H;
        const double* hp = hprev + b * H;
        if (s->cell == CELL_GRU)
          for (size_t k = 0; k < H; k++)
            rgate[k] = act_apply(
                &acts[0], clipv(s, xg[H + k] + hg[H + k] + (wb ? wb[H + k] + rb[H + k] : 0)));
        for (size_t j = 0; j < H; j++) {
          double nh;
          if (s->cell == CELL_RNN) {
            double v = xg[j] + hg[j] + (wb ? wb[j] + rb[j] : 0);
            nh = act_apply(&acts[0], clipv(s, v));
          } else if (s->cell == CELL_GRU) {
            /* Gate order z, r, h. */
            const double z =
                act_apply(&acts[0], clipv(s, xg[j] + hg[j] + (wb ? wb[j] + rb[j] : 0)));
            const double r = act_apply(
                &acts[0], clipv(s, xg[H + j] + hg[H + j] + (wb ? wb[H + j] + rb[H + j] : 0)));
            double hpre;
            if (s->linear_before_reset) {
              hpre = xg[2 * H + j] + (wb ? wb[2 * H + j] : 0) +
                     r * (hg[2 * H + j] + (rb ? rb[2 * H + j] : 0));
            } else {
              /* (r ⊙ H_{t-1}) R_h^T: the recurrent product of the gated state. */
              double acc = 0;
              for (size_t k = 0; k < H; k++)
                acc += rgate[k] * hp[k] * rtr[k * gh + 2 * H + j];
              hpre = xg[2 * H + j] + (wb ? wb[2 * H + j] + rb[2 * H + j] : 0) + acc;
            }
            const double hh = act_apply(&acts[1], clipv(s, hpre));
            nh = (1 - z) * hh + z * hp[j];
          } else {
            /* Gate order i, o, f, c; peepholes P = [Pi, Po, Pf]. */
            const double cp = cc[j];
            double gi = xg[j] + hg[j] + (wb ? wb[j] + rb[j] : 0);
            double go = xg[H + j] + hg[H + j] + (wb ? wb[H + j] + rb[H + j] : 0);
            double gf = xg[2 * H + j] + hg[2 * H + j] + (wb ? wb[2 * H + j] + rb[2 * H + j] : 0);
            double gc = xg[3 * H + j] + hg[3 * H + j] + (wb ? wb[3 * H + j] + rb[3 * H + j] : 0);
            if (peep) {
              gi += peep[j] * cp;
              gf += peep[2 * H + j] * cp;
            }
            const double ig = act_apply(&acts[0], clipv(s, gi));
            const double fg = s->input_forget ? 1 - ig : act_apply(&acts[0], clipv(s, gf));
            const double cg = act_apply(&acts[1], clipv(s, gc));
            const double cn = fg * cp + ig * cg;
            if (peep) go += peep[H + j] * cn;
            const double og = act_apply(&acts[0], clipv(s, go));
            cc[j] = cn;
            nh = og * act_apply(&acts[2], cn);
          }
          hc[j] = nh;
        }
        memcpy(yall + ((t * nd + d) * batch + b) * H, hc, H * sizeof(double));
      }
    }
    memcpy(hfin + d * batch * H, hcur, batch * H * sizeof(double));
    memcpy(cfin + d * batch * H, ccur, batch * H * sizeof(double));
  }
  /* Outputs in the node's layout. */
  if (nnop_has_output(node, 0)) {
    OnyxTensor* y;
    const int64_t dims0[4] = {(int64_t)seq, (int64_t)nd, (int64_t)batch, (int64_t)H};
    const int64_t dims1[4] = {(int64_t)batch, (int64_t)seq, (int64_t)nd, (int64_t)H};
    if ((st = cpu_host->ctx_output(ctx, 0, s->layout ? dims1 : dims0, 4, &y))) return st;
    double* out = yall;
    if (s->layout) {
      if ((st = nnop_scratch(ctx, seq * nd * batch * H * sizeof(double), (void**)&out))) return st;
      for (size_t t = 0; t < seq; t++)
        for (size_t d = 0; d < nd; d++)
          for (size_t b = 0; b < batch; b++)
            memcpy(out + ((b * seq + t) * nd + d) * H, yall + ((t * nd + d) * batch + b) * H,
                   H * sizeof(double));
    }
    nnop_store_d(y, out, seq * nd * batch * H);
  }
  for (size_t which = 1; which <= (s->cell == CELL_LSTM ? 2u : 1u); which++) {
    if (!nnop_has_output(node, which)) continue;
    const double* src = which == 1 ? hfin : cfin;
    OnyxTensor* y;
    const int64_t dims0[3] = {(int64_t)nd, (int64_t)batch, (int64_t)H};
    const int64_t dims1[3] = {(int64_t)batch, (int64_t)nd, (int64_t)H};
    if ((st = cpu_host->ctx_output(ctx, which, s->layout ? dims1 : dims0, 3, &y))) return st;
    double* out;
    if ((st = nnop_scratch(ctx, state_n * sizeof(double), (void**)&out))) return st;
    for (size_t d = 0; d < nd; d++)
      for (size_t b = 0; b < batch; b++)
        memcpy(out + (s->layout ? (b * nd + d) : (d * batch + b)) * H, src + (d * batch + b) * H,
               H * sizeof(double));
    nnop_store_d(y, out, state_n);
  }
  return NULL;
}

static const int32_t I32[] = {ONYX_ELEM_INT32};
static const OnyxTypeConstraint TC_RNN[] = {{"T", nnop_types_f, 4}, {"T1", I32, 1}};

/* A create that fails frees the (flat) state it had already handed out. */
static OnyxStatus* free_on_error(OnyxStatus* st, void** state) {
  if (st && *state) {
    free(*state);
    *state = NULL;
  }
  return st;
}

static OnyxStatus* rnn_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  *state = NULL;
  return free_on_error(rnn_create_impl(ep, node, user_data, state), state);
}

OnyxStatus* cpu_register_rnn(OnyxKernelRegistry* r) {
  const int32_t latest = ONYX_OPSET_LATEST;
  const CpuKernelSpec specs[] = {
      {"RNN", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, cpu_free_state, (void*)CELL_RNN},
      {"GRU", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, cpu_free_state, (void*)CELL_GRU},
      {"LSTM", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, cpu_free_state, (void*)CELL_LSTM},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
