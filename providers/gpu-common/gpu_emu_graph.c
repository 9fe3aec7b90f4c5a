/* gpu_emu_graph.c — the graph calls of gpu_rt.h on the host emulation
 * (gpu_emu.c). The emulated kernels run when they are launched, so there is
 * nothing a capture could record: beginning one fails, and a provider with
 * run graphs on reports the capture as failed and runs node by node (or
 * fails where graphs are required), which the gpuemu tests check. The other
 * calls are never reached with a graph and fail the same way. */
#include "gpu_rt.h"

#define EMU_FAIL 1

int gpurt_stream_begin_capture(void* s) {
  (void)s;
  return EMU_FAIL;
}

int gpurt_stream_end_capture(void* s, void** graph) {
  (void)s;
  *graph = NULL;
  return EMU_FAIL;
}

int gpurt_graph_instantiate(void** exec, void* graph) {
  (void)graph;
  *exec = NULL;
  return EMU_FAIL;
}

int gpurt_graph_destroy(void* graph) {
  (void)graph;
  return 0;
}

int gpurt_graph_launch(void* exec, void* s) {
  (void)exec;
  (void)s;
  return EMU_FAIL;
}

int gpurt_graph_exec_destroy(void* exec) {
  (void)exec;
  return 0;
}
