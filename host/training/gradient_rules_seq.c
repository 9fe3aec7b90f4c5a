/* gradient_rules_seq.c — gradient rules of the recurrent ops. Each emits one
 * backward op of the com.onyx.training domain
 * (schemas/schemas_training_seq.c; CPU kernel providers/cpu/cpu_grad_seq.c),
 * which recomputes the forward pass from the node's inputs and takes the
 * gradients of whichever outputs receive one:
 *   RNN  -> RNNGrad(X, W, R, B, sequence_lens, initial_h, dY, dY_h)
 *   GRU  -> GRUGrad(same inputs)                      linear_before_reset
 *   LSTM -> LSTMGrad(X, W, R, B, sequence_lens, initial_h, initial_c, P,
 *                    dY, dY_h, dY_c)
 * giving dX, dW, dR, dB, d_initial_h (and d_initial_c, dP), only those
 * wanted. Every direction, layout and sequence_lens is covered; the
 * activations must be the defaults (given or not), and clip and LSTM's
 * input_forget are refused, with an error naming the node.
 *   Resize (11+) in linear or cubic mode -> ResizeGrad(dY, Shape(X),
 *   scales): every coordinate_transformation_mode but tf_crop_and_resize
 *   and tf_half_pixel_for_nn, scales or sizes (stretch policy), axes,
 *   exclude_outside; no antialias. */
#include <string.h>
#include <strings.h>
#include "gradient_rules.h"

#define TRAIN OX_TRAINING_DOMAIN

/* Checks that n uses what the backward kernels compute: the default
 * activations per direction, no clip, no input_forget. */
static OnyxStatus* check_plain(const OxNode* n, const char* const* defaults, size_t per_dir) {
  const OxAttr* clip = ox_node_attr(n, "clip");
  if (clip && !clip->from_default)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (%s): the gradient is built without clip only (clip is set)",
                     n->name, n->op_type);
  if (ox_node_attr_int(n, "input_forget", 0) != 0)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (%s): the gradient is built for input_forget 0 only", n->name,
                     n->op_type);
  const OxAttr* acts = ox_node_attr(n, "activations");
  if (!acts || acts->type != ONYX_ATTR_STRINGS) return NULL;
  for (size_t i = 0; i < acts->count; i++) {
    const char* want = defaults[i % per_dir];
    if (strcasecmp(acts->strings[i], want))
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "node '%s' (%s): the gradient is built for the default activations only "
                       "(activations[%zu] is '%s', not '%s')",
                       n->name, n->op_type, i, acts->strings[i], want);
  }
  return NULL;
}

/* The backward op: inputs `in` of the node (their names, then the output
 * gradients), outputs map to node inputs `gi`. */
static OnyxStatus* emit(OxGradBuilder* b, const OxNode* n, const char* op, const size_t* in,
                        size_t n_in, size_t n_go, const size_t* gi, size_t n_out, bool gru) {
  bool want[8] = {0}, any = false;
  for (size_t k = 0; k < n_out; k++)
    any |= want[k] = WANTS(gi[k]);
  if (!any) return NULL;
  const char* ins[12] = {0};
  for (size_t k = 0; k < n_in; k++)
    ins[k] = I(in[k]);
  for (size_t k = 0; k < n_go; k++)
    ins[n_in + k] = GO(k);
  const char* outs[8] = {0};
  ox_grad_op(b, op, TRAIN, ins, n_in + n_go, n_out, want, outs);
  ox_grad_attr_copy(b, n, "hidden_size");
  ox_grad_attr_copy(b, n, "direction");
  ox_grad_attr_copy(b, n, "layout");
  if (gru) ox_grad_attr_copy(b, n, "linear_before_reset");
  for (size_t k = 0; k < n_out; k++)
    if (want[k]) ox_grad_GI(b, n, gi[k], outs[k]);
  return ox_grad_err(b);
}

static OnyxStatus* rule_rnn(OxGradBuilder* b, const OxNode* n) {
  static const char* const acts[] = {"Tanh"};
  OnyxStatus* st = check_plain(n, acts, 1);
  if (st) return st;
  static const size_t in[] = {0, 1, 2, 3, 4, 5}, gi[] = {0, 1, 2, 3, 5};
  return emit(b, n, "RNNGrad", in, 6, 2, gi, 5, false);
}

static OnyxStatus* rule_gru(OxGradBuilder* b, const OxNode* n) {
  static const char* const acts[] = {"Sigmoid", "Tanh"};
  OnyxStatus* st = check_plain(n, acts, 2);
  if (st) return st;
  static const size_t in[] = {0, 1, 2, 3, 4, 5}, gi[] = {0, 1, 2, 3, 5};
  return emit(b, n, "GRUGrad", in, 6, 2, gi, 5, true);
}

static OnyxStatus* rule_lstm(OxGradBuilder* b, const OxNode* n) {
  static const char* const acts[] = {"Sigmoid", "Tanh", "Tanh"};
  OnyxStatus* st = check_plain(n, acts, 3);
  if (st) return st;
  static const size_t in[] = {0, 1, 2, 3, 4, 5, 6, 7}, gi[] = {0, 1, 2, 3, 5, 6, 7};
  return emit(b, n, "LSTMGrad", in, 8, 3, gi, 7, false);
}

/* Resize in linear or cubic mode (11+): ResizeGrad(dY, Shape(X), scales),
 * the transpose of the interpolation. Reached through the Resize rule of
 * gradient_rules_tensor.c, which keeps nearest mode. */
OnyxStatus* ox_grad_rule_resize_interp(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  const char* mode = ox_node_attr_string(n, "mode", "nearest");
  if (strcmp(mode, "linear") && strcmp(mode, "cubic"))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Resize): the gradient is built for modes nearest, linear and "
                     "cubic (not '%s')",
                     n->name, mode);
  const char* ct = ox_node_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  if (!strcmp(ct, "tf_crop_and_resize") || !strcmp(ct, "tf_half_pixel_for_nn"))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Resize): the gradient is not built for "
                     "coordinate_transformation_mode '%s'",
                     n->name, ct);
  if (ox_node_attr_int(n, "antialias", 0) != 0)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Resize): the gradient is built without antialias only", n->name);
  const bool sizes = n->n_inputs > 3 && n->inputs[3];
  if (sizes && strcmp(ox_node_attr_string(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Resize): the gradient with sizes is built for "
                     "keep_aspect_ratio_policy 'stretch' only",
                     n->name);
  const char* ins[] = {GO(0), OP1("Shape", I(0)), sizes ? NULL : I(2)};
  const char* g = ox_grad_op(b, "ResizeGrad", TRAIN, ins, 3, 1, NULL, NULL);
  ox_grad_attr_copy(b, n, "mode");
  ox_grad_attr_copy(b, n, "coordinate_transformation_mode");
  ox_grad_attr_copy(b, n, "cubic_coeff_a");
  ox_grad_attr_copy(b, n, "exclude_outside");
  ox_grad_attr_copy(b, n, "axes");
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

static const OxGradRuleDef ox_rules_seq[] = {
    {"", "RNN", 7, 0, rule_rnn},
    {"", "GRU", 7, 0, rule_gru},
    {"", "LSTM", 7, 0, rule_lstm},
};

const OxGradRuleDef* ox_grad_rules_seq(size_t* n) {
  *n = OX_ARRAY_LEN(ox_rules_seq);
  return ox_rules_seq;
}
