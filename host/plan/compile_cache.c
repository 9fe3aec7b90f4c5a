/* compile_cache.c — the compiled-group cache (ox_compile_cache.h).
 *
 * An entry is read whole with bounded reads (its header's payload length
 * must equal the file's size less the header and stay under a limit derived
 * from max_model_bytes), checked (magic, format, key echo, checksum) and only
 * then handed to the provider's load_compiled. Entries are written to a
 * unique temporary file in the cache folder and renamed over the entry, so a
 * reader never sees a partial entry and concurrent sessions writing the same
 * entry leave one of their (identical) files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ox_compile_cache.h"

/* --- Hash ----------------------------------------------------------------------------------- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

/* Little-endian loads whatever the host's order (one instruction on x86-64
 * and AArch64, where the swap is compiled out). */
static uint64_t load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static void store64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t lane_round(uint64_t acc, uint64_t in) {
  acc += in * P2;
  acc = rotl64(acc, 31);
  return acc * P1;
}

static void stripe(uint64_t v[4], const uint8_t* p) {
  for (int i = 0; i < 4; i++)
    v[i] = lane_round(v[i], load64(p + 8 * i));
}

void ox_hash128_init(OxHash128* h, uint64_t seed) {
  *h = (OxHash128){.v = {seed + P1 + P2, seed + P2, seed, seed - P1}};
}

void ox_hash128_add(OxHash128* h, const void* data, size_t bytes) {
  const uint8_t* p = data;
  h->total += bytes;
  if (h->n_buf) {
    size_t take = 32 - h->n_buf < bytes ? 32 - h->n_buf : bytes;
    memcpy(h->buf + h->n_buf, p, take);
    h->n_buf += take;
    p += take;
    bytes -= take;
    if (h->n_buf < 32) return;
    stripe(h->v, h->buf);
    h->n_buf = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32)
    stripe(h->v, p);
  if (bytes) memcpy(h->buf, p, bytes);
  h->n_buf = bytes;
}

static uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

static uint64_t merge(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t total,
                      uint64_t salt) {
  uint64_t h = rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18);
  const uint64_t lanes[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) {
    h ^= lane_round(0, lanes[i]);
    h = h * P1 + P4;
  }
  h ^= total * P5 + salt;
  return avalanche(h);
}

void ox_hash128_final(const OxHash128* h, uint8_t out[16]) {
  uint64_t v[4] = {h->v[0], h->v[1], h->v[2], h->v[3]};
  if (h->n_buf) { /* the tail, zero-padded; the total length tells paddings apart */
    uint8_t last[32] = {0};
    memcpy(last, h->buf, h->n_buf);
    stripe(v, last);
  }
  store64(out, merge(v[0], v[1], v[2], v[3], h->total, P3));
  store64(out + 8, merge(v[3], v[2], v[1], v[0], h->total, P4));
}

uint64_t ox_cc_checksum(const void* data, size_t bytes) {
  OxHash128 h;
  ox_hash128_init(&h, 0x6f6e79786363ull);
  ox_hash128_add(&h, data, bytes);
  uint8_t out[16];
  ox_hash128_final(&h, out);
  return load64(out);
}

/* --- The key ---------------------------------------------------------------------------------- */

/* Raised when the group holds something the key cannot describe (a subgraph
 * attribute): such a group is compiled without the cache. */
typedef struct KeyCtx {
  OxHash128 h;
  const OnyxGraphView* view;
  bool uncacheable;
} KeyCtx;

static void k_u64(KeyCtx* k, uint64_t v) {
  uint8_t b[8];
  store64(b, v);
  ox_hash128_add(&k->h, b, 8);
}

static void k_bytes(KeyCtx* k, const void* p, size_t n) {
  k_u64(k, n);
  if (n) ox_hash128_add(&k->h, p, n);
}

static void k_str(KeyCtx* k, const char* s) {
  k_bytes(k, s ? s : "", s ? strlen(s) : 0);
}

