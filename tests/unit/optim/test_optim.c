/* test_optim.c — the fused multi-tensor optimizer ops of com.onyx.training
 * (SGDOptimizer, AdamWOptimizer, LambOptimizer, ClipGradNorm) on the CPU
 * provider, through a session. Each expected value comes from a plain-C
 * float64 implementation written here of the PyTorch formula
 * (torch.optim.SGD, torch.optim.AdamW, the LAMB paper's Algorithm 2,
 * torch.nn.utils.clip_grad_norm_), run for several steps over tensors of
 * several sizes (empty, one element, a matrix, one past the kernel's chunk
 * size). Also: bitwise-equal results with 1 and 4 threads, and bad input
 * that must be an error naming the node. */
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

#define F32      ONYX_ELEM_FLOAT32
#define F64      ONYX_ELEM_FLOAT64
#define TRAINING "com.onyx.training"
#define MAXT     6

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double rnd(double lo, double hi) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return lo + (hi - lo) * ((double)(uint32_t)(rng >> 33) / 2147483648.0);
}

/* --- A case: n tensors of these shapes, `groups` input groups -------------------- */

typedef struct Shape {
  int rank;
  int64_t dims[2];
} Shape;

static size_t shape_count(const Shape* s) {
  size_t c = 1;
  for (int i = 0; i < s->rank; i++)
    c *= (size_t)s->dims[i];
  return c;
}

/* Sizes 0, 1, 3x5 and 16385 (one past the kernel's 16384-element chunk). */
static const Shape shapes4[] = {{1, {0}}, {1, {1}}, {2, {3, 5}}, {1, {16385}}};

typedef struct Attr {
  const char* name;
  double f;
  bool is_int;
} Attr;

typedef struct Case {
  const char* op;
  int elem;
  size_t n;
  const Shape* shapes;
  size_t groups;     /* input groups after the scalars: P, G[, M[, V]] */
  size_t out_groups; /* output groups */
  Attr attrs[6];
  int threads;
} Case;

/* The values of one run's tensors, float64 (rounded to float32 for float32
 * runs, so that the reference sees the kernel's inputs). */
typedef struct State {
  double* t[4][MAXT]; /* P, G, M, V */
} State;

static void round_state(int elem, State* s, const Case* c) {
  if (elem != F32) return;
  for (size_t g = 0; g < 4; g++)
    for (size_t k = 0; k < c->n; k++)
      if (s->t[g][k])
        for (size_t i = 0; i < shape_count(&c->shapes[k]); i++)
          s->t[g][k][i] = (float)s->t[g][k][i];
}

static OnyxSession* make_session(const Case* c, const char* node_name) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  static const char* const gname[] = {"P", "G", "M", "V"};
  static const char* const oname[] = {"Po", "Mo", "Vo"};
  const bool clip = !strcmp(c->op, "ClipGradNorm");
  char ins[2048] = "", outs[2048] = "", nm[32];
  otm_input(m, clip ? "max_norm" : "lr", c->elem, 0, NULL);
  strcat(ins, clip ? "max_norm" : "lr,step");
  if (!clip) otm_input(m, "step", ONYX_ELEM_INT64, 0, NULL);
  for (size_t g = 0; g < c->groups; g++)
    for (size_t k = 0; k < c->n; k++) {
      snprintf(nm, sizeof nm, "%s%zu", gname[clip ? 1 : g], k + 1);
      otm_input(m, nm, c->elem, c->shapes[k].rank, c->shapes[k].dims);
      strcat(ins, ",");
      strcat(ins, nm);
    }
  for (size_t g = 0; g < c->out_groups; g++)
    for (size_t k = 0; k < c->n; k++) {
      snprintf(nm, sizeof nm, "%s%zu", clip ? "Go" : oname[g], k + 1);
      otm_output(m, nm, c->elem, -1, NULL);
      if (*outs) strcat(outs, ",");
      strcat(outs, nm);
    }
  if (clip) {
    otm_output(m, "total_norm", c->elem, -1, NULL);
    strcat(outs, ",total_norm");
  }
  OxTestNode* node = otm_node(m, c->op, node_name, ins, outs);
  otm_node_domain(node, TRAINING);
  for (size_t a = 0; a < 6 && c->attrs[a].name; a++) {
    if (c->attrs[a].is_int)
      otm_attr_int(node, c->attrs[a].name, (int64_t)c->attrs[a].f);
    else
      otm_attr_float(node, c->attrs[a].name, (float)c->attrs[a].f);
  }
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  if (c->threads > 0) ok(onyx_session_options_set_threads(o, c->threads));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

