/* opt_fuse_elementwise.c — the fuse_elementwise transformer (extended level,
 * after placement, after every other fusion): a connected set of float32
 * element-wise nodes on one provider whose intermediate values are read only
 * inside the set becomes one com.onyx FusedElementwise node
 * (schemas/schemas_fused.c, program format in schemas/ox_fused_ew.h), where
 * that provider's kernel registry has the op. The GPT block's tanh-GELU, eight
 * nodes and seven round trips through memory, becomes one kernel that reads x
 * once and writes y once.
 *
 * A set grows backwards from its last node (the sink: found scanning the
 * graph from its end, so it is the last node of the chain): the producer of
 * a value the set reads joins when it is an element-wise node of the same
 * provider (not in a compiled group), the value is no graph output and every
 * reader of it is in the set. So every value computed inside is read only
 * inside, the set is convex and no node moves. Values from outside become the
 * node's inputs (at most 8, numpy broadcasting to the sink's shape); float
 * constants of one element become immediates of the program. Sets of one
 * node are left alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"
#include "ox_fused_ew.h"

#define FE_MAX_NODES OX_FEW_MAX_INSTR

/* One node as an instruction: its op, the values it computes from (1 or 2)
 * and the parameters it takes from its attributes or constant inputs. */
typedef struct FeOp {
  int op;
  int n_data;
  OxValue* data[2];
  int n_params;
  float params[2];
} FeOp;

static bool fe_f32(const OxValue* v) {
  return v && v->type == ONYX_ELEM_FLOAT32;
}

/* A constant of one element (any rank), as a float. */
static bool fe_const1(const OxValue* v, float* out) {
  double d;
  if (!v || !v->constant || v->constant->count != 1 || !ox_opt_const_scalar(v, &d)) return false;
  *out = (float)d;
  return true;
}

/* An optional constant input of one float32 element (Clip's min and max):
 * true with its value, or with `fallback` where it is absent. */
static bool fe_opt_param(const OxNode* n, size_t i, float fallback, float* out) {
  if (i >= n->n_inputs || !n->inputs[i]) {
    *out = fallback;
    return true;
  }
  return fe_f32(n->inputs[i]) && fe_const1(n->inputs[i], out);
}

static const struct {
  const char* name;
  int op;
} fe_unary_ops[] = {
    {"Neg", OX_FEW_NEG},   {"Abs", OX_FEW_ABS},           {"Exp", OX_FEW_EXP},
    {"Log", OX_FEW_LOG},   {"Sqrt", OX_FEW_SQRT},         {"Reciprocal", OX_FEW_RECIPROCAL},
    {"Tanh", OX_FEW_TANH}, {"Sigmoid", OX_FEW_SIGMOID},   {"Erf", OX_FEW_ERF},
    {"Relu", OX_FEW_RELU}, {"Softplus", OX_FEW_SOFTPLUS}, {"HardSwish", OX_FEW_HARD_SWISH},
};

static const struct {
  const char* name;
  int op;
} fe_binary_ops[] = {
    {"Add", OX_FEW_ADD}, {"Sub", OX_FEW_SUB}, {"Mul", OX_FEW_MUL}, {"Div", OX_FEW_DIV},
    {"Max", OX_FEW_MAX}, {"Min", OX_FEW_MIN}, {"Pow", OX_FEW_POW},
};

/* Whether n is an element-wise node the program can hold: float32 in and out,
 * one output of rank at most 8 where it is known (the kernels check the
 * rank of what they are given). */
