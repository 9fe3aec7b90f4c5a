/* cpu_qpool.c — 2-D MaxPool on int8 / uint8 (cpu_quant.h): ai.onnx MaxPool's
 * 8-bit planes and com.microsoft NhwcMaxPool's channels-last images.
 *
 * The qdq fusion turns DequantizeLinear → MaxPool → QuantizeLinear with one
 * scale and zero point into MaxPool on the quantized values (exact: the
 * dequantization is increasing and the quantization gives each value back),
 * so the 8-bit MaxPool is on the path of quantized CNNs. A plane is ih x iw
 * pixels of ch bytes (NCHW: one channel, ch 1; NHWC: one image, ch = C).
 * Per output row, the valid input rows of the windows are reduced with
 * byte-wise maxima into a row padded with the type's lowest value, then
 * along the row: for every start j, the maximum of the kernel's taps j,
 * j + dw, ... (pixel by pixel, all channels at once); the outputs pick
 * every sw-th. A tap in the padding reads the lowest value,
 * which is what the table-driven kernel gives a window with no valid tap
 * and what QuantizeLinear gives -inf, so the result is the same. */
#include <stdlib.h>
#include <string.h>
#include "cpu_nn_common.h"
#include "cpu_quant.h"
#include "cpu_util.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* dst[i] = max(dst[i], src[i]) for i < n; `flip` 0x80 for int8 (the sign
 * bit flipped orders int8 as uint8), else 0. */
static void qmax_into(uint8_t* dst, const uint8_t* src, size_t n, uint8_t flip) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i f = _mm_set1_epi8((char)flip);
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(dst + i)), f);
    const __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + i)), f);
    _mm_storeu_si128((__m128i*)(dst + i), _mm_xor_si128(_mm_max_epu8(a, b), f));
  }
#endif
  for (; i < n; i++) {
    const uint8_t a = (uint8_t)(dst[i] ^ flip), b = (uint8_t)(src[i] ^ flip);
    dst[i] = (uint8_t)((a > b ? a : b) ^ flip);
  }
}

typedef struct QPoolJob {
  const CpuQMaxPool2d* p;
  const uint8_t* x;
  uint8_t* y;
  size_t ch;      /* bytes per pixel */
  size_t row_len; /* the padded row: (ow - 1) * sw + (kw - 1) * dw + 1 pixels, in bytes */
  size_t starts;  /* window starts reduced along a row: (ow - 1) * sw + 1 pixels, in bytes */
  CpuStop* stop;
  int failed;
} QPoolJob;

static void qpool_rows(void* user, size_t begin, size_t end) {
  QPoolJob* j = user;
  const CpuQMaxPool2d* p = j->p;
  const uint8_t flip = p->is_signed ? 0x80 : 0x00, lowest = flip; /* 0 or -128 */
  uint8_t* row = malloc(j->row_len + j->starts);
  if (!row) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  uint8_t* red = row + j->row_len;
  const size_t ch = j->ch, ih_n = p->ih, iw_n = p->iw, oh_n = p->oh, ow_n = p->ow;
  const size_t pw = p->pw * ch, row_len = j->row_len, iw_b = iw_n * ch;
  /* input bytes [0, n_in) land at row[pw...]; the row ends at row_len */
  const size_t n_in = pw >= row_len ? 0 : iw_b < row_len - pw ? iw_b : row_len - pw;
  size_t acc = 0;
  for (size_t u = begin; u < end; u++) { /* output row oh of plane u / oh_n */
    const size_t plane = u / oh_n, oh = u % oh_n;
    const uint8_t* x = j->x + plane * ih_n * iw_b;
    uint8_t* y = j->y + plane * oh_n * ow_n * ch;
    if (cpu_stop_poll(j->stop, &acc, (p->kh + p->kw) * j->row_len + 1)) break;
    memset(row, lowest, j->row_len);
    /* the window rows oh * sh - ph + a * dh inside X */
    const int64_t h0 = (int64_t)(oh * p->sh) - (int64_t)p->ph;
    bool first = true;
    for (size_t a = 0; a < p->kh; a++) {
      const int64_t h = h0 + (int64_t)(a * p->dh);
      if (h < 0 || h >= (int64_t)ih_n) continue;
      const uint8_t* src = x + (size_t)h * iw_b;
      if (first)
        memcpy(row + pw, src, n_in);
      else
        qmax_into(row + pw, src, n_in, flip);
      first = false;
    }
    /* red[j] = max over b of row[j + b * dw] */
    memcpy(red, row, j->starts);
    for (size_t b = 1; b < p->kw; b++)
      qmax_into(red, row + b * p->dw * ch, j->starts, flip);
    uint8_t* yr = y + oh * ow_n * ch;
    if (p->sw == 1) {
      memcpy(yr, red, ow_n * ch);
    } else if (ch == 1) {
      for (size_t o = 0; o < ow_n; o++)
        yr[o] = red[o * p->sw];
    } else {
      for (size_t o = 0; o < ow_n; o++)
        memcpy(yr + o * ch, red + o * p->sw * ch, ch);
    }
  }
  free(row);
}

