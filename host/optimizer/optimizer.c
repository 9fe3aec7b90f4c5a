/* optimizer.c — the transformer manager: levels, the fixed-point loop with
 * an iteration cap, re-resolving after each change, and the transformers
 * applications register through onyx.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "opt_internal.h"

/* opt_fuse_elementwise.c: element-wise chains into com.onyx FusedElementwise */
OnyxStatus* ox_pass_fuse_elementwise(OxOpt* o, bool* changed);

typedef struct OxBuiltin {
  const char* name;
  OnyxOptimizationLevel level;
  OxPassFn fn;
} OxBuiltin;

static const OxBuiltin ox_builtins[] = {
    {"eliminate", ONYX_OPT_BASIC, ox_pass_eliminate},
    {"shapes", ONYX_OPT_BASIC, ox_pass_shapes},
    {"fold", ONYX_OPT_BASIC, ox_pass_fold},
    {"cse", ONYX_OPT_BASIC, ox_pass_cse},
    {"qdq", ONYX_OPT_EXTENDED, ox_pass_qdq}, /* first: conv_act would take a QDQ Conv's Relu */
    {"qdq_layout", ONYX_OPT_EXTENDED, ox_pass_qdq_layout}, /* channels-last quantized chains */
    {"qdq_fold", ONYX_OPT_EXTENDED, ox_pass_qdq_fold},     /* the DequantizeLinear qdq left */
    /* a Pad into its Conv / pooling reader's pads, before conv_act reads the Conv */
    {"pad_fold", ONYX_OPT_EXTENDED, ox_pass_pad_fold},
    {"conv_bn", ONYX_OPT_EXTENDED, ox_pass_conv_bn},
    {"matmul_add", ONYX_OPT_EXTENDED, ox_pass_matmul_add},
    {"layernorm", ONYX_OPT_EXTENDED, ox_pass_layernorm},
    {"gelu", ONYX_OPT_EXTENDED, ox_pass_gelu},
    {"silu", ONYX_OPT_EXTENDED, ox_pass_silu},
    {"attention", ONYX_OPT_EXTENDED, ox_pass_attention},
    {"qkv", ONYX_OPT_EXTENDED, ox_pass_qkv},
    /* FusedMatMul + Add(Z): the residual starts the product's C. */
    {"matmul_residual", ONYX_OPT_EXTENDED, ox_pass_matmul_residual},
    /* com.onyx FusedConv is the CPU provider's Conv with the activation in
     * its GEMM epilogue. */
    {"conv_act", ONYX_OPT_EXTENDED, ox_pass_conv_act},
    /* last of its level: the chains no fusion above took, on a provider that
     * registers com.onyx FusedElementwise */
    {"fuse_elementwise", ONYX_OPT_EXTENDED, ox_pass_fuse_elementwise},
    /* after every fusion: the CPU provider's conv chains (FusedConv
     * included) in the blocked channel layout */
    {"layout_nchwc", ONYX_OPT_LAYOUT, ox_pass_layout_nchwc},
};

/* ONYX_OPT_DISABLE=name,name,... turns built-in transformers off (for
 * bisecting a wrong result or a slowdown). */
static bool ox_builtin_enabled(const OxBuiltin* b) {
  const char* off = getenv("ONYX_OPT_DISABLE");
  size_t len = strlen(b->name);
  for (const char* p = off; p && *p;) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && !strncmp(p, b->name, n)) return false;
    p = end ? end + 1 : p + n;
  }
  return true;
}

const char* ox_opt_level_name(OnyxOptimizationLevel level) {
  switch (level) {
  case ONYX_OPT_DISABLED:
    return "disabled";
  case ONYX_OPT_BASIC:
    return "basic";
  case ONYX_OPT_EXTENDED:
    return "extended";
  case ONYX_OPT_LAYOUT:
    return "layout";
  case ONYX_OPT_ALL:
    return "all";
  }
  return "?";
}

/* --- user transformers ------------------------------------------------------------------- */

typedef struct OxUserPass {
  char* name;
  OnyxOptimizationLevel level;
  OnyxTransformerFn fn;
  void* user;
} OxUserPass;

