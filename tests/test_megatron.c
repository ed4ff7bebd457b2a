/* Tests of the Megatron indexed-dataset format (src/format/megatron.c):
 * pairs written byte by byte by an independent writer here, for every
 * dtype, read back sequence by sequence; every bad header and bad entry
 * refused with the file and offset named; prefixes, .bin/.idx paths and
 * folders of pairs; NumPy-written indexes as Megatron writes them; and the
 * gen -> inspect -> verify -> feed round trip through the CLI. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/dataset/dataset_impl.h"
#include "../src/format/format_impl.h"
#include "stoker/cache.h"
#include "stoker/gen.h"
#include "test.h"
#include "test_tokens.h"

/* ---- an independent writer: the layout of docs/formats.md, by hand ---- */




static const struct {
  int code, size;
  const char *name;
} dtypes[] = {{1, 1, "uint8"},   {2, 1, "int8"},    {3, 2, "int16"},   {4, 4, "int32"},
              {5, 8, "int64"},   {6, 8, "float64"}, {7, 4, "float32"}, {8, 2, "uint16"}};

/* Token k of sequence s, as size bytes. */
static uint64_t token(int s, int k) { return (uint64_t)(s * 1000 + k * 7 + 1); }

/* PREFIX.bin and PREFIX.idx: nseq sequences of lens[i] tokens of dtype
 * code (item size), documents by doc[0..ndoc). */
static void write_pair(const char *prefix, int code, int size, int nseq, const int32_t *lens,
                       int ndoc, const int64_t *doc) {
  test_megatron_write_docs(prefix, code, size, nseq, lens, token, ndoc, doc);
}

static const int32_t LENS[] = {3, 0, 5, 1, 4};
static const int64_t DOCS[] = {0, 2, 2, 5}; /* 3 documents: [0,2) [2,2) [2,5) */
#define NSEQ 5
#define NDOC 4

static struct stk_dataset *open_ok(const char *path, const char *fmt) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = fmt, .index_threads = 2};
  int rc = stk_dataset_open(&ds, path, &o, err);
  CHECK_MSG(rc == 0, "open %s: %s", path, err);
  return ds;
}

static const char *prop(struct stk_dataset *ds, const char *want, char *buf, size_t n) {
  const char *name;
  for (int i = 0; stk_dataset_property(ds, i, &name, buf, n) == 0; i++)
    if (!strcmp(name, want)) return buf;
  return NULL;
}

/* Every sequence of a pair written with the given dtype, byte for byte. */
static void check_pair(struct stk_dataset *ds, int size, uint64_t first_seq) {
  uint8_t *b = NULL;
  size_t cap = 0;
  for (int s = 0; s < NSEQ; s++) {
    struct stk_sample smp;
    CHECK_OK(stk_dataset_read(ds, first_seq + (uint64_t)s, 1, &b, &cap, &smp));
    CHECK_EQ(smp.nfields, 1);
    CHECK_STR(smp.fields[0].name, "tokens");
    CHECK_EQ(smp.fields[0].len, (uint64_t)LENS[s] * (uint64_t)size);
    CHECK_EQ(smp.fields[0].elem, size);
    CHECK_EQ(smp.label, -1);
    struct test_buf want = {0};
    for (int k = 0; k < LENS[s]; k++) test_buf_le(&want, token(s, k), size);
    CHECK_MSG(!LENS[s] || !memcmp(smp.fields[0].data, want.p, want.n),
              "sequence %d differs (item size %d)", s, size);
    free(want.p);
  }
  free(b);
}

