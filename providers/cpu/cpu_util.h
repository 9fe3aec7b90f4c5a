/* cpu_util.h — helpers shared by the CPU provider's kernel files: element
 * type facts, error messages that name the node, reading shape-like inputs,
 * scalar conversion between element types (float16/bfloat16 included), the
 * broadcasting planner, strided copies and a table-driven registration.
 *
 * For cpu-b (cpu_conv.c, cpu_pool.c, cpu_norm.c, cpu_linalg.c): everything below is free to use.
 * Handy ones: cpu_error/cpu_ctx_error (node-named errors), cpu_elem_size,
 * cpu_f16_to_f32/cpu_f32_to_f16 and the bfloat16 pair, cpu_bcast_* (any
 * number of inputs, e.g. a bias broadcast), cpu_copy_strided (transpose or
 * slice any tensor into a dense output), cpu_read_ints (int32/int64 shape
 * inputs), cpu_norm_axis, and cpu_register_specs. Only SDK headers here. */
#ifndef CPU_UTIL_H
#define CPU_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_kernels.h"
#include "cpu_types.h"

/* Ranks above this are refused with an error (ONNX sets no limit; models in
 * practice stay far below it). Lets kernels keep index arrays on the stack. */
#define CPU_MAX_RANK 32

#define CPU_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define CPU_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CPU_PRINTF(a, b)
#endif

/* --- Element types -------------------------------------------------------- */

/* Bytes per element; 0 for types with no per-element address (packed 4/2-bit
 * types, undefined). Strings report sizeof(char*) but must be copied with
 * cpu_copy_elems / cpu_copy_strided, which deep-copy them. */
size_t cpu_elem_size(int32_t type);
/* Short lowercase name ("float32", "int64"); "type <n>" style never NULL. */
const char* cpu_elem_name(int32_t type);
/* The ONNX TensorProto name ("FLOAT", "INT64") -> type; UNDEFINED if unknown.
 * Used by Cast-1, whose `to` is a string. */
int32_t cpu_elem_from_onnx_name(const char* name);

/* The vector ISA of the float kernels that have one path per ISA (blocked
 * convs, depthwise, vector math): CPU_ISA_AVX512 (avx512f), CPU_ISA_AVX2
 * (avx2 and fma) or CPU_ISA_GENERIC, from cpuid (which also checks that the
 * OS saves the registers), capped by ONYX_CPU_ISA=generic|avx2; read once. */
#ifndef CPU_ISA_LEVELS_DEFINED
#define CPU_ISA_LEVELS_DEFINED
enum { CPU_ISA_GENERIC = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };
#endif
int cpu_isa_level(void);

/* Element types grouped for kernel type constraints: cpu_types.h. */

/* --- Checked arithmetic ---------------------------------------------------------- */

/* For shapes, sizes, strides, pads, dilations, indices and counts computed
 * from attributes or run-time shapes (a hostile model reaches the kernels
 * with any int64). Each returns false on overflow (*out is then
 * unspecified), which the kernel turns into an error naming the op and the
 * attribute or input. Once per call or per row, never per element. */
