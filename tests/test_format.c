/* Tests of src/format and src/gen: write -> read round trips for every
 * format, random access, checksums, bad input (truncation, wrong magic,
 * absurd lengths, empty datasets), .idx handling, npz members, ImageFolder
 * labels and generator determinism. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/base/json_parse.h"
#include "../src/format/format_impl.h"
#include "stoker/gen.h"
#include "stoker/loader.h" /* one test decodes what the npz parser framed */
#include "test.h"

/* Payload of sample i: deterministic bytes of a varying length. */
static size_t payload(uint64_t i, uint8_t *buf, size_t cap) {
  size_t n = 1 + (size_t)((i * 7919u) % 3000);
  if (n > cap) n = cap;
  for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)(i * 31 + k * 7);
  return n;
}

/* Write n samples of one field (name) with labels i % 5 when labels. */
static void write_ds(const char *fmt, const char *dir, uint64_t n, const char *field,
                     int labels, uint64_t per_shard) {
  struct stk_writer *w;
  struct stk_writer_opts o = {.format = fmt, .dir = dir, .samples_per_shard = per_shard,
                              .write_index = 1};
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

static struct stk_dataset *open_ds(const char *path, const char *fmt) {
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = fmt};
  int rc = stk_dataset_open(&ds, path, &o, err);
  CHECK_MSG(rc == 0, "open %s: %s (%s)", path, err, stk_err_name(rc));
  return ds;
}

static int open_err(const char *path, const char *fmt, char *err) {
  struct stk_dataset *ds;
  struct stk_dataset_opts o = {.format = fmt};
  int rc = stk_dataset_open(&ds, path, &o, err);
  if (rc == 0) stk_dataset_close(ds);
  return rc;
}

static const struct stk_field *field(const struct stk_sample *s, const char *name) {
  for (int i = 0; i < s->nfields; i++)
    if (!strcmp(s->fields[i].name, name)) return &s->fields[i];
  return NULL;
}

/* The number write_ds gave a sample, from its key "sNNNNN" where the
 * format keeps keys (and may reorder samples, as ImageFolder does). */
static uint64_t key_id(const struct stk_sample *s, uint64_t i) {
  const char *b = strrchr(s->key, '/') ? strrchr(s->key, '/') + 1 : s->key;
  return b[0] == 's' && b[1] >= '0' && b[1] <= '9' ? strtoull(b + 1, NULL, 10) : i;
}

/* Read every sample (in a scrambled order) and compare with payload(). */
static int unwrap_npy; /* npy/npz writers wrap raw fields as uint8 arrays */

static void check_ds(struct stk_dataset *ds, uint64_t n, const char *fname, int labels) {
  CHECK_EQ(stk_dataset_num_samples(ds), n);
  uint8_t *buf = NULL, want[4096];
  size_t cap = 0;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t i = (k * 37) % n; /* n is not a multiple of 37 in these tests */
    struct stk_sample s;
    int rc = stk_dataset_read(ds, i, 1, &buf, &cap, &s);
    CHECK_MSG(rc == 0, "read %llu: %s", (unsigned long long)i, stk_dataset_errmsg(ds));
    CHECK_EQ(s.index, i);
    const struct stk_field *f = field(&s, fname);
    CHECK_MSG(f, "sample %llu lacks field %s (first is %s)", (unsigned long long)i, fname,
              s.nfields ? s.fields[0].name : "none");
    uint64_t id = key_id(&s, i), doff;
    size_t len = payload(id, want, sizeof want);
    const uint8_t *data = f->data;
    uint64_t flen = f->len;
    const char *why;
    if (unwrap_npy && stk__npy_check(data, flen, &doff, &why) == 0) data += doff, flen -= doff;
    CHECK_EQ(flen, len);
    CHECK(memcmp(data, want, len) == 0);
    if (labels) CHECK_EQ(s.label, (int32_t)(id % 5));
  }
  free(buf);
}

TEST(format_table) {
  const char *name, *desc;
  unsigned caps;
  int n = 0;
  while (stk_format_info(n, &name, &caps, &desc) == 0) {
    CHECK(stk__format_find(name) == stk_formats[n]);
    CHECK(caps & STK_FMT_WRITE);
    n++;
  }
  CHECK_EQ(n, 8); /* tfrecord wds npy npz mds megatron files npy-tokens */
  CHECK(stk__format_find("nope") == NULL);
}

TEST(format_tfrecord_roundtrip) {
  write_ds("tfrecord", "d", 101, "data", 0, 30);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "tfrecord");
  CHECK_EQ(stk_dataset_num_shards(ds), 4);
  check_ds(ds, 101, "data", 0);
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 3, &si));
  CHECK_EQ(si.first, 90);
  CHECK_EQ(si.count, 11);
  stk_dataset_close(ds);
  CHECK(access("d/shard-00000.tfrecord.idx", F_OK) == 0);
}

TEST(format_tfrecord_example_labels) {
  write_ds("tfrecord", "d", 53, "jpg", 1, 0);
  struct stk_dataset *ds = open_ds("d", NULL);
  check_ds(ds, 53, "jpg", 1);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 3, 1, &buf, &cap, &s));
  CHECK_STR(s.fields[0].name, "jpg");
  CHECK_STR(s.fields[s.nfields - 1].name, "data");
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_files_roundtrip_labels) {
  write_ds("files", "d", 47, "jpg", 1, 0);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "files");
  CHECK_EQ(stk_dataset_num_shards(ds), 47);
  check_ds(ds, 47, "jpg", 1);
  stk_dataset_close(ds);
}

