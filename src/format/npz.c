/* NumPy .npz files (zip archives of .npy members, as np.savez and DLIO's
 * unet3d write them), one sample per file whose fields are the members,
 * or DLIO's layout of several samples per file: np.savez(path, x=records,
 * y=labels) with the samples along x's last axis (sample i is x[..., i],
 * a strided field the decode stage gathers) and their labels in y.
 * The index reads the central directory; parse re-reads it from the
 * sample's bytes (the whole file) and points fields at the member data:
 * deflated members are left for the decode stage to inflate. CRC-32 is
 * ISA-L's (src/base/crc.c: 512-bit carry-less multiplies where the CPU has
 * them, 36 GB/s here against libdeflate's 16.8), inflate for checking
 * stays zlib's streaming one (no output buffer to keep). */
#include <stdio.h>
#include <stdlib.h>
#include <libdeflate.h>
#include <string.h>
#include <zlib.h>

#include "format_impl.h"

#define EOCD_SIG 0x06054b50u
#define EOCD64_SIG 0x06064b50u
#define LOC64_SIG 0x07064b50u
#define CEN_SIG 0x02014b50u
#define LOC_SIG 0x04034b50u
#define EOCD_LEN 22
#define CEN_LEN 46
#define LOC_LEN 30
#define TAIL_MAX (EOCD_LEN + 65535 + 20)
#define CD_MAX (16u << 20)

/* The central directory's place, from the end records. */
struct zdir {
  uint64_t cd_off, cd_size, count;
};

struct zent {
  const uint8_t *name;
  size_t nlen;
  unsigned method, flags;
  uint32_t crc;
  uint64_t csize, usize, lho;
};

/* Find the end-of-central-directory record in tail (which ends the file at
 * file offset base + tlen) and resolve zip64 values; 0 or a reason. */
static const char *find_dir(const uint8_t *t, uint64_t tlen, uint64_t base, struct zdir *d) {
  if (tlen < EOCD_LEN) return "too short for a zip file";
  uint64_t pos = tlen - EOCD_LEN;
  for (;; pos--) {
    if (stk__ld32(t + pos) == EOCD_SIG && pos + EOCD_LEN + stk__ld16(t + pos + 20) == tlen) break;
    if (pos == 0 || tlen - pos > TAIL_MAX) return "no zip end-of-central-directory record";
  }
  const uint8_t *e = t + pos;
  d->count = stk__ld16(e + 10);
  d->cd_size = stk__ld32(e + 12);
  d->cd_off = stk__ld32(e + 16);
  if (d->count != 0xffff && d->cd_size != 0xffffffffu && d->cd_off != 0xffffffffu) return NULL;
  if (pos < 20 || stk__ld32(e - 20) != LOC64_SIG) return "zip64 locator missing";
  uint64_t z = stk__ld64(e - 20 + 8);
  if (tlen < 56 || z < base || z - base > tlen - 56) return "zip64 end record outside the file";
  const uint8_t *z64 = t + (z - base);
  if (stk__ld32(z64) != EOCD64_SIG) return "bad zip64 end record";
  d->count = stk__ld64(z64 + 32);
  d->cd_size = stk__ld64(z64 + 40);
  d->cd_off = stk__ld64(z64 + 48);
  return NULL;
}

/* zip64 extra field values for the 32-bit fields that hold 0xffffffff. */
static const char *zip64_extra(const uint8_t *x, size_t xl, struct zent *z) {
  while (xl >= 4) {
    unsigned id = stk__ld16(x), sz = stk__ld16(x + 2);
    if (sz > xl - 4) return "bad zip extra field";
    if (id == 1) {
      const uint8_t *p = x + 4, *end = x + 4 + sz;
      uint64_t *want[3] = {&z->usize, &z->csize, &z->lho};
      for (int i = 0; i < 3; i++) {
        if (*want[i] != 0xffffffffu) continue;
        if (end - p < 8) return "short zip64 extra field";
        *want[i] = stk__ld64(p);
        p += 8;
      }
      return NULL;
    }
    x += 4 + sz;
    xl -= 4 + sz;
  }
  return NULL;
}

