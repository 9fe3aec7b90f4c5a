/* opt_layout_nchwc.c — the `layout_nchwc` transformer (layout level, after
 * placement): chains of the CPU provider's convolutions keep their
 * activations in a blocked channel layout ([N, C/b, H, W, b], b = 16 on
 * AVX-512, 8 on AVX2; schemas/schemas_nchwc.c) instead of NCHW, so that no
 * conv of the chain pays a layout conversion of its own.
 *
 * The chain's nodes, all on the CPU provider and float32:
 *   - Conv / com.onyx FusedConv, 2-D, W a constant, explicit pads (or
 *     auto_pad VALID), pointwise (1x1, stride 1, no padding, group 1),
 *     depthwise (group = C = M), or group 1 on at most 4 channels (a
 *     stem, which reads its NCHW input directly), the channel count
 *     static: they become com.onyx NchwcConv (the FusedConv's activation
 *     and Z kept);
 *   - GlobalAveragePool of a chain value: com.onyx NchwcGlobalAveragePool;
 *   - unary activations of a chain value (Relu, LeakyRelu, Clip, Sigmoid,
 *     HardSigmoid, HardSwish, Tanh, com.onyx Silu and HardSwish) and Add /
 *     Mul of two chain values of one shape, or of [N, C, H, W] and
 *     [N, C, 1, 1] (a squeeze-and-excitation gate): the same nodes, reading
 *     and writing blocked tensors (element-wise ops do not care about the
 *     layout, and the gate broadcasts over H and W of the blocked shape as
 *     over NCHW's);
 *   - 2-D MaxPool (no Indices, every window reaching X) / AveragePool of a
 *     chain value, auto_pad NOTSET or VALID: com.onyx NchwcMaxPool /
 *     NchwcAveragePool;
 *   - inference BatchNormalization of a chain value, constant parameters:
 *     com.onyx NchwcBatchNormalization, with the Relu that alone reads its
 *     output applied there (DenseNet's BN -> ReLU -> Conv);
 *   - Concat on axis 1, at least one input a chain value, every input's
 *     channels known and all but the last a multiple of the block: the
 *     same node on the blocked tensors (they concatenate along the block
 *     axis, the last one's padded lanes staying at the end);
 *   - a Pad of all-zero pads of a chain value: removed, its value the
 *     input's.
 * Each maps a finite value to a finite one, so the padded lanes past C
 * (zero after a ReorderInput, and what convs of zero weights and bias make
 * of them) stay finite and never reach a real channel: the convs sum over
 * the real input channels only, a Concat appends after whole blocks only,
 * and NchwcBatchNormalization writes 0 there.
 * A value entering the chain from elsewhere gets one com.onyx ReorderInput;
 * a chain value read outside the chain (or a graph output) gets one
 * com.onyx ReorderOutput, which writes the original value. Chains (sets of
 * chain nodes linked through their values) with fewer than two convs stay
 * as they are: their reorders would cost what they save. A conv without
 * activation whose output only a chain Add reads (a residual sum) takes
 * the Add's other operand as its Z and writes the sum. No node changes
 * provider: every node of a chain is the CPU provider's, and the reorders
 * are placed there too. */
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"
#include "ox_checked.h"

/* The block the CPU provider's vector kernels take on this machine (16:
 * AVX-512, 8: AVX2 + FMA, 0: neither: the pass does nothing), capped by
 * ONYX_CPU_ISA as the provider's kernels are; ONYX_OPT_NCHWC_BLOCK=0|8|16
 * overrides it (tests, bisecting). */
static int nc_block(void) {
  const char* e = getenv("ONYX_OPT_NCHWC_BLOCK");
  if (e && *e) return !strcmp(e, "16") ? 16 : !strcmp(e, "8") ? 8 : 0;
  int b = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f"))
    b = 16;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    b = 8;
  const char* cap = getenv("ONYX_CPU_ISA");
  if (cap && !strcmp(cap, "generic")) b = 0;
  if (cap && !strcmp(cap, "avx2") && b > 8) b = 8;
#endif
  return b;
}

typedef enum {
  NC_NONE,
  NC_CONV,
  NC_GAP,
  NC_UNARY,
  NC_BINARY,
  NC_SCALE,
  NC_POOL,    /* MaxPool / AveragePool: NchwcMaxPool / NchwcAveragePool */
  NC_BN,      /* BatchNormalization: NchwcBatchNormalization */
  NC_CONCAT,  /* Concat on the channel axis: the same node on the blocked tensors */
  NC_IDENTITY /* a Pad of all-zero pads: removed, its value the input's */
} NcKind;

/* A chain value: its blocked counterpart (once made), its channels, and
 * whether it is read outside the chain (or is a graph output). */
typedef struct NcVal {
  OxValue* blocked;
  int64_t c;
  bool outside;
  NcKind kind;   /* of the node writing it */
  bool absorbed; /* an Add taken into the conv before it as its Z */
} NcVal;

