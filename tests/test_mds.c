/* Tests of Mosaic MDS token columns and compressed shards
 * (src/format/mds.c): shards written byte by byte here, as streaming's
 * MDSWriter lays them out (docs/formats.md), with `ndarray` columns of
 * every dtype (fixed and per-value dtype and shape) and numeric scalars;
 * zstd shards compressed with libzstd here; every refusal names the shard
 * and the sample; the inspect / feed round trip through the CLI. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../src/format/format_impl.h"
#include "stoker/stoker.h"
#include "test.h"

/* ---- an independent writer -------------------------------------------- */




/* NumPy's dtypes with streaming's NDArray codes. */
static const struct {
  const char *name;
  int code, size, type;
} dts[] = {{"uint8", 8, 1, STK_ELEM_U8},      {"int8", 9, 1, STK_ELEM_I8},
           {"uint16", 16, 2, STK_ELEM_U16},   {"int16", 17, 2, STK_ELEM_I16},
           {"float16", 18, 2, STK_ELEM_F16},  {"uint32", 32, 4, STK_ELEM_U32},
           {"int32", 33, 4, STK_ELEM_I32},    {"float32", 34, 4, STK_ELEM_F32},
           {"uint64", 64, 8, STK_ELEM_U64},   {"int64", 65, 8, STK_ELEM_I64},
           {"float64", 66, 8, STK_ELEM_F64}};
#define NDT ((int)(sizeof dts / sizeof dts[0]))

#define MAXC 16
struct col {
  const char *name, *enc;
  int size; /* -1: variable */
};

/* One sample's column values, in column order. */
struct row {
  struct test_buf v[MAXC];
};

/* A raw shard: u32 count, u32 offsets[count + 1], the config, samples. */
static struct test_buf shard_bytes(const struct col *c, int nc, struct row *rows, int n) {
  struct test_buf data = {0}, out = {0};
  uint32_t *offs = calloc((size_t)n + 1, 4);
  for (int i = 0; i < n; i++) {
    offs[i] = (uint32_t)data.n;
    for (int k = 0; k < nc; k++)
      if (c[k].size < 0) test_buf_le(&data, rows[i].v[k].n, 4);
    for (int k = 0; k < nc; k++) test_buf_put(&data, rows[i].v[k].p, rows[i].v[k].n);
  }
  offs[n] = (uint32_t)data.n;
  const char *cfg = "{\"format\": \"mds\"}";
  uint64_t hdr = 4 + 4 * ((uint64_t)n + 1) + strlen(cfg);
  test_buf_le(&out, (uint64_t)n, 4);
  for (int i = 0; i <= n; i++) test_buf_le(&out, hdr + offs[i], 4);
  test_buf_put(&out, cfg, strlen(cfg));
  test_buf_put(&out, data.p, data.n);
  free(offs);
  free(data.p);
  return out;
}

/* index.json's entry for one shard; comp NULL: uncompressed. zbytes < 0:
 * no zip_data.bytes. */
