/* Tests of the best-fit arena: alignment, reuse, coalescing, growth, limits,
 * failing backing allocators, stats, and a randomized run against a model;
 * and of the host tensors' cache of large blocks (common/ir.c). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ox_arena.h"
#include "ox_ir.h"

#define KiB ((size_t)1024)

/* --- A backing allocator that records what it is asked for ------------------- */

typedef struct Backing {
  size_t sizes[256]; /* chunk sizes requested, in order */
  size_t n_allocs, n_frees;
  size_t last_align;
  size_t fail_above; /* 0: never fail; else refuse requests larger than this */
  bool fail_all;
} Backing;

static void* rec_alloc(void* ctx, size_t bytes, size_t align) {
  Backing* b = ctx;
  if (b->fail_all || (b->fail_above && bytes > b->fail_above)) return NULL;
  if (b->n_allocs < OX_ARRAY_LEN(b->sizes)) b->sizes[b->n_allocs] = bytes;
  b->n_allocs++;
  b->last_align = align;
  return aligned_alloc(align, (bytes + align - 1) / align * align);
}

static void rec_free(void* ctx, void* p) {
  Backing* b = ctx;
  b->n_frees++;
  free(p);
}

static OnyxAllocator make_backing(Backing* b, uint32_t alignment) {
  memset(b, 0, sizeof *b);
  return (OnyxAllocator){
      .struct_size = sizeof(OnyxAllocator),
      .ctx = b,
      .device = {ONYX_DEVICE_GPU, 0x10de, 1, ONYX_MEM_DEFAULT, alignment, 0},
      .alloc = rec_alloc,
      .free = rec_free,
  };
}

static OxArena* new_arena(const OnyxAllocator* backing, size_t initial, size_t max,
                          OxArenaExtend extend) {
  OxArenaConfig cfg = {initial, max, extend};
  OxArena* a = NULL;
  OnyxStatus* st = ox_arena_create(backing, &cfg, &a);
  assert_null(st);
  assert_non_null(a);
  return a;
}

static bool aligned(const void* p, size_t align) {
  return ((uintptr_t)p & (align - 1)) == 0;
}

/* --- Alignment ----------------------------------------------------------------- */

