/* options.c — provider options (OnyxOptions), session options and their
 * onyx_session_options_* setters. The JSON config that fills the same struct
 * lives in host/session/config.c. */
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx_distributed.h"
#include "ox_host_api.h"
#include "ox_model.h" /* OX_DEFAULT_MAX_* */
#include "ox_options.h"
#include "ox_providers.h"
#include "ox_session.h"

/* --- OnyxOptions: ordered key/value strings ----------------------------------- */

/* Index of key, or o->count when absent. */
static size_t ox_options_find(const OnyxOptions* o, const char* key) {
  size_t i = 0;
  while (i < o->count && strcmp(o->keys[i], key) != 0)
    i++;
  return i;
}

OnyxStatus* ox_options_set(OnyxOptions* o, const char* key, const char* value) {
  if (!o || !key || !*key || !value)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "option key must be a non-empty string and value non-NULL");
  char* v = ox_strdup(value);
  if (!v) return ox_oom();
  size_t at = ox_options_find(o, key);
  if (at < o->count) { /* a later setting replaces an earlier one, keeping its place */
    free(o->values[at]);
    o->values[at] = v;
    return NULL;
  }
  char* k = ox_strdup(key);
  size_t kcap = o->cap, vcap = o->cap; /* both arrays grow in step to the same size */
  bool ok = k && ox_grow((void**)&o->keys, &kcap, o->count + 1, sizeof(char*)) &&
            ox_grow((void**)&o->values, &vcap, o->count + 1, sizeof(char*));
  if (!ok) {
    free(k);
    free(v);
    return ox_oom();
  }
  o->cap = vcap;
  o->keys[o->count] = k;
  o->values[o->count] = v;
  o->count++;
  return NULL;
}

const char* ox_options_get(const OnyxOptions* o, const char* key) {
  if (!o || !key) return NULL;
  size_t at = ox_options_find(o, key);
  return at < o->count ? o->values[at] : NULL;
}

void ox_options_clear(OnyxOptions* o) {
  if (!o) return;
  for (size_t i = 0; i < o->count; i++) {
    free(o->keys[i]);
    free(o->values[i]);
  }
  free(o->keys);
  free(o->values);
  *o = (OnyxOptions){0};
}

/* dst becomes a copy of src; on failure dst is left as it was. */
OnyxStatus* ox_options_copy(OnyxOptions* dst, const OnyxOptions* src) {
  OnyxOptions tmp = {0};
  for (size_t i = 0; src && i < src->count; i++) {
    OnyxStatus* st = ox_options_set(&tmp, src->keys[i], src->values[i]);
    if (st) {
      ox_options_clear(&tmp);
      return st;
    }
  }
  ox_options_clear(dst);
  *dst = tmp;
  return NULL;
}

/* --- Session options ------------------------------------------------------------ */

static void ox_provider_spec_clear(OxProviderSpec* p) {
  free(p->name);
  free(p->library);
  ox_options_clear(&p->options);
  *p = (OxProviderSpec){0};
}

static void ox_pin_clear(OxPin* p) {
  free(p->node_name);
  free(p->op_type);
  free(p->provider);
  *p = (OxPin){0};
}

static const OnyxSessionOptions ox_defaults = {
    .threads = 0,
    .log_severity = ONYX_LOG_WARNING,
    .order = ONYX_ORDER_DEFAULT,
    .opt_level = ONYX_OPT_ALL,
    .memory_pattern = true,
    .max_model_bytes = OX_DEFAULT_MAX_MODEL_BYTES,
    .max_tensor_bytes = OX_DEFAULT_MAX_TENSOR_BYTES,
    .max_nodes = OX_DEFAULT_MAX_NODES,
    .max_graph_depth = OX_DEFAULT_MAX_GRAPH_DEPTH,
    .max_fold_ms = OX_DEFAULT_MAX_FOLD_MS,
};

