/* The dataset's shard table as the other layers see it. Formats get the
 * narrow calls of format_impl.h (the shards in order, the root, the
 * message buffer, their own state slot, adding a shard); the loader gets
 * those of dataset_impl.h (what a shard is called, where its samples are
 * numbered, their byte ranges, the format's parse of one sample). Neither
 * reads struct stk_dataset, so the table is this layer's to lay out and
 * fill (docs/internals/layers.md). */
#include <stdlib.h>
#include <string.h>

#include "dataset_impl.h"

/* ---- what a format sees (format_impl.h) --------------------------------- */

size_t stk__ds_nshards(const struct stk_dataset *ds) { return ds->nshards; }

struct stk_shard *stk__ds_shard(const struct stk_dataset *ds, size_t i) {
  return &ds->shards[i];
}

size_t stk__ds_shard_no(const struct stk_dataset *ds, const struct stk_shard *sh) {
  return (size_t)(sh - ds->shards);
}

int stk__ds_shard_ready(const struct stk_dataset *ds, const struct stk_shard *sh) {
  return !__atomic_load_n(&ds->rows[sh - ds->shards].pending, __ATOMIC_ACQUIRE);
}

const char *stk__ds_root(const struct stk_dataset *ds) { return ds->root; }

char *stk__ds_err(struct stk_dataset *ds) { return ds->err; }

void *stk__ds_state(const struct stk_dataset *ds) {
  return __atomic_load_n(&ds->fmt_state, __ATOMIC_ACQUIRE);
}

void *stk__ds_state_set(struct stk_dataset *ds, void *st) {
  void *none = NULL;
  if (__atomic_compare_exchange_n(&ds->fmt_state, &none, st, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return st;
  return none;
}

/* Append a shard (path copied); shards and their rows grow by doubling at
 * powers of two. */
int stk__dataset_add_shard(struct stk_dataset *ds, const char *path, int32_t label) {
  size_t n = ds->nshards;
  if ((n & (n - 1)) == 0) {
    size_t nc = n < 16 ? 16 : n * 2;
    struct stk_shard *s = realloc(ds->shards, nc * sizeof *s);
    if (!s) return STK_ENOMEM;
    ds->shards = s;
    struct stk__shard_row *r = realloc(ds->rows, nc * sizeof *r);
    if (!r) return STK_ENOMEM;
    ds->rows = r;
  }
  memset(&ds->rows[n], 0, sizeof ds->rows[n]);
  struct stk_shard *sh = &ds->shards[n];
  memset(sh, 0, sizeof *sh);
  sh->path = strdup(path);
  if (!sh->path) return STK_ENOMEM;
  sh->label = label;
  sh->file_bytes = UINT64_MAX;
  ds->nshards = n + 1;
  return 0;
}

/* ---- what the loader sees (dataset_impl.h) ------------------------------ */

size_t stk__dataset_shard_of(const struct stk_dataset *ds, uint64_t n) {
  /* last counted shard with first <= n */
  size_t lo = 0, hi = ds->streamed ? __atomic_load_n(&ds->counted, __ATOMIC_ACQUIRE) : ds->nshards;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (ds->rows[mid].first <= n)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

int stk__dataset_streamed(const struct stk_dataset *ds) { return ds->streamed; }

size_t stk__dataset_counted(const struct stk_dataset *ds) {
  return ds->streamed ? __atomic_load_n(&ds->counted, __ATOMIC_ACQUIRE) : ds->nshards;
}

const char *stk__shard_path(const struct stk_dataset *ds, size_t si) { return ds->shards[si].path; }

uint64_t stk__shard_first(const struct stk_dataset *ds, size_t si) { return ds->rows[si].first; }

uint64_t stk__shard_count(const struct stk_dataset *ds, size_t si) { return ds->shards[si].count; }

int32_t stk__shard_label(const struct stk_dataset *ds, size_t si) { return ds->shards[si].label; }

int stk__shard_indexed(const struct stk_dataset *ds, size_t si) {
  return ds->shards[si].idx != NULL;
}

int stk__sample_range(const struct stk_dataset *ds, size_t si, uint64_t n, uint64_t *off,
                      uint64_t *len) {
  const struct stk_shard *sh = &ds->shards[si];
  if (!sh->idx) return 0;
  *off = sh->idx[n - ds->rows[si].first].off;
  *len = sh->idx[n - ds->rows[si].first].len;
  return 1;
}

int stk__sample_parse(const struct stk_dataset *ds, size_t si, const uint8_t *buf, uint64_t len,
                      uint64_t off, int verify, struct stk_sample *out, char *err) {
  return ds->fmt->parse(ds, &ds->shards[si], out->index - ds->rows[si].first, buf, len, off, verify,
                        out, err);
}

stk__copy_check_fn stk__sample_copy_check(const struct stk_dataset *ds) {
  return ds->fmt ? ds->fmt->copy_check : NULL;
}

uint64_t stk__shard_known_bytes(const struct stk_dataset *ds, size_t si) {
  if (stk__dataset_staged(ds)) {
    uint64_t b = stk__shard_size((struct stk_dataset *)ds, si);
    return b == UINT64_MAX ? 0 : b;
  }
  const struct stk_shard *sh = &ds->shards[si];
  if (sh->file_bytes != UINT64_MAX && sh->file_bytes) return sh->file_bytes;
  if (sh->idx && sh->count) return sh->idx[sh->count - 1].off + sh->idx[sh->count - 1].len;
  return 0;
}

uint64_t stk__dataset_mean_sample_bytes(struct stk_dataset *ds) {
  uint64_t bytes = 0, n = 0;
  size_t counted = stk__dataset_counted(ds);
  for (size_t i = 0; i < counted; i++) {
    const struct stk_shard *sh = &ds->shards[i];
    if (sh->idx) {
      for (uint64_t k = 0; k < sh->count; k++) bytes += sh->idx[k].len;
    } else if (stk__dataset_staged(ds)) {
      uint64_t b = stk__shard_size(ds, i);
      if (b == UINT64_MAX) continue;
      bytes += b;
    } else {
      continue;
    }
    n += sh->count;
  }
  return n ? bytes / n : 0;
}
