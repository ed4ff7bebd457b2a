/* Helpers shared by the format tests (test_format*.c): deterministic
 * sample payloads written into a dataset of any format, opening a dataset
 * (or only its error), and flipping one byte of a file. */
#ifndef STOKER_TEST_FORMAT_H
#define STOKER_TEST_FORMAT_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../src/format/format_impl.h"
#include "test.h"

/* Payload of sample i: deterministic bytes of a varying length. */
static __attribute__((unused)) size_t payload(uint64_t i, uint8_t *buf, size_t cap) {
  size_t n = 1 + (size_t)((i * 7919u) % 3000);
  if (n > cap) n = cap;
  for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)(i * 31 + k * 7);
  return n;
}

/* Write n samples of one field (name) with labels i % 5 when labels. */
static __attribute__((unused)) void write_ds(const char *fmt, const char *dir, uint64_t n,
                                             const char *field, int labels, uint64_t per_shard) {
  struct stk_writer *w;
  struct stk_writer_opts o = {
      .format = fmt, .dir = dir, .samples_per_shard = per_shard, .write_index = 1};
  char err[STK_ERRMSG_MAX];
  int rc = stk_writer_open(&w, &o, err);
  CHECK_MSG(rc == 0, "writer_open: %s", err);
  static uint8_t buf[4096];
  for (uint64_t i = 0; i < n; i++) {
    struct stk_sample s = {0};
    s.index = i;
    s.label = labels ? (int32_t)(i % 5) : -1;
    snprintf(s.key, sizeof s.key, "s%05llu", (unsigned long long)i);
    size_t len = payload(i, buf, sizeof buf);
    stk__sample_add(&s, field, strlen(field), buf, len);
    rc = stk_writer_add(w, &s);
    CHECK_MSG(rc == 0, "add %llu: %s", (unsigned long long)i, stk_writer_errmsg(w));
  }
  CHECK_MSG(stk_writer_close(w) == 0, "close: %s", stk_writer_errmsg(NULL));
}

static __attribute__((unused)) struct stk_dataset *open_ds(const char *path, const char *fmt) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = fmt};
  int rc = stk_dataset_open(&ds, path, &o, err);
  CHECK_MSG(rc == 0, "open %s: %s (%s)", path, err, stk_err_name(rc));
  return ds;
}

static __attribute__((unused)) int open_err(const char *path, const char *fmt, char *err) {
  struct stk_dataset *ds;
  struct stk_dataset_opts o = {.format = fmt};
  int rc = stk_dataset_open(&ds, path, &o, err);
  if (rc == 0) stk_dataset_close(ds);
  return rc;
}

static __attribute__((unused)) void flip_byte(const char *path, uint64_t off) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  uint8_t b;
  CHECK(pread(fd, &b, 1, (off_t)off) == 1);
  b ^= 0x5a;
  CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
  close(fd);
}

#endif
