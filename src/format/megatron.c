/* Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py):
 * a pair PREFIX.bin (the tokens of every sequence, back to back) and
 * PREFIX.idx (header, then the sequences' lengths and byte offsets and the
 * document boundaries). A pair is one shard whose file is the .bin; its
 * .idx is mapped beside it for the dataset's lifetime and checked entry by
 * entry before a sample is read. A sample is one sequence: field "tokens",
 * the raw little-endian tokens (elem = the token size). Token windows
 * across documents are a sampler's business, not this file's. The byte
 * layout and what is checked: docs/formats.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format_impl.h"

#define MG_MAGIC "MMIDIDX\x00\x00"
#define MG_MAGIC_LEN 9
#define MG_HDR 34 /* magic 9, version 8, dtype 1, sequences 8, document indices 8 */

/* Megatron's DType enum (checked against its source): code -> numpy name. */
static const struct stk__megatron_dtype mg_dtypes[] = {
    {1, 1, 0, 0, "uint8"},  {2, 1, 1, 0, "int8"},    {3, 2, 1, 0, "int16"},
    {4, 4, 1, 0, "int32"},  {5, 8, 1, 0, "int64"},   {6, 8, 1, 1, "float64"},
    {7, 4, 1, 1, "float32"}, {8, 2, 0, 0, "uint16"},
};

const struct stk__megatron_dtype *stk__megatron_dtype_by_code(unsigned code) {
  for (size_t i = 0; i < STK__ARRAY_LEN(mg_dtypes); i++)
    if (mg_dtypes[i].code == code) return &mg_dtypes[i];
  return NULL;
}

const struct stk__megatron_dtype *stk__megatron_dtype_by_name(const char *name) {
  for (size_t i = 0; name && i < STK__ARRAY_LEN(mg_dtypes); i++)
    if (!strcmp(mg_dtypes[i].name, name)) return &mg_dtypes[i];
  return NULL;
}

/* Per dataset: the mapped .idx of every shard (parallel to its shards) and
 * the dtype all shards must share. Made by the list hook, or by the first
 * index hook when shards were named one by one (a pattern). */
struct mg_state {
  size_t n;
  struct stk__megatron_shard *sh;
  int code;        /* the first indexed shard's dtype code; 0 until then */
  size_t code_from; /* which shard set it */
};

static void mg_free_state(struct stk_dataset *ds) {
  struct mg_state *st = stk__ds_state(ds);
  if (!st) return;
  for (size_t i = 0; i < st->n; i++)
    if (st->sh[i].map) munmap((void *)st->sh[i].map, st->sh[i].map_len);
  free(st->sh);
  free(st);
}

static struct mg_state *mg_state_new(size_t n) {
  struct mg_state *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->n = n;
  if (n && !(st->sh = calloc(n, sizeof *st->sh))) {
    free(st);
    return NULL;
  }
  return st;
}

/* The state, made once even when shards are indexed in parallel. */
static struct mg_state *mg_state(struct stk_dataset *ds) {
  struct mg_state *st = stk__ds_state(ds);
  if (st) return st;
  struct mg_state *mine = mg_state_new(stk__ds_nshards(ds));
  if (!mine) return NULL;
  st = stk__ds_state_set(ds, mine);
  if (st != mine) {
    free(mine->sh);
    free(mine);
  }
  return st;
}

const struct stk__megatron_shard *stk__megatron_shard(const struct stk_dataset *ds, size_t si) {
  const struct mg_state *st = stk__ds_state(ds);
  if (!st || si >= st->n || !st->sh[si].map) return NULL;
  return &st->sh[si];
}

/* ---- the pair's names ---------------------------------------------------- */

/* PREFIX + ext, where path is PREFIX.bin, PREFIX.idx or PREFIX. */
static char *pair_name(const char *path, const char *ext) {
  size_t n = strlen(path);
  if (n > 4 && (!strcmp(path + n - 4, ".bin") || !strcmp(path + n - 4, ".idx"))) n -= 4;
  char *p = malloc(n + 5);
  if (p) {
    memcpy(p, path, n);
    memcpy(p + n, ext, 5);
  }
  return p;
}

