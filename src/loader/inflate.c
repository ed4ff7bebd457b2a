/* Raw-deflate decoding (zip/npz method 8) of a whole field into a buffer
 * of its known decoded size, for decoders that get deflated fields.
 * libdeflate's whole-buffer decompressor: the field and its output are
 * both in memory, which is the case it is built for (faster than zlib's
 * streaming inflate; bench/loader.py D1 measures both). */
#include <libdeflate.h>
#include <limits.h>
#include <zlib.h>

#include "decode.h"

/* zlib counts in uInt; feed and drain in slices so fields past 4 GiB work. */
static uInt slice(uint64_t left) { return left > UINT_MAX ? UINT_MAX : (uInt)left; }

/* Why a stream libdeflate refused is bad: zlib's streaming inflate tells a
 * stream that ends early (STK_ETRUNC) from corrupt data, and says where.
 * Only on the error path. */
static int explain(const uint8_t *in, uint64_t in_len, uint64_t out_len, char *err) {
  z_stream zs = {0};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
    return stk__errf(err, STK_ENOMEM, "inflate: cannot initialize zlib");
  uint8_t scratch[16384];
  uint64_t in_left = in_len, done = 0;
  zs.next_in = (Bytef *)in;
  int rc = 0;
  for (;;) {
    zs.avail_in = slice(in_left);
    zs.next_out = scratch;
    zs.avail_out = sizeof scratch;
    uInt ai = zs.avail_in;
    int zr = inflate(&zs, Z_NO_FLUSH);
    in_left -= ai - zs.avail_in;
    done += sizeof scratch - zs.avail_out;
    if (zr == Z_STREAM_END) {
      rc = stk__errf(err, STK_EFORMAT, "inflate: data decodes to %llu bytes, %llu expected",
                     (unsigned long long)done, (unsigned long long)out_len);
      break;
    }
    if (zr == Z_NEED_DICT || zr == Z_DATA_ERROR || zr == Z_MEM_ERROR) {
      rc = stk__errf(err, zr == Z_MEM_ERROR ? STK_ENOMEM : STK_EDECODE,
                     "inflate: corrupt deflate data after %llu of %llu bytes: %s",
                     (unsigned long long)done, (unsigned long long)out_len,
                     zs.msg ? zs.msg : "bad stream");
      break;
    }
    if (in_left == 0 && zs.avail_out != 0) {
      rc = stk__errf(err, STK_ETRUNC, "inflate: deflate data ends after %llu of %llu bytes",
                     (unsigned long long)done, (unsigned long long)out_len);
      break;
    }
  }
  inflateEnd(&zs);
  return rc;
}

int stk__inflate(const uint8_t *in, uint64_t in_len, uint8_t *out, uint64_t out_len, char *err) {
  struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
  if (!d) return stk__errf(err, STK_ENOMEM, "inflate: out of memory for a decompressor");
  size_t got = 0, used = 0;
  enum libdeflate_result r =
      libdeflate_deflate_decompress_ex(d, in, (size_t)in_len, out, (size_t)out_len, &used, &got);
  libdeflate_free_decompressor(d);
  switch (r) {
  case LIBDEFLATE_SUCCESS:
    if (got != out_len)
      return stk__errf(err, STK_EFORMAT, "inflate: data decodes to %llu bytes, %llu expected",
                       (unsigned long long)got, (unsigned long long)out_len);
    return 0;
  case LIBDEFLATE_INSUFFICIENT_SPACE:
    return stk__errf(err, STK_EFORMAT, "inflate: data decodes to more than the %llu bytes expected",
                     (unsigned long long)out_len);
  default:
    return explain(in, in_len, out_len, err);
  }
}
