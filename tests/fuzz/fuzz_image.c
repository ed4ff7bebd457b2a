/* Fuzz the image decoder (src/loader/image.c and its JPEG, PNG and WebP
 * codecs) on whatever bytes come: the format sniffed, the header read,
 * the pixels decoded and resized in the training and evaluation
 * transforms, through one reused per-thread state as a decode worker
 * keeps it. Any crash, leak or read past a buffer is a bug; an error is
 * fine. Images over 4 megapixels are left out (decoding them only costs
 * time: the decoder's own limit is 2^28 bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/loader/decode.h"
#include "../../src/loader/image.h"

static void *tls;

static void free_tls(void) { stk__dec_jpeg.thread_free(tls); }

static int too_big(const struct stk_field *f) {
  static const struct stk__img_codec *const codecs[] = {&stk__img_jpeg, &stk__img_png,
                                                        &stk__img_webp};
  char err[STK_ERRMSG_MAX];
  for (size_t k = 0; k < 3; k++) {
    if (!codecs[k]->sniff(f->data, f->len)) continue;
    void *st = NULL;
    int w = 0, h = 0;
    int rc = codecs[k]->header(&st, f, &w, &h, err);
    codecs[k]->free(st);
    return rc == 0 && (uint64_t)w * (uint64_t)h > (4u << 20);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t out[40 * 24 * 3 * 4];
  static int once;
  if (!once) once = 1, atexit(free_tls);
  struct stk_field f = {.data = data, .len = size, .raw_len = size};
  strcpy(f.name, "jpg");
  if (too_big(&f)) return 0;
  char err[STK_ERRMSG_MAX];
  for (int mode = 0; mode < 2; mode++) {
    struct stk_decode_cfg cfg = {.kind = STK_DECODE_JPEG,
                                 .out_h = 24,
                                 .out_w = 40,
                                 .train = mode,
                                 .dtype = mode ? STK_DTYPE_F32 : STK_DTYPE_U8,
                                 .layout = mode ? STK_LAYOUT_CHW : STK_LAYOUT_HWC};
    struct stk_rng rng;
    stk_rng_seed(&rng, size);
    uint64_t n = 0;
    stk__dec_jpeg.decode(&cfg, &tls, &f, out, sizeof out, &n, &rng, err);
  }
  return 0;
}
