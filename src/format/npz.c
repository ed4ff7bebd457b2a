/* NumPy .npz files (zip archives of .npy members, as np.savez and DLIO's
 * unet3d write them), one sample per file whose fields are the members.
 * The index reads the central directory; parse re-reads it from the
 * sample's bytes (the whole file) and points fields at the member data:
 * deflated members are left for the decode stage to inflate. */
#include <stdio.h>
#include <stdlib.h>
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

/* ---- index ------------------------------------------------------------- */

static int npz_err(const char *path, uint64_t off, int rc, const char *why, char *err) {
  return stk__errf(err, rc, "%s: offset %llu: %s", path, (unsigned long long)off, why);
}

/* Check the end records and central directory; the sample is the file. */
static int npz_index(struct stk_dataset *ds, struct stk_shard *sh, int fd, char *err) {
  (void)ds;
  uint64_t size;
  int rc = stk__fd_size(fd, &size);
  if (rc) return stk__errf(err, rc, "%s: cannot stat: %s", sh->path, stk_strerror(rc));
  uint64_t tlen = STK__MIN(size, (uint64_t)TAIL_MAX), base = size - tlen;
  uint8_t *t = malloc(tlen ? (size_t)tlen : 1), *cd = NULL;
  if (!t) return stk__errf(err, STK_ENOMEM, "out of memory");
  struct zdir d;
  const char *why = NULL;
  uint64_t at = base;
  if ((rc = stk__pread_full(fd, t, (size_t)tlen, base)) != 0) why = "read failed";
  else if ((why = find_dir(t, tlen, base, &d)) != NULL) rc = STK_EFORMAT;
  else if (d.cd_off > size || d.cd_size > size - d.cd_off || d.cd_size > CD_MAX)
    why = "central directory outside the file", rc = STK_ETRUNC;
  else if (d.count == 0 || d.count > STK_MAX_FIELDS)
    why = d.count ? "more members than a sample may have fields" : "no members", rc = STK_EFORMAT;
  else if (!(cd = malloc((size_t)d.cd_size + 1))) why = "out of memory", rc = STK_ENOMEM;
  else if ((rc = stk__pread_full(fd, cd, (size_t)d.cd_size, d.cd_off)) != 0) why = "read failed";
  const uint8_t *p = cd, *end = cd + (cd && !rc ? d.cd_size : 0);
  for (uint64_t i = 0; !rc && i < d.count; i++) {
    struct zent z;
    at = d.cd_off + (uint64_t)(p - cd);
    if ((why = cen_entry(&p, end, &z)) != NULL) rc = STK_EFORMAT;
    else if (z.lho > size || z.csize > size - z.lho)
      why = "member data outside the file", rc = STK_ETRUNC;
  }
  free(t);
  free(cd);
  if (rc) return npz_err(sh->path, at, rc, why ? why : "bad zip file", err);
  if (!(sh->idx = malloc(sizeof *sh->idx))) return stk__errf(err, STK_ENOMEM, "out of memory");
  sh->idx[0].off = 0;
  sh->idx[0].len = size;
  sh->count = 1;
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
  uLong c = crc32(0, NULL, 0);
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
    c = crc32(c, out, (uInt)got);
    if (zr == Z_BUF_ERROR && zs.avail_in == 0 && !left) break;
    if (total > usize) break;
  }
  inflateEnd(&zs);
  if (zr != Z_STREAM_END) return STK_EFORMAT;
  return total == usize && (uint32_t)c == crc ? 0 : STK_ECRC;
}

static uint32_t crc32_big(const uint8_t *p, uint64_t n) {
  uLong c = crc32(0, NULL, 0);
  while (n) {
    uInt k = (uInt)STK__MIN(n, (uint64_t)(1u << 30));
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

/* A label from a stored one-element int64 .npy member ("y", "label"). */
static void member_label(const struct zent *z, const uint8_t *d, struct stk_sample *out) {
  size_t nl = z->nlen;
  if (nl > 4 && !memcmp(z->name + nl - 4, ".npy", 4)) nl -= 4;
  int named = (nl == 1 && z->name[0] == 'y') || (nl == 5 && !memcmp(z->name, "label", 5)) ||
              (nl == 3 && !memcmp(z->name, "cls", 3));
  uint64_t doff;
  const char *why;
  if (!named || z->method || out->label >= 0 || stk__npy_check(d, z->csize, &doff, &why) ||
      z->csize - doff != 8 || !memmem(d, (size_t)doff, "<i8", 3))
    return;
  int64_t v = (int64_t)stk__ld64(d + doff);
  if (v >= 0 && v <= INT32_MAX) out->label = (int32_t)v;
}

/* One member: the local header gives where the data starts. */
static const char *member(const uint8_t *buf, uint64_t len, const struct zent *z, int verify,
                          struct stk_sample *out, int *rc) {
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
  member_label(z, d, out);
  *rc = 0;
  return NULL;
}

static int npz_parse(const struct stk_dataset *ds, const struct stk_shard *sh, const uint8_t *buf,
                     uint64_t len, uint64_t off, int verify, struct stk_sample *out, char *err) {
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
  const uint8_t *p = buf + d.cd_off, *end = p + d.cd_size;
  for (uint64_t i = 0; i < d.count; i++) {
    struct zent z;
    int rc;
    uint64_t at = (uint64_t)(p - buf);
    if ((why = cen_entry(&p, end, &z)) != NULL)
      return npz_err(sh->path, off + at, STK_EFORMAT, why, err);
    if ((why = member(buf, len, &z, verify, out, &rc)) != NULL)
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
  m->crc = (uint32_t)crc32(0, m->hdr, (uInt)m->hlen);
  const uint8_t *p = f->data;
  for (uint64_t n = f->len; n;) {
    uInt k = (uInt)STK__MIN(n, (uint64_t)(1u << 30));
    m->crc = (uint32_t)crc32(m->crc, p, k);
    p += k;
    n -= k;
  }
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
