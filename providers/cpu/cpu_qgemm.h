/* cpu_qgemm.h — the CPU provider's 8-bit integer GEMM: C = A' x B' summed
 * in int32, for the quantized products (cpu_quant_mm.c).
 *
 * Operands. A (m x k, the activations) and B (k x n, the weights) are each
 * uint8 or int8. The kernels multiply uint8 A' by int8 B': an int8 A is
 * shifted by +128 (a' = a + 128) and a uint8 B by -128 (b' = b - 128), both
 * exact in 8 bits. The GEMM hands the caller's epilogue the raw sums
 * S[i][j] = sum_k a'[i][k] * b'[k][j] together with the row sums of A' and
 * the column sums of B', from which the caller forms
 *   sum_k (a - za)(b - zb[j]) = S - zb'[j] * rowsum[i] - za' * colsum[j]
 *                               + k * za' * zb'[j]
 * with za' = za (+128 for int8 A) and zb' = zb (-128 for uint8 B). All of
 * it is exact modulo 2^32 (the sums wrap in uint32, never overflow into
 * undefined behaviour), and exact outright while k * 255 * 255 < 2^31.
 *
 * ISA paths, picked by cpuid (ONYX_CPU_ISA=generic|avx2 caps them, as it
 * caps the float GEMM; ONYX_CPU_ISA=avx512 caps them at AVX-512BW): AVX-512 VNNI (vpdpbusd on k
 * groups of 4), AVX-512BW and AVX2 (operands widened to int16, vpmaddwd on k pairs: exact, unlike
 * vpmaddubsw, whose int16 pair sums saturate at 255 * 127 * 2 > 32767), and
 * portable C. */
#ifndef CPU_QGEMM_H
#define CPU_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_kernels.h"
#include "cpu_util.h"

typedef enum CpuQgemmIsa {
  CPU_QGEMM_SCALAR = 0,
  CPU_QGEMM_AVX2 = 1,
  CPU_QGEMM_AVX512BW = 2,
  CPU_QGEMM_VNNI = 3,
} CpuQgemmIsa;

/* The path this machine runs (cpuid, capped by ONYX_CPU_ISA and by
 * cpu_qgemm_force_isa). */
CpuQgemmIsa cpu_qgemm_isa(void);
/* The best path the machine supports, ignoring caps (tests loop up to it). */
CpuQgemmIsa cpu_qgemm_isa_supported(void);
/* Tests: run `isa` (at most cpu_qgemm_isa_supported()); -1 undoes it. */
void cpu_qgemm_force_isa(int isa);
const char* cpu_qgemm_isa_name(CpuQgemmIsa isa);

/* B packed for one ISA path: panels of the path's NR columns, k padded to
 * the path's k group with zeros, columns past n zero. */
typedef struct CpuQgemmB {
  CpuQgemmIsa isa;
  size_t k, n;
  void* data;
  int32_t* colsum; /* n entries: sum over k of b' */
} CpuQgemmB;

/* Packs B for the current path: element (r, c) at b[r * rs + c * cs], int8
 * when b_signed, else uint8. False when memory is short or the sizes
 * overflow (p is then empty; cpu_qgemm_free_b is safe on it). */
bool cpu_qgemm_pack_b(CpuQgemmB* p, const void* b, bool b_signed, size_t k, size_t n, size_t rs,
                      size_t cs);
void cpu_qgemm_free_b(CpuQgemmB* p);

/* Rows and columns of a block of C: at most this many each. */
#define CPU_QGEMM_MAX_BLOCK 256

/* Called on each finished block of C: c[i * ldc + j] is the raw sum S of
 * row row0 + i, column col0 + j (i < rows, j < cols); rowsum[i] and
 * colsum[j] are those rows' and columns' sums. The epilogue may overwrite
 * the block (scratch of the GEMM). Blocks never overlap, and run on the
 * pool's threads concurrently. */
typedef void (*CpuQgemmEpilogue)(void* user, int32_t* c, size_t ldc, size_t row0, size_t rows,
                                 size_t col0, size_t cols, const int32_t* rowsum,
                                 const int32_t* colsum);

typedef enum { CPU_QGEMM_OK = 0, CPU_QGEMM_OOM = 1, CPU_QGEMM_STOPPED = 2 } CpuQgemmResult;

/* Runs A (m x b->k, element (r, c) at a[r * rs + c * cs], int8 when
 * a_signed) times the packed B over the pool, polling `stop` per k block
 * (NULL: never stops), and hands every block of C to epi. With rowsums
 * false the caller's epilogue does not read A's row sums (every zb' is 0:
 * int8 B with zero point 0), and the GEMM may leave them uncomputed: the
 * epilogue then gets zeros for those it skipped. */
CpuQgemmResult cpu_qgemm(OnyxThreadPool* pool, CpuStop* stop, const void* a, bool a_signed,
                         size_t m, size_t rs, size_t cs, const CpuQgemmB* b, bool rowsums,
                         CpuQgemmEpilogue epi, void* user);

/* A read where it lies in segments (a convolution's channels-last input,
 * padded so that every tap lands inside: the im2col rows never built). Row
 * i of A is n_seg runs of seg_len bytes, run t at
 *   base + (i / per_line) * line_step + (i % per_line) * row_step
 *        + t * seg_stride
 * (a kernel row of a 2-D convolution: kernel width x channels bytes; rows
 * are output positions, per_line of them per output row). */
typedef struct CpuQgemmSegA {
  const uint8_t* base;
  size_t n_seg, seg_len, seg_stride;
  size_t per_line, row_step, line_step;
} CpuQgemmSegA;

/* The segmented path applies: B packed for VNNI (the path this machine
 * runs), seg_len a multiple of 4, and n_seg * seg_len == B's k. */
bool cpu_qgemm_seg_ok(const CpuQgemmB* b, const CpuQgemmSegA* a);
/* cpu_qgemm on a segmented A (m rows); only where cpu_qgemm_seg_ok. The
 * epilogue gets the same sums as cpu_qgemm on the im2col rows. */
CpuQgemmResult cpu_qgemm_seg(OnyxThreadPool* pool, CpuStop* stop, const CpuQgemmSegA* a,
                             bool a_signed, size_t m, const CpuQgemmB* b, bool rowsums,
                             CpuQgemmEpilogue epi, void* user);

/* Buffers kept per thread between calls (a fresh large allocation per
 * call costs a page fault per 4 KiB). Slots 0 and 1 are the GEMM's own;
 * callers use 2 and up. The calling thread's slot, grown to `bytes`, or a
 * fresh allocation when the slot is in use (a nested call) or too large;
 * *owner says which, for cpu_qgemm_buf_release. NULL without memory. */
#define CPU_QGEMM_BUF_SLOTS 4
typedef struct CpuQBuf CpuQBuf;
void* cpu_qgemm_buf_acquire(int slot, size_t bytes, CpuQBuf** owner);
void cpu_qgemm_buf_release(void* p, CpuQBuf* owner);

#endif /* CPU_QGEMM_H */