typedef struct NcPass {
  OxOpt* o;
  int block;
  NcKind* kind;  /* per node index */
  size_t* root;  /* union-find over node indices */
  size_t* convs; /* per root */
  NcVal* store;  /* per node index: its output's */
  OxMap vals;    /* value name -> NcVal (chain values) */
  OxMap inputs;  /* value name -> its ReorderInput's output */
} NcPass;

static bool nc_f32(const OxValue* v) {
  return v && v->type == ONYX_ELEM_FLOAT32;
}

/* n is the CPU provider's (a placed graph), or the CPU provider is the
 * session's only one (unplaced); and the provider has `op`. */
static bool nc_on_cpu(const OxOpt* o, const OxNode* n, const char* op) {
  if (o->cfg->phase == OX_OPT_PHASE_FUSION) {
    if (o->cfg->cpu_ep < 0 || n->ep != o->cfg->cpu_ep || n->group >= 0) return false;
  } else if (!o->cfg->cpu_alone) {
    return false;
  }
  return !op || !o->cfg->may_fuse || o->cfg->may_fuse(o->cfg->fuse_ctx, n, OX_CONTRIB_DOMAIN, op);
}

/* The Conv's window attribute, or `def` (count values) when absent. */
static bool nc_window(const OxNode* n, const char* name, size_t count, int64_t def, int64_t* out) {
  size_t k = 0;
  const int64_t* v = ox_node_attr_ints(n, name, &k);
  if (!v || !k) {
    for (size_t i = 0; i < count; i++)
      out[i] = def;
    return true;
  }
  if (k != count) return false;
  memcpy(out, v, count * sizeof *out);
  return true;
}

/* A group-1 conv of at most NC_HEAD_CHANNELS input channels (an image's):
 * the kernel's direct loop reads its NCHW input as it is and writes the
 * chain's blocked layout, so the chain's first conv needs no ReorderInput
 * (the stem of MobileNet and EfficientNet: 3 channels, 3x3, stride 2). */
#define NC_HEAD_CHANNELS 4
static bool nc_head(const OxNode* n) {
  const OxValue *x = n->inputs[0], *w = n->inputs[1];
  return ox_node_attr_int(n, "group", 1) == 1 && x->dims[1] <= NC_HEAD_CHANNELS &&
         w->dims[1] == x->dims[1];
}

/* A full or grouped conv (not pointwise, depthwise nor a stem) that the
 * blocked kernel's direct loop runs at least as fast as the NCHW paths
 * (docs/performance.md, "Blocked channel layout", has the figures):
 *   - grouped (group > 1 dividing C and M, W reading C / group channels)
 *     of at least 2 input channels per group (RegNet-Y's 8-channel groups:
 *     about twice as fast; one channel per group, a depthwise conv with a
 *     channel multiplier, would multiply a block of mostly zero weights);
 *   - group 1: windows larger than 1x1 (a strided 1x1 projection stays on
 *     the GEMM, which reads only the sampled pixels), at most
 *     NC_FULL_MAX_K products per output (C x kh x kw) and NC_FULL_MAX_M
 *     output channels (within 5% of the NCHW direct path there, and the
 *     chain saves its reorders; beyond, that path's tiles are 8-40% faster:
 *     ResNet's 256- and 512-channel layers), and not what the NCHW
 *     path runs as Winograd F(4x4, 3x3) (3x3, stride and dilation 1, C and
 *     M at least 16, at least 32 output tiles of 4x4: cpu_conv.c), which
 *     does a quarter of the multiplications. */
#define NC_FULL_MAX_K        1152
#define NC_FULL_MAX_M        128
#define NC_WINOGRAD_CHANNELS 16
#define NC_WINOGRAD_TILES    32
static bool nc_full_ok(const OxNode* n, const int64_t k[2], const int64_t s[2], const int64_t d[2],
                       int64_t group, int64_t c, int64_t m) {
  if (group < 1 || c % group || m % group || n->inputs[1]->dims[1] != c / group) return false;
  if (group > 1) return c / group > 1;
  if ((k[0] == 1 && k[1] == 1) || k[0] > NC_FULL_MAX_K || k[1] > NC_FULL_MAX_K ||
      c > NC_FULL_MAX_K || c * k[0] * k[1] > NC_FULL_MAX_K || m > NC_FULL_MAX_M)
    return false;
  if (k[0] == 3 && k[1] == 3 && s[0] == 1 && s[1] == 1 && d[0] == 1 && d[1] == 1 &&
      c >= NC_WINOGRAD_CHANNELS && m >= NC_WINOGRAD_CHANNELS) {
    const OxValue* y = n->outputs[0];
    if (y->rank != 4 || y->dims[0] < 1 || y->dims[2] < 1 || y->dims[3] < 1) return false;
    const int64_t th = (y->dims[2] + 3) / 4, tw = (y->dims[3] + 3) / 4;
    if (y->dims[0] >= NC_WINOGRAD_TILES || th >= NC_WINOGRAD_TILES || tw >= NC_WINOGRAD_TILES ||
        y->dims[0] * th * tw >= NC_WINOGRAD_TILES)
      return false;
  }
  return true;
}

