/* schemas_training_seq.c — the backward ops of the recurrent ops in the
 * com.onyx.training domain (opset 1), which the gradient rules of
 * host/training/gradient_rules_seq.c emit, with their inference. Semantics:
 * docs/training.md, "Gradient ops"; kernels: providers/cpu/cpu_grad_seq.c.
 *
 *   RNNGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?
 *   GRUGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?
 *   LSTMGrad(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, dY?, dY_h?, dY_c?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?, d_initial_c?, dP?
 *
 *   ResizeGrad(dY, X_shape, scales?) -> dX
 *       Resize's mode (linear, cubic), coordinate_transformation_mode,
 *       cubic_coeff_a, exclude_outside, axes; dX has the shape X_shape.
 *
 * Attributes of the recurrent grads: the forward op's hidden_size (required), direction, layout,
 * and GRU's linear_before_reset. Each gradient has its input's shape;
 * dB is [directions, 2 gates hidden] and dP [directions, 3 hidden] even
 * when B or P is absent (they are then the gradients of zero biases). */
#include <stdlib.h>
#include <string.h>
#include "infer_util.h"
#include "schema_internal.h"

#define TRAINING "com.onyx.training"
#define TF       (OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT64))
#define L(a)     a, (uint8_t)OX_ARRAY_LEN(a)
#define REQ(n, t)                                                                                  \
  { n, t, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, t)                                                                                  \
  { n, t, ONYX_PARAM_OPTIONAL, 1 }

static const OxTypeConstr t_seq[] = {{"T", TF}, {"T1", OX_T(ONYX_ELEM_INT32)}};

static const OxFormal f_rnn_in[] = {REQ("X", "T"),
                                    REQ("W", "T"),
                                    REQ("R", "T"),
                                    OPT("B", "T"),
                                    OPT("sequence_lens", "T1"),
                                    OPT("initial_h", "T"),
                                    OPT("dY", "T"),
                                    OPT("dY_h", "T")};
static const OxFormal f_rnn_out[] = {OPT("dX", "T"), OPT("dW", "T"), OPT("dR", "T"), OPT("dB", "T"),
                                     OPT("d_initial_h", "T")};
static const OxFormal f_lstm_in[] = {REQ("X", "T"),
                                     REQ("W", "T"),
                                     REQ("R", "T"),
                                     OPT("B", "T"),
                                     OPT("sequence_lens", "T1"),
                                     OPT("initial_h", "T"),
                                     OPT("initial_c", "T"),
                                     OPT("P", "T"),
                                     OPT("dY", "T"),
                                     OPT("dY_h", "T"),
                                     OPT("dY_c", "T")};
static const OxFormal f_lstm_out[] = {
    OPT("dX", "T"),          OPT("dW", "T"),          OPT("dR", "T"), OPT("dB", "T"),
    OPT("d_initial_h", "T"), OPT("d_initial_c", "T"), OPT("dP", "T")};

