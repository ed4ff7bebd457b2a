/* stoker gen: write a synthetic dataset in any format stoker reads, with
 * random-byte or JPEG payloads, deterministic by seed. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

const char cmd_gen_usage[] =
    "usage: stoker gen DIR --format F --samples N [OPTIONS]\n"
    "\n"
    "Write a synthetic dataset of N samples into DIR. The same options and seed\n"
    "always write byte-identical files.\n"
    "\n"
    "  --format F              tfrecord, wds, npy, npz, mds, megatron, files\n"
    "  --samples N             number of samples (megatron: documents)\n"
    "payload (random bytes unless --jpeg):\n"
    "  --size MEAN             mean payload size, 1 B to 2GiB (default 112KiB)\n"
    "  --size-stdev SD         normal spread of the size (default 0); each size\n"
    "                          drawn is kept within 1 B..2GiB\n"
    "  --jpeg WxH[-WxH]        JPEG images of this size, or of a random size in\n"
    "                          the range (npy/npz: uint8 arrays of shape HxWx3)\n"
    "  --quality Q             JPEG (and lossy WebP) quality 1..100 (default 90)\n"
    "  --image-format F        jpeg, png or webp: how the --jpeg images are encoded\n"
    "                          (default jpeg; png is lossless, webp lossy at\n"
    "                          --quality and lossless at 100); the field and a\n"
    "                          files dataset's extension are jpg, png or webp\n"
    "  --classes K             labels drawn from 0..K-1 (files, npy: one folder\n"
    "                          per label; wds: a .cls member; npz: y; others: a\n"
    "                          label field)\n"
    "megatron (a token corpus: shard-NNNNN.bin + .idx pairs, one sequence per\n"
    "document, each ending with token VOCAB-1 as its end-of-document):\n"
    "  --doc-len MEAN          mean tokens per document (default 1024)\n"
    "  --doc-len-stdev SD      spread of the document length (default 0: all equal)\n"
    "  --doc-len-dist D        normal or lognormal (default normal; lognormal has\n"
    "                          the long tail of real corpora); each length drawn\n"
    "                          is kept within 1..2^31-1\n"
    "  --vocab V               tokens 0..V-1 (default 50257, GPT-2's)\n"
    "  --dtype T               uint8, int8, int16, uint16, int32, int64 (default\n"
    "                          uint16 when V < 65500, else int32, as Megatron's\n"
    "                          preprocessing picks)\n"
    "sharding:\n"
    "  --shard-size SIZE       start a new shard past SIZE bytes\n"
    "  --samples-per-shard N   start a new shard every N samples\n"
    "                          (npy and files: one sample per file; npz: N\n"
    "                          samples per file in DLIO's layout, x of shape\n"
    "                          (H, W, N) and y of N labels)\n"
    "other:\n"
    "  --seed S                random seed (default 0)\n"
    "  --force                 replace a dataset stoker generated in DIR (else DIR\n"
    "                          must be empty); anything else in DIR is left alone\n"
    "                          and gen stops, naming it\n"
    "  --no-index              tfrecord: do not write DALI .idx files\n"
    "  -q, --quiet             no progress line or summary\n";

enum { O_FORMAT = 256, O_SAMPLES, O_SIZE, O_SDEV, O_JPEG, O_QUALITY, O_CLASSES, O_SHARD_SIZE,
       O_PER_SHARD, O_SEED, O_FORCE, O_NOINDEX, O_DOC_LEN, O_DOC_SDEV, O_DOC_DIST, O_VOCAB,
       O_DTYPE, O_IMAGE_FORMAT };

static const struct option options[] = {
    {"format", 1, 0, O_FORMAT},           {"samples", 1, 0, O_SAMPLES},
    {"size", 1, 0, O_SIZE},               {"size-stdev", 1, 0, O_SDEV},
    {"jpeg", 1, 0, O_JPEG},               {"quality", 1, 0, O_QUALITY},
    {"image-format", 1, 0, O_IMAGE_FORMAT},
    {"classes", 1, 0, O_CLASSES},         {"shard-size", 1, 0, O_SHARD_SIZE},
    {"samples-per-shard", 1, 0, O_PER_SHARD}, {"seed", 1, 0, O_SEED},
    {"force", 0, 0, O_FORCE},             {"no-index", 0, 0, O_NOINDEX},
    {"doc-len", 1, 0, O_DOC_LEN},         {"doc-len-stdev", 1, 0, O_DOC_SDEV},
    {"doc-len-dist", 1, 0, O_DOC_DIST},   {"vocab", 1, 0, O_VOCAB},
    {"dtype", 1, 0, O_DTYPE},             {"quiet", 0, 0, 'q'},
    {0, 0, 0, 0}};

/* "WxH" into *w, *h; 0 or -1. */
static int parse_dims(const char *s, int *w, int *h) {
  char *e;
  long a = strtol(s, &e, 10);
  if (e == s || (*e != 'x' && *e != 'X')) return -1;
  const char *t = e + 1;
  long b = strtol(t, &e, 10);
  if (e == t || a < 1 || b < 1 || a > 16384 || b > 16384) return -1;
  *w = (int)a;
  *h = (int)b;
  return (*e == 0 || *e == '-') ? (int)(e - s) : -1;
}

