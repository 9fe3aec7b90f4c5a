/* gpu_emu.c — a host emulation of the device side (gpu_rt.h and
 * gpu_kernels.h) for tests: "device" memory is host memory, streams and
 * events are tokens, copies are memcpy, and each launcher runs the same
 * per-element bodies as the GPU kernels (gpu_kernels_body.h) in a plain loop.
 * Linked with the shared C sources into the test-only provider "gpuemu"
 * (tests/unit/gpu), it lets the ONNX suites check everything of the GPU
 * providers except the vendor's own code: the real kernels' launch wrappers,
 * the tiled GEMM (emulated here by a naive loop with the same arguments),
 * cuBLAS and cuDNN. Never part of libonyx_ep_cuda.so or libonyx_ep_rocm.so. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_kernels_body.h"
#include "gpu_rt.h"

#define EMU_OK   0
#define EMU_FAIL 1
#define EMU_OOM  2

const char* gpurt_vendor(void) {
  return "EMU";
}

int gpurt_device_count(int* n) {
  *n = 1;
  return EMU_OK;
}

int gpurt_device_props(int device, GpuDeviceProps* out) {
  memset(out, 0, sizeof *out);
  if (device != 0) return EMU_FAIL;
  snprintf(out->name, sizeof out->name, "emulated GPU (host memory)");
  out->total_mem = 1ull << 30;
  out->multiprocessors = 1;
  snprintf(out->arch, sizeof out->arch, "host");
  return EMU_OK;
}

int gpurt_driver_version(int* v) {
  *v = 1;
  return EMU_OK;
}

int gpurt_runtime_version(int* v) {
  *v = 1;
  return EMU_OK;
}

const char* gpurt_error_name(int err) {
  return err == EMU_OK ? "emuSuccess" : err == EMU_OOM ? "emuErrorMemory" : "emuError";
}

const char* gpurt_error_string(int err) {
  return err == EMU_OK ? "no error" : err == EMU_OOM ? "out of memory" : "emulated failure";
}

int gpurt_error_oom(void) {
  return EMU_OOM;
}

int gpurt_set_device(int device) {
  return device == 0 ? EMU_OK : EMU_FAIL;
}

int gpurt_last_error(void) {
  return EMU_OK;
}

int gpurt_malloc(void** p, size_t bytes) {
  size_t rounded = (bytes + 255) / 256 * 256;
  *p = rounded >= bytes ? aligned_alloc(256, rounded ? rounded : 256) : NULL;
  if (*p) memset(*p, 0xFF, rounded ? rounded : 256); /* NaN pattern: unwritten reads show */
  return *p ? EMU_OK : EMU_OOM;
}

int gpurt_free(void* p) {
  free(p);
  return EMU_OK;
}

int gpurt_host_alloc(void** p, size_t bytes) {
  return gpurt_malloc(p, bytes);
}

int gpurt_host_free(void* p) {
  free(p);
  return EMU_OK;
}

/* Streams and events: distinct live tokens (so leaks show under LSan). */
int gpurt_stream_create(void** s) {
  *s = malloc(1);
  return *s ? EMU_OK : EMU_OOM;
}

int gpurt_stream_destroy(void* s) {
  free(s);
  return EMU_OK;
}

int gpurt_stream_sync(void* s) {
  return EMU_OK;
}

int gpurt_event_create(void** e) {
  *e = malloc(1);
  return *e ? EMU_OK : EMU_OOM;
}

int gpurt_event_destroy(void* e) {
  free(e);
  return EMU_OK;
}

int gpurt_event_record(void* e, void* s) {
  return EMU_OK;
}

int gpurt_event_sync(void* e) {
  return EMU_OK;
}

int gpurt_stream_wait_event(void* s, void* e) {
  return EMU_OK;
}

int gpurt_memcpy_async(void* dst, const void* src, size_t bytes, GpuCopyKind kind, void* s) {
  if (bytes) memmove(dst, src, bytes);
  return EMU_OK;
}