/* Central directory entry at *p (inside [*p, end)); advances *p. */
static const char *cen_entry(const uint8_t **p, const uint8_t *end, struct zent *z) {
  const uint8_t *c = *p;
  if (end - c < CEN_LEN || stk__ld32(c) != CEN_SIG) return "bad central directory entry";
  size_t nl = stk__ld16(c + 28), xl = stk__ld16(c + 30), cl = stk__ld16(c + 32);
  if ((size_t)(end - c) - CEN_LEN < nl + xl + cl) return "central directory entry overruns";
  z->flags = stk__ld16(c + 8);
  z->method = stk__ld16(c + 10);
  z->crc = stk__ld32(c + 16);
  z->csize = stk__ld32(c + 20);
  z->usize = stk__ld32(c + 24);
  z->lho = stk__ld32(c + 42);
  z->name = c + CEN_LEN;
  z->nlen = nl;
  const char *why = zip64_extra(c + CEN_LEN + nl, xl, z);
  if (why) return why;
  if (z->flags & 1) return "encrypted zip member";
  if (z->method != 0 && z->method != 8) return "unsupported zip compression method";
  if (z->method == 0 && z->csize != z->usize) return "stored zip member with differing sizes";
  *p = c + CEN_LEN + nl + xl + cl;
  return NULL;
}

static int is_member(const struct zent *z, const char *name) {
  size_t n = strlen(name);
  return (z->nlen == n && !memcmp(z->name, name, n)) ||
         (z->nlen == n + 4 && !memcmp(z->name, name, n) && !memcmp(z->name + n, ".npy", 4));
}

/* A small member's bytes (y: labels), inflated into a malloc'ed buffer if
 * deflated, else copied. At most SMALL_MAX bytes, and no more than eight
 * per byte of the file plus a header's worth: a label takes 8 bytes and a
 * sample at least one, so a larger y is a zip bomb, not labels. */
#define SMALL_MAX (64u << 20)
static const char *small_member(const uint8_t *d, const struct zent *z, uint64_t file_size,
                                uint8_t **out) {
  if (z->usize > SMALL_MAX || z->usize > 4096 + 8 * file_size) return "label member too large";
  if (!(*out = malloc(z->usize ? (size_t)z->usize : 1))) return "out of memory";
  if (z->method == 0) {
    memcpy(*out, d, (size_t)z->usize);
    return NULL;
  }
  struct libdeflate_decompressor *dc = libdeflate_alloc_decompressor();
  size_t got = 0;
  int ok = dc && libdeflate_deflate_decompress(dc, d, (size_t)z->csize, *out, (size_t)z->usize,
                                               &got) == LIBDEFLATE_SUCCESS && got == z->usize;
  if (dc) libdeflate_free_decompressor(dc);
  if (ok) return NULL;
  free(*out);
  *out = NULL;
  return "label member does not inflate";
}

/* Label i of an integer .npy array (y) into *lab: -1 when it is not one.
 * A value that no label can carry (labels are 0..2^31-1, -1 for none) is
 * an error, never a silent -1: returns 1 with the sentence in why (n
 * bytes). */
static int label_at(const uint8_t *p, uint64_t n, uint64_t i, int32_t *lab, char *why, size_t wn) {
  struct stk__npy_info h;
  const char *hw;
  *lab = -1;
  if (stk__npy_info(p, n, 1, &h, &hw) || !h.is_int || i >= h.count) return 0;
  const uint8_t *v = p + h.data_off + i * h.itemsize;
  int64_t x;
  switch (h.itemsize) {
  case 1: x = h.is_signed ? (int8_t)v[0] : v[0]; break;
  case 2: x = h.is_signed ? (int16_t)stk__ld16(v) : stk__ld16(v); break;
  case 4: x = h.is_signed ? (int32_t)stk__ld32(v) : (int64_t)stk__ld32(v); break;
  case 8:
    if (!h.is_signed && stk__ld64(v) > INT64_MAX) {
      snprintf(why, wn, "label %llu is outside the labels stoker carries (0 to 2^31-1, or -1 for "
               "none)", (unsigned long long)stk__ld64(v));
      return 1;
    }
    x = (int64_t)stk__ld64(v);
    break;
  default: return 0;
  }
  if (x < -1 || x > INT32_MAX) {
    snprintf(why, wn, "label %lld is outside the labels stoker carries (0 to 2^31-1, or -1 for "
             "none)", (long long)x);
    return 1;
  }
  *lab = (int32_t)x;
  return 0;
}

