/* nvtx_inject.h — what the test NVTX tool (nvtx_inject.c) records. */
#ifndef NVTX_INJECT_H
#define NVTX_INJECT_H

#include <stddef.h>
#include <stdint.h>

typedef enum NvtxInjectKind {
  NVTX_INJECT_DOMAIN, /* nvtxDomainCreateA: message is the domain's name */
  NVTX_INJECT_PUSH,   /* nvtxDomainRangePushEx */
  NVTX_INJECT_POP,    /* nvtxDomainRangePop: message is empty */
} NvtxInjectKind;

typedef struct NvtxInjectEvent {
  NvtxInjectKind kind;
  long tid; /* the calling thread (gettid) */
  uint32_t category, color;
  char domain[64];
  char message[256];
} NvtxInjectEvent;

/* Copies up to `cap` events (oldest first) into out and returns how many
 * there are; *inits: how many times NVTX initialized the tool. */
typedef size_t (*NvtxInjectEventsFn)(NvtxInjectEvent* out, size_t cap, size_t* inits);
/* Forgets the events recorded so far. */
typedef void (*NvtxInjectClearFn)(void);

#endif
