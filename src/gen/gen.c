/* Synthetic datasets: samples drawn from a per-sample seeded stream (so any
 * sample can be made by any thread and the output is the same for the same
 * seed). Generator threads run for the whole job, making chunks of
 * consecutive samples into a bounded ring of reused buffers, while the
 * calling thread writes the finished chunks in order through the generic
 * writer, so making and writing overlap.
 *
 * npz files of random bytes take DLIO's layout, np.savez(path, x=records,
 * y=labels): x is a uint8 array of shape (H, W, N) holding the file's N
 * samples along its last axis (N = samples per shard), y their N labels
 * (int64; 0 without classes, as DLIO writes them). The writer's unit is
 * then a file, not a sample.
 *
 * A megatron corpus is documents of random tokens, one sequence each, whose
 * lengths follow the drawn distribution; the writer lays out the .bin and
 * its .idx (src/format/megatron.c). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../format/format_impl.h"
#include "stoker/gen.h"
#include "synth.h"

#define GEN_MAX_CHUNK 64              /* samples per chunk at most */
#define GEN_CHUNK_BYTES (1u << 20)    /* payload bytes a chunk aims at */
#define GEN_RING_MAX_BYTES (256u << 20) /* fewer chunks in flight past this */
#define GEN_MAX_THREADS 16
#define GEN_DEFAULT_SIZE (112u * 1024)
#define GEN_MAX_SIZE (1ull << 31)

/* A payload buffer kept from sample to sample (a fresh malloc of a large
 * sample is an mmap, and page faults on every page). */
struct buf {
  uint8_t *p;
  size_t cap;
};

enum { CH_FREE, CH_BUSY, CH_READY };

/* One slot of the ring: samples [first, first + n), whose fields point into
 * b, with the CRC32C of each one's first field when the format wants it.
 * rc and err hold the first failure making them. */
struct chunk {
  uint64_t first, n;
  int state; /* CH_*, under ring.mu */
  int rc;
  char err[STK_ERRMSG_MAX];
  struct stk_sample s[GEN_MAX_CHUNK];
  struct buf b[GEN_MAX_CHUNK][2];
  uint32_t crc[GEN_MAX_CHUNK];
};

/* Chunk k of the job lives in slot k % nslots; it may be made once chunk
 * k - nslots is written. */
struct ring {
  const struct stk_gen_opts *o;
  uint64_t per_chunk; /* samples per chunk (the last may have fewer) */
  uint64_t nchunks;   /* chunks in the job */
  int want_crc;       /* the writer's format stores CRC32Cs of fields */
  struct chunk *slot;
  size_t nslots;
  pthread_mutex_t mu;
  pthread_cond_t made;  /* a chunk became CH_READY */
  pthread_cond_t freed; /* a slot became CH_FREE, or stop was set */
  uint64_t claim;       /* next chunk to make */
  uint64_t written;     /* chunks written */
  int stop;
};

/* Room for n bytes in b; its old contents are not kept. A little slack, so
 * sizes drawn around a mean do not reallocate at every new maximum. */
static int reserve(struct buf *b, size_t n) {
  if (n <= b->cap && b->p) return 0;
  size_t cap = n + n / 8;
  free(b->p);
  b->cap = 0;
  if (!(b->p = malloc(cap ? cap : 1))) return STK_ENOMEM;
  b->cap = cap;
  return 0;
}

static int is_jpeg(const struct stk_gen_opts *o) { return o->jpeg_max_w > 0 && o->jpeg_max_h > 0; }

/* The STK__SYNTH_ encoding image_format names; -1 for an unknown one. */
static int image_enc(const struct stk_gen_opts *o) {
  const char *f = o->image_format;
  if (!f || !strcmp(f, "jpeg")) return STK__SYNTH_JPEG;
  return !strcmp(f, "png") ? STK__SYNTH_PNG : !strcmp(f, "webp") ? STK__SYNTH_WEBP : -1;
}

