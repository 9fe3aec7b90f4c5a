/* cpu_fused_ew.c — com.onyx FusedElementwise on the CPU provider: the node's
 * program (format: schemas/ox_fused_ew.h; checked by the GPU providers'
 * gpu_fused_check, which has no device code) run over chunks of FE_CHUNK
 * elements, each instruction a vector loop over the chunk (the provider's
 * vector math, cpu_vmath.h, for the transcendental ones), so intermediates
 * stay in L1 and each input is read and Y written once. Chunks run in
 * parallel on the session's pool. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu-common/gpu_fused.h"
#include "cpu_kernels.h"
#include "cpu_util.h"
#include "cpu_vmath.h"

#define FE_CHUNK 512
#define FE_RANK  8

typedef struct CpuFe {
  const OnyxNode* node;
  GpuFeProgram prog;
} CpuFe;

static OnyxStatus* fe_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)ep;
  (void)user;
  size_t n_prog = 0, n_imm = 0;
  if (cpu_host->node_attr_type(node, "program") != ONYX_ATTR_INTS)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute 'program' (ints) is required");
  const int64_t* prog = cpu_host->node_attr_ints(node, "program", &n_prog);
  const float* imm = NULL;
  const OnyxAttrType it = cpu_host->node_attr_type(node, "immediates");
  if (it == ONYX_ATTR_FLOATS)
    imm = cpu_host->node_attr_floats(node, "immediates", &n_imm);
  else if (it != ONYX_ATTR_UNDEFINED)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute 'immediates' must be floats");
  CpuFe* f = calloc(1, sizeof *f);
  if (!f) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  int64_t at, value;
  const char* why = gpu_fused_check(prog, n_prog, imm, n_imm, cpu_host->node_input_count(node),
                                    &f->prog, &at, &value);
  if (why) {
    free(f);
    if (at < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute 'program': %s (%lld)", why,
                       (long long)value);
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "attribute 'program': instruction %lld: %s (%lld)", (long long)at, why,
                     (long long)value);
  }
  f->node = node;
  *state = f;
  return NULL;
}

static void fe_release(void* state) {
  free(state);
}

typedef struct FeJob {
  const GpuFeProgram* p;
  const float* x[GPU_FE_MAX_INPUTS];
  int mode[GPU_FE_MAX_INPUTS]; /* 0: Y's layout, 1: one value, 2: strided */
  int64_t strides[GPU_FE_MAX_INPUTS][FE_RANK];
  int64_t dims[FE_RANK];
  int rank, n_in;
  float* y;
  size_t n;
} FeJob;

