/* Tests of npy token files (src/format/npy_tokens.c) and of `stoker pack`
 * between the token formats: .npy files written byte by byte here (NumPy's
 * version 1.0 layout) for every integer dtype, read back token by token;
 * every refused header named with its file and offset; existing npy
 * datasets still read as npy; Megatron -> MDS -> npy-tokens -> Megatron
 * byte-identical for every Megatron integer dtype; a typed MDS column
 * (written here as streaming's MDSWriter lays it out) packed into Megatron
 * and back; --dtype conversion and its range check. */
#include <sys/stat.h>
#include <unistd.h>

#include "../src/format/format_impl.h"
#include "stoker/gen.h"
#include "test.h"
#include "test_tokens.h"





/* NumPy's integer dtypes: descr, item size, stoker's type, signedness. */
static const struct {
  const char *descr, *name;
  int size, type, is_signed;
} ints[] = {{"|u1", "uint8", 1, STK_ELEM_U8, 0},   {"|i1", "int8", 1, STK_ELEM_I8, 1},
            {"<u2", "uint16", 2, STK_ELEM_U16, 0}, {"<i2", "int16", 2, STK_ELEM_I16, 1},
            {"<u4", "uint32", 4, STK_ELEM_U32, 0}, {"<i4", "int32", 4, STK_ELEM_I32, 1},
            {"<u8", "uint64", 8, STK_ELEM_U64, 0}, {"<i8", "int64", 8, STK_ELEM_I64, 1}};
#define NINT ((int)(sizeof ints / sizeof ints[0]))

/* A version 1.0 .npy image: header dictionary dict padded with spaces to
 * a multiple of 64 bytes, then the data. */
static void write_npy(const char *path, const char *dict, const void *data, size_t n) {
  struct test_buf b = {0};
  size_t dl = strlen(dict), total = 10 + dl + 1;
  total += (64 - total % 64) % 64;
  test_buf_put(&b, "\x93NUMPY\x01\x00", 8);
  test_buf_le(&b, total - 10, 2);
  test_buf_put(&b, dict, dl);
  while (b.n < total - 1) test_buf_put(&b, " ", 1);
  test_buf_put(&b, "\n", 1);
  test_buf_put(&b, data, n);
  test_write_file(path, b.p, b.n);
  free(b.p);
}

/* Token k of document d in dtype i: signed types get negatives, and every
 * type its extremes. */
static uint64_t tok(int i, int d, int k) {
  int bits = ints[i].size * 8;
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  if (k == 0) return mask;                                       /* -1, or the maximum */
  if (k == 1) return ints[i].is_signed ? 1ull << (bits - 1) : 0; /* the minimum */
  return (uint64_t)(d * 1000 + k * 7) & mask;
}

static void write_doc(const char *path, int i, int d, int n) {
  struct test_buf data = {0};
  for (int k = 0; k < n; k++) test_buf_le(&data, tok(i, d, k), ints[i].size);
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }",
           ints[i].descr, n);
  write_npy(path, dict, data.p, data.n);
  free(data.p);
}

static struct stk_dataset *open_as(const char *path, const char *fmt) {
  struct stk_dataset *ds = NULL;
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = fmt, .index_threads = 2};
  int rc = stk_dataset_open(&ds, path, &o, err);
  CHECK_MSG(rc == 0, "open %s as %s: %s", path, fmt ? fmt : "(detect)", err);
  return ds;
}

/* The error of opening path as fmt, which must fail. */
static void open_fails(const char *path, const char *fmt, char *err) {
  struct stk_dataset *ds = NULL;
  struct stk_dataset_opts o = {.format = fmt, .index_threads = 1};
  int rc = stk_dataset_open(&ds, path, &o, err);
  CHECK_MSG(rc != 0, "open of %s succeeded", path);
}

static const char *prop(struct stk_dataset *ds, const char *want, char *v, size_t n) {
  const char *name;
  for (int i = 0; stk_dataset_property(ds, i, &name, v, n) == 0; i++)
    if (!strcmp(name, want)) return v;
  return "(none)";
}

/* ---- reading npy token files ---------------------------------------------- */

