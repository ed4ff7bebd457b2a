/* The dataset layer as the loader sees it: how a shard is opened, sized,
 * prefetched and released (whether it is a local file or a copy staged by
 * the cache), what the shard table says (names, numbering, sample ranges),
 * a sample's parse, and a Megatron pair's mapped .idx for the token
 * windows. struct stk_dataset stays opaque here, and nothing of the
 * formats' internals (format_impl.h) or the cache's comes with this header:
 * the loader includes this one and no other of src/dataset or src/format.
 * See docs/internals/layers.md (checked by `make layers`). */
#ifndef STOKER_DATASET_H
#define STOKER_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../format/megatron.h"
#include "stoker/format.h"

/* Flags of stk__shard_open. */
#define STK_SHARD_DIRECT 0x1u /* O_DIRECT where the shard is a local file */

/* A readable descriptor of shard si: the file opened in place, or the copy
 * staged by the cache (blocking while it is fetched; pinned until
 * stk__shard_close). A pending shard's sample index is built on first
 * open. cancel may be NULL; STK_ECANCELED when *cancel becomes nonzero.
 * Errors set err (file and cause). */
int stk__shard_open(struct stk_dataset *ds, size_t si, unsigned flags, int *fd, const int *cancel,
                    char *err);
/* Whether shard si is read in ranges (stk__shard_read) rather than
 * opened: a remote Megatron .bin, fetched and kept in chunks. */
int stk__shard_chunked(const struct stk_dataset *ds, size_t si);
/* From now on, cached copies (shards and chunks) are checked against
 * their recorded CRC32C at their next use, even where this node checked
 * them since boot (a verify); no-op for a local dataset. */
void stk__dataset_recheck(struct stk_dataset *ds);
/* Bytes [off, off + len) of a chunked shard into buf. Thread-safe;
 * cancel may be NULL. */
int stk__shard_read(struct stk_dataset *ds, size_t si, uint64_t off, void *buf, uint64_t len,
                    const int *cancel, char *err);
/* The same bytes staged ahead of a read, nothing copied (look-ahead). */
int stk__shard_warm(struct stk_dataset *ds, size_t si, uint64_t off, uint64_t len,
                    const int *cancel, char *err);
/* Close what stk__shard_open gave (fd < 0 allowed) and drop its pin. */
void stk__shard_close(struct stk_dataset *ds, size_t si, int fd);
/* Bytes of shard si's file when known without opening it (a manifest,
 * a listing, an earlier staging), else UINT64_MAX. */
uint64_t stk__shard_size(struct stk_dataset *ds, size_t si);
/* Whether shard si's sample index is still to be built (on first open). */
int stk__shard_pending(const struct stk_dataset *ds, size_t si);
/* Whether shards are staged (a cache) rather than read in place. */
int stk__dataset_staged(const struct stk_dataset *ds);
/* Stage shard si ahead of need and pin it (a look-ahead hint; never
 * blocks); stk__shard_unpin drops that pin. No-ops for local shards. */
void stk__shard_prefetch(struct stk_dataset *ds, size_t si);
void stk__shard_unpin(struct stk_dataset *ds, size_t si);
/* Bytes that may be staged ahead of the reader; 0 = no look-ahead. */
uint64_t stk__dataset_prefetch_budget(const struct stk_dataset *ds);

/* Global sample n -> shard position (binary search over the counted
 * shards' first sample numbers). */
size_t stk__dataset_shard_of(const struct stk_dataset *ds, uint64_t n);
/* The shard table as the loader sees it (table.c): it asks here rather
 * than reading the table. streamed: counted as shards arrive (see
 * stk__dataset_count_through); counted: shards [0, counted) have their
 * first sample number and count (all of them unless streamed). */
int stk__dataset_streamed(const struct stk_dataset *ds);
size_t stk__dataset_counted(const struct stk_dataset *ds);
const char *stk__shard_path(const struct stk_dataset *ds, size_t si);
uint64_t stk__shard_first(const struct stk_dataset *ds, size_t si);
uint64_t stk__shard_count(const struct stk_dataset *ds, size_t si);
/* The class label of every sample of shard si, or -1. */
int32_t stk__shard_label(const struct stk_dataset *ds, size_t si);
/* Whether shard si has its sample index (else: a plain file, or pending). */
int stk__shard_indexed(const struct stk_dataset *ds, size_t si);
/* Global sample n's byte range in shard si: 1 with *off and *len set when
 * the shard has a sample index, 0 for a plain file (one sample, the whole
 * file, whose size the caller learns from its descriptor). */
int stk__sample_range(const struct stk_dataset *ds, size_t si, uint64_t n, uint64_t *off,
                      uint64_t *len);
/* The format's parse of one sample of shard si (exactly its range's bytes
 * in buf; off is the range's offset, for messages): fields into out, whose
 * index the caller sets to the sample's global number first. */
int stk__sample_parse(const struct stk_dataset *ds, size_t si, const uint8_t *buf, uint64_t len,
                      uint64_t off, int verify, struct stk_sample *out, char *err);
/* The format's copy that checks a sample's checksums in the copy's own
 * pass (1: copied and intact), or NULL where the format has none. */
typedef int (*stk__copy_check_fn)(uint8_t *dst, const uint8_t *src, uint64_t len);
stk__copy_check_fn stk__sample_copy_check(const struct stk_dataset *ds);
/* Shard si's size as opening the dataset learned it, never by asking the
 * file system again (a stat per file is 1.28 million calls for ImageNet as
 * class folders): the cache's size of a staged shard, the size a dataset
 * index records (MDS), else where its last indexed sample ends; 0 for a
 * plain file, whose name and count stand for it. What a sampler's
 * fingerprint hashes. */
uint64_t stk__shard_known_bytes(const struct stk_dataset *ds, size_t si);
/* Mean stored bytes of a sample over the counted shards, from their
 * indexes (or the cache's shard sizes); 0 when unknown without opening
 * files (plain files). */
uint64_t stk__dataset_mean_sample_bytes(struct stk_dataset *ds);

/* A streamed dataset (opened without a manifest: stk_dataset's streamed)
 * counts its shards as they arrive, in order: stage the next shards
 * (several at once, within the cache's prefetch budget), index each, and
 * give it its first sample number, until at least min_shards shards and
 * min_samples samples are counted, or every shard is. Serialized; returns
 * at once when enough is counted already. cancel may be NULL; err gets
 * the failure (file and cause). An empty dataset is STK_EEMPTY once its
 * last shard is counted. */
int stk__dataset_count_through(struct stk_dataset *ds, size_t min_shards, uint64_t min_samples,
                               const int *cancel, char *err);
/* Whether every shard's samples are counted (always, unless streamed). */
int stk__dataset_all_counted(const struct stk_dataset *ds);
#endif
