/* kreg.c — a provider's kernel registry.
 *
 * Kernels are deep copies of the provider's OnyxKernelDef, indexed by op name
 * (OxMap) so that matching a node looks only at the kernels of its op. Each
 * kernel's type constraints are kept as OX_T masks, which makes the overlap
 * check and the type match a handful of AND operations. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_kreg.h"

/* The kernels of one op name, in registration order (all domains: an op name
 * rarely lives in more than one). */
typedef struct OpBucket {
  char* op; /* the map's key */
  OxKernel** items;
  size_t n, cap;
} OpBucket;

struct OnyxKernelRegistry {
  char* provider;
  OxKernel** kernels; /* registration order, for ox_kreg_at */
  size_t n_kernels, cap_kernels;
  OpBucket** buckets; /* owned; the map below borrows them */
  size_t n_buckets, cap_buckets;
  OxMap by_op; /* op_type -> OpBucket* */
};

/* --- Small text helpers ---------------------------------------------------------- */

/* A bounded text buffer: appends silently truncate. */
typedef struct Buf {
  char* p;
  size_t cap, len;
} Buf;

static void OX_PRINTF(2, 3) buf_addf(Buf* b, const char* fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  size_t room = b->cap - b->len - 1;
  b->len += (size_t)k < room ? (size_t)k : room;
}

static const char* norm_domain(const char* d) {
  return (!d || strcmp(d, "ai.onnx") == 0) ? "" : d;
}

static const char* shown_domain(const char* d) {
  return (d && *d) ? d : "ai.onnx";
}

static const char* type_name(int64_t t) {
  return (t >= 0 && t < ONYX_ELEM_TYPE_COUNT) ? ox_elem_name((OnyxElemType)t) : "unknown";
}

static void add_range(Buf* b, int32_t since, int32_t end) {
  if (end == ONYX_OPSET_LATEST)
    buf_addf(b, "[%d, latest]", since);
  else
    buf_addf(b, "[%d, %d]", since, end);
}

/* "float32, int64" */
static void add_types(Buf* b, uint64_t mask) {
  const char* sep = "";
  for (int t = 0; t < 64; t++) {
    if (!(mask & OX_T(t))) continue;
    buf_addf(b, "%s%s", sep, type_name(t));
    sep = ", ";
  }
  if (!*sep) buf_addf(b, "no type");
}

/* --- Kernel copies -------------------------------------------------------------- */

/* Every field of OnyxKernelDef after struct_size. A provider built against an
 * older header sends a shorter struct; fields it does not cover read as 0. */
#define KDEF_FIELD(f)                                                                              \
  { offsetof(OnyxKernelDef, f), sizeof(((OnyxKernelDef*)0)->f) }
static const struct {
  size_t off, size;
} kDefFields[] = {
    KDEF_FIELD(domain),           KDEF_FIELD(op_type),
    KDEF_FIELD(since_version),    KDEF_FIELD(end_version),
    KDEF_FIELD(type_constraints), KDEF_FIELD(type_constraint_count),
    KDEF_FIELD(input_mem_types),  KDEF_FIELD(input_mem_type_count),
    KDEF_FIELD(output_mem_types), KDEF_FIELD(output_mem_type_count),
    KDEF_FIELD(aliases),          KDEF_FIELD(alias_count),
    KDEF_FIELD(create),           KDEF_FIELD(compute),
    KDEF_FIELD(release),          KDEF_FIELD(user_data),
};

static void read_def(const OnyxKernelDef* def, OnyxKernelDef* in) {
  size_t n = def->struct_size < sizeof *in ? def->struct_size : sizeof *in;
  memset(in, 0, sizeof *in);
  memcpy(in, def, n);
  for (size_t i = 0; i < OX_ARRAY_LEN(kDefFields); i++)
    if (kDefFields[i].off + kDefFields[i].size > n)
      memset((char*)in + kDefFields[i].off, 0, kDefFields[i].size);
  in->struct_size = sizeof *in;
}

static void kernel_free(OxKernel* k) {
  if (!k) return;
  OnyxKernelDef* d = &k->def;
  free((void*)d->domain);
  free((void*)d->op_type);
  if (d->type_constraints) {
    for (size_t i = 0; i < d->type_constraint_count; i++) {
      free((void*)d->type_constraints[i].name);
      free((void*)d->type_constraints[i].types);
    }
  }
  free((void*)d->type_constraints);
  free((void*)d->input_mem_types);
  free((void*)d->output_mem_types);
  free((void*)d->aliases);
  free(k->allowed);
  free(k);
}

