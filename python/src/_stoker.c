/* stoker._stoker: the CPython binding of libstoker's loader (the public API
 * of include/stoker/ only). Batches are handed to Python without a copy:
 * a Batch owns one struct stk_batch, its arrays (data, labels, ...) export
 * the buffer protocol and DLPack over the loader's memory, and the batch
 * goes back to the loader's pool only when the last view of it (array,
 * memoryview, numpy array, torch tensor) is gone. The GIL is released for
 * every call into the library; a SIGINT while waiting for a batch cancels
 * the wait so that Ctrl-C raises KeyboardInterrupt promptly.
 *
 * Argument checking lives in stoker/__init__.py (which names the argument
 * in every TypeError/ValueError); this file trusts the option dict it gets
 * but still checks every type it reads, so nothing can crash it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlpack.h"
#include "stoker/stoker.h"

/* ---- errors ---------------------------------------------------------------- */

static PyObject *error_classes; /* dict code -> class, from stoker/__init__.py */
static PyObject *error_base;    /* stoker.Error */

/* Raise the exception class of code with the library's detail sentence. */
static PyObject *raise_stk(int code, const char *detail) {
  PyObject *cls = NULL;
  if (error_classes) {
    PyObject *k = PyLong_FromLong(code);
    if (k) {
      cls = PyDict_GetItemWithError(error_classes, k);
      Py_DECREF(k);
    }
    if (!cls && PyErr_Occurred()) return NULL;
  }
  if (!cls) cls = error_base ? error_base : PyExc_RuntimeError;
  const char *msg = detail && *detail ? detail : stk_strerror(code);
  PyObject *args = Py_BuildValue("(is)", code, msg);
  if (!args) return NULL;
  PyObject *exc = PyObject_Call(cls, args, NULL);
  Py_DECREF(args);
  if (!exc) return NULL;
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}

/* ---- log messages: queued by any library thread, emitted on the caller's --- */

#define LOGQ 64
static pthread_mutex_t logq_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int lvl;
  char msg[480];
} logq[LOGQ];
static int logq_n, logq_dropped;
static volatile int logq_pending;
static PyObject *log_sink; /* callable(level_name, message) */

/* Runs on library threads, which never hold the GIL: queue only. */
static void log_cb(void *ctx, enum stk_log_level lvl, const char *msg) {
  (void)ctx;
  pthread_mutex_lock(&logq_mu);
  if (logq_n < LOGQ) {
    logq[logq_n].lvl = (int)lvl;
    snprintf(logq[logq_n].msg, sizeof logq[logq_n].msg, "%s", msg);
    logq_n++;
  } else {
    logq_dropped++;
  }
  __atomic_store_n(&logq_pending, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&logq_mu);
}

/* With the GIL: hand queued messages to the Python sink (logging). An error
 * in the sink is reported as unraisable, never lost into the caller. */
static void log_drain(void) {
  if (!__atomic_load_n(&logq_pending, __ATOMIC_ACQUIRE)) return;
  static const char *names[] = {"error", "warning", "info", "debug"};
  /* A private copy: the sink (logging's handlers) may release the GIL, and
   * another thread may drain meanwhile. */
  int n, dropped;
  struct entry {
    int lvl;
    char msg[480];
  } *q = malloc(sizeof(struct entry) * LOGQ);
  if (!q) return;
  pthread_mutex_lock(&logq_mu);
  n = logq_n;
  dropped = logq_dropped;
  for (int i = 0; i < n; i++) {
    q[i].lvl = logq[i].lvl;
    memcpy(q[i].msg, logq[i].msg, sizeof q[i].msg);
  }
  logq_n = logq_dropped = 0;
  logq_pending = 0;
  pthread_mutex_unlock(&logq_mu);
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  for (int i = 0; log_sink && i < n; i++) {
    PyObject *r = PyObject_CallFunction(log_sink, "ss", names[q[i].lvl & 3], q[i].msg);
    if (!r) PyErr_WriteUnraisable(log_sink);
    Py_XDECREF(r);
  }
  if (log_sink && dropped) {
    char m[96];
    snprintf(m, sizeof m, "%d log messages were dropped (the queue was full)", dropped);
    PyObject *r = PyObject_CallFunction(log_sink, "ss", "warning", m);
    if (!r) PyErr_WriteUnraisable(log_sink);
    Py_XDECREF(r);
  }
  PyErr_Restore(et, ev, tb);
  free(q);
}

