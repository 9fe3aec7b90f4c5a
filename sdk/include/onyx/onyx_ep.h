/* onyx_ep.h — the execution-provider ABI, version 1.1.
 *
 * A provider is a shared library that exports exactly one symbol,
 * onyx_provider_init. The host calls it once after dlopen, handing over the
 * host API table (everything a provider may call) and receiving the provider
 * table (everything the host may call). A provider includes only the SDK
 * headers and never links against libonyx.
 *
 * A minimal provider with one kernel, complete (tests/abi compiles it from
 * this comment and runs a Relu model on it). Built as libonyx_ep_mini.so,
 * it is the provider "mini"; its EP is created per session and freed by
 * release, which the host requires:
 *
 *   #include <stdlib.h>
 *   #include "onyx/onyx_ep.h"
 *   static const OnyxHostApi* H;
 *   static OnyxStatus* relu(void* state, OnyxKernelContext* ctx) {
 *     const OnyxTensor* x = H->ctx_input(ctx, 0);
 *     OnyxTensor* y;
 *     OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
 *     if (st) return st;
 *     const float* a = H->tensor_data(x);
 *     float* b = H->tensor_mutable_data(y);
 *     for (size_t i = 0, n = H->tensor_elem_count(x); i < n; i++) b[i] = a[i] > 0 ? a[i] : 0;
 *     return NULL;
 *   }
 *   static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
 *   static const OnyxTypeConstraint T[] = {{"T", f32, 1}};
 *   static OnyxStatus* reg(const OnyxProvider* p, OnyxKernelRegistry* r) {
 *     OnyxKernelDef d = {.struct_size = sizeof d, .domain = "", .op_type = "Relu",
 *                        .since_version = 6, .end_version = ONYX_OPSET_LATEST,
 *                        .type_constraints = T, .type_constraint_count = 1, .compute = relu};
 *     return H->register_kernel(r, &d);
 *   }
 *   static OnyxStatus* count(const OnyxProvider* p, size_t* n) { *n = 1; return NULL; }
 *   static void release(OnyxEp* ep) { free(ep); }
 *   static OnyxStatus* create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
 *     OnyxEp* ep = calloc(1, sizeof *ep);
 *     if (!ep) return H->status_create(ONYX_OUT_OF_MEMORY, "mini: out of memory");
 *     *ep = (OnyxEp){.struct_size = sizeof *ep, .provider = p, .release = release};
 *     *out = ep;
 *     return NULL;
 *   }
 *   static const OnyxProvider P = {.struct_size = sizeof P, .abi_major = ONYX_ABI_VERSION_MAJOR,
 *     .abi_minor = ONYX_ABI_VERSION_MINOR, .name = "mini", .vendor = "me", .version = "0.1",
 *     .device_count = count, .register_kernels = reg, .create_ep = create};
 *   ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* h, const OnyxProvider** out) {
 *     H = h; *out = &P; return NULL;
 *   }
 *
 * Versioning rules (docs/abi.md has the full text):
 * - Every table and argument struct starts with `size_t struct_size`, set by
 *   whoever fills the struct to sizeof the struct as that side knows it.
 * - Structs only grow at the end. A reader reads a field only when
 *   struct_size covers it; otherwise it uses the field's documented default.
 * - A different ABI major is refused by the host, naming both versions.
 * - Optional features come through `next` extension chains, typed by an id.
 * - "Value types" marked frozen (OnyxMemoryDevice, OnyxTypeConstraint,
 *   OnyxAlias, OnyxFormalParam, OnyxAttrDef) never change in major 1.
 *
 * Threading: unless a slot says otherwise, the host calls provider slots from
 * one thread at a time per EP; kernel compute may be called concurrently for
 * different runs of one session, so kernel state must be read-only while
 * computing. Host API functions are thread-safe.
 */
#ifndef ONYX_EP_H
#define ONYX_EP_H

#include <limits.h>
#include <stdarg.h>
#include "onyx_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */
/* ------------------------------------------------------------------------ */

/* Host-owned, read through host functions; valid for the duration of the call
 * that handed them out unless stated otherwise. */
typedef struct OnyxGraphView OnyxGraphView; /* a set of nodes, its inputs and outputs */
typedef struct OnyxNode OnyxNode;           /* valid for the session's lifetime */
typedef struct OnyxValueInfo OnyxValueInfo; /* a graph edge: name, type, shape */
typedef struct OnyxKernelContext OnyxKernelContext;
typedef struct OnyxCapabilityBuilder OnyxCapabilityBuilder;
typedef struct OnyxKernelRegistry OnyxKernelRegistry;
typedef struct OnyxSchemaRegistry OnyxSchemaRegistry;
typedef struct OnyxInferenceContext OnyxInferenceContext;
typedef struct OnyxOptions OnyxOptions;
typedef struct OnyxThreadPool OnyxThreadPool;
typedef struct OnyxGraphEdit OnyxGraphEdit;   /* 1.1: handed to OnyxEp.transform */
typedef struct OnyxBlobWriter OnyxBlobWriter; /* 1.1: handed to OnyxEp.save_compiled */

/* Provider-owned, opaque to the host. */
typedef struct OnyxStream OnyxStream;
typedef struct OnyxEvent OnyxEvent;

typedef struct OnyxHostApi OnyxHostApi;
typedef struct OnyxProvider OnyxProvider;
typedef struct OnyxEp OnyxEp;

/* The last opset version, for an open-ended kernel or schema range. */
#define ONYX_OPSET_LATEST INT32_MAX

