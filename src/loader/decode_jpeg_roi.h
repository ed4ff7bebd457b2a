/* Region-of-interest JPEG decoding (decode_jpeg_roi.c): the window of a
 * JPEG that a crop's resize reads, as planes byte for byte equal to that
 * window of a whole planar decode, through libjpeg's scanline API. For
 * decode_jpeg.c, at 1/1 scale, YCbCr or grey files only. */
#ifndef STK_LOADER_DECODE_JPEG_ROI_H
#define STK_LOADER_DECODE_JPEG_ROI_H

#include "image.h"

struct stk__jpeg_roi;

/* Pixel columns [x0, x1) and rows [y0, y1) of the image. */
struct stk__jpeg_window {
  int x0, x1, y0, y1;
};

int stk__jpeg_roi_new(struct stk__jpeg_roi **r, char *err);
void stk__jpeg_roi_free(struct stk__jpeg_roi *r);

/* Whether the n bytes end with the EOI marker: a file that does cannot
 * end early, so stopping after the window's last row hides no truncation
 * that a whole decode would report. */
int stk__jpeg_ends_with_eoi(const uint8_t *p, uint64_t n);

/* The window the resize of crop c (in pixels of the W x H image; chroma
 * subsampled hs x vs, 1 x 1 for grey) reads, with the chroma neighbours
 * that the upsampling mixes in, its top and left moved to the iMCU
 * boundary decoding starts from. */
void stk__jpeg_roi_window(struct stk__img_rect c, int W, int H, int hs, int vs,
                          struct stk__jpeg_window *w);

/* Whether decoding window w (from stk__jpeg_roi_window) costs clearly
 * less than decoding the whole image to planes: 1, with w widened to the
 * image's full width and top where libjpeg's raw planes down to its last
 * row cost less than the scanlines of its columns; else 0. */
int stk__jpeg_roi_plan(struct stk__jpeg_window *w, int W, int H, int vs);

/* Decode window w of the field into buf as planes (img: its size, and its
 * offset in the image as x0, y0). The window may come out wider to the
 * left, to the iMCU column libjpeg starts from, and taller. A window of
 * the full width is decoded as raw planes from the top. A file that ends
 * early fails, as the whole decode does. */
int stk__jpeg_roi_decode(struct stk__jpeg_roi *r, const struct stk_field *in,
                         struct stk__jpeg_window w, struct stk__img_buf *buf, struct stk__img *img,
                         char *err);

#endif
