/* Image fields decoded by the fields decoder (stk_loader_opts.image_fields):
 * WebDataset samples of a JPEG, a lossless PNG (RGB or grey) and a lossless
 * WebP, each sample at its own size, come as uint8 RGB pixels in HWC or
 * CHW: the PNG and WebP ones equal to the pixels encoded, the JPEG ones
 * to libjpeg's own RGB decode (what PIL and torchvision give); "-name"
 * leaves a field as stored; with an output size the fields match the
 * image decode (kind JPEG) of the same field, crops and flips included;
 * a field that is not an image fails naming it. */
#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include "stoker/stoker.h"
#include "test.h"

#define N 12

static int width(int id) { return 17 + id * 5; }
static int height(int id) { return 11 + id * 3; }
static int grey(int id) { return id % 3 == 1; }

/* Smooth colours with some texture, w x h x nch. */
static uint8_t *pixels(int id, int nch) {
  int w = width(id), h = height(id);
  uint8_t *p = malloc((size_t)w * h * nch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < nch; c++)
        p[((size_t)y * w + x) * nch + c] = (uint8_t)(x * 7 + y * 3 + c * 60 + ((x * y + id) % 23));
  return p;
}

static uint8_t *jpeg_of(const uint8_t *rgb, int w, int h, size_t *len) {
  tjhandle tj = tjInitCompress();
  CHECK(tj != NULL);
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  CHECK_OK(tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &n, TJSAMP_420, 85, 0));
  tjDestroy(tj);
  uint8_t *copy = malloc(n);
  memcpy(copy, jpg, n);
  tjFree(jpg);
  *len = n;
  return copy;
}

static uint8_t *png_of(const uint8_t *px, int w, int h, int nch, size_t *len) {
  spng_ctx *enc = spng_ctx_new(SPNG_CTX_ENCODER);
  CHECK(enc != NULL);
  struct spng_ihdr ih = {(uint32_t)w, (uint32_t)h, 8,
                         nch == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR, 0, 0, 0};
  CHECK_EQ(spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1), 0);
  CHECK_EQ(spng_set_ihdr(enc, &ih), 0);
  CHECK_EQ(spng_encode_image(enc, px, (size_t)w * h * nch, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  int e;
  void *out = spng_get_png_buffer(enc, len, &e);
  CHECK(out != NULL);
  spng_ctx_free(enc);
  return out;
}

static uint8_t *webp_of(const uint8_t *rgb, int w, int h, size_t *len) {
  uint8_t *o = NULL;
  *len = WebPEncodeLosslessRGB(rgb, w, h, w * 3, &o);
  CHECK(*len > 0);
  uint8_t *copy = malloc(*len);
  memcpy(copy, o, *len);
  WebPFree(o);
  return copy;
}

/* libjpeg's RGB decode of a JPEG (PIL's and torchvision's). */
static uint8_t *jpeg_rgb(const uint8_t *jpg, size_t len, int w, int h) {
  tjhandle tj = tjInitDecompress();
  uint8_t *rgb = malloc((size_t)w * h * 3);
  CHECK_OK(tjDecompress2(tj, jpg, len, rgb, w, 0, h, TJPF_RGB, 0));
  tjDestroy(tj);
  return rgb;
}

static void set_field(struct stk_field *f, const char *name, const uint8_t *p, size_t n) {
  snprintf(f->name, sizeof f->name, "%s", name);
  f->data = p;
  f->len = f->raw_len = n;
}

/* ds/: N samples of jpg, png, webp and cls; bad: sample 5's jpg is text. */
static void write_ds(int bad) {
  struct stk_writer *w;
  struct stk_writer_opts wo = {.format = "wds", .dir = "ds", .samples_per_shard = 5};
  CHECK_OK(stk_writer_open(&w, &wo, NULL));
  for (int id = 0; id < N; id++) {
    int W = width(id), H = height(id);
    uint8_t *rgb = pixels(id, 3), *g = pixels(id, 1);
    size_t lj, lp, lw;
    uint8_t *j = jpeg_of(rgb, W, H, &lj), *p = png_of(grey(id) ? g : rgb, W, H, grey(id) ? 1 : 3, &lp),
            *wp = webp_of(rgb, W, H, &lw);
    char cls[8];
    snprintf(cls, sizeof cls, "%d", id % 3);
    struct stk_sample s;
    memset(&s, 0, sizeof s);
    snprintf(s.key, sizeof s.key, "k%04d", id);
    s.nfields = 4;
    if (bad && id == 5)
      set_field(&s.fields[0], "jpg", (const uint8_t *)"not an image", 12);
    else
      set_field(&s.fields[0], "jpg", j, lj);
    set_field(&s.fields[1], "png", p, lp);
    set_field(&s.fields[2], "webp", wp, lw);
    set_field(&s.fields[3], "cls", (const uint8_t *)cls, strlen(cls));
    CHECK_OK(stk_writer_add(w, &s));
    free(rgb), free(g), free(j), free(p), free(wp);
  }
  CHECK_OK(stk_writer_close(w));
}

static int find(const struct stk_sample *s, const char *name) {
  for (int k = 0; k < s->nfields; k++)
    if (!strcmp(s->fields[k].name, name)) return k;
  return -1;
}

/* f holds want (H x W x 3 HWC) in layout chw or hwc. */
static void check_pixels(const struct stk_field *f, const uint8_t *want, int W, int H, int chw) {
  CHECK_EQ(f->type, STK_ELEM_U8);
  CHECK_EQ(f->ndim, 3);
  uint64_t s0 = chw ? 3 : (uint64_t)H, s1 = chw ? (uint64_t)H : (uint64_t)W,
           s2 = chw ? (uint64_t)W : 3;
  CHECK_EQ(f->shape[0], s0);
  CHECK_EQ(f->shape[1], s1);
  CHECK_EQ(f->shape[2], s2);
  CHECK_EQ(f->len, (uint64_t)W * H * 3);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) {
        size_t at = chw ? ((size_t)c * H + y) * W + x : ((size_t)y * W + x) * 3 + c;
        CHECK_MSG(f->data[at] == want[((size_t)y * W + x) * 3 + c],
                  "%s: pixel (%d, %d) channel %d: %d, want %d", f->name, x, y, c, f->data[at],
                  want[((size_t)y * W + x) * 3 + c]);
      }
}