/* Optional features hang off `next` pointers as a chain of extensions. Each
 * extension struct starts with this header; `type` says which struct it is.
 * A reader skips types it does not know. No extension types exist in 1.0;
 * 1.1 defines ONYX_EXT_COLLECTIVES, ONYX_EXT_RUN_GRAPH and ONYX_EXT_RUN_EVENT
 * (at the end of this header). */
typedef struct OnyxExtension {
  size_t struct_size;
  uint32_t type;
  const struct OnyxExtension* next;
} OnyxExtension;

/* ------------------------------------------------------------------------ */
/* Value types (frozen for major 1)                                          */
/* ------------------------------------------------------------------------ */

/* A type constraint: the schema's constraint name ("T", "T1", ...) and the
 * element types a kernel accepts for it. A constraint the kernel does not
 * list accepts every type the schema allows. */
typedef struct OnyxTypeConstraint {
  const char* name;
  const int32_t* types; /* OnyxElemType values */
  size_t type_count;
} OnyxTypeConstraint;

typedef enum OnyxAliasKind {
  /* The host may hand the output the input's buffer when the input is not
   * read after this node; the kernel must then work with out == in. */
  ONYX_ALIAS_INPLACE = 0,
  /* The output is always a view of the input's buffer (Reshape-like); the
   * kernel produces it with host->ctx_output_view, never copying data. */
  ONYX_ALIAS_VIEW = 1,
} OnyxAliasKind;

typedef struct OnyxAlias {
  int32_t output;
  int32_t input;
  int32_t kind; /* OnyxAliasKind */
} OnyxAlias;

typedef enum OnyxParamOption {
  ONYX_PARAM_SINGLE = 0,
  ONYX_PARAM_OPTIONAL = 1,
  ONYX_PARAM_VARIADIC = 2, /* only the last formal parameter */
} OnyxParamOption;

/* A schema's formal input or output. */
typedef struct OnyxFormalParam {
  const char* name;
  const char* type_constraint; /* a constraint name of the schema, e.g. "T" */
  int32_t option;              /* OnyxParamOption */
} OnyxFormalParam;

/* A schema's attribute. For a non-required attribute with a default, the host
 * fills the default into every node that omits it, so kernels always see it. */
typedef struct OnyxAttrDef {
  const char* name;
  int32_t type;     /* OnyxAttrType */
  int32_t required; /* 1: a node without it is refused at load */
  int32_t has_default;
  int64_t default_int;
  float default_float;
  const char* default_string;
} OnyxAttrDef;

/* ------------------------------------------------------------------------ */
/* Argument and result structs                                               */
/* ------------------------------------------------------------------------ */

/* Filled by the provider in device_info. The host sets struct_size to the
 * size it knows before the call; the provider writes no field past it. */
typedef struct OnyxDeviceInfo {
  size_t struct_size;
  const char* name;        /* e.g. "NVIDIA H100 80GB HBM3"; owned by the provider */
  OnyxMemoryDevice memory; /* the device's default memory */
  uint64_t memory_bytes;   /* 0 if unknown */
  /* Free-form properties ("compute_capability" -> "9.0"); owned by the provider. */
  const char* const* property_keys;
  const char* const* property_values;
  size_t property_count;
} OnyxDeviceInfo;

/* Given to create_ep. Everything is borrowed and valid during create_ep only,
 * except thread_pool, which outlives the EP. */
typedef struct OnyxEpCreateArgs {
  size_t struct_size;
  size_t device_index;         /* < device_count */
  const OnyxOptions* options;  /* this provider's options from code or config; never NULL */
  OnyxThreadPool* thread_pool; /* the session's intra-op pool: use it, don't spawn threads */
  int32_t deterministic; /* 1: results must not depend on scheduling (fixed reduction order) */
  int32_t log_severity;  /* OnyxLogSeverity: the session's minimum */
  const OnyxExtension* next;
} OnyxEpCreateArgs;

/* An allocator of one memory. Owned by the EP; valid until the EP is
 * released. The host wraps it in an arena, so alloc is called rarely and
 * with large sizes; alloc/free may be called from any thread. */
typedef struct OnyxAllocator {
  size_t struct_size;
  void* ctx;
  OnyxMemoryDevice device;
  /* Returns NULL when out of memory. `alignment` is a power of two no larger
   * than device.alignment. */
  void* (*alloc)(void* ctx, size_t bytes, size_t alignment);
  void (*free)(void* ctx, void* ptr);
} OnyxAllocator;

/* What compile returns: one kernel that runs a whole fused group. Its
 * context's inputs and outputs are the group view's inputs and outputs, in
 * that order. */
typedef struct OnyxCompiledKernel {
  size_t struct_size;
  void* state;
  /* Required. May be called concurrently for different runs. */
  OnyxStatus* (*compute)(void* state, OnyxKernelContext* ctx);
  /* Optional, NULL: nothing to release. Called once when the session ends. */
  void (*release)(void* state);
} OnyxCompiledKernel;

/* A kernel. The registry copies the definition (strings and arrays too), so
 * it may live on the provider's stack. */
typedef struct OnyxKernelDef {
  size_t struct_size;
  const char* domain; /* "" (or "ai.onnx") for the default ONNX domain */
  const char* op_type;
  int32_t since_version; /* inclusive opset range this kernel implements */
  int32_t end_version;   /* inclusive; ONYX_OPSET_LATEST for open-ended */
  const OnyxTypeConstraint* type_constraints;
  size_t type_constraint_count;
  /* Memory type per input/output index (OnyxMemType). Indices past the count
   * are ONYX_MEM_DEFAULT. E.g. a GPU Reshape wants its shape input in host
   * memory (input_mem_types = {DEFAULT, HOST_ACCESSIBLE}). */
  const int32_t* input_mem_types;
  size_t input_mem_type_count;
  const int32_t* output_mem_types;
  size_t output_mem_type_count;
  const OnyxAlias* aliases;
  size_t alias_count;
  /* Optional, NULL: the kernel's state is user_data. Called once per node at
   * session creation, after partitioning; may read the node's attributes and
   * constant inputs (e.g. to prepack weights). */
  OnyxStatus* (*create)(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state);
  /* Required. Reads inputs and allocates outputs through ctx. May be called
   * concurrently for different runs of one session. */
  OnyxStatus* (*compute)(void* state, OnyxKernelContext* ctx);
  /* Optional, NULL: nothing to release. Called once when the session ends. */
  void (*release)(void* state);
  void* user_data;
} OnyxKernelDef;

