/* schemas_fused.c — com.onyx FusedElementwise, the op the optimizer's
 * fuse_elementwise pass makes of a chain of element-wise nodes on one
 * provider (host/optimizer/opt_fuse_elementwise.c):
 *   FusedElementwise(X0, ..., Xn-1) -> Y   Y = the program run per element
 *                                  of the inputs' numpy broadcast (1 to 8
 *                                  inputs, float32); attributes `program`
 *                                  (ints, required) and `immediates`
 *                                  (floats): ox_fused_ew.h.
 * Shape inference checks the program, so a hostile model's one fails at load
 * with the node and the field named. */
#include "infer_util.h"
#include "ox_fused_ew.h"
#include "schema_internal.h"

#define CONTRIB "com.onyx"
#define L(a)    a, (uint8_t)OX_ARRAY_LEN(a)

const char* ox_few_check(size_t n_inputs, const int64_t* prog, size_t n_prog, size_t n_imm,
                         int64_t* at, int64_t* value) {
  *at = -1;
  *value = 0;
  if (n_inputs < 1 || n_inputs > OX_FEW_MAX_INPUTS) {
    *value = (int64_t)n_inputs;
    return "the node must have 1 to 8 inputs";
  }
  if (n_imm > OX_FEW_MAX_IMM) {
    *value = (int64_t)n_imm;
    return "more than 64 immediates";
  }
  if (!n_prog || n_prog % 4) {
    *value = (int64_t)n_prog;
    return "the program must hold whole instructions of 4 ints (opcode, dst, a, b), at least one";
  }
  if (n_prog / 4 > OX_FEW_MAX_INSTR) {
    *value = (int64_t)(n_prog / 4);
    return "more than 64 instructions";
  }
  uint32_t defined = 0; /* registers holding a value */
  for (size_t r = 0; r < n_inputs && r < OX_FEW_MAX_REGS; r++)
    defined |= 1u << r;
  for (size_t k = 0; k < n_prog / 4; k++) {
    const int64_t* ins = prog + 4 * k;
    *at = (int64_t)k;
    const int params = ox_few_params(ins[0]);
    if (params == -2) {
      *value = ins[0];
      return "unknown opcode";
    }
    /* operands: a always; b as a register or immediate for binary ops, as
     * the first parameter's immediate for unary ops with parameters */
    for (int j = 0; j < 2; j++) {
      const int64_t v = ins[2 + j];
      *value = v;
      if (j == 1 && params == 0) {
        if (v != 0) return "operand b of a unary op without parameters must be 0";
        continue;
      }
      if (v >= 0) {
        if (j == 1 && params > 0) return "a parameter must be an immediate (a negative operand)";
        if (v >= OX_FEW_MAX_REGS) return "register out of range (0 to 15)";
        if (!(defined >> v & 1)) return "reads a register that no input or earlier instruction set";
      } else {
        const int64_t last = j == 1 && params == 2 ? 1 : 0;
        if (v < -(int64_t)OX_FEW_MAX_IMM || -1 - v + last >= (int64_t)n_imm)
          return "immediate out of range";
      }
    }
    *value = ins[1];
    if (ins[1] < 0 || ins[1] >= OX_FEW_MAX_REGS)
      return "destination register out of range (0 to 15)";
    defined |= 1u << ins[1];
  }
  *at = -1;
  return NULL;
}

/* Y is the broadcast of every input; the program must be valid. */
static OnyxStatus* ox_infer_fused_ew(OxNode* n) {
  size_t n_prog = 0, n_imm = 0;
  const OxAttr* pa = ox_node_attr(n, "program");
  const OxAttr* ia = ox_node_attr(n, "immediates");
  if (!pa || pa->type != ONYX_ATTR_INTS)
    return ox_node_err(n, "attribute 'program' (ints) is required");
  if (ia && ia->type != ONYX_ATTR_FLOATS)
    return ox_node_err(n, "attribute 'immediates' must be floats");
  n_prog = pa->count;
  n_imm = ia ? ia->count : 0;
  for (size_t i = 0; i < n->n_inputs; i++)
    if (!n->inputs[i]) return ox_node_err(n, "input %zu is absent; every input is required", i);
  int64_t at, value;
  const char* why = ox_few_check(n->n_inputs, pa->ints, n_prog, n_imm, &at, &value);
  if (why) {
    if (at < 0) return ox_node_err(n, "attribute 'program': %s (%lld)", why, (long long)value);
    return ox_node_err(n, "attribute 'program': instruction %lld: %s (%lld)", (long long)at, why,
                       (long long)value);
  }
  OxDims y;
  ox_in_dims(n, 0, &y);
  for (size_t i = 1; i < n->n_inputs; i++) {
    OxDims d;
    ox_in_dims(n, i, &d);
    OnyxStatus* st = ox_bcast_into(n, &y, &d);
    if (st) return st;
  }
  return ox_out_set(n, 0, ox_in_type(n, 0), y.rank >= 0 ? &y : NULL);
}

static const OxTypeConstr t_f32[] = {{"T", OX_T(ONYX_ELEM_FLOAT32)}};
static const OxFormal f_in[] = {{"X", "T", ONYX_PARAM_VARIADIC, 1}};
static const OxFormal f_y[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxAttrSpec a_few[] = {
    {.name = "program", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "immediates", .type = ONYX_ATTR_FLOATS},
};

static const OxSchema ox_fused_rows[] = {
    {CONTRIB, "FusedElementwise", 1, L(f_in), L(f_y), L(t_f32), L(a_few), ox_infer_fused_ew, NULL,
     NULL, true},
};

const OxSchemaFamily ox_family_fused = {"fused", L(ox_fused_rows), NULL, 0};
