/* The MDS writer: shard files laid out as mosaicml-streaming's MDSWriter
 * writes them, and index.json at the end (see mds.c for the layout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mds_impl.h"

/* ---- writing ----------------------------------------------------------- */

/* Columns are fixed by the first sample: its fields (sorted by name, as
 * streaming's MDSWriter sorts them) plus "label" (int) when it has a label.
 * Each shard is assembled in memory, since its offset table comes first. */
struct mds_w {
  struct mds_shard cols;
  uint64_t size_limit; /* for the config: 0 = null */
  uint8_t *data;
  size_t len, cap;
  uint32_t *offs;
  size_t n, ocap;
  char *index; /* index.json "shards" entries so far */
  size_t ilen, icap;
};

static void mds_wfree(struct stk_writer *w) {
  struct mds_w *st = w->state;
  if (st) {
    free(st->data);
    free(st->offs);
    free(st->index);
  }
  free(st);
  w->state = NULL;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 4096 / elem;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, nc * elem);
  if (!q) return STK_ENOMEM;
  *p = q;
  *cap = nc;
  return 0;
}

static int append(struct mds_w *st, const void *p, size_t n) {
  if (grow((void **)&st->data, &st->cap, st->len + n, 1)) return STK_ENOMEM;
  memcpy(st->data + st->len, p, n);
  st->len += n;
  return 0;
}

static const char *encoding_for(const char *field) {
  if (!strcmp(field, "jpg") || !strcmp(field, "jpeg")) return "jpeg";
  if (!strcmp(field, "png")) return "png";
  return "bytes";
}

static int col_cmp(const void *a, const void *b) {
  return strcmp(((const struct mds_col *)a)->name, ((const struct mds_col *)b)->name);
}

/* A typed field's column: a numeric scalar by its dtype's name (fixed
 * size), an array as `ndarray:DTYPE` with each value's shape before it
 * (token columns: Megatron sequences, npy token files, MDS ndarrays). */
static void typed_column(struct mds_col *k, const struct stk_field *f) {
  k->type = f->type;
  if (f->ndim == 0) {
    k->kind = COL_SCALAR;
    snprintf(k->enc, sizeof k->enc, "%s", stk_elem_type_name(f->type));
    k->size = stk_elem_type_size(f->type);
  } else {
    k->kind = COL_NDARRAY;
    snprintf(k->enc, sizeof k->enc, "ndarray:%s", stk_elem_type_name(f->type));
    k->size = -1;
  }
}

static int is_typed(const struct stk_field *f) {
  return f->type && f->type < STK_ELEM_COUNT && f->encoding == STK_ENC_NONE &&
         f->ndim <= STK_FIELD_MAX_DIMS;
}

static int plan_columns(struct stk_writer *w, const struct stk_sample *s) {
  struct mds_shard *c = &((struct mds_w *)w->state)->cols;
  for (int i = 0; i < s->nfields; i++) {
    struct mds_col *k = &c->cols[c->ncols++];
    snprintf(k->name, sizeof k->name, "%s", s->fields[i].name);
    snprintf(k->enc, sizeof k->enc, "%s", encoding_for(k->name));
    k->size = -1;
    if (is_typed(&s->fields[i])) typed_column(k, &s->fields[i]);
  }
  if (s->label >= 0 && !stk__has_label_field(s)) {
    if (c->ncols >= STK_MAX_FIELDS) return stk__errf(w->err, STK_EINVAL, "too many fields");
    struct mds_col *k = &c->cols[c->ncols++];
    snprintf(k->name, sizeof k->name, "label");
    snprintf(k->enc, sizeof k->enc, "int");
    k->size = 8;
  }
  if (c->ncols == 0) return stk__errf(w->err, STK_EINVAL, "sample has no fields");
  qsort(c->cols, (size_t)c->ncols, sizeof c->cols[0], col_cmp);
  return 0;
}

int stk__mds_wr_begin(struct stk_writer *w) {
  if (!w->state) {
    if (!(w->state = calloc(1, sizeof(struct mds_w))))
      return stk__errf(w->err, STK_ENOMEM, "out of memory");
    w->free_state = mds_wfree;
    if (!w->shard_bytes_max && !w->samples_per_shard) w->shard_bytes_max = MDS_DEFAULT_LIMIT;
    ((struct mds_w *)w->state)->size_limit = w->shard_bytes_max;
    if (!w->shard_bytes_max || w->shard_bytes_max > MDS_MAX_LIMIT)
      w->shard_bytes_max = MDS_MAX_LIMIT;
  }
  struct mds_w *st = w->state;
  st->len = st->n = 0;
  size_t n = strlen(w->dir) + 32;
  if (!(w->path = malloc(n))) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  snprintf(w->path, n, "%s/shard.%05llu.mds", w->dir, (unsigned long long)w->shard_no);
  return 0;
}

