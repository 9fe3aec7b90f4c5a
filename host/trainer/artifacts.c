/* artifacts.c — onyx_training_artifacts_generate: from an inference model,
 * the training model (forward + loss + a Gradient node over the trainable
 * parameters, expanded by the gradient builder when a session loads it),
 * the eval model (forward + loss), the optimizer model (one
 * com.onyx.training optimizer node over every parameter, after an optional
 * ClipGradNorm), a copy of the inference model, the initial checkpoint and
 * artifacts.json, which tells the training session how they fit together. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_schema.h"
#include "ox_train_api.h"
#include "ox_training.h"

#define OX_PREVIEW_TRAINING "ai.onnx.preview.training"

ONYX_API void onyx_training_artifacts_options_init(OnyxTrainingArtifactsOptions* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->loss = ONYX_LOSS_CROSS_ENTROPY;
  o->optimizer = ONYX_OPTIMIZER_ADAMW;
  o->learning_rate = 1e-3f;
  o->momentum = 0.0f;
  o->dampening = 0.0f;
  o->nesterov = 0;
  o->weight_decay = -1.0f; /* the optimizer's default */
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->epsilon = NAN; /* the optimizer's default */
  o->mixed_precision = ONYX_MIXED_PRECISION_NONE;
  o->loss_scaling = -1; /* on for float16 */
  o->loss_scale_init = 65536.0f;
  o->loss_scale_growth_factor = 2.0f;
  o->loss_scale_backoff_factor = 0.5f;
  o->loss_scale_growth_interval = 2000;
}

/* --- graph helpers ---------------------------------------------------------------------- */

static OnyxStatus* ox_art_attr(OxNode* n, OxAttr a) {
  if (!a.name) {
    ox_attr_clear(&a);
    return ox_oom();
  }
  OnyxStatus* st = ox_node_add_attr(n, &a);
  ox_attr_clear(&a);
  return st;
}

static OnyxStatus* ox_art_attr_int(OxNode* n, const char* name, int64_t v) {
  return ox_art_attr(n, (OxAttr){.name = ox_strdup(name), .type = ONYX_ATTR_INT, .i = v});
}

static OnyxStatus* ox_art_attr_float(OxNode* n, const char* name, float v) {
  return ox_art_attr(n, (OxAttr){.name = ox_strdup(name), .type = ONYX_ATTR_FLOAT, .f = v});
}

static OnyxStatus* ox_art_attr_string(OxNode* n, const char* name, const char* v) {
  char* s = ox_strdup(v);
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_STRING, .s = s, .s_len = strlen(v)};
  if (!s) free(a.name), a.name = NULL;
  return ox_art_attr(n, a);
}

static OnyxStatus* ox_art_attr_strings(OxNode* n, const char* name, char* const* v, size_t count) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_STRINGS, .count = count};
  a.strings = calloc(count ? count : 1, sizeof *a.strings);
  a.strings_len = calloc(count ? count : 1, sizeof *a.strings_len);
  bool ok = a.name && a.strings && a.strings_len;
  for (size_t i = 0; ok && i < count; i++) {
    a.strings[i] = ox_strdup(v[i]);
    a.strings_len[i] = strlen(v[i]);
    ok = a.strings[i] != NULL;
  }
  if (!ok) free(a.name), a.name = NULL;
  return ox_art_attr(n, a);
}

static OnyxStatus* ox_art_node(OxGraph* g, const char* name, const char* op, const char* domain,
                               const char* const* ins, size_t n_in, const char* const* outs,
                               size_t n_out, OxNode** out) {
  OxNode* n = NULL;
  OnyxStatus* st = ox_graph_add_node(g, name, op, domain, ins, n_in, outs, n_out, &n);
  if (st) return ox_status_wrap(st, "training artifacts: adding node '%s' (%s)", name, op);
  if (out) *out = n;
  return NULL;
}

static OnyxStatus* ox_art_input(OxGraph* g, const char* name, OnyxElemType type, int32_t rank,
                                const int64_t* dims) {
  OxValue* v = NULL;
  OX_TRY(ox_graph_value(g, name, &v));
  if (v->is_graph_input || v->producer || v->constant)
    return ox_status(ONYX_INVALID_MODEL, "training artifacts: the model already has a value '%s'",
                     name);
  OX_TRY(ox_value_set(v, type, rank, dims));
  return ox_graph_add_input(g, v);
}

static OnyxStatus* ox_art_output(OxGraph* g, const char* name, OnyxElemType type, int32_t rank,
                                 const int64_t* dims) {
  OxValue* v = ox_graph_find(g, name);
  if (!v) return ox_status(ONYX_FAIL, "training artifacts: no value '%s'", name);
  if (type != ONYX_ELEM_UNDEFINED) OX_TRY(ox_value_set(v, type, rank, dims));
  return ox_graph_add_output(g, v);
}

static OnyxStatus* ox_art_opset(OxGraph* g, const char* domain, int64_t version) {
  for (size_t i = 0; i < g->n_opsets; i++)
    if (!strcmp(g->opsets[i].domain, domain)) {
      if (g->opsets[i].version < version) g->opsets[i].version = version;
      return NULL;
    }
  OxOpsetImport* o = realloc(g->opsets, (g->n_opsets + 1) * sizeof *o);
  if (!o) return ox_oom();
  g->opsets = o;
  o[g->n_opsets].domain = ox_strdup(domain);
  if (!o[g->n_opsets].domain) return ox_oom();
  o[g->n_opsets++].version = version;
  return NULL;
}

/* --- the parameters ---------------------------------------------------------------------- */

static bool ox_in_list(const char* const* list, size_t n, const char* name) {
  for (size_t i = 0; i < n; i++)
    if (list[i] && !strcmp(list[i], name)) return true;
  return false;
}

static bool ox_art_float(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64;
}