static void index_entry(struct test_buf *ix, const struct col *c, int nc, int n, const char *base,
                        uint64_t raw, const char *comp, const char *zbase, long long zbytes) {
  char t[4096];
  size_t l = 0;
  l += (size_t)snprintf(t + l, sizeof t - l, "%s{\"column_encodings\": [", ix->n > 12 ? ", " : "");
  for (int k = 0; k < nc; k++) l += (size_t)snprintf(t + l, sizeof t - l, "%s\"%s\"", k ? ", " : "", c[k].enc);
  l += (size_t)snprintf(t + l, sizeof t - l, "], \"column_names\": [");
  for (int k = 0; k < nc; k++) l += (size_t)snprintf(t + l, sizeof t - l, "%s\"%s\"", k ? ", " : "", c[k].name);
  l += (size_t)snprintf(t + l, sizeof t - l, "], \"column_sizes\": [");
  for (int k = 0; k < nc; k++)
    l += c[k].size < 0 ? (size_t)snprintf(t + l, sizeof t - l, "%snull", k ? ", " : "")
                       : (size_t)snprintf(t + l, sizeof t - l, "%s%d", k ? ", " : "", c[k].size);
  l += (size_t)snprintf(t + l, sizeof t - l,
                        "], \"compression\": %s%s%s, \"format\": \"mds\", \"hashes\": [], "
                        "\"raw_data\": {\"basename\": \"%s\", \"bytes\": %llu, \"hashes\": {}}, "
                        "\"samples\": %d, \"size_limit\": 67108864, \"version\": 2, \"zip_data\": ",
                        comp ? "\"" : "", comp ? comp : "null", comp ? "\"" : "", base,
                        (unsigned long long)raw, n);
  if (!comp) l += (size_t)snprintf(t + l, sizeof t - l, "null}");
  else if (zbytes < 0)
    l += (size_t)snprintf(t + l, sizeof t - l, "{\"basename\": \"%s\", \"hashes\": {}}}", zbase);
  else
    l += (size_t)snprintf(t + l, sizeof t - l, "{\"basename\": \"%s\", \"bytes\": %lld, \"hashes\": {}}}",
                          zbase, zbytes);
  test_buf_put(ix, t, l);
}

/* Write dir/shard.00000.mds (or its .zstd with comp) and index.json. */
static void write_mds(const char *dir, const struct col *c, int nc, struct row *rows, int n,
                      const char *comp) {
  mkdir(dir, 0755);
  struct test_buf raw = shard_bytes(c, nc, rows, n), ix = {0};
  char p[512];
  test_buf_put(&ix, "{\"shards\": [", 12);
  if (comp && !strncmp(comp, "zstd", 4)) {
    size_t cap = ZSTD_compressBound(raw.n);
    uint8_t *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, raw.p, raw.n, 3);
    CHECK(!ZSTD_isError(zn));
    snprintf(p, sizeof p, "%s/shard.00000.mds.zstd", dir);
    test_write_file(p, z, zn);
    free(z);
    index_entry(&ix, c, nc, n, "shard.00000.mds", raw.n, comp, "shard.00000.mds.zstd",
                (long long)zn);
  } else if (comp) {
    snprintf(p, sizeof p, "%s/shard.00000.mds.%s", dir, comp);
    test_write_file(p, raw.p, raw.n);
    char zb[64];
    snprintf(zb, sizeof zb, "shard.00000.mds.%s", comp);
    index_entry(&ix, c, nc, n, "shard.00000.mds", raw.n, comp, zb, (long long)raw.n);
  } else {
    snprintf(p, sizeof p, "%s/shard.00000.mds", dir);
    test_write_file(p, raw.p, raw.n);
    index_entry(&ix, c, nc, n, "shard.00000.mds", raw.n, NULL, NULL, 0);
  }
  test_buf_put(&ix, "], \"version\": 2}", 16);
  snprintf(p, sizeof p, "%s/index.json", dir);
  test_write_file(p, ix.p, ix.n);
  free(ix.p);
  free(raw.p);
}

static void free_rows(struct row *rows, int n) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < MAXC; k++) free(rows[i].v[k].p);
  free(rows);
}

/* Element k of sample i in dtype d, as its little-endian bytes. */
static void put_elem(struct test_buf *b, int d, int i, int k) {
  uint64_t v = (uint64_t)(i * 31 + k * 7 + 1);
  if (dts[d].type == STK_ELEM_F32) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    test_buf_le(b, u, 4);
  } else if (dts[d].type == STK_ELEM_F64) {
    double f = (double)v;
    uint64_t u;
    memcpy(&u, &f, 8);
    test_buf_le(b, u, 8);
  } else if (dts[d].type == STK_ELEM_F16) {
    test_buf_le(b, 0x3c00 + (v & 0xff), 2); /* any bit pattern: stoker does not look */
  } else {
    test_buf_le(b, v, dts[d].size);
  }
}