TEST(megatron_read_every_dtype) {
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    char prefix[64], v[64];
    snprintf(prefix, sizeof prefix, "c%d", dtypes[d].code);
    write_pair(prefix, dtypes[d].code, dtypes[d].size, NSEQ, LENS, NDOC, DOCS);
    struct stk_dataset *ds = open_ok(prefix, NULL); /* detected from the prefix */
    CHECK_STR(stk_dataset_format(ds), "megatron");
    CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
    CHECK_EQ(stk_dataset_num_shards(ds), 1);
    CHECK_STR(prop(ds, "dtype", v, sizeof v), dtypes[d].name);
    CHECK_EQ(atoi(prop(ds, "token_bytes", v, sizeof v)), dtypes[d].size);
    CHECK_EQ(atoi(prop(ds, "tokens", v, sizeof v)), 13);
    CHECK_EQ(atoi(prop(ds, "sequences", v, sizeof v)), NSEQ);
    CHECK_EQ(atoi(prop(ds, "documents", v, sizeof v)), NDOC - 1);
    check_pair(ds, dtypes[d].size, 0);
    uint64_t bytes;
    CHECK_OK(stk_dataset_sample_bytes(ds, 2, &bytes));
    CHECK_EQ(bytes, 5 * dtypes[d].size);
    /* The mapped index the token samplers read. */
    const struct stk__megatron_shard *m = stk__megatron_shard(ds, 0);
    CHECK(m != NULL);
    CHECK_EQ(m->dtype->code, dtypes[d].code);
    CHECK_EQ(m->documents, 3);
    CHECK_EQ((int64_t)stk__ld64(m->doc_index + 8), 2);
    CHECK_EQ((int32_t)stk__ld32(m->lengths + 8), 5);
    CHECK_EQ(stk__ld64(m->pointers + 16), 3 * dtypes[d].size);
    stk_dataset_close(ds);
  }
}

TEST(megatron_open_by_prefix_bin_idx_and_folder) {
  CHECK(mkdir("d", 0777) == 0);
  write_pair("d/a", 8, 2, NSEQ, LENS, NDOC, DOCS);
  static const char *paths[] = {"d/a", "d/a.bin", "d/a.idx", "d", "d/"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    struct stk_dataset *ds = open_ok(paths[i], NULL);
    CHECK_STR(stk_dataset_format(ds), "megatron");
    CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
    struct stk_shard_info si;
    CHECK_OK(stk_dataset_shard_info(ds, 0, &si));
    CHECK_CONTAINS(si.path, "a.bin");
    CHECK_EQ(si.bytes, 13 * 2);
    check_pair(ds, 2, 0);
    stk_dataset_close(ds);
  }
  /* Named with --format as well. */
  struct stk_dataset *ds = open_ok("d/a", "megatron");
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
  stk_dataset_close(ds);
}

TEST(megatron_folder_of_two_pairs) {
  CHECK(mkdir("d", 0777) == 0);
  write_pair("d/p1", 4, 4, NSEQ, LENS, NDOC, DOCS);
  int32_t l2[] = {2, 6};
  int64_t d2[] = {0, 1, 2};
  write_pair("d/p2", 4, 4, 2, l2, 3, d2);
  struct stk_dataset *ds = open_ok("d", NULL);
  CHECK_EQ(stk_dataset_num_shards(ds), 2);
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ + 2);
  char v[64];
  CHECK_EQ(atoi(prop(ds, "tokens", v, sizeof v)), 13 + 8);
  CHECK_EQ(atoi(prop(ds, "documents", v, sizeof v)), 3 + 2);
  check_pair(ds, 4, 0);
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 1, &si));
  CHECK_CONTAINS(si.path, "p2.bin");
  CHECK_EQ(si.first, NSEQ);
  CHECK_EQ(si.count, 2);
  uint8_t *b = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, NSEQ + 1, 1, &b, &cap, &s));
  CHECK_EQ(s.fields[0].len, 24);
  CHECK_EQ(stk__ld32(s.fields[0].data + 4), token(1, 1)); /* p2's sequence 1, token 1 */
  free(b);
  stk_dataset_close(ds);
  /* A pattern naming the .bin files reads the same pairs. */
  ds = open_ok("d/p{1,2}.bin", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ + 2);
  stk_dataset_close(ds);

  /* Half a pair is an error naming it, never a smaller corpus. */
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = "megatron"};
  CHECK(unlink("d/p2.idx") == 0);
  CHECK(stk_dataset_open(&ds, "d", &o, err) != 0);
  CHECK_CONTAINS(err, "d/p2.bin");
  CHECK_CONTAINS(err, "p2.idx is missing");
  /* Shards of two dtypes: no one meaning for the tokens. */
  write_pair("d/p2", 8, 2, 2, l2, 3, d2);
  CHECK(stk_dataset_open(&ds, "d", &o, err) != 0);
  CHECK_CONTAINS(err, ".idx: offset 17: dtype");
  CHECK_CONTAINS(err, "another shard");
}

