/* _onyx.c — the CPython extension under the onyx package: thin types over
 * libonyx's application API (sdk/include/onyx/onyx.h). The onnxruntime-like
 * classes are written in Python on top of these (onyx/__init__.py).
 *
 *   _onyx.Options     OnyxSessionOptions
 *   _onyx.Session     OnyxSession: inputs/outputs info, run (GIL released)
 *   _onyx.RunOptions  OnyxRunOptions: tag, log severity, terminate
 *   _onyx.providers() the provider libraries and their devices
 *   _onyx.Value, IoBinding            (_onyx_values.c)
 *   _onyx.Checkpoint, TrainingSession (_onyx_training.c)
 *
 * Errors from the C API raise the subclass of OnyxError that
 * _onyx.set_error_classes registered for the status code, with the C message.
 */
#define OXPY_IMPORT_ARRAY
#include "_onyx_internal.h"

#include <stdint.h>
#include <string.h>

/* --- Errors ----------------------------------------------------------------------------- */

/* The exception class per OnyxStatusCode (set from Python), and the fallback. */
#define OX_PY_CODES 32
static PyObject* g_error_classes[OX_PY_CODES];
static PyObject* g_error_base;

static PyObject* error_class(OnyxStatusCode code) {
  if ((int)code >= 0 && (int)code < OX_PY_CODES && g_error_classes[code])
    return g_error_classes[code];
  return g_error_base ? g_error_base : PyExc_RuntimeError;
}

/* Raises the status as a Python exception and releases it; returns NULL. */
static PyObject* raise_status(OnyxStatus* st) {
  OnyxStatusCode code = onyx_status_code(st);
  PyObject* cls = error_class(code);
  const char* msg = onyx_status_message(st);
  PyObject* text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  PyObject* exc = text ? PyObject_CallFunctionObjArgs(cls, text, NULL) : NULL;
  Py_XDECREF(text);
  if (exc) {
    PyObject* name = PyUnicode_FromString(onyx_status_code_name(code));
    if (name) {
      PyObject_SetAttrString(exc, "code", name);
      Py_DECREF(name);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
  }
  onyx_status_release(st);
  return NULL;
}

/* Raises the class registered for `code` with a message of the binding. */
static PyObject* raise_code(OnyxStatusCode code, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  PyOS_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  PyObject* cls = error_class(code);
  PyObject* text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  PyObject* exc = text ? PyObject_CallFunctionObjArgs(cls, text, NULL) : NULL;
  Py_XDECREF(text);
  if (exc) {
    PyObject* name = PyUnicode_FromString(onyx_status_code_name(code));
    if (name) {
      PyObject_SetAttrString(exc, "code", name);
      Py_DECREF(name);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
  }
  return NULL;
}

static PyObject* py_set_error_classes(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* base = NULL;
  PyObject* map = NULL;
  if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &map)) return NULL;
  Py_XSETREF(g_error_base, Py_NewRef(base));
  PyObject* key = NULL;
  PyObject* value = NULL;
  Py_ssize_t pos = 0;
  while (PyDict_Next(map, &pos, &key, &value)) {
    long code = PyLong_AsLong(key);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (code < 0 || code >= OX_PY_CODES) {
      PyErr_Format(PyExc_ValueError, "status code %ld out of range", code);
      return NULL;
    }
    Py_XSETREF(g_error_classes[code], Py_NewRef(value));
  }
  Py_RETURN_NONE;
}

/* --- Element types ---------------------------------------------------------------------- */

/* The NumPy type of an element type; -1 when NumPy has none. */
static int npy_type_of(OnyxElemType t) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
    return NPY_FLOAT32;
  case ONYX_ELEM_UINT8:
    return NPY_UINT8;
  case ONYX_ELEM_INT8:
    return NPY_INT8;
  case ONYX_ELEM_UINT16:
    return NPY_UINT16;
  case ONYX_ELEM_INT16:
    return NPY_INT16;
  case ONYX_ELEM_INT32:
    return NPY_INT32;
  case ONYX_ELEM_INT64:
    return NPY_INT64;
  case ONYX_ELEM_BOOL:
    return NPY_BOOL;
  case ONYX_ELEM_FLOAT16:
    return NPY_FLOAT16;
  case ONYX_ELEM_FLOAT64:
    return NPY_FLOAT64;
  case ONYX_ELEM_UINT32:
    return NPY_UINT32;
  case ONYX_ELEM_UINT64:
    return NPY_UINT64;
  case ONYX_ELEM_COMPLEX64:
    return NPY_COMPLEX64;
  case ONYX_ELEM_COMPLEX128:
    return NPY_COMPLEX128;
  case ONYX_ELEM_STRING:
    return NPY_OBJECT;
  default:
    return -1;
  }
}

/* The element type of a NumPy dtype, by kind and size (so that int64 is
 * int64 whether NumPy calls it long or longlong); UNDEFINED when none. */
static OnyxElemType elem_type_of(const PyArray_Descr* d) {
  switch (d->kind) {
  case 'f':
    return d->elsize == 2   ? ONYX_ELEM_FLOAT16
           : d->elsize == 4 ? ONYX_ELEM_FLOAT32
           : d->elsize == 8 ? ONYX_ELEM_FLOAT64
                            : ONYX_ELEM_UNDEFINED;
  case 'i':
    return d->elsize == 1   ? ONYX_ELEM_INT8
           : d->elsize == 2 ? ONYX_ELEM_INT16
           : d->elsize == 4 ? ONYX_ELEM_INT32
           : d->elsize == 8 ? ONYX_ELEM_INT64
                            : ONYX_ELEM_UNDEFINED;
  case 'u':
    return d->elsize == 1   ? ONYX_ELEM_UINT8
           : d->elsize == 2 ? ONYX_ELEM_UINT16
           : d->elsize == 4 ? ONYX_ELEM_UINT32
           : d->elsize == 8 ? ONYX_ELEM_UINT64
                            : ONYX_ELEM_UNDEFINED;
  case 'b':
    return d->elsize == 1 ? ONYX_ELEM_BOOL : ONYX_ELEM_UNDEFINED;
  case 'c':
    return d->elsize == 8    ? ONYX_ELEM_COMPLEX64
           : d->elsize == 16 ? ONYX_ELEM_COMPLEX128
                             : ONYX_ELEM_UNDEFINED;
  case 'O':
  case 'U':
  case 'S':
    return ONYX_ELEM_STRING;
  default:
    return ONYX_ELEM_UNDEFINED;
  }
}

