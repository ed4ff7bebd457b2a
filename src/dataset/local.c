/* Opening a local dataset: a directory of shards (its format detected from
 * the files' extensions, dataset indexes and magic bytes, each declared by
 * the formats), a single shard file, or the shard paths a pattern or a
 * shard-list file named. A directory holding shards of several formats is
 * an error naming what was found, unless a format is chosen: reading one
 * and silently skipping the rest would be a confident wrong answer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_impl.h"

#define WALK_MAX_DEPTH 64
#define SNIFF_BYTES 512

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

/* Files next to shards that are never shards: any format's per-shard index
 * files, dataset indexes and JSON metadata (a stoker manifest). */
int stk__side_file(const char *name) {
  if (stk__has_ext(name, ".json")) return 1;
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->side_exts && stk__has_ext(name, stk_formats[i]->side_exts)) return 1;
  return 0;
}

/* The format a directory of unrecognised files is read as: the first one
 * that takes a directory tree, one sample per file (plain files). */
static const struct stk_format_ops *tree_format(void) {
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->caps & STK_FMT_TREE) return stk_formats[i];
  return NULL;
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
 * except DALI .idx files and JSON metadata. For formats whose shards may
 * sit in class folders (STK_FMT_CLASS_DIRS), the first-level folders' too,
 * labelled by folder: its number when every folder is named by one (as
 * stoker gen writes them, so a class with no sample shifts no other label),
 * else its place in name order (as DatasetFolder labels them). */
struct skipped {
  size_t n;
  char example[128];
};

static int add_dir_shards(struct stk_dataset *ds, const char *dir, const struct ent *v, size_t n,
                          int32_t label, struct skipped *sk, char *err) {
  int any = 0, rc = 0;
  for (size_t i = 0; i < n; i++) any |= !v[i].dir && stk__has_ext(v[i].name, ds->fmt->exts);
  for (size_t i = 0; i < n && !rc; i++) {
    if (v[i].dir) continue;
    if (any ? !stk__has_ext(v[i].name, ds->fmt->exts) : stk__side_file(v[i].name)) {
      if (!stk__side_file(v[i].name) && !sk->n++)
        snprintf(sk->example, sizeof sk->example, "%s%s%s", label < 0 ? "" : dir,
                 label < 0 ? "" : "/", v[i].name);
      continue;
    }
    char *p = path_join(dir, v[i].name);
    rc = p ? stk__dataset_add_shard(ds, p, label) : STK_ENOMEM;
    if (rc) stk__errf(err, rc, "out of memory listing %s", dir);
    free(p);
  }
  return rc;
}

static int numbered(const char *name) {
  size_t l = strlen(name);
  return l > 0 && l <= 9 && strspn(name, "0123456789") == l;
}

/* Shards of the format in the subfolders of dir (v) that are not read:
 * counted into *nested with the first as an example, so that a folder
 * whose shards sit deeper is never read as a smaller dataset silently. */
static void note_nested(struct stk_dataset *ds, const char *dir, const struct ent *v, size_t n,
                        struct skipped *nested) {
  for (size_t i = 0; i < n; i++) {
    if (!v[i].dir) continue;
    char *p = path_join(dir, v[i].name);
    struct ent *w = NULL;
    size_t m = 0;
    char e2[STK_ERRMSG_MAX];
    if (p && read_dir_sorted(p, &w, &m, e2) == 0)
      for (size_t k = 0; k < m; k++)
        if (!w[k].dir && stk__has_ext(w[k].name, ds->fmt->exts) && !nested->n++)
          snprintf(nested->example, sizeof nested->example, "%s/%s", p, w[k].name);
    ents_free(w, m);
    free(p);
  }
}

