/* config.c — the JSON provider/session config (docs/config.md), parsed with
 * jansson into a copy of the session options that replaces the caller's only
 * when the whole file is valid.
 *
 * Every object of the format is described by a table of its keys, so the
 * unknown-key check, its "did you mean" hint and the plain scalar settings
 * all come from data. Errors are "<origin>:<line>:<col>: ..." for syntax and
 * "<origin>: <key path>: ..." for everything after parsing. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_options.h"

/* Config files are small; anything bigger is a mistake, not a config. */
#define OX_CONFIG_MAX_BYTES (16u << 20)

typedef struct OxCfg {
  const char* origin; /* file name or caller-chosen label, for messages */
} OxCfg;

typedef struct OxEnumName {
  const char* name;
  int value;
} OxEnumName;

typedef enum OxFieldKind {
  OX_F_CUSTOM, /* handled by code, listed only for the unknown-key check */
  OX_F_BOOL,   /* bool */
  OX_F_INT,    /* int, >= 0 */
  OX_F_SIZE,   /* size_t, >= 0 */
  OX_F_ENUM,   /* an int-sized enum, from a name */
  OX_F_STRING, /* char*, non-empty, owned */
  OX_F_OBJECT, /* nested object of fields */
} OxFieldKind;

typedef struct OxField {
  const char* key;
  OxFieldKind kind;
  size_t offset; /* into OnyxSessionOptions */
  const OxEnumName* names;
  size_t name_count;
  const struct OxField* sub;
  size_t sub_count;
} OxField;

#define OX_FIELD(k, kind, member)                                                                  \
  { k, kind, offsetof(OnyxSessionOptions, member), NULL, 0, NULL, 0 }
#define OX_ENUM(k, member, names)                                                                  \
  { k, OX_F_ENUM, offsetof(OnyxSessionOptions, member), names, OX_ARRAY_LEN(names), NULL, 0 }
#define OX_CUSTOM(k)                                                                               \
  { k, OX_F_CUSTOM, 0, NULL, 0, NULL, 0 }

static const OxEnumName ox_level_names[] = {{"disabled", ONYX_OPT_DISABLED},
                                            {"basic", ONYX_OPT_BASIC},
                                            {"extended", ONYX_OPT_EXTENDED},
                                            {"layout", ONYX_OPT_LAYOUT},
                                            {"all", ONYX_OPT_ALL}};
static const OxEnumName ox_order_names[] = {{"default", ONYX_ORDER_DEFAULT},
                                            {"priority", ONYX_ORDER_PRIORITY}};
static const OxEnumName ox_severity_names[] = {{"verbose", ONYX_LOG_VERBOSE},
                                               {"info", ONYX_LOG_INFO},
                                               {"warning", ONYX_LOG_WARNING},
                                               {"error", ONYX_LOG_ERROR},
                                               {"fatal", ONYX_LOG_FATAL}};
static const OxEnumName ox_fallback_names[] = {{"allow", 0}, {"deny", 1}};

static const OxField ox_limit_fields[] = {
    OX_FIELD("max_model_bytes", OX_F_SIZE, max_model_bytes),
    OX_FIELD("max_tensor_bytes", OX_F_SIZE, max_tensor_bytes),
    OX_FIELD("max_nodes", OX_F_SIZE, max_nodes),
    OX_FIELD("max_graph_depth", OX_F_INT, max_graph_depth),
    OX_FIELD("max_session_bytes", OX_F_SIZE, max_session_bytes),
    OX_FIELD("max_run_ms", OX_F_SIZE, max_run_ms),
    OX_FIELD("max_fold_ms", OX_F_SIZE, max_fold_ms),
};

static const OxField ox_session_fields[] = {
    OX_ENUM("optimization_level", opt_level, ox_level_names),
    OX_ENUM("execution_order", order, ox_order_names),
    OX_FIELD("memory_pattern", OX_F_BOOL, memory_pattern),
    OX_FIELD("deterministic", OX_F_BOOL, deterministic),
    OX_ENUM("log_severity", log_severity, ox_severity_names),
    OX_FIELD("threads", OX_F_INT, threads),
    OX_FIELD("profile", OX_F_STRING, profile_path),
    OX_FIELD("nvtx", OX_F_BOOL, nvtx),
    OX_FIELD("cache_dir", OX_F_STRING, cache_dir),
    OX_CUSTOM("node_priorities"),
    {"limits", OX_F_OBJECT, 0, NULL, 0, ox_limit_fields, OX_ARRAY_LEN(ox_limit_fields)},
};