static int parse_jpeg(const char *v, struct stk_gen_opts *g) {
  int n = parse_dims(v, &g->jpeg_min_w, &g->jpeg_min_h);
  if (n < 0) goto bad;
  g->jpeg_max_w = g->jpeg_min_w;
  g->jpeg_max_h = g->jpeg_min_h;
  if (v[n] == '-') {
    if (parse_dims(v + n + 1, &g->jpeg_max_w, &g->jpeg_max_h) < 0 || v[n + 1 + strcspn(v + n + 1, "-")])
      goto bad;
    if (g->jpeg_max_w < g->jpeg_min_w || g->jpeg_max_h < g->jpeg_min_h) goto bad;
  }
  return 0;
bad:
  cli_error("gen", "--jpeg: '%s' is not WxH or WxH-WxH (e.g. 256x256 or 200x150-500x400)", v);
  return -1;
}

static int parse_option(struct stk_gen_opts *g, int c, const char *v, int *quiet) {
  uint64_t x;
  switch (c) {
    case O_FORMAT: g->format = v; return 0;
    case O_SAMPLES: return cli_u64("gen", "--samples", v, 1, UINT64_MAX / 2, &g->samples);
    case O_SIZE:
      if (cli_size("gen", "--size", v, &g->size_mean)) return -1;
      if (g->size_mean == 0) { /* the library's 0 means the default: not what was typed */
        cli_error("gen", "--size: a sample needs at least 1 byte (leave --size out for the "
                         "default, 112KiB)");
        return -1;
      }
      return 0;
    case O_SDEV: return cli_size("gen", "--size-stdev", v, &g->size_stdev);
    case O_JPEG: return parse_jpeg(v, g);
    case O_IMAGE_FORMAT: g->image_format = v; return 0;
    case O_QUALITY:
      if (cli_u64("gen", "--quality", v, 1, 100, &x)) return -1;
      g->quality = (int)x;
      return 0;
    case O_CLASSES:
      if (cli_u64("gen", "--classes", v, 1, 1u << 30, &x)) return -1;
      g->classes = (uint32_t)x;
      return 0;
    case O_SHARD_SIZE: return cli_size("gen", "--shard-size", v, &g->shard_bytes);
    case O_PER_SHARD: return cli_u64("gen", "--samples-per-shard", v, 1, UINT64_MAX, &g->samples_per_shard);
    case O_SEED: return cli_u64("gen", "--seed", v, 0, UINT64_MAX, &g->seed);
    case O_FORCE: g->force = 1; return 0;
    case O_NOINDEX: g->no_index = 1; return 0;
    case O_DOC_LEN: return cli_u64("gen", "--doc-len", v, 1, INT32_MAX, &g->doc_len_mean);
    case O_DOC_SDEV: return cli_u64("gen", "--doc-len-stdev", v, 0, INT32_MAX, &g->doc_len_stdev);
    case O_DOC_DIST:
      if (!strcmp(v, "normal") || !strcmp(v, "lognormal")) {
        g->doc_len_lognormal = v[0] == 'l';
        return 0;
      }
      cli_error("gen", "--doc-len-dist: '%s' is not normal or lognormal", v);
      return -1;
    case O_VOCAB: return cli_u64("gen", "--vocab", v, 2, 1ull << 32, &g->vocab);
    case O_DTYPE: g->dtype = v; return 0;
    case 'q': *quiet = 1; return 0;
    default: return -1;
  }
}

