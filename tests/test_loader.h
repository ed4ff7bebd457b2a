/* Helpers shared by the loader tests (test_loader.c, test_loader_mem.c):
 * sample payloads as a function of their id, one TFRecord record, opening a
 * dataset, and a batch allocator hook that counts its calls. */
#ifndef STOKER_TEST_LOADER_H
#define STOKER_TEST_LOADER_H

#include <stdio.h>
#include <stdlib.h>

#include "../src/base/base.h"
#include "stoker/stoker.h"
#include "test.h"

/* Payload of sample id: its size and bytes are a function of id. */
static __attribute__((unused)) uint64_t payload_len(uint64_t id) {
  return 100 + (stk_mix64(id, 7) % 5000);
}
static __attribute__((unused)) uint8_t payload_byte(uint64_t id, uint64_t i) {
  return (uint8_t)(id * 131 + i * 7);
}

/* One TFRecord record: length, its masked CRC32C, data, the data's. */
static __attribute__((unused)) void put_record(FILE *f, const uint8_t *data, uint64_t n) {
  uint8_t hdr[12], crc[4];
  stk__st64(hdr, n);
  stk__st32(hdr + 8, stk_crc32c_mask(stk_crc32c(0, hdr, 8)));
  stk__st32(crc, stk_crc32c_mask(stk_crc32c(0, data, n)));
  fwrite(hdr, 1, 12, f);
  fwrite(data, 1, n, f);
  fwrite(crc, 1, 4, f);
}

static __attribute__((unused)) struct stk_dataset *open_ds(const char *dir) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  int rc = stk_dataset_open(&ds, dir, NULL, err);
  CHECK_MSG(rc == 0, "open %s: %s", dir, err);
  return ds;
}

static int allocs, frees;
static __attribute__((unused)) void *count_alloc(void *ctx, size_t n) {
  (void)ctx;
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  void *p;
  return posix_memalign(&p, 4096, n) ? NULL : p;
}
static __attribute__((unused)) void count_free(void *ctx, void *p, size_t n) {
  (void)ctx;
  (void)n;
  __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  free(p);
}

#endif
