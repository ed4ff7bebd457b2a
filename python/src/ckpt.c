/* The checkpoint tier for Python (stoker._stoker.Checkpoint): one rank's
 * handle on a node-local checkpoint directory (stk_ckpt, include/stoker/
 * ckpt.h), what stoker.torch's DCP storage writer and reader are built on.
 *
 *   Checkpoint(dir, rank, world, origin, threads, direct, fsync, keep_last,
 *              max_bytes, no_stage)
 *   .save(step, [(name, buffer), ...])  durable locally on return (GIL released;
 *                                       the buffers are read in place, no copy)
 *   .latest()      newest complete step of this rank (local or origin), or None
 *   .load(step)    a CheckpointData (None = the newest), every CRC checked
 *   .drain_wait()  wait for queued drains; their first error raised
 *   .stats()       dict of struct stk_ckpt_stats
 *   .close()       wait for drains, free
 *
 * CheckpointData: .step, len(), .names(), .view(name) -> a writable
 * memoryview over the object's bytes that keeps the data alive (a private
 * copy: writing it changes nothing on disk). */
#include "binding.h"

#include <string.h>

#include "stoker/ckpt.h"

typedef struct {
  PyObject_HEAD struct stk_ckpt *c;
  int busy; /* calls running without the GIL */
} CkptObject;

typedef struct {
  PyObject_HEAD struct stk_ckpt_data *d;
} CkptDataObject;

/* One object's bytes, for memoryview(): holds the data alive. */
typedef struct {
  PyObject_HEAD PyObject *owner;
  void *ptr;
  Py_ssize_t len;
} CkptBufObject;

static PyTypeObject CkptType, CkptDataType, CkptBufType;

/* ---- Checkpoint ------------------------------------------------------------ */

static int ckpt_init(CkptObject *self, PyObject *args, PyObject *kw) {
  static char *kws[] = {"dir",    "rank",  "world",     "origin",    "threads",
                        "direct", "fsync", "keep_last", "max_bytes", "no_stage", NULL};
  const char *dir, *origin = NULL;
  unsigned int rank = 0, world = 1, threads = 0, keep_last = 0;
  int direct = 1, fsync = 1, no_stage = 0;
  unsigned long long max_bytes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|IIzIppIKp:Checkpoint", kws, &dir, &rank, &world,
                                   &origin, &threads, &direct, &fsync, &keep_last, &max_bytes,
                                   &no_stage))
    return -1;
  if (self->c) {
    PyErr_SetString(PyExc_RuntimeError, "Checkpoint: already open");
    return -1;
  }
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = dir;
  o.rank = rank;
  o.world = world;
  o.origin = origin;
  o.threads = threads;
  o.direct = direct ? 0 : -1;
  o.no_fsync = !fsync;
  o.keep_last = keep_last;
  o.max_bytes = max_bytes;
  o.no_stage = no_stage;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = stk_ckpt_open(&self->c, &o, err);
  Py_END_ALLOW_THREADS log_drain();
  if (rc) {
    self->c = NULL;
    raise_stk(rc, err);
    return -1;
  }
  return 0;
}

static int ckpt_usable(CkptObject *self) {
  if (!self->c) {
    PyErr_SetString(PyExc_ValueError, "Checkpoint: closed");
    return 0;
  }
  return 1;
}

static PyObject *ckpt_close(CkptObject *self, PyObject *unused) {
  (void)unused;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Checkpoint.close: a call on another thread is running");
    return NULL;
  }
  struct stk_ckpt *c = self->c;
  self->c = NULL;
  Py_BEGIN_ALLOW_THREADS stk_ckpt_close(c);
  Py_END_ALLOW_THREADS log_drain();
  Py_RETURN_NONE;
}

