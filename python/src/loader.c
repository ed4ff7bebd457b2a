/* The Loader type: a libstoker loader (or token-window loader) opened
 * from an option dict, iterated for Batches without the GIL. */
#include "binding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Free the C loader and dataset: once closed and no batch is alive. The
 * pipeline's threads are joined here, without the GIL. */
void loader_finish(LoaderObject *self) {
  if (!self->l && !self->ds && !self->tok) return;
  if (self->busy) return; /* the last call in flight finishes it */
  if (self->pid != getpid()) {
    /* A copy inherited through fork (DataLoader workers): the pipeline's
     * threads live in the parent only, so there is nothing here to join
     * and nothing that may be freed; the child leaves it alone. */
    self->l = NULL;
    self->ds = NULL;
    self->tok = NULL;
    return;
  }
  struct stk_loader *l = self->l;
  struct stk_dataset *ds = self->ds;
  self->l = NULL;
  self->ds = NULL;
  /* Releases still waiting on the GPU reach the loader before it goes. */
  Py_BEGIN_ALLOW_THREADS if (self->pinned_on) stk_pinned_flush(&self->pinned);
  if (l) stk_loader_close(l);
  if (ds) stk_dataset_close(ds);
  if (self->tok) stk_tokens_close(self->tok);
  self->tok = NULL;
  Py_END_ALLOW_THREADS if (self->pinned_on) {
    stk_pinned_allocator_close(&self->pinned);
    self->pinned_on = 0;
  }
  log_drain();
}

/* Hand a batch back. A pinned one may still be the source of a copy the
 * GPU has not finished (x.cuda(non_blocking=True) returns at once, and
 * torch fences only memory its own allocator gave): the library records
 * an event on the stream the consumer copies on and gives the buffer back
 * to the pool once the event has completed. That stream is the one torch
 * calls current on this thread now (stream_fn); without one, or when it
 * fails, the legacy default stream of the pinned device, which waits for
 * every blocking stream. Called with the GIL. */
void batch_release(LoaderObject *o, struct stk_batch *b) {
  if (!o->pinned_on) {
    stk_batch_release(o->l, b);
    return;
  }
  unsigned long long stream = 0;
  int dev = -1;
  if (o->stream_fn) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallObject(o->stream_fn, NULL);
    if (!r ||
        !PyArg_ParseTuple(r, "Ki;the release stream: expected (stream, device)", &stream, &dev)) {
      PyErr_WriteUnraisable(o->stream_fn);
      stream = 0;
      dev = -1;
    }
    Py_XDECREF(r);
    PyErr_Restore(et, ev, tb);
  }
  struct stk_loader *l = o->l;
  o->busy++;
  Py_BEGIN_ALLOW_THREADS stk_pinned_release(&o->pinned, l, b, (void *)(uintptr_t)stream, dev);
  Py_END_ALLOW_THREADS o->busy--;
}