static int exists_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- listing ------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A folder: every PREFIX.bin with its PREFIX.idx, in name order. A .bin
 * without its .idx, or an .idx without its .bin, is an error naming it:
 * leaving half a corpus out would be a quiet wrong answer. */
static int list_dir(struct stk_dataset *ds, const char *root, char *err) {
  DIR *d = opendir(root);
  if (!d) {
    int e = errno;
    return stk__errf(err, stk__from_errno(e), "%s: cannot open directory: %s", root, strerror(e));
  }
  char **v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    const char *nm = de->d_name;
    size_t l = strlen(nm);
    if (nm[0] == '.' || l < 5 || (strcmp(nm + l - 4, ".bin") && strcmp(nm + l - 4, ".idx")))
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nv = realloc(v, cap * sizeof *nv);
      if (!nv) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory listing %s", root);
        break;
      }
      v = nv;
    }
    if (!(v[n] = malloc(strlen(root) + l + 2))) {
      rc = stk__errf(err, STK_ENOMEM, "out of memory listing %s", root);
      break;
    }
    sprintf(v[n++], "%s%s%s", root, root[strlen(root) - 1] == '/' ? "" : "/", nm);
  }
  closedir(d);
  if (n) qsort(v, n, sizeof *v, name_cmp);
  for (size_t i = 0; i < n && !rc; i++) {
    size_t l = strlen(v[i]);
    int is_bin = !strcmp(v[i] + l - 4, ".bin");
    char *other = pair_name(v[i], is_bin ? ".idx" : ".bin");
    if (!other) {
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
      break;
    }
    if (!exists_file(other))
      rc = stk__errf(err, STK_ENOENT, "%s: a Megatron %s without its %s (%s is missing)", v[i],
                     is_bin ? ".bin" : ".idx", is_bin ? ".idx" : ".bin", other);
    else if (is_bin && (rc = stk__dataset_add_shard(ds, v[i], -1)) != 0)
      stk__errf(err, rc, "out of memory");
    free(other);
  }
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return rc;
}

/* The dataset named by a prefix (corpus for corpus.bin + corpus.idx), its
 * .bin or its .idx, or a folder of such pairs. */
static int mg_list(struct stk_dataset *ds, const char *root) {
  char *err = stk__ds_err(ds);
  struct stat st;
  int rc;
  if (stat(root, &st) == 0 && S_ISDIR(st.st_mode)) {
    rc = list_dir(ds, root, err);
  } else {
    char *bin = pair_name(root, ".bin"), *idx = pair_name(root, ".idx");
    if (!bin || !idx) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    else if (!exists_file(bin) || !exists_file(idx))
      rc = stk__errf(err, STK_ENOENT,
                     "%s: not a Megatron dataset: needs %s and %s (a prefix, its .bin or .idx, or "
                     "a folder of such pairs)%s%s%s",
                     root, bin, idx, exists_file(bin) ? "; the .idx is missing" : "",
                     !exists_file(bin) && exists_file(idx) ? "; the .bin is missing" : "",
                     !exists_file(bin) && !exists_file(idx) ? "; neither exists" : "");
    else if ((rc = stk__dataset_add_shard(ds, bin, -1)) != 0)
      stk__errf(err, rc, "out of memory");
    free(bin);
    free(idx);
  }
  if (!rc) {
    struct mg_state *ms = mg_state_new(stk__ds_nshards(ds));
    if (!ms || stk__ds_state_set(ds, ms) != ms) { /* a dataset's list runs once */
      if (ms) free(ms->sh);
      free(ms);
      rc = stk__errf(err, STK_ENOMEM, "out of memory");
    }
  }
  return rc;
}

/* ---- the index ------------------------------------------------------------- */

/* Check the .idx mapped at p (n bytes) against the .bin of bin_size bytes,
 * entry by entry, and fill idx[] with each sequence's byte range. */
