/* opt_pad.c — Pad's amounts as the optimizer reads them (for `eliminate`,
 * which drops an all-zero Pad), and `pad_fold`: a constant-mode Pad on
 * spatial axes only, read by a convolution or a pooling op as its only
 * reader, becomes that op's own padding (ONNX Runtime's pad fusion). The
 * fold edits the reader's `pads` in place and removes the Pad: no node
 * moves, no op changes, and the reader's kernel (made after the fusions)
 * pads on the fly instead of reading a padded copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "opt_internal.h"

bool ox_opt_pad_amounts(const OxNode* pad, int64_t* begin, int64_t* end) {
  if (!ox_opt_is(pad, "Pad") || pad->n_inputs < 1 || !pad->inputs[0]) return false;
  const int32_t rank = pad->inputs[0]->rank;
  if (rank < 0 || rank > OX_OPT_PAD_MAX_RANK) return false;
  for (int32_t d = 0; d < rank; d++)
    begin[d] = end[d] = 0;
  if (pad->since_version < 11) {
    size_t n = 0;
    const int64_t* p = ox_node_attr_ints(pad, pad->since_version < 2 ? "paddings" : "pads", &n);
    if (!p || n != 2 * (size_t)rank) return false;
    for (int32_t d = 0; d < rank; d++) {
      begin[d] = p[d];
      end[d] = p[rank + d];
    }
    return true;
  }
  int64_t *p = NULL, *axes = NULL;
  size_t np = 0, na = (size_t)rank;
  bool ok = pad->n_inputs > 1 && ox_opt_const_ints(pad->inputs[1], &p, &np);
  const OxValue* axes_v = pad->since_version >= 18 && pad->n_inputs > 3 ? pad->inputs[3] : NULL;
  if (ok && axes_v) ok = ox_opt_const_ints(axes_v, &axes, &na);
  ok = ok && np == 2 * na;
  bool seen[OX_OPT_PAD_MAX_RANK] = {false};
  for (size_t i = 0; ok && i < na; i++) {
    int64_t d = axes ? axes[i] : (int64_t)i;
    if (d < 0) d += rank;
    ok = d >= 0 && d < rank && !seen[d];
    if (!ok) break;
    seen[d] = true;
    begin[d] = p[i];
    end[d] = p[na + i];
  }
  free(p);
  free(axes);
  return ok;
}

/* The Pad's fill value when known at session creation: the `value`
 * attribute (opset < 11), else the constant constant_value input (0 when
 * absent). */
static bool ox_pad_value(const OxNode* pad, double* v) {
  if (pad->since_version < 11) {
    *v = ox_node_attr_float(pad, "value", 0.0f);
    return true;
  }
  if (pad->n_inputs < 3 || !pad->inputs[2]) {
    *v = 0;
    return true;
  }
  const OxValue* c = pad->inputs[2];
  if (c->constant && !c->is_graph_input && c->constant->count == 0) {
    *v = 0; /* an empty constant_value is the default, 0 */
    return true;
  }
  return ox_opt_const_scalar(c, v);
}

/* Replaces n's INTS attribute `name` (or adds it) with count values. */
static OnyxStatus* ox_set_ints(OxNode* n, const char* name, const int64_t* v, size_t count) {
  int64_t* copy = malloc((count ? count : 1) * sizeof *copy);
  if (!copy) return ox_oom();
  memcpy(copy, v, count * sizeof *copy);
  for (size_t i = 0; i < n->n_attrs; i++) {
    OxAttr* a = &n->attrs[i];
    if (strcmp(a->name, name)) continue;
    free(a->ints);
    a->ints = copy;
    a->count = count;
    a->type = ONYX_ATTR_INTS;
    a->from_default = false;
    return NULL;
  }
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .ints = copy, .count = count};
  if (!a.name) {
    ox_attr_clear(&a);
    return ox_oom();
  }
  OnyxStatus* st = ox_node_add_attr(n, &a);
  ox_attr_clear(&a);
  return st;
}

