/* The npy decoder: extracts the array bytes of a .npy field (a whole .npy
 * file, possibly a deflated npz member) after checking its header, so the
 * batch holds exactly the array's data. Bytes are copied as stored: byte
 * order and fortran_order are the consumer's business, since the header
 * that describes them is the same for every sample of a column. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "decode.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_PREFIX 10   /* magic, version, v1 header length */
#define NPY_MAX_NDIM 64 /* numpy's own limit */
#define NPY_MAX_HEADER (1u << 20)

/* What the header says about the array. */
struct npy_info {
  uint64_t hdr_len; /* bytes before the array data */
  uint64_t itemsize;
  uint64_t bytes; /* prod(shape) * itemsize */
  int fortran;
  uint8_t type;   /* enum stk_elem_type of a little-endian numeric dtype, else NONE */
  int ndim;       /* dimensions (shape[] holds the first STK_FIELD_MAX_DIMS) */
  uint64_t shape[STK_FIELD_MAX_DIMS];
};

/* ---- header parsing -------------------------------------------------- */

/* Magic, version and header length from the first 10 or 12 bytes. */
static int parse_prefix(const uint8_t *p, uint64_t n, uint64_t *hdr_len, char *err) {
  if (n < NPY_PREFIX || memcmp(p, NPY_MAGIC, 6) != 0)
    return stk__errf(err, STK_EFORMAT, "npy: not a .npy file (no \\x93NUMPY magic)");
  int major = p[6];
  if (major < 1 || major > 3)
    return stk__errf(err, STK_EFORMAT, "npy: unsupported format version %d.%d", major, p[7]);
  if (major == 1) {
    *hdr_len = NPY_PREFIX + (uint64_t)stk__ld16(p + 8);
    return 0;
  }
  if (n < NPY_PREFIX + 2) return stk__errf(err, STK_ETRUNC, "npy: header truncated");
  uint32_t h = stk__ld32(p + 8);
  if (h > NPY_MAX_HEADER)
    return stk__errf(err, STK_EFORMAT, "npy: header of %u bytes is absurd", h);
  *hdr_len = NPY_PREFIX + 2 + (uint64_t)h;
  return 0;
}

/* A cursor over the header's Python dict literal. */
struct cur {
  const char *p, *end;
};

static void skip_ws(struct cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int eat(struct cur *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A quoted string ('...' or "...") without escapes, into buf. */
static int parse_str(struct cur *c, char *buf, size_t cap) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
  char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || n + 1 >= cap) return -1;
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end) return -1;
  c->p++;
  buf[n] = 0;
  return 0;
}

static int parse_uint(struct cur *c, uint64_t *v) {
  skip_ws(c);
  if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
  uint64_t x = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(*c->p - '0'), &x))
      return -1;
    c->p++;
  }
  if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
  *v = x;
  return 0;
}

/* Item size of a simple dtype string ("<f4", "|u1", "<U8", "<M8[ns]").
 * Structured dtypes are lists, not strings, and never get here. */
static int descr_itemsize(const char *d, uint64_t *size, char *err) {
  const char *s = d;
  if (*s && strchr("<>|=", *s)) s++;
  char kind = *s ? *s++ : 0;
  if (kind == '?' && !*s) return *size = 1, 0;
  if (kind == 'O') return stk__errf(err, STK_ENOTSUP, "npy: object arrays ('%s') hold pickles", d);
  uint64_t n = 0;
  int digits = 0;
  for (; *s >= '0' && *s <= '9' && digits < 10; s++, digits++) n = n * 10 + (uint64_t)(*s - '0');
  if ((kind == 'M' || kind == 'm') && *s == '[' && s[strlen(s) - 1] == ']') s += strlen(s);
  if (!kind || !strchr("biufcSaVUMm", kind) || !digits || n == 0 || *s)
    return stk__errf(err, STK_EFORMAT, "npy: unsupported dtype '%s'", d);
  *size = kind == 'U' ? n * 4 : n;
  return 0;
}

/* The element type of a dtype string where it is one of enum
 * stk_elem_type in little-endian (or single-byte) order; NONE otherwise. */
