/* control.c — control flow run by the host: If, Loop, Scan, SequenceMap and
 * FlexAttention.
 *
 * Each subgraph attribute of such a node has, from plan time, a nested
 * session with its own partition and plan (host/plan/ox_nested.h). A run
 * feeds the nested plan from the parent's frame once per branch or
 * iteration. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "ox_control.h"
#include "ox_nested.h"
#include "ox_frame.h"
#include "ox_program.h"
#include "ox_threadpool.h"

/* Runs a nested plan once: feeds[0..n_formal) are the formal inputs
 * (borrowed), the outer values come from the parent's frame. outs receive
 * every graph output (owned). */
static OnyxStatus* ox_sub_run(OxFrame* f, const OxStep* st, const OxSub* sub,
                              OxTensor* const* formal, OxTensor** outs) {
  OxGraph* g = sub->s->graph;
  OxTensor** feeds = calloc(g->n_inputs + 1, sizeof *feeds);
  bool* wanted = calloc(g->n_outputs + 1, sizeof *wanted);
  if (!feeds || !wanted) {
    free(feeds);
    free(wanted);
    return ox_oom();
  }
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < sub->n_formal && !err; i++) {
    feeds[i] = formal[i];
    if (!feeds[i])
      err = ox_status(ONYX_INVALID_ARGUMENT, "input %zu of the subgraph is missing", i);
  }
  for (size_t k = 0; k < sub->n_outer && !err; k++) {
    size_t slot = st->in[sub->outer[k]];
    feeds[sub->n_formal + k] = slot == OX_NO_SLOT ? NULL : f->values[slot];
    if (!feeds[sub->n_formal + k])
      err = ox_status(ONYX_FAIL, "internal: outer-scope value '%s' is not available",
                      g->inputs[sub->n_formal + k]->name);
  }
  for (size_t i = 0; i < g->n_outputs; i++)
    wanted[i] = true;
  if (!err) err = ox_execute_nested(f, sub->s, feeds, outs, wanted);
  free(feeds);
  free(wanted);
  return err;
}

static OxTensor* ox_in(const OxFrame* f, const OxStep* st, size_t i) {
  return i < st->n_in && st->in[i] != OX_NO_SLOT ? f->values[st->in[i]] : NULL;
}

static void ox_free_all(OxTensor** v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    ox_tensor_free(v[i]);
    v[i] = NULL;
  }
}

static OnyxStatus* ox_bool_of(const OxTensor* t, const char* what, bool* out) {
  if (!t || t->vkind != OX_RT_TENSOR || t->count != 1 || t->type != ONYX_ELEM_BOOL)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s must be one bool value", what);
  *out = *(const uint8_t*)t->data != 0;
  return NULL;
}

static OnyxStatus* ox_run_if(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  bool c = false;
  OX_TRY(ox_bool_of(ox_in(f, st, 0), "the condition", &c));
  return ox_sub_run(f, st, &hs->subs[c ? 0 : 1], NULL, outs);
}

/* Growable list of per-iteration tensors of one scan output; `bytes` is
 * what it holds (items and their headers), charged to the run's live bytes. */
typedef struct OxStack {
  OxTensor** items;
  size_t n, cap;
  size_t bytes;
} OxStack;

static size_t ox_held_bytes(const OxTensor* t) {
  if (!t) return 0;
  size_t sum = sizeof *t;
  if (t->vkind == OX_RT_TENSOR) return ox_add_size(sum, t->bytes, &sum) ? sum : SIZE_MAX;
  for (size_t i = 0; i < t->n_items; i++)
    if (!ox_add_size(sum, ox_held_bytes(t->items[i]), &sum)) return SIZE_MAX;
  return sum;
}

/* Appends t (taking it on success). The stack becomes one tensor of the
 * node's outputs: it must stay within max_tensor_bytes, and what it holds
 * within the run's max_session_bytes. */