/* The sampler and decode options open_fields points o at (one loader's
 * options at a time). */
static struct stk_sampler_opts fso;
static struct stk_decode_cfg fdc;

static void open_fields(struct stk_loader_opts *o, const char *images, int layout) {
  stk_loader_opts_init(o);
  stk_sampler_opts_init(&fso);
  stk_decode_cfg_init(&fdc);
  o->sampler = &fso;
  o->decode = &fdc;
  o->batch_size = 4;
  o->threads = 2;
  fdc.kind = STK_DECODE_FIELDS;
  fdc.layout = layout;
  fso.shuffle = STK_SHUFFLE_GLOBAL;
  fso.seed = 9;
  o->on_error = STK_ON_ERROR_FAIL;
  o->image_fields = images;
}

static void whole_images(int chw) {
  write_ds(0);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  struct stk_loader_opts o;
  open_fields(&o, "*", chw ? STK_LAYOUT_CHW : STK_LAYOUT_HWC);
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, err));
  struct stk_batch *b;
  int seen = 0;
  while (stk_loader_next(l, &b) == 0) {
    for (uint32_t i = 0; i < b->n; i++) {
      struct stk_sample s;
      CHECK_OK(stk_batch_sample(l, b, i, &s));
      int id = (int)s.index, W = width(id), H = height(id);
      uint8_t *rgb = pixels(id, 3), *g = pixels(id, 1), *gg = malloc((size_t)W * H * 3);
      for (size_t k = 0; k < (size_t)W * H * 3; k++) gg[k] = g[k / 3];
      check_pixels(&s.fields[find(&s, "png")], grey(id) ? gg : rgb, W, H, chw);
      check_pixels(&s.fields[find(&s, "webp")], rgb, W, H, chw);
      size_t lj;
      uint8_t *j = jpeg_of(rgb, W, H, &lj), *dj = jpeg_rgb(j, lj, W, H);
      check_pixels(&s.fields[find(&s, "jpg")], dj, W, H, chw);
      const struct stk_field *c = &s.fields[find(&s, "cls")];
      CHECK_EQ(c->type, STK_ELEM_NONE);
      CHECK_EQ(c->data[0], '0' + id % 3);
      free(rgb), free(g), free(gg), free(j), free(dj);
      seen++;
    }
    stk_batch_release(l, b);
  }
  CHECK_STR(stk_loader_errmsg(l), "");
  CHECK_EQ(seen, N);
  stk_loader_close(l);
  stk_dataset_close(ds);
}