/* A Conv / FusedConv the blocked kernel takes. */
static bool nc_conv_ok(const OxOpt* o, const OxNode* n) {
  const bool fused = !strcmp(n->domain, OX_CONTRIB_DOMAIN) && !strcmp(n->op_type, "FusedConv");
  if (!fused && !ox_opt_is(n, "Conv")) return false;
  if (n->n_inputs < 2 || n->n_outputs != 1 || !nc_f32(n->inputs[0]) || !nc_f32(n->outputs[0]))
    return false;
  const OxValue *x = n->inputs[0], *w = n->inputs[1];
  if (x->rank != 4 || x->dims[1] < 1 || !w->constant || !nc_f32(w) || w->rank != 4) return false;
  const char* pad = ox_node_attr_string(n, "auto_pad", "NOTSET");
  if (strcmp(pad, "NOTSET") && strcmp(pad, "VALID")) return false;
  int64_t k[2], s[2], p[4], d[2];
  if (!nc_window(n, "kernel_shape", 2, 0, k) || !nc_window(n, "strides", 2, 1, s) ||
      !nc_window(n, "pads", 4, 0, p) || !nc_window(n, "dilations", 2, 1, d))
    return false;
  if (!strcmp(pad, "VALID")) memset(p, 0, sizeof p);
  if (k[0] == 0) k[0] = w->dims[2], k[1] = w->dims[3];
  if (k[0] != w->dims[2] || k[1] != w->dims[3]) return false;
  const int64_t group = ox_node_attr_int(n, "group", 1), c = x->dims[1], m = w->dims[0];
  const bool pointwise = k[0] == 1 && k[1] == 1 && s[0] == 1 && s[1] == 1 && !p[0] && !p[1] &&
                         !p[2] && !p[3] && group == 1 && w->dims[1] == c;
  const bool depthwise = group == c && m == c && w->dims[1] == 1;
  if (!pointwise && !depthwise && !nc_head(n) && !nc_full_ok(n, k, s, d, group, c, m)) return false;
  for (size_t i = 2; i < n->n_inputs; i++)
    if (n->inputs[i] && !nc_f32(n->inputs[i])) return false;
  return nc_on_cpu(o, n, "NchwcConv");
}

static NcVal* nc_val(const NcPass* p, const OxValue* v) {
  return v ? ox_map_get(&p->vals, v->name) : NULL;
}

static size_t nc_find(NcPass* p, size_t i) {
  while (p->root[i] != i)
    i = p->root[i] = p->root[p->root[i]];
  return i;
}

static void nc_union(NcPass* p, size_t a, size_t b) {
  a = nc_find(p, a), b = nc_find(p, b);
  if (a != b) p->root[b] = a;
}

static bool nc_unary(const OxNode* n) {
  static const char* const onnx[] = {"Relu",        "LeakyRelu", "Clip", "Sigmoid",
                                     "HardSigmoid", "HardSwish", "Tanh"};
  if (n->n_outputs != 1 || n->n_inputs < 1) return false;
  if (!strcmp(n->domain, OX_CONTRIB_DOMAIN))
    return n->n_inputs == 1 && (!strcmp(n->op_type, "Silu") || !strcmp(n->op_type, "HardSwish"));
  for (size_t i = 0; i < OX_ARRAY_LEN(onnx); i++)
    if (ox_opt_is(n, onnx[i])) {
      /* Clip's bounds: constants (or absent), not chain values */
      for (size_t k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] && !n->inputs[k]->constant) return false;
      return i == 2 || n->n_inputs == 1;
    }
  return false;
}

/* Add / Mul of chain values a and b (4-D static shapes): one shape, or
 * b [N, C, 1, 1] against a [N, C, H, W] (either order). */
static bool nc_binary_shapes(const OxValue* a, const OxValue* b) {
  if (a->rank != 4 || b->rank != 4) return false;
  for (int i = 0; i < 4; i++)
    if (a->dims[i] < 0 || b->dims[i] < 0) return false;
  if (a->dims[0] != b->dims[0] || a->dims[1] != b->dims[1]) return false;
  const bool same = a->dims[2] == b->dims[2] && a->dims[3] == b->dims[3];
  const bool gate = (a->dims[2] == 1 && a->dims[3] == 1) || (b->dims[2] == 1 && b->dims[3] == 1);
  return same || gate;
}

/* A 2-D MaxPool (no Indices) / AveragePool the blocked kernel takes:
 * auto_pad NOTSET or VALID, every window of a MaxPool holding a tap inside
 * X (pads below the kernel with dilation 1, or no pads), so that no lane,
 * padded or real, gets -inf where the NCHW pool would not. */