/* The trainable parameters of g, in the order of the model's values. */
static OnyxStatus* ox_art_params(const OxGraph* g, const OnyxTrainingArtifactsOptions* o,
                                 char* const* buffers, size_t n_buffers, char*** out,
                                 size_t* n_out) {
  for (size_t i = 0; i < o->frozen_count; i++) {
    const OxValue* v = ox_graph_find(g, o->frozen[i] ? o->frozen[i] : "");
    if (!v || !v->constant)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: frozen parameter '%s' is no initializer of the model",
                       o->frozen[i] ? o->frozen[i] : "(null)");
  }
  for (size_t i = 0; i < o->trainable_count; i++) {
    const char* name = o->trainable[i] ? o->trainable[i] : "(null)";
    const OxValue* v = ox_graph_find(g, name);
    if (!v || !v->constant)
      return ox_status(
          ONYX_INVALID_ARGUMENT,
          "training artifacts: trainable parameter '%s' is no initializer of the model", name);
    if (!ox_art_float(v->constant->type))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: trainable parameter '%s' is %s, not float32 or float64",
                       name, ox_elem_name(v->constant->type));
    if (ox_in_list(o->frozen, o->frozen_count, name))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: parameter '%s' is both trainable and frozen", name);
    if (ox_in_list((const char* const*)buffers, n_buffers, name))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: parameter '%s' is a BatchNormalization running "
                       "statistic, not trainable",
                       name);
  }
  char** names = calloc(g->n_values + 1, sizeof *names);
  if (!names) return ox_oom();
  size_t n = 0;
  for (size_t i = 0; i < g->n_values; i++) {
    const OxValue* v = g->values[i];
    if (!v->constant || v->n_consumers == 0 || !ox_art_float(v->constant->type)) continue;
    if (ox_in_list(o->frozen, o->frozen_count, v->name)) continue;
    if (ox_in_list((const char* const*)buffers, n_buffers, v->name)) continue;
    /* A Dropout ratio is a setting, not a weight. */
    bool ratio = false;
    for (size_t k = 0; k < v->n_consumers; k++) {
      const OxNode* c = v->consumers[k];
      ratio = ratio || (!strcmp(c->op_type, "Dropout") && c->n_inputs > 1 && c->inputs[1] == v);
    }
    if (ratio) continue;
    if (o->trainable_count && !ox_in_list(o->trainable, o->trainable_count, v->name)) continue;
    names[n++] = v->name;
  }
  if (n == 0) {
    free(names);
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: the model '%s' has no trainable "
                     "parameter (no floating-point initializer)",
                     g->source ? g->source : "?");
  }
  *out = names;
  *n_out = n;
  return NULL;
}

/* Turns each parameter's initializer into a graph input. take: the tensors
 * go to ts[] (the caller's); otherwise they are freed. */
static OnyxStatus* ox_art_params_to_inputs(OxGraph* g, char* const* names, size_t n,
                                           OxTensor** ts) {
  for (size_t i = 0; i < n; i++) {
    OxValue* v = ox_graph_find(g, names[i]);
    OxTensor* t = v ? v->constant : NULL;
    if (!t) return ox_status(ONYX_FAIL, "training artifacts: parameter '%s' vanished", names[i]);
    v->constant = NULL;
    OnyxStatus* st = ox_value_set(v, t->type, (int32_t)t->rank, t->dims);
    if (ts)
      ts[i] = t;
    else
      ox_tensor_free(t);
    OX_TRY(st);
    OX_TRY(ox_graph_add_input(g, v));
  }
  return NULL;
}

/* The running statistics of BatchNormalization nodes (inputs 3 and 4 when
 * they are initializers): never trained; the training model updates them. */
static OnyxStatus* ox_art_buffers(const OxGraph* g, char*** out, size_t* n_out) {
  char** names = calloc(2 * g->n_nodes + 1, sizeof *names);
  if (!names) return ox_oom();
  size_t n = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* node = g->nodes[i];
    if (strcmp(node->op_type, "BatchNormalization") || node->domain[0] || node->n_inputs < 5)
      continue;
    for (size_t k = 3; k < 5; k++) {
      const OxValue* v = node->inputs[k];
      if (v && v->constant && !ox_in_list((const char* const*)names, n, v->name))
        names[n++] = v->name;
    }
  }
  *out = names;
  *n_out = n;
  return NULL;
}

/* Replaces node n by one of the same name, op and attributes reading `ins`
 * and writing `outs`. */
static OnyxStatus* ox_art_rewire(OxGraph* g, OxNode* n, const char* const* ins, size_t n_in,
                                 const char* const* outs, size_t n_out, OxNode** out) {
  OxAttr* attrs = n->attrs;
  size_t na = n->n_attrs;
  n->attrs = NULL;
  n->n_attrs = n->cap_attrs = 0;
  char* name = ox_strdup(n->name);
  char* op = ox_strdup(n->op_type);
  char* domain = ox_strdup(n->domain);
  ox_graph_remove_node(g, n);
  OnyxStatus* st = name && op && domain ? NULL : ox_oom();
  if (!st) st = ox_art_node(g, name, op, domain, ins, n_in, outs, n_out, out);
  for (size_t i = 0; i < na; i++) {
    if (!st) st = ox_node_add_attr(*out, &attrs[i]);
    ox_attr_clear(&attrs[i]);
  }
  free(attrs);
  free(name);
  free(op);
  free(domain);
  return st;
}

#define OX_TRAINING_MODE "onyx_training_mode"

/* Dropout (opset 12 on: the training_mode input) and, with bn_buffers,
 * BatchNormalization (opset 14 on: the training_mode attribute, running
 * statistics as outputs "<stat>.updated") in training mode. */
static OnyxStatus* ox_art_training_mode(OxGraph* g, bool bn_buffers) {
  int64_t opset = ox_graph_opset(g, "");
  size_t count = g->n_nodes;
  OxNode** nodes = malloc((count ? count : 1) * sizeof *nodes);
  if (!nodes) return ox_oom();
  memcpy(nodes, g->nodes, count * sizeof *nodes);
  OnyxStatus* st = NULL;
  bool have_flag = false;
  for (size_t i = 0; !st && i < count; i++) {
    OxNode* n = nodes[i];
    if (n->domain[0]) continue;
    const char* in[5] = {0};
    const char* out[3] = {0};
    for (size_t k = 0; k < n->n_inputs && k < 5; k++)
      in[k] = n->inputs[k] ? n->inputs[k]->name : NULL;
    for (size_t k = 0; k < n->n_outputs && k < 3; k++)
      out[k] = n->outputs[k] ? n->outputs[k]->name : NULL;
    char* mask = NULL;
    char* upd[2] = {0};
    OxNode* nn = NULL;
    if (!strcmp(n->op_type, "Dropout") && opset >= 12) {
      if (!have_flag) {
        OxTensor* t = NULL;
        OxValue* v = NULL;
        st = ox_tensor_new(ONYX_ELEM_BOOL, NULL, 0, &t);
        if (!st) st = ox_graph_value(g, OX_TRAINING_MODE, &v);
        if (!st && (v->constant || v->producer || v->is_graph_input))
          st =
              ox_status(ONYX_INVALID_MODEL,
                        "training artifacts: the model already has a value '%s'", OX_TRAINING_MODE);
        if (!st) st = ox_value_set(v, ONYX_ELEM_BOOL, 0, NULL);
        if (st) {
          ox_tensor_free(t);
          break;
        }
        *(uint8_t*)t->data = 1;
        v->constant = t;
        have_flag = true;
      }
      in[2] = OX_TRAINING_MODE;
      if (!out[1]) out[1] = mask = ox_asprintf("%s_mask", n->name);
      st = out[1] ? ox_art_rewire(g, n, in, 3, out, 2, &nn) : ox_oom();
    } else if (!strcmp(n->op_type, "BatchNormalization") && opset >= 14 && bn_buffers &&
               n->n_inputs >= 5 && in[3] && in[4]) {
      upd[0] = ox_asprintf("%s.updated", in[3]);
      upd[1] = ox_asprintf("%s.updated", in[4]);
      out[1] = upd[0];
      out[2] = upd[1];
      st = upd[0] && upd[1] ? ox_art_rewire(g, n, in, 5, out, 3, &nn) : ox_oom();
      OxAttr* a = NULL;
      for (size_t k = 0; !st && k < nn->n_attrs; k++)
        if (!strcmp(nn->attrs[k].name, "training_mode")) a = &nn->attrs[k];
      if (!st && a)
        a->i = 1;
      else if (!st)
        st = ox_art_attr_int(nn, "training_mode", 1);
    }
    free(mask);
    free(upd[0]);
    free(upd[1]);
  }
  free(nodes);
  if (!st) st = ox_graph_toposort(g);
  return st;
}