static void k_tensor(KeyCtx* k, const OxTensor* t) {
  if (!t) {
    k_u64(k, 0);
    return;
  }
  k_u64(k, 1);
  k_u64(k, (uint64_t)t->type);
  k_u64(k, t->rank);
  for (size_t i = 0; i < t->rank; i++)
    k_u64(k, (uint64_t)t->dims[i]);
  if (t->vkind != OX_RT_TENSOR) {
    k->uncacheable = true;
    return;
  }
  if (t->type == ONYX_ELEM_STRING) {
    char* const* s = t->data;
    for (size_t i = 0; i < t->count; i++)
      k_str(k, s ? s[i] : NULL);
    return;
  }
  k_bytes(k, t->data, t->data ? t->bytes : 0);
}

/* A value's type and shape, and its data when it is a constant. */
static void k_value(KeyCtx* k, const OxValue* v) {
  if (!v) {
    k_u64(k, 0);
    return;
  }
  k_u64(k, 1);
  k_u64(k, v->kind);
  k_u64(k, (uint64_t)v->type);
  k_u64(k, (uint64_t)(int64_t)v->rank);
  for (int32_t i = 0; i < v->rank; i++)
    k_u64(k, (uint64_t)v->dims[i]);
  k_tensor(k, v->constant);
}

/* Where a value comes from, by position rather than by name: absent, group
 * input i, or output slot of node j of the group. */
static void k_ref(KeyCtx* k, const OxValue* v) {
  const OnyxGraphView* g = k->view;
  if (!v) {
    k_u64(k, 0);
    return;
  }
  for (size_t i = 0; i < g->n_inputs; i++)
    if (g->inputs[i] == v) {
      k_u64(k, 1);
      k_u64(k, i);
      return;
    }
  for (size_t j = 0; v->producer && j < g->n_nodes; j++)
    if (g->nodes[j] == v->producer) {
      k_u64(k, 2);
      k_u64(k, j);
      k_u64(k, (uint64_t)(int64_t)v->producer_slot);
      return;
    }
  k->uncacheable = true; /* not a group input nor made inside: the view is not closed */
}

static void k_attr(KeyCtx* k, const OxAttr* a) {
  k_str(k, a->name);
  k_u64(k, (uint64_t)a->type);
  switch (a->type) {
  case ONYX_ATTR_FLOAT: {
    uint32_t bits;
    memcpy(&bits, &a->f, sizeof bits);
    k_u64(k, bits);
    break;
  }
  case ONYX_ATTR_INT:
    k_u64(k, (uint64_t)a->i);
    break;
  case ONYX_ATTR_STRING:
    k_bytes(k, a->s, a->s ? a->s_len : 0);
    break;
  case ONYX_ATTR_INTS:
    k_u64(k, a->count);
    for (size_t i = 0; i < a->count; i++)
      k_u64(k, (uint64_t)a->ints[i]);
    break;
  case ONYX_ATTR_FLOATS:
    k_u64(k, a->count);
    for (size_t i = 0; i < a->count; i++) {
      uint32_t bits;
      memcpy(&bits, &a->floats[i], sizeof bits);
      k_u64(k, bits);
    }
    break;
  case ONYX_ATTR_STRINGS:
    k_u64(k, a->count);
    for (size_t i = 0; i < a->count; i++)
      k_bytes(k, a->strings[i], a->strings_len ? a->strings_len[i] : strlen(a->strings[i]));
    break;
  case ONYX_ATTR_TENSOR:
    k_tensor(k, a->t);
    break;
  case ONYX_ATTR_TENSORS:
    k_u64(k, a->count);
    for (size_t i = 0; i < a->count; i++)
      k_tensor(k, a->tensors[i]);
    break;
  case ONYX_ATTR_TYPE_PROTO:
    k_u64(k, a->tp_kind);
    k_u64(k, (uint64_t)a->tp_elem);
    break;
  default: /* subgraphs, sparse tensors, type-proto lists */
    k->uncacheable = true;
    break;
  }
}

