/* NumPy .npy files, one sample per file (field "npy", the whole file, which
 * the decode stage's npy op turns into an array), labelled by first-level
 * subfolder as torchvision's DatasetFolder reads them (a .npy file has no
 * place for a label). Also the .npy header checker and writer that npz.c
 * and gen share. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format_impl.h"

#define NPY_PEEK 4096
#define NPY_MAX_HEADER (1u << 20)
#define NPY_ALIGN 64

/* ---- the header -------------------------------------------------------- */

struct npy_hdr {
  int have_descr, have_order, have_shape;
  uint64_t itemsize; /* 0 = unknown (structured, object) */
  uint64_t count;    /* product of the shape */
  int count_overflow;
  int ndim, fortran, is_int, is_signed;
  uint64_t last;     /* the last dimension (1 for a 0-d array) */
  uint64_t shape[STK_FIELD_MAX_DIMS]; /* the first STK_FIELD_MAX_DIMS dimensions */
  char descr[16];    /* the dtype string, truncated ("<i4"); "" for a structured dtype */
};

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* A quoted Python string literal; its body goes to s and sl. */
static const uint8_t *quoted(const uint8_t *p, const uint8_t *e, const uint8_t **s, size_t *sl) {
  if (p >= e || (*p != '\'' && *p != '"')) return NULL;
  uint8_t q = *p++;
  const uint8_t *b = p;
  while (p < e && *p != q) {
    if (*p == '\\') p++;
    p++;
  }
  if (p >= e) return NULL;
  *s = b;
  *sl = (size_t)(p - b);
  return p + 1;
}

/* Item size of a simple dtype string ("<f4", "|u1", "<U5"); 0 if unknown. */
static uint64_t dtype_size(const uint8_t *s, size_t n) {
  size_t i = 0;
  if (i < n && strchr("<>|=", s[i])) i++;
  if (i >= n) return 0;
  uint8_t kind = s[i++];
  if (!strchr("biufcmMSUV", kind) || i >= n) return 0;
  uint64_t v = 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || v > 1000000) return 0;
    v = v * 10 + (s[i] - '0');
  }
  return kind == 'U' ? v * 4 : v;
}

