/* The weights of an antialiased bilinear resize along one axis, as
 * PyTorch's _upsample_bilinear2d_aa computes them for uint8 images (which
 * torchvision's resize(antialias=True) calls): a triangle filter whose
 * support grows with the downscale factor, clipped to the region being
 * resized, normalized per output sample, then rounded to int16 in the
 * fixed point PyTorch picks. The image decoder applies them to its planes
 * (src/loader/image_out.c); the format is kept plain so tests can check
 * weights against hand-computed cases. */
#ifndef STK_LOADER_RESIZE_H
#define STK_LOADER_RESIZE_H

#include <stddef.h>
#include <stdint.h>

struct stk_rng;

/* What to resize: the source region [start, start + len) (in samples of
 * the plane, fractional when the plane is a DCT-scaled or subsampled
 * copy) becomes `resized` samples, of which count samples from `first`
 * are wanted (a centre crop takes a window of them), in reverse order if
 * flip. Taps never leave the region nor the plane's [0, n). sub is the
 * plane's subsampling: 1 for full resolution; 2 for a chroma plane at half
 * resolution, which libjpeg's fancy upsampling would have interpolated
 * back (3/4, 1/4 triangle) before torchvision's resize saw it, so the
 * weights are that interpolation followed by the resize; larger factors
 * replicate samples, as libjpeg does. */
struct stk__rs_geom {
  double start, len;
  int resized, first, count, flip, sub, n;
};

/* One axis, ready to apply: output i reads taps samples from first[i],
 * with weights wt[i * stride ...], in Q(prec): out = (sum + 2^(prec-1)) >>
 * prec. Weights past a sample's own taps are 0, and first[i] + taps <= n,
 * so every read stays inside the plane. */
struct stk__rs_axis {
  int32_t *first;
  int16_t *wt;
  int stride, taps, prec;
};

/* The stride stk__rs_build needs for g: an upper bound on taps. */
int stk__rs_stride(const struct stk__rs_geom *g);

/* Scratch doubles stk__rs_build needs for g. */
size_t stk__rs_scratch(const struct stk__rs_geom *g);

/* Fill a->first (count entries), a->wt (count * stk__rs_stride(g)) and
 * a->stride, a->taps, a->prec for g. The arrays are the caller's; scratch
 * holds stk__rs_scratch(g) doubles. Cannot fail. */
void stk__rs_build(struct stk__rs_axis *a, const struct stk__rs_geom *g, double *scratch);

/* torchvision's RandomResizedCrop.get_params, draw for draw with rng: up
 * to ten tries of an area fraction uniform in [smin, smax] and a log
 * aspect ratio uniform in [log rmin, log rmax], w = round(sqrt(area *
 * ratio)), h = round(sqrt(area / ratio)) (half to even, as Python's round),
 * accepted if 0 < w <= W and 0 < h <= H, then the top and the left offset
 * uniform; else the whole image clamped to the ratio range, centred. The
 * crop is crop[0..3] = x, y, w, h in pixels of the W x H image. */
void stk__rs_random_crop(struct stk_rng *rng, int W, int H, double smin, double smax, double rmin,
                         double rmax, int crop[4]);

#endif
