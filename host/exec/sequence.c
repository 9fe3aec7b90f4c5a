/* sequence.c — the sequence and optional ops, run by the host: a sequence is
 * an OxTensor of kind OX_RT_SEQUENCE holding its items, an empty optional one
 * of kind OX_RT_NONE; an optional holding a value is that value. Items are
 * shared (views of the same buffers), never copied, except where an op makes
 * new data (SplitToSequence, ConcatFromSequence). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "ox_control.h"

static OnyxStatus* ox_err(const OxNode* n, const char* fmt, ...) OX_PRINTF(2, 3);
static OnyxStatus* ox_err(const OxNode* n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  if (vasprintf(&text, fmt, ap) < 0) text = NULL;
  va_end(ap);
  OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT, "node '%s' (%s): %s", n->name, n->op_type,
                             text ? text : "out of memory");
  free(text);
  return st;
}

/* st, prefixed with the node unless it names one already. */
static OnyxStatus* ox_wrap_node(OnyxStatus* st, const OxNode* n) {
  if (!st || !strncmp(st->message ? st->message : "", "node '", 6)) return st;
  return ox_status_wrap(st, "node '%s' (%s)", n->name, n->op_type);
}

/* --- tensor helpers --------------------------------------------------------------------- */

OnyxStatus* ox_cf_copy(OxTensor* dst, size_t doff, const OxTensor* src, size_t soff, size_t n) {
  if (!n) return NULL;
  /* Strings keep every byte, NULs included (their stored lengths). */
  if (src->type == ONYX_ELEM_STRING) return ox_tensor_copy_strings(dst, doff, src, soff, n);
  size_t esz = ox_elem_size(src->type);
  if (!esz)
    return ox_status(ONYX_NOT_IMPLEMENTED, "element type %s is not supported by sequence ops",
                     ox_elem_name(src->type));
  memcpy((char*)dst->data + doff * esz, (const char*)src->data + soff * esz, n * esz);
  return NULL;
}

static size_t ox_prod(const int64_t* d, size_t from, size_t to) {
  size_t p = 1;
  for (size_t i = from; i < to; i++)
    p *= (size_t)d[i];
  return p;
}

OnyxStatus* ox_cf_take(struct OxFrame* f, const OxNode* n, const OxTensor* t, size_t axis,
                       int64_t idx, OxTensor** out) {
  *out = NULL;
  if (t->rank > OX_CF_MAX_RANK)
    return ox_status(ONYX_NOT_IMPLEMENTED, "rank %zu is over %d", t->rank, OX_CF_MAX_RANK);
  if (axis >= t->rank || idx < 0 || idx >= t->dims[axis])
    return ox_status(ONYX_INVALID_ARGUMENT, "index %lld is out of range on axis %zu",
                     (long long)idx, axis);
  int64_t dims[OX_CF_MAX_RANK];
  size_t r = 0;
  for (size_t i = 0; i < t->rank; i++)
    if (i != axis) dims[r++] = t->dims[i];
  OX_TRY(ox_host_tensor_new(f, n, t->type, dims, r, out));
  size_t outer = ox_prod(t->dims, 0, axis), inner = ox_prod(t->dims, axis + 1, t->rank);
  size_t len = (size_t)t->dims[axis];
  for (size_t o = 0; o < outer; o++) {
    OnyxStatus* st = ox_cf_copy(*out, o * inner, t, (o * len + (size_t)idx) * inner, inner);
    if (st) {
      ox_tensor_free(*out);
      *out = NULL;
      return st;
    }
  }
  return NULL;
}

