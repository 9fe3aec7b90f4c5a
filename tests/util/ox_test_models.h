/* ox_test_models.h — build serialized ONNX models in unit tests.
 *
 *   OxTestModel* m = otm_new(17);                       // ai.onnx opset 17, IR 8
 *   otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
 *   otm_input_s(m, "Y", ONYX_ELEM_FLOAT32, "N,3");       // "N" is a dim_param
 *   otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
 *   OxTestNode* n = otm_node(m, "Gemm", "gemm0", "X,W,B", "Z");
 *   otm_attr_int(n, "transB", 1);
 *   otm_output(m, "Z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, -1});
 *   uint8_t* bytes; size_t len;
 *   otm_serialize(m, &bytes, &len);                      // or otm_write(m, path)
 *   ...; free(bytes); otm_free(m);
 *
 * Subgraphs: otm_begin_graph(m, "body") makes the builder functions target a
 * new graph until otm_end_graph(m) returns it for otm_attr_graph.
 *
 * Every function returns the proto it built, for tests that need to bend a
 * field (e.g. `otm_attr_int(n, "axis", 1)->has_type = 0` for an old model).
 * Whatever a test stores into these protos must be malloc'd (otm_strdup,
 * otm_alloc), because otm_free releases the tree with protobuf-c.
 * Out of memory aborts the test. */
#ifndef OX_TEST_MODELS_H
#define OX_TEST_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "onnx.pb-c.h"
#include "onyx/onyx_types.h" /* ONYX_ELEM_* for elem_type arguments */

typedef struct OxTestModel OxTestModel;
typedef struct OxTestNode OxTestNode;

/* A model with IR version 8, producer "onyx-test", graph "test" and one
 * opset import (ai.onnx `opset`; opset <= 0: none). */
OxTestModel* otm_new(int64_t opset);
void otm_free(OxTestModel* m);
void otm_set_ir_version(OxTestModel* m, int64_t ir_version);
/* Adds an opset import; domain "" is ai.onnx. */
Onnx__OperatorSetIdProto* otm_add_opset(OxTestModel* m, const char* domain, int64_t version);
void otm_set_graph_name(OxTestModel* m, const char* name);

/* --- values ------------------------------------------------------------------------ */
/* dims: `rank` entries; -1 is a symbolic dim named "<name>_<i>". rank -1:
 * unknown shape. elem_type 0 with rank -1: no type at all. */
Onnx__ValueInfoProto* otm_input(OxTestModel* m, const char* name, int elem_type, int rank,
                                const int64_t* dims);
Onnx__ValueInfoProto* otm_output(OxTestModel* m, const char* name, int elem_type, int rank,
                                 const int64_t* dims);
Onnx__ValueInfoProto* otm_value_info(OxTestModel* m, const char* name, int elem_type, int rank,
                                     const int64_t* dims);
/* The same with a shape string: "N,3,224,224" (numbers are fixed dims,
 * names are dim_params, "?" an unknown dim); "" is a scalar, NULL an
 * unknown shape. */
Onnx__ValueInfoProto* otm_input_s(OxTestModel* m, const char* name, int elem_type,
                                  const char* shape);
Onnx__ValueInfoProto* otm_output_s(OxTestModel* m, const char* name, int elem_type,
                                   const char* shape);

/* --- tensors ------------------------------------------------------------------------ */
/* A detached TensorProto (for otm_attr_tensor). data: the host bytes of the
 * elements (sub-byte types packed, as ox_type_bytes counts them), or for
 * strings a `const char* const*`; NULL: zeros / empty strings. Stored in
 * raw_data (strings in string_data). */
Onnx__TensorProto* otm_tensor(OxTestModel* m, const char* name, int elem_type, int rank,
                              const int64_t* dims, const void* data);
/* otm_tensor added to the current graph's initializers. */
Onnx__TensorProto* otm_initializer(OxTestModel* m, const char* name, int elem_type, int rank,
                                   const int64_t* dims, const void* data);