static const OxField ox_top_fields[] = {
    OX_CUSTOM("providers"),
    OX_CUSTOM("placement"),
    OX_CUSTOM("fallback"),
    OX_CUSTOM("implicit_cpu"),
    {"session", OX_F_OBJECT, 0, NULL, 0, ox_session_fields, OX_ARRAY_LEN(ox_session_fields)},
};

static const OxField ox_provider_fields[] = {
    OX_CUSTOM("name"),     OX_CUSTOM("library"), OX_CUSTOM("device"),
    OX_CUSTOM("required"), OX_CUSTOM("options"),
};

static const OxField ox_pin_fields[] = {OX_CUSTOM("op_type"), OX_CUSTOM("node"),
                                        OX_CUSTOM("provider")};

/* --- Messages ----------------------------------------------------------------------- */

static OnyxStatus* ox_cfg_error(const OxCfg* c, const char* path, const char* fmt, ...)
    OX_PRINTF(3, 4);

static OnyxStatus* ox_cfg_error(const OxCfg* c, const char* path, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!*path) return ox_status(ONYX_INVALID_CONFIG, "%s: %s", c->origin, msg);
  return ox_status(ONYX_INVALID_CONFIG, "%s: %s: %s", c->origin, path, msg);
}

/* A setter's error in config terms (they are pre-checked, so mostly OOM). */
static OnyxStatus* ox_cfg_wrap(const OxCfg* c, const char* path, OnyxStatus* st) {
  if (st && st->code == ONYX_INVALID_ARGUMENT) st->code = ONYX_INVALID_CONFIG;
  return ox_status_wrap(st, "%s: %s", c->origin, path);
}

static const char* ox_json_type_name(const json_t* v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a real number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "an unknown value";
}

static OnyxStatus* ox_cfg_type_error(const OxCfg* c, const char* path, const char* expected,
                                     const json_t* v) {
  return ox_cfg_error(c, path, "expected %s, got %s", expected, ox_json_type_name(v));
}

/* Paths are cut at the buffer's size: a message about a 500-character key
 * path is still readable. (Copied by hand: snprintf here trips GCC's
 * -Wformat-truncation once inlined.) */
static void ox_path_key(char* buf, size_t n, const char* path, const char* key) {
  const char* parts[] = {path, *path ? "." : "", key};
  size_t used = 0;
  for (size_t i = 0; i < OX_ARRAY_LEN(parts); i++)
    for (const char* p = parts[i]; *p && used + 1 < n; p++)
      buf[used++] = *p;
  buf[used] = '\0';
}

static bool ox_path_index(char* buf, size_t n, const char* path, size_t i) {
  return snprintf(buf, n, "%s[%zu]", path, i) < (int)n;
}

/* --- Unknown keys, with a hint -------------------------------------------------------- */

/* Levenshtein distance, for "did you mean"; long strings are not compared. */
static size_t ox_edit_distance(const char* a, const char* b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return SIZE_MAX;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

static const OxField* ox_field_find(const OxField* f, size_t n, const char* key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(f[i].key, key) == 0) return &f[i];
  return NULL;
}

static OnyxStatus* ox_cfg_unknown_key(const OxCfg* c, const char* path, const char* key,
                                      const OxField* f, size_t n) {
  char at[512];
  ox_path_key(at, sizeof at, path, key);
  const char* best = NULL;
  size_t best_d = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    size_t d = ox_edit_distance(key, f[i].key);
    if (d < best_d) best_d = d, best = f[i].key;
  }
  /* A hint only when the key is plausibly a typo of the suggestion. */
  if (best && best_d <= 2 && best_d < strlen(key))
    return ox_cfg_error(c, at, "unknown key; did you mean '%s'?", best);
  char known[512] = "";
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(known);
    snprintf(known + len, sizeof known - len, "%s'%s'", i ? ", " : "", f[i].key);
  }
  return ox_cfg_error(c, at, "unknown key (expected one of %s)", known);
}

/* Checks obj is an object whose keys are all in f. */
static OnyxStatus* ox_cfg_object(const OxCfg* c, const char* path, const json_t* obj,
                                 const OxField* f, size_t n) {
  if (!json_is_object(obj)) return ox_cfg_type_error(c, path, "an object", obj);
  const char* key;
  json_t* v;
  json_object_foreach((json_t*)obj, key, v) {
    if (!ox_field_find(f, n, key)) return ox_cfg_unknown_key(c, path, key, f, n);
  }
  return NULL;
}

