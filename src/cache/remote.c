/* Datasets behind a cache: opening a dataset URL (or a path with a cache
 * directory), the manifest that lists its shards, and the per-shard
 * descriptors the loader and stk_dataset_read() use.
 *
 * Opening reads one object, never one per sample or per shard:
 *   stoker-manifest.json  (written by `stoker cache manifest` or `stoker gen
 *                          --manifest`): format, and per shard its name,
 *                          bytes, samples and CRC32C; or
 *   index.json            (Mosaic MDS): shards with bytes and samples.
 * Without either, the origin is listed (S3, a file system) and every shard
 * is staged at open to count its samples: correct, but slow for a large
 * dataset, and said so in the log. Sample indexes of a shard are built
 * when the shard is first staged. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/json_parse.h"
#include "../format/format_impl.h"
#include "cache_impl.h"

#define MANIFEST_NAME "stoker-manifest.json"
#define MANIFEST_MAX (256u << 20)
#define MANIFEST_SHARD_MAX (1ull << 50) /* a sanity bound on one shard's bytes */

/* ---- descriptors of shards ---------------------------------------------------- */

int stk__shard_fd(struct stk_dataset *ds, size_t si, int *fd, const int *cancel, char *err) {
  struct stk_shard *sh = &ds->shards[si];
  if (!ds->cache) {
    *fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
      int e = errno;
      return stk__errf(err, stk__from_errno(e), "%s: cannot open: %s", sh->path, strerror(e));
    }
    return 0;
  }
  int rc = stk__cache_acquire(ds->cache, si, fd, cancel, err);
  if (rc) return rc;
  if (!__atomic_load_n(&sh->pending, __ATOMIC_ACQUIRE)) return 0;
  /* First use of the shard: build its sample index from the staged copy. */
  pthread_mutex_lock(&ds->ix_mu);
  if (sh->pending) {
    uint64_t want = sh->count;
    int known = sh->count_known;
    rc = ds->fmt->index ? ds->fmt->index(ds, sh, *fd, err) : 0;
    if (!rc && known && sh->count != want) {
      rc = stk__errf(err, STK_EFORMAT, "%s: %llu samples, but the manifest says %llu", sh->path,
                     (unsigned long long)sh->count, (unsigned long long)want);
      sh->count = want;
    }
    if (!rc) __atomic_store_n(&sh->pending, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ds->ix_mu);
  if (rc) stk__shard_fd_done(ds, si, *fd);
  return rc;
}

void stk__shard_fd_done(struct stk_dataset *ds, size_t si, int fd) {
  if (fd >= 0) close(fd);
  if (ds->cache) stk__cache_release(ds->cache, si);
}

uint64_t stk__shard_file_size(struct stk_dataset *ds, size_t si) {
  return ds->cache ? stk__cache_shard_size(ds->cache, si) : UINT64_MAX;
}

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
  t->v[t->n++] = (struct stk_cache_shard){.name = nm, .size = size, .crc32c = crc, .has_crc = has_crc};
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

static int add_remote_shard(struct stk_dataset *ds, const char *url, const char *name,
                            int32_t label) {
  size_t n = strlen(url) + strlen(name) + 2;
  char *p = malloc(n);
  if (!p) return STK_ENOMEM;
  snprintf(p, n, "%s/%s", url, name);
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
    return stk__errf(err, STK_EFORMAT, "%s/%s: not a stoker manifest (version, format and shards "
                     "are required)", url, MANIFEST_NAME);
  }
  if (ver > 1) {
    stk__json_free(doc);
    return stk__errf(err, STK_ENOTSUP, "%s/%s: manifest version %llu is newer than this stoker "
                     "reads (1)", url, MANIFEST_NAME, (unsigned long long)ver);
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
      rc = stk__errf(err, STK_EFORMAT, "%s/%s: shard %zu needs a safe relative name, bytes "
                     "(at most 2^50) and samples", url, MANIFEST_NAME, i);
      break;
    }
    char *end = NULL;
    unsigned long c = crc ? strtoul(crc, &end, 16) : 0;
    int has_crc = crc && end && !*end && strlen(crc) == 8;
    if ((rc = tab_add(t, name, bytes, has_crc, (uint32_t)c)) != 0) break;
    if (ds->fmt == &stk__fmt_mds) continue;
    int32_t lab = stk__json_u64(s, "label", &label) || label > INT32_MAX ? -1 : (int32_t)label;
    if ((rc = add_remote_shard(ds, url, name, lab)) != 0) break;
    struct stk_shard *sh = &ds->shards[ds->nshards - 1];
    sh->count = samples;
    sh->count_known = 1;
    sh->pending = ds->fmt->index != NULL;
  }
  if (rc == STK_ENOMEM) stk__errf(err, rc, "out of memory reading the manifest");
  stk__json_free(doc);
  return rc;
}