/* A provider's or application's op schema in its own domain. Copied by the
 * registry at registration. */
typedef struct OnyxSchemaDef {
  size_t struct_size;
  const char* domain; /* not "" nor "ai.onnx": those belong to ONNX */
  const char* op_type;
  int32_t since_version;
  const OnyxFormalParam* inputs;
  size_t input_count;
  const OnyxFormalParam* outputs;
  size_t output_count;
  /* Allowed types per constraint name; an unlisted name allows any type. */
  const OnyxTypeConstraint* type_constraints;
  size_t type_constraint_count;
  const OnyxAttrDef* attrs;
  size_t attr_count;
  /* Optional, NULL: each output takes the element type of the first input
   * with the same constraint name, and no shape. Called at session creation
   * through host->infer_* functions. */
  OnyxStatus* (*infer)(OnyxInferenceContext* ctx, void* user_data);
  void* user_data;
} OnyxSchemaDef;

/* ------------------------------------------------------------------------ */
/* The host API: what a provider may call                                    */
/* ------------------------------------------------------------------------ */

struct OnyxHostApi {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;

  /* --- Status and logging ------------------------------------------------ */
  /* Creates an error status (printf-style message). Never returns NULL for a
   * code other than ONYX_OK; the receiver of the status owns it. */
  OnyxStatus* (*status_create)(OnyxStatusCode code, const char* fmt, ...);
  OnyxStatusCode (*status_code)(const OnyxStatus* st); /* ONYX_OK for NULL */
  const char* (*status_message)(const OnyxStatus* st); /* "" for NULL; owned by st */
  void (*status_release)(OnyxStatus* st);              /* NULL is fine */
  /* Logs through the session's logger; `who` names the provider. */
  void (*log)(OnyxLogSeverity severity, const char* who, const char* fmt, ...);
  /* Path of the shared library that contains `address` (pass the address of
   * any of your functions); NULL if unknown. Owned by the host, lives until
   * the library is unloaded. Lets a provider find its own data files. */
  const char* (*library_path)(const void* address);

  /* --- Options (from code or the JSON config) ----------------------------- */
  size_t (*options_count)(const OnyxOptions* o);
  const char* (*options_key)(const OnyxOptions* o, size_t i);
  /* NULL if absent. Numbers and booleans come as their JSON text. */
  const char* (*options_get)(const OnyxOptions* o, const char* key);

  /* --- Graph views: only nodes not yet taken by a provider ----------------- */
  size_t (*graph_node_count)(const OnyxGraphView* g);
  const OnyxNode* (*graph_node)(const OnyxGraphView* g, size_t i); /* topological order */
  size_t (*graph_input_count)(const OnyxGraphView* g);
  const OnyxValueInfo* (*graph_input)(const OnyxGraphView* g, size_t i);
  size_t (*graph_output_count)(const OnyxGraphView* g);
  const OnyxValueInfo* (*graph_output)(const OnyxGraphView* g, size_t i);

  /* --- Nodes -------------------------------------------------------------- */
  const char* (*node_name)(const OnyxNode* n);
  const char* (*node_op_type)(const OnyxNode* n);
  const char* (*node_domain)(const OnyxNode* n);    /* "" for ai.onnx */
  int32_t (*node_since_version)(const OnyxNode* n); /* version of the schema it resolved to */
  size_t (*node_input_count)(const OnyxNode* n);
  const OnyxValueInfo* (*node_input)(const OnyxNode* n, size_t i); /* NULL: absent optional */
  size_t (*node_output_count)(const OnyxNode* n);
  const OnyxValueInfo* (*node_output)(const OnyxNode* n, size_t i); /* NULL: absent optional */
  /* Attributes, schema defaults already filled in. Absent attributes give
   * ONYX_ATTR_UNDEFINED / the fallback / NULL with *count = 0. Arrays and
   * strings are owned by the node. Strings are bytes and may hold NULs:
   * node_attr_string sets *len; the entries of node_attr_strings have their
   * lengths in node_attr_strings_lens (1.1). */
  OnyxAttrType (*node_attr_type)(const OnyxNode* n, const char* name);
  int64_t (*node_attr_int)(const OnyxNode* n, const char* name, int64_t fallback);
  float (*node_attr_float)(const OnyxNode* n, const char* name, float fallback);
  const char* (*node_attr_string)(const OnyxNode* n, const char* name, size_t* len);
  const int64_t* (*node_attr_ints)(const OnyxNode* n, const char* name, size_t* count);
  const float* (*node_attr_floats)(const OnyxNode* n, const char* name, size_t* count);
  const char* const* (*node_attr_strings)(const OnyxNode* n, const char* name, size_t* count);
  const OnyxTensor* (*node_attr_tensor)(const OnyxNode* n, const char* name);

