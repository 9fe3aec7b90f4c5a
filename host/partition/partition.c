/* partition.c — placing nodes on providers (ARCHITECTURE.md §4).
 *
 * Order: user pins first; then each provider, in the user's priority order,
 * sees the nodes nobody took yet and claims single nodes or convex groups;
 * cheap claims whose inputs live elsewhere are handed back; what is left is
 * an error naming every provider's reason. A provider's refused claim fails
 * session creation: a buggy provider is reported, never silently skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_function_body.h"
#include "ox_model.h"
#include "ox_schema.h"
#include "ox_partition.h"

static const char* ox_ep_name(const OxPartition* p, int32_t ep) {
  return ep >= 0 && (size_t)ep < p->n_eps ? p->eps[ep].name : "(none)";
}

static OnyxStatus* ox_add_decline(OxPartition* p, const OxNode* n, int32_t ep, const char* why) {
  if (!ox_grow((void**)&p->declines, &p->cap_declines, p->n_declines + 1, sizeof *p->declines))
    return ox_oom();
  /* Reports print "declined by <provider>: <reason>": a reason the provider
   * already prefixed with its own name loses that prefix. */
  const char* pname = ox_ep_name(p, ep);
  size_t plen = strlen(pname);
  if (why && !strncmp(why, pname, plen) && why[plen] == ':')
    why += plen + 1 + (why[plen + 1] == ' ');
  char* r = ox_strdup(why && *why ? why : "no reason given");
  char* name = ox_strdup(n->name);
  if (!r || !name) {
    free(r);
    free(name);
    return ox_oom();
  }
  p->declines[p->n_declines++] = (OxDecline){n->index, name, ep, r};
  return NULL;
}

/* --- the builder's functions (called by providers through the host API) ------- */

static OnyxStatus* ox_check_claimable(OnyxCapabilityBuilder* b, const OxNode* n) {
  OxPartition* p = b->part;
  if (!n || n->index >= p->graph->n_nodes || p->graph->nodes[n->index] != n)
    return ox_status(ONYX_PLACEMENT_ERROR, "provider '%s' claimed a node that is not in the graph",
                     ox_ep_name(p, b->ep));
  if (n->ep == OX_EP_HOST)
    return ox_status(ONYX_PLACEMENT_ERROR,
                     "provider '%s' claimed node '%s' (%s), which the host runs (control flow, "
                     "sequences and optionals are not offered to providers)",
                     ox_ep_name(p, b->ep), n->name, n->op_type);
  if (n->ep >= 0)
    return ox_status(ONYX_PLACEMENT_ERROR,
                     "provider '%s' claimed node '%s' (%s), which is already placed on '%s'",
                     ox_ep_name(p, b->ep), n->name, n->op_type, ox_ep_name(p, n->ep));
  return NULL;
}

int ox_builder_has_kernel(OnyxCapabilityBuilder* b, const OnyxNode* n, const char** reason) {
  const char* why = NULL;
  const OxKernel* k = ox_kreg_match(b->kernels, n, &why);
  if (!k) {
    snprintf(b->reason, sizeof b->reason, "%s", why ? why : "no kernel");
    if (reason) *reason = b->reason;
  }
  return k != NULL;
}

static OnyxStatus* ox_claim_node(OnyxCapabilityBuilder* b, const OnyxNode* cn) {
  OxNode* n = (OxNode*)cn;
  OX_TRY(ox_check_claimable(b, n));
  const char* why = NULL;
  if (!ox_builder_has_kernel(b, n, &why))
    return ox_status(ONYX_PLACEMENT_ERROR,
                     "provider '%s' claimed node '%s' (%s) but has no kernel for it: %s",
                     ox_ep_name(b->part, b->ep), n->name, n->op_type, why);
  n->ep = b->ep;
  return NULL;
}

/* Convex: no path leaves the group and comes back. In topological order, a
 * node outside the group is "downstream" if it reads a group node's or a
 * downstream node's output; a group node reading a downstream value closes
 * such a path. */
