/* Megatron-LM's GPT sample windows and blends, rebuilt in C: NumPy's legacy
 * RandomState stream, the document, sample and shuffle indices, the blend
 * indices and resume arithmetic, each checked against a reference that a
 * short NumPy script in the test computes independently of the C code. */
#include <math.h>
#include <unistd.h>

#include "../src/loader/mt19937.h"
#include "test.h"

#define NEED_NUMPY()                                                                          \
  do {                                                                                        \
    if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)             \
      SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test " \
           "installs python3-numpy)");                                                        \
  } while (0)

/* Run a Python script (written to ref.py) in the test's directory. */
static void run_py(const char *script) {
  test_write_file("ref.py", script, strlen(script));
  char *out = NULL;
  int rc = test_sh(&out, "/usr/bin/python3 ref.py");
  CHECK_MSG(rc == 0, "ref.py failed (%d): %s", rc, out ? out : "");
  free(out);
}

/* Read a raw little-endian array the script wrote; *n elements of size es. */
static void *read_arr(const char *path, size_t es, uint64_t *n) {
  size_t len = 0;
  uint8_t *p = test_read_file(path, &len);
  CHECK_MSG(p != NULL, "cannot read %s", path);
  CHECK_EQ(len % es, 0);
  *n = len / es;
  return p;
}

/* ---- NumPy's legacy MT19937 ------------------------------------------- */

static const uint32_t seeds[] = {0, 1, 1234, 5489, 0xdeadbeefu, 0xffffffffu};

/* The state after seeding, the raw 32-bit stream and the 64-bit masked
 * draws (randint over uint64 with a range past 2^32 takes the same path as
 * random_interval's 64-bit branch) for several seeds. */
TEST(gpt_mt19937_matches_numpy) {
  NEED_NUMPY();
  run_py("import numpy as np\n"
         "for s in [0, 1, 1234, 5489, 0xdeadbeef, 0xffffffff]:\n"
         "    rs = np.random.RandomState(s)\n"
         "    st = rs.get_state()\n"
         "    assert st[2] == 624\n"
         "    st[1].astype('<u4').tofile('key-%d' % s)\n"
         "    rs.randint(0, 2**32, size=3000, dtype=np.uint32).astype('<u4').tofile('raw-%d' % s)\n"
         "    rs.randint(0, 1001, size=500, dtype=np.uint32).astype('<u4').tofile('small-%d' % s)\n"
         "    rs.randint(0, 3 * 2**33 + 6, size=500, dtype=np.uint64).astype('<u8').tofile('big-%d' % s)\n");
  for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
    uint32_t s = seeds[k];
    char path[64];
    uint64_t n;
    struct stk__mt19937 mt;
    stk__mt_seed(&mt, s);
    snprintf(path, sizeof path, "key-%u", s);
    uint32_t *key = read_arr(path, 4, &n);
    CHECK_EQ(n, STK__MT_N);
    for (int i = 0; i < STK__MT_N; i++) CHECK_MSG(mt.key[i] == key[i], "seed %u key[%d]", s, i);
    free(key);
    snprintf(path, sizeof path, "raw-%u", s);
    uint32_t *raw = read_arr(path, 4, &n);
    CHECK_EQ(n, 3000);
    for (uint64_t i = 0; i < n; i++) {
      uint32_t v = stk__mt_next32(&mt);
      CHECK_MSG(v == raw[i], "seed %u output %" PRIu64 ": %u != %u", s, i, v, raw[i]);
    }
    free(raw);
    snprintf(path, sizeof path, "small-%u", s);
    uint32_t *sm = read_arr(path, 4, &n);
    for (uint64_t i = 0; i < n; i++) CHECK_EQ(stk__mt_interval(&mt, 1000), sm[i]);
    free(sm);
    snprintf(path, sizeof path, "big-%u", s);
    uint64_t *big = read_arr(path, 8, &n);
    CHECK_EQ(n, 500);
    for (uint64_t i = 0; i < n; i++) {
      uint64_t v = stk__mt_interval(&mt, 3ull * (1ull << 33) + 5);
      CHECK_MSG(v == big[i], "seed %u 64-bit draw %" PRIu64 ": %" PRIu64 " != %" PRIu64, s, i, v,
                big[i]);
    }
    free(big);
  }
}

