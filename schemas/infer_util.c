/* infer_util.c — helpers of the built-in inference functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_util.h"

OnyxStatus* ox_node_err(const OxNode* n, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ox_status(ONYX_INVALID_MODEL, "node '%s' (%s): %s", n->name ? n->name : "?",
                   n->op_type ? n->op_type : "?", msg);
}

const OxValue* ox_in(const OxNode* n, size_t i) {
  return i < n->n_inputs ? n->inputs[i] : NULL;
}

OnyxElemType ox_in_type(const OxNode* n, size_t i) {
  const OxValue* v = ox_in(n, i);
  return v ? v->type : ONYX_ELEM_UNDEFINED;
}

void ox_in_dims(const OxNode* n, size_t i, OxDims* out) {
  const OxValue* v = ox_in(n, i);
  out->rank = -1;
  if (!v || v->rank < 0 || v->rank > OX_INFER_MAX_RANK || (v->rank > 0 && !v->dims)) return;
  out->rank = v->rank;
  for (int32_t k = 0; k < v->rank; k++)
    out->d[k] = v->dims[k] < 0 ? ONYX_DIM_UNKNOWN : v->dims[k];
}

OnyxStatus* ox_out_set(OxNode* n, size_t i, OnyxElemType t, const OxDims* d) {
  if (i >= n->n_outputs || !n->outputs[i]) return NULL;
  if (!d || d->rank < 0) return ox_value_set(n->outputs[i], t, -1, NULL);
  /* Every inference function checks its arithmetic; a negative extent other
   * than "unknown" reaching here is still refused, naming the node. */
  for (int32_t k = 0; k < d->rank; k++)
    if (d->d[k] < 0 && d->d[k] != ONYX_DIM_UNKNOWN)
      return ox_node_err(n, "output %zu would have dimension %d of %lld", i, (int)k,
                         (long long)d->d[k]);
  return ox_value_set(n->outputs[i], t, d->rank, d->d);
}

OnyxStatus* ox_out_like_input(OxNode* n, size_t out, size_t in) {
  OxDims d;
  ox_in_dims(n, in, &d);
  return ox_out_set(n, out, ox_in_type(n, in), &d);
}

/* --- Attributes ------------------------------------------------------------------ */

/* The schema's spec of an attribute, for its default. */
static const OxAttrSpec* spec_of(const OxNode* n, const char* name) {
  const OxSchema* s = n->schema;
  for (size_t i = 0; s && i < s->n_attrs; i++)
    if (!strcmp(s->attrs[i].name, name)) return &s->attrs[i];
  return NULL;
}

bool ox_attr_present(const OxNode* n, const char* name) {
  return ox_node_attr(n, name) != NULL;
}

int64_t ox_attr_i(const OxNode* n, const char* name, int64_t fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  if (a && a->type == ONYX_ATTR_INT) return a->i;
  const OxAttrSpec* sp = spec_of(n, name);
  return sp && sp->has_default && sp->type == ONYX_ATTR_INT ? sp->def_i : fallback;
}

float ox_attr_f(const OxNode* n, const char* name, float fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  if (a && a->type == ONYX_ATTR_FLOAT) return a->f;
  const OxAttrSpec* sp = spec_of(n, name);
  return sp && sp->has_default && sp->type == ONYX_ATTR_FLOAT ? sp->def_f : fallback;
}

const char* ox_attr_s(const OxNode* n, const char* name, const char* fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  if (a && a->type == ONYX_ATTR_STRING) return a->s ? a->s : "";
  const OxAttrSpec* sp = spec_of(n, name);
  return sp && sp->has_default && sp->def_s ? sp->def_s : fallback;
}

const int64_t* ox_attr_ints(const OxNode* n, const char* name, size_t* count) {
  const OxAttr* a = ox_node_attr(n, name);
  if (a && a->type == ONYX_ATTR_INTS) {
    *count = a->count;
    return a->ints;
  }
  const OxAttrSpec* sp = spec_of(n, name);
  if (sp && sp->has_default && sp->def_ints) {
    *count = sp->def_ints_count;
    return sp->def_ints;
  }
  *count = 0;
  return NULL;
}

/* --- Constant inputs ------------------------------------------------------------- */

