/* TFRecord: records of `u64 length, u32 masked_crc32c(length), data, u32
 * masked_crc32c(data)`, little-endian. The index comes from a DALI-style
 * .idx file next to the shard when it matches the shard, else from one pass
 * over the record headers that never reads record data. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format_impl.h"

#define TFR_HDR 12
#define TFR_OVERHEAD 16
#define TFR_WINDOW (16 * 1024)
#define IDX_MAX_BYTES (256u << 20)

/* ---- tf.train.Example ---------------------------------------------------- */

/* A protobuf varint at *p (< end); 0 on success. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*p >= end) return -1;
    uint8_t b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* One length-delimited field with the wanted number at *p; the only wire
 * type the Example messages use at this level. */
static int ld_field(const uint8_t **p, const uint8_t *end, uint64_t want, const uint8_t **body,
                    uint64_t *blen) {
  uint64_t tag, n;
  if (varint(p, end, &tag) || tag != (want << 3 | 2) || varint(p, end, &n)) return -1;
  if (n > (uint64_t)(end - *p)) return -1;
  *body = *p;
  *blen = n;
  *p += n;
  return 0;
}

/* Keys that name a class label: "label", "image/class/label", "cls". */
static int is_label_key(const uint8_t *k, uint64_t n) {
  return (n >= 5 && !memcmp(k + n - 5, "label", 5)) || (n == 3 && !memcmp(k, "cls", 3)) ||
         (n == 5 && !memcmp(k, "class", 5));
}

/* Feature { bytes_list = 1 | float_list = 2 | int64_list = 3 }: expose a
 * single-value bytes list as a field, and an int64 list as the label. */
static int example_feature(const uint8_t *p, const uint8_t *end, const uint8_t *key,
                           uint64_t klen, struct stk_sample *out) {
  uint64_t tag, n;
  if (p == end) return 0;
  if (varint(&p, end, &tag) || (tag & 7) != 2 || varint(&p, end, &n) ||
      n > (uint64_t)(end - p))
    return -1;
  const uint8_t *list = p, *lend = p + n;
  if (p + n != end) return -1;
  if (tag >> 3 == 1) {
    const uint8_t *v;
    uint64_t vl;
    if (list == lend) return 0;
    if (ld_field(&list, lend, 1, &v, &vl) || list != lend) return 0; /* multi-value: skip */
    return stk__sample_add(out, (const char *)key, (size_t)klen, v, vl) ? -1 : 0;
  }
  if (tag >> 3 == 3 && out->label < 0 && is_label_key(key, klen)) {
    uint64_t t2, pl, val;
    if (list == lend) return 0;
    if (varint(&list, lend, &t2)) return -1;
    if (t2 == (1 << 3 | 2) && !varint(&list, lend, &pl) && pl && !varint(&list, lend, &val) &&
        val < 0x7fffffff)
      out->label = (int32_t)val;
    else if (t2 == (1 << 3 | 0) && !varint(&list, lend, &val) && val < 0x7fffffff)
      out->label = (int32_t)val;
  }
  return 0;
}

/* Example { Features features = 1 } ; Features { map<string, Feature>
 * feature = 1 }. Fields are added only if the whole message parses, so raw
 * payloads that merely start like a protobuf stay one "data" field. */