static OnyxValue* make_value(int elem, const Shape* sh, const double* v) {
  const size_t n = shape_count(sh), es = elem == F32 ? 4 : 8;
  void* p = malloc(n ? n * es : 1);
  for (size_t i = 0; i < n; i++) {
    if (elem == F32)
      ((float*)p)[i] = (float)v[i];
    else
      ((double*)p)[i] = v[i];
  }
  OnyxValue* out = NULL;
  ok(onyx_value_create_tensor((OnyxElemType)elem, sh->dims, (size_t)sh->rank, p, n * es, &out));
  free(p);
  return out;
}

static double value_at(const OnyxValue* v, size_t i) {
  const OnyxTensor* t = onyx_value_tensor(v);
  return onyx_tensor_elem_type(t) == F32 ? ((const float*)onyx_tensor_data(t))[i]
                                         : ((const double*)onyx_tensor_data(t))[i];
}

/* One run: feeds scalar (lr or max_norm), step and the state's groups;
 * returns the outputs (out_groups * n, then total_norm for ClipGradNorm). */
static OnyxStatus* run_step_status(OnyxSession* s, const Case* c, double scalar, int64_t step,
                                   const State* in, OnyxValue** got) {
  const bool clip = !strcmp(c->op, "ClipGradNorm");
  static const char* const gname[] = {"P", "G", "M", "V"};
  static const char* const oname[] = {"Po", "Mo", "Vo"};
  OnyxValue* vals[2 + 4 * MAXT];
  char names_buf[2 + 4 * MAXT][32];
  const char* names[2 + 4 * MAXT];
  size_t nv = 0;
  const Shape scalar_shape = {0, {0}};
  vals[nv] = make_value(c->elem, &scalar_shape, &scalar);
  names[nv++] = clip ? "max_norm" : "lr";
  if (!clip) {
    ok(onyx_value_create_tensor(ONYX_ELEM_INT64, NULL, 0, &step, sizeof step, &vals[nv]));
    names[nv++] = "step";
  }
  for (size_t g = 0; g < c->groups; g++)
    for (size_t k = 0; k < c->n; k++) {
      const size_t gi = clip ? 1 : g;
      snprintf(names_buf[nv], sizeof names_buf[nv], "%s%zu", gname[gi], k + 1);
      names[nv] = names_buf[nv];
      vals[nv++] = make_value(c->elem, &c->shapes[k], in->t[gi][k]);
    }
  char onames_buf[3 * MAXT + 1][32];
  const char* onames[3 * MAXT + 1];
  size_t no = 0;
  for (size_t g = 0; g < c->out_groups; g++)
    for (size_t k = 0; k < c->n; k++) {
      snprintf(onames_buf[no], sizeof onames_buf[no], "%s%zu", clip ? "Go" : oname[g], k + 1);
      onames[no] = onames_buf[no];
      no++;
    }
  if (clip) onames[no++] = "total_norm";
  OnyxStatus* st =
      onyx_session_run(s, NULL, names, (const OnyxValue* const*)vals, nv, onames, no, got);
  onyx_values_release(vals, nv);
  return st;
}

static void run_step(OnyxSession* s, const Case* c, double scalar, int64_t step, const State* in,
                     OnyxValue** got) {
  ok(run_step_status(s, c, scalar, step, in, got));
}

