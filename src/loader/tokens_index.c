/* A source's window index: built (Megatron's GPT windows through
 * gpt_index.c, or stoker's document and packed windows here) and kept in
 * an index file that every other process maps instead of building again.
 *
 * The file is written once per (corpus, configuration): its name carries
 * a hash of both, its header repeats the hash, the sizes and a CRC32C of
 * the arrays, and it appears only whole (temporary file, fsync, rename).
 * Builders are made exclusive by an flock'd lock file beside it: the first
 * process to find no good file takes the lock and builds; the others block
 * on the lock and then find the file. Checking the arrays' CRC32C means
 * reading the whole file (12 GB at 10^9 windows), so it is done once per
 * node and boot: the process that checked leaves a marker beside the file
 * (its identity and checksum, under the same lock), and later opens that
 * find a matching marker check only the header. The layout is in
 * docs/internals/tokens.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "mt19937.h"
#include "tokens_impl.h"

#define TIX_MAGIC "STKTOKIX"
#define TIX_VERSION 1u
#define TIX_ALIGN 4096u

/* The file's header (little-endian, as this machine writes it: an index
 * file is a node-local cache, never shipped across architectures; a file
 * of another byte order fails the magic check and is rebuilt). */
struct tix_hdr {
  char magic[8];
  uint32_t version, mode;
  uint64_t cfg_hash;
  uint64_t tokens_per_epoch, n_doc, n_samples, n_samples_sans_final;
  uint32_t num_epochs, separate_final_epoch, sample_i64, shuffle_i64;
  int32_t seq_len, extra;
  uint64_t off[3], bytes[3]; /* doc, sample and shuffle index */
  uint32_t crc_arrays;       /* CRC32C of the three arrays in order */
  uint32_t crc_header;       /* of every byte above */
};

/* The marker left beside an index file after its arrays passed their
 * CRC32C (NAME.stkidx.ok): what the file was when checked. A marker is
 * trusted only for the same boot, device, inode, size, mtime and checksum,
 * and only when the file's mtime was at least TIX_RACY_NS older than the
 * check: a write within one timestamp tick of the check could otherwise
 * leave the mtime unchanged (git's "racy clean" case). */
#define TIX_OK_MAGIC "STKIXOK1"
#define TIX_RACY_NS 1000000000ull
struct tix_ok {
  char magic[8];
  char boot_id[40];
  uint64_t dev, ino, size, mtime_ns, checked_ns, cfg_hash;
  uint32_t crc_arrays;
  uint32_t crc; /* of every byte above */
};

/* ---- building ------------------------------------------------------------ */

/* The split's documents over epochs, shuffled as one range with NumPy's
 * RandomState(seed) (the document and packed windows' document order). */
static int doc_order(const struct stk__tok_cfg *c, uint32_t epochs, struct stk__gpt_index *ix,
                     struct stk__mt19937 *mt, char *err) {
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths;
  if (nd * epochs > SIZE_MAX / 4 || nd * epochs > (uint64_t)INT64_MAX / 2)
    return stk__errf(err, STK_ERANGE, "%u epochs of %" PRIu64 " documents overflow", epochs, nd);
  free(ix->doc_index);
  ix->n_doc = nd * epochs;
  ix->num_epochs = epochs;
  ix->doc_index = malloc(ix->n_doc ? ix->n_doc * 4 : 4);
  if (!ix->doc_index) return stk__errf(err, STK_ENOMEM, "document index of %" PRIu64, ix->n_doc);
  for (uint64_t e = 0; e < epochs; e++)
    for (uint64_t i = 0; i < nd; i++)
      ix->doc_index[e * nd + i] = c->g.docs ? c->g.docs[i] : (int32_t)i;
  stk__mt_seed(mt, c->g.seed);
  stk__mt_shuffle_i32(mt, ix->doc_index, ix->n_doc);
  return 0;
}

