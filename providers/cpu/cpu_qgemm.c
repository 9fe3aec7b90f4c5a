/* cpu_qgemm.c — the CPU provider's 8-bit integer GEMM (see cpu_qgemm.h for
 * the operand shifts and the zero-point algebra).
 *
 * Layouts. Every path works on k groups of G elements whose products one
 * instruction sums into an int32 lane: G = 4 bytes for VNNI (vpdpbusd), G =
 * 2 int16 for the int16 paths (vpmaddwd) and portable C. One group of one
 * row or column takes 4 bytes either way. B is packed into panels of NR
 * columns: panel p holds, for each group, NR columns x G values (int8 or
 * int16); A into panels of MR rows: for each group, MR rows x G values
 * (uint8 or uint16), so the micro-kernel broadcasts one 32-bit word per row
 * and loads NR words of B per group. k is padded to a whole group and the
 * rows / columns past m / n to whole panels, all with zeros, which add
 * nothing to the sums.
 *
 * Blocking. A is packed once per call (in parallel over its panels, with
 * the row sums). C is cut into blocks of MC rows x NC columns, the units of
 * parallel work; a block runs, per k block of KCG groups (a KCG x NR panel
 * of B is 32 KiB at most, about the L1 data cache), every B panel against
 * every A panel of the block into an int32 tile, then hands the tile to the
 * caller's epilogue (zero points, requantization) while it is in cache.
 * Each sum runs over k in the same order whatever the blocking or thread
 * count, so results do not depend on the pool size. */
#include "cpu_qgemm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QGEMM_X86 1
#else
#define QGEMM_X86 0
#endif

/* k groups per k block: 256 groups of a 32-column panel are 32 KiB. */
#define KCG 256
/* A panels per C block (rows = MR * MC_PANELS), B panels per C block. */
#define MC_PANELS 12
#define NC_PANELS 8
_Static_assert(MC_PANELS * 8 <= CPU_QGEMM_MAX_BLOCK && NC_PANELS * 32 <= CPU_QGEMM_MAX_BLOCK,
               "C blocks within CPU_QGEMM_MAX_BLOCK");

typedef void (*QKernel)(const uint8_t* ap, const uint8_t* bp, size_t kg, int32_t* c, size_t ldc,
                        int accumulate);

typedef struct QIsa {
  const char* name;
  size_t g;  /* k values per group */
  size_t mr; /* rows per A panel */
  size_t nr; /* columns per B panel */
  QKernel kernel;
} QIsa;

/* --- micro-kernels: an MR x NR tile of C over kg groups ---------------------------- */

/* Portable C on the int16 layout, 4 x 8. uint32 sums: wrap, no UB. */
static void kern_scalar(const uint8_t* ap, const uint8_t* bp, size_t kg, int32_t* c, size_t ldc,
                        int accumulate) {
  uint32_t s[4][8];
  memset(s, 0, sizeof s);
  for (size_t g = 0; g < kg; g++) {
    const uint16_t* a = (const uint16_t*)(const void*)(ap + g * 4 * 4);
    const int16_t* b = (const int16_t*)(const void*)(bp + g * 8 * 4);
    for (size_t r = 0; r < 4; r++)
      for (size_t j = 0; j < 8; j++)
        s[r][j] += (uint32_t)((int32_t)a[2 * r] * b[2 * j] + (int32_t)a[2 * r + 1] * b[2 * j + 1]);
  }
  for (size_t r = 0; r < 4; r++)
    for (size_t j = 0; j < 8; j++) {
      const uint32_t old = accumulate ? (uint32_t)c[r * ldc + j] : 0;
      c[r * ldc + j] = (int32_t)(old + s[r][j]);
    }
}

#if QGEMM_X86
static inline int32_t load_word(const uint8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* AVX2, int16 layout, 6 x 16: 12 accumulators, two B vectors per group. */
__attribute__((target("avx2"))) static void
kern_avx2(const uint8_t* ap, const uint8_t* bp, size_t kg, int32_t* c, size_t ldc, int accumulate) {
  __m256i s[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < 6; r++)
    s[r][0] = s[r][1] = _mm256_setzero_si256();
  for (size_t g = 0; g < kg; g++) {
    const __m256i b0 = _mm256_loadu_si256((const __m256i*)(const void*)(bp + g * 64));
    const __m256i b1 = _mm256_loadu_si256((const __m256i*)(const void*)(bp + g * 64 + 32));
    const uint8_t* a = ap + g * 24;
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
      const __m256i av = _mm256_set1_epi32(load_word(a + 4 * r));
      s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(av, b0));
      s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(av, b1));
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < 6; r++) {
    __m256i* p0 = (__m256i*)(void*)(c + r * ldc);
    __m256i* p1 = (__m256i*)(void*)(c + r * ldc + 8);
    if (accumulate) {
      s[r][0] = _mm256_add_epi32(s[r][0], _mm256_loadu_si256(p0));
      s[r][1] = _mm256_add_epi32(s[r][1], _mm256_loadu_si256(p1));
    }
    _mm256_storeu_si256(p0, s[r][0]);
    _mm256_storeu_si256(p1, s[r][1]);
  }
}