/* An ndarray value: [dtype code] [ndim << 2 | 0, shape as u8] values. */
static void nd_value(struct test_buf *b, int d, int i, int with_dtype, int with_shape, int rows_,
                     int cols_) {
  if (with_dtype) test_buf_le(b, (uint64_t)dts[d].code, 1);
  if (with_shape) {
    int nd = rows_ > 0 ? 2 : 1;
    test_buf_le(b, (uint64_t)(nd << 2), 1);
    if (rows_ > 0) test_buf_le(b, (uint64_t)rows_, 1);
    test_buf_le(b, (uint64_t)cols_, 1);
  }
  for (int k = 0; k < (rows_ > 0 ? rows_ : 1) * cols_; k++) put_elem(b, d, i, k);
}

static struct stk_dataset *open_ok(const char *path) {
  struct stk_dataset *ds = NULL;
  char err[STK_ERRMSG_MAX];
  int rc = stk_dataset_open(&ds, path, NULL, err);
  CHECK_MSG(rc == 0, "open %s: %s", path, err);
  return ds;
}

static void open_fails(const char *path, char *err) {
  struct stk_dataset *ds = NULL;
  int rc = stk_dataset_open(&ds, path, NULL, err);
  CHECK_MSG(rc != 0, "open %s succeeded", path);
}

static const struct stk_field *field(const struct stk_sample *s, const char *name) {
  for (int i = 0; i < s->nfields; i++)
    if (!strcmp(s->fields[i].name, name)) return &s->fields[i];
  CHECK_MSG(0, "no field %s", name);
  return NULL;
}

/* ---- every dtype ------------------------------------------------------- */

/* Columns: "any" (ndarray: dtype and shape per value, cycling through every
 * dtype), d_DTYPE (ndarray:DTYPE, shape per value) for every dtype, a fixed
 * ndarray:int32:2,3, and an int scalar. */
static int every_dtype_ds(const char *dir, const char *comp, int n) {
  static char names[NDT][32], encs[NDT][32];
  struct col c[MAXC];
  int nc = 0;
  c[nc++] = (struct col){"any", "ndarray", -1};
  for (int d = 0; d < NDT && nc < MAXC - 2; d++) {
    snprintf(names[d], sizeof names[d], "d_%s", dts[d].name);
    snprintf(encs[d], sizeof encs[d], "ndarray:%s", dts[d].name);
    c[nc++] = (struct col){names[d], encs[d], -1};
  }
  c[nc++] = (struct col){"fix", "ndarray:int32:2,3", 24};
  c[nc++] = (struct col){"id", "int", 8};
  struct row *rows = calloc((size_t)n, sizeof *rows);
  for (int i = 0; i < n; i++) {
    int k = 0;
    nd_value(&rows[i].v[k++], i % NDT, i, 1, 1, i % 3, 1 + i % 5);
    for (int d = 0; d < NDT; d++) nd_value(&rows[i].v[k++], d, i, 0, 1, 0, 1 + (i + d) % 7);
    nd_value(&rows[i].v[k++], 6, i, 0, 0, 2, 3);
    test_buf_le(&rows[i].v[k++], (uint64_t)i, 8);
  }
  write_mds(dir, c, nc, rows, n, comp);
  free_rows(rows, n);
  return nc;
}

static void check_elems(const struct stk_field *f, int d, int i, int count) {
  struct test_buf want = {0};
  for (int k = 0; k < count; k++) put_elem(&want, d, i, k);
  CHECK_EQ(f->len, want.n);
  CHECK_EQ(f->raw_len, want.n);
  CHECK_MSG(!memcmp(f->data, want.p, want.n), "sample %d field %s: values differ", i, f->name);
  free(want.p);
}