/* ---- Ctrl-C while waiting -------------------------------------------------- */

/* While the main thread waits in stk_loader_next() without the GIL, SIGINT
 * goes to this handler: it cancels that loader (stk_loader_cancel only sets
 * a flag) and then runs Python's own handler, which trips the interpreter's
 * flag; back with the GIL, PyErr_CheckSignals() raises KeyboardInterrupt. */
static struct sigaction sig_prev;
static struct stk_loader *volatile sig_loader;
static volatile sig_atomic_t sig_hit;
static unsigned long main_thread_id;

static void on_sigint(int sig) {
  sig_hit = 1;
  struct stk_loader *l = sig_loader;
  if (l) stk_loader_cancel(l);
  if (!(sig_prev.sa_flags & SA_SIGINFO) && sig_prev.sa_handler != SIG_DFL &&
      sig_prev.sa_handler != SIG_IGN)
    sig_prev.sa_handler(sig);
}

/* Install the handler for one wait; 1 when installed. Only the main thread
 * gets SIGINT handling from Python, and only when Python's handler is in
 * place (not ignored, not the default that kills the process). */
static int sigint_arm(struct stk_loader *l) {
  if (PyThread_get_thread_ident() != main_thread_id) return 0;
  struct sigaction cur;
  if (sigaction(SIGINT, NULL, &cur) != 0) return 0;
  if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)
    return 0;
  sig_prev = cur;
  sig_hit = 0;
  sig_loader = l;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, NULL) != 0) {
    sig_loader = NULL;
    return 0;
  }
  return 1;
}

static void sigint_disarm(int armed) {
  if (!armed) return;
  sigaction(SIGINT, &sig_prev, NULL);
  sig_loader = NULL;
}

/* ---- Loader ---------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD struct stk_dataset *ds;
  struct stk_loader *l;
  struct stk_loader_opts o;
  struct stk_cache_opts cache;
  struct stk_dataset_opts dso;
  struct stk_sampler_state resume;
  struct stk_allocator pinned;
  int pinned_on;
  /* () -> (cudaStream_t as int, device): the stream copies from pinned
   * batches run on, asked at each release (see batch_release). */
  PyObject *stream_fn;
  PyObject *keep;  /* the option strings, alive as long as the loader */
  Py_ssize_t live; /* Batch objects not yet released */
  int closed;      /* close() called (or the loader was canceled) */
  int interrupted; /* canceled by Ctrl-C */
  int busy;        /* calls using l without the GIL (next, stats) */
  int in_next;     /* a thread is waiting in next() */
  pid_t pid;       /* the process whose threads run the pipeline */
  /* Token windows (seq_len given): the corpus and its window indices. */
  struct stk_tokens *tok;
  struct stk_tokens_opts topts;
  /* Fixed-size output (JPEG): per-sample shape and dtype. */
  int fixed, h, w, c, chw, f32;
  uint64_t sample_bytes;
  char errbuf[STK_ERRMSG_MAX];
  char pin_err[STK_ERRMSG_MAX]; /* why pin_memory could not be honoured */
} LoaderObject;

typedef struct {
  PyObject_HEAD LoaderObject *owner; /* strong reference: the loader outlives its batches */
  struct stk_batch *b;
} BatchObject;

enum { DT_U8, DT_I32, DT_U64, DT_F32, DT_I64 };
static const struct {
  const char *fmt, *name;
  int size;
  uint8_t code;
} dtypes[] = {
    [DT_U8] = {"B", "uint8", 1, kDLUInt},
    [DT_I32] = {"i", "int32", 4, kDLInt},
    [DT_U64] = {"Q", "uint64", 8, kDLUInt},
    [DT_F32] = {"f", "float32", 4, kDLFloat},
    [DT_I64] = {"q", "int64", 8, kDLInt},
};