TEST(megatron_folder_of_bin_files_without_idx_is_plain_files) {
  CHECK(mkdir("b", 0777) == 0);
  test_write_file("b/0.bin", "abc", 3);
  test_write_file("b/1.bin", "de", 2);
  struct stk_dataset *ds = open_ok("b", NULL);
  CHECK_STR(stk_dataset_format(ds), "files");
  CHECK_EQ(stk_dataset_num_samples(ds), 2);
  stk_dataset_close(ds);
  /* Asked for as megatron, the missing index is named. */
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = "megatron"};
  CHECK(stk_dataset_open(&ds, "b", &o, err) != 0);
  CHECK_CONTAINS(err, "b/0.bin: a Megatron .bin without its .idx");
  CHECK(stk_dataset_open(&ds, "nothing", &o, err) != 0);
  CHECK_CONTAINS(err, "nothing: not a Megatron dataset");
  CHECK_CONTAINS(err, "neither exists");
}

/* ---- corrupt and truncated pairs ------------------------------------------ */

/* Rewrite bytes of c.idx at off. */
static void patch(const char *file, long off, const void *p, size_t n) {
  int fd = open(file, O_WRONLY);
  CHECK(fd >= 0);
  CHECK(pwrite(fd, p, n, off) == (ssize_t)n);
  close(fd);
}

static void patch_le(const char *file, long off, uint64_t v, int bytes) {
  uint8_t t[8];
  for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
  patch(file, off, t, (size_t)bytes);
}

static void expect_refused(const char *what, const char *needle1, const char *needle2) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  int rc = stk_dataset_open(&ds, "c", NULL, err);
  if (rc == 0) {
    stk_dataset_close(ds);
    test_fail(__FILE__, __LINE__, "%s: opened", what);
  }
  if (!strstr(err, needle1) || (needle2 && !strstr(err, needle2)))
    test_fail(__FILE__, __LINE__, "%s: message lacks '%s'%s%s: %s", what, needle1,
              needle2 ? " or " : "", needle2 ? needle2 : "", err);
}

/* Offsets in c.idx for NSEQ sequences, NDOC document indices. */
#define OFF_LEN(i) (34 + 4 * (i))
#define OFF_PTR(i) (34 + 4 * NSEQ + 8 * (i))
#define OFF_DOC(i) (34 + 12 * NSEQ + 8 * (i))

static void fresh(void) { write_pair("c", 4, 4, NSEQ, LENS, NDOC, DOCS); }