static void k_node(KeyCtx* k, const OxNode* n) {
  k_str(k, n->op_type);
  k_str(k, n->domain);
  k_u64(k, (uint64_t)(int64_t)n->since_version);
  k_u64(k, n->n_inputs);
  for (size_t i = 0; i < n->n_inputs; i++) {
    k_ref(k, n->inputs[i]);
    k_value(k, n->inputs[i]);
  }
  k_u64(k, n->n_outputs);
  for (size_t i = 0; i < n->n_outputs; i++)
    k_value(k, n->outputs[i]);
  /* Attributes by name, so their order in the model does not matter. */
  k_u64(k, n->n_attrs);
  const OxAttr* prev = NULL;
  for (size_t done = 0; done < n->n_attrs; done++) {
    const OxAttr* next = NULL;
    for (size_t i = 0; i < n->n_attrs; i++) {
      const OxAttr* a = &n->attrs[i];
      if (prev && strcmp(a->name, prev->name) <= 0) continue;
      if (!next || strcmp(a->name, next->name) < 0) next = a;
    }
    if (!next) break;
    k_attr(k, next);
    prev = next;
  }
}

static const OxProviderSpec* slot_spec(const OxProgram* s, int32_t ep) {
  for (size_t i = 0; i < s->cfg.n_providers; i++)
    if (!strcmp(s->cfg.providers[i].name, s->eps[ep].name)) return &s->cfg.providers[i];
  return NULL;
}

/* The entry's key; false when the group cannot be cached. */
static bool group_key(const OxProgram* s, int32_t ep, const OxGroup* grp, uint8_t key[16]) {
  KeyCtx k = {.view = &grp->view};
  ox_hash128_init(&k.h, 0);
  k_str(&k, "onyx compiled-group key 1");
  k_u64(&k, ONYX_ABI_VERSION_MAJOR);
  k_u64(&k, ONYX_ABI_VERSION_MINOR);
  const OnyxProvider* p = s->eps[ep].ep->provider;
  if (!p) p = s->eps[ep].lib->provider;
  k_str(&k, p ? p->name : s->eps[ep].name);
  k_str(&k, p ? p->version : NULL);
  const OxProviderSpec* spec = slot_spec(s, ep);
  k_u64(&k, spec ? (uint64_t)spec->device : 0);
  k_u64(&k, s->cfg.deterministic);
  /* The provider's options sorted by key. */
  const OnyxOptions* o = spec ? &spec->options : NULL;
  size_t n_opt = o ? o->count : 0;
  k_u64(&k, n_opt);
  const char* prev = NULL;
  for (size_t done = 0; done < n_opt; done++) {
    size_t next = n_opt;
    for (size_t i = 0; i < n_opt; i++) {
      if (prev && strcmp(o->keys[i], prev) <= 0) continue;
      if (next == n_opt || strcmp(o->keys[i], o->keys[next]) < 0) next = i;
    }
    if (next == n_opt) break;
    k_str(&k, o->keys[next]);
    k_str(&k, o->values[next]);
    prev = o->keys[next];
  }
  const OnyxGraphView* g = &grp->view;
  k_u64(&k, g->n_inputs);
  for (size_t i = 0; i < g->n_inputs; i++)
    k_value(&k, g->inputs[i]);
  k_u64(&k, g->n_nodes);
  for (size_t j = 0; j < g->n_nodes && !k.uncacheable; j++)
    k_node(&k, g->nodes[j]);
  k_u64(&k, g->n_outputs);
  for (size_t i = 0; i < g->n_outputs; i++)
    k_ref(&k, g->outputs[i]);
  ox_hash128_final(&k.h, key);
  return !k.uncacheable;
}

/* --- Entries ------------------------------------------------------------------------------ */

/* The largest payload read: four times the model limit (an entry holds
 * weights, often twice over: as given and in the provider's layout). */
static size_t entry_limit(const OxProgram* s) {
  size_t m = s->cfg.max_model_bytes;
  return m > SIZE_MAX / 4 ? SIZE_MAX : m * 4;
}

