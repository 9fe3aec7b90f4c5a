/* test_rnn.c — the CPU provider's RNN, GRU and LSTM kernels (cpu_rnn.c)
 * through a session, against a plain double-precision implementation of the
 * ONNX equations written here (ref_run): gates i, o, f, c (LSTM) and z, r, h
 * (GRU) in the order the spec stores them, peepholes, input_forget, clip on
 * the inputs of the gate activations, both GRU reset variants, every
 * direction, layout 0 and 1, sequence_lens, initial states. Shapes cover
 * batch 1, 3 and 5, sequences of 1, 6 and 17 steps, hidden sizes that are
 * and are not multiples of 16 (and past one 64-column block), weights as
 * initializers (packed at kernel creation) and as graph inputs (packed per
 * run), float32 and float64. Two threads must give the bits of one thread.
 * The test runs once per ONYX_CPU_ISA cap (AVX-512, AVX2, portable). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

#define F32 ONYX_ELEM_FLOAT32
#define F64 ONYX_ELEM_FLOAT64
#define I32 ONYX_ELEM_INT32

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

typedef enum { LSTM, GRU, RNN } Kind;

typedef struct Case {
  Kind kind;
  const char* direction; /* "forward", "reverse", "bidirectional" */
  size_t seq, batch, in, H;
  int layout;
  int elem;                /* F32 or F64 */
  bool bias, h0, c0, peep; /* optional inputs present */
  const int32_t* lens;     /* batch values, or NULL */
  bool weights_are_inputs; /* W, R, B as graph inputs instead of initializers */
  int lbr, input_forget;   /* GRU linear_before_reset; LSTM input_forget */
  float clip;              /* 0: none */
  const char* acts[6];     /* NULL: the defaults */
  float alpha, beta;       /* activation_alpha / beta (one value each), when set */
  bool has_alpha, has_beta;
  double wscale, xscale; /* weight and input magnitudes */
  int threads;           /* 0: 1 */
} Case;

/* --- deterministic data ------------------------------------------------------------------ */

static uint64_t rng_state;