static int parse_example(const uint8_t *p, uint64_t n, struct stk_sample *out) {
  const uint8_t *end = p + n, *feats;
  uint64_t flen;
  struct stk_sample tmp = *out;
  if (n == 0 || ld_field(&p, end, 1, &feats, &flen) || p != end) return -1;
  const uint8_t *q = feats, *qe = feats + flen;
  while (q < qe) {
    const uint8_t *entry, *key = NULL, *val = NULL;
    uint64_t elen, klen = 0, vlen = 0;
    if (ld_field(&q, qe, 1, &entry, &elen)) return -1;
    const uint8_t *e = entry, *ee = entry + elen;
    while (e < ee) {
      uint64_t tag, l;
      if (varint(&e, ee, &tag) || (tag & 7) != 2 || varint(&e, ee, &l) ||
          l > (uint64_t)(ee - e))
        return -1;
      if (tag >> 3 == 1) key = e, klen = l;
      else if (tag >> 3 == 2) val = e, vlen = l;
      else return -1;
      e += l;
    }
    if (!key || !val) return -1;
    if (klen == 7 && !memcmp(key, "__key__", 7)) {
      const uint8_t *v, *ve = val + vlen, *q2 = val, *bl;
      uint64_t vl2, bll;
      if (!ld_field(&q2, ve, 1, &bl, &bll) && !ld_field(&bl, bl + bll, 1, &v, &vl2))
        stk__sample_key(&tmp, (const char *)v, (size_t)vl2);
      continue;
    }
    if (example_feature(val, val + vlen, key, klen, &tmp)) return -1;
  }
  *out = tmp;
  return 0;
}

/* ---- reading ----------------------------------------------------------- */

static int bad_record(const char *path, uint64_t off, uint64_t L, uint64_t size, char *err) {
  return stk__errf(err, STK_ETRUNC,
                   "%s: offset %llu: record of %llu bytes runs past the end of the file "
                   "(%llu bytes); truncated shard",
                   path, (unsigned long long)off, (unsigned long long)L,
                   (unsigned long long)size);
}

/* One pass over the headers, reading them through a window so runs of small
 * records cost one pread, while large records are skipped unread. */
static int scan(struct stk_shard *sh, const struct stk__bytes *sb, char *err) {
  uint64_t size = sb->size;
  struct stk__win w;
  if (stk__win_init(&w, sb, TFR_WINDOW)) return stk__errf(err, STK_ENOMEM, "out of memory");
  struct stk_index_entry *idx = NULL;
  uint64_t n = 0, cap = 0, off = 0;
  int rc = 0;
  while (off < size) {
    const uint8_t *h;
    if (size - off < TFR_HDR) {
      rc = stk__errf(err, STK_ETRUNC, "%s: offset %llu: truncated record header (%llu bytes left)",
                     sh->path, (unsigned long long)off, (unsigned long long)(size - off));
      break;
    }
    if ((rc = stk__win_get(&w, off, TFR_HDR, &h)) != 0) {
      stk__errf(err, rc, "%s: offset %llu: read failed: %s", sh->path, (unsigned long long)off,
                stk_strerror(rc));
      break;
    }
    uint64_t L = stk__ld64(h);
    if (stk_crc32c_mask(stk_crc32c(0, h, 8)) != stk__ld32(h + 8)) {
      rc = stk__errf(err, STK_ECRC,
                     "%s: offset %llu: record length checksum mismatch (not a TFRecord file, or "
                     "corrupt)",
                     sh->path, (unsigned long long)off);
      break;
    }
    if (L > size - off - TFR_HDR || size - off - TFR_HDR - L < 4) {
      rc = bad_record(sh->path, off, L, size, err);
      break;
    }
    if ((rc = stk__idx_push(&idx, &cap, n++, off, L + TFR_OVERHEAD)) != 0) {
      stk__errf(err, rc, "%s: out of memory indexing", sh->path);
      break;
    }
    off += L + TFR_OVERHEAD;
  }
  stk__win_free(&w);
  return stk__idx_finish(sh, idx, n, cap, rc);
}

/* What a walk over an .idx saw: its first entry, and the last of the
 * entries that lie wholly inside a file of `size` bytes (`whole` of them). */
struct idx_walk {
  uint64_t size, n, end, whole;
  struct stk_index_entry first, last_whole;
};

static int digit_at(const char *p, const char *end) { return p < end && *p >= '0' && *p <= '9'; }

/* Walk the "offset size" lines of an .idx: 0 when they are well formed and
 * tile [0, w->end) with no gap, storing them in idx when it is not NULL
 * (room for w->n entries, from a first walk). */