static bool nc_pool_ok(const OxOpt* o, const OxNode* n) {
  const bool max = ox_opt_is(n, "MaxPool");
  if (!max && !ox_opt_is(n, "AveragePool")) return false;
  if (n->n_inputs != 1 || n->n_outputs != 1 || !nc_f32(n->inputs[0]) || n->inputs[0]->rank != 4)
    return false;
  const char* pad = ox_node_attr_string(n, "auto_pad", "NOTSET");
  if (strcmp(pad, "NOTSET") && strcmp(pad, "VALID")) return false;
  int64_t k[2], s[2], p[4], d[2];
  if (!nc_window(n, "kernel_shape", 2, 0, k) || !nc_window(n, "strides", 2, 1, s) ||
      !nc_window(n, "pads", 4, 0, p) || !nc_window(n, "dilations", 2, 1, d))
    return false;
  if (!strcmp(pad, "VALID")) memset(p, 0, sizeof p);
  for (int i = 0; i < 2; i++)
    if (k[i] < 1 || k[i] > INT32_MAX || s[i] < 1 || s[i] > INT32_MAX || d[i] < 1 ||
        d[i] > INT32_MAX)
      return false;
  for (int i = 0; i < 4; i++) {
    if (p[i] < 0 || p[i] > INT32_MAX) return false;
    if (max && p[i] && (d[i % 2] != 1 || p[i] >= k[i % 2])) return false;
  }
  return nc_on_cpu(o, n, max ? "NchwcMaxPool" : "NchwcAveragePool");
}

/* Inference BatchNormalization of chain value x (c channels) with
 * constant float32 [c] parameters. */
static bool nc_bn_ok(const OxOpt* o, const OxNode* n, int64_t c) {
  if (!ox_opt_is(n, "BatchNormalization") || n->n_inputs != 5 || n->n_outputs != 1 ||
      !nc_f32(n->inputs[0]) || n->inputs[0]->rank != 4 ||
      ox_node_attr_int(n, "training_mode", 0) != 0)
    return false;
  for (size_t i = 1; i < 5; i++) {
    const OxValue* v = n->inputs[i];
    if (!nc_f32(v) || !v->constant || v->rank != 1 || v->dims[0] != c) return false;
  }
  return nc_on_cpu(o, n, "NchwcBatchNormalization");
}

/* A Concat on axis 1 of 4-D float32 values, one of them a chain value,
 * each one's channels known, all but the last a multiple of the block: the
 * blocked tensors concatenate along their block axis (the last one's
 * padded lanes stay at the end). Its channels in *c. */
static bool nc_concat_ok(const NcPass* p, const OxNode* n, int64_t* c) {
  if (!ox_opt_is(n, "Concat") || n->n_inputs < 1 || n->n_outputs != 1 ||
      ox_node_attr_int(n, "axis", 0) != 1 || n->outputs[0]->rank != 4)
    return false;
  bool chain = false;
  int64_t sum = 0;
  for (size_t i = 0; i < n->n_inputs; i++) {
    const OxValue* v = n->inputs[i];
    if (!nc_f32(v) || v->rank != 4) return false;
    const NcVal* cv = nc_val(p, v);
    const int64_t ci = cv ? cv->c : v->dims[1];
    if (ci < 1 || (i + 1 < n->n_inputs && ci % p->block) || !ox_add_i64(sum, ci, &sum))
      return false;
    chain |= cv != NULL;
  }
  *c = sum;
  return chain && nc_on_cpu(p->o, n, NULL);
}

/* A Pad whose pads are all zero (any mode): its output is its input. */
static bool nc_zero_pad(const OxOpt* o, const OxNode* n) {
  if (!ox_opt_is(n, "Pad") || n->n_inputs < 2 || n->n_outputs != 1 || !n->inputs[1]) return false;
  int64_t* pads = NULL;
  size_t count = 0;
  if (!ox_opt_const_ints(n->inputs[1], &pads, &count)) return false;
  bool zero = true;
  for (size_t i = 0; i < count; i++)
    zero &= pads[i] == 0;
  free(pads);
  return zero && nc_on_cpu(o, n, NULL);
}

