/* NumPy .npy token files: a folder of .npy files, each one document, a 1-D
 * little-endian C-order integer array of its tokens (what
 * `np.save(f"doc-{i:08d}.npy", ids)` writes). A sample is one document:
 * field "tokens", typed (enum stk_elem_type, ndim 1, shape[0] the token
 * count), pointing at the array data alone; its index range in the file is
 * that data, so a read never fetches the header again.
 *
 * The files are also what the `npy` format reads (one sample per file, the
 * whole .npy image as field "npy"), and `stoker gen --format npy` writes
 * 1-D uint8 arrays, so no test of a file's bytes can tell a token corpus
 * from an npy dataset: this format is chosen by name only (--format
 * npy-tokens, stk_dataset_opts.format), and detection keeps reading .npy
 * folders as `npy`: this format declares the same extension and magic as
 * npy but comes after it in the format table, so lookups by extension and
 * by magic bytes always find npy first.
 *
 * What is refused, at open (index) time, naming the file and the offset of
 * the header dictionary: a dtype that is not an integer (int8 ... uint64),
 * a big-endian one, Fortran order, any number of dimensions but one, data
 * shorter than the shape says, and files of the folder that disagree on
 * the dtype. Header parsing is npy.c's (stk__npy_info). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_impl.h"

#define NT_PEEK 4096
#define NT_MAX_HEADER ((1u << 20) + 12)

/* Per dataset: the token type every file must share (0 until the first
 * file is indexed) and which file set it. */
struct nt_state {
  int type;
  size_t from;
};

static void nt_free_state(struct stk_dataset *ds) { free(stk__ds_state(ds)); }

/* The state, made once even when files are indexed in parallel. */
static struct nt_state *nt_state(struct stk_dataset *ds) {
  struct nt_state *st = stk__ds_state(ds);
  if (st) return st;
  struct nt_state *mine = calloc(1, sizeof *mine);
  if (!mine) return NULL;
  st = stk__ds_state_set(ds, mine);
  if (st != mine) free(mine);
  return st;
}

/* The descr for messages: printable characters only. */
static void shown_descr(const char *d, char *out, size_t n) {
  size_t k = 0;
  for (; d[k] && k + 1 < n; k++) out[k] = d[k] >= 0x20 && d[k] < 0x7f ? d[k] : '?';
  out[k] = 0;
}

/* The enum stk_elem_type of an integer descr ("<i4", "|u1"), or why not
 * (a sentence fragment into why). */
static int token_type(const struct stk__npy_info *h, char *why, size_t wn) {
  char d[sizeof h->descr];
  shown_descr(h->descr, d, sizeof d);
  size_t at = d[0] && strchr("<>|=", d[0]) ? 1 : 0;
  char kind = d[at];
  unsigned bits = (unsigned)h->itemsize * 8;
  char name[16];
  snprintf(name, sizeof name, "%sint%u", kind == 'u' ? "u" : "", bits);
  int t = (kind == 'i' || kind == 'u') && h->itemsize && h->itemsize <= 8
              ? stk__elem_type_by_name(name, strlen(name))
              : STK_ELEM_NONE;
  if (!t) {
    snprintf(why, wn,
             "dtype '%s' is not an integer type (npy token files hold int8 to uint64 tokens)",
             d[0] ? d : "structured");
    return 0;
  }
  if (d[0] == '>' && h->itemsize > 1) {
    snprintf(why, wn,
             "dtype '%s' is big-endian (npy token files are little-endian: save "
             "arr.astype('<%c%u'))",
             d, kind, (unsigned)h->itemsize);
    return 0;
  }
  if (h->fortran) {
    snprintf(why, wn, "Fortran order (npy token files are C-order 1-D arrays)");
    return 0;
  }
  if (h->ndim != 1) {
    snprintf(why, wn, "%d dimensions (an npy token file is one 1-D array of a document's tokens)",
             h->ndim);
    return 0;
  }
  return t;
}

