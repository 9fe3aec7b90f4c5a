/* cpu_nchwc.h — internal to the CPU provider: the kernels of the com.onyx
 * blocked-channel ops (schemas/schemas_nchwc.c) that the layout pass
 * (host/optimizer/opt_layout_nchwc.c) rewrites conv chains into. A blocked
 * tensor of [N, C, H, W] is [N, Cb = ceil(C / b), H, W, b]: the b channels of
 * one block of one pixel are adjacent, one vector register of b = 16 floats
 * on AVX-512 or 8 on AVX2. Between convs of a chain the activations stay
 * blocked, so no conv pays an NCHW transpose of its own.
 *
 * NchwcConv computes pointwise convolutions (1x1, stride 1, no padding,
 * group 1) as a direct product over the input channels: per task two
 * output blocks by six pixels, twelve vector accumulators, each input
 * value broadcast once against two weight vectors; depthwise ones
 * (group = C = M, any kernel, stride, dilation and padding) with one vector
 * of b channels per pixel and tap, four output pixels at a time inside the
 * image; and every other convolution (any window, stride, dilation and
 * padding; group 1 or grouped, X blocked, or NCHW for a chain's stem)
 * through a direct loop over sets of up to four output blocks (two for
 * b = 8) that read the same input blocks: per tile, the set's blocks by up
 * to twelve pixels of one output row (24 accumulators at most), each input
 * value broadcast once against the set's adjacent weight vectors of its
 * tap and channel. A grouped conv's output block reads the input blocks
 * holding its groups' channels; where a group is narrower than a block,
 * the packed weights hold zeros for the other groups' channels (a
 * block-diagonal W). Pixels whose taps all lie inside the image run
 * without bounds checks, the others one at a time over their in-image
 * taps. W is packed once at creation. Bias, the residual Z and
 * FusedConv's activation are applied before the tile leaves the cache.
 * Each output is bias + the sum over input channels (pointwise), over
 * kernel rows, then columns (depthwise), or over input blocks, kernel
 * rows, columns, then the block's channels (full) of x * w, + z, then the
 * activation, on every path; the paths differ by FMA rounding only. A
 * portable scalar loop computes the same where the block's ISA is
 * missing. */
#ifndef CPU_NCHWC_H
#define CPU_NCHWC_H

#include "cpu_kernels.h"

#include <stdbool.h>
#include <stddef.h>

enum { CPU_NCHWC_SCALAR = 0, CPU_NCHWC_AVX2 = 1, CPU_NCHWC_AVX512 = 2 };

/* The path blocked kernels take: AVX-512 (avx512f) or AVX2 (avx2 + fma) by
 * cpuid, capped by ONYX_CPU_ISA=generic|avx2; scalar elsewhere. Block 16
 * runs vectorized on the AVX-512 path, block 8 on the AVX2 and AVX-512
 * paths; other combinations run the scalar loops. */
int cpu_nchwc_path(void);
/* Tests: forces the path (capped by what the machine has), -1: cpuid. Not
 * thread-safe against concurrent runs. */
void cpu_nchwc_force_path(int path);

/* A set of nob adjacent output blocks [ob, ob + nob) of a full or
 * pointwise conv that read the same input blocks [ib, ib + nib); its
 * packed weights start at wofs: [nib][kh * kw][block (input channel)]
 * [nob][block (output channel)]. */
typedef struct CpuNchwcSet {
  size_t ob, nob, ib, nib, wofs;
} CpuNchwcSet;

/* One blocked convolution. wp and bias are packed (cpu_nchwc_pack_*): bias
 * holds mb * block floats (zero past m), or is NULL. */
typedef struct CpuNchwcConv {
  const float* x; /* [n, cb, h, w, block] */
  const float* wp;
  const float* bias;
  const float* z; /* Y's shape, or NULL */
  float* y;       /* [n, mb, oh, ow, block] */
  size_t n, c, cb, h, w, m, mb, oh, ow, block;
  bool depthwise;          /* group = c = m */
  bool full;               /* not depthwise nor pointwise: the direct loop over sets */
  bool nchw_in;            /* full only: X is NCHW [n, c, h, w] (a chain's first conv) */
  const CpuNchwcSet* sets; /* full and pointwise: the output block sets */
  size_t nsets;
  size_t kh, kw, sh, sw, dh, dw, pt, pl;
  int act; /* CpuAct */
  float alpha, lo, hi;
} CpuNchwcConv;

