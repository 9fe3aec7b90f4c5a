/* executor.c — the sequential executor: runs a plan's steps over an
 * execution frame (one tensor per slot), freeing each slot after its last
 * use, and synchronizes every provider stream before returning. */
#include <stdlib.h>
#include <string.h>
#include "ox_session.h"

#define OX_NO_SLOT SIZE_MAX

static OnyxStatus* ox_run_kernel_step(OxFrame* f, const OxStep* st) {
  OnyxSession* s = f->session;
  OnyxKernelContext ctx = {.frame = f, .step = st};
  for (size_t i = 0; i < st->n_in; i++)
    if (st->in[i] != OX_NO_SLOT && !f->values[st->in[i]])
      return ox_status(ONYX_FAIL, "internal: input %zu of a step is missing", i);
  OnyxStatus* err;
  if (st->kind == OX_STEP_KERNEL)
    err = st->kernel->def.compute(st->state, &ctx);
  else
    err = s->part.groups[st->group].kernel.compute(s->part.groups[st->group].kernel.state, &ctx);
  for (size_t i = 0; i < ctx.n_scratch; i++)
    free(ctx.scratch[i]);
  free(ctx.scratch);
  const char* who = st->kind == OX_STEP_KERNEL ? st->node->name : s->part.groups[st->group].name;
  const char* op = st->kind == OX_STEP_KERNEL ? st->node->op_type : "fused group";
  if (err)
    return ox_status_wrap(err, "node '%s' (%s) on provider '%s'", who, op, s->eps[st->ep].name);
  for (size_t i = 0; i < st->n_out; i++)
    if (st->out[i] != OX_NO_SLOT && !f->values[st->out[i]])
      return ox_status(ONYX_RUNTIME_ERROR,
                       "node '%s' (%s) on provider '%s' did not produce its output %zu", who, op,
                       s->eps[st->ep].name, i);
  return NULL;
}

static OnyxStatus* ox_run_copy_step(OxFrame* f, const OxStep* st) {
  OnyxSession* s = f->session;
  const OxTensor* src = f->values[st->in[0]];
  OxTensor* dst = NULL;
  bool host = st->out_ep[0] < 0;
  OnyxStatus* err =
      host ? ox_tensor_new(src->type, src->dims, src->rank, &dst)
           : ox_session_alloc_tensor(s, st->out_ep[0], (OnyxMemType)st->out_mem[0].mem_type,
                                     src->type, src->dims, src->rank, &dst);
  if (!err) err = ox_copy_tensor(s, src, dst, st->copy_src_ep, st->copy_dst_ep);
  if (err) {
    ox_tensor_free(dst);
    return ox_status_wrap(err, "copying value '%s'", s->plan.slots[st->in[0]].value->name);
  }
  f->values[st->out[0]] = dst;
  return NULL;
}

static OnyxStatus* ox_sync_all(OnyxSession* s) {
  OnyxStatus* first = NULL;
  for (size_t e = 0; e < s->n_eps; e++) {
    OnyxEp* ep = s->eps[e].ep;
    if (!s->eps[e].stream || !ep->sync_stream) continue;
    OnyxStatus* st = ep->sync_stream(ep, s->eps[e].stream);
    if (st && !first)
      first = ox_status_wrap(st, "provider '%s': synchronizing its stream", s->eps[e].name);
    else
      ox_status_free(st);
  }
  return first;
}

OnyxStatus* ox_execute(OnyxSession* s, const OnyxRunOptions* run, OxTensor** feeds,
                       OxTensor** fetched, const bool* wanted) {
  const OxPlan* P = &s->plan;
  OxFrame f = {.session = s, .run = run};
  f.values = calloc(P->n_slots + 1, sizeof *f.values);
  bool* borrowed = calloc(P->n_slots + 1, sizeof *borrowed);
  if (!f.values || !borrowed) {
    free(f.values);
    free(borrowed);
    return ox_oom();
  }
  for (size_t i = 0; i < P->n_slots; i++)
    if (P->slots[i].constant) {
      f.values[i] = P->slots[i].constant;
      borrowed[i] = true;
    }
  for (size_t i = 0; i < s->graph->n_inputs; i++) {
    f.values[P->input_slots[i]] = feeds[i];
    borrowed[P->input_slots[i]] = true;
  }
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < P->n_steps && !err; i++) {
    if (run && __atomic_load_n(&run->terminate, __ATOMIC_ACQUIRE)) {
      err = ox_status(ONYX_CANCELLED, "the run%s%s%s was cancelled before step %zu of %zu",
                      run->tag ? " '" : "", run->tag ? run->tag : "", run->tag ? "'" : "", i,
                      P->n_steps);
      break;
    }
    const OxStep* st = &P->steps[i];
    err = st->kind == OX_STEP_COPY ? ox_run_copy_step(&f, st) : ox_run_kernel_step(&f, st);
    for (size_t k = 0; k < st->n_free_after; k++) {
      size_t slot = st->free_after[k];
      if (borrowed[slot]) continue;
      ox_tensor_free(f.values[slot]);
      f.values[slot] = NULL;
    }
  }
  OnyxStatus* sync = ox_sync_all(s);
  if (!err)
    err = sync;
  else
    ox_status_free(sync);
  for (size_t i = 0; !err && i < s->graph->n_outputs; i++) {
    if (!wanted[i]) continue;
    size_t slot = P->output_slots[i];
    if (borrowed[slot] || !f.values[slot]) {
      if (!f.values[slot]) {
        err = ox_status(ONYX_FAIL, "internal: output '%s' was not computed",
                        s->graph->outputs[i]->name);
        break;
      }
      err = ox_tensor_clone(f.values[slot], &fetched[i]);
    } else {
      fetched[i] = f.values[slot];
      f.values[slot] = NULL;
      borrowed[slot] = true; /* a second output of the same value clones */
      f.values[slot] = fetched[i];
    }
  }
  for (size_t i = 0; i < P->n_slots; i++)
    if (!borrowed[i]) ox_tensor_free(f.values[i]);
  if (err)
    for (size_t i = 0; i < s->graph->n_outputs; i++) {
      if (!fetched[i]) continue;
      /* a fetched tensor may be referenced twice (same value): free once */
      for (size_t k = i + 1; k < s->graph->n_outputs; k++)
        if (fetched[k] == fetched[i]) fetched[k] = NULL;
      ox_tensor_free(fetched[i]);
      fetched[i] = NULL;
    }
  free(f.values);
  free(borrowed);
  return err;
}