/* ---- index ------------------------------------------------------------- */

/* The first bytes of a member's data (its .npy header), inflated when the
 * member is deflated; *got of them in buf. */
static const char *member_head(const struct stk__bytes *sb, const struct zent *z, uint64_t size,
                               uint8_t *buf, size_t cap, size_t *got) {
  uint8_t loc[LOC_LEN];
  if (z->lho > size || size - z->lho < LOC_LEN || stk__bytes_read(sb, loc, LOC_LEN, z->lho) ||
      stk__ld32(loc) != LOC_SIG)
    return "bad zip local header";
  uint64_t data = z->lho + LOC_LEN + stk__ld16(loc + 26) + stk__ld16(loc + 28);
  if (data > size || z->csize > size - data) return "zip member data truncated";
  if (z->method == 0) {
    *got = (size_t)STK__MIN((uint64_t)cap, z->csize);
    return stk__bytes_read(sb, buf, *got, data) ? "read failed" : NULL;
  }
  size_t in_len = (size_t)STK__MIN(z->csize, (uint64_t)(256u << 10));
  uint8_t *in = malloc(in_len ? in_len : 1);
  if (!in) return "out of memory";
  const char *why = stk__bytes_read(sb, in, in_len, data) ? "read failed" : NULL;
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (!why && inflateInit2(&zs, -15) != Z_OK) why = "out of memory";
  else if (!why) {
    zs.next_in = in;
    zs.avail_in = (uInt)in_len;
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    int zr = inflate(&zs, Z_SYNC_FLUSH);
    if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) why = "zip member does not inflate";
    *got = cap - zs.avail_out;
    inflateEnd(&zs);
  }
  free(in);
  return why;
}

/* Samples in a file of DLIO's layout (x with its samples along the last
 * axis, y one integer label per sample), else 1. */
static const char *dlio_samples(const struct stk__bytes *sb, uint64_t size, const struct zent *x,
                                const struct zent *y, uint64_t *n, char *msg, size_t mn) {
  *n = 1;
  if (!x || !y) return NULL;
  uint8_t head[4096];
  size_t got = 0;
  const char *why = member_head(sb, x, size, head, sizeof head, &got);
  if (why) return why;
  struct stk__npy_info h;
  if (stk__npy_info(head, got, 0, &h, &why) || h.ndim < 2 || h.last < 2) return NULL;
  uint8_t loc[LOC_LEN];
  if (y->lho > size || size - y->lho < LOC_LEN || stk__bytes_read(sb, loc, LOC_LEN, y->lho))
    return "bad zip local header";
  uint64_t data = y->lho + LOC_LEN + stk__ld16(loc + 26) + stk__ld16(loc + 28);
  if (data > size || y->csize > size - data || y->csize > SMALL_MAX) return NULL;
  uint8_t *raw = malloc(y->csize ? (size_t)y->csize : 1), *img = NULL;
  if (!raw) return "out of memory";
  if (stk__bytes_read(sb, raw, (size_t)y->csize, data))
    why = "read failed";
  else if (!small_member(raw, y, size, &img)) {
    struct stk__npy_info yh;
    const char *w2;
    if (!stk__npy_info(img, y->usize, 1, &yh, &w2) && yh.is_int && yh.count == h.last) {
      if (x->method != 0)
        why = "x is compressed and holds several samples (DLIO's layout); stoker reads that "
              "layout from np.savez files (stored members)";
      else if (!h.itemsize)
        why = "x has a structured dtype; DLIO's layout needs a simple one";
      else if (x->csize < h.data_off || h.count > (x->csize - h.data_off) / h.itemsize)
        why = "x's data is shorter than its shape says";
      else
        *n = h.last;
      /* Every label is checked here, so a value no label can carry fails
       * the open (inspect, verify) rather than a batch. */
      char lw[128];
      int32_t lab;
      for (uint64_t i = 0; !why && *n > 1 && i < *n; i++)
        if (label_at(img, y->usize, i, &lab, lw, sizeof lw)) {
          snprintf(msg, mn, "y[%llu]: %s", (unsigned long long)i, lw);
          why = msg;
          *n = 1;
        }
    }
  }
  free(raw);
  free(img);
  return why;
}

