/* The JPEG codec of the image decoder (image.h): libjpeg-turbo.
 *
 * It is built to cost about a plain full-size decode. The image is decoded
 * once, at 1/1 or at a DCT scale (1/8, 1/4, 1/2) only where that leaves
 * two decoded samples per output sample (pick_denom), and straight to
 * planar YCbCr, so libjpeg's upsampling and colour conversion never run at
 * full size: image_out.c folds the chroma upsampling into the chroma
 * planes' resize weights. CMYK, YCCK and RGB-coded files come as packed
 * RGB pixels. A training crop well inside the image is decoded as a
 * window (decode_jpeg_roi.c): the same planes, only the part of them the
 * resize reads. */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode_jpeg_roi.h"
#include "image.h"

#define DCT_MARGIN 2.0 /* see pick_denom */

/* Per-worker state: the turbojpeg handle, and the header just read. */
struct jpeg_state {
  tjhandle tj;
  struct stk__jpeg_roi *roi; /* the window decoder, made on first use */
  unsigned denoms;           /* bit d set when 1/d DCT scaling is available */
  int W, H, ss, cs;
};

/* The largest DCT scale-down (1/8, 1/4, 1/2) that leaves at least
 * DCT_MARGIN decoded samples per output sample on both axes, so the
 * antialiased resize still sees the detail it averages. The IDCT's own
 * low-pass is not torchvision's triangle: with one decoded sample per
 * output (the old rule) photos lost 9 to 20 dB against torchvision; with
 * two they lose 1.4 to 2.3 dB and stay above 49 dB (docs/internals/
 * loader.md has the figures). The M/8 factors
 * in between are skipped on purpose: their IDCTs have no SIMD code and
 * decode slower than 1/1. */
static int pick_denom(const struct jpeg_state *t, struct stk__img_rect c) {
  double sx = c.w / c.rw, sy = c.h / c.rh;
  for (int d = 8; d >= 2; d /= 2)
    if ((t->denoms & (1u << d)) && sx >= DCT_MARGIN * d && sy >= DCT_MARGIN * d) return d;
  return 1;
}

/* turbojpeg reports both errors and warnings as -1. Warnings (a few stray
 * bytes, an odd marker) are accepted as libjpeg does; a file that ends
 * early is not, since it decodes to a grey-filled image. */
static int tj_check(struct jpeg_state *t, int rc, const char *what, char *err) {
  if (rc == 0) return 0;
  const char *msg = tjGetErrorStr2(t->tj);
  int warn = tjGetErrorCode(t->tj) == TJERR_WARNING;
  if (warn && !strstr(msg, "Premature end")) return 0;
  return stk__errf(err, STK_EDECODE, "jpeg: %s%s: %s", what, warn ? " (truncated)" : "", msg);
}

/* Decode to Y, Cb, Cr planes (or one grey plane) at sw x sh. The buffer
 * has slack past the last plane: the 16-wide passes may read beyond the
 * span they use. */
static int decode_yuv(struct jpeg_state *t, const struct stk_field *in, int sw, int sh,
                      struct stk__img_buf *buf, struct stk__img *img, char *err) {
  int ss = t->ss, n = ss == TJSAMP_GRAY ? 1 : 3;
  size_t off[4] = {0};
  for (int k = 0; k < n; k++) off[k + 1] = off[k] + tjPlaneSizeYUV(k, sw, 0, sh, ss);
  if (off[n] > STK__IMG_MAX_BYTES)
    return stk__errf(err, STK_EDECODE, "jpeg: %dx%d image too large", sw, sh);
  int rc = stk__img_grow(buf, off[n] + 64, err);
  if (rc) return rc;
  unsigned char *planes[3] = {buf->p, buf->p + off[1], buf->p + off[2]};
  rc = tjDecompressToYUVPlanes(t->tj, in->data, in->len, planes, sw, NULL, sh, 0);
  if ((rc = tj_check(t, rc, "decode", err)) != 0) return rc;
  for (int k = 0; k < n; k++) {
    img->base[k] = planes[k];
    img->stride[k] = (size_t)tjPlaneWidth(k, sw, ss);
  }
  img->np = n;
  img->col = n == 1 ? STK__IMG_GRAY : STK__IMG_YCC;
  if (n == 3) {
    img->hs = tjMCUWidth[ss] / 8, img->vs = tjMCUHeight[ss] / 8;
    img->cw = tjPlaneWidth(1, sw, ss), img->ch = tjPlaneHeight(1, sh, ss);
  }
  return 0;
}

/* Adobe CMYK as libjpeg hands it over (inverted): R = C * K / 255 etc.
 * In place, from 4 to 3 bytes per pixel. */
static void cmyk_to_rgb(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
    p[3 * i] = (uint8_t)((c * k + 127) / 255);
    p[3 * i + 1] = (uint8_t)((m * k + 127) / 255);
    p[3 * i + 2] = (uint8_t)((y * k + 127) / 255);
  }
}