/* Marks the chain nodes (graph order: producers first) and links them. */
static OnyxStatus* nc_mark(NcPass* p) {
  OxGraph* g = p->o->g;
  for (size_t i = 0; i < g->n_nodes; i++) {
    OxNode* n = g->nodes[i];
    NcKind k = NC_NONE;
    int64_t c = 0;
    const NcVal* in0 = n->n_inputs ? nc_val(p, n->inputs[0]) : NULL;
    const NcVal* in1 = n->n_inputs > 1 ? nc_val(p, n->inputs[1]) : NULL;
    if (nc_conv_ok(p->o, n)) {
      k = NC_CONV;
      c = n->inputs[1]->dims[0];
    } else if (n->n_outputs == 1 && nc_f32(n->outputs[0])) {
      if (in0 && ox_opt_is(n, "GlobalAveragePool") && n->n_inputs == 1 &&
          nc_on_cpu(p->o, n, "NchwcGlobalAveragePool"))
        k = NC_GAP;
      else if (in0 && nc_unary(n) && nc_on_cpu(p->o, n, NULL))
        k = NC_UNARY;
      /* one operand may come from outside (a residual sum with the chain's
       * input): it gets a ReorderInput as a conv's input would */
      else if ((in0 || in1) && (ox_opt_is(n, "Add") || ox_opt_is(n, "Mul")) && n->n_inputs == 2 &&
               nc_f32(n->inputs[0]) && nc_f32(n->inputs[1]) &&
               nc_binary_shapes(n->inputs[0], n->inputs[1]) && nc_on_cpu(p->o, n, NULL))
        k = NC_BINARY;
      /* Mul by a [N, C, 1, 1] gate: NchwcScale (the element-wise Mul
       * would broadcast over the blocked shape's middle axes) */
      if (k == NC_BINARY && ox_opt_is(n, "Mul") &&
          (n->inputs[0]->dims[2] != n->inputs[1]->dims[2] ||
           n->inputs[0]->dims[3] != n->inputs[1]->dims[3]) &&
          nc_on_cpu(p->o, n, "NchwcScale"))
        k = NC_SCALE;
      c = in0 ? in0->c : in1 ? in1->c : 0;
      if (k == NC_NONE) {
        if (in0 && nc_pool_ok(p->o, n))
          k = NC_POOL;
        else if (in0 && nc_bn_ok(p->o, n, in0->c))
          k = NC_BN;
        else if (in0 && nc_zero_pad(p->o, n))
          k = NC_IDENTITY;
        else if (nc_concat_ok(p, n, &c))
          k = NC_CONCAT;
      }
    }
    p->kind[i] = k;
    if (k == NC_NONE) continue;
    NcVal* v = &p->store[i];
    if (!ox_map_put(&p->vals, n->outputs[0]->name, v)) return ox_oom();
    v->c = c;
    v->kind = k;
    if (k == NC_CONV) p->convs[i] = 1;
    for (size_t s = 0; s < n->n_inputs; s++) {
      const OxValue* in = n->inputs[s];
      if (nc_val(p, in)) nc_union(p, in->producer->index, i);
    }
  }
  /* per chain: its convs */
  for (size_t i = 0; i < g->n_nodes; i++)
    if (p->kind[i] != NC_NONE && nc_find(p, i) != i) p->convs[nc_find(p, i)] += p->convs[i];
  return NULL;
}

/* The blocked value the chain node reads at input slot s: the chain
 * value's, or one ReorderInput per outside value. */
static OnyxStatus* nc_input(NcPass* p, OxValue* v, OxValue** out) {
  NcVal* cv = nc_val(p, v);
  if (cv && cv->blocked) {
    *out = cv->blocked;
    return NULL;
  }
  if ((*out = ox_map_get(&p->inputs, v->name))) return NULL;
  char* name = NULL;
  OX_TRY(ox_opt_fresh_name(p->o, v->name, &name));
  OnyxStatus* st = ox_graph_value(p->o->g, name, out);
  free(name);
  OxNode* r = NULL;
  if (!st)
    st =
        ox_opt_add_node(p->o, "ReorderInput", "ReorderInput", OX_CONTRIB_DOMAIN, &v, 1, out, 1, &r);
  if (!st) st = ox_opt_attr_int(r, "block", p->block);
  if (!st && !ox_map_put(&p->inputs, v->name, *out)) st = ox_oom();
  p->o->stats->nchwc_reorders++;
  return st;
}

static OnyxStatus* nc_attr_ints(OxNode* n, const char* name, const int64_t* v, size_t count) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .count = count};
  a.ints = malloc(count * sizeof *a.ints);
  OnyxStatus* st = a.name && a.ints ? NULL : ox_oom();
  if (!st) {
    memcpy(a.ints, v, count * sizeof *v);
    st = ox_node_add_attr(n, &a);
  }
  ox_attr_clear(&a);
  return st;
}

/* NchwcConv(x, W, B?, z?) in place of conv, writing y. */
static OnyxStatus* nc_make_conv(NcPass* p, OxNode* conv, OxValue* x, OxValue* z, OxValue* y) {
  int64_t k[2], s[2], pads[4], d[2];
  nc_window(conv, "kernel_shape", 2, 0, k);
  nc_window(conv, "strides", 2, 1, s);
  nc_window(conv, "pads", 4, 0, pads);
  nc_window(conv, "dilations", 2, 1, d);
  if (!strcmp(ox_node_attr_string(conv, "auto_pad", "NOTSET"), "VALID"))
    memset(pads, 0, sizeof pads);
  k[0] = conv->inputs[1]->dims[2], k[1] = conv->inputs[1]->dims[3];
  OxValue* ins[4] = {x, conv->inputs[1], conv->n_inputs > 2 ? conv->inputs[2] : NULL, z};
  const size_t n_ins = z ? 4 : ins[2] ? 3 : 2;
  OxNode* nc = NULL;
  OX_TRY(ox_opt_add_node(p->o, conv->name, "NchwcConv", OX_CONTRIB_DOMAIN, ins, n_ins, &y, 1, &nc));
  OX_TRY(ox_opt_attr_int(nc, "block", p->block));
  OX_TRY(nc_attr_ints(nc, "kernel_shape", k, 2));
  OX_TRY(nc_attr_ints(nc, "strides", s, 2));
  OX_TRY(nc_attr_ints(nc, "pads", pads, 4));
  OX_TRY(nc_attr_ints(nc, "dilations", d, 2));
  OX_TRY(ox_opt_attr_int(nc, "group", ox_node_attr_int(conv, "group", 1)));
  static const char* const fl[] = {"alpha", "beta", "clip_min", "clip_max"};
  const char* act = ox_node_attr_string(conv, "activation", NULL);
  if (act && *act) {
    OX_TRY(ox_opt_attr_string(nc, "activation", act));
    for (size_t i = 0; i < OX_ARRAY_LEN(fl); i++) {
      const OxAttr* a = ox_node_attr(conv, fl[i]);
      if (a && a->type == ONYX_ATTR_FLOAT && !a->from_default)
        OX_TRY(ox_opt_attr_float(nc, fl[i], a->f));
    }
  }
  p->o->stats->nchwc++;
  return NULL;
}