static int npz_err(const char *path, uint64_t off, int rc, const char *why, char *err) {
  return stk__errf(err, rc, "%s: offset %llu: %s", path, (unsigned long long)off, why);
}

/* Check the end records and central directory; the sample is the file. */
static int npz_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                     char *err) {
  (void)ds;
  uint64_t size = sb->size;
  int rc;
  uint64_t tlen = STK__MIN(size, (uint64_t)TAIL_MAX), base = size - tlen;
  uint8_t *t = malloc(tlen ? (size_t)tlen : 1), *cd = NULL;
  if (!t) return stk__errf(err, STK_ENOMEM, "out of memory");
  struct zdir d;
  const char *why = NULL;
  uint64_t at = base;
  if ((rc = stk__bytes_read(sb, t, (size_t)tlen, base)) != 0)
    why = "read failed";
  else if ((why = find_dir(t, tlen, base, &d)) != NULL) rc = STK_EFORMAT;
  else if (d.cd_off > size || d.cd_size > size - d.cd_off || d.cd_size > CD_MAX)
    why = "central directory outside the file", rc = STK_ETRUNC;
  else if (d.count == 0 || d.count > STK_MAX_FIELDS)
    why = d.count ? "more members than a sample may have fields" : "no members", rc = STK_EFORMAT;
  else if (!(cd = malloc((size_t)d.cd_size + 1))) why = "out of memory", rc = STK_ENOMEM;
  else if ((rc = stk__bytes_read(sb, cd, (size_t)d.cd_size, d.cd_off)) != 0)
    why = "read failed";
  const uint8_t *p = cd, *end = cd + (cd && !rc ? d.cd_size : 0);
  struct zent zx = {0}, zy = {0};
  int hx = 0, hy = 0;
  for (uint64_t i = 0; !rc && i < d.count; i++) {
    struct zent z;
    at = d.cd_off + (uint64_t)(p - cd);
    if ((why = cen_entry(&p, end, &z)) != NULL) rc = STK_EFORMAT;
    else if (z.lho > size || z.csize > size - z.lho)
      why = "member data outside the file", rc = STK_ETRUNC;
    else if (is_member(&z, "x")) zx = z, hx = 1;
    else if (is_member(&z, "y")) zy = z, hy = 1;
  }
  uint64_t n = 1;
  char msg[192];
  if (!rc &&
      (why = dlio_samples(sb, size, hx ? &zx : NULL, hy ? &zy : NULL, &n, msg, sizeof msg)) != NULL)
    rc = STK_EFORMAT, at = why == msg ? zy.lho : hx ? zx.lho : 0;
  free(t);
  free(cd);
  if (rc) return npz_err(sh->path, at, rc, why ? why : "bad zip file", err);
  /* Every sample of a file is read with the whole file (the labels and the
   * directory are at its two ends); ranges that coincide are read once per
   * batch. */
  if (n > size || !(sh->idx = malloc(n * sizeof *sh->idx)))
    return stk__errf(err, STK_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < n; i++) sh->idx[i] = (struct stk_index_entry){0, size};
  sh->count = n;
  return 0;
}

/* ---- parse ------------------------------------------------------------- */

/* Inflate a raw-deflate stream through a small scratch buffer, checking
 * its size and CRC32 without keeping the output. */
