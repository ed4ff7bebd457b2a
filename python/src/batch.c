/* The Batch type: one struct stk_batch, handed back to the loader when
 * the batch and every view of it are gone; its fields as Arrays. */
#include "binding.h"

#include <string.h>
#include <unistd.h>

/* ---- Batch ----------------------------------------------------------------- */

static void Batch_dealloc(BatchObject *self) {
  LoaderObject *o = self->owner;
  if (o) {
    if (self->b && o->l && o->pid == getpid()) batch_release(o, self->b);
    self->b = NULL;
    o->live--;
    if (o->closed && o->live == 0) loader_finish(o);
    self->owner = NULL;
    Py_DECREF(o);
  }
  PyObject_Del(self);
}

PyObject *make_array(PyObject *base, void *ptr, int dt, int ndim, const Py_ssize_t *shape) {
  ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
  if (!a) return NULL;
  Py_INCREF(base);
  a->base = base;
  a->ptr = ptr;
  a->dt = dt;
  a->ndim = ndim;
  Py_ssize_t stride = dtypes[dt].size, n = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    a->shape[i] = shape[i];
    a->strides[i] = stride;
    stride *= shape[i];
  }
  for (int i = 0; i < ndim; i++) n *= shape[i];
  a->nbytes = n * dtypes[dt].size;
  return (PyObject *)a;
}

/* A token batch's arrays (include/stoker/tokens.h); 0, or -1 with an error
 * set when the loader does not serve token windows. */
static int token_batch(BatchObject *self, struct stk_token_batch *tb) {
  if (!self->owner->tok || stk_batch_tokens(self->owner->l, self->b, tb) != 0) {
    PyErr_SetString(PyExc_AttributeError, "not a token batch (the loader was opened without seq_len)");
    return -1;
  }
  return 0;
}

static PyObject *Batch_data(BatchObject *self, void *closure) {
  (void)closure;
  LoaderObject *o = self->owner;
  struct stk_batch *b = self->b;
  if (o->tok) { /* [rows, seq_len + 1] tokens */
    struct stk_token_batch tb;
    if (token_batch(self, &tb)) return NULL;
    Py_ssize_t shape[2] = {tb.rows, tb.cols};
    return make_array((PyObject *)self, tb.tokens, tb.type == STK_TOKENS_INT64 ? DT_I64 : DT_I32,
                      2, shape);
  }
  if (o->fixed) {
    Py_ssize_t shape[4] = {b->n, o->chw ? o->c : o->h, o->chw ? o->h : o->w, o->chw ? o->w : o->c};
    return make_array((PyObject *)self, b->data, o->f32 ? DT_F32 : DT_U8, 4, shape);
  }
  /* Variable-size samples: one byte array spanning them all (offsets[i],
   * lengths[i] say where each is). */
  uint64_t span = 0;
  for (uint32_t i = 0; i < b->n; i++)
    if (b->offsets[i] + b->len[i] > span) span = b->offsets[i] + b->len[i];
  Py_ssize_t shape[1] = {(Py_ssize_t)span};
  return make_array((PyObject *)self, b->data, DT_U8, 1, shape);
}

static PyObject *Batch_loss_mask(BatchObject *self, void *closure) {
  (void)closure;
  struct stk_token_batch tb;
  if (token_batch(self, &tb)) return NULL;
  Py_ssize_t shape[2] = {tb.rows, tb.cols};
  return make_array((PyObject *)self, (void *)tb.loss_mask, DT_U8, 2, shape);
}

/* [rows, cols + 1] int32: row i's first cu_count[i] entries are its
 * document boundaries (0 first, its real token count last). */
static PyObject *Batch_cu_seqlens(BatchObject *self, void *closure) {
  (void)closure;
  struct stk_token_batch tb;
  if (token_batch(self, &tb)) return NULL;
  Py_ssize_t shape[2] = {tb.rows, tb.cu_stride};
  return make_array((PyObject *)self, (void *)tb.cu_seqlens, DT_I32, 2, shape);
}

static PyObject *Batch_cu_count(BatchObject *self, void *closure) {
  (void)closure;
  struct stk_token_batch tb;
  if (token_batch(self, &tb)) return NULL;
  Py_ssize_t shape[1] = {tb.rows};
  return make_array((PyObject *)self, (void *)tb.cu_count, DT_I32, 1, shape);
}

static PyObject *Batch_windows(BatchObject *self, void *closure) {
  (void)closure;
  struct stk_token_batch tb;
  if (token_batch(self, &tb)) return NULL;
  Py_ssize_t shape[1] = {tb.rows};
  return make_array((PyObject *)self, (void *)tb.windows, DT_U64, 1, shape);
}