static void check_every_dtype(struct stk_dataset *ds, int n) {
  CHECK_EQ(stk_dataset_num_samples(ds), (uint64_t)n);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  for (int i = 0; i < n; i++) {
    CHECK_OK(stk_dataset_read(ds, (uint64_t)i, 1, &buf, &cap, &s));
    const struct stk_field *f = field(&s, "any");
    int d = i % NDT, r = i % 3, cl = 1 + i % 5;
    CHECK_EQ(f->type, dts[d].type);
    CHECK_EQ(f->elem, (uint32_t)dts[d].size);
    CHECK_EQ(f->ndim, r ? 2 : 1);
    CHECK_EQ(f->shape[0], (uint64_t)(r ? r : cl));
    if (r) CHECK_EQ(f->shape[1], (uint64_t)cl);
    check_elems(f, d, i, (r ? r : 1) * cl);
    for (int e = 0; e < NDT; e++) {
      char nm[32];
      snprintf(nm, sizeof nm, "d_%s", dts[e].name);
      f = field(&s, nm);
      CHECK_EQ(f->type, dts[e].type);
      CHECK_STR(stk_elem_type_name(f->type), dts[e].name);
      CHECK_EQ(f->ndim, 1);
      CHECK_EQ(f->shape[0], (uint64_t)(1 + (i + e) % 7));
      check_elems(f, e, i, 1 + (i + e) % 7);
    }
    f = field(&s, "fix");
    CHECK_EQ(f->type, STK_ELEM_I32);
    CHECK_EQ(f->ndim, 2);
    CHECK_EQ(f->shape[0], 2);
    CHECK_EQ(f->shape[1], 3);
    check_elems(f, 6, i, 6);
    f = field(&s, "id");
    CHECK_EQ(f->type, STK_ELEM_I64);
    CHECK_EQ(f->ndim, 0);
    CHECK_EQ(f->len, 8);
    CHECK_EQ(stk__ld64(f->data), (uint64_t)i);
  }
  free(buf);
}

TEST(mds_ndarray_every_dtype) {
  every_dtype_ds("d", NULL, 40);
  struct stk_dataset *ds = open_ok("d");
  check_every_dtype(ds, 40);
  const char *name;
  char v[64];
  CHECK_OK(stk_dataset_property(ds, 0, &name, v, sizeof v));
  CHECK_STR(name, "column any");
  CHECK_STR(v, "ndarray");
  stk_dataset_close(ds);
}

/* ---- zstd ---------------------------------------------------------------- */

TEST(mds_zstd_shard) {
  every_dtype_ds("z", "zstd", 60);
  struct stk_dataset *ds = open_ok("z");
  check_every_dtype(ds, 60);
  const char *name;
  char v[64];
  int found = 0;
  for (int i = 0; stk_dataset_property(ds, i, &name, v, sizeof v) == 0; i++)
    if (!strcmp(name, "compressed")) found = !strcmp(v, "1 of 1 shards (zstd)");
  CHECK(found);
  stk_dataset_close(ds);
  /* Decompressed once, beside the compressed file, under the raw name: the
   * next open reads it without decompressing (the .zstd may even go). */
  struct stat sb;
  CHECK_OK(stat("z/shard.00000.mds", &sb));
  CHECK_OK(unlink("z/shard.00000.mds.zstd"));
  ds = open_ok("z");
  check_every_dtype(ds, 60);
  stk_dataset_close(ds);
  /* "zstd:LEVEL" too. */
  every_dtype_ds("y", "zstd:7", 5);
  ds = open_ok("y");
  check_every_dtype(ds, 5);
  stk_dataset_close(ds);
}

TEST(mds_zstd_readonly_folder) {
  if (geteuid() == 0) SKIP("root writes into read-only folders");
  every_dtype_ds("z", "zstd", 20);
  CHECK_OK(chmod("z", 0555));
  struct stk_dataset *ds = open_ok("z");
  check_every_dtype(ds, 20);
  stk_dataset_close(ds);
  CHECK(access("z/shard.00000.mds", F_OK) != 0);
  CHECK_OK(chmod("z", 0755));
}

