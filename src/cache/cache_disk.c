/* The disk tier: looking a shard up in the directory (checked against its
 * .meta and, once per boot, its checksum) and filling it from the origin
 * under a per-shard lock, with the budget and free-space floor kept. */
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

/* Make room on the disk tier for need more bytes, and reserve them (so
 * that this process's concurrent fills count each other); the fill gives
 * the reservation back with stk__disk_unreserve(). */
static void disk_make_room(struct stk_cache *c, uint64_t need) {
  /* disk_mu orders this against commits, so a rescan's figure never
   * loses a fill that committed meanwhile. */
  pthread_mutex_lock(&c->disk_mu);
  uint64_t fr = stk__fs_free(c->dir), others = c->disk_reserved;
  int fits = c->disk_used + others + need <= c->disk_budget &&
             (fr == UINT64_MAX || fr >= c->min_free + need);
  c->disk_reserved += need;
  if (!fits) {
    uint64_t keep = c->disk_budget > need + others ? c->disk_budget - need - others : 0, used = 0;
    uint64_t ev = stk__dir_evict_lru(c->dir, keep, c->min_free + need, &used);
    c->disk_used = used;
    pthread_mutex_lock(&c->mu);
    c->st.disk.evictions += ev;
    pthread_mutex_unlock(&c->mu);
  }
  pthread_mutex_unlock(&c->disk_mu);
}

void stk__disk_unreserve(struct stk_cache *c, uint64_t need, uint64_t committed) {
  pthread_mutex_lock(&c->disk_mu);
  c->disk_reserved -= need;
  c->disk_used += committed;
  pthread_mutex_unlock(&c->disk_mu);
}

/* ---- the disk tier ---------------------------------------------------------- */

/* Look a unit up in the directory: 0 with *fd open and share-locked,
 * STK_ENOENT when absent, STK_ECRC when present but not trustworthy (the
 * caller re-stages it under the fill lock). */
int stk__disk_lookup(struct stk_cache *c, struct unit *u, int *out) {
  const char *key = u->key, *name = c->tab[u->i].name;
  char *data = stk__cache_path(c->dir, "data", key, ""),
       *mp = stk__cache_path(c->dir, "data", key, ".meta");
  int rc = 0, fd = -1;
  struct stat st;
  struct meta m;
  if (!data || !mp)
    rc = STK_ENOMEM;
  else if ((fd = open(data, O_RDONLY | O_CLOEXEC)) < 0)
    rc = errno == ENOENT ? STK_ENOENT : stk__from_errno(errno);
  else if (flock(fd, LOCK_SH) != 0 || fstat(fd, &st) != 0)
    rc = stk__from_errno(errno);
  else if (st.st_nlink == 0)
    rc = STK_ENOENT; /* evicted while we waited for the lock */
  else if (stk__meta_read(mp, &m) != 0 || strcmp(m.origin, stk__origin_url(c->origin)) ||
           m.size != (uint64_t)st.st_size ||
           (u->want != UINT64_MAX && u->want != m.size) || (u->has_crc && u->crc != m.crc)) {
    stk_log(STK_LOG_WARN, "cache: %s: cached copy of %s does not match its record; re-staging", key,
            name);
    rc = STK_ECRC;
  } else {
    int recheck = __atomic_load_n(&c->recheck, __ATOMIC_RELAXED);
    int verified = u->verified && !recheck;
    char stamp[160];
    stk__meta_stamp(c, &st, stamp, sizeof stamp);
    if (!verified &&
        (recheck || strcmp(stamp, m.stamp) || !strcmp(stamp, "unstamped"))) {
      /* First use since a restart (or since the file changed), or a
       * verify: check it. */
      uint32_t crc;
      if ((rc = stk__crc_fd(fd, m.size, &crc)) == 0 && crc != m.crc) {
        stk_log(STK_LOG_WARN, "cache: %s: checksum mismatch in the cached copy of %s; re-staging",
                key, name);
        rc = STK_ECRC;
      } else if (!rc) {
        snprintf(m.stamp, sizeof m.stamp, "%s", stamp);
        stk__meta_write(c->tmpdir, mp, &m, 0); /* a lost stamp only costs a re-check */
      } else {
        rc = STK_ECRC;
      }
    }
    if (!rc) {
      struct timespec ts[2] = {{.tv_nsec = UTIME_NOW}, {.tv_nsec = UTIME_OMIT}};
      futimens(fd, ts); /* last use, for LRU; the data's mtime is left alone */
      u->verified = 1;
      u->size = m.size;
    }
  }
  if (rc && fd >= 0)
    close(fd);
  else if (!rc)
    *out = fd;
  free(data);
  free(mp);
  return rc;
}

