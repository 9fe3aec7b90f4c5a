/* ox_map.h — ONNX-ML map values at run time: map(K, V) as an OxTensor of kind
 * OX_RT_MAP holding two 1-D host tensors (items[0] keys, int64 or string;
 * items[1] values, element type `type`), and seq(map(K, V)) as one of kind
 * OX_RT_SEQ_MAP holding maps. Only the host makes and reads them (ZipMap,
 * DictVectorizer, CastMap: host/exec/ml_map.c; the public API:
 * host/session/value_map.c); providers never see them. */
#ifndef OX_MAP_H
#define OX_MAP_H

#include "ox_ir.h"

/* A map over keys and values, both taken (freed on error too): 1-D host
 * tensors of equal length, keys int64 or string. check_unique: refuse a key
 * that appears twice (values from outside; ops make distinct keys). */
OnyxStatus* ox_map_new(OxTensor* keys, OxTensor* values, bool check_unique, OxTensor** out);
/* An empty sequence of maps with these key and value types. */
OnyxStatus* ox_seq_map_new(OnyxElemType key, OnyxElemType value, OxTensor** out);
/* Appends map (taken, freed on error) to a sequence of maps; its key and
 * value types must be the sequence's. */
OnyxStatus* ox_seq_map_append(OxTensor* seq, OxTensor* map);
/* Whether t is a well-formed map (the invariants above), for values that
 * come from outside. */
OnyxStatus* ox_map_check(const OxTensor* t);
/* MapProto (onnx-data.proto: 2 key_type, 3 keys, 4 string_keys, 5 values as
 * a SequenceProto of tensors whose elements, in order, are the values) ->
 * map. *name may be NULL. A SequenceProto of MapProto (elem_type 4, 6
 * map_values) is read by ox_value_from_proto_bytes with kind OX_VK_SEQ_MAP.
 * (model_load.c, with the other containers.) */
OnyxStatus* ox_map_from_proto_bytes(const void* bytes, size_t len, OxTensor** out, char** name);

/* A map as a MapProto, a sequence of maps as a SequenceProto of MapProto
 * (the layout ox_map_from_proto_bytes reads: values as scalar tensors);
 * *bytes is malloc'd. name may be NULL. */
OnyxStatus* ox_map_to_proto_bytes(const OxTensor* v, const char* name, void** bytes, size_t* len);

#endif