TEST(mds_compression_refused) {
  char err[STK_ERRMSG_MAX];
  const char *algos[] = {"gz", "bz2", "br", "snappy", "zstd:x"};
  for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
    char dir[32];
    snprintf(dir, sizeof dir, "c%zu", a);
    every_dtype_ds(dir, algos[a], 3);
    open_fails(dir, err);
    char want[128];
    snprintf(want, sizeof want, "MDS compression '%s' is not supported", algos[a]);
    CHECK_CONTAINS(err, want);
    CHECK_CONTAINS(err, "shard.00000.mds.");
  }
}

static void reindex_zip_bytes(const char *dir, long long zbytes, long long raw) {
  /* Rewrite index.json's sizes in place: a crude but independent edit. */
  char p[256];
  snprintf(p, sizeof p, "%s/index.json", dir);
  size_t n;
  char *t = (char *)test_read_file(p, &n);
  struct test_buf o = {0};
  char *z = strstr(t, "\"zip_data\""), *r = strstr(t, "\"raw_data\"");
  CHECK(z && r);
  char *rb = strstr(r, "\"bytes\": ") + 9, *zb = strstr(z, "\"bytes\": ") + 9;
  test_buf_put(&o, t, (size_t)(rb - t));
  char num[32];
  int l = snprintf(num, sizeof num, "%lld", raw);
  test_buf_put(&o, num, (size_t)l);
  char *after = rb + strspn(rb, "0123456789");
  test_buf_put(&o, after, (size_t)(zb - after));
  l = snprintf(num, sizeof num, "%lld", zbytes);
  test_buf_put(&o, num, (size_t)l);
  after = zb + strspn(zb, "0123456789");
  test_buf_put(&o, after, n - (size_t)(after - t));
  test_write_file(p, o.p, o.n);
  free(o.p);
  free(t);
}

static long long file_size(const char *p) {
  struct stat sb;
  CHECK_OK(stat(p, &sb));
  return (long long)sb.st_size;
}

TEST(mds_zstd_truncated_and_corrupt) {
  char err[STK_ERRMSG_MAX];
  every_dtype_ds("t", "zstd", 30);
  long long zn = file_size("t/shard.00000.mds.zstd"), raw = 0;
  {
    size_t n;
    char *t = (char *)test_read_file("t/index.json", &n);
    raw = atoll(strstr(strstr(t, "\"raw_data\""), "\"bytes\": ") + 9);
    free(t);
  }
  /* zip_data.bytes disagrees with the file. */
  reindex_zip_bytes("t", zn + 1, raw);
  open_fails("t", err);
  CHECK_CONTAINS(err, "t/shard.00000.mds.zstd");
  CHECK_CONTAINS(err, "but index.json's zip_data says");
  /* Truncated frame, with index.json agreeing on the cut size. */
  CHECK_OK(truncate("t/shard.00000.mds.zstd", zn - 9));
  reindex_zip_bytes("t", zn - 9, raw);
  open_fails("t", err);
  CHECK_CONTAINS(err, "t/shard.00000.mds.zstd: offset");
  CHECK_CONTAINS(err, "truncated zstd frame");
  CHECK(access("t/shard.00000.mds", F_OK) != 0);
  /* A decompressed size that disagrees with raw_data.bytes, both ways. */
  every_dtype_ds("u", "zstd", 30);
  reindex_zip_bytes("u", zn, raw + 1);
  open_fails("u", err);
  CHECK_CONTAINS(err, "u/shard.00000.mds.zstd: decompresses to");
  CHECK_CONTAINS(err, "but index.json's raw_data says");
  reindex_zip_bytes("u", zn, raw - 1);
  open_fails("u", err);
  CHECK_CONTAINS(err, "decompresses to more than the");
  CHECK(access("u/shard.00000.mds", F_OK) != 0);
  /* Corrupt bytes inside the frame. */
  every_dtype_ds("v", "zstd", 30);
  size_t n;
  uint8_t *z = test_read_file("v/shard.00000.mds.zstd", &n);
  for (size_t i = n / 3; i < n / 3 + 16; i++) z[i] ^= 0x5a;
  z[0] ^= 1; /* and the magic: refused at offset 0 whatever the block held */
  test_write_file("v/shard.00000.mds.zstd", z, n);
  free(z);
  open_fails("v", err);
  CHECK_CONTAINS(err, "v/shard.00000.mds.zstd: offset");
  CHECK_CONTAINS(err, "corrupt zstd data");
}