static int is_arrays(const struct stk_gen_opts *o) {
  return !strcmp(o->format, "npy") || !strcmp(o->format, "npz");
}
static int is_dlio(const struct stk_gen_opts *o) { return !strcmp(o->format, "npz") && !is_jpeg(o); }
/* Samples per unit the writer gets (a DLIO npz file), else 1. */
static uint64_t per_unit(const struct stk_gen_opts *o) {
  return is_dlio(o) && o->samples_per_shard > 1 ? o->samples_per_shard : 1;
}
static uint64_t units(const struct stk_gen_opts *o) {
  uint64_t k = per_unit(o);
  return o->samples / k + (o->samples % k != 0);
}

/* ---- megatron token corpora ---------------------------------------------- */

#define GEN_DOC_LEN 1024
#define GEN_VOCAB 50257

static int is_megatron(const struct stk_gen_opts *o) { return !strcmp(o->format, "megatron"); }
static uint64_t gen_vocab(const struct stk_gen_opts *o) { return o->vocab ? o->vocab : GEN_VOCAB; }

/* The token dtype: the one asked for, else Megatron's rule (uint16 below a
 * vocabulary of 65500, else int32). */
static const struct stk__megatron_dtype *gen_dtype(const struct stk_gen_opts *o) {
  if (o->dtype) return stk__megatron_dtype_by_name(o->dtype);
  return stk__megatron_dtype_by_name(gen_vocab(o) < 65500 ? "uint16" : "int32");
}

/* A document's length in tokens: normal, or lognormal with the same mean
 * and standard deviation. */
static uint64_t draw_doc_len(const struct stk_gen_opts *o, struct stk_rng *r) {
  double mean = o->doc_len_mean ? (double)o->doc_len_mean : GEN_DOC_LEN, sd = (double)o->doc_len_stdev;
  double v = mean;
  if (sd > 0 && o->doc_len_lognormal) {
    double s2 = log1p(sd * sd / (mean * mean));
    v = exp(log(mean) - s2 / 2 + sqrt(s2) * stk_rng_normal(r));
  } else if (sd > 0) {
    v = mean + sd * stk_rng_normal(r);
  }
  if (!(v >= 1)) v = 1;
  if (v > (double)INT32_MAX) v = (double)INT32_MAX;
  return (uint64_t)llround(v);
}

/* n tokens of dt->size bytes at p: random bytes scaled into [0, vocab - 1)
 * in place (multiply and shift: no division per token), and the last one
 * vocab - 1. */
static void fill_tokens(uint8_t *p, uint64_t n, const struct stk__megatron_dtype *dt,
                        uint64_t vocab, struct stk_rng *r) {
  uint64_t v = vocab - 1;
  stk_rng_fill(r, p, (size_t)(n * dt->size));
  switch (dt->size) {
  case 1:
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)((p[i] * v) >> 8);
    break;
  case 2:
    for (uint64_t i = 0; i < n; i++) stk__st16(p + 2 * i, (uint16_t)((stk__ld16(p + 2 * i) * v) >> 16));
    break;
  case 4:
    for (uint64_t i = 0; i < n; i++)
      stk__st32(p + 4 * i, (uint32_t)(((uint64_t)stk__ld32(p + 4 * i) * v) >> 32));
    break;
  default:
    for (uint64_t i = 0; i < n; i++)
      stk__st64(p + 8 * i, (((uint64_t)stk__ld32(p + 8 * i)) * v) >> 32);
  }
  uint8_t *last = p + (n - 1) * dt->size;
  if (dt->size == 1) *last = (uint8_t)v;
  else if (dt->size == 2) stk__st16(last, (uint16_t)v);
  else if (dt->size == 4) stk__st32(last, (uint32_t)v);
  else stk__st64(last, v);
}

static int make_doc(const struct stk_gen_opts *o, struct stk_sample *s, struct buf *b,
                    struct stk_rng *r) {
  const struct stk__megatron_dtype *dt = gen_dtype(o);
  uint64_t n = draw_doc_len(o, r);
  if (n * dt->size > GEN_MAX_SIZE) n = GEN_MAX_SIZE / dt->size;
  if (reserve(&b[0], (size_t)(n * dt->size))) return STK_ENOMEM;
  fill_tokens(b[0].p, n, dt, gen_vocab(o), r);
  stk__sample_add(s, "tokens", 6, b[0].p, n * dt->size);
  return 0;
}

