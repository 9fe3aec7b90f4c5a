/* model_internal.h — private to host/model: TensorProto conversions shared by
 * the loader, the saver and the public TensorProto functions. */
#ifndef OX_MODEL_INTERNAL_H
#define OX_MODEL_INTERNAL_H

#include "onnx.pb-c.h"
#include "ox_model.h"

/* The largest rank a model may declare. */
#define OX_MAX_RANK 1024

/* TensorProto -> tensor. External data resolves against base_dir (NULL:
 * refused) and is mapped into `owner`'s mappings; max_bytes 0: default. */
OnyxStatus* ox_tensor_from_proto(Onnx__TensorProto* tp, const char* base_dir, size_t max_bytes,
                                 OxGraph* owner, OxTensor** out);
/* Host tensor -> TensorProto fields (allocated; free with ox_tensor_proto_clear). */
OnyxStatus* ox_tensor_to_proto(const OxTensor* t, const char* name, Onnx__TensorProto* tp);
void ox_tensor_proto_clear(Onnx__TensorProto* tp);

#endif