TEST(format_empty_dataset) {
  char err[STK_ERRMSG_MAX];
  mkdir("e", 0755);
  CHECK_EQ(open_err("e", NULL, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "e");
  CHECK_EQ(open_err("e", "tfrecord", err), STK_EEMPTY);
  CHECK_CONTAINS(err, "no tfrecord shards");
  test_write_file("e/a.tfrecord", "", 0);
  CHECK_EQ(open_err("e", NULL, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "no samples");
  CHECK_EQ(open_err("missing", NULL, err), STK_ENOENT);
  CHECK_CONTAINS(err, "missing");
}

TEST(format_wds_roundtrip) {
  write_ds("wds", "d", 77, "jpg", 1, 20);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "wds");
  CHECK_EQ(stk_dataset_num_shards(ds), 4);
  check_ds(ds, 77, "jpg", 1);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 5, 1, &buf, &cap, &s));
  CHECK_STR(s.key, "s00005");
  CHECK_EQ(s.nfields, 2);
  CHECK(field(&s, "cls") != NULL);
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_npy_roundtrip) {
  unwrap_npy = 1;
  write_ds("npy", "d", 23, "data", 0, 0);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "npy");
  CHECK_EQ(stk_dataset_num_shards(ds), 23);
  check_ds(ds, 23, "npy", 0);
  stk_dataset_close(ds);
}

TEST(format_npz_roundtrip) {
  unwrap_npy = 1;
  write_ds("npz", "d", 19, "x", 1, 0);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "npz");
  check_ds(ds, 19, "x", 0);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 7, 1, &buf, &cap, &s));
  CHECK_EQ(s.label, 7 % 5);
  CHECK(field(&s, "label") != NULL);
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_mds_roundtrip) {
  write_ds("mds", "d", 61, "jpg", 1, 25);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "mds");
  CHECK_EQ(stk_dataset_num_shards(ds), 3);
  check_ds(ds, 61, "jpg", 1);
  stk_dataset_close(ds);
  ds = open_ds("d/index.json", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 61);
  stk_dataset_close(ds);
}

/* Offset of record i in a single-shard TFRecord written by write_ds. */
static uint64_t tfr_offset(uint64_t i) {
  uint8_t tmp[4096];
  uint64_t off = 0;
  for (uint64_t k = 0; k < i; k++) off += 16 + payload(k, tmp, sizeof tmp);
  return off;
}

static void flip_byte(const char *path, uint64_t off) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  uint8_t b;
  CHECK(pread(fd, &b, 1, (off_t)off) == 1);
  b ^= 0x5a;
  CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
  close(fd);
}

TEST(format_tfrecord_crc_mismatch_names_file_and_offset) {
  write_ds("tfrecord", "d", 10, "data", 0, 0);
  uint64_t off = tfr_offset(3);
  flip_byte("d/shard-00000.tfrecord", off + 12 + 1);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 2, 1, &buf, &cap, &s));
  CHECK_EQ(stk_dataset_read(ds, 3, 1, &buf, &cap, &s), STK_ECRC);
  char want[64];
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/shard-00000.tfrecord");
  CHECK_CONTAINS(stk_dataset_errmsg(ds), want);
  CHECK_OK(stk_dataset_read(ds, 3, 0, &buf, &cap, &s)); /* verify off: bytes as stored */
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_tfrecord_truncated) {
  write_ds("tfrecord", "d", 10, "data", 0, 0);
  unlink("d/shard-00000.tfrecord.idx");
  uint64_t off = tfr_offset(9);
  CHECK_OK(truncate("d/shard-00000.tfrecord", (off_t)(off + 20)));
  char err[STK_ERRMSG_MAX], want[64];
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
  CHECK_CONTAINS(err, "shard-00000.tfrecord");
  CHECK_CONTAINS(err, want);
  CHECK_OK(truncate("d/shard-00000.tfrecord", (off_t)(off + 5))); /* inside the header */
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, want);
}

TEST(format_tfrecord_shorter_than_idx) {
  write_ds("tfrecord", "d", 10, "data", 0, 0);
  char err[STK_ERRMSG_MAX], want[64];
  /* Cut at a record boundary: every remaining record is whole, so only the
   * .idx can tell that three are missing. */
  uint64_t off = tfr_offset(7);
  CHECK_OK(truncate("d/shard-00000.tfrecord", (off_t)off));
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  snprintf(want, sizeof want, "offset %llu", (unsigned long long)off);
  CHECK_CONTAINS(err, "d/shard-00000.tfrecord");
  CHECK_CONTAINS(err, want);
  CHECK_CONTAINS(err, "7 of the 10 records");
  /* Inside a record, and empty. */
  CHECK_OK(truncate("d/shard-00000.tfrecord", (off_t)(off - 3)));
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "6 of the 10 records");
  CHECK_OK(truncate("d/shard-00000.tfrecord", 0));
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "0 of the 10 records");
  /* Without the .idx a boundary cut is a valid, shorter shard. */
  write_ds("tfrecord", "e", 10, "data", 0, 0);
  CHECK_OK(truncate("e/shard-00000.tfrecord", (off_t)off));
  unlink("e/shard-00000.tfrecord.idx");
  struct stk_dataset *ds = open_ds("e", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 7);
  stk_dataset_close(ds);
}

/* An .idx from another file (its first header disagrees) is stale, not a
 * sign of truncation: the shard is scanned. */
TEST(format_tfrecord_stale_longer_idx_scanned) {
  write_ds("tfrecord", "d", 10, "data", 0, 0);
  write_ds("tfrecord", "e", 4, "data", 0, 0);
  /* e's records differ in length from d's after the first: rebuild e's
   * shard from records 1.. of a fresh write so its first header differs. */
  write_ds("tfrecord", "f", 12, "data", 0, 0);
  uint8_t *all;
  size_t len;
  all = test_read_file("f/shard-00000.tfrecord", &len);
  uint64_t o1 = tfr_offset(1), o5 = tfr_offset(5);
  test_write_file("e/shard-00000.tfrecord", all + o1, (size_t)(o5 - o1));
  free(all);
  uint8_t *idx = test_read_file("d/shard-00000.tfrecord.idx", &len);
  test_write_file("e/shard-00000.tfrecord.idx", idx, len);
  free(idx);
  struct stk_dataset *ds = open_ds("e", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 4);
  stk_dataset_close(ds);
}