/* A shape tuple "(3, 4)" / "(5,)" / "()". */
static const uint8_t *shape_tuple(const uint8_t *p, const uint8_t *e, struct npy_hdr *h) {
  if (p >= e || *p++ != '(') return NULL;
  h->count = 1;
  h->ndim = 0;
  h->last = 1;
  for (int dims = 0;; dims++) {
    p = skip_ws(p, e);
    if (p < e && *p == ')') return p + 1;
    if (p >= e || *p < '0' || *p > '9' || dims > 64) return NULL;
    uint64_t v = 0;
    while (p < e && *p >= '0' && *p <= '9') {
      if (v > (UINT64_MAX - 9) / 10) return NULL;
      v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (v && h->count > UINT64_MAX / v) h->count_overflow = 1;
    else h->count *= v;
    if (h->ndim < STK_FIELD_MAX_DIMS) h->shape[h->ndim] = v;
    h->ndim++;
    h->last = v;
    p = skip_ws(p, e);
    if (p < e && *p == ',') p++;
    else if (p < e && *p == ')') return p + 1;
    else return NULL;
  }
}

/* Skip a bracketed value (a structured dtype's list), bounded by e. */
static const uint8_t *skip_brackets(const uint8_t *p, const uint8_t *e) {
  int depth = 0;
  for (; p < e; p++) {
    if (*p == '[' || *p == '(') depth++;
    else if ((*p == ']' || *p == ')') && --depth == 0) return p + 1;
    else if (*p == '\'' || *p == '"') {
      const uint8_t *s;
      size_t sl;
      if (!(p = quoted(p, e, &s, &sl))) return NULL;
      p--;
    }
  }
  return NULL;
}

static const uint8_t *dict_value(const uint8_t *p, const uint8_t *e, const uint8_t *k, size_t kl,
                                 struct npy_hdr *h) {
  const uint8_t *s;
  size_t sl;
  if (kl == 5 && !memcmp(k, "descr", 5)) {
    h->have_descr = 1;
    if (p < e && *p == '[') return skip_brackets(p, e);
    if (!(p = quoted(p, e, &s, &sl))) return NULL;
    snprintf(h->descr, sizeof h->descr, "%.*s", (int)STK__MIN(sl, sizeof h->descr - 1), s);
    h->itemsize = dtype_size(s, sl);
    size_t at = sl && strchr("<>|=", s[0]) ? 1 : 0;
    int le = !sl || s[0] != '>' || h->itemsize == 1;
    h->is_int = h->itemsize && at < sl && (s[at] == 'i' || s[at] == 'u') && le;
    h->is_signed = h->is_int && s[at] == 'i';
    return p;
  }
  if (kl == 13 && !memcmp(k, "fortran_order", 13)) {
    h->have_order = 1;
    if (e - p >= 4 && !memcmp(p, "True", 4)) return h->fortran = 1, p + 4;
    if (e - p >= 5 && !memcmp(p, "False", 5)) return p + 5;
    return NULL;
  }
  if (kl == 5 && !memcmp(k, "shape", 5)) {
    h->have_shape = 1;
    return shape_tuple(p, e, h);
  }
  return NULL;
}

static int parse_dict(const uint8_t *p, const uint8_t *e, struct npy_hdr *h) {
  p = skip_ws(p, e);
  if (p >= e || *p++ != '{') return -1;
  for (;;) {
    p = skip_ws(p, e);
    if (p < e && *p == '}') break;
    const uint8_t *k;
    size_t kl;
    if (!(p = quoted(p, e, &k, &kl))) return -1;
    p = skip_ws(p, e);
    if (p >= e || *p++ != ':') return -1;
    p = skip_ws(p, e);
    if (!(p = dict_value(p, e, k, kl, h))) return -1;
    p = skip_ws(p, e);
    if (p < e && *p == ',') p++;
    else if (!(p < e && *p == '}')) return -1;
  }
  return h->have_descr && h->have_order && h->have_shape ? 0 : -1;
}

/* Magic, version and header length: the header's total size, or 0. */
static uint64_t npy_prefix(const uint8_t *p, uint64_t n, const char **why) {
  if (n < 10 || memcmp(p, "\x93NUMPY", 6)) return *why = "not a .npy file (bad magic)", 0;
  if (p[6] < 1 || p[6] > 3 || p[7] != 0) return *why = "unsupported .npy version", 0;
  if (p[6] == 1) return 10 + (uint64_t)stk__ld16(p + 8);
  if (n < 12) return *why = "truncated .npy header", 0;
  uint64_t hl = stk__ld32(p + 8);
  if (hl > NPY_MAX_HEADER) return *why = "absurd .npy header length", 0;
  return 12 + hl;
}

static int npy_parse_hdr(const uint8_t *p, uint64_t n, int need_data, struct npy_hdr *h,
                         uint64_t *data_off, const char **why) {
  uint64_t hend = npy_prefix(p, n, why);
  if (!hend) return STK_EFORMAT;
  if (hend > n) return *why = "truncated .npy header", STK_ETRUNC;
  memset(h, 0, sizeof *h);
  const uint8_t *hs = p + (p[6] == 1 ? 10 : 12);
  if (p[hend - 1] != '\n' || parse_dict(hs, p + hend - 1, h))
    return *why = "malformed .npy header dictionary", STK_EFORMAT;
  if (h->itemsize && (h->count_overflow || h->count > UINT64_MAX / h->itemsize))
    return *why = "absurd .npy shape", STK_EFORMAT;
  if (need_data && h->itemsize && h->count * h->itemsize > n - hend)
    return *why = "array data is truncated", STK_ETRUNC;
  *data_off = hend;
  return 0;
}

int stk__npy_check(const uint8_t *p, uint64_t n, uint64_t *data_off, const char **why) {
  struct npy_hdr h;
  return npy_parse_hdr(p, n, 1, &h, data_off, why);
}

int stk__npy_info(const uint8_t *p, uint64_t n, int need_data, struct stk__npy_info *info,
                  const char **why) {
  struct npy_hdr h;
  int rc = npy_parse_hdr(p, n, need_data, &h, &info->data_off, why);
  if (rc) return rc;
  info->itemsize = h.itemsize;
  info->count = h.count;
  info->last = h.ndim ? h.last : 1;
  info->ndim = h.ndim;
  info->fortran = h.fortran;
  info->is_int = h.is_int;
  info->is_signed = h.is_signed;
  memcpy(info->shape, h.shape, sizeof info->shape);
  memcpy(info->descr, h.descr, sizeof info->descr);
  return 0;
}

size_t stk__npy_header(uint8_t *out, size_t cap, const char *descr, const uint64_t *shape,
                       int ndim) {
  char dict[512], dims[400] = "";
  size_t o = 0;
  for (int i = 0; i < ndim && o < sizeof dims - 48; i++)
    o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%llu", i ? ", " : "",
                          (unsigned long long)shape[i]);
  if (ndim == 1) snprintf(dims + o, sizeof dims - o, ",");
  int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                    descr, dims);
  size_t total = 10 + (size_t)dl + 1;
  total += (NPY_ALIGN - total % NPY_ALIGN) % NPY_ALIGN;
  if (total > cap || total - 10 > 65535) return 0;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  stk__st16(out + 8, (uint16_t)(total - 10));
  memcpy(out + 10, dict, (size_t)dl);
  memset(out + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
  out[total - 1] = '\n';
  return total;
}

