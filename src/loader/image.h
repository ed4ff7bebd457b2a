/* The image decoder (decode kind "jpeg", which takes JPEG, PNG and WebP
 * alike), split by what depends on the file's format:
 *
 *   image.c      the decode op: options, the format chosen by the field's
 *                first bytes (never by a name), torchvision's crops
 *   decode_jpeg.c, decode_png.c, decode_webp.c
 *                a codec each: the image's size, then its pixels as planes
 *   image_out.c  planes to the output tensor: the antialiased resize
 *                (resize.h), colour conversion, flip, normalization, layout
 *
 * so every format gets the same crops, resize and output, pixel for pixel
 * the path JPEG takes. */
#ifndef STK_LOADER_IMAGE_H
#define STK_LOADER_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"

#define STK__IMG_MAX_BYTES (1ull << 28) /* decoded bytes of one image, after scaling */

/* The decode config with defaults filled in. */
struct stk__img_params {
  int oh, ow, f32, chw, train;
  double smin, smax, rmin, rmax;
  float scale[3], bias[3]; /* f32 output = u8 value * scale + bias */
};

/* A crop in source pixel units (pixel k spans [k, k + 1)) resized to
 * rw x rh, of which the out_w x out_h window at (fx, fy) is kept: the
 * training crop is resized to the output, the evaluation "crop" is the
 * whole image resized and then centre-cropped, as torchvision does it. */
struct stk__img_rect {
  double x, y, w, h;
  int rw, rh, fx, fy;
};

enum stk__img_colour { STK__IMG_YCC, STK__IMG_GRAY, STK__IMG_RGB };

/* A decoded image as a codec hands it over: Y, Cb, Cr planes (np 3,
 * chroma at hs x vs subsampling, cw x ch samples, upsampled as libjpeg's
 * fancy upsampling would), one grey plane (np 1), or packed RGB pixels
 * (np 1, 3 bytes a pixel). The planes need 64 bytes of readable slack
 * past their end (the 16-wide passes read beyond what they use). */
struct stk__img {
  const uint8_t *base[3];
  size_t stride[3]; /* bytes a row */
  int np;
  enum stk__img_colour col;
  int d;    /* decoded at 1/d of the file's size (JPEG's DCT scaling), else 1 */
  int w, h; /* the first plane's size */
  int hs, vs, cw, ch;
  /* A window of the image (JPEG's region decoding): its first plane's
   * top-left sample is the image's (x0, y0) in decoded samples, and the
   * chroma planes' is (x0 / hs, y0 / vs), both multiples. 0 for a whole
   * image. */
  int x0, y0;
};

/* A buffer that only grows. */
struct stk__img_buf {
  uint8_t *p;
  size_t cap;
};
int stk__img_grow(struct stk__img_buf *b, size_t need, char *err);

struct stk__img_codec {
  const char *name;
  /* Whether the field's first n bytes start this format. */
  int (*sniff)(const uint8_t *p, uint64_t n);
  /* The image's size. *state is the codec's per-thread state, created
   * on first use; decode follows on the same field. */
  int (*header)(void **state, const struct stk_field *in, int *W, int *H, char *err);
  /* Decode the field into buf. c is the part of the image the output will
   * use (a codec may decode at a reduced scale that keeps it sharp). */
  int (*decode)(void *state, const struct stk_field *in, struct stk__img_rect c,
                struct stk__img_buf *buf, struct stk__img *img, char *err);
  void (*free)(void *state);
  /* The whole image at its own size as packed RGB pixels or one grey
   * plane, converted as the format's own library converts to RGB (PIL's
   * and torchvision's decodes). NULL: decode gives that already. */
  int (*decode_full)(void *state, const struct stk_field *in, struct stk__img_buf *buf,
                     struct stk__img *img, char *err);
};

extern const struct stk__img_codec stk__img_jpeg, stk__img_png, stk__img_webp;

/* Per-thread state of image_out.c. */
struct stk__img_out;

/* Write crop c of img (in file pixels; img may be decoded at 1/img->d),
 * mirrored if flip, to out in p's size, dtype and layout. *o is created on
 * first use and reused; free it with stk__img_out_free. */
int stk__img_out_run(struct stk__img_out **o, const struct stk__img_params *p,
                     struct stk__img_rect c, int flip, const struct stk__img *img, uint8_t *out,
                     char *err);
void stk__img_out_free(struct stk__img_out *o);

/* Image fields of the fields decoder (decode_fields.c), through the decode
 * op's codecs and transform, tls being its per-worker state. cfg's out_h or
 * out_w set: the op's output (crop, resize, dtype, layout); both 0: the
 * whole image at its own size, uint8 RGB, in cfg's layout. stk__image_field_shape
 * reads only the header: *type (STK_ELEM_U8 or F32) and shape[3]
 * (H, W, 3 or 3, H, W); stk__image_field_decode writes that many elements
 * to out (cap bytes). rng: the sample's stream (training crops). */
int stk__image_field_shape(const struct stk_decode_cfg *cfg, void **tls,
                           const struct stk_field *in, uint8_t *type, uint64_t shape[3],
                           char *err);
int stk__image_field_decode(const struct stk_decode_cfg *cfg, void **tls,
                            const struct stk_field *in, uint8_t *out, uint64_t cap,
                            struct stk_rng *rng, char *err);

#endif
