/* Synthetic photo-like images (JPEG, PNG, WebP) for `stoker gen` and the
 * decode benchmarks: smooth gradients, soft blobs, low-frequency texture
 * and fine noise drawn from a seeded stream, so that the same seed always
 * encodes the same bytes and the images cost a decoder about what real
 * photographs cost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include "synth.h"

#define SYNTH_MAX_DIM 16384
#define SYNTH_WAVES 3
#define SYNTH_MAX_BLOBS 12

/* Float RGB canvas the layers are painted onto before quantization. */
struct canvas {
  int w, h;
  float *px; /* w * h * 3 */
};

static float uniform(struct stk_rng *rng, float lo, float hi) {
  return lo + (hi - lo) * (float)stk_rng_double(rng);
}

/* Bilinear blend of four random corner colours. */
static void paint_gradient(struct canvas *c, struct stk_rng *rng) {
  float corner[4][3];
  for (int k = 0; k < 4; k++)
    for (int ch = 0; ch < 3; ch++) corner[k][ch] = uniform(rng, 20.f, 235.f);
  for (int y = 0; y < c->h; y++) {
    float fy = c->h > 1 ? (float)y / (float)(c->h - 1) : 0.f;
    float *row = c->px + (size_t)y * c->w * 3;
    for (int x = 0; x < c->w; x++) {
      float fx = c->w > 1 ? (float)x / (float)(c->w - 1) : 0.f;
      for (int ch = 0; ch < 3; ch++) {
        float top = corner[0][ch] + (corner[1][ch] - corner[0][ch]) * fx;
        float bot = corner[2][ch] + (corner[3][ch] - corner[2][ch]) * fx;
        row[x * 3 + ch] = top + (bot - top) * fy;
      }
    }
  }
}

/* Plane waves sin(ax + by + p), evaluated separably from per-row and
 * per-column tables so the cost is one multiply-add per pixel and wave. */
static int paint_waves(struct canvas *c, struct stk_rng *rng) {
  float *tab = malloc(sizeof(float) * 2 * (size_t)(c->w + c->h));
  if (!tab) return STK_ENOMEM;
  float *sx = tab, *cx = tab + c->w, *sy = cx + c->w, *cy = sy + c->h;
  for (int k = 0; k < SYNTH_WAVES; k++) {
    float period = uniform(rng, 6.f, 120.f), angle = uniform(rng, 0.f, 6.2831853f);
    float a = cosf(angle) * 6.2831853f / period, b = sinf(angle) * 6.2831853f / period;
    float phase = uniform(rng, 0.f, 6.2831853f), amp[3];
    for (int ch = 0; ch < 3; ch++) amp[ch] = uniform(rng, 2.f, 14.f);
    for (int x = 0; x < c->w; x++)
      sx[x] = sinf(a * (float)x + phase), cx[x] = cosf(a * (float)x + phase);
    for (int y = 0; y < c->h; y++) sy[y] = sinf(b * (float)y), cy[y] = cosf(b * (float)y);
    for (int y = 0; y < c->h; y++) {
      float *row = c->px + (size_t)y * c->w * 3;
      for (int x = 0; x < c->w; x++) {
        float s = sx[x] * cy[y] + cx[x] * sy[y];
        for (int ch = 0; ch < 3; ch++) row[x * 3 + ch] += amp[ch] * s;
      }
    }
  }
  free(tab);
  return 0;
}

/* One soft ellipse of a random colour, blended with a (1 - d^2)^2 falloff. */
static void paint_blob(struct canvas *c, struct stk_rng *rng) {
  float m = (float)STK__MIN(c->w, c->h);
  float rx = uniform(rng, 0.05f, 0.35f) * m, ry = rx * uniform(rng, 0.5f, 2.f);
  float cxp = uniform(rng, 0.f, (float)c->w), cyp = uniform(rng, 0.f, (float)c->h);
  float col[3], alpha = uniform(rng, 0.4f, 0.9f);
  for (int ch = 0; ch < 3; ch++) col[ch] = uniform(rng, 0.f, 255.f);
  int x0 = STK__MAX(0, (int)(cxp - rx)), x1 = STK__MIN(c->w - 1, (int)(cxp + rx));
  int y0 = STK__MAX(0, (int)(cyp - ry)), y1 = STK__MIN(c->h - 1, (int)(cyp + ry));
  for (int y = y0; y <= y1; y++) {
    float dy = ((float)y - cyp) / ry;
    float *row = c->px + (size_t)y * c->w * 3;
    for (int x = x0; x <= x1; x++) {
      float dx = ((float)x - cxp) / rx, d2 = dx * dx + dy * dy;
      if (d2 >= 1.f) continue;
      float wgt = alpha * (1.f - d2) * (1.f - d2);
      for (int ch = 0; ch < 3; ch++) row[x * 3 + ch] += wgt * (col[ch] - row[x * 3 + ch]);
    }
  }
}

/* Add fine noise (sensor grain) and quantize to 8 bits. One rng draw gives
 * eight noise values, so this pass stays cheap. */
