/* Token windows over a remote Megatron dataset (an http:// or s3:// prefix):
 * the .idx fetched whole, the .bin read through the cache's chunks. Real
 * servers on loopback (tests/tools/serve: nginx, moto's S3, the fault
 * proxy); each window is compared with the same corpus read locally. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/dataset/dataset_impl.h"
#include "../src/loader/tokens_impl.h"
#include "stoker/stoker.h"
#include "test.h"

static int sh(char **out, const char *cmd) {
  const char *root = getenv("STOKER_ROOT");
  return test_sh(out, "STK=%s; SERVE=%s/tests/tools/serve; %s", test_stoker_bin(),
                 root ? root : ".", cmd);
}

/* Start a server; its first output line (the URL) goes into url. */
static void serve(const char *args, char *url, size_t n) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "$SERVE %s 2>serve.err", args);
  if (sh(&out, cmd) != 0) {
    char *why = NULL;
    sh(&why, "tail -3 serve.err");
    fprintf(stderr, "serve %s: %s\n", args, why);
    free(why);
    free(out);
    SKIP("cannot start a loopback server here (see above)");
  }
  out[strcspn(out, "\n")] = 0;
  snprintf(url, n, "%s", out);
  free(out);
}

/* src/corp/shard-00000.{bin,idx}: 300 documents of about 200 uint16
 * tokens (about 120 KB of .bin). */
static void corpus(void) {
  char *out = NULL;
  CHECK_MSG(sh(&out, "$STK gen src/corp --format megatron --samples 300 --doc-len 200 "
                     "--doc-len-stdev 80 -q") == 0,
            "%s", out);
  free(out);
}

static struct stk_tokens *open_at(const char *path, uint32_t seq, const struct stk_cache_opts *co,
                                  char *err) {
  struct stk_dataset_opts d = {.cache = co};
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = seq;
  o.no_index_file = 1;
  o.dataset = &d;
  struct stk_tokens *t = NULL;
  int rc = stk_tokens_open(&t, 1, &path, NULL, &o, err);
  return rc ? NULL : t;
}

/* Every window of a equals b's; returns how many, or -1 at the first
 * failure (err set) of b. */
static long same_windows(struct stk_tokens *a, struct stk_tokens *b, char *err) {
  CHECK_EQ(stk_tokens_num_windows(a), stk_tokens_num_windows(b));
  uint32_t S = stk_tokens_row_len(a);
  int32_t *ra = malloc(S * 4), *rb = malloc(S * 4);
  long n = 0;
  for (uint64_t k = 0; k < stk_tokens_num_windows(a); k++, n++) {
    CHECK_OK(stk_tokens_window(a, k, ra, NULL, NULL, NULL, err));
    if (stk_tokens_window(b, k, rb, NULL, NULL, NULL, err) != 0) {
      n = -1;
      break;
    }
    CHECK_MSG(!memcmp(ra, rb, S * 4), "window %llu differs", (unsigned long long)k);
  }
  free(ra);
  free(rb);
  return n;
}

static struct stk_cache_stats stats_of(struct stk_tokens *t) {
  struct stk_cache_stats st = {0};
  CHECK_OK(stk_dataset_cache_stats(stk__tokens_dataset(t), &st));
  return st;
}

/* Files in DIR/data whose name has s in it (the chunk entries, not .meta). */
static int entries(const char *s) {
  char cmd[256], *out = NULL;
  snprintf(cmd, sizeof cmd, "ls cd/data | grep -v '\\.meta$' | grep -c -- '%s'", s);
  sh(&out, cmd);
  int n = atoi(out ? out : "0");
  free(out);
  return n;
}

/* Windows of 2001 uint16 tokens (4002 bytes) in 4 KiB chunks: most span
 * two chunks, and a few windows of 64 tokens cross a boundary too; every
 * one equals the local corpus's. The chunks are entries of the disk tier,
 * and a second pass is served from it without the origin. */
