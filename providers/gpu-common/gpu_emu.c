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

int gpuk_binary_t(GpuDtype dt, GpuBinaryOp op, const void* a, const void* b, void* out,
                  const GpuIter* it, void* stream) {
  int64_t n = iter_count(it);
  if (op < GPU_EQUAL && gpub_flat_binary(it)) { /* the device's flat kernels */
    int64_t qa, qb;
    const int ka = gpub_flat_layout(it, 1, &qa), kb = gpub_flat_layout(it, 2, &qb);
    for (int64_t i = 0; i < n; i++)
      gpub_st(out, it->offset[0] + i, dt,
              gpub_binary(op, gpub_ld(a, it->offset[1] + gpub_flat_index(ka, i, qa), dt),
                          gpub_ld(b, it->offset[2] + gpub_flat_index(kb, i, qb), dt)));
    return EMU_OK;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t off[3];
    gpub_offsets(it, i, 3, off);
    const float va = gpub_ld(a, off[1], dt), vb = gpub_ld(b, off[2], dt);
    if (op >= GPU_EQUAL)
      ((uint8_t*)out)[off[0]] = gpub_compare(op, va, vb) ? 1 : 0;
    else
      gpub_st(out, off[0], dt, gpub_binary(op, va, vb));
  }
  return EMU_OK;
}

int gpuk_binary(GpuBinaryOp op, const float* a, const float* b, void* out, const GpuIter* it,
                void* stream) {
  return gpuk_binary_t(GPU_F32, op, a, b, out, it, stream);
}

int gpuk_unary_t(GpuDtype dt, GpuUnaryOp op, const void* x, void* y, int64_t n, float alpha,
                 float beta, void* stream) {
  for (int64_t i = 0; i < n; i++)
    gpub_st(y, i, dt, gpub_unary(op, gpub_ld(x, i, dt), alpha, beta));
  return EMU_OK;
}

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream) {
  return gpuk_unary_t(GPU_F32, op, x, y, n, alpha, beta, stream);
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

int gpuk_softmax_t(GpuDtype dt, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner,
                   int log, void* stream) {
  if (!axis) return EMU_OK;
  for (int64_t r = 0; r < outer * inner; r++)
    gpub_softmax_row(x, y, r, axis, inner, log, dt);
  return EMU_OK;
}

int gpuk_softmax(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, int log,
                 void* stream) {
  return gpuk_softmax_t(GPU_F32, x, y, outer, axis, inner, log, stream);
}

int gpuk_layernorm_t(GpuDtype dt, const void* x, const void* scale, const void* bias, void* y,
                     float* mean, float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     void* stream) {
  for (int64_t r = 0; r < rows; r++)
    gpub_layernorm_row(x, scale, bias, y, mean, inv_std, r, cols, epsilon, dt);
  return EMU_OK;
}

int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream) {
  return gpuk_layernorm_t(GPU_F32, x, scale, bias, y, mean, inv_std, rows, cols, epsilon, stream);
}

int gpuk_reduce_t(GpuDtype dt, GpuReduceOp op, const void* x, void* y, int64_t n_out, int64_t n_red,
                  const GpuReduce* r, void* stream) {
  int64_t outer = 0, inner = 0;
  if (n_red > 0 && gpub_reduce_layout(r, &outer, &inner)) { /* the device's row / column kernels */
    for (int64_t o = 0; o < outer * inner; o++)
      gpub_st(y, o, dt, gpub_reduce_strided_one(op, x, o, n_red, inner, dt));
    return EMU_OK;
  }
  for (int64_t o = 0; o < n_out; o++)
    gpub_st(y, o, dt, gpub_reduce_one(op, x, o, n_red, r, dt));
  return EMU_OK;
}

int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream) {
  return gpuk_reduce_t(GPU_F32, op, x, y, n_out, n_red, r, stream);
}

int gpuk_epilogue_t(GpuDtype dt, void* y, const void* bias, const void* z, int64_t m, int64_t n,
                    GpuActivation act, float alpha, float lo, float hi, void* stream) {
  for (int64_t i = 0; i < m * n; i++)
    gpub_st(y, i, dt,
            gpub_epilogue(gpub_ld(y, i, dt), bias ? gpub_ld(bias, i % n, dt) : 0.0f,
                          z ? gpub_ld(z, i, dt) : 0.0f, act, alpha, lo, hi));
  return EMU_OK;
}

int gpuk_epilogue(float* y, const float* bias, const float* z, int64_t m, int64_t n,
                  GpuActivation act, float alpha, float lo, float hi, void* stream) {
  return gpuk_epilogue_t(GPU_F32, y, bias, z, m, n, act, alpha, lo, hi, stream);
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
  return gpub_cast_type(type);
}

int gpuk_cast(const void* in, int in_type, void* out, int out_type, int64_t n, void* stream) {
  if (!gpub_cast_type(in_type) || !gpub_cast_type(out_type)) return -1;
  for (int64_t i = 0; i < n; i++)
    gpub_cast_one(in, in_type, out, out_type, i);
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

/* The device's tiled GEMM on float16 / bfloat16 storage, emulated naively:
 * products of the stored values, accumulated in double and rounded once to
 * float (a tensor core's float32 accumulation differs by float rounding),
 * alpha and beta applied in float, the result stored in dt. */
int gpuk_gemm_t(GpuDtype dt, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch,
                void* stream) {
  for (int64_t p = 0; p < batch; p++) {
    const int64_t oa = p * stride_a, ob = p * stride_b, oc = p * stride_c;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t q = 0; q < k; q++)
          acc += (double)gpub_ld(a, oa + (trans_a ? q * lda + i : i * lda + q), dt) *
                 gpub_ld(b, ob + (trans_b ? j * ldb + q : q * ldb + j), dt);
        const int64_t y = oc + i * ldc + j;
        const float r = alpha * (float)acc;
        gpub_st(c, y, dt, beta == 0.0f ? r : r + beta * gpub_ld(c, y, dt));
      }
  }
  return EMU_OK;
}