static bool ox_view_has_value(OxValue* const* list, size_t n, const OxValue* v) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == v) return true;
  return false;
}

/* Fills a group's view: its nodes in graph order, the values entering it,
 * and the values leaving it (read outside or graph outputs). */
static OnyxStatus* ox_group_view(const OxGraph* g, const bool* in_group, OnyxGraphView* v) {
  size_t cap_n = 0, cap_i = 0, cap_o = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    if (!in_group[i]) continue;
    OxNode* n = g->nodes[i];
    if (!ox_grow((void**)&v->nodes, &cap_n, v->n_nodes + 1, sizeof(OxNode*))) return ox_oom();
    v->nodes[v->n_nodes++] = n;
    for (size_t k = 0; k < n->n_inputs; k++) {
      OxValue* x = n->inputs[k];
      if (!x || (x->producer && in_group[x->producer->index])) continue;
      if (ox_view_has_value(v->inputs, v->n_inputs, x)) continue;
      if (!ox_grow((void**)&v->inputs, &cap_i, v->n_inputs + 1, sizeof(OxValue*))) return ox_oom();
      v->inputs[v->n_inputs++] = x;
    }
    for (size_t k = 0; k < n->n_outputs; k++) {
      OxValue* x = n->outputs[k];
      if (!x) continue;
      bool leaves = x->is_graph_output;
      for (size_t c = 0; c < x->n_consumers && !leaves; c++)
        leaves = !in_group[x->consumers[c]->index];
      if (!leaves) continue;
      if (!ox_grow((void**)&v->outputs, &cap_o, v->n_outputs + 1, sizeof(OxValue*)))
        return ox_oom();
      v->outputs[v->n_outputs++] = x;
    }
  }
  return NULL;
}

static OnyxStatus* ox_claim_group(OnyxCapabilityBuilder* b, const OnyxNode* const* nodes,
                                  size_t count, const char* name) {
  OxPartition* p = b->part;
  const OxGraph* g = p->graph;
  const char* pname = ox_ep_name(p, b->ep);
  if (!count || !nodes)
    return ox_status(ONYX_PLACEMENT_ERROR, "provider '%s' claimed an empty group", pname);
  if (!p->eps[b->ep].ep->compile)
    return ox_status(ONYX_PLACEMENT_ERROR,
                     "provider '%s' claimed a group but its EP has no compile function", pname);
  for (size_t i = 0; i < count; i++)
    OX_TRY(ox_check_claimable(b, nodes[i]));
  bool* in_group = calloc(g->n_nodes, sizeof *in_group);
  bool* down = calloc(g->n_nodes, sizeof *down);
  if (!in_group || !down) {
    free(in_group);
    free(down);
    return ox_oom();
  }
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < count && !st; i++) {
    if (in_group[nodes[i]->index])
      st = ox_status(ONYX_PLACEMENT_ERROR, "provider '%s' listed node '%s' twice in group '%s'",
                     pname, nodes[i]->name, name ? name : "");
    in_group[nodes[i]->index] = true;
  }
  const OxNode* w = st ? NULL : ox_nonconvex_witness(g, in_group, down);
  if (w)
    st = ox_status(ONYX_PLACEMENT_ERROR,
                   "provider '%s' claimed group '%s', which is not convex: a path leaves the "
                   "group and re-enters it at node '%s' (%s)",
                   pname, name ? name : "", w->name, w->op_type);
  OxGroup grp = {0};
  if (!st) st = ox_group_view(g, in_group, &grp.view);
  if (!st && !(grp.name = name && *name ? ox_strdup(name)
                                        : ox_asprintf("%s_group_%zu", pname, p->n_groups)))
    st = ox_oom();
  if (!st && !ox_grow((void**)&p->groups, &p->cap_groups, p->n_groups + 1, sizeof *p->groups))
    st = ox_oom();
  if (!st) {
    grp.ep = b->ep;
    for (size_t i = 0; i < grp.view.n_nodes; i++) {
      grp.view.nodes[i]->ep = b->ep;
      grp.view.nodes[i]->group = (int32_t)p->n_groups;
    }
    p->groups[p->n_groups++] = grp;
  } else {
    ox_view_clear(&grp.view);
    free(grp.name);
  }
  free(in_group);
  free(down);
  return st;
}