static bool fe_classify(const OxNode* n, FeOp* f) {
  memset(f, 0, sizeof *f);
  if (n->n_outputs != 1 || !fe_f32(n->outputs[0]) || n->outputs[0]->rank > 8 || n->n_inputs < 1 ||
      !fe_f32(n->inputs[0]))
    return false;
  f->n_data = 1;
  f->data[0] = n->inputs[0];
  if (!strcmp(n->domain, OX_CONTRIB_DOMAIN)) {
    if (n->n_inputs != 1) return false;
    if (!strcmp(n->op_type, "Gelu"))
      f->op = OX_FEW_GELU;
    else if (!strcmp(n->op_type, "Silu"))
      f->op = OX_FEW_SILU;
    else if (!strcmp(n->op_type, "HardSwish"))
      f->op = OX_FEW_HARD_SWISH;
    else
      return false;
    return true;
  }
  if (*n->domain) return false;
  for (size_t i = 0; i < OX_ARRAY_LEN(fe_binary_ops); i++) {
    if (strcmp(n->op_type, fe_binary_ops[i].name)) continue;
    if (n->n_inputs != 2 || !n->inputs[1]) return false;
    f->op = fe_binary_ops[i].op;
    f->n_data = 2;
    f->data[1] = n->inputs[1];
    float e;
    /* Pow's exponent may be of another type: only as a constant then. */
    return fe_f32(n->inputs[1]) || (f->op == OX_FEW_POW && fe_const1(n->inputs[1], &e));
  }
  for (size_t i = 0; i < OX_ARRAY_LEN(fe_unary_ops); i++) {
    if (strcmp(n->op_type, fe_unary_ops[i].name)) continue;
    f->op = fe_unary_ops[i].op;
    return n->n_inputs == 1;
  }
  if (!strcmp(n->op_type, "LeakyRelu") || !strcmp(n->op_type, "Elu")) {
    const bool leaky = n->op_type[0] == 'L';
    f->op = leaky ? OX_FEW_LEAKY_RELU : OX_FEW_ELU;
    f->n_params = 1;
    f->params[0] = ox_node_attr_float(n, "alpha", leaky ? 0.01f : 1.0f);
    return n->n_inputs == 1;
  }
  if (!strcmp(n->op_type, "HardSigmoid")) {
    f->op = OX_FEW_HARD_SIGMOID;
    f->n_params = 2;
    f->params[0] = ox_node_attr_float(n, "alpha", 0.2f);
    f->params[1] = ox_node_attr_float(n, "beta", 0.5f);
    return n->n_inputs == 1;
  }
  if (!strcmp(n->op_type, "Clip")) {
    f->op = OX_FEW_CLIP;
    f->n_params = 2;
    if (n->since_version < 11) {
      f->params[0] = ox_node_attr_float(n, "min", -INFINITY);
      f->params[1] = ox_node_attr_float(n, "max", INFINITY);
      return n->n_inputs == 1;
    }
    return n->n_inputs <= 3 && fe_opt_param(n, 1, -INFINITY, &f->params[0]) &&
           fe_opt_param(n, 2, INFINITY, &f->params[1]);
  }
  if (!strcmp(n->op_type, "Gelu")) {
    const char* approx = ox_node_attr_string(n, "approximate", "none");
    f->op = !strcmp(approx, "tanh") ? OX_FEW_GELU_TANH : OX_FEW_GELU;
    return n->n_inputs == 1 && (!strcmp(approx, "tanh") || !strcmp(approx, "none"));
  }
  return false;
}

typedef struct FeSet {
  OxNode* nodes[FE_MAX_NODES];
  FeOp ops[FE_MAX_NODES];
  size_t n;
} FeSet;

static int fe_find(const FeSet* s, const OxNode* n) {
  for (size_t i = 0; i < s->n; i++)
    if (s->nodes[i] == n) return (int)i;
  return -1;
}

/* The node may join a set on the rewrite's provider: on the CPU provider at
 * the layout level, 4-D values (and values of unknown rank, which may be
 * 4-D) are left to layout_nchwc, which runs later and keeps a conv chain's
 * element-wise nodes in its blocked layout (a fused node would end the chain
 * with reorders). */
static bool fe_allowed(const OxOpt* o, const OxNode* n) {
  const int32_t rank = n->outputs[0]->rank;
  return !(o->cfg->level >= ONYX_OPT_LAYOUT && ox_opt_on_cpu(o) && (rank < 0 || rank == 4));
}

/* An op that costs more than a memory pass per element: on the CPU provider a
 * set must hold one (the fused kernel was measured faster on such chains:
 * docs/optimizer.md; chains of cheap ops stay as they are there). */
