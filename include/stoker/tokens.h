/* Token windows for LLM training: a Megatron-LM indexed dataset (or a
 * weighted blend of several) cut into windows of seq_len + 1 tokens in
 * Megatron GPTDataset's order, and served by the loader as one contiguous
 * [batch, seq_len + 1] int32 or int64 array per batch, with a loss mask and
 * the document boundaries inside every window.
 *
 *   stk_tokens_open()        the corpus, its split and its window indices
 *                            (built once and kept in an index file, or
 *                            mapped from it by every other process)
 *   stk_loader_open_tokens() the loader's threads, ring and stats over them
 *   stk_batch_tokens()       a batch's arrays
 *
 * Window k of the order is found in O(1) from the indices, so a saved
 * loader state resumes at any world size by arithmetic. The semantics,
 * the index file and the packing rule: docs/internals/tokens.md. */
#ifndef STOKER_TOKENS_H
#define STOKER_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"
#include "stoker/export.h"
#include "stoker/format.h"
#include "stoker/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How documents become windows. */
enum stk_windows {
  /* Megatron GPTDataset's windows: seq_len + 1 tokens cut across document
   * boundaries from the shuffled documents; the same tokens in the same
   * order as megatron-core 0.16.1 for the same inputs. */
  STK_WINDOWS_MEGATRON = 0,
  /* Every window inside one document: a document of L tokens gives the
   * windows starting at 0, seq_len, 2 seq_len, ... below L - 1, each up to
   * seq_len + 1 tokens, the last padded (loss mask 0 on the padding). */
  STK_WINDOWS_DOCUMENT,
  /* Whole documents packed into windows of seq_len + 1 tokens, in the
   * shuffled document order, next-fit: a document that does not fit the
   * rest of the window starts the next one; one longer than a window is
   * split across windows. The boundaries come back as cu_seqlens. */
  STK_WINDOWS_PACK,
};

/* The batches' token type. An int64 corpus read into int32 batches has each
 * token checked: one outside int32 fails its window with STK_ERANGE naming
 * the document and token. */
enum stk_token_type { STK_TOKENS_INT32 = 0, STK_TOKENS_INT64 };

/* Programs built against this header keep working with a newer library:
 * set the options with stk_tokens_opts_init() (see stk_loader_opts). */
struct stk_tokens_opts {
  size_t struct_size; /* set by stk_tokens_opts_init(); 0 = this header's */
  uint32_t seq_len;   /* tokens per sample (Megatron's sequence_length); required */
  /* Windows wanted (Megatron's num_samples): the documents are repeated
   * over as many epochs as that needs, and the order holds every window of
   * those epochs, as Megatron's GPTDataset does (document windows: exactly
   * this many). 0: `epochs` passes over the split. A weighted blend needs
   * it (the sources' sizes follow from it; the blend holds about this many). */
  uint64_t samples;
  uint32_t epochs;       /* with samples 0; 0 = 1 */
  const char *split;     /* Megatron's split, "969,30,1"; NULL = every document */
  uint32_t split_index;  /* which part: 0 train, 1 validation, 2 test */
  uint32_t seed;         /* Megatron's random_seed; init sets 1234 */
  int windows;           /* enum stk_windows */
  int token_type;        /* enum stk_token_type of the batches */
  int64_t pad_token;     /* written on padding; init sets -1 (Megatron's _PAD_TOKEN_ID) */
  int no_extra_token;    /* windows of seq_len tokens (add_extra_token_to_sequence off) */
  int keep_last_partial; /* keep a last short window, padded (Megatron's
                            drop_last_partial_sequence off) */
  /* Where index files live: a folder (created if missing). NULL: beside the
   * data (the folder of its first .bin), or built in memory only, with a
   * log line, when that folder is not writable. */
  const char *index_dir;
  int no_index_file;                      /* build in memory, never read or write an index file */
  const struct stk_dataset_opts *dataset; /* how each source is opened; NULL = defaults */
};

#define stk_tokens_opts_init(o) stk_tokens_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_tokens_opts_init_sized(struct stk_tokens_opts *o, size_t size);

struct stk_tokens;

/* Open n Megatron datasets (prefix path/corpus for corpus.bin + .idx, a
 * folder of such pairs taken as one corpus in name order, or a URL) and
 * build or load their window indices. n == 1: the dataset alone (weights
 * ignored, may be NULL). n > 1: Megatron's BlendedDataset over them with
 * weights[i] > 0 (normalized as Megatron does) and opts->samples windows
 * in all. Every rank of a job may call this at once: one process per index
 * file builds it (an flock'd lock file beside it) while the others wait
 * and then map what it wrote; a file for another configuration or
 * dataset, or one that fails its checksum, is rebuilt, never used.
 * Returns 0, or a code with one sentence in errmsg (STK_ERRMSG_MAX bytes,
 * may be NULL): STK_EINVAL for bad options (seq_len 0, a split that does
 * not parse, a weight <= 0), STK_EFORMAT for a dataset that is not
 * Megatron's or holds float tokens, STK_EEMPTY for an empty split, the
 * dataset's own errors. *out only on success; close with stk_tokens_close
 * after every loader opened on it. */
