# gpu-common.cmake — the sources shared by the CUDA and ROCm providers
# (included by providers/cuda and providers/rocm; this folder builds nothing
# by itself).
#
#   ONYX_GPU_COMMON_DIR        this folder (include it)
#   ONYX_GPU_COMMON_C_SOURCES  the host side, plain C: provider table,
#                              options, EP, memory, copies, streams, kernels'
#                              shape logic; compiled by the C compiler with the
#                              project's warnings and sanitizers
#   ONYX_GPU_COMMON_DEVICE_SOURCES  the device side in the CUDA dialect:
#                              nvcc compiles it as is, hipcc through
#                              gpu_vendor.h (ONYX_GPU_HIP)
#   ONYX_GPU_COMMON_EMU_SOURCES  a host emulation of the device side (tests)
set(ONYX_GPU_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})
set(ONYX_GPU_COMMON_C_SOURCES
  ${ONYX_GPU_COMMON_DIR}/gpu_provider.c
  ${ONYX_GPU_COMMON_DIR}/gpu_ops.c
  ${ONYX_GPU_COMMON_DIR}/gpu_grad_ops.c
  ${ONYX_GPU_COMMON_DIR}/gpu_norm_pool_ops.c
  ${ONYX_GPU_COMMON_DIR}/gpu_meta_ops.c
  ${ONYX_GPU_COMMON_DIR}/gpu_attention.c
  ${ONYX_GPU_COMMON_DIR}/gpu_fused.c)
set(ONYX_GPU_COMMON_DEVICE_SOURCES
  ${ONYX_GPU_COMMON_DIR}/gpu_rt.cu
  ${ONYX_GPU_COMMON_DIR}/gpu_kernels.cu
  ${ONYX_GPU_COMMON_DIR}/gpu_grad.cu
  ${ONYX_GPU_COMMON_DIR}/gpu_attention.cu
  ${ONYX_GPU_COMMON_DIR}/gpu_fused.cu)
# The host emulation of the device side, for the test-only provider "gpuemu"
# (tests/unit/gpu): plain C, no GPU toolchain needed.
set(ONYX_GPU_COMMON_EMU_SOURCES ${ONYX_GPU_COMMON_DIR}/gpu_emu.c
  ${ONYX_GPU_COMMON_DIR}/gpu_emu_graph.c
  ${ONYX_GPU_COMMON_DIR}/gpu_emu_event.c
  ${ONYX_GPU_COMMON_DIR}/gpu_emu_grad.c
  ${ONYX_GPU_COMMON_DIR}/gpu_emu_attention.c
  ${ONYX_GPU_COMMON_DIR}/gpu_emu_fused.c)
set(ONYX_GPU_COMMON_HEADERS
  ${ONYX_GPU_COMMON_DIR}/gpu_kernels_body.h
  ${ONYX_GPU_COMMON_DIR}/gpu_grad_body.h
  ${ONYX_GPU_COMMON_DIR}/gpu_attention_body.h
  ${ONYX_GPU_COMMON_DIR}/gpu_fused_body.h
  ${ONYX_GPU_COMMON_DIR}/gpu_fused.h
  ${ONYX_GPU_COMMON_DIR}/gpu_attention.h
  ${ONYX_GPU_COMMON_DIR}/gpu_grad.h
  ${ONYX_GPU_COMMON_DIR}/gpu_grad_ops.h
  ${ONYX_GPU_COMMON_DIR}/gpu_ep.h
  ${ONYX_GPU_COMMON_DIR}/gpu_rt.h
  ${ONYX_GPU_COMMON_DIR}/gpu_kernels.h
  ${ONYX_GPU_COMMON_DIR}/gpu_vendor.h)

