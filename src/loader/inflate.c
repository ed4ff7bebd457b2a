/* Raw-deflate decoding (zip/npz method 8) of a whole field into a buffer
 * of its known decoded size, for decoders that get deflated fields. */
#include <limits.h>
#include <zlib.h>

#include "decode.h"

/* zlib counts in uInt; feed and drain in slices so fields past 4 GiB work. */
static uInt slice(uint64_t left) { return left > UINT_MAX ? UINT_MAX : (uInt)left; }

static int run(z_stream *zs, const uint8_t *in, uint64_t in_len, uint8_t *out, uint64_t out_len,
               char *err) {
  uint64_t in_left = in_len, out_left = out_len;
  zs->next_in = (Bytef *)in;
  zs->next_out = out;
  for (;;) {
    zs->avail_in = slice(in_left);
    zs->avail_out = slice(out_left);
    uInt ai = zs->avail_in, ao = zs->avail_out;
    int zr = inflate(zs, Z_NO_FLUSH);
    in_left -= ai - zs->avail_in;
    out_left -= ao - zs->avail_out;
    if (zr == Z_STREAM_END) break;
    if (zr == Z_NEED_DICT || zr == Z_DATA_ERROR || zr == Z_MEM_ERROR)
      return stk__errf(err, zr == Z_MEM_ERROR ? STK_ENOMEM : STK_EDECODE,
                       "inflate: corrupt deflate data after %llu of %llu bytes: %s",
                       (unsigned long long)(out_len - out_left), (unsigned long long)out_len,
                       zs->msg ? zs->msg : "bad stream");
    if (out_left == 0)
      return stk__errf(err, STK_EFORMAT,
                       "inflate: data decodes to more than the %llu bytes expected",
                       (unsigned long long)out_len);
    if (in_left == 0)
      return stk__errf(err, STK_ETRUNC, "inflate: deflate data ends after %llu of %llu bytes",
                       (unsigned long long)(out_len - out_left), (unsigned long long)out_len);
  }
  if (out_left != 0)
    return stk__errf(err, STK_EFORMAT, "inflate: data decodes to %llu bytes, %llu expected",
                     (unsigned long long)(out_len - out_left), (unsigned long long)out_len);
  return 0;
}

int stk__inflate(const uint8_t *in, uint64_t in_len, uint8_t *out, uint64_t out_len, char *err) {
  z_stream zs = {0};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
    return stk__errf(err, STK_ENOMEM, "inflate: cannot initialize zlib");
  int rc = run(&zs, in, in_len, out, out_len, err);
  inflateEnd(&zs);
  return rc;
}