/* --- mixed precision ---------------------------------------------------------------------- */

/* The ops that compute in the low-precision type, as torch.autocast's
 * float16/bfloat16 list: the matrix products and convolutions, whose
 * float32-accumulated results lose little, and which gain the most from
 * the lower precision. Softmax, normalizations, reductions, element-wise
 * ops and the losses keep float32 (autocast's float32 list and its
 * "run in the widest input type" ops). The com.onyx fused forms of these
 * ops appear at session optimization, after this transform, and fuse the
 * low-precision nodes as they find them. */
static bool ox_art_amp_op(const OxNode* n) {
  static const char* const ops[] = {"MatMul", "Gemm", "Conv", "ConvTranspose"};
  if (n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (!strcmp(n->op_type, ops[i])) return true;
  return false;
}

/* Whether the schema of node `name` in the resolved model lets every
 * input of the node take type lp (Conv takes bfloat16 from ai.onnx opset
 * 22 on only, for one): a node that cannot stays float32. */
static bool ox_art_schema_takes(const OxGraph* typed, const OxNode* n, OnyxElemType lp) {
  const OxNode* tn = NULL;
  for (size_t i = 0; !tn && i < typed->n_nodes; i++)
    if (!strcmp(typed->nodes[i]->name, n->name)) tn = typed->nodes[i];
  if (!tn || !tn->schema) return false;
  for (size_t i = 0; i < tn->n_inputs; i++) {
    const char* tc = tn->inputs[i] ? ox_schema_input_tc(tn->schema, i) : NULL;
    if (tc && !(ox_schema_tc_allowed(tn->schema, tc) & OX_T(lp))) return false;
  }
  return true;
}

static OnyxElemType ox_art_typed(const OxGraph* typed, const OxValue* v) {
  const OxValue* t = v ? ox_graph_find(typed, v->name) : NULL;
  return t ? t->type : ONYX_ELEM_UNDEFINED;
}

/* A Cast of value `from` to `to` writing value `out`. */
static OnyxStatus* ox_art_cast(OxGraph* g, const char* name, const char* from, const char* out,
                               OnyxElemType to) {
  if (ox_graph_find(g, out))
    return ox_status(ONYX_INVALID_MODEL,
                     "training artifacts: mixed precision: the model already has a value '%s'",
                     out);
  OxNode* n = NULL;
  OX_TRY(ox_art_node(g, name, "Cast", "", &from, 1, &out, 1, &n));
  return ox_art_attr_int(n, "to", (int64_t)to);
}

/* Puts each listed op (ox_art_amp_op) of g whose float inputs and outputs
 * are all float32 in type lp: a Cast to lp before each of its float32
 * inputs (one per node and input, so that the gradients of a value read by
 * several nodes are summed in float32) and a Cast back to float32 after
 * each output, which keeps the output's name. `typed` is the model
 * resolved, for the value types. Parameters stay float32 graph inputs: the
 * gradients reaching them pass through the Casts' gradients (a Cast back
 * to float32) and are float32. */
static OnyxStatus* ox_art_amp(OxGraph* g, const OxGraph* typed, OnyxElemType lp) {
  const char* suffix = lp == ONYX_ELEM_FLOAT16 ? "f16" : "bf16";
  size_t count = g->n_nodes;
  OxNode** nodes = malloc((count ? count : 1) * sizeof *nodes);
  if (!nodes) return ox_oom();
  memcpy(nodes, g->nodes, count * sizeof *nodes);
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < count; i++) {
    OxNode* n = nodes[i];
    if (!ox_art_amp_op(n) || n->n_inputs > 8 || n->n_outputs > 8) continue;
    bool all32 = true;
    for (size_t k = 0; k < n->n_inputs; k++)
      if (n->inputs[k]) all32 = all32 && ox_art_typed(typed, n->inputs[k]) == ONYX_ELEM_FLOAT32;
    for (size_t k = 0; k < n->n_outputs; k++)
      if (n->outputs[k]) all32 = all32 && ox_art_typed(typed, n->outputs[k]) == ONYX_ELEM_FLOAT32;
    if (!all32 || !ox_art_schema_takes(typed, n, lp)) continue;
    char* names[16] = {0};
    const char* ins[8] = {0};
    const char* outs[8] = {0};
    size_t n_in = n->n_inputs, n_out = n->n_outputs;
    for (size_t k = 0; !st && k < n_in; k++) {
      if (!n->inputs[k]) continue;
      names[k] = ox_asprintf("%s.%s_in%zu", n->name, suffix, k);
      char* cname = ox_asprintf("%s.cast_in%zu", n->name, k);
      st = names[k] && cname ? ox_art_cast(g, cname, n->inputs[k]->name, names[k], lp) : ox_oom();
      free(cname);
      ins[k] = names[k];
    }
    for (size_t k = 0; !st && k < n_out; k++) {
      if (!n->outputs[k]) continue;
      names[8 + k] = ox_asprintf("%s.%s_out%zu", n->name, suffix, k);
      if (!names[8 + k])
        st = ox_oom();
      else if (ox_graph_find(g, names[8 + k]))
        st = ox_status(ONYX_INVALID_MODEL,
                       "training artifacts: mixed precision: the model already has a value '%s'",
                       names[8 + k]);
      outs[k] = names[8 + k];
    }
    /* The node's outputs before the rewire, for the Casts back. */
    char* orig[8] = {0};
    for (size_t k = 0; !st && k < n_out; k++)
      if (n->outputs[k] && !(orig[k] = ox_strdup(n->outputs[k]->name))) st = ox_oom();
    char* nname = st ? NULL : ox_strdup(n->name);
    if (!st && !nname) st = ox_oom();
    OxNode* nn = NULL;
    if (!st) st = ox_art_rewire(g, n, ins, n_in, outs, n_out, &nn);
    for (size_t k = 0; !st && k < n_out; k++) {
      if (!orig[k]) continue;
      char* cname = ox_asprintf("%s.cast_out%zu", nname, k);
      OxNode* c = NULL;
      const char* from = outs[k];
      st = cname ? ox_art_node(g, cname, "Cast", "", &from, 1, (const char* const*)&orig[k], 1, &c)
                 : ox_oom();
      if (!st) st = ox_art_attr_int(c, "to", ONYX_ELEM_FLOAT32);
      free(cname);
    }
    for (size_t k = 0; k < 16; k++)
      free(names[k]);
    for (size_t k = 0; k < 8; k++)
      free(orig[k]);
    free(nname);
  }
  free(nodes);
  if (!st) st = ox_graph_toposort(g);
  return st ? ox_status_wrap(st, "training artifacts: mixed precision") : NULL;
}

/* The model resolved (types and shapes of its values), for ox_art_amp. */
static OnyxStatus* ox_art_typed_model(const char* model_path, OxGraph** out) {
  OnyxStatus* st = ox_model_load_file(model_path, NULL, out);
  if (!st) st = ox_graph_resolve(*out, NULL, 0);
  if (st)
    return ox_status_wrap(st, "training artifacts: mixed precision needs the types of the model's "
                              "values");
  return NULL;
}

/* --- the loss ---------------------------------------------------------------------------- */

/* The labels' dims take the prediction's symbolic names (its dims `from`,
 * `from` -1 ending the list: none), so that fixing the batch dim by name
 * (onyx_session_options_set_dim_value) fixes the labels' too. */
static OnyxStatus* ox_art_label_params(OxGraph* g, const OxValue* pred, const int32_t* from) {
  OxValue* v = ox_graph_find(g, "labels");
  if (!v || !pred->dim_params || v->rank <= 0) return NULL;
  char** params = calloc((size_t)v->rank, sizeof *params);
  bool any = false, oom = !params;
  for (int32_t d = 0; !oom && d < v->rank; d++) {
    int32_t k = from ? from[d] : d;
    if (k < 0 || k >= pred->rank || !pred->dim_params[k]) continue;
    oom = !(params[d] = ox_strdup(pred->dim_params[k]));
    any = true;
  }
  if (oom || !any) {
    for (int32_t d = 0; params && d < v->rank; d++)
      free(params[d]);
    free(params);
    return oom ? ox_oom() : NULL;
  }
  v->dim_params = params;
  return NULL;
}

/* Adds the labels input and the nodes computing "loss" from the model's
 * first output. */
static OnyxStatus* ox_art_loss(OxGraph* g, OnyxLossKind kind) {
  if (g->n_outputs == 0)
    return ox_status(ONYX_INVALID_MODEL, "training artifacts: the model has no output");
  const OxValue* pred = g->outputs[0];
  const char* p = pred->name;
  OnyxElemType pt = pred->type;
  if (kind == ONYX_LOSS_MODEL_OUTPUT)
    return ox_art_node(g, "onyx_loss", "Identity", "", &p, 1, (const char*[]){"loss"}, 1, NULL);
  if (!ox_art_float(pt))
    return ox_status(ONYX_INVALID_MODEL,
                     "training artifacts: the model's first output '%s' is %s, not float32 or "
                     "float64 (the prediction the loss takes)",
                     p, ox_elem_name(pt));
  int64_t opset = ox_graph_opset(g, "");
  OxNode* n = NULL;
  if (kind == ONYX_LOSS_CROSS_ENTROPY) {
    if (opset < 13)
      return ox_status(ONYX_INVALID_MODEL,
                       "training artifacts: the cross-entropy loss needs ai.onnx opset 13 or "
                       "later (SoftmaxCrossEntropyLoss); the model imports %lld",
                       (long long)opset);
    int64_t dims[16];
    int32_t rank = pred->rank >= 1 && pred->rank <= 16 ? pred->rank - 1 : -1;
    for (int32_t d = 0; d < rank; d++)
      dims[d] = pred->dims[d == 0 ? 0 : d + 1];
    OX_TRY(ox_art_input(g, "labels", ONYX_ELEM_INT64, rank, dims));
    int32_t from[16];
    for (int32_t d = 0; d < rank; d++)
      from[d] = d == 0 ? 0 : d + 1;
    OX_TRY(ox_art_label_params(g, pred, from));
    OX_TRY(ox_art_node(g, "onyx_loss", "SoftmaxCrossEntropyLoss", "", (const char*[]){p, "labels"},
                       2, (const char*[]){"loss"}, 1, &n));
    return ox_art_attr_string(n, "reduction", "mean");
  }
  OX_TRY(ox_art_input(g, "labels", pt, pred->rank, pred->dims));
  OX_TRY(ox_art_label_params(g, pred, NULL));
  const char* per = NULL; /* the per-element loss */
  if (kind == ONYX_LOSS_MSE || kind == ONYX_LOSS_L1) {
    OX_TRY(ox_art_node(g, "onyx_loss_diff", "Sub", "", (const char*[]){p, "labels"}, 2,
                       (const char*[]){"onyx_loss_diff"}, 1, NULL));
    if (kind == ONYX_LOSS_MSE)
      OX_TRY(ox_art_node(g, "onyx_loss_sq", "Mul", "",
                         (const char*[]){"onyx_loss_diff", "onyx_loss_diff"}, 2,
                         (const char*[]){"onyx_loss_elem"}, 1, NULL));
    else
      OX_TRY(ox_art_node(g, "onyx_loss_abs", "Abs", "", (const char*[]){"onyx_loss_diff"}, 1,
                         (const char*[]){"onyx_loss_elem"}, 1, NULL));
    per = "onyx_loss_elem";
  } else if (kind == ONYX_LOSS_BCE_WITH_LOGITS) {
    /* max(x, 0) - x*y + log(1 + exp(-|x|)): no exp of a positive number. */
    OX_TRY(ox_art_node(g, "onyx_bce_relu", "Relu", "", &p, 1, (const char*[]){"onyx_bce_relu"}, 1,
                       NULL));
    OX_TRY(ox_art_node(g, "onyx_bce_xy", "Mul", "", (const char*[]){p, "labels"}, 2,
                       (const char*[]){"onyx_bce_xy"}, 1, NULL));
    OX_TRY(
        ox_art_node(g, "onyx_bce_abs", "Abs", "", &p, 1, (const char*[]){"onyx_bce_abs"}, 1, NULL));
    OX_TRY(ox_art_node(g, "onyx_bce_neg", "Neg", "", (const char*[]){"onyx_bce_abs"}, 1,
                       (const char*[]){"onyx_bce_neg"}, 1, NULL));
    OX_TRY(ox_art_node(g, "onyx_bce_softplus", "Softplus", "", (const char*[]){"onyx_bce_neg"}, 1,
                       (const char*[]){"onyx_bce_log1p"}, 1, NULL));
    OX_TRY(ox_art_node(g, "onyx_bce_sub", "Sub", "",
                       (const char*[]){"onyx_bce_relu", "onyx_bce_xy"}, 2,
                       (const char*[]){"onyx_bce_d"}, 1, NULL));
    OX_TRY(ox_art_node(g, "onyx_bce_add", "Add", "",
                       (const char*[]){"onyx_bce_d", "onyx_bce_log1p"}, 2,
                       (const char*[]){"onyx_loss_elem"}, 1, NULL));
    per = "onyx_loss_elem";
  } else {
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: unknown loss kind %d", (int)kind);
  }
  OX_TRY(ox_art_node(g, "onyx_loss", "ReduceMean", "", &per, 1, (const char*[]){"loss"}, 1, &n));
  return ox_art_attr_int(n, "keepdims", 0);
}

