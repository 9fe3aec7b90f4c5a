/* cpu_einsum.c — the CPU provider's Einsum (any equation, summed in one
 * fixed order per output element) and Det. Attributes are read by
 * cpu_ops_create (cpu_layout.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_layout.h"

/* ========================================================================= */
/* Einsum                                                                     */
/* ========================================================================= */

#define EIN_MAX_IN     8
#define EIN_MAX_LABELS 64

/* A parsed term: label ids per dim (ellipsis dims get ids 0..E-1). */
typedef struct EinTerm {
  int lab[CPU_MAX_RANK];
  size_t rank;
} EinTerm;

static int ein_letter(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + c - 'A';
  return -1;
}

/* Parses one term (text [p, q)) for a tensor of `rank` dims (rank -1 for the
 * output, whose ellipsis has `ell` dims). Letter ids start at ell_max. */
static OnyxStatus* ein_term(const OnyxKernelContext* ctx, const char* p, const char* q, long rank,
                            size_t ell_max, size_t* ell_out, EinTerm* t) {
  size_t letters = 0;
  bool ell = false;
  for (const char* c = p; c < q; c++) {
    if (*c == ' ') continue;
    if (*c == '.') {
      if (ell || q - c < 3 || c[1] != '.' || c[2] != '.')
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "bad ellipsis in the equation");
      ell = true;
      c += 2;
      continue;
    }
    if (ein_letter(*c) < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "bad character '%c' in the equation", *c);
    letters++;
  }
  size_t e = 0;
  if (rank >= 0) {
    if ((size_t)rank < letters || (!ell && (size_t)rank != letters))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "equation term has %zu labels for an input of rank %ld", letters, rank);
    e = (size_t)rank - letters;
  } else {
    e = ell ? ell_max : 0;
  }
  if (letters + e > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "equation term has too many dims");
  t->rank = 0;
  for (const char* c = p; c < q; c++) {
    if (*c == ' ') continue;
    if (*c == '.') {
      for (size_t k = 0; k < e; k++) /* right-aligned among the ellipsis dims */
        t->lab[t->rank++] = (int)(ell_max - e + k);
      c += 2;
      continue;
    }
    t->lab[t->rank++] = (int)ell_max + ein_letter(*c);
  }
  *ell_out = e;
  return NULL;
}

typedef union Wide64 {
  double f;
  uint64_t u;
} Wide64;

/* One contraction: output labels first, then the summed ones. */
typedef struct EinRun {
  size_t n_in, n_out, n_loop, sum_count;
  int64_t size[EIN_MAX_LABELS + CPU_MAX_RANK];
  int64_t str[EIN_MAX_IN][EIN_MAX_LABELS + CPU_MAX_RANK];
  const Wide64* in[EIN_MAX_IN];
  bool is_int;
  void* y;
  int32_t ytype;
  CpuStop* stop; /* the summed labels set the work: polled per output and every 2^16 terms */
} EinRun;

/* Output elements [begin, end): each sums its products in one fixed order,
 * so the result does not depend on how the range is split over threads. */
static void ein_outputs(void* user, size_t begin, size_t end) {
  const EinRun* r = user;
  int64_t pos[EIN_MAX_LABELS + CPU_MAX_RANK] = {0};
  size_t polled = 0;
  for (size_t o = begin; o < end; o++) {
    if (cpu_stop_poll(r->stop, &polled, 1)) return;
    int64_t off[EIN_MAX_IN] = {0};
    size_t rest = o;
    for (size_t j = r->n_out; j-- > 0;) {
      pos[j] = (int64_t)(rest % (size_t)r->size[j]);
      rest /= (size_t)r->size[j];
    }
    for (size_t i = 0; i < r->n_in; i++)
      for (size_t j = 0; j < r->n_out; j++)
        off[i] += pos[j] * r->str[i][j];
    for (size_t j = r->n_out; j < r->n_loop; j++)
      pos[j] = 0;
    double acc = 0.0;
    uint64_t iacc = 0;
    for (size_t k = 0; k < r->sum_count; k++) {
      if ((k & (CPU_STOP_INTERVAL - 1)) == CPU_STOP_INTERVAL - 1 &&
          cpu_stop_poll(r->stop, &polled, CPU_STOP_INTERVAL))
        return;
      if (r->is_int) {
        uint64_t p = 1;
        for (size_t i = 0; i < r->n_in; i++)
          p *= r->in[i][off[i]].u;
        iacc += p;
      } else {
        double p = 1.0;
        for (size_t i = 0; i < r->n_in; i++)
          p *= r->in[i][off[i]].f;
        acc += p;
      }
      for (size_t j = r->n_loop; j-- > r->n_out;) {
        for (size_t i = 0; i < r->n_in; i++)
          off[i] += r->str[i][j];
        if (++pos[j] < r->size[j]) break;
        for (size_t i = 0; i < r->n_in; i++)
          off[i] -= r->str[i][j] * r->size[j];
        pos[j] = 0;
      }
    }
    CpuNum v = {.kind = CPU_NUM_FLT, .v.f = acc};
    if (r->is_int) v = (CpuNum){.kind = CPU_NUM_SINT, .v.i = (int64_t)iacc};
    cpu_num_store(r->ytype, r->y, o, v);
  }
}

