/* Token windows through the public API (stoker/tokens.h): windows served
 * by the loader against the windows computed here from the index arrays
 * and the token stream, resume across world sizes, the index file (reuse,
 * stale, corrupt, eight processes at once), blends, document windows and
 * packing, and bad inputs. The corpora are written here, byte by byte. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stoker/stoker.h"

#include "../src/loader/gpt_index.h"
#include "test.h"
#include "test_tokens.h"

/* Token i of document d: unique while documents are shorter than 1000. */
static int64_t tok(int64_t d, int64_t i) { return d * 1000 + i; }

static uint64_t tok_u(int d, int k) { return (uint64_t)tok(d, k); }

/* PREFIX.bin + PREFIX.idx, one document per sequence, int32 (code 4) or
 * int64 (code 5) tokens. */
static void write_corpus(const char *prefix, int code, int n, const int32_t *lens) {
  test_megatron_write(prefix, code, code == 5 ? 8 : 4, n, lens, tok_u);
}

/* n documents of 1..maxlen tokens, from a fixed stream. */
static int32_t *lengths(int n, int maxlen, uint64_t seed) {
  int32_t *l = malloc((size_t)n * sizeof *l);
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  for (int i = 0; i < n; i++) l[i] = 1 + (int32_t)stk_rng_below(&r, (uint64_t)maxlen);
  return l;
}

static struct stk_tokens *open_ok(const char *path, const struct stk_tokens_opts *o) {
  struct stk_tokens *t = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_tokens_open(&t, 1, &path, NULL, o, err);
  CHECK_MSG(rc == 0, "stk_tokens_open(%s): %s", path, err);
  return t;
}

/* Window k computed straight from Megatron's arrays and the token
 * function: the pieces of stk__gpt_window_pieces, each document's tokens
 * by tok(). Returns the token count. */
static uint32_t expect_window(const struct stk__gpt_index *ix, const int32_t *lens, uint64_t k,
                              int64_t *out) {
  struct stk__gpt_window w;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk__gpt_window(ix, k, &w, err));
  struct stk__gpt_piece pc[512];
  uint64_t np = stk__gpt_window_pieces(ix, lens, &w, pc, 512);
  CHECK(np <= 512);
  uint32_t n = 0;
  for (uint64_t j = 0; j < np; j++)
    for (int64_t i = 0; i < pc[j].len; i++) out[n++] = tok(pc[j].doc, pc[j].offset + i);
  return n;
}

/* Every window a loader gives, by window number: rows[k * S ..]. */
static void drain(struct stk_loader *l, uint32_t S, int64_t *rows, uint8_t *seen, uint64_t nwin,
                  uint64_t max_batches, uint64_t *got) {
  struct stk_batch *b;
  uint64_t nb = 0;
  while ((!max_batches || nb < max_batches) && stk_loader_next(l, &b) == 0) {
    struct stk_token_batch tb;
    CHECK_OK(stk_batch_tokens(l, b, &tb));
    CHECK_EQ(tb.rows, b->n);
    CHECK_EQ(tb.cols, S);
    for (uint32_t i = 0; i < tb.rows; i++) {
      uint64_t k = tb.windows[i];
      CHECK(k < nwin);
      if (seen) seen[k]++;
      for (uint32_t j = 0; j < S; j++)
        rows[k * S + j] = tb.type == STK_TOKENS_INT64 ? ((int64_t *)tb.tokens)[i * S + j]
                                                      : ((int32_t *)tb.tokens)[i * S + j];
      if (got) (*got)++;
    }
    stk_batch_release(l, b);
    nb++;
  }
}

static struct stk_loader *loader(struct stk_tokens *t, uint32_t batch, uint32_t rank,
                                 uint32_t world, const struct stk_sampler_state *resume) {
  struct stk_loader_opts lo;
  stk_loader_opts_init(&lo);
  lo.batch_size = batch;
  lo.threads = 2;
  struct stk_sampler_opts so = {0};
  lo.sampler = &so;
  so.rank = rank;
  so.world = world;
  lo.resume = resume;
  struct stk_loader *l = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_loader_open_tokens(&l, t, &lo, err);
  CHECK_MSG(rc == 0, "stk_loader_open_tokens: %s", err);
  return l;
}