static int inflate_check(const uint8_t *p, uint64_t n, uint64_t usize, uint32_t crc) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, -15) != Z_OK) return STK_ENOMEM;
  uint8_t out[16384];
  uint64_t total = 0, left = n;
  uint32_t c = 0;
  int zr = Z_OK;
  zs.next_in = (Bytef *)(uintptr_t)p;
  while (zr == Z_OK) {
    if (zs.avail_in == 0 && left) {
      zs.avail_in = (uInt)STK__MIN(left, (uint64_t)(1u << 30));
      left -= zs.avail_in;
    }
    zs.next_out = out;
    zs.avail_out = sizeof out;
    zr = inflate(&zs, Z_NO_FLUSH);
    size_t got = sizeof out - zs.avail_out;
    total += got;
    c = stk__crc32(c, out, got);
    if (zr == Z_BUF_ERROR && zs.avail_in == 0 && !left) break;
    if (total > usize) break;
  }
  inflateEnd(&zs);
  if (zr != Z_STREAM_END) return STK_EFORMAT;
  return total == usize && c == crc ? 0 : STK_ECRC;
}

static uint32_t crc32_big(const uint8_t *p, uint64_t n) { return stk__crc32(0, p, (size_t)n); }

/* A label from a one-element integer .npy member ("y", "label", "cls"),
 * stored or deflated (np.savez_compressed); 1 with why for a value no label
 * can carry. */
static int member_label(const struct zent *z, const uint8_t *d, struct stk_sample *out, char *why,
                        size_t wn) {
  int named = is_member(z, "y") || is_member(z, "label") || is_member(z, "cls");
  if (!named || out->label >= 0 || z->usize > 4096) return 0;
  uint8_t *img = NULL;
  if (small_member(d, z, 0, &img)) return 0;
  struct stk__npy_info h;
  const char *hw;
  int bad = 0;
  if (!stk__npy_info(img, z->usize, 1, &h, &hw) && h.count == 1)
    bad = label_at(img, z->usize, 0, &out->label, why, wn);
  free(img);
  return bad;
}

/* One member: the local header gives where the data starts. */
static const char *member(const uint8_t *buf, uint64_t len, const struct zent *z, int verify,
                          struct stk_sample *out, int *rc, char *msg, size_t mn) {
  *rc = STK_EFORMAT;
  if (z->lho > len || len - z->lho < LOC_LEN || stk__ld32(buf + z->lho) != LOC_SIG)
    return "bad zip local header";
  uint64_t data = z->lho + LOC_LEN + stk__ld16(buf + z->lho + 26) + stk__ld16(buf + z->lho + 28);
  if (data > len || z->csize > len - data) return *rc = STK_ETRUNC, "zip member data truncated";
  const uint8_t *d = buf + data;
  size_t nl = z->nlen;
  if (nl > 4 && !memcmp(z->name + nl - 4, ".npy", 4)) nl -= 4;
  if (stk__sample_add(out, (const char *)z->name, nl, d, z->csize))
    return "too many members";
  struct stk_field *f = &out->fields[out->nfields - 1];
  f->raw_len = z->usize;
  f->encoding = z->method == 8 ? STK_ENC_DEFLATE : STK_ENC_NONE;
  if (verify && z->method == 0 && crc32_big(d, z->csize) != z->crc)
    return *rc = STK_ECRC, "zip member CRC32 mismatch";
  if (verify && z->method == 8 && (*rc = inflate_check(d, z->csize, z->usize, z->crc)) != 0)
    return *rc == STK_ECRC ? "zip member CRC32 or size mismatch" : "zip member does not inflate";
  if (member_label(z, d, out, msg, mn)) return *rc = STK_ERANGE, msg;
  *rc = 0;
  return NULL;
}

/* Where a member's data starts in buf; NULL with *why. */
static const uint8_t *member_data(const uint8_t *buf, uint64_t len, const struct zent *z,
                                  const char **why, int *rc) {
  *rc = STK_EFORMAT;
  if (z->lho > len || len - z->lho < LOC_LEN || stk__ld32(buf + z->lho) != LOC_SIG)
    return *why = "bad zip local header", NULL;
  uint64_t data = z->lho + LOC_LEN + stk__ld16(buf + z->lho + 26) + stk__ld16(buf + z->lho + 28);
  if (data > len || z->csize > len - data) return *rc = STK_ETRUNC, *why = "zip member data truncated", NULL;
  return buf + data;
}

