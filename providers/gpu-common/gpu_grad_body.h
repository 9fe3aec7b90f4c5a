/* gpu_grad_body.h — what each GPU thread computes for the training kernels
 * (gpu_grad.h), written once for nvcc, hipcc and the C compiler, as
 * gpu_kernels_body.h is: gpu_grad.cu wraps these bodies in kernels,
 * gpu_emu_grad.c runs them in host loops. The formulas and their order of
 * operations follow the CPU provider's float32 kernels (cpu_grad.c,
 * cpu_optim_body.h), so that the two agree to rounding. */
#ifndef ONYX_GPU_GRAD_BODY_H
#define ONYX_GPU_GRAD_BODY_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu_grad.h"
#include "gpu_kernels_body.h"

#define GPUB_SQRT1_2      0.70710678118654752440f
#define GPUB_INV_SQRT_2PI 0.39894228040143267794f
#define GPUB_SQRT_2_PI    0.79788456080286535588f /* sqrt(2 / pi) */
#define GPUB_GELU_C       0.044715f

/* One element of an element-wise gradient; x is X or Y (see GpuGradOp). */
GPU_FN float gpub_grad_unary(int op, float dy, float x) {
  switch (op) {
  case GPU_GRAD_RELU:
    return x > 0.0f ? dy : 0.0f * dy; /* 0 * dy keeps a NaN or inf dY visible as NaN */
  case GPU_GRAD_SIGMOID:
    return dy * x * (1.0f - x);
  case GPU_GRAD_TANH:
    return dy * (1.0f - x * x);
  case GPU_GRAD_GELU: /* d/dx x Phi(x) = Phi(x) + x phi(x) */
    return dy *
           (0.5f * (1.0f + erff(x * GPUB_SQRT1_2)) + x * GPUB_INV_SQRT_2PI * expf(-0.5f * x * x));
  case GPU_GRAD_FAST_GELU: { /* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + c x^3) */
    const float t = tanhf(GPUB_SQRT_2_PI * (x + GPUB_GELU_C * x * x * x)), x2 = x * x;
    const float du = GPUB_SQRT_2_PI * (1.0f + 3.0f * GPUB_GELU_C * x2);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
  default:
    return 0.0f;
  }
}

/* Softmax grads along a line: the summand of element (dY, Y), then the
 * output from the line's float64 sum s. */
GPU_FN double gpub_softmax_grad_term(float dy, float y, int log_softmax) {
  return log_softmax ? (double)dy : (double)dy * (double)y;
}

GPU_FN float gpub_softmax_grad_out(float dy, float y, double s, int log_softmax) {
  return log_softmax ? dy - expf(y) * (float)s : y * (dy - (float)s);
}

/* Element offset of line r's first element in [outer, len, inner]. */
GPU_FN int64_t gpub_line_base(int64_t r, int64_t len, int64_t inner) {
  return (r / inner) * len * inner + r % inner;
}

GPU_FN float gpub_dropout_grad(float dy, uint8_t mask, float scale) {
  return mask ? dy * scale : 0.0f;
}

/* LayerNormalizationGrad, element j of row r: the two summands of the
 * row's sums (g and g xhat), then dX from their means mg and mgx. */
GPU_FN void gpub_ln_grad_terms(const float* dy, const float* x, const float* scale,
                               const float* mean, const float* inv, int64_t r, int64_t width,
                               int64_t j, double* g, double* gx) {
  const int64_t at = r * width + j;
  const double mu = mean[r], iv = inv[r];
  *g = (double)dy[at] * scale[j];
  *gx = *g * ((double)x[at] - mu) * iv;
}

GPU_FN float gpub_ln_grad_out(const float* dy, const float* x, const float* scale,
                              const float* mean, const float* inv, int64_t r, int64_t width,
                              int64_t j, double mg, double mgx) {
  const int64_t at = r * width + j;
  const double mu = mean[r], iv = inv[r];
  const double xh = ((double)x[at] - mu) * iv;
  return (float)(iv * ((double)dy[at] * scale[j] - mg - xh * mgx));
}

/* dScale and dBias of column c: the rows in order, in float64. */
GPU_FN void gpub_ln_grad_col(const float* dy, const float* x, const float* mean, const float* inv,
                             float* dscale, float* dbias, int64_t rows, int64_t width, int64_t c) {
  double as = 0.0, ab = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t at = r * width + c;
    ab += dy[at];
    as += (double)dy[at] * ((double)x[at] - (double)mean[r]) * (double)inv[r];
  }
  if (dscale) dscale[c] = (float)as;
  if (dbias) dbias[c] = (float)ab;
}