/* ---- bad values ---------------------------------------------------------- */

TEST(mds_ndarray_bad_values) {
  char err[STK_ERRMSG_MAX];
  struct col c[2] = {{"id", "int", 8}, {"tokens", "ndarray", -1}};
  struct row *rows = calloc(4, sizeof *rows);
  for (int i = 0; i < 4; i++) {
    test_buf_le(&rows[i].v[0], (uint64_t)i, 8);
    nd_value(&rows[i].v[1], 6, i, 1, 1, 0, 5);
  }
  rows[2].v[1].p[0] = 7; /* dtype code 7: none */
  write_mds("a", c, 2, rows, 4, NULL);
  struct stk_dataset *ds = open_ok("a");
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &s));
  CHECK(stk_dataset_read(ds, 2, 1, &buf, &cap, &s) != 0);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "a/shard.00000.mds: sample 2 (offset ");
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "column 'tokens': unknown ndarray dtype code 7");
  stk_dataset_close(ds);
  /* A shape that does not match the bytes. */
  rows[2].v[1].p[0] = 33;
  rows[3].v[1].p[2] = 6;
  write_mds("b", c, 2, rows, 4, NULL);
  ds = open_ok("b");
  CHECK(stk_dataset_read(ds, 3, 1, &buf, &cap, &s) != 0);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "b/shard.00000.mds: sample 3 (offset ");
  CHECK_CONTAINS(stk_dataset_errmsg(ds),
                 "column 'tokens': ndarray int32[6] needs 24 bytes but the value holds 20");
  stk_dataset_close(ds);
  /* Too many dimensions, and a shape running past the value. */
  rows[3].v[1].p[1] = (uint8_t)(9 << 2);
  write_mds("e", c, 2, rows, 4, NULL);
  ds = open_ok("e");
  CHECK(stk_dataset_read(ds, 3, 1, &buf, &cap, &s) != 0);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "ndarray of 9 dimensions (stoker reads 1 to 8)");
  stk_dataset_close(ds);
  rows[3].v[1].p[1] = (uint8_t)(5 << 2 | 3);
  write_mds("f", c, 2, rows, 4, NULL);
  ds = open_ok("f");
  CHECK(stk_dataset_read(ds, 3, 1, &buf, &cap, &s) != 0);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "shape of 5 dimensions runs past the value");
  stk_dataset_close(ds);
  free(buf);
  free_rows(rows, 4);
  /* Column encodings index.json cannot mean. */
  static const struct {
    const char *enc;
    int size;
    const char *msg;
  } bad[] = {{"ndarray:int3", -1, "column 'x': unknown ndarray dtype 'int3'"},
             {"ndarray:int32:2,3", 20, "column 'x' (ndarray:int32:2,3) has size 20, but its shape makes 24 bytes"},
             {"ndarray:int32:2,0", 0, "bad ndarray shape"},
             {"ndarray:int32:1,1,1,1,1,1,1,1,1", 4, "bad ndarray shape"},
             {"ndarray:int32", 8, "has a fixed size, but its values carry their shape"},
             {"ndarray", 8, "has a fixed size, but its values carry their dtype"},
             {"int32", 8, "column 'x' (int32) has size 8, not 4"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct col bc[1] = {{"x", bad[i].enc, bad[i].size}};
    struct row *r = calloc(1, sizeof *r);
    static const uint8_t zeros[64];
    test_buf_put(&r[0].v[0], zeros, bad[i].size > 0 ? (size_t)bad[i].size : 1);
    write_mds("g", bc, 1, r, 1, NULL);
    free_rows(r, 1);
    open_fails("g", err);
    CHECK_CONTAINS(err, "g/index.json: shard 0 (shard.00000.mds): ");
    CHECK_CONTAINS(err, bad[i].msg);
  }
}