static int check_idx(const char *ip, const char *bp, const uint8_t *p, uint64_t n,
                     uint64_t bin_size, struct stk__megatron_shard *m, struct stk_index_entry **out,
                     char *err) {
  if (n < MG_HDR)
    return stk__errf(err, STK_ETRUNC, "%s: offset %llu: truncated header (%llu of %d bytes)", ip,
                     (unsigned long long)n, (unsigned long long)n, MG_HDR);
  if (memcmp(p, MG_MAGIC, MG_MAGIC_LEN))
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset 0: bad magic (not a Megatron .idx: it starts with MMIDIDX\\x00\\x00)",
                     ip);
  uint64_t ver = stk__ld64(p + 9);
  if (ver != 1)
    return stk__errf(err, STK_EFORMAT, "%s: offset 9: unknown version %llu (stoker reads version 1)",
                     ip, (unsigned long long)ver);
  const struct stk__megatron_dtype *dt = stk__megatron_dtype_by_code(p[17]);
  if (!dt)
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset 17: unknown dtype code %u (Megatron's codes are 1 to 8)", ip,
                     (unsigned)p[17]);
  uint64_t ns = stk__ld64(p + 18), nd = stk__ld64(p + 26);
  /* 12 bytes per sequence, 8 per document index: counts past what the file
   * could hold are refused before any multiplication can overflow. */
  uint64_t room = n - MG_HDR;
  if (ns > room / 12 || nd > (room - ns * 12) / 8) {
    uint64_t need = 0;
    int over = __builtin_mul_overflow(ns, 12, &need) ||
               __builtin_add_overflow(need, (uint64_t)MG_HDR, &need) || nd > UINT64_MAX / 8 ||
               __builtin_add_overflow(need, nd * 8, &need);
    char what[32];
    if (over) snprintf(what, sizeof what, "over 2^64");
    else snprintf(what, sizeof what, "%llu", (unsigned long long)need);
    return stk__errf(err, STK_ETRUNC,
                     "%s: offset 18: %llu sequences and %llu document indices need %s bytes, but "
                     "the file holds %llu",
                     ip, (unsigned long long)ns, (unsigned long long)nd, what,
                     (unsigned long long)n);
  }
  uint64_t lo = MG_HDR, po = lo + 4 * ns, dofs = po + 8 * ns, end = dofs + 8 * nd;
  uint64_t extra = n - end;
  if (extra && extra != ns) /* multimodal datasets add one int8 mode per sequence */
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset %llu: %llu bytes after the document indices (expected none, or "
                     "one mode byte per sequence: %llu)",
                     ip, (unsigned long long)end, (unsigned long long)extra, (unsigned long long)ns);
  if (nd == 0)
    return stk__errf(err, STK_EFORMAT,
                     "%s: offset 26: no document indices (they start with 0 and end with the "
                     "sequence count, so there is at least one)",
                     ip);
  struct stk_index_entry *idx = NULL;
  if (ns && !(idx = malloc((size_t)ns * sizeof *idx)))
    return stk__errf(err, STK_ENOMEM, "%s: out of memory for %llu sequences", ip,
                     (unsigned long long)ns);
  uint64_t at = 0, tokens = 0;
  for (uint64_t i = 0; i < ns; i++) {
    int32_t len = (int32_t)stk__ld32(p + lo + 4 * i);
    uint64_t ptr = stk__ld64(p + po + 8 * i);
    int rc = 0;
    if (len < 0)
      rc = stk__errf(err, STK_EFORMAT, "%s: offset %llu: sequence %llu has length %d", ip,
                     (unsigned long long)(lo + 4 * i), (unsigned long long)i, (int)len);
    else if (ptr != at)
      rc = stk__errf(err, STK_EFORMAT,
                     "%s: offset %llu: sequence %llu starts at byte %lld of the .bin, expected %llu "
                     "(where the one before it ends: pointers grow by length times %u)",
                     ip, (unsigned long long)(po + 8 * i), (unsigned long long)i,
                     (long long)(int64_t)ptr, (unsigned long long)at, (unsigned)dt->size);
    else if ((uint64_t)len * dt->size > bin_size - STK__MIN(at, bin_size) || at > bin_size)
      rc = stk__errf(err, STK_ETRUNC,
                     "%s: offset %llu: sequence %llu (%d tokens at byte %llu) runs past the end of "
                     "%s (%llu bytes)",
                     ip, (unsigned long long)(lo + 4 * i), (unsigned long long)i, (int)len,
                     (unsigned long long)at, bp, (unsigned long long)bin_size);
    if (rc) {
      free(idx);
      return rc;
    }
    idx[i].off = at;
    idx[i].len = (uint64_t)len * dt->size;
    at += idx[i].len;
    tokens += (uint64_t)len;
  }
  uint64_t prev = 0;
  for (uint64_t k = 0; k < nd; k++) {
    uint64_t d = stk__ld64(p + dofs + 8 * k);
    const char *why = NULL;
    if (k == 0 && d != 0) why = "the first must be 0";
    else if ((int64_t)d < (int64_t)prev) why = "they must not decrease";
    else if (d > ns) why = "past the sequence count";
    else if (k == nd - 1 && d != ns) why = "the last must be the sequence count";
    if (why) {
      free(idx);
      return stk__errf(err, STK_EFORMAT,
                       "%s: offset %llu: document index %llu is %lld (%s, %llu)", ip,
                       (unsigned long long)(dofs + 8 * k), (unsigned long long)k,
                       (long long)(int64_t)d, why, (unsigned long long)ns);
    }
    prev = d;
  }
  if (at < bin_size)
    stk_log(STK_LOG_WARN, "%s: %llu bytes after the last sequence are not indexed by %s", bp,
            (unsigned long long)(bin_size - at), ip);
  m->dtype = dt;
  m->sequences = ns;
  m->documents = nd - 1;
  m->tokens = tokens;
  m->lengths = p + lo;
  m->pointers = p + po;
  m->doc_index = p + dofs;
  *out = idx;
  return 0;
}

