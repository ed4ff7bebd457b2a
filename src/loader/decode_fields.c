/* The fields decoder (STK_DECODE_FIELDS): every field of a sample, or the
 * ones decode.field names, packed into one record in the batch with what
 * the format knows of each (name, element type, shape), its key and label,
 * so that a consumer gets dict samples (WebDataset keys, TFRecord features,
 * MDS columns, npz arrays) without parsing the format again. Deflated
 * fields are inflated and strided ones gathered, and a .npy member (a
 * C-order array of a little-endian numeric dtype) gets its dtype and shape
 * from its header; the bytes are otherwise as stored (decoding a json
 * member is the consumer's choice), except image fields that
 * stk_loader_opts.image_fields names: those are decoded here by the image
 * decoder's codecs (image.c) into uint8 RGB pixels, each at its own size,
 * or through the image transform to the decode config's size.
 *
 * A record, 64-byte aligned in the batch (host byte order):
 *   struct rec_head, nfields struct rec_field, then each field's bytes at
 *   rec_field.off from the record's start, 64-byte aligned. */
#include <string.h>
#include <strings.h>

#include "decode.h"
#include "image.h"

#define REC_MAGIC 0x464b5453u /* "STKF" */
#define REC_ALIGN 64u

struct rec_head {
  uint32_t magic, nfields;
  int32_t label;
  uint32_t pad;
  char key[128];
};

struct rec_field {
  char name[STK_FIELD_NAME_MAX];
  uint64_t off, len;
  uint8_t type, ndim, pad[6];
  uint64_t shape[STK_FIELD_MAX_DIMS];
};

static uint64_t align_up(uint64_t x) { return (x + REC_ALIGN - 1) & ~(uint64_t)(REC_ALIGN - 1); }

static uint64_t stored_size(const struct stk_field *f) {
  return f->encoding == STK_ENC_NONE ? f->len : f->raw_len;
}

/* Whether name is in the comma-separated list (NULL or "": every field). */
static int wanted(const char *list, const char *name) {
  if (!list || !*list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && memcmp(p, name, n) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

/* Whether name's last extension is one the image codecs take. */
static int image_name(const char *name) {
  static const char *const ext[] = {"jpg", "jpeg", "png", "webp"};
  const char *dot = strrchr(name, '.');
  const char *e = dot ? dot + 1 : name;
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (!strcasecmp(e, ext[i])) return 1;
  return 0;
}

/* Whether field f is decoded as an image by the list (image_fields): its
 * name listed, or "*" in the list and an image extension, and "-name" not
 * listed. Only stored byte fields are: typed ones (npy, MDS columns) keep
 * their arrays. */
static int image_field(const char *list, const struct stk_field *f) {
  if (!list || !*list || f->type != STK_ELEM_NONE) return 0;
  size_t n = strlen(f->name);
  int want = 0;
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == 1 && *p == '*')
      want |= image_name(f->name);
    else if (l == n + 1 && *p == '-' && !memcmp(p + 1, f->name, n))
      return 0;
    else if (l == n && !memcmp(p, f->name, n))
      want = 1;
    if (!e) break;
    p = e + 1;
  }
  return want;
}

/* The image field's output: its type, shape and bytes. */
static int image_shape(const struct stk__fields_ctx *x, const struct stk_field *f, uint8_t *type,
                       uint64_t shape[3], uint64_t *bytes, char *err) {
  if (!x->tls) return stk__errf(err, STK_EINVAL, "image fields need the decoder's state");
  int rc = stk__image_field_shape(x->cfg, x->tls, f, type, shape, err);
  if (!rc) *bytes = shape[0] * shape[1] * shape[2] * stk_elem_type_size(*type);
  return rc;
}

/* A TFRecord Example parses into its features plus a last "data" field
 * that spans them all (the whole payload): not a field of its own here. */
static int is_wrapper(const struct stk_sample *s, int i) {
  const struct stk_field *w = &s->fields[i];
  if (i != s->nfields - 1 || s->nfields < 2 || strcmp(w->name, "data") ||
      w->encoding != STK_ENC_NONE)
    return 0;
  for (int k = 0; k < i; k++) {
    const struct stk_field *f = &s->fields[k];
    if (f->data < w->data || f->data + f->len > w->data + w->len) return 0;
  }
  return 1;
}

/* The fields of s that go into the record, in sample order; a name the
 * list asks for that s lacks is an error naming it. */
