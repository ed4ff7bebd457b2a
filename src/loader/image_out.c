/* Decoded planes to the output tensor, for every image format (image.h):
 * the resize works in strips of 16 output rows that stay in L1: a
 * vertical pass over the crop's columns, a 16x16-block transpose, the
 * horizontal pass done as a vertical one (so both passes are plain SIMD
 * multiply-adds, with no per-pixel gathers), a transpose back, then
 * colour conversion, normalization and layout. The weights are
 * torchvision's antialiased bilinear ones (resize.h); a JPEG's subsampled
 * chroma planes get weights that fold in libjpeg's upsampling, so its
 * colour conversion runs at output size only. */
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "resize.h"

/* SSE2 is part of x86-64; -DSTK_NO_SSE2 builds the plain C fallback that
 * other targets use, so it can be tested here. */
#if defined(__SSE2__) && !defined(STK_NO_SSE2)
#define USE_SSE2 1
#include <emmintrin.h>
/* The resize's multiply-adds also come in AVX2, chosen per thread at run
 * time (cpuid), twice the width for the same instruction count;
 * -DSTK_NO_AVX2 leaves them SSE2, to test that path here. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(STK_NO_AVX2)
#define USE_AVX2 1
#include <immintrin.h>
#endif
#endif

#define STRIP 16 /* output rows per strip = transpose block */
#define PAD16(n) (((size_t)(n) + 15) & ~(size_t)15)

/* One axis of a resize: output index i reads taps source samples from
 * lo + ofs[i], step apart, with weights wt[i * stride ...] in Q(prec)
 * (resize.h); [lo, hi) is the span the taps touch. Units are bytes along
 * a row, rows down. */
struct axis {
  int32_t *ofs;
  int16_t *wt;
  int stride, taps, prec, step, lo, hi;
};

/* A decoded plane (or the packed RGB pixels, nch = 3) and its axes. */
struct plane {
  const uint8_t *base;
  size_t stride;
  const struct axis *ax, *ay;
  int nch;
};

/* Per-thread state: buffers that only grow. */
struct stk__img_out {
  int avx2;      /* the CPU has AVX2: the resize passes use it */
  uint8_t *span; /* STRIP vertically resized rows, then transposed */
  size_t span_cap;
  void *tab; /* axes and strip buffers, one allocation */
  void *wts; /* the axes' weights and build scratch, sized per image */
  size_t wts_cap;
  /* The geometry the axes were last built for (x, y per plane geometry):
   * images of one size in eval mode reuse them. geo_n 0: none. */
  struct stk__rs_geom geo[4];
  int geo_n, geo_unit;
  int tab_w, tab_h;
  struct axis ax[2], ay[2]; /* [0] luma or pixels, [1] chroma */
  uint8_t *cols;            /* PAD16(ow) resized columns of STRIP rows */
  uint8_t *strip[3];        /* STRIP x PAD16(ow) per channel: Y/Cb/Cr, then R/G/B */
  float *frow;              /* f32 row staging when out is not 4-byte aligned */
  uint8_t *irow;            /* one interleaved RGB row, for f32 HWC */
};

/* Build one axis of a plane from its geometry (resize.h): the taps as
 * byte offsets from the span's start, unit bytes per sample. Entries from
 * out up to PAD16(out) repeat the last one, for the 16-wide passes. */
static void build_axis(struct axis *a, const struct stk__rs_geom *g, int unit, int16_t *wt,
                       double *scratch) {
  struct stk__rs_axis rs = {a->ofs, wt, 0, 0, 0};
  stk__rs_build(&rs, g, scratch);
  int out = g->count;
  a->wt = wt;
  a->stride = rs.stride;
  a->taps = rs.taps;
  a->prec = rs.prec;
  for (size_t i = (size_t)out; i < PAD16(out); i++) {
    a->ofs[i] = a->ofs[out - 1];
    memcpy(wt + i * rs.stride, wt + (size_t)(out - 1) * rs.stride, sizeof *wt * rs.stride);
  }
  int32_t lo = a->ofs[0], hi = a->ofs[0];
  for (int i = 0; i < out; i++) {
    lo = STK__MIN(lo, a->ofs[i]);
    hi = STK__MAX(hi, a->ofs[i]);
  }
  a->step = unit;
  a->lo = lo * unit;
  a->hi = (hi + rs.taps) * unit;
  for (size_t i = 0; i < PAD16(out); i++) a->ofs[i] = (a->ofs[i] - lo) * unit;
}