/* AVX-512BW, int16 layout, 8 x 32: 16 accumulators. */
__attribute__((target("avx512f,avx512bw"))) static void kern_avx512bw(const uint8_t* ap,
                                                                      const uint8_t* bp, size_t kg,
                                                                      int32_t* c, size_t ldc,
                                                                      int accumulate) {
  __m512i s[8][2];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++)
    s[r][0] = s[r][1] = _mm512_setzero_si512();
  for (size_t g = 0; g < kg; g++) {
    const __m512i b0 = _mm512_loadu_si512(bp + g * 128);
    const __m512i b1 = _mm512_loadu_si512(bp + g * 128 + 64);
    const uint8_t* a = ap + g * 32;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      const __m512i av = _mm512_set1_epi32(load_word(a + 4 * r));
      s[r][0] = _mm512_add_epi32(s[r][0], _mm512_madd_epi16(av, b0));
      s[r][1] = _mm512_add_epi32(s[r][1], _mm512_madd_epi16(av, b1));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    int32_t* p = c + r * ldc;
    if (accumulate) {
      s[r][0] = _mm512_add_epi32(s[r][0], _mm512_loadu_si512(p));
      s[r][1] = _mm512_add_epi32(s[r][1], _mm512_loadu_si512(p + 16));
    }
    _mm512_storeu_si512(p, s[r][0]);
    _mm512_storeu_si512(p + 16, s[r][1]);
  }
}

/* AVX-512 VNNI, byte layout, 8 x 32: vpdpbusd sums four uint8 x int8
 * products into each int32 lane (no intermediate saturation). */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
kern_vnni(const uint8_t* ap, const uint8_t* bp, size_t kg, int32_t* c, size_t ldc, int accumulate) {
  __m512i s[8][2];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++)
    s[r][0] = s[r][1] = _mm512_setzero_si512();
  for (size_t g = 0; g < kg; g++) {
    const __m512i b0 = _mm512_loadu_si512(bp + g * 128);
    const __m512i b1 = _mm512_loadu_si512(bp + g * 128 + 64);
    const uint8_t* a = ap + g * 32;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      const __m512i av = _mm512_set1_epi32(load_word(a + 4 * r));
      s[r][0] = _mm512_dpbusd_epi32(s[r][0], av, b0);
      s[r][1] = _mm512_dpbusd_epi32(s[r][1], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    int32_t* p = c + r * ldc;
    if (accumulate) {
      s[r][0] = _mm512_add_epi32(s[r][0], _mm512_loadu_si512(p));
      s[r][1] = _mm512_add_epi32(s[r][1], _mm512_loadu_si512(p + 16));
    }
    _mm512_storeu_si512(p, s[r][0]);
    _mm512_storeu_si512(p + 16, s[r][1]);
  }
}

/* kern_vnni reading A where it lies (rows lda bytes apart, k a multiple of
 * 4) instead of from a packed panel: each row is one sequential stream.
 * flip4 turns int8 bytes into uint8 (+128). */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
kern_vnni_direct(const uint8_t* a, size_t lda, uint32_t flip4, const uint8_t* bp, size_t kg,
                 int32_t* c, size_t ldc, int accumulate) {
  __m512i s[8][2];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++)
    s[r][0] = s[r][1] = _mm512_setzero_si512();
  for (size_t g = 0; g < kg; g++) {
    const __m512i b0 = _mm512_loadu_si512(bp + g * 128);
    const __m512i b1 = _mm512_loadu_si512(bp + g * 128 + 64);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      const __m512i av =
          _mm512_set1_epi32((int32_t)((uint32_t)load_word(a + r * lda + g * 4) ^ flip4));
      s[r][0] = _mm512_dpbusd_epi32(s[r][0], av, b0);
      s[r][1] = _mm512_dpbusd_epi32(s[r][1], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    int32_t* p = c + r * ldc;
    if (accumulate) {
      s[r][0] = _mm512_add_epi32(s[r][0], _mm512_loadu_si512(p));
      s[r][1] = _mm512_add_epi32(s[r][1], _mm512_loadu_si512(p + 16));
    }
    _mm512_storeu_si512(p, s[r][0]);
    _mm512_storeu_si512(p + 16, s[r][1]);
  }
}
#endif

#if QGEMM_X86
/* kern_vnni_direct with each of the 8 rows at its own address (the
 * segmented A of cpu_qgemm_seg: rows of a convolution's padded input). */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
