/* The cache directory: its format (STOKER-CACHE, data/, tmp/, lock/,
 * .meta records, the stats file), creating and checking one, sweeping what
 * interrupted fills left, LRU eviction, and `stoker cache` stats, verify
 * and evict. docs/internals/cache.md has the full story:
 *
 *   DIR/STOKER-CACHE      "stoker-cache 1": format and version
 *   DIR/data/KEY          a committed shard, byte for byte the origin's
 *   DIR/data/KEY.meta     what it is: origin URL, size, CRC32C, verify stamp
 *   DIR/tmp/KEY.XXXXXX    fills in progress, each flock'ed by its filler
 *   DIR/lock/KEY          per-shard fill lock (flock), one filler at a time
 *   DIR/lock/evict        one evictor at a time
 *   DIR/stats             counters summed over every process that closed
 *
 * A shard in use by any process is held open with a shared flock; the
 * evictor takes an exclusive one without waiting and skips what it cannot
 * get, so entries in use (or staged ahead) are never evicted. The commit
 * point of a fill is the rename of its data file; the .meta is renamed in
 * first, and a data file is served only when its .meta agrees with it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache_int.h"

/* ---- small helpers -------------------------------------------------------- */

static uint64_t fnv1a64(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* Name of shard i in the directory: a hash of origin and name, then the
 * name's last component (for people listing the directory). */
void stk__cache_key(const struct stk_cache *c, size_t i, char *key) {
  const char *name = c->tab[i].name;
  uint64_t h = fnv1a64(fnv1a64(0xcbf29ce484222325ull, stk__origin_url(c->origin)), "\n");
  h = stk_mix64(fnv1a64(h, name), 0x5354434b);
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  int n = snprintf(key, KEY_MAX, "%016" PRIx64 "-", h);
  for (const char *p = base; *p && n < KEY_MAX - 1 && n < 72; p++)
    key[n++] = (char)((*p == '.' || *p == '-' || *p == '_' || (*p >= '0' && *p <= '9') ||
                       (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
                          ? *p
                          : '_');
  key[n] = 0;
}

char *stk__cache_path(const char *dir, const char *sub, const char *name, const char *suffix) {
  size_t n = strlen(dir) + strlen(sub) + strlen(name) + strlen(suffix) + 3;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s%s%s%s", dir, sub, *sub ? "/" : "", name, suffix);
  return p;
}

int stk__crc_fd(int fd, uint64_t len, uint32_t *crc) {
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = malloc(CHUNK);
  if (!buf) return STK_ENOMEM;
  uint32_t c = 0;
  int rc = 0;
  for (uint64_t off = 0; off < len && !rc;) {
    size_t want = (size_t)STK__MIN((uint64_t)CHUNK, len - off);
    if (!(rc = stk__pread_full(fd, buf, want, off))) {
      c = stk_crc32c(c, buf, want);
      off += want;
    }
  }
  free(buf);
  *crc = c;
  return rc;
}

int stk__fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return stk__from_errno(errno);
  int rc = fsync(fd) == 0 ? 0 : stk__from_errno(errno);
  close(fd);
  return rc;
}

/* Take an flock, polling so that a cancel flag is honoured; *waited is set
 * when the lock was held by someone else at first. */
int stk__lock_poll(int fd, int how, const int *cancel, int *waited) {
  if (waited) *waited = 0;
  for (;;) {
    if (flock(fd, how | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK && errno != EINTR) return stk__from_errno(errno);
    if (waited) *waited = 1;
    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) return STK_ECANCELED;
    stk_sleep_ns(2000000);
  }
}

/* Create a temporary from tmpl (ending in XXXXXX plus suffixlen bytes) and
 * hold an exclusive flock on it. Another process's sweep removes unlocked
 * temporaries, and may do so between the creation and the flock: then the
 * file is unlinked under us, which fstat tells, and we make another. */
int stk__tmp_create(char *tmpl, int suffixlen) {
  size_t l = strlen(tmpl);
  for (int tries = 0; tries < 100; tries++) {
    memcpy(tmpl + l - suffixlen - 6, "XXXXXX", 6);
    int fd = mkostemps(tmpl, suffixlen, O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 && st.st_nlink > 0) return fd;
    close(fd);
  }
  errno = EAGAIN;
  return -1;
}

/* ---- entry metadata (.meta) ----------------------------------------------- */

int stk__meta_read(const char *path, struct meta *m) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "re");
  if (!f) return stk__from_errno(errno);
  char line[1200];
  int ok = fgets(line, sizeof line, f) && !strncmp(line, META_MAGIC, strlen(META_MAGIC));
  int have = 0;
  while (ok && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *v = strchr(line, '=');
    if (!v) continue;
    *v++ = 0;
    if (!strcmp(line, "origin"))
      snprintf(m->origin, sizeof m->origin, "%s", v), have |= 1;
    else if (!strcmp(line, "size"))
      m->size = strtoull(v, NULL, 10), have |= 2;
    else if (!strcmp(line, "crc32c"))
      m->crc = (uint32_t)strtoul(v, NULL, 16), have |= 4;
    else if (!strcmp(line, "verified"))
      snprintf(m->stamp, sizeof m->stamp, "%s", v);
  }
  fclose(f);
  return ok && have == 7 ? 0 : STK_EFORMAT;
}