static OnyxStatus* ox_stack_push(OxFrame* f, const OxNode* n, size_t which, OxStack* s,
                                 OxTensor* t) {
  size_t b = ox_held_bytes(t), total;
  size_t max = f->prog->cfg.max_tensor_bytes;
  if (!ox_add_size(s->bytes, b, &total) || (max && total > max))
    return ox_status(ONYX_LIMIT_EXCEEDED,
                     "node '%s' (%s): output %zu would hold more than %zu bytes after %zu "
                     "iterations (%zu bytes so far, %zu more), over the limit of %zu bytes "
                     "(max_tensor_bytes)",
                     n->name, n->op_type, which, s->bytes, s->n + 1, s->bytes, b, max);
  OX_TRY(ox_frame_reserve(f, n, b));
  if (!ox_grow((void**)&s->items, &s->cap, s->n + 1, sizeof *s->items)) return ox_oom();
  s->items[s->n++] = t;
  s->bytes = total;
  ox_frame_charge(f, b);
  return NULL;
}

static void ox_stacks_free(OxFrame* f, OxStack* s, size_t n) {
  for (size_t i = 0; s && i < n; i++) {
    ox_frame_uncharge(f, s[i].bytes);
    ox_free_all(s[i].items, s[i].n);
    free(s[i].items);
  }
  free(s);
}

/* A value a host op holds across iterations (loop-carried, scan state):
 * *slot takes t, and the run's live bytes follow. */
static void ox_hold(OxFrame* f, OxTensor** slot, size_t* held, OxTensor* t) {
  ox_frame_uncharge(f, *held);
  ox_tensor_free(*slot);
  *slot = t;
  *held = ox_held_bytes(t);
  ox_frame_charge(f, *held);
}

static void ox_release_held(OxFrame* f, size_t* held, size_t n) {
  for (size_t i = 0; held && i < n; i++) {
    ox_frame_uncharge(f, held[i]);
    held[i] = 0;
  }
}

/* Stacks per-iteration outputs on axis `axis` (reversed when asked); no
 * iteration: an empty tensor shaped from the body's declared output. */
static OnyxStatus* ox_stack_out(OxFrame* f, const OxNode* n, OxStack* s, const OxValue* decl,
                                int64_t axis, bool reverse, OxTensor** out) {
  if (!s->n) {
    int64_t dims[OX_CF_MAX_RANK + 1] = {0};
    size_t rank = 1;
    for (int32_t i = 0; decl->rank > 0 && i < decl->rank && rank < OX_CF_MAX_RANK; i++)
      dims[rank++] = decl->dims[i] < 0 ? 0 : decl->dims[i];
    return ox_host_tensor_new(f, n, decl->type, dims, rank, out);
  }
  if (reverse)
    for (size_t i = 0; i < s->n / 2; i++) {
      OxTensor* t = s->items[i];
      s->items[i] = s->items[s->n - 1 - i];
      s->items[s->n - 1 - i] = t;
    }
  return ox_cf_concat(f, n, s->items, s->n, axis, true, out);
}

