/* Internals shared by the cache's files (cache.c: staging, fetchers and the
 * interface; cache_dir.c: the directory format and its management;
 * cache_disk.c: the disk tier's fills; cache_ram.c: the RAM tier). Not for
 * use outside src/cache: the rest of stoker sees cache_impl.h. */
#ifndef STOKER_CACHE_INT_H
#define STOKER_CACHE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "../base/base.h"
#include "cache_impl.h"

#define CACHE_MAGIC "stoker-cache"
#define CACHE_VERSION 1
#define META_MAGIC "stoker-cache-entry 1"
#define KEY_MAX 96
#define FILL_ATTEMPTS 3 /* whole-shard refetches after a checksum mismatch */

enum { E_NONE = 0, E_QUEUED, E_BUSY, E_READY };

struct entry {
  int state;
  int disk_fd; /* READY from the disk tier: open, flock(LOCK_SH) */
  int ram_fd;  /* READY in the RAM tier: a memfd */
  uint32_t pins;
  uint64_t size; /* UINT64_MAX until known */
  uint64_t lru;  /* RAM tier clock of the last use */
  int verified;  /* the disk copy's checksum was checked by this process */
  int in_queue;  /* has a place in the fetchers' queue (at most one, so
                    the queue never holds more than n) */
  /* The last staging that failed for good (its retries spent): the code,
   * the message (malloc'ed) and when it ended. An acquire that was waiting
   * when it ended reports it instead of spending a second retry budget. */
  int fail_rc;
  char *fail_msg;
  uint64_t fail_ns;
};

struct stk_cache {
  struct stk_origin *origin;
  struct stk_cache_opts o;
  char *dir;                   /* disk tier root, or NULL */
  char *tmpdir;                /* dir/tmp */
  int dir_ok;                  /* dir checked and in use (stats go there at close) */
  int ro;                      /* dir is read-only here: hits served, misses kept in RAM */
  struct stk_cache_shard *tab; /* names owned (one block) */
  struct entry *e;
  size_t n;
  char boot_id[40];

  pthread_mutex_t mu;
  pthread_cond_t cv; /* an entry left E_BUSY; the queue changed */
  size_t *queue;     /* shards to prefetch, FIFO ring */
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

  struct stk__chunks *ch; /* chunked reads (cache_chunk.c), made on first use */
  int recheck; /* every disk entry's CRC32C checked at lookup, stamp or not (verify) */

  /* Counters (under mu). */
  struct stk_cache_stats st;
  struct stk_hist fetch_hist;
};

struct meta {
  char origin[1024];
  uint64_t size;
  uint32_t crc;
  char stamp[160]; /* "boot ino ctime_ns size" of the last full check */
};

struct dent {
  char name[KEY_MAX];
  uint64_t bytes;
  struct timespec atime;
};

/* Name of shard i in the directory (a hash of origin and name, then the
 * name's last component); key holds KEY_MAX bytes. */
void stk__cache_key(const struct stk_cache *c, size_t i, char *key);
/* "DIR/SUB/NAMESUFFIX" (SUB may be ""), malloc'ed; NULL when out of memory. */
char *stk__cache_path(const char *dir, const char *sub, const char *name, const char *suffix);
int stk__fsync_dir(const char *dir);
/* Take an flock, polling so that *cancel is honoured; *waited is set when
 * someone else held it at first. */
int stk__lock_poll(int fd, int how, const int *cancel, int *waited);
/* Create and flock a temporary from tmpl (XXXXXX then suffixlen bytes). */
int stk__tmp_create(char *tmpl, int suffixlen);
/* An entry's .meta: read, and written atomically through tmpdir. */
int stk__meta_read(const char *path, struct meta *m);
int stk__meta_write(const char *tmpdir, const char *path, const struct meta *m, int do_fsync);
/* The "verified" stamp of a data file: boot, inode, mtime, size. */
void stk__meta_stamp(const struct stk_cache *c, const struct stat *st, char *out, size_t n);
/* Check (with create, make) dir as a cache directory; with ro given, a
 * readable but not writable one is accepted and *ro set. */
int stk__dir_prepare(const char *dir, int create, int *ro, char *err);
/* Remove what interrupted fills left; returns how many files. */
uint64_t stk__dir_sweep(const char *dir);
/* The committed entries of dir/data, their bytes summed into *bytes. */
int stk__dir_entries(const char *dir, struct dent **out, size_t *n, uint64_t *bytes);
/* Evict unused entries, least recently used first, to keep bytes and a
 * free-space floor; returns the bytes freed. */
uint64_t stk__dir_evict_lru(const char *dir, uint64_t keep, uint64_t free_floor, uint64_t *used);
/* Free bytes of the file system holding dir. */
uint64_t stk__fs_free(const char *dir);
/* Add this process's counters to DIR/stats (under lock/stats). */
void stk__dir_add_stats(const char *dir, const struct stk_cache_stats *s);
/* What one cache entry holds: a whole shard (off 0) or one chunk of a
 * shard's object (cache_chunk.c). Filled in by the caller; lookups and
 * fills set verified and size on success. */
struct unit {
  size_t i;          /* the shard */
  const char *key;   /* its file name in the directory (KEY_MAX bytes at most) */
  uint64_t off;      /* first byte of the object */
  uint64_t want;     /* its bytes; UINT64_MAX = the whole object, size unknown */
  uint32_t crc;      /* the expected CRC32C (a manifest's), when has_crc */
  int has_crc;
  const char *etag;  /* chunks: the object's ETag when opened ("" = none); a
                        fetch answered with another fails (the object changed) */
  int verified;      /* in: this process checked it already; out: checked */
  uint64_t size;     /* out: its bytes */
};

/* The disk tier (cache_disk.c): a committed copy of a unit, checked; a
 * fill from the origin; the fetch of a unit into fd (size and CRC32C of
 * what arrived); the release of a fill's reserved bytes. */
int stk__disk_lookup(struct stk_cache *c, struct unit *u, int *out);
int stk__disk_fill(struct stk_cache *c, struct unit *u, int *out, const int *cancel, char *err);
int stk__fetch_into(struct stk_cache *c, struct unit *u, int fd, uint64_t *size, uint32_t *crc,
                    const int *cancel, char *err);
/* Bring a unit into the tiers (cache.c): the disk tier's copy (looked up,
 * or filled under its lock) and, with a RAM tier, a memfd copy; without a
 * disk copy (no disk tier, read-only, full), fetched into a memfd. */
int stk__stage_unit(struct stk_cache *c, struct unit *u, int *disk_fd, int *ram_fd,
                    const int *cancel, char *err);
/* The RAM tier (cache_ram.c): evict unpinned entries to make room for
 * need bytes (mu held); a memfd of size bytes; a copy of src into one. */
void stk__ram_make_room(struct stk_cache *c, uint64_t need);
int stk__new_memfd(uint64_t size, char *err);
int stk__ram_copy(int src, uint64_t size, int *out, char *err);
void stk__disk_unreserve(struct stk_cache *c, uint64_t need, uint64_t committed);
/* Chunks (cache_chunk.c): what cache_close frees. */
void stk__chunks_free(struct stk_cache *c);
/* Set by stk__fetch_into in the thread that fetched: tells an acquire that
 * staged the shard itself whether it waited for the origin (a stall). */
extern __thread int stk__fetched_here;

#endif
