/* cpu_ml_models.c — ai.onnx.ml LinearClassifier, LinearRegressor,
 * SVMClassifier and SVMRegressor (version 1 each), with ONNX Runtime's
 * semantics, binary special cases included:
 *
 * - LinearClassifier: scores = X W^T + intercepts (the float32 GEMM), one
 *   row of W per class; the class count is the number of intercepts (or,
 *   without them, of class labels). With one row the label is the second
 *   class label (or 1 / "1") where the score is > 0, else the first (0 /
 *   "0"); with one row and two labels Z gets two columns, [1 - s, s] of the
 *   raw score s (ONNX Runtime applies no LOGISTIC or SOFTMAX there; PROBIT
 *   gives [1 - p, p] with p = probit(s)). With more rows the label is the
 *   first highest score's and Z is the post_transform of the scores.
 * - LinearRegressor: Y = X W^T + intercepts, [N, targets]; the
 *   post_transform applies to rows of two or more targets (PROBIT to one).
 * - SVMRegressor: with n_supports > 0, Y = sum_v coef_v K(x, sv_v) + rho[0]
 *   (kernels LINEAR x.s, POLY (gamma x.s + coef0)^degree, RBF
 *   exp(-gamma |x - s|^2), SIGMOID tanh(gamma x.s + coef0), kernel_params
 *   [gamma, coef0, degree]); else Y = x.coef + rho[0]. one_class maps Y to
 *   +1 / -1 by its sign. post_transform is read and validated, not applied
 *   (as in ONNX Runtime).
 * - SVMClassifier: the libsvm one-vs-one form. With vectors_per_class (SVC
 *   mode) each class pair (i, j), in the order (0,1), (0,2), ..., (1,2),
 *   ... scores s = sum over the support vectors of i of coef[j-1][v] K +
 *   sum over those of j of coef[i][v] K + rho[pair] and gives i a vote when
 *   s > 0, else j; the label is the class of most votes (the first on a
 *   tie). Without prob_a / prob_b, Z is the pair scores (two classes: [-s,
 *   s] under NONE, [1 - s, s] under the other transforms, [probit(s), 0]
 *   under PROBIT); with them the pair probabilities 1 / (1 + exp(s A + B)),
 *   clipped to [1e-7, 1 - 1e-7], are coupled into class probabilities by
 *   libsvm's iterative method (Wu, Lin and Weng 2004, section 4), then the
 *   post_transform applies. Without vectors_per_class (linear mode) the
 *   scores are X coef^T + rho[0], one per class, the label the highest
 *   score's, with two classes the second label where the highest score is
 *   >= 0.5 (all coefficients >= 0) or > 0 (some negative).
 *
 * Every attribute is checked when the kernel is created: counts against
 * each other (coefficients against classes x features or classes x
 * vectors, rho and prob_a / prob_b against the class pairs), kernel_type,
 * kernel_params and post_transform words; X's feature count against the
 * model when it runs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_ml.h"

/* --- LinearClassifier / LinearRegressor ------------------------------------------------------ */

typedef struct LinState {
  bool classifier;
  MlLabels labels;
  size_t n_rows; /* rows of W: classes or targets */
  size_t n_feat; /* columns of W */
  const float* coef;
  float* bias; /* n_rows values (zeros without intercepts) */
  int post;
} LinState;

static void lin_release(void* state) {
  LinState* s = state;
  if (!s) return;
  free(s->bias);
  free(s);
}

