/* Tests of the decode backends: the JPEG decoder and its ResNet-50
 * transform (shapes, colour and normalization math, crop geometry against
 * a float reference, flip, determinism, bad input), the synthetic JPEG
 * generator, the npy extractor (stored and deflated) and stk__inflate;
 * the resize weights against hand-computed and PyTorch-computed cases, and
 * the random crop's distributions against torchvision's. */
#include <math.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"
#include "../src/loader/resize.h"
#include "test.h"

/* ---- helpers --------------------------------------------------------- */

/* Encode w x h pixels of format pf (TJPF_RGB, TJPF_GRAY, TJPF_CMYK) into a
 * malloc'ed JPEG. */
static uint8_t *encode(const uint8_t *px, int w, int h, int pf, int samp, int q, size_t *len) {
  tjhandle tj = tjInitCompress();
  CHECK(tj != NULL);
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  CHECK_MSG(tjCompress2(tj, px, w, 0, h, pf, &jpg, &n, samp, q, 0) == 0, "encode: %s",
            tjGetErrorStr2(tj));
  tjDestroy(tj);
  uint8_t *copy = malloc(n);
  memcpy(copy, jpg, n);
  tjFree(jpg);
  *len = n;
  return copy;
}

static uint8_t *solid(int w, int h, uint8_t r, uint8_t g, uint8_t b, size_t *len) {
  uint8_t *px = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) px[3 * i] = r, px[3 * i + 1] = g, px[3 * i + 2] = b;
  uint8_t *jpg = encode(px, w, h, TJPF_RGB, TJSAMP_420, 95, len);
  free(px);
  return jpg;
}

/* A horizontal ramp: value = x * 255 / (w - 1) in every channel. */
static uint8_t *ramp(int w, int h, size_t *len) {
  uint8_t *px = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        px[((size_t)y * w + x) * 3 + c] = (uint8_t)lround(x * 255.0 / (w - 1));
  uint8_t *jpg = encode(px, w, h, TJPF_RGB, TJSAMP_444, 100, len);
  free(px);
  return jpg;
}

/* Smooth content, different in each channel, so a point-sampled float
 * reference is fair at any downscale: waves a few periods across. */
static uint8_t *smooth(int w, int h, size_t *len) {
  uint8_t *px = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double u = (double)x / w, v = (double)y / h;
      uint8_t *p = px + ((size_t)y * w + x) * 3;
      p[0] = (uint8_t)lround(128 + 100 * sin(6.0 * u + 1.0) * cos(2.0 * v));
      p[1] = (uint8_t)lround(128 + 100 * cos(4.0 * v + 0.5));
      p[2] = (uint8_t)lround(40 + 180 * u * v);
    }
  uint8_t *jpg = encode(px, w, h, TJPF_RGB, TJSAMP_420, 95, len);
  free(px);
  return jpg;
}

static uint8_t *synth(uint64_t seed, int w, int h, size_t *len) {
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  uint8_t *jpg;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk__jpeg_synth(&r, w, h, 90, &jpg, len, err) == 0, "synth: %s", err);
  return jpg;
}

static struct stk_field field_of(const uint8_t *data, size_t len) {
  struct stk_field f = {.data = data, .len = len, .raw_len = len};
  strcpy(f.name, "jpg");
  return f;
}

/* Decode with ops through a caller-held tls (NULL: a fresh one freed
 * here); *out is malloc'ed with out_size bytes. Returns the decode's code;
 * err gets the detail string. */
static int run(const struct stk_decode_ops *ops, const struct stk_decode_cfg *cfg, void **tls,
               const struct stk_field *f, uint64_t seed, uint8_t **out, uint64_t *len, char *err) {
  void *own = NULL;
  uint64_t size = 0;
  int rc = ops->out_size(cfg, f, &size, err);
  if (rc) return rc;
  *out = malloc(size ? size : 1); /* exact, so the sanitizers see any overrun */
  struct stk_rng rng;
  stk_rng_seed(&rng, seed);
  rc = ops->decode(cfg, tls ? tls : &own, f, *out, size, len, &rng, err);
  if (!rc) CHECK_EQ(*len, size);
  if (ops->thread_free) ops->thread_free(own);
  return rc;
}

static struct stk_decode_cfg jcfg(int train, int dtype, int layout) {
  return (struct stk_decode_cfg){
      .kind = STK_DECODE_JPEG, .train = train, .dtype = dtype, .layout = layout};
}

static double fval(const uint8_t *out, size_t i) {
  float f;
  memcpy(&f, out + 4 * i, 4);
  return f;
}

/* Channel c of pixel (x, y) of an oh x ow u8 output in either layout. */
static int px_at(const uint8_t *o, int layout, int oh, int ow, int y, int x, int c) {
  return layout == STK_LAYOUT_HWC ? o[((size_t)y * ow + x) * 3 + c]
                                  : o[(size_t)c * oh * ow + (size_t)y * ow + x];
}

/* ---- JPEG: shapes and math ------------------------------------------- */

TEST(decode_jpeg_shapes) {
  size_t len;
  uint8_t *jpg = synth(7, 333, 250, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  for (int dt = 0; dt < 2; dt++)
    for (int lay = 0; lay < 2; lay++) {
      struct stk_decode_cfg cfg = jcfg(1, dt, lay);
      uint64_t size, n;
      uint8_t *out;
      CHECK_OK(stk__dec_jpeg.out_size(&cfg, NULL, &size, err));
      CHECK_EQ(size, 224ull * 224 * 3 * (dt ? 4 : 1));
      CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 1, &out, &n, err) == 0, "%s", err);
      CHECK_EQ(n, size);
      if (dt) /* normalized values of 0..255 inputs stay within about +-2.7 */
        for (size_t i = 0; i < n / 4; i++) CHECK(fabs(fval(out, i)) < 2.7);
      free(out);
    }
  struct stk_decode_cfg odd = jcfg(0, STK_DTYPE_U8, STK_LAYOUT_HWC);
  odd.out_h = 37, odd.out_w = 53;
  uint64_t size;
  CHECK_OK(stk__dec_jpeg.out_size(&odd, NULL, &size, err));
  CHECK_EQ(size, 37 * 53 * 3);
  free(jpg);
}