/* ---- per-thread state ------------------------------------------------ */

static int grow(void **buf, size_t *cap, size_t need, char *err) {
  if (need <= *cap) return 0;
  size_t n = need + need / 4;
  void *p = malloc(n);
  if (!p) return stk__errf(err, STK_ENOMEM, "image: out of memory for %zu bytes", n);
  free(*buf);
  *buf = p;
  *cap = n;
  return 0;
}

/* Size the axis tables and strip buffers for an oh x ow output. */
static int tls_tables(struct stk__img_out *t, int oh, int ow, char *err) {
  if (t->tab && t->tab_w >= ow && t->tab_h >= oh) return 0;
  size_t w = PAD16(STK__MAX(ow, t->tab_w)), h = PAD16(STK__MAX(oh, t->tab_h));
  size_t bytes =
      sizeof(float) * 3 * w + 2 * sizeof(int32_t) * (w + h) + (size_t)STRIP * w * 4 + 3 * w + 16;
  uint8_t *p = malloc(bytes);
  if (!p) return stk__errf(err, STK_ENOMEM, "image: out of memory for resize tables");
  free(t->tab);
  t->tab = p;
  t->geo_n = 0;
  t->tab_w = (int)w;
  t->tab_h = (int)h;
  t->frow = (float *)(void *)p;
  p += sizeof(float) * 3 * w;
  for (int k = 0; k < 2; k++) {
    t->ax[k].ofs = (int32_t *)(void *)p, p += sizeof(int32_t) * w;
    t->ay[k].ofs = (int32_t *)(void *)p, p += sizeof(int32_t) * h;
  }
  t->cols = p, p += STRIP * w;
  for (int k = 0; k < 3; k++) t->strip[k] = p, p += STRIP * w;
  t->irow = p;
  return 0;
}

/* ---- resize, colour, output ------------------------------------------ */

/* The inner loops use SSE2, which every x86-64 CPU has, with plain C for
 * other targets; the -O2 auto-vectorizer would leave them scalar. */

/* One pass of the resize: dst[x] = (2^(prec-1) + sum over k < taps of
 * src[k * step + x] * w[k]) >> prec, saturated to 0..255, for x < n (a
 * multiple of 16). Two taps a step: their bytes interleaved to 16-bit
 * pairs that pmaddwd multiplies by the pair of weights and adds. */
static void conv16(const uint8_t *src, size_t step, const int16_t *w, int taps, int prec,
                   uint8_t *dst, size_t n) {
#ifdef USE_SSE2
  const __m128i zero = _mm_setzero_si128(), init = _mm_set1_epi32(1 << (prec - 1));
  const __m128i shift = _mm_cvtsi32_si128(prec);
  for (size_t x = 0; x < n; x += 16) {
    __m128i s0 = init, s1 = init, s2 = init, s3 = init;
    const uint8_t *p = src + x;
    for (int k = 0; k < taps; k += 2, p += 2 * step) {
      int last = k + 1 == taps;
      __m128i wk = _mm_set1_epi32(
          (int)((uint32_t)(uint16_t)w[k] | (last ? 0u : (uint32_t)(uint16_t)w[k + 1] << 16)));
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)p);
      __m128i b = last ? zero : _mm_loadu_si128((const __m128i *)(const void *)(p + step));
      __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
      s0 = _mm_add_epi32(s0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), wk));
      s1 = _mm_add_epi32(s1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), wk));
      s2 = _mm_add_epi32(s2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), wk));
      s3 = _mm_add_epi32(s3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), wk));
    }
    s0 = _mm_sra_epi32(s0, shift), s1 = _mm_sra_epi32(s1, shift);
    s2 = _mm_sra_epi32(s2, shift), s3 = _mm_sra_epi32(s3, shift);
    __m128i v = _mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3));
    _mm_storeu_si128((__m128i *)(void *)(dst + x), v);
  }