static State new_state(const Case* c, bool zero_p0) {
  State s = {0};
  for (size_t g = 0; g < 4; g++)
    for (size_t k = 0; k < c->n; k++) {
      const size_t n = shape_count(&c->shapes[k]);
      s.t[g][k] = malloc((n ? n : 1) * sizeof(double));
      for (size_t i = 0; i < n; i++)
        s.t[g][k][i] = g == 3 ? rnd(0, 0.5) : rnd(-1, 1); /* V >= 0 */
      if (zero_p0 && g == 0 && k == 2)
        for (size_t i = 0; i < n; i++)
          s.t[g][k][i] = 0;
    }
  round_state(c->elem, &s, c);
  return s;
}

static State copy_state(const Case* c, const State* from) {
  State s = {0};
  for (size_t g = 0; g < 4; g++)
    for (size_t k = 0; k < c->n; k++) {
      const size_t n = shape_count(&c->shapes[k]);
      s.t[g][k] = malloc((n ? n : 1) * sizeof(double));
      if (n) memcpy(s.t[g][k], from->t[g][k], n * sizeof(double));
    }
  return s;
}

static void free_state(const Case* c, State* s) {
  for (size_t g = 0; g < 4; g++)
    for (size_t k = 0; k < c->n; k++)
      free(s->t[g][k]);
}

static double attr(const Case* c, const char* name, double def) {
  for (size_t a = 0; a < 6 && c->attrs[a].name; a++)
    if (!strcmp(c->attrs[a].name, name))
      return c->attrs[a].is_int ? c->attrs[a].f : (float)c->attrs[a].f;
  return (float)def; /* attributes are float32 */
}

/* --- References (float64) --------------------------------------------------------- */

/* torch.optim.SGD, one step: ref holds P, G, M; step 0 is the first. */
static void ref_sgd(const Case* c, State* r, double lr, int64_t step) {
  const double mom = attr(c, "momentum", 0), damp = attr(c, "dampening", 0),
               wd = attr(c, "weight_decay", 0);
  const bool nesterov = attr(c, "nesterov", 0) != 0;
  for (size_t k = 0; k < c->n; k++)
    for (size_t i = 0; i < shape_count(&c->shapes[k]); i++) {
      double* p = &r->t[0][k][i];
      double d = r->t[1][k][i];
      if (wd != 0) d += wd * *p;
      if (mom != 0) {
        double* buf = &r->t[2][k][i];
        *buf = step == 0 ? d : mom * *buf + (1 - damp) * d;
        d = nesterov ? d + mom * *buf : *buf;
      }
      *p -= lr * d;
    }
}

/* torch.optim.AdamW, step t = step + 1. */
static void ref_adamw(const Case* c, State* r, double lr, int64_t step) {
  const double b1 = attr(c, "beta1", 0.9), b2 = attr(c, "beta2", 0.999),
               eps = attr(c, "epsilon", 1e-8), wd = attr(c, "weight_decay", 0.01);
  const double t = (double)step + 1;
  const double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
  for (size_t k = 0; k < c->n; k++)
    for (size_t i = 0; i < shape_count(&c->shapes[k]); i++) {
      double *p = &r->t[0][k][i], g = r->t[1][k][i], *m = &r->t[2][k][i], *v = &r->t[3][k][i];
      *p *= 1 - lr * wd;
      *m = b1 * *m + (1 - b1) * g;
      *v = b2 * *v + (1 - b2) * g * g;
      *p -= lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + eps);
    }
}

