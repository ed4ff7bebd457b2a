/* Region-of-interest JPEG decoding for the training crop (image.h): only
 * the window of the image that the crop's resize reads is inverse-
 * transformed, and entropy decoding stops after its last row. turbojpeg
 * 2.1 has no cropped planar decode, so this goes through libjpeg's own
 * API: jpeg_crop_scanline for the columns (it widens the window leftwards
 * to an iMCU boundary), jpeg_skip_scanlines above the window (entropy
 * decoding only, no IDCT), jpeg_abort_decompress after its last row.
 *
 * Scanline output comes as interleaved YCbCr; with libjpeg's plain
 * (replicating) upsampling, every hs-th sample of a row's Cb and Cr is a
 * chroma sample exactly as the raw planes have it. So the window is split
 * back into Y, Cb, Cr planes here, and the planes are byte for byte the
 * same window of the planes a whole decode gives (tests/
 * test_decode_roi.c checks the output of both). The window's offset goes
 * with the image (stk__img x0, y0) so image_out.c builds the same weights.
 *
 * Splitting the rows costs more per pixel than a planar decode's IDCT,
 * so stk__jpeg_roi_plan weighs the two: a window well inside the image
 * is decoded so; a wide one as libjpeg's raw planes (jpeg_read_raw_data,
 * the planes turbojpeg's planar decode gives) from the top down to the
 * window's last iMCU row, then abandoned; a wide one that reaches to
 * within a tenth of the bottom is left to turbojpeg's whole decode
 * (decode_jpeg.c). */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jpeglib.h needs FILE and size_t declared first; jerror.h has the
 * message codes. */
#include <jerror.h>
#include <jpeglib.h>

#include "decode_jpeg_roi.h"

/* libjpeg's error manager, made to return: fatal errors longjmp back with
 * their message; warnings are counted, and a premature end of file noted
 * (it decodes to grey, so the caller refuses it as the whole path does). */
struct roi_err {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  int eof;
  char msg[JMSG_LENGTH_MAX];
};

struct stk__jpeg_roi {
  struct jpeg_decompress_struct ci;
  struct roi_err em;
  uint8_t *row; /* one interleaved output row */
  size_t row_cap;
};

static void roi_error_exit(j_common_ptr ci) {
  struct roi_err *e = (struct roi_err *)(void *)ci->err;
  (*ci->err->format_message)(ci, e->msg);
  longjmp(e->jb, 1);
}

static void roi_emit(j_common_ptr ci, int level) {
  struct roi_err *e = (struct roi_err *)(void *)ci->err;
  if (level >= 0) return;
  ci->err->num_warnings++;
  if (ci->err->msg_code == JWRN_JPEG_EOF) e->eof = 1;
}

static void roi_output(j_common_ptr ci) { (void)ci; }

int stk__jpeg_roi_new(struct stk__jpeg_roi **out, char *err) {
  struct stk__jpeg_roi *r = calloc(1, sizeof *r);
  if (!r) return stk__errf(err, STK_ENOMEM, "jpeg: out of memory for a region decoder");
  r->ci.err = jpeg_std_error(&r->em.pub);
  r->em.pub.error_exit = roi_error_exit;
  r->em.pub.emit_message = roi_emit;
  r->em.pub.output_message = roi_output;
  if (setjmp(r->em.jb)) {
    free(r);
    return stk__errf(err, STK_ENOMEM, "jpeg: cannot create a libjpeg decompressor");
  }
  jpeg_create_decompress(&r->ci);
  *out = r;
  return 0;
}

void stk__jpeg_roi_free(struct stk__jpeg_roi *r) {
  if (!r) return;
  jpeg_destroy_decompress(&r->ci);
  free(r->row);
  free(r);
}

int stk__jpeg_ends_with_eoi(const uint8_t *p, uint64_t n) {
  return n >= 4 && p[n - 2] == 0xFF && p[n - 1] == 0xD9;
}

/* The rows (or columns) [*lo, *hi) of an axis of n pixels that the resize
 * of [start, start + len) reads (resize.c's region), widened by margin on
 * both sides for the chroma neighbours that libjpeg's fancy upsampling
 * mixes in (image_out.c folds it into the chroma weights). */
static void span(double start, double len, int margin, int n, int *lo, int *hi) {
  double end = start + len, re = nearbyint(end);
  long a = (long)floor(start), b = (long)(fabs(end - re) < 1e-9 ? re : ceil(end));
  a -= margin, b += margin;
  *lo = a < 0 ? 0 : (int)a;
  *hi = b > n ? n : (int)b;
}

void stk__jpeg_roi_window(struct stk__img_rect c, int W, int H, int hs, int vs,
                          struct stk__jpeg_window *w) {
  span(c.x, c.w, hs > 1 ? 2 * hs : 0, W, &w->x0, &w->x1);
  span(c.y, c.h, vs > 1 ? 2 * vs : 0, H, &w->y0, &w->y1);
  /* Where decoding will start: the top of the iMCU row, the left of the
   * iMCU column. */
  w->y0 -= w->y0 % (8 * vs);
  w->x0 -= w->x0 % (8 * hs);
}