static void ckpt_dealloc(CkptObject *self) {
  if (self->c) {
    Py_BEGIN_ALLOW_THREADS stk_ckpt_close(self->c);
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* save(step, objects): objects a sequence of (name, buffer). */
static PyObject *ckpt_save(CkptObject *self, PyObject *args) {
  unsigned long long step;
  PyObject *seq_in;
  if (!PyArg_ParseTuple(args, "KO:save", &step, &seq_in) || !ckpt_usable(self)) return NULL;
  PyObject *seq = PySequence_Fast(seq_in, "save: objects must be a sequence of (name, buffer)");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  struct stk_ckpt_obj *objs = PyMem_Calloc((size_t)n + 1, sizeof *objs);
  Py_buffer *bufs = PyMem_Calloc((size_t)n + 1, sizeof *bufs);
  Py_ssize_t got = 0;
  PyObject *ret = NULL;
  if (!objs || !bufs) {
    PyErr_NoMemory();
    goto out;
  }
  for (; got < n; got++) {
    PyObject *it = PySequence_Fast_GET_ITEM(seq, got);
    const char *name;
    if (!PyTuple_Check(it) ||
        !PyArg_ParseTuple(it, "sy*;save: each object must be (name: str, buffer)", &name,
                          &bufs[got]))
      goto out;
    if (!PyBuffer_IsContiguous(&bufs[got], 'C')) {
      PyBuffer_Release(&bufs[got]);
      PyErr_Format(PyExc_ValueError, "save: object %s: buffer is not contiguous", name);
      goto out;
    }
    objs[got] =
        (struct stk_ckpt_obj){.name = name, .data = bufs[got].buf, .size = (uint64_t)bufs[got].len};
  }
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS rc = stk_ckpt_save(self->c, step, objs, (size_t)n, err);
  Py_END_ALLOW_THREADS self->busy--;
  log_drain();
  if (rc) {
    raise_stk(rc, err);
  } else {
    Py_INCREF(Py_None);
    ret = Py_None;
  }
out:
  for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
  PyMem_Free(bufs);
  PyMem_Free(objs);
  Py_DECREF(seq);
  return ret;
}

static PyObject *ckpt_latest(CkptObject *self, PyObject *unused) {
  (void)unused;
  if (!ckpt_usable(self)) return NULL;
  uint64_t step = 0;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS rc = stk_ckpt_latest(self->c, &step, err);
  Py_END_ALLOW_THREADS self->busy--;
  log_drain();
  if (rc == STK_ENOENT) Py_RETURN_NONE;
  if (rc) return raise_stk(rc, err);
  return PyLong_FromUnsignedLongLong(step);
}

static PyObject *ckpt_load(CkptObject *self, PyObject *args) {
  PyObject *step_o = Py_None;
  if (!PyArg_ParseTuple(args, "|O:load", &step_o) || !ckpt_usable(self)) return NULL;
  uint64_t step = UINT64_MAX;
  if (step_o != Py_None) {
    step = PyLong_AsUnsignedLongLong(step_o);
    if (PyErr_Occurred()) return NULL;
  }
  CkptDataObject *out = PyObject_New(CkptDataObject, &CkptDataType);
  if (!out) return NULL;
  out->d = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS rc = stk_ckpt_load(self->c, step, &out->d, err);
  Py_END_ALLOW_THREADS self->busy--;
  log_drain();
  if (rc) {
    Py_DECREF(out);
    return raise_stk(rc, err);
  }
  return (PyObject *)out;
}

static PyObject *ckpt_drain_wait(CkptObject *self, PyObject *unused) {
  (void)unused;
  if (!ckpt_usable(self)) return NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS rc = stk_ckpt_drain_wait(self->c, err);
  Py_END_ALLOW_THREADS self->busy--;
  log_drain();
  if (rc) return raise_stk(rc, err);
  Py_RETURN_NONE;
}

static PyObject *ckpt_stats(CkptObject *self, PyObject *unused) {
  (void)unused;
  if (!ckpt_usable(self)) return NULL;
  struct stk_ckpt_stats s = {0};
  stk_ckpt_stats(self->c, &s);
  return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "saves", s.saves, "save_bytes",
                       s.save_bytes, "save_ns", s.save_ns, "direct_writes", s.direct_writes,
                       "drains", s.drains, "drain_bytes", s.drain_bytes, "drain_ns", s.drain_ns,
                       "drain_errors", s.drain_errors, "evicted", s.evicted, "restores", s.restores,
                       "restore_bytes", s.restore_bytes, "restaged", s.restaged, "async_saves",
                       s.async_saves, "async_block_ns", s.async_block_ns, "busy_waits",
                       s.busy_waits, "busy_wait_ns", s.busy_wait_ns, "busy_skips", s.busy_skips);
}

static PyMethodDef ckpt_methods[] = {
    {"save", (PyCFunction)ckpt_save, METH_VARARGS,
     "save(step, [(name, buffer), ...]): save and commit; durable locally on return."},
    {"latest", (PyCFunction)ckpt_latest, METH_NOARGS,
     "Newest complete step of this rank (local or at the origin), or None."},
    {"load", (PyCFunction)ckpt_load, METH_VARARGS,
     "load(step=None) -> CheckpointData: the step (None = the newest), CRCs checked."},
    {"drain_wait", (PyCFunction)ckpt_drain_wait, METH_NOARGS,
     "Wait for queued drains; raise the first drain error."},
    {"stats", (PyCFunction)ckpt_stats, METH_NOARGS, "The handle's counters (a dict)."},
    {"close", (PyCFunction)ckpt_close, METH_NOARGS, "Wait for queued drains, then free."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject CkptType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Checkpoint",
    .tp_basicsize = sizeof(CkptObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One rank's handle on a checkpoint directory (libstoker's stk_ckpt).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ckpt_init,
    .tp_dealloc = (destructor)ckpt_dealloc,
    .tp_methods = ckpt_methods,
};

/* ---- CheckpointData and its buffers ---------------------------------------- */

static void data_dealloc(CkptDataObject *self) {
  stk_ckpt_data_free(self->d);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t data_len(CkptDataObject *self) {
  return (Py_ssize_t)stk_ckpt_data_count(self->d);
}

static PyObject *data_names(CkptDataObject *self, PyObject *unused) {
  (void)unused;
  size_t n = stk_ckpt_data_count(self->d);
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++) {
    PyObject *s =
        PyUnicode_DecodeUTF8(stk_ckpt_data_name(self->d, i),
                             (Py_ssize_t)strlen(stk_ckpt_data_name(self->d, i)), "surrogateescape");
    if (!s) {
      Py_CLEAR(l);
      break;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, s);
  }
  return l;
}

static PyObject *data_view(CkptDataObject *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s:view", &name)) return NULL;
  long i = stk_ckpt_data_find(self->d, name);
  if (i < 0) {
    PyErr_Format(PyExc_KeyError, "checkpoint step %llu has no object %s",
                 (unsigned long long)stk_ckpt_data_step(self->d), name);
    return NULL;
  }
  uint64_t size = 0;
  const void *p = stk_ckpt_data_bytes(self->d, (size_t)i, &size);
  CkptBufObject *b = PyObject_New(CkptBufObject, &CkptBufType);
  if (!b) return NULL;
  Py_INCREF(self);
  b->owner = (PyObject *)self;
  b->ptr = (void *)p;
  b->len = (Py_ssize_t)size;
  PyObject *mv = PyMemoryView_FromObject((PyObject *)b);
  Py_DECREF(b);
  return mv;
}

static PyObject *data_step(CkptDataObject *self, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(stk_ckpt_data_step(self->d));
}

static PyMethodDef data_methods[] = {
    {"names", (PyCFunction)data_names, METH_NOARGS, "The objects' names, in saved order."},
    {"view", (PyCFunction)data_view, METH_VARARGS,
     "view(name) -> memoryview of the object's bytes (KeyError when absent)."},
    {NULL, NULL, 0, NULL}};
static PyGetSetDef data_getset[] = {
    {"step", (getter)data_step, NULL, "The checkpoint's step.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};
static PySequenceMethods data_seq = {.sq_length = (lenfunc)data_len};

static PyTypeObject CkptDataType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.CheckpointData",
    .tp_basicsize = sizeof(CkptDataObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A restored checkpoint: its objects by name (Checkpoint.load).",
    .tp_dealloc = (destructor)data_dealloc,
    .tp_methods = data_methods,
    .tp_getset = data_getset,
    .tp_as_sequence = &data_seq,
};

static int buf_get(CkptBufObject *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, self->len, 0, flags);
}

static void buf_dealloc(CkptBufObject *self) {
  Py_XDECREF(self->owner);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs buf_procs = {.bf_getbuffer = (getbufferproc)buf_get};

static PyTypeObject CkptBufType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.CheckpointBuffer",
    .tp_basicsize = sizeof(CkptBufObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)buf_dealloc,
    .tp_as_buffer = &buf_procs,
};

int ckpt_add_types(PyObject *m) {
  if (PyType_Ready(&CkptType) < 0 || PyType_Ready(&CkptDataType) < 0 ||
      PyType_Ready(&CkptBufType) < 0)
    return -1;
  Py_INCREF(&CkptType);
  if (PyModule_AddObject(m, "Checkpoint", (PyObject *)&CkptType)) {
    Py_DECREF(&CkptType);
    return -1;
  }
  Py_INCREF(&CkptDataType);
  if (PyModule_AddObject(m, "CheckpointData", (PyObject *)&CkptDataType)) {
    Py_DECREF(&CkptDataType);
    return -1;
  }
  return 0;
}
