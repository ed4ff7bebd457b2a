/* Antialiased bilinear resize weights, sample for sample the ones PyTorch
 * builds for uint8 images in aten/src/ATen/native/cpu/UpSampleKernel.cpp
 * (HelperInterpLinear with antialias): for output r of a region of len
 * samples resized to R, scale = len / R, the centre is scale * (r + 0.5),
 * the support max(scale, 1), taps from (int)(centre - support + 0.5) to
 * (int)(centre + support + 0.5) clipped to the region, each weighted by
 * the triangle 1 - |x| at (tap + 0.5 - centre) / max(scale, 1), then
 * divided by their sum. The int16 rounding takes the largest precision at
 * which the largest weight of the whole resized axis stays below 2^15, and
 * rounds half away from zero, as PyTorch does. */
#include "resize.h"

#include <math.h>
#include <string.h>

#include "stoker/util.h"

#define CROP_ATTEMPTS 10

static double support_of(const struct stk__rs_geom *g) {
  double scale = g->len / g->resized;
  return scale >= 1.0 ? scale : 1.0;
}

/* Taps of the full-resolution axis PyTorch would use: at most this many. */
static int luma_bound(const struct stk__rs_geom *g) { return (int)ceil(support_of(g)) * 2 + 1; }

int stk__rs_stride(const struct stk__rs_geom *g) {
  int b = luma_bound(g);
  return g->sub <= 1 ? b : b / g->sub + 5;
}

size_t stk__rs_scratch(const struct stk__rs_geom *g) {
  return (size_t)luma_bound(g) + (size_t)stk__rs_stride(g) * ((size_t)g->count + 1);
}

/* The region's integer bounds in full-resolution samples: taps are
 * counted from lo; hi is the first sample past the region. */
static void region(const struct stk__rs_geom *g, long *lo, long *hi) {
  double end = g->start + g->len;
  double re = nearbyint(end);
  *lo = (long)floor(g->start);
  *hi = (long)(fabs(end - re) < 1e-9 ? re : ceil(end));
  if (g->sub <= 1 && *hi > g->n) *hi = g->n;
}

/* PyTorch's taps for resized sample r: w[0..size) for full-resolution
 * samples lo + *xmin on. Returns size. */
static int luma_taps(const struct stk__rs_geom *g, long lo, long hi, int r, double *w, long *xmin) {
  double scale = g->len / g->resized, support = scale >= 1.0 ? scale : 1.0;
  double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  double centre = (g->start - (double)lo) + scale * (r + 0.5);
  long x0 = (long)floor(centre - support + 0.5), x1 = (long)floor(centre + support + 0.5);
  if (x0 < 0) x0 = 0;
  if (x1 > hi - lo) x1 = hi - lo;
  long size = x1 - x0, bound = luma_bound(g);
  if (size < 0) size = 0;
  if (size > bound) size = bound;
  double total = 0;
  for (long j = 0; j < size; j++) {
    double x = fabs((j + x0 - centre + 0.5) * invscale);
    w[j] = x < 1.0 ? 1.0 - x : 0.0;
    total += w[j];
  }
  if (total != 0)
    for (long j = 0; j < size; j++) w[j] /= total; /* a division, as PyTorch rounds it */
  *xmin = x0;
  return (int)size;
}

static long clampl(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Map full-resolution taps (w, size, from sample j0) onto a plane
 * subsampled by g->sub: c[0..) for plane samples *k0 on. Returns the
 * count. Factor 2 is libjpeg's fancy upsampling (sample j is 3/4 of its
 * own chroma sample and 1/4 of the neighbour on its side); others
 * replicate. */
static int compose(const struct stk__rs_geom *g, const double *w, int size, long j0, double *c,
                   long *k0) {
  int sub = g->sub;
  long last = g->n - 1;
  long lo = clampl(j0 / sub - 1, 0, last), hi = clampl((j0 + size - 1) / sub + 1, 0, last);
  if (size <= 0) hi = lo;
  for (long k = lo; k <= hi; k++) c[k - lo] = 0;
  for (int t = 0; t < size; t++) {
    long j = j0 + t, k = j / sub;
    if (sub == 2) {
      long nb = clampl(j & 1 ? k + 1 : k - 1, 0, last);
      c[clampl(k, 0, last) - lo] += 0.75 * w[t];
      c[nb - lo] += 0.25 * w[t];
    } else {
      c[clampl(k, 0, last) - lo] += w[t];
    }
  }
  /* Trim zero ends so the tap count stays tight. */
  long a = lo, b = hi;
  while (a < b && c[a - lo] == 0) a++;
  while (b > a && c[b - lo] == 0) b--;
  if (a > lo) memmove(c, c + (a - lo), sizeof *c * (size_t)(b - a + 1));
  *k0 = a;
  return (int)(b - a + 1);
}