/* Mosaic MDS: index.json has the column layout the format needs; it is
 * staged into a private directory and read by the MDS backend, whose
 * shard paths are then made remote. */
static int open_mds_index(struct stk_dataset *ds, struct stk_origin *o, const char *url,
                          struct tab *t, char *err) {
  char *text = NULL;
  size_t len = 0;
  int rc = stk__origin_get_mem(o, "index.json", MANIFEST_MAX, &text, &len, err);
  if (rc) return rc;
  char tmpl[] = "/tmp/stoker-mds-XXXXXX";
  char *dir = mkdtemp(tmpl);
  char path[64];
  if (!dir) {
    free(text);
    return stk__errf(err, stk__from_errno(errno), "cannot create a temporary directory: %s",
                     strerror(errno));
  }
  snprintf(path, sizeof path, "%s/index.json", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  rc = fd < 0 ? stk__from_errno(errno) : stk__write_full(fd, text, len);
  if (fd >= 0) close(fd);
  free(text);
  if (rc) stk__errf(err, rc, "%s: %s", path, stk_strerror(rc));
  ds->fmt = &stk__fmt_mds;
  if (!rc) rc = ds->fmt->list(ds, dir);
  if (rc) memcpy(err, ds->err, STK_ERRMSG_MAX);
  unlink(path);
  rmdir(dir);
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
    size_t n = strlen(url) + strlen(name) + 2;
    char *p = rc ? NULL : malloc(n);
    if (!p) {
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
      break;
    }
    snprintf(p, n, "%s/%s", url, name);
    free(sh->path);
    sh->path = p;
    sh->count_known = 1; /* index.json's count, checked again at indexing */
    sh->pending = 1;
  }
  tab_free(t);
  *t = nt;
  return rc;
}

struct listing {
  struct stk_dataset *ds;
  const char *url;
  struct tab *t;
  const struct stk_format_ops *want; /* NULL: decide by extension */
};

static int list_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  struct listing *L = arg;
  if (!safe_rel(name) || !strcmp(name, MANIFEST_NAME)) return 0;
  const struct stk_format_ops *f = L->want;
  if (f == &stk__fmt_files ? 0 : !(f->exts && *f->exts && stk__has_ext(name, f->exts))) return 0;
  int rc = tab_add(L->t, name, info ? info->size : UINT64_MAX, 0, 0);
  if (!rc) rc = add_remote_shard(L->ds, L->url, name, -1);
  if (!rc) {
    struct stk_shard *sh = &L->ds->shards[L->ds->nshards - 1];
    sh->count = f == &stk__fmt_files ? 1 : 0;
    sh->pending = f->index != NULL;
  }
  return rc;
}

static int ext_count_cb(void *arg, const char *name, const struct stk_obj_info *info) {
  (void)info;
  size_t *count = arg;
  for (int k = 0; stk_formats[k] && k < 16; k++)
    if (stk_formats[k]->exts && *stk_formats[k]->exts && stk__has_ext(name, stk_formats[k]->exts))
      count[k]++;
  return 0;
}

