/* plan_text.c — the plan's debug texts (docs/debugging.md: ONYX_DUMP_PLAN,
 * ONYX_DUMP_MEMORY_PLAN): every step in order with its provider, slots,
 * frees and stream waits; every slot with its memory, producer and last
 * reader. */
#include <stdio.h>
#include <stdlib.h>
#include "ox_program.h"
#include "ox_streams.h"

const char* ox_plan_step_name(const OxProgram* s, const OxStep* st) {
  if (st->kind == OX_STEP_KERNEL || st->kind == OX_STEP_HOST) return st->node->name;
  if (st->kind == OX_STEP_GROUP) return s->part.groups[st->group].name;
  return s->plan.slots[st->in[0]].value->name;
}

const char* ox_plan_ep_name(const OxProgram* s, int32_t ep) {
  return ep >= 0 ? s->eps[ep].name : "host";
}

static void ox_mem_text(const OnyxMemoryDevice* m, char* buf, size_t len) {
  static const char* const kinds[] = {"cpu", "gpu", "npu", "other"};
  if (ox_memory_equal(m, &OX_HOST_MEMORY)) {
    snprintf(buf, len, "host");
    return;
  }
  snprintf(buf, len, "%s:%x:%d/mem%d", (unsigned)m->kind < 4 ? kinds[m->kind] : "?", m->vendor_id,
           m->device_id, m->mem_type);
}

static void ox_slot_list(OxStr* t, const OxProgram* s, const size_t* slots, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (slots[i] == OX_NO_SLOT)
      ox_str_addf(t, "%s-", i ? ", " : "");
    else
      ox_str_addf(t, "%s#%zu '%s'", i ? ", " : "", slots[i], s->plan.slots[slots[i]].value->name);
  }
}

/* The execution plan: every step in order with its provider and slots. */
char* ox_plan_text(const OxProgram* s) {
  const OxPlan* P = &s->plan;
  OxStr t = {0};
  ox_str_addf(&t, "execution plan of %s: %zu steps, %zu slots\n", s->source, P->n_steps,
              P->n_slots);
  for (size_t i = 0; i < P->n_steps; i++) {
    const OxStep* st = &P->steps[i];
    const OxStreamPlan* sp = P->streams;
    const OxStepSync* ss = sp && i < sp->n_steps ? &sp->steps[i] : NULL;
    if (st->kind == OX_STEP_COPY) {
      /* Who copies: the provider whose copy_tensors runs it, or the host. */
      int32_t path = ss ? ss->copy_path : OX_COPY_STAGED;
      const char* by = path == OX_COPY_HOST     ? "host memcpy"
                       : path == OX_COPY_BY_DST ? ox_plan_ep_name(s, st->copy_dst_ep)
                       : path == OX_COPY_BY_SRC ? ox_plan_ep_name(s, st->copy_src_ep)
                                                : "staging through host";
      ox_str_addf(&t, "  %3zu copy   '%s' %s -> %s by %s: ", i, ox_plan_step_name(s, st),
                  ox_plan_ep_name(s, st->copy_src_ep), ox_plan_ep_name(s, st->copy_dst_ep), by);
    } else {
      ox_str_addf(&t, "  %3zu %-6s '%s' (%s) on %s: ", i,
                  st->kind == OX_STEP_KERNEL ? "kernel"
                  : st->kind == OX_STEP_HOST ? "host"
                                             : "group",
                  ox_plan_step_name(s, st), st->kind != OX_STEP_GROUP ? st->node->op_type : "fused",
                  ox_plan_ep_name(s, st->ep));
    }
    ox_slot_list(&t, s, st->in, st->n_in);
    ox_str_addf(&t, " -> ");
    ox_slot_list(&t, s, st->out, st->n_out);
    if (st->n_free_after) {
      ox_str_addf(&t, "; frees ");
      ox_slot_list(&t, s, st->free_after, st->n_free_after);
    }
    for (size_t w = 0; ss && w < ss->n_waits; w++) {
      const OxCrossing* c = &sp->crossings[ss->waits[w]];
      ox_str_addf(&t, "; %s step %zu on %s", c->has_event ? "waits for" : "syncs for", c->step,
                  ox_plan_ep_name(s, c->ep));
    }
    if (ss && ss->record != OX_NO_EVENT && sp->crossings[ss->record].has_event)
      ox_str_addf(&t, "; records an event");
    ox_str_addf(&t, "\n");
  }
  return ox_str_take(&t);
}

/* The memory plan: every slot with its memory, producer and last use. */
char* ox_memory_plan_text(const OxProgram* s) {
  const OxPlan* P = &s->plan;
  OxStr t = {0};
  ox_str_addf(&t, "memory plan of %s: %zu slots\n", s->source, P->n_slots);
  for (size_t k = 0; k < P->n_slots; k++) {
    const OxSlot* sl = &P->slots[k];
    long made = -1, last = -1;
    for (size_t i = 0; i < P->n_steps; i++) {
      const OxStep* st = &P->steps[i];
      for (size_t o = 0; o < st->n_out; o++)
        if (st->out[o] == k) made = (long)i;
      for (size_t o = 0; o < st->n_in; o++)
        if (st->in[o] == k) last = (long)i;
    }
    const char* kind = sl->constant ? "constant" : sl->is_output ? "graph output" : "";
    for (size_t i = 0; i < s->graph->n_inputs; i++)
      if (P->input_slots[i] == k) kind = "graph input";
    char mem[96], shape[160];
    ox_mem_text(&sl->mem, mem, sizeof mem);
    const OxValue* v = sl->value;
    bool seq_map = v->kind == OX_VK_SEQ_MAP;
    if (seq_map || v->kind == OX_VK_MAP) /* ONNX-ML maps: key and value types */
      snprintf(shape, sizeof shape, "%smap(%s,%s)%s", seq_map ? "seq(" : "",
               ox_elem_name(v->map_key), ox_elem_name(v->type), seq_map ? ")" : "");
    else
      ox_shape_str(v->type, v->dims, v->rank, shape, sizeof shape);
    ox_str_addf(&t, "  #%-4zu %-28s %-24s %-18s", k, sl->value->name, shape, mem);
    if (made >= 0)
      ox_str_addf(&t, " made by step %ld", made);
    else
      ox_str_addf(&t, " (%s)", *kind ? kind : "unused");
    if (last >= 0) ox_str_addf(&t, ", last read by step %ld", last);
    if (*kind && made >= 0) ox_str_addf(&t, " (%s)", kind);
    ox_str_addf(&t, "\n");
  }
  return ox_str_take(&t);
}