/* --- Options ---------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD OnyxSessionOptions* opts;
} OptionsObject;

static int options_init(OptionsObject* self, PyObject* args, PyObject* kw) {
  if (!PyArg_ParseTuple(args, ":Options") || (kw && PyDict_Size(kw) > 0)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Options() takes no arguments");
    return -1;
  }
  onyx_session_options_release(self->opts);
  self->opts = NULL;
  OnyxStatus* st = onyx_session_options_create(&self->opts);
  if (st) {
    raise_status(st);
    return -1;
  }
  return 0;
}

static void options_dealloc(OptionsObject* self) {
  onyx_session_options_release(self->opts);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* Returns None, or raises the status. */
static PyObject* status_result(OnyxStatus* st) {
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* options_set_threads(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return status_result(onyx_session_options_set_threads(self->opts, n));
}

static PyObject* options_set_optimization_level(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return status_result(
      onyx_session_options_set_optimization_level(self->opts, (OnyxOptimizationLevel)n));
}

static PyObject* options_set_log_severity(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  if (n < ONYX_LOG_VERBOSE || n > ONYX_LOG_FATAL)
    return raise_code(ONYX_INVALID_ARGUMENT, "log severity %d: expected 0 (verbose) to 4 (fatal)",
                      n);
  return status_result(onyx_session_options_set_log_severity(self->opts, (OnyxLogSeverity)n));
}

static PyObject* options_set_execution_order(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return status_result(onyx_session_options_set_execution_order(self->opts, (OnyxExecutionOrder)n));
}

static PyObject* options_set_deterministic(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "p", &n)) return NULL;
  return status_result(onyx_session_options_set_deterministic(self->opts, n));
}

static PyObject* options_set_memory_pattern(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "p", &n)) return NULL;
  return status_result(onyx_session_options_set_memory_pattern(self->opts, n));
}

static PyObject* options_set_profile(OptionsObject* self, PyObject* args) {
  const char* path = NULL;
  if (!PyArg_ParseTuple(args, "z", &path)) return NULL;
  return status_result(onyx_session_options_set_profile(self->opts, path));
}

static PyObject* options_load_config(OptionsObject* self, PyObject* args) {
  const char* path = NULL;
  if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
  return status_result(onyx_session_options_load_config(self->opts, path));
}

static PyObject* options_load_config_text(OptionsObject* self, PyObject* args) {
  const char* text = NULL;
  Py_ssize_t len = 0;
  const char* origin = NULL;
  if (!PyArg_ParseTuple(args, "s#s", &text, &len, &origin)) return NULL;
  return status_result(
      onyx_session_options_load_config_text(self->opts, text, (size_t)len, origin));
}

static PyObject* options_add_provider(OptionsObject* self, PyObject* args) {
  const char* name = NULL;
  const char* library = NULL;
  int device = 0;
  int required = 1;
  if (!PyArg_ParseTuple(args, "szip", &name, &library, &device, &required)) return NULL;
  return status_result(
      onyx_session_options_add_provider(self->opts, name, library, device, required));
}

static PyObject* options_set_provider_option(OptionsObject* self, PyObject* args) {
  const char* provider = NULL;
  const char* key = NULL;
  const char* value = NULL;
  if (!PyArg_ParseTuple(args, "sss", &provider, &key, &value)) return NULL;
  return status_result(onyx_session_options_set_provider_option(self->opts, provider, key, value));
}

static PyObject* options_set_no_implicit_cpu(OptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "p", &n)) return NULL;
  return status_result(onyx_session_options_set_no_implicit_cpu(self->opts, n));
}

static PyObject* options_add_pin(OptionsObject* self, PyObject* args) {
  const char* node = NULL;
  const char* op = NULL;
  const char* provider = NULL;
  if (!PyArg_ParseTuple(args, "zzs", &node, &op, &provider)) return NULL;
  return status_result(onyx_session_options_add_pin(self->opts, node, op, provider));
}

