/* fake_capability.c — which nodes the fake device takes.
 *
 * Nodes whose op is in "fuse" form groups: connected components of the
 * producer→consumer edges between such nodes, each claimed as one group when
 * it is convex (otherwise its nodes are handled one by one). Nodes whose op
 * is in "ops" are claimed singly when the registry has a kernel for them.
 * Everything else is declined with "decline_reason". With "bad_group" the
 * provider deliberately claims a non-convex group, to test the host's check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake.h"

typedef struct Cap {
  FakeEp* f;
  OnyxCapabilityBuilder* b;
  size_t n;
  const OnyxNode** nodes; /* the view's nodes, topological */
  size_t* parent;         /* union-find over fusable nodes */
  bool* fusable;
  bool* grouped;
} Cap;

static size_t view_index(const Cap* c, const OnyxNode* node) {
  for (size_t i = 0; i < c->n; i++)
    if (c->nodes[i] == node) return i;
  return SIZE_MAX;
}

static size_t uf_find(size_t* parent, size_t i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]]; /* path halving keeps the trees flat */
    i = parent[i];
  }
  return i;
}

static bool all_float32(const OnyxNode* node) {
  const OnyxHostApi* H = fake_host;
  for (size_t i = 0; i < H->node_input_count(node); i++) {
    const OnyxValueInfo* v = H->node_input(node, i);
    if (v && H->value_elem_type(v) != ONYX_ELEM_FLOAT32) return false;
  }
  for (size_t i = 0; i < H->node_output_count(node); i++) {
    const OnyxValueInfo* v = H->node_output(node, i);
    if (v && H->value_elem_type(v) != ONYX_ELEM_FLOAT32) return false;
  }
  return true;
}

static bool is_fusable(const Cap* c, const OnyxNode* node) {
  const OnyxHostApi* H = fake_host;
  const char* op = H->node_op_type(node);
  const FakeOp* def = fake_op_find(op);
  return H->node_domain(node)[0] == '\0' && fake_opset_has(&c->f->fuse, op) && def &&
         H->node_since_version(node) >= def->since && all_float32(node);
}

/* Joins each fusable node with its fusable producers. */
static void build_components(Cap* c) {
  const OnyxHostApi* H = fake_host;
  for (size_t i = 0; i < c->n; i++) {
    c->parent[i] = i;
    c->fusable[i] = is_fusable(c, c->nodes[i]);
  }
  for (size_t i = 0; i < c->n; i++) {
    if (!c->fusable[i]) continue;
    for (size_t k = 0; k < H->node_input_count(c->nodes[i]); k++) {
      const OnyxValueInfo* v = H->node_input(c->nodes[i], k);
      size_t j = v ? view_index(c, H->value_producer(v)) : SIZE_MAX;
      if (j != SIZE_MAX && c->fusable[j]) c->parent[uf_find(c->parent, i)] = uf_find(c->parent, j);
    }
  }
}

static bool in_component(Cap* c, const OnyxNode* node, size_t root) {
  size_t i = view_index(c, node);
  return i != SIZE_MAX && c->fusable[i] && uf_find(c->parent, i) == root;
}

/* A growable stack/set of nodes for the convexity walk. */
typedef struct NodeVec {
  const OnyxNode** v;
  size_t n, cap;
  bool oom;
} NodeVec;

static void vec_push(NodeVec* s, const OnyxNode* x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 32;
    const OnyxNode** v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      s->oom = true;
      return;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = x;
}

static bool vec_has(const NodeVec* s, const OnyxNode* x) {
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i] == x) return true;
  return false;
}

/* Walks backwards from the nodes on `stack`; true if it reaches a member. */
static bool reaches_component(Cap* c, NodeVec* stack, NodeVec* seen, size_t root) {
  const OnyxHostApi* H = fake_host;
  while (stack->n && !stack->oom && !seen->oom) {
    const OnyxNode* x = stack->v[--stack->n];
    if (vec_has(seen, x)) continue;
    if (in_component(c, x, root)) return true;
    vec_push(seen, x);
    for (size_t k = 0; k < H->node_input_count(x); k++) {
      const OnyxValueInfo* v = H->node_input(x, k);
      const OnyxNode* p = v ? H->value_producer(v) : NULL;
      if (p) vec_push(stack, p);
    }
  }
  return false;
}

/* Convex: no path leaves the component and comes back, i.e. a backward walk
 * from the members' outside producers never reaches a member. The walk
 * crosses nodes other providers took, since those paths count too. */
static bool component_is_convex(Cap* c, size_t root) {
  const OnyxHostApi* H = fake_host;
  NodeVec stack = {0}, seen = {0};
  for (size_t i = 0; i < c->n; i++) {
    if (!c->fusable[i] || uf_find(c->parent, i) != root) continue;
    for (size_t k = 0; k < H->node_input_count(c->nodes[i]); k++) {
      const OnyxValueInfo* v = H->node_input(c->nodes[i], k);
      const OnyxNode* p = v ? H->value_producer(v) : NULL;
      if (p && !in_component(c, p, root)) vec_push(&stack, p);
    }
  }
  bool convex = !reaches_component(c, &stack, &seen, root);
  /* Out of memory: don't fuse; the nodes still run one by one. */
  convex = convex && !stack.oom && !seen.oom;
  free(stack.v);
  free(seen.v);
  return convex;
}