/* The largest vocabulary a dtype holds (tokens 0 .. vocab - 1). */
static uint64_t dtype_vocab_max(const struct stk__megatron_dtype *dt) {
  if (dt->size >= 4) return dt->size == 4 ? (1ull << 31) : (1ull << 32);
  return 1ull << (8 * dt->size - dt->is_signed);
}

static int check_megatron(const struct stk_gen_opts *o, char *err) {
  const struct stk__megatron_dtype *dt = gen_dtype(o);
  if (!dt || dt->is_float)
    return stk__errf(err, STK_EINVAL,
                     "gen: --dtype '%s' is not one of uint8, int8, int16, uint16, int32, int64",
                     o->dtype ? o->dtype : "");
  if (gen_vocab(o) < 2 || gen_vocab(o) > dtype_vocab_max(dt))
    return stk__errf(err, STK_EINVAL, "gen: a vocabulary of %llu tokens %s", (unsigned long long)gen_vocab(o),
                     gen_vocab(o) < 2 ? "is too small (at least 2: one for the end of a document)"
                                      : dt->size == 8 ? "is over what gen draws (2^32)"
                                                      : "does not fit the dtype");
  if (o->doc_len_mean > INT32_MAX)
    return stk__errf(err, STK_EINVAL, "gen: a document holds at most 2^31 - 1 tokens");
  return 0;
}

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

/* A .npy image of a uint8 array of the given shape in b, filled from r;
 * its length in *len. */
static int make_npy(struct buf *b, struct stk_rng *r, const uint64_t *shape, int nd,
                    uint64_t *len) {
  uint64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  uint8_t h[256];
  size_t hl = stk__npy_header(h, sizeof h, "|u1", shape, nd);
  if (reserve(b, hl + n)) return STK_ENOMEM;
  memcpy(b->p, h, hl);
  stk_rng_fill(r, b->p + hl, n);
  *len = hl + n;
  return 0;
}

/* The label array of an npz sample: int64 of shape (1,). */
static int make_label_npy(struct buf *b, int32_t label, uint64_t *len) {
  uint8_t h[256];
  uint64_t one = 1;
  size_t hl = stk__npy_header(h, sizeof h, "<i8", &one, 1);
  if (reserve(b, hl + 8)) return STK_ENOMEM;
  memcpy(b->p, h, hl);
  stk__st64(b->p + hl, (uint64_t)(int64_t)(label < 0 ? 0 : label));
  *len = hl + 8;
  return 0;
}

/* Sample i's label, from its own stream (the first draw, as make_sample
 * does), so a sample has the same label whatever file holds it. */
static int32_t draw_label(const struct stk_gen_opts *o, uint64_t i) {
  struct stk_rng r;
  stk_rng_seed(&r, stk_mix64(o->seed, i));
  return o->classes ? (int32_t)stk_rng_below(&r, o->classes) : -1;
}

/* File k of DLIO's npz layout: samples [k*N, k*N + n) as x of shape
 * (H, W, n), H*W near the drawn size, and y of their n labels. */
static int make_dlio(const struct stk_gen_opts *o, uint64_t k, struct stk_sample *s,
                     struct buf *b) {
  uint64_t first = k * per_unit(o), n = STK__MIN(per_unit(o), o->samples - first);
  struct stk_rng r;
  stk_rng_seed(&r, stk_mix64(o->seed, first));
  if (o->classes) (void)stk_rng_below(&r, o->classes); /* as make_sample draws */
  uint64_t size = draw_size(o, &r), h = (uint64_t)sqrt((double)size);
  if (h < 1) h = 1;
  uint64_t shape[3] = {h, (size + h / 2) / h, n}, xl, yl;
  if (!shape[1]) shape[1] = 1;
  if (make_npy(&b[0], &r, shape, 3, &xl)) return STK_ENOMEM;
  uint8_t hd[256];
  size_t hl = stk__npy_header(hd, sizeof hd, "<i8", &n, 1);
  if (reserve(&b[1], hl + 8 * n)) return STK_ENOMEM;
  memcpy(b[1].p, hd, hl);
  for (uint64_t i = 0; i < n; i++) {
    int32_t lab = draw_label(o, first + i);
    stk__st64(b[1].p + hl + 8 * i, (uint64_t)(int64_t)(lab < 0 ? 0 : lab));
  }
  yl = hl + 8 * n;
  memset(s, 0, sizeof *s);
  s->index = first;
  s->label = -1;
  snprintf(s->key, sizeof s->key, "%08llu", (unsigned long long)k);
  stk__sample_add(s, "x", 1, b[0].p, xl);
  stk__sample_add(s, "y", 1, b[1].p, yl);
  return 0;
}

