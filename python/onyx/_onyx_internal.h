/* _onyx_internal.h — what the C files of the onyx._onyx extension share.
 *
 * _onyx.c holds the module, the session types and the NumPy conversions;
 * _onyx_training.c (the training API) and _onyx_values.c (OrtValue, IO
 * binding) add their types to the module through the *_add functions below.
 * Every file includes this header before any NumPy header, so that the
 * NumPy C API table imported once in PyInit__onyx is shared by all of them.
 */
#ifndef ONYX_PY_INTERNAL_H
#define ONYX_PY_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API  NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL oxpy_ARRAY_API
#ifndef OXPY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "onyx/onyx.h"

/* Raises the status as the OnyxError subclass registered for its code and
 * releases it; returns NULL. */
PyObject* oxpy_raise_status(OnyxStatus* st);
/* Raises the class registered for `code` with `msg`; returns NULL. */
PyObject* oxpy_raise_message(OnyxStatusCode code, const char* msg);
/* A new value holding a copy of an array-like (`name` names it in errors);
 * NULL with a Python error set. */
OnyxValue* oxpy_feed_value(PyObject* obj, const char* name);
/* A NumPy array of the value, which it takes: the array shares host memory
 * and keeps the value alive as its base. */
PyObject* oxpy_output_array(OnyxValue* v, const char* name);
/* The NumPy type of an element type (-1: none) and the element type of a
 * NumPy dtype (ONYX_ELEM_UNDEFINED: none). */
int oxpy_npy_type_of(OnyxElemType t);
OnyxElemType oxpy_elem_type_of(const PyArray_Descr* d);
/* The open session of an _onyx.Session; NULL with an error raised when the
 * object is not one or the session is closed. oxpy_session_enter marks a run
 * in flight (so that close() waits for it) and oxpy_session_leave ends it;
 * both with the GIL held. */
OnyxSession* oxpy_session_enter(PyObject* obj);
void oxpy_session_leave(PyObject* obj);
/* The run options of an _onyx.RunOptions or None (NULL); -1 with TypeError. */
int oxpy_run_options(PyObject* obj, const OnyxRunOptions** out);
/* The options of an _onyx.Options or None (NULL); -1 with TypeError. */
int oxpy_options(PyObject* obj, const OnyxSessionOptions** out);

int oxpy_training_add(PyObject* module);
int oxpy_values_add(PyObject* module);

#endif /* ONYX_PY_INTERNAL_H */