TEST(loader_fields_image_whole_hwc_as_libjpeg_spng_libwebp) { whole_images(0); }
TEST(loader_fields_image_whole_chw) { whole_images(1); }

/* "-png" leaves the PNG as stored; a name alone picks that field only. */
TEST(loader_fields_image_list_picks_fields) {
  write_ds(0);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  const char *lists[] = {"*,-png", "jpg,webp"};
  for (int t = 0; t < 2; t++) {
    struct stk_loader_opts o;
    open_fields(&o, lists[t], STK_LAYOUT_HWC);
    struct stk_loader *l;
    CHECK_OK(stk_loader_open(&l, ds, &o, err));
    struct stk_batch *b;
    CHECK_OK(stk_loader_next(l, &b));
    struct stk_sample s;
    CHECK_OK(stk_batch_sample(l, b, 0, &s));
    const struct stk_field *p = &s.fields[find(&s, "png")];
    CHECK_EQ(p->type, STK_ELEM_NONE);
    CHECK(p->len > 8 && !memcmp(p->data, "\x89PNG", 4));
    CHECK_EQ(s.fields[find(&s, "jpg")].type, STK_ELEM_U8);
    CHECK_EQ(s.fields[find(&s, "webp")].type, STK_ELEM_U8);
    stk_batch_release(l, b);
    stk_loader_close(l);
  }
  stk_dataset_close(ds);
}

/* With an output size, each image field is what the image decode makes of
 * it: the same crop and flip from the sample's stream. */
TEST(loader_fields_image_sized_as_the_image_decode) {
  write_ds(0);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  static uint8_t want[N][24 * 16 * 3];
  struct stk_loader_opts o;
  open_fields(&o, NULL, STK_LAYOUT_CHW);
  fdc.kind = STK_DECODE_JPEG;
  fdc.field = "webp";
  fdc.out_h = 16, fdc.out_w = 24, fdc.train = 1;
  struct stk_loader *l;
  struct stk_batch *b;
  CHECK_OK(stk_loader_open(&l, ds, &o, err));
  while (stk_loader_next(l, &b) == 0) {
    for (uint32_t i = 0; i < b->n; i++) memcpy(want[b->indices[i]], b->data + b->offsets[i], sizeof want[0]);
    stk_batch_release(l, b);
  }
  stk_loader_close(l);
  fdc.kind = STK_DECODE_FIELDS;
  fdc.field = "webp,cls";
  o.image_fields = "*";
  CHECK_OK(stk_loader_open(&l, ds, &o, err));
  int seen = 0;
  while (stk_loader_next(l, &b) == 0) {
    for (uint32_t i = 0; i < b->n; i++, seen++) {
      struct stk_sample s;
      CHECK_OK(stk_batch_sample(l, b, i, &s));
      const struct stk_field *f = &s.fields[find(&s, "webp")];
      CHECK_EQ(f->type, STK_ELEM_U8);
      CHECK_EQ(f->shape[0], 3);
      CHECK_EQ(f->shape[1], 16);
      CHECK_EQ(f->shape[2], 24);
      CHECK_EQ(f->len, sizeof want[0]);
      CHECK_MSG(!memcmp(f->data, want[s.index], sizeof want[0]), "sample %llu differs",
                (unsigned long long)s.index);
    }
    stk_batch_release(l, b);
  }
  CHECK_EQ(seen, N);
  stk_loader_close(l);
  stk_dataset_close(ds);
}

TEST(loader_fields_image_not_an_image_names_the_field) {
  write_ds(1);
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  struct stk_loader_opts o;
  open_fields(&o, "*", STK_LAYOUT_HWC);
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, err));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) stk_batch_release(l, b);
  CHECK_EQ(rc, STK_EDECODE);
  CHECK_CONTAINS(stk_loader_errmsg(l), "field 'jpg'");
  CHECK_CONTAINS(stk_loader_errmsg(l), "not a JPEG, PNG or WebP");
  CHECK_CONTAINS(stk_loader_errmsg(l), ".tar");
  stk_loader_close(l);
  stk_dataset_close(ds);
}
