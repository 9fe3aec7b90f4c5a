/* onnx_schemas.c — the built-in ai.onnx schema table.
 *
 * One row per (op, since_version) in which ONNX (re)defined the op, from
 * opset 1 to 25. The data follows the ONNX operator Changelog: formal
 * inputs/outputs, type constraints (as OX_T masks) and attributes with
 * their defaults. Versions that only widened the type lists still get their
 * own row, so that a type check at opset N uses the list of opset N.
 *
 * tests/unit/schemas/compare_onnx.py checks every row up to opset 17 against
 * the schemas of the onnx Python package. */
#include "schema_internal.h"

/* --- Type sets ------------------------------------------------------------ */
#define T_(x)  OX_T(ONYX_ELEM_##x)
#define M_F    (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64))
#define M_FB   (M_F | T_(BFLOAT16))
#define M_SINT (T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64))
#define M_UINT (T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64))
#define M_F8   (T_(FLOAT8E4M3FN) | T_(FLOAT8E4M3FNUZ) | T_(FLOAT8E5M2) | T_(FLOAT8E5M2FNUZ))
#define M_I4   (T_(UINT4) | T_(INT4))
#define M_I2   (T_(UINT2) | T_(INT2))
/* The (u)int32/64 + float set of the opset-7 arithmetic and reductions. */
#define M_NUM7 (T_(UINT32) | T_(UINT64) | T_(INT32) | T_(INT64) | M_F)
#define M_NUM  (M_F | M_SINT | M_UINT) /* all numeric */
#define M_NUMB (M_NUM | T_(BFLOAT16))
/* "All tensor types", growing with the IR version. */
#define M_ALL   (M_NUM | T_(STRING) | T_(BOOL) | T_(COMPLEX64) | T_(COMPLEX128))
#define M_ALL4  (M_ALL | T_(BFLOAT16))
#define M_ALL9  (M_ALL4 | M_F8)
#define M_ALL10 (M_ALL9 | M_I4)
#define M_ALL11 (M_ALL10 | T_(FLOAT4E2M1))
#define M_ALL12 (M_ALL11 | T_(FLOAT8E8M0))
#define M_ALL13 (M_ALL12 | M_I2)
/* Cast's lists: every non-complex type of the time. */
#define M_CAST1  (M_F | M_SINT | M_UINT | T_(BOOL))
#define M_CAST9  (M_CAST1 | T_(STRING))
#define M_CAST13 (M_CAST9 | T_(BFLOAT16))
#define M_CAST19 (M_CAST13 | M_F8)
#define M_CAST21 (M_CAST19 | M_I4)
#define M_CAST23 (M_CAST21 | T_(FLOAT4E2M1))
#define M_CAST24 (M_CAST23 | T_(FLOAT8E8M0))
#define M_CAST25 (M_CAST24 | M_I2)
/* ConstantOfShape's value types. */
#define M_COS9  M_CAST1
#define M_COS20 (M_CAST1 | T_(BFLOAT16) | M_F8)
#define M_COS21 (M_COS20 | M_I4)
#define M_COS23 (M_COS21 | T_(FLOAT4E2M1))
#define M_COS24 (M_COS23 | T_(FLOAT8E8M0))
#define M_COS25 (M_COS24 | M_I2)

/* --- Row helpers ------------------------------------------------------------ */
#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_OPTIONAL, 1 }
#define VAR(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_VARIADIC, 1 }
#define I64 "tensor(int64)"

#define AI(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_INT, .has_default = true, .def_i = (d) }
#define AF(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = (d) }
#define AS(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_STRING, .has_default = true, .def_s = (d) }
#define AO(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t } /* optional */
#define AR(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t, .required = true } /* required */

#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)
#define NONE NULL, 0
/* S(op, version, inputs, outputs, constraints, attributes, infer), each list
 * as L(array) or NONE. Variadic so that L() expanded early (inside the family
 * macros below) still fits. */
#define S(op, ver, ...)                                                                            \
  { "", op, ver, __VA_ARGS__, NULL, NULL, true }

/* --- Formal parameter lists ------------------------------------------------- */
static const OxFormal f_X[] = {REQ("X", "T")};
static const OxFormal f_Y[] = {REQ("Y", "T")};
static const OxFormal f_input[] = {REQ("input", "T")};
static const OxFormal f_output[] = {REQ("output", "T")};
static const OxFormal f_AB[] = {REQ("A", "T"), REQ("B", "T")};
static const OxFormal f_C[] = {REQ("C", "T")};
static const OxFormal f_C1[] = {REQ("C", "T1")};
static const OxFormal f_pow_in[] = {REQ("X", "T"), REQ("Y", "T")};
static const OxFormal f_pow12_in[] = {REQ("X", "T"), REQ("Y", "T1")};
static const OxFormal f_Z[] = {REQ("Z", "T")};
static const OxFormal f_gemm_in[] = {REQ("A", "T"), REQ("B", "T"), REQ("C", "T")};
static const OxFormal f_gemm11_in[] = {REQ("A", "T"), REQ("B", "T"), OPT("C", "T")};
static const OxFormal f_conv_in[] = {REQ("X", "T"), REQ("W", "T"), OPT("B", "T")};
static const OxFormal f_maxpool8_out[] = {REQ("Y", "T"), OPT("Indices", "I")};
static const OxFormal f_bn_in[] = {REQ("X", "T"), REQ("scale", "T"), REQ("B", "T"),
                                   REQ("mean", "T"), REQ("var", "T")};
static const OxFormal f_bn_out[] = {REQ("Y", "T"), OPT("mean", "T"), OPT("var", "T"),
                                    OPT("saved_mean", "T"), OPT("saved_var", "T")};
static const OxFormal f_bn14_in[] = {REQ("X", "T"), REQ("scale", "T"), REQ("B", "T"),
                                     REQ("input_mean", "U"), REQ("input_var", "U")};