/* --- Scalars -------------------------------------------------------------------------- */

static OnyxStatus* ox_cfg_bool(const OxCfg* c, const char* path, const json_t* v, bool* out) {
  if (!json_is_boolean(v)) return ox_cfg_type_error(c, path, "a boolean (true or false)", v);
  *out = json_is_true(v);
  return NULL;
}

static OnyxStatus* ox_cfg_uint(const OxCfg* c, const char* path, const json_t* v,
                               unsigned long long max, unsigned long long* out) {
  if (!json_is_integer(v)) return ox_cfg_type_error(c, path, "a non-negative integer", v);
  json_int_t x = json_integer_value(v);
  if (x < 0 || (unsigned long long)x > max)
    return ox_cfg_error(c, path, "%" JSON_INTEGER_FORMAT " is out of range (0 to %llu)", x, max);
  *out = (unsigned long long)x;
  return NULL;
}

static OnyxStatus* ox_cfg_string(const OxCfg* c, const char* path, const json_t* v,
                                 const char** out) {
  if (!json_is_string(v)) return ox_cfg_type_error(c, path, "a string", v);
  if (!*json_string_value(v)) return ox_cfg_error(c, path, "must not be empty");
  *out = json_string_value(v);
  return NULL;
}

static OnyxStatus* ox_cfg_enum(const OxCfg* c, const char* path, const json_t* v,
                               const OxEnumName* names, size_t n, int* out) {
  char allowed[256] = "";
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(allowed);
    snprintf(allowed + len, sizeof allowed - len, "%s'%s'", i ? ", " : "", names[i].name);
  }
  if (!json_is_string(v)) {
    char expected[300];
    snprintf(expected, sizeof expected, "one of %s", allowed);
    return ox_cfg_type_error(c, path, expected, v);
  }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(json_string_value(v), names[i].name) == 0) {
      *out = names[i].value;
      return NULL;
    }
  }
  return ox_cfg_error(c, path, "'%s' is not one of %s", json_string_value(v), allowed);
}

/* Applies the fields of a table-described object to o. */
static OnyxStatus* ox_cfg_fields(const OxCfg* c, const char* path, const json_t* obj,
                                 const OxField* f, size_t n, OnyxSessionOptions* o) {
  OX_TRY(ox_cfg_object(c, path, obj, f, n));
  for (size_t i = 0; i < n; i++) {
    const json_t* v = json_object_get(obj, f[i].key);
    if (!v || f[i].kind == OX_F_CUSTOM) continue;
    char at[512];
    ox_path_key(at, sizeof at, path, f[i].key);
    void* dst = (char*)o + f[i].offset;
    unsigned long long u = 0;
    const char* s = NULL;
    switch (f[i].kind) {
    case OX_F_BOOL:
      OX_TRY(ox_cfg_bool(c, at, v, (bool*)dst));
      break;
    case OX_F_INT:
      OX_TRY(ox_cfg_uint(c, at, v, INT_MAX, &u));
      *(int*)dst = (int)u;
      break;
    case OX_F_SIZE:
      OX_TRY(ox_cfg_uint(c, at, v, SIZE_MAX, &u));
      *(size_t*)dst = (size_t)u;
      break;
    case OX_F_ENUM:
      OX_TRY(ox_cfg_enum(c, at, v, f[i].names, f[i].name_count, (int*)dst));
      break;
    case OX_F_STRING: {
      OX_TRY(ox_cfg_string(c, at, v, &s));
      char* copy = ox_strdup(s);
      if (!copy) return ox_oom();
      free(*(char**)dst);
      *(char**)dst = copy;
      break;
    }
    case OX_F_OBJECT:
      OX_TRY(ox_cfg_fields(c, at, v, f[i].sub, f[i].sub_count, o));
      break;
    case OX_F_CUSTOM:
      break;
    }
  }
  return NULL;
}

/* --- Providers -------------------------------------------------------------------------- */

/* Numbers keep a JSON-like text: integers in decimal, reals in their shortest
 * form that reads back to the same double, always with a '.' or exponent. */
static void ox_real_text(double x, char* buf, size_t n) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  if (!strpbrk(buf, ".eEn")) { /* "2" -> "2.0" (n: inf/nan cannot come from JSON) */
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, ".0");
  }
}