#else
  for (size_t x = 0; x < n; x++) {
    int32_t acc = 1 << (prec - 1);
    for (int k = 0; k < taps; k++) acc += (int32_t)src[k * step + x] * w[k];
    acc >>= prec;
    dst[x] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
  }
#endif
}

#ifdef USE_AVX2
/* The two weights of taps k and k + 1 (0 past the last) as one 32-bit
 * lane, the pmaddwd operand. */
static inline int wpair(const int16_t *w, int k, int taps) {
  return (int)((uint32_t)(uint16_t)w[k] | (k + 1 < taps ? (uint32_t)(uint16_t)w[k + 1] << 16 : 0u));
}

/* Four 8-pixel multiply-add rounds of 16-bit pairs, then shift and pack:
 * the body both AVX2 passes share. a, b: taps k and k + 1. */
#define AVX2_MADD(s, a, b, wk, zero)                                                       \
  do {                                                                                     \
    __m256i lo_ = _mm256_unpacklo_epi8(a, b), hi_ = _mm256_unpackhi_epi8(a, b);            \
    s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(lo_, zero), wk)); \
    s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(lo_, zero), wk)); \
    s[2] = _mm256_add_epi32(s[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(hi_, zero), wk)); \
    s[3] = _mm256_add_epi32(s[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(hi_, zero), wk)); \
  } while (0)

__attribute__((target("avx2"))) static inline __m256i avx2_pack(__m256i s[4], int prec) {
  const __m128i shift = _mm_cvtsi32_si128(prec);
  for (int q = 0; q < 4; q++) s[q] = _mm256_sra_epi32(s[q], shift);
  /* The lane-wise unpacks and packs undo each other: bytes stay in order. */
  return _mm256_packus_epi16(_mm256_packs_epi32(s[0], s[1]), _mm256_packs_epi32(s[2], s[3]));
}

/* conv16, 32 bytes a step (the last 16 by conv16). */
__attribute__((target("avx2"))) static void conv_avx2(const uint8_t *src, size_t step,
                                                      const int16_t *w, int taps, int prec,
                                                      uint8_t *dst, size_t n) {
  const __m256i zero = _mm256_setzero_si256(), init = _mm256_set1_epi32(1 << (prec - 1));
  size_t x = 0;
  for (; x + 32 <= n; x += 32) {
    __m256i s[4] = {init, init, init, init};
    const uint8_t *p = src + x;
    for (int k = 0; k < taps; k += 2, p += 2 * step) {
      __m256i wk = _mm256_set1_epi32(wpair(w, k, taps));
      __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)p);
      __m256i b =
          k + 1 < taps ? _mm256_loadu_si256((const __m256i *)(const void *)(p + step)) : zero;
      AVX2_MADD(s, a, b, wk, zero);
    }
    _mm256_storeu_si256((__m256i *)(void *)(dst + x), avx2_pack(s, prec));
  }
  if (x < n) conv16(src + x, step, w, taps, prec, dst + x, n - x);
}

/* conv16 for two outputs of 16 bytes at once, from s0 with weights w0 to
 * dst[0..16) and from s1 with w1 to dst[16..32): one in each 128-bit lane. */
