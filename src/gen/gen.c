/* Synthetic datasets: samples drawn from a per-sample seeded stream (so any
 * sample can be made by any thread and the output is the same for the same
 * seed), made in parallel batches and written in order through the generic
 * writer. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../format/format_impl.h"
#include "stoker/gen.h"
#include "synth.h"

#define GEN_BATCH 64
#define GEN_MAX_THREADS 16
#define GEN_DEFAULT_SIZE (112u * 1024)
#define GEN_MAX_SIZE (1ull << 31)

/* One made sample: up to two payload buffers the fields point into. */
struct made {
  struct stk_sample s;
  uint8_t *buf[2];
  int rc;
  char err[STK_ERRMSG_MAX];
};

struct batch {
  const struct stk_gen_opts *o;
  uint64_t first, n;
  struct made *m;
  atomic_uint_fast64_t next;
};

static void fill_random(struct stk_rng *r, uint8_t *p, uint64_t n) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) stk__st64(p + i, stk_rng_next(r));
  if (i < n) {
    uint64_t v = stk_rng_next(r);
    for (; i < n; i++, v >>= 8) p[i] = (uint8_t)v;
  }
}

static int is_jpeg(const struct stk_gen_opts *o) { return o->jpeg_max_w > 0 && o->jpeg_max_h > 0; }

static uint64_t draw_size(const struct stk_gen_opts *o, struct stk_rng *r) {
  double mean = o->size_mean ? (double)o->size_mean : GEN_DEFAULT_SIZE;
  double v = mean + (o->size_stdev ? (double)o->size_stdev * stk_rng_normal(r) : 0.0);
  if (v < 1) v = 1;
  if (v > (double)GEN_MAX_SIZE) v = (double)GEN_MAX_SIZE;
  return (uint64_t)llround(v);
}

static int draw_dim(struct stk_rng *r, int lo, int hi) {
  if (lo <= 0) lo = hi;
  return hi > lo ? lo + (int)stk_rng_below(r, (uint64_t)(hi - lo + 1)) : hi;
}

/* A .npy image of a uint8 array: (h, w, 3) for image-sized payloads, else
 * (n,), filled from r. */
static int make_npy(struct made *m, int slot, struct stk_rng *r, const uint64_t *shape, int nd) {
  uint64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  uint8_t h[256];
  size_t hl = stk__npy_header(h, sizeof h, "|u1", shape, nd);
  if (!(m->buf[slot] = malloc(hl + n))) return STK_ENOMEM;
  memcpy(m->buf[slot], h, hl);
  fill_random(r, m->buf[slot] + hl, n);
  return 0;
}

/* The label array of an npz sample: int64 of shape (1,). */
static int make_label_npy(struct made *m, int32_t label) {
  uint8_t h[256];
  uint64_t one = 1;
  size_t hl = stk__npy_header(h, sizeof h, "<i8", &one, 1);
  if (!(m->buf[1] = malloc(hl + 8))) return STK_ENOMEM;
  memcpy(m->buf[1], h, hl);
  stk__st64(m->buf[1] + hl, (uint64_t)(int64_t)(label < 0 ? 0 : label));
  return 0;
}

static uint64_t npy_len(const uint8_t *p) { return 10 + (uint64_t)stk__ld16(p + 8); }

static int make_arrays(const struct stk_gen_opts *o, struct made *m, struct stk_rng *r) {
  uint64_t shape[3];
  int nd = 1;
  if (is_jpeg(o)) {
    shape[1] = (uint64_t)draw_dim(r, o->jpeg_min_w, o->jpeg_max_w);
    shape[0] = (uint64_t)draw_dim(r, o->jpeg_min_h, o->jpeg_max_h);
    shape[2] = 3;
    nd = 3;
  } else {
    shape[0] = draw_size(o, r);
  }
  int rc = make_npy(m, 0, r, shape, nd);
  if (rc) return rc;
  uint64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  n += npy_len(m->buf[0]);
  if (!strcmp(o->format, "npz")) {
    if ((rc = make_label_npy(m, m->s.label)) != 0) return rc;
    stk__sample_add(&m->s, "x", 1, m->buf[0], n);
    stk__sample_add(&m->s, "y", 1, m->buf[1], npy_len(m->buf[1]) + 8);
  } else {
    stk__sample_add(&m->s, "npy", 3, m->buf[0], n);
  }
  return 0;
}

