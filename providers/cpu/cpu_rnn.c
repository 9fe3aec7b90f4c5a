/* cpu_rnn.c — RNN, GRU and LSTM (opsets 1..22): every direction, layout 0
 * and 1, optional bias, sequence_lens and initial states, LSTM peepholes,
 * input_forget and clip, GRU linear_before_reset, and every activation
 * function of the spec with its alpha/beta.
 *
 * float32 runs in float32 throughout:
 *  - The input projection of every time step and both directions is one
 *    GEMM (cpu_gemm_f32): X viewed as [seq * batch, input] (rows in the
 *    node's layout) times W^T, W being [directions * gates * hidden, input]
 *    as stored, with the biases Wb + Rb folded in as the GEMM's column bias
 *    (GRU with linear_before_reset keeps Rb of its h gate apart: it is
 *    gated by r). A constant W is packed for the GEMM at kernel creation.
 *  - Each step multiplies H_{t-1} by R^T with this file's kernel, on R
 *    packed into blocks of 64 columns (per block, hidden rows of 64 floats:
 *    one pass over the block streams it linearly while a batch row's 64
 *    sums stay in registers; AVX-512, AVX2 or portable C, picked like the
 *    GEMM's kernel, ONYX_CPU_ISA capping it; flush-to-zero as in the GEMM).
 *    A constant R is packed at kernel creation. GRU without
 *    linear_before_reset packs R_z|R_r and R_h apart: the h gate multiplies
 *    (r ⊙ H_{t-1}) by R_h^T.
 *  - The gate math of a batch row runs over whole gate vectors: additions
 *    and peepholes as plain loops, Sigmoid and Tanh by the provider's
 *    vector kernels (cpu_vmath.c), the other activations element by
 *    element. clip bounds the inputs of the gate activations (not the cell
 *    state LSTM's h activation takes).
 *  - Directions run in parallel on the session's pool when it has two
 *    threads or more; a single direction splits each step's product by
 *    column blocks over the pool when the product is large enough.
 *
 * float64, float16 and bfloat16 keep a reference path: GEMMs in fp32
 * (cpu_gemm_f32) for the halves and fp64 for float64, states and gate math
 * in double.
 *
 * Either path polls cancellation once per time step. A batch entry past
 * its sequence length keeps its state and writes zeros to Y. */
#include "cpu_nn.h"
#include "cpu_nnop_util.h"
#include "cpu_vmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define RNN_X86 1
#else
#define RNN_X86 0
#endif

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

/* Columns per packed block of R (see rpack). */
#define RB 64

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
  /* float32: a constant W packed for cpu_gemm_f32 (B = W^T, k = input,
   * n = directions * gates * hidden), or NULL; w_k its input size. */
  float* w_packed;
  size_t w_k;
  /* float32: a constant R packed by rpack, directions one after the other
   * (rdir_floats each), or NULL. */
  float* r_packed;
} RnnState;

/* --- Packed R ------------------------------------------------------------------------------ */

/* The recurrent weights of one direction as one or two column segments of
 * R^T (H x gates*H): GRU without linear_before_reset multiplies R_z|R_r by
 * H_{t-1} and R_h by r ⊙ H_{t-1}, so it packs [0, 2H) and [2H, 3H) apart;
 * every other cell packs [0, gates*H) whole. */
typedef struct RSegs {
  size_t c0[2], n[2], off[2]; /* first column, width, float offset in the direction's pack */
  size_t dir_floats;          /* floats per direction */
} RSegs;

static size_t pad_rb(size_t n) {
  return (n + RB - 1) / RB * RB;
}

/* false on size overflow. */
static bool rsegs_make(const RnnState* s, size_t H, RSegs* g) {
  const size_t gh = s->gates * H;
  const bool split = s->cell == CELL_GRU && !s->linear_before_reset;
  g->c0[0] = 0;
  g->n[0] = split ? 2 * H : gh;
  g->c0[1] = 2 * H;
  g->n[1] = split ? H : 0;
  size_t f0, f1;
  if (!cpu_mul_size(pad_rb(g->n[0]), H, &f0) || !cpu_mul_size(pad_rb(g->n[1]), H, &f1) ||
      f0 > SIZE_MAX - f1)
    return false;
  g->off[0] = 0;
  g->off[1] = f0;
  g->dir_floats = f0 + f1;
  return true;
}

/* dst[q][k][c] = R[c0 + q*RB + c][k] (R stored [columns][K], so the value is
 * R^T's (k, c0 + q*RB + c)); columns past n are zero. Block q is K x RB
 * floats at q * K * RB. */
static void rpack(float* dst, const float* r, size_t c0, size_t n, size_t K) {
  for (size_t q = 0; q * RB < n; q++) {
    float* blk = dst + q * K * RB;
    for (size_t c = 0; c < RB; c++) {
      const size_t col = q * RB + c;
      if (col < n) {
        const float* src = r + (c0 + col) * K;
        for (size_t k = 0; k < K; k++)
          blk[k * RB + c] = src[k];
      } else {
        for (size_t k = 0; k < K; k++)
          blk[k * RB + c] = 0.0f;
      }
    }
  }
}