TEST(megatron_bad_headers_refused) {
  fresh();
  patch("c.idx", 0, "MMIDIDY", 7);
  expect_refused("bad magic", "c.idx: offset 0: bad magic", NULL);
  fresh();
  patch_le("c.idx", 9, 2, 8);
  expect_refused("version 2", "c.idx: offset 9: unknown version 2", NULL);
  static const int bad_codes[] = {0, 9, 255};
  for (size_t i = 0; i < 3; i++) {
    fresh();
    patch_le("c.idx", 17, (uint64_t)bad_codes[i], 1);
    char want[64];
    snprintf(want, sizeof want, "c.idx: offset 17: unknown dtype code %d", bad_codes[i]);
    expect_refused("dtype", want, NULL);
  }
  fresh();
  patch_le("c.idx", 18, NSEQ + 1, 8); /* more sequences than the file holds */
  expect_refused("sequence count",
                 "c.idx: offset 18: 6 sequences and 4 document indices need 138 bytes, but the "
                 "file holds 126",
                 NULL);
  fresh();
  patch_le("c.idx", 18, UINT64_MAX / 2, 8);
  expect_refused("huge sequence count", "c.idx: offset 18:", "need over 2^64 bytes");
  fresh();
  patch_le("c.idx", 26, NDOC + 1, 8);
  expect_refused("document count", "c.idx: offset 18:", "5 document indices");
  fresh();
  patch_le("c.idx", 26, 0, 8);
  expect_refused("no document index", "c.idx: offset", "bytes after the document indices");
  /* Truncated: inside the header, inside an array, and an empty file. */
  static const off_t cuts[] = {20, OFF_DOC(2), 0};
  for (size_t i = 0; i < 3; i++) {
    fresh();
    CHECK(truncate("c.idx", cuts[i]) == 0);
    expect_refused("truncated .idx", "c.idx: offset", cuts[i] == OFF_DOC(2) ? "but the file holds" : "truncated header");
  }
  /* Bytes after the document indices that are not one mode per sequence. */
  fresh();
  int fd = open("c.idx", O_WRONLY | O_APPEND);
  CHECK(write(fd, "xyz", 3) == 3);
  close(fd);
  expect_refused("trailing bytes", "c.idx: offset 126: 3 bytes after the document indices", NULL);
  /* One mode byte per sequence (Megatron's multimodal datasets) is read. */
  fresh();
  fd = open("c.idx", O_WRONLY | O_APPEND);
  CHECK(write(fd, "\0\1\0\1\0", NSEQ) == NSEQ);
  close(fd);
  struct stk_dataset *ds = open_ok("c", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
  stk_dataset_close(ds);
}

TEST(megatron_bad_entries_refused) {
  fresh();
  patch_le("c.idx", OFF_LEN(3), (uint32_t)-4, 4);
  expect_refused("negative length", "c.idx: offset 46: sequence 3 has length -4", NULL);
  fresh();
  patch_le("c.idx", OFF_PTR(2), 4, 8); /* should be 12: 3 int32 tokens */
  expect_refused("pointer", "c.idx: offset 70: sequence 2 starts at byte 4 of the .bin, expected 12",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_PTR(0), 8, 8);
  expect_refused("first pointer", "sequence 0 starts at byte 8", "expected 0");
  fresh();
  patch_le("c.idx", OFF_LEN(4), 5, 4); /* one token more than the .bin holds */
  expect_refused("length past the .bin", "c.idx: offset 50: sequence 4 (5 tokens at byte 36) runs past the end of c.bin (52 bytes)",
                 NULL);
  fresh();
  CHECK(truncate("c.bin", 40) == 0);
  expect_refused("truncated .bin", "sequence 4 (4 tokens at byte 36) runs past the end of c.bin (40 bytes)",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_DOC(0), 1, 8);
  expect_refused("first document index", "c.idx: offset 94: document index 0 is 1 (the first must be 0",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_DOC(2), 1, 8); /* 0, 2, 1, 5 */
  expect_refused("decreasing", "c.idx: offset 110: document index 2 is 1 (they must not decrease",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_DOC(3), 4, 8);
  expect_refused("last document index", "document index 3 is 4 (the last must be the sequence count, 5)",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_DOC(1), 9, 8);
  expect_refused("document past the sequences", "document index 1 is 9 (past the sequence count",
                 NULL);
  fresh();
  patch_le("c.idx", OFF_DOC(1), UINT64_MAX, 8);
  expect_refused("negative document index", "document index 1 is -1", NULL);
  /* And the missing partner of a prefix. */
  fresh();
  CHECK(unlink("c.bin") == 0);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = "megatron"};
  CHECK(stk_dataset_open(&ds, "c", &o, err) != 0);
  CHECK_CONTAINS(err, "the .bin is missing");
}

static char logged[512];
static void keep_log(void *ctx, enum stk_log_level lvl, const char *msg) {
  (void)ctx;
  if (lvl == STK_LOG_WARN) snprintf(logged, sizeof logged, "%s", msg);
}

TEST(megatron_trailing_bin_bytes_are_read_with_a_warning) {
  fresh();
  int fd = open("c.bin", O_WRONLY | O_APPEND);
  CHECK(write(fd, "zz", 2) == 2);
  close(fd);
  stk_log_set_callback(keep_log, NULL);
  struct stk_dataset *ds = open_ok("c", NULL);
  stk_log_set_callback(NULL, NULL);
  CHECK_CONTAINS(logged, "c.bin: 2 bytes after the last sequence are not indexed by c.idx");
  check_pair(ds, 4, 0);
  stk_dataset_close(ds);
}

