/* fake_compile.c — compiles a claimed group into one kernel: a tiny program
 * that interprets the group's nodes in topological order over "slots"
 * (the group's inputs, then one slot per node output). Outputs that leave the
 * group are written straight into the context's outputs; the others live in
 * scratch memory for the duration of one compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake.h"

typedef struct Step {
  const FakeOp* op;
  size_t in[2]; /* slots */
  char* node;   /* for messages */
} Step;         /* step s writes slot n_inputs + s */

typedef struct Program {
  FakeEp* f;
  char* name;
  size_t n_inputs;
  char** input_names;
  size_t n_steps;
  Step* steps;
  size_t n_outputs;
  size_t* slot_output; /* per slot: the group output it is, or SIZE_MAX */
} Program;

static void program_free(void* state) {
  Program* p = state;
  if (!p) return;
  for (size_t i = 0; i < p->n_inputs; i++)
    free(p->input_names[i]);
  for (size_t s = 0; s < p->n_steps; s++)
    free(p->steps[s].node);
  free(p->input_names);
  free(p->steps);
  free(p->slot_output);
  free(p->name);
  free(p);
}

static char* dup_str(const char* s) {
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* --- running ------------------------------------------------------------------------ */

typedef struct Slot {
  const float* data;
  int64_t dims[FAKE_MAX_RANK];
  size_t rank;
} Slot;

static OnyxStatus* load_inputs(Program* p, OnyxKernelContext* ctx, Slot* slots) {
  const OnyxHostApi* H = fake_host;
  for (size_t i = 0; i < p->n_inputs; i++) {
    char what[160];
    snprintf(what, sizeof what, "%zu ('%s')", i, p->input_names[i]);
    const OnyxTensor* t = H->ctx_input(ctx, i);
    if (!t || H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32 || H->tensor_rank(t) > FAKE_MAX_RANK)
      return H->status_create(ONYX_INVALID_ARGUMENT,
                              "fake: %s: input %s is missing, not float32 or of rank "
                              "above %d",
                              p->name, what, FAKE_MAX_RANK);
    OnyxStatus* st = fake_check_input(p->f, t, what, p->name);
    if (st) return st;
    slots[i].data = H->tensor_data(t);
    slots[i].rank = H->tensor_rank(t);
    memcpy(slots[i].dims, H->tensor_dims(t), slots[i].rank * sizeof(int64_t));
  }
  return NULL;
}

/* Where step s writes: the context's output if the value leaves the group,
 * scratch otherwise. */
static OnyxStatus* step_target(Program* p, OnyxKernelContext* ctx, size_t slot, const Slot* out,
                               float** data) {
  const OnyxHostApi* H = fake_host;
  size_t o = p->slot_output[slot];
  if (o != SIZE_MAX) {
    OnyxTensor* y = NULL;
    OnyxStatus* st = H->ctx_output(ctx, o, out->dims, out->rank, &y);
    if (st) return st;
    *data = H->tensor_mutable_data(y);
    return NULL;
  }
  size_t n = 1;
  for (size_t j = 0; j < out->rank; j++)
    n *= (size_t)out->dims[j];
  *data = H->ctx_scratch(ctx, n ? n * sizeof(float) : sizeof(float));
  if (!*data)
    return H->status_create(ONYX_OUT_OF_MEMORY, "fake: %s: no scratch memory for %zu floats",
                            p->name, n);
  return NULL;
}

static OnyxStatus* run_step(Program* p, OnyxKernelContext* ctx, Slot* slots, size_t s) {
  const Step* step = &p->steps[s];
  size_t n_in = step->op->binary ? 2 : 1;
  const float* in[2] = {NULL, NULL};
  const int64_t* dims[2] = {NULL, NULL};
  size_t rank[2] = {0, 0};
  for (size_t k = 0; k < n_in; k++) {
    in[k] = slots[step->in[k]].data;
    dims[k] = slots[step->in[k]].dims;
    rank[k] = slots[step->in[k]].rank;
  }
  Slot* out = &slots[p->n_inputs + s];
  float* data = NULL;
  OnyxStatus* st = fake_op_shape(step->op, dims, rank, out->dims, &out->rank, step->node);
  if (!st) st = step_target(p, ctx, p->n_inputs + s, out, &data);
  if (st) return st;
  fake_op_apply(step->op, in, dims, rank, data, out->dims, out->rank);
  out->data = data;
  return NULL;
}

static OnyxStatus* program_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = fake_host;
  Program* p = state;
  if (p->f->fail == FAKE_FAIL_COMPUTE) return fake_injected_compute_failure(p->f, p->name);
  if (H->ctx_input_count(ctx) != p->n_inputs || H->ctx_output_count(ctx) != p->n_outputs)
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "fake: %s was compiled for %zu inputs and %zu outputs, called "
                            "with %zu and %zu",
                            p->name, p->n_inputs, p->n_outputs, H->ctx_input_count(ctx),
                            H->ctx_output_count(ctx));
  /* A group computes on the calling thread: the work queued before it on
   * an asynchronous stream (its inputs, and earlier readers of the memory
   * its outputs get) must be finished first. */
  fake_stream_drain(H->ctx_stream(ctx));
  /* Per call, not per program: compute may run concurrently. */
  Slot* slots = calloc(p->n_inputs + p->n_steps, sizeof *slots);
  if (!slots) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: %s: out of memory", p->name);
  OnyxStatus* st = load_inputs(p, ctx, slots);
  for (size_t s = 0; s < p->n_steps && !st; s++)
    st = run_step(p, ctx, slots, s);
  free(slots);
  if (!st) atomic_fetch_add(&p->f->stats.kernels_run, 1);
  return st;
}