const char *stk__npy_descr(int type) {
  static const char *const d[STK_ELEM_COUNT] = {
      [STK_ELEM_NONE] = "|u1", [STK_ELEM_U8] = "|u1",  [STK_ELEM_I8] = "|i1",
      [STK_ELEM_U16] = "<u2",  [STK_ELEM_I16] = "<i2", [STK_ELEM_F16] = "<f2",
      [STK_ELEM_U32] = "<u4",  [STK_ELEM_I32] = "<i4", [STK_ELEM_F32] = "<f4",
      [STK_ELEM_U64] = "<u8",  [STK_ELEM_I64] = "<i8", [STK_ELEM_F64] = "<f8",
  };
  return type > 0 && type < STK_ELEM_COUNT ? d[type] : d[0];
}

/* ---- reading ----------------------------------------------------------- */

/* The first bytes hold the whole header in practice; longer headers are
 * read again at their full size. */
static int npy_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                     char *err) {
  (void)ds;
  uint64_t size = sb->size;
  int rc;
  uint8_t peek[NPY_PEEK];
  size_t n = (size_t)STK__MIN(size, (uint64_t)sizeof peek);
  if ((rc = stk__bytes_read(sb, peek, n, 0)) != 0)
    return stk__errf(err, rc, "%s: offset 0: read failed: %s", sh->path, stk_strerror(rc));
  const char *why = "";
  uint64_t hend = npy_prefix(peek, n, &why);
  if (!hend) return stk__errf(err, STK_EFORMAT, "%s: offset 0: %s", sh->path, why);
  if (hend > size)
    return stk__errf(err, STK_ETRUNC, "%s: offset 0: truncated .npy header (%llu of %llu bytes)",
                     sh->path, (unsigned long long)size, (unsigned long long)hend);
  sh->idx = malloc(sizeof *sh->idx);
  if (!sh->idx) return stk__errf(err, STK_ENOMEM, "out of memory");
  sh->idx[0].off = 0;
  sh->idx[0].len = size;
  sh->count = 1;
  return 0;
}

static void key_from_path(struct stk_sample *out, const char *path, const char *ext) {
  const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  size_t n = strlen(b), el = strlen(ext);
  if (n > el && !strcmp(b + n - el, ext)) n -= el;
  stk__sample_key(out, b, n);
}