/* malloc+memcpy of count elements; NULL for a NULL source or count 0. Clears
 * *ok on OOM (never sets it), so a series of copies is checked once. */
static void* dup_array(const void* src, size_t count, size_t elem, bool* ok) {
  size_t bytes;
  if (!src || count == 0) return NULL;
  void* p = ox_mul_ok(count, elem, &bytes) ? malloc(bytes) : NULL;
  if (!p) {
    *ok = false;
    return NULL;
  }
  memcpy(p, src, bytes);
  return p;
}

static bool copy_constraints(const OnyxKernelDef* in, OxKernel* k) {
  size_t n = in->type_constraint_count;
  if (n == 0) return true;
  OnyxTypeConstraint* tcs = calloc(n, sizeof *tcs);
  k->def.type_constraints = tcs;
  k->allowed = calloc(n, sizeof *k->allowed);
  if (!tcs || !k->allowed) return false;
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    const OnyxTypeConstraint* src = &in->type_constraints[i];
    k->def.type_constraint_count = i + 1; /* so kernel_free sees what is filled */
    tcs[i].name = ox_strdup(src->name);
    tcs[i].type_count = src->type_count;
    tcs[i].types = dup_array(src->types, src->type_count, sizeof(int32_t), &ok);
    ok = ok && tcs[i].name;
    for (size_t j = 0; j < src->type_count; j++)
      k->allowed[i] |= OX_T(src->types[j]);
  }
  return ok;
}

/* Deep copy of a validated definition; NULL on OOM. */
static OxKernel* kernel_copy(const OnyxKernelDef* in) {
  OxKernel* k = calloc(1, sizeof *k);
  if (!k) return NULL;
  OnyxKernelDef* d = &k->def;
  *d = *in;
  d->type_constraints = NULL;
  d->type_constraint_count = 0;
  bool ok = true;
  d->domain = ox_strdup(norm_domain(in->domain));
  d->op_type = ox_strdup(in->op_type);
  d->input_mem_types =
      dup_array(in->input_mem_types, in->input_mem_type_count, sizeof(int32_t), &ok);
  d->output_mem_types =
      dup_array(in->output_mem_types, in->output_mem_type_count, sizeof(int32_t), &ok);
  d->aliases = dup_array(in->aliases, in->alias_count, sizeof(OnyxAlias), &ok);
  if (!ok || !d->domain || !d->op_type || !copy_constraints(in, k)) {
    kernel_free(k);
    return NULL;
  }
  return k;
}

/* --- Validation ----------------------------------------------------------------- */

/* Writes what is wrong with one type constraint into b; true if it is fine. */
static bool constraint_ok(const OnyxKernelDef* in, size_t i, Buf* b) {
  const OnyxTypeConstraint* tc = &in->type_constraints[i];
  if (!tc->name || !*tc->name) {
    buf_addf(b, "type constraint %zu has no name", i);
    return false;
  }
  if (tc->type_count == 0 || !tc->types) {
    buf_addf(b, "type constraint '%s' lists no types", tc->name);
    return false;
  }
  for (size_t j = 0; j < tc->type_count; j++) {
    if (tc->types[j] <= ONYX_ELEM_UNDEFINED || tc->types[j] >= ONYX_ELEM_TYPE_COUNT) {
      buf_addf(b, "type constraint '%s' has invalid element type %d", tc->name, tc->types[j]);
      return false;
    }
  }
  for (size_t j = 0; j < i; j++) {
    if (strcmp(in->type_constraints[j].name, tc->name) == 0) {
      buf_addf(b, "type constraint '%s' is listed twice", tc->name);
      return false;
    }
  }
  return true;
}

static bool mem_types_ok(const char* what, const int32_t* m, size_t n, Buf* b) {
  if (n && !m) {
    buf_addf(b, "%s_mem_type_count is %zu but the array is NULL", what, n);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (m[i] < ONYX_MEM_DEFAULT || m[i] > ONYX_MEM_READ_ONLY) {
      buf_addf(b, "%s %zu has invalid memory type %d", what, i, m[i]);
      return false;
    }
  }
  return true;
}

