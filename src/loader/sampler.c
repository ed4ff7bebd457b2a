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
 * function of the position.
 *
 * A streamed dataset (remote, opened without a manifest) learns its shards'
 * sample counts as they arrive, in order. Its first epoch therefore visits
 * shards in dataset order, still shuffling samples inside each window: a
 * window's permutation needs only the counts of the shards up to its end,
 * which are counted (staged) when the window is reached. Later epochs, and
 * GLOBAL, need every count: the rest of the shards are counted first. The
 * rule depends only on how the dataset is opened, so a saved position
 * means the same order on resume. */
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../dataset/dataset.h"
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
  int shares;            /* enum stk_shares */
  /* BLOCK: shard visiting order and the prefix sums of their counts. */
  size_t nshards;
  uint64_t *shard_counts;
  uint32_t *shard_order;
  uint64_t *cum;          /* cum[i] = samples before shard_order[i] */
  uint64_t *first;        /* first global sample of each shard */
  struct perm gperm;      /* GLOBAL: this epoch's permutation */
  const struct stk_dataset *ds; /* for the fingerprint a restore checks */
  uint64_t fp;                  /* its fingerprint once computed, else 0 */
  /* Streamed datasets: n is UINT64_MAX until every shard is counted. */
  int ident;                    /* this epoch visits shards in dataset order */
  int fail;                     /* counting failed: every next() says so */
  const int *cancel;            /* stops counting (the loader's flag) */
  char err[STK_ERRMSG_MAX];     /* why counting failed */
};

/* A streamed dataset: count its shards until `upto` samples are known (or
 * all are); learn n once every shard is counted. */
static int need(struct stk_sampler *s, uint64_t upto) {
  if (s->n != UINT64_MAX) return 0;
  struct stk_dataset *ds = (struct stk_dataset *)s->ds; /* counting fills in its table */
  int rc = stk__dataset_count_through(ds, 0, upto, s->cancel, s->err);
  if (!rc && stk__dataset_all_counted(ds)) s->n = stk_dataset_samples_counted(ds, NULL);
  return rc;
}

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
  if (s->ident) return; /* stream positions are sample numbers */
  for (size_t i = 0; stk__dataset_streamed(s->ds) && i < s->nshards; i++) { /* counted by now */
    s->shard_counts[i] = stk__shard_count(s->ds, i);
    s->first[i] = stk__shard_first(s->ds, i);
  }
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
      uint64_t pos = w0 + perm_apply(&p, g - w0);
      return s->ident ? pos : block_stream(s, pos);
    }
    default:
      return g;
  }
}

/* ---- public ------------------------------------------------------------ */

int stk_sampler_open(struct stk_sampler **out, const struct stk_dataset *ds,
                     const struct stk_sampler_opts *opts) {
  /* An older program's struct is read only as far as it goes; a newer
   * one's is refused (this call has no message buffer: logged). */
  char err[STK_ERRMSG_MAX];
  struct stk_sampler_opts own;
  if (stk__opts_take(&own, sizeof own, opts, "stk_sampler_opts", err)) {
    stk_log(STK_LOG_ERROR, "%s", err);
    return STK_EINVAL;
  }
  const struct stk_sampler_opts *o = &own;
  uint32_t world = o->world ? o->world : 1;
  if (o->rank >= world) return STK_EINVAL;
  if (stk_dataset_samples_counted(ds, NULL) == 0 && !stk__dataset_streamed(ds)) return STK_EEMPTY;
  struct stk_sampler *s = calloc(1, sizeof *s);
  if (!s) return STK_ENOMEM;
  s->mode = o->shuffle;
  if (s->mode == STK_SHUFFLE_AUTO)
    s->mode =
        (stk_dataset_caps(ds) & STK_FMT_RANDOM_ACCESS) ? STK_SHUFFLE_GLOBAL : STK_SHUFFLE_BLOCK;
  s->seed = o->seed;
  s->window = o->shuffle_window ? o->shuffle_window : 4096;
  s->rank = o->rank;
  s->world = world;
  s->n = stk__dataset_all_counted(ds) ? stk_dataset_samples_counted(ds, NULL) : UINT64_MAX;
  s->nshards = stk_dataset_num_shards(ds);
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
      s->shard_counts[i] = stk__shard_count(ds, i);
      s->first[i] = stk__shard_first(ds, i);
    }
  }
  stk_sampler_set_epoch(s, 0);
  *out = s;
  return 0;
}

int stk__sampler_open_n(struct stk_sampler **out, uint64_t n, uint64_t fp, uint64_t seed,
                        const struct stk_sampler_opts *o) {
  uint32_t world = o->world ? o->world : 1;
  if (o->rank >= world) return STK_EINVAL;
  if (n == 0 || n == UINT64_MAX || !fp) return n ? STK_EINVAL : STK_EEMPTY;
  struct stk_sampler *s = calloc(1, sizeof *s);
  if (!s) return STK_ENOMEM;
  s->mode = STK_SHUFFLE_NONE;
  s->seed = seed;
  s->window = 4096;
  s->rank = o->rank;
  s->world = world;
  s->n = n;
  s->fp = fp;
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
  /* A streamed dataset's first epoch in dataset order (BLOCK, NONE); any
   * other order of it needs every count. */
  int streamed = s->ds && stk__dataset_streamed(s->ds);
  s->ident = streamed && e == 0 && s->mode != STK_SHUFFLE_GLOBAL;
  if (streamed && !s->ident && !s->fail) s->fail = need(s, UINT64_MAX);
  if (s->fail) return;
  if (s->mode == STK_SHUFFLE_BLOCK) block_epoch_setup(s);
  if (s->mode == STK_SHUFFLE_GLOBAL) perm_init(&s->gperm, s->n, epoch_key(s, 0x61));
}