static int npy_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                     const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                     struct stk_sample *out, char *err) {
  (void)k;
  (void)ds;
  (void)verify;
  stk__sample_reset(out, sh);
  uint64_t doff;
  const char *why = "";
  int rc = stk__npy_check(buf, len, &doff, &why);
  if (rc) return stk__errf(err, rc, "%s: offset %llu: %s", sh->path, (unsigned long long)off, why);
  key_from_path(out, sh->path, ".npy");
  stk__sample_add(out, "npy", 3, buf, len);
  return 0;
}

/* ---- writing ----------------------------------------------------------- */

/* A labelled sample goes to DIR/LLLLL/ (created here, removed on abort). */
static int class_path(struct stk_writer *w, int32_t label) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%05d", w->dir, (int)label);
  if (mkdir(dir, 0777) == 0) {
    if (stk__wr_track_dir(w, dir)) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  } else if (errno != EEXIST) {
    int e = errno;
    return stk__errf(w->err, stk__from_errno(e), "%s: cannot create directory: %s", dir, strerror(e));
  }
  char *def = stk__wr_name(w, w->shard_no, ".npy");
  if (!def) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  const char *base = strrchr(def, '/') ? strrchr(def, '/') + 1 : def;
  size_t n = strlen(dir) + strlen(base) + 2;
  free(w->path);
  w->path = malloc(n);
  if (w->path) snprintf(w->path, n, "%s/%s", dir, base);
  free(def);
  return w->path ? 0 : stk__errf(w->err, STK_ENOMEM, "out of memory");
}

/* Whether a typed field's shape accounts for exactly its bytes. */
static int shape_fits(const struct stk_field *f) {
  uint64_t n = stk_elem_type_size(f->type);
  for (int d = 0; d < f->ndim && d < STK_FIELD_MAX_DIMS; d++) {
    if (f->shape[d] && n > UINT64_MAX / f->shape[d]) return 0;
    n *= f->shape[d];
  }
  return f->encoding == STK_ENC_NONE && f->ndim <= STK_FIELD_MAX_DIMS && n == f->len;
}

/* A field that is already a .npy image is written as is; a typed field (an
 * MDS ndarray, a Megatron sequence, npy tokens) as an array of its dtype
 * and shape; anything else wrapped as a 1-d uint8 array. One file per
 * sample. */
static int npy_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  const struct stk_field *f = NULL;
  for (int i = 0; i < s->nfields && !f; i++)
    if (strcmp(s->fields[i].name, "cls") && strcmp(s->fields[i].name, "label"))
      f = &s->fields[i];
  if (!f) return stk__errf(w->err, STK_EINVAL, "sample %llu has no data field",
                           (unsigned long long)w->samples);
  if (s->label >= 0) {
    int rc = class_path(w, s->label);
    if (rc) return rc;
  }
  uint64_t doff;
  const char *why;
  if (f->encoding == STK_ENC_NONE && !f->type && stk__npy_check(f->data, f->len, &doff, &why) == 0)
    return stk__wr_write(w, f->data, (size_t)f->len);
  uint8_t h[512];
  size_t hl = f->type && shape_fits(f)
                  ? stk__npy_header(h, sizeof h, stk__npy_descr(f->type), f->shape, f->ndim)
                  : stk__npy_header(h, sizeof h, "|u1", &f->len, 1);
  if (!hl) return stk__errf(w->err, STK_EINVAL, "sample %llu: array header too long",
                            (unsigned long long)w->samples);
  int rc = stk__wr_write(w, h, hl);
  return rc ? rc : stk__wr_write(w, f->data, (size_t)f->len);
}

const struct stk_format_ops stk__fmt_npy = {
    .name = "npy",
    .desc = "NumPy .npy arrays, one sample per file (field \"npy\")",
    .exts = ".npy",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_WRITE | STK_FMT_WRITE_PER_FILE | STK_FMT_LABELS |
            STK_FMT_CLASS_DIRS,
    .magic = "\x93NUMPY",
    .magic_len = 6,
    .index = npy_index,
    .parse = npy_parse,
    .wr_sample = npy_wr_sample,
};
