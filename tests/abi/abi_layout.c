/* abi_layout.c — records the offset and size of every ABI 1.0 field and the
 * size of every ABI struct, as seen by the headers this file is compiled
 * against. tests/abi/CMakeLists.txt compiles it twice: with the frozen 1.0
 * headers (ABI_SET=v1_0) and with sdk/include (ABI_SET=current).
 *
 * The static assertions are the per-minor size checks: in every header set,
 * a value type has exactly its 1.0 size and a table or argument struct is at
 * least its 1.0 size (ONYX_ABI_V1_0_*_SIZE); the frozen set has exactly the
 * 1.0 sizes. A later minor adds its own pinned sizes and a line per struct. */
#include <stddef.h>
#include "abi_fields.h"
#include "abi_layout.h"
#include "onyx/onyx_ep.h"

#ifndef ABI_SET
#error "set ABI_SET to v1_0 or current"
#endif
#define ABI_CAT2(a, b) a##b
#define ABI_CAT(a, b)  ABI_CAT2(a, b)

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the pinned ABI sizes are for x86-64 and AArch64"
#endif

#define ABI_FIELD(T, f) {#T, #f, offsetof(T, f), sizeof(((T*)0)->f)},
const AbiField ABI_CAT(abi_fields_, ABI_SET)[] = {ABI_V1_0_FIELDS(ABI_FIELD){NULL, NULL, 0, 0}};

#define ABI_STRUCT(T, size, grows)                                                                 \
  {#T, sizeof(T), size, grows, ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR},
const AbiStruct ABI_CAT(abi_structs_,
                        ABI_SET)[] = {ABI_V1_0_STRUCTS(ABI_STRUCT){NULL, 0, 0, 0, 0, 0}};

/* Compile-time: the rules of docs/abi.md, checked for this header set. */
#define ABI_ASSERT(T, size, grows)                                                                 \
  _Static_assert((grows) ? sizeof(T) >= (size) : sizeof(T) == (size),                              \
                 #T " must keep its ABI 1.0 size (value type) or only grow (table)");
ABI_V1_0_STRUCTS(ABI_ASSERT)
#if ONYX_ABI_VERSION_MAJOR == 1 && ONYX_ABI_VERSION_MINOR == 0
#define ABI_ASSERT_EXACT(T, size, grows)                                                           \
  _Static_assert(sizeof(T) == (size), #T ": an ABI 1.0 header set has exactly the 1.0 size");
ABI_V1_0_STRUCTS(ABI_ASSERT_EXACT)
#endif
