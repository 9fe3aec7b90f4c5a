/* schemas_cf.c — the cf family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows.
 *
 * The control-flow, sequence and optional ops are host ops: the host infers
 * their outputs itself (host/exec/control.c, sequence.c); only arity and
 * attributes come from these rows. Rows: SequenceMap-17 (its variadic
 * additional_inputs may be empty, which the generated row misses),
 * OptionalHasElement-18 / OptionalGetElement-18 (input optional, or a plain
 * tensor or sequence; from the ONNX Changelog); FlexAttention-1 of
 * ai.onnx.preview (a host op, host/exec/control.c). */
#include <string.h>
#include "infer_util.h"
#include "ox_function_body.h"
#include "schema_internal.h"

/* Every element type, as a plain tensor, in a sequence, or optional. */
#define CF_ELEMS                                                                                   \
  (OX_T(ONYX_ELEM_BOOL) | OX_T(ONYX_ELEM_COMPLEX128) | OX_T(ONYX_ELEM_COMPLEX64) |                 \
   OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT64) |                   \
   OX_T(ONYX_ELEM_INT16) | OX_T(ONYX_ELEM_INT32) | OX_T(ONYX_ELEM_INT64) | OX_T(ONYX_ELEM_INT8) |  \
   OX_T(ONYX_ELEM_STRING) | OX_T(ONYX_ELEM_UINT16) | OX_T(ONYX_ELEM_UINT32) |                      \
   OX_T(ONYX_ELEM_UINT64) | OX_T(ONYX_ELEM_UINT8) | OX_T(ONYX_ELEM_BFLOAT16))
#define CF_ANY (CF_ELEMS | OX_T_SEQ | OX_T_OPTIONAL)

static const OxFormal f_seqmap_in[] = {
    {"input_sequence", "S", ONYX_PARAM_SINGLE, 1},
    {"additional_inputs", "V", ONYX_PARAM_VARIADIC, 0},
};
static const OxFormal f_seqmap_out[] = {{"out_sequence", "S", ONYX_PARAM_VARIADIC, 1}};
static const OxTypeConstr c_seqmap[] = {{"S", CF_ELEMS | OX_T_SEQ}, {"V", CF_ELEMS | OX_T_SEQ}};
static const OxAttrSpec a_body[] = {{.name = "body", .type = ONYX_ATTR_GRAPH, .required = true}};

static const OxFormal f_opt18_in[] = {{"input", "O", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_has18_out[] = {{"output", "B", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr c_has18[] = {{"O", CF_ANY}, {"B", OX_T(ONYX_ELEM_BOOL)}};
static const OxFormal f_get18_in[] = {{"input", "O", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_get18_out[] = {{"output", "V", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr c_get18[] = {{"O", CF_ANY}, {"V", CF_ELEMS | OX_T_SEQ}};

#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)

/* FlexAttention (ai.onnx.preview 1): Q, K, V -> Y; scale and the optional
 * score_mod / prob_mod subgraphs (one tensor in, one out). */
static const OxFormal f_flex_in[] = {{"Q", "T", ONYX_PARAM_SINGLE, 1},
                                     {"K", "T", ONYX_PARAM_SINGLE, 1},
                                     {"V", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_flex_out[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr c_flex[] = {{"T", OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_FLOAT32) |
                                                OX_T(ONYX_ELEM_FLOAT64) |
                                                OX_T(ONYX_ELEM_BFLOAT16)}};
static const OxAttrSpec a_flex[] = {{.name = "prob_mod", .type = ONYX_ATTR_GRAPH},
                                    {.name = "scale", .type = ONYX_ATTR_FLOAT},
                                    {.name = "score_mod", .type = ONYX_ATTR_GRAPH}};

static const OxSchema cf_rows[] = {
    {"", "SequenceMap", 17, L(f_seqmap_in), L(f_seqmap_out), L(c_seqmap), L(a_body), NULL, NULL,
     NULL, true},
    {"", "OptionalHasElement", 18, L(f_opt18_in), L(f_has18_out), L(c_has18), NULL, 0, NULL, NULL,
     NULL, true},
    {"ai.onnx.preview", "FlexAttention", 1, L(f_flex_in), L(f_flex_out), L(c_flex), L(a_flex), NULL,
     NULL, NULL, true},
    {"", "OptionalGetElement", 18, L(f_get18_in), L(f_get18_out), L(c_get18), NULL, 0, NULL, NULL,
     NULL, true},
};

const OxSchemaFamily ox_family_cf = {"cf", cf_rows, OX_ARRAY_LEN(cf_rows), NULL, 0};

const uint8_t* ox_schema_function_body(const char* domain, const char* op_type,
                                       int32_t since_version, size_t* len) {
  const OxFunctionBody* best = NULL;
  for (size_t i = 0; i < ox_gen_functions_count; i++) {
    const OxFunctionBody* f = &ox_gen_functions[i];
    if (strcmp(f->domain, domain ? domain : "") || strcmp(f->op_type, op_type) ||
        f->since_version > since_version)
      continue;
    if (!best || f->since_version > best->since_version) best = f;
  }
  if (!best) return NULL;
  *len = best->len;
  return best->bytes;
}