bool cpu_qmaxpool2d(OnyxKernelContext* ctx, const CpuQMaxPool2d* p, const uint8_t* x, uint8_t* y,
                    size_t planes, CpuStop* stop, bool* oom) {
  *oom = false;
  if (!p->oh || !p->ow || !planes) return true;
  if (!p->kh || !p->kw || !p->sh || !p->sw || !p->dh || !p->dw || !p->ch) return false;
  /* row_len = ((ow - 1) * sw + (kw - 1) * dw + 1) * ch, checked */
  size_t starts, span, row_len, total;
  if (!cpu_mul_size(p->ow - 1, p->sw, &starts) || !cpu_add_size(starts, 1, &starts) ||
      !cpu_mul_size(p->kw - 1, p->dw, &span) || !cpu_add_size(starts, span, &row_len) ||
      !cpu_mul_size(row_len, p->ch, &row_len) || !cpu_mul_size(starts, p->ch, &starts) ||
      !cpu_add_size(row_len, starts, &total))
    return false;
  QPoolJob j = {
      .p = p, .x = x, .y = y, .ch = p->ch, .row_len = row_len, .starts = starts, .stop = stop};
  /* output rows over the pool (NHWC: one plane per image, so rows, not
   * planes, share the work out) */
  size_t rows;
  if (!cpu_mul_size(planes, p->oh, &rows)) return false;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, qpool_rows, &j);
  *oom = j.failed != 0;
  return true;
}

/* --- com.microsoft NhwcMaxPool -------------------------------------------------------------------
 * x [N, H, W, C] int8 / uint8, MaxPool's attributes (auto_pad, pads,
 * strides, dilations, ceil_mode; no Indices), y [N, OH, OW, C]: one plane
 * per image, C bytes per pixel. */

OnyxStatus* cpu_qmaxpool_nhwc_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                     void** state) {
  (void)ep, (void)user_data;
  WindowAttrs* w = malloc(sizeof *w);
  if (!w) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = cpu_window_attrs_read(node, w);
  if (!st && w->n_kernel != 2)
    st = cpu_error(node, ONYX_NOT_IMPLEMENTED, "NhwcMaxPool: 2-D kernels only, not %zu-D",
                   w->n_kernel);
  if (st) {
    free(w);
    return st;
  }
  w->is_max = 1;
  *state = w;
  return NULL;
}

OnyxStatus* cpu_qmaxpool_nhwc_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int32_t t = cpu_host->tensor_elem_type(x);
  if (t != ONYX_ELEM_UINT8 && t != ONYX_ELEM_INT8)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "NhwcMaxPool: x must be int8 or uint8");
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "NhwcMaxPool: x must be [N, H, W, C], not %zu-D",
                         cpu_host->tensor_rank(x));
  const int64_t* xd = cpu_host->tensor_dims(x);
  Geometry g;
  const int64_t in[2] = {xd[1], xd[2]};
  OnyxStatus* st = cpu_geometry_init(w, 2, in, w->kernel, &g);
  if (st) return st;
  if (g.pb[0] < 0 || g.pb[1] < 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "NhwcMaxPool: negative pads");
  const int64_t out[4] = {xd[0], g.out[0], g.out[1], xd[3]};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, out, 4, &y))) return st;
  if (!cpu_host->tensor_elem_count(y)) return NULL;
  const CpuQMaxPool2d q = {.ih = (size_t)g.in[0],
                           .iw = (size_t)g.in[1],
                           .oh = (size_t)g.out[0],
                           .ow = (size_t)g.out[1],
                           .kh = (size_t)g.k[0],
                           .kw = (size_t)g.k[1],
                           .sh = (size_t)g.s[0],
                           .sw = (size_t)g.s[1],
                           .dh = (size_t)g.d[0],
                           .dw = (size_t)g.d[1],
                           .ph = (size_t)g.pb[0],
                           .pw = (size_t)g.pb[1],
                           .is_signed = t == ONYX_ELEM_INT8,
                           .ch = (size_t)xd[3]};
  CpuStop stop = {.ctx = ctx};
  bool oom = false;
  if (!cpu_qmaxpool2d(ctx, &q, cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y),
                      (size_t)xd[0], &stop, &oom))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "NhwcMaxPool: the window does not fit in memory");
  if (oom) return cpu_oom(ctx);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}
