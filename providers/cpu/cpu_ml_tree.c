/* cpu_ml_tree.c — ai.onnx.ml tree ensembles: TreeEnsembleClassifier (1, 3),
 * TreeEnsembleRegressor (1, 3) and TreeEnsemble (5), on one evaluator.
 *
 * Layout. Each op's attributes are turned, at kernel creation, into one
 * array of 16-byte nodes (24 with a double threshold) holding the feature,
 * the threshold and both children as array indices, trees in depth-first
 * order with the true child first, so a walk mostly moves forward in memory.
 * A leaf's two children are itself; its threshold slot holds its leaf id
 * (weights in a separate table). A node reached from two parents is stored
 * once (converters express set membership that way); a cycle, a child id
 * that names no node, a feature id below 0, an unknown mode and an
 * out-of-range class or target id are refused at creation with the node
 * and attribute named; the feature ids against the input's width at run.
 *
 * Evaluation. Rows are cut into as few blocks as the pool's threads allow
 * (at most TE_BLOCK rows each); the threads take blocks. In a block each
 * tree runs over all rows before the next tree, so the tree stays in cache
 * and the ensemble is read once per block. When every branch node has the
 * same mode and no node sends missing values to the true side (what
 * converters emit), the walk is one comparison per step and TE_LANES rows
 * walk together, their loads overlapping; a leaf's children are itself, so
 * rows that finish early wait in place. Otherwise each step looks up the
 * node's mode.
 *
 * Arithmetic follows ONNX Runtime: thresholds and scores are float for
 * float, int32 and int64 inputs (integers compared as floats) and double for
 * double inputs; classifier and regressor outputs are float. Scores follow
 * ONNX Runtime's aggregators: per class or target a score and whether any
 * leaf gave it one; with one target the score is the sum of the leaf values
 * plus base_values[0] (AVERAGE: divided by the tree count first), and only
 * PROBIT applies; with several, base values are added when there is one per
 * target, a target no leaf reached outputs 0, and the post transform runs in
 * float (PROBIT with ONNX Runtime's inverse-erf approximation). Classifiers
 * (at least 2 labels): with more than 2 classes the label is the first
 * class of highest score among those with one; with 2 classes and a single
 * weighted class (binary_case), the label is class 1 when its score is
 * > 0.5 (all weights >= 0; scores [1 - p, p]) or > 0 (mixed signs; scores
 * [-s, s], or [logistic(-s), logistic(s)] under LOGISTIC); with 2 weighted
 * classes the label is class 1 when class 1's score is > 0 (ONNX Runtime
 * writes the integer 1 or 0 there; here it is that class's label). Label
 * strings come from classlabels_strings by index.
 *
 * TreeEnsemble (5) keeps its own spec: output of the input's type, scores
 * accumulated as above, AVERAGE dividing by the tree count, SOFTMAX,
 * SOFTMAX_ZERO (zeros stay zero) and LOGISTIC on every target, and leaves
 * reached only through nodes_trueleafs/nodes_falseleafs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

static const char* tree_domain = "ai.onnx.ml";

/* Branch modes (TreeEnsemble 5's numbering), then LEAF. */
enum { TM_LEQ, TM_LT, TM_GTE, TM_GT, TM_EQ, TM_NEQ, TM_MEMBER, TM_LEAF };
/* Aggregate functions and post transforms (TreeEnsemble 5's numbering). */
enum { TA_AVERAGE, TA_SUM, TA_MIN, TA_MAX };
enum { TP_NONE, TP_SOFTMAX, TP_SOFTMAX_ZERO, TP_LOGISTIC, TP_PROBIT };

/* Rows per block: at most TE_BLOCK (accumulators block * targets * 8
 * bytes), at least TE_BLOCK_MIN when the rows are split between threads. */
#define TE_BLOCK     16384
#define TE_BLOCK_MIN 64
#define TE_LANES     8          /* rows walking one tree together */
#define TE_MAX_NODES 0x3fffffff /* nodes and leaves an ensemble may have */

typedef struct TeNode { /* float thresholds */
  int32_t feat;         /* 0 on leaves */
  union {
    float thr;
    uint32_t leaf; /* leaves: leaf id */
  } u;
  uint32_t child[2]; /* [0] false, [1] true; a leaf's are its own index */
} TeNode;

typedef struct TeNodeD { /* double thresholds */
  int32_t feat;
  uint32_t leaf;
  uint32_t child[2];
  double thr;
} TeNodeD;

/* The flattened ensemble. */
typedef struct TeModel {
  size_t n_nodes, n_trees, n_leaves, n_targets;
  TeNode* nodes;
  TeNodeD* nodes_d;
  uint32_t* roots;
  int uniform;    /* the one branch mode of every node, or -1: flags[] */
  uint8_t* flags; /* per node: mode | 8 when missing values go true; NULL if uniform */
  uint32_t* mbeg; /* TM_MEMBER: members [mbeg[i], mend[i]) of members[]; else NULL */
  uint32_t* mend;
  double* members;
  int64_t max_feat; /* -1: no branch node */
  char max_feat_node[64];
  /* Leaf weights: leaf l has weights [wbeg[l], wbeg[l + 1]). */
  uint32_t* wbeg;
  uint32_t* wtarget;
  float* wf;
  double* wd;
  bool single; /* one target: each leaf adds lvf/lvd[leaf] to it */
  float* lvf;
  double* lvd;
  int agg;
} TeModel;

static void te_model_free(TeModel* m) {
  free(m->nodes);
  free(m->nodes_d);
  free(m->roots);
  free(m->flags);
  free(m->mbeg);
  free(m->mend);
  free(m->members);
  free(m->wbeg);
  free(m->wtarget);
  free(m->wf);
  free(m->wd);
  free(m->lvf);
  free(m->lvd);
}

/* What the front ends (v1/v3 attributes, v5 attributes) hand the builder:
 * n source nodes, leaves among them (mode TM_LEAF, leaf id leaf_of[i]),
 * children as source indices, and per leaf its weights as (target, value)
 * in CSR form. */
typedef struct TeSrc {
  size_t n;
  uint8_t* mode;
  uint8_t* miss;
  int64_t* feat;
  double* thr;
  uint32_t* tchild;
  uint32_t* fchild;
  uint32_t* leaf_of;
  size_t n_leaves;
  uint32_t* wbeg; /* n_leaves + 1 */
  uint32_t* wtarget;
  double* wval;
  size_t n_roots;
  uint32_t* roots;
  /* v5 set membership, per source node; NULL when none. */
  uint32_t* mbeg;
  uint32_t* mend;
  double* members;
  size_t n_members;
  /* Names for errors: v1/v3 (tree id, node id) pairs, else NULL (index). */
  const int64_t* tree_ids;
  const int64_t* node_ids;
} TeSrc;

static void te_src_free(TeSrc* s) {
  free(s->mode);
  free(s->miss);
  free(s->feat);
  free(s->thr);
  free(s->tchild);
  free(s->fchild);
  free(s->leaf_of);
  free(s->wbeg);
  free(s->wtarget);
  free(s->wval);
  free(s->roots);
  free(s->mbeg);
  free(s->mend);
  free(s->members);
}

static void te_name(const TeSrc* s, size_t i, char* buf, size_t cap) {
  if (s->tree_ids)
    snprintf(buf, cap, "tree %lld node %lld", (long long)s->tree_ids[i], (long long)s->node_ids[i]);
  else
    snprintf(buf, cap, "nodes[%zu]", i);
}

/* calloc of n elements of size sz, checked (at least one element). */
static void* te_calloc(size_t n, size_t sz) {
  size_t b;
  if (!cpu_mul_size(n ? n : 1, sz, &b)) return NULL;
  return calloc(1, b);
}