/* The windows a loader serves are Megatron's windows, in its order, for
 * one epoch and for more samples than an epoch holds (separate final
 * epoch), int32 and int64, with a split. */
TEST(tokens_windows_equal_index_arrays) {
  enum { N = 60 };
  int32_t *lens = lengths(N, 40, 7);
  write_corpus("c", 4, N, lens);
  static const struct {
    uint64_t samples;
    int type;
    const char *split;
  } cases[] = {
      {0, STK_TOKENS_INT32, NULL}, {150, STK_TOKENS_INT64, NULL}, {0, STK_TOKENS_INT32, "8,1,1"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    struct stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.seq_len = 16;
    o.samples = cases[c].samples;
    o.token_type = cases[c].type;
    o.split = cases[c].split;
    o.no_index_file = 1;
    struct stk_tokens *t = open_ok("c", &o);
    /* The split 8,1,1 of 60 documents is documents 0..47. */
    uint64_t ndoc = o.split ? 48 : N;
    struct stk_tokens_source si;
    CHECK_OK(stk_tokens_source(t, 0, &si));
    CHECK_EQ(si.documents, ndoc);
    int32_t *docs = malloc(ndoc * sizeof *docs);
    for (uint64_t i = 0; i < ndoc; i++) docs[i] = (int32_t)i;
    struct stk__gpt_cfg g = {.lengths = lens,
                             .n_lengths = N,
                             .docs = docs,
                             .n_docs = ndoc,
                             .seq_len = 16,
                             .num_samples = o.samples,
                             .seed = 1234};
    struct stk__gpt_index ix;
    char err[STK_ERRMSG_MAX];
    CHECK_OK(stk__gpt_index_build(&g, &ix, err));
    uint64_t nwin = stk_tokens_num_windows(t);
    CHECK_EQ(nwin, ix.n_samples);
    CHECK_EQ(stk_tokens_row_len(t), 17);
    int64_t *rows = calloc(nwin * 17, sizeof *rows);
    uint8_t *seen = calloc(nwin, 1);
    struct stk_loader *l = loader(t, 7, 0, 1, NULL);
    drain(l, 17, rows, seen, nwin, 0, NULL);
    struct stk_loader_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ(st.samples, nwin);
    stk_loader_close(l);
    int64_t want[17];
    for (uint64_t k = 0; k < nwin; k++) {
      CHECK_EQ(seen[k], 1);
      CHECK_EQ(expect_window(&ix, lens, k, want), 17);
      for (int j = 0; j < 17; j++)
        CHECK_MSG(rows[k * 17 + j] == want[j], "case %zu window %llu token %d: %lld != %lld", c,
                  (unsigned long long)k, j, (long long)rows[k * 17 + j], (long long)want[j]);
    }
    /* And one window by random access. */
    int64_t one[17];
    int32_t cu[18];
    uint32_t ncu = 0;
    uint8_t mask[17];
    if (o.token_type == STK_TOKENS_INT64) {
      CHECK_OK(stk_tokens_window(t, nwin / 2, one, mask, cu, &ncu, err));
      CHECK(!memcmp(one, rows + nwin / 2 * 17, sizeof one));
      CHECK_EQ(cu[0], 0);
      CHECK_EQ(cu[ncu - 1], 17);
      for (int j = 0; j < 17; j++) CHECK_EQ(mask[j], 1);
    }
    CHECK_EQ(stk_tokens_window(t, nwin, one, NULL, NULL, NULL, err), STK_ERANGE);
    stk__gpt_index_free(&ix);
    free(docs);
    free(rows);
    free(seen);
    stk_tokens_close(t);
  }
  free(lens);
}

/* Resume mid-epoch at world sizes 1 -> 3 -> 2: every window once. */
TEST(tokens_resume_worlds_1_3_2) {
  enum { N = 80 };
  int32_t *lens = lengths(N, 50, 11);
  write_corpus("c", 4, N, lens);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 8;
  o.no_index_file = 1;
  struct stk_tokens *t = open_ok("c", &o);
  uint64_t nwin = stk_tokens_num_windows(t), got = 0;
  CHECK(nwin > 100);
  int64_t *rows = calloc(nwin * 9, sizeof *rows), *ref = calloc(nwin * 9, sizeof *ref);
  uint8_t *seen = calloc(nwin, 1);
  struct stk_loader *l = loader(t, 4, 0, 1, NULL);
  drain(l, 9, ref, NULL, nwin, 0, NULL); /* an uninterrupted pass */
  stk_loader_close(l);
  struct stk_sampler_state st;
  l = loader(t, 4, 0, 1, NULL);
  drain(l, 9, rows, seen, nwin, 5, &got);
  stk_loader_state(l, &st);
  stk_loader_close(l);
  CHECK_EQ(st.position, 20);
  struct stk_loader *r3[3];
  for (uint32_t r = 0; r < 3; r++) r3[r] = loader(t, 4, r, 3, &st);
  for (uint32_t r = 0; r < 3; r++) drain(r3[r], 9, rows, seen, nwin, 3, &got);
  stk_loader_state(r3[0], &st);
  for (uint32_t r = 0; r < 3; r++) stk_loader_close(r3[r]);
  CHECK_EQ(st.position, 20 + 3 * 4 * 3);
  struct stk_loader *r2[2];
  for (uint32_t r = 0; r < 2; r++) r2[r] = loader(t, 4, r, 2, &st);
  for (uint32_t r = 0; r < 2; r++) drain(r2[r], 9, rows, seen, nwin, 0, &got);
  for (uint32_t r = 0; r < 2; r++) stk_loader_close(r2[r]);
  CHECK_EQ(got, nwin);
  for (uint64_t k = 0; k < nwin; k++) CHECK_EQ(seen[k], 1);
  CHECK(!memcmp(rows, ref, nwin * 9 * sizeof *rows));
  /* A state of another corpus is refused. */
  st.dataset_fp ^= 1;
  struct stk_loader_opts lo;
  stk_loader_opts_init(&lo);
  lo.resume = &st;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_EQ(stk_loader_open_tokens(&l, t, &lo, err), STK_EINVAL);
  CHECK_CONTAINS(err, "does not match");
  stk_tokens_close(t);
  free(rows);
  free(ref);
  free(seen);
  free(lens);
}

/* Every window of t as a checksum. */
static uint32_t windows_crc(struct stk_tokens *t) {
  uint32_t S = stk_tokens_row_len(t), crc = 0;
  int32_t *row = malloc(S * sizeof *row);
  char err[STK_ERRMSG_MAX];
  for (uint64_t k = 0; k < stk_tokens_num_windows(t); k++) {
    CHECK_OK(stk_tokens_window(t, k, row, NULL, NULL, NULL, err));
    crc = stk_crc32c(crc, row, S * sizeof *row);
  }
  free(row);
  return crc;
}

static void tweak(const char *path, long from_end) {
  FILE *f = fopen(path, "r+b");
  CHECK(f);
  fseek(f, -from_end, SEEK_END);
  int c = fgetc(f);
  fseek(f, -from_end, SEEK_END);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

static void copy_file(const char *from, const char *to) {
  size_t n;
  uint8_t *p = test_read_file(from, &n);
  CHECK(p);
  test_write_file(to, p, n);
  free(p);
}

/* The index file: built once, then mapped; a file for another
 * configuration or a corrupt one is rebuilt; the windows never change. */
TEST(tokens_index_file_reuse_stale_corrupt) {
  enum { N = 300 };
  int32_t *lens = lengths(N, 60, 3);
  write_corpus("c", 4, N, lens);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 32;
  o.index_dir = "ix/sub";
  struct stk_tokens *t = open_ok("c", &o);
  struct stk_tokens_source s;
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  CHECK(s.index_path && !strncmp(s.index_path, "ix/sub/c.gpt-", 13));
  char pa[512];
  snprintf(pa, sizeof pa, "%s", s.index_path);
  uint32_t crc = windows_crc(t);
  stk_tokens_close(t);
  t = open_ok("c", &o); /* reuse */
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 0);
  CHECK_EQ(windows_crc(t), crc);
  stk_tokens_close(t);
  /* Another configuration: another file. */
  o.seq_len = 20;
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  char pb[512];
  snprintf(pb, sizeof pb, "%s", s.index_path);
  CHECK(strcmp(pa, pb) != 0);
  uint32_t crc20 = windows_crc(t);
  stk_tokens_close(t);
  /* seq_len 32's file under seq_len 20's name: stale, rebuilt. */
  copy_file(pa, pb);
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  CHECK_EQ(windows_crc(t), crc20);
  stk_tokens_close(t);
  /* A flipped byte in the arrays: rebuilt. */
  tweak(pb, 3);
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  CHECK_EQ(windows_crc(t), crc20);
  stk_tokens_close(t);
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 0);
  stk_tokens_close(t);
  /* A changed corpus (other lengths): its own file. */
  lens[0] = lens[0] == 1 ? 2 : lens[0] - 1;
  write_corpus("c", 4, N, lens);
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  stk_tokens_close(t);
  /* Beside the data by default. */
  o.index_dir = NULL;
  t = open_ok("c", &o);
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK(s.index_path && !strncmp(s.index_path, "./c.gpt-", 8));
  stk_tokens_close(t);
  free(lens);
}

