/* _onyx_training.c — the training API (sdk/include/onyx/onyx_training.h) in
 * the onyx._onyx extension; onyx/training/ builds onnxruntime-training's
 * classes on these.
 *
 *   _onyx.generate_artifacts(model_path, out_dir, loss, optimizer, lr,
 *                            trainable, frozen, clip_grad_norm)
 *   _onyx.Checkpoint(dir)   OnyxCheckpoint: parameters, save, step count
 *   _onyx.TrainingSession(checkpoint, artifacts_dir, options)
 *                           OnyxTrainingSession: steps (GIL released),
 *                           learning rate, export
 *
 * A training session is used from one thread at a time (onyx_training.h):
 * a step while another is in flight on the same session raises instead of
 * racing.
 */
#include "_onyx_internal.h"

#include <math.h>
#include <string.h>

#include "onyx/onyx_training.h"

/* A list of str (or None: NULL, 0) as borrowed UTF-8 pointers, valid while
 * the list is alive; *names is PyMem-allocated. -1 with an error set. */
static int name_list(PyObject* obj, const char* what, const char*** names, size_t* n) {
  *names = NULL;
  *n = 0;
  if (obj == Py_None) return 0;
  if (!PyList_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a list of str, got %s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  Py_ssize_t len = PyList_GET_SIZE(obj);
  const char** out = PyMem_Calloc((size_t)(len > 0 ? len : 1), sizeof(char*));
  if (!out) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    PyObject* item = PyList_GET_ITEM(obj, i);
    if (!PyUnicode_Check(item)) {
      PyErr_Format(PyExc_TypeError, "%s: item %zd is %s, not str", what, i, Py_TYPE(item)->tp_name);
      PyMem_Free(out);
      return -1;
    }
    out[i] = PyUnicode_AsUTF8(item);
    if (!out[i]) {
      PyMem_Free(out);
      return -1;
    }
  }
  *names = out;
  *n = (size_t)len;
  return 0;
}

/* generate_artifacts(model_path, out_dir, loss, optimizer, lr, trainable,
 * frozen, clip_grad_norm[, mixed_precision]) */
static PyObject* py_generate_artifacts(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* model = NULL;
  PyObject* out_dir = NULL;
  int loss = 0, optimizer = 0, clip = 0, mixed = 0;
  float lr = 1e-3f;
  PyObject* trainable = Py_None;
  PyObject* frozen = Py_None;
  if (!PyArg_ParseTuple(args, "O&O&iifOOp|i", PyUnicode_FSConverter, &model, PyUnicode_FSConverter,
                        &out_dir, &loss, &optimizer, &lr, &trainable, &frozen, &clip, &mixed)) {
    Py_XDECREF(model);
    Py_XDECREF(out_dir);
    return NULL;
  }
  PyObject* result = NULL;
  OnyxTrainingArtifactsOptions ao;
  onyx_training_artifacts_options_init(&ao);
  const char** tr = NULL;
  const char** fr = NULL;
  size_t ntr = 0, nfr = 0;
  if (name_list(trainable, "requires_grad", &tr, &ntr) < 0 ||
      name_list(frozen, "frozen_params", &fr, &nfr) < 0)
    goto done;
  ao.loss = (OnyxLossKind)loss;
  ao.optimizer = (OnyxOptimizerKind)optimizer;
  ao.learning_rate = lr;
  if (optimizer != ONYX_OPTIMIZER_ADAMW) {
    /* The chosen optimizer's defaults rather than AdamW's (init's). */
    ao.weight_decay = -1.0f;
    ao.beta1 = -1.0f;
    ao.beta2 = -1.0f;
    ao.epsilon = NAN;
  }
  ao.trainable = tr;
  ao.trainable_count = ntr;
  ao.frozen = fr;
  ao.frozen_count = nfr;
  ao.clip_grad_norm = clip;
  ao.mixed_precision = mixed;
  OnyxStatus* st = NULL;
  const char* mp = PyBytes_AS_STRING(model);
  const char* od = PyBytes_AS_STRING(out_dir);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_training_artifacts_generate(mp, &ao, od);
  Py_END_ALLOW_THREADS;
  if (st) {
    oxpy_raise_status(st);
    goto done;
  }
  result = Py_NewRef(Py_None);
done:
  PyMem_Free(tr);
  PyMem_Free(fr);
  Py_DECREF(model);
  Py_DECREF(out_dir);
  return result;
}

