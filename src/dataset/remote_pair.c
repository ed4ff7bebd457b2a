/* Remote paired formats (Megatron's .bin + .idx over http(s):// or s3://):
 * each companion fetched whole and indexed from its bytes at open, the
 * shards then read in chunks through the cache (never staged whole); and
 * a prefix URL (https://host/data/corpus) found when the URL is no
 * folder. The rest of remote opening is remote.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dataset_impl.h"

/* Fetch each shard's companion (NAME + pair_ext) whole into memory and
 * let the format index the shard from it; the shards are then chunked. */
int stk__dataset_index_pairs(struct stk_dataset *ds, struct stk_origin *o,
                             const struct stk_cache_shard *v, size_t n, const int *cancel,
                             char *err) {
  const struct stk_format_ops *f = ds->fmt;
  if (!f->index_side)
    return stk__errf(err, STK_ENOTSUP, "%s: %s datasets are read from local files only", ds->root,
                     f->name);
  for (size_t i = 0; i < n; i++) {
    const char *name = v[i].name, *dot = strrchr(name, '.');
    size_t stem = dot && !strchr(dot, '/') ? (size_t)(dot - name) : strlen(name);
    char side[1100];
    snprintf(side, sizeof side, "%.*s%s", (int)stem, name, f->pair_ext);
    int fd = memfd_create("stoker-side", MFD_CLOEXEC);
    if (fd < 0) return stk__errf(err, stk__from_errno(errno), "memfd_create: %s", strerror(errno));
    struct stk_obj_info info = {0};
    int rc = stk__origin_get(o, side, 0, UINT64_MAX, fd, 0, &info, cancel, err);
    uint64_t len = 0;
    if (!rc) rc = stk__fd_size(fd, &len);
    void *map = NULL;
    if (!rc && len) {
      map = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
      if (map == MAP_FAILED) {
        map = NULL;
        rc = stk__errf(err, stk__from_errno(errno), "%s/%s: cannot map: %s", ds->root, side,
                       strerror(errno));
      }
    }
    close(fd);
    if (rc == STK_ENOENT)
      stk__errf(err, rc, "%s/%s: the %s beside %s is missing", stk__origin_url(o), side,
                f->pair_ext, name);
    if (rc) return rc;
    struct stk_shard *sh = &ds->shards[i];
    if ((rc = f->index_side(ds, sh, v[i].size, map, len, err)) != 0) return rc;
    ds->rows[i].count_known = 1;
    __atomic_store_n(&ds->rows[i].pending, 0, __ATOMIC_RELEASE);
  }
  ds->chunked = 1;
  return 0;
}

/* A URL that names no folder (nothing listed there) may be a paired
 * format's prefix: https://host/data/corpus for corpus.bin + corpus.idx.
 * Asked only after the URL failed as a folder, so folders cost nothing. */
int stk__dataset_open_remote(struct stk_dataset *ds, const char *url,
                             const struct stk__names *names, const struct stk_dataset_opts *opts,
                             char *err) {
  int rc = stk__dataset_open_remote_at(ds, url, names, opts, err);
  if (!rc || names || ds->nshards || (rc != STK_ENOTSUP && rc != STK_ENOENT && rc != STK_EEMPTY))
    return rc;
  size_t ul = strcspn(url, "?#");
  const char *sl = memrchr(url, '/', ul), *sch = strstr(url, "://");
  if (!sl || !sch || sl < sch + 3 || sl + 1 >= url + ul) return rc;
  const char *pf = NULL;
  for (int k = 0; stk_formats[k]; k++)
    if (stk_formats[k]->pair_ext && stk_formats[k]->exts &&
        (!opts || !opts->format || !*opts->format || !strcmp(opts->format, stk_formats[k]->name)))
      pf = stk_formats[k]->name;
  const struct stk_format_ops *f = pf ? stk__format_find(pf) : NULL;
  if (!f) return rc;
  /* The folder above, and the prefix's two names in it. */
  char *parent = strndup(url, (size_t)(sl - url)), *base = strndup(sl + 1, (size_t)(url + ul - sl - 1));
  char own[16];
  size_t el = strcspn(f->exts, ",; ");
  snprintf(own, sizeof own, "%.*s", (int)el, f->exts);
  char side[1100], bin[1100];
  snprintf(side, sizeof side, "%s%s", base ? base : "", f->pair_ext);
  snprintf(bin, sizeof bin, "%s%s", base ? base : "", own);
  struct stk_origin_opts oo = stk__dataset_origin_opts(opts);
  struct stk_origin *o = NULL;
  char perr[STK_ERRMSG_MAX];
  struct stk_obj_info info;
  int found = parent && base && stk__origin_open(&o, parent, &oo, perr) == 0 &&
              stk__origin_stat(o, side, &info, perr) == 0;
  if (o) stk__origin_close(o);
  if (found) {
    struct stk__names nm = {0};
    struct stk_dataset_opts po = opts ? *opts : (struct stk_dataset_opts){0};
    po.format = f->name;
    if (stk__names_add(&nm, bin) == 0) {
      char *shown = strdup(ds->root);
      rc = stk__dataset_open_remote_at(ds, parent, &nm, &po, err);
      if (shown) {
        free(ds->root);
        ds->root = shown;
      }
    }
    stk__names_free(&nm);
  }
  free(parent);
  free(base);
  return rc;
}