static OnyxStatus* ox_cfg_option_text(const OxCfg* c, const char* path, const json_t* v, char* buf,
                                      size_t n, const char** out) {
  switch (json_typeof(v)) {
  case JSON_STRING:
    *out = json_string_value(v);
    return NULL;
  case JSON_INTEGER:
    snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    break;
  case JSON_REAL:
    ox_real_text(json_real_value(v), buf, n);
    break;
  case JSON_TRUE:
    snprintf(buf, n, "true");
    break;
  case JSON_FALSE:
    snprintf(buf, n, "false");
    break;
  default:
    return ox_cfg_type_error(c, path, "a string, number or boolean", v);
  }
  *out = buf;
  return NULL;
}

static OnyxStatus* ox_cfg_provider_options(const OxCfg* c, const char* path, const json_t* obj,
                                           OnyxOptions* dst) {
  if (!json_is_object(obj)) return ox_cfg_type_error(c, path, "an object", obj);
  const char* key;
  json_t* v;
  json_object_foreach((json_t*)obj, key, v) {
    char at[512], num[64];
    const char* text = NULL;
    if (!*key) return ox_cfg_error(c, path, "an option key is empty");
    ox_path_key(at, sizeof at, path, key);
    OX_TRY(ox_cfg_option_text(c, at, v, num, sizeof num, &text));
    OX_TRY(ox_cfg_wrap(c, at, ox_options_set(dst, key, text)));
  }
  return NULL;
}

static bool ox_cfg_name_ok(const char* s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
  return true;
}

/* The member `key` of obj (NULL if absent), with its path written to `at`. */
static const json_t* ox_member(const json_t* obj, const char* key, char* at, size_t n,
                               const char* path) {
  ox_path_key(at, n, path, key);
  return json_object_get(obj, key);
}

static OnyxStatus* ox_cfg_provider_name(const OxCfg* c, const char* path, const json_t* e,
                                        const OnyxSessionOptions* list, const char** name) {
  char at[512];
  const json_t* v = ox_member(e, "name", at, sizeof at, path);
  if (!v) return ox_cfg_error(c, path, "missing required key 'name'");
  OX_TRY(ox_cfg_string(c, at, v, name));
  if (!ox_cfg_name_ok(*name))
    return ox_cfg_error(c, at,
                        "'%s' is not a valid provider name (use lowercase letters, digits "
                        "and '_')",
                        *name);
  for (size_t i = 0; i < list->n_providers; i++) {
    if (strcmp(list->providers[i].name, *name) == 0)
      return ox_cfg_error(c, at, "provider '%s' is listed twice (first at providers[%zu])", *name,
                          i);
  }
  return NULL;
}

static OnyxStatus* ox_cfg_provider(const OxCfg* c, const char* path, const json_t* e,
                                   OnyxSessionOptions* list) {
  OX_TRY(ox_cfg_object(c, path, e, ox_provider_fields, OX_ARRAY_LEN(ox_provider_fields)));
  const char* name = NULL;
  OX_TRY(ox_cfg_provider_name(c, path, e, list, &name));
  char at[512];
  const char* library = NULL;
  unsigned long long device = 0;
  bool required = true;
  const json_t* v;
  if ((v = ox_member(e, "library", at, sizeof at, path))) OX_TRY(ox_cfg_string(c, at, v, &library));
  if ((v = ox_member(e, "device", at, sizeof at, path)))
    OX_TRY(ox_cfg_uint(c, at, v, INT_MAX, &device));
  if ((v = ox_member(e, "required", at, sizeof at, path))) OX_TRY(ox_cfg_bool(c, at, v, &required));
  OX_TRY(ox_cfg_wrap(
      c, path, onyx_session_options_add_provider(list, name, library, (int)device, required)));
  if ((v = ox_member(e, "options", at, sizeof at, path)))
    OX_TRY(ox_cfg_provider_options(c, at, v, &list->providers[list->n_providers - 1].options));
  return NULL;
}

static void ox_swap_providers(OnyxSessionOptions* a, OnyxSessionOptions* b) {
  OnyxSessionOptions t = *a;
  a->providers = b->providers, a->n_providers = b->n_providers, a->cap_providers = b->cap_providers;
  b->providers = t.providers, b->n_providers = t.n_providers, b->cap_providers = t.cap_providers;
}

static void ox_swap_pins(OnyxSessionOptions* a, OnyxSessionOptions* b) {
  OnyxSessionOptions t = *a;
  a->pins = b->pins, a->n_pins = b->n_pins, a->cap_pins = b->cap_pins;
  b->pins = t.pins, b->n_pins = t.n_pins, b->cap_pins = t.cap_pins;
}