static bool read_all(int fd, void* buf, size_t n) {
  uint8_t* p = buf;
  while (n) {
    ssize_t got = read(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= (size_t)got;
  }
  return true;
}

static bool write_all(int fd, const void* buf, size_t n) {
  const uint8_t* p = buf;
  while (n) {
    ssize_t put = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= (size_t)put;
  }
  return true;
}

typedef enum EntryRead { ENTRY_MISSING, ENTRY_BAD, ENTRY_OK } EntryRead;

/* Reads and checks the entry at `path`: ENTRY_OK with the payload in *data
 * (freed with free()), ENTRY_MISSING, or ENTRY_BAD with the reason in `why`. */
static EntryRead read_entry(const OxProgram* s, const char* path, const uint8_t key[16],
                            uint8_t** data, size_t* len, char* why, size_t why_len) {
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ENTRY_MISSING; /* saving will say why */
    snprintf(why, why_len, "cannot open: %s", strerror(errno));
    return ENTRY_BAD;
  }
  EntryRead r = ENTRY_BAD;
  struct stat sb;
  uint8_t h[OX_CC_HEADER_BYTES];
  uint8_t* payload = NULL;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    snprintf(why, why_len, "not a regular file");
    goto done;
  }
  if ((uint64_t)sb.st_size < OX_CC_HEADER_BYTES || !read_all(fd, h, sizeof h)) {
    snprintf(why, why_len, "truncated: %lld bytes, shorter than the %d-byte header",
             (long long)sb.st_size, OX_CC_HEADER_BYTES);
    goto done;
  }
  if (memcmp(h, OX_CC_MAGIC, 8) != 0) {
    snprintf(why, why_len, "bad magic: not a compiled-group cache entry");
    goto done;
  }
  uint32_t format = load32(h + OX_CC_OFF_FORMAT);
  if (format != OX_CC_FORMAT || load32(h + OX_CC_OFF_HEADER_LEN) != OX_CC_HEADER_BYTES) {
    snprintf(why, why_len, "entry format %u with a %u-byte header; this host reads format %u",
             format, load32(h + OX_CC_OFF_HEADER_LEN), OX_CC_FORMAT);
    goto done;
  }
  if (memcmp(h + OX_CC_OFF_KEY, key, 16) != 0) {
    snprintf(why, why_len, "key mismatch: the entry was written for another group");
    goto done;
  }
  uint64_t n = load64(h + OX_CC_OFF_LENGTH);
  uint64_t have = (uint64_t)sb.st_size - OX_CC_HEADER_BYTES;
  if (n > entry_limit(s)) {
    snprintf(why, why_len, "payload length %llu is over the limit of %zu bytes",
             (unsigned long long)n, entry_limit(s));
    goto done;
  }
  if (n != have) {
    snprintf(why, why_len, "%s: the header gives %llu payload bytes, the file holds %llu",
             n > have ? "truncated" : "trailing bytes", (unsigned long long)n,
             (unsigned long long)have);
    goto done;
  }
  payload = ox_alloc_host((size_t)n); /* huge pages for a large entry: fewer faults */
  if (!payload) {
    snprintf(why, why_len, "out of memory for %llu bytes", (unsigned long long)n);
    goto done;
  }
  if (!read_all(fd, payload, (size_t)n)) {
    snprintf(why, why_len, "read error or truncated while reading %llu payload bytes",
             (unsigned long long)n);
    goto done;
  }
  if (ox_cc_checksum(payload, (size_t)n) != load64(h + OX_CC_OFF_CHECKSUM)) {
    snprintf(why, why_len, "payload checksum mismatch (corrupt entry)");
    goto done;
  }
  *data = payload;
  *len = (size_t)n;
  payload = NULL;
  r = ENTRY_OK;
done:
  free(payload);
  close(fd);
  return r;
}

/* Writes header + payload to a temporary file beside `path` and renames it
 * over `path`; false with the reason in `why`. */
static bool write_entry(const char* dir, const char* path, const uint8_t key[16],
                        const OnyxBlobWriter* w, char* why, size_t why_len) {
  static unsigned long counter; /* unique temporary names within the process */
  unsigned long n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    snprintf(why, why_len, "cannot create the folder: %s", strerror(errno));
    return false;
  }
  char* tmp = ox_asprintf("%s.tmp.%ld.%lu", path, (long)getpid(), n);
  if (!tmp) {
    snprintf(why, why_len, "out of memory");
    return false;
  }
  uint8_t h[OX_CC_HEADER_BYTES] = {0};
  memcpy(h, OX_CC_MAGIC, 8);
  store32(h + OX_CC_OFF_FORMAT, OX_CC_FORMAT);
  store32(h + OX_CC_OFF_HEADER_LEN, OX_CC_HEADER_BYTES);
  memcpy(h + OX_CC_OFF_KEY, key, 16);
  store64(h + OX_CC_OFF_LENGTH, w->len);
  store64(h + OX_CC_OFF_CHECKSUM, ox_cc_checksum(w->data, w->len));
  bool ok = false;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(why, why_len, "cannot create %s: %s", tmp, strerror(errno));
  } else {
    ok = write_all(fd, h, sizeof h) && (!w->len || write_all(fd, w->data, w->len));
    if (!ok) snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && ok) {
      snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
      ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
      snprintf(why, why_len, "cannot rename %s to the entry: %s", tmp, strerror(errno));
      ok = false;
    }
    if (!ok) unlink(tmp);
  }
  free(tmp);
  return ok;
}