static OnyxStatus* lin_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  const OnyxHostApi* H = cpu_host;
  LinState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->classifier = user != NULL;
  size_t n_coef = 0, n_icpt = 0;
  s->coef = H->node_attr_floats(node, "coefficients", &n_coef);
  const float* icpt = H->node_attr_floats(node, "intercepts", &n_icpt);
  OnyxStatus* st = ml_post_attr(node, &s->post);
  if (!st && (!s->coef || !n_coef))
    st = cpu_error(node, ONYX_INVALID_MODEL, "attribute 'coefficients' is missing or empty");
  if (!st && s->classifier) {
    st = ml_labels_attr(node, &s->labels);
    if (!st) {
      s->n_rows = n_icpt ? n_icpt : s->labels.n;
      if (!s->n_rows)
        st = cpu_error(node, ONYX_INVALID_MODEL,
                       "needs 'intercepts' or class labels to know the number of classes");
      else if (s->n_rows > 1 && s->labels.n != s->n_rows)
        st = cpu_error(node, ONYX_INVALID_MODEL,
                       "%zu classes (rows of 'coefficients') but %zu class labels", s->n_rows,
                       s->labels.n);
    }
  } else if (!st) {
    int64_t targets = H->node_attr_int(node, "targets", 1);
    if (targets < 1 || (uint64_t)targets > n_coef)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'targets' = %lld is not in 1..%zu (the coefficient count)",
                     (long long)targets, n_coef);
    else if (n_icpt && n_icpt != (size_t)targets)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'intercepts' has %zu values; targets is %lld", n_icpt,
                     (long long)targets);
    else
      s->n_rows = (size_t)targets;
  }
  if (!st && n_coef % s->n_rows)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "attribute 'coefficients' has %zu values, not a multiple of the %zu %s", n_coef,
                   s->n_rows, s->classifier ? "classes" : "targets");
  if (!st) {
    s->n_feat = n_coef / s->n_rows;
    s->bias = calloc(s->n_rows, sizeof *s->bias);
    if (!s->bias) st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; !st && i < n_icpt; i++)
    s->bias[i] = icpt[i];
  if (st) {
    lin_release(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* scores (rows x n_rows) = X W^T + bias. */
static OnyxStatus* lin_scores(OnyxKernelContext* ctx, const LinState* s, const OnyxTensor* x,
                              float** scores, size_t* rows) {
  const OnyxHostApi* H = cpu_host;
  const float* xd = NULL;
  size_t cols = 0;
  OnyxStatus* st = ml_rows_f32(ctx, x, &xd, rows, &cols);
  if (st) return st;
  if (cols != s->n_feat)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X has %zu features; the coefficients are for %zu", cols, s->n_feat);
  size_t n = 0, bytes = 0;
  if (!cpu_mul_size(*rows, s->n_rows, &n) || !cpu_mul_size(n ? n : 1, 2 * sizeof(float), &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the score count overflows");
  /* Room for two columns per row: the binary classifier widens in place. */
  *scores = H->ctx_scratch(ctx, bytes);
  if (!*scores) return cpu_oom(ctx);
  if (!*rows) return NULL;
  const CpuGemm g = {.m = *rows,
                     .n = s->n_rows,
                     .k = s->n_feat,
                     .a = xd,
                     .lda = s->n_feat,
                     .b = s->coef,
                     .ldb = s->n_feat,
                     .trans_b = 1,
                     .c = *scores,
                     .ldc = s->n_rows,
                     .alpha = 1.0,
                     .bias_col = s->bias};
  cpu_gemm_f32(H->ctx_thread_pool(ctx), &g);
  return NULL;
}

static OnyxStatus* linreg_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const LinState* s = state;
  float* sc = NULL;
  size_t rows = 0;
  OnyxStatus* st = lin_scores(ctx, s, H->ctx_input(ctx, 0), &sc, &rows);
  if (st) return st;
  for (size_t r = 0; r < rows; r++) {
    float* row = sc + r * s->n_rows;
    if (s->n_rows > 1)
      ml_post_row(row, s->n_rows, s->post);
    else if (s->post == ML_POST_PROBIT)
      row[0] = ml_probit(row[0]);
  }
  int64_t od[2] = {(int64_t)rows, (int64_t)s->n_rows};
  return cpu_f32_output(ctx, 0, od, 2, sc);
}

static OnyxStatus* lincls_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const LinState* s = state;
  float* sc = NULL;
  size_t rows = 0;
  OnyxStatus* st = lin_scores(ctx, s, H->ctx_input(ctx, 0), &sc, &rows);
  if (st) return st;
  int64_t n_rows = (int64_t)rows;
  OnyxTensor* y = NULL;
  if ((st = H->ctx_output(ctx, 0, &n_rows, 1, &y))) return st;
  if ((st = ml_check_label_output(ctx, y, &s->labels))) return st;
  size_t c = s->n_rows;
  bool two = c == 1 && s->labels.n == 2;
  for (size_t r = 0; r < rows && !st; r++) {
    const float* row = sc + r * c;
    if (c == 1) {
      st = s->labels.n == 2 ? ml_put_label(y, r, &s->labels, row[0] > 0)
                            : ml_put_binary(y, r, s->labels.strings, row[0] > 0);
      continue;
    }
    size_t best = 0;
    for (size_t j = 1; j < c; j++)
      if (row[j] > row[best]) best = j;
    st = ml_put_label(y, r, &s->labels, best);
  }
  if (st) return st;
  size_t zc = two ? 2 : c;
  if (two) { /* widen from the back: row r's score moves to column 1 of row r */
    for (size_t r = rows; r-- > 0;) {
      float v = sc[r];
      if (s->post == ML_POST_PROBIT) v = ml_probit(v);
      sc[2 * r] = 1.0f - v;
      sc[2 * r + 1] = v;
    }
  } else {
    for (size_t r = 0; r < rows; r++) {
      float* row = sc + r * c;
      if (c > 1)
        ml_post_row(row, c, s->post);
      else if (s->post == ML_POST_PROBIT)
        row[0] = ml_probit(row[0]);
    }
  }
  int64_t od[2] = {(int64_t)rows, (int64_t)zc};
  return cpu_f32_output(ctx, 1, od, 2, sc);
}

/* --- SVM kernels --------------------------------------------------------------------------- */

enum { SVM_LINEAR, SVM_POLY, SVM_RBF, SVM_SIGMOID };

typedef struct SvmKernel {
  int type;
  float gamma, coef0, degree;
} SvmKernel;

static OnyxStatus* svm_kernel_attrs(const OnyxNode* node, SvmKernel* k) {
  const OnyxHostApi* H = cpu_host;
  size_t len = 0;
  const char* t = H->node_attr_string(node, "kernel_type", &len);
  static const char* const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  k->type = t ? -1 : SVM_LINEAR;
  for (int i = 0; t && i < 4; i++)
    if (len == strlen(names[i]) && !memcmp(t, names[i], len)) k->type = i;
  if (k->type < 0)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'kernel_type' is '%.*s'; it must be LINEAR, POLY, RBF or SIGMOID",
                     (int)(len > 64 ? 64 : len), t);
  size_t n = 0;
  const float* p = H->node_attr_floats(node, "kernel_params", &n);
  if (n && n != 3)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'kernel_params' has %zu values; it must be [gamma, coef0, degree]",
                     n);
  k->gamma = n ? p[0] : 0.0f;
  k->coef0 = n ? p[1] : 0.0f;
  k->degree = n ? p[2] : 0.0f;
  return NULL;
}