/* LAMB (You et al., Algorithm 2, phi = identity), step t = step + 1. */
static void ref_lamb(const Case* c, State* r, double lr, int64_t step) {
  const double b1 = attr(c, "beta1", 0.9), b2 = attr(c, "beta2", 0.999),
               eps = attr(c, "epsilon", 1e-6), wd = attr(c, "weight_decay", 0);
  const double t = (double)step + 1;
  for (size_t k = 0; k < c->n; k++) {
    const size_t n = shape_count(&c->shapes[k]);
    double* u = malloc((n ? n : 1) * sizeof *u);
    double pn = 0, un = 0;
    for (size_t i = 0; i < n; i++) {
      double p = r->t[0][k][i], g = r->t[1][k][i], *m = &r->t[2][k][i], *v = &r->t[3][k][i];
      *m = b1 * *m + (1 - b1) * g;
      *v = b2 * *v + (1 - b2) * g * g;
      const double mh = *m / (1 - pow(b1, t)), vh = *v / (1 - pow(b2, t));
      u[i] = mh / (sqrt(vh) + eps) + wd * p;
      pn += p * p;
      un += u[i] * u[i];
    }
    pn = sqrt(pn);
    un = sqrt(un);
    const double ratio = pn > 0 && un > 0 ? pn / un : 1;
    for (size_t i = 0; i < n; i++)
      r->t[0][k][i] -= lr * ratio * u[i];
    free(u);
  }
}

typedef void (*RefFn)(const Case*, State*, double, int64_t);

/* Output group og of `got` against the reference group rg, within tol
 * relative to 1 + |want|. */
static void expect_group(const Case* c, OnyxValue** got, size_t og, const State* r, size_t rg,
                         double tol, const char* what) {
  for (size_t k = 0; k < c->n; k++) {
    const OnyxValue* v = got[og * c->n + k];
    const OnyxTensor* t = onyx_value_tensor(v);
    assert_int_equal(onyx_tensor_rank(t), c->shapes[k].rank);
    const size_t n = shape_count(&c->shapes[k]);
    assert_int_equal(onyx_tensor_elem_count(t), n);
    for (size_t i = 0; i < n; i++) {
      const double g = value_at(v, i), w = r->t[rg][k][i];
      if (!(fabs(g - w) <= tol * (1 + fabs(w))))
        fail_msg("%s %s: tensor %zu element %zu: got %.9g, want %.9g", c->op, what, k, i, g, w);
    }
  }
}

/* Runs `steps` steps from `step0`, feeding the outputs back as the next
 * state, against the reference. */
static void check_steps(const Case* c, RefFn ref, int64_t step0, int steps, double lr,
                        bool zero_p0) {
  OnyxSession* s = make_session(c, "opt");
  State st = new_state(c, zero_p0);
  State r = copy_state(c, &st);
  const double tol = c->elem == F32 ? 2e-5 : 1e-12;
  static const size_t ref_group[] = {0, 2, 3};
  for (int it = 0; it < steps; it++) {
    for (size_t k = 0; k < c->n; k++) /* fresh gradients each step */
      for (size_t i = 0; i < shape_count(&c->shapes[k]); i++)
        st.t[1][k][i] = r.t[1][k][i] = c->elem == F32 ? (float)rnd(-1, 1) : rnd(-1, 1);
    OnyxValue* got[3 * MAXT] = {0};
    run_step(s, c, lr, step0 + it, &st, got);
    ref(c, &r, lr, step0 + it);
    for (size_t g = 0; g < c->out_groups; g++)
      expect_group(c, got, g, &r, ref_group[g], tol, g == 0 ? "P'" : g == 1 ? "M'" : "V'");
    /* The kernel's own outputs are the next step's state. */
    for (size_t g = 0; g < c->out_groups; g++)
      for (size_t k = 0; k < c->n; k++)
        for (size_t i = 0; i < shape_count(&c->shapes[k]); i++)
          st.t[ref_group[g]][k][i] = value_at(got[g * c->n + k], i);
    onyx_values_release(got, c->out_groups * c->n);
  }
  free_state(c, &st);
  free_state(c, &r);
  onyx_session_release(s);
}

/* --- SGD ------------------------------------------------------------------------------ */

