/* cpu_qpool.c — 2-D MaxPool on int8 / uint8 planes (cpu_quant.h).
 *
 * The qdq fusion turns DequantizeLinear → MaxPool → QuantizeLinear with one
 * scale and zero point into MaxPool on the quantized values (exact: the
 * dequantization is increasing and the quantization gives each value back),
 * so the 8-bit MaxPool is on the path of quantized CNNs. Per output row,
 * the valid input rows of the windows are reduced with byte-wise maxima
 * into a row padded with the type's lowest value, then along the row: for
 * every start j, the maximum of the kernel's taps j, j + dw, ...; the
 * outputs pick every sw-th. A tap in the padding reads the lowest value,
 * which is what the table-driven kernel gives a window with no valid tap
 * and what QuantizeLinear gives -inf, so the result is the same. */
#include <stdlib.h>
#include <string.h>
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
  size_t row_len; /* the padded row: (ow - 1) * sw + (kw - 1) * dw + 1 bytes */
  size_t starts;  /* window starts reduced along a row: (ow - 1) * sw + 1 */
  CpuStop* stop;
  int failed;
} QPoolJob;

static void qpool_planes(void* user, size_t begin, size_t end) {
  QPoolJob* j = user;
  const CpuQMaxPool2d* p = j->p;
  const uint8_t flip = p->is_signed ? 0x80 : 0x00, lowest = flip; /* 0 or -128 */
  uint8_t* row = malloc(j->row_len + j->starts);
  if (!row) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  uint8_t* red = row + j->row_len;
  const size_t ih_n = p->ih, iw_n = p->iw, oh_n = p->oh, ow_n = p->ow;
  const size_t pw = p->pw;
  /* input columns [0, n_in) land at row[pw...]; the row ends at row_len */
  const size_t n_in = pw >= j->row_len ? 0 : iw_n < j->row_len - pw ? iw_n : j->row_len - pw;
  size_t acc = 0;
  for (size_t plane = begin; plane < end; plane++) {
    const uint8_t* x = j->x + plane * ih_n * iw_n;
    uint8_t* y = j->y + plane * oh_n * ow_n;
    for (size_t oh = 0; oh < oh_n; oh++) {
      if (cpu_stop_poll(j->stop, &acc, (p->kh + p->kw) * j->row_len + 1)) goto out;
      memset(row, lowest, j->row_len);
      /* the window rows oh * sh - ph + a * dh inside X */
      const int64_t h0 = (int64_t)(oh * p->sh) - (int64_t)p->ph;
      bool first = true;
      for (size_t a = 0; a < p->kh; a++) {
        const int64_t h = h0 + (int64_t)(a * p->dh);
        if (h < 0 || h >= (int64_t)ih_n) continue;
        const uint8_t* src = x + (size_t)h * iw_n;
        if (first)
          memcpy(row + pw, src, n_in);
        else
          qmax_into(row + pw, src, n_in, flip);
        first = false;
      }
      /* red[j] = max over b of row[j + b * dw] */
      memcpy(red, row, j->starts);
      for (size_t b = 1; b < p->kw; b++)
        qmax_into(red, row + b * p->dw, j->starts, flip);
      uint8_t* yr = y + oh * ow_n;
      if (p->sw == 1) {
        memcpy(yr, red, ow_n);
      } else {
        for (size_t o = 0; o < ow_n; o++)
          yr[o] = red[o * p->sw];
      }
    }
  }
out:
  free(row);
}

bool cpu_qmaxpool2d(OnyxKernelContext* ctx, const CpuQMaxPool2d* p, const uint8_t* x, uint8_t* y,
                    size_t planes, CpuStop* stop, bool* oom) {
  *oom = false;
  if (!p->oh || !p->ow || !planes) return true;
  if (!p->kh || !p->kw || !p->sh || !p->sw || !p->dh || !p->dw) return false;
  /* row_len = (ow - 1) * sw + (kw - 1) * dw + 1, checked */
  size_t starts, span, row_len, total;
  if (!cpu_mul_size(p->ow - 1, p->sw, &starts) || !cpu_add_size(starts, 1, &starts) ||
      !cpu_mul_size(p->kw - 1, p->dw, &span) || !cpu_add_size(starts, span, &row_len) ||
      !cpu_add_size(row_len, starts, &total))
    return false;
  QPoolJob j = {.p = p, .x = x, .y = y, .row_len = row_len, .starts = starts, .stop = stop};
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, qpool_planes, &j);
  *oom = j.failed != 0;
  return true;
}