/* No manifest: list the origin, then stage every shard to count samples. */
static int open_listed(struct stk_dataset *ds, struct stk_origin *o, const char *url,
                       const struct stk_dataset_opts *opts, struct tab *t, char *err) {
  const struct stk_format_ops *f = NULL;
  if (opts && opts->format && *opts->format && !(f = stk__format_find(opts->format)))
    return stk__errf(err, STK_EINVAL, "unknown format '%s'", opts->format);
  if (!f) {
    size_t count[16] = {0}, best = 0;
    int rc = stk__origin_list(o, ext_count_cb, count, err);
    if (rc == STK_ENOTSUP)
      return stk__errf(err, rc, "%s: no %s or index.json there, and this origin cannot be "
                       "listed; write one with `stoker cache manifest DIR` next to the shards",
                       url, MANIFEST_NAME);
    if (rc) return rc;
    f = &stk__fmt_files;
    for (int k = 0; stk_formats[k] && k < 16; k++)
      if (count[k] > best) best = count[k], f = stk_formats[k];
  }
  ds->fmt = f;
  struct listing L = {ds, url, t, f};
  int rc = stk__origin_list(o, list_cb, &L, err);
  if (rc == STK_ENOTSUP)
    return stk__errf(err, rc, "%s: no %s there, and this origin cannot be listed; write one "
                     "with `stoker cache manifest DIR` next to the shards", url, MANIFEST_NAME);
  if (!rc && f->index && ds->nshards)
    stk_log(STK_LOG_WARN, "%s: no %s: staging all %zu shards to count their samples "
            "(`stoker cache manifest` makes this one request)", url, MANIFEST_NAME, ds->nshards);
  return rc;
}

static int uncounted(struct stk_dataset *ds, size_t i) {
  return ds->shards[i].pending && !ds->shards[i].count_known;
}

static int stage_in_order(struct stk_dataset *ds, int (*want)(struct stk_dataset *, size_t),
                          int index, const int *cancel,
                          void (*progress)(void *arg, size_t done, size_t total), void *arg);

int stk__dataset_open_remote(struct stk_dataset *ds, const char *url,
                             const struct stk_dataset_opts *opts, char *err) {
  struct stk_cache_opts co = opts && opts->cache ? *opts->cache : (struct stk_cache_opts){0};
  struct stk_origin_opts oo = {
      .connect_timeout_s = co.connect_timeout_s, .stall_timeout_s = co.stall_timeout_s,
      .retry_max_s = co.retry_max_s, .max_attempts = co.max_attempts,
      .max_conns = co.fetchers ? STK__MAX(co.fetchers, 4u) : 0, .s3_endpoint = co.s3_endpoint,
      .s3_region = co.s3_region, .s3_addressing = co.s3_addressing, .s3_profile = co.s3_profile};
  /* A bad cache directory is reported before any request is made. */
  int rc = co.dir ? stk__cache_dir_check(co.dir, err) : 0;
  if (rc) return rc;
  struct stk_origin *o = NULL;
  if ((rc = stk__origin_open(&o, url, &oo, err)) != 0) return rc;
  const char *shown = stk__origin_url(o);
  free(ds->root);
  if (!(ds->root = strdup(shown))) {
    stk__origin_close(o);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  struct tab t = {0};
  char *text = NULL;
  size_t len = 0;
  char merr[STK_ERRMSG_MAX];
  int mrc = stk__origin_get_mem(o, MANIFEST_NAME, MANIFEST_MAX, &text, &len, merr);
  if (mrc == 0) {
    rc = parse_manifest(ds, ds->root, text, len, opts, &t, err);
    if (!rc && ds->fmt == &stk__fmt_mds) rc = open_mds_index(ds, o, ds->root, &t, err);
  } else if (mrc == STK_ENOENT) {
    char ierr[STK_ERRMSG_MAX];
    struct stk_obj_info info;
    int irc = (!opts || !opts->format || !strcmp(opts->format, "mds"))
                  ? stk__origin_stat(o, "index.json", &info, ierr)
                  : STK_ENOENT;
    if (irc == 0) rc = open_mds_index(ds, o, ds->root, &t, err);
    else if (irc != STK_ENOENT) rc = stk__errf(err, irc, "%s", ierr);
    else rc = open_listed(ds, o, ds->root, opts, &t, err);
  } else {
    rc = stk__errf(err, mrc, "%s", merr);
  }
  free(text);
  if (!rc && ds->nshards == 0)
    rc = stk__errf(err, STK_EEMPTY, "%s: empty dataset: no %s shards found", ds->root,
                   ds->fmt ? ds->fmt->name : "");
  if (!rc) {
    rc = stk__cache_open(&ds->cache, o, t.v, t.n, &co, err);
    o = NULL; /* the cache owns it, failed or not */
  }
  if (o) stk__origin_close(o);
  tab_free(&t);
  if (rc) return rc;
  /* Shards whose sample count nobody recorded are staged (and indexed) now,
   * several at a time. */
  rc = stage_in_order(ds, uncounted, 1, NULL, NULL, NULL);
  if (rc && err != ds->err) memcpy(err, ds->err, STK_ERRMSG_MAX);
  return rc;
}

/* ---- writing a manifest -------------------------------------------------------------- */

int stk_manifest_write(const char *dir, const char *format, uint64_t *shards_out,
                       char *errmsg) {
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
    if (!rc) rc = stk__errf(errmsg, stk__from_errno(errno), "%s: write failed: %s", tmp, strerror(errno));
  }
  fclose(f);
  if (!rc && rename(tmp, final) != 0)
    rc = stk__errf(errmsg, stk__from_errno(errno), "%s: %s", final, strerror(errno));
  if (rc) unlink(tmp);
  if (!rc && shards_out) *shards_out = ds->nshards;
  stk_dataset_close(ds);
  return rc;
}

