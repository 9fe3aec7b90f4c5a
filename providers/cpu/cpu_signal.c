/* cpu_signal.c — signal processing: DFT (opsets 17 and 20: forward,
 * inverse, onesided real-to-complex and complex-to-real, any length), STFT,
 * HannWindow / HammingWindow / BlackmanWindow and MelWeightMatrix.
 *
 * The FFT is a recursive mixed-radix decimation in time over the prime
 * factors of n (radix-2 butterflies, a direct O(p) combine for odd primes up
 * to 61) with twiddles computed once per plan in double; lengths with a
 * larger prime factor use Bluestein's chirp-z transform through a
 * power-of-two FFT. All arithmetic is in double whatever the element type. */
#include "cpu_quant.h"
#include "cpu_util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* --- FFT ---------------------------------------------------------------------------- */

#define FFT_MAX_RADIX   61
#define FFT_MAX_FACTORS 64
/* Longest transform: keeps buffer sizes and k^2 (Bluestein) from overflow. */
#define DFT_MAX_LEN ((int64_t)1 << 31)

typedef struct Fft {
  size_t n;
  double* tw; /* n complex: exp(-2 pi i k / n) */
  size_t factors[FFT_MAX_FACTORS];
  size_t nf;
  /* Bluestein: a power-of-two plan `sub` of length m, the chirp c[k] =
   * exp(-pi i k^2 / n) and the transform of the conjugate chirp. */
  struct Fft* sub;
  size_t m;
  double* chirp;
  double* bfft;
} Fft;

static void fft_free(Fft* f) {
  if (!f) return;
  fft_free(f->sub);
  free(f->tw);
  free(f->chirp);
  free(f->bfft);
  free(f);
}

static void fft_exec(const Fft* f, const double* in, double* out, double* work);

/* Doubles of work memory fft_exec needs. */
static size_t fft_work_size(const Fft* f) {
  return f->sub ? 4 * f->m : 0;
}

static Fft* fft_new(size_t n) {
  Fft* f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->n = n;
  size_t rem = n;
  bool large = false;
  while (rem % 4 == 0 && f->nf < FFT_MAX_FACTORS) { /* radix 4 first */
    f->factors[f->nf++] = 4;
    rem /= 4;
  }
  for (size_t p = 2; rem > 1 && f->nf < FFT_MAX_FACTORS;) {
    if (p * p > rem) p = rem; /* rem is prime */
    if (rem % p == 0) {
      if (p > FFT_MAX_RADIX) large = true;
      f->factors[f->nf++] = p;
      rem /= p;
    } else {
      p++;
    }
  }
  if (!large) {
    f->tw = malloc(2 * (n ? n : 1) * sizeof(double));
    if (!f->tw) goto fail;
    for (size_t k = 0; k < n; k++) {
      const double a = -2.0 * M_PI * (double)k / (double)n;
      f->tw[2 * k] = cos(a);
      f->tw[2 * k + 1] = sin(a);
    }
    return f;
  }
  f->nf = 0;
  f->m = 1;
  while (f->m < 2 * n - 1)
    f->m <<= 1;
  f->sub = fft_new(f->m);
  f->chirp = malloc(2 * n * sizeof(double));
  f->bfft = malloc(2 * f->m * sizeof(double));
  double* b = calloc(2 * f->m, sizeof(double));
  if (!f->sub || !f->chirp || !f->bfft || !b) {
    free(b);
    goto fail;
  }
  for (size_t k = 0; k < n; k++) {
    /* k^2 mod 2n keeps the angle accurate for large k. */
    const unsigned long long k2 = (unsigned long long)k * k % (2ULL * n);
    const double a = -M_PI * (double)k2 / (double)n;
    f->chirp[2 * k] = cos(a);
    f->chirp[2 * k + 1] = sin(a);
    b[2 * k] = f->chirp[2 * k];
    b[2 * k + 1] = -f->chirp[2 * k + 1];
    if (k) {
      b[2 * (f->m - k)] = b[2 * k];
      b[2 * (f->m - k) + 1] = b[2 * k + 1];
    }
  }
  fft_exec(f->sub, b, f->bfft, NULL);
  free(b);
  return f;
fail:
  fft_free(f);
  return NULL;
}