static OnyxStatus* ox_run_loop(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  const OxGraph* body = sub->s->graph;
  size_t carried = n->n_inputs - n->n_implicit - 2;
  size_t n_scan = body->n_outputs - 1 - carried;
  const OxTensor* m = ox_in(f, st, 0);
  const OxTensor* c0 = ox_in(f, st, 1);
  int64_t max_trips = INT64_MAX;
  if (m) {
    if (m->vkind != OX_RT_TENSOR || m->count != 1 || m->type != ONYX_ELEM_INT64)
      return ox_status(ONYX_INVALID_ARGUMENT, "M must be one int64 value");
    max_trips = *(const int64_t*)m->data;
  }
  bool cond = true;
  if (c0) OX_TRY(ox_bool_of(c0, "the condition", &cond));
  OxTensor** formal = calloc(carried + 2, sizeof *formal);
  size_t* held = calloc(carried + 1, sizeof *held); /* live bytes of each carried value */
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  OxStack* stacks = calloc(n_scan + 1, sizeof *stacks);
  OxTensor *iter = NULL, *cnd = NULL;
  OnyxStatus* err = (!formal || !held || !bout || !stacks) ? ox_oom() : NULL;
  if (!err) err = ox_tensor_new(ONYX_ELEM_INT64, NULL, 0, &iter);
  if (!err) err = ox_tensor_new(ONYX_ELEM_BOOL, NULL, 0, &cnd);
  for (size_t i = 0; !err && i < carried; i++)
    err = ox_value_share(ox_in(f, st, 2 + i), &formal[2 + i]);
  for (int64_t it = 0; !err && cond && it < max_trips; it++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %lld", (long long)it);
      break;
    }
    *(int64_t*)iter->data = it;
    *(uint8_t*)cnd->data = cond;
    formal[0] = iter;
    formal[1] = cnd;
    err = ox_sub_run(f, st, sub, formal, bout);
    if (err) {
      err = ox_status_wrap(err, "iteration %lld", (long long)it);
      break;
    }
    err = ox_bool_of(bout[0], "the body's condition output", &cond);
    for (size_t i = 0; i < carried; i++) {
      ox_hold(f, &formal[2 + i], &held[i], bout[1 + i]);
      bout[1 + i] = NULL;
    }
    for (size_t k = 0; !err && k < n_scan; k++) {
      err = ox_stack_push(f, n, carried + k, &stacks[k], bout[1 + carried + k]);
      if (!err) bout[1 + carried + k] = NULL;
    }
    ox_free_all(bout, body->n_outputs);
  }
  for (size_t i = 0; !err && i < n->n_outputs; i++) {
    if (i < carried) {
      outs[i] = formal[2 + i];
      formal[2 + i] = NULL;
    } else {
      err = ox_stack_out(f, n, &stacks[i - carried], body->outputs[1 + i], 0, false, &outs[i]);
    }
  }
  ox_release_held(f, held, carried);
  if (formal) ox_free_all(formal + 2, carried);
  ox_free_all(bout, body->n_outputs);
  free(formal);
  free(held);
  free(bout);
  ox_stacks_free(f, stacks, n_scan);
  ox_tensor_free(iter);
  ox_tensor_free(cnd);
  return err;
}

static int64_t ox_attr_at(const OxNode* n, const char* name, size_t i, int64_t fallback) {
  size_t count = 0;
  const int64_t* v = ox_node_attr_ints(n, name, &count);
  return v && i < count ? v[i] : fallback;
}

/* One Scan over states and scan inputs (no batch axis): the opset-9 form.
 * states/scans are borrowed; outs get n_state + n_scan_out values. */
