/* Datasets behind a cache: opening a dataset URL (or a path with a cache
 * directory), the manifest that lists its shards, and the per-shard
 * descriptors the loader and stk_dataset_read() use.
 *
 * Opening reads one object, never one per sample or per shard:
 *   stoker-manifest.json  (written by `stoker cache manifest` or `stoker gen
 *                          --manifest`): format, and per shard its name,
 *                          bytes, samples and CRC32C; or
 *   index.json            (Mosaic MDS): shards with bytes and samples.
 * Without either, the origin is listed (S3, a file system, an HTTP server's
 * index pages), or the shards are named (a URL, a pattern, a list) and
 * sized with HEAD; their samples are counted as they arrive, in order
 * (stk__dataset_count_through), so the first batch waits for the first
 * shards, not the whole dataset. Sample indexes of a shard are built when
 * the shard is first staged. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/json_parse.h"
#include "dataset_impl.h"

#define MANIFEST_NAME "stoker-manifest.json"
#define MANIFEST_MAX (256u << 20)
#define MANIFEST_SHARD_MAX (1ull << 50) /* a sanity bound on one shard's bytes */

/* ---- opening ------------------------------------------------------------------- */

struct tab {
  struct stk_cache_shard *v;
  size_t n, cap;
};

static int tab_add(struct tab *t, const char *name, uint64_t size, int has_crc, uint32_t crc) {
  if (t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 64;
    struct stk_cache_shard *p = realloc(t->v, nc * sizeof *p);
    if (!p) return STK_ENOMEM;
    t->v = p;
    t->cap = nc;
  }
  char *nm = strdup(name);
  if (!nm) return STK_ENOMEM;
  t->v[t->n++] =
      (struct stk_cache_shard){.name = nm, .size = size, .crc32c = crc, .has_crc = has_crc};
  return 0;
}

static void tab_free(struct tab *t) {
  for (size_t i = 0; i < t->n; i++) free((char *)t->v[i].name);
  free(t->v);
}

/* A shard name from a manifest or listing must stay inside the origin. */
static int safe_rel(const char *s) {
  if (!s || !*s || *s == '/' || strlen(s) > 1024) return 0;
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20) return 0;
  for (const char *p = s; p; p = strchr(p, '/')) {
    if (*p == '/') p++;
    if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) return 0;
  }
  return 1;
}

/* "URL/NAME" for messages, the (redacted) query of the origin's URL kept
 * at the end: "https://h/train/shard-0.tar?***". */
static char *remote_path(const char *url, const char *name) {
  size_t ul = strcspn(url, "?"), n = strlen(url) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%.*s/%s%s", (int)ul, url, name, url + ul);
  return p;
}

static int add_remote_shard(struct stk_dataset *ds, const char *url, const char *name,
                            int32_t label) {
  char *p = remote_path(url, name);
  if (!p) return STK_ENOMEM;
  int rc = stk__dataset_add_shard(ds, p, label);
  free(p);
  return rc;
}

/* Parse stoker-manifest.json into the dataset's shards and tab. MDS
 * manifests only supply checksums: the shards come from index.json. */
