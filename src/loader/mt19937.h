/* NumPy's legacy random stream (numpy.random.RandomState): the MT19937
 * generator seeded from a 32-bit integer, its bounded draws, and its
 * in-place Fisher-Yates shuffle. Megatron-LM shuffles its GPT indices with
 * RandomState, so reproducing Megatron's sample order means reproducing
 * these draws bit for bit; tests/test_gpt_index.c checks them against NumPy. */
#ifndef STOKER_LOADER_MT19937_H
#define STOKER_LOADER_MT19937_H

#include <stdint.h>

#define STK__MT_N 624

struct stk__mt19937 {
  uint32_t key[STK__MT_N];
  int pos; /* next word of key to temper; STK__MT_N means regenerate first */
};

/* Seed as RandomState(seed) does for an integer seed (the reference
 * init_genrand of Matsumoto and Nishimura). NumPy refuses seeds outside
 * [0, 2^32), so the type says it all. */
void stk__mt_seed(struct stk__mt19937 *mt, uint32_t seed);

/* The next 32-bit output. */
uint32_t stk__mt_next32(struct stk__mt19937 *mt);

/* The next 64-bit output: two 32-bit outputs, the first one high, as
 * NumPy's MT19937 bit generator forms it. */
uint64_t stk__mt_next64(struct stk__mt19937 *mt);

/* A uniform integer in [0, max], drawn as NumPy's legacy random_interval
 * does: the smallest all-ones mask covering max, and masked draws rejected
 * while above max; 32-bit draws when max < 2^32, 64-bit draws otherwise. */
uint64_t stk__mt_interval(struct stk__mt19937 *mt, uint64_t max);

/* RandomState.shuffle of a one-dimensional array of n elements: for i from
 * n-1 down to 1, swap a[i] with a[random_interval(i)]. The element type
 * does not change the draws; one function per type Megatron shuffles. */
void stk__mt_shuffle_i32(struct stk__mt19937 *mt, int32_t *a, uint64_t n);
void stk__mt_shuffle_u32(struct stk__mt19937 *mt, uint32_t *a, uint64_t n);
void stk__mt_shuffle_i64(struct stk__mt19937 *mt, int64_t *a, uint64_t n);

#endif
