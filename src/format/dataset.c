/* Datasets: the format table, format detection, the generic directory walk,
 * parallel shard indexing and synchronous sample reads. Backends only frame
 * bytes; everything about files, threads and global sample numbers is here. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format_impl.h"
#include "../cache/cache_impl.h"

const struct stk_format_ops *const stk_formats[] = {
    &stk__fmt_tfrecord, &stk__fmt_wds, &stk__fmt_npy, &stk__fmt_npz,
    &stk__fmt_mds,      &stk__fmt_files, NULL,
};

#define WALK_MAX_DEPTH 64
#define SNIFF_BYTES 512

int stk_format_info(int i, const char **name, unsigned *caps, const char **desc) {
  if (i < 0 || i >= (int)STK__ARRAY_LEN(stk_formats) - 1) return STK_ENOENT;
  if (name) *name = stk_formats[i]->name;
  if (caps) *caps = stk_formats[i]->caps;
  if (desc) *desc = stk_formats[i]->desc;
  return 0;
}

const struct stk_format_ops *stk__format_find(const char *name) {
  for (int i = 0; name && stk_formats[i]; i++)
    if (!strcmp(stk_formats[i]->name, name)) return stk_formats[i];
  return NULL;
}

/* ---- helpers shared with the backends ---------------------------------- */

int stk__fd_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return stk__from_errno(errno);
  *size = (uint64_t)st.st_size;
  return 0;
}

int stk__idx_push(struct stk_index_entry **idx, uint64_t *cap, uint64_t n, uint64_t off,
                  uint64_t len) {
  if (n >= *cap) {
    uint64_t nc = *cap ? *cap * 2 : 64;
    if (nc > SIZE_MAX / sizeof **idx) return STK_ENOMEM;
    struct stk_index_entry *p = realloc(*idx, (size_t)nc * sizeof *p);
    if (!p) return STK_ENOMEM;
    *idx = p;
    *cap = nc;
  }
  (*idx)[n].off = off;
  (*idx)[n].len = len;
  return 0;
}

int stk__idx_finish(struct stk_shard *sh, struct stk_index_entry *idx, uint64_t n, uint64_t cap,
                    int rc) {
  if (rc) {
    free(idx);
    return rc;
  }
  if (n && n < cap) { /* give back the doubling slack: many shards, many samples */
    struct stk_index_entry *fit = realloc(idx, (size_t)n * sizeof *idx);
    if (fit) idx = fit;
  }
  sh->idx = idx;
  sh->count = n;
  return 0;
}

void stk__sample_reset(struct stk_sample *out, const struct stk_shard *sh) {
  out->label = sh ? sh->label : -1;
  out->key[0] = 0;
  out->nfields = 0;
}

int stk__sample_add(struct stk_sample *out, const char *name, size_t name_len,
                    const uint8_t *data, uint64_t len) {
  if (out->nfields >= STK_MAX_FIELDS) return STK_EFORMAT;
  struct stk_field *f = &out->fields[out->nfields++];
  size_t n = STK__MIN(name_len, sizeof f->name - 1);
  memcpy(f->name, name, n);
  f->name[n] = 0;
  f->data = data;
  f->len = f->raw_len = len;
  f->encoding = STK_ENC_NONE;
  return 0;
}

void stk__sample_key(struct stk_sample *out, const char *key, size_t n) {
  n = STK__MIN(n, sizeof out->key - 1);
  memcpy(out->key, key, n);
  out->key[n] = 0;
}

int stk__has_label_field(const struct stk_sample *s) {
  for (int i = 0; i < s->nfields; i++) {
    const char *n = s->fields[i].name;
    if (!strcmp(n, "cls") || !strcmp(n, "label") || !strcmp(n, "class") || !strcmp(n, "y"))
      return 1;
  }
  return 0;
}

int32_t stk__parse_label(const uint8_t *p, uint64_t n) {
  while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == ' ' || p[n - 1] == '\r')) n--;
  if (n == 0 || n > 9) return -1;
  int32_t v = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

