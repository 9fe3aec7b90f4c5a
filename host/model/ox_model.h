/* ox_model.h — ModelProto/TensorProto <-> IR, through protobuf-c. */
#ifndef OX_MODEL_H
#define OX_MODEL_H

#include "ox_ir.h"

/* The default resource limits (docs/security.md): what a session uses when
 * the application or config sets none, or sets 0. */
#define OX_DEFAULT_MAX_MODEL_BYTES  ((size_t)4 << 30) /* the model file / buffer */
#define OX_DEFAULT_MAX_TENSOR_BYTES ((size_t)4 << 30) /* one tensor, loaded or computed */
#define OX_DEFAULT_MAX_NODES        ((size_t)1000000) /* all graphs of a model together */
#define OX_DEFAULT_MAX_GRAPH_DEPTH  32                /* nested subgraphs */
/* The most max_graph_depth can be set to: loading recurses per level, so a
 * higher setting is lowered to this to keep the stack bounded. */
#define OX_MAX_GRAPH_DEPTH_CEILING 256

/* Limits applied while loading; 0 means the default. */
typedef struct OxModelLimits {
  size_t max_model_bytes;  /* checked before parsing */
  size_t max_tensor_bytes; /* checked before any allocation */
  size_t max_nodes;
  int max_graph_depth;
} OxModelLimits;

/* Loads a model file into a new graph (not yet sorted or resolved). External
 * data resolves against the model's folder and is read into memory the
 * graph owns (mapped instead with ONYX_MMAP_FILES=1); a
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
/* A SequenceProto (kind OX_VK_SEQUENCE) or OptionalProto (OX_VK_OPT_*) or,
 * for OX_VK_TENSOR, a TensorProto: a host value (model_load.c). */
/* Replaces node n of g by the nodes of a serialized FunctionProto (ONNX's
 * body of its op): formal inputs/outputs become n's values, other names get
 * n's name as a prefix, ref_attr_name attributes take n's attributes. n is
 * freed. The graph must be resolved again afterwards. */
OnyxStatus* ox_graph_expand_function(OxGraph* g, OxNode* n, const uint8_t* bytes, size_t len);
OnyxStatus* ox_value_from_proto_bytes(const void* bytes, size_t len, uint8_t kind, OxTensor** out,
                                      char** name);
/* Serializes a host tensor; *bytes is malloc'd. */
OnyxStatus* ox_tensor_to_proto_bytes(const OxTensor* t, const char* name, void** bytes,
                                     size_t* len);
/* Serializes a graph (after optimization/partitioning) as a ModelProto. */
OnyxStatus* ox_model_save(const OxGraph* g, const char* path);

/* Reads a whole file (size-limited) into a malloc'd buffer. */
OnyxStatus* ox_read_file(const char* path, size_t max_bytes, void** data, size_t* len);
/* The same bytes: read into a buffer, or with ONYX_MMAP_FILES=1 mapped
 * read-only from the page cache where the file is a
 * regular one (no copy and no zeroed pages: a large model's load skips a
 * pass over its size), else read as ox_read_file does; *mapped says which.
 * Release with ox_unmap_file. The file must not shrink while it is mapped. */
OnyxStatus* ox_map_file(const char* path, size_t max_bytes, void** data, size_t* len, bool* mapped);
void ox_unmap_file(void* data, size_t len, bool mapped);

#endif