/* Set by stk__fetch_into() in the thread that fetched: tells an acquire that
 * staged the shard itself whether it waited for the origin (a stall) or
 * only looked the shard up on disk. */
__thread int stk__fetched_here;

static void note_fetch(struct stk_cache *c, uint64_t ns) {
  stk__fetched_here = 1;
  pthread_mutex_lock(&c->mu);
  c->st.fetches++;
  stk__hist_add(&c->fetch_hist, ns);
  pthread_mutex_unlock(&c->mu);
}

/* Fetch a unit from the origin into fd (from offset 0) and check it:
 * size as announced, CRC32C as the manifest says, the object's ETag as
 * when it was opened (chunks). Refetches after a mismatch. *crc gets the
 * checksum of what was kept. */
int stk__fetch_into(struct stk_cache *c, struct unit *u, int fd, uint64_t *size, uint32_t *crc,
                    const int *cancel, char *err) {
  const struct stk_cache_shard *s = &c->tab[u->i];
  int rc = 0;
  uint64_t t0 = stk_now_ns();
  for (int attempt = 1; attempt <= FILL_ATTEMPTS; attempt++) {
    struct stk_obj_info info = {0};
    /* A new file is empty (its blocks reserved with KEEP_SIZE); a retry
     * starts from nothing again. */
    if (attempt > 1 && ftruncate(fd, 0) != 0)
      return stk__errf(err, stk__from_errno(errno), "cache: truncate failed");
    /* A whole shard is asked for without a Range (its size is checked
     * below): S3 sends the CRC32C it stored for an object only with a
     * whole-object reply, and the engine checks the body against it. */
    uint64_t len = !u->etag && u->off == 0 ? UINT64_MAX : u->want;
    rc = stk__origin_get(c->origin, s->name, u->off, len, fd, 0, &info, cancel, err);
    if (rc) return rc;
    if (info.origin_checked) {
      pthread_mutex_lock(&c->mu);
      c->st.origin_checked++;
      pthread_mutex_unlock(&c->mu);
    }
    if (u->etag && *u->etag && *info.etag && strcmp(info.etag, u->etag))
      return stk__errf(err, STK_EIO,
                       "%s/%s: the object changed on the origin while it was read (ETag %s, "
                       "was %s): reopen the dataset",
                       stk__origin_url(c->origin), s->name, info.etag, u->etag);
    struct stat st;
    if (fstat(fd, &st) != 0) return stk__errf(err, stk__from_errno(errno), "cache: fstat failed");
    uint64_t got = (uint64_t)st.st_size;
    if (info.has_crc) *crc = info.crc32c;
    if (u->want != UINT64_MAX && got != u->want) {
      if (u->etag) /* a chunk */
        rc = stk__errf(err, STK_ETRUNC, "%s/%s: %llu bytes fetched at byte %llu, not %llu",
                       stk__origin_url(c->origin), s->name, (unsigned long long)got,
                       (unsigned long long)u->off, (unsigned long long)u->want);
      else
        rc = stk__errf(err, STK_ETRUNC, "%s/%s: %llu bytes fetched but the manifest says %llu",
                       stk__origin_url(c->origin), s->name, (unsigned long long)got,
                       (unsigned long long)u->want);
    } else if (!info.has_crc && (rc = stk__crc_fd(fd, got, crc)) != 0) {
      /* (an origin that checksummed the bytes as they came spares this) */
      return stk__errf(err, rc, "cache: cannot read back %s: %s", s->name, stk_strerror(rc));
    } else if (u->has_crc && *crc != u->crc) {
      rc = stk__errf(err, STK_ECRC,
                     "%s/%s: checksum mismatch after fetch (crc32c %08x, manifest %08x)",
                     stk__origin_url(c->origin), s->name, *crc, u->crc);
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

/* Stage a unit in the disk tier under its fill lock; *out: an open,
 * share-locked descriptor of the committed file. */
int stk__disk_fill(struct stk_cache *c, struct unit *u, int *out, const int *cancel, char *err) {
  const char *key = u->key, *name = c->tab[u->i].name;
  char *lp = stk__cache_path(c->dir, "lock", key, "");
  char *tp = stk__cache_path(c->dir, "tmp", key, ".XXXXXX");
  char *data = stk__cache_path(c->dir, "data", key, ""),
       *mp = stk__cache_path(c->dir, "data", key, ".meta");
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
  if ((rc = stk__lock_poll(lfd, LOCK_EX, cancel, &waited)) != 0) {
    stk__errf(err, rc, "%s: %s", lp, stk_strerror(rc));
    goto out;
  }
  /* Someone may have filled it while we waited (the one-download rule). */
  rc = stk__disk_lookup(c, u, out);
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

  uint64_t want = u->want;
  if (want == UINT64_MAX) {
    struct stk_obj_info info;
    if ((rc = stk__origin_stat(c->origin, name, &info, err)) != 0) goto out;
    want = info.size;
  }
  if (want > c->disk_budget) {
    rc = stk__errf(err, STK_ENOSPC, "%s: %s (%llu bytes) is larger than the disk tier's budget",
                   c->dir, name, (unsigned long long)want);
    goto out;
  }
  disk_make_room(c, want);
  reserved = want;
  if ((tfd = stk__tmp_create(tp, 0)) < 0) {
    int e = errno;
    rc =
        stk__errf(err, stk__from_errno(e), "%s/tmp: cannot create a file: %s", c->dir, strerror(e));
    goto out;
  }
  if (want && fallocate(tfd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) != 0 && errno == ENOSPC) {
    stk__disk_unreserve(c, reserved, 0);
    disk_make_room(c, reserved = want + c->min_free);
    if (fallocate(tfd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) != 0 && errno == ENOSPC) {
      rc = stk__errf(err, STK_ENOSPC, "%s: no space for %s (%llu bytes): file system full", c->dir,
                     name, (unsigned long long)want);
      goto out;
    }
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  if ((rc = stk__fetch_into(c, u, tfd, &size, &crc, cancel, err)) != 0) goto out;
  if (!c->o.no_fsync && fdatasync(tfd) != 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s: fsync failed: %s", tp, strerror(e));
    goto out;
  }
  /* Readable by all, as its .meta is: a cache directory shared read-only
   * (another user's, a read-only mount) serves its entries. */
  if (fchmod(tfd, 0644) != 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s: chmod failed: %s", tp, strerror(e));
    goto out;
  }
  struct meta m = {.size = size, .crc = crc};
  snprintf(m.origin, sizeof m.origin, "%s", stk__origin_url(c->origin));
  struct stat st;
  if (fstat(tfd, &st) == 0) stk__meta_stamp(c, &st, m.stamp, sizeof m.stamp); /* checked just now */
  if ((rc = stk__meta_write(c->tmpdir, mp, &m, !c->o.no_fsync)) != 0 || rename(tp, data) != 0) {
    if (!rc) rc = stk__from_errno(errno);
    stk__errf(err, rc, "%s/data/%s: cannot commit: %s", c->dir, key, stk_strerror(rc));
    goto out;
  }
  if (!c->o.no_fsync) {
    char *dd = stk__cache_path(c->dir, "", "data", "");
    if (dd) stk__fsync_dir(dd);
    free(dd);
  }
  /* The renamed temporary is the entry: keep it, share-locked. */
  flock(tfd, LOCK_SH);
  *out = tfd;
  tfd = -1;
  stk__disk_unreserve(c, reserved, size);
  reserved = 0;
  u->verified = 1;
  u->size = size;
out:
  if (reserved) stk__disk_unreserve(c, reserved, 0);
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