/* RandomState.shuffle of int32, uint32 and int64 ranges of 0, 1, 2, 1000
 * and 2^20 elements, several seeds, two shuffles in a row on one state. */
TEST(gpt_shuffle_matches_numpy) {
  NEED_NUMPY();
  run_py("import numpy as np\n"
         "for s in [0, 1, 1234, 0xffffffff]:\n"
         "    for n in [0, 1, 2, 1000, 1 << 20]:\n"
         "        rs = np.random.RandomState(s)\n"
         "        a = np.arange(n, dtype=np.int32); rs.shuffle(a)\n"
         "        b = np.arange(n, dtype=np.uint32) + 7; rs.shuffle(b)\n"
         "        c = np.arange(n, dtype=np.int64) * 3; rs.shuffle(c)\n"
         "        a.astype('<i4').tofile('a-%d-%d' % (s, n))\n"
         "        b.astype('<u4').tofile('b-%d-%d' % (s, n))\n"
         "        c.astype('<i8').tofile('c-%d-%d' % (s, n))\n");
  static const uint32_t ss[] = {0, 1, 1234, 0xffffffffu};
  static const uint64_t ns[] = {0, 1, 2, 1000, 1u << 20};
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 5; j++) {
      uint32_t s = ss[i];
      uint64_t n = ns[j], m;
      int32_t *a = malloc(n * 4 + 4);
      uint32_t *b = malloc(n * 4 + 4);
      int64_t *c = malloc(n * 8 + 8);
      for (uint64_t k = 0; k < n; k++) {
        a[k] = (int32_t)k;
        b[k] = (uint32_t)k + 7;
        c[k] = (int64_t)k * 3;
      }
      struct stk__mt19937 mt;
      stk__mt_seed(&mt, s);
      stk__mt_shuffle_i32(&mt, a, n);
      stk__mt_shuffle_u32(&mt, b, n);
      stk__mt_shuffle_i64(&mt, c, n);
      char path[64];
      snprintf(path, sizeof path, "a-%u-%" PRIu64, s, n);
      void *ra = read_arr(path, 4, &m);
      CHECK_EQ(m, n);
      CHECK_MSG(n == 0 || memcmp(ra, a, n * 4) == 0, "int32 shuffle seed %u n %" PRIu64, s, n);
      snprintf(path, sizeof path, "b-%u-%" PRIu64, s, n);
      void *rb = read_arr(path, 4, &m);
      CHECK_MSG(n == 0 || memcmp(rb, b, n * 4) == 0, "uint32 shuffle seed %u n %" PRIu64, s, n);
      snprintf(path, sizeof path, "c-%u-%" PRIu64, s, n);
      void *rc = read_arr(path, 8, &m);
      CHECK_MSG(n == 0 || memcmp(rc, c, n * 8) == 0, "int64 shuffle seed %u n %" PRIu64, s, n);
      free(ra), free(rb), free(rc), free(a), free(b), free(c);
    }
}

/* The 64-bit branch of random_interval, by hand: with max = 2^32 the mask
 * is 2^33 - 1, so each draw is (hi << 32 | lo) & mask, i.e. bit 0 of the
 * first output above the second output, rejected while above 2^32. */
TEST(gpt_interval_64bit_branch) {
  struct stk__mt19937 a, b;
  stk__mt_seed(&a, 42);
  stk__mt_seed(&b, 42);
  for (int i = 0; i < 100; i++) {
    uint64_t want;
    do {
      uint64_t hi = stk__mt_next32(&b), lo = stk__mt_next32(&b);
      want = ((hi & 1) << 32) | lo;
    } while (want > (1ull << 32));
    CHECK_EQ(stk__mt_interval(&a, 1ull << 32), want);
  }
  /* max 0 draws nothing; max 2^32 - 1 takes exactly one 32-bit output */
  stk__mt_seed(&a, 7);
  stk__mt_seed(&b, 7);
  CHECK_EQ(stk__mt_interval(&a, 0), 0);
  CHECK_EQ(stk__mt_interval(&a, 0xffffffffu), stk__mt_next32(&b));
  CHECK_EQ(stk__mt_next32(&a), stk__mt_next32(&b));
}
