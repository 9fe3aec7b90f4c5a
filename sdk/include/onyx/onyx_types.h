/* onyx_types.h — types shared by the application API (onyx.h) and the
 * provider ABI (onyx_ep.h).
 *
 * Everything here is plain data: no function is declared, so a provider that
 * includes this header links against nothing. Enum values are part of the ABI
 * and never change meaning; new values are only ever appended.
 */
#ifndef ONYX_TYPES_H
#define ONYX_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version of these headers. A host refuses a provider of another major;
 * within a major, both sides read a struct only as far as its struct_size. */
#define ONYX_ABI_VERSION_MAJOR 1
#define ONYX_ABI_VERSION_MINOR 1

/* Symbols visible from a shared library built with -fvisibility=hidden. */
#if defined(__GNUC__)
#define ONYX_EXPORT __attribute__((visibility("default")))
#else
#define ONYX_EXPORT
#endif

/* A status is a pointer: NULL means success. A non-NULL status is an error
 * carrying a code and a message; whoever receives it owns it and releases it
 * (onyx_status_release in onyx.h, host->status_release in onyx_ep.h). */
typedef struct OnyxStatus OnyxStatus;

typedef enum OnyxStatusCode {
  ONYX_OK = 0,
  ONYX_FAIL = 1,             /* anything not covered below */
  ONYX_INVALID_ARGUMENT = 2, /* a caller passed something wrong (bad feed, bad option value) */
  ONYX_INVALID_MODEL = 3,    /* the model file or graph is malformed */
  ONYX_NOT_FOUND = 4,        /* a file, library, name or value that does not exist */
  ONYX_NOT_IMPLEMENTED = 5,  /* a valid request nobody can serve (unknown op, no kernel) */
  ONYX_NO_DEVICE = 6,        /* a provider found no device */
  ONYX_ABI_MISMATCH = 7,     /* a provider built against an incompatible ABI */
  ONYX_OUT_OF_MEMORY = 8,
  ONYX_RUNTIME_ERROR = 9, /* a kernel failed while running */
  ONYX_CANCELLED = 10,    /* a run was terminated through its run options */
  ONYX_INVALID_CONFIG = 11,
  ONYX_PLACEMENT_ERROR = 12, /* partitioning failed: bad claim, fallback denied, bad pin */
  ONYX_LIMIT_EXCEEDED = 13,  /* a resource limit of the session options was hit */
} OnyxStatusCode;

/* Element types. Values equal ONNX's TensorProto.DataType numbers so that a
 * model's type field converts by a cast. */
typedef enum OnyxElemType {
  ONYX_ELEM_UNDEFINED = 0,
  ONYX_ELEM_FLOAT32 = 1,
  ONYX_ELEM_UINT8 = 2,
  ONYX_ELEM_INT8 = 3,
  ONYX_ELEM_UINT16 = 4,
  ONYX_ELEM_INT16 = 5,
  ONYX_ELEM_INT32 = 6,
  ONYX_ELEM_INT64 = 7,
  /* data is an array of `char*`, NUL-terminated, owned by the tensor; a
   * string may hold NUL bytes: its byte length is tensor_string_len (ABI
   * 1.1) or onyx_tensor_string_len */
  ONYX_ELEM_STRING = 8,
  ONYX_ELEM_BOOL = 9, /* one byte per element, 0 or 1 */
  ONYX_ELEM_FLOAT16 = 10,
  ONYX_ELEM_FLOAT64 = 11,
  ONYX_ELEM_UINT32 = 12,
  ONYX_ELEM_UINT64 = 13,
  ONYX_ELEM_COMPLEX64 = 14,
  ONYX_ELEM_COMPLEX128 = 15,
  ONYX_ELEM_BFLOAT16 = 16,
  ONYX_ELEM_FLOAT8E4M3FN = 17,
  ONYX_ELEM_FLOAT8E4M3FNUZ = 18,
  ONYX_ELEM_FLOAT8E5M2 = 19,
  ONYX_ELEM_FLOAT8E5M2FNUZ = 20,
  ONYX_ELEM_UINT4 = 21,
  ONYX_ELEM_INT4 = 22,
  ONYX_ELEM_FLOAT4E2M1 = 23,
  ONYX_ELEM_FLOAT8E8M0 = 24,
  ONYX_ELEM_UINT2 = 25,
  ONYX_ELEM_INT2 = 26,
  ONYX_ELEM_TYPE_COUNT = 27 /* one past the largest value; grows with the enum */
} OnyxElemType;

