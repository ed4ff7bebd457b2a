/* Internals of token windows (tokens.c, tokens_index.c) and what the
 * loader pipeline asks of them. */
#ifndef STOKER_LOADER_TOKENS_IMPL_H
#define STOKER_LOADER_TOKENS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_index.h"
#include "stoker/tokens.h"

/* ---- a cached index file (index_file.c) -------------------------------- */

/* Up to STK__IXF_NARR arrays and STK__IXF_NMETA scalars, kept in
 * DIR/NAME.KIND-HASH.stkidx: built by one process per node under the
 * file's lock, mapped by the others, checked in full once per node and
 * boot (docs/internals/tokens.md, "Index files"). */
#define STK__IXF_NARR 3
#define STK__IXF_NMETA 16
struct stk__ixf {
  uint64_t meta[STK__IXF_NMETA];  /* the caller's scalars, kept in the header */
  const void *arr[STK__IXF_NARR]; /* built: the caller's arrays; loaded: into map */
  uint64_t bytes[STK__IXF_NARR];
  void *map; /* the mapped file when loaded, else NULL */
  size_t map_len;
  int built;  /* built by this process (and written, when path is set) */
  char *path; /* the file, or NULL when built in memory only */
};

/* What a file holds: its name in the file name, its id in the header, and
 * two hooks called with the caller's ctx. build fills f's meta and arrays
 * (memory the caller owns and frees); fits says whether a loaded file's
 * meta agrees with its array sizes (1 yes). */
struct stk__ixf_kind {
  const char *name;
  uint32_t id;
  int (*build)(void *ctx, struct stk__ixf *f, char *err);
  int (*fits)(void *ctx, const struct stk__ixf *f);
};

/* Map DIR/NAME.KIND-HASH.stkidx when it is there, whole, for this hash
 * and kind; otherwise take its lock (waiting while another process
 * builds), look again, and build and write it. A file that fails a check
 * is rebuilt (with a log line), never used. With dir NULL, build only.
 * On failure after a build, the caller's arrays are still its to free. */
int stk__ixf_get(const char *dir, const char *name, uint64_t hash, const struct stk__ixf_kind *k,
                 void *ctx, struct stk__ixf *out, char *err);
/* Unmap a loaded file and free the path (the caller frees built arrays). */
void stk__ixf_unmap(struct stk__ixf *f);

/* ---- one source's window index (tokens_index.c) ------------------------ */

/* What a source's windows are built from. g holds Megatron's inputs (the
 * corpus's lengths, the split's documents, seq_len, num_samples, seed,
 * flags); mode is enum stk_windows; epochs the passes wanted when
 * g.num_samples is 0. content is a hash of the corpus (its layout and
 * lengths): with the configuration it names the index file. */
struct stk__tok_cfg {
  struct stk__gpt_cfg g;
  int mode;
  uint32_t epochs;
  uint64_t content;
  const char *dir;  /* folder of the index file; NULL = memory only */
  const char *name; /* the corpus's name, the file name's start */
};

/* A built or mapped index. All three modes keep the GPT index's arrays:
 * the document index (shuffled documents over the epochs), the sample
 * index (rows of document-index position and offset where each window
 * starts; int64 rows in document and pack modes) and the shuffle index.
 * Window k of the order is sample shuffle[k]: MEGATRON as gpt_index.h
 * says; DOCUMENT from its row up to seq_len + extra tokens of that one
 * document; PACK from its row to the next row, not including it. */
struct stk__tok_index {
  struct stk__gpt_index ix;
  int mode;
  struct stk__ixf file; /* the file (the arrays point into its map when loaded) */
  int built;            /* built by this process (and written, when path is set) */
  const char *path;     /* the index file (file.path), or NULL */
};

/* Load the index file for c if it is there, whole and for this exact
 * configuration; otherwise take the file's lock (waiting while another
 * process builds), look again, and build and write it (temporary file,
 * fsync, rename). A file that fails its checks is rebuilt (with a log
 * line), never used. With c->dir NULL, build in memory. err on failure. */