/* Uniform colours survive the transform within JPEG's error, in the right
 * channel order, and f32 output is (x - mean) / std. */
TEST(decode_jpeg_solid_colour_and_normalization) {
  const uint8_t cols[3][3] = {{128, 128, 128}, {200, 50, 100}, {20, 180, 240}};
  char err[STK_ERRMSG_MAX];
  const double mean[3] = {123.675, 116.28, 103.53}, sd[3] = {58.395, 57.12, 57.375};
  for (int k = 0; k < 3; k++) {
    size_t len;
    uint8_t *jpg = solid(96, 80, cols[k][0], cols[k][1], cols[k][2], &len);
    struct stk_field f = field_of(jpg, len);
    for (int lay = 0; lay < 2; lay++) {
      struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, lay);
      uint8_t *out;
      uint64_t n;
      CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 3, &out, &n, err) == 0, "%s", err);
      for (int y = 0; y < 224; y += 7)
        for (int x = 0; x < 224; x += 5)
          for (int c = 0; c < 3; c++) {
            int v = px_at(out, lay, 224, 224, y, x, c);
            CHECK_MSG(abs(v - cols[k][c]) <= 3, "colour %d channel %d at (%d,%d): %d", k, c, x, y,
                      v);
          }
      free(out);
      cfg.dtype = STK_DTYPE_F32;
      CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 3, &out, &n, err) == 0, "%s", err);
      for (size_t i = 0; i < 224 * 224 * 3; i += 97) {
        int c = lay == STK_LAYOUT_HWC ? (int)(i % 3) : (int)(i / (224 * 224));
        double want = (cols[k][c] - mean[c]) / sd[c];
        CHECK_MSG(fabs(fval(out, i) - want) <= 3.5 / sd[c], "f32 %zu: %f vs %f", i, fval(out, i),
                  want);
      }
      free(out);
    }
    /* Explicit mean/std: std 1 and mean 0 give the raw values. */
    struct stk_decode_cfg raw = jcfg(0, STK_DTYPE_F32, STK_LAYOUT_CHW);
    raw.std[0] = raw.std[1] = raw.std[2] = 1;
    uint8_t *out;
    uint64_t n;
    CHECK_OK(run(&stk__dec_jpeg, &raw, NULL, &f, 0, &out, &n, err));
    for (int c = 0; c < 3; c++)
      CHECK(fabs(fval(out, (size_t)c * 224 * 224 + 1000) - cols[k][c]) <= 3);
    free(out);
    free(jpg);
  }
}