/* Rows of the document or packed windows over the document index; with
 * rows NULL only counts them. DOCUMENT: a row per window start (document
 * position, offset 0, seq_len, ...) below L - extra. PACK: next-fit over
 * the shuffled documents; a row where each window starts, and one more
 * where the last ends. */
static uint64_t walk_rows(const struct stk__tok_cfg *c, const struct stk__gpt_index *ix,
                          int64_t *rows, uint64_t cap) {
  const int32_t *len = c->g.lengths;
  int64_t S = (int64_t)c->g.seq_len + ix->extra, step = c->g.seq_len;
  uint64_t n = 0;
#define ROW(p, o)                                                           \
  do {                                                                      \
    if (rows && n < cap) rows[2 * n] = (int64_t)(p), rows[2 * n + 1] = (o); \
    n++;                                                                    \
  } while (0)
  if (c->mode == STK_WINDOWS_DOCUMENT) {
    for (uint64_t p = 0; p < ix->n_doc; p++) {
      int64_t L = len[ix->doc_index[p]];
      for (int64_t o = 0; o < L - ix->extra; o += step) ROW(p, o);
    }
    ROW(ix->n_doc, 0);
    return n - 1;
  }
  int64_t fill = 0, off = 0;
  uint64_t p = 0;
  ROW(0, 0);
  while (p < ix->n_doc) {
    int64_t r = (int64_t)len[ix->doc_index[p]] - off;
    if (r <= S - fill) { /* the rest of the document fits */
      fill += r;
      p++;
      off = 0;
      if (fill == S) {
        ROW(p, 0);
        fill = 0;
      }
    } else if (fill > 0 && off == 0 && r <= S) { /* whole in the next window */
      ROW(p, 0);
      fill = 0;
    } else { /* longer than a window, or already split: fill this one */
      off += S - fill;
      ROW(p, off);
      fill = 0;
    }
  }
  if (fill > 0) ROW(ix->n_doc, 0);
#undef ROW
  return n - 1;
}

static int build_windows(const struct stk__tok_cfg *c, struct stk__gpt_index *ix, char *err) {
  memset(ix, 0, sizeof *ix);
  ix->seq_len = c->g.seq_len;
  ix->extra = c->g.no_extra_token ? 0 : 1;
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths, T = 0;
  for (uint64_t i = 0; i < nd; i++)
    T += (uint64_t)c->g.lengths[c->g.docs ? c->g.docs[i] : (int32_t)i];
  ix->tokens_per_epoch = T;
  if (!T) return stk__errf(err, STK_EEMPTY, "the split's %" PRIu64 " documents hold no tokens", nd);
  /* Epochs: as asked, or enough for num_samples (document windows: their
   * count per epoch; packing: an estimate by tokens, raised until enough). */
  uint32_t e = c->epochs ? c->epochs : 1;
  struct stk__mt19937 mt;
  int rc;
  if (c->g.num_samples) {
    if ((rc = doc_order(c, 1, ix, &mt, err))) return rc;
    uint64_t per = walk_rows(c, ix, NULL, 0);
    if (!per)
      return stk__errf(err, STK_EEMPTY, "no document of the split is long enough for a window");
    uint64_t need = c->g.num_samples / per + (c->g.num_samples % per != 0);
    if (need > INT32_MAX)
      return stk__errf(err, STK_ERANGE, "%" PRIu64 " windows need %" PRIu64 " epochs",
                       c->g.num_samples, need);
    e = (uint32_t)STK__MAX(need, 1);
  }
  for (;;) {
    if ((rc = doc_order(c, e, ix, &mt, err))) return rc;
    uint64_t n = walk_rows(c, ix, NULL, 0);
    if (!n)
      return stk__errf(err, STK_EEMPTY, "no document of the split is long enough for a window");
    if (c->g.num_samples && n < c->g.num_samples) { /* packing across epoch seams: one more */
      e++;
      continue;
    }
    ix->sample_i64 = 1;
    ix->sample_index = malloc((n + 1) * 16);
    if (!ix->sample_index) return stk__errf(err, STK_ENOMEM, "sample index of %" PRIu64, n + 1);
    walk_rows(c, ix, ix->sample_index, n + 1);
    ix->n_samples = c->g.num_samples ? c->g.num_samples : n;
    break;
  }
  uint64_t n = ix->n_samples;
  ix->shuffle_i64 = n >= (uint64_t)UINT32_MAX - 1;
  ix->shuffle_index = malloc(n * (ix->shuffle_i64 ? 8 : 4));
  if (!ix->shuffle_index) return stk__errf(err, STK_ENOMEM, "shuffle index of %" PRIu64, n);
  if (ix->shuffle_i64) {
    int64_t *s = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) s[i] = (int64_t)i;
    stk__mt_shuffle_i64(&mt, s, n);
  } else {
    uint32_t *s = ix->shuffle_index;
    for (uint64_t i = 0; i < n; i++) s[i] = (uint32_t)i;
    stk__mt_shuffle_u32(&mt, s, n);
  }
  return 0;
}

