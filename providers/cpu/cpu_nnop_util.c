/* cpu_nnop_util.c — helpers of the CPU provider's double-precision NN
 * kernels (cpu_norm.c, cpu_pool.c, cpu_loss.c, cpu_nms.c, cpu_resize.c,
 * cpu_conv_transpose.c, cpu_rnn.c): element conversion into scratch
 * buffers, attribute and input helpers, rank and parameter checks. */
#include "cpu_nnop_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

OnyxStatus* nnop_scratch(OnyxKernelContext* ctx, size_t bytes, void** out) {
  *out = cpu_host->ctx_scratch(ctx, bytes ? bytes : 1);
  return *out ? NULL : cpu_oom(ctx);
}

OnyxStatus* nnop_load_d(OnyxKernelContext* ctx, const OnyxTensor* t, double** out) {
  const size_t n = cpu_host->tensor_elem_count(t);
  OnyxStatus* st = nnop_scratch(ctx, n * sizeof(double), (void**)out);
  if (st) return st;
  const int32_t type = cpu_host->tensor_elem_type(t);
  const void* data = cpu_host->tensor_data(t);
  double* o = *out;
  if (type == ONYX_ELEM_FLOAT32) {
    for (size_t i = 0; i < n; i++)
      o[i] = ((const float*)data)[i];
  } else if (type == ONYX_ELEM_FLOAT64) {
    cpu_memcpy(o, data, n * sizeof(double));
  } else {
    for (size_t i = 0; i < n; i++) {
      CpuNum v;
      if (!cpu_num_load(type, data, i, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "element type %s is not numeric",
                             cpu_elem_name(type));
      o[i] = cpu_num_as_double(v);
    }
  }
  return NULL;
}

OnyxStatus* nnop_load_f(OnyxKernelContext* ctx, const OnyxTensor* t, float** out) {
  const size_t n = cpu_host->tensor_elem_count(t);
  const int32_t type = cpu_host->tensor_elem_type(t);
  const void* data = cpu_host->tensor_data(t);
  OnyxStatus* st = nnop_scratch(ctx, n * sizeof(float), (void**)out);
  if (st) return st;
  float* o = *out;
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    cpu_memcpy(o, data, n * sizeof(float));
    break;
  case ONYX_ELEM_FLOAT16:
    for (size_t i = 0; i < n; i++)
      o[i] = cpu_f16_to_f32(((const uint16_t*)data)[i]);
    break;
  case ONYX_ELEM_BFLOAT16:
    for (size_t i = 0; i < n; i++)
      o[i] = cpu_bf16_to_f32(((const uint16_t*)data)[i]);
    break;
  default:
    for (size_t i = 0; i < n; i++) {
      CpuNum v;
      if (!cpu_num_load(type, data, i, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "element type %s is not numeric",
                             cpu_elem_name(type));
      o[i] = (float)cpu_num_as_double(v);
    }
  }
  return NULL;
}

static void store_one(int32_t type, void* data, size_t i, double x) {
  CpuNum v;
  if (type == ONYX_ELEM_FLOAT16 || type == ONYX_ELEM_BFLOAT16 || type == ONYX_ELEM_FLOAT32 ||
      type == ONYX_ELEM_FLOAT64) {
    v.kind = CPU_NUM_FLT;
    v.v.f = x;
  } else {
    v.kind = CPU_NUM_FLT;
    v.v.f = nearbyint(x);
  }
  cpu_num_store(type, data, i, v);
}

void nnop_store_d(OnyxTensor* y, const double* v, size_t n) {
  const int32_t type = cpu_host->tensor_elem_type(y);
  void* data = cpu_host->tensor_mutable_data(y);
  if (type == ONYX_ELEM_FLOAT64) {
    cpu_memcpy(data, v, n * sizeof(double));
  } else if (type == ONYX_ELEM_FLOAT32) {
    for (size_t i = 0; i < n; i++)
      ((float*)data)[i] = (float)v[i];
  } else {
    for (size_t i = 0; i < n; i++)
      store_one(type, data, i, v[i]);
  }
}

void nnop_store_f(OnyxTensor* y, const float* v, size_t n) {
  const int32_t type = cpu_host->tensor_elem_type(y);
  void* data = cpu_host->tensor_mutable_data(y);
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    cpu_memcpy(data, v, n * sizeof(float));
    break;
  case ONYX_ELEM_FLOAT16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t*)data)[i] = cpu_f32_to_f16(v[i]);
    break;
  case ONYX_ELEM_BFLOAT16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t*)data)[i] = cpu_f32_to_bf16(v[i]);
    break;
  default:
    for (size_t i = 0; i < n; i++)
      store_one(type, data, i, v[i]);
  }
}

bool nnop_has_output(const OnyxNode* node, size_t i) {
  return node && i < cpu_host->node_output_count(node) && cpu_host->node_output(node, i) != NULL;
}

bool nnop_has_input(const OnyxKernelContext* ctx, size_t i) {
  return i < cpu_host->ctx_input_count(ctx) && cpu_host->ctx_input(ctx, i) != NULL;
}

const char* nnop_attr_str(const OnyxNode* node, const char* name, const char* def, char* buf,
                          size_t size) {
  size_t len = 0;
  const char* s = cpu_host->node_attr_string(node, name, &len);
  if (!s) {
    s = def;
    len = strlen(def);
  }
  if (len >= size) len = size - 1;
  memcpy(buf, s, len);
  buf[len] = '\0';
  return buf;
}

bool nnop_attr_is(const OnyxNode* node, const char* name, const char* def, const char* value) {
  char buf[64];
  return strcmp(nnop_attr_str(node, name, def, buf, sizeof buf), value) == 0;
}

OnyxStatus* nnop_node_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  *state = (void*)node;
  return NULL;
}

bool nnop_scalar_d(const OnyxKernelContext* ctx, size_t i, double* out) {
  if (!nnop_has_input(ctx, i)) return false;
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (cpu_host->tensor_elem_count(t) == 0) return false;
  CpuNum v;
  if (!cpu_num_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), 0, &v)) return false;
  *out = cpu_num_as_double(v);
  return true;
}

OnyxStatus* nnop_need_rank(const OnyxNode* node, const OnyxTensor* t, const char* what,
                           size_t min_rank) {
  const size_t r = cpu_host->tensor_rank(t);
  if (r < min_rank)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s has rank %zu; at least %zu is required", what,
                     r, min_rank);
  if (r > CPU_MAX_RANK)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "%s has rank %zu; at most %d is supported", what,
                     r, CPU_MAX_RANK);
  return NULL;
}

/* A per-channel parameter (scale, bias) of `want` elements. */
OnyxStatus* nnop_load_param(OnyxKernelContext* ctx, const OnyxNode* node, size_t i,
                            const char* what, size_t want, double** out) {
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (!t) return cpu_error(node, ONYX_INVALID_ARGUMENT, "input %s is missing", what);
  if (cpu_host->tensor_elem_count(t) != want)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "%s has %zu elements, expected %zu", what,
                     cpu_host->tensor_elem_count(t), want);
  return nnop_load_d(ctx, t, out);
}