/* d = a op b over len elements; a or b may be one value (sa / sb 0). */
#define FE_BIN(expr)                                                                               \
  do {                                                                                             \
    if (sa && sb) {                                                                                \
      for (size_t i = 0; i < len; i++) {                                                           \
        const float A = a[i], B = b[i];                                                            \
        (void)B;                                                                                   \
        d[i] = (expr);                                                                             \
      }                                                                                            \
    } else if (sb) {                                                                               \
      const float A = a[0];                                                                        \
      for (size_t i = 0; i < len; i++) {                                                           \
        const float B = b[i];                                                                      \
        (void)B;                                                                                   \
        d[i] = (expr);                                                                             \
      }                                                                                            \
    } else {                                                                                       \
      const float B = b[0];                                                                        \
      (void)B;                                                                                     \
      for (size_t i = 0; i < len; i++) {                                                           \
        const float A = sa ? a[i] : a[0];                                                          \
        d[i] = (expr);                                                                             \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void fe_binary(int32_t op, const float* a, int sa, const float* b, int sb, float* d,
                      size_t len) {
  switch (op) {
  case GPU_FE_ADD:
    FE_BIN(A + B);
    break;
  case GPU_FE_SUB:
    FE_BIN(A - B);
    break;
  case GPU_FE_MUL:
    FE_BIN(A * B);
    break;
  case GPU_FE_DIV:
    FE_BIN(A / B);
    break;
  case GPU_FE_POW:
    if (!sb && b[0] == 2.0f)
      FE_BIN(A * A);
    else if (!sb && b[0] == 3.0f)
      FE_BIN(A * A * A);
    else
      FE_BIN(powf(A, B));
    break;
  case GPU_FE_MAX:
    FE_BIN(fmaxf(A, B));
    break;
  default:
    FE_BIN(fminf(A, B));
    break;
  }
}

/* d = op(a) over len elements (a may be d). */
static void fe_unary(int32_t op, const float* a, float* d, size_t len, float p0, float p1) {
  switch (op) {
  case GPU_FE_NEG:
    for (size_t i = 0; i < len; i++)
      d[i] = -a[i];
    break;
  case GPU_FE_ABS:
    for (size_t i = 0; i < len; i++)
      d[i] = fabsf(a[i]);
    break;
  case GPU_FE_EXP:
    cpu_exp_f32(a, d, len);
    break;
  case GPU_FE_LOG:
    cpu_log_f32(a, d, len);
    break;
  case GPU_FE_SQRT:
    for (size_t i = 0; i < len; i++)
      d[i] = sqrtf(a[i]);
    break;
  case GPU_FE_RECIPROCAL:
    for (size_t i = 0; i < len; i++)
      d[i] = 1.0f / a[i];
    break;
  case GPU_FE_TANH:
    cpu_tanh_f32(a, d, len);
    break;
  case GPU_FE_SIGMOID:
    cpu_sigmoid_f32(a, d, len);
    break;
  case GPU_FE_ERF:
    cpu_erf_f32(a, d, len);
    break;
  case GPU_FE_RELU:
    for (size_t i = 0; i < len; i++)
      d[i] = a[i] > 0.0f ? a[i] : 0.0f;
    break;
  case GPU_FE_LEAKY_RELU:
    for (size_t i = 0; i < len; i++)
      d[i] = a[i] >= 0.0f ? a[i] : p0 * a[i];
    break;
  case GPU_FE_ELU:
    cpu_elu_f32(a, d, len, p0);
    break;
  case GPU_FE_CLIP:
    for (size_t i = 0; i < len; i++)
      d[i] = fminf(fmaxf(a[i], p0), p1);
    break;
  case GPU_FE_HARD_SIGMOID:
    cpu_hardsigmoid_f32(a, d, len, p0, p1);
    break;
  case GPU_FE_HARD_SWISH:
    cpu_hardswish_f32(a, d, len);
    break;
  case GPU_FE_SOFTPLUS:
    cpu_softplus_f32(a, d, len);
    break;
  case GPU_FE_GELU:
    cpu_gelu_f32(a, d, len);
    break;
  case GPU_FE_GELU_TANH: {
    float t[FE_CHUNK];
    for (size_t i = 0; i < len; i++)
      t[i] = 0.7978845608028654f * (a[i] + 0.044715f * a[i] * a[i] * a[i]);
    cpu_tanh_f32(t, t, len);
    for (size_t i = 0; i < len; i++)
      d[i] = 0.5f * a[i] * (1.0f + t[i]);
    break;
  }
  default: /* GPU_FE_SILU: the checked program holds no other code */
    cpu_silu_f32(a, d, len);
    break;
  }
}

static void fe_task(void* user, size_t begin, size_t end) {
  const FeJob* j = user;
  const GpuFeProgram* p = j->p;
  float regs[GPU_FE_MAX_REGS][FE_CHUNK] __attribute__((aligned(64)));
  for (size_t c = begin; c < end; c++) {
    const size_t lo = c * FE_CHUNK, len = j->n - lo < FE_CHUNK ? j->n - lo : FE_CHUNK;
    const float* src[GPU_FE_MAX_REGS] = {NULL};
    int vec[GPU_FE_MAX_REGS] = {0}; /* 1: src holds len values, 0: one */
    for (int k = 0; k < j->n_in; k++) {
      if (j->mode[k] == 0) {
        src[k] = j->x[k] + lo;
        vec[k] = 1;
      } else if (j->mode[k] == 1) {
        src[k] = j->x[k];
      } else {
        for (size_t i = 0; i < len; i++) {
          size_t rest = lo + i;
          int64_t off = 0;
          for (int d = j->rank - 1; d >= 0; d--) {
            off += (int64_t)(rest % (size_t)j->dims[d]) * j->strides[k][d];
            rest /= (size_t)j->dims[d];
          }
          regs[k][i] = j->x[k][off];
        }
        src[k] = regs[k];
        vec[k] = 1;
      }
    }
    for (int32_t k = 0; k < p->n_instr; k++) {
      const int32_t* ins = p->code + 4 * k;
      const bool last = k + 1 == p->n_instr;
      float* d = last ? j->y + lo : regs[ins[1]];
      const float* a = ins[2] >= 0 ? src[ins[2]] : &p->imm[-1 - ins[2]];
      const int sa = ins[2] >= 0 ? vec[ins[2]] : 0;
      if (ins[0] <= GPU_FE_MIN) {
        const float* b = ins[3] >= 0 ? src[ins[3]] : &p->imm[-1 - ins[3]];
        const int sb = ins[3] >= 0 ? vec[ins[3]] : 0;
        fe_binary(ins[0], a, sa, b, sb, d, len);
      } else {
        const int32_t pi = ins[3] < 0 ? -1 - ins[3] : 0;
        const float p1 = p->imm[pi + 1 < GPU_FE_MAX_IMM ? pi + 1 : pi];
        if (sa) {
          fe_unary(ins[0], a, d, len, p->imm[pi], p1);
        } else { /* a unary op of one value: that value's result, repeated */
          float one;
          fe_unary(ins[0], a, &one, 1, p->imm[pi], p1);
          for (size_t i = 0; i < len; i++)
            d[i] = one;
        }
      }
      src[ins[1]] = d;
      vec[ins[1]] = 1;
    }
  }
}

static OnyxStatus* fe_compute(void* state, OnyxKernelContext* ctx) {
  const CpuFe* f = state;
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  if (n_in < 1 || n_in > GPU_FE_MAX_INPUTS)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%zu inputs; 1 to 8 are supported", n_in);
  FeJob j = {.p = &f->prog, .n_in = (int)n_in};
  const OnyxTensor* in[GPU_FE_MAX_INPUTS];
  size_t rank = 0;
  for (size_t k = 0; k < n_in; k++) {
    in[k] = cpu_host->ctx_input(ctx, k);
    if (!in[k] || cpu_host->tensor_elem_type(in[k]) != ONYX_ELEM_FLOAT32)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input %zu must be a float32 tensor", k);
    const size_t r = cpu_host->tensor_rank(in[k]);
    if (r > FE_RANK)
      return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "input %zu has rank %zu; at most %d", k, r,
                           FE_RANK);
    if (r > rank) rank = r;
  }
  for (size_t d = 0; d < rank; d++)
    j.dims[d] = 1;
  for (size_t k = 0; k < n_in; k++) {
    const size_t r = cpu_host->tensor_rank(in[k]);
    const int64_t* dk = cpu_host->tensor_dims(in[k]);
    for (size_t d = 0; d < r; d++) {
      int64_t* o = &j.dims[rank - r + d];
      if (dk[d] == *o || dk[d] == 1) continue;
      if (*o != 1)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "input %zu dim %zu is %lld, which does not broadcast with %lld", k, d,
                             (long long)dk[d], (long long)*o);
      *o = dk[d];
    }
  }
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, j.dims, rank, &y);
  if (st) return st;
  j.n = cpu_host->tensor_elem_count(y);
  j.y = cpu_host->tensor_mutable_data(y);
  j.rank = (int)rank;
  for (size_t k = 0; k < n_in; k++) {
    const size_t r = cpu_host->tensor_rank(in[k]);
    const int64_t* dk = cpu_host->tensor_dims(in[k]);
    const size_t cnt = cpu_host->tensor_elem_count(in[k]);
    j.x[k] = cpu_host->tensor_data(in[k]);
    j.mode[k] = cnt == 1 ? 1 : cnt == j.n ? 0 : 2;
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t dd = d >= rank - r ? dk[d - (rank - r)] : 1;
      j.strides[k][d] = dd == 1 ? 0 : stride;
      stride *= dd;
    }
  }
  if (!j.n) return NULL;
  const size_t chunks = (j.n + FE_CHUNK - 1) / FE_CHUNK;
  if (chunks > 1)
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), chunks, fe_task, &j);
  else
    fe_task(&j, 0, 1);
  return NULL;
}

OnyxStatus* cpu_register_fused_ew(OnyxKernelRegistry* r) {
  static const int32_t f32[1] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  const OnyxKernelDef d = {.struct_size = sizeof d,
                           .domain = "com.onyx",
                           .op_type = "FusedElementwise",
                           .since_version = 1,
                           .end_version = ONYX_OPSET_LATEST,
                           .type_constraints = tc,
                           .type_constraint_count = 1,
                           .create = fe_create,
                           .compute = fe_compute,
                           .release = fe_release};
  return cpu_host->register_kernel(r, &d);
}