/* Floats of the packed depthwise W: cb * kh * kw * block. */
size_t cpu_nchwc_depthwise_floats(size_t c, size_t kh, size_t kw, size_t block);
/* Output block sets of a full or pointwise conv of W [m, c / group, kh,
 * kw] over c input channels: consecutive output blocks reading the same
 * input blocks, up to cpu_nchwc_set_blocks(block) of them. Writes at most
 * ceil(m / block) sets and returns their count; *floats: the packed W's
 * size (0 when it overflows). group divides c and m. */
size_t cpu_nchwc_conv_sets(size_t m, size_t c, size_t group, size_t kh, size_t kw, size_t block,
                           CpuNchwcSet* sets, size_t* floats);
/* Output blocks per set: 4 for block 16, 2 for block 8. */
size_t cpu_nchwc_set_blocks(size_t block);
/* W [m, c / group, kh, kw] into the sets' layout, zero past m and c and
 * where an output channel's group does not read the input channel. */
void cpu_nchwc_pack_conv(const float* w, size_t m, size_t c, size_t group, size_t kh, size_t kw,
                         size_t block, const CpuNchwcSet* sets, size_t nsets, float* out);
/* W [c, 1, kh, kw]: out[cb][tap][j] = W[cb * block + j][tap], zero past c. */
void cpu_nchwc_pack_depthwise(const float* w, size_t c, size_t kh, size_t kw, size_t block,
                              float* out);

/* Runs the convolution on ctx's thread pool; ONYX_CANCELLED when the run
 * was cancelled (parts of Y then are not written). */
OnyxStatus* cpu_nchwc_conv_run(OnyxKernelContext* ctx, const CpuNchwcConv* p);

/* [n, c, hw] -> [n, ceil(c / block), hw, block], padded lanes zero. */
void cpu_nchwc_reorder_input(const float* x, float* y, size_t n, size_t c, size_t hw, size_t block);
/* [n, cb, hw, block] -> [n, c, hw] (c <= cb * block). */
void cpu_nchwc_reorder_output(const float* x, float* y, size_t n, size_t c, size_t cb, size_t hw,
                              size_t block);
/* [n, cb, hw, block] -> [n, cb, block]: the mean over hw of every lane. */
void cpu_nchwc_global_average(const float* x, float* y, size_t n, size_t cb, size_t hw,
                              size_t block);

/* y[i][b][p][:] = x[i][b][p][:] * s[i][b][:] over [n, cb, hw, block] (y may
 * be x). */
void cpu_nchwc_scale(const float* x, const float* s, float* y, size_t n, size_t cb, size_t hw,
                     size_t block);

/* The blocked ops' kernel definitions (com.onyx, float32, every opset):
 * CPU_NCHWC_DEF(op, create, compute, release, aliases, alias_count), and
 * their registration (cpu_nchwc.c, cpu_nchwc_pool.c). */
extern const OnyxTypeConstraint cpu_nchwc_tc_f32[1];
/* Y (output 0) may take X's (input 0) buffer. */
extern const OnyxAlias cpu_nchwc_inplace[1];
#define CPU_NCHWC_DEF(op, cr, comp, rel, al, nal)                                                  \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = "com.onyx", .op_type = op, .since_version = 1, \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = cpu_nchwc_tc_f32,                        \
    .type_constraint_count = 1, .aliases = al, .alias_count = nal, .create = cr, .compute = comp,  \
    .release = rel                                                                                 \
  }
OnyxStatus* cpu_nchwc_register_defs(OnyxKernelRegistry* r, const OnyxKernelDef* defs, size_t n);

OnyxStatus* cpu_register_nchwc(OnyxKernelRegistry* r);

#endif /* CPU_NCHWC_H */
