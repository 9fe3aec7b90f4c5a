/* nested.c — the nested plans of control-flow steps (ox_nested.h): the
 * outer-scope values a subgraph reads become extra graph inputs, and the
 * subgraph gets its own partition (the parent's pins and fallback rule) and
 * plan. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_nested.h"
#include "ox_program.h"

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

static void ox_sub_free(OxSub* sub) {
  if (sub->s) {
    ox_plan_clear(sub->s);
    ox_partition_clear(&sub->s->part);
    free(sub->s);
  }
  free(sub->outer);
  *sub = (OxSub){0};
}

static OxGraph* ox_node_graph(const OxNode* n, const char* name) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_GRAPH ? a->g : NULL;
}

static OnyxStatus* ox_sub_create(OxProgram* parent, const OxNode* n, OxGraph* g, OxSub* sub) {
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
  OxProgram* s = calloc(1, sizeof *s);
  if (!s) return ox_oom();
  *s = (OxProgram){.cfg = parent->cfg,
                   .graph = g,
                   .eps = parent->eps,
                   .n_eps = parent->n_eps,
                   .pool = parent->pool,
                   .source = parent->source};
  sub->s = s;
  s->part = (OxPartition){.graph = g,
                          .eps = s->eps,
                          .n_eps = s->n_eps,
                          .pins = parent->part.pins,
                          .n_pins = parent->part.n_pins,
                          .fallback_deny = parent->part.fallback_deny};
  /* The providers' node counts are the parent's: keep them. */
  size_t counts[64] = {0};
  for (size_t e = 0; e < s->n_eps && e < 64; e++)
    counts[e] = s->eps[e].n_nodes;
  OnyxStatus* st = ox_partition_run(&s->part);
  for (size_t e = 0; e < s->n_eps && e < 64; e++)
    s->eps[e].n_nodes = counts[e];
  if (!st) st = ox_partition_kernels(&s->part);
  if (!st) st = ox_plan_build(s);
  return st;
}

OnyxStatus* ox_host_prepare(OxProgram* s, OxStep* st) {
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