__attribute__((target("avx2"))) static void conv_pair_avx2(const uint8_t *s0, const uint8_t *s1,
                                                           size_t step, const int16_t *w0,
                                                           const int16_t *w1, int taps, int prec,
                                                           uint8_t *dst) {
  const __m256i zero = _mm256_setzero_si256(), init = _mm256_set1_epi32(1 << (prec - 1));
  __m256i s[4] = {init, init, init, init};
  for (int k = 0; k < taps; k += 2) {
    size_t o = (size_t)k * step;
    __m256i wk = _mm256_inserti128_si256(_mm256_set1_epi32(wpair(w0, k, taps)),
                                         _mm_set1_epi32(wpair(w1, k, taps)), 1);
    __m256i a = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(s0 + o))),
        _mm_loadu_si128((const __m128i *)(const void *)(s1 + o)), 1);
    __m256i b = zero;
    if (k + 1 < taps)
      b = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(s0 + o + step))),
          _mm_loadu_si128((const __m128i *)(const void *)(s1 + o + step)), 1);
    AVX2_MADD(s, a, b, wk, zero);
  }
  _mm256_storeu_si256((__m256i *)(void *)dst, avx2_pack(s, prec));
}
#endif

/* Transpose a 16x16 byte block. A round interleaves row i with row i + 8
 * (i < 8), which rotates the 8-bit (row, column) index of every byte left
 * by one bit; after four rounds row and column have traded places. The
 * rounds are written out so the block stays in registers. */
#ifdef USE_SSE2
#define TR_PAIR(o, x, i)                            \
  o[2 * (i)] = _mm_unpacklo_epi8(x[i], x[(i) + 8]), \
        o[2 * (i) + 1] = _mm_unpackhi_epi8(x[i], x[(i) + 8])
#define TR_ROUND(o, x)                                                                       \
  (TR_PAIR(o, x, 0), TR_PAIR(o, x, 1), TR_PAIR(o, x, 2), TR_PAIR(o, x, 3), TR_PAIR(o, x, 4), \
   TR_PAIR(o, x, 5), TR_PAIR(o, x, 6), TR_PAIR(o, x, 7))
#endif

static void transpose16(const uint8_t *src, size_t ss, uint8_t *dst, size_t ds) {
#ifdef USE_SSE2
  __m128i a[16], b[16];
  for (int i = 0; i < 16; i++)
    a[i] = _mm_loadu_si128((const __m128i *)(const void *)(src + i * ss));
  TR_ROUND(b, a);
  TR_ROUND(a, b);
  TR_ROUND(b, a);
  TR_ROUND(a, b);
  for (int i = 0; i < 16; i++) _mm_storeu_si128((__m128i *)(void *)(dst + i * ds), a[i]);
#else
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) dst[c * ds + r] = src[r * ss + c];
#endif
}

/* One strip of one plane: STRIP output rows from y0, for each channel of
 * the plane into strip[k] (STRIP rows of PAD16(ow) bytes). Rows past the
 * output repeat the last one. */
static void resize_strip(struct stk__img_out *t, const struct plane *pl, int y0, int oh, int ow,
                         uint8_t *const strip[3]) {
  const struct axis *ax = pl->ax, *ay = pl->ay;
  size_t span = PAD16(ax->hi - ax->lo), owp = PAD16(ow);
  uint8_t *rows = t->span, *cols = t->span + STRIP * span;
  for (int r = 0; r < STRIP; r++) {
    int oy = STK__MIN(y0 + r, oh - 1);
    const uint8_t *r0 = pl->base + (size_t)(ay->lo + ay->ofs[oy]) * pl->stride + ax->lo;
    const int16_t *w = ay->wt + (size_t)oy * ay->stride;
#ifdef USE_AVX2
    if (t->avx2) {
      conv_avx2(r0, pl->stride, w, ay->taps, ay->prec, rows + r * span, span);
      continue;
    }
#endif
    conv16(r0, pl->stride, w, ay->taps, ay->prec, rows + r * span, span);
  }
  for (size_t x = 0; x < span; x += 16) transpose16(rows + x, span, cols + x * STRIP, STRIP);
  for (int k = 0; k < pl->nch; k++) {
    size_t i = 0, step = (size_t)ax->step * STRIP;
#ifdef USE_AVX2
    if (t->avx2)
      for (; i < owp; i += 2)
        conv_pair_avx2(cols + (size_t)(ax->ofs[i] + k) * STRIP,
                       cols + (size_t)(ax->ofs[i + 1] + k) * STRIP, step, ax->wt + i * ax->stride,
                       ax->wt + (i + 1) * ax->stride, ax->taps, ax->prec, t->cols + i * STRIP);
#endif
    for (; i < owp; i++)
      conv16(cols + (size_t)(ax->ofs[i] + k) * STRIP, step, ax->wt + i * ax->stride, ax->taps,
             ax->prec, t->cols + i * STRIP, STRIP);
    for (size_t x = 0; x < owp; x += 16) transpose16(t->cols + x * STRIP, STRIP, strip[k] + x, owp);
  }
}