static OnyxStatus* einsum_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  size_t n_in = cpu_host->ctx_input_count(ctx);
  if (n_in == 0 || n_in > EIN_MAX_IN)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "einsum of %zu inputs", n_in);
  const char* eq = s->eq;
  const char* arrow = strstr(eq, "->");
  const char* lhs_end = arrow ? arrow : eq + strlen(eq);
  /* Pass 1: the largest ellipsis. */
  size_t ell_max = 0;
  const char* p = eq;
  EinTerm terms[EIN_MAX_IN];
  OnyxStatus* st;
  for (int pass = 0; pass < 2; pass++) {
    p = eq;
    for (size_t i = 0; i < n_in; i++) {
      const char* q = memchr(p, ',', (size_t)(lhs_end - p));
      if (!q) q = lhs_end;
      if ((i + 1 < n_in) != (q != lhs_end))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "equation has %s terms than the %zu inputs",
                             q == lhs_end ? "fewer" : "more", n_in);
      size_t e;
      const OnyxTensor* x = cpu_host->ctx_input(ctx, i);
      if ((st = ein_term(ctx, p, q, (long)cpu_host->tensor_rank(x), pass ? ell_max : 0, &e,
                         &terms[i])))
        return st;
      if (!pass && e > ell_max) ell_max = e;
      p = q + 1;
    }
  }
  size_t n_lab = ell_max + 52;
  int64_t size[EIN_MAX_LABELS + CPU_MAX_RANK];
  int count[EIN_MAX_LABELS + CPU_MAX_RANK] = {0};
  for (size_t l = 0; l < n_lab; l++)
    size[l] = -1;
  for (size_t l = 0; l < ell_max; l++)
    size[l] = 1;
  for (size_t i = 0; i < n_in; i++) {
    const int64_t* d = cpu_host->tensor_dims(cpu_host->ctx_input(ctx, i));
    for (size_t k = 0; k < terms[i].rank; k++) {
      int l = terms[i].lab[k];
      count[l]++;
      if ((size_t)l < ell_max) { /* broadcast */
        if (d[k] != 1 && size[l] != 1 && size[l] != d[k])
          return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "ellipsis dims do not broadcast");
        if (d[k] != 1) size[l] = d[k];
      } else if (size[l] >= 0 && size[l] != d[k]) {
        return cpu_ctx_error(
            ctx, ONYX_INVALID_ARGUMENT, "label '%c' has sizes %lld and %lld",
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[l - (int)ell_max],
            (long long)size[l], (long long)d[k]);
      } else {
        size[l] = d[k];
      }
    }
  }
  EinTerm out;
  if (arrow) {
    size_t e;
    if ((st = ein_term(ctx, arrow + 2, arrow + 2 + strlen(arrow + 2), -1, ell_max, &e, &out)))
      return st;
    bool used[EIN_MAX_LABELS + CPU_MAX_RANK] = {false};
    for (size_t k = 0; k < out.rank; k++) {
      int l = out.lab[k];
      if (used[l] || size[l] < 0)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "output label repeated or not among the inputs");
      used[l] = true;
    }
  } else { /* implicit: ellipsis, then labels seen once, in alphabetical order */
    out.rank = 0;
    for (size_t l = 0; l < ell_max; l++)
      out.lab[out.rank++] = (int)l;
    static const char order[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (const char* c = order; *c; c++) {
      int l = (int)ell_max + ein_letter(*c);
      if (count[l] == 1) {
        if (out.rank >= CPU_MAX_RANK)
          return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "output has too many dims");
        out.lab[out.rank++] = l;
      }
    }
  }
  /* Loop labels: output ones first, then the summed ones. */
  int loop[EIN_MAX_LABELS + CPU_MAX_RANK];
  size_t n_loop = 0, n_out = out.rank;
  bool in_out[EIN_MAX_LABELS + CPU_MAX_RANK] = {false};
  int64_t dims[CPU_MAX_RANK];
  for (size_t k = 0; k < out.rank; k++) {
    loop[n_loop++] = out.lab[k];
    in_out[out.lab[k]] = true;
    dims[k] = size[out.lab[k]];
  }
  for (size_t l = 0; l < n_lab; l++)
    if (!in_out[l] && size[l] >= 0 && (count[l] > 0)) loop[n_loop++] = (int)l;
  /* Strides of each input per loop position. */
  int64_t str[EIN_MAX_IN][EIN_MAX_LABELS + CPU_MAX_RANK];
  for (size_t i = 0; i < n_in; i++) {
    const int64_t* d = cpu_host->tensor_dims(cpu_host->ctx_input(ctx, i));
    int64_t ds[CPU_MAX_RANK];
    cpu_dense_strides(d, terms[i].rank, ds);
    for (size_t j = 0; j < n_loop; j++) {
      str[i][j] = 0;
      for (size_t k = 0; k < terms[i].rank; k++)
        if (terms[i].lab[k] == loop[j] && d[k] != 1) str[i][j] += ds[k];
    }
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, n_out, &y))) return st;
  CpuStop stop = {.ctx = ctx};
  EinRun r = {.n_in = n_in, .n_out = n_out, .n_loop = n_loop, .sum_count = 1, .stop = &stop};
  r.y = cpu_host->tensor_mutable_data(y);
  r.ytype = cpu_host->tensor_elem_type(y);
  for (size_t j = 0; j < n_loop; j++) {
    r.size[j] = size[loop[j]];
    for (size_t i = 0; i < n_in; i++)
      r.str[i][j] = str[i][j];
    if (j >= n_out && !cpu_mul_size(r.sum_count, (size_t)r.size[j], &r.sum_count))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "integer overflow: the summed labels of '%s' have more than 2^64 "
                           "combinations",
                           eq);
  }
  /* Every input widened once: floats to double, integers to 64 bits. */
  for (size_t i = 0; i < n_in; i++) {
    const OnyxTensor* x = cpu_host->ctx_input(ctx, i);
    size_t n = cpu_host->tensor_elem_count(x);
    int32_t type = cpu_host->tensor_elem_type(x);
    Wide64* w = cpu_host->ctx_scratch(ctx, (n ? n : 1) * sizeof *w);
    if (!w) return cpu_oom(ctx);
    for (size_t e = 0; e < n; e++) {
      CpuNum v;
      cpu_num_load(type, cpu_host->tensor_data(x), e, &v);
      r.is_int = v.kind != CPU_NUM_FLT;
      if (r.is_int)
        w[e].u = v.v.u;
      else
        w[e].f = v.v.f;
    }
    r.in[i] = w;
  }
  size_t out_count = cpu_host->tensor_elem_count(y);
  size_t work;
  if (!cpu_mul_size(out_count, r.sum_count ? r.sum_count : 1, &work)) work = SIZE_MAX;
  cpu_host->parallel_for(work >= 65536 ? cpu_host->ctx_thread_pool(ctx) : NULL, out_count,
                         ein_outputs, &r);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, "Einsum") : NULL;
}