/* out (n complex, stride 1) = DFT of in[0], in[is], ... ; tw of the top plan. */
static void fft_rec(const Fft* f, const double* in, size_t is, double* out, size_t n, size_t fi) {
  if (n == 1) {
    out[0] = in[0];
    out[1] = in[1];
    return;
  }
  const size_t p = f->factors[fi], m = n / p, tstep = f->n / n, pstep = f->n / p;
  if (m == 1) {
    for (size_t j = 0; j < p; j++) {
      out[2 * j] = in[2 * j * is];
      out[2 * j + 1] = in[2 * j * is + 1];
    }
  } else {
    for (size_t j = 0; j < p; j++)
      fft_rec(f, in + 2 * j * is, is * p, out + 2 * j * m, m, fi + 1);
  }
  double t[2 * FFT_MAX_RADIX];
  for (size_t k = 0; k < m; k++) {
    for (size_t j = 0; j < p; j++) {
      const double* x = out + 2 * (j * m + k);
      const double* w = f->tw + 2 * (j * k * tstep);
      t[2 * j] = x[0] * w[0] - x[1] * w[1];
      t[2 * j + 1] = x[0] * w[1] + x[1] * w[0];
    }
    if (p == 2) {
      double* a = out + 2 * k;
      double* b = out + 2 * (m + k);
      a[0] = t[0] + t[2], a[1] = t[1] + t[3];
      b[0] = t[0] - t[2], b[1] = t[1] - t[3];
      continue;
    }
    if (p == 4) { /* W4 = -i */
      const double s0r = t[0] + t[4], s0i = t[1] + t[5], d0r = t[0] - t[4], d0i = t[1] - t[5];
      const double s1r = t[2] + t[6], s1i = t[3] + t[7], d1r = t[2] - t[6], d1i = t[3] - t[7];
      out[2 * k] = s0r + s1r, out[2 * k + 1] = s0i + s1i;
      out[2 * (m + k)] = d0r + d1i, out[2 * (m + k) + 1] = d0i - d1r;
      out[2 * (2 * m + k)] = s0r - s1r, out[2 * (2 * m + k) + 1] = s0i - s1i;
      out[2 * (3 * m + k)] = d0r - d1i, out[2 * (3 * m + k) + 1] = d0i + d1r;
      continue;
    }
    for (size_t q = 0; q < p; q++) {
      double re = 0, im = 0;
      for (size_t j = 0; j < p; j++) {
        const double* w = f->tw + 2 * (((j * q) % p) * pstep);
        re += t[2 * j] * w[0] - t[2 * j + 1] * w[1];
        im += t[2 * j] * w[1] + t[2 * j + 1] * w[0];
      }
      out[2 * (q * m + k)] = re;
      out[2 * (q * m + k) + 1] = im;
    }
  }
}

/* Forward DFT of n complex values (interleaved); in and out must differ. */
static void fft_exec(const Fft* f, const double* in, double* out, double* work) {
  if (f->n == 0) return;
  if (!f->sub) {
    fft_rec(f, in, 1, out, f->n, 0);
    return;
  }
  const size_t n = f->n, m = f->m;
  double* a = work;
  double* fa = work + 2 * m;
  for (size_t k = 0; k < n; k++) {
    const double* c = f->chirp + 2 * k;
    a[2 * k] = in[2 * k] * c[0] - in[2 * k + 1] * c[1];
    a[2 * k + 1] = in[2 * k] * c[1] + in[2 * k + 1] * c[0];
  }
  memset(a + 2 * n, 0, 2 * (m - n) * sizeof(double));
  fft_exec(f->sub, a, fa, NULL);
  /* Pointwise product, conjugated so that a forward FFT gives the inverse. */
  for (size_t k = 0; k < m; k++) {
    const double* b = f->bfft + 2 * k;
    const double re = fa[2 * k] * b[0] - fa[2 * k + 1] * b[1];
    const double im = fa[2 * k] * b[1] + fa[2 * k + 1] * b[0];
    fa[2 * k] = re;
    fa[2 * k + 1] = -im;
  }
  fft_exec(f->sub, fa, a, NULL);
  for (size_t k = 0; k < n; k++) {
    const double re = a[2 * k] / (double)m, im = -a[2 * k + 1] / (double)m;
    const double* c = f->chirp + 2 * k;
    out[2 * k] = re * c[0] - im * c[1];
    out[2 * k + 1] = re * c[1] + im * c[0];
  }
}