/* The tensor behind a value when it is known at load time. */
static const OxTensor* const_tensor(const OxValue* v) {
  if (v->constant) return v->constant;
  const OxNode* p = v->producer;
  if (p && p->op_type && !strcmp(p->op_type, "Constant") && ox_domain_is_onnx(p->domain)) {
    const OxAttr* a = ox_node_attr(p, "value");
    if (a && a->type == ONYX_ATTR_TENSOR) return a->t;
  }
  return NULL;
}

const OxTensor* ox_const_tensor(const OxNode* n, size_t i) {
  const OxValue* v = ox_in(n, i);
  const OxTensor* t = v ? const_tensor(v) : NULL;
  if (!t || t->device.kind != ONYX_DEVICE_CPU || (t->count && !t->data)) return NULL;
  return t;
}

static OnyxStatus* copy_ints(const int64_t* src, size_t count, int64_t** out) {
  *out = NULL;
  if (!count) return NULL;
  size_t bytes;
  if (!ox_mul_ok(count, sizeof **out, &bytes) || !(*out = malloc(bytes))) return ox_oom();
  memcpy(*out, src, bytes);
  return NULL;
}

/* A Constant producer's value_int / value_ints. */
static OnyxStatus* const_attr_ints(const OxValue* v, int64_t** out, size_t* count, bool* known) {
  const OxNode* p = v->producer;
  if (!p || !p->op_type || strcmp(p->op_type, "Constant") || !ox_domain_is_onnx(p->domain))
    return NULL;
  const OxAttr* a = ox_node_attr(p, "value_ints");
  if (a && a->type == ONYX_ATTR_INTS) {
    *known = true;
    *count = a->count;
    return copy_ints(a->ints, a->count, out);
  }
  a = ox_node_attr(p, "value_int");
  if (a && a->type == ONYX_ATTR_INT) {
    *known = true;
    *count = 1;
    return copy_ints(&a->i, 1, out);
  }
  return NULL;
}

OnyxStatus* ox_const_ints(const OxNode* n, size_t i, int64_t** out, size_t* count, bool* known) {
  *out = NULL;
  *count = 0;
  *known = false;
  const OxValue* v = ox_in(n, i);
  if (!v) return NULL;
  const OxTensor* t = const_tensor(v);
  if (!t) return const_attr_ints(v, out, count, known);
  bool host = t->device.kind == ONYX_DEVICE_CPU;
  if (!host || (t->count && !t->data)) return NULL;
  if (t->type != ONYX_ELEM_INT64 && t->type != ONYX_ELEM_INT32)
    return ox_node_err(n, "input %zu '%s' must hold int32 or int64 values, not %s", i, v->name,
                       ox_elem_name(t->type));
  if (t->count) {
    size_t bytes;
    if (!ox_mul_ok(t->count, sizeof **out, &bytes) || !(*out = malloc(bytes))) return ox_oom();
    for (size_t k = 0; k < t->count; k++)
      (*out)[k] =
          t->type == ONYX_ELEM_INT64 ? ((const int64_t*)t->data)[k] : ((const int32_t*)t->data)[k];
  }
  *count = t->count;
  *known = true;
  return NULL;
}

int64_t ox_in_len(const OxNode* n, size_t i) {
  const OxValue* v = ox_in(n, i);
  if (!v || v->rank != 1 || !v->dims) return -1;
  return v->dims[0] < 0 ? -1 : v->dims[0];
}

bool ox_norm_axis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

/* --- Broadcasting ----------------------------------------------------------------- */

/* One dimension of a multidirectional broadcast; -2 when incompatible. */
static int64_t bcast_dim(int64_t a, int64_t b) {
  if (a == 1) return b;
  if (b == 1) return a;
  if (a < 0) return b; /* unknown vs known != 1: the known one (or a mismatch later) */
  if (b < 0) return a;
  return a == b ? a : -2;
}

OnyxStatus* ox_bcast_into(const OxNode* n, OxDims* a, const OxDims* b) {
  if (a->rank < 0 || b->rank < 0) {
    a->rank = -1;
    return NULL;
  }
  int32_t r = a->rank > b->rank ? a->rank : b->rank;
  OxDims out = {.rank = r};
  for (int32_t k = 0; k < r; k++) {
    int32_t ia = k - (r - a->rank), ib = k - (r - b->rank);
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    int64_t d = bcast_dim(da, db);
    if (d == -2)
      return ox_node_err(n,
                         "shapes cannot be broadcast: dimension %d is %lld in one input and "
                         "%lld in another",
                         (int)k, (long long)da, (long long)db);
    out.d[k] = d;
  }
  *a = out;
  return NULL;
}