/* Keeps a copy of the first refused claim; the provider gets the original. */
static OnyxStatus* ox_trap(OnyxCapabilityBuilder* b, OnyxStatus* st) {
  if (st && !b->refused) b->refused = ox_status(st->code, "%s", st->message ? st->message : "");
  return st;
}

OnyxStatus* ox_builder_claim_node(OnyxCapabilityBuilder* b, const OnyxNode* n) {
  return ox_trap(b, ox_claim_node(b, n));
}

OnyxStatus* ox_builder_claim_group(OnyxCapabilityBuilder* b, const OnyxNode* const* nodes,
                                   size_t count, const char* name) {
  return ox_trap(b, ox_claim_group(b, nodes, count, name));
}

OnyxStatus* ox_builder_take_error(OnyxCapabilityBuilder* b) {
  OnyxStatus* st = b->refused;
  b->refused = NULL;
  return st;
}

void ox_builder_decline(OnyxCapabilityBuilder* b, const OnyxNode* n, const char* reason) {
  if (!n || n->index >= b->part->graph->n_nodes) return;
  OnyxStatus* st = ox_add_decline(b->part, n, b->ep, reason);
  ox_status_free(st); /* out of memory only loses a line of the report */
}

void ox_builder_mark_cheap(OnyxCapabilityBuilder* b, const OnyxNode* n) {
  if (n && n->index < b->part->graph->n_nodes) b->part->cheap[n->index] = true;
}

/* --- the passes ------------------------------------------------------------------- */

static int32_t ox_find_ep(const OxPartition* p, const char* name) {
  for (size_t i = 0; i < p->n_eps; i++)
    if (!strcmp(p->eps[i].name, name)) return (int32_t)i;
  return -1;
}

static const OxPin* ox_pin_for(const OxPartition* p, const OxNode* n) {
  for (size_t i = 0; i < p->n_pins; i++)
    if (p->pins[i].node_name && !strcmp(p->pins[i].node_name, n->name)) return &p->pins[i];
  for (size_t i = 0; i < p->n_pins; i++)
    if (p->pins[i].op_type && !strcmp(p->pins[i].op_type, n->op_type)) return &p->pins[i];
  return NULL;
}

/* Whether g or a subgraph nested in it has a node of this name / op type. */
static bool ox_graph_has_node(const OxGraph* g, const char* name, const char* op_type) {
  for (size_t i = 0; g && i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    if (name && n->name && !strcmp(n->name, name)) return true;
    if (op_type && !strcmp(n->op_type, op_type)) return true;
    for (size_t a = 0; a < n->n_attrs; a++) {
      const OxAttr* at = &n->attrs[a];
      if (at->type == ONYX_ATTR_GRAPH && ox_graph_has_node(at->g, name, op_type)) return true;
      for (size_t k = 0; at->type == ONYX_ATTR_GRAPHS && k < at->count; k++)
        if (ox_graph_has_node(at->graphs[k], name, op_type)) return true;
    }
  }
  return false;
}

/* Whether an op type is one some schema knows, in the ONNX domains or a
 * domain the model imports, built in or from the session's providers. */
static bool ox_known_op(const OxPartition* p, const char* op_type) {
  const OxGraph* g = p->graph;
  for (size_t d = 0; d <= g->n_opsets; d++) {
    const char* domain = d < g->n_opsets ? g->opsets[d].domain : "";
    for (size_t e = 0; e <= p->n_eps; e++) {
      const OxSchemaRegistry* r = e < p->n_eps ? p->eps[e].lib->schemas : NULL;
      if (ox_schema_lookup(r, domain ? domain : "", op_type, INT64_MAX, NULL)) return true;
    }
  }
  return false;
}