void ox_session_limits_defaults(OnyxSessionOptions* o) {
  if (!o->max_model_bytes) o->max_model_bytes = OX_DEFAULT_MAX_MODEL_BYTES;
  if (!o->max_tensor_bytes) o->max_tensor_bytes = OX_DEFAULT_MAX_TENSOR_BYTES;
  if (!o->max_nodes) o->max_nodes = OX_DEFAULT_MAX_NODES;
  if (o->max_graph_depth <= 0) o->max_graph_depth = OX_DEFAULT_MAX_GRAPH_DEPTH;
  if (!o->max_fold_ms) o->max_fold_ms = OX_DEFAULT_MAX_FOLD_MS;
}

OnyxStatus* onyx_session_options_create(OnyxSessionOptions** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_options_create: out is NULL");
  *out = NULL;
  OnyxSessionOptions* o = malloc(sizeof *o);
  if (!o) return ox_oom();
  *o = ox_defaults;
  *out = o;
  return NULL;
}

void onyx_session_options_release(OnyxSessionOptions* o) {
  if (!o) return;
  for (size_t i = 0; i < o->n_providers; i++)
    ox_provider_spec_clear(&o->providers[i]);
  for (size_t i = 0; i < o->n_pins; i++)
    ox_pin_clear(&o->pins[i]);
  free(o->providers);
  free(o->pins);
  free(o->profile_path);
  free(o->cache_dir);
  for (size_t i = 0; i < o->n_prio; i++)
    free(o->prio_nodes[i]);
  free(o->prio_nodes);
  free(o->prio_values);
  for (size_t i = 0; i < o->n_dims; i++)
    free(o->dim_names[i]);
  free(o->dim_names);
  free(o->dim_values);
  ox_session_rt_free(o->rt);
  free(o);
}

static OnyxStatus* ox_provider_spec_copy(OxProviderSpec* dst, const OxProviderSpec* src) {
  *dst = (OxProviderSpec){.device = src->device, .required = src->required, .init = src->init};
  dst->name = ox_strdup(src->name);
  dst->library = ox_strdup(src->library);
  OnyxStatus* st = ox_options_copy(&dst->options, &src->options);
  if (!st && (!dst->name || (src->library && !dst->library))) st = ox_oom();
  if (st) ox_provider_spec_clear(dst);
  return st;
}

static bool ox_pin_copy(OxPin* dst, const OxPin* src) {
  dst->node_name = ox_strdup(src->node_name);
  dst->op_type = ox_strdup(src->op_type);
  dst->provider = ox_strdup(src->provider);
  if ((src->node_name && !dst->node_name) || (src->op_type && !dst->op_type) || !dst->provider) {
    ox_pin_clear(dst);
    return false;
  }
  return true;
}

OnyxStatus* ox_session_options_clone(const OnyxSessionOptions* src, OnyxSessionOptions** out) {
  if (!src || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_session_options_clone: NULL argument");
  *out = NULL;
  OnyxSessionOptions* o = malloc(sizeof *o);
  if (!o) return ox_oom();
  *o = *src; /* scalars; every owned pointer is replaced below */
  o->providers = NULL;
  o->n_providers = o->cap_providers = 0;
  o->pins = NULL;
  o->n_pins = o->cap_pins = 0;
  o->profile_path = NULL;
  o->cache_dir = NULL;
  o->prio_nodes = NULL;
  o->prio_values = NULL;
  o->n_prio = o->cap_prio = 0;
  o->dim_names = NULL;
  o->dim_values = NULL;
  o->n_dims = o->cap_dims = 0;
  o->rt = NULL;
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < src->n_prio; i++)
    st = onyx_session_options_set_node_priority(o, src->prio_nodes[i], src->prio_values[i]);
  for (size_t i = 0; !st && i < src->n_dims; i++)
    st = onyx_session_options_set_dim_value(o, src->dim_names[i], src->dim_values[i]);
  if (src->profile_path && !(o->profile_path = ox_strdup(src->profile_path))) st = ox_oom();
  if (!st && src->cache_dir && !(o->cache_dir = ox_strdup(src->cache_dir))) st = ox_oom();
  if (!st &&
      !ox_grow((void**)&o->providers, &o->cap_providers, src->n_providers, sizeof(OxProviderSpec)))
    st = ox_oom();
  for (size_t i = 0; !st && i < src->n_providers; i++) {
    st = ox_provider_spec_copy(&o->providers[i], &src->providers[i]);
    if (!st) o->n_providers++;
  }
  if (!st && !ox_grow((void**)&o->pins, &o->cap_pins, src->n_pins, sizeof(OxPin))) st = ox_oom();
  for (size_t i = 0; !st && i < src->n_pins; i++) {
    if (!ox_pin_copy(&o->pins[i], &src->pins[i]))
      st = ox_oom();
    else
      o->n_pins++;
  }
  if (st) {
    onyx_session_options_release(o);
    return st;
  }
  *out = o;
  return NULL;
}