kern_vnni_rows(const uint8_t* const* rp, uint32_t flip4, const uint8_t* bp, size_t kg, int32_t* c,
               size_t ldc, int accumulate) {
  __m512i s[8][2];
  const uint8_t* a[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    s[r][0] = s[r][1] = _mm512_setzero_si512();
    a[r] = rp[r];
  }
  for (size_t g = 0; g < kg; g++) {
    const __m512i b0 = _mm512_loadu_si512(bp + g * 128);
    const __m512i b1 = _mm512_loadu_si512(bp + g * 128 + 64);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
      const __m512i av = _mm512_set1_epi32((int32_t)((uint32_t)load_word(a[r] + g * 4) ^ flip4));
      s[r][0] = _mm512_dpbusd_epi32(s[r][0], av, b0);
      s[r][1] = _mm512_dpbusd_epi32(s[r][1], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    int32_t* p = c + r * ldc;
    if (accumulate) {
      s[r][0] = _mm512_add_epi32(s[r][0], _mm512_loadu_si512(p));
      s[r][1] = _mm512_add_epi32(s[r][1], _mm512_loadu_si512(p + 16));
    }
    _mm512_storeu_si512(p, s[r][0]);
    _mm512_storeu_si512(p + 16, s[r][1]);
  }
}
#endif

static const QIsa ISAS[] = {
    {"scalar", 2, 4, 8, kern_scalar},
#if QGEMM_X86
    {"avx2", 2, 6, 16, kern_avx2},
    {"avx512bw", 2, 8, 32, kern_avx512bw},
    {"avx512vnni", 4, 8, 32, kern_vnni},
#endif
};

/* --- dispatch ---------------------------------------------------------------------- */

static _Atomic int forced = -1;

CpuQgemmIsa cpu_qgemm_isa_supported(void) {
  static _Atomic int cached = -1;
  int v = cached;
  if (v < 0) {
    v = CPU_QGEMM_SCALAR;
#if QGEMM_X86
    /* __builtin_cpu_supports also checks that the OS saves the registers. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
      v = __builtin_cpu_supports("avx512vnni") ? CPU_QGEMM_VNNI : CPU_QGEMM_AVX512BW;
    else if (__builtin_cpu_supports("avx2"))
      v = CPU_QGEMM_AVX2;
#endif
    cached = v;
  }
  return (CpuQgemmIsa)v;
}

CpuQgemmIsa cpu_qgemm_isa(void) {
  int v = cpu_qgemm_isa_supported();
  const int f = forced;
  if (f >= 0 && f < v) v = f;
  /* ONYX_CPU_ISA=generic|avx2 caps it, as it caps the float GEMM;
   * ONYX_CPU_ISA=avx512 caps it at AVX-512BW (no VNNI; the float kernels
   * take that value as no cap). */
  static _Atomic int cap = -2; /* -2: not read yet; -1: no cap */
  int cp = cap;
  if (cp == -2) {
    const char* e = getenv("ONYX_CPU_ISA");
    cp = !e                      ? -1
         : !strcmp(e, "generic") ? CPU_QGEMM_SCALAR
         : !strcmp(e, "avx2")    ? CPU_QGEMM_AVX2
         : !strcmp(e, "avx512")  ? CPU_QGEMM_AVX512BW
                                 : -1;
    cap = cp;
  }
  if (cp >= 0 && v > cp) v = cp;
  return (CpuQgemmIsa)v;
}

void cpu_qgemm_force_isa(int isa) {
  forced = isa;
}

const char* cpu_qgemm_isa_name(CpuQgemmIsa isa) {
  return (size_t)isa < CPU_ARRAY_LEN(ISAS) ? ISAS[isa].name : "?";
}

static const QIsa* qisa(CpuQgemmIsa isa) {
  return (size_t)isa < CPU_ARRAY_LEN(ISAS) ? &ISAS[isa] : &ISAS[0];
}

/* --- packing ----------------------------------------------------------------------- */

static size_t div_up(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

#if QGEMM_X86
/* The VNNI packing of a B with unit column stride (a row-major MatMul B):
 * each full group of 4 rows of a full panel is interleaved 16 columns at a
 * time in SSE2 registers (bytes of rows 0..3 of a column together), the
 * panel's edges element by element; the column sums run over B's rows
 * (contiguous, vectorized by the compiler). Same layout and sums as the
 * general loop. */
static void pack_b_vnni_rows(CpuQgemmB* p, const QIsa* s, const uint8_t* src, bool b_signed,
                             size_t k, size_t n, size_t rs) {
  const uint8_t flip = b_signed ? 0 : 0x80; /* b' = (int8)(b ^ 0x80) = b - 128 for uint8 */
  const __m128i vf = _mm_set1_epi8((char)flip);
  const size_t nr = s->nr, kg = div_up(k, 4), panels = div_up(n, nr), kfull = k / 4;
  for (size_t q = 0; q < panels; q++) {
    uint8_t* dst = (uint8_t*)p->data + q * kg * nr * 4;
    const bool full = (q + 1) * nr <= n;
    for (size_t g = 0; g < kg; g++) {
      uint8_t* d = dst + g * nr * 4;
      if (full && g < kfull) {
        const uint8_t* r0 = src + g * 4 * rs + q * nr;
        for (size_t j0 = 0; j0 < nr; j0 += 16) {
          const __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(r0 + j0)), vf);
          const __m128i x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(r0 + rs + j0)), vf);
          const __m128i x2 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(r0 + 2 * rs + j0)), vf);
          const __m128i x3 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(r0 + 3 * rs + j0)), vf);
          const __m128i lo01 = _mm_unpacklo_epi8(x0, x1), lo23 = _mm_unpacklo_epi8(x2, x3);
          const __m128i hi01 = _mm_unpackhi_epi8(x0, x1), hi23 = _mm_unpackhi_epi8(x2, x3);
          uint8_t* o = d + j0 * 4;
          _mm_storeu_si128((__m128i*)o, _mm_unpacklo_epi16(lo01, lo23));
          _mm_storeu_si128((__m128i*)(o + 16), _mm_unpackhi_epi16(lo01, lo23));
          _mm_storeu_si128((__m128i*)(o + 32), _mm_unpacklo_epi16(hi01, hi23));
          _mm_storeu_si128((__m128i*)(o + 48), _mm_unpackhi_epi16(hi01, hi23));
        }
        continue;
      }
      for (size_t j = 0; j < nr; j++)
        for (size_t t = 0; t < 4; t++) {
          const size_t r = g * 4 + t, col = q * nr + j;
          d[j * 4 + t] = col < n && r < k ? (uint8_t)(src[r * rs + col] ^ flip) : 0;
        }
    }
  }
  uint32_t* sum = (uint32_t*)p->colsum; /* zeroed by calloc; wraps as the general loop's */
  for (size_t r = 0; r < k; r++) {
    const uint8_t* row = src + r * rs;
    for (size_t j = 0; j < n; j++)
      sum[j] += (uint32_t)(int32_t)(int8_t)(row[j] ^ flip);
  }
}
#endif

