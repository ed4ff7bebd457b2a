/* Mosaic Data Shard (MDS), as mosaicml-streaming writes it: a directory with
 * index.json listing the shards and their columns, and shard files laid out
 * as `u32 num_samples, u32 offsets[num_samples + 1], JSON config, samples`
 * (offsets absolute). A sample is a u32 size for each variable-size column,
 * then every column's bytes in column order.
 *
 * Typed columns: numeric scalars (int8 ... float64, int) and NumPy arrays
 * (`ndarray`, `ndarray:DTYPE`, `ndarray:DTYPE:D0,D1`), whose fields carry
 * their element type and shape and point at the values alone; a dynamic
 * dtype or shape is read from the value's own header (a dtype code byte;
 * a byte ndim << 2 | log2 of the shape's item size, then the shape).
 *
 * Compressed shards (index.json's "compression": "zstd" or "zstd:LEVEL",
 * the whole raw shard in zip_data.basename) are decompressed once, when the
 * dataset is opened, beside the compressed file under the raw name, as
 * Mosaic Streaming does with a local copy; a folder stoker cannot write to
 * gets an unlinked temporary file instead, for this process only. The
 * decompressed size must be raw_data.bytes. See docs/formats.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../base/json_parse.h"
#include "format_impl.h"
#include "mds_impl.h"

struct mds_state {
  struct mds_shard *sh; /* parallel to the dataset's shards */
  size_t cap;
  size_t zipped;        /* compressed shards */
  int *fds;             /* unlinked decompressed shards, kept open */
  size_t nfds;
  char pname[STK_MAX_FIELDS][STK_FIELD_NAME_MAX + 8]; /* inspect's "column NAME" */
};

static void mds_free_state(struct stk_dataset *ds) {
  struct mds_state *st = stk__ds_state(ds);
  if (st) {
    free(st->sh);
    for (size_t i = 0; i < st->nfds; i++) close(st->fds[i]);
    free(st->fds);
  }
  free(st);
}

/* ---- index.json -------------------------------------------------------- */

static char *read_small(const char *path, size_t *len, char *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    stk__errf(err, STK_ENOENT, "%s: cannot open MDS index: %s", path, strerror(errno));
    return NULL;
  }
  uint64_t size;
  char *text = NULL;
  int rc = stk__fd_size(fd, &size);
  if (!rc && size > STK_JSON_PARSE_MAX_BYTES) rc = STK_ERANGE;
  if (!rc && !(text = malloc((size_t)size + 1))) rc = STK_ENOMEM;
  if (!rc) rc = stk__pread_full(fd, text, (size_t)size, 0);
  close(fd);
  if (rc) {
    free(text);
    stk__errf(err, rc, "%s: cannot read: %s", path, stk_strerror(rc));
    return NULL;
  }
  text[size] = 0;
  *len = (size_t)size;
  return text;
}

/* Label column: named label, cls, class or y, and either a fixed-size
 * integer (1: little-endian) or variable-size text/bytes (2: decimal). */
static int label_kind(const struct mds_col *c) {
  static const char *names[] = {"label", "cls", "class", "y"};
  int named = 0;
  for (size_t i = 0; i < STK__ARRAY_LEN(names); i++) named |= !strcmp(c->name, names[i]);
  if (!named) return 0;
  if (c->size > 0 && c->size <= 8 && (!strncmp(c->enc, "int", 3) || !strncmp(c->enc, "uint", 4)))
    return 1;
  return c->size < 0 && (!strcmp(c->enc, "str") || !strcmp(c->enc, "bytes")) ? 2 : 0;
}

/* A column's encoding: bytes-like, a numeric scalar, or an ndarray with
 * an optional fixed dtype and shape (checked against the column's size). */
