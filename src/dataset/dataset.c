/* Datasets: the one opener (a path, a URL, a brace pattern or a shard-list
 * file), parallel shard indexing, global sample numbers and synchronous
 * sample reads. Where the shards' bytes come from (in place, or staged by
 * the cache) is shard.c's business; formats only frame bytes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_impl.h"

/* ---- indexing ---------------------------------------------------------- */

static int open_err(const char *path, int e, char *err) {
  return stk__errf(err, stk__from_errno(e), "%s: cannot open: %s", path, strerror(e));
}

static int index_one(struct stk_dataset *ds, size_t si, char *err) {
  struct stk_shard *sh = &ds->shards[si];
  if (!ds->fmt->index || ds->rows[si].pending) return 0;
  int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_err(sh->path, errno, err);
  int rc = stk__shard_index(ds, si, fd, err);
  close(fd);
  return rc;
}

struct ixjob {
  struct stk_dataset *ds;
  atomic_size_t next;
  atomic_int stop;
  pthread_mutex_t mu;
  size_t bad; /* lowest failing shard seen */
  int rc;
  char err[STK_ERRMSG_MAX];
};

static void *index_worker(void *arg) {
  struct ixjob *j = arg;
  char err[STK_ERRMSG_MAX];
  for (;;) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->ds->nshards || atomic_load(&j->stop)) break;
    int rc = index_one(j->ds, i, err);
    if (!rc) continue;
    pthread_mutex_lock(&j->mu);
    if (!j->rc || i < j->bad) {
      j->rc = rc;
      j->bad = i;
      memcpy(j->err, err, sizeof err);
    }
    pthread_mutex_unlock(&j->mu);
    atomic_store(&j->stop, 1);
  }
  return NULL;
}

int stk__dataset_index_all(struct stk_dataset *ds, int threads, char *err) {
  if (!ds->fmt->index) return 0;
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if ((size_t)threads > ds->nshards) threads = (int)ds->nshards;
  if (threads > 64) threads = 64;
  struct ixjob j = {.ds = ds};
  atomic_init(&j.next, 0);
  atomic_init(&j.stop, 0);
  pthread_mutex_init(&j.mu, NULL);
  pthread_t tid[64];
  int started = 0;
  for (int t = 1; t < threads; t++)
    if (pthread_create(&tid[started], NULL, index_worker, &j) == 0) started++;
  index_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  pthread_mutex_destroy(&j.mu);
  if (j.rc) memcpy(err, j.err, STK_ERRMSG_MAX);
  return j.rc;
}

/* Whether shard i's sample count is known (indexed, or given by a manifest
 * or a dataset index) rather than left to be learned when it arrives. */
static int count_known(const struct stk__shard_row *r) {
  return !__atomic_load_n(&r->pending, __ATOMIC_ACQUIRE) || r->count_known;
}

/* Number the samples of the shards whose counts are known, in order; a
 * dataset whose first uncounted shard comes before the end is streamed:
 * the rest are numbered as they arrive (stk__dataset_count_through). */
static int number_samples(struct stk_dataset *ds, const char *root, char *err) {
  uint64_t n = 0;
  size_t i = 0;
  for (; i < ds->nshards && count_known(&ds->rows[i]); i++) {
    ds->rows[i].first = n;
    if (ds->shards[i].count > UINT64_MAX - n)
      return stk__errf(err, STK_ERANGE, "%s: too many samples", root);
    n += ds->shards[i].count;
  }
  ds->nsamples = n;
  ds->counted = i;
  ds->streamed = i < ds->nshards;
  if (ds->streamed)
    stk_log(STK_LOG_INFO,
            "%s: %zu of %zu shards have no recorded sample count (no manifest): they are counted "
            "as they arrive, and the first epoch visits shards in their listed order (`stoker "
            "cache manifest` gives counts and checksums up front)",
            root, ds->nshards - i, ds->nshards);
  if (n == 0 && !ds->streamed)
    return stk__errf(err, STK_EEMPTY, "%s: empty dataset: no samples in %zu %s shard%s", root,
                     ds->nshards, ds->fmt->name, ds->nshards == 1 ? "" : "s");
  return 0;
}