/* Write path atomically: a temporary in tmpdir (unique, flock'ed so that
 * sweeps leave it alone), optional fsync, rename over path. */
int stk__meta_write(const char *tmpdir, const char *path, const struct meta *m, int do_fsync) {
  size_t n = strlen(tmpdir) + 24;
  char *tmp = malloc(n);
  if (!tmp) return STK_ENOMEM;
  snprintf(tmp, n, "%s/meta.XXXXXX", tmpdir);
  char buf[1600];
  int len = snprintf(buf, sizeof buf,
                     "%s\norigin=%s\nsize=%" PRIu64 "\ncrc32c=%08" PRIx32 "\nverified=%s\n",
                     META_MAGIC, m->origin, m->size, m->crc, m->stamp);
  int fd = stk__tmp_create(tmp, 0);
  int rc = fd < 0 ? stk__from_errno(errno) : stk__write_full(fd, buf, (size_t)len);
  if (!rc && fchmod(fd, 0644) != 0) rc = stk__from_errno(errno);
  if (!rc && do_fsync && fdatasync(fd) != 0) rc = stk__from_errno(errno);
  if (!rc && rename(tmp, path) != 0) rc = stk__from_errno(errno);
  if (rc && fd >= 0) unlink(tmp);
  if (fd >= 0) close(fd);
  free(tmp);
  return rc;
}