static int index_mapped(struct mg_state *st, size_t si,
                        struct stk_shard *sh, const char *ip, uint64_t bin_size, void *map,
                        uint64_t isize, char *err);

/* The shard's .bin is sb (only its size is read); its .idx is mapped and
 * checked here. */
static int mg_index(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *sb,
                    char *err) {
  struct mg_state *st = mg_state(ds);
  if (!st) return stk__errf(err, STK_ENOMEM, "out of memory");
  size_t si = stk__ds_shard_no(ds, sh);
  if (si >= st->n) return stk__errf(err, STK_EINVAL, "%s: not a shard of this dataset", sh->path);
  uint64_t bin_size = sb->size;
  int rc;
  char *ip = pair_name(sh->path, ".idx");
  if (!ip) return stk__errf(err, STK_ENOMEM, "out of memory");
  int ifd = open(ip, O_RDONLY | O_CLOEXEC);
  uint64_t isize = 0;
  void *map = NULL;
  if (ifd < 0) {
    int e = errno;
    rc = stk__errf(err, stk__from_errno(e), "%s: cannot open the index of %s: %s", ip, sh->path,
                   strerror(e));
  } else if ((rc = stk__fd_size(ifd, &isize)) != 0) {
    stk__errf(err, rc, "%s: cannot stat: %s", ip, stk_strerror(rc));
  } else if (isize > SIZE_MAX) {
    rc = stk__errf(err, STK_ERANGE, "%s: too large to map", ip);
  } else if (isize) {
    map = mmap(NULL, (size_t)isize, PROT_READ, MAP_PRIVATE, ifd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      map = NULL;
      rc = stk__errf(err, stk__from_errno(e), "%s: cannot map: %s", ip, strerror(e));
    } else {
      madvise(map, (size_t)isize, MADV_SEQUENTIAL | MADV_WILLNEED);
    }
  }
  if (ifd >= 0) close(ifd);
  if (rc) {
    free(ip);
    return rc;
  }
  rc = index_mapped(st, si, sh, ip, bin_size, map, isize, err);
  free(ip);
  return rc;
}