TEST(remote_tokens_windows_across_chunks) {
  corpus();
  char url[256], path[320], err[STK_ERRMSG_MAX] = "";
  serve("nginx src", url, sizeof url);
  snprintf(path, sizeof path, "%s/corp/shard-00000", url);
  struct stk_cache_opts co = {.dir = "cd", .chunk_bytes = 4096};
  uint32_t seqs[] = {2000, 64};
  for (int q = 0; q < 2; q++) {
    struct stk_tokens *loc = open_at("src/corp/shard-00000", seqs[q], NULL, err);
    CHECK_MSG(loc, "%s", err);
    struct stk_tokens *rem = open_at(path, seqs[q], &co, err);
    CHECK_MSG(rem, "%s", err);
    long n = same_windows(loc, rem, err);
    CHECK_MSG(n > 10, "%ld windows: %s", n, err);
    struct stk_cache_stats st = stats_of(rem);
    if (q == 0) CHECK(st.fetches >= 25); /* about 120 KB in 4 KiB chunks */
    if (q == 1) CHECK_EQ(st.fetches, 0);  /* all on disk from the first pass */
    stk_tokens_close(rem);
    stk_tokens_close(loc);
  }
  CHECK(entries(".c0-shard-00000.bin") == 1);
  CHECK(entries(".c1-shard-00000.bin") == 1);
  /* Another chunk size is another set of entries, never the old bytes. */
  co.chunk_bytes = 8192;
  struct stk_tokens *loc = open_at("src/corp/shard-00000", 300, NULL, err);
  struct stk_tokens *rem = open_at(path, 300, &co, err);
  CHECK_MSG(loc && rem, "%s", err);
  CHECK(same_windows(loc, rem, err) > 0);
  CHECK(stats_of(rem).fetches >= 10);
  stk_tokens_close(rem);
  stk_tokens_close(loc);
}

/* A chunk damaged on the node's disk (and its mtime moved, as any write
 * does) fails its recorded CRC32C on next use and is fetched again: the
 * windows are unchanged and the re-stage is counted. */
