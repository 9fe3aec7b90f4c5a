/* custom_kernels.c — the kernels of the "custom" example provider and its
 * custom op:
 *
 *   Add, Mul (ai.onnx, opset 7+)        element-wise, numpy-style broadcasting
 *   MatMul (ai.onnx, opset 9+)          2-D only (get_capability declines the
 *                                       rest); a MatMul followed by an Add runs
 *                                       in a compiled group instead
 *                                       (custom_group.c)
 *   LeakyRelu (ai.onnx, opset 6+)       an attribute (alpha), read once in create
 *   com.example.custom.ScaleBias (v1)   y = x * scale + bias: a schema with
 *                                       attributes and an inference function,
 *                                       and its kernel
 *
 * All float32. Every kernel runs on the "device": the host has already put
 * its inputs in this provider's memory and allocates its outputs there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "custom_ep.h"

/* A kernel error names the node and op; the host adds the provider. */
static OnyxStatus* kernel_error(OnyxKernelContext* ctx, const char* what) {
  const OnyxHostApi* H = custom_host;
  const OnyxNode* n = H->ctx_node(ctx);
  return H->status_create(ONYX_RUNTIME_ERROR, "custom: node '%s' (%s): %s",
                          n ? H->node_name(n) : "?", n ? H->node_op_type(n) : "?", what);
}

/* Inputs must be in this provider's memory: if the host handed us anything
 * else, reading it on a real device would crash, so say so instead. */
static OnyxStatus* check_on_device(OnyxKernelContext* ctx, const OnyxTensor* t) {
  if (!t) return kernel_error(ctx, "a required input is missing");
  if (!custom_is_device_memory(custom_host->tensor_memory(t)))
    return kernel_error(ctx, "an input is not in Example Accelerator memory");
  return NULL;
}

/* --- Add and Mul: multidirectional (numpy) broadcasting ---------------------------------- */

typedef enum { OP_ADD, OP_MUL } BinaryOp;
static const BinaryOp op_add = OP_ADD, op_mul = OP_MUL;

static OnyxStatus* binary_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = custom_host;
  BinaryOp op = *(const BinaryOp*)state;
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = H->ctx_input(ctx, 1);
  OnyxStatus* st = check_on_device(ctx, a);
  if (!st) st = check_on_device(ctx, b);
  if (st) return st;
  size_t ra = H->tensor_rank(a), rb = H->tensor_rank(b);
  size_t r = ra > rb ? ra : rb;
  if (r > CUSTOM_MAX_RANK) return kernel_error(ctx, "rank above 8 is not supported");
  const int64_t* da = H->tensor_dims(a);
  const int64_t* db = H->tensor_dims(b);
  /* Shapes are aligned at the right; a missing or size-1 dimension
   * stretches. Strides of a stretched dimension are 0. */
  int64_t out[CUSTOM_MAX_RANK], sa[CUSTOM_MAX_RANK], sb[CUSTOM_MAX_RANK];
  int64_t step_a = 1, step_b = 1;
  for (size_t k = r; k-- > 0;) {
    int64_t x = k < r - ra ? 1 : da[k - (r - ra)];
    int64_t y = k < r - rb ? 1 : db[k - (r - rb)];
    if (x != y && x != 1 && y != 1)
      return kernel_error(ctx, "input shapes cannot be broadcast together");
    out[k] = x == 1 ? y : x;
    sa[k] = x == 1 ? 0 : step_a;
    sb[k] = y == 1 ? 0 : step_b;
    step_a *= x;
    step_b *= y;
  }
  OnyxTensor* yt = NULL;
  st = H->ctx_output(ctx, 0, out, r, &yt);
  if (st) return st;
  const float* pa = H->tensor_data(a);
  const float* pb = H->tensor_data(b);
  float* py = H->tensor_mutable_data(yt);
  size_t n = H->tensor_elem_count(yt);
  /* Walk the output in order with an odometer over its dimensions. */
  int64_t idx[CUSTOM_MAX_RANK] = {0};
  int64_t ia = 0, ib = 0;
  for (size_t e = 0; e < n; e++) {
    py[e] = op == OP_ADD ? pa[ia] + pb[ib] : pa[ia] * pb[ib];
    for (size_t k = r; k-- > 0;) {
      ia += sa[k];
      ib += sb[k];
      if (++idx[k] < out[k]) break;
      ia -= sa[k] * out[k];
      ib -= sb[k] * out[k];
      idx[k] = 0;
    }
  }
  return NULL;
}

/* --- MatMul: 2-D only ----------------------------------------------------------------------- */

static OnyxStatus* matmul_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = custom_host;
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = H->ctx_input(ctx, 1);
  OnyxStatus* st = check_on_device(ctx, a);
  if (!st) st = check_on_device(ctx, b);
  if (st) return st;
  if (H->tensor_rank(a) != 2 || H->tensor_rank(b) != 2)
    return kernel_error(ctx, "inputs must be 2-D");
  const int64_t m = H->tensor_dims(a)[0], k = H->tensor_dims(a)[1], n = H->tensor_dims(b)[1];
  if (H->tensor_dims(b)[0] != k) return kernel_error(ctx, "inner dimensions differ");
  const int64_t dims[2] = {m, n};
  OnyxTensor* y = NULL;
  st = H->ctx_output(ctx, 0, dims, 2, &y);
  if (st) return st;
  const float* pa = H->tensor_data(a);
  const float* pb = H->tensor_data(b);
  float* py = H->tensor_mutable_data(y);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p++)
        acc += pa[i * k + p] * pb[p * n + j];
      py[i * n + j] = acc;
    }
  return NULL;
}

/* --- LeakyRelu: an attribute read once per node ------------------------------------------ */

