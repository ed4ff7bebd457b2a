/* The sampler: which global sample each rank reads next.
 *
 * An epoch has one global order, a function of (seed, epoch, position)
 * alone; rank r of W takes positions r, r+W, r+2W, ... of it. Because the
 * order never depends on the world size and the state is a single global
 * position at a round boundary, a run saved with W ranks resumes with W'
 * ranks without repeating or dropping a sample of the epoch.
 *
 * GLOBAL shuffles with a keyed Feistel permutation over [0, N) (cycle
 * walking on the next power of four), so it needs no O(N) table and any
 * position is computed directly. BLOCK visits shards in a seeded order and
 * shuffles samples inside consecutive windows, so reads stay within a few
 * shards at a time (for sequential formats) while the order is still a pure
 * function of the position. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../dataset/dataset_impl.h"
#include "../format/format_impl.h"
#include "stoker/loader.h"

/* ---- keyed permutation of [0, n) --------------------------------------- */

struct perm {
  uint64_t n;
  int half_bits; /* domain is 2^(2*half_bits) >= n */
  uint64_t key;
};

struct stk_sampler {
  enum stk_shuffle mode;
  uint64_t seed, epoch, position;
  uint64_t n;            /* samples in the dataset */
  uint64_t window;
  uint32_t rank, world;
  /* BLOCK: shard visiting order and the prefix sums of their counts. */
  size_t nshards;
  uint64_t *shard_counts;
  uint32_t *shard_order;
  uint64_t *cum;          /* cum[i] = samples before shard_order[i] */
  uint64_t *first;        /* first global sample of each shard */
  struct perm gperm;      /* GLOBAL: this epoch's permutation */
  const struct stk_dataset *ds; /* for the fingerprint a restore checks */
  uint64_t fp;                  /* its fingerprint once computed, else 0 */
};

static void perm_init(struct perm *p, uint64_t n, uint64_t key) {
  p->n = n;
  p->key = key;
  p->half_bits = 1;
  while (p->half_bits < 32 && (1ull << (2 * p->half_bits)) < n) p->half_bits++;
}

static uint64_t feistel(const struct perm *p, uint64_t x) {
  uint64_t mask = (1ull << p->half_bits) - 1;
  uint64_t l = x >> p->half_bits, r = x & mask;
  for (int round = 0; round < 6; round++) {
    uint64_t f = stk_mix64(p->key + (uint64_t)round, r) & mask;
    uint64_t t = l ^ f;
    l = r;
    r = t;
  }
  return (l << p->half_bits) | r;
}

/* A bijection on [0, n): walk the Feistel cycle until it lands inside.
 * The domain is at most 4n, so the expected number of steps is under 4. */
static uint64_t perm_apply(const struct perm *p, uint64_t x) {
  if (p->n <= 1) return x;
  do x = feistel(p, x);
  while (x >= p->n);
  return x;
}

/* ---- order of one epoch ------------------------------------------------ */

static uint64_t epoch_key(const struct stk_sampler *s, uint64_t salt) {
  return stk_mix64(stk_mix64(s->seed, s->epoch), salt);
}

static void block_epoch_setup(struct stk_sampler *s) {
  struct stk_rng r;
  stk_rng_seed(&r, epoch_key(s, 0x5a4d));
  for (size_t i = 0; i < s->nshards; i++) s->shard_order[i] = (uint32_t)i;
  for (size_t i = s->nshards; i > 1; i--) { /* Fisher-Yates over shards */
    size_t j = (size_t)stk_rng_below(&r, i);
    uint32_t t = s->shard_order[i - 1];
    s->shard_order[i - 1] = s->shard_order[j];
    s->shard_order[j] = t;
  }
  uint64_t c = 0;
  for (size_t i = 0; i < s->nshards; i++) {
    s->cum[i] = c;
    c += s->shard_counts[s->shard_order[i]];
  }
  s->cum[s->nshards] = c;
}

/* Stream position in the shuffled shard order -> global sample number. */
static uint64_t block_stream(const struct stk_sampler *s, uint64_t p) {
  size_t lo = 0, hi = s->nshards; /* last i with cum[i] <= p */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (s->cum[mid] <= p)
      lo = mid;
    else
      hi = mid;
  }
  uint32_t sh = s->shard_order[lo];
  return s->first[sh] + (p - s->cum[lo]);
}

static uint64_t order_at(const struct stk_sampler *s, uint64_t g) {
  switch (s->mode) {
    case STK_SHUFFLE_GLOBAL:
      return perm_apply(&s->gperm, g);
    case STK_SHUFFLE_BLOCK: {
      uint64_t w0 = g - g % s->window;
      uint64_t wlen = STK__MIN(s->window, s->n - w0);
      struct perm p;
      perm_init(&p, wlen, epoch_key(s, 0x77 + w0 / s->window * 0x10001));
      return block_stream(s, w0 + perm_apply(&p, g - w0));
    }
    default:
      return g;
  }
}

/* ---- public ------------------------------------------------------------ */