static const OxAttrSpec a_rnn[] = {
    {.name = "hidden_size", .type = ONYX_ATTR_INT, .required = true},
    {.name = "direction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "forward"},
    {.name = "layout", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxAttrSpec a_gru[] = {
    {.name = "hidden_size", .type = ONYX_ATTR_INT, .required = true},
    {.name = "direction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "forward"},
    {.name = "layout", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "linear_before_reset", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};

static const OxTypeConstr t_resize[] = {{"T", TF}, {"T2", TF}};
static const OxFormal f_resize_in[] = {REQ("dY", "T"), REQ("X_shape", "tensor(int64)"),
                                       OPT("scales", "T2")};
static const OxFormal f_resize_out[] = {REQ("dX", "T")};
static const OxAttrSpec a_resize[] = {
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "linear"},
    {.name = "coordinate_transformation_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "half_pixel"},
    {.name = "cubic_coeff_a", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -0.75f},
    {.name = "exclude_outside", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "axes", .type = ONYX_ATTR_INTS},
};

/* dX: dY's type, the shape X_shape when it is known at load time, else
 * dY's rank. */
static OnyxStatus* infer_resize_grad(OxNode* n) {
  int64_t* v = NULL;
  size_t count = 0;
  bool known = false;
  OnyxStatus* st = ox_const_ints(n, 1, &v, &count, &known);
  if (st) return st;
  OxDims d;
  ox_in_dims(n, 0, &d);
  if (known) {
    if (count > OX_INFER_MAX_RANK || (d.rank >= 0 && (size_t)d.rank != count)) {
      free(v);
      return ox_node_err(n, "X_shape has %zu values; dY has rank %d", count, (int)d.rank);
    }
    d.rank = (int32_t)count;
    for (size_t i = 0; i < count; i++)
      d.d[i] = v[i];
  } else {
    for (int32_t i = 0; i < d.rank; i++)
      d.d[i] = ONYX_DIM_UNKNOWN;
  }
  free(v);
  return ox_out_set(n, 0, ox_in_type(n, 0), &d);
}

static OnyxStatus* infer_seq_grad(OxNode* n, int64_t gates, bool lstm) {
  const int64_t H = ox_attr_i(n, "hidden_size", 0);
  if (H < 1) return ox_node_err(n, "hidden_size must be >= 1, got %lld", (long long)H);
  const char* dir = ox_attr_s(n, "direction", "forward");
  int64_t D;
  if (!strcmp(dir, "forward") || !strcmp(dir, "reverse"))
    D = 1;
  else if (!strcmp(dir, "bidirectional"))
    D = 2;
  else
    return ox_node_err(n, "direction '%s' is not forward, reverse or bidirectional", dir);
  const int64_t layout = ox_attr_i(n, "layout", 0);
  if (layout != 0 && layout != 1)
    return ox_node_err(n, "layout must be 0 or 1, got %lld", (long long)layout);
  if (H > INT64_MAX / 8) return ox_node_err(n, "hidden_size %lld is too large", (long long)H);
  OxDims x, w, r;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &w);
  ox_in_dims(n, 2, &r);
  if (x.rank >= 0 && x.rank != 3) return ox_node_err(n, "X must be 3-D, not %d-D", (int)x.rank);
  if (w.rank >= 0 && w.rank != 3) return ox_node_err(n, "W must be 3-D, not %d-D", (int)w.rank);
  if (r.rank >= 0 && r.rank != 3) return ox_node_err(n, "R must be 3-D, not %d-D", (int)r.rank);
  if (w.rank == 3 && w.d[1] >= 0 && w.d[1] != gates * H)
    return ox_node_err(n, "W's dim 1 is %lld, expected %lld (gates * hidden_size)",
                       (long long)w.d[1], (long long)(gates * H));
  if (r.rank == 3 && r.d[2] >= 0 && r.d[2] != H)
    return ox_node_err(n, "R's dim 2 is %lld, expected hidden_size %lld", (long long)r.d[2],
                       (long long)H);
  const OnyxElemType T = ox_in_type(n, 0);
  const int64_t batch = x.rank == 3 ? x.d[layout ? 0 : 1] : ONYX_DIM_UNKNOWN;
  OxDims b = {.rank = 2, .d = {D, 2 * gates * H}};
  OxDims h = {.rank = 3, .d = {layout ? batch : D, layout ? D : batch, H}};
  OxDims p = {.rank = 2, .d = {D, 3 * H}};
  OxDims wd = {.rank = 3, .d = {D, gates * H, x.rank == 3 ? x.d[2] : ONYX_DIM_UNKNOWN}};
  OxDims rd = {.rank = 3, .d = {D, gates * H, H}};
  OnyxStatus* st = ox_out_set(n, 0, T, x.rank >= 0 ? &x : NULL);
  if (!st) st = ox_out_set(n, 1, T, &wd);
  if (!st) st = ox_out_set(n, 2, T, &rd);
  if (!st) st = ox_out_set(n, 3, T, &b);
  if (!st) st = ox_out_set(n, 4, T, &h);
  if (lstm) {
    if (!st) st = ox_out_set(n, 5, T, &h);
    if (!st) st = ox_out_set(n, 6, T, &p);
  }
  return st;
}

static OnyxStatus* infer_rnn_grad(OxNode* n) {
  return infer_seq_grad(n, 1, false);
}
static OnyxStatus* infer_gru_grad(OxNode* n) {
  return infer_seq_grad(n, 3, false);
}
static OnyxStatus* infer_lstm_grad(OxNode* n) {
  return infer_seq_grad(n, 4, true);
}

#define ROW(op, in, out, tc, attrs, fn)                                                            \
  { TRAINING, op, 1, L(in), L(out), L(tc), L(attrs), fn, NULL, NULL, true }

static const OxSchema ox_training_seq_rows[] = {
    ROW("RNNGrad", f_rnn_in, f_rnn_out, t_seq, a_rnn, infer_rnn_grad),
    ROW("GRUGrad", f_rnn_in, f_rnn_out, t_seq, a_gru, infer_gru_grad),
    ROW("LSTMGrad", f_lstm_in, f_lstm_out, t_seq, a_rnn, infer_lstm_grad),
    ROW("ResizeGrad", f_resize_in, f_resize_out, t_resize, a_resize, infer_resize_grad),
};

const OxSchemaFamily ox_family_training_seq = {"training_seq", L(ox_training_seq_rows), NULL, 0};
