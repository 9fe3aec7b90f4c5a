/* registry.c — schema registries (the built-in ai.onnx one and custom ones
 * from providers/applications), look-up by (domain, op, opset), constraint
 * queries, and the inference driver with its type checks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_util.h"

/* --- Type names as ONNX writes them ------------------------------------------------ */

static const char* const onnx_type_names[ONYX_ELEM_TYPE_COUNT] = {
    [ONYX_ELEM_FLOAT32] = "float",
    [ONYX_ELEM_UINT8] = "uint8",
    [ONYX_ELEM_INT8] = "int8",
    [ONYX_ELEM_UINT16] = "uint16",
    [ONYX_ELEM_INT16] = "int16",
    [ONYX_ELEM_INT32] = "int32",
    [ONYX_ELEM_INT64] = "int64",
    [ONYX_ELEM_STRING] = "string",
    [ONYX_ELEM_BOOL] = "bool",
    [ONYX_ELEM_FLOAT16] = "float16",
    [ONYX_ELEM_FLOAT64] = "double",
    [ONYX_ELEM_UINT32] = "uint32",
    [ONYX_ELEM_UINT64] = "uint64",
    [ONYX_ELEM_COMPLEX64] = "complex64",
    [ONYX_ELEM_COMPLEX128] = "complex128",
    [ONYX_ELEM_BFLOAT16] = "bfloat16",
    [ONYX_ELEM_FLOAT8E4M3FN] = "float8e4m3fn",
    [ONYX_ELEM_FLOAT8E4M3FNUZ] = "float8e4m3fnuz",
    [ONYX_ELEM_FLOAT8E5M2] = "float8e5m2",
    [ONYX_ELEM_FLOAT8E5M2FNUZ] = "float8e5m2fnuz",
    [ONYX_ELEM_UINT4] = "uint4",
    [ONYX_ELEM_INT4] = "int4",
    [ONYX_ELEM_FLOAT4E2M1] = "float4e2m1",
    [ONYX_ELEM_FLOAT8E8M0] = "float8e8m0",
    [ONYX_ELEM_UINT2] = "uint2",
    [ONYX_ELEM_INT2] = "int2",
};

OnyxElemType ox_onnx_type_from_name(const char* name) {
  for (int t = 1; t < ONYX_ELEM_TYPE_COUNT; t++)
    if (onnx_type_names[t] && !strcmp(onnx_type_names[t], name)) return (OnyxElemType)t;
  return ONYX_ELEM_UNDEFINED;
}

const char* ox_onnx_type_name(OnyxElemType t) {
  return (unsigned)t < ONYX_ELEM_TYPE_COUNT && onnx_type_names[t] ? onnx_type_names[t] : "?";
}

static const char* attr_type_name(int t) {
  static const char* const names[] = {"undefined",      "float",      "int",        "string",
                                      "tensor",         "graph",      "floats",     "ints",
                                      "strings",        "tensors",    "graphs",     "sparse_tensor",
                                      "sparse_tensors", "type_proto", "type_protos"};
  return t >= 0 && (size_t)t < OX_ARRAY_LEN(names) ? names[t] : "?";
}

/* --- Ordering and search ------------------------------------------------------------- */

static const char* dom_key(const char* d) {
  return ox_domain_is_onnx(d) ? "" : d;
}

static int cmp_key(const OxSchema* s, const char* dom, const char* op, int32_t ver) {
  int c = strcmp(dom_key(s->domain), dom);
  if (!c) c = strcmp(s->op_type, op);
  if (!c) c = s->since_version < ver ? -1 : s->since_version > ver;
  return c;
}

static int cmp_schema_ptr(const void* a, const void* b) {
  const OxSchema* y = *(const OxSchema* const*)b;
  return cmp_key(*(const OxSchema* const*)a, dom_key(y->domain), y->op_type, y->since_version);
}