static int make_payload(const struct stk_gen_opts *o, struct made *m, struct stk_rng *r) {
  if (is_jpeg(o)) {
    int w = draw_dim(r, o->jpeg_min_w, o->jpeg_max_w);
    int h = draw_dim(r, o->jpeg_min_h, o->jpeg_max_h);
    size_t len;
    int rc = stk__jpeg_synth(r, w, h, o->quality ? o->quality : 90, &m->buf[0], &len, m->err);
    if (rc) return rc;
    stk__sample_add(&m->s, "jpg", 3, m->buf[0], len);
    return 0;
  }
  uint64_t n = draw_size(o, r);
  if (!(m->buf[0] = malloc((size_t)n))) return STK_ENOMEM;
  fill_random(r, m->buf[0], n);
  stk__sample_add(&m->s, "bin", 3, m->buf[0], n);
  return 0;
}

/* Sample i, from its own stream: label first, then the payload. */
static void make_sample(const struct stk_gen_opts *o, uint64_t i, struct made *m) {
  struct stk_rng r;
  stk_rng_seed(&r, stk_mix64(o->seed, i));
  memset(&m->s, 0, sizeof m->s);
  m->s.index = i;
  m->s.label = o->classes ? (int32_t)stk_rng_below(&r, o->classes) : -1;
  snprintf(m->s.key, sizeof m->s.key, "%08llu", (unsigned long long)i);
  int arrays = !strcmp(o->format, "npy") || !strcmp(o->format, "npz");
  m->rc = arrays ? make_arrays(o, m, &r) : make_payload(o, m, &r);
  if (m->rc == STK_ENOMEM) stk__errf(m->err, m->rc, "out of memory making sample %llu",
                                     (unsigned long long)i);
}

static void made_free(struct made *m) {
  free(m->buf[0]);
  free(m->buf[1]);
  m->buf[0] = m->buf[1] = NULL;
}

static void *batch_worker(void *arg) {
  struct batch *b = arg;
  for (;;) {
    uint64_t k = atomic_fetch_add(&b->next, 1);
    if (k >= b->n) break;
    make_sample(b->o, b->first + k, &b->m[k]);
  }
  return NULL;
}

static void make_batch(struct batch *b, int threads) {
  pthread_t tid[GEN_MAX_THREADS];
  int started = 0;
  atomic_init(&b->next, 0);
  for (int t = 1; t < threads; t++)
    if (pthread_create(&tid[started], NULL, batch_worker, b) == 0) started++;
  batch_worker(b);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

/* ---- the output directory ------------------------------------------------ */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb;
  (void)f;
  return flag == FTW_DP ? rmdir(p) : unlink(p);
}