/* Buffers of one worker: input and output lines and the FFT's work. */
typedef struct FftBufs {
  double *in, *out, *work;
} FftBufs;

static bool bufs_alloc(FftBufs* b, const Fft* f) {
  const size_t n = f->n ? f->n : 1;
  b->in = malloc((4 * n + fft_work_size(f)) * sizeof(double));
  if (!b->in) return false;
  b->out = b->in + 2 * n;
  b->work = b->out + 2 * n;
  return true;
}

/* b->out = DFT (or unnormalized inverse DFT) of b->in. */
static void fft_dir(const Fft* f, FftBufs* b, bool inverse) {
  const size_t n = f->n;
  if (inverse)
    for (size_t k = 0; k < n; k++)
      b->in[2 * k + 1] = -b->in[2 * k + 1];
  fft_exec(f, b->in, b->out, b->work);
  if (inverse)
    for (size_t k = 0; k < n; k++)
      b->out[2 * k + 1] = -b->out[2 * k + 1];
}

/* The last plan a node used, kept for its next run: taken and given back
 * atomically, so concurrent runs of a node each get a plan of their own. */
typedef _Atomic(Fft*) FftCache;

static Fft* plan_take(FftCache* c, size_t n) {
  Fft* f = atomic_exchange(c, NULL);
  if (f && f->n == n) return f;
  fft_free(f);
  return fft_new(n);
}

static void plan_put(FftCache* c, Fft* f) {
  fft_free(atomic_exchange(c, f));
}

/* --- DFT -------------------------------------------------------------------------------- */

/* DFT and STFT state. */
typedef struct DftState {
  FftCache cache;
  int opset20;
  int64_t axis; /* opset 17's attribute */
  int inverse, onesided;
} DftState;

static void dft_release(void* state) {
  DftState* s = state;
  if (!s) return;
  fft_free(atomic_load(&s->cache));
  free(s);
}

static OnyxStatus* dft_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  DftState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  atomic_init(&s->cache, NULL);
  s->opset20 = cpu_host->node_since_version(node) >= 20;
  s->axis = cpu_host->node_attr_int(node, "axis", 1);
  s->inverse = cpu_host->node_attr_int(node, "inverse", 0) != 0;
  /* STFT's onesided defaults to 1, DFT's to 0. */
  s->onesided = cpu_host->node_attr_int(node, "onesided", user_data ? 1 : 0) != 0;
  *state = s;
  return NULL;
}

