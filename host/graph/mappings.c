/* mappings.c — external-data file mappings owned by a graph. */
#include <stdlib.h>
#include <sys/mman.h>
#include "ox_graph.h"

void ox_graph_unmap_all(OxGraph* g) {
  for (size_t i = 0; i < g->n_mappings; i++)
    if (g->mappings[i].addr) munmap(g->mappings[i].addr, g->mappings[i].len);
  free(g->mappings);
  g->mappings = NULL;
  g->n_mappings = 0;
}