/* JFIF YCbCr to RGB in place, in 16-bit fixed point (the constants to
 * 1/256, within a level of libjpeg's); n a multiple of 16. */
#ifdef USE_SSE2
static inline __m128i ycc_mul(__m128i x, short k) {
  return _mm_srai_epi16(_mm_add_epi16(_mm_mullo_epi16(x, _mm_set1_epi16(k)), _mm_set1_epi16(128)),
                        8);
}

/* Eight pixels: Y and centred Cb, Cr as 16-bit lanes to R, G, B. */
static inline void ycc8(__m128i y, __m128i u, __m128i v, __m128i rgb[3]) {
  rgb[0] = _mm_add_epi16(_mm_add_epi16(y, v), ycc_mul(v, 103));              /* 1.402 */
  rgb[1] = _mm_sub_epi16(_mm_sub_epi16(y, ycc_mul(u, 88)), ycc_mul(v, 183)); /* .344 .714 */
  rgb[2] = _mm_add_epi16(_mm_add_epi16(y, u), ycc_mul(u, 198));              /* 1.772 */
}

static void ycc_to_rgb(uint8_t *y, uint8_t *cb, uint8_t *cr, size_t n) {
  const __m128i zero = _mm_setzero_si128(), c128 = _mm_set1_epi16(128);
  uint8_t *p[3] = {y, cb, cr};
  for (size_t i = 0; i < n; i += 16) {
    __m128i in[3], lo[3], hi[3];
    for (int k = 0; k < 3; k++) in[k] = _mm_loadu_si128((const __m128i *)(const void *)(p[k] + i));
    ycc8(_mm_unpacklo_epi8(in[0], zero), _mm_sub_epi16(_mm_unpacklo_epi8(in[1], zero), c128),
         _mm_sub_epi16(_mm_unpacklo_epi8(in[2], zero), c128), lo);
    ycc8(_mm_unpackhi_epi8(in[0], zero), _mm_sub_epi16(_mm_unpackhi_epi8(in[1], zero), c128),
         _mm_sub_epi16(_mm_unpackhi_epi8(in[2], zero), c128), hi);
    for (int k = 0; k < 3; k++)
      _mm_storeu_si128((__m128i *)(void *)(p[k] + i), _mm_packus_epi16(lo[k], hi[k]));
  }
}
#else
static inline uint8_t clamp255(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

static void ycc_to_rgb(uint8_t *y, uint8_t *cb, uint8_t *cr, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int Y = y[i], u = cb[i] - 128, v = cr[i] - 128;
    y[i] = clamp255(Y + v + ((v * 103 + 128) >> 8));
    cb[i] = clamp255(Y - ((u * 88 + 128) >> 8) - ((v * 183 + 128) >> 8));
    cr[i] = clamp255(Y + u + ((u * 198 + 128) >> 8));
  }
}
#endif

/* Output rows go to a batch buffer far bigger than the caches, which the
 * consumer reads later: where aligned, they are written with streaming
 * stores that skip the read-for-ownership of every line (an sfence at the
 * end of the decode orders them). */