/* --- Argument checks ---------------------------------------------------------------- */

#define OX_CHECK_OPTS(o, fn)                                                                       \
  do {                                                                                             \
    if (!(o)) return ox_status(ONYX_INVALID_ARGUMENT, fn ": options is NULL");                     \
  } while (0)

/* Provider names become part of a file name (libonyx_ep_<name>.so). */
static bool ox_valid_provider_name(const char* s) {
  if (!s || !*s) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
  return true;
}

static OnyxStatus* ox_bad_provider_name(const char* fn, const char* name) {
  return ox_status(ONYX_INVALID_ARGUMENT,
                   "%s: provider name '%s' is invalid: use lowercase letters, digits and '_'", fn,
                   name ? name : "(null)");
}

static OxProviderSpec* ox_find_provider(const OnyxSessionOptions* o, const char* name) {
  for (size_t i = 0; i < o->n_providers; i++)
    if (strcmp(o->providers[i].name, name) == 0) return &o->providers[i];
  return NULL;
}

/* --- Scalar setters ------------------------------------------------------------------ */

OnyxStatus* onyx_session_options_set_threads(OnyxSessionOptions* o, int threads) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_threads");
  if (threads < 0)
    return ox_status(
        ONYX_INVALID_ARGUMENT,
        "onyx_session_options_set_threads: threads must be >= 0 (0: one per core), got %d",
        threads);
  o->threads = threads;
  return NULL;
}

OnyxStatus* onyx_session_options_set_log_severity(OnyxSessionOptions* o, OnyxLogSeverity s) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_log_severity");
  if ((int)s < ONYX_LOG_VERBOSE || (int)s > ONYX_LOG_FATAL)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_log_severity: unknown severity %d (expected %d..%d)",
                     (int)s, ONYX_LOG_VERBOSE, ONYX_LOG_FATAL);
  o->log_severity = s;
  return NULL;
}

OnyxStatus* onyx_session_options_set_log_callback(OnyxSessionOptions* o, OnyxLogFn fn, void* user) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_log_callback");
  o->log_fn = fn; /* NULL: back to the default logger */
  o->log_user = fn ? user : NULL;
  return NULL;
}

OnyxStatus* onyx_session_options_set_execution_order(OnyxSessionOptions* o,
                                                     OnyxExecutionOrder order) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_execution_order");
  if (order != ONYX_ORDER_DEFAULT && order != ONYX_ORDER_PRIORITY)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_execution_order: unknown order %d (expected "
                     "ONYX_ORDER_DEFAULT or ONYX_ORDER_PRIORITY)",
                     (int)order);
  o->order = order;
  return NULL;
}

OnyxStatus* onyx_session_options_set_optimization_level(OnyxSessionOptions* o,
                                                        OnyxOptimizationLevel level) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_optimization_level");
  static const OnyxOptimizationLevel known[] = {ONYX_OPT_DISABLED, ONYX_OPT_BASIC,
                                                ONYX_OPT_EXTENDED, ONYX_OPT_LAYOUT, ONYX_OPT_ALL};
  for (size_t i = 0; i < OX_ARRAY_LEN(known); i++) {
    if (level == known[i]) {
      o->opt_level = level;
      return NULL;
    }
  }
  return ox_status(ONYX_INVALID_ARGUMENT,
                   "onyx_session_options_set_optimization_level: unknown level %d (expected 0, 1, "
                   "2, 3 or 99)",
                   (int)level);
}

