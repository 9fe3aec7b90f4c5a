/* abi_layout.h — the layout tables abi_layout.c records, once per header
 * set: abi_*_v1_0 from the frozen ABI 1.0 headers, abi_*_current from
 * sdk/include. */
#ifndef ABI_LAYOUT_H
#define ABI_LAYOUT_H

#include <stddef.h>

typedef struct AbiField {
  const char* type;
  const char* field;
  size_t offset;
  size_t size;
} AbiField;

typedef struct AbiStruct {
  const char* type;
  size_t size;                   /* sizeof in this header set */
  size_t pinned;                 /* its ABI 1.0 size */
  int grows;                     /* 0: a frozen value type */
  unsigned abi_major, abi_minor; /* of this header set */
} AbiStruct;

extern const AbiField abi_fields_v1_0[];
extern const AbiField abi_fields_current[];
extern const AbiStruct abi_structs_v1_0[];
extern const AbiStruct abi_structs_current[];

#endif