TEST(format_tfrecord_absurd_length_and_wrong_magic) {
  uint8_t rec[32] = {0};
  stk__st64(rec, 1ull << 60);
  stk__st32(rec + 8, stk_crc32c_mask(stk_crc32c(0, rec, 8)));
  mkdir("d", 0755);
  test_write_file("d/a.tfrecord", rec, sizeof rec);
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "d/a.tfrecord: offset 0");
  test_write_file("d/a.tfrecord", "this is not a tfrecord file at all", 34);
  CHECK_EQ(open_err("d", NULL, err), STK_ECRC);
  CHECK_CONTAINS(err, "not a TFRecord");
  /* A stale .idx claiming a huge record falls back to the scan. */
  test_write_file("d/a.tfrecord.idx", "0 1152921504606846976\n", 22);
  CHECK_EQ(open_err("d", NULL, err), STK_ECRC);
}

TEST(format_tfrecord_idx_used_and_stale_idx_ignored) {
  write_ds("tfrecord", "d", 10, "data", 0, 0);
  /* Break record 4's length checksum: a scan stops there, the .idx does not. */
  uint64_t off = tfr_offset(4);
  flip_byte("d/shard-00000.tfrecord", off + 9);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 10);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_EQ(stk_dataset_read(ds, 4, 1, &buf, &cap, &s), STK_ECRC);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "length checksum");
  stk_dataset_close(ds);
  flip_byte("d/shard-00000.tfrecord", off + 9);
  /* Append a record: the .idx no longer tiles the file, so it is scanned. */
  uint8_t rec[20];
  stk__st64(rec, 4);
  stk__st32(rec + 8, stk_crc32c_mask(stk_crc32c(0, rec, 8)));
  memcpy(rec + 12, "abcd", 4);
  stk__st32(rec + 16, stk_crc32c_mask(stk_crc32c(0, rec + 12, 4)));
  FILE *f = fopen("d/shard-00000.tfrecord", "ab");
  CHECK(f && fwrite(rec, 1, sizeof rec, f) == sizeof rec);
  fclose(f);
  ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 11);
  CHECK_OK(stk_dataset_read(ds, 10, 1, &buf, &cap, &s));
  CHECK_EQ(s.fields[0].len, 4);
  CHECK(!memcmp(s.fields[0].data, "abcd", 4));
  /* Garbage .idx: also ignored. */
  stk_dataset_close(ds);
  test_write_file("d/shard-00000.tfrecord.idx", "12 x\nfoo\n", 9);
  ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 11);
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_wds_bad_checksum_and_truncation) {
  write_ds("wds", "d", 6, "jpg", 0, 0);
  size_t len;
  uint8_t *tar = test_read_file("d/shard-00000.tar", &len);
  free(tar);
  flip_byte("d/shard-00000.tar", 512 * 2 + 20); /* name of the second member's header */
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(open_err("d", NULL, err), STK_ECRC);
  CHECK_CONTAINS(err, "shard-00000.tar: offset 1024: tar header checksum");
  flip_byte("d/shard-00000.tar", 512 * 2 + 20);
  CHECK_OK(truncate("d/shard-00000.tar", (off_t)(len - 1024 - 700)));
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "shard-00000.tar: offset");
}

TEST(format_wds_long_names_and_grouping) {
  struct stk_writer *w;
  struct stk_writer_opts o = {.format = "wds", .dir = "d"};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_writer_open(&w, &o, err));
  struct stk_sample s = {0};
  s.label = -1;
  char key[128];
  memset(key, 'k', 120);
  strcpy(key + 120, "/x.y");
  snprintf(s.key, sizeof s.key, "%s", key);
  stk__sample_add(&s, "seg.png", 7, (const uint8_t *)"PNG", 3);
  stk__sample_add(&s, "txt", 3, (const uint8_t *)"hello", 5);
  CHECK_OK(stk_writer_add(w, &s));
  s.key[0] = 'j';
  CHECK_OK(stk_writer_add(w, &s));
  CHECK_OK(stk_writer_close(w));
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 2);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample r;
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &r));
  CHECK_EQ(r.nfields, 2);
  CHECK_STR(r.fields[0].name, "seg.png");
  CHECK_EQ(r.fields[1].len, 5);
  CHECK_EQ(r.key[0], 'j');
  CHECK_CONTAINS(r.key, "/x_y"); /* dots in a key's last component would split it */
  free(buf);
  stk_dataset_close(ds);
}

/* Python's tarfile writes pax headers for long and non-ASCII names. */
TEST(format_wds_reads_python_pax_tar) {
  if (access("/usr/bin/python3", X_OK) != 0) SKIP("no /usr/bin/python3");
  char *out;
  int rc = test_sh(&out,
                   "/usr/bin/python3 -c \"import tarfile,io\n"
                   "t=tarfile.open('p.tar','w',format=tarfile.PAX_FORMAT)\n"
                   "for k in ['a/' + 'x'*150 + '/s1', 'a/s2']:\n"
                   "  for e,d in [('jpg',b'J'*700),('cls',b'3')]:\n"
                   "    i=tarfile.TarInfo(k+'.'+e); i.size=len(d); t.addfile(i,io.BytesIO(d))\n"
                   "i=tarfile.TarInfo('dir'); i.type=tarfile.DIRTYPE; t.addfile(i)\n"
                   "t.close()\"");
  CHECK_MSG(rc == 0, "python: %s", out);
  free(out);
  struct stk_dataset *ds = open_ds("p.tar", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 2);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample r;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &buf, &cap, &r));
  CHECK_EQ(r.nfields, 2);
  CHECK_EQ(r.label, 3);
  CHECK_EQ(r.fields[0].len, 700);
  CHECK_CONTAINS(r.key, "xxxxxxxxxx");
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &r));
  CHECK_STR(r.key, "a/s2");
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_npy_bad_input) {
  mkdir("d", 0755);
  char err[STK_ERRMSG_MAX];
  test_write_file("d/a.npy", "\x93NUMPX\x01\x00\x10\x00{}", 12);
  CHECK_EQ(open_err("d", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "d/a.npy: offset 0: not a .npy file");
  uint8_t h[256];
  uint64_t shape[2] = {1000, 1000};
  size_t hl = stk__npy_header(h, sizeof h, "<f8", shape, 2);
  test_write_file("d/a.npy", h, hl);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_EQ(stk_dataset_read(ds, 0, 1, &buf, &cap, &s), STK_ETRUNC);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "array data is truncated");
  stk_dataset_close(ds);
  shape[0] = 1ull << 40;
  shape[1] = 1ull << 40;
  hl = stk__npy_header(h, sizeof h, "<f8", shape, 2);
  test_write_file("d/a.npy", h, hl);
  ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_read(ds, 0, 1, &buf, &cap, &s), STK_EFORMAT);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "absurd");
  free(buf);
  stk_dataset_close(ds);
  memcpy(h + 6, "\x01\x00\xff\xff", 4); /* header length past the end */
  test_write_file("d/a.npy", h, hl);
  CHECK_EQ(open_err("d", NULL, err), STK_ETRUNC);
}

