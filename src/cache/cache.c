/* The shard cache: RAM tier, disk tier, fill protocol, fetchers.
 *
 * Disk tier layout (docs/internals/cache.md has the full story):
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "cache_impl.h"

#define CACHE_MAGIC "stoker-cache"
#define CACHE_VERSION 1
#define META_MAGIC "stoker-cache-entry 1"
#define KEY_MAX 96
#define FILL_ATTEMPTS 3 /* whole-shard refetches after a checksum mismatch */

enum { E_NONE = 0, E_QUEUED, E_BUSY, E_READY };

struct entry {
  int state;
  int disk_fd;      /* READY from the disk tier: open, flock(LOCK_SH) */
  int ram_fd;       /* READY in the RAM tier: a memfd */
  uint32_t pins;
  uint64_t size;    /* UINT64_MAX until known */
  uint64_t lru;     /* RAM tier clock of the last use */
  int verified;     /* the disk copy's checksum was checked by this process */
  int in_queue;     /* has a place in the fetchers' queue (at most one, so
                       the queue never holds more than n) */
};

struct stk_cache {
  struct stk_origin *origin;
  struct stk_cache_opts o;
  char *dir;                    /* disk tier root, or NULL */
  char *tmpdir;                 /* dir/tmp */
  int dir_ok;                   /* dir checked and in use (stats go there at close) */
  int ro;                       /* dir is read-only here: hits served, misses kept in RAM */
  struct stk_cache_shard *tab;  /* names owned (one block) */
  struct entry *e;
  size_t n;
  char boot_id[40];

  pthread_mutex_t mu;
  pthread_cond_t cv;            /* an entry left E_BUSY; the queue changed */
  size_t *queue;                /* shards to prefetch, FIFO ring */
  size_t q_head, q_len;
  int stop;
  pthread_t *fetchers;
  uint32_t nfetchers;

  uint64_t ram_budget, ram_used, ram_clock;
  uint64_t disk_budget, disk_used; /* used: estimate, rescanned when full */
  uint64_t disk_reserved;          /* bytes of this process's fills in flight */
  pthread_mutex_t disk_mu;         /* disk_used and disk_reserved */
  uint64_t min_free;
  int disk_full_warned;

  /* Counters (under mu). */
  struct stk_cache_stats st;
  struct stk_hist fetch_hist;
};

/* ---- small helpers -------------------------------------------------------- */