/* Flattens s into m (depth first from each root, true child first). */
static OnyxStatus* te_build(const OnyxNode* node, const TeSrc* s, size_t n_targets, int agg,
                            TeModel* m) {
  memset(m, 0, sizeof *m);
  m->agg = agg;
  m->n_targets = n_targets;
  m->n_trees = s->n_roots;
  m->n_leaves = s->n_leaves;
  m->max_feat = -1;
  m->single = n_targets == 1;
  if (s->n > TE_MAX_NODES || s->n_leaves > TE_MAX_NODES)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "the ensemble has %zu nodes; at most %d are supported", s->n, TE_MAX_NODES);
  char name[64];
  uint8_t* color = te_calloc(s->n, 1);
  uint8_t* stage = te_calloc(s->n, 1);
  uint32_t* newidx = te_calloc(s->n, sizeof *newidx);
  uint32_t* order = te_calloc(s->n, sizeof *order); /* source node of each new index */
  uint32_t* stack = te_calloc(s->n, sizeof *stack);
  m->roots = te_calloc(s->n_roots, sizeof *m->roots);
  OnyxStatus* st = NULL;
  if (!color || !stage || !newidx || !order || !stack || !m->roots)
    st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t n_out = 0;
  /* 0 white, 1 on the current path, 2 done. */
  for (size_t t = 0; !st && t < s->n_roots; t++) {
    uint32_t r = s->roots[t];
    if (color[r] == 0) {
      color[r] = 1;
      newidx[r] = (uint32_t)n_out;
      order[n_out++] = r;
      size_t sp = 0;
      stack[sp++] = r;
      while (sp && !st) {
        uint32_t i = stack[sp - 1];
        if (s->mode[i] == TM_LEAF || stage[i] == 2) {
          color[i] = 2;
          sp--;
          continue;
        }
        uint32_t c = stage[i] == 0 ? s->tchild[i] : s->fchild[i];
        stage[i]++;
        if (color[c] == 1) {
          te_name(s, i, name, sizeof name);
          st = cpu_error(node, ONYX_INVALID_MODEL,
                         "the %s child of %s leads back to it: the tree has a cycle",
                         stage[i] == 1 ? "true" : "false", name);
        } else if (color[c] == 0) {
          color[c] = 1;
          newidx[c] = (uint32_t)n_out;
          order[n_out++] = c;
          stack[sp++] = c; /* each node enters the stack once: sp <= s->n */
        }
      }
    }
    m->roots[t] = newidx[r];
  }
  m->n_nodes = n_out;
  if (!st) {
    m->nodes = te_calloc(n_out, sizeof *m->nodes);
    m->nodes_d = te_calloc(n_out, sizeof *m->nodes_d);
    if (!m->nodes || !m->nodes_d) st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  /* Uniform mode: every reachable branch node alike, none with missing-true. */
  int uniform = -2;
  bool members = false;
  for (size_t k = 0; !st && k < n_out; k++) {
    uint32_t i = order[k];
    if (s->mode[i] == TM_LEAF) continue;
    if (s->mode[i] == TM_MEMBER) members = true;
    if (s->miss[i] || s->mode[i] == TM_MEMBER || (uniform != -2 && uniform != s->mode[i]))
      uniform = -1;
    else if (uniform == -2)
      uniform = s->mode[i];
  }
  m->uniform = uniform == -2 ? TM_LEQ : uniform;
  if (!st && m->uniform < 0) {
    m->flags = te_calloc(n_out, 1);
    if (!m->flags) st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  if (!st && members) {
    m->mbeg = te_calloc(n_out, sizeof *m->mbeg);
    m->mend = te_calloc(n_out, sizeof *m->mend);
    m->members = te_calloc(s->n_members, sizeof *m->members);
    if (!m->mbeg || !m->mend || !m->members)
      st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    else if (s->n_members)
      memcpy(m->members, s->members, s->n_members * sizeof *m->members);
  }
  for (size_t k = 0; !st && k < n_out; k++) {
    uint32_t i = order[k];
    TeNode* n = &m->nodes[k];
    TeNodeD* d = &m->nodes_d[k];
    if (s->mode[i] == TM_LEAF) {
      n->feat = d->feat = 0;
      n->u.leaf = d->leaf = s->leaf_of[i];
      n->child[0] = n->child[1] = d->child[0] = d->child[1] = (uint32_t)k;
      if (m->flags) m->flags[k] = TM_LEAF;
      continue;
    }
    if (s->feat[i] < 0 || s->feat[i] > INT32_MAX) {
      te_name(s, i, name, sizeof name);
      st = cpu_error(node, ONYX_INVALID_MODEL, "%s reads feature %lld (nodes_featureids)", name,
                     (long long)s->feat[i]);
      break;
    }
    if (s->feat[i] > m->max_feat) {
      m->max_feat = s->feat[i];
      te_name(s, i, m->max_feat_node, sizeof m->max_feat_node);
    }
    n->feat = d->feat = (int32_t)s->feat[i];
    n->u.thr = (float)s->thr[i];
    d->thr = s->thr[i];
    n->child[1] = d->child[1] = newidx[s->tchild[i]];
    n->child[0] = d->child[0] = newidx[s->fchild[i]];
    if (m->flags) m->flags[k] = (uint8_t)(s->mode[i] | (s->miss[i] ? 8 : 0));
    if (m->mbeg && s->mbeg) {
      m->mbeg[k] = s->mbeg[i];
      m->mend[k] = s->mend[i];
    }
  }
  /* Leaf weights; with one target each leaf's weights summed into one value. */
  if (!st) {
    size_t nw = s->wbeg[s->n_leaves];
    m->wbeg = te_calloc(s->n_leaves + 1, sizeof *m->wbeg);
    m->wtarget = te_calloc(nw, sizeof *m->wtarget);
    m->wf = te_calloc(nw, sizeof *m->wf);
    m->wd = te_calloc(nw, sizeof *m->wd);
    m->lvf = te_calloc(s->n_leaves, sizeof *m->lvf);
    m->lvd = te_calloc(s->n_leaves, sizeof *m->lvd);
    if (!m->wbeg || !m->wtarget || !m->wf || !m->wd || !m->lvf || !m->lvd)
      st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    for (size_t l = 0; !st && l <= s->n_leaves; l++)
      m->wbeg[l] = s->wbeg[l];
    for (size_t w = 0; !st && w < nw; w++) {
      m->wtarget[w] = s->wtarget[w];
      m->wf[w] = (float)s->wval[w];
      m->wd[w] = s->wval[w];
    }
    for (size_t l = 0; !st && l < s->n_leaves; l++) {
      float f = 0;
      double dd = 0;
      for (uint32_t w = s->wbeg[l]; w < s->wbeg[l + 1]; w++) {
        f += (float)s->wval[w];
        dd += s->wval[w];
      }
      m->lvf[l] = f;
      m->lvd[l] = dd;
    }
  }
  free(color);
  free(stage);
  free(newidx);
  free(order);
  free(stack);
  if (st) {
    te_model_free(m);
    memset(m, 0, sizeof *m);
  }
  return st;
}

/* --- Evaluation -------------------------------------------------------------------------- */

static inline bool te_test_d(uint8_t flags, double x, double t, const TeModel* m, size_t k) {
  if ((flags & 8) && isnan(x)) return true;
  switch (flags & 7) {
  case TM_LEQ:
    return x <= t;
  case TM_LT:
    return x < t;
  case TM_GTE:
    return x >= t;
  case TM_GT:
    return x > t;
  case TM_EQ:
    return x == t;
  case TM_NEQ:
    return x != t;
  default:
    for (uint32_t j = m->mbeg[k]; j < m->mend[k]; j++)
      if (m->members[j] == x) return true;
    return false;
  }
}

#define TE_AGG(T, acc, has, v, agg)                                                                \
  do {                                                                                             \
    T v_ = (v);                                                                                    \
    if ((agg) == TA_MIN)                                                                           \
      *(acc) = (!*(has) || v_ < *(acc)) ? v_ : *(acc);                                             \
    else if ((agg) == TA_MAX)                                                                      \
      *(acc) = (!*(has) || v_ > *(acc)) ? v_ : *(acc);                                             \
    else                                                                                           \
      *(acc) += v_;                                                                                \
    *(has) = 1;                                                                                    \
  } while (0)

/* One evaluator per threshold type: SUF f (TeNode, float) or d (TeNodeD,
 * double). X: nr rows of ld values; acc/has: nr rows of n_targets, zeroed. */
#define TE_DEFINE_EVAL(SUF, T, NT, NODES, THR, LEAF)                                               \
  static inline void te_add_##SUF(const TeModel* m, uint32_t leaf, T* acc, uint8_t* has) {         \
    if (m->single) {                                                                               \
      TE_AGG(T, acc, has, m->lv##SUF[leaf], m->agg);                                               \
      return;                                                                                      \
    }                                                                                              \
    for (uint32_t w = m->wbeg[leaf]; w < m->wbeg[leaf + 1]; w++)                                   \
      TE_AGG(T, acc + m->wtarget[w], has + m->wtarget[w], m->w##SUF[w], m->agg);                   \
  }                                                                                                \
  static void te_eval_##SUF(const TeModel* m, const T* X, size_t ld, size_t nr, T* acc,            \
                            uint8_t* has) {                                                        \
    const NT* b = m->NODES;                                                                        \
    const size_t nt = m->n_targets;                                                                \
    for (size_t t = 0; t < m->n_trees; t++) {                                                      \
      const uint32_t root = m->roots[t];                                                           \
      size_t r = 0;                                                                                \
      if (!m->flags && ld > 0) {                                                                   \
        switch (m->uniform) {                                                                      \
        case TM_LEQ:                                                                               \
          TE_WALK(SUF, T, NT, <=, THR, LEAF);                                                      \
          break;                                                                                   \
        case TM_LT:                                                                                \
          TE_WALK(SUF, T, NT, <, THR, LEAF);                                                       \
          break;                                                                                   \
        case TM_GTE:                                                                               \
          TE_WALK(SUF, T, NT, >=, THR, LEAF);                                                      \
          break;                                                                                   \
        case TM_GT:                                                                                \
          TE_WALK(SUF, T, NT, >, THR, LEAF);                                                       \
          break;                                                                                   \
        case TM_EQ:                                                                                \
          TE_WALK(SUF, T, NT, ==, THR, LEAF);                                                      \
          break;                                                                                   \
        default:                                                                                   \
          TE_WALK(SUF, T, NT, !=, THR, LEAF);                                                      \
          break;                                                                                   \
        }                                                                                          \
      }                                                                                            \
      /* The rows left, one at a time, any modes. */                                               \
      for (; r < nr; r++) {                                                                        \
        const T* x = X + r * ld;                                                                   \
        uint32_t i = root;                                                                         \
        while (b[i].child[0] != i) {                                                               \
          uint8_t f = m->flags ? m->flags[i] : (uint8_t)m->uniform;                                \
          i = b[i].child[te_test_d(f, (double)x[b[i].feat], (double)b[i].THR, m, i)];              \
        }                                                                                          \
        te_add_##SUF(m, b[i].LEAF, acc + r * nt, has + r * nt);                                    \
      }                                                                                            \
    }                                                                                              \
  }

/* TE_LANES rows at once through one tree with one comparison: every step
 * moves each row to child[x OP thr] (no branch to mispredict); a leaf's
 * children are itself, so the loop runs until all rows stand on leaves.
 * The rows left over walk alone the same way. */
#define TE_WALK(SUF, T, NT, OP, THR, LEAF)                                                         \
  for (; r + TE_LANES <= nr; r += TE_LANES) {                                                      \
    const T* xr = X + r * ld;                                                                      \
    uint32_t ix[TE_LANES];                                                                         \
    for (int j = 0; j < TE_LANES; j++)                                                             \
      ix[j] = root;                                                                                \
    for (;;) {                                                                                     \
      unsigned done = 1;                                                                           \
      for (int j = 0; j < TE_LANES; j++) {                                                         \
        const NT* n = b + ix[j];                                                                   \
        done &= n->child[0] == ix[j];                                                              \
        ix[j] = n->child[xr[(size_t)j * ld + (size_t)n->feat] OP n->THR];                          \
      }                                                                                            \
      if (done) break;                                                                             \
    }                                                                                              \
    for (int j = 0; j < TE_LANES; j++)                                                             \
      te_add_##SUF(m, b[ix[j]].LEAF, acc + (r + (size_t)j) * nt, has + (r + (size_t)j) * nt);      \
  }                                                                                                \
  for (; r < nr; r++) {                                                                            \
    const T* x = X + r * ld;                                                                       \
    uint32_t i = root;                                                                             \
    while (b[i].child[0] != i)                                                                     \
      i = b[i].child[x[b[i].feat] OP b[i].THR];                                                    \
    te_add_##SUF(m, b[i].LEAF, acc + r * nt, has + r * nt);                                        \
  }

TE_DEFINE_EVAL(f, float, TeNode, nodes, u.thr, u.leaf)
TE_DEFINE_EVAL(d, double, TeNodeD, nodes_d, thr, leaf)

/* --- ONNX Runtime's post-transform arithmetic (float) --------------------------------------- */

static float te_logistic(float v) {
  float e = 1.0f / (1.0f + expf(-fabsf(v)));
  return v < 0 ? 1.0f - e : e;
}

/* Winitzki's inverse-erf approximation, as ONNX Runtime computes PROBIT. */
static float te_erfinv(float x) {
  float sgn = x < 0 ? -1.0f : 1.0f;
  x = (1 - x) * (1 + x);
  float lg = logf(x);
  float v = 2 / (3.14159265358979323846f * 0.147f) + 0.5f * lg;
  float v2 = 1 / 0.147f * lg;
  float v3 = -v + sqrtf(v * v - v2);
  return sgn * sqrtf(v3);
}

static float te_probit(float v) {
  return 1.41421356237309504880f * te_erfinv(2 * v - 1);
}

/* Post transform of n >= 2 scores in place (float). */
static void te_transform(int post, float* z, size_t n) {
  if (post == TP_PROBIT) {
    for (size_t k = 0; k < n; k++)
      z[k] = te_probit(z[k]);
  } else if (post == TP_LOGISTIC) {
    for (size_t k = 0; k < n; k++)
      z[k] = te_logistic(z[k]);
  } else if (post == TP_SOFTMAX || post == TP_SOFTMAX_ZERO) {
    float mx = -3.402823466e+38f;
    for (size_t k = 0; k < n; k++)
      if (z[k] > mx) mx = z[k];
    float sum = 0;
    if (post == TP_SOFTMAX) {
      for (size_t k = 0; k < n; k++) {
        z[k] = expf(z[k] - mx);
        sum += z[k];
      }
    } else {
      float e = expf(-mx);
      for (size_t k = 0; k < n; k++) {
        if (z[k] > 0.0000001f || z[k] < -0.0000001f) {
          z[k] = expf(z[k] - mx);
          sum += z[k];
        } else {
          z[k] *= e;
        }
      }
    }
    for (size_t k = 0; k < n; k++)
      z[k] /= sum;
  }
}

/* --- Kernel state ---------------------------------------------------------------------------- */

typedef enum { TE_CLASSIFIER, TE_REGRESSOR, TE_V5 } TeKind;

typedef struct TeState {
  TeKind kind;
  TeModel m;
  int post;
  size_t n_out; /* classes or targets */
  double* base; /* n_base values */
  size_t n_base;
  /* Classifier. */
  const int64_t* labels_i; /* classlabels_int64s, or NULL */
  const char* const* labels_s;
  const size_t* labels_len; /* NULL: NUL-terminated */
  bool binary_case, all_positive;
} TeState;

static void te_release(void* state) {
  TeState* s = state;
  if (!s) return;
  te_model_free(&s->m);
  free(s->base);
  free(s);
}

/* A float list attribute or its double tensor twin (name_as_tensor) as
 * doubles; *n = 0 when neither is there. */
static OnyxStatus* te_attr_reals(const OnyxNode* node, const char* name, double** out, size_t* n,
                                 bool* present) {
  const OnyxHostApi* H = cpu_host;
  char tname[96];
  snprintf(tname, sizeof tname, "%s_as_tensor", name);
  size_t nf = 0;
  const float* f = H->node_attr_floats(node, name, &nf);
  const OnyxTensor* t = H->node_attr_tensor(node, tname);
  *out = NULL;
  *n = 0;
  if (present) *present = f != NULL || t != NULL;
  if (f && nf && t && H->tensor_elem_count(t))
    return cpu_error(node, ONYX_INVALID_MODEL, "both '%s' and '%s' are given", name, tname);
  if (t && H->tensor_elem_count(t)) {
    size_t c = H->tensor_elem_count(t);
    double* d = te_calloc(c, sizeof *d);
    if (!d) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < c; i++) {
      CpuNum v;
      if (!cpu_num_load(H->tensor_elem_type(t), H->tensor_data(t), i, &v)) {
        free(d);
        return cpu_error(node, ONYX_INVALID_MODEL, "attribute '%s' is not numeric", tname);
      }
      d[i] = cpu_num_as_double(v);
    }
    *out = d;
    *n = c;
    return NULL;
  }
  double* d = te_calloc(nf, sizeof *d);
  if (!d) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < nf; i++)
    d[i] = f[i];
  *out = d;
  *n = nf;
  return NULL;
}