static int parse_manifest(struct stk_dataset *ds, const char *url, const char *text, size_t len,
                          const struct stk_dataset_opts *opts, struct tab *t, char *err) {
  struct stk__jdoc *doc = NULL;
  char jerr[STK_ERRMSG_MAX];
  int rc = stk__json_parse(&doc, text, len, jerr);
  if (rc) return stk__errf(err, rc, "%s/%s: %s", url, MANIFEST_NAME, jerr);
  const struct stk__jnode *root = stk__json_root(doc), *shards = stk__json_get(root, "shards");
  uint64_t ver = 0;
  const char *fmt = stk__json_str(root, "format");
  if (stk__json_u64(root, "stoker_manifest", &ver) || ver < 1 || !fmt || !shards ||
      shards->type != STK_JARR) {
    stk__json_free(doc);
    return stk__errf(err, STK_EFORMAT,
                     "%s/%s: not a stoker manifest (version, format and shards "
                     "are required)",
                     url, MANIFEST_NAME);
  }
  if (ver > 1) {
    stk__json_free(doc);
    return stk__errf(err, STK_ENOTSUP,
                     "%s/%s: manifest version %llu is newer than this stoker "
                     "reads (1)",
                     url, MANIFEST_NAME, (unsigned long long)ver);
  }
  const char *want = opts && opts->format && *opts->format ? opts->format : fmt;
  if (strcmp(want, fmt))
    rc = stk__errf(err, STK_EINVAL, "%s: the manifest says format %s, not %s", url, fmt, want);
  else if (!(ds->fmt = stk__format_find(fmt)))
    rc = stk__errf(err, STK_EFORMAT, "%s/%s: unknown format '%.40s'", url, MANIFEST_NAME, fmt);
  if (rc) {
    stk__json_free(doc);
    return rc;
  }
  size_t i = 0;
  for (const struct stk__jnode *s = shards->child; !rc && s; s = s->next, i++) {
    const char *name = stk__json_str(s, "name"), *crc = stk__json_str(s, "crc32c");
    uint64_t bytes, samples, label;
    if (!safe_rel(name) || stk__json_u64(s, "bytes", &bytes) ||
        stk__json_u64(s, "samples", &samples) || bytes > MANIFEST_SHARD_MAX) {
      rc = stk__errf(err, STK_EFORMAT,
                     "%s/%s: shard %zu needs a safe relative name, bytes "
                     "(at most 2^50) and samples",
                     url, MANIFEST_NAME, i);
      break;
    }
    char *end = NULL;
    unsigned long c = crc ? strtoul(crc, &end, 16) : 0;
    int has_crc = crc && end && !*end && strlen(crc) == 8;
    if ((rc = tab_add(t, name, bytes, has_crc, (uint32_t)c)) != 0) break;
    if (ds->fmt->dir_index) continue; /* the shards come from the format's own index */
    int32_t lab = stk__json_u64(s, "label", &label) || label > INT32_MAX ? -1 : (int32_t)label;
    if ((rc = add_remote_shard(ds, url, name, lab)) != 0) break;
    ds->shards[ds->nshards - 1].count = samples;
    ds->rows[ds->nshards - 1].count_known = 1;
    ds->rows[ds->nshards - 1].pending = ds->fmt->index != NULL;
  }
  if (rc == STK_ENOMEM) stk__errf(err, rc, "out of memory reading the manifest");
  stk__json_free(doc);
  return rc;
}

/* A format with a dataset index (Mosaic MDS's index.json, which has the
 * column layout the format needs): the index is fetched into memory and
 * parsed there by the format's list_index hook, with the URL (its query
 * left out) as the folder its shards are named in; their paths are then
 * made remote. */
static int open_dir_index(struct stk_dataset *ds, struct stk_origin *o, const char *url,
                          const struct stk_format_ops *f, struct tab *t, char *err) {
  if (!f->list_index) return stk__errf(err, STK_EINVAL, "%s: no list_index hook", f->name);
  char *text = NULL;
  size_t len = 0;
  int rc = stk__origin_get_mem(o, f->dir_index, MANIFEST_MAX, &text, &len, err);
  if (rc) return rc;
  char *dir = strndup(url, strcspn(url, "?"));
  if (!dir) {
    free(text);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  ds->fmt = f;
  rc = f->list_index(ds, dir, text, len);
  if (rc) memcpy(err, ds->err, STK_ERRMSG_MAX);
  free(text);
  /* The table in index.json's order; checksums from the manifest, matched
   * by name, where there is one. */
  size_t dl = strlen(dir);
  struct tab nt = {0};
  for (size_t i = 0; !rc && i < ds->nshards; i++) {
    struct stk_shard *sh = &ds->shards[i];
    const char *name = sh->path + dl + 1;
    size_t k = 0;
    while (k < t->n && strcmp(t->v[k].name, name)) k++;
    rc = k < t->n ? tab_add(&nt, name, t->v[k].size, t->v[k].has_crc, t->v[k].crc32c)
                  : tab_add(&nt, name, sh->file_bytes, 0, 0);
    char *p = rc ? NULL : remote_path(url, name);
    if (!p) {
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
      break;
    }
    free(sh->path);
    sh->path = p;
    ds->rows[i].count_known = 1; /* the index's count, checked again at indexing */
    ds->rows[i].pending = 1;
  }
  free(dir);
  tab_free(t);
  *t = nt;
  return rc;
}

struct listing {
  struct stk_dataset *ds;
  const char *url;
  struct tab *t;
  const struct stk_format_ops *want; /* NULL: decide by extension */
  size_t skipped;                    /* listed files that are not its shards */
  char example[128];
  const int *cancel;
  size_t nested; /* shards deeper than a folder's reading goes (as local.c) */
  char nested_ex[256];
};

static int canceled(const int *cancel) { return cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED); }

