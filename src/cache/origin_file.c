/* The file origin: a directory on a local disk, NFS or a parallel file
 * system, named by a plain path or file:///abs/path. Objects are files
 * under it, opened relative to a descriptor of the root (so a later chdir
 * changes nothing). No retries: a local error is final. The "ETag" is
 * made of the size and modification time, like nginx's, so a rewritten
 * file reads as a new version. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "origin.h"

#define COPY_CHUNK (8u << 20) /* copy_file_range per call: a cancel is seen between */
#define BUF_CHUNK (1u << 20)  /* pread/pwrite fallback buffer */
#define MAX_DEPTH 64          /* directory levels list descends */

struct file_origin {
  struct stk_origin base;
  char *root; /* as given (decoded from a file URL), for messages */
  int dirfd;
  uint64_t n_requests, n_errors, n_missing, n_bytes; /* atomic */
};

static void count(uint64_t *c, uint64_t v) { __atomic_fetch_add(c, v, __ATOMIC_RELAXED); }

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 32;
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The path of a file URL, file:///abs or file://localhost/abs, with %XX
 * escapes decoded, into *path (malloc'ed). */
int stk__file_url_path(const char *url, char **path, char *err) {
  const char *p = url + 7; /* after "file://" */
  if (!strncasecmp(p, "localhost/", 10)) p += 9;
  if (*p != '/')
    return stk__errf(err, STK_EINVAL, "%s: a file URL needs an absolute path (file:///path)", url);
  char *out = malloc(strlen(p) + 1), *q = out;
  if (!out) return stk__errf(err, STK_ENOMEM, "out of memory");
  for (; *p; p++) {
    if (*p == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
      *q++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
      p += 2;
    } else if (*p == '?' || *p == '#') {
      break;
    } else {
      *q++ = *p;
    }
  }
  *q = 0;
  if (memchr(out, 0, (size_t)(q - out))) { /* %00 */
    free(out);
    return stk__errf(err, STK_EINVAL, "%s: NUL in a file URL", url);
  }
  *path = out;
  return 0;
}

static void file_close(struct stk_origin *o) {
  struct file_origin *fo = (struct file_origin *)o;
  if (!fo) return;
  if (fo->dirfd >= 0) close(fo->dirfd);
  free(fo->root);
  free(fo->base.url);
  free(fo);
}

static int file_open(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
                     char *err) {
  (void)o;
  struct file_origin *fo = calloc(1, sizeof *fo);
  if (!fo) return stk__errf(err, STK_ENOMEM, "out of memory");
  fo->base.ops = &stk__origin_file;
  fo->dirfd = -1;
  char red[1024];
  stk__url_redact(url, red, sizeof red);
  int rc = 0;
  if (!strncasecmp(url, "file://", 7))
    rc = stk__file_url_path(url, &fo->root, err);
  else if (!(fo->root = strdup(url)))
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (rc == 0 && !(fo->base.url = strdup(red))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  if (rc == 0 && (fo->dirfd = open(fo->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    int e = errno;
    rc = e == ENOTDIR ? stk__errf(err, STK_EINVAL, "%s: not a directory", fo->root)
                      : stk__errf(err, stk__from_errno(e), "%s: %s", fo->root, strerror(e));
  }
  if (rc) {
    file_close(&fo->base);
    return rc;
  }
  *out = &fo->base;
  return 0;
}

/* Names stay inside the root: relative, no "." or ".." components. */
static int check_name(const struct file_origin *fo, const char *name, char *err) {
  if (!name || !*name || name[0] == '/')
    return stk__errf(err, STK_EINVAL, "%s: bad object name '%s'", fo->root, name ? name : "");
  for (const char *p = name; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return stk__errf(err, STK_EINVAL, "%s: object name '%s' leaves the root", fo->root, name);
    p += n;
    if (*p) p++;
  }
  return 0;
}

static void fill_info(const struct stat *st, struct stk_obj_info *info) {
  info->size = (uint64_t)st->st_size;
  uint64_t mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
  snprintf(info->etag, sizeof info->etag, "%llx-%llx", (unsigned long long)mtime_ns,
           (unsigned long long)st->st_size);
}

static int fail(struct file_origin *fo, char *err, int e, const char *name, const char *what) {
  count(e == ENOENT ? &fo->n_missing : &fo->n_errors, 1);
  return stk__errf(err, stk__from_errno(e), "%s/%s: %s%s%s", fo->root, name, what,
                   *what ? ": " : "", strerror(e));
}

static int file_stat(struct stk_origin *o, const char *name, struct stk_obj_info *info, char *err) {
  struct file_origin *fo = (struct file_origin *)o;
  int rc = check_name(fo, name, err);
  if (rc) return rc;
  count(&fo->n_requests, 1);
  struct stat st;
  if (fstatat(fo->dirfd, name, &st, 0) != 0) return fail(fo, err, errno, name, "");
  if (!S_ISREG(st.st_mode)) return fail(fo, err, EISDIR, name, "not a regular file");
  if (info) fill_info(&st, info);
  return 0;
}

static int is_canceled(const int *cancel) {
  return cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE) != 0;
}

/* Write all of buf at off; 0 or an errno value. */
static int pwrite_all(int fd, const char *buf, size_t len, uint64_t off) {
  while (len > 0) {
    ssize_t n = pwrite(fd, buf, len, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    buf += n;
    len -= (size_t)n;
    off += (uint64_t)n;
  }
  return 0;
}

/* Copy len bytes at off of src to dst at dst_off: copy_file_range while the
 * kernel takes it (dst a regular file on the same file system: no copy
 * through user space), pread/pwrite after. Returns 0, STK_ECANCELED,
 * STK_ETRUNC (src ended early), or an errno value (positive) with *what
 * naming the side that failed. */
static int copy_range(struct file_origin *fo, int src, uint64_t off, uint64_t len, int dst,
                      uint64_t dst_off, const int *cancel, const char **what) {
  struct stat st;
  int try_cfr = fstat(dst, &st) == 0 && S_ISREG(st.st_mode);
  char *buf = NULL;
  uint64_t done = 0;
  int rc = 0;
  while (done < len && rc == 0) {
    if (is_canceled(cancel)) {
      rc = STK_ECANCELED;
    } else if (try_cfr) {
      loff_t in = (loff_t)(off + done), to = (loff_t)(dst_off + done);
      ssize_t n = copy_file_range(src, &in, dst, &to, STK__MIN(len - done, COPY_CHUNK), 0);
      if (n > 0) {
        done += (uint64_t)n;
        count(&fo->n_bytes, (uint64_t)n);
      } else if (n == 0) {
        rc = STK_ETRUNC;
      } else if (errno != EINTR) {
        try_cfr = 0; /* EXDEV, EINVAL, EOPNOTSUPP, ENOSPC...: the plain way says */
      }
    } else if (!buf && !(buf = malloc(BUF_CHUNK))) {
      rc = ENOMEM;
      *what = "out of memory";
    } else {
      ssize_t n = pread(src, buf, (size_t)STK__MIN(len - done, BUF_CHUNK), (off_t)(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        rc = errno;
        *what = "read";
      } else if (n == 0) {
        rc = STK_ETRUNC;
      } else if ((rc = pwrite_all(dst, buf, (size_t)n, dst_off + done)) != 0) {
        *what = "write to the destination";
      } else {
        done += (uint64_t)n;
        count(&fo->n_bytes, (uint64_t)n);
      }
    }
  }
  free(buf);
  return rc;
}

static int file_get(struct stk_origin *o, const char *name, uint64_t off, uint64_t len, int fd,
                    uint64_t fd_off, struct stk_obj_info *info, const int *cancel, char *err) {
  struct file_origin *fo = (struct file_origin *)o;
  int rc = check_name(fo, name, err);
  if (rc) return rc;
  if (is_canceled(cancel)) return stk__errf(err, STK_ECANCELED, "%s/%s: canceled", fo->root, name);
  count(&fo->n_requests, 1);
  int src = openat(fo->dirfd, name, O_RDONLY | O_CLOEXEC);
  if (src < 0) return fail(fo, err, errno, name, "");
  struct stat st;
  if (fstat(src, &st) != 0) {
    rc = fail(fo, err, errno, name, "");
  } else if (!S_ISREG(st.st_mode)) {
    rc = fail(fo, err, EISDIR, name, "not a regular file");
  } else {
    uint64_t size = (uint64_t)st.st_size;
    if (len == UINT64_MAX) len = off <= size ? size - off : 0;
    if (off > size || len > size - off) {
      count(&fo->n_errors, 1);
      rc = stk__errf(err, STK_ERANGE, "%s/%s: bytes %llu-%llu requested of a file of %llu bytes",
                     fo->root, name, (unsigned long long)off, (unsigned long long)(off + len - 1),
                     (unsigned long long)size);
    } else {
      const char *what = "";
      rc = copy_range(fo, src, off, len, fd, fd_off, cancel, &what);
      if (rc == STK_ECANCELED) {
        stk__errf(err, rc, "%s/%s: canceled", fo->root, name);
      } else if (rc == STK_ETRUNC) {
        count(&fo->n_errors, 1);
        stk__errf(err, rc, "%s/%s: file shrank while being read", fo->root, name);
      } else if (rc) {
        rc = fail(fo, err, rc, name, what);
      } else if (info) {
        fill_info(&st, info);
      }
    }
  }
  close(src);
  return rc;
}

/* ---- list: a sorted recursive walk ---------------------------------- */

struct entry {
  char *name;
  struct stk_obj_info info;
};

struct walk {
  struct file_origin *fo;
  struct entry *v;
  size_t n, cap;
  char *err;
};

static int skip_name(const char *n) {
  size_t len = strlen(n);
  return n[0] == '.' || (len >= 4 && !strcmp(n + len - 4, ".tmp"));
}

/* Add the regular files under directory rel ("" for the root) to w. */
static int walk_dir(struct walk *w, const char *rel, int depth) {
  struct file_origin *fo = w->fo;
  if (depth > MAX_DEPTH)
    return stk__errf(w->err, STK_ERANGE, "%s/%s: directories nested too deep", fo->root, rel);
  int dfd = openat(fo->dirfd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    int e = errno;
    if (dfd >= 0) close(dfd);
    return stk__errf(w->err, stk__from_errno(e), "%s/%s: %s", fo->root, rel, strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (errno = 0, de = readdir(d))) {
    if (skip_name(de->d_name)) continue;
    size_t rl = strlen(rel), nl = strlen(de->d_name);
    char *path = malloc(rl + nl + 2);
    if (!path) {
      rc = stk__errf(w->err, STK_ENOMEM, "out of memory");
      break;
    }
    snprintf(path, rl + nl + 2, "%s%s%s", rel, rl ? "/" : "", de->d_name);
    struct stat st;
    /* A symlink to a file is listed; one to a directory is not followed
     * (no cycles). One that vanished or dangles is passed over. */
    int ok = fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int link = ok && S_ISLNK(st.st_mode);
    if (link) ok = fstatat(dfd, de->d_name, &st, 0) == 0;
    if (ok && S_ISDIR(st.st_mode) && !link) {
      rc = walk_dir(w, path, depth + 1);
    } else if (ok && S_ISREG(st.st_mode)) {
      if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 256;
        struct entry *v = realloc(w->v, cap * sizeof *v);
        if (!v) {
          free(path);
          rc = stk__errf(w->err, STK_ENOMEM, "out of memory");
          break;
        }
        w->v = v;
        w->cap = cap;
      }
      w->v[w->n].name = path;
      fill_info(&st, &w->v[w->n].info);
      w->n++;
      continue; /* path is kept */
    }
    free(path);
  }
  if (rc == 0 && errno != 0)
    rc = stk__errf(w->err, stk__from_errno(errno), "%s/%s: %s", fo->root, rel, strerror(errno));
  closedir(d);
  return rc;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static int file_list(struct stk_origin *o,
                     int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
                     void *arg, char *err) {
  struct file_origin *fo = (struct file_origin *)o;
  struct walk w = {.fo = fo, .err = err};
  count(&fo->n_requests, 1);
  int rc = walk_dir(&w, "", 0);
  if (rc == 0) {
    qsort(w.v, w.n, sizeof *w.v, by_name);
    for (size_t i = 0; i < w.n && rc == 0; i++) rc = cb(arg, w.v[i].name, &w.v[i].info);
  } else {
    count(&fo->n_errors, 1);
  }
  for (size_t i = 0; i < w.n; i++) free(w.v[i].name);
  free(w.v);
  return rc;
}

static void file_stats(struct stk_origin *o, struct stk_origin_stats *st) {
  struct file_origin *fo = (struct file_origin *)o;
  st->requests = __atomic_load_n(&fo->n_requests, __ATOMIC_RELAXED);
  st->retries = 0;
  st->errors = __atomic_load_n(&fo->n_errors, __ATOMIC_RELAXED);
  st->missing = __atomic_load_n(&fo->n_missing, __ATOMIC_RELAXED);
  st->bytes = __atomic_load_n(&fo->n_bytes, __ATOMIC_RELAXED);
}

const struct stk_origin_ops stk__origin_file = {
    .scheme = "file",
    .open = file_open,
    .stat = file_stat,
    .get = file_get,
    .list = file_list,
    .stats = file_stats,
    .close = file_close,
};
