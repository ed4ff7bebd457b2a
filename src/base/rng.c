/* Seeded pseudo-random numbers: xoshiro256** (Blackman and Vigna), seeded
 * through splitmix64 so that any 64-bit seed gives a well-mixed state. The
 * same seed yields the same stream everywhere, which is what makes shuffles
 * and generated datasets reproducible. */
#include <math.h>

#include "base.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t stk_mix64(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull);
  splitmix64(&x);
  return splitmix64(&x);
}

void stk_rng_seed(struct stk_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t stk_rng_next(struct stk_rng *r) {
  uint64_t *s = r->s;
  uint64_t res = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return res;
}

/* Lemire's multiply-and-reject: unbiased and nearly always one multiply. */
uint64_t stk_rng_below(struct stk_rng *r, uint64_t bound) {
  unsigned __int128 m = (unsigned __int128)stk_rng_next(r) * bound;
  uint64_t lo = (uint64_t)m;
  if (lo < bound) {
    uint64_t thresh = -bound % bound;
    while (lo < thresh) {
      m = (unsigned __int128)stk_rng_next(r) * bound;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

double stk_rng_double(struct stk_rng *r) {
  return (double)(stk_rng_next(r) >> 11) * 0x1.0p-53;
}

double stk_rng_normal(struct stk_rng *r) {
  double u1 = stk_rng_double(r), u2 = stk_rng_double(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
