/* What the names of a remote listing say beyond which objects are shards:
 * hidden names (left out, as a local folder's are) and the class labels
 * of files in first-level folders (plain files: ImageFolder's rule; shard
 * formats with class folders: the folder's number), as local.c labels. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_impl.h"

/* A name with a component starting with '.' (stoker gen's .stoker-gen, an
 * editor's or rsync's temporaries): left out without a word, as a local
 * folder's hidden entries are. */
int stk__name_hidden(const char *name) {
  for (const char *p = name; p; p = strchr(p, '/')) {
    if (*p == '/') p++;
    if (*p == '.') return 1;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Files listed remotely: labelled by their first-level folder in name
 * order (ImageFolder's rule, and the local walk's), or with by_number by
 * the folders' numbers when every one is named by a number; files at the
 * top unlabelled (-1). v's names are the shards', in order. */
int stk__dataset_class_labels(struct stk_dataset *ds, const struct stk_cache_shard *v, size_t n,
                              int by_number, char *err) {
  char **cls = malloc((n ? n : 1) * sizeof *cls);
  if (!cls) return stk__errf(err, STK_ENOMEM, "out of memory");
  size_t nc = 0;
  for (size_t i = 0; i < n; i++) {
    const char *sl = strchr(v[i].name, '/');
    if (sl && !(cls[nc++] = strndup(v[i].name, (size_t)(sl - v[i].name)))) {
      for (size_t k = 0; k + 1 < nc; k++) free(cls[k]);
      free(cls);
      return stk__errf(err, STK_ENOMEM, "out of memory");
    }
  }
  qsort(cls, nc, sizeof *cls, cmp_str);
  size_t u = 0;
  for (size_t k = 0; k < nc; k++) {
    if (u && !strcmp(cls[u - 1], cls[k])) {
      free(cls[k]);
      continue;
    }
    cls[u++] = cls[k];
  }
  /* Shard formats' class folders all named by numbers (as stoker gen
   * writes them): the number is the label, as a local folder's. */
  int numbers = by_number && u > 0;
  for (size_t k = 0; k < u && numbers; k++) {
    size_t l = strlen(cls[k]);
    numbers = l > 0 && l <= 9 && strspn(cls[k], "0123456789") == l;
  }
  for (size_t i = 0; i < n && i < ds->nshards; i++) {
    const char *nm = v[i].name, *sl = strchr(nm, '/');
    if (sl && numbers) {
      ds->shards[i].label = (int32_t)atol(nm);
      continue;
    }
    if (!sl) continue;
    size_t lo = 0, hi = u; /* the folder's place among the sorted names */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      int c = strncmp(cls[mid], nm, (size_t)(sl - nm));
      if (!c && cls[mid][sl - nm]) c = 1;
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    ds->shards[i].label = lo < u && (int64_t)lo <= INT32_MAX ? (int32_t)lo : -1;
  }
  for (size_t k = 0; k < u; k++) free(cls[k]);
  free(cls);
  return 0;
}