bool cpu_qgemm_pack_b(CpuQgemmB* p, const void* b, bool b_signed, size_t k, size_t n, size_t rs,
                      size_t cs) {
  memset(p, 0, sizeof *p);
  p->isa = cpu_qgemm_isa();
  const QIsa* s = qisa(p->isa);
  const size_t kg = div_up(k, s->g), panels = div_up(n, s->nr);
  size_t bytes;
  if (!cpu_mul_size(kg, panels, &bytes) || !cpu_mul_size(bytes, s->nr * 4, &bytes) ||
      n > SIZE_MAX / sizeof(int32_t))
    return false;
  p->data = malloc(bytes ? bytes : 1);
  p->colsum = calloc(n ? n : 1, sizeof(int32_t));
  if (!p->data || !p->colsum) {
    cpu_qgemm_free_b(p);
    return false;
  }
  p->k = k;
  p->n = n;
  const uint8_t* src = b;
#if QGEMM_X86
  if (s->g == 4 && cs == 1 && s->nr % 16 == 0) {
    pack_b_vnni_rows(p, s, src, b_signed, k, n, rs);
    return true;
  }
#endif
  const int shift = b_signed ? 0 : -128;
  for (size_t q = 0; q < panels; q++) {
    uint8_t* dst = (uint8_t*)p->data + q * kg * s->nr * 4;
    for (size_t j = 0; j < s->nr; j++) {
      const size_t col = q * s->nr + j;
      uint32_t sum = 0;
      for (size_t g = 0; g < kg; g++)
        for (size_t t = 0; t < s->g; t++) {
          const size_t r = g * s->g + t;
          int v = 0;
          if (col < n && r < k) {
            const uint8_t raw = src[r * rs + col * cs];
            v = b_signed ? (int)(int8_t)raw : (int)raw + shift;
          }
          sum += (uint32_t)v;
          const size_t at = g * s->nr * s->g + j * s->g + t;
          if (s->g == 4)
            dst[at] = (uint8_t)(int8_t)v;
          else
            ((int16_t*)(void*)dst)[at] = (int16_t)v;
        }
      if (col < n) p->colsum[col] = (int32_t)sum;
    }
  }
  return true;
}

void cpu_qgemm_free_b(CpuQgemmB* p) {
  free(p->data);
  free(p->colsum);
  p->data = NULL;
  p->colsum = NULL;
}

/* --- per-thread buffers ------------------------------------------------------------- */