/* First index whose key is >= (dom, op, ver). */
static size_t lower_bound(const OxSchemaRegistry* r, const char* dom, const char* op, int32_t ver) {
  size_t lo = 0, hi = r->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cmp_key(r->sorted[mid], dom, op, ver) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The schema of (dom, op) with the largest since_version <= opset; *first
 * gets the smallest since_version of the op (0 when the op is absent). */
static const OxSchema* find(const OxSchemaRegistry* r, const char* dom, const char* op,
                            int64_t opset, int32_t* first) {
  const OxSchema* best = NULL;
  for (size_t i = lower_bound(r, dom, op, INT32_MIN); i < r->count; i++) {
    const OxSchema* s = r->sorted[i];
    if (strcmp(dom_key(s->domain), dom) || strcmp(s->op_type, op)) break;
    if (!*first || s->since_version < *first) *first = s->since_version;
    if (s->since_version <= opset) best = s;
  }
  return best;
}

/* --- The built-in registry -------------------------------------------------------------- */

#define OX_BUILTIN_CAP 4096
static const OxSchema* builtin_sorted[OX_BUILTIN_CAP];
/* Generated rows with their family's inference attached. */
static OxSchema gen_rows[OX_BUILTIN_CAP];
static struct OnyxSchemaRegistry builtin = {.sorted = builtin_sorted};
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static const OxSchemaFamily* const families[] = {
    &ox_family_math,     &ox_family_tensor,     &ox_family_nn,           &ox_family_quant,
    &ox_family_misc,     &ox_family_contrib,    &ox_family_cf,           &ox_family_image,
    &ox_family_training, &ox_family_collective, &ox_family_training_seq, &ox_family_nchwc,
    &ox_family_fused,
};

static void builtin_add(const OxSchema* s, size_t* n) {
  if (*n < OX_BUILTIN_CAP) builtin_sorted[(*n)++] = s;
}

static OxInferFn gen_override(const OxSchema* s) {
  for (size_t f = 0; f < OX_ARRAY_LEN(families); f++)
    for (size_t i = 0; i < families[f]->n_overrides; i++) {
      const OxInferOverride* o = &families[f]->overrides[i];
      if (!strcmp(dom_key(o->domain), dom_key(s->domain)) && !strcmp(o->op_type, s->op_type) &&
          s->since_version >= o->since_min && s->since_version <= o->since_max)
        return o->infer;
    }
  return NULL;
}

/* Rank of a row's source: a duplicate key keeps the highest. */
static int source_rank(const OxSchema* s) {
  if (s >= ox_onnx_schemas && s < ox_onnx_schemas + ox_onnx_schemas_count) return 2;
  if (s >= gen_rows && s < gen_rows + OX_BUILTIN_CAP) return 0;
  return 1;
}

static void builtin_init(void) {
  size_t n = 0;
  for (size_t i = 0; i < ox_onnx_schemas_count; i++)
    builtin_add(&ox_onnx_schemas[i], &n);
  for (size_t f = 0; f < OX_ARRAY_LEN(families); f++)
    for (size_t i = 0; i < families[f]->n_rows; i++)
      builtin_add(&families[f]->rows[i], &n);
  for (size_t i = 0; i < ox_gen_schemas_count && i < OX_BUILTIN_CAP; i++) {
    gen_rows[i] = ox_gen_schemas[i];
    if (!gen_rows[i].infer) gen_rows[i].infer = gen_override(&gen_rows[i]);
    builtin_add(&gen_rows[i], &n);
  }
  qsort(builtin_sorted, n, sizeof builtin_sorted[0], cmp_schema_ptr);
  /* Drop duplicates of one key, keeping the row of the highest source. */
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    if (w && !cmp_schema_ptr(&builtin_sorted[w - 1], &builtin_sorted[i])) {
      if (source_rank(builtin_sorted[i]) > source_rank(builtin_sorted[w - 1]))
        builtin_sorted[w - 1] = builtin_sorted[i];
      continue;
    }
    builtin_sorted[w++] = builtin_sorted[i];
  }
  builtin.count = builtin.cap = w;
}

