/* dnnl_ep.h — internals of the oneDNN provider (libonyx_ep_onednn.so).
 *
 * A compile-style provider: get_capability (dnnl_capability.c) claims groups
 * — an anchor (Conv, MatMul, Gemm, pooling, Softmax, LayerNormalization, an
 * element-wise or binary op) with the nodes it absorbs (BatchNormalization
 * folded into a Conv, element-wise and residual-Add post-ops), merging
 * consecutive Conv/pooling groups into chains — and compile (dnnl_compile.c)
 * turns each group into a sequence of stages of oneDNN primitives built per
 * input shape, cached, with constant weights reordered once; save_compiled
 * and load_compiled keep a group's static-shape plan weights in the
 * session's compiled-group cache. Gradient ops (com.onyx.training) run on
 * oneDNN's backward primitives, one node per group (dnnl_backward.c). Host memory only: no
 * allocator, no copies with the CPU provider. Built against the SDK headers and oneDNN's C API. */
#ifndef DNNL_EP_H
#define DNNL_EP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onyx/onyx_ep.h"

#define DNNL_EP_NAME  "onednn"
#define DNNL_MAX_POST 8
#define DNNL_MAX_RANK 6
/* A chain (several groups compiled as one): at most this many stages and
 * variable (non-constant) inputs. */
#define DNNL_MAX_STAGES   128
#define DNNL_MAX_CHAIN_IN 8

extern const OnyxHostApi* dnnl_host;

/* Session options of one EP instance. */
/* Which convolution algorithm a Conv group asks oneDNN for. */
typedef enum DnnlConvAlgorithm {
  DNNL_CONV_AUTO = 0, /* Winograd where oneDNN has it for the shape, else direct */
  DNNL_CONV_DIRECT    /* always direct */
} DnnlConvAlgorithm;

typedef struct DnnlOptions {
  bool fuse;    /* claim post-op chains (default true) */
  bool blocked; /* let primitives pick blocked layouts inside a group (default true) */
  DnnlConvAlgorithm conv_algorithm; /* default DNNL_CONV_AUTO */
  bool chain; /* merge consecutive Conv/pooling groups into one multi-stage group (default true) */
} DnnlOptions;

typedef struct DnnlEp {
  OnyxThreadPool* pool;
  int threads; /* the session's intra-op pool size: oneDNN's team size */
  DnnlOptions opt;
  void* engine; /* dnnl_engine_t */
} DnnlEp;

/* What a group computes, decided at capability time and rebuilt at compile
 * time from the group's nodes. */
typedef enum DnnlKind {
  DK_CONV,
  DK_MATMUL, /* MatMul or Gemm */
  DK_POOL,
  DK_SOFTMAX,
  DK_LAYERNORM,
  DK_ELTWISE,
  DK_BINARY,
} DnnlKind;

typedef struct DnnlPost {
  bool binary; /* binary add of another tensor (else eltwise) */
  int alg;     /* dnnl_alg_kind_t */
  float alpha, beta;
  const OnyxNode* node;
  const OnyxValueInfo* other; /* binary: the other operand */
} DnnlPost;

/* The anchor and the nodes fused into it, in order. */
typedef struct DnnlPattern {
  DnnlKind kind;
  const OnyxNode* anchor;
  /* An activation the anchor carries itself (the optimizer's com.onyx.FusedConv):
   * the first post-op, before the absorbed ones. */
  bool anchor_act;
  int act_alg;
  float act_alpha, act_beta;
  const OnyxNode* bn;        /* a BatchNormalization folded into the Conv */
  const OnyxValueInfo* bias; /* a constant bias absorbed from an Add (MatMul) */
  const OnyxNode* bias_node; /* that Add */
  DnnlPost post[DNNL_MAX_POST];
  size_t n_post;
  const OnyxValueInfo* out; /* the value the group produces */
} DnnlPattern;

/* Matches a group starting at node `anchor`; false with *why when the anchor
 * cannot be taken. `view` is the capability view (for consumer counts). */
bool dnnl_match(const DnnlEp* ep, const OnyxGraphView* view, const OnyxNode* anchor, DnnlPattern* p,
                const char** why);