  /* --- Values (graph edges) ------------------------------------------------ */
  const char* (*value_name)(const OnyxValueInfo* v);
  OnyxElemType (*value_elem_type)(const OnyxValueInfo* v);
  int32_t (*value_rank)(const OnyxValueInfo* v);        /* -1: unknown rank */
  const int64_t* (*value_dims)(const OnyxValueInfo* v); /* ONYX_DIM_UNKNOWN where unknown */
  /* The value's data when it is a constant (initializer); NULL otherwise.
   * Always in host memory, valid for the session's lifetime. */
  const OnyxTensor* (*value_constant)(const OnyxValueInfo* v);
  const OnyxNode* (*value_producer)(const OnyxValueInfo* v); /* NULL: graph input/constant */

  /* --- Tensors -------------------------------------------------------------- */
  OnyxElemType (*tensor_elem_type)(const OnyxTensor* t);
  size_t (*tensor_rank)(const OnyxTensor* t);
  const int64_t* (*tensor_dims)(const OnyxTensor* t);
  size_t (*tensor_elem_count)(const OnyxTensor* t);
  size_t (*tensor_byte_size)(const OnyxTensor* t);
  const void* (*tensor_data)(const OnyxTensor* t); /* in tensor_memory(t) */
  void* (*tensor_mutable_data)(OnyxTensor* t);
  const OnyxMemoryDevice* (*tensor_memory)(const OnyxTensor* t);
  /* Strings are stored as NUL-terminated copies owned by the tensor. */
  const char* (*tensor_string)(const OnyxTensor* t, size_t i);
  OnyxStatus* (*tensor_set_string)(OnyxTensor* t, size_t i, const char* s, size_t len);

  /* --- Kernel context: valid during one compute call ------------------------ */
  const OnyxNode* (*ctx_node)(const OnyxKernelContext* c); /* NULL for a fused group */
  size_t (*ctx_input_count)(const OnyxKernelContext* c);
  const OnyxTensor* (*ctx_input)(const OnyxKernelContext* c, size_t i); /* NULL: absent */
  size_t (*ctx_output_count)(const OnyxKernelContext* c);
  /* Allocates output i in the kernel's declared memory. Calling it twice for
   * one output is an error. */
  OnyxStatus* (*ctx_output)(OnyxKernelContext* c, size_t i, const int64_t* dims, size_t rank,
                            OnyxTensor** out);
  /* Makes output `out_index` a view of input `in_index` with a new shape of the
   * same byte size. Only for pairs declared ONYX_ALIAS_VIEW. */
  OnyxStatus* (*ctx_output_view)(OnyxKernelContext* c, size_t out_index, size_t in_index,
                                 const int64_t* dims, size_t rank, OnyxTensor** out);
  OnyxStream* (*ctx_stream)(const OnyxKernelContext* c); /* NULL: synchronous provider */
  OnyxThreadPool* (*ctx_thread_pool)(const OnyxKernelContext* c);
  /* Scratch host memory of at least `bytes`, 64-byte aligned: host memory
   * whatever the kernel's provider, never device memory. Valid until compute
   * returns, when the host frees it; NULL when out of memory or when `bytes`
   * is over the session's max_tensor_bytes. */
  void* (*ctx_scratch)(OnyxKernelContext* c, size_t bytes);

  /* --- Thread pool ----------------------------------------------------------- */
  size_t (*thread_pool_size)(const OnyxThreadPool* p); /* 1 for NULL */
  /* Runs fn over [0, n) split into chunks, on the pool and the calling thread;
   * returns when every chunk is done. NULL pool: runs inline. */
  void (*parallel_for)(OnyxThreadPool* p, size_t n,
                       void (*fn)(void* user, size_t begin, size_t end), void* user);

  /* --- Capability: used inside get_capability ---------------------------------- */
  /* Claims a node to run with a registered kernel. Refused (error) if the
   * node is already claimed or no kernel of the provider matches it. */
  OnyxStatus* (*claim_node)(OnyxCapabilityBuilder* b, const OnyxNode* n);
  /* Claims nodes to fuse into one compiled kernel (see OnyxEp.compile). The
   * group must be convex: no path leaves it and comes back. `name` is the
   * fused node's name, copied. */
  OnyxStatus* (*claim_group)(OnyxCapabilityBuilder* b, const OnyxNode* const* nodes, size_t n,
                             const char* name);
  /* Records why the provider does not take a node (shown by explain). */
  void (*decline_node)(OnyxCapabilityBuilder* b, const OnyxNode* n, const char* reason);
  /* Hint: run this claimed node here only if its inputs already live here. */
  void (*mark_cheap)(OnyxCapabilityBuilder* b, const OnyxNode* n);
  /* 1 if the provider's kernel registry has a kernel for the node; otherwise
   * 0 and *reason (if not NULL) says why, owned by the builder. */
  int (*has_kernel)(OnyxCapabilityBuilder* b, const OnyxNode* n, const char** reason);

  /* --- Registration: inside register_kernels / register_schemas -------------- */
  /* Refused if the (domain, op, types) overlaps an opset range already registered. */
  OnyxStatus* (*register_kernel)(OnyxKernelRegistry* r, const OnyxKernelDef* def);
  OnyxStatus* (*register_schema)(OnyxSchemaRegistry* r, const OnyxSchemaDef* def);

  /* --- Shape and type inference: inside OnyxSchemaDef.infer ------------------- */
  const OnyxNode* (*infer_node)(const OnyxInferenceContext* c); /* for its attributes */
  size_t (*infer_input_count)(const OnyxInferenceContext* c);
  const OnyxValueInfo* (*infer_input)(const OnyxInferenceContext* c, size_t i); /* NULL: absent */
  /* rank -1: unknown shape; dims may hold ONYX_DIM_UNKNOWN. */
  OnyxStatus* (*infer_set_output)(OnyxInferenceContext* c, size_t i, OnyxElemType type,
                                  int32_t rank, const int64_t* dims);