int stk_sampler_open(struct stk_sampler **out, const struct stk_dataset *ds,
                     const struct stk_sampler_opts *o) {
  struct stk_sampler_opts def = {0};
  if (!o) o = &def;
  uint32_t world = o->world ? o->world : 1;
  if (o->rank >= world) return STK_EINVAL;
  if (ds->nsamples == 0) return STK_EEMPTY;
  struct stk_sampler *s = calloc(1, sizeof *s);
  if (!s) return STK_ENOMEM;
  s->mode = o->shuffle;
  if (s->mode == STK_SHUFFLE_AUTO)
    s->mode = (ds->fmt->caps & STK_FMT_RANDOM_ACCESS) ? STK_SHUFFLE_GLOBAL : STK_SHUFFLE_BLOCK;
  s->seed = o->seed;
  s->window = o->shuffle_window ? o->shuffle_window : 4096;
  s->rank = o->rank;
  s->world = world;
  s->n = ds->nsamples;
  s->nshards = ds->nshards;
  s->ds = ds;
  if (s->mode == STK_SHUFFLE_BLOCK) {
    s->shard_counts = malloc(s->nshards * sizeof *s->shard_counts);
    s->first = malloc(s->nshards * sizeof *s->first);
    s->shard_order = malloc(s->nshards * sizeof *s->shard_order);
    s->cum = malloc((s->nshards + 1) * sizeof *s->cum);
    if (!s->shard_counts || !s->first || !s->shard_order || !s->cum) {
      stk_sampler_close(s);
      return STK_ENOMEM;
    }
    for (size_t i = 0; i < s->nshards; i++) {
      s->shard_counts[i] = ds->shards[i].count;
      s->first[i] = ds->shards[i].first;
    }
  }
  stk_sampler_set_epoch(s, 0);
  *out = s;
  return 0;
}

void stk_sampler_close(struct stk_sampler *s) {
  if (!s) return;
  free(s->shard_counts);
  free(s->first);
  free(s->shard_order);
  free(s->cum);
  free(s);
}

void stk_sampler_set_epoch(struct stk_sampler *s, uint64_t e) {
  s->epoch = e;
  s->position = 0;
  if (s->mode == STK_SHUFFLE_BLOCK) block_epoch_setup(s);
  if (s->mode == STK_SHUFFLE_GLOBAL) perm_init(&s->gperm, s->n, epoch_key(s, 0x61));
}

int stk_sampler_next(struct stk_sampler *s, uint64_t *sample) {
  uint64_t g = s->position + s->rank;
  if (g >= s->n) return STK_EOF;
  *sample = order_at(s, g);
  s->position += s->world;
  return 0;
}

uint64_t stk_sampler_epoch_len(const struct stk_sampler *s) {
  uint64_t start = s->position + s->rank;
  return start >= s->n ? 0 : (s->n - start + s->world - 1) / s->world;
}

void stk_sampler_save(const struct stk_sampler *s, struct stk_sampler_state *st) {
  st->dataset_fp = 0; /* per batch, so too often to stat every shard */
  st->seed = s->seed;
  st->epoch = s->epoch;
  st->position = STK__MIN(s->position, s->n);
}

/* ---- the dataset's fingerprint ------------------------------------------ */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  return fnv(h, b, 8);
}

/* A shard's bytes on disk (or as the cache knows them); 0 when unknown. */
static uint64_t shard_size(const struct stk_dataset *ds, size_t i) {
  if (stk__dataset_staged(ds)) {
    uint64_t b = stk__shard_size((struct stk_dataset *)ds, i);
    return b == UINT64_MAX ? 0 : b;
  }
  struct stat st;
  const char *p = ds->shards[i].path;
  return p && stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

uint64_t stk_sampler_fingerprint(const struct stk_dataset *ds) {
  uint64_t h = 0xcbf29ce484222325ull;
  const char *fmt = ds->fmt && ds->fmt->name ? ds->fmt->name : "";
  h = fnv(h, fmt, strlen(fmt) + 1);
  h = fnv_u64(fnv_u64(h, ds->nshards), ds->nsamples);
  size_t rl = ds->root ? strlen(ds->root) : 0;
  for (size_t i = 0; i < ds->nshards; i++) {
    const struct stk_shard *sh = &ds->shards[i];
    const char *name = sh->path ? sh->path : "";
    /* The name below the root, so the same files reached by another path
     * (relative, absolute, a copy elsewhere) match. */
    if (rl && !strncmp(name, ds->root, rl) && name[rl] == '/') name += rl + 1;
    h = fnv(h, name, strlen(name) + 1);
    h = fnv_u64(fnv_u64(h, sh->count), shard_size(ds, i));
  }
  return h ? h : 1; /* 0 means "not recorded" in a state */
}

int stk_sampler_restore(struct stk_sampler *s, const struct stk_sampler_state *st) {
  if (st->seed != s->seed || st->position > s->n) return STK_EINVAL;
  if (st->dataset_fp) {
    if (!s->fp) s->fp = stk_sampler_fingerprint(s->ds);
    if (st->dataset_fp != s->fp) return STK_EINVAL;
  }
  stk_sampler_set_epoch(s, st->epoch);
  s->position = st->position;
  return 0;
}
