/* Token windows over Megatron indexed datasets: the sources (each a
 * dataset of .bin + .idx pairs taken as one corpus, its .bin files mapped),
 * Megatron's split of their documents, each source's window index
 * (tokens_index.c), Megatron's blend across sources (gpt_blend.c), and the
 * copy of one window out of the mapped tokens into a batch row, converted
 * to int32 or int64, padded, with its loss mask and document boundaries.
 * The loader's threads call stk__tokens_fill; the contracts are in
 * stoker/tokens.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../dataset/dataset.h"
#include "tokens_impl.h"

struct src {
  char *path;
  struct stk_dataset *ds;
  const struct stk__megatron_dtype *dt;
  size_t nshards;
  int *fd;             /* stk__shard_open's, kept while mapped */
  const uint8_t **bin; /* each shard's mapped .bin */
  size_t *bin_len;
  const struct stk__megatron_shard **m; /* each shard's .idx */
  uint64_t *first;                      /* nshards + 1: first sequence of each shard */
  int32_t *lengths;                     /* every sequence's tokens, shards in order */
  uint64_t n_lengths;
  int chunked;   /* the .bin files are read through the cache's chunks (remote) */
  int32_t *docs; /* the split's documents */
  uint64_t n_docs, split_tokens;
  struct stk__tok_index index;
  double weight;
  uint64_t blend_windows;
  atomic_uint_fast64_t served;
};

struct stk_tokens {
  struct stk_tokens_opts o;
  int n;
  struct src *src;
  struct stk__tok_blend blend; /* a blend: source of each window, and its window there */
  uint64_t nwin;
  uint32_t S; /* tokens per row */
  size_t es;  /* bytes per output token */
  uint64_t fp;
};

void stk_tokens_opts_init_sized(struct stk_tokens_opts *o, size_t size) {
  memset(o, 0, size);
  o->struct_size = size;
  if (size >= offsetof(struct stk_tokens_opts, seed) + sizeof o->seed) o->seed = 1234;
  if (size >= offsetof(struct stk_tokens_opts, pad_token) + sizeof o->pad_token) o->pad_token = -1;
}

/* ---- the split ----------------------------------------------------------- */

/* Megatron's parse_and_normalize_split and get_split_indices: up to three
 * non-negative numbers (missing ones 0) divided by their sum; part i of N
 * documents ends at the running sum of round(w * N) (Python's round: half
 * to even), all bounds shifted so the last is N. */
static int split_range(const char *split, uint32_t which, uint64_t N, uint64_t *lo, uint64_t *hi,
                       char *err) {
  double w[3] = {0, 0, 0};
  int k = 0;
  const char *p = split;
  while (*p) {
    while (*p == ' ') p++;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !isfinite(v) || v < 0 || k == 3) goto bad;
    w[k++] = v;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',' || *p == '/') {
      p++;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  double sum = 0;
  for (int i = 0; i < 3; i++) sum += w[i];
  if (k == 0 || sum <= 0) goto bad;
  if (which > 2)
    return stk__errf(err, STK_EINVAL,
                     "split index %u: Megatron's splits are 0 (train), 1 "
                     "(validation) and 2 (test)",
                     which);
  int64_t idx[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; i++) idx[i + 1] = idx[i] + (int64_t)nearbyint(w[i] / sum * (double)N);
  int64_t shift = idx[3] - (int64_t)N;
  for (int i = 1; i < 4; i++) idx[i] -= shift;
  if (idx[which + 1] <= idx[which])
    return stk__errf(err, STK_EEMPTY, "split '%s' leaves part %u empty (%" PRIu64 " documents)",
                     split, which, N);
  *lo = (uint64_t)idx[which];
  *hi = (uint64_t)idx[which + 1];
  return 0;
bad:
  return stk__errf(err, STK_EINVAL,
                   "split '%s' does not parse: give up to three non-negative numbers, not all 0, "
                   "as in 969,30,1",
                   split);
}

/* ---- sources ------------------------------------------------------------- */