int stk__win_init(struct stk__win *w, int fd, uint64_t size, size_t cap) {
  memset(w, 0, sizeof *w);
  w->fd = fd;
  w->size = size;
  w->cap = cap;
  w->buf = malloc(cap);
  return w->buf ? 0 : STK_ENOMEM;
}

int stk__win_get(struct stk__win *w, uint64_t off, size_t len, const uint8_t **p) {
  if (len > w->cap) return STK_EINVAL;
  if (off > w->size || w->size - off < len) return STK_ETRUNC;
  if (off >= w->off && off - w->off + len <= w->len) {
    *p = w->buf + (off - w->off);
    return 0;
  }
  size_t want = (size_t)STK__MIN((uint64_t)w->cap, w->size - off);
  int rc = stk__pread_full(w->fd, w->buf, want, off);
  if (rc) {
    w->len = 0;
    return rc;
  }
  w->off = off;
  w->len = want;
  *p = w->buf;
  return 0;
}

void stk__win_free(struct stk__win *w) {
  free(w->buf);
  w->buf = NULL;
}

/* ---- listing ----------------------------------------------------------- */

struct ent {
  char *name;
  int dir;
};

static int ent_cmp(const void *a, const void *b) {
  return strcmp(((const struct ent *)a)->name, ((const struct ent *)b)->name);
}

static void ents_free(struct ent *e, size_t n) {
  for (size_t i = 0; i < n; i++) free(e[i].name);
  free(e);
}

/* Kind of a directory entry from d_type, falling back to a stat only where
 * the file system does not say (DT_UNKNOWN) or for symlinks: 1 file, 2 dir,
 * 0 other. */
static int ent_kind(DIR *d, const struct dirent *de) {
  if (de->d_type == DT_REG) return 1;
  if (de->d_type == DT_DIR) return 2;
  if (de->d_type != DT_UNKNOWN && de->d_type != DT_LNK) return 0;
  struct stat st;
  if (fstatat(dirfd(d), de->d_name, &st, 0) != 0) return 0;
  return S_ISREG(st.st_mode) ? 1 : S_ISDIR(st.st_mode) ? 2 : 0;
}

/* The visible (not dot-named) files and directories of dir, sorted by name. */
static int read_dir_sorted(const char *dir, struct ent **out, size_t *nout, char *err) {
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    return stk__errf(err, stk__from_errno(e), "%s: cannot open directory: %s", dir, strerror(e));
  }
  struct ent *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    int k = ent_kind(d, de);
    if (!k) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      struct ent *nv = realloc(v, cap * sizeof *nv);
      if (!nv) {
        rc = STK_ENOMEM;
        break;
      }
      v = nv;
    }
    v[n].name = strdup(de->d_name);
    v[n].dir = k == 2;
    if (!v[n++].name) {
      rc = STK_ENOMEM;
      break;
    }
  }
  closedir(d);
  if (rc) {
    ents_free(v, n);
    return stk__errf(err, rc, "%s: out of memory listing the directory", dir);
  }
  if (n) qsort(v, n, sizeof *v, ent_cmp);
  *out = v;
  *nout = n;
  return 0;
}

static char *path_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *p = malloc(la + lb + 2);
  if (!p) return NULL;
  memcpy(p, a, la);
  size_t o = la;
  if (la && a[la - 1] != '/') p[o++] = '/';
  memcpy(p + o, b, lb + 1);
  return p;
}

/* Append a shard (path copied); shards grow by doubling at powers of two. */
int stk__dataset_add_shard(struct stk_dataset *ds, const char *path, int32_t label) {
  size_t n = ds->nshards;
  if ((n & (n - 1)) == 0) {
    size_t nc = n < 16 ? 16 : n * 2;
    struct stk_shard *s = realloc(ds->shards, nc * sizeof *s);
    if (!s) return STK_ENOMEM;
    ds->shards = s;
  }
  struct stk_shard *sh = &ds->shards[n];
  memset(sh, 0, sizeof *sh);
  sh->path = strdup(path);
  if (!sh->path) return STK_ENOMEM;
  sh->label = label;
  sh->file_bytes = UINT64_MAX;
  ds->nshards = n + 1;
  return 0;
}