/* The file's provider list replaces the one in o. */
static OnyxStatus* ox_cfg_providers(const OxCfg* c, const json_t* arr, OnyxSessionOptions* o) {
  if (!json_is_array(arr)) return ox_cfg_type_error(c, "providers", "an array", arr);
  OnyxSessionOptions* list;
  OX_TRY(onyx_session_options_create(&list));
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < json_array_size(arr); i++) {
    char at[64];
    ox_path_index(at, sizeof at, "providers", i);
    st = ox_cfg_provider(c, at, json_array_get(arr, i), list);
  }
  if (!st) ox_swap_providers(o, list); /* list now holds the old ones, released below */
  onyx_session_options_release(list);
  return st;
}

/* --- Placement --------------------------------------------------------------------------- */

static bool ox_has_provider(const OnyxSessionOptions* o, const char* name) {
  for (size_t i = 0; i < o->n_providers; i++)
    if (strcmp(o->providers[i].name, name) == 0) return true;
  return false;
}

static const char* ox_pin_owner(const OnyxSessionOptions* o, const char* node, const char* op,
                                size_t* index) {
  for (size_t i = 0; i < o->n_pins; i++) {
    const OxPin* p = &o->pins[i];
    if ((node && p->node_name && strcmp(node, p->node_name) == 0) ||
        (op && p->op_type && strcmp(op, p->op_type) == 0)) {
      *index = i;
      return p->provider;
    }
  }
  return NULL;
}

static OnyxStatus* ox_cfg_pin(const OxCfg* c, const char* path, const json_t* e,
                              OnyxSessionOptions* o) {
  OX_TRY(ox_cfg_object(c, path, e, ox_pin_fields, OX_ARRAY_LEN(ox_pin_fields)));
  char at[512];
  const char *node = NULL, *op = NULL, *provider = NULL;
  const json_t* vn = json_object_get(e, "node");
  const json_t* vo = json_object_get(e, "op_type");
  if (!vn == !vo) return ox_cfg_error(c, path, "give exactly one of 'op_type' and 'node'");
  const char* which = vn ? "node" : "op_type";
  ox_path_key(at, sizeof at, path, which);
  OX_TRY(ox_cfg_string(c, at, vn ? vn : vo, vn ? &node : &op));
  const json_t* vp = ox_member(e, "provider", at, sizeof at, path);
  if (!vp) return ox_cfg_error(c, path, "missing required key 'provider'");
  OX_TRY(ox_cfg_string(c, at, vp, &provider));
  if (!ox_has_provider(o, provider)) {
    if (strcmp(provider, "cpu") != 0)
      return ox_cfg_error(c, at, "provider '%s' is not listed in 'providers'", provider);
    if (o->no_implicit_cpu)
      return ox_cfg_error(c, at,
                          "provider 'cpu' is not available: 'implicit_cpu' is false and "
                          "'cpu' is not listed in 'providers'");
  }
  size_t first;
  if (ox_pin_owner(o, node, op, &first))
    return ox_cfg_error(c, path, "%s '%s' is already pinned by placement[%zu]",
                        node ? "node" : "op_type", node ? node : op, first);
  return ox_cfg_wrap(c, path, onyx_session_options_add_pin(o, node, op, provider));
}

/* The file's pins replace the ones in o; checked against o's final providers. */
static OnyxStatus* ox_cfg_placement(const OxCfg* c, const json_t* arr, OnyxSessionOptions* o) {
  if (!json_is_array(arr)) return ox_cfg_type_error(c, "placement", "an array", arr);
  OnyxSessionOptions* old;
  OX_TRY(onyx_session_options_create(&old));
  ox_swap_pins(o, old);
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < json_array_size(arr); i++) {
    char at[64];
    ox_path_index(at, sizeof at, "placement", i);
    st = ox_cfg_pin(c, at, json_array_get(arr, i), o);
  }
  onyx_session_options_release(old); /* o is a scratch copy: on error it is dropped whole */
  return st;
}

/* session.node_priorities: {"node name": integer, ...}; replaces every
 * priority set before. */