static PyObject *Batch_labels(BatchObject *self, void *closure) {
  (void)closure;
  if (self->owner->tok) Py_RETURN_NONE; /* windows carry no labels: tokens[:, 1:] are */
  Py_ssize_t shape[1] = {self->b->n};
  return make_array((PyObject *)self, (void *)self->b->labels, DT_I32, 1, shape);
}

static PyObject *Batch_indices(BatchObject *self, void *closure) {
  (void)closure;
  Py_ssize_t shape[1] = {self->b->n};
  return make_array((PyObject *)self, (void *)self->b->indices, DT_U64, 1, shape);
}

static PyObject *Batch_offsets(BatchObject *self, void *closure) {
  (void)closure;
  Py_ssize_t shape[1] = {self->b->n};
  if (self->owner->fixed) { /* compacted: sample i at i * sample_bytes */
    PyObject *l = PyList_New(self->b->n);
    for (uint32_t i = 0; l && i < self->b->n; i++)
      PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(i * self->owner->sample_bytes));
    return l;
  }
  return make_array((PyObject *)self, (void *)self->b->offsets, DT_U64, 1, shape);
}

static PyObject *Batch_lengths(BatchObject *self, void *closure) {
  (void)closure;
  Py_ssize_t shape[1] = {self->b->n};
  return make_array((PyObject *)self, (void *)self->b->len, DT_U64, 1, shape);
}

#define BATCH_U64(name, expr)                                       \
  static PyObject *Batch_##name(BatchObject *self, void *closure) { \
    (void)closure;                                                  \
    return PyLong_FromUnsignedLongLong((unsigned long long)(expr)); \
  }
BATCH_U64(epoch, self->b->epoch)
BATCH_U64(seq, self->b->seq)
BATCH_U64(skipped, self->b->skipped)
BATCH_U64(nbytes, self->b->bytes)

static Py_ssize_t Batch_len(BatchObject *self) { return self->b->n; }

/* batch[i]: sample i's bytes (or decoded image) as an array view. */
static PyObject *Batch_item(BatchObject *self, Py_ssize_t i) {
  struct stk_batch *b = self->b;
  LoaderObject *o = self->owner;
  if (i < 0 || i >= (Py_ssize_t)b->n) {
    PyErr_SetString(PyExc_IndexError, "batch index out of range");
    return NULL;
  }
  if (o->tok) { /* window i's tokens */
    struct stk_token_batch tb;
    if (token_batch(self, &tb)) return NULL;
    int dt = tb.type == STK_TOKENS_INT64 ? DT_I64 : DT_I32;
    Py_ssize_t shape[1] = {tb.cols};
    return make_array((PyObject *)self, (char *)tb.tokens + (size_t)i * tb.cols * dtypes[dt].size,
                      dt, 1, shape);
  }
  if (o->fixed) {
    Py_ssize_t shape[3] = {o->chw ? o->c : o->h, o->chw ? o->h : o->w, o->chw ? o->w : o->c};
    return make_array((PyObject *)self, b->data + (uint64_t)i * o->sample_bytes,
                      o->f32 ? DT_F32 : DT_U8, 3, shape);
  }
  Py_ssize_t shape[1] = {(Py_ssize_t)b->len[i]};
  return make_array((PyObject *)self, b->data + b->offsets[i], DT_U8, 1, shape);
}

/* A field's element type as a dtype name numpy knows ("float16", ...). */
static PyObject *field_tuple(BatchObject *self, const struct stk_field *f) {
  Py_ssize_t n[1] = {(Py_ssize_t)f->len};
  PyObject *bytes = make_array((PyObject *)self, (void *)f->data, DT_U8, 1, n);
  if (!bytes) return NULL;
  PyObject *shape = Py_None, *dtype = Py_None;
  Py_INCREF(Py_None);
  Py_INCREF(Py_None);
  if (f->type != STK_ELEM_NONE) {
    Py_DECREF(shape);
    Py_DECREF(dtype);
    dtype = PyUnicode_FromString(stk_elem_type_name(f->type));
    shape = PyTuple_New(f->ndim);
    for (int d = 0; shape && d < f->ndim; d++)
      PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLongLong(f->shape[d]));
    if (!dtype || !shape) {
      Py_DECREF(bytes);
      Py_XDECREF(dtype);
      Py_XDECREF(shape);
      return NULL;
    }
  }
  return Py_BuildValue("(sNNN)", f->name, bytes, dtype, shape);
}