int stk__has_ext(const char *name, const char *exts) {
  size_t ln = strlen(name);
  for (const char *e = exts; e && *e;) {
    while (*e == ' ') e++;
    size_t le = strcspn(e, " ");
    if (le && ln > le && !memcmp(name + ln - le, e, le)) return 1;
    e += le;
  }
  return 0;
}

/* Plain files: every file below dir, recursively, in sorted order; the
 * label is fixed by the first-level subfolder (ImageFolder). */
static int walk_files(struct stk_dataset *ds, const char *dir, int depth, int32_t label,
                      char *err) {
  if (depth > WALK_MAX_DEPTH)
    return stk__errf(err, STK_EFORMAT, "%s: directories nested deeper than %d", dir,
                     WALK_MAX_DEPTH);
  struct ent *v;
  size_t n;
  int rc = read_dir_sorted(dir, &v, &n, err);
  if (rc) return rc;
  int32_t next_label = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    char *p = path_join(dir, v[i].name);
    if (!p) {
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
      break;
    }
    if (v[i].dir)
      rc = walk_files(ds, p, depth + 1, depth == 0 ? next_label++ : label, err);
    else if ((rc = stk__dataset_add_shard(ds, p, label)) == 0)
      ds->shards[ds->nshards - 1].count = 1; /* one sample per file, unstat'ed */
    if (rc == STK_ENOMEM) stk__errf(err, rc, "out of memory listing %s", dir);
    free(p);
  }
  ents_free(v, n);
  return rc;
}

/* Shard formats: the files of dir whose names end in one of the format's
 * extensions; if none does (a format given by name or sniffed), every file
 * except DALI .idx files and JSON metadata. */
static int walk_shards(struct stk_dataset *ds, const char *dir, char *err) {
  struct ent *v;
  size_t n;
  int rc = read_dir_sorted(dir, &v, &n, err);
  if (rc) return rc;
  int any = 0;
  for (size_t i = 0; i < n; i++) any |= !v[i].dir && stk__has_ext(v[i].name, ds->fmt->exts);
  for (size_t i = 0; i < n && !rc; i++) {
    if (v[i].dir) continue;
    if (any ? !stk__has_ext(v[i].name, ds->fmt->exts) : stk__has_ext(v[i].name, ".idx .json")) continue;
    char *p = path_join(dir, v[i].name);
    rc = p ? stk__dataset_add_shard(ds, p, -1) : STK_ENOMEM;
    if (rc) stk__errf(err, rc, "out of memory listing %s", dir);
    free(p);
  }
  ents_free(v, n);
  return rc;
}

static int is_dir(const char *path, int *dir, char *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    return stk__errf(err, stk__from_errno(e), "%s: %s", path, strerror(e));
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    return stk__errf(err, STK_EINVAL, "%s: not a file or directory", path);
  *dir = S_ISDIR(st.st_mode);
  return 0;
}

static int list_default(struct stk_dataset *ds, const char *root, char *err) {
  int dir;
  int rc = is_dir(root, &dir, err);
  if (rc) return rc;
  if (!dir) {
    rc = stk__dataset_add_shard(ds, root, -1);
    if (!rc && ds->fmt == &stk__fmt_files) ds->shards[0].count = 1;
    return rc;
  }
  if (ds->fmt == &stk__fmt_files) return walk_files(ds, root, 0, -1, err);
  return walk_shards(ds, root, err);
}

/* ---- detection --------------------------------------------------------- */

/* Guess a format from a file's first bytes; NULL if none fits. */
static const struct stk_format_ops *sniff(const char *path) {
  uint8_t b[SNIFF_BYTES];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  ssize_t n = pread(fd, b, sizeof b, 0);
  close(fd);
  if (n >= 6 && !memcmp(b, "\x93NUMPY", 6)) return &stk__fmt_npy;
  if (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) return &stk__fmt_npz;
  if (n >= 262 && !memcmp(b + 257, "ustar", 5)) return &stk__fmt_wds;
  if (n >= 16 && stk_crc32c_mask(stk_crc32c(0, b, 8)) == stk__ld32(b + 8))
    return &stk__fmt_tfrecord;
  return NULL;
}