/* dir must be missing or empty, unless force, which empties it. */
static int prepare_dir(const struct stk_gen_opts *o, char *err) {
  DIR *d = opendir(o->dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    int e = errno;
    return stk__errf(err, stk__from_errno(e), "%s: %s", o->dir, strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (!o->force) {
      rc = stk__errf(err, STK_EEXIST, "%s is not empty; pass --force to replace its contents",
                     o->dir);
      break;
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", o->dir, de->d_name);
    if (nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
      int e = errno;
      rc = stk__errf(err, stk__from_errno(e), "%s: cannot remove: %s", p, strerror(e));
    }
  }
  closedir(d);
  return rc;
}

static int check_opts(const struct stk_gen_opts *o, char *err) {
  if (!o || !o->dir || !*o->dir) return stk__errf(err, STK_EINVAL, "gen: no output directory");
  const struct stk_format_ops *f = stk__format_find(o->format);
  if (!f) return stk__errf(err, STK_EINVAL, "unknown format '%s'", o->format ? o->format : "");
  if (!(f->caps & STK_FMT_WRITE))
    return stk__errf(err, STK_ENOTSUP, "format '%s' cannot be written", f->name);
  if (o->samples == 0) return stk__errf(err, STK_EINVAL, "gen: samples must be at least 1");
  if (o->quality < 0 || o->quality > 100)
    return stk__errf(err, STK_EINVAL, "gen: JPEG quality %d is outside 1..100", o->quality);
  if ((o->jpeg_max_w > 0) != (o->jpeg_max_h > 0) || o->jpeg_max_w > 16384 ||
      o->jpeg_max_h > 16384 || o->jpeg_min_w > o->jpeg_max_w || o->jpeg_min_h > o->jpeg_max_h ||
      o->jpeg_min_w < 0 || o->jpeg_min_h < 0)
    return stk__errf(err, STK_EINVAL, "gen: bad JPEG size range %dx%d-%dx%d", o->jpeg_min_w,
                     o->jpeg_min_h, o->jpeg_max_w, o->jpeg_max_h);
  if (o->classes > INT32_MAX) return stk__errf(err, STK_EINVAL, "gen: too many classes");
  return 0;
}

static int gen_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > GEN_MAX_THREADS ? GEN_MAX_THREADS : (int)n;
}

/* Make and write every sample; 0 or a code with err set. */
static int gen_loop(const struct stk_gen_opts *o, struct stk_writer *w,
                    stk_gen_progress_fn progress, void *ctx, char *err) {
  struct made *m = calloc(GEN_BATCH, sizeof *m);
  if (!m) return stk__errf(err, STK_ENOMEM, "out of memory");
  int threads = gen_threads(), rc = 0;
  for (uint64_t first = 0; first < o->samples && !rc; first += GEN_BATCH) {
    struct batch b = {.o = o, .first = first, .m = m};
    b.n = STK__MIN((uint64_t)GEN_BATCH, o->samples - first);
    make_batch(&b, threads);
    for (uint64_t k = 0; k < b.n; k++) {
      if (!rc && m[k].rc) rc = stk__errf(err, m[k].rc, "%s", m[k].err);
      if (!rc && (rc = stk_writer_add(w, &m[k].s)) != 0)
        stk__errf(err, rc, "%s", stk_writer_errmsg(w));
      made_free(&m[k]);
    }
    if (!rc && progress && progress(ctx, first + b.n, o->samples, stk_writer_bytes(w)))
      rc = stk__errf(err, STK_ECANCELED, "gen: interrupted");
  }
  free(m);
  return rc;
}

int stk_gen(const struct stk_gen_opts *o, stk_gen_progress_fn progress, void *ctx,
            char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  uint64_t t0 = stk_now_ns();
  int rc = check_opts(o, err);
  if (!rc) rc = prepare_dir(o, err);
  struct stk_writer *w = NULL;
  struct stk_writer_opts wo = {.format = o ? o->format : NULL,
                               .dir = o ? o->dir : NULL,
                               .shard_bytes = o ? o->shard_bytes : 0,
                               .samples_per_shard = o ? o->samples_per_shard : 0,
                               .write_index = o ? !o->no_index : 0};
  if (!rc) rc = stk_writer_open(&w, &wo, err);
  if (!rc) rc = gen_loop(o, w, progress, ctx, err);
  if (!rc && (rc = stk__writer_finish(w)) != 0) stk__errf(err, rc, "%s", w->err);
  uint64_t shards = w ? w->shard_no : 0, bytes = w ? w->bytes : 0;
  if (w && rc) stk_writer_abort(w);
  if (rc) return stk__errf(errmsg, rc, "%s", err);
  stk_writer_close(w);
  if (o->stats) {
    o->stats->samples = o->samples;
    o->stats->shards = shards;
    o->stats->bytes = bytes;
    o->stats->wall_ns = stk_now_ns() - t0;
  }
  return 0;
}