static void f32_plane_row(const uint8_t *s, float sc, float bi, float *d, int n) {
  int i = 0;
#ifdef USE_SSE2
  const __m128i zero = _mm_setzero_si128();
  const __m128 vs = _mm_set1_ps(sc), vb = _mm_set1_ps(bi);
  int stream = ((uintptr_t)d & 15) == 0;
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
    __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
    __m128i q[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                    _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
    for (int k = 0; k < 4; k++) {
      __m128 f = _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(q[k]), vs), vb);
      if (stream)
        _mm_stream_ps(d + i + 4 * k, f);
      else
        _mm_storeu_ps(d + i + 4 * k, f);
    }
  }
#endif
  for (; i < n; i++) d[i] = (float)s[i] * sc + bi;
}

static void u8_plane_row(const uint8_t *s, uint8_t *d, size_t n) {
  size_t i = 0;
#ifdef USE_SSE2
  if (((uintptr_t)d & 15) == 0)
    for (; i + 16 <= n; i += 16)
      _mm_stream_si128((__m128i *)(void *)(d + i),
                       _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
#endif
  memcpy(d + i, s + i, n - i);
}

/* R, G, B rows to packed RGB, 16 pixels (48 bytes) a step: pixels as
 * RGB0 words, each 64-bit half squeezed to 6 bytes, four such 12-byte
 * runs shifted together into three vectors. Streaming stores where out is
 * aligned, as for the planar rows. */
static void interleave_row(const uint8_t *const rgb[3], uint8_t *o, size_t n) {
  size_t i = 0;
#ifdef USE_SSE2
  const __m128i zero = _mm_setzero_si128(), lo64 = _mm_set_epi64x(0, -1);
  const __m128i lo24 = _mm_set1_epi64x(0xffffffll), mid24 = _mm_set1_epi64x(0xffffff000000ll);
  int stream = ((uintptr_t)o & 15) == 0;
  for (; i + 16 <= n; i += 16) {
    __m128i r = _mm_loadu_si128((const __m128i *)(const void *)(rgb[0] + i));
    __m128i g = _mm_loadu_si128((const __m128i *)(const void *)(rgb[1] + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(rgb[2] + i));
    __m128i rg[2] = {_mm_unpacklo_epi8(r, g), _mm_unpackhi_epi8(r, g)};
    __m128i b0[2] = {_mm_unpacklo_epi8(b, zero), _mm_unpackhi_epi8(b, zero)};
    __m128i run[4];
    for (int q = 0; q < 4; q++) {
      __m128i px = q & 1 ? _mm_unpackhi_epi16(rg[q >> 1], b0[q >> 1])
                         : _mm_unpacklo_epi16(rg[q >> 1], b0[q >> 1]);
      px = _mm_or_si128(_mm_and_si128(px, lo24), _mm_and_si128(_mm_srli_epi64(px, 8), mid24));
      run[q] = _mm_or_si128(_mm_and_si128(px, lo64), _mm_srli_si128(_mm_andnot_si128(lo64, px), 2));
    }
    __m128i v[3] = {_mm_or_si128(run[0], _mm_slli_si128(run[1], 12)),
                    _mm_or_si128(_mm_srli_si128(run[1], 4), _mm_slli_si128(run[2], 8)),
                    _mm_or_si128(_mm_srli_si128(run[2], 8), _mm_slli_si128(run[3], 4))};
    for (int k = 0; k < 3; k++) {
      __m128i *d = (__m128i *)(void *)(o + 3 * i + 16 * k);
      if (stream)
        _mm_stream_si128(d, v[k]);
      else
        _mm_storeu_si128(d, v[k]);
    }
  }
#endif
  for (; i < n; i++) o[3 * i] = rgb[0][i], o[3 * i + 1] = rgb[1][i], o[3 * i + 2] = rgb[2][i];
}

/* Packed RGB bytes to normalized floats: the channel pattern repeats
 * every 12 values, three vectors of scale and bias. */
static void f32_packed_row(const struct stk__img_params *p, const uint8_t *s, float *d, size_t n) {
  size_t i = 0;
#ifdef USE_SSE2
  const __m128i zero = _mm_setzero_si128();
  __m128 sc[3], bi[3];
  for (int k = 0; k < 3; k++) {
    sc[k] = _mm_setr_ps(p->scale[(4 * k) % 3], p->scale[(4 * k + 1) % 3], p->scale[(4 * k + 2) % 3],
                        p->scale[(4 * k + 3) % 3]);
    bi[k] = _mm_setr_ps(p->bias[(4 * k) % 3], p->bias[(4 * k + 1) % 3], p->bias[(4 * k + 2) % 3],
                        p->bias[(4 * k + 3) % 3]);
  }
  for (; i + 48 <= n; i += 48)
    for (int j = 0; j < 3; j++) {
      __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16 * j));
      __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
      __m128i q[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                      _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
      for (int k = 0; k < 4; k++) {
        int m = (4 * j + k) % 3;
        _mm_storeu_ps(d + i + 16 * j + 4 * k,
                      _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(q[k]), sc[m]), bi[m]));
      }
    }