static int list_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  struct listing *L = arg;
  if (canceled(L->cancel)) return STK_ECANCELED;
  if (!safe_rel(name) || stk__name_hidden(name) || !strcmp(name, MANIFEST_NAME)) return 0;
  const struct stk_format_ops *f = L->want;
  /* Shards are read from the top level, and first-level class folders for
   * formats that have them, as a local folder is; plain files from every
   * level. Deeper shards are left out and named in a warning. */
  int depth = 0;
  for (const char *p = strchr(name, '/'); p; p = strchr(p + 1, '/')) depth++;
  if (!(f->caps & STK_FMT_TREE) && depth > ((f->caps & STK_FMT_CLASS_DIRS) ? 1 : 0)) {
    if (f->exts && *f->exts && stk__has_ext(name, f->exts) && !L->nested++)
      snprintf(L->nested_ex, sizeof L->nested_ex, "%s/%s", L->url, name);
    return 0;
  }
  if ((f->caps & STK_FMT_TREE) ? 0 : !(f->exts && *f->exts && stk__has_ext(name, f->exts))) {
    if (!stk__side_file(name) && !L->skipped++) snprintf(L->example, sizeof L->example, "%s", name);
    return 0;
  }
  int rc = tab_add(L->t, name, info ? info->size : UINT64_MAX, 0, 0);
  if (!rc) rc = add_remote_shard(L->ds, L->url, name, -1);
  if (!rc) {
    L->ds->shards[L->ds->nshards - 1].count = (f->caps & STK_FMT_TREE) ? 1 : 0;
    L->ds->rows[L->ds->nshards - 1].pending = f->index != NULL;
  }
  return rc;
}

#define FMT_MAX 32

static int ext_count_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  (void)info;
  size_t *count = arg;
  const struct stk_format_ops *f = stk__format_by_ext(name);
  for (int k = 0; f && stk_formats[k] && k < FMT_MAX; k++)
    if (stk_formats[k] == f) count[k]++;
  return 0;
}

/* The format that names carry by extension: one, else an error naming
 * the mix; NULL in *out when none is recognised. */
static int format_of_counts(const char *where, const size_t *count,
                            const struct stk_format_ops **out, char *err) {
  int kinds = 0;
  size_t best = 0;
  *out = NULL;
  char mix[512] = "";
  size_t o = 0;
  for (int k = 0; stk_formats[k] && k < FMT_MAX; k++) {
    if (!count[k]) continue;
    kinds++;
    if (o < sizeof mix)
      o += (size_t)snprintf(mix + o, sizeof mix - o, "%s%zu %s (%s)", o ? ", " : "", count[k],
                            stk_formats[k]->name, stk_formats[k]->exts);
    if (count[k] > best) best = count[k], *out = stk_formats[k];
  }
  if (kinds > 1)
    return stk__errf(err, STK_EFORMAT,
                     "%s: shards of several formats: %s; choose one with "
                     "--format",
                     where, mix);
  return 0;
}

static const struct stk_format_ops *tree_format(void) {
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->caps & STK_FMT_TREE) return stk_formats[i];
  return NULL;
}

static int chosen_format(const struct stk_dataset_opts *opts, const struct stk_format_ops **f,
                         char *err) {
  *f = NULL;
  if (opts && opts->format && *opts->format && !(*f = stk__format_find(opts->format)))
    return stk__errf(err, STK_EINVAL, "unknown format '%s' (known: %s)", opts->format,
                     stk__format_names());
  return 0;
}

/* No manifest: list the origin (a bucket, a directory, an HTTP server's
 * directory listing); the shards' samples are counted as they arrive. */
