/* GPT sample windows as Megatron-LM builds them (megatron-core 0.16.1,
 * megatron/core/datasets/gpt_dataset.py and helpers.cpp): the document
 * index (the split's documents repeated over the epochs needed, shuffled),
 * the sample index (where each window of seq_len + 1 tokens starts and
 * ends, windows crossing document boundaries), the shuffle index (the order
 * windows are served in), and BlendedDataset's choice of source per sample.
 * Built from plain arrays, so they do not depend on how the corpus is
 * stored; the same inputs give arrays equal to Megatron's, element for
 * element and dtype for dtype. docs/internals/tokens.md has the semantics. */
#ifndef STOKER_LOADER_GPT_INDEX_H
#define STOKER_LOADER_GPT_INDEX_H

#include <stdint.h>

/* What GPTDataset is built from. The zero value of each flag is Megatron's
 * default, so `{.lengths = ..., .seq_len = 4096}` is a training split. */
struct stk__gpt_cfg {
  /* Token count of every document of the corpus (Megatron's
   * IndexedDataset.sequence_lengths: GPT counts .idx sequences, one per
   * document as Megatron's tools write them); read during the build only. */
  const int32_t *lengths;
  uint64_t n_lengths;
  /* The split's document ids, in order (Megatron's `indices`, a range
   * from the split matrix); NULL means every document, 0..n_lengths-1. */
  const int32_t *docs;
  uint64_t n_docs;
  int32_t seq_len;      /* tokens per sample (Megatron's sequence_length) */
  uint64_t num_samples; /* samples wanted; 0 means one epoch (Megatron's None) */
  uint32_t seed;        /* Megatron's random_seed (default 1234) */
  /* add_extra_token_to_sequence = False: windows of seq_len tokens, not
   * seq_len + 1. */
  int no_extra_token;
  /* drop_last_partial_sequence = False (Megatron does this only for the
   * validation split with drop_last_partial_validation_sequence off): a
   * last window shorter than the others is kept, to be padded. */
  int keep_last_partial;
};

/* The three arrays and what they were built from. A plain header and
 * plain arrays, so that a later cache file can hold them as they are. */
struct stk__gpt_index {
  uint64_t tokens_per_epoch;     /* tokens in the split's documents */
  uint32_t num_epochs;           /* passes over the split needed for num_samples */
  int separate_final_epoch;      /* last epoch shuffled on its own (it is < 80% used) */
  uint64_t n_samples_sans_final; /* samples before the final epoch, when separate */
  int32_t seq_len;
  int extra; /* 1 when windows hold seq_len + 1 tokens */

  /* Document index: n_doc = num_epochs * n_docs document ids (int32). */
  uint64_t n_doc;
  int32_t *doc_index;
  /* Sample index: n_samples + 1 rows of (document-index position, token
   * offset in that document); window i runs from row i to row i + 1
   * (plus `extra` tokens). int64 elements when sample_i64, else int32, as
   * Megatron picks: int64 only when the document index or a document is
   * longer than INT32_MAX. */
  uint64_t n_samples;
  int sample_i64;
  void *sample_index;
  /* Shuffle index: n_samples window numbers, the serving order. int64
   * elements when shuffle_i64 (n_samples >= 2^32 - 2), else uint32. */
  int shuffle_i64;
  void *shuffle_index;
};

/* Build the three indices. On success *ix owns three malloc'ed arrays
 * (stk__gpt_index_free releases them). Fails, leaving *ix empty, with
 * STK_EINVAL (seq_len < 1, NULL arrays), STK_EEMPTY (no documents, an empty
 * split, a split without tokens), STK_ERANGE (a document id outside the
 * corpus, a negative length, sizes that overflow), STK_ENOMEM; err
 * (STK_ERRMSG_MAX bytes, may be NULL) says which input and why. */
int stk__gpt_index_build(const struct stk__gpt_cfg *cfg, struct stk__gpt_index *ix, char *err);
void stk__gpt_index_free(struct stk__gpt_index *ix);

/* Row r of the sample index and entry k of the shuffle index, whatever
 * their element type. */
void stk__gpt_sample_row(const struct stk__gpt_index *ix, uint64_t r, int64_t *doc_pos,
                         int64_t *offset);
uint64_t stk__gpt_shuffle_at(const struct stk__gpt_index *ix, uint64_t k);

/* Window k of the serving order, found in O(1) (resume is arithmetic):
 * the sample it is (shuffle index), and the document-index positions and
 * offsets where it begins and ends. Its tokens are: from document
 * doc_index[pos_begin] at off_begin, every following document of the
 * document index whole, up to document doc_index[pos_end] ending before
 * off_end + extra; when pos_begin == pos_end, off_begin to off_end + extra
 * of that one document. Fewer than seq_len + extra tokens (only with
 * keep_last_partial) means the window is padded, as Megatron pads it. */
struct stk__gpt_window {
  uint64_t sample;
  int64_t pos_begin, off_begin;
  int64_t pos_end, off_end;
};
int stk__gpt_window(const struct stk__gpt_index *ix, uint64_t k, struct stk__gpt_window *w,
                    char *err);

/* The pieces of a window, in order: piece j is `len` tokens of document
 * `doc` from token `offset`. Writes at most cap pieces and returns how many
 * the window has (pos_end - pos_begin + 1), like snprintf; lengths are the
 * corpus's document lengths the index was built from. */
struct stk__gpt_piece {
  int32_t doc;
  int64_t offset, len;
};
uint64_t stk__gpt_window_pieces(const struct stk__gpt_index *ix, const int32_t *lengths,
                                const struct stk__gpt_window *w, struct stk__gpt_piece *pieces,
                                uint64_t cap);

/* ---- blends (BlendedDataset) ------------------------------------------- */

/* Megatron's normalize(): weights divided by their sum, the sum taken as
 * NumPy sums a float64 array (pairwise, eight accumulators), so the
 * quotients are the same doubles. Fails with STK_EINVAL unless every
 * weight is finite and positive. */
int stk__gpt_blend_normalize(const double *w, int n, double *out, char *err);

/* helpers.build_blending_indices: for each of size samples, the source
 * whose count lags its weight most (weight * max(i, 1) - count, the first
 * source on ties) and that source's next sample number. weights are used
 * as given (Megatron normalizes them first: stk__gpt_blend_normalize).
 * dataset_index is int16 as Megatron's; n < 32767 sources. counts (n
 * entries, may be NULL) receives the samples drawn from each source. */
int stk__gpt_blend_build(const double *weights, int n, uint64_t size, int16_t *dataset_index,
                         int64_t *dataset_sample_index, uint64_t *counts, char *err);

/* helpers.build_exhaustive_blending_indices (a blend without weights and
 * size: every sample of every source once): sizes[i] samples of source i,
 * interleaved by the same lag rule among the sources not yet spent.
 * size = sum(sizes) entries are written. */
int stk__gpt_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                    int64_t *dataset_sample_index, char *err);

/* What BlendedMegatronDatasetBuilder asks of a weighted blend for target
 * samples: the weights normalized twice (the builder and BlendedDataset
 * each normalize), the samples each source's GPTDataset is built with
 * (ceil(ceil(target * w) * (1 + surplus)), Megatron's
 * mid_level_dataset_surplus is 0.005) and the blend's size (the sum of
 * ceil(target * w), which may exceed target). */
int stk__gpt_blend_plan(const double *weights, int n, uint64_t target, double surplus,
                        double *norm_weights, uint64_t *source_samples, uint64_t *blend_size,
                        char *err);

#endif
