/* Tests of the JPEG decoder's region decoding (src/loader/
 * decode_jpeg_roi.c): the window's planes are byte for byte that window of
 * a whole planar decode, and the resized output of a crop is byte for
 * byte the same from either, for 4:2:0, 4:2:2, 4:4:0, 4:4:4, 4:1:1 and
 * grey, baseline and progressive, odd sizes and odd offsets; the decode op
 * gives the whole path's output for its own random crops, and takes both
 * paths on photo-sized images. */
#include <math.h>
#include <turbojpeg.h>

#include "../src/loader/decode.h"
#include "../src/loader/decode_jpeg_roi.h"
#include "../src/loader/image.h"
#include "../src/loader/resize.h"
#include "test.h"
#include "test_decode.h"

/* A w x h image with edges, gradients and noise in every channel, so each
 * block and every chroma sample differs from its neighbours. */
static uint8_t *pattern(uint64_t seed, int w, int h, int nch) {
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  uint8_t *px = malloc((size_t)w * h * nch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < nch; c++) {
        int v = (x * (3 + c) + y * (5 - c)) % 256 + ((x / 7 + y / 5) % 2) * 60;
        v += (int)(stk_rng_next(&r) % 41) - 20;
        px[((size_t)y * w + x) * nch + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return px;
}

struct jcase {
  int samp, w, h, progressive;
};

static const struct jcase cases[] = {
    {TJSAMP_420, 301, 237, 0},  {TJSAMP_422, 250, 191, 0}, {TJSAMP_444, 173, 129, 0},
    {TJSAMP_GRAY, 211, 157, 0}, {TJSAMP_440, 190, 203, 0}, {TJSAMP_411, 265, 98, 0},
    {TJSAMP_420, 317, 241, 1},  {TJSAMP_422, 96, 64, 1},
};
#define NCASES (sizeof cases / sizeof cases[0])

static uint8_t *case_jpeg(const struct jcase *k, uint64_t seed, size_t *len) {
  int grey = k->samp == TJSAMP_GRAY;
  uint8_t *px = pattern(seed, k->w, k->h, grey ? 1 : 3);
  tjhandle tj = tjInitCompress();
  CHECK(tj != NULL);
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  int flags = k->progressive ? TJFLAG_PROGRESSIVE : 0;
  CHECK_MSG(tjCompress2(tj, px, k->w, 0, k->h, grey ? TJPF_GRAY : TJPF_RGB, &jpg, &n, k->samp, 88,
                        flags) == 0,
            "encode: %s", tjGetErrorStr2(tj));
  tjDestroy(tj);
  free(px);
  uint8_t *copy = malloc(n);
  memcpy(copy, jpg, n);
  tjFree(jpg);
  *len = n;
  return copy;
}

/* The whole image's planes through the codec (a crop of the whole image
 * is never worth a window). */
static void whole_planes(const struct stk_field *f, void **state, struct stk__img_buf *buf,
                         struct stk__img *img, int *W, int *H) {
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk__img_jpeg.header(state, f, W, H, err));
  struct stk__img_rect all = {0, 0, *W, *H, *W, *H, 0, 0};
  CHECK_OK(stk__img_jpeg.decode(*state, f, all, buf, img, err));
  CHECK_EQ(img->x0, 0);
  CHECK_EQ(img->y0, 0);
  CHECK_EQ(img->w, *W);
}

/* Every sample of roi's planes equals whole's at the same image position. */
static void check_planes(const struct stk__img *whole, const struct stk__img *roi,
                         const struct stk__jpeg_window *asked) {
  CHECK_EQ(roi->np, whole->np);
  CHECK_EQ(roi->col, whole->col);
  CHECK(roi->x0 <= asked->x0 && roi->y0 <= asked->y0);
  CHECK(roi->x0 + roi->w >= asked->x1 && roi->y0 + roi->h >= asked->y1);
  for (int k = 0; k < roi->np; k++) {
    int hs = k ? roi->hs : 1, vs = k ? roi->vs : 1;
    CHECK_EQ(roi->x0 % hs, 0);
    CHECK_EQ(roi->y0 % vs, 0);
    int pw = k ? roi->cw : roi->w, ph = k ? roi->ch : roi->h;
    int ox = roi->x0 / hs, oy = roi->y0 / vs;
    CHECK(ox + pw <= (k ? whole->cw : whole->w) && oy + ph <= (k ? whole->ch : whole->h));
    for (int y = 0; y < ph; y++) {
      const uint8_t *a = roi->base[k] + (size_t)y * roi->stride[k];
      const uint8_t *b = whole->base[k] + (size_t)(y + oy) * whole->stride[k] + ox;
      CHECK_MSG(memcmp(a, b, (size_t)pw) == 0, "plane %d row %d of window at (%d, %d) differs", k,
                y, roi->x0, roi->y0);
    }
  }
}

TEST(decode_jpeg_roi_planes_match_whole) {
  char err[STK_ERRMSG_MAX];
  struct stk__jpeg_roi *r = NULL;
  CHECK_OK(stk__jpeg_roi_new(&r, err));
  struct stk_rng rng;
  stk_rng_seed(&rng, 7);
  for (size_t i = 0; i < NCASES; i++) {
    size_t len;
    uint8_t *jpg = case_jpeg(&cases[i], 100 + i, &len);
    struct stk_field f = field_of(jpg, len);
    void *state = NULL;
    struct stk__img_buf wb = {0}, rb = {0};
    struct stk__img whole, roi;
    int W, H;
    whole_planes(&f, &state, &wb, &whole, &W, &H);
    for (int t = 0; t < 40; t++) {
      /* Odd offsets and sizes, windows touching each edge, single pixels. */
      int x0 = (int)stk_rng_below(&rng, (uint64_t)W), y0 = (int)stk_rng_below(&rng, (uint64_t)H);
      int x1 = x0 + 1 + (int)stk_rng_below(&rng, (uint64_t)(W - x0));
      int y1 = y0 + 1 + (int)stk_rng_below(&rng, (uint64_t)(H - y0));
      if (t == 0) x0 = 0, y0 = 0, x1 = W, y1 = H;
      if (t == 1) x0 = W - 1, y0 = H - 1, x1 = W, y1 = H;
      if (t == 2) x1 = W;
      if (t == 3) y1 = H;
      if (t >= 4 && t < 8) x0 = 0, x1 = W; /* raw rows */
      if (t == 4) y1 = H;
      struct stk__jpeg_window w = {x0, x1, y0, y1};
      CHECK_MSG(stk__jpeg_roi_decode(r, &f, w, &rb, &roi, err) == 0, "case %zu: %s", i, err);
      check_planes(&whole, &roi, &w);
    }
    stk__img_jpeg.free(state);
    free(wb.p), free(rb.p), free(jpg);
  }
  stk__jpeg_roi_free(r);
}

static struct stk__img_params params(int oh, int ow) {
  struct stk__img_params p = {.oh = oh, .ow = ow, .chw = 1, .train = 1};
  for (int c = 0; c < 3; c++) p.scale[c] = 1, p.bias[c] = 0;
  return p;
}

/* The output of crop c (flipped or not) from the window decode_jpeg_roi
 * picks for it equals the output from the whole image. */
static void check_crop(struct stk__jpeg_roi *r, const struct stk_field *f,
                       const struct stk__img *whole, struct stk__img_rect c, int flip,
                       const struct stk__img_params *p, struct stk__img_buf *rb) {
  char err[STK_ERRMSG_MAX];
  int hs = whole->np == 3 ? whole->hs : 1, vs = whole->np == 3 ? whole->vs : 1;
  struct stk__jpeg_window w[2];
  stk__jpeg_roi_window(c, whole->w, whole->h, hs, vs, &w[0]);
  w[1] = w[0];
  stk__jpeg_roi_plan(&w[1], whole->w, whole->h, vs); /* maybe raw rows */
  size_t n = (size_t)p->oh * p->ow * 3;
  uint8_t *a = malloc(n), *b = malloc(n);
  struct stk__img_out *oa = NULL, *ob = NULL;
  CHECK_OK(stk__img_out_run(&oa, p, c, flip, whole, a, err));
  for (int k = 0; k < 2; k++) {
    struct stk__img roi;
    CHECK_OK(stk__jpeg_roi_decode(r, f, w[k], rb, &roi, err));
    CHECK_OK(stk__img_out_run(&ob, p, c, flip, &roi, b, err));
    CHECK_MSG(memcmp(a, b, n) == 0, "crop %g,%g %gx%g flip %d (window %d,%d %dx%d) differs", c.x,
              c.y, c.w, c.h, flip, roi.x0, roi.y0, roi.w, roi.h);
  }
  stk__img_out_free(oa), stk__img_out_free(ob);
  free(a), free(b);
}

TEST(decode_jpeg_roi_output_matches_whole) {
  char err[STK_ERRMSG_MAX];
  struct stk__jpeg_roi *r = NULL;
  CHECK_OK(stk__jpeg_roi_new(&r, err));
  struct stk_rng rng;
  stk_rng_seed(&rng, 11);
  for (size_t i = 0; i < NCASES; i++) {
    size_t len;
    uint8_t *jpg = case_jpeg(&cases[i], 200 + i, &len);
    struct stk_field f = field_of(jpg, len);
    void *state = NULL;
    struct stk__img_buf wb = {0}, rb = {0};
    struct stk__img whole;
    int W, H;
    whole_planes(&f, &state, &wb, &whole, &W, &H);
    /* Downscaled, upscaled and near 1:1 outputs, odd-sized ones too. */
    const int sizes[][2] = {{48, 48}, {224, 224}, {37, 61}};
    for (int s = 0; s < 3; s++) {
      struct stk__img_params p = params(sizes[s][0], sizes[s][1]);
      for (int t = 0; t < 12; t++) {
        int crop[4];
        stk__rs_random_crop(&rng, W, H, 0.02, 1.0, 0.5, 2.0, crop);
        if (t == 0) crop[0] = W - crop[2], crop[1] = H - crop[3]; /* bottom right */
        if (t == 1) crop[0] = 0, crop[1] = 0;
        struct stk__img_rect c = {crop[0], crop[1], crop[2], crop[3], p.ow, p.oh, 0, 0};
        check_crop(r, &f, &whole, c, t & 1, &p, &rb);
      }
    }
    stk__img_jpeg.free(state);
    free(wb.p), free(rb.p), free(jpg);
  }
  stk__jpeg_roi_free(r);
}

/* The decode op, training mode: its output for a seed is the whole
 * decode's output for the crop and flip drawn as image.c draws them, and
 * both paths are taken. */
TEST(decode_jpeg_roi_op_matches_whole_path) {
  char err[STK_ERRMSG_MAX];
  const struct jcase photo[] = {
      {TJSAMP_420, 500, 375, 0}, {TJSAMP_GRAY, 333, 500, 0}, {TJSAMP_444, 420, 300, 1}};
  int took[3] = {0, 0, 0}; /* whole, scanline window, raw rows */
  for (size_t i = 0; i < sizeof photo / sizeof photo[0]; i++) {
    size_t len;
    uint8_t *jpg = case_jpeg(&photo[i], 300 + i, &len);
    struct stk_field f = field_of(jpg, len);
    void *state = NULL;
    struct stk__img_buf wb = {0};
    struct stk__img whole;
    int W, H;
    whole_planes(&f, &state, &wb, &whole, &W, &H);
    struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
    struct stk__img_params p = params(224, 224);
    void *tls = NULL;
    for (uint64_t seed = 1; seed <= 24; seed++) {
      uint8_t *out;
      uint64_t n;
      CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, seed, &out, &n, err));
      struct stk_rng rng;
      stk_rng_seed(&rng, seed);
      int crop[4];
      stk__rs_random_crop(&rng, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, crop);
      int flip = stk_rng_double(&rng) < 0.5;
      struct stk__img_rect c = {crop[0], crop[1], crop[2], crop[3], 224, 224, 0, 0};
      uint8_t *ref = malloc(n);
      struct stk__img_out *o = NULL;
      CHECK_OK(stk__img_out_run(&o, &p, c, flip, &whole, ref, err));
      CHECK_MSG(memcmp(out, ref, n) == 0, "image %zu seed %llu differs", i,
                (unsigned long long)seed);
      int hs = whole.np == 3 ? whole.hs : 1, vs = whole.np == 3 ? whole.vs : 1;
      struct stk__jpeg_window w;
      stk__jpeg_roi_window(c, W, H, hs, vs, &w);
      int planned = stk__jpeg_roi_plan(&w, W, H, vs);
      took[planned ? 1 + (w.x1 - w.x0 == W) : 0]++;
      stk__img_out_free(o);
      free(ref), free(out);
    }
    stk__dec_jpeg.thread_free(tls);
    stk__img_jpeg.free(state);
    free(wb.p), free(jpg);
  }
  CHECK_MSG(took[0] > 0 && took[1] > 0 && took[2] > 0, "whole %d, window %d, raw rows %d", took[0],
            took[1], took[2]);
}