static void src_free(struct src *s) {
  stk__tok_index_free(&s->index);
  for (size_t i = 0; i < s->nshards; i++) {
    if (s->bin && s->bin[i]) munmap((void *)s->bin[i], s->bin_len[i]);
    if (s->fd && s->fd[i] >= 0) stk__shard_close(s->ds, i, s->fd[i]);
  }
  free(s->fd);
  free(s->bin);
  free(s->bin_len);
  free(s->m);
  free(s->first);
  free(s->lengths);
  free(s->docs);
  if (s->ds) stk_dataset_close(s->ds);
  free(s->path);
}

/* Open one source: the dataset, every shard's .bin mapped, the lengths. */
static int src_open(struct src *s, const char *path, const struct stk_tokens_opts *o, char *err) {
  char e2[STK_ERRMSG_MAX];
  s->path = strdup(path);
  if (!s->path) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = stk_dataset_open(&s->ds, path, o->dataset, e2);
  if (rc) return stk__errf(err, rc, "%s", e2);
  if (strcmp(stk_dataset_format(s->ds), "megatron") != 0)
    return stk__errf(err, STK_EFORMAT,
                     "%s: a %s dataset, not Megatron's indexed dataset (.bin + .idx pairs): token "
                     "windows need one (stoker pack converts)",
                     path, stk_dataset_format(s->ds));
  if ((rc = stk_dataset_count(s->ds, NULL, e2))) return stk__errf(err, rc, "%s", e2);
  size_t n = s->nshards = stk_dataset_num_shards(s->ds);
  s->fd = malloc(n * sizeof *s->fd);
  s->bin = calloc(n, sizeof *s->bin);
  s->bin_len = calloc(n, sizeof *s->bin_len);
  s->m = calloc(n, sizeof *s->m);
  s->first = calloc(n + 1, sizeof *s->first);
  if (!s->fd || !s->bin || !s->bin_len || !s->m || !s->first) {
    if (s->fd) memset(s->fd, 0xff, n * sizeof *s->fd); /* -1 */
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) s->fd[i] = -1;
  for (size_t i = 0; i < n; i++) {
    /* A remote .bin is read in chunks as windows need it (its .idx was
     * fetched at open); a local one is mapped. */
    s->chunked = stk__shard_chunked(s->ds, i);
    if (s->chunked) {
      s->m[i] = stk__megatron_shard(s->ds, i);
      if (!s->m[i]) return stk__errf(err, STK_EFORMAT, "%s: shard %zu has no .idx", path, i);
      if (s->m[i]->dtype->is_float)
        return stk__errf(err, STK_EFORMAT, "%s: %s tokens: token windows need integer tokens",
                         stk__shard_path(s->ds, i), s->m[i]->dtype->name);
      s->dt = s->m[i]->dtype;
      s->bin_len[i] = (size_t)stk__shard_size(s->ds, i);
      s->first[i + 1] = s->first[i] + s->m[i]->sequences;
      continue;
    }
    /* In place, or staged by the cache (which builds a pending index). */
    if ((rc = stk__shard_open(s->ds, i, 0, &s->fd[i], NULL, err))) return rc;
    s->m[i] = stk__megatron_shard(s->ds, i);
    if (!s->m[i]) return stk__errf(err, STK_EFORMAT, "%s: shard %zu has no .idx", path, i);
    if (s->m[i]->dtype->is_float)
      return stk__errf(err, STK_EFORMAT, "%s: %s tokens: token windows need integer tokens",
                       stk__shard_path(s->ds, i), s->m[i]->dtype->name);
    s->dt = s->m[i]->dtype;
    struct stat st;
    if (fstat(s->fd[i], &st) != 0)
      return stk__errf(err, stk__from_errno(errno), "%s: fstat: %s", stk__shard_path(s->ds, i),
                       strerror(errno));
    if (st.st_size > 0) {
      void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, s->fd[i], 0);
      if (p == MAP_FAILED)
        return stk__errf(err, stk__from_errno(errno), "%s: cannot map: %s",
                         stk__shard_path(s->ds, i), strerror(errno));
      /* The windows' pieces lie at random places: with the page cache
       * filled through this mapping in 2 MiB folios (ext4 makes them on
       * a fault here when asked), a piece's start is one page walk less
       * (issue 18, T3). Pages cached before as small folios stay so;
       * where the kernel cannot, the advice changes nothing. */
      madvise(p, (size_t)st.st_size, MADV_HUGEPAGE);
      s->bin[i] = p;
      s->bin_len[i] = (size_t)st.st_size;
    }
    s->first[i + 1] = s->first[i] + s->m[i]->sequences;
  }
  s->n_lengths = s->first[n];
  if (s->n_lengths == 0) return stk__errf(err, STK_EEMPTY, "%s: the corpus has no documents", path);
  if (s->n_lengths > (uint64_t)INT32_MAX + 1)
    return stk__errf(err, STK_ERANGE, "%s: %" PRIu64 " documents; Megatron's are int32", path,
                     s->n_lengths);
  s->lengths = malloc(s->n_lengths * sizeof *s->lengths);
  if (!s->lengths)
    return stk__errf(err, STK_ENOMEM, "out of memory for %" PRIu64 " lengths", s->n_lengths);
  for (size_t i = 0; i < n; i++)
    for (uint64_t q = 0; q < s->m[i]->sequences; q++)
      s->lengths[s->first[i] + q] = (int32_t)stk__ld32(s->m[i]->lengths + 4 * q);
  return 0;
}

