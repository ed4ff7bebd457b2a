/* Shard access: the one way to a shard's bytes, for the loader and for
 * stk_dataset_read. A shard is a local file opened in place or a copy the
 * cache stages (RAM tier, disk tier, origin); callers get a descriptor and
 * never learn which. A shard whose sample index was left for later (listed
 * remotely, or named by a manifest) is indexed here on first open. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "dataset_impl.h"

/* The format's index hook over the shard's bytes: a reader over fd (the
 * file in place, or the cache's staged copy), so the hook never sees the
 * descriptor. */
static int fd_read(const struct stk__bytes *b, void *buf, size_t len, uint64_t off) {
  if (off > b->size || b->size - off < len) return STK_ETRUNC; /* as stk__bytes_mem's */
  return stk__pread_full(*(const int *)b->ctx, buf, len, off);
}

int stk__shard_index(struct stk_dataset *ds, size_t si, int fd, char *err) {
  struct stk_shard *sh = &ds->shards[si];
  uint64_t size;
  int rc = stk__fd_size(fd, &size);
  if (rc) return stk__errf(err, rc, "%s: cannot stat: %s", sh->path, stk_strerror(rc));
  struct stk__bytes b = {.size = size, .read = fd_read, .ctx = &fd};
  return ds->fmt->index(ds, sh, &b, err);
}

/* Build the index of a pending shard from its open descriptor, once. */
static int index_pending(struct stk_dataset *ds, size_t si, int fd, char *err) {
  struct stk_shard *sh = &ds->shards[si];
  struct stk__shard_row *r = &ds->rows[si];
  int rc = 0;
  pthread_mutex_lock(&ds->ix_mu);
  if (r->pending) {
    uint64_t want = sh->count;
    int known = r->count_known;
    rc = ds->fmt->index ? stk__shard_index(ds, si, fd, err) : 0;
    if (!rc && known && sh->count != want) {
      rc = stk__errf(err, STK_EFORMAT, "%s: %llu samples, but the manifest says %llu", sh->path,
                     (unsigned long long)sh->count, (unsigned long long)want);
      sh->count = want;
    }
    if (!rc) __atomic_store_n(&r->pending, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ds->ix_mu);
  return rc;
}

int stk__shard_open(struct stk_dataset *ds, size_t si, unsigned flags, int *fd, const int *cancel,
                    char *err) {
  struct stk_shard *sh = &ds->shards[si];
  int rc;
  if (ds->chunked)
    return stk__errf(err, STK_ENOTSUP,
                     "%s: read in chunks (its bytes are fetched as they are needed), not staged "
                     "whole: token windows (stoker feed --seq-len), inspect, verify and pack read it",
                     sh->path);
  if (!ds->cache) {
    *fd = open(sh->path, O_RDONLY | O_CLOEXEC | (flags & STK_SHARD_DIRECT ? O_DIRECT : 0));
    if (*fd < 0) {
      int e = errno;
      return stk__errf(err, stk__from_errno(e), "%s: cannot open: %s", sh->path, strerror(e));
    }
  } else if ((rc = stk__cache_acquire(ds->cache, si, fd, cancel, err)) != 0) {
    return rc;
  }
  if (!__atomic_load_n(&ds->rows[si].pending, __ATOMIC_ACQUIRE)) return 0;
  rc = index_pending(ds, si, *fd, err);
  if (rc) stk__shard_close(ds, si, *fd);
  return rc;
}

void stk__shard_close(struct stk_dataset *ds, size_t si, int fd) {
  if (fd >= 0) close(fd);
  if (ds->cache) stk__cache_release(ds->cache, si);
}

uint64_t stk__shard_size(struct stk_dataset *ds, size_t si) {
  if (ds->cache) return stk__cache_shard_size(ds->cache, si);
  return ds->shards[si].file_bytes;
}

int stk__shard_pending(const struct stk_dataset *ds, size_t si) {
  return __atomic_load_n(&ds->rows[si].pending, __ATOMIC_ACQUIRE) != 0;
}

int stk__dataset_staged(const struct stk_dataset *ds) { return ds->cache != NULL; }

void stk__shard_prefetch(struct stk_dataset *ds, size_t si) {
  if (ds->cache) stk__cache_prefetch(ds->cache, si);
}

void stk__shard_unpin(struct stk_dataset *ds, size_t si) {
  if (ds->cache) stk__cache_release(ds->cache, si);
}

uint64_t stk__dataset_prefetch_budget(const struct stk_dataset *ds) {
  return ds->cache ? stk__cache_prefetch_budget(ds->cache) : 0;
}

int stk_dataset_cache_stats(const struct stk_dataset *ds, struct stk_cache_stats *st) {
  if (!ds->cache) return STK_ENOENT;
  struct stk_cache_stats full; /* the caller's struct gets no more than its struct_size */
  stk__cache_stats(ds->cache, &full);
  stk__result_give(st, &full, sizeof full);
  return 0;
}

void stk__dataset_recheck(struct stk_dataset *ds) {
  if (ds->cache) stk__cache_recheck(ds->cache);
}

int stk__shard_chunked(const struct stk_dataset *ds, size_t si) {
  (void)si;
  return ds->chunked;
}

int stk__shard_read(struct stk_dataset *ds, size_t si, uint64_t off, void *buf, uint64_t len,
                    const int *cancel, char *err) {
  if (!ds->chunked || !ds->cache)
    return stk__errf(err, STK_EINVAL, "%s: not read in chunks", ds->shards[si].path);
  return stk__cache_read(ds->cache, si, off, buf, len, cancel, err);
}

int stk__shard_warm(struct stk_dataset *ds, size_t si, uint64_t off, uint64_t len,
                    const int *cancel, char *err) {
  if (!ds->chunked || !ds->cache)
    return stk__errf(err, STK_EINVAL, "%s: not read in chunks", ds->shards[si].path);
  return stk__cache_warm(ds->cache, si, off, len, cancel, err);
}