/* Replaces the graph's outputs by "loss" (then, keep_outputs, the model's). */
static OnyxStatus* ox_art_outputs_loss(OxGraph* g, bool keep_outputs) {
  size_t n = g->n_outputs;
  OxValue** old = malloc((n ? n : 1) * sizeof *old);
  if (!old) return ox_oom();
  memcpy(old, g->outputs, n * sizeof *old);
  for (size_t i = 0; i < n; i++)
    old[i]->is_graph_output = false;
  g->n_outputs = 0;
  OnyxElemType lt = old[0]->type;
  OnyxStatus* st = ox_art_output(g, "loss", ox_art_float(lt) ? lt : ONYX_ELEM_UNDEFINED, 0, NULL);
  for (size_t i = 0; !st && keep_outputs && i < n; i++)
    st = ox_graph_add_output(g, old[i]);
  free(old);
  return st;
}

/* The loss scaling input and product: "loss.scaled" = loss * loss_scale.
 * The scale is float32, so the loss and the parameters must be too. */
static OnyxStatus* ox_art_loss_scale(OxGraph* g, OxTensor* const* ts, size_t n) {
  const OxValue* loss = ox_graph_find(g, "loss");
  if (loss && loss->type != ONYX_ELEM_FLOAT32 && loss->type != ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: loss scaling needs a float32 loss; the loss is %s",
                     ox_elem_name(loss->type));
  for (size_t i = 0; i < n; i++)
    if (ts[i]->type != ONYX_ELEM_FLOAT32)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: loss scaling needs float32 parameters; one is %s",
                       ox_elem_name(ts[i]->type));
  OX_TRY(ox_art_input(g, "loss_scale", ONYX_ELEM_FLOAT32, 0, NULL));
  return ox_art_node(g, "onyx_loss_scale", "Mul", "", (const char*[]){"loss", "loss_scale"}, 2,
                     (const char*[]){"loss.scaled"}, 1, NULL);
}

/* --- the optimizer model ----------------------------------------------------------------- */

static const char* const ox_slots_sgd[] = {"momentum"};
static const char* const ox_slots_adam[] = {"exp_avg", "exp_avg_sq"};

/* The state slots of an optimizer (0 for SGD without momentum). */
static size_t ox_art_slots(const OnyxTrainingArtifactsOptions* o, const char* const** slots) {
  if (o->optimizer == ONYX_OPTIMIZER_SGD) {
    *slots = ox_slots_sgd;
    return o->momentum != 0.0f ? 1 : 0;
  }
  *slots = ox_slots_adam;
  return 2;
}