OnyxStatus* ox_partition_check_pins(const OxPartition* p, void (*warn)(void* ctx, const char* msg),
                                    void* ctx) {
  for (size_t i = 0; i < p->n_pins; i++) {
    const OxPin* pin = &p->pins[i];
    if (ox_graph_has_node(p->graph, pin->node_name, pin->op_type)) continue;
    if (pin->node_name)
      return ox_status(ONYX_INVALID_CONFIG,
                       "pin %zu: the model has no node named '%s' (pinned to provider '%s')", i,
                       pin->node_name, pin->provider);
    if (!ox_known_op(p, pin->op_type))
      return ox_status(ONYX_INVALID_CONFIG,
                       "pin %zu: the model has no node of op type '%s' (pinned to provider '%s'), "
                       "and no schema knows that op type",
                       i, pin->op_type, pin->provider);
    /* A known op type the model lacks: one config may serve many models. */
    char msg[1024];
    snprintf(msg, sizeof msg,
             "pin %zu: the model has no node of op type '%s'; the pin to provider '%s' has no "
             "effect",
             i, pin->op_type, pin->provider);
    if (warn) warn(ctx, msg);
  }
  return NULL;
}

static OnyxStatus* ox_apply_pins(OxPartition* p) {
  for (size_t i = 0; p->n_pins && i < p->graph->n_nodes; i++) {
    OxNode* n = p->graph->nodes[i];
    const OxPin* pin = ox_pin_for(p, n);
    if (!pin || n->ep == OX_EP_HOST) continue;
    int32_t e = ox_find_ep(p, pin->provider);
    if (e < 0)
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "node '%s' (%s) is pinned to provider '%s', which is not in the session",
                       n->name, n->op_type, pin->provider);
    const char* why = NULL;
    if (!ox_kreg_match(p->eps[e].lib->kernels, n, &why))
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "node '%s' (%s) is pinned to provider '%s', which cannot run it: %s",
                       n->name, n->op_type, pin->provider, why ? why : "no kernel");
    n->ep = e;
  }
  return NULL;
}

static OnyxStatus* ox_unplaced_view(const OxGraph* g, OnyxGraphView* v) {
  *v = (OnyxGraphView){0};
  v->nodes = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof *v->nodes);
  if (!v->nodes) return ox_oom();
  for (size_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->ep == -1) v->nodes[v->n_nodes++] = g->nodes[i];
  /* Graph inputs/outputs are borrowed from the graph: copy the pointers. */
  v->inputs = malloc((g->n_inputs + 1) * sizeof *v->inputs);
  v->outputs = malloc((g->n_outputs + 1) * sizeof *v->outputs);
  if (!v->inputs || !v->outputs) return ox_oom();
  if (g->n_inputs) memcpy(v->inputs, g->inputs, g->n_inputs * sizeof *v->inputs);
  if (g->n_outputs) memcpy(v->outputs, g->outputs, g->n_outputs * sizeof *v->outputs);
  v->n_inputs = g->n_inputs;
  v->n_outputs = g->n_outputs;
  return NULL;
}

static void ox_default_capability(OnyxCapabilityBuilder* b, const OnyxGraphView* v) {
  for (size_t i = 0; i < v->n_nodes; i++) {
    const char* why = NULL;
    if (ox_builder_has_kernel(b, v->nodes[i], &why)) {
      OnyxStatus* st = ox_claim_node(b, v->nodes[i]);
      ox_status_free(st); /* cannot fail: the node is free and the kernel matched */
    } else {
      ox_builder_decline(b, v->nodes[i], why);
    }
  }
}

