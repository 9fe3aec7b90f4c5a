/* _onyx_values.c — values and IO bindings in the onyx._onyx extension; the
 * onnxruntime-style OrtValue and SessionIOBinding (onyx/_values.py) are
 * written on these.
 *
 *   _onyx.Value       an OnyxValue: from NumPy (zero-copy through DLPack
 *                     where the dtype has a DLPack type), from DLPack
 *                     capsules and producers, from a raw pointer; to NumPy
 *                     (a view) and to DLPack (no copy)
 *   _onyx.IoBinding   an OnyxIoBinding over an _onyx.Session; run() releases
 *                     the GIL
 *
 * DLPack capsules follow the Python protocol: a capsule named "dltensor"
 * owns its DLManagedTensor until a consumer renames it "used_dltensor".
 */
#include "_onyx_internal.h"

#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>

/* --- Value ------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD OnyxValue* v;
} ValueObject;

static PyTypeObject ValueType;

static void value_dealloc(ValueObject* self) {
  onyx_value_release(self->v);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* A new Value owning `v` (released on failure). */
static PyObject* value_wrap(OnyxValue* v) {
  ValueObject* o = PyObject_New(ValueObject, &ValueType);
  if (!o) {
    onyx_value_release(v);
    return NULL;
  }
  o->v = v;
  return (PyObject*)o;
}

static const OnyxTensor* value_tensor(ValueObject* self) {
  const OnyxTensor* t = self->v ? onyx_value_tensor(self->v) : NULL;
  if (!t) oxpy_raise_message(ONYX_INVALID_ARGUMENT, "the OrtValue holds no tensor");
  return t;
}

/* The capsule's DLManagedTensor when it is an unused "dltensor"; NULL with
 * an error set otherwise. */
static DLManagedTensor* capsule_tensor(PyObject* cap) {
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack: expected a DLPack capsule or an object with "
                 "__dlpack__, got %s",
                 Py_TYPE(cap)->tp_name);
    return NULL;
  }
  if (!PyCapsule_IsValid(cap, "dltensor")) {
    oxpy_raise_message(ONYX_INVALID_ARGUMENT,
                       "from_dlpack: the capsule is not an unused 'dltensor' (a DLPack capsule "
                       "can be consumed once)");
    return NULL;
  }
  return PyCapsule_GetPointer(cap, "dltensor");
}

/* Takes a DLPack capsule, or calls obj.__dlpack__() for one. */
static PyObject* value_from_dlpack(PyObject* cls, PyObject* obj) {
  (void)cls;
  PyObject* cap = NULL;
  if (PyCapsule_CheckExact(obj)) {
    cap = Py_NewRef(obj);
  } else if (PyObject_HasAttrString(obj, "__dlpack__")) {
    cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (!cap) return NULL;
  } else {
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack: expected a DLPack capsule or an object with __dlpack__, got %s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  DLManagedTensor* m = capsule_tensor(cap);
  if (!m) {
    Py_DECREF(cap);
    return NULL;
  }
  OnyxValue* v = NULL;
  OnyxStatus* st = onyx_value_from_dlpack(m, &v);
  if (st) {
    Py_DECREF(cap);
    return oxpy_raise_status(st);
  }
  /* The value owns the tensor now: the capsule must not delete it. */
  if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
    Py_DECREF(cap);
    onyx_value_release(v);
    return NULL;
  }
  Py_DECREF(cap);
  return value_wrap(v);
}

/* from_numpy(array, copy): zero-copy through the array's DLPack export when
 * it is C-contiguous, writeable and of a DLPack type (so the value keeps the
 * array alive and sees its changes), a copy otherwise or when copy is
 * true. */
static PyObject* value_from_numpy(PyObject* cls, PyObject* args) {
  PyObject* obj = NULL;
  int copy = 0;
  if (!PyArg_ParseTuple(args, "O|p", &obj, &copy)) return NULL;
  if (!copy && PyArray_Check(obj)) {
    PyArrayObject* a = (PyArrayObject*)obj;
    char kind = PyArray_DESCR(a)->kind;
    if (PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISWRITEABLE(a) && PyArray_ISNOTSWAPPED(a) &&
        PyArray_ISALIGNED(a) && (kind == 'f' || kind == 'i' || kind == 'u' || kind == 'c') &&
        PyObject_HasAttrString(obj, "__dlpack__"))
      return value_from_dlpack(cls, obj);
  }
  OnyxValue* v = oxpy_feed_value(obj, "ortvalue_from_numpy");
  return v ? value_wrap(v) : NULL;
}

