/* gpu_emu_grad.c — the host emulation of the training kernels (gpu_grad.h)
 * for the test-only provider "gpuemu": each launcher runs the per-element
 * and per-line bodies of gpu_grad_body.h in plain loops, as gpu_emu.c does
 * for gpu_kernels.h. The softmax grads' line sums are taken in element
 * order here; the device adds the block's partials as a tree (both in
 * float64). Never part of libonyx_ep_cuda.so or libonyx_ep_rocm.so. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_grad.h"
#include "gpu_grad_body.h"

int gpuk_grad_unary(GpuGradOp op, const float* dy, const float* x, float* dx, int64_t n,
                    void* stream) {
  (void)stream;
  for (int64_t i = 0; i < n; i++)
    dx[i] = gpub_grad_unary(op, dy[i], x[i]);
  return 0;
}

int gpuk_dropout_grad(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale,
                      void* stream) {
  (void)stream;
  for (int64_t i = 0; i < n; i++)
    dx[i] = gpub_dropout_grad(dy[i], mask[i], scale);
  return 0;
}

int gpuk_softmax_grad(const float* dy, const float* y, float* dx, int64_t outer, int64_t len,
                      int64_t inner, int log, void* stream) {
  (void)stream;
  for (int64_t r = 0; r < outer * inner; r++) {
    const int64_t base = gpub_line_base(r, len, inner);
    double s = 0.0;
    for (int64_t j = 0; j < len; j++)
      s += gpub_softmax_grad_term(dy[base + j * inner], y[base + j * inner], log);
    for (int64_t j = 0; j < len; j++) {
      const int64_t at = base + j * inner;
      dx[at] = gpub_softmax_grad_out(dy[at], y[at], s, log);
    }
  }
  return 0;
}

int gpuk_layernorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t rows,
                        int64_t width, void* stream) {
  (void)stream;
  if (!width) return 0;
  for (int64_t r = 0; r < rows; r++) {
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = 0; j < width; j++) {
      double g, gx;
      gpub_ln_grad_terms(dy, x, scale, mean, inv, r, width, j, &g, &gx);
      sg += g;
      sgx += gx;
    }
    const double mg = sg / (double)width, mgx = sgx / (double)width;
    for (int64_t j = 0; j < width; j++)
      dx[r * width + j] = gpub_ln_grad_out(dy, x, scale, mean, inv, r, width, j, mg, mgx);
  }
  if (dscale || dbias)
    for (int64_t c = 0; c < width; c++)
      gpub_ln_grad_col(dy, x, mean, inv, dscale, dbias, rows, width, c);
  return 0;
}

int gpuk_batchnorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t n,
                        int64_t c, int64_t sp, double epsilon, void* stream) {
  (void)stream;
  const int64_t m = n * sp;
  for (int64_t ch = 0; ch < c; ch++) {
    double mu, iv;
    if (mean) {
      mu = mean[ch];
      iv = inv[ch];
    } else {
      double acc = 0.0, q = 0.0;
      for (int64_t k = 0; k < m; k++)
        acc += x[gpub_bn_index(k, ch, c, sp)];
      mu = acc / (double)m;
      for (int64_t k = 0; k < m; k++) {
        const double d = (double)x[gpub_bn_index(k, ch, c, sp)] - mu;
        q += d * d;
      }
      iv = gpub_bn_inv(q, (double)m, epsilon);
    }
    double sb = 0.0, ss = 0.0;
    for (int64_t k = 0; k < m; k++) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      sb += dy[at];
      ss += (double)dy[at] * ((double)x[at] - mu) * iv;
    }
    if (dbias) dbias[ch] = (float)sb;
    if (dscale) dscale[ch] = (float)ss;
    const double a = (double)scale[ch] * iv, mb = sb / (double)m, ms = ss / (double)m;
    for (int64_t k = 0; k < m; k++) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      dx[at] = gpub_bn_dx(dy[at], x[at], mu, iv, a, mb, ms);
    }
  }
  return 0;
}

int gpuk_batchnorm_fwd(const float* x, const float* scale, const float* bias, const float* mean,
                       const float* var, float* y, float* run_mean, float* run_var, int64_t n,
                       int64_t c, int64_t sp, double epsilon, double momentum, int train,
                       void* stream) {
  (void)stream;
  const int64_t m = n * sp;
  for (int64_t ch = 0; ch < c; ch++) {
    double mu, v;
    if (train) {
      double acc = 0.0, q = 0.0;
      for (int64_t k = 0; k < m; k++)
        acc += x[gpub_bn_index(k, ch, c, sp)];
      mu = m > 0 ? acc / (double)m : 0.0;
      for (int64_t k = 0; k < m; k++) {
        const double d = (double)x[gpub_bn_index(k, ch, c, sp)] - mu;
        q += d * d;
      }
      v = m > 0 ? q / (double)m : 0.0;
      if (run_mean) run_mean[ch] = gpub_bn_running(mean[ch], mu, momentum);
      if (run_var) run_var[ch] = gpub_bn_running(var[ch], v, momentum);
    } else {
      mu = mean[ch];
      v = var[ch];
    }
    float a, b;
    gpub_bn_coef(scale[ch], bias[ch], mu, v, epsilon, &a, &b);
    for (int64_t k = 0; k < m; k++) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      y[at] = gpub_bn_apply(x[at], a, b);
    }
  }
  return 0;
}

int gpuk_maxpool(const float* x, float* y, int64_t* ind, const GpuPoolGeom* g, void* stream) {
  (void)stream;
  const int64_t n = g->planes * g->out_size;
  for (int64_t f = 0; f < n; f++) {
    int64_t arg;
    y[f] = gpub_maxpool(x, g, f, &arg);
    if (ind) ind[f] = arg;
  }
  return 0;
}

int gpuk_optimizer(const GpuOptParams* p, size_t n, const int64_t* count,
                   const float* const* const* in, float* const* const* out, void* stream) {
  (void)stream;
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, out);
    for (int64_t f = 0; f < b.start[k]; f++)
      gpub_opt_elem(p, &b, f);
  }
  return 0;
}

int gpuk_clip_grad_norm(size_t n, const int64_t* count, const float* const* g, float* const* out,
                        double max_norm, float* total_norm, void* stream) {
  (void)stream;
  const float* const* in[4] = {g, NULL, NULL, NULL};
  float* const* outs[3] = {out, NULL, NULL};
  double sq = 0.0;
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, outs);
    for (int64_t c = 0; c < b.start[k]; c += GPU_CLIP_CHUNK) { /* the device's chunks */
      const int64_t e = b.start[k] - c < GPU_CLIP_CHUNK ? b.start[k] : c + GPU_CLIP_CHUNK;
      double part = 0.0;
      for (int64_t f = c; f < e; f++)
        part += gpub_clip_sq(&b, f);
      sq += part;
    }
  }
  double state[2];
  gpub_clip_coef(sq, max_norm, state, total_norm);
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, outs);
    for (int64_t f = 0; f < b.start[k]; f++)
      gpub_clip_scale(&b, f, (float)state[1]);
  }
  return 0;
}

