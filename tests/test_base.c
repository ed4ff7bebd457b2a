/* Tests of src/base: errors, parsing, RNG, CRC32C, JSON, output files. */
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/base/base.h"
#include "test.h"

TEST(error_table) {
  CHECK_STR(stk_strerror(STK_ECRC), "checksum mismatch");
  CHECK_STR(stk_err_name(STK_ECRC), "STK_ECRC");
  CHECK_STR(stk_err_name(0), "STK_OK");
  CHECK_STR(stk_strerror(-9999), "unknown error");
  CHECK_EQ(stk__from_errno(2 /* ENOENT */), STK_ENOENT);
  char buf[STK_ERRMSG_MAX];
  CHECK_EQ(stk__errf(buf, STK_ETRUNC, "%s: offset %d", "a.tfrecord", 12), STK_ETRUNC);
  CHECK_STR(buf, "a.tfrecord: offset 12");
}

TEST(parse_size) {
  uint64_t v;
  CHECK_OK(stk_parse_size("4096", &v));
  CHECK_EQ(v, 4096);
  CHECK_OK(stk_parse_size("128KiB", &v));
  CHECK_EQ(v, 131072);
  CHECK_OK(stk_parse_size("1.5GiB", &v));
  CHECK_EQ(v, 1610612736ull);
  CHECK_OK(stk_parse_size("2MB", &v));
  CHECK_EQ(v, 2000000);
  CHECK_EQ(stk_parse_size("12 apples", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size("-1", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size("1.3", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size("99999999999TiB", &v), STK_ERANGE);
  CHECK_EQ(stk_parse_u64("18446744073709551616", &v), STK_ERANGE);
  CHECK_EQ(stk_parse_size("", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size(".", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size("1e3", &v), STK_EINVAL);
  CHECK_EQ(stk_parse_size("GiB", &v), STK_EINVAL);
}

/* Every unit stoker prints is read back, up to the largest 64-bit size,
 * exactly (no rounding through a double) and with overflow refused. */
TEST(parse_size_pib_eib_exact) {
  uint64_t v;
  CHECK_OK(stk_parse_size("1PiB", &v));
  CHECK_EQ(v, 1ull << 50);
  CHECK_OK(stk_parse_size("1pb", &v));
  CHECK_EQ(v, 1000000000000000ull);
  CHECK_OK(stk_parse_size("2P", &v));
  CHECK_EQ(v, 2ull << 50);
  CHECK_OK(stk_parse_size("15EiB", &v));
  CHECK_EQ(v, 15ull << 60);
  CHECK_OK(stk_parse_size("15.5e", &v));
  CHECK(v == (15ull << 60) + (1ull << 59));
  CHECK_OK(stk_parse_size("18EB", &v));
  CHECK(v == 18000000000000000000ull);
  CHECK_EQ(stk_parse_size("16EiB", &v), STK_ERANGE);
  CHECK_EQ(stk_parse_size("19EB", &v), STK_ERANGE);
  CHECK_EQ(stk_parse_size("16384PiB", &v), STK_ERANGE);
  CHECK_OK(stk_parse_size("18446744073709551615", &v));
  CHECK(v == UINT64_MAX);
  CHECK_EQ(stk_parse_size("18446744073709551616", &v), STK_ERANGE);
  CHECK_EQ(stk_parse_size("99999999999999999999999", &v), STK_ERANGE);
  CHECK_OK(stk_parse_size("9007199254740993", &v)); /* 2^53 + 1: a double rounds it */
  CHECK(v == 9007199254740993ull);
  CHECK_OK(stk_parse_size("0.5KiB", &v));
  CHECK_EQ(v, 512);
  CHECK_EQ(stk_parse_size("0.1KiB", &v), STK_EINVAL); /* 102.4 bytes */
  /* What stk_fmt_bytes prints parses back (to its two decimals). */
  const uint64_t sizes[] = {1000, 1536, 3ull << 30, 5ull << 40, 7ull << 50, 3ull << 60};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char b[32];
    stk_fmt_bytes(sizes[i], b, sizeof b);
    CHECK_MSG(stk_parse_size(b, &v) == 0 && v == sizes[i], "'%s' read back as %llu", b,
              (unsigned long long)v);
  }
  char b[32];
  CHECK_STR(stk_fmt_bytes(3ull << 60, b, sizeof b), "3.00 EiB");
  CHECK_EQ(stk_parse_u64("12x", &v), STK_EINVAL);
  double d;
  CHECK_EQ(stk_parse_double("nan", &d), STK_EINVAL);
  CHECK_OK(stk_parse_double("0.25", &d));
  CHECK(d == 0.25);
}

TEST(rng_deterministic_and_unbiased) {
  struct stk_rng a, b;
  stk_rng_seed(&a, 42);
  stk_rng_seed(&b, 42);
  for (int i = 0; i < 1000; i++) CHECK(stk_rng_next(&a) == stk_rng_next(&b));
  stk_rng_seed(&a, 7);
  int hist[10] = {0};
  for (int i = 0; i < 100000; i++) hist[stk_rng_below(&a, 10)]++;
  for (int i = 0; i < 10; i++) CHECK_MSG(hist[i] > 9500 && hist[i] < 10500, "bucket %d: %d", i, hist[i]);
  double sum = 0, sq = 0;
  for (int i = 0; i < 100000; i++) {
    double x = stk_rng_normal(&a);
    sum += x;
    sq += x * x;
  }
  CHECK(fabs(sum / 1e5) < 0.02);
  CHECK(fabs(sq / 1e5 - 1.0) < 0.03);
}

/* stk_rng_fill against the per-call path it replaces (8 little-endian
 * bytes a draw, the tail from the low bytes of one more draw): every
 * length up to 300 and some long ones, at every alignment mod 8, with the
 * bytes around the range untouched and the stream continuing where the
 * per-call path would. */
TEST(rng_fill_matches_next) {
  enum { CAP = 70000, PAD = 16 };
  static uint8_t got[CAP + 2 * PAD + 8], want[CAP + 2 * PAD + 8];
  static const size_t lens[] = {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 4095, 4096, 4097,
                                65536, 65536 + 5, CAP};
  size_t nlens = sizeof lens / sizeof lens[0];
  for (size_t k = 0; k < 301 + nlens; k++) {
    size_t n = k < 301 ? k : lens[k - 301];
    for (size_t al = 0; al < 8; al++) {
      struct stk_rng a, b;
      uint64_t seed = stk_mix64(n, al);
      stk_rng_seed(&a, seed);
      stk_rng_seed(&b, seed);
      memset(got, 0xa5, sizeof got);
      memset(want, 0xa5, sizeof want);
      stk_rng_fill(&a, got + PAD + al, n);
      uint8_t *p = want + PAD + al;
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        uint64_t v = stk_rng_next(&b);
        for (int j = 0; j < 8; j++) p[i + j] = (uint8_t)(v >> (8 * j));
      }
      if (i < n) {
        uint64_t v = stk_rng_next(&b);
        for (; i < n; i++, v >>= 8) p[i] = (uint8_t)v;
      }
      CHECK_MSG(!memcmp(got, want, sizeof got), "length %zu, alignment %zu", n, al);
      CHECK_MSG(stk_rng_next(&a) == stk_rng_next(&b), "stream after length %zu", n);
    }
  }
}

/* Bitwise reference CRC32C for cross-checking the fast paths. */
static uint32_t crc_ref(const uint8_t *p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}

TEST(crc32c_known_values) {
  /* RFC 3720 check value and the iSCSI test vectors. */
  CHECK_EQ(stk_crc32c(0, "123456789", 9), 0xE3069283u);
  uint8_t z[32] = {0}, ff[32];
  memset(ff, 0xff, sizeof ff);
  CHECK_EQ(stk_crc32c(0, z, 32), 0x8A9136AAu);
  CHECK_EQ(stk_crc32c(0, ff, 32), 0x62A8AB43u);
  /* Every length and alignment around the folding block sizes agrees with
   * the bitwise reference, in one piece and in two. */
  size_t n = 3 * 2048 * 2 + 77;
  uint8_t *buf = malloc(n + 8);
  struct stk_rng r;
  stk_rng_seed(&r, 1);
  for (size_t i = 0; i < n + 8; i++) buf[i] = (uint8_t)stk_rng_next(&r);
  size_t lens[] = {0, 1, 7, 8, 9, 6143, 6144, 6145, 12288, n};
  for (size_t a = 0; a < 3; a++)
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      uint32_t want = crc_ref(buf + a, lens[k]);
      CHECK_MSG(stk_crc32c(0, buf + a, lens[k]) == want, "len %zu align %zu", lens[k], a);
      size_t h = lens[k] / 3;
      CHECK(stk_crc32c(stk_crc32c(0, buf + a, h), buf + a + h, lens[k] - h) == want);
    }
  free(buf);
  /* TFRecord mask of crc32c of 8 zero bytes (a zero length field). */
  CHECK_EQ(stk_crc32c_mask(0), 0xa282ead8u);
}

/* The fused copy and CRC32C: the same CRC as stk_crc32c and the same bytes
 * as memcpy, at every length around its lane blocks (3 x 8 KiB, 3 x 1 KiB)
 * and alignment, chained from a CRC so far, without writing past dst. */
TEST(crc32c_copy_matches) {
  size_t n = 3 * 8192 * 2 + 3 * 1024 + 515;
  uint8_t *src = malloc(n + 8), *dst = malloc(n + 16);
  struct stk_rng r;
  stk_rng_seed(&r, 3);
  for (size_t i = 0; i < n + 8; i++) src[i] = (uint8_t)stk_rng_next(&r);
  size_t lens[] = {0, 1, 8, 3071, 3072, 3073, 24575, 24576, 24577, 24576 + 3072, 131072 % n, n};
  for (size_t a = 0; a < 3; a++)
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      memset(dst, 0xa5, n + 16);
      uint32_t seed = k & 1 ? 0x1234567u : 0;
      uint32_t got = stk__crc32c_copy(seed, dst + a + 1, src + a, lens[k]);
      CHECK_MSG(got == stk_crc32c(seed, src + a, lens[k]), "len %zu align %zu", lens[k], a);
      CHECK(memcmp(dst + a + 1, src + a, lens[k]) == 0);
      CHECK_EQ(dst[a], 0xa5);
      CHECK_EQ(dst[a + 1 + lens[k]], 0xa5);
    }
  free(src);
  free(dst);
}

/* The zip CRC-32 (ISA-L) against zlib's, which npz files written by NumPy
 * carry: the check value, and every length and alignment around its
 * folding blocks, in one piece and chained. */
TEST(crc32_zip_matches_zlib) {
  CHECK_EQ(stk__crc32(0, "123456789", 9), 0xCBF43926u);
  size_t n = 4 * 4096 + 133;
  uint8_t *buf = malloc(n + 8);
  struct stk_rng r;
  stk_rng_seed(&r, 2);
  for (size_t i = 0; i < n + 8; i++) buf[i] = (uint8_t)stk_rng_next(&r);
  size_t lens[] = {0, 1, 15, 16, 63, 64, 255, 256, 257, 1023, 1024, 4097, n};
  for (size_t a = 0; a < 5; a++)
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      uint32_t want = (uint32_t)crc32(0, buf + a, (uInt)lens[k]);
      CHECK_MSG(stk__crc32(0, buf + a, lens[k]) == want, "len %zu align %zu", lens[k], a);
      size_t h = lens[k] / 3;
      CHECK(stk__crc32(stk__crc32(0, buf + a, h), buf + a + h, lens[k] - h) == want);
    }
  free(buf);
}

