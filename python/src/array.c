/* The Array type: a typed view of a batch's memory with the buffer
 * protocol, numpy's __array_interface__ and DLPack. */
#include "binding.h"

#include <stdlib.h>
#include <string.h>

const struct dtype_info dtypes[] = {
    [DT_U8] = {"B", "uint8", 1, kDLUInt},
    [DT_I32] = {"i", "int32", 4, kDLInt},
    [DT_U64] = {"Q", "uint64", 8, kDLUInt},
    [DT_F32] = {"f", "float32", 4, kDLFloat},
    [DT_I64] = {"q", "int64", 8, kDLInt},
};

/* ---- Array: a typed view with the buffer protocol and DLPack ---------------- */

static void Array_dealloc(ArrayObject *self) {
  Py_XDECREF(self->base);
  PyObject_Del(self);
}

static int Array_getbuffer(ArrayObject *self, Py_buffer *view, int flags) {
  (void)flags;
  view->buf = self->ptr;
  view->obj = (PyObject *)self;
  Py_INCREF(self);
  view->len = self->nbytes;
  view->readonly = 0;
  view->itemsize = dtypes[self->dt].size;
  view->format = (char *)dtypes[self->dt].fmt;
  view->ndim = self->ndim;
  view->shape = self->shape;
  view->strides = self->strides;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static PyBufferProcs Array_buffer = {(getbufferproc)Array_getbuffer, NULL};

struct managed {
  DLManagedTensor t;
  int64_t shape[4];
};

/* The consumer is done: drop the reference the capsule held (from any
 * thread, hence the GIL). */
static void dl_deleter(DLManagedTensor *t) {
  if (!t) return;
  PyObject *owner = t->manager_ctx;
  if (Py_IsInitialized()) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(owner);
    PyGILState_Release(g);
  }
  free(t);
}

static void dl_capsule_free(PyObject *cap) {
  /* Still named "dltensor": no consumer took it. */
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
    if (t && t->deleter) t->deleter(t);
  }
}

static PyObject *Array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO:__dlpack__", kwlist, &stream, &maxv, &dev,
                                   &copy))
    return NULL;
  if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
    PyErr_SetString(PyExc_BufferError, "stream: a CPU array takes no stream");
    return NULL;
  }
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError, "copy=True: stoker arrays are exported without a copy");
    return NULL;
  }
  struct managed *m = calloc(1, sizeof *m);
  if (!m) return PyErr_NoMemory();
  DLTensor *t = &m->t.dl_tensor;
  t->data = self->ptr;
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = self->ndim;
  t->dtype.code = dtypes[self->dt].code;
  t->dtype.bits = (uint8_t)(8 * dtypes[self->dt].size);
  t->dtype.lanes = 1;
  for (int i = 0; i < self->ndim; i++) m->shape[i] = self->shape[i];
  t->shape = m->shape;
  t->strides = NULL; /* compact row-major */
  t->byte_offset = 0;
  m->t.manager_ctx = self;
  m->t.deleter = dl_deleter;
  Py_INCREF(self);
  PyObject *cap = PyCapsule_New(&m->t, "dltensor", dl_capsule_free);
  if (!cap) {
    Py_DECREF(self);
    free(m);
    return NULL;
  }
  return cap;
}

static PyObject *Array_dlpack_device(ArrayObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_BuildValue("(ii)", kDLCPU, 0);
}

static PyObject *Array_tobytes(ArrayObject *self, PyObject *unused) {
  (void)unused;
  return PyBytes_FromStringAndSize(self->ptr, self->nbytes);
}

static PyObject *Array_get_shape(ArrayObject *self, void *closure) {
  (void)closure;
  PyObject *t = PyTuple_New(self->ndim);
  for (int i = 0; t && i < self->ndim; i++)
    PyTuple_SET_ITEM(t, i, PyLong_FromSsize_t(self->shape[i]));
  return t;
}

static PyObject *Array_get_dtype(ArrayObject *self, void *closure) {
  (void)closure;
  return PyUnicode_FromString(dtypes[self->dt].name);
}

static PyObject *Array_get_nbytes(ArrayObject *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->nbytes);
}

static PyObject *Array_get_ptr(ArrayObject *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *Array_get_base(ArrayObject *self, void *closure) {
  (void)closure;
  Py_INCREF(self->base);
  return self->base;
}

/* numpy's fast path (no buffer round trip): version 3 array interface. */
static PyObject *Array_get_array_interface(ArrayObject *self, void *closure) {
  (void)closure;
  static const char *typestr[] = {
      [DT_U8] = "|u1", [DT_I32] = "<i4", [DT_U64] = "<u8", [DT_F32] = "<f4"};
  PyObject *shape = Array_get_shape(self, NULL);
  if (!shape) return NULL;
  PyObject *r = Py_BuildValue("{s:N,s:s,s:(NO),s:i}", "shape", shape, "typestr", typestr[self->dt],
                              "data", PyLong_FromVoidPtr(self->ptr), Py_False, "version", 3);
  return r;
}

static Py_ssize_t Array_len(ArrayObject *self) { return self->ndim ? self->shape[0] : 0; }

static PyObject *Array_repr(ArrayObject *self) {
  PyObject *shape = Array_get_shape(self, NULL);
  if (!shape) return NULL;
  PyObject *r =
      PyUnicode_FromFormat("<stoker.Array shape=%R dtype=%s>", shape, dtypes[self->dt].name);
  Py_DECREF(shape);
  return r;
}

static PyMethodDef Array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))Array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None)\n\nA DLPack capsule over this memory (no copy)."},
    {"__dlpack_device__", (PyCFunction)Array_dlpack_device, METH_NOARGS,
     "(device_type, device_id): (1, 0), host memory."},
    {"tobytes", (PyCFunction)Array_tobytes, METH_NOARGS, "A copy of the bytes."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Array_getset[] = {
    {"shape", (getter)Array_get_shape, NULL, "Shape tuple.", NULL},
    {"dtype", (getter)Array_get_dtype, NULL, "Element type name (numpy's spelling).", NULL},
    {"nbytes", (getter)Array_get_nbytes, NULL, "Size in bytes.", NULL},
    {"data_ptr", (getter)Array_get_ptr, NULL, "Address of the first element.", NULL},
    {"batch", (getter)Array_get_base, NULL, "The Batch this array views.", NULL},
    {"__array_interface__", (getter)Array_get_array_interface, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Array_seq_methods = {.sq_length = (lenfunc)Array_len};

PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "A typed view of a batch's memory: buffer protocol, __array_interface__ and "
        "DLPack (numpy.asarray, memoryview, torch.from_dlpack share it, no copy). "
        "It keeps its batch alive.",
    .tp_dealloc = (destructor)Array_dealloc,
    .tp_as_buffer = &Array_buffer,
    .tp_methods = Array_methods,
    .tp_getset = Array_getset,
    .tp_as_sequence = &Array_seq_methods,
    .tp_repr = (reprfunc)Array_repr,
};

