/* Fuzz the ways shards are named one by one: WebDataset brace patterns and
 * shard-list files (a list may come from a server), and the split of the
 * names into one origin and relative names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/dataset/dataset_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[STK_ERRMSG_MAX], *root = NULL;
  struct stk__names l = {0};
  /* The input as a list file ... */
  if (stk__list_parse((const char *)data, size, "base", 4096, &l, err) == 0 && l.n &&
      stk__names_common_root(&l, &root, err) == 0)
    free(root);
  stk__names_free(&l);
  /* ... and its first line as a pattern, with a small bound on names. */
  size_t n = 0;
  while (n < size && n < 4096 && data[n] != '\n' && data[n]) n++;
  char *pat = malloc(n + 1);
  if (!pat) return 0;
  memcpy(pat, data, n);
  pat[n] = 0;
  if (stk__brace_has(pat)) {
    stk__brace_expand(pat, 4096, &l, err);
    if (l.n > 4096) abort();
    stk__names_free(&l);
  }
  free(pat);
  return 0;
}
