/* The per-token part of serving a window (issue 18, T3): one document
 * piece's tokens from the corpus into a row of int32 or int64, widened.
 *
 * The common widenings run 16 tokens at a time in SSE2 (x86-64's
 * baseline: no cpuid check), a dtype that already matches is a memcpy,
 * and the tail and other machines take the plain loops below, which give
 * the same values. The tokens are little-endian, as Megatron writes them
 * and as this host reads them (the plain loops load them natively too).
 * AVX2 (one widening load and one 32-byte store per 8 tokens) was tried
 * with a run-time CPU check and not kept: no faster here, as the copy
 * waits on memory, not on instructions (docs/internals/tokens.md). */
#include <string.h>

#include "../base/base.h"
#include "tokens_impl.h"

/* -DSTK_NO_SSE2 leaves the token copy in plain C; stk__tok_level(0) does
 * the same at run time (the tests take both paths). */
#if defined(__SSE2__) && !defined(STK_NO_SSE2)
#include <emmintrin.h>
#define TOK_SSE2 1
#endif

/* Megatron's dtype codes (format/megatron.c). */
enum { U8 = 1, I8 = 2, I16 = 3, I32 = 4, I64 = 5, U16 = 8 };

/* This thread's plan: the next window's pieces (stk__tok_ahead_add),
 * whose lines the copy of the current window asks for one per 64 bytes it
 * reads (issue 18, T3). Asked for in one burst before the copy, they
 * were no better: the load queue fills and the copy waits behind it. */
struct ahead {
  const uint8_t *p[STK__TOK_AHEAD_PIECES];
  uint32_t len[STK__TOK_AHEAD_PIECES];
  int n, i;     /* pieces planned; the one being asked for */
  uint32_t off; /* bytes of it asked for */
};
static _Thread_local struct ahead ahead_plan;

/* Ask for the plan's next line. A prefetch never faults, so a plan left
 * from a corpus since closed does no harm. */
static inline __attribute__((always_inline)) void ahead_step(struct ahead *a) {
  if (a->i >= a->n) return;
  __builtin_prefetch(a->p[a->i] + a->off);
  a->off += 64;
  if (a->off >= a->len[a->i]) a->i++, a->off = 0;
}

#ifdef TOK_SSE2
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 16 tokens as four vectors of four int32 (a struct, not an array, so
 * they stay in registers). */
struct v4 {
  __m128i v0, v1, v2, v3;
};