static void test_sgd_plain(void** unused) {
  Case c = {"SGDOptimizer", F32, 4, shapes4, 2, 1, {{"n", 4, true}}, 0};
  check_steps(&c, ref_sgd, 0, 3, 0.1, false);
  c.attrs[1] = (Attr){"weight_decay", 0.05, false};
  check_steps(&c, ref_sgd, 0, 3, 0.1, false);
}

static void test_sgd_momentum(void** unused) {
  Case c = {"SGDOptimizer",
            F32,
            4,
            shapes4,
            3,
            2,
            {{"n", 4, true},
             {"momentum", 0.9, false},
             {"dampening", 0.25, false},
             {"weight_decay", 0.01, false}},
            0};
  check_steps(&c, ref_sgd, 0, 4, 0.05, false); /* step 0: buf = d */
  check_steps(&c, ref_sgd, 7, 2, 0.05, false);
  c.elem = F64;
  check_steps(&c, ref_sgd, 0, 3, 0.05, false);
}

static void test_sgd_nesterov(void** unused) {
  Case c = {"SGDOptimizer",
            F32,
            4,
            shapes4,
            3,
            2,
            {{"n", 4, true},
             {"momentum", 0.8, false},
             {"nesterov", 1, true},
             {"weight_decay", 0.001, false}},
            0};
  check_steps(&c, ref_sgd, 0, 4, 0.05, false);
}

/* --- AdamW, LAMB ------------------------------------------------------------------------ */

static void test_adamw(void** unused) {
  Case c = {"AdamWOptimizer", F32, 4, shapes4, 4, 3, {{"n", 4, true}}, 0};
  check_steps(&c, ref_adamw, 0, 4, 1e-2, false);
  check_steps(&c, ref_adamw, 100, 2, 1e-2, false);
  Case d = {"AdamWOptimizer",
            F64,
            4,
            shapes4,
            4,
            3,
            {{"n", 4, true},
             {"beta1", 0.8, false},
             {"beta2", 0.99, false},
             {"epsilon", 1e-6, false},
             {"weight_decay", 0.1, false}},
            0};
  check_steps(&d, ref_adamw, 0, 3, 3e-3, false);
}

static void test_lamb(void** unused) {
  Case c = {
      "LambOptimizer", F32, 4, shapes4, 4, 3, {{"n", 4, true}, {"weight_decay", 0.01, false}}, 0};
  check_steps(&c, ref_lamb, 0, 3, 1e-2, false);
  check_steps(&c, ref_lamb, 0, 2, 1e-2, true); /* tensor 3's P is 0: ratio 1 */
  c.elem = F64;
  check_steps(&c, ref_lamb, 5, 3, 1e-2, false);
}

/* --- ClipGradNorm ---------------------------------------------------------------------- */

static void check_clip(int elem, double max_norm, bool expect_scaled) {
  Case c = {"ClipGradNorm", elem, 4, shapes4, 1, 1, {{"n", 4, true}}, 0};
  OnyxSession* s = make_session(&c, "clip");
  State st = new_state(&c, false);
  OnyxValue* got[MAXT + 1] = {0};
  run_step(s, &c, max_norm, 0, &st, got);
  double sq = 0;
  for (size_t k = 0; k < c.n; k++)
    for (size_t i = 0; i < shape_count(&c.shapes[k]); i++)
      sq += st.t[1][k][i] * st.t[1][k][i];
  const double total = sqrt(sq), coef = max_norm / (total + 1e-6);
  assert_true(expect_scaled == (coef < 1));
  const double tol = elem == F32 ? 1e-6 : 1e-13;
  const double tn = value_at(got[c.n], 0);
  if (!(fabs(tn - total) <= tol * total)) fail_msg("total_norm %.12g, want %.12g", tn, total);
  for (size_t k = 0; k < c.n; k++)
    for (size_t i = 0; i < shape_count(&c.shapes[k]); i++)
      st.t[1][k][i] *= coef < 1 ? coef : 1;
  expect_group(&c, got, 0, &st, 1, elem == F32 ? 1e-6 : 1e-14, "G'");
  onyx_values_release(got, c.n + 1);
  free_state(&c, &st);
  onyx_session_release(s);
}