static const char *parse_encoding(struct mds_col *c, char *why, size_t wn) {
  const char *e = c->enc;
  if (strncmp(e, "ndarray", 7) || (e[7] && e[7] != ':')) {
    int t = !strcmp(e, "int") ? STK_ELEM_I64 : stk__elem_type_by_name(e, strlen(e));
    if (!t) return NULL; /* bytes, str, jpeg, ...: the stored bytes */
    c->kind = COL_SCALAR;
    c->type = (uint8_t)t;
    if (c->size != (int64_t)stk_elem_type_size(t)) {
      snprintf(why, wn, "column '%s' (%s) has size %lld, not %u", c->name, e, (long long)c->size,
               stk_elem_type_size(t));
      return why;
    }
    return NULL;
  }
  c->kind = COL_NDARRAY;
  if (!e[7]) goto sized;
  const char *d = e + 8, *colon = strchr(d, ':');
  size_t dl = colon ? (size_t)(colon - d) : strlen(d);
  if (!(c->type = (uint8_t)stk__elem_type_by_name(d, dl))) {
    snprintf(why, wn, "column '%s': unknown ndarray dtype '%.*s'", c->name, (int)dl, d);
    return why;
  }
  if (!colon) goto sized;
  uint64_t bytes = stk_elem_type_size(c->type);
  for (const char *p = colon + 1;; p++) {
    char *end;
    errno = 0;
    unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
    if (!v || errno || c->ndim == STK_FIELD_MAX_DIMS || (*end && *end != ',') ||
        v > UINT32_MAX || bytes * v / v != bytes || bytes * v > UINT32_MAX) {
      snprintf(why, wn, "column '%s': bad ndarray shape in '%s' (positive dimensions, at most %d, "
               "under 4 GiB)", c->name, e, STK_FIELD_MAX_DIMS);
      return why;
    }
    c->shape[c->ndim++] = v;
    bytes *= v;
    p = end;
    if (!*p) break;
  }
  if (c->size != (int64_t)bytes) {
    snprintf(why, wn, "column '%s' (%s) has size %lld, but its shape makes %llu bytes", c->name,
             e, (long long)c->size, (unsigned long long)bytes);
    return why;
  }
  return NULL;
sized:
  if (c->size >= 0) {
    snprintf(why, wn, "column '%s' (%s) has a fixed size, but its values carry their %s",
             c->name, e, c->type ? "shape" : "dtype");
    return why;
  }
  return NULL;
}

static const char *parse_columns(const struct stk__jnode *s, struct mds_shard *m, char *why,
                                 size_t wn) {
  const struct stk__jnode *names = stk__json_get(s, "column_names"),
                          *encs = stk__json_get(s, "column_encodings"),
                          *sizes = stk__json_get(s, "column_sizes");
  if (!names || names->type != STK_JARR || !encs || encs->type != STK_JARR || !sizes ||
      sizes->type != STK_JARR || names->len != encs->len || names->len != sizes->len)
    return "column_names, column_encodings and column_sizes must be arrays of equal length";
  if (names->len == 0 || names->len > STK_MAX_FIELDS) return "bad number of columns";
  m->ncols = (int)names->len;
  m->label_col = -1;
  const struct stk__jnode *n = names->child, *e = encs->child, *z = sizes->child;
  for (int i = 0; i < m->ncols; i++, n = n->next, e = e->next, z = z->next) {
    struct mds_col *c = &m->cols[i];
    if (n->type != STK_JSTR || e->type != STK_JSTR) return "column name or encoding not a string";
    if (e->len >= sizeof c->enc) return "column encoding too long";
    snprintf(c->name, sizeof c->name, "%s", n->str);
    snprintf(c->enc, sizeof c->enc, "%s", e->str);
    if (z->type == STK_JNULL) c->size = -1;
    else if (z->type == STK_JNUM && z->is_int && z->i >= 0 && z->i < (1ll << 32)) c->size = z->i;
    else return "bad column size";
    const char *bad = parse_encoding(c, why, wn);
    if (bad) return bad;
    if (m->label_col < 0 && (m->label_kind = label_kind(c)) != 0) m->label_col = i;
  }
  return NULL;
}

/* A shard's basename must stay inside the dataset directory. */
static int safe_name(const char *b) {
  return b && *b && b[0] != '/' && !strstr(b, "..");
}

/* ---- compressed shards -------------------------------------------------- */

#define ZSTD_CHUNK (1u << 20)

