/* ox_compile_cache.h — the compiled-group cache (session option cache_dir).
 *
 * With cache_dir set and a provider that has OnyxEp.save_compiled and
 * load_compiled, compiling a fused group first looks for the entry
 * <cache_dir>/<key>.onyxc, where the key is a 128-bit hash of the group's
 * content (ops, domains, opset versions, attributes, value types and shapes,
 * constant data, the wiring between the nodes), the provider's name, version,
 * device and options, the session's `deterministic` flag and the host's ABI
 * version. An entry is a header (below) followed by the payload the provider
 * wrote through host->blob_write. A missing entry compiles the group and
 * saves it (written to a temporary file in the same folder, then renamed); a
 * bad entry (magic, format, key, length, checksum, or load_compiled refusing
 * it) is logged as a warning naming the file and the reason, and the group is
 * compiled and saved again. Failing to write only warns. */
#ifndef OX_COMPILE_CACHE_H
#define OX_COMPILE_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "ox_program.h"

/* --- Compiled-group cache entries being written (OnyxEp.save_compiled) --------- */
struct OnyxBlobWriter {
  uint8_t* data;
  size_t len, cap;
};
OnyxStatus* ox_blob_write(OnyxBlobWriter* w, const void* data, size_t bytes);

/* The entry header, all integers little-endian. */
#define OX_CC_MAGIC          "ONYXCGC\0" /* 8 bytes at offset 0 */
#define OX_CC_FORMAT         1u          /* u32 at offset 8 */
#define OX_CC_OFF_FORMAT     8
#define OX_CC_OFF_HEADER_LEN 12 /* u32: OX_CC_HEADER_BYTES */
#define OX_CC_OFF_KEY        16 /* 16 bytes: the key the entry was written for */
#define OX_CC_OFF_LENGTH     32 /* u64: payload bytes */
#define OX_CC_OFF_CHECKSUM   40 /* u64: ox_cc_checksum of the payload */
#define OX_CC_HEADER_BYTES   48
#define OX_CC_SUFFIX         ".onyxc"

/* Compiles group `grp` of provider slot `ep` into grp->kernel, through the
 * cache when the session has a cache_dir and the provider supports it.
 * Returns only compile's own error; every cache problem is a warning. */
OnyxStatus* ox_compile_group(OxProgram* s, int32_t ep, OxGroup* grp);

/* A 128-bit hash of bytes (not cryptographic: four 64-bit multiply-rotate
 * lanes over 32-byte stripes, like xxHash64, finalized twice). */
typedef struct OxHash128 {
  uint64_t v[4];
  uint8_t buf[32];
  size_t n_buf;
  uint64_t total;
} OxHash128;
void ox_hash128_init(OxHash128* h, uint64_t seed);
void ox_hash128_add(OxHash128* h, const void* data, size_t bytes);
void ox_hash128_final(const OxHash128* h, uint8_t out[16]);

/* The payload checksum stored in an entry's header. */
uint64_t ox_cc_checksum(const void* data, size_t bytes);

#endif