/* x[..., i]'s element type and shape (x's shape without its last axis),
 * so that consumers of its fields get DLIO's sample as the array it is: a
 * C-order x of a little-endian numeric dtype only (a Fortran-order x's
 * sample is F-ordered bytes, left untyped). */
static void dlio_type(const struct stk__npy_info *h, struct stk_field *f) {
  if (h->fortran || h->ndim - 1 > STK_FIELD_MAX_DIMS) return;
  for (int t = STK_ELEM_U8; t < STK_ELEM_COUNT; t++)
    if (!strcmp(stk__npy_descr(t), h->descr) ||
        (h->descr[0] == '=' && !strcmp(stk__npy_descr(t) + 1, h->descr + 1))) {
      f->type = (uint8_t)t;
      f->ndim = (uint8_t)(h->ndim - 1);
      memset(f->shape, 0, sizeof f->shape);
      memcpy(f->shape, h->shape, sizeof h->shape[0] * (size_t)f->ndim);
      return;
    }
}

/* Sample i of a file of DLIO's layout: x[..., i] (a strided field, or a
 * contiguous one for Fortran order) and its label y[i]. */
static const char *dlio_sample(const struct stk_shard *sh, const uint8_t *buf, uint64_t len,
                               const struct zdir *d, uint64_t i, int verify, struct stk_sample *out,
                               int *rc, uint64_t *at, char *msg, size_t mn) {
  const uint8_t *p = buf + d->cd_off, *end = p + d->cd_size, *xd = NULL, *yd = NULL;
  struct zent z, zx = {0}, zy = {0};
  const char *why;
  for (uint64_t k = 0; k < d->count; k++) {
    *at = (uint64_t)(p - buf);
    if ((why = cen_entry(&p, end, &z)) != NULL) return *rc = STK_EFORMAT, why;
    *at = z.lho;
    const uint8_t *md = member_data(buf, len, &z, &why, rc);
    if (!md) return why;
    if (is_member(&z, "x")) xd = md, zx = z;
    else if (is_member(&z, "y")) yd = md, zy = z;
    else continue;
    if (verify && z.method == 0 && crc32_big(md, z.csize) != z.crc)
      return *rc = STK_ECRC, "zip member CRC32 mismatch";
    if (verify && z.method == 8 && (*rc = inflate_check(md, z.csize, z.usize, z.crc)) != 0)
      return *rc == STK_ECRC ? "zip member CRC32 or size mismatch" : "zip member does not inflate";
  }
  *rc = STK_EFORMAT;
  if (!xd || !yd || zx.method) return "not DLIO's layout any more (x or y changed)";
  *at = zx.lho;
  struct stk__npy_info h;
  if ((*rc = stk__npy_info(xd, zx.csize, 1, &h, &why)) != 0) return why;
  *rc = STK_EFORMAT;
  if (h.last != sh->count || !h.itemsize) return "x's shape changed since the dataset was opened";
  uint64_t per = h.count / h.last;
  if (stk__sample_add(out, "x", 1, xd + h.data_off, per * h.itemsize)) return "too many fields";
  struct stk_field *f = &out->fields[out->nfields - 1];
  if (h.fortran || per == 1) {
    /* x[..., i] is contiguous here, but it is array data all the same (no
     * .npy header of its own): a one-element strided field, so the npy
     * decoder takes it as the array it is. */
    uint64_t bytes = per * h.itemsize;
    f->data = xd + h.data_off + (h.fortran ? i * bytes : i * h.itemsize);
    f->encoding = STK_ENC_STRIDED;
    f->elem = bytes <= UINT32_MAX ? (uint32_t)bytes : (uint32_t)h.itemsize;
    f->stride = f->elem;
  } else {
    f->data = xd + h.data_off + i * h.itemsize;
    f->encoding = STK_ENC_STRIDED;
    f->elem = (uint32_t)h.itemsize;
    f->stride = h.last * h.itemsize;
    f->len = (per - 1) * f->stride + h.itemsize;
  }
  dlio_type(&h, f);
  uint8_t *img = NULL;
  int bad = !small_member(yd, &zy, len, &img) && label_at(img, zy.usize, i, &out->label, msg, mn);
  free(img);
  if (bad) return *at = zy.lho, *rc = STK_ERANGE, msg;
  *rc = 0;
  return NULL;
}

