/* control.c — control flow run by the host: If, Loop, Scan and SequenceMap.
 *
 * Each subgraph attribute of such a node becomes, at plan time, a nested
 * session (sharing the parent's providers, options and thread pool) with its
 * own partition and plan. Its graph inputs are the subgraph's formal inputs
 * followed by the outer-scope values it reads, which the parent node carries
 * as implicit inputs (OxNode.n_implicit). A run feeds the nested plan from
 * the parent's frame once per branch or iteration. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "ox_control.h"
#include "ox_session.h"

static OnyxStatus* ox_node_error(const OxNode* n, const char* fmt, ...) OX_PRINTF(2, 3);
static OnyxStatus* ox_node_error(const OxNode* n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  if (vasprintf(&text, fmt, ap) < 0) text = NULL;
  va_end(ap);
  OnyxStatus* st = ox_status(ONYX_INVALID_MODEL, "node '%s' (%s): %s", n->name, n->op_type,
                             text ? text : "out of memory");
  free(text);
  return st;
}

static OxGraph* ox_node_graph(const OxNode* n, const char* name) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_GRAPH ? a->g : NULL;
}

/* --- inference ------------------------------------------------------------------------- */

static OnyxStatus* ox_copy_type(OxValue* dst, const OxValue* src, bool with_shape) {
  OX_TRY(ox_value_set(dst, src->type, with_shape ? src->rank : -1, with_shape ? src->dims : NULL));
  dst->kind = src->kind;
  return NULL;
}

/* Types a subgraph's outer-scope reads from the enclosing graphs. */
static OnyxStatus* ox_type_outer(const OxGraph* g, OxGraph* sub) {
  for (size_t i = 0; i < sub->n_values; i++) {
    OxValue* v = sub->values[i];
    if (!v->is_outer_scope || v->producer || v->constant || v->type != ONYX_ELEM_UNDEFINED)
      continue;
    const OxValue* o = NULL;
    for (const OxGraph* up = g; up && !o; up = up->parent)
      o = ox_graph_find(up, v->name);
    if (!o || o->type == ONYX_ELEM_UNDEFINED)
      return ox_status(ONYX_INVALID_MODEL, "subgraph '%s' reads '%s', whose type is not known",
                       sub->name, v->name);
    /* Type only: a branch not taken may not fit the shapes (If in a function
     * body is inferred for every case); kernels size outputs at run time. */
    OX_TRY(ox_copy_type(v, o, false));
  }
  return NULL;
}

/* Formal input i of a subgraph takes `src`'s type when it declares none. */
static OnyxStatus* ox_type_formal(OxGraph* sub, size_t i, const OxValue* src, OnyxElemType t,
                                  uint8_t kind, int32_t rank) {
  if (i >= sub->n_inputs) return NULL;
  OxValue* v = sub->inputs[i];
  if (v->type != ONYX_ELEM_UNDEFINED) return NULL;
  if (src) return ox_copy_type(v, src, src->kind == OX_VK_TENSOR && rank >= 0);
  /* A known rank with unknown dims: every dim ONYX_DIM_UNKNOWN. */
  int64_t dims[64];
  if (rank > 64) rank = -1;
  for (int32_t k = 0; k < rank; k++)
    dims[k] = ONYX_DIM_UNKNOWN;
  OX_TRY(ox_value_set(v, t, rank, rank > 0 ? dims : NULL));
  v->kind = kind;
  return NULL;
}

static OnyxStatus* ox_resolve_sub(const OxNode* n, const char* attr, OxGraph* g, OxGraph* sub,
                                  const OxSchemaRegistry* const* customs, size_t n_customs) {
  OnyxStatus* st = ox_type_outer(g, sub);
  if (!st) st = ox_graph_resolve(sub, customs, n_customs);
  if (st) return ox_status_wrap(st, "node '%s' (%s): subgraph '%s'", n->name, n->op_type, attr);
  return NULL;
}

static bool ox_seq_kind(uint8_t k) {
  return k == OX_VK_SEQUENCE || k == OX_VK_OPT_SEQUENCE;
}

static const char* ox_kind_word(uint8_t k) {
  return ox_seq_kind(k) ? "a sequence" : "a tensor";
}

/* Output `oi` of subgraph `attr` must agree with `want` (a value the node
 * declares or the subgraph's output feeds back into) in element type and in
 * being a tensor or a sequence; types not known yet are not compared. */
static OnyxStatus* ox_check_sub_output(const OxNode* n, const char* attr, const OxGraph* sub,
                                       size_t oi, const OxValue* want, const char* what) {
  const OxValue* got = sub->outputs[oi];
  if (!want || !got || want->type == ONYX_ELEM_UNDEFINED) return NULL; /* nothing declared */
  if (ox_seq_kind(got->kind) != ox_seq_kind(want->kind))
    return ox_node_error(n, "subgraph '%s' output %zu ('%s') is %s, but %s ('%s') is %s", attr, oi,
                         got->name, ox_kind_word(got->kind), what, want->name,
                         ox_kind_word(want->kind));
  if (got->type != ONYX_ELEM_UNDEFINED && got->type != want->type)
    return ox_node_error(
        n, "subgraph '%s' output %zu ('%s') has element type %s, but %s ('%s') is %s", attr, oi,
        got->name, ox_elem_name(got->type), what, want->name, ox_elem_name(want->type));
  return NULL;
}

/* The node's outputs as the model declares them (before inference types
 * them from the subgraph), for ox_check_sub_output. */
static OnyxStatus* ox_check_declared(const OxNode* n, const char* attr, const OxGraph* sub,
                                     size_t first) {
  for (size_t i = 0; i < n->n_outputs && first + i < sub->n_outputs; i++) {
    char what[64];
    snprintf(what, sizeof what, "the node's output %zu", i);
    OX_TRY(ox_check_sub_output(n, attr, sub, first + i, n->outputs[i], what));
  }
  return NULL;
}