void stk__meta_stamp(const struct stk_cache *c, const struct stat *st, char *out, size_t n) {
  if (!strcmp(c->boot_id, "unknown")) { /* no boot id: every restart re-checks */
    snprintf(out, n, "unstamped");
    return;
  }
  /* mtime, not ctime: ctime moves with every rename and atime update (the
   * LRU stamp), mtime only with writes to the data. */
  snprintf(out, n, "%s %llu %lld.%09ld %lld", c->boot_id, (unsigned long long)st->st_ino,
           (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (long long)st->st_size);
}

/* ---- the directory ---------------------------------------------------------- */

/* Read dir's format file: 0 when it is ours and readable by this version,
 * STK_ENOENT when absent, else an error with a sentence. */
static int dir_check_version(const char *dir, char *err) {
  char vf[4200];
  snprintf(vf, sizeof vf, "%s/STOKER-CACHE", dir);
  FILE *f = fopen(vf, "re");
  if (!f) {
    int e = errno;
    return e == ENOENT ? STK_ENOENT : stk__errf(err, stk__from_errno(e), "%s: %s", vf, strerror(e));
  }
  char line[128] = "";
  int ver = 0, rc = 0;
  if (!fgets(line, sizeof line, f) || sscanf(line, CACHE_MAGIC " %d", &ver) != 1)
    rc = stk__errf(err, STK_ENOTSUP, "%s: not a stoker cache directory (%s holds '%.40s')", dir, vf,
                   line);
  else if (ver > CACHE_VERSION)
    rc = stk__errf(err, STK_ENOTSUP,
                   "%s: cache written by a newer stoker (format %d; this one reads %d): use "
                   "another --cache-dir or remove this one",
                   dir, ver, CACHE_VERSION);
  else if (ver < 1)
    rc = stk__errf(err, STK_ENOTSUP, "%s: unknown cache format %d", dir, ver);
  fclose(f);
  return rc;
}

static const char *const subdirs[] = {"data", "tmp", "lock"};

/* Make dir a cache directory in place (it is absent or holds only what
 * another process's concurrent init made): subdirectories, then the format
 * file, written under a temporary name and renamed in last. */
static int dir_create(const char *dir, char *err) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    int e = errno;
    return stk__errf(err, stk__from_errno(e), "%s: cannot create the cache directory: %s", dir,
                     strerror(e));
  }
  char p[4300];
  int rc = 0;
  for (size_t i = 0; !rc && i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, subdirs[i]);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = stk__from_errno(errno);
  }
  snprintf(p, sizeof p, "%s/.STOKER-CACHE.XXXXXX", dir);
  int fd = rc ? -1 : mkostemp(p, O_CLOEXEC);
  if (!rc && fd < 0) rc = stk__from_errno(errno);
  char line[32];
  int len = snprintf(line, sizeof line, CACHE_MAGIC " %d\n", CACHE_VERSION);
  if (!rc && (rc = stk__write_full(fd, line, (size_t)len)) == 0 && fchmod(fd, 0644) != 0)
    rc = stk__from_errno(errno);
  if (fd >= 0) close(fd);
  char vf[4300];
  snprintf(vf, sizeof vf, "%s/STOKER-CACHE", dir);
  if (!rc && rename(p, vf) != 0) rc = stk__from_errno(errno);
  if (fd >= 0 && rc) unlink(p);
  if (rc)
    return stk__errf(err, rc, "%s: cannot create the cache directory: %s", dir, stk_strerror(rc));
  return 0;
}

/* Whether name is something dir_create makes (so a directory holding only
 * such names is one being initialized, not someone else's). */
static int ours(const char *name) {
  for (size_t i = 0; i < 3; i++)
    if (!strcmp(name, subdirs[i])) return 1;
  return !strncmp(name, ".STOKER-CACHE.", 14);
}

/* Check dir is a cache directory this stoker reads; with create, make it
 * when absent or empty (never adopt a directory holding other files, since
 * eviction deletes). With ro given, a cache this process may read but not
 * write (a read-only mount, another user's directory) is accepted and *ro
 * set: its entries are served, nothing is added, swept or evicted. */
int stk__dir_prepare(const char *dir, int create, int *ro, char *err) {
  if (ro) *ro = 0;
  int rc = dir_check_version(dir, err);
  if (rc == STK_ENOENT && !create)
    return stk__errf(err, STK_ENOENT, "%s: not a stoker cache directory (no STOKER-CACHE file)",
                     dir);
  if (rc == STK_ENOENT) {
    DIR *d = opendir(dir);
    if (d) {
      struct dirent *de;
      const char *other = NULL;
      while (!other && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !ours(de->d_name))
          other = de->d_name;
      if (other && dir_check_version(dir, err) == STK_ENOENT)
        rc = stk__errf(err, STK_ENOTSUP,
                       "%s: not empty and not a stoker cache directory (found '%s'); give an "
                       "empty or new directory",
                       dir, other);
      closedir(d);
      if (rc != STK_ENOENT) return rc;
    } else if (errno != ENOENT) {
      int e = errno;
      return stk__errf(err, stk__from_errno(e), "%s: %s", dir, strerror(e));
    }
    if ((rc = dir_create(dir, err)) != 0) return rc;
    if ((rc = dir_check_version(dir, err)) != 0)
      return rc == STK_ENOENT ? stk__errf(err, rc, "%s: cache directory vanished", dir) : rc;
  }
  if (rc) return rc;
  if (ro) {
    /* Readable but not writable: serve it read-only. */
    char *p = stk__cache_path(dir, "", "data", "");
    if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
    int readable = access(p, R_OK | X_OK) == 0;
    int writable = access(p, W_OK) == 0 && access(dir, W_OK) == 0;
    int e = errno;
    free(p);
    if (readable && !writable && (e == EROFS || e == EACCES || e == EPERM)) {
      *ro = 1;
      return 0;
    }
  }
  for (size_t i = 0; i < 3; i++) {
    char *p = stk__cache_path(dir, "", subdirs[i], "");
    if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      rc = stk__from_errno(errno);
    else if (access(p, W_OK | X_OK) != 0)
      rc = stk__from_errno(errno);
    if (rc) stk__errf(err, rc, "%s: %s", p, stk_strerror(rc));
    free(p);
    if (rc) return rc;
  }
  return 0;
}