/* A cheap node stays only if every input is produced on the same provider. */
static OnyxStatus* ox_release_cheap(OxPartition* p, int32_t e) {
  for (size_t i = 0; i < p->graph->n_nodes; i++) {
    OxNode* n = p->graph->nodes[i];
    bool cheap = p->cheap[i];
    /* A mark is this provider's hint only: a node handed back must not carry
     * it to the next provider (the CPU would drop it too). */
    p->cheap[i] = false;
    if (n->ep != e || !cheap || n->group >= 0) continue;
    bool local = true;
    for (size_t k = 0; k < n->n_inputs && local; k++) {
      const OxValue* v = n->inputs[k];
      if (v && !v->constant) local = v->producer && v->producer->ep == e;
    }
    if (local) continue;
    n->ep = -1;
    OX_TRY(ox_add_decline(p, n, e, "cheap node: its inputs are not on this provider"));
  }
  return NULL;
}

static OnyxStatus* ox_ask_provider(OxPartition* p, int32_t e) {
  OnyxGraphView view;
  OnyxStatus* st = ox_unplaced_view(p->graph, &view);
  if (st || !view.n_nodes) {
    ox_view_clear(&view);
    return st;
  }
  OnyxCapabilityBuilder b = {.part = p, .ep = e, .kernels = p->eps[e].lib->kernels};
  OnyxEp* ep = p->eps[e].ep;
  if (ep->get_capability) {
    /* A claim the host refused fails the session even if the provider
     * ignored the error it got back. */
    st = ep->get_capability(ep, &view, &b);
    if (st) st = ox_status_wrap(st, "provider '%s': get_capability failed", p->eps[e].name);
    OnyxStatus* refused = ox_builder_take_error(&b);
    if (!st)
      st = refused;
    else
      ox_status_free(refused);
  } else {
    ox_default_capability(&b, &view);
  }
  ox_view_clear(&view);
  if (!st) st = ox_release_cheap(p, e);
  return st;
}

static OnyxStatus* ox_unplaced_error(const OxPartition* p, const OxNode* n) {
  OxStr why = {0};
  for (size_t i = 0; i < p->n_declines; i++) {
    const OxDecline* d = &p->declines[i];
    if (d->node == n->index)
      ox_str_addf(&why, "%s%s: %s", why.len ? "; " : "", ox_ep_name(p, d->ep), d->reason);
  }
  char* text = ox_str_take(&why);
  OnyxStatus* st =
      ox_status(ONYX_NOT_IMPLEMENTED, "no provider can run node '%s' (%s%s%s v%d)%s%s", n->name,
                *n->domain ? n->domain : "", *n->domain ? "." : "", n->op_type,
                (int)n->since_version, text && *text ? ": " : "", text ? text : "");
  free(text);
  return st;
}

/* Nodes no provider took whose op ONNX defines as a function with a stored
 * body are replaced by the body's nodes; true if any was. */
static OnyxStatus* ox_expand_unplaced(OxPartition* p, bool* expanded) {
  OxGraph* g = p->graph;
  *expanded = false;
  OxNode** todo = calloc(g->n_nodes + 1, sizeof *todo);
  if (!todo) return ox_oom();
  size_t n_todo = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    size_t len = 0;
    OxNode* n = g->nodes[i];
    if (n->ep == -1 && ox_schema_function_body(n->domain, n->op_type, n->since_version, &len))
      todo[n_todo++] = n;
  }
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < n_todo && !st; i++) {
    size_t len = 0;
    const uint8_t* body =
        ox_schema_function_body(todo[i]->domain, todo[i]->op_type, todo[i]->since_version, &len);
    st = ox_graph_expand_function(g, todo[i], body, len);
  }
  free(todo);
  *expanded = n_todo > 0;
  if (st || !n_todo) return st;
  /* Start over on the new graph: resolve it, then place every node again. */
  ox_partition_clear(p);
  for (size_t i = 0; i < g->n_nodes; i++) {
    g->nodes[i]->ep = -1;
    g->nodes[i]->group = -1;
  }
  const OxSchemaRegistry** customs = calloc(p->n_eps + 1, sizeof *customs);
  if (!customs) return ox_oom();
  for (size_t i = 0; i < p->n_eps; i++)
    customs[i] = p->eps[i].lib->schemas;
  st = ox_graph_resolve(g, customs, p->n_eps);
  free(customs);
  return st;
}