/* create runs once per node at session creation: read attributes (the host
 * has filled in the schema's defaults, so alpha is always there). */
static OnyxStatus* leaky_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep, (void)user_data;
  float* alpha = malloc(sizeof *alpha);
  if (!alpha) return custom_host->status_create(ONYX_OUT_OF_MEMORY, "custom: out of memory");
  *alpha = custom_host->node_attr_float(node, "alpha", 0.01f);
  *state = alpha;
  return NULL;
}

static OnyxStatus* leaky_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = custom_host;
  const float alpha = *(const float*)state; /* state is read-only during compute */
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxStatus* st = check_on_device(ctx, x);
  if (st) return st;
  OnyxTensor* y = NULL;
  st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  const float* px = H->tensor_data(x);
  float* py = H->tensor_mutable_data(y);
  for (size_t i = 0, n = H->tensor_elem_count(x); i < n; i++)
    py[i] = px[i] < 0 ? alpha * px[i] : px[i];
  return NULL;
}

static void free_state(void* state) {
  free(state);
}

/* --- The custom op: com.example.custom.ScaleBias ------------------------------------------ */

typedef struct {
  float scale, bias;
} ScaleBias;

/* Inference runs at session creation: check the node and describe its
 * output, so later nodes (and other providers) know its type and shape. */
static OnyxStatus* scale_bias_infer(OnyxInferenceContext* ic, void* user_data) {
  (void)user_data;
  const OnyxHostApi* H = custom_host;
  const OnyxNode* n = H->infer_node(ic);
  float scale = H->node_attr_float(n, "scale", 1.0f);
  float bias = H->node_attr_float(n, "bias", 0.0f);
  if (!isfinite(scale) || !isfinite(bias))
    return H->status_create(ONYX_INVALID_MODEL,
                            "custom: node '%s' (ScaleBias): attributes scale and bias must be "
                            "finite",
                            H->node_name(n));
  const OnyxValueInfo* x = H->infer_input(ic, 0);
  if (!x)
    return H->status_create(ONYX_INVALID_MODEL, "custom: node '%s' (ScaleBias): input X is missing",
                            H->node_name(n));
  /* Y has X's type and shape (rank -1: unknown shape stays unknown). */
  return H->infer_set_output(ic, 0, H->value_elem_type(x), H->value_rank(x), H->value_dims(x));
}

static OnyxStatus* scale_bias_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                     void** state) {
  (void)ep, (void)user_data;
  ScaleBias* s = malloc(sizeof *s);
  if (!s) return custom_host->status_create(ONYX_OUT_OF_MEMORY, "custom: out of memory");
  s->scale = custom_host->node_attr_float(node, "scale", 1.0f);
  s->bias = custom_host->node_attr_float(node, "bias", 0.0f);
  *state = s;
  return NULL;
}

static OnyxStatus* scale_bias_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = custom_host;
  const ScaleBias* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxStatus* st = check_on_device(ctx, x);
  if (st) return st;
  OnyxTensor* y = NULL;
  st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  const float* px = H->tensor_data(x);
  float* py = H->tensor_mutable_data(y);
  for (size_t i = 0, n = H->tensor_elem_count(x); i < n; i++)
    py[i] = px[i] * s->scale + s->bias;
  return NULL;
}

/* --- Registration -------------------------------------------------------------------------- */

static const int32_t float_only[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint T_float[] = {{"T", float_only, 1}};

OnyxStatus* custom_register_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r) {
  (void)p;
  static const OnyxFormalParam inputs[] = {{"X", "T", ONYX_PARAM_SINGLE}};
  static const OnyxFormalParam outputs[] = {{"Y", "T", ONYX_PARAM_SINGLE}};
  static const OnyxAttrDef attrs[] = {
      {.name = "scale", .type = ONYX_ATTR_FLOAT, .has_default = 1, .default_float = 1.0f},
      {.name = "bias", .type = ONYX_ATTR_FLOAT, .has_default = 1, .default_float = 0.0f},
  };
  OnyxSchemaDef d = {.struct_size = sizeof d,
                     .domain = CUSTOM_DOMAIN,
                     .op_type = CUSTOM_OP,
                     .since_version = 1,
                     .inputs = inputs,
                     .input_count = 1,
                     .outputs = outputs,
                     .output_count = 1,
                     .type_constraints = T_float,
                     .type_constraint_count = 1,
                     .attrs = attrs,
                     .attr_count = 2,
                     .infer = scale_bias_infer};
  return custom_host->register_schema(r, &d);
}

OnyxStatus* custom_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  const OnyxHostApi* H = custom_host;
  /* The registry copies each definition, so it may live on the stack. */
  OnyxKernelDef defs[] = {
      {.domain = "",
       .op_type = "Add",
       .since_version = 7,
       .compute = binary_compute,
       .user_data = (void*)&op_add},
      {.domain = "",
       .op_type = "Mul",
       .since_version = 7,
       .compute = binary_compute,
       .user_data = (void*)&op_mul},
      {.domain = "", .op_type = "MatMul", .since_version = 9, .compute = matmul_compute},
      {.domain = "",
       .op_type = "LeakyRelu",
       .since_version = 6,
       .create = leaky_create,
       .compute = leaky_compute,
       .release = free_state},
      {.domain = CUSTOM_DOMAIN,
       .op_type = CUSTOM_OP,
       .since_version = 1,
       .create = scale_bias_create,
       .compute = scale_bias_compute,
       .release = free_state},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    defs[i].struct_size = sizeof defs[i];
    defs[i].end_version = ONYX_OPSET_LATEST;
    defs[i].type_constraints = T_float;
    defs[i].type_constraint_count = 1;
    OnyxStatus* st = H->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