/* What the reader r of a padded value takes, for a Pad filling with `value`:
 * Conv / com.onyx FusedConv pad with zeros; AveragePool with
 * count_include_pad 1 averages the zeros it pads with; MaxPool pads with
 * -inf. Pooling with ceil_mode 1 is left alone (the last window's start
 * rule differs between a padded input and the op's own pads). */
static bool ox_pad_reader_ok(const OxOpt* o, const OxNode* r, double value) {
  const char* auto_pad = ox_node_attr_string(r, "auto_pad", "NOTSET");
  if (!auto_pad || strcmp(auto_pad, "NOTSET")) return false;
  if (ox_opt_is(r, "Conv") ||
      (!strcmp(r->domain, OX_CONTRIB_DOMAIN) && !strcmp(r->op_type, "FusedConv")))
    return value == 0;
  if (ox_node_attr_int(r, "ceil_mode", 0) != 0) return false;
  if (ox_opt_is(r, "AveragePool"))
    return value == 0 && ox_node_attr_int(r, "count_include_pad", 0) == 1;
  if (ox_opt_is(r, "MaxPool")) {
    for (size_t i = 1; i < r->n_outputs; i++) /* Indices would count the padded input */
      if (r->outputs[i] && (r->outputs[i]->n_consumers || ox_opt_pinned(o, r->outputs[i])))
        return false;
    return isinf(value) && value < 0;
  }
  return false;
}

/* Pad(x) -> reader(·) becomes reader(x) with the Pad's spatial amounts
 * added to its pads: see the file comment and docs/optimizer.md. */
static OnyxStatus* ox_fold_pad(OxOpt* o, OxNode* pad, bool* done) {
  *done = false;
  if (!ox_opt_is(pad, "Pad") || !ox_opt_on_cpu(o) || pad->n_outputs < 1 || !pad->outputs[0])
    return NULL;
  const char* mode = ox_node_attr_string(pad, "mode", "constant");
  if (!mode || strcmp(mode, "constant")) return NULL;
  OxValue* x = pad->inputs[0];
  OxValue* y = pad->outputs[0];
  if (!x || x->rank < 3 || x->rank > OX_OPT_PAD_MAX_RANK || !ox_opt_single_use(o, y)) return NULL;
  OxNode* r = y->consumers[0];
  if (r->n_inputs < 1 || r->inputs[0] != y) return NULL; /* the data input only, never W */
  int64_t begin[OX_OPT_PAD_MAX_RANK], end[OX_OPT_PAD_MAX_RANK];
  double value;
  if (!ox_opt_pad_amounts(pad, begin, end) || !ox_pad_value(pad, &value) ||
      !ox_pad_reader_ok(o, r, value))
    return NULL;
  const size_t k = (size_t)x->rank - 2; /* spatial axes */
  if (begin[0] || end[0] || begin[1] || end[1]) return NULL;
  size_t n_old = 0;
  const int64_t* old = ox_node_attr_ints(r, "pads", &n_old);
  if (old && n_old != 2 * k) return NULL;
  int64_t pads[2 * OX_OPT_PAD_MAX_RANK];
  for (size_t i = 0; i < k; i++) {
    const int64_t b = begin[2 + i], e = end[2 + i];
    if (b < 0 || e < 0) return NULL; /* a crop is not padding */
    if (!ox_add_i64(old ? old[i] : 0, b, &pads[i]) ||
        !ox_add_i64(old ? old[k + i] : 0, e, &pads[k + i]))
      return NULL;
  }
  OX_TRY(ox_opt_set_input(r, 0, x));
  ox_opt_remove(o, pad);
  OX_TRY(ox_set_ints(r, "pads", pads, 2 * k));
  o->took_over = r; /* the reader records the Pad among its origins */
  o->stats->pad_fold++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_pad_fold(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fold_pad, NULL, changed);
}