/* Where index files for s go: the option, else beside its first .bin when
 * that folder is writable, else nowhere (built in memory). */
static char *index_dir(const struct src *s, const struct stk_tokens_opts *o) {
  if (o->no_index_file) return NULL;
  if (o->index_dir) return strdup(o->index_dir);
  if (stk__dataset_staged(s->ds)) {
    stk_log(STK_LOG_INFO,
            "%s: remote: its window index is built in memory (give an index "
            "folder to keep it)",
            s->path);
    return NULL;
  }
  char *d = strdup(stk__shard_path(s->ds, 0)), *sl = d ? strrchr(d, '/') : NULL;
  if (!d) return NULL;
  if (sl)
    *sl = 0;
  else
    strcpy(d, ".");
  if (access(d, W_OK) != 0) {
    stk_log(STK_LOG_INFO,
            "%s: not writable: the window index is built in memory (give an index "
            "folder to keep it)",
            d);
    free(d);
    return NULL;
  }
  return d;
}

/* The file name's start: the first .bin's name without .bin (+N for more). */
static void corpus_name(const struct src *s, char *buf, size_t n) {
  const char *p = stk__shard_path(s->ds, 0), *b = strrchr(p, '/');
  b = b ? b + 1 : p;
  size_t l = strlen(b);
  if (l > 4 && !strcmp(b + l - 4, ".bin")) l -= 4;
  if (l > 100) l = 100;
  if (s->nshards > 1)
    snprintf(buf, n, "%.*s+%zu", (int)l, b, s->nshards - 1);
  else
    snprintf(buf, n, "%.*s", (int)l, b);
}

static int src_index(struct src *s, const struct stk_tokens_opts *o, uint64_t samples, char *err) {
  uint64_t lo = 0, hi = s->n_lengths;
  int rc;
  if (o->split && (rc = split_range(o->split, o->split_index, s->n_lengths, &lo, &hi, err)))
    return rc;
  s->n_docs = hi - lo;
  s->docs = malloc(s->n_docs * sizeof *s->docs);
  if (!s->docs) return stk__errf(err, STK_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < s->n_docs; i++) {
    s->docs[i] = (int32_t)(lo + i);
    s->split_tokens += (uint64_t)s->lengths[lo + i];
  }
  char name[128];
  corpus_name(s, name, sizeof name);
  char *dir = index_dir(s, o);
  struct stk__tok_cfg c = {
      .g = {.lengths = s->lengths,
            .n_lengths = s->n_lengths,
            .docs = s->docs,
            .n_docs = s->n_docs,
            .seq_len = (int32_t)o->seq_len,
            .num_samples = samples,
            .seed = o->seed,
            .no_extra_token = o->no_extra_token,
            .keep_last_partial = o->keep_last_partial},
      .mode = o->windows,
      .epochs = o->epochs,
      .content = stk_mix64(stk_sampler_fingerprint(s->ds),
                           stk_crc32c(0, s->lengths, s->n_lengths * sizeof *s->lengths)),
      .dir = dir,
      .name = name,
  };
  rc = stk__tok_index_get(&c, &s->index, err);
  free(dir);
  if (rc) {
    char m[STK_ERRMSG_MAX];
    snprintf(m, sizeof m, "%s", err);
    return stk__errf(err, rc, "%s: %s", s->path, m);
  }
  return 0;
}

