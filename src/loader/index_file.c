/* A cached index file: arrays built once per (input, configuration) and
 * kept in a file that every other process maps instead of building again.
 * A source's window index (tokens_index.c) and a blend's source order
 * (tokens.c) are both kept this way.
 *
 * The file is written once: its name carries a hash of what it was built
 * from, its header repeats the hash, the caller's scalars, the array sizes
 * and a CRC32C of the arrays, and it appears only whole (temporary file,
 * fsync, rename). Builders are made exclusive by an flock'd lock file
 * beside it: the first process to find no good file takes the lock and
 * builds; the others block on the lock and then find the file. Checking
 * the arrays' CRC32C means reading the whole file (12 GB at 10^9
 * windows), so it is done once per node and boot: the process that
 * checked leaves a marker beside the file (its identity and checksum,
 * under the same lock), and later opens that find a matching marker check
 * only the header. The layout is in docs/internals/tokens.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "tokens_impl.h"

#define IXF_MAGIC "STKTOKIX"
#define IXF_VERSION 2u
#define IXF_ALIGN 4096u

/* The file's header (little-endian, as this machine writes it: an index
 * file is a node-local cache, never shipped across architectures; a file
 * of another byte order fails the magic check and is rebuilt). */
struct ixf_hdr {
  char magic[8];
  uint32_t version, kind;
  uint64_t hash;
  uint64_t meta[STK__IXF_NMETA];
  uint64_t off[STK__IXF_NARR], bytes[STK__IXF_NARR];
  uint32_t crc_arrays; /* CRC32C of the arrays in order */
  uint32_t crc_header; /* of every byte above */
};

/* The marker left beside an index file after its arrays passed their
 * CRC32C (NAME.stkidx.ok): what the file was when checked. A marker is
 * trusted only for the same boot, device, inode, size, mtime and checksum,
 * and only when the file's mtime was at least IXF_RACY_NS older than the
 * check: a write within one timestamp tick of the check could otherwise
 * leave the mtime unchanged (git's "racy clean" case). */
#define IXF_OK_MAGIC "STKIXOK1"
#define IXF_RACY_NS 1000000000ull
struct ixf_ok {
  char magic[8];
  char boot_id[40];
  uint64_t dev, ino, size, mtime_ns, checked_ns, hash;
  uint32_t crc_arrays;
  uint32_t crc; /* of every byte above */
};

