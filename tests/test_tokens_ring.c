/* A token loader's batch ring (src/loader/pipeline.c): it stays at its
 * first depth while the consumer keeps no more than two batches (4 by
 * default, or the caller's prefetch), and a consumer that keeps more
 * batches, one at a time or several, still gets every batch in order.
 * Every window arrives once an epoch, with its loss mask whole even where
 * the consumer wrote over the mask of the batch whose buffer it reuses
 * (Megatron edits loss_mask in place). The workers make the jobs (a token
 * loader has no reader thread) within the memory cap, and a loader closes
 * while they do. */
#include <string.h>
#include <time.h>

#include "stoker/stoker.h"
#include "test.h"
#include "test_tokens.h"

static uint64_t tok(int d, int k) { return (uint64_t)(d * 1000 + k); }

/* PREFIX.bin + PREFIX.idx: n documents of 1..40 int32 tokens. */
static void write_corpus(const char *prefix, int n) {
  int32_t *lens = malloc((size_t)n * sizeof *lens);
  for (int d = 0; d < n; d++) lens[d] = 1 + (d * 7 + 3) % 40;
  test_megatron_write(prefix, 4, 4, n, lens, tok);
  free(lens);
}

static struct stk_tokens *open_corpus(void) {
  write_corpus("c", 300);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 16;
  o.no_index_file = 1;
  struct stk_tokens *t = NULL;
  const char *path = "c";
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_tokens_open(&t, 1, &path, NULL, &o, err);
  CHECK_MSG(rc == 0, "stk_tokens_open: %s", err);
  return t;
}

static struct stk_loader *open_loader(struct stk_tokens *t, uint32_t prefetch,
                                      uint32_t prefetch_max, uint32_t epochs) {
  struct stk_loader_opts lo;
  stk_loader_opts_init(&lo);
  lo.batch_size = 3;
  lo.threads = 2;
  lo.epochs = epochs;
  lo.prefetch = prefetch;
  lo.prefetch_max = prefetch_max;
  struct stk_loader *l = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_loader_open_tokens(&l, t, &lo, err);
  CHECK_MSG(rc == 0, "stk_loader_open_tokens: %s", err);
  return l;
}

/* Take every batch, keeping the last `keep` (at least 1) and releasing
 * the oldest first, `burst` at a time; each batch's mask is checked whole
 * and then zeroed, as a consumer that edits it in place would. Counts each
 * window in seen[]; returns the batches taken. */
static uint64_t drain_keeping(struct stk_loader *l, uint32_t keep, uint32_t burst, uint8_t *seen,
                              uint64_t nwin) {
  enum { MAXKEEP = 32 };
  struct stk_batch *held[MAXKEEP];
  uint32_t nheld = 0;
  uint64_t batches = 0, want_seq = 0;
  int rc = 0;
  CHECK(keep >= 1 && keep + burst <= MAXKEEP);
  for (;;) {
    for (uint32_t i = 0; i < burst && rc == 0; i++) {
      struct stk_batch *b;
      if ((rc = stk_loader_next(l, &b)) != 0) break;
      CHECK_EQ(b->seq, want_seq);
      want_seq++;
      struct stk_token_batch tb;
      CHECK_OK(stk_batch_tokens(l, b, &tb));
      for (uint32_t r = 0; r < tb.rows; r++) {
        CHECK(tb.windows[r] < nwin);
        seen[tb.windows[r]]++;
        uint8_t *m = (uint8_t *)tb.loss_mask + (size_t)r * tb.cols;
        for (uint32_t j = 0; j < tb.cols; j++) CHECK_EQ(m[j], 1);
        memset(m, 0, tb.cols);
      }
      held[nheld++] = b;
      batches++;
    }
    while (nheld > (rc ? 0 : keep)) {
      stk_batch_release(l, held[0]);
      memmove(held, held + 1, --nheld * sizeof *held);
    }
    if (rc) break;
  }
  CHECK_EQ(rc, STK_EOF);
  return batches;
}

/* Released batch by batch, the ring stays at its first depth: 4 by
 * default, the caller's prefetch when given; it grows up to prefetch_max
 * only for batches the consumer keeps. */