static bool aliases_ok(const OnyxKernelDef* in, Buf* b) {
  if (in->alias_count && !in->aliases) {
    buf_addf(b, "alias_count is %zu but aliases is NULL", in->alias_count);
    return false;
  }
  for (size_t i = 0; i < in->alias_count; i++) {
    const OnyxAlias* a = &in->aliases[i];
    if (a->output < 0 || a->input < 0 ||
        (a->kind != ONYX_ALIAS_INPLACE && a->kind != ONYX_ALIAS_VIEW)) {
      buf_addf(b, "alias %zu (output %d, input %d, kind %d) is invalid", i, a->output, a->input,
               a->kind);
      return false;
    }
  }
  return true;
}

/* Checks the arrays of a definition whose op and range are already valid. */
static bool arrays_ok(const OnyxKernelDef* in, Buf* b) {
  if (in->type_constraint_count && !in->type_constraints) {
    buf_addf(b, "type_constraint_count is %zu but type_constraints is NULL",
             in->type_constraint_count);
    return false;
  }
  for (size_t i = 0; i < in->type_constraint_count; i++)
    if (!constraint_ok(in, i, b)) return false;
  return mem_types_ok("input", in->input_mem_types, in->input_mem_type_count, b) &&
         mem_types_ok("output", in->output_mem_types, in->output_mem_type_count, b) &&
         aliases_ok(in, b);
}

/* NULL, or the refusal of a definition on its own (before any overlap). */
static OnyxStatus* validate(const OxKernelRegistry* r, const OnyxKernelDef* in) {
  const char* dom = shown_domain(norm_domain(in->domain));
  if (!in->op_type || !*in->op_type)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider '%s': kernel definition in domain '%s' has no op_type "
                     "(struct_size %zu)",
                     r->provider, dom, in->struct_size);
  char text[512];
  Buf b = {text, sizeof text, 0};
  text[0] = '\0';
  if (!in->compute) {
    buf_addf(&b, "has no compute function");
  } else if (in->since_version < 1) {
    buf_addf(&b, "has since_version %d; opset versions start at 1", in->since_version);
  } else if (in->since_version > in->end_version) {
    buf_addf(&b, "has since_version %d > end_version %d", in->since_version, in->end_version);
  } else if (arrays_ok(in, &b)) {
    return NULL;
  }
  return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': kernel %s(%s) opsets [%d, %d] %s",
                   r->provider, in->op_type, dom, in->since_version, in->end_version, text);
}

static int find_constraint(const OxKernel* k, const char* name) {
  for (size_t i = 0; i < k->def.type_constraint_count; i++)
    if (strcmp(k->def.type_constraints[i].name, name) == 0) return (int)i;
  return -1;
}

/* Two kernels of one op with intersecting ranges can coexist only when some
 * constraint both list has disjoint type sets: then no node matches both. */
static bool types_disjoint(const OxKernel* a, const OxKernel* b) {
  for (size_t i = 0; i < a->def.type_constraint_count; i++) {
    int j = find_constraint(b, a->def.type_constraints[i].name);
    if (j >= 0 && (a->allowed[i] & b->allowed[j]) == 0) return true;
  }
  return false;
}

static OnyxStatus* overlap_error(const OxKernelRegistry* r, const OxKernel* k,
                                 const OxKernel* old) {
  char text[768];
  Buf b = {text, sizeof text, 0};
  buf_addf(&b, "provider '%s': kernel %s(%s) opsets ", r->provider, k->def.op_type,
           shown_domain(k->def.domain));
  add_range(&b, k->def.since_version, k->def.end_version);
  buf_addf(&b, " overlaps the kernel registered for opsets ");
  add_range(&b, old->def.since_version, old->def.end_version);
  const char* sep = " and both accept ";
  for (size_t i = 0; i < k->def.type_constraint_count; i++) {
    int j = find_constraint(old, k->def.type_constraints[i].name);
    if (j < 0) continue;
    buf_addf(&b, "%s%s={", sep, k->def.type_constraints[i].name);
    add_types(&b, k->allowed[i] & old->allowed[j]);
    buf_addf(&b, "}");
    sep = ", ";
  }
  if (*sep == ' ') buf_addf(&b, " and they share no type constraint that tells them apart");
  return ox_status(ONYX_INVALID_ARGUMENT, "%s", text);
}

static bool ranges_meet(const OxKernel* a, const OxKernel* b) {
  return a->def.since_version <= b->def.end_version && b->def.since_version <= a->def.end_version;
}

/* --- The registry --------------------------------------------------------------- */

OnyxStatus* ox_kreg_create(const char* provider_name, OxKernelRegistry** out) {
  *out = NULL;
  OxKernelRegistry* r = calloc(1, sizeof *r);
  if (!r) return ox_oom();
  r->provider = ox_strdup(provider_name ? provider_name : "?");
  if (!r->provider) {
    free(r);
    return ox_oom();
  }
  *out = r;
  return NULL;
}

