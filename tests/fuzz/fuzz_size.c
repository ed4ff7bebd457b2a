/* Fuzz the byte-size parser (every --size style option): no crash or UB,
 * and whatever it accepts it reads the same way again after stk_fmt_bytes
 * prints it in whole bytes, and "N B" as N. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 256) return 0;
  char s[257];
  memcpy(s, data, size);
  s[size] = 0;
  uint64_t v, w;
  if (stk_parse_size(s, &v) != 0) return 0;
  char b[64];
  stk_fmt_bytes(v, b, sizeof b);
  snprintf(b, sizeof b, "%llu B", (unsigned long long)v);
  if (stk_parse_size(b, &w) != 0 || w != v) abort();
  return 0;
}