static int Loader_init(LoaderObject *self, PyObject *args, PyObject *kw) {
  const char *source;
  PyObject *d;
  if (kw && PyDict_Size(kw)) {
    PyErr_SetString(PyExc_TypeError, "_stoker.Loader takes (source, options)");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "sO!", &source, &PyDict_Type, &d)) return -1;
  if (self->l || self->ds) {
    PyErr_SetString(PyExc_RuntimeError, "the loader is already open");
    return -1;
  }
  Py_XSETREF(self->keep, PyList_New(0));
  if (!self->keep) return -1;
  memset(&self->dso, 0, sizeof self->dso);
  memset(&self->cache, 0, sizeof self->cache);
  if (parse_opts(self, d)) return -1;
  int pin = 0;
  if (opt_int(d, "pin_memory", &pin)) return -1;
  if (pin) {
    self->pin_err[0] = 0;
    int prc;
    int pin_dev = -1; /* stoker.Loader passes torch's current device */
    if (opt_int(d, "pin_device", &pin_dev)) return -1;
    Py_BEGIN_ALLOW_THREADS prc =
        stk_pinned_allocator_open_device(&self->pinned, pin_dev, self->pin_err);
    Py_END_ALLOW_THREADS if (prc == 0) {
      self->pinned_on = 1;
      self->o.alloc = &self->pinned;
    }
    else if (!self->pin_err[0]) { /* no GPU or no CUDA runtime: Python warns once */
      snprintf(self->pin_err, sizeof self->pin_err, "%s", stk_strerror(prc));
    }
  }
  char *err = self->errbuf;
  err[0] = 0;
  int rc;
  struct stk_dataset *ds = NULL;
  struct stk_loader *l = NULL;
  struct stk_tokens *tok = NULL;
  const char *paths[TOKEN_SOURCES_MAX];
  double weights[TOKEN_SOURCES_MAX];
  int nsrc = 0;
  if (parse_token_opts(self, d, source, paths, weights, &nsrc)) {
    if (self->pinned_on) stk_pinned_allocator_close(&self->pinned);
    self->pinned_on = 0;
    return -1;
  }
  Py_BEGIN_ALLOW_THREADS if (nsrc) {
    rc = stk_tokens_open(&tok, nsrc, paths, nsrc > 1 ? weights : NULL, &self->topts, err);
    if (!rc) {
      rc = stk_loader_open_tokens(&l, tok, &self->o, err);
      if (rc) {
        stk_tokens_close(tok);
        tok = NULL;
      }
    }
  }
  else {
    rc = stk_dataset_open(&ds, source, &self->dso, err);
    if (!rc) {
      rc = stk_loader_open(&l, ds, &self->o, err);
      if (rc) {
        stk_dataset_close(ds);
        ds = NULL;
      }
    }
  }
  Py_END_ALLOW_THREADS log_drain();
  if (rc) {
    if (self->pinned_on) stk_pinned_allocator_close(&self->pinned);
    self->pinned_on = 0;
    raise_stk(rc, err);
    return -1;
  }
  self->ds = ds;
  self->tok = tok;
  self->l = l;
  self->pid = getpid();
  self->closed = 0;
  self->live = 0;
  const struct stk_decode_cfg *dc = &self->dc;
  self->fixed = dc->kind == STK_DECODE_JPEG;
  if (self->fixed) {
    self->h = dc->out_h ? dc->out_h : 224;
    self->w = dc->out_w ? dc->out_w : 224;
    self->c = 3;
    self->chw = dc->layout == STK_LAYOUT_CHW;
    self->f32 = dc->dtype == STK_DTYPE_F32;
    self->sample_bytes = (uint64_t)self->h * self->w * self->c * (self->f32 ? 4 : 1);
  }
  return 0;
}

