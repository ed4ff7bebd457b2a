/* A source's window index: built (Megatron's GPT windows through
 * gpt_index.c, or stoker's document and packed windows here) and kept in
 * an index file (index_file.c) that every other process maps instead of
 * building again, once per (corpus, configuration). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "mt19937.h"
#include "tokens_impl.h"

#define TIX_VERSION 1u

/* ---- building ------------------------------------------------------------ */

/* The split's documents over epochs, shuffled as one range with NumPy's
 * RandomState(seed) (the document and packed windows' document order). */
static int doc_order(const struct stk__tok_cfg *c, uint32_t epochs, struct stk__gpt_index *ix,
                     struct stk__mt19937 *mt, char *err) {
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths;
  if (nd * epochs > SIZE_MAX / 4 || nd * epochs > (uint64_t)INT64_MAX / 2)
    return stk__errf(err, STK_ERANGE, "%u epochs of %" PRIu64 " documents overflow", epochs, nd);
  free(ix->doc_index);
  ix->n_doc = nd * epochs;
  ix->num_epochs = epochs;
  ix->doc_index = malloc(ix->n_doc ? ix->n_doc * 4 : 4);
  if (!ix->doc_index) return stk__errf(err, STK_ENOMEM, "document index of %" PRIu64, ix->n_doc);
  for (uint64_t e = 0; e < epochs; e++)
    for (uint64_t i = 0; i < nd; i++)
      ix->doc_index[e * nd + i] = c->g.docs ? c->g.docs[i] : (int32_t)i;
  stk__mt_seed(mt, c->g.seed);
  stk__mt_shuffle_i32(mt, ix->doc_index, ix->n_doc);
  return 0;
}

/* Rows of the document or packed windows over the document index; with
 * rows NULL only counts them. DOCUMENT: a row per window start (document
 * position, offset 0, seq_len, ...) below L - extra. PACK: next-fit over
 * the shuffled documents; a row where each window starts, and one more
 * where the last ends. */
static uint64_t walk_rows(const struct stk__tok_cfg *c, const struct stk__gpt_index *ix,
                          int64_t *rows, uint64_t cap) {
  const int32_t *len = c->g.lengths;
  int64_t S = (int64_t)c->g.seq_len + ix->extra, step = c->g.seq_len;
  uint64_t n = 0;
#define ROW(p, o)                                                           \
  do {                                                                      \
    if (rows && n < cap) rows[2 * n] = (int64_t)(p), rows[2 * n + 1] = (o); \
    n++;                                                                    \
  } while (0)
  if (c->mode == STK_WINDOWS_DOCUMENT) {
    for (uint64_t p = 0; p < ix->n_doc; p++) {
      int64_t L = len[ix->doc_index[p]];
      for (int64_t o = 0; o < L - ix->extra; o += step) ROW(p, o);
    }
    ROW(ix->n_doc, 0);
    return n - 1;
  }
  int64_t fill = 0, off = 0;
  uint64_t p = 0;
  ROW(0, 0);
  while (p < ix->n_doc) {
    int64_t r = (int64_t)len[ix->doc_index[p]] - off;
    if (r <= S - fill) { /* the rest of the document fits */
      fill += r;
      p++;
      off = 0;
      if (fill == S) {
        ROW(p, 0);
        fill = 0;
      }
    } else if (fill > 0 && off == 0 && r <= S) { /* whole in the next window */
      ROW(p, 0);
      fill = 0;
    } else { /* longer than a window, or already split: fill this one */
      off += S - fill;
      ROW(p, off);
      fill = 0;
    }
  }
  if (fill > 0) ROW(ix->n_doc, 0);
#undef ROW
  return n - 1;
}