static bool fe_heavy(int op) {
  switch (op) {
  case OX_FEW_EXP:
  case OX_FEW_LOG:
  case OX_FEW_TANH:
  case OX_FEW_SIGMOID:
  case OX_FEW_ERF:
  case OX_FEW_ELU:
  case OX_FEW_SOFTPLUS:
  case OX_FEW_GELU:
  case OX_FEW_GELU_TANH:
  case OX_FEW_SILU:
  case OX_FEW_POW:
    return true;
  default:
    return false;
  }
}

/* Grows s backwards from its sink (s->nodes[0]). */
static void fe_grow(const OxOpt* o, FeSet* s) {
  bool grew = true;
  while (grew && s->n < FE_MAX_NODES) {
    grew = false;
    for (size_t i = 0; i < s->n && s->n < FE_MAX_NODES; i++)
      for (int k = 0; k < s->ops[i].n_data && s->n < FE_MAX_NODES; k++) {
        OxValue* v = s->ops[i].data[k];
        OxNode* p = v->producer;
        if (!p || fe_find(s, p) >= 0 || !ox_opt_here(o, p) || ox_opt_pinned(o, v)) continue;
        bool inside = v->n_consumers > 0;
        for (size_t c = 0; c < v->n_consumers && inside; c++)
          inside = fe_find(s, v->consumers[c]) >= 0;
        if (!inside || !fe_classify(p, &s->ops[s->n]) || !fe_allowed(o, p)) continue;
        s->nodes[s->n++] = p;
        grew = true;
      }
  }
}

/* The program being built: inputs, immediates, instructions. */
typedef struct FeProg {
  OxValue* inputs[OX_FEW_MAX_INPUTS];
  size_t n_inputs;
  float imm[OX_FEW_MAX_IMM];
  size_t n_imm;
  int64_t code[4 * FE_MAX_NODES];
  size_t n_code;
} FeProg;

/* The immediate index of v (appended unless present); -1 when full. */
static int fe_imm(FeProg* p, float v) {
  for (size_t i = 0; i < p->n_imm; i++)
    if (!memcmp(&p->imm[i], &v, sizeof v)) return (int)i;
  if (p->n_imm == OX_FEW_MAX_IMM) return -1;
  p->imm[p->n_imm] = v;
  return (int)p->n_imm++;
}

/* Two consecutive immediates (a parameter pair); -1 when full. */
static int fe_imm2(FeProg* p, float a, float b) {
  for (size_t i = 0; i + 1 < p->n_imm; i++)
    if (!memcmp(&p->imm[i], &a, sizeof a) && !memcmp(&p->imm[i + 1], &b, sizeof b)) return (int)i;
  if (p->n_imm + 2 > OX_FEW_MAX_IMM) return -1;
  p->imm[p->n_imm] = a;
  p->imm[p->n_imm + 1] = b;
  p->n_imm += 2;
  return (int)p->n_imm - 2;
}

/* An external value: a float constant of one element whose rank does not
 * exceed max_rank becomes an immediate (operand < 0, in *imm), anything else
 * an input of the node. false: too many inputs or immediates, or a
 * non-float32 input. */
static bool fe_leaf(FeProg* p, OxValue* v, int32_t max_rank, int64_t* operand, bool* is_imm) {
  float c;
  *is_imm = false;
  if (fe_const1(v, &c) && v->rank >= 0 && v->rank <= max_rank) {
    const int i = fe_imm(p, c);
    if (i < 0) return false;
    *operand = -1 - i;
    *is_imm = true;
    return true;
  }
  if (!fe_f32(v)) return false;
  for (size_t i = 0; i < p->n_inputs; i++)
    if (p->inputs[i] == v) {
      *operand = (int64_t)i;
      return true;
    }
  if (p->n_inputs == OX_FEW_MAX_INPUTS) return false;
  p->inputs[p->n_inputs] = v;
  *operand = (int64_t)p->n_inputs++;
  return true;
}

