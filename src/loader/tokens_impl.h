/* Internals of token windows (tokens.c, tokens_index.c) and what the
 * loader pipeline asks of them. */
#ifndef STOKER_LOADER_TOKENS_IMPL_H
#define STOKER_LOADER_TOKENS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_index.h"
#include "stoker/tokens.h"

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
  void *map; /* the mapped file when loaded (arrays point into it) */
  size_t map_len;
  int built;  /* built by this process (and written, when path is set) */
  char *path; /* the index file, or NULL */
};

/* Load the index file for c if it is there, whole and for this exact
 * configuration; otherwise take the file's lock (waiting while another
 * process builds), look again, and build and write it (temporary file,
 * fsync, rename). A file that fails its checks is rebuilt (with a log
 * line), never used. With c->dir NULL, build in memory. err on failure. */
int stk__tok_index_get(const struct stk__tok_cfg *c, struct stk__tok_index *out, char *err);
void stk__tok_index_free(struct stk__tok_index *x);

/* ---- what the pipeline asks (tokens.c) --------------------------------- */

/* Bytes of a batch buffer of cap rows: tokens, loss mask, boundary counts
 * and boundaries, each region 64-byte aligned. */
size_t stk__tokens_batch_bytes(const struct stk_tokens *t, uint32_t cap);
/* Bytes of one row of tokens. */
size_t stk__tokens_row_bytes(const struct stk_tokens *t);
/* Write window k into row i of a batch buffer of cap rows. Thread-safe. */
int stk__tokens_fill(struct stk_tokens *t, uint64_t k, uint8_t *base, uint32_t cap, uint32_t i,
                     char *err);
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
