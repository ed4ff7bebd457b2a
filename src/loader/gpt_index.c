/* Megatron-LM's GPTDataset indices in C: the document, sample and shuffle
 * index of gpt_dataset.py's _build_document_sample_shuffle_indices and
 * helpers.cpp's build_sample_idx, reproduced from their semantics (the
 * choices and the rounding, not the code) so that stoker serves the same
 * windows in the same order. The contracts are in gpt_index.h. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "gpt_index.h"
#include "mt19937.h"

/* Megatron shuffles the final epoch apart from the others when less than
 * this share of it is used (gpt_dataset.py's threshold). */
#define FINAL_EPOCH_THRESHOLD 0.80

/* How many documents ahead the sample-index walk prefetches a length. */
#define LENGTH_AHEAD 16

void stk__gpt_index_free(struct stk__gpt_index *ix) {
  if (!ix) return;
  free(ix->doc_index);
  free(ix->sample_index);
  free(ix->shuffle_index);
  memset(ix, 0, sizeof *ix);
}

static void put_sample(struct stk__gpt_index *ix, uint64_t r, int64_t pos, int64_t off) {
  if (ix->sample_i64) {
    int64_t *p = ix->sample_index;
    p[2 * r] = pos;
    p[2 * r + 1] = off;
  } else {
    int32_t *p = ix->sample_index;
    p[2 * r] = (int32_t)pos;
    p[2 * r + 1] = (int32_t)off;
  }
}

void stk__gpt_sample_row(const struct stk__gpt_index *ix, uint64_t r, int64_t *doc_pos,
                         int64_t *offset) {
  if (ix->sample_i64) {
    const int64_t *p = ix->sample_index;
    *doc_pos = p[2 * r];
    *offset = p[2 * r + 1];
  } else {
    const int32_t *p = ix->sample_index;
    *doc_pos = p[2 * r];
    *offset = p[2 * r + 1];
  }
}

uint64_t stk__gpt_shuffle_at(const struct stk__gpt_index *ix, uint64_t k) {
  if (ix->shuffle_i64) return (uint64_t)((const int64_t *)ix->shuffle_index)[k];
  return ((const uint32_t *)ix->shuffle_index)[k];
}

/* Check the split and count its tokens (Megatron's tokens per epoch). */
static int count_tokens(const struct stk__gpt_cfg *c, uint64_t *tokens, char *err) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < c->n_docs; i++) {
    int64_t d = c->docs ? c->docs[i] : (int64_t)i;
    if (d < 0 || (uint64_t)d >= c->n_lengths)
      return stk__errf(err, STK_ERANGE,
                       "the split's document %" PRIu64 " is document id %" PRId64
                       ", outside the corpus (%" PRIu64 " documents)",
                       i, d, c->n_lengths);
    if (c->lengths[d] < 0)
      return stk__errf(err, STK_ERANGE, "document %" PRId64 " has a negative length (%d tokens)", d,
                       c->lengths[d]);
    sum += (uint64_t)c->lengths[d];
  }
  *tokens = sum;
  return 0;
}

/* Epochs needed for num_samples windows: the fewest whole passes holding
 * num_samples * seq_len + extra tokens (at least one). */
static int count_epochs(const struct stk__gpt_cfg *c, int extra, uint64_t tokens, uint32_t *epochs,
                        char *err) {
  if (c->num_samples == 0) {
    *epochs = 1;
    return 0;
  }
  if (c->num_samples > (UINT64_MAX - 1) / (uint64_t)c->seq_len)
    return stk__errf(err, STK_ERANGE, "%" PRIu64 " samples of %d tokens overflow a 64-bit count",
                     c->num_samples, c->seq_len);
  uint64_t want = c->num_samples * (uint64_t)c->seq_len + (uint64_t)extra;
  uint64_t e = want / tokens + (want % tokens != 0);
  if (e == 0) e = 1;
  if (e > INT32_MAX)
    return stk__errf(err, STK_ERANGE,
                     "%" PRIu64 " samples of %d tokens need %" PRIu64 " epochs of a %" PRIu64
                     "-token split (at most %d)",
                     c->num_samples, c->seq_len, e, tokens, INT32_MAX);
  *epochs = (uint32_t)e;
  return 0;
}

/* Windows in `total` tokens, as build_sample_idx counts them: whole windows
 * only, or (keep_last_partial) one more for a partial tail, rounded as
 * Megatron rounds it, in single precision. */
static uint64_t count_samples(uint64_t total, int extra, int32_t seq_len, int keep_partial) {
  uint64_t t = total - (uint64_t)extra;
  if (!keep_partial) return t / (uint64_t)seq_len;
  float q = (float)t / (float)seq_len;
  return (uint64_t)ceilf(q);
}

/* Decide whether the final epoch is shuffled apart: only when more than one
 * epoch is needed and the samples taken from the last one are fewer than
 * 80% of an epoch's (rounded down). Megatron asserts the count is in range. */
