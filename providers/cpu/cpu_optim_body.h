/* cpu_optim_body.h — the inner loops of the fused optimizers
 * (cpu_optim.c), included there once per element type with OPT_T (float
 * or double) and OPT_S (the name suffix) defined. Each function works on
 * elements [b, e) of tensor t of an OptJob and is always inlined into
 * cpu_optim.c's per-ISA chunk runners, so that every ISA gets its own
 * vector code. Arithmetic is in OPT_T, in the order of PyTorch's CPU
 * kernels (docs/training.md, "Optimizer ops"); the file is compiled with
 * -fno-math-errno so that sqrt vectorizes. Sums of squares go to eight
 * float64 lanes in a fixed order, so they do not depend on the ISA or the
 * thread count. */

#define OPT_CAT2(a, b) a##_##b
#define OPT_CAT(a, b)  OPT_CAT2(a, b)
#define OPT_FN(name)   OPT_CAT(name, OPT_S)

/* Sum of the eight lanes, pairwise in a fixed order. */
#ifndef OPT_LANES_SUM
#define OPT_LANES_SUM(a)                                                                           \
  ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7])))
#endif

/* SGD (torch.optim.SGD): d = g + wd * p; with momentum, buf = d on the
 * first step, else momentum * buf + (1 - dampening) * d, and d = buf
 * (nesterov: d + momentum * buf); p' = p - lr * d. */
OPT_INLINE void OPT_FN(opt_sgd)(const OptJob* j, size_t t, size_t b, size_t e) {
  const OPT_T* restrict p = (const OPT_T*)j->in[0][t];
  const OPT_T* restrict g = (const OPT_T*)j->in[1][t];
  const OPT_T* restrict m = j->has_m ? (const OPT_T*)j->in[2][t] : NULL;
  OPT_T* restrict po = (OPT_T*)j->out[0][t];
  OPT_T* restrict mo = j->has_m ? (OPT_T*)j->out[1][t] : NULL;
  const OPT_T lr = (OPT_T)j->lr, wd = (OPT_T)j->s->wd, mom = (OPT_T)j->s->momentum;
  const OPT_T damp1 = (OPT_T)(1.0 - j->s->dampening);
  const bool use_wd = j->s->wd != 0, has_m = j->has_m, first = j->first, nesterov = j->s->nesterov;
  for (size_t i = b; i < e; i++) {
    OPT_T d = g[i];
    if (use_wd) d = d + wd * p[i];
    if (has_m) {
      const OPT_T buf = first ? d : m[i] * mom + damp1 * d;
      if (mo) mo[i] = buf;
      d = nesterov ? d + mom * buf : buf;
    }
    if (po) po[i] = p[i] - lr * d;
  }
}

/* AdamW (torch.optim.AdamW): p' = p * (1 - lr * wd) - (lr / bc1) * m' /
 * (sqrt(v') / sqrt(bc2) + eps) with m' = m + (1 - beta1) * (g - m),
 * v' = beta2 * v + (1 - beta2) * g^2. */
OPT_INLINE void OPT_FN(opt_adamw)(const OptJob* j, size_t t, size_t b, size_t e) {
  const OPT_T* restrict p = (const OPT_T*)j->in[0][t];
  const OPT_T* restrict g = (const OPT_T*)j->in[1][t];
  const OPT_T* restrict m = (const OPT_T*)j->in[2][t];
  const OPT_T* restrict v = (const OPT_T*)j->in[3][t];
  OPT_T* restrict po = (OPT_T*)j->out[0][t];
  OPT_T* restrict mo = (OPT_T*)j->out[1][t];
  OPT_T* restrict vo = (OPT_T*)j->out[2][t];
  const OPT_T decay = (OPT_T)j->decay, w1 = (OPT_T)(1.0 - j->s->beta1), b2 = (OPT_T)j->s->beta2,
              w2 = (OPT_T)(1.0 - j->s->beta2), bc2s = (OPT_T)j->bc2_sqrt, eps = (OPT_T)j->s->eps,
              neg_step = (OPT_T)-j->step_size;
  for (size_t i = b; i < e; i++) {
    const OPT_T gi = g[i];
    const OPT_T mi = m[i] + w1 * (gi - m[i]);
    const OPT_T vi = v[i] * b2 + w2 * gi * gi;
    const OPT_T den = OPT_SQRT(vi) / bc2s + eps;
    if (po) po[i] = p[i] * decay + neg_step * mi / den;
    if (mo) mo[i] = mi;
    if (vo) vo[i] = vi;
  }
}

/* LAMB's update direction u = (m' / bc1) / (sqrt(v' / bc2) + eps) + wd * p
 * for element i; *mn and *vn get m' and v'. */