static PyMethodDef options_methods[] = {
    {"set_threads", (PyCFunction)options_set_threads, METH_VARARGS, "intra-op threads"},
    {"set_optimization_level", (PyCFunction)options_set_optimization_level, METH_VARARGS,
     "OnyxOptimizationLevel"},
    {"set_log_severity", (PyCFunction)options_set_log_severity, METH_VARARGS, "0..4"},
    {"set_execution_order", (PyCFunction)options_set_execution_order, METH_VARARGS,
     "0 default, 1 priority"},
    {"set_deterministic", (PyCFunction)options_set_deterministic, METH_VARARGS, "bool"},
    {"set_memory_pattern", (PyCFunction)options_set_memory_pattern, METH_VARARGS, "bool"},
    {"set_profile", (PyCFunction)options_set_profile, METH_VARARGS, "profile path or None"},
    {"load_config", (PyCFunction)options_load_config, METH_VARARGS, "JSON config file"},
    {"load_config_text", (PyCFunction)options_load_config_text, METH_VARARGS,
     "JSON config text, origin"},
    {"add_provider", (PyCFunction)options_add_provider, METH_VARARGS,
     "name, library or None, device, required"},
    {"set_provider_option", (PyCFunction)options_set_provider_option, METH_VARARGS,
     "provider, key, value"},
    {"set_no_implicit_cpu", (PyCFunction)options_set_no_implicit_cpu, METH_VARARGS, "bool"},
    {"add_pin", (PyCFunction)options_add_pin, METH_VARARGS, "node name, op type, provider"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject OptionsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.Options",
    .tp_basicsize = sizeof(OptionsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxSessionOptions",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)options_init,
    .tp_dealloc = (destructor)options_dealloc,
    .tp_methods = options_methods,
};

/* --- Run options ------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD OnyxRunOptions* ro;
} RunOptionsObject;

static int run_options_init(RunOptionsObject* self, PyObject* args, PyObject* kw) {
  if (!PyArg_ParseTuple(args, ":RunOptions") || (kw && PyDict_Size(kw) > 0)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "RunOptions() takes no arguments");
    return -1;
  }
  onyx_run_options_release(self->ro);
  self->ro = NULL;
  OnyxStatus* st = onyx_run_options_create(&self->ro);
  if (st) {
    raise_status(st);
    return -1;
  }
  return 0;
}

static void run_options_dealloc(RunOptionsObject* self) {
  onyx_run_options_release(self->ro);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* run_options_set_tag(RunOptionsObject* self, PyObject* args) {
  const char* tag = NULL;
  if (!PyArg_ParseTuple(args, "s", &tag)) return NULL;
  return status_result(onyx_run_options_set_tag(self->ro, tag));
}

static PyObject* run_options_set_log_severity(RunOptionsObject* self, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  if (n < ONYX_LOG_VERBOSE || n > ONYX_LOG_FATAL)
    return raise_code(ONYX_INVALID_ARGUMENT, "log severity %d: expected 0 (verbose) to 4 (fatal)",
                      n);
  return status_result(onyx_run_options_set_log_severity(self->ro, (OnyxLogSeverity)n));
}

static PyObject* run_options_terminate(RunOptionsObject* self, PyObject* noargs) {
  (void)noargs;
  onyx_run_options_terminate(self->ro);
  Py_RETURN_NONE;
}

static PyMethodDef run_options_methods[] = {
    {"set_tag", (PyCFunction)run_options_set_tag, METH_VARARGS, "run tag"},
    {"set_log_severity", (PyCFunction)run_options_set_log_severity, METH_VARARGS, "0..4"},
    {"terminate", (PyCFunction)run_options_terminate, METH_NOARGS,
     "stop runs using these options at the next node boundary"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RunOptionsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.RunOptions",
    .tp_basicsize = sizeof(RunOptionsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxRunOptions",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)run_options_init,
    .tp_dealloc = (destructor)run_options_dealloc,
    .tp_methods = run_options_methods,
};

/* --- Session ---------------------------------------------------------------------------- */

/* `active` counts runs in flight (each with the GIL released); close() with
 * runs in flight marks the session closed and the last run to finish
 * releases it. Both fields are read and written with the GIL held. */
typedef struct {
  PyObject_HEAD OnyxSession* sess;
  Py_ssize_t active;
  int closed;
} SessionObject;

static int session_init(SessionObject* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"model", "options", NULL};
  PyObject* model = NULL;
  PyObject* options = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &model, &options)) return -1;
  if (self->sess) {
    PyErr_SetString(PyExc_RuntimeError, "Session already initialized");
    return -1;
  }
  const OnyxSessionOptions* opts = NULL;
  if (options != Py_None) {
    if (!PyObject_TypeCheck(options, &OptionsType)) {
      PyErr_SetString(PyExc_TypeError, "options must be an onyx._onyx.Options or None");
      return -1;
    }
    opts = ((OptionsObject*)options)->opts;
  }
  OnyxStatus* st = NULL;
  OnyxSession* sess = NULL;
  if (PyBytes_Check(model) || PyByteArray_Check(model) || PyObject_CheckBuffer(model)) {
    Py_buffer view;
    if (PyObject_GetBuffer(model, &view, PyBUF_SIMPLE) < 0) return -1;
    Py_BEGIN_ALLOW_THREADS;
    st = onyx_session_create_from_bytes(opts, view.buf, (size_t)view.len, NULL, &sess);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&view);
  } else {
    PyObject* path = NULL;
    if (!PyUnicode_FSConverter(model, &path)) return -1;
    const char* p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS;
    st = onyx_session_create(opts, p, &sess);
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
  }
  if (st) {
    raise_status(st);
    return -1;
  }
  self->sess = sess;
  self->active = 0;
  self->closed = 0;
  return 0;
}

static void session_dealloc(SessionObject* self) {
  /* A run holds a reference to the session object, so none is in flight. */
  onyx_session_release(self->sess);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* The open session, or NULL with InvalidArgument raised. */
static OnyxSession* session_get(SessionObject* self) {
  if (!self->sess || self->closed) {
    raise_code(ONYX_INVALID_ARGUMENT, "the InferenceSession is closed");
    return NULL;
  }
  return self->sess;
}

static PyObject* session_close(SessionObject* self, PyObject* noargs) {
  (void)noargs;
  self->closed = 1;
  if (self->active == 0 && self->sess) {
    OnyxSession* s = self->sess;
    self->sess = NULL;
    Py_BEGIN_ALLOW_THREADS;
    onyx_session_release(s);
    Py_END_ALLOW_THREADS;
  }
  Py_RETURN_NONE;
}

/* (name, elem_type, kind, dims or None) with -1 for an unknown dim. */
static PyObject* value_info(OnyxSession* s, size_t i, int output) {
  OnyxElemType type = ONYX_ELEM_UNDEFINED;
  int32_t rank = -1;
  const int64_t* dims = NULL;
  OnyxStatus* st = output ? onyx_session_output_info(s, i, &type, &rank, &dims)
                          : onyx_session_input_info(s, i, &type, &rank, &dims);
  if (st) return raise_status(st);
  const char* name = output ? onyx_session_output_name(s, i) : onyx_session_input_name(s, i);
  int kind = output ? (int)onyx_session_output_kind(s, i) : (int)onyx_session_input_kind(s, i);
  PyObject* shape = NULL;
  if (rank < 0) {
    shape = Py_NewRef(Py_None);
  } else {
    shape = PyTuple_New(rank);
    if (!shape) return NULL;
    for (int32_t d = 0; d < rank; d++) {
      PyObject* v = PyLong_FromLongLong(dims[d]);
      if (!v) {
        Py_DECREF(shape);
        return NULL;
      }
      PyTuple_SET_ITEM(shape, d, v);
    }
  }
  /* the key type of a map or sequence-of-maps value (0 otherwise) */
  int key = (int)(output ? onyx_session_output_map_key(s, i) : onyx_session_input_map_key(s, i));
  return Py_BuildValue("(siiNi)", name ? name : "", (int)type, kind, shape, key);
}

static PyObject* session_infos(SessionObject* self, int output) {
  OnyxSession* s = session_get(self);
  if (!s) return NULL;
  size_t n = output ? onyx_session_output_count(s) : onyx_session_input_count(s);
  PyObject* list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject* info = value_info(s, i, output);
    if (!info) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, info);
  }
  return list;
}