static OnyxStatus* claim_component(Cap* c, size_t root, size_t ordinal) {
  const OnyxNode** members = malloc(c->n * sizeof *members);
  if (!members) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
  size_t m = 0;
  for (size_t i = 0; i < c->n; i++)
    if (c->fusable[i] && uf_find(c->parent, i) == root) members[m++] = c->nodes[i];
  char name[64];
  snprintf(name, sizeof name, "fake_group_%zu", ordinal);
  OnyxStatus* st = fake_host->claim_group(c->b, members, m, name);
  free(members);
  return st;
}

/* Claims every convex component; marks their members grouped. */
static OnyxStatus* claim_groups(Cap* c) {
  size_t ordinal = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (!c->fusable[i] || uf_find(c->parent, i) != i) continue; /* one visit per root */
    if (!component_is_convex(c, i)) continue;
    OnyxStatus* st = claim_component(c, i, ordinal++);
    if (st) return st;
    for (size_t j = 0; j < c->n; j++)
      if (c->fusable[j] && uf_find(c->parent, j) == i) c->grouped[j] = true;
  }
  return NULL;
}

static OnyxStatus* decline(Cap* c, const OnyxNode* node, const char* detail) {
  char text[512];
  if (detail)
    snprintf(text, sizeof text, "%s (%s)", c->f->decline_reason, detail);
  else
    snprintf(text, sizeof text, "%s", c->f->decline_reason);
  const char* kept = fake_keep_reason(c->f, text);
  if (!kept) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
  fake_host->decline_node(c->b, node, kept);
  return NULL;
}

static OnyxStatus* claim_single(Cap* c, size_t i) {
  const OnyxHostApi* H = fake_host;
  const OnyxNode* node = c->nodes[i];
  const char* op = H->node_op_type(node);
  if (!fake_opset_has(&c->f->ops, op))
    return decline(c, node, c->fusable[i] ? "would make a non-convex fused group" : NULL);
  const char* why = NULL;
  if (!H->has_kernel(c->b, node, &why)) return decline(c, node, why ? why : "no kernel");
  OnyxStatus* st = H->claim_node(c->b, node);
  if (!st && c->f->cheap_relu && strcmp(op, "Relu") == 0) H->mark_cheap(c->b, node);
  return st;
}

/* bad_group: claims {A, C} for some A -> B -> C in the view, leaving B out. */
static OnyxStatus* claim_bad_group(Cap* c) {
  const OnyxHostApi* H = fake_host;
  for (size_t ci = 0; ci < c->n; ci++) {
    for (size_t k = 0; k < H->node_input_count(c->nodes[ci]); k++) {
      const OnyxValueInfo* v = H->node_input(c->nodes[ci], k);
      const OnyxNode* bnode = v ? H->value_producer(v) : NULL;
      if (!bnode || view_index(c, bnode) == SIZE_MAX) continue;
      for (size_t kb = 0; kb < H->node_input_count(bnode); kb++) {
        const OnyxValueInfo* vb = H->node_input(bnode, kb);
        const OnyxNode* a = vb ? H->value_producer(vb) : NULL;
        if (!a || view_index(c, a) == SIZE_MAX) continue;
        const OnyxNode* pair[2] = {a, c->nodes[ci]};
        return H->claim_group(c->b, pair, 2, "fake_bad_group");
      }
    }
  }
  return H->status_create(ONYX_INVALID_ARGUMENT,
                          "fake: option bad_group=1 needs a chain A -> B -> C in the graph");
}

static OnyxStatus* run_capability(Cap* c) {
  if (c->f->bad_group) return claim_bad_group(c);
  build_components(c);
  OnyxStatus* st = claim_groups(c);
  for (size_t i = 0; i < c->n && !st; i++)
    if (!c->grouped[i]) st = claim_single(c, i);
  return st;
}

OnyxStatus* fake_get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  const OnyxHostApi* H = fake_host;
  FakeEp* f = fake_ep(ep);
  if (f->fail == FAKE_FAIL_GET_CAPABILITY)
    return H->status_create(ONYX_FAIL, "fake: get_capability failed (option fail=get_capability)");
  Cap c = {.f = f, .b = b, .n = H->graph_node_count(g)};
  size_t n = c.n ? c.n : 1;
  c.nodes = malloc(n * sizeof *c.nodes);
  c.parent = malloc(n * sizeof *c.parent);
  c.fusable = calloc(n, sizeof *c.fusable);
  c.grouped = calloc(n, sizeof *c.grouped);
  OnyxStatus* st = NULL;
  if (!c.nodes || !c.parent || !c.fusable || !c.grouped) {
    st = H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory in get_capability");
  } else {
    for (size_t i = 0; i < c.n; i++)
      c.nodes[i] = H->graph_node(g, i);
    st = run_capability(&c);
  }
  free(c.nodes);
  free(c.parent);
  free(c.fusable);
  free(c.grouped);
  return st;
}