OPT_INLINE OPT_T OPT_FN(opt_lamb_u)(const OptJob* j, OPT_T p, OPT_T g, OPT_T m, OPT_T v, OPT_T* mn,
                                    OPT_T* vn) {
  const OPT_T b1 = (OPT_T)j->s->beta1, w1 = (OPT_T)(1.0 - j->s->beta1), b2 = (OPT_T)j->s->beta2,
              w2 = (OPT_T)(1.0 - j->s->beta2), ibc1 = (OPT_T)j->inv_bc1, ibc2 = (OPT_T)j->inv_bc2,
              eps = (OPT_T)j->s->eps, wd = (OPT_T)j->s->wd;
  *mn = b1 * m + w1 * g;
  *vn = b2 * v + w2 * g * g;
  return (*mn * ibc1) / (OPT_SQRT(*vn * ibc2) + eps) + wd * p;
}

/* LAMB pass 1: M', V' and the chunk's sums of p^2 and u^2 (sums[0], [1]). */
OPT_INLINE void OPT_FN(opt_lamb1)(const OptJob* j, size_t t, size_t b, size_t e, double* sums) {
  const OPT_T* restrict p = (const OPT_T*)j->in[0][t];
  const OPT_T* restrict g = (const OPT_T*)j->in[1][t];
  const OPT_T* restrict m = (const OPT_T*)j->in[2][t];
  const OPT_T* restrict v = (const OPT_T*)j->in[3][t];
  OPT_T* restrict mo = (OPT_T*)j->out[1][t];
  OPT_T* restrict vo = (OPT_T*)j->out[2][t];
  double pp[8] = {0}, uu[8] = {0};
  size_t i = b;
  for (; i + 8 <= e; i += 8)
    for (size_t l = 0; l < 8; l++) {
      OPT_T mn, vn;
      const OPT_T u = OPT_FN(opt_lamb_u)(j, p[i + l], g[i + l], m[i + l], v[i + l], &mn, &vn);
      if (mo) mo[i + l] = mn;
      if (vo) vo[i + l] = vn;
      pp[l] += (double)p[i + l] * (double)p[i + l];
      uu[l] += (double)u * (double)u;
    }
  for (size_t l = 0; i < e; i++, l++) {
    OPT_T mn, vn;
    const OPT_T u = OPT_FN(opt_lamb_u)(j, p[i], g[i], m[i], v[i], &mn, &vn);
    if (mo) mo[i] = mn;
    if (vo) vo[i] = vn;
    pp[l] += (double)p[i] * (double)p[i];
    uu[l] += (double)u * (double)u;
  }
  sums[0] = OPT_LANES_SUM(pp);
  sums[1] = OPT_LANES_SUM(uu);
}

/* LAMB pass 2: p' = p - lr * ratio_t * u (u recomputed from the inputs,
 * bit-identical to pass 1's). */
OPT_INLINE void OPT_FN(opt_lamb2)(const OptJob* j, size_t t, size_t b, size_t e) {
  const OPT_T* restrict p = (const OPT_T*)j->in[0][t];
  const OPT_T* restrict g = (const OPT_T*)j->in[1][t];
  const OPT_T* restrict m = (const OPT_T*)j->in[2][t];
  const OPT_T* restrict v = (const OPT_T*)j->in[3][t];
  OPT_T* restrict po = (OPT_T*)j->out[0][t];
  if (!po) return;
  const OPT_T scale = (OPT_T)(j->lr * j->ratio[t]);
  for (size_t i = b; i < e; i++) {
    OPT_T mn, vn;
    const OPT_T u = OPT_FN(opt_lamb_u)(j, p[i], g[i], m[i], v[i], &mn, &vn);
    po[i] = p[i] - scale * u;
  }
}

/* ClipGradNorm pass 1: the chunk's sum of g^2. */
OPT_INLINE double OPT_FN(opt_sumsq)(const OptJob* j, size_t t, size_t b, size_t e) {
  const OPT_T* restrict g = (const OPT_T*)j->in[0][t];
  double a[8] = {0};
  size_t i = b;
  for (; i + 8 <= e; i += 8)
    for (size_t l = 0; l < 8; l++)
      a[l] += (double)g[i + l] * (double)g[i + l];
  for (size_t l = 0; i < e; i++, l++)
    a[l] += (double)g[i] * (double)g[i];
  return OPT_LANES_SUM(a);
}

/* ClipGradNorm pass 2: g' = g * coef (a copy when coef is 1). */
OPT_INLINE void OPT_FN(opt_scale)(const OptJob* j, size_t t, size_t b, size_t e) {
  const OPT_T* restrict g = (const OPT_T*)j->in[0][t];
  OPT_T* restrict go = (OPT_T*)j->out[0][t];
  if (!go) return;
  if (!j->clip) {
    memcpy(go + b, g + b, (e - b) * sizeof *g);
    return;
  }
  const OPT_T c = (OPT_T)j->coef;
  for (size_t i = b; i < e; i++)
    go[i] = g[i] * c;
}

#undef OPT_CAT2
#undef OPT_CAT
#undef OPT_FN