static OnyxStatus* ox_infer_if(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                               size_t n_customs) {
  OxGraph* br[2] = {ox_node_graph(n, "then_branch"), ox_node_graph(n, "else_branch")};
  const char* names[2] = {"then_branch", "else_branch"};
  for (int b = 0; b < 2; b++) {
    if (!br[b]) return ox_node_error(n, "has no '%s' graph", names[b]);
    if (br[b]->n_outputs != n->n_outputs)
      return ox_node_error(n, "'%s' has %zu outputs but the node has %zu", names[b],
                           br[b]->n_outputs, n->n_outputs);
    OX_TRY(ox_resolve_sub(n, names[b], g, br[b], customs, n_customs));
    OX_TRY(ox_check_declared(n, names[b], br[b], 0));
  }
  for (size_t i = 0; i < n->n_outputs; i++) {
    char what[64];
    snprintf(what, sizeof what, "'then_branch' output %zu", i);
    OX_TRY(ox_check_sub_output(n, "else_branch", br[1], i, br[0]->outputs[i], what));
  }
  for (size_t i = 0; i < n->n_outputs; i++) {
    if (!n->outputs[i]) continue;
    const OxValue *a = br[0]->outputs[i], *b = br[1]->outputs[i];
    bool same = a->rank == b->rank && a->kind == OX_VK_TENSOR && b->kind == OX_VK_TENSOR;
    for (int32_t k = 0; same && k < a->rank; k++)
      same = a->dims[k] == b->dims[k];
    OX_TRY(ox_copy_type(n->outputs[i], a, same));
    if (a->kind == OX_VK_OPT_TENSOR || b->kind == OX_VK_OPT_TENSOR)
      n->outputs[i]->kind = OX_VK_OPT_TENSOR;
    if (a->kind == OX_VK_OPT_SEQUENCE || b->kind == OX_VK_OPT_SEQUENCE)
      n->outputs[i]->kind = OX_VK_OPT_SEQUENCE;
  }
  return NULL;
}

static OnyxStatus* ox_infer_loop(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_error(n, "has no 'body' graph");
  size_t n_formal = n->n_inputs - n->n_implicit;
  if (n_formal < 2) return ox_node_error(n, "needs at least the inputs M and cond");
  size_t carried = n_formal - 2;
  if (body->n_inputs != carried + 2)
    return ox_node_error(n,
                         "'body' has %zu inputs; it needs %zu (iteration, condition and %zu "
                         "loop-carried values)",
                         body->n_inputs, carried + 2, carried);
  if (body->n_outputs < carried + 1)
    return ox_node_error(n, "'body' has %zu outputs; it needs at least %zu", body->n_outputs,
                         carried + 1);
  if (n->n_outputs > body->n_outputs - 1)
    return ox_node_error(n, "has %zu outputs but 'body' yields only %zu", n->n_outputs,
                         body->n_outputs - 1);
  OX_TRY(ox_type_formal(body, 0, NULL, ONYX_ELEM_INT64, OX_VK_TENSOR, 0));
  OX_TRY(ox_type_formal(body, 1, NULL, ONYX_ELEM_BOOL, OX_VK_TENSOR, 0));
  for (size_t i = 0; i < carried; i++) {
    const OxValue* src = n->inputs[2 + i];
    if (!src) return ox_node_error(n, "loop-carried input %zu is missing", i);
    OX_TRY(ox_type_formal(body, 2 + i, src, src->type, src->kind, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs));
  const OxValue* c = body->outputs[0];
  if (c && (ox_seq_kind(c->kind) || (c->type != ONYX_ELEM_UNDEFINED && c->type != ONYX_ELEM_BOOL)))
    return ox_node_error(n, "subgraph 'body' output 0 ('%s'), the condition, is %s of %s, not bool",
                         c->name, ox_kind_word(c->kind), ox_elem_name(c->type));
  for (size_t i = 0; i < carried; i++) {
    char what[64];
    snprintf(what, sizeof what, "loop-carried input %zu", i);
    OX_TRY(ox_check_sub_output(n, "body", body, 1 + i, n->inputs[2 + i], what));
  }
  for (size_t k = carried; k + 1 < body->n_outputs; k++)
    if (body->outputs[1 + k] && ox_seq_kind(body->outputs[1 + k]->kind))
      return ox_node_error(n,
                           "subgraph 'body' output %zu ('%s') is a sequence, but scan outputs "
                           "stack tensors",
                           1 + k, body->outputs[1 + k]->name);
  OX_TRY(ox_check_declared(n, "body", body, 1));
  for (size_t i = 0; i < n->n_outputs; i++) {
    if (!n->outputs[i]) continue;
    const OxValue* b = body->outputs[1 + i];
    OX_TRY(ox_copy_type(n->outputs[i], b, false));
    if (i >= carried) n->outputs[i]->kind = OX_VK_TENSOR; /* scan outputs stack tensors */
  }
  return NULL;
}

/* Scan's layout: opset 8 has sequence_lens first and a batch axis. */
typedef struct OxScanShape {
  bool v8;
  size_t first; /* index of the first state input */
  size_t n_state, n_scan_in, n_scan_out;
} OxScanShape;

/* body_inputs: the body's formal inputs (a nested plan adds outer values). */
static OnyxStatus* ox_scan_shape(const OxNode* n, const OxGraph* body, size_t body_inputs,
                                 OxScanShape* sh) {
  size_t n_formal = n->n_inputs - n->n_implicit;
  sh->v8 = n->since_version < 9;
  sh->first = sh->v8 ? 1 : 0;
  int64_t k = ox_node_attr_int(n, "num_scan_inputs", -1);
  if (k < 1 || (size_t)k + sh->first > n_formal)
    return ox_node_error(n, "'num_scan_inputs' %lld does not fit its %zu inputs", (long long)k,
                         n_formal);
  sh->n_scan_in = (size_t)k;
  sh->n_state = n_formal - sh->first - sh->n_scan_in;
  if (body_inputs != sh->n_state + sh->n_scan_in)
    return ox_node_error(n, "'body' has %zu inputs; it needs %zu", body_inputs,
                         sh->n_state + sh->n_scan_in);
  if (body->n_outputs < sh->n_state || n->n_outputs != body->n_outputs)
    return ox_node_error(n, "'body' has %zu outputs and the node %zu; they must agree",
                         body->n_outputs, n->n_outputs);
  sh->n_scan_out = body->n_outputs - sh->n_state;
  return NULL;
}

static OnyxStatus* ox_infer_scan(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_error(n, "has no 'body' graph");
  OxScanShape sh;
  OX_TRY(ox_scan_shape(n, body, body->n_inputs, &sh));
  for (size_t i = 0; i < sh.n_state + sh.n_scan_in; i++) {
    const OxValue* src = n->inputs[sh.first + i];
    if (!src) return ox_node_error(n, "input %zu is missing", sh.first + i);
    OX_TRY(ox_type_formal(body, i, NULL, src->type, OX_VK_TENSOR, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs));
  for (size_t i = 0; i < sh.n_state; i++) {
    char what[64];
    snprintf(what, sizeof what, "state input %zu", i);
    OX_TRY(ox_check_sub_output(n, "body", body, i, n->inputs[sh.first + i], what));
  }
  for (size_t i = 0; i < body->n_outputs; i++)
    if (body->outputs[i] && ox_seq_kind(body->outputs[i]->kind))
      return ox_node_error(n, "subgraph 'body' output %zu ('%s') is a sequence; Scan takes tensors",
                           i, body->outputs[i]->name);
  OX_TRY(ox_check_declared(n, "body", body, 0));
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i]) OX_TRY(ox_value_set(n->outputs[i], body->outputs[i]->type, -1, NULL));
  return NULL;
}