/* Check the header and record the array data as the file's one sample. */
static int nt_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                    char *err) {
  struct nt_state *st = nt_state(ds);
  if (!st) return stk__errf(err, STK_ENOMEM, "out of memory");
  uint64_t size = sb->size;
  int rc;
  uint8_t peek[NT_PEEK], *big = NULL;
  size_t n = (size_t)STK__MIN(size, (uint64_t)sizeof peek);
  if ((rc = stk__bytes_read(sb, peek, n, 0)) != 0)
    return stk__errf(err, rc, "%s: offset 0: read failed: %s", sh->path, stk_strerror(rc));
  const uint8_t *p = peek;
  /* A header longer than the peek (v2/v3 allow up to 1 MiB here): read it
   * whole, as far as the file goes. */
  if (n >= 12 && !memcmp(peek, "\x93NUMPY", 6)) {
    uint64_t hl = peek[6] == 1 ? 10 + (uint64_t)stk__ld16(peek + 8) : 12 + stk__ld32(peek + 8);
    if (hl > n && hl <= NT_MAX_HEADER && hl <= size) {
      if (!(big = malloc((size_t)hl))) return stk__errf(err, STK_ENOMEM, "out of memory");
      if ((rc = stk__bytes_read(sb, big, (size_t)hl, 0)) != 0) {
        free(big);
        return stk__errf(err, rc, "%s: offset 0: read failed: %s", sh->path, stk_strerror(rc));
      }
      p = big;
      n = (size_t)hl;
    }
  }
  struct stk__npy_info h;
  const char *why = "";
  rc = stk__npy_info(p, n, 0, &h, &why);
  unsigned dict_off = n > 6 && p[6] == 1 ? 10 : 12;
  free(big);
  if (rc) return stk__errf(err, rc, "%s: offset 0: %s", sh->path, why);
  char bad[192];
  int t = token_type(&h, bad, sizeof bad);
  if (!t) return stk__errf(err, STK_EFORMAT, "%s: offset %u: %s", sh->path, dict_off, bad);
  uint64_t bytes = h.count * h.itemsize; /* no overflow: stk__npy_info checked it */
  if (h.data_off > size || bytes > size - h.data_off)
    return stk__errf(err, STK_ETRUNC,
                     "%s: offset %llu: %llu tokens of %s need %llu bytes, but the file holds %llu "
                     "after its header",
                     sh->path, (unsigned long long)h.data_off, (unsigned long long)h.count,
                     stk_elem_type_name(t), (unsigned long long)bytes,
                     (unsigned long long)(size - STK__MIN(size, h.data_off)));
  if (size - h.data_off > bytes)
    stk_log(STK_LOG_WARN, "%s: %llu bytes after the array data are not read", sh->path,
            (unsigned long long)(size - h.data_off - bytes));
  /* Every file holds the same dtype: a folder mixing them has no one
   * meaning for a token's bytes (and no one Megatron dtype to pack into). */
  int want = 0;
  if (!__atomic_compare_exchange_n(&st->type, &want, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      want != t)
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset %u: dtype %s, but another file of the dataset holds %s tokens; "
                     "open them as separate datasets",
                     sh->path, dict_off, stk_elem_type_name(t), stk_elem_type_name(want));
  if (!(sh->idx = malloc(sizeof *sh->idx))) return stk__errf(err, STK_ENOMEM, "out of memory");
  sh->idx[0].off = h.data_off;
  sh->idx[0].len = bytes;
  sh->count = 1;
  return 0;
}

static int nt_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                    const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                    struct stk_sample *out, char *err) {
  (void)k;
  (void)verify;
  stk__sample_reset(out, sh);
  const struct nt_state *st = stk__ds_state(ds);
  int t = st ? __atomic_load_n(&st->type, __ATOMIC_ACQUIRE) : 0;
  unsigned size = stk_elem_type_size(t);
  if (!size)
    return stk__errf(err, STK_EINVAL, "%s: offset %llu: read before the file was indexed", sh->path,
                     (unsigned long long)off);
  if (len % size)
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset %llu: %llu bytes is not a whole number of %s tokens", sh->path,
                     (unsigned long long)off, (unsigned long long)len, stk_elem_type_name(t));
  const char *b = strrchr(sh->path, '/') ? strrchr(sh->path, '/') + 1 : sh->path;
  size_t bl = strlen(b);
  stk__sample_key(out, b, bl > 4 && !strcmp(b + bl - 4, ".npy") ? bl - 4 : bl);
  stk__sample_add(out, "tokens", 6, buf, len);
  struct stk_field *f = &out->fields[0];
  f->type = (uint8_t)t;
  f->elem = size;
  f->ndim = 1;
  f->shape[0] = len / size;
  return 0;
}

/* inspect's figures, named as Megatron's are: the dtype, its size, and
 * tokens and documents over the files indexed so far. */