static double uniform(void) { /* [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

/* n values of magnitude below `scale`, rounded to float so that float32 and
 * the double reference see the same numbers. */
static double* rand_vec(size_t n, double scale) {
  double* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = (double)(float)(scale * uniform());
  return v;
}

/* --- reference -------------------------------------------------------------------------- */

static double ref_act(const char* name, double a, double b, double x) {
  if (!strcmp(name, "Sigmoid")) return 1.0 / (1.0 + exp(-x));
  if (!strcmp(name, "Tanh")) return tanh(x);
  if (!strcmp(name, "Relu")) return x > 0 ? x : 0;
  if (!strcmp(name, "LeakyRelu")) return x >= 0 ? x : a * x;
  if (!strcmp(name, "HardSigmoid")) return fmin(1.0, fmax(0.0, a * x + b));
  if (!strcmp(name, "Softsign")) return x / (1 + fabs(x));
  if (!strcmp(name, "ScaledTanh")) return a * tanh(b * x);
  fail_msg("reference lacks activation %s", name);
  return 0;
}

typedef struct Act {
  const char* name;
  double a, b;
} Act;

static double act(const Act* f, double x) {
  return ref_act(f->name, f->a, f->b, x);
}

static double clipd(const Case* c, double v) {
  if (c->clip > 0) return v < -c->clip ? -c->clip : (v > c->clip ? c->clip : v);
  return v;
}

typedef struct Data {
  size_t nd, G;
  double *x, *w, *r, *b, *h0, *c0, *p; /* as the node takes them (layout applied) */
  int32_t* lens;
  /* reference outputs in layout 0: Y [seq][nd][batch][H], Y_h/Y_c [nd][batch][H] */
  double *y, *yh, *yc;
} Data;

static size_t gates(const Case* c) {
  return c->kind == LSTM ? 4 : c->kind == GRU ? 3 : 1;
}

static size_t ndir(const Case* c) {
  return !strcmp(c->direction, "bidirectional") ? 2 : 1;
}

/* x[t][b][k] and the initial states, whatever the layout. */
static double x_at(const Case* c, const Data* d, size_t t, size_t b, size_t k) {
  return d->x[(c->layout ? b * c->seq + t : t * c->batch + b) * c->in + k];
}

static double state0(const Case* c, const Data* d, const double* s, size_t dir, size_t b,
                     size_t j) {
  return s ? s[(c->layout ? b * d->nd + dir : dir * c->batch + b) * c->H + j] : 0.0;
}

static void ref_run(const Case* c, Data* d) {
  const size_t H = c->H, G = d->G, nd = d->nd, in = c->in;
  double* h = malloc(H * sizeof *h);
  double* cs = malloc(H * sizeof *cs);
  double* hn = malloc(H * sizeof *hn);
  double* pre = malloc(G * H * sizeof *pre); /* W x + Wb (+ R h + Rb but for GRU's h gate) */
  double* rec = malloc(G * H * sizeof *rec); /* R h */
  Act acts[6];
  const size_t per = c->kind == LSTM ? 3 : c->kind == GRU ? 2 : 1;
  for (size_t i = 0; i < per * nd; i++) {
    const char* dflt = c->kind == RNN ? "Tanh" : (i % per == 0 ? "Sigmoid" : "Tanh");
    acts[i] = (Act){c->acts[0] ? c->acts[i] : dflt, c->has_alpha ? c->alpha : 0,
                    c->has_beta ? c->beta : 0};
  }
  memset(d->y, 0, c->seq * nd * c->batch * H * sizeof *d->y);
  for (size_t dir = 0; dir < nd; dir++) {
    const bool rev = !strcmp(c->direction, "reverse") || dir == 1;
    const double* W = d->w + dir * G * H * in;
    const double* R = d->r + dir * G * H * H;
    const double* Wb = d->b ? d->b + dir * 2 * G * H : NULL;
    const double* Rb = Wb ? Wb + G * H : NULL;
    const double* P = d->p ? d->p + dir * 3 * H : NULL;
    const Act* f = &acts[dir * per];
    for (size_t b = 0; b < c->batch; b++) {
      const size_t len = d->lens ? (size_t)d->lens[b] : c->seq;
      for (size_t j = 0; j < H; j++) {
        h[j] = state0(c, d, d->h0, dir, b, j);
        cs[j] = state0(c, d, d->c0, dir, b, j);
      }
      for (size_t step = 0; step < len; step++) {
        const size_t t = rev ? len - 1 - step : step;
        for (size_t g = 0; g < G * H; g++) {
          double s = Wb ? Wb[g] : 0, q = 0;
          for (size_t k = 0; k < in; k++)
            s += W[g * in + k] * x_at(c, d, t, b, k);
          for (size_t k = 0; k < H; k++)
            q += R[g * H + k] * h[k];
          pre[g] = s;
          rec[g] = q + (Rb ? Rb[g] : 0);
        }
        for (size_t j = 0; j < H; j++) {
          if (c->kind == RNN) {
            hn[j] = act(&f[0], clipd(c, pre[j] + rec[j]));
          } else if (c->kind == LSTM) {
            double gi = pre[j] + rec[j], go = pre[H + j] + rec[H + j];
            double gf = pre[2 * H + j] + rec[2 * H + j], gc = pre[3 * H + j] + rec[3 * H + j];
            if (P) {
              gi += P[j] * cs[j];
              gf += P[2 * H + j] * cs[j];
            }
            const double i = act(&f[0], clipd(c, gi));
            const double fg = c->input_forget ? 1 - i : act(&f[0], clipd(c, gf));
            const double cc = act(&f[1], clipd(c, gc));
            const double cn = fg * cs[j] + i * cc;
            if (P) go += P[H + j] * cn;
            const double o = act(&f[0], clipd(c, go));
            cs[j] = cn;
            hn[j] = o * act(&f[2], cn);
          } else {
            const double z = act(&f[0], clipd(c, pre[j] + rec[j]));
            const double r = act(&f[0], clipd(c, pre[H + j] + rec[H + j]));
            double hpre;
            if (c->lbr) {
              hpre = pre[2 * H + j] + r * rec[2 * H + j];
            } else {
              double q = Rb ? Rb[2 * H + j] : 0;
              for (size_t k = 0; k < H; k++) {
                const double rk = act(&f[0], clipd(c, pre[H + k] + rec[H + k]));
                q += R[(2 * H + j) * H + k] * rk * h[k];
              }
              hpre = pre[2 * H + j] + q;
            }
            const double hh = act(&f[1], clipd(c, hpre));
            hn[j] = (1 - z) * hh + z * h[j];
          }
        }
        memcpy(h, hn, H * sizeof *h);
        memcpy(d->y + ((t * nd + dir) * c->batch + b) * H, h, H * sizeof *h);
      }
      memcpy(d->yh + (dir * c->batch + b) * H, h, H * sizeof *h);
      memcpy(d->yc + (dir * c->batch + b) * H, cs, H * sizeof *cs);
    }
  }
  free(h);
  free(cs);
  free(hn);
  free(pre);
  free(rec);
}

/* --- the model and the run -------------------------------------------------------------- */

typedef struct Feeds {
  const char* names[8];
  OnyxValue* values[8];
  size_t n;
} Feeds;

/* The values as the case's element type (owned by the caller). */
static void* typed(const Case* c, const double* v, size_t n) {
  if (c->elem == F64) {
    double* o = malloc((n ? n : 1) * sizeof *o);
    memcpy(o, v, n * sizeof *o);
    return o;
  }
  float* o = malloc((n ? n : 1) * sizeof *o);
  for (size_t i = 0; i < n; i++)
    o[i] = (float)v[i];
  return o;
}

/* A tensor of the model: a graph input fed with v (as_input) or an
 * initializer. */
static void add_tensor(OxTestModel* m, Feeds* f, const Case* c, const char* name, bool as_input,
                       int rank, const int64_t* dims, const double* v) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)dims[i];
  void* data = typed(c, v, n);
  if (as_input) {
    otm_input(m, name, c->elem, rank, dims);
    f->names[f->n] = name;
    ok(onyx_value_create_tensor((OnyxElemType)c->elem, dims, (size_t)rank, data,
                                n * (c->elem == F64 ? 8 : 4), &f->values[f->n]));
    f->n++;
  } else {
    otm_initializer(m, name, c->elem, rank, dims, data);
  }
  free(data);
}