/* f32 output equals the u8 output normalized, for any alignment of out. */
TEST(decode_jpeg_f32_matches_u8_and_unaligned) {
  size_t len;
  uint8_t *jpg = synth(11, 420, 360, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  for (int lay = 0; lay < 2; lay++) {
    struct stk_decode_cfg cu = jcfg(1, STK_DTYPE_U8, lay), cf = jcfg(1, STK_DTYPE_F32, lay);
    uint8_t *u, *fo;
    uint64_t n;
    CHECK_OK(run(&stk__dec_jpeg, &cu, NULL, &f, 5, &u, &n, err));
    CHECK_OK(run(&stk__dec_jpeg, &cf, NULL, &f, 5, &fo, &n, err));
    const double mean[3] = {123.675, 116.28, 103.53}, sd[3] = {58.395, 57.12, 57.375};
    for (size_t i = 0; i < 224 * 224 * 3; i++) {
      int c = lay == STK_LAYOUT_HWC ? (int)(i % 3) : (int)(i / (224 * 224));
      CHECK(fabs(fval(fo, i) - (u[i] - mean[c]) / sd[c]) < 1e-4);
    }
    uint8_t *buf = malloc(n + 4);
    void *tls = NULL;
    struct stk_rng rng;
    stk_rng_seed(&rng, 5);
    uint64_t got;
    CHECK_OK(stk__dec_jpeg.decode(&cf, &tls, &f, buf + 1, n, &got, &rng, err));
    CHECK(memcmp(buf + 1, fo, n) == 0);
    stk__dec_jpeg.thread_free(tls);
    free(buf);
    free(u);
    free(fo);
  }
  free(jpg);
}

/* ---- JPEG: geometry --------------------------------------------------- */

/* Eval mode on a horizontal ramp: shorter side to 256, centre 224 crop. The
 * first column samples the source at x = 68.84 of 400 (value 44.0), and
 * the row is symmetric about the middle. */
TEST(decode_jpeg_eval_center_crop_symmetric) {
  size_t len;
  uint8_t *jpg = ramp(400, 300, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  struct stk_decode_cfg cfg = jcfg(0, STK_DTYPE_U8, STK_LAYOUT_CHW);
  uint8_t *out;
  uint64_t n;
  CHECK_OK(run(&stk__dec_jpeg, &cfg, NULL, &f, 0, &out, &n, err));
  for (int y = 0; y < 224; y += 11)
    for (int x = 0; x < 224; x++) {
      int a = px_at(out, cfg.layout, 224, 224, y, x, 0),
          b = px_at(out, cfg.layout, 224, 224, y, 223 - x, 0);
      CHECK_MSG(abs(a + b - 255) <= 3, "row %d: out[%d] = %d, out[%d] = %d", y, x, a, 223 - x, b);
      CHECK(abs(a - px_at(out, cfg.layout, 224, 224, 0, x, 0)) <= 2); /* rows agree */
    }
  CHECK_MSG(abs(out[0] - 44) <= 2, "first column %d", out[0]);
  CHECK_MSG(abs(out[223] - 211) <= 2, "last column %d", out[223]);
  free(out);
  free(jpg);
}

/* torchvision's antialiased bilinear resize in doubles, written from its
 * documented rule rather than from resize.c: the n samples of a region
 * resized to m, output r centred at (r + 0.5) * n / m, a triangle of
 * half-width max(n / m, 1) over the samples whose centres fall inside it
 * (clipped to the region), normalized. Fills w (room for 2 * n / m + 3)
 * and the first sample; returns the count. */
static int aa_ref_taps(int n, int m, int r, double *w, int *first) {
  double scale = (double)n / m, support = scale > 1 ? scale : 1, c = (r + 0.5) * scale;
  int lo = (int)floor(c - support + 0.5), hi = (int)floor(c + support + 0.5);
  lo = lo < 0 ? 0 : lo;
  hi = hi > n ? n : hi;
  double sum = 0;
  for (int j = lo; j < hi; j++) sum += w[j - lo] = fmax(0, 1 - fabs((j + 0.5 - c) / support));
  for (int j = lo; j < hi; j++) w[j - lo] /= sum;
  *first = lo;
  return hi - lo;
}

/* Compare an output against that reference applied to the full-size RGB
 * decode, as torchvision sees it: crop (cx, cy, cw, ch), resized to rw x
 * rh, window (fx, fy) of the output's size, mirrored if flip. Returns the
 * mean absolute difference. */
static double compare_ref(const uint8_t *jpg, size_t len, const uint8_t *out, int layout, int oh,
                          int ow, int cx, int cy, int cw, int ch, int rw, int rh, int fx, int fy,
                          int flip) {
  tjhandle tj = tjInitDecompress();
  int W, H, ss, cs;
  CHECK_OK(tjDecompressHeader3(tj, jpg, len, &W, &H, &ss, &cs));
  uint8_t *rgb = malloc((size_t)W * H * 3);
  CHECK_OK(tjDecompress2(tj, jpg, len, rgb, W, 0, H, TJPF_RGB, 0));
  tjDestroy(tj);
  double *wx = malloc(sizeof(double) * (2 * (size_t)cw / rw + 8));
  double *wy = malloc(sizeof(double) * (2 * (size_t)ch / rh + 8));
  double sum = 0;
  for (int y = 0; y < oh; y++) {
    int y0, ny = aa_ref_taps(ch, rh, fy + y, wy, &y0);
    for (int x = 0; x < ow; x++) {
      int x0, nx = aa_ref_taps(cw, rw, fx + (flip ? ow - 1 - x : x), wx, &x0);
      for (int c = 0; c < 3; c++) {
        double v = 0;
        for (int j = 0; j < ny; j++)
          for (int i = 0; i < nx; i++)
            v += wy[j] * wx[i] * rgb[((size_t)(cy + y0 + j) * W + cx + x0 + i) * 3 + c];
        sum += fabs(v - px_at(out, layout, oh, ow, y, x, c));
      }
    }
  }
  free(wx);
  free(wy);
  free(rgb);
  return sum / (3.0 * oh * ow);
}

/* Eval mode matches torchvision's Resize(side) + CenterCrop (the reference
 * above) at sizes that decode at 1/1 (photo-like content), and at an odd
 * output size, when upscaling and where the DCT scales by 1/2 and 1/8
 * (smooth content). */
TEST(decode_jpeg_matches_aa_reference) {
  const int sizes[][4] = {{430, 370, 224, 224}, {1000, 900, 224, 224}, {1900, 1800, 224, 224},
                          {500, 333, 37, 53},   {150, 100, 224, 224},  {2100, 1400, 40, 48}};
  char err[STK_ERRMSG_MAX];
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int W = sizes[k][0], H = sizes[k][1], oh = sizes[k][2], ow = sizes[k][3];
    size_t len;
    uint8_t *jpg = k == 0 ? synth(20, W, H, &len) : smooth(W, H, &len);
    struct stk_field f = field_of(jpg, len);
    int side = (int)floor((oh > ow ? oh : ow) / 0.875);
    int rw = W <= H ? side : (int)((double)side * W / H);
    int rh = W <= H ? (int)((double)side * H / W) : side;
    int fx = (int)nearbyint((rw - ow) / 2.0), fy = (int)nearbyint((rh - oh) / 2.0);
    for (int lay = 0; lay < 2; lay++) {
      struct stk_decode_cfg cfg = jcfg(0, STK_DTYPE_U8, lay);
      cfg.out_h = oh, cfg.out_w = ow;
      uint8_t *out;
      uint64_t n;
      CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 0, &out, &n, err) == 0, "%s", err);
      double mad = compare_ref(jpg, len, out, lay, oh, ow, 0, 0, W, H, rw, rh, fx, fy, 0);
      CHECK_MSG(mad < 0.75, "%dx%d -> %dx%d: mean abs diff %.3f", W, H, ow, oh, mad);
      free(out);
    }
    free(jpg);
  }
}

/* ---- resize weights and random crops --------------------------------- */

/* An axis for geometry g in malloc'ed arrays (free a.first, a.wt). */
static struct stk__rs_axis rs_axis(const struct stk__rs_geom *g) {
  struct stk__rs_axis a = {malloc(sizeof(int32_t) * (size_t)g->count),
                           malloc(sizeof(int16_t) * (size_t)g->count * stk__rs_stride(g)), 0, 0, 0};
  double *scratch = malloc(sizeof(double) * stk__rs_scratch(g));
  stk__rs_build(&a, g, scratch);
  free(scratch);
  return a;
}

static void rs_apply(const struct stk__rs_axis *a, int count, const uint8_t *src, uint8_t *dst) {
  for (int i = 0; i < count; i++) {
    int32_t acc = 1 << (a->prec - 1);
    for (int k = 0; k < a->taps; k++) acc += src[a->first[i] + k] * a->wt[i * a->stride + k];
    acc >>= a->prec;
    dst[i] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
  }
}

static struct stk__rs_geom rs_geom(int n, int m) {
  return (struct stk__rs_geom){0, n, m, 0, m, 0, 1, n};
}

/* 4 -> 2 by hand: scale 2, output 0 centred at 1.0 takes samples 0..2 at
 * triangle distances 0.25, 0.25, 0.75 (weights 3/4, 3/4, 1/4, so 3/7, 3/7,
 * 1/7); the largest weight 3/7 fits Q16 (28087) and not Q17. Then impulse
 * and ramp responses against torch 2.14.1's interpolate(antialias=True) on
 * uint8 (values printed by it), for downscales and an upscale. */