static const struct stk_field *find_field(const struct stk_sample *s, const char *name) {
  for (int i = 0; i < s->nfields; i++)
    if (!strcmp(s->fields[i].name, name)) return &s->fields[i];
  return NULL;
}

int stk__mds_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  struct mds_w *st = w->state;
  int rc;
  if (!st->cols.ncols && (rc = plan_columns(w, s)) != 0) return rc;
  const struct stk_field *f[STK_MAX_FIELDS];
  uint8_t lab[8];
  stk__st64(lab, (uint64_t)(int64_t)s->label);
  struct stk_field lf = {.name = "label", .data = lab, .len = 8};
  int extra = 0;
  for (int i = 0; i < st->cols.ncols; i++) {
    const struct mds_col *c = &st->cols.cols[i];
    f[i] = find_field(s, c->name);
    if (!f[i] && c->size == 8 && !strcmp(c->name, "label")) f[i] = &lf, extra = 1;
    if (!f[i] || f[i]->len > UINT32_MAX)
      return stk__errf(w->err, STK_EINVAL,
                       "sample %llu lacks column '%s' of the first sample (MDS columns are fixed)",
                       (unsigned long long)w->samples, c->name);
  }
  if (s->nfields + extra != st->cols.ncols)
    return stk__errf(w->err, STK_EINVAL, "sample %llu has fields the first sample lacks",
                     (unsigned long long)w->samples);
  /* Typed columns take values of their dtype (and scalars of their size);
   * an ndarray value is stored after its shape: u8 ndim << 2 | log2 of the
   * shape's item size (the smallest that holds every dimension, as
   * streaming's NDArray picks it), then the shape. */
  uint8_t nd[STK_MAX_FIELDS][1 + 8 * STK_FIELD_MAX_DIMS];
  size_t ndl[STK_MAX_FIELDS] = {0};
  for (int i = 0; i < st->cols.ncols; i++) {
    const struct mds_col *c = &st->cols.cols[i];
    if (!c->kind || f[i] == &lf) continue;
    int ok = is_typed(f[i]) && f[i]->type == c->type &&
             (c->kind == COL_SCALAR ? f[i]->ndim == 0 && f[i]->len == (uint64_t)c->size
                                    : f[i]->ndim >= 1);
    if (!ok)
      return stk__errf(w->err, STK_EINVAL,
                       "sample %llu: column '%s' is %s, but this sample's field is %s%s (MDS "
                       "columns are fixed by the first sample)",
                       (unsigned long long)w->samples, c->name, c->enc,
                       f[i]->type ? stk_elem_type_name(f[i]->type) : "bytes",
                       f[i]->type && f[i]->ndim ? " array" : "");
    if (c->kind != COL_NDARRAY) continue;
    uint64_t mx = 0;
    for (int d = 0; d < f[i]->ndim; d++) mx = f[i]->shape[d] > mx ? f[i]->shape[d] : mx;
    unsigned lg = mx < (1u << 8) ? 0 : mx < (1u << 16) ? 1 : mx <= UINT32_MAX ? 2 : 3;
    nd[i][0] = (uint8_t)(f[i]->ndim << 2 | lg);
    ndl[i] = 1;
    for (int d = 0; d < f[i]->ndim; d++, ndl[i] += 1u << lg)
      for (unsigned b = 0; b < 1u << lg; b++)
        nd[i][ndl[i] + b] = (uint8_t)(f[i]->shape[d] >> (8 * b));
    if (f[i]->len > UINT32_MAX - ndl[i])
      return stk__errf(w->err, STK_EINVAL, "sample %llu: column '%s' value over 4 GiB",
                       (unsigned long long)w->samples, c->name);
  }
  if (grow((void **)&st->offs, &st->ocap, st->n + 1, sizeof *st->offs))
    return stk__errf(w->err, STK_ENOMEM, "out of memory");
  st->offs[st->n++] = (uint32_t)st->len;
  rc = 0;
  for (int i = 0; i < st->cols.ncols && !rc; i++)
    if (st->cols.cols[i].size < 0) {
      uint8_t b[4];
      stk__st32(b, (uint32_t)(ndl[i] + f[i]->len));
      rc = append(st, b, 4);
    }
  for (int i = 0; i < st->cols.ncols && !rc; i++) {
    if (ndl[i]) rc = append(st, nd[i], ndl[i]);
    if (!rc) rc = append(st, f[i]->data, (size_t)f[i]->len);
  }
  if (rc) return stk__errf(w->err, rc, "out of memory");
  w->shard_bytes = st->len + 4 * (st->n + 2) + 256; /* estimate for rotation */
  if (w->shard_bytes > UINT32_MAX)
    return stk__errf(w->err, STK_ERANGE, "MDS shard over 4 GiB; lower --shard-size");
  return 0;
}

