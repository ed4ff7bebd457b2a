/* Tests of the JPEG transform's geometry: the eval centre crop and the
 * antialiased resize against a float reference (torchvision's rule), the
 * training flip, the resize weights against hand-computed and
 * PyTorch-computed cases, and the random crop's distributions against
 * torchvision's. */
#include <math.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"
#include "../src/loader/resize.h"
#include "test.h"
#include "test_decode.h"

/* ---- helpers --------------------------------------------------------- */

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