/* ---- open and close ------------------------------------------------------ */

static int check_opts(const struct stk_tokens_opts *o, int n, const double *weights, char *err) {
  if (o->seq_len == 0) return stk__errf(err, STK_EINVAL, "seq_len must be at least 1 token");
  if (o->seq_len > (1u << 30))
    return stk__errf(err, STK_EINVAL, "seq_len %u is more than 2^30 tokens", o->seq_len);
  if (o->windows < STK_WINDOWS_MEGATRON || o->windows > STK_WINDOWS_PACK)
    return stk__errf(err, STK_EINVAL, "windows: %d is not megatron (0), document (1) or pack (2)",
                     o->windows);
  if (o->token_type != STK_TOKENS_INT32 && o->token_type != STK_TOKENS_INT64)
    return stk__errf(err, STK_EINVAL, "token type %d is not int32 (0) or int64 (1)", o->token_type);
  if (n < 1) return stk__errf(err, STK_EINVAL, "no dataset given");
  if (n > 32766) return stk__errf(err, STK_EINVAL, "%d datasets: a blend takes at most 32766", n);
  if (n > 1) {
    if (!weights)
      return stk__errf(err, STK_EINVAL, "a blend of %d datasets needs their weights", n);
    for (int i = 0; i < n; i++)
      if (!(weights[i] > 0) || !isfinite(weights[i]))
        return stk__errf(err, STK_EINVAL, "blend weight %g of dataset %d must be a positive number",
                         weights[i], i + 1);
    if (!o->samples)
      return stk__errf(err, STK_EINVAL,
                       "a weighted blend needs the number of windows (samples): its sources' "
                       "sizes follow from it");
  }
  return 0;
}