/* BatchNormalizationGrad: the offset of value k (of m = n sp) of channel
 * c, the inverse deviation from the sum of squared deviations q, and one
 * dX element (a = scale inv, mb = dBias / m, ms = dScale / m). */
GPU_FN int64_t gpub_bn_index(int64_t k, int64_t c, int64_t channels, int64_t sp) {
  return ((k / sp) * channels + c) * sp + k % sp;
}

GPU_FN double gpub_bn_inv(double q, double m, double epsilon) {
  return 1.0 / sqrt(q / m + epsilon);
}

GPU_FN float gpub_bn_dx(float dy, float x, double mu, double inv, double a, double mb, double ms) {
  const double xh = ((double)x - mu) * inv;
  return (float)(a * ((double)dy - mb - xh * ms));
}

/* BatchNormalization forward: a channel's coefficients from its mean and
 * variance, in float64 and rounded to float as cpu_norm.c's are; a running
 * statistic's update; one Y element. */
GPU_FN void gpub_bn_coef(float scale, float bias, double mean, double var, double epsilon, float* a,
                         float* b) {
  const double ad = (double)scale / sqrt(var + epsilon);
  *a = (float)ad;
  *b = (float)((double)bias - mean * ad);
}

GPU_FN float gpub_bn_running(float prev, double batch, double momentum) {
  return (float)((double)prev * momentum + batch * (1.0 - momentum));
}

GPU_FN float gpub_bn_apply(float x, float a, float b) {
  return x * a + b;
}

/* MaxPool output element f (of planes out_size): the maximum over the
 * window, *arg the flat index into X (-1 where the window misses X). The
 * geometry has 3 spatial dims (the host pads a lower rank with leading dims
 * of 1), so the loops visit the window in row-major order. */
GPU_FN float gpub_maxpool(const float* x, const GpuPoolGeom* g, int64_t f, int64_t* arg) {
  const int64_t p = f / g->out_size;
  int64_t o = f % g->out_size, st[3];
  for (int i = 2; i >= 0; i--) {
    st[i] = (o % g->out[i]) * g->stride[i] - g->pad[i];
    o /= g->out[i];
  }
  const float* xp = x + p * g->in_size;
  float best = -INFINITY;
  int64_t at = -1, c0 = 0, c1 = 0, c2 = 0;
  for (int64_t a = 0; a < g->kernel[0]; a++) {
    const int64_t i0 = st[0] + a * g->dil[0];
    if (i0 < 0 || i0 >= g->in[0]) continue;
    for (int64_t b = 0; b < g->kernel[1]; b++) {
      const int64_t i1 = st[1] + b * g->dil[1];
      if (i1 < 0 || i1 >= g->in[1]) continue;
      for (int64_t c = 0; c < g->kernel[2]; c++) {
        const int64_t i2 = st[2] + c * g->dil[2];
        if (i2 < 0 || i2 >= g->in[2]) continue;
        const float v = xp[(i0 * g->in[1] + i1) * g->in[2] + i2];
        if (at < 0 || v > best) {
          best = v;
          at = (i0 * g->in[1] + i1) * g->in[2] + i2;
          c0 = i0;
          c1 = i1;
          c2 = i2;
        }
      }
    }
  }
  if (at >= 0 && g->storage_order) at = c0 + g->in[0] * (c1 + g->in[1] * c2);
  *arg = at < 0 ? -1 : p * g->in_size + at;
  return best;
}

/* SoftmaxCrossEntropyLossGrad element f of [nb, c, inner]. */
GPU_FN float gpub_sce_grad(const float* lp, const double* coef, const int64_t* label, int64_t f,
                           int64_t c, int64_t inner) {
  const int64_t i = f % inner, k = (f / inner) % c, s = (f / (inner * c)) * inner + i;
  const double g = coef[s];
  if (g == 0.0) return 0.0f;
  return (float)(g * (exp((double)lp[f]) - (label[s] == k ? 1.0 : 0.0)));
}