TEST(json_writer) {
  FILE *f = tmpfile();
  struct stk_json j;
  stk_json_init(&j, f, 0);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "name", "a\"b\n");
  stk_json_ku64(&j, "n", 3);
  stk_json_kdbl(&j, "nan", NAN);
  stk_json_key(&j, "arr");
  stk_json_arr_begin(&j);
  stk_json_u64(&j, 1);
  stk_json_obj_begin(&j);
  stk_json_obj_end(&j);
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
  fflush(f);
  rewind(f);
  char out[256] = {0};
  CHECK(fread(out, 1, sizeof out - 1, f) > 0);
  CHECK_STR(out, "{\"name\":\"a\\\"b\\n\",\"n\":3,\"nan\":null,\"arr\":[1,{}]}");
  fclose(f);
}

/* Names in the current directory other than . and .., joined by spaces. */
static void dir_names(char *out, size_t n) {
  char *o = NULL;
  CHECK_EQ(test_sh(&o, "ls -A"), 0);
  for (char *p = o; *p; p++)
    if (*p == '\n') *p = ' ';
  snprintf(out, n, "%s", o);
  free(o);
}

TEST(outfile_commit_replaces_whole) {
  char err[STK_ERRMSG_MAX], names[256];
  test_write_file("out.json", "old", 3);
  struct stk_outfile *o;
  CHECK_OK(stk_outfile_open(&o, "out.json", err));
  CHECK_STR(stk_outfile_path(o), "out.json");
  fputs("{\"new\": 1}\n", stk_outfile_stream(o));
  uint8_t *b = test_read_file("out.json", NULL); /* untouched until commit */
  CHECK_STR((char *)b, "old");
  free(b);
  CHECK_OK(stk_outfile_commit(o, err));
  b = test_read_file("out.json", NULL);
  CHECK_STR((char *)b, "{\"new\": 1}\n");
  free(b);
  dir_names(names, sizeof names);
  CHECK_STR(names, "out.json ");
  /* abort leaves the old file and no temporary */
  CHECK_OK(stk_outfile_open(&o, "out.json", err));
  fputs("partial", stk_outfile_stream(o));
  stk_outfile_abort(o);
  b = test_read_file("out.json", NULL);
  CHECK_STR((char *)b, "{\"new\": 1}\n");
  free(b);
  dir_names(names, sizeof names);
  CHECK_STR(names, "out.json ");
}