/* _sample(i) -> (index, label, key, [(name, bytes Array, dtype or None,
 * shape or None), ...]): sample i of a decode="fields" batch, as the
 * library packed it (stk_batch_sample); every Array views the batch. */
static PyObject *Batch_sample(BatchObject *self, PyObject *arg) {
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  if (i < 0 || i >= (Py_ssize_t)self->b->n) {
    PyErr_SetString(PyExc_IndexError, "batch index out of range");
    return NULL;
  }
  struct stk_sample s;
  if (!self->owner->l) {
    PyErr_SetString(PyExc_RuntimeError,
                    "this batch's loader belongs to another process (inherited through fork)");
    return NULL;
  }
  if (stk_batch_sample(self->owner->l, self->b, (uint32_t)i, &s) != 0) {
    PyErr_SetString(PyExc_ValueError,
                    "not a fields batch (the loader was opened without decode=\"fields\")");
    return NULL;
  }
  PyObject *fields = PyList_New(s.nfields);
  for (int k = 0; fields && k < s.nfields; k++) {
    PyObject *t = field_tuple(self, &s.fields[k]);
    if (!t) {
      Py_CLEAR(fields);
      break;
    }
    PyList_SET_ITEM(fields, k, t);
  }
  if (!fields) return NULL;
  PyObject *key = PyUnicode_DecodeUTF8(s.key, (Py_ssize_t)strlen(s.key), "replace");
  if (!key) {
    Py_DECREF(fields);
    return NULL;
  }
  return Py_BuildValue("(KiNN)", (unsigned long long)s.index, (int)s.label, key, fields);
}

static PyMethodDef Batch_methods[] = {
    {"_sample", (PyCFunction)Batch_sample, METH_O,
     "_sample(i) -> (index, label, key, [(name, bytes, dtype, shape), ...]) of a fields batch."},
    {NULL, NULL, 0, NULL}};

static PyObject *Batch_repr(BatchObject *self) {
  return PyUnicode_FromFormat("<stoker.Batch n=%u epoch=%llu seq=%llu bytes=%llu>", self->b->n,
                              (unsigned long long)self->b->epoch, (unsigned long long)self->b->seq,
                              (unsigned long long)self->b->bytes);
}

static PyGetSetDef Batch_getset[] = {
    {"data", (getter)Batch_data, NULL,
     "The samples, zero-copy: (n, H, W, 3) or (n, 3, H, W) uint8/float32 for JPEG decode; one "
     "uint8 array spanning all samples otherwise (see offsets, lengths).",
     NULL},
    {"labels", (getter)Batch_labels, NULL, "int32 labels, -1 where the format has none.", NULL},
    {"indices", (getter)Batch_indices, NULL, "uint64 global sample numbers.", NULL},
    {"offsets", (getter)Batch_offsets, NULL, "Byte offset of each sample in data.", NULL},
    {"lengths", (getter)Batch_lengths, NULL, "Byte length of each sample.", NULL},
    {"epoch", (getter)Batch_epoch, NULL, "Epoch of the batch.", NULL},
    {"seq", (getter)Batch_seq, NULL, "Batch number since the loader started.", NULL},
    {"skipped", (getter)Batch_skipped, NULL, "Samples of this batch left out by on_error (skip or the default).", NULL},
    {"nbytes", (getter)Batch_nbytes, NULL, "Sum of the samples' lengths.", NULL},
    {"loss_mask", (getter)Batch_loss_mask, NULL,
     "Token batches: [rows, seq_len + 1] uint8, 1 on real tokens, 0 on padding.", NULL},
    {"cu_seqlens", (getter)Batch_cu_seqlens, NULL,
     "Token batches: [rows, seq_len + 2] int32; row i's first cu_count[i] entries are its "
     "document boundaries (0 first, its real token count last).", NULL},
    {"cu_count", (getter)Batch_cu_count, NULL, "Token batches: boundaries per row (int32).", NULL},
    {"windows", (getter)Batch_windows, NULL, "Token batches: each row's window number (uint64).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Batch_seq_methods = {
    .sq_length = (lenfunc)Batch_len,
    .sq_item = (ssizeargfunc)Batch_item,
};

PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "One batch, zero-copy. Its memory returns to the loader's pool when the batch and "
        "every view of it (arrays, memoryviews, numpy arrays, torch tensors) are gone.",
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_getset = Batch_getset,
    .tp_methods = Batch_methods,
    .tp_as_sequence = &Batch_seq_methods,
    .tp_repr = (reprfunc)Batch_repr,
};