/* Remove what interrupted fills left: temporaries nobody holds, .meta
 * files without data. Returns how many files were removed. */
uint64_t stk__dir_sweep(const char *dir) {
  uint64_t removed = 0;
  char *tdir = stk__cache_path(dir, "", "tmp", "");
  DIR *d = tdir ? opendir(tdir) : NULL;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dirfd(d), de->d_name, 0) == 0) removed++;
    close(fd);
  }
  if (d) closedir(d);
  free(tdir);
  char *ddir = stk__cache_path(dir, "", "data", "");
  d = ddir ? opendir(ddir) : NULL;
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name);
    struct stat st;
    if (l > 5 && !strcmp(de->d_name + l - 5, ".meta")) {
      char data[300];
      snprintf(data, sizeof data, "%.*s", (int)(l - 5), de->d_name);
      if (fstatat(dirfd(d), data, &st, 0) == 0 || errno != ENOENT) continue;
      /* No data: garbage, unless a fill is between its two renames (it
       * holds the shard's fill lock). */
      char *lp = stk__cache_path(dir, "lock", data, "");
      int lfd = lp ? open(lp, O_RDWR | O_CLOEXEC) : -1;
      int idle = lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) == 0;
      if (idle && fstatat(dirfd(d), data, &st, 0) != 0 && unlinkat(dirfd(d), de->d_name, 0) == 0)
        removed++;
      if (lfd >= 0) close(lfd);
      free(lp);
    }
  }
  if (d) closedir(d);
  free(ddir);
  return removed;
}

static int dent_cmp(const void *a, const void *b) {
  const struct dent *x = a, *y = b;
  if (x->atime.tv_sec != y->atime.tv_sec) return x->atime.tv_sec < y->atime.tv_sec ? -1 : 1;
  return (x->atime.tv_nsec > y->atime.tv_nsec) - (x->atime.tv_nsec < y->atime.tv_nsec);
}

/* The committed entries of dir (data files), with sizes and last use. */
int stk__dir_entries(const char *dir, struct dent **out, size_t *n, uint64_t *bytes) {
  *out = NULL;
  *n = 0;
  *bytes = 0;
  char *ddir = stk__cache_path(dir, "", "data", "");
  DIR *d = ddir ? opendir(ddir) : NULL;
  free(ddir);
  if (!d) return stk__from_errno(errno);
  size_t cap = 0;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    size_t l = strlen(de->d_name);
    if ((l > 5 && !strcmp(de->d_name + l - 5, ".meta")) || strstr(de->d_name, ".meta.") ||
        l >= KEY_MAX)
      continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 64;
      struct dent *p = realloc(*out, cap * sizeof *p);
      if (!p) {
        rc = STK_ENOMEM;
        break;
      }
      *out = p;
    }
    struct dent *x = &(*out)[(*n)++];
    snprintf(x->name, sizeof x->name, "%.*s", KEY_MAX - 1, de->d_name);
    x->bytes = (uint64_t)st.st_size;
    x->atime = st.st_atim;
    *bytes += x->bytes;
  }
  closedir(d);
  return rc;
}

/* Remove entry name unless some process holds it (shared flock) or is
 * filling it (its fill lock: a re-stage, or a fill between its commit and
 * its shared lock). */