/* Through a cache (a file:// folder with a disk tier, as for any URL):
 * the .idx is fetched whole and checked at open, the .bin is read in
 * ranges through chunks, never staged whole; opening it whole says so.
 * (tests/test_remote_tokens.c serves windows and samples over http.) */
TEST(megatron_remote_idx_whole_bin_in_chunks) {
  CHECK(mkdir("ds", 0777) == 0);
  write_pair("ds/c", 4, 4, NSEQ, LENS, NDOC, DOCS);
  CHECK(mkdir("cache", 0777) == 0);
  struct stk_cache_opts co = {.dir = "cache", .chunk_bytes = 4096};
  struct stk_dataset_opts o = {.format = "megatron", .cache = &co};
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  char here[4096], url[4200];
  CHECK(getcwd(here, sizeof here));
  snprintf(url, sizeof url, "file://%s/ds", here);
  CHECK_OK(stk_dataset_open(&ds, url, &o, err));
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
  CHECK(stk__shard_chunked(ds, 0));
  int fd = -1;
  CHECK_EQ(stk__shard_open(ds, 0, 0, &fd, NULL, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "read in chunks");
  size_t n;
  uint8_t *bin = test_read_file("ds/c.bin", &n), got[64];
  CHECK(bin && n <= sizeof got && n > 8);
  CHECK_OK(stk__shard_read(ds, 0, 4, got, n - 4, NULL, err));
  CHECK(!memcmp(got, bin + 4, n - 4));
  CHECK_EQ(stk__shard_read(ds, 0, 4, got, n, NULL, err), STK_ERANGE);
  free(bin);
  stk_dataset_close(ds);
  /* A prefix URL (no folder there): tried as the prefix of c.bin + c.idx. */
  snprintf(url, sizeof url, "file://%s/ds/c", here);
  o.format = NULL;
  CHECK_OK(stk_dataset_open(&ds, url, &o, err));
  CHECK_EQ(stk_dataset_num_samples(ds), NSEQ);
  stk_dataset_close(ds);
}

/* ---- written by the format's writer, and by NumPy as Megatron does ---- */

TEST(megatron_writer_round_trip) {
  struct stk_writer *w;
  struct stk_writer_opts wo = {.format = "megatron", .dir = "out", .samples_per_shard = 3};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_writer_open(&w, &wo, err));
  CHECK_OK(stk__megatron_writer_dtype(w, "int32"));
  int32_t toks[40];
  for (int i = 0; i < 40; i++) toks[i] = i * 1000 - 7;
  for (int s = 0; s < 7; s++) {
    struct stk_sample smp = {0};
    smp.label = -1;
    stk__sample_add(&smp, "tokens", 6, (const uint8_t *)toks, (uint64_t)(s * 4));
    CHECK_OK(stk_writer_add(w, &smp));
  }
  /* 6 bytes are not a whole number of int32 tokens. */
  struct stk_sample bad = {0};
  stk__sample_add(&bad, "tokens", 6, (const uint8_t *)toks, 6);
  CHECK(stk_writer_add(w, &bad) != 0);
  CHECK_CONTAINS(stk_writer_errmsg(w), "not a whole number of int32 tokens");
  CHECK_OK(stk_writer_close(w));
  CHECK(access("out/shard-00000.idx", F_OK) == 0);
  CHECK(access("out/shard-00002.bin", F_OK) == 0);
  struct stk_dataset *ds = open_ok("out", NULL);
  CHECK_EQ(stk_dataset_num_shards(ds), 3);
  CHECK_EQ(stk_dataset_num_samples(ds), 7);
  uint8_t *b = NULL;
  size_t cap = 0;
  for (int s = 0; s < 7; s++) {
    struct stk_sample smp;
    CHECK_OK(stk_dataset_read(ds, (uint64_t)s, 1, &b, &cap, &smp));
    CHECK_EQ(smp.fields[0].len, s * 4);
    CHECK(!s || !memcmp(smp.fields[0].data, toks, (size_t)s * 4));
  }
  free(b);
  char v[64];
  CHECK_STR(prop(ds, "dtype", v, sizeof v), "int32");
  CHECK_EQ(atoi(prop(ds, "tokens", v, sizeof v)), 21);
  stk_dataset_close(ds);
}