void ox_kreg_free(OxKernelRegistry* r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_kernels; i++)
    kernel_free(r->kernels[i]);
  for (size_t i = 0; i < r->n_buckets; i++) {
    free(r->buckets[i]->op);
    free(r->buckets[i]->items);
    free(r->buckets[i]);
  }
  free(r->kernels);
  free(r->buckets);
  ox_map_free(&r->by_op);
  free(r->provider);
  free(r);
}

/* The bucket for k's op, created (and indexed) if new; NULL on OOM. */
static OpBucket* bucket_for(OxKernelRegistry* r, const OxKernel* k) {
  OpBucket* b = ox_map_get(&r->by_op, k->def.op_type);
  if (b) return b;
  if (!ox_grow((void**)&r->buckets, &r->cap_buckets, r->n_buckets + 1, sizeof *r->buckets))
    return NULL;
  b = calloc(1, sizeof *b);
  if (b) b->op = ox_strdup(k->def.op_type);
  if (!b || !b->op || !ox_map_put(&r->by_op, b->op, b)) {
    if (b) free(b->op);
    free(b);
    return NULL;
  }
  r->buckets[r->n_buckets++] = b;
  return b;
}

/* Appends k to the registry; on failure nothing refers to k. */
static bool insert(OxKernelRegistry* r, OxKernel* k) {
  if (!ox_grow((void**)&r->kernels, &r->cap_kernels, r->n_kernels + 1, sizeof *r->kernels))
    return false;
  OpBucket* b = bucket_for(r, k);
  if (!b || !ox_grow((void**)&b->items, &b->cap, b->n + 1, sizeof *b->items)) return false;
  b->items[b->n++] = k;
  r->kernels[r->n_kernels++] = k;
  return true;
}

OnyxStatus* ox_kreg_add(OxKernelRegistry* r, const OnyxKernelDef* def) {
  if (!def)
    return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': register_kernel got a NULL definition",
                     r->provider);
  OnyxKernelDef in;
  read_def(def, &in);
  OX_TRY(validate(r, &in));
  OxKernel* k = kernel_copy(&in);
  if (!k) return ox_oom();
  OpBucket* b = ox_map_get(&r->by_op, k->def.op_type);
  for (size_t i = 0; b && i < b->n; i++) {
    const OxKernel* old = b->items[i];
    if (strcmp(old->def.domain, k->def.domain) != 0) continue;
    if (ranges_meet(old, k) && !types_disjoint(old, k)) {
      OnyxStatus* st = overlap_error(r, k, old);
      kernel_free(k);
      return st;
    }
  }
  if (!insert(r, k)) {
    kernel_free(k);
    return ox_oom();
  }
  return NULL;
}

size_t ox_kreg_count(const OxKernelRegistry* r) {
  return r ? r->n_kernels : 0;
}

const OxKernel* ox_kreg_at(const OxKernelRegistry* r, size_t i) {
  return (r && i < r->n_kernels) ? r->kernels[i] : NULL;
}

/* --- Matching ------------------------------------------------------------------- */

static _Thread_local char tl_reason[1024];

/* The first binding a kernel refuses: constraint index and the bound type. */
typedef struct Violation {
  int ci;
  int64_t type;
} Violation;

static bool binding_ok(const OxKernel* k, const char* tc, const OxValue* v, Violation* out) {
  if (!tc || !v) return true;
  int ci = find_constraint(k, tc);
  if (ci < 0) return true;
  int64_t t = v->type;
  if (t >= 0 && t < 64 && (k->allowed[ci] & OX_T(t))) return true;
  out->ci = ci;
  out->type = t;
  return false;
}

static bool kernel_accepts(const OxKernel* k, const OxNode* n, Violation* out) {
  for (size_t i = 0; i < n->n_inputs; i++)
    if (!binding_ok(k, ox_schema_input_tc(n->schema, i), n->inputs[i], out)) return false;
  for (size_t i = 0; i < n->n_outputs; i++)
    if (!binding_ok(k, ox_schema_output_tc(n->schema, i), n->outputs[i], out)) return false;
  return true;
}

static bool in_range(const OxKernel* k, int32_t v) {
  return k->def.since_version <= v && v <= k->def.end_version;
}