/* GatherGrad: element f of [outer, n_groups, inner] (js, gstart: the
 * sorted positions and group starts of gpuk_gather_grad's table). */
GPU_FN float gpub_gather_grad(const float* dy, const int64_t* js, const int64_t* gstart, int64_t f,
                              int64_t n_groups, int64_t n_idx, int64_t inner) {
  const int64_t c = f % inner, g = (f / inner) % n_groups, o = f / (inner * n_groups);
  float acc = 0.0f;
  for (int64_t p = gstart[g]; p < gstart[g + 1]; p++)
    acc += dy[(o * n_idx + js[p]) * inner + c];
  return acc;
}

/* Where element f of [outer, n_groups, inner] goes in dX. */
GPU_FN int64_t gpub_gather_grad_dst(const int64_t* grow, int64_t f, int64_t n_groups,
                                    int64_t axis_len, int64_t inner) {
  const int64_t c = f % inner, g = (f / inner) % n_groups, o = f / (inner * n_groups);
  return (o * axis_len + grow[g]) * inner + c;
}

/* --- the fused optimizers ----------------------------------------------------------- */

/* The tensor of batch b that flat index i falls in (b->count <= 32: a linear
 * scan over the prefix sums). */
GPU_FN int gpub_opt_tensor(const GpuOptBatch* b, int64_t i) {
  int t = 0;
  while (t + 1 < b->count && b->start[t + 1] <= i)
    t++;
  return t;
}

/* SGD (torch.optim.SGD): d = g + wd p; with momentum buf = d on the first
 * step, else momentum buf + (1 - dampening) d, and d = buf (nesterov:
 * d + momentum buf); p' = p - lr d. */
GPU_FN void gpub_sgd(const GpuOptParams* q, const GpuOptBatch* b, int t, int64_t i) {
  const float p = b->in[0][t][i];
  float d = b->in[1][t][i];
  if (q->use_wd) d = d + q->wd * p;
  if (q->has_m) {
    const float buf = q->first ? d : b->in[2][t][i] * q->momentum + q->damp1 * d;
    if (b->out[1][t]) b->out[1][t][i] = buf;
    d = q->nesterov ? d + q->momentum * buf : buf;
  }
  if (b->out[0][t]) b->out[0][t][i] = p - q->lr * d;
}

/* AdamW (torch.optim.AdamW): m' = m + (1 - beta1)(g - m), v' = beta2 v +
 * (1 - beta2) g^2, p' = p (1 - lr wd) - (lr / bc1) m' / (sqrt(v') /
 * sqrt(bc2) + eps). */
GPU_FN void gpub_adamw(const GpuOptParams* q, const GpuOptBatch* b, int t, int64_t i) {
  const float g = b->in[1][t][i], m = b->in[2][t][i], v = b->in[3][t][i];
  const float mi = m + q->w1 * (g - m);
  const float vi = v * q->b2 + q->w2 * g * g;
  const float den = sqrtf(vi) / q->bc2s + q->eps;
  if (b->out[0][t]) b->out[0][t][i] = b->in[0][t][i] * q->decay + q->neg_step * mi / den;
  if (b->out[1][t]) b->out[1][t][i] = mi;
  if (b->out[2][t]) b->out[2][t][i] = vi;
}

/* LAMB's direction u of element i of tensor t; *mn, *vn get m' and v'. */
GPU_FN float gpub_lamb_u(const GpuOptParams* q, const GpuOptBatch* b, int t, int64_t i, float* mn,
                         float* vn) {
  const float p = b->in[0][t][i], g = b->in[1][t][i];
  *mn = q->b1 * b->in[2][t][i] + q->w1 * g;
  *vn = q->b2 * b->in[3][t][i] + q->w2 * g * g;
  return (*mn * q->ibc1) / (sqrtf(*vn * q->ibc2) + q->eps) + q->wd * p;
}

/* LAMB pass 1 for element i of tensor t: M', V', and p^2, u^2 to add. */
GPU_FN void gpub_lamb1(const GpuOptParams* q, const GpuOptBatch* b, int t, int64_t i, double* pp,
                       double* uu) {
  float mn, vn;
  const float u = gpub_lamb_u(q, b, t, i, &mn, &vn);
  if (b->out[1][t]) b->out[1][t][i] = mn;
  if (b->out[2][t]) b->out[2][t][i] = vn;
  const double p = b->in[0][t][i];
  *pp += p * p;
  *uu += (double)u * (double)u;
}

