/* A blend's order (Megatron's BlendedDataset: the source of each window
 * and which of that source's windows it is), built by gpt_blend.c and
 * kept in an index file (index_file.c) like a source's window index, so
 * that of many ranks opening the same blend one builds and the others map
 * it. The order follows from the normalized weights and the size alone,
 * so they are all the file's hash holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "tokens_impl.h"

#define BLEND_KIND 16u /* the header's kind: apart from the window modes */
#define BLEND_VERSION 1u

struct blend_ctx {
  const double *norm;
  int n;
  uint64_t size;
  struct stk__tok_blend *b;
};

static int blend_build(void *ctx, struct stk__ixf *f, char *err) {
  struct blend_ctx *x = ctx;
  struct stk__tok_blend *b = x->b;
  b->own_ds = malloc(x->size ? x->size * sizeof *b->own_ds : 1);
  b->own_sample = malloc(x->size ? x->size * sizeof *b->own_sample : 1);
  b->own_counts = calloc((size_t)x->n, sizeof *b->own_counts);
  if (!b->own_ds || !b->own_sample || !b->own_counts)
    return stk__errf(err, STK_ENOMEM, "out of memory for a blend of %llu windows",
                     (unsigned long long)x->size);
  int rc = stk__gpt_blend_build(x->norm, x->n, x->size, b->own_ds, b->own_sample, b->own_counts,
                                err);
  if (rc) return rc;
  f->meta[0] = x->size;
  f->meta[1] = (uint64_t)x->n;
  f->arr[0] = b->own_ds;
  f->bytes[0] = x->size * sizeof *b->own_ds;
  f->arr[1] = b->own_sample;
  f->bytes[1] = x->size * sizeof *b->own_sample;
  f->arr[2] = b->own_counts;
  f->bytes[2] = (uint64_t)x->n * sizeof *b->own_counts;
  return 0;
}

static int blend_fits(void *ctx, const struct stk__ixf *f) {
  const struct blend_ctx *x = ctx;
  return f->meta[0] == x->size && f->meta[1] == (uint64_t)x->n && f->bytes[0] == x->size * 2 &&
         f->bytes[1] == x->size * 8 && f->bytes[2] == (uint64_t)x->n * 8;
}

static const struct stk__ixf_kind blend_kind = {"blend", BLEND_KIND, blend_build, blend_fits};

int stk__tok_blend_get(const char *dir, const double *norm, int n, uint64_t size,
                       struct stk__tok_blend *out, char *err) {
  memset(out, 0, sizeof *out);
  uint64_t h = stk_mix64(0x626c656e64ull, BLEND_VERSION);
  h = stk_mix64(stk_mix64(h, (uint64_t)n), size);
  for (int i = 0; i < n; i++) {
    uint64_t w;
    memcpy(&w, &norm[i], sizeof w);
    h = stk_mix64(h, w);
  }
  char name[32];
  snprintf(name, sizeof name, "blend-of-%d", n);
  struct blend_ctx x = {norm, n, size, out};
  int rc = stk__ixf_get(dir, name, h, &blend_kind, &x, &out->file, err);
  if (rc) {
    stk__tok_blend_free(out);
    return rc;
  }
  out->ds = out->file.arr[0];
  out->sample = out->file.arr[1];
  out->counts = out->file.arr[2];
  return 0;
}

void stk__tok_blend_free(struct stk__tok_blend *b) {
  if (!b) return;
  free(b->own_ds);
  free(b->own_sample);
  free(b->own_counts);
  stk__ixf_unmap(&b->file);
  memset(b, 0, sizeof *b);
}
