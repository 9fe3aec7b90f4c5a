/* cuda_dnn_graph.h — forward convolutions through cuDNN's graph ("backend")
 * API: an operation graph per node and input shape, finalized once into an
 * execution plan that each run executes with a fresh variant pack. */
#ifndef ONYX_CUDA_DNN_GRAPH_H
#define ONYX_CUDA_DNN_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include <cudnn.h>

/* What one plan computes: y = act(conv(x, w) [+ z] [+ b]) over float32 NCHW
 * (or NCDHW) tensors, packed; a 1-D convolution arrives promoted to 2-D. */
typedef struct DnnGraphSpec {
  int rank; /* 4 or 5 */
  int64_t x[5], w[5], y[5];
  int sp; /* spatial dims: rank - 2 */
  int64_t pad[3], stride[3], dil[3];
  bool z;    /* add a residual of y's shape */
  bool bias; /* add b ([1, C, 1, 1]) */
  bool relu; /* then max(., 0) */
  /* Engines allowed: with tf32 false, none with the numerical notes
   * TENSOR_CORE, DOWN_CONVERT_INPUTS or REDUCED_PRECISION_REDUCTION (full
   * float32 FMA math only); with no_fft_winograd, none with FFT or WINOGRAD
   * notes either (exact GEMM-like summation). */
  bool tf32;
  bool no_fft_winograd;
} DnnGraphSpec;

typedef struct DnnGraphPlan DnnGraphPlan;

/* Builds the operation graph of s, asks the heuristics (CUDNN_HEUR_MODE_A)
 * for engine configs and finalizes the first allowed one that finalizes.
 * On failure *out is NULL, nothing is left allocated, and *what names the
 * step that failed (a static string). */
cudnnStatus_t dnn_graph_build(cudnnHandle_t h, const DnnGraphSpec* s, DnnGraphPlan** out,
                              const char** what);
/* The plan's workspace in bytes. */
size_t dnn_graph_workspace(const DnnGraphPlan* p);
/* The global index of the plan's engine (-1 where cuDNN did not say). */
int64_t dnn_graph_engine(const DnnGraphPlan* p);
/* Queues the plan on h's stream: a variant pack of the data pointers (b and
 * z ignored where the spec has none) and ws (dnn_graph_workspace bytes). */
cudnnStatus_t dnn_graph_execute(cudnnHandle_t h, const DnnGraphPlan* p, const void* x,
                                const void* w, const void* b, const void* z, void* y, void* ws);
/* Whether every pointer dnn_graph_execute would pass meets the byte alignment
 * the plan's tensors were declared with. */
bool dnn_graph_aligned(const void* x, const void* w, const void* b, const void* z, const void* y);
void dnn_graph_free(DnnGraphPlan* p);

#endif