int gpurt_memset_async(void* dst, int value, size_t bytes, void* s) {
  if (bytes) memset(dst, value, bytes);
  return EMU_OK;
}

/* --- kernels ----------------------------------------------------------------------- */

static int64_t iter_count(const GpuIter* it) {
  int64_t n = 1;
  for (int d = 0; d < it->rank; d++)
    n *= it->dims[d];
  return n;
}

static bool size_ok(int elem_size) {
  return elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8;
}

int gpuk_binary(GpuBinaryOp op, const float* a, const float* b, void* out, const GpuIter* it,
                void* stream) {
  int64_t n = iter_count(it);
  if (op < GPU_EQUAL && gpub_flat_binary(it)) { /* the device's flat kernels */
    int64_t qa, qb;
    const int ka = gpub_flat_layout(it, 1, &qa), kb = gpub_flat_layout(it, 2, &qb);
    const float* pa = a + it->offset[1];
    const float* pb = b + it->offset[2];
    float* po = (float*)out + it->offset[0];
    for (int64_t i = 0; i < n; i++)
      po[i] = gpub_binary(op, pa[gpub_flat_index(ka, i, qa)], pb[gpub_flat_index(kb, i, qb)]);
    return EMU_OK;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t off[3];
    gpub_offsets(it, i, 3, off);
    if (op >= GPU_EQUAL)
      ((uint8_t*)out)[off[0]] = gpub_compare(op, a[off[1]], b[off[2]]) ? 1 : 0;
    else
      ((float*)out)[off[0]] = gpub_binary(op, a[off[1]], b[off[2]]);
  }
  return EMU_OK;
}

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream) {
  for (int64_t i = 0; i < n; i++)
    y[i] = gpub_unary(op, x[i], alpha, beta);
  return EMU_OK;
}

int gpuk_where(const uint8_t* cond, const void* x, const void* y, void* out, const GpuIter* it,
               const int64_t* strides_y, int64_t offset_y, int elem_size, void* stream) {
  if (!size_ok(elem_size)) return -1;
  GpuIter ity = *it;
  for (int d = 0; d < it->rank; d++)
    ity.strides[0][d] = strides_y[d];
  ity.offset[0] = offset_y;
  int64_t n = iter_count(it);
  size_t es = (size_t)elem_size;
  for (int64_t i = 0; i < n; i++) {
    int64_t off[3], offy[1];
    gpub_offsets(it, i, 3, off);
    gpub_offsets(&ity, i, 1, offy);
    const char* src = cond[off[1]] ? (const char*)x + off[2] * es : (const char*)y + offy[0] * es;
    memcpy((char*)out + off[0] * es, src, es);
  }
  return EMU_OK;
}

int gpuk_copy(const void* in, void* out, const GpuIter* it, int elem_size, void* stream) {
  if (!size_ok(elem_size)) return -1;
  int64_t n = iter_count(it);
  size_t es = (size_t)elem_size;
  for (int64_t i = 0; i < n; i++) {
    int64_t off[2];
    gpub_offsets(it, i, 2, off);
    memcpy((char*)out + off[0] * es, (const char*)in + off[1] * es, es);
  }
  return EMU_OK;
}

int gpuk_softmax(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, int log,
                 void* stream) {
  if (!axis) return EMU_OK;
  for (int64_t r = 0; r < outer * inner; r++)
    gpub_softmax_row(x, y, r, axis, inner, log);
  return EMU_OK;
}

int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream) {
  for (int64_t r = 0; r < rows; r++)
    gpub_layernorm_row(x, scale, bias, y, mean, inv_std, r, cols, epsilon);
  return EMU_OK;
}

int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream) {
  int64_t outer = 0, inner = 0;
  if (n_red > 0 && gpub_reduce_layout(r, &outer, &inner)) { /* the device's row / column kernels */
    for (int64_t o = 0; o < outer * inner; o++)
      y[o] = gpub_reduce_strided_one(op, x, o, n_red, inner);
    return EMU_OK;
  }
  for (int64_t o = 0; o < n_out; o++)
    y[o] = gpub_reduce_one(op, x, o, n_red, r);
  return EMU_OK;
}