static void quantize(const struct canvas *c, struct stk_rng *rng, float amp, uint8_t *rgb) {
  size_t n = (size_t)c->w * c->h * 3;
  uint64_t bits = 0;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0) bits = stk_rng_next(rng);
    float noise = ((float)(bits & 0xff) - 127.5f) * (amp / 127.5f);
    bits >>= 8;
    float v = c->px[i] + noise + 0.5f;
    rgb[i] = v <= 0.f ? 0 : v >= 255.f ? 255 : (uint8_t)v;
  }
}

static int paint(struct stk_rng *rng, int w, int h, uint8_t *rgb) {
  struct canvas c = {w, h, malloc(sizeof(float) * 3 * (size_t)w * h)};
  if (!c.px) return STK_ENOMEM;
  paint_gradient(&c, rng);
  int rc = paint_waves(&c, rng);
  if (rc == 0) {
    int nblobs = 3 + (int)stk_rng_below(rng, SYNTH_MAX_BLOBS - 2);
    for (int i = 0; i < nblobs; i++) paint_blob(&c, rng);
    quantize(&c, rng, uniform(rng, 3.f, 8.f), rgb);
  }
  free(c.px);
  return rc;
}

static int encode(const uint8_t *rgb, int w, int h, int quality, uint8_t **out, size_t *len,
                  char *err) {
  tjhandle tj = tjInitCompress();
  if (!tj) return stk__errf(err, STK_ENOMEM, "jpeg synth: cannot create a turbojpeg compressor");
  unsigned long cap = tjBufSize(w, h, TJSAMP_420);
  unsigned char *buf = malloc(cap);
  if (!buf) {
    tjDestroy(tj);
    return stk__errf(err, STK_ENOMEM, "jpeg synth: out of memory for a %dx%d image", w, h);
  }
  unsigned long n = cap;
  if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &buf, &n, TJSAMP_420, quality, TJFLAG_NOREALLOC)) {
    int rc = stk__errf(err, STK_EDECODE, "jpeg synth: encode failed: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    free(buf);
    return rc;
  }
  tjDestroy(tj);
  uint8_t *shrunk = realloc(buf, n);
  *out = shrunk ? shrunk : buf;
  *len = n;
  return 0;
}

/* A lossless PNG (8-bit RGB) with libspng. */
static int encode_png(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len, char *err) {
  spng_ctx *enc = spng_ctx_new(SPNG_CTX_ENCODER);
  if (!enc) return stk__errf(err, STK_ENOMEM, "png synth: cannot create an encoder");
  struct spng_ihdr ih = {(uint32_t)w, (uint32_t)h, 8, SPNG_COLOR_TYPE_TRUECOLOR, 0, 0, 0};
  size_t n = 0;
  int e = spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  if (!e) e = spng_set_ihdr(enc, &ih);
  if (!e) e = spng_encode_image(enc, rgb, (size_t)w * h * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  void *png = e ? NULL : spng_get_png_buffer(enc, &n, &e);
  spng_ctx_free(enc);
  if (!png) return stk__errf(err, STK_EDECODE, "png synth: encode failed: %s", spng_strerror(e));
  *out = png; /* libspng's buffer comes from malloc: the caller frees it */
  *len = n;
  return 0;
}

/* A WebP with libwebp: lossy at quality, lossless at 100. */
static int encode_webp(const uint8_t *rgb, int w, int h, int quality, uint8_t **out, size_t *len,
                       char *err) {
  uint8_t *webp = NULL;
  size_t n = quality == 100 ? WebPEncodeLosslessRGB(rgb, w, h, w * 3, &webp)
                            : WebPEncodeRGB(rgb, w, h, w * 3, (float)quality, &webp);
  if (!n) return stk__errf(err, STK_EDECODE, "webp synth: encode of a %dx%d image failed", w, h);
  *out = malloc(n);
  if (*out) memcpy(*out, webp, n);
  WebPFree(webp);
  if (!*out) return stk__errf(err, STK_ENOMEM, "webp synth: out of memory for %zu bytes", n);
  *len = n;
  return 0;
}

int stk__image_synth(struct stk_rng *rng, int w, int h, int quality, int enc, uint8_t **out,
                     size_t *len, char *err) {
  if (w < 1 || h < 1 || w > SYNTH_MAX_DIM || h > SYNTH_MAX_DIM || quality < 1 || quality > 100)
    return stk__errf(err, STK_EINVAL, "image synth: bad size %dx%d or quality %d", w, h, quality);
  uint8_t *rgb = malloc((size_t)w * h * 3);
  if (!rgb) return stk__errf(err, STK_ENOMEM, "image synth: out of memory for a %dx%d image", w, h);
  int rc = paint(rng, w, h, rgb);
  if (rc)
    stk__errf(err, rc, "image synth: out of memory for a %dx%d image", w, h);
  else if (enc == STK__SYNTH_PNG)
    rc = encode_png(rgb, w, h, out, len, err);
  else if (enc == STK__SYNTH_WEBP)
    rc = encode_webp(rgb, w, h, quality, out, len, err);
  else
    rc = encode(rgb, w, h, quality, out, len, err);
  free(rgb);
  return rc;
}

int stk__jpeg_synth(struct stk_rng *rng, int w, int h, int quality, uint8_t **out, size_t *len,
                    char *err) {
  return stk__image_synth(rng, w, h, quality, STK__SYNTH_JPEG, out, len, err);
}
