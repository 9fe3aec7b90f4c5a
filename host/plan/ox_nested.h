/* ox_nested.h — the nested plans of a control-flow step (If, Loop, Scan,
 * SequenceMap, FlexAttention): each subgraph attribute becomes, at plan
 * time, a nested session sharing the parent's providers, options and thread
 * pool, with its own partition and plan (host/plan/nested.c). Its graph
 * inputs are the subgraph's formal inputs followed by the outer-scope values
 * it reads, which the parent node carries as implicit inputs
 * (OxNode.n_implicit). host/exec/control.c runs them. */
#ifndef OX_NESTED_H
#define OX_NESTED_H

#include "ox_plan.h"

struct OxProgram;

typedef struct OxSub {
  struct OxProgram* s;
  size_t n_formal;
  size_t* outer; /* per extra input: index of the parent node's input */
  size_t n_outer;
} OxSub;

typedef struct OxHostState {
  OxSub subs[2];
  size_t n_subs;
} OxHostState;

/* Plan time: the nested plans of a flow step's subgraphs (st->state, an
 * OxHostState); nothing for other steps. Errors name the node and graph. */
OnyxStatus* ox_host_prepare(struct OxProgram* s, OxStep* st);
void ox_host_release(OxStep* st);

#endif