/* --- Checkpoint ------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD OnyxCheckpoint* ck;
  /* Steps in flight (GIL released) of training sessions made on it: its
   * tensors must not be written or saved under them. */
  Py_ssize_t busy;
} CheckpointObject;

static int checkpoint_init(CheckpointObject* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"path", NULL};
  PyObject* path = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", kwlist, PyUnicode_FSConverter, &path)) return -1;
  if (self->ck) {
    Py_DECREF(path);
    PyErr_SetString(PyExc_RuntimeError, "Checkpoint already initialized");
    return -1;
  }
  OnyxStatus* st = NULL;
  OnyxCheckpoint* ck = NULL;
  const char* p = PyBytes_AS_STRING(path);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_checkpoint_load(p, &ck);
  Py_END_ALLOW_THREADS;
  Py_DECREF(path);
  if (st) {
    oxpy_raise_status(st);
    return -1;
  }
  self->ck = ck;
  return 0;
}

static void checkpoint_dealloc(CheckpointObject* self) {
  /* Sessions hold a reference, so none is alive. */
  onyx_checkpoint_release(self->ck);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static OnyxCheckpoint* checkpoint_get(CheckpointObject* self) {
  if (!self->ck) {
    PyErr_SetString(PyExc_RuntimeError, "Checkpoint not initialized");
    return NULL;
  }
  return self->ck;
}

/* The checkpoint for a write or a save: none while a step runs on it. */
static OnyxCheckpoint* checkpoint_get_idle(CheckpointObject* self, const char* what) {
  OnyxCheckpoint* ck = checkpoint_get(self);
  if (ck && self->busy) {
    char msg[200];
    PyOS_snprintf(msg, sizeof msg,
                  "%s: a training step on this checkpoint is running in another thread", what);
    oxpy_raise_message(ONYX_INVALID_ARGUMENT, msg);
    return NULL;
  }
  return ck;
}

static PyObject* checkpoint_save(CheckpointObject* self, PyObject* args) {
  PyObject* path = NULL;
  int with_state = 0;
  if (!PyArg_ParseTuple(args, "O&p", PyUnicode_FSConverter, &path, &with_state)) return NULL;
  OnyxCheckpoint* ck = checkpoint_get_idle(self, "save_checkpoint");
  if (!ck) {
    Py_DECREF(path);
    return NULL;
  }
  OnyxStatus* st = NULL;
  const char* p = PyBytes_AS_STRING(path);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_checkpoint_save(ck, p, with_state);
  Py_END_ALLOW_THREADS;
  Py_DECREF(path);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

/* A list of the names given by count/name. */
static PyObject* names_of(const OnyxCheckpoint* ck, size_t (*count)(const OnyxCheckpoint*),
                          const char* (*name)(const OnyxCheckpoint*, size_t)) {
  size_t n = count(ck);
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    const char* s = name(ck, i);
    PyObject* u = PyUnicode_FromString(s ? s : "");
    if (!u) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, u);
  }
  return list;
}

static PyObject* checkpoint_parameter_names(CheckpointObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxCheckpoint* ck = checkpoint_get(self);
  return ck ? names_of(ck, onyx_checkpoint_parameter_count, onyx_checkpoint_parameter_name) : NULL;
}

static PyObject* checkpoint_state_names(CheckpointObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxCheckpoint* ck = checkpoint_get(self);
  return ck ? names_of(ck, onyx_checkpoint_state_count, onyx_checkpoint_state_name) : NULL;
}

/* A NumPy copy of a tensor value (released here). The checkpoint's values
 * share its memory, which a later step updates and which dies with the
 * checkpoint: the copy is a snapshot the caller may keep. */