static const char* op_name(const Case* c) {
  return c->kind == LSTM ? "LSTM" : c->kind == GRU ? "GRU" : "RNN";
}

static OxTestModel* build(const Case* c, const Data* d, Feeds* f) {
  const int64_t S = (int64_t)c->seq, B = (int64_t)c->batch, I = (int64_t)c->in, H = (int64_t)c->H,
                D = (int64_t)d->nd, G = (int64_t)d->G;
  OxTestModel* m = otm_new(14);
  const int64_t xd[3] = {c->layout ? B : S, c->layout ? S : B, I};
  add_tensor(m, f, c, "X", true, 3, xd, d->x);
  add_tensor(m, f, c, "W", c->weights_are_inputs, 3, (int64_t[]){D, G * H, I}, d->w);
  add_tensor(m, f, c, "R", c->weights_are_inputs, 3, (int64_t[]){D, G * H, H}, d->r);
  if (d->b) add_tensor(m, f, c, "B", c->weights_are_inputs, 2, (int64_t[]){D, 2 * G * H}, d->b);
  if (d->lens) otm_initializer(m, "L", I32, 1, (int64_t[]){B}, d->lens);
  const int64_t sd[3] = {c->layout ? B : D, c->layout ? D : B, H};
  if (d->h0) add_tensor(m, f, c, "H0", false, 3, sd, d->h0);
  if (d->c0) add_tensor(m, f, c, "C0", false, 3, sd, d->c0);
  if (d->p) add_tensor(m, f, c, "P", false, 2, (int64_t[]){D, 3 * H}, d->p);
  char ins[64];
  snprintf(ins, sizeof ins, "X,W,R,%s,%s,%s%s%s", d->b ? "B" : "", d->lens ? "L" : "",
           d->h0 ? "H0" : "", c->kind == LSTM ? (d->c0 ? ",C0" : ",") : "",
           c->kind == LSTM && d->p ? ",P" : "");
  OxTestNode* n = otm_node(m, op_name(c), "rnn0", ins, c->kind == LSTM ? "Y,Yh,Yc" : "Y,Yh");
  otm_attr_int(n, "hidden_size", H);
  otm_attr_string(n, "direction", c->direction);
  if (c->layout) otm_attr_int(n, "layout", 1);
  if (c->lbr) otm_attr_int(n, "linear_before_reset", 1);
  if (c->input_forget) otm_attr_int(n, "input_forget", 1);
  if (c->clip > 0) otm_attr_float(n, "clip", c->clip);
  if (c->acts[0]) {
    const size_t per = c->kind == LSTM ? 3 : c->kind == GRU ? 2 : 1;
    otm_attr_strings(n, "activations", per * d->nd, c->acts);
  }
  if (c->has_alpha) otm_attr_floats(n, "activation_alpha", 1, &c->alpha);
  if (c->has_beta) otm_attr_floats(n, "activation_beta", 1, &c->beta);
  const int64_t yd0[4] = {S, D, B, H}, yd1[4] = {B, S, D, H};
  otm_output(m, "Y", c->elem, 4, c->layout ? yd1 : yd0);
  otm_output(m, "Yh", c->elem, 3, sd);
  if (c->kind == LSTM) otm_output(m, "Yc", c->elem, 3, sd);
  return m;
}