static OnyxStatus* ox_infer_seqmap(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                   size_t n_customs) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_error(n, "has no 'body' graph");
  size_t n_formal = n->n_inputs - n->n_implicit;
  if (!n_formal || !n->inputs[0] || n->inputs[0]->kind != OX_VK_SEQUENCE)
    return ox_node_error(n, "input 0 must be a sequence");
  if (body->n_inputs != n_formal || body->n_outputs != n->n_outputs)
    return ox_node_error(n, "'body' has %zu inputs and %zu outputs; the node %zu and %zu",
                         body->n_inputs, body->n_outputs, n_formal, n->n_outputs);
  for (size_t i = 0; i < n_formal; i++) {
    const OxValue* src = n->inputs[i];
    if (!src) return ox_node_error(n, "input %zu is missing", i);
    OX_TRY(ox_type_formal(body, i, NULL, src->type, OX_VK_TENSOR, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs));
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i]) {
      OX_TRY(ox_value_set(n->outputs[i], body->outputs[i]->type, -1, NULL));
      n->outputs[i]->kind = OX_VK_SEQUENCE;
    }
  return NULL;
}

/* FlexAttention (ai.onnx.preview): attention whose scores and probabilities
 * pass through the optional score_mod / prob_mod subgraphs. */
static OnyxStatus* ox_infer_flex(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs) {
  if (n->n_inputs - n->n_implicit < 3 || !n->inputs[0] || !n->inputs[1] || !n->inputs[2])
    return ox_node_error(n, "needs the inputs Q, K and V");
  const OxValue *q = n->inputs[0], *v = n->inputs[2];
  OnyxElemType st = q->type == ONYX_ELEM_FLOAT64 ? ONYX_ELEM_FLOAT64 : ONYX_ELEM_FLOAT32;
  const char* names[2] = {"score_mod", "prob_mod"};
  for (int b = 0; b < 2; b++) {
    OxGraph* sub = ox_node_graph(n, names[b]);
    if (!sub) continue;
    if (sub->n_inputs != 1 || sub->n_outputs != 1)
      return ox_node_error(n, "'%s' must have one input and one output", names[b]);
    OX_TRY(ox_type_formal(sub, 0, NULL, st, OX_VK_TENSOR, 4));
    OX_TRY(ox_resolve_sub(n, names[b], g, sub, customs, n_customs));
  }
  if (!n->n_outputs || !n->outputs[0]) return NULL;
  if (q->rank == 4 && v->rank == 4) {
    int64_t d[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    return ox_value_set(n->outputs[0], q->type, 4, d);
  }
  return ox_value_set(n->outputs[0], q->type, -1, NULL);
}

OnyxStatus* ox_host_infer(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                          size_t n_customs) {
  if (ox_flex_op(n)) return ox_infer_flex(g, n, customs, n_customs);
  if (!*n->domain && !strcmp(n->op_type, "If")) return ox_infer_if(g, n, customs, n_customs);
  if (!*n->domain && !strcmp(n->op_type, "Loop")) return ox_infer_loop(g, n, customs, n_customs);
  if (!*n->domain && !strcmp(n->op_type, "Scan")) return ox_infer_scan(g, n, customs, n_customs);
  if (!*n->domain && !strcmp(n->op_type, "SequenceMap"))
    return ox_infer_seqmap(g, n, customs, n_customs);
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs)
      return ox_node_error(n, "has a subgraph, which only If, Loop, Scan and SequenceMap may have");
  return ox_seq_infer(n);
}

/* --- nested plans ------------------------------------------------------------------------ */

typedef struct OxSub {
  OnyxSession* s;
  size_t n_formal;
  size_t* outer; /* per extra input: index of the parent node's input */
  size_t n_outer;
} OxSub;

typedef struct OxHostState {
  OxSub subs[2];
  size_t n_subs;
} OxHostState;

static void ox_sub_free(OxSub* sub) {
  if (sub->s) {
    ox_plan_clear(sub->s);
    ox_partition_clear(&sub->s->part);
    free(sub->s);
  }
  free(sub->outer);
  *sub = (OxSub){0};
}

static OnyxStatus* ox_sub_create(OnyxSession* parent, const OxNode* n, OxGraph* g, OxSub* sub) {
  sub->n_formal = g->n_inputs;
  /* The outer-scope values become extra graph inputs (once per graph). */
  for (size_t i = 0; i < g->n_values; i++) {
    OxValue* v = g->values[i];
    if (v->is_outer_scope && !v->is_graph_input && !v->producer && !v->constant &&
        (v->n_consumers || v->is_graph_output))
      OX_TRY(ox_graph_add_input(g, v));
  }
  for (size_t i = 0; i < g->n_inputs; i++)
    if (!g->inputs[i]->is_outer_scope) sub->n_formal = i + 1;
  sub->n_outer = g->n_inputs - sub->n_formal;
  sub->outer = calloc(sub->n_outer + 1, sizeof *sub->outer);
  if (!sub->outer) return ox_oom();
  for (size_t k = 0; k < sub->n_outer; k++) {
    const char* name = g->inputs[sub->n_formal + k]->name;
    sub->outer[k] = OX_NO_SLOT;
    for (size_t i = n->n_inputs - n->n_implicit; i < n->n_inputs; i++)
      if (n->inputs[i] && !strcmp(n->inputs[i]->name, name)) sub->outer[k] = i;
    if (sub->outer[k] == OX_NO_SLOT)
      return ox_node_error(n, "internal: outer-scope value '%s' is not an input of the node", name);
  }
  OnyxSession* s = calloc(1, sizeof *s);
  if (!s) return ox_oom();
  *s = (OnyxSession){.opts = parent->opts,
                     .graph = g,
                     .eps = parent->eps,
                     .n_eps = parent->n_eps,
                     .pool = parent->pool,
                     .source = parent->source};
  sub->s = s;
  s->part = (OxPartition){.graph = g, .eps = s->eps, .n_eps = s->n_eps};
  /* The providers' node counts are the parent's: keep them. */
  size_t counts[64] = {0};
  for (size_t e = 0; e < s->n_eps && e < 64; e++)
    counts[e] = s->eps[e].n_nodes;
  OnyxStatus* st = ox_partition_run(&s->part, s->opts);
  for (size_t e = 0; e < s->n_eps && e < 64; e++)
    s->eps[e].n_nodes = counts[e];
  if (!st) st = ox_plan_build(s);
  return st;
}

