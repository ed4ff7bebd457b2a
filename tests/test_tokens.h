/* A Megatron indexed dataset written byte by byte (the layout of
 * docs/formats.md), shared by the token tests. */
#ifndef STOKER_TEST_TOKENS_H
#define STOKER_TEST_TOKENS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

/* PREFIX.bin + PREFIX.idx: n sequences, lens[s] tokens each, token k of
 * sequence s the low `size` bytes of tok(s, k); code is the .idx's dtype
 * code (any value, valid or not, for the tests of bad headers). The
 * document index is doc[0 .. ndoc) (ndoc entries), or with doc NULL one
 * document per sequence (0 .. n). */
static __attribute__((unused)) void test_megatron_write_docs(const char *prefix, int code,
                                                             int size, int n,
                                                             const int32_t *lens,
                                                             uint64_t (*tok)(int s, int k),
                                                             int ndoc, const int64_t *doc) {
  if (!doc) ndoc = n + 1;
  struct test_buf bin = {0}, idx = {0};
  for (int d = 0; d < n; d++)
    for (int k = 0; k < lens[d]; k++) test_buf_le(&bin, tok(d, k), size);
  test_buf_put(&idx, "MMIDIDX\0\0", 9);
  test_buf_le(&idx, 1, 8);
  test_buf_le(&idx, (uint64_t)code, 1);
  test_buf_le(&idx, (uint64_t)n, 8);
  test_buf_le(&idx, (uint64_t)ndoc, 8);
  for (int d = 0; d < n; d++) test_buf_le(&idx, (uint32_t)lens[d], 4);
  uint64_t at = 0;
  for (int d = 0; d < n; d++) {
    test_buf_le(&idx, at, 8);
    at += (uint64_t)lens[d] * (uint64_t)size;
  }
  for (int d = 0; d < ndoc; d++) test_buf_le(&idx, doc ? (uint64_t)doc[d] : (uint64_t)d, 8);
  char p[256];
  snprintf(p, sizeof p, "%s.bin", prefix);
  test_write_file(p, bin.p ? bin.p : (uint8_t *)"", bin.n);
  snprintf(p, sizeof p, "%s.idx", prefix);
  test_write_file(p, idx.p, idx.n);
  free(bin.p);
  free(idx.p);
}

/* One document per sequence. */
static __attribute__((unused)) void test_megatron_write(const char *prefix, int code, int size,
                                                        int n, const int32_t *lens,
                                                        uint64_t (*tok)(int s, int k)) {
  test_megatron_write_docs(prefix, code, size, n, lens, tok, 0, NULL);
}

#endif
