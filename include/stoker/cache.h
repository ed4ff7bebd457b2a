/* The shard cache: a RAM tier and a node-local disk tier in front of an
 * origin (a local or network file system, HTTP(S), S3), so that a dataset
 * URL works wherever a path does. Whole shards are the unit: a shard is
 * fetched once, checked (size and checksum), committed atomically, and
 * then read by the loader through an ordinary file descriptor.
 *
 *   RAM tier   memfd-backed shards in this process, bounded bytes, LRU.
 *   disk tier  a directory shared by every process on the node: one
 *              download per shard however many processes ask at once
 *              (a per-shard lock), LRU eviction under a byte budget and a
 *              free-space floor, entries in use never evicted.
 *
 * docs/internals/cache.md describes the layout, the fill protocol, the
 * eviction policy and the recovery rules. */
#ifndef STOKER_CACHE_H
#define STOKER_CACHE_H

#include <stdint.h>

#include "stoker/error.h"
#include "stoker/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Set with stk_cache_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_cache_opts {
  size_t struct_size; /* set by stk_cache_opts_init(); 0 = this header's */
  const char *dir;          /* disk tier directory (created); NULL = no disk tier */
  uint64_t disk_bytes;      /* disk tier budget; 0 = 80% of the file system's size */
  uint64_t min_free;        /* keep this much free on its file system; 0 = 1 GiB
                               (or 5% when that is smaller) */
  uint64_t ram_bytes;       /* RAM tier budget; 0 = none with a disk tier, else 25%
                               of memory (at most 8 GiB) */
  int64_t prefetch_bytes;   /* shards ahead of the reader, in bytes; 0 = 1 GiB
                               (bounded by the tiers), -1 = no prefetch */
  uint32_t fetchers;        /* shards fetched at once; 0 = 8 */
  int no_fsync;             /* do not fsync fills before commit (faster, and a
                               power loss may lose, never corrupt, entries) */
  /* Origin tuning; 0/NULL = the defaults of src/cache/origin.h. */
  double connect_timeout_s, stall_timeout_s, retry_max_s;
  uint32_t max_attempts;
  const char *s3_endpoint, *s3_region, *s3_profile;
  int s3_addressing;        /* 0 auto, 1 path style, 2 virtual-host style */
  /* When *cancel becomes nonzero, every origin request (the manifest, a
   * listing, the HEADs that size named shards, shard fetches and their
   * retries) and every wait for a shard ends with STK_ECANCELED within
   * about 50 ms; NULL = never (the CLI passes the flag its SIGINT/SIGTERM
   * handler sets). */
  const int *cancel;
  /* Objects read in ranges (a remote Megatron .bin, too large to stage
   * whole) are fetched, kept and evicted in chunks of this many bytes;
   * 0 = STK_CACHE_CHUNK_DEFAULT. Part of each chunk's name in the disk
   * tier, so processes sharing a directory should agree on it. */
  uint64_t chunk_bytes;
};
#define stk_cache_opts_init(o) stk_cache_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_cache_opts_init_sized(struct stk_cache_opts *o, size_t size);

#define STK_CACHE_CHUNK_DEFAULT (64ull << 20)

struct stk_cache_tier_stats {
  uint64_t hits, misses;    /* shard lookups */
  uint64_t bytes;           /* bytes held now */
  uint64_t capacity;        /* budget */
  uint64_t entries;         /* shards held now */
  uint64_t evictions;       /* entries evicted by this process */
};

/* Filled by the library (stk_dataset_cache_stats, stk_cache_dir_scan's
 * totals, stk_loader_stats): set struct_size first (stk_cache_stats_init,
 * or zero the struct: 0 = this header's), and the library writes no
 * further than it (a newer program's larger struct gets what this library
 * knows; the rest is left as it was). */
struct stk_cache_stats {
  size_t struct_size;       /* set by stk_cache_stats_init(); 0 = this header's */
  struct stk_cache_tier_stats ram, disk;
  uint64_t fetches;         /* shards fetched from the origin */
  uint64_t fetch_bytes;     /* bytes fetched from the origin (attempts included) */
  uint64_t fetch_p50_ns, fetch_p99_ns; /* time to stage one shard */
  uint64_t shared_waits;    /* misses another process filled while we waited */
  uint64_t prefetched;      /* shards (or chunks) staged ahead of need */
  uint64_t stalls;          /* reads that had to wait for a fetch */
  uint64_t stall_ns;        /* ... and how long in all */
  uint64_t restages;        /* cached copies found missing or corrupt, refetched */
  uint64_t disk_full;       /* fills the disk tier had no room for (served from RAM) */
  uint64_t retries;         /* origin requests retried */
  uint64_t errors;          /* origin requests failed for good (not-found lookups excepted) */
  uint64_t missing;         /* origin lookups that found no object (a manifest the
                               dataset does not have): expected, not errors */
  uint64_t requests;        /* origin requests sent */
  uint64_t origin_checked;  /* whole objects whose CRC32C the origin sent (S3 checksum
                               mode) and whose body matched it */
};

#define stk_cache_stats_init(st) stk_cache_stats_init_sized((st), sizeof *(st))
STK_EXPORT void stk_cache_stats_init_sized(struct stk_cache_stats *st, size_t size);

/* Write the stats as a JSON object (read no further than st's struct_size). */
STK_EXPORT void stk_cache_stats_json(const struct stk_cache_stats *st, struct stk_json *j);

/* ---- managing a cache directory (stoker cache) ---------------------- */

struct stk_cache_dir_entry {
  char key[96];             /* file name in the directory */
  char origin[1024];        /* redacted URL of the origin it came from */
  uint64_t bytes;
  uint64_t last_use_ns;     /* wall clock (CLOCK_REALTIME) */
  int in_use;               /* a process has it open */
};

/* Summary of a cache directory, whoever wrote it: entries, bytes,
 * temporaries, free space, and the counters every process added. Refuses
 * (STK_ENOTSUP, with a sentence) a directory of a newer or foreign
 * format, and (STK_ENOENT) one that is not a stoker cache. */
STK_EXPORT int stk_cache_dir_scan(const char *dir,
                       int (*cb)(void *arg, const struct stk_cache_dir_entry *e), void *arg,
                       struct stk_cache_stats *totals, char *errmsg);
/* Check every entry's size and checksum; corrupt or unreadable entries are
 * removed (they are re-staged on next use). *checked and *removed count. */
STK_EXPORT int stk_cache_dir_verify(const char *dir, uint64_t *checked, uint64_t *removed,
                         char *errmsg);
/* Evict entries not in use, least recently used first, until the directory
 * holds at most keep_bytes (0 = remove all). *evicted counts entries. */
STK_EXPORT int stk_cache_dir_evict(const char *dir, uint64_t keep_bytes, uint64_t *evicted,
                        char *errmsg);

/* ---- manifests ------------------------------------------------------ */

/* Write DIR/stoker-manifest.json for the local dataset in dir (format NULL
 * = detect): per shard its name, bytes, samples, CRC32C and label, so that
 * a remote copy opens with one request. Written atomically. */
STK_EXPORT int stk_manifest_write(const char *dir, const char *format, uint64_t *shards, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif
