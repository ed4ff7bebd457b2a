/* A Megatron indexed dataset written byte by byte (the layout of
 * docs/formats.md), shared by the token tests. */
#ifndef STOKER_TEST_TOKENS_H
#define STOKER_TEST_TOKENS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

/* PREFIX.bin + PREFIX.idx, one document per sequence: n of them, lens[d]
 * tokens each, token k of document d the low `size` bytes of tok(d, k);
 * code is the .idx's dtype code (any value, valid or not, for the tests
 * of bad headers). */
static __attribute__((unused)) void test_megatron_write(const char *prefix, int code, int size,
                                                        int n, const int32_t *lens,
                                                        uint64_t (*tok)(int d, int k)) {
  struct test_buf bin = {0}, idx = {0};
  for (int d = 0; d < n; d++)
    for (int k = 0; k < lens[d]; k++) test_buf_le(&bin, tok(d, k), size);
  test_buf_put(&idx, "MMIDIDX\0\0", 9);
  test_buf_le(&idx, 1, 8);
  test_buf_le(&idx, (uint64_t)code, 1);
  test_buf_le(&idx, (uint64_t)n, 8);
  test_buf_le(&idx, (uint64_t)n + 1, 8);
  for (int d = 0; d < n; d++) test_buf_le(&idx, (uint32_t)lens[d], 4);
  uint64_t at = 0;
  for (int d = 0; d < n; d++) {
    test_buf_le(&idx, at, 8);
    at += (uint64_t)lens[d] * (uint64_t)size;
  }
  for (int d = 0; d <= n; d++) test_buf_le(&idx, (uint64_t)d, 8);
  char p[256];
  snprintf(p, sizeof p, "%s.bin", prefix);
  test_write_file(p, bin.p ? bin.p : (uint8_t *)"", bin.n);
  snprintf(p, sizeof p, "%s.idx", prefix);
  test_write_file(p, idx.p, idx.n);
  free(bin.p);
  free(idx.p);
}

#endif
