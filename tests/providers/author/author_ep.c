/* author_ep.c — a provider written the way an outside author writes one,
 * against the SDK headers alone, for tests/unit/placement. Built three times
 * (tests/providers/author/CMakeLists.txt), AUTHOR_MODE picking how it takes
 * float32 MatMul (2-D B) and Add nodes:
 *
 *   AUTHOR_KERNELS   "authork": kernels only, the host's default placement.
 *   AUTHOR_GROUP     "authorg": kernels, plus a get_capability that claims
 *                    each MatMul whose product is read only by an Add as one
 *                    compiled group (compile: one loop for both).
 *   AUTHOR_TRANSFORM "authort": kernels, plus its own op com.author.MatMulAdd
 *                    (schema and kernel) that its OnyxEp.transform makes out
 *                    of MatMul -> Add after placement (ABI 1.1).
 *
 * Every kernel counts its calls; author_calls() (exported) returns the count,
 * so a test can tell that the nodes placed here ran here. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx_ep.h"

#define AUTHOR_KERNELS   0
#define AUTHOR_GROUP     1
#define AUTHOR_TRANSFORM 2
#ifndef AUTHOR_MODE
#error "set AUTHOR_MODE"
#endif
#ifndef AUTHOR_NAME
#error "set AUTHOR_NAME"
#endif
#define AUTHOR_DOMAIN "com.author"

static const OnyxHostApi* H;
static atomic_long author_call_count;

ONYX_EXPORT long author_calls(void) {
  return atomic_load(&author_call_count);
}

/* --- the arithmetic ------------------------------------------------------------ */

/* Y[m, n] = A[m, k] B[k, n] (+ C broadcast over the rows when C is given:
 * C of N values, or of M x N). A may have leading batch dims. */
static OnyxStatus* matmul_into(const OnyxTensor* a, const OnyxTensor* b, const OnyxTensor* c,
                               OnyxKernelContext* ctx, size_t out_index) {
  size_t ra = H->tensor_rank(a);
  const int64_t* da = H->tensor_dims(a);
  const int64_t* db = H->tensor_dims(b);
  if (H->tensor_rank(b) != 2 || ra < 1 || da[ra - 1] != db[0])
    return H->status_create(ONYX_INVALID_ARGUMENT, AUTHOR_NAME ": MatMul shapes do not match");
  int64_t k = db[0], n = db[1];
  int64_t dims[8];
  if (ra > 7) return H->status_create(ONYX_NOT_IMPLEMENTED, AUTHOR_NAME ": rank above 7");
  for (size_t i = 0; i + 1 < ra; i++)
    dims[i] = da[i];
  dims[ra - 1] = n;
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, out_index, dims, ra, &y);
  if (st) return st;
  size_t m = k ? H->tensor_elem_count(a) / (size_t)k : 0;
  size_t nc = c ? H->tensor_elem_count(c) : 0;
  const float *pa = H->tensor_data(a), *pb = H->tensor_data(b);
  const float* pc = c ? H->tensor_data(c) : NULL;
  float* py = H->tensor_mutable_data(y);
  for (size_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++)
        acc += (double)pa[i * (size_t)k + (size_t)t] * pb[(size_t)t * (size_t)n + (size_t)j];
      if (pc) acc += pc[nc == (size_t)n ? (size_t)j : (i * (size_t)n + (size_t)j) % nc];
      py[i * (size_t)n + (size_t)j] = (float)acc;
    }
  return NULL;
}

static OnyxStatus* k_matmul(void* state, OnyxKernelContext* ctx) {
  (void)state;
  atomic_fetch_add(&author_call_count, 1);
  return matmul_into(H->ctx_input(ctx, 0), H->ctx_input(ctx, 1), NULL, ctx, 0);
}

/* Add of two same-shape tensors, or of a tensor and a last-axis row. */
static OnyxStatus* k_add(void* state, OnyxKernelContext* ctx) {
  (void)state;
  atomic_fetch_add(&author_call_count, 1);
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = H->ctx_input(ctx, 1);
  if (H->tensor_elem_count(b) > H->tensor_elem_count(a)) {
    const OnyxTensor* t = a;
    a = b;
    b = t;
  }
  size_t na = H->tensor_elem_count(a), nb = H->tensor_elem_count(b);
  if (!nb || na % nb)
    return H->status_create(ONYX_NOT_IMPLEMENTED, AUTHOR_NAME ": Add broadcast not supported");
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(a), H->tensor_rank(a), &y);
  if (st) return st;
  const float *pa = H->tensor_data(a), *pb = H->tensor_data(b);
  float* py = H->tensor_mutable_data(y);
  for (size_t i = 0; i < na; i++)
    py[i] = pa[i] + pb[i % nb];
  return NULL;
}