static const struct stk_format_ops *by_ext(const char *name) {
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->exts && *stk_formats[i]->exts && stk__has_ext(name, stk_formats[i]->exts))
      return stk_formats[i];
  return NULL;
}

/* A directory's format: MDS if it has index.json, else the extension most of
 * its files carry, else what the first file's bytes look like, else plain
 * files (an ImageFolder tree). */
static int detect_dir(const char *root, const struct stk_format_ops **out, char *err) {
  char *ij = path_join(root, "index.json");
  if (!ij) return STK_ENOMEM;
  int has_index = access(ij, F_OK) == 0;
  free(ij);
  if (has_index) {
    *out = &stk__fmt_mds;
    return 0;
  }
  struct ent *v;
  size_t n;
  int rc = read_dir_sorted(root, &v, &n, err);
  if (rc) return rc;
  if (n == 0) {
    free(v);
    return stk__errf(err, STK_EEMPTY, "%s: empty dataset: the directory holds no files", root);
  }
  size_t count[16] = {0}, best = 0;
  const char *first_file = NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i].dir) continue;
    if (!first_file && !stk__has_ext(v[i].name, ".idx .json")) first_file = v[i].name;
    for (int k = 0; stk_formats[k] && k < 16; k++)
      if (stk_formats[k]->exts && *stk_formats[k]->exts &&
          stk__has_ext(v[i].name, stk_formats[k]->exts))
        count[k]++;
  }
  *out = &stk__fmt_files;
  for (int k = 0; stk_formats[k] && k < 16; k++)
    if (count[k] > best) best = count[k], *out = stk_formats[k];
  if (!best && first_file) {
    char *p = path_join(root, first_file);
    const struct stk_format_ops *s = p ? sniff(p) : NULL;
    free(p);
    if (s) *out = s;
  }
  ents_free(v, n);
  return 0;
}

static int detect(const char *root, const struct stk_dataset_opts *opts,
                  const struct stk_format_ops **out, char *err) {
  if (opts && opts->format && *opts->format) {
    *out = stk__format_find(opts->format);
    if (*out) return 0;
    return stk__errf(err, STK_EINVAL,
                     "unknown format '%s' (known: tfrecord, wds, npy, npz, mds, files)",
                     opts->format);
  }
  int dir;
  int rc = is_dir(root, &dir, err);
  if (rc) return rc;
  if (dir) return detect_dir(root, out, err);
  const char *base = strrchr(root, '/') ? strrchr(root, '/') + 1 : root;
  if (!strcmp(base, "index.json")) *out = &stk__fmt_mds;
  else if (!(*out = by_ext(base)) && !(*out = sniff(root)))
    *out = &stk__fmt_files;
  return 0;
}

/* ---- indexing ---------------------------------------------------------- */

static int open_err(const char *path, int e, char *err) {
  return stk__errf(err, stk__from_errno(e), "%s: cannot open: %s", path, strerror(e));
}

