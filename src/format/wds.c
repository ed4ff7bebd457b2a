/* WebDataset: POSIX ustar / GNU tar shards whose consecutive regular files
 * sharing a key (the path up to the first dot of its last component) form
 * one sample, the rest of the name naming the field ("000017.jpg",
 * "000017.cls"). GNU long names ('L') and pax 'x' headers (path, size) are
 * honoured; other entry types are skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_impl.h"

#define BLK 512
#define NAME_MAX_LEN 4096
#define PAX_MAX 16384
#define WDS_WINDOW (32 * 1024)

/* Where headers come from: the shard through a window (index) or the
 * sample's bytes (parse). */
struct src {
  struct stk__win *win;
  const uint8_t *buf;
  uint64_t size;
};

static int src_get(struct src *s, uint64_t off, size_t len, const uint8_t **p) {
  if (s->win) return stk__win_get(s->win, off, len, p);
  if (off > s->size || s->size - off < len) return STK_ETRUNC;
  *p = s->buf + off;
  return 0;
}

/* One regular member found by the walk. */
struct member {
  uint64_t start;    /* first header of its chain (L / x headers included) */
  uint64_t data_off, size, next;
  char name[NAME_MAX_LEN + 1];
  size_t key_len;    /* name[0..key_len) is the key; name[key_len] == '.' */
};

/* Octal (space/NUL terminated) or GNU base-256 numeric field. */
static int tar_num(const uint8_t *p, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (p[0] & 0x80) {
    if (p[0] != 0x80) return -1; /* negative or > 2^63: absurd here */
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return -1;
      v = v << 8 | p[i];
    }
    *out = v;
    return 0;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') i++;
  int digits = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; i++, digits++) v = v << 3 | (uint64_t)(p[i] - '0');
  if (i < n && p[i] != ' ' && p[i] != 0) return -1;
  if (!digits && i < n) return -1;
  *out = v;
  return 0;
}

static int checksum_ok(const uint8_t *h) {
  uint64_t stored;
  if (tar_num(h + 148, 8, &stored)) return 0;
  uint64_t u = 0;
  int64_t s = 0;
  for (int i = 0; i < BLK; i++) {
    uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
    u += b;
    s += (int8_t)b;
  }
  return stored == u || (int64_t)stored == s;
}

static int all_zero(const uint8_t *h) {
  for (int i = 0; i < BLK; i++)
    if (h[i]) return 0;
  return 1;
}

static size_t field_len(const uint8_t *p, size_t n) {
  size_t l = 0;
  while (l < n && p[l]) l++;
  return l;
}

/* The member name from a ustar header: prefix "/" name for POSIX ustar,
 * name alone otherwise. */
static void header_name(const uint8_t *h, char *out) {
  size_t nl = field_len(h, 100), pl = 0;
  if (!memcmp(h + 257, "ustar\0", 6)) pl = field_len(h + 345, 155);
  size_t o = 0;
  if (pl) {
    memcpy(out, h + 345, pl);
    out[pl] = '/';
    o = pl + 1;
  }
  memcpy(out + o, h, nl);
  out[o + nl] = 0;
}

/* Parse pax records "LEN key=value\n" for path and size. */
static int pax_records(const uint8_t *p, uint64_t n, char *path, int *have_path, uint64_t *size,
                       int *have_size) {
  uint64_t o = 0;
  while (o < n) {
    uint64_t len = 0, i = o;
    while (i < n && p[i] >= '0' && p[i] <= '9' && len < n) len = len * 10 + (p[i++] - '0');
    if (i >= n || p[i] != ' ' || len == 0 || len > n - o || p[o + len - 1] != '\n') return -1;
    const uint8_t *kv = p + i + 1, *end = p + o + len - 1;
    const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return -1;
    size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
    if (kl == 4 && !memcmp(kv, "path", 4) && vl <= NAME_MAX_LEN) {
      memcpy(path, eq + 1, vl);
      path[vl] = 0;
      *have_path = 1;
    } else if (kl == 4 && !memcmp(kv, "size", 4)) {
      uint64_t v = 0;
      for (size_t k = 0; k < vl; k++) {
        if (eq[1 + k] < '0' || eq[1 + k] > '9' || v > UINT64_MAX / 16) return -1;
        v = v * 10 + (uint64_t)(eq[1 + k] - '0');
      }
      *size = v;
      *have_size = 1;
    }
    o += len;
  }
  return 0;
}

/* Split name into key and extension; 0 if it has one. */
static int split_key(struct member *m) {
  const char *base = strrchr(m->name, '/') ? strrchr(m->name, '/') + 1 : m->name;
  const char *dot = strchr(base, '.');
  if (!dot || dot == base || !dot[1]) return -1;
  m->key_len = (size_t)(dot - m->name);
  return 0;
}

enum { WALK_MEMBER = 0, WALK_END = 1 };

/* Walk from *off to the next regular, well-named member (skipping other
 * entries), into m. Returns WALK_MEMBER, WALK_END at the archive's end, or
 * a negative code with a reason in *why and the failing offset in *at. */