static OnyxStatus* ox_scan_once(OxFrame* f, const OxStep* st, const OxSub* sub,
                                const OxScanShape* sh, OxTensor* const* states,
                                OxTensor* const* scans, const int64_t* in_axes,
                                const int64_t* out_axes, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxGraph* body = sub->s->graph;
  int64_t len = -1;
  for (size_t j = 0; j < sh->n_scan_in; j++) {
    const OxTensor* t = scans[j];
    int64_t ax = in_axes[j] < 0 ? in_axes[j] + (int64_t)t->rank : in_axes[j];
    if (ax < 0 || ax >= (int64_t)t->rank)
      return ox_status(ONYX_INVALID_ARGUMENT, "scan input %zu has no axis %lld", j,
                       (long long)in_axes[j]);
    if (len >= 0 && t->dims[ax] != len)
      return ox_status(ONYX_INVALID_ARGUMENT, "scan inputs have different lengths (%lld, %lld)",
                       (long long)len, (long long)t->dims[ax]);
    len = t->dims[ax];
  }
  size_t nb = sh->n_state + sh->n_scan_in;
  OxTensor** formal = calloc(nb + 1, sizeof *formal);
  size_t* held = calloc(nb + 1, sizeof *held); /* live bytes of each formal value */
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  OxStack* stacks = calloc(sh->n_scan_out + 1, sizeof *stacks);
  OnyxStatus* err = (!formal || !held || !bout || !stacks) ? ox_oom() : NULL;
  for (size_t i = 0; !err && i < sh->n_state; i++)
    err = ox_value_share(states[i], &formal[i]);
  for (int64_t t = 0; !err && t < len; t++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %lld", (long long)t);
      break;
    }
    for (size_t j = 0; !err && j < sh->n_scan_in; j++) {
      const OxTensor* x = scans[j];
      int64_t ax = in_axes[j] < 0 ? in_axes[j] + (int64_t)x->rank : in_axes[j];
      int64_t at = ox_attr_at(n, "scan_input_directions", j, 0) ? len - 1 - t : t;
      OxTensor* slice = NULL;
      err = ox_cf_take(f, n, x, (size_t)ax, at, &slice);
      ox_hold(f, &formal[sh->n_state + j], &held[sh->n_state + j], slice);
    }
    if (!err) err = ox_sub_run(f, st, sub, formal, bout);
    for (size_t i = 0; !err && i < sh->n_state; i++) {
      ox_hold(f, &formal[i], &held[i], bout[i]);
      bout[i] = NULL;
    }
    for (size_t k = 0; !err && k < sh->n_scan_out; k++) {
      err = ox_stack_push(f, n, sh->n_state + k, &stacks[k], bout[sh->n_state + k]);
      if (!err) bout[sh->n_state + k] = NULL;
    }
    ox_free_all(bout, body->n_outputs);
  }
  for (size_t i = 0; !err && i < sh->n_state; i++) {
    outs[i] = formal[i];
    formal[i] = NULL;
  }
  for (size_t k = 0; !err && k < sh->n_scan_out; k++) {
    int64_t ax = out_axes[k];
    const OxValue* decl = body->outputs[sh->n_state + k];
    if (ax < 0 && stacks[k].n) ax += (int64_t)stacks[k].items[0]->rank + 1;
    err = ox_stack_out(f, n, &stacks[k], decl, ax < 0 ? 0 : ax,
                       ox_attr_at(n, "scan_output_directions", k, 0) != 0, &outs[sh->n_state + k]);
  }
  ox_release_held(f, held, nb);
  ox_free_all(formal, nb);
  ox_free_all(bout, body->n_outputs);
  free(formal);
  free(held);
  free(bout);
  ox_stacks_free(f, stacks, sh->n_scan_out);
  return err;
}

/* Keeps the first n entries of axis 0 (0 <= n <= length). */
static OnyxStatus* ox_cf_prefix(OxFrame* f, const OxNode* node, OxTensor** t, int64_t n) {
  OxTensor* x = *t;
  if (!x->rank || n < 0 || n > x->dims[0])
    return ox_status(ONYX_INVALID_ARGUMENT, "sequence length %lld is out of range", (long long)n);
  if (n == x->dims[0]) return NULL;
  int64_t dims[OX_CF_MAX_RANK];
  memcpy(dims, x->dims, x->rank * sizeof *dims);
  dims[0] = n;
  OxTensor* y = NULL;
  OX_TRY(ox_host_tensor_new(f, node, x->type, dims, x->rank, &y));
  OnyxStatus* st = ox_cf_copy(y, 0, x, 0, y->count);
  if (st) {
    ox_tensor_free(y);
    return st;
  }
  ox_tensor_free(x);
  *t = y;
  return NULL;
}

/* Zero-pads axis 0 to `len` entries. */
static OnyxStatus* ox_cf_pad(OxFrame* f, const OxNode* n, OxTensor** t, int64_t len) {
  OxTensor* x = *t;
  if (!x->rank || x->dims[0] >= len) return NULL;
  int64_t dims[OX_CF_MAX_RANK];
  memcpy(dims, x->dims, x->rank * sizeof *dims);
  dims[0] = len;
  OxTensor* y = NULL;
  OX_TRY(ox_host_tensor_new(f, n, x->type, dims, x->rank, &y));
  OnyxStatus* st = ox_cf_copy(y, 0, x, 0, x->count);
  if (st) {
    ox_tensor_free(y);
    return st;
  }
  ox_tensor_free(x);
  *t = y;
  return NULL;
}