  /* ======================= ABI 1.1 (struct_size covers them) ================= */
  /* --- Values: edges of the whole graph, whichever provider holds the nodes --- */
  /* The nodes reading v, each once per input slot it reads v through, in
   * topological order. Valid like v; use them instead of scanning every
   * node's inputs. */
  size_t (*value_consumer_count)(const OnyxValueInfo* v);
  const OnyxNode* (*value_consumer)(const OnyxValueInfo* v, size_t i);
  int32_t (*value_is_graph_output)(const OnyxValueInfo* v); /* 1: the model's output */

  /* --- Graph edits: inside OnyxEp.transform only ------------------------------ */
  /* Replaces `nodes` (this provider's, from the transform's view, a convex set)
   * with one node of (domain, op_type) named `name` (NULL: derived), reading
   * `inputs` (values outside the set; NULL entries: absent optional inputs)
   * and writing `outputs` (values the set produces, in the new op's output
   * order; every value of the set read outside it, or a graph output, must be
   * listed). The domain is "" for ONNX, else a domain whose schema the host
   * knows (com.onyx, or one the provider registered). The new node runs on
   * this provider: after transform returns the host resolves it and matches
   * it against the provider's kernel registry; a node no kernel matches fails
   * session creation naming the provider and the node. The transform's view
   * stays current: the replaced nodes leave it (pointers to them are invalid
   * from here on) and the new node takes the place of the first of them.
   * *out (may be NULL) is valid until transform returns, for
   * edit_set_attr_*. */
  OnyxStatus* (*edit_replace)(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n_nodes,
                              const char* domain, const char* op_type, const char* name,
                              const OnyxValueInfo* const* inputs, size_t n_inputs,
                              const OnyxValueInfo* const* outputs, size_t n_outputs,
                              const OnyxNode** out);
  /* Sets an attribute of a node edit_replace made (refused for other nodes
   * and for an attribute already set). */
  OnyxStatus* (*edit_set_attr_int)(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                   int64_t v);
  OnyxStatus* (*edit_set_attr_float)(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                     float v);
  OnyxStatus* (*edit_set_attr_ints)(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                    const int64_t* v, size_t count);
  OnyxStatus* (*edit_set_attr_string)(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                      const char* v);

  /* --- Compiled-group cache: inside OnyxEp.save_compiled only ------------------ */
  /* Appends bytes to the entry being saved. */
  OnyxStatus* (*blob_write)(OnyxBlobWriter* w, const void* data, size_t bytes);

  /* --- Cancellation: inside compute ---------------------------------------------- */
  /* 1 when the run should stop: terminated through its run options, or past
   * its time limit. A kernel whose loops are bounded by input data or
   * attributes polls it at a bounded interval and then returns an error of
   * code ONYX_CANCELLED (the host reports the reason). */
  int32_t (*ctx_should_stop)(const OnyxKernelContext* c);

  /* --- Strings with their length ------------------------------------------------- */
  /* Byte length of string i of a string tensor, NUL bytes included
   * (tensor_string gives the same bytes, NUL-terminated: a 1.0 reader sees
   * them up to the first NUL). */
  size_t (*tensor_string_len)(const OnyxTensor* t, size_t i);
  /* Byte lengths of a list-of-strings attribute's entries, NUL bytes
   * included: an array parallel to node_attr_strings(n, name, count), with
   * the same count, owned by the node. node_attr_strings gives the same bytes
   * NUL-terminated, so a reader without lengths sees each entry up to its
   * first NUL. Absent (or not a list of strings): NULL with *count = 0. */
  const size_t* (*node_attr_strings_lens)(const OnyxNode* n, const char* name, size_t* count);
};

/* ------------------------------------------------------------------------ */
/* The provider: what the host may call                                      */
/* ------------------------------------------------------------------------ */

/* Returned by onyx_provider_init; owned by the provider, valid until release
 * returns. The host calls its slots from one thread at a time. */
struct OnyxProvider {
  size_t struct_size;
  uint32_t abi_major; /* ONYX_ABI_VERSION_MAJOR the provider was built against */
  uint32_t abi_minor;
  const char* name; /* short, lowercase: "cpu", "cuda"; how configs name it */
  const char* vendor;
  const char* version;
  void* ctx; /* the provider's own */
  const OnyxExtension* next;

  /* Required. Number of usable devices. With none, return a status of code
   * ONYX_NO_DEVICE whose message says why ("no CUDA driver found"). */
  OnyxStatus* (*device_count)(const OnyxProvider* p, size_t* count);
  /* Optional, NULL: the device is the host CPU. Describes device `index`. */
  OnyxStatus* (*device_info)(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out);
  /* Optional, NULL: 0. When several libraries offer one provider name (builds
   * for different ISAs or drivers), the host keeps the highest score; a
   * negative score means "cannot run on this machine". */
  int32_t (*score)(const OnyxProvider* p);
  /* Optional, NULL: no kernels (a compile-only provider). Called once after
   * init, before any EP is created. */
  OnyxStatus* (*register_kernels)(const OnyxProvider* p, OnyxKernelRegistry* r);
  /* Optional, NULL: no custom schemas. Called once after init. */
  OnyxStatus* (*register_schemas)(const OnyxProvider* p, OnyxSchemaRegistry* r);
  /* Required. Creates one EP instance for a session. Options the provider
   * does not know must be refused with ONYX_INVALID_CONFIG naming the key. */
  OnyxStatus* (*create_ep)(const OnyxProvider* p, const OnyxEpCreateArgs* args, OnyxEp** out);
  /* Optional, NULL: nothing to release. Called once, after every EP has been
   * released and just before the library is closed. */
  void (*release)(const OnyxProvider* p);
};

