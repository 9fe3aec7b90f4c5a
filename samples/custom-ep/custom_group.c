/* custom_group.c — a compiled group: the "custom" example provider claims
 * each MatMul -> Add chain (float32, 2-D) as one group (host->claim_group)
 * and compiles it into one kernel (OnyxEp.compile) whose single loop writes
 * Y = A·B + C without the intermediate product ever reaching memory.
 *
 * What the host guarantees about a group (docs/provider-guide.md, "Compiled
 * groups"):
 *   - the view's nodes are the claimed nodes in topological order;
 *   - the view's inputs are the values entering the group, each once, in the
 *     order the nodes read them (node by node, input by input), initializers
 *     included (host->value_constant gives their data while compiling);
 *   - the view's outputs are the values the group produces that are read
 *     outside it or are graph outputs, node by node, output by output;
 *   - the compiled kernel's context has exactly those inputs and outputs in
 *     that order, in this EP's default memory.
 * So compile finds each operand by value and remembers its index; it never
 * assumes the model wrote Add(product, C) rather than Add(C, product). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "custom_ep.h"

/* --- Node sets ------------------------------------------------------------------------------ */

static int compare_nodes(const void* a, const void* b) {
  uintptr_t x = (uintptr_t) * (const OnyxNode* const*)a;
  uintptr_t y = (uintptr_t) * (const OnyxNode* const*)b;
  return x < y ? -1 : x > y;
}

bool custom_node_set_has(const CustomNodeSet* s, const OnyxNode* n) {
  return s->count && bsearch(&n, s->nodes, s->count, sizeof *s->nodes, compare_nodes) != NULL;
}

void custom_node_set_free(CustomNodeSet* s) {
  free(s->nodes);
  s->nodes = NULL;
  s->count = 0;
}

static void node_set_sort(CustomNodeSet* s) {
  if (s->count) qsort(s->nodes, s->count, sizeof *s->nodes, compare_nodes);
}

/* --- Placement: which chains become groups ---------------------------------------------------- */

static bool is_onnx_op(const OnyxNode* n, const char* op) {
  const OnyxHostApi* H = custom_host;
  const char* d = H->node_domain(n);
  return strcmp(H->node_op_type(n), op) == 0 && (d[0] == '\0' || strcmp(d, "ai.onnx") == 0);
}

static bool is_f32(const OnyxValueInfo* v, int32_t min_rank, int32_t max_rank) {
  const OnyxHostApi* H = custom_host;
  int32_t r = v ? H->value_rank(v) : -1;
  return v && H->value_elem_type(v) == ONYX_ELEM_FLOAT32 && r >= min_rank && r <= max_rank;
}

/* The MatMul whose product is the Add's input `side`, when the two make a
 * chain this provider compiles: the product is read by this Add only (once)
 * and is no graph output, so it can stay inside the kernel; A and B are 2-D
 * float32; the Add's other operand is float32 of rank <= 2; both nodes are
 * in the view (no provider before this one took them). */
static const OnyxNode* chain_matmul(const OnyxNode* add, size_t side, const CustomNodeSet* view) {
  const OnyxHostApi* H = custom_host;
  const OnyxValueInfo* prod = H->node_input(add, side);
  const OnyxValueInfo* other = H->node_input(add, 1 - side);
  const OnyxNode* mm = prod ? H->value_producer(prod) : NULL;
  if (!mm || !is_onnx_op(mm, "MatMul") || !custom_node_set_has(view, mm)) return NULL;
  /* value_consumer_count (ABI 1.1) answers "who reads this value" directly;
   * scanning every node's inputs instead would make this loop O(n^2). */
  if (H->value_consumer_count(prod) != 1 || H->value_is_graph_output(prod)) return NULL;
  if (!is_f32(H->node_input(mm, 0), 2, 2) || !is_f32(H->node_input(mm, 1), 2, 2)) return NULL;
  if (!is_f32(other, 0, 2)) return NULL;
  return mm;
}

