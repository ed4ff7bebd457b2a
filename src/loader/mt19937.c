/* NumPy's legacy RandomState stream, written from the published MT19937
 * algorithm (Matsumoto and Nishimura, 1998) and NumPy's documented legacy
 * draws, so that stoker can shuffle exactly as Megatron-LM does without
 * Python. See mt19937.h for the contracts. */
#include "mt19937.h"

#define MT_M 397
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu
#define MT_TWIST 0x9908b0dfu

void stk__mt_seed(struct stk__mt19937 *mt, uint32_t seed) {
  mt->key[0] = seed;
  for (uint32_t i = 1; i < STK__MT_N; i++) {
    uint32_t prev = mt->key[i - 1];
    mt->key[i] = 1812433253u * (prev ^ (prev >> 30)) + i;
  }
  mt->pos = STK__MT_N;
}

/* Refill the whole state at once: word i mixes the top bit of word i and
 * the low bits of word i+1, then folds in word i+397 (indices mod 624). */
static void regenerate(struct stk__mt19937 *mt) {
  uint32_t *k = mt->key;
  for (int i = 0; i < STK__MT_N; i++) {
    uint32_t y = (k[i] & MT_UPPER) | (k[(i + 1) % STK__MT_N] & MT_LOWER);
    k[i] = k[(i + MT_M) % STK__MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_TWIST : 0u);
  }
  mt->pos = 0;
}

uint32_t stk__mt_next32(struct stk__mt19937 *mt) {
  if (mt->pos >= STK__MT_N) regenerate(mt);
  uint32_t y = mt->key[mt->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t stk__mt_next64(struct stk__mt19937 *mt) {
  uint64_t hi = stk__mt_next32(mt);
  return hi << 32 | stk__mt_next32(mt);
}

uint64_t stk__mt_interval(struct stk__mt19937 *mt, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffu) {
    do v = stk__mt_next32(mt) & mask;
    while (v > max);
  } else {
    do v = stk__mt_next64(mt) & mask;
    while (v > max);
  }
  return v;
}

/* The draws do not depend on the array, so they are made a block ahead
 * and the elements they will touch are prefetched: a shuffle of tens of
 * millions of elements waits on memory, not on the generator, and this
 * keeps many of those waits in flight at once. The swaps themselves still
 * run in NumPy's order, so the result is the same. */
#define SHUFFLE_BLOCK 256
#define SHUFFLE_AHEAD 32

#define DEFINE_SHUFFLE(name, type)                                                            \
  void name(struct stk__mt19937 *mt, type *a, uint64_t n) {                                   \
    uint64_t js[SHUFFLE_BLOCK];                                                               \
    uint64_t i = n > 0 ? n - 1 : 0;                                                           \
    while (i >= 1) {                                                                          \
      uint64_t m = i < SHUFFLE_BLOCK ? i : SHUFFLE_BLOCK;                                     \
      for (uint64_t k = 0; k < m; k++) js[k] = stk__mt_interval(mt, i - k);                   \
      for (uint64_t k = 0; k < SHUFFLE_AHEAD && k < m; k++) __builtin_prefetch(&a[js[k]], 1); \
      for (uint64_t k = 0; k < m; k++, i--) {                                                 \
        if (k + SHUFFLE_AHEAD < m) __builtin_prefetch(&a[js[k + SHUFFLE_AHEAD]], 1);          \
        type t = a[i];                                                                        \
        a[i] = a[js[k]];                                                                      \
        a[js[k]] = t;                                                                         \
      }                                                                                       \
    }                                                                                         \
  }

DEFINE_SHUFFLE(stk__mt_shuffle_i32, int32_t)
DEFINE_SHUFFLE(stk__mt_shuffle_u32, uint32_t)
DEFINE_SHUFFLE(stk__mt_shuffle_i64, int64_t)