/* Orders s's nodes so that each comes after the nodes of s it reads. */
static bool fe_order(FeSet* s) {
  FeSet out = {.n = 0};
  bool placed[FE_MAX_NODES] = {false};
  while (out.n < s->n) {
    bool progress = false;
    for (size_t i = 0; i < s->n; i++) {
      if (placed[i]) continue;
      bool ready = true;
      for (int k = 0; k < s->ops[i].n_data && ready; k++) {
        const int j = s->ops[i].data[k]->producer ? fe_find(s, s->ops[i].data[k]->producer) : -1;
        ready = j < 0 || placed[j];
      }
      if (!ready) continue;
      placed[i] = true;
      out.nodes[out.n] = s->nodes[i];
      out.ops[out.n++] = s->ops[i];
      progress = true;
    }
    if (!progress) return false; /* a cycle: not a DAG (never on a valid graph) */
  }
  *s = out;
  return true;
}

/* Builds the program of the ordered set s into p, registers reused once
 * their value's last reader has read them. false: it does not fit. */
static bool fe_build(FeSet* s, FeProg* p) {
  /* The rank of the inputs that are no constant of one element: a constant
   * of at most that rank changes no dim of Y as an immediate. Where one of
   * them has an unknown rank, only constants of rank 0 are sure not to. */
  int32_t max_rank = -1;
  bool unknown = false, any = false;
  for (size_t i = 0; i < s->n; i++)
    for (int k = 0; k < s->ops[i].n_data; k++) {
      const OxValue* v = s->ops[i].data[k];
      float c;
      if ((v->producer && fe_find(s, v->producer) >= 0) || fe_const1(v, &c)) continue;
      any = true;
      unknown = unknown || v->rank < 0;
      if (v->rank > max_rank) max_rank = v->rank;
    }
  if (!any) return false; /* constants only: folding's business */
  if (unknown) max_rank = 0;
  /* Operands as value numbers first: inputs 0..7, node i's result 8 + i;
   * immediates stay negative. */
  int64_t opnd[FE_MAX_NODES][2];
  int last_use[OX_FEW_MAX_INPUTS + FE_MAX_NODES];
  for (size_t i = 0; i < OX_ARRAY_LEN(last_use); i++)
    last_use[i] = -1;
  for (size_t i = 0; i < s->n; i++)
    for (int k = 0; k < s->ops[i].n_data; k++) {
      OxValue* v = s->ops[i].data[k];
      const int j = v->producer ? fe_find(s, v->producer) : -1;
      bool imm = false;
      if (j >= 0) {
        opnd[i][k] = OX_FEW_MAX_INPUTS + j;
      } else if (!fe_leaf(p, v, max_rank, &opnd[i][k], &imm)) {
        return false;
      }
      if (!imm) last_use[opnd[i][k]] = (int)i;
    }
  /* Physical registers: input j starts in register j. */
  int reg_of[OX_FEW_MAX_INPUTS + FE_MAX_NODES];
  int holder[OX_FEW_MAX_REGS]; /* value number in each register, -1: free */
  for (int r = 0; r < OX_FEW_MAX_REGS; r++)
    holder[r] = r < (int)p->n_inputs ? r : -1;
  for (size_t j = 0; j < p->n_inputs; j++)
    reg_of[j] = (int)j;
  for (size_t i = 0; i < s->n; i++) {
    const FeOp* f = &s->ops[i];
    int64_t a[2] = {0, 0};
    for (int k = 0; k < f->n_data; k++)
      a[k] = opnd[i][k] < 0 ? opnd[i][k] : reg_of[opnd[i][k]];
    /* registers whose value this instruction reads last are free for its
     * result (it reads its operands before it writes) */
    for (int k = 0; k < f->n_data; k++)
      if (opnd[i][k] >= 0 && last_use[opnd[i][k]] == (int)i) holder[reg_of[opnd[i][k]]] = -1;
    int dst = -1;
    for (int r = 0; r < OX_FEW_MAX_REGS && dst < 0; r++)
      if (holder[r] < 0) dst = r;
    if (dst < 0) return false;
    holder[dst] = OX_FEW_MAX_INPUTS + (int)i;
    reg_of[OX_FEW_MAX_INPUTS + i] = dst;
    int64_t b = a[1];
    if (f->n_data == 1) {
      b = 0;
      if (f->n_params) {
        const int at =
            f->n_params == 1 ? fe_imm(p, f->params[0]) : fe_imm2(p, f->params[0], f->params[1]);
        if (at < 0) return false;
        b = -1 - at;
      }
    }
    int64_t* ins = &p->code[p->n_code];
    ins[0] = f->op;
    ins[1] = dst;
    ins[2] = a[0];
    ins[3] = b;
    p->n_code += 4;
  }
  return true;
}