int stk_tokens_open(struct stk_tokens **out, int n, const char *const *paths, const double *weights,
                    const struct stk_tokens_opts *opts, char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  if (opts) {
    size_t sz = opts->struct_size && opts->struct_size < sizeof o ? opts->struct_size : sizeof o;
    memcpy(&o, opts, sz);
  }
  o.struct_size = sizeof o;
  int rc = check_opts(&o, n, weights, err);
  if (rc) return stk__errf(errmsg, rc, "%s", err);
  struct stk_tokens *t = calloc(1, sizeof *t);
  if (!t || !(t->src = calloc((size_t)n, sizeof *t->src))) {
    free(t);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  t->o = o;
  t->n = n;
  t->S = o.seq_len + (o.no_extra_token ? 0 : 1);
  t->es = o.token_type == STK_TOKENS_INT64 ? 8 : 4;
  for (int i = 0; i < n && !rc; i++) rc = src_open(&t->src[i], paths[i], &o, err);
  double *norm = NULL;
  uint64_t *sizes = NULL, blend_size = 0;
  if (!rc && n > 1) {
    norm = malloc((size_t)n * sizeof *norm);
    sizes = malloc((size_t)n * sizeof *sizes);
    if (!norm || !sizes) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    if (!rc) rc = stk__gpt_blend_plan(weights, n, o.samples, 0.005, norm, sizes, &blend_size, err);
  }
  for (int i = 0; i < n && !rc; i++)
    rc = src_index(&t->src[i], &o, n > 1 ? sizes[i] : o.samples, err);
  if (!rc && n > 1) {
    char *dir = index_dir(&t->src[0], &o); /* beside the first source's index */
    rc = stk__tok_blend_get(dir, norm, n, blend_size, &t->blend, err);
    free(dir);
    for (int i = 0; !rc && i < n; i++) {
      t->src[i].weight = norm[i];
      t->src[i].blend_windows = t->blend.counts[i];
      if (t->blend.counts[i] > t->src[i].index.ix.n_samples)
        rc = stk__errf(err, STK_ERANGE, "%s: the blend takes %" PRIu64 " windows of its %" PRIu64,
                       t->src[i].path, t->blend.counts[i], t->src[i].index.ix.n_samples);
    }
    t->nwin = blend_size;
  } else if (!rc) {
    t->src[0].weight = 1;
    t->nwin = t->src[0].blend_windows = t->src[0].index.ix.n_samples;
  }
  free(norm), free(sizes);
  if (!rc && t->nwin == 0) rc = stk__errf(err, STK_EEMPTY, "no windows: the split is too short");
  if (rc) {
    stk_tokens_close(t);
    return stk__errf(errmsg, rc, "%s", err);
  }
  uint64_t h = stk_mix64(0x746f6b, (uint64_t)n);
  for (int i = 0; i < n; i++) {
    const struct stk__gpt_index *ix = &t->src[i].index.ix;
    uint64_t w;
    memcpy(&w, &t->src[i].weight, sizeof w);
    h = stk_mix64(h, stk_sampler_fingerprint(t->src[i].ds));
    h = stk_mix64(stk_mix64(h, w), ix->n_samples);
    h = stk_mix64(stk_mix64(h, ix->n_doc), t->src[i].n_docs);
  }
  h = stk_mix64(stk_mix64(h, o.seq_len), (uint64_t)o.windows * 4 + (uint64_t)o.no_extra_token);
  t->fp = stk_mix64(stk_mix64(h, o.seed), t->nwin);
  if (!t->fp) t->fp = 1;
  *out = t;
  return 0;
}

void stk_tokens_close(struct stk_tokens *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) src_free(&t->src[i]);
  free(t->src);
  stk__tok_blend_free(&t->blend);
  free(t);
}

uint64_t stk_tokens_num_windows(const struct stk_tokens *t) { return t->nwin; }
uint32_t stk_tokens_row_len(const struct stk_tokens *t) { return t->S; }
uint64_t stk_tokens_fingerprint(const struct stk_tokens *t) { return t->fp; }
int stk_tokens_num_sources(const struct stk_tokens *t) { return t->n; }

int stk_tokens_source(const struct stk_tokens *t, int i, struct stk_tokens_source *out) {
  if (i < 0 || i >= t->n) return STK_ERANGE;
  const struct src *s = &t->src[i];
  out->path = s->path;
  out->weight = s->weight;
  out->documents = s->n_docs;
  out->tokens = s->split_tokens;
  out->windows = s->index.ix.n_samples;
  out->blend_windows = s->blend_windows;
  out->served = atomic_load_explicit(&((struct src *)s)->served, memory_order_relaxed);
  out->built = s->index.built;
  out->index_path = s->index.path;
  return 0;
}

int stk_tokens_blend_index(const struct stk_tokens *t, int *built, const char **path) {
  if (!t->blend.ds) return STK_EINVAL;
  if (built) *built = t->blend.file.built;
  if (path) *path = t->blend.file.path;
  return 0;
}

/* ---- one window ---------------------------------------------------------- */

/* Where tokens [from, to) of document d of s lie: the shard and the byte
 * offset in its .bin; 0, or -1 when past the .bin's end. */