/* Each thread keeps its buffers for its next call: a fresh large
 * allocation per call is mmap'ed and costs a page fault per 4 KiB touched
 * (a third of a 56 x 56 x 64 int8 convolution's time). A nested call that
 * finds its slot in use allocates its own. Every set is on a global list,
 * freed when its thread exits (the key's destructor) or, for threads still
 * alive (the host's pool workers outlive the provider), at unload. */
#define QBUF_KEEP_BYTES ((size_t)256 << 20)

typedef struct QBufSet {
  struct CpuQBuf {
    void* buf;
    size_t bytes;
    int busy;
  } slot[CPU_QGEMM_BUF_SLOTS];
  struct QBufSet* next; /* the global list, under qbuf_mu */
} QBufSet;

static pthread_key_t qbuf_key;
static pthread_once_t qbuf_once = PTHREAD_ONCE_INIT;
static int qbuf_key_ok;
static pthread_mutex_t qbuf_mu = PTHREAD_MUTEX_INITIALIZER;
static QBufSet* qbuf_all;

static void qbuf_free(QBufSet* s) {
  for (int i = 0; i < CPU_QGEMM_BUF_SLOTS; i++)
    free(s->slot[i].buf);
  free(s);
}

static void qbuf_destroy(void* p) {
  QBufSet* s = p;
  if (!s) return;
  pthread_mutex_lock(&qbuf_mu);
  for (QBufSet** at = &qbuf_all; *at; at = &(*at)->next)
    if (*at == s) {
      *at = s->next;
      break;
    }
  pthread_mutex_unlock(&qbuf_mu);
  qbuf_free(s);
}

static void qbuf_key_init(void) {
  qbuf_key_ok = pthread_key_create(&qbuf_key, qbuf_destroy) == 0;
}

/* At unload: drop the key (no destructor may run unmapped code later) and
 * free every set none of whose slots is in use. */
__attribute__((destructor)) static void qbuf_unload(void) {
  if (!qbuf_key_ok) return;
  pthread_key_delete(qbuf_key);
  qbuf_key_ok = 0;
  pthread_mutex_lock(&qbuf_mu);
  for (QBufSet** at = &qbuf_all; *at;) {
    QBufSet* s = *at;
    bool busy = false;
    for (int i = 0; i < CPU_QGEMM_BUF_SLOTS; i++)
      busy = busy || s->slot[i].busy;
    if (busy) {
      at = &s->next;
    } else {
      *at = s->next;
      qbuf_free(s);
    }
  }
  pthread_mutex_unlock(&qbuf_mu);
}

void* cpu_qgemm_buf_acquire(int slot, size_t bytes, CpuQBuf** owner) {
  *owner = NULL;
  if (!bytes) bytes = 1;
  pthread_once(&qbuf_once, qbuf_key_init);
  QBufSet* s = NULL;
  if (qbuf_key_ok && bytes <= QBUF_KEEP_BYTES && slot >= 0 && slot < CPU_QGEMM_BUF_SLOTS) {
    s = pthread_getspecific(qbuf_key);
    if (!s && (s = calloc(1, sizeof *s))) {
      if (pthread_setspecific(qbuf_key, s) != 0) {
        free(s);
        s = NULL;
      } else {
        pthread_mutex_lock(&qbuf_mu);
        s->next = qbuf_all;
        qbuf_all = s;
        pthread_mutex_unlock(&qbuf_mu);
      }
    }
  }
  if (!s || s->slot[slot].busy) return malloc(bytes);
  CpuQBuf* b = &s->slot[slot];
  if (b->bytes < bytes) {
    free(b->buf);
    b->buf = malloc(bytes);
    b->bytes = b->buf ? bytes : 0;
    if (!b->buf) return malloc(bytes);
  }
  b->busy = 1;
  *owner = b;
  return b->buf;
}

void cpu_qgemm_buf_release(void* p, CpuQBuf* owner) {
  if (owner)
    owner->busy = 0;
  else
    free(p);
}

/* --- the product ------------------------------------------------------------------- */

typedef struct QJob {
  const QIsa* s;
  const uint8_t* a;
  bool a_signed;
  size_t m, rs, cs;
  const CpuQgemmB* b;
  size_t kg, a_panels, b_panels;
  uint8_t* apack;          /* a_panels x kg x MR words; direct: the last partial panel only */
  bool direct;             /* VNNI reads A's full panels where they lie (kern_vnni_direct) */
  const CpuQgemmSegA* seg; /* cpu_qgemm_seg: A's rows in segments (kern_vnni_rows) */
  size_t full;             /* direct: panels of MR rows that A fills */
  int32_t* rowsum;         /* a_panels * MR */
  bool rowsums;            /* false: the in-place paths leave rowsum zero */
  size_t mb, nb;           /* C blocks down, across */
  CpuQgemmEpilogue epi;
  void* user;
  CpuStop* stop;
  int oom; /* read and written atomically */
} QJob;

#if QGEMM_X86
/* row_sum's whole 64-byte steps with AVX-512BW psadbw; *done gets how many
 * bytes it summed. */
