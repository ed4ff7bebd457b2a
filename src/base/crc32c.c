/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78). TFRecord verifies
 * every record with it, so it sits on the loader's hot path: on x86-64 the
 * SSE4.2 crc32 instruction runs three independent streams per block to hide
 * its 3-cycle latency, and the streams are joined with a table-driven shift.
 * Elsewhere a slicing-by-8 table does the work. */
#include <pthread.h>
#include <string.h>

#include "base.h"

static uint32_t tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    tab[0][i] = c;
  }
  for (int t = 1; t < 8; t++)
    for (uint32_t i = 0; i < 256; i++) tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    crc = (crc >> 8) ^ tab[0][(crc ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    v ^= crc;
    crc = tab[7][v & 0xff] ^ tab[6][(v >> 8) & 0xff] ^ tab[5][(v >> 16) & 0xff] ^
          tab[4][(v >> 24) & 0xff] ^ tab[3][(v >> 32) & 0xff] ^ tab[2][(v >> 40) & 0xff] ^
          tab[1][(v >> 48) & 0xff] ^ tab[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ tab[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Shifting a CRC forward over `len` zero bytes is a linear map; for the
 * fixed stream length used below it is precomputed as four byte tables. */
#define STREAM 2048 /* bytes per stream in one 3-stream block */
static uint32_t shift_tab[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec; i++, vec >>= 1)
    if (vec & 1) sum ^= mat[i];
  return sum;
}
static void gf2_square(uint32_t *sq, const uint32_t *mat) {
  for (int n = 0; n < 32; n++) sq[n] = gf2_times(mat, mat[n]);
}

/* Matrix that advances a raw CRC register over len zero bytes. */
static void zeros_op(uint32_t *even, size_t len) {
  uint32_t odd[32];
  odd[0] = 0x82F63B78u;
  for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
  gf2_square(even, odd); /* 2 zero bits */
  gf2_square(odd, even); /* 4 zero bits */
  /* odd now advances 4 bits; square until it advances one byte, then
   * compose by binary decomposition of len. */
  gf2_square(even, odd); /* 8 bits = 1 byte */
  uint32_t res[32], tmp[32];
  for (int n = 0; n < 32; n++) res[n] = 1u << n;
  uint32_t *cur = even, *other = odd;
  while (len) {
    if (len & 1) {
      for (int n = 0; n < 32; n++) tmp[n] = gf2_times(cur, res[n]);
      memcpy(res, tmp, sizeof res);
    }
    len >>= 1;
    if (!len) break;
    gf2_square(other, cur);
    uint32_t *t = cur;
    cur = other;
    other = t;
  }
  memcpy(even, res, sizeof res);
}

static void shift_init(void) {
  uint32_t op[32];
  zeros_op(op, STREAM);
  for (int k = 0; k < 4; k++)
    for (uint32_t i = 0; i < 256; i++) shift_tab[k][i] = gf2_times(op, i << (8 * k));
}

static inline uint32_t shift(uint32_t crc) {
  return shift_tab[0][crc & 0xff] ^ shift_tab[1][(crc >> 8) & 0xff] ^
         shift_tab[2][(crc >> 16) & 0xff] ^ shift_tab[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c0 = crc;
  while (n && ((uintptr_t)p & 7)) {
    c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    n--;
  }
  while (n >= 3 * STREAM) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t *a = p, *b = p + STREAM, *c = p + 2 * STREAM;
    for (size_t i = 0; i < STREAM; i += 8) {
      uint64_t va, vb, vc;
      memcpy(&va, a + i, 8);
      memcpy(&vb, b + i, 8);
      memcpy(&vc, c + i, 8);
      c0 = _mm_crc32_u64(c0, va);
      c1 = _mm_crc32_u64(c1, vb);
      c2 = _mm_crc32_u64(c2, vc);
    }
    c0 = shift((uint32_t)c0) ^ c1;
    c0 = shift((uint32_t)c0) ^ c2;
    p += 3 * STREAM;
    n -= 3 * STREAM;
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c0 = _mm_crc32_u64(c0, v);
    p += 8;
    n -= 8;
  }
  while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
  return (uint32_t)c0;
}

static int have_hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;
static void hw_init(void) {
  __builtin_cpu_init();
  have_hw = __builtin_cpu_supports("sse4.2");
  if (have_hw) shift_init();
}
#endif

uint32_t stk_crc32c(uint32_t crc, const void *data, size_t len) {
  crc = ~crc;
#if defined(__x86_64__)
  pthread_once(&hw_once, hw_init);
  if (have_hw) return ~crc_hw(crc, data, len);
#endif
  pthread_once(&tab_once, tab_init);
  return ~crc_sw(crc, data, len);
}

uint32_t stk_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
