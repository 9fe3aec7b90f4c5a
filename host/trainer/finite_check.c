/* finite_check.c — the gradient check model of ox_finite_check.h, written
 * as protobuf wire format directly: a handful of fields of ModelProto,
 * GraphProto, NodeProto, ValueInfoProto and AttributeProto (onnx.proto's
 * field numbers are given at each call). */
#include "ox_finite_check.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_common.h"

typedef struct OxPb {
  uint8_t* p;
  size_t n, cap;
  bool oom;
} OxPb;

static void ox_pb_raw(OxPb* b, const void* d, size_t n) {
  if (b->oom || !n) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n)
      cap *= 2;
    uint8_t* p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void ox_pb_varint(OxPb* b, uint64_t v) {
  uint8_t s[10];
  size_t k = 0;
  do {
    s[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) s[k] |= 0x80;
    k++;
  } while (v);
  ox_pb_raw(b, s, k);
}

/* Field f as a varint (wire type 0). */
static void ox_pb_int(OxPb* b, uint32_t f, uint64_t v) {
  ox_pb_varint(b, (uint64_t)f << 3);
  ox_pb_varint(b, v);
}

/* Field f as length-delimited bytes (wire type 2). */
static void ox_pb_bytes(OxPb* b, uint32_t f, const void* d, size_t n) {
  ox_pb_varint(b, (uint64_t)f << 3 | 2);
  ox_pb_varint(b, n);
  ox_pb_raw(b, d, n);
}

static void ox_pb_str(OxPb* b, uint32_t f, const char* s) {
  ox_pb_bytes(b, f, s, strlen(s));
}

/* Appends message m as field f of b and frees m. */
static void ox_pb_msg(OxPb* b, uint32_t f, OxPb* m) {
  if (m->oom) b->oom = true;
  ox_pb_bytes(b, f, m->p, m->n);
  free(m->p);
  *m = (OxPb){0};
}

/* ValueInfoProto of a float32 tensor. */
static void ox_pb_value_info(OxPb* b, uint32_t f, const char* name, const int64_t* dims,
                             size_t rank) {
  OxPb shape = {0}, tt = {0}, type = {0}, vi = {0};
  for (size_t d = 0; d < rank; d++) {
    OxPb dim = {0};
    ox_pb_int(&dim, 1, (uint64_t)dims[d]); /* Dimension.dim_value */
    ox_pb_msg(&shape, 1, &dim);            /* TensorShapeProto.dim */
  }
  ox_pb_int(&tt, 1, 1);      /* TypeProto.Tensor.elem_type: FLOAT */
  ox_pb_msg(&tt, 2, &shape); /* .shape (empty for a scalar) */
  ox_pb_msg(&type, 1, &tt);  /* TypeProto.tensor_type */
  ox_pb_str(&vi, 1, name);   /* ValueInfoProto.name */
  ox_pb_msg(&vi, 2, &type);  /* .type */
  ox_pb_msg(b, f, &vi);
}

/* NodeProto with two inputs (b_in NULL: one) and an optional keepdims. */
static void ox_pb_node(OxPb* g, const char* op, const char* a_in, const char* b_in, const char* out,
                       bool keepdims0) {
  OxPb n = {0};
  ox_pb_str(&n, 1, a_in); /* NodeProto.input */
  if (b_in) ox_pb_str(&n, 1, b_in);
  ox_pb_str(&n, 2, out); /* .output */
  ox_pb_str(&n, 3, out); /* .name */
  ox_pb_str(&n, 4, op);  /* .op_type */
  if (keepdims0) {
    OxPb a = {0};
    ox_pb_str(&a, 1, "keepdims"); /* AttributeProto.name */
    ox_pb_int(&a, 3, 0);          /* .i */
    ox_pb_int(&a, 20, 2);         /* .type: INT */
    ox_pb_msg(&n, 5, &a);         /* NodeProto.attribute */
  }
  ox_pb_msg(g, 1, &n); /* GraphProto.node */
}

OnyxStatus* ox_finite_check_model(size_t n, const int64_t* const* dims, const size_t* ranks,
                                  void** bytes, size_t* len) {
  *bytes = NULL;
  *len = 0;
  if (!n) return ox_status(ONYX_INVALID_ARGUMENT, "internal: a finite check of no tensor");
  OxPb g = {0};
  char in[32], m[32], r[32], acc[32], out[32];
  for (size_t i = 0; i < n; i++) {
    snprintf(in, sizeof in, "g%zu", i);
    snprintf(m, sizeof m, "m%zu", i);
    snprintf(r, sizeof r, "r%zu", i);
    ox_pb_node(&g, "Mul", in, "zero", m, false);
    ox_pb_node(&g, "ReduceSum", m, NULL, n == 1 ? "bad" : r, true);
    if (i == 0) continue;
    snprintf(out, sizeof out, "a%zu", i);
    ox_pb_node(&g, "Add", i == 1 ? "r0" : acc, r, i == n - 1 ? "bad" : out, false);
    memcpy(acc, out, sizeof acc);
  }
  ox_pb_str(&g, 2, "onyx_finite_check"); /* GraphProto.name */
  ox_pb_value_info(&g, 11, "zero", NULL, 0);
  for (size_t i = 0; i < n; i++) {
    snprintf(in, sizeof in, "g%zu", i);
    ox_pb_value_info(&g, 11, in, dims[i], ranks[i]); /* GraphProto.input */
  }
  ox_pb_value_info(&g, 12, "bad", NULL, 0); /* GraphProto.output */
  OxPb model = {0}, opset = {0};
  ox_pb_int(&model, 1, 8);      /* ModelProto.ir_version */
  ox_pb_int(&opset, 2, 13);     /* OperatorSetIdProto.version (domain "") */
  ox_pb_msg(&model, 8, &opset); /* ModelProto.opset_import */
  ox_pb_msg(&model, 7, &g);     /* ModelProto.graph */
  if (model.oom) {
    free(model.p);
    return ox_oom();
  }
  *bytes = model.p;
  *len = model.n;
  return NULL;
}