static int te_mode_of(const char* s) {
  static const char* const names[] = {"BRANCH_LEQ", "BRANCH_LT",  "BRANCH_GTE", "BRANCH_GT",
                                      "BRANCH_EQ",  "BRANCH_NEQ", NULL,         "LEAF"};
  for (int i = 0; i < 8; i++)
    if (names[i] && !strcmp(s, names[i])) return i;
  return -1;
}

static int te_post_of(const char* s) {
  if (!strcmp(s, "NONE")) return TP_NONE;
  if (!strcmp(s, "SOFTMAX")) return TP_SOFTMAX;
  if (!strcmp(s, "SOFTMAX_ZERO")) return TP_SOFTMAX_ZERO;
  if (!strcmp(s, "LOGISTIC")) return TP_LOGISTIC;
  if (!strcmp(s, "PROBIT")) return TP_PROBIT;
  return -1;
}

/* (tree id, node id) -> source index, sorted for binary search. */
typedef struct TeKey {
  int64_t tree, id;
  uint32_t idx;
} TeKey;

static int te_key_cmp(const void* a, const void* b) {
  const TeKey* x = a;
  const TeKey* y = b;
  if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return 0;
}

static int te_u32_cmp(const void* a, const void* b) {
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x < y ? -1 : x > y;
}