/* A residual sum after a conv without activation or Z: the conv's output
 * read only by an Add of the chain, of one shape with its other operand,
 * which is a value from outside or a chain value already blocked. The
 * Add's node, or NULL. NchwcConv then adds that operand as its Z (bias +
 * the products, then Z: the Add's order) and writes the Add's value. */
static OxNode* nc_residual(NcPass* p, const OxNode* conv) {
  const OxValue* y = conv->outputs[0];
  if ((conv->n_inputs > 3 && conv->inputs[3]) || ox_node_attr_string(conv, "activation", NULL) ||
      y->n_consumers != 1 || ox_opt_pinned(p->o, y))
    return NULL;
  OxNode* add = y->consumers[0];
  const NcVal* av = ox_opt_is(add, "Add") ? nc_val(p, add->outputs[0]) : NULL;
  if (!av || av->kind != NC_BINARY) return NULL;
  const OxValue* other = add->inputs[add->inputs[0] == y ? 1 : 0];
  const NcVal* ov = nc_val(p, other);
  const bool same = other->dims[2] == y->dims[2] && other->dims[3] == y->dims[3];
  return same && other != y && (!ov || ov->blocked) ? add : NULL;
}

/* The ReorderOutput of chain value cv, writing y, where y is read outside
 * the chain. */
static OnyxStatus* nc_reorder_output(NcPass* p, const NcVal* cv, OxValue* y) {
  if (cv->outside) {
    OxNode* r = NULL;
    OX_TRY(ox_opt_add_node(p->o, "ReorderOutput", "ReorderOutput", OX_CONTRIB_DOMAIN,
                           (OxValue**)&cv->blocked, 1, &y, 1, &r));
    OX_TRY(ox_opt_attr_int(r, "channels", cv->c));
    p->o->stats->nchwc_reorders++;
  }
  return ox_opt_note_origins(p->o);
}

/* NchwcMaxPool / NchwcAveragePool(x) in place of pool n, writing y: the
 * window attributes explicit (auto_pad VALID as zero pads). */
static OnyxStatus* nc_make_pool(NcPass* p, OxNode* n, OxValue* x, OxValue* y) {
  const bool max = ox_opt_is(n, "MaxPool");
  int64_t k[2], s[2], pads[4], d[2];
  nc_window(n, "kernel_shape", 2, 0, k);
  nc_window(n, "strides", 2, 1, s);
  nc_window(n, "pads", 4, 0, pads);
  nc_window(n, "dilations", 2, 1, d);
  if (!strcmp(ox_node_attr_string(n, "auto_pad", "NOTSET"), "VALID")) memset(pads, 0, sizeof pads);
  OxNode* np = NULL;
  OX_TRY(ox_opt_add_node(p->o, n->name, max ? "NchwcMaxPool" : "NchwcAveragePool",
                         OX_CONTRIB_DOMAIN, &x, 1, &y, 1, &np));
  OX_TRY(nc_attr_ints(np, "kernel_shape", k, 2));
  OX_TRY(nc_attr_ints(np, "strides", s, 2));
  OX_TRY(nc_attr_ints(np, "pads", pads, 4));
  OX_TRY(nc_attr_ints(np, "dilations", d, 2));
  OX_TRY(ox_opt_attr_int(np, "ceil_mode", ox_node_attr_int(n, "ceil_mode", 0) != 0));
  if (!max)
    OX_TRY(
        ox_opt_attr_int(np, "count_include_pad", ox_node_attr_int(n, "count_include_pad", 0) != 0));
  return NULL;
}

/* The Relu of the chain that alone reads BN n's output (DenseNet's
 * BN -> ReLU -> Conv), or NULL: NchwcBatchNormalization then applies it
 * and writes the Relu's value. */
static OxNode* nc_bn_relu(const NcPass* p, const OxNode* bn) {
  const OxValue* y = bn->outputs[0];
  if (y->n_consumers != 1 || ox_opt_pinned(p->o, y)) return NULL;
  OxNode* r = y->consumers[0];
  if (!ox_opt_is(r, "Relu") || r->n_inputs != 1) return NULL;
  const NcVal* rv = nc_val(p, r->outputs[0]);
  return rv && rv->kind == NC_UNARY ? r : NULL;
}