/* A zip with a stored "x.npy" and a deflated "y.npy", built by hand. */
static size_t make_npz(uint8_t *out, const uint8_t *x, size_t xl, const uint8_t *y, size_t yl) {
  uint8_t dfl[8192];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  zs.next_in = (Bytef *)(uintptr_t)y;
  zs.avail_in = (uInt)yl;
  zs.next_out = dfl;
  zs.avail_out = sizeof dfl;
  CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  size_t dl = zs.total_out;
  deflateEnd(&zs);
  const char *names[2] = {"x.npy", "y.npy"};
  const uint8_t *data[2] = {x, dfl};
  size_t sz[2] = {xl, dl}, usz[2] = {xl, yl}, lho[2];
  uint32_t crc[2] = {(uint32_t)crc32(0, x, (uInt)xl), (uint32_t)crc32(0, y, (uInt)yl)};
  size_t o = 0;
  for (int i = 0; i < 2; i++) {
    lho[i] = o;
    memset(out + o, 0, 30);
    stk__st32(out + o, 0x04034b50u);
    stk__st16(out + o + 8, i ? 8 : 0);
    stk__st32(out + o + 14, crc[i]);
    stk__st32(out + o + 18, (uint32_t)sz[i]);
    stk__st32(out + o + 22, (uint32_t)usz[i]);
    stk__st16(out + o + 26, 5);
    memcpy(out + o + 30, names[i], 5);
    memcpy(out + o + 35, data[i], sz[i]);
    o += 35 + sz[i];
  }
  size_t cd = o;
  for (int i = 0; i < 2; i++) {
    memset(out + o, 0, 46);
    stk__st32(out + o, 0x02014b50u);
    stk__st16(out + o + 10, i ? 8 : 0);
    stk__st32(out + o + 16, crc[i]);
    stk__st32(out + o + 20, (uint32_t)sz[i]);
    stk__st32(out + o + 24, (uint32_t)usz[i]);
    stk__st16(out + o + 28, 5);
    stk__st32(out + o + 42, (uint32_t)lho[i]);
    memcpy(out + o + 46, names[i], 5);
    o += 51;
  }
  memset(out + o, 0, 22);
  stk__st32(out + o, 0x06054b50u);
  stk__st16(out + o + 8, 2);
  stk__st16(out + o + 10, 2);
  stk__st32(out + o + 12, (uint32_t)(o - cd));
  stk__st32(out + o + 16, (uint32_t)cd);
  return o + 22;
}

TEST(format_npz_deflated_member) {
  uint8_t x[300], y[2000], zip[16384];
  uint64_t xs = 300 - 128, ys = 2000 - 128;
  size_t hl = stk__npy_header(x, sizeof x, "|u1", &xs, 1);
  CHECK_EQ(hl, 128);
  memset(x + hl, 7, (size_t)xs);
  stk__npy_header(y, sizeof y, "|u1", &ys, 1);
  for (size_t i = hl; i < sizeof y; i++) y[i] = (uint8_t)(i % 13);
  size_t n = make_npz(zip, x, sizeof x, y, sizeof y);
  mkdir("d", 0755);
  test_write_file("d/a.npz", zip, n);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &buf, &cap, &s));
  CHECK_EQ(s.nfields, 2);
  CHECK_STR(s.fields[0].name, "x");
  CHECK_EQ(s.fields[0].encoding, STK_ENC_NONE);
  CHECK(!memcmp(s.fields[0].data, x, sizeof x));
  CHECK_STR(s.fields[1].name, "y");
  CHECK_EQ(s.fields[1].encoding, STK_ENC_DEFLATE);
  CHECK_EQ(s.fields[1].raw_len, sizeof y);
  CHECK(s.fields[1].len < sizeof y);
  CHECK_STR(s.key, "a");
  stk_dataset_close(ds);
  /* Corrupt the deflated data (just after its local header) and the stored one. */
  flip_byte("d/a.npz", 35 + sizeof x + 35 + 3);
  ds = open_ds("d", NULL);
  int rc = stk_dataset_read(ds, 0, 1, &buf, &cap, &s);
  CHECK_MSG(rc == STK_ECRC || rc == STK_EFORMAT, "rc %d", rc);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/a.npz: offset 335");
  CHECK_OK(stk_dataset_read(ds, 0, 0, &buf, &cap, &s));
  stk_dataset_close(ds);
  flip_byte("d/a.npz", 35 + sizeof x + 35 + 3);
  flip_byte("d/a.npz", 35 + 200);
  ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_read(ds, 0, 1, &buf, &cap, &s), STK_ECRC);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/a.npz: offset 0: zip member CRC32 mismatch");
  free(buf);
  stk_dataset_close(ds);
  char err[STK_ERRMSG_MAX];
  test_write_file("d/a.npz", zip, n - 10);
  CHECK_EQ(open_err("d", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "d/a.npz");
}

/* np.savez / savez_compressed files read back, and ours load in NumPy. */
TEST(format_npz_numpy_interop) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0) SKIP("no NumPy");
  char *out;
  int rc = test_sh(&out, "mkdir -p d && /usr/bin/python3 -c \"import numpy as np\n"
                         "np.savez('d/a.npz', x=np.arange(1000,dtype=np.uint8), y=np.array([3]))\n"
                         "np.savez_compressed('d/b.npz', x=np.zeros((64,64),np.float32), y=np.array([4]))\"");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &buf, &cap, &s));
  CHECK_EQ(s.label, 3);
  CHECK_EQ(s.fields[0].encoding, STK_ENC_NONE);
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &s));
  CHECK_EQ(s.fields[0].encoding, STK_ENC_DEFLATE);
  CHECK_EQ(s.label, 4); /* y is deflated (savez_compressed): read all the same */
  free(buf);
  stk_dataset_close(ds);
  write_ds("npz", "o", 3, "x", 1, 0);
  rc = test_sh(&out, "/usr/bin/python3 -c \"import numpy as np\n"
                     "z=np.load('o/shard-00000002.npz'); print(sorted(z.files), z['label'][0], z['x'].shape)\"");
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_CONTAINS(out, "['label', 'x'] 2");
  free(out);
}