static void test_alignment_host(void** state) {
  OxArena* a = new_arena(NULL, 0, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_int_equal(ox_arena_device(a)->kind, ONYX_DEVICE_CPU);
  static const size_t aligns[] = {0, 1, 8, 64, 128, 256, 4096, 65536};
  static const size_t sizes[] = {1, 3, 64, 100, 1000, 5000};
  void* ptrs[OX_ARRAY_LEN(aligns) * OX_ARRAY_LEN(sizes)];
  size_t n = 0;
  for (size_t i = 0; i < OX_ARRAY_LEN(aligns); i++) {
    for (size_t j = 0; j < OX_ARRAY_LEN(sizes); j++) {
      void* p = ox_arena_alloc(a, sizes[j], aligns[i]);
      assert_non_null(p);
      /* 0 means the memory's alignment, 64 for host memory. */
      assert_true(aligned(p, aligns[i] > 64 ? aligns[i] : 64));
      memset(p, 0xab, sizes[j]); /* host memory: ASan checks the bounds */
      ptrs[n++] = p;
    }
  }
  for (size_t i = 0; i < n; i++)
    ox_arena_free(a, ptrs[i]);
  assert_int_equal(ox_arena_stats(a).in_use, 0);
  ox_arena_destroy(a);
}

static void test_alignment_device(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 256);
  OxArena* a = new_arena(&al, 64 * KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_int_equal(ox_arena_device(a)->alignment, 256);
  assert_int_equal(ox_arena_device(a)->vendor_id, 0x10de);
  void* p1 = ox_arena_alloc(a, 10, 0);
  void* p2 = ox_arena_alloc(a, 10, 0);
  void* p3 = ox_arena_alloc(a, 10, 1024);
  assert_true(aligned(p1, 256) && aligned(p2, 256) && aligned(p3, 1024));
  /* Sizes round up to the memory's alignment: p2 directly follows p1. */
  assert_int_equal((char*)p2 - (char*)p1, 256);
  /* The arena asks the backing for chunks at the memory's alignment. */
  assert_int_equal(b.last_align, 256);
  ox_arena_destroy(a);
  assert_int_equal(b.n_frees, b.n_allocs);
}

static void test_bad_alignment_and_args(void** state) {
  OxArena* a = new_arena(NULL, 0, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_null(ox_arena_alloc(a, 100, 48)); /* not a power of two */
  void* z1 = ox_arena_alloc(a, 0, 0);
  void* z2 = ox_arena_alloc(a, 0, 0);
  assert_non_null(z1);
  assert_non_null(z2);
  assert_ptr_not_equal(z1, z2); /* zero bytes still gives a unique pointer */
  OxArenaStats s = ox_arena_stats(a);
  ox_arena_free(a, NULL);          /* no-op */
  ox_arena_free(a, (char*)z1 + 1); /* not handed out: refused, logged */
  assert_int_equal(ox_arena_stats(a).in_use, s.in_use);
  ox_arena_free(a, z1);
  ox_arena_free(a, z2);
  assert_int_equal(ox_arena_stats(a).in_use, 0);
  ox_arena_destroy(a);
  ox_arena_destroy(NULL);
}

static void test_create_refuses_bad_backing(void** state) {
  Backing b;
  OxArena* a = (OxArena*)1;
  OnyxAllocator al = make_backing(&b, 48);
  OnyxStatus* st = ox_arena_create(&al, NULL, &a);
  assert_non_null(st);
  assert_null(a);
  assert_non_null(strstr(st->message, "48"));
  ox_status_free(st);

  al = make_backing(&b, 64);
  al.alloc = NULL;
  st = ox_arena_create(&al, NULL, &a);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  ox_status_free(st);

  OxArenaConfig cfg = {0, 0, (OxArenaExtend)7};
  st = ox_arena_create(NULL, &cfg, &a);
  assert_non_null(st);
  ox_status_free(st);
}

/* --- Reuse and coalescing --------------------------------------------------------- */

static void test_reuse_after_free(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, 4 * KiB, 0, OX_ARENA_EXTEND_REQUESTED);
  void* p = ox_arena_alloc(a, 1000, 0);
  void* guard = ox_arena_alloc(a, 1000, 0);
  ox_arena_free(a, p);
  void* q = ox_arena_alloc(a, 1000, 0);
  assert_ptr_equal(p, q);
  /* Best fit: a 500-byte request takes the freed 1024-byte hole, not the
   * larger tail after guard. */
  ox_arena_free(a, q);
  void* r = ox_arena_alloc(a, 500, 0);
  assert_ptr_equal(r, p);
  assert_int_equal(ox_arena_stats(a).chunks, 1);
  assert_int_equal(b.n_allocs, 1);
  ox_arena_free(a, r);
  ox_arena_free(a, guard);
  ox_arena_destroy(a);
}

/* Frees three neighbours in the given order, then expects their sum back in
 * one piece at the first one's address, without a new chunk. */
static void coalesce_order(const int order[3], bool with_guard) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, with_guard ? 4 * KiB : 3 * KiB, 0, OX_ARENA_EXTEND_REQUESTED);
  void* p[3];
  for (int i = 0; i < 3; i++)
    p[i] = ox_arena_alloc(a, KiB, 0);
  void* guard = with_guard ? ox_arena_alloc(a, KiB, 0) : NULL;
  assert_int_equal((char*)p[1] - (char*)p[0], KiB);
  assert_int_equal((char*)p[2] - (char*)p[1], KiB);
  for (int i = 0; i < 3; i++)
    ox_arena_free(a, p[order[i]]);
  void* big = ox_arena_alloc(a, 3 * KiB, 0);
  assert_ptr_equal(big, p[0]);
  assert_int_equal(ox_arena_stats(a).chunks, 1);
  ox_arena_free(a, big);
  ox_arena_free(a, guard);
  ox_arena_destroy(a);
}

