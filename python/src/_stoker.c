/* stoker._stoker: the CPython binding of libstoker's loader (the public API
 * of include/stoker/ only). Batches are handed to Python without a copy:
 * a Batch owns one struct stk_batch, its arrays (data, labels, ...) export
 * the buffer protocol and DLPack over the loader's memory, and the batch
 * goes back to the loader's pool only when the last view of it (array,
 * memoryview, numpy array, torch tensor) is gone. The GIL is released for
 * every call into the library; a SIGINT while waiting for a batch cancels
 * the wait so that Ctrl-C raises KeyboardInterrupt promptly.
 *
 * This file is the module: its error classes, the log queue, Ctrl-C
 * while waiting and the module functions; binding.h lists the others.
 *
 * Argument checking lives in stoker/__init__.py (which names the argument
 * in every TypeError/ValueError); options.c trusts the option dict it gets
 * but still checks every type it reads, so nothing can crash it. */
#include "binding.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- errors ---------------------------------------------------------------- */

static PyObject *error_classes; /* dict code -> class, from stoker/__init__.py */
static PyObject *error_base;    /* stoker.Error */

/* Raise the exception class of code with the library's detail sentence. */
PyObject *raise_stk(int code, const char *detail) {
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
void log_drain(void) {
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
volatile sig_atomic_t sig_hit;
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
int sigint_arm(struct stk_loader *l) {
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

void sigint_disarm(int armed) {
  if (!armed) return;
  sigaction(SIGINT, &sig_prev, NULL);
  sig_loader = NULL;
}

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
                           "classes", "samples_per_shard", "seed",   "force", "quality",
                           "image_format", NULL};
  const char *dir, *format = "tfrecord", *image_format = NULL;
  unsigned long long samples = 0, size = 0, stdev = 0, per = 0, seed = 0, classes = 0,
                     quality = 0;
  int force = 0;
  PyObject *jpeg = Py_None, *o_samples, *o_size = NULL, *o_stdev = NULL, *o_classes = NULL,
           *o_per = NULL, *o_seed = NULL, *o_quality = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$sOOOOOOpOz:gen", kwlist, &dir, &o_samples,
                                   &format, &o_size, &o_stdev, &jpeg, &o_classes, &o_per, &o_seed,
                                   &force, &o_quality, &image_format))
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
                           .quality = (int)quality,
                           .image_format = image_format};
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
     "    samples_per_shard=0, seed=0, force=False, quality=0, image_format=None)\n\n"
     "Write a synthetic dataset (stoker gen): random payloads of size bytes, or images whose\n"
     "sides are drawn from jpeg=(min_w, min_h, max_w, max_h), encoded as image_format:\n"
     "'jpeg' (None), 'png' or 'webp' (lossless at quality 100)."},
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
      PyModule_AddStringConstant(m, "version", stk_version()) || ckpt_add_types(m)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