TEST(npy_tokens_every_integer_dtype) {
  static const int lens[] = {5, 2, 9};
  for (int i = 0; i < NINT; i++) {
    char dir[32], p[64];
    snprintf(dir, sizeof dir, "t_%s", ints[i].name);
    mkdir(dir, 0755);
    for (int d = 0; d < 3; d++) {
      snprintf(p, sizeof p, "%s/doc-%03d.npy", dir, d);
      write_doc(p, i, d, lens[d]);
    }
    struct stk_dataset *ds = open_as(dir, "npy-tokens");
    CHECK_STR(stk_dataset_format(ds), "npy-tokens");
    CHECK_EQ(stk_dataset_num_samples(ds), 3);
    char v[64];
    CHECK_STR(prop(ds, "dtype", v, sizeof v), ints[i].name);
    CHECK_EQ(strtoull(prop(ds, "tokens", v, sizeof v), NULL, 10), 16);
    CHECK_EQ(strtoull(prop(ds, "documents", v, sizeof v), NULL, 10), 3);
    uint8_t *b = NULL;
    size_t cap = 0;
    for (int d = 0; d < 3; d++) {
      struct stk_sample s;
      uint64_t bytes;
      CHECK_OK(stk_dataset_sample_bytes(ds, (uint64_t)d, &bytes));
      CHECK_EQ(bytes, (uint64_t)(lens[d] * ints[i].size)); /* the data alone */
      CHECK_OK(stk_dataset_read(ds, (uint64_t)d, 1, &b, &cap, &s));
      CHECK_EQ(s.nfields, 1);
      const struct stk_field *f = &s.fields[0];
      CHECK_STR(f->name, "tokens");
      CHECK_EQ(f->type, ints[i].type);
      CHECK_EQ(f->elem, (uint32_t)ints[i].size);
      CHECK_EQ(f->ndim, 1);
      CHECK_EQ(f->shape[0], (uint64_t)lens[d]);
      CHECK_EQ(f->len, (uint64_t)(lens[d] * ints[i].size));
      char key[16];
      snprintf(key, sizeof key, "doc-%03d", d);
      CHECK_STR(s.key, key);
      for (int k = 0; k < lens[d]; k++)
        CHECK_MSG(test_ld_le(f->data + k * ints[i].size, ints[i].size) == tok(i, d, k),
                  "%s document %d token %d", ints[i].name, d, k);
    }
    free(b);
    stk_dataset_close(ds);
    /* Without --format the same folder is what it always was: npy, the
     * whole file as field "npy". */
    ds = open_as(dir, NULL);
    CHECK_STR(stk_dataset_format(ds), "npy");
    b = NULL;
    cap = 0;
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, 0, 1, &b, &cap, &s));
    CHECK_STR(s.fields[0].name, "npy");
    CHECK_EQ(s.fields[0].type, STK_ELEM_NONE);
    CHECK(!memcmp(s.fields[0].data, "\x93NUMPY", 6));
    free(b);
    stk_dataset_close(ds);
  }
}

TEST(npy_tokens_refusals) {
  static const struct {
    const char *dict, *want;
  } bad[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
       "offset 10: dtype '<f4' is not an integer type (npy token files hold int8 to uint64"},
      {"{'descr': '|b1', 'fortran_order': False, 'shape': (8,), }",
       "offset 10: dtype '|b1' is not an integer type"},
      {"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }",
       "offset 10: dtype 'structured' is not an integer type"},
      {"{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
       "offset 10: dtype '>i4' is big-endian (npy token files are little-endian: save "
       "arr.astype('<i4'))"},
      {"{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }",
       "offset 10: Fortran order (npy token files are C-order 1-D arrays)"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (1, 4), }",
       "offset 10: 2 dimensions (an npy token file is one 1-D array of a document's tokens)"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (), }", "offset 10: 0 dimensions"},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
       "offset 128: 3 tokens of int64 need 24 bytes, but the file holds 8 after its header"},
      {"{'descr': '<i8', 'shape': (1,), }", "offset 0: malformed .npy header dictionary"},
  };
  uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  char err[STK_ERRMSG_MAX];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_npy("bad.npy", bad[i].dict, data, sizeof data);
    open_fails("bad.npy", "npy-tokens", err);
    CHECK_CONTAINS(err, "bad.npy: ");
    CHECK_CONTAINS(err, bad[i].want);
    CHECK_MSG(!strchr(err, '\n'), "one line: %s", err);
    /* The npy format still reads what it read before (a float array, a
     * matrix). */
    if (i < 7) {
      struct stk_dataset *ds = open_as("bad.npy", NULL);
      CHECK_STR(stk_dataset_format(ds), "npy");
      stk_dataset_close(ds);
    }
  }
  test_write_file("bad.npy", "NUMPX\x01", 6);
  open_fails("bad.npy", "npy-tokens", err);
  CHECK_CONTAINS(err, "bad.npy: offset 0: not a .npy file (bad magic)");
  /* A folder mixing dtypes is refused naming the file that differs. */
  mkdir("mix", 0755);
  write_doc("mix/a.npy", 2, 0, 3);
  write_doc("mix/b.npy", 2, 1, 3);
  write_doc("mix/c.npy", 5, 2, 3);
  open_fails("mix", "npy-tokens", err);
  CHECK_CONTAINS(err, "offset 10: dtype ");
  CHECK_CONTAINS(err, "but another file of the dataset holds ");
  CHECK_CONTAINS(err, "open them as separate datasets");
  /* Through the CLI: inspect and verify say the same in one line. */
  char *out = NULL;
  const char *S = test_stoker_bin();
  int rc = test_sh(&out, "%s verify mix --format npy-tokens", S);
  CHECK_MSG(rc != 0, "verify passed: %s", out);
  CHECK_CONTAINS(out, "but another file of the dataset holds");
  free(out);
}