/* Set path's mtime to `ago` seconds before now (an index written earlier). */
static void age(const char *path, int ago) {
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= ago;
  ts[1] = ts[0];
  CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static int source_built(const struct stk_tokens_opts *o) {
  struct stk_tokens *t = open_ok("m", o);
  struct stk_tokens_source s;
  CHECK_OK(stk_tokens_source(t, 0, &s));
  int b = s.built;
  stk_tokens_close(t);
  return b;
}

/* An index file is checked in full once per node: the open that checks it
 * leaves NAME.stkidx.ok, and later opens trust the file while its inode,
 * size, mtime and checksum are those the marker names. A changed file, a
 * damaged marker or none means a full check again, and a corrupt index is
 * rebuilt. */
TEST(tokens_index_checked_once_marker) {
  enum { N = 200 };
  int32_t *lens = lengths(N, 50, 7);
  write_corpus("m", 4, N, lens);
  free(lens);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 16;
  o.index_dir = "mx";
  struct stk_tokens *t = open_ok("m", &o);
  struct stk_tokens_source s;
  CHECK_OK(stk_tokens_source(t, 0, &s));
  CHECK_EQ(s.built, 1);
  char ix[512], ok[540];
  snprintf(ix, sizeof ix, "%s", s.index_path);
  snprintf(ok, sizeof ok, "%s.ok", ix);
  uint32_t crc = windows_crc(t);
  stk_tokens_close(t);
  /* Checked by the next open (the file written 10 s ago), which leaves the
   * marker. */
  age(ix, 10);
  CHECK_EQ(source_built(&o), 0);
  struct stat st;
  CHECK_EQ(stat(ok, &st), 0);
  /* A byte changed with the mtime put back (as `touch -r` would): the
   * marker still names the file, so the open does not read the arrays
   * and does not see it. That is the saving (and the one write it misses;
   * the cache's verification stamp has the same rule). */
  struct stat before;
  CHECK_EQ(stat(ix, &before), 0);
  tweak(ix, 5);
  struct timespec ts[2] = {before.st_atim, before.st_mtim};
  CHECK_EQ(utimensat(AT_FDCWD, ix, ts, 0), 0);
  CHECK_EQ(source_built(&o), 0);
  /* Without the marker the full check finds it: rebuilt, same windows. */
  CHECK_EQ(unlink(ok), 0);
  CHECK_EQ(source_built(&o), 1);
  t = open_ok("m", &o);
  CHECK_EQ(windows_crc(t), crc);
  stk_tokens_close(t);
  /* The rebuilt file is another inode: the marker is left again by a full
   * check; a write that moves the mtime voids it, and the check rebuilds. */
  age(ix, 10);
  CHECK_EQ(source_built(&o), 0);
  CHECK_EQ(stat(ok, &st), 0);
  tweak(ix, 5);
  CHECK_EQ(source_built(&o), 1);
  /* A damaged marker is ignored (full check, file good, marker rewritten). */
  age(ix, 10);
  CHECK_EQ(source_built(&o), 0);
  tweak(ok, 1);
  CHECK_EQ(source_built(&o), 0);
  t = open_ok("m", &o);
  CHECK_EQ(windows_crc(t), crc);
  stk_tokens_close(t);
  /* A file checked within a second of its last write (its mtime could miss
   * a write in the same timestamp tick) gets no trusted marker: the next
   * open checks again and finds the damage. */
  tweak(ix, 5);
  CHECK_EQ(source_built(&o), 1);
  CHECK_EQ(source_built(&o), 0);
  tweak(ix, 5);
  CHECK_EQ(source_built(&o), 1);
}

/* Eight processes open the same corpus at once: one builds, all serve the
 * same windows. */
TEST(tokens_eight_openers_build_once) {
  enum { N = 200000, PROCS = 8 };
  int32_t *lens = lengths(N, 200, 5);
  mkdir("d", 0755);
  write_corpus("d/c", 4, N, lens);
  free(lens);
  pid_t kids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    kids[p] = fork();
    CHECK(kids[p] >= 0);
    if (kids[p] == 0) {
      struct stk_tokens_opts o;
      stk_tokens_opts_init(&o);
      o.seq_len = 64;
      o.samples = 400000;
      struct stk_tokens *t;
      char err[STK_ERRMSG_MAX];
      const char *path = "d/c";
      if (stk_tokens_open(&t, 1, &path, NULL, &o, err) != 0) _exit(2);
      struct stk_tokens_source s;
      stk_tokens_source(t, 0, &s);
      uint32_t crc = 0, S = stk_tokens_row_len(t);
      int32_t row[65];
      for (uint64_t k = 0; k < stk_tokens_num_windows(t); k += 97) {
        if (stk_tokens_window(t, k, row, NULL, NULL, NULL, err)) _exit(3);
        crc = stk_crc32c(crc, row, S * 4);
      }
      char name[32], line[64];
      snprintf(name, sizeof name, "out-%d", p);
      int n = snprintf(line, sizeof line, "%d %u", s.built, crc);
      test_write_file(name, line, (size_t)n);
      stk_tokens_close(t);
      _exit(0);
    }
  }
  int built = 0;
  unsigned crc0 = 0;
  for (int p = 0; p < PROCS; p++) {
    int status;
    CHECK(waitpid(kids[p], &status, 0) == kids[p]);
    CHECK_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : 99, 0);
    char name[32];
    snprintf(name, sizeof name, "out-%d", p);
    size_t n;
    char *txt = (char *)test_read_file(name, &n);
    int b;
    unsigned crc;
    CHECK(txt && sscanf(txt, "%d %u", &b, &crc) == 2);
    free(txt);
    built += b;
    if (p == 0) crc0 = crc;
    CHECK_EQ(crc, crc0);
  }
  CHECK_EQ(built, 1);
}

