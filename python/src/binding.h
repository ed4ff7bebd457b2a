/* What the files of the _stoker extension share (python/src/): the
 * object types of the Loader, its Batches and their Arrays, and the
 * functions one file calls in another. Each file is one idea:
 *   _stoker.c   the module: errors, log messages, Ctrl-C, module functions
 *   options.c   the option dict of stoker.Loader into libstoker's structs
 *   loader.c    the Loader type (open, next, close, state, stats)
 *   batch.c     the Batch type: a stk_batch and its arrays
 *   array.c     the Array type: buffer protocol, __array_interface__, DLPack
 *   ckpt.c      the Checkpoint type: the checkpoint tier (stk_ckpt)
 * Only PyInit__stoker is exported (the extension is built with
 * -fvisibility=hidden). */
#ifndef STOKER_PY_BINDING_H
#define STOKER_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "dlpack.h"
#include "stoker/stoker.h"

typedef struct {
  PyObject_HEAD struct stk_dataset *ds;
  struct stk_loader *l;
  struct stk_loader_opts o; /* o.sampler and o.decode point at so and dc */
  struct stk_sampler_opts so;
  struct stk_decode_cfg dc;
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
struct dtype_info {
  const char *fmt, *name;
  int size;
  uint8_t code;
};
extern const struct dtype_info dtypes[]; /* indexed by DT_* (array.c) */

typedef struct {
  PyObject_HEAD PyObject *base; /* the Batch whose memory this views */
  void *ptr;
  int ndim, dt;
  Py_ssize_t shape[4], strides[4];
  Py_ssize_t nbytes;
} ArrayObject;

extern PyTypeObject LoaderType, BatchType, ArrayType;

/* _stoker.c */
PyObject *raise_stk(int code, const char *detail);
void log_drain(void);
int sigint_arm(struct stk_loader *l);
void sigint_disarm(int armed);
extern volatile sig_atomic_t sig_hit;

/* options.c */
#define TOKEN_SOURCES_MAX 256
int opt_int(PyObject *d, const char *k, int *out);
int parse_opts(LoaderObject *self, PyObject *d);
int parse_token_opts(LoaderObject *self, PyObject *d, const char *source, const char **paths,
                     double *weights, int *n);

/* loader.c */
void loader_finish(LoaderObject *self);
void batch_release(LoaderObject *o, struct stk_batch *b);

/* ckpt.c: adds Checkpoint and CheckpointData to the module; -1 on error */
int ckpt_add_types(PyObject *m);

/* batch.c */
PyObject *make_array(PyObject *base, void *ptr, int dt, int ndim, const Py_ssize_t *shape);

#endif