/* ---- the CLI: inspect and feed --------------------------------------------- */

TEST(mds_tokens_inspect_feed) {
  struct col c[2] = {{"id", "int", 8}, {"tokens", "ndarray:int32", -1}};
  int n = 300;
  uint64_t token_bytes = 0;
  struct row *rows = calloc((size_t)n, sizeof *rows);
  for (int i = 0; i < n; i++) {
    test_buf_le(&rows[i].v[0], (uint64_t)i, 8);
    int len = 1 + (i * 37) % 200;
    test_buf_le(&rows[i].v[1], 1 << 2 | 1, 1); /* 1-D, shape as u16 */
    test_buf_le(&rows[i].v[1], (uint64_t)len, 2);
    for (int k = 0; k < len; k++) test_buf_le(&rows[i].v[1], (uint64_t)(i * 1000 + k), 4);
    token_bytes += 4 * (uint64_t)len;
  }
  write_mds("m", c, 2, rows, n, "zstd");
  free_rows(rows, n);
  const char *S = test_stoker_bin();
  char *out = NULL;
  int rc = test_sh(&out, "%s inspect m", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "column tokens: ndarray:int32");
  CHECK_CONTAINS(out, "column id: int, 8 bytes");
  CHECK_CONTAINS(out, "compressed: 1 of 1 shards (zstd)");
  CHECK_CONTAINS(out, "int32[1]");
  free(out);
  rc = test_sh(&out, "%s inspect m --json", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "\"dtype\": \"int32\"");
  CHECK_CONTAINS(out, "\"column tokens\": \"ndarray:int32\"");
  free(out);
  rc = test_sh(&out, "%s verify m", S);
  CHECK_MSG(rc == 0, "verify: %s", out);
  free(out);
  rc = test_sh(&out, "%s feed m --field tokens --epochs 1 --json", S);
  CHECK_MSG(rc == 0, "feed: %s", out);
  CHECK_CONTAINS(out, "\"samples\": 300");
  char want[64];
  snprintf(want, sizeof want, "\"bytes\": %llu", (unsigned long long)token_bytes);
  CHECK_CONTAINS(out, want);
  free(out);
}

/* Through the cache, index.json is fetched into memory and parsed there
 * (the list_index hook): nothing is written to a temporary folder, and a
 * bad index is named by where it lies, not by a copy. */
TEST(mds_remote_index_parsed_in_memory) {
  const char *bad[][2] = {{"{\"version\": 2, \"shards\": 7}", "no \"shards\" array"},
                          {"{\"shards\": [{\"samples\": 1}]}", "shard 0 has no valid raw_data"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char dir[32], path[64], err[STK_ERRMSG_MAX];
    snprintf(dir, sizeof dir, "r%zu", i);
    CHECK_OK(mkdir(dir, 0755));
    snprintf(path, sizeof path, "%s/index.json", dir);
    test_write_file(path, bad[i][0], strlen(bad[i][0]));
    struct stk_cache_opts co = {.dir = "cache"};
    struct stk_dataset_opts o = {.cache = &co};
    struct stk_dataset *ds = NULL;
    CHECK(stk_dataset_open(&ds, dir, &o, err) != 0);
    CHECK_CONTAINS(err, bad[i][1]);
    CHECK_CONTAINS(err, path);
    CHECK(!strstr(err, "stoker-mds-"));
  }
  /* Compressed shards are decompressed only where their index is read as a
   * local file: through the cache they are refused, and nothing is written
   * beside them. */
  every_dtype_ds("rz", "zstd", 3);
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset_opts o = {.cache = &co};
  struct stk_dataset *ds = NULL;
  char err[STK_ERRMSG_MAX];
  CHECK(stk_dataset_open(&ds, "rz", &o, err) != 0);
  CHECK_CONTAINS(err, "compressed MDS shards are read from local folders only");
  CHECK_CONTAINS(err, "shard.00000.mds.zstd");
  struct stat sb;
  CHECK(stat("rz/shard.00000.mds", &sb) != 0);
}