TEST(remote_tokens_corrupt_chunk_refetched) {
  corpus();
  char url[256], path[320], err[STK_ERRMSG_MAX] = "";
  serve("nginx src", url, sizeof url);
  snprintf(path, sizeof path, "%s/corp/shard-00000", url);
  struct stk_cache_opts co = {.dir = "cd", .chunk_bytes = 4096};
  struct stk_tokens *loc = open_at("src/corp/shard-00000", 100, NULL, err);
  struct stk_tokens *rem = open_at(path, 100, &co, err);
  CHECK_MSG(loc && rem, "%s", err);
  CHECK(same_windows(loc, rem, err) > 0);
  stk_tokens_close(rem);
  char *out = NULL;
  CHECK_EQ(sh(&out, "ls cd/data/*.c3-shard-00000.bin"), 0);
  out[strcspn(out, "\n")] = 0;
  char chunk[512];
  snprintf(chunk, sizeof chunk, "%s", out);
  free(out);
  FILE *f = fopen(chunk, "r+b");
  CHECK(f);
  fseek(f, 100, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 100, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= 10; /* another mtime, whatever the clock's tick */
  ts[1] = ts[0];
  CHECK_EQ(utimensat(AT_FDCWD, chunk, ts, 0), 0);
  rem = open_at(path, 100, &co, err);
  CHECK_MSG(rem, "%s", err);
  CHECK(same_windows(loc, rem, err) > 0);
  struct stk_cache_stats st = stats_of(rem);
  CHECK_EQ(st.restages, 1);
  CHECK_EQ(st.fetches, 1);
  stk_tokens_close(rem);
  stk_tokens_close(loc);
}

/* An origin that cuts bodies short mid-chunk: with some requests cut, the
 * retries deliver every window intact; with every .bin request cut, the
 * window fails with an error naming the object, never with other tokens. */
TEST(remote_tokens_origin_fails_mid_chunk) {
  corpus();
  char up[256], px[256], cmd[512], path[320], err[STK_ERRMSG_MAX] = "";
  serve("nginx src", up, sizeof up);
  snprintf(cmd, sizeof cmd, "proxy %s --p-truncate 0.25 --seed 7 --only-path .bin",
           up);
  serve(cmd, px, sizeof px);
  snprintf(path, sizeof path, "%s/corp/shard-00000", px);
  struct stk_cache_opts co = {.chunk_bytes = 4096, .ram_bytes = 256 << 10}; /* every chunk fits */
  struct stk_tokens *loc = open_at("src/corp/shard-00000", 500, NULL, err);
  struct stk_tokens *rem = open_at(path, 500, &co, err);
  CHECK_MSG(loc && rem, "%s", err);
  CHECK_MSG(same_windows(loc, rem, err) > 0, "%s", err);
  CHECK(stats_of(rem).retries > 0);
  stk_tokens_close(rem);
  /* Every .bin body cut: an error, not tokens. */
  char *out = NULL;
  snprintf(cmd, sizeof cmd,
           "curl -s -X POST -d '{\"p_truncate\": 1.0}' %s/__proxy/config", px);
  CHECK_EQ(sh(&out, cmd), 0);
  free(out);
  co.retry_max_s = 1.0;
  co.max_attempts = 3;
  rem = open_at(path, 500, &co, err);
  CHECK_MSG(rem, "%s", err);
  uint32_t S = stk_tokens_row_len(rem);
  int32_t *row = malloc(S * 4);
  err[0] = 0;
  CHECK(stk_tokens_window(rem, 0, row, NULL, NULL, NULL, err) != 0);
  CHECK_CONTAINS(err, "shard-00000.bin");
  free(row);
  stk_tokens_close(rem);
  stk_tokens_close(loc);
}

/* The same over S3 (moto, signed requests): an s3:// prefix, chunks of
 * 4 KiB in a disk tier, every window equal to the local corpus's. */
TEST(remote_tokens_s3_prefix) {
  corpus();
  char *out = NULL;
  if (sh(&out, "$SERVE setup") != 0) {
    fprintf(stderr, "%s", out);
    free(out);
    SKIP("moto[server] is not installed (scripts/install-deps test)");
  }
  free(out);
  CHECK_MSG(sh(&out, "$SERVE s3 src bucket 2>serve.err || { cat serve.err; exit 1; }") == 0, "%s",
            out);
  char ep[256], key[128], secret[128], err[STK_ERRMSG_MAX] = "";
  CHECK(sscanf(out, "%255s %127s %127s", ep, key, secret) == 3);
  free(out);
  setenv("AWS_ACCESS_KEY_ID", key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
  struct stk_cache_opts co = {.dir = "cd", .chunk_bytes = 4096, .s3_endpoint = ep};
  struct stk_tokens *loc = open_at("src/corp/shard-00000", 700, NULL, err);
  struct stk_tokens *rem = open_at("s3://bucket/corp/shard-00000", 700, &co, err);
  CHECK_MSG(loc && rem, "%s", err);
  CHECK_MSG(same_windows(loc, rem, err) > 0, "%s", err);
  CHECK(stats_of(rem).fetches >= 25);
  stk_tokens_close(rem);
  stk_tokens_close(loc);
}

/* Chunks are evicted one by one under the disk tier's budget (those a
 * process holds mapped excepted): a .bin of about 100 chunks of 4 KiB
 * (more than the 64 a process keeps mapped) through a 64 KiB budget still
 * serves every window, evicting chunks and fetching some again. */
TEST(remote_tokens_chunks_evicted_under_budget) {
  char *out = NULL;
  CHECK_MSG(sh(&out, "$STK gen src/big --format megatron --samples 1000 --doc-len 200 "
                     "--doc-len-stdev 80 -q") == 0,
            "%s", out);
  free(out);
  struct stat sb;
  CHECK_EQ(stat("src/big/shard-00000.bin", &sb), 0);
  uint64_t chunks = ((uint64_t)sb.st_size + 4095) / 4096;
  char url[256], path[320], err[STK_ERRMSG_MAX] = "";
  serve("nginx src", url, sizeof url);
  snprintf(path, sizeof path, "%s/big/shard-00000", url);
  struct stk_cache_opts co = {.dir = "cd", .chunk_bytes = 4096, .disk_bytes = 64 << 10,
                              .no_fsync = 1};
  struct stk_tokens *loc = open_at("src/big/shard-00000", 300, NULL, err);
  struct stk_tokens *rem = open_at(path, 300, &co, err);
  CHECK_MSG(loc && rem, "%s", err);
  CHECK_MSG(same_windows(loc, rem, err) > 500, "%s", err);
  struct stk_cache_stats st = stats_of(rem);
  CHECK_MSG(st.fetches > chunks && st.disk.evictions > 0, "%llu fetches of %llu chunks, %llu evicted",
            (unsigned long long)st.fetches, (unsigned long long)chunks,
            (unsigned long long)st.disk.evictions);
  stk_tokens_close(rem);
  stk_tokens_close(loc);
}

/* The look-ahead stages the chunks of the windows ahead of the reader: a
 * loader whose ring holds one batch, its consumer holding the first, still
 * gets chunks staged (counted as prefetched) that only the look-ahead can
 * have asked for; with the cache's prefetch off, none. Every window the
 * loader serves equals the local corpus's either way. */
TEST(remote_tokens_lookahead_stages_chunks_ahead) {
  corpus();
  char url[256], path[320], err[STK_ERRMSG_MAX] = "";
  serve("nginx src", url, sizeof url);
  snprintf(path, sizeof path, "%s/corp/shard-00000", url);
  for (int off = 0; off < 2; off++) {
    struct stk_cache_opts co = {.dir = off ? "cd-off" : "cd", .chunk_bytes = 4096,
                                .prefetch_bytes = off ? -1 : 0};
    struct stk_tokens *loc = open_at("src/corp/shard-00000", 64, NULL, err);
    struct stk_tokens *rem = open_at(path, 64, &co, err);
    CHECK_MSG(loc && rem, "%s", err);
    struct stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.batch_size = 4;
    o.threads = 1;
    o.prefetch = 1;
    o.prefetch_max = 1;
    struct stk_loader *l;
    CHECK_OK(stk_loader_open_tokens(&l, rem, &o, err));
    struct stk_batch *first;
    CHECK_OK(stk_loader_next(l, &first));
    struct stk_loader_stats st;
    stk_loader_stats(l, &st);
    CHECK(st.has_cache);
    /* Wait (bounded, for a hang) for the look-ahead to stage a chunk. */
    for (int i = 0; !off && i < 3000 && st.cache.prefetched == 0; i++) {
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
      stk_loader_stats(l, &st);
    }
    if (off)
      CHECK_EQ(st.cache.prefetched, 0);
    else
      CHECK_MSG(st.cache.prefetched > 0, "no chunk staged ahead in 30 s");
    uint32_t S = stk_tokens_row_len(loc);
    int64_t *want = malloc(S * 8);
    uint64_t seen = 0;
    struct stk_batch *b = first;
    int rc = 0;
    do {
      struct stk_token_batch tb;
      CHECK_OK(stk_batch_tokens(l, b, &tb));
      CHECK_EQ(tb.cols, S);
      size_t row = (size_t)S * (tb.type == STK_TOKENS_INT64 ? 8 : 4);
      for (uint32_t r = 0; r < tb.rows; r++, seen++) {
        CHECK_OK(stk_tokens_window(loc, tb.windows[r], want, NULL, NULL, NULL, err));
        CHECK_MSG(!memcmp((uint8_t *)tb.tokens + r * row, want, row), "window %llu differs",
                  (unsigned long long)tb.windows[r]);
      }
      stk_batch_release(l, b);
    } while ((rc = stk_loader_next(l, &b)) == 0);
    CHECK_EQ(rc, STK_EOF);
    CHECK_EQ(seen, stk_tokens_num_windows(rem));
    stk_loader_stats(l, &st);
    if (off) CHECK_EQ(st.cache.prefetched, 0);
    free(want);
    stk_loader_close(l);
    stk_tokens_close(rem);
    stk_tokens_close(loc);
  }
}

/* inspect, verify and pack read a remote Megatron dataset through the
 * chunks (never staged whole): every sample equals the local corpus's; verify
 * fetches each chunk once, and a later verify checks every cached chunk
 * against its recorded CRC32C even where the node trusted it (a byte
 * changed with the mtime put back, as bit rot would leave it): that chunk
 * is fetched again from the origin and equals the origin's bytes. */
TEST(remote_tokens_inspect_verify_through_chunks) {
  corpus();
  char url[256], path[320], cmd[700], *out = NULL;
  serve("nginx src", url, sizeof url);
  snprintf(path, sizeof path, "%s/corp/shard-00000", url);
  const char *co = "--cache-dir cd --cache-chunk-size 4096";
  snprintf(cmd, sizeof cmd, "$STK inspect %s %s 2>&1", path, co);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "samples:  300");
  free(out);
  snprintf(cmd, sizeof cmd, "$STK verify %s %s -q 2>&1", path, co);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "ok: 300 samples");
  CHECK_CONTAINS(out, " 0 re-staged");
  free(out);
  snprintf(cmd, sizeof cmd, "$STK pack %s out --format megatron -q 2>&1 && "
           "cmp out/shard-00000.bin src/corp/shard-00000.bin", path);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  free(out);
  /* Sample by sample, the library's reads equal the local ones. */
  struct stk_cache_opts c = {.dir = "cd", .chunk_bytes = 4096};
  struct stk_dataset_opts ro = {.cache = &c};
  struct stk_dataset *loc, *rem;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_OK(stk_dataset_open(&loc, "src/corp/shard-00000", NULL, err));
  CHECK_MSG(stk_dataset_open(&rem, path, &ro, err) == 0, "%s", err);
  CHECK_EQ(stk_dataset_num_samples(rem), 300);
  uint8_t *ba = NULL, *bb = NULL;
  size_t ca = 0, cb = 0;
  for (uint64_t i = 0; i < 300; i++) {
    struct stk_sample sa, sb;
    CHECK_OK(stk_dataset_read(loc, i, 1, &ba, &ca, &sa));
    CHECK_MSG(stk_dataset_read(rem, i, 1, &bb, &cb, &sb) == 0, "%s", stk_dataset_errmsg(rem));
    CHECK_EQ(sa.fields[0].len, sb.fields[0].len);
    CHECK(!memcmp(sa.fields[0].data, sb.fields[0].data, sa.fields[0].len));
  }
  free(ba);
  free(bb);
  stk_dataset_close(rem);
  stk_dataset_close(loc);
  /* Chunk 3 changed on the node's disk, its mtime put back. */
  CHECK_EQ(sh(&out, "ls cd/data/*.c3-shard-00000.bin"), 0);
  out[strcspn(out, "\n")] = 0;
  char chunk[512];
  snprintf(chunk, sizeof chunk, "%s", out);
  free(out);
  struct stat st;
  CHECK_EQ(stat(chunk, &st), 0);
  FILE *f = fopen(chunk, "r+b");
  CHECK(f);
  fseek(f, 100, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, 100, SEEK_SET);
  fputc(ch ^ 0x40, f);
  fclose(f);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  CHECK_EQ(utimensat(AT_FDCWD, chunk, ts, 0), 0);
  snprintf(cmd, sizeof cmd, "$STK verify %s %s -q 2>&1", path, co);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "1 shards fetched");
  CHECK_CONTAINS(out, " 1 re-staged");
  free(out);
  size_t n, nsrc;
  uint8_t *got = test_read_file(chunk, &n), *src = test_read_file("src/corp/shard-00000.bin", &nsrc);
  CHECK(got && src && n == 4096 && nsrc > 4 * 4096);
  CHECK(!memcmp(got, src + 3 * 4096, 4096));
  free(got);
  free(src);
}