typedef enum OnyxLogSeverity {
  ONYX_LOG_VERBOSE = 0,
  ONYX_LOG_INFO = 1,
  ONYX_LOG_WARNING = 2,
  ONYX_LOG_ERROR = 3,
  ONYX_LOG_FATAL = 4,
} OnyxLogSeverity;

/* What kind of silicon a memory lives on. Anything of kind CPU is addressable
 * by host code, whichever provider allocated it. */
typedef enum OnyxDeviceKind {
  ONYX_DEVICE_CPU = 0,
  ONYX_DEVICE_GPU = 1,
  ONYX_DEVICE_NPU = 2,
  ONYX_DEVICE_OTHER = 3,
} OnyxDeviceKind;

/* Which of a provider's memories a buffer is in. */
typedef enum OnyxMemType {
  ONYX_MEM_DEFAULT = 0,         /* the device's own memory */
  ONYX_MEM_HOST_ACCESSIBLE = 1, /* host memory the device reads directly (e.g. pinned) */
  ONYX_MEM_READ_ONLY = 2,       /* weights: written once at session creation */
} OnyxMemType;

/* Identity of a memory. Two buffers live in the same memory exactly when
 * kind, vendor_id, device_id and mem_type are equal; alignment is the minimum
 * alignment of every buffer the memory's allocator returns.
 *
 * This is a value type, frozen for ABI major 1: it never grows (a later need
 * gets a new type), which is why it has no struct_size. */
typedef struct OnyxMemoryDevice {
  int32_t kind;       /* OnyxDeviceKind */
  uint32_t vendor_id; /* PCI vendor id, or 0 for the host CPU */
  int32_t device_id;  /* ordinal among the vendor's devices of that kind */
  int32_t mem_type;   /* OnyxMemType */
  uint32_t alignment; /* bytes, a power of two */
  uint32_t reserved;  /* zero */
} OnyxMemoryDevice;

/* Attribute types, numbered as ONNX's AttributeProto.AttributeType. */
typedef enum OnyxAttrType {
  ONYX_ATTR_UNDEFINED = 0,
  ONYX_ATTR_FLOAT = 1,
  ONYX_ATTR_INT = 2,
  ONYX_ATTR_STRING = 3,
  ONYX_ATTR_TENSOR = 4,
  ONYX_ATTR_GRAPH = 5,
  ONYX_ATTR_FLOATS = 6,
  ONYX_ATTR_INTS = 7,
  ONYX_ATTR_STRINGS = 8,
  ONYX_ATTR_TENSORS = 9,
  ONYX_ATTR_GRAPHS = 10,
  ONYX_ATTR_SPARSE_TENSOR = 11,
  ONYX_ATTR_SPARSE_TENSORS = 12,
  ONYX_ATTR_TYPE_PROTO = 13,
  ONYX_ATTR_TYPE_PROTOS = 14,
} OnyxAttrType;

/* Unknown dimension in a shape read from a graph (a symbolic or missing dim). */
#define ONYX_DIM_UNKNOWN (-1)

/* Opaque handles. Providers and applications only ever hold pointers to them
 * and read them through functions; their layout is the host's business and
 * changes without notice. */
typedef struct OnyxTensor OnyxTensor;

/* Reductions of the collectives (onyx_distributed.h, ONYX_EXT_COLLECTIVES in
 * onyx_ep.h). AVG is SUM divided by the group size (integers: truncated
 * toward zero). */
typedef enum OnyxReduceOp {
  ONYX_REDUCE_SUM = 0,
  ONYX_REDUCE_AVG = 1,
  ONYX_REDUCE_MAX = 2,
  ONYX_REDUCE_MIN = 3,
} OnyxReduceOp;

#ifdef __cplusplus
}
#endif
#endif /* ONYX_TYPES_H */