static int walk_idx(const char *text, size_t len, struct stk_index_entry *idx,
                    struct idx_walk *w) {
  uint64_t n = 0, expect = 0;
  const char *p = text, *end = text + len;
  w->whole = 0;
  while (p < end) {
    char *e;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    if (p == end) break;
    if (!digit_at(p, end)) return -1;
    errno = 0;
    uint64_t off = strtoull(p, &e, 10);
    if (*e != ' ' && *e != '\t') return -1;
    for (p = e; p < end && (*p == ' ' || *p == '\t');) p++;
    if (!digit_at(p, end)) return -1;
    uint64_t l = strtoull(p, &e, 10);
    if (errno == ERANGE || (e < end && *e != '\n' && *e != '\r' && *e != ' ')) return -1;
    p = e;
    if (off != expect || l < TFR_OVERHEAD || l > UINT64_MAX - off) return -1;
    struct stk_index_entry ent = {.off = off, .len = l};
    if (idx) idx[n] = ent;
    if (n == 0) w->first = ent;
    if (off + l <= w->size) {
      w->whole++;
      w->last_whole = ent;
    }
    n++;
    expect = off + l;
  }
  w->n = n;
  w->end = expect;
  return 0;
}

/* A record's header agrees with its index entry. */
static int header_ok(const struct stk__bytes *sb, const struct stk_index_entry *e) {
  uint8_t h[TFR_HDR];
  if (stk__bytes_read(sb, h, sizeof h, e->off)) return 0;
  return stk__ld64(h) == e->len - TFR_OVERHEAD &&
         stk_crc32c_mask(stk_crc32c(0, h, 8)) == stk__ld32(h + 8);
}

/* An .idx that describes more bytes than the shard holds: the shard was cut
 * short (at a record boundary a scan cannot tell), unless the file's own
 * headers disagree with the entries, which marks the .idx as stale for
 * another file. STK_ETRUNC with the detail, or 0 when the .idx is stale. */
static int idx_longer(struct stk_shard *sh, const struct stk__bytes *sb, const struct idx_walk *w,
                      char *err) {
  int agrees = 1;
  if (w->size >= TFR_HDR) agrees = header_ok(sb, &w->first);
  if (agrees && w->whole > 1) agrees = header_ok(sb, &w->last_whole);
  if (!agrees) return 0;
  uint64_t cut = w->whole ? w->last_whole.off + w->last_whole.len : 0;
  return stk__errf(err, STK_ETRUNC,
                   "%s: offset %llu: the shard ends after %llu of the %llu records its .idx "
                   "lists (%llu of %llu bytes); truncated shard (if the .idx is stale, remove "
                   "it to index by scanning)",
                   sh->path, (unsigned long long)cut, (unsigned long long)w->whole,
                   (unsigned long long)w->n, (unsigned long long)w->size,
                   (unsigned long long)w->end);
}

/* Read a whole .idx into a malloc'ed, NUL-terminated buffer: one read for
 * the usual small file, growing only for big ones (no fstat needed). */
