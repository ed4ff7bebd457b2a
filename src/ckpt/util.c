/* Small pieces the checkpoint tier's files share: directory names, CRC32C
 * combination, a parallel-for over a few threads, locks, and removal. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"

void stk__ckpt_dirname(char out[64], uint64_t step, uint32_t rank) {
  snprintf(out, 64, "step-%012" PRIu64 "-rank-%05" PRIu32, step, rank);
}

int stk__ckpt_parse_dirname(const char *name, uint64_t *step, uint32_t *rank) {
  unsigned long long s;
  unsigned r;
  int end = 0;
  if (strncmp(name, "step-", 5) || sscanf(name, "step-%12llu-rank-%5u%n", &s, &r, &end) != 2 ||
      name[end] || end != 28)
    return -1;
  *step = s;
  *rank = r;
  return 0;
}

void stk__ckpt_join(char *out, size_t n, const char *dir, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

void stk__ckpt_objfile(char out[16], size_t i) { snprintf(out, 16, "%05zu.obj", i); }

/* ---- CRC32C combination ------------------------------------------------
 * Appending len zero bytes to a message multiplies its (unconditioned) CRC
 * by x^(8 len) modulo the polynomial; the pre- and post-inversion of the
 * standard CRC cancel in the combination, so crc(A||B) = crc(A) * x^(8|B|)
 * + crc(B). Polynomials are held reflected, as the CRC itself is. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t gf2_mul(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  while (m) {
    if (a & m) p ^= b;
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
  }
  return p;
}

/* x^(2^k) mod P for k < 64, reflected: x^1 is bit 30. */
static uint32_t x2k[64];
static pthread_once_t x2k_once = PTHREAD_ONCE_INIT;
static void x2k_init(void) {
  x2k[0] = 1u << 30;
  for (int k = 1; k < 64; k++) x2k[k] = gf2_mul(x2k[k - 1], x2k[k - 1]);
}

uint32_t stk__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  pthread_once(&x2k_once, x2k_init);
  uint32_t p = 1u << 31; /* x^0 */
  uint64_t bits = len_b; /* times 8: start at k = 3 */
  for (int k = 3; bits && k < 64; k++, bits >>= 1)
    if (bits & 1) p = gf2_mul(x2k[k], p);
  return gf2_mul(p, crc_a) ^ crc_b;
}

/* ---- parallel for ------------------------------------------------------ */

struct pfor {
  int (*fn)(void *arg, size_t i, char *err);
  void *arg;
  size_t n, next;
  int rc;
  char err[STK_ERRMSG_MAX];
  pthread_mutex_t mu;
};

static void *pfor_worker(void *p) {
  struct pfor *f = p;
  char err[STK_ERRMSG_MAX];
  for (;;) {
    pthread_mutex_lock(&f->mu);
    size_t i = f->next;
    int stop = f->rc != 0 || i >= f->n;
    if (!stop) f->next++;
    pthread_mutex_unlock(&f->mu);
    if (stop) return NULL;
    err[0] = 0;
    int rc = f->fn(f->arg, i, err);
    if (rc) {
      pthread_mutex_lock(&f->mu);
      if (!f->rc) {
        f->rc = rc;
        memcpy(f->err, err, sizeof err);
      }
      pthread_mutex_unlock(&f->mu);
      return NULL;
    }
  }
}

int stk__ckpt_pfor(uint32_t threads, size_t n, int (*fn)(void *arg, size_t i, char *err),
                   void *arg, char *err) {
  struct pfor f = {.fn = fn, .arg = arg, .n = n};
  pthread_mutex_init(&f.mu, NULL);
  if (threads == 0) threads = 1;
  if (threads > n) threads = n ? (uint32_t)n : 1;
  pthread_t tid[64];
  if (threads > 64) threads = 64;
  uint32_t started = 0;
  for (uint32_t t = 1; t < threads; t++)
    if (pthread_create(&tid[started], NULL, pfor_worker, &f) == 0) started++;
  pfor_worker(&f); /* the caller works too */
  for (uint32_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
  pthread_mutex_destroy(&f.mu);
  if (f.rc && err) memcpy(err, f.err, STK_ERRMSG_MAX);
  return f.rc;
}

/* ---- files ------------------------------------------------------------- */

int stk__ckpt_lock(const char *path, int exclusive, int wait, char *err) {
  char lp[4096];
  stk__ckpt_join(lp, sizeof lp, path, CKPT_LOCK);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return stk__errf(err, stk__from_errno(errno), "%s: cannot open: %s", lp, strerror(errno));
  int how = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
  while (flock(fd, how) != 0) {
    if (errno == EINTR) continue;
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) return stk__errf(err, STK_EBUSY, "%s: in use by another process", path);
    return stk__errf(err, stk__from_errno(e), "%s: cannot lock: %s", lp, strerror(e));
  }
  return fd;
}

int stk__ckpt_remove_dir(const char *path, char *err) {
  DIR *d = opendir(path);
  if (!d) {
    if (errno == ENOENT) return 0;
    return stk__errf(err, stk__from_errno(errno), "%s: cannot open: %s", path, strerror(errno));
  }
  struct dirent *e;
  char p[4096];
  int rc = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    /* The manifest goes first, so a removal cut short leaves a partial
     * checkpoint (gc finishes it), never one that looks complete. */
    stk__ckpt_join(p, sizeof p, path, CKPT_MANIFEST);
    unlink(p);
    stk__ckpt_join(p, sizeof p, path, e->d_name);
    if (unlink(p) != 0 && errno != ENOENT && !rc)
      rc = stk__errf(err, stk__from_errno(errno), "%s: cannot remove: %s", p, strerror(errno));
  }
  closedir(d);
  if (!rc && rmdir(path) != 0 && errno != ENOENT)
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot remove: %s", path, strerror(errno));
  return rc;
}

int stk__ckpt_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return stk__from_errno(errno);
  int rc = fsync(fd) == 0 ? 0 : stk__from_errno(errno);
  close(fd);
  return rc;
}

int stk__ckpt_mkdirs(const char *dir, char *err) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return stk__errf(err, STK_EINVAL, "%.64s...: path too long", dir);
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", p,
                         strerror(errno));
      *s = c;
      if (!c) break;
    }
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return stk__errf(err, STK_EINVAL, "%s: not a directory", dir);
  return 0;
}
