/* The raw decoder: the field's bytes as they are (inflated if the format
 * stored them deflated). The pipeline hands stored fields out in place,
 * without calling decode at all; this op runs only when a copy is needed. */
#include <string.h>

#include "decode.h"

static int raw_out_size(const struct stk_decode_cfg *cfg, const struct stk_field *in,
                        uint64_t *size, char *err) {
  (void)cfg;
  (void)err;
  *size = in->encoding == STK_ENC_NONE ? in->len : in->raw_len;
  return 0;
}

static int raw_decode(const struct stk_decode_cfg *cfg, void **tls, const struct stk_field *in,
                      uint8_t *out, uint64_t cap, uint64_t *out_len, struct stk_rng *rng,
                      char *err) {
  (void)cfg;
  (void)tls;
  (void)rng;
  if (in->encoding == STK_ENC_STRIDED) return stk__gather(in, out, cap, out_len, err);
  if (in->encoding == STK_ENC_DEFLATE) {
    if (cap < in->raw_len) return stk__errf(err, STK_ERANGE, "output buffer too small");
    int rc = stk__inflate(in->data, in->len, out, in->raw_len, err);
    if (rc) return rc;
    *out_len = in->raw_len;
    return 0;
  }
  if (cap < in->len) return stk__errf(err, STK_ERANGE, "output buffer too small");
  memcpy(out, in->data, in->len);
  *out_len = in->len;
  return 0;
}

int stk__gather(const struct stk_field *in, uint8_t *out, uint64_t cap, uint64_t *out_len,
                char *err) {
  uint64_t e = in->elem, n = e ? in->raw_len / e : 0;
  if (!e || n * e != in->raw_len || (n && (n - 1) * in->stride + e > in->len) || in->stride < e)
    return stk__errf(err, STK_EFORMAT, "strided field with inconsistent sizes");
  if (cap < in->raw_len) return stk__errf(err, STK_ERANGE, "output buffer too small");
  const uint8_t *p = in->data;
  switch (e) { /* the usual element sizes, as constant-size copies */
  case 1:
    for (uint64_t k = 0; k < n; k++) out[k] = p[k * in->stride];
    break;
  case 4:
    for (uint64_t k = 0; k < n; k++) memcpy(out + 4 * k, p + k * in->stride, 4);
    break;
  case 8:
    for (uint64_t k = 0; k < n; k++) memcpy(out + 8 * k, p + k * in->stride, 8);
    break;
  default:
    for (uint64_t k = 0; k < n; k++) memcpy(out + e * k, p + k * in->stride, e);
  }
  *out_len = in->raw_len;
  return 0;
}

const struct stk_decode_ops stk__dec_raw = {
    .name = "raw",
    .out_size = raw_out_size,
    .decode = raw_decode,
};