#endif
  for (; i < n; i++) d[i] = (float)s[i] * p->scale[i % 3] + p->bias[i % 3];
}

/* Write output row oy from its R, G, B rows in the configured dtype and
 * layout. f32 rows go through t->frow when out is not 4-byte aligned. */
static void emit_row(const struct stk__img_params *p, struct stk__img_out *t,
                     const uint8_t *const rgb[3], uint8_t *out, int oy) {
  size_t ow = (size_t)p->ow, plane = (size_t)p->oh * ow, esz = p->f32 ? 4 : 1;
  int aligned = ((uintptr_t)out & 3) == 0;
  if (!p->chw) {
    uint8_t *o = out + (size_t)oy * ow * 3 * esz;
    if (!p->f32) return interleave_row(rgb, o, ow);
    interleave_row(rgb, t->irow, ow);
    float *d = aligned ? (float *)(void *)o : t->frow;
    f32_packed_row(p, t->irow, d, ow * 3);
    if (!aligned) memcpy(o, d, ow * 3 * sizeof(float));
    return;
  }
  for (int c = 0; c < 3; c++) {
    uint8_t *o = out + ((size_t)c * plane + (size_t)oy * ow) * esz;
    if (!p->f32) {
      u8_plane_row(rgb[c], o, ow);
      continue;
    }
    float *d = aligned ? (float *)(void *)o : t->frow;
    f32_plane_row(rgb[c], p->scale[c], p->bias[c], d, p->ow);
    if (!aligned) memcpy(o, d, ow * sizeof(float));
  }
}

static void run_strips(const struct stk__img_params *p, struct stk__img_out *t,
                       const struct plane pl[3], int np, enum stk__img_colour col, uint8_t *out) {
  size_t owp = PAD16(p->ow);
  for (int y0 = 0; y0 < p->oh; y0 += STRIP) {
    for (int k = 0; k < np; k++) resize_strip(t, &pl[k], y0, p->oh, p->ow, t->strip + k);
    int rows = STK__MIN(STRIP, p->oh - y0);
    for (int r = 0; r < rows; r++) {
      uint8_t *c0 = t->strip[0] + r * owp, *c1 = t->strip[1] + r * owp, *c2 = t->strip[2] + r * owp;
      if (col == STK__IMG_YCC) ycc_to_rgb(c0, c1, c2, owp);
      const uint8_t *rgb[3] = {c0, col == STK__IMG_GRAY ? c0 : c1, col == STK__IMG_GRAY ? c0 : c2};
      emit_row(p, t, rgb, out, y0 + r);
    }
  }
}

/* Set up the axes of img's planes for crop c, and size the weights and
 * the strip scratch for them. */