static const TeKey* te_find(const TeKey* keys, size_t n, int64_t tree, int64_t id) {
  TeKey k = {tree, id, 0};
  return bsearch(&k, keys, n, sizeof k, te_key_cmp);
}

/* TreeEnsembleClassifier / TreeEnsembleRegressor (1, 3): the attributes
 * into a TeSrc. prefix: "class" or "target". */
static OnyxStatus* te_src_v3(const OnyxNode* node, const char* prefix, size_t n_out, TeSrc* s,
                             bool* all_positive, size_t* n_weighted_classes) {
  const OnyxHostApi* H = cpu_host;
  memset(s, 0, sizeof *s);
  size_t n, c[5];
  const int64_t* tree = H->node_attr_ints(node, "nodes_treeids", &n);
  const int64_t* id = H->node_attr_ints(node, "nodes_nodeids", &c[0]);
  const int64_t* feat = H->node_attr_ints(node, "nodes_featureids", &c[1]);
  const int64_t* tid = H->node_attr_ints(node, "nodes_truenodeids", &c[2]);
  const int64_t* fid = H->node_attr_ints(node, "nodes_falsenodeids", &c[3]);
  const char* const* modes = H->node_attr_strings(node, "nodes_modes", &c[4]);
  static const char* const what[] = {"nodes_nodeids", "nodes_featureids", "nodes_truenodeids",
                                     "nodes_falsenodeids", "nodes_modes"};
  for (int k = 0; k < 5; k++)
    if (c[k] != n)
      return cpu_error(node, ONYX_INVALID_MODEL, "'%s' has %zu values; nodes_treeids has %zu",
                       what[k], c[k], n);
  if (n == 0) return cpu_error(node, ONYX_INVALID_MODEL, "the ensemble has no nodes");
  if (n > TE_MAX_NODES)
    return cpu_error(node, ONYX_INVALID_MODEL, "%zu nodes; at most %d are supported", n,
                     TE_MAX_NODES);
  size_t nmiss = 0;
  const int64_t* miss = H->node_attr_ints(node, "nodes_missing_value_tracks_true", &nmiss);
  s->tree_ids = tree;
  s->node_ids = id;
  s->n = n;
  s->mode = te_calloc(n, 1);
  s->miss = te_calloc(n, 1);
  s->feat = te_calloc(n, sizeof *s->feat);
  s->tchild = te_calloc(n, sizeof *s->tchild);
  s->fchild = te_calloc(n, sizeof *s->fchild);
  s->leaf_of = te_calloc(n, sizeof *s->leaf_of);
  s->roots = te_calloc(n, sizeof *s->roots);
  TeKey* keys = te_calloc(n, sizeof *keys);
  OnyxStatus* st = NULL;
  if (!s->mode || !s->miss || !s->feat || !s->tchild || !s->fchild || !s->leaf_of || !s->roots ||
      !keys)
    st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t nthr = 0;
  if (!st) st = te_attr_reals(node, "nodes_values", &s->thr, &nthr, NULL);
  if (!st && nthr != n)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "nodes_values (or nodes_values_as_tensor) has %zu values; want %zu", nthr, n);
  char name[64];
  for (size_t i = 0; !st && i < n; i++) {
    int md = te_mode_of(modes[i] ? modes[i] : "");
    if (md < 0) {
      te_name(s, i, name, sizeof name);
      st = cpu_error(node, ONYX_INVALID_MODEL, "nodes_modes[%zu] ('%s', %s) is not a known mode", i,
                     modes[i] ? modes[i] : "", name);
      break;
    }
    s->mode[i] = (uint8_t)md;
    s->miss[i] = i < nmiss && miss[i] == 1;
    s->feat[i] = feat[i];
    keys[i] = (TeKey){tree[i], id[i], (uint32_t)i};
  }
  if (!st) qsort(keys, n, sizeof *keys, te_key_cmp);
  for (size_t i = 1; !st && i < n; i++)
    if (keys[i].tree == keys[i - 1].tree && keys[i].id == keys[i - 1].id)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "node id %lld appears twice in tree %lld (nodes_nodeids[%u], [%u])",
                     (long long)keys[i].id, (long long)keys[i].tree, keys[i - 1].idx, keys[i].idx);
  /* Children within the node's tree; leaves numbered in order. */
  size_t n_leaves = 0;
  for (size_t i = 0; !st && i < n; i++) {
    if (s->mode[i] == TM_LEAF) {
      s->leaf_of[i] = (uint32_t)n_leaves++;
      continue;
    }
    const TeKey* kt = te_find(keys, n, tree[i], tid[i]);
    const TeKey* kf = te_find(keys, n, tree[i], fid[i]);
    if (!kt || !kf) {
      te_name(s, i, name, sizeof name);
      st = cpu_error(node, ONYX_INVALID_MODEL, "%s[%zu] = %lld (%s): tree %lld has no such node",
                     kt ? "nodes_falsenodeids" : "nodes_truenodeids", i,
                     (long long)(kt ? fid[i] : tid[i]), name, (long long)tree[i]);
      break;
    }
    s->tchild[i] = kt->idx;
    s->fchild[i] = kf->idx;
  }
  /* Trees in order of first appearance, each rooted at its first listed
   * node: the smallest index of its group in the sorted keys. */
  for (size_t i = 0; !st && i < n;) {
    uint32_t first = keys[i].idx;
    size_t j = i + 1;
    for (; j < n && keys[j].tree == keys[i].tree; j++)
      if (keys[j].idx < first) first = keys[j].idx;
    s->roots[s->n_roots++] = first;
    i = j;
  }
  if (!st) qsort(s->roots, s->n_roots, sizeof *s->roots, te_u32_cmp);
  /* Weights. */
  char an[4][48];
  snprintf(an[0], sizeof an[0], "%s_ids", prefix);
  snprintf(an[1], sizeof an[1], "%s_nodeids", prefix);
  snprintf(an[2], sizeof an[2], "%s_treeids", prefix);
  snprintf(an[3], sizeof an[3], "%s_weights", prefix);
  size_t m = 0, m1 = 0, m2 = 0, mw = 0;
  const int64_t* wid = H->node_attr_ints(node, an[0], &m);
  const int64_t* wnode = H->node_attr_ints(node, an[1], &m1);
  const int64_t* wtree = H->node_attr_ints(node, an[2], &m2);
  double* wv = NULL;
  if (!st) st = te_attr_reals(node, an[3], &wv, &mw, NULL);
  if (!st && (m1 != m || m2 != m || mw != m))
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "%s, %s, %s and %s (or its _as_tensor) differ in length (%zu, %zu, %zu, %zu)",
                   an[0], an[1], an[2], an[3], m, m1, m2, mw);
  s->n_leaves = n_leaves;
  s->wbeg = te_calloc(n_leaves + 1, sizeof *s->wbeg);
  uint32_t* wleaf = te_calloc(m, sizeof *wleaf);
  uint8_t* seen = te_calloc(n_out, 1);
  if (!st && (!s->wbeg || !wleaf || !seen))
    st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  if (!st && m > TE_MAX_NODES)
    st = cpu_error(node, ONYX_INVALID_MODEL, "%zu weights; at most %d are supported", m,
                   TE_MAX_NODES);
  *all_positive = true;
  *n_weighted_classes = 0;
  for (size_t j = 0; !st && j < m; j++) {
    if (wid[j] < 0 || (uint64_t)wid[j] >= n_out) {
      st = cpu_error(node, ONYX_INVALID_MODEL, "%s[%zu] = %lld is not in [0, %zu)", an[0], j,
                     (long long)wid[j], n_out);
      break;
    }
    const TeKey* k = te_find(keys, n, wtree[j], wnode[j]);
    if (!k) {
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "%s[%zu] = %lld, %s[%zu] = %lld: tree %lld has no such node", an[1], j,
                     (long long)wnode[j], an[2], j, (long long)wtree[j], (long long)wtree[j]);
      break;
    }
    if (!seen[wid[j]]) {
      seen[wid[j]] = 1;
      (*n_weighted_classes)++;
    }
    if (wv[j] < 0) *all_positive = false;
    /* Weights on a branch node are ignored, as ONNX Runtime does. */
    wleaf[j] = s->mode[k->idx] == TM_LEAF ? s->leaf_of[k->idx] : UINT32_MAX;
    if (wleaf[j] != UINT32_MAX) s->wbeg[wleaf[j] + 1]++;
  }
  for (size_t l = 0; !st && l < n_leaves; l++)
    s->wbeg[l + 1] += s->wbeg[l];
  if (!st) {
    size_t nw = s->wbeg[n_leaves];
    s->wtarget = te_calloc(nw, sizeof *s->wtarget);
    s->wval = te_calloc(nw, sizeof *s->wval);
    uint32_t* fill = te_calloc(n_leaves, sizeof *fill);
    if (!s->wtarget || !s->wval || !fill) {
      st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    } else {
      for (size_t j = 0; j < m; j++) {
        if (wleaf[j] == UINT32_MAX) continue;
        uint32_t p = s->wbeg[wleaf[j]] + fill[wleaf[j]]++;
        s->wtarget[p] = (uint32_t)wid[j];
        s->wval[p] = wv[j];
      }
    }
    free(fill);
  }
  free(wv);
  free(wleaf);
  free(seen);
  free(keys);
  return st;
}