int gpuk_epilogue(float* y, const float* bias, const float* z, int64_t m, int64_t n,
                  GpuActivation act, float alpha, float lo, float hi, void* stream) {
  for (int64_t i = 0; i < m * n; i++)
    y[i] = gpub_epilogue(y[i], bias ? bias[i % n] : 0.0f, z ? z[i] : 0.0f, act, alpha, lo, hi);
  return EMU_OK;
}

int gpuk_gather(const void* data, const void* idx, int idx_is_64, void* out, int64_t outer,
                int64_t axis_dim, int64_t inner, int64_t n_idx, int elem_size, void* stream) {
  if (!size_ok(elem_size)) return -1;
  size_t es = (size_t)elem_size;
  int64_t n = outer * n_idx * inner;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = gpub_gather_index(i, inner, n_idx);
    int64_t k = idx_is_64 ? ((const int64_t*)idx)[j] : ((const int32_t*)idx)[j];
    int64_t src = gpub_gather_source(i, k, axis_dim, inner, n_idx);
    if (src >= 0)
      memcpy((char*)out + i * (int64_t)es, (const char*)data + src * (int64_t)es, es);
    else
      memset((char*)out + i * (int64_t)es, 0, es);
  }
  return EMU_OK;
}

int gpuk_cast_supported(int type) {
  return type == 1 || type == 2 || type == 3 || type == 6 || type == 7 || type == 9 || type == 11;
}

static bool is_float_type(int t) {
  return t == 1 || t == 11;
}

/* Saturating float -> integer (the device's conversion instructions
 * saturate; C's cast would be undefined out of range); NaN gives 0. */
static int64_t sat(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

int gpuk_cast(const void* in, int in_type, void* out, int out_type, int64_t n, void* stream) {
  if (!gpuk_cast_supported(in_type) || !gpuk_cast_supported(out_type)) return -1;
  for (int64_t i = 0; i < n; i++) {
    double d = 0;
    int64_t v = 0;
    switch (in_type) {
    case 1:
      d = ((const float*)in)[i];
      break;
    case 11:
      d = ((const double*)in)[i];
      break;
    case 2:
      v = ((const uint8_t*)in)[i];
      break;
    case 3:
      v = ((const int8_t*)in)[i];
      break;
    case 6:
      v = ((const int32_t*)in)[i];
      break;
    case 7:
      v = ((const int64_t*)in)[i];
      break;
    case 9:
      v = ((const uint8_t*)in)[i] != 0;
      break;
    }
    bool f = is_float_type(in_type);
    switch (out_type) {
    case 1:
      ((float*)out)[i] = f ? (float)d : (float)v;
      break;
    case 11:
      ((double*)out)[i] = f ? d : (double)v;
      break;
    case 2:
      ((uint8_t*)out)[i] = (uint8_t)(f ? sat(d, 0, 255) : v);
      break;
    case 3:
      ((int8_t*)out)[i] = (int8_t)(f ? sat(d, -128, 127) : v);
      break;
    case 6:
      ((int32_t*)out)[i] = (int32_t)(f ? sat(d, -2147483648.0, 2147483647.0) : v);
      break;
    case 7:
      ((int64_t*)out)[i] = f ? sat(d, -9223372036854775808.0, 9223372036854774784.0) : v;
      break;
    case 9:
      ((uint8_t*)out)[i] = f ? d != 0 : v != 0;
      break;
    }
  }
  return EMU_OK;
}

int gpuk_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
              int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
              void* stream) {
  for (int64_t p = 0; p < batch; p++) {
    const float* ap = a + p * stride_a;
    const float* bp = b + p * stride_b;
    float* cp = c + p * stride_c;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t q = 0; q < k; q++)
          acc += (double)(trans_a ? ap[q * lda + i] : ap[i * lda + q]) *
                 (trans_b ? bp[j * ldb + q] : bp[q * ldb + j]);
        float* y = cp + i * ldc + j;
        *y = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *y;
      }
  }
  return EMU_OK;
}
