/* ox_threadpool.h — the session's intra-op thread pool, offered to every
 * provider through the host API (OnyxThreadPool). */
#ifndef OX_THREADPOOL_H
#define OX_THREADPOOL_H

#include "ox_common.h"
#include "onyx/onyx_ep.h"

typedef struct OnyxThreadPool OxThreadPool;

/* threads: total workers including the calling thread (1: no extra threads;
 * 0: one per online core). */
OnyxStatus* ox_threadpool_create(int threads, OxThreadPool** out);
void ox_threadpool_free(OxThreadPool* p);
size_t ox_threadpool_size(const OxThreadPool* p); /* 1 for NULL */
/* Splits [0, n) into chunks run on the workers and the caller; returns when
 * all are done. Safe to call from several threads at once (callers that find
 * the pool busy run their range inline). NULL pool or n small: inline. */
void ox_threadpool_parallel_for(OxThreadPool* p, size_t n,
                                void (*fn)(void* user, size_t begin, size_t end), void* user);

#endif
