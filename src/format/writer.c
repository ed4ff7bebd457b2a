/* The generic dataset writer: shard rotation by size or sample count,
 * gathered writes to a dot-named temporary file that is made durable and
 * renamed into place when the shard is complete, and removal of everything
 * written on abort. Backends supply only the bytes, through their wr_*
 * hooks. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format_impl.h"

/* Small pieces (record headers, whole small records) are copied into a
 * 1 MiB buffer; pieces of WR_REF_MIN bytes or more that a backend passes
 * by reference are written from the caller's memory. Either way the
 * pending pieces go out in one writev of up to WR_IOV pieces, so a batch
 * of large records costs one system call and no copy in user space. */
#define WBUF_SIZE (1u << 20)
#define WR_IOV 64
#define WR_REF_MIN (16u << 10)
/* Writeback of a shard is started every WR_BEHIND bytes
 * (sync_file_range), so the device writes while the next bytes are made
 * instead of all at the end: the kernel would otherwise wait for its dirty
 * threshold (10% of memory) and the final fdatasync would find it all
 * still to do. */
#define WR_BEHIND (8u << 20)

/* The message of the last stk_writer_close() that failed on this thread,
 * since the writer it belonged to is gone; stk_writer_errmsg(NULL) returns
 * it. */
static _Thread_local char close_err[STK_ERRMSG_MAX];

static int one_sample_per_file(const struct stk_format_ops *f) {
  return (f->caps & STK_FMT_WRITE_PER_FILE) != 0;
}

int stk__wr_track(struct stk_writer *w, const char *path) {
  if (w->ndone == w->done_cap) {
    size_t nc = w->done_cap ? w->done_cap * 2 : 64;
    char **d = realloc(w->done, nc * sizeof *d);
    if (!d) return STK_ENOMEM;
    w->done = d;
    w->done_cap = nc;
  }
  if (!(w->done[w->ndone] = strdup(path))) return STK_ENOMEM;
  w->ndone++;
  return 0;
}

/* Directories are tracked with a trailing '/' so abort knows to rmdir. */
int stk__wr_track_dir(struct stk_writer *w, const char *path) {
  size_t n = strlen(path);
  char *p = malloc(n + 2);
  if (!p) return STK_ENOMEM;
  memcpy(p, path, n);
  memcpy(p + n, "/", 2);
  int rc = stk__wr_track(w, p);
  free(p);
  return rc;
}

/* mkdir -p, recording the directories it creates. */
static int make_dirs(struct stk_writer *w, const char *dir) {
  char *p = strdup(dir);
  if (!p) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  int rc = 0;
  for (char *s = p + 1;; s++) {
    if (*s && *s != '/') continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0777) == 0) {
      rc = stk__wr_track_dir(w, p);
    } else if (errno != EEXIST) {
      int e = errno;
      rc = stk__errf(w->err, stk__from_errno(e), "%s: cannot create directory: %s", p,
                     strerror(e));
    }
    *s = c;
    if (rc || !c) break;
  }
  free(p);
  return rc;
}

char *stk__wr_name(const struct stk_writer *w, uint64_t no, const char *ext) {
  size_t n = strlen(w->dir) + strlen(w->prefix) + strlen(ext) + 32;
  char *p = malloc(n);
  int width = one_sample_per_file(w->fmt) ? 8 : 5; /* names sort in sample order */
  if (p) snprintf(p, n, "%s/%s-%0*llu%s", w->dir, w->prefix, width, (unsigned long long)no, ext);
  return p;
}

/* "D/.B.tmp" for "D/B": dot-named, so no dataset walk ever lists it. */
static char *tmp_name(const char *path) {
  const char *b = strrchr(path, '/');
  size_t dl = b ? (size_t)(b - path + 1) : 0, n = strlen(path) + 8;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%.*s.%s.tmp", (int)dl, path, path + dl);
  return p;
}

static int open_tmp(struct stk_writer *w) {
  if (!w->path) {
    char ext[32] = "";
    size_t l = strcspn(w->fmt->exts, " ");
    if (l < sizeof ext) memcpy(ext, w->fmt->exts, l), ext[l] = 0;
    if (!(w->path = stk__wr_name(w, w->shard_no, ext)))
      return stk__errf(w->err, STK_ENOMEM, "out of memory");
  }
  free(w->tmp_path);
  if (!(w->tmp_path = tmp_name(w->path))) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (w->fd < 0) {
    int e = errno;
    return stk__errf(w->err, stk__from_errno(e), "%s: cannot create: %s", w->tmp_path,
                     strerror(e));
  }
  w->file_off = w->wb_off = 0;
  return 0;
}