STK_EXPORT int stk_tokens_open(struct stk_tokens **out, int n, const char *const *paths,
                               const double *weights, const struct stk_tokens_opts *opts,
                               char *errmsg);
STK_EXPORT void stk_tokens_close(struct stk_tokens *t);

/* Windows in the order (the blend's size for a blend). */
STK_EXPORT uint64_t stk_tokens_num_windows(const struct stk_tokens *t);
/* Tokens in a window row: seq_len + 1, or seq_len with no_extra_token. */
STK_EXPORT uint32_t stk_tokens_row_len(const struct stk_tokens *t);
/* A fingerprint of the corpus and configuration; loader states carry it,
 * so a resume on another corpus or configuration is refused. Never 0. */
STK_EXPORT uint64_t stk_tokens_fingerprint(const struct stk_tokens *t);

/* Window k of the order (0 <= k < num_windows), copied out: row_len tokens
 * of the token type into tokens, and optionally loss_mask (row_len bytes,
 * 1 on real tokens, 0 on padding), cu (row_len + 1 int32 entries: 0, then
 * the end of each document piece, the last the real token count) and *ncu
 * (entries written to cu). Thread-safe; O(1) (document windows and packing
 * alike). STK_ERANGE past the end. */
STK_EXPORT int stk_tokens_window(struct stk_tokens *t, uint64_t k, void *tokens, uint8_t *loss_mask,
                                 int32_t *cu, uint32_t *ncu, char *errmsg);

/* One source of a blend (the only one without a blend). */
struct stk_tokens_source {
  const char *path;       /* as given; owned by t */
  double weight;          /* normalized; 1 alone */
  uint64_t documents;     /* in its split */
  uint64_t tokens;        /* in its split, one epoch */
  uint64_t windows;       /* its GPT dataset's windows */
  uint64_t blend_windows; /* windows of the order taken from it */
  uint64_t served;        /* windows read from it so far (loaders and stk_tokens_window) */
  int built;              /* 1: this open built its index; 0: mapped an index file */
  const char *index_path; /* the index file, or NULL when built in memory only */
};
STK_EXPORT int stk_tokens_num_sources(const struct stk_tokens *t);
/* STK_ERANGE past the last source. */
STK_EXPORT int stk_tokens_source(const struct stk_tokens *t, int i, struct stk_tokens_source *out);
/* A blend's own index (which source and which of its windows each window
 * of the order is), kept in a file beside the first source's index like a
 * source's: 1 when this open built it, 0 when it mapped the file another
 * open wrote; *path (may be NULL) the file, or NULL when built in memory
 * only. STK_EINVAL for a single source (no blend). */
STK_EXPORT int stk_tokens_blend_index(const struct stk_tokens *t, int *built, const char **path);

/* ---- the loader over token windows ------------------------------------ */

/* The loader pipeline (threads, ring, memory cap, stats, state) serving
 * t's windows: position p of a pass is window p of the order; rank r of
 * world takes positions r, r + world, ... as the sampler does (shares pad
 * and drop included), so a state saved at any world size resumes at any
 * other. Each batch is batch_size windows (one pass of the order is an
 * epoch; opts->epochs passes). The sampler's shuffle and seed, decode and
 * io_engine options are ignored (the order is the index's; states record
 * t's seed). t must outlive the loader. Batches: stk_batch_tokens. */
STK_EXPORT int stk_loader_open_tokens(struct stk_loader **out, struct stk_tokens *t,
                                      const struct stk_loader_opts *opts, char *errmsg);

/* A token batch's arrays, owned by the loader until stk_batch_release():
 * rows windows of cols = row_len tokens, back to back (row i at
 * tokens + i * cols elements), writable so a consumer may wrap them
 * without a copy. loss_mask[i * cols + j] is 1 on real tokens and 0 on
 * padding. Row i's document boundaries: cu_seqlens[i * cu_stride ..] holds
 * cu_count[i] offsets, 0 first and the real token count last (inputs are
 * tokens[0 .. cols - 1), labels tokens[1 .. cols); with packing, a label
 * across a boundary belongs to no document). windows[i] is the window's
 * number in the order. */
struct stk_token_batch {
  uint32_t rows, cols;
  int type; /* enum stk_token_type */
  void *tokens;
  const uint8_t *loss_mask;
  const int32_t *cu_seqlens;
  const int32_t *cu_count;
  uint32_t cu_stride; /* cols + 1 */
  const uint64_t *windows;
};
/* STK_EINVAL when l was not opened with stk_loader_open_tokens. */
STK_EXPORT int stk_batch_tokens(const struct stk_loader *l, const struct stk_batch *b,
                                struct stk_token_batch *out);

#ifdef __cplusplus
}
#endif
#endif