/* RBF rows [b, e) of K: exp(-gamma |x - v|^2) by direct differences
 * (|x|^2 + |v|^2 - 2 x.v cancels badly near a vector). */
typedef struct RbfJob {
  const float *x, *v;
  size_t nv, nf;
  float gamma;
  float* out;
} RbfJob;

static void rbf_rows(void* user, size_t b, size_t e) {
  const RbfJob* J = user;
  for (size_t r = b; r < e; r++)
    for (size_t j = 0; j < J->nv; j++) {
      const float* a = J->x + r * J->nf;
      const float* c = J->v + j * J->nf;
      float sum = 0.0f;
      for (size_t f = 0; f < J->nf; f++) {
        float d = a[f] - c[f];
        sum += d * d;
      }
      J->out[r * J->nv + j] = expf(-J->gamma * sum);
    }
}

/* K (rows x nv) = kernel(X rows, the nv vectors of v, each nf long), plus
 * c0 for the LINEAR kernel. The dot products run on the float32 GEMM, RBF
 * row blocks on the thread pool. */
static void svm_kernel_dot(OnyxKernelContext* ctx, const SvmKernel* k, const float* x, size_t rows,
                           const float* v, size_t nv, size_t nf, float c0, float* out) {
  if (!rows || !nv) return;
  if (k->type == SVM_RBF) {
    RbfJob job = {x, v, nv, nf, k->gamma, out};
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, rbf_rows, &job);
    return;
  }
  bool lin = k->type == SVM_LINEAR;
  float add = lin ? c0 : k->coef0;
  const CpuGemm g = {.m = rows,
                     .n = nv,
                     .k = nf,
                     .a = x,
                     .lda = nf,
                     .b = v,
                     .ldb = nf,
                     .trans_b = 1,
                     .c = out,
                     .ldc = nv,
                     .alpha = lin ? 1.0 : (double)k->gamma};
  cpu_gemm_f32(cpu_host->ctx_thread_pool(ctx), &g);
  size_t n = rows * nv;
  for (size_t i = 0; i < n; i++) {
    float t = out[i] + add;
    if (k->type == SVM_POLY)
      t = k->degree == 2.0f ? t * t : k->degree == 3.0f ? t * t * t : powf(t, k->degree);
    else if (k->type == SVM_SIGMOID)
      t = tanhf(t);
    out[i] = t;
  }
}

