/* The library as a host program sees it: the log callback replaces stderr
 * and can be removed again; option structs from an older (shorter) header
 * are read only up to their recorded size, so garbage past it is never
 * taken for options. */
#include <pthread.h>
#include <stddef.h>

#include "stoker/stoker.h"
#include "test.h"

struct captured {
  pthread_mutex_t mu;
  int n;
  enum stk_log_level last_lvl;
  char last[256];
};

static void capture(void *ctx, enum stk_log_level lvl, const char *msg) {
  struct captured *c = ctx;
  pthread_mutex_lock(&c->mu);
  c->n++;
  c->last_lvl = lvl;
  snprintf(c->last, sizeof c->last, "%s", msg);
  pthread_mutex_unlock(&c->mu);
}

TEST(api_log_callback) {
  struct captured c = {.mu = PTHREAD_MUTEX_INITIALIZER};
  stk_log_set_level(STK_LOG_INFO);
  stk_log_set_callback(capture, &c);
  stk_log(STK_LOG_WARN, "shard %d is slow", 7);
  stk_log(STK_LOG_DEBUG, "below the level");
  CHECK_EQ(c.n, 1);
  CHECK_EQ(c.last_lvl, STK_LOG_WARN);
  CHECK_STR(c.last, "shard 7 is slow"); /* no prefix, no newline */
  stk_log_set_callback(NULL, NULL);
  stk_log(STK_LOG_WARN, "to stderr again");
  CHECK_EQ(c.n, 1);
}

TEST(api_opts_older_struct) {
  char dir[] = "ds", err[STK_ERRMSG_MAX] = "";
  struct stk_gen_opts g = {.dir = dir,
                           .format = "tfrecord",
                           .samples = 40,
                           .size_mean = 256,
                           .samples_per_shard = 10,
                           .seed = 3};
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  struct stk_dataset *ds;
  CHECK_OK(stk_dataset_open(&ds, dir, NULL, err));
  /* A program whose header ended before the allocator and resume fields:
   * what lies after its struct in memory is garbage, never options. */
  union {
    struct stk_loader_opts o;
    unsigned char bytes[sizeof(struct stk_loader_opts)];
  } u;
  memset(u.bytes, 0xa5, sizeof u.bytes);
  stk_loader_opts_init_sized(&u.o, offsetof(struct stk_loader_opts, alloc));
  CHECK_EQ(u.o.struct_size, offsetof(struct stk_loader_opts, alloc));
  CHECK_EQ(u.o.batch_size, 0);
  CHECK(u.bytes[sizeof u.bytes - 1] == 0xa5); /* init touched only the caller's bytes */
  u.o.batch_size = 8;
  u.o.threads = 2;
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &u.o, err));
  struct stk_batch *b;
  uint64_t samples = 0;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    samples += b->n;
    stk_batch_release(l, b);
  }
  CHECK_EQ(rc, STK_EOF);
  CHECK_EQ(samples, 40);
  stk_loader_close(l);
  /* The macro records this header's size. */
  struct stk_loader_opts o;
  stk_loader_opts_init(&o);
  CHECK_EQ(o.struct_size, sizeof o);
  stk_dataset_close(ds);
}

TEST(api_pinned_allocator_without_gpu) {
  struct stk_allocator a;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_pinned_allocator_open(&a, err);
  if (rc == 0) { /* a machine with a GPU: the hooks work */
    void *p = a.alloc(a.ctx, 1 << 20);
    CHECK(p != NULL);
    a.free(a.ctx, p, 1 << 20);
    stk_pinned_allocator_close(&a);
    return;
  }
  CHECK_EQ(rc, STK_ENOTSUP);
  CHECK(err[0] != 0); /* says why */
}