/* Write all of iov[0, n), retrying short writes and EINTR; consumes iov. */
static int writev_full(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t r = writev(fd, iov, n < IOV_MAX ? n : IOV_MAX);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return stk__from_errno(errno);
    if (r == 0) return STK_EIO;
    size_t left = (size_t)r;
    for (; n > 0 && left >= iov->iov_len; iov++, n--) left -= iov->iov_len;
    if (n > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

/* Count n bytes as written to the shard file, and start writeback of what
 * has piled up since the last start. A hint: sync_file_range errors (a
 * filesystem without it) are left for the fdatasync at the end to find. */
static void wrote(struct stk_writer *w, uint64_t n) {
  w->file_off += n;
  if (w->file_off - w->wb_off >= WR_BEHIND) {
    sync_file_range(w->fd, (off_t)w->wb_off, (off_t)(w->file_off - w->wb_off),
                    SYNC_FILE_RANGE_WRITE);
    w->wb_off = w->file_off;
  }
}

/* Write every pending piece. On failure the pieces are dropped too, so the
 * writer never holds a pointer into a sample past the call that gave it. */
static int flush(struct stk_writer *w) {
  if (!w->iov_n) return 0;
  uint64_t n = 0;
  for (int i = 0; i < w->iov_n; i++) n += w->iov[i].iov_len;
  int rc = writev_full(w->fd, w->iov, w->iov_n);
  w->iov_n = w->refs = 0;
  w->wlen = 0;
  if (rc) return stk__errf(w->err, rc, "%s: write failed: %s", w->path, stk_strerror(rc));
  wrote(w, n);
  return 0;
}

static void pend(struct stk_writer *w, const void *p, size_t n) {
  w->iov[w->iov_n].iov_base = (void *)p;
  w->iov[w->iov_n++].iov_len = n;
  w->shard_bytes += n;
  w->bytes += n;
}

int stk__wr_write(struct stk_writer *w, const void *p, size_t n) {
  int rc;
  if (w->fd < 0 && (rc = open_tmp(w)) != 0) return rc;
  if (!n) return 0;
  if (n > WBUF_SIZE - w->wlen || w->iov_n == WR_IOV) {
    if ((rc = flush(w)) != 0) return rc;
    if (n >= WBUF_SIZE) {
      rc = stk__write_full(w->fd, p, n);
      if (rc) return stk__errf(w->err, rc, "%s: write failed: %s", w->path, stk_strerror(rc));
      w->shard_bytes += n;
      w->bytes += n;
      wrote(w, n);
      return 0;
    }
  }
  uint8_t *dst = w->wbuf + w->wlen;
  memcpy(dst, p, n);
  w->wlen += n;
  struct iovec *last = w->iov_n ? &w->iov[w->iov_n - 1] : NULL;
  if (last && (uint8_t *)last->iov_base + last->iov_len == dst) {
    last->iov_len += n; /* right after the previous copied piece */
    w->shard_bytes += n;
    w->bytes += n;
  } else {
    pend(w, dst, n);
  }
  return 0;
}

int stk__wr_write_ref(struct stk_writer *w, const void *p, size_t n) {
  int rc;
  if (n < WR_REF_MIN) return stk__wr_write(w, p, n);
  if (w->fd < 0 && (rc = open_tmp(w)) != 0) return rc;
  if (w->iov_n == WR_IOV && (rc = flush(w)) != 0) return rc;
  pend(w, p, n);
  w->refs = 1;
  return 0;
}

int stk__wr_file(struct stk_writer *w, const char *path, const void *p, size_t n) {
  char *tmp = tmp_name(path);
  if (!tmp) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666), rc = 0;
  if (fd < 0) {
    int e = errno;
    rc = stk__errf(w->err, stk__from_errno(e), "%s: cannot create: %s", tmp, strerror(e));
  } else {
    rc = stk__write_full(fd, p, n);
    if (!rc && fdatasync(fd) != 0) rc = stk__from_errno(errno);
    if (close(fd) != 0 && !rc) rc = stk__from_errno(errno);
    if (!rc && rename(tmp, path) != 0) rc = stk__from_errno(errno);
    if (rc) {
      unlink(tmp);
      stk__errf(w->err, rc, "%s: cannot write: %s", path, stk_strerror(rc));
    } else {
      w->bytes += n;
      rc = stk__wr_track(w, path);
    }
  }
  free(tmp);
  return rc;
}

static void shard_names_free(struct stk_writer *w) {
  free(w->path);
  free(w->tmp_path);
  w->path = w->tmp_path = NULL;
}

static int begin_shard(struct stk_writer *w) {
  shard_names_free(w);
  w->in_shard = 1;
  w->shard_samples = w->shard_bytes = 0;
  return w->fmt->wr_shard_begin ? w->fmt->wr_shard_begin(w) : 0;
}

/* Make the finished file at w->fd durable before its final name appears,
 * so a shard under its final name is complete even after a crash. Formats
 * of one file per sample only start its writeback here (an fdatasync per
 * small file would cost a journal commit each); sync_dir makes them
 * durable all at once when the dataset is finished. */
static int settle(struct stk_writer *w) {
  if (one_sample_per_file(w->fmt)) {
    sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    return 0;
  }
  if (fdatasync(w->fd) == 0) return 0;
  int e = errno;
  return stk__errf(w->err, stk__from_errno(e), "%s: fdatasync failed: %s", w->path, strerror(e));
}

/* Make the names of the finished files durable: an fsync of the output
 * directory, or for formats of one file per sample (which may use
 * subdirectories and were not synced one by one) a syncfs of its
 * filesystem. Filesystems that cannot sync a directory (EINVAL) are let
 * be. */
static int sync_dir(struct stk_writer *w) {
  int fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
  if (fd < 0 || (one_sample_per_file(w->fmt) ? syncfs(fd) : fsync(fd)) != 0) {
    int e = errno;
    if (e != EINVAL)
      rc = stk__errf(w->err, stk__from_errno(e), "%s: cannot sync the directory: %s", w->dir,
                     strerror(e));
  }
  if (fd >= 0) close(fd);
  return rc;
}

/* Trailer, flush, sync, close, rename into place. */
static int end_shard(struct stk_writer *w) {
  int rc = w->fmt->wr_shard_end ? w->fmt->wr_shard_end(w) : 0;
  if (!rc && w->fd < 0) rc = open_tmp(w); /* an empty shard is still a file */
  if (!rc) rc = flush(w);
  if (!rc) rc = settle(w);
  if (w->fd >= 0 && close(w->fd) != 0 && !rc)
    rc = stk__errf(w->err, stk__from_errno(errno), "%s: close failed: %s", w->path,
                   strerror(errno));
  w->fd = -1;
  if (!rc && rename(w->tmp_path, w->path) != 0) {
    int e = errno;
    rc = stk__errf(w->err, stk__from_errno(e), "%s: cannot rename into place: %s", w->path,
                   strerror(e));
  }
  if (rc) {
    if (w->tmp_path) unlink(w->tmp_path);
  } else if (stk__wr_track(w, w->path)) {
    rc = stk__errf(w->err, STK_ENOMEM, "out of memory");
  }
  w->in_shard = 0;
  w->shard_no++;
  shard_names_free(w);
  return rc;
}

void stk_writer_opts_init_sized(struct stk_writer_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk_writer_open(struct stk_writer **out, const struct stk_writer_opts *user, char *errmsg) {
  struct stk_writer_opts own;
  const struct stk_writer_opts *opts = user ? &own : NULL;
  if (user) {
    int rc = stk__opts_take(&own, sizeof own, user, "stk_writer_opts", errmsg);
    if (rc) return rc;
  }
  if (!out || !opts || !opts->dir || !*opts->dir)
    return stk__errf(errmsg, STK_EINVAL, "writer: no output directory given");
  const struct stk_format_ops *f = stk__format_find(opts->format);
  if (!f) return stk__errf(errmsg, STK_EINVAL, "unknown format '%s'", opts->format ? opts->format : "");
  if (!(f->caps & STK_FMT_WRITE) || !f->wr_sample)
    return stk__errf(errmsg, STK_ENOTSUP, "format '%s' cannot be written", f->name);
  struct stk_writer *w = calloc(1, sizeof *w);
  if (!w) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  w->fmt = f;
  w->fd = -1;
  w->dir = strdup(opts->dir);
  w->prefix = strdup(opts->prefix && *opts->prefix ? opts->prefix : "shard");
  w->wbuf = malloc(WBUF_SIZE);
  w->iov = malloc(WR_IOV * sizeof *w->iov);
  w->shard_bytes_max = opts->shard_bytes;
  w->samples_per_shard = one_sample_per_file(f) ? 1 : opts->samples_per_shard;
  w->write_index = opts->write_index;
  int rc = w->dir && w->prefix && w->wbuf && w->iov
               ? 0
               : stk__errf(w->err, STK_ENOMEM, "out of memory");
  if (!rc) {
    size_t l = strlen(w->dir);
    while (l > 1 && w->dir[l - 1] == '/') w->dir[--l] = 0;
    rc = make_dirs(w, w->dir);
  }
  if (rc) {
    if (errmsg) memcpy(errmsg, w->err, STK_ERRMSG_MAX);
    stk_writer_abort(w);
    return rc;
  }
  *out = w;
  return 0;
}

static uint64_t sample_bytes(const struct stk_sample *s) {
  uint64_t n = 0;
  for (int i = 0; i < s->nfields; i++) n += s->fields[i].len;
  return n;
}

/* A new shard starts when this sample would pass the size limit or the
 * current shard holds its quota; a shard always gets at least one sample. */
static int rotate_due(const struct stk_writer *w, const struct stk_sample *s) {
  if (!w->in_shard || w->shard_samples == 0) return 0;
  if (w->samples_per_shard && w->shard_samples >= w->samples_per_shard) return 1;
  return w->shard_bytes_max && w->shard_bytes + sample_bytes(s) > w->shard_bytes_max;
}

static int add_one(struct stk_writer *w, const struct stk_sample *s) {
  int rc;
  if (!s) return stk__errf(w->err, STK_EINVAL, "no sample given");
  if (w->finished) return stk__errf(w->err, STK_EINVAL, "writer already finished");
  if (rotate_due(w, s) && (rc = end_shard(w)) != 0) return rc;
  if (!w->in_shard && (rc = begin_shard(w)) != 0) return rc;
  if ((rc = w->fmt->wr_sample(w, s)) != 0) return rc;
  w->shard_samples++;
  w->samples++;
  return 0;
}

/* Write what still points into the caller's samples before they go; on
 * failure drop it instead (the writer is then only good for abort). */
static int release_refs(struct stk_writer *w, int rc) {
  if (!w->refs) return rc;
  if (!rc) return flush(w);
  w->iov_n = w->refs = 0;
  w->wlen = 0;
  return rc;
}

int stk_writer_add(struct stk_writer *w, const struct stk_sample *s) {
  return release_refs(w, add_one(w, s));
}

int stk__writer_add_batch(struct stk_writer *w, const struct stk_sample *s, const uint32_t *crc,
                          size_t n) {
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    w->crc_hint = crc ? &crc[i] : NULL;
    rc = add_one(w, &s[i]);
  }
  w->crc_hint = NULL;
  return release_refs(w, rc);
}

int stk__writer_wants_crc(const struct stk_writer *w) { return w->fmt->wr_crc_hint; }

static void writer_free(struct stk_writer *w) {
  if (w->free_state) w->free_state(w);
  for (size_t i = 0; i < w->ndone; i++) free(w->done[i]);
  free(w->done);
  shard_names_free(w);
  free(w->wbuf);
  free(w->iov);
  free(w->dir);
  free(w->prefix);
  free(w);
}

int stk__writer_finish(struct stk_writer *w) {
  if (w->finished) return 0;
  int rc = w->in_shard ? end_shard(w) : 0;
  if (!rc && w->fmt->wr_finish) rc = w->fmt->wr_finish(w);
  if (!rc) rc = sync_dir(w);
  if (!rc) w->finished = 1;
  return rc;
}

int stk_writer_close(struct stk_writer *w) {
  if (!w) return STK_EINVAL;
  int rc = stk__writer_finish(w);
  if (rc) {
    memcpy(close_err, w->err, sizeof close_err);
    stk_writer_abort(w);
    return rc;
  }
  writer_free(w);
  return 0;
}

void stk_writer_abort(struct stk_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  if (w->fd >= 0 && w->tmp_path) unlink(w->tmp_path);
  w->fd = -1;
  for (size_t i = w->ndone; i-- > 0;) {
    size_t l = strlen(w->done[i]);
    if (l && w->done[i][l - 1] == '/') rmdir(w->done[i]);
    else unlink(w->done[i]);
  }
  writer_free(w);
}

const char *stk_writer_errmsg(const struct stk_writer *w) { return w ? w->err : close_err; }
uint64_t stk_writer_bytes(const struct stk_writer *w) { return w->bytes; }