static PyObject* session_inputs(SessionObject* self, PyObject* noargs) {
  (void)noargs;
  return session_infos(self, 0);
}

static PyObject* session_outputs(SessionObject* self, PyObject* noargs) {
  (void)noargs;
  return session_infos(self, 1);
}

static PyObject* session_providers(SessionObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxSession* s = session_get(self);
  if (!s) return NULL;
  size_t n = onyx_session_provider_count(s);
  PyObject* list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    const char* name = onyx_session_provider_name(s, i);
    PyObject* item =
        Py_BuildValue("(sn)", name ? name : "", (Py_ssize_t)onyx_session_provider_node_count(s, i));
    if (!item) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  return list;
}

static PyObject* session_explain(SessionObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxSession* s = session_get(self);
  if (!s) return NULL;
  char* text = NULL;
  OnyxStatus* st = onyx_session_explain(s, &text);
  if (st) return raise_status(st);
  PyObject* r = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
  onyx_free(text);
  return r;
}

static PyObject* session_save_model(SessionObject* self, PyObject* args) {
  const char* path = NULL;
  if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
  OnyxSession* s = session_get(self);
  if (!s) return NULL;
  return status_result(onyx_session_save_model(s, path));
}

/* A string tensor from an array of str or bytes objects (any dtype of kind
 * O, U or S). `name` names the feed in errors. */
static OnyxStatus* string_value(PyArrayObject* arr, const char* name, OnyxValue** out) {
  npy_intp n = PyArray_SIZE(arr);
  int rank = PyArray_NDIM(arr);
  int64_t dims[NPY_MAXDIMS];
  for (int d = 0; d < rank; d++)
    dims[d] = (int64_t)PyArray_DIM(arr, d);
  const char** strs = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(char*));
  size_t* lens = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(size_t));
  PyObject** keep = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(PyObject*));
  OnyxStatus* st = NULL;
  PyObject* flat = NULL;
  if (!strs || !lens || !keep) {
    PyErr_NoMemory();
    goto done;
  }
  flat = PyArray_Ravel(arr, NPY_CORDER);
  if (!flat) goto done;
  for (npy_intp i = 0; i < n; i++) {
    PyObject* item = PySequence_GetItem(flat, i);
    if (!item) goto done;
    if (PyUnicode_Check(item)) {
      Py_ssize_t len = 0;
      const char* s = PyUnicode_AsUTF8AndSize(item, &len);
      if (!s) {
        Py_DECREF(item);
        goto done;
      }
      strs[i] = s;
      lens[i] = (size_t)len;
      keep[i] = item;
    } else if (PyBytes_Check(item)) {
      strs[i] = PyBytes_AS_STRING(item);
      lens[i] = (size_t)PyBytes_GET_SIZE(item);
      keep[i] = item;
    } else {
      PyErr_Format(PyExc_TypeError, "input '%s': element %zd of a string feed is %s, not str", name,
                   i, Py_TYPE(item)->tp_name);
      Py_DECREF(item);
      goto done;
    }
  }
  st = onyx_value_create_string_tensor(dims, (size_t)rank, strs, lens, out);
done:
  if (keep)
    for (npy_intp i = 0; i < n; i++)
      Py_XDECREF(keep[i]);
  Py_XDECREF(flat);
  PyMem_Free(strs);
  PyMem_Free(lens);
  PyMem_Free(keep);
  return st;
}

/* The value of one feed; NULL with a Python error set. */
static OnyxValue* feed_value(PyObject* obj, const char* name) {
  PyArrayObject* arr = NULL;
  if (PyArray_Check(obj)) {
    arr = (PyArrayObject*)Py_NewRef(obj);
  } else {
    arr = (PyArrayObject*)PyArray_FROM_O(obj);
    if (!arr) return NULL;
  }
  OnyxElemType type = elem_type_of(PyArray_DESCR(arr));
  if (type == ONYX_ELEM_UNDEFINED) {
    raise_code(ONYX_INVALID_ARGUMENT, "input '%s': NumPy dtype '%c%d' has no ONNX element type",
               name, PyArray_DESCR(arr)->kind, (int)PyArray_DESCR(arr)->elsize);
    Py_DECREF(arr);
    return NULL;
  }
  OnyxValue* v = NULL;
  OnyxStatus* st = NULL;
  if (type == ONYX_ELEM_STRING) {
    st = string_value(arr, name, &v);
    if (!st && !v) {
      Py_DECREF(arr);
      return NULL;
    }
  } else {
    /* A C-contiguous, aligned, native-order copy only when it is not one. */
    PyArray_Descr* descr = PyArray_DescrNewByteorder(PyArray_DESCR(arr), NPY_NATIVE);
    if (!descr) {
      Py_DECREF(arr);
      return NULL;
    }
    PyArrayObject* c =
        (PyArrayObject*)PyArray_FromAny((PyObject*)arr, descr, 0, 0, NPY_ARRAY_IN_ARRAY, NULL);
    Py_DECREF(arr);
    if (!c) return NULL;
    arr = c;
    int rank = PyArray_NDIM(arr);
    int64_t dims[NPY_MAXDIMS];
    for (int d = 0; d < rank; d++)
      dims[d] = (int64_t)PyArray_DIM(arr, d);
    st = onyx_value_create_tensor(type, dims, (size_t)rank, PyArray_DATA(arr),
                                  (size_t)PyArray_NBYTES(arr), &v);
  }
  Py_DECREF(arr);
  if (st) {
    raise_status(st);
    return NULL;
  }
  return v;
}

/* --- maps: dict feeds and dict / list-of-dict outputs (ONNX-ML ZipMap, DictVectorizer,
 * CastMap) --------------------------------------------------------------------------------
 * A map output becomes a dict and a sequence of maps a list of dicts, as
 * onnxruntime returns them (keys int or str, values Python scalars); a dict
 * fed to a map input becomes a map of the input's declared key and value
 * types. */