static pthread_mutex_t ox_user_mu = PTHREAD_MUTEX_INITIALIZER;
static OxUserPass* ox_user_passes;
static size_t ox_n_user, ox_cap_user;

struct OnyxGraph {
  OxOpt* opt;
};

ONYX_API OnyxStatus* onyx_register_transformer(const char* name, OnyxOptimizationLevel level,
                                               OnyxTransformerFn fn, void* user) {
  if (!name || !*name || !fn)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_register_transformer: NULL name or function");
  if (level != ONYX_OPT_BASIC && level != ONYX_OPT_EXTENDED && level != ONYX_OPT_LAYOUT)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_register_transformer: transformer '%s': level %d is not basic (1), "
                     "extended (2) or layout (3)",
                     name, (int)level);
  pthread_mutex_lock(&ox_user_mu);
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < ox_n_user && !st; i++)
    if (!strcmp(ox_user_passes[i].name, name))
      st = ox_status(ONYX_INVALID_ARGUMENT, "transformer '%s' is already registered", name);
  char* copy = st ? NULL : ox_strdup(name);
  if (!st && (!copy || !ox_grow((void**)&ox_user_passes, &ox_cap_user, ox_n_user + 1,
                                sizeof *ox_user_passes))) {
    free(copy);
    st = ox_oom();
  }
  if (!st) ox_user_passes[ox_n_user++] = (OxUserPass){copy, level, fn, user};
  pthread_mutex_unlock(&ox_user_mu);
  return st;
}

ONYX_API OnyxStatus* onyx_unregister_transformer(const char* name) {
  if (!name) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_unregister_transformer: NULL name");
  pthread_mutex_lock(&ox_user_mu);
  bool found = false;
  for (size_t i = 0; i < ox_n_user && !found; i++) {
    if (strcmp(ox_user_passes[i].name, name)) continue;
    free(ox_user_passes[i].name);
    memmove(&ox_user_passes[i], &ox_user_passes[i + 1],
            (ox_n_user - i - 1) * sizeof *ox_user_passes);
    ox_n_user--;
    found = true;
  }
  if (!ox_n_user) {
    free(ox_user_passes);
    ox_user_passes = NULL;
    ox_cap_user = 0;
  }
  pthread_mutex_unlock(&ox_user_mu);
  return found ? NULL
               : ox_status(ONYX_INVALID_ARGUMENT, "transformer '%s' is not registered", name);
}

/* A snapshot of the user transformers of one level (callbacks run unlocked). */
static OxUserPass* ox_user_snapshot(OnyxOptimizationLevel level, size_t* n) {
  pthread_mutex_lock(&ox_user_mu);
  OxUserPass* out = calloc(ox_n_user + 1, sizeof *out);
  *n = 0;
  for (size_t i = 0; out && i < ox_n_user; i++)
    if (ox_user_passes[i].level == level) out[(*n)++] = ox_user_passes[i];
  for (size_t i = 0; out && i < *n; i++)
    if (!(out[i].name = ox_strdup(out[i].name))) {
      for (size_t k = 0; k < i; k++)
        free(out[k].name);
      free(out);
      out = NULL;
    }
  pthread_mutex_unlock(&ox_user_mu);
  return out;
}

/* --- the manager ---------------------------------------------------------------------------- */

static void ox_collect_pinned(OxOpt* o, const OxGraph* g, bool* oom) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    for (size_t k = 0; k < n->n_attrs; k++) {
      const OxAttr* a = &n->attrs[k];
      OxGraph* const* subs = a->type == ONYX_ATTR_GRAPH ? &a->g : a->graphs;
      size_t count = a->type == ONYX_ATTR_GRAPH ? 1 : a->type == ONYX_ATTR_GRAPHS ? a->count : 0;
      for (size_t s = 0; s < count; s++) {
        const OxGraph* sg = subs[s];
        if (!sg) continue;
        for (size_t v = 0; v < sg->n_values; v++)
          if (sg->values[v]->is_outer_scope &&
              !ox_map_put(&o->pinned, sg->values[v]->name, (void*)sg))
            *oom = true;
        ox_collect_pinned(o, sg, oom);
      }
    }
  }
}