OnyxStatus* ox_cf_concat(struct OxFrame* f, const OxNode* node, OxTensor* const* items, size_t n,
                         int64_t axis, bool new_axis, OxTensor** out) {
  *out = NULL;
  if (!n) return ox_status(ONYX_INVALID_ARGUMENT, "nothing to concatenate");
  const OxTensor* a = items[0];
  if (a->rank >= OX_CF_MAX_RANK)
    return ox_status(ONYX_NOT_IMPLEMENTED, "rank %zu is over %d", a->rank, OX_CF_MAX_RANK - 1);
  int64_t r = (int64_t)a->rank + (new_axis ? 1 : 0);
  if (axis < -r || axis >= r || (!new_axis && !a->rank))
    return ox_status(ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %lld",
                     (long long)axis, (long long)r);
  if (axis < 0) axis += r;
  size_t ax = (size_t)axis;
  int64_t dims[OX_CF_MAX_RANK + 1];
  int64_t total = 0;
  for (size_t k = 0; k < n; k++) {
    const OxTensor* t = items[k];
    bool same = t->type == a->type && t->rank == a->rank && t->vkind == OX_RT_TENSOR;
    for (size_t i = 0; same && i < a->rank; i++)
      same = t->dims[i] == a->dims[i] || (!new_axis && i == ax);
    if (!same)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "item %zu has another type or shape than item 0 (off the axis)", k);
    if (!ox_add_i64(total, new_axis ? 1 : t->dims[ax], &total))
      return ox_status(ONYX_LIMIT_EXCEEDED, "the length of the concatenation axis overflows");
  }
  size_t d = 0;
  for (size_t i = 0; i < (size_t)r; i++) {
    if (i == ax)
      dims[i] = total;
    else
      dims[i] = a->dims[d];
    if (i != ax || !new_axis) d++;
  }
  OX_TRY(ox_host_tensor_new(f, node, a->type, dims, (size_t)r, out));
  /* outer = product of the dims before the axis; each item contributes a
   * block of (its axis length) * inner elements per outer index. */
  size_t outer = ox_prod(dims, 0, ax), inner = ox_prod(dims, ax + 1, (size_t)r);
  size_t row = (size_t)total * inner, at = 0;
  for (size_t k = 0; k < n; k++) {
    size_t blk = (new_axis ? 1 : (size_t)items[k]->dims[ax]) * inner;
    for (size_t o = 0; o < outer; o++) {
      OnyxStatus* st = ox_cf_copy(*out, o * row + at, items[k], o * blk, blk);
      if (st) {
        ox_tensor_free(*out);
        *out = NULL;
        return st;
      }
    }
    at += blk;
  }
  return NULL;
}

/* --- run ---------------------------------------------------------------------------------- */

static OnyxStatus* ox_scalar_index(const OxNode* n, const OxTensor* t, int64_t* v) {
  if (!t || t->vkind != OX_RT_TENSOR || t->count != 1 ||
      (t->type != ONYX_ELEM_INT64 && t->type != ONYX_ELEM_INT32))
    return ox_err(n, "the position must be one int32 or int64 value");
  *v = t->type == ONYX_ELEM_INT64 ? *(const int64_t*)t->data : *(const int32_t*)t->data;
  return NULL;
}

static OnyxStatus* ox_need_seq(const OxNode* n, const OxTensor* t) {
  if (!t || t->vkind != OX_RT_SEQUENCE) return ox_err(n, "input 0 is not a sequence");
  return NULL;
}

