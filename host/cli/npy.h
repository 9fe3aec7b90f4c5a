/* npy.h — NumPy .npy files: reading (format versions 1.0, 2.0 and 3.0) and
 * writing (version 1.0).
 *
 * Only C-order arrays of little-endian float32 ('<f4'), float64 ('<f8'),
 * int64 ('<i8'), int32 ('<i4'), uint8 ('|u1') and bool ('|b1') are read;
 * anything else (Fortran order, big-endian, other dtypes, a malformed
 * header, data shorter or longer than the shape says, a shape whose size
 * overflows) is refused with a message naming the file and what is wrong.
 * The code depends on the C library alone, so tests link it directly. */
#ifndef ONYX_CLI_NPY_H
#define ONYX_CLI_NPY_H

#include <stddef.h>
#include <stdint.h>

typedef enum NpyType {
  NPY_FLOAT32,
  NPY_FLOAT64,
  NPY_INT64,
  NPY_INT32,
  NPY_UINT8,
  NPY_BOOL,
} NpyType;

enum { NPY_MAX_RANK = 32 };

typedef struct NpyArray {
  NpyType type;
  size_t rank;
  int64_t dims[NPY_MAX_RANK];
  size_t count;     /* elements: the product of dims (1 for rank 0) */
  size_t elem_size; /* bytes per element */
  void* data;       /* count * elem_size bytes, malloc'ed (never NULL after a load) */
} NpyArray;

/* Bytes per element of t. */
size_t npy_elem_size(NpyType t);
/* The dtype string of t ("<f4", ...). */
const char* npy_descr(NpyType t);

/* Parses a whole .npy file held in buf[0..len). `name` names it in errors.
 * On success fills *out (release with npy_free) and returns 0; on error
 * writes a message to err[0..cap) and returns -1 with *out empty. */
int npy_parse(const void* buf, size_t len, const char* name, NpyArray* out, char* err, size_t cap);
/* Reads the file at path and parses it (npy_parse). */
int npy_load(const char* path, NpyArray* out, char* err, size_t cap);
/* Writes a C-order array of `rank` dims to path. Returns 0, or -1 with a message. */
int npy_save(const char* path, NpyType type, const int64_t* dims, size_t rank, const void* data,
             char* err, size_t cap);
void npy_free(NpyArray* a);

#endif /* ONYX_CLI_NPY_H */