static int precision(double wt_max) {
  int prec;
  for (prec = 0; prec < 22; ++prec) {
    int next = (int)(0.5 + wt_max * (1 << (prec + 1)));
    if (next >= (1 << 15)) break;
  }
  return prec;
}

void stk__rs_build(struct stk__rs_axis *a, const struct stk__rs_geom *g, double *scratch) {
  int stride = stk__rs_stride(g), lb = luma_bound(g);
  double *w = scratch, *c = scratch + lb, *rows = c + stride;
  long lo, hi, x0;
  region(g, &lo, &hi);
  /* The weights as doubles, one row of stride per wanted output, with the
   * tap count (all rows share the largest) and the largest weight. For a
   * full-resolution plane that maximum is over the whole resized axis, the
   * samples a centre crop drops included, as PyTorch sizes its fixed point
   * by it; each resized sample is computed once. */
  int taps = 1, r0 = g->sub <= 1 ? 0 : g->first,
      r1 = g->sub <= 1 ? g->resized : g->first + g->count;
  double wt_max = 0;
  for (int r = r0; r < r1; r++) {
    int size = luma_taps(g, lo, hi, r, w, &x0);
    long k0 = lo + x0;
    if (g->sub > 1) size = compose(g, w, size, k0, c, &k0);
    const double *v = g->sub > 1 ? c : w;
    for (int j = 0; j < size; j++) wt_max = v[j] > wt_max ? v[j] : wt_max;
    if (r < g->first || r >= g->first + g->count) continue;
    int i = r - g->first;
    if (g->flip) i = g->count - 1 - i;
    memcpy(rows + (size_t)i * stride, v, sizeof *v * (size_t)size);
    a->first[i] = (int32_t)k0;
    a->wt[(size_t)i * stride] = (int16_t)size; /* parked until the rounding below */
    taps = size > taps ? size : taps;
  }
  a->stride = stride;
  a->taps = taps;
  a->prec = precision(wt_max);
  double one = (double)(1 << a->prec);
  for (int i = 0; i < g->count; i++) {
    int size = a->wt[(size_t)i * stride];
    long k0 = a->first[i];
    const double *v = rows + (size_t)i * stride;
    /* Start early enough that all taps lie inside the plane. */
    long shift = k0 + taps > g->n ? k0 + taps - g->n : 0;
    if (shift > k0) shift = k0;
    int16_t *row = a->wt + (size_t)i * stride;
    memset(row, 0, sizeof *row * (size_t)stride);
    for (int j = 0; j < size; j++) {
      double q = v[j] * one;
      row[j + shift] = (int16_t)(q < 0 ? (int)(-0.5 + q) : (int)(0.5 + q));
    }
    a->first[i] = (int32_t)(k0 - shift);
  }
}

void stk__rs_random_crop(struct stk_rng *rng, int W, int H, double smin, double smax, double rmin,
                         double rmax, int crop[4]) {
  double area = (double)W * H, lr0 = log(rmin), lr1 = log(rmax);
  for (int i = 0; i < CROP_ATTEMPTS; i++) {
    double target = area * (smin + (smax - smin) * stk_rng_double(rng));
    double aspect = exp(lr0 + (lr1 - lr0) * stk_rng_double(rng));
    double cw = nearbyint(sqrt(target * aspect)), ch = nearbyint(sqrt(target / aspect));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      crop[1] = (int)stk_rng_below(rng, (uint64_t)(H - ch) + 1);
      crop[0] = (int)stk_rng_below(rng, (uint64_t)(W - cw) + 1);
      crop[2] = (int)cw, crop[3] = (int)ch;
      return;
    }
  }
  double in_ratio = (double)W / H, cw = W, ch = H;
  if (in_ratio < rmin)
    ch = nearbyint(cw / rmin);
  else if (in_ratio > rmax)
    cw = nearbyint(ch * rmax);
  cw = cw < 1 ? 1 : cw;
  ch = ch < 1 ? 1 : ch;
  crop[0] = (W - (int)cw) / 2, crop[1] = (H - (int)ch) / 2, crop[2] = (int)cw, crop[3] = (int)ch;
}