/* A 0.3/0.7 blend: Megatron's per-source sizes and order, each window the
 * source's own window, and the served counts per source. */
TEST(tokens_blend_sources_and_counts) {
  int32_t *la = lengths(70, 30, 1), *lb = lengths(90, 30, 2);
  write_corpus("a", 4, 70, la);
  write_corpus("b", 5, 90, lb);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 12;
  o.samples = 200;
  o.no_index_file = 1;
  const char *paths[] = {"a", "b"};
  double w[] = {0.3, 0.7}, norm[2];
  uint64_t sizes[2], bsize;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk__gpt_blend_plan(w, 2, 200, 0.005, norm, sizes, &bsize, err));
  int16_t *di = malloc(bsize * sizeof *di);
  int64_t *dsi = malloc(bsize * sizeof *dsi);
  uint64_t counts[2];
  CHECK_OK(stk__gpt_blend_build(norm, 2, bsize, di, dsi, counts, err));
  struct stk_tokens *t;
  CHECK_OK(stk_tokens_open(&t, 2, paths, w, &o, err));
  CHECK_EQ(stk_tokens_num_windows(t), bsize);
  CHECK_EQ(stk_tokens_num_sources(t), 2);
  /* Each source alone, built for its blend size. */
  struct stk_tokens *one[2];
  for (int i = 0; i < 2; i++) {
    struct stk_tokens_opts oi = o;
    oi.samples = sizes[i];
    one[i] = open_ok(paths[i], &oi);
  }
  struct stk_loader *l = loader(t, 8, 0, 1, NULL);
  uint32_t S = 13;
  int64_t *rows = calloc(bsize * S, sizeof *rows);
  drain(l, S, rows, NULL, bsize, 0, NULL);
  stk_loader_close(l);
  int32_t want[13];
  for (uint64_t k = 0; k < bsize; k++) {
    CHECK_OK(stk_tokens_window(one[di[k]], (uint64_t)dsi[k], want, NULL, NULL, NULL, err));
    for (uint32_t j = 0; j < S; j++) CHECK_EQ(rows[k * S + j], want[j]);
  }
  for (int i = 0; i < 2; i++) {
    struct stk_tokens_source s;
    CHECK_OK(stk_tokens_source(t, i, &s));
    CHECK_EQ(s.blend_windows, counts[i]);
    CHECK_EQ(s.served, counts[i]);
    CHECK(s.windows >= sizes[i]); /* its GPT dataset: whole epochs */
    CHECK(s.weight == norm[i]);
    stk_tokens_close(one[i]);
  }
  CHECK(counts[0] > 50 && counts[1] > 130);
  stk_tokens_close(t);
  free(rows);
  free(di);
  free(dsi);
  free(la);
  free(lb);
}

