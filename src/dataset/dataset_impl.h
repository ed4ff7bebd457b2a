/* The dataset layer's own: struct stk_dataset and its shard table, and
 * what its files share (opening, sources, counting). Only src/dataset/
 * includes this (and tests that make datasets by hand); the loader uses
 * dataset.h, this layer's interface, and the formats the stk__ds_* calls
 * of format_impl.h. The map of who may include whom is
 * docs/internals/layers.md (checked by `make layers`). */
#ifndef STOKER_DATASET_IMPL_H
#define STOKER_DATASET_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../cache/cache_impl.h"
#include "../format/format_impl.h"
#include "dataset.h"

/* The layer's own record of shard i, beside the format's (shards[i]):
 * where its samples are numbered and whether its index is still to be
 * built. Nothing outside this layer sees or writes these. */
struct stk__shard_row {
  uint64_t first; /* global number of the first sample (once counted) */
  /* Shards opened lazily (remote datasets, shard lists): the index is built
   * when the shard is first opened (pending), and count may come from a
   * manifest or a dataset index first (count_known, checked then). */
  uint8_t pending; /* read with __atomic_load_n */
  uint8_t count_known;
};

/* A dataset: its format, its shard table, and where shards come from.
 * Everything here is this layer's: formats reach the table through the
 * stk__ds_* calls of format_impl.h (table.c), and the loader through the
 * calls below, never by reading these fields. */
struct stk_dataset {
  const struct stk_format_ops *fmt;
  char *root;
  struct stk_shard *shards;    /* what the format sees of each shard */
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

/* The format's index hook for shard si, given the bytes of the shard open
 * at fd (a reader over them: the hook never sees the descriptor). */
int stk__shard_index(struct stk_dataset *ds, size_t si, int fd, char *err);

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

struct stk_origin_opts stk__dataset_origin_opts(const struct stk_dataset_opts *opts);

/* The index building that local and remote opening share. */
int stk__dataset_index_all(struct stk_dataset *ds, int threads, char *err);

#endif
