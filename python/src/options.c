/* The option dict of stoker.Loader (checked by stoker/__init__.py) into
 * libstoker's option structs. */
#include "binding.h"

#include <stdint.h>
#include <string.h>

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

int opt_int(PyObject *d, const char *k, int *out) {
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

int parse_opts(LoaderObject *self, PyObject *d) {
  struct stk_loader_opts *o = &self->o;
  struct stk_decode_cfg *dc = &self->dc;
  stk_loader_opts_init(o);
  stk_sampler_opts_init(&self->so);
  stk_decode_cfg_init(dc);
  o->sampler = &self->so;
  o->decode = dc;
  if (opt_u32(d, "batch_size", &o->batch_size) || opt_u32(d, "threads", &o->threads) ||
      opt_u32(d, "epochs", &o->epochs) || opt_int(d, "drop_last", &o->drop_last) ||
      opt_u64(d, "epoch_samples", &o->epoch_samples) ||
      opt_int(d, "shuffle", (int *)&self->so.shuffle) || opt_u64(d, "seed", &self->so.seed) ||
      opt_u64(d, "window", &self->so.shuffle_window) || opt_u32(d, "rank", &self->so.rank) ||
      opt_u32(d, "world", &self->so.world) || opt_int(d, "decode", &dc->kind) ||
      opt_str(self, d, "field", &dc->field) || opt_int(d, "out_h", &dc->out_h) ||
      opt_int(d, "out_w", &dc->out_w) || opt_int(d, "train", &dc->train) ||
      opt_flt(d, "scale_min", &dc->scale_min) || opt_flt(d, "scale_max", &dc->scale_max) ||
      opt_flt(d, "ratio_min", &dc->ratio_min) || opt_flt(d, "ratio_max", &dc->ratio_max) ||
      opt_int(d, "dtype", &dc->dtype) || opt_int(d, "layout", &dc->layout) ||
      opt_str(self, d, "engine", &o->io_engine) || opt_int(d, "direct", &o->direct) ||
      opt_int(d, "skip_verify", &o->skip_verify) || opt_u64(d, "inflight", &o->max_inflight) ||
      opt_u32(d, "io_depth", &o->io_depth) || opt_u32(d, "prefetch", &o->prefetch) ||
      opt_u32(d, "prefetch_max", &o->prefetch_max) || opt_u64(d, "mem_cap", &o->mem_cap) ||
      opt_int(d, "on_error", &o->on_error) || opt_int(d, "shares", &o->shares) ||
      opt_str(self, d, "image_fields", &o->image_fields))
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
  } en[] = {{"shuffle", (int)self->so.shuffle, STK_SHUFFLE_BLOCK},
            {"decode", dc->kind, STK_DECODE_FIELDS},
            {"dtype", dc->dtype, STK_DTYPE_F32},
            {"layout", dc->layout, STK_LAYOUT_CHW},
            {"on_error", o->on_error, STK_ON_ERROR_FAIL}};
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
      opt_u64(d, "cache_chunk_size", &c->chunk_bytes) ||
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
  if (c->chunk_bytes && (c->chunk_bytes < 4096 || c->chunk_bytes > (1ull << 32))) {
    PyErr_Format(PyExc_ValueError, "cache_chunk_size: %llu is outside 4KiB..4GiB",
                 (unsigned long long)c->chunk_bytes);
    return -1;
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
int parse_token_opts(LoaderObject *self, PyObject *d, const char *source,
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
  t->seed = (uint32_t)self->so.seed; /* Python passes Megatron's seed (1234 by default) */
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