/* Element i of a 1-D host tensor as a Python scalar. */
static PyObject* map_scalar(const OnyxTensor* t, size_t i) {
  const void* d = onyx_tensor_data(t);
  switch (onyx_tensor_elem_type(t)) {
  case ONYX_ELEM_FLOAT32:
    return PyFloat_FromDouble((double)((const float*)d)[i]);
  case ONYX_ELEM_FLOAT64:
    return PyFloat_FromDouble(((const double*)d)[i]);
  case ONYX_ELEM_INT64:
    return PyLong_FromLongLong((long long)((const int64_t*)d)[i]);
  case ONYX_ELEM_INT32:
    return PyLong_FromLong((long)((const int32_t*)d)[i]);
  case ONYX_ELEM_BOOL:
    return PyBool_FromLong(((const uint8_t*)d)[i]);
  case ONYX_ELEM_STRING: {
    const char* s = ((const char* const*)d)[i];
    size_t len = onyx_tensor_string_len(t, i);
    PyObject* u = PyUnicode_DecodeUTF8(s ? s : "", (Py_ssize_t)len, NULL);
    if (u) return u;
    PyErr_Clear(); /* not UTF-8: the bytes as they are */
    return PyBytes_FromStringAndSize(s ? s : "", (Py_ssize_t)len);
  }
  default:
    return raise_code(ONYX_NOT_IMPLEMENTED, "map values of element type %s",
                      onyx_elem_type_name(onyx_tensor_elem_type(t)));
  }
}

static PyObject* map_dict(const OnyxValue* m) {
  const OnyxTensor* k = onyx_value_map_keys(m);
  const OnyxTensor* v = onyx_value_map_values(m);
  size_t n = onyx_value_map_size(m);
  PyObject* d = PyDict_New();
  for (size_t i = 0; d && i < n; i++) {
    PyObject* key = map_scalar(k, i);
    PyObject* val = key ? map_scalar(v, i) : NULL;
    if (!val || PyDict_SetItem(d, key, val) < 0) Py_CLEAR(d);
    Py_XDECREF(key);
    Py_XDECREF(val);
  }
  return d;
}

/* A map output as a dict, a sequence of maps as a list of dicts; takes v. */
static PyObject* map_output(OnyxValue* v) {
  PyObject* r = NULL;
  if (onyx_value_kind(v) == ONYX_VALUE_MAP) {
    r = map_dict(v);
  } else {
    size_t n = onyx_value_map_sequence_length(v);
    r = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; r && i < n; i++) {
      OnyxValue* m = NULL;
      OnyxStatus* st = onyx_value_map_sequence_at(v, i, &m);
      PyObject* d = st ? raise_status(st) : map_dict(m);
      onyx_value_release(m);
      if (!d) {
        Py_CLEAR(r);
        break;
      }
      PyList_SET_ITEM(r, (Py_ssize_t)i, d);
    }
  }
  onyx_value_release(v);
  return r;
}

/* A dict fed to input `name` of s, a map input: the keys must be all int or
 * all str (the declared key type), the values convert to the declared value
 * type as NumPy converts them. NULL with a Python error set. */
static OnyxValue* map_feed(OnyxSession* s, PyObject* dict, const char* name) {
  size_t idx = SIZE_MAX;
  for (size_t i = 0; i < onyx_session_input_count(s) && idx == SIZE_MAX; i++)
    if (!strcmp(onyx_session_input_name(s, i), name)) idx = i;
  if (idx == SIZE_MAX || onyx_session_input_kind(s, idx) != ONYX_TYPE_MAP) {
    raise_code(ONYX_INVALID_ARGUMENT, "input '%s': a dict is fed only to a map input", name);
    return NULL;
  }
  OnyxElemType kt = onyx_session_input_map_key(s, idx), vt = ONYX_ELEM_UNDEFINED;
  OnyxStatus* st = onyx_session_input_info(s, idx, &vt, NULL, NULL);
  if (st) {
    raise_status(st);
    return NULL;
  }
  int npy = npy_type_of(vt);
  if (npy < 0 || vt == ONYX_ELEM_STRING) npy = vt == ONYX_ELEM_STRING ? NPY_OBJECT : -1;
  if (npy < 0) {
    raise_code(ONYX_NOT_IMPLEMENTED, "input '%s': map values of type %s", name,
               onyx_elem_type_name(vt));
    return NULL;
  }
  Py_ssize_t n = PyDict_Size(dict);
  PyObject* keys = PyDict_Keys(dict);
  PyObject* vals = PyDict_Values(dict);
  int64_t* ik = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *ik);
  const char** sk = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *sk);
  size_t* sl = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *sl);
  PyArrayObject* arr = NULL;
  OnyxValue *values = NULL, *out = NULL;
  int64_t dim = (int64_t)n;
  if (!keys || !vals || !ik || !sk || !sl) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* k = PyList_GET_ITEM(keys, i);
    if (kt == ONYX_ELEM_INT64 && PyLong_Check(k)) {
      ik[i] = (int64_t)PyLong_AsLongLong(k);
      if (PyErr_Occurred()) goto done;
    } else if (kt == ONYX_ELEM_STRING && PyUnicode_Check(k)) {
      Py_ssize_t len = 0;
      if (!(sk[i] = PyUnicode_AsUTF8AndSize(k, &len))) goto done;
      sl[i] = (size_t)len;
    } else {
      raise_code(ONYX_INVALID_ARGUMENT, "input '%s': key %zd is %s; the map's keys are %s", name, i,
                 Py_TYPE(k)->tp_name, kt == ONYX_ELEM_INT64 ? "int" : "str");
      goto done;
    }
  }
  arr = (PyArrayObject*)PyArray_FROM_OTF(vals, npy, NPY_ARRAY_IN_ARRAY);
  if (!arr) goto done;
  if (PyArray_NDIM(arr) != 1 || PyArray_DIM(arr, 0) != n) {
    raise_code(ONYX_INVALID_ARGUMENT, "input '%s': map values must be scalars", name);
    goto done;
  }
  if (vt == ONYX_ELEM_STRING) {
    st = string_value(arr, name, &values);
    if (!st && !values) goto done;
  } else {
    st = onyx_value_create_tensor(vt, &dim, 1, PyArray_DATA(arr), (size_t)PyArray_NBYTES(arr),
                                  &values);
  }
  if (!st)
    st = kt == ONYX_ELEM_INT64 ? onyx_value_create_map_int64(ik, (size_t)n, values, &out)
                               : onyx_value_create_map_string(sk, sl, (size_t)n, values, &out);
  if (st) raise_status(st);