static int build(const struct stk__tok_cfg *c, struct stk__gpt_index *ix, char *err) {
  if (c->mode == STK_WINDOWS_MEGATRON) {
    struct stk__gpt_cfg g = c->g;
    /* Several epochs without a sample count: every window of them. */
    if (!g.num_samples && c->epochs > 1) {
      uint64_t nd = g.docs ? g.n_docs : g.n_lengths, T = 0;
      for (uint64_t i = 0; i < nd; i++) T += (uint64_t)g.lengths[g.docs ? g.docs[i] : (int32_t)i];
      int extra = g.no_extra_token ? 0 : 1;
      if (T > (uint64_t)extra)
        g.num_samples = ((uint64_t)c->epochs * T - (uint64_t)extra) / (uint64_t)g.seq_len;
    }
    return stk__gpt_index_build(&g, ix, err);
  }
  int rc = build_windows(c, ix, err);
  if (rc) stk__gpt_index_free(ix);
  return rc;
}

/* ---- the file ------------------------------------------------------------ */

static uint64_t h64(uint64_t h, uint64_t v) { return stk_mix64(h, v); }

static uint64_t cfg_hash(const struct stk__tok_cfg *c) {
  uint64_t h = h64(0x746f6b656e73ull, TIX_VERSION);
  h = h64(h, (uint64_t)c->mode);
  h = h64(h, c->content);
  h = h64(h, (uint64_t)c->g.seq_len);
  h = h64(h, c->g.num_samples);
  h = h64(h, c->g.num_samples ? 0 : c->epochs);
  h = h64(h, c->g.seed);
  h = h64(h, (uint64_t)c->g.no_extra_token * 2 + (uint64_t)c->g.keep_last_partial);
  uint64_t nd = c->g.docs ? c->g.n_docs : c->g.n_lengths;
  h = h64(h, nd);
  h = h64(h, c->g.docs && nd ? (uint64_t)c->g.docs[0] : 0);
  return h;
}

static const char *mode_name(int m) {
  return m == STK_WINDOWS_DOCUMENT ? "document" : m == STK_WINDOWS_PACK ? "pack" : "gpt";
}

static void arrays_of(const struct stk__gpt_index *ix, const void *a[3], uint64_t b[3]) {
  a[0] = ix->doc_index;
  b[0] = ix->n_doc * 4;
  a[1] = ix->sample_index;
  b[1] = (ix->n_samples + 1) * 2 * (ix->sample_i64 ? 8 : 4);
  a[2] = ix->shuffle_index;
  b[2] = ix->n_samples * (ix->shuffle_i64 ? 8 : 4);
}