OnyxStatus* ox_host_prepare(OnyxSession* s, OxStep* st) {
  OxNode* n = st->node;
  if (!ox_flow_op(n)) return NULL;
  OxHostState* hs = calloc(1, sizeof *hs);
  if (!hs) return ox_oom();
  st->state = hs;
  st->state_created = true;
  bool is_if = !strcmp(n->op_type, "If"), flex = ox_flex_op(n);
  const char* names[2] = {is_if  ? "then_branch"
                          : flex ? "score_mod"
                                 : "body",
                          is_if  ? "else_branch"
                          : flex ? "prob_mod"
                                 : NULL};
  for (int b = 0; b < 2 && names[b]; b++) {
    OxGraph* g = ox_node_graph(n, names[b]);
    hs->n_subs = (size_t)b + 1;
    if (!g && flex) continue; /* both are optional */
    if (!g) return ox_node_error(n, "has no '%s' graph", names[b]);
    OnyxStatus* err = ox_sub_create(s, n, g, &hs->subs[b]);
    if (err)
      return ox_status_wrap(err, "node '%s' (%s): subgraph '%s'", n->name, n->op_type, names[b]);
  }
  return NULL;
}

void ox_host_release(OxStep* st) {
  OxHostState* hs = st->state;
  if (!hs) return;
  for (size_t i = 0; i < hs->n_subs; i++)
    ox_sub_free(&hs->subs[i]);
  free(hs);
  st->state = NULL;
}

/* Runs a nested plan once: feeds[0..n_formal) are the formal inputs
 * (borrowed), the outer values come from the parent's frame. outs receive
 * every graph output (owned). */
static OnyxStatus* ox_sub_run(OxFrame* f, const OxStep* st, const OxSub* sub,
                              OxTensor* const* formal, OxTensor** outs) {
  OxGraph* g = sub->s->graph;
  OxTensor** feeds = calloc(g->n_inputs + 1, sizeof *feeds);
  bool* wanted = calloc(g->n_outputs + 1, sizeof *wanted);
  if (!feeds || !wanted) {
    free(feeds);
    free(wanted);
    return ox_oom();
  }
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < sub->n_formal && !err; i++) {
    feeds[i] = formal[i];
    if (!feeds[i])
      err = ox_status(ONYX_INVALID_ARGUMENT, "input %zu of the subgraph is missing", i);
  }
  for (size_t k = 0; k < sub->n_outer && !err; k++) {
    size_t slot = st->in[sub->outer[k]];
    feeds[sub->n_formal + k] = slot == OX_NO_SLOT ? NULL : f->values[slot];
    if (!feeds[sub->n_formal + k])
      err = ox_status(ONYX_FAIL, "internal: outer-scope value '%s' is not available",
                      g->inputs[sub->n_formal + k]->name);
  }
  for (size_t i = 0; i < g->n_outputs; i++)
    wanted[i] = true;
  if (!err) err = ox_execute_nested(f, sub->s, feeds, outs, wanted);
  free(feeds);
  free(wanted);
  return err;
}

static OxTensor* ox_in(const OxFrame* f, const OxStep* st, size_t i) {
  return i < st->n_in && st->in[i] != OX_NO_SLOT ? f->values[st->in[i]] : NULL;
}

static void ox_free_all(OxTensor** v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    ox_tensor_free(v[i]);
    v[i] = NULL;
  }
}

static OnyxStatus* ox_bool_of(const OxTensor* t, const char* what, bool* out) {
  if (!t || t->vkind != OX_RT_TENSOR || t->count != 1 || t->type != ONYX_ELEM_BOOL)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s must be one bool value", what);
  *out = *(const uint8_t*)t->data != 0;
  return NULL;
}

static OnyxStatus* ox_run_if(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  bool c = false;
  OX_TRY(ox_bool_of(ox_in(f, st, 0), "the condition", &c));
  return ox_sub_run(f, st, &hs->subs[c ? 0 : 1], NULL, outs);
}

/* Growable list of per-iteration tensors of one scan output; `bytes` is
 * what it holds (items and their headers), charged to the run's live bytes. */
typedef struct OxStack {
  OxTensor** items;
  size_t n, cap;
  size_t bytes;
} OxStack;

static size_t ox_held_bytes(const OxTensor* t) {
  if (!t) return 0;
  size_t sum = sizeof *t;
  if (t->vkind == OX_RT_TENSOR) return ox_add_size(sum, t->bytes, &sum) ? sum : SIZE_MAX;
  for (size_t i = 0; i < t->n_items; i++)
    if (!ox_add_size(sum, ox_held_bytes(t->items[i]), &sum)) return SIZE_MAX;
  return sum;
}

/* Appends t (taking it on success). The stack becomes one tensor of the
 * node's outputs: it must stay within max_tensor_bytes, and what it holds
 * within the run's max_session_bytes. */
static OnyxStatus* ox_stack_push(OxFrame* f, const OxNode* n, size_t which, OxStack* s,
                                 OxTensor* t) {
  size_t b = ox_held_bytes(t), total;
  size_t max = f->session->opts->max_tensor_bytes;
  if (!ox_add_size(s->bytes, b, &total) || (max && total > max))
    return ox_status(ONYX_LIMIT_EXCEEDED,
                     "node '%s' (%s): output %zu would hold more than %zu bytes after %zu "
                     "iterations (%zu bytes so far, %zu more), over the limit of %zu bytes "
                     "(max_tensor_bytes)",
                     n->name, n->op_type, which, s->bytes, s->n + 1, s->bytes, b, max);
  OX_TRY(ox_frame_reserve(f, n, b));
  if (!ox_grow((void**)&s->items, &s->cap, s->n + 1, sizeof *s->items)) return ox_oom();
  s->items[s->n++] = t;
  s->bytes = total;
  ox_frame_charge(f, b);
  return NULL;
}

static void ox_stacks_free(OxFrame* f, OxStack* s, size_t n) {
  for (size_t i = 0; s && i < n; i++) {
    ox_frame_uncharge(f, s[i].bytes);
    ox_free_all(s[i].items, s[i].n);
    free(s[i].items);
  }
  free(s);
}