TEST(npy_tokens_inspect_verify_cli) {
  mkdir("d", 0755);
  for (int d = 0; d < 4; d++) {
    char p[32];
    snprintf(p, sizeof p, "d/%d.npy", d);
    write_doc(p, 5, d, 10 + d);
  }
  const char *S = test_stoker_bin();
  char *out = NULL;
  int rc = test_sh(&out, "%s inspect d --format npy-tokens --json", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "\"format\": \"npy-tokens\"");
  CHECK_CONTAINS(out, "\"dtype\": \"int32\"");
  CHECK_CONTAINS(out, "\"tokens\": 46");
  CHECK_CONTAINS(out, "\"documents\": 4");
  CHECK_CONTAINS(out, "\"shape\": [\n");
  free(out);
  rc = test_sh(&out, "%s inspect d --format npy-tokens", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "tokens           40 B  int32[10]");
  free(out);
  rc = test_sh(&out, "%s verify d --format npy-tokens", S);
  CHECK_MSG(rc == 0, "verify: %s", out);
  CHECK_CONTAINS(out,
                 "ok: 4 samples in 4 shards, all well-formed (npy-tokens stores no checksums)");
  free(out);
  rc = test_sh(&out, "%s inspect d", S);
  CHECK_MSG(rc == 0, "inspect: %s", out);
  CHECK_CONTAINS(out, "format:   npy (");
  free(out);
}

/* ---- pack between the token formats ------------------------------------------ */

/* PREFIX.bin + PREFIX.idx as Megatron writes them, one document per
 * sequence (the layout of docs/formats.md, by hand); token k of sequence s
 * is its low `size` bytes of tokv(s, k). */
static uint64_t tokv(int s, int k) { return (uint64_t)(s * 977 + k * 13 + 5); }

static void write_megatron(const char *prefix, int code, int size, int nseq, const int *lens) {
  int32_t l[64];
  CHECK(nseq <= 64);
  for (int i = 0; i < nseq; i++) l[i] = lens[i];
  test_megatron_write(prefix, code, size, nseq, l, tokv);
}