static const OxFormal f_bn14_out[] = {REQ("Y", "T"), OPT("running_mean", "U"),
                                      OPT("running_var", "U")};
static const OxFormal f_bn15_in[] = {REQ("X", "T"), REQ("scale", "T1"), REQ("B", "T1"),
                                     REQ("input_mean", "T2"), REQ("input_var", "T2")};
static const OxFormal f_bn15_out[] = {REQ("Y", "T"), OPT("running_mean", "T2"),
                                      OPT("running_var", "T2")};
static const OxFormal f_ln_in[] = {REQ("X", "T"), REQ("Scale", "T"), OPT("B", "T")};
static const OxFormal f_ln_out[] = {REQ("Y", "T"), OPT("Mean", "U"), OPT("InvStdDev", "U")};
static const OxFormal f_data[] = {REQ("data", "T")};
static const OxFormal f_reshaped[] = {REQ("reshaped", "T")};
static const OxFormal f_reshape5_in[] = {REQ("data", "T"), REQ("shape", I64)};
static const OxFormal f_transposed[] = {REQ("transposed", "T")};
static const OxFormal f_concat_in[] = {VAR("inputs", "T")};
static const OxFormal f_concat_out[] = {REQ("concat_result", "T")};
static const OxFormal f_split1_in[] = {REQ("input", "T"), OPT("split", "T")};
static const OxFormal f_split1_out[] = {VAR("outputs...", "T")};
static const OxFormal f_split_out[] = {VAR("outputs", "T")};
static const OxFormal f_split13_in[] = {REQ("input", "T"), OPT("split", I64)};
static const OxFormal f_slice10_in[] = {REQ("data", "T"), REQ("starts", "Tind"),
                                        REQ("ends", "Tind"), OPT("axes", "Tind"),
                                        OPT("steps", "Tind")};
static const OxFormal f_squeezed[] = {REQ("squeezed", "T")};
static const OxFormal f_axes_opt_in[] = {REQ("data", "T"), OPT("axes", I64)};
static const OxFormal f_expanded[] = {REQ("expanded", "T")};
static const OxFormal f_unsqueeze13_in[] = {REQ("data", "T"), REQ("axes", I64)};
static const OxFormal f_gather_in[] = {REQ("data", "T"), REQ("indices", "Tind")};
static const OxFormal f_shape_out[] = {REQ("shape", "T1")};
static const OxFormal f_cast_in[] = {REQ("input", "T1")};
static const OxFormal f_cast_out[] = {REQ("output", "T2")};
static const OxFormal f_cos_in[] = {REQ("input", "T1")};
static const OxFormal f_V_in[] = {REQ("input", "V")};
static const OxFormal f_V_out[] = {REQ("output", "V")};
static const OxFormal f_dropout_out[] = {REQ("output", "T"), OPT("mask", "T")};
static const OxFormal f_dropout10_out[] = {REQ("output", "T"), OPT("mask", "T1")};
static const OxFormal f_dropout12_in[] = {REQ("data", "T"), OPT("ratio", "T1"),
                                          OPT("training_mode", "T2")};
static const OxFormal f_dropout12_out[] = {REQ("output", "T"), OPT("mask", "T2")};
static const OxFormal f_reduced[] = {REQ("reduced", "T")};
static const OxFormal f_where_in[] = {REQ("condition", "B"), REQ("X", "T"), REQ("Y", "T")};
static const OxFormal f_expand_in[] = {REQ("input", "T"), REQ("shape", I64)};
static const OxFormal f_clip11_in[] = {REQ("input", "T"), OPT("min", "T"), OPT("max", "T")};

