/* Listing the checkpoints an origin holds (stoker ckpt ls s3://...): one
 * listing of the origin, grouped by checkpoint directory, and each
 * manifest fetched and parsed. A checkpoint without its manifest at the
 * origin (a drain under way or cut short) is listed as partial. */
#include <stdlib.h>
#include <string.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

struct remote_list {
  struct stk_ckpt_info *v;
  size_t n, cap;
  int *has_manifest;
};

static int remote_item(void *arg, const char *name, const struct stk_obj_info *info) {
  struct remote_list *L = arg;
  const char *slash = strchr(name, '/');
  char d[64];
  if (!slash || (size_t)(slash - name) >= sizeof d || strchr(slash + 1, '/')) return 0;
  memcpy(d, name, (size_t)(slash - name));
  d[slash - name] = 0;
  uint64_t step;
  uint32_t rank;
  if (stk__ckpt_parse_dirname(d, &step, &rank)) return 0;
  size_t i = 0;
  while (i < L->n && strcmp(L->v[i].name, d)) i++;
  if (i == L->n) {
    if (L->n == L->cap) {
      size_t cap = L->cap ? 2 * L->cap : 16;
      struct stk_ckpt_info *t = realloc(L->v, cap * sizeof *t);
      int *h = realloc(L->has_manifest, cap * sizeof *h);
      if (t) L->v = t;
      if (h) L->has_manifest = h;
      if (!t || !h) return STK_ENOMEM;
      L->cap = cap;
    }
    memset(&L->v[i], 0, sizeof L->v[i]);
    memcpy(L->v[i].name, d, strlen(d) + 1);
    L->v[i].step = step;
    L->v[i].rank = rank;
    L->has_manifest[i] = 0;
    L->n++;
  }
  if (!strcmp(slash + 1, CKPT_MANIFEST)) {
    L->has_manifest[i] = 1;
  } else if (strstr(slash + 1, ".obj")) {
    L->v[i].objects++;
    L->v[i].bytes += info ? info->size : 0;
  }
  return 0;
}

static int by_step(const void *a, const void *b) {
  const struct stk_ckpt_info *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int stk__ckpt_list_origin(const char *url, const struct stk_ckpt_opts *opts,
                          int (*cb)(void *arg, const struct stk_ckpt_info *info), void *arg,
                          char *err) {
  struct stk_origin *o = NULL;
  int rc = stk__ckpt_url_open(&o, url, opts, err);
  if (rc) return rc;
  struct remote_list L = {0};
  rc = stk__origin_list(o, remote_item, &L, err);
  if (rc == STK_ENOMEM) rc = stk__errf(err, rc, "out of memory");
  for (size_t i = 0; !rc && i < L.n; i++) {
    if (!L.has_manifest[i]) continue;
    char mn[128], *text = NULL, where[1200];
    size_t len = 0;
    stk__ckpt_join(mn, sizeof mn, L.v[i].name, CKPT_MANIFEST);
    rc = stk__origin_get_mem(o, mn, CKPT_MANIFEST_MAX, &text, &len, err);
    if (rc) break;
    struct ckpt_manifest m;
    stk__ckpt_join(where, sizeof where, stk__origin_url(o), mn);
    /* A manifest that does not parse leaves the checkpoint partial. */
    if (stk__ckpt_manifest_parse(text, len, &m, where, NULL) == 0) {
      L.v[i].complete = L.v[i].drained = 1;
      L.v[i].world = m.world;
      L.v[i].objects = (uint32_t)m.n;
      L.v[i].bytes = 0;
      for (size_t k = 0; k < m.n; k++) L.v[i].bytes += m.obj[k].size;
      stk__ckpt_manifest_free(&m);
    }
    free(text);
  }
  if (!rc && L.n) qsort(L.v, L.n, sizeof *L.v, by_step);
  for (size_t i = 0; !rc && i < L.n; i++) rc = cb(arg, &L.v[i]);
  free(L.v);
  free(L.has_manifest);
  stk__origin_close(o);
  return rc;
}