OnyxStatus* onyx_session_options_set_deterministic(OnyxSessionOptions* o, int on) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_deterministic");
  o->deterministic = on != 0;
  return NULL;
}

OnyxStatus* onyx_session_options_set_memory_pattern(OnyxSessionOptions* o, int on) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_memory_pattern");
  o->memory_pattern = on != 0;
  return NULL;
}

OnyxStatus* onyx_session_options_set_profile(OnyxSessionOptions* o, const char* path) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_profile");
  char* copy = NULL;
  if (path && !(copy = ox_strdup(path))) return ox_oom();
  free(o->profile_path);
  o->profile_path = copy;
  return NULL;
}

OnyxStatus* onyx_session_options_set_nvtx(OnyxSessionOptions* o, int on) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_nvtx");
  o->nvtx = on != 0;
  return NULL;
}

OnyxStatus* onyx_session_options_set_process_group(OnyxSessionOptions* o, OnyxProcessGroup* g) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_process_group");
  o->process_group = g;
  return NULL;
}

OnyxStatus* onyx_session_options_set_tensor_parallel(OnyxSessionOptions* o, int on) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_tensor_parallel");
  o->tensor_parallel = on != 0;
  return NULL;
}

OnyxStatus* onyx_session_options_set_cache_dir(OnyxSessionOptions* o, const char* path) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_cache_dir");
  if (path && !*path)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_cache_dir: path is empty (use NULL to turn the "
                     "cache off)");
  char* copy = NULL;
  if (path && !(copy = ox_strdup(path))) return ox_oom();
  free(o->cache_dir);
  o->cache_dir = copy;
  return NULL;
}

OnyxStatus* onyx_session_options_set_node_priority(OnyxSessionOptions* o, const char* node_name,
                                                   int64_t priority) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_node_priority");
  if (!node_name || !*node_name)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_node_priority: node name is empty");
  for (size_t i = 0; i < o->n_prio; i++)
    if (!strcmp(o->prio_nodes[i], node_name)) {
      o->prio_values[i] = priority;
      return NULL;
    }
  size_t ncap = o->cap_prio, vcap = o->cap_prio; /* both grow in step to the same size */
  if (!ox_grow((void**)&o->prio_nodes, &ncap, o->n_prio + 1, sizeof(char*)) ||
      !ox_grow((void**)&o->prio_values, &vcap, o->n_prio + 1, sizeof(int64_t)))
    return ox_oom();
  o->cap_prio = vcap;
  char* name = ox_strdup(node_name);
  if (!name) return ox_oom();
  o->prio_nodes[o->n_prio] = name;
  o->prio_values[o->n_prio] = priority;
  o->n_prio++;
  return NULL;
}

OnyxStatus* onyx_session_options_set_dim_value(OnyxSessionOptions* o, const char* name,
                                               int64_t value) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_dim_value");
  if (!name || !*name)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_dim_value: the dimension name is empty");
  if (value < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_dim_value: dimension '%s': value %lld is negative",
                     name, (long long)value);
  for (size_t i = 0; i < o->n_dims; i++)
    if (!strcmp(o->dim_names[i], name)) {
      o->dim_values[i] = value;
      return NULL;
    }
  size_t ncap = o->cap_dims, vcap = o->cap_dims; /* both grow in step to the same size */
  if (!ox_grow((void**)&o->dim_names, &ncap, o->n_dims + 1, sizeof(char*)) ||
      !ox_grow((void**)&o->dim_values, &vcap, o->n_dims + 1, sizeof(int64_t)))
    return ox_oom();
  o->cap_dims = vcap;
  char* copy = ox_strdup(name);
  if (!copy) return ox_oom();
  o->dim_names[o->n_dims] = copy;
  o->dim_values[o->n_dims] = value;
  o->n_dims++;
  return NULL;
}