/* Whether index.json's compression is zstd ("zstd" or "zstd:LEVEL"). */
static int is_zstd(const char *c) {
  if (strncmp(c, "zstd", 4)) return 0;
  if (!c[4]) return 1;
  return c[4] == ':' && c[5] && strspn(c + 5, "0123456789") == strlen(c + 5);
}

/* Decompress the zstd file zpath (zbytes long, if index.json says) into
 * out, which must then hold exactly raw bytes. Streamed in 1 MiB pieces,
 * so memory stays bounded whatever the shard's size. */
static int unzstd(const char *zpath, uint64_t zbytes, int out, uint64_t raw, char *err) {
  int in = open(zpath, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return stk__errf(err, STK_ENOENT, "%s: cannot open the compressed shard: %s", zpath,
                     strerror(errno));
  uint64_t size = 0, off = 0, done = 0;
  int rc = stk__fd_size(in, &size);
  if (rc) stk__errf(err, rc, "%s: cannot stat: %s", zpath, stk_strerror(rc));
  else if (zbytes != UINT64_MAX && zbytes != size)
    rc = stk__errf(err, size < zbytes ? STK_ETRUNC : STK_EFORMAT,
                   "%s: %llu bytes but index.json's zip_data says %llu", zpath,
                   (unsigned long long)size, (unsigned long long)zbytes);
  ZSTD_DCtx *z = rc ? NULL : ZSTD_createDCtx();
  uint8_t *ib = rc ? NULL : malloc(ZSTD_CHUNK), *ob = rc ? NULL : malloc(ZSTD_CHUNK);
  if (!rc && (!z || !ib || !ob)) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  size_t left = 1; /* ZSTD_decompressStream's hint: 0 when a frame has just ended */
  while (!rc && off < size) {
    size_t n = (size_t)STK__MIN(size - off, (uint64_t)ZSTD_CHUNK);
    if ((rc = stk__pread_full(in, ib, n, off)) != 0) {
      stk__errf(err, rc, "%s: offset %llu: cannot read: %s", zpath, (unsigned long long)off,
                stk_strerror(rc));
      break;
    }
    ZSTD_inBuffer zi = {ib, n, 0};
    while (!rc && zi.pos < zi.size) {
      ZSTD_outBuffer zo = {ob, ZSTD_CHUNK, 0};
      left = ZSTD_decompressStream(z, &zo, &zi);
      if (ZSTD_isError(left))
        rc = stk__errf(err, STK_EFORMAT, "%s: offset %llu: corrupt zstd data: %s", zpath,
                       (unsigned long long)(off + zi.pos), ZSTD_getErrorName(left));
      else if (zo.pos > raw - done)
        rc = stk__errf(err, STK_EFORMAT,
                       "%s: decompresses to more than the %llu bytes index.json's raw_data says",
                       zpath, (unsigned long long)raw);
      else if ((rc = stk__write_full(out, ob, zo.pos)) != 0)
        stk__errf(err, rc, "cannot write the decompressed %s: %s", zpath, stk_strerror(rc));
      done += zo.pos;
    }
    off += n;
  }
  /* The frame may still hold buffered output once the input is consumed. */
  while (!rc && left != 0 && size) {
    ZSTD_inBuffer zi = {ib, 0, 0};
    ZSTD_outBuffer zo = {ob, ZSTD_CHUNK, 0};
    left = ZSTD_decompressStream(z, &zo, &zi);
    if (ZSTD_isError(left))
      rc = stk__errf(err, STK_EFORMAT, "%s: offset %llu: corrupt zstd data: %s", zpath,
                     (unsigned long long)size, ZSTD_getErrorName(left));
    else if (zo.pos == 0)
      rc = stk__errf(err, STK_ETRUNC, "%s: offset %llu: truncated zstd frame (the file ends "
                     "inside it)", zpath, (unsigned long long)size);
    else if (zo.pos > raw - done)
      rc = stk__errf(err, STK_EFORMAT,
                     "%s: decompresses to more than the %llu bytes index.json's raw_data says",
                     zpath, (unsigned long long)raw);
    else if ((rc = stk__write_full(out, ob, zo.pos)) != 0)
      stk__errf(err, rc, "cannot write the decompressed %s: %s", zpath, stk_strerror(rc));
    else
      done += zo.pos;
  }
  if (!rc && !size)
    rc = stk__errf(err, STK_ETRUNC, "%s: offset 0: empty file, no zstd frame", zpath);
  if (!rc && done != raw)
    rc = stk__errf(err, STK_EFORMAT, "%s: decompresses to %llu bytes but index.json's raw_data "
                   "says %llu", zpath, (unsigned long long)done, (unsigned long long)raw);
  ZSTD_freeDCtx(z);
  free(ib);
  free(ob);
  close(in);
  return rc;
}

/* The raw shard of a compressed one: reused when it already lies beside
 * the compressed file with the size index.json gives, else decompressed
 * there through a temporary name (so concurrent openers never see half a
 * shard), else into an unlinked temporary file this process keeps open. */
static int unzip_shard(struct stk_dataset *ds, const char *dir, const char *base,
                       const char *zbase, uint64_t zbytes, uint64_t raw, char **path) {
  struct mds_state *st = stk__ds_state(ds);
  size_t n = strlen(dir) + strlen(base) + strlen(zbase) + 64;
  char *rp = malloc(n), *zp = malloc(n), *tp = malloc(n);
  int rc = rp && zp && tp ? 0 : stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
  if (rc) goto out;
  snprintf(rp, n, "%s/%s", dir, base);
  snprintf(zp, n, "%s/%s", dir, zbase);
  struct stat sb;
  if (stat(rp, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == raw) {
    *path = rp, rp = NULL;
    goto out;
  }
  snprintf(tp, n, "%s/.%s.stoker-XXXXXX", dir, base);
  int fd = mkostemp(tp, O_CLOEXEC), kept = 0;
  if (fd < 0) { /* a read-only folder: a file of this process's own */
    const char *tmp = getenv("TMPDIR");
    fd = open(tmp && *tmp ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      rc = stk__errf(stk__ds_err(ds), stk__from_errno(errno),
                     "%s: cannot write the decompressed shard "
                     "beside it nor in a temporary file: %s",
                     zp, strerror(errno));
      goto out;
    }
    kept = 1;
  }
  rc = unzstd(zp, zbytes, fd, raw, stk__ds_err(ds));
  if (!rc && kept) {
    int *f = realloc(st->fds, (st->nfds + 1) * sizeof *f);
    if (!f)
      rc = stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
    else {
      st->fds = f;
      st->fds[st->nfds++] = fd;
      snprintf(tp, n, "/proc/self/fd/%d", fd);
      *path = tp, tp = NULL;
      goto out;
    }
  }
  if (!rc && rename(tp, rp) != 0)
    rc = stk__errf(stk__ds_err(ds), stk__from_errno(errno),
                   "%s: cannot rename the decompressed shard: %s", rp, strerror(errno));
  if (!kept && rc) unlink(tp);
  close(fd);
  if (!rc) *path = rp, rp = NULL;
out:
  free(rp);
  free(zp);
  free(tp);
  return rc;
}

/* Shard i of index.json (s) as DIR/NAME; local: dir is a folder here, where
 * a compressed shard can be decompressed (else its index came as bytes
 * from elsewhere, and compressed shards are refused). */
static int add_shard(struct stk_dataset *ds, const char *dir, const struct stk__jnode *s, size_t i,
                     int local) {
  struct mds_state *st = stk__ds_state(ds);
  const struct stk__jnode *raw = stk__json_get(s, "raw_data"), *zip = stk__json_get(s, "zip_data");
  const char *base = stk__json_str(raw, "basename"), *fmt = stk__json_str(s, "format");
  const struct stk__jnode *comp = stk__json_get(s, "compression");
  const char *zbase = stk__json_str(zip, "basename");
  int zipped = comp && comp->type == STK_JSTR && comp->len;
  if (zipped && !is_zstd(comp->str))
    return stk__errf(stk__ds_err(ds), STK_ENOTSUP,
                     "%s/%s: MDS compression '%s' is not supported (only zstd, or uncompressed)",
                     dir,
                     zbase  ? zbase
                     : base ? base
                            : "?",
                     comp->str);
  if (zipped && !safe_name(zbase))
    return stk__errf(stk__ds_err(ds), STK_EFORMAT,
                     "%s/index.json: compressed shard %zu has no valid "
                     "zip_data.basename",
                     dir, i);
  if (zipped && (!local || (stk__ds_root(ds) && strstr(stk__ds_root(ds), "://"))))
    return stk__errf(stk__ds_err(ds), STK_ENOTSUP,
                     "%s: compressed MDS shards are read from local "
                     "folders only for now (shard %zu, %s)",
                     stk__ds_root(ds), i, zbase);
  if (!safe_name(base))
    return stk__errf(stk__ds_err(ds), STK_EFORMAT,
                     "%s/index.json: shard %zu has no valid raw_data.basename", dir, i);
  if (fmt && strcmp(fmt, "mds"))
    return stk__errf(stk__ds_err(ds), STK_ENOTSUP,
                     "%s/%s: shard format '%s' is not supported (only mds)", dir, base, fmt);
  if (st->cap == stk__ds_nshards(ds)) {
    size_t nc = st->cap ? st->cap * 2 : 16;
    struct mds_shard *p = realloc(st->sh, nc * sizeof *p);
    if (!p) return stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
    st->sh = p;
    st->cap = nc;
  }
  struct mds_shard *m = &st->sh[stk__ds_nshards(ds)];
  memset(m, 0, sizeof *m);
  char wbuf[160];
  const char *why = parse_columns(s, m, wbuf, sizeof wbuf);
  if (!why && stk__json_u64(s, "samples", &m->samples)) why = "missing sample count";
  if (why)
    return stk__errf(stk__ds_err(ds), STK_EFORMAT, "%s/index.json: shard %zu (%s): %s", dir, i,
                     base, why);
  if (stk__json_u64(raw, "bytes", &m->bytes)) m->bytes = UINT64_MAX;
  char *p = NULL;
  if (zipped) {
    uint64_t zb;
    if (m->bytes == UINT64_MAX || m->bytes > MDS_MAX_LIMIT * 2)
      return stk__errf(stk__ds_err(ds), STK_EFORMAT,
                       "%s/index.json: compressed shard %zu (%s) lacks a "
                       "raw_data.bytes under 4 GiB",
                       dir, i, zbase);
    if (stk__json_u64(zip, "bytes", &zb)) zb = UINT64_MAX;
    int rc = unzip_shard(ds, dir, base, zbase, zb, m->bytes, &p);
    if (rc) return rc;
    st->zipped++;
  } else {
    size_t n = strlen(dir) + strlen(base) + 2;
    if ((p = malloc(n)) != NULL) snprintf(p, n, "%s/%s", dir, base);
  }
  if (!p) return stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
  int rc = stk__dataset_add_shard(ds, p, -1);
  if (!rc) { /* both checked again by mds_index */
    struct stk_shard *last = stk__ds_shard(ds, stk__ds_nshards(ds) - 1);
    last->count = m->samples;
    last->file_bytes = m->bytes;
  }
  free(p);
  return rc ? stk__errf(stk__ds_err(ds), rc, "out of memory") : 0;
}

/* The shards index.json's text names, as DIR/NAME (local: see add_shard). */
static int list_text(struct stk_dataset *ds, const char *dir, const char *text, size_t len,
                     int local) {
  char *ipath = malloc(strlen(dir) + 12);
  if (!ipath) return stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
  sprintf(ipath, "%s/index.json", dir);
  struct stk__jdoc *doc = NULL;
  char jerr[STK_ERRMSG_MAX];
  int rc = stk__json_parse(&doc, text, len, jerr);
  if (rc) stk__errf(stk__ds_err(ds), rc, "%s: %s", ipath, jerr);
  if (!rc) {
    struct mds_state *st = calloc(1, sizeof *st);
    if (!st || stk__ds_state_set(ds, st) != st) { /* a dataset's list runs once */
      free(st);
      rc = STK_ENOMEM;
    }
  }
  const struct stk__jnode *shards = doc ? stk__json_get(stk__json_root(doc), "shards") : NULL;
  if (!rc && (!shards || shards->type != STK_JARR))
    rc = stk__errf(stk__ds_err(ds), STK_EFORMAT, "%s: no \"shards\" array", ipath);
  size_t i = 0;
  for (const struct stk__jnode *s = shards ? shards->child : NULL; !rc && s; s = s->next, i++)
    rc = add_shard(ds, dir, s, i, local);
  if (rc == STK_ENOMEM) stk__errf(stk__ds_err(ds), rc, "out of memory reading %s", ipath);
  stk__json_free(doc);
  free(ipath);
  return rc;
}

/* The list_index hook: index.json's bytes fetched from elsewhere (a URL,
 * or a folder read through the cache). */
static int mds_list_index(struct stk_dataset *ds, const char *dir, const char *text, size_t len) {
  return list_text(ds, dir, text, len, 0);
}

static int mds_list(struct stk_dataset *ds, const char *root) {
  size_t rl = strlen(root);
  char *dir = strdup(root);
  if (!dir) return stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
  if (rl >= 10 && !strcmp(root + rl - 10, "index.json")) {
    dir[rl - 10] = 0;
    if (rl > 10) dir[rl - 11] = 0; /* the slash */
    if (!*dir) strcpy(dir, ".");
  }
  char *ipath = malloc(strlen(dir) + 12), *text = NULL;
  int rc = ipath ? 0 : stk__errf(stk__ds_err(ds), STK_ENOMEM, "out of memory");
  size_t len = 0;
  if (!rc) sprintf(ipath, "%s/index.json", dir);
  if (!rc && !(text = read_small(ipath, &len, stk__ds_err(ds)))) rc = STK_EIO;
  if (!rc) rc = list_text(ds, dir, text, len, 1);
  free(text);
  free(ipath);
  free(dir);
  return rc;
}

/* ---- shards ------------------------------------------------------------ */

static struct mds_shard *shard_cols(const struct stk_dataset *ds, const struct stk_shard *sh) {
  return &((struct mds_state *)stk__ds_state(ds))->sh[stk__ds_shard_no(ds, sh)];
}

static int mds_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                     char *err) {
  struct mds_shard *m = shard_cols(ds, sh);
  uint64_t size = sb->size;
  uint8_t h[4];
  int rc;
  if (m->bytes != UINT64_MAX && m->bytes != size)
    return stk__errf(err, size < m->bytes ? STK_ETRUNC : STK_EFORMAT,
                     "%s: %llu bytes but index.json says %llu", sh->path,
                     (unsigned long long)size, (unsigned long long)m->bytes);
  if ((rc = stk__bytes_read(sb, h, 4, 0)) != 0)
    return stk__errf(err, rc, "%s: offset 0: cannot read the sample count", sh->path);
  uint64_t n = stk__ld32(h), hdr = 4 + 4 * (n + 1);
  if (n != m->samples)
    return stk__errf(err, STK_EFORMAT, "%s: offset 0: %llu samples but index.json says %llu",
                     sh->path, (unsigned long long)n, (unsigned long long)m->samples);
  if (hdr > size)
    return stk__errf(err, STK_ETRUNC, "%s: offset 4: offset table runs past the end", sh->path);
  uint8_t *t = malloc((size_t)hdr - 4);
  struct stk_index_entry *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
  if (!t || !idx) rc = stk__errf(err, STK_ENOMEM, "out of memory");
  else if ((rc = stk__bytes_read(sb, t, (size_t)hdr - 4, 4)) != 0)
    stk__errf(err, rc, "%s: offset 4: cannot read the offset table", sh->path);
  for (uint64_t i = 0; !rc && i < n; i++) {
    uint64_t a = stk__ld32(t + 4 * i), b = stk__ld32(t + 4 * i + 4);
    if (a < hdr || b < a || b > size)
      rc = stk__errf(err, b > size ? STK_ETRUNC : STK_EFORMAT,
                     "%s: offset %llu: bad offset of sample %llu (%llu..%llu in a %llu-byte file)",
                     sh->path, (unsigned long long)(4 + 4 * i), (unsigned long long)i,
                     (unsigned long long)a, (unsigned long long)b, (unsigned long long)size);
    else
      idx[i] = (struct stk_index_entry){a, b - a};
  }
  free(t);
  if (rc) {
    free(idx);
    return rc;
  }
  sh->idx = idx;
  sh->count = n;
  return 0;
}

/* The number of the sample whose bytes start at off, for messages. */
static uint64_t sample_at(const struct stk_shard *sh, uint64_t off) {
  uint64_t lo = 0, hi = sh->idx ? sh->count : 0;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (sh->idx[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* NumPy's dtype codes in streaming's NDArray encoding. */
static int nd_type(unsigned code) {
  switch (code) {
  case 8: return STK_ELEM_U8;
  case 9: return STK_ELEM_I8;
  case 16: return STK_ELEM_U16;
  case 17: return STK_ELEM_I16;
  case 18: return STK_ELEM_F16;
  case 32: return STK_ELEM_U32;
  case 33: return STK_ELEM_I32;
  case 34: return STK_ELEM_F32;
  case 64: return STK_ELEM_U64;
  case 65: return STK_ELEM_I64;
  case 66: return STK_ELEM_F64;
  default: return STK_ELEM_NONE;
  }
}

/* Type field f of column c from its n stored bytes at p: the dtype and
 * shape from the column or the value's header, and the values, whose size
 * must be what the shape says. NULL, or why not (into why). */
static const char *typed(const struct mds_col *c, const uint8_t *p, uint64_t n,
                         struct stk_field *f, char *why, size_t wn) {
  if (c->kind == COL_SCALAR) {
    f->type = c->type;
    f->elem = stk_elem_type_size(c->type);
    return NULL;
  }
  uint64_t pos = 0;
  int t = c->type;
  if (!t) {
    if (n < 1) return "no dtype byte";
    if (!(t = nd_type(p[0]))) {
      snprintf(why, wn, "unknown ndarray dtype code %u", p[0]);
      return why;
    }
    pos = 1;
  }
  uint64_t isz = stk_elem_type_size(t), count = 1;
  f->ndim = c->ndim;
  memcpy(f->shape, c->shape, sizeof f->shape);
  if (!c->ndim) {
    if (n - pos < 1) return "no shape byte";
    unsigned b = p[pos++], nd = b >> 2, sz = 1u << (b & 3);
    if (nd == 0 || nd > STK_FIELD_MAX_DIMS) {
      snprintf(why, wn, "ndarray of %u dimensions (stoker reads 1 to %d)", nd, STK_FIELD_MAX_DIMS);
      return why;
    }
    if (n - pos < (uint64_t)nd * sz) {
      snprintf(why, wn, "ndarray shape of %u dimensions runs past the value's %llu bytes", nd,
               (unsigned long long)n);
      return why;
    }
    for (unsigned k = 0; k < nd; k++, pos += sz) {
      uint64_t v = 0;
      for (unsigned j = 0; j < sz; j++) v |= (uint64_t)p[pos + j] << (8 * j);
      f->shape[k] = v;
    }
    f->ndim = (uint8_t)nd;
  }
  int over = 0;
  for (int k = 0; k < f->ndim; k++) {
    uint64_t v = f->shape[k];
    if (v && count > UINT64_MAX / v) over = 1;
    count *= v;
  }
  if (over || count > UINT64_MAX / isz || count * isz != n - pos) {
    char dims[96] = "";
    for (int k = 0; k < f->ndim; k++) {
      size_t dl = strlen(dims);
      snprintf(dims + dl, sizeof dims - dl, k ? ",%llu" : "%llu", (unsigned long long)f->shape[k]);
    }
    char need[32] = "over 2^64";
    if (!over && count <= UINT64_MAX / isz)
      snprintf(need, sizeof need, "%llu", (unsigned long long)(count * isz));
    snprintf(why, wn, "ndarray %s[%.96s] needs %s bytes but the value holds %llu",
             stk_elem_type_name(t), dims, need, (unsigned long long)(n - pos));
    return why;
  }
  f->data = p + pos;
  f->len = f->raw_len = n - pos;
  f->type = (uint8_t)t;
  f->elem = (uint32_t)isz;
  return NULL;
}

static int mds_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                     const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                     struct stk_sample *out, char *err) {
  (void)k;
  (void)verify;
  stk__sample_reset(out, sh);
  const struct mds_shard *m = shard_cols(ds, sh);
  uint64_t size[STK_MAX_FIELDS], pos = 0;
  for (int i = 0; i < m->ncols; i++) {
    if (m->cols[i].size >= 0) {
      size[i] = (uint64_t)m->cols[i].size;
      continue;
    }
    if (len - pos < 4)
      return stk__errf(err, STK_ETRUNC, "%s: offset %llu: sample too short for its size table",
                       sh->path, (unsigned long long)off);
    size[i] = stk__ld32(buf + pos);
    pos += 4;
  }
  for (int i = 0; i < m->ncols; i++) {
    if (size[i] > len - pos)
      return stk__errf(err, STK_ETRUNC, "%s: offset %llu: column '%s' (%llu bytes) runs past the "
                       "sample's %llu bytes", sh->path, (unsigned long long)off, m->cols[i].name,
                       (unsigned long long)size[i], (unsigned long long)len);
    stk__sample_add(out, m->cols[i].name, strlen(m->cols[i].name), buf + pos, size[i]);
    char why[256];
    const char *bad = m->cols[i].kind ? typed(&m->cols[i], buf + pos, size[i],
                                              &out->fields[out->nfields - 1], why, sizeof why)
                                      : NULL;
    if (bad)
      return stk__errf(err, STK_EFORMAT, "%s: sample %llu (offset %llu): column '%s': %s",
                       sh->path, (unsigned long long)sample_at(sh, off), (unsigned long long)off,
                       m->cols[i].name, bad);
    if (i == m->label_col && m->label_kind == 1) {
      uint64_t v = 0;
      for (uint64_t b = 0; b < size[i]; b++) v |= (uint64_t)buf[pos + b] << (8 * b);
      if (v <= INT32_MAX) out->label = (int32_t)v;
    } else if (i == m->label_col) {
      int32_t l = stk__parse_label(buf + pos, size[i]);
      if (l >= 0) out->label = l;
    }
    pos += size[i];
  }
  if (pos != len)
    return stk__errf(err, STK_EFORMAT, "%s: offset %llu: %llu stray bytes after the columns",
                     sh->path, (unsigned long long)off, (unsigned long long)(len - pos));
  return 0;
}

/* inspect's figures: each column of the first shard with its encoding
 * (and fixed size), and how many shards were decompressed. */
static int mds_property(const struct stk_dataset *ds, int i, const char **name, char *buf,
                        size_t n) {
  struct mds_state *st = stk__ds_state(ds);
  if (!st || !stk__ds_nshards(ds)) return STK_ENOENT;
  const struct mds_shard *m = &st->sh[0];
  if (i < m->ncols) {
    const struct mds_col *c = &m->cols[i];
    snprintf(st->pname[i], sizeof st->pname[i], "column %s", c->name);
    *name = st->pname[i];
    if (c->size >= 0) snprintf(buf, n, "%s, %lld bytes", c->enc, (long long)c->size);
    else snprintf(buf, n, "%s", c->enc);
    return 0;
  }
  if (i == m->ncols && st->zipped) {
    *name = "compressed";
    snprintf(buf, n, "%zu of %zu shards (zstd)", st->zipped, stk__ds_nshards(ds));
    return 0;
  }
  return STK_ENOENT;
}

const struct stk_format_ops stk__fmt_mds = {
    .name = "mds",
    .desc = "Mosaic Data Shard directories (index.json + shard.NNNNN.mds, zstd or uncompressed)",
    .exts = ".mds",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_WRITE,
    .dir_index = "index.json",
    .list = mds_list,
    .list_index = mds_list_index,
    .free_state = mds_free_state,
    .index = mds_index,
    .parse = mds_parse,
    .property = mds_property,
    .wr_shard_begin = stk__mds_wr_begin,
    .wr_sample = stk__mds_wr_sample,
    .wr_shard_end = stk__mds_wr_end,
    .wr_finish = stk__mds_wr_finish,
};
