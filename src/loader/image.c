/* The image decode op (kind "jpeg"): JPEG, PNG and WebP, the format told
 * by the field's first bytes, whatever the file is called (ImageNet has a
 * PNG named .JPEG), then the ResNet-50 transform (torchvision's
 * RandomResizedCrop and RandomHorizontalFlip for training, Resize +
 * CenterCrop for evaluation) to a fixed out_h x out_w tensor, with
 * torchvision's antialiased bilinear resize (image.h has the layout). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "resize.h"

#define OUT_DEFAULT 224
#define OUT_MAX 8192
#define EVAL_CROP_FRACTION 0.875 /* Resize(256) + CenterCrop(224) */

static const float imagenet_mean[3] = {123.675f, 116.28f, 103.53f};
static const float imagenet_std[3] = {58.395f, 57.12f, 57.375f};

static const struct stk__img_codec *const codecs[] = {&stk__img_jpeg, &stk__img_png,
                                                      &stk__img_webp};
#define NCODECS (sizeof codecs / sizeof codecs[0])

/* Per-worker state: each codec's, the decoded pixels, the resize's. */
struct image_tls {
  void *codec[NCODECS];
  struct stk__img_buf buf;
  struct stk__img_out *out;
};

/* ---- configuration --------------------------------------------------- */

static int resolve_norm(const struct stk_decode_cfg *cfg, struct stk__img_params *p, char *err) {
  /* std all zeros: ImageNet's std, and ImageNet's mean too unless a mean is
   * given (a mean alone is the caller's, not ignored). A std given with a
   * zero mean is a zero mean (scaling to 0..1 is mean 0, std 255). */
  int std_set = cfg->std[0] != 0 || cfg->std[1] != 0 || cfg->std[2] != 0;
  int mean_set = std_set || cfg->mean[0] != 0 || cfg->mean[1] != 0 || cfg->mean[2] != 0;
  for (int c = 0; c < 3; c++) {
    float mean = mean_set ? cfg->mean[c] : imagenet_mean[c];
    float sd = std_set ? cfg->std[c] : imagenet_std[c];
    if (!isfinite(mean))
      return stk__errf(err, STK_EINVAL, "jpeg: mean[%d] = %g must be a finite number", c,
                       (double)mean);
    if (!(sd > 0) || !isfinite(sd))
      return stk__errf(err, STK_EINVAL, "jpeg: std[%d] = %g must be positive and finite", c,
                       (double)sd);
    p->scale[c] = 1.0f / sd;
    p->bias[c] = -mean / sd;
  }
  return 0;
}

/* Fill p from cfg: zero fields take torchvision's ResNet-50 defaults;
 * mean/std as resolve_norm says. */
static int resolve(const struct stk_decode_cfg *cfg, struct stk__img_params *p, char *err) {
  p->oh = cfg->out_h ? cfg->out_h : OUT_DEFAULT;
  p->ow = cfg->out_w ? cfg->out_w : OUT_DEFAULT;
  if (p->oh < 1 || p->ow < 1 || p->oh > OUT_MAX || p->ow > OUT_MAX)
    return stk__errf(err, STK_EINVAL, "jpeg: output size %dx%d out of range", cfg->out_w,
                     cfg->out_h);
  if ((cfg->dtype != STK_DTYPE_U8 && cfg->dtype != STK_DTYPE_F32) ||
      (cfg->layout != STK_LAYOUT_HWC && cfg->layout != STK_LAYOUT_CHW))
    return stk__errf(err, STK_EINVAL, "jpeg: unknown dtype %d or layout %d", cfg->dtype,
                     cfg->layout);
  p->f32 = cfg->dtype == STK_DTYPE_F32;
  p->chw = cfg->layout == STK_LAYOUT_CHW;
  p->train = cfg->train != 0;
  int dscale = cfg->scale_min == 0 && cfg->scale_max == 0;
  int dratio = cfg->ratio_min == 0 && cfg->ratio_max == 0;
  p->smin = dscale ? 0.08 : cfg->scale_min;
  p->smax = dscale ? 1.0 : cfg->scale_max;
  p->rmin = dratio ? 3.0 / 4.0 : cfg->ratio_min;
  p->rmax = dratio ? 4.0 / 3.0 : cfg->ratio_max;
  if (!(p->smin > 0 && p->smin <= p->smax) || !(p->rmin > 0 && p->rmin <= p->rmax))
    return stk__errf(err, STK_EINVAL, "jpeg: bad crop scale [%g, %g] or ratio [%g, %g]", p->smin,
                     p->smax, p->rmin, p->rmax);
  return resolve_norm(cfg, p, err);
}

static uint64_t out_bytes(const struct stk__img_params *p) {
  return (uint64_t)p->oh * (uint64_t)p->ow * 3u * (p->f32 ? 4u : 1u);
}

