/* model_internal.h — private to host/model: TensorProto conversions shared by
 * the loader, the saver and the public TensorProto functions. */
#ifndef OX_MODEL_INTERNAL_H
#define OX_MODEL_INTERNAL_H

#include "onnx.pb-c.h"
#include "ox_model.h"

/* The largest rank a model may declare. */
#define OX_MAX_RANK 1024

/* TensorProto -> tensor. External data resolves against base_dir (NULL:
 * refused) and is read into the tensor (with ONYX_MMAP_FILES=1 mapped into
 * `owner`'s mappings); max_bytes 0: default. */
OnyxStatus* ox_tensor_from_proto(Onnx__TensorProto* tp, const char* base_dir, size_t max_bytes,
                                 OxGraph* owner, OxTensor** out);
/* Host tensor -> TensorProto fields (allocated; free with ox_tensor_proto_clear). */
OnyxStatus* ox_tensor_to_proto(const OxTensor* t, const char* name, Onnx__TensorProto* tp);
void ox_tensor_proto_clear(Onnx__TensorProto* tp);

/* Checks every `string` field of an unpacked message tree (names, op types,
 * domains, doc strings, ...) is valid UTF-8; the error names the field's
 * path, e.g. "graph.node[2].name". */
OnyxStatus* ox_proto_check_text(const ProtobufCMessage* m);
/* Tests only: called between the check of an external-data path and its
 * open, so a test can swap the file in that window. NULL in production. */
extern void (*ox_external_race_hook)(const char* base_dir, const char* location);
/* Offset of the first byte that breaks UTF-8 in s[0, n), or SIZE_MAX. */
size_t ox_utf8_invalid_at(const uint8_t* s, size_t n);

#endif
