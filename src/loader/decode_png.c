/* The PNG codec of the image decoder (image.h): libspng. The pixels come
 * as torchvision's ImageFolder gets them from PIL's convert("RGB"): grey
 * stays one plane (the output repeats it in R, G and B), palettes are
 * looked up, alpha and tRNS transparency are dropped (not composited on a
 * background), and gamma chunks are ignored. 16-bit samples keep their
 * high byte, as PIL does for 16-bit colour; for 16-bit grey PIL's
 * convert("RGB") clips every value above 255 to white instead, which
 * loses the image, so stoker scales it the same way as colour (what
 * torchvision.io.decode_image gives). */
#include <spng.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

#define CHUNK_LIMIT (64u << 20) /* bytes of one ancillary chunk, and of all kept */

struct png_state {
  spng_ctx *ctx; /* the stream whose header was read last */
  int fmt;       /* SPNG_FMT_G8 or SPNG_FMT_RGB8 */
};

static int png_sniff(const uint8_t *p, uint64_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return n >= 8 && memcmp(p, sig, 8) == 0;
}

static int png_fail(const char *what, int rc, char *err) {
  return stk__errf(err, rc == SPNG_EMEM ? STK_ENOMEM : STK_EDECODE, "png: %s: %s", what,
                   spng_strerror(rc));
}

static int png_header(void **state, const struct stk_field *in, int *W, int *H, char *err) {
  struct png_state *t = *state;
  if (!t && !(t = *state = calloc(1, sizeof *t)))
    return stk__errf(err, STK_ENOMEM, "png: out of memory for decoder state");
  spng_ctx_free(t->ctx);
  if (!(t->ctx = spng_ctx_new(0)))
    return stk__errf(err, STK_ENOMEM, "png: cannot create a decoder");
  struct spng_ihdr h;
  int rc = spng_set_png_buffer(t->ctx, in->data, in->len);
  if (!rc) rc = spng_set_chunk_limits(t->ctx, CHUNK_LIMIT, CHUNK_LIMIT);
  if (!rc) rc = spng_get_ihdr(t->ctx, &h);
  if (rc) return png_fail("bad header", rc, err);
  /* Grey of 8 bits or fewer decodes to one plane; the rest to RGB. */
  int grey = h.color_type == SPNG_COLOR_TYPE_GRAYSCALE && h.bit_depth <= 8;
  t->fmt = grey ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
  if ((uint64_t)h.width * h.height * (grey ? 1 : 3) > STK__IMG_MAX_BYTES)
    return stk__errf(err, STK_EDECODE, "png: %ux%u image too large", h.width, h.height);
  *W = (int)h.width, *H = (int)h.height;
  return 0;
}

static int png_decode(void *state, const struct stk_field *in, struct stk__img_rect c,
                      struct stk__img_buf *buf, struct stk__img *img, char *err) {
  (void)in;
  (void)c;
  struct png_state *t = state;
  struct spng_ihdr h;
  size_t size;
  int rc = spng_get_ihdr(t->ctx, &h);
  if (!rc) rc = spng_decoded_image_size(t->ctx, t->fmt, &size);
  if (rc) return png_fail("bad header", rc, err);
  if ((rc = stk__img_grow(buf, size + 64, err)) != 0) return rc;
  rc = spng_decode_image(t->ctx, buf->p, size, t->fmt, 0);
  spng_ctx_free(t->ctx);
  t->ctx = NULL;
  if (rc) return png_fail("decode", rc, err);
  int nch = t->fmt == SPNG_FMT_G8 ? 1 : 3;
  memset(img, 0, sizeof *img);
  img->base[0] = buf->p;
  img->stride[0] = (size_t)h.width * nch;
  img->np = 1;
  img->col = nch == 1 ? STK__IMG_GRAY : STK__IMG_RGB;
  img->d = 1, img->w = (int)h.width, img->h = (int)h.height;
  return 0;
}

static void png_free(void *state) {
  struct png_state *t = state;
  if (t) spng_ctx_free(t->ctx);
  free(t);
}

const struct stk__img_codec stk__img_png = {"png", png_sniff, png_header, png_decode, png_free};