static OnyxStatus* ox_reresolve(OxOpt* o, const char* who) {
  OnyxStatus* st = ox_opt_sweep(o);
  if (!st) st = ox_graph_resolve(o->g, o->cfg->customs, o->cfg->n_customs);
  if (st) st = ox_status_wrap(st, "optimizer: after transformer '%s'", who);
  return st;
}

/* The phase runs built-in transformers of this level: before placement only
 * the basic ones (they keep the model's ops), after it only the fusions. */
static bool ox_phase_runs(const OxOpt* o, OnyxOptimizationLevel level) {
  switch (o->cfg->phase) {
  case OX_OPT_PHASE_PLACEMENT:
    return level == ONYX_OPT_BASIC;
  case OX_OPT_PHASE_FUSION:
    return level != ONYX_OPT_BASIC;
  default:
    return true;
  }
}

static OnyxStatus* ox_run_level(OxOpt* o, OnyxOptimizationLevel level, int cap, bool* any_change) {
  size_t n_user = 0;
  OxUserPass* users = ox_user_snapshot(level, &n_user);
  if (!users) return ox_oom();
  /* User transformers rewrite the model before placement: they cannot know
   * which provider a node they add would go to. */
  const size_t n_run = o->cfg->phase == OX_OPT_PHASE_FUSION ? 0 : n_user;
  const bool builtins = ox_phase_runs(o, level);
  OnyxStatus* st = NULL;
  bool any = true;
  for (int it = 0; it < cap && any && !st && (builtins || n_run); it++) {
    any = false;
    o->stats->iterations++;
    for (size_t i = 0; builtins && i < OX_ARRAY_LEN(ox_builtins) && !st; i++) {
      if (ox_builtins[i].level != level || !ox_builtin_enabled(&ox_builtins[i])) continue;
      bool changed = false;
      o->pass = ox_builtins[i].name;
      st = ox_builtins[i].fn(o, &changed);
      if (st) st = ox_status_wrap(st, "optimizer: transformer '%s'", ox_builtins[i].name);
      if (!st && changed) st = ox_reresolve(o, ox_builtins[i].name);
      any = any || changed;
    }
    for (size_t i = 0; i < n_run && !st; i++) {
      OnyxGraph view = {o};
      int modified = 0;
      o->pass = users[i].name;
      ox_opt_journal_reset(o);
      st = users[i].fn(&view, users[i].user, &modified);
      if (st) st = ox_status_wrap(st, "optimizer: user transformer '%s'", users[i].name);
      if (!st && modified) {
        st = ox_reresolve(o, users[i].name);
        o->stats->user++;
        any = true;
      }
    }
    *any_change = *any_change || any;
  }
  o->pass = NULL;
  for (size_t i = 0; i < n_user; i++)
    free(users[i].name);
  free(users);
  return st;
}

static double ox_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

OnyxStatus* ox_optimize(OxGraph* g, const OxOptConfig* cfg, OxOptStats* stats) {
  OxOptStats local = {0};
  if (!stats) stats = &local;
  *stats = (OxOptStats){.nodes_before = g->n_nodes};
  double t0 = ox_now();
  OxOpt o = {.g = g, .cfg = cfg, .stats = stats};
  bool oom = false;
  ox_collect_pinned(&o, g, &oom);
  OnyxStatus* st = oom ? ox_oom() : NULL;
  int cap = cfg->max_iterations > 0 ? cfg->max_iterations : 10;
  static const OnyxOptimizationLevel levels[] = {ONYX_OPT_BASIC, ONYX_OPT_EXTENDED,
                                                 ONYX_OPT_LAYOUT};
  bool later = false; /* a level after basic changed the graph */
  for (size_t i = 0; i < OX_ARRAY_LEN(levels) && !st; i++) {
    bool changed = false;
    if (cfg->level >= levels[i]) st = ox_run_level(&o, levels[i], cap, &changed);
    later = later || (i > 0 && changed);
  }
  /* Fusions and user transformers can leave foldable or duplicate work
   * behind: one more basic round when a later level changed something
   * (the fusion phase runs no basic transformer: it would rewrite across
   * providers). */
  bool unused = false;
  if (!st && later) st = ox_run_level(&o, ONYX_OPT_BASIC, cap, &unused);
  if (!st) st = ox_opt_sweep(&o);
  ox_map_free(&o.pinned);
  ox_opt_journal_reset(&o);
  free(o.added);
  stats->nodes_after = g->n_nodes;
  stats->seconds = ox_now() - t0;
  return st;
}