static uint64_t mtime_ns(const struct stat *st) {
  return (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
}

static void ok_fill(struct ixf_ok *k, const struct stat *st, uint64_t hash, uint32_t crc) {
  memset(k, 0, sizeof *k);
  memcpy(k->magic, IXF_OK_MAGIC, 8);
  stk__boot_id(k->boot_id, sizeof k->boot_id);
  k->dev = (uint64_t)st->st_dev;
  k->ino = (uint64_t)st->st_ino;
  k->size = (uint64_t)st->st_size;
  k->mtime_ns = mtime_ns(st);
  k->hash = hash;
  k->crc_arrays = crc;
}

/* 1 when path's marker vouches for the file st with these arrays. */
static int ok_matches(const char *path, const struct stat *st, uint64_t hash, uint32_t crc) {
  char mp[4200];
  snprintf(mp, sizeof mp, "%s.ok", path);
  int fd = open(mp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct ixf_ok k, want;
  ssize_t r = read(fd, &k, sizeof k);
  close(fd);
  if (r != (ssize_t)sizeof k || stk_crc32c(0, &k, offsetof(struct ixf_ok, crc)) != k.crc) return 0;
  ok_fill(&want, st, hash, crc);
  if (!strcmp(want.boot_id, "unknown")) return 0; /* no boot id: check at every open */
  want.checked_ns = k.checked_ns;
  want.crc = k.crc;
  return !memcmp(&k, &want, sizeof k) && k.checked_ns >= k.mtime_ns + IXF_RACY_NS;
}

/* Leave the marker for a file whose arrays were just checked in full
 * (under the builders' lock; a temporary renamed over, so readers see a
 * whole marker or none). Failing to write it costs only a later check. */
static void ok_write(const char *path, const struct stat *st, uint64_t hash, uint32_t crc) {
  struct ixf_ok k;
  ok_fill(&k, st, hash, crc);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  k.checked_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
  k.crc = stk_crc32c(0, &k, offsetof(struct ixf_ok, crc));
  char mp[4200], tmp[4240];
  snprintf(mp, sizeof mp, "%s.ok", path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", mp, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  int bad = stk__write_full(fd, &k, sizeof k) != 0;
  if (close(fd) != 0) bad = 1;
  if (bad || rename(tmp, mp) != 0) unlink(tmp);
}

/* Map path and check it against (hash, kind): 0 and *f filled; STK_ENOENT
 * when there is no file; another code (with why set) when it is stale or
 * corrupt. With full 0, a file without a matching marker is not read
 * through: STK_EAGAIN. With full 1, its arrays are checked and, when they
 * pass, the marker is written. */
static int try_load(const char *path, uint64_t hash, const struct stk__ixf_kind *k, void *ctx,
                    int full, struct stk__ixf *f, char *why, size_t whyn) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return STK_ENOENT;
  struct stat st;
  int rc = STK_EFORMAT;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < sizeof(struct ixf_hdr)) {
    snprintf(why, whyn, "shorter than its header");
    goto out;
  }
  map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    snprintf(why, whyn, "cannot be mapped (%s)", strerror(errno));
    goto out;
  }
  struct ixf_hdr h;
  memcpy(&h, map, sizeof h);
  if (memcmp(h.magic, IXF_MAGIC, 8) || h.version != IXF_VERSION) {
    snprintf(why, whyn, "not a stoker index file of version %u", IXF_VERSION);
    goto out;
  }
  if (stk_crc32c(0, &h, offsetof(struct ixf_hdr, crc_header)) != h.crc_header) {
    snprintf(why, whyn, "its header fails its checksum");
    goto out;
  }
  if (h.hash != hash || h.kind != k->id) {
    snprintf(why, whyn, "built for another configuration or input");
    goto out;
  }
  for (int i = 0; i < STK__IXF_NARR; i++)
    if (h.off[i] > (uint64_t)st.st_size || h.bytes[i] > (uint64_t)st.st_size - h.off[i]) {
      snprintf(why, whyn, "truncated (array %d past its end)", i);
      goto out;
    }
  if (!ok_matches(path, &st, hash, h.crc_arrays)) {
    if (!full) {
      rc = STK_EAGAIN;
      snprintf(why, whyn, "not checked on this node since it was written");
      goto out;
    }
    uint32_t crc = 0;
    for (int i = 0; i < STK__IXF_NARR; i++)
      crc = stk_crc32c(crc, (const uint8_t *)map + h.off[i], (size_t)h.bytes[i]);
    if (crc != h.crc_arrays) {
      snprintf(why, whyn, "its arrays fail their checksum");
      goto out;
    }
    ok_write(path, &st, hash, crc);
  }
  struct stk__ixf g;
  memset(&g, 0, sizeof g);
  memcpy(g.meta, h.meta, sizeof g.meta);
  for (int i = 0; i < STK__IXF_NARR; i++) {
    g.arr[i] = (const uint8_t *)map + h.off[i];
    g.bytes[i] = h.bytes[i];
  }
  if (!k->fits(ctx, &g)) {
    snprintf(why, whyn, "its array sizes disagree with its header");
    goto out;
  }
  g.map = map;
  g.map_len = (size_t)st.st_size;
  *f = g;
  map = MAP_FAILED;
  rc = 0;
out:
  if (map != MAP_FAILED) munmap(map, (size_t)st.st_size);
  close(fd);
  return rc;
}

static int write_all(int fd, const void *p, uint64_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : (size_t)n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (uint64_t)w;
  }
  return 0;
}

/* Write f to path atomically: a temporary file beside it, fsync'ed, then
 * renamed over path and the folder fsync'ed. */