/* Gather a field into a fresh buffer (strided fields element by element). */
static uint8_t *field_bytes(const struct stk_field *f, uint64_t *n) {
  if (f->encoding != STK_ENC_STRIDED) {
    *n = f->len;
    uint8_t *p = malloc(f->len);
    memcpy(p, f->data, f->len);
    return p;
  }
  *n = f->raw_len;
  uint8_t *p = malloc(f->raw_len);
  for (uint64_t k = 0; k < f->raw_len / f->elem; k++)
    memcpy(p + k * f->elem, f->data + k * f->stride, f->elem);
  return p;
}

/* DLIO's npz layout as NumPy writes it (np.savez(path, x=records, y=labels),
 * samples along x's last axis): each file holds its samples, sample i is
 * x[..., i] (C and Fortran order, 1- and 4-byte elements) with label y[i];
 * a single-sample file and savez_compressed labels are read too. */
TEST(format_npz_dlio_layout_numpy) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test installs python3-numpy)");
  char *out;
  int rc = test_sh(&out, "mkdir -p d b && /usr/bin/python3 -c \"import numpy as np\n"
                         "r=np.random.default_rng(7)\n"
                         "xs=[r.integers(0,255,size=(5,7,3),dtype=np.uint8),\n"
                         "    r.random((4,3,2,4),dtype=np.float32),\n"
                         "    np.asfortranarray(r.integers(0,255,size=(6,5,2),dtype=np.uint8)),\n"
                         "    r.integers(0,255,size=(9,9,1),dtype=np.uint8)]\n"
                         "k=0\n"
                         "for f,x in enumerate(xs):\n"
                         "  y=[100*f+i for i in range(x.shape[-1])]\n"
                         "  np.savez('d/f%%d.npz'%%f, x=x, y=y)\n"
                         "  for i in range(x.shape[-1]):\n"
                         "    open('b/%%d.bin'%%k,'wb').write(x[...,i].tobytes(order='A')); k+=1\n"
                         "np.savez_compressed('d/f4.npz', x=np.zeros((8,8,1),np.uint8), y=np.array([42]))\"");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 3 + 4 + 2 + 1 + 1);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  int32_t want[] = {0, 1, 2, 100, 101, 102, 103, 200, 201};
  for (uint64_t i = 0; i < 9; i++) {
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    CHECK_EQ(s.label, want[i]);
    CHECK_EQ(s.nfields, 1);
    CHECK_STR(s.fields[0].name, "x");
    char path[64];
    snprintf(path, sizeof path, "b/%llu.bin", (unsigned long long)i);
    size_t wl;
    uint8_t *w = test_read_file(path, &wl), *got;
    uint64_t gl;
    got = field_bytes(&s.fields[0], &gl);
    CHECK_EQ(gl, wl);
    CHECK_MSG(!memcmp(got, w, wl), "sample %llu differs from numpy's x[..., i]", (unsigned long long)i);
    free(got);
    free(w);
  }
  /* Fortran order: contiguous, but array data without a .npy header of its
   * own, so a one-element strided field (the npy decoder's business). */
  CHECK_EQ(s.fields[0].encoding, STK_ENC_STRIDED);
  CHECK_EQ(s.fields[0].elem, s.fields[0].raw_len);
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &s));
  CHECK_EQ(s.fields[0].encoding, STK_ENC_STRIDED);
  CHECK_OK(stk_dataset_read(ds, 9, 1, &buf, &cap, &s)); /* one sample: x and y as fields */
  CHECK_EQ(s.label, 300);
  CHECK_OK(stk_dataset_read(ds, 10, 1, &buf, &cap, &s)); /* savez_compressed's y */
  CHECK_EQ(s.label, 42);
  /* A damaged byte of x is caught when its sample is read. */
  free(buf);
  stk_dataset_close(ds);
}

/* DLIO's npz layout written by the stdlib (no NumPy needed): a .npy
 * header and the array bytes in each member. */
static void write_dlio_npz(const char *path, const char *x_hdr, const char *x_py, const char *y_hdr,
                           const char *y_py) {
  char *out = NULL;
  int rc = test_sh(&out,
                   "/usr/bin/python3 -c \"import struct, zipfile\n"
                   "def npy(h, data):\n"
                   "  h += ' ' * (63 - (10 + len(h)) %% 64) + '\\n'\n"
                   "  return b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h.encode() + data\n"
                   "with zipfile.ZipFile('%s', 'w') as z:\n"
                   "  z.writestr('x.npy', npy(\\\"%s\\\", %s))\n"
                   "  z.writestr('y.npy', npy(\\\"%s\\\", %s))\"",
                   path, x_hdr, x_py, y_hdr, y_py);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
}

/* DLIO npz labels are int64: a value outside what a label carries (0 to
 * 2^31-1, -1 for none) fails the open naming it, where it used to become
 * -1 without a word; a Fortran-order x decodes with decode npy (it failed
 * with "no \x93NUMPY magic": the sample is array data, not a .npy file)
 * (issue 18, section 6). */