/* com.author.MatMulAdd(A, B, C) and the compiled group: inputs in the group
 * view's order (A, B, C for a MatMul -> Add chain). */
static OnyxStatus* k_matmul_add(void* state, OnyxKernelContext* ctx) {
  (void)state;
  atomic_fetch_add(&author_call_count, 1);
  return matmul_into(H->ctx_input(ctx, 0), H->ctx_input(ctx, 1), H->ctx_input(ctx, 2), ctx, 0);
}

/* --- registration -------------------------------------------------------------------- */

static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint T[] = {{"T", f32, 1}};

static OnyxStatus* reg_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "MatMul",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = T,
                     .type_constraint_count = 1,
                     .compute = k_matmul};
  OnyxStatus* st = H->register_kernel(r, &d);
  if (st) return st;
  d.op_type = "Add";
  d.compute = k_add;
  st = H->register_kernel(r, &d);
  if (st || AUTHOR_MODE != AUTHOR_TRANSFORM) return st;
  d.domain = AUTHOR_DOMAIN;
  d.op_type = "MatMulAdd";
  d.compute = k_matmul_add;
  return H->register_kernel(r, &d);
}

static OnyxStatus* reg_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r) {
  (void)p;
  if (AUTHOR_MODE != AUTHOR_TRANSFORM) return NULL;
  static const OnyxFormalParam ins[] = {
      {"A", "T", ONYX_PARAM_SINGLE}, {"B", "T", ONYX_PARAM_SINGLE}, {"C", "T", ONYX_PARAM_SINGLE}};
  static const OnyxFormalParam outs[] = {{"Y", "T", ONYX_PARAM_SINGLE}};
  OnyxSchemaDef s = {.struct_size = sizeof s,
                     .domain = AUTHOR_DOMAIN,
                     .op_type = "MatMulAdd",
                     .since_version = 1,
                     .inputs = ins,
                     .input_count = 3,
                     .outputs = outs,
                     .output_count = 1,
                     .type_constraints = T,
                     .type_constraint_count = 1};
  return H->register_schema(r, &s);
}

/* --- MatMul -> Add chains ------------------------------------------------------------- */

/* n is a float32 MatMul with a 2-D B whose product only an Add reads, and
 * that Add adds a row of N values or a same-shape tensor: returns the Add
 * and which of its inputs is the other operand. */
static const OnyxNode* chain_add(const OnyxNode* n, size_t* other) {
  if (strcmp(H->node_op_type(n), "MatMul") || *H->node_domain(n)) return NULL;
  const OnyxValueInfo* b = H->node_input(n, 1);
  const OnyxValueInfo* p = H->node_output(n, 0);
  if (!b || !p || H->value_rank(b) != 2 || H->value_elem_type(p) != ONYX_ELEM_FLOAT32) return NULL;
  if (H->value_consumer_count(p) != 1 || H->value_is_graph_output(p)) return NULL;
  const OnyxNode* add = H->value_consumer(p, 0);
  if (strcmp(H->node_op_type(add), "Add") || *H->node_domain(add)) return NULL;
  *other = H->node_input(add, 0) == p ? 1 : 0;
  const OnyxValueInfo* c = H->node_input(add, *other);
  int32_t rc = H->value_rank(c), rp = H->value_rank(p);
  if (rc < 1 || rp < 1 || H->value_dims(c)[rc - 1] != H->value_dims(p)[rp - 1]) return NULL;
  return add;
}

static int in_view(const OnyxGraphView* g, const OnyxNode* n) {
  for (size_t i = 0; i < H->graph_node_count(g); i++)
    if (H->graph_node(g, i) == n) return 1;
  return 0;
}