/* A scalar integer input; *present false when absent. */
static OnyxStatus* scalar_int(OnyxKernelContext* ctx, size_t i, const char* what, int64_t* v,
                              bool* present) {
  *present = false;
  if (i >= cpu_host->ctx_input_count(ctx)) return NULL;
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (!t) return NULL;
  int64_t vals[1];
  size_t n = 0;
  OnyxStatus* st = cpu_read_ints(ctx, t, what, vals, 1, &n);
  if (st) return st;
  if (n != 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be a scalar", what);
  *v = vals[0];
  *present = true;
  return NULL;
}

typedef struct DftJob {
  const Fft* f;
  int32_t type;
  const void* x;
  void* y;
  size_t n_in, inner, comp, out_len, out_comp, len;
  int inverse, onesided;
  int failed;
} DftJob;

static void dft_lines(void* user, size_t begin, size_t end) {
  DftJob* j = user;
  FftBufs b;
  if (!bufs_alloc(&b, j->f)) {
    j->failed = 1;
    return;
  }
  const size_t L = j->len;
  for (size_t line = begin; line < end; line++) {
    const size_t o = line / j->inner, i = line % j->inner;
    const size_t in_base = o * j->n_in * j->inner + i, out_base = o * j->out_len * j->inner + i;
    memset(b.in, 0, 2 * L * sizeof(double));
    if (j->inverse && j->onesided) {
      /* Complex-to-real: the first L/2+1 bins, extended by symmetry. */
      const size_t half = L / 2 + 1;
      for (size_t k = 0; k < half && k < j->n_in; k++) {
        const size_t e = (in_base + k * j->inner) * j->comp;
        const double re = cpu_q_load(j->type, j->x, e);
        const double im = j->comp == 2 ? cpu_q_load(j->type, j->x, e + 1) : 0.0;
        const bool self = k == 0 || 2 * k == L;
        b.in[2 * k] = re;
        b.in[2 * k + 1] = self ? 0.0 : im;
        if (!self) {
          b.in[2 * (L - k)] = re;
          b.in[2 * (L - k) + 1] = -im;
        }
      }
    } else {
      for (size_t k = 0; k < L && k < j->n_in; k++) {
        const size_t e = (in_base + k * j->inner) * j->comp;
        b.in[2 * k] = cpu_q_load(j->type, j->x, e);
        b.in[2 * k + 1] = j->comp == 2 ? cpu_q_load(j->type, j->x, e + 1) : 0.0;
      }
    }
    fft_dir(j->f, &b, j->inverse);
    const double scale = j->inverse && L ? 1.0 / (double)L : 1.0;
    for (size_t k = 0; k < j->out_len; k++) {
      const size_t e = (out_base + k * j->inner) * j->out_comp;
      cpu_q_store_float(j->type, j->y, e, b.out[2 * k] * scale);
      if (j->out_comp == 2) cpu_q_store_float(j->type, j->y, e + 1, b.out[2 * k + 1] * scale);
    }
  }
  free(b.in);
}

static OnyxStatus* dft_compute(void* state, OnyxKernelContext* ctx) {
  DftState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* xd = cpu_host->tensor_dims(x);
  if (r < 2 || r > CPU_MAX_RANK || (xd[r - 1] != 1 && xd[r - 1] != 2))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "input must have rank >= 2 and a last dim of 1 (real) or 2 (complex)");
  int64_t axis = s->opset20 ? -2 : s->axis, len = 0;
  bool has_axis = false, has_len = false;
  OnyxStatus* st = scalar_int(ctx, 1, "dft_length", &len, &has_len);
  if (!st && s->opset20) st = scalar_int(ctx, 2, "axis", &axis, &has_axis);
  if (st) return st;
  const int64_t ax = axis < 0 ? axis + (int64_t)r : axis;
  if (ax < 0 || ax > (int64_t)r - 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "axis %lld is out of range for rank %zu (the last dim holds the complex "
                         "parts)",
                         (long long)axis, r);
  const size_t n_in = (size_t)xd[ax];
  if (has_len && len < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dft_length must be >= 1, got %lld",
                         (long long)len);
  if (!has_len) len = s->inverse && s->onesided ? 2 * ((int64_t)n_in - 1) : (int64_t)n_in;
  if (len < 0) len = 0;
  if (len > DFT_MAX_LEN)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dft_length %lld is too large (max %lld)",
                         (long long)len, (long long)DFT_MAX_LEN);
  DftJob j = {.type = cpu_host->tensor_elem_type(x),
              .x = cpu_host->tensor_data(x),
              .n_in = n_in,
              .inner = cpu_dims_product(xd, (size_t)ax + 1, r - 1),
              .comp = (size_t)xd[r - 1],
              .len = (size_t)len,
              .inverse = s->inverse,
              .onesided = s->onesided};
  j.out_len = !s->inverse && s->onesided ? j.len / 2 + 1 : j.len;
  j.out_comp = s->inverse && s->onesided ? 1 : 2;
  if (j.len == 0) j.out_len = 0;
  int64_t od[CPU_MAX_RANK];
  memcpy(od, xd, r * sizeof *od);
  od[ax] = (int64_t)j.out_len;
  od[r - 1] = (int64_t)j.out_comp;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y))) return st;
  j.y = cpu_host->tensor_mutable_data(y);
  const size_t lines = cpu_dims_product(xd, 0, (size_t)ax) * j.inner;
  if (lines == 0 || j.out_len == 0) return NULL;
  Fft* f = plan_take(&s->cache, j.len);
  if (!f) return cpu_oom(ctx);
  j.f = f;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), lines, dft_lines, &j);
  plan_put(&s->cache, f);
  return j.failed ? cpu_oom(ctx) : NULL;
}

