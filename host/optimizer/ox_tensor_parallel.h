/* ox_tensor_parallel.h — Megatron-style tensor parallelism of a resolved
 * graph for one rank (opt_tensor_parallel.c; docs/distributed.md, "Tensor
 * parallelism"). */
#ifndef OX_TENSOR_PARALLEL_H
#define OX_TENSOR_PARALLEL_H

#include "ox_graph.h"

/* Rewrites g, resolved, for rank `rank` of `size`: each region that starts
 * at a MatMul by a constant [K, M] (column-parallel: the rank keeps its 1/size
 * of the columns, per block when a Split cuts the output into equal parts,
 * as a packed QKV projection), runs through ops that keep a sharded axis
 * (element-wise ops, Split, Reshape, Transpose, Softmax, batched MatMul over
 * the sharded axis) and ends at MatMuls by constants reading the sharded last
 * axis (row-parallel: the rank keeps its rows; an AllReduce(sum) of
 * com.onyx.collective follows each) is sharded; anything else stays whole.
 * Constants the region reads (biases, Reshape shapes, Split sizes) are
 * sliced or rescaled; a bias added after a row-parallel product is added
 * once, after the AllReduce. The rewritten nodes name "tensor_parallel" as
 * their origin (explain). *report (malloc'd; may be NULL on OOM) says what
 * was sharded. The graph must be sorted and resolved again afterwards.
 * size 1: nothing changes. */
OnyxStatus* ox_tensor_parallel(OxGraph* g, int rank, int size, char** report);

#endif
