/* The fields decoder (STK_DECODE_FIELDS): every field of a sample, or the
 * ones decode.field names, packed into one record in the batch with what
 * the format knows of each (name, element type, shape), its key and label,
 * so that a consumer gets dict samples (WebDataset keys, TFRecord features,
 * MDS columns, npz arrays) without parsing the format again. Deflated
 * fields are inflated and strided ones gathered, and a .npy member (a
 * C-order array of a little-endian numeric dtype) gets its dtype and shape
 * from its header; the bytes are otherwise as stored (decoding a jpg or a
 * json member is the consumer's choice).
 *
 * A record, 64-byte aligned in the batch (host byte order):
 *   struct rec_head, nfields struct rec_field, then each field's bytes at
 *   rec_field.off from the record's start, 64-byte aligned. */
#include <string.h>

#include "decode.h"

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

int stk__fields_size(const struct stk_decode_cfg *cfg, const struct stk_sample *s,
                     uint64_t *size, char *err) {
  int idx[STK_MAX_FIELDS], n;
  int rc = select_fields(cfg, s, idx, &n, err);
  if (rc) return rc;
  uint64_t t = align_up(sizeof(struct rec_head) + (uint64_t)n * sizeof(struct rec_field));
  for (int k = 0; k < n; k++) t += align_up(stored_size(&s->fields[idx[k]]));
  *size = t;
  return 0;
}

int stk__fields_pack(const struct stk_decode_cfg *cfg, const struct stk_sample *s, uint8_t *out,
                     uint64_t cap, uint64_t *out_len, char *err) {
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
    uint64_t len = stored_size(f), got = 0;
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
    if (f->encoding == STK_ENC_STRIDED) {
      rc = stk__gather(f, out + pos, len, &got, err);
    } else if (f->encoding == STK_ENC_DEFLATE) {
      rc = stk__inflate(f->data, f->len, out + pos, len, err);
    } else {
      memcpy(out + pos, f->data, len);
    }
    if (rc) {
      char why[STK_ERRMSG_MAX];
      memcpy(why, err, sizeof why);
      why[sizeof why - 1] = 0;
      return stk__errf(err, rc, "field '%s': %.400s", f->name, why);
    }
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
