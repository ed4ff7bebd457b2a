/* Tests of src/format and src/gen: write -> read round trips for every
 * format, random access, checksums, bad input (truncation, wrong magic,
 * absurd lengths, empty datasets), .idx handling, ImageFolder labels and
 * generator determinism. npz members and DLIO's npz layout are in
 * test_format_npz.c. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/base/json_parse.h"
#include "../src/format/format_impl.h"
#include "stoker/gen.h"
#include "stoker/loader.h" /* one test decodes what the npz parser framed */
#include "test.h"
#include "test_format.h"

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