/* ---- open / close ------------------------------------------------------- */

static struct stk_dataset *ds_new(const char *root) {
  struct stk_dataset *ds = calloc(1, sizeof *ds);
  if (!ds || !(ds->root = strdup(root))) {
    free(ds);
    return NULL;
  }
  size_t l = strlen(ds->root);
  while (l > 1 && ds->root[l - 1] == '/') ds->root[--l] = 0;
  pthread_mutex_init(&ds->rd_mu, NULL);
  pthread_mutex_init(&ds->ix_mu, NULL);
  pthread_mutex_init(&ds->count_mu, NULL);
  ds->rd_fd = -1;
  return ds;
}

/* A shard-list file is named by its extension (a path or a URL). */
static int is_list_name(const char *p) {
  const char *q = strchr(p, '?');
  size_t n = q ? (size_t)(q - p) : strlen(p);
  static const char *const ext[] = {".txt", ".list", ".lst", ".shards"};
  for (size_t i = 0; i < STK__ARRAY_LEN(ext); i++) {
    size_t l = strlen(ext[i]);
    if (n > l && !strncmp(p + n - l, ext[i], l)) return 1;
  }
  return 0;
}

#define LIST_MAX (64u << 20)
#define NAMES_MAX 10000000u

/* The origin options a dataset's requests take from its cache options
 * (timeouts, retries, S3 settings, cancel). */
struct stk_origin_opts stk__dataset_origin_opts(const struct stk_dataset_opts *opts) {
  struct stk_cache_opts co = opts && opts->cache ? *opts->cache : (struct stk_cache_opts){0};
  return (struct stk_origin_opts){.connect_timeout_s = co.connect_timeout_s,
                                  .stall_timeout_s = co.stall_timeout_s,
                                  .retry_max_s = co.retry_max_s,
                                  .max_attempts = co.max_attempts,
                                  .s3_endpoint = co.s3_endpoint,
                                  .s3_region = co.s3_region,
                                  .s3_addressing = co.s3_addressing,
                                  .s3_profile = co.s3_profile,
                                  .cancel = co.cancel};
}