static OnyxStatus* ox_cfg_priorities(const OxCfg* c, const json_t* obj, OnyxSessionOptions* o) {
  const char* path = "session.node_priorities";
  if (!json_is_object(obj)) return ox_cfg_type_error(c, path, "an object", obj);
  for (size_t i = 0; i < o->n_prio; i++)
    free(o->prio_nodes[i]);
  o->n_prio = 0;
  const char* key;
  json_t* v;
  json_object_foreach((json_t*)obj, key, v) {
    char at[512];
    ox_path_key(at, sizeof at, path, key);
    if (!*key) return ox_cfg_error(c, path, "a node name is empty");
    if (!json_is_integer(v)) return ox_cfg_type_error(c, at, "an integer", v);
    OX_TRY(ox_cfg_wrap(
        c, at, onyx_session_options_set_node_priority(o, key, (int64_t)json_integer_value(v))));
  }
  return NULL;
}

/* --- The document ------------------------------------------------------------------------- */

static OnyxStatus* ox_cfg_apply(const OxCfg* c, const json_t* root, OnyxSessionOptions* o) {
  if (!json_is_object(root))
    return ox_cfg_error(c, "", "the top level must be an object, got %s", ox_json_type_name(root));
  OX_TRY(ox_cfg_fields(c, "", root, ox_top_fields, OX_ARRAY_LEN(ox_top_fields), o));
  const json_t* v;
  if ((v = json_object_get(root, "providers"))) OX_TRY(ox_cfg_providers(c, v, o));
  if ((v = json_object_get(root, "implicit_cpu"))) {
    bool on = true;
    OX_TRY(ox_cfg_bool(c, "implicit_cpu", v, &on));
    o->no_implicit_cpu = !on;
  }
  if ((v = json_object_get(root, "fallback"))) {
    int deny = 0;
    OX_TRY(
        ox_cfg_enum(c, "fallback", v, ox_fallback_names, OX_ARRAY_LEN(ox_fallback_names), &deny));
    o->fallback_deny = deny != 0;
  }
  if (o->no_implicit_cpu && o->n_providers == 0)
    return ox_cfg_error(c, "implicit_cpu",
                        "false, but 'providers' lists none: the session would have no provider");
  if ((v = json_object_get(root, "placement"))) OX_TRY(ox_cfg_placement(c, v, o));
  const json_t* sess = json_object_get(root, "session");
  if ((v = json_object_get(sess, "node_priorities"))) OX_TRY(ox_cfg_priorities(c, v, o));
  ox_session_limits_defaults(o); /* "limits": 0 means the default */
  return NULL;
}

OnyxStatus* onyx_session_options_load_config_text(OnyxSessionOptions* o, const char* text,
                                                  size_t len, const char* origin) {
  if (!o || !text)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_options_load_config_text: %s is NULL",
                     o ? "text" : "options");
  OxCfg c = {.origin = origin ? origin : "<config>"};
  json_error_t err;
  json_t* root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return ox_status(ONYX_INVALID_CONFIG, "%s:%d:%d: %s", c.origin, err.line, err.column, err.text);
  OnyxSessionOptions* tmp;
  OnyxStatus* st = ox_session_options_clone(o, &tmp);
  if (!st) st = ox_cfg_apply(&c, root, tmp);
  json_decref(root);
  if (!st) { /* all or nothing: o takes the new settings, tmp takes the old to free */
    OnyxSessionOptions t = *o;
    *o = *tmp;
    *tmp = t;
  }
  onyx_session_options_release(tmp);
  return st;
}

static OnyxStatus* ox_read_file(const char* path, char** text, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f)
    return ox_status(errno == ENOENT ? ONYX_NOT_FOUND : ONYX_FAIL, "%s: cannot open: %s", path,
                     strerror(errno));
  char* buf = NULL;
  size_t n = 0, cap = 0;
  OnyxStatus* st = NULL;
  for (;;) {
    if (n == cap && !ox_grow((void**)&buf, &cap, n + 8192, 1)) {
      st = ox_oom();
      break;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n > OX_CONFIG_MAX_BYTES) {
      st = ox_status(ONYX_INVALID_CONFIG, "%s: larger than %u bytes: not a config file", path,
                     OX_CONFIG_MAX_BYTES);
      break;
    }
    if (got == 0) {
      if (ferror(f)) st = ox_status(ONYX_FAIL, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (st) {
    free(buf);
    return st;
  }
  *text = buf;
  *len = n;
  return NULL;
}

OnyxStatus* onyx_session_options_load_config(OnyxSessionOptions* o, const char* path) {
  if (!o || !path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_options_load_config: %s is NULL",
                     o ? "path" : "options");
  char* text = NULL;
  size_t len = 0;
  OX_TRY(ox_read_file(path, &text, &len));
  OnyxStatus* st = onyx_session_options_load_config_text(o, text, len, path);
  free(text);
  return st;
}