static OnyxStatus* run_model(OxTestModel* m, const Feeds* f, int threads, uint64_t max_run_ms,
                             size_t n_out, OnyxValue** got) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, threads ? threads : 1));
  if (max_run_ms) ok(onyx_session_options_set_max_run_ms(o, max_run_ms));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  if (st) return st;
  const char* outs[3] = {"Y", "Yh", "Yc"};
  st = onyx_session_run(s, NULL, f->names, (const OnyxValue* const*)f->values, f->n, outs, n_out,
                        got);
  onyx_session_release(s);
  return st;
}

static double got_at(const Case* c, const OnyxValue* v, size_t i) {
  const void* p = onyx_tensor_data(onyx_value_tensor(v));
  return c->elem == F64 ? ((const double*)p)[i] : ((const float*)p)[i];
}

/* Compares output `what` (element index in the node's layout -> reference
 * index in layout 0 by `map`). */
static void expect_close(const Case* c, const char* what, const OnyxValue* v, const double* want,
                         size_t n, size_t (*map)(const Case*, size_t, size_t), size_t nd) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const double tol = c->elem == F64 ? 1e-9 : 3e-5;
  for (size_t i = 0; i < n; i++) {
    const double g = got_at(c, v, i), w = want[map(c, i, nd)];
    if (!(fabs(g - w) <= tol + tol * fabs(w)))
      fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, g, w);
  }
}

/* Y index in the node's layout -> layout 0 ([seq][nd][batch][H]). */
static size_t map_y(const Case* c, size_t i, size_t nd) {
  if (!c->layout) return i;
  const size_t H = c->H, j = i % H, dir = i / H % nd, t = i / H / nd % c->seq,
               b = i / H / nd / c->seq;
  return ((t * nd + dir) * c->batch + b) * H + j;
}

