/* stoker pack: convert a dataset from one format to another, keeping
 * fields, keys and labels as far as the target format can hold them. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"

const char cmd_pack_usage[] =
    "usage: stoker pack SRC DST --format F [OPTIONS]\n"
    "\n"
    "Read every sample of SRC (checking its checksums) and write it to DST in\n"
    "format F. Fields, keys and labels are kept where F can hold them: a\n"
    "TFRecord gets a tf.train.Example when a sample has several fields or a\n"
    "label; plain files keep one field and put labels in folders; deflated npz\n"
    "members are inflated.\n"
    "\n"
    "Token datasets keep their dtype: a Megatron sequence, an MDS ndarray column\n"
    "and an npy token file are typed token arrays, so megatron, mds (column\n"
    "ndarray:DTYPE) and npy-tokens convert into one another unchanged. The token\n"
    "field is the one named tokens (else the first typed array); the Megatron\n"
    "writer takes its dtype and writes one document per sequence. An npy token\n"
    "folder is read as such only with --src-format npy-tokens.\n"
    "\n"
    "  --format F              target: tfrecord, wds, npy, npz, mds, megatron,\n"
    "                          npy-tokens, files\n"
    "  --src-format F          format of SRC (default: detect)\n"
    "  --dtype D               convert typed integer arrays (tokens) to D: int8,\n"
    "                          uint8, int16, uint16, int32, uint32, int64, uint64;\n"
    "                          a token that does not fit D is refused\n"
    "  --shard-size SIZE       start a new shard past SIZE bytes\n"
    "  --samples-per-shard N   start a new shard every N samples\n"
    "  --no-index              tfrecord: do not write DALI .idx files\n"
    "  --force                 replace what DST holds (else DST must be empty)\n"
    "  -q, --quiet             no progress line or summary\n";

enum { O_FORMAT = 256, O_SRC_FORMAT, O_SHARD_SIZE, O_PER_SHARD, O_NOINDEX, O_FORCE, O_DTYPE };

static const struct option options[] = {
    {"format", 1, 0, O_FORMAT},       {"src-format", 1, 0, O_SRC_FORMAT},
    {"shard-size", 1, 0, O_SHARD_SIZE}, {"samples-per-shard", 1, 0, O_PER_SHARD},
    {"no-index", 0, 0, O_NOINDEX},    {"force", 0, 0, O_FORCE},
    {"dtype", 1, 0, O_DTYPE},         {"quiet", 0, 0, 'q'},
    {0, 0, 0, 0}};

#define PACK_MAX_INFLATE (1ull << 31)

struct pack_args {
  const char *src, *dst, *src_format;
  struct stk_writer_opts wo;
  int force, quiet;
  int dtype; /* --dtype: an integer enum stk_elem_type, or 0 */
};

/* ---- --dtype: integer token arrays converted, each token range-checked ---- */

static int is_int_type(int t) {
  return t == STK_ELEM_U8 || t == STK_ELEM_I8 || t == STK_ELEM_U16 || t == STK_ELEM_I16 ||
         t == STK_ELEM_U32 || t == STK_ELEM_I32 || t == STK_ELEM_U64 || t == STK_ELEM_I64;
}

static int is_signed_type(int t) {
  return t == STK_ELEM_I8 || t == STK_ELEM_I16 || t == STK_ELEM_I32 || t == STK_ELEM_I64;
}

static int type_by_name(const char *name) {
  for (int t = 1; t < STK_ELEM_COUNT; t++)
    if (!strcmp(stk_elem_type_name(t), name)) return t;
  return 0;
}

/* Element k of an integer array of type t (little-endian): the value as a
 * sign and a magnitude. */
static void load_int(const uint8_t *p, unsigned size, int t, int *neg, uint64_t *mag) {
  uint64_t v = 0;
  for (unsigned b = 0; b < size; b++) v |= (uint64_t)p[b] << (8 * b);
  *neg = 0;
  if (is_signed_type(t) && size < 8 && (v >> (8 * size - 1)) & 1) v |= ~0ull << (8 * size);
  if (is_signed_type(t) && (int64_t)v < 0) {
    *neg = 1;
    v = (uint64_t)(-((int64_t)v + 1)) + 1; /* |v|, INT64_MIN included */
  }
  *mag = v;
}

