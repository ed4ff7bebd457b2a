/* Fuzz the bounded JSON reader, walking every node it returns. */
#include <stdint.h>
#include <string.h>

#include "../../src/base/base.h"
#include "../../src/base/json_parse.h"

static size_t walk(const struct stk__jnode *n, int depth) {
  size_t count = 0;
  for (; n; n = n->next) {
    count++;
    if (n->type == STK_JSTR && n->len) count += (unsigned char)n->str[n->len - 1] == 1;
    if (n->key) count += strlen(n->key) == 1;
    if (depth < 100) count += walk(n->child, depth + 1);
  }
  return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct stk__jdoc *d;
  char err[STK_ERRMSG_MAX];
  if (stk__json_parse(&d, (const char *)data, size, err) == 0) {
    const struct stk__jnode *r = stk__json_root(d);
    walk(r, 0);
    uint64_t v;
    stk__json_u64(r, "samples", &v);
    stk__json_str(r, "basename");
    stk__json_at(stk__json_get(r, "shards"), 3);
    stk__json_free(d);
  }
  return 0;
}