/* --- STFT ---------------------------------------------------------------------------------- */

typedef struct StftJob {
  const Fft* f;
  int32_t type, wtype;
  const void *x, *w;
  void* y;
  size_t len, comp, frames, step, fl, bins;
  int failed;
} StftJob;

/* One (batch, frame) pair per index. */
static void stft_frames(void* user, size_t begin, size_t end) {
  StftJob* j = user;
  FftBufs b;
  if (!bufs_alloc(&b, j->f)) {
    j->failed = 1;
    return;
  }
  for (size_t q = begin; q < end; q++) {
    const size_t batch = q / j->frames, fr = q % j->frames;
    const size_t start = (batch * j->len + fr * j->step) * j->comp;
    for (size_t k = 0; k < j->fl; k++) {
      const double w = j->w ? cpu_q_load(j->wtype, j->w, k) : 1.0;
      b.in[2 * k] = w * cpu_q_load(j->type, j->x, start + k * j->comp);
      b.in[2 * k + 1] = j->comp == 2 ? w * cpu_q_load(j->type, j->x, start + k * j->comp + 1) : 0;
    }
    fft_dir(j->f, &b, false);
    for (size_t k = 0; k < j->bins; k++) {
      cpu_q_store_float(j->type, j->y, 2 * (q * j->bins + k), b.out[2 * k]);
      cpu_q_store_float(j->type, j->y, 2 * (q * j->bins + k) + 1, b.out[2 * k + 1]);
    }
  }
  free(b.in);
}

static OnyxStatus* stft_compute(void* state, OnyxKernelContext* ctx) {
  DftState* s = state;
  const int onesided = s->onesided;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* w = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  const int64_t* xd = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 3 || (xd[2] != 1 && xd[2] != 2))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "signal must be [batch, length, 1 or 2], got rank %zu",
                         cpu_host->tensor_rank(x));
  int64_t step = 0, fl = 0;
  bool has_step, has_fl;
  OnyxStatus* st = scalar_int(ctx, 1, "frame_step", &step, &has_step);
  if (!st) st = scalar_int(ctx, 3, "frame_length", &fl, &has_fl);
  if (st) return st;
  if (!has_step || step < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "frame_step must be >= 1");
  if (w && cpu_host->tensor_rank(w) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "window must be 1-D");
  const int64_t wl = w ? cpu_host->tensor_dims(w)[0] : -1;
  if (!has_fl) fl = w ? wl : xd[1];
  if (w && wl != fl)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "the window has %lld elements but frame_length is %lld", (long long)wl,
                         (long long)fl);
  if (fl < 1 || fl > xd[1] || fl > DFT_MAX_LEN)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "frame_length %lld must be in [1, signal length %lld]", (long long)fl,
                         (long long)xd[1]);
  StftJob j = {.type = cpu_host->tensor_elem_type(x),
               .wtype = w ? cpu_host->tensor_elem_type(w) : ONYX_ELEM_UNDEFINED,
               .x = cpu_host->tensor_data(x),
               .w = w ? cpu_host->tensor_data(w) : NULL,
               .len = (size_t)xd[1],
               .comp = (size_t)xd[2],
               .frames = (size_t)((xd[1] - fl) / step + 1),
               .step = (size_t)step,
               .fl = (size_t)fl};
  j.bins = onesided ? j.fl / 2 + 1 : j.fl;
  const int64_t od[4] = {xd[0], (int64_t)j.frames, (int64_t)j.bins, 2};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 4, &y))) return st;
  j.y = cpu_host->tensor_mutable_data(y);
  const size_t total = (size_t)xd[0] * j.frames;
  if (total == 0) return NULL;
  Fft* f = plan_take(&s->cache, j.fl);
  if (!f) return cpu_oom(ctx);
  j.f = f;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), total, stft_frames, &j);
  plan_put(&s->cache, f);
  return j.failed ? cpu_oom(ctx) : NULL;
}