static int npz_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                     const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                     struct stk_sample *out, char *err) {
  (void)ds;
  stk__sample_reset(out, sh);
  const char *b = strrchr(sh->path, '/') ? strrchr(sh->path, '/') + 1 : sh->path;
  size_t bl = strlen(b);
  stk__sample_key(out, b, bl > 4 && !strcmp(b + bl - 4, ".npz") ? bl - 4 : bl);
  struct zdir d;
  const char *why = find_dir(buf, len, 0, &d);
  if (why) return npz_err(sh->path, off, STK_EFORMAT, why, err);
  if (d.cd_off > len || d.cd_size > len - d.cd_off)
    return npz_err(sh->path, off, STK_ETRUNC, "central directory outside the sample", err);
  if (d.count == 0 || d.count > STK_MAX_FIELDS)
    return npz_err(sh->path, off, STK_EFORMAT, "bad member count", err);
  if (sh->count > 1) {
    if (k >= sh->count)
      return npz_err(sh->path, off, STK_EINVAL, "sample number outside the file", err);
    uint64_t i = k, at = 0;
    char key[sizeof out->key];
    size_t kl = bl > 4 && !strcmp(b + bl - 4, ".npz") ? bl - 4 : bl;
    snprintf(key, sizeof key, "%.*s/%llu", (int)STK__MIN(kl, sizeof key - 24), b,
             (unsigned long long)i);
    stk__sample_key(out, key, strlen(key));
    int rc;
    char msg[160];
    if ((why = dlio_sample(sh, buf, len, &d, i, verify, out, &rc, &at, msg, sizeof msg)) != NULL)
      return npz_err(sh->path, off + at, rc, why, err);
    return 0;
  }
  const uint8_t *p = buf + d.cd_off, *end = p + d.cd_size;
  for (uint64_t i = 0; i < d.count; i++) {
    struct zent z;
    int rc;
    uint64_t at = (uint64_t)(p - buf);
    if ((why = cen_entry(&p, end, &z)) != NULL)
      return npz_err(sh->path, off + at, STK_EFORMAT, why, err);
    char msg[160];
    if ((why = member(buf, len, &z, verify, out, &rc, msg, sizeof msg)) != NULL)
      return npz_err(sh->path, off + z.lho, rc, why, err);
  }
  return 0;
}

/* ---- writing ----------------------------------------------------------- */

struct zmem {
  char name[STK_FIELD_NAME_MAX + 8];
  uint32_t crc;
  uint64_t size, lho;
  uint8_t hdr[256]; /* npy header when the field is wrapped */
  size_t hlen;
};

static int put_local(struct stk_writer *w, const struct zmem *m) {
  uint8_t h[LOC_LEN];
  size_t nl = strlen(m->name);
  stk__st32(h, LOC_SIG);
  stk__st16(h + 4, 20);
  stk__st16(h + 6, 0);
  stk__st16(h + 8, 0);
  stk__st16(h + 10, 0);      /* time 00:00 */
  stk__st16(h + 12, 0x21);   /* date 1980-01-01 */
  stk__st32(h + 14, m->crc);
  stk__st32(h + 18, (uint32_t)m->size);
  stk__st32(h + 22, (uint32_t)m->size);
  stk__st16(h + 26, (uint16_t)nl);
  stk__st16(h + 28, 0);
  int rc = stk__wr_write(w, h, sizeof h);
  return rc ? rc : stk__wr_write(w, m->name, nl);
}