TEST(resize_weights_match_pytorch) {
  struct stk__rs_geom g = rs_geom(4, 2);
  struct stk__rs_axis a = rs_axis(&g);
  CHECK(a.prec == 16 && a.taps == 3);
  const int16_t want[2][3] = {{28087, 28087, 9362}, {9362, 28087, 28087}};
  CHECK(a.first[0] == 0 && a.first[1] == 1);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++) CHECK(a.wt[i * a.stride + k] == want[i][k]);
  free(a.first), free(a.wt);
  static const struct {
    int n, m;
    uint8_t out[7][4]; /* impulse of 255 at each input sample */
  } cases[] = {
      {4, 2, {{109, 0}, {109, 36}, {36, 109}, {0, 109}}},
      {2, 4, {{255, 191, 64, 0}, {0, 64, 191, 255}}},
      {5, 3, {{146, 0, 0}, {109, 57, 0}, {0, 142, 0}, {0, 57, 109}, {0, 0, 146}}},
      {7,
       3,
       {{91, 0, 0}, {109, 15, 0}, {55, 60, 0}, {0, 105, 0}, {0, 60, 55}, {0, 15, 109}, {0, 0, 91}}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    g = rs_geom(cases[c].n, cases[c].m);
    a = rs_axis(&g);
    for (int k = 0; k < cases[c].n; k++) {
      uint8_t in[8] = {0}, out[4];
      in[k] = 255;
      rs_apply(&a, g.count, in, out);
      for (int i = 0; i < g.count; i++)
        CHECK_MSG(out[i] == cases[c].out[k][i], "%d -> %d, impulse at %d: out[%d] = %d, not %d",
                  g.len == 0 ? 0 : cases[c].n, cases[c].m, k, i, out[i], cases[c].out[k][i]);
    }
    if (cases[c].n == 7) {
      const uint8_t in[7] = {10, 200, 30, 40, 250, 0, 90}, want3[3] = {96, 94, 86};
      uint8_t out[3];
      rs_apply(&a, 3, in, out);
      CHECK(memcmp(out, want3, 3) == 0);
    }
    free(a.first), free(a.wt);
  }
}

/* A half-resolution chroma plane: 8 luma samples to 4 with the chroma at
 * 4. Output 0 (luma 3/7, 3/7, 1/7 on samples 0..2) through libjpeg's
 * fancy upsampling (luma 0 = 3/4 c0 + 1/4 c0 at the edge, 1 = 3/4 c0 +
 * 1/4 c1, 2 = 3/4 c1 + 1/4 c0) gives c0 22/28, c1 6/28; output 1 (luma
 * 1/8, 3/8, 3/8, 1/8 on 1..4) gives 6/32, 20/32, 6/32 on c0..c2. */
TEST(resize_weights_chroma_compose) {
  struct stk__rs_geom g = {0, 8, 4, 0, 4, 0, 2, 4};
  struct stk__rs_axis a = rs_axis(&g);
  const double want[2][3] = {{22 / 28.0, 6 / 28.0, 0}, {6 / 32.0, 20 / 32.0, 6 / 32.0}};
  CHECK(a.taps == 3 && a.first[0] == 0 && a.first[1] == 0);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++)
      CHECK_MSG(fabs(a.wt[i * a.stride + k] / (double)(1 << a.prec) - want[i][k]) < 1e-4,
                "output %d tap %d: %d / 2^%d", i, k, a.wt[i * a.stride + k], a.prec);
  free(a.first), free(a.wt);
}

/* A centre window of the resized axis, mirrored: the rows are those of
 * the whole axis, in reverse, at the same precision; taps near the end
 * start early enough to stay inside the plane (zero weights first). */
TEST(resize_weights_window_flip_edges) {
  struct stk__rs_geom whole = rs_geom(9, 4), win = {0, 9, 4, 1, 2, 1, 1, 9};
  struct stk__rs_axis a = rs_axis(&whole), b = rs_axis(&win);
  CHECK(a.prec == b.prec && a.taps == b.taps);
  for (int i = 0; i < 2; i++) {
    int r = 2 - i; /* window outputs 0, 1 are resized samples 2, 1 */
    CHECK(b.first[i] == a.first[r]);
    CHECK(memcmp(b.wt + i * b.stride, a.wt + r * a.stride, sizeof(int16_t) * a.taps) == 0);
  }
  for (int i = 0; i < 4; i++) CHECK(a.first[i] >= 0 && a.first[i] + a.taps <= 9);
  CHECK(a.wt[3 * a.stride] == 0); /* the last output's taps were moved left */
  free(a.first), free(a.wt), free(b.first), free(b.wt);
}

/* The measure of {area fraction <= x, fits} (x = INFINITY: all that fit)
 * for log aspect l uniform on [-L, L], fraction s uniform on [a, b] and
 * an image of aspect e^lam: a crop fits iff s <= e^-|l - lam| (w and h
 * before rounding). When y is finite it is the measure of {l <= y, fits}
 * instead. Midpoint rule; the integrand is piecewise smooth. */
static double fit_measure(double L, double a, double b, double lam, double x, double y) {
  const int n = 4000;
  double sum = 0, dl = 2 * L / n;
  for (int i = 0; i < n; i++) {
    double l = -L + (i + 0.5) * dl, top = fmin(b, exp(-fabs(l - lam)));
    if (l > y) break;
    sum += fmax(0, fmin(top, x) - a) * dl;
  }
  return sum;
}

static int cmp_double(const void *p, const void *q) {
  double a = *(const double *)p, b = *(const double *)q;
  return (a > b) - (a < b);
}

/* A CDF tabulated at TAB + 1 points over [lo, hi], read by linear
 * interpolation (the CDFs here are smooth enough for 1e-6). */
#define TAB 1000
struct cdf_tab {
  double lo, hi, v[TAB + 1];
};

/* which: 0 the area fraction over [a, b], 1 the log ratio over [-L, L],
 * 2 the uniform on [0, 1]. */
static void cdf_fill(struct cdf_tab *t, int which, double L, double a, double b, double lam) {
  double total = fit_measure(L, a, b, lam, INFINITY, INFINITY);
  t->lo = which == 0 ? a : which == 1 ? -L : 0;
  t->hi = which == 0 ? b : which == 1 ? L : 1;
  for (int i = 0; i <= TAB; i++) {
    double x = t->lo + (t->hi - t->lo) * i / TAB;
    t->v[i] = which == 2   ? x
              : which == 0 ? fit_measure(L, a, b, lam, x, INFINITY) / total
                           : fit_measure(L, a, b, lam, INFINITY, x) / total;
  }
}