/* Packs every direction of R ([nd][gh][H], float32). */
static void rpack_all(float* dst, const float* r, const RSegs* g, size_t nd, size_t gh, size_t H) {
  for (size_t d = 0; d < nd; d++)
    for (int sgi = 0; sgi < 2; sgi++)
      if (g->n[sgi])
        rpack(dst + d * g->dir_floats + g->off[sgi], r + d * gh * H, g->c0[sgi], g->n[sgi], H);
}

/* The constant float32 input `idx` of the node with dims [nd, gh, k], or NULL. */
static const OnyxTensor* const_weight(const OnyxNode* node, size_t idx, size_t nd, size_t gh) {
  const OnyxValueInfo* v =
      cpu_host->node_input_count(node) > idx ? cpu_host->node_input(node, idx) : NULL;
  const OnyxTensor* t = v ? cpu_host->value_constant(v) : NULL;
  if (!t || cpu_host->tensor_elem_type(t) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(t) != 3)
    return NULL;
  const int64_t* d = cpu_host->tensor_dims(t);
  return d[0] == (int64_t)nd && d[1] == (int64_t)gh ? t : NULL;
}

/* Packs a constant float32 W and R once (file comment). Without memory, or
 * with weights of another shape, they stay unpacked: compute packs R per
 * run and reads W as stored. */
static void rnn_prepack(RnnState* s) {
  const size_t nd = (size_t)s->num_dir, H = (size_t)s->hidden;
  size_t gh;
  if (!cpu_mul_size(s->gates, H, &gh) || gh > (size_t)INT64_MAX / 2) return;
  const OnyxTensor* w = const_weight(s->node, 1, nd, gh);
  if (w && cpu_host->tensor_dims(w)[2] > 0) {
    const size_t k = (size_t)cpu_host->tensor_dims(w)[2];
    s->w_packed = cpu_gemm_alloc_packed(cpu_gemm_packed_b_floats(k, nd * gh));
    if (s->w_packed) {
      cpu_gemm_pack_b(NULL, s->w_packed, cpu_host->tensor_data(w), k, 1, k, nd * gh);
      s->w_k = k;
    }
  }
  const OnyxTensor* r = const_weight(s->node, 2, nd, gh);
  RSegs g;
  size_t floats;
  if (r && cpu_host->tensor_dims(r)[2] == (int64_t)H && rsegs_make(s, H, &g) &&
      cpu_mul_size(g.dir_floats, nd, &floats)) {
    s->r_packed = cpu_gemm_alloc_packed(floats);
    if (s->r_packed) rpack_all(s->r_packed, cpu_host->tensor_data(r), &g, nd, gh, H);
  }
}

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
  rnn_prepack(s);
  return NULL;
}

static void rnn_release(void* state) {
  RnnState* s = state;
  if (!s) return;
  free(s->w_packed);
  free(s->r_packed);
  free(s);
}

/* --- Shapes -------------------------------------------------------------------------------- */

typedef struct RnnDims {
  size_t seq, batch, in, H, G, gh, nd;
  int64_t* lens; /* batch values in [0, seq] (scratch) */
} RnnDims;

/* Checks every input's shape and sequence_lens' values; sizes the work
 * (including the double path's scratch) without overflow. */
static OnyxStatus* rnn_check(const RnnState* s, OnyxKernelContext* ctx, RnnDims* dm) {
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
  /* Every buffer of either path: states and Y (double), the projection of
   * all steps (double), W or R transposed (double). */
  size_t gh_n, sb, nb, sz, xw_n;
  if (!cpu_mul_size(G, H, &gh_n) || gh_n > (size_t)INT64_MAX / 2 ||
      !cpu_mul_size(seq, batch, &sb) || !cpu_mul_size(nd, batch, &nb) ||
      !cpu_mul_size(nb, H, &sz) || !cpu_mul_size(sz, sizeof(double), &sz) ||
      !cpu_mul_size(seq, sz, &sz) || !cpu_mul_size(sb, gh_n * nd, &xw_n) ||
      !cpu_mul_size(xw_n, sizeof(double), &xw_n) || !cpu_mul_size(gh_n, H > in ? H : in, &sz) ||
      !cpu_mul_size(sz, sizeof(double), &sz))
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "integer overflow: hidden_size %zu with %zu gates, %zu directions, batch "
                     "%zu and sequence %zu",
                     H, G, nd, batch, seq);
  const int64_t* wd = cpu_host->tensor_dims(w);
  const int64_t* rd = cpu_host->tensor_dims(rt);
  if (cpu_host->tensor_rank(w) != 3 || wd[0] != (int64_t)nd || wd[1] != (int64_t)(G * H) ||
      wd[2] != (int64_t)in)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "W must be [%zu, %zu, %zu]", nd, G * H, in);
  if (cpu_host->tensor_rank(rt) != 3 || rd[0] != (int64_t)nd || rd[1] != (int64_t)(G * H) ||
      rd[2] != (int64_t)H)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "R must be [%zu, %zu, %zu]", nd, G * H, H);
  if (nnop_has_input(ctx, 3) &&
      cpu_host->tensor_elem_count(cpu_host->ctx_input(ctx, 3)) != nd * 2 * G * H)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "B must be [%zu, %zu]", nd, 2 * G * H);
  OnyxStatus* st;
  int64_t* lens;
  if ((st = nnop_scratch(ctx, (batch ? batch : 1) * sizeof(int64_t), (void**)&lens))) return st;
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
  const size_t state_n = nd * batch * H;
  for (size_t which = 0; which < (s->cell == CELL_LSTM ? 2u : 1u); which++)
    if (nnop_has_input(ctx, 5 + which) &&
        cpu_host->tensor_elem_count(cpu_host->ctx_input(ctx, 5 + which)) != state_n)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s must have %zu values",
                       which ? "initial_c" : "initial_h", state_n);
  if (s->cell == CELL_LSTM && nnop_has_input(ctx, 7) &&
      cpu_host->tensor_elem_count(cpu_host->ctx_input(ctx, 7)) != nd * 3 * H)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "P must be [%zu, %zu]", nd, 3 * H);
  *dm = (RnnDims){seq, batch, in, H, G, gh_n, nd, lens};
  return NULL;
}

