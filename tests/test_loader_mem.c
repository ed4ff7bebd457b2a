/* Loader tests of large samples and memory: samples of many MiB through
 * every engine, mmap'd shards cut short, truncated or rewritten while a
 * batch is held, the memory cap, and the batch ring's depth. Tests named
 * *concurrent* also run under ThreadSanitizer. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/base.h"
#include "stoker/stoker.h"
#include "test.h"
#include "test_loader.h"

/* ---- large samples and the memory cap ------------------------------------ */

/* Plain files of big_len(id) bytes each, the bytes a function of id. */
static uint64_t big_len(uint64_t id, uint64_t base) { return base + id * 4099; }
static void write_big_files(const char *dir, int n, uint64_t base) {
  mkdir(dir, 0755);
  for (int id = 0; id < n; id++) {
    char path[512];
    snprintf(path, sizeof path, "%s/f-%03d.bin", dir, id);
    uint64_t len = big_len((uint64_t)id, base);
    uint8_t *p = malloc(len);
    for (uint64_t i = 0; i < len; i++) p[i] = payload_byte((uint64_t)id, i);
    test_write_file(path, p, len);
    free(p);
  }
}

/* Sample i of a batch of big files has its length and bytes. */
static void check_big_sample(const struct stk_batch *b, uint32_t i, uint64_t base) {
  uint64_t id = b->indices[i];
  CHECK_EQ(b->len[i], big_len(id, base));
  const uint8_t *p = b->data + b->offsets[i];
  for (uint64_t q = 0; q < b->len[i]; q += 4093) CHECK_EQ(p[q], payload_byte(id, q));
  CHECK_EQ(p[b->len[i] - 1], payload_byte(id, b->len[i] - 1));
}

/* Read every sample of the plain-file dataset once, checking its bytes;
 * the consumer holds `hold` batches before releasing the oldest. */
static void read_big(struct stk_dataset *ds, struct stk_loader_opts *o, uint64_t base, int hold,
                     struct stk_loader_stats *st) {
  struct stk_loader *l;
  char err[STK_ERRMSG_MAX];
  int rc = stk_loader_open(&l, ds, o, err);
  CHECK_MSG(rc == 0, "loader_open: %s", err);
  uint64_t n = stk_dataset_num_samples(ds), got = 0;
  uint8_t *seen = calloc(n, 1);
  struct stk_batch *b, *held[8] = {0};
  int nheld = 0;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) {
      uint64_t id = b->indices[i];
      check_big_sample(b, i, base);
      CHECK(!seen[id]);
      seen[id] = 1;
      got++;
    }
    held[nheld++] = b;
    if (nheld == hold) {
      stk_batch_release(l, held[0]);
      memmove(held, held + 1, (size_t)--nheld * sizeof *held);
    }
  }
  CHECK_MSG(rc == STK_EOF, "next: %d %s", rc, stk_loader_errmsg(l));
  for (int i = 0; i < nheld; i++) stk_batch_release(l, held[i]);
  CHECK_EQ(got, n);
  stk_loader_stats(l, st);
  stk_loader_close(l);
  free(seen);
}

/* Samples several times larger than a read are read in pieces, by several
 * requests in flight at once, with every byte in place (both engines, and
 * O_DIRECT whose pieces are aligned). */
static void large_samples(const char *engine, int direct) {
  uint64_t base = (20u << 20) + 12345; /* 2.5 pieces and an odd tail */
  write_big_files("ds", 5, base);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .io_engine = engine, .direct = direct};
  struct stk_loader_stats st;
  read_big(ds, &o, base, 1, &st);
  CHECK_MSG(st.read_ops >= 5 * 3, "%llu reads for 5 samples of 20 MiB", (unsigned long long)st.read_ops);
  stk_dataset_close(ds);
}
TEST(loader_large_samples_pread) { large_samples("pread", 0); }
TEST(loader_large_samples_io_uring) { large_samples("io_uring", 0); }
TEST(loader_large_samples_direct) { large_samples("auto", 1); }

/* Samples mapped from the page cache, not copied (the mmap engine): every
 * byte arrives, no batch buffer is allocated, the whole span of a batch is
 * readable (the gaps between mapped samples are zero pages), and a sample
 * longer than one mapping request (64 MiB) takes two, either side of the
 * boundary. */