static void test_coalescing(void** state) {
  static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                   {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (int i = 0; i < 6; i++) {
    coalesce_order(orders[i], false);
    coalesce_order(orders[i], true);
  }
}

/* --- Growth and limits ------------------------------------------------------------- */

static void test_growth_power_of_two(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_non_null(ox_arena_alloc(a, KiB, 0));     /* chunk 1: 1 KiB, full */
  assert_non_null(ox_arena_alloc(a, KiB, 0));     /* chunk 2: 2 KiB */
  assert_non_null(ox_arena_alloc(a, 2 * KiB, 0)); /* 1 KiB left there: chunk 3, 4 KiB */
  assert_non_null(ox_arena_alloc(a, 10000, 0));   /* 10048 > 8 KiB: gets 10048 */
  assert_non_null(ox_arena_alloc(a, 3 * KiB, 0)); /* no hole that big: 2 x 10048 */
  static const size_t expected[] = {KiB, 2 * KiB, 4 * KiB, 10048, 20096};
  assert_int_equal(b.n_allocs, 5);
  for (size_t i = 0; i < 5; i++)
    assert_int_equal(b.sizes[i], expected[i]);
  OxArenaStats s = ox_arena_stats(a);
  assert_int_equal(s.reserved, 7 * KiB + 10048 + 20096);
  assert_int_equal(s.chunks, 5);
  assert_int_equal(s.in_use, KiB + KiB + 2 * KiB + 10048 + 3 * KiB);
  ox_arena_destroy(a);
  assert_int_equal(b.n_frees, 5);
}

static void test_growth_requested(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, KiB, 0, OX_ARENA_EXTEND_REQUESTED);
  assert_non_null(ox_arena_alloc(a, KiB, 0));
  assert_non_null(ox_arena_alloc(a, 100, 0));
  assert_non_null(ox_arena_alloc(a, 5000, 0));
  static const size_t expected[] = {KiB, 128, 5056}; /* rounded to 64 */
  assert_int_equal(b.n_allocs, 3);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(b.sizes[i], expected[i]);
  ox_arena_destroy(a);
}

static void test_default_initial_chunk(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = NULL;
  assert_null(ox_arena_create(&al, NULL, &a));
  assert_non_null(ox_arena_alloc(a, 10, 0));
  assert_int_equal(b.sizes[0], 1024 * KiB);
  ox_arena_destroy(a);
}

static void test_max_bytes(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, KiB, 4 * KiB, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_null(ox_arena_alloc(a, 5 * KiB, 0)); /* larger than the limit itself */
  void* p[4];
  for (int i = 0; i < 4; i++)
    p[i] = ox_arena_alloc(a, KiB, 0);
  for (int i = 0; i < 4; i++)
    assert_non_null(p[i]);
  /* Chunks 1 KiB, 2 KiB, then a 4 KiB chunk clamped to the 1 KiB left. */
  assert_int_equal(b.n_allocs, 3);
  assert_int_equal(b.sizes[2], KiB);
  assert_int_equal(ox_arena_stats(a).reserved, 4 * KiB);
  assert_null(ox_arena_alloc(a, 1, 0));
  ox_arena_free(a, p[2]);
  assert_ptr_equal(ox_arena_alloc(a, KiB, 0), p[2]);
  OxArenaStats s = ox_arena_stats(a);
  assert_int_equal(s.allocs, 5);
  assert_int_equal(s.in_use, 4 * KiB);
  ox_arena_destroy(a);
}