done:
  onyx_value_release(values);
  Py_XDECREF((PyObject*)arr);
  Py_XDECREF(keys);
  Py_XDECREF(vals);
  PyMem_Free(ik);
  PyMem_Free(sk);
  PyMem_Free(sl);
  return out;
}

static void value_capsule_free(PyObject* cap) {
  onyx_value_release(PyCapsule_GetPointer(cap, "onyx.value"));
}

/* A NumPy array of an output value; takes the value (released on error, or
 * owned by the array's base when its memory is shared). */
static PyObject* output_array(OnyxValue* v, const char* name) {
  const OnyxTensor* t = onyx_value_tensor(v);
  if (!t) {
    OnyxValueKind kind = onyx_value_kind(v);
    if (kind == ONYX_VALUE_NONE) {
      onyx_value_release(v);
      Py_RETURN_NONE;
    }
    if (kind == ONYX_VALUE_MAP || kind == ONYX_VALUE_SEQUENCE_MAP) return map_output(v);
    if (kind == ONYX_VALUE_SEQUENCE) {
      /* A list of arrays, each a copy of the item. */
      size_t n = onyx_value_sequence_length(v);
      PyObject* list = PyList_New((Py_ssize_t)n);
      for (size_t i = 0; list && i < n; i++) {
        const OnyxTensor* it = onyx_value_sequence_at(v, i);
        OnyxElemType et = onyx_tensor_elem_type(it);
        const int64_t* d = onyx_tensor_dims(it);
        OnyxValue* copy = NULL;
        OnyxStatus* st =
            et == ONYX_ELEM_STRING
                ? onyx_value_create_string_tensor(d, onyx_tensor_rank(it), onyx_tensor_data(it),
                                                  NULL, &copy)
                : onyx_value_create_tensor(et, d, onyx_tensor_rank(it), onyx_tensor_data(it),
                                           onyx_tensor_byte_size(it), &copy);
        PyObject* a = st ? raise_status(st) : output_array(copy, name);
        if (!a) {
          Py_CLEAR(list);
          break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, a);
      }
      onyx_value_release(v);
      return list;
    }
    onyx_value_release(v);
    return raise_code(ONYX_NOT_IMPLEMENTED, "output '%s': value kind %d is not supported", name,
                      (int)kind);
  }
  OnyxElemType et = onyx_tensor_elem_type(t);
  int npy = npy_type_of(et);
  if (npy < 0) {
    onyx_value_release(v);
    return raise_code(ONYX_NOT_IMPLEMENTED, "output '%s': element type %s has no NumPy dtype", name,
                      onyx_elem_type_name(et));
  }
  size_t rank = onyx_tensor_rank(t);
  const int64_t* d = onyx_tensor_dims(t);
  npy_intp dims[NPY_MAXDIMS];
  if (rank > NPY_MAXDIMS) {
    onyx_value_release(v);
    return raise_code(ONYX_NOT_IMPLEMENTED, "output '%s': rank %zu is over NumPy's %d", name, rank,
                      NPY_MAXDIMS);
  }
  for (size_t i = 0; i < rank; i++)
    dims[i] = (npy_intp)d[i];
  if (et == ONYX_ELEM_STRING) {
    PyObject* a = PyArray_SimpleNew((int)rank, dims, NPY_OBJECT);
    if (!a) {
      onyx_value_release(v);
      return NULL;
    }
    const char* const* strs = onyx_tensor_data(t);
    size_t n = onyx_tensor_elem_count(t);
    PyObject** slots = (PyObject**)PyArray_DATA((PyArrayObject*)a);
    for (size_t i = 0; i < n; i++) {
      size_t len = onyx_tensor_string_len(t, i);
      PyObject* s = PyUnicode_DecodeUTF8(strs[i] ? strs[i] : "", (Py_ssize_t)len, NULL);
      if (!s) {
        /* Not UTF-8: the bytes as they are. */
        PyErr_Clear();
        s = PyBytes_FromStringAndSize(strs[i] ? strs[i] : "", (Py_ssize_t)len);
      }
      if (!s) {
        Py_DECREF(a);
        onyx_value_release(v);
        return NULL;
      }
      Py_XSETREF(slots[i], s);
    }
    onyx_value_release(v);
    return a;
  }
  const OnyxMemoryDevice* mem = onyx_tensor_memory(t);
  void* data = (void*)onyx_tensor_data(t);
  size_t esize = onyx_elem_type_size(et);
  if ((mem && mem->kind != ONYX_DEVICE_CPU) || (esize && ((uintptr_t)data % esize) != 0) || !data) {
    /* Copied: device memory never reaches here from onyx_session_run, and an
     * empty or unaligned buffer is simplest copied. */
    PyObject* a = PyArray_SimpleNew((int)rank, dims, npy);
    if (a && onyx_tensor_byte_size(t) > 0 && data)
      memcpy(PyArray_DATA((PyArrayObject*)a), data, onyx_tensor_byte_size(t));
    onyx_value_release(v);
    return a;
  }
  /* Shared: the array borrows the value's memory; a capsule owning the value
   * is the array's base and releases it with the array. */
  PyObject* cap = PyCapsule_New(v, "onyx.value", value_capsule_free);
  if (!cap) {
    onyx_value_release(v);
    return NULL;
  }
  PyObject* a = PyArray_SimpleNewFromData((int)rank, dims, npy, data);
  if (!a) {
    Py_DECREF(cap);
    return NULL;
  }
  if (PyArray_SetBaseObject((PyArrayObject*)a, cap) < 0) { /* steals cap */
    Py_DECREF(a);
    return NULL;
  }
  return a;
}