static OnyxStatus* ox_run_scan(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  OxScanShape sh;
  OX_TRY(ox_scan_shape(n, sub->s->graph, sub->n_formal, &sh));
  size_t n_out = sh.n_state + sh.n_scan_out;
  int64_t* in_axes = calloc(sh.n_scan_in + 1, sizeof *in_axes);
  int64_t* out_axes = calloc(sh.n_scan_out + 1, sizeof *out_axes);
  OxTensor** states = calloc(sh.n_state + 1, sizeof *states);
  OxTensor** scans = calloc(sh.n_scan_in + 1, sizeof *scans);
  OnyxStatus* err = (!in_axes || !out_axes || !states || !scans) ? ox_oom() : NULL;
  for (size_t j = 0; !err && j < sh.n_scan_in; j++)
    in_axes[j] = sh.v8 ? 0 : ox_attr_at(n, "scan_input_axes", j, 0);
  for (size_t k = 0; !err && k < sh.n_scan_out; k++)
    out_axes[k] = sh.v8 ? 0 : ox_attr_at(n, "scan_output_axes", k, 0);
  if (!err && !sh.v8) {
    for (size_t i = 0; i < sh.n_state; i++)
      states[i] = ox_in(f, st, i);
    for (size_t j = 0; j < sh.n_scan_in; j++)
      scans[j] = ox_in(f, st, sh.n_state + j);
    err = ox_scan_once(f, st, sub, &sh, states, scans, in_axes, out_axes, outs);
  } else if (!err) {
    /* Opset 8: axis 0 of every input is the batch; each batch row is one
     * opset-9 scan over its first sequence_lens[b] steps (all when absent);
     * scan outputs are zero-padded to the longest. */
    const OxTensor* first = ox_in(f, st, sh.first);
    int64_t batch = first && first->rank ? first->dims[0] : 0;
    const OxTensor* lens = ox_in(f, st, 0);
    if (lens && (lens->vkind != OX_RT_TENSOR || lens->type != ONYX_ELEM_INT64 ||
                 lens->count != (size_t)batch))
      err =
          ox_status(ONYX_INVALID_ARGUMENT, "sequence_lens must be int64 with one entry per batch");
    OxStack* rows = calloc(n_out + 1, sizeof *rows);
    OxTensor** row_out = calloc(n_out + 1, sizeof *row_out);
    if (!rows || !row_out) err = ox_oom();
    for (int64_t b = 0; !err && b < batch; b++) {
      for (size_t i = 0; !err && i < sh.n_state + sh.n_scan_in; i++) {
        OxTensor** dst = i < sh.n_state ? &states[i] : &scans[i - sh.n_state];
        ox_tensor_free(*dst);
        *dst = NULL;
        const OxTensor* x = ox_in(f, st, sh.first + i);
        if (!x || x->vkind != OX_RT_TENSOR)
          err = ox_status(ONYX_INVALID_ARGUMENT, "input %zu is missing", sh.first + i);
        else
          err = ox_cf_take(f, n, x, 0, b, dst);
        if (!err && lens && i >= sh.n_state)
          err = ox_cf_prefix(f, n, dst, ((const int64_t*)lens->data)[b]);
      }
      if (!err) err = ox_scan_once(f, st, sub, &sh, states, scans, in_axes, out_axes, row_out);
      for (size_t o = 0; !err && o < n_out; o++) {
        const OxTensor* x0 = ox_in(f, st, sh.first + sh.n_state); /* first scan input */
        if (lens && o >= sh.n_state && x0 && x0->rank > 1)
          err = ox_cf_pad(f, n, &row_out[o], x0->dims[1]);
        if (err) break;
        err = ox_stack_push(f, n, o, &rows[o], row_out[o]);
        if (!err) row_out[o] = NULL;
      }
      ox_free_all(row_out, n_out);
    }
    for (size_t o = 0; !err && o < n_out; o++)
      err = ox_stack_out(f, n, &rows[o], sub->s->graph->outputs[o], 0, false, &outs[o]);
    ox_free_all(states, sh.n_state);
    ox_free_all(scans, sh.n_scan_in);
    ox_stacks_free(f, rows, n_out);
    free(row_out);
  }
  free(in_axes);
  free(out_axes);
  free(states);
  free(scans);
  return err;
}