typedef struct {
  PyObject_HEAD PyObject *base; /* the Batch whose memory this views */
  void *ptr;
  int ndim, dt;
  Py_ssize_t shape[4], strides[4];
  Py_ssize_t nbytes;
} ArrayObject;

static PyTypeObject LoaderType, BatchType, ArrayType;

/* Free the C loader and dataset: once closed and no batch is alive. The
 * pipeline's threads are joined here, without the GIL. */
static void loader_finish(LoaderObject *self) {
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
static void batch_release(LoaderObject *o, struct stk_batch *b) {
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

/* Read one option from the dict; absent keys leave *out alone. */
static int opt_u64(PyObject *d, const char *k, uint64_t *out) {
  PyObject *v = PyDict_GetItemString(d, k);
  if (!v || v == Py_None) return 0;
  unsigned long long x = PyLong_AsUnsignedLongLong(v);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_ValueError, "%s: expected a non-negative integer that fits in 64 bits", k);
    return -1;
  }
  *out = x;
  return 0;
}

static int opt_u32(PyObject *d, const char *k, uint32_t *out) {
  uint64_t x = *out;
  if (opt_u64(d, k, &x)) return -1;
  if (x > UINT32_MAX) {
    PyErr_Format(PyExc_ValueError, "%s: %llu is too large", k, (unsigned long long)x);
    return -1;
  }
  *out = (uint32_t)x;
  return 0;
}