static PyObject* copy_array(OnyxValue* v, const char* name) {
  PyObject* shared = oxpy_output_array(v, name);
  if (!shared) return NULL;
  PyObject* copy = PyArray_NewCopy((PyArrayObject*)shared, NPY_CORDER);
  Py_DECREF(shared);
  return copy;
}

static PyObject* checkpoint_get_parameter(CheckpointObject* self, PyObject* args) {
  const char* name = NULL;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  OnyxCheckpoint* ck = checkpoint_get(self);
  if (!ck) return NULL;
  OnyxValue* v = NULL;
  OnyxStatus* st = onyx_checkpoint_get_parameter(ck, name, &v);
  if (st) return oxpy_raise_status(st);
  return copy_array(v, name);
}

static PyObject* checkpoint_get_state(CheckpointObject* self, PyObject* args) {
  const char* name = NULL;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  OnyxCheckpoint* ck = checkpoint_get(self);
  if (!ck) return NULL;
  OnyxValue* v = NULL;
  OnyxStatus* st = onyx_checkpoint_get_state(ck, name, &v);
  if (st) return oxpy_raise_status(st);
  return copy_array(v, name);
}

static PyObject* checkpoint_set_parameter(CheckpointObject* self, PyObject* args) {
  const char* name = NULL;
  PyObject* value = NULL;
  if (!PyArg_ParseTuple(args, "sO", &name, &value)) return NULL;
  OnyxCheckpoint* ck = checkpoint_get_idle(self, "set_parameter");
  if (!ck) return NULL;
  OnyxValue* v = oxpy_feed_value(value, name);
  if (!v) return NULL;
  OnyxStatus* st = onyx_checkpoint_set_parameter(ck, name, v);
  onyx_value_release(v);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* checkpoint_trainable(CheckpointObject* self, PyObject* args) {
  const char* name = NULL;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  OnyxCheckpoint* ck = checkpoint_get(self);
  if (!ck) return NULL;
  return PyLong_FromLong(onyx_checkpoint_parameter_trainable(ck, name));
}

static PyObject* checkpoint_step(CheckpointObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxCheckpoint* ck = checkpoint_get(self);
  return ck ? PyLong_FromLongLong(onyx_checkpoint_step(ck)) : NULL;
}

static PyMethodDef checkpoint_methods[] = {
    {"save", (PyCFunction)checkpoint_save, METH_VARARGS, "save(dir, include_optimizer_state)"},
    {"parameter_names", (PyCFunction)checkpoint_parameter_names, METH_NOARGS, "[name]"},
    {"state_names", (PyCFunction)checkpoint_state_names, METH_NOARGS, "[optimizer state name]"},
    {"get_parameter", (PyCFunction)checkpoint_get_parameter, METH_VARARGS, "a copy"},
    {"get_state", (PyCFunction)checkpoint_get_state, METH_VARARGS, "a copy"},
    {"set_parameter", (PyCFunction)checkpoint_set_parameter, METH_VARARGS,
     "set_parameter(name, array): same type and shape"},
    {"trainable", (PyCFunction)checkpoint_trainable, METH_VARARGS, "1, 0, or -1 (unknown)"},
    {"step", (PyCFunction)checkpoint_step, METH_NOARGS, "optimizer steps taken"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CheckpointType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.Checkpoint",
    .tp_basicsize = sizeof(CheckpointObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxCheckpoint",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)checkpoint_init,
    .tp_dealloc = (destructor)checkpoint_dealloc,
    .tp_methods = checkpoint_methods,
};

/* --- Training session ------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD OnyxTrainingSession* ts;
  PyObject* checkpoint; /* the CheckpointObject, kept alive for the session */
  int busy;             /* a step in flight (GIL released) */
} TrainingSessionObject;

static int training_session_init(TrainingSessionObject* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"checkpoint", "artifacts_dir", "options", NULL};
  PyObject* ck = NULL;
  PyObject* dir = NULL;
  PyObject* options = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O&|O", kwlist, &CheckpointType, &ck,
                                   PyUnicode_FSConverter, &dir, &options))
    return -1;
  if (self->ts) {
    Py_DECREF(dir);
    PyErr_SetString(PyExc_RuntimeError, "TrainingSession already initialized");
    return -1;
  }
  OnyxCheckpoint* c = checkpoint_get((CheckpointObject*)ck);
  if (!c) {
    Py_DECREF(dir);
    return -1;
  }
  const OnyxSessionOptions* opts = NULL;
  if (oxpy_options(options, &opts) < 0) {
    Py_DECREF(dir);
    return -1;
  }
  OnyxStatus* st = NULL;
  OnyxTrainingSession* ts = NULL;
  const char* d = PyBytes_AS_STRING(dir);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_training_session_create(opts, c, d, &ts);
  Py_END_ALLOW_THREADS;
  Py_DECREF(dir);
  if (st) {
    oxpy_raise_status(st);
    return -1;
  }
  self->ts = ts;
  self->checkpoint = Py_NewRef(ck);
  return 0;
}