static int fits(int t, int neg, uint64_t mag) {
  unsigned bits = stk_elem_type_size(t) * 8;
  if (!is_signed_type(t)) return !neg && (bits == 64 || mag < (1ull << bits));
  uint64_t lim = 1ull << (bits - 1); /* |min|; max is lim - 1 */
  return neg ? mag <= lim : mag < lim;
}

/* Convert every typed integer array of s (the token columns; scalars are
 * left alone) to type `to` into owned buffers held in bufs[]. A sample
 * without one, a float array, or a token outside `to` is refused. */
static int convert_fields(struct stk_sample *s, int to, uint8_t **bufs, char *err, size_t errn) {
  int any = 0;
  unsigned osz = stk_elem_type_size(to);
  for (int i = 0; i < s->nfields; i++) {
    struct stk_field *f = &s->fields[i];
    if (!f->type || f->ndim == 0 || f->encoding != STK_ENC_NONE) continue;
    if (!is_int_type(f->type)) {
      snprintf(err, errn, "field %s holds %s values; --dtype converts integer tokens", f->name,
               stk_elem_type_name(f->type));
      return -1;
    }
    any = 1;
    if (f->type == to) continue;
    unsigned isz = stk_elem_type_size(f->type);
    uint64_t n = f->len / isz;
    uint8_t *out = malloc(n ? (size_t)(n * osz) : 1);
    if (!out) {
      snprintf(err, errn, "out of memory");
      return -1;
    }
    for (uint64_t k = 0; k < n; k++) {
      int neg;
      uint64_t mag;
      load_int(f->data + k * isz, isz, f->type, &neg, &mag);
      if (!fits(to, neg, mag)) {
        snprintf(err, errn, "field %s: token %llu is %s%llu, which does not fit %s", f->name,
                 (unsigned long long)k, neg ? "-" : "", (unsigned long long)mag,
                 stk_elem_type_name(to));
        free(out);
        return -1;
      }
      uint64_t v = neg ? (uint64_t)0 - mag : mag; /* two's complement, truncated below */
      for (unsigned b = 0; b < osz; b++) out[k * osz + b] = (uint8_t)(v >> (8 * b));
    }
    free(bufs[i]);
    bufs[i] = out;
    f->data = out;
    f->len = f->raw_len = n * osz;
    f->type = (uint8_t)to;
    f->elem = osz;
  }
  if (!any) {
    snprintf(err, errn, "no typed token array to convert (--dtype converts Megatron sequences, "
             "MDS ndarray columns and npy token files)");
    return -1;
  }
  return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb;
  (void)f;
  return flag == FTW_DP ? rmdir(p) : unlink(p);
}