const OxSchemaRegistry* ox_schemas_builtin(void) {
  pthread_once(&builtin_once, builtin_init);
  return &builtin;
}

/* --- Look-up ---------------------------------------------------------------------------- */

/* Messages live here until the same thread's next look-up. */
static _Thread_local char why_buf[256];

static const OxOpName* onnx_op_name(const char* op) {
  size_t lo = 0, hi = ox_onnx_op_names_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(ox_onnx_op_names[mid].name, op);
    if (!c) return &ox_onnx_op_names[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void explain_miss(const char* dom, const char* op, int64_t opset, int32_t first) {
  const char* shown = *dom ? dom : "ai.onnx";
  const OxOpName* known = *dom ? NULL : onnx_op_name(op);
  if (!first && known && known->since > opset) first = known->since;
  if (first > opset) {
    snprintf(why_buf, sizeof why_buf, "'%s' is defined from %s %d; the model imports %s %lld", op,
             *dom ? "version" : "opset", (int)first, *dom ? "version" : "opset", (long long)opset);
  } else if (known) {
    snprintf(why_buf, sizeof why_buf,
             "'%s' is an ai.onnx op (from opset %d) that onyx has no schema for", op,
             (int)known->since);
  } else {
    snprintf(why_buf, sizeof why_buf, "unknown op '%s' in domain '%s'", op, shown);
  }
}

const OxSchema* ox_schema_lookup(const OxSchemaRegistry* custom, const char* domain,
                                 const char* op_type, int64_t opset, const char** why) {
  if (why) *why = NULL;
  if (!op_type) {
    if (why) *why = "node has no op_type";
    return NULL;
  }
  const char* dom = dom_key(domain);
  int32_t first = 0;
  const OxSchema* s = custom ? find(custom, dom, op_type, opset, &first) : NULL;
  if (!s) s = find(ox_schemas_builtin(), dom, op_type, opset, &first);
  if (!s && why) {
    explain_miss(dom, op_type, opset, first);
    *why = why_buf;
  }
  return s;
}

/* --- Formals and constraints --------------------------------------------------------------- */

static const OxFormal* formal_at(const OxFormal* f, size_t n, size_t i) {
  if (i < n) return &f[i];
  if (n && f[n - 1].option == ONYX_PARAM_VARIADIC) return &f[n - 1];
  return NULL;
}

static bool is_fixed(const char* tc) {
  return tc && !strncmp(tc, "tensor(", 7);
}

const char* ox_schema_input_tc(const OxSchema* s, size_t i) {
  const OxFormal* f = s ? formal_at(s->inputs, s->n_inputs, i) : NULL;
  return f && !is_fixed(f->tc) ? f->tc : NULL;
}

const char* ox_schema_output_tc(const OxSchema* s, size_t i) {
  const OxFormal* f = s ? formal_at(s->outputs, s->n_outputs, i) : NULL;
  return f && !is_fixed(f->tc) ? f->tc : NULL;
}

/* Whether the schema lists constraint tc (an unlisted one allows anything). */
static const OxTypeConstr* constraint(const OxSchema* s, const char* tc) {
  for (size_t i = 0; tc && i < s->n_constraints; i++)
    if (!strcmp(s->constraints[i].name, tc)) return &s->constraints[i];
  return NULL;
}

uint64_t ox_schema_tc_allowed(const OxSchema* s, const char* tc) {
  if (!s || !tc) return UINT64_MAX;
  if (is_fixed(tc)) { /* "tensor(int64)" */
    char name[32];
    size_t len = strlen(tc) - 8;
    if (len >= sizeof name || tc[strlen(tc) - 1] != ')') return UINT64_MAX;
    memcpy(name, tc + 7, len);
    name[len] = 0;
    OnyxElemType t = ox_onnx_type_from_name(name);
    return t ? OX_T(t) : UINT64_MAX;
  }
  const OxTypeConstr* c = constraint(s, tc);
  return c ? c->allowed : UINT64_MAX;
}

/* --- check_node -------------------------------------------------------------------------- */

static OnyxStatus* check_arity(const OxSchema* s, const OxNode* n, bool inputs) {
  const OxFormal* f = inputs ? s->inputs : s->outputs;
  size_t nf = inputs ? s->n_inputs : s->n_outputs;
  OxValue* const* vals = inputs ? n->inputs : n->outputs;
  /* Implicit inputs (outer-scope values of subgraphs) are not formals. */
  size_t nv = inputs ? n->n_inputs - n->n_implicit : n->n_outputs, min = 0, max = 0;
  const char* what = inputs ? "input" : "output";
  bool unbounded = false;
  for (size_t i = 0; i < nf; i++) {
    bool variadic = f[i].option == ONYX_PARAM_VARIADIC;
    unbounded |= variadic;
    min += variadic ? f[i].min_arity : f[i].option == ONYX_PARAM_SINGLE;
    max += !variadic;
  }
  size_t used = nv; /* trailing absent optionals may be NULL entries */
  while (used && !vals[used - 1])
    used--;
  if (used < min || (!unbounded && used > max)) {
    char want[48];
    if (unbounded)
      snprintf(want, sizeof want, "at least %zu", min);
    else if (min == max)
      snprintf(want, sizeof want, "%zu", min);
    else
      snprintf(want, sizeof want, "%zu to %zu", min, max);
    return ox_node_err(n, "has %zu %ss; %s-%d takes %s", used, what, s->op_type,
                       (int)s->since_version, want);
  }
  for (size_t i = 0; i < used; i++) {
    const OxFormal* fi = formal_at(f, nf, i);
    if (!vals[i] && fi && fi->option != ONYX_PARAM_OPTIONAL)
      return ox_node_err(n, "%s %zu ('%s') is required but empty", what, i, fi->name);
  }
  return NULL;
}

static const OxAttrSpec* attr_spec(const OxSchema* s, const char* name) {
  for (size_t i = 0; i < s->n_attrs; i++)
    if (!strcmp(s->attrs[i].name, name)) return &s->attrs[i];
  return NULL;
}

static OnyxStatus* check_attrs(const OxSchema* s, const OxNode* n) {
  for (size_t i = 0; i < n->n_attrs; i++) {
    const OxAttr* a = &n->attrs[i];
    const OxAttrSpec* sp = attr_spec(s, a->name);
    if (!sp && s->strict_attrs)
      return ox_node_err(n, "unknown attribute '%s' (not in %s-%d)", a->name, s->op_type,
                         (int)s->since_version);
    if (sp && sp->type != a->type)
      return ox_node_err(n, "attribute '%s' must be of type %s, not %s", a->name,
                         attr_type_name(sp->type), attr_type_name(a->type));
  }
  for (size_t i = 0; i < s->n_attrs; i++)
    if (s->attrs[i].required && !ox_node_attr(n, s->attrs[i].name))
      return ox_node_err(n, "required attribute '%s' is missing", s->attrs[i].name);
  return NULL;
}

static OnyxStatus* fill_default(OxAttr* a, const OxAttrSpec* sp) {
  *a = (OxAttr){.type = sp->type, .from_default = true, .name = ox_strdup(sp->name)};
  if (!a->name) return ox_oom();
  switch (sp->type) {
  case ONYX_ATTR_INT:
    a->i = sp->def_i;
    break;
  case ONYX_ATTR_FLOAT:
    a->f = sp->def_f;
    break;
  case ONYX_ATTR_STRING:
    if (!(a->s = ox_strdup(sp->def_s ? sp->def_s : ""))) return ox_oom();
    a->s_len = strlen(a->s);
    break;
  case ONYX_ATTR_INTS:
    a->count = sp->def_ints_count;
    if (a->count && !(a->ints = malloc(a->count * sizeof *a->ints))) return ox_oom();
    if (a->count) memcpy(a->ints, sp->def_ints, a->count * sizeof *a->ints);
    break;
  case ONYX_ATTR_FLOATS:
    a->count = sp->def_floats_count;
    if (a->count && !(a->floats = malloc(a->count * sizeof *a->floats))) return ox_oom();
    if (a->count) memcpy(a->floats, sp->def_floats, a->count * sizeof *a->floats);
    break;
  default:
    break; /* no defaults of other types */
  }
  return NULL;
}

static OnyxStatus* fill_defaults(const OxSchema* s, OxNode* n) {
  for (size_t i = 0; i < s->n_attrs; i++) {
    const OxAttrSpec* sp = &s->attrs[i];
    if (!sp->has_default || ox_node_attr(n, sp->name)) continue;
    if (!ox_grow((void**)&n->attrs, &n->cap_attrs, n->n_attrs + 1, sizeof *n->attrs))
      return ox_oom();
    OnyxStatus* st = fill_default(&n->attrs[n->n_attrs], sp);
    if (st) {
      ox_attr_clear(&n->attrs[n->n_attrs]);
      return st;
    }
    n->n_attrs++;
  }
  return NULL;
}

OnyxStatus* ox_schema_check_node(const OxSchema* s, OxNode* n) {
  if (!s || !n) return ox_status(ONYX_INVALID_ARGUMENT, "ox_schema_check_node: NULL argument");
  OX_TRY(check_arity(s, n, true));
  OX_TRY(check_arity(s, n, false));
  OX_TRY(check_attrs(s, n));
  return fill_defaults(s, n);
}

/* --- Inference ------------------------------------------------------------------------------ */

static bool type_allowed(uint64_t mask, OnyxElemType t) {
  return (unsigned)t < 64 && (mask & OX_T(t));
}

/* Value j of `vals` bound to the same listed constraint as value i with another type. */
static const OxValue* type_clash(const OxSchema* s, OxValue* const* vals, size_t i,
                                 const char* (*tc_of)(const OxSchema*, size_t)) {
  const char* tc = tc_of(s, i);
  if (!tc || !constraint(s, tc)) return NULL;
  for (size_t j = 0; j < i; j++) {
    const char* tj = tc_of(s, j);
    if (vals[j] && vals[j]->type != ONYX_ELEM_UNDEFINED && tj && !strcmp(tj, tc) &&
        vals[j]->type != vals[i]->type)
      return vals[j];
  }
  return NULL;
}

static OnyxStatus* check_input_types(const OxSchema* s, const OxNode* n) {
  for (size_t i = 0; i < n->n_inputs - n->n_implicit; i++) {
    const OxValue* v = n->inputs[i];
    const OxFormal* f = formal_at(s->inputs, s->n_inputs, i);
    /* Sequences and optionals: the host op that runs the node checks them. */
    if (!v || v->type == ONYX_ELEM_UNDEFINED || !f || v->kind != OX_VK_TENSOR) continue;
    if (!type_allowed(ox_schema_tc_allowed(s, f->tc), v->type))
      return ox_node_err(n,
                         "input %zu '%s' has type %s, which '%s' (%s) does "
                         "not allow",
                         i, v->name ? v->name : "", ox_elem_name(v->type), f->name, f->tc);
    const OxValue* other = type_clash(s, n->inputs, i, ox_schema_input_tc);
    if (other)
      return ox_node_err(n,
                         "inputs '%s' (%s) and '%s' (%s) must have one type "
                         "(constraint '%s')",
                         other->name ? other->name : "", ox_elem_name(other->type),
                         v->name ? v->name : "", ox_elem_name(v->type), f->tc);
  }
  return NULL;
}

/* The type of the first input bound to constraint tc, or UNDEFINED. */
static OnyxElemType input_type_of(const OxSchema* s, const OxNode* n, const char* tc) {
  for (size_t i = 0; i < n->n_inputs; i++) {
    const char* itc = ox_schema_input_tc(s, i);
    if (n->inputs[i] && itc && !strcmp(itc, tc)) return n->inputs[i]->type;
  }
  return ONYX_ELEM_UNDEFINED;
}

static OnyxStatus* check_output_types(const OxSchema* s, const OxNode* n) {
  for (size_t i = 0; i < n->n_outputs; i++) {
    const OxValue* v = n->outputs[i];
    const OxFormal* f = formal_at(s->outputs, s->n_outputs, i);
    if (!v || v->type == ONYX_ELEM_UNDEFINED || !f) continue;
    if (!type_allowed(ox_schema_tc_allowed(s, f->tc), v->type))
      return ox_node_err(n,
                         "output %zu '%s' would have type %s, which '%s' (%s) "
                         "does not allow",
                         i, v->name ? v->name : "", ox_elem_name(v->type), f->name, f->tc);
    const char* tc = ox_schema_output_tc(s, i);
    OnyxElemType in = tc && constraint(s, tc) ? input_type_of(s, n, tc) : ONYX_ELEM_UNDEFINED;
    if (in != ONYX_ELEM_UNDEFINED && in != v->type)
      return ox_node_err(n,
                         "output %zu '%s' has type %s but the inputs of "
                         "constraint '%s' are %s",
                         i, v->name ? v->name : "", ox_elem_name(v->type), tc, ox_elem_name(in));
  }
  return NULL;
}

OnyxStatus* ox_schema_infer(const OxSchema* s, OxNode* n) {
  if (!s || !n) return ox_status(ONYX_INVALID_ARGUMENT, "ox_schema_infer: NULL argument");
  if (!n->schema) { /* the inference reads attribute defaults through it */
    n->schema = s;
    n->since_version = s->since_version;
  }
  OX_TRY(check_input_types(s, n));
  OnyxStatus* st;
  if (s->infer) {
    st = s->infer(n);
  } else if (s->abi_infer) {
    OnyxInferenceContext ctx = {.node = n};
    st = s->abi_infer(&ctx, s->abi_user);
    if (st) st = ox_status_wrap(st, "node '%s' (%s): inference", n->name, n->op_type);
  } else {
    st = ox_infer_default(s, n);
  }
  OX_TRY(st);
  return check_output_types(s, n);
}

/* --- Custom registries ------------------------------------------------------------------------ */

OnyxStatus* ox_schema_registry_create(OxSchemaRegistry** out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return ox_oom();
  (*out)->owns = true;
  return NULL;
}

static void schema_free(OxSchema* s) {
  if (!s) return;
  free((char*)s->domain);
  free((char*)s->op_type);
  for (size_t i = 0; s->inputs && i < s->n_inputs; i++) {
    free((char*)s->inputs[i].name);
    free((char*)s->inputs[i].tc);
  }
  for (size_t i = 0; s->outputs && i < s->n_outputs; i++) {
    free((char*)s->outputs[i].name);
    free((char*)s->outputs[i].tc);
  }
  for (size_t i = 0; s->constraints && i < s->n_constraints; i++)
    free((char*)s->constraints[i].name);
  for (size_t i = 0; s->attrs && i < s->n_attrs; i++) {
    free((char*)s->attrs[i].name);
    free((char*)s->attrs[i].def_s);
  }
  free((void*)s->inputs);
  free((void*)s->outputs);
  free((void*)s->constraints);
  free((void*)s->attrs);
  free(s);
}

void ox_schema_registry_free(OxSchemaRegistry* r) {
  if (!r || !r->owns) return; /* the built-in registry is static */
  for (size_t i = 0; i < r->count; i++)
    schema_free((OxSchema*)r->sorted[i]);
  free(r->sorted);
  free(r);
}

#define BAD_DEF(...) ox_status(ONYX_INVALID_ARGUMENT, __VA_ARGS__)

static OnyxStatus* check_formals(const OnyxSchemaDef* d, const OnyxFormalParam* f, size_t n,
                                 const char* what) {
  if (n > UINT8_MAX)
    return BAD_DEF("schema %s::%s: too many %ss (%zu)", d->domain, d->op_type, what, n);
  if (n && !f) return BAD_DEF("schema %s::%s: %s list is NULL", d->domain, d->op_type, what);
  for (size_t i = 0; i < n; i++) {
    if (!f[i].name || !f[i].type_constraint)
      return BAD_DEF("schema %s::%s: %s %zu has no name or type constraint", d->domain, d->op_type,
                     what, i);
    if (f[i].option < ONYX_PARAM_SINGLE || f[i].option > ONYX_PARAM_VARIADIC)
      return BAD_DEF("schema %s::%s: %s '%s' has option %d", d->domain, d->op_type, what, f[i].name,
                     (int)f[i].option);
    if (f[i].option == ONYX_PARAM_VARIADIC && i + 1 != n)
      return BAD_DEF("schema %s::%s: variadic %s '%s' is not the last one", d->domain, d->op_type,
                     what, f[i].name);
  }
  return NULL;
}

static OnyxStatus* check_def(const OnyxSchemaDef* d) {
  if (!d) return BAD_DEF("schema definition is NULL");
  if (d->struct_size < sizeof(OnyxSchemaDef))
    return BAD_DEF("schema definition struct_size %zu is smaller than %zu (ABI 1.0)",
                   d->struct_size, sizeof(OnyxSchemaDef));
  if (!d->domain || !d->op_type || !*d->op_type)
    return BAD_DEF("schema definition without domain or op_type");
  if (ox_domain_is_onnx(d->domain))
    return BAD_DEF("schema '%s': domain '%s' belongs to ONNX; use a domain of your own", d->op_type,
                   d->domain);
  if (d->since_version < 1)
    return BAD_DEF("schema %s::%s: since_version %d < 1", d->domain, d->op_type,
                   (int)d->since_version);
  OX_TRY(check_formals(d, d->inputs, d->input_count, "input"));
  OX_TRY(check_formals(d, d->outputs, d->output_count, "output"));
  if (d->type_constraint_count > UINT8_MAX || d->attr_count > UINT8_MAX ||
      (d->type_constraint_count && !d->type_constraints) || (d->attr_count && !d->attrs))
    return BAD_DEF("schema %s::%s: bad type constraint or attribute list", d->domain, d->op_type);
  for (size_t i = 0; i < d->type_constraint_count; i++) {
    const OnyxTypeConstraint* c = &d->type_constraints[i];
    if (!c->name || (c->type_count && !c->types))
      return BAD_DEF("schema %s::%s: type constraint %zu is malformed", d->domain, d->op_type, i);
    for (size_t k = 0; k < c->type_count; k++)
      if (c->types[k] <= ONYX_ELEM_UNDEFINED || c->types[k] >= ONYX_ELEM_TYPE_COUNT)
        return BAD_DEF("schema %s::%s: constraint '%s' lists element type %d", d->domain,
                       d->op_type, c->name, (int)c->types[k]);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(d->type_constraints[k].name, c->name))
        return BAD_DEF("schema %s::%s: constraint '%s' is listed twice", d->domain, d->op_type,
                       c->name);
  }
  for (size_t i = 0; i < d->attr_count; i++) {
    const OnyxAttrDef* a = &d->attrs[i];
    if (!a->name || a->type <= ONYX_ATTR_UNDEFINED || a->type > ONYX_ATTR_TYPE_PROTOS)
      return BAD_DEF("schema %s::%s: attribute %zu is malformed", d->domain, d->op_type, i);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(d->attrs[k].name, a->name))
        return BAD_DEF("schema %s::%s: attribute '%s' is listed twice", d->domain, d->op_type,
                       a->name);
  }
  return NULL;
}