static uint64_t mtime_ns(const struct stat *st) {
  return (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
}

static void ok_fill(struct tix_ok *k, const struct stat *st, uint64_t hash, uint32_t crc) {
  memset(k, 0, sizeof *k);
  memcpy(k->magic, TIX_OK_MAGIC, 8);
  stk__boot_id(k->boot_id, sizeof k->boot_id);
  k->dev = (uint64_t)st->st_dev;
  k->ino = (uint64_t)st->st_ino;
  k->size = (uint64_t)st->st_size;
  k->mtime_ns = mtime_ns(st);
  k->cfg_hash = hash;
  k->crc_arrays = crc;
}

/* 1 when path's marker vouches for the file st with these arrays. */
static int ok_matches(const char *path, const struct stat *st, uint64_t hash, uint32_t crc) {
  char mp[4200];
  snprintf(mp, sizeof mp, "%s.ok", path);
  int fd = open(mp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct tix_ok k, want;
  ssize_t r = read(fd, &k, sizeof k);
  close(fd);
  if (r != (ssize_t)sizeof k || stk_crc32c(0, &k, offsetof(struct tix_ok, crc)) != k.crc) return 0;
  ok_fill(&want, st, hash, crc);
  if (!strcmp(want.boot_id, "unknown")) return 0; /* no boot id: check at every open */
  want.checked_ns = k.checked_ns;
  want.crc = k.crc;
  return !memcmp(&k, &want, sizeof k) && k.checked_ns >= k.mtime_ns + TIX_RACY_NS;
}

/* Leave the marker for a file whose arrays were just checked in full
 * (under the builders' lock; a temporary renamed over, so readers see a
 * whole marker or none). Failing to write it costs only a later check. */
static void ok_write(const char *path, const struct stat *st, uint64_t hash, uint32_t crc) {
  struct tix_ok k;
  ok_fill(&k, st, hash, crc);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  k.checked_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
  k.crc = stk_crc32c(0, &k, offsetof(struct tix_ok, crc));
  char mp[4200], tmp[4240];
  snprintf(mp, sizeof mp, "%s.ok", path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", mp, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  int bad = stk__write_full(fd, &k, sizeof k) != 0;
  if (close(fd) != 0) bad = 1;
  if (bad || rename(tmp, mp) != 0) unlink(tmp);
}

/* Map path and check it against c: 0 and *x filled; STK_ENOENT when there
 * is no file; another code (with why set) when it is stale or corrupt.
 * With full 0, a file without a matching marker is not read through:
 * STK_EAGAIN. With full 1, its arrays are checked and, when they pass,
 * the marker is written. */
static int try_load(const char *path, uint64_t hash, int mode, int full, struct stk__tok_index *x,
                    char *why, size_t whyn) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return STK_ENOENT;
  struct stat st;
  int rc = STK_EFORMAT;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < sizeof(struct tix_hdr)) {
    snprintf(why, whyn, "shorter than its header");
    goto out;
  }
  map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    snprintf(why, whyn, "cannot be mapped (%s)", strerror(errno));
    goto out;
  }
  struct tix_hdr h;
  memcpy(&h, map, sizeof h);
  if (memcmp(h.magic, TIX_MAGIC, 8) || h.version != TIX_VERSION) {
    snprintf(why, whyn, "not a stoker index file of version %u", TIX_VERSION);
    goto out;
  }
  if (stk_crc32c(0, &h, offsetof(struct tix_hdr, crc_header)) != h.crc_header) {
    snprintf(why, whyn, "its header fails its checksum");
    goto out;
  }
  if (h.cfg_hash != hash || h.mode != (uint32_t)mode) {
    snprintf(why, whyn, "built for another configuration or corpus");
    goto out;
  }
  for (int i = 0; i < 3; i++)
    if (h.off[i] > (uint64_t)st.st_size || h.bytes[i] > (uint64_t)st.st_size - h.off[i]) {
      snprintf(why, whyn, "truncated (array %d past its end)", i);
      goto out;
    }
  if (!ok_matches(path, &st, hash, h.crc_arrays)) {
    if (!full) {
      rc = STK_EAGAIN;
      snprintf(why, whyn, "not checked on this node since it was written");
      goto out;
    }
    uint32_t crc = 0;
    for (int i = 0; i < 3; i++)
      crc = stk_crc32c(crc, (const uint8_t *)map + h.off[i], (size_t)h.bytes[i]);
    if (crc != h.crc_arrays) {
      snprintf(why, whyn, "its arrays fail their checksum");
      goto out;
    }
    ok_write(path, &st, hash, crc);
  }
  struct stk__gpt_index *ix = &x->ix;
  memset(x, 0, sizeof *x);
  ix->tokens_per_epoch = h.tokens_per_epoch;
  ix->num_epochs = h.num_epochs;
  ix->separate_final_epoch = (int)h.separate_final_epoch;
  ix->n_samples_sans_final = h.n_samples_sans_final;
  ix->seq_len = h.seq_len;
  ix->extra = h.extra;
  ix->n_doc = h.n_doc;
  ix->n_samples = h.n_samples;
  ix->sample_i64 = (int)h.sample_i64;
  ix->shuffle_i64 = (int)h.shuffle_i64;
  const void *a[3];
  uint64_t b[3];
  arrays_of(ix, a, b);
  for (int i = 0; i < 3; i++)
    if (b[i] != h.bytes[i]) {
      snprintf(why, whyn, "its array sizes disagree with its header");
      goto out;
    }
  ix->doc_index = (int32_t *)((uint8_t *)map + h.off[0]);
  ix->sample_index = (uint8_t *)map + h.off[1];
  ix->shuffle_index = (uint8_t *)map + h.off[2];
  x->mode = mode;
  x->map = map;
  x->map_len = (size_t)st.st_size;
  map = MAP_FAILED;
  rc = 0;
out:
  if (map != MAP_FAILED) munmap(map, (size_t)st.st_size);
  close(fd);
  return rc;
}