/* No-op deleter of a tensor over memory the caller keeps (from_pointer). */
static void borrowed_deleter(DLManagedTensor* m) {
  PyMem_RawFree(m->dl_tensor.shape);
  PyMem_RawFree(m);
}

/* DLPack's type of an element type; code 255 when it has none. */
static DLDataType dl_type_of(OnyxElemType t) {
  DLDataType d = {255, 0, 1};
  size_t bits = onyx_elem_type_size(t) * 8;
  switch (t) {
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_FLOAT64:
    d.code = kDLFloat;
    break;
  case ONYX_ELEM_BFLOAT16:
    d.code = kDLBfloat;
    break;
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_INT64:
    d.code = kDLInt;
    break;
  case ONYX_ELEM_UINT8:
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_UINT32:
  case ONYX_ELEM_UINT64:
    d.code = kDLUInt;
    break;
  case ONYX_ELEM_COMPLEX64:
  case ONYX_ELEM_COMPLEX128:
    d.code = kDLComplex;
    break;
  default:
    return d;
  }
  d.bits = (uint8_t)bits;
  return d;
}

/* from_pointer(ptr, elem_type, shape, device_kind, device_id): a value over
 * memory the caller owns and keeps alive (onnxruntime's bind_input with a
 * buffer_ptr). */
static PyObject* value_from_pointer(PyObject* cls, PyObject* args) {
  (void)cls;
  unsigned long long ptr = 0;
  int elem = 0, dev_kind = kDLCPU, dev_id = 0;
  PyObject* shape = NULL;
  if (!PyArg_ParseTuple(args, "KiO|ii", &ptr, &elem, &shape, &dev_kind, &dev_id)) return NULL;
  DLDataType dt = dl_type_of((OnyxElemType)elem);
  if (dt.code == 255)
    return oxpy_raise_message(ONYX_INVALID_ARGUMENT,
                              "bind by pointer: the element type has no DLPack type");
  PyObject* seq = PySequence_Fast(shape, "shape must be a sequence of ints");
  if (!seq) return NULL;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
  DLManagedTensor* m = PyMem_RawCalloc(1, sizeof *m);
  int64_t* dims = PyMem_RawCalloc((size_t)(rank > 0 ? rank : 1), sizeof(int64_t));
  if (!m || !dims) {
    PyMem_RawFree(m);
    PyMem_RawFree(dims);
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < rank; i++) {
    dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (dims[i] == -1 && PyErr_Occurred()) {
      PyMem_RawFree(m);
      PyMem_RawFree(dims);
      Py_DECREF(seq);
      return NULL;
    }
  }
  Py_DECREF(seq);
  m->dl_tensor.data = (void*)(uintptr_t)ptr;
  m->dl_tensor.device.device_type = (DLDeviceType)dev_kind;
  m->dl_tensor.device.device_id = dev_id;
  m->dl_tensor.ndim = (int)rank;
  m->dl_tensor.dtype = dt;
  m->dl_tensor.shape = dims;
  m->dl_tensor.strides = NULL;
  m->dl_tensor.byte_offset = 0;
  m->deleter = borrowed_deleter;
  OnyxValue* v = NULL;
  OnyxStatus* st = onyx_value_from_dlpack(m, &v);
  if (st) {
    borrowed_deleter(m);
    return oxpy_raise_status(st);
  }
  return value_wrap(v);
}

static void dlpack_capsule_free(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "used_dltensor")) return;
  DLManagedTensor* m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) {
    PyErr_Clear();
    return;
  }
  if (m->deleter) m->deleter(m);
}

/* to_dlpack() / __dlpack__(stream=None): a capsule sharing the memory. */
static PyObject* value_to_dlpack(ValueObject* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"stream", NULL};
  PyObject* stream = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &stream)) return NULL;
  if (!value_tensor(self)) return NULL;
  DLManagedTensor* m = NULL;
  OnyxStatus* st = onyx_value_to_dlpack(self->v, &m);
  if (st) return oxpy_raise_status(st);
  PyObject* cap = PyCapsule_New(m, "dltensor", dlpack_capsule_free);
  if (!cap) m->deleter(m);
  return cap;
}