TEST(format_npz_dlio_labels_range_and_fortran_npy) {
  mkdir("big", 0755);
  mkdir("neg", 0755);
  mkdir("ok", 0755);
  mkdir("fort", 0755);
  const char *x = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";
  write_dlio_npz("big/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 1, 2**32, 3)");
  write_dlio_npz("neg/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 1, -5, 3)");
  write_dlio_npz("ok/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 7, -1, 2**31-1)");
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(open_err("big", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "big/a.npz: offset ");
  CHECK_CONTAINS(err, "y[1]: label 4294967296 is outside the labels stoker carries (0 to 2^31-1, or -1 for none)");
  CHECK_EQ(open_err("neg", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "y[1]: label -5 is outside");
  struct stk_dataset *ds = open_ds("ok", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  int32_t want[] = {7, -1, INT32_MAX};
  for (uint64_t i = 0; i < 3; i++) {
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    CHECK_EQ(s.label, want[i]);
  }
  free(buf);
  stk_dataset_close(ds);
  /* x of shape (2, 2, 3) in Fortran order: x[..., i] is bytes 4i..4i+3. */
  write_dlio_npz("fort/a.npz", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2, 3), }",
                 "bytes(range(12))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 0, 1, 2)");
  ds = open_ds("fort", NULL);
  for (int kind = STK_DECODE_RAW; kind <= STK_DECODE_NPY; kind += STK_DECODE_NPY - STK_DECODE_RAW) {
    struct stk_loader_opts o = {.batch_size = 3, .threads = 1};
    o.decode.kind = kind;
    struct stk_loader *l = NULL;
    CHECK_OK(stk_loader_open(&l, ds, &o, err));
    struct stk_batch *b;
    int rc = stk_loader_next(l, &b);
    CHECK_MSG(rc == 0, "decode %d: %s", kind, stk_loader_errmsg(l));
    CHECK_EQ(b->n, 3);
    for (uint32_t i = 0; i < 3; i++) {
      uint64_t id = b->indices[i];
      CHECK_EQ(b->len[i], 4);
      for (int k = 0; k < 4; k++) CHECK_EQ(b->data[b->offsets[i] + k], 4 * id + k);
      CHECK_EQ(b->labels[i], (int32_t)id);
    }
    stk_batch_release(l, b);
    stk_loader_close(l);
  }
  stk_dataset_close(ds);
}

TEST(format_mds_bad_input) {
  char err[STK_ERRMSG_MAX];
  mkdir("d", 0755);
  test_write_file("d/index.json", "{\"shards\": [", 12);
  CHECK_EQ(open_err("d", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "d/index.json: JSON:");
  const char *br = /* zstd is read: test_mds.c */
      "{\"shards\": [{\"column_encodings\": [\"bytes\"], \"column_names\": [\"x\"], "
      "\"column_sizes\": [null], \"compression\": \"br:7\", \"format\": \"mds\", "
      "\"raw_data\": {\"basename\": \"shard.00000.mds\", \"bytes\": 10, \"hashes\": {}}, "
      "\"samples\": 1, \"zip_data\": {\"basename\": \"shard.00000.mds.br\", \"bytes\": 9}}], "
      "\"version\": 2}";
  test_write_file("d/index.json", br, strlen(br));
  CHECK_EQ(open_err("d", NULL, err), STK_ENOTSUP);
  CHECK_CONTAINS(err, "shard.00000.mds.br");
  CHECK_CONTAINS(err, "MDS compression 'br:7' is not supported");
  write_ds("mds", "m", 5, "jpg", 0, 0);
  CHECK_OK(truncate("m/shard.00000.mds", 100));
  CHECK_EQ(open_err("m", NULL, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "m/shard.00000.mds");
}

TEST(format_files_imagefolder_labels) {
  mkdir("d", 0755);
  mkdir("d/cat", 0755);
  mkdir("d/dog", 0755);
  mkdir("d/dog/sub", 0755);
  mkdir("d/ant", 0755);
  test_write_file("d/top.jpg", "T", 1);
  test_write_file("d/cat/1.jpg", "C1", 2);
  test_write_file("d/dog/2.png", "D2", 2);
  test_write_file("d/dog/sub/3", "D3", 2);
  test_write_file("d/ant/.hidden", "H", 1);
  test_write_file("d/ant/a.JPEG", "A", 1);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "files");
  CHECK_EQ(stk_dataset_num_samples(ds), 5);
  const char *keys[5] = {"ant/a", "cat/1", "dog/2", "dog/sub/3", "top"};
  const char *fields[5] = {"JPEG", "jpg", "png", "data", "jpg"};
  int labels[5] = {0, 1, 2, 2, -1};
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int i = 0; i < 5; i++) {
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, (uint64_t)i, 1, &buf, &cap, &s));
    CHECK_STR(s.key, keys[i]);
    CHECK_STR(s.fields[0].name, fields[i]);
    CHECK_EQ(s.label, labels[i]);
    uint64_t b;
    CHECK_OK(stk_dataset_sample_bytes(ds, (uint64_t)i, &b));
    CHECK_EQ(b, s.fields[0].len);
  }
  CHECK(stk_dataset_caps(ds) & STK_FMT_RANDOM_ACCESS);
  free(buf);
  stk_dataset_close(ds);
  ds = open_ds("d", NULL);
  unlink("d/cat/1.jpg");
  struct stk_sample s;
  CHECK_EQ(stk_dataset_read(ds, 1, 1, &buf, &cap, &s), STK_ENOENT);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/cat/1.jpg");
  stk_dataset_close(ds);
}

TEST(format_writer_abort_removes_output) {
  struct stk_writer *w;
  struct stk_writer_opts o = {.format = "files", .dir = "out/nested"};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_writer_open(&w, &o, err));
  struct stk_sample s = {0};
  s.label = 2;
  stk__sample_add(&s, "jpg", 3, (const uint8_t *)"x", 1);
  for (int i = 0; i < 5; i++) CHECK_OK(stk_writer_add(w, &s));
  stk_writer_abort(w);
  CHECK(access("out", F_OK) != 0);
  o.format = "npy";
  o.dir = ".";
  CHECK_OK(stk_writer_open(&w, &o, err));
  CHECK_OK(stk_writer_add(w, &s));
  stk_writer_abort(w);
  CHECK(access("shard-00000000.npy", F_OK) != 0);
  o.format = "bogus";
  CHECK_EQ(stk_writer_open(&w, &o, err), STK_EINVAL);
  CHECK_CONTAINS(err, "bogus");
}