static int build_windows(const struct stk__tok_cfg *c, struct stk__gpt_index *ix, char *err) {
  memset(ix, 0, sizeof *ix);
  ix->seq_len = c->g.seq_len;
  ix->extra = c->g.no_extra_token ? 0 : 1;
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths, T = 0;
  for (uint64_t i = 0; i < nd; i++)
    T += (uint64_t)c->g.lengths[c->g.docs ? c->g.docs[i] : (int32_t)i];
  ix->tokens_per_epoch = T;
  if (!T) return stk__errf(err, STK_EEMPTY, "the split's %" PRIu64 " documents hold no tokens", nd);
  /* Epochs: as asked, or enough for num_samples (document windows: their
   * count per epoch; packing: an estimate by tokens, raised until enough). */
  uint32_t e = c->epochs ? c->epochs : 1;
  struct stk__mt19937 mt;
  int rc;
  if (c->g.num_samples) {
    if ((rc = doc_order(c, 1, ix, &mt, err))) return rc;
    uint64_t per = walk_rows(c, ix, NULL, 0);
    if (!per)
      return stk__errf(err, STK_EEMPTY, "no document of the split is long enough for a window");
    uint64_t need = c->g.num_samples / per + (c->g.num_samples % per != 0);
    if (need > INT32_MAX)
      return stk__errf(err, STK_ERANGE, "%" PRIu64 " windows need %" PRIu64 " epochs",
                       c->g.num_samples, need);
    e = (uint32_t)STK__MAX(need, 1);
  }
  for (;;) {
    if ((rc = doc_order(c, e, ix, &mt, err))) return rc;
    uint64_t n = walk_rows(c, ix, NULL, 0);
    if (!n)
      return stk__errf(err, STK_EEMPTY, "no document of the split is long enough for a window");
    if (c->g.num_samples && n < c->g.num_samples) { /* packing across epoch seams: one more */
      e++;
      continue;
    }
    ix->sample_i64 = 1;
    ix->sample_index = malloc((n + 1) * 16);
    if (!ix->sample_index) return stk__errf(err, STK_ENOMEM, "sample index of %" PRIu64, n + 1);
    walk_rows(c, ix, ix->sample_index, n + 1);
    ix->n_samples = c->g.num_samples ? c->g.num_samples : n;
    break;
  }
  uint64_t n = ix->n_samples;
  ix->shuffle_i64 = n >= (uint64_t)UINT32_MAX - 1;
  ix->shuffle_index = malloc(n * (ix->shuffle_i64 ? 8 : 4));
  if (!ix->shuffle_index) return stk__errf(err, STK_ENOMEM, "shuffle index of %" PRIu64, n);
  if (ix->shuffle_i64) {
    int64_t *s = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) s[i] = (int64_t)i;
    stk__mt_shuffle_i64(&mt, s, n);
  } else {
    uint32_t *s = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) s[i] = (uint32_t)i;
    stk__mt_shuffle_u32(&mt, s, n);
  }
  return 0;
}

static int build(const struct stk__tok_cfg *c, struct stk__gpt_index *ix, char *err) {
  if (c->mode == STK_WINDOWS_MEGATRON) {
    struct stk__gpt_cfg g = c->g;
    /* Several epochs without a sample count: every window of them. */
    if (!g.num_samples && c->epochs > 1) {
      uint64_t nd = g.docs ? g.n_docs : g.n_lengths, T = 0;
      for (uint64_t i = 0; i < nd; i++) T += (uint64_t)g.lengths[g.docs ? g.docs[i] : (int32_t)i];
      int extra = g.no_extra_token ? 0 : 1;
      if (T > (uint64_t)extra)
        g.num_samples = ((uint64_t)c->epochs * T - (uint64_t)extra) / (uint64_t)g.seq_len;
    }
    return stk__gpt_index_build(&g, ix, err);
  }
  int rc = build_windows(c, ix, err);
  if (rc) stk__gpt_index_free(ix);
  return rc;
}

/* ---- the file (index_file.c) -------------------------------------------- */

static uint64_t h64(uint64_t h, uint64_t v) { return stk_mix64(h, v); }

static uint64_t cfg_hash(const struct stk__tok_cfg *c) {
  uint64_t h = h64(0x746f6b656e73ull, TIX_VERSION);
  h = h64(h, (uint64_t)c->mode);
  h = h64(h, c->content);
  h = h64(h, (uint64_t)c->g.seq_len);
  h = h64(h, c->g.num_samples);
  h = h64(h, c->g.num_samples ? 0 : c->epochs);
  h = h64(h, c->g.seed);
  h = h64(h, (uint64_t)c->g.no_extra_token * 2 + (uint64_t)c->g.keep_last_partial);
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths;
  h = h64(h, nd);
  h = h64(h, c->g.docs && nd ? (uint64_t)c->g.docs[0] : 0);
  return h;
}

static void arrays_of(const struct stk__gpt_index *ix, const void *a[3], uint64_t b[3]) {
  a[0] = ix->doc_index;
  b[0] = ix->n_doc * 4;
  a[1] = ix->sample_index;
  b[1] = (ix->n_samples + 1) * 2 * (ix->sample_i64 ? 8 : 4);
  a[2] = ix->shuffle_index;
  b[2] = ix->n_samples * (ix->shuffle_i64 ? 8 : 4);
}

