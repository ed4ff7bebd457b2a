/* The format table and what every backend shares: sample and index
 * helpers, the read window for index hooks, format lookup by name, by
 * extension and by magic bytes (each backend declares its own in its ops
 * struct). Nothing here opens a dataset: that is src/dataset/. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format_impl.h"

const struct stk_format_ops *const stk_formats[] = {
    &stk__fmt_tfrecord, &stk__fmt_wds, &stk__fmt_npy, &stk__fmt_npz,
    &stk__fmt_mds,      &stk__fmt_megatron, &stk__fmt_files, &stk__fmt_npy_tokens, NULL,
};

int stk_format_info(int i, const char **name, unsigned *caps, const char **desc) {
  if (i < 0 || i >= (int)STK__ARRAY_LEN(stk_formats) - 1) return STK_ENOENT;
  if (name) *name = stk_formats[i]->name;
  if (caps) *caps = stk_formats[i]->caps;
  if (desc) *desc = stk_formats[i]->desc;
  return 0;
}

const struct stk_format_ops *stk__format_find(const char *name) {
  for (int i = 0; name && stk_formats[i]; i++)
    if (!strcmp(stk_formats[i]->name, name)) return stk_formats[i];
  return NULL;
}

/* ---- helpers shared with the backends ---------------------------------- */

int stk__fd_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return stk__from_errno(errno);
  *size = (uint64_t)st.st_size;
  return 0;
}

int stk__idx_push(struct stk_index_entry **idx, uint64_t *cap, uint64_t n, uint64_t off,
                  uint64_t len) {
  if (n >= *cap) {
    uint64_t nc = *cap ? *cap * 2 : 64;
    if (nc > SIZE_MAX / sizeof **idx) return STK_ENOMEM;
    struct stk_index_entry *p = realloc(*idx, (size_t)nc * sizeof *p);
    if (!p) return STK_ENOMEM;
    *idx = p;
    *cap = nc;
  }
  (*idx)[n].off = off;
  (*idx)[n].len = len;
  return 0;
}

int stk__idx_finish(struct stk_shard *sh, struct stk_index_entry *idx, uint64_t n, uint64_t cap,
                    int rc) {
  if (rc) {
    free(idx);
    return rc;
  }
  if (n && n < cap) { /* give back the doubling slack: many shards, many samples */
    struct stk_index_entry *fit = realloc(idx, (size_t)n * sizeof *idx);
    if (fit) idx = fit;
  }
  sh->idx = idx;
  sh->count = n;
  return 0;
}

void stk__sample_reset(struct stk_sample *out, const struct stk_shard *sh) {
  out->label = sh ? sh->label : -1;
  out->key[0] = 0;
  out->nfields = 0;
}

int stk__sample_add(struct stk_sample *out, const char *name, size_t name_len,
                    const uint8_t *data, uint64_t len) {
  if (out->nfields >= STK_MAX_FIELDS) return STK_EFORMAT;
  struct stk_field *f = &out->fields[out->nfields++];
  size_t n = STK__MIN(name_len, sizeof f->name - 1);
  memcpy(f->name, name, n);
  f->name[n] = 0;
  f->data = data;
  f->len = f->raw_len = len;
  f->encoding = STK_ENC_NONE;
  f->elem = 0;
  f->stride = 0;
  f->type = STK_ELEM_NONE;
  f->ndim = 0;
  return 0;
}

static const struct {
  const char *name;
  unsigned size;
} elem_types[STK_ELEM_COUNT] = {
    [STK_ELEM_NONE] = {"bytes", 0},   [STK_ELEM_U8] = {"uint8", 1},
    [STK_ELEM_I8] = {"int8", 1},      [STK_ELEM_U16] = {"uint16", 2},
    [STK_ELEM_I16] = {"int16", 2},    [STK_ELEM_F16] = {"float16", 2},
    [STK_ELEM_U32] = {"uint32", 4},   [STK_ELEM_I32] = {"int32", 4},
    [STK_ELEM_F32] = {"float32", 4},  [STK_ELEM_U64] = {"uint64", 8},
    [STK_ELEM_I64] = {"int64", 8},    [STK_ELEM_F64] = {"float64", 8},
};

const char *stk_elem_type_name(int type) {
  return type >= 0 && type < STK_ELEM_COUNT ? elem_types[type].name : "unknown";
}

unsigned stk_elem_type_size(int type) {
  return type > 0 && type < STK_ELEM_COUNT ? elem_types[type].size : 0;
}