static int final_epoch(const struct stk__gpt_cfg *c, struct stk__gpt_index *ix, char *err) {
  ix->separate_final_epoch = 0;
  ix->n_samples_sans_final = 0;
  if (ix->num_epochs == 1) return 0;
  uint64_t sans = ((uint64_t)(ix->num_epochs - 1) * ix->tokens_per_epoch - (uint64_t)ix->extra) /
                  (uint64_t)c->seq_len;
  uint64_t per_epoch = (ix->tokens_per_epoch - (uint64_t)ix->extra) / (uint64_t)c->seq_len;
  if (c->num_samples < sans || c->num_samples - sans > per_epoch + 1)
    return stk__errf(err, STK_ERANGE,
                     "%" PRIu64 " samples over %u epochs leave %" PRId64
                     " for the last one (Megatron requires 0 to %" PRIu64 ")",
                     c->num_samples, ix->num_epochs, (int64_t)(c->num_samples - sans),
                     per_epoch + 1);
  uint64_t from_final = c->num_samples - sans;
  int64_t threshold = (int64_t)(FINAL_EPOCH_THRESHOLD * (double)per_epoch);
  ix->separate_final_epoch = (int64_t)from_final < threshold;
  ix->n_samples_sans_final = sans;
  return 0;
}

/* The split's documents once per epoch, then shuffled: all epochs together,
 * or all but the last together and the last apart. */
static int build_doc_index(const struct stk__gpt_cfg *c, struct stk__gpt_index *ix,
                           struct stk__mt19937 *mt, char *err) {
  if (c->n_docs > UINT64_MAX / ix->num_epochs ||
      c->n_docs * ix->num_epochs > SIZE_MAX / sizeof(int32_t))
    return stk__errf(err, STK_ERANGE,
                     "%u epochs of %" PRIu64 " documents overflow the document index",
                     ix->num_epochs, c->n_docs);
  ix->n_doc = c->n_docs * ix->num_epochs;
  ix->doc_index = malloc(ix->n_doc * sizeof(int32_t));
  if (!ix->doc_index)
    return stk__errf(err, STK_ENOMEM, "document index of %" PRIu64 " entries", ix->n_doc);
  for (uint64_t i = 0; i < c->n_docs; i++) ix->doc_index[i] = c->docs ? c->docs[i] : (int32_t)i;
  for (uint32_t e = 1; e < ix->num_epochs; e++)
    memcpy(ix->doc_index + e * c->n_docs, ix->doc_index, c->n_docs * sizeof(int32_t));
  if (ix->separate_final_epoch) {
    uint64_t head = ix->n_doc - c->n_docs;
    stk__mt_shuffle_i32(mt, ix->doc_index, head);
    stk__mt_shuffle_i32(mt, ix->doc_index + head, c->n_docs);
  } else {
    stk__mt_shuffle_i32(mt, ix->doc_index, ix->n_doc);
  }
  return 0;
}

/* Walk the document index, seq_len tokens per window: each window starts
 * where the previous one's seq_len tokens end, so with the extra token
 * consecutive windows share one token. A document that ends exactly where
 * a window needs its last token leaves the next window starting on that
 * token. If the documents run out (only for a kept partial window), the
 * row points at the end of the last document, as Megatron's does. */
static int build_sample_index(const struct stk__gpt_cfg *c, struct stk__gpt_index *ix, char *err) {
  /* Megatron widens when max(len(document index), longest document)
   * exceeds INT32_MAX; an int32 length never does by itself. */
  ix->sample_i64 = ix->n_doc > (uint64_t)INT32_MAX;
  size_t es = ix->sample_i64 ? sizeof(int64_t) : sizeof(int32_t);
  if (ix->n_samples >= SIZE_MAX / (2 * es) - 1)
    return stk__errf(err, STK_ERANGE, "%" PRIu64 " samples overflow the sample index",
                     ix->n_samples);
  ix->sample_index = malloc((ix->n_samples + 1) * 2 * es);
  if (!ix->sample_index)
    return stk__errf(err, STK_ENOMEM, "sample index of %" PRIu64 " rows", ix->n_samples + 1);
  const int32_t *len = c->lengths;
  const int32_t *di = ix->doc_index;
  const uint64_t last = ix->n_doc - 1;
  uint64_t pos = 0;
  int64_t off = 0;
  put_sample(ix, 0, 0, 0);
  for (uint64_t r = 1; r <= ix->n_samples; r++) {
    int64_t need = (int64_t)c->seq_len + ix->extra;
    while (need != 0) {
      int64_t avail = (int64_t)len[di[pos]] - off;
      need -= avail;
      if (need <= 0) {
        off += need + avail - ix->extra;
        need = 0;
      } else if (pos == last) {
        off = (int64_t)len[di[pos]] - ix->extra;
        break;
      } else {
        pos++;
        off = 0;
        /* the documents are in shuffled order: fetch a length ahead */
        if (pos + LENGTH_AHEAD <= last) __builtin_prefetch(&len[di[pos + LENGTH_AHEAD]]);
      }
    }
    put_sample(ix, r, (int64_t)pos, off);
  }
  return 0;
}

/* 0..n_samples-1 shuffled: in one range, or the samples before the final
 * epoch and those after it in two. */