/* --- Reference path ------------------------------------------------------------------------- */

static double clipv(const RnnState* s, double v) {
  if (s->clip > 0) return v < -s->clip ? -s->clip : (v > s->clip ? s->clip : v);
  return v;
}

/* The reference path (float64, float16, bfloat16): see the file comment. */
static OnyxStatus* rnn_compute_ref(const RnnState* s, OnyxKernelContext* ctx, const RnnDims* dm) {
  const OnyxNode* node = s->node;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* rt = cpu_host->ctx_input(ctx, 2);
  const size_t seq = dm->seq, batch = dm->batch, in = dm->in, H = dm->H, G = dm->G, nd = dm->nd;
  const int64_t* lens = dm->lens;
  OnyxStatus* st;
  double *xv, *wv, *rv, *bv = NULL, *h0 = NULL, *c0 = NULL, *pv = NULL;
  if ((st = nnop_load_d(ctx, x, &xv)) || (st = nnop_load_d(ctx, w, &wv)) ||
      (st = nnop_load_d(ctx, rt, &rv)))
    return st;
  if (nnop_has_input(ctx, 3) && (st = nnop_load_d(ctx, cpu_host->ctx_input(ctx, 3), &bv)))
    return st;
  /* Initial states in [dir][batch][H] order whatever the layout. */
  const size_t state_n = nd * batch * H;
  for (size_t which = 0; which < (s->cell == CELL_LSTM ? 2u : 1u); which++) {
    const size_t idx = which == 0 ? 5 : 6;
    if (!nnop_has_input(ctx, idx)) continue;
    const OnyxTensor* t = cpu_host->ctx_input(ctx, idx);
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
    if ((st = nnop_load_d(ctx, cpu_host->ctx_input(ctx, 7), &pv))) return st;
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

/* --- float32: activations ------------------------------------------------------------------ */

/* The recurrent kernel's path: the GEMM's choice (cpuid, capped by
 * ONYX_CPU_ISA). */
static int rnn_isa(void) {
  return cpu_gemm_isa_level();
}

#if RNN_X86
#define T512       __attribute__((target("avx512f,avx2,fma,avx")))
#define T256       __attribute__((target("avx2,fma,avx")))
#define RNN_INLINE static inline __attribute__((always_inline))
#endif

/* x[i] = f(x[i]) over n values: Sigmoid and Tanh by the provider's vector
 * kernels (cpu_vmath.c), Relu inline, the others element by element. */
static void act_f32(const ActFn* f, float* x, size_t n) {
  switch (f->act) {
  case ACT_SIGMOID:
    cpu_sigmoid_f32(x, x, n);
    return;
  case ACT_TANH:
    cpu_tanh_f32(x, x, n);
    return;
  case ACT_RELU:
    for (size_t i = 0; i < n; i++)
      x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return;
  default:
    for (size_t i = 0; i < n; i++)
      x[i] = (float)act_apply(f, x[i]);
    return;
  }
}

/* --- float32: H_{t-1} R^T on packed R ------------------------------------------------------ */

/* out[r][q*RB + c] = sum_k h[r][k] * blk_q[k][c] for the rows of h and the
 * packed blocks [q0, q1) (all RB columns, padding included: out is at least
 * pad_rb(n) wide). Each element is summed over k in one fixed order per
 * ISA path. */
static void mv_generic(const float* h, size_t ldh, size_t rows, size_t K, const float* pk,
                       size_t q0, size_t q1, float* out, size_t ldo) {
  for (size_t q = q0; q < q1; q++) {
    const float* blk = pk + q * K * RB;
    for (size_t r = 0; r < rows; r++) {
      float acc[RB] = {0};
      const float* hr = h + r * ldh;
      for (size_t k = 0; k < K; k++) {
        const float a = hr[k];
        const float* p = blk + k * RB;
        for (size_t c = 0; c < RB; c++)
          acc[c] += a * p[c];
      }
      memcpy(out + r * ldo + q * RB, acc, sizeof acc);
    }
  }
}

#if RNN_X86
/* R rows (R <= 4) of one block: 4 x 16 columns per row in registers. */
T512 RNN_INLINE void mv512_rows(const int R, const float* h, size_t ldh, size_t K, const float* blk,
                                float* o, size_t ldo) {
  __m512 acc[4][4];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 4; v++)
      acc[r][v] = _mm512_setzero_ps();
  for (size_t k = 0; k < K; k++) {
    const float* p = blk + k * RB;
    const __m512 b0 = _mm512_loadu_ps(p), b1 = _mm512_loadu_ps(p + 16),
                 b2 = _mm512_loadu_ps(p + 32), b3 = _mm512_loadu_ps(p + 48);
    for (int r = 0; r < R; r++) {
      const __m512 a = _mm512_set1_ps(h[(size_t)r * ldh + k]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(a, b3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 4; v++)
      _mm512_storeu_ps(o + (size_t)r * ldo + 16 * v, acc[r][v]);
}

/* One row: even and odd k in two sets of accumulators (eight independent
 * FMA chains instead of four), added at the end. */
T512 RNN_INLINE void mv512_row1(const float* h, size_t K, const float* blk, float* o) {
  __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, d0 = e0, d1 = e0, d2 = e0, d3 = e0;
  size_t k = 0;
  for (; k + 2 <= K; k += 2) {
    const float* p = blk + k * RB;
    const __m512 a = _mm512_set1_ps(h[k]), b = _mm512_set1_ps(h[k + 1]);
    e0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p), e0);
    e1 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 16), e1);
    e2 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 32), e2);
    e3 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 48), e3);
    d0 = _mm512_fmadd_ps(b, _mm512_loadu_ps(p + RB), d0);
    d1 = _mm512_fmadd_ps(b, _mm512_loadu_ps(p + RB + 16), d1);
    d2 = _mm512_fmadd_ps(b, _mm512_loadu_ps(p + RB + 32), d2);
    d3 = _mm512_fmadd_ps(b, _mm512_loadu_ps(p + RB + 48), d3);
  }
  if (k < K) {
    const float* p = blk + k * RB;
    const __m512 a = _mm512_set1_ps(h[k]);
    e0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p), e0);
    e1 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 16), e1);
    e2 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 32), e2);
    e3 = _mm512_fmadd_ps(a, _mm512_loadu_ps(p + 48), e3);
  }
  _mm512_storeu_ps(o, _mm512_add_ps(e0, d0));
  _mm512_storeu_ps(o + 16, _mm512_add_ps(e1, d1));
  _mm512_storeu_ps(o + 32, _mm512_add_ps(e2, d2));
  _mm512_storeu_ps(o + 48, _mm512_add_ps(e3, d3));
}