static int write_file(const char *path, uint64_t hash, uint32_t kind, const struct stk__ixf *f,
                      char *err) {
  struct ixf_hdr h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, IXF_MAGIC, 8);
  h.version = IXF_VERSION;
  h.kind = kind;
  h.hash = hash;
  memcpy(h.meta, f->meta, sizeof h.meta);
  uint64_t pos = IXF_ALIGN;
  uint32_t crc = 0;
  for (int i = 0; i < STK__IXF_NARR; i++) {
    h.off[i] = pos;
    h.bytes[i] = f->bytes[i];
    pos = (pos + f->bytes[i] + IXF_ALIGN - 1) / IXF_ALIGN * IXF_ALIGN;
    crc = stk_crc32c(crc, f->arr[i], (size_t)f->bytes[i]);
  }
  h.crc_arrays = crc;
  h.crc_header = stk_crc32c(0, &h, offsetof(struct ixf_hdr, crc_header));
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 32);
  if (!tmp) return stk__errf(err, STK_ENOMEM, "out of memory");
  snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int rc = 0;
  if (fd < 0) {
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return rc;
  }
  static const uint8_t zero[IXF_ALIGN];
  int bad = write_all(fd, &h, sizeof h) || write_all(fd, zero, IXF_ALIGN - sizeof h);
  for (int i = 0; i < STK__IXF_NARR && !bad; i++) {
    bad = write_all(fd, f->arr[i], f->bytes[i]);
    uint64_t padn = (IXF_ALIGN - f->bytes[i] % IXF_ALIGN) % IXF_ALIGN;
    if (!bad && i < STK__IXF_NARR - 1) bad = write_all(fd, zero, padn);
  }
  if (!bad) bad = fsync(fd) != 0;
  int e = errno;
  if (close(fd) != 0 && !bad) bad = 1, e = errno;
  if (!bad && rename(tmp, path) != 0) bad = 1, e = errno;
  if (bad) {
    rc = stk__errf(err, stk__from_errno(e), "%s: cannot write: %s", tmp, strerror(e));
    unlink(tmp);
  } else {
    char *dir = strdup(path), *sl = dir ? strrchr(dir, '/') : NULL;
    if (sl) {
      *sl = 0;
      int dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
      }
    }
    free(dir);
  }
  free(tmp);
  return rc;
}

static int mkdirs(const char *dir, char *err) {
  char *p = strdup(dir);
  if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        free(p);
        return stk__errf(err, stk__from_errno(e), "%s: cannot create the index folder: %s", dir,
                         strerror(e));
      }
      *s = c;
      if (!c) break;
    }
  }
  free(p);
  return 0;
}

static int build(const struct stk__ixf_kind *k, void *ctx, struct stk__ixf *f, char *err) {
  memset(f, 0, sizeof *f);
  int rc = k->build(ctx, f, err);
  if (!rc) f->built = 1;
  return rc;
}

int stk__ixf_get(const char *dir, const char *name, uint64_t hash, const struct stk__ixf_kind *k,
                 void *ctx, struct stk__ixf *out, char *err) {
  memset(out, 0, sizeof *out);
  if (!dir) return build(k, ctx, out, err);
  int rc = mkdirs(dir, err);
  if (rc) return rc;
  size_t n = strlen(dir) + strlen(name) + strlen(k->name) + 64;
  char *path = malloc(n), *lock = malloc(n + 8);
  if (!path || !lock) {
    free(path);
    free(lock);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  snprintf(path, n, "%s/%s.%s-%016" PRIx64 ".stkidx", dir, name, k->name, hash);
  snprintf(lock, n + 8, "%s.lock", path);
  char why[160] = "";
  /* Without the lock, only a file some process of this node has checked
   * (its marker matches) is mapped; anything else waits for the lock. */
  rc = try_load(path, hash, k, ctx, 0, out, why, sizeof why);
  if (rc == 0) goto done;
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) {
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create the index lock: %s", lock,
                   strerror(errno));
    goto done;
  }
  while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  /* Another process may have built or checked it while this one waited;
   * if not, this one checks it in full and leaves the marker. */
  rc = try_load(path, hash, k, ctx, 0, out, why, sizeof why);
  if (rc != 0 && rc != STK_ENOENT) rc = try_load(path, hash, k, ctx, 1, out, why, sizeof why);
  if (rc != 0) {
    if (rc != STK_ENOENT) stk_log(STK_LOG_WARN, "%s: %s: rebuilding it", path, why);
    uint64_t t0 = stk_now_ns();
    rc = build(k, ctx, out, err);
    if (!rc) {
      stk_log(STK_LOG_INFO, "built the %s index of %s in %.3f s: %s", k->name, name,
              (double)(stk_now_ns() - t0) / 1e9, path);
      rc = write_file(path, hash, k->id, out, err);
    }
  }
  flock(lfd, LOCK_UN);
  close(lfd);
done:
  if (rc) {
    free(path);
  } else {
    out->path = path;
  }
  free(lock);
  return rc;
}

void stk__ixf_unmap(struct stk__ixf *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_len);
  free(f->path);
  memset(f, 0, sizeof *f);
}