static uint8_t descr_type(const char *d) {
  static const struct {
    const char *s;
    uint8_t t;
  } k[] = {{"u1", STK_ELEM_U8},  {"i1", STK_ELEM_I8},  {"u2", STK_ELEM_U16}, {"i2", STK_ELEM_I16},
           {"f2", STK_ELEM_F16}, {"u4", STK_ELEM_U32}, {"i4", STK_ELEM_I32}, {"f4", STK_ELEM_F32},
           {"u8", STK_ELEM_U64}, {"i8", STK_ELEM_I64}, {"f8", STK_ELEM_F64}};
  int one = strlen(d) == 3 && d[2] == '1'; /* "|u1": order does not apply */
  int little = d[0] == '<' || (d[0] == '=' && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
  if (!little && !(d[0] == '|' && one)) return STK_ELEM_NONE;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(d + 1, k[i].s)) return k[i].t;
  return STK_ELEM_NONE;
}

/* "(3, 224, 224)" to the element count, refusing overflow; the dimensions
 * into h. */
static int parse_shape(struct cur *c, uint64_t *count, struct npy_info *h) {
  if (!eat(c, '(')) return -1;
  uint64_t n = 1;
  int ndim = 0;
  for (;; ndim++) {
    if (eat(c, ')')) break;
    uint64_t d;
    if (ndim >= NPY_MAX_NDIM || parse_uint(c, &d) != 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
    if (ndim < STK_FIELD_MAX_DIMS) h->shape[ndim] = d;
    if (!eat(c, ',')) {
      if (!eat(c, ')')) return -1;
      ndim++;
      break;
    }
  }
  h->ndim = ndim;
  *count = n;
  return 0;
}

static int parse_bool(struct cur *c, int *v) {
  skip_ws(c);
  size_t left = (size_t)(c->end - c->p);
  if (left >= 4 && memcmp(c->p, "True", 4) == 0) return c->p += 4, *v = 1, 0;
  if (left >= 5 && memcmp(c->p, "False", 5) == 0) return c->p += 5, *v = 0, 0;
  return -1;
}

/* One "key: value" entry of the dict; seen collects the keys found.
 * Returns 0, 1 for a syntax error, or a negative code with err set. */
static int parse_entry(struct cur *c, struct npy_info *h, uint64_t *count, unsigned *seen,
                       char *err) {
  char key[32], descr[64];
  if (parse_str(c, key, sizeof key) != 0 || !eat(c, ':')) return 1;
  if (strcmp(key, "descr") == 0) {
    *seen |= 1;
    if (parse_str(c, descr, sizeof descr) != 0)
      return stk__errf(err, STK_ENOTSUP, "npy: structured dtypes are not supported");
    h->type = descr_type(descr);
    return descr_itemsize(descr, &h->itemsize, err);
  }
  if (strcmp(key, "fortran_order") == 0) return *seen |= 2, parse_bool(c, &h->fortran) ? 1 : 0;
  if (strcmp(key, "shape") == 0) return *seen |= 4, parse_shape(c, count, h) ? 1 : 0;
  return stk__errf(err, STK_EFORMAT, "npy: unexpected header key '%s'", key);
}

/* The header dict that follows the prefix: exactly descr, fortran_order
 * and shape, then padding. Fills everything but hdr_len. */
static int parse_dict(const char *s, size_t n, struct npy_info *h, char *err) {
  struct cur c = {s, s + n};
  uint64_t count = 0;
  unsigned seen = 0;
  if (!eat(&c, '{')) goto bad;
  while (!eat(&c, '}')) {
    int rc = parse_entry(&c, h, &count, &seen, err);
    if (rc > 0) goto bad;
    if (rc < 0) return rc;
    if (!eat(&c, ',') && !eat(&c, '}')) goto bad;
    if (c.p[-1] == '}') break;
  }
  skip_ws(&c);
  if (c.p != c.end || seen != 7) goto bad;
  if (__builtin_mul_overflow(count, h->itemsize, &h->bytes))
    return stk__errf(err, STK_EFORMAT, "npy: array shape overflows 64 bits");
  return 0;
bad:
  return stk__errf(err, STK_EFORMAT, "npy: malformed header dict: %.*s", (int)STK__MIN(n, 200), s);
}

/* Parse a whole header held in memory (n bytes available at p). */
static int parse_header(const uint8_t *p, uint64_t n, struct npy_info *h, char *err) {
  int rc = parse_prefix(p, n, &h->hdr_len, err);
  if (rc) return rc;
  if (h->hdr_len > n) return stk__errf(err, STK_ETRUNC, "npy: header runs past the data");
  size_t off = p[6] == 1 ? NPY_PREFIX : NPY_PREFIX + 2;
  return parse_dict((const char *)p + off, (size_t)(h->hdr_len - off), h, err);
}

static int check_size(const struct npy_info *h, uint64_t data_len, uint64_t cap, char *err) {
  if (data_len < h->bytes)
    return stk__errf(err, STK_ETRUNC, "npy: %llu data bytes, the shape needs %llu",
                     (unsigned long long)data_len, (unsigned long long)h->bytes);
  if (data_len > h->bytes)
    return stk__errf(err, STK_EFORMAT, "npy: %llu data bytes, the shape holds only %llu",
                     (unsigned long long)data_len, (unsigned long long)h->bytes);
  if (cap < h->bytes)
    return stk__errf(err, STK_EINVAL, "npy: output of %llu bytes is too small for %llu",
                     (unsigned long long)cap, (unsigned long long)h->bytes);
  return 0;
}

/* ---- deflated fields: one zlib stream per thread, inflated in pieces -- */

struct npy_tls {
  z_stream zs;
  int zs_ready;
  const uint8_t *in; /* rest of the compressed field */
  uint64_t in_left;
  char *hdr; /* the header, grown as needed */
  size_t hdr_cap;
};

static int z_start(struct npy_tls *t, const struct stk_field *in, char *err) {
  if (!t->zs_ready) {
    if (inflateInit2(&t->zs, -MAX_WBITS) != Z_OK)
      return stk__errf(err, STK_ENOMEM, "npy: cannot initialize zlib");
    t->zs_ready = 1;
  } else {
    inflateReset(&t->zs);
  }
  t->in = in->data;
  t->in_left = in->len;
  return 0;
}

/* Inflate exactly n bytes into dst; with last, the stream must end there. */
static int z_fill(struct npy_tls *t, uint8_t *dst, uint64_t n, int last, char *err) {
  z_stream *zs = &t->zs;
  for (;;) {
    zs->next_in = (Bytef *)t->in;
    zs->avail_in = t->in_left > UINT32_MAX ? UINT32_MAX : (uInt)t->in_left;
    zs->next_out = dst;
    zs->avail_out = n > UINT32_MAX ? UINT32_MAX : (uInt)n;
    uInt ai = zs->avail_in, ao = zs->avail_out;
    int zr = inflate(zs, Z_NO_FLUSH);
    t->in += ai - zs->avail_in;
    t->in_left -= ai - zs->avail_in;
    dst += ao - zs->avail_out;
    n -= ao - zs->avail_out;
    if (zr == Z_STREAM_END) break;
    if (zr != Z_OK && zr != Z_BUF_ERROR)
      return stk__errf(err, STK_EDECODE, "npy: corrupt deflate data: %s", zs->msg ? zs->msg : "?");
    if (n == 0 && !last) return 0;
    if (n == 0) return stk__errf(err, STK_EFORMAT, "npy: member inflates past its stated size");
    if (t->in_left == 0 || zr == Z_BUF_ERROR)
      return stk__errf(err, STK_ETRUNC, "npy: deflate data ends early");
  }
  if (n != 0) return stk__errf(err, STK_ETRUNC, "npy: member inflates short of its stated size");
  return 0;
}

/* Inflate the header of a deflated field into t->hdr and parse it. */
static int z_header(struct npy_tls *t, const struct stk_field *in, struct npy_info *h, char *err) {
  uint8_t pre[NPY_PREFIX + 2];
  int rc = z_start(t, in, err);
  if (!rc) rc = z_fill(t, pre, NPY_PREFIX, 0, err);
  if (!rc && pre[6] >= 2) rc = z_fill(t, pre + NPY_PREFIX, 2, 0, err);
  if (!rc) rc = parse_prefix(pre, sizeof pre, &h->hdr_len, err);
  if (rc) return rc;
  size_t off = pre[6] == 1 ? NPY_PREFIX : NPY_PREFIX + 2, dict = (size_t)h->hdr_len - off;
  if (h->hdr_len > in->raw_len) return stk__errf(err, STK_ETRUNC, "npy: header runs past the data");
  if (dict > t->hdr_cap) {
    char *p = realloc(t->hdr, dict);
    if (!p) return stk__errf(err, STK_ENOMEM, "npy: out of memory for a header");
    t->hdr = p;
    t->hdr_cap = dict;
  }
  rc = z_fill(t, (uint8_t *)t->hdr, dict, 0, err);
  return rc ? rc : parse_dict(t->hdr, dict, h, err);
}

int stk__npy_describe(const uint8_t *p, uint64_t n, struct stk_field *f, uint64_t *hdr_len) {
  struct npy_info h;
  char err[STK_ERRMSG_MAX];
  memset(&h, 0, sizeof h);
  if (parse_header(p, n, &h, err) != 0 || check_size(&h, n - h.hdr_len, h.bytes, err) != 0 ||
      h.type == STK_ELEM_NONE || h.fortran || h.ndim > STK_FIELD_MAX_DIMS)
    return 1;
  f->type = h.type;
  f->elem = stk_elem_type_size(h.type);
  f->ndim = (uint8_t)h.ndim;
  memset(f->shape, 0, sizeof f->shape);
  memcpy(f->shape, h.shape, sizeof h.shape[0] * (size_t)h.ndim);
  *hdr_len = h.hdr_len;
  return 0;
}

/* ---- ops ------------------------------------------------------------- */

static int npy_out_size(const struct stk_decode_cfg *cfg, const struct stk_field *in,
                        uint64_t *size, char *err) {
  (void)cfg;
  struct npy_info h;
  if (in->encoding == STK_ENC_STRIDED) { /* array data already: x[..., i] */
    *size = in->raw_len;
    return 0;
  }
  if (in->encoding == STK_ENC_NONE) {
    int rc = parse_header(in->data, in->len, &h, err);
    if (!rc) *size = h.bytes;
    return rc;
  }
  /* Deflated: inflating the 12-byte prefix gives the header length; the
   * stated raw length minus that is exact for any well-formed member, and
   * decode checks it against the shape. */
  struct npy_tls t = {0};
  int rc = z_start(&t, in, err);
  uint8_t pre[NPY_PREFIX + 2];
  uint64_t want = in->raw_len < sizeof pre ? in->raw_len : sizeof pre;
  if (!rc) rc = z_fill(&t, pre, want, want == in->raw_len, err);
  if (!rc) rc = parse_prefix(pre, want, &h.hdr_len, err);
  if (!rc && h.hdr_len > in->raw_len)
    rc = stk__errf(err, STK_ETRUNC, "npy: header runs past the data");
  if (!rc) *size = in->raw_len - h.hdr_len;
  if (t.zs_ready) inflateEnd(&t.zs);
  return rc;
}

static int npy_decode(const struct stk_decode_cfg *cfg, void **tls, const struct stk_field *in,
                      uint8_t *out, uint64_t cap, uint64_t *out_len, struct stk_rng *rng,
                      char *err) {
  (void)cfg, (void)rng;
  struct npy_info h;
  int rc;
  if (in->encoding == STK_ENC_NONE) {
    if ((rc = parse_header(in->data, in->len, &h, err)) != 0) return rc;
    if ((rc = check_size(&h, in->len - h.hdr_len, cap, err)) != 0) return rc;
    memcpy(out, in->data + h.hdr_len, h.bytes);
    *out_len = h.bytes;
    return 0;
  }
  if (in->encoding == STK_ENC_STRIDED) return stk__gather(in, out, cap, out_len, err);
  if (in->encoding != STK_ENC_DEFLATE)
    return stk__errf(err, STK_ENOTSUP, "npy: unknown field encoding %d", in->encoding);
  if (!*tls && !(*tls = calloc(1, sizeof(struct npy_tls))))
    return stk__errf(err, STK_ENOMEM, "npy: out of memory");
  struct npy_tls *t = *tls;
  if ((rc = z_header(t, in, &h, err)) != 0) return rc;
  if ((rc = check_size(&h, in->raw_len - h.hdr_len, cap, err)) != 0) return rc;
  if ((rc = z_fill(t, out, h.bytes, 1, err)) != 0) return rc;
  *out_len = h.bytes;
  return 0;
}

static void npy_thread_free(void *tls) {
  struct npy_tls *t = tls;
  if (!t) return;
  if (t->zs_ready) inflateEnd(&t->zs);
  free(t->hdr);
  free(t);
}

const struct stk_decode_ops stk__dec_npy = {
    .name = "npy",
    .out_size = npy_out_size,
    .decode = npy_decode,
    .thread_free = npy_thread_free,
};