/* --- SVMRegressor ---------------------------------------------------------------------------- */

typedef struct SvrState {
  SvmKernel k;
  size_t nv, nf; /* support vectors (0: linear mode) and features */
  const float *sv, *coef;
  float rho;
  bool one_class;
} SvrState;

static OnyxStatus* svr_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  SvrState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  int post = 0;
  size_t n_coef = 0, n_sv = 0, n_rho = 0;
  s->coef = H->node_attr_floats(node, "coefficients", &n_coef);
  s->sv = H->node_attr_floats(node, "support_vectors", &n_sv);
  const float* rho = H->node_attr_floats(node, "rho", &n_rho);
  int64_t nv = H->node_attr_int(node, "n_supports", 0);
  s->one_class = H->node_attr_int(node, "one_class", 0) != 0;
  OnyxStatus* st = ml_post_attr(node, &post);
  if (!st) st = svm_kernel_attrs(node, &s->k);
  if (!st && (!s->coef || !n_coef))
    st = cpu_error(node, ONYX_INVALID_MODEL, "attribute 'coefficients' is missing or empty");
  if (!st && n_rho != 1)
    st = cpu_error(node, ONYX_INVALID_MODEL, "attribute 'rho' has %zu values; want 1", n_rho);
  if (!st && (nv < 0 || (uint64_t)nv > n_coef))
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "attribute 'n_supports' = %lld is not in 0..%zu (the coefficient count)",
                   (long long)nv, n_coef);
  if (!st && nv > 0) {
    s->nv = (size_t)nv;
    if (n_coef != s->nv)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'coefficients' has %zu values; want one per support vector (%zu)",
                     n_coef, s->nv);
    else if (!n_sv || n_sv % s->nv)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'support_vectors' has %zu values, not n_supports (%zu) x features",
                     n_sv, s->nv);
    else
      s->nf = n_sv / s->nv;
  } else if (!st) {
    s->nf = n_coef;
    s->k.type = SVM_LINEAR;
  }
  if (st) {
    free(s);
    return st;
  }
  s->rho = rho[0];
  *out = s;
  return NULL;
}