/* A value a host op holds across iterations (loop-carried, scan state):
 * *slot takes t, and the run's live bytes follow. */
static void ox_hold(OxFrame* f, OxTensor** slot, size_t* held, OxTensor* t) {
  ox_frame_uncharge(f, *held);
  ox_tensor_free(*slot);
  *slot = t;
  *held = ox_held_bytes(t);
  ox_frame_charge(f, *held);
}

static void ox_release_held(OxFrame* f, size_t* held, size_t n) {
  for (size_t i = 0; held && i < n; i++) {
    ox_frame_uncharge(f, held[i]);
    held[i] = 0;
  }
}

/* Stacks per-iteration outputs on axis `axis` (reversed when asked); no
 * iteration: an empty tensor shaped from the body's declared output. */
static OnyxStatus* ox_stack_out(OxFrame* f, const OxNode* n, OxStack* s, const OxValue* decl,
                                int64_t axis, bool reverse, OxTensor** out) {
  if (!s->n) {
    int64_t dims[OX_CF_MAX_RANK + 1] = {0};
    size_t rank = 1;
    for (int32_t i = 0; decl->rank > 0 && i < decl->rank && rank < OX_CF_MAX_RANK; i++)
      dims[rank++] = decl->dims[i] < 0 ? 0 : decl->dims[i];
    return ox_host_tensor_new(f, n, decl->type, dims, rank, out);
  }
  if (reverse)
    for (size_t i = 0; i < s->n / 2; i++) {
      OxTensor* t = s->items[i];
      s->items[i] = s->items[s->n - 1 - i];
      s->items[s->n - 1 - i] = t;
    }
  return ox_cf_concat(f, n, s->items, s->n, axis, true, out);
}

static OnyxStatus* ox_run_loop(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  const OxGraph* body = sub->s->graph;
  size_t carried = n->n_inputs - n->n_implicit - 2;
  size_t n_scan = body->n_outputs - 1 - carried;
  const OxTensor* m = ox_in(f, st, 0);
  const OxTensor* c0 = ox_in(f, st, 1);
  int64_t max_trips = INT64_MAX;
  if (m) {
    if (m->vkind != OX_RT_TENSOR || m->count != 1 || m->type != ONYX_ELEM_INT64)
      return ox_status(ONYX_INVALID_ARGUMENT, "M must be one int64 value");
    max_trips = *(const int64_t*)m->data;
  }
  bool cond = true;
  if (c0) OX_TRY(ox_bool_of(c0, "the condition", &cond));
  OxTensor** formal = calloc(carried + 2, sizeof *formal);
  size_t* held = calloc(carried + 1, sizeof *held); /* live bytes of each carried value */
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  OxStack* stacks = calloc(n_scan + 1, sizeof *stacks);
  OxTensor *iter = NULL, *cnd = NULL;
  OnyxStatus* err = (!formal || !held || !bout || !stacks) ? ox_oom() : NULL;
  if (!err) err = ox_tensor_new(ONYX_ELEM_INT64, NULL, 0, &iter);
  if (!err) err = ox_tensor_new(ONYX_ELEM_BOOL, NULL, 0, &cnd);
  for (size_t i = 0; !err && i < carried; i++)
    err = ox_value_share(ox_in(f, st, 2 + i), &formal[2 + i]);
  for (int64_t it = 0; !err && cond && it < max_trips; it++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %lld", (long long)it);
      break;
    }
    *(int64_t*)iter->data = it;
    *(uint8_t*)cnd->data = cond;
    formal[0] = iter;
    formal[1] = cnd;
    err = ox_sub_run(f, st, sub, formal, bout);
    if (err) {
      err = ox_status_wrap(err, "iteration %lld", (long long)it);
      break;
    }
    err = ox_bool_of(bout[0], "the body's condition output", &cond);
    for (size_t i = 0; i < carried; i++) {
      ox_hold(f, &formal[2 + i], &held[i], bout[1 + i]);
      bout[1 + i] = NULL;
    }
    for (size_t k = 0; !err && k < n_scan; k++) {
      err = ox_stack_push(f, n, carried + k, &stacks[k], bout[1 + carried + k]);
      if (!err) bout[1 + carried + k] = NULL;
    }
    ox_free_all(bout, body->n_outputs);
  }
  for (size_t i = 0; !err && i < n->n_outputs; i++) {
    if (i < carried) {
      outs[i] = formal[2 + i];
      formal[2 + i] = NULL;
    } else {
      err = ox_stack_out(f, n, &stacks[i - carried], body->outputs[1 + i], 0, false, &outs[i]);
    }
  }
  ox_release_held(f, held, carried);
  if (formal) ox_free_all(formal + 2, carried);
  ox_free_all(bout, body->n_outputs);
  free(formal);
  free(held);
  free(bout);
  ox_stacks_free(f, stacks, n_scan);
  ox_tensor_free(iter);
  ox_tensor_free(cnd);
  return err;
}

static int64_t ox_attr_at(const OxNode* n, const char* name, size_t i, int64_t fallback) {
  size_t count = 0;
  const int64_t* v = ox_node_attr_ints(n, name, &count);
  return v && i < count ? v[i] : fallback;
}

/* One Scan over states and scan inputs (no batch axis): the opset-9 form.
 * states/scans are borrowed; outs get n_state + n_scan_out values. */
