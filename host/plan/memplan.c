/* memplan.c — offset assignment for the memory pattern: values with known
 * sizes and lifetimes (in plan steps) get offsets in one block, best-fit
 * over a coalescing free list, so that values whose lifetimes do not
 * overlap share bytes. In-place outputs take their input's offset. */
#include <stdlib.h>
#include <string.h>
#include "ox_memplan.h"

typedef struct OxHole {
  size_t off, len;
} OxHole;

typedef struct OxHoles {
  OxHole* h; /* sorted by offset, never adjacent (coalesced) */
  size_t n, cap;
  size_t top; /* the block's size so far */
} OxHoles;

static size_t ox_round(size_t b) {
  return (b + OX_MEMPLAN_ALIGN - 1) / OX_MEMPLAN_ALIGN * OX_MEMPLAN_ALIGN;
}

/* Best fit among holes; else at the top (growing it, and swallowing a hole
 * that ends at the top). */
static size_t ox_holes_take(OxHoles* hs, size_t len) {
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < hs->n; i++)
    if (hs->h[i].len >= len && (best == SIZE_MAX || hs->h[i].len < hs->h[best].len)) best = i;
  if (best != SIZE_MAX) {
    size_t off = hs->h[best].off;
    hs->h[best].off += len;
    hs->h[best].len -= len;
    if (!hs->h[best].len) {
      memmove(&hs->h[best], &hs->h[best + 1], (hs->n - best - 1) * sizeof *hs->h);
      hs->n--;
    }
    return off;
  }
  if (hs->n && hs->h[hs->n - 1].off + hs->h[hs->n - 1].len == hs->top) {
    size_t off = hs->h[--hs->n].off;
    hs->top = off + len;
    return off;
  }
  size_t off = hs->top;
  hs->top += len;
  return off;
}

static bool ox_holes_give(OxHoles* hs, size_t off, size_t len) {
  size_t at = 0;
  while (at < hs->n && hs->h[at].off < off)
    at++;
  bool join_prev = at > 0 && hs->h[at - 1].off + hs->h[at - 1].len == off;
  bool join_next = at < hs->n && off + len == hs->h[at].off;
  if (join_prev && join_next) {
    hs->h[at - 1].len += len + hs->h[at].len;
    memmove(&hs->h[at], &hs->h[at + 1], (hs->n - at - 1) * sizeof *hs->h);
    hs->n--;
  } else if (join_prev) {
    hs->h[at - 1].len += len;
  } else if (join_next) {
    hs->h[at].off = off;
    hs->h[at].len += len;
  } else {
    if (!ox_grow((void**)&hs->h, &hs->cap, hs->n + 1, sizeof *hs->h)) return false;
    memmove(&hs->h[at + 1], &hs->h[at], (hs->n - at) * sizeof *hs->h);
    hs->h[at] = (OxHole){off, len};
    hs->n++;
  }
  return true;
}

OnyxStatus* ox_memplan_assign(const OxMemRequest* req, size_t n, size_t* offsets, size_t* block,
                              size_t* live) {
  *block = 0;
  *live = 0;
  size_t* root = malloc((n + 1) * sizeof *root);
  size_t* end = malloc((n + 1) * sizeof *end);
  size_t steps = 0;
  for (size_t i = 0; i < n; i++) {
    if (req[i].last + 1 > steps) steps = req[i].last + 1;
    if (req[i].first + 1 > steps) steps = req[i].first + 1;
  }
  int64_t* delta = calloc(steps + 2, sizeof *delta);
  OxHoles hs = {0};
  OnyxStatus* st = (!root || !end || !delta) ? ox_oom() : NULL;
  /* Roots own a block; a valid alias joins its target's block and extends
   * the block's lifetime. Requests are in step order, so targets come first. */
  for (size_t i = 0; !st && i < n; i++) {
    offsets[i] = OX_MEMPLAN_NONE;
    root[i] = i;
    end[i] = req[i].last < req[i].first ? req[i].first : req[i].last;
    size_t a = req[i].alias_of;
    if (a < i && req[a].bytes && req[i].bytes && req[i].bytes <= req[a].bytes &&
        req[a].last == req[i].first) {
      root[i] = root[a];
      if (end[i] > end[root[i]]) end[root[i]] = end[i];
    }
  }
  /* Sweep the steps: at step t, allocate the blocks that start at t, then
   * free the ones whose last use is t. */
  for (size_t t = 0; !st && t < steps; t++) {
    for (size_t i = 0; i < n; i++)
      if (root[i] == i && req[i].bytes && req[i].first == t) {
        size_t len = ox_round(req[i].bytes);
        offsets[i] = ox_holes_take(&hs, len);
        delta[t] += (int64_t)len;
        delta[end[i] + 1] -= (int64_t)len;
      }
    for (size_t i = 0; i < n && !st; i++)
      if (root[i] == i && req[i].bytes && end[i] == t &&
          !ox_holes_give(&hs, offsets[i], ox_round(req[i].bytes)))
        st = ox_oom();
  }
  if (!st) {
    for (size_t i = 0; i < n; i++)
      if (root[i] != i && req[i].bytes) offsets[i] = offsets[root[i]];
    int64_t cur = 0;
    for (size_t t = 0; t <= steps; t++) {
      cur += delta[t];
      if (cur > (int64_t)*live) *live = (size_t)cur;
    }
    *block = hs.top;
  }
  free(root);
  free(end);
  free(delta);
  free(hs.h);
  return st;
}

void ox_memplan_free(OxMemPlan* p) {
  if (!p) return;
  free(p->devices);
  free(p->device);
  free(p->offset);
  free(p->bytes);
  free(p->alias_of);
  free(p->first);
  free(p->last);
  free(p);
}