static OxFormal* copy_formals(const OnyxFormalParam* f, size_t n, bool* oom) {
  if (!n) return NULL;
  OxFormal* out = calloc(n, sizeof *out);
  if (!out) return *oom = true, NULL;
  for (size_t i = 0; i < n; i++) {
    out[i] =
        (OxFormal){ox_strdup(f[i].name), ox_strdup(f[i].type_constraint), (uint8_t)f[i].option, 1};
    *oom |= !out[i].name || !out[i].tc;
  }
  return out;
}

/* Deep copy of a checked definition; NULL on OOM. */
static OxSchema* copy_def(const OnyxSchemaDef* d) {
  OxSchema* s = calloc(1, sizeof *s);
  if (!s) return NULL;
  bool oom = false;
  s->domain = ox_strdup(d->domain);
  s->op_type = ox_strdup(d->op_type);
  s->since_version = d->since_version;
  s->n_inputs = (uint8_t)d->input_count;
  s->n_outputs = (uint8_t)d->output_count;
  s->inputs = copy_formals(d->inputs, d->input_count, &oom);
  s->outputs = copy_formals(d->outputs, d->output_count, &oom);
  OxTypeConstr* tc = d->type_constraint_count ? calloc(d->type_constraint_count, sizeof *tc) : NULL;
  s->constraints = tc;
  s->n_constraints = tc ? (uint8_t)d->type_constraint_count : 0;
  oom |= d->type_constraint_count && !tc;
  for (size_t i = 0; tc && i < d->type_constraint_count; i++) {
    const OnyxTypeConstraint* c = &d->type_constraints[i];
    tc[i].name = ox_strdup(c->name);
    tc[i].allowed = c->type_count ? 0 : UINT64_MAX; /* no types listed: any */
    for (size_t k = 0; k < c->type_count; k++)
      tc[i].allowed |= OX_T(c->types[k]);
    oom |= !tc[i].name;
  }
  OxAttrSpec* at = d->attr_count ? calloc(d->attr_count, sizeof *at) : NULL;
  s->attrs = at;
  s->n_attrs = at ? (uint8_t)d->attr_count : 0;
  oom |= d->attr_count && !at;
  for (size_t i = 0; at && i < d->attr_count; i++) {
    const OnyxAttrDef* a = &d->attrs[i];
    at[i] = (OxAttrSpec){.name = ox_strdup(a->name),
                         .type = (OnyxAttrType)a->type,
                         .required = a->required != 0,
                         .has_default = a->has_default != 0,
                         .def_i = a->default_int,
                         .def_f = a->default_float};
    oom |= !at[i].name;
    if (a->has_default && a->type == ONYX_ATTR_STRING) {
      at[i].def_s = ox_strdup(a->default_string ? a->default_string : "");
      oom |= !at[i].def_s;
    }
  }
  s->abi_infer = d->infer;
  s->abi_user = d->user_data;
  s->strict_attrs = false; /* custom ops may carry attributes their schema omits */
  if (oom || !s->domain || !s->op_type) {
    schema_free(s);
    return NULL;
  }
  return s;
}

OnyxStatus* ox_schema_registry_add(OxSchemaRegistry* r, const OnyxSchemaDef* def) {
  if (!r || !r->owns) return BAD_DEF("schemas cannot be added to the built-in registry");
  OX_TRY(check_def(def));
  size_t at = lower_bound(r, def->domain, def->op_type, def->since_version);
  if (at < r->count && !cmp_key(r->sorted[at], def->domain, def->op_type, def->since_version))
    return BAD_DEF("schema %s::%s version %d is already registered", def->domain, def->op_type,
                   (int)def->since_version);
  if (!ox_grow((void**)&r->sorted, &r->cap, r->count + 1, sizeof *r->sorted)) return ox_oom();
  OxSchema* s = copy_def(def);
  if (!s) return ox_oom();
  memmove(&r->sorted[at + 1], &r->sorted[at], (r->count - at) * sizeof *r->sorted);
  r->sorted[at] = s;
  r->count++;
  return NULL;
}