/* --- Type constraint lists ------------------------------------------------------ */
#define TC1(name, n, m)           static const OxTypeConstr name[] = {{n, m}}
#define TC2(name, n1, m1, n2, m2) static const OxTypeConstr name[] = {{n1, m1}, {n2, m2}}
TC1(t_F, "T", M_F);
TC1(t_FB, "T", M_FB);
TC1(t_NUM7, "T", M_NUM7);
TC1(t_NUM7B, "T", M_NUM7 | T_(BFLOAT16));
TC1(t_NUM, "T", M_NUM);
TC1(t_NUMB, "T", M_NUMB);
TC1(t_SF, "T", M_F | M_SINT);                 /* Neg-6 */
TC1(t_SFB, "T", M_F | M_SINT | T_(BFLOAT16)); /* Neg-13, Relu-14 */
TC1(t_ALL, "T", M_ALL);
TC1(t_ALL4, "T", M_ALL4);
TC1(t_ALL9, "T", M_ALL9);
TC1(t_ALL10, "T", M_ALL10);
TC1(t_ALL11, "T", M_ALL11);
TC1(t_ALL12, "T", M_ALL12);
TC1(t_ALL13, "T", M_ALL13);
TC1(v_ALL4, "V", M_ALL4);
TC1(v_ALL9, "V", M_ALL9);
TC1(v_ALL10, "V", M_ALL10);
TC1(v_ALL11, "V", M_ALL11);
TC1(v_ALL12, "V", M_ALL12);
TC1(v_ALL13, "V", M_ALL13);
TC2(t_pow12, "T", T_(INT32) | T_(INT64) | M_F, "T1", M_NUM);
TC2(t_pow13, "T", T_(INT32) | T_(INT64) | M_FB, "T1", M_NUM);
TC2(t_pow15, "T", T_(INT32) | T_(INT64) | M_FB, "T1", M_NUMB);
TC2(t_maxpool8, "T", M_F, "I", T_(INT64));
TC2(t_maxpool12, "T", M_F | T_(INT8) | T_(UINT8), "I", T_(INT64));
TC2(t_maxpool22, "T", M_FB | T_(INT8) | T_(UINT8), "I", T_(INT64));
TC2(t_bn14, "T", M_FB, "U", M_FB);
static const OxTypeConstr t_bn15[] = {{"T", M_FB}, {"T1", M_FB}, {"T2", M_FB}};
TC2(t_ln, "T", M_FB, "U", T_(FLOAT32) | T_(BFLOAT16));
TC2(t_slice_ALL, "T", M_ALL, "Tind", T_(INT32) | T_(INT64));
TC2(t_slice_ALL4, "T", M_ALL4, "Tind", T_(INT32) | T_(INT64));
#define t_gather_ALL  t_slice_ALL
#define t_gather_ALL4 t_slice_ALL4
TC2(t_shape_ALL, "T", M_ALL, "T1", T_(INT64));
TC2(t_shape_ALL4, "T", M_ALL4, "T1", T_(INT64));
TC2(t_shape_ALL9, "T", M_ALL9, "T1", T_(INT64));
TC2(t_shape_ALL10, "T", M_ALL10, "T1", T_(INT64));
TC2(t_shape_ALL11, "T", M_ALL11, "T1", T_(INT64));
TC2(t_shape_ALL12, "T", M_ALL12, "T1", T_(INT64));
TC2(t_shape_ALL13, "T", M_ALL13, "T1", T_(INT64));
TC2(t_cast1, "T1", M_CAST1, "T2", M_CAST1);
TC2(t_cast9, "T1", M_CAST9, "T2", M_CAST9);
TC2(t_cast13, "T1", M_CAST13, "T2", M_CAST13);
TC2(t_cast19, "T1", M_CAST19, "T2", M_CAST19);
TC2(t_cast21, "T1", M_CAST21, "T2", M_CAST21);
TC2(t_cast23, "T1", M_CAST23, "T2", M_CAST23);
TC2(t_cast24, "T1", M_CAST24, "T2", M_CAST24);
TC2(t_cast25, "T1", M_CAST25, "T2", M_CAST25);
TC2(t_cos9, "T1", T_(INT64), "T2", M_COS9);
TC2(t_cos20, "T1", T_(INT64), "T2", M_COS20);
TC2(t_cos21, "T1", T_(INT64), "T2", M_COS21);
TC2(t_cos23, "T1", T_(INT64), "T2", M_COS23);
TC2(t_cos24, "T1", T_(INT64), "T2", M_COS24);
TC2(t_cos25, "T1", T_(INT64), "T2", M_COS25);
TC2(t_dropout10, "T", M_F, "T1", T_(BOOL));
static const OxTypeConstr t_dropout12[] = {{"T", M_F}, {"T1", M_F}, {"T2", T_(BOOL)}};
static const OxTypeConstr t_dropout13[] = {{"T", M_FB}, {"T1", M_F}, {"T2", T_(BOOL)}};
static const OxTypeConstr t_dropout22[] = {
    {"T", M_FB | M_F8}, {"T1", M_FB | M_F8}, {"T2", T_(BOOL)}};
TC2(t_where9, "B", T_(BOOL), "T", M_ALL);
TC2(t_where16, "B", T_(BOOL), "T", M_ALL4);
TC2(t_cmp_F, "T", M_F, "T1", T_(BOOL));
TC2(t_cmp_NUM, "T", M_NUM, "T1", T_(BOOL));
TC2(t_cmp_NUMB, "T", M_NUMB, "T1", T_(BOOL));
TC2(t_eq1, "T", T_(BOOL) | T_(INT32) | T_(INT64), "T1", T_(BOOL));
TC2(t_eq11, "T", T_(BOOL) | M_NUM, "T1", T_(BOOL));
TC2(t_eq13, "T", T_(BOOL) | M_NUMB, "T1", T_(BOOL));
TC2(t_eq19, "T", T_(BOOL) | M_NUMB | T_(STRING), "T1", T_(BOOL));

/* --- Attribute lists ----------------------------------------------------------- */
static const OxAttrSpec a_consumed[] = {AO("consumed_inputs", INTS)};
static const OxAttrSpec a_bcast1[] = {AO("axis", INT), AI("broadcast", 0),
                                      AO("consumed_inputs", INTS)};
static const OxAttrSpec a_bcast6[] = {AO("axis", INT), AI("broadcast", 0)};
static const OxAttrSpec a_gemm1[] = {AF("alpha", 1.0f), AF("beta", 1.0f), AI("broadcast", 0),
                                     AI("transA", 0), AI("transB", 0)};
static const OxAttrSpec a_gemm7[] = {AF("alpha", 1.0f), AF("beta", 1.0f), AI("transA", 0),
                                     AI("transB", 0)};
static const OxAttrSpec a_softmax1[] = {AI("axis", 1)};
static const OxAttrSpec a_softmax13[] = {AI("axis", -1)};
static const OxAttrSpec a_conv[] = {AS("auto_pad", "NOTSET"), AO("dilations", INTS),
                                    AI("group", 1),           AO("kernel_shape", INTS),
                                    AO("pads", INTS),         AO("strides", INTS)};
static const OxAttrSpec a_maxpool1[] = {AS("auto_pad", "NOTSET"), AR("kernel_shape", INTS),
                                        AO("pads", INTS), AO("strides", INTS)};
static const OxAttrSpec a_maxpool8[] = {AS("auto_pad", "NOTSET"), AR("kernel_shape", INTS),
                                        AO("pads", INTS), AI("storage_order", 0),
                                        AO("strides", INTS)};
static const OxAttrSpec a_maxpool10[] = {AS("auto_pad", "NOTSET"), AI("ceil_mode", 0),
                                         AO("dilations", INTS),    AR("kernel_shape", INTS),
                                         AO("pads", INTS),         AI("storage_order", 0),
                                         AO("strides", INTS)};