/* LAMB pass 3: p' = p - (lr ratio) u. */
GPU_FN void gpub_lamb3(const GpuOptParams* q, const GpuOptBatch* b, int t, int64_t i,
                       double ratio) {
  if (!b->out[0][t]) return;
  float mn, vn;
  const float u = gpub_lamb_u(q, b, t, i, &mn, &vn);
  b->out[0][t][i] = b->in[0][t][i] - (float)(q->lr64 * ratio) * u;
}

/* LAMB pass 2: tensor t's trust ratio from its chunk sums (2 per chunk). */
GPU_FN double gpub_lamb_ratio(const GpuOptBatch* b, int t, const double* sums) {
  double sp = 0.0, su = 0.0;
  for (int64_t c = b->cstart[t]; c < b->cstart[t + 1]; c++) {
    sp += sums[2 * c];
    su += sums[2 * c + 1];
  }
  const double np = sqrt(sp), nu = sqrt(su);
  return np > 0 && nu > 0 ? np / nu : 1.0;
}

/* The tensor and element range of chunk c of b. */
GPU_FN int gpub_chunk(const GpuOptBatch* b, int64_t c, int64_t* lo, int64_t* hi) {
  int t = 0;
  while (t + 1 < b->count && b->cstart[t + 1] <= c)
    t++;
  const int64_t n = b->start[t + 1] - b->start[t];
  *lo = (c - b->cstart[t]) * GPU_CLIP_CHUNK;
  *hi = n - *lo < GPU_CLIP_CHUNK ? n : *lo + GPU_CLIP_CHUNK;
  return t;
}

/* Flat element f of batch b. */
GPU_FN void gpub_opt_elem(const GpuOptParams* q, const GpuOptBatch* b, int64_t f) {
  const int t = gpub_opt_tensor(b, f);
  const int64_t i = f - b->start[t];
  if (q->kind == GPU_OPT_SGD)
    gpub_sgd(q, b, t, i);
  else
    gpub_adamw(q, b, t, i);
}

/* ClipGradNorm: the square of flat element f (group 0 of b), and the
 * scaled copy (group 0 of b's outputs). */
GPU_FN double gpub_clip_sq(const GpuOptBatch* b, int64_t f) {
  const int t = gpub_opt_tensor(b, f);
  const double v = b->in[0][t][f - b->start[t]];
  return v * v;
}

GPU_FN void gpub_clip_scale(const GpuOptBatch* b, int64_t f, float coef) {
  const int t = gpub_opt_tensor(b, f);
  const int64_t i = f - b->start[t];
  if (b->out[0][t]) b->out[0][t][i] = b->in[0][t][i] * coef;
}

/* From the sum of squares: state[0] = the norm, state[1] = the factor
 * (1 where no clipping: g * 1 is g). */
GPU_FN void gpub_clip_coef(double sq, double max_norm, double* state, float* total_norm) {
  const double norm = sqrt(sq), coef = max_norm / (norm + 1e-6);
  state[0] = norm;
  state[1] = coef >= 1.0 ? 1.0 : coef; /* NaN clips (and spreads), as PyTorch */
  if (total_norm) *total_norm = (float)norm;
}

/* Host side: fills b with tensors [first, first + k) of the launcher's
 * arrays (k <= GPU_OPT_MAX_TENSORS). */
static inline void gpub_opt_fill(GpuOptBatch* b, size_t first, size_t k, const int64_t* count,
                                 const float* const* const* in, float* const* const* out) {
  memset(b, 0, sizeof *b);
  b->count = (int32_t)k;
  for (size_t t = 0; t < k; t++) {
    b->start[t + 1] = b->start[t] + count[first + t];
    b->cstart[t + 1] = b->cstart[t] + (count[first + t] + GPU_CLIP_CHUNK - 1) / GPU_CLIP_CHUNK;
    for (int g = 0; g < 4; g++)
      b->in[g][t] = in[g] ? in[g][first + t] : NULL;
    for (int g = 0; g < 3; g++)
      b->out[g][t] = out[g] ? out[g][first + t] : NULL;
  }
}

#endif /* ONYX_GPU_GRAD_BODY_H */