static int nt_property(const struct stk_dataset *ds, int i, const char **name, char *buf,
                       size_t n) {
  const struct nt_state *st = stk__ds_state(ds);
  int t = st ? __atomic_load_n(&st->type, __ATOMIC_ACQUIRE) : 0;
  if (!t) return STK_ENOENT;
  uint64_t tok = 0, docs = 0;
  for (size_t k = 0; k < stk__ds_nshards(ds) && i >= 2; k++) {
    const struct stk_shard *sh = stk__ds_shard(ds, k);
    if (!stk__ds_shard_ready(ds, sh) || !sh->idx) continue;
    tok += sh->idx[0].len / stk_elem_type_size(t);
    docs++;
  }
  switch (i) {
    case 0:
      *name = "dtype";
      snprintf(buf, n, "%s", stk_elem_type_name(t));
      return 0;
    case 1:
      *name = "token_bytes";
      snprintf(buf, n, "%u", stk_elem_type_size(t));
      return 0;
    case 2:
      *name = "tokens";
      snprintf(buf, n, "%llu", (unsigned long long)tok);
      return 0;
    case 3:
      *name = "documents";
      snprintf(buf, n, "%llu", (unsigned long long)docs);
      return 0;
    default:
      return STK_ENOENT;
  }
}

/* ---- writing ------------------------------------------------------------- */

/* The writer's state: the token type of the first document, which every
 * other must share. */
struct nt_wstate {
  int type;
};

static void nt_wfree(struct stk_writer *w) {
  free(w->state);
  w->state = NULL;
}

/* One document per file: the sample's token field (stk__token_field) as a
 * 1-D array of its own dtype; an untyped field (bytes) as uint8 tokens. */
static int nt_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  if (!w->state) {
    if (!(w->state = calloc(1, sizeof(struct nt_wstate))))
      return stk__errf(w->err, STK_ENOMEM, "out of memory");
    w->free_state = nt_wfree;
  }
  struct nt_wstate *st = w->state;
  const struct stk_field *f = stk__token_field(s);
  if (!f || f->encoding != STK_ENC_NONE)
    return stk__errf(w->err, STK_EINVAL, "sample %llu has no plain data field to write as tokens",
                     (unsigned long long)w->samples);
  int t = f->type ? f->type : STK_ELEM_U8;
  const char *tn = stk_elem_type_name(t);
  if (t == STK_ELEM_F16 || t == STK_ELEM_F32 || t == STK_ELEM_F64)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' holds %s values; npy token files hold integer "
                     "tokens (convert with --dtype)",
                     (unsigned long long)w->samples, f->name, tn);
  if (f->type && f->ndim != 1)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' is a %u-dimensional %s array; an npy token file is "
                     "one 1-D document",
                     (unsigned long long)w->samples, f->name, (unsigned)f->ndim, tn);
  if (!st->type)
    st->type = t;
  else if (st->type != t)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' holds %s tokens, but the documents before it hold %s "
                     "(a folder of npy token files has one dtype)",
                     (unsigned long long)w->samples, f->name, tn, stk_elem_type_name(st->type));
  unsigned size = stk_elem_type_size(t);
  if (f->len % size)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: %llu bytes is not a whole number of %s tokens",
                     (unsigned long long)w->samples, (unsigned long long)f->len, tn);
  uint64_t count = f->len / size;
  uint8_t h[256];
  size_t hl = stk__npy_header(h, sizeof h, stk__npy_descr(t), &count, 1);
  int rc = hl ? stk__wr_write(w, h, hl) : stk__errf(w->err, STK_EINVAL, "header too long");
  return rc ? rc : stk__wr_write_ref(w, f->data, (size_t)f->len);
}

const struct stk_format_ops stk__fmt_npy_tokens = {
    .name = "npy-tokens",
    .desc =
        "NumPy .npy token files: 1-D little-endian integer arrays, one document per file "
        "(field \"tokens\"); by name only, detection reads .npy folders as npy",
    .exts = ".npy",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_WRITE | STK_FMT_WRITE_PER_FILE,
    .magic = "\x93NUMPY", /* npy's, which is found first */
    .magic_len = 6,
    .index = nt_index,
    .parse = nt_parse,
    .property = nt_property,
    .free_state = nt_free_state,
    .wr_sample = nt_wr_sample,
};