static OnyxStatus* svr_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const SvrState* s = state;
  const float* x = NULL;
  size_t rows = 0, cols = 0;
  OnyxStatus* st = ml_rows_f32(ctx, H->ctx_input(ctx, 0), &x, &rows, &cols);
  if (st) return st;
  if (cols != s->nf)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X has %zu features; the model has %zu", cols,
                         s->nf);
  size_t nk = 0, bytes = 0;
  if (!cpu_mul_size(rows, s->nv ? s->nv : 1, &nk) ||
      !cpu_mul_size(nk + rows + 1, sizeof(float), &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the kernel matrix size overflows");
  float* buf = H->ctx_scratch(ctx, bytes);
  if (!buf) return cpu_oom(ctx);
  float* y = buf + nk;
  if (s->nv) {
    svm_kernel_dot(ctx, &s->k, x, rows, s->sv, s->nv, s->nf, 0.0f, buf);
    for (size_t r = 0; r < rows; r++) {
      double sum = 0;
      for (size_t v = 0; v < s->nv; v++)
        sum += (double)s->coef[v] * buf[r * s->nv + v];
      y[r] = (float)(sum + s->rho);
    }
  } else {
    svm_kernel_dot(ctx, &s->k, x, rows, s->coef, 1, s->nf, s->rho, y);
  }
  if (s->one_class)
    for (size_t r = 0; r < rows; r++)
      y[r] = y[r] > 0.0f ? 1.0f : -1.0f;
  int64_t od[2] = {(int64_t)rows, 1};
  return cpu_f32_output(ctx, 0, od, 2, y);
}

/* --- SVMClassifier --------------------------------------------------------------------------- */

typedef struct SvcState {
  SvmKernel k;
  MlLabels labels;
  size_t nc, nv, nf, n_pairs; /* classes, support vectors (0: linear mode), features */
  const int64_t* per_class;
  size_t* start; /* first support vector of each class */
  const float *sv, *coef, *rho, *prob_a, *prob_b;
  bool all_positive;
  int post;
} SvcState;

static void svc_release(void* state) {
  SvcState* s = state;
  if (!s) return;
  free(s->start);
  free(s);
}

static OnyxStatus* svc_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  SvcState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t n_coef = 0, n_sv = 0, n_rho = 0, n_pa = 0, n_pb = 0, n_vpc = 0;
  s->coef = H->node_attr_floats(node, "coefficients", &n_coef);
  s->sv = H->node_attr_floats(node, "support_vectors", &n_sv);
  s->rho = H->node_attr_floats(node, "rho", &n_rho);
  s->prob_a = H->node_attr_floats(node, "prob_a", &n_pa);
  s->prob_b = H->node_attr_floats(node, "prob_b", &n_pb);
  s->per_class = H->node_attr_ints(node, "vectors_per_class", &n_vpc);
  OnyxStatus* st = ml_post_attr(node, &s->post);
  if (!st) st = svm_kernel_attrs(node, &s->k);
  if (!st) st = ml_labels_attr(node, &s->labels);
  if (!st && !s->labels.n)
    st = cpu_error(node, ONYX_INVALID_MODEL, "needs classlabels_ints or classlabels_strings");
  if (!st && (!s->coef || !n_coef))
    st = cpu_error(node, ONYX_INVALID_MODEL, "attribute 'coefficients' is missing or empty");
  if (!st && n_pa != n_pb)
    st =
        cpu_error(node, ONYX_INVALID_MODEL, "'prob_a' has %zu values but 'prob_b' %zu", n_pa, n_pb);
  s->nc = s->labels.n;
  s->n_pairs = s->nc * (s->nc - (s->nc ? 1 : 0)) / 2;
  if (!st && s->nc > 65535)
    st = cpu_error(node, ONYX_INVALID_MODEL, "%zu classes; at most 65535 are supported", s->nc);
  for (size_t i = 0; !st && i < n_vpc; i++) {
    if (s->per_class[i] < 0 || (uint64_t)s->per_class[i] > n_sv)
      st = cpu_error(node, ONYX_INVALID_MODEL, "vectors_per_class[%zu] = %lld is out of range", i,
                     (long long)s->per_class[i]);
    else
      s->nv += (size_t)s->per_class[i];
  }
  if (!st && s->nv) { /* SVC mode */
    size_t want = 0;
    if (n_vpc != s->nc)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'vectors_per_class' has %zu values for %zu classes", n_vpc, s->nc);
    else if (s->nc < 2)
      st = cpu_error(node, ONYX_INVALID_MODEL, "a support-vector classifier needs two classes");
    else if (n_sv % s->nv || !n_sv)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'support_vectors' has %zu values, not %zu vectors x features", n_sv,
                     s->nv);
    else if (!cpu_mul_size(s->nc - 1, s->nv, &want) || n_coef != want)
      st =
          cpu_error(node, ONYX_INVALID_MODEL,
                    "attribute 'coefficients' has %zu values; want (classes - 1) x vectors = %zu x "
                    "%zu",
                    n_coef, s->nc - 1, s->nv);
    else if (n_rho != s->n_pairs)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'rho' has %zu values; want one per class pair (%zu)", n_rho,
                     s->n_pairs);
    else if (n_pa && n_pa != s->n_pairs)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attributes 'prob_a' / 'prob_b' have %zu values; want one per class pair "
                     "(%zu)",
                     n_pa, s->n_pairs);
    if (!st) {
      s->nf = n_sv / s->nv;
      s->start = calloc(s->nc, sizeof *s->start);
      if (!s->start) st = cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
      for (size_t i = 1; !st && i < s->nc; i++)
        s->start[i] = s->start[i - 1] + (size_t)s->per_class[i - 1];
    }
  } else if (!st) { /* linear mode: one coefficient row per class */
    s->k.type = SVM_LINEAR;
    if (n_coef % s->nc)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "attribute 'coefficients' has %zu values, not %zu classes x features", n_coef,
                     s->nc);
    else if (n_rho < 1)
      st = cpu_error(node, ONYX_INVALID_MODEL, "attribute 'rho' is missing");
    else
      s->nf = n_coef / s->nc;
  }
  if (st) {
    svc_release(s);
    return st;
  }
  s->all_positive = true;
  for (size_t i = 0; i < n_coef; i++)
    if (!(s->coef[i] >= 0.0f)) s->all_positive = false;
  if (!n_pa) s->prob_a = s->prob_b = NULL;
  *out = s;
  return NULL;
}