/* ========================================================================= */
/* Det                                                                        */
/* ========================================================================= */

static OnyxStatus* det_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  const int64_t* d = cpu_host->tensor_dims(x);
  if (rank < 2 || d[rank - 1] != d[rank - 2])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be [..., M, M]");
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, d, rank - 2, &y);
  if (st) return st;
  size_t m = (size_t)d[rank - 1], mats = cpu_dims_product(d, 0, rank - 2);
  double* a = cpu_host->ctx_scratch(ctx, (m > 0 ? m * m : 1) * sizeof *a);
  if (!a) return cpu_oom(ctx);
  int32_t type = cpu_host->tensor_elem_type(x);
  const void* p = cpu_host->tensor_data(x);
  for (size_t k = 0; k < mats; k++) {
    for (size_t i = 0; i < m * m; i++) {
      CpuNum v;
      cpu_num_load(type, p, k * m * m + i, &v);
      a[i] = cpu_num_as_double(v);
    }
    double det = 1.0; /* LU with partial pivoting */
    for (size_t c = 0; c < m && det != 0.0; c++) {
      size_t piv = c;
      for (size_t r = c + 1; r < m; r++)
        if (fabs(a[r * m + c]) > fabs(a[piv * m + c])) piv = r;
      if (a[piv * m + c] == 0.0) {
        det = 0.0;
        break;
      }
      if (piv != c) {
        for (size_t j = 0; j < m; j++) {
          double t = a[c * m + j];
          a[c * m + j] = a[piv * m + j];
          a[piv * m + j] = t;
        }
        det = -det;
      }
      det *= a[c * m + c];
      for (size_t r = c + 1; r < m; r++) {
        double f = a[r * m + c] / a[c * m + c];
        for (size_t j = c; j < m; j++)
          a[r * m + j] -= f * a[c * m + j];
      }
    }
    cpu_num_store(cpu_host->tensor_elem_type(y), cpu_host->tensor_mutable_data(y), k,
                  (CpuNum){.kind = CPU_NUM_FLT, .v.f = det});
  }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

static const OnyxTypeConstraint tc_einsum[] = {
    {"T", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)}};
static const OnyxTypeConstraint tc_det[] = {{"T", cpu_types_real, CPU_ARRAY_LEN(cpu_types_real)}};

static const CpuKernelSpec einsum_specs[] = {
    {"Einsum", 12, ONYX_OPSET_LATEST, tc_einsum, 1, cpu_ops_create, einsum_compute, cpu_ops_free,
     NULL},
    {"Det", 11, ONYX_OPSET_LATEST, tc_det, 1, cpu_ops_create, det_compute, cpu_ops_free, NULL},
};

OnyxStatus* cpu_register_einsum(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, einsum_specs, CPU_ARRAY_LEN(einsum_specs));
}