/* One EP instance, created per session by create_ep and filled by the
 * provider; valid until its release slot is called at session end. */
struct OnyxEp {
  size_t struct_size;
  void* ctx; /* the provider's own */
  const OnyxProvider* provider;
  const OnyxExtension* next;

  /* Optional, NULL: claims every node the provider's kernel registry matches
   * and declines the others with the registry's reason. Sees only nodes no
   * provider took before it; claims through host->claim_node/claim_group. */
  OnyxStatus* (*get_capability)(OnyxEp* ep, const OnyxGraphView* graph, OnyxCapabilityBuilder* b);
  /* Required when the provider claims groups; NULL otherwise. Called once per
   * claimed group at session creation. `group`'s inputs and outputs are the
   * values crossing the group boundary. */
  OnyxStatus* (*compile)(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out);
  /* Optional, NULL (or a NULL result): host malloc memory of kind CPU. */
  const OnyxAllocator* (*get_allocator)(OnyxEp* ep, OnyxMemType type);
  /* Optional, NULL: copies nothing. 1 if copy_tensors can copy from src to
   * dst memory (at least one of which is this EP's). */
  int (*can_copy)(OnyxEp* ep, const OnyxMemoryDevice* src, const OnyxMemoryDevice* dst);
  /* Optional (required if can_copy says yes). Copies n tensor pairs of equal
   * byte size; queued on `stream` (NULL: synchronously). */
  OnyxStatus* (*copy_tensors)(OnyxEp* ep, const OnyxTensor* const* src, OnyxTensor* const* dst,
                              size_t n, OnyxStream* stream);

  /* Streams and events: all optional; a NULL create_stream means the provider
   * is synchronous and every stream argument it receives is NULL. */
  OnyxStatus* (*create_stream)(OnyxEp* ep, OnyxStream** out);
  void (*release_stream)(OnyxEp* ep, OnyxStream* s);
  /* Waits until everything queued on s has finished; returns its errors. The
   * host calls it for every stream before a run returns. */
  OnyxStatus* (*sync_stream)(OnyxEp* ep, OnyxStream* s);
  OnyxStatus* (*create_event)(OnyxEp* ep, OnyxEvent** out);
  OnyxStatus* (*record_event)(OnyxEp* ep, OnyxEvent* e, OnyxStream* s);
  /* Makes stream s wait for e; s NULL: the calling host thread waits. An error
   * of the work e tracks comes back here. */
  OnyxStatus* (*wait_event)(OnyxEp* ep, OnyxEvent* e, OnyxStream* s);
  void (*release_event)(OnyxEp* ep, OnyxEvent* e);

  /* Required. Releases the EP after every kernel state and stream of it. */
  void (*release)(OnyxEp* ep);

  /* ======================= ABI 1.1 (struct_size covers them) ================= */
  /* Optional, NULL: none. The provider's own graph transformer. Called once at
   * session creation, after placement and before the host's fusions, with a
   * view of the nodes placed on this EP by claim_node (not those of compiled
   * groups), in topological order; the view's inputs and outputs are the
   * graph's. Rewrites go through host->edit_replace. A node this provider
   * was given stays with it: the host's fusions run afterwards only inside
   * one provider's nodes and only into ops that provider has kernels for. */
  OnyxStatus* (*transform)(OnyxEp* ep, const OnyxGraphView* nodes, OnyxGraphEdit* edit);
  /* Optional, NULL: compiled groups are never cached. With the session's
   * cache_dir set, the host calls save_compiled after compile and stores what
   * the provider wrote (host->blob_write) under a key made of the group's
   * content (ops, attributes, value types and shapes, constant data), the
   * provider's name and version, and its options. Called once per group, from
   * one thread. */
  OnyxStatus* (*save_compiled)(OnyxEp* ep, const OnyxGraphView* group,
                               const OnyxCompiledKernel* kernel, OnyxBlobWriter* w);
  /* Optional, NULL: compile always runs. Called instead of compile when the
   * cache holds an entry for the group; `data` is borrowed for the call. An
   * error (a stale, corrupt or foreign entry) is not fatal: the host logs a
   * warning, compiles the group and saves it again. */
  OnyxStatus* (*load_compiled)(OnyxEp* ep, const OnyxGraphView* group, const void* data,
                               size_t bytes, OnyxCompiledKernel* out);
};

/* The one exported symbol. The host passes its API table (valid until the
 * library is closed); the provider checks host->abi_major, returns its table
 * in *out, and returns NULL, or an error status created with
 * host->status_create. */
typedef OnyxStatus* (*OnyxProviderInitFn)(const OnyxHostApi* host, const OnyxProvider** out);
#define ONYX_PROVIDER_INIT_SYMBOL "onyx_provider_init"
ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out);

/* ------------------------------------------------------------------------ */
/* Sizes pinned per minor version: growing a struct is a minor bump and adds  */
/* a line here; changing an existing line is an ABI break.                    */
/* ------------------------------------------------------------------------ */
#if defined(__x86_64__) || defined(__aarch64__)
#define ONYX_ABI_V1_0_HOST_API_SIZE        568
#define ONYX_ABI_V1_0_PROVIDER_SIZE        112
#define ONYX_ABI_V1_0_EP_SIZE              136
#define ONYX_ABI_V1_0_KERNEL_DEF_SIZE      128
#define ONYX_ABI_V1_0_SCHEMA_DEF_SIZE      112
#define ONYX_ABI_V1_0_EP_CREATE_ARGS_SIZE  48
#define ONYX_ABI_V1_0_DEVICE_INFO_SIZE     72
#define ONYX_ABI_V1_0_ALLOCATOR_SIZE       56
#define ONYX_ABI_V1_0_COMPILED_KERNEL_SIZE 32
/* 1.1: the value-consumer, graph-edit and blob functions, cancellation and
 * string lengths (tensors and list attributes); transform and the
 * compiled-group cache slots. */