/* Y_h / Y_c index -> [nd][batch][H]. */
static size_t map_state(const Case* c, size_t i, size_t nd) {
  if (!c->layout) return i;
  const size_t H = c->H, j = i % H, dir = i / H % nd, b = i / H / nd;
  return (dir * c->batch + b) * H + j;
}

static void data_make(const Case* c, Data* d, uint64_t seed) {
  rng_state = seed;
  memset(d, 0, sizeof *d);
  d->nd = ndir(c);
  d->G = gates(c);
  const size_t nd = d->nd, G = d->G, H = c->H;
  const double ws = c->wscale > 0 ? c->wscale : 1.0 / sqrt((double)H);
  d->x = rand_vec(c->seq * c->batch * c->in, c->xscale > 0 ? c->xscale : 1.0);
  d->w = rand_vec(nd * G * H * c->in, ws);
  d->r = rand_vec(nd * G * H * H, ws);
  if (c->bias) d->b = rand_vec(nd * 2 * G * H, ws);
  if (c->h0) d->h0 = rand_vec(nd * c->batch * H, 0.8);
  if (c->c0) d->c0 = rand_vec(nd * c->batch * H, 1.5);
  if (c->peep) d->p = rand_vec(nd * 3 * H, 0.5);
  if (c->lens) {
    d->lens = malloc(c->batch * sizeof *d->lens);
    memcpy(d->lens, c->lens, c->batch * sizeof *d->lens);
  }
  d->y = malloc((c->seq * nd * c->batch * H + 1) * sizeof *d->y);
  d->yh = malloc((nd * c->batch * H + 1) * sizeof *d->yh);
  d->yc = malloc((nd * c->batch * H + 1) * sizeof *d->yc);
}

static void data_free(Data* d) {
  free(d->x);
  free(d->w);
  free(d->r);
  free(d->b);
  free(d->h0);
  free(d->c0);
  free(d->p);
  free(d->lens);
  free(d->y);
  free(d->yh);
  free(d->yc);
}

/* Runs the case (and, with threads > 1, again on one thread: the same
 * bits) and checks Y, Y_h and Y_c against the reference. */
static void check_case(const Case* c, uint64_t seed) {
  Data d;
  data_make(c, &d, seed);
  ref_run(c, &d);
  Feeds f = {0};
  OxTestModel* m = build(c, &d, &f);
  const size_t n_out = c->kind == LSTM ? 3 : 2, nd = d.nd;
  OnyxValue* got[3] = {0};
  ok(run_model(m, &f, c->threads, 0, n_out, got));
  const size_t ny = c->seq * nd * c->batch * c->H, ns = nd * c->batch * c->H;
  expect_close(c, "Y", got[0], d.y, ny, map_y, nd);
  expect_close(c, "Y_h", got[1], d.yh, ns, map_state, nd);
  if (c->kind == LSTM) expect_close(c, "Y_c", got[2], d.yc, ns, map_state, nd);
  if (c->threads > 1) {
    OnyxValue* one[3] = {0};
    ok(run_model(m, &f, 1, 0, n_out, one));
    for (size_t i = 0; i < n_out; i++) {
      const OnyxTensor *a = onyx_value_tensor(got[i]), *b = onyx_value_tensor(one[i]);
      const size_t bytes = onyx_tensor_elem_count(a) * (c->elem == F64 ? 8 : 4);
      assert_int_equal(onyx_tensor_elem_count(a), onyx_tensor_elem_count(b));
      assert_memory_equal(onyx_tensor_data(a), onyx_tensor_data(b), bytes);
    }
    onyx_values_release(one, n_out);
  }
  onyx_values_release(got, n_out);
  onyx_values_release(f.values, f.n);
  otm_free(m);
  data_free(&d);
}

/* --- cases ------------------------------------------------------------------------------ */