/* A write that cannot complete (here the file-size limit, as a full disk
 * would) fails at commit, naming the file, and leaves neither a partial
 * file nor the temporary. */
TEST(outfile_short_write_fails_and_leaves_nothing) {
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {4096, 4096};
  CHECK_OK(setrlimit(RLIMIT_FSIZE, &rl));
  char err[STK_ERRMSG_MAX], names[256];
  test_write_file("keep.svg", "<svg/>", 6);
  const char *paths[] = {"new.json", "keep.svg"};
  for (int k = 0; k < 2; k++) {
    struct stk_outfile *o;
    CHECK_OK(stk_outfile_open(&o, paths[k], err));
    for (int i = 0; i < 2000; i++) fprintf(stk_outfile_stream(o), "line %d of the report\n", i);
    int rc = stk_outfile_commit(o, err);
    CHECK(rc != 0);
    CHECK_CONTAINS(err, paths[k]);
    CHECK_CONTAINS(err, "File too large");
  }
  CHECK(access("new.json", F_OK) != 0);
  uint8_t *b = test_read_file("keep.svg", NULL);
  CHECK_STR((char *)b, "<svg/>");
  free(b);
  dir_names(names, sizeof names);
  CHECK_STR(names, "keep.svg ");
}

TEST(outfile_check_before_run) {
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_outfile_check("fine.json", err));
  CHECK_OK(stk_outfile_check("-", err));
  CHECK_EQ(stk_outfile_check("nodir/out.json", err), STK_ENOENT);
  CHECK_CONTAINS(err, "nodir/out.json: cannot write: directory nodir");
  test_write_file("afile", "x", 1);
  CHECK(stk_outfile_check("afile/out.json", err) != 0);
  CHECK_CONTAINS(err, "afile/out.json");
  mkdir("adir", 0755);
  CHECK_EQ(stk_outfile_check("adir", err), STK_EINVAL);
  CHECK_CONTAINS(err, "is a directory");
  struct stk_outfile *o = (struct stk_outfile *)1;
  CHECK(stk_outfile_open(&o, "nodir/x.svg", err) != 0);
  CHECK(o == NULL);
  CHECK(access("fine.json", F_OK) != 0); /* check creates nothing */
}