static PyObject* value_dlpack_device(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  if (!t) return NULL;
  const OnyxMemoryDevice* mem = onyx_tensor_memory(t);
  int kind = kDLCPU, id = 0;
  if (mem && mem->kind != ONYX_DEVICE_CPU) {
    kind = mem->vendor_id == 0x1002 ? kDLROCM : kDLCUDA;
    id = mem->device_id;
  }
  return Py_BuildValue("(ii)", kind, id);
}

/* numpy(): a view of host memory that keeps this Value alive; a copy of
 * strings. */
static PyObject* value_numpy(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  if (!t) return NULL;
  OnyxElemType et = onyx_tensor_elem_type(t);
  const OnyxMemoryDevice* mem = onyx_tensor_memory(t);
  size_t rank = onyx_tensor_rank(t);
  const int64_t* d = onyx_tensor_dims(t);
  int npy = oxpy_npy_type_of(et);
  if (et == ONYX_ELEM_STRING || (mem && mem->kind != ONYX_DEVICE_CPU)) {
    OnyxValue* copy = NULL;
    OnyxStatus* st = NULL;
    if (et == ONYX_ELEM_STRING) {
      st = onyx_value_create_string_tensor(d, rank, onyx_tensor_data(t), NULL, &copy);
      if (st) return oxpy_raise_status(st);
      return oxpy_output_array(copy, "OrtValue");
    }
    return oxpy_raise_message(ONYX_NOT_IMPLEMENTED,
                              "numpy(): the OrtValue is in device memory; use to_dlpack()");
  }
  if (npy < 0 || rank > NPY_MAXDIMS)
    return oxpy_raise_message(ONYX_NOT_IMPLEMENTED,
                              "numpy(): the element type or rank has no NumPy equivalent");
  npy_intp dims[NPY_MAXDIMS];
  for (size_t i = 0; i < rank; i++)
    dims[i] = (npy_intp)d[i];
  void* data = (void*)onyx_tensor_data(t);
  if (!data || onyx_tensor_byte_size(t) == 0) return PyArray_ZEROS((int)rank, dims, npy, 0);
  PyObject* a = PyArray_SimpleNewFromData((int)rank, dims, npy, data);
  if (!a) return NULL;
  if (PyArray_SetBaseObject((PyArrayObject*)a, Py_NewRef((PyObject*)self)) < 0) {
    Py_DECREF(a);
    return NULL;
  }
  return a;
}

static PyObject* value_shape(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  if (!t) return NULL;
  size_t rank = onyx_tensor_rank(t);
  const int64_t* d = onyx_tensor_dims(t);
  PyObject* list = PyList_New((Py_ssize_t)rank);
  for (size_t i = 0; list && i < rank; i++) {
    PyObject* x = PyLong_FromLongLong(d[i]);
    if (!x) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, x);
  }
  return list;
}

static PyObject* value_elem_type(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  return t ? PyLong_FromLong((long)onyx_tensor_elem_type(t)) : NULL;
}

/* (device kind, vendor id, device id) of the memory. */
static PyObject* value_device(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  if (!t) return NULL;
  const OnyxMemoryDevice* mem = onyx_tensor_memory(t);
  if (!mem) return Py_BuildValue("(iIi)", (int)ONYX_DEVICE_CPU, 0u, 0);
  return Py_BuildValue("(iIi)", (int)mem->kind, (unsigned)mem->vendor_id, (int)mem->device_id);
}

static PyObject* value_data_ptr(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  const OnyxTensor* t = value_tensor(self);
  return t ? PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)onyx_tensor_data(t)) : NULL;
}

static PyObject* value_is_tensor(ValueObject* self, PyObject* noargs) {
  (void)noargs;
  return PyBool_FromLong(self->v && onyx_value_tensor(self->v) != NULL);
}