/* "no kernel for Conv(ai.onnx) at opset 11 (kernels cover opsets [1, 10], [13, latest])" */
static void why_opset(Buf* b, const OpBucket* bk, const OxNode* n, const char* dom) {
  buf_addf(b, "no kernel for %s(%s) at opset %d (kernels cover opsets ", n->op_type,
           shown_domain(dom), n->since_version);
  const char* sep = "";
  for (size_t i = 0; i < bk->n; i++) {
    if (strcmp(bk->items[i]->def.domain, dom) != 0) continue;
    buf_addf(b, "%s", sep);
    add_range(b, bk->items[i]->def.since_version, bk->items[i]->def.end_version);
    sep = ", ";
  }
  buf_addf(b, ")");
}

/* Explains type refusals: one constraint refused by every kernel reads as
 * "type T=int8 not supported (kernel takes float32, int64)"; otherwise each
 * kernel's refusal is listed. */
static void why_types(Buf* b, const OxNode* n, const OxKernel* const* ks, const Violation* vs,
                      size_t count) {
  buf_addf(b, "%s(%s) v%d: ", n->op_type, shown_domain(norm_domain(n->domain)), n->since_version);
  const char* name0 = ks[0]->def.type_constraints[vs[0].ci].name;
  uint64_t allowed = 0;
  bool same = true;
  for (size_t i = 0; i < count; i++) {
    same = same && strcmp(ks[i]->def.type_constraints[vs[i].ci].name, name0) == 0 &&
           vs[i].type == vs[0].type;
    allowed |= ks[i]->allowed[vs[i].ci];
  }
  if (same) {
    buf_addf(b, "type %s=%s not supported (%s ", name0, type_name(vs[0].type),
             count > 1 ? "kernels take" : "kernel takes");
    add_types(b, allowed);
    buf_addf(b, ")");
    return;
  }
  buf_addf(b, "no kernel takes the node's types:");
  for (size_t i = 0; i < count; i++) {
    buf_addf(b, "%s kernel for opsets ", i ? ";" : "");
    add_range(b, ks[i]->def.since_version, ks[i]->def.end_version);
    buf_addf(b, " refuses %s=%s (takes ", ks[i]->def.type_constraints[vs[i].ci].name,
             type_name(vs[i].type));
    add_types(b, ks[i]->allowed[vs[i].ci]);
    buf_addf(b, ")");
  }
}

/* Up to this many refusing kernels are described; more only repeat. */
#define MAX_EXPLAINED 8

const OxKernel* ox_kreg_match(const OxKernelRegistry* r, const OxNode* node, const char** why) {
  Buf b = {tl_reason, sizeof tl_reason, 0};
  tl_reason[0] = '\0';
  if (why) *why = tl_reason;
  if (!r || !node || !node->op_type) {
    buf_addf(&b, "no node or registry to match");
    return NULL;
  }
  const char* dom = norm_domain(node->domain);
  const OpBucket* bk = ox_map_get(&r->by_op, node->op_type);
  const OxKernel* refused[MAX_EXPLAINED];
  Violation vs[MAX_EXPLAINED];
  size_t n_same_op = 0, n_refused = 0;
  for (size_t i = 0; bk && i < bk->n; i++) {
    const OxKernel* k = bk->items[i];
    if (strcmp(k->def.domain, dom) != 0) continue;
    n_same_op++;
    if (!in_range(k, node->since_version)) continue;
    if (!node->schema) {
      buf_addf(&b, "node '%s' (%s) has no resolved schema to bind its types", node->name,
               node->op_type);
      return NULL;
    }
    Violation v;
    if (kernel_accepts(k, node, &v)) return k;
    if (n_refused < MAX_EXPLAINED) {
      refused[n_refused] = k;
      vs[n_refused++] = v;
    }
  }
  if (n_same_op == 0)
    buf_addf(&b, "no kernel for %s(%s)", node->op_type, shown_domain(dom));
  else if (n_refused == 0)
    why_opset(&b, bk, node, dom);
  else
    why_types(&b, node, refused, vs, n_refused);
  return NULL;
}

static OnyxMemType mem_at(const int32_t* m, size_t count, size_t i) {
  return i < count ? (OnyxMemType)m[i] : ONYX_MEM_DEFAULT;
}

OnyxMemType ox_kernel_input_mem(const OxKernel* k, size_t i) {
  return mem_at(k->def.input_mem_types, k->def.input_mem_type_count, i);
}

OnyxMemType ox_kernel_output_mem(const OxKernel* k, size_t i) {
  return mem_at(k->def.output_mem_types, k->def.output_mem_type_count, i);
}