/* The index's scalars as the file keeps them, and back. */
enum { M_TOKENS, M_NDOC, M_NSAMPLES, M_SANS, M_EPOCHS, M_SEPARATE, M_S64, M_SH64, M_SEQ, M_EXTRA };

static void meta_of(const struct stk__gpt_index *ix, uint64_t *m) {
  m[M_TOKENS] = ix->tokens_per_epoch;
  m[M_NDOC] = ix->n_doc;
  m[M_NSAMPLES] = ix->n_samples;
  m[M_SANS] = ix->n_samples_sans_final;
  m[M_EPOCHS] = ix->num_epochs;
  m[M_SEPARATE] = (uint64_t)ix->separate_final_epoch;
  m[M_S64] = (uint64_t)ix->sample_i64;
  m[M_SH64] = (uint64_t)ix->shuffle_i64;
  m[M_SEQ] = (uint64_t)(uint32_t)ix->seq_len;
  m[M_EXTRA] = (uint64_t)(uint32_t)ix->extra;
}

static void index_of(const uint64_t *m, struct stk__gpt_index *ix) {
  memset(ix, 0, sizeof *ix);
  ix->tokens_per_epoch = m[M_TOKENS];
  ix->n_doc = m[M_NDOC];
  ix->n_samples = m[M_NSAMPLES];
  ix->n_samples_sans_final = m[M_SANS];
  ix->num_epochs = (uint32_t)m[M_EPOCHS];
  ix->separate_final_epoch = (int)m[M_SEPARATE];
  ix->sample_i64 = (int)m[M_S64];
  ix->shuffle_i64 = (int)m[M_SH64];
  ix->seq_len = (int32_t)(uint32_t)m[M_SEQ];
  ix->extra = (int32_t)(uint32_t)m[M_EXTRA];
}

struct tix_ctx {
  const struct stk__tok_cfg *c;
  struct stk__gpt_index *ix;
};

static int tix_build(void *ctx, struct stk__ixf *f, char *err) {
  struct tix_ctx *x = ctx;
  int rc = build(x->c, x->ix, err);
  if (rc) return rc;
  meta_of(x->ix, f->meta);
  arrays_of(x->ix, f->arr, f->bytes);
  return 0;
}

static int tix_fits(void *ctx, const struct stk__ixf *f) {
  (void)ctx;
  struct stk__gpt_index ix;
  index_of(f->meta, &ix);
  const void *a[3];
  uint64_t b[3];
  arrays_of(&ix, a, b);
  return b[0] == f->bytes[0] && b[1] == f->bytes[1] && b[2] == f->bytes[2];
}

static const struct stk__ixf_kind tix_kinds[3] = {
    {"gpt", STK_WINDOWS_MEGATRON, tix_build, tix_fits},
    {"document", STK_WINDOWS_DOCUMENT, tix_build, tix_fits},
    {"pack", STK_WINDOWS_PACK, tix_build, tix_fits},
};

int stk__tok_index_get(const struct stk__tok_cfg *c, struct stk__tok_index *out, char *err) {
  memset(out, 0, sizeof *out);
  out->mode = c->mode;
  if (c->mode < 0 || c->mode > 2)
    return stk__errf(err, STK_EINVAL, "windows mode %d is not 0, 1 or 2", c->mode);
  struct tix_ctx x = {c, &out->ix};
  int rc = stk__ixf_get(c->dir, c->name, cfg_hash(c), &tix_kinds[c->mode], &x, &out->file, err);
  if (rc) {
    stk__gpt_index_free(&out->ix);
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->built = out->file.built;
  out->path = out->file.path;
  if (out->file.map) { /* loaded: the arrays are the mapped file's */
    index_of(out->file.meta, &out->ix);
    out->ix.doc_index = (int32_t *)out->file.arr[0];
    out->ix.sample_index = (void *)out->file.arr[1];
    out->ix.shuffle_index = (void *)out->file.arr[2];
  }
  return 0;
}

void stk__tok_index_free(struct stk__tok_index *x) {
  if (!x) return;
  if (x->file.map) {
    memset(&x->ix, 0, sizeof x->ix);
  } else {
    stk__gpt_index_free(&x->ix);
  }
  stk__ixf_unmap(&x->file);
  memset(x, 0, sizeof *x);
}