/* Blocks outer, groups of four rows inner: a block is reused by every
 * row group while it is in the cache. */
T512 static void mv_avx512(const float* h, size_t ldh, size_t rows, size_t K, const float* pk,
                           size_t q0, size_t q1, float* out, size_t ldo) {
  for (size_t q = q0; q < q1; q++) {
    const float* blk = pk + q * K * RB;
    float* o = out + q * RB;
    if (rows == 1) {
      mv512_row1(h, K, blk, o);
      continue;
    }
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
      mv512_rows(4, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
    switch (rows - r) {
    case 3:
      mv512_rows(3, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
      break;
    case 2:
      mv512_rows(2, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
      break;
    case 1:
      mv512_rows(1, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
      break;
    default:
      break;
    }
  }
}

/* R rows x NV vectors of 8 columns from column 8 * v0 of the block
 * (R * NV <= 8 accumulators). */
T256 RNN_INLINE void mv256_rows(const int R, const int NV, const float* h, size_t ldh, size_t K,
                                const float* blk, float* o, size_t ldo) {
  __m256 acc[2][8];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++)
      acc[r][v] = _mm256_setzero_ps();
  for (size_t k = 0; k < K; k++) {
    const float* p = blk + k * RB;
    for (int r = 0; r < R; r++) {
      const __m256 a = _mm256_set1_ps(h[(size_t)r * ldh + k]);
      for (int v = 0; v < NV; v++)
        acc[r][v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(p + 8 * v), acc[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++)
      _mm256_storeu_ps(o + (size_t)r * ldo + 8 * v, acc[r][v]);
}

T256 static void mv_avx2(const float* h, size_t ldh, size_t rows, size_t K, const float* pk,
                         size_t q0, size_t q1, float* out, size_t ldo) {
  for (size_t q = q0; q < q1; q++) {
    const float* blk = pk + q * K * RB;
    float* o = out + q * RB;
    size_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      mv256_rows(2, 4, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
      mv256_rows(2, 4, h + r * ldh, ldh, K, blk + 32, o + r * ldo + 32, ldo);
    }
    if (r < rows) mv256_rows(1, 8, h + r * ldh, ldh, K, blk, o + r * ldo, ldo);
  }
}
#endif /* RNN_X86 */

static void mv_blocks(int isa, const float* h, size_t ldh, size_t rows, size_t K, const float* pk,
                      size_t q0, size_t q1, float* out, size_t ldo) {
#if RNN_X86
  if (isa == CPU_ISA_AVX512) return mv_avx512(h, ldh, rows, K, pk, q0, q1, out, ldo);
  if (isa == CPU_ISA_AVX2) return mv_avx2(h, ldh, rows, K, pk, q0, q1, out, ldo);
#endif
  (void)isa;
  mv_generic(h, ldh, rows, K, pk, q0, q1, out, ldo);
}

/* --- float32: gates ------------------------------------------------------------------------ */

static void clip_f32(float* x, size_t n, float lim) {
  if (lim <= 0.0f) return;
  for (size_t i = 0; i < n; i++)
    x[i] = x[i] < -lim ? -lim : (x[i] > lim ? lim : x[i]);
}

/* g = xw + hr over n values. */
static void add_f32(float* restrict g, const float* restrict xw, const float* restrict hr,
                    size_t n) {
  for (size_t i = 0; i < n; i++)
    g[i] = xw[i] + hr[i];
}

/* H_t = f(xw + hr), clipped before f. */
static void rnn_row(const ActFn* acts, float clip, size_t H, const float* xw, const float* hr,
                    float* h) {
  add_f32(h, xw, hr, H);
  clip_f32(h, H, clip);
  act_f32(&acts[0], h, H);
}

/* One LSTM row; gates i, o, f, c in g (4H), peepholes P = [Pi, Po, Pf];
 * c and h updated in place, t: H floats of scratch. */
static void lstm_row(const RnnState* s, const ActFn* acts, float clip, size_t H, const float* xw,
                     const float* hr, const float* P, float* restrict g, float* restrict h,
                     float* restrict c, float* restrict t) {
  float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
  add_f32(g, xw, hr, 4 * H);
  if (P)
    for (size_t j = 0; j < H; j++) {
      gi[j] += P[j] * c[j];
      gf[j] += P[2 * H + j] * c[j];
    }
  if (clip > 0.0f) {
    clip_f32(gi, H, clip);
    clip_f32(gf, H, clip);
    clip_f32(gc, H, clip);
    if (!P) clip_f32(go, H, clip);
  }
  if (!P && !s->input_forget) {
    act_f32(&acts[0], g, 3 * H); /* i, o, f */
  } else {
    act_f32(&acts[0], gi, H);
    if (!s->input_forget) act_f32(&acts[0], gf, H);
    if (!P) act_f32(&acts[0], go, H);
  }
  act_f32(&acts[1], gc, H);
  if (s->input_forget)
    for (size_t j = 0; j < H; j++)
      gf[j] = 1.0f - gi[j];
  for (size_t j = 0; j < H; j++) {
    const float cn = gf[j] * c[j] + gi[j] * gc[j];
    c[j] = cn;
    t[j] = cn;
  }
  if (P) {
    for (size_t j = 0; j < H; j++)
      go[j] += P[H + j] * c[j];
    clip_f32(go, H, clip);
    act_f32(&acts[0], go, H);
  }
  act_f32(&acts[2], t, H);
  for (size_t j = 0; j < H; j++)
    h[j] = go[j] * t[j];
}

/* GRU gates z, r (g[0, 2H)) = f(xw + hr). */
static void gru_zr(const ActFn* acts, float clip, size_t H, const float* xw, const float* hr,
                   float* g) {
  add_f32(g, xw, hr, 2 * H);
  clip_f32(g, 2 * H, clip);
  act_f32(&acts[0], g, 2 * H);
}

/* GRU's new state from z (g[0, H)) and the h gate's input g[2H, 3H). */
static void gru_out(const ActFn* acts, float clip, size_t H, float* restrict g, float* restrict h) {
  float *z = g, *hh = g + 2 * H;
  clip_f32(hh, H, clip);
  act_f32(&acts[1], hh, H);
  for (size_t j = 0; j < H; j++)
    h[j] = (1.0f - z[j]) * hh[j] + z[j] * h[j];
}

/* --- float32: the recurrence ----------------------------------------------------------------- */

typedef struct F32Run {
  const RnnState* s;
  OnyxKernelContext* ctx;
  OnyxThreadPool* step_pool; /* splits a step's product (one direction only), or NULL */
  int isa;
  size_t seq, batch, H, gh, nd;
  const int64_t* lens;
  const float* xw;  /* [seq * batch][nd * gh], rows in the node's layout */
  const float* rpk; /* packed R, segs.dir_floats per direction */
  RSegs segs;
  const float* rb_h; /* [nd][H]: the h gate's Rb (GRU linear_before_reset), or NULL */
  const float* peep; /* [nd][3H], or NULL */
  float *h, *c;      /* [nd][batch][H] */
  float* hr;         /* [nd][batch][ldo]: H_{t-1} R^T */
  size_t ldo;
  float* g;   /* [nd][batch][gh]: gates */
  float* rh;  /* [nd][batch][H]: r ⊙ H_{t-1} (GRU without linear_before_reset), or NULL */
  float* tmp; /* [nd][H] */
  float* y;   /* Y, or NULL */
  int stopped[2];
} F32Run;

typedef struct MvTask {
  const F32Run* r;
  const float *h, *pk;
  float* out;
  size_t blocks, parts;
} MvTask;

#if RNN_X86
/* Flush-to-zero and denormals-are-zero, as in the GEMM (cpu_gemm.c): a
 * subnormal state or product would cost a microcode assist per use. */
#define FTZ_ON()                                                                                   \
  const unsigned csr_saved = _mm_getcsr();                                                         \
  _mm_setcsr(csr_saved | 0x8040u)
#define FTZ_OFF() _mm_setcsr(csr_saved)
#else
#define FTZ_ON()  ((void)0)
#define FTZ_OFF() ((void)0)
#endif

/* Parts [p0, p1) of the blocks: part i is blocks [i * blocks / parts,
 * (i + 1) * blocks / parts), the same every step, so a thread that gets
 * the same part again finds its blocks in its cache. */
static void mv_task(void* user, size_t p0, size_t p1) {
  const MvTask* t = user;
  const F32Run* r = t->r;
  FTZ_ON();
  mv_blocks(r->isa, t->h, r->H, r->batch, r->H, t->pk, p0 * t->blocks / t->parts,
            p1 * t->blocks / t->parts, t->out, r->ldo);
  FTZ_OFF();
}

/* out = h (batch x H) times the n packed columns at pk. Odd steps walk the
 * blocks last to first: the blocks the previous step read last are still
 * in the L2 cache, where a fixed order evicts each block just before its
 * next use whenever R is somewhat larger than the cache (1 MiB per
 * direction at hidden 256). */
static void step_mv(const F32Run* r, size_t step, const float* h, const float* pk, size_t n,
                    float* out) {
  const size_t blocks = pad_rb(n) / RB, threads = cpu_host->thread_pool_size(r->step_pool);
  if (r->step_pool && blocks > 1) {
    MvTask t = {r, h, pk, out, blocks, threads < blocks ? threads : blocks};
    cpu_host->parallel_for(r->step_pool, t.parts, mv_task, &t);
  } else if (step & 1) {
    for (size_t q = blocks; q-- > 0;)
      mv_blocks(r->isa, h, r->H, r->batch, r->H, pk, q, q + 1, out, r->ldo);
  } else {
    mv_blocks(r->isa, h, r->H, r->batch, r->H, pk, 0, blocks, out, r->ldo);
  }
}

static size_t xw_row(const F32Run* r, size_t t, size_t b) {
  return r->s->layout ? b * r->seq + t : t * r->batch + b;
}

static float* y_row(const F32Run* r, size_t t, size_t d, size_t b) {
  return r->y +
         (r->s->layout ? (b * r->seq + t) * r->nd + d : (t * r->nd + d) * r->batch + b) * r->H;
}

/* Every step of direction d; stops early (stopped[d]) when the run is
 * cancelled. */
static void dir_run(F32Run* r, size_t d) {
  const RnnState* s = r->s;
  const size_t batch = r->batch, H = r->H, gh = r->gh, xld = r->nd * gh, ldo = r->ldo;
  const bool rev = s->reverse || d == 1, split = r->segs.n[1] != 0;
  const ActFn* acts = s->acts + d * s->n_acts_per_dir;
  const float* pk = r->rpk + d * r->segs.dir_floats;
  const float clip = (float)s->clip;
  const float* peep = r->peep ? r->peep + d * 3 * H : NULL;
  const float* rbh = r->rb_h ? r->rb_h + d * H : NULL;
  float* h = r->h + d * batch * H;
  float* c = r->c + d * batch * H;
  float* hr = r->hr + d * batch * ldo;
  float* g = r->g + d * batch * gh;
  float* rh = r->rh ? r->rh + d * batch * H : NULL;
  float* tmp = r->tmp + d * H;
  FTZ_ON();
  for (size_t step = 0; step < r->seq; step++) {
    if (cpu_should_stop(r->ctx)) {
      r->stopped[d] = 1;
      break;
    }
    step_mv(r, step, h, pk + r->segs.off[0], r->segs.n[0], hr);
    for (size_t b = 0; b < batch; b++) {
      if ((int64_t)step >= r->lens[b]) continue;
      const size_t t = rev ? (size_t)r->lens[b] - 1 - step : step;
      const float* xr = r->xw + xw_row(r, t, b) * xld + d * gh;
      const float* hrb = hr + b * ldo;
      float* hb = h + b * H;
      float* gb = g + b * gh;
      switch (s->cell) {
      case CELL_RNN:
        rnn_row(acts, clip, H, xr, hrb, hb);
        break;
      case CELL_LSTM:
        lstm_row(s, acts, clip, H, xr, hrb, peep, gb, hb, c + b * H, tmp);
        break;
      case CELL_GRU:
        gru_zr(acts, clip, H, xr, hrb, gb);
        if (split) {
          for (size_t j = 0; j < H; j++)
            rh[b * H + j] = gb[H + j] * hb[j];
        } else {
          for (size_t j = 0; j < H; j++)
            gb[2 * H + j] = xr[2 * H + j] + gb[H + j] * (hrb[2 * H + j] + (rbh ? rbh[j] : 0.0f));
          gru_out(acts, clip, H, gb, hb);
        }
        break;
      }
      if (r->y && !split) memcpy(y_row(r, t, d, b), hb, H * sizeof *hb);
    }
    if (!split) continue;
    /* GRU: (r ⊙ H_{t-1}) R_h^T, then the h gate. */
    step_mv(r, step, rh, pk + r->segs.off[1], r->segs.n[1], hr);
    for (size_t b = 0; b < batch; b++) {
      if ((int64_t)step >= r->lens[b]) continue;
      const size_t t = rev ? (size_t)r->lens[b] - 1 - step : step;
      const float* xr = r->xw + xw_row(r, t, b) * xld + d * gh;
      float* gb = g + b * gh;
      add_f32(gb + 2 * H, xr + 2 * H, hr + b * ldo, H);
      gru_out(acts, clip, H, gb, h + b * H);
      if (r->y) memcpy(y_row(r, t, d, b), h + b * H, H * sizeof(float));
    }
  }
  FTZ_OFF();
}

static void dir_task(void* user, size_t begin, size_t end) {
  for (size_t d = begin; d < end; d++)
    dir_run(user, d);
}

/* A step's product is split over the pool from this many multiply-adds on
 * (one direction; smaller ones cost less than the pool's hand-off). */
#define STEP_SPLIT_WORK ((size_t)128 * 1024)

/* n floats of scratch (at least one), or an error naming the node. */
static OnyxStatus* scratch_f(OnyxKernelContext* ctx, const OnyxNode* node, size_t a, size_t b,
                             float** out) {
  size_t n;
  if (!cpu_mul_size(a, b, &n) || !cpu_mul_size(n ? n : 1, sizeof(float), &n))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "integer overflow sizing %zu x %zu floats", a, b);
  return nnop_scratch(ctx, n, (void**)out);
}

static OnyxStatus* rnn_compute_f32(const RnnState* s, OnyxKernelContext* ctx, const RnnDims* dm) {
  const OnyxNode* node = s->node;
  const size_t seq = dm->seq, batch = dm->batch, in = dm->in, H = dm->H, gh = dm->gh, nd = dm->nd;
  const size_t state_n = nd * batch * H;
  const float* X = cpu_host->tensor_data(cpu_host->ctx_input(ctx, 0));
  const float* W = cpu_host->tensor_data(cpu_host->ctx_input(ctx, 1));
  const float* R = cpu_host->tensor_data(cpu_host->ctx_input(ctx, 2));
#define OPT_IN(i)                                                                                  \
  (nnop_has_input(ctx, i) ? (const float*)cpu_host->tensor_data(cpu_host->ctx_input(ctx, i)) : NULL)
  const float* B = OPT_IN(3);
  const float* h0 = OPT_IN(5);
  const float* c0 = s->cell == CELL_LSTM ? OPT_IN(6) : NULL;
  const float* P = s->cell == CELL_LSTM ? OPT_IN(7) : NULL;
#undef OPT_IN
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  F32Run run = {.s = s,
                .ctx = ctx,
                .isa = rnn_isa(),
                .seq = seq,
                .batch = batch,
                .H = H,
                .gh = gh,
                .nd = nd,
                .lens = dm->lens,
                .peep = P};
  if (!rsegs_make(s, H, &run.segs))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "integer overflow packing R (hidden_size %zu)",
                     H);
  run.ldo = pad_rb(run.segs.n[0] > run.segs.n[1] ? run.segs.n[0] : run.segs.n[1]);
  OnyxStatus* st;
  if (nnop_has_output(node, 0)) {
    OnyxTensor* y;
    const int64_t dims0[4] = {(int64_t)seq, (int64_t)nd, (int64_t)batch, (int64_t)H};
    const int64_t dims1[4] = {(int64_t)batch, (int64_t)seq, (int64_t)nd, (int64_t)H};
    if ((st = cpu_host->ctx_output(ctx, 0, s->layout ? dims1 : dims0, 4, &y))) return st;
    run.y = cpu_host->tensor_mutable_data(y);
  }
  float *xw, *bias = NULL, *rb_h = NULL, *rpk = NULL;
  if ((st = scratch_f(ctx, node, seq * batch, nd * gh, &xw)) ||
      (st = scratch_f(ctx, node, state_n, 1, &run.h)) ||
      (st = scratch_f(ctx, node, state_n, 1, &run.c)) ||
      (st = scratch_f(ctx, node, nd * batch, run.ldo, &run.hr)) ||
      (st = scratch_f(ctx, node, nd * batch, gh, &run.g)) ||
      (st = scratch_f(ctx, node, nd, H, &run.tmp)) ||
      (B && (st = scratch_f(ctx, node, nd, gh, &bias))) ||
      (!s->r_packed && (st = scratch_f(ctx, node, nd, run.segs.dir_floats, &rpk))) ||
      (run.segs.n[1] && (st = scratch_f(ctx, node, nd * batch, H, &run.rh))))
    return st;
  const bool lbr_gru = s->cell == CELL_GRU && s->linear_before_reset;
  if (B && lbr_gru && (st = scratch_f(ctx, node, nd, H, &rb_h))) return st;
  /* Biases: Wb + Rb folded into the projection, but for the h gate of a
   * GRU with linear_before_reset, whose Rb is gated by r (rb_h). */
  if (B)
    for (size_t d = 0; d < nd; d++) {
      const float* wb = B + d * 2 * gh;
      for (size_t i = 0; i < gh; i++)
        bias[d * gh + i] = wb[i] + (lbr_gru && i >= 2 * H ? 0.0f : wb[gh + i]);
      if (rb_h) memcpy(rb_h + d * H, wb + gh + 2 * H, H * sizeof(float));
    }
  run.rb_h = rb_h;
  if (s->r_packed) {
    run.rpk = s->r_packed;
  } else {
    rpack_all(rpk, R, &run.segs, nd, gh, H);
    run.rpk = rpk;
  }
  if (run.segs.n[1]) memset(run.rh, 0, state_n * sizeof(float));
  /* The projection of every step and direction: X (seq*batch x in) W^T. */
  if (seq * batch > 0) {
    CpuGemm gx = {.m = seq * batch,
                  .n = nd * gh,
                  .k = in,
                  .a = X,
                  .lda = in,
                  .c = xw,
                  .ldc = nd * gh,
                  .alpha = 1,
                  .bias_col = bias};
    if (s->w_packed && s->w_k == in) {
      gx.packed_b = s->w_packed;
    } else {
      gx.b = W;
      gx.ldb = in;
      gx.trans_b = 1;
    }
    cpu_gemm_f32(pool, &gx);
  }
  run.xw = xw;
  /* Initial states, [dir][batch][H] whatever the layout. */
  for (size_t d = 0; d < nd; d++)
    for (size_t b = 0; b < batch; b++) {
      const size_t src = (s->layout ? b * nd + d : d * batch + b) * H, dst = (d * batch + b) * H;
      if (h0)
        memcpy(run.h + dst, h0 + src, H * sizeof(float));
      else
        memset(run.h + dst, 0, H * sizeof(float));
      if (c0)
        memcpy(run.c + dst, c0 + src, H * sizeof(float));
      else
        memset(run.c + dst, 0, H * sizeof(float));
    }
  if (run.y) {
    bool short_row = false;
    for (size_t b = 0; b < batch; b++)
      short_row |= dm->lens[b] < (int64_t)seq;
    if (short_row) memset(run.y, 0, seq * state_n * sizeof(float));
  }
  const size_t threads = cpu_host->thread_pool_size(pool);
  if (nd == 2 && threads >= 2 && seq > 0) {
    cpu_host->parallel_for(pool, 2, dir_task, &run);
  } else {
    if (threads >= 2 && batch * gh * H >= STEP_SPLIT_WORK) run.step_pool = pool;
    for (size_t d = 0; d < nd; d++)
      dir_run(&run, d);
  }
  if (run.stopped[0] || run.stopped[1]) return cpu_cancelled(ctx, NULL);
  for (size_t which = 1; which <= (s->cell == CELL_LSTM ? 2u : 1u); which++) {
    if (!nnop_has_output(node, which)) continue;
    const float* src = which == 1 ? run.h : run.c;
    OnyxTensor* yt;
    const int64_t dims0[3] = {(int64_t)nd, (int64_t)batch, (int64_t)H};
    const int64_t dims1[3] = {(int64_t)batch, (int64_t)nd, (int64_t)H};
    if ((st = cpu_host->ctx_output(ctx, which, s->layout ? dims1 : dims0, 3, &yt))) return st;
    float* out = cpu_host->tensor_mutable_data(yt);
    for (size_t d = 0; d < nd; d++)
      for (size_t b = 0; b < batch; b++)
        memcpy(out + (s->layout ? b * nd + d : d * batch + b) * H, src + (d * batch + b) * H,
               H * sizeof(float));
  }
  return NULL;
}

static OnyxStatus* rnn_compute(void* state, OnyxKernelContext* ctx) {
  const RnnState* s = state;
  RnnDims dm;
  OnyxStatus* st = rnn_check(s, ctx, &dm);
  if (st) return st;
  if (cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 0)) == ONYX_ELEM_FLOAT32)
    return rnn_compute_f32(s, ctx, &dm);
  return rnn_compute_ref(s, ctx, &dm);
}

static const int32_t I32[] = {ONYX_ELEM_INT32};
static const OnyxTypeConstraint TC_RNN[] = {{"T", cpu_types_real, 4}, {"T1", I32, 1}};

/* A create that fails frees the state it had already handed out. */
static OnyxStatus* free_on_error(OnyxStatus* st, void** state) {
  if (st && *state) {
    rnn_release(*state);
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
      {"RNN", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, rnn_release, (void*)CELL_RNN},
      {"GRU", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, rnn_release, (void*)CELL_GRU},
      {"LSTM", 1, latest, TC_RNN, 2, rnn_create, rnn_compute, rnn_release, (void*)CELL_LSTM},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