int stk__elem_type_by_name(const char *name, size_t n) {
  for (int t = 1; t < STK_ELEM_COUNT; t++)
    if (strlen(elem_types[t].name) == n && !memcmp(elem_types[t].name, name, n)) return t;
  return STK_ELEM_NONE;
}

const struct stk_field *stk__token_field(const struct stk_sample *s) {
  const struct stk_field *plain = NULL;
  for (int i = 0; i < s->nfields; i++) {
    const struct stk_field *f = &s->fields[i];
    if (!strcmp(f->name, "tokens")) return f;
  }
  for (int i = 0; i < s->nfields; i++) {
    const struct stk_field *f = &s->fields[i];
    if (f->type && f->ndim == 1) return f;
    if (!plain && strcmp(f->name, "cls") && strcmp(f->name, "label")) plain = f;
  }
  return plain;
}

void stk__sample_key(struct stk_sample *out, const char *key, size_t n) {
  n = STK__MIN(n, sizeof out->key - 1);
  memcpy(out->key, key, n);
  out->key[n] = 0;
}

int stk__has_label_field(const struct stk_sample *s) {
  for (int i = 0; i < s->nfields; i++) {
    const char *n = s->fields[i].name;
    if (!strcmp(n, "cls") || !strcmp(n, "label") || !strcmp(n, "class") || !strcmp(n, "y"))
      return 1;
  }
  return 0;
}

int32_t stk__parse_label(const uint8_t *p, uint64_t n) {
  while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == ' ' || p[n - 1] == '\r')) n--;
  if (n == 0 || n > 9) return -1;
  int32_t v = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

static int mem_read(const struct stk__bytes *b, void *buf, size_t len, uint64_t off) {
  if (off > b->size || b->size - off < len) return STK_ETRUNC;
  memcpy(buf, (const uint8_t *)b->ctx + off, len);
  return 0;
}

void stk__bytes_mem(struct stk__bytes *b, const void *p, uint64_t n) {
  b->size = n;
  b->read = mem_read;
  b->ctx = p;
}

int stk__win_init(struct stk__win *w, const struct stk__bytes *src, size_t cap) {
  memset(w, 0, sizeof *w);
  w->src = src;
  w->size = src->size;
  w->cap = cap;
  w->buf = malloc(cap);
  return w->buf ? 0 : STK_ENOMEM;
}

int stk__win_get(struct stk__win *w, uint64_t off, size_t len, const uint8_t **p) {
  if (len > w->cap) return STK_EINVAL;
  if (off > w->size || w->size - off < len) return STK_ETRUNC;
  if (off >= w->off && off - w->off + len <= w->len) {
    *p = w->buf + (off - w->off);
    return 0;
  }
  size_t want = (size_t)STK__MIN((uint64_t)w->cap, w->size - off);
  int rc = stk__bytes_read(w->src, w->buf, want, off);
  if (rc) {
    w->len = 0;
    return rc;
  }
  w->off = off;
  w->len = want;
  *p = w->buf;
  return 0;
}

void stk__win_free(struct stk__win *w) {
  free(w->buf);
  w->buf = NULL;
}

const struct stk_format_ops *stk__format_sniff(const uint8_t *buf, size_t n) {
  for (int i = 0; stk_formats[i]; i++) {
    const struct stk_format_ops *f = stk_formats[i];
    if (f->magic && f->magic_len && n >= (size_t)f->magic_off + f->magic_len &&
        !memcmp(buf + f->magic_off, f->magic, f->magic_len))
      return f;
  }
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->sniff && stk_formats[i]->sniff(buf, n)) return stk_formats[i];
  return NULL;
}

const struct stk_format_ops *stk__format_by_ext(const char *name) {
  for (int i = 0; stk_formats[i]; i++)
    if (stk_formats[i]->exts && *stk_formats[i]->exts && !stk_formats[i]->pair_ext &&
        stk__has_ext(name, stk_formats[i]->exts))
      return stk_formats[i];
  return NULL;
}

static char format_names[256];

static void names_fill(void) {
  size_t o = 0;
  for (int i = 0; stk_formats[i] && o < sizeof format_names; i++)
    o += (size_t)snprintf(format_names + o, sizeof format_names - o, "%s%s", i ? ", " : "",
                          stk_formats[i]->name);
}

const char *stk__format_names(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, names_fill);
  return format_names;
}

int stk__has_ext(const char *name, const char *exts) {
  size_t ln = strlen(name);
  for (const char *e = exts; e && *e;) {
    while (*e == ' ') e++;
    size_t le = strcspn(e, " ");
    if (le && ln > le && !memcmp(name + ln - le, e, le)) return 1;
    e += le;
  }
  return 0;
}