/* A file cut short ends without EOI, so it is decoded whole and refused
 * as before, whatever the crop; one whose window fails in the middle
 * names the failure. */
TEST(decode_jpeg_roi_truncated_and_corrupt) {
  char err[STK_ERRMSG_MAX];
  size_t len;
  const struct jcase k = {TJSAMP_420, 400, 300, 0};
  uint8_t *jpg = case_jpeg(&k, 5, &len);
  CHECK(stk__jpeg_ends_with_eoi(jpg, len));
  CHECK(!stk__jpeg_ends_with_eoi(jpg, len - 1));
  struct stk_field f = field_of(jpg, len * 2 / 3);
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    uint8_t *out;
    uint64_t n;
    CHECK_EQ(run(&stk__dec_jpeg, &cfg, NULL, &f, seed, &out, &n, err), STK_EDECODE);
    CHECK_CONTAINS(err, "truncated");
    free(out);
  }
  /* Forced through the window decoder, the cut file fails there too. */
  struct stk__jpeg_roi *r = NULL;
  struct stk__img_buf b = {0};
  struct stk__img img;
  CHECK_OK(stk__jpeg_roi_new(&r, err));
  struct stk__jpeg_window w = {0, 400, 250, 300};
  CHECK_EQ(stk__jpeg_roi_decode(r, &f, w, &b, &img, err), STK_EDECODE);
  CHECK_CONTAINS(err, "Premature end");
  /* Not a JPEG at all: libjpeg's own message, and the decoder still works. */
  uint8_t junk[64] = {0xFF, 0xD8, 0xFF, 0x00};
  struct stk_field bad = field_of(junk, sizeof junk);
  CHECK_EQ(stk__jpeg_roi_decode(r, &bad, w, &b, &img, err), STK_EDECODE);
  CHECK_CONTAINS(err, "jpeg: decode:");
  struct stk_field good = field_of(jpg, len);
  CHECK_OK(stk__jpeg_roi_decode(r, &good, w, &b, &img, err));
  CHECK_EQ(img.y0 + img.h, 300);
  stk__jpeg_roi_free(r);
  free(b.p), free(jpg);
}
