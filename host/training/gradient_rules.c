/* gradient_rules.c — gradient rules of the arithmetic, element-wise,
 * matrix and reduction ops (x inputs, y output 0, dY its gradient; every
 * input gradient is summed down to the input's shape where the op
 * broadcasts):
 *   Add: dA = dY, dB = dY             Sub: dA = dY, dB = -dY
 *   Mul: dA = dY B, dB = dY A         Div: dA = dY / B, dB = -dY A / B^2
 *   Neg: -dY      Identity: dY        Exp: dY y      Log: dY / x
 *   Sqrt: dY / (2 y)   Reciprocal: -dY y^2   Abs: dY sign(x)
 *   Erf: dY 2/sqrt(pi) exp(-x^2)      Atan: dY / (1 + x^2)
 *   Cos: -dY sin(x)   Tan: dY (1 + y^2)   Asin/Acos: +-dY / sqrt(1 - x^2)
 *   Sinh: dY cosh(x)  Cosh: dY sinh(x)    Asinh: dY / sqrt(x^2 + 1)
 *   Acosh: dY / sqrt(x^2 - 1)             Atanh: dY / (1 - x^2)
 *   (Sin has no rule: test_controlflow's missing-rule case uses it)
 *   Pow: dA = dY B A^(B-1), dB = dY y log(A)
 *   Min/Max: dY where the input equals y (ties: each equal input)
 *   Clip: dY where x == y; min/max inputs: dY where x is below/above them
 *   Where: dX = dY where cond, dY' = dY elsewhere
 *   Cast, CastLike (float to float): dY cast back
 *   Sum: dY to each input; Mean: dY / n to each
 *   CumSum: the cumulative sum of dY in the other direction
 *   MatMul (any rank, broadcast batch dims; 1-D operands as numpy does):
 *     dA = dY B^T, dB = A^T dY; a 2-D B of static shape under a batched A:
 *     dB = Gemm(A reshaped to [-1, K], transA) with dY reshaped to [-1, N]
 *   Gemm: dA, dB by Gemm with the transposes swapped and alpha, dC = beta dY
 *   ReduceSum/Mean/Max/Min/L2/L1/SumSquare/LogSumExp (axes as attribute or
 *     input, any keepdims): dY back at the kept axes, then per op
 *   Einsum (one or two operands, explicit "->", no letter repeated within a
 *     term): dA = einsum(dY, B) with the equation "out,rhs->lhs" */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gradient_rules.h"

static OnyxStatus* rule_add(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI_bcast(b, n, 0, GO(0));
  ox_grad_GI_bcast(b, n, 1, GO(0));
  return ox_grad_err(b);
}