/* DST must be missing or empty; --force empties it (never SRC itself). */
static int prepare_dst(const struct pack_args *a) {
  char rs[PATH_MAX], rd[PATH_MAX];
  if (realpath(a->src, rs) && realpath(a->dst, rd) &&
      (!strcmp(rs, rd) || (!strncmp(rs, rd, strlen(rd)) && rs[strlen(rd)] == '/'))) {
    cli_error("pack", "DST %s holds SRC %s; choose another DST", a->dst, a->src);
    return -1;
  }
  DIR *d = opendir(a->dst);
  if (!d) return errno == ENOENT ? 0 : (cli_error("pack", "%s: %s", a->dst, strerror(errno)), -1);
  struct dirent *de;
  int rc = 0;
  while (!rc && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (!a->force) {
      cli_error("pack", "%s is not empty; pass --force to replace its contents", a->dst);
      rc = -1;
      break;
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", a->dst, de->d_name);
    if (nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
      cli_error("pack", "%s: cannot remove: %s", p, strerror(errno));
      rc = -1;
    }
  }
  closedir(d);
  return rc;
}

/* Inflate deflated fields into owned buffers (held in bufs[]), so every
 * target gets plain bytes. */
static int inflate_fields(struct stk_sample *s, uint8_t **bufs, char *err, size_t errn) {
  for (int i = 0; i < s->nfields; i++) {
    struct stk_field *f = &s->fields[i];
    if (f->encoding == STK_ENC_STRIDED) { /* a sample of DLIO's npz layout: gather it */
      uint64_t n = f->elem ? f->raw_len / f->elem : 0;
      uint8_t *out = malloc(f->raw_len ? (size_t)f->raw_len : 1);
      if (!out || !f->elem || (n && (n - 1) * f->stride + f->elem > f->len)) {
        free(out);
        snprintf(err, errn, "field %s: cannot gather its elements", f->name);
        return -1;
      }
      for (uint64_t k = 0; k < n; k++) memcpy(out + k * f->elem, f->data + k * f->stride, f->elem);
      bufs[i] = out;
      f->data = out;
      f->len = f->raw_len;
      f->encoding = STK_ENC_NONE;
      continue;
    }
    if (f->encoding != STK_ENC_DEFLATE) continue;
    if (f->raw_len > PACK_MAX_INFLATE || f->len > UINT_MAX) {
      snprintf(err, errn, "field %s: %llu bytes inflated is too large", f->name,
               (unsigned long long)f->raw_len);
      return -1;
    }
    uint8_t *out = malloc(f->raw_len ? (size_t)f->raw_len : 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (!out || inflateInit2(&zs, -15) != Z_OK) {
      free(out);
      snprintf(err, errn, "out of memory");
      return -1;
    }
    zs.next_in = (Bytef *)(uintptr_t)f->data;
    zs.avail_in = (uInt)f->len;
    zs.next_out = out;
    zs.avail_out = (uInt)f->raw_len;
    int zr = inflate(&zs, Z_FINISH);
    inflateEnd(&zs);
    if (zr != Z_STREAM_END || zs.total_out != f->raw_len) {
      free(out);
      snprintf(err, errn, "field %s does not inflate to %llu bytes", f->name,
               (unsigned long long)f->raw_len);
      return -1;
    }
    bufs[i] = out;
    f->data = out;
    f->len = f->raw_len;
    f->encoding = STK_ENC_NONE;
  }
  return 0;
}

static int parse_args(int argc, char **argv, struct pack_args *a) {
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    switch (c) {
      case O_FORMAT: a->wo.format = optarg; break;
      case O_SRC_FORMAT: a->src_format = optarg; break;
      case O_SHARD_SIZE:
        if (cli_size("pack", "--shard-size", optarg, &a->wo.shard_bytes)) return -1;
        break;
      case O_PER_SHARD:
        if (cli_u64("pack", "--samples-per-shard", optarg, 1, UINT64_MAX, &a->wo.samples_per_shard))
          return -1;
        break;
      case O_NOINDEX: a->wo.write_index = 0; break;
      case O_FORCE: a->force = 1; break;
      case O_DTYPE:
        if (!is_int_type(a->dtype = type_by_name(optarg))) {
          cli_error("pack", "--dtype: '%s' is not an integer dtype (int8, uint8, int16, uint16, "
                    "int32, uint32, int64, uint64)", optarg);
          return -1;
        }
        break;
      case 'q': a->quiet = 1; break;
      default: return -1;
    }
  }
  if (argc - optind != 2) {
    cli_error("pack", "need SRC and DST; see `stoker help pack`");
    return -1;
  }
  if (!a->wo.format) {
    cli_error("pack", "--format is required; see `stoker help pack`");
    return -1;
  }
  a->src = argv[optind];
  a->dst = a->wo.dir = argv[optind + 1];
  return 0;
}

/* A TFRecord sample parsed from a tf.train.Example ends with the whole
 * Example as "data", holding the other fields: drop it for other targets. */
static void drop_example_container(struct stk_sample *s, const char *target) {
  if (s->nfields < 2 || !strcmp(target, "tfrecord")) return;
  const struct stk_field *d = &s->fields[s->nfields - 1];
  if (strcmp(d->name, "data")) return;
  for (int i = 0; i < s->nfields - 1; i++)
    if (s->fields[i].data < d->data || s->fields[i].data + s->fields[i].len > d->data + d->len)
      return;
  s->nfields--;
}

/* Copy every sample; 0, or CLI_FAIL / CLI_INTERRUPTED with a message. */
static int copy_all(struct stk_dataset *ds, struct stk_writer *w, const struct pack_args *a) {
  uint64_t n = stk_dataset_num_samples(ds), last = 0;
  int show = !a->quiet && cli_progress_enabled();
  uint8_t *buf = NULL;
  size_t cap = 0;
  int out = 0;
  for (uint64_t i = 0; i < n && !out; i++) {
    struct stk_sample s;
    uint8_t *bufs[STK_MAX_FIELDS] = {0};
    char err[STK_ERRMSG_MAX];
    if (cli_stop_requested()) {
      cli_error("pack", "interrupted; removed the partial output");
      out = CLI_INTERRUPTED;
    } else if (stk_dataset_read(ds, i, 1, &buf, &cap, &s)) {
      cli_error("pack", "%s", stk_dataset_errmsg(ds));
      out = CLI_FAIL;
    } else if (inflate_fields(&s, bufs, err, sizeof err) ||
               (a->dtype && convert_fields(&s, a->dtype, bufs, err, sizeof err))) {
      cli_error("pack", "sample %llu: %s", (unsigned long long)i, err);
      out = CLI_FAIL;
    } else if (drop_example_container(&s, a->wo.format), stk_writer_add(w, &s)) {
      cli_error("pack", "%s", stk_writer_errmsg(w));
      out = CLI_FAIL;
    }
    for (int k = 0; k < STK_MAX_FIELDS; k++) free(bufs[k]);
    uint64_t now = stk_now_ns();
    if (show && (now - last > 100000000ull || i + 1 == n)) {
      fprintf(stderr, "\rpack: %llu/%llu samples ", (unsigned long long)(i + 1),
              (unsigned long long)n);
      last = now;
    }
  }
  if (show) fputc('\n', stderr);
  free(buf);
  return out;
}

int cmd_pack_run(int argc, char **argv) {
  struct pack_args a;
  memset(&a, 0, sizeof a);
  a.wo.write_index = 1;
  if (parse_args(argc, argv, &a)) return CLI_USAGE;
  cli_catch_signals();
  char err[STK_ERRMSG_MAX];
  struct stk_dataset_opts o = {.format = a.src_format};
  struct stk_dataset *ds;
  int rc = cli_open_whole("pack", a.src, &o, &ds);
  if (rc) return rc;
  struct stk_writer *w = NULL;
  uint64_t t0 = stk_now_ns();
  int out = prepare_dst(&a) ? CLI_FAIL : 0;
  if (!out && (rc = stk_writer_open(&w, &a.wo, err)) != 0) {
    cli_error("pack", "%s", err);
    out = rc == STK_EINVAL || rc == STK_ENOTSUP ? CLI_USAGE : CLI_FAIL;
  }
  if (!out) out = copy_all(ds, w, &a);
  uint64_t bytes = w ? stk_writer_bytes(w) : 0;
  if (w && out) stk_writer_abort(w);
  if (w && !out && stk_writer_close(w)) {
    cli_error("pack", "%s", stk_writer_errmsg(NULL));
    out = CLI_FAIL;
  }
  if (!out && !a.quiet) {
    char b[32];
    double s = (double)(stk_now_ns() - t0) / 1e9;
    printf("packed %llu samples from %s (%s) into %s (%s), %s in %.2f s\n",
           (unsigned long long)stk_dataset_num_samples(ds), a.src, stk_dataset_format(ds), a.dst,
           a.wo.format, stk_fmt_bytes(bytes, b, sizeof b), s);
  }
  stk_dataset_close(ds);
  return out;
}