static int build_shuffle_index(struct stk__gpt_index *ix, struct stk__mt19937 *mt, char *err) {
  uint64_t n = ix->n_samples;
  ix->shuffle_i64 = n >= (uint64_t)UINT32_MAX - 1;
  size_t es = ix->shuffle_i64 ? sizeof(int64_t) : sizeof(uint32_t);
  if (n > SIZE_MAX / es)
    return stk__errf(err, STK_ERANGE, "%" PRIu64 " samples overflow the shuffle index", n);
  ix->shuffle_index = malloc(n ? n * es : 1);
  if (!ix->shuffle_index)
    return stk__errf(err, STK_ENOMEM, "shuffle index of %" PRIu64 " entries", n);
  uint64_t head = ix->separate_final_epoch ? ix->n_samples_sans_final : n;
  if (head > n) head = n;
  if (ix->shuffle_i64) {
    int64_t *p = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) p[i] = (int64_t)i;
    stk__mt_shuffle_i64(mt, p, head);
    stk__mt_shuffle_i64(mt, p + head, n - head);
  } else {
    uint32_t *p = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    stk__mt_shuffle_u32(mt, p, head);
    stk__mt_shuffle_u32(mt, p + head, n - head);
  }
  return 0;
}

int stk__gpt_index_build(const struct stk__gpt_cfg *c, struct stk__gpt_index *ix, char *err) {
  if (!ix) return stk__errf(err, STK_EINVAL, "no index to build into");
  memset(ix, 0, sizeof *ix);
  if (!c) return stk__errf(err, STK_EINVAL, "no configuration");
  if (c->seq_len < 1)
    return stk__errf(err, STK_EINVAL, "seq_len must be at least 1 token (got %d)", c->seq_len);
  if (c->n_lengths == 0 || !c->lengths)
    return stk__errf(err, STK_EEMPTY, "the corpus has no documents");
  uint64_t n_docs = c->docs ? c->n_docs : c->n_lengths;
  if (n_docs == 0) return stk__errf(err, STK_EEMPTY, "the split has no documents");
  if (n_docs > (uint64_t)INT32_MAX + 1)
    return stk__errf(err, STK_ERANGE, "the split has %" PRIu64 " documents; document ids are int32",
                     n_docs);
  struct stk__gpt_cfg cfg = *c;
  cfg.n_docs = n_docs;
  ix->seq_len = c->seq_len;
  ix->extra = c->no_extra_token ? 0 : 1;
  int rc = count_tokens(&cfg, &ix->tokens_per_epoch, err);
  if (rc) return rc;
  if (ix->tokens_per_epoch == 0)
    return stk__errf(err, STK_EEMPTY, "the split's %" PRIu64 " documents hold no tokens", n_docs);
  if ((rc = count_epochs(&cfg, ix->extra, ix->tokens_per_epoch, &ix->num_epochs, err))) return rc;
  if (ix->tokens_per_epoch > (UINT64_MAX >> 1) / ix->num_epochs)
    return stk__errf(err, STK_ERANGE, "%u epochs of %" PRIu64 " tokens overflow", ix->num_epochs,
                     ix->tokens_per_epoch);
  if ((rc = final_epoch(&cfg, ix, err))) goto fail;
  ix->n_samples = count_samples((uint64_t)ix->num_epochs * ix->tokens_per_epoch, ix->extra,
                                c->seq_len, c->keep_last_partial);
  struct stk__mt19937 mt;
  stk__mt_seed(&mt, c->seed);
  if ((rc = build_doc_index(&cfg, ix, &mt, err))) goto fail;
  if ((rc = build_sample_index(&cfg, ix, err))) goto fail;
  if ((rc = build_shuffle_index(ix, &mt, err))) goto fail;
  return 0;
fail:
  stk__gpt_index_free(ix);
  return rc;
}

int stk__gpt_window(const struct stk__gpt_index *ix, uint64_t k, struct stk__gpt_window *w,
                    char *err) {
  if (k >= ix->n_samples)
    return stk__errf(err, STK_ERANGE, "sample %" PRIu64 " is past the last (%" PRIu64 " samples)",
                     k, ix->n_samples);
  w->sample = stk__gpt_shuffle_at(ix, k);
  stk__gpt_sample_row(ix, w->sample, &w->pos_begin, &w->off_begin);
  stk__gpt_sample_row(ix, w->sample + 1, &w->pos_end, &w->off_end);
  return 0;
}

uint64_t stk__gpt_window_pieces(const struct stk__gpt_index *ix, const int32_t *lengths,
                                const struct stk__gpt_window *w, struct stk__gpt_piece *pieces,
                                uint64_t cap) {
  uint64_t n = (uint64_t)(w->pos_end - w->pos_begin) + 1;
  for (uint64_t j = 0; j < n && j < cap; j++) {
    int64_t pos = w->pos_begin + (int64_t)j;
    int32_t doc = ix->doc_index[pos];
    int64_t from = j == 0 ? w->off_begin : 0;
    int64_t to = pos == w->pos_end ? w->off_end + ix->extra : (int64_t)lengths[doc];
    pieces[j] = (struct stk__gpt_piece){.doc = doc, .offset = from, .len = to - from};
  }
  return n;
}