static int make_arrays(const struct stk_gen_opts *o, struct stk_sample *s, struct buf *b,
                       struct stk_rng *r) {
  uint64_t shape[3], n, yn;
  int nd = 1;
  if (is_jpeg(o)) {
    shape[1] = (uint64_t)draw_dim(r, o->jpeg_min_w, o->jpeg_max_w);
    shape[0] = (uint64_t)draw_dim(r, o->jpeg_min_h, o->jpeg_max_h);
    shape[2] = 3;
    nd = 3;
  } else {
    shape[0] = draw_size(o, r);
  }
  if (make_npy(&b[0], r, shape, nd, &n)) return STK_ENOMEM;
  if (!strcmp(o->format, "npz")) {
    if (make_label_npy(&b[1], s->label, &yn)) return STK_ENOMEM;
    stk__sample_add(s, "x", 1, b[0].p, n);
    stk__sample_add(s, "y", 1, b[1].p, yn);
  } else {
    stk__sample_add(s, "npy", 3, b[0].p, n);
  }
  return 0;
}

static int make_payload(const struct stk_gen_opts *o, struct stk_sample *s, struct buf *b,
                        struct stk_rng *r, char *err) {
  if (is_jpeg(o)) {
    int w = draw_dim(r, o->jpeg_min_w, o->jpeg_max_w);
    int h = draw_dim(r, o->jpeg_min_h, o->jpeg_max_h);
    uint8_t *p;
    size_t len;
    int enc = image_enc(o);
    int rc = stk__image_synth(r, w, h, o->quality ? o->quality : 90, enc, &p, &len, err);
    if (rc) return rc;
    free(b[0].p); /* the encoder allocates its own output */
    b[0].p = p;
    b[0].cap = len;
    static const char *const fields[] = {"jpg", "png", "webp"};
    stk__sample_add(s, fields[enc], strlen(fields[enc]), p, len);
    return 0;
  }
  uint64_t n = draw_size(o, r);
  if (reserve(&b[0], (size_t)n)) return STK_ENOMEM;
  stk_rng_fill(r, b[0].p, (size_t)n);
  stk__sample_add(s, "bin", 3, b[0].p, n);
  return 0;
}

/* Sample i into s and b, from its own stream: label first, then the
 * payload. 0 or a code with err set. */
static int make_sample(const struct stk_gen_opts *o, uint64_t i, struct stk_sample *s,
                       struct buf *b, char *err) {
  if (is_dlio(o)) {
    int rc = make_dlio(o, i, s, b);
    if (rc) stk__errf(err, rc, "out of memory making file %llu", (unsigned long long)i);
    return rc;
  }
  struct stk_rng r;
  stk_rng_seed(&r, stk_mix64(o->seed, i));
  memset(s, 0, sizeof *s);
  s->index = i;
  s->label = o->classes ? (int32_t)stk_rng_below(&r, o->classes) : -1;
  snprintf(s->key, sizeof s->key, "%08llu", (unsigned long long)i);
  int rc = is_megatron(o) ? make_doc(o, s, b, &r)
           : is_arrays(o) ? make_arrays(o, s, b, &r)
                          : make_payload(o, s, b, &r, err);
  if (rc == STK_ENOMEM)
    stk__errf(err, rc, "out of memory making sample %llu", (unsigned long long)i);
  return rc;
}