/* The shard's .idx is mapped at map (isize bytes, or NULL when empty) and
 * becomes the dataset's; checked against the .bin's size. */
static int index_mapped(struct mg_state *st, size_t si,
                        struct stk_shard *sh, const char *ip, uint64_t bin_size, void *map,
                        uint64_t isize, char *err) {
  int rc = 0;
  struct stk__megatron_shard m = {0};
  struct stk_index_entry *idx = NULL;
  static const uint8_t none[1];
  if (!rc) rc = check_idx(ip, sh->path, map ? map : none, isize, bin_size, &m, &idx, err);
  /* Every shard holds the same dtype: a folder mixing them has no one
   * meaning for a token's bytes. */
  if (!rc) {
    int want = 0;
    if (!__atomic_compare_exchange_n(&st->code, &want, m.dtype->code, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        want != m.dtype->code) {
      const struct stk__megatron_dtype *o = stk__megatron_dtype_by_code((unsigned)want);
      rc = stk__errf(err, STK_EFORMAT,
                     "%s: offset 17: dtype %s, but another shard of the dataset holds %s tokens; "
                     "open them as separate datasets",
                     ip, m.dtype->name, o ? o->name : "other");
    }
  }
  if (rc) {
    if (map) munmap(map, (size_t)isize);
    free(idx);
    return rc;
  }
  if (map) madvise(map, (size_t)isize, MADV_NORMAL);
  m.map = map;
  m.map_len = (size_t)isize;
  st->sh[si] = m;
  sh->idx = idx;
  sh->count = m.sequences;
  return 0;
}

/* A remote pair: the .idx's bytes fetched whole and mapped by the dataset
 * layer (ours now), the .bin read in ranges, so only its size is here. */
static int mg_index_side(struct stk_dataset *ds, struct stk_shard *sh, uint64_t bin_size,
                         void *side, uint64_t side_len, char *err) {
  struct mg_state *st = mg_state(ds);
  size_t si = stk__ds_shard_no(ds, sh);
  char *ip = pair_name(sh->path, ".idx");
  int rc;
  if (!st || !ip)
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  else if (si >= st->n)
    rc = stk__errf(err, STK_EINVAL, "%s: not a shard of this dataset", sh->path);
  else
    rc = index_mapped(st, si, sh, ip, bin_size, side, side_len, err);
  if (rc && side && (!st || !ip || si >= st->n)) munmap(side, (size_t)side_len);
  free(ip);
  return rc;
}

static int mg_parse(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
                    const uint8_t *buf, uint64_t len, uint64_t off, int verify,
                    struct stk_sample *out, char *err) {
  (void)verify;
  stk__sample_reset(out, sh);
  const struct stk__megatron_shard *m = stk__megatron_shard(ds, stk__ds_shard_no(ds, sh));
  unsigned size = m ? m->dtype->size : 1;
  if (len % size)
    return stk__errf(err, STK_EFORMAT, "%s: offset %llu: %llu bytes is not a whole number of %s tokens",
                     sh->path, (unsigned long long)off, (unsigned long long)len,
                     m ? m->dtype->name : "");
  char key[32];
  int kl = snprintf(key, sizeof key, "%09llu", (unsigned long long)k);
  stk__sample_key(out, key, (size_t)kl);
  stk__sample_add(out, "tokens", 6, buf, len);
  struct stk_field *f = &out->fields[0];
  f->elem = size;
  /* Typed as MDS token columns and npy token files are: 1-D of the dtype. */
  f->type = m ? (uint8_t)stk__elem_type_by_name(m->dtype->name, strlen(m->dtype->name)) : 0;
  f->ndim = f->type ? 1 : 0;
  f->shape[0] = len / size;
  return 0;
}

/* inspect's figures: the dtype, and tokens, sequences and documents summed
 * over the shards. */
static int mg_property(const struct stk_dataset *ds, int i, const char **name, char *buf,
                       size_t n) {
  const struct mg_state *st = stk__ds_state(ds);
  if (!st || !st->code) return STK_ENOENT;
  const struct stk__megatron_dtype *dt = stk__megatron_dtype_by_code((unsigned)st->code);
  uint64_t tok = 0, seq = 0, doc = 0;
  for (size_t k = 0; k < st->n; k++) {
    tok += st->sh[k].tokens;
    seq += st->sh[k].sequences;
    doc += st->sh[k].documents;
  }
  switch (i) {
  case 0: *name = "dtype"; snprintf(buf, n, "%s", dt->name); return 0;
  case 1: *name = "token_bytes"; snprintf(buf, n, "%u", (unsigned)dt->size); return 0;
  case 2: *name = "tokens"; snprintf(buf, n, "%llu", (unsigned long long)tok); return 0;
  case 3: *name = "sequences"; snprintf(buf, n, "%llu", (unsigned long long)seq); return 0;
  case 4: *name = "documents"; snprintf(buf, n, "%llu", (unsigned long long)doc); return 0;
  default: return STK_ENOENT;
  }
}

/* ---- writing ---------------------------------------------------------------- */

/* The writer's state: the dtype and the current shard's sequence lengths.
 * The dtype is the one the caller sets with stk__megatron_writer_dtype (gen
 * does), else that of the first sample's typed token field (a Megatron
 * sequence, an MDS ndarray column, an npy token file: what pack reads), else
 * uint8 (each byte of an untyped field a token). Once the first sample is
 * written (fixed), every typed field must be of that dtype. */
struct mg_wstate {
  const struct stk__megatron_dtype *dt;
  int fixed;
  int32_t *len;
  uint64_t n, cap;
};

static void mg_wfree(struct stk_writer *w) {
  struct mg_wstate *s = w->state;
  if (s) free(s->len);
  free(s);
  w->state = NULL;
}

static struct mg_wstate *wstate(struct stk_writer *w) {
  if (!w->state) {
    struct mg_wstate *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dt = stk__megatron_dtype_by_code(1);
    w->state = s;
    w->free_state = mg_wfree;
  }
  return w->state;
}

int stk__megatron_writer_dtype(struct stk_writer *w, const char *name) {
  const struct stk__megatron_dtype *dt = stk__megatron_dtype_by_name(name);
  if (!dt) return stk__errf(w->err, STK_EINVAL, "unknown Megatron dtype '%s'", name ? name : "");
  struct mg_wstate *s = wstate(w);
  if (!s) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  s->dt = dt;
  s->fixed = 1;
  return 0;
}

static int mg_wr_begin(struct stk_writer *w) {
  struct mg_wstate *s = wstate(w);
  if (!s) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  s->n = 0;
  return 0;
}

/* The dtype of a typed token field, checked against the writer's. */
static int typed_dtype(struct stk_writer *w, struct mg_wstate *st, const struct stk_field *f) {
  const char *tn = stk_elem_type_name(f->type);
  const struct stk__megatron_dtype *dt = stk__megatron_dtype_by_name(tn);
  if (!dt)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' holds %s tokens, which Megatron's .idx has no dtype "
                     "code for (uint8, int8, int16, uint16, int32, int64, float32, float64); "
                     "convert them (stoker pack --dtype int64)",
                     (unsigned long long)w->samples, f->name, tn);
  if (f->ndim != 1)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' is a %u-dimensional %s array; a Megatron sequence "
                     "is 1-D",
                     (unsigned long long)w->samples, f->name, (unsigned)f->ndim, tn);
  if (!st->fixed) st->dt = dt;
  else if (dt != st->dt)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: field '%s' holds %s tokens, but the dataset's are %s (an .idx "
                     "has one dtype; convert with stoker pack --dtype)",
                     (unsigned long long)w->samples, f->name, tn, st->dt->name);
  return 0;
}