TEST(pack_tokens_round_trip_every_dtype) {
  static const char *mg[] = {"uint8", "int8", "int16", "uint16", "int32", "int64"};
  const char *S = test_stoker_bin();
  for (size_t i = 0; i < sizeof mg / sizeof mg[0]; i++) {
    char g[32];
    snprintf(g, sizeof g, "g_%s", mg[i]);
    struct stk_gen_opts o = {.dir = g,
                             .format = "megatron",
                             .samples = 40,
                             .seed = 5 + i,
                             .doc_len_mean = 30,
                             .doc_len_stdev = 20,
                             .vocab = 120,
                             .dtype = mg[i]};
    char err[STK_ERRMSG_MAX];
    CHECK_MSG(stk_gen(&o, NULL, NULL, err) == 0, "gen %s: %s", mg[i], err);
    char *out = NULL;
    int rc = test_sh(&out,
                     "set -e; %s pack %s m_%s --format mds -q; grep -o 'ndarray:[a-z0-9]*' "
                     "m_%s/index.json | head -1; %s pack m_%s n_%s --format npy-tokens -q; "
                     "%s pack n_%s b_%s --src-format npy-tokens --format megatron -q; "
                     "cmp %s/shard-00000.bin b_%s/shard-00000.bin; "
                     "cmp %s/shard-00000.idx b_%s/shard-00000.idx; echo same",
                     S, g, mg[i], mg[i], S, mg[i], mg[i], S, mg[i], mg[i], g, mg[i], g, mg[i]);
    CHECK_MSG(rc == 0, "%s: %s", mg[i], out);
    char want[32];
    snprintf(want, sizeof want, "ndarray:%s\n", mg[i]);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "same");
    free(out);
    /* The npy files hold the tokens NumPy would save: the dtype's descr. */
    char p[64];
    snprintf(p, sizeof p, "n_%s/shard-00000000.npy", mg[i]);
    size_t n;
    uint8_t *f = test_read_file(p, &n);
    CHECK(f && n > 64);
    int k = 0;
    while (k < NINT && strcmp(ints[k].name, mg[i])) k++;
    char descr[32];
    snprintf(descr, sizeof descr, "'descr': '%s'", ints[k].descr);
    CHECK_MSG(memmem(f, 64, descr, strlen(descr)) != NULL, "%s not in %.60s", descr, f + 10);
    free(f);
  }
  /* Float Megatron datasets go through MDS unchanged; npy token files
   * refuse them in one line. */
  static const int lens[] = {4, 1, 7};
  mkdir("fl", 0755);
  write_megatron("fl/c", 7, 4, 3, lens);
  char *out = NULL;
  int rc = test_sh(&out,
                   "set -e; %s pack fl fm --format mds -q; grep -c 'ndarray:float32' fm/index.json;"
                   " %s pack fm fb --format megatron -q; cmp fl/c.bin fb/shard-00000.bin; "
                   "cmp fl/c.idx fb/shard-00000.idx; echo same",
                   S, S);
  CHECK_MSG(rc == 0, "float32: %s", out);
  CHECK_CONTAINS(out, "same");
  free(out);
  rc = test_sh(&out, "%s pack fl fn --format npy-tokens", S);
  CHECK_MSG(rc != 0, "npy-tokens took floats: %s", out);
  CHECK_CONTAINS(out,
                 "sample 0: field 'tokens' holds float32 values; npy token files hold "
                 "integer tokens");
  free(out);
}

/* An MDS folder as streaming's MDSWriter writes it: columns id (int) and
 * tokens (ndarray:DTYPE, shape before each value), one shard. */
static void write_mds_tokens(const char *dir, const char *dtype, int size, int n, const int *lens) {
  struct test_buf data = {0}, sh = {0};
  uint32_t offs[64];
  CHECK(n < 64);
  for (int i = 0; i < n; i++) {
    offs[i] = (uint32_t)data.n;
    int lg = lens[i] < 256 ? 0 : 1;
    test_buf_le(&data, (uint64_t)(1 + (1 << lg) + lens[i] * size), 4); /* tokens' size */
    test_buf_le(&data, (uint64_t)(100 + i), 8);                        /* id */
    test_buf_le(&data, (uint64_t)(1 << 2 | lg), 1);
    test_buf_le(&data, (uint64_t)lens[i], 1 << lg);
    for (int k = 0; k < lens[i]; k++) test_buf_le(&data, tokv(i, k), size);
  }
  offs[n] = (uint32_t)data.n;
  const char *cfg = "{\"format\": \"mds\"}";
  uint64_t hdr = 4 + 4 * ((uint64_t)n + 1) + strlen(cfg);
  test_buf_le(&sh, (uint64_t)n, 4);
  for (int i = 0; i <= n; i++) test_buf_le(&sh, hdr + offs[i], 4);
  test_buf_put(&sh, cfg, strlen(cfg));
  test_buf_put(&sh, data.p, data.n);
  mkdir(dir, 0755);
  char p[256], ix[1024];
  snprintf(p, sizeof p, "%s/shard.00000.mds", dir);
  test_write_file(p, sh.p, sh.n);
  int l = snprintf(ix, sizeof ix,
                   "{\"shards\": [{\"column_encodings\": [\"int\", \"ndarray:%s\"], "
                   "\"column_names\": [\"id\", \"tokens\"], \"column_sizes\": [8, null], "
                   "\"compression\": null, \"format\": \"mds\", \"hashes\": [], \"raw_data\": "
                   "{\"basename\": \"shard.00000.mds\", \"bytes\": %zu, \"hashes\": {}}, "
                   "\"samples\": %d, \"size_limit\": 67108864, \"version\": 2, \"zip_data\": "
                   "null}], \"version\": 2}",
                   dtype, sh.n, n);
  snprintf(p, sizeof p, "%s/index.json", dir);
  test_write_file(p, ix, (size_t)l);
  free(data.p);
  free(sh.p);
}