OnyxStatus* ox_optimize_tidy(OxGraph* g, const OxOptConfig* cfg) {
  OxOpt o = {.g = g, .cfg = cfg};
  bool oom = false;
  ox_collect_pinned(&o, g, &oom);
  OnyxStatus* st = oom ? ox_oom() : ox_opt_sweep(&o);
  if (!st) st = ox_graph_resolve(g, cfg->customs, cfg->n_customs);
  ox_map_free(&o.pinned);
  return st;
}

char* ox_opt_stats_str(const OxOptStats* s) {
  OxStr t = {0};
  ox_str_addf(&t, "%zu -> %zu nodes in %.1f ms (%zu rounds)", s->nodes_before, s->nodes_after,
              s->seconds * 1e3, s->iterations);
  const struct {
    const char* what;
    size_t n;
  } parts[] = {{"folded", s->folded},
               {"eliminated", s->eliminated},
               {"cse", s->cse},
               {"shape ops", s->shapes},
               {"Gemm", s->gemm},
               {"FusedMatMul", s->fused_matmul},
               {"Conv+BN", s->conv_bn},
               {"Pad folded", s->pad_fold},
               {"FusedConv", s->conv_act},
               {"FusedConv+residual", s->conv_add},
               {"FusedMatMul+activation", s->matmul_act},
               {"FusedMatMul+residual", s->matmul_add_z},
               {"LayerNorm", s->layernorm},
               {"Gelu", s->gelu},
               {"Silu/HardSwish", s->silu},
               {"MultiHeadAttention", s->attention},
               {"packed QKV", s->qkv},
               {"NchwcConv", s->nchwc},
               {"reorders", s->nchwc_reorders},
               {"user", s->user}};
  const char* sep = ": ";
  for (size_t i = 0; i < OX_ARRAY_LEN(parts); i++) {
    if (!parts[i].n) continue;
    ox_str_addf(&t, "%s%zu %s", sep, parts[i].n, parts[i].what);
    sep = ", ";
  }
  return ox_str_take(&t);
}

/* --- the graph API for user transformers ---------------------------------------------------- */

static OxNode* ox_api_node(const OnyxGraph* g, size_t i) {
  return g && g->opt && i < g->opt->g->n_nodes ? g->opt->g->nodes[i] : NULL;
}

ONYX_API size_t onyx_graph_node_count(const OnyxGraph* g) {
  return g && g->opt ? g->opt->g->n_nodes : 0;
}
ONYX_API const char* onyx_graph_node_name(const OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  return n ? n->name : NULL;
}
ONYX_API const char* onyx_graph_node_op_type(const OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  return n ? n->op_type : NULL;
}
ONYX_API const char* onyx_graph_node_domain(const OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  return n ? n->domain : NULL;
}
ONYX_API size_t onyx_graph_node_input_count(const OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  return n ? n->n_inputs : 0;
}
ONYX_API size_t onyx_graph_node_output_count(const OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  return n ? n->n_outputs : 0;
}
ONYX_API const char* onyx_graph_node_input(const OnyxGraph* g, size_t i, size_t k) {
  OxNode* n = ox_api_node(g, i);
  if (!n || k >= n->n_inputs) return NULL;
  return n->inputs[k] ? n->inputs[k]->name : "";
}
ONYX_API const char* onyx_graph_node_output(const OnyxGraph* g, size_t i, size_t k) {
  OxNode* n = ox_api_node(g, i);
  if (!n || k >= n->n_outputs) return NULL;
  return n->outputs[k] ? n->outputs[k]->name : "";
}

ONYX_API OnyxStatus* onyx_graph_node_attr_int(const OnyxGraph* g, size_t i, const char* name,
                                              int64_t* out) {
  OxNode* n = ox_api_node(g, i);
  const OxAttr* a = n && name ? ox_node_attr(n, name) : NULL;
  if (!out || !a || a->type != ONYX_ATTR_INT)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_node_attr_int: node %zu has no int '%s'", i,
                     name ? name : "(null)");
  *out = a->i;
  return NULL;
}

