/* Helpers shared by the checkpoint tests (test_ckpt*.c): objects of a
 * step made from a seed and checked back, a handle on a directory, the
 * complete checkpoints a directory or origin lists, and the project's moto
 * server as an S3 origin. */
#ifndef STOKER_TEST_CKPT_H
#define STOKER_TEST_CKPT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "stoker/ckpt.h"
#include "stoker/util.h"
#include "test.h"

static __attribute__((unused)) uint8_t *random_bytes(uint64_t seed, size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  stk_rng_fill(&r, p, n);
  return p;
}

/* Objects of step `step`: three of odd sizes, one empty, one unaligned. */
#define NOBJ 4
static __attribute__((unused)) void make_objs(uint64_t step, size_t big,
                                              struct stk_ckpt_obj o[NOBJ], uint8_t *bufs[NOBJ]) {
  static __attribute__((unused))
  const char *names[NOBJ] = {"model/layer.0.weight", "optim \"state\"", "empty", "rng"};
  size_t sizes[NOBJ] = {big, big / 3 + 17, 0, 4099};
  for (int i = 0; i < NOBJ; i++) {
    bufs[i] = random_bytes(step * 100 + (uint64_t)i, sizes[i] + 1);
    o[i] = (struct stk_ckpt_obj){names[i], bufs[i] + (i == 3), sizes[i]}; /* rng: unaligned */
  }
}

static __attribute__((unused)) void free_objs(uint8_t *bufs[NOBJ]) {
  for (int i = 0; i < NOBJ; i++) free(bufs[i]);
}

static __attribute__((unused)) void check_data(const struct stk_ckpt_data *d, uint64_t step,
                                               size_t big) {
  struct stk_ckpt_obj o[NOBJ];
  uint8_t *bufs[NOBJ];
  make_objs(step, big, o, bufs);
  CHECK_EQ(stk_ckpt_data_step(d), step);
  CHECK_EQ(stk_ckpt_data_count(d), NOBJ);
  for (int i = 0; i < NOBJ; i++) {
    uint64_t size = 0;
    const void *p = stk_ckpt_data_bytes(d, (size_t)i, &size);
    CHECK_STR(stk_ckpt_data_name(d, (size_t)i), o[i].name);
    CHECK_EQ(size, o[i].size);
    CHECK(size == 0 || memcmp(p, o[i].data, size) == 0);
  }
  CHECK_EQ(stk_ckpt_data_find(d, "rng"), 3);
  free_objs(bufs);
}

static __attribute__((unused)) struct stk_ckpt *open_ckpt(const char *dir, const char *origin,
                                                          char *err) {
  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = dir;
  o.origin = origin;
  o.chunk_bytes = 64u << 10; /* many chunks per object */
  o.threads = 3;
  struct stk_ckpt *c = NULL;
  int rc = stk_ckpt_open(&c, &o, err);
  CHECK_MSG(rc == 0, "open %s: %s", dir, err);
  return c;
}

static __attribute__((unused)) void save_step(struct stk_ckpt *c, uint64_t step, size_t big) {
  struct stk_ckpt_obj o[NOBJ];
  uint8_t *bufs[NOBJ];
  char err[STK_ERRMSG_MAX] = "";
  make_objs(step, big, o, bufs);
  int rc = stk_ckpt_save(c, step, o, NOBJ, err);
  CHECK_MSG(rc == 0, "save %llu: %s", (unsigned long long)step, err);
  free_objs(bufs);
}

static __attribute__((unused)) int count_cb(void *arg, const struct stk_ckpt_info *in) {
  int *n = arg;
  if (in->complete) (*n)++;
  return 0;
}

static __attribute__((unused)) int count_complete(const char *dir) {
  int n = 0;
  CHECK_OK(stk_ckpt_list(dir, count_cb, &n, NULL));
  return n;
}

/* Start `serve s3 DIR BUCKET`, SKIPping when moto is not installed; the
 * endpoint, key and secret go to the environment stoker reads. */
static __attribute__((unused)) void start_s3(const char *bucket) {
  const char *root = getenv("STOKER_ROOT");
  if (!root) SKIP("STOKER_ROOT is not set");
  char tool[4096];
  snprintf(tool, sizeof tool, "%s/tests/tools/serve", root);
  if (test_sh(NULL, "%s setup >/dev/null 2>&1", tool) != 0)
    SKIP("moto[server] is not installed in .venv or $STOKER_VENV (scripts/install-deps test)");
  mkdir("s3data", 0755);
  char *out = NULL;
  int rc = test_sh(&out, "%s s3 s3data %s 2>serve.err", tool, bucket);
  CHECK_MSG(rc == 0, "serve s3 failed: %s", out);
  char ep[256], key[128], secret[128];
  CHECK(sscanf(out, "%255s\n%127s %127s", ep, key, secret) == 3);
  free(out);
  unsetenv("AWS_PROFILE");
  unsetenv("AWS_SESSION_TOKEN");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "no-such-file", 1);
  setenv("AWS_CONFIG_FILE", "no-such-file", 1);
  setenv("AWS_ACCESS_KEY_ID", key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
  setenv("AWS_ENDPOINT_URL", ep, 1);
}

#endif
