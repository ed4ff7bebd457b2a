/* Tests of the decode backends: the JPEG decoder and its ResNet-50
 * transform (shapes, colour and normalization math, determinism, bad
 * input), the synthetic JPEG generator, the npy extractor (stored and
 * deflated) and stk__inflate. Crop geometry, the resize weights and the
 * random crop's distributions are in test_decode_geometry.c. */
#include <math.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"
#include "../src/loader/resize.h"
#include "test.h"
#include "test_decode.h"

/* ---- helpers --------------------------------------------------------- */

static uint8_t *solid(int w, int h, uint8_t r, uint8_t g, uint8_t b, size_t *len) {
  uint8_t *px = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) px[3 * i] = r, px[3 * i + 1] = g, px[3 * i + 2] = b;
  uint8_t *jpg = encode(px, w, h, TJPF_RGB, TJSAMP_420, 95, len);
  free(px);
  return jpg;
}

static double fval(const uint8_t *out, size_t i) {
  float f;
  memcpy(&f, out + 4 * i, 4);
  return f;
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

/* ---- JPEG: determinism and reuse ------------------------------------ */

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