/* ---- public helpers ------------------------------------------------------------------ */

int stk_dataset_cache_stats(const struct stk_dataset *ds, struct stk_cache_stats *st) {
  if (!ds->cache) return STK_ENOENT;
  stk__cache_stats(ds->cache, st);
  return 0;
}

/* Stage shards in order, keeping the fetchers busy as far ahead as the
 * prefetch budget allows (at least one shard), and wait for each; pins are
 * dropped as soon as a shard is in, so staging a dataset larger than the
 * cache evicts (LRU) instead of overfilling it. want(ds, i) picks the
 * shards (NULL: all); with index, each one's sample index is built too. */
static int stage_in_order(struct stk_dataset *ds, int (*want)(struct stk_dataset *, size_t),
                          int index, const int *cancel,
                          void (*progress)(void *arg, size_t done, size_t total), void *arg) {
  size_t n = ds->nshards, queued = 0, i = 0;
  uint64_t budget = stk__cache_prefetch_budget(ds->cache), ahead = 0;
  uint64_t *added = calloc(n ? n : 1, sizeof *added); /* what each queued shard counted */
  if (!added) return stk__errf(ds->err, STK_ENOMEM, "out of memory");
  int rc = 0;
  for (; i < n && !rc; i++) {
    if (want && !want(ds, i)) continue;
    if (queued <= i) queued = i;
    while (queued < n) {
      if (want && !want(ds, queued)) {
        queued++;
        continue;
      }
      uint64_t sz = stk__cache_shard_size(ds->cache, queued);
      if (sz == UINT64_MAX || sz > budget) sz = budget; /* unknown or huge: alone */
      if (queued > i && ahead + sz > budget) break;
      added[queued] = sz;
      ahead += sz;
      stk__cache_prefetch(ds->cache, queued++);
    }
    ahead -= added[i];
    int fd;
    rc = index ? stk__shard_fd(ds, i, &fd, cancel, ds->err)
               : stk__cache_acquire(ds->cache, i, &fd, cancel, ds->err);
    stk__cache_release(ds->cache, i); /* its prefetch pin */
    if (!rc) stk__shard_fd_done(ds, i, fd);
    if (progress) progress(arg, i + 1, n);
  }
  for (; i < queued; i++) /* after a failure */
    if (!want || want(ds, i)) stk__cache_release(ds->cache, i);
  free(added);
  return rc;
}

int stk_dataset_warm(struct stk_dataset *ds, const int *cancel,
                     void (*progress)(void *arg, size_t done, size_t total), void *arg,
                     char *errmsg) {
  if (!ds->cache)
    return stk__errf(errmsg, STK_EINVAL, "%s: not read through a cache (give a URL or a cache "
                     "directory)", ds->root);
  /* Staged only: sample indexes are built by whoever reads. */
  int rc = stage_in_order(ds, NULL, 0, cancel, progress, arg);
  if (rc && errmsg) memcpy(errmsg, ds->err, STK_ERRMSG_MAX);
  return rc;
}