static OnyxStatus* fe_attr_ints(OxNode* n, const char* name, const int64_t* v, size_t count) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .count = count};
  a.ints = malloc((count ? count : 1) * sizeof *a.ints);
  OnyxStatus* st = a.name && a.ints ? NULL : ox_oom();
  if (!st) {
    memcpy(a.ints, v, count * sizeof *v);
    st = ox_node_add_attr(n, &a);
  }
  ox_attr_clear(&a);
  return st;
}

static OnyxStatus* fe_attr_floats(OxNode* n, const char* name, const float* v, size_t count) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_FLOATS, .count = count};
  a.floats = malloc((count ? count : 1) * sizeof *a.floats);
  OnyxStatus* st = a.name && a.floats ? NULL : ox_oom();
  if (!st) {
    memcpy(a.floats, v, count * sizeof *v);
    st = ox_node_add_attr(n, &a);
  }
  ox_attr_clear(&a);
  return st;
}

static OnyxStatus* fe_fuse_at(OxOpt* o, OxNode* sink, bool* done) {
  *done = false;
  FeSet* s = calloc(1, sizeof *s);
  FeProg* p = calloc(1, sizeof *p);
  OnyxStatus* st = s && p ? NULL : ox_oom();
  if (st || !fe_classify(sink, &s->ops[0]) || !fe_allowed(o, sink) ||
      !o->cfg->may_fuse(o->cfg->fuse_ctx, sink, OX_CONTRIB_DOMAIN, "FusedElementwise"))
    goto out;
  s->nodes[0] = sink;
  s->n = 1;
  fe_grow(o, s);

  bool heavy = !ox_opt_on_cpu(o);
  for (size_t i = 0; i < s->n && !heavy; i++)
    heavy = fe_heavy(s->ops[i].op);
  if (s->n < 2 || !heavy || !fe_order(s) || !fe_build(s, p)) goto out;
  OxValue* y = sink->outputs[0];
  char* base = ox_strdup(sink->name);
  if (!base) {
    st = ox_oom();
    goto out;
  }
  for (size_t i = 0; i < s->n; i++)
    ox_opt_remove(o, s->nodes[i]);
  OxNode* fn = NULL;
  st = ox_opt_add_node(o, base, "FusedElementwise", OX_CONTRIB_DOMAIN, p->inputs, p->n_inputs, &y,
                       1, &fn);
  free(base);
  if (!st) st = fe_attr_ints(fn, "program", p->code, p->n_code);
  if (!st && p->n_imm) st = fe_attr_floats(fn, "immediates", p->imm, p->n_imm);
  if (!st) *done = true;
out:
  free(s);
  free(p);
  return st;
}

OnyxStatus* ox_pass_fuse_elementwise(OxOpt* o, bool* changed) {
  /* After placement only: the op runs where a provider registers it. */
  if (o->cfg->phase != OX_OPT_PHASE_FUSION || !o->cfg->may_fuse) return NULL;
  /* From the graph's end, so that each set starts at its last node; after a
   * rewrite the scan starts over (the graph changed under it). */
  bool again = true;
  while (again) {
    again = false;
    for (size_t i = o->g->n_nodes; i-- > 0 && !again;) {
      OxNode* n = o->g->nodes[i];
      if (n->ep < 0 || n->group >= 0) continue;
      o->cur_ep = n->ep;
      ox_opt_journal_reset(o);
      bool done = false;
      OX_TRY(fe_fuse_at(o, n, &done));
      if (!done) continue;
      OX_TRY(ox_opt_note_origins(o));
      *changed = again = true;
    }
  }
  return NULL;
}