static OnyxStatus* ox_run_split(struct OxFrame* f, const OxNode* n, OxTensor* const* ins,
                                OxTensor** outs) {
  const OxTensor* x = ins[0];
  if (!x || x->vkind != OX_RT_TENSOR) return ox_err(n, "input 0 is not a tensor");
  if (x->rank > OX_CF_MAX_RANK) return ox_err(n, "rank %zu is over %d", x->rank, OX_CF_MAX_RANK);
  int64_t axis = ox_node_attr_int(n, "axis", 0), r = (int64_t)x->rank;
  if (axis < -r || axis >= r) return ox_err(n, "axis %lld is out of range", (long long)axis);
  if (axis < 0) axis += r;
  bool keep = ox_node_attr_int(n, "keepdims", 1) != 0;
  int64_t len = x->dims[axis];
  const OxTensor* sp = n->n_inputs > 1 ? ins[1] : NULL;
  int64_t* sizes = NULL;
  size_t parts = 0;
  if (!sp) {
    parts = (size_t)len;
  } else {
    if (sp->vkind != OX_RT_TENSOR || (sp->type != ONYX_ELEM_INT64 && sp->type != ONYX_ELEM_INT32) ||
        sp->rank > 1)
      return ox_err(n, "'split' must be an int32/int64 scalar or 1-D tensor");
    int64_t one = 0;
    if (!sp->rank) {
      OX_TRY(ox_scalar_index(n, sp, &one));
      if (one <= 0) return ox_err(n, "'split' %lld is not positive", (long long)one);
      parts = (size_t)(len / one + (len % one != 0));
    } else {
      parts = sp->count;
    }
    sizes = calloc(parts ? parts : 1, sizeof *sizes);
    if (!sizes) return ox_oom();
    int64_t sum = 0;
    for (size_t i = 0; i < parts; i++) {
      if (!sp->rank)
        sizes[i] = (int64_t)i + 1 < (int64_t)parts ? one : len - one * (int64_t)(parts - 1);
      else
        sizes[i] = sp->type == ONYX_ELEM_INT64 ? ((const int64_t*)sp->data)[i]
                                               : ((const int32_t*)sp->data)[i];
      if (sizes[i] < 0) {
        free(sizes);
        return ox_err(n, "'split' has a negative size");
      }
      if (!ox_add_i64(sum, sizes[i], &sum)) {
        long long at = (long long)sizes[i];
        free(sizes);
        return ox_err(n, "'split' sizes overflow when added up (at entry %zu, %lld)", i, at);
      }
    }
    if (sum != len) {
      free(sizes);
      return ox_err(n, "'split' sums to %lld but axis %lld has length %lld", (long long)sum,
                    (long long)axis, (long long)len);
    }
  }
  /* The item table is bounded like a tensor of pointers; the items hold
   * the input's bytes between them. */
  size_t table = 0;
  OnyxStatus* st = ox_mul_size(parts, sizeof(OxTensor), &table)
                       ? ox_frame_reserve(f, n, table)
                       : ox_status(ONYX_LIMIT_EXCEEDED, "node '%s' (%s): %zu items overflow",
                                   n->name, n->op_type, parts);
  if (!st) st = ox_frame_reserve(f, n, x->bytes);
  if (st) {
    free(sizes);
    return st;
  }
  OxTensor* seq = NULL;
  st = ox_value_new_sequence(x->type, &seq);
  size_t outer = ox_prod(x->dims, 0, (size_t)axis),
         inner = ox_prod(x->dims, (size_t)axis + 1, x->rank);
  int64_t at = 0;
  for (size_t p = 0; !st && p < parts; p++) {
    if (f && !(p & 1023) && (st = ox_frame_stop_status(f))) break;
    int64_t sz = sizes ? sizes[p] : 1;
    int64_t dims[OX_CF_MAX_RANK];
    size_t rank = 0;
    for (size_t i = 0; i < x->rank; i++) {
      if ((int64_t)i == axis && !sizes && !keep) continue;
      dims[rank++] = (int64_t)i == axis ? sz : x->dims[i];
    }
    OxTensor* item = NULL;
    st = ox_host_tensor_new(f, n, x->type, dims, rank, &item);
    for (size_t o = 0; !st && o < outer; o++)
      st = ox_cf_copy(item, o * (size_t)sz * inner, x, (o * (size_t)len + (size_t)at) * inner,
                      (size_t)sz * inner);
    if (!st) st = ox_sequence_insert(seq, SIZE_MAX, item);
    if (st) ox_tensor_free(item);
    at += sz;
  }
  free(sizes);
  if (st) {
    ox_tensor_free(seq);
    return ox_wrap_node(st, n);
  }
  outs[0] = seq;
  return NULL;
}