static int open_listed(struct stk_dataset *ds, struct stk_origin *o, const char *url,
                       const struct stk_dataset_opts *opts, struct tab *t, char *err) {
  const struct stk_format_ops *f;
  int rc = chosen_format(opts, &f, err);
  if (rc) return rc;
  if (!f) {
    size_t count[FMT_MAX] = {0};
    rc = stk__origin_list(o, ext_count_cb, count, err);
    if (rc == STK_ENOTSUP) {
      char why[STK_ERRMSG_MAX];
      memcpy(why, err, sizeof why);
      return stk__errf(err, rc,
                       "%s: no %s or dataset index there, and it cannot be listed "
                       "(%s); write a manifest with `stoker cache manifest DIR` next to the "
                       "shards, or name the shards (a pattern or a shard list)",
                       url, MANIFEST_NAME, why);
    }
    if (rc) return rc;
    if ((rc = format_of_counts(url, count, &f, err)) != 0) return rc;
    if (!f) f = tree_format();
  }
  ds->fmt = f;
  struct listing L = {ds, url, t, f, 0, "", opts && opts->cache ? opts->cache->cancel : NULL,
                      0, ""};
  rc = stk__origin_list(o, list_cb, &L, err);
  if (rc == STK_ECANCELED) return stk__errf(err, rc, "interrupted");
  if (!rc && (f->caps & (STK_FMT_TREE | STK_FMT_CLASS_DIRS)))
    rc = stk__dataset_class_labels(ds, t->v, t->n, !(f->caps & STK_FMT_TREE), err);
  if (!rc && L.nested)
    stk_log(STK_LOG_WARN, STK__NESTED_FMT, url, L.nested, f->name, L.nested == 1 ? "" : "s",
            L.nested_ex, L.nested > 1 ? ", ..." : "");
  /* Never silently, as for a local folder: files that are not shards. */
  if (!rc && L.skipped)
    stk_log(STK_LOG_WARN, "%s: %zu file%s that %s not %s shards left out (%s%s)", url, L.skipped,
            L.skipped == 1 ? "" : "s", L.skipped == 1 ? "is" : "are", f->name, L.example,
            L.skipped > 1 ? ", ..." : "");
  if (rc == STK_ENOTSUP)
    return stk__errf(err, rc,
                     "%s: no %s there, and this origin cannot be listed; write one "
                     "with `stoker cache manifest DIR` next to the shards",
                     url, MANIFEST_NAME);
  return rc;
}

/* Shards named one by one (a single URL, a pattern, a shard list), each
 * name relative to the origin. With a manifest at the origin, its entries
 * for those names (sizes, counts, checksums); without, the format from the
 * names' extensions and sizes learned when staged. */
static int open_named(struct stk_dataset *ds, const char *url, const struct stk__names *names,
                      const struct stk_dataset_opts *opts, struct tab *t, int have_manifest,
                      char *err) {
  int rc = 0;
  for (size_t i = 0; i < names->n && !rc; i++)
    if (!safe_rel(names->v[i]))
      rc = stk__errf(err, STK_EINVAL, "%s/%s: not a shard name under the origin", url, names->v[i]);
  if (rc) return rc;
  if (have_manifest && !ds->fmt->dir_index) {
    /* Keep the manifest's entries the names ask for, in the names' order. */
    struct tab nt = {0};
    size_t n0 = ds->nshards, k = 0;
    struct stk_shard *old = ds->shards;
    struct stk__shard_row *old_rows = ds->rows;
    ds->shards = NULL;
    ds->rows = NULL;
    ds->nshards = 0;
    for (size_t i = 0; i < names->n && !rc; i++) {
      size_t tries = 0;
      while (tries < t->n && strcmp(t->v[k].name, names->v[i])) k = (k + 1) % t->n, tries++;
      if (tries == t->n) {
        rc =
            stk__errf(err, STK_ENOENT, "%s/%s: not in %s/%s", url, names->v[i], url, MANIFEST_NAME);
        break;
      }
      rc = tab_add(&nt, t->v[k].name, t->v[k].size, t->v[k].has_crc, t->v[k].crc32c);
      if (!rc) rc = add_remote_shard(ds, url, t->v[k].name, old[k].label);
      if (rc) {
        stk__errf(err, rc, "out of memory");
        break;
      }
      ds->shards[ds->nshards - 1].count = old[k].count;
      ds->rows[ds->nshards - 1].count_known = old_rows[k].count_known;
      ds->rows[ds->nshards - 1].pending = old_rows[k].pending;
    }
    for (size_t i = 0; i < n0; i++) free(old[i].path);
    free(old);
    free(old_rows);
    tab_free(t);
    *t = nt;
    return rc;
  }
  if (have_manifest) return 0; /* a dataset index lists the shards itself */
  const struct stk_format_ops *f;
  if ((rc = chosen_format(opts, &f, err)) != 0) return rc;
  if (!f) {
    size_t count[FMT_MAX] = {0};
    for (size_t i = 0; i < names->n; i++) ext_count_cb(count, names->v[i], NULL);
    /* named by the list or pattern the user gave (ds->root), not the folder */
    if ((rc = format_of_counts(ds->root, count, &f, err)) != 0) return rc;
    /* Names that all end in an extension no shard format claims (.jpg,
     * .png, .wav): one sample per file, as a local list of them is read. */
    int all_ext = names->n > 0;
    for (size_t i = 0; i < names->n && all_ext; i++) {
      const char *b = strrchr(names->v[i], '/'), *d = strrchr(b ? b : names->v[i], '.');
      all_ext = d && d[1] && d != (b ? b + 1 : names->v[i]);
    }
    if (!f && all_ext) f = tree_format();
    if (!f)
      return stk__errf(err, STK_EINVAL,
                       "%s/%s: cannot tell the shards' format from their "
                       "names; give it with --format",
                       url, names->v[0]);
  }
  ds->fmt = f;
  for (size_t i = 0; i < names->n && !rc; i++) {
    rc = tab_add(t, names->v[i], UINT64_MAX, 0, 0);
    if (!rc) rc = add_remote_shard(ds, url, names->v[i], -1);
    if (rc) {
      stk__errf(err, rc, "out of memory");
      break;
    }
    ds->shards[ds->nshards - 1].count = (f->caps & STK_FMT_TREE) ? 1 : 0;
    ds->rows[ds->nshards - 1].pending = f->index != NULL;
  }
  return rc;
}