static int write_all(int fd, const void *p, uint64_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : (size_t)n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (uint64_t)w;
  }
  return 0;
}

/* Write ix to path atomically: a temporary file beside it, fsync'ed, then
 * renamed over path and the folder fsync'ed. */
static int write_file(const char *path, uint64_t hash, int mode, const struct stk__gpt_index *ix,
                      char *err) {
  struct tix_hdr h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, TIX_MAGIC, 8);
  h.version = TIX_VERSION;
  h.mode = (uint32_t)mode;
  h.cfg_hash = hash;
  h.tokens_per_epoch = ix->tokens_per_epoch;
  h.n_doc = ix->n_doc;
  h.n_samples = ix->n_samples;
  h.n_samples_sans_final = ix->n_samples_sans_final;
  h.num_epochs = ix->num_epochs;
  h.separate_final_epoch = (uint32_t)ix->separate_final_epoch;
  h.sample_i64 = (uint32_t)ix->sample_i64;
  h.shuffle_i64 = (uint32_t)ix->shuffle_i64;
  h.seq_len = ix->seq_len;
  h.extra = ix->extra;
  const void *a[3];
  uint64_t b[3], pos = TIX_ALIGN;
  arrays_of(ix, a, b);
  uint32_t crc = 0;
  for (int i = 0; i < 3; i++) {
    h.off[i] = pos;
    h.bytes[i] = b[i];
    pos = (pos + b[i] + TIX_ALIGN - 1) / TIX_ALIGN * TIX_ALIGN;
    crc = stk_crc32c(crc, a[i], (size_t)b[i]);
  }
  h.crc_arrays = crc;
  h.crc_header = stk_crc32c(0, &h, offsetof(struct tix_hdr, crc_header));
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 32);
  if (!tmp) return stk__errf(err, STK_ENOMEM, "out of memory");
  snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int rc = 0;
  if (fd < 0) {
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return rc;
  }
  static const uint8_t zero[TIX_ALIGN];
  int bad = write_all(fd, &h, sizeof h) || write_all(fd, zero, TIX_ALIGN - sizeof h);
  for (int i = 0; i < 3 && !bad; i++) {
    bad = write_all(fd, a[i], b[i]);
    uint64_t padn = (TIX_ALIGN - b[i] % TIX_ALIGN) % TIX_ALIGN;
    if (!bad && i < 2) bad = write_all(fd, zero, padn);
  }
  if (!bad) bad = fsync(fd) != 0;
  int e = errno;
  if (close(fd) != 0 && !bad) bad = 1, e = errno;
  if (!bad && rename(tmp, path) != 0) bad = 1, e = errno;
  if (bad) {
    rc = stk__errf(err, stk__from_errno(e), "%s: cannot write: %s", tmp, strerror(e));
    unlink(tmp);
  } else {
    char *dir = strdup(path), *sl = dir ? strrchr(dir, '/') : NULL;
    if (sl) {
      *sl = 0;
      int dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
      }
    }
    free(dir);
  }
  free(tmp);
  return rc;
}

