/* The shard cache's internal interface, used by the dataset (remote open,
 * stk_dataset_read) and the loader (its reader and look-ahead). Shards are
 * known by their position in the table given at open. */
#ifndef STOKER_CACHE_IMPL_H
#define STOKER_CACHE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/cache.h"
#include "origin.h"

/* One shard of the origin as the manifest (or a listing) describes it. */
struct stk_cache_shard {
  const char *name;  /* relative to the origin's root */
  uint64_t size;     /* bytes; UINT64_MAX = unknown (learned from the origin) */
  uint32_t crc32c;   /* of the whole object, when has_crc */
  int has_crc;
};

struct stk_cache;

/* Open a cache in front of origin (which the cache then owns and closes)
 * for the n shards of tab (copied). With opts->dir, prepares the disk tier:
 * creates it or checks its format, removes what interrupted fills left. */
int stk__cache_open(struct stk_cache **out, struct stk_origin *origin,
                    const struct stk_cache_shard *tab, size_t n,
                    const struct stk_cache_opts *opts, char *err);
/* Stop the fetchers, add this process's counters to the directory's, and
 * free everything. Descriptors handed out stay valid. */
void stk__cache_close(struct stk_cache *c);

/* A readable descriptor of shard i (the caller closes it), staged first if
 * need be: RAM tier, then disk tier, then the origin. Takes a pin, which
 * keeps the shard from eviction until stk__cache_release(). Blocks while
 * the shard is fetched (counted as a stall); STK_ECANCELED when *cancel. */
int stk__cache_acquire(struct stk_cache *c, size_t i, int *fd, const int *cancel, char *err);
/* Stage shard i in the background and pin it (a look-ahead hint); the pin
 * is dropped by stk__cache_release() as for acquire. Never blocks. */
void stk__cache_prefetch(struct stk_cache *c, size_t i);
void stk__cache_release(struct stk_cache *c, size_t i);
/* Bytes of shard i (from the table, or learned when staged). */
uint64_t stk__cache_shard_size(struct stk_cache *c, size_t i);
/* The same, asked of the origin (HEAD) when neither knows it yet. */
int stk__cache_shard_stat(struct stk_cache *c, size_t i, uint64_t *size, char *err);
/* The disk tier's directory when it is read-only here (entries served,
 * nothing added), else NULL. */
const char *stk__cache_read_only_dir(const struct stk_cache *c);
/* The budget for shards staged ahead (0 = prefetch off). */
uint64_t stk__cache_prefetch_budget(const struct stk_cache *c);

/* Bytes [off, off + len) of shard i's object into buf, through chunks of
 * stk__cache_chunk_bytes() (cache_chunk.c): each chunk is fetched with a
 * ranged request, checked and kept on its own in the tiers, never the
 * whole object. For objects too large to stage (Megatron's .bin). Blocks
 * while a chunk is fetched; STK_ECANCELED when *cancel; an object that
 * changed on the origin since it was first asked about (its ETag or size)
 * fails with STK_EIO rather than mixing versions. Thread-safe. */
int stk__cache_read(struct stk_cache *c, size_t i, uint64_t off, void *buf, uint64_t len,
                    const int *cancel, char *err);
uint64_t stk__cache_chunk_bytes(const struct stk_cache *c);
/* Stage the chunks that bytes [off, off + len) of shard i lie in, copying
 * nothing (a look-ahead, ahead of stk__cache_read): blocks while they are
 * fetched, then leaves them in their slots, least recently used first. */
int stk__cache_warm(struct stk_cache *c, size_t i, uint64_t off, uint64_t len, const int *cancel,
                    char *err);

/* From now on, check every disk-tier entry (shard or chunk) against its
 * recorded CRC32C when it is next looked up, even one this node checked
 * since boot (stoker verify); a mismatch is re-staged from the origin. */
void stk__cache_recheck(struct stk_cache *c);

void stk__cache_stats(struct stk_cache *c, struct stk_cache_stats *st);
const char *stk__cache_origin_url(const struct stk_cache *c);

/* Check (creating it when absent or empty) that dir can be a disk tier:
 * the same test stk__cache_open makes, for callers that want it before
 * any network work. */
int stk__cache_dir_check(const char *dir, char *err);

/* CRC32C of the first len bytes of fd, read with pread. */
int stk__crc_fd(int fd, uint64_t len, uint32_t *crc);

#endif