/* Class probabilities p (k values) from the pairwise ones r (k x k,
 * r[i][j] = P(i | i or j)): the fixed-point iteration of Wu, Lin and Weng
 * (2004), method 2, as libsvm runs it (at most 100 rounds, stopping once
 * every |(Qp)_i - p'Qp| < 0.005 / k). q is k x k + k scratch floats. */
static void svc_couple(size_t k, const float* r, float* p, float* q) {
  float* qp = q + k * k;
  for (size_t i = 0; i < k; i++) {
    p[i] = 1.0f / (float)k;
    q[i * k + i] = 0;
    for (size_t j = 0; j < i; j++) {
      q[i * k + i] += r[j * k + i] * r[j * k + i];
      q[i * k + j] = q[j * k + i];
    }
    for (size_t j = i + 1; j < k; j++) {
      q[i * k + i] += r[j * k + i] * r[j * k + i];
      q[i * k + j] = -r[j * k + i] * r[i * k + j];
    }
  }
  float eps = 0.005f / (float)k;
  for (int it = 0; it < 100; it++) {
    float pqp = 0;
    for (size_t i = 0; i < k; i++) {
      qp[i] = 0;
      for (size_t j = 0; j < k; j++)
        qp[i] += q[i * k + j] * p[j];
      pqp += p[i] * qp[i];
    }
    float err = 0;
    for (size_t i = 0; i < k; i++)
      err = fmaxf(err, fabsf(qp[i] - pqp));
    if (err < eps) break;
    for (size_t i = 0; i < k; i++) {
      float diff = (-qp[i] + pqp) / q[i * k + i];
      p[i] += diff;
      pqp = (pqp + diff * (diff * q[i * k + i] + 2 * qp[i])) / (1 + diff) / (1 + diff);
      for (size_t j = 0; j < k; j++) {
        qp[j] = (qp[j] + diff * q[i * k + j]) / (1 + diff);
        p[j] /= (1 + diff);
      }
    }
  }
}

static OnyxStatus* svc_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const SvcState* s = state;
  const float* x = NULL;
  size_t rows = 0, cols = 0;
  OnyxStatus* st = ml_rows_f32(ctx, H->ctx_input(ctx, 0), &x, &rows, &cols);
  if (st) return st;
  if (cols != s->nf)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X has %zu features; the model has %zu", cols,
                         s->nf);
  bool svc = s->nv > 0, proba = s->prob_a != NULL;
  size_t nc = s->nc;
  /* Z's columns per row. */
  size_t zc = svc && !proba ? (nc > 2 ? s->n_pairs : 2) : nc;
  /* Scratch: Z (rows x zc), the kernel values (rows x vectors), then per row
   * the votes (nc), pair scores, pair probabilities (nc x nc) and the
   * coupling's work space (nc x nc + nc). */
  size_t n_z = 0, n_k = 0, n_sq = 0, total = 0, bytes = 0;
  bool ok = cpu_mul_size(rows, zc, &n_z) && cpu_mul_size(rows, s->nv, &n_k) &&
            cpu_mul_size(nc, nc, &n_sq) && cpu_add_size(n_z, n_k, &total) &&
            cpu_add_size(total, nc + s->n_pairs + nc, &total) &&
            cpu_add_size(total, 2 * n_sq + 1, &total) && cpu_mul_size(total, sizeof(float), &bytes);
  if (!ok) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the score buffers' size overflows");
  float* z = H->ctx_scratch(ctx, bytes);
  if (!z) return cpu_oom(ctx);
  float* kmat = z + n_z;
  float* votes = kmat + n_k;
  float* pair = votes + nc;
  float* r2 = pair + s->n_pairs;
  float* q = r2 + n_sq;
  int64_t n_rows = (int64_t)rows;
  OnyxTensor* y = NULL;
  if ((st = H->ctx_output(ctx, 0, &n_rows, 1, &y))) return st;
  if ((st = ml_check_label_output(ctx, y, &s->labels))) return st;
  if (svc)
    svm_kernel_dot(ctx, &s->k, x, rows, s->sv, s->nv, s->nf, 0.0f, kmat);
  else if (rows)
    svm_kernel_dot(ctx, &s->k, x, rows, s->coef, nc, s->nf, s->rho[0], z);
  for (size_t r = 0; r < rows && !st; r++) {
    float* zr = z + r * zc;
    size_t best = 0;
    float best_w = 0;
    if (svc) {
      const float* kr = kmat + r * s->nv;
      for (size_t i = 0; i < nc; i++)
        votes[i] = 0;
      size_t p = 0;
      for (size_t i = 0; i + 1 < nc; i++)
        for (size_t j = i + 1; j < nc; j++, p++) {
          double sum = 0;
          const float* ci = s->coef + (j - 1) * s->nv + s->start[i];
          const float* cj = s->coef + i * s->nv + s->start[j];
          for (size_t m = 0; m < (size_t)s->per_class[i]; m++)
            sum += ci[m] * kr[s->start[i] + m];
          for (size_t m = 0; m < (size_t)s->per_class[j]; m++)
            sum += cj[m] * kr[s->start[j] + m];
          sum += s->rho[p];
          pair[p] = (float)sum;
          votes[sum > 0 ? i : j] += 1;
        }
      for (size_t i = 1; i < nc; i++)
        if (votes[i] > votes[best]) best = i;
      if (proba) {
        for (size_t i = 0, p2 = 0; i + 1 < nc; i++)
          for (size_t j = i + 1; j < nc; j++, p2++) {
            float v = 1.0f - ml_logistic(pair[p2] * s->prob_a[p2] + s->prob_b[p2]);
            v = fminf(fmaxf(v, 1.0e-7f), 1.0f - 1.0e-7f);
            r2[i * nc + j] = v;
            r2[j * nc + i] = 1.0f - v;
          }
        svc_couple(nc, r2, zr, q);
        ml_post_row(zr, nc, s->post);
      } else if (nc > 2) {
        memcpy(zr, pair, s->n_pairs * sizeof *zr);
        ml_post_row(zr, s->n_pairs, s->post);
      } else {
        float v = pair[0];
        if (s->post == ML_POST_PROBIT) {
          zr[0] = ml_probit(v);
          zr[1] = 0.0f;
        } else {
          zr[0] = s->post == ML_POST_NONE ? -v : 1.0f - v;
          zr[1] = v;
        }
      }
    } else {
      for (size_t i = 1; i < nc; i++)
        if (zr[i] > zr[best]) best = i;
      best_w = zr[best];
      if (nc > 1)
        ml_post_row(zr, nc, s->post);
      else if (s->post == ML_POST_PROBIT)
        zr[0] = ml_probit(zr[0]);
    }
    if (nc == 2 && !proba && !svc) {
      bool second = (s->all_positive && best_w >= 0.5f) || (!s->all_positive && best_w > 0.0f);
      st = ml_put_label(y, r, &s->labels, second ? 1 : best);
    } else {
      st = ml_put_label(y, r, &s->labels, best);
    }
  }
  if (st) return st;
  int64_t od[2] = {(int64_t)rows, (int64_t)zc};
  return cpu_f32_output(ctx, 1, od, 2, z);
}