static void gen_into(const char *dir, const char *fmt, uint64_t seed, int jpeg) {
  struct stk_gen_opts g = {.dir = dir, .format = fmt, .samples = 40, .size_mean = 3000,
                           .size_stdev = 1000, .classes = 7, .samples_per_shard = 16,
                           .seed = seed};
  if (jpeg) g.jpeg_min_w = 32, g.jpeg_min_h = 24, g.jpeg_max_w = 80, g.jpeg_max_h = 64;
  char err[STK_ERRMSG_MAX];
  int rc = stk_gen(&g, NULL, NULL, err);
  CHECK_MSG(rc == 0, "gen %s: %s", fmt, err);
}

/* Records of every size class the writer treats differently (copied into
 * its buffer, written from the sample by reference, past the buffer's
 * size), through stk_writer_add and stk__writer_add_batch with CRC hints:
 * shards rotate by size, the .idx files tile their shards, and every
 * record reads back with its checksum. */
TEST(format_writer_record_sizes_and_batches) {
  static const size_t sizes[] = {100, 20000, 1500000, 5, 1200000, 70000, 3000000, 16384, 1};
  enum { N = sizeof sizes / sizeof sizes[0] };
  struct stk_writer *w;
  struct stk_writer_opts o = {.format = "tfrecord", .dir = "d", .shard_bytes = 3u << 20,
                              .write_index = 1};
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_writer_open(&w, &o, err) == 0, "%s", err);
  uint8_t *data[N];
  struct stk_sample s[N];
  uint32_t crc[N];
  uint64_t total = 0;
  for (int i = 0; i < N; i++) {
    CHECK((data[i] = malloc(sizes[i])) != NULL);
    for (size_t k = 0; k < sizes[i]; k++) data[i][k] = (uint8_t)(k * 13 + (size_t)i);
    memset(&s[i], 0, sizeof s[i]);
    s[i].index = (uint64_t)i;
    s[i].label = -1;
    stk__sample_add(&s[i], "data", 4, data[i], sizes[i]);
    crc[i] = stk_crc32c(0, data[i], sizes[i]);
    total += sizes[i] + 16;
  }
  CHECK_OK(stk_writer_add(w, &s[0]));
  CHECK_OK(stk__writer_add_batch(w, &s[1], &crc[1], 4));
  CHECK_OK(stk__writer_add_batch(w, &s[5], NULL, N - 5));
  CHECK(stk_writer_bytes(w) >= total); /* the first shard's .idx is counted too */
  CHECK_MSG(stk_writer_close(w) == 0, "close: %s", stk_writer_errmsg(NULL));
  for (int i = 0; i < N; i++) free(data[i]);
  /* A shard takes a sample while its payload bytes stay within 3 MiB. */
  const int per_shard[] = {6, 3};
  int first = 0;
  for (int sh = 0; sh < 2; sh++) {
    char path[64];
    snprintf(path, sizeof path, "d/shard-%05d.tfrecord.idx", sh);
    size_t il;
    char *idx = (char *)test_read_file(path, &il);
    CHECK_MSG(idx, "%s missing", path);
    unsigned long long off, len, want = 0;
    int lines = 0, used;
    for (char *p = idx; p < idx + il && sscanf(p, "%llu %llu\n%n", &off, &len, &used) == 2;
         p += used, lines++) {
      CHECK_EQ(off, want);
      CHECK_EQ(len, sizes[first + lines] + 16);
      want += len;
    }
    CHECK_EQ(lines, per_shard[sh]);
    struct stat st;
    snprintf(path, sizeof path, "d/shard-%05d.tfrecord", sh);
    CHECK(stat(path, &st) == 0 && (unsigned long long)st.st_size == want);
    free(idx);
    first += lines;
  }
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_shards(ds), 2);
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int i = 0; i < N; i++) {
    struct stk_sample r;
    CHECK_MSG(stk_dataset_read(ds, (uint64_t)i, 1, &buf, &cap, &r) == 0, "%s",
              stk_dataset_errmsg(ds));
    CHECK_EQ(r.fields[0].len, sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++)
      if (r.fields[0].data[k] != (uint8_t)(k * 13 + (size_t)i)) CHECK_MSG(0, "sample %d byte %zu", i, k);
  }
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_gen_deterministic) {
  const char *fmts[] = {"tfrecord", "wds", "npy", "npz", "mds", "files"};
  for (int i = 0; i < 6; i++) {
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "a_%s", fmts[i]);
    snprintf(b, sizeof b, "b_%s", fmts[i]);
    snprintf(c, sizeof c, "c_%s", fmts[i]);
    gen_into(a, fmts[i], 5, i == 1);
    gen_into(b, fmts[i], 5, i == 1);
    gen_into(c, fmts[i], 6, i == 1);
    CHECK_MSG(test_sh(NULL, "diff -r %s %s", a, b) == 0, "%s differs for one seed", fmts[i]);
    CHECK_MSG(test_sh(NULL, "diff -rq %s %s >/dev/null", a, c) != 0, "%s same for two seeds",
              fmts[i]);
    /* npy keeps labels in class folders: detected as npy all the same. */
    struct stk_dataset *ds = open_ds(a, NULL);
    CHECK_STR(stk_dataset_format(ds), fmts[i]);
    CHECK_EQ(stk_dataset_num_samples(ds), 40);
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (uint64_t k = 0; k < 40; k++) {
      struct stk_sample s;
      CHECK_MSG(stk_dataset_read(ds, k, 1, &buf, &cap, &s) == 0, "%s", stk_dataset_errmsg(ds));
      CHECK_MSG(s.label >= 0 && s.label < 7, "%s label %d", fmts[i], s.label);
    }
    free(buf);
    stk_dataset_close(ds);
  }
  char err[STK_ERRMSG_MAX];
  struct stk_gen_opts g = {.dir = "a_wds", .format = "wds", .samples = 3};
  CHECK_EQ(stk_gen(&g, NULL, NULL, err), STK_EEXIST);
  CHECK_CONTAINS(err, "--force");
  g.force = 1;
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  struct stk_dataset *ds = open_ds("a_wds", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 3);
  stk_dataset_close(ds);
}

/* Labels of gen --classes are the same sample for sample in npy (class
 * folders), npz (DLIO's y) and TFRecord: each sample draws its own. */