static OnyxStatus* ox_partition_pass(OxPartition* p, int round);

OnyxStatus* ox_partition_run(OxPartition* p) {
  return ox_partition_pass(p, 0);
}

static OnyxStatus* ox_partition_pass(OxPartition* p, int round) {
  OxGraph* g = p->graph;
  p->cheap = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p->cheap);
  if (!p->cheap) return ox_oom();
  /* Control flow and container ops run on the host: no provider sees them. */
  for (size_t i = 0; i < g->n_nodes; i++)
    if (ox_host_op(g->nodes[i])) g->nodes[i]->ep = OX_EP_HOST;
  OX_TRY(ox_apply_pins(p));
  for (size_t e = 0; e < p->n_eps; e++)
    OX_TRY(ox_ask_provider(p, (int32_t)e));
  if (round < 8) { /* function bodies may hold function ops themselves */
    bool expanded = false;
    OX_TRY(ox_expand_unplaced(p, &expanded));
    if (expanded) return ox_partition_pass(p, round + 1);
  }
  for (size_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->ep == -1) return ox_unplaced_error(p, g->nodes[i]);
  for (size_t i = 0; p->fallback_deny && i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    if (n->ep == OX_EP_HOST) continue;
    const OxEpSlot* slot = &p->eps[n->ep];
    if (slot->implicit && p->n_eps > 1 && !ox_pin_for(p, n))
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "fallback is \"deny\" but node '%s' (%s) was left to the CPU provider "
                       "(no earlier provider took it)",
                       n->name, n->op_type);
  }
  ox_partition_count(p);
  return NULL;
}

void ox_partition_count(OxPartition* p) {
  for (size_t e = 0; e < p->n_eps; e++)
    p->eps[e].n_nodes = 0;
  for (size_t i = 0; i < p->graph->n_nodes; i++)
    if (p->graph->nodes[i]->ep >= 0) p->eps[p->graph->nodes[i]->ep].n_nodes++;
}

OnyxStatus* ox_partition_kernels(OxPartition* p) {
  const OxGraph* g = p->graph;
  free(p->kernels);
  p->n_kernels = 0;
  p->kernels = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p->kernels);
  if (!p->kernels) return ox_oom();
  p->n_kernels = g->n_nodes;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    if (n->ep < 0 || n->group >= 0) continue; /* a host op, unplaced, or in a group */
    if ((size_t)n->ep >= p->n_eps)
      return ox_status(ONYX_FAIL, "internal: node '%s' (%s) is placed on provider %d of %zu",
                       n->name, n->op_type, (int)n->ep, p->n_eps);
    const char* why = NULL;
    p->kernels[i] = ox_kreg_match(p->eps[n->ep].lib->kernels, n, &why);
    if (!p->kernels[i])
      return ox_status(ONYX_FAIL, "internal: node '%s' lost its kernel on '%s': %s", n->name,
                       p->eps[n->ep].name, why ? why : "");
  }
  return NULL;
}

void ox_partition_clear(OxPartition* p) {
  for (size_t i = 0; i < p->n_declines; i++) {
    free(p->declines[i].reason);
    free(p->declines[i].node_name);
  }
  for (size_t i = 0; i < p->n_groups; i++) {
    OxGroup* grp = &p->groups[i];
    ox_view_clear(&grp->view);
    free(grp->name);
  }
  free(p->declines);
  free(p->groups);
  free(p->cheap);
  free(p->kernels);
  p->declines = NULL;
  p->groups = NULL;
  p->cheap = NULL;
  p->kernels = NULL;
  p->n_kernels = 0;
  p->n_declines = p->n_groups = p->cap_declines = p->cap_groups = 0;
}