OnyxStatus* onyx_session_options_set_limits(OnyxSessionOptions* o, size_t max_model_bytes,
                                            size_t max_tensor_bytes, size_t max_nodes,
                                            int max_graph_depth) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_limits");
  if (max_graph_depth < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_set_limits: max_graph_depth %d is negative",
                     max_graph_depth);
  o->max_model_bytes = max_model_bytes;
  o->max_tensor_bytes = max_tensor_bytes;
  o->max_nodes = max_nodes;
  o->max_graph_depth = max_graph_depth;
  ox_session_limits_defaults(o);
  return NULL;
}

static size_t ox_ms(uint64_t ms) {
  return (uint64_t)(size_t)ms == ms ? (size_t)ms : SIZE_MAX;
}

OnyxStatus* onyx_session_options_set_max_session_bytes(OnyxSessionOptions* o, size_t bytes) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_max_session_bytes");
  o->max_session_bytes = bytes;
  return NULL;
}

OnyxStatus* onyx_session_options_set_max_run_ms(OnyxSessionOptions* o, uint64_t ms) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_max_run_ms");
  o->max_run_ms = ox_ms(ms);
  return NULL;
}

OnyxStatus* onyx_session_options_set_max_fold_ms(OnyxSessionOptions* o, uint64_t ms) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_max_fold_ms");
  o->max_fold_ms = ms ? ox_ms(ms) : OX_DEFAULT_MAX_FOLD_MS;
  return NULL;
}

OnyxStatus* onyx_session_options_set_fallback_deny(OnyxSessionOptions* o, int deny) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_fallback_deny");
  o->fallback_deny = deny != 0;
  return NULL;
}

OnyxStatus* onyx_session_options_set_no_implicit_cpu(OnyxSessionOptions* o, int off) {
  OX_CHECK_OPTS(o, "onyx_session_options_set_no_implicit_cpu");
  o->no_implicit_cpu = off != 0;
  return NULL;
}

/* --- Providers and pins -------------------------------------------------------------- */

OnyxStatus* onyx_session_options_add_provider(OnyxSessionOptions* o, const char* name,
                                              const char* library, int device, int required) {
  static const char fn[] = "onyx_session_options_add_provider";
  OX_CHECK_OPTS(o, "onyx_session_options_add_provider");
  if (!ox_valid_provider_name(name)) return ox_bad_provider_name(fn, name);
  if (library && !*library)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "%s: provider '%s': library path is empty (use NULL "
                     "to search by name)",
                     fn, name);
  if (device < 0)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: provider '%s': device must be >= 0, got %d", fn,
                     name, device);
  if (ox_find_provider(o, name))
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: provider '%s' is already added", fn, name);
  if (!ox_grow((void**)&o->providers, &o->cap_providers, o->n_providers + 1,
               sizeof(OxProviderSpec)))
    return ox_oom();
  OxProviderSpec* p = &o->providers[o->n_providers];
  *p = (OxProviderSpec){.name = ox_strdup(name),
                        .library = ox_strdup(library),
                        .device = device,
                        .required = required != 0};
  if (!p->name || (library && !p->library)) {
    ox_provider_spec_clear(p);
    return ox_oom();
  }
  o->n_providers++;
  return NULL;
}

OnyxStatus* onyx_session_options_add_provider_init(OnyxSessionOptions* o, const char* name,
                                                   OnyxProviderInitFn init, int required) {
  if (!init)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_session_options_add_provider_init: provider '%s': init is NULL",
                     name ? name : "(null)");
  OX_TRY(onyx_session_options_add_provider(o, name, NULL, 0, required));
  o->providers[o->n_providers - 1].init = init;
  return NULL;
}