/* --- Registration ------------------------------------------------------------------------------
 */

static const int32_t x_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT64,
                                  ONYX_ELEM_INT32};
static const int32_t label_types[] = {ONYX_ELEM_INT64, ONYX_ELEM_STRING};
static const OnyxTypeConstraint cls_tc[] = {{"T1", x_types, 4}, {"T2", label_types, 2}};
static const OnyxTypeConstraint reg_tc[] = {{"T", x_types, 4}};

OnyxStatus* cpu_register_ml_models(OnyxKernelRegistry* r);
OnyxStatus* cpu_register_ml_models(OnyxKernelRegistry* r) {
  static const struct {
    const char* op;
    const OnyxTypeConstraint* tc;
    size_t n_tc;
    OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**);
    OnyxStatus* (*compute)(void*, OnyxKernelContext*);
    void (*release)(void*);
    void* user;
  } specs[] = {
      {"LinearClassifier", cls_tc, 2, lin_create, lincls_compute, lin_release, (void*)1},
      {"LinearRegressor", reg_tc, 1, lin_create, linreg_compute, lin_release, NULL},
      {"SVMClassifier", cls_tc, 2, svc_create, svc_compute, svc_release, NULL},
      {"SVMRegressor", reg_tc, 1, svr_create, svr_compute, cpu_free_state, NULL},
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(specs); i++) {
    OnyxKernelDef def = {
        .struct_size = sizeof def,
        .domain = "ai.onnx.ml",
        .op_type = specs[i].op,
        .since_version = 1,
        .end_version = ONYX_OPSET_LATEST,
        .type_constraints = specs[i].tc,
        .type_constraint_count = specs[i].n_tc,
        .create = specs[i].create,
        .compute = specs[i].compute,
        .release = specs[i].release,
        .user_data = specs[i].user,
    };
    OnyxStatus* st = cpu_host->register_kernel(r, &def);
    if (st) return st;
  }
  return NULL;
}
