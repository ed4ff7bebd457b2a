/* The dataset layer's internal interface: how the loader (and the CLI's
 * readers, through the public calls) reach shards. A shard is opened,
 * sized, prefetched and released here whether it is a local file or a copy
 * staged by the cache; nobody above this layer includes the cache, and the
 * formats below it never see where the bytes came from. The map of who may
 * include whom is docs/internals/layers.md (checked by `make layers`). */
#ifndef STOKER_DATASET_IMPL_H
#define STOKER_DATASET_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../cache/cache_impl.h"
#include "../format/format_impl.h"

/* The layer's own record of shard i, beside the format's (shards[i]):
 * where its samples are numbered and whether its index is still to be
 * built. Nothing outside this layer sees or writes these. */
struct stk__shard_row {
  uint64_t first;      /* global number of the first sample (once counted) */
  /* Shards opened lazily (remote datasets, shard lists): the index is built
   * when the shard is first opened (pending), and count may come from a
   * manifest or a dataset index first (count_known, checked then). */
  uint8_t pending;     /* read with __atomic_load_n */
  uint8_t count_known;
};

/* A dataset: its format, its shard table, and where shards come from.
 * Everything here is this layer's: formats reach the table through the
 * stk__ds_* calls of format_impl.h (table.c), and the loader through the
 * calls below, never by reading these fields. */
struct stk_dataset {
  const struct stk_format_ops *fmt;
  char *root;
  struct stk_shard *shards; /* what the format sees of each shard */
  struct stk__shard_row *rows; /* this layer's own, nshards entries beside shards */
  size_t nshards;
  /* Samples in the shards counted so far: shards [0, counted) have their
   * count and first sample number. Opened from a manifest, an index or
   * local files, every shard is counted at open; opened remotely without
   * one (streamed), shards are counted as they arrive, in order
   * (stk__dataset_count_through), and both grow until counted == nshards.
   * Read with __atomic loads by other threads. A dataset that is not
   * streamed is complete whatever `counted` says. */
  uint64_t nsamples;
  size_t counted;
  uint8_t streamed;
  void *fmt_state; /* the format's (stk__ds_state); freed by its free_state */
  char err[STK_ERRMSG_MAX];
  /* Shards staged through the cache (a URL, or a path with a cache
   * directory); NULL for local shards read in place. */
  struct stk_cache *cache;
  /* Serializes building the indexes of pending shards. */
  pthread_mutex_t ix_mu;
  /* Serializes counting a streamed dataset's shards in order; count_ahead
   * (nshards entries, made on first use) holds what each shard queued for
   * staging added to the bytes staged ahead. */
  pthread_mutex_t count_mu;
  uint64_t *count_ahead;
  /* stk_dataset_read's descriptor of the last shard it read, so a
   * sequential scan (inspect, verify, pack) opens each shard once. */
  pthread_mutex_t rd_mu;
  int rd_fd;
  size_t rd_shard;
  /* Shards read in ranges through the cache's chunks, never staged whole
   * (a remote paired format: Megatron's .bin). */
  int chunked;
};

/* Flags of stk__shard_open. */
#define STK_SHARD_DIRECT 0x1u /* O_DIRECT where the shard is a local file */

/* A readable descriptor of shard si: the file opened in place, or the copy
 * staged by the cache (blocking while it is fetched; pinned until
 * stk__shard_close). A pending shard's sample index is built on first
 * open. cancel may be NULL; STK_ECANCELED when *cancel becomes nonzero.
 * Errors set err (file and cause). */
int stk__shard_open(struct stk_dataset *ds, size_t si, unsigned flags, int *fd, const int *cancel,
                    char *err);
/* The format's index hook for shard si, given the bytes of the shard open
 * at fd (a reader over them: the hook never sees the descriptor). */
int stk__shard_index(struct stk_dataset *ds, size_t si, int fd, char *err);
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

/* Opening, one file per source: remote.c (a URL, or a path with a cache
 * directory, given the shard names or left to find them), local.c (a
 * directory or a file, format detection). sources.c expands patterns and
 * shard lists into names first. */
struct stk__names {
  char **v; /* owned */
  size_t n, cap;
};
int stk__names_add(struct stk__names *l, const char *s);
void stk__names_free(struct stk__names *l);

int stk__dataset_open_remote(struct stk_dataset *ds, const char *url,
                             const struct stk__names *names, const struct stk_dataset_opts *opts,
                             char *err);
/* remote.c's open at url itself (stk__dataset_open_remote, in
 * remote_pair.c, adds the prefix form), and the indexing of a remote
 * paired format's shards from their companions (remote_pair.c). */
int stk__dataset_open_remote_at(struct stk_dataset *ds, const char *url,
                                const struct stk__names *names,
                                const struct stk_dataset_opts *opts, char *err);
/* The warning for shards in subfolders a folder's reading leaves out (a
 * local folder and a remote listing say the same): the folder, how many,
 * the format, "s", an example, ", ..." */
#define STK__NESTED_FMT                                                                  \
  "%s: %zu %s shard%s in subfolders left out (%s%s): a folder's shards are read from " \
  "its top level (and its class folders, for formats that have them); name deeper "    \
  "ones with a pattern or a shard list"

/* remote_names.c: 1 when a component of name starts with '.'; labels of
 * files listed remotely by their first-level folder (in name order, or
 * with by_number by the folders' numbers when all are numbers), files at
 * the top -1. */
int stk__name_hidden(const char *name);
int stk__dataset_class_labels(struct stk_dataset *ds, const struct stk_cache_shard *v, size_t n,
                              int by_number, char *err);
int stk__dataset_index_pairs(struct stk_dataset *ds, struct stk_origin *o,
                             const struct stk_cache_shard *v, size_t n, const int *cancel,
                             char *err);
/* Whether a file next to shards is a companion, never a shard (a format's
 * side files such as .idx, JSON indexes and manifests). */
int stk__side_file(const char *name);
int stk__dataset_open_local(struct stk_dataset *ds, const struct stk__names *names,
                            const struct stk_dataset_opts *opts, char *err);

/* Sources (sources.c). A WebDataset brace pattern ("a-{000..123}.tar",
 * "{a,b}/x-{0..9}.tar"): 1 if s has one. Expands into out (in order,
 * zero padding kept); STK_EINVAL with err for a malformed pattern,
 * STK_ERANGE past max names. */
int stk__brace_has(const char *s);
int stk__brace_expand(const char *s, size_t max, struct stk__names *out, char *err);
/* A shard-list file's text (one URL or path per line; blank lines and
 * lines starting with '#' skipped, surrounding blanks trimmed; a line may
 * be a brace pattern), relative paths resolved against base_dir. STK_ERANGE
 * past max names in all. */
int stk__list_parse(const char *text, size_t len, const char *base_dir, size_t max,
                    struct stk__names *out, char *err);
/* Split full shard locations (URLs or paths, all from one origin) into the
 * origin root they share (malloc'ed into *root) and names relative to it
 * (replacing the entries of l). STK_EINVAL when they span origins. */
int stk__names_common_root(struct stk__names *l, char **root, char *err);

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
struct stk_origin_opts stk__dataset_origin_opts(const struct stk_dataset_opts *opts);

/* The index building that local and remote opening share. */
int stk__dataset_index_all(struct stk_dataset *ds, int threads, char *err);

#endif