static void test_clip(void** unused) {
  /* The 16401 values in [-1, 1) have a norm near sqrt(16401 / 3) ~ 74. */
  check_clip(F32, 1000, false);
  check_clip(F32, 5, true);
  check_clip(F64, 1000, false);
  check_clip(F64, 0.5, true);
  /* An infinite max_norm clips nothing and still reports the norm. */
  check_clip(F32, INFINITY, false);
  check_clip(F64, INFINITY, false);
}

/* --- Determinism over thread counts -------------------------------------------------------- */

static const Shape shapes_big[] = {{1, {100003}}, {2, {7, 3}}, {1, {40000}}};

/* The outputs of one step with `threads` threads, as bytes. */
static void outputs_bytes(Case* c, int threads, unsigned char** out, size_t* len) {
  c->threads = threads;
  rng = 42;
  OnyxSession* s = make_session(c, "opt");
  State st = new_state(c, false);
  OnyxValue* got[3 * MAXT + 1] = {0};
  const bool clip = !strcmp(c->op, "ClipGradNorm");
  const size_t no = c->out_groups * c->n + (clip ? 1 : 0);
  run_step(s, c, clip ? 10.0 : 1e-2, 3, &st, got);
  *len = 0;
  *out = NULL;
  for (size_t o = 0; o < no; o++) {
    const OnyxTensor* t = onyx_value_tensor(got[o]);
    const size_t b = onyx_tensor_elem_count(t) * (c->elem == F32 ? 4 : 8);
    *out = realloc(*out, *len + b + 1);
    memcpy(*out + *len, onyx_tensor_data(t), b);
    *len += b;
  }
  onyx_values_release(got, no);
  free_state(c, &st);
  onyx_session_release(s);
}

static void test_threads(void** unused) {
  Case cases[] = {
      {"AdamWOptimizer", F32, 3, shapes_big, 4, 3, {{"n", 3, true}}, 0},
      {"LambOptimizer", F32, 3, shapes_big, 4, 3, {{"n", 3, true}}, 0},
      {"ClipGradNorm", F32, 3, shapes_big, 1, 1, {{"n", 3, true}}, 0},
      {"SGDOptimizer", F64, 3, shapes_big, 3, 2, {{"n", 3, true}, {"momentum", 0.9, false}}, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char *a, *b;
    size_t la, lb;
    outputs_bytes(&cases[i], 1, &a, &la);
    outputs_bytes(&cases[i], 4, &b, &lb);
    assert_int_equal(la, lb);
    if (memcmp(a, b, la)) fail_msg("%s: 1 and 4 threads differ", cases[i].op);
    free(a);
    free(b);
  }
}

/* --- Bad input -------------------------------------------------------------------------- */

/* A model whose creation must fail with a message naming node 'bad_opt'
 * and containing `what`. */
static void expect_create_error(OxTestModel* m, const char* what) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  if (!st) {
    onyx_session_release(s);
    fail_msg("expected an error mentioning '%s'", what);
  }
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "bad_opt") || !strstr(msg, what))
    fail_msg("error '%s' should name node 'bad_opt' and mention '%s'", msg, what);
  onyx_status_release(st);
}

static OxTestModel* bad_model(const char* op, int64_t n, const char* ins, const char* outs,
                              const int64_t* g1_dims, bool nesterov) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "lr", F32, 0, NULL);
  otm_input(m, "step", ONYX_ELEM_INT64, 0, NULL);
  const int64_t d4[] = {4};
  static const char* const names[] = {"P1", "P2", "G1", "G2", "M1", "M2", "V1", "V2"};
  for (size_t i = 0; i < 8; i++)
    otm_input(m, names[i], F32, 1, (!strcmp(names[i], "G1") && g1_dims) ? g1_dims : d4);
  OxTestNode* node = otm_node(m, op, "bad_opt", ins, outs);
  otm_node_domain(node, TRAINING);
  otm_attr_int(node, "n", n);
  if (nesterov) otm_attr_int(node, "nesterov", 1);
  otm_output(m, "Po1", F32, -1, NULL);
  return m;
}