OnyxStatus* custom_claim_groups(CustomEp* c, const OnyxGraphView* g, OnyxCapabilityBuilder* b,
                                CustomNodeSet* taken) {
  const OnyxHostApi* H = custom_host;
  *taken = (CustomNodeSet){0};
  /* Groups need the 1.1 value-consumer functions; on a 1.0 host every node
   * is placed on its own (custom_get_capability). */
  if (!c->fuse_matmul_add || !custom_host_1_1) return NULL;
  size_t n = H->graph_node_count(g);
  CustomNodeSet view = {calloc(n ? n : 1, sizeof *view.nodes), n};
  taken->nodes = calloc(n ? n : 1, sizeof *taken->nodes);
  if (!view.nodes || !taken->nodes) {
    free(view.nodes);
    custom_node_set_free(taken);
    return H->status_create(ONYX_OUT_OF_MEMORY, "custom: out of memory");
  }
  for (size_t i = 0; i < n; i++)
    view.nodes[i] = H->graph_node(g, i);
  node_set_sort(&view);
  OnyxStatus* st = NULL;
  /* Each chain is found from its Add: a MatMul in a chain has exactly one
   * reader, so no MatMul can end up in two groups. */
  for (size_t i = 0; i < n && !st; i++) {
    const OnyxNode* add = H->graph_node(g, i);
    if (!is_onnx_op(add, "Add") || H->node_input_count(add) != 2 || !H->node_input(add, 0) ||
        !H->node_input(add, 1))
      continue;
    const OnyxNode* mm = chain_matmul(add, 0, &view);
    if (!mm) mm = chain_matmul(add, 1, &view);
    if (!mm) continue;
    /* The max_elements option applies to a group's output as to a node's. */
    const OnyxValueInfo* y = H->node_output(add, 0);
    int64_t elements = y ? custom_static_elements(y) : -1;
    if (c->max_elements > 0 && elements > c->max_elements) continue;
    /* The group's name is the fused node's name in explain and errors. */
    char name[256];
    const char* a = H->node_name(mm);
    const char* d = H->node_name(add);
    bool named =
        a && *a && d && *d && snprintf(name, sizeof name, "%s+%s", a, d) < (int)sizeof name;
    const OnyxNode* nodes[2] = {mm, add};
    /* A refused claim is a bug in the provider: pass the error up. */
    st = H->claim_group(b, nodes, 2, named ? name : NULL);
    if (!st) {
      taken->nodes[taken->count++] = mm;
      taken->nodes[taken->count++] = add;
    }
  }
  free(view.nodes);
  if (st) {
    custom_node_set_free(taken);
    return st;
  }
  node_set_sort(taken);
  return NULL;
}

/* --- Compile: one kernel for the group ------------------------------------------------------- */

typedef struct MatMulAdd {
  /* Indices into the kernel context's inputs (= the group view's inputs). */
  size_t a, b, c;
  char name[128]; /* for error messages: ctx_node is NULL in a group */
} MatMulAdd;

static size_t input_index(const OnyxGraphView* g, const OnyxValueInfo* v) {
  const OnyxHostApi* H = custom_host;
  for (size_t i = 0; i < H->graph_input_count(g); i++)
    if (H->graph_input(g, i) == v) return i;
  return SIZE_MAX;
}

static OnyxStatus* matmul_add_compute(void* state, OnyxKernelContext* ctx);

static void matmul_add_release(void* state) {
  free(state);
}

OnyxStatus* custom_compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out) {
  (void)ep;
  const OnyxHostApi* H = custom_host;
  /* This provider only claims MatMul -> Add pairs; the view lists them in
   * topological order, so the MatMul comes first. */
  const OnyxNode* mm = H->graph_node_count(group) == 2 ? H->graph_node(group, 0) : NULL;
  const OnyxNode* add = mm ? H->graph_node(group, 1) : NULL;
  if (!mm || !is_onnx_op(mm, "MatMul") || !is_onnx_op(add, "Add"))
    return H->status_create(ONYX_FAIL, "custom: compile: not a MatMul -> Add group");
  const OnyxValueInfo* prod = H->node_output(mm, 0);
  const OnyxValueInfo* other = H->node_input(add, H->node_input(add, 0) == prod ? 1 : 0);
  MatMulAdd* s = calloc(1, sizeof *s);
  if (!s) return H->status_create(ONYX_OUT_OF_MEMORY, "custom: out of memory");
  s->a = input_index(group, H->node_input(mm, 0));
  s->b = input_index(group, H->node_input(mm, 1));
  s->c = input_index(group, other);
  snprintf(s->name, sizeof s->name, "%s+%s", H->node_name(mm), H->node_name(add));
  /* One output: the Add's (the product is read by nothing else). */
  if (s->a == SIZE_MAX || s->b == SIZE_MAX || s->c == SIZE_MAX ||
      H->graph_output_count(group) != 1 || H->graph_output(group, 0) != H->node_output(add, 0)) {
    OnyxStatus* st =
        H->status_create(ONYX_FAIL, "custom: compile '%s': unexpected group boundary", s->name);
    free(s);
    return st;
  }
  /* An initializer is an input like any other; value_constant gives its data
   * in host memory now, e.g. to check or prepack it. At run time the kernel
   * reads the copy the host made in this EP's memory, through ctx_input. */
  const OnyxValueInfo* w = H->graph_input(group, s->b);
  H->log(ONYX_LOG_VERBOSE, CUSTOM_NAME, "group '%s': A = input %zu, B = input %zu%s, C = input %zu",
         s->name, s->a, s->b, H->value_constant(w) ? " (an initializer)" : "", s->c);
  *out = (OnyxCompiledKernel){.struct_size = sizeof *out,
                              .state = s,
                              .compute = matmul_add_compute,
                              .release = matmul_add_release};
  return NULL;
}