/* run(output_names, input_names, input_values, run_options) -> list */
static PyObject* session_run(SessionObject* self, PyObject* args) {
  PyObject* out_names = NULL;
  PyObject* in_names = NULL;
  PyObject* in_values = NULL;
  PyObject* run_options = Py_None;
  if (!PyArg_ParseTuple(args, "O!O!O!|O", &PyList_Type, &out_names, &PyList_Type, &in_names,
                        &PyList_Type, &in_values, &run_options))
    return NULL;
  OnyxSession* s = session_get(self);
  if (!s) return NULL;
  const OnyxRunOptions* ro = NULL;
  if (run_options != Py_None) {
    if (!PyObject_TypeCheck(run_options, &RunOptionsType)) {
      PyErr_SetString(PyExc_TypeError, "run_options must be an onyx._onyx.RunOptions or None");
      return NULL;
    }
    ro = ((RunOptionsObject*)run_options)->ro;
  }
  Py_ssize_t nin = PyList_GET_SIZE(in_names);
  Py_ssize_t nout = PyList_GET_SIZE(out_names);
  if (PyList_GET_SIZE(in_values) != nin) {
    PyErr_SetString(PyExc_ValueError, "input names and values differ in length");
    return NULL;
  }
  /* Small runs use stack arrays; larger ones allocate. */
  enum { SMALL = 8 };
  const char* in_buf[SMALL];
  OnyxValue* inv_buf[SMALL];
  const char* out_buf[SMALL];
  OnyxValue* outv_buf[SMALL];
  const char** inn = nin <= SMALL ? in_buf : PyMem_Calloc((size_t)nin, sizeof(char*));
  OnyxValue** inv = nin <= SMALL ? inv_buf : PyMem_Calloc((size_t)nin, sizeof(OnyxValue*));
  const char** outn = nout <= SMALL ? out_buf : PyMem_Calloc((size_t)nout, sizeof(char*));
  OnyxValue** outv = nout <= SMALL ? outv_buf : PyMem_Calloc((size_t)nout, sizeof(OnyxValue*));
  PyObject* result = NULL;
  if (!inn || !inv || !outn || !outv) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < nin; i++)
    inv[i] = NULL;
  for (Py_ssize_t i = 0; i < nout; i++)
    outv[i] = NULL;
  for (Py_ssize_t i = 0; i < nin; i++) {
    PyObject* n = PyList_GET_ITEM(in_names, i);
    if (!PyUnicode_Check(n)) {
      PyErr_Format(PyExc_TypeError, "input name %zd is %s, not str", i, Py_TYPE(n)->tp_name);
      goto done;
    }
    inn[i] = PyUnicode_AsUTF8(n);
    if (!inn[i]) goto done;
    PyObject* feed = PyList_GET_ITEM(in_values, i);
    inv[i] = PyDict_Check(feed) ? map_feed(s, feed, inn[i]) : feed_value(feed, inn[i]);
    if (!inv[i]) goto done;
  }
  for (Py_ssize_t i = 0; i < nout; i++) {
    PyObject* n = PyList_GET_ITEM(out_names, i);
    if (!PyUnicode_Check(n)) {
      PyErr_Format(PyExc_TypeError, "output name %zd is %s, not str", i, Py_TYPE(n)->tp_name);
      goto done;
    }
    outn[i] = PyUnicode_AsUTF8(n);
    if (!outn[i]) goto done;
  }
  /* The name strings belong to the lists, which the caller's tuple keeps
   * alive while the GIL is released; the session object is kept by self. */
  OnyxStatus* st = NULL;
  Py_INCREF(self);
  Py_INCREF(args);
  self->active++;
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_session_run(s, ro, inn, (const OnyxValue* const*)inv, (size_t)nin, outn, (size_t)nout,
                        outv);
  Py_END_ALLOW_THREADS;
  self->active--;
  if (self->closed && self->active == 0 && self->sess) {
    onyx_session_release(self->sess);
    self->sess = NULL;
  }
  Py_DECREF(args);
  Py_DECREF(self);
  if (st) {
    raise_status(st);
    goto done;
  }
  result = PyList_New(nout);
  if (!result) goto done;
  for (Py_ssize_t i = 0; i < nout; i++) {
    OnyxValue* v = outv[i];
    outv[i] = NULL;
    PyObject* a = output_array(v, outn[i]);
    if (!a) {
      Py_CLEAR(result);
      goto done;
    }
    PyList_SET_ITEM(result, i, a);
  }
done:
  if (inv)
    for (Py_ssize_t i = 0; i < nin; i++)
      onyx_value_release(inv[i]);
  if (outv)
    for (Py_ssize_t i = 0; i < nout; i++)
      onyx_value_release(outv[i]);
  if (inn != in_buf) PyMem_Free((void*)inn);
  if (inv != inv_buf) PyMem_Free(inv);
  if (outn != out_buf) PyMem_Free((void*)outn);
  if (outv != outv_buf) PyMem_Free(outv);
  return result;
}