#define ONYX_ABI_V1_1_HOST_API_SIZE 664
#define ONYX_ABI_V1_1_EP_SIZE       160
#ifndef __cplusplus
_Static_assert(offsetof(OnyxHostApi, value_consumer_count) == ONYX_ABI_V1_0_HOST_API_SIZE,
               "OnyxHostApi v1.1 starts where v1.0 ends");
_Static_assert(sizeof(OnyxHostApi) == ONYX_ABI_V1_1_HOST_API_SIZE, "OnyxHostApi v1.1 size");
_Static_assert(sizeof(OnyxProvider) == ONYX_ABI_V1_0_PROVIDER_SIZE, "OnyxProvider v1.0 size");
_Static_assert(offsetof(OnyxEp, transform) == ONYX_ABI_V1_0_EP_SIZE,
               "OnyxEp v1.1 starts where v1.0 ends");
_Static_assert(sizeof(OnyxEp) == ONYX_ABI_V1_1_EP_SIZE, "OnyxEp v1.1 size");
_Static_assert(sizeof(OnyxKernelDef) == ONYX_ABI_V1_0_KERNEL_DEF_SIZE, "OnyxKernelDef v1.0");
_Static_assert(sizeof(OnyxSchemaDef) == ONYX_ABI_V1_0_SCHEMA_DEF_SIZE, "OnyxSchemaDef v1.0");
_Static_assert(sizeof(OnyxEpCreateArgs) == ONYX_ABI_V1_0_EP_CREATE_ARGS_SIZE, "EpCreateArgs");
_Static_assert(sizeof(OnyxDeviceInfo) == ONYX_ABI_V1_0_DEVICE_INFO_SIZE, "OnyxDeviceInfo v1.0");
_Static_assert(sizeof(OnyxAllocator) == ONYX_ABI_V1_0_ALLOCATOR_SIZE, "OnyxAllocator v1.0");
_Static_assert(sizeof(OnyxCompiledKernel) == ONYX_ABI_V1_0_COMPILED_KERNEL_SIZE, "Compiled");
_Static_assert(sizeof(OnyxMemoryDevice) == 24, "OnyxMemoryDevice is frozen");
_Static_assert(sizeof(OnyxTypeConstraint) == 24, "OnyxTypeConstraint is frozen");
_Static_assert(sizeof(OnyxAlias) == 12, "OnyxAlias is frozen");
#endif
#endif

/* ------------------------------------------------------------------------ */
/* Extension: collectives (ABI 1.1)                                          */
/* ------------------------------------------------------------------------ */

/* Extension types (OnyxExtension.type). */
#define ONYX_EXT_COLLECTIVES 1u

/* On the OnyxEpCreateArgs.next chain when the session has a process group
 * (onyx_distributed.h): the host's collectives over host memory, for the
 * kernels of the com.onyx.collective ops. Unlike the rest of the create
 * arguments, this struct and `group` stay valid until the EP is released, so
 * the provider may keep the pointer. Absent: the session has no process
 * group, and a collective op may run only with group_size 1.
 *
 * Every function is blocking and collective (every rank calls it with
 * matching arguments), bounded by the group's timeout, and polls
 * should_stop(ctx) (pass host->ctx_should_stop and the kernel's context, or
 * NULL) to return ONYX_CANCELLED early. Types and ops are those of
 * onyx_distributed.h (OnyxElemType, OnyxReduceOp). A GPU provider bootstraps
 * its own communicator through broadcast (e.g. NCCL's unique id from rank 0). */
typedef int32_t (*OnyxStopFn)(const OnyxKernelContext* ctx);
typedef struct OnyxCollectivesExt {
  OnyxExtension base; /* type ONYX_EXT_COLLECTIVES */
  void* group;
  int32_t rank;
  int32_t size;
  int32_t local_rank;
  uint32_t timeout_ms;
  OnyxStatus* (*all_reduce)(void* group, void* buf, size_t count, int32_t type, int32_t op,
                            OnyxStopFn should_stop, const OnyxKernelContext* ctx);
  OnyxStatus* (*all_gather)(void* group, const void* send, void* recv, size_t count_per_rank,
                            int32_t type, OnyxStopFn should_stop, const OnyxKernelContext* ctx);
  OnyxStatus* (*reduce_scatter)(void* group, const void* send, void* recv, size_t count_per_rank,
                                int32_t type, int32_t op, OnyxStopFn should_stop,
                                const OnyxKernelContext* ctx);
  OnyxStatus* (*broadcast)(void* group, void* buf, size_t bytes, int32_t root,
                           OnyxStopFn should_stop, const OnyxKernelContext* ctx);
  OnyxStatus* (*all_to_all)(void* group, const void* send, void* recv, size_t count_per_rank,
                            int32_t type, OnyxStopFn should_stop, const OnyxKernelContext* ctx);
  OnyxStatus* (*barrier)(void* group, OnyxStopFn should_stop, const OnyxKernelContext* ctx);
  /* Present when base.struct_size covers them: a nonblocking all-reduce in
   * two halves. all_reduce_start copies buf (the group owns the copy, so buf
   * may be reused at once), posts the reduction and returns a handle;
   * all_reduce_wait(handle) waits for it (bounded by the timeout, polling
   * should_stop) and writes the result into buf. Every rank starts its
   * all-reduces in the same order; each handle is waited for exactly once,
   * with the count, type and op of its start. */
  OnyxStatus* (*all_reduce_start)(void* group, const void* buf, size_t count, int32_t type,
                                  int32_t op, uint64_t* handle, const OnyxKernelContext* ctx);
  OnyxStatus* (*all_reduce_wait)(void* group, uint64_t handle, void* buf, size_t count,
                                 int32_t type, int32_t op, OnyxStopFn should_stop,
                                 const OnyxKernelContext* ctx);
} OnyxCollectivesExt;
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(__cplusplus)
#define ONYX_ABI_V1_1_COLLECTIVES_EXT_SIZE 96
_Static_assert(offsetof(OnyxCollectivesExt, all_reduce_start) == ONYX_ABI_V1_1_COLLECTIVES_EXT_SIZE,
               "OnyxCollectivesExt v1.1 size");