/* One sequence: the sample's token field (stk__token_field), written as
 * is. */
static int mg_wr_sample(struct stk_writer *w, const struct stk_sample *s) {
  struct mg_wstate *st = wstate(w);
  if (!st) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  const struct stk_field *f = stk__token_field(s);
  if (!f || f->encoding != STK_ENC_NONE)
    return stk__errf(w->err, STK_EINVAL, "sample %llu has no plain data field to write as tokens",
                     (unsigned long long)w->samples);
  int rc = f->type ? typed_dtype(w, st, f) : 0;
  if (rc) return rc;
  st->fixed = 1;
  uint64_t toks = f->len / st->dt->size;
  if (f->len % st->dt->size || toks > INT32_MAX)
    return stk__errf(w->err, STK_EINVAL,
                     "sample %llu: %llu bytes is not a whole number of %s tokens under 2^31",
                     (unsigned long long)w->samples, (unsigned long long)f->len, st->dt->name);
  if (st->n == st->cap) {
    uint64_t nc = st->cap ? st->cap * 2 : 4096;
    int32_t *p = realloc(st->len, (size_t)nc * sizeof *p);
    if (!p) return stk__errf(w->err, STK_ENOMEM, "out of memory");
    st->len = p;
    st->cap = nc;
  }
  st->len[st->n++] = (int32_t)toks;
  return stk__wr_write_ref(w, f->data, (size_t)f->len);
}