/* The text of a shard-list file, local or remote (fetched whole). */
static int read_list(const char *loc, const struct stk_dataset_opts *opts, char **text, size_t *len,
                     char *err) {
  if (stk__origin_is_url(loc) && strncmp(loc, "file://", 7)) {
    struct stk_origin_opts oo = stk__dataset_origin_opts(opts);
    /* The list's directory is the origin; the list is one object in it. */
    char *dir = strdup(loc);
    if (!dir) return stk__errf(err, STK_ENOMEM, "out of memory");
    char *q = strchr(dir, '?');
    if (q) *q = 0;
    char *slash = strrchr(dir, '/');
    int rc = slash && slash > strstr(dir, "://") + 2 ? 0 : STK_EINVAL;
    if (rc) {
      free(dir);
      return stk__errf(err, rc, "%s: not a shard-list URL", loc);
    }
    *slash = 0;
    struct stk_origin *o = NULL;
    rc = stk__origin_open(&o, dir, &oo, err);
    if (!rc) rc = stk__origin_get_mem(o, slash + 1, LIST_MAX, text, len, err);
    if (o) stk__origin_close(o);
    free(dir);
    return rc;
  }
  char *lpath = NULL;
  if (!strncmp(loc, "file://", 7)) {
    int rc = stk__file_url_path(loc, &lpath, err);
    if (rc) return rc;
    loc = lpath;
  }
  int fd = open(loc, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    stk__errf(err, stk__from_errno(e), "%s: cannot open: %s", loc, strerror(e));
    free(lpath);
    return stk__from_errno(e);
  }
  uint64_t size = 0;
  int rc = stk__fd_size(fd, &size);
  if (!rc && size > LIST_MAX)
    rc = stk__errf(err, STK_ERANGE, "%s: a shard list of %llu bytes is too large (at most %u)", loc,
                   (unsigned long long)size, LIST_MAX);
  if (!rc && !(*text = malloc((size_t)size + 1))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (!rc && (rc = stk__pread_full(fd, *text, (size_t)size, 0)) != 0) {
    stk__errf(err, rc, "%s: cannot read: %s", loc, stk_strerror(rc));
    free(*text);
    *text = NULL;
  }
  close(fd);
  free(lpath);
  if (!rc) {
    (*text)[size] = 0;
    *len = (size_t)size;
  }
  return rc;
}

/* The directory part of a path or URL (for relative list entries). */
static char *dir_of(const char *loc) {
  char *d = strdup(loc);
  if (!d) return NULL;
  char *q = strchr(d, '?');
  if (q) *q = 0;
  char *s = strrchr(d, '/');
  if (s)
    *s = 0;
  else
    strcpy(d, ".");
  return d;
}

/* Whether a path or file:// URL names a regular file here. */
static int local_file(const char *loc) {
  char *p = NULL, err[STK_ERRMSG_MAX];
  if (!strncmp(loc, "file://", 7) && stk__file_url_path(loc, &p, err)) return 0;
  struct stat st;
  int ok = stat(p ? p : loc, &st) == 0 && S_ISREG(st.st_mode);
  free(p);
  return ok;
}

/* Expand the location into the shard locations it names: a brace pattern,
 * a shard-list file, or a single shard URL. Leaves names empty for a
 * dataset root (a directory, a URL prefix, a single local file). */
static int expand_source(const char *path, const struct stk_dataset_opts *opts,
                         struct stk__names *names, char *err) {
  if (stk__brace_has(path)) return stk__brace_expand(path, NAMES_MAX, names, err);
  int url = stk__origin_is_url(path) && strncmp(path, "file://", 7);
  if (is_list_name(path) && (url || local_file(path))) {
    char *text = NULL, *base = NULL;
    size_t len = 0;
    int rc = read_list(path, opts, &text, &len, err);
    if (!rc && !(base = dir_of(path))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    if (!rc) rc = stk__list_parse(text, len, base, NAMES_MAX, names, err);
    if (!rc && names->n == 0)
      rc = stk__errf(err, STK_EEMPTY, "%s: empty shard list (no lines naming a shard)", path);
    free(text);
    free(base);
    return rc;
  }
  /* A URL naming one shard (its name ends in a format's extension; a
   * presigned URL's query string after it; a file:// URL here is read
   * through cache tiers, the others were made paths). */
  if (stk__origin_is_url(path)) {
    size_t plen = strcspn(path, "?#");
    char *p = strndup(path, plen);
    if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
    const char *base = strrchr(p, '/');
    int one = base && stk__format_by_ext(base + 1) != NULL;
    free(p);
    if (one) return stk__names_add(names, path);
  }
  return 0;
}

int stk_dataset_path_is_source(const char *path) {
  if (!path) return 0;
  if (stk__origin_is_url(path) || stk__brace_has(path)) return 1;
  return is_list_name(path) && local_file(path);
}

static int all_local(const struct stk__names *n) {
  for (size_t i = 0; i < n->n; i++)
    if (stk__origin_is_url(n->v[i]) && strncmp(n->v[i], "file://", 7)) return 0;
  return 1;
}

/* A file:// URL read without cache tiers is the path it names, its %XX
 * escapes decoded (pathlib's as_uri() writes "a%20b"); in place. */
static int file_url_to_path(char **loc, char *err) {
  if (strncmp(*loc, "file://", 7)) return 0;
  char *p = NULL;
  int rc = stk__file_url_path(*loc, &p, err);
  if (rc) return rc;
  free(*loc);
  *loc = p;
  return 0;
}

void stk_dataset_opts_init_sized(struct stk_dataset_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk_dataset_open(struct stk_dataset **out, const char *path,
                     const struct stk_dataset_opts *user, char *errmsg) {
  if (!out || !path || !*path) return stk__errf(errmsg, STK_EINVAL, "no dataset path given");
  /* The caller's options (and cache options) at this library's size, read
   * only as far as the caller's struct_size; everything below uses these. */
  struct stk_dataset_opts own;
  struct stk_cache_opts own_cache;
  int orc = stk__opts_take(&own, sizeof own, user, "stk_dataset_opts", errmsg);
  if (!orc && own.cache)
    orc = stk__opts_take(&own_cache, sizeof own_cache, own.cache, "stk_cache_opts", errmsg);
  if (orc) return orc;
  if (own.cache) own.cache = &own_cache;
  const struct stk_dataset_opts *opts = &own;
  /* file:// without cache tiers is just a path (a pattern's names are
   * decoded one by one, after expansion). */
  const struct stk_cache_opts *co = opts ? opts->cache : NULL;
  int tiers = co && (co->dir || co->ram_bytes);
  char *fpath = NULL;
  if (!tiers && !strncmp(path, "file://", 7) && !stk__brace_has(path)) {
    int rc = stk__file_url_path(path, &fpath, errmsg);
    if (rc) return rc;
    path = fpath;
  }
  struct stk_dataset *ds = ds_new(path);
  if (!ds) {
    free(fpath);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  struct stk__names names = {0};
  int rc = expand_source(path, opts, &names, ds->err);
  if (!rc && names.n) {
    if (tiers || !all_local(&names)) {
      char *root = NULL;
      rc = stk__names_common_root(&names, &root, ds->err);
      if (!rc) rc = stk__dataset_open_remote(ds, root, &names, opts, ds->err);
      free(root);
    } else {
      for (size_t i = 0; i < names.n && !rc; i++) /* file:// entries are paths */
        rc = file_url_to_path(&names.v[i], ds->err);
      if (!rc) rc = stk__dataset_open_local(ds, &names, opts, ds->err);
    }
  } else if (!rc) {
    if ((co && co->dir) || stk__origin_is_url(path))
      rc = stk__dataset_open_remote(ds, path, NULL, opts, ds->err);
    else
      rc = stk__dataset_open_local(ds, NULL, opts, ds->err);
  }
  stk__names_free(&names);
  free(fpath);
  if (!rc) rc = number_samples(ds, ds->root, ds->err);
  if (rc) {
    if (errmsg) memcpy(errmsg, ds->err, STK_ERRMSG_MAX);
    stk_dataset_close(ds);
    return rc;
  }
  *out = ds;
  return 0;
}

void stk_dataset_close(struct stk_dataset *ds) {
  if (!ds) return;
  if (ds->rd_fd >= 0) stk__shard_close(ds, ds->rd_shard, ds->rd_fd);
  ds->rd_fd = -1;
  stk__cache_close(ds->cache);
  pthread_mutex_destroy(&ds->ix_mu);
  pthread_mutex_destroy(&ds->count_mu);
  free(ds->count_ahead);
  pthread_mutex_destroy(&ds->rd_mu);
  if (ds->fmt && ds->fmt->free_state) ds->fmt->free_state(ds);
  ds->fmt_state = NULL;
  for (size_t i = 0; i < ds->nshards; i++) {
    free(ds->shards[i].path);
    free(ds->shards[i].idx);
  }
  free(ds->shards);
  free(ds->rows);
  free(ds->root);
  free(ds);
}

const char *stk_dataset_location(const struct stk_dataset *ds) { return ds->root; }
/* The public accessors that take sample numbers or totals count a streamed
 * dataset's remaining shards first (staging them): what they promise is
 * the whole dataset's figures. The loader does not: it counts as it goes. */
static int count_all(const struct stk_dataset *ds) {
  struct stk_dataset *m = (struct stk_dataset *)ds; /* memoized, logically const */
  return stk__dataset_count_through(m, SIZE_MAX, UINT64_MAX, NULL, m->err);
}

uint64_t stk_dataset_num_samples(const struct stk_dataset *ds) {
  count_all(ds);
  return __atomic_load_n(&ds->nsamples, __ATOMIC_ACQUIRE);
}

uint64_t stk_dataset_samples_counted(const struct stk_dataset *ds, int *complete) {
  if (complete) *complete = stk__dataset_all_counted(ds);
  return __atomic_load_n(&ds->nsamples, __ATOMIC_ACQUIRE);
}

int stk_dataset_count(struct stk_dataset *ds, const int *cancel, char *errmsg) {
  char err[STK_ERRMSG_MAX];
  int rc = stk__dataset_count_through(ds, SIZE_MAX, UINT64_MAX, cancel, err);
  if (rc && errmsg) memcpy(errmsg, err, STK_ERRMSG_MAX);
  return rc;
}

int stk__dataset_all_counted(const struct stk_dataset *ds) {
  return !ds->streamed || __atomic_load_n(&ds->counted, __ATOMIC_ACQUIRE) == ds->nshards;
}
size_t stk_dataset_num_shards(const struct stk_dataset *ds) { return ds->nshards; }
const char *stk_dataset_format(const struct stk_dataset *ds) {
  return ds->fmt && ds->fmt->name ? ds->fmt->name : "";
}
unsigned stk_dataset_caps(const struct stk_dataset *ds) { return ds->fmt->caps; }
const char *stk_dataset_errmsg(const struct stk_dataset *ds) { return ds->err; }

int stk_dataset_property(const struct stk_dataset *ds, int i, const char **name, char *buf,
                         size_t n) {
  if (!ds || !name || !buf || !n || i < 0 || !ds->fmt->property) return STK_ENOENT;
  buf[0] = 0;
  return ds->fmt->property(ds, i, name, buf, n);
}

int stk_dataset_shard_info(const struct stk_dataset *ds, size_t i, struct stk_shard_info *out) {
  if (i >= ds->nshards) return STK_ENOENT;
  if (ds->streamed && i >= __atomic_load_n(&ds->counted, __ATOMIC_ACQUIRE)) {
    int rc = stk__dataset_count_through((struct stk_dataset *)ds, i + 1, 0, NULL,
                                        ((struct stk_dataset *)ds)->err);
    if (rc) return rc;
  }
  const struct stk_shard *sh = &ds->shards[i];
  out->path = sh->path;
  out->first = ds->rows[i].first;
  out->count = sh->count;
  out->bytes = 0;
  for (uint64_t k = 0; sh->idx && k < sh->count; k++) out->bytes += sh->idx[k].len;
  if (!sh->idx && ds->cache) out->bytes = stk__shard_size((struct stk_dataset *)ds, i);
  return 0;
}

int stk_dataset_sample_bytes(struct stk_dataset *ds, uint64_t n, uint64_t *bytes) {
  if (n >= ds->nsamples) count_all(ds);
  if (n >= ds->nsamples)
    return stk__errf(ds->err, STK_ERANGE, "%s: sample %llu out of range (%llu samples)", ds->root,
                     (unsigned long long)n, (unsigned long long)ds->nsamples);
  size_t si = stk__dataset_shard_of(ds, n);
  const struct stk_shard *sh = &ds->shards[si];
  if (stk__shard_pending(ds, si)) { /* open it to index it */
    int fd, rc = stk__shard_open(ds, si, 0, &fd, NULL, ds->err);
    if (rc) return rc;
    stk__shard_close(ds, si, fd);
  }
  if (sh->idx) {
    *bytes = sh->idx[n - ds->rows[si].first].len;
    return 0;
  }
  if (ds->cache) /* a plain file listed without its size: asked (HEAD) */
    return stk__cache_shard_stat(ds->cache, si, bytes, ds->err);
  struct stat st;
  if (stat(sh->path, &st) != 0) {
    int e = errno;
    return stk__errf(ds->err, stk__from_errno(e), "%s: %s", sh->path, strerror(e));
  }
  *bytes = (uint64_t)st.st_size;
  return 0;
}

/* ---- synchronous reads ------------------------------------------------- */

static int cached_fd(struct stk_dataset *ds, size_t si) {
  if (ds->rd_fd >= 0 && ds->rd_shard == si) return ds->rd_fd;
  if (ds->rd_fd >= 0) stk__shard_close(ds, ds->rd_shard, ds->rd_fd);
  ds->rd_fd = -1;
  int fd, rc = stk__shard_open(ds, si, 0, &fd, NULL, ds->err);
  if (rc) return rc;
  ds->rd_fd = fd;
  ds->rd_shard = si;
  return fd;
}

static int grow(uint8_t **buf, size_t *cap, uint64_t len) {
  if (len > SIZE_MAX / 2) return STK_ENOMEM;
  size_t want = len ? (size_t)len : 1;
  if (*buf && *cap >= want) return 0;
  uint8_t *p = realloc(*buf, want);
  if (!p) return STK_ENOMEM;
  *buf = p;
  *cap = want;
  return 0;
}

static int read_locked(struct stk_dataset *ds, uint64_t n, int verify, uint8_t **buf, size_t *cap,
                       struct stk_sample *out) {
  size_t si = stk__dataset_shard_of(ds, n);
  const struct stk_shard *sh = &ds->shards[si];
  /* A remote Megatron .bin is never staged whole: its samples are read
   * through the cache's chunks (fetched, checked and kept per chunk). */
  int chunked = stk__shard_chunked(ds, si) && sh->idx, fd = -1;
  if (!chunked && (fd = cached_fd(ds, si)) < 0) return fd;
  uint64_t off = 0, len;
  int rc;
  if (sh->idx) {
    off = sh->idx[n - ds->rows[si].first].off;
    len = sh->idx[n - ds->rows[si].first].len;
  } else if ((rc = stk__fd_size(fd, &len)) != 0) {
    return stk__errf(ds->err, rc, "%s: cannot stat: %s", sh->path, stk_strerror(rc));
  }
  if ((rc = grow(buf, cap, len)) != 0)
    return stk__errf(ds->err, rc, "%s: offset %llu: cannot allocate %llu bytes for sample %llu",
                     sh->path, (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)n);
  if (chunked) {
    if ((rc = stk__shard_read(ds, si, off, *buf, len, NULL, ds->err)) != 0) return rc;
    out->index = n;
    return ds->fmt->parse(ds, sh, n - ds->rows[si].first, *buf, len, off, verify, out, ds->err);
  }
  rc = stk__pread_full(fd, *buf, (size_t)len, off);
  if (rc == STK_ETRUNC)
    return stk__errf(ds->err, rc, "%s: offset %llu: file ends inside sample %llu (%llu bytes)",
                     sh->path, (unsigned long long)off, (unsigned long long)n,
                     (unsigned long long)len);
  if (rc)
    return stk__errf(ds->err, rc, "%s: offset %llu: read failed: %s", sh->path,
                     (unsigned long long)off, stk_strerror(rc));
  out->index = n;
  return ds->fmt->parse(ds, sh, n - ds->rows[si].first, *buf, len, off, verify, out, ds->err);
}

int stk_dataset_read(struct stk_dataset *ds, uint64_t n, int verify, uint8_t **buf, size_t *cap,
                     struct stk_sample *out) {
  if (n >= ds->nsamples) count_all(ds);
  if (n >= ds->nsamples)
    return stk__errf(ds->err, STK_ERANGE, "%s: sample %llu out of range (%llu samples)", ds->root,
                     (unsigned long long)n, (unsigned long long)ds->nsamples);
  if (verify) stk__dataset_recheck(ds);
  pthread_mutex_lock(&ds->rd_mu);
  int rc = read_locked(ds, n, verify, buf, cap, out);
  pthread_mutex_unlock(&ds->rd_mu);
  return rc;
}