__attribute__((target("avx512f,avx512bw"))) static uint64_t
row_sum_avx512(const uint8_t* src, size_t n, uint8_t flip, size_t* done) {
  const __m512i f = _mm512_set1_epi8((char)flip), z = _mm512_setzero_si512();
  __m512i acc = z;
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    acc =
        _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(src + i), f), z));
  *done = i;
  return (uint64_t)_mm512_reduce_add_epi64(acc);
}
#endif

/* The sum of n bytes, each XORed with flip (int8 + 128 as a byte), modulo
 * 2^32; psadbw sums 64 bytes at a time on the AVX-512 paths (wide: the
 * path's B was packed for AVX-512BW or VNNI, so the machine has it), then
 * 16 at a time where SSE2 is there. */
static uint32_t row_sum(const uint8_t* src, size_t n, uint8_t flip, bool wide) {
  size_t i = 0;
  uint64_t sum = 0;
#if QGEMM_X86
  if (wide) sum = row_sum_avx512(src, n, flip, &i);
  const __m128i f = _mm_set1_epi8((char)flip), z = _mm_setzero_si128();
  __m128i acc = z;
  for (; i + 16 <= n; i += 16)
    acc = _mm_add_epi64(
        acc,
        _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128((const __m128i*)(const void*)(src + i)), f), z));
  sum +=
      (uint64_t)_mm_cvtsi128_si64(acc) + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
#else
  (void)wide;
#endif
  for (; i < n; i++)
    sum += (uint8_t)(src[i] ^ flip);
  return (uint32_t)sum;
}

/* Row `row` of A into slot r of a panel: element (g, t) of the slot at
 * g * MR * G + r * G + t; returns the row's sum. A row past m is zeros. */
static uint32_t pack_a_row(const QJob* j, uint8_t* dst, size_t row, size_t r) {
  const QIsa* s = j->s;
  const size_t k = j->b->k, kg = j->kg, mr = s->mr;
  const uint8_t flip = j->a_signed ? 0x80 : 0; /* int8 + 128 as a byte */
  uint32_t sum = 0;
  if (row >= j->m) {
    for (size_t g = 0; g < kg; g++)
      memset(dst + (g * mr + r) * 4, 0, 4);
    return 0;
  }
  const uint8_t* src = j->a + row * j->rs;
  if (j->cs == 1) { /* contiguous row: whole groups as words */
    sum = row_sum(src, k, flip, j->b->isa >= CPU_QGEMM_AVX512BW);
    const size_t full = k / s->g;
    if (s->g == 4) {
      const uint32_t flip4 = flip * 0x01010101u;
      for (size_t g = 0; g < full; g++) {
        uint32_t w;
        memcpy(&w, src + g * 4, 4);
        w ^= flip4;
        memcpy(dst + (g * mr + r) * 4, &w, 4);
      }
    } else {
      for (size_t g = 0; g < full; g++) {
        const uint16_t pair[2] = {(uint8_t)(src[2 * g] ^ flip), (uint8_t)(src[2 * g + 1] ^ flip)};
        memcpy(dst + (g * mr + r) * 4, pair, 4);
      }
    }
    if (full < kg) { /* the last, partial group */
      uint8_t* d = dst + (full * mr + r) * 4;
      memset(d, 0, 4);
      for (size_t t = 0; full * s->g + t < k; t++) {
        const uint8_t v = (uint8_t)(src[full * s->g + t] ^ flip);
        if (s->g == 4)
          d[t] = v;
        else
          ((uint16_t*)(void*)d)[t] = v;
      }
    }
    return sum;
  }
  for (size_t g = 0; g < kg; g++)
    for (size_t t = 0; t < s->g; t++) {
      const size_t col = g * s->g + t;
      const uint8_t v = col < k ? (uint8_t)(src[col * j->cs] ^ flip) : 0;
      sum += v;
      const size_t at = g * mr * s->g + r * s->g + t;
      if (s->g == 4)
        dst[at] = v;
      else
        ((uint16_t*)(void*)dst)[at] = v;
    }
  return sum;
}

/* Row i of a segmented A: its segment 0 (rows past m: the last row's). */
static const uint8_t* seg_row(const CpuQgemmSegA* a, size_t m, size_t i) {
  if (i >= m) i = m - 1;
  return a->base + (i / a->per_line) * a->line_step + (i % a->per_line) * a->row_step;
}