static OnyxStatus* ox_scan_once(OxFrame* f, const OxStep* st, const OxSub* sub,
                                const OxScanShape* sh, OxTensor* const* states,
                                OxTensor* const* scans, const int64_t* in_axes,
                                const int64_t* out_axes, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxGraph* body = sub->s->graph;
  int64_t len = -1;
  for (size_t j = 0; j < sh->n_scan_in; j++) {
    const OxTensor* t = scans[j];
    int64_t ax = in_axes[j] < 0 ? in_axes[j] + (int64_t)t->rank : in_axes[j];
    if (ax < 0 || ax >= (int64_t)t->rank)
      return ox_status(ONYX_INVALID_ARGUMENT, "scan input %zu has no axis %lld", j,
                       (long long)in_axes[j]);
    if (len >= 0 && t->dims[ax] != len)
      return ox_status(ONYX_INVALID_ARGUMENT, "scan inputs have different lengths (%lld, %lld)",
                       (long long)len, (long long)t->dims[ax]);
    len = t->dims[ax];
  }
  size_t nb = sh->n_state + sh->n_scan_in;
  OxTensor** formal = calloc(nb + 1, sizeof *formal);
  size_t* held = calloc(nb + 1, sizeof *held); /* live bytes of each formal value */
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  OxStack* stacks = calloc(sh->n_scan_out + 1, sizeof *stacks);
  OnyxStatus* err = (!formal || !held || !bout || !stacks) ? ox_oom() : NULL;
  for (size_t i = 0; !err && i < sh->n_state; i++)
    err = ox_value_share(states[i], &formal[i]);
  for (int64_t t = 0; !err && t < len; t++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %lld", (long long)t);
      break;
    }
    for (size_t j = 0; !err && j < sh->n_scan_in; j++) {
      const OxTensor* x = scans[j];
      int64_t ax = in_axes[j] < 0 ? in_axes[j] + (int64_t)x->rank : in_axes[j];
      int64_t at = ox_attr_at(n, "scan_input_directions", j, 0) ? len - 1 - t : t;
      OxTensor* slice = NULL;
      err = ox_cf_take(f, n, x, (size_t)ax, at, &slice);
      ox_hold(f, &formal[sh->n_state + j], &held[sh->n_state + j], slice);
    }
    if (!err) err = ox_sub_run(f, st, sub, formal, bout);
    for (size_t i = 0; !err && i < sh->n_state; i++) {
      ox_hold(f, &formal[i], &held[i], bout[i]);
      bout[i] = NULL;
    }
    for (size_t k = 0; !err && k < sh->n_scan_out; k++) {
      err = ox_stack_push(f, n, sh->n_state + k, &stacks[k], bout[sh->n_state + k]);
      if (!err) bout[sh->n_state + k] = NULL;
    }
    ox_free_all(bout, body->n_outputs);
  }
  for (size_t i = 0; !err && i < sh->n_state; i++) {
    outs[i] = formal[i];
    formal[i] = NULL;
  }
  for (size_t k = 0; !err && k < sh->n_scan_out; k++) {
    int64_t ax = out_axes[k];
    const OxValue* decl = body->outputs[sh->n_state + k];
    if (ax < 0 && stacks[k].n) ax += (int64_t)stacks[k].items[0]->rank + 1;
    err = ox_stack_out(f, n, &stacks[k], decl, ax < 0 ? 0 : ax,
                       ox_attr_at(n, "scan_output_directions", k, 0) != 0, &outs[sh->n_state + k]);
  }
  ox_release_held(f, held, nb);
  ox_free_all(formal, nb);
  ox_free_all(bout, body->n_outputs);
  free(formal);
  free(held);
  free(bout);
  ox_stacks_free(f, stacks, sh->n_scan_out);
  return err;
}

/* Keeps the first n entries of axis 0 (0 <= n <= length). */
static OnyxStatus* ox_cf_prefix(OxFrame* f, const OxNode* node, OxTensor** t, int64_t n) {
  OxTensor* x = *t;
  if (!x->rank || n < 0 || n > x->dims[0])
    return ox_status(ONYX_INVALID_ARGUMENT, "sequence length %lld is out of range", (long long)n);
  if (n == x->dims[0]) return NULL;
  int64_t dims[OX_CF_MAX_RANK];
  memcpy(dims, x->dims, x->rank * sizeof *dims);
  dims[0] = n;
  OxTensor* y = NULL;
  OX_TRY(ox_host_tensor_new(f, node, x->type, dims, x->rank, &y));
  OnyxStatus* st = ox_cf_copy(y, 0, x, 0, y->count);
  if (st) {
    ox_tensor_free(y);
    return st;
  }
  ox_tensor_free(x);
  *t = y;
  return NULL;
}

/* Zero-pads axis 0 to `len` entries. */
static OnyxStatus* ox_cf_pad(OxFrame* f, const OxNode* n, OxTensor** t, int64_t len) {
  OxTensor* x = *t;
  if (!x->rank || x->dims[0] >= len) return NULL;
  int64_t dims[OX_CF_MAX_RANK];
  memcpy(dims, x->dims, x->rank * sizeof *dims);
  dims[0] = len;
  OxTensor* y = NULL;
  OX_TRY(ox_host_tensor_new(f, n, x->type, dims, x->rank, &y));
  OnyxStatus* st = ox_cf_copy(y, 0, x, 0, x->count);
  if (st) {
    ox_tensor_free(y);
    return st;
  }
  ox_tensor_free(x);
  *t = y;
  return NULL;
}

static OnyxStatus* ox_run_scan(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  OxScanShape sh;
  OX_TRY(ox_scan_shape(n, sub->s->graph, sub->n_formal, &sh));
  size_t n_out = sh.n_state + sh.n_scan_out;
  int64_t* in_axes = calloc(sh.n_scan_in + 1, sizeof *in_axes);
  int64_t* out_axes = calloc(sh.n_scan_out + 1, sizeof *out_axes);
  OxTensor** states = calloc(sh.n_state + 1, sizeof *states);
  OxTensor** scans = calloc(sh.n_scan_in + 1, sizeof *scans);
  OnyxStatus* err = (!in_axes || !out_axes || !states || !scans) ? ox_oom() : NULL;
  for (size_t j = 0; !err && j < sh.n_scan_in; j++)
    in_axes[j] = sh.v8 ? 0 : ox_attr_at(n, "scan_input_axes", j, 0);
  for (size_t k = 0; !err && k < sh.n_scan_out; k++)
    out_axes[k] = sh.v8 ? 0 : ox_attr_at(n, "scan_output_axes", k, 0);
  if (!err && !sh.v8) {
    for (size_t i = 0; i < sh.n_state; i++)
      states[i] = ox_in(f, st, i);
    for (size_t j = 0; j < sh.n_scan_in; j++)
      scans[j] = ox_in(f, st, sh.n_state + j);
    err = ox_scan_once(f, st, sub, &sh, states, scans, in_axes, out_axes, outs);
  } else if (!err) {
    /* Opset 8: axis 0 of every input is the batch; each batch row is one
     * opset-9 scan over its first sequence_lens[b] steps (all when absent);
     * scan outputs are zero-padded to the longest. */
    const OxTensor* first = ox_in(f, st, sh.first);
    int64_t batch = first && first->rank ? first->dims[0] : 0;
    const OxTensor* lens = ox_in(f, st, 0);
    if (lens && (lens->vkind != OX_RT_TENSOR || lens->type != ONYX_ELEM_INT64 ||
                 lens->count != (size_t)batch))
      err =
          ox_status(ONYX_INVALID_ARGUMENT, "sequence_lens must be int64 with one entry per batch");
    OxStack* rows = calloc(n_out + 1, sizeof *rows);
    OxTensor** row_out = calloc(n_out + 1, sizeof *row_out);
    if (!rows || !row_out) err = ox_oom();
    for (int64_t b = 0; !err && b < batch; b++) {
      for (size_t i = 0; !err && i < sh.n_state + sh.n_scan_in; i++) {
        OxTensor** dst = i < sh.n_state ? &states[i] : &scans[i - sh.n_state];
        ox_tensor_free(*dst);
        *dst = NULL;
        const OxTensor* x = ox_in(f, st, sh.first + i);
        if (!x || x->vkind != OX_RT_TENSOR)
          err = ox_status(ONYX_INVALID_ARGUMENT, "input %zu is missing", sh.first + i);
        else
          err = ox_cf_take(f, n, x, 0, b, dst);
        if (!err && lens && i >= sh.n_state)
          err = ox_cf_prefix(f, n, dst, ((const int64_t*)lens->data)[b]);
      }
      if (!err) err = ox_scan_once(f, st, sub, &sh, states, scans, in_axes, out_axes, row_out);
      for (size_t o = 0; !err && o < n_out; o++) {
        const OxTensor* x0 = ox_in(f, st, sh.first + sh.n_state); /* first scan input */
        if (lens && o >= sh.n_state && x0 && x0->rank > 1)
          err = ox_cf_pad(f, n, &row_out[o], x0->dims[1]);
        if (err) break;
        err = ox_stack_push(f, n, o, &rows[o], row_out[o]);
        if (!err) row_out[o] = NULL;
      }
      ox_free_all(row_out, n_out);
    }
    for (size_t o = 0; !err && o < n_out; o++)
      err = ox_stack_out(f, n, &rows[o], sub->s->graph->outputs[o], 0, false, &outs[o]);
    ox_free_all(states, sh.n_state);
    ox_free_all(scans, sh.n_scan_in);
    ox_stacks_free(f, rows, n_out);
    free(row_out);
  }
  free(in_axes);
  free(out_axes);
  free(states);
  free(scans);
  return err;
}