#define a_avgpool1 a_maxpool1
static const OxAttrSpec a_avgpool7[] = {AS("auto_pad", "NOTSET"), AI("count_include_pad", 0),
                                        AR("kernel_shape", INTS), AO("pads", INTS),
                                        AO("strides", INTS)};
static const OxAttrSpec a_avgpool10[] = {AS("auto_pad", "NOTSET"),   AI("ceil_mode", 0),
                                         AI("count_include_pad", 0), AR("kernel_shape", INTS),
                                         AO("pads", INTS),           AO("strides", INTS)};
static const OxAttrSpec a_avgpool19[] = {
    AS("auto_pad", "NOTSET"), AI("ceil_mode", 0), AI("count_include_pad", 0), AO("dilations", INTS),
    AR("kernel_shape", INTS), AO("pads", INTS),   AO("strides", INTS)};
static const OxAttrSpec a_bn1[] = {AR("consumed_inputs", INTS), AF("epsilon", 1e-5f),
                                   AI("is_test", 0), AF("momentum", 0.9f), AI("spatial", 1)};
static const OxAttrSpec a_bn6[] = {AF("epsilon", 1e-5f), AI("is_test", 0), AF("momentum", 0.9f),
                                   AI("spatial", 1)};
static const OxAttrSpec a_bn7[] = {AF("epsilon", 1e-5f), AF("momentum", 0.9f), AI("spatial", 1)};
static const OxAttrSpec a_bn9[] = {AF("epsilon", 1e-5f), AF("momentum", 0.9f)};
static const OxAttrSpec a_bn14[] = {AF("epsilon", 1e-5f), AF("momentum", 0.9f),
                                    AI("training_mode", 0)};
static const OxAttrSpec a_ln[] = {AI("axis", -1), AF("epsilon", 1e-5f), AI("stash_type", 1)};
static const OxAttrSpec a_reshape1[] = {AO("consumed_inputs", INTS), AO("shape", INTS)};
static const OxAttrSpec a_allowzero[] = {AI("allowzero", 0)};
static const OxAttrSpec a_axis1[] = {AI("axis", 1)};
static const OxAttrSpec a_perm[] = {AO("perm", INTS)};
static const OxAttrSpec a_concat1[] = {AO("axis", INT)};
static const OxAttrSpec a_concat4[] = {AR("axis", INT)};
static const OxAttrSpec a_split1[] = {AO("axis", INT), AO("split", INTS)};
static const OxAttrSpec a_split2[] = {AI("axis", 0), AO("split", INTS)};
static const OxAttrSpec a_axis0[] = {AI("axis", 0)};
static const OxAttrSpec a_split18[] = {AI("axis", 0), AO("num_outputs", INT)};
static const OxAttrSpec a_slice1[] = {AO("axes", INTS), AR("ends", INTS), AR("starts", INTS)};
static const OxAttrSpec a_axes_opt[] = {AO("axes", INTS)};
static const OxAttrSpec a_axes_req[] = {AR("axes", INTS)};
static const OxAttrSpec a_shape15[] = {AO("end", INT), AI("start", 0)};
static const OxAttrSpec a_cast1[] = {AR("to", STRING)};
static const OxAttrSpec a_cast6[] = {AR("to", INT)};
static const OxAttrSpec a_cast19[] = {AI("saturate", 1), AR("to", INT)};
static const OxAttrSpec a_cast24[] = {AS("round_mode", "up"), AI("saturate", 1), AR("to", INT)};
static const OxAttrSpec a_const1[] = {AR("value", TENSOR)};
static const OxAttrSpec a_const11[] = {AO("sparse_value", SPARSE_TENSOR), AO("value", TENSOR)};
static const OxAttrSpec a_const12[] = {
    AO("sparse_value", SPARSE_TENSOR), AO("value", TENSOR),         AO("value_float", FLOAT),
    AO("value_floats", FLOATS),        AO("value_int", INT),        AO("value_ints", INTS),
    AO("value_string", STRING),        AO("value_strings", STRINGS)};
static const OxAttrSpec a_value_opt[] = {AO("value", TENSOR)};
static const OxAttrSpec a_dropout1[] = {AO("consumed_inputs", INTS), AI("is_test", 0),
                                        AF("ratio", 0.5f)};
static const OxAttrSpec a_dropout6[] = {AI("is_test", 0), AF("ratio", 0.5f)};
static const OxAttrSpec a_dropout7[] = {AF("ratio", 0.5f)};
static const OxAttrSpec a_seed[] = {AO("seed", INT)};
static const OxAttrSpec a_reduce1[] = {AO("axes", INTS), AI("keepdims", 1)};
static const OxAttrSpec a_reduce13[] = {AI("keepdims", 1), AI("noop_with_empty_axes", 0)};
static const OxAttrSpec a_clip1[] = {AO("consumed_inputs", INTS), AO("max", FLOAT),
                                     AO("min", FLOAT)};
static const OxAttrSpec a_clip6[] = {AF("max", 3.402823466e+38f), AF("min", -3.402823466e+38f)};

/* --- Shorthands for the op families with one shape ------------------------------ */
/* An elementwise float op of opsets 1/6/13, formals named X->Y or input->output. */
#define UNARY_FAMILY(op, fin, fout)                                                                \
  S(op, 1, L(fin), L(fout), L(t_F), L(a_consumed), ox_infer_unary),                                \
      S(op, 6, L(fin), L(fout), L(t_F), NONE, ox_infer_unary),                                     \
      S(op, 13, L(fin), L(fout), L(t_FB), NONE, ox_infer_unary)
