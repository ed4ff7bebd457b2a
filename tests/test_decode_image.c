/* Tests of the image decoder's PNG and WebP codecs (src/loader/
 * decode_png.c, decode_webp.c): pixel-exact decodes of lossless files
 * (interlaced too) through an identity resize, every PNG colour type
 * converted as PIL's convert("RGB") does (16-bit grey excepted: scaled,
 * see decode_png.c), the same crops and output as any other format, the
 * format told by the bytes, and corrupt or truncated files failing with a
 * message. */
#include <spng.h>
#include <webp/encode.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"
#include "test.h"

/* ---- helpers --------------------------------------------------------- */

/* Encode a PNG of colour type ct and depth bits from px (samples in
 * PNG's order, 16-bit ones host-endian), Adam7-interlaced if il; plte: n
 * entries or NULL. */
static uint8_t *png_encode_il(const void *px, size_t px_len, int w, int h, int ct, int depth,
                              const uint8_t *plte, int n, int il, size_t *len) {
  spng_ctx *enc = spng_ctx_new(SPNG_CTX_ENCODER);
  CHECK(enc != NULL);
  struct spng_ihdr ih = {(uint32_t)w, (uint32_t)h, (uint8_t)depth, (uint8_t)ct, 0, 0, (uint8_t)il};
  CHECK_EQ(spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1), 0);
  CHECK_EQ(spng_set_ihdr(enc, &ih), 0);
  if (plte) {
    struct spng_plte p = {.n_entries = (uint32_t)n};
    for (int i = 0; i < n; i++)
      p.entries[i] = (struct spng_plte_entry){plte[3 * i], plte[3 * i + 1], plte[3 * i + 2], 255};
    CHECK_EQ(spng_set_plte(enc, &p), 0);
  }
  int e = spng_encode_image(enc, px, px_len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  CHECK_MSG(e == 0, "png encode: %s", spng_strerror(e));
  void *out = spng_get_png_buffer(enc, len, &e);
  CHECK(out != NULL);
  spng_ctx_free(enc);
  return out;
}

static uint8_t *png_encode(const void *px, size_t px_len, int w, int h, int ct, int depth,
                           const uint8_t *plte, int n, size_t *len) {
  return png_encode_il(px, px_len, w, h, ct, depth, plte, n, 0, len);
}

static uint8_t *webp_lossless(const uint8_t *rgb, int w, int h, size_t *len) {
  uint8_t *o = NULL;
  *len = WebPEncodeLosslessRGB(rgb, w, h, w * 3, &o);
  CHECK(*len > 0);
  uint8_t *copy = malloc(*len);
  memcpy(copy, o, *len);
  WebPFree(o);
  return copy;
}

/* w x h pixels of nch channels from a seeded stream. */
static uint8_t *noise(uint64_t seed, int w, int h, int nch) {
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  uint8_t *px = malloc((size_t)w * h * nch);
  stk_rng_fill(&r, px, (size_t)w * h * nch);
  return px;
}

static struct stk_field field_of(const uint8_t *data, size_t len, const char *name) {
  struct stk_field f = {.data = data, .len = len, .raw_len = len};
  snprintf(f.name, sizeof f.name, "%s", name);
  return f;
}

/* Decode f with cfg (a fresh state); *out is malloc'ed. */
static int run(const struct stk_decode_cfg *cfg, const struct stk_field *f, uint64_t seed,
               uint8_t **out, char *err) {
  void *tls = NULL;
  uint64_t size = 0, n = 0;
  CHECK_OK(stk__dec_jpeg.out_size(cfg, f, &size, err));
  *out = malloc(size);
  struct stk_rng rng;
  stk_rng_seed(&rng, seed);
  int rc = stk__dec_jpeg.decode(cfg, &tls, f, *out, size, &n, &rng, err);
  if (!rc) CHECK_EQ(n, size);
  stk__dec_jpeg.thread_free(tls);
  return rc;
}

/* The evaluation transform at 224 of a 256 x 256 image is an identity
 * resize and a centre crop at (16, 16): the output is the decoded pixels. */
static struct stk_decode_cfg identity_cfg(void) {
  return (struct stk_decode_cfg){
      .kind = STK_DECODE_JPEG, .dtype = STK_DTYPE_U8, .layout = STK_LAYOUT_HWC};
}

/* out (224 x 224 HWC) against expected RGB pixels of a 256 x 256 image. */
static void check_centre(const uint8_t *out, const uint8_t *rgb) {
  for (int y = 0; y < 224; y++)
    for (int x = 0; x < 224; x++)
      for (int c = 0; c < 3; c++) {
        int got = out[((size_t)y * 224 + x) * 3 + c];
        int want = rgb[((size_t)(y + 16) * 256 + x + 16) * 3 + c];
        CHECK_MSG(got == want, "pixel (%d, %d) channel %d: %d, want %d", x, y, c, got, want);
      }
}