static char *read_idx(int fd, size_t *len) {
  size_t cap = 16384, n = 0;
  char *t = malloc(cap + 1);
  while (t) {
    ssize_t r = read(fd, t + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (r == 0) {
      t[n] = 0;
      *len = n;
      return t;
    }
    n += (size_t)r;
    if (n == cap) {
      char *g = cap < IDX_MAX_BYTES ? realloc(t, cap * 2 + 1) : NULL;
      if (!g) break;
      t = g;
      cap *= 2;
    }
  }
  free(t);
  return NULL;
}

/* Use SHARD.idx if present and consistent with the shard: its entries tile
 * the file exactly and the first record's header matches (parse checks
 * every record's length against its entry, so a stale .idx that slips
 * through still fails cleanly, naming the record). Returns 0 when indexed
 * from the .idx, 1 when the shard must be scanned instead, or an error: a
 * shard shorter than the .idx it agrees with is truncated, even when it
 * ends on a record boundary or is empty, which a scan alone would accept. */
static int try_idx(struct stk_shard *sh, const struct stk__bytes *sb, uint64_t size, char *err) {
  size_t pl = strlen(sh->path), len = 0;
  char *ip = malloc(pl + 5);
  if (!ip) return stk__errf(err, STK_ENOMEM, "out of memory");
  memcpy(ip, sh->path, pl);
  memcpy(ip + pl, ".idx", 5);
  int ifd = open(ip, O_RDONLY | O_CLOEXEC);
  free(ip);
  if (ifd < 0) return 1;
  char *text = read_idx(ifd, &len);
  close(ifd);
  struct idx_walk w = {.size = size};
  int rc = 1;
  if (text && !walk_idx(text, len, NULL, &w)) {
    if (w.end > size) {
      rc = idx_longer(sh, sb, &w, err);
      if (rc == 0) rc = 1;
    } else if (w.end == size && w.n > 0) {
      struct stk_index_entry *idx = malloc((size_t)w.n * sizeof *idx);
      if (idx && !walk_idx(text, len, idx, &w) && header_ok(sb, &idx[0])) {
        sh->idx = idx;
        sh->count = w.n;
        rc = 0;
      } else {
        free(idx);
      }
    } else if (w.end == size) {
      rc = 0; /* an empty .idx for an empty shard */
    }
  }
  free(text);
  if (rc == 1 && size > 0)
    stk_log(STK_LOG_INFO, "%s.idx does not match the shard; scanning it instead", sh->path);
  return rc;
}

static int tfr_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                     char *err) {
  (void)ds;
  uint64_t size = sb->size;
  int rc = try_idx(sh, sb, size, err);
  if (rc <= 0) return rc;
  if (size == 0) return 0;
  return scan(sh, sb, err);
}

static int tfr_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                     const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                     struct stk_sample *out, char *err) {
  (void)k;
  (void)ds;
  stk__sample_reset(out, sh);
  if (len < TFR_OVERHEAD)
    return stk__errf(err, STK_EFORMAT, "%s: offset %llu: %llu bytes are too short for a record",
                     sh->path, (unsigned long long)off, (unsigned long long)len);
  uint64_t L = stk__ld64(buf);
  if (verify && stk_crc32c_mask(stk_crc32c(0, buf, 8)) != stk__ld32(buf + 8))
    return stk__errf(err, STK_ECRC, "%s: offset %llu: record length checksum mismatch", sh->path,
                     (unsigned long long)off);
  if (L != len - TFR_OVERHEAD)
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset %llu: record says %llu bytes but its index entry has %llu "
                     "(stale .idx?)",
                     sh->path, (unsigned long long)off, (unsigned long long)L,
                     (unsigned long long)(len - TFR_OVERHEAD));
  const uint8_t *data = buf + TFR_HDR;
  if (verify && stk_crc32c_mask(stk_crc32c(0, data, (size_t)L)) != stk__ld32(data + L))
    return stk__errf(err, STK_ECRC, "%s: offset %llu: record data checksum mismatch (%llu bytes)",
                     sh->path, (unsigned long long)off, (unsigned long long)L);
  parse_example(data, L, out); /* Example features first: the default field */
  if (stk__sample_add(out, "data", 4, data, L)) {
    stk__sample_reset(out, sh);
    stk__sample_add(out, "data", 4, data, L);
  }
  return 0;
}

/* The two checksums of a record checked as it is copied: the data's CRC in
 * the copy's own pass (stk__crc32c_copy), each over the bytes stored in
 * dst, so what passed is what the batch holds. */
static int tfr_copy_check(uint8_t *dst, const uint8_t *src, uint64_t len) {
  if (len < TFR_OVERHEAD) {
    memcpy(dst, src, len);
    return 0;
  }
  memcpy(dst, src, TFR_HDR);
  int ok = stk__ld64(dst) == len - TFR_OVERHEAD &&
           stk_crc32c_mask(stk_crc32c(0, dst, 8)) == stk__ld32(dst + 8);
  uint32_t crc = stk__crc32c_copy(0, dst + TFR_HDR, src + TFR_HDR, len - TFR_OVERHEAD);
  memcpy(dst + len - 4, src + len - 4, 4);
  return ok && stk_crc32c_mask(crc) == stk__ld32(dst + len - 4);
}

/* ---- writing ----------------------------------------------------------- */