/* A blend of a and b by w: its blend index's built flag, path[512], inode. */
static struct stk_tokens *blend_open(const struct stk_tokens_opts *o, const double *w, int *built,
                                     char *path, ino_t *ino) {
  const char *paths[] = {"a", "b"}, *p = NULL;
  struct stk_tokens *t;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_tokens_open(&t, 2, paths, w, o, err) == 0, "blend: %s", err);
  CHECK_OK(stk_tokens_blend_index(t, built, &p));
  CHECK(p && !strncmp(p, "bx/blend-of-2.blend-", 20));
  snprintf(path, 512, "%s", p);
  struct stat st;
  CHECK_EQ(stat(path, &st), 0);
  *ino = st.st_ino;
  return t;
}

/* A blend's order is built once and kept beside the sources' indices: the
 * next opens map it (not written again: same inode) and serve the same
 * windows; a corrupt file is rebuilt; other weights, another file. */
TEST(tokens_blend_index_kept) {
  int32_t *la = lengths(70, 30, 1), *lb = lengths(90, 30, 2);
  write_corpus("a", 4, 70, la);
  write_corpus("b", 4, 90, lb);
  free(la), free(lb);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = 12;
  o.samples = 300;
  o.index_dir = "bx";
  int built;
  ino_t ino, ino2;
  char path[512], path2[512];
  double w[] = {0.3, 0.7}, w2[] = {0.5, 0.5};
  struct stk_tokens *t = blend_open(&o, w, &built, path, &ino);
  CHECK_EQ(built, 1);
  uint32_t crc = windows_crc(t);
  stk_tokens_close(t);
  age(path, 10);
  for (int i = 0; i < 2; i++) { /* the first checks it in full, the second trusts the marker */
    t = blend_open(&o, w, &built, path2, &ino2);
    CHECK_EQ(built, 0);
    CHECK_EQ(ino2, ino);
    CHECK_EQ(windows_crc(t), crc);
    stk_tokens_close(t);
  }
  tweak(path, 3);
  t = blend_open(&o, w, &built, path2, &ino2);
  CHECK(built == 1 && ino2 != ino);
  CHECK_EQ(windows_crc(t), crc);
  stk_tokens_close(t);
  t = blend_open(&o, w2, &built, path2, &ino2);
  CHECK(built == 1 && strcmp(path, path2) != 0);
  stk_tokens_close(t);
  t = open_ok("a", &o);
  CHECK_EQ(stk_tokens_blend_index(t, &built, NULL), STK_EINVAL);
  stk_tokens_close(t);
}