/* ---- crop geometry --------------------------------------------------- */

/* The training crop: torchvision's RandomResizedCrop (resize.h), resized
 * to the output. */
static struct stk__img_rect train_crop(const struct stk__img_params *p, int W, int H,
                                       struct stk_rng *rng) {
  int c[4];
  stk__rs_random_crop(rng, W, H, p->smin, p->smax, p->rmin, p->rmax, c);
  return (struct stk__img_rect){c[0], c[1], c[2], c[3], p->ow, p->oh, 0, 0};
}

/* torchvision's Resize(side) with side = max(out) / 0.875 (256 for 224),
 * then CenterCrop(out): the shorter side becomes side and the longer
 * int(side * long / short); the window starts at round((resized - out) /
 * 2), Python's round (half to even, as nearbyint). */
static struct stk__img_rect eval_crop(const struct stk__img_params *p, int W, int H) {
  long side = (long)floor(STK__MAX(p->oh, p->ow) / EVAL_CROP_FRACTION);
  long rw = side, rh = side;
  if (W <= H)
    rh = (long)((double)(side * H) / W);
  else
    rw = (long)((double)(side * W) / H);
  int fx = (int)nearbyint((rw - p->ow) / 2.0), fy = (int)nearbyint((rh - p->oh) / 2.0);
  return (struct stk__img_rect){0, 0, W, H, (int)rw, (int)rh, fx, fy};
}

/* ---- ops ------------------------------------------------------------- */

static int image_out_size(const struct stk_decode_cfg *cfg, const struct stk_field *in,
                          uint64_t *size, char *err) {
  (void)in;
  struct stk__img_params p;
  int rc = resolve(cfg, &p, err);
  if (!rc) *size = out_bytes(&p);
  return rc;
}

/* The codec whose signature starts the field. */
static int pick_codec(const struct stk_field *in, size_t *k, char *err) {
  if (in->encoding != STK_ENC_NONE)
    return stk__errf(err, STK_ENOTSUP, "image: field '%s' is deflated; image fields must be stored",
                     in->name);
  for (*k = 0; *k < NCODECS; ++*k)
    if (codecs[*k]->sniff(in->data, in->len)) return 0;
  const uint8_t *b = in->data;
  if (in->len < 4)
    return stk__errf(err, STK_EDECODE, "image: %llu bytes is too short to be an image",
                     (unsigned long long)in->len);
  return stk__errf(err, STK_EDECODE,
                   "image: not a JPEG, PNG or WebP file (starts with %02x %02x %02x %02x)", b[0],
                   b[1], b[2], b[3]);
}

/* The worker's state and the field's codec, its header read. */
static int open_field(void **tls, const struct stk_field *in, struct image_tls **tp, size_t *k,
                      int *W, int *H, char *err) {
  struct image_tls *t = *tls;
  if (!t && !(t = *tls = calloc(1, sizeof *t)))
    return stk__errf(err, STK_ENOMEM, "image: out of memory for decoder state");
  int rc = pick_codec(in, k, err);
  if (!rc) rc = codecs[*k]->header(&t->codec[*k], in, W, H, err);
  *tp = t;
  return rc;
}

/* The op's transform on an open field: crop, decode, output. */
static int transform(const struct stk__img_params *p, struct image_tls *t, size_t k,
                     const struct stk_field *in, int W, int H, uint8_t *out, struct stk_rng *rng,
                     char *err) {
  if (p->train && !rng)
    return stk__errf(err, STK_EINVAL, "jpeg: the training transform needs an rng");
  struct stk__img_rect c = p->train ? train_crop(p, W, H, rng) : eval_crop(p, W, H);
  int flip = p->train && stk_rng_double(rng) < 0.5;
  struct stk__img img;
  int rc = codecs[k]->decode(t->codec[k], in, c, &t->buf, &img, err);
  if (!rc) rc = stk__img_out_run(&t->out, p, c, flip, &img, out, err);
  return rc;
}

static int image_decode(const struct stk_decode_cfg *cfg, void **tls, const struct stk_field *in,
                        uint8_t *out, uint64_t cap, uint64_t *out_len, struct stk_rng *rng,
                        char *err) {
  struct stk__img_params p;
  struct image_tls *t;
  int rc, W, H;
  size_t k;
  if ((rc = resolve(cfg, &p, err)) != 0) return rc;
  if (cap < out_bytes(&p))
    return stk__errf(err, STK_EINVAL, "jpeg: output of %llu bytes is too small for %llu",
                     (unsigned long long)cap, (unsigned long long)out_bytes(&p));
  if ((rc = open_field(tls, in, &t, &k, &W, &H, err)) != 0) return rc;
  if ((rc = transform(&p, t, k, in, W, H, out, rng, err)) != 0) return rc;
  *out_len = out_bytes(&p);
  return 0;
}