static PyMethodDef value_methods[] = {
    {"from_numpy", (PyCFunction)value_from_numpy, METH_VARARGS | METH_CLASS,
     "from_numpy(array, copy=False)"},
    {"from_dlpack", (PyCFunction)value_from_dlpack, METH_O | METH_CLASS,
     "from_dlpack(capsule or object with __dlpack__)"},
    {"from_pointer", (PyCFunction)value_from_pointer, METH_VARARGS | METH_CLASS,
     "from_pointer(ptr, elem_type, shape, dl_device_type=1, device_id=0)"},
    {"to_dlpack", (PyCFunction)(void (*)(void))value_to_dlpack, METH_VARARGS | METH_KEYWORDS,
     "a DLPack capsule sharing the memory"},
    {"__dlpack__", (PyCFunction)(void (*)(void))value_to_dlpack, METH_VARARGS | METH_KEYWORDS,
     "a DLPack capsule sharing the memory"},
    {"__dlpack_device__", (PyCFunction)value_dlpack_device, METH_NOARGS,
     "(DLPack device type, id)"},
    {"numpy", (PyCFunction)value_numpy, METH_NOARGS, "a NumPy view (host memory)"},
    {"shape", (PyCFunction)value_shape, METH_NOARGS, "[dims]"},
    {"elem_type", (PyCFunction)value_elem_type, METH_NOARGS, "OnyxElemType"},
    {"device", (PyCFunction)value_device, METH_NOARGS, "(kind, vendor id, device id)"},
    {"data_ptr", (PyCFunction)value_data_ptr, METH_NOARGS, "the data's address"},
    {"is_tensor", (PyCFunction)value_is_tensor, METH_NOARGS, "holds a tensor"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ValueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.Value",
    .tp_basicsize = sizeof(ValueObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxValue (made by Value.from_numpy / from_dlpack / from_pointer)",
    .tp_dealloc = (destructor)value_dealloc,
    .tp_methods = value_methods,
};

/* --- IO binding ------------------------------------------------------------------------- */

/* The binding counts as a run in flight on its session (oxpy_session_enter)
 * from creation to deallocation, so that closing the session waits for it:
 * the C binding must be released before its session. */
typedef struct {
  PyObject_HEAD OnyxIoBinding* b;
  PyObject* session;
  int busy;
} IoBindingObject;

static int io_binding_init(IoBindingObject* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"session", NULL};
  PyObject* sess = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &sess)) return -1;
  if (self->b) {
    PyErr_SetString(PyExc_RuntimeError, "IoBinding already initialized");
    return -1;
  }
  OnyxSession* s = oxpy_session_enter(sess);
  if (!s) return -1;
  OnyxStatus* st = onyx_io_binding_create(s, &self->b);
  if (st) {
    oxpy_session_leave(sess);
    oxpy_raise_status(st);
    return -1;
  }
  self->session = Py_NewRef(sess);
  return 0;
}