TEST(megatron_numpy_written_index) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test "
         "installs python3-numpy)");
  /* What Megatron's _IndexWriter does: struct-packed header, then the
   * arrays as numpy writes them with tobytes(). Documents of one or two
   * sequences, int32 tokens. */
  char *out = NULL;
  int rc = test_sh(&out,
                   "/usr/bin/python3 -c \"import numpy as np, struct\n"
                   "rng = np.random.RandomState(7)\n"
                   "seqs = [rng.randint(0, 100000, size=rng.randint(0, 50)).astype(np.int32) for _ in range(300)]\n"
                   "docs = [0] + list(range(2, 301, 2))\n"
                   "open('np.bin', 'wb').write(b''.join(s.tobytes(order='C') for s in seqs))\n"
                   "lens = [len(s) for s in seqs]\n"
                   "ptr = np.concatenate([[0], np.cumsum(np.array(lens[:-1], dtype=np.int64) * 4)])\n"
                   "f = open('np.idx', 'wb')\n"
                   "f.write(b'MMIDIDX\\\\x00\\\\x00'); f.write(struct.pack('<Q', 1)); f.write(struct.pack('<B', 4))\n"
                   "f.write(struct.pack('<Q', len(seqs))); f.write(struct.pack('<Q', len(docs)))\n"
                   "f.write(np.array(lens, dtype=np.int32).tobytes(order='C'))\n"
                   "f.write(np.array(ptr, dtype=np.int64).tobytes(order='C'))\n"
                   "f.write(np.array(docs, dtype=np.int64).tobytes(order='C'))\n"
                   "f.close()\n"
                   "for i in (0, 1, 17, 299): open('seq%%d' %% i, 'wb').write(seqs[i].tobytes())\n"
                   "print(sum(lens), len(docs) - 1)\"");
  CHECK_MSG(rc == 0, "python: %s", out);
  unsigned long long tokens = 0, docs = 0;
  CHECK(sscanf(out, "%llu %llu", &tokens, &docs) == 2);
  free(out);
  struct stk_dataset *ds = open_ok("np", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 300);
  char v[64];
  CHECK_EQ(strtoull(prop(ds, "tokens", v, sizeof v), NULL, 10), tokens);
  CHECK_EQ(strtoull(prop(ds, "documents", v, sizeof v), NULL, 10), docs);
  CHECK_STR(prop(ds, "dtype", v, sizeof v), "int32");
  uint8_t *b = NULL;
  size_t cap = 0;
  static const int which[] = {0, 1, 17, 299};
  for (int i = 0; i < 4; i++) {
    char p[32];
    snprintf(p, sizeof p, "seq%d", which[i]);
    size_t n;
    uint8_t *want = test_read_file(p, &n);
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, (uint64_t)which[i], 1, &b, &cap, &s));
    CHECK_EQ(s.fields[0].len, n);
    CHECK_MSG(!n || !memcmp(s.fields[0].data, want, n), "sequence %d differs from numpy's",
              which[i]);
    free(want);
  }
  free(b);
  stk_dataset_close(ds);
}

/* ---- gen -> inspect -> verify -> feed ------------------------------------- */