static void test_lstm_forward_b1_s17(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "forward",
                     .seq = 17,
                     .batch = 1,
                     .in = 7,
                     .H = 20,
                     .elem = F32,
                     .bias = true},
             1);
}

static void test_lstm_bidirectional_b3_lens(void** state) {
  (void)state;
  static const int32_t lens[3] = {17, 9, 1};
  Case c = {.kind = LSTM,
            .direction = "bidirectional",
            .seq = 17,
            .batch = 3,
            .in = 5,
            .H = 37,
            .elem = F32,
            .bias = true,
            .h0 = true,
            .c0 = true,
            .lens = lens};
  check_case(&c, 2);
  c.elem = F64; /* the reference path */
  check_case(&c, 2);
}

/* Weights as graph inputs (packed per run), layout 1, peepholes, an empty
 * sequence (its Y_h/Y_c are the initial states). */
static void test_lstm_layout1_weights_as_inputs(void** state) {
  (void)state;
  static const int32_t lens[3] = {4, 17, 0};
  check_case(&(Case){.kind = LSTM,
                     .direction = "bidirectional",
                     .seq = 17,
                     .batch = 3,
                     .in = 6,
                     .H = 33,
                     .layout = 1,
                     .elem = F32,
                     .bias = true,
                     .h0 = true,
                     .c0 = true,
                     .peep = true,
                     .lens = lens,
                     .weights_are_inputs = true},
             3);
}

static void test_lstm_reverse_peephole_input_forget_clip(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "reverse",
                     .seq = 6,
                     .batch = 2,
                     .in = 4,
                     .H = 16,
                     .elem = F32,
                     .bias = true,
                     .c0 = true,
                     .peep = true,
                     .input_forget = 1,
                     .clip = 0.7f,
                     .xscale = 3},
             4);
  check_case(&(Case){.kind = LSTM,
                     .direction = "forward",
                     .seq = 6,
                     .batch = 2,
                     .in = 4,
                     .H = 16,
                     .elem = F32,
                     .bias = true,
                     .peep = true,
                     .acts = {"HardSigmoid", "Tanh", "Softsign"},
                     .alpha = 0.3f,
                     .beta = 0.4f,
                     .has_alpha = true,
                     .has_beta = true},
             5);
}

/* Five rows (a group of four and one), 65 hidden units (two 64-column
 * blocks, the second with one), one step. */
static void test_lstm_seq1_b5_h65(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "forward",
                     .seq = 1,
                     .batch = 5,
                     .in = 3,
                     .H = 65,
                     .elem = F32,
                     .bias = true,
                     .h0 = true,
                     .c0 = true},
             6);
}

/* The zoo models' shape (input 128, hidden 256), shorter. */
static void test_lstm_bidirectional_h256(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "bidirectional",
                     .seq = 17,
                     .batch = 1,
                     .in = 128,
                     .H = 256,
                     .elem = F32,
                     .bias = true},
             7);
}

/* Inputs of magnitude 40 saturate every gate (sigmoid 0 or 1, tanh +-1). */
static void test_lstm_saturated(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "forward",
                     .seq = 9,
                     .batch = 2,
                     .in = 5,
                     .H = 24,
                     .elem = F32,
                     .bias = true,
                     .wscale = 1.0,
                     .xscale = 40},
             8);
}

static void test_gru_bidirectional_lens(void** state) {
  (void)state;
  static const int32_t lens[3] = {17, 3, 10};
  Case c = {.kind = GRU,
            .direction = "bidirectional",
            .seq = 17,
            .batch = 3,
            .in = 5,
            .H = 19,
            .elem = F32,
            .bias = true,
            .h0 = true,
            .lens = lens};
  check_case(&c, 9); /* linear_before_reset = 0: (r ⊙ h) R_h^T */
  c.lbr = 1;
  c.layout = 1;
  check_case(&c, 10);
  c.weights_are_inputs = true;
  c.clip = 0.9f;
  check_case(&c, 11);
}