/* ---- pixel-exact decodes ---------------------------------------------- */

TEST(decode_png_rgb_pixel_exact) {
  uint8_t *rgb = noise(1, 256, 256, 3), *out;
  size_t len;
  uint8_t *png =
      png_encode(rgb, 256 * 256 * 3, 256, 256, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, &len);
  struct stk_field f = field_of(png, len, "png");
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(run(&cfg, &f, 1, &out, err) == 0, "%s", err);
  check_centre(out, rgb);
  free(out);
  free(png);
  free(rgb);
}

TEST(decode_png_interlaced_pixel_exact) {
  uint8_t *rgb = noise(8, 256, 256, 3), *out;
  size_t len;
  uint8_t *png =
      png_encode_il(rgb, 256 * 256 * 3, 256, 256, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, 1, &len);
  struct stk_field f = field_of(png, len, "png");
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(run(&cfg, &f, 1, &out, err) == 0, "%s", err);
  check_centre(out, rgb);
  free(out);
  free(png);
  free(rgb);
}

TEST(decode_webp_lossless_pixel_exact) {
  uint8_t *rgb = noise(2, 256, 256, 3), *out;
  size_t len;
  uint8_t *webp = webp_lossless(rgb, 256, 256, &len);
  struct stk_field f = field_of(webp, len, "webp");
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(run(&cfg, &f, 1, &out, err) == 0, "%s", err);
  check_centre(out, rgb);
  free(out);
  free(webp);
  free(rgb);
}

/* Every PNG colour type becomes RGB as PIL's convert("RGB") makes it. */
TEST(decode_png_colour_types) {
  const int n = 256 * 256;
  uint8_t *g = noise(3, 256, 256, 1), *a = noise(4, 256, 256, 1), *c = noise(5, 256, 256, 3);
  uint8_t *want = malloc((size_t)n * 3), *px = malloc((size_t)n * 8), *out;
  uint8_t plte[16 * 3];
  for (int i = 0; i < 48; i++) plte[i] = (uint8_t)(i * 37 + 11);
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  for (int t = 0; t < 7; t++) {
    int ct = 0, depth = 8;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
      uint8_t *w = want + 3 * i;
      switch (t) {
        case 0: /* grey: repeated in R, G, B */
          ct = SPNG_COLOR_TYPE_GRAYSCALE, px[i] = g[i], bytes = n;
          w[0] = w[1] = w[2] = g[i];
          break;
        case 1: /* grey + alpha: the alpha dropped */
          ct = SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, px[2 * i] = g[i], px[2 * i + 1] = a[i],
          bytes = 2 * n;
          w[0] = w[1] = w[2] = g[i];
          break;
        case 2: /* RGBA: the alpha dropped, not composited */
          ct = SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, bytes = 4 * (size_t)n;
          memcpy(px + 4 * i, c + 3 * i, 3), px[4 * i + 3] = a[i];
          memcpy(w, c + 3 * i, 3);
          break;
        case 3: /* a 4-bit palette: looked up */
          ct = SPNG_COLOR_TYPE_INDEXED, depth = 4, bytes = (size_t)n / 2;
          if (i % 2 == 0) px[i / 2] = (uint8_t)((g[i] & 15) << 4 | (g[i + 1] & 15));
          memcpy(w, plte + 3 * (g[i] & 15), 3);
          break;
        case 4: /* 1-bit grey: 0 and 255 */
          ct = SPNG_COLOR_TYPE_GRAYSCALE, depth = 1, bytes = (size_t)n / 8;
          if (i % 8 == 0) px[i / 8] = 0;
          px[i / 8] |= (uint8_t)((g[i] & 1) << (7 - i % 8));
          w[0] = w[1] = w[2] = (g[i] & 1) ? 255 : 0;
          break;
        case 5: /* 16-bit RGB: the high byte */
        case 6: /* 16-bit grey: the high byte too */
          ct = t == 5 ? SPNG_COLOR_TYPE_TRUECOLOR : SPNG_COLOR_TYPE_GRAYSCALE, depth = 16;
          for (int k = 0; k < (t == 5 ? 3 : 1); k++) {
            uint16_t v = (uint16_t)(c[3 * i + k] << 8 | a[i]);
            memcpy(px + (t == 5 ? 6 * (size_t)i + 2 * k : 2 * (size_t)i), &v, 2);
            w[k] = c[3 * i + k];
          }
          if (t == 6) w[1] = w[2] = w[0];
          bytes = (size_t)n * (t == 5 ? 6 : 2);
          break;
      }
    }
    size_t len;
    uint8_t *png = png_encode(px, bytes, 256, 256, ct, depth, ct == 3 ? plte : NULL, 16, &len);
    struct stk_field f = field_of(png, len, "png");
    CHECK_MSG(run(&cfg, &f, 1, &out, err) == 0, "case %d: %s", t, err);
    check_centre(out, want);
    free(out);
    free(png);
  }
  free(want);
  free(px);
  free(g);
  free(a);
  free(c);
}