static double cdf_at(const struct cdf_tab *t, double x) {
  double u = (x - t->lo) / (t->hi - t->lo) * TAB;
  if (u <= 0) return t->v[0] * (u >= 0);
  if (u >= TAB) return 1;
  int i = (int)u;
  return t->v[i] + (t->v[i + 1] - t->v[i]) * (u - i);
}

/* Kolmogorov-Smirnov distance between the sample v (n values, sorted
 * here) and the CDF t. */
static double ks(double *v, int n, const struct cdf_tab *t) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double d = 0;
  for (int i = 0; i < n; i++) {
    double f = cdf_at(t, v[i]);
    d = fmax(d, fmax(fabs(f - (double)i / n), fabs(f - (double)(i + 1) / n)));
  }
  return d;
}

/* 100,000 crops per image at a fixed seed against torchvision's
 * get_params: the area fraction and the log aspect ratio follow the
 * uniform draws conditioned on fitting (the analytic CDFs above), the
 * offsets are uniform, and on a 10:1 image the central fallback comes
 * as often as ten misses in a row, (1 - P(fit))^10. The KS bound is
 * 2.7 / sqrt(n) (a false alarm once in a million seeds) plus 0.002 for
 * rounding w and h to whole pixels; a ratio drawn uniformly instead of
 * log-uniformly is off by 0.07, an area drawn log-uniformly by 0.2. */
TEST(resize_random_crop_distribution) {
  const int n = 100000;
  const double L = log(4.0 / 3.0), bound = 2.7 / sqrt(n) + 0.002;
  const int dims[][2] = {{4000, 4000}, {4000, 3000}, {3000, 4000}};
  double *area = malloc(sizeof(double) * n), *logr = malloc(sizeof(double) * n);
  double *off = malloc(sizeof(double) * n);
  struct cdf_tab *tab = malloc(sizeof *tab * 3);
  struct stk_rng rng;
  stk_rng_seed(&rng, 2024);
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    int W = dims[k][0], H = dims[k][1];
    for (int w = 0; w < 3; w++) cdf_fill(&tab[w], w, L, 0.08, 1.0, log((double)W / H));
    for (int i = 0; i < n; i++) {
      int c[4];
      stk__rs_random_crop(&rng, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, c);
      CHECK(c[0] >= 0 && c[1] >= 0 && c[0] + c[2] <= W && c[1] + c[3] <= H);
      area[i] = (double)c[2] * c[3] / ((double)W * H);
      logr[i] = log((double)c[2] / c[3]);
      off[i] = (c[0] + 0.5) / (W - c[2] + 1);
    }
    double da = ks(area, n, &tab[0]), dr = ks(logr, n, &tab[1]), dx = ks(off, n, &tab[2]);
    CHECK_MSG(da < bound && dr < bound && dx < bound,
              "%dx%d: KS area %.4f, log ratio %.4f, "
              "offset %.4f (bound %.4f)",
              W, H, da, dr, dx, bound);
  }
  /* 10:1: P(fit) is small, so the fallback (the 4:3 centre) is common. */
  int W = 10000, H = 1000, fallback = 0;
  double p = fit_measure(L, 0.08, 1.0, log(10.0), INFINITY, INFINITY) / (2 * L * 0.92);
  double q = pow(1 - p, 10);
  for (int i = 0; i < n; i++) {
    int c[4];
    stk__rs_random_crop(&rng, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, c);
    fallback += c[0] == 4333 && c[1] == 0 && c[2] == 1333 && c[3] == 1000;
  }
  double sd = sqrt(n * q * (1 - q));
  CHECK_MSG(q > 0.05 && fabs(fallback - n * q) < 5 * sd + 0.002 * n,
            "fallbacks %d, expected %.0f (P(fit) %.4f)", fallback, n * q, p);
  free(area), free(logr), free(off), free(tab);
}

/* Training mode with the crop pinned to the whole image (scale 1, ratio
 * W/H): the output is the resized image, mirrored for about half the
 * seeds. */
TEST(decode_jpeg_train_flip) {
  size_t len;
  uint8_t *jpg = synth(31, 480, 360, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_HWC);
  cfg.scale_min = cfg.scale_max = 1;
  cfg.ratio_min = cfg.ratio_max = 480.0f / 360.0f;
  int flips = 0;
  for (uint64_t seed = 0; seed < 12; seed++) {
    uint8_t *out;
    uint64_t n;
    CHECK_OK(run(&stk__dec_jpeg, &cfg, NULL, &f, seed, &out, &n, err));
    double plain =
        compare_ref(jpg, len, out, cfg.layout, 224, 224, 0, 0, 480, 360, 224, 224, 0, 0, 0);
    double mirrored =
        compare_ref(jpg, len, out, cfg.layout, 224, 224, 0, 0, 480, 360, 224, 224, 0, 0, 1);
    CHECK_MSG((plain < 1.5) != (mirrored < 1.5), "seed %llu: %.2f vs %.2f",
              (unsigned long long)seed, plain, mirrored);
    flips += mirrored < 1.5;
    free(out);
  }
  CHECK_MSG(flips > 0 && flips < 12, "%d of 12 flipped", flips);
  free(jpg);
}

/* The same seed gives the same bytes; different seeds give other crops. */
TEST(decode_jpeg_deterministic_per_seed) {
  size_t len;
  uint8_t *jpg = synth(41, 500, 375, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  void *tls = NULL;
  uint8_t *a, *b, *c;
  uint64_t n;
  CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, 100, &a, &n, err));
  CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, 101, &c, &n, err));
  CHECK_OK(run(&stk__dec_jpeg, &cfg, NULL, &f, 100, &b, &n, err));
  CHECK(memcmp(a, b, n) == 0);
  CHECK(memcmp(a, c, n) != 0);
  int distinct = 0;
  for (uint64_t s = 0; s < 8; s++) {
    uint8_t *o;
    CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, 200 + s, &o, &n, err));
    distinct += memcmp(o, a, n) != 0;
    free(o);
  }
  CHECK_EQ(distinct, 8);
  stk__dec_jpeg.thread_free(tls);
  free(a);
  free(b);
  free(c);
  free(jpg);
}