/* The path for CMYK, YCCK and RGB-coded files: packed RGB pixels. */
static int decode_rgb(struct jpeg_state *t, const struct stk_field *in, int sw, int sh,
                      struct stk__img_buf *buf, struct stk__img *img, char *err) {
  int cmyk = t->cs == TJCS_CMYK || t->cs == TJCS_YCCK, bpp = cmyk ? 4 : 3;
  size_t bytes = (size_t)sw * sh * bpp;
  if (bytes > STK__IMG_MAX_BYTES)
    return stk__errf(err, STK_EDECODE, "jpeg: %dx%d image too large", sw, sh);
  int rc = stk__img_grow(buf, bytes + 64, err);
  if (rc) return rc;
  rc = tjDecompress2(t->tj, in->data, in->len, buf->p, sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB, 0);
  if ((rc = tj_check(t, rc, "decode", err)) != 0) return rc;
  if (cmyk) cmyk_to_rgb(buf->p, (size_t)sw * sh);
  img->base[0] = buf->p;
  img->stride[0] = (size_t)sw * 3;
  img->np = 1;
  img->col = STK__IMG_RGB;
  return 0;
}

/* ---- the codec ------------------------------------------------------- */

static int jpeg_sniff(const uint8_t *p, uint64_t n) {
  return n >= 2 && p[0] == 0xFF && p[1] == 0xD8;
}

static int jpeg_header(void **state, const struct stk_field *in, int *W, int *H, char *err) {
  struct jpeg_state *t = *state;
  if (!t) {
    if (!(t = calloc(1, sizeof *t)) || !(t->tj = tjInitDecompress())) {
      free(t);
      return stk__errf(err, STK_ENOMEM, "jpeg: cannot create a turbojpeg decompressor");
    }
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++)
      if (sf[i].num == 1 && (sf[i].denom == 2 || sf[i].denom == 4 || sf[i].denom == 8))
        t->denoms |= 1u << sf[i].denom;
    *state = t;
  }
  /* A stream that ends before its frame header reads as tables only:
   * turbojpeg then returns success without writing the sizes. */
  t->W = t->H = 0;
  if (tjDecompressHeader3(t->tj, in->data, in->len, &t->W, &t->H, &t->ss, &t->cs) != 0)
    return stk__errf(err, STK_EDECODE, "jpeg: bad header: %s", tjGetErrorStr2(t->tj));
  if (t->W < 1 || t->H < 1)
    return stk__errf(err, STK_EDECODE,
                     "jpeg: no image in the stream (truncated before its frame "
                     "header, or tables only)");
  *W = t->W, *H = t->H;
  return 0;
}

static int jpeg_decode(void *state, const struct stk_field *in, struct stk__img_rect c,
                       struct stk__img_buf *buf, struct stk__img *img, char *err) {
  struct jpeg_state *t = state;
  int d = pick_denom(t, c);
  tjscalingfactor sf = {1, d};
  int sw = TJSCALED(t->W, sf), sh = TJSCALED(t->H, sf);
  memset(img, 0, sizeof *img);
  img->d = d, img->w = sw, img->h = sh;
  /* RGB-coded, CMYK, or a subsampling turbojpeg cannot name: packed RGB */
  if ((t->cs != TJCS_GRAY && t->cs != TJCS_YCbCr) || t->ss < 0 || t->ss >= TJ_NUMSAMP)
    return decode_rgb(t, in, sw, sh, buf, img, err);
  if (d == 1 && stk__jpeg_ends_with_eoi(in->data, in->len)) {
    int gray = t->ss == TJSAMP_GRAY;
    int hs = gray ? 1 : tjMCUWidth[t->ss] / 8, vs = gray ? 1 : tjMCUHeight[t->ss] / 8;
    struct stk__jpeg_window w;
    stk__jpeg_roi_window(c, t->W, t->H, hs, vs, &w);
    if (stk__jpeg_roi_plan(&w, t->W, t->H, vs)) {
      int rc = t->roi ? 0 : stk__jpeg_roi_new(&t->roi, err);
      return rc ? rc : stk__jpeg_roi_decode(t->roi, in, w, buf, img, err);
    }
  }
  return decode_yuv(t, in, sw, sh, buf, img, err);
}

/* The whole image as libjpeg converts it to RGB (PIL's and torchvision's
 * decodes): its own upsampling and colour conversion, pixel for pixel. */
static int jpeg_decode_full(void *state, const struct stk_field *in, struct stk__img_buf *buf,
                            struct stk__img *img, char *err) {
  struct jpeg_state *t = state;
  memset(img, 0, sizeof *img);
  img->d = 1, img->w = t->W, img->h = t->H;
  return decode_rgb(t, in, t->W, t->H, buf, img, err);
}

static void jpeg_free(void *state) {
  struct jpeg_state *t = state;
  if (t) tjDestroy(t->tj);
  if (t) stk__jpeg_roi_free(t->roi);
  free(t);
}

const struct stk__img_codec stk__img_jpeg = {"jpeg",      jpeg_sniff, jpeg_header, jpeg_decode,
                                             jpeg_free, jpeg_decode_full};