static OnyxStatus* ox_run_seqmap(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  const OxGraph* body = sub->s->graph;
  size_t nin = n->n_inputs - n->n_implicit;
  const OxTensor* s0 = ox_in(f, st, 0);
  if (!s0 || s0->vkind != OX_RT_SEQUENCE)
    return ox_status(ONYX_INVALID_ARGUMENT, "input 0 is not a sequence");
  for (size_t i = 0; i < nin; i++) {
    const OxTensor* x = ox_in(f, st, i);
    if (x && x->vkind == OX_RT_SEQUENCE && x->n_items != s0->n_items)
      return ox_status(ONYX_INVALID_ARGUMENT, "sequence input %zu has %zu items, input 0 %zu", i,
                       x->n_items, s0->n_items);
  }
  OxTensor** formal = calloc(nin + 1, sizeof *formal);
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  /* What each output sequence holds so far, against the limits as a stack. */
  OxStack* acc = calloc(n->n_outputs + 1, sizeof *acc);
  OnyxStatus* err = (!formal || !bout || !acc) ? ox_oom() : NULL;
  for (size_t o = 0; !err && o < n->n_outputs; o++)
    err = ox_value_new_sequence(body->outputs[o]->type, &outs[o]);
  for (size_t k = 0; !err && k < s0->n_items; k++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %zu", k);
      break;
    }
    for (size_t i = 0; i < nin; i++) {
      OxTensor* x = ox_in(f, st, i);
      formal[i] = x && x->vkind == OX_RT_SEQUENCE ? x->items[k] : x;
    }
    err = ox_sub_run(f, st, sub, formal, bout);
    for (size_t o = 0; !err && o < n->n_outputs; o++) {
      size_t b = ox_held_bytes(bout[o]), max = f->session->opts->max_tensor_bytes, total;
      if (!ox_add_size(acc[o].bytes, b, &total) || (max && total > max))
        err = ox_status(ONYX_LIMIT_EXCEEDED,
                        "node '%s' (%s): output sequence %zu would hold more than %zu bytes "
                        "after %zu items, over the limit of %zu bytes (max_tensor_bytes)",
                        n->name, n->op_type, o, acc[o].bytes, k + 1, max);
      if (!err) err = ox_frame_reserve(f, n, b);
      if (!err) err = ox_sequence_insert(outs[o], SIZE_MAX, bout[o]);
      if (err) break;
      bout[o] = NULL;
      acc[o].bytes = total;
      ox_frame_charge(f, b);
    }
    ox_free_all(bout, body->n_outputs);
  }
  ox_stacks_free(f, acc, n->n_outputs);
  free(formal);
  free(bout);
  return err;
}