/* --- Windows and MelWeightMatrix --------------------------------------------------------- */

/* Coefficients a0, a1, a2 of a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N). */
typedef struct WindowCoef {
  double a0, a1, a2;
} WindowCoef;
static const WindowCoef HANN = {0.5, 0.5, 0.0};
static const WindowCoef HAMMING = {25.0 / 46.0, 21.0 / 46.0, 0.0};
static const WindowCoef BLACKMAN = {0.42, 0.5, 0.08};

static OnyxStatus* store_number(OnyxKernelContext* ctx, OnyxTensor* y, size_t i, double v) {
  CpuNum num = {.kind = CPU_NUM_FLT, .v.f = v};
  if (!cpu_num_store(cpu_host->tensor_elem_type(y), cpu_host->tensor_mutable_data(y), i, num))
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "cannot store %s values",
                         cpu_elem_name(cpu_host->tensor_elem_type(y)));
  return NULL;
}

typedef struct WindowState {
  const WindowCoef* coef;
  int periodic;
} WindowState;

static OnyxStatus* window_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  WindowState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->coef = user_data;
  s->periodic = cpu_host->node_attr_int(node, "periodic", 1) != 0;
  *state = s;
  return NULL;
}

static OnyxStatus* window_run(void* state, OnyxKernelContext* ctx) {
  const WindowState* s = state;
  int64_t size = 0;
  bool present;
  OnyxStatus* st = scalar_int(ctx, 0, "size", &size, &present);
  if (st) return st;
  if (size < 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "size must be >= 0, got %lld",
                         (long long)size);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, &size, 1, &y))) return st;
  const double n = s->periodic ? (double)size : (double)size - 1.0;
  for (int64_t k = 0; k < size; k++) {
    double v = 1.0;
    if (n > 0) {
      const double a = 2.0 * M_PI * (double)k / n;
      v = s->coef->a0 - s->coef->a1 * cos(a) + s->coef->a2 * cos(2.0 * a);
    }
    if ((st = store_number(ctx, y, (size_t)k, v))) return st;
  }
  return NULL;
}

static OnyxStatus* scalar_float(OnyxKernelContext* ctx, size_t i, const char* what, double* v) {
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (!t || cpu_host->tensor_elem_count(t) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be a scalar", what);
  *v = cpu_q_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), 0);
  return NULL;
}

static OnyxStatus* mel_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  int64_t bins = 0, dft_len = 0, rate = 0;
  double lo = 0, hi = 0;
  bool present;
  OnyxStatus* st = scalar_int(ctx, 0, "num_mel_bins", &bins, &present);
  if (!st) st = scalar_int(ctx, 1, "dft_length", &dft_len, &present);
  if (!st) st = scalar_int(ctx, 2, "sample_rate", &rate, &present);
  if (!st) st = scalar_float(ctx, 3, "lower_edge_hertz", &lo);
  if (!st) st = scalar_float(ctx, 4, "upper_edge_hertz", &hi);
  if (st) return st;
  if (bins < 1 || dft_len < 1 || rate < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "num_mel_bins, dft_length and sample_rate must be >= 1");
  if (!(lo >= 0) || !(hi > lo))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "need 0 <= lower_edge_hertz < upper_edge_hertz (got %g, %g)", lo, hi);
  const size_t spec = (size_t)dft_len / 2 + 1, nb = (size_t)bins;
  const int64_t od[2] = {(int64_t)spec, bins};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 2, &y))) return st;
  double* w = calloc(spec * nb, sizeof *w);
  int64_t* f = malloc((nb + 2) * sizeof *f);
  if (!w || !f) {
    free(w);
    free(f);
    return cpu_oom(ctx);
  }
  /* Triangular filters between mel-spaced edges, as the ONNX reference. */
  const double lo_mel = 2595.0 * log10(1.0 + lo / 700.0);
  const double hi_mel = 2595.0 * log10(1.0 + hi / 700.0);
  const double step = (hi_mel - lo_mel) / (double)(nb + 2);
  for (size_t i = 0; i < nb + 2 && !st; i++) {
    const double hz = 700.0 * (pow(10.0, ((double)i * step + lo_mel) / 2595.0) - 1.0);
    const double bin = floor((double)(dft_len + 1) * hz / (double)rate);
    if (!(bin >= 0 && bin <= (double)spec))
      st =
          cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                        "upper_edge_hertz %g maps past the %zu spectrogram bins (sample_rate %lld)",
                        hi, spec, (long long)rate);
    else
      f[i] = (int64_t)bin;
  }
  if (st) {
    free(w);
    free(f);
    return st;
  }
  for (size_t i = 0; i < nb; i++) {
    const int64_t l = f[i], c = f[i + 1], h = f[i + 2];
    if (c - l == 0) {
      if (c >= 0 && (size_t)c < spec) w[(size_t)c * nb + i] = 1.0;
    } else {
      for (int64_t k = l; k <= c; k++)
        if (k >= 0 && (size_t)k < spec) w[(size_t)k * nb + i] = (double)(k - l) / (double)(c - l);
    }
    if (h - c > 0)
      for (int64_t k = c; k < h; k++)
        if (k >= 0 && (size_t)k < spec) w[(size_t)k * nb + i] = (double)(h - k) / (double)(h - c);
  }
  for (size_t i = 0; i < spec * nb && !st; i++)
    st = store_number(ctx, y, i, w[i]);
  free(w);
  free(f);
  return st;
}