/* One thread-local state serves images and output sizes that grow and
 * shrink, with the same result as a fresh state. */
TEST(decode_jpeg_tls_reuse) {
  const int sizes[][2] = {{640, 480}, {64, 48}, {1500, 1100}, {333, 500}};
  const int outs[][2] = {{224, 224}, {96, 128}, {300, 260}, {224, 224}};
  char err[STK_ERRMSG_MAX];
  void *tls = NULL;
  for (int k = 0; k < 4; k++) {
    size_t len;
    uint8_t *jpg = synth(50 + k, sizes[k][0], sizes[k][1], &len);
    struct stk_field f = field_of(jpg, len);
    struct stk_decode_cfg cfg = jcfg(1, k & 1, STK_LAYOUT_HWC);
    cfg.out_h = outs[k][0], cfg.out_w = outs[k][1];
    uint8_t *a, *b;
    uint64_t n;
    CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, (uint64_t)k, &a, &n, err));
    CHECK_OK(run(&stk__dec_jpeg, &cfg, NULL, &f, (uint64_t)k, &b, &n, err));
    CHECK(memcmp(a, b, n) == 0);
    free(a);
    free(b);
    free(jpg);
  }
  stk__dec_jpeg.thread_free(tls);
}

/* ---- JPEG: other colour spaces and tiny images ------------------------- */

TEST(decode_jpeg_grayscale_and_cmyk) {
  char err[STK_ERRMSG_MAX];
  uint8_t grey[64 * 40];
  for (int i = 0; i < 64 * 40; i++) grey[i] = (uint8_t)(i % 64 * 4);
  size_t len;
  uint8_t *jpg = encode(grey, 64, 40, TJPF_GRAY, TJSAMP_GRAY, 95, &len);
  struct stk_field f = field_of(jpg, len);
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_HWC);
  uint8_t *out;
  uint64_t n;
  CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 9, &out, &n, err) == 0, "%s", err);
  for (size_t i = 0; i < n; i += 3) CHECK(out[i] == out[i + 1] && out[i] == out[i + 2]);
  free(out);
  free(jpg);

  /* CMYK as Adobe writes it (inverted): R = C * K / 255. */
  uint8_t cmyk[48 * 32 * 4];
  for (int i = 0; i < 48 * 32; i++)
    cmyk[4 * i] = 200, cmyk[4 * i + 1] = 100, cmyk[4 * i + 2] = 50, cmyk[4 * i + 3] = 255;
  jpg = encode(cmyk, 48, 32, TJPF_CMYK, TJSAMP_444, 100, &len);
  f = field_of(jpg, len);
  CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 9, &out, &n, err) == 0, "%s", err);
  CHECK_MSG(abs(out[0] - 200) <= 3 && abs(out[1] - 100) <= 3 && abs(out[2] - 50) <= 3,
            "cmyk -> %d %d %d", out[0], out[1], out[2]);
  free(out);
  free(jpg);
}

TEST(decode_jpeg_tiny_images) {
  const int sizes[][2] = {{1, 1}, {3, 2}, {2, 17}, {17, 1}};
  char err[STK_ERRMSG_MAX];
  for (int k = 0; k < 4; k++) {
    size_t len;
    uint8_t *jpg = solid(sizes[k][0], sizes[k][1], 90, 160, 30, &len);
    struct stk_field f = field_of(jpg, len);
    for (int train = 0; train < 2; train++) {
      struct stk_decode_cfg cfg = jcfg(train, STK_DTYPE_U8, STK_LAYOUT_CHW);
      uint8_t *out;
      uint64_t n;
      CHECK_MSG(run(&stk__dec_jpeg, &cfg, NULL, &f, 1, &out, &n, err) == 0, "%s", err);
      CHECK_MSG(abs(out[0] - 90) <= 6 && abs(out[224 * 224] - 160) <= 6, "%d %d", out[0],
                out[224 * 224]);
      free(out);
    }
    free(jpg);
  }
}

/* ---- JPEG: bad input --------------------------------------------------- */

TEST(decode_jpeg_corrupt_and_truncated) {
  size_t len;
  uint8_t *jpg = synth(61, 320, 240, &len);
  char err[STK_ERRMSG_MAX];
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  uint8_t *out;
  uint64_t n;

  uint8_t junk[1000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 7 + 3);
  struct stk_field f = field_of(junk, sizeof junk);
  CHECK_EQ(run(&stk__dec_jpeg, &cfg, NULL, &f, 1, &out, &n, err), STK_EDECODE);
  CHECK_CONTAINS(err, "not a JPEG, PNG or WebP");
  free(out);

  f = field_of(jpg, 40); /* ends inside the header */
  CHECK_EQ(run(&stk__dec_jpeg, &cfg, NULL, &f, 1, &out, &n, err), STK_EDECODE);
  free(out);

  f = field_of(jpg, len / 2); /* ends inside the scan */
  CHECK_EQ(run(&stk__dec_jpeg, &cfg, NULL, &f, 1, &out, &n, err), STK_EDECODE);
  CHECK_CONTAINS(err, "truncated");
  free(out);

  /* Garbage in the entropy-coded data: an error or a damaged image, never
   * a crash (the sanitizer builds check the "never"). */
  void *tls = NULL;
  uint8_t *bad = malloc(len);
  for (int k = 0; k < 40; k++) {
    memcpy(bad, jpg, len);
    for (int j = 0; j < 8; j++)
      bad[len / 3 + (size_t)(k * 131 + j * 977) % (len / 2)] ^= (uint8_t)(0x5a + k + j);
    f = field_of(bad, len);
    int rc = run(&stk__dec_jpeg, &cfg, &tls, &f, (uint64_t)k, &out, &n, err);
    CHECK_MSG(rc == 0 || rc == STK_EDECODE, "rc %d", rc);
    free(out);
  }
  /* The state survives errors: a good image still decodes to the same bytes. */
  uint8_t *a, *b;
  f = field_of(jpg, len);
  CHECK_OK(run(&stk__dec_jpeg, &cfg, &tls, &f, 3, &a, &n, err));
  CHECK_OK(run(&stk__dec_jpeg, &cfg, NULL, &f, 3, &b, &n, err));
  CHECK(memcmp(a, b, n) == 0);
  stk__dec_jpeg.thread_free(tls);
  free(a);
  free(b);
  free(bad);
  free(jpg);
}