/* --- FlexAttention ------------------------------------------------------------------------ */
static double ox_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else {
    float m = (float)man / 1024.0f / 16384.0f; /* subnormal: man * 2^-24 */
    return sign ? -(double)m : (double)m;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t ox_to_f16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int32_t ne = (int32_t)e - 127 + 15;
  if (ne >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (ne <= 0) {
    if (ne < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - ne);
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)ne << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

static bool ox_flex_type(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64 || t == ONYX_ELEM_FLOAT16 ||
         t == ONYX_ELEM_BFLOAT16;
}

static double ox_getd(const OxTensor* t, size_t i) {
  switch (t->type) {
  case ONYX_ELEM_FLOAT64:
    return ((const double*)t->data)[i];
  case ONYX_ELEM_FLOAT16:
    return ox_f16(((const uint16_t*)t->data)[i]);
  case ONYX_ELEM_BFLOAT16: {
    uint32_t bits = (uint32_t)((const uint16_t*)t->data)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  default:
    return ((const float*)t->data)[i];
  }
}

static void ox_setd(OxTensor* t, size_t i, double v) {
  switch (t->type) {
  case ONYX_ELEM_FLOAT64:
    ((double*)t->data)[i] = v;
    break;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)t->data)[i] = ox_to_f16(v);
    break;
  case ONYX_ELEM_BFLOAT16: {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
      bits = 0x7fc00000u;
    else
      bits += 0x7fffu + ((bits >> 16) & 1);
    ((uint16_t*)t->data)[i] = (uint16_t)(bits >> 16);
    break;
  }
  default:
    ((float*)t->data)[i] = (float)v;
  }
}

/* Passes x through a mod subgraph (if any): x is replaced by its output,
 * which must keep the shape. */
static OnyxStatus* ox_flex_mod(OxFrame* f, const OxStep* st, const OxSub* sub, OxTensor** x,
                               const char* what) {
  if (!sub->s) return NULL;
  OxTensor* out = NULL;
  OnyxStatus* err = ox_sub_run(f, st, sub, x, &out);
  if (err) return ox_status_wrap(err, "%s", what);
  bool same = out->vkind == OX_RT_TENSOR && out->count == (*x)->count && ox_flex_type(out->type);
  if (!same) {
    ox_tensor_free(out);
    return ox_status(ONYX_INVALID_ARGUMENT, "%s must return a float tensor of the scores' shape",
                     what);
  }
  ox_tensor_free(*x);
  *x = out;
  return NULL;
}

static OnyxStatus* ox_run_flex(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxTensor *q = ox_in(f, st, 0), *k = ox_in(f, st, 1), *v = ox_in(f, st, 2);
  if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4 || !ox_flex_type(q->type) ||
      k->type != q->type || v->type != q->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "Q, K and V must be 4-D float tensors of one type");
  int64_t B = q->dims[0], Hq = q->dims[1], L = q->dims[2], E = q->dims[3];
  int64_t Hkv = k->dims[1], S = k->dims[2], Ev = v->dims[3];
  if (k->dims[0] != B || v->dims[0] != B || k->dims[3] != E || v->dims[1] != Hkv ||
      v->dims[2] != S || !Hkv || Hq % Hkv)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "shapes do not fit: Q [B,Hq,L,E], K [B,Hkv,S,E], V [B,Hkv,S,Ev] with Hq a "
                     "multiple of Hkv");
  const OxAttr* sa = ox_node_attr(n, "scale");
  double scale = sa && sa->type == ONYX_ATTR_FLOAT ? sa->f : 1.0 / sqrt((double)E);
  OnyxElemType sty = q->type == ONYX_ELEM_FLOAT64 ? ONYX_ELEM_FLOAT64 : ONYX_ELEM_FLOAT32;
  int64_t sdims[4] = {B, Hq, L, S}, ydims[4] = {B, Hq, L, Ev};
  OxTensor *sc = NULL, *y = NULL;
  OX_TRY(ox_host_tensor_new(f, n, sty, sdims, 4, &sc));
  int64_t rep = Hq / Hkv;
  OnyxStatus* err = NULL;
  for (int64_t b = 0; !err && b < B; b++)
    for (int64_t h = 0; !err && h < Hq; h++)
      for (int64_t l = 0; !err && l < L; l++) {
        err = ox_frame_stop_status(f); /* the work per row grows with S and E */
        for (int64_t s = 0; !err && s < S; s++) {
          size_t qo = (size_t)(((b * Hq + h) * L + l) * E);
          size_t ko = (size_t)(((b * Hkv + h / rep) * S + s) * E);
          double acc = 0;
          for (int64_t e = 0; e < E; e++)
            acc += ox_getd(q, qo + (size_t)e) * ox_getd(k, ko + (size_t)e);
          ox_setd(sc, (size_t)(((b * Hq + h) * L + l) * S + s), acc * scale);
        }
      }
  if (!err) err = ox_flex_mod(f, st, &hs->subs[0], &sc, "score_mod");
  /* Softmax over S, in place. */
  for (size_t row = 0; !err && row < (size_t)(B * Hq * L); row++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s < S; s++)
      mx = fmax(mx, ox_getd(sc, row * (size_t)S + (size_t)s));
    for (int64_t s = 0; s < S; s++) {
      double e = mx == -INFINITY ? 0 : exp(ox_getd(sc, row * (size_t)S + (size_t)s) - mx);
      ox_setd(sc, row * (size_t)S + (size_t)s, e);
      sum += e;
    }
    for (int64_t s = 0; s < S; s++)
      ox_setd(sc, row * (size_t)S + (size_t)s,
              sum > 0 ? ox_getd(sc, row * (size_t)S + (size_t)s) / sum : 0);
  }
  if (!err) err = ox_flex_mod(f, st, &hs->subs[1], &sc, "prob_mod");
  if (!err) err = ox_host_tensor_new(f, n, q->type, ydims, 4, &y);
  for (int64_t b = 0; !err && b < B; b++)
    for (int64_t h = 0; !err && h < Hq; h++)
      for (int64_t l = 0; !err && l < L; l++) {
        err = ox_frame_stop_status(f);
        for (int64_t e = 0; !err && e < Ev; e++) {
          double acc = 0;
          for (int64_t s = 0; s < S; s++)
            acc += ox_getd(sc, (size_t)(((b * Hq + h) * L + l) * S + s)) *
                   ox_getd(v, (size_t)(((b * Hkv + h / rep) * S + s) * Ev + e));
          ox_setd(y, (size_t)(((b * Hq + h) * L + l) * Ev + e), acc);
        }
      }
  ox_tensor_free(sc);
  if (err) {
    ox_tensor_free(y);
    return err;
  }
  outs[0] = y;
  return NULL;
}

OnyxStatus* ox_host_run(OxFrame* f, const OxStep* st) {
  const OxNode* n = st->node;
  OxTensor** outs = calloc(st->n_out + 1, sizeof *outs);
  OxTensor** ins = calloc(st->n_in + 1, sizeof *ins);
  if (!outs || !ins) {
    free(outs);
    free(ins);
    return ox_oom();
  }
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < st->n_in; i++)
    ins[i] = ox_in(f, st, i);
  OxHostState* hs = st->state;
  if (!ox_flow_op(n))
    err = ox_seq_run(f, n, ins, outs);
  else if (!hs)
    err = ox_status(ONYX_FAIL, "internal: no nested plan");
  else if (ox_flex_op(n))
    err = ox_run_flex(f, st, hs, outs);
  else if (!strcmp(n->op_type, "If"))
    err = ox_run_if(f, st, hs, outs);
  else if (!strcmp(n->op_type, "Loop"))
    err = ox_run_loop(f, st, hs, outs);
  else if (!strcmp(n->op_type, "Scan"))
    err = ox_run_scan(f, st, hs, outs);
  else
    err = ox_run_seqmap(f, st, hs, outs);
  if (err && strncmp(err->message ? err->message : "", "node '", 6))
    err = ox_status_wrap(err, "node '%s' (%s) on host", n->name, n->op_type);
  for (size_t i = 0; !err && i < st->n_out; i++) {
    if (st->out[i] == OX_NO_SLOT) continue;
    if (!outs[i]) {
      err = ox_status(ONYX_RUNTIME_ERROR, "node '%s' (%s) on host did not produce its output %zu",
                      n->name, n->op_type, i);
      break;
    }
    f->values[st->out[i]] = outs[i];
    outs[i] = NULL;
  }
  ox_free_all(outs, st->n_out);
  free(outs);
  free(ins);
  return err;
}