OnyxStatus* onyx_session_options_set_provider_option(OnyxSessionOptions* o, const char* provider,
                                                     const char* key, const char* value) {
  static const char fn[] = "onyx_session_options_set_provider_option";
  OX_CHECK_OPTS(o, "onyx_session_options_set_provider_option");
  if (!provider) return ox_status(ONYX_INVALID_ARGUMENT, "%s: provider is NULL", fn);
  OxProviderSpec* p = ox_find_provider(o, provider);
  if (!p)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "%s: provider '%s' has not been added (call "
                     "onyx_session_options_add_provider first)",
                     fn, provider);
  if (!key || !*key)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: provider '%s': option key is empty", fn, provider);
  if (!value)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: provider '%s': option '%s' has a NULL value", fn,
                     provider, key);
  return ox_options_set(&p->options, key, value);
}

/* A pin may name an added provider, or the CPU unless it was switched off. */
static bool ox_pin_target_ok(const OnyxSessionOptions* o, const char* provider) {
  if (ox_find_provider(o, provider)) return true;
  return strcmp(provider, "cpu") == 0 && !o->no_implicit_cpu;
}

static const OxPin* ox_find_pin(const OnyxSessionOptions* o, const char* node_name,
                                const char* op_type) {
  for (size_t i = 0; i < o->n_pins; i++) {
    const OxPin* p = &o->pins[i];
    if (node_name && p->node_name && strcmp(p->node_name, node_name) == 0) return p;
    if (op_type && p->op_type && strcmp(p->op_type, op_type) == 0) return p;
  }
  return NULL;
}

OnyxStatus* onyx_session_options_add_pin(OnyxSessionOptions* o, const char* node_name,
                                         const char* op_type, const char* provider) {
  static const char fn[] = "onyx_session_options_add_pin";
  OX_CHECK_OPTS(o, "onyx_session_options_add_pin");
  if ((node_name != NULL) == (op_type != NULL))
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: give exactly one of node_name and op_type", fn);
  const char* what = node_name ? "node" : "op_type";
  const char* target = node_name ? node_name : op_type;
  if (!*target) return ox_status(ONYX_INVALID_ARGUMENT, "%s: %s is empty", fn, what);
  if (!ox_valid_provider_name(provider)) return ox_bad_provider_name(fn, provider);
  if (!ox_pin_target_ok(o, provider))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "%s: %s '%s' is pinned to provider '%s', which has not been added", fn, what,
                     target, provider);
  const OxPin* dup = ox_find_pin(o, node_name, op_type);
  if (dup)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: %s '%s' is already pinned to provider '%s'", fn,
                     what, target, dup->provider);
  if (!ox_grow((void**)&o->pins, &o->cap_pins, o->n_pins + 1, sizeof(OxPin))) return ox_oom();
  OxPin src = {
      .node_name = (char*)node_name, .op_type = (char*)op_type, .provider = (char*)provider};
  if (!ox_pin_copy(&o->pins[o->n_pins], &src)) return ox_oom();
  o->n_pins++;
  return NULL;
}

/* --- The providers the options name (onyx.h, "Providers and devices") ----------------- */

OnyxStatus* onyx_session_options_list_providers(const OnyxSessionOptions* o,
                                                OnyxProviderList** out) {
  if (!out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_options_list_providers: out is NULL");
  *out = NULL;
  OnyxProviderList* l = NULL;
  OnyxStatus* st = ox_provider_list_new(&l);
  bool lists_cpu = false;
  for (size_t i = 0; o && !st && i < o->n_providers; i++) {
    const OxProviderSpec* spec = &o->providers[i];
    lists_cpu = lists_cpu || strcmp(spec->name, "cpu") == 0;
    st = ox_provider_list_add_spec(ox_host_api(), l, spec->name, spec->library, spec->init);
  }
  /* As session creation does: the CPU provider last, unless listed or off. */
  if (!st && !lists_cpu && !(o && o->no_implicit_cpu))
    st = ox_provider_list_add_spec(ox_host_api(), l, "cpu", NULL, NULL);
  if (st) {
    onyx_provider_list_release(l);
    return st;
  }
  *out = l;
  return NULL;
}
