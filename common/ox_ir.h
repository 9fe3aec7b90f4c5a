/* ox_ir.h — the graph IR: tensors, attributes, values, nodes, graphs.
 *
 * The opaque ABI handles of onyx_ep.h / onyx.h are these structs: an
 * `OnyxNode*` handed to a provider is an `OxNode*`. Providers never see the
 * layout; they go through the host API.
 *
 * Ownership: a graph owns its nodes, values, initializer tensors and
 * attributes. A tensor owns a reference to its buffer; views share it.
 */
#ifndef OX_IR_H
#define OX_IR_H

#include "ox_common.h"
#include "onyx/onyx_ep.h"

/* --- Buffers and tensors ------------------------------------------------------- */

/* Reference-counted storage behind one or more tensors. */
typedef struct OxBuffer {
  int refs; /* atomic */
  void* ptr;
  size_t bytes;
  /* For string buffers: ptr is char*[count], each string owned here,
   * malloc'ed and NUL-terminated (the 1.0 contract: a reader of the char*
   * sees the bytes up to the first NUL). A string's byte length, NULs
   * included, is in str_lens when the string holds a NUL byte (see
   * OxStrLen); otherwise it is strlen. */
  OnyxElemType type;
  size_t count;
  struct OxStrLen* str_lens;
  /* Returns ptr to its owner (arena, allocator, munmap...). NULL: free(). */
  void (*release)(void* ctx, void* ptr, size_t bytes);
  void* release_ctx;
} OxBuffer;

/* The length of the string of one slot of a string buffer, recorded for
 * strings with NUL bytes (str_lens[k] for slot k, count entries, allocated
 * with the buffer). It counts only while `s` is still the slot's pointer: a
 * slot written directly (free + a new char*) reads as strlen, so a writer
 * that ignores lengths cuts at the first NUL but never reads past the
 * string. Such a writer allocates the new string before freeing the old one
 * (else the new one may reuse the address); ox_tensor_set_string and
 * ox_tensor_copy_strings keep the length. */
typedef struct OxStrLen {
  const char* s; /* the slot's pointer this length belongs to; NULL: none */
  size_t len;
} OxStrLen;

#define OX_DIMS_INLINE 8

typedef struct OnyxTensor {
  OnyxElemType type;
  size_t rank;
  int64_t* dims; /* dims_inline or heap when rank > OX_DIMS_INLINE */
  int64_t dims_inline[OX_DIMS_INLINE];
  size_t count; /* elements */
  size_t bytes;
  void* data;
  OnyxMemoryDevice device;
  OxBuffer* buffer; /* NULL: data is borrowed and outlives the tensor */
  /* Run-time value kind (host values only; providers only see tensors):
   * OX_RT_TENSOR, OX_RT_SEQUENCE (items owned, type = element type, rank 0,
   * no data) or OX_RT_NONE (an empty optional). An optional that holds a
   * value is just that value. */
  uint8_t vkind;
  struct OnyxTensor** items;
  size_t n_items;
  /* OX_RT_MAP: items[0] the keys (1-D, int64 or string, distinct), items[1]
   * the values (1-D, element type `type`), n_items 2. OX_RT_SEQ_MAP: a
   * sequence whose items are maps. key_type: their key type (UNDEFINED for
   * every other kind); a sequence of maps keeps it while empty. */
  OnyxElemType key_type;
} OxTensor;

enum { OX_RT_TENSOR = 0, OX_RT_SEQUENCE = 1, OX_RT_NONE = 2, OX_RT_MAP = 3, OX_RT_SEQ_MAP = 4 };

/* A new empty sequence of element type `type`, or a "none" optional value. */
OnyxStatus* ox_value_new_sequence(OnyxElemType type, OxTensor** out);
OnyxStatus* ox_value_new_none(OnyxElemType type, OxTensor** out);
/* Appends (takes) an item at position pos (SIZE_MAX: at the end). */
OnyxStatus* ox_sequence_insert(OxTensor* seq, size_t pos, OxTensor* item);
/* A new tensor sharing t's data (a view of the same shape); sequences: a
 * new sequence of shared items. */
OnyxStatus* ox_value_share(const OxTensor* t, OxTensor** out);

/* The host CPU's default memory. */
extern const OnyxMemoryDevice OX_HOST_MEMORY;
#define OX_HOST_ALIGN 64

bool ox_memory_equal(const OnyxMemoryDevice* a, const OnyxMemoryDevice* b);
/* Element count of a shape, overflow-checked; negative dims are an error. */
OnyxStatus* ox_shape_count(const int64_t* dims, size_t rank, size_t* count);
/* Byte size of count elements of t (handles sub-byte types; strings: pointer array). */
OnyxStatus* ox_type_bytes(OnyxElemType t, size_t count, size_t* bytes);