/* ---- image fields of the fields decoder ------------------------------ */

static int whole_size(const struct stk_decode_cfg *cfg) {
  return cfg->out_h == 0 && cfg->out_w == 0;
}

int stk__image_field_shape(const struct stk_decode_cfg *cfg, void **tls,
                           const struct stk_field *in, uint8_t *type, uint64_t shape[3],
                           char *err) {
  struct stk__img_params p;
  struct image_tls *t;
  int rc, W, H, chw = cfg->layout == STK_LAYOUT_CHW;
  size_t k;
  if ((rc = open_field(tls, in, &t, &k, &W, &H, err)) != 0) return rc;
  *type = STK_ELEM_U8;
  if (!whole_size(cfg)) {
    if ((rc = resolve(cfg, &p, err)) != 0) return rc;
    W = p.ow, H = p.oh;
    *type = p.f32 ? STK_ELEM_F32 : STK_ELEM_U8;
  } else if (cfg->layout != STK_LAYOUT_HWC && !chw) {
    return stk__errf(err, STK_EINVAL, "image: unknown layout %d", cfg->layout);
  }
  shape[0] = chw ? 3 : (uint64_t)H;
  shape[1] = chw ? (uint64_t)H : (uint64_t)W;
  shape[2] = chw ? (uint64_t)W : 3;
  return 0;
}

/* The whole image, as its format's library converts it to RGB, to out in
 * HWC or CHW. */
static int whole_image(struct image_tls *t, size_t k, const struct stk_field *in, int W, int H,
                       int chw, uint8_t *out, char *err) {
  const struct stk__img_codec *cd = codecs[k];
  struct stk__img img;
  struct stk__img_rect all = {0, 0, W, H, W, H, 0, 0};
  int rc = cd->decode_full ? cd->decode_full(t->codec[k], in, &t->buf, &img, err)
                           : cd->decode(t->codec[k], in, all, &t->buf, &img, err);
  if (rc) return rc;
  if (img.np != 1 || img.col == STK__IMG_YCC || img.w != W || img.h != H || img.d != 1)
    return stk__errf(err, STK_EDECODE, "%s: decoded %dx%d, header said %dx%d", cd->name, img.w,
                     img.h, W, H);
  size_t plane = (size_t)W * H;
  for (int y = 0; y < H; y++) {
    const uint8_t *s = img.base[0] + (size_t)y * img.stride[0];
    size_t row = (size_t)y * W;
    if (img.col == STK__IMG_RGB && !chw) {
      memcpy(out + row * 3, s, (size_t)W * 3);
    } else if (img.col == STK__IMG_RGB) {
      for (int x = 0; x < W; x++)
        for (int c = 0; c < 3; c++) out[c * plane + row + x] = s[3 * x + c];
    } else if (chw) {
      for (int c = 0; c < 3; c++) memcpy(out + c * plane + row, s, (size_t)W);
    } else {
      for (int x = 0; x < W; x++) out[(row + x) * 3] = out[(row + x) * 3 + 1] =
          out[(row + x) * 3 + 2] = s[x];
    }
  }
  return 0;
}

int stk__image_field_decode(const struct stk_decode_cfg *cfg, void **tls,
                            const struct stk_field *in, uint8_t *out, uint64_t cap,
                            struct stk_rng *rng, char *err) {
  struct stk__img_params p;
  struct image_tls *t;
  int rc, W, H;
  size_t k;
  if ((rc = open_field(tls, in, &t, &k, &W, &H, err)) != 0) return rc;
  if (whole_size(cfg)) {
    if (cap < (uint64_t)W * H * 3)
      return stk__errf(err, STK_EINVAL, "image: output of %llu bytes is too small for %dx%d",
                       (unsigned long long)cap, W, H);
    return whole_image(t, k, in, W, H, cfg->layout == STK_LAYOUT_CHW, out, err);
  }
  if ((rc = resolve(cfg, &p, err)) != 0) return rc;
  if (cap < out_bytes(&p))
    return stk__errf(err, STK_EINVAL, "image: output of %llu bytes is too small for %llu",
                     (unsigned long long)cap, (unsigned long long)out_bytes(&p));
  return transform(&p, t, k, in, W, H, out, rng, err);
}

static void image_thread_free(void *tls) {
  struct image_tls *t = tls;
  if (!t) return;
  for (size_t k = 0; k < NCODECS; k++)
    if (t->codec[k]) codecs[k]->free(t->codec[k]);
  free(t->buf.p);
  stk__img_out_free(t->out);
  free(t);
}

const struct stk_decode_ops stk__dec_jpeg = {
    .name = "jpeg",
    .out_size = image_out_size,
    .decode = image_decode,
    .thread_free = image_thread_free,
};