static int put_central(struct stk_writer *w, const struct zmem *m) {
  uint8_t c[CEN_LEN];
  size_t nl = strlen(m->name);
  memset(c, 0, sizeof c);
  stk__st32(c, CEN_SIG);
  stk__st16(c + 4, 20);
  stk__st16(c + 6, 20);
  stk__st16(c + 14, 0x21);
  stk__st32(c + 16, m->crc);
  stk__st32(c + 20, (uint32_t)m->size);
  stk__st32(c + 24, (uint32_t)m->size);
  stk__st16(c + 28, (uint16_t)nl);
  stk__st32(c + 38, 0644u << 16);
  stk__st32(c + 42, (uint32_t)m->lho);
  int rc = stk__wr_write(w, c, sizeof c);
  return rc ? rc : stk__wr_write(w, m->name, nl);
}

static int put_eocd(struct stk_writer *w, unsigned n, uint64_t cd_off, uint64_t cd_size) {
  uint8_t e[EOCD_LEN];
  memset(e, 0, sizeof e);
  stk__st32(e, EOCD_SIG);
  stk__st16(e + 8, (uint16_t)n);
  stk__st16(e + 10, (uint16_t)n);
  stk__st32(e + 12, (uint32_t)cd_size);
  stk__st32(e + 16, (uint32_t)cd_off);
  return stk__wr_write(w, e, sizeof e);
}

/* Prepare member i: fields that are .npy images are stored as is, others
 * wrapped as 1-d uint8 arrays; a label becomes "label.npy" (int64). */
static void plan_member(const struct stk_field *f, struct zmem *m) {
  uint64_t doff;
  const char *why;
  snprintf(m->name, sizeof m->name, "%s.npy", f->name);
  m->hlen = 0;
  if (f->encoding != STK_ENC_NONE || stk__npy_check(f->data, f->len, &doff, &why))
    m->hlen = stk__npy_header(m->hdr, sizeof m->hdr, "|u1", &f->len, 1);
  m->size = m->hlen + f->len;
  m->crc = stk__crc32(stk__crc32(0, m->hdr, m->hlen), f->data, (size_t)f->len);
}

/* One file per sample, members stored (method 0) as np.savez writes them. */
static int npz_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  struct zmem m[STK_MAX_FIELDS + 1];
  struct stk_field fl[STK_MAX_FIELDS + 1];
  int n = 0, rc = 0;
  uint8_t lab[264];
  for (int i = 0; i < s->nfields; i++) fl[n++] = s->fields[i];
  if (s->label >= 0 && !stk__has_label_field(s)) {
    uint64_t one = 1;
    size_t hl = stk__npy_header(lab, sizeof lab - 8, "<i8", &one, 1);
    stk__st64(lab + hl, (uint64_t)s->label);
    fl[n] = (struct stk_field){.name = "label", .data = lab, .len = hl + 8, .raw_len = hl + 8};
    n++;
  }
  if (n == 0) return stk__errf(w->err, STK_EINVAL, "sample %llu has no fields",
                               (unsigned long long)w->samples);
  for (int i = 0; i < n && !rc; i++) {
    plan_member(&fl[i], &m[i]);
    if (m[i].size >= 0xffffffffu || w->shard_bytes >= 0xffffffffu)
      return stk__errf(w->err, STK_ENOTSUP, "npz member %s is too large (zip64 not written)",
                       m[i].name);
    m[i].lho = w->shard_bytes;
    rc = put_local(w, &m[i]);
    if (!rc && m[i].hlen) rc = stk__wr_write(w, m[i].hdr, m[i].hlen);
    if (!rc) rc = stk__wr_write(w, fl[i].data, (size_t)fl[i].len);
  }
  uint64_t cd_off = w->shard_bytes;
  for (int i = 0; i < n && !rc; i++) rc = put_central(w, &m[i]);
  return rc ? rc : put_eocd(w, (unsigned)n, cd_off, w->shard_bytes - cd_off);
}

const struct stk_format_ops stk__fmt_npz = {
    .name = "npz",
    .desc = "NumPy .npz zip archives, one sample per file, a field per member",
    .exts = ".npz",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_CHECKSUM | STK_FMT_WRITE | STK_FMT_LABELS |
            STK_FMT_WRITE_PER_FILE,
    .magic = "PK\x03\x04",
    .magic_len = 4,
    .index = npz_index,
    .parse = npz_parse,
    .wr_sample = npz_wr_sample,
};
