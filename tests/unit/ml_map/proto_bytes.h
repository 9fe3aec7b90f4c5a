/* proto_bytes.h — hand-written protobuf wire bytes for the map tests: a
 * MapProto and a SequenceProto of MapProto (onnx-data.proto), encoded here
 * field by field so the reader under test is checked against an encoding it
 * did not produce. Out of memory aborts. */
#ifndef ML_MAP_PROTO_BYTES_H
#define ML_MAP_PROTO_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ox_test_models.h"

typedef struct PbBuf {
  uint8_t* p;
  size_t len, cap;
} PbBuf;

static void pb_put(PbBuf* b, const void* d, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  if (n) memcpy(b->p + b->len, d, n);
  b->len += n;
}

static void pb_varint(PbBuf* b, uint64_t v) {
  uint8_t c[10];
  size_t n = 0;
  do {
    c[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) c[n] |= 0x80;
    n++;
  } while (v);
  pb_put(b, c, n);
}

static void pb_key(PbBuf* b, unsigned field, unsigned wire) {
  pb_varint(b, ((uint64_t)field << 3) | wire);
}

static void pb_bytes(PbBuf* b, unsigned field, const void* d, size_t n) {
  pb_key(b, field, 2);
  pb_varint(b, n);
  pb_put(b, d, n);
}

/* A scalar TensorProto packed by protobuf-c (the model owns the proto). */
static void pb_scalar_tensor(PbBuf* b, int elem, const void* data) {
  OxTestModel* m = otm_new(13);
  Onnx__TensorProto* t = otm_tensor(m, "", elem, 0, NULL, data);
  size_t n = onnx__tensor_proto__get_packed_size(t);
  uint8_t* buf = malloc(n ? n : 1);
  if (!buf) abort();
  onnx__tensor_proto__pack(t, buf);
  pb_put(b, buf, n);
  free(buf);
  otm_free(m);
}

/* MapProto { name, key_type, keys (int64, packed) or string_keys, values:
 * SequenceProto { elem_type 1, tensor_values: one float scalar each } }. */
static void pb_map_f32(PbBuf* b, const char* name, const int64_t* ikeys, const char* const* skeys,
                       size_t n, const float* vals) {
  if (name) pb_bytes(b, 1, name, strlen(name));
  pb_key(b, 2, 0);
  pb_varint(b, ikeys ? 7 : 8);
  if (ikeys) {
    PbBuf packed = {0};
    for (size_t i = 0; i < n; i++)
      pb_varint(&packed, (uint64_t)ikeys[i]);
    pb_bytes(b, 3, packed.p, packed.len);
    free(packed.p);
  } else {
    for (size_t i = 0; i < n; i++)
      pb_bytes(b, 4, skeys[i], strlen(skeys[i]));
  }
  PbBuf seq = {0};
  pb_key(&seq, 2, 0);
  pb_varint(&seq, 1);
  for (size_t i = 0; i < n; i++) {
    PbBuf t = {0};
    pb_scalar_tensor(&t, ONYX_ELEM_FLOAT32, &vals[i]);
    pb_bytes(&seq, 3, t.p, t.len);
    free(t.p);
  }
  pb_bytes(b, 5, seq.p, seq.len);
  free(seq.p);
}

#endif
