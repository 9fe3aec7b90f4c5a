/* introspect.c — the placement introspection API of onyx.h: each node of the
 * session's final graph with the provider it runs on. */
#include <stdio.h>
#include <string.h>

#include "ox_session.h"

ONYX_API size_t onyx_session_node_count(const OnyxSession* s) {
  return s && s->prog.graph ? s->prog.graph->n_nodes : 0;
}

ONYX_API OnyxStatus* onyx_session_node_info(const OnyxSession* s, size_t i, OnyxNodeInfo* out) {
  if (!s || !out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_node_info: NULL argument");
  if (out->struct_size < sizeof *out)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_node_info: struct_size %zu is smaller than %zu (set it to "
                     "sizeof(OnyxNodeInfo))",
                     out->struct_size, sizeof *out);
  if (!s->prog.graph || i >= s->prog.graph->n_nodes)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_node_info: no node %zu (the session has %zu)", i,
                     onyx_session_node_count(s));
  static _Thread_local char types[512];
  const OxNode* n = s->prog.graph->nodes[i];
  size_t len = 0;
  types[0] = '\0';
  for (size_t k = 0; k < n->n_inputs && len < sizeof types; k++) {
    const char* t = n->inputs[k] ? ox_elem_name(n->inputs[k]->type) : "";
    int w = snprintf(types + len, sizeof types - len, "%s%s", k ? "," : "", t);
    if (w < 0) break;
    len += (size_t)w;
  }
  out->name = n->name;
  out->op_type = n->op_type;
  out->domain = n->domain ? n->domain : "";
  out->since_version = n->since_version;
  out->provider = n->ep >= 0 && (size_t)n->ep < s->prog.n_eps ? s->prog.eps[n->ep].name : NULL;
  out->group = n->group >= 0 && (size_t)n->group < s->prog.part.n_groups
                   ? s->prog.part.groups[n->group].name
                   : NULL;
  out->input_types = types;
  return NULL;
}