TEST(loader_large_samples_mmap) {
  uint64_t base = (64u << 20) - 4099; /* 64 MiB - 4099, + 0, + 4099 */
  write_big_files("ds", 3, base);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .epochs = 2, .io_engine = "mmap"};
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  uint64_t got = 0, touched = 0;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    uint64_t span = 0;
    for (uint32_t i = 0; i < b->n; i++) {
      check_big_sample(b, i, base);
      span = STK__MAX(span, b->offsets[i] + b->len[i]);
      got++;
    }
    for (uint64_t q = 0; q < span; q += 4096) touched += b->data[q] != 0;
    stk_batch_release(l, b);
  }
  CHECK_MSG(rc == STK_EOF, "next: %d %s", rc, stk_loader_errmsg(l));
  CHECK_EQ(got, 6);
  CHECK(touched > 0);
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  CHECK_EQ(st.mem_peak, 0);        /* nothing copied into buffers of ours */
  CHECK_EQ(st.read_ops, 2 * 4);    /* 1 + 1 + 2 mapping requests per epoch */
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* Write a TFRecord shard of n records of len bytes each (payload of id). */
static void write_tfrecord_big(const char *path, int n, uint64_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  uint8_t *data = malloc(len);
  for (int r = 0; r < n; r++) {
    for (uint64_t i = 0; i < len; i++) data[i] = payload_byte((uint64_t)r, i);
    put_record(f, data, len);
  }
  free(data);
  fclose(f);
}

/* Left to choose, the loader maps samples of 8 MiB or more (known from the
 * shard indexes), unless the caller's allocator must hold the batches
 * (pinned memory) or O_DIRECT is asked for; smaller samples of 64 KiB or
 * more (and large ones into the caller's memory) are copied out of
 * mappings with their CRCs checked in the copy (mapcopy, its bus-error
 * guard installed), or with pread when the CRCs are not checked; never
 * mapcopy for a format without CRCs (a file a sample, each read once). */
TEST(loader_auto_maps_large_samples) {
  mkdir("big", 0755);
  mkdir("small", 0755);
  write_tfrecord_big("big/a.tfrecord", 2, 9u << 20);
  write_tfrecord_big("small/a.tfrecord", 4, 1u << 20);
  write_big_files("files", 2, 1u << 20); /* a file a sample: each read once an epoch */
  struct stk_dataset *big = open_ds("big"), *small = open_ds("small"), *files = open_ds("files");
  struct stk_allocator al = {count_alloc, count_free, NULL};
  struct {
    struct stk_dataset *ds;
    const struct stk_allocator *alloc;
    int skip_verify;
    const char *engine;
  } cases[] = {{big, NULL, 0, "mmap"},
               {big, &al, 0, "mapcopy"},
               {small, NULL, 0, "mapcopy"},
               {small, NULL, 1, "pread"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct stk_loader_opts o = {.batch_size = 1, .threads = 1, .alloc = cases[i].alloc,
                                .skip_verify = cases[i].skip_verify};
    struct stk_loader *l;
    CHECK_OK(stk_loader_open(&l, cases[i].ds, &o, NULL));
    CHECK_STR(stk_loader_engine(l), cases[i].engine);
    stk_loader_close(l);
  }
  struct stk_loader *l;
  struct stk_loader_opts fo = {.batch_size = 1, .threads = 1};
  CHECK_OK(stk_loader_open(&l, files, &fo, NULL)); /* no CRCs: never mapcopy */
  CHECK(strcmp(stk_loader_engine(l), "mapcopy") != 0);
  stk_loader_close(l);
  struct stk_loader_opts o = {.batch_size = 1, .threads = 1, .direct = 1};
  if (stk_loader_open(&l, big, &o, NULL) == 0) { /* where O_DIRECT works */
    CHECK(strcmp(stk_loader_engine(l), "mmap") != 0);
    stk_loader_close(l);
  }
  o.io_engine = "mmap";
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk_loader_open(&l, big, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "cannot be combined with direct I/O");
  o.io_engine = "mapcopy";
  CHECK_EQ(stk_loader_open(&l, big, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "the mapcopy engine reads through the page cache");
  stk_dataset_close(big);
  stk_dataset_close(small);
  stk_dataset_close(files);
}

/* A shard cut short after its index was built is an error naming it when
 * the mapping engine comes to it, never a mapping of missing pages. */
TEST(loader_mmap_shard_cut_short) {
  mkdir("ds", 0755);
  write_tfrecord_big("ds/a.tfrecord", 3, 9u << 20);
  struct stk_dataset *ds = open_ds("ds");
  CHECK_OK(truncate("ds/a.tfrecord", (off_t)(12u << 20)));
  struct stk_loader *l;
  struct stk_loader_opts o = {
      .batch_size = 1, .threads = 2, .io_engine = "mmap", .on_error = STK_ON_ERROR_FAIL};
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.shuffle = STK_SHUFFLE_NONE;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_ETRUNC);
  CHECK_CONTAINS(stk_loader_errmsg(l), "a.tfrecord");
  CHECK_CONTAINS(stk_loader_errmsg(l), "shorter than its index says");
  stk_loader_close(l);
  stk_dataset_close(ds);
}

/* The price of mapping, as documented (loader.h, docs/internals/loader.md):
 * a file truncated while its batch is held makes the next touch of those
 * bytes raise SIGBUS (the CLI names the cause; `--engine pread` copies). */
TEST(loader_mmap_truncated_while_held_is_sigbus) {
  write_big_files("ds", 1, 16u << 20);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct stk_dataset *ds;
    struct stk_loader *l;
    struct stk_batch *b;
    struct stk_loader_opts o = {.batch_size = 1, .threads = 1, .io_engine = "mmap"};
    if (stk_dataset_open(&ds, "ds", NULL, NULL) || stk_loader_open(&l, ds, &o, NULL) ||
        stk_loader_next(l, &b) || b->data[b->offsets[0] + (8u << 20)] != payload_byte(0, 8u << 20))
      _exit(3);
    if (truncate("ds/f-000.bin", 0) != 0) _exit(4);
    signal(SIGBUS, SIG_DFL); /* a sanitizer's handler would report it and exit 1 */
    volatile uint8_t c = b->data[b->offsets[0] + (8u << 20)];
    (void)c;
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "child status 0x%x", st);
}