/* ---- sizes by HEAD ------------------------------------------------------------ */

#define HEAD_THREADS 16

struct heads {
  struct stk_origin *o;
  struct tab *t;
  const int *cancel;
  atomic_size_t next;
  atomic_int stop; /* a shard is missing (or refused), or *cancel */
  pthread_mutex_t mu;
  int rc;
  size_t bad;
  char err[STK_ERRMSG_MAX];
};

static void *head_worker(void *arg) {
  struct heads *h = arg;
  char err[STK_ERRMSG_MAX];
  for (size_t i; (i = atomic_fetch_add(&h->next, 1)) < h->t->n;) {
    /* The first missing shard ends the open: no HEAD for the names after it
     * (a pattern of 10^7 absent names made 10^7 of them). The names before
     * it were all taken already, so the lowest failure is the first. */
    if (atomic_load(&h->stop)) break;
    if (h->cancel && __atomic_load_n(h->cancel, __ATOMIC_RELAXED)) {
      pthread_mutex_lock(&h->mu);
      if (!h->rc) h->rc = stk__errf(h->err, STK_ECANCELED, "interrupted");
      pthread_mutex_unlock(&h->mu);
      atomic_store(&h->stop, 1);
      break;
    }
    if (h->t->v[i].size != UINT64_MAX) continue;
    struct stk_obj_info info;
    int rc = stk__origin_stat(h->o, h->t->v[i].name, &info, err);
    if (rc == 0) {
      h->t->v[i].size = info.size; /* each thread writes its own entries */
    } else if (rc == STK_ENOENT || rc == STK_EACCES) {
      /* A named shard that is not there (or refused) fails the open now,
       * naming it, rather than in the middle of an epoch. */
      pthread_mutex_lock(&h->mu);
      if (!h->rc || (h->rc != STK_ECANCELED && i < h->bad)) {
        h->rc = rc;
        h->bad = i;
        memcpy(h->err, err, sizeof err);
      }
      pthread_mutex_unlock(&h->mu);
      atomic_store(&h->stop, 1);
    } /* else: unknown still; learned when the shard is staged */
  }
  return NULL;
}

/* Shards whose size neither a manifest nor a listing gave: ask the origin
 * (HEAD, several at a time), so the staging at open and the look-ahead can
 * budget them, and a missing shard is reported before any is fetched. */
static int head_sizes(struct stk_origin *o, struct tab *t, const int *cancel, char *err) {
  size_t unknown = 0;
  for (size_t i = 0; i < t->n; i++) unknown += t->v[i].size == UINT64_MAX;
  if (!unknown) return 0;
  struct heads h = {.o = o, .t = t, .cancel = cancel};
  atomic_init(&h.next, 0);
  atomic_init(&h.stop, 0);
  pthread_mutex_init(&h.mu, NULL);
  pthread_t tid[HEAD_THREADS];
  int started = 0;
  int want = (int)STK__MIN((size_t)HEAD_THREADS, unknown);
  for (int k = 1; k < want; k++)
    if (pthread_create(&tid[started], NULL, head_worker, &h) == 0) started++;
  head_worker(&h);
  for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
  pthread_mutex_destroy(&h.mu);
  if (h.rc) return stk__errf(err, h.rc, "%s", h.err);
  return 0;
}