static OnyxStatus* ox_run_seq_op(struct OxFrame* f, const OxNode* n, OxTensor* const* ins,
                                 OxTensor** outs) {
  const char* op = n->op_type;
  OxTensor* x = n->n_inputs ? ins[0] : NULL;
  const OxValue* ov = n->n_outputs ? n->outputs[0] : NULL;
  if (!strcmp(op, "SequenceEmpty")) return ox_value_new_sequence(ov->type, &outs[0]);
  if (!strcmp(op, "SequenceConstruct")) {
    OX_TRY(ox_value_new_sequence(ov->type, &outs[0]));
    for (size_t i = 0; i < n->n_inputs - n->n_implicit; i++) {
      OxTensor* item = NULL;
      if (!ins[i] || ins[i]->vkind != OX_RT_TENSOR)
        return ox_err(n, "input %zu is not a tensor", i);
      if (ins[i]->type != ov->type) return ox_err(n, "input %zu has another element type", i);
      OX_TRY(ox_value_share(ins[i], &item));
      OnyxStatus* st = ox_sequence_insert(outs[0], SIZE_MAX, item);
      if (st) {
        ox_tensor_free(item);
        return st;
      }
    }
    return NULL;
  }
  if (!strcmp(op, "SequenceLength")) {
    OX_TRY(ox_need_seq(n, x));
    OX_TRY(ox_tensor_new(ONYX_ELEM_INT64, NULL, 0, &outs[0]));
    *(int64_t*)outs[0]->data = (int64_t)x->n_items;
    return NULL;
  }
  if (!strcmp(op, "SequenceAt")) {
    OX_TRY(ox_need_seq(n, x));
    int64_t p, len = (int64_t)x->n_items;
    OX_TRY(ox_scalar_index(n, ins[1], &p));
    if (p < -len || p >= len)
      return ox_err(n, "position %lld is out of range for a sequence of %lld", (long long)p,
                    (long long)len);
    return ox_value_share(x->items[p < 0 ? p + len : p], &outs[0]);
  }
  if (!strcmp(op, "SequenceInsert") || !strcmp(op, "SequenceErase")) {
    OX_TRY(ox_need_seq(n, x));
    bool ins_op = op[8] == 'I';
    int64_t len = (int64_t)x->n_items, p = ins_op ? len : len - 1;
    const OxTensor* pos =
        ins_op ? (n->n_inputs > 2 ? ins[2] : NULL) : (n->n_inputs > 1 ? ins[1] : NULL);
    if (pos) OX_TRY(ox_scalar_index(n, pos, &p));
    if (p < 0) p += len;
    if (p < 0 || p > (ins_op ? len : len - 1))
      return ox_err(n, "position is out of range for a sequence of %lld", (long long)len);
    const OxTensor* t = ins_op ? ins[1] : NULL;
    if (ins_op && (!t || t->vkind != OX_RT_TENSOR || t->type != x->type))
      return ox_err(n, "the tensor to insert is missing or has another element type");
    /* Items are shared, not copied: what grows is the item table, bounded
     * like a tensor of item headers. */
    size_t table = SIZE_MAX;
    if (ins_op && ox_mul_size(x->n_items + 1, sizeof(OxTensor), &table))
      OX_TRY(ox_frame_reserve(f, n, table));
    else if (ins_op)
      return ox_err(n, "a sequence of %zu items is too long", x->n_items);
    OxTensor* seq = NULL;
    OX_TRY(ox_value_share(x, &seq));
    OxTensor* item = NULL;
    OnyxStatus* st = NULL;
    if (ins_op) {
      st = ox_value_share(t, &item);
      if (!st && (st = ox_sequence_insert(seq, (size_t)p, item))) ox_tensor_free(item);
    } else {
      ox_tensor_free(seq->items[p]);
      memmove(seq->items + p, seq->items + p + 1, (size_t)(len - p - 1) * sizeof *seq->items);
      seq->n_items--;
    }
    if (st) {
      ox_tensor_free(seq);
      return st;
    }
    outs[0] = seq;
    return NULL;
  }
  if (!strcmp(op, "SplitToSequence")) return ox_run_split(f, n, ins, outs);
  if (!strcmp(op, "ConcatFromSequence")) {
    OX_TRY(ox_need_seq(n, x));
    OnyxStatus* st = ox_cf_concat(f, n, x->items, x->n_items, ox_node_attr_int(n, "axis", 0),
                                  ox_node_attr_int(n, "new_axis", 0) != 0, &outs[0]);
    return ox_wrap_node(st, n);
  }
  if (!strcmp(op, "Optional")) {
    if (!x) return ox_value_new_none(ov->type, &outs[0]);
    return ox_value_share(x, &outs[0]);
  }
  if (!strcmp(op, "OptionalHasElement")) {
    OX_TRY(ox_tensor_new(ONYX_ELEM_BOOL, NULL, 0, &outs[0]));
    *(uint8_t*)outs[0]->data = x && x->vkind != OX_RT_NONE;
    return NULL;
  }
  if (!strcmp(op, "OptionalGetElement")) {
    if (!x || x->vkind == OX_RT_NONE) return ox_err(n, "the optional input is empty");
    return ox_value_share(x, &outs[0]);
  }
  if (!strcmp(op, "Identity")) {
    if (!x) return ox_err(n, "input 0 is missing");
    return ox_value_share(x, &outs[0]);
  }
  return ox_err(n, "is not a host op");
}

OnyxStatus* ox_seq_run(struct OxFrame* f, const OxNode* n, OxTensor* const* ins, OxTensor** outs) {
  if (ox_ml_map_op(n)) return ox_wrap_node(ox_ml_map_run(f, n, ins, outs), n);
  return ox_wrap_node(ox_run_seq_op(f, n, ins, outs), n);
}