static int walk_shards(struct stk_dataset *ds, const char *dir, char *err) {
  struct ent *v;
  size_t n;
  int rc = read_dir_sorted(dir, &v, &n, err);
  if (rc) return rc;
  struct skipped sk = {0, ""}, nested = {0, ""};
  rc = add_dir_shards(ds, dir, v, n, -1, &sk, err);
  if (!(ds->fmt->caps & STK_FMT_CLASS_DIRS)) note_nested(ds, dir, v, n, &nested);
  if (ds->fmt->caps & STK_FMT_CLASS_DIRS) {
    int all_numbered = 1;
    for (size_t i = 0; i < n; i++) all_numbered &= !v[i].dir || numbered(v[i].name);
    int32_t next = 0;
    for (size_t i = 0; i < n && !rc; i++) {
      if (!v[i].dir) continue;
      int32_t label = all_numbered ? (int32_t)atol(v[i].name) : next;
      next++;
      char *p = path_join(dir, v[i].name);
      struct ent *w = NULL;
      size_t m = 0;
      rc = p ? read_dir_sorted(p, &w, &m, err) : stk__errf(err, STK_ENOMEM, "out of memory");
      if (!rc) rc = add_dir_shards(ds, p, w, m, label, &sk, err);
      if (!rc) note_nested(ds, p, w, m, &nested);
      ents_free(w, m);
      free(p);
    }
  }
  /* Never silently: files that are not shards of the format are named. */
  if (!rc && sk.n)
    stk_log(STK_LOG_WARN, "%s: %zu file%s that %s not %s shards left out (%s%s)", dir, sk.n,
            sk.n == 1 ? "" : "s", sk.n == 1 ? "is" : "are", ds->fmt->name, sk.example,
            sk.n > 1 ? ", ..." : "");
  if (!rc && nested.n)
    stk_log(STK_LOG_WARN, STK__NESTED_FMT, dir, nested.n, ds->fmt->name, nested.n == 1 ? "" : "s",
            nested.example, nested.n > 1 ? ", ..." : "");
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
    if (!rc && (ds->fmt->caps & STK_FMT_TREE)) ds->shards[0].count = 1;
    return rc;
  }
  if (ds->fmt->caps & STK_FMT_TREE) return walk_files(ds, root, 0, -1, err);
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
  return n > 0 ? stk__format_sniff(b, (size_t)n) : NULL;
}

/* The format whose dataset index file is in dir, if any. */
static const struct stk_format_ops *dir_index_format(const char *dir) {
  for (int i = 0; stk_formats[i]; i++) {
    if (!stk_formats[i]->dir_index) continue;
    char *p = path_join(dir, stk_formats[i]->dir_index);
    int has = p && access(p, F_OK) == 0;
    free(p);
    if (has) return stk_formats[i];
  }
  return NULL;
}

#define FMT_MAX 32

/* The first extension of a format's list (".bin" of ".bin"), into out. */
static void first_ext(const struct stk_format_ops *f, char *out, size_t n) {
  size_t l = strcspn(f->exts, " ");
  snprintf(out, n, "%.*s", (int)l, f->exts);
}

/* PREFIX + ext for a path that is PREFIX + first ext of f (or PREFIX). */
static char *swap_ext(const struct stk_format_ops *f, const char *path, const char *ext) {
  char own[32];
  first_ext(f, own, sizeof own);
  size_t n = strlen(path), ol = strlen(own);
  if (n > ol && !strcmp(path + n - ol, own)) n -= ol;
  char *p = malloc(n + strlen(ext) + 1);
  if (p) sprintf(p, "%.*s%s", (int)n, path, ext);
  return p;
}

/* The format that claims the file dir/name (dir NULL: name is a path) by
 * its extension: a paired format's (Megatron's x.bin) only when its
 * companion (x.idx) is there too. */
static const struct stk_format_ops *by_ext_here(const char *dir, const char *name) {
  const char *b = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
  const struct stk_format_ops *f = stk__format_by_ext(b);
  for (int i = 0; !f && stk_formats[i]; i++) {
    const struct stk_format_ops *g = stk_formats[i];
    char own[32];
    if (!g->pair_ext) continue;
    first_ext(g, own, sizeof own);
    if (!stk__has_ext(b, own)) continue;
    char *full = dir ? path_join(dir, name) : strdup(name);
    char *other = full ? swap_ext(g, full, g->pair_ext) : NULL;
    if (other && access(other, F_OK) == 0) f = g;
    free(other);
    free(full);
  }
  return f;
}

/* A dataset named by a prefix that is no file itself (Megatron's corpus
 * for corpus.bin and corpus.idx): the paired format whose two files are
 * there, else NULL. */