/* NchwcBatchNormalization(x, scale, B, mean, var) in place of BN n, with
 * the Relu nc_bn_relu finds applied (its value absorbed): writes the BN's
 * blocked value, or the Relu's. */
static OnyxStatus* nc_bn(NcPass* p, OxNode* n, NcVal* cv) {
  OxValue* x = NULL;
  OX_TRY(nc_input(p, n->inputs[0], &x));
  OxNode* relu = nc_bn_relu(p, n);
  NcVal* out = relu ? nc_val(p, relu->outputs[0]) : cv;
  char* name = NULL;
  OX_TRY(ox_opt_fresh_name(p->o, (relu ? relu : n)->outputs[0]->name, &name));
  OnyxStatus* st = ox_graph_value(p->o->g, name, &out->blocked);
  free(name);
  OX_TRY(st);
  out->absorbed = relu != NULL;
  OxValue* ins[5] = {x, n->inputs[1], n->inputs[2], n->inputs[3], n->inputs[4]};
  OxNode* nb = NULL;
  OX_TRY(ox_opt_add_node(p->o, n->name, "NchwcBatchNormalization", OX_CONTRIB_DOMAIN, ins, 5,
                         &out->blocked, 1, &nb));
  if (relu) OX_TRY(ox_opt_attr_string(nb, "activation", "Relu"));
  OX_TRY(ox_opt_attr_float(nb, "epsilon", ox_node_attr_float(n, "epsilon", 1e-5f)));
  OxValue* y = n->outputs[0];
  ox_opt_remove(p->o, n);
  /* with the Relu absorbed, the BN's value is read only by it: not outside */
  return nc_reorder_output(p, cv, y);
}

/* Rewrites chain node n (its chain kept): blocked inputs, a blocked output,
 * and a ReorderOutput where the original output is read outside. */
static OnyxStatus* nc_rewrite(NcPass* p, OxNode* n, NcKind kind) {
  OxOpt* o = p->o;
  o->cur_ep = n->ep;
  ox_opt_journal_reset(o);
  OxValue* y = n->outputs[0];
  NcVal* cv = nc_val(p, y);
  if (cv->absorbed) { /* its conv writes its blocked value */
    ox_opt_remove(o, n);
    if (cv->outside) {
      OxNode* r = NULL;
      OX_TRY(ox_opt_add_node(o, "ReorderOutput", "ReorderOutput", OX_CONTRIB_DOMAIN, &cv->blocked,
                             1, &y, 1, &r));
      OX_TRY(ox_opt_attr_int(r, "channels", cv->c));
      o->stats->nchwc_reorders++;
    }
    return ox_opt_note_origins(o);
  }
  if (kind == NC_BN) return nc_bn(p, n, cv);
  if (kind == NC_IDENTITY) { /* a zero Pad: its value is its input's */
    OX_TRY(nc_input(p, n->inputs[0], &cv->blocked));
    ox_opt_remove(o, n);
    return nc_reorder_output(p, cv, y);
  }
  OxNode* add = kind == NC_CONV ? nc_residual(p, n) : NULL;
  if (add) { /* the conv writes the sum: the Add's value, Z its other operand */
    OxValue* other = add->inputs[add->inputs[0] == y ? 1 : 0];
    NcVal* av = nc_val(p, add->outputs[0]);
    char* an = NULL;
    OX_TRY(ox_opt_fresh_name(o, add->outputs[0]->name, &an));
    OnyxStatus* ast = ox_graph_value(o->g, an, &av->blocked);
    free(an);
    OX_TRY(ast);
    OxValue* xin = NULL;
    OxValue* zin = NULL;
    if (nc_head(n) && !nc_val(p, n->inputs[0]))
      xin = n->inputs[0];
    else
      OX_TRY(nc_input(p, n->inputs[0], &xin));
    OX_TRY(nc_input(p, other, &zin));
    OX_TRY(nc_make_conv(p, n, xin, zin, av->blocked));
    av->absorbed = true;
    ox_opt_remove(o, n);
    return ox_opt_note_origins(o);
  }
  char* name = NULL;
  OX_TRY(ox_opt_fresh_name(o, y->name, &name));
  OnyxStatus* st = ox_graph_value(o->g, name, &cv->blocked);
  free(name);
  OX_TRY(st);
  /* the inputs that carry activations: X (and a FusedConv's Z), the
   * element-wise operands */
  OxValue* in[2] = {NULL, NULL};
  size_t slots[2] = {0, kind == NC_CONV ? 3 : 1};
  const size_t n_act =
      kind == NC_BINARY || kind == NC_SCALE || (kind == NC_CONV && n->n_inputs > 3) ? 2 : 1;
  if (kind == NC_SCALE && n->inputs[0]->dims[2] == 1 && n->inputs[0]->dims[3] == 1)
    slots[0] = 1, slots[1] = 0; /* X, the image, first; S, the gate, second */
  for (size_t i = 0; i < n_act && kind != NC_CONCAT && kind != NC_POOL; i++) {
    OxValue* v = n->inputs[slots[i]];
    if (!v) continue;
    if (i == 0 && kind == NC_CONV && nc_head(n) && !nc_val(p, v))
      in[0] = v; /* NCHW X, read as it is */
    else
      OX_TRY(nc_input(p, v, &in[i]));
  }
  const bool outside = cv->outside;
  if (kind == NC_CONCAT) { /* every input blocked, the same node on axis 1 */
    for (size_t i = 0; i < n->n_inputs; i++) {
      OxValue* b = NULL;
      OX_TRY(nc_input(p, n->inputs[i], &b));
      OX_TRY(ox_opt_set_input(n, i, b));
    }
    ox_opt_set_output(o, n, 0, cv->blocked);
    o->took_over = n;
  } else if (kind == NC_POOL) {
    OX_TRY(nc_input(p, n->inputs[0], &in[0]));
    OX_TRY(nc_make_pool(p, n, in[0], cv->blocked));
    ox_opt_remove(o, n);
  } else if (kind == NC_CONV || kind == NC_GAP || kind == NC_SCALE) {
    if (kind == NC_CONV) {
      st = nc_make_conv(p, n, in[0], in[1], cv->blocked);
    } else if (kind == NC_SCALE) {
      OxNode* sc = NULL;
      st =
          ox_opt_add_node(o, n->name, "NchwcScale", OX_CONTRIB_DOMAIN, in, 2, &cv->blocked, 1, &sc);
    } else {
      OxNode* gap = NULL;
      st = ox_opt_add_node(o, n->name, "NchwcGlobalAveragePool", OX_CONTRIB_DOMAIN, &in[0], 1,
                           &cv->blocked, 1, &gap);
    }
    OX_TRY(st);
    ox_opt_remove(o, n);
  } else {
    for (size_t i = 0; i < n_act; i++)
      OX_TRY(ox_opt_set_input(n, slots[i], in[i]));
    ox_opt_set_output(o, n, 0, cv->blocked);
    o->took_over = n;
  }
  if (outside) {
    OxNode* r = NULL;
    OX_TRY(ox_opt_add_node(o, "ReorderOutput", "ReorderOutput", OX_CONTRIB_DOMAIN, &cv->blocked, 1,
                           &y, 1, &r));
    OX_TRY(ox_opt_attr_int(r, "channels", cv->c));
    o->stats->nchwc_reorders++;
  }
  return ox_opt_note_origins(o);
}