#endif

/* ------------------------------------------------------------------------ */
/* Extension: run graphs (ABI 1.1)                                           */
/* ------------------------------------------------------------------------ */

#define ONYX_EXT_RUN_GRAPH 2u

/* On the OnyxEp.next chain of an EP that can record the device work of a
 * whole run and replay it later with one launch (CUDA / HIP graphs), when
 * the EP's options ask for it. The struct is the EP's and stays valid until
 * the EP is released. A host without the type ignores it and runs every
 * node as usual.
 *
 * The host uses it only for a run in which every step is a kernel of this
 * EP (or a copy that moves no data: an input or output bound in this EP's
 * memory), every graph input is bound in this EP's default memory and every
 * requested output is bound at a fixed address in it (IO binding). After
 * warmup_runs such runs executed as usual (lazy allocations, algorithm
 * choices and caches happen there), the next one is captured:
 *   capture_begin(ep, s); the kernels' compute calls, queued on s as usual;
 *   capture_end(ep, s, keep = 1, &graph)
 * where capture_end ends the capture and, with keep, makes the graph and
 * launches it once on s (the captured work has not run yet). The host keeps
 * every buffer the captured run allocated until it releases the graph, so
 * the recorded addresses stay valid. A later run with the same input shapes
 * and the same input and output addresses calls replay(ep, s, graph)
 * instead of the nodes' compute. Any other run executes the nodes as usual.
 * An error from a kernel during the capture, or from capture_end, makes the
 * host call capture_end(keep = 0) (when it has not already), log the
 * reason, run the same run again as usual and stop trying graphs for the
 * session; with `required` 1 that error, and any run that cannot use the
 * graph, fails instead. The host never captures while another run of the
 * session is in flight, and runs that start meanwhile wait for the capture.
 * release_graph is called once per kept graph before the EP is released. */
typedef struct OnyxRunGraphExt {
  OnyxExtension base;   /* type ONYX_EXT_RUN_GRAPH */
  int32_t required;     /* 1: a run that cannot use the graph fails instead */
  uint32_t warmup_runs; /* eligible runs executed as usual before the capture; 0 reads as 1 */
  OnyxStatus* (*capture_begin)(OnyxEp* ep, OnyxStream* s);
  OnyxStatus* (*capture_end)(OnyxEp* ep, OnyxStream* s, int32_t keep, uint64_t* graph);
  OnyxStatus* (*replay)(OnyxEp* ep, OnyxStream* s, uint64_t graph);
  void (*release_graph)(OnyxEp* ep, uint64_t graph);
} OnyxRunGraphExt;
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(__cplusplus)
#define ONYX_ABI_V1_1_RUN_GRAPH_EXT_SIZE 64
_Static_assert(sizeof(OnyxRunGraphExt) == ONYX_ABI_V1_1_RUN_GRAPH_EXT_SIZE,
               "OnyxRunGraphExt v1.1 size");
#endif

/* ------------------------------------------------------------------------ */
/* Extension: run events (ABI 1.1)                                           */
/* ------------------------------------------------------------------------ */

#define ONYX_EXT_RUN_EVENT 3u

/* On the OnyxEp.next chain of an EP whose events can be polled and waited
 * for with a time limit. The struct is the EP's and stays valid until the EP
 * is released. A host without the type ignores it.
 *
 * With it the host may end an asynchronous run (onyx.h,
 * onyx_session_run_with_binding_async) without synchronizing the EP's
 * stream: it creates an event (create_event), records it on the stream
 * behind the run's work (record_event) and returns; later it calls
 * query_event or wait_event_for until the work is done, then release_event.
 * Without the extension every run ends with sync_stream, as before.
 *
 * query_event: *done = 1 when the work queued before e's last record has
 * completed, 0 while it has not; an error status (and *done = 1) when that
 * work failed (a kernel's asynchronous fault). wait_event_for: the same
 * after blocking until the work is done or timeout_ms milliseconds have
 * passed (negative: no limit; *done = 0 when the time ran out). Both may be
 * called from any thread, for different events at once. native_event: the
 * vendor's handle of e (cudaEvent_t, hipEvent_t) for the caller's own
 * streams to wait on, or NULL. */
typedef struct OnyxRunEventExt {
  OnyxExtension base; /* type ONYX_EXT_RUN_EVENT */
  OnyxStatus* (*query_event)(OnyxEp* ep, OnyxEvent* e, int32_t* done);
  OnyxStatus* (*wait_event_for)(OnyxEp* ep, OnyxEvent* e, int64_t timeout_ms, int32_t* done);
  void* (*native_event)(OnyxEp* ep, OnyxEvent* e);
} OnyxRunEventExt;
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(__cplusplus)
#define ONYX_ABI_V1_1_RUN_EVENT_EXT_SIZE 48
_Static_assert(sizeof(OnyxRunEventExt) == ONYX_ABI_V1_1_RUN_EVENT_EXT_SIZE,
               "OnyxRunEventExt v1.1 size");
#endif

#ifdef __cplusplus
}
#endif
#endif /* ONYX_EP_H */