/* Host memory for tensor data: OX_HOST_ALIGN-aligned, the size rounded up
 * to it; from 2 MiB on 2 MiB-aligned with transparent huge pages requested
 * (a model's weights are copied at load: 4 KiB pages cost a fault each,
 * several microseconds in a VM). Freed with free(). NULL without memory. */
void* ox_alloc_host(size_t bytes);

/* Tensors of 2 MiB and more (ox_tensor_new*) reuse blocks freed by
 * earlier ones while a session is open: each session holds the cache, and
 * the last to close empties it (ir.c, "the cache of large host blocks"). */
void ox_host_cache_hold(void);
void ox_host_cache_drop(void);
/* Blocks kept now and their bytes (tests). */
void ox_host_cache_stats(size_t* blocks, size_t* bytes);

/* New tensor in host memory, zero-filled (strings: empty ""). */
OnyxStatus* ox_tensor_new(OnyxElemType type, const int64_t* dims, size_t rank, OxTensor** out);
/* The same without zeroing the data (strings are still ""): for a caller that
 * writes every element (zeroing a model's weights cost as much as copying). */
OnyxStatus* ox_tensor_new_uninit(OnyxElemType type, const int64_t* dims, size_t rank,
                                 OxTensor** out);
/* New host tensor that takes ownership of data (malloc'ed or ox_alloc_host
 * memory, freed with free() with the tensor; at least the tensor's bytes,
 * aligned for its element type). Not for strings. On error data stays the
 * caller's. */
OnyxStatus* ox_tensor_adopt(OnyxElemType type, const int64_t* dims, size_t rank, void* data,
                            OxTensor** out);
/* New tensor header over borrowed data (no buffer). */
OnyxStatus* ox_tensor_wrap(OnyxElemType type, const int64_t* dims, size_t rank, void* data,
                           const OnyxMemoryDevice* dev, OxTensor** out);
/* New tensor sharing src's buffer with another shape of equal element count. */
OnyxStatus* ox_tensor_view(const OxTensor* src, const int64_t* dims, size_t rank, OxTensor** out);
/* Deep copy into host memory (src must be host-addressable). */
OnyxStatus* ox_tensor_clone(const OxTensor* src, OxTensor** out);
void ox_tensor_free(OxTensor* t);

/* Strings of a host string tensor (index i of the tensor, views included).
 * ox_tensor_string: never NULL ("" out of range); ox_tensor_string_len: the
 * byte length, NUL bytes included (0 out of range). */
const char* ox_tensor_string(const OxTensor* t, size_t i);
size_t ox_tensor_string_len(const OxTensor* t, size_t i);
/* Stores a copy of exactly len bytes of s (NULs included) as string i. */
OnyxStatus* ox_tensor_set_string(OxTensor* t, size_t i, const char* s, size_t len);
/* Copies n strings, lengths included, from src[soff..] to dst[doff..]. */
OnyxStatus* ox_tensor_copy_strings(OxTensor* dst, size_t doff, const OxTensor* src, size_t soff,
                                   size_t n);
/* Sets rank/dims/count/bytes (does not touch data). */
OnyxStatus* ox_tensor_set_shape(OxTensor* t, const int64_t* dims, size_t rank);
OxBuffer* ox_buffer_ref(OxBuffer* b);
void ox_buffer_unref(OxBuffer* b);
/* Writes "float32[2,3]" into buf. */
void ox_shape_str(OnyxElemType type, const int64_t* dims, int64_t rank, char* buf, size_t len);

/* --- Attributes ------------------------------------------------------------------ */
struct OxGraph;

typedef struct OxAttr {
  char* name;
  OnyxAttrType type;
  int64_t i;
  float f;
  char* s; /* NUL-terminated copy; s_len excludes the NUL */
  size_t s_len;
  int64_t* ints;
  float* floats;
  char** strings;      /* each NUL-terminated; strings_len[i] excludes that NUL */
  size_t* strings_len; /* STRINGS: byte length of each, NUL bytes inside included */
  OxTensor* t;
  OxTensor** tensors;
  struct OxGraph* g;
  struct OxGraph** graphs;
  size_t count;      /* elements of the list types */
  bool from_default; /* filled in from the schema */
  /* TYPE_PROTO: the value kind (OxValueKind) and element type it names. */
  uint8_t tp_kind;
  OnyxElemType tp_elem;
} OxAttr;

void ox_attr_clear(OxAttr* a);

/* --- Values, nodes, graphs ------------------------------------------------------- */
typedef struct OnyxNode OxNode;
typedef struct OnyxValueInfo OxValue;
struct OxSchema;

/* What a value holds: a tensor, a sequence of tensors, or an optional of
 * either (its element type is in OxValue.type). */