/* Sequence s of the dataset at path holds tokv(s, k) for k < lens[s], as
 * size-byte tokens of type t. */
static void check_tokens(const char *path, const char *fmt, int t, int size, int n,
                         const int *lens) {
  struct stk_dataset *ds = open_as(path, fmt);
  CHECK_EQ(stk_dataset_num_samples(ds), (uint64_t)n);
  uint8_t *b = NULL;
  size_t cap = 0;
  for (int s = 0; s < n; s++) {
    struct stk_sample smp;
    CHECK_OK(stk_dataset_read(ds, (uint64_t)s, 1, &b, &cap, &smp));
    const struct stk_field *f = stk__token_field(&smp);
    CHECK(f);
    CHECK_STR(f->name, "tokens");
    CHECK_EQ(f->type, t);
    CHECK_EQ(f->ndim, 1);
    CHECK_EQ(f->shape[0], (uint64_t)lens[s]);
    CHECK_EQ(f->len, (uint64_t)(lens[s] * size));
    uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    for (int k = 0; k < lens[s]; k++)
      CHECK_MSG(test_ld_le(f->data + k * size, size) == (tokv(s, k) & mask), "%s sequence %d token %d",
                path, s, k);
  }
  free(b);
  stk_dataset_close(ds);
}

TEST(pack_typed_mds_column_into_megatron_and_back) {
  static const int lens[] = {3, 300, 1, 17, 8};
  write_mds_tokens("m", "uint16", 2, 5, lens);
  check_tokens("m", NULL, STK_ELEM_U16, 2, 5, lens);
  const char *S = test_stoker_bin();
  char *out = NULL;
  /* The token column is written, not the id column before it. */
  int rc = test_sh(&out, "%s pack m g --format megatron && %s inspect g", S, S);
  CHECK_MSG(rc == 0, "pack: %s", out);
  CHECK_CONTAINS(out, "packed 5 samples from m (mds) into g (megatron)");
  CHECK_CONTAINS(out, "dtype:    uint16");
  CHECK_CONTAINS(out, "tokens:   329");
  CHECK_CONTAINS(out, "tokens           6 B  uint16[3]");
  free(out);
  check_tokens("g", NULL, STK_ELEM_U16, 2, 5, lens);
  rc = test_sh(&out, "%s pack g m2 --format mds -q && cat m2/index.json", S);
  CHECK_MSG(rc == 0, "pack back: %s", out);
  CHECK_CONTAINS(out, "\"column_encodings\": [\"ndarray:uint16\"]");
  free(out);
  check_tokens("m2", NULL, STK_ELEM_U16, 2, 5, lens);
  /* The value layout is streaming's: u8 ndim << 2 | log2 of the shape's
   * size (u16 for 300 tokens), the shape, then the tokens. */
  size_t n;
  uint8_t *f = test_read_file("m2/shard.00000.mds", &n);
  CHECK(f && n > 40);
  const uint8_t *v1 = f + test_ld_le(f + 8, 4); /* sample 1: size, then the value */
  CHECK_EQ(test_ld_le(v1, 4), 1 + 2 + 600);
  CHECK_EQ(v1[4], 1 << 2 | 1);
  CHECK_EQ(test_ld_le(v1 + 5, 2), 300);
  CHECK_EQ(test_ld_le(v1 + 7, 2), tokv(1, 0));
  free(f);
  /* Scalar columns keep their type too: id stays an int64 column. */
  rc = test_sh(&out, "%s pack m m3 --format mds -q && cat m3/index.json", S);
  CHECK_MSG(rc == 0, "mds -> mds: %s", out);
  CHECK_CONTAINS(out, "\"column_encodings\": [\"int64\", \"ndarray:uint16\"]");
  CHECK_CONTAINS(out, "\"column_sizes\": [8, null]");
  free(out);
  /* uint32 has no Megatron dtype code: refused, naming the way out. */
  write_mds_tokens("m32", "uint32", 4, 5, lens);
  rc = test_sh(&out, "%s pack m32 g32 --format megatron", S);
  CHECK_MSG(rc != 0, "uint32 into megatron: %s", out);
  CHECK_CONTAINS(out,
                 "sample 0: field 'tokens' holds uint32 tokens, which Megatron's .idx has "
                 "no dtype code for");
  CHECK_CONTAINS(out, "stoker pack --dtype int64");
  free(out);
  rc = test_sh(&out, "%s pack m32 g32 --format megatron --dtype int32 -q && %s inspect g32", S, S);
  CHECK_MSG(rc == 0, "uint32 -> int32: %s", out);
  CHECK_CONTAINS(out, "dtype:    int32");
  free(out);
  check_tokens("g32", NULL, STK_ELEM_I32, 4, 5, lens);
}

