/* cachetest.h — a test-only provider for the compiled-group cache, linked
 * into the test (onyx_session_options_add_provider_init, name "cachetest").
 *
 * It claims every float32 Add, Mul and Relu node of the graph as one group
 * (the nodes must form a chain: each reads the previous one's output as its
 * first input; Add and Mul take a constant second operand, one value or one
 * per element). compile copies the constants into a small program; compute
 * runs it element by element. save_compiled writes the program and
 * load_compiled reads it back, checking everything against the group. The
 * counters (updated atomically: sessions may run on several threads) say
 * which of them the host called. */
#ifndef CACHETEST_H
#define CACHETEST_H

#include "onyx/onyx_ep.h"

OnyxStatus* cachetest_init(const OnyxHostApi* host, const OnyxProvider** out);

extern int cachetest_compiles; /* compile calls */
extern int cachetest_saves;    /* save_compiled calls */
extern int cachetest_loads;    /* load_compiled calls that returned a kernel */
extern int cachetest_refusals; /* load_compiled calls that refused the entry */
/* The payload format the provider writes and accepts (default 1): changing
 * it makes earlier entries stale. */
extern unsigned cachetest_format;
/* 1: create_ep returns an OnyxEp whose struct_size is ABI 1.0's, with the
 * 1.1 cache slots set to functions that count calls in
 * cachetest_slot_misreads (the host must not read them). */
extern int cachetest_abi10;
extern int cachetest_slot_misreads;

#endif
