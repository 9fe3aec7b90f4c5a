/* arena.c — best-fit arena over a provider allocator.
 *
 * The arena takes chunks from the backing allocator and carves them into
 * blocks. Every block is described by a host-side record (the chunk may be
 * device memory the host cannot touch): its address, its size, its address
 * neighbours in the chunk (for coalescing) and its place in one of two
 * treaps — free blocks ordered by (size, address) for best-fit look-up, and
 * blocks in use ordered by address for ox_arena_free. Both operations are
 * O(log blocks) expected.
 *
 * Sizes are rounded up to the memory's alignment (the quantum), so that every
 * block of a chunk starts quantum-aligned; an alignment above the quantum is
 * served by splitting off a free block in front. in_use counts rounded sizes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "ox_arena.h"
#include "ox_ir.h"

#define DEFAULT_CHUNK ((size_t)1 << 20)

typedef struct Block {
  uintptr_t addr;
  size_t size;
  struct Block *prev, *next;  /* address neighbours in the same chunk */
  struct Block *left, *right; /* treap links (free or used tree) */
  uint32_t prio;
  bool free;
} Block;

typedef struct Chunk {
  void* base;
  size_t size;
  Block* first; /* the block at base: coalescing always keeps the lower block */
  struct Chunk* next;
} Chunk;

struct OxArena {
  pthread_mutex_t mu;
  OnyxAllocator backing; /* alloc NULL: host memory */
  OnyxMemoryDevice device;
  OxArenaConfig cfg;
  size_t quantum;
  Chunk* chunks;
  size_t last_chunk; /* size of the newest chunk, for doubling */
  Block* free_tree;  /* key (size, addr) */
  Block* used_tree;  /* key (addr) */
  Block* spare;      /* recycled records, linked through next */
  uint32_t rng;
  OxArenaStats stats;
};

/* --- Treaps ----------------------------------------------------------------------- */

/* Keys compare (k1, k2) lexicographically: the free tree uses (size, addr),
 * the used tree (addr, 0). */
typedef struct Key {
  uintptr_t k1, k2;
} Key;

static Key free_key(const Block* b) {
  return (Key){b->size, b->addr};
}
static Key used_key(const Block* b) {
  return (Key){b->addr, 0};
}

static bool key_less(Key a, Key b) {
  return a.k1 < b.k1 || (a.k1 == b.k1 && a.k2 < b.k2);
}

typedef Key (*KeyFn)(const Block*);

/* Splits t into keys < k (*lo) and keys >= k (*hi). */
static void treap_split(Block* t, Key k, KeyFn key, Block** lo, Block** hi) {
  if (!t) {
    *lo = *hi = NULL;
  } else if (key_less(key(t), k)) {
    treap_split(t->right, k, key, &t->right, hi);
    *lo = t;
  } else {
    treap_split(t->left, k, key, lo, &t->left);
    *hi = t;
  }
}

/* Joins two treaps where every key of a is below every key of b. */
static Block* treap_merge(Block* a, Block* b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->right = treap_merge(a->right, b);
    return a;
  }
  b->left = treap_merge(a, b->left);
  return b;
}

static void treap_insert(Block** root, Block* n, KeyFn key) {
  Block *lo, *hi;
  n->left = n->right = NULL;
  treap_split(*root, key(n), key, &lo, &hi);
  *root = treap_merge(treap_merge(lo, n), hi);
}

/* Removes the node with key k; returns it (NULL if absent). */
static Block* treap_remove(Block** root, Key k, KeyFn key) {
  Block** link = root;
  while (*link) {
    Block* t = *link;
    Key tk = key(t);
    if (key_less(k, tk)) {
      link = &t->left;
    } else if (key_less(tk, k)) {
      link = &t->right;
    } else {
      *link = treap_merge(t->left, t->right);
      return t;
    }
  }
  return NULL;
}

/* The node with the smallest key >= k, or NULL. */
static Block* treap_ceil(Block* t, Key k, KeyFn key) {
  Block* best = NULL;
  while (t) {
    if (key_less(key(t), k)) {
      t = t->right;
    } else {
      best = t;
      t = t->left;
    }
  }
  return best;
}

/* --- Block records --------------------------------------------------------------- */

static uint32_t next_prio(OxArena* a) {
  a->rng ^= a->rng << 13; /* xorshift32: treap priorities need no quality */
  a->rng ^= a->rng >> 17;
  a->rng ^= a->rng << 5;
  return a->rng;
}

/* Ensures n spare records so that a later split cannot fail halfway. */
static bool reserve_records(OxArena* a, int n) {
  int have = 0;
  for (Block* b = a->spare; b && have < n; b = b->next)
    have++;
  for (; have < n; have++) {
    Block* b = malloc(sizeof *b);
    if (!b) return false;
    b->next = a->spare;
    a->spare = b;
  }
  return true;
}