static int opt_int(PyObject *d, const char *k, int *out) {
  PyObject *v = PyDict_GetItemString(d, k);
  if (!v || v == Py_None) return 0;
  long x = PyLong_AsLong(v);
  if (x == -1 && PyErr_Occurred()) return -1;
  if (x < INT32_MIN || x > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "%s: out of range", k);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int opt_dbl(PyObject *d, const char *k, double *out) {
  PyObject *v = PyDict_GetItemString(d, k);
  if (!v || v == Py_None) return 0;
  double x = PyFloat_AsDouble(v);
  if (x == -1.0 && PyErr_Occurred()) return -1;
  *out = x;
  return 0;
}

static int opt_flt(PyObject *d, const char *k, float *out) {
  double x = *out;
  if (opt_dbl(d, k, &x)) return -1;
  *out = (float)x;
  return 0;
}

/* A string option, kept alive in self->keep (a list). */
static int opt_str(LoaderObject *self, PyObject *d, const char *k, const char **out) {
  PyObject *v = PyDict_GetItemString(d, k);
  if (!v || v == Py_None) return 0;
  if (!PyUnicode_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a str", k);
    return -1;
  }
  if (PyList_Append(self->keep, v)) return -1;
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(v, &n);
  if (!s) return -1;
  if (strlen(s) != (size_t)n) {
    PyErr_Format(PyExc_ValueError, "%s: embedded NUL character", k);
    return -1;
  }
  *out = s;
  return 0;
}

static int parse_opts(LoaderObject *self, PyObject *d) {
  struct stk_loader_opts *o = &self->o;
  struct stk_decode_cfg *dc = &o->decode;
  stk_loader_opts_init(o);
  if (opt_u32(d, "batch_size", &o->batch_size) || opt_u32(d, "threads", &o->threads) ||
      opt_u32(d, "epochs", &o->epochs) || opt_int(d, "drop_last", &o->drop_last) ||
      opt_u64(d, "epoch_samples", &o->epoch_samples) ||
      opt_int(d, "shuffle", (int *)&o->sampler.shuffle) || opt_u64(d, "seed", &o->sampler.seed) ||
      opt_u64(d, "window", &o->sampler.shuffle_window) || opt_u32(d, "rank", &o->sampler.rank) ||
      opt_u32(d, "world", &o->sampler.world) || opt_int(d, "decode", &dc->kind) ||
      opt_str(self, d, "field", &dc->field) || opt_int(d, "out_h", &dc->out_h) ||
      opt_int(d, "out_w", &dc->out_w) || opt_int(d, "train", &dc->train) ||
      opt_flt(d, "scale_min", &dc->scale_min) || opt_flt(d, "scale_max", &dc->scale_max) ||
      opt_flt(d, "ratio_min", &dc->ratio_min) || opt_flt(d, "ratio_max", &dc->ratio_max) ||
      opt_int(d, "dtype", &dc->dtype) || opt_int(d, "layout", &dc->layout) ||
      opt_str(self, d, "engine", &o->io_engine) || opt_int(d, "direct", &o->direct) ||
      opt_int(d, "skip_verify", &o->skip_verify) || opt_u64(d, "inflight", &o->max_inflight) ||
      opt_u32(d, "io_depth", &o->io_depth) || opt_u32(d, "prefetch", &o->prefetch) ||
      opt_u32(d, "prefetch_max", &o->prefetch_max) || opt_u64(d, "mem_cap", &o->mem_cap) ||
      opt_int(d, "on_error", &o->on_error) || opt_int(d, "shares", &o->shares))
    return -1;
  for (int i = 0; i < 3; i++) {
    char k[16];
    snprintf(k, sizeof k, "mean%d", i);
    if (opt_flt(d, k, &dc->mean[i])) return -1;
    snprintf(k, sizeof k, "std%d", i);
    if (opt_flt(d, k, &dc->std[i])) return -1;
  }
  /* The enums, checked here too: _stoker.Loader is reachable directly. */
  struct {
    const char *k;
    int v, max;
  } en[] = {{"shuffle", (int)o->sampler.shuffle, STK_SHUFFLE_BLOCK},
            {"decode", dc->kind, STK_DECODE_NPY},
            {"dtype", dc->dtype, STK_DTYPE_F32},
            {"layout", dc->layout, STK_LAYOUT_CHW},
            {"on_error", o->on_error, STK_ON_ERROR_SKIP}};
  for (size_t i = 0; i < sizeof en / sizeof en[0]; i++)
    if (en[i].v < 0 || en[i].v > en[i].max) {
      PyErr_Format(PyExc_ValueError, "%s: %d is out of range", en[i].k, en[i].v);
      return -1;
    }
  if (dc->out_h < 0 || dc->out_w < 0 || dc->out_h > 16384 || dc->out_w > 16384) {
    PyErr_SetString(PyExc_ValueError, "size: out of range");
    return -1;
  }
  PyObject *r = PyDict_GetItemString(d, "resume");
  if (r && r != Py_None) {
    unsigned long long seed, epoch, pos, fp = 0;
    if (!PyTuple_Check(r)) {
      PyErr_SetString(PyExc_TypeError, "resume: expected (seed, epoch, position[, dataset])");
      return -1;
    }
    if (!PyArg_ParseTuple(r, "KKK|K;resume: expected (seed, epoch, position[, dataset])", &seed,
                          &epoch, &pos, &fp))
      return -1;
    self->resume.seed = seed;
    self->resume.epoch = epoch;
    self->resume.position = pos;
    self->resume.dataset_fp = fp; /* 0: not recorded, not checked */
    o->resume = &self->resume;
  }
  /* Dataset and cache. */
  struct stk_cache_opts *c = &self->cache;
  int want_cache = 0;
  if (opt_str(self, d, "format", &self->dso.format) ||
      opt_int(d, "index_threads", &self->dso.index_threads) ||
      opt_str(self, d, "cache_dir", &c->dir) || opt_u64(d, "cache_size", &c->disk_bytes) ||
      opt_u64(d, "ram_cache_size", &c->ram_bytes) || opt_u64(d, "cache_min_free", &c->min_free) ||
      opt_u32(d, "fetchers", &c->fetchers) || opt_int(d, "cache_no_fsync", &c->no_fsync) ||
      opt_dbl(d, "connect_timeout_s", &c->connect_timeout_s) ||
      opt_dbl(d, "retry_max_s", &c->retry_max_s) ||
      opt_str(self, d, "s3_endpoint", &c->s3_endpoint) ||
      opt_str(self, d, "s3_region", &c->s3_region) ||
      opt_str(self, d, "s3_profile", &c->s3_profile) ||
      opt_int(d, "s3_addressing", &c->s3_addressing) || opt_int(d, "want_cache", &want_cache))
    return -1;
  PyObject *pf = PyDict_GetItemString(d, "cache_prefetch");
  if (pf && pf != Py_None) {
    long long x = PyLong_AsLongLong(pf);
    if (x == -1 && PyErr_Occurred()) return -1;
    c->prefetch_bytes = x;
  }
  if (c->s3_addressing < 0 || c->s3_addressing > 2) {
    PyErr_SetString(PyExc_ValueError, "s3_addressing: out of range");
    return -1;
  }
  if (want_cache) self->dso.cache = c;
  return 0;
}

/* Token windows: with seq_len, the source (or the blend's sources) is a
 * Megatron corpus served as windows (include/stoker/tokens.h). Fills
 * paths/weights (strings kept alive by self->keep) and *n (0: not token
 * mode). blend is the CLI's 'W1 PATH1 W2 PATH2 ...' or, from Python, a
 * list of (weight, path) pairs. */
#define TOKEN_SOURCES_MAX 256
static int parse_token_opts(LoaderObject *self, PyObject *d, const char *source,
                            const char **paths, double *weights, int *n) {
  struct stk_tokens_opts *t = &self->topts;
  stk_tokens_opts_init(t);
  *n = 0;
  uint32_t seq = 0;
  if (opt_u32(d, "seq_len", &seq)) return -1;
  PyObject *blend = PyDict_GetItemString(d, "blend");
  if (!seq) {
    if (blend && blend != Py_None) {
      PyErr_SetString(PyExc_ValueError, "blend: token windows need seq_len");
      return -1;
    }
    return 0;
  }
  t->seq_len = seq;
  t->dataset = &self->dso;
  t->seed = (uint32_t)self->o.sampler.seed; /* Python passes Megatron's seed (1234 by default) */
  if (opt_u64(d, "samples", &t->samples) || opt_str(self, d, "split", &t->split) ||
      opt_u32(d, "split_index", &t->split_index) || opt_int(d, "windows", &t->windows) ||
      opt_int(d, "tokens", &t->token_type) || opt_str(self, d, "index_dir", &t->index_dir))
    return -1;
  if (blend && blend != Py_None) {
    PyObject *seq_ = PySequence_Fast(blend, "blend: expected a list of (weight, path) pairs");
    if (!seq_) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq_);
    if (k < 1 || k > TOKEN_SOURCES_MAX) {
      Py_DECREF(seq_);
      PyErr_Format(PyExc_ValueError, "blend: 1 to %d (weight, path) pairs", TOKEN_SOURCES_MAX);
      return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
      PyObject *pair = PySequence_Fast_GET_ITEM(seq_, i);
      PyObject *ps = NULL;
      double w = 0;
      if (!PyArg_ParseTuple(pair, "dU;blend: expected (weight, path) pairs", &w, &ps) ||
          PyList_Append(self->keep, ps)) {
        Py_DECREF(seq_);
        return -1;
      }
      paths[i] = PyUnicode_AsUTF8(ps);
      weights[i] = w;
      if (!paths[i]) {
        Py_DECREF(seq_);
        return -1;
      }
    }
    Py_DECREF(seq_);
    *n = (int)k;
    return 0;
  }
  paths[0] = source;
  weights[0] = 1;
  *n = 1;
  return 0;
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
  const struct stk_decode_cfg *dc = &self->o.decode;
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
  /* Every batch held by Python keeps a ring slot: when all the ring's slots
   * are held, waiting would never end. Say so instead of hanging. */
  if (self->live >= 2) {
    struct stk_loader_stats st;
    stk_loader_stats(self->l, &st);
    if ((uint64_t)self->live >= (uint64_t)st.ring_depth + 2 &&
        st.ring_depth >= self->o.prefetch_max)
      return raise_stk(STK_EBUSY,
                       "every batch buffer of the loader is held by a live batch "
                       "(arrays or tensors still point at it): release batches, copy the "
                       "ones to keep, or raise prefetch_max");
    if ((uint64_t)self->live >= (uint64_t)st.ring_depth + 2)
      return raise_stk(STK_EBUSY,
                       "every batch buffer of the loader is held by a live batch "
                       "(arrays or tensors still point at it): release batches or copy the "
                       "ones to keep");
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

static PyTypeObject LoaderType = {
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

static PyObject *make_array(PyObject *base, void *ptr, int dt, int ndim, const Py_ssize_t *shape) {
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
    {"skipped", (getter)Batch_skipped, NULL, "Samples dropped by on_error='skip'.", NULL},
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

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "One batch, zero-copy. Its memory returns to the loader's pool when the batch and "
        "every view of it (arrays, memoryviews, numpy arrays, torch tensors) are gone.",
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_getset = Batch_getset,
    .tp_as_sequence = &Batch_seq_methods,
    .tp_repr = (reprfunc)Batch_repr,
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

static PyTypeObject ArrayType = {
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

/* ---- module functions ------------------------------------------------------ */

static PyObject *mod_register(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *base, *classes, *sink;
  unsigned long main_id;
  if (!PyArg_ParseTuple(args, "OO!Ok", &base, &PyDict_Type, &classes, &sink, &main_id)) return NULL;
  main_thread_id = main_id;
  Py_INCREF(base);
  Py_XSETREF(error_base, base);
  Py_INCREF(classes);
  Py_XSETREF(error_classes, classes);
  Py_INCREF(sink);
  Py_XSETREF(log_sink, sink);
  stk_log_set_callback(log_cb, NULL);
  Py_RETURN_NONE;
}

static PyObject *mod_errors(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  PyObject *d = PyDict_New();
  for (int c = -1; d && c >= -64; c--) {
    const char *name = stk_err_name(c);
    if (!strcmp(stk_strerror(c), "unknown error")) break;
    PyObject *v = Py_BuildValue("(ss)", name, stk_strerror(c));
    PyObject *k = PyLong_FromLong(c);
    if (!v || !k || PyDict_SetItem(d, k, v)) {
      Py_XDECREF(v);
      Py_XDECREF(k);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
    Py_DECREF(k);
  }
  return d;
}

static PyObject *mod_set_log_level(PyObject *m, PyObject *args) {
  (void)m;
  int lvl;
  if (!PyArg_ParseTuple(args, "i", &lvl)) return NULL;
  if (lvl < STK_LOG_ERROR || lvl > STK_LOG_DEBUG) {
    PyErr_SetString(PyExc_ValueError, "level: out of range");
    return NULL;
  }
  stk_log_set_level((enum stk_log_level)lvl);
  Py_RETURN_NONE;
}

static PyObject *mod_log(PyObject *m, PyObject *args) {
  (void)m;
  int lvl;
  const char *msg;
  if (!PyArg_ParseTuple(args, "is", &lvl, &msg)) return NULL;
  if (lvl < STK_LOG_ERROR || lvl > STK_LOG_DEBUG) {
    PyErr_SetString(PyExc_ValueError, "level: out of range");
    return NULL;
  }
  stk_log((enum stk_log_level)lvl, "%s", msg);
  log_drain();
  Py_RETURN_NONE;
}

/* An integer argument of fn in 0..max, or a one-line error naming it: bools,
 * floats and strings are refused, not truncated or wrapped. */
static int arg_u64(PyObject *v, const char *fn, const char *k, unsigned long long max,
                   unsigned long long *out) {
  if (!v) return 0;
  if (PyBool_Check(v) || !PyLong_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s: %s: expected a whole number, got %s", fn, k,
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  int overflow = 0, bad;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (x == -1 && PyErr_Occurred()) return -1;
  unsigned long long u = (unsigned long long)x;
  if (overflow > 0) { /* past INT64_MAX: may still fit 64 unsigned bits */
    u = PyLong_AsUnsignedLongLong(v);
    bad = u == (unsigned long long)-1 && PyErr_Occurred();
    if (bad) PyErr_Clear();
  } else {
    bad = overflow || x < 0;
  }
  if (bad || u > max) {
    PyErr_Format(PyExc_ValueError, "%s: %s: %R is out of range (0..%llu)", fn, k, v, max);
    return -1;
  }
  *out = u;
  return 0;
}

static PyObject *mod_gen(PyObject *m, PyObject *args, PyObject *kw) {
  (void)m;
  static char *kwlist[] = {"dir",     "samples",           "format", "size",  "stdev",   "jpeg",
                           "classes", "samples_per_shard", "seed",   "force", "quality", NULL};
  const char *dir, *format = "tfrecord";
  unsigned long long samples = 0, size = 0, stdev = 0, per = 0, seed = 0, classes = 0,
                     quality = 0;
  int force = 0;
  PyObject *jpeg = Py_None, *o_samples, *o_size = NULL, *o_stdev = NULL, *o_classes = NULL,
           *o_per = NULL, *o_seed = NULL, *o_quality = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$sOOOOOOpO:gen", kwlist, &dir, &o_samples,
                                   &format, &o_size, &o_stdev, &jpeg, &o_classes, &o_per, &o_seed,
                                   &force, &o_quality))
    return NULL;
  if (arg_u64(o_samples, "gen", "samples", INT64_MAX, &samples) ||
      arg_u64(o_size, "gen", "size", INT64_MAX, &size) ||
      arg_u64(o_stdev, "gen", "stdev", INT64_MAX, &stdev) ||
      arg_u64(o_classes, "gen", "classes", INT32_MAX, &classes) ||
      arg_u64(o_per, "gen", "samples_per_shard", INT64_MAX, &per) ||
      arg_u64(o_seed, "gen", "seed", UINT64_MAX, &seed) ||
      arg_u64(o_quality, "gen", "quality", 100, &quality))
    return NULL;
  if (samples == 0) {
    PyErr_SetString(PyExc_ValueError, "gen: samples must be at least 1");
    return NULL;
  }
  struct stk_gen_opts g = {.dir = dir,
                           .format = format,
                           .samples = samples,
                           .size_mean = size,
                           .size_stdev = stdev,
                           .classes = (unsigned)classes,
                           .samples_per_shard = per,
                           .seed = seed,
                           .force = force,
                           .quality = (int)quality};
  if (jpeg != Py_None && !PyTuple_Check(jpeg)) {
    PyErr_SetString(PyExc_TypeError, "jpeg: expected (min_w, min_h, max_w, max_h)");
    return NULL;
  }
  if (jpeg != Py_None &&
      !PyArg_ParseTuple(jpeg, "iiii;jpeg: expected (min_w, min_h, max_w, max_h)", &g.jpeg_min_w,
                        &g.jpeg_min_h, &g.jpeg_max_w, &g.jpeg_max_h))
    return NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = stk_gen(&g, NULL, NULL, err);
  Py_END_ALLOW_THREADS log_drain();
  if (rc) return raise_stk(rc, err);
  Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"_register", mod_register, METH_VARARGS, NULL},
    {"_errors", mod_errors, METH_NOARGS, "{code: (name, message)} of libstoker's error table."},
    {"_set_log_level", mod_set_log_level, METH_VARARGS, NULL},
    {"_log", mod_log, METH_VARARGS, NULL},
    {"gen", (PyCFunction)(void (*)(void))mod_gen, METH_VARARGS | METH_KEYWORDS,
     "gen(dir, samples, *, format='tfrecord', size=0, stdev=0, jpeg=None, classes=0,\n"
     "    samples_per_shard=0, seed=0, force=False, quality=0)\n\n"
     "Write a synthetic dataset (stoker gen): random payloads of size bytes, or JPEGs whose\n"
     "sides are drawn from jpeg=(min_w, min_h, max_w, max_h)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT,
                                    "stoker._stoker",
                                    "libstoker's loader for Python (see the stoker package).",
                                    -1,
                                    mod_methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__stoker(void) {
  if (PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 || PyType_Ready(&ArrayType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return NULL;
  main_thread_id = PyThread_get_thread_ident();
  Py_INCREF(&LoaderType);
  Py_INCREF(&BatchType);
  Py_INCREF(&ArrayType);
  if (PyModule_AddObject(m, "Loader", (PyObject *)&LoaderType) ||
      PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) ||
      PyModule_AddObject(m, "Array", (PyObject *)&ArrayType) ||
      PyModule_AddStringConstant(m, "version", stk_version())) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