static OnyxStatus* ox_run_seqmap(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxSub* sub = &hs->subs[0];
  const OxGraph* body = sub->s->graph;
  size_t nin = n->n_inputs - n->n_implicit;
  const OxTensor* s0 = ox_in(f, st, 0);
  if (!s0 || s0->vkind != OX_RT_SEQUENCE)
    return ox_status(ONYX_INVALID_ARGUMENT, "input 0 is not a sequence");
  for (size_t i = 0; i < nin; i++) {
    const OxTensor* x = ox_in(f, st, i);
    if (x && x->vkind == OX_RT_SEQUENCE && x->n_items != s0->n_items)
      return ox_status(ONYX_INVALID_ARGUMENT, "sequence input %zu has %zu items, input 0 %zu", i,
                       x->n_items, s0->n_items);
  }
  OxTensor** formal = calloc(nin + 1, sizeof *formal);
  OxTensor** bout = calloc(body->n_outputs + 1, sizeof *bout);
  /* What each output sequence holds so far, against the limits as a stack. */
  OxStack* acc = calloc(n->n_outputs + 1, sizeof *acc);
  OnyxStatus* err = (!formal || !bout || !acc) ? ox_oom() : NULL;
  for (size_t o = 0; !err && o < n->n_outputs; o++)
    err = ox_value_new_sequence(body->outputs[o]->type, &outs[o]);
  for (size_t k = 0; !err && k < s0->n_items; k++) {
    if ((err = ox_frame_stop_status(f))) {
      err = ox_status_wrap(err, "in iteration %zu", k);
      break;
    }
    for (size_t i = 0; i < nin; i++) {
      OxTensor* x = ox_in(f, st, i);
      formal[i] = x && x->vkind == OX_RT_SEQUENCE ? x->items[k] : x;
    }
    err = ox_sub_run(f, st, sub, formal, bout);
    for (size_t o = 0; !err && o < n->n_outputs; o++) {
      size_t b = ox_held_bytes(bout[o]), max = f->prog->cfg.max_tensor_bytes, total;
      if (!ox_add_size(acc[o].bytes, b, &total) || (max && total > max))
        err = ox_status(ONYX_LIMIT_EXCEEDED,
                        "node '%s' (%s): output sequence %zu would hold more than %zu bytes "
                        "after %zu items, over the limit of %zu bytes (max_tensor_bytes)",
                        n->name, n->op_type, o, acc[o].bytes, k + 1, max);
      if (!err) err = ox_frame_reserve(f, n, b);
      if (!err) err = ox_sequence_insert(outs[o], SIZE_MAX, bout[o]);
      if (err) break;
      bout[o] = NULL;
      acc[o].bytes = total;
      ox_frame_charge(f, b);
    }
    ox_free_all(bout, body->n_outputs);
  }
  ox_stacks_free(f, acc, n->n_outputs);
  free(formal);
  free(bout);
  return err;
}