/* --- compiling ----------------------------------------------------------------------- */

/* The latest slot named `name` among the first `n`; SIZE_MAX if none. */
static size_t find_slot(const char* const* names, size_t n, const char* name) {
  for (size_t i = n; i-- > 0;)
    if (names[i] && strcmp(names[i], name) == 0) return i;
  return SIZE_MAX;
}

static OnyxStatus* compile_inputs(Program* p, const OnyxGraphView* g, const char** names) {
  const OnyxHostApi* H = fake_host;
  for (size_t i = 0; i < p->n_inputs; i++) {
    const OnyxValueInfo* v = H->graph_input(g, i);
    names[i] = H->value_name(v);
    p->input_names[i] = dup_str(names[i]);
    if (!p->input_names[i]) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
    if (H->value_elem_type(v) != ONYX_ELEM_FLOAT32)
      return H->status_create(ONYX_NOT_IMPLEMENTED, "fake: %s: input '%s' is not float32", p->name,
                              names[i]);
  }
  return NULL;
}

static OnyxStatus* compile_step(Program* p, const OnyxNode* node, size_t s, const char** names) {
  const OnyxHostApi* H = fake_host;
  Step* step = &p->steps[s];
  const char* node_name = H->node_name(node);
  step->node = dup_str(node_name);
  if (!step->node) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
  step->op = fake_op_find(H->node_op_type(node));
  size_t n_in = step->op ? (step->op->binary ? 2u : 1u) : 0u;
  if (!step->op || H->node_domain(node)[0] != '\0' || H->node_input_count(node) != n_in ||
      H->node_output_count(node) != 1 || !H->node_output(node, 0))
    return H->status_create(ONYX_NOT_IMPLEMENTED, "fake: %s: cannot compile node '%s' (%s)",
                            p->name, node_name, H->node_op_type(node));
  size_t known = p->n_inputs + s;
  for (size_t k = 0; k < n_in; k++) {
    const OnyxValueInfo* v = H->node_input(node, k);
    step->in[k] = v ? find_slot(names, known, H->value_name(v)) : SIZE_MAX;
    if (step->in[k] == SIZE_MAX)
      return H->status_create(ONYX_INVALID_ARGUMENT,
                              "fake: %s: input %zu of node '%s' is neither a group input "
                              "nor produced earlier in the group",
                              p->name, k, node_name);
  }
  names[known] = H->value_name(H->node_output(node, 0));
  return NULL;
}

static OnyxStatus* compile_outputs(Program* p, const OnyxGraphView* g, const char** names) {
  const OnyxHostApi* H = fake_host;
  size_t n_slots = p->n_inputs + p->n_steps;
  for (size_t i = 0; i < n_slots; i++)
    p->slot_output[i] = SIZE_MAX;
  for (size_t o = 0; o < p->n_outputs; o++) {
    const char* name = H->value_name(H->graph_output(g, o));
    size_t slot = find_slot(names, n_slots, name);
    if (slot == SIZE_MAX || slot < p->n_inputs || p->slot_output[slot] != SIZE_MAX)
      return H->status_create(ONYX_INVALID_ARGUMENT,
                              "fake: %s: output '%s' is not produced once by the group", p->name,
                              name);
    p->slot_output[slot] = o;
  }
  return NULL;
}

static OnyxStatus* compile_program(Program* p, const OnyxGraphView* g) {
  const OnyxHostApi* H = fake_host;
  const char** names = calloc(p->n_inputs + p->n_steps + 1, sizeof *names);
  if (!names) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
  OnyxStatus* st = compile_inputs(p, g, names);
  for (size_t s = 0; s < p->n_steps && !st; s++)
    st = compile_step(p, H->graph_node(g, s), s, names);
  if (!st) st = compile_outputs(p, g, names);
  free(names);
  return st;
}

static Program* program_alloc(FakeEp* f, const OnyxGraphView* g) {
  const OnyxHostApi* H = fake_host;
  Program* p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->f = f;
  p->n_inputs = H->graph_input_count(g);
  p->n_steps = H->graph_node_count(g);
  p->n_outputs = H->graph_output_count(g);
  /* The fused node's name is the host's; name the program by its first node. */
  const char* first = p->n_steps ? H->node_name(H->graph_node(g, 0)) : "";
  size_t len = strlen(first) + 24;
  p->name = malloc(len);
  if (p->name) snprintf(p->name, len, "group at node '%s'", first);
  p->input_names = calloc(p->n_inputs + 1, sizeof *p->input_names);
  p->steps = calloc(p->n_steps + 1, sizeof *p->steps);
  p->slot_output = calloc(p->n_inputs + p->n_steps + 1, sizeof *p->slot_output);
  if (!p->name || !p->input_names || !p->steps || !p->slot_output) {
    program_free(p);
    return NULL;
  }
  return p;
}

OnyxStatus* fake_compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out) {
  const OnyxHostApi* H = fake_host;
  FakeEp* f = fake_ep(ep);
  if (f->fail == FAKE_FAIL_COMPILE)
    return H->status_create(ONYX_FAIL, "fake: compile failed (option fail=compile)");
  Program* p = program_alloc(f, group);
  if (!p) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory compiling a group");
  OnyxStatus* st = compile_program(p, group);
  if (st) {
    program_free(p);
    return st;
  }
  atomic_fetch_add(&f->stats.compiled_groups, 1);
  *out = (OnyxCompiledKernel){
      .struct_size = sizeof *out, .state = p, .compute = program_compute, .release = program_free};
  return NULL;
}