/* Moves raw_data into the typed field ONNX prescribes for the type
 * (float_data, int32_data, int64_data, double_data, uint64_data). */
void otm_tensor_typed(Onnx__TensorProto* t);
/* Makes a tensor external: entries location, offset (if >= 0) and length
 * (if >= 0); raw_data is dropped (write it to the file yourself). */
void otm_tensor_external(Onnx__TensorProto* t, const char* location, int64_t offset,
                         int64_t length);

/* --- nodes and attributes ------------------------------------------------------------ */
/* inputs/outputs: comma-separated names, "" entries for absent optional
 * values ("X,,B"); "" or NULL: none. name NULL: unnamed. */
OxTestNode* otm_node(OxTestModel* m, const char* op_type, const char* name, const char* inputs,
                     const char* outputs);
/* The same with NULL-terminated name arrays. */
OxTestNode* otm_node_v(OxTestModel* m, const char* op_type, const char* name,
                       const char* const* inputs, const char* const* outputs);
void otm_node_domain(OxTestNode* n, const char* domain);
Onnx__NodeProto* otm_node_proto(OxTestNode* n);

Onnx__AttributeProto* otm_attr_int(OxTestNode* n, const char* name, int64_t v);
Onnx__AttributeProto* otm_attr_float(OxTestNode* n, const char* name, float v);
Onnx__AttributeProto* otm_attr_string(OxTestNode* n, const char* name, const char* v);
Onnx__AttributeProto* otm_attr_ints(OxTestNode* n, const char* name, size_t count,
                                    const int64_t* v);
Onnx__AttributeProto* otm_attr_floats(OxTestNode* n, const char* name, size_t count,
                                      const float* v);
Onnx__AttributeProto* otm_attr_strings(OxTestNode* n, const char* name, size_t count,
                                       const char* const* v);
/* Takes ownership of t (from otm_tensor). */
Onnx__AttributeProto* otm_attr_tensor(OxTestNode* n, const char* name, Onnx__TensorProto* t);
Onnx__AttributeProto* otm_attr_tensors(OxTestNode* n, const char* name, size_t count,
                                       Onnx__TensorProto* const* t);
/* Takes ownership of g (from otm_end_graph). */
Onnx__AttributeProto* otm_attr_graph(OxTestNode* n, const char* name, Onnx__GraphProto* g);
Onnx__AttributeProto* otm_attr_graphs(OxTestNode* n, const char* name, size_t count,
                                      Onnx__GraphProto* const* g);

/* --- subgraphs ------------------------------------------------------------------------ */
void otm_begin_graph(OxTestModel* m, const char* name);
Onnx__GraphProto* otm_end_graph(OxTestModel* m);

/* --- raw access ------------------------------------------------------------------------ */
Onnx__ModelProto* otm_proto(OxTestModel* m);
Onnx__GraphProto* otm_graph(OxTestModel* m); /* the graph being built */
void* otm_alloc(size_t bytes);               /* zeroed; malloc'd */
char* otm_strdup(const char* s);
/* A bare model-local function (domain, name) for loader tests. */
Onnx__FunctionProto* otm_add_function(OxTestModel* m, const char* domain, const char* name);

/* --- output ------------------------------------------------------------------------------ */
/* *bytes is malloc'd: free() it. */
void otm_serialize(OxTestModel* m, uint8_t** bytes, size_t* len);
bool otm_write(OxTestModel* m, const char* path);

/* --- files --------------------------------------------------------------------------------- */
/* A new folder under $TMPDIR (or /tmp); malloc'd path. NULL on failure. */
char* otm_temp_dir(void);
/* Removes a folder and everything in it (symlinks are removed, not followed). */
void otm_remove_dir(const char* path);
bool otm_write_file(const char* path, const void* data, size_t len);

#endif