/* Document windows: each inside one document, padded, masked; every
 * label of every document of two tokens or more is covered once per epoch. */
TEST(tokens_document_windows) {
  enum { N = 40, SEQ = 10 };
  int32_t *lens = lengths(N, 35, 9);
  write_corpus("c", 4, N, lens);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = SEQ;
  o.windows = STK_WINDOWS_DOCUMENT;
  o.pad_token = -7;
  o.no_index_file = 1;
  struct stk_tokens *t = open_ok("c", &o);
  uint64_t nwin = stk_tokens_num_windows(t), want = 0;
  for (int d = 0; d < N; d++) want += lens[d] > 1 ? (uint64_t)(lens[d] - 1 + SEQ - 1) / SEQ : 0;
  CHECK_EQ(nwin, want);
  /* labels[d][i]: times token i of d was a label (i >= 1). */
  int *lab = calloc(N * 1000, sizeof *lab);
  char err[STK_ERRMSG_MAX];
  for (uint64_t k = 0; k < nwin; k++) {
    int32_t row[SEQ + 1], cu[SEQ + 2];
    uint8_t mask[SEQ + 1];
    uint32_t ncu;
    CHECK_OK(stk_tokens_window(t, k, row, mask, cu, &ncu, err));
    CHECK_EQ(ncu, 2);
    int n = cu[1];
    CHECK(n >= 2 && n <= SEQ + 1);
    int d = row[0] / 1000;
    for (int j = 0; j < SEQ + 1; j++) {
      CHECK_EQ(mask[j], j < n);
      if (j >= n) {
        CHECK_EQ(row[j], -7);
        continue;
      }
      CHECK_EQ(row[j] / 1000, d);
      CHECK_EQ(row[j], row[0] + j);
      if (j >= 1) lab[d * 1000 + row[j] % 1000]++;
    }
  }
  for (int d = 0; d < N; d++)
    for (int i = 1; i < lens[d]; i++) CHECK_MSG(lab[d * 1000 + i] == 1, "doc %d token %d", d, i);
  free(lab);
  stk_tokens_close(t);
  free(lens);
}