/* The .idx text of the current shard. */
struct tfr_wstate {
  char *idx;
  size_t len, cap;
};

static void tfr_wfree(struct stk_writer *w) {
  struct tfr_wstate *st = w->state;
  if (st) free(st->idx);
  free(st);
  w->state = NULL;
}

static int tfr_wr_begin(struct stk_writer *w) {
  if (!w->state) {
    w->state = calloc(1, sizeof(struct tfr_wstate));
    if (!w->state) return stk__errf(w->err, STK_ENOMEM, "out of memory");
    w->free_state = tfr_wfree;
  }
  ((struct tfr_wstate *)w->state)->len = 0;
  return 0;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

/* Size of one map entry { key = 1; value = 2 (Feature) } for a bytes or
 * int64 feature, and its bytes written at p when p is not NULL. */
static size_t feature_entry(uint8_t *p, const char *key, const uint8_t *data, uint64_t len,
                            int64_t ival, int is_int) {
  size_t kl = strlen(key);
  uint64_t vl = is_int ? varint_len((uint64_t)ival) : len;
  uint64_t inner = 1 + varint_len(vl) + vl;      /* the list's one (packed) value */
  uint64_t list = 1 + varint_len(inner) + inner;        /* Feature { list } */
  uint64_t entry = 1 + varint_len(kl) + kl + 1 + varint_len(list) + list;
  if (!p) return (size_t)(1 + varint_len(entry) + entry);
  size_t o = 0;
  p[o++] = 0x0a; /* Features.feature = 1 */
  o += put_varint(p + o, entry);
  p[o++] = 0x0a; /* key = 1 */
  o += put_varint(p + o, kl);
  memcpy(p + o, key, kl);
  o += kl;
  p[o++] = 0x12; /* value = 2 */
  o += put_varint(p + o, list);
  p[o++] = is_int ? 0x1a : 0x0a; /* int64_list = 3 / bytes_list = 1 */
  o += put_varint(p + o, inner);
  if (is_int) {
    p[o++] = 0x0a; /* packed value = 1 */
    o += put_varint(p + o, varint_len((uint64_t)ival));
    o += put_varint(p + o, (uint64_t)ival);
  } else {
    p[o++] = 0x0a;
    o += put_varint(p + o, len);
    memcpy(p + o, data, (size_t)len);
    o += (size_t)len;
  }
  return o;
}

/* Serialize a multi-field or labelled sample as a tf.train.Example: one
 * single-value bytes feature per field, an int64 "label", and the key as
 * bytes "__key__" (WebDataset's name for it). */
static uint8_t *build_example(const struct stk_sample *s, uint64_t *len) {
  uint64_t feats = 0;
  for (int i = 0; i < s->nfields; i++)
    feats += feature_entry(NULL, s->fields[i].name, NULL, s->fields[i].len, 0, 0);
  if (s->label >= 0) feats += feature_entry(NULL, "label", NULL, 0, s->label, 1);
  size_t kl = strlen(s->key);
  if (kl) feats += feature_entry(NULL, "__key__", NULL, kl, 0, 0);
  uint64_t total = 1 + varint_len(feats) + feats;
  uint8_t *p = malloc((size_t)total);
  if (!p) return NULL;
  size_t o = 0;
  p[o++] = 0x0a; /* Example.features = 1 */
  o += put_varint(p + o, feats);
  for (int i = 0; i < s->nfields; i++)
    o += feature_entry(p + o, s->fields[i].name, s->fields[i].data, s->fields[i].len, 0, 0);
  if (s->label >= 0) o += feature_entry(p + o, "label", NULL, 0, s->label, 1);
  if (kl) o += feature_entry(p + o, "__key__", (const uint8_t *)s->key, kl, 0, 0);
  *len = o;
  return p;
}

static int idx_append(struct stk_writer *w, uint64_t off, uint64_t len) {
  struct tfr_wstate *st = w->state;
  if (st->cap - st->len < 48) {
    size_t nc = st->cap ? st->cap * 2 : 4096;
    char *p = realloc(st->idx, nc);
    if (!p) return stk__errf(w->err, STK_ENOMEM, "out of memory");
    st->idx = p;
    st->cap = nc;
  }
  st->len += (size_t)snprintf(st->idx + st->len, st->cap - st->len, "%llu %llu\n",
                              (unsigned long long)off, (unsigned long long)len);
  return 0;
}

/* A sample parsed from an Example payload: its last field is "data" and
 * every other field lies inside it. Returns that field or NULL. */
static const struct stk_field *own_example(const struct stk_sample *s) {
  const struct stk_field *d = &s->fields[s->nfields - 1];
  if (strcmp(d->name, "data")) return NULL;
  for (int i = 0; i < s->nfields - 1; i++)
    if (s->fields[i].data < d->data || s->fields[i].data + s->fields[i].len > d->data + d->len)
      return NULL;
  return d;
}

/* A sample with one field and no label is written raw; anything richer as
 * a tf.train.Example, so fields and labels survive a round trip. A sample
 * read from a TFRecord whose payload was an Example is written back as is. */
static int tfr_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  if (s->nfields < 1) return stk__errf(w->err, STK_EINVAL, "sample %llu has no fields",
                                       (unsigned long long)w->samples);
  const struct stk_field *f = s->nfields == 1 && s->label < 0 ? &s->fields[0] : own_example(s);
  const uint8_t *data = f ? f->data : NULL;
  uint64_t L = f ? f->len : 0;
  uint8_t *ex = NULL;
  if (!f && !(data = ex = build_example(s, &L)))
    return stk__errf(w->err, STK_ENOMEM, "out of memory");
  uint8_t h[TFR_HDR], t[4];
  stk__st64(h, L);
  stk__st32(h + 8, stk_crc32c_mask(stk_crc32c(0, h, 8)));
  /* The caller's CRC of the first field, when that is what is written. */
  uint32_t crc = w->crc_hint && f == &s->fields[0] ? *w->crc_hint : stk_crc32c(0, data, (size_t)L);
  stk__st32(t, stk_crc32c_mask(crc));
  uint64_t off = w->shard_bytes;
  /* The sample's own payload is written from where it lies (no copy); an
   * Example built here is freed below, before the writer's flush. */
  int rc = stk__wr_write(w, h, sizeof h);
  if (!rc) rc = ex ? stk__wr_write(w, data, (size_t)L) : stk__wr_write_ref(w, data, (size_t)L);
  if (!rc) rc = stk__wr_write(w, t, sizeof t);
  free(ex);
  if (!rc && w->write_index) rc = idx_append(w, off, L + TFR_OVERHEAD);
  return rc;
}