void stk__sampler_set_cancel(struct stk_sampler *s, const int *cancel) { s->cancel = cancel; }
void stk__sampler_set_shares(struct stk_sampler *s, int shares) { s->shares = shares; }

/* Positions an epoch of n samples runs to: n, or whole rounds of world. */
static uint64_t epoch_limit(uint64_t n, uint32_t world, int shares) {
  if (shares == STK_SHARES_PAD) return (n + world - 1) / world * world;
  if (shares == STK_SHARES_DROP) return n - n % world;
  return n;
}

uint64_t stk__share_len(uint64_t n, uint64_t from, uint32_t rank, uint32_t world, int shares) {
  uint64_t limit = epoch_limit(n, world, shares), start = from + rank;
  return start >= limit ? 0 : (limit - start + world - 1) / world;
}
const char *stk__sampler_errmsg(const struct stk_sampler *s) { return s->err; }

int stk_sampler_next(struct stk_sampler *s, uint64_t *sample) {
  if (s->fail) return s->fail;
  uint64_t g = s->position + s->rank;
  /* Even shares need the epoch's size to know its last round. */
  if (s->shares != STK_SHARES_UNEVEN && s->n == UINT64_MAX) {
    int rc = need(s, UINT64_MAX);
    if (rc) return s->fail = rc;
  }
  if (s->ident && s->n == UINT64_MAX) { /* count through this window's end */
    uint64_t end = s->mode == STK_SHUFFLE_BLOCK ? g - g % s->window + s->window : g + 1;
    int rc = need(s, end < g ? UINT64_MAX : end);
    if (rc) return s->fail = rc;
  }
  if (s->shares == STK_SHARES_UNEVEN) {
    if (g >= s->n) return STK_EOF;
  } else if (g >= epoch_limit(s->n, s->world, s->shares)) {
    return STK_EOF;
  } else if (g >= s->n) {
    g %= s->n; /* PAD's last round wraps to the epoch's first samples */
  }
  *sample = order_at(s, g);
  s->position += s->world;
  return 0;
}

uint64_t stk_sampler_epoch_len(const struct stk_sampler *s) {
  need((struct stk_sampler *)s, UINT64_MAX); /* a streamed dataset's total */
  return stk__share_len(s->n, s->position, s->rank, s->world, s->shares);
}

void stk_sampler_save(const struct stk_sampler *s, struct stk_sampler_state *st) {
  st->dataset_fp = 0; /* per batch, so too often to stat every shard */
  st->seed = s->seed;
  st->epoch = s->epoch;
  st->position = STK__MIN(s->position, epoch_limit(s->n, s->world, s->shares));
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

uint64_t stk_sampler_fingerprint(const struct stk_dataset *ds) {
  uint64_t h = 0xcbf29ce484222325ull;
  const char *fmt = stk_dataset_format(ds);
  h = fnv(h, fmt, strlen(fmt) + 1);
  /* A streamed dataset's counts are learned as it is read: its shards'
   * names and sizes stand for it (and it never matches the same files
   * opened with counts, whose first epoch is ordered otherwise). Each
   * shard's size is what is known without opening it
   * (stk__shard_known_bytes). */
  int streamed = stk__dataset_streamed(ds);
  size_t ns = stk_dataset_num_shards(ds);
  h = fnv_u64(fnv_u64(h, ns), streamed ? UINT64_MAX : stk_dataset_samples_counted(ds, NULL));
  const char *root = stk_dataset_location(ds);
  size_t rl = root ? strlen(root) : 0;
  for (size_t i = 0; i < ns; i++) {
    const char *name = stk__shard_path(ds, i);
    if (!name) name = "";
    /* The name below the root, so the same files reached by another path
     * (relative, absolute, a copy elsewhere) match. */
    if (rl && !strncmp(name, root, rl) && name[rl] == '/') name += rl + 1;
    h = fnv(h, name, strlen(name) + 1);
    h = fnv_u64(fnv_u64(h, streamed ? 0 : stk__shard_count(ds, i)), stk__shard_known_bytes(ds, i));
  }
  return h ? h : 1; /* 0 means "not recorded" in a state */
}

int stk_sampler_restore(struct stk_sampler *s, const struct stk_sampler_state *st) {
  if (st->seed != s->seed) return STK_EINVAL;
  if (s->ds && stk__dataset_streamed(s->ds)) { /* the counts the saved position needs */
    int whole = s->mode == STK_SHUFFLE_GLOBAL || s->shares != STK_SHARES_UNEVEN || st->epoch;
    int rc = need(s, whole ? UINT64_MAX : st->position);
    if (rc) return rc;
  }
  /* PAD runs past n to whole rounds of the world that saved the state,
   * which this sampler cannot know: a position past this world's last
   * round is this epoch's end. */
  uint64_t pos = st->position;
  if (s->shares == STK_SHARES_PAD) {
    uint64_t limit = epoch_limit(s->n, s->world, s->shares);
    if (pos > limit) pos = limit;
  } else if (pos > s->n) {
    return STK_EINVAL;
  }
  if (st->dataset_fp) {
    if (!s->fp) s->fp = stk_sampler_fingerprint(s->ds);
    if (st->dataset_fp != s->fp) return STK_EINVAL;
  }
  stk_sampler_set_epoch(s, st->epoch);
  if (s->fail) return s->fail;
  s->position = pos;
  return 0;
}