/* The .idx of the shard just written, as Megatron's writer lays it out:
 * one document per sequence. */
static int mg_wr_end(struct stk_writer *w) {
  struct mg_wstate *st = wstate(w);
  if (!st) return stk__errf(w->err, STK_ENOMEM, "out of memory");
  if (!w->path && !(w->path = stk__wr_name(w, w->shard_no, ".bin")))
    return stk__errf(w->err, STK_ENOMEM, "out of memory");
  uint64_t n = st->n, bytes = MG_HDR + 12 * n + 8 * (n + 1);
  uint8_t *p = malloc((size_t)bytes);
  char *ip = pair_name(w->path, ".idx");
  int rc = 0;
  if (!p || !ip) rc = stk__errf(w->err, STK_ENOMEM, "out of memory");
  if (!rc) {
    memcpy(p, MG_MAGIC, MG_MAGIC_LEN);
    stk__st64(p + 9, 1);
    p[17] = st->dt->code;
    stk__st64(p + 18, n);
    stk__st64(p + 26, n + 1);
    uint8_t *L = p + MG_HDR, *P = L + 4 * n, *D = P + 8 * n;
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
      stk__st32(L + 4 * i, (uint32_t)st->len[i]);
      stk__st64(P + 8 * i, at);
      at += (uint64_t)st->len[i] * st->dt->size;
      stk__st64(D + 8 * i, i);
    }
    stk__st64(D + 8 * n, n);
    rc = stk__wr_file(w, ip, p, (size_t)bytes);
  }
  free(p);
  free(ip);
  return rc;
}

const struct stk_format_ops stk__fmt_megatron = {
    .name = "megatron",
    .desc = "Megatron-LM indexed dataset: PREFIX.bin tokens + PREFIX.idx, one sample per sequence "
            "(field \"tokens\")",
    .exts = ".bin",
    .caps = STK_FMT_RANDOM_ACCESS | STK_FMT_WRITE,
    .magic = MG_MAGIC,
    .magic_len = MG_MAGIC_LEN,
    .side_exts = ".idx",
    .pair_ext = ".idx",
    .list = mg_list,
    .index = mg_index,
    .index_side = mg_index_side,
    .parse = mg_parse,
    .property = mg_property,
    .free_state = mg_free_state,
    .wr_shard_begin = mg_wr_begin,
    .wr_sample = mg_wr_sample,
    .wr_shard_end = mg_wr_end,
};