static OnyxStatus* ox_art_optimizer(const OnyxTrainingArtifactsOptions* o, char* const* params,
                                    OxTensor* const* ts, size_t n, const char* path) {
  OxGraph* g = NULL;
  OX_TRY(ox_graph_new("optimizer", &g));
  g->ir_version = 8;
  const char* const* slots = NULL;
  size_t n_slots = ox_art_slots(o, &slots);
  size_t n_in = 2 + (size_t)n * (2 + n_slots), n_out = n * (1 + n_slots);
  char** ins = calloc(n_in + 1, sizeof *ins);
  char** outs = calloc(n_out + 1, sizeof *outs);
  char** gnames = calloc(n + 1, sizeof *gnames);
  OnyxStatus* st = ins && outs && gnames ? NULL : ox_oom();
  if (!st) st = ox_art_opset(g, "", 17);
  if (!st) st = ox_art_opset(g, OX_TRAINING_DOMAIN, 1);
  if (!st) st = ox_art_input(g, "lr", ONYX_ELEM_FLOAT32, 0, NULL);
  if (!st) st = ox_art_input(g, "step", ONYX_ELEM_INT64, 0, NULL);
  if (!st && o->clip_grad_norm) st = ox_art_input(g, "max_norm", ONYX_ELEM_FLOAT32, 0, NULL);
  for (size_t i = 0; !st && i < n; i++) {
    ins[2 + i] = ox_strdup(params[i]);
    ins[2 + n + i] = ox_asprintf("%s_grad", params[i]);
    outs[i] = ox_asprintf("%s.new", params[i]);
    gnames[i] = ox_asprintf("%s_grad.clipped", params[i]);
    for (size_t s = 0; s < n_slots; s++) {
      ins[2 + (2 + s) * n + i] = ox_asprintf("%s.%s", params[i], slots[s]);
      outs[(1 + s) * n + i] = ox_asprintf("%s.%s.new", params[i], slots[s]);
    }
  }
  for (size_t i = 2; !st && i < n_in; i++)
    if (!ins[i]) st = ox_oom();
  for (size_t i = 0; !st && i < n_out; i++)
    if (!outs[i] || (i < n && !gnames[i])) st = ox_oom();
  /* Parameters and their gradients, then each slot. */
  for (size_t i = 0; !st && i < n; i++) {
    const OxTensor* t = ts[i];
    st = ox_art_input(g, ins[2 + i], t->type, (int32_t)t->rank, t->dims);
    if (!st) st = ox_art_input(g, ins[2 + n + i], t->type, (int32_t)t->rank, t->dims);
  }
  for (size_t s = 0; !st && s < n_slots; s++)
    for (size_t i = 0; !st && i < n; i++)
      st =
          ox_art_input(g, ins[2 + (2 + s) * n + i], ts[i]->type, (int32_t)ts[i]->rank, ts[i]->dims);
  OxNode* node = NULL;
  if (!st && o->clip_grad_norm) {
    const char** cin = calloc(n + 1, sizeof *cin);
    const char** cout = calloc(n + 1, sizeof *cout);
    if (!cin || !cout) st = ox_oom();
    for (size_t i = 0; !st && i < n; i++) {
      cin[i + 1] = ins[2 + n + i];
      cout[i] = gnames[i];
    }
    if (!st) {
      cin[0] = "max_norm";
      cout[n] = "total_norm";
      st = ox_art_node(g, "onyx_clip", "ClipGradNorm", OX_TRAINING_DOMAIN, cin, n + 1, cout, n + 1,
                       &node);
    }
    if (!st) st = ox_art_attr_int(node, "n", (int64_t)n);
    for (size_t i = 0; !st && i < n; i++) {
      /* The optimizer reads the clipped gradients. */
      free(ins[2 + n + i]);
      ins[2 + n + i] = gnames[i];
      gnames[i] = NULL;
    }
    free(cin);
    free(cout);
  }
  static const char* const ops[] = {"SGDOptimizer", "AdamWOptimizer", "LambOptimizer"};
  if (!st) {
    ins[0] = "lr";
    ins[1] = "step";
    st = ox_art_node(g, "onyx_optimizer", ops[o->optimizer], OX_TRAINING_DOMAIN,
                     (const char* const*)ins, n_in, (const char* const*)outs, n_out, &node);
    ins[0] = ins[1] = NULL;
  }
  if (!st) st = ox_art_attr_int(node, "n", (int64_t)n);
  if (!st && o->optimizer == ONYX_OPTIMIZER_SGD) {
    st = ox_art_attr_float(node, "momentum", o->momentum);
    if (!st) st = ox_art_attr_float(node, "dampening", o->dampening);
    if (!st) st = ox_art_attr_int(node, "nesterov", o->nesterov ? 1 : 0);
    if (!st) st = ox_art_attr_float(node, "weight_decay", o->weight_decay);
  } else if (!st) {
    st = ox_art_attr_float(node, "beta1", o->beta1);
    if (!st) st = ox_art_attr_float(node, "beta2", o->beta2);
    if (!st) st = ox_art_attr_float(node, "epsilon", o->epsilon);
    if (!st) st = ox_art_attr_float(node, "weight_decay", o->weight_decay);
  }
  for (size_t k = 0; !st && k < n_out; k++) {
    const OxTensor* t = ts[k % n];
    st = ox_art_output(g, outs[k], t->type, (int32_t)t->rank, t->dims);
  }
  if (!st && o->clip_grad_norm) st = ox_art_output(g, "total_norm", ONYX_ELEM_FLOAT32, 0, NULL);
  if (!st) st = ox_model_save(g, path);
  for (size_t i = 0; ins && i < n_in; i++)
    free(ins[i]);
  for (size_t i = 0; outs && i < n_out; i++)
    free(outs[i]);
  for (size_t i = 0; gnames && i < n; i++)
    free(gnames[i]);
  free(ins);
  free(outs);
  free(gnames);
  ox_graph_free(g);
  return st;
}

/* --- artifacts.json ---------------------------------------------------------------------- */

static const char* const ox_opt_names[] = {"sgd", "adamw", "lamb"};

static OnyxStatus* ox_art_meta(const OxGraph* g, const OnyxTrainingArtifactsOptions* o,
                               char* const* params, size_t n, char* const* buffers,
                               size_t n_buffers, size_t n_model_inputs, const char* path) {
  json_t* bs = json_array();
  for (size_t i = 0; bs && i < n_buffers; i++)
    json_array_append_new(bs, json_string(buffers[i]));
  if (!bs) return ox_oom();
  json_t* j = json_object();
  json_t* ins = json_array();
  json_t* ps = json_array();
  json_t* sl = json_array();
  const char* const* slots = NULL;
  size_t n_slots = ox_art_slots(o, &slots);
  for (size_t i = 0; ins && i < n_model_inputs; i++)
    json_array_append_new(ins, json_string(g->inputs[i]->name));
  for (size_t i = 0; ps && i < n; i++)
    json_array_append_new(ps, json_string(params[i]));
  for (size_t i = 0; sl && i < n_slots; i++)
    json_array_append_new(sl, json_string(slots[i]));
  if (!j || !ins || !ps || !sl) {
    json_decref(j);
    json_decref(ins);
    json_decref(ps);
    json_decref(sl);
    json_decref(bs);
    return ox_oom();
  }
  json_object_set_new(j, "format", json_string("onyx-training-artifacts"));
  json_object_set_new(j, "version", json_integer(1));
  json_object_set_new(j, "inputs", ins);
  json_object_set_new(j, "labels",
                      o->loss == ONYX_LOSS_MODEL_OUTPUT ? json_null() : json_string("labels"));
  json_object_set_new(j, "parameters", ps);
  json_object_set_new(j, "buffers", bs);
  json_object_set_new(j, "optimizer", json_string(ox_opt_names[o->optimizer]));
  json_object_set_new(j, "state_slots", sl);
  json_object_set_new(j, "clip_grad_norm", json_boolean(o->clip_grad_norm));
  static const char* const mp_names[] = {NULL, "float16", "bfloat16"};
  const char* mp = mp_names[o->mixed_precision];
  json_object_set_new(j, "mixed_precision", mp ? json_string(mp) : json_null());
  /* With loss scaling the training model takes the scale as input "loss_scale". */
  json_t* ls = o->loss_scaling ? json_object() : NULL;
  if (ls) {
    json_object_set_new(ls, "input", json_string("loss_scale"));
    json_object_set_new(ls, "init_scale", json_real(o->loss_scale_init));
    json_object_set_new(ls, "growth_factor", json_real(o->loss_scale_growth_factor));
    json_object_set_new(ls, "backoff_factor", json_real(o->loss_scale_backoff_factor));
    json_object_set_new(ls, "growth_interval", json_integer(o->loss_scale_growth_interval));
  }
  json_object_set_new(j, "loss_scaling", ls ? ls : json_null());
  char* text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (!text) return ox_oom();
  OnyxStatus* st = ox_write_atomic(path, text, strlen(text));
  free(text);
  return st;
}