TEST(pack_tokens_dtype_conversion_range_checked) {
  static const int lens[] = {3, 300, 1, 17, 8};
  mkdir("s", 0755);
  write_megatron("s/c", 8, 2, 5, lens); /* uint16; tokv(1, 299) = 4869 */
  const char *S = test_stoker_bin();
  char *out = NULL;
  /* Widening keeps every value; the .idx says int64. */
  int rc = test_sh(&out, "%s pack s w --format megatron --dtype int64 -q && %s inspect w", S, S);
  CHECK_MSG(rc == 0, "widen: %s", out);
  CHECK_CONTAINS(out, "dtype:    int64");
  CHECK_CONTAINS(out, "token_bytes: 8");
  free(out);
  check_tokens("w", NULL, STK_ELEM_I64, 8, 5, lens);
  /* Narrowing to a type too small for a token is refused, naming it. */
  rc = test_sh(&out, "%s pack s x --format npy-tokens --dtype uint8", S);
  CHECK_MSG(rc != 0, "narrowing passed: %s", out);
  CHECK_CONTAINS(out, "sample 1: field tokens: token 0 is 982, which does not fit uint8");
  free(out);
  CHECK_MSG(access("x/shard-00000000.npy", F_OK) != 0, "a refused pack left files behind");
  rc = test_sh(&out, "%s pack s x --format npy-tokens --dtype int8 --force", S);
  CHECK_MSG(rc != 0, "narrowing passed: %s", out);
  CHECK_CONTAINS(out, "sample 1: field tokens: token 0 is 982, which does not fit int8");
  free(out);
  /* Negative tokens into an unsigned type are refused; into a wider signed
   * type kept. */
  mkdir("neg", 0755);
  write_doc("neg/a.npy", 3, 0, 4); /* int16: -1, -32768, ... */
  rc = test_sh(&out, "%s pack neg y --src-format npy-tokens --format megatron --dtype uint16", S);
  CHECK_MSG(rc != 0, "negative into uint16 passed: %s", out);
  CHECK_CONTAINS(out, "field tokens: token 0 is -1, which does not fit uint16");
  free(out);
  rc = test_sh(&out,
               "%s pack neg y --src-format npy-tokens --format megatron --dtype int32 "
               "--force -q",
               S);
  CHECK_MSG(rc == 0, "int16 -> int32: %s", out);
  free(out);
  struct stk_dataset *ds = open_as("y", NULL);
  uint8_t *b = NULL;
  size_t cap = 0;
  struct stk_sample smp;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &b, &cap, &smp));
  CHECK_EQ(smp.fields[0].type, STK_ELEM_I32);
  CHECK_EQ((int32_t)test_ld_le(smp.fields[0].data, 4), -1);
  CHECK_EQ((int32_t)test_ld_le(smp.fields[0].data + 4, 4), -32768);
  free(b);
  stk_dataset_close(ds);
  /* Bad --dtype values and sources without token arrays. */
  rc = test_sh(&out, "%s pack s z --format megatron --dtype float32", S);
  CHECK_EQ(rc, 2);
  CHECK_CONTAINS(out, "--dtype: 'float32' is not an integer dtype");
  free(out);
  rc = test_sh(&out,
               "%s gen t --format tfrecord --samples 2 -q && "
               "%s pack t z --format megatron --dtype int32",
               S, S);
  CHECK_MSG(rc != 0, "untyped source passed: %s", out);
  CHECK_CONTAINS(out, "sample 0: no typed token array to convert");
  free(out);
}