TEST(tokens_ring_depth_fixed) {
  struct stk_tokens *t = open_corpus();
  uint64_t nwin = stk_tokens_num_windows(t);
  CHECK(nwin > 100);
  static const struct {
    uint32_t prefetch, prefetch_max, depth;
  } cases[] = {{0, 0, 4}, {3, 0, 3}, {2, 2, 2}, {6, 16, 6}, {0, 3, 3}, {0, 2, 2}, {0, 1, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint8_t *seen = calloc(nwin, 1);
    struct stk_loader *l = open_loader(t, cases[c].prefetch, cases[c].prefetch_max, 3);
    drain_keeping(l, 1, 1, seen, nwin);
    struct stk_loader_stats st;
    stk_loader_stats(l, &st);
    CHECK_MSG(st.ring_depth_max == cases[c].depth, "case %zu: ring depth %u, want %u", c,
              st.ring_depth_max, cases[c].depth);
    CHECK_EQ(st.samples, 3 * nwin);
    for (uint64_t k = 0; k < nwin; k++) CHECK_EQ(seen[k], 3);
    stk_loader_close(l);
    free(seen);
  }
  stk_tokens_close(t);
}

/* A consumer that keeps batches, taking one or several at a time, gets
 * every batch in order: the ring grows for the batches it keeps, up to
 * prefetch_max (more than the default depth's places: {0, 0, 6, 1} and
 * after; with the workers ahead the ring is full, so the consumer would
 * never wait and never make it grow the other way). */
TEST(tokens_ring_consumer_keeps_batches) {
  struct stk_tokens *t = open_corpus();
  uint64_t nwin = stk_tokens_num_windows(t);
  static const struct {
    uint32_t prefetch, prefetch_max, keep, burst;
  } cases[] = {{0, 0, 3, 1}, {0, 0, 4, 1}, {0, 0, 5, 1}, {0, 0, 2, 3}, {0, 0, 1, 4},
               {4, 4, 5, 1}, {8, 8, 9, 1}, {8, 8, 6, 3}, {5, 5, 6, 1}, {0, 16, 5, 1},
               {0, 0, 6, 1}, {0, 0, 8, 2}, {0, 0, 12, 1}, {0, 3, 4, 1}, {0, 16, 17, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint8_t *seen = calloc(nwin, 1);
    struct stk_loader *l = open_loader(t, cases[c].prefetch, cases[c].prefetch_max, 2);
    drain_keeping(l, cases[c].keep, cases[c].burst, seen, nwin);
    for (uint64_t k = 0; k < nwin; k++) CHECK_MSG(seen[k] == 2, "case %zu window %llu seen %u",
                                                 c, (unsigned long long)k, seen[k]);
    stk_loader_close(l);
    free(seen);
  }
  stk_tokens_close(t);
}

/* A token loader's workers make its jobs themselves (no reader thread):
 * under a memory cap of a few batch buffers (4 KiB each here) a job waits
 * for a release, and the cap holds; with fewer ring places than workers
 * a job is split between them. Every window once an epoch, in order. */
TEST(tokens_ring_workers_make_jobs_within_the_cap) {
  struct stk_tokens *t = open_corpus();
  uint64_t nwin = stk_tokens_num_windows(t);
  static const struct {
    uint32_t threads, prefetch, keep, cap_bufs;
  } cases[] = {{2, 0, 1, 2}, {2, 0, 2, 3}, {3, 0, 1, 2}, {4, 1, 1, 2}, {2, 1, 1, 3}, {6, 0, 3, 4}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    struct stk_loader_opts lo;
    stk_loader_opts_init(&lo);
    lo.batch_size = 3;
    lo.threads = cases[c].threads;
    lo.epochs = 2;
    lo.prefetch = cases[c].prefetch;
    lo.prefetch_max = cases[c].prefetch;
    lo.mem_cap = (uint64_t)cases[c].cap_bufs * 4096;
    struct stk_loader *l = NULL;
    char err[STK_ERRMSG_MAX] = "";
    CHECK_MSG(stk_loader_open_tokens(&l, t, &lo, err) == 0, "case %zu: %s", c, err);
    uint8_t *seen = calloc(nwin, 1);
    drain_keeping(l, cases[c].keep, 1, seen, nwin);
    for (uint64_t k = 0; k < nwin; k++) CHECK_MSG(seen[k] == 2, "case %zu window %llu seen %u",
                                                 c, (unsigned long long)k, seen[k]);
    struct stk_loader_stats st;
    stk_loader_stats(l, &st);
    CHECK_MSG(st.mem_peak <= lo.mem_cap, "case %zu: peak %llu bytes under a cap of %llu", c,
              (unsigned long long)st.mem_peak, (unsigned long long)lo.mem_cap);
    CHECK_EQ(st.mem_over_cap, 0);
    stk_loader_close(l);
    free(seen);
  }
  /* Closed while its workers make and fill jobs. */
  for (uint32_t taken = 0; taken < 6; taken++) {
    struct stk_loader *l = open_loader(t, 0, 0, 1000);
    for (uint32_t i = 0; i < taken; i++) {
      struct stk_batch *b;
      CHECK_OK(stk_loader_next(l, &b));
      stk_batch_release(l, b);
    }
    stk_loader_close(l);
  }
  stk_tokens_close(t);
}

/* A slow consumer: the workers that make the jobs find the ring full and
 * wait, and the stats say so as the reader thread's did (read and ring
 * stages blocked on their output); the time the workers spend making jobs
 * is the read stage's and not the decode stage's too. */
TEST(tokens_ring_slow_consumer_shows_a_full_ring) {
  struct stk_tokens *t = open_corpus();
  struct stk_loader *l = open_loader(t, 2, 2, 1000);
  for (int i = 0; i < 40; i++) {
    struct stk_batch *b;
    CHECK_OK(stk_loader_next(l, &b));
    stk_batch_release(l, b);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  struct stk_loader_stats st;
  stk_loader_stats(l, &st);
  const struct stk_stage_stats *rd = &st.stage[STK_STAGE_READ], *ring = &st.stage[STK_STAGE_RING];
  const struct stk_stage_stats *dec = &st.stage[STK_STAGE_DECODE];
  CHECK_MSG(ring->wait_out_ns > 0 && rd->wait_out_ns > 0, "ring blocked %llu ns, read %llu ns",
            (unsigned long long)ring->wait_out_ns, (unsigned long long)rd->wait_out_ns);
  CHECK(rd->busy_ns > 0);
  /* The workers' time is the read stage's busy time, or the decode
   * stage's busy or waiting time, each counted once. */
  CHECK_MSG(rd->busy_ns + dec->busy_ns + dec->wait_in_ns <= (uint64_t)dec->threads * st.wall_ns,
            "read busy %llu + decode busy %llu + waiting %llu ns over %u threads in %llu ns",
            (unsigned long long)rd->busy_ns, (unsigned long long)dec->busy_ns,
            (unsigned long long)dec->wait_in_ns, dec->threads, (unsigned long long)st.wall_ns);
  stk_loader_close(l);
  stk_tokens_close(t);
}