/* ---- what --force may replace ----------------------------------------------- */

/* Written into DIR after a successful run: the names gen wrote there, one a
 * line, so --force later removes exactly those and nothing a user added.
 * Dot-named, so no dataset walk lists it. */
#define GEN_MARKER ".stoker-gen"

static int all_digits(const char *s, size_t n) {
  if (!n) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

/* ".ext" repeated to the end: lowercase letters and digits. */
static int exts_only(const char *s) {
  while (*s == '.') {
    const char *e = ++s;
    while ((*e >= 'a' && *e <= 'z') || (*e >= '0' && *e <= '9')) e++;
    if (e == s) return 0;
    s = e;
  }
  return *s == 0;
}

/* A name stoker's writer gives: "shard-00012.tar", "shard.00000.mds",
 * "shard-00000.tfrecord.idx", "index.json", its ".NAME.tmp" while being
 * written, and the markers of gen and bench. Datasets generated before the marker existed are still
 * recognised this way. */
static int gen_name(const char *n) {
  if (!strcmp(n, GEN_MARKER) || !strcmp(n, ".stoker-bench-complete") || !strcmp(n, "index.json"))
    return 1;
  size_t l = strlen(n);
  if (n[0] == '.' && l > 5 && !strcmp(n + l - 4, ".tmp")) {
    char inner[256];
    if (l - 5 >= sizeof inner) return 0;
    memcpy(inner, n + 1, l - 5);
    inner[l - 5] = 0;
    return gen_name(inner);
  }
  if (strncmp(n, "shard", 5) || (n[5] != '-' && n[5] != '.')) return 0;
  n += 6;
  size_t d = strspn(n, "0123456789");
  return d >= 5 && exts_only(n + d);
}

/* A one-sample file of the files format, "00000003.jpg": only trusted
 * inside a class folder, since a bare date-named file looks the same. */
static int sample_name(const char *n) {
  size_t d = strspn(n, "0123456789");
  return d == 8 && exts_only(n + d);
}

static int entry_is_dir(const char *dir, const struct dirent *de) {
  if (de->d_type != DT_UNKNOWN) return de->d_type == DT_DIR;
  char p[4352];
  struct stat st;
  if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) return 0;
  return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A class folder of the files format: digits only, holding only files
 * with gen's names. */
static int gen_class_dir(const char *dir, const char *name) {
  if (!all_digits(name, strlen(name))) return 0;
  char p[4352];
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
  DIR *d = opendir(p);
  if (!d) return 0;
  struct dirent *de;
  int ok = 1;
  while (ok && (de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      ok = !entry_is_dir(p, de) && (gen_name(de->d_name) || sample_name(de->d_name));
  closedir(d);
  return ok;
}

/* The names the marker lists, as one "\nname\n...\n" string (or NULL). */
static char *read_marker(const char *dir) {
  char p[4352];
  snprintf(p, sizeof p, "%s/" GEN_MARKER, dir);
  FILE *f = fopen(p, "r");
  if (!f) return NULL;
  size_t cap = 4096, n = 1;
  char *t = malloc(cap);
  if (t) t[0] = '\n';
  size_t r;
  while (t && (r = fread(t + n, 1, cap - n - 2, f)) > 0) {
    n += r;
    if (cap - n < 64) {
      char *g = realloc(t, cap *= 2);
      if (!g) free(t);
      t = g;
    }
  }
  fclose(f);
  if (t) {
    if (t[n - 1] != '\n') t[n++] = '\n';
    t[n] = 0;
  }
  return t;
}

static int listed(const char *marker, const char *name) {
  if (!marker) return 0;
  char key[300];
  if (strlen(name) > sizeof key - 3) return 0;
  snprintf(key, sizeof key, "\n%s\n", name);
  return strstr(marker, key) != NULL;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* With --force: DIR may hold only what gen wrote. 0 when so (or DIR is
 * missing), else -1 with the names in the way printed. */
static int check_force(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0; /* missing: nothing to replace; anything else stk_gen reports */
  char *marker = read_marker(dir);
  char **foreign = NULL;
  size_t nf = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
    int is_dir = entry_is_dir(dir, de);
    /* With a marker only what it lists (and gen's own dot files) is gen's;
     * without one (older datasets) gen's naming decides. A folder must be
     * a class folder holding only sample files either way. */
    if (is_dir ? gen_class_dir(dir, n)
               : (marker ? listed(marker, n) || (n[0] == '.' && gen_name(n)) : gen_name(n)))
      continue;
    char **g = realloc(foreign, (nf + 1) * sizeof *g);
    if (!g) break;
    foreign = g;
    foreign[nf] = malloc(strlen(n) + 2);
    if (!foreign[nf]) break;
    sprintf(foreign[nf++], "%s%s", n, is_dir ? "/" : "");
  }
  closedir(d);
  free(marker);
  if (!nf) {
    free(foreign);
    return 0;
  }
  qsort(foreign, nf, sizeof *foreign, cmp_str);
  char list[1024] = "";
  size_t shown = 0;
  for (; shown < nf && shown < 5; shown++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", shown ? ", " : "",
             foreign[shown]);
  if (nf > shown)
    snprintf(list + strlen(list), sizeof list - strlen(list), " and %zu more", nf - shown);
  cli_error("gen",
            "--force: %s holds files stoker did not write (%s); --force replaces only a dataset "
            "stoker generated: move them away or pick another DIR",
            dir, list);
  for (size_t i = 0; i < nf; i++) free(foreign[i]);
  free(foreign);
  return -1;
}

/* Record what this run wrote into DIR (it was empty, or held only gen's
 * files, which stk_gen removed first). */
static void write_marker(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char p[4352];
  snprintf(p, sizeof p, "%s/" GEN_MARKER, dir);
  struct stk_outfile *o;
  if (stk_outfile_open(&o, p, NULL)) {
    closedir(d);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && de->d_name[0] != '.')
      fprintf(stk_outfile_stream(o), "%s\n", de->d_name);
  closedir(d);
  stk_outfile_commit(o, NULL); /* without it, --force falls back to names */
}

struct progress {
  int show;
  uint64_t t0, last;
};

static int on_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes) {
  struct progress *p = ctx;
  if (p->show) {
    uint64_t now = stk_now_ns();
    if (now - p->last > 100000000ull || done == total) {
      char b[32];
      double s = (double)(now - p->t0) / 1e9;
      fprintf(stderr, "\rgen: %llu/%llu samples  %s  %.1f MiB/s ", (unsigned long long)done,
              (unsigned long long)total, stk_fmt_bytes(bytes, b, sizeof b),
              s > 0 ? (double)bytes / 1048576.0 / s : 0.0);
      p->last = now;
    }
  }
  return cli_stop_requested();
}

int cmd_gen_run(int argc, char **argv) {
  struct stk_gen_opts g;
  struct stk_gen_stats st = {0};
  memset(&g, 0, sizeof g);
  int quiet = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1)
    if (c == '?' || parse_option(&g, c, optarg, &quiet)) return CLI_USAGE;
  if (optind != argc - 1) {
    cli_error("gen", optind >= argc ? "missing DIR; see `stoker help gen`" : "one DIR only");
    return CLI_USAGE;
  }
  if (!g.format || !g.samples) {
    cli_error("gen", "--format and --samples are required; see `stoker help gen`");
    return CLI_USAGE;
  }
  g.dir = argv[optind];
  g.stats = &st;
  if (g.force && check_force(g.dir)) return CLI_FAIL;
  struct progress p = {.show = !quiet && cli_progress_enabled(), .t0 = stk_now_ns()};
  cli_catch_signals();
  char err[STK_ERRMSG_MAX];
  int rc = stk_gen(&g, on_progress, &p, err);
  if (p.show) fputc('\n', stderr);
  if (rc == STK_ECANCELED && cli_stop_requested()) {
    cli_error("gen", "interrupted; removed the partial dataset");
    return CLI_INTERRUPTED;
  }
  if (rc) {
    cli_error("gen", "%s", err);
    return rc == STK_EINVAL ? CLI_USAGE : CLI_FAIL;
  }
  write_marker(g.dir);
  if (!quiet) {
    char b[32];
    double s = (double)st.wall_ns / 1e9;
    printf("wrote %llu samples in %llu shard%s (%s) to %s in %.2f s, %.1f MiB/s\n",
           (unsigned long long)st.samples, (unsigned long long)st.shards,
           st.shards == 1 ? "" : "s", stk_fmt_bytes(st.bytes, b, sizeof b), g.dir, s,
           s > 0 ? (double)st.bytes / 1048576.0 / s : 0.0);
  }
  return CLI_OK;
}