static void test_gru_reverse_seq1(void** state) {
  (void)state;
  check_case(&(Case){.kind = GRU,
                     .direction = "reverse",
                     .seq = 1,
                     .batch = 1,
                     .in = 4,
                     .H = 70,
                     .elem = F32,
                     .h0 = true},
             12);
  check_case(&(Case){.kind = GRU,
                     .direction = "forward",
                     .seq = 17,
                     .batch = 5,
                     .in = 9,
                     .H = 130,
                     .elem = F32,
                     .bias = true,
                     .lbr = 1},
             13);
}

static void test_rnn_activations(void** state) {
  (void)state;
  static const int32_t lens[3] = {2, 17, 11};
  check_case(&(Case){.kind = RNN,
                     .direction = "bidirectional",
                     .seq = 17,
                     .batch = 3,
                     .in = 4,
                     .H = 21,
                     .elem = F32,
                     .bias = true,
                     .h0 = true,
                     .lens = lens,
                     .acts = {"LeakyRelu", "Tanh"},
                     .alpha = 0.2f,
                     .has_alpha = true},
             14);
  check_case(&(Case){.kind = RNN,
                     .direction = "forward",
                     .seq = 17,
                     .batch = 1,
                     .in = 4,
                     .H = 48,
                     .layout = 1,
                     .elem = F32},
             15);
}

/* Two threads: directions in parallel (bidirectional), a step's product
 * split by column blocks (one direction, batch 2 x 512 x 128 products). */
static void test_threads_same_bits(void** state) {
  (void)state;
  check_case(&(Case){.kind = LSTM,
                     .direction = "bidirectional",
                     .seq = 17,
                     .batch = 1,
                     .in = 32,
                     .H = 96,
                     .elem = F32,
                     .bias = true,
                     .threads = 2},
             16);
  check_case(&(Case){.kind = LSTM,
                     .direction = "forward",
                     .seq = 17,
                     .batch = 2,
                     .in = 16,
                     .H = 128,
                     .elem = F32,
                     .bias = true,
                     .threads = 2},
             17);
  check_case(&(Case){.kind = GRU,
                     .direction = "forward",
                     .seq = 17,
                     .batch = 3,
                     .in = 16,
                     .H = 200,
                     .elem = F32,
                     .bias = true,
                     .threads = 2},
             18);
}

/* Sigmoid and Tanh alone: an RNN with W = I and R = 0 gives Y[t] =
 * f(X[t]) exactly up to f, over a grid of inputs (vector bodies and tails
 * of 37 values). Within 4 ULP (of the float format at the double value). */
static void check_activation(const char* name, double lo, double hi) {
  enum { H = 37, S = 64 };
  Case c = {.kind = RNN,
            .direction = "forward",
            .seq = S,
            .batch = 1,
            .in = H,
            .H = H,
            .elem = F32,
            .acts = {name}};
  Data d;
  data_make(&c, &d, 21);
  for (size_t i = 0; i < (size_t)S * H; i++) {
    const double u = (double)i / (S * H - 1);
    d.x[i] = (double)(float)(lo + (hi - lo) * u);
  }
  d.x[0] = 1e-30; /* tiny arguments: tanh(x) = x to the last bit */
  d.x[1] = -3e-6;
  d.x[2] = 0.4999999f; /* both sides of Tanh's switch at 0.5 */
  d.x[3] = 0.5;
  for (size_t i = 0; i < (size_t)H * H; i++) {
    d.w[i] = i / H == i % H ? 1.0 : 0.0;
    d.r[i] = 0.0;
  }
  Feeds f = {0};
  OxTestModel* m = build(&c, &d, &f);
  OnyxValue* got[2] = {0};
  ok(run_model(m, &f, 1, 0, 2, got));
  const float* y = onyx_tensor_data(onyx_value_tensor(got[0]));
  double worst = 0;
  for (size_t i = 0; i < (size_t)S * H; i++) {
    const double want = ref_act(name, 0, 0, d.x[i]);
    int e;
    frexp(want, &e); /* |want| in [2^(e-1), 2^e): one ULP is 2^(e-24) */
    const double ulps = fabs(y[i] - want) / ldexp(1.0, e - 24);
    if (ulps > worst) worst = ulps;
    if (!(ulps <= 4.0)) fail_msg("%s(%.9g): got %.9g, want %.9g", name, d.x[i], y[i], want);
  }
  print_message("%s: worst %.2f ULP over [%g, %g]\n", name, worst, lo, hi);
  onyx_values_release(got, 2);
  onyx_values_release(f.values, f.n);
  otm_free(m);
  data_free(&d);
}