OnyxStatus* ox_pass_layout_nchwc(OxOpt* o, bool* changed) {
  OxGraph* g = o->g;
  NcPass p = {.o = o, .block = nc_block()};
  if (!p.block || !g->n_nodes) return NULL;
  p.kind = calloc(g->n_nodes, sizeof *p.kind);
  p.root = calloc(g->n_nodes, sizeof *p.root);
  p.convs = calloc(g->n_nodes, sizeof *p.convs);
  p.store = calloc(g->n_nodes, sizeof *p.store);
  OxNode** chain = calloc(g->n_nodes, sizeof *chain);
  NcKind* kinds = calloc(g->n_nodes, sizeof *kinds);
  OnyxStatus* st = p.kind && p.root && p.convs && p.store && chain && kinds ? NULL : ox_oom();
  for (size_t i = 0; !st && i < g->n_nodes; i++) {
    p.root[i] = i;
    g->nodes[i]->index = i;
  }
  if (!st) st = nc_mark(&p);
  /* chains of fewer than two convs stay NCHW */
  size_t n_chain = 0;
  for (size_t i = 0; !st && i < g->n_nodes; i++)
    if (p.kind[i] != NC_NONE && p.convs[nc_find(&p, i)] < 2) p.kind[i] = NC_NONE;
  for (size_t i = 0; !st && i < g->n_nodes; i++)
    if (p.kind[i] != NC_NONE) {
      kinds[n_chain] = p.kind[i];
      chain[n_chain++] = g->nodes[i];
    }
  /* which chain values are read outside their chain, before the edits
   * move nodes around */
  for (size_t i = 0; !st && i < g->n_nodes; i++) {
    if (p.kind[i] == NC_NONE) continue;
    const OxValue* y = g->nodes[i]->outputs[0];
    bool outside = ox_opt_pinned(o, y);
    for (size_t k = 0; k < y->n_consumers && !outside; k++)
      outside = p.kind[y->consumers[k]->index] == NC_NONE;
    p.store[i].outside = outside;
  }
  for (size_t i = 0; !st && i < n_chain; i++) {
    st = nc_rewrite(&p, chain[i], kinds[i]);
    if (!st) *changed = true;
  }
  if (st) st = ox_status_wrap(st, "layout_nchwc");
  ox_map_free(&p.vals);
  ox_map_free(&p.inputs);
  free(p.kind);
  free(p.root);
  free(p.convs);
  free(p.store);
  free(chain);
  free(kinds);
  return st;
}