/* --- the entry point --------------------------------------------------------------------- */

static OnyxStatus* ox_art_options(const OnyxTrainingArtifactsOptions* in,
                                  OnyxTrainingArtifactsOptions* o) {
  onyx_training_artifacts_options_init(o);
  if (in) {
    /* Options of the size before the mixed-precision fields keep those
     * fields' defaults. */
    if (in->struct_size != ONYX_TRAINING_ARTIFACTS_OPTIONS_V1_SIZE && in->struct_size < sizeof *o)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training artifacts: options.struct_size %zu, expected %zu (call "
                       "onyx_training_artifacts_options_init)",
                       in->struct_size, sizeof *o);
    memcpy(o, in, in->struct_size < sizeof *o ? in->struct_size : sizeof *o);
    o->struct_size = sizeof *o;
  }
  if ((int)o->loss < 0 || o->loss > ONYX_LOSS_MODEL_OUTPUT)
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: unknown loss kind %d",
                     (int)o->loss);
  if ((int)o->optimizer < 0 || o->optimizer > ONYX_OPTIMIZER_LAMB)
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: unknown optimizer kind %d",
                     (int)o->optimizer);
  bool sgd = o->optimizer == ONYX_OPTIMIZER_SGD, lamb = o->optimizer == ONYX_OPTIMIZER_LAMB;
  if (!(o->weight_decay >= 0)) o->weight_decay = sgd || lamb ? 0.0f : 0.01f;
  if (!(o->epsilon >= 0)) o->epsilon = lamb ? 1e-6f : 1e-8f;
  if (!(o->momentum >= 0)) o->momentum = 0.0f;
  if (!(o->dampening >= 0)) o->dampening = 0.0f;
  if (!(o->beta1 >= 0)) o->beta1 = 0.9f;
  if (!(o->beta2 >= 0)) o->beta2 = 0.999f;
  if (!(o->learning_rate >= 0) || !isfinite(o->learning_rate))
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: learning_rate %g",
                     (double)o->learning_rate);
  if (o->beta1 >= 1 || o->beta2 >= 1)
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: beta1 %g and beta2 %g must be < 1",
                     (double)o->beta1, (double)o->beta2);
  if (sgd && o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: nesterov needs a momentum and zero dampening");
  if ((o->trainable_count && !o->trainable) || (o->frozen_count && !o->frozen))
    return ox_status(ONYX_INVALID_ARGUMENT, "training artifacts: a name list is NULL");
  if (o->mixed_precision < ONYX_MIXED_PRECISION_NONE ||
      o->mixed_precision > ONYX_MIXED_PRECISION_BFLOAT16)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: mixed_precision %d (0 none, 1 float16, 2 bfloat16)",
                     (int)o->mixed_precision);
  if (o->loss_scaling < -1 || o->loss_scaling > 1)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: loss_scaling %d (-1 default, 0 off, 1 on)",
                     (int)o->loss_scaling);
  if (o->loss_scaling < 0)
    o->loss_scaling = o->mixed_precision == ONYX_MIXED_PRECISION_FLOAT16 ? 1 : 0;
  if (o->loss_scaling &&
      (!(o->loss_scale_init > 0) || !isfinite(o->loss_scale_init) ||
       !(o->loss_scale_growth_factor >= 1) || !isfinite(o->loss_scale_growth_factor) ||
       !(o->loss_scale_backoff_factor > 0) || !(o->loss_scale_backoff_factor <= 1) ||
       o->loss_scale_growth_interval < 1))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "training artifacts: loss scaler init %g, growth_factor %g, backoff_factor "
                     "%g, growth_interval %lld (need init > 0, growth_factor >= 1, 0 < "
                     "backoff_factor <= 1, growth_interval >= 1)",
                     (double)o->loss_scale_init, (double)o->loss_scale_growth_factor,
                     (double)o->loss_scale_backoff_factor,
                     (long long)o->loss_scale_growth_interval);
  return NULL;
}

static char* ox_join(const char* dir, const char* file) {
  return ox_asprintf("%s/%s", dir, file);
}