TEST(decode_jpeg_bad_config) {
  size_t len;
  uint8_t *jpg = synth(71, 200, 150, &len);
  struct stk_field f = field_of(jpg, len);
  char err[STK_ERRMSG_MAX];
  uint64_t size, n;
  uint8_t buf[64];
  void *tls = NULL;
  struct stk_rng rng;
  stk_rng_seed(&rng, 1);
  struct stk_decode_cfg cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  CHECK_EQ(stk__dec_jpeg.decode(&cfg, &tls, &f, buf, sizeof buf, &n, &rng, err), STK_EINVAL);
  cfg.dtype = 7;
  CHECK_EQ(stk__dec_jpeg.out_size(&cfg, &f, &size, err), STK_EINVAL);
  cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  cfg.scale_min = 0.9f, cfg.scale_max = 0.5f;
  CHECK_EQ(stk__dec_jpeg.out_size(&cfg, &f, &size, err), STK_EINVAL);
  cfg = jcfg(1, STK_DTYPE_F32, STK_LAYOUT_CHW);
  cfg.std[0] = 1, cfg.std[1] = -1, cfg.std[2] = 1;
  CHECK_EQ(stk__dec_jpeg.out_size(&cfg, &f, &size, err), STK_EINVAL);
  cfg = jcfg(1, STK_DTYPE_U8, STK_LAYOUT_CHW);
  cfg.out_h = 100000;
  CHECK_EQ(stk__dec_jpeg.out_size(&cfg, &f, &size, err), STK_EINVAL);
  stk__dec_jpeg.thread_free(tls);
  free(jpg);
}

/* ---- synthetic JPEGs --------------------------------------------------- */

TEST(decode_jpeg_synth_deterministic) {
  size_t a_len, b_len, c_len;
  uint8_t *a = synth(5, 480, 360, &a_len), *b = synth(5, 480, 360, &b_len),
          *c = synth(6, 480, 360, &c_len);
  CHECK(a_len == b_len && memcmp(a, b, a_len) == 0);
  CHECK(a_len != c_len || memcmp(a, c, a_len) != 0);
  double bpp = 8.0 * (double)a_len / (480.0 * 360.0);
  CHECK_MSG(bpp > 0.4 && bpp < 2.5, "%.2f bits per pixel", bpp);
  struct stk_rng r;
  stk_rng_seed(&r, 1);
  uint8_t *o;
  size_t n;
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk__jpeg_synth(&r, 0, 10, 90, &o, &n, err), STK_EINVAL);
  CHECK_EQ(stk__jpeg_synth(&r, 10, 10, 101, &o, &n, err), STK_EINVAL);
  free(a);
  free(b);
  free(c);
}

/* ---- npy ------------------------------------------------------------- */

/* A .npy file: version ver, header dict text, then data. */
static uint8_t *npy_file(int ver, const char *dict, const void *data, size_t dlen, size_t *len) {
  size_t pre = ver == 1 ? 10 : 12, hl = strlen(dict) + 1;
  size_t total = (pre + hl + 63) / 64 * 64;
  uint8_t *p = malloc(total + dlen);
  memcpy(p, "\x93NUMPY", 6);
  p[6] = (uint8_t)ver, p[7] = 0;
  size_t h = total - pre;
  if (ver == 1)
    p[8] = (uint8_t)h, p[9] = (uint8_t)(h >> 8);
  else
    for (int i = 0; i < 4; i++) p[8 + i] = (uint8_t)(h >> (8 * i));
  memset(p + pre, ' ', h);
  memcpy(p + pre, dict, strlen(dict));
  p[total - 1] = '\n';
  memcpy(p + total, data, dlen);
  *len = total + dlen;
  return p;
}

static uint8_t *deflate_raw(const uint8_t *in, size_t n, size_t *out_len) {
  z_stream zs = {0};
  CHECK(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  size_t cap = deflateBound(&zs, n);
  uint8_t *out = malloc(cap);
  zs.next_in = (Bytef *)in, zs.avail_in = (uInt)n, zs.next_out = out, zs.avail_out = (uInt)cap;
  CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  *out_len = zs.total_out;
  deflateEnd(&zs);
  return out;
}

static const struct stk_decode_cfg npy_cfg = {.kind = STK_DECODE_NPY};

TEST(decode_npy_stored_v1_v2) {
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)i * 1.5f;
  char err[STK_ERRMSG_MAX];
  for (int ver = 1; ver <= 3; ver++) {
    size_t len;
    uint8_t *file = npy_file(ver, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                             data, sizeof data, &len);
    struct stk_field f = {.data = file, .len = len, .raw_len = len};
    uint64_t size, n;
    uint8_t *out;
    CHECK_OK(stk__dec_npy.out_size(&npy_cfg, &f, &size, err));
    CHECK_EQ(size, sizeof data);
    CHECK_MSG(run(&stk__dec_npy, &npy_cfg, NULL, &f, 0, &out, &n, err) == 0, "%s", err);
    CHECK(memcmp(out, data, sizeof data) == 0);
    free(out);
    free(file);
  }
  /* Scalars, fortran order (bytes as stored), bool, unicode, datetime. */
  const struct {
    const char *dict;
    size_t bytes;
  } ok[] = {{"{'descr': '<i8', 'fortran_order': False, 'shape': ()}", 8},
            {"{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3)}", 48},
            {"{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (5,)}", 5},
            {"{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24},
            {"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1, 1)}", 8},
            {"{'descr': '|u1', 'fortran_order': False, 'shape': (0, 7)}", 0}};
  uint8_t bytes[64];
  for (int i = 0; i < 64; i++) bytes[i] = (uint8_t)(i * 13);
  for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
    size_t len;
    uint8_t *file = npy_file(1, ok[k].dict, bytes, ok[k].bytes, &len);
    struct stk_field f = {.data = file, .len = len, .raw_len = len};
    uint8_t *out;
    uint64_t n;
    CHECK_MSG(run(&stk__dec_npy, &npy_cfg, NULL, &f, 0, &out, &n, err) == 0, "%s: %s", ok[k].dict,
              err);
    CHECK_EQ(n, ok[k].bytes);
    CHECK(memcmp(out, bytes, n) == 0);
    free(out);
    free(file);
  }
}