int stk__jpeg_roi_plan(struct stk__jpeg_window *w, int W, int H, int vs) {
  /* Relative costs per pixel, measured on P1's photos (docs/internals/
   * loader.md): entropy decoding 22 and a planar IDCT 18 in turbojpeg's
   * whole decode; libjpeg's raw planes down to the window's last iMCU row
   * 43 (they came out slower than turbojpeg's, row for row); the scanline
   * window's IDCT, upsampling, interleaving and splitting 32. Entropy
   * decoding runs down to the window's last row on every path. */
  int mh = 8 * vs, y1 = (w->y1 + mh - 1) / mh * mh;
  y1 = y1 > H ? H : y1;
  double whole = 40.0 * W * H, raw = 43.0 * W * y1;
  double scan = 22.0 * W * w->y1 + 32.0 * (double)(w->x1 - w->x0) * (w->y1 - w->y0);
  if (scan < 0.9 * raw && scan < 0.9 * whole) return 1;
  if (raw > 0.9 * whole) return 0;
  w->x0 = 0, w->x1 = W, w->y0 = 0;
  return 1;
}

/* Split one interleaved row of n pixels into Y, and (on chroma rows) Cb,
 * Cr at every hs-th pixel. */
static void split_row(const uint8_t *s, int n, int hs, uint8_t *y, uint8_t *cb, uint8_t *cr) {
  for (int i = 0; i < n; i++) y[i] = s[3 * i];
  if (!cb) return;
  int step = 3 * hs;
  for (int k = 0, i = 0; i < n; k++, i += hs) {
    cb[k] = s[(size_t)k * step + 1];
    cr[k] = s[(size_t)k * step + 2];
  }
}

/* Room for a w x h window's planes in buf (chroma cw x ch), 64 bytes of
 * slack past the last. */
static int planes_room(struct stk__img_buf *buf, size_t ysz, size_t csz, int w, int h, char *err) {
  if (ysz + 2 * csz > STK__IMG_MAX_BYTES)
    return stk__errf(err, STK_EDECODE, "jpeg: %dx%d region too large", w, h);
  return stk__img_grow(buf, ysz + 2 * csz + 64, err);
}

/* A full-width window: libjpeg's raw planes (what turbojpeg's planar
 * decode returns), iMCU row by iMCU row down to the window's last. */
static int raw_rows(struct stk__jpeg_roi *r, struct stk__jpeg_window *w, int np,
                    struct stk__img_buf *buf, struct stk__img *img, char *err) {
  struct jpeg_decompress_struct *ci = &r->ci;
  int mh = 8 * ci->max_v_samp_factor, n = (w->y1 + mh - 1) / mh;
  size_t stride[3], rows[3], off[4] = {0};
  for (int k = 0; k < np; k++) {
    stride[k] = (size_t)ci->comp_info[k].width_in_blocks * 8;
    rows[k] = (size_t)n * ci->comp_info[k].v_samp_factor * 8;
    off[k + 1] = off[k] + stride[k] * rows[k];
  }
  int rc = planes_room(buf, off[1], off[np] - off[1], (int)stride[0], (int)rows[0], err);
  if (rc) return rc;
  JSAMPROW ptr[3][4 * 8];
  JSAMPARRAY planes[3] = {ptr[0], ptr[1], ptr[2]};
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < np; k++) {
      int per = ci->comp_info[k].v_samp_factor * 8;
      for (int y = 0; y < per; y++)
        ptr[k][y] = buf->p + off[k] + ((size_t)i * per + (size_t)y) * stride[k];
    }
    if (jpeg_read_raw_data(ci, planes, (JDIMENSION)mh) == 0)
      return stk__errf(err, STK_EDECODE, "jpeg: no iMCU row %d", i);
  }
  int h = n * mh > (int)ci->image_height ? (int)ci->image_height : n * mh;
  memset(img, 0, sizeof *img);
  img->np = np;
  img->col = np == 1 ? STK__IMG_GRAY : STK__IMG_YCC;
  img->d = 1, img->w = (int)ci->image_width, img->h = h;
  for (int k = 0; k < np; k++) img->base[k] = buf->p + off[k], img->stride[k] = stride[k];
  if (np == 3) {
    img->hs = ci->max_h_samp_factor / ci->comp_info[1].h_samp_factor;
    img->vs = ci->max_v_samp_factor / ci->comp_info[1].v_samp_factor;
    img->cw = (img->w + img->hs - 1) / img->hs, img->ch = (h + img->vs - 1) / img->vs;
  }
  return 0;
}

/* Any other window: the scanlines of its columns (jpeg_crop_scanline),
 * from its top (jpeg_skip_scanlines), split back to planes. */
