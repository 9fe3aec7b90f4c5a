/* cachetest_provider.c — the provider of cachetest.h. Sees the SDK headers only. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cachetest.h"

int cachetest_compiles, cachetest_saves, cachetest_loads, cachetest_refusals;
unsigned cachetest_format = 1;
int cachetest_abi10, cachetest_slot_misreads;

static const OnyxHostApi* H;

enum { OP_ADD = 1, OP_MUL = 2, OP_RELU = 3 };

typedef struct Op {
  uint32_t code;
  float* k; /* Add/Mul: the constant operand */
  size_t n_k;
} Op;

typedef struct Prog {
  Op* ops;
  size_t n_ops;
  size_t x_in; /* the group input holding the data */
} Prog;

static OnyxStatus* err(const char* what) {
  return H->status_create(ONYX_FAIL, "provider 'cachetest': %s", what);
}

static uint32_t op_code(const OnyxNode* n) {
  const char* op = H->node_op_type(n);
  if (*H->node_domain(n)) return 0;
  return !strcmp(op, "Add")    ? OP_ADD
         : !strcmp(op, "Mul")  ? OP_MUL
         : !strcmp(op, "Relu") ? OP_RELU
                               : 0;
}

static void prog_free(void* state) {
  Prog* p = state;
  if (!p) return;
  for (size_t i = 0; i < p->n_ops; i++)
    free(p->ops[i].k);
  free(p->ops);
  free(p);
}

static OnyxStatus* compute(void* state, OnyxKernelContext* ctx) {
  const Prog* p = state;
  const OnyxTensor* x = H->ctx_input(ctx, p->x_in);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  const float* a = H->tensor_data(x);
  float* b = H->tensor_mutable_data(y);
  size_t n = H->tensor_elem_count(x);
  for (size_t i = 0; i < n; i++) {
    float v = a[i];
    for (size_t k = 0; k < p->n_ops; k++) {
      const Op* op = &p->ops[k];
      float c = op->n_k ? op->k[op->n_k == 1 ? 0 : i % op->n_k] : 0.0f;
      v = op->code == OP_ADD ? v + c : op->code == OP_MUL ? v * c : (v > 0.0f ? v : 0.0f);
    }
    b[i] = v;
  }
  return NULL;
}

static OnyxStatus* get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  size_t n = H->graph_node_count(g), m = 0;
  const OnyxNode** nodes = calloc(n ? n : 1, sizeof *nodes);
  if (!nodes) return err("out of memory");
  for (size_t i = 0; i < n; i++) {
    const OnyxNode* node = H->graph_node(g, i);
    const OnyxValueInfo* out = H->node_output(node, 0);
    if (op_code(node) && out && H->value_elem_type(out) == ONYX_ELEM_FLOAT32) nodes[m++] = node;
  }
  OnyxStatus* st = m ? H->claim_group(b, nodes, m, "cachetest_group") : NULL;
  free(nodes);
  return st;
}

static long input_index(const OnyxGraphView* g, const OnyxValueInfo* v) {
  for (size_t i = 0; i < H->graph_input_count(g); i++)
    if (H->graph_input(g, i) == v) return (long)i;
  return -1;
}

/* The program of a group: checks the chain and, with `consts`, copies the
 * constant operands. */