typedef enum OxValueKind {
  OX_VK_TENSOR = 0,
  OX_VK_SEQUENCE = 1,
  OX_VK_OPT_TENSOR = 2,
  OX_VK_OPT_SEQUENCE = 3,
  /* ONNX-ML map(K, V) and seq(map(K, V)): OxValue.type is V, map_key K
   * (int64 or string). Only the host runs ops that read or write them. */
  OX_VK_MAP = 4,
  OX_VK_SEQ_MAP = 5,
} OxValueKind;

/* The placement of nodes the host itself runs (control flow, containers). */
#define OX_EP_HOST (-2)

struct OnyxValueInfo {
  char* name;
  uint8_t kind;       /* OxValueKind */
  OnyxElemType type;  /* UNDEFINED until known */
  int32_t rank;       /* -1: unknown */
  int64_t* dims;      /* rank entries; ONYX_DIM_UNKNOWN where unknown */
  char** dim_params;  /* NULL, or rank entries (NULL where none) */
  OxTensor* constant; /* initializer (owned by the value) */
  OxNode* producer;
  int32_t producer_slot;
  OxNode** consumers; /* each consumer once per input slot it reads */
  size_t n_consumers, cap_consumers;
  bool is_graph_input;
  bool is_graph_output;
  bool is_outer_scope;  /* a subgraph reading a value of its parent */
  size_t index;         /* position in graph->values */
  OnyxElemType map_key; /* OX_VK_MAP, OX_VK_SEQ_MAP: the key type */
};

struct OnyxNode {
  char* name; /* never NULL: unnamed nodes get "<op_type>_<index>" */
  char* op_type;
  char* domain;     /* "" for ai.onnx */
  OxValue** inputs; /* NULL entries: absent optional input */
  size_t n_inputs;
  OxValue** outputs; /* NULL entries: absent optional output */
  size_t n_outputs;
  OxAttr* attrs;
  size_t n_attrs, cap_attrs;
  const struct OxSchema* schema; /* set by resolve */
  int32_t since_version;         /* schema->since_version */
  size_t index;                  /* position in graph->nodes */
  /* Placement, set by the partitioner. */
  int32_t ep;    /* index into the session's provider list; -1: not placed */
  int32_t group; /* fused group id, -1: none */
  int64_t priority;
  /* The last n_implicit inputs are values of this graph that the node's
   * subgraphs read from the outer scope (not formal inputs). */
  size_t n_implicit;
  /* A node a rewrite made: the transformer ("matmul_add", a provider's
   * "myaccel:transform") and the model's nodes it replaced ("mm1, add1");
   * NULL for the model's own nodes. Shown by explain. */
  char* origin_pass;
  char* origin_nodes;
};

typedef struct OxOpsetImport {
  char* domain;
  int64_t version;
} OxOpsetImport;

/* A region of a file mapped for external data; unmapped with the graph. */
typedef struct OxMapping {
  void* addr;
  size_t len;
} OxMapping;

typedef struct OxGraph {
  char* name;
  OxNode** nodes; /* topological order after ox_graph_toposort */
  size_t n_nodes, cap_nodes;
  OxValue** values;
  size_t n_values, cap_values;
  OxMap value_map;  /* name -> OxValue* */
  OxValue** inputs; /* declared graph inputs (initializers excluded) */
  size_t n_inputs, cap_inputs;
  OxValue** outputs;
  size_t n_outputs, cap_outputs;
  /* Model-level facts, on the main graph only. */
  OxOpsetImport* opsets;
  size_t n_opsets;
  int64_t ir_version;
  char* producer_name;
  char* source; /* the model's path or "<memory>", for messages */
  OxMapping* mappings;
  size_t n_mappings;
  struct OxGraph* parent; /* enclosing graph of a subgraph */
} OxGraph;

/* Attribute look-up by name; NULL if the node has none of that name. */
const OxAttr* ox_node_attr(const OxNode* n, const char* name);
int64_t ox_node_attr_int(const OxNode* n, const char* name, int64_t fallback);
float ox_node_attr_float(const OxNode* n, const char* name, float fallback);
const char* ox_node_attr_string(const OxNode* n, const char* name, const char* fallback);
/* ints attribute: returns the array and sets *count; NULL/0 if absent. */
const int64_t* ox_node_attr_ints(const OxNode* n, const char* name, size_t* count);

/* Sets a value's type and shape (copies dims; rank -1: unknown shape). */
OnyxStatus* ox_value_set(OxValue* v, OnyxElemType type, int32_t rank, const int64_t* dims);
/* The opset the model imports for a domain ("" and "ai.onnx" are one), or -1. */
int64_t ox_graph_opset(const OxGraph* g, const char* domain);
bool ox_domain_is_onnx(const char* domain);

#endif /* OX_IR_H */