static Block* take_record(OxArena* a) {
  Block* b = a->spare;
  a->spare = b->next;
  memset(b, 0, sizeof *b);
  b->prio = next_prio(a);
  return b;
}

static void drop_record(OxArena* a, Block* b) {
  b->next = a->spare;
  a->spare = b;
}

static void mark_free(OxArena* a, Block* b) {
  b->free = true;
  treap_insert(&a->free_tree, b, free_key);
}

/* Keeps the first `size` bytes of b in b and returns a new block for the
 * rest, linked after it and in no tree. The lower block keeping its record is
 * what keeps Chunk.first valid. */
static Block* split(OxArena* a, Block* b, size_t size) {
  Block* r = take_record(a);
  r->addr = b->addr + size;
  r->size = b->size - size;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  return r;
}

/* --- Chunks --------------------------------------------------------------------- */

static void* backing_alloc(OxArena* a, size_t bytes) {
  if (a->backing.alloc) return a->backing.alloc(a->backing.ctx, bytes, a->quantum);
  size_t rounded = (bytes + a->quantum - 1) & ~(a->quantum - 1);
  return aligned_alloc(a->quantum, rounded);
}

static void backing_free(OxArena* a, void* p) {
  if (a->backing.alloc)
    a->backing.free(a->backing.ctx, p);
  else
    free(p);
}

/* Size of the next chunk for a request needing `need` bytes: the initial
 * size, then double the last (or just `need` for EXTEND_REQUESTED), but never
 * less than `need` (a larger request gets exactly what it needs rather than
 * the next doubling past it, which could waste almost half of a big chunk).
 * 0 if max_bytes leaves no room. */
static size_t chunk_size(const OxArena* a, size_t need) {
  size_t size = a->cfg.initial_chunk;
  if (a->last_chunk)
    size = a->cfg.extend == OX_ARENA_EXTEND_REQUESTED ? need
           : a->last_chunk <= SIZE_MAX / 2            ? a->last_chunk * 2
                                                      : need;
  if (size < need) size = need;
  if (a->cfg.max_bytes) {
    size_t room = a->cfg.max_bytes - a->stats.reserved;
    if (size > room) size = room; /* a smaller chunk may still serve the request */
    if (size < need) return 0;
  }
  return size;
}

/* Adds a chunk that can hold `need` bytes, its whole span one free block. */
static bool grow(OxArena* a, size_t need) {
  size_t size = chunk_size(a, need);
  if (!size) return false;
  Chunk* c = malloc(sizeof *c);
  if (!c) return false;
  c->base = backing_alloc(a, size);
  if (!c->base && size > need) c->base = backing_alloc(a, size = need); /* less ambitious */
  if (!c->base) {
    free(c);
    return false;
  }
  Block* b = take_record(a);
  b->addr = (uintptr_t)c->base;
  b->size = size;
  mark_free(a, b);
  c->size = size;
  c->first = b;
  c->next = a->chunks;
  a->chunks = c;
  a->last_chunk = size;
  a->stats.reserved += size;
  a->stats.chunks++;
  return true;
}

/* --- Allocation ----------------------------------------------------------------- */

static size_t pad_for(uintptr_t addr, size_t align) {
  return (size_t)(((addr + align - 1) & ~(uintptr_t)(align - 1)) - addr);
}

/* The smallest free block that holds `size` bytes at `align`, out of the tree. */
static Block* best_fit(OxArena* a, size_t size, size_t align) {
  Key k = {size, 0};
  for (Block* b; (b = treap_ceil(a->free_tree, k, free_key)) != NULL;
       k = (Key){b->size, b->addr + 1}) {
    size_t pad = pad_for(b->addr, align);
    if (pad <= b->size && b->size - pad >= size)
      return treap_remove(&a->free_tree, free_key(b), free_key);
  }
  return NULL;
}

/* Carves [pad, pad+size) out of free block b (out of the tree) and marks
 * it used. */
static Block* carve(OxArena* a, Block* b, size_t size, size_t align) {
  size_t pad = pad_for(b->addr, align);
  if (pad) {
    Block* rest = split(a, b, pad);
    mark_free(a, b);
    b = rest;
  }
  if (b->size > size) mark_free(a, split(a, b, size));
  b->free = false;
  treap_insert(&a->used_tree, b, used_key);
  return b;
}

static bool size_for(const OxArena* a, size_t bytes, size_t align, size_t* size, size_t* need) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - a->quantum - align) return false;
  *size = (bytes + a->quantum - 1) & ~(a->quantum - 1);
  *need = *size + (align > a->quantum ? align : 0);
  return true;
}