static PyMethodDef session_methods[] = {
    {"inputs", (PyCFunction)session_inputs, METH_NOARGS, "[(name, elem_type, kind, dims or None)]"},
    {"outputs", (PyCFunction)session_outputs, METH_NOARGS,
     "[(name, elem_type, kind, dims or None)]"},
    {"providers", (PyCFunction)session_providers, METH_NOARGS, "[(name, node count)]"},
    {"explain", (PyCFunction)session_explain, METH_NOARGS, "placement report"},
    {"save_model", (PyCFunction)session_save_model, METH_VARARGS, "optimized model to a path"},
    {"run", (PyCFunction)session_run, METH_VARARGS,
     "run(output_names, input_names, input_values, run_options=None) -> list"},
    {"close", (PyCFunction)session_close, METH_NOARGS, "release the session"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SessionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.Session",
    .tp_basicsize = sizeof(SessionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxSession",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)session_init,
    .tp_dealloc = (destructor)session_dealloc,
    .tp_methods = session_methods,
};

/* --- For the extension's other C files (_onyx_internal.h) ---------------------------- */

PyObject* oxpy_raise_status(OnyxStatus* st) {
  return raise_status(st);
}

PyObject* oxpy_raise_message(OnyxStatusCode code, const char* msg) {
  return raise_code(code, "%s", msg);
}

OnyxValue* oxpy_feed_value(PyObject* obj, const char* name) {
  return feed_value(obj, name);
}

PyObject* oxpy_output_array(OnyxValue* v, const char* name) {
  return output_array(v, name);
}

int oxpy_npy_type_of(OnyxElemType t) {
  return npy_type_of(t);
}

OnyxElemType oxpy_elem_type_of(const PyArray_Descr* d) {
  return elem_type_of(d);
}

OnyxSession* oxpy_session_enter(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, &SessionType)) {
    PyErr_Format(PyExc_TypeError, "expected an onyx._onyx.Session, got %s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  SessionObject* self = (SessionObject*)obj;
  OnyxSession* s = session_get(self);
  if (s) self->active++;
  return s;
}

void oxpy_session_leave(PyObject* obj) {
  SessionObject* self = (SessionObject*)obj;
  self->active--;
  if (self->closed && self->active == 0 && self->sess) {
    onyx_session_release(self->sess);
    self->sess = NULL;
  }
}

int oxpy_run_options(PyObject* obj, const OnyxRunOptions** out) {
  *out = NULL;
  if (obj == Py_None) return 0;
  if (!PyObject_TypeCheck(obj, &RunOptionsType)) {
    PyErr_SetString(PyExc_TypeError, "run_options must be an onyx._onyx.RunOptions or None");
    return -1;
  }
  *out = ((RunOptionsObject*)obj)->ro;
  return 0;
}

int oxpy_options(PyObject* obj, const OnyxSessionOptions** out) {
  *out = NULL;
  if (obj == Py_None) return 0;
  if (!PyObject_TypeCheck(obj, &OptionsType)) {
    PyErr_SetString(PyExc_TypeError, "options must be an onyx._onyx.Options or None");
    return -1;
  }
  *out = ((OptionsObject*)obj)->opts;
  return 0;
}

/* --- Providers and devices -------------------------------------------------------------- */

/* A dict of one OnyxProviderInfo with its devices. */
static PyObject* provider_dict(const OnyxProviderList* l, size_t i) {
  OnyxProviderInfo p = {.struct_size = sizeof p};
  OnyxStatus* st = onyx_provider_list_info(l, i, &p);
  if (st) return raise_status(st);
  PyObject* devs = PyList_New(0);
  if (!devs) return NULL;
  for (size_t d = 0; d < p.device_count; d++) {
    OnyxProviderDevice dev = {.struct_size = sizeof dev};
    st = onyx_provider_list_device(l, i, d, &dev);
    if (st) {
      Py_DECREF(devs);
      return raise_status(st);
    }
    PyObject* props = PyDict_New();
    for (size_t k = 0; props && k < dev.property_count; k++) {
      PyObject* v = PyUnicode_DecodeUTF8(dev.property_values[k],
                                         (Py_ssize_t)strlen(dev.property_values[k]), "replace");
      if (!v || PyDict_SetItemString(props, dev.property_keys[k], v) < 0) Py_CLEAR(props);
      Py_XDECREF(v);
    }
    PyObject* item =
        props ? Py_BuildValue("{s:s,s:i,s:I,s:i,s:K,s:N,s:s}", "name", dev.name, "kind",
                              (int)dev.memory.kind, "vendor_id", (unsigned)dev.memory.vendor_id,
                              "device_id", (int)dev.memory.device_id, "memory_bytes",
                              (unsigned long long)dev.memory_bytes, "properties", props, "message",
                              dev.message)
              : NULL;
    if (!item || PyList_Append(devs, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(devs);
      return NULL;
    }
    Py_DECREF(item);
  }
  return Py_BuildValue("{s:s,s:z,s:O,s:z,s:z,s:i,s:O,s:s,s:s,s:N}", "name", p.name, "library",
                       p.library, "loaded", p.loaded ? Py_True : Py_False, "vendor", p.vendor,
                       "version", p.version, "score", (int)p.score, "selected",
                       p.selected ? Py_True : Py_False, "status", onyx_status_code_name(p.status),
                       "message", p.message, "devices", devs);
}

static PyObject* py_providers(PyObject* self, PyObject* noargs) {
  (void)self;
  (void)noargs;
  OnyxProviderList* l = NULL;
  OnyxStatus* st = NULL;
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_provider_list_create(&l);
  Py_END_ALLOW_THREADS;
  if (st) return raise_status(st);
  size_t n = onyx_provider_list_count(l);
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject* d = provider_dict(l, i);
    if (!d) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, d);
  }
  onyx_provider_list_release(l);
  return list;
}

static PyObject* py_version(PyObject* self, PyObject* noargs) {
  (void)self;
  (void)noargs;
  return PyUnicode_FromString(onyx_version_string());
}

static PyObject* py_status_code_name(PyObject* self, PyObject* args) {
  (void)self;
  int code = 0;
  if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
  return PyUnicode_FromString(onyx_status_code_name((OnyxStatusCode)code));
}

static PyMethodDef module_methods[] = {
    {"set_error_classes", py_set_error_classes, METH_VARARGS,
     "set_error_classes(base, {status code: class})"},
    {"providers", py_providers, METH_NOARGS, "provider libraries and their devices"},
    {"version", py_version, METH_NOARGS, "libonyx's version"},
    {"status_code_name", py_status_code_name, METH_VARARGS, "name of an OnyxStatusCode"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef onyx_module = {
    PyModuleDef_HEAD_INIT,
    "_onyx",
    "libonyx bindings (used by the onyx package)",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__onyx(void);
PyMODINIT_FUNC PyInit__onyx(void) {
  import_array();
  if (PyType_Ready(&OptionsType) < 0 || PyType_Ready(&RunOptionsType) < 0 ||
      PyType_Ready(&SessionType) < 0)
    return NULL;
  PyObject* m = PyModule_Create(&onyx_module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Options", (PyObject*)&OptionsType) < 0 ||
      PyModule_AddObjectRef(m, "RunOptions", (PyObject*)&RunOptionsType) < 0 ||
      PyModule_AddObjectRef(m, "Session", (PyObject*)&SessionType) < 0 || oxpy_values_add(m) < 0 ||
      oxpy_training_add(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
