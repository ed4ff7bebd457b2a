/* Tests of src/base: errors, parsing, RNG, CRC32C, JSON. */
#include <math.h>

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
  /* Every length and alignment around the 3-stream block size agrees with
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