static int evict_one(const char *dir, const char *name) {
  char *data = stk__cache_path(dir, "data", name, ""),
       *meta = stk__cache_path(dir, "data", name, ".meta");
  char *lp = stk__cache_path(dir, "lock", name, "");
  int done = 0;
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  int fd = lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0 && data ? open(data, O_RDONLY | O_CLOEXEC)
                                                                  : -1;
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    /* Data first: a .meta without data is garbage the next sweep removes,
     * while data without its .meta would never be served anyway. */
    done = unlink(data) == 0;
    if (meta) unlink(meta);
  }
  if (fd >= 0) close(fd);
  if (lfd >= 0) close(lfd);
  free(data);
  free(meta);
  free(lp);
  return done;
}

uint64_t stk__fs_free(const char *dir) {
  struct statvfs v;
  if (statvfs(dir, &v) != 0) return UINT64_MAX;
  return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Evict least recently used entries (not in use) until the directory
 * holds at most keep bytes and the file system has at least free_floor
 * free. Serialized across processes by lock/evict. Returns the entries
 * evicted; *used gets the bytes left. */
uint64_t stk__dir_evict_lru(const char *dir, uint64_t keep, uint64_t free_floor, uint64_t *used) {
  char *lp = stk__cache_path(dir, "lock", "evict", "");
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  free(lp);
  if (lfd >= 0) flock(lfd, LOCK_EX);
  struct dent *v;
  size_t n;
  uint64_t bytes, evicted = 0;
  if (stk__dir_entries(dir, &v, &n, &bytes) == 0) {
    if (n) qsort(v, n, sizeof *v, dent_cmp);
    for (size_t i = 0; i < n && (bytes > keep || stk__fs_free(dir) < free_floor); i++)
      if (evict_one(dir, v[i].name)) {
        bytes -= v[i].bytes;
        evicted++;
      }
  }
  free(v);
  if (used) *used = bytes;
  if (lfd >= 0) close(lfd);
  return evicted;
}

/* ---- stats ------------------------------------------------------------------------ */

#define STAT_FIELDS(X)                                                                        \
  X(ram_hits, ram.hits)                                                                       \
  X(ram_misses, ram.misses) X(ram_evictions, ram.evictions) X(disk_hits, disk.hits)           \
      X(disk_misses, disk.misses) X(disk_evictions, disk.evictions) X(fetches, fetches)       \
          X(fetch_bytes, fetch_bytes) X(shared_waits, shared_waits) X(prefetched, prefetched) \
              X(stalls, stalls) X(restages, restages) X(retries, retries) X(errors, errors)   \
                  X(requests, requests) X(disk_full, disk_full) X(stall_ns, stall_ns)         \
                      X(missing, missing) X(origin_checked, origin_checked)

/* Read the counters of DIR/stats into *sum (zeros when absent). */
static void stats_file_read(const char *path, struct stk_cache_stats *sum) {
  FILE *f = path ? fopen(path, "re") : NULL;
  char k[64];
  unsigned long long v;
  while (f && fscanf(f, "%63s %llu", k, &v) == 2) {
#define RD(name, field) \
  if (!strcmp(k, #name)) sum->field = v;
    STAT_FIELDS(RD)
#undef RD
  }
  if (f) fclose(f);
}

void stk__dir_add_stats(const char *dir, const struct stk_cache_stats *s) {
  char *lp = stk__cache_path(dir, "lock", "stats", ""), *sp = stk__cache_path(dir, "", "stats", "");
  char *tp = stk__cache_path(dir, "", "stats", ".new");
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (lfd >= 0 && flock(lfd, LOCK_EX) == 0) {
    struct stk_cache_stats sum = {0};
    stats_file_read(sp, &sum);
    FILE *w = tp ? fopen(tp, "we") : NULL;
    if (w) {
#define WR(name, field) fprintf(w, "%s %llu\n", #name, (unsigned long long)(sum.field + s->field));
      STAT_FIELDS(WR)
#undef WR
      if (fclose(w) == 0)
        rename(tp, sp);
      else
        unlink(tp);
    }
  }
  if (lfd >= 0) close(lfd);
  free(lp);
  free(sp);
  free(tp);
}

/* ---- managing a directory (stoker cache) ----------------------------------------- */

int stk__cache_dir_check(const char *dir, char *err) {
  int ro;
  return stk__dir_prepare(dir, 1, &ro, err);
}

int stk_cache_dir_scan(const char *dir, int (*cb)(void *arg, const struct stk_cache_dir_entry *e),
                       void *arg, struct stk_cache_stats *totals, char *errmsg) {
  int ro, rc = stk__dir_prepare(dir, 0, &ro, errmsg);
  if (rc) return rc;
  struct dent *v;
  size_t n;
  uint64_t bytes;
  if ((rc = stk__dir_entries(dir, &v, &n, &bytes)) != 0)
    return stk__errf(errmsg, rc, "%s/data: %s", dir, stk_strerror(rc));
  if (n) qsort(v, n, sizeof *v, dent_cmp);
  for (size_t i = 0; i < n && cb; i++) {
    struct stk_cache_dir_entry e = {0};
    snprintf(e.key, sizeof e.key, "%.*s", (int)sizeof e.key - 1, v[i].name);
    e.bytes = v[i].bytes;
    e.last_use_ns = (uint64_t)v[i].atime.tv_sec * 1000000000ull + (uint64_t)v[i].atime.tv_nsec;
    char *mp = stk__cache_path(dir, "data", v[i].name, ".meta"),
         *dp = stk__cache_path(dir, "data", v[i].name, "");
    struct meta m;
    if (mp && stk__meta_read(mp, &m) == 0) snprintf(e.origin, sizeof e.origin, "%s", m.origin);
    int fd = dp ? open(dp, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
      e.in_use = flock(fd, LOCK_EX | LOCK_NB) != 0;
      close(fd);
    }
    free(mp);
    free(dp);
    if ((rc = cb(arg, &e)) != 0) break;
  }
  free(v);
  if (totals) { /* the caller's struct gets no more than its struct_size */
    struct stk_cache_stats full = {0};
    full.disk.entries = n;
    full.disk.bytes = bytes;
    char *sp = stk__cache_path(dir, "", "stats", "");
    stats_file_read(sp, &full);
    free(sp);
    stk__result_give(totals, &full, sizeof full);
  }
  return rc;
}

int stk_cache_dir_verify(const char *dir, uint64_t *checked, uint64_t *removed, char *errmsg) {
  *checked = *removed = 0;
  int rc = stk__dir_prepare(dir, 0, NULL, errmsg);
  if (rc) return rc;
  stk__dir_sweep(dir);
  struct dent *v;
  size_t n;
  uint64_t bytes;
  if ((rc = stk__dir_entries(dir, &v, &n, &bytes)) != 0)
    return stk__errf(errmsg, rc, "%s/data: %s", dir, stk_strerror(rc));
  for (size_t i = 0; i < n; i++) {
    char *mp = stk__cache_path(dir, "data", v[i].name, ".meta"),
         *dp = stk__cache_path(dir, "data", v[i].name, "");
    struct meta m;
    int fd = dp ? open(dp, O_RDONLY | O_CLOEXEC) : -1;
    int bad = 1;
    if (fd >= 0 && mp && stk__meta_read(mp, &m) == 0 && m.size == v[i].bytes) {
      uint32_t crc;
      bad = stk__crc_fd(fd, m.size, &crc) != 0 || crc != m.crc;
    }
    if (fd >= 0) close(fd);
    (*checked)++;
    if (bad && evict_one(dir, v[i].name)) {
      stk_log(STK_LOG_WARN, "cache: %s/data/%s is corrupt; removed (re-staged on next use)", dir,
              v[i].name);
      (*removed)++;
    }
    free(mp);
    free(dp);
  }
  free(v);
  return 0;
}

int stk_cache_dir_evict(const char *dir, uint64_t keep_bytes, uint64_t *evicted, char *errmsg) {
  int rc = stk__dir_prepare(dir, 0, NULL, errmsg);
  if (rc) return rc;
  stk__dir_sweep(dir);
  *evicted = stk__dir_evict_lru(dir, keep_bytes, 0, NULL);
  return 0;
}