/* The nodes of a matched pattern in order (anchor, BatchNormalization, bias
 * Add, post-ops); returns their count (at most DNNL_PATTERN_NODES). */
#define DNNL_PATTERN_NODES (3 + DNNL_MAX_POST)
size_t dnnl_pattern_nodes(const DnnlPattern* p, const OnyxNode** nodes);
/* Cuts a pattern to its first `keep` nodes (at least the anchor). */
void dnnl_pattern_keep(DnnlPattern* p, size_t keep);

/* The eltwise algorithm for a unary op node; false when not mapped. */
bool dnnl_eltwise_of(const OnyxNode* n, int* alg, float* alpha, float* beta, const char** why);

OnyxStatus* dnnl_get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b);
OnyxStatus* dnnl_compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out);

/* The compiled-group cache (dnnl_compile.c). The payload an entry holds, in
 * the host's byte order:
 *   header (DNNL_CACHE_HEADER_BYTES): magic, payload format, oneDNN's version
 *   (major, minor, patch: u32 each) and commit hash (NUL-padded), the
 *   effective CPU ISA (dnnl_cpu_isa_t: the blocked layouts were chosen for
 *   it), sizeof(dnnl_memory_desc_t), the provider options that change the
 *   plan (bit 0 fuse, 1 blocked_layout, 2 chain, 3.. conv_algorithm), the
 *   number of stages, the number of plans (0, or 1 for static input shapes);
 *   then per plan: the variable inputs' shapes (int64
 *   [DNNL_MAX_CHAIN_IN][DNNL_MAX_RANK + 1]) and per stage a u32 flag, and
 *   when set the weights' dnnl_memory_desc_t, their byte count (u64) and the
 *   weights in that layout.
 * load_compiled refuses an entry of another format, oneDNN build, ISA or
 * options, naming both sides. */
#define DNNL_CACHE_MAGIC        "ONXDNNL\0"
#define DNNL_CACHE_FORMAT       1u
#define DNNL_CACHE_OFF_FORMAT   8
#define DNNL_CACHE_OFF_VERSION  12 /* major, minor, patch */
#define DNNL_CACHE_OFF_HASH     24
#define DNNL_CACHE_HASH_BYTES   40
#define DNNL_CACHE_OFF_ISA      64
#define DNNL_CACHE_OFF_MD_SIZE  68
#define DNNL_CACHE_OFF_OPTIONS  72
#define DNNL_CACHE_OFF_STAGES   76
#define DNNL_CACHE_OFF_PLANS    80
#define DNNL_CACHE_HEADER_BYTES 84
OnyxStatus* dnnl_save_compiled(OnyxEp* ep, const OnyxGraphView* group,
                               const OnyxCompiledKernel* kernel, OnyxBlobWriter* w);
OnyxStatus* dnnl_load_compiled(OnyxEp* ep, const OnyxGraphView* group, const void* data,
                               size_t bytes, OnyxCompiledKernel* out);
/* "avx2", "avx512_core", ... for a dnnl_cpu_isa_t; "other" for the rest. */
const char* dnnl_isa_name(int isa);

/* Gradient ops (com.onyx.training) on oneDNN's backward primitives
 * (dnnl_backward.c): each claimed node is a group of its own. */
bool dnnl_bwd_is(const OnyxNode* n); /* a node of the com.onyx.training domain */
/* Whether this provider takes gradient node n; false with *why when not. */
bool dnnl_bwd_match(const OnyxNode* n, const char** why);
/* Compiles a one-node gradient group; its kernel's compute is dnnl_bwd_compute. */
OnyxStatus* dnnl_bwd_compile(const DnnlEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out);
OnyxStatus* dnnl_bwd_compute(void* state, OnyxKernelContext* ctx);

/* A status naming the provider and (if not NULL) the node. */
OnyxStatus* dnnl_err(const OnyxNode* n, OnyxStatusCode code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A oneDNN status as an error: "oneDNN <what> failed: <status>". */
OnyxStatus* dnnl_fail(const OnyxNode* n, int status, const char* what);

#endif /* DNNL_EP_H */