static int index_one(struct stk_dataset *ds, struct stk_shard *sh, char *err) {
  if (!ds->fmt->index) return 0;
  int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_err(sh->path, errno, err);
  int rc = ds->fmt->index(ds, sh, fd, err);
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
    int rc = index_one(j->ds, &j->ds->shards[i], err);
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

static int index_all(struct stk_dataset *ds, int threads, char *err) {
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

static int number_samples(struct stk_dataset *ds, const char *root, char *err) {
  uint64_t n = 0;
  for (size_t i = 0; i < ds->nshards; i++) {
    ds->shards[i].first = n;
    if (ds->shards[i].count > UINT64_MAX - n)
      return stk__errf(err, STK_ERANGE, "%s: too many samples", root);
    n += ds->shards[i].count;
  }
  ds->nsamples = n;
  if (n == 0)
    return stk__errf(err, STK_EEMPTY, "%s: empty dataset: no samples in %zu %s shard%s", root,
                     ds->nshards, ds->fmt->name, ds->nshards == 1 ? "" : "s");
  return 0;
}

/* ---- open / close ------------------------------------------------------- */

static struct stk_dataset *ds_new(const char *root) {
  struct stk_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return NULL;
  ds->root = strdup(root);
  size_t l = ds->root ? strlen(ds->root) : 0;
  while (l > 1 && ds->root[l - 1] == '/') ds->root[--l] = 0;
  pthread_mutex_init(&ds->rd_mu, NULL);
  pthread_mutex_init(&ds->ix_mu, NULL);
  ds->rd_fd = -1;
  if (!ds->root) {
    free(ds);
    return NULL;
  }
  return ds;
}

static int empty_err(struct stk_dataset *ds) {
  const char *ext = ds->fmt->exts && *ds->fmt->exts ? ds->fmt->exts : NULL;
  return stk__errf(ds->err, STK_EEMPTY, "%s: empty dataset: no %s shards found%s%s%s", ds->root,
                   ds->fmt->name, ext ? " (looked for " : "", ext ? ext : "", ext ? ")" : "");
}

int stk_dataset_open(struct stk_dataset **out, const char *path,
                     const struct stk_dataset_opts *opts, char *errmsg) {
  if (!out || !path || !*path) return stk__errf(errmsg, STK_EINVAL, "no dataset path given");
  /* file:// without cache tiers is just a path. */
  const struct stk_cache_opts *co = opts ? opts->cache : NULL;
  int tiers = co && (co->dir || co->ram_bytes);
  if (!tiers && !strncmp(path, "file://", 7) && path[7]) path += 7;
  int remote = (co && co->dir) || stk__origin_is_url(path);
  struct stk_dataset *ds = ds_new(path);
  if (!ds) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  int rc;
  if (remote) {
    rc = stk__dataset_open_remote(ds, path, opts, ds->err);
  } else {
    rc = detect(ds->root, opts, &ds->fmt, ds->err);
    if (!rc) rc = ds->fmt->list ? ds->fmt->list(ds, ds->root) : list_default(ds, ds->root, ds->err);
    if (!rc && ds->nshards == 0) rc = empty_err(ds);
    if (!rc) rc = index_all(ds, opts ? opts->index_threads : 0, ds->err);
  }
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
  if (ds->rd_fd >= 0) stk__shard_fd_done(ds, ds->rd_shard, ds->rd_fd);
  ds->rd_fd = -1;
  stk__cache_close(ds->cache);
  pthread_mutex_destroy(&ds->ix_mu);
  if (ds->fmt && ds->fmt->free_state) ds->fmt->free_state(ds);
  for (size_t i = 0; i < ds->nshards; i++) {
    free(ds->shards[i].path);
    free(ds->shards[i].idx);
  }
  pthread_mutex_destroy(&ds->rd_mu);
  free(ds->shards);
  free(ds->root);
  free(ds);
}

uint64_t stk_dataset_num_samples(const struct stk_dataset *ds) { return ds->nsamples; }
size_t stk_dataset_num_shards(const struct stk_dataset *ds) { return ds->nshards; }
const char *stk_dataset_format(const struct stk_dataset *ds) { return ds->fmt->name; }
unsigned stk_dataset_caps(const struct stk_dataset *ds) { return ds->fmt->caps; }
const char *stk_dataset_errmsg(const struct stk_dataset *ds) { return ds->err; }

int stk_dataset_shard_info(const struct stk_dataset *ds, size_t i, struct stk_shard_info *out) {
  if (i >= ds->nshards) return STK_ENOENT;
  const struct stk_shard *sh = &ds->shards[i];
  out->path = sh->path;
  out->first = sh->first;
  out->count = sh->count;
  out->bytes = 0;
  for (uint64_t k = 0; sh->idx && k < sh->count; k++) out->bytes += sh->idx[k].len;
  if (!sh->idx && ds->cache) out->bytes = stk__shard_file_size((struct stk_dataset *)ds, i);
  return 0;
}

int stk_dataset_sample_bytes(struct stk_dataset *ds, uint64_t n, uint64_t *bytes) {
  if (n >= ds->nsamples)
    return stk__errf(ds->err, STK_ERANGE, "%s: sample %llu out of range (%llu samples)",
                     ds->root, (unsigned long long)n, (unsigned long long)ds->nsamples);
  size_t si = stk__dataset_shard_of(ds, n);
  const struct stk_shard *sh = &ds->shards[si];
  if (__atomic_load_n(&sh->pending, __ATOMIC_ACQUIRE)) { /* stage it to index it */
    int fd, rc = stk__shard_fd(ds, si, &fd, NULL, ds->err);
    if (rc) return rc;
    stk__shard_fd_done(ds, si, fd);
  }
  if (sh->idx) {
    *bytes = sh->idx[n - sh->first].len;
    return 0;
  }
  if (ds->cache) {
    *bytes = stk__shard_file_size(ds, si);
    return 0;
  }
  struct stat st;
  if (stat(sh->path, &st) != 0) {
    int e = errno;
    return stk__errf(ds->err, stk__from_errno(e), "%s: %s", sh->path, strerror(e));
  }
  *bytes = (uint64_t)st.st_size;
  return 0;
}

size_t stk__dataset_shard_of(const struct stk_dataset *ds, uint64_t n) {
  size_t lo = 0, hi = ds->nshards; /* last shard with first <= n */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (ds->shards[mid].first <= n) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* ---- synchronous reads ------------------------------------------------- */

static int cached_fd(struct stk_dataset *ds, size_t si) {
  if (ds->rd_fd >= 0 && ds->rd_shard == si) return ds->rd_fd;
  if (ds->rd_fd >= 0) stk__shard_fd_done(ds, ds->rd_shard, ds->rd_fd);
  ds->rd_fd = -1;
  int fd, rc = stk__shard_fd(ds, si, &fd, NULL, ds->err);
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

static int read_locked(struct stk_dataset *ds, uint64_t n, int verify, uint8_t **buf,
                       size_t *cap, struct stk_sample *out) {
  size_t si = stk__dataset_shard_of(ds, n);
  const struct stk_shard *sh = &ds->shards[si];
  int fd = cached_fd(ds, si);
  if (fd < 0) return fd;
  uint64_t off = 0, len;
  int rc;
  if (sh->idx) {
    off = sh->idx[n - sh->first].off;
    len = sh->idx[n - sh->first].len;
  } else if ((rc = stk__fd_size(fd, &len)) != 0) {
    return stk__errf(ds->err, rc, "%s: cannot stat: %s", sh->path, stk_strerror(rc));
  }
  if ((rc = grow(buf, cap, len)) != 0)
    return stk__errf(ds->err, rc, "%s: offset %llu: cannot allocate %llu bytes for sample %llu",
                     sh->path, (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)n);
  rc = stk__pread_full(fd, *buf, (size_t)len, off);
  if (rc == STK_ETRUNC)
    return stk__errf(ds->err, rc, "%s: offset %llu: file ends inside sample %llu (%llu bytes)",
                     sh->path, (unsigned long long)off, (unsigned long long)n,
                     (unsigned long long)len);
  if (rc)
    return stk__errf(ds->err, rc, "%s: offset %llu: read failed: %s", sh->path,
                     (unsigned long long)off, stk_strerror(rc));
  out->index = n;
  return ds->fmt->parse(ds, sh, *buf, len, off, verify, out, ds->err);
}

int stk_dataset_read(struct stk_dataset *ds, uint64_t n, int verify, uint8_t **buf,
                     size_t *cap, struct stk_sample *out) {
  if (n >= ds->nsamples)
    return stk__errf(ds->err, STK_ERANGE, "%s: sample %llu out of range (%llu samples)",
                     ds->root, (unsigned long long)n, (unsigned long long)ds->nsamples);
  pthread_mutex_lock(&ds->rd_mu);
  int rc = read_locked(ds, n, verify, buf, cap, out);
  pthread_mutex_unlock(&ds->rd_mu);
  return rc;
}