/* ---- the same transform as JPEG -------------------------------------- */

/* The same pixels as PNG, grey PNG and lossless WebP give byte-identical
 * training crops, flips and f32 CHW output for each seed: one path after
 * the decode. */
TEST(decode_png_webp_same_transform) {
  int w = 333, h = 250;
  uint8_t *g = noise(6, w, h, 1), *rgb = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = g[i];
  size_t l1, l2, l3;
  uint8_t *png =
      png_encode(rgb, (size_t)w * h * 3, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, &l1);
  uint8_t *grey = png_encode(g, (size_t)w * h, w, h, SPNG_COLOR_TYPE_GRAYSCALE, 8, NULL, 0, &l2);
  uint8_t *webp = webp_lossless(rgb, w, h, &l3);
  struct stk_field f[3] = {field_of(png, l1, "png"), field_of(grey, l2, "jpg"),
                           field_of(webp, l3, "x")};
  struct stk_decode_cfg cfg = {.kind = STK_DECODE_JPEG,
                               .train = 1,
                               .dtype = STK_DTYPE_F32,
                               .layout = STK_LAYOUT_CHW,
                               .out_h = 96,
                               .out_w = 128};
  char err[STK_ERRMSG_MAX];
  for (uint64_t seed = 1; seed <= 6; seed++) {
    uint8_t *out[3];
    for (int k = 0; k < 3; k++) CHECK_MSG(run(&cfg, &f[k], seed, &out[k], err) == 0, "%s", err);
    CHECK(memcmp(out[0], out[1], 96 * 128 * 3 * 4) == 0);
    CHECK(memcmp(out[0], out[2], 96 * 128 * 3 * 4) == 0);
    for (int k = 0; k < 3; k++) free(out[k]);
  }
  free(png);
  free(grey);
  free(webp);
  free(rgb);
  free(g);
}

/* stk__image_synth (what `stoker gen --image-format` writes) decodes in
 * every format. */
TEST(decode_image_synth_formats) {
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  for (int enc = STK__SYNTH_JPEG; enc <= STK__SYNTH_WEBP; enc++)
    for (int q = 80; q <= 100; q += 20) {
      struct stk_rng r;
      stk_rng_seed(&r, 9);
      uint8_t *img, *out;
      size_t len;
      CHECK_OK(stk__image_synth(&r, 300, 200, q, enc, &img, &len, err));
      struct stk_field f = field_of(img, len, "jpg");
      CHECK_MSG(run(&cfg, &f, 1, &out, err) == 0, "format %d quality %d: %s", enc, q, err);
      free(out);
      free(img);
    }
}

/* ---- bad input ------------------------------------------------------- */

TEST(decode_png_webp_corrupt_and_truncated) {
  uint8_t *rgb = noise(7, 256, 256, 3), *out;
  size_t lp, lw;
  uint8_t *png =
      png_encode(rgb, 256 * 256 * 3, 256, 256, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, &lp);
  uint8_t *webp = webp_lossless(rgb, 256, 256, &lw);
  struct stk_decode_cfg cfg = identity_cfg();
  char err[STK_ERRMSG_MAX];
  struct stk_field f = field_of(png, lp / 2, "png"); /* ends inside the image data */
  CHECK_EQ(run(&cfg, &f, 1, &out, err), STK_EDECODE);
  CHECK_CONTAINS(err, "png: ");
  free(out);
  f = field_of(png, 20, "png"); /* ends inside the header */
  CHECK_EQ(run(&cfg, &f, 1, &out, err), STK_EDECODE);
  CHECK_CONTAINS(err, "png: bad header");
  free(out);
  f = field_of(webp, lw / 2, "webp");
  CHECK_EQ(run(&cfg, &f, 1, &out, err), STK_EDECODE);
  CHECK_CONTAINS(err, "webp: ");
  free(out);
  /* A flipped byte in the image data: PNG's CRC catches it. */
  uint8_t *bad = malloc(lp);
  memcpy(bad, png, lp);
  bad[lp / 2] ^= 0x5a;
  f = field_of(bad, lp, "png");
  CHECK_EQ(run(&cfg, &f, 1, &out, err), STK_EDECODE);
  free(out);
  /* Damage anywhere: an error or an image, never a crash (the sanitizer
   * builds check the "never"). */
  struct stk_rng r;
  stk_rng_seed(&r, 11);
  for (int k = 0; k < 60; k++) {
    const uint8_t *src = k % 2 ? webp : png;
    size_t len = k % 2 ? lw : lp;
    memcpy(bad, src, len);
    for (int j = 0; j < 4; j++) bad[stk_rng_below(&r, len)] = (uint8_t)stk_rng_below(&r, 256);
    f = field_of(bad, len, "x");
    run(&cfg, &f, 1, &out, err);
    free(out);
  }
  free(bad);
  free(png);
  free(webp);
  free(rgb);
}