/* As documented (docs/internals/loader.md, "Rewriting during use"; issue
 * 18, section 6): a mapped batch is the file's pages, so a file rewritten
 * in place changes a batch already handed out; with pread the batch is a
 * copy and keeps what was read. */
TEST(loader_mmap_rewritten_in_place_changes_held_batch) {
  write_big_files("ds", 1, 16u << 20);
  struct stk_dataset *ds = open_ds("ds");
  const char *engines[] = {"mmap", "pread"};
  for (int k = 0; k < 2; k++) {
    struct stk_loader *l;
    struct stk_batch *b;
    struct stk_loader_opts o = {.batch_size = 1, .threads = 1, .io_engine = engines[k]};
    CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
    CHECK_OK(stk_loader_next(l, &b));
    CHECK_STR(stk_loader_engine(l), engines[k]);
    uint64_t at = 8u << 20;
    uint8_t was = payload_byte(0, at), now = (uint8_t)~was;
    CHECK_EQ(b->data[b->offsets[0] + at], was);
    int fd = open("ds/f-000.bin", O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, &now, 1, (off_t)at), 1);
    close(fd);
    CHECK_EQ(b->data[b->offsets[0] + at], k == 0 ? now : was);
    fd = open("ds/f-000.bin", O_WRONLY);
    CHECK_EQ(pwrite(fd, &was, 1, (off_t)at), 1);
    close(fd);
    stk_batch_release(l, b);
    stk_loader_close(l);
  }
  stk_dataset_close(ds);
}

/* The memory cap holds: batch buffers never exceed it, whatever the ring
 * depth asked for, and every sample still arrives. */
TEST(loader_concurrent_mem_cap_enforced) {
  uint64_t base = 3u << 20;
  write_big_files("ds", 24, base);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .prefetch = 8, .prefetch_max = 16,
                              .mem_cap = 20u << 20};
  struct stk_loader_stats st;
  read_big(ds, &o, base, 1, &st);
  CHECK_MSG(st.mem_peak <= o.mem_cap, "peak %llu bytes of buffers under a cap of %llu",
            (unsigned long long)st.mem_peak, (unsigned long long)o.mem_cap);
  CHECK(st.mem_bytes <= st.mem_peak);
  CHECK_EQ(st.mem_cap, o.mem_cap);
  CHECK_EQ(st.mem_over_cap, 0);
  stk_dataset_close(ds);
}