static void io_binding_dealloc(IoBindingObject* self) {
  onyx_io_binding_release(self->b);
  if (self->session) {
    oxpy_session_leave(self->session);
    Py_DECREF(self->session);
  }
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static OnyxIoBinding* binding_get(IoBindingObject* self) {
  if (!self->b) {
    PyErr_SetString(PyExc_RuntimeError, "IoBinding not initialized");
    return NULL;
  }
  if (self->busy) {
    oxpy_raise_message(ONYX_INVALID_ARGUMENT,
                       "the IO binding is in a run in another thread; bind after it ends");
    return NULL;
  }
  return self->b;
}

static PyObject* io_binding_bind_input(IoBindingObject* self, PyObject* args) {
  const char* name = NULL;
  PyObject* value = NULL;
  if (!PyArg_ParseTuple(args, "sO!", &name, &ValueType, &value)) return NULL;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  OnyxStatus* st = onyx_io_binding_bind_input(b, name, ((ValueObject*)value)->v);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

/* bind_output(name, Value or None): into the value's memory, or the
 * session allocates in host memory. */
static PyObject* io_binding_bind_output(IoBindingObject* self, PyObject* args) {
  const char* name = NULL;
  PyObject* value = Py_None;
  if (!PyArg_ParseTuple(args, "s|O", &name, &value)) return NULL;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  OnyxStatus* st = NULL;
  if (value == Py_None) {
    st = onyx_io_binding_bind_output_to_device(b, name, NULL);
  } else if (PyObject_TypeCheck(value, &ValueType)) {
    st = onyx_io_binding_bind_output(b, name, ((ValueObject*)value)->v);
  } else {
    PyErr_Format(PyExc_TypeError, "bind_output: expected an OrtValue or None, got %s",
                 Py_TYPE(value)->tp_name);
    return NULL;
  }
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* io_binding_clear_inputs(IoBindingObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  onyx_io_binding_clear_inputs(b);
  Py_RETURN_NONE;
}

static PyObject* io_binding_clear_outputs(IoBindingObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  onyx_io_binding_clear_outputs(b);
  Py_RETURN_NONE;
}

static PyObject* io_binding_output_names(IoBindingObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  size_t n = onyx_io_binding_output_count(b);
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    const char* s = onyx_io_binding_output_name(b, i);
    PyObject* u = PyUnicode_FromString(s ? s : "");
    if (!u) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, u);
  }
  return list;
}

/* get_outputs() -> [Value]: the last run's outputs, sharing its memory. */
static PyObject* io_binding_get_outputs(IoBindingObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  size_t n = onyx_io_binding_output_count(b);
  OnyxValue** vals = PyMem_Calloc(n > 0 ? n : 1, sizeof(OnyxValue*));
  if (!vals) return PyErr_NoMemory();
  OnyxStatus* st = onyx_io_binding_get_outputs(b, vals, n);
  if (st) {
    PyMem_Free(vals);
    return oxpy_raise_status(st);
  }
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; i < n; i++) {
    PyObject* o = list ? value_wrap(vals[i]) : NULL;
    if (!list) onyx_value_release(vals[i]);
    if (list && !o) Py_CLEAR(list);
    if (o) PyList_SET_ITEM(list, (Py_ssize_t)i, o);
  }
  PyMem_Free(vals);
  return list;
}

/* run(run_options=None): onyx_session_run_with_binding, the GIL released. */
static PyObject* io_binding_run(IoBindingObject* self, PyObject* args) {
  PyObject* ro_obj = Py_None;
  if (!PyArg_ParseTuple(args, "|O", &ro_obj)) return NULL;
  OnyxIoBinding* b = binding_get(self);
  if (!b) return NULL;
  const OnyxRunOptions* ro = NULL;
  if (oxpy_run_options(ro_obj, &ro) < 0) return NULL;
  OnyxSession* s = oxpy_session_enter(self->session);
  if (!s) return NULL;
  OnyxStatus* st = NULL;
  self->busy = 1;
  Py_INCREF(self);
  Py_INCREF(args);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_session_run_with_binding(s, ro, b);
  Py_END_ALLOW_THREADS;
  Py_DECREF(args);
  self->busy = 0;
  oxpy_session_leave(self->session);
  Py_DECREF(self);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyMethodDef io_binding_methods[] = {
    {"bind_input", (PyCFunction)io_binding_bind_input, METH_VARARGS, "bind_input(name, Value)"},
    {"bind_output", (PyCFunction)io_binding_bind_output, METH_VARARGS,
     "bind_output(name, Value or None)"},
    {"clear_inputs", (PyCFunction)io_binding_clear_inputs, METH_NOARGS, ""},
    {"clear_outputs", (PyCFunction)io_binding_clear_outputs, METH_NOARGS, ""},
    {"output_names", (PyCFunction)io_binding_output_names, METH_NOARGS, "bound outputs, in order"},
    {"get_outputs", (PyCFunction)io_binding_get_outputs, METH_NOARGS, "[Value]"},
    {"run", (PyCFunction)io_binding_run, METH_VARARGS, "run(run_options=None)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IoBindingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.IoBinding",
    .tp_basicsize = sizeof(IoBindingObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxIoBinding",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)io_binding_init,
    .tp_dealloc = (destructor)io_binding_dealloc,
    .tp_methods = io_binding_methods,
};

int oxpy_values_add(PyObject* module) {
  if (PyType_Ready(&ValueType) < 0 || PyType_Ready(&IoBindingType) < 0) return -1;
  if (PyModule_AddObjectRef(module, "Value", (PyObject*)&ValueType) < 0 ||
      PyModule_AddObjectRef(module, "IoBinding", (PyObject*)&IoBindingType) < 0)
    return -1;
  return 0;
}