/* Packing: every token of every document once per epoch, documents whole
 * unless longer than what is left, cu_seqlens the pieces' ends; through
 * the loader's batch arrays. */
TEST(tokens_pack_every_token_once) {
  enum { N = 50, SEQ = 24 };
  int32_t *lens = lengths(N, 60, 13); /* some longer than a window */
  write_corpus("c", 4, N, lens);
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.seq_len = SEQ;
  o.windows = STK_WINDOWS_PACK;
  o.no_index_file = 1;
  struct stk_tokens *t = open_ok("c", &o);
  uint64_t nwin = stk_tokens_num_windows(t), total = 0;
  for (int d = 0; d < N; d++) total += (uint64_t)lens[d];
  CHECK(nwin >= (total + SEQ) / (SEQ + 1));
  int *hit = calloc(N * 1000, sizeof *hit);
  struct stk_loader *l = loader(t, 5, 0, 1, NULL);
  struct stk_batch *b;
  uint64_t rows = 0, real = 0;
  while (stk_loader_next(l, &b) == 0) {
    struct stk_token_batch tb;
    CHECK_OK(stk_batch_tokens(l, b, &tb));
    for (uint32_t i = 0; i < tb.rows; i++) {
      const int32_t *row = (const int32_t *)tb.tokens + i * tb.cols;
      const int32_t *cu = tb.cu_seqlens + i * tb.cu_stride;
      int32_t ncu = tb.cu_count[i];
      CHECK(ncu >= 2);
      CHECK_EQ(cu[0], 0);
      for (int32_t q = 1; q < ncu; q++) {
        CHECK(cu[q] > cu[q - 1]);
        /* one piece: consecutive tokens of one document */
        for (int32_t j = cu[q - 1]; j < cu[q]; j++) {
          CHECK_EQ(row[j], row[cu[q - 1]] + (j - cu[q - 1]));
          hit[row[j] / 1000 * 1000 + row[j] % 1000]++;
        }
      }
      for (uint32_t j = 0; j < tb.cols; j++)
        CHECK_EQ(tb.loss_mask[i * tb.cols + j], (int)j < cu[ncu - 1]);
      real += (uint64_t)cu[ncu - 1];
      rows++;
    }
    stk_batch_release(l, b);
  }
  stk_loader_close(l);
  CHECK_EQ(rows, nwin);
  CHECK_EQ(real, total);
  for (int d = 0; d < N; d++)
    for (int i = 0; i < lens[d]; i++) CHECK_MSG(hit[d * 1000 + i] == 1, "doc %d token %d", d, i);
  free(hit);
  stk_tokens_close(t);
  free(lens);
}