static void make_chunk(const struct ring *g, uint64_t k, struct chunk *c) {
  c->first = k * g->per_chunk;
  c->n = STK__MIN(g->per_chunk, units(g->o) - c->first);
  c->rc = 0;
  for (uint64_t i = 0; i < c->n && !c->rc; i++) {
    c->rc = make_sample(g->o, c->first + i, &c->s[i], c->b[i], c->err);
    /* Here the bytes are still in this core's cache; the writer thread,
     * which is the one that limits the rate, would fetch them again. */
    if (!c->rc && g->want_crc)
      c->crc[i] = stk_crc32c(0, c->s[i].fields[0].data, (size_t)c->s[i].fields[0].len);
  }
}

/* Take the next chunk if its slot is free; under g->mu. */
static int claim_next(struct ring *g, uint64_t *k) {
  if (g->stop || g->claim >= g->nchunks || g->claim >= g->written + g->nslots) return 0;
  *k = g->claim++;
  g->slot[*k % g->nslots].state = CH_BUSY;
  return 1;
}

/* Make chunk k (claimed) outside the lock; called and returns under g->mu. */
static void make_claimed(struct ring *g, uint64_t k) {
  struct chunk *c = &g->slot[k % g->nslots];
  pthread_mutex_unlock(&g->mu);
  make_chunk(g, k, c);
  pthread_mutex_lock(&g->mu);
  c->state = CH_READY;
  pthread_cond_signal(&g->made); /* only the writer waits for it */
}

