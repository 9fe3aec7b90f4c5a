/* ox_arena.h — the host's arena over any provider allocator: best-fit with
 * coalescing of free neighbours, growing by chunks taken from the backing
 * allocator. Bookkeeping lives in host memory, so it works for device memory
 * the host cannot touch. Thread-safe. */
#ifndef OX_ARENA_H
#define OX_ARENA_H

#include "ox_common.h"
#include "onyx/onyx_ep.h"

typedef enum OxArenaExtend {
  OX_ARENA_EXTEND_POWER_OF_TWO = 0, /* each new chunk doubles the previous */
  OX_ARENA_EXTEND_REQUESTED = 1,    /* each new chunk is just what the request needs */
} OxArenaExtend;

typedef struct OxArenaConfig {
  size_t initial_chunk; /* 0: 1 MiB */
  size_t max_bytes;     /* 0: unlimited; past it alloc returns NULL */
  OxArenaExtend extend;
} OxArenaConfig;

typedef struct OxArenaStats {
  size_t in_use;   /* bytes handed out now */
  size_t peak;     /* highest in_use */
  size_t reserved; /* bytes taken from the backing allocator */
  size_t chunks;
  size_t allocs; /* number of ox_arena_alloc calls that succeeded */
} OxArenaStats;

typedef struct OxArena OxArena;

/* backing NULL: host memory (aligned malloc). cfg NULL: defaults. The arena
 * keeps a copy of *backing. */
OnyxStatus* ox_arena_create(const OnyxAllocator* backing, const OxArenaConfig* cfg, OxArena** out);
/* Frees every chunk back to the backing allocator. */
void ox_arena_destroy(OxArena* a);
/* NULL when the backing allocator fails or max_bytes would be passed.
 * alignment: a power of two (0: the memory's alignment). bytes 0 gives a
 * valid unique pointer. */
void* ox_arena_alloc(OxArena* a, size_t bytes, size_t alignment);
void ox_arena_free(OxArena* a, void* p);
OxArenaStats ox_arena_stats(const OxArena* a);
const OnyxMemoryDevice* ox_arena_device(const OxArena* a);

#endif
