/* Helpers shared by the origin tests (test_origin*.c): deterministic
 * object bytes, a scratch file to get into and its check, opening an
 * origin, and a listing callback that records names and sizes. */
#ifndef STOKER_TEST_ORIGIN_H
#define STOKER_TEST_ORIGIN_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/cache/origin.h"
#include "stoker/stoker.h"
#include "test.h"

/* Deterministic bytes of a test object: byte i of stream seed. */
static __attribute__((unused)) uint8_t *make_bytes(uint64_t seed, size_t n) {
  uint8_t *b = malloc(n ? n : 1);
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  stk_rng_fill(&r, b, n);
  return b;
}

static __attribute__((unused)) void write_obj(const char *path, uint64_t seed, size_t n) {
  uint8_t *b = make_bytes(seed, n);
  test_write_file(path, b, n);
  free(b);
}

/* A file of n bytes to receive a get. */
static __attribute__((unused)) int scratch_fd(const char *name) {
  int fd = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0);
  return fd;
}

/* Check that fd holds want[0..n) at fd_off. */
static __attribute__((unused)) void check_fd_bytes(int fd, uint64_t fd_off, const uint8_t *want,
                                                   size_t n) {
  uint8_t *got = malloc(n ? n : 1);
  CHECK_OK(stk__pread_full(fd, got, n, fd_off));
  CHECK_MSG(memcmp(got, want, n) == 0, "fetched bytes differ");
  free(got);
}

static __attribute__((unused)) struct stk_origin *open_ok(const char *url,
                                                          const struct stk_origin_opts *o) {
  struct stk_origin *org = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk__origin_open(&org, url, o, err);
  CHECK_MSG(rc == 0, "open %s: %s", url, err);
  return org;
}

struct list_rec {
  char names[64][128];
  struct stk_obj_info info[64];
  int n;
};

static __attribute__((unused)) int list_cb(void *arg, const char *name,
                                           const struct stk_obj_info *info) {
  struct list_rec *l = arg;
  CHECK(l->n < 64);
  snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
  l->info[l->n++] = *info;
  return 0;
}

#endif