TEST(decode_npy_bad_headers) {
  const struct {
    const char *dict;
    int rc;
  } bad[] = {
      {"{'descr': '<f4', 'shape': (3,)}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,-1)}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", STK_EFORMAT},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", STK_ENOTSUP},
      {"{'descr': '|O', 'fortran_order': False, 'shape': (3,)}", STK_ENOTSUP},
      {"{'descr': '<q7', 'fortran_order': False, 'shape': (3,)}", STK_EFORMAT},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,) junk", STK_EFORMAT},
      {"not a dict", STK_EFORMAT}};
  uint8_t data[12] = {0};
  char err[STK_ERRMSG_MAX];
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    size_t len;
    uint8_t *file = npy_file(1, bad[k].dict, data, sizeof data, &len);
    struct stk_field f = {.data = file, .len = len, .raw_len = len};
    uint64_t size;
    CHECK_MSG(stk__dec_npy.out_size(&npy_cfg, &f, &size, err) == bad[k].rc, "%s", bad[k].dict);
    free(file);
  }
  /* Bad magic, unknown version, header past the end. */
  size_t len;
  uint8_t *file =
      npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", data, 12, &len);
  struct stk_field f = {.data = file, .len = len, .raw_len = len};
  uint64_t size;
  file[1] = 'X';
  CHECK_EQ(stk__dec_npy.out_size(&npy_cfg, &f, &size, err), STK_EFORMAT);
  file[1] = 'N', file[6] = 9;
  CHECK_EQ(stk__dec_npy.out_size(&npy_cfg, &f, &size, err), STK_EFORMAT);
  file[6] = 1;
  f.len = 30;
  CHECK_EQ(stk__dec_npy.out_size(&npy_cfg, &f, &size, err), STK_ETRUNC);
  free(file);
}

TEST(decode_npy_size_mismatch) {
  uint8_t data[16] = {1, 2, 3};
  char err[STK_ERRMSG_MAX];
  size_t len;
  /* (5,) float32 needs 20 bytes; 16 are there. */
  uint8_t *file =
      npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,)}", data, 16, &len);
  struct stk_field f = {.data = file, .len = len, .raw_len = len};
  uint8_t out[64];
  uint64_t n;
  void *tls = NULL;
  CHECK_EQ(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, sizeof out, &n, NULL, err), STK_ETRUNC);
  free(file);
  /* (3,) float32 holds 12; 16 are there. */
  file = npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", data, 16, &len);
  f = (struct stk_field){.data = file, .len = len, .raw_len = len};
  CHECK_EQ(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, sizeof out, &n, NULL, err), STK_EFORMAT);
  /* Output too small. */
  CHECK_EQ(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, 8, &n, NULL, err), STK_EFORMAT);
  free(file);
  file = npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", data, 16, &len);
  f = (struct stk_field){.data = file, .len = len, .raw_len = len};
  CHECK_EQ(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, 8, &n, NULL, err), STK_EINVAL);
  CHECK_OK(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, 16, &n, NULL, err));
  CHECK_EQ(n, 16);
  stk__dec_npy.thread_free(tls);
  free(file);
}

TEST(decode_npy_deflated) {
  static double data[3000];
  for (int i = 0; i < 3000; i++) data[i] = sin(i * 0.01);
  size_t len, zlen;
  uint8_t *file = npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (30, 100), }",
                           data, sizeof data, &len);
  uint8_t *z = deflate_raw(file, len, &zlen);
  char err[STK_ERRMSG_MAX];

  /* stk__inflate alone: exact size, and the size checks. */
  uint8_t *raw = malloc(len + 16);
  CHECK_OK(stk__inflate(z, zlen, raw, len, err));
  CHECK(memcmp(raw, file, len) == 0);
  CHECK_EQ(stk__inflate(z, zlen, raw, len - 1, err), STK_EFORMAT);
  CHECK_EQ(stk__inflate(z, zlen, raw, len + 16, err), STK_EFORMAT);
  CHECK_EQ(stk__inflate(z, zlen / 2, raw, len, err), STK_ETRUNC);
  uint8_t junk[64];
  memset(junk, 0xff, sizeof junk);
  CHECK(stk__inflate(junk, sizeof junk, raw, len, err) < 0);

  /* The npy decoder on the deflated member, twice through one state. */
  struct stk_field f = {.data = z, .len = zlen, .raw_len = len, .encoding = STK_ENC_DEFLATE};
  uint64_t size, n;
  CHECK_OK(stk__dec_npy.out_size(&npy_cfg, &f, &size, err));
  CHECK_EQ(size, sizeof data);
  void *tls = NULL;
  for (int k = 0; k < 2; k++) {
    uint8_t *out;
    CHECK_MSG(run(&stk__dec_npy, &npy_cfg, &tls, &f, 0, &out, &n, err) == 0, "%s", err);
    CHECK_EQ(n, sizeof data);
    CHECK(memcmp(out, data, n) == 0);
    free(out);
  }
  /* A stated size that disagrees with the stream, a truncated stream, junk. */
  uint8_t *out = malloc(sizeof data + 64);
  f.raw_len = len + 8;
  CHECK_OK(stk__dec_npy.out_size(&npy_cfg, &f, &size, err));
  CHECK(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, size, &n, NULL, err) < 0);
  f.raw_len = len;
  f.len = zlen / 2;
  CHECK_EQ(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, sizeof data, &n, NULL, err), STK_ETRUNC);
  f = (struct stk_field){
      .data = junk, .len = sizeof junk, .raw_len = len, .encoding = STK_ENC_DEFLATE};
  CHECK(stk__dec_npy.out_size(&npy_cfg, &f, &size, err) < 0);
  CHECK(stk__dec_npy.decode(&npy_cfg, &tls, &f, out, sizeof data, &n, NULL, err) < 0);
  stk__dec_npy.thread_free(tls);
  free(out);
  free(raw);
  free(z);
  free(file);
}