static void* alloc_locked(OxArena* a, size_t bytes, size_t align) {
  size_t size, need;
  if (!size_for(a, bytes, align, &size, &need)) return NULL;
  if (!reserve_records(a, 3)) return NULL;
  Block* b = best_fit(a, size, align);
  if (!b) {
    if (!grow(a, need)) return NULL;
    b = best_fit(a, size, align);
    if (!b) return NULL;
  }
  b = carve(a, b, size, align);
  a->stats.in_use += b->size;
  if (a->stats.in_use > a->stats.peak) a->stats.peak = a->stats.in_use;
  a->stats.allocs++;
  return (void*)b->addr;
}

void* ox_arena_alloc(OxArena* a, size_t bytes, size_t alignment) {
  if (!a) return NULL;
  if (alignment == 0) alignment = a->quantum;
  if (alignment & (alignment - 1)) {
    ox_log(ONYX_LOG_ERROR, "arena: alignment %zu is not a power of two", alignment);
    return NULL;
  }
  pthread_mutex_lock(&a->mu);
  void* p = alloc_locked(a, bytes, alignment);
  pthread_mutex_unlock(&a->mu);
  return p;
}

/* Joins b's next neighbour, already out of the free tree, into b. */
static void join_next(OxArena* a, Block* b) {
  Block* n = b->next;
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  drop_record(a, n);
}

void ox_arena_free(OxArena* a, void* p) {
  if (!a || !p) return;
  pthread_mutex_lock(&a->mu);
  Block* b = treap_remove(&a->used_tree, (Key){(uintptr_t)p, 0}, used_key);
  if (!b) {
    pthread_mutex_unlock(&a->mu);
    ox_log(ONYX_LOG_ERROR, "arena: free of %p, which this arena did not hand out", p);
    return;
  }
  a->stats.in_use -= b->size;
  if (b->next && b->next->free) {
    treap_remove(&a->free_tree, free_key(b->next), free_key);
    join_next(a, b);
  }
  if (b->prev && b->prev->free) {
    b = b->prev;
    treap_remove(&a->free_tree, free_key(b), free_key);
    join_next(a, b);
  }
  mark_free(a, b);
  pthread_mutex_unlock(&a->mu);
}

/* --- Life cycle and stats --------------------------------------------------------- */

static OnyxStatus* read_backing(const OnyxAllocator* backing, OxArena* a) {
  if (!backing) {
    a->device = OX_HOST_MEMORY;
    if (a->device.alignment < OX_HOST_ALIGN) a->device.alignment = OX_HOST_ALIGN;
    return NULL;
  }
  if (backing->struct_size < offsetof(OnyxAllocator, free) + sizeof backing->free ||
      !backing->alloc || !backing->free)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "arena: backing allocator lacks alloc or free (struct_size %zu)",
                     backing->struct_size);
  uint32_t al = backing->device.alignment;
  if (al == 0 || (al & (al - 1)))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "arena: backing allocator's memory alignment %u is not a power of two", al);
  a->backing = *backing;
  a->device = backing->device;
  return NULL;
}

OnyxStatus* ox_arena_create(const OnyxAllocator* backing, const OxArenaConfig* cfg, OxArena** out) {
  *out = NULL;
  if (cfg && cfg->extend != OX_ARENA_EXTEND_POWER_OF_TWO &&
      cfg->extend != OX_ARENA_EXTEND_REQUESTED)
    return ox_status(ONYX_INVALID_ARGUMENT, "arena: unknown extend strategy %d", (int)cfg->extend);
  OxArena* a = calloc(1, sizeof *a);
  if (!a) return ox_oom();
  OnyxStatus* st = read_backing(backing, a);
  if (st) {
    free(a);
    return st;
  }
  if (cfg) a->cfg = *cfg;
  if (!a->cfg.initial_chunk) a->cfg.initial_chunk = DEFAULT_CHUNK;
  a->quantum = a->device.alignment;
  a->rng = 0x9e3779b9u;
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    free(a);
    return ox_status(ONYX_FAIL, "arena: cannot create its mutex");
  }
  *out = a;
  return NULL;
}

void ox_arena_destroy(OxArena* a) {
  if (!a) return;
  for (Chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    for (Block *b = c->first, *bn; b; b = bn) {
      bn = b->next;
      free(b);
    }
    backing_free(a, c->base);
    free(c);
  }
  for (Block *b = a->spare, *bn; b; b = bn) {
    bn = b->next;
    free(b);
  }
  pthread_mutex_destroy(&a->mu);
  free(a);
}

OxArenaStats ox_arena_stats(const OxArena* a) {
  OxArenaStats s = {0};
  if (!a) return s;
  OxArena* m = (OxArena*)a; /* the mutex changes; the arena was never const-defined */
  pthread_mutex_lock(&m->mu);
  s = a->stats;
  pthread_mutex_unlock(&m->mu);
  return s;
}

const OnyxMemoryDevice* ox_arena_device(const OxArena* a) {
  return a ? &a->device : NULL;
}