static uint64_t fnv1a64(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* Name of shard i in the directory: a hash of origin and name, then the
 * name's last component (for people listing the directory). */
static void shard_key(const struct stk_cache *c, size_t i, char *key) {
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

static char *pathf(const char *dir, const char *sub, const char *name, const char *suffix) {
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

static void read_boot_id(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
  fclose(f);
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return stk__from_errno(errno);
  int rc = fsync(fd) == 0 ? 0 : stk__from_errno(errno);
  close(fd);
  return rc;
}

/* Take an flock, polling so that a cancel flag is honoured; *waited is set
 * when the lock was held by someone else at first. */
static int lock_poll(int fd, int how, const int *cancel, int *waited) {
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
static int tmp_create(char *tmpl, int suffixlen) {
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

struct meta {
  char origin[1024];
  uint64_t size;
  uint32_t crc;
  char stamp[160]; /* "boot ino ctime_ns size" of the last full check */
};

static int meta_read(const char *path, struct meta *m) {
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
    if (!strcmp(line, "origin")) snprintf(m->origin, sizeof m->origin, "%s", v), have |= 1;
    else if (!strcmp(line, "size")) m->size = strtoull(v, NULL, 10), have |= 2;
    else if (!strcmp(line, "crc32c")) m->crc = (uint32_t)strtoul(v, NULL, 16), have |= 4;
    else if (!strcmp(line, "verified")) snprintf(m->stamp, sizeof m->stamp, "%s", v);
  }
  fclose(f);
  return ok && have == 7 ? 0 : STK_EFORMAT;
}

/* Write path atomically: a temporary in tmpdir (unique, flock'ed so that
 * sweeps leave it alone), optional fsync, rename over path. */
static int meta_write(const char *tmpdir, const char *path, const struct meta *m, int do_fsync) {
  size_t n = strlen(tmpdir) + 24;
  char *tmp = malloc(n);
  if (!tmp) return STK_ENOMEM;
  snprintf(tmp, n, "%s/meta.XXXXXX", tmpdir);
  char buf[1600];
  int len = snprintf(buf, sizeof buf, "%s\norigin=%s\nsize=%" PRIu64 "\ncrc32c=%08" PRIx32
                     "\nverified=%s\n", META_MAGIC, m->origin, m->size, m->crc, m->stamp);
  int fd = tmp_create(tmp, 0);
  int rc = fd < 0 ? stk__from_errno(errno) : stk__write_full(fd, buf, (size_t)len);
  if (!rc && fchmod(fd, 0644) != 0) rc = stk__from_errno(errno);
  if (!rc && do_fsync && fdatasync(fd) != 0) rc = stk__from_errno(errno);
  if (!rc && rename(tmp, path) != 0) rc = stk__from_errno(errno);
  if (rc && fd >= 0) unlink(tmp);
  if (fd >= 0) close(fd);
  free(tmp);
  return rc;
}

static void make_stamp(const struct stk_cache *c, const struct stat *st, char *out, size_t n) {
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
    rc = stk__errf(err, STK_ENOTSUP, "%s: not a stoker cache directory (%s holds '%.40s')", dir,
                   vf, line);
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
  if (rc) return stk__errf(err, rc, "%s: cannot create the cache directory: %s", dir, stk_strerror(rc));
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
static int dir_prepare(const char *dir, int create, int *ro, char *err) {
  if (ro) *ro = 0;
  int rc = dir_check_version(dir, err);
  if (rc == STK_ENOENT && !create)
    return stk__errf(err, STK_ENOENT, "%s: not a stoker cache directory (no STOKER-CACHE file)", dir);
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
    char *p = pathf(dir, "", "data", "");
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
    char *p = pathf(dir, "", subdirs[i], "");
    if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
    if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = stk__from_errno(errno);
    else if (access(p, W_OK | X_OK) != 0) rc = stk__from_errno(errno);
    if (rc) stk__errf(err, rc, "%s: %s", p, stk_strerror(rc));
    free(p);
    if (rc) return rc;
  }
  return 0;
}

/* Remove what interrupted fills left: temporaries nobody holds, .meta
 * files without data. Returns how many files were removed. */
static uint64_t dir_sweep(const char *dir) {
  uint64_t removed = 0;
  char *tdir = pathf(dir, "", "tmp", "");
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
  char *ddir = pathf(dir, "", "data", "");
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
      char *lp = pathf(dir, "lock", data, "");
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

struct dent {
  char name[KEY_MAX];
  uint64_t bytes;
  struct timespec atime;
};

static int dent_cmp(const void *a, const void *b) {
  const struct dent *x = a, *y = b;
  if (x->atime.tv_sec != y->atime.tv_sec) return x->atime.tv_sec < y->atime.tv_sec ? -1 : 1;
  return (x->atime.tv_nsec > y->atime.tv_nsec) - (x->atime.tv_nsec < y->atime.tv_nsec);
}

/* The committed entries of dir (data files), with sizes and last use. */
static int dir_entries(const char *dir, struct dent **out, size_t *n, uint64_t *bytes) {
  *out = NULL;
  *n = 0;
  *bytes = 0;
  char *ddir = pathf(dir, "", "data", "");
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
  char *data = pathf(dir, "data", name, ""), *meta = pathf(dir, "data", name, ".meta");
  char *lp = pathf(dir, "lock", name, "");
  int done = 0;
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  int fd = lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0 && data ? open(data, O_RDONLY | O_CLOEXEC) : -1;
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

static uint64_t fs_free(const char *dir) {
  struct statvfs v;
  if (statvfs(dir, &v) != 0) return UINT64_MAX;
  return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Evict least recently used entries (not in use) until the directory
 * holds at most keep bytes and the file system has at least free_floor
 * free. Serialized across processes by lock/evict. Returns the entries
 * evicted; *used gets the bytes left. */
static uint64_t dir_evict_lru(const char *dir, uint64_t keep, uint64_t free_floor,
                              uint64_t *used) {
  char *lp = pathf(dir, "lock", "evict", "");
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  free(lp);
  if (lfd >= 0) flock(lfd, LOCK_EX);
  struct dent *v;
  size_t n;
  uint64_t bytes, evicted = 0;
  if (dir_entries(dir, &v, &n, &bytes) == 0) {
    if (n) qsort(v, n, sizeof *v, dent_cmp);
    for (size_t i = 0; i < n && (bytes > keep || fs_free(dir) < free_floor); i++)
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

/* Make room on the disk tier for need more bytes, and reserve them (so
 * that this process's concurrent fills count each other); the fill gives
 * the reservation back with disk_unreserve(). */
static void disk_make_room(struct stk_cache *c, uint64_t need) {
  /* disk_mu orders this against commits, so a rescan's figure never
   * loses a fill that committed meanwhile. */
  pthread_mutex_lock(&c->disk_mu);
  uint64_t fr = fs_free(c->dir), others = c->disk_reserved;
  int fits = c->disk_used + others + need <= c->disk_budget &&
             (fr == UINT64_MAX || fr >= c->min_free + need);
  c->disk_reserved += need;
  if (!fits) {
    uint64_t keep = c->disk_budget > need + others ? c->disk_budget - need - others : 0, used = 0;
    uint64_t ev = dir_evict_lru(c->dir, keep, c->min_free + need, &used);
    c->disk_used = used;
    pthread_mutex_lock(&c->mu);
    c->st.disk.evictions += ev;
    pthread_mutex_unlock(&c->mu);
  }
  pthread_mutex_unlock(&c->disk_mu);
}

static void disk_unreserve(struct stk_cache *c, uint64_t need, uint64_t committed) {
  pthread_mutex_lock(&c->disk_mu);
  c->disk_reserved -= need;
  c->disk_used += committed;
  pthread_mutex_unlock(&c->disk_mu);
}

/* ---- the disk tier ---------------------------------------------------------- */

/* Look shard i up in the directory: 0 with *fd open and share-locked,
 * STK_ENOENT when absent, STK_ECRC when present but not trustworthy (the
 * caller re-stages it under the fill lock). */
static int disk_lookup(struct stk_cache *c, size_t i, const char *key, int *out) {
  char *data = pathf(c->dir, "data", key, ""), *mp = pathf(c->dir, "data", key, ".meta");
  int rc = 0, fd = -1;
  struct stat st;
  struct meta m;
  if (!data || !mp) rc = STK_ENOMEM;
  else if ((fd = open(data, O_RDONLY | O_CLOEXEC)) < 0) rc = errno == ENOENT ? STK_ENOENT : stk__from_errno(errno);
  else if (flock(fd, LOCK_SH) != 0 || fstat(fd, &st) != 0) rc = stk__from_errno(errno);
  else if (st.st_nlink == 0) rc = STK_ENOENT; /* evicted while we waited for the lock */
  else if (meta_read(mp, &m) != 0 || strcmp(m.origin, stk__origin_url(c->origin)) ||
           m.size != (uint64_t)st.st_size ||
           (c->tab[i].size != UINT64_MAX && c->tab[i].size != m.size) ||
           (c->tab[i].has_crc && c->tab[i].crc32c != m.crc)) {
    stk_log(STK_LOG_WARN, "cache: %s: cached copy of %s does not match its record; re-staging",
            key, c->tab[i].name);
    rc = STK_ECRC;
  } else {
    pthread_mutex_lock(&c->mu);
    int verified = c->e[i].verified;
    pthread_mutex_unlock(&c->mu);
    char stamp[160];
    make_stamp(c, &st, stamp, sizeof stamp);
    if (!verified && (strcmp(stamp, m.stamp) || !strcmp(stamp, "unstamped"))) {
      /* First use since a restart (or since the file changed): check it. */
      uint32_t crc;
      if ((rc = stk__crc_fd(fd, m.size, &crc)) == 0 && crc != m.crc) {
        stk_log(STK_LOG_WARN, "cache: %s: checksum mismatch in the cached copy of %s; re-staging",
                key, c->tab[i].name);
        rc = STK_ECRC;
      } else if (!rc) {
        snprintf(m.stamp, sizeof m.stamp, "%s", stamp);
        meta_write(c->tmpdir, mp, &m, 0); /* a lost stamp only costs a re-check */
      } else {
        rc = STK_ECRC;
      }
    }
    if (!rc) {
      struct timespec ts[2] = {{.tv_nsec = UTIME_NOW}, {.tv_nsec = UTIME_OMIT}};
      futimens(fd, ts); /* last use, for LRU; the data's mtime is left alone */
      pthread_mutex_lock(&c->mu);
      c->e[i].verified = 1;
      c->e[i].size = m.size;
      pthread_mutex_unlock(&c->mu);
    }
  }
  if (rc && fd >= 0) close(fd);
  else if (!rc) *out = fd;
  free(data);
  free(mp);
  return rc;
}

/* Set by fetch_into() in the thread that fetched: tells an acquire that
 * staged the shard itself whether it waited for the origin (a stall) or
 * only looked the shard up on disk. */
static __thread int fetched_here;

static void note_fetch(struct stk_cache *c, uint64_t ns) {
  fetched_here = 1;
  pthread_mutex_lock(&c->mu);
  c->st.fetches++;
  stk__hist_add(&c->fetch_hist, ns);
  pthread_mutex_unlock(&c->mu);
}

/* Fetch shard i from the origin into fd (from offset 0) and check it:
 * size as announced, CRC32C as the manifest says. Refetches after a
 * mismatch. *crc gets the checksum of what was kept. */
static int fetch_into(struct stk_cache *c, size_t i, int fd, uint64_t *size, uint32_t *crc,
                      const int *cancel, char *err) {
  const struct stk_cache_shard *s = &c->tab[i];
  int rc = 0;
  uint64_t t0 = stk_now_ns();
  for (int attempt = 1; attempt <= FILL_ATTEMPTS; attempt++) {
    struct stk_obj_info info = {0};
    /* A new file is empty (its blocks reserved with KEEP_SIZE); a retry
     * starts from nothing again. */
    if (attempt > 1 && ftruncate(fd, 0) != 0)
      return stk__errf(err, stk__from_errno(errno), "cache: truncate failed");
    rc = stk__origin_get(c->origin, s->name, 0, s->size == UINT64_MAX ? UINT64_MAX : s->size, fd,
                         0, &info, cancel, err);
    if (rc) return rc;
    struct stat st;
    if (fstat(fd, &st) != 0) return stk__errf(err, stk__from_errno(errno), "cache: fstat failed");
    uint64_t got = (uint64_t)st.st_size;
    if (info.has_crc) *crc = info.crc32c;
    if (s->size != UINT64_MAX && got != s->size) {
      rc = stk__errf(err, STK_ETRUNC, "%s/%s: %llu bytes fetched but the manifest says %llu",
                     stk__origin_url(c->origin), s->name, (unsigned long long)got,
                     (unsigned long long)s->size);
    } else if (!info.has_crc && (rc = stk__crc_fd(fd, got, crc)) != 0) {
      /* (an origin that checksummed the bytes as they came spares this) */
      return stk__errf(err, rc, "cache: cannot read back %s: %s", s->name, stk_strerror(rc));
    } else if (s->has_crc && *crc != s->crc32c) {
      rc = stk__errf(err, STK_ECRC,
                     "%s/%s: checksum mismatch after fetch (crc32c %08x, manifest %08x)",
                     stk__origin_url(c->origin), s->name, *crc, s->crc32c);
    } else {
      *size = got;
      note_fetch(c, stk_now_ns() - t0);
      return 0;
    }
    stk_log(STK_LOG_WARN, "cache: %s (attempt %d of %d)", err, attempt, FILL_ATTEMPTS);
    pthread_mutex_lock(&c->mu);
    c->st.retries++;
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

/* Stage shard i in the disk tier under its fill lock; *out: an open,
 * share-locked descriptor of the committed file. */
static int disk_fill(struct stk_cache *c, size_t i, const char *key, int *out,
                     const int *cancel, char *err) {
  char *lp = pathf(c->dir, "lock", key, "");
  char *tp = pathf(c->dir, "tmp", key, ".XXXXXX");
  char *data = pathf(c->dir, "data", key, ""), *mp = pathf(c->dir, "data", key, ".meta");
  int rc = 0, lfd = -1, tfd = -1, waited = 0;
  uint64_t reserved = 0;
  if (!lp || !tp || !data || !mp) {
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
    goto out;
  }
  if ((lfd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s: %s", lp, strerror(e));
    goto out;
  }
  if ((rc = lock_poll(lfd, LOCK_EX, cancel, &waited)) != 0) {
    stk__errf(err, rc, "%s: %s", lp, stk_strerror(rc));
    goto out;
  }
  /* Someone may have filled it while we waited (the one-download rule). */
  rc = disk_lookup(c, i, key, out);
  if (rc == 0) {
    pthread_mutex_lock(&c->mu);
    if (waited) c->st.shared_waits++;
    c->st.disk.hits++;
    pthread_mutex_unlock(&c->mu);
    goto out;
  }
  if (rc == STK_ECRC) {
    unlink(data);
    unlink(mp);
    pthread_mutex_lock(&c->mu);
    c->st.restages++;
    pthread_mutex_unlock(&c->mu);
  } else if (rc != STK_ENOENT) {
    stk__errf(err, rc, "%s/data/%s: %s", c->dir, key, stk_strerror(rc));
    goto out;
  }
  pthread_mutex_lock(&c->mu);
  c->st.disk.misses++;
  pthread_mutex_unlock(&c->mu);

  uint64_t want = c->tab[i].size;
  if (want == UINT64_MAX) {
    struct stk_obj_info info;
    if ((rc = stk__origin_stat(c->origin, c->tab[i].name, &info, err)) != 0) goto out;
    want = info.size;
  }
  if (want > c->disk_budget) {
    rc = stk__errf(err, STK_ENOSPC, "%s: %s (%llu bytes) is larger than the disk tier's budget",
                   c->dir, c->tab[i].name, (unsigned long long)want);
    goto out;
  }
  disk_make_room(c, want);
  reserved = want;
  if ((tfd = tmp_create(tp, 0)) < 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s/tmp: cannot create a file: %s", c->dir, strerror(e));
    goto out;
  }
  if (want && fallocate(tfd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) != 0 && errno == ENOSPC) {
    disk_unreserve(c, reserved, 0);
    disk_make_room(c, reserved = want + c->min_free);
    if (fallocate(tfd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) != 0 && errno == ENOSPC) {
      rc = stk__errf(err, STK_ENOSPC, "%s: no space for %s (%llu bytes): file system full",
                     c->dir, c->tab[i].name, (unsigned long long)want);
      goto out;
    }
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  if ((rc = fetch_into(c, i, tfd, &size, &crc, cancel, err)) != 0) goto out;
  if (!c->o.no_fsync && fdatasync(tfd) != 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s: fsync failed: %s", tp, strerror(e));
    goto out;
  }
  struct meta m = {.size = size, .crc = crc};
  snprintf(m.origin, sizeof m.origin, "%s", stk__origin_url(c->origin));
  struct stat st;
  if (fstat(tfd, &st) == 0) make_stamp(c, &st, m.stamp, sizeof m.stamp); /* checked just now */
  if ((rc = meta_write(c->tmpdir, mp, &m, !c->o.no_fsync)) != 0 || rename(tp, data) != 0) {
    if (!rc) rc = stk__from_errno(errno);
    stk__errf(err, rc, "%s/data/%s: cannot commit: %s", c->dir, key, stk_strerror(rc));
    goto out;
  }
  if (!c->o.no_fsync) {
    char *dd = pathf(c->dir, "", "data", "");
    if (dd) fsync_dir(dd);
    free(dd);
  }
  /* The renamed temporary is the entry: keep it, share-locked. */
  flock(tfd, LOCK_SH);
  *out = tfd;
  tfd = -1;
  disk_unreserve(c, reserved, size);
  reserved = 0;
  pthread_mutex_lock(&c->mu);
  c->e[i].verified = 1;
  c->e[i].size = size;
  pthread_mutex_unlock(&c->mu);
out:
  if (reserved) disk_unreserve(c, reserved, 0);
  if (tfd >= 0) {
    unlink(tp);
    close(tfd);
  }
  if (lfd >= 0) close(lfd);
  free(lp);
  free(tp);
  free(data);
  free(mp);
  return rc;
}

/* ---- the RAM tier ----------------------------------------------------------- */

/* Evict unpinned RAM entries, least recently used first, until need more
 * bytes fit. Called with mu held. */
static void ram_make_room(struct stk_cache *c, uint64_t need) {
  while (c->ram_used + need > c->ram_budget) {
    struct entry *v = NULL;
    for (size_t i = 0; i < c->n; i++) {
      struct entry *x = &c->e[i];
      if (x->state == E_READY && x->ram_fd >= 0 && x->pins == 0 && (!v || x->lru < v->lru))
        v = x;
    }
    if (!v) return;
    close(v->ram_fd);
    v->ram_fd = -1;
    c->ram_used -= v->size;
    c->st.ram.evictions++;
    if (v->disk_fd < 0) v->state = E_NONE;
  }
}

static int new_memfd(uint64_t size, char *err) {
  int fd = memfd_create("stoker-shard", MFD_CLOEXEC);
  if (fd < 0) return stk__errf(err, stk__from_errno(errno), "memfd_create failed: %s", strerror(errno));
  if (size != UINT64_MAX && ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return stk__errf(err, STK_ENOMEM, "cannot size a RAM-tier buffer of %llu bytes",
                     (unsigned long long)size);
  }
  return fd;
}

/* Copy size bytes of src into a new memfd. */
static int ram_copy(int src, uint64_t size, int *out, char *err) {
  int fd = new_memfd(size, err);
  if (fd < 0) return fd;
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = malloc(CHUNK);
  int rc = buf ? 0 : STK_ENOMEM;
  for (uint64_t off = 0; !rc && off < size;) {
    size_t n = (size_t)STK__MIN((uint64_t)CHUNK, size - off);
    if (!(rc = stk__pread_full(src, buf, n, off))) {
      ssize_t w = pwrite(fd, buf, n, (off_t)off);
      rc = w == (ssize_t)n ? 0 : STK_ENOMEM;
      off += n;
    }
  }
  free(buf);
  if (rc) {
    close(fd);
    return stk__errf(err, rc, "cannot copy a shard into the RAM tier: %s", stk_strerror(rc));
  }
  *out = fd;
  return 0;
}

/* ---- staging ----------------------------------------------------------------- */

/* Bring shard i into a tier: RAM (when the RAM tier is on) or disk. Runs
 * without mu, with the entry E_BUSY (so only this thread stages it). */
static int stage(struct stk_cache *c, size_t i, int *disk_fd, int *ram_fd, const int *cancel,
                 char *err) {
  *disk_fd = *ram_fd = -1;
  int rc = 0;
  if (c->dir) {
    char key[KEY_MAX];
    shard_key(c, i, key);
    rc = disk_lookup(c, i, key, disk_fd);
    if (rc == 0) {
      pthread_mutex_lock(&c->mu);
      c->st.disk.hits++;
      pthread_mutex_unlock(&c->mu);
    } else if (c->ro) {
      /* Nothing can be added: fetched into memory below. */
      pthread_mutex_lock(&c->mu);
      c->st.disk.misses++;
      pthread_mutex_unlock(&c->mu);
      rc = 0;
    } else {
      rc = disk_fill(c, i, key, disk_fd, cancel, err);
      if (rc == STK_ENOSPC) {
        /* Disk full: serve this shard from memory rather than stop. */
        pthread_mutex_lock(&c->mu);
        int warn = !c->disk_full_warned;
        c->disk_full_warned = 1;
        c->st.disk_full++;
        pthread_mutex_unlock(&c->mu);
        if (warn) stk_log(STK_LOG_WARN, "%s; serving shards from memory until space frees", err);
        rc = 0;
      } else if (rc) {
        return rc;
      }
    }
    if (*disk_fd >= 0 && c->ram_budget == 0) return 0;
  }
  uint64_t size = c->e[i].size != UINT64_MAX ? c->e[i].size : c->tab[i].size;
  if (*disk_fd >= 0) {
    pthread_mutex_lock(&c->mu);
    if (size <= c->ram_budget) ram_make_room(c, size);
    int fits = size <= c->ram_budget && c->ram_used + size <= c->ram_budget;
    if (fits) c->ram_used += size; /* reserved */
    pthread_mutex_unlock(&c->mu);
    if (!fits) return 0; /* too big for RAM now: served from disk */
    if (ram_copy(*disk_fd, size, ram_fd, err) != 0) { /* served from disk then */
      stk_log(STK_LOG_WARN, "cache: %s", err);
      pthread_mutex_lock(&c->mu);
      c->ram_used -= size;
      pthread_mutex_unlock(&c->mu);
    }
    return 0;
  }
  /* No disk copy: fetch straight into memory. */
  int fd = new_memfd(UINT64_MAX, err); /* sized by the bytes that arrive */
  if (fd < 0) return fd;
  uint64_t got = 0;
  uint32_t crc;
  if ((rc = fetch_into(c, i, fd, &got, &crc, cancel, err)) != 0) {
    close(fd);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  if (got <= c->ram_budget) ram_make_room(c, got);
  c->ram_used += got; /* may pass the budget when everything is pinned */
  c->e[i].size = got;
  pthread_mutex_unlock(&c->mu);
  *ram_fd = fd;
  return 0;
}

/* Stage entry i, which the caller marked E_BUSY (mu not held). On success
 * the entry is E_READY; on failure E_NONE. Wakes waiters either way. */
static int stage_entry(struct stk_cache *c, size_t i, const int *cancel, char *err) {
  int dfd, rfd;
  int rc = stage(c, i, &dfd, &rfd, cancel, err);
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  if (rc) {
    if (dfd >= 0) close(dfd);
    if (rfd >= 0) close(rfd);
    x->state = E_NONE;
  } else {
    x->state = E_READY;
    x->disk_fd = dfd;
    x->ram_fd = rfd;
    x->lru = ++c->ram_clock;
    if (x->pins == 0) {
      /* Nobody wants it now (a prefetch released early): keep only RAM. */
      if (x->disk_fd >= 0) close(x->disk_fd);
      x->disk_fd = -1;
      if (x->ram_fd < 0) x->state = E_NONE;
    }
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static void *fetcher_main(void *arg) {
  struct stk_cache *c = arg;
  char err[STK_ERRMSG_MAX];
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stop && c->q_len == 0) pthread_cond_wait(&c->cv, &c->mu);
    if (c->stop) break;
    size_t i = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % c->n;
    c->q_len--;
    struct entry *x = &c->e[i];
    x->in_queue = 0;
    if (x->state != E_QUEUED) continue; /* taken by an acquire, or no longer wanted */
    x->state = E_BUSY;
    pthread_mutex_unlock(&c->mu);
    int rc = stage_entry(c, i, &c->stop, err);
    pthread_mutex_lock(&c->mu);
    if (rc == 0) {
      c->st.prefetched++;
    } else if (rc != STK_ECANCELED) {
      /* The acquire that needs it will try again and report. */
      stk_log(STK_LOG_INFO, "cache: prefetch of %s failed: %s", c->tab[i].name, err);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- the interface ------------------------------------------------------------ */

int stk__cache_acquire(struct stk_cache *c, size_t i, int *fd, const int *cancel, char *err) {
  if (i >= c->n) return stk__errf(err, STK_ERANGE, "cache: no shard %zu", i);
  uint64_t t0 = stk_now_ns();
  int stalled = 0, rc = 0;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  x->pins++;
  if (c->ram_budget) {
    if (x->state == E_READY && x->ram_fd >= 0) c->st.ram.hits++;
    else c->st.ram.misses++;
  }
  for (;;) {
    if (x->state == E_READY) break;
    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
      rc = stk__errf(err, STK_ECANCELED, "canceled");
      break;
    }
    if (x->state == E_BUSY) {
      stalled = 1; /* another thread is staging it: wait for that */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      continue;
    }
    x->state = E_BUSY; /* from E_NONE, or taken from the prefetch queue */
    pthread_mutex_unlock(&c->mu);
    fetched_here = 0;
    rc = stage_entry(c, i, cancel, err);
    stalled |= fetched_here; /* a disk-tier hit is not a stall */
    pthread_mutex_lock(&c->mu);
    if (rc) break;
  }
  if (!rc) {
    x->lru = ++c->ram_clock;
    *fd = fcntl(x->ram_fd >= 0 ? x->ram_fd : x->disk_fd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0) rc = stk__errf(err, stk__from_errno(errno), "cache: dup failed: %s", strerror(errno));
  }
  if (stalled) {
    c->st.stalls++;
    c->st.stall_ns += stk_now_ns() - t0;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc) stk__cache_release(c, i);
  return rc;
}

void stk__cache_prefetch(struct stk_cache *c, size_t i) {
  if (i >= c->n) return;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  x->pins++;
  if (x->state == E_NONE && c->nfetchers) {
    x->state = E_QUEUED;
    if (!x->in_queue) {
      x->in_queue = 1;
      c->queue[(c->q_head + c->q_len) % c->n] = i;
      c->q_len++;
    }
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

void stk__cache_release(struct stk_cache *c, size_t i) {
  if (i >= c->n) return;
  pthread_mutex_lock(&c->mu);
  struct entry *x = &c->e[i];
  if (x->pins > 0 && --x->pins == 0) {
    if (x->state == E_QUEUED) x->state = E_NONE; /* no longer wanted */
    if (x->state == E_READY && x->disk_fd >= 0) {
      close(x->disk_fd); /* drops the shared lock: evictable again */
      x->disk_fd = -1;
      if (x->ram_fd < 0) x->state = E_NONE;
    }
  }
  pthread_mutex_unlock(&c->mu);
}

uint64_t stk__cache_shard_size(struct stk_cache *c, size_t i) {
  pthread_mutex_lock(&c->mu);
  uint64_t s = c->e[i].size != UINT64_MAX ? c->e[i].size : c->tab[i].size;
  pthread_mutex_unlock(&c->mu);
  return s;
}

uint64_t stk__cache_prefetch_budget(const struct stk_cache *c) {
  return c->o.prefetch_bytes < 0 ? 0 : (uint64_t)c->o.prefetch_bytes;
}

const char *stk__cache_origin_url(const struct stk_cache *c) { return stk__origin_url(c->origin); }

void stk__cache_stats(struct stk_cache *c, struct stk_cache_stats *st) {
  struct stk_origin_stats os;
  stk__origin_stats(c->origin, &os);
  pthread_mutex_lock(&c->mu);
  *st = c->st;
  st->fetch_p50_ns = stk__hist_quantile(&c->fetch_hist, 0.50);
  st->fetch_p99_ns = stk__hist_quantile(&c->fetch_hist, 0.99);
  st->ram.bytes = c->ram_used;
  st->ram.capacity = c->ram_budget;

  st->disk.capacity = c->dir ? c->disk_budget : 0;
  uint64_t ram_entries = 0;
  for (size_t i = 0; i < c->n; i++) ram_entries += c->e[i].ram_fd >= 0;
  st->ram.entries = ram_entries;
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_lock(&c->disk_mu);
  st->disk.bytes = c->disk_used;
  pthread_mutex_unlock(&c->disk_mu);
  st->requests = os.requests;
  st->retries += os.retries;
  st->errors = os.errors;
  st->missing = os.missing;
  st->fetch_bytes = os.bytes;
}

static uint64_t mem_total(void) {
  struct sysinfo si;
  return sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : (8ull << 30);
}

int stk__cache_open(struct stk_cache **out, struct stk_origin *origin,
                    const struct stk_cache_shard *tab, size_t n,
                    const struct stk_cache_opts *opts, char *err) {
  struct stk_cache *c = calloc(1, sizeof *c);
  struct stk_cache_opts o = opts ? *opts : (struct stk_cache_opts){0};
  size_t names = 0;
  for (size_t i = 0; i < n; i++) names += strlen(tab[i].name) + 1;
  char *nb = NULL;
  if (!c || !(c->tab = malloc((n ? n : 1) * sizeof *c->tab + names)) ||
      !(c->e = calloc(n ? n : 1, sizeof *c->e)) || !(c->queue = malloc((n ? n : 1) * sizeof(size_t)))) {
    if (c) {
      free(c->tab);
      free(c->e);
    }
    free(c);
    stk__origin_close(origin);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  nb = (char *)(c->tab + (n ? n : 1));
  for (size_t i = 0; i < n; i++) {
    c->tab[i] = tab[i];
    size_t l = strlen(tab[i].name) + 1;
    memcpy(nb, tab[i].name, l);
    c->tab[i].name = nb;
    nb += l;
    c->e[i].disk_fd = c->e[i].ram_fd = -1;
    c->e[i].size = tab[i].size;
  }
  c->n = n;
  c->origin = origin;
  c->o = o;
  c->o.dir = NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->disk_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  read_boot_id(c->boot_id, sizeof c->boot_id);
  int rc = 0;
  if (o.dir) {
    if (!(c->dir = strdup(o.dir))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    else rc = dir_prepare(c->dir, 1, &c->ro, err);
    if (!rc && !(c->tmpdir = pathf(c->dir, "", "tmp", ""))) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    if (!rc && c->ro)
      stk_log(STK_LOG_INFO, "cache: %s is read-only here: serving the shards it holds, the "
              "others from memory", c->dir);
    if (!rc) {
      c->dir_ok = 1;
      uint64_t swept = c->ro ? 0 : dir_sweep(c->dir);
      if (swept) stk_log(STK_LOG_INFO, "cache: %s: removed %llu files that interrupted fills left",
                         c->dir, (unsigned long long)swept);
      struct statvfs v;
      uint64_t fs_size = statvfs(c->dir, &v) == 0 ? (uint64_t)v.f_blocks * v.f_frsize : 0;
      c->disk_budget = o.disk_bytes ? o.disk_bytes : fs_size / 10 * 8;
      c->min_free = o.min_free ? o.min_free : STK__MIN(1ull << 30, fs_size / 20);
      struct dent *ents;
      size_t ne;
      if (dir_entries(c->dir, &ents, &ne, &c->disk_used) == 0) {
        c->st.disk.entries = ne;
        free(ents);
      }
    }
  }
  c->ram_budget = o.ram_bytes           ? o.ram_bytes
                  : c->dir && !c->ro    ? 0
                                        : STK__MIN(mem_total() / 4, 8ull << 30);
  if (!c->o.prefetch_bytes) {
    uint64_t cap = c->dir && !c->ro ? c->disk_budget / 2 : c->ram_budget / 2;
    c->o.prefetch_bytes = (int64_t)STK__MIN(1ull << 30, cap);
  }
  uint32_t want = c->o.prefetch_bytes < 0 ? 0 : (o.fetchers ? o.fetchers : 8);
  if (!rc && want && (c->fetchers = calloc(want, sizeof *c->fetchers)) != NULL)
    while (c->nfetchers < want &&
           pthread_create(&c->fetchers[c->nfetchers], NULL, fetcher_main, c) == 0)
      c->nfetchers++;
  if (rc) {
    stk__cache_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

/* Add this process's counters to DIR/stats (under lock/stats). */
static void dir_add_stats(const char *dir, const struct stk_cache_stats *s);

void stk__cache_close(struct stk_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  for (uint32_t t = 0; t < c->nfetchers; t++) pthread_join(c->fetchers[t], NULL);
  free(c->fetchers);
  if (c->dir_ok && !c->ro) {
    struct stk_cache_stats st;
    stk__cache_stats(c, &st);
    dir_add_stats(c->dir, &st);
  }
  for (size_t i = 0; i < c->n; i++) {
    if (c->e[i].disk_fd >= 0) close(c->e[i].disk_fd);
    if (c->e[i].ram_fd >= 0) close(c->e[i].ram_fd);
  }
  stk__origin_close(c->origin);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->disk_mu);
  free(c->queue);
  free(c->e);
  free(c->tab);
  free(c->dir);
  free(c->tmpdir);
  free(c);
}

/* ---- stats ------------------------------------------------------------------------ */

#define STAT_FIELDS(X)                                                                   \
  X(ram_hits, ram.hits) X(ram_misses, ram.misses) X(ram_evictions, ram.evictions)        \
  X(disk_hits, disk.hits) X(disk_misses, disk.misses) X(disk_evictions, disk.evictions)  \
  X(fetches, fetches) X(fetch_bytes, fetch_bytes) X(shared_waits, shared_waits)          \
  X(prefetched, prefetched) X(stalls, stalls) X(restages, restages) X(retries, retries)  \
  X(errors, errors) X(requests, requests) X(disk_full, disk_full) X(stall_ns, stall_ns)  \
  X(missing, missing)

/* Read the counters of DIR/stats into *sum (zeros when absent). */
static void stats_file_read(const char *path, struct stk_cache_stats *sum) {
  FILE *f = path ? fopen(path, "re") : NULL;
  char k[64];
  unsigned long long v;
  while (f && fscanf(f, "%63s %llu", k, &v) == 2) {
#define RD(name, field) if (!strcmp(k, #name)) sum->field = v;
    STAT_FIELDS(RD)
#undef RD
  }
  if (f) fclose(f);
}

static void dir_add_stats(const char *dir, const struct stk_cache_stats *s) {
  char *lp = pathf(dir, "lock", "stats", ""), *sp = pathf(dir, "", "stats", "");
  char *tp = pathf(dir, "", "stats", ".new");
  int lfd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (lfd >= 0 && flock(lfd, LOCK_EX) == 0) {
    struct stk_cache_stats sum = {0};
    stats_file_read(sp, &sum);
    FILE *w = tp ? fopen(tp, "we") : NULL;
    if (w) {
#define WR(name, field) fprintf(w, "%s %llu\n", #name, (unsigned long long)(sum.field + s->field));
      STAT_FIELDS(WR)
#undef WR
      if (fclose(w) == 0) rename(tp, sp);
      else unlink(tp);
    }
  }
  if (lfd >= 0) close(lfd);
  free(lp);
  free(sp);
  free(tp);
}

void stk_cache_stats_json(const struct stk_cache_stats *st, struct stk_json *j) {
  stk_json_obj_begin(j);
  const struct stk_cache_tier_stats *t[2] = {&st->ram, &st->disk};
  const char *names[2] = {"ram", "disk"};
  for (int i = 0; i < 2; i++) {
    stk_json_key(j, names[i]);
    stk_json_obj_begin(j);
    stk_json_ku64(j, "hits", t[i]->hits);
    stk_json_ku64(j, "misses", t[i]->misses);
    stk_json_ku64(j, "bytes", t[i]->bytes);
    stk_json_ku64(j, "capacity", t[i]->capacity);
    stk_json_ku64(j, "entries", t[i]->entries);
    stk_json_ku64(j, "evictions", t[i]->evictions);
    stk_json_obj_end(j);
  }
  stk_json_ku64(j, "fetches", st->fetches);
  stk_json_ku64(j, "fetch_bytes", st->fetch_bytes);
  stk_json_key(j, "fetch_ms");
  stk_json_obj_begin(j);
  stk_json_kdbl(j, "p50", (double)st->fetch_p50_ns / 1e6);
  stk_json_kdbl(j, "p99", (double)st->fetch_p99_ns / 1e6);
  stk_json_obj_end(j);
  stk_json_ku64(j, "requests", st->requests);
  stk_json_ku64(j, "retries", st->retries);
  stk_json_ku64(j, "errors", st->errors);
  stk_json_ku64(j, "missing", st->missing);
  stk_json_ku64(j, "restages", st->restages);
  stk_json_ku64(j, "disk_full", st->disk_full);
  stk_json_ku64(j, "shared_waits", st->shared_waits);
  stk_json_ku64(j, "prefetched", st->prefetched);
  stk_json_ku64(j, "stalls", st->stalls);
  stk_json_kdbl(j, "stall_s", (double)st->stall_ns / 1e9);
  stk_json_obj_end(j);
}

/* ---- managing a directory (stoker cache) ----------------------------------------- */

int stk__cache_dir_check(const char *dir, char *err) {
  int ro;
  return dir_prepare(dir, 1, &ro, err);
}

int stk_cache_dir_scan(const char *dir,
                       int (*cb)(void *arg, const struct stk_cache_dir_entry *e), void *arg,
                       struct stk_cache_stats *totals, char *errmsg) {
  int ro, rc = dir_prepare(dir, 0, &ro, errmsg);
  if (rc) return rc;
  struct dent *v;
  size_t n;
  uint64_t bytes;
  if ((rc = dir_entries(dir, &v, &n, &bytes)) != 0)
    return stk__errf(errmsg, rc, "%s/data: %s", dir, stk_strerror(rc));
  if (n) qsort(v, n, sizeof *v, dent_cmp);
  for (size_t i = 0; i < n && cb; i++) {
    struct stk_cache_dir_entry e = {0};
    snprintf(e.key, sizeof e.key, "%.*s", (int)sizeof e.key - 1, v[i].name);
    e.bytes = v[i].bytes;
    e.last_use_ns = (uint64_t)v[i].atime.tv_sec * 1000000000ull + (uint64_t)v[i].atime.tv_nsec;
    char *mp = pathf(dir, "data", v[i].name, ".meta"), *dp = pathf(dir, "data", v[i].name, "");
    struct meta m;
    if (mp && meta_read(mp, &m) == 0) snprintf(e.origin, sizeof e.origin, "%s", m.origin);
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
  if (totals) {
    memset(totals, 0, sizeof *totals);
    totals->disk.entries = n;
    totals->disk.bytes = bytes;
    char *sp = pathf(dir, "", "stats", "");
    stats_file_read(sp, totals);
    free(sp);
  }
  return rc;
}

int stk_cache_dir_verify(const char *dir, uint64_t *checked, uint64_t *removed, char *errmsg) {
  *checked = *removed = 0;
  int rc = dir_prepare(dir, 0, NULL, errmsg);
  if (rc) return rc;
  dir_sweep(dir);
  struct dent *v;
  size_t n;
  uint64_t bytes;
  if ((rc = dir_entries(dir, &v, &n, &bytes)) != 0)
    return stk__errf(errmsg, rc, "%s/data: %s", dir, stk_strerror(rc));
  for (size_t i = 0; i < n; i++) {
    char *mp = pathf(dir, "data", v[i].name, ".meta"), *dp = pathf(dir, "data", v[i].name, "");
    struct meta m;
    int fd = dp ? open(dp, O_RDONLY | O_CLOEXEC) : -1;
    int bad = 1;
    if (fd >= 0 && mp && meta_read(mp, &m) == 0 && m.size == v[i].bytes) {
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
  int rc = dir_prepare(dir, 0, NULL, errmsg);
  if (rc) return rc;
  dir_sweep(dir);
  *evicted = dir_evict_lru(dir, keep_bytes, 0, NULL);
  return 0;
}