static int walk(struct src *s, uint64_t *off, int verify, struct member *m, const char **why,
                uint64_t *at) {
  int have_long = 0, have_size = 0;
  uint64_t pax_size = 0, chain = UINT64_MAX;
  for (;;) {
    const uint8_t *h;
    *at = *off;
    if (*off == s->size) return WALK_END;
    int rc = src_get(s, *off, BLK, &h);
    if (rc) return *why = rc == STK_ETRUNC ? "truncated tar header" : "read failed", rc;
    if (all_zero(h)) return WALK_END;
    if (verify && !checksum_ok(h)) return *why = "tar header checksum mismatch", STK_ECRC;
    uint64_t size;
    if (tar_num(h + 124, 12, &size)) return *why = "bad size field in tar header", STK_EFORMAT;
    if (have_size) size = pax_size;
    uint64_t data = *off + BLK;
    if (size > s->size - data) return *why = "tar member runs past the end of the file", STK_ETRUNC;
    uint64_t next = data + ((size + BLK - 1) / BLK) * BLK;
    if (next > s->size) next = s->size; /* unpadded last member */
    if (chain == UINT64_MAX) chain = *off;
    uint8_t type = h[156];
    *off = next;
    if (type == 'L' || type == 'x') {
      if (size > (type == 'L' ? NAME_MAX_LEN : PAX_MAX))
        return *why = "absurdly long tar name record", STK_EFORMAT;
      const uint8_t *d;
      if ((rc = src_get(s, data, (size_t)size, &d)) != 0) return *why = "read failed", rc;
      if (type == 'L') {
        size_t l = field_len(d, (size_t)size);
        memcpy(m->name, d, l);
        m->name[l] = 0;
        have_long = 1;
      } else if (pax_records(d, size, m->name, &have_long, &pax_size, &have_size)) {
        return *why = "malformed pax header", STK_EFORMAT;
      }
      continue;
    }
    if (type == 'K' || type == 'g') continue; /* long link name, global pax */
    if (type != '0' && type != 0 && type != '7') {
      have_long = have_size = 0;
      chain = UINT64_MAX;
      continue;
    }
    if (!have_long) header_name(h, m->name);
    have_long = have_size = 0;
    m->start = chain;
    chain = UINT64_MAX;
    if (split_key(m)) continue; /* no extension: not part of any sample */
    m->data_off = data;
    m->size = size;
    m->next = next;
    return WALK_MEMBER;
  }
}

static int walk_err(const char *path, uint64_t base, uint64_t at, int rc, const char *why,
                    char *err) {
  return stk__errf(err, rc, "%s: offset %llu: %s", path, (unsigned long long)(base + at), why);
}

/* ---- index ------------------------------------------------------------- */

struct open_sample {
  char key[NAME_MAX_LEN + 1];
  size_t key_len;
  uint64_t start, end;
  int members;
};

static int wds_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                     char *err) {
  (void)ds;
  uint64_t size = sb->size;
  int rc;
  struct stk__win win;
  struct member *m = malloc(sizeof *m);
  struct open_sample *cur = malloc(sizeof *cur);
  if (!m || !cur || stk__win_init(&win, sb, WDS_WINDOW)) {
    free(m);
    free(cur);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  struct src s = {.win = &win, .size = size};
  struct stk_index_entry *idx = NULL;
  uint64_t n = 0, cap = 0, off = 0, at;
  const char *why = "";
  cur->members = 0;
  for (;;) {
    rc = walk(&s, &off, 1, m, &why, &at);
    if (rc < 0) {
      walk_err(sh->path, 0, at, rc, why, err);
      break;
    }
    int same = rc == WALK_MEMBER && cur->members && m->key_len == cur->key_len &&
               !memcmp(m->name, cur->key, m->key_len);
    if (same) {
      cur->end = m->next;
      if (++cur->members > STK_MAX_FIELDS) {
        rc = stk__errf(err, STK_EFORMAT, "%s: offset %llu: sample '%s' has more than %d files",
                       sh->path, (unsigned long long)m->start, cur->key, STK_MAX_FIELDS);
        break;
      }
      continue;
    }
    if (cur->members && stk__idx_push(&idx, &cap, n++, cur->start, cur->end - cur->start)) {
      rc = stk__errf(err, STK_ENOMEM, "%s: out of memory indexing", sh->path);
      break;
    }
    if (rc == WALK_END) {
      rc = 0;
      break;
    }
    memcpy(cur->key, m->name, m->key_len);
    cur->key[m->key_len] = 0;
    cur->key_len = m->key_len;
    cur->start = m->start;
    cur->end = m->next;
    cur->members = 1;
  }
  stk__win_free(&win);
  free(m);
  free(cur);
  return stk__idx_finish(sh, idx, n, cap, rc);
}

/* ---- parse ------------------------------------------------------------- */

static int wds_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                     const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                     struct stk_sample *out, char *err) {
  (void)k;
  (void)ds;
  stk__sample_reset(out, sh);
  struct src s = {.buf = buf, .size = len};
  struct member *m = malloc(sizeof *m);
  if (!m) return stk__errf(err, STK_ENOMEM, "out of memory");
  uint64_t o = 0, at;
  const char *why = "";
  int rc;
  while ((rc = walk(&s, &o, verify, m, &why, &at)) == WALK_MEMBER) {
    if (!out->nfields) stk__sample_key(out, m->name, m->key_len);
    const char *ext = m->name + m->key_len + 1;
    if (stk__sample_add(out, ext, strlen(ext), buf + m->data_off, m->size)) {
      rc = stk__errf(err, STK_EFORMAT, "%s: offset %llu: sample has more than %d files",
                     sh->path, (unsigned long long)(off + m->start), STK_MAX_FIELDS);
      break;
    }
    if (!strcmp(ext, "cls") || !strcmp(ext, "label") || !strcmp(ext, "class")) {
      int32_t l = stk__parse_label(buf + m->data_off, m->size);
      if (l >= 0) out->label = l;
    }
  }
  free(m);
  if (rc < 0) {
    if (why[0]) walk_err(sh->path, off, at, rc, why, err);
    return rc;
  }
  if (!out->nfields)
    return stk__errf(err, STK_EFORMAT, "%s: offset %llu: no tar member in the sample's range",
                     sh->path, (unsigned long long)off);
  return 0;
}