static void training_session_dealloc(TrainingSessionObject* self) {
  onyx_training_session_release(self->ts);
  Py_XDECREF(self->checkpoint);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* The session, free for a step; NULL with an error raised. */
static OnyxTrainingSession* ts_get(TrainingSessionObject* self) {
  if (!self->ts) {
    PyErr_SetString(PyExc_RuntimeError, "TrainingSession not initialized");
    return NULL;
  }
  if (self->busy || ((CheckpointObject*)self->checkpoint)->busy) {
    oxpy_raise_message(ONYX_INVALID_ARGUMENT,
                       "a training step on this session's checkpoint is running in another "
                       "thread (one thread at a time)");
    return NULL;
  }
  return self->ts;
}

static PyObject* ts_input_names(TrainingSessionObject* self, PyObject* noargs) {
  (void)noargs;
  if (!self->ts) {
    PyErr_SetString(PyExc_RuntimeError, "TrainingSession not initialized");
    return NULL;
  }
  size_t n = onyx_training_session_input_count(self->ts);
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    const char* s = onyx_training_session_input_name(self->ts, i);
    PyObject* u = PyUnicode_FromString(s ? s : "");
    if (!u) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, u);
  }
  return list;
}

/* train_step / eval_step (list of arrays) -> loss (a 0-d float32 array). */
static PyObject* ts_step(TrainingSessionObject* self, PyObject* args, int train) {
  PyObject* inputs = NULL;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &inputs)) return NULL;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(inputs);
  size_t want = onyx_training_session_input_count(ts);
  if ((size_t)n != want) {
    char msg[256];
    PyOS_snprintf(msg, sizeof msg, "%s step: %zd inputs given, the model takes %zu",
                  train ? "train" : "eval", n, want);
    return oxpy_raise_message(ONYX_INVALID_ARGUMENT, msg);
  }
  OnyxValue** vals = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(OnyxValue*));
  if (!vals) return PyErr_NoMemory();
  PyObject* result = NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    const char* name = onyx_training_session_input_name(ts, (size_t)i);
    vals[i] = oxpy_feed_value(PyList_GET_ITEM(inputs, i), name ? name : "?");
    if (!vals[i]) goto done;
  }
  OnyxValue* loss = NULL;
  OnyxStatus* st = NULL;
  self->busy = 1;
  ((CheckpointObject*)self->checkpoint)->busy++;
  Py_INCREF(self);
  Py_BEGIN_ALLOW_THREADS;
  st = train ? onyx_training_session_train_step(ts, (const OnyxValue* const*)vals, (size_t)n, &loss)
             : onyx_training_session_eval_step(ts, (const OnyxValue* const*)vals, (size_t)n, &loss);
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  ((CheckpointObject*)self->checkpoint)->busy--;
  Py_DECREF(self);
  if (st) {
    oxpy_raise_status(st);
    goto done;
  }
  result = loss ? oxpy_output_array(loss, "loss") : Py_NewRef(Py_None);
done:
  for (Py_ssize_t i = 0; i < n; i++)
    onyx_value_release(vals[i]);
  PyMem_Free(vals);
  return result;
}