/* Replacing a file keeps its permissions, and a symlink is written through
 * (the link stays, its file gets the bytes). */
TEST(outfile_keeps_mode_and_symlink) {
  char err[STK_ERRMSG_MAX], names[256];
  mkdir("sub", 0755);
  test_write_file("sub/real.json", "old", 3);
  CHECK_OK(chmod("sub/real.json", 0600));
  CHECK_OK(symlink("sub/real.json", "link.json"));
  struct stk_outfile *o;
  CHECK_OK(stk_outfile_open(&o, "link.json", err));
  fputs("new", stk_outfile_stream(o));
  CHECK_OK(stk_outfile_commit(o, err));
  struct stat st;
  CHECK_OK(lstat("link.json", &st));
  CHECK(S_ISLNK(st.st_mode));
  CHECK_OK(stat("sub/real.json", &st));
  CHECK_EQ(st.st_mode & 0777, 0600);
  uint8_t *b = test_read_file("sub/real.json", NULL);
  CHECK_STR((char *)b, "new");
  free(b);
  dir_names(names, sizeof names);
  CHECK_STR(names, "link.json sub ");
  char *ls = NULL;
  CHECK_EQ(test_sh(&ls, "ls -A sub"), 0);
  CHECK_STR(ls, "real.json\n");
  free(ls);
}