/* --- FlexAttention ------------------------------------------------------------------------ */
static double ox_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else {
    float m = (float)man / 1024.0f / 16384.0f; /* subnormal: man * 2^-24 */
    return sign ? -(double)m : (double)m;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t ox_to_f16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int32_t ne = (int32_t)e - 127 + 15;
  if (ne >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (ne <= 0) {
    if (ne < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - ne);
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)ne << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

static bool ox_flex_type(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64 || t == ONYX_ELEM_FLOAT16 ||
         t == ONYX_ELEM_BFLOAT16;
}

static double ox_getd(const OxTensor* t, size_t i) {
  switch (t->type) {
  case ONYX_ELEM_FLOAT64:
    return ((const double*)t->data)[i];
  case ONYX_ELEM_FLOAT16:
    return ox_f16(((const uint16_t*)t->data)[i]);
  case ONYX_ELEM_BFLOAT16: {
    uint32_t bits = (uint32_t)((const uint16_t*)t->data)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  default:
    return ((const float*)t->data)[i];
  }
}

static void ox_setd(OxTensor* t, size_t i, double v) {
  switch (t->type) {
  case ONYX_ELEM_FLOAT64:
    ((double*)t->data)[i] = v;
    break;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)t->data)[i] = ox_to_f16(v);
    break;
  case ONYX_ELEM_BFLOAT16: {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
      bits = 0x7fc00000u;
    else
      bits += 0x7fffu + ((bits >> 16) & 1);
    ((uint16_t*)t->data)[i] = (uint16_t)(bits >> 16);
    break;
  }
  default:
    ((float*)t->data)[i] = (float)v;
  }
}

/* Passes x through a mod subgraph (if any): x is replaced by its output,
 * which must keep the shape. */
static OnyxStatus* ox_flex_mod(OxFrame* f, const OxStep* st, const OxSub* sub, OxTensor** x,
                               const char* what) {
  if (!sub->s) return NULL;
  OxTensor* out = NULL;
  OnyxStatus* err = ox_sub_run(f, st, sub, x, &out);
  if (err) return ox_status_wrap(err, "%s", what);
  bool same = out->vkind == OX_RT_TENSOR && out->count == (*x)->count && ox_flex_type(out->type);
  if (!same) {
    ox_tensor_free(out);
    return ox_status(ONYX_INVALID_ARGUMENT, "%s must return a float tensor of the scores' shape",
                     what);
  }
  ox_tensor_free(*x);
  *x = out;
  return NULL;
}

static OnyxStatus* ox_run_flex(OxFrame* f, const OxStep* st, OxHostState* hs, OxTensor** outs) {
  const OxNode* n = st->node;
  const OxTensor *q = ox_in(f, st, 0), *k = ox_in(f, st, 1), *v = ox_in(f, st, 2);
  if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4 || !ox_flex_type(q->type) ||
      k->type != q->type || v->type != q->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "Q, K and V must be 4-D float tensors of one type");
  int64_t B = q->dims[0], Hq = q->dims[1], L = q->dims[2], E = q->dims[3];
  int64_t Hkv = k->dims[1], S = k->dims[2], Ev = v->dims[3];
  if (k->dims[0] != B || v->dims[0] != B || k->dims[3] != E || v->dims[1] != Hkv ||
      v->dims[2] != S || !Hkv || Hq % Hkv)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "shapes do not fit: Q [B,Hq,L,E], K [B,Hkv,S,E], V [B,Hkv,S,Ev] with Hq a "
                     "multiple of Hkv");
  const OxAttr* sa = ox_node_attr(n, "scale");
  double scale = sa && sa->type == ONYX_ATTR_FLOAT ? sa->f : 1.0 / sqrt((double)E);
  OnyxElemType sty = q->type == ONYX_ELEM_FLOAT64 ? ONYX_ELEM_FLOAT64 : ONYX_ELEM_FLOAT32;
  int64_t sdims[4] = {B, Hq, L, S}, ydims[4] = {B, Hq, L, Ev};
  OxTensor *sc = NULL, *y = NULL;
  OX_TRY(ox_host_tensor_new(f, n, sty, sdims, 4, &sc));
  int64_t rep = Hq / Hkv;
  OnyxStatus* err = NULL;
  for (int64_t b = 0; !err && b < B; b++)
    for (int64_t h = 0; !err && h < Hq; h++)
      for (int64_t l = 0; !err && l < L; l++) {
        err = ox_frame_stop_status(f); /* the work per row grows with S and E */
        for (int64_t s = 0; !err && s < S; s++) {
          size_t qo = (size_t)(((b * Hq + h) * L + l) * E);
          size_t ko = (size_t)(((b * Hkv + h / rep) * S + s) * E);
          double acc = 0;
          for (int64_t e = 0; e < E; e++)
            acc += ox_getd(q, qo + (size_t)e) * ox_getd(k, ko + (size_t)e);
          ox_setd(sc, (size_t)(((b * Hq + h) * L + l) * S + s), acc * scale);
        }
      }
  if (!err) err = ox_flex_mod(f, st, &hs->subs[0], &sc, "score_mod");
  /* Softmax over S, in place. */
  for (size_t row = 0; !err && row < (size_t)(B * Hq * L); row++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s < S; s++)
      mx = fmax(mx, ox_getd(sc, row * (size_t)S + (size_t)s));
    for (int64_t s = 0; s < S; s++) {
      double e = mx == -INFINITY ? 0 : exp(ox_getd(sc, row * (size_t)S + (size_t)s) - mx);
      ox_setd(sc, row * (size_t)S + (size_t)s, e);
      sum += e;
    }
    for (int64_t s = 0; s < S; s++)
      ox_setd(sc, row * (size_t)S + (size_t)s,
              sum > 0 ? ox_getd(sc, row * (size_t)S + (size_t)s) / sum : 0);
  }
  if (!err) err = ox_flex_mod(f, st, &hs->subs[1], &sc, "prob_mod");
  if (!err) err = ox_host_tensor_new(f, n, q->type, ydims, 4, &y);
  for (int64_t b = 0; !err && b < B; b++)
    for (int64_t h = 0; !err && h < Hq; h++)
      for (int64_t l = 0; !err && l < L; l++) {
        err = ox_frame_stop_status(f);
        for (int64_t e = 0; !err && e < Ev; e++) {
          double acc = 0;
          for (int64_t s = 0; s < S; s++)
            acc += ox_getd(sc, (size_t)(((b * Hq + h) * L + l) * S + s)) *
                   ox_getd(v, (size_t)(((b * Hkv + h / rep) * S + s) * Ev + e));
          ox_setd(y, (size_t)(((b * Hq + h) * L + l) * Ev + e), acc);
        }
      }
  ox_tensor_free(sc);
  if (err) {
    ox_tensor_free(y);
    return err;
  }
  outs[0] = y;
  return NULL;
}