TEST(format_gen_labels_npy_npz) {
  struct stk_gen_opts g = {.dir = "t", .format = "tfrecord", .samples = 30, .size_mean = 500,
                           .classes = 4, .seed = 9};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  g.dir = "n", g.format = "npy";
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  g.dir = "z", g.format = "npz", g.samples_per_shard = 8;
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  struct stk_dataset *t = open_ds("t", NULL), *n = open_ds("n", "npy"), *z = open_ds("z", NULL),
                     *f = open_ds("n", NULL);
  CHECK_EQ(stk_dataset_num_samples(n), 30);
  CHECK_EQ(stk_dataset_num_samples(z), 30);
  uint8_t *buf = NULL;
  size_t cap = 0;
  int32_t want[30];
  int classes_seen = 0;
  for (uint64_t k = 0; k < 30; k++) {
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(t, k, 1, &buf, &cap, &s));
    want[k] = s.label;
    classes_seen |= 1 << s.label;
    CHECK_OK(stk_dataset_read(z, k, 1, &buf, &cap, &s));
    CHECK_EQ(s.label, want[k]);
  }
  CHECK(classes_seen > 1);
  for (uint64_t k = 0; k < 30; k++) {
    struct stk_sample s;
    for (int d = 0; d < 2; d++) { /* as npy, and as plain files */
      CHECK_OK(stk_dataset_read(d ? f : n, k, 1, &buf, &cap, &s));
      const char *num = strrchr(s.key, '-');
      CHECK(num != NULL);
      uint64_t id = strtoull(num + 1, NULL, 10);
      CHECK(id < 30);
      CHECK_EQ(s.label, want[id]);
    }
  }
  free(buf);
  stk_dataset_close(t);
  stk_dataset_close(n);
  stk_dataset_close(z);
  stk_dataset_close(f);
}

/* gen writes DLIO's npz layout, which NumPy loads as DLIO does: x of shape
 * (H, W, N) holding N samples along its last axis, y their int64 labels;
 * stoker reads sample i as x[..., i]. */
TEST(format_gen_npz_dlio_layout_numpy) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test installs python3-numpy)");
  struct stk_gen_opts g = {.dir = "z", .format = "npz", .samples = 10, .size_mean = 700,
                           .classes = 5, .samples_per_shard = 4, .seed = 2};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  char *out;
  int rc = test_sh(&out, "mkdir -p b && /usr/bin/python3 -c \"import numpy as np, glob\n"
                         "k=0\n"
                         "for p in sorted(glob.glob('z/*.npz')):\n"
                         "  z=np.load(p); x=z['x']; y=z['y']\n"
                         "  assert x.dtype==np.uint8 and x.ndim==3 and y.dtype==np.int64 and y.shape==(x.shape[2],)\n"
                         "  for i in range(x.shape[2]):\n"
                         "    open('b/%%d.bin'%%k,'wb').write(x[...,i].tobytes()); open('b/%%d.y'%%k,'w').write(str(y[i])); k+=1\n"
                         "print(k, 'samples')\"");
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_CONTAINS(out, "10 samples");
  free(out);
  struct stk_dataset *ds = open_ds("z", NULL);
  CHECK_EQ(stk_dataset_num_shards(ds), 3);
  CHECK_EQ(stk_dataset_num_samples(ds), 10);
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (uint64_t i = 0; i < 10; i++) {
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    char p[64];
    size_t wl, yl;
    snprintf(p, sizeof p, "b/%llu.bin", (unsigned long long)i);
    uint8_t *w = test_read_file(p, &wl);
    snprintf(p, sizeof p, "b/%llu.y", (unsigned long long)i);
    char *y = (char *)test_read_file(p, &yl);
    uint64_t gl;
    uint8_t *got = field_bytes(&s.fields[0], &gl);
    CHECK_EQ(gl, wl);
    CHECK(!memcmp(got, w, wl));
    CHECK_EQ(s.label, atoi(y));
    free(got);
    free(w);
    free(y);
  }
  free(buf);
  stk_dataset_close(ds);
}

TEST(format_detect_by_content_and_single_file) {
  write_ds("tfrecord", "d", 5, "data", 0, 0);
  CHECK_OK(rename("d/shard-00000.tfrecord", "d/train-00000-of-00001"));
  unlink("d/shard-00000.tfrecord.idx");
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_STR(stk_dataset_format(ds), "tfrecord");
  stk_dataset_close(ds);
  ds = open_ds("d/train-00000-of-00001", NULL);
  CHECK_STR(stk_dataset_format(ds), "tfrecord");
  CHECK_EQ(stk_dataset_num_samples(ds), 5);
  stk_dataset_close(ds);
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(open_err("d", "parquet", err), STK_EINVAL);
  CHECK_CONTAINS(err, "unknown format 'parquet'");
}

TEST(format_json_parse) {
  struct stk__jdoc *d;
  char err[STK_ERRMSG_MAX];
  const char *ok = " {\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}, "
                   "\"n\": 18446744073709551615, \"a\": 7} ";
  CHECK_OK(stk__json_parse(&d, ok, strlen(ok), err));
  const struct stk__jnode *r = stk__json_root(d);
  uint64_t v;
  CHECK_OK(stk__json_u64(r, "a", &v)); /* the last duplicate wins */
  CHECK_EQ(v, 7);
  CHECK(stk__json_u64(r, "n", &v) != 0); /* does not fit an int64 */
  const struct stk__jnode *a = r->child;
  CHECK_EQ(a->len, 5);
  CHECK(stk__json_at(a, 1)->num == -2500.0);
  CHECK_STR(stk__json_at(a, 4)->str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(stk__json_at(a, 5) == NULL);
  stk__json_free(d);
  const char *bad[] = {"", "{", "[1,]", "{\"a\" 1}", "\"\\x\"", "01", "1 2", "\"\x01\"",
                       "\"\\ud800\"", "tru", "[1e]", "{\"a\":[}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_MSG(stk__json_parse(&d, bad[i], strlen(bad[i]), err) == STK_EFORMAT, "accepted %s",
              bad[i]);
  char deep[200];
  memset(deep, '[', sizeof deep);
  CHECK_EQ(stk__json_parse(&d, deep, sizeof deep, err), STK_ERANGE);
  CHECK_CONTAINS(err, "too deep");
}