/* A consumer that holds more batches than the cap has room for still gets
 * them (the cap gives way, and says so) instead of waiting forever. */
TEST(loader_concurrent_mem_cap_consumer_holds_all) {
  uint64_t base = 3u << 20;
  write_big_files("ds", 12, base);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .mem_cap = 14u << 20};
  struct stk_loader_stats st;
  read_big(ds, &o, base, 4, &st);
  CHECK(st.mem_over_cap > 0);
  stk_dataset_close(ds);
}

/* One batch larger than the cap is a clear error, not a silent overrun. */
TEST(loader_mem_cap_smaller_than_a_batch) {
  write_big_files("ds", 4, 3u << 20);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 1, .mem_cap = 4u << 20};
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  CHECK_EQ(stk_loader_next(l, &b), STK_ENOMEM);
  CHECK_CONTAINS(stk_loader_errmsg(l), "memory cap");
  stk_loader_close(l);
  stk_dataset_close(ds);
}
/* The ring deepens only when the reader had time to spare on a full ring:
 * here the consumer takes each batch at once, so the reader is the limit
 * all along, and a deeper ring would only add batch buffers (it used to
 * grow at every wait, to prefetch_max). A scheduling blip may still grow
 * it a step or two. */
TEST(loader_concurrent_ring_grows_only_for_idle_reader) {
  uint64_t base = 3u << 20;
  write_big_files("ds", 24, base);
  struct stk_dataset *ds = open_ds("ds");
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .epochs = 3, .prefetch = 2,
                              .prefetch_max = 16, .mem_cap = 1u << 30};
  struct stk_loader_stats st;
  o.epochs = 1;
  for (int e = 0; e < 3; e++) {
    struct stk_sampler_opts so = {0};
    o.sampler = &so;
    so.seed = (uint64_t)e;
    read_big(ds, &o, base, 1, &st);
    CHECK_MSG(st.ring_depth_max <= o.prefetch + 3, "ring grew to %u with a reader that never idled",
              st.ring_depth_max);
  }
  stk_dataset_close(ds);
}

/* An allocator that refuses while `limit` of its buffers are live, as
 * pinned memory does where the driver runs out before the memory cap. */
static int live_bufs, refusals;
static void *limited_alloc(void *ctx, size_t n) {
  int limit = *(const int *)ctx;
  if (__atomic_add_fetch(&live_bufs, 1, __ATOMIC_RELAXED) > limit) {
    __atomic_sub_fetch(&live_bufs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&refusals, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  void *p;
  return posix_memalign(&p, 4096, n) ? NULL : p;
}
static void limited_free(void *ctx, void *p, size_t n) {
  (void)ctx;
  (void)n;
  __atomic_sub_fetch(&live_bufs, 1, __ATOMIC_RELAXED);
  free(p);
}

/* A refused buffer while other batches hold memory waits for a release
 * (every sample still arrives, bytes checked); with nothing to wait for,
 * the run fails at once with the message, never hangs. */
TEST(loader_allocator_refusal_waits_for_release) {
  uint64_t base = 1u << 20;
  write_big_files("ds", 32, base);
  struct stk_dataset *ds = open_ds("ds");
  int limit = 3;
  struct stk_allocator a = {limited_alloc, limited_free, &limit};
  struct stk_loader_opts o = {.batch_size = 2, .threads = 2, .prefetch = 4, .prefetch_max = 8,
                              .alloc = &a};
  struct stk_loader_stats st;
  read_big(ds, &o, base, 1, &st);
  CHECK_MSG(refusals > 0, "the allocator never refused: the test did not test");
  CHECK_EQ(live_bufs, 0);
  limit = 0; /* nothing can ever be allocated */
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, NULL));
  struct stk_batch *b;
  CHECK_EQ(stk_loader_next(l, &b), STK_ENOMEM);
  CHECK_CONTAINS(stk_loader_errmsg(l), "out of memory for a");
  stk_loader_close(l);
  stk_dataset_close(ds);
}
