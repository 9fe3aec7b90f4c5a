/* ox_tcp_store.h — the TCP key-value store of a torchrun-style launch: the
 * rendezvous of the ranks, never a transport for collectives.
 *
 * Rank 0 runs the server (a thread listening on MASTER_ADDR:MASTER_PORT) and
 * every rank, rank 0 included, is a client. Clients connect with retries
 * until the timeout, so ranks may start in any order. Values are byte
 * strings under keys; a get waits (bounded) until its key is set.
 *
 * Wire format: every message is a frame, a 4-byte big-endian body length
 * (at most OX_STORE_MAX_FRAME) followed by the body. A request body is the op
 * (1 byte), the key length (2 bytes, big-endian, 1 to OX_STORE_MAX_KEY) and
 * the key, then the value (the rest). A reply body is a status byte and a
 * payload. The first request on a connection is HELLO with the key
 * OX_STORE_MAGIC, so a client that reaches another service fails clearly.
 * A peer that sends a malformed or truncated frame is disconnected (server)
 * or reported (client); every read and write is bounded by a deadline and
 * polls the stop function.
 */
#ifndef OX_TCP_STORE_H
#define OX_TCP_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "ox_dist_backend.h"
#include "onyx/onyx_types.h"

#define OX_STORE_MAGIC     "onyx-tcp-store-1"
#define OX_STORE_MAX_KEY   1024u
#define OX_STORE_MAX_VALUE (1u << 20)
#define OX_STORE_MAX_FRAME (OX_STORE_MAX_VALUE + OX_STORE_MAX_KEY + 16u)
/* The server refuses to hold more than this many value bytes in all. */
#define OX_STORE_MAX_TOTAL (64u << 20)

typedef struct OxStore OxStore;

typedef struct OxStoreOptions {
  const char* host; /* MASTER_ADDR: a name or an IPv4/IPv6 address */
  const char* port; /* MASTER_PORT: a number (or a service name) */
  int serve;        /* 1: this process runs the server (rank 0) */
  /* Bound on connecting and on every wait; 0: the process group default. */
  uint32_t timeout_ms;
  /* How long the server's close waits for the other clients to hang up;
   * 0: 5000 ms. */
  uint32_t close_grace_ms;
  /* Optional: polled while waiting; nonzero stops the wait (ONYX_CANCELLED). */
  int32_t (*stop)(const void* arg);
  const void* stop_arg;
} OxStoreOptions;

/* Starts the server (serve = 1) and connects the client. */
OnyxStatus* ox_store_open(const OxStoreOptions* o, OxStore** out);
/* Closes the client; the server's owner then waits (at most the close grace)
 * for the other clients to hang up, and stops the server. NULL is allowed. */
void ox_store_close(OxStore* s);

/* Every call below may take a wait (timeout and stop); NULL: the store's. */
OnyxStatus* ox_store_set(OxStore* s, const char* key, const void* value, size_t len,
                         const OxDistWait* w);
/* Waits until key is set and returns a copy of its value (free() it; a value
 * of 0 bytes gives a non-NULL pointer). */
OnyxStatus* ox_store_get(OxStore* s, const char* key, void** value, size_t* len,
                         const OxDistWait* w);
/* Whether key is set, without waiting for it. */
OnyxStatus* ox_store_check(OxStore* s, const char* key, int* present, const OxDistWait* w);
/* Waits until every one of the n keys is set. */
OnyxStatus* ox_store_wait(OxStore* s, const char* const* keys, size_t n, const OxDistWait* w);
/* Adds delta to the int64 counter under key (0 when unset; a key set to a
 * value that is not a counter is an error) and returns the sum. */
OnyxStatus* ox_store_add(OxStore* s, const char* key, int64_t delta, int64_t* result,
                         const OxDistWait* w);
/* Returns when `count` clients have entered the barrier named `name` (each
 * name is used once). */
OnyxStatus* ox_store_barrier(OxStore* s, const char* name, int32_t count, const OxDistWait* w);

/* "host:port" of the store, for messages; never NULL. */
const char* ox_store_address(const OxStore* s);
/* The port the server listens on (the chosen one when port is "0"); 0 on a
 * client-only store. */
int ox_store_server_port(const OxStore* s);
/* How many connections the server dropped for a malformed or truncated
 * frame, and the last reason (NULL when none); the owner's view, for tests. */
uint64_t ox_store_server_rejected(OxStore* s, char* reason, size_t reason_len);

#endif /* OX_TCP_STORE_H */