/* The columns and config as Python's json.dumps(sort_keys=True) writes them. */
static void put_jstr(char **o, size_t *n, const char *s) {
  size_t k = (size_t)snprintf(*o, *n, "\"");
  for (; *s && k + 8 < *n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') k += (size_t)snprintf(*o + k, *n - k, "\\%c", c);
    else if (c < 0x20) k += (size_t)snprintf(*o + k, *n - k, "\\u%04x", c);
    else (*o)[k++] = (char)c;
  }
  k += (size_t)snprintf(*o + k, *n - k, "\"");
  *o += k;
  *n -= k;
}

static void put_columns(const struct mds_shard *c, char **o, size_t *n) {
  static const char *keys[3] = {"column_encodings", "column_names", "column_sizes"};
  for (int k = 0; k < 3; k++) {
    int l = snprintf(*o, *n, "%s\"%s\": [", k ? ", " : "", keys[k]);
    *o += l, *n -= (size_t)l;
    for (int i = 0; i < c->ncols; i++) {
      if (i) *o += snprintf(*o, *n, ", "), *n -= 2;
      if (k == 0) put_jstr(o, n, c->cols[i].enc);
      else if (k == 1) put_jstr(o, n, c->cols[i].name);
      else if (c->cols[i].size < 0) *o += snprintf(*o, *n, "null"), *n -= 4;
      else {
        l = snprintf(*o, *n, "%lld", (long long)c->cols[i].size);
        *o += l, *n -= (size_t)l;
      }
    }
    *o += snprintf(*o, *n, "]"), *n -= 1;
  }
}

static size_t config_json(const struct mds_w *st, char *out, size_t cap) {
  char *o = out, lim[32] = "null";
  size_t n = cap;
  o += snprintf(o, n, "{"), n--;
  put_columns(&st->cols, &o, &n);
  if (st->size_limit) snprintf(lim, sizeof lim, "%llu", (unsigned long long)st->size_limit);
  int l = snprintf(o, n,
                   ", \"compression\": null, \"format\": \"mds\", \"hashes\": [], "
                   "\"size_limit\": %s, \"version\": 2}",
                   lim);
  return (size_t)(o - out) + (size_t)l;
}

static int index_entry(struct stk_writer *w, struct mds_w *st, uint64_t bytes) {
  char cfg[4096];
  size_t cl = config_json(st, cfg, sizeof cfg);
  char ent[4096 + 512];
  /* Insert raw_data/samples after "hashes": [] to keep the keys sorted. */
  char *h = strstr(cfg, "\"size_limit\"");
  int l = snprintf(ent, sizeof ent,
                   "%s%.*s\"raw_data\": {\"basename\": \"shard.%05llu.mds\", \"bytes\": %llu, "
                   "\"hashes\": {}}, \"samples\": %zu, %.*s, \"zip_data\": null}",
                   st->ilen ? ", " : "", (int)(h - cfg), cfg, (unsigned long long)w->shard_no,
                   (unsigned long long)bytes, st->n, (int)(cl - (size_t)(h - cfg) - 1), h);
  if (grow((void **)&st->index, &st->icap, st->ilen + (size_t)l + 1, 1))
    return stk__errf(w->err, STK_ENOMEM, "out of memory");
  memcpy(st->index + st->ilen, ent, (size_t)l + 1);
  st->ilen += (size_t)l;
  return 0;
}

int stk__mds_wr_end(struct stk_writer *w) {
  struct mds_w *st = w->state;
  char cfg[4096];
  size_t cl = config_json(st, cfg, sizeof cfg);
  uint64_t hdr = 4 + 4 * ((uint64_t)st->n + 1) + cl;
  if (hdr + st->len > UINT32_MAX)
    return stk__errf(w->err, STK_ERANGE, "MDS shard over 4 GiB; lower --shard-size");
  uint8_t *t = malloc(4 * (st->n + 2));
  if (!t) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  stk__st32(t, (uint32_t)st->n);
  for (size_t i = 0; i <= st->n; i++)
    stk__st32(t + 4 + 4 * i, (uint32_t)(hdr + (i < st->n ? st->offs[i] : st->len)));
  w->shard_bytes = 0;
  int rc = stk__wr_write(w, t, 4 * (st->n + 2));
  free(t);
  if (!rc) rc = stk__wr_write(w, cfg, cl);
  if (!rc) rc = stk__wr_write(w, st->data, st->len);
  return rc ? rc : index_entry(w, st, w->shard_bytes);
}

int stk__mds_wr_finish(struct stk_writer *w) {
  struct mds_w *st = w->state;
  size_t n = (st ? st->ilen : 0) + 64;
  char *p = malloc(n);
  if (!p) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  int l = snprintf(p, n, "{\"shards\": [%s], \"version\": 2}", st && st->index ? st->index : "");
  char *path = malloc(strlen(w->dir) + 12);
  int rc = path ? 0 : stk__errf(w->err, STK_ENOMEM, "out of memory");
  if (!rc) {
    sprintf(path, "%s/index.json", w->dir);
    rc = stk__wr_file(w, path, p, (size_t)l);
  }
  free(path);
  free(p);
  return rc;
}