/* ---- writing ----------------------------------------------------------- */

static void put_octal(uint8_t *p, size_t n, uint64_t v) {
  p[n - 1] = 0;
  for (size_t i = n - 1; i-- > 0; v >>= 3) p[i] = (uint8_t)('0' + (v & 7));
}

static int put_header(struct stk_writer *w, const char *name, size_t nl, uint64_t size,
                      uint8_t type) {
  uint8_t h[BLK];
  memset(h, 0, sizeof h);
  memcpy(h, name, STK__MIN(nl, (size_t)100));
  put_octal(h + 100, 8, 0644);
  put_octal(h + 108, 8, 0);
  put_octal(h + 116, 8, 0);
  if (size < (1ull << 33)) {
    put_octal(h + 124, 12, size);
  } else {
    h[124] = 0x80;
    for (int i = 11; i > 0; i--, size >>= 8) h[124 + i] = (uint8_t)size;
  }
  put_octal(h + 136, 12, 0);
  h[156] = type;
  memcpy(h + 257, "ustar\0" "00", 8);
  memset(h + 148, ' ', 8);
  uint32_t sum = 0;
  for (int i = 0; i < BLK; i++) sum += h[i];
  put_octal(h + 148, 7, sum);
  h[155] = ' ';
  return stk__wr_write(w, h, sizeof h);
}

static int put_padding(struct stk_writer *w, uint64_t size) {
  static const uint8_t zero[BLK];
  size_t pad = (size_t)((BLK - size % BLK) % BLK);
  return pad ? stk__wr_write(w, zero, pad) : 0;
}

/* One member, with a GNU long-name header first when the name needs one. */
static int put_member(struct stk_writer *w, const char *name, const void *data, uint64_t size) {
  size_t nl = strlen(name);
  int rc = 0;
  if (nl > 100) {
    rc = put_header(w, "././@LongLink", 13, nl + 1, 'L');
    if (!rc) rc = stk__wr_write(w, name, nl + 1);
    if (!rc) rc = put_padding(w, nl + 1);
  }
  if (!rc) rc = put_header(w, name, nl, size, '0');
  if (!rc) rc = stk__wr_write(w, data, (size_t)size);
  return rc ? rc : put_padding(w, size);
}

/* The sample's key with dots in its last component made '_', so readers
 * split it back at the right dot. */
static void member_key(const struct stk_writer *w, const struct stk_sample *s, char *out,
                       size_t n) {
  if (s->key[0]) snprintf(out, n, "%s", s->key);
  else snprintf(out, n, "%08llu", (unsigned long long)w->samples);
  char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
  for (char *c = base; *c; c++)
    if (*c == '.') *c = '_';
}

static int wds_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  char key[160], name[200];
  member_key(w, s, key, sizeof key);
  int rc = 0;
  for (int i = 0; i < s->nfields && !rc; i++) {
    snprintf(name, sizeof name, "%s.%s", key, s->fields[i].name);
    rc = put_member(w, name, s->fields[i].data, s->fields[i].len);
  }
  if (!rc && s->label >= 0 && !stk__has_label_field(s)) {
    char txt[16];
    int tl = snprintf(txt, sizeof txt, "%d", (int)s->label);
    snprintf(name, sizeof name, "%s.cls", key);
    rc = put_member(w, name, txt, (uint64_t)tl);
  }
  return rc;
}

static int wds_wr_end(struct stk_writer *w) {
  static const uint8_t zero[2 * BLK];
  return stk__wr_write(w, zero, sizeof zero);
}

const struct stk_format_ops stk__fmt_wds = {
    .name = "wds",
    .desc = "WebDataset tar shards (files sharing a key form a sample)",
    .exts = ".tar",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_CHECKSUM | STK_FMT_WRITE | STK_FMT_LABELS,
    .magic = "ustar",
    .magic_off = 257,
    .magic_len = 5,
    .index = wds_index,
    .parse = wds_parse,
    .wr_sample = wds_wr_sample,
    .wr_shard_end = wds_wr_end,
};