static int scan_rows(struct stk__jpeg_roi *r, struct stk__jpeg_window *w, int grey,
                     struct stk__img_buf *buf, struct stk__img *img, char *err) {
  struct jpeg_decompress_struct *ci = &r->ci;
  int hs = grey ? 1 : ci->max_h_samp_factor / ci->comp_info[1].h_samp_factor;
  int vs = grey ? 1 : ci->max_v_samp_factor / ci->comp_info[1].v_samp_factor;
  /* Rows from the top of an iMCU row: chroma rows line up with the
   * whole image's, and no partial row group is read and dropped. */
  w->y0 -= w->y0 % (8 * ci->max_v_samp_factor);
  JDIMENSION xoff = (JDIMENSION)w->x0, width = (JDIMENSION)(w->x1 - w->x0);
  jpeg_crop_scanline(ci, &xoff, &width); /* xoff moves left to an iMCU column */
  w->x0 = (int)xoff, w->x1 = (int)(xoff + width);
  if (w->y0 > 0) jpeg_skip_scanlines(ci, (JDIMENSION)w->y0);
  int rw = (int)width, rh = w->y1 - w->y0, cw = (rw + hs - 1) / hs, ch = (rh + vs - 1) / vs;
  size_t ysz = (size_t)rw * rh, csz = grey ? 0 : (size_t)cw * ch;
  int rc = planes_room(buf, ysz, csz, rw, rh, err);
  if (!rc && !grey && r->row_cap < (size_t)rw * 3) {
    free(r->row);
    r->row_cap = 0;
    if (!(r->row = malloc((size_t)rw * 3 + 64)))
      rc = stk__errf(err, STK_ENOMEM, "jpeg: out of memory for a %d-pixel row", rw);
    else
      r->row_cap = (size_t)rw * 3;
  }
  if (rc) return rc;
  uint8_t *yp = buf->p, *cbp = yp + ysz, *crp = cbp + csz;
  for (int y = 0; y < rh; y++) {
    JSAMPROW row = grey ? yp + (size_t)y * rw : r->row;
    if (jpeg_read_scanlines(ci, &row, 1) != 1)
      return stk__errf(err, STK_EDECODE, "jpeg: no row %d of the region", w->y0 + y);
    if (grey) continue;
    int crow = y % vs == 0;
    split_row(r->row, rw, hs, yp + (size_t)y * rw, crow ? cbp + (size_t)(y / vs) * cw : NULL,
              crow ? crp + (size_t)(y / vs) * cw : NULL);
  }
  memset(img, 0, sizeof *img);
  img->base[0] = yp, img->stride[0] = (size_t)rw;
  img->np = grey ? 1 : 3;
  img->col = grey ? STK__IMG_GRAY : STK__IMG_YCC;
  img->d = 1, img->w = rw, img->h = rh, img->x0 = w->x0, img->y0 = w->y0;
  if (!grey) {
    img->base[1] = cbp, img->base[2] = crp;
    img->stride[1] = img->stride[2] = (size_t)cw;
    img->hs = hs, img->vs = vs, img->cw = cw, img->ch = ch;
  }
  return 0;
}

/* The decode proper, after setjmp: w is widened as libjpeg widens it. */
static int roi_run(struct stk__jpeg_roi *r, const struct stk_field *in, struct stk__jpeg_window *w,
                   struct stk__img_buf *buf, struct stk__img *img, char *err) {
  struct jpeg_decompress_struct *ci = &r->ci;
  jpeg_mem_src(ci, in->data, (unsigned long)in->len);
  jpeg_read_header(ci, TRUE);
  int grey = ci->jpeg_color_space == JCS_GRAYSCALE && ci->num_components == 1;
  if (!grey && (ci->jpeg_color_space != JCS_YCbCr || ci->num_components != 3))
    return stk__errf(err, STK_EDECODE, "jpeg: region decode of colour space %d",
                     (int)ci->jpeg_color_space);
  if (ci->max_v_samp_factor > 4)
    return stk__errf(err, STK_EDECODE, "jpeg: vertical sampling factor %d", ci->max_v_samp_factor);
  int raw = w->x0 == 0 && w->x1 >= (int)ci->image_width;
  ci->raw_data_out = raw ? TRUE : FALSE;
  ci->out_color_space = grey ? JCS_GRAYSCALE : JCS_YCbCr;
  ci->do_fancy_upsampling = FALSE;
  ci->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(ci);
  return raw ? raw_rows(r, w, grey ? 1 : 3, buf, img, err) : scan_rows(r, w, grey, buf, img, err);
}

int stk__jpeg_roi_decode(struct stk__jpeg_roi *r, const struct stk_field *in,
                         struct stk__jpeg_window w, struct stk__img_buf *buf, struct stk__img *img,
                         char *err) {
  r->em.eof = 0;
  r->em.pub.num_warnings = 0;
  if (setjmp(r->em.jb)) {
    jpeg_abort_decompress(&r->ci);
    return stk__errf(err, STK_EDECODE, "jpeg: decode: %s", r->em.msg);
  }
  int rc = roi_run(r, in, &w, buf, img, err);
  jpeg_abort_decompress(&r->ci);
  if (!rc && r->em.eof)
    rc = stk__errf(err, STK_EDECODE, "jpeg: decode (truncated): Premature end of JPEG file");
  return rc;
}