static int setup_axes(struct stk__img_out *t, const struct stk__img_params *p,
                      struct stk__img_rect c, int flip, const struct stk__img *img,
                      struct plane pl[3], char *err) {
  int d = img->d, unit = img->col == STK__IMG_RGB ? 3 : 1;
  int ngeo = img->col == STK__IMG_YCC && (img->hs > 1 || img->vs > 1) ? 2 : 1;
  struct stk__rs_geom gx[2], gy[2], key[4];
  size_t nwt = 0, nscratch = 0, span = 0;
  memset(key, 0, sizeof key);
  for (int g = 0; g < ngeo; g++) {
    int hs = g ? img->hs : 1, vs = g ? img->vs : 1;
    int pw = g ? img->cw : img->w, ph = g ? img->ch : img->h;
    /* A window's planes: the crop in the window's samples (x0 and y0 are
     * multiples of hs and vs, so chroma samples keep their parity). */
    gx[g] = (struct stk__rs_geom){c.x / d - img->x0, c.w / d, c.rw, c.fx, p->ow, flip, hs, pw};
    gy[g] = (struct stk__rs_geom){c.y / d - img->y0, c.h / d, c.rh, c.fy, p->oh, 0, vs, ph};
    nwt += PAD16(p->ow) * (size_t)stk__rs_stride(&gx[g]) +
           PAD16(p->oh) * (size_t)stk__rs_stride(&gy[g]);
    nscratch = STK__MAX(nscratch, STK__MAX(stk__rs_scratch(&gx[g]), stk__rs_scratch(&gy[g])));
    key[2 * g] = gx[g], key[2 * g + 1] = gy[g];
  }
  if (t->geo_n != ngeo || t->geo_unit != unit || memcmp(t->geo, key, sizeof key) != 0) {
    t->geo_n = 0;
    int rc = grow(&t->wts, &t->wts_cap, nscratch * sizeof(double) + nwt * sizeof(int16_t), err);
    if (rc) return rc;
    double *scratch = t->wts;
    int16_t *wt = (int16_t *)(void *)(scratch + nscratch);
    for (int g = 0; g < ngeo; g++) {
      build_axis(&t->ax[g], &gx[g], unit, wt, scratch);
      wt += PAD16(p->ow) * (size_t)t->ax[g].stride;
      build_axis(&t->ay[g], &gy[g], 1, wt, scratch);
      wt += PAD16(p->oh) * (size_t)t->ay[g].stride;
    }
    memcpy(t->geo, key, sizeof key);
    t->geo_n = ngeo, t->geo_unit = unit;
  }
  for (int g = 0; g < ngeo; g++) span = STK__MAX(span, PAD16(t->ax[g].hi - t->ax[g].lo));
  for (int k = 0; k < img->np; k++) {
    int g = k > 0 && ngeo > 1;
    pl[k] = (struct plane){img->base[k], img->stride[k], &t->ax[g], &t->ay[g], unit};
  }
  return grow((void **)&t->span, &t->span_cap, 2 * STRIP * span, err);
}

/* ---- entry points ---------------------------------------------------- */

int stk__img_grow(struct stk__img_buf *b, size_t need, char *err) {
  void *p = b->p;
  int rc = grow(&p, &b->cap, need, err);
  b->p = p;
  return rc;
}

int stk__img_out_run(struct stk__img_out **o, const struct stk__img_params *p,
                     struct stk__img_rect c, int flip, const struct stk__img *img, uint8_t *out,
                     char *err) {
  struct stk__img_out *t = *o;
  if (!t) {
    if (!(t = calloc(1, sizeof *t)))
      return stk__errf(err, STK_ENOMEM, "image: out of memory for resize state");
#ifdef USE_AVX2
    t->avx2 = __builtin_cpu_supports("avx2") != 0;
#endif
    *o = t;
  }
  struct plane pl[3];
  int rc = tls_tables(t, p->oh, p->ow, err);
  if (!rc) rc = setup_axes(t, p, c, flip, img, pl, err);
  if (rc) return rc;
  run_strips(p, t, pl, img->np, img->col, out);
#ifdef USE_SSE2
  _mm_sfence();
#endif
  return 0;
}

void stk__img_out_free(struct stk__img_out *t) {
  if (!t) return;
  free(t->span);
  free(t->tab);
  free(t->wts);
  free(t);
}
