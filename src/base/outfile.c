/* Output files (reports, JSON, SVG, CSV, saved state) written so that a
 * reader sees the whole file or none of it: the bytes go to a temporary
 * file in the target's own directory (so the rename cannot cross file
 * systems), which is flushed, synced and renamed over the target only
 * when every write succeeded. A full disk or a size limit then leaves the
 * previous file, or no file, and a clear error, never a 0-byte or partial
 * file with exit 0. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

struct stk_outfile {
  FILE *f;
  char *path;   /* as the caller named it, for messages */
  char *target; /* what is replaced: path, or the file a symlink at path names */
  char *tmp;    /* NULL for stdout */
};

/* The directory part of path ("." when there is none), malloc'ed. */
static char *dir_of(const char *path) {
  const char *s = strrchr(path, '/');
  if (!s) return strdup(".");
  if (s == path) return strdup("/");
  return strndup(path, (size_t)(s - path));
}

static int fail(char *err, const char *path, const char *what, int e) {
  return stk__errf(err, stk__from_errno(e), "%s: %s: %s", path, what, strerror(e));
}

int stk_outfile_check(const char *path, char *err) {
  if (!path || !*path) return stk__errf(err, STK_EINVAL, "empty output path");
  if (!strcmp(path, "-")) return 0;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return stk__errf(err, STK_EINVAL, "%s: is a directory; name a file to write", path);
  char *dir = dir_of(path);
  if (!dir) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = 0;
  if (stat(dir, &st) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot write: directory %s: %s", path, dir,
                   strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    rc = stk__errf(err, STK_ENOENT, "%s: cannot write: %s is not a directory", path, dir);
  else if (access(dir, W_OK | X_OK) != 0)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot write: directory %s: %s", path, dir,
                   strerror(errno));
  free(dir);
  return rc;
}

/* Make ".NAME.PID-TAG.tmp" beside path with O_EXCL (the umask applies, as
 * for any new file, which mkstemp's 0600 would not). TAG comes from the
 * handle's address, unique among the process's open handles, so no shared
 * counter is needed; a clash with a stale file just tries the next. */
static int open_tmp(const char *path, uintptr_t tag, char **tmp_out, int *fd_out) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
  const char *base = path + dl;
  size_t cap = strlen(path) + 64;
  char *tmp = malloc(cap);
  if (!tmp) return ENOMEM;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(tmp, cap, "%.*s.%s.%ld-%llx.tmp", (int)dl, path, base, (long)getpid(),
             (unsigned long long)(tag + (uintptr_t)tries));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      *fd_out = fd;
      return 0;
    }
    if (errno != EEXIST) {
      int e = errno;
      free(tmp);
      return e;
    }
  }
  free(tmp);
  return EEXIST;
}

int stk_outfile_open(struct stk_outfile **out, const char *path, char *err) {
  *out = NULL;
  int rc = stk_outfile_check(path, err);
  if (rc) return rc;
  struct stk_outfile *o = calloc(1, sizeof *o);
  if (!o || !(o->path = strdup(path))) {
    free(o);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  if (!strcmp(path, "-")) {
    o->f = stdout;
    *out = o;
    return 0;
  }
  /* Through a symlink to its file (replacing the link itself would cut
   * it), keeping an existing file's permissions. */
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) o->target = realpath(path, NULL);
  if (!o->target) o->target = strdup(path);
  int fd = -1, e = o->target ? open_tmp(o->target, (uintptr_t)o, &o->tmp, &fd) : ENOMEM;
  if (e == 0 && stat(o->target, &st) == 0 && S_ISREG(st.st_mode))
    (void)!fchmod(fd, st.st_mode & 07777);
  if (e == 0 && !(o->f = fdopen(fd, "w"))) {
    e = errno;
    close(fd);
    unlink(o->tmp);
  }
  if (e) {
    rc = fail(err, path, "cannot create a file beside it", e);
    free(o->tmp);
    free(o->target);
    free(o->path);
    free(o);
    return rc;
  }
  *out = o;
  return 0;
}

FILE *stk_outfile_stream(struct stk_outfile *o) { return o ? o->f : NULL; }

const char *stk_outfile_path(const struct stk_outfile *o) { return o ? o->path : NULL; }

static void release(struct stk_outfile *o) {
  free(o->tmp);
  free(o->target);
  free(o->path);
  free(o);
}

int stk_outfile_commit(struct stk_outfile *o, char *err) {
  if (!o) return stk__errf(err, STK_EINVAL, "no output file");
  int rc = 0;
  if (!o->tmp) { /* stdout: all that can be checked is that it took the bytes */
    errno = 0;
    if (fflush(o->f) != 0 || ferror(o->f))
      rc = fail(err, "<stdout>", "cannot write", errno ? errno : EIO);
    release(o);
    return rc;
  }
  /* stdio keeps the first failed write's error only as a flag; fflush
   * retries what is buffered and gives the errno when it fails again. */
  errno = 0;
  int bad = fflush(o->f) != 0 || ferror(o->f);
  int e = errno ? errno : EIO;
  if (!bad && fsync(fileno(o->f)) != 0 && errno != EINVAL) bad = 1, e = errno;
  if (fclose(o->f) != 0 && !bad) bad = 1, e = errno;
  o->f = NULL;
  if (!bad && rename(o->tmp, o->target) != 0) bad = 1, e = errno;
  if (bad) {
    unlink(o->tmp);
    rc = fail(err, o->path, "cannot write it completely (left as it was)", e);
  }
  release(o);
  return rc;
}

void stk_outfile_abort(struct stk_outfile *o) {
  if (!o) return;
  if (o->tmp) {
    if (o->f) fclose(o->f);
    unlink(o->tmp);
  }
  release(o);
}