/* --- Compiling through the cache ---------------------------------------------------------- */

static OnyxStatus* compile_plain(OnyxEp* ep, OxGroup* grp) {
  grp->kernel = (OnyxCompiledKernel){.struct_size = sizeof grp->kernel};
  return ep->compile(ep, &grp->view, &grp->kernel);
}

static void save(OxProgram* s, int32_t e, OxGroup* grp, const uint8_t key[16], const char* path) {
  OnyxEp* ep = s->eps[e].ep;
  OnyxBlobWriter w = {0};
  OnyxStatus* st = OX_EP_SLOT(ep, save_compiled)(ep, &grp->view, &grp->kernel, &w);
  char why[1024];
  if (st) {
    ox_program_log(s, ONYX_LOG_WARNING,
                   "compiled-group cache: provider '%s' could not save group '%s' to %s: %s",
                   s->eps[e].name, grp->name, path, st->message ? st->message : "");
    ox_status_free(st);
  } else if (!write_entry(s->cfg.cache_dir, path, key, &w, why, sizeof why)) {
    ox_program_log(s, ONYX_LOG_WARNING, "compiled-group cache: cannot save group '%s' to %s: %s",
                   grp->name, path, why);
  } else {
    ox_program_log(s, ONYX_LOG_INFO,
                   "compiled-group cache: saved group '%s' (provider '%s', %zu bytes) to %s",
                   grp->name, s->eps[e].name, w.len, path);
  }
  free(w.data);
}

OnyxStatus* ox_compile_group(OxProgram* s, int32_t e, OxGroup* grp) {
  OnyxEp* ep = s->eps[e].ep;
  const char* dir = s->cfg.cache_dir;
  if (!dir || !OX_EP_SLOT(ep, save_compiled) || !OX_EP_SLOT(ep, load_compiled))
    return compile_plain(ep, grp);
  uint8_t key[16];
  if (!group_key(s, e, grp, key)) {
    ox_program_log(s, ONYX_LOG_VERBOSE,
                   "compiled-group cache: group '%s' holds a subgraph or sparse attribute: not "
                   "cached",
                   grp->name);
    return compile_plain(ep, grp);
  }
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", key[i]);
  char* path = ox_asprintf("%s/%s%s", dir, hex, OX_CC_SUFFIX);
  if (!path) return ox_oom();
  uint8_t* data = NULL;
  size_t len = 0;
  char why[1024];
  EntryRead r = read_entry(s, path, key, &data, &len, why, sizeof why);
  if (r == ENTRY_OK) {
    grp->kernel = (OnyxCompiledKernel){.struct_size = sizeof grp->kernel};
    OnyxStatus* st = OX_EP_SLOT(ep, load_compiled)(ep, &grp->view, data, len, &grp->kernel);
    free(data);
    if (!st && grp->kernel.compute) {
      ox_program_log(s, ONYX_LOG_INFO,
                     "compiled-group cache: group '%s' (provider '%s') loaded from %s", grp->name,
                     s->eps[e].name, path);
      free(path);
      return NULL;
    }
    snprintf(why, sizeof why, "provider '%s' refused it: %s", s->eps[e].name,
             st && st->message ? st->message : "load_compiled returned no kernel");
    ox_status_free(st);
    r = ENTRY_BAD;
  }
  if (r == ENTRY_BAD)
    ox_program_log(s, ONYX_LOG_WARNING,
                   "compiled-group cache: ignoring %s for group '%s': %s; compiling it again", path,
                   grp->name, why);
  OnyxStatus* st = compile_plain(ep, grp);
  if (!st && grp->kernel.compute) save(s, e, grp, key, path);
  free(path);
  return st;
}