/* Add/Sub/Mul/Div: limited broadcast (1, 6), numpy broadcast (7+). */
#define ARITH_FAMILY(op)                                                                           \
  S(op, 1, L(f_AB), L(f_C), L(t_F), L(a_bcast1), ox_infer_bcast_legacy),                           \
      S(op, 6, L(f_AB), L(f_C), L(t_NUM7), L(a_bcast6), ox_infer_bcast_legacy),                    \
      S(op, 7, L(f_AB), L(f_C), L(t_NUM7), NONE, ox_infer_bcast),                                  \
      S(op, 13, L(f_AB), L(f_C), L(t_NUM7B), NONE, ox_infer_bcast),                                \
      S(op, 14, L(f_AB), L(f_C), L(t_NUMB), NONE, ox_infer_bcast)
/* Less/Greater. */
#define ORDER_FAMILY(op)                                                                           \
  S(op, 1, L(f_AB), L(f_C1), L(t_cmp_F), L(a_bcast6), ox_infer_compare_legacy),                    \
      S(op, 7, L(f_AB), L(f_C1), L(t_cmp_F), NONE, ox_infer_compare),                              \
      S(op, 9, L(f_AB), L(f_C1), L(t_cmp_NUM), NONE, ox_infer_compare),                            \
      S(op, 13, L(f_AB), L(f_C1), L(t_cmp_NUMB), NONE, ox_infer_compare)
/* Ops whose later versions only widened "all tensor types" with the IR. */
#define IR_WIDENED(op, fin, fout, attrs, fn)                                                       \
  S(op, 21, L(fin), L(fout), L(t_ALL10), attrs, fn),                                               \
      S(op, 23, L(fin), L(fout), L(t_ALL11), attrs, fn),                                           \
      S(op, 24, L(fin), L(fout), L(t_ALL12), attrs, fn),                                           \
      S(op, 25, L(fin), L(fout), L(t_ALL13), attrs, fn)