static OnyxStatus* build(const OnyxGraphView* g, bool consts, Prog** out) {
  size_t n = H->graph_node_count(g);
  Prog* p = calloc(1, sizeof *p);
  if (!p || !(p->ops = calloc(n ? n : 1, sizeof *p->ops))) {
    free(p);
    return err("out of memory");
  }
  p->n_ops = n;
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    const OnyxNode* node = H->graph_node(g, i);
    Op* op = &p->ops[i];
    op->code = op_code(node);
    const OnyxValueInfo* x = H->node_input(node, 0);
    if (i == 0) {
      long at = input_index(g, x);
      if (at < 0) st = err("the first node does not read a group input");
      p->x_in = (size_t)(at < 0 ? 0 : at);
    } else if (x != H->node_output(H->graph_node(g, i - 1), 0)) {
      st = err("the group is not a chain");
    }
    if (st || op->code == OP_RELU) continue;
    const OnyxTensor* c =
        H->node_input_count(node) > 1 ? H->value_constant(H->node_input(node, 1)) : NULL;
    if (!c || H->tensor_elem_type(c) != ONYX_ELEM_FLOAT32) {
      st = err("a second operand is not a float32 constant");
      continue;
    }
    op->n_k = H->tensor_elem_count(c);
    if (!consts) continue;
    op->k = malloc((op->n_k ? op->n_k : 1) * sizeof *op->k);
    if (!op->k)
      st = err("out of memory");
    else if (op->n_k)
      memcpy(op->k, H->tensor_data(c), op->n_k * sizeof *op->k);
  }
  if (st) {
    prog_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

static OnyxStatus* compile(OnyxEp* ep, const OnyxGraphView* g, OnyxCompiledKernel* out) {
  __atomic_fetch_add(&cachetest_compiles, 1, __ATOMIC_RELAXED);
  Prog* p = NULL;
  OnyxStatus* st = build(g, true, &p);
  if (st) return st;
  *out = (OnyxCompiledKernel){
      .struct_size = sizeof *out, .state = p, .compute = compute, .release = prog_free};
  return NULL;
}

/* Payload: "CTST", u32 format, u32 op count, u32 data input, then per op a
 * u32 code, a u64 constant count and the constants. */
static OnyxStatus* save_compiled(OnyxEp* ep, const OnyxGraphView* g, const OnyxCompiledKernel* k,
                                 OnyxBlobWriter* w) {
  __atomic_fetch_add(&cachetest_saves, 1, __ATOMIC_RELAXED);
  const Prog* p = k->state;
  uint32_t head[3] = {cachetest_format, (uint32_t)p->n_ops, (uint32_t)p->x_in};
  OnyxStatus* st = H->blob_write(w, "CTST", 4);
  if (!st) st = H->blob_write(w, head, sizeof head);
  for (size_t i = 0; i < p->n_ops && !st; i++) {
    uint64_t n = p->ops[i].n_k;
    st = H->blob_write(w, &p->ops[i].code, sizeof p->ops[i].code);
    if (!st) st = H->blob_write(w, &n, sizeof n);
    if (!st && n) st = H->blob_write(w, p->ops[i].k, (size_t)n * sizeof(float));
  }
  return st;
}

static bool take(const uint8_t** p, size_t* left, void* out, size_t n) {
  if (n > *left) return false;
  memcpy(out, *p, n);
  *p += n;
  *left -= n;
  return true;
}

static OnyxStatus* refuse(Prog* p, const char* why) {
  __atomic_fetch_add(&cachetest_refusals, 1, __ATOMIC_RELAXED);
  prog_free(p);
  return err(why);
}

static OnyxStatus* load_compiled(OnyxEp* ep, const OnyxGraphView* g, const void* data, size_t bytes,
                                 OnyxCompiledKernel* out) {
  const uint8_t* q = data;
  size_t left = bytes;
  char magic[4];
  uint32_t head[3];
  if (!take(&q, &left, magic, 4) || memcmp(magic, "CTST", 4) || !take(&q, &left, head, sizeof head))
    return refuse(NULL, "not a cachetest entry");
  if (head[0] != cachetest_format) return refuse(NULL, "stale entry: payload format differs");
  Prog* p = NULL; /* the group's program without constants: what the entry must match */
  OnyxStatus* st = build(g, false, &p);
  if (st) return st;
  if (head[1] != p->n_ops || head[2] != p->x_in) return refuse(p, "entry for another group");
  for (size_t i = 0; i < p->n_ops; i++) {
    uint32_t code;
    uint64_t n;
    if (!take(&q, &left, &code, sizeof code) || !take(&q, &left, &n, sizeof n))
      return refuse(p, "entry truncated");
    if (code != p->ops[i].code || n != p->ops[i].n_k) return refuse(p, "entry for another group");
    if (!n) continue;
    if (n > left / sizeof(float)) return refuse(p, "entry truncated");
    p->ops[i].k = malloc((size_t)n * sizeof(float));
    if (!p->ops[i].k) return refuse(p, "out of memory");
    take(&q, &left, p->ops[i].k, (size_t)n * sizeof(float));
  }
  if (left) return refuse(p, "trailing bytes");
  __atomic_fetch_add(&cachetest_loads, 1, __ATOMIC_RELAXED);
  *out = (OnyxCompiledKernel){
      .struct_size = sizeof *out, .state = p, .compute = compute, .release = prog_free};
  return NULL;
}

static OnyxStatus* misread_save(OnyxEp* ep, const OnyxGraphView* g, const OnyxCompiledKernel* k,
                                OnyxBlobWriter* w) {
  __atomic_fetch_add(&cachetest_slot_misreads, 1, __ATOMIC_RELAXED);
  return err("save_compiled read past struct_size");
}

static OnyxStatus* misread_load(OnyxEp* ep, const OnyxGraphView* g, const void* data, size_t bytes,
                                OnyxCompiledKernel* out) {
  __atomic_fetch_add(&cachetest_slot_misreads, 1, __ATOMIC_RELAXED);
  return err("load_compiled read past struct_size");
}

static void ep_release(OnyxEp* ep) {
  free(ep);
}

static OnyxStatus* count(const OnyxProvider* p, size_t* n) {
  *n = 1;
  return NULL;
}

static OnyxStatus* create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  OnyxEp* ep = calloc(1, sizeof *ep);
  if (!ep) return err("out of memory");
  *ep = (OnyxEp){.struct_size = sizeof *ep,
                 .provider = p,
                 .get_capability = get_capability,
                 .compile = compile,
                 .release = ep_release,
                 .save_compiled = save_compiled,
                 .load_compiled = load_compiled};
  if (cachetest_abi10) {
    ep->struct_size = ONYX_ABI_V1_0_EP_SIZE;
    ep->save_compiled = misread_save;
    ep->load_compiled = misread_load;
  }
  *out = ep;
  return NULL;
}

static const OnyxProvider provider = {.struct_size = sizeof provider,
                                      .abi_major = ONYX_ABI_VERSION_MAJOR,
                                      .abi_minor = ONYX_ABI_VERSION_MINOR,
                                      .name = "cachetest",
                                      .vendor = "onyx tests",
                                      .version = "1.0",
                                      .device_count = count,
                                      .create_ep = create_ep};

OnyxStatus* cachetest_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  *out = &provider;
  return NULL;
}