static const struct stk_format_ops *by_prefix(const char *root) {
  for (int i = 0; stk_formats[i]; i++) {
    const struct stk_format_ops *g = stk_formats[i];
    if (!g->pair_ext) continue;
    char own[32];
    first_ext(g, own, sizeof own);
    char *a = malloc(strlen(root) + strlen(own) + 1), *b = swap_ext(g, root, g->pair_ext);
    if (a) sprintf(a, "%s%s", root, own);
    int both = a && b && access(a, F_OK) == 0 && access(b, F_OK) == 0;
    free(a);
    free(b);
    if (both) return g;
  }
  return NULL;
}

/* Per format, how many of names[0..n) carry its extensions (names in dir,
 * or paths when dir is NULL); the format with the most in *best. Returns
 * how many formats have any. */
static int count_exts(const char *dir, const char *const *names, size_t n, size_t *count,
                      const struct stk_format_ops **best) {
  memset(count, 0, FMT_MAX * sizeof *count);
  for (size_t i = 0; i < n; i++) {
    if (!names[i]) continue;
    const struct stk_format_ops *f = by_ext_here(dir, names[i]);
    for (int k = 0; f && stk_formats[k] && k < FMT_MAX; k++)
      if (stk_formats[k] == f) count[k]++;
  }
  int kinds = 0;
  size_t top = 0;
  *best = NULL;
  for (int k = 0; stk_formats[k] && k < FMT_MAX; k++) {
    kinds += count[k] > 0;
    if (count[k] > top) top = count[k], *best = stk_formats[k];
  }
  return kinds;
}

/* "3 tfrecord (.tfrecord), 2 wds (.tar)" into out. */
static void describe_mix(const size_t *count, char *out, size_t n) {
  size_t o = 0;
  out[0] = 0;
  for (int k = 0; stk_formats[k] && k < FMT_MAX && o < n; k++)
    if (count[k])
      o += (size_t)snprintf(out + o, n - o, "%s%zu %s (%s)", o ? ", " : "", count[k],
                            stk_formats[k]->name, stk_formats[k]->exts);
}

static int mix_error(const char *where, const size_t *count, char *err) {
  char mix[512];
  describe_mix(count, mix, sizeof mix);
  return stk__errf(err, STK_EFORMAT, "%s: shards of several formats: %s; choose one with --format",
                   where, mix);
}

/* A directory's format: the one whose dataset index is there (MDS
 * index.json), else the one its files' extensions name (an error if they
 * name several), else what the first file's bytes look like, else plain
 * files (an ImageFolder tree). */
/* Only class folders at the top: the format their first folder's files
 * name by extension, when it is one whose shards sit in class folders
 * (npy written with labels); else fallback (plain files, ImageFolder). */
static const struct stk_format_ops *class_dirs_format(const char *root, const struct ent *v,
                                                      size_t n, const struct stk_format_ops *fallback) {
  for (size_t i = 0; i < n; i++) {
    if (!v[i].dir) continue;
    char *p = path_join(root, v[i].name);
    struct ent *w = NULL;
    size_t m = 0;
    char err[STK_ERRMSG_MAX];
    const struct stk_format_ops *f = NULL;
    if (p && read_dir_sorted(p, &w, &m, err) == 0)
      for (size_t k = 0; k < m && !f; k++)
        if (!w[k].dir && !stk__side_file(w[k].name)) f = stk__format_by_ext(w[k].name);
    ents_free(w, m);
    free(p);
    return f && (f->caps & STK_FMT_CLASS_DIRS) ? f : fallback;
  }
  return fallback;
}

static int detect_dir(const char *root, const struct stk_format_ops **out, char *err) {
  if ((*out = dir_index_format(root)) != NULL) return 0;
  struct ent *v;
  size_t n;
  int rc = read_dir_sorted(root, &v, &n, err);
  if (rc) return rc;
  if (n == 0) {
    free(v);
    return stk__errf(err, STK_EEMPTY, "%s: empty dataset: the directory holds no files", root);
  }
  const char **names = calloc(n, sizeof *names);
  if (!names) {
    ents_free(v, n);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  const char *first_file = NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i].dir) continue;
    names[i] = v[i].name;
    if (!first_file && !stk__side_file(v[i].name)) first_file = v[i].name;
  }
  size_t count[FMT_MAX];
  const struct stk_format_ops *best;
  int kinds = count_exts(root, names, n, count, &best);
  free(names);
  if (kinds > 1) rc = mix_error(root, count, err);
  *out = best ? best : tree_format();
  if (!rc && !best && first_file) {
    char *p = path_join(root, first_file);
    const struct stk_format_ops *s = p ? sniff(p) : NULL;
    free(p);
    if (s) *out = s;
  }
  if (!rc && !best && !first_file) *out = class_dirs_format(root, v, n, *out);
  ents_free(v, n);
  return rc;
}