static void refused(int n, const char *const *paths, const double *w,
                    const struct stk_tokens_opts *o, int code, const char *needle) {
  struct stk_tokens *t = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_tokens_open(&t, n, paths, w, o, err);
  CHECK_MSG(rc == code, "%s: rc %d (%s), want %d", needle, rc, err, code);
  CHECK_CONTAINS(err, needle);
  CHECK(!strchr(err, '\n'));
  CHECK(t == NULL);
}

TEST(tokens_bad_inputs_refused) {
  int32_t lens[] = {5, 6, 7, 8};
  write_corpus("c", 4, 4, lens);
  mkdir("plain", 0755);
  test_write_file("plain/x.bin", "abcdefgh", 8);
  const char *one[] = {"c"}, *two[] = {"c", "c"}, *plain[] = {"plain"};
  struct stk_tokens_opts o;
  stk_tokens_opts_init(&o);
  o.no_index_file = 1;
  refused(1, one, NULL, &o, STK_EINVAL, "seq_len must be at least 1");
  o.seq_len = 4;
  o.split = "969;30";
  refused(1, one, NULL, &o, STK_EINVAL, "split '969;30' does not parse");
  o.split = "1,2,3,4";
  refused(1, one, NULL, &o, STK_EINVAL, "does not parse");
  o.split = "0,0";
  refused(1, one, NULL, &o, STK_EINVAL, "does not parse");
  o.split = "98,1,1";
  o.split_index = 2;
  refused(1, one, NULL, &o, STK_EEMPTY, "leaves part 2 empty");
  o.split = NULL;
  o.split_index = 0;
  double w0[] = {1, 0}, wn[] = {1, -2};
  o.samples = 10;
  refused(2, two, w0, &o, STK_EINVAL, "blend weight 0 of dataset 2 must be a positive number");
  refused(2, two, wn, &o, STK_EINVAL, "must be a positive number");
  o.samples = 0;
  double w1[] = {1, 1};
  refused(2, two, w1, &o, STK_EINVAL, "needs the number of windows");
  refused(1, plain, NULL, &o, STK_EFORMAT, "not Megatron's indexed dataset");
  o.windows = 9;
  refused(1, one, NULL, &o, STK_EINVAL, "windows: 9");
}

/* An int64 corpus into int32 batches: a token that does not fit is refused
 * naming the document and token (it was truncated without a word); int64
 * batches serve it whole. */
TEST(tokens_int64_token_past_int32_refused) {
  enum { N = 20 };
  int32_t *lens = lengths(N, 30, 5);
  write_corpus("w", 5, N, lens);
  int fd = open("w.bin", O_WRONLY);
  CHECK(fd >= 0);
  uint8_t big[8];
  for (int i = 0; i < 8; i++) big[i] = (uint8_t)((1ull << 40) >> (8 * i));
  CHECK_EQ(pwrite(fd, big, 8, 0), 8); /* document 0's first token */
  close(fd);
  for (int type = STK_TOKENS_INT32; type <= STK_TOKENS_INT64; type++) {
    struct stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.seq_len = 8;
    o.no_index_file = 1;
    o.token_type = type;
    struct stk_tokens *t = open_ok("w", &o);
    int64_t row[16];
    char err[STK_ERRMSG_MAX] = "";
    int refused = 0, seen = 0;
    for (uint64_t k = 0; k < stk_tokens_num_windows(t); k++) {
      err[0] = 0;
      int rc = stk_tokens_window(t, k, row, NULL, NULL, NULL, err);
      if (rc) {
        CHECK_EQ(rc, STK_ERANGE);
        CHECK_CONTAINS(err, "w: document 0, token 0 is 1099511627776, which does not fit int32");
        refused++;
      } else if (type == STK_TOKENS_INT64) {
        for (int j = 0; j < 9; j++) seen += row[j] == (int64_t)1 << 40;
      }
    }
    if (type == STK_TOKENS_INT32) CHECK_EQ(refused, 1);
    else CHECK(refused == 0 && seen == 1);
    stk_tokens_close(t);
  }
  free(lens);
}