/* Packs A panels [begin, end) with their row sums. */
static void pack_a(void* user, size_t begin, size_t end) {
  QJob* j = user;
  const QIsa* s = j->s;
  const uint8_t flip = j->a_signed ? 0x80 : 0;
  if (j->seg) { /* read in place: the row sums only, segment by segment */
    if (!j->rowsums) {
      memset(j->rowsum + begin * s->mr, 0, (end - begin) * s->mr * sizeof *j->rowsum);
      return;
    }
    for (size_t q = begin; q < end; q++)
      for (size_t r = 0; r < s->mr; r++) {
        const size_t i = q * s->mr + r;
        uint32_t sum = 0;
        if (i < j->m) {
          const uint8_t* p = seg_row(j->seg, j->m, i);
          for (size_t t = 0; t < j->seg->n_seg; t++)
            sum += row_sum(p + t * j->seg->seg_stride, j->seg->seg_len, flip, true);
        }
        j->rowsum[i] = (int32_t)sum;
      }
    return;
  }
  for (size_t q = begin; q < end; q++) {
    if (j->direct && q < j->full) { /* read in place: the row sums only */
      if (!j->rowsums) {
        memset(j->rowsum + q * s->mr, 0, s->mr * sizeof *j->rowsum);
        continue;
      }
      for (size_t r = 0; r < s->mr; r++) {
        j->rowsum[q * s->mr + r] = (int32_t)row_sum(j->a + (q * s->mr + r) * j->rs, j->b->k, flip,
                                                    j->b->isa >= CPU_QGEMM_AVX512BW);
      }
      continue;
    }
    uint8_t* dst = j->apack + (j->direct ? 0 : q) * j->kg * s->mr * 4;
    for (size_t r = 0; r < s->mr; r++)
      j->rowsum[q * s->mr + r] = (int32_t)pack_a_row(j, dst, q * s->mr + r, r);
  }
}

static void blocks(void* user, size_t begin, size_t end) {
  QJob* j = user;
  const QIsa* s = j->s;
  const size_t ldc = NC_PANELS * s->nr;
  int32_t* tile = malloc(MC_PANELS * s->mr * ldc * sizeof(int32_t));
  if (!tile) {
    __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
    return;
  }
  const uint8_t* bdata = j->b->data;
  size_t polled = 0;
  for (size_t u = begin; u < end; u++) {
    if (cpu_stop_seen(j->stop) || __atomic_load_n(&j->oom, __ATOMIC_RELAXED)) break;
    const size_t ib = u / j->nb, jb = u % j->nb;
    const size_t ip0 = ib * MC_PANELS, jp0 = jb * NC_PANELS;
    const size_t ip1 = ip0 + MC_PANELS < j->a_panels ? ip0 + MC_PANELS : j->a_panels;
    const size_t jp1 = jp0 + NC_PANELS < j->b_panels ? jp0 + NC_PANELS : j->b_panels;
    bool stopped = false;
    size_t g0 = 0;
#if QGEMM_X86
    if (j->seg) { /* k blocks within segments; every panel's rows where they lie */
      const size_t sg = j->seg->seg_len / 4;
      const uint32_t flip4 = j->a_signed ? 0x80808080u : 0;
      for (size_t t = 0; t < j->seg->n_seg && !stopped; t++)
        for (size_t gs = 0; gs < sg; gs += KCG) {
          const size_t kc = sg - gs < KCG ? sg - gs : KCG;
          if (cpu_stop_poll(j->stop, &polled, (ip1 - ip0) * s->mr * (jp1 - jp0) * s->nr * kc)) {
            stopped = true;
            break;
          }
          const size_t G = t * sg + gs;
          for (size_t ip = ip0; ip < ip1; ip++) {
            const uint8_t* rp[8];
            for (size_t r = 0; r < 8; r++)
              rp[r] = seg_row(j->seg, j->m, ip * 8 + r) + t * j->seg->seg_stride + gs * 4;
            for (size_t jp = jp0; jp < jp1; jp++)
              kern_vnni_rows(rp, flip4, bdata + (jp * j->kg + G) * s->nr * 4, kc,
                             tile + (ip - ip0) * s->mr * ldc + (jp - jp0) * s->nr, ldc, G > 0);
          }
        }
    }
#endif
    if (!j->seg) do {
        const size_t kc = j->kg - g0 < KCG ? j->kg - g0 : KCG;
        if (cpu_stop_poll(j->stop, &polled,
                          (ip1 - ip0) * s->mr * (jp1 - jp0) * s->nr * (kc ? kc : 1))) {
          stopped = true;
          break;
        }
        for (size_t jp = jp0; jp < jp1; jp++) {
          const uint8_t* bp = bdata + (jp * j->kg + g0) * s->nr * 4;
          for (size_t ip = ip0; ip < ip1; ip++) {
            int32_t* t = tile + (ip - ip0) * s->mr * ldc + (jp - jp0) * s->nr;
#if QGEMM_X86
            if (j->direct && ip < j->full) {
              kern_vnni_direct(j->a + ip * s->mr * j->rs + g0 * 4, j->rs,
                               j->a_signed ? 0x80808080u : 0, bp, kc, t, ldc, g0 > 0);
              continue;
            }
#endif
            s->kernel(j->apack + ((j->direct ? 0 : ip) * j->kg + g0) * s->mr * 4, bp, kc, t, ldc,
                      g0 > 0);
          }
        }
        g0 += kc;
      } while (g0 < j->kg);
    if (stopped) break;
    const size_t row0 = ip0 * s->mr, col0 = jp0 * s->nr;
    const size_t row1 = ip1 * s->mr < j->m ? ip1 * s->mr : j->m;
    const size_t col1 = jp1 * s->nr < j->b->n ? jp1 * s->nr : j->b->n;
    j->epi(j->user, tile, ldc, row0, row1 - row0, col0, col1 - col0, j->rowsum + row0,
           j->b->colsum + col0);
  }
  free(tile);
}