ONYX_API OnyxStatus* onyx_training_artifacts_generate(const char* model_path,
                                                      const OnyxTrainingArtifactsOptions* opts,
                                                      const char* out_dir) {
  if (!model_path || !out_dir)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_artifacts_generate: NULL argument");
  OnyxTrainingArtifactsOptions o;
  OX_TRY(ox_art_options(opts, &o));
  if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
    return ox_status(ONYX_FAIL, "training artifacts: cannot create the folder '%s': %s", out_dir,
                     strerror(errno));
  OxGraph* gt = NULL;
  OxGraph* ge = NULL;
  char** params = NULL;
  size_t n = 0;
  OxTensor** ts = NULL;
  OnyxCheckpoint* ck = NULL;
  char* p_train = ox_join(out_dir, "training_model.onnx");
  char* p_eval = ox_join(out_dir, "eval_model.onnx");
  char* p_opt = ox_join(out_dir, "optimizer_model.onnx");
  char* p_inf = ox_join(out_dir, "inference_model.onnx");
  char* p_meta = ox_join(out_dir, OX_ARTIFACTS_META);
  char* p_ck = ox_join(out_dir, "checkpoint");
  OnyxStatus* st = p_train && p_eval && p_opt && p_inf && p_meta && p_ck ? NULL : ox_oom();
  if (!st) st = ox_model_load_file(model_path, NULL, &gt);
  if (!st) st = ox_model_load_file(model_path, NULL, &ge);
  OnyxElemType lp = o.mixed_precision == ONYX_MIXED_PRECISION_FLOAT16    ? ONYX_ELEM_FLOAT16
                    : o.mixed_precision == ONYX_MIXED_PRECISION_BFLOAT16 ? ONYX_ELEM_BFLOAT16
                                                                         : ONYX_ELEM_UNDEFINED;
  OxGraph* typed = NULL;
  if (!st && lp != ONYX_ELEM_UNDEFINED) st = ox_art_typed_model(model_path, &typed);
  /* Running statistics: graph inputs and checkpoint buffers where the
   * opset has BatchNormalization's training_mode (14); before, they stay
   * initializers and BatchNormalization stays in inference mode. */
  char** buffers = NULL;
  size_t nb = 0;
  if (!st) st = ox_art_buffers(gt, &buffers, &nb);
  if (!st) st = ox_art_params(gt, &o, buffers, nb, &params, &n);
  bool bn_buffers = gt && ox_graph_opset(gt, "") >= 14;
  size_t nbuf = bn_buffers ? nb : 0; /* the buffers the models take as inputs */
  OxTensor** bts = st ? NULL : calloc(nb + 1, sizeof *bts);
  if (!st) ts = calloc(n, sizeof *ts);
  if (!st && (!ts || !bts)) st = ox_oom();
  size_t n_model_inputs = gt ? gt->n_inputs : 0;
  /* The training model: inputs, labels, parameters, buffers -> loss,
   * gradients, updated buffers. */
  if (!st) st = ox_art_training_mode(gt, bn_buffers);
  if (!st && typed) st = ox_art_amp(gt, typed, lp);
  if (!st) st = ox_art_loss(gt, o.loss);
  if (!st) st = ox_art_params_to_inputs(gt, params, n, ts);
  if (!st) st = ox_art_params_to_inputs(gt, buffers, nbuf, bts);
  if (!st) st = ox_art_outputs_loss(gt, false);
  /* Loss scaling: the Gradient node differentiates loss * loss_scale and
   * each gradient is divided by loss_scale in float32. */
  const char* y = "loss";
  if (!st && o.loss_scaling) st = ox_art_loss_scale(gt, ts, n);
  if (!st && o.loss_scaling) y = "loss.scaled";
  char** grads = st ? NULL : calloc(n, sizeof *grads);
  if (!st && !grads) st = ox_oom();
  for (size_t i = 0; !st && i < n; i++)
    if (!(grads[i] = ox_asprintf(o.loss_scaling ? "%s_grad.scaled" : "%s_grad", params[i])))
      st = ox_oom();
  OxNode* gn = NULL;
  if (!st) st = ox_art_opset(gt, OX_PREVIEW_TRAINING, 1);
  if (!st)
    st = ox_art_node(gt, "onyx_gradient", "Gradient", OX_PREVIEW_TRAINING, NULL, 0,
                     (const char* const*)grads, n, &gn);
  if (!st) st = ox_art_attr_strings(gn, "xs", params, n);
  if (!st) st = ox_art_attr_string(gn, "y", y);
  for (size_t i = 0; !st && o.loss_scaling && i < n; i++) {
    char* gname = ox_asprintf("%s_grad", params[i]);
    char* nname = ox_asprintf("%s_grad.unscale", params[i]);
    const char* ins[2] = {grads[i], "loss_scale"};
    st = gname && nname
             ? ox_art_node(gt, nname, "Div", "", ins, 2, (const char* const*)&gname, 1, NULL)
             : ox_oom();
    free(grads[i]);
    grads[i] = gname;
    free(nname);
  }
  for (size_t i = 0; !st && i < n; i++)
    st = ox_art_output(gt, grads[i], ts[i]->type, (int32_t)ts[i]->rank, ts[i]->dims);
  for (size_t i = 0; !st && i < nbuf; i++) {
    char* u = ox_asprintf("%s.updated", buffers[i]);
    st = u ? ox_art_output(gt, u, bts[i]->type, (int32_t)bts[i]->rank, bts[i]->dims) : ox_oom();
    free(u);
  }
  for (size_t i = 0; grads && i < n; i++)
    free(grads[i]);
  free(grads);
  if (!st) st = ox_model_save(gt, p_train);
  /* The eval model: inputs, labels, parameters -> loss, the model's outputs. */
  if (!st && typed) st = ox_art_amp(ge, typed, lp);
  if (!st) st = ox_art_loss(ge, o.loss);
  if (!st) st = ox_art_params_to_inputs(ge, params, n, NULL);
  if (!st) st = ox_art_params_to_inputs(ge, buffers, nbuf, NULL);
  if (!st) st = ox_art_outputs_loss(ge, true);
  if (!st) st = ox_model_save(ge, p_eval);
  if (!st) st = ox_art_optimizer(&o, params, ts, n, p_opt);
  if (!st) st = ox_art_meta(gt, &o, params, n, buffers, nbuf, n_model_inputs, p_meta);
  /* The inference model, copied as it is. */
  void* bytes = NULL;
  size_t len = 0;
  if (!st) st = ox_read_file(model_path, SIZE_MAX, &bytes, &len);
  if (!st) st = ox_write_atomic(p_inf, bytes, len);
  free(bytes);
  /* The checkpoint: the initial parameters and the frozen names. */
  if (!st) st = ox_ckpt_new(&ck);
  if (!st) ck->lr = o.learning_rate;
  if (!st && o.loss_scaling) {
    ck->has_scaler = true;
    ck->loss_scale = o.loss_scale_init;
    ck->scale_growth_factor = o.loss_scale_growth_factor;
    ck->scale_backoff_factor = o.loss_scale_backoff_factor;
    ck->scale_growth_interval = o.loss_scale_growth_interval;
    ck->scale_growth_tracker = 0;
  }
  for (size_t i = 0; !st && i < n; i++) {
    st = ox_ckpt_add_param(ck, params[i], ts[i], true);
    ts[i] = NULL;
  }
  for (size_t i = 0; !st && i < nbuf; i++) {
    st = ox_ckpt_add_param(ck, buffers[i], bts[i], false);
    bts[i] = NULL;
  }
  for (size_t i = 0; !st && i < o.frozen_count; i++) {
    char** f = realloc(ck->frozen, (ck->n_frozen + 1) * sizeof *f);
    if (f) ck->frozen = f;
    char* c = f ? ox_strdup(o.frozen[i]) : NULL;
    if (!c) st = ox_oom();
    if (!st) ck->frozen[ck->n_frozen++] = c;
  }
  if (!st) st = onyx_checkpoint_save(ck, p_ck, 0);
  onyx_checkpoint_release(ck);
  for (size_t i = 0; ts && i < n; i++)
    ox_tensor_free(ts[i]);
  free(ts);
  for (size_t i = 0; bts && i < nb; i++)
    ox_tensor_free(bts[i]);
  free(bts);
  free(params); /* names borrowed from gt */
  free(buffers);
  ox_graph_free(gt);
  ox_graph_free(ge);
  ox_graph_free(typed);
  free(p_train);
  free(p_eval);
  free(p_opt);
  free(p_inf);
  free(p_meta);
  free(p_ck);
  return st;
}