int stk__tok_index_get(const struct stk__tok_cfg *c, struct stk__tok_index *out, char *err);
void stk__tok_index_free(struct stk__tok_index *x);

/* ---- a blend's order (tokens_blend.c) ----------------------------------- */

/* Window k of a blend is window sample[k] of source ds[k]; counts[i] is
 * how many windows source i gives. From the blend's index file when one
 * was written (DIR/blend-of-N.blend-HASH.stkidx), else built (and written
 * when dir is set); dir NULL builds in memory. file.built says which. */
struct stk__tok_blend {
  const int16_t *ds;
  const int64_t *sample;
  const uint64_t *counts;
  struct stk__ixf file;
  int16_t *own_ds; /* the arrays when built here */
  int64_t *own_sample;
  uint64_t *own_counts;
};
int stk__tok_blend_get(const char *dir, const double *norm, int n, uint64_t size,
                       struct stk__tok_blend *out, char *err);
void stk__tok_blend_free(struct stk__tok_blend *b);

/* ---- one piece's tokens (tokens_copy.c) -------------------------------- */

/* n tokens of Megatron dtype code (ts bytes each, little-endian) from p
 * into element at of a row of es-byte (4: int32, 8: int64) elements;
 * int64 tokens into int32 are truncated (the caller checks they fit). */
void stk__tok_put(void *dst, size_t es, uint32_t at, const uint8_t *p, int code, size_t ts,
                  uint64_t n);

/* The copy path stk__tok_put takes: 1 SSE2 (where built), 0 plain C. A
 * level >= 0 sets it (for the tests; at most what the build has), -1
 * leaves it. Returns it. Not thread-safe: set it before copying. */
int stk__tok_level(int level);

/* The next window's plan (this thread's): stk__tok_ahead_begin asks for
 * what is left of the last plan and starts a new one; stk__tok_ahead_add
 * puts a piece of bytes at p on it (up to STK__TOK_AHEAD_PIECES pieces);
 * the vector loops of stk__tok_put then ask for its lines as they copy. */
enum { STK__TOK_AHEAD_PIECES = 32 };
void stk__tok_ahead_begin(void);
void stk__tok_ahead_add(const uint8_t *p, uint64_t bytes);

/* ---- what the pipeline asks (tokens.c) --------------------------------- */

/* Bytes of a batch buffer of cap rows: tokens, loss mask, boundary counts
 * and boundaries, each region 64-byte aligned. */
size_t stk__tokens_batch_bytes(const struct stk_tokens *t, uint32_t cap);
/* Bytes of one row of tokens. */
size_t stk__tokens_row_bytes(const struct stk_tokens *t);
/* Write window k into row i of a batch buffer of cap rows. Thread-safe. */
int stk__tokens_fill(struct stk_tokens *t, uint64_t k, uint8_t *base, uint32_t cap, uint32_t i,
                     char *err);
/* Ask for the cache lines window k's first pieces begin at (and their
 * lengths), and plan the rest of those pieces (stk__tok_ahead_add) for
 * this thread's next copy; nothing when k is out of range. */
void stk__tokens_prefetch(struct stk_tokens *t, uint64_t k);
/* The arrays of a batch of n rows in a buffer of cap rows. */
void stk__tokens_view(const struct stk_tokens *t, uint8_t *base, uint32_t cap, uint32_t n,
                      const uint64_t *ids, struct stk_token_batch *out);
/* The first source's dataset (for messages and the published counters). */
/* Stage the chunks window k lies in, copying nothing (the look-ahead of a
 * remote corpus, lookahead_tokens.c); 0 at once when nothing is chunked. */
int stk__tokens_warm(struct stk_tokens *t, uint64_t k, const int *cancel, char *err);
/* Whether any source's .bin is read through the cache's chunks. */
int stk__tokens_chunked(const struct stk_tokens *t);
struct stk_dataset *stk__tokens_dataset(struct stk_tokens *t);
uint32_t stk__tokens_seed(const struct stk_tokens *t);

#endif