static int tfr_wr_end(struct stk_writer *w) {
  struct tfr_wstate *st = w->state;
  if (!w->write_index || !w->path) return 0;
  size_t pl = strlen(w->path);
  char *ip = malloc(pl + 5);
  if (!ip) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  memcpy(ip, w->path, pl);
  memcpy(ip + pl, ".idx", 5);
  int rc = stk__wr_file(w, ip, st->idx ? st->idx : "", st->len);
  free(ip);
  return rc;
}

/* No fixed magic: a TFRecord starts with a length whose masked CRC32C
 * follows it. */
static int tfr_sniff(const uint8_t *b, size_t n) {
  return n >= 16 && stk_crc32c_mask(stk_crc32c(0, b, 8)) == stk__ld32(b + 8);
}

const struct stk_format_ops stk__fmt_tfrecord = {
    .name = "tfrecord",
    .desc = "TFRecord files (length, CRC32C, data, CRC32C), optional DALI .idx index",
    .exts = ".tfrecord .tfrecords .tfrec",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_CHECKSUM | STK_FMT_WRITE | STK_FMT_LABELS,
    .sniff = tfr_sniff,
    .side_exts = ".idx",
    .index = tfr_index,
    .parse = tfr_parse,
    .copy_check = tfr_copy_check,
    .wr_shard_begin = tfr_wr_begin,
    .wr_sample = tfr_wr_sample,
    .wr_shard_end = tfr_wr_end,
    .wr_crc_hint = 1,
};