static inline bool cpu_add_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool cpu_sub_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_sub_overflow(a, b, out);
}
static inline bool cpu_mul_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool cpu_add_size(size_t a, size_t b, size_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool cpu_sub_size(size_t a, size_t b, size_t* out) {
  return !__builtin_sub_overflow(a, b, out);
}
static inline bool cpu_mul_size(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* a + b + c, each step checked. */
static inline bool cpu_add3_i64(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t t;
  return cpu_add_i64(a, b, &t) && cpu_add_i64(t, c, out);
}
/* The extent a window of size k covers with dilation d: d * (k - 1) + 1;
 * false also for k < 1 or d < 1. */
static inline bool cpu_dilated_extent(int64_t k, int64_t d, int64_t* out) {
  int64_t t;
  return k >= 1 && d >= 1 && cpu_mul_i64(d, k - 1, &t) && cpu_add_i64(t, 1, out);
}
/* Floor division for b > 0 (C's / truncates toward zero). */
static inline int64_t cpu_floor_div_i64(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
/* A double that converts to int64 without undefined behaviour: finite and
 * within [-2^63, 2^63). */
static inline bool cpu_double_to_i64(double v, int64_t* out) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return false;
  *out = (int64_t)v;
  return true;
}
/* The product of n non-negative dims as an element count (0 when a dim is
 * 0, however large the others); false when one is negative or the product
 * overflows size_t. */
static inline bool cpu_dims_count(const int64_t* dims, size_t n, size_t* out) {
  size_t c = 1;
  bool overflow = false;
  for (size_t i = 0; i < n; i++) {
    if (dims[i] < 0) return false;
    if (dims[i] == 0) {
      *out = 0;
      for (size_t j = i + 1; j < n; j++)
        if (dims[j] < 0) return false;
      return true;
    }
    overflow |= !cpu_mul_size(c, (size_t)dims[i], &c);
  }
  *out = c;
  return !overflow;
}

/* --- Errors ------------------------------------------------------------------ */

/* A status whose message starts with the node: "Gather node 'g1': <msg>".
 * node may be NULL (a fused group): "CPU kernel: <msg>". */
OnyxStatus* cpu_error(const OnyxNode* node, OnyxStatusCode code, const char* fmt, ...)
    CPU_PRINTF(3, 4);
/* The same for the node a kernel context runs. */
OnyxStatus* cpu_ctx_error(const OnyxKernelContext* ctx, OnyxStatusCode code, const char* fmt, ...)
    CPU_PRINTF(3, 4);
/* ONYX_OUT_OF_MEMORY naming the node. */
OnyxStatus* cpu_oom(const OnyxKernelContext* ctx);

/* --- Cancellation ------------------------------------------------------------------ */

/* Iterations between two polls of the run's cancellation in kernels whose
 * loops are bounded by input data or attributes. */
#define CPU_STOP_INTERVAL ((size_t)1 << 16)
/* True when the host (ABI >= 1.1) says the run should stop: terminated
 * through its run options or past its time limit. Cheap, but call it per
 * row or per CPU_STOP_INTERVAL elements, not per element. */
bool cpu_should_stop(const OnyxKernelContext* ctx);
/* The ONYX_CANCELLED error a kernel returns after cpu_should_stop; `op`
 * names the op ("Range"; NULL: the node's op type). */
OnyxStatus* cpu_cancelled(const OnyxKernelContext* ctx, const char* op);

/* Cancellation inside a parallel_for: the workers of one loop share a
 * CpuStop; each counts its own work and polls every CPU_STOP_INTERVAL
 * units, and once one of them sees the stop the others stop at their next
 * check. After the loop the kernel returns cpu_cancelled when
 * cpu_stop_seen. */
typedef struct CpuStop {
  const OnyxKernelContext* ctx; /* NULL: never stops */
  int stopped;                  /* read and written atomically */
} CpuStop;
/* True when a worker saw the stop. */
static inline bool cpu_stop_seen(const CpuStop* s) {
  return s && __atomic_load_n(&s->stopped, __ATOMIC_RELAXED) != 0;
}
/* Adds `work` units to the worker's counter *acc; past CPU_STOP_INTERVAL
 * polls the host (and resets *acc). True when the loop should stop (at once
 * when another worker saw the stop). Inline
 * (cpu_should_stop's test included) so the GEMM core builds on its own. */
static inline bool cpu_stop_poll(CpuStop* s, size_t* acc, size_t work) {
  if (!s || !s->ctx) return false;
  /* another worker's stop ends this one's loop at once (a plain load) */
  if (cpu_stop_seen(s)) return true;
  if (__builtin_add_overflow(*acc, work, acc)) *acc = SIZE_MAX;
  if (*acc < CPU_STOP_INTERVAL) return false;
  *acc = 0;
  if (cpu_host->struct_size <
          offsetof(OnyxHostApi, ctx_should_stop) + sizeof cpu_host->ctx_should_stop ||
      !cpu_host->ctx_should_stop || !cpu_host->ctx_should_stop(s->ctx))
    return false;
  __atomic_store_n(&s->stopped, 1, __ATOMIC_RELAXED);
  return true;
}

/* --- Reading inputs and attributes --------------------------------------------- */

/* Copies the values of a 0-D or 1-D int32/int64 tensor into out (up to cap
 * values); *count gets the element count. Errors name the node and `what`
 * ("shape", "axes"): a wrong type or more than cap values. */
OnyxStatus* cpu_read_ints(const OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                          int64_t* out, size_t cap, size_t* count);
/* The same into scratch memory of the context, any count. */
OnyxStatus* cpu_read_ints_scratch(OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                                  int64_t** out, size_t* count);
/* Normalizes an axis in [-rank, rank) (or [-rank, rank] when inclusive) to
 * [0, rank]; false when out of range. */
bool cpu_norm_axis(int64_t axis, size_t rank, bool inclusive, size_t* out);
/* Sets mark[d] for each normalized axis (mark has rank entries); an axis out
 * of range or given twice is an error naming the node. */
OnyxStatus* cpu_mark_axes(const OnyxKernelContext* ctx, const int64_t* axes, size_t n, size_t rank,
                          bool* mark);
/* Dense (row-major) element strides of a shape. */
void cpu_dense_strides(const int64_t* dims, size_t rank, int64_t* strides);
/* An error naming the node when rank exceeds CPU_MAX_RANK; NULL otherwise. */
OnyxStatus* cpu_check_rank(const OnyxKernelContext* ctx, size_t rank);
/* Product of dims[begin, end); 1 for an empty range. */
size_t cpu_dims_product(const int64_t* dims, size_t begin, size_t end);
/* 1 if input i of the node is present and a constant whose first element is
 * nonzero; 0 if absent or constant zero; -1 if present but not constant. */
int cpu_node_const_flag(const OnyxNode* node, size_t i);

/* --- Scalars of any numeric type ---------------------------------------------- */

/* A number loaded from any numeric element type without losing information:
 * signed integers as int64, unsigned integers and bool as uint64, floating
 * point (float16 and bfloat16 too) as double. */
typedef enum CpuNumKind { CPU_NUM_SINT, CPU_NUM_UINT, CPU_NUM_FLT } CpuNumKind;
typedef struct CpuNum {
  CpuNumKind kind;
  union {
    int64_t i;
    uint64_t u;
    double f;
  } v;
} CpuNum;

/* Element i of data of `type`; false for a non-numeric type. */
bool cpu_num_load(int32_t type, const void* data, size_t i, CpuNum* out);
/* Stores v as element i of `type`, with Cast's rules: integer to integer
 * wraps (two's complement); floating point to integer truncates toward zero,
 * saturates at the type's limits and maps NaN to 0; to bool is "nonzero"
 * (NaN is true); to float16/bfloat16 rounds to nearest even. False for a
 * non-numeric type. */
bool cpu_num_store(int32_t type, void* data, size_t i, CpuNum v);
/* The number as a double (rounded for 64-bit integers beyond 2^53). */
double cpu_num_as_double(CpuNum v);

/* A floating-point tensor (float16, bfloat16, float32, float64) read as
 * float32: borrowed when it is float32, else converted into the context's
 * scratch memory. `what` names the input in the error for a non-number. */
OnyxStatus* cpu_f32_input(OnyxKernelContext* ctx, const OnyxTensor* t, const char* what,
                          const float** out);
/* Allocates output i with the given shape (nothing when the node does not
 * have that output) and stores float32 values into its element type. */
OnyxStatus* cpu_f32_output(OnyxKernelContext* ctx, size_t i, const int64_t* dims, size_t rank,
                           const float* src);

/* IEEE half and bfloat16 <-> float. Rounding is to nearest even. */
float cpu_f16_to_f32(uint16_t h);
uint16_t cpu_f64_to_f16(double x);
static inline uint16_t cpu_f32_to_f16(float x) {
  return cpu_f64_to_f16(x);
}
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f64_to_bf16(double x);
uint16_t cpu_f32_to_bf16(float x);

/* --- Broadcasting --------------------------------------------------------------- */

#define CPU_BCAST_MAX_IN 4

/* Multidirectional (numpy) broadcasting of n shapes into out_dims (rank =
 * the largest rank). Errors name the node and the two disagreeing dims. */
OnyxStatus* cpu_bcast_shape(const OnyxKernelContext* ctx, size_t n, const int64_t* const* dims,
                            const size_t* ranks, int64_t* out_dims, size_t* out_rank);

/* An iteration plan: the output seen as dense rows of `dims[rank-1]`
 * elements; per input, element strides per dim (0 where it is broadcast).
 * Dims of size 1 are dropped and dims that are contiguous for every input
 * are merged, so rows are as long as possible. */
typedef struct CpuBcast {
  size_t n_in;
  size_t rank;  /* >= 1 */
  size_t count; /* output elements */
  int64_t dims[CPU_MAX_RANK];
  int64_t strides[CPU_BCAST_MAX_IN][CPU_MAX_RANK];
} CpuBcast;

/* Plans input shapes (each broadcastable to out_dims, ranks <= out_rank)
 * onto out_dims. */
void cpu_bcast_plan(CpuBcast* b, const int64_t* out_dims, size_t out_rank, size_t n,
                    const int64_t* const* dims, const size_t* ranks);

/* Called once per output row: in_off[k] is input k's element offset at the
 * row start, in_step[k] its step along the row (0 or the row stride),
 * out_off the row's output offset, len its length. */
typedef void (*CpuBcastRowFn)(void* user, const int64_t* in_off, const int64_t* in_step,
                              size_t out_off, size_t len);
/* Runs fn over every row in output order (nothing for an empty output). */
void cpu_bcast_run(const CpuBcast* b, CpuBcastRowFn fn, void* user);

/* --- Copies ------------------------------------------------------------------- */

/* Copies n elements src[src_off...] to dst[dst_off...] of the same type
 * (strings deep-copied). */
OnyxStatus* cpu_copy_elems(OnyxTensor* dst, size_t dst_off, const OnyxTensor* src, size_t src_off,
                           size_t n);
/* Fills the dense tensor dst (shape dims, rank) from src read at
 * src_offset + sum(idx[d] * src_strides[d]) elements: transposes, slices
 * (negative strides too) and broadcasts (zero strides). */
OnyxStatus* cpu_copy_strided(OnyxTensor* dst, const OnyxTensor* src, size_t rank,
                             const int64_t* dims, const int64_t* src_strides, int64_t src_offset);
/* The same, polling ctx's cancellation every CPU_STOP_INTERVAL elements or
 * so (ONYX_CANCELLED naming the node): for outputs whose size an attribute
 * or input data sets (Tile, Expand). */
OnyxStatus* cpu_copy_strided_ctx(const OnyxKernelContext* ctx, OnyxTensor* dst,
                                 const OnyxTensor* src, size_t rank, const int64_t* dims,
                                 const int64_t* src_strides, int64_t src_offset);
/* memcpy that accepts NULL pointers when n is 0 (empty tensors). */
void cpu_memcpy(void* dst, const void* src, size_t n);

/* --- Registration ---------------------------------------------------------------- */

/* One kernel of a table: an op over an inclusive opset range. */
typedef struct CpuKernelSpec {
  const char* op_type;
  int32_t since_version;
  int32_t end_version; /* ONYX_OPSET_LATEST: open-ended */
  const OnyxTypeConstraint* tc;
  size_t tc_count;
  OnyxStatus* (*create)(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state);
  OnyxStatus* (*compute)(void* state, OnyxKernelContext* ctx);
  void (*release)(void* state);
  void* user_data;
} CpuKernelSpec;

/* Registers every spec in the ai.onnx domain; stops at the first error. */
OnyxStatus* cpu_register_specs(OnyxKernelRegistry* r, const CpuKernelSpec* specs, size_t n);

/* Releases a state allocated with malloc (a create's usual partner). */
void cpu_free_state(void* state);

#endif /* CPU_UTIL_H */