const OxSchema ox_onnx_schemas[] = {
    /* Elementwise arithmetic. */
    ARITH_FAMILY("Add"),
    ARITH_FAMILY("Sub"),
    ARITH_FAMILY("Mul"),
    ARITH_FAMILY("Div"),
    S("Pow", 1, L(f_pow_in), L(f_Z), L(t_F), L(a_bcast6), ox_infer_bcast_legacy),
    S("Pow", 7, L(f_pow_in), L(f_Z), L(t_F), NONE, ox_infer_bcast),
    S("Pow", 12, L(f_pow12_in), L(f_Z), L(t_pow12), NONE, ox_infer_bcast),
    S("Pow", 13, L(f_pow12_in), L(f_Z), L(t_pow13), NONE, ox_infer_bcast),
    S("Pow", 15, L(f_pow12_in), L(f_Z), L(t_pow15), NONE, ox_infer_bcast),

    /* Matrix products. */
    S("MatMul", 1, L(f_AB), L(f_Y), L(t_F), NONE, ox_infer_matmul),
    S("MatMul", 9, L(f_AB), L(f_Y), L(t_NUM7), NONE, ox_infer_matmul),
    S("MatMul", 13, L(f_AB), L(f_Y), L(t_NUM7B), NONE, ox_infer_matmul),
    S("Gemm", 1, L(f_gemm_in), L(f_Y), L(t_F), L(a_gemm1), ox_infer_gemm),
    S("Gemm", 6, L(f_gemm_in), L(f_Y), L(t_F), L(a_gemm1), ox_infer_gemm),
    S("Gemm", 7, L(f_gemm_in), L(f_Y), L(t_F), L(a_gemm7), ox_infer_gemm),
    S("Gemm", 9, L(f_gemm_in), L(f_Y), L(t_NUM7), L(a_gemm7), ox_infer_gemm),
    S("Gemm", 11, L(f_gemm11_in), L(f_Y), L(t_NUM7), L(a_gemm7), ox_infer_gemm),
    S("Gemm", 13, L(f_gemm11_in), L(f_Y), L(t_NUM7B), L(a_gemm7), ox_infer_gemm),

    /* Elementwise unary. */
    UNARY_FAMILY("Relu", f_X, f_Y),
    S("Relu", 14, L(f_X), L(f_Y), L(t_SFB), NONE, ox_infer_unary),
    UNARY_FAMILY("Sigmoid", f_X, f_Y),
    UNARY_FAMILY("Tanh", f_input, f_output),
    UNARY_FAMILY("Exp", f_input, f_output),
    UNARY_FAMILY("Log", f_input, f_output),
    UNARY_FAMILY("Sqrt", f_X, f_Y),
    S("Erf", 9, L(f_input), L(f_output), L(t_NUM), NONE, ox_infer_unary),
    S("Erf", 13, L(f_input), L(f_output), L(t_NUMB), NONE, ox_infer_unary),
    S("Neg", 1, L(f_X), L(f_Y), L(t_F), L(a_consumed), ox_infer_unary),
    S("Neg", 6, L(f_X), L(f_Y), L(t_SF), NONE, ox_infer_unary),
    S("Neg", 13, L(f_X), L(f_Y), L(t_SFB), NONE, ox_infer_unary),
    S("Abs", 1, L(f_X), L(f_Y), L(t_F), L(a_consumed), ox_infer_unary),
    S("Abs", 6, L(f_X), L(f_Y), L(t_NUM), NONE, ox_infer_unary),
    S("Abs", 13, L(f_X), L(f_Y), L(t_NUMB), NONE, ox_infer_unary),
    S("Softmax", 1, L(f_input), L(f_output), L(t_F), L(a_softmax1), ox_infer_softmax),
    S("Softmax", 11, L(f_input), L(f_output), L(t_F), L(a_softmax1), ox_infer_softmax),
    S("Softmax", 13, L(f_input), L(f_output), L(t_FB), L(a_softmax13), ox_infer_softmax),
    S("Clip", 1, L(f_input), L(f_output), L(t_F), L(a_clip1), ox_infer_unary),
    S("Clip", 6, L(f_input), L(f_output), L(t_F), L(a_clip6), ox_infer_unary),
    S("Clip", 11, L(f_clip11_in), L(f_output), L(t_F), NONE, ox_infer_unary),
    S("Clip", 12, L(f_clip11_in), L(f_output), L(t_NUM), NONE, ox_infer_unary),
    S("Clip", 13, L(f_clip11_in), L(f_output), L(t_NUMB), NONE, ox_infer_unary),

    /* Convolution and pooling. */
    S("Conv", 1, L(f_conv_in), L(f_Y), L(t_F), L(a_conv), ox_infer_conv),
    S("Conv", 11, L(f_conv_in), L(f_Y), L(t_F), L(a_conv), ox_infer_conv),
    S("Conv", 22, L(f_conv_in), L(f_Y), L(t_FB), L(a_conv), ox_infer_conv),
    S("MaxPool", 1, L(f_X), L(f_Y), L(t_F), L(a_maxpool1), ox_infer_pool),
    S("MaxPool", 8, L(f_X), L(f_maxpool8_out), L(t_maxpool8), L(a_maxpool8), ox_infer_pool),
    S("MaxPool", 10, L(f_X), L(f_maxpool8_out), L(t_maxpool8), L(a_maxpool10), ox_infer_pool),
    S("MaxPool", 11, L(f_X), L(f_maxpool8_out), L(t_maxpool8), L(a_maxpool10), ox_infer_pool),
    S("MaxPool", 12, L(f_X), L(f_maxpool8_out), L(t_maxpool12), L(a_maxpool10), ox_infer_pool),
    S("MaxPool", 22, L(f_X), L(f_maxpool8_out), L(t_maxpool22), L(a_maxpool10), ox_infer_pool),
    S("AveragePool", 1, L(f_X), L(f_Y), L(t_F), L(a_avgpool1), ox_infer_pool),
    S("AveragePool", 7, L(f_X), L(f_Y), L(t_F), L(a_avgpool7), ox_infer_pool),
    S("AveragePool", 10, L(f_X), L(f_Y), L(t_F), L(a_avgpool10), ox_infer_pool),
    S("AveragePool", 11, L(f_X), L(f_Y), L(t_F), L(a_avgpool10), ox_infer_pool),
    S("AveragePool", 19, L(f_X), L(f_Y), L(t_F), L(a_avgpool19), ox_infer_pool),
    S("AveragePool", 22, L(f_X), L(f_Y), L(t_FB), L(a_avgpool19), ox_infer_pool),
    S("GlobalAveragePool", 1, L(f_X), L(f_Y), L(t_F), NONE, ox_infer_global_pool),
    S("GlobalAveragePool", 22, L(f_X), L(f_Y), L(t_FB), NONE, ox_infer_global_pool),

    /* Normalization and dropout. */
    S("BatchNormalization", 1, L(f_bn_in), L(f_bn_out), L(t_F), L(a_bn1), ox_infer_batchnorm),
    S("BatchNormalization", 6, L(f_bn_in), L(f_bn_out), L(t_F), L(a_bn6), ox_infer_batchnorm),
    S("BatchNormalization", 7, L(f_bn_in), L(f_bn_out), L(t_F), L(a_bn7), ox_infer_batchnorm),
    S("BatchNormalization", 9, L(f_bn_in), L(f_bn_out), L(t_F), L(a_bn9), ox_infer_batchnorm),
    S("BatchNormalization", 14, L(f_bn14_in), L(f_bn14_out), L(t_bn14), L(a_bn14),
      ox_infer_batchnorm),
    S("BatchNormalization", 15, L(f_bn15_in), L(f_bn15_out), L(t_bn15), L(a_bn14),
      ox_infer_batchnorm),
    S("LayerNormalization", 17, L(f_ln_in), L(f_ln_out), L(t_ln), L(a_ln), ox_infer_layernorm),
    S("Dropout", 1, L(f_data), L(f_dropout_out), L(t_F), L(a_dropout1), ox_infer_dropout),
    S("Dropout", 6, L(f_data), L(f_dropout_out), L(t_F), L(a_dropout6), ox_infer_dropout),
    S("Dropout", 7, L(f_data), L(f_dropout_out), L(t_F), L(a_dropout7), ox_infer_dropout),
    S("Dropout", 10, L(f_data), L(f_dropout10_out), L(t_dropout10), L(a_dropout7),
      ox_infer_dropout),
    S("Dropout", 12, L(f_dropout12_in), L(f_dropout12_out), L(t_dropout12), L(a_seed),
      ox_infer_dropout),
    S("Dropout", 13, L(f_dropout12_in), L(f_dropout12_out), L(t_dropout13), L(a_seed),
      ox_infer_dropout),
    S("Dropout", 22, L(f_dropout12_in), L(f_dropout12_out), L(t_dropout22), L(a_seed),
      ox_infer_dropout),

    /* Shape manipulation. */
    S("Reshape", 1, L(f_data), L(f_reshaped), L(t_F), L(a_reshape1), ox_infer_reshape),
    S("Reshape", 5, L(f_reshape5_in), L(f_reshaped), L(t_ALL), NONE, ox_infer_reshape),
    S("Reshape", 13, L(f_reshape5_in), L(f_reshaped), L(t_ALL4), NONE, ox_infer_reshape),
    S("Reshape", 14, L(f_reshape5_in), L(f_reshaped), L(t_ALL4), L(a_allowzero), ox_infer_reshape),
    S("Reshape", 19, L(f_reshape5_in), L(f_reshaped), L(t_ALL9), L(a_allowzero), ox_infer_reshape),
    IR_WIDENED("Reshape", f_reshape5_in, f_reshaped, L(a_allowzero), ox_infer_reshape),
    S("Flatten", 1, L(f_input), L(f_output), L(t_F), L(a_axis1), ox_infer_flatten),
    S("Flatten", 9, L(f_input), L(f_output), L(t_ALL), L(a_axis1), ox_infer_flatten),
    S("Flatten", 11, L(f_input), L(f_output), L(t_ALL), L(a_axis1), ox_infer_flatten),
    S("Flatten", 13, L(f_input), L(f_output), L(t_ALL4), L(a_axis1), ox_infer_flatten),
    IR_WIDENED("Flatten", f_input, f_output, L(a_axis1), ox_infer_flatten),
    S("Transpose", 1, L(f_data), L(f_transposed), L(t_ALL), L(a_perm), ox_infer_transpose),
    S("Transpose", 13, L(f_data), L(f_transposed), L(t_ALL4), L(a_perm), ox_infer_transpose),
    IR_WIDENED("Transpose", f_data, f_transposed, L(a_perm), ox_infer_transpose),
    S("Concat", 1, L(f_concat_in), L(f_concat_out), L(t_F), L(a_concat1), ox_infer_concat),
    S("Concat", 4, L(f_concat_in), L(f_concat_out), L(t_ALL), L(a_concat4), ox_infer_concat),
    S("Concat", 11, L(f_concat_in), L(f_concat_out), L(t_ALL), L(a_concat4), ox_infer_concat),
    S("Concat", 13, L(f_concat_in), L(f_concat_out), L(t_ALL4), L(a_concat4), ox_infer_concat),
    S("Split", 1, L(f_split1_in), L(f_split1_out), L(t_F), L(a_split1), ox_infer_split),
    S("Split", 2, L(f_input), L(f_split_out), L(t_ALL), L(a_split2), ox_infer_split),
    S("Split", 11, L(f_input), L(f_split_out), L(t_ALL), L(a_split2), ox_infer_split),
    S("Split", 13, L(f_split13_in), L(f_split_out), L(t_ALL4), L(a_axis0), ox_infer_split),
    S("Split", 18, L(f_split13_in), L(f_split_out), L(t_ALL4), L(a_split18), ox_infer_split),
    S("Slice", 1, L(f_data), L(f_output), L(t_ALL), L(a_slice1), ox_infer_slice),
    S("Slice", 10, L(f_slice10_in), L(f_output), L(t_slice_ALL), NONE, ox_infer_slice),
    S("Slice", 11, L(f_slice10_in), L(f_output), L(t_slice_ALL), NONE, ox_infer_slice),
    S("Slice", 13, L(f_slice10_in), L(f_output), L(t_slice_ALL4), NONE, ox_infer_slice),
    S("Squeeze", 1, L(f_data), L(f_squeezed), L(t_ALL), L(a_axes_opt), ox_infer_squeeze),
    S("Squeeze", 11, L(f_data), L(f_squeezed), L(t_ALL), L(a_axes_opt), ox_infer_squeeze),
    S("Squeeze", 13, L(f_axes_opt_in), L(f_squeezed), L(t_ALL4), NONE, ox_infer_squeeze),
    IR_WIDENED("Squeeze", f_axes_opt_in, f_squeezed, NONE, ox_infer_squeeze),
    S("Unsqueeze", 1, L(f_data), L(f_expanded), L(t_ALL), L(a_axes_req), ox_infer_unsqueeze),
    S("Unsqueeze", 11, L(f_data), L(f_expanded), L(t_ALL), L(a_axes_req), ox_infer_unsqueeze),
    S("Unsqueeze", 13, L(f_unsqueeze13_in), L(f_expanded), L(t_ALL4), NONE, ox_infer_unsqueeze),
    IR_WIDENED("Unsqueeze", f_unsqueeze13_in, f_expanded, NONE, ox_infer_unsqueeze),
    S("Gather", 1, L(f_gather_in), L(f_output), L(t_gather_ALL), L(a_axis0), ox_infer_gather),
    S("Gather", 11, L(f_gather_in), L(f_output), L(t_gather_ALL), L(a_axis0), ox_infer_gather),
    S("Gather", 13, L(f_gather_in), L(f_output), L(t_gather_ALL4), L(a_axis0), ox_infer_gather),
    S("Shape", 1, L(f_data), L(f_shape_out), L(t_shape_ALL), NONE, ox_infer_shape),
    S("Shape", 13, L(f_data), L(f_shape_out), L(t_shape_ALL4), NONE, ox_infer_shape),
    S("Shape", 15, L(f_data), L(f_shape_out), L(t_shape_ALL4), L(a_shape15), ox_infer_shape),
    S("Shape", 19, L(f_data), L(f_shape_out), L(t_shape_ALL9), L(a_shape15), ox_infer_shape),
    S("Shape", 21, L(f_data), L(f_shape_out), L(t_shape_ALL10), L(a_shape15), ox_infer_shape),
    S("Shape", 23, L(f_data), L(f_shape_out), L(t_shape_ALL11), L(a_shape15), ox_infer_shape),
    S("Shape", 24, L(f_data), L(f_shape_out), L(t_shape_ALL12), L(a_shape15), ox_infer_shape),
    S("Shape", 25, L(f_data), L(f_shape_out), L(t_shape_ALL13), L(a_shape15), ox_infer_shape),
    S("Expand", 8, L(f_expand_in), L(f_output), L(t_ALL), NONE, ox_infer_expand),
    S("Expand", 13, L(f_expand_in), L(f_output), L(t_ALL4), NONE, ox_infer_expand),

    /* Types and constants. */
    S("Cast", 1, L(f_cast_in), L(f_cast_out), L(t_cast1), L(a_cast1), ox_infer_cast),
    S("Cast", 6, L(f_cast_in), L(f_cast_out), L(t_cast1), L(a_cast6), ox_infer_cast),
    S("Cast", 9, L(f_cast_in), L(f_cast_out), L(t_cast9), L(a_cast6), ox_infer_cast),
    S("Cast", 13, L(f_cast_in), L(f_cast_out), L(t_cast13), L(a_cast6), ox_infer_cast),
    S("Cast", 19, L(f_cast_in), L(f_cast_out), L(t_cast19), L(a_cast19), ox_infer_cast),
    S("Cast", 21, L(f_cast_in), L(f_cast_out), L(t_cast21), L(a_cast19), ox_infer_cast),
    S("Cast", 23, L(f_cast_in), L(f_cast_out), L(t_cast23), L(a_cast19), ox_infer_cast),
    S("Cast", 24, L(f_cast_in), L(f_cast_out), L(t_cast24), L(a_cast24), ox_infer_cast),
    S("Cast", 25, L(f_cast_in), L(f_cast_out), L(t_cast25), L(a_cast24), ox_infer_cast),
    S("Constant", 1, NONE, L(f_output), L(t_F), L(a_const1), ox_infer_constant),
    S("Constant", 9, NONE, L(f_output), L(t_ALL), L(a_const1), ox_infer_constant),
    S("Constant", 11, NONE, L(f_output), L(t_ALL), L(a_const11), ox_infer_constant),
    S("Constant", 12, NONE, L(f_output), L(t_ALL), L(a_const12), ox_infer_constant),
    S("Constant", 13, NONE, L(f_output), L(t_ALL4), L(a_const12), ox_infer_constant),
    S("Constant", 19, NONE, L(f_output), L(t_ALL9), L(a_const12), ox_infer_constant),
    S("Constant", 21, NONE, L(f_output), L(t_ALL10), L(a_const12), ox_infer_constant),
    S("Constant", 23, NONE, L(f_output), L(t_ALL11), L(a_const12), ox_infer_constant),
    S("Constant", 24, NONE, L(f_output), L(t_ALL12), L(a_const12), ox_infer_constant),
    S("Constant", 25, NONE, L(f_output), L(t_ALL13), L(a_const12), ox_infer_constant),
    S("ConstantOfShape", 9, L(f_cos_in), L(f_cast_out), L(t_cos9), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("ConstantOfShape", 20, L(f_cos_in), L(f_cast_out), L(t_cos20), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("ConstantOfShape", 21, L(f_cos_in), L(f_cast_out), L(t_cos21), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("ConstantOfShape", 23, L(f_cos_in), L(f_cast_out), L(t_cos23), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("ConstantOfShape", 24, L(f_cos_in), L(f_cast_out), L(t_cos24), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("ConstantOfShape", 25, L(f_cos_in), L(f_cast_out), L(t_cos25), L(a_value_opt),
      ox_infer_constant_of_shape),
    S("Identity", 1, L(f_input), L(f_output), L(t_ALL), NONE, ox_infer_unary),
    S("Identity", 13, L(f_input), L(f_output), L(t_ALL4), NONE, ox_infer_unary),
    /* From 14 V also admits sequences (16: optionals); onyx models tensors only. */
    S("Identity", 14, L(f_V_in), L(f_V_out), L(v_ALL4), NONE, ox_infer_unary),
    S("Identity", 16, L(f_V_in), L(f_V_out), L(v_ALL4), NONE, ox_infer_unary),
    S("Identity", 19, L(f_V_in), L(f_V_out), L(v_ALL9), NONE, ox_infer_unary),
    S("Identity", 21, L(f_V_in), L(f_V_out), L(v_ALL10), NONE, ox_infer_unary),
    S("Identity", 23, L(f_V_in), L(f_V_out), L(v_ALL11), NONE, ox_infer_unary),
    S("Identity", 24, L(f_V_in), L(f_V_out), L(v_ALL12), NONE, ox_infer_unary),
    S("Identity", 25, L(f_V_in), L(f_V_out), L(v_ALL13), NONE, ox_infer_unary),

    /* Reductions. */
    S("ReduceMean", 1, L(f_data), L(f_reduced), L(t_NUM7), L(a_reduce1), ox_infer_reduce),
    S("ReduceMean", 11, L(f_data), L(f_reduced), L(t_NUM7), L(a_reduce1), ox_infer_reduce),
    S("ReduceMean", 13, L(f_data), L(f_reduced), L(t_NUM7B), L(a_reduce1), ox_infer_reduce),
    S("ReduceMean", 18, L(f_axes_opt_in), L(f_reduced), L(t_NUM7B), L(a_reduce13), ox_infer_reduce),
    S("ReduceSum", 1, L(f_data), L(f_reduced), L(t_NUM7), L(a_reduce1), ox_infer_reduce),
    S("ReduceSum", 11, L(f_data), L(f_reduced), L(t_NUM7), L(a_reduce1), ox_infer_reduce),
    S("ReduceSum", 13, L(f_axes_opt_in), L(f_reduced), L(t_NUM7B), L(a_reduce13), ox_infer_reduce),

    /* Selection and comparison. */
    S("Where", 9, L(f_where_in), L(f_output), L(t_where9), NONE, ox_infer_where),
    S("Where", 16, L(f_where_in), L(f_output), L(t_where16), NONE, ox_infer_where),
    S("Equal", 1, L(f_AB), L(f_C1), L(t_eq1), L(a_bcast6), ox_infer_compare_legacy),
    S("Equal", 7, L(f_AB), L(f_C1), L(t_eq1), NONE, ox_infer_compare),
    S("Equal", 11, L(f_AB), L(f_C1), L(t_eq11), NONE, ox_infer_compare),
    S("Equal", 13, L(f_AB), L(f_C1), L(t_eq13), NONE, ox_infer_compare),
    S("Equal", 19, L(f_AB), L(f_C1), L(t_eq19), NONE, ox_infer_compare),
    ORDER_FAMILY("Less"),
    ORDER_FAMILY("Greater"),
};
const size_t ox_onnx_schemas_count = OX_ARRAY_LEN(ox_onnx_schemas);