static void *generator(void *arg) {
  struct ring *g = arg;
  pthread_mutex_lock(&g->mu);
  while (!g->stop && g->claim < g->nchunks) {
    uint64_t k;
    if (claim_next(g, &k)) make_claimed(g, k);
    else pthread_cond_wait(&g->freed, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* Wait for chunk k to be made; the writer makes it itself when nobody has
 * taken it (no generator thread could start, or all are busy further
 * on). */
static struct chunk *wait_chunk(struct ring *g, uint64_t k) {
  struct chunk *c = &g->slot[k % g->nslots];
  pthread_mutex_lock(&g->mu);
  while (c->state != CH_READY) {
    uint64_t mine;
    if (g->claim == k && claim_next(g, &mine)) make_claimed(g, mine);
    else pthread_cond_wait(&g->made, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  return c;
}

static void release_chunk(struct ring *g, struct chunk *c) {
  pthread_mutex_lock(&g->mu);
  c->state = CH_FREE;
  g->written++;
  pthread_cond_broadcast(&g->freed);
  pthread_mutex_unlock(&g->mu);
}

/* Rough payload bytes of one sample, in [1, GEN_MAX_SIZE], to size chunks
 * and the ring. */
static uint64_t size_guess(const struct stk_gen_opts *o) {
  if (is_megatron(o)) {
    const struct stk__megatron_dtype *dt = gen_dtype(o);
    uint64_t toks = (o->doc_len_mean ? o->doc_len_mean : GEN_DOC_LEN) + o->doc_len_stdev;
    return STK__MAX(1, STK__MIN(toks * (dt ? dt->size : 1), GEN_MAX_SIZE));
  }
  if (is_jpeg(o)) {
    uint64_t px = (uint64_t)o->jpeg_max_w * (uint64_t)o->jpeg_max_h;
    return is_arrays(o) ? 3 * px : px / 2 + 1;
  }
  uint64_t mean = STK__MIN(o->size_mean ? o->size_mean : GEN_DEFAULT_SIZE, GEN_MAX_SIZE);
  uint64_t sd = STK__MIN(o->size_stdev, GEN_MAX_SIZE);
  return STK__MIN(mean + sd, GEN_MAX_SIZE) * per_unit(o);
}

static int ring_init(struct ring *g, const struct stk_gen_opts *o, int threads, int want_crc) {
  memset(g, 0, sizeof *g);
  g->o = o;
  g->want_crc = want_crc;
  uint64_t est = size_guess(o);
  g->per_chunk = STK__MIN((uint64_t)GEN_MAX_CHUNK, GEN_CHUNK_BYTES / est);
  if (!g->per_chunk) g->per_chunk = 1;
  g->nchunks = (units(o) + g->per_chunk - 1) / g->per_chunk;
  /* Enough slots that every generator can work ahead while the writer is
   * in a long write, and few enough that huge samples stay bounded. */
  uint64_t n = 4 * (uint64_t)threads + 4, chunk_bytes = g->per_chunk * est;
  if (n * chunk_bytes > GEN_RING_MAX_BYTES) n = GEN_RING_MAX_BYTES / chunk_bytes;
  g->nslots = (size_t)(n < 2 ? 2 : n);
  if (!(g->slot = calloc(g->nslots, sizeof *g->slot))) return STK_ENOMEM;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->made, NULL);
  pthread_cond_init(&g->freed, NULL);
  return 0;
}

static void ring_free(struct ring *g) {
  for (size_t i = 0; i < g->nslots; i++)
    for (int j = 0; j < GEN_MAX_CHUNK; j++) {
      free(g->slot[i].b[j][0].p);
      free(g->slot[i].b[j][1].p);
    }
  free(g->slot);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->made);
  pthread_cond_destroy(&g->freed);
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
  if (o->samples > INT64_MAX)
    return stk__errf(err, STK_EINVAL, "gen: %llu samples is out of range (1..%lld)",
                     (unsigned long long)o->samples, (long long)INT64_MAX);
  if (o->quality < 0 || o->quality > 100)
    return stk__errf(err, STK_EINVAL, "gen: JPEG quality %d is outside 1..100", o->quality);
  if ((o->jpeg_max_w > 0) != (o->jpeg_max_h > 0) || o->jpeg_max_w > 16384 ||
      o->jpeg_max_h > 16384 || o->jpeg_min_w > o->jpeg_max_w || o->jpeg_min_h > o->jpeg_max_h ||
      o->jpeg_min_w < 0 || o->jpeg_min_h < 0)
    return stk__errf(err, STK_EINVAL, "gen: bad JPEG size range %dx%d-%dx%d", o->jpeg_min_w,
                     o->jpeg_min_h, o->jpeg_max_w, o->jpeg_max_h);
  if (o->classes > INT32_MAX) return stk__errf(err, STK_EINVAL, "gen: too many classes");
  if (image_enc(o) < 0)
    return stk__errf(err, STK_EINVAL, "gen: image format '%s' is not jpeg, png or webp",
                     o->image_format);
  if (image_enc(o) != STK__SYNTH_JPEG && (!is_jpeg(o) || is_arrays(o)))
    return stk__errf(err, STK_EINVAL,
                     "gen: image format '%s' needs --jpeg sizes and a format other than npy "
                     "or npz (they hold pixel arrays)", o->image_format);
  if (is_megatron(o)) {
    int rc = check_megatron(o, err);
    if (rc) return rc;
    if (is_jpeg(o) || o->classes)
      return stk__errf(err, STK_EINVAL, "gen: a megatron corpus holds tokens: no --jpeg or --classes");
  } else if (o->vocab || o->dtype || o->doc_len_mean || o->doc_len_stdev) {
    return stk__errf(err, STK_EINVAL,
                     "gen: --vocab, --dtype and --doc-len are for --format megatron");
  }
  if (o->size_mean > GEN_MAX_SIZE) { /* refused, not clamped: the user asked for that size */
    char b[32];
    return stk__errf(err, STK_EINVAL, "--size: %s is over the largest sample gen writes (2 GiB)",
                     stk_fmt_bytes(o->size_mean, b, sizeof b));
  }
  return 0;
}

/* Generator threads: one per core. They block when the ring is full, so
 * the writing thread (most of whose time goes to the kernel's copy into
 * the page cache) still gets a core whenever there is something to write. */
static int gen_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > GEN_MAX_THREADS ? GEN_MAX_THREADS : (int)n;
}

/* Make and write every sample; 0 or a code with err set. */
static int gen_loop(const struct stk_gen_opts *o, struct stk_writer *w,
                    stk_gen_progress_fn progress, void *ctx, char *err) {
  struct ring g;
  int threads = gen_threads(), started = 0, rc = 0;
  if (ring_init(&g, o, threads, stk__writer_wants_crc(w))) {
    free(g.slot);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  pthread_t tid[GEN_MAX_THREADS];
  for (int t = 0; t < threads; t++)
    if (pthread_create(&tid[started], NULL, generator, &g) == 0) started++;
  for (uint64_t k = 0; k < g.nchunks && !rc; k++) {
    struct chunk *c = wait_chunk(&g, k);
    if (c->rc) rc = stk__errf(err, c->rc, "%s", c->err);
    else if ((rc = stk__writer_add_batch(w, c->s, g.want_crc ? c->crc : NULL, (size_t)c->n)) != 0)
      stk__errf(err, rc, "%s", stk_writer_errmsg(w));
    else if (progress && progress(ctx, STK__MIN(o->samples, (c->first + c->n) * per_unit(o)),
                                  o->samples, stk_writer_bytes(w)))
      rc = stk__errf(err, STK_ECANCELED, "gen: interrupted");
    release_chunk(&g, c);
  }
  pthread_mutex_lock(&g.mu);
  g.stop = 1;
  pthread_cond_broadcast(&g.freed);
  pthread_mutex_unlock(&g.mu);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  ring_free(&g);
  return rc;
}

/* npy keeps labels in class folders (DIR/00003/...): all of them exist, so
 * a reader that numbers folders in name order (DatasetFolder, the files
 * format) gets the same labels even when a class drew no sample. */
static int class_dirs(const struct stk_gen_opts *o, struct stk_writer *w, char *err) {
  if (strcmp(o->format, "npy") || !o->classes) return 0;
  for (uint32_t c = 0; c < o->classes; c++) {
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s/%05u", o->dir, c);
    if (mkdir(d, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      return stk__errf(err, stk__from_errno(e), "%s: cannot create directory: %s", d, strerror(e));
    }
    if (stk__wr_track_dir(w, d)) return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  return 0;
}

void stk_gen_opts_init_sized(struct stk_gen_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_gen_stats_init_sized(struct stk_gen_stats *st, size_t size) {
  stk__opts_init(st, sizeof *st, size);
}

int stk_gen(const struct stk_gen_opts *user, stk_gen_progress_fn progress, void *ctx,
            char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  uint64_t t0 = stk_now_ns();
  struct stk_gen_opts own;
  const struct stk_gen_opts *o = user ? &own : NULL;
  int rc = user ? stk__opts_take(&own, sizeof own, user, "stk_gen_opts", err) : 0;
  if (!rc) rc = check_opts(o, err);
  if (!rc) rc = prepare_dir(o, err);
  struct stk_writer *w = NULL;
  struct stk_writer_opts wo = {.format = o ? o->format : NULL,
                               .dir = o ? o->dir : NULL,
                               .shard_bytes = o ? o->shard_bytes : 0,
                               .samples_per_shard = o ? o->samples_per_shard : 0,
                               .write_index = o ? !o->no_index : 0};
  if (!rc) rc = stk_writer_open(&w, &wo, err);
  if (!rc && is_megatron(o) && (rc = stk__megatron_writer_dtype(w, gen_dtype(o)->name)) != 0)
    stk__errf(err, rc, "%s", w->err);
  if (!rc) rc = class_dirs(o, w, err);
  if (!rc) rc = gen_loop(o, w, progress, ctx, err);
  if (!rc && (rc = stk__writer_finish(w)) != 0) stk__errf(err, rc, "%s", w->err);
  uint64_t shards = w ? w->shard_no : 0, bytes = w ? w->bytes : 0;
  if (w && rc) stk_writer_abort(w);
  if (rc) return stk__errf(errmsg, rc, "%s", err);
  stk_writer_close(w);
  if (o->stats) { /* the caller's struct gets no more than its struct_size */
    struct stk_gen_stats full = {.samples = o->samples,
                                 .shards = shards,
                                 .bytes = bytes,
                                 .wall_ns = stk_now_ns() - t0};
    stk__result_give(o->stats, &full, sizeof full);
  }
  return 0;
}