static void test_sigmoid_tanh_accuracy(void** state) {
  (void)state;
  check_activation("Tanh", -12, 12);
  check_activation("Tanh", -0.7, 0.7);
  check_activation("Sigmoid", -80, 80);
  check_activation("Sigmoid", -3, 3);
}

/* A long sequence under a 1 ms run limit: the kernel polls once per step
 * and stops with ONYX_CANCELLED naming the node. On a loaded machine the
 * millisecond can pass before the run reaches the node; the executor then
 * stops before it, which names the step instead. */
static void check_cancelled(int elem) {
  const Case c = {.kind = RNN,
                  .direction = "forward",
                  .seq = 20000,
                  .batch = 1,
                  .in = 2,
                  .H = 256,
                  .elem = elem};
  Data d;
  data_make(&c, &d, 19);
  Feeds f = {0};
  OxTestModel* m = build(&c, &d, &f);
  OnyxValue* got[2] = {0};
  OnyxStatus* st = run_model(m, &f, 1, 1, 2, got);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_CANCELLED);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "max_run_ms") || (!strstr(msg, "rnn0") && !strstr(msg, "before step 0")))
    fail_msg("message: %s", msg);
  onyx_status_release(st);
  onyx_values_release(f.values, f.n);
  otm_free(m);
  data_free(&d);
}

static void test_cancelled(void** state) {
  (void)state;
  check_cancelled(F32);
  check_cancelled(F64); /* the reference path */
}

/* sequence_lens past the sequence: an error naming the node and the input. */
static void test_bad_sequence_lens(void** state) {
  (void)state;
  static const int32_t lens[2] = {3, 5};
  const Case c = {.kind = GRU,
                  .direction = "forward",
                  .seq = 4,
                  .batch = 2,
                  .in = 3,
                  .H = 5,
                  .elem = F32,
                  .lens = lens};
  Data d;
  data_make(&c, &d, 20);
  Feeds f = {0};
  OxTestModel* m = build(&c, &d, &f);
  OnyxValue* got[2] = {0};
  OnyxStatus* st = run_model(m, &f, 1, 0, 2, got);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "rnn0") || !strstr(msg, "sequence_lens[1] = 5")) fail_msg("message: %s", msg);
  onyx_status_release(st);
  onyx_values_release(f.values, f.n);
  otm_free(m);
  data_free(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lstm_forward_b1_s17),
      cmocka_unit_test(test_lstm_bidirectional_b3_lens),
      cmocka_unit_test(test_lstm_layout1_weights_as_inputs),
      cmocka_unit_test(test_lstm_reverse_peephole_input_forget_clip),
      cmocka_unit_test(test_lstm_seq1_b5_h65),
      cmocka_unit_test(test_lstm_bidirectional_h256),
      cmocka_unit_test(test_lstm_saturated),
      cmocka_unit_test(test_gru_bidirectional_lens),
      cmocka_unit_test(test_gru_reverse_seq1),
      cmocka_unit_test(test_rnn_activations),
      cmocka_unit_test(test_threads_same_bits),
      cmocka_unit_test(test_sigmoid_tanh_accuracy),
      cmocka_unit_test(test_cancelled),
      cmocka_unit_test(test_bad_sequence_lens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
