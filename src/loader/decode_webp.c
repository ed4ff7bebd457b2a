/* The WebP codec of the image decoder (image.h): libwebp, lossy or
 * lossless, to RGB with any alpha dropped, as PIL's convert("RGB") gives
 * it. An animation is refused (libwebp's plain decoder does not take one;
 * PIL would give its first frame). */
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#include "image.h"

static int webp_sniff(const uint8_t *p, uint64_t n) {
  return n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0;
}

static int webp_header(void **state, const struct stk_field *in, int *W, int *H, char *err) {
  (void)state;
  WebPBitstreamFeatures f;
  VP8StatusCode rc = WebPGetFeatures(in->data, in->len, &f);
  if (rc != VP8_STATUS_OK)
    return stk__errf(err, STK_EDECODE, "webp: bad header (libwebp status %d)", (int)rc);
  if (f.has_animation)
    return stk__errf(err, STK_EDECODE, "webp: an animation; only still images are decoded");
  if (f.width < 1 || f.height < 1 || (uint64_t)f.width * f.height * 3 > STK__IMG_MAX_BYTES)
    return stk__errf(err, STK_EDECODE, "webp: %dx%d image too large", f.width, f.height);
  *W = f.width, *H = f.height;
  return 0;
}

static int webp_decode(void *state, const struct stk_field *in, struct stk__img_rect c,
                       struct stk__img_buf *buf, struct stk__img *img, char *err) {
  (void)state;
  (void)c;
  int w, h;
  if (!WebPGetInfo(in->data, in->len, &w, &h))
    return stk__errf(err, STK_EDECODE, "webp: bad header");
  size_t stride = (size_t)w * 3, size = stride * (size_t)h;
  int rc = stk__img_grow(buf, size + 64, err);
  if (rc) return rc;
  if (!WebPDecodeRGBInto(in->data, in->len, buf->p, size, (int)stride))
    return stk__errf(err, STK_EDECODE, "webp: decode failed (corrupt or truncated)");
  memset(img, 0, sizeof *img);
  img->base[0] = buf->p;
  img->stride[0] = stride;
  img->np = 1;
  img->col = STK__IMG_RGB;
  img->d = 1, img->w = w, img->h = h;
  return 0;
}

static void webp_free(void *state) { (void)state; }

const struct stk__img_codec stk__img_webp = {"webp", webp_sniff, webp_header, webp_decode,
                                             webp_free};