/* base_values (or base_values_as_tensor): 0, 1 or n_out values (classifier
 * with 2 classes: 0, 1 or 2). */
static OnyxStatus* te_base(const OnyxNode* node, TeState* s) {
  OnyxStatus* st = te_attr_reals(node, "base_values", &s->base, &s->n_base, NULL);
  if (!st && s->n_base > 1 && s->n_base != s->n_out)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "base_values has %zu values; want 0, 1 or one per %s (%zu)", s->n_base,
                   s->kind == TE_CLASSIFIER ? "class" : "target", s->n_out);
  return st;
}

static OnyxStatus* te_post(const OnyxNode* node, TeState* s) {
  const char* p = cpu_host->node_attr_string(node, "post_transform", NULL);
  s->post = te_post_of(p ? p : "NONE");
  if (s->post < 0)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "post_transform '%s' is not NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT",
                     p);
  return NULL;
}

static OnyxStatus* te_create_v3(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  const OnyxHostApi* H = cpu_host;
  TeState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->kind = user ? TE_CLASSIFIER : TE_REGRESSOR;
  OnyxStatus* st = NULL;
  int agg = TA_SUM;
  if (s->kind == TE_CLASSIFIER) {
    size_t ni = 0, ns = 0;
    s->labels_i = H->node_attr_ints(node, "classlabels_int64s", &ni);
    s->labels_s = H->node_attr_strings(node, "classlabels_strings", &ns);
    if (H->struct_size >=
            offsetof(OnyxHostApi, node_attr_strings_lens) + sizeof H->node_attr_strings_lens &&
        H->node_attr_strings_lens && s->labels_s) {
      size_t nl = 0;
      s->labels_len = H->node_attr_strings_lens(node, "classlabels_strings", &nl);
      if (nl != ns) s->labels_len = NULL;
    }
    if ((ni > 0) == (ns > 0))
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "exactly one of classlabels_int64s and classlabels_strings must be given");
    else if (ni + ns < 2)
      st = cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "a classifier with %zu class label(s): want 2 or more", ni + ns);
    if (ni == 0) s->labels_i = NULL;
    s->n_out = ni + ns;
  } else {
    int64_t nt = H->node_attr_int(node, "n_targets", 1);
    if (nt < 1 || nt > TE_MAX_NODES)
      st = cpu_error(node, ONYX_INVALID_MODEL, "n_targets = %lld is not in [1, %d]", (long long)nt,
                     TE_MAX_NODES);
    s->n_out = (size_t)nt;
    const char* a = H->node_attr_string(node, "aggregate_function", NULL);
    a = a ? a : "SUM";
    if (!strcmp(a, "AVERAGE"))
      agg = TA_AVERAGE;
    else if (!strcmp(a, "SUM"))
      agg = TA_SUM;
    else if (!strcmp(a, "MIN"))
      agg = TA_MIN;
    else if (!strcmp(a, "MAX"))
      agg = TA_MAX;
    else if (!st)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "aggregate_function '%s' is not AVERAGE, SUM, MIN or MAX", a);
  }
  if (!st) st = te_post(node, s);
  if (!st) st = te_base(node, s);
  TeSrc src;
  memset(&src, 0, sizeof src);
  size_t n_weighted = 0;
  if (!st)
    st = te_src_v3(node, s->kind == TE_CLASSIFIER ? "class" : "target", s->n_out, &src,
                   &s->all_positive, &n_weighted);
  if (!st) st = te_build(node, &src, s->n_out, agg, &s->m);
  te_src_free(&src);
  s->binary_case = s->kind == TE_CLASSIFIER && s->n_out == 2 && n_weighted == 1;
  if (st) {
    te_release(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* TreeEnsemble (5). */
static OnyxStatus* te_doubles(const OnyxNode* node, const char* name, size_t want, bool required,
                              double** out, size_t* count) {
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor* t = H->node_attr_tensor(node, name);
  *out = NULL;
  if (count) *count = 0;
  if (!t)
    return required ? cpu_error(node, ONYX_INVALID_MODEL, "attribute '%s' is missing", name) : NULL;
  size_t n = H->tensor_elem_count(t);
  if (want != SIZE_MAX && n != want)
    return cpu_error(node, ONYX_INVALID_MODEL, "attribute '%s' has %zu values; want %zu", name, n,
                     want);
  double* d = te_calloc(n, sizeof *d);
  if (!d) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    if (!cpu_num_load(H->tensor_elem_type(t), H->tensor_data(t), i, &v)) {
      free(d);
      return cpu_error(node, ONYX_INVALID_MODEL, "attribute '%s' is not numeric", name);
    }
    d[i] = cpu_num_as_double(v);
  }
  *out = d;
  if (count) *count = n;
  return NULL;
}

static OnyxStatus* te_create_v5(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  TeState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->kind = TE_V5;
  TeSrc src;
  memset(&src, 0, sizeof src);
  size_t n[5], n_leaves = 0, n_trees = 0, n_missing = 0;
  const int64_t* feat = H->node_attr_ints(node, "nodes_featureids", &n[0]);
  const int64_t* tnode = H->node_attr_ints(node, "nodes_truenodeids", &n[1]);
  const int64_t* fnode = H->node_attr_ints(node, "nodes_falsenodeids", &n[2]);
  const int64_t* tleaf = H->node_attr_ints(node, "nodes_trueleafs", &n[3]);
  const int64_t* fleaf = H->node_attr_ints(node, "nodes_falseleafs", &n[4]);
  const int64_t* leaf_target = H->node_attr_ints(node, "leaf_targetids", &n_leaves);
  const int64_t* roots = H->node_attr_ints(node, "tree_roots", &n_trees);
  const int64_t* miss = H->node_attr_ints(node, "nodes_missing_value_tracks_true", &n_missing);
  int64_t n_targets = H->node_attr_int(node, "n_targets", 0);
  int64_t agg = H->node_attr_int(node, "aggregate_function", 1);
  s->post = (int)H->node_attr_int(node, "post_transform", 0);
  size_t nn = n[0];
  OnyxStatus* st = NULL;
  static const char* const what[] = {"nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids",
                                     "nodes_trueleafs", "nodes_falseleafs"};
  for (int k = 1; k < 5 && !st; k++)
    if (n[k] != nn)
      st = cpu_error(node, ONYX_INVALID_MODEL, "'%s' has %zu values; nodes_featureids has %zu",
                     what[k], n[k], nn);
  if (!st && (nn > TE_MAX_NODES || n_leaves > TE_MAX_NODES || n_trees > TE_MAX_NODES))
    st = cpu_error(node, ONYX_INVALID_MODEL, "the ensemble is too large (%zu nodes, %zu leaves)",
                   nn, n_leaves);
  if (!st && (n_targets < 1 || n_targets > TE_MAX_NODES))
    st = cpu_error(node, ONYX_INVALID_MODEL, "n_targets = %lld is not in [1, %d]",
                   (long long)n_targets, TE_MAX_NODES);
  if (!st && (s->post < TP_NONE || s->post > TP_PROBIT))
    st = cpu_error(node, ONYX_INVALID_MODEL, "post_transform %d is not 0..4", s->post);
  if (!st && s->post == TP_PROBIT)
    st = cpu_error(node, ONYX_NOT_IMPLEMENTED,
                   "post_transform PROBIT is not supported (NONE, SOFTMAX, SOFTMAX_ZERO, LOGISTIC "
                   "are)");
  if (!st && (agg < TA_AVERAGE || agg > TA_MAX))
    st = cpu_error(node, ONYX_INVALID_MODEL, "aggregate_function %lld is not 0..3", (long long)agg);
  double *splits = NULL, *leaf_w = NULL, *modes = NULL;
  if (!st) st = te_doubles(node, "nodes_splits", nn, true, &splits, NULL);
  if (!st) st = te_doubles(node, "leaf_weights", n_leaves, true, &leaf_w, NULL);
  if (!st) st = te_doubles(node, "nodes_modes", nn, false, &modes, NULL);
  if (!st)
    st = te_doubles(node, "membership_values", SIZE_MAX, false, &src.members, &src.n_members);
  /* Source nodes: the nn branch nodes, then the leaves. */
  size_t total = nn + n_leaves;
  if (!st) {
    src.n = total;
    src.n_leaves = n_leaves;
    src.mode = te_calloc(total, 1);
    src.miss = te_calloc(total, 1);
    src.feat = te_calloc(total, sizeof *src.feat);
    src.thr = te_calloc(total, sizeof *src.thr);
    src.tchild = te_calloc(total, sizeof *src.tchild);
    src.fchild = te_calloc(total, sizeof *src.fchild);
    src.leaf_of = te_calloc(total, sizeof *src.leaf_of);
    src.mbeg = te_calloc(total, sizeof *src.mbeg);
    src.mend = te_calloc(total, sizeof *src.mend);
    src.wbeg = te_calloc(n_leaves + 1, sizeof *src.wbeg);
    src.wtarget = te_calloc(n_leaves, sizeof *src.wtarget);
    src.wval = te_calloc(n_leaves, sizeof *src.wval);
    src.roots = te_calloc(n_trees, sizeof *src.roots);
    if (!src.mode || !src.miss || !src.feat || !src.thr || !src.tchild || !src.fchild ||
        !src.leaf_of || !src.mbeg || !src.mend || !src.wbeg || !src.wtarget || !src.wval ||
        !src.roots)
      st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  size_t pos = 0;
  for (size_t i = 0; !st && i < nn; i++) {
    double md = modes ? modes[i] : 0;
    if (!(md >= 0 && md <= TM_MEMBER) || md != (double)(int)md) {
      st = cpu_error(node, ONYX_INVALID_MODEL, "nodes_modes[%zu] = %g is not 0..6", i, md);
      break;
    }
    src.mode[i] = (uint8_t)md;
    src.miss[i] = miss && i < n_missing && miss[i] != 0;
    src.feat[i] = feat[i];
    src.thr[i] = splits[i];
    int64_t tmax = tleaf[i] ? (int64_t)n_leaves : (int64_t)nn;
    int64_t fmax = fleaf[i] ? (int64_t)n_leaves : (int64_t)nn;
    if (tnode[i] < 0 || tnode[i] >= tmax || fnode[i] < 0 || fnode[i] >= fmax) {
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "nodes_truenodeids/nodes_falsenodeids of node %zu point outside the tree", i);
      break;
    }
    src.tchild[i] = (uint32_t)(tleaf[i] ? nn + (size_t)tnode[i] : (size_t)tnode[i]);
    src.fchild[i] = (uint32_t)(fleaf[i] ? nn + (size_t)fnode[i] : (size_t)fnode[i]);
    /* Member sets, in node order, separated by NaN. */
    if (src.mode[i] == TM_MEMBER) {
      src.mbeg[i] = (uint32_t)pos;
      while (pos < src.n_members && !isnan(src.members[pos]))
        pos++;
      src.mend[i] = (uint32_t)pos;
      if (pos < src.n_members) pos++;
    }
  }
  for (size_t l = 0; !st && l < n_leaves; l++) {
    if (leaf_target[l] < 0 || leaf_target[l] >= n_targets) {
      st = cpu_error(node, ONYX_INVALID_MODEL, "leaf_targetids[%zu] = %lld; n_targets is %lld", l,
                     (long long)leaf_target[l], (long long)n_targets);
      break;
    }
    src.mode[nn + l] = TM_LEAF;
    src.leaf_of[nn + l] = (uint32_t)l;
    src.wbeg[l + 1] = (uint32_t)(l + 1);
    src.wtarget[l] = (uint32_t)leaf_target[l];
    src.wval[l] = leaf_w[l];
  }
  for (size_t t = 0; !st && t < n_trees; t++) {
    if (roots[t] < 0 || (size_t)roots[t] >= nn) {
      st = cpu_error(node, ONYX_INVALID_MODEL, "tree_roots[%zu] = %lld is not a node", t,
                     (long long)roots[t]);
      break;
    }
    src.roots[t] = (uint32_t)roots[t];
  }
  src.n_roots = n_trees;
  free(splits);
  free(leaf_w);
  free(modes);
  s->n_out = (size_t)n_targets;
  if (!st) st = te_build(node, &src, s->n_out, (int)agg, &s->m);
  te_src_free(&src);
  if (st) {
    te_release(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* --- Compute --------------------------------------------------------------------------------- */

typedef struct TeRun {
  const TeState* s;
  const void* x; /* float or double rows */
  bool dbl;
  size_t rows, ld;
  float* z;          /* v1/v3 scores */
  void* y5;          /* v5 output */
  int32_t y5_type;   /* its element type */
  uint32_t* label;   /* classifier: class index per row */
  size_t block;      /* rows per block, <= TE_BLOCK */
  size_t acc_bytes;  /* block * T doubles */
  size_t task_bytes; /* te_task's buffer: accumulators, a row of scores, flags */
  CpuStop stop;
} TeRun;

/* Classifier scores of one row, ONNX Runtime's rules (see the file's
 * comment); r: score as double rounded to the accumulation type. */
static uint32_t te_finish_classifier(const TeState* s, bool dbl, double* sc, uint8_t* h, float* z) {
  const size_t C = s->n_out;
#define TE_R(v) (dbl ? (v) : (double)(float)(v))
  if (C > 2) {
    for (size_t k = 0; k < s->n_base && k < C; k++) {
      if (!h[k]) {
        h[k] = 1;
        sc[k] = TE_R(s->base[k]);
      } else {
        sc[k] = TE_R(sc[k] + TE_R(s->base[k]));
      }
    }
    size_t best = 0;
    bool any = false;
    for (size_t k = 0; k < C; k++)
      if (h[k] && (!any || sc[k] > sc[best])) {
        best = k;
        any = true;
      }
    for (size_t k = 0; k < C; k++)
      z[k] = h[k] ? (float)sc[k] : 0.0f;
    te_transform(s->post, z, C);
    return (uint32_t)best;
  }
  size_t size = 2;
  int wa = -1;
  if (s->n_base == 2) {
    if (h[1]) {
      sc[1] = TE_R(TE_R(s->base[1]) + sc[0]);
      sc[0] = -sc[1];
      h[1] = 1;
    } else {
      sc[1] = TE_R(sc[1] + TE_R(s->base[1]));
      sc[0] = TE_R(sc[0] + TE_R(s->base[0]));
    }
  } else if (s->n_base == 1) {
    sc[0] = TE_R(sc[0] + TE_R(s->base[0]));
    if (!h[1]) size = 1;
  } else {
    wa = 3;
    if (!h[1]) size = 1;
  }
#undef TE_R
  double pos;
  if (size == 2 && h[1])
    pos = sc[1];
  else
    pos = h[0] ? sc[0] : 0;
  uint32_t label;
  if (s->binary_case) {
    if (s->all_positive) {
      label = pos > 0.5 ? 1 : 0;
      wa = pos > 0.5 ? 0 : 1;
    } else {
      label = pos > 0 ? 1 : 0;
      wa = pos > 0 ? 2 : 3;
    }
  } else {
    label = pos > 0 ? 1 : 0;
  }
  float v0 = h[0] ? (float)sc[0] : 0.0f;
  if (size == 2) {
    z[0] = v0;
    z[1] = h[1] ? (float)sc[1] : 0.0f;
    te_transform(s->post, z, 2);
  } else if (s->post == TP_PROBIT) {
    z[0] = te_probit(v0);
    z[1] = 0;
  } else if (wa == 0 || wa == 1) {
    z[0] = 1.0f - v0;
    z[1] = v0;
  } else if (wa == 2 || wa == 3) {
    if (s->post == TP_LOGISTIC) {
      z[0] = te_logistic(-v0);
      z[1] = te_logistic(v0);
    } else {
      z[0] = -v0;
      z[1] = v0;
    }
  } else {
    z[0] = v0;
    z[1] = 0;
  }
  return label;
}

static void te_finish_regressor(const TeState* s, bool dbl, double* sc, uint8_t* h, float* z) {
  const size_t T = s->n_out;
  const int agg = s->m.agg;
  const double nt = (double)s->m.n_trees;
#define TE_R(v) (dbl ? (v) : (double)(float)(v))
  if (T == 1) {
    double origin = s->n_base == 1 ? TE_R(s->base[0]) : 0;
    double v = sc[0];
    if (agg == TA_AVERAGE)
      v = TE_R(TE_R(v / TE_R(nt)) + origin);
    else if (agg == TA_SUM || h[0])
      v = TE_R(v + origin);
    else
      v = origin;
    z[0] = s->post == TP_PROBIT ? te_probit((float)v) : (float)v;
    return;
  }
  bool use_base = s->n_base == T;
  for (size_t k = 0; k < T; k++) {
    double b = use_base ? TE_R(s->base[k]) : 0;
    double v = sc[k];
    if (agg == TA_AVERAGE)
      v = use_base ? TE_R(TE_R(v / TE_R(nt)) + b) : TE_R(v / TE_R(nt));
    else if (agg == TA_SUM)
      v = use_base ? TE_R(v + b) : v;
    else
      v = TE_R(b + (h[k] ? v : 0));
    z[k] = h[k] ? (float)v : 0.0f;
  }
#undef TE_R
  te_transform(s->post, z, T);
}

/* TreeEnsemble 5: scores in double, then its post transform. */
static void te_finish_v5(const TeState* s, double* sc, const uint8_t* h, void* y, int32_t type,
                         size_t row) {
  const size_t T = s->n_out;
  (void)h;
  if (s->m.agg == TA_AVERAGE && s->m.n_trees)
    for (size_t t = 0; t < T; t++)
      sc[t] /= (double)s->m.n_trees;
  if (s->post == TP_SOFTMAX || s->post == TP_SOFTMAX_ZERO) {
    double mx = -INFINITY, sum = 0;
    for (size_t t = 0; t < T; t++)
      mx = fmax(mx, sc[t]);
    for (size_t t = 0; t < T; t++) {
      sc[t] = (s->post == TP_SOFTMAX_ZERO && sc[t] == 0) ? 0 : exp(sc[t] - mx);
      sum += sc[t];
    }
    for (size_t t = 0; t < T && sum > 0; t++)
      sc[t] /= sum;
  } else if (s->post == TP_LOGISTIC) {
    for (size_t t = 0; t < T; t++)
      sc[t] = 1.0 / (1.0 + exp(-sc[t]));
  }
  for (size_t t = 0; t < T; t++)
    cpu_num_store(type, y, row * T + t, (CpuNum){.kind = CPU_NUM_FLT, .v.f = sc[t]});
}

static void te_task(void* user, size_t begin, size_t end) {
  TeRun* R = user;
  const TeState* s = R->s;
  const size_t T = s->n_out;
  /* Per-call buffers (sizes checked in te_compute): the block's
   * accumulators (doubles, room for either type), one row's scores as
   * doubles, then the block's flags and the row's. */
  uint8_t* buf = malloc(R->task_bytes);
  if (!buf) {
    __atomic_store_n(&R->stop.stopped, 2, __ATOMIC_RELAXED);
    return;
  }
  void* acc = buf;
  double* sc = (double*)(buf + R->acc_bytes);
  uint8_t* has = (uint8_t*)(sc + T);
  uint8_t* h = has + R->acc_bytes / sizeof(double);
  size_t work = 0;
  for (size_t blk = begin; blk < end; blk++) {
    if (cpu_stop_poll(&R->stop, &work, R->block * s->m.n_trees)) break;
    size_t r0 = blk * R->block;
    size_t nr = R->rows - r0 < R->block ? R->rows - r0 : R->block;
    memset(has, 0, nr * T);
    if (R->dbl) {
      memset(acc, 0, nr * T * sizeof(double));
      te_eval_d(&s->m, (const double*)R->x + r0 * R->ld, R->ld, nr, acc, has);
    } else {
      memset(acc, 0, nr * T * sizeof(float));
      te_eval_f(&s->m, (const float*)R->x + r0 * R->ld, R->ld, nr, acc, has);
    }
    for (size_t r = 0; r < nr; r++) {
      for (size_t k = 0; k < T; k++)
        sc[k] = R->dbl ? ((const double*)acc)[r * T + k] : (double)((const float*)acc)[r * T + k];
      memcpy(h, has + r * T, T);
      size_t row = r0 + r;
      if (s->kind == TE_CLASSIFIER)
        R->label[row] = te_finish_classifier(s, R->dbl, sc, h, R->z + row * T);
      else if (s->kind == TE_REGRESSOR)
        te_finish_regressor(s, R->dbl, sc, h, R->z + row * T);
      else
        te_finish_v5(s, sc, h, R->y5, R->y5_type, row);
    }
  }
  free(buf);
}

static OnyxStatus* te_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const TeState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  if (rank != 1 && rank != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X has rank %zu; want [N, F] or [F]", rank);
  size_t rows = rank == 1 ? 1 : (size_t)d[0];
  size_t feats = (size_t)d[rank - 1];
  if (s->m.max_feat >= 0 && (uint64_t)s->m.max_feat >= feats)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%s reads feature %lld (nodes_featureids); X has %zu features",
                         s->m.max_feat_node, (long long)s->m.max_feat, feats);
  int32_t type = H->tensor_elem_type(x);
  TeRun R = {.s = s, .rows = rows, .ld = feats, .stop = {ctx, 0}};
  size_t count = 0;
  if (!cpu_mul_size(rows, feats, &count))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X is too large");
  if (type == ONYX_ELEM_FLOAT32) {
    R.x = H->tensor_data(x);
  } else if (type == ONYX_ELEM_FLOAT64) {
    R.x = H->tensor_data(x);
    R.dbl = true;
  } else {
    /* int32, int64, float16: compared as floats. */
    size_t bytes;
    if (!cpu_mul_size(count, sizeof(float), &bytes))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X is too large");
    float* xf = H->ctx_scratch(ctx, bytes ? bytes : 1);
    if (!xf) return cpu_oom(ctx);
    const void* xd = H->tensor_data(x);
    for (size_t i = 0; i < count; i++) {
      CpuNum v;
      cpu_num_load(type, xd, i, &v);
      xf[i] = v.kind == CPU_NUM_SINT ? (float)v.v.i : (float)cpu_num_as_double(v);
    }
    R.x = xf;
  }
  const size_t T = s->n_out;
  size_t zcount;
  if (!cpu_mul_size(rows, T, &zcount))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the output is too large");
  OnyxStatus* st = NULL;
  OnyxTensor* label = NULL;
  OnyxTensor* z = NULL;
  int64_t zd[2] = {(int64_t)rows, (int64_t)T};
  int64_t ld1[1] = {(int64_t)rows};
  if (s->kind == TE_CLASSIFIER) {
    st = H->ctx_output(ctx, 0, ld1, 1, &label);
    if (!st) st = H->ctx_output(ctx, 1, zd, 2, &z);
    if (st) return st;
    R.z = H->tensor_mutable_data(z);
    R.label = H->ctx_scratch(ctx, (rows ? rows : 1) * sizeof *R.label);
    if (!R.label) return cpu_oom(ctx);
  } else if (s->kind == TE_REGRESSOR) {
    st = H->ctx_output(ctx, 0, zd, 2, &z);
    if (st) return st;
    R.z = H->tensor_mutable_data(z);
  } else {
    st = H->ctx_output(ctx, 0, zd, 2, &z);
    if (st) return st;
    R.y5 = H->tensor_mutable_data(z);
    R.y5_type = H->tensor_elem_type(z);
  }
  /* As few blocks as the threads allow: each block walks every tree once,
   * so each extra block reads the whole ensemble again. */
  size_t threads = H->thread_pool_size(H->ctx_thread_pool(ctx));
  size_t blocks = (rows + TE_BLOCK - 1) / TE_BLOCK;
  if (blocks < threads) {
    size_t most = (rows + TE_BLOCK_MIN - 1) / TE_BLOCK_MIN;
    blocks = threads < most ? threads : most;
  }
  R.block = blocks ? (rows + blocks - 1) / blocks : 1;
  blocks = (rows + R.block - 1) / R.block;
  /* block * T accumulators (8 bytes) and flags (1), T scores and flags. */
  size_t bt, rowb;
  if (!cpu_mul_size(R.block, T, &bt) || !cpu_mul_size(bt, sizeof(double), &R.acc_bytes) ||
      !cpu_mul_size(T, sizeof(double) + 1, &rowb) ||
      !cpu_add_size(R.acc_bytes, bt, &R.task_bytes) ||
      !cpu_add_size(R.task_bytes, rowb, &R.task_bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%zu targets are too many for %zu rows", T,
                         rows);
  if (blocks > 1)
    H->parallel_for(H->ctx_thread_pool(ctx), blocks, te_task, &R);
  else if (blocks)
    te_task(&R, 0, 1);
  if (__atomic_load_n(&R.stop.stopped, __ATOMIC_RELAXED) == 2) return cpu_oom(ctx);
  if (cpu_stop_seen(&R.stop)) return cpu_cancelled(ctx, NULL);
  if (s->kind == TE_CLASSIFIER) {
    if (s->labels_i) {
      int64_t* out = H->tensor_mutable_data(label);
      for (size_t r = 0; r < rows; r++)
        out[r] = s->labels_i[R.label[r]];
    } else {
      for (size_t r = 0; r < rows && !st; r++) {
        const char* l = s->labels_s[R.label[r]];
        l = l ? l : "";
        size_t len = s->labels_len ? s->labels_len[R.label[r]] : strlen(l);
        st = H->tensor_set_string(label, r, l, len);
      }
    }
  }
  return st;
}

/* --- Registration ----------------------------------------------------------------------------- */

static const int32_t t_in_v3[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT64,
                                  ONYX_ELEM_INT32};
static const int32_t t_label[] = {ONYX_ELEM_INT64, ONYX_ELEM_STRING};
static const int32_t t_v5[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16};
static const OnyxTypeConstraint tc_cls[] = {{"T1", t_in_v3, 4}, {"T2", t_label, 2}};
static const OnyxTypeConstraint tc_reg[] = {{"T", t_in_v3, 4}};
static const OnyxTypeConstraint tc_v5[] = {{"T", t_v5, 3}};

OnyxStatus* cpu_register_ml_tree(OnyxKernelRegistry* r) {
  static const struct {
    const char* op;
    int32_t since;
    const OnyxTypeConstraint* tc;
    size_t n_tc;
    OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**);
    void* user;
  } specs[] = {
      {"TreeEnsembleClassifier", 1, tc_cls, 2, te_create_v3, (void*)1},
      {"TreeEnsembleRegressor", 1, tc_reg, 1, te_create_v3, NULL},
      {"TreeEnsemble", 5, tc_v5, 1, te_create_v5, NULL},
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(specs); i++) {
    OnyxKernelDef def = {
        .struct_size = sizeof def,
        .domain = tree_domain,
        .op_type = specs[i].op,
        .since_version = specs[i].since,
        .end_version = ONYX_OPSET_LATEST,
        .type_constraints = specs[i].tc,
        .type_constraint_count = specs[i].n_tc,
        .create = specs[i].create,
        .compute = te_compute,
        .release = te_release,
        .user_data = specs[i].user,
    };
    OnyxStatus* st = cpu_host->register_kernel(r, &def);
    if (st) return st;
  }
  return NULL;
}