static void test_bad_input(void** unused) {
  /* n = 2 but three tensors per group's worth of inputs (AdamW needs 2 + 4n). */
  expect_create_error(
      bad_model("AdamWOptimizer", 2, "lr,step,P1,P2,G1,G2,M1,M2,V1,V2,V2,V2", "Po1", NULL, false),
      "inputs");
  expect_create_error(bad_model("SGDOptimizer", 3, "lr,step,P1,P2,G1,G2", "Po1", NULL, false),
                      "inputs");
  /* G1 of 5 elements against P1 of 4. */
  const int64_t d5[] = {5};
  expect_create_error(
      bad_model("AdamWOptimizer", 2, "lr,step,P1,P2,G1,G2,M1,M2,V1,V2", "Po1", d5, false), "G_1");
  expect_create_error(bad_model("SGDOptimizer", 2, "lr,step,P1,P2,G1,G2", "Po1", d5, false), "G_1");
  /* Too many outputs: SGD without momentum has n outputs. */
  expect_create_error(bad_model("SGDOptimizer", 2, "lr,step,P1,P2,G1,G2", "Po1,a,b", NULL, false),
                      "outputs");
  /* nesterov without momentum */
  expect_create_error(bad_model("SGDOptimizer", 2, "lr,step,P1,P2,G1,G2", "Po1", NULL, true),
                      "nesterov");
}

/* Run-time scalars out of range: errors naming the node and the input. */
static void test_bad_scalars(void** unused) {
  Case c = {"AdamWOptimizer", F32, 4, shapes4, 4, 3, {{"n", 4, true}}, 0};
  OnyxSession* s = make_session(&c, "bad_step");
  State st = new_state(&c, false);
  const struct {
    double lr;
    int64_t step;
    const char* what;
  } bad[] = {{1e-3, -1, "step"},
             {1e-3, INT64_MAX, "step"},
             {-1e-3, 0, "lr"},
             {NAN, 0, "lr"},
             {INFINITY, 0, "lr"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    OnyxValue* got[3 * MAXT] = {0};
    OnyxStatus* e = run_step_status(s, &c, bad[k].lr, bad[k].step, &st, got);
    assert_non_null(e);
    const char* msg = onyx_status_message(e);
    if (!strstr(msg, "bad_step") || !strstr(msg, bad[k].what))
      fail_msg("error '%s' should name node 'bad_step' and mention '%s'", msg, bad[k].what);
    onyx_status_release(e);
  }
  free_state(&c, &st);
  onyx_session_release(s);
  Case clip = {"ClipGradNorm", F32, 4, shapes4, 1, 1, {{"n", 4, true}}, 0};
  s = make_session(&clip, "bad_clip");
  st = new_state(&clip, false);
  OnyxValue* got[MAXT + 1] = {0};
  const double bad_norms[] = {-1.0, NAN, -INFINITY};
  for (size_t k = 0; k < sizeof bad_norms / sizeof bad_norms[0]; k++) {
    OnyxStatus* e = run_step_status(s, &clip, bad_norms[k], 0, &st, got);
    assert_non_null(e);
    if (!strstr(onyx_status_message(e), "bad_clip") || !strstr(onyx_status_message(e), "max_norm"))
      fail_msg("error '%s' should name node 'bad_clip' and max_norm", onyx_status_message(e));
    onyx_status_release(e);
  }
  free_state(&clip, &st);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd_plain),    cmocka_unit_test(test_sgd_momentum),
      cmocka_unit_test(test_sgd_nesterov), cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_lamb),         cmocka_unit_test(test_clip),
      cmocka_unit_test(test_threads),      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_bad_scalars),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