/* --- Registration ---------------------------------------------------------------------------- */

#define TC(name, arr)                                                                              \
  { name, arr, CPU_ARRAY_LEN(arr) }
static const OnyxTypeConstraint TC_DFT[] = {TC("T1", cpu_types_real), TC("T2", cpu_types_index)};
static const OnyxTypeConstraint TC_STFT[] = {TC("T1", cpu_types_real), TC("T2", cpu_types_index)};
static const OnyxTypeConstraint TC_WINDOW[] = {TC("T1", cpu_types_index),
                                               TC("T2", cpu_types_numeric)};
static const OnyxTypeConstraint TC_MEL[] = {TC("T1", cpu_types_index), TC("T2", cpu_types_real),
                                            TC("T3", cpu_types_numeric)};

#define KW(op, coef)                                                                               \
  {                                                                                                \
    .op_type = op, .since_version = 17, .end_version = ONYX_OPSET_LATEST,                          \
    .type_constraints = TC_WINDOW, .type_constraint_count = CPU_ARRAY_LEN(TC_WINDOW),              \
    .create = window_create, .compute = window_run, .release = cpu_free_state,                     \
    .user_data = (void*)(coef)                                                                     \
  }

static int stft_flag = 1;

OnyxStatus* cpu_register_signal(OnyxKernelRegistry* r) {
  OnyxKernelDef defs[] = {
      {.op_type = "DFT",
       .since_version = 17,
       .end_version = 19,
       .type_constraints = TC_DFT,
       .type_constraint_count = CPU_ARRAY_LEN(TC_DFT),
       .create = dft_create,
       .compute = dft_compute,
       .release = dft_release},
      {.op_type = "DFT",
       .since_version = 20,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = TC_DFT,
       .type_constraint_count = CPU_ARRAY_LEN(TC_DFT),
       .create = dft_create,
       .compute = dft_compute,
       .release = dft_release},
      {.op_type = "STFT",
       .since_version = 17,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = TC_STFT,
       .type_constraint_count = CPU_ARRAY_LEN(TC_STFT),
       .create = dft_create,
       .compute = stft_compute,
       .release = dft_release,
       .user_data = &stft_flag},
      KW("HannWindow", &HANN),
      KW("HammingWindow", &HAMMING),
      KW("BlackmanWindow", &BLACKMAN),
      {.op_type = "MelWeightMatrix",
       .since_version = 17,
       .end_version = ONYX_OPSET_LATEST,
       .type_constraints = TC_MEL,
       .type_constraint_count = CPU_ARRAY_LEN(TC_MEL),
       .compute = mel_compute},
  };
  return cpu_q_register_defs(r, defs, CPU_ARRAY_LEN(defs));
}