static int select_fields(const struct stk_decode_cfg *cfg, const struct stk_sample *s,
                         int *idx, int *n, char *err) {
  *n = 0;
  for (int i = 0; i < s->nfields; i++)
    if (!is_wrapper(s, i) && wanted(cfg->field, s->fields[i].name)) idx[(*n)++] = i;
  if (!cfg->field || !*cfg->field) return 0;
  for (const char *p = cfg->field; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    int found = 0;
    for (int k = 0; k < *n && !found; k++)
      found = strlen(s->fields[idx[k]].name) == l && !memcmp(s->fields[idx[k]].name, p, l);
    if (!found && l)
      return stk__errf(err, STK_EFORMAT, "no field '%.*s'", (int)l, p);
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

/* Field f's error, naming it. */
static int field_err(const struct stk_field *f, int rc, char *err) {
  char why[STK_ERRMSG_MAX];
  memcpy(why, err, sizeof why);
  why[sizeof why - 1] = 0;
  return stk__errf(err, rc, "field '%s': %.400s", f->name, why);
}

int stk__fields_size(const struct stk__fields_ctx *x, const struct stk_sample *s, uint64_t *size,
                     char *err) {
  int idx[STK_MAX_FIELDS], n;
  int rc = select_fields(x->cfg, s, idx, &n, err);
  if (rc) return rc;
  uint64_t t = align_up(sizeof(struct rec_head) + (uint64_t)n * sizeof(struct rec_field));
  for (int k = 0; k < n; k++) {
    const struct stk_field *f = &s->fields[idx[k]];
    uint64_t len = stored_size(f), shape[3];
    uint8_t type;
    if (image_field(x->images, f) && (rc = image_shape(x, f, &type, shape, &len, err)) != 0)
      return field_err(f, rc, err);
    t += align_up(len);
  }
  *size = t;
  return 0;
}

int stk__fields_pack(const struct stk__fields_ctx *x, const struct stk_sample *s, uint8_t *out,
                     uint64_t cap, uint64_t *out_len, char *err) {
  const struct stk_decode_cfg *cfg = x->cfg;
  int idx[STK_MAX_FIELDS], n;
  int rc = select_fields(cfg, s, idx, &n, err);
  if (rc) return rc;
  uint64_t pos = align_up(sizeof(struct rec_head) + (uint64_t)n * sizeof(struct rec_field));
  if (pos > cap) return stk__errf(err, STK_ERANGE, "output buffer too small");
  struct rec_head h;
  memset(&h, 0, sizeof h);
  h.magic = REC_MAGIC;
  h.nfields = (uint32_t)n;
  h.label = s->label;
  memcpy(h.key, s->key, sizeof h.key);
  h.key[sizeof h.key - 1] = 0;
  memcpy(out, &h, sizeof h);
  for (int k = 0; k < n; k++) {
    const struct stk_field *f = &s->fields[idx[k]];
    uint64_t len = stored_size(f), got = 0, shape[3];
    uint8_t type;
    int image = image_field(x->images, f);
    if (image && (rc = image_shape(x, f, &type, shape, &len, err)) != 0)
      return field_err(f, rc, err);
    if (pos + len > cap) return stk__errf(err, STK_ERANGE, "output buffer too small");
    struct rec_field r;
    memset(&r, 0, sizeof r);
    memcpy(r.name, f->name, sizeof r.name);
    r.name[sizeof r.name - 1] = 0;
    r.off = pos;
    r.len = len;
    r.type = f->type;
    r.ndim = f->ndim <= STK_FIELD_MAX_DIMS ? f->ndim : 0;
    memcpy(r.shape, f->shape, sizeof r.shape);
    if (image) {
      r.type = type;
      r.ndim = 3;
      memset(r.shape, 0, sizeof r.shape);
      memcpy(r.shape, shape, sizeof shape);
      rc = stk__image_field_decode(cfg, x->tls, f, out + pos, len, x->rng, err);
    } else if (f->encoding == STK_ENC_STRIDED) {
      rc = stk__gather(f, out + pos, len, &got, err);
    } else if (f->encoding == STK_ENC_DEFLATE) {
      rc = stk__inflate(f->data, f->len, out + pos, len, err);
    } else {
      memcpy(out + pos, f->data, len);
    }
    if (rc) return field_err(f, rc, err);
    /* A .npy member (WebDataset's npy, an npz array): its dtype and shape
     * from its header, the record pointing at its data. */
    struct stk_field d;
    uint64_t hl;
    if (r.type == STK_ELEM_NONE && len >= 10 && !memcmp(out + pos, "\x93NUMPY", 6) &&
        stk__npy_describe(out + pos, len, &d, &hl) == 0) {
      r.off += hl;
      r.len -= hl;
      r.type = d.type;
      r.ndim = d.ndim;
      memcpy(r.shape, d.shape, sizeof r.shape);
    }
    memcpy(out + sizeof h + (uint64_t)k * sizeof r, &r, sizeof r);
    pos += align_up(len);
  }
  *out_len = pos;
  return 0;
}

int stk__fields_unpack(const struct stk_batch *b, uint32_t i, struct stk_sample *out) {
  if (!b || !out || i >= b->n) return STK_EINVAL;
  const uint8_t *p = b->data + b->offsets[i];
  uint64_t n = b->len[i];
  struct rec_head h;
  if (n < sizeof h) return STK_EINVAL;
  memcpy(&h, p, sizeof h);
  if (h.magic != REC_MAGIC || h.nfields > STK_MAX_FIELDS ||
      sizeof h + (uint64_t)h.nfields * sizeof(struct rec_field) > n)
    return STK_EINVAL;
  memset(out, 0, sizeof *out);
  out->index = b->indices[i];
  out->label = h.label;
  memcpy(out->key, h.key, sizeof out->key);
  out->key[sizeof out->key - 1] = 0;
  out->nfields = (int)h.nfields;
  for (uint32_t k = 0; k < h.nfields; k++) {
    struct rec_field r;
    memcpy(&r, p + sizeof h + (uint64_t)k * sizeof r, sizeof r);
    if (r.off > n || r.len > n - r.off || r.ndim > STK_FIELD_MAX_DIMS) return STK_EINVAL;
    struct stk_field *f = &out->fields[k];
    memcpy(f->name, r.name, sizeof f->name);
    f->name[sizeof f->name - 1] = 0;
    f->data = p + r.off;
    f->len = f->raw_len = r.len;
    f->type = r.type;
    f->elem = stk_elem_type_size(r.type);
    f->ndim = r.ndim;
    memcpy(f->shape, r.shape, sizeof f->shape);
  }
  return 0;
}