/* The format with a dataset index at the origin, if the user's choice
 * allows one: STK_ENOENT when there is none. */
static int find_dir_index(struct stk_origin *o, const struct stk_dataset_opts *opts,
                          const struct stk_format_ops **out, char *err) {
  for (int i = 0; stk_formats[i]; i++) {
    const struct stk_format_ops *f = stk_formats[i];
    if (!f->dir_index) continue;
    if (opts && opts->format && *opts->format && strcmp(opts->format, f->name)) continue;
    struct stk_obj_info info;
    char ierr[STK_ERRMSG_MAX];
    int rc = stk__origin_stat(o, f->dir_index, &info, ierr);
    if (rc == 0) {
      *out = f;
      return 0;
    }
    if (rc != STK_ENOENT) return stk__errf(err, rc, "%s", ierr);
  }
  return STK_ENOENT;
}

int stk__dataset_open_remote_at(struct stk_dataset *ds, const char *url,
                                 const struct stk__names *names,
                                 const struct stk_dataset_opts *opts, char *err) {
  struct stk_cache_opts co = opts && opts->cache ? *opts->cache : (struct stk_cache_opts){0};
  struct stk_origin_opts oo = stk__dataset_origin_opts(opts);
  oo.max_conns = co.fetchers ? STK__MAX(co.fetchers, 4u) : 0;
  /* A bad cache directory is reported before any request is made. */
  int rc = co.dir ? stk__cache_dir_check(co.dir, err) : 0;
  if (rc) return rc;
  struct stk_origin *o = NULL;
  if ((rc = stk__origin_open(&o, url, &oo, err)) != 0) return rc;
  /* Shards are named under the origin's (redacted) URL; the dataset is
   * shown as the user named it (a pattern, a list), redacted too. */
  const char *shown = stk__origin_url(o);
  char red[4096];
  stk__url_redact(names ? ds->root : shown, red, sizeof red);
  free(ds->root);
  if (!(ds->root = strdup(red))) {
    stk__origin_close(o);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  struct tab t = {0};
  char *text = NULL;
  size_t len = 0;
  char merr[STK_ERRMSG_MAX];
  /* Lookups that find nothing (404, NoSuchKey) are expected here: they are
   * how a dataset without a manifest is recognised, not errors. */
  int mrc = stk__origin_get_mem(o, MANIFEST_NAME, MANIFEST_MAX, &text, &len, merr);
  const struct stk_format_ops *ixf = NULL;
  if (mrc == 0) {
    rc = parse_manifest(ds, shown, text, len, opts, &t, err);
    if (!rc && ds->fmt->dir_index) rc = open_dir_index(ds, o, shown, ds->fmt, &t, err);
  } else if (mrc == STK_ENOENT) {
    int irc = names ? STK_ENOENT : find_dir_index(o, opts, &ixf, err);
    if (irc == 0)
      rc = open_dir_index(ds, o, shown, ixf, &t, err);
    else if (irc != STK_ENOENT)
      rc = irc;
    else if (!names)
      rc = open_listed(ds, o, shown, opts, &t, err);
  } else {
    rc = stk__errf(err, mrc, "%s", merr);
  }
  if (!rc && names) rc = open_named(ds, shown, names, opts, &t, mrc == 0, err);
  free(text);
  if (!rc && ds->nshards == 0)
    rc = stk__errf(err, STK_EEMPTY, "%s: empty dataset: no %s shards found", ds->root,
                   ds->fmt ? ds->fmt->name : "");
  /* One sample per file (a folder tree): nothing is staged at open, and
   * sizes are learned as files arrive; a HEAD per file would cost more. */
  if (!rc && !(ds->fmt->caps & STK_FMT_TREE)) rc = head_sizes(o, &t, co.cancel, err);
  /* A paired format (Megatron's .bin + .idx): each companion is fetched
   * whole and indexed from its bytes now; the shards themselves are far
   * too large to stage and are read in chunks as windows need them. */
  if (!rc && ds->fmt->pair_ext) rc = stk__dataset_index_pairs(ds, o, t.v, t.n, co.cancel, err);
  if (!rc) {
    rc = stk__cache_open(&ds->cache, o, t.v, t.n, &co, err);
    o = NULL; /* the cache owns it, failed or not */
  }
  if (o) stk__origin_close(o);
  tab_free(&t);
  if (rc) return rc;
  /* Shards whose sample count nobody recorded are not staged here: they are
   * counted as they arrive (stk__dataset_count_through, and the note in
   * number_samples), so opening is the listing (or the HEADs). */
  return 0;
}

/* ---- writing a manifest -------------------------------------------------------------- */

int stk_manifest_write(const char *dir, const char *format, uint64_t *shards_out, char *errmsg) {
  struct stk_dataset *ds = NULL;
  struct stk_dataset_opts o = {.format = format};
  int rc = stk_dataset_open(&ds, dir, &o, errmsg);
  if (rc) return rc;
  if (ds->cache) {
    stk_dataset_close(ds);
    return stk__errf(errmsg, STK_EINVAL, "%s: a manifest is written next to local shards", dir);
  }
  size_t dl = strlen(ds->root);
  char tmp[4096], final[4096];
  snprintf(final, sizeof final, "%s/%s", ds->root, MANIFEST_NAME);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", ds->root, MANIFEST_NAME);
  FILE *f = fopen(tmp, "we");
  if (!f) {
    int e = errno;
    stk_dataset_close(ds);
    return stk__errf(errmsg, stk__from_errno(e), "%s: %s", tmp, strerror(e));
  }
  struct stk_json j;
  stk_json_init(&j, f, 0);
  stk_json_obj_begin(&j);
  stk_json_ku64(&j, "stoker_manifest", 1);
  stk_json_kstr(&j, "format", ds->fmt->name);
  stk_json_ku64(&j, "samples", ds->nsamples);
  stk_json_key(&j, "shards");
  stk_json_arr_begin(&j);
  for (size_t i = 0; i < ds->nshards && !rc; i++) {
    struct stk_shard *sh = &ds->shards[i];
    if (strncmp(sh->path, ds->root, dl) || sh->path[dl] != '/') {
      rc = stk__errf(errmsg, STK_EINVAL, "%s: not under %s", sh->path, ds->root);
      break;
    }
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint32_t crc = 0;
    if (fd < 0 || fstat(fd, &st) != 0) {
      int e = errno;
      rc = stk__errf(errmsg, stk__from_errno(e), "%s: %s", sh->path, strerror(e));
    } else if ((rc = stk__crc_fd(fd, (uint64_t)st.st_size, &crc)) != 0) {
      stk__errf(errmsg, rc, "%s: cannot read: %s", sh->path, stk_strerror(rc));
    }
    if (fd >= 0) close(fd);
    if (rc) break;
    char hex[9];
    snprintf(hex, sizeof hex, "%08" PRIx32, crc);
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "name", sh->path + dl + 1);
    stk_json_ku64(&j, "bytes", (uint64_t)st.st_size);
    stk_json_ku64(&j, "samples", sh->count);
    stk_json_kstr(&j, "crc32c", hex);
    if (sh->label >= 0) stk_json_ku64(&j, "label", (uint64_t)sh->label);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  fputc('\n', f);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
    if (!rc)
      rc = stk__errf(errmsg, stk__from_errno(errno), "%s: write failed: %s", tmp, strerror(errno));
  }
  fclose(f);
  if (!rc && rename(tmp, final) != 0)
    rc = stk__errf(errmsg, stk__from_errno(errno), "%s: %s", final, strerror(errno));
  if (rc) unlink(tmp);
  if (!rc && shards_out) *shards_out = ds->nshards;
  stk_dataset_close(ds);
  return rc;
}