static CpuQgemmResult qgemm_run(OnyxThreadPool* pool, CpuStop* stop, const void* a, bool a_signed,
                                size_t m, size_t rs, size_t cs, const CpuQgemmSegA* seg,
                                const CpuQgemmB* b, bool rowsums, CpuQgemmEpilogue epi,
                                void* user) {
  if (m == 0 || b->n == 0) return CPU_QGEMM_OK;
  const QIsa* s = qisa(b->isa);
  QJob j = {.s = s,
            .a = a,
            .a_signed = a_signed,
            .m = m,
            .rs = rs,
            .cs = cs,
            .b = b,
            .kg = div_up(b->k, s->g),
            .a_panels = div_up(m, s->mr),
            .b_panels = div_up(b->n, s->nr),
            .rowsums = rowsums,
            .epi = epi,
            .user = user,
            .stop = stop};
#if QGEMM_X86
  j.direct = !seg && b->isa == CPU_QGEMM_VNNI && cs == 1 && b->k % 4 == 0;
#endif
  j.seg = seg;
  j.full = j.direct ? m / s->mr : 0;
  size_t bytes, rows;
  if (!cpu_mul_size(j.direct || seg ? 1 : j.a_panels, j.kg, &bytes) ||
      !cpu_mul_size(bytes, s->mr * 4, &bytes) || !cpu_mul_size(j.a_panels, s->mr, &rows) ||
      rows > SIZE_MAX / sizeof(int32_t))
    return CPU_QGEMM_OOM;
  CpuQBuf *own_a, *own_r;
  j.apack = cpu_qgemm_buf_acquire(0, bytes, &own_a);
  j.rowsum = cpu_qgemm_buf_acquire(1, rows * sizeof(int32_t), &own_r);
  CpuQgemmResult res = CPU_QGEMM_OK;
  if (!j.apack || !j.rowsum) {
    res = CPU_QGEMM_OOM;
    goto done;
  }
  cpu_host->parallel_for(pool, j.a_panels, pack_a, &j);
  if (cpu_stop_poll(stop, &(size_t){CPU_STOP_INTERVAL}, 0)) {
    res = CPU_QGEMM_STOPPED;
    goto done;
  }
  j.mb = div_up(j.a_panels, MC_PANELS);
  j.nb = div_up(j.b_panels, NC_PANELS);
  cpu_host->parallel_for(pool, j.mb * j.nb, blocks, &j);
  if (j.oom)
    res = CPU_QGEMM_OOM;
  else if (cpu_stop_seen(stop))
    res = CPU_QGEMM_STOPPED;
done:
  cpu_qgemm_buf_release(j.apack, own_a);
  cpu_qgemm_buf_release(j.rowsum, own_r);
  return res;
}

CpuQgemmResult cpu_qgemm(OnyxThreadPool* pool, CpuStop* stop, const void* a, bool a_signed,
                         size_t m, size_t rs, size_t cs, const CpuQgemmB* b, bool rowsums,
                         CpuQgemmEpilogue epi, void* user) {
  return qgemm_run(pool, stop, a, a_signed, m, rs, cs, NULL, b, rowsums, epi, user);
}

bool cpu_qgemm_seg_ok(const CpuQgemmB* b, const CpuQgemmSegA* a) {
  return QGEMM_X86 && b->isa == CPU_QGEMM_VNNI && cpu_qgemm_isa() == CPU_QGEMM_VNNI &&
         a->n_seg > 0 && a->seg_len > 0 && a->seg_len % 4 == 0 && a->per_line > 0 &&
         a->n_seg <= b->k / a->seg_len && a->n_seg * a->seg_len == b->k;
}

CpuQgemmResult cpu_qgemm_seg(OnyxThreadPool* pool, CpuStop* stop, const CpuQgemmSegA* a,
                             bool a_signed, size_t m, const CpuQgemmB* b, bool rowsums,
                             CpuQgemmEpilogue epi, void* user) {
  return qgemm_run(pool, stop, a->base, a_signed, m, 0, 1, a, b, rowsums, epi, user);
}