ONYX_API OnyxStatus* onyx_graph_node_attr_float(const OnyxGraph* g, size_t i, const char* name,
                                                float* out) {
  OxNode* n = ox_api_node(g, i);
  const OxAttr* a = n && name ? ox_node_attr(n, name) : NULL;
  if (!out || !a || a->type != ONYX_ATTR_FLOAT)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_graph_node_attr_float: node %zu has no float '%s'", i,
                     name ? name : "(null)");
  *out = a->f;
  return NULL;
}

ONYX_API int onyx_graph_value_is_output(const OnyxGraph* g, const char* value) {
  if (!g || !g->opt || !value) return 0;
  const OxValue* v = ox_graph_find(g->opt->g, value);
  return v && ox_opt_pinned(g->opt, v);
}

ONYX_API OnyxStatus* onyx_graph_remove_node(OnyxGraph* g, size_t i) {
  OxNode* n = ox_api_node(g, i);
  if (!n) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_remove_node: no node %zu", i);
  ox_opt_remove(g->opt, n);
  return NULL;
}

ONYX_API OnyxStatus* onyx_graph_replace_uses(OnyxGraph* g, const char* from, const char* to) {
  if (!g || !g->opt || !from || !to)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_replace_uses: NULL argument");
  OxValue* a = ox_graph_find(g->opt->g, from);
  OxValue* b = ox_graph_find(g->opt->g, to);
  if (!a || !b)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_replace_uses: no value '%s'",
                     a ? to : from);
  if (ox_opt_pinned(g->opt, a))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_graph_replace_uses: '%s' is a graph input/output or read by a "
                     "subgraph; it keeps its uses",
                     from);
  return ox_opt_replace_uses(a, b);
}

ONYX_API OnyxStatus* onyx_graph_add_node(OnyxGraph* g, const char* name, const char* op_type,
                                         const char* domain, const char* const* inputs,
                                         size_t input_count, const char* const* outputs,
                                         size_t output_count, size_t* index) {
  if (!g || !g->opt || !op_type || (input_count && !inputs) || (output_count && !outputs))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_add_node: NULL argument");
  OxGraph* gr = g->opt->g;
  for (size_t i = 0; i < input_count; i++)
    if (inputs[i] && *inputs[i] && !ox_graph_find(gr, inputs[i]))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "onyx_graph_add_node: node '%s' (%s) reads '%s', which the graph lacks",
                       name ? name : "", op_type, inputs[i]);
  OxNode* n = NULL;
  OX_TRY(ox_graph_add_node(gr, name, op_type, domain ? domain : "", inputs, input_count, outputs,
                           output_count, &n));
  if (index) *index = n->index;
  return NULL;
}

static OnyxStatus* ox_api_attr_node(OnyxGraph* g, size_t i, const char* name, OxNode** n) {
  *n = ox_api_node(g, i);
  if (!*n || !name) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_set_attr: no node %zu", i);
  if (ox_node_attr(*n, name))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_set_attr: node '%s' already has '%s'",
                     (*n)->name, name);
  return NULL;
}

ONYX_API OnyxStatus* onyx_graph_set_attr_int(OnyxGraph* g, size_t i, const char* name, int64_t v) {
  OxNode* n;
  OX_TRY(ox_api_attr_node(g, i, name, &n));
  return ox_opt_attr_int(n, name, v);
}
ONYX_API OnyxStatus* onyx_graph_set_attr_float(OnyxGraph* g, size_t i, const char* name, float v) {
  OxNode* n;
  OX_TRY(ox_api_attr_node(g, i, name, &n));
  return ox_opt_attr_float(n, name, v);
}
ONYX_API OnyxStatus* onyx_graph_set_attr_string(OnyxGraph* g, size_t i, const char* name,
                                                const char* v) {
  OxNode* n;
  if (!v) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_graph_set_attr_string: NULL value");
  OX_TRY(ox_api_attr_node(g, i, name, &n));
  return ox_opt_attr_string(n, name, v);
}
