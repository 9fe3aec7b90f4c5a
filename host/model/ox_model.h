/* ox_model.h — ModelProto/TensorProto <-> IR, through protobuf-c. */
#ifndef OX_MODEL_H
#define OX_MODEL_H

#include "ox_ir.h"

/* Limits applied while loading; 0 means the default. */
typedef struct OxModelLimits {
  size_t max_model_bytes;  /* default 4 GiB */
  size_t max_tensor_bytes; /* default 4 GiB, checked before any allocation */
  size_t max_nodes;        /* default 1,000,000 */
  int max_graph_depth;     /* default 32 nested subgraphs */
} OxModelLimits;

/* Loads a model file into a new graph (not yet sorted or resolved). External
 * data resolves against the model's folder and is mapped with mmap; a
 * location that is absolute, contains "..", or resolves (through symlinks)
 * outside the folder is refused, as is an offset/length beyond the file.
 * Errors name the file and the node/initializer/field at fault. */
OnyxStatus* ox_model_load_file(const char* path, const OxModelLimits* limits, OxGraph** out);
/* The same from bytes; base_dir NULL refuses external data. `source` names
 * the model in messages. */
OnyxStatus* ox_model_load_bytes(const void* bytes, size_t len, const char* base_dir,
                                const char* source, const OxModelLimits* limits, OxGraph** out);

/* TensorProto (the .pb files of ONNX test folders). *name may be NULL. */
OnyxStatus* ox_tensor_from_proto_bytes(const void* bytes, size_t len, OxTensor** out, char** name);
/* Serializes a host tensor; *bytes is malloc'd. */
OnyxStatus* ox_tensor_to_proto_bytes(const OxTensor* t, const char* name, void** bytes,
                                     size_t* len);
/* Serializes a graph (after optimization/partitioning) as a ModelProto. */
OnyxStatus* ox_model_save(const OxGraph* g, const char* path);

/* Reads a whole file (size-limited) into a malloc'd buffer. */
OnyxStatus* ox_read_file(const char* path, size_t max_bytes, void** data, size_t* len);

#endif