static void Loader_dealloc(LoaderObject *self) {
  /* Batches hold a reference, so none is alive here. */
  loader_finish(self);
  Py_XDECREF(self->keep);
  Py_XDECREF(self->stream_fn);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int loader_check_open(LoaderObject *self) {
  if (self->l && self->pid != getpid()) {
    PyErr_SetString(PyExc_RuntimeError,
                    "this loader was opened in another process (inherited through fork); "
                    "open a loader in each process");
    return -1;
  }
  if (self->closed || !self->l) {
    PyErr_SetString(PyExc_ValueError, self->interrupted
                                          ? "the loader was interrupted (Ctrl-C) and is closed"
                                          : "operation on a closed loader");
    return -1;
  }
  return 0;
}

/* Compact a fixed-size batch that lost samples (on_error=skip) so that its
 * n samples are back to back: the batch's memory is ours until release. */
static void compact_fixed(LoaderObject *self, struct stk_batch *b) {
  for (uint32_t i = 0; i < b->n; i++) {
    uint64_t want = (uint64_t)i * self->sample_bytes;
    if (b->offsets[i] != want) memmove(b->data + want, b->data + b->offsets[i], self->sample_bytes);
  }
}

static PyObject *Loader_next(LoaderObject *self) {
  if (loader_check_open(self)) return NULL;
  if (self->in_next) {
    PyErr_SetString(
        PyExc_RuntimeError,
        "another thread is waiting for a batch of this loader (one consumer per loader)");
    return NULL;
  }
  /* Every batch held by Python keeps a ring place. The ring grows for
   * them up to prefetch_max (16 unless given, at least prefetch); when
   * Python holds every place it may grow to, waiting would never end: say
   * so instead of hanging. */
  if (self->live >= 2) {
    struct stk_loader_stats st;
    stk_loader_stats(self->l, &st);
    uint32_t pmax = self->o.prefetch_max ? self->o.prefetch_max : 16;
    if (pmax < self->o.prefetch) pmax = self->o.prefetch;
    if ((uint64_t)self->live >= (uint64_t)st.ring_depth + 2 && st.ring_depth >= pmax)
      return raise_stk(STK_EBUSY,
                       "every batch buffer of the loader is held by a live batch "
                       "(arrays or tensors still point at it): release batches, copy the "
                       "ones to keep, or raise prefetch_max");
  }
  struct stk_batch *b = NULL;
  int rc;
  struct stk_loader *l = self->l;
  int armed = sigint_arm(l);
  self->busy++;
  self->in_next = 1;
  Py_BEGIN_ALLOW_THREADS rc = stk_loader_next(l, &b);
  Py_END_ALLOW_THREADS self->in_next = 0;
  self->busy--;
  sigint_disarm(armed);
  log_drain();
  if (self->closed) { /* close() from another thread while we waited */
    if (rc == 0) stk_batch_release(l, b);
    if (self->live == 0) loader_finish(self);
    if (armed && sig_hit && PyErr_CheckSignals()) return NULL;
    PyErr_SetString(PyExc_ValueError, "operation on a closed loader");
    return NULL;
  }
  if (armed && sig_hit) {
    if (rc == 0) stk_batch_release(self->l, b);
    self->interrupted = 1;
    self->closed = 1;
    if (self->live == 0) loader_finish(self);
    if (PyErr_CheckSignals()) return NULL; /* KeyboardInterrupt */
    PyErr_SetInterrupt();
    PyErr_CheckSignals();
    if (PyErr_Occurred()) return NULL;
    return raise_stk(STK_ECANCELED, "interrupted");
  }
  if (rc == STK_EOF) return NULL; /* StopIteration */
  if (rc) return raise_stk(rc, stk_loader_errmsg(self->l));
  BatchObject *bo = PyObject_New(BatchObject, &BatchType);
  if (!bo) {
    stk_batch_release(self->l, b);
    return NULL;
  }
  Py_INCREF(self);
  bo->owner = self;
  bo->b = b;
  self->live++;
  if (self->fixed && b->n && b->skipped) compact_fixed(self, b);
  return (PyObject *)bo;
}

static PyObject *Loader_close(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (!self->closed) {
    self->closed = 1;
    if (self->l && self->pid == getpid()) stk_loader_cancel(self->l);
  }
  if (self->live == 0) loader_finish(self);
  Py_RETURN_NONE;
}

static PyObject *Loader_enter(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (loader_check_open(self)) return NULL;
  Py_INCREF(self);
  return (PyObject *)self;
}

static PyObject *Loader_exit(LoaderObject *self, PyObject *args) {
  (void)args;
  PyObject *r = Loader_close(self, NULL);
  Py_XDECREF(r);
  if (!r) return NULL;
  Py_RETURN_FALSE;
}

static PyObject *Loader_state(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (!self->l || self->pid != getpid()) {
    loader_check_open(self); /* sets the reason */
    return NULL;
  }
  struct stk_sampler_state st;
  stk_loader_state(self->l, &st);
  return Py_BuildValue("(KKKK)", (unsigned long long)st.seed, (unsigned long long)st.epoch,
                       (unsigned long long)st.position, (unsigned long long)st.dataset_fp);
}

/* The stats as the JSON text of stk_loader_stats_json (json.loads'ed by
 * the Python side, so the keys are the C ones). */
static PyObject *Loader_stats_json(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (!self->l || self->pid != getpid()) {
    loader_check_open(self); /* sets the reason */
    return NULL;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return PyErr_NoMemory();
  struct stk_loader_stats st;
  struct stk_loader *l = self->l;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS stk_loader_stats(l, &st);
  struct stk_json j;
  stk_json_init(&j, f, 0);
  stk_loader_stats_json(&st, &j);
  fclose(f);
  Py_END_ALLOW_THREADS self->busy--;
  if (self->closed && self->live == 0) loader_finish(self);
  log_drain();
  PyObject *s = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)len);
  free(buf);
  return s;
}

static PyObject *Loader_engine(LoaderObject *self, void *closure) {
  (void)closure;
  if (!self->l || self->pid != getpid()) {
    loader_check_open(self); /* sets the reason */
    return NULL;
  }
  return PyUnicode_FromString(stk_loader_engine(self->l));
}

static PyObject *Loader_get_closed(LoaderObject *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->closed || !self->l);
}

static PyObject *Loader_get_live(LoaderObject *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->live);
}

static PyObject *Loader_get_pin_error(LoaderObject *self, void *closure) {
  (void)closure;
  if (!self->pin_err[0]) Py_RETURN_NONE;
  return PyUnicode_FromString(self->pin_err);
}

static PyObject *Loader_get_pinned(LoaderObject *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->pinned_on);
}

static PyObject *Loader_set_release_stream(LoaderObject *self, PyObject *fn) {
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "_set_release_stream: expected a callable or None");
    return NULL;
  }
  if (fn != Py_None) Py_INCREF(fn);
  Py_XSETREF(self->stream_fn, fn == Py_None ? NULL : fn);
  Py_RETURN_NONE;
}