ALWAYS_INLINE __m128i ld(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

/* 16 tokens of dtype code from p, as int32. */
ALWAYS_INLINE struct v4 widen16(int code, const uint8_t *p) {
  const __m128i z = _mm_setzero_si128();
  __m128i a = ld(p), b;
  switch (code) {
    case U16: /* zero-extend */
      b = ld(p + 16);
      return (struct v4){_mm_unpacklo_epi16(a, z), _mm_unpackhi_epi16(a, z),
                         _mm_unpacklo_epi16(b, z), _mm_unpackhi_epi16(b, z)};
    case I16: /* into the high half, then shift down arithmetically */
      b = ld(p + 16);
      return (struct v4){_mm_srai_epi32(_mm_unpacklo_epi16(z, a), 16),
                         _mm_srai_epi32(_mm_unpackhi_epi16(z, a), 16),
                         _mm_srai_epi32(_mm_unpacklo_epi16(z, b), 16),
                         _mm_srai_epi32(_mm_unpackhi_epi16(z, b), 16)};
    case U8:
      b = _mm_unpacklo_epi8(a, z), a = _mm_unpackhi_epi8(a, z);
      return (struct v4){_mm_unpacklo_epi16(b, z), _mm_unpackhi_epi16(b, z),
                         _mm_unpacklo_epi16(a, z), _mm_unpackhi_epi16(a, z)};
    case I8:
      b = _mm_unpacklo_epi8(z, a), a = _mm_unpackhi_epi8(z, a);
      return (struct v4){_mm_srai_epi32(_mm_unpacklo_epi16(z, b), 24),
                         _mm_srai_epi32(_mm_unpackhi_epi16(z, b), 24),
                         _mm_srai_epi32(_mm_unpacklo_epi16(z, a), 24),
                         _mm_srai_epi32(_mm_unpackhi_epi16(z, a), 24)};
    default: /* I32 (to int64 only) */
      return (struct v4){a, ld(p + 16), ld(p + 32), ld(p + 48)};
  }
}

ALWAYS_INLINE void st(uint8_t *d, __m128i v) { _mm_storeu_si128((__m128i *)(void *)d, v); }

/* Four int32 to d: as they are, or extended to int64 (by their sign; by
 * zeros when they were unsigned tokens, which cannot be negative). */
ALWAYS_INLINE void store4(size_t es, int unsig, uint8_t *d, __m128i v) {
  if (es == 4) return st(d, v);
  __m128i sg = unsig ? _mm_setzero_si128() : _mm_srai_epi32(v, 31);
  st(d, _mm_unpacklo_epi32(v, sg));
  st(d + 16, _mm_unpackhi_epi32(v, sg));
}

/* 16 tokens of dtype code from p to d. */
ALWAYS_INLINE void put16(size_t es, uint8_t *d, const uint8_t *p, int code) {
  struct v4 v = widen16(code, p);
  int u = code == U16 || code == U8;
  store4(es, u, d, v.v0);
  store4(es, u, d + 4 * es, v.v1);
  store4(es, u, d + 8 * es, v.v2);
  store4(es, u, d + 12 * es, v.v3);
}

/* Tokens 32 at a time from p to d, the next lines of the piece asked for
 * ahead (one prefetch per 64 bytes read for 2-byte tokens), and as many
 * lines of the next window's plan. Inlined with
 * constant code, ts and es by put_vec, so each pair of dtypes gets its own
 * loop without a branch on either (issue 18, T3: the loop that branched on
 * both per 16 tokens took 2.6 instructions per token). Plain stores:
 * non-temporal ones measured slower here (the batch ring fits the
 * last-level cache; docs/internals/tokens.md). Returns how many it wrote,
 * a multiple of 16 at most n. */
ALWAYS_INLINE uint64_t put_sse2(uint8_t *d, size_t es, const uint8_t *p, int code, size_t ts,
                                uint64_t n) {
  uint64_t i = 0;
  struct ahead *a = &ahead_plan;
  for (; i + 32 <= n; i += 32) {
    const uint8_t *q = p + i * ts;
    ahead_step(a);
    if (ts > 2) ahead_step(a);
    __builtin_prefetch(q + 512);
    if (ts > 2) __builtin_prefetch(q + 576);
    put16(es, d + i * es, q, code);
    put16(es, d + (i + 16) * es, q + 16 * ts, code);
  }
  if (i + 16 <= n) {
    put16(es, d + i * es, p + i * ts, code);
    i += 16;
  }
  return i;
}

/* The loop for one pair of dtypes; 0 for a pair it does not take. */
static uint64_t put_vec(uint8_t *d, size_t es, const uint8_t *p, int code, uint64_t n) {
  switch (code * 16 + (int)es) {
    case U16 * 16 + 4: return put_sse2(d, 4, p, U16, 2, n);
    case U16 * 16 + 8: return put_sse2(d, 8, p, U16, 2, n);
    case I16 * 16 + 4: return put_sse2(d, 4, p, I16, 2, n);
    case I16 * 16 + 8: return put_sse2(d, 8, p, I16, 2, n);
    case U8 * 16 + 4: return put_sse2(d, 4, p, U8, 1, n);
    case U8 * 16 + 8: return put_sse2(d, 8, p, U8, 1, n);
    case I8 * 16 + 4: return put_sse2(d, 4, p, I8, 1, n);
    case I8 * 16 + 8: return put_sse2(d, 8, p, I8, 1, n);
    case I32 * 16 + 8: return put_sse2(d, 8, p, I32, 4, n);
    default: return 0; /* a matching dtype (memcpy below), int64 to int32 */
  }
}
#endif

/* The path taken: 1 SSE2 where built, 0 plain C (stk__tok_level). */
#ifdef TOK_SSE2
static int tok_level = 1;
#else
static int tok_level = 0;
#endif

int stk__tok_level(int level) {
#ifdef TOK_SSE2
  if (level >= 0) tok_level = STK__MIN(level, 1);
#else
  (void)level;
#endif
  return tok_level;
}

/* n tokens the plain way (the reference for the SSE2 path); the tokens
 * may sit at any address, so they are loaded bytewise-safe. */
static void put_plain(void *dst, size_t es, uint32_t at, const uint8_t *p, int code, uint64_t n) {
  uint64_t i;
  if (es == 4) {
    int32_t *d = (int32_t *)dst + at;
    switch (code) {
      case I32:
        memcpy(d, p, n * 4);
        return;
      case U16:
        for (i = 0; i < n; i++) d[i] = stk__ld16(p + 2 * i);
        return;
      case I16:
        for (i = 0; i < n; i++) d[i] = (int16_t)stk__ld16(p + 2 * i);
        return;
      case U8:
        for (i = 0; i < n; i++) d[i] = p[i];
        return;
      case I8:
        for (i = 0; i < n; i++) d[i] = (int8_t)p[i];
        return;
      default:
        for (i = 0; i < n; i++) d[i] = (int32_t)(int64_t)stk__ld64(p + 8 * i);
        return;
    }
  }
  int64_t *d = (int64_t *)dst + at;
  switch (code) {
    case I64:
      memcpy(d, p, n * 8);
      return;
    case I32:
      for (i = 0; i < n; i++) d[i] = (int32_t)stk__ld32(p + 4 * i);
      return;
    case U16:
      for (i = 0; i < n; i++) d[i] = stk__ld16(p + 2 * i);
      return;
    case I16:
      for (i = 0; i < n; i++) d[i] = (int16_t)stk__ld16(p + 2 * i);
      return;
    case U8:
      for (i = 0; i < n; i++) d[i] = p[i];
      return;
    default:
      for (i = 0; i < n; i++) d[i] = (int8_t)p[i];
      return;
  }
}

void stk__tok_put(void *dst, size_t es, uint32_t at, const uint8_t *p, int code, size_t ts,
                  uint64_t n) {
#ifdef TOK_SSE2
  if (tok_level) {
    uint64_t i = put_vec((uint8_t *)dst + (size_t)at * es, es, p, code, n);
    at += (uint32_t)i, p += i * ts, n -= i;
  }
#endif
  (void)ts;
  put_plain(dst, es, at, p, code, n);
}

void stk__tok_ahead_add(const uint8_t *p, uint64_t bytes) {
  struct ahead *a = &ahead_plan;
  if (a->n == STK__TOK_AHEAD_PIECES || bytes == 0) return;
  uint64_t skew = (uint64_t)(uintptr_t)p & 63; /* from the line p lies in */
  a->p[a->n] = p - skew;
  a->len[a->n++] = (uint32_t)STK__MIN(bytes + skew, (uint64_t)1 << 24);
}

void stk__tok_ahead_begin(void) {
  struct ahead *a = &ahead_plan;
  while (a->i < a->n) ahead_step(a); /* what the last copy left (a memcpy asks for none) */
  a->n = a->i = 0, a->off = 0;
}
