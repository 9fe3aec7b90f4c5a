/* ox_finite_check.h — the small ONNX model with which a training session
 * checks, on the device that holds them, whether accumulated gradients hold
 * NaN or Inf (finite_check.c), so that the check needs no copy of the
 * gradients to host memory. */
#ifndef OX_FINITE_CHECK_H
#define OX_FINITE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include "onyx/onyx.h"

/* Serializes a ModelProto (opset 13) with inputs "zero" (a float32 scalar)
 * and "g0".."g<n-1>" (float32, tensor i of rank ranks[i] and dims dims[i]),
 * and one output "bad", a float32 scalar: the sum over i of
 * ReduceSum(g_i * zero). Fed zero = 0, "bad" is exactly 0 when every element
 * is finite and NaN otherwise (0 * Inf and 0 * NaN are NaN, and no sum of
 * zeros can overflow). n >= 1. *bytes is malloc'd (the caller frees it). */
OnyxStatus* ox_finite_check_model(size_t n, const int64_t* const* dims, const size_t* ranks,
                                  void** bytes, size_t* len);

#endif