static OnyxStatus* group_error(const MatMulAdd* s, const char* what) {
  return custom_host->status_create(ONYX_RUNTIME_ERROR, "custom: group '%s': %s", s->name, what);
}

/* A dimension of the broadcast of sizes x and y; -1 if they do not broadcast. */
static int64_t broadcast(int64_t x, int64_t y) {
  return x == y || y == 1 ? x : x == 1 ? y : -1;
}

/* Y = A·B + C: A [m, k], B [k, n], C broadcast with the product [m, n]
 * (numpy rules, as Add's). One loop, one write per output element. */
static OnyxStatus* matmul_add_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = custom_host;
  const MatMulAdd* s = state;
  const OnyxTensor* a = H->ctx_input(ctx, s->a);
  const OnyxTensor* b = H->ctx_input(ctx, s->b);
  const OnyxTensor* c = H->ctx_input(ctx, s->c);
  if (!a || !b || !c) return group_error(s, "an input is missing");
  if (!custom_is_device_memory(H->tensor_memory(a)) ||
      !custom_is_device_memory(H->tensor_memory(b)) ||
      !custom_is_device_memory(H->tensor_memory(c)))
    return group_error(s, "an input is not in Example Accelerator memory");
  if (H->tensor_rank(a) != 2 || H->tensor_rank(b) != 2 || H->tensor_rank(c) > 2)
    return group_error(s, "MatMul inputs must be 2-D and the Add operand at most 2-D");
  const int64_t m = H->tensor_dims(a)[0], k = H->tensor_dims(a)[1];
  const int64_t n = H->tensor_dims(b)[1];
  if (H->tensor_dims(b)[0] != k) return group_error(s, "MatMul inner dimensions differ");
  /* C's dims, right-aligned to 2-D. */
  size_t rc = H->tensor_rank(c);
  const int64_t* dc = H->tensor_dims(c);
  int64_t c0 = rc == 2 ? dc[0] : 1, c1 = rc >= 1 ? dc[rc - 1] : 1;
  const int64_t dims[2] = {broadcast(m, c0), broadcast(n, c1)};
  if (dims[0] < 0 || dims[1] < 0)
    return group_error(s, "the Add operand does not broadcast with the product");
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, dims, 2, &y);
  if (st) return st;
  const float* pa = H->tensor_data(a);
  const float* pb = H->tensor_data(b);
  const float* pc = H->tensor_data(c);
  float* py = H->tensor_mutable_data(y);
  /* Strides of 0 repeat a broadcast row or column. */
  const int64_t a_row = m == 1 ? 0 : k, b_col = n == 1 ? 0 : 1;
  const int64_t c_row = c0 == 1 ? 0 : c1, c_col = c1 == 1 ? 0 : 1;
  for (int64_t i = 0; i < dims[0]; i++)
    for (int64_t j = 0; j < dims[1]; j++) {
      const float* ra = pa + i * a_row;
      const float* cb = pb + j * b_col;
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p++)
        acc += ra[p] * cb[p * n];
      py[i * dims[1] + j] = acc + pc[i * c_row + j * c_col];
    }
  return NULL;
}
