/* Helpers shared by the decode tests (test_decode.c, test_decode_geometry.c):
 * encoding pixels and the synthetic generator's photo-like JPEGs, running a
 * decode backend on one field, the JPEG config, and reading a pixel of an
 * output in either layout. */
#ifndef STOKER_TEST_DECODE_H
#define STOKER_TEST_DECODE_H

#include <stdlib.h>
#include <turbojpeg.h>

#include "../src/gen/synth.h"
#include "../src/loader/decode.h"
#include "test.h"

/* Encode w x h pixels of format pf (TJPF_RGB, TJPF_GRAY, TJPF_CMYK) into a
 * malloc'ed JPEG. */
static __attribute__((unused)) uint8_t *encode(const uint8_t *px, int w, int h, int pf, int samp,
                                               int q, size_t *len) {
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

static __attribute__((unused)) uint8_t *synth(uint64_t seed, int w, int h, size_t *len) {
  struct stk_rng r;
  stk_rng_seed(&r, seed);
  uint8_t *jpg;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk__jpeg_synth(&r, w, h, 90, &jpg, len, err) == 0, "synth: %s", err);
  return jpg;
}

static __attribute__((unused)) struct stk_field field_of(const uint8_t *data, size_t len) {
  struct stk_field f = {.data = data, .len = len, .raw_len = len};
  strcpy(f.name, "jpg");
  return f;
}

/* Decode with ops through a caller-held tls (NULL: a fresh one freed
 * here); *out is malloc'ed with out_size bytes. Returns the decode's code;
 * err gets the detail string. */
static __attribute__((unused)) int run(const struct stk_decode_ops *ops,
                                       const struct stk_decode_cfg *cfg, void **tls,
                                       const struct stk_field *f, uint64_t seed, uint8_t **out,
                                       uint64_t *len, char *err) {
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

static __attribute__((unused)) struct stk_decode_cfg jcfg(int train, int dtype, int layout) {
  return (struct stk_decode_cfg){
      .kind = STK_DECODE_JPEG, .train = train, .dtype = dtype, .layout = layout};
}

/* Channel c of pixel (x, y) of an oh x ow u8 output in either layout. */
static __attribute__((unused)) int px_at(const uint8_t *o, int layout, int oh, int ow, int y, int x,
                                         int c) {
  return layout == STK_LAYOUT_HWC ? o[((size_t)y * ow + x) * 3 + c]
                                  : o[(size_t)c * oh * ow + (size_t)y * ow + x];
}

#endif