OnyxStatus* ox_host_run(OxFrame* f, const OxStep* st) {
  const OxNode* n = st->node;
  OxTensor** outs = calloc(st->n_out + 1, sizeof *outs);
  OxTensor** ins = calloc(st->n_in + 1, sizeof *ins);
  if (!outs || !ins) {
    free(outs);
    free(ins);
    return ox_oom();
  }
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < st->n_in; i++)
    ins[i] = ox_in(f, st, i);
  OxHostState* hs = st->state;
  if (!ox_flow_op(n))
    err = ox_seq_run(f, n, ins, outs);
  else if (!hs)
    err = ox_status(ONYX_FAIL, "internal: no nested plan");
  else if (ox_flex_op(n))
    err = ox_run_flex(f, st, hs, outs);
  else if (!strcmp(n->op_type, "If"))
    err = ox_run_if(f, st, hs, outs);
  else if (!strcmp(n->op_type, "Loop"))
    err = ox_run_loop(f, st, hs, outs);
  else if (!strcmp(n->op_type, "Scan"))
    err = ox_run_scan(f, st, hs, outs);
  else
    err = ox_run_seqmap(f, st, hs, outs);
  if (err && strncmp(err->message ? err->message : "", "node '", 6))
    err = ox_status_wrap(err, "node '%s' (%s) on host", n->name, n->op_type);
  for (size_t i = 0; !err && i < st->n_out; i++) {
    if (st->out[i] == OX_NO_SLOT) continue;
    if (!outs[i]) {
      err = ox_status(ONYX_RUNTIME_ERROR, "node '%s' (%s) on host did not produce its output %zu",
                      n->name, n->op_type, i);
      break;
    }
    f->values[st->out[i]] = outs[i];
    outs[i] = NULL;
  }
  ox_free_all(outs, st->n_out);
  free(outs);
  free(ins);
  return err;
}
