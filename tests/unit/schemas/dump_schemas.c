/* dump_schemas.c — prints the built-in schema table in a line format that
 * compare_onnx.py checks against the onnx Python package's schemas. */
#include <stdio.h>
#include <string.h>

#include "schema_internal.h"

static const char* const attr_types[] = {
    "UNDEFINED",      "FLOAT",      "INT",        "STRING",  "TENSOR", "GRAPH",
    "FLOATS",         "INTS",       "STRINGS",    "TENSORS", "GRAPHS", "SPARSE_TENSOR",
    "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};

static void formals(char tag, const OxFormal* f, size_t n) {
  static const char opt[] = {'S', 'O', 'V'};
  for (size_t i = 0; i < n; i++)
    printf("%c %s %s %c\n", tag, f[i].name, f[i].tc, opt[f[i].option]);
}

int main(void) {
  const OxSchemaRegistry* r = ox_schemas_builtin();
  for (size_t k = 0; k < r->count; k++) {
    const OxSchema* s = r->sorted[k];
    if (s->domain && *s->domain && strcmp(s->domain, "ai.onnx")) continue; /* ai.onnx only */
    printf("S %s %d\n", s->op_type, (int)s->since_version);
    formals('I', s->inputs, s->n_inputs);
    formals('O', s->outputs, s->n_outputs);
    for (size_t i = 0; i < s->n_constraints; i++) {
      printf("T %s", s->constraints[i].name);
      if (s->constraints[i].allowed & (OX_T_SEQ | OX_T_OPTIONAL | OX_T_MAP | OX_T_SPARSE)) {
        printf(" ?\n"); /* container types: the mask is lossy, not compared */
        continue;
      }
      for (int t = 1; t < ONYX_ELEM_TYPE_COUNT; t++)
        if (s->constraints[i].allowed & OX_T(t)) printf(" %s", ox_onnx_type_name((OnyxElemType)t));
      printf("\n");
    }
    for (size_t i = 0; i < s->n_attrs; i++) {
      const OxAttrSpec* a = &s->attrs[i];
      printf("A %s %s %d", a->name, attr_types[a->type], a->required);
      if (a->has_default && a->type == ONYX_ATTR_INT) printf(" %lld", (long long)a->def_i);
      if (a->has_default && a->type == ONYX_ATTR_FLOAT) printf(" %.9g", a->def_f);
      if (a->has_default && a->type == ONYX_ATTR_STRING) printf(" %s", a->def_s);
      printf("\n");
    }
  }
  return 0;
}