static void test_failing_backing(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  b.fail_all = true;
  OxArena* a = new_arena(&al, KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  assert_null(ox_arena_alloc(a, 100, 0));
  OxArenaStats s = ox_arena_stats(a);
  assert_int_equal(s.reserved, 0);
  assert_int_equal(s.chunks, 0);
  assert_int_equal(s.allocs, 0);
  /* Once the backing recovers, the arena works. */
  b.fail_all = false;
  void* p = ox_arena_alloc(a, 100, 0);
  assert_non_null(p);
  ox_arena_free(a, p);
  ox_arena_destroy(a);
  assert_int_equal(b.n_frees, b.n_allocs);
}

/* A backing that refuses the big chunk the strategy wants still serves a
 * request that fits in what it can give. */
static void test_backing_refuses_big_chunk(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  b.fail_above = 8 * KiB;
  OxArena* a = new_arena(&al, 0, 0, OX_ARENA_EXTEND_POWER_OF_TWO); /* wants 1 MiB */
  void* p = ox_arena_alloc(a, 1000, 0);
  assert_non_null(p);
  assert_int_equal(b.n_allocs, 1);
  assert_int_equal(b.sizes[0], KiB);
  assert_null(ox_arena_alloc(a, 9 * KiB, 0));
  ox_arena_destroy(a);
}

static void test_stats(void** state) {
  OxArena* a = new_arena(NULL, 8 * KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  void* p1 = ox_arena_alloc(a, 100, 0);  /* 128 */
  void* p2 = ox_arena_alloc(a, 1000, 0); /* 1024 */
  void* p3 = ox_arena_alloc(a, 64, 0);   /* 64 */
  OxArenaStats s = ox_arena_stats(a);
  assert_int_equal(s.in_use, 128 + 1024 + 64);
  assert_int_equal(s.peak, 128 + 1024 + 64);
  assert_int_equal(s.allocs, 3);
  assert_int_equal(s.chunks, 1);
  assert_int_equal(s.reserved, 8 * KiB);
  ox_arena_free(a, p2);
  ox_arena_free(a, p1);
  void* p4 = ox_arena_alloc(a, 10, 0);
  s = ox_arena_stats(a);
  assert_int_equal(s.in_use, 64 + 64);
  assert_int_equal(s.peak, 128 + 1024 + 64);
  assert_int_equal(s.allocs, 4);
  ox_arena_free(a, p3);
  ox_arena_free(a, p4);
  assert_int_equal(ox_arena_stats(a).in_use, 0);
  assert_int_equal(ox_arena_stats(NULL).reserved, 0);
  ox_arena_destroy(a);
}

/* --- Randomized run against a model ------------------------------------------------ */

typedef struct Live {
  unsigned char* p;
  size_t bytes, rounded;
  unsigned char tag;
} Live;

static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* True if [p, p+n) overlaps no other live allocation. */
static bool disjoint(const Live* live, size_t n_live, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n_live; i++)
    if (p < live[i].p + live[i].rounded && live[i].p < p + n) return false;
  return true;
}

static bool tag_intact(const Live* l) {
  for (size_t i = 0; i < l->bytes; i++)
    if (l->p[i] != l->tag) return false;
  return true;
}

static int cmp_size(const void* x, const void* y) {
  size_t a = *(const size_t*)x, b = *(const size_t*)y;
  return (a > b) - (a < b);
}

static void test_random_against_model(void** state) {
  Backing b;
  OnyxAllocator al = make_backing(&b, 64);
  OxArena* a = new_arena(&al, 16 * KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  enum { MAX_LIVE = 300, OPS = 20000 };
  static const size_t aligns[] = {0, 0, 0, 64, 128, 512, 4096};
  Live* live = calloc(MAX_LIVE, sizeof *live);
  size_t n_live = 0, model_in_use = 0, model_peak = 0, model_allocs = 0;
  uint64_t seed = 0x1234567887654321ull;
  for (int op = 0; op < OPS; op++) {
    bool do_alloc = n_live == 0 || (n_live < MAX_LIVE && rng_next(&seed) % 100 < 55);
    if (do_alloc) {
      size_t bytes =
          (size_t)(rng_next(&seed) % 3) == 0 ? rng_next(&seed) % 20000 : rng_next(&seed) % 700;
      size_t align = aligns[rng_next(&seed) % OX_ARRAY_LEN(aligns)];
      unsigned char* p = ox_arena_alloc(a, bytes, align);
      assert_non_null(p);
      size_t rounded = ((bytes ? bytes : 1) + 63) / 64 * 64;
      assert_true(aligned(p, align ? align : 64));
      assert_true(disjoint(live, n_live, p, rounded));
      unsigned char tag = (unsigned char)(op & 0xff);
      memset(p, tag, bytes);
      live[n_live++] = (Live){p, bytes, rounded, tag};
      model_in_use += rounded;
      model_allocs++;
      if (model_in_use > model_peak) model_peak = model_in_use;
    } else {
      size_t i = rng_next(&seed) % n_live;
      assert_true(tag_intact(&live[i])); /* nobody else wrote into it */
      ox_arena_free(a, live[i].p);
      model_in_use -= live[i].rounded;
      live[i] = live[--n_live];
    }
    OxArenaStats s = ox_arena_stats(a);
    assert_int_equal(s.in_use, model_in_use);
    assert_true(s.reserved >= s.in_use);
  }
  OxArenaStats s = ox_arena_stats(a);
  assert_int_equal(s.peak, model_peak);
  assert_int_equal(s.allocs, model_allocs);
  for (size_t i = 0; i < n_live; i++) {
    assert_true(tag_intact(&live[i]));
    ox_arena_free(a, live[i].p);
  }
  /* Everything free: each chunk must have coalesced back into one block, so
   * a request of each chunk's full size fits without a new chunk. */
  size_t chunks = ox_arena_stats(a).chunks;
  assert_int_equal(chunks, b.n_allocs);
  assert_true(chunks <= OX_ARRAY_LEN(b.sizes));
  /* Ascending requests: best fit then takes each chunk exactly. */
  qsort(b.sizes, chunks, sizeof b.sizes[0], cmp_size);
  for (size_t i = 0; i < chunks; i++)
    assert_non_null(ox_arena_alloc(a, b.sizes[i], 0));
  assert_int_equal(ox_arena_stats(a).chunks, chunks);
  free(live);
  ox_arena_destroy(a);
  assert_int_equal(b.n_frees, b.n_allocs);
}

/* --- Threads ------------------------------------------------------------------------ */

typedef struct Worker {
  OxArena* arena;
  unsigned seed;
  int failures;
} Worker;

static void* worker_main(void* arg) {
  Worker* w = arg;
  enum { SLOTS = 32 };
  unsigned char* p[SLOTS] = {0};
  size_t n[SLOTS] = {0};
  unsigned char tag = (unsigned char)w->seed;
  for (int i = 0; i < 5000; i++) {
    int s = rand_r(&w->seed) % SLOTS;
    if (p[s]) {
      for (size_t j = 0; j < n[s]; j++)
        w->failures += p[s][j] != tag;
      ox_arena_free(w->arena, p[s]);
      p[s] = NULL;
    } else {
      n[s] = (size_t)(rand_r(&w->seed) % 2000);
      p[s] = ox_arena_alloc(w->arena, n[s], 0);
      if (!p[s])
        w->failures++;
      else
        memset(p[s], tag, n[s]);
    }
  }
  for (int s = 0; s < SLOTS; s++)
    ox_arena_free(w->arena, p[s]);
  return NULL;
}

static void test_threads(void** state) {
  OxArena* a = new_arena(NULL, 64 * KiB, 0, OX_ARENA_EXTEND_POWER_OF_TWO);
  enum { N = 4 };
  pthread_t th[N];
  Worker w[N];
  for (int i = 0; i < N; i++) {
    w[i] = (Worker){a, 17u + (unsigned)i * 31u, 0};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++)
    assert_int_equal(w[i].failures, 0);
  assert_int_equal(ox_arena_stats(a).in_use, 0);
  ox_arena_destroy(a);
}

/* --- The cache of large host blocks (ox_tensor_new*) --------------------------- */

static OxTensor* host_tensor(int64_t rows, int64_t cols) {
  OxTensor* t = NULL;
  OnyxStatus* st = ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, (int64_t[]){rows, cols}, 2, &t);
  assert_null(st);
  assert_non_null(t);
  memset(t->data, 0x5a, t->bytes); /* every byte is ours */
  return t;
}

static void expect_cached(size_t blocks, size_t bytes) {
  size_t n, b;
  ox_host_cache_stats(&n, &b);
  assert_int_equal(n, blocks);
  assert_int_equal(b, bytes);
}

static void test_host_block_cache(void** state) {
  (void)state;
  const size_t MiB = (size_t)1 << 20;
  expect_cached(0, 0);
  /* no session holds the cache: freed blocks go back to the system */
  ox_tensor_free(host_tensor(1024, 768));
  expect_cached(0, 0);
  ox_host_cache_hold();
  ox_host_cache_hold();                 /* two sessions */
  OxTensor* a = host_tensor(1024, 768); /* 3 MiB: a 4 MiB block (2 MiB steps) */
  void* pa = a->data;
  ox_tensor_free(a);
  expect_cached(1, 4 * MiB);
  OxTensor* tiny = host_tensor(32, 1024);    /* 128 KiB: under 256 KiB, never cached */
  OxTensor* small = host_tensor(100, 768);   /* 300 KiB: a 320 KiB block (64 KiB steps) */
  OxTensor* other = host_tensor(1024, 1280); /* 5 MiB: a 6 MiB block, not a */
  assert_ptr_not_equal(other->data, pa);
  expect_cached(1, 4 * MiB);
  OxTensor* again = host_tensor(1000, 1000); /* 3.8 MiB: a's block */
  assert_ptr_equal(again->data, pa);
  expect_cached(0, 0);
  ox_tensor_free(tiny);
  expect_cached(0, 0);
  void* ps = small->data;
  ox_tensor_free(small);
  expect_cached(1, 320 * KiB);
  OxTensor* small2 = host_tensor(80, 1024); /* 320 KiB exactly: small's block */
  assert_ptr_equal(small2->data, ps);
  ox_tensor_free(small2);
  ox_tensor_free(other);
  ox_tensor_free(again);
  expect_cached(3, 320 * KiB + 10 * MiB);
  ox_host_cache_drop();
  ox_host_cache_drop();
  expect_cached(0, 0);
  /* at most sixteen blocks are kept */
  ox_host_cache_hold();
  OxTensor* t[18];
  for (int i = 0; i < 18; i++)
    t[i] = host_tensor(64, 1024 * (i + 1)); /* 256 KiB, 512 KiB, ..., 4.5 MiB */
  for (int i = 0; i < 18; i++)
    ox_tensor_free(t[i]);
  /* the first sixteen: 256 KiB x (1 + ... + 7) in 64 KiB steps, 2 MiB, then 2.25 ... 4
   * MiB in 2 MiB steps: eight 4 MiB blocks */
  expect_cached(16, 256 * KiB * 28 + 2 * MiB + 8 * 4 * MiB);
  /* at most 256 MiB in all */
  ox_host_cache_drop();
  ox_host_cache_hold();
  OxTensor* big[3];
  for (int i = 0; i < 3; i++)
    big[i] = host_tensor(1024, 25 * 1024); /* 100 MiB each */
  for (int i = 0; i < 3; i++)
    ox_tensor_free(big[i]);
  expect_cached(2, 200 * MiB);
  ox_host_cache_drop();
  expect_cached(0, 0);  /* the last holder empties it */
  ox_host_cache_drop(); /* an extra drop changes nothing */
  ox_tensor_free(host_tensor(1024, 768));
  expect_cached(0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alignment_host),
      cmocka_unit_test(test_alignment_device),
      cmocka_unit_test(test_bad_alignment_and_args),
      cmocka_unit_test(test_create_refuses_bad_backing),
      cmocka_unit_test(test_reuse_after_free),
      cmocka_unit_test(test_coalescing),
      cmocka_unit_test(test_growth_power_of_two),
      cmocka_unit_test(test_growth_requested),
      cmocka_unit_test(test_default_initial_chunk),
      cmocka_unit_test(test_max_bytes),
      cmocka_unit_test(test_failing_backing),
      cmocka_unit_test(test_backing_refuses_big_chunk),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_random_against_model),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_host_block_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