int gpuk_lamb(const GpuOptParams* p, size_t n, const int64_t* count, const float* const* const* in,
              float* const* const* out, void* stream) {
  (void)stream;
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, out);
    const int64_t chunks = b.cstart[k];
    double* sums = malloc((size_t)(chunks ? chunks : 1) * 2 * sizeof(double));
    double ratio[GPU_OPT_MAX_TENSORS];
    if (!sums) return 1;
    for (int64_t c = 0; c < chunks; c++) {
      int64_t lo, hi;
      const int t = gpub_chunk(&b, c, &lo, &hi);
      double pp = 0.0, uu = 0.0;
      for (int64_t i = lo; i < hi; i++)
        gpub_lamb1(p, &b, t, i, &pp, &uu);
      sums[2 * c] = pp;
      sums[2 * c + 1] = uu;
    }
    for (size_t t = 0; t < k; t++)
      ratio[t] = gpub_lamb_ratio(&b, (int)t, sums);
    for (int64_t f = 0; f < b.start[k]; f++) {
      const int t = gpub_opt_tensor(&b, f);
      gpub_lamb3(p, &b, t, f - b.start[t], ratio[t]);
    }
    free(sums);
  }
  return 0;
}

int gpuk_sce_grad(const float* log_prob, float* dx, const void* coef_label, int64_t nb, int64_t c,
                  int64_t inner, void* stream) {
  (void)stream;
  const double* coef = coef_label;
  const int64_t* label = (const int64_t*)(coef + nb * inner);
  for (int64_t f = 0; f < nb * c * inner; f++)
    dx[f] = gpub_sce_grad(log_prob, coef, label, f, c, inner);
  return 0;
}

int gpuk_gather_grad(const float* dy, float* dx, const int64_t* table, int64_t n_idx,
                     int64_t n_groups, int64_t outer, int64_t axis_len, int64_t inner,
                     void* stream) {
  (void)stream;
  memset(dx, 0, (size_t)(outer * axis_len * inner) * sizeof *dx);
  const int64_t *js = table, *gstart = table + n_idx, *grow = gstart + n_groups + 1;
  for (int64_t f = 0; f < outer * n_groups * inner; f++)
    dx[gpub_gather_grad_dst(grow, f, n_groups, axis_len, inner)] =
        gpub_gather_grad(dy, js, gstart, f, n_groups, n_idx, inner);
  return 0;
}