static PyObject *Loader_epoch_batches(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (loader_check_open(self)) return NULL;
  uint64_t n = 0;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = stk_loader_epoch_batches(self->l, &n, err);
  Py_END_ALLOW_THREADS log_drain();
  if (rc) return raise_stk(rc, err);
  return PyLong_FromUnsignedLongLong(n);
}

/* Token windows: the order's size, the row length and each source. */
static PyObject *token_info(LoaderObject *self) {
  int n = stk_tokens_num_sources(self->tok);
  PyObject *srcs = PyList_New(n);
  for (int i = 0; srcs && i < n; i++) {
    struct stk_tokens_source s;
    stk_tokens_source(self->tok, i, &s);
    PyObject *d = Py_BuildValue(
        "{s:s,s:d,s:K,s:K,s:K,s:K,s:K,s:O,s:s}", "path", s.path, "weight", s.weight, "documents",
        (unsigned long long)s.documents, "tokens", (unsigned long long)s.tokens, "windows",
        (unsigned long long)s.windows, "blend_windows", (unsigned long long)s.blend_windows,
        "served", (unsigned long long)s.served, "built", s.built ? Py_True : Py_False,
        "index_path", s.index_path);
    if (!d) {
      Py_CLEAR(srcs);
      break;
    }
    PyList_SET_ITEM(srcs, i, d);
  }
  if (!srcs) return NULL;
  return Py_BuildValue("{s:K,s:I,s:s,s:N}", "windows",
                       (unsigned long long)stk_tokens_num_windows(self->tok), "row_len",
                       (unsigned)stk_tokens_row_len(self->tok), "format", "megatron", "sources",
                       srcs);
}

static PyObject *Loader_dataset_info(LoaderObject *self, PyObject *unused) {
  (void)unused;
  if (self->tok && self->l && self->pid == getpid()) return token_info(self);
  if (!self->ds || self->pid != getpid()) {
    loader_check_open(self);
    return NULL;
  }
  /* Never fetches: a remote dataset without a manifest is counted as its
   * shards arrive ("samples_complete" says whether all are). */
  int complete;
  unsigned long long n = (unsigned long long)stk_dataset_samples_counted(self->ds, &complete);
  return Py_BuildValue("{s:K,s:O,s:n,s:s}", "samples", n, "samples_complete",
                       complete ? Py_True : Py_False, "shards",
                       (Py_ssize_t)stk_dataset_num_shards(self->ds), "format",
                       stk_dataset_format(self->ds));
}

static PyMethodDef Loader_methods[] = {
    {"close", (PyCFunction)Loader_close, METH_NOARGS,
     "close()\n\nStop the pipeline. Batches still referenced stay valid; the loader's memory "
     "and threads are freed when the last of them is released."},
    {"__enter__", (PyCFunction)Loader_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Loader_exit, METH_VARARGS, NULL},
    {"_state", (PyCFunction)Loader_state, METH_NOARGS,
     "_state() -> (seed, epoch, position) after the last batch handed out."},
    {"_stats_json", (PyCFunction)Loader_stats_json, METH_NOARGS, "The stats as JSON text."},
    {"_dataset_info", (PyCFunction)Loader_dataset_info, METH_NOARGS, NULL},
    {"_epoch_batches", (PyCFunction)Loader_epoch_batches, METH_NOARGS, NULL},
    {"_set_release_stream", (PyCFunction)Loader_set_release_stream, METH_O,
     "_set_release_stream(fn)\n\nfn() -> (cudaStream_t as int, device) of the stream copies from "
     "pinned batches run on, asked at each release (None: the legacy default stream)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Loader_getset[] = {
    {"engine", (getter)Loader_engine, NULL, "The I/O engine in use (\"io_uring\" or \"pread\").",
     NULL},
    {"closed", (getter)Loader_get_closed, NULL, "True after close().", NULL},
    {"live_batches", (getter)Loader_get_live, NULL,
     "Batches handed out and not yet released (each still holds a batch buffer).", NULL},
    {"pinned", (getter)Loader_get_pinned, NULL,
     "True when batch buffers are page-locked (pin_memory with a GPU present).", NULL},
    {"_pin_error", (getter)Loader_get_pin_error, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyObject *Loader_iter(PyObject *self) {
  Py_INCREF(self);
  return self;
}

PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C loader; use stoker.Loader.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loader_init,
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_iter = Loader_iter,
    .tp_iternext = (iternextfunc)Loader_next,
    .tp_methods = Loader_methods,
    .tp_getset = Loader_getset,
};

