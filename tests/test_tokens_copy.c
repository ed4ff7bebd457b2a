/* One piece's tokens into a row (src/loader/tokens_copy.c): every Megatron
 * integer dtype into int32 and int64 rows, at every length around the
 * vector loops' 16- and 32-token steps and at unaligned places, against
 * values decoded here one by one, on both paths (SSE2 where built, plain
 * C); nothing outside the piece is written. */
#include <stdlib.h>
#include <string.h>

#include "../src/loader/tokens_impl.h"
#include "stoker/util.h"
#include "test.h"

/* Token i of dtype code (size ts) at p, as the reader must see it. */
static int64_t expect(int code, const uint8_t *p, size_t i) {
  switch (code) {
    case 1: return p[i];
    case 2: return (int8_t)p[i];
    case 3: return (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case 8: return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case 4: {
      uint32_t v = 0;
      for (int b = 3; b >= 0; b--) v = v << 8 | p[4 * i + (size_t)b];
      return (int32_t)v;
    }
    default: {
      uint64_t v = 0;
      for (int b = 7; b >= 0; b--) v = v << 8 | p[8 * i + (size_t)b];
      return (int64_t)v;
    }
  }
}

TEST(tokens_copy_every_dtype_and_length) {
  static const int codes[] = {1, 2, 3, 4, 5, 8};
  static const size_t sizes[] = {1, 1, 2, 4, 8, 2};
  enum { MAXN = 140, PAD = 8 }; /* past 4 of the 32-token passes */
  uint8_t src[MAXN * 8 + 8];
  int64_t row64[MAXN + 2 * PAD];
  int32_t row32[MAXN + 2 * PAD];
  struct stk_rng rng;
  stk_rng_seed(&rng, 18);
  int cases = 0, levels = stk__tok_level(-1);
  for (int level = 0; level <= levels; level++) {
    CHECK_EQ(stk__tok_level(level), level); /* plain C, then SSE2 */
    for (int c = 0; c < 6; c++) {
      for (size_t es = 4; es <= 8; es += 4) {
        for (uint64_t n = 0; n <= MAXN; n++) {
          size_t so = n % 4, at = n % 5 + 1; /* unaligned source and row places */
          for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)stk_rng_next(&rng);
          if (codes[c] == 5 && es == 4) /* int64 into int32: only values that fit */
            for (size_t i = 0; i < n; i++) {
              uint8_t *t = src + so + 8 * i;
              memset(t + 4, t[3] & 0x80 ? 0xff : 0, 4);
            }
          memset(row64, 0x5a, sizeof row64);
          memset(row32, 0x5a, sizeof row32);
          void *row = es == 4 ? (void *)row32 : (void *)row64;
          stk__tok_put(row, es, (uint32_t)at, src + so, codes[c], sizes[c], n);
          for (size_t i = 0; i < MAXN + 2 * PAD; i++) {
            int64_t got = es == 4 ? row32[i] : row64[i];
            int64_t want;
            if (i >= at && i < at + n)
              want = expect(codes[c], src + so, i - at);
            else
              want = es == 4 ? (int32_t)0x5a5a5a5a : (int64_t)0x5a5a5a5a5a5a5a5aLL;
            if (es == 4 && i >= at && i < at + n) want = (int32_t)want;
            CHECK_MSG(got == want,
                      "level %d, dtype %d into int%zu, n %llu, element %zu: %lld, want %lld", level,
                      codes[c], es * 8, (unsigned long long)n, i, (long long)got, (long long)want);
            if (got != want) return;
          }
          cases++;
        }
      }
    }
  }
  stk__tok_level(levels);
  CHECK_EQ(cases, (levels + 1) * 6 * 2 * 141);
}