/* Staging shards in order (warming, counting), the fetchers kept busy as
 * far ahead as the prefetch budget allows (at least one shard): shards
 * [.., queued) have been asked for, each holding a prefetch pin until it is
 * taken, and added[k] is what shard k added to the bytes ahead. Pins are
 * dropped as soon as a shard is in, so staging a dataset larger than the
 * cache evicts (LRU) instead of overfilling it. */
struct ahead {
  size_t queued;
  uint64_t bytes, budget;
  uint64_t *added; /* nshards entries */
};

/* Queue shards after i within the budget; shard i leaves the bytes ahead
 * (the caller takes it now). */
static void ahead_fill(struct stk_dataset *ds, struct ahead *a, size_t i) {
  if (a->queued <= i) a->queued = i;
  while (a->queued < ds->nshards) {
    uint64_t sz = stk__cache_shard_size(ds->cache, a->queued);
    if (sz == UINT64_MAX || sz > a->budget) sz = a->budget; /* unknown or huge: alone */
    if (a->queued > i && a->bytes + sz > a->budget) break;
    a->added[a->queued] = sz;
    a->bytes += sz;
    stk__cache_prefetch(ds->cache, a->queued++);
  }
  a->bytes -= a->added[i];
}

/* The prefetch pins of the queued shards from `from` on, never taken. */
static void ahead_drop(struct stk_dataset *ds, struct ahead *a, size_t from) {
  for (; from < a->queued; from++) stk__cache_release(ds->cache, from);
}