static size_t doc_shard(const struct src *s, int32_t d) {
  size_t lo = 0, hi = s->nshards; /* last shard whose first sequence <= d */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (s->first[mid] <= (uint64_t)d)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

static int doc_place(const struct src *s, int32_t d, int64_t from, int64_t to, size_t *shard,
                     uint64_t *at) {
  size_t lo = doc_shard(s, d);
  uint64_t q = (uint64_t)d - s->first[lo];
  uint64_t ptr = stk__ld64(s->m[lo]->pointers + 8 * q) + (uint64_t)from * s->dt->size;
  *shard = lo;
  *at = ptr;
  return ptr + (uint64_t)(to - from) * s->dt->size > s->bin_len[lo] ? -1 : 0;
}

/* Tokens [from, to) of document d of s, mapped; NULL when past the end of
 * the .bin, or when the .bin is read in chunks (not mapped). */
static const uint8_t *doc_tokens(const struct src *s, int32_t d, int64_t from, int64_t to) {
  size_t sh;
  uint64_t at;
  if (s->chunked || doc_place(s, d, from, to, &sh, &at) || !s->bin[sh]) return NULL;
  return s->bin[sh] + at;
}

struct row {
  void *tok; /* NULL: only warm the chunks the window lies in (stk__tokens_warm) */
  uint8_t *mask;
  int32_t *cu;
  uint32_t *ncu;
  const int *cancel;
};

static int add_piece(const struct stk_tokens *t, const struct src *s, const struct row *r,
                     uint32_t *at, uint32_t *nc, int32_t d, int64_t from, int64_t to, uint64_t k,
                     char *err) {
  if (to <= from) return 0;
  if ((uint64_t)(to - from) > t->S - *at)
    return stk__errf(err, STK_EFORMAT,
                     "%s: window %" PRIu64
                     " holds more than %u tokens (the "
                     "index does not match the corpus)",
                     s->path, k, t->S);
  if (!r->tok) { /* warming: stage the chunks the piece lies in, copy nothing */
    size_t sh;
    uint64_t off;
    if (s->chunked && doc_place(s, d, from, to, &sh, &off) == 0) {
      int rc = stk__shard_warm(s->ds, sh, off, (uint64_t)(to - from) * s->dt->size, r->cancel,
                               err);
      if (rc) return rc;
    }
    *at += (uint32_t)(to - from);
    return 0;
  }
  const uint8_t *p = NULL;
  uint8_t *got = NULL; /* a piece read through the cache's chunks */
  if (s->chunked) {
    size_t sh, need = (size_t)(to - from) * s->dt->size;
    uint64_t off;
    if (doc_place(s, d, from, to, &sh, &off) == 0) {
      if (!(got = malloc(need ? need : 1))) return stk__errf(err, STK_ENOMEM, "out of memory");
      int rc = stk__shard_read(s->ds, sh, off, got, need, NULL, err);
      if (rc) {
        free(got);
        return rc;
      }
      p = got;
    }
  } else {
    p = doc_tokens(s, d, from, to);
  }
  if (!p)
    return stk__errf(err, STK_EFORMAT,
                     "%s: document %d's tokens %" PRId64 "..%" PRId64
                     " lie past the end of its .bin",
                     s->path, d, from, to);
  if (t->es == 4 && s->dt->size == 8) /* int64 tokens into int32 batches: each must fit */
    for (int64_t i = 0; i < to - from; i++) {
      int64_t v = (int64_t)stk__ld64(p + 8 * i);
      if (v < INT32_MIN || v > INT32_MAX) {
        free(got);
        return stk__errf(err, STK_ERANGE,
                         "%s: document %d, token %" PRId64 " is %" PRId64
                         ", which does not fit int32 batches: ask for int64 tokens "
                         "(--tokens int64, tokens=\"int64\")",
                         s->path, d, from + i, v);
      }
    }
  stk__tok_put(r->tok, t->es, *at, p, s->dt->code, s->dt->size, (uint64_t)(to - from));
  free(got);
  *at += (uint32_t)(to - from);
  if (r->cu) r->cu[(*nc)++] = (int32_t)*at;
  return 0;
}

/* Where window k lies: its source, and its first and last pieces'
 * positions in the document index with the offsets in them. */
struct place {
  struct src *s;
  int64_t pb, ob, pe, oe;
};

static int place_window(struct stk_tokens *t, uint64_t k, struct place *w, char *err) {
  if (k >= t->nwin)
    return stk__errf(err, STK_ERANGE, "window %" PRIu64 " is past the last (%" PRIu64 " windows)",
                     k, t->nwin);
  int si = 0;
  uint64_t j = k;
  if (t->blend.ds) {
    si = t->blend.ds[k];
    j = (uint64_t)t->blend.sample[k];
  }
  w->s = &t->src[si];
  const struct stk__gpt_index *ix = &w->s->index.ix;
  if (j >= ix->n_samples)
    return stk__errf(err, STK_ERANGE, "%s: window %" PRIu64 " is past its last", w->s->path, j);
  uint64_t smp = stk__gpt_shuffle_at(ix, j);
  stk__gpt_sample_row(ix, smp, &w->pb, &w->ob);
  stk__gpt_sample_row(ix, smp + 1, &w->pe, &w->oe);
  return 0;
}

/* The pieces lie at random places in the corpus and its index: ask for
 * the lengths and `.idx` pointers of all of them (up to 16) at once, then
 * find the start of each, then ask for all the starts at once. The
 * prefetch of a page not in the TLB waits for the page walk, and one
 * piece after another the misses and walks did not overlap (issue 18, T3:
 * this took a quarter of a window's time, the `.idx` pointer a tenth).
 * With plan, each piece is also put on this thread's plan, which the copy
 * of the window before it asks for line by line (tokens_copy.c). */
static void prefetch_pieces(const struct place *w, uint32_t S, int plan) {
  const struct src *s = w->s;
  const struct stk__gpt_index *ix = &s->index.ix;
  int doc = s->index.mode == STK_WINDOWS_DOCUMENT;
  int64_t last = doc ? w->pb : w->pe;
  int64_t endx = s->index.mode == STK_WINDOWS_MEGATRON ? ix->extra : 0;
  if (last > w->pb + 15) last = w->pb + 15;
  if (last >= (int64_t)ix->n_doc) last = (int64_t)ix->n_doc - 1;
  const uint8_t *q[16];
  int n = 0;
  for (int64_t p = w->pb; p <= last; p++) { /* the lengths and .idx pointers, all at once */
    int32_t d = ix->doc_index[p];
    size_t sh = doc_shard(s, d);
    __builtin_prefetch(&s->lengths[d]);
    __builtin_prefetch(s->m[sh]->pointers + 8 * ((uint64_t)d - s->first[sh]));
  }
  for (int64_t p = w->pb; p <= last; p++) {
    int32_t d = ix->doc_index[p];
    int64_t from = p == w->pb ? w->ob : 0;
    if (!(q[n] = doc_tokens(s, d, from, from))) continue;
    if (plan) { /* the piece's end as fill_row finds it */
      int64_t to = doc ? STK__MIN(from + (int64_t)S, (int64_t)s->lengths[d])
                       : p == w->pe ? w->oe + endx : s->lengths[d];
      if (to > from) stk__tok_ahead_add(q[n], (uint64_t)(to - from) * s->dt->size);
    }
    n++;
  }
  for (int i = 0; i < n; i++) __builtin_prefetch(q[i]);
}

void stk__tokens_prefetch(struct stk_tokens *t, uint64_t k) {
  struct place w;
  char err[STK_ERRMSG_MAX];
  stk__tok_ahead_begin();
  if (place_window(t, k, &w, err) == 0) prefetch_pieces(&w, t->S, 1);
}

static int fill_row(struct stk_tokens *t, uint64_t k, const struct row *r, char *err) {
  struct place w;
  int rc = place_window(t, k, &w, err);
  if (rc) return rc;
  struct src *s = w.s;
  const struct stk__gpt_index *ix = &s->index.ix;
  int64_t pb = w.pb, ob = w.ob, pe = w.pe, oe = w.oe;
  if (r->tok) prefetch_pieces(&w, t->S, 0);
  uint32_t at = 0, nc = 0;
  if (r->cu) r->cu[nc++] = 0;
  if (s->index.mode == STK_WINDOWS_DOCUMENT) {
    int32_t d = ix->doc_index[pb];
    int64_t L = s->lengths[d];
    rc = add_piece(t, s, r, &at, &nc, d, ob, STK__MIN(ob + (int64_t)t->S, L), k, err);
  } else {
    /* MEGATRON: from (pb, ob) to (pe, oe + extra); PACK: to (pe, oe). */
    int64_t endx = s->index.mode == STK_WINDOWS_MEGATRON ? ix->extra : 0;
    for (int64_t p = pb; !rc && p <= pe && (uint64_t)p < ix->n_doc; p++) {
      int32_t d = ix->doc_index[p];
      int64_t from = p == pb ? ob : 0, to = p == pe ? oe + endx : s->lengths[d];
      rc = add_piece(t, s, r, &at, &nc, d, from, to, k, err);
    }
  }
  if (rc) return rc;
  if (!r->tok) return 0; /* warmed, not served */
  if (at < t->S) { /* padding */
    if (t->es == 4)
      for (uint32_t i = at; i < t->S; i++) ((int32_t *)r->tok)[i] = (int32_t)t->o.pad_token;
    else
      for (uint32_t i = at; i < t->S; i++) ((int64_t *)r->tok)[i] = t->o.pad_token;
  }
  if (r->mask) {
    memset(r->mask, 1, at);
    memset(r->mask + at, 0, t->S - at);
  }
  if (r->ncu) *r->ncu = nc;
  atomic_fetch_add_explicit(&s->served, 1, memory_order_relaxed);
  return 0;
}

int stk_tokens_window(struct stk_tokens *t, uint64_t k, void *tokens, uint8_t *loss_mask,
                      int32_t *cu, uint32_t *ncu, char *errmsg) {
  struct row r = {tokens, loss_mask, cu, ncu, NULL};
  uint32_t dummy;
  if (cu && !ncu) r.ncu = &dummy;
  return fill_row(t, k, &r, errmsg);
}

/* ---- batches ------------------------------------------------------------- */

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Offsets of the regions of a buffer of cap rows. */
static void regions(const struct stk_tokens *t, uint32_t cap, size_t off[4]) {
  off[0] = 0;
  off[1] = up64((size_t)cap * t->S * t->es);             /* loss mask */
  off[2] = off[1] + up64((size_t)cap * t->S);            /* boundary counts */
  off[3] = off[2] + up64((size_t)cap * sizeof(int32_t)); /* boundaries */
}

size_t stk__tokens_batch_bytes(const struct stk_tokens *t, uint32_t cap) {
  size_t off[4];
  regions(t, cap, off);
  return off[3] + (size_t)cap * (t->S + 1) * sizeof(int32_t);
}

size_t stk__tokens_row_bytes(const struct stk_tokens *t) { return (size_t)t->S * t->es; }

int stk__tokens_fill(struct stk_tokens *t, uint64_t k, uint8_t *base, uint32_t cap, uint32_t i,
                     char *err) {
  size_t off[4];
  regions(t, cap, off);
  struct row r = {base + (size_t)i * t->S * t->es, base + off[1] + (size_t)i * t->S,
                  (int32_t *)(void *)(base + off[3]) + (size_t)i * (t->S + 1),
                  (uint32_t *)(void *)(base + off[2]) + i, NULL};
  return fill_row(t, k, &r, err);
}

int stk__tokens_warm(struct stk_tokens *t, uint64_t k, const int *cancel, char *err) {
  struct row r = {NULL, NULL, NULL, NULL, cancel};
  return fill_row(t, k, &r, err);
}

int stk__tokens_chunked(const struct stk_tokens *t) {
  for (int i = 0; i < t->n; i++)
    if (t->src[i].chunked) return 1;
  return 0;
}

void stk__tokens_view(const struct stk_tokens *t, uint8_t *base, uint32_t cap, uint32_t n,
                      const uint64_t *ids, struct stk_token_batch *out) {
  size_t off[4];
  regions(t, cap, off);
  out->rows = n;
  out->cols = t->S;
  out->type = t->o.token_type;
  out->tokens = base;
  out->loss_mask = base + off[1];
  out->cu_count = (const int32_t *)(const void *)(base + off[2]);
  out->cu_seqlens = (const int32_t *)(const void *)(base + off[3]);
  out->cu_stride = t->S + 1;
  out->windows = ids;
}

struct stk_dataset *stk__tokens_dataset(struct stk_tokens *t) {
  return t->src[0].ds;
}
uint32_t stk__tokens_seed(const struct stk_tokens *t) { return t->o.seed; }