TEST(megatron_gen_inspect_verify_feed) {
  const char *S = test_stoker_bin();
  char *out = NULL;
  int rc = test_sh(&out,
                   "%s gen g --format megatron --samples 500 --doc-len 300 --doc-len-stdev 200 "
                   "--doc-len-dist lognormal --samples-per-shard 200 --seed 3 -q && ls g",
                   S);
  CHECK_MSG(rc == 0, "gen: %s", out);
  CHECK_CONTAINS(out, "shard-00000.bin");
  CHECK_CONTAINS(out, "shard-00002.idx");
  free(out);
  rc = test_sh(&out, "%s inspect g --json", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "\"format\": \"megatron\"");
  CHECK_CONTAINS(out, "\"samples\": 500");
  CHECK_CONTAINS(out, "\"dtype\": \"uint16\"");
  CHECK_CONTAINS(out, "\"token_bytes\": 2");
  CHECK_CONTAINS(out, "\"documents\": 500");
  CHECK_CONTAINS(out, "\"name\": \"tokens\"");
  free(out);
  rc = test_sh(&out, "%s inspect g", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "dtype:    uint16");
  CHECK_CONTAINS(out, "sequences: 500");
  free(out);
  rc = test_sh(&out, "%s verify g", S);
  CHECK_MSG(rc == 0, "verify: %s", out);
  CHECK_CONTAINS(out, "ok: 500 samples in 3 shards");
  free(out);
  rc = test_sh(&out, "%s feed g --epochs 1 --json", S);
  CHECK_MSG(rc == 0, "feed: %s", out);
  CHECK_CONTAINS(out, "\"samples\": 500");
  free(out);
  /* Same seed, same bytes; a corrupted index is then refused by verify. */
  rc = test_sh(&out,
               "%s gen h --format megatron --samples 500 --doc-len 300 --doc-len-stdev 200 "
               "--doc-len-dist lognormal --samples-per-shard 200 --seed 3 -q && "
               "cmp g/shard-00001.bin h/shard-00001.bin && cmp g/shard-00001.idx h/shard-00001.idx",
               S);
  CHECK_MSG(rc == 0, "determinism: %s", out);
  free(out);
  patch_le("h/shard-00001.idx", 34 + 4 * 200 + 8 * 7, 3, 8);
  rc = test_sh(&out, "%s verify h", S);
  CHECK_MSG(rc != 0, "verify of a bad pointer passed: %s", out);
  CHECK_CONTAINS(out, "h/shard-00001.idx: offset 890: sequence 7 starts at byte 3");
  free(out);
}

TEST(megatron_gen_tokens_and_lengths) {
  struct stk_gen_stats st = {0};
  struct stk_gen_opts o = {.dir = "g", .format = "megatron", .samples = 2000, .seed = 9,
                           .doc_len_mean = 100, .doc_len_stdev = 30, .vocab = 70000,
                           .stats = &st};
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_gen(&o, NULL, NULL, err) == 0, "gen: %s", err);
  struct stk_dataset *ds = open_ok("g", NULL);
  char v[64];
  CHECK_STR(prop(ds, "dtype", v, sizeof v), "int32"); /* vocab >= 65500: Megatron's rule */
  uint64_t tokens = strtoull(prop(ds, "tokens", v, sizeof v), NULL, 10);
  CHECK_MSG(tokens > 2000 * 95 && tokens < 2000 * 105, "mean length off: %llu tokens",
            (unsigned long long)tokens);
  uint8_t *b = NULL;
  size_t cap = 0;
  int seen_high = 0;
  for (uint64_t i = 0; i < 2000; i++) {
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, i, 1, &b, &cap, &s));
    uint64_t n = s.fields[0].len / 4;
    CHECK(n >= 1);
    for (uint64_t k = 0; k + 1 < n; k++) {
      uint32_t t = stk__ld32(s.fields[0].data + 4 * k);
      CHECK_MSG(t < 69999, "token %u of document %llu is out of the vocabulary", t,
                (unsigned long long)i);
      seen_high |= t > 65535;
    }
    CHECK_EQ(stk__ld32(s.fields[0].data + 4 * (n - 1)), 69999); /* end of document */
  }
  CHECK(seen_high);
  free(b);
  stk_dataset_close(ds);
  /* Options that do not fit are refused with the reason. */
  struct stk_gen_opts bad = {.dir = "x", .format = "megatron", .samples = 1, .vocab = 300,
                             .dtype = "uint8"};
  CHECK_EQ(stk_gen(&bad, NULL, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "does not fit the dtype");
  bad.dtype = "float32";
  CHECK_EQ(stk_gen(&bad, NULL, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "--dtype 'float32'");
  struct stk_gen_opts bad2 = {.dir = "x", .format = "tfrecord", .samples = 1, .vocab = 300};
  CHECK_EQ(stk_gen(&bad2, NULL, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "for --format megatron");
}
