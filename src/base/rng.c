/* Seeded pseudo-random numbers: xoshiro256** (Blackman and Vigna), seeded
 * through splitmix64 so that any 64-bit seed gives a well-mixed state. The
 * same seed yields the same stream everywhere, which is what makes shuffles
 * and generated datasets reproducible. */
#include <math.h>
#include <string.h>

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

/* stk_rng_next with the state in locals, so the loop keeps it in registers
 * instead of loading and storing it through r for every 8 bytes. The
 * result is stored with memcpy on little-endian hosts (one unaligned store)
 * and byte by byte elsewhere, so the bytes are the same everywhere. */
#define RNG_STEP(out)                     \
  do {                                    \
    (out) = rotl(s1 * 5, 7) * 9;          \
    uint64_t t_ = s1 << 17;               \
    s2 ^= s0;                             \
    s3 ^= s1;                             \
    s1 ^= s2;                             \
    s0 ^= s3;                             \
    s2 ^= t_;                             \
    s3 = rotl(s3, 45);                    \
  } while (0)

static inline void store64(uint8_t *p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(p, &v, 8);
#else
  stk__st64(p, v);
#endif
}

void stk_rng_fill(struct stk_rng *r, void *buf, size_t n) {
  uint64_t s0 = r->s[0], s1 = r->s[1], s2 = r->s[2], s3 = r->s[3], v;
  uint8_t *p = buf;
  for (; n >= 32; n -= 32, p += 32) {
    RNG_STEP(v);
    store64(p, v);
    RNG_STEP(v);
    store64(p + 8, v);
    RNG_STEP(v);
    store64(p + 16, v);
    RNG_STEP(v);
    store64(p + 24, v);
  }
  for (; n >= 8; n -= 8, p += 8) {
    RNG_STEP(v);
    store64(p, v);
  }
  if (n) {
    RNG_STEP(v);
    for (size_t i = 0; i < n; i++, v >>= 8) p[i] = (uint8_t)v;
  }
  r->s[0] = s0;
  r->s[1] = s1;
  r->s[2] = s2;
  r->s[3] = s3;
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