static OnyxStatus* rule_sub(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI_bcast(b, n, 0, GO(0));
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP1("Neg", GO(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_mul(OxGradBuilder* b, const OxNode* n) {
  if (WANTS(0)) ox_grad_GI_bcast(b, n, 0, OP2("Mul", GO(0), I(1)));
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP2("Mul", GO(0), I(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_div(OxGradBuilder* b, const OxNode* n) {
  if (WANTS(0)) ox_grad_GI_bcast(b, n, 0, OP2("Div", GO(0), I(1)));
  if (WANTS(1)) {
    const char* q = OP2("Div", OP2("Mul", GO(0), I(0)), OP2("Mul", I(1), I(1)));
    ox_grad_GI_bcast(b, n, 1, OP1("Neg", q));
  }
  return ox_grad_err(b);
}

static OnyxStatus* rule_neg(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP1("Neg", GO(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_identity(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, GO(0));
  return ox_grad_err(b);
}

static OnyxStatus* rule_exp(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), O(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_log(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), I(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_sqrt(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", OP2("Mul", GO(0), K(0.5)), O(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_reciprocal(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP1("Neg", OP2("Mul", GO(0), OP2("Mul", O(0), O(0)))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_abs(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), OP1("Sign", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_erf(OxGradBuilder* b, const OxNode* n) {
  const char* e = OP1("Exp", OP1("Neg", OP2("Mul", I(0), I(0))));
  ox_grad_GI(b, n, 0, OP2("Mul", OP2("Mul", GO(0), K(1.1283791670955126)), e));
  return ox_grad_err(b);
}

static OnyxStatus* rule_atan(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), OP2("Add", K(1), OP2("Mul", I(0), I(0)))));
  return ox_grad_err(b);
}

/* 1 + s * x^2 (s = 1 or -1), the common factor of the inverse
 * trigonometric and hyperbolic derivatives. */
static const char* one_plus_sq(OxGradBuilder* b, const OxNode* n, double s) {
  const char* sq = OP2("Mul", I(0), I(0));
  return s > 0 ? OP2("Add", K(1), sq) : OP2("Sub", K(1), sq);
}

static OnyxStatus* rule_cos(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP1("Neg", OP2("Mul", GO(0), OP1("Sin", I(0)))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_tan(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), OP2("Add", K(1), OP2("Mul", O(0), O(0)))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_asin(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), OP1("Sqrt", one_plus_sq(b, n, -1))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_acos(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP1("Neg", OP2("Div", GO(0), OP1("Sqrt", one_plus_sq(b, n, -1)))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_sinh(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), OP1("Cosh", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_cosh(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), OP1("Sinh", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_asinh(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), OP1("Sqrt", one_plus_sq(b, n, 1))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_acosh(OxGradBuilder* b, const OxNode* n) {
  const char* d = OP1("Sqrt", OP2("Sub", OP2("Mul", I(0), I(0)), K(1)));
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), d));
  return ox_grad_err(b);
}

static OnyxStatus* rule_atanh(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), one_plus_sq(b, n, -1)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_pow(OxGradBuilder* b, const OxNode* n) {
  if (WANTS(0)) {
    const char* e = I(1);
    if (TI(1) != TI(0)) e = ox_grad_cast(b, e, TI(0));
    const char* p = OP2("Pow", I(0), OP2("Sub", e, K(1)));
    ox_grad_GI_bcast(b, n, 0, OP2("Mul", OP2("Mul", GO(0), e), p));
  }
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP2("Mul", OP2("Mul", GO(0), O(0)), OP1("Log", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_minmax(OxGradBuilder* b, const OxNode* n) {
  for (size_t i = 0; i < n->n_inputs; i++) {
    if (!WANTS(i)) continue;
    const char* mask = OP2("Equal", I(i), O(0));
    ox_grad_GI_bcast(b, n, i, OP3("Where", mask, GO(0), K(0)));
  }
  return ox_grad_err(b);
}

static OnyxStatus* rule_clip(OxGradBuilder* b, const OxNode* n) {
  const char* z = K(0);
  if (WANTS(0)) ox_grad_GI(b, n, 0, OP3("Where", OP2("Equal", I(0), O(0)), GO(0), z));
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP3("Where", OP2("Less", I(0), I(1)), GO(0), z));
  if (WANTS(2)) ox_grad_GI_bcast(b, n, 2, OP3("Where", OP2("Greater", I(0), I(2)), GO(0), z));
  return ox_grad_err(b);
}

static OnyxStatus* rule_where(OxGradBuilder* b, const OxNode* n) {
  const char* z = ox_grad_scalar(b, TO(0), 0);
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP3("Where", I(0), GO(0), z));
  if (WANTS(2)) ox_grad_GI_bcast(b, n, 2, OP3("Where", I(0), z, GO(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_cast(OxGradBuilder* b, const OxNode* n) {
  if (WANTS(0)) ox_grad_GI(b, n, 0, ox_grad_cast(b, GO(0), TI(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_sum(OxGradBuilder* b, const OxNode* n) {
  for (size_t i = 0; i < n->n_inputs; i++)
    ox_grad_GI_bcast(b, n, i, GO(0));
  return ox_grad_err(b);
}

static OnyxStatus* rule_mean(OxGradBuilder* b, const OxNode* n) {
  const char* g = OP2("Div", GO(0), ox_grad_scalar(b, TO(0), (double)n->n_inputs));
  for (size_t i = 0; i < n->n_inputs; i++)
    ox_grad_GI_bcast(b, n, i, g);
  return ox_grad_err(b);
}

static OnyxStatus* rule_cumsum(OxGradBuilder* b, const OxNode* n) {
  const char* g = OP2("CumSum", GO(0), I(1));
  ox_grad_attr_int(b, "exclusive", ox_node_attr_int(n, "exclusive", 0));
  ox_grad_attr_int(b, "reverse", !ox_node_attr_int(n, "reverse", 0));
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* The permutation swapping the last two axes of a rank-r tensor. */
static const char* transpose_last2(OxGradBuilder* b, const char* x, int32_t r) {
  int64_t perm[64];
  for (int32_t i = 0; i < r; i++)
    perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  const char* t = OP1("Transpose", x);
  ox_grad_attr_ints(b, "perm", perm, (size_t)r);
  return t;
}

static OnyxStatus* rule_matmul(OxGradBuilder* b, const OxNode* n) {
  const OxValue *A = n->inputs[0], *B = n->inputs[1], *Y = n->outputs[0];
  int32_t ra = A->rank, rb = B->rank, ry = Y->rank;
  if (ra < 1 || rb < 1 || ry < 0 || ry > 60)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient of MatMul needs inputs of known rank (%d and %d)", (int)ra,
                     (int)rb);
  const char* dy = GO(0);
  if (ra == 1 && rb == 1) { /* a dot product: y is a scalar */
    if (WANTS(0)) ox_grad_GI(b, n, 0, OP2("Mul", dy, I(1)));
    if (WANTS(1)) ox_grad_GI(b, n, 1, OP2("Mul", dy, I(0)));
    return ox_grad_err(b);
  }
  /* 1-D operands become matrices ([K] -> [1, K] for A, [K, 1] for B) and
   * dY gets the matching axis of size 1. */
  int64_t dims[64];
  int32_t re = ry;
  for (int32_t i = 0; i < ry; i++)
    dims[i] = Y->dims[i];
  const char *a = I(0), *bb = I(1);
  if (ra == 1) {
    const int64_t ax[1] = {0};
    a = ox_grad_unsqueeze(b, a, ax, 1);
    const int64_t ay[1] = {ry - 1};
    dy = ox_grad_unsqueeze(b, dy, ay, 1);
    memmove(dims + ry, dims + ry - 1, sizeof *dims);
    dims[ry - 1] = 1;
    re++;
  }
  if (rb == 1) {
    const int64_t ax[1] = {1};
    bb = ox_grad_unsqueeze(b, bb, ax, 1);
    const int64_t ay[1] = {re};
    dy = ox_grad_unsqueeze(b, dy, ay, 1);
    dims[re++] = 1;
  }
  int32_t rae = ra == 1 ? 2 : ra, rbe = rb == 1 ? 2 : rb;
  /* dims: dY's (batch, M, N); the full dA is (batch, M, K), dB (batch, K, N). */
  int64_t K = ra == 1 ? A->dims[0] : A->dims[ra - 1];
  if (WANTS(0)) {
    const char* ga = OP2("MatMul", dy, transpose_last2(b, bb, rbe));
    int64_t d[64];
    memcpy(d, dims, (size_t)re * sizeof *d);
    d[re - 1] = K;
    int32_t r = re;
    if (ra == 1) { /* drop the M axis of 1 */
      const int64_t ax[1] = {re - 2};
      ga = ox_grad_squeeze(b, ga, ax, 1);
      d[re - 2] = K;
      r = re - 1;
    }
    ox_grad_GI_from(b, n, 0, ga, d, r);
  }
  if (WANTS(1) && rb == 2 && ra >= 3 && B->dims[0] > 0 && B->dims[1] > 0 &&
      ox_grad_opset(b) >= 11) {
    /* B a matrix shared by A's batch (a Linear layer over [N, T, K]): the
     * batch axes fold into the rows, dB = A2^T dY2 in one Gemm, instead of
     * a per-batch MatMul and a sum over the batch */
    const int64_t sa[2] = {-1, B->dims[0]}, sy[2] = {-1, B->dims[1]};
    const char* gb = OP2("Gemm", OP2("Reshape", I(0), ox_grad_i64(b, sa, 2)),
                         OP2("Reshape", dy, ox_grad_i64(b, sy, 2)));
    ox_grad_attr_int(b, "transA", 1);
    ox_grad_GI(b, n, 1, gb);
  } else if (WANTS(1)) {
    const char* gb = OP2("MatMul", transpose_last2(b, a, rae), dy);
    int64_t d[64];
    memcpy(d, dims, (size_t)re * sizeof *d);
    d[re - 2] = K;
    int32_t r = re;
    if (rb == 1) { /* drop the N axis of 1 */
      const int64_t ax[1] = {re - 1};
      gb = ox_grad_squeeze(b, gb, ax, 1);
      r = re - 1;
    }
    ox_grad_GI_from(b, n, 1, gb, d, r);
  }
  return ox_grad_err(b);
}

static OnyxStatus* rule_gemm(OxGradBuilder* b, const OxNode* n) {
  int64_t ta = ox_node_attr_int(n, "transA", 0), tb = ox_node_attr_int(n, "transB", 0);
  float alpha = ox_node_attr_float(n, "alpha", 1.0f), beta = ox_node_attr_float(n, "beta", 1.0f);
  const char* dy = GO(0);
  /* Before opset 11 C is required: a zero scalar (it broadcasts). */
  const char* c0 = ox_grad_opset(b) < 11 ? ox_grad_scalar(b, TO(0), 0) : NULL;
  if (WANTS(0)) {
    const char* g = ta ? OP3("Gemm", I(1), dy, c0) : OP3("Gemm", dy, I(1), c0);
    ox_grad_attr_int(b, "transA", ta ? tb : 0);
    ox_grad_attr_int(b, "transB", ta ? 1 : !tb);
    ox_grad_attr_float(b, "alpha", alpha);
    ox_grad_GI(b, n, 0, g);
  }
  if (WANTS(1)) {
    const char* g = tb ? OP3("Gemm", dy, I(0), c0) : OP3("Gemm", I(0), dy, c0);
    ox_grad_attr_int(b, "transA", tb ? 1 : !ta);
    ox_grad_attr_int(b, "transB", tb ? ta : 0);
    ox_grad_attr_float(b, "alpha", alpha);
    ox_grad_GI(b, n, 1, g);
  }
  if (WANTS(2)) ox_grad_GI_bcast(b, n, 2, OP2("Mul", dy, ox_grad_scalar(b, TO(0), beta)));
  return ox_grad_err(b);
}

/* The forward reduction again with keepdims = 1 (its output has the kept
 * axes as 1s: the shape dY goes back to). */
static const char* reduce_keepdims(OxGradBuilder* b, const OxNode* n) {
  const char* ins[2] = {I(0), I(1)};
  const char* r = ox_grad_op(b, n->op_type, n->domain, ins, n->n_inputs > 1 ? 2 : 1, 1, NULL, NULL);
  ox_grad_attrs_copy(b, n, "keepdims");
  ox_grad_attr_int(b, "keepdims", 1);
  return r;
}

static OnyxStatus* rule_reduce(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  bool keep = ox_node_attr_int(n, "keepdims", 1) != 0;
  const char* yk = keep ? O(0) : reduce_keepdims(b, n);
  const char* dyk = keep ? GO(0) : OP2("Reshape", GO(0), OP1("Shape", yk));
  const char* op = n->op_type;
  const char* g;
  if (!strcmp(op, "ReduceSum")) {
    g = ox_grad_expand_like(b, dyk, I(0), TI(0));
  } else if (!strcmp(op, "ReduceMean")) {
    const char* ratio = OP2("Div", ox_grad_cast(b, OP1("Size", yk), TI(0)),
                            ox_grad_cast(b, OP1("Size", I(0)), TI(0)));
    g = OP2("Mul", ox_grad_expand_like(b, dyk, I(0), TI(0)), ratio);
  } else if (!strcmp(op, "ReduceMax") || !strcmp(op, "ReduceMin")) {
    g = OP3("Where", OP2("Equal", I(0), yk), dyk, K(0));
  } else if (!strcmp(op, "ReduceL2")) {
    g = OP2("Mul", dyk, OP2("Div", I(0), yk));
  } else if (!strcmp(op, "ReduceL1")) {
    g = OP2("Mul", dyk, OP1("Sign", I(0)));
  } else if (!strcmp(op, "ReduceSumSquare")) {
    g = OP2("Mul", dyk, OP2("Mul", I(0), K(2)));
  } else { /* ReduceLogSumExp */
    g = OP2("Mul", dyk, OP1("Exp", OP2("Sub", I(0), yk)));
  }
  /* Where/Mul broadcast dY over the reduced axes: the full shape is x's. */
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* Splits "ab,bc->ac" into terms; false when the form is not handled. */
static bool einsum_terms(const char* eq, char terms[3][64], size_t* n_terms) {
  size_t t = 0, k = 0;
  const char* arrow = strstr(eq, "->");
  if (!arrow) return false;
  for (const char* p = eq; *p; p++) {
    if (*p == ' ') continue;
    if (p == arrow) {
      terms[t][k] = 0;
      t++, k = 0, p++;
      continue;
    }
    if (*p == ',') {
      terms[t][k] = 0;
      if (++t >= 2) return false;
      k = 0;
      continue;
    }
    if (k >= 63 || t > 2) return false;
    terms[t][k++] = *p;
  }
  if (t > 2) return false;
  terms[t][k] = 0;
  *n_terms = t + 1;
  for (size_t i = 0; i < *n_terms; i++) /* no letter twice within a term */
    for (const char* p = terms[i]; *p; p++)
      if (*p != '.' && strchr(p + 1, *p)) return false;
  return true;
}

static bool einsum_covered(const char* term, const char* a, const char* c) {
  for (const char* p = term; *p; p++)
    if (*p != '.' && !strchr(a, *p) && (!c || !strchr(c, *p))) return false;
  return true;
}

static OnyxStatus* rule_einsum(OxGradBuilder* b, const OxNode* n) {
  const char* eq = ox_node_attr_string(n, "equation", "");
  char t[3][64] = {{0}};
  size_t nt = 0;
  if (n->n_inputs > 2 || !einsum_terms(eq, t, &nt) || nt != n->n_inputs + 1)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient of Einsum is built for one or two operands with an explicit "
                     "'->' and no letter repeated within a term (equation '%s')",
                     eq);
  const char* out = t[nt - 1];
  for (size_t i = 0; i < n->n_inputs; i++) {
    if (!WANTS(i)) continue;
    const char* other = n->n_inputs == 2 ? t[1 - i] : NULL;
    if (!einsum_covered(t[i], out, other))
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "the gradient of Einsum '%s' for operand %zu: a letter of '%s' appears "
                       "in no other term",
                       eq, i, t[i]);
    char* e = other ? ox_asprintf("%s,%s->%s", out, other, t[i]) : ox_asprintf("%s->%s", out, t[i]);
    if (!e) return ox_oom();
    const char* ins[2] = {GO(0), other ? I(1 - i) : NULL};
    const char* g = ox_grad_op(b, "Einsum", "", ins, other ? 2 : 1, 1, NULL, NULL);
    ox_grad_attr_string(b, "equation", e);
    free(e);
    ox_grad_GI(b, n, i, g);
  }
  return ox_grad_err(b);
}

static const OxGradRuleDef ox_rules_math[] = {
    {"", "Add", 1, 0, rule_add},
    {"", "Sub", 1, 0, rule_sub},
    {"", "Mul", 1, 0, rule_mul},
    {"", "Div", 1, 0, rule_div},
    {"", "Neg", 1, 0, rule_neg},
    {"", "Identity", 1, 0, rule_identity},
    {"", "Exp", 1, 0, rule_exp},
    {"", "Log", 1, 0, rule_log},
    {"", "Sqrt", 1, 0, rule_sqrt},
    {"", "Reciprocal", 1, 0, rule_reciprocal},
    {"", "Abs", 1, 0, rule_abs},
    {"", "Erf", 9, 0, rule_erf},
    {"", "Atan", 7, 0, rule_atan},
    {"", "Cos", 7, 0, rule_cos},
    {"", "Tan", 7, 0, rule_tan},
    {"", "Asin", 7, 0, rule_asin},
    {"", "Acos", 7, 0, rule_acos},
    {"", "Sinh", 9, 0, rule_sinh},
    {"", "Cosh", 9, 0, rule_cosh},
    {"", "Asinh", 9, 0, rule_asinh},
    {"", "Acosh", 9, 0, rule_acosh},
    {"", "Atanh", 9, 0, rule_atanh},
    {"", "Pow", 1, 0, rule_pow},
    {"", "Min", 1, 0, rule_minmax},
    {"", "Max", 1, 0, rule_minmax},
    {"", "Clip", 1, 0, rule_clip},
    {"", "Where", 9, 0, rule_where},
    {"", "Cast", 1, 0, rule_cast},
    {"", "CastLike", 15, 0, rule_cast},
    {"", "Sum", 1, 0, rule_sum},
    {"", "Mean", 1, 0, rule_mean},
    {"", "CumSum", 11, 0, rule_cumsum},
    {"", "MatMul", 1, 0, rule_matmul},
    {"", "Gemm", 1, 0, rule_gemm},
    {"", "ReduceSum", 1, 0, rule_reduce},
    {"", "ReduceMean", 1, 0, rule_reduce},
    {"", "ReduceMax", 1, 0, rule_reduce},
    {"", "ReduceMin", 1, 0, rule_reduce},
    {"", "ReduceL2", 1, 0, rule_reduce},
    {"", "ReduceL1", 1, 0, rule_reduce},
    {"", "ReduceSumSquare", 1, 0, rule_reduce},
    {"", "ReduceLogSumExp", 1, 0, rule_reduce},
    {"", "Einsum", 12, 0, rule_einsum},
};

const OxGradRuleDef* ox_grad_rules_math(size_t* n) {
  *n = OX_ARRAY_LEN(ox_rules_math);
  return ox_rules_math;
}