static OnyxStatus* get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  (void)ep;
  size_t n = H->graph_node_count(g);
  const OnyxNode** grouped = calloc(n + 1, sizeof *grouped);
  if (!grouped) return H->status_create(ONYX_OUT_OF_MEMORY, AUTHOR_NAME ": out of memory");
  size_t n_grouped = 0;
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    const OnyxNode* mm = H->graph_node(g, i);
    size_t other = 0;
    const OnyxNode* add = chain_add(mm, &other);
    if (!add || !in_view(g, add) || !H->has_kernel(b, mm, NULL)) continue;
    const OnyxNode* pair[2] = {mm, add};
    st = H->claim_group(b, pair, 2, H->node_name(mm));
    grouped[n_grouped++] = add;
    grouped[n_grouped++] = mm;
  }
  for (size_t i = 0; i < n && !st; i++) {
    const OnyxNode* x = H->graph_node(g, i);
    int taken = 0;
    for (size_t k = 0; k < n_grouped && !taken; k++)
      taken = grouped[k] == x;
    const char* why = NULL;
    if (taken) continue;
    if (H->has_kernel(b, x, &why)) {
      st = H->claim_node(b, x);
    } else { /* prefixed with its name, as authors write their messages */
      char text[512];
      snprintf(text, sizeof text, AUTHOR_NAME ": %s", why ? why : "no kernel");
      H->decline_node(b, x, text);
    }
  }
  free(grouped);
  return st;
}

static OnyxStatus* compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out) {
  (void)ep;
  /* A chain's view: inputs A, B (MatMul's) then C (the Add's other operand). */
  if (H->graph_node_count(group) != 2 || H->graph_input_count(group) != 3 ||
      H->graph_output_count(group) != 1)
    return H->status_create(ONYX_NOT_IMPLEMENTED, AUTHOR_NAME ": not a MatMul -> Add group");
  out->compute = k_matmul_add;
  out->state = NULL;
  return NULL;
}

static OnyxStatus* transform(OnyxEp* ep, const OnyxGraphView* nodes, OnyxGraphEdit* edit) {
  (void)ep;
  for (size_t i = 0; i < H->graph_node_count(nodes); i++) {
    const OnyxNode* mm = H->graph_node(nodes, i);
    size_t other = 0;
    const OnyxNode* add = chain_add(mm, &other);
    if (!add || !in_view(nodes, add)) continue;
    const OnyxValueInfo* ins[3] = {H->node_input(mm, 0), H->node_input(mm, 1),
                                   H->node_input(add, other)};
    const OnyxValueInfo* outs[1] = {H->node_output(add, 0)};
    const OnyxNode* pair[2] = {mm, add};
    OnyxStatus* st =
        H->edit_replace(edit, pair, 2, AUTHOR_DOMAIN, "MatMulAdd", NULL, ins, 3, outs, 1, NULL);
    if (st) return st;
    /* The host keeps the view current: the new node now stands at i. */
  }
  return NULL;
}

/* --- provider and EP ------------------------------------------------------------------ */

static OnyxStatus* device_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static void ep_release(OnyxEp* ep) {
  free(ep);
}

static OnyxStatus* create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  OnyxEp* ep = calloc(1, sizeof *ep);
  if (!ep) return H->status_create(ONYX_OUT_OF_MEMORY, AUTHOR_NAME ": out of memory");
  ep->struct_size = sizeof *ep;
  ep->provider = p;
  ep->release = ep_release;
  if (AUTHOR_MODE == AUTHOR_GROUP) {
    ep->get_capability = get_capability;
    ep->compile = compile;
  }
  if (AUTHOR_MODE == AUTHOR_TRANSFORM) ep->transform = transform;
  *out = ep;
  return NULL;
}

static const OnyxProvider provider = {.struct_size = sizeof provider,
                                      .abi_major = ONYX_ABI_VERSION_MAJOR,
                                      .abi_minor = ONYX_ABI_VERSION_MINOR,
                                      .name = AUTHOR_NAME,
                                      .vendor = "an outside author",
                                      .version = "0.3",
                                      .device_count = device_count,
                                      .register_kernels = reg_kernels,
                                      .register_schemas = reg_schemas,
                                      .create_ep = create_ep};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(ONYX_INVALID_ARGUMENT, AUTHOR_NAME ": wrong ABI major");
  H = host;
  *out = &provider;
  return NULL;
}