static PyObject* ts_train_step(TrainingSessionObject* self, PyObject* args) {
  return ts_step(self, args, 1);
}

static PyObject* ts_eval_step(TrainingSessionObject* self, PyObject* args) {
  return ts_step(self, args, 0);
}

static PyObject* ts_optimizer_step(TrainingSessionObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) return NULL;
  OnyxStatus* st = NULL;
  self->busy = 1;
  ((CheckpointObject*)self->checkpoint)->busy++;
  Py_INCREF(self);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_training_session_optimizer_step(ts);
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  ((CheckpointObject*)self->checkpoint)->busy--;
  Py_DECREF(self);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* ts_lazy_reset_grad(TrainingSessionObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) return NULL;
  OnyxStatus* st = onyx_training_session_lazy_reset_grad(ts);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* ts_set_learning_rate(TrainingSessionObject* self, PyObject* args) {
  float lr = 0.0f;
  if (!PyArg_ParseTuple(args, "f", &lr)) return NULL;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) return NULL;
  OnyxStatus* st = onyx_training_session_set_learning_rate(ts, lr);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject* ts_get_learning_rate(TrainingSessionObject* self, PyObject* noargs) {
  (void)noargs;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) return NULL;
  return PyFloat_FromDouble((double)onyx_training_session_get_learning_rate(ts));
}

static PyObject* ts_export(TrainingSessionObject* self, PyObject* args) {
  PyObject* path = NULL;
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path)) return NULL;
  OnyxTrainingSession* ts = ts_get(self);
  if (!ts) {
    Py_DECREF(path);
    return NULL;
  }
  OnyxStatus* st = NULL;
  const char* p = PyBytes_AS_STRING(path);
  Py_BEGIN_ALLOW_THREADS;
  st = onyx_training_session_export_for_inference(ts, p);
  Py_END_ALLOW_THREADS;
  Py_DECREF(path);
  if (st) return oxpy_raise_status(st);
  Py_RETURN_NONE;
}

static PyMethodDef training_session_methods[] = {
    {"input_names", (PyCFunction)ts_input_names, METH_NOARGS,
     "the model's inputs, then the labels"},
    {"train_step", (PyCFunction)ts_train_step, METH_VARARGS, "train_step([arrays]) -> loss"},
    {"eval_step", (PyCFunction)ts_eval_step, METH_VARARGS, "eval_step([arrays]) -> loss"},
    {"optimizer_step", (PyCFunction)ts_optimizer_step, METH_NOARGS, "update the parameters"},
    {"lazy_reset_grad", (PyCFunction)ts_lazy_reset_grad, METH_NOARGS, "zero the gradients"},
    {"set_learning_rate", (PyCFunction)ts_set_learning_rate, METH_VARARGS, "base rate"},
    {"get_learning_rate", (PyCFunction)ts_get_learning_rate, METH_NOARGS, "next step's rate"},
    {"export_for_inference", (PyCFunction)ts_export, METH_VARARGS, "export_for_inference(path)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TrainingSessionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onyx._onyx.TrainingSession",
    .tp_basicsize = sizeof(TrainingSessionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OnyxTrainingSession",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)training_session_init,
    .tp_dealloc = (destructor)training_session_dealloc,
    .tp_methods = training_session_methods,
};

static PyMethodDef training_functions[] = {
    {"generate_artifacts", py_generate_artifacts, METH_VARARGS,
     "generate_artifacts(model_path, out_dir, loss, optimizer, lr, trainable, frozen, clip)"},
    {NULL, NULL, 0, NULL},
};

int oxpy_training_add(PyObject* module) {
  if (PyType_Ready(&CheckpointType) < 0 || PyType_Ready(&TrainingSessionType) < 0) return -1;
  if (PyModule_AddObjectRef(module, "Checkpoint", (PyObject*)&CheckpointType) < 0 ||
      PyModule_AddObjectRef(module, "TrainingSession", (PyObject*)&TrainingSessionType) < 0)
    return -1;
  return PyModule_AddFunctions(module, training_functions);
}