int stk__dataset_count_through(struct stk_dataset *ds, size_t min_shards, uint64_t min_samples,
                               const int *cancel, char *err) {
  if (min_shards > ds->nshards) min_shards = ds->nshards;
#define ENOUGH()                                                     \
  (stk__dataset_all_counted(ds) ||                                  \
   (__atomic_load_n(&ds->counted, __ATOMIC_ACQUIRE) >= min_shards && \
    __atomic_load_n(&ds->nsamples, __ATOMIC_ACQUIRE) >= min_samples))
  if (ENOUGH()) return 0;
  pthread_mutex_lock(&ds->count_mu);
  size_t n = ds->nshards, i = ds->counted;
  if (!ds->count_ahead) ds->count_ahead = calloc(n, sizeof *ds->count_ahead);
  struct ahead a = {i, 0, stk__cache_prefetch_budget(ds->cache), ds->count_ahead};
  int rc = a.added ? 0 : stk__errf(err, STK_ENOMEM, "out of memory");
  for (; !rc && !ENOUGH(); i++) {
    ahead_fill(ds, &a, i);
    int fd;
    rc = stk__shard_open(ds, i, 0, &fd, cancel, err); /* staged and indexed */
    stk__cache_release(ds->cache, i);                 /* its prefetch pin */
    if (rc) break;
    stk__shard_close(ds, i, fd);
    struct stk_shard *sh = &ds->shards[i];
    if (sh->count > UINT64_MAX - ds->nsamples) {
      rc = stk__errf(err, STK_ERANGE, "%s: too many samples", ds->root);
      break;
    }
    ds->rows[i].first = ds->nsamples;
    __atomic_store_n(&ds->nsamples, ds->nsamples + sh->count, __ATOMIC_RELEASE);
    __atomic_store_n(&ds->counted, i + 1, __ATOMIC_RELEASE);
  }
#undef ENOUGH
  if (a.added) ahead_drop(ds, &a, i + (rc != 0));
  if (i == n && ds->counted == n && ds->nsamples == 0 && !rc)
    rc = stk__errf(err, STK_EEMPTY, "%s: empty dataset: no samples in %zu %s shard%s", ds->root,
                   n, ds->fmt->name, n == 1 ? "" : "s");
  pthread_mutex_unlock(&ds->count_mu);
  return rc;
}

int stk_dataset_warm(struct stk_dataset *ds, const int *cancel,
                     void (*progress)(void *arg, size_t done, size_t total), void *arg,
                     char *errmsg) {
  if (!ds->cache)
    return stk__errf(errmsg, STK_EINVAL,
                     "%s: not read through a cache (give a URL or a cache "
                     "directory)",
                     ds->root);
  const char *ro = stk__cache_read_only_dir(ds->cache);
  if (ro)
    return stk__errf(errmsg, STK_EACCES,
                     "%s: the cache directory is read-only here: nothing "
                     "can be staged into it",
                     ro);
  /* Staged only: sample indexes are built by whoever reads. */
  size_t n = ds->nshards, i = 0;
  struct ahead a = {0, 0, stk__cache_prefetch_budget(ds->cache),
                    calloc(n ? n : 1, sizeof(uint64_t))};
  int rc = a.added ? 0 : stk__errf(ds->err, STK_ENOMEM, "out of memory");
  for (; i < n && !rc; i++) {
    ahead_fill(ds, &a, i);
    int fd;
    rc = stk__cache_acquire(ds->cache, i, &fd, cancel, ds->err);
    stk__cache_release(ds->cache, i); /* its prefetch pin */
    if (!rc) stk__shard_close(ds, i, fd);
    if (progress) progress(arg, i + 1, n);
  }
  if (a.added) ahead_drop(ds, &a, i); /* after a failure */
  free(a.added);
  if (rc && errmsg) memcpy(errmsg, ds->err, STK_ERRMSG_MAX);
  return rc;
}