static int find_format(const char *name, const struct stk_format_ops **out, char *err) {
  if ((*out = stk__format_find(name)) != NULL) return 0;
  return stk__errf(err, STK_EINVAL, "unknown format '%s' (known: %s)", name, stk__format_names());
}

static int detect(const char *root, const struct stk_dataset_opts *opts,
                  const struct stk_format_ops **out, char *err) {
  if (opts && opts->format && *opts->format) return find_format(opts->format, out, err);
  struct stat st;
  if (stat(root, &st) != 0 && errno == ENOENT && (*out = by_prefix(root)) != NULL) return 0;
  int dir;
  int rc = is_dir(root, &dir, err);
  if (rc) return rc;
  if (dir) return detect_dir(root, out, err);
  const char *base = strrchr(root, '/') ? strrchr(root, '/') + 1 : root;
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->dir_index && !strcmp(base, stk_formats[i]->dir_index)) {
      *out = stk_formats[i];
      return 0;
    }
  if (!(*out = by_ext_here(NULL, root)) && !(*out = sniff(root))) *out = tree_format();
  return 0;
}

/* Shards named one by one (a pattern, a list): their format from the
 * extensions (one only), else the first one's bytes. */
static int detect_named(const char *where, const struct stk__names *names,
                        const struct stk_dataset_opts *opts, const struct stk_format_ops **out,
                        char *err) {
  if (opts && opts->format && *opts->format) return find_format(opts->format, out, err);
  size_t count[FMT_MAX];
  const struct stk_format_ops *best;
  if (count_exts(NULL, (const char *const *)names->v, names->n, count, &best) > 1)
    return mix_error(where, count, err); /* the list or pattern the user named */
  if (best) {
    *out = best;
    return 0;
  }
  int dir = 0;
  int rc = is_dir(names->v[0], &dir, err);
  if (rc) return rc;
  if (!(*out = dir ? NULL : sniff(names->v[0]))) *out = tree_format();
  return 0;
}

static int empty_err(struct stk_dataset *ds) {
  const char *ext = ds->fmt->exts && *ds->fmt->exts ? ds->fmt->exts : NULL;
  return stk__errf(ds->err, STK_EEMPTY, "%s: empty dataset: no %s shards found%s%s%s", ds->root,
                   ds->fmt->name, ext ? " (looked for " : "", ext ? ext : "", ext ? ")" : "");
}

int stk__dataset_open_local(struct stk_dataset *ds, const struct stk__names *names,
                            const struct stk_dataset_opts *opts, char *err) {
  int rc;
  if (names) {
    rc = detect_named(ds->root, names, opts, &ds->fmt, err);
    for (size_t i = 0; !rc && i < names->n; i++) {
      int dir;
      if ((rc = is_dir(names->v[i], &dir, err)) != 0) break;
      if (dir) {
        rc = stk__errf(err, STK_EINVAL,
                       "%s: a directory; a pattern or a shard list names "
                       "shard files",
                       names->v[i]);
        break;
      }
      if ((rc = stk__dataset_add_shard(ds, names->v[i], -1)) != 0) {
        stk__errf(err, rc, "out of memory");
        break;
      }
      if (ds->fmt->caps & STK_FMT_TREE) ds->shards[ds->nshards - 1].count = 1;
    }
  } else {
    rc = detect(ds->root, opts, &ds->fmt, err);
    if (!rc) rc = ds->fmt->list ? ds->fmt->list(ds, ds->root) : list_default(ds, ds->root, err);
  }
  if (!rc && ds->nshards == 0) rc = empty_err(ds);
  if (!rc) rc = stk__dataset_index_all(ds, opts ? opts->index_threads : 0, err);
  return rc;
}