static int mkdirs(const char *dir, char *err) {
  char *p = strdup(dir);
  if (!p) return stk__errf(err, STK_ENOMEM, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        free(p);
        return stk__errf(err, stk__from_errno(e), "%s: cannot create the index folder: %s", dir,
                         strerror(e));
      }
      *s = c;
      if (!c) break;
    }
  }
  free(p);
  return 0;
}

int stk__tok_index_get(const struct stk__tok_cfg *c, struct stk__tok_index *out, char *err) {
  memset(out, 0, sizeof *out);
  out->mode = c->mode;
  if (!c->dir) {
    out->built = 1;
    return build(c, &out->ix, err);
  }
  int rc = mkdirs(c->dir, err);
  if (rc) return rc;
  uint64_t hash = cfg_hash(c);
  size_t n = strlen(c->dir) + strlen(c->name) + 64;
  char *path = malloc(n), *lock = malloc(n + 8);
  if (!path || !lock) {
    free(path);
    free(lock);
    return stk__errf(err, STK_ENOMEM, "out of memory");
  }
  snprintf(path, n, "%s/%s.%s-%016" PRIx64 ".stkidx", c->dir, c->name, mode_name(c->mode), hash);
  snprintf(lock, n + 8, "%s.lock", path);
  char why[160] = "";
  /* Without the lock, only a file some process of this node has checked
   * (its marker matches) is mapped; anything else waits for the lock. */
  rc = try_load(path, hash, c->mode, 0, out, why, sizeof why);
  if (rc == 0) goto done;
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) {
    rc = stk__errf(err, stk__from_errno(errno), "%s: cannot create the index lock: %s", lock,
                   strerror(errno));
    goto done;
  }
  while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  /* Another process may have built or checked it while this one waited;
   * if not, this one checks it in full and leaves the marker. */
  rc = try_load(path, hash, c->mode, 0, out, why, sizeof why);
  if (rc != 0 && rc != STK_ENOENT) rc = try_load(path, hash, c->mode, 1, out, why, sizeof why);
  if (rc != 0) {
    if (rc != STK_ENOENT) stk_log(STK_LOG_WARN, "%s: %s: rebuilding it", path, why);
    uint64_t t0 = stk_now_ns();
    out->mode = c->mode;
    rc = build(c, &out->ix, err);
    if (!rc) {
      out->built = 1;
      stk_log(STK_LOG_INFO, "built the %s window index of %s (%" PRIu64 " windows) in %.3f s: %s",
              mode_name(c->mode), c->name, out->ix.n_samples, (double)(stk_now_ns() - t0) / 1e9,
              path);
      rc = write_file(path, hash, c->mode, &out->ix, err);
      if (rc) stk__tok_index_free(out);
    }
  }
  flock(lfd, LOCK_UN);
  close(lfd);
done:
  if (rc) {
    free(path);
  } else {
    out->path = path;
  }
  free(lock);
  return rc;
}

void stk__tok_index_free(struct stk__tok_index *x) {
  if (!x) return;
  if (x->map)
    munmap(x->map, x->map_len);
  else
    stk__gpt_index_free(&x->ix);
  free(x->path);
  memset(x, 0, sizeof *x);
}
