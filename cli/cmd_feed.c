/* stoker feed: stream a dataset through the loader to a consumer that
 * takes a fixed time per batch, and report throughput, the consumer's wait
 * and what each pipeline stage did. With no dataset it generates a small
 * JPEG dataset once (under $TMPDIR) and feeds that. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_tokens.h"

const char cmd_feed_usage[] =
    "usage: stoker feed [DATASET|URL] [OPTIONS]\n"
    "\n"
    "Stream DATASET through the loader (sampler -> reads -> decode -> batches ->\n"
    "prefetch ring) and report throughput, the consumer's wait and per-stage times.\n"
    "Without DATASET, a 2,048-image JPEG dataset is generated once under $TMPDIR\n"
    "and decoded with the ResNet-50 training transform. A URL (http(s)://, s3://,\n"
    "file://) is read through the shard cache (see the cache options).\n"
    "\n"
    "dataset:\n"
    "  --format F          tfrecord, wds, npy, npz, mds, files (default: detect)\n"
    "pipeline:\n"
    "  --batch N           samples per batch (default 64)\n"
    "  --threads N         decode workers (default: number of cores)\n"
    "  --epochs N          epochs to run (default 1)\n"
    "  --drop-last         drop the last partial batch of each epoch\n"
    "  --consumer-ms X     the consumer's time per batch in ms (default 0)\n"
    "  --limit N           stop after N batches (with --save-state: resume later)\n"
    "sampling:\n"
    "  --shuffle MODE      auto, none, global, block (default auto: global for\n"
    "                      random-access formats, block otherwise)\n"
    "  --seed S            shuffle and augmentation seed (default 0)\n"
    "  --window N          block-shuffle window in samples (default 4096)\n"
    "  --rank R --world W  read rank R's share of W ranks (default 0 of 1)\n"
    "  --shares S          uneven|pad|drop: when W does not divide the epoch, ranks\n"
    "                      take shares differing by one (uneven, default), or all the\n"
    "                      same, the last round wrapping to the epoch's start (pad) or\n"
    "                      left out (drop), as DistributedSampler does\n"
    "  --resume FILE       continue from a state saved with --save-state (on this\n"
    "                      dataset: a state saved on another one is refused)\n"
    "  --save-state FILE   write the sampler state after the last batch\n"
    "decode:\n"
    "  --decode KIND       raw, jpeg, npy, fields (every field of a sample, packed\n"
    "                      with its name, type and shape; default raw; jpeg for the\n"
    "                      default dataset); jpeg takes JPEG, PNG and WebP, told by\n"
    "                      their bytes\n"
    "  --field NAME        field to decode (default: the first of each sample); with\n"
    "                      --decode fields, the fields to keep: jpg,cls (default: all)\n"
    "  --size HxW          jpeg output size (default 224x224)\n"
    "  --dtype T           u8 or f32 (normalized) (default u8)\n"
    "  --layout L          hwc or chw (default hwc)\n"
    "  --eval              center crop instead of random resized crop and flip\n"
    "I/O and memory:\n"
    "  --engine E          auto, io_uring, pread, mmap, mapcopy (default auto: mmap\n"
    "                      for samples of 8 MiB or more, whose batches are the\n"
    "                      files' pages: a file rewritten in place changes them;\n"
    "                      64 KiB or more: mapcopy for TFRecord with CRCs\n"
    "                      checked (copies out of kept mappings, the CRC in\n"
    "                      the copy's pass; a file truncated under it is a\n"
    "                      short read), pread otherwise; io_uring below)\n"
    "  --direct            O_DIRECT reads (bypass the page cache)\n"
    "  --no-verify         do not check stored checksums\n"
    "  --on-error MODE     skip or fail: a sample that cannot be read or decoded is\n"
    "                      left out and counted, or stops the run naming its file\n"
    "                      and why (default skip, but 64 failures in a row stop\n"
    "                      the run)\n"
    "  --prefetch N        initial ring depth in batches (default 2; token windows:\n"
    "                      4, growing only while the consumer keeps batches)\n"
    "  --prefetch-max N    depth the ring may grow to (default 16)\n"
    "  --mem-cap SIZE      cap on batch buffers (default: four batches of the mean\n"
    "                      sample, at least 1GiB, at most half the RAM)\n"
    "  --inflight SIZE     bytes of reads in flight (default: two mean samples, at\n"
    "                      least 64MiB, at most half the memory cap)\n"
    CLI_CACHE_USAGE
    CLI_TOKENS_USAGE
    "                      (--seed defaults to Megatron's 1234 here; --epochs is\n"
    "                      passes over the split when --samples is not given)\n"
    "output:\n"
    "  --json              print the report as JSON on stdout\n"
    "  -q, --quiet         no progress line\n";

struct feed_args {
  const char *path, *format, *resume, *save_state;
  struct stk_loader_opts lo; /* lo.sampler and lo.decode point at so and dc */
  struct stk_sampler_opts so;
  struct stk_decode_cfg dc;
  struct stk_cache_opts cache;
  double consumer_ms;
  uint64_t limit;
  int json, quiet, default_dataset, seed_set;
  struct cli_tokens tk; /* token windows (cli_tokens.c) */
};

enum {
  O_FORMAT = 256, O_BATCH, O_THREADS, O_EPOCHS, O_DROP_LAST, O_CONSUMER, O_LIMIT, O_SHUFFLE,
  O_SEED, O_WINDOW, O_RANK, O_WORLD, O_RESUME, O_SAVE, O_DECODE, O_FIELD, O_SIZE, O_DTYPE,
  O_LAYOUT, O_EVAL, O_ENGINE, O_DIRECT, O_NOVERIFY, O_ONERROR, O_PREFETCH, O_PREFETCH_MAX,
  O_MEMCAP, O_INFLIGHT, O_JSON, O_SHARES
};

static const struct option options[] = {
    {"format", 1, 0, O_FORMAT},     {"batch", 1, 0, O_BATCH},
    {"threads", 1, 0, O_THREADS},   {"epochs", 1, 0, O_EPOCHS},
    {"drop-last", 0, 0, O_DROP_LAST}, {"consumer-ms", 1, 0, O_CONSUMER},
    {"limit", 1, 0, O_LIMIT},       {"shuffle", 1, 0, O_SHUFFLE},
    {"seed", 1, 0, O_SEED},         {"window", 1, 0, O_WINDOW},
    {"rank", 1, 0, O_RANK},         {"world", 1, 0, O_WORLD},
    {"resume", 1, 0, O_RESUME},     {"save-state", 1, 0, O_SAVE},
    {"decode", 1, 0, O_DECODE},     {"field", 1, 0, O_FIELD},
    {"size", 1, 0, O_SIZE},         {"dtype", 1, 0, O_DTYPE},
    {"layout", 1, 0, O_LAYOUT},     {"eval", 0, 0, O_EVAL},
    {"engine", 1, 0, O_ENGINE},     {"direct", 0, 0, O_DIRECT},
    {"no-verify", 0, 0, O_NOVERIFY}, {"on-error", 1, 0, O_ONERROR},
    {"prefetch", 1, 0, O_PREFETCH}, {"prefetch-max", 1, 0, O_PREFETCH_MAX},
    {"mem-cap", 1, 0, O_MEMCAP},    {"inflight", 1, 0, O_INFLIGHT},
    {"json", 0, 0, O_JSON},         {"quiet", 0, 0, 'q'},
    {"shares", 1, 0, O_SHARES},     CLI_TOKENS_OPTIONS,
    CLI_CACHE_OPTIONS,              {0, 0, 0, 0}};

/* Index of s in the NULL-terminated list, or -1 with an error printed. */
static int pick(const char *opt, const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (strcmp(s, names[i]) == 0) return i;
  char all[256] = "";
  for (int i = 0; names[i]; i++) {
    strcat(all, i ? ", " : "");
    strcat(all, names[i]);
  }
  cli_error("feed", "%s: '%s' is not one of %s", opt, s, all);
  return -1;
}

static int parse_u32(const char *opt, const char *v, uint64_t min, uint64_t max, uint32_t *out) {
  uint64_t x;
  if (cli_u64("feed", opt, v, min, max, &x)) return -1;
  *out = (uint32_t)x;
  return 0;
}

static int parse_option(struct feed_args *a, int c, const char *v) {
  static const char *const shuffles[] = {"auto", "none", "global", "block", NULL};
  static const char *const decodes[] = {"raw", "jpeg", "npy", "fields", NULL};
  static const char *const dtypes[] = {"u8", "f32", NULL};
  static const char *const layouts[] = {"hwc", "chw", NULL};
  static const char *const onerr[] = {"skip", "fail", NULL};
  struct stk_loader_opts *o = &a->lo;
  uint64_t x;
  int k = cli_cache_option("feed", c, v, &a->cache);
  if (k <= 0) return k;
  if ((k = cli_tokens_option("feed", c, v, &a->tk)) <= 0) return k;
  switch (c) {
    case O_FORMAT: a->format = v; return 0;
    case O_BATCH: return parse_u32("--batch", v, 1, 1u << 20, &o->batch_size);
    case O_THREADS: return parse_u32("--threads", v, 1, 1024, &o->threads);
    case O_EPOCHS: return parse_u32("--epochs", v, 1, 1000000, &o->epochs);
    case O_DROP_LAST: o->drop_last = 1; return 0;
    case O_CONSUMER: return cli_double("feed", "--consumer-ms", v, 0, 3600e3, &a->consumer_ms);
    case O_LIMIT: return cli_u64("feed", "--limit", v, 1, UINT64_MAX, &a->limit);
    case O_SHUFFLE:
      if ((k = pick("--shuffle", v, shuffles)) < 0) return -1;
      a->so.shuffle = (enum stk_shuffle)k;
      return 0;
    case O_SEED:
      a->seed_set = 1;
      return cli_u64("feed", "--seed", v, 0, UINT64_MAX, &a->so.seed);
    case O_WINDOW: return cli_u64("feed", "--window", v, 1, UINT64_MAX, &a->so.shuffle_window);
    case O_RANK: return parse_u32("--rank", v, 0, 1u << 20, &a->so.rank);
    case O_SHARES: {
      static const char *const shares[] = {"uneven", "pad", "drop", NULL};
      if ((k = pick("--shares", v, shares)) < 0) return -1;
      o->shares = k;
      return 0;
    }
    case O_WORLD: return parse_u32("--world", v, 1, 1u << 20, &a->so.world);
    case O_RESUME: a->resume = v; return 0;
    case O_SAVE: a->save_state = v; return 0;
    case O_DECODE:
      if ((k = pick("--decode", v, decodes)) < 0) return -1;
      a->dc.kind = k;
      return 0;
    case O_FIELD: a->dc.field = v; return 0;
    case O_SIZE: {
      int h, w;
      char tail;
      if (sscanf(v, "%dx%d%c", &h, &w, &tail) != 2 || h < 1 || w < 1 || h > 16384 || w > 16384) {
        cli_error("feed", "--size: '%s' is not HxW (example: 224x224)", v);
        return -1;
      }
      a->dc.out_h = h;
      a->dc.out_w = w;
      return 0;
    }
    case O_DTYPE:
      if ((k = pick("--dtype", v, dtypes)) < 0) return -1;
      a->dc.dtype = k;
      return 0;
    case O_LAYOUT:
      if ((k = pick("--layout", v, layouts)) < 0) return -1;
      a->dc.layout = k;
      return 0;
    case O_EVAL: a->dc.train = 0; return 0;
    case O_ENGINE: o->io_engine = v; return 0;
    case O_DIRECT: o->direct = 1; return 0;
    case O_NOVERIFY: o->skip_verify = 1; return 0;
    case O_ONERROR:
      if ((k = pick("--on-error", v, onerr)) < 0) return -1;
      o->on_error = k ? STK_ON_ERROR_FAIL : STK_ON_ERROR_SKIP;
      return 0;
    case O_PREFETCH: return parse_u32("--prefetch", v, 1, 4096, &o->prefetch);
    case O_PREFETCH_MAX: return parse_u32("--prefetch-max", v, 1, 4096, &o->prefetch_max);
    case O_MEMCAP: return cli_size("feed", "--mem-cap", v, &o->mem_cap);
    case O_INFLIGHT:
      if (cli_size("feed", "--inflight", v, &x)) return -1;
      o->max_inflight = x;
      return 0;
    case O_JSON: a->json = 1; return 0;
    case 'q': a->quiet = 1; return 0;
    default: return -1;
  }
}

/* ---- state files --------------------------------------------------------- */

/* A saved state: the sampler's position plus the dataset it was saved on
 * (its fingerprint, shard and sample counts), so a resume on another
 * dataset is refused instead of silently reading a different order. */
struct saved_state {
  struct stk_sampler_state st;
  uint64_t shards, samples; /* 0 in a state from before fingerprints */
};

/* A whole number only: "1e3", "1.5" or "-1" is refused naming the key (sscanf
 * read 1e3 as 1 and -1 as 2^64 - 1). */
static int json_u64(const char *buf, const char *key, unsigned long long *v) {
  const char *k = strstr(buf, key);
  const char *p = k ? strchr(k, ':') : NULL;
  if (!p) return -1;
  while (*++p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
  }
  char *end;
  errno = 0;
  *v = strtoull(p, &end, 10);
  if (*p >= '0' && *p <= '9' && !errno && strchr(" \t\r\n,}", *end)) return 0;
  cli_error("feed", "--resume: %s is '%.*s', not a whole number", key, (int)strcspn(p, ",}\n"), p);
  return -1;
}

static int read_state(const char *path, struct saved_state *ss) {
  FILE *f = fopen(path, "r");
  if (!f) {
    cli_error("feed", "--resume: cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  unsigned long long seed, epoch, pos, shards = 0, samples = 0, fp = 0;
  if (json_u64(buf, "\"seed\"", &seed) || json_u64(buf, "\"epoch\"", &epoch) ||
      json_u64(buf, "\"position\"", &pos)) {
    cli_error("feed", "--resume: %s is not a stoker sampler state (seed, epoch, position)", path);
    return -1;
  }
  const char *k = strstr(buf, "\"dataset_fingerprint\"");
  if (k) {
    const char *q = strchr(k + 21, '"');
    if (!q || sscanf(q + 1, "%16llx", &fp) != 1 || fp == 0 ||
        json_u64(buf, "\"dataset_shards\"", &shards) ||
        json_u64(buf, "\"dataset_samples\"", &samples)) {
      cli_error("feed", "--resume: %s: unreadable dataset fingerprint", path);
      return -1;
    }
  }
  memset(ss, 0, sizeof *ss);
  ss->st.seed = seed;
  ss->st.epoch = epoch;
  ss->st.position = pos;
  ss->st.dataset_fp = fp;
  ss->shards = shards;
  ss->samples = samples;
  return 0;
}

/* Whether the state belongs to ds: 0, or -1 with the reason printed. An
 * older state without a fingerprint is accepted with a note. */
static int check_state(const char *path, const struct saved_state *ss, struct stk_dataset *ds,
                       const char *dpath) {
  if (!ss->st.dataset_fp) {
    fprintf(stderr,
            "stoker feed: note: %s was saved by an older stoker and records no dataset "
            "fingerprint; resuming without checking that it belongs to %s\n",
            path, dpath);
    return 0;
  }
  if (ss->st.dataset_fp == stk_sampler_fingerprint(ds)) return 0;
  int complete;
  uint64_t shards = stk_dataset_num_shards(ds), samples = stk_dataset_samples_counted(ds, &complete);
  if (shards != ss->shards || (complete && samples != ss->samples))
    cli_error("feed",
              "--resume: %s was saved on another dataset (%llu shards, %llu samples; %s has "
              "%llu shards, %llu samples)",
              path, (unsigned long long)ss->shards, (unsigned long long)ss->samples, dpath,
              (unsigned long long)shards, (unsigned long long)samples);
  else
    cli_error("feed",
              "--resume: %s was saved on another dataset (same counts as %s, but other shard "
              "names or sizes)",
              path, dpath);
  return -1;
}

/* Token windows (tk) record their own fingerprint (corpus and window
 * configuration), which the loader checks on resume. */
static int write_state(const char *path, const struct stk_sampler_state *st,
                       struct stk_dataset *ds, const struct stk_tokens *tk) {
  struct stk_outfile *o;
  if (cli_out_open("feed", "--save-state", path, &o)) return -1;
  fprintf(stk_outfile_stream(o),
          "{\"seed\": %" PRIu64 ", \"epoch\": %" PRIu64 ", \"position\": %" PRIu64
          ", \"dataset_fingerprint\": \"%016" PRIx64 "\", \"dataset_shards\": %zu"
          ", \"dataset_samples\": %" PRIu64 "}\n",
          st->seed, st->epoch, st->position,
          tk ? stk_tokens_fingerprint(tk) : stk_sampler_fingerprint(ds),
          tk ? (size_t)stk_tokens_num_sources(tk) : stk_dataset_num_shards(ds),
          tk ? stk_tokens_num_windows(tk) : stk_dataset_samples_counted(ds, NULL));
  return cli_out_commit("feed", "--save-state", o);
}

/* ---- the default dataset -------------------------------------------------- */

/* Generate (once) the dataset `stoker feed` uses when given none. */
static int default_dataset(char *path, size_t n, int quiet) {
  const char *tmp = getenv("TMPDIR");
  snprintf(path, n, "%s/stoker-feed-default-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
  char done[4200];
  snprintf(done, sizeof done, "%s/.complete", path);
  struct stat st;
  if (stat(done, &st) == 0) return 0;
  if (!quiet) fprintf(stderr, "stoker feed: generating the default dataset in %s (once)\n", path);
  struct stk_gen_opts g;
  memset(&g, 0, sizeof g);
  g.dir = path;
  g.format = "tfrecord";
  g.samples = 2048;
  g.samples_per_shard = 256;
  g.jpeg_min_w = 200;
  g.jpeg_min_h = 160;
  g.jpeg_max_w = 400;
  g.jpeg_max_h = 320;
  g.quality = 90;
  g.seed = 1;
  g.force = 1;
  char err[STK_ERRMSG_MAX];
  int rc = stk_gen(&g, NULL, NULL, err);
  if (rc) {
    cli_error("feed", "cannot generate the default dataset: %s", err);
    return -1;
  }
  FILE *f = fopen(done, "w");
  if (f) fclose(f);
  return 0;
}

/* ---- report --------------------------------------------------------------- */

static void print_report(const struct feed_args *a, struct stk_dataset *ds, struct stk_loader *l,
                         const struct stk_loader_stats *st, int interrupted,
                         const struct stk_tokens *tk) {
  const char *name = a->path ? a->path : a->tk.blend;
  if (a->json) {
    struct stk_json j;
    stk_json_init(&j, stdout, 2);
    stk_json_obj_begin(&j);
    if (tk) {
      stk_json_kstr(&j, "dataset", name);
      stk_json_kstr(&j, "format", "megatron");
      cli_tokens_json(&j, tk, st);
    } else {
      stk_json_kstr(&j, "dataset", a->path);
      stk_json_kstr(&j, "format", stk_dataset_format(ds));
      int complete;
      stk_json_ku64(&j, "dataset_samples", stk_dataset_samples_counted(ds, &complete));
      /* false: a remote dataset without a manifest, whose shards not
       * reached yet are not counted (dataset_samples is what was counted) */
      stk_json_key(&j, "dataset_samples_complete");
      stk_json_bool(&j, complete);
      stk_json_ku64(&j, "shards", stk_dataset_num_shards(ds));
      stk_json_kstr(&j, "engine", stk_loader_engine(l));
    }
    stk_json_ku64(&j, "batch", a->lo.batch_size);
    stk_json_ku64(&j, "threads", a->lo.threads);
    stk_json_kdbl(&j, "consumer_ms", a->consumer_ms);
    stk_json_key(&j, "interrupted");
    stk_json_bool(&j, interrupted);
    stk_json_key(&j, "stats");
    stk_loader_stats_json(st, &j);
    stk_json_obj_end(&j);
    return;
  }
  double wall = (double)st->wall_ns / 1e9;
  char mem[32];
  printf("%s: %" PRIu64 " batches, %" PRIu64 " samples in %.2f s%s\n", name, st->batches,
         st->samples, wall, interrupted ? " (interrupted)" : "");
  printf("  throughput     %.0f samples/s, %.1f MiB/s\n", wall > 0 ? (double)st->samples / wall : 0,
         wall > 0 ? (double)st->bytes / 1048576.0 / wall : 0);
  if (tk) {
    cli_tokens_rate(stdout, tk, st);
    cli_tokens_describe(stdout, tk, &a->tk);
  }
  printf("  consumer wait  %.1f%% of wall time; per batch p50 %.0f us, p99 %.0f us, max %.0f us\n",
         st->wall_ns ? 100.0 * (double)st->consumer_wait_ns / (double)st->wall_ns : 0,
         (double)st->wait_p50_ns / 1e3, (double)st->wait_p99_ns / 1e3, (double)st->wait_max_ns / 1e3);
  char peak[32], cap[32];
  printf("  ring           depth %u now, %u at most; batch buffers %s (peak %s, cap %s)\n",
         st->ring_depth, st->ring_depth_max, stk_fmt_bytes(st->mem_bytes, mem, sizeof mem),
         stk_fmt_bytes(st->mem_peak, peak, sizeof peak), stk_fmt_bytes(st->mem_cap, cap, sizeof cap));
  if (st->mem_over_cap)
    printf("  memory cap     exceeded %" PRIu64 " time(s): the consumer held every other batch\n",
           st->mem_over_cap);
  printf("  reads          %" PRIu64 " requests, %.1f MiB (engine %s)\n", st->read_ops,
         (double)st->read_bytes / 1048576.0, stk_loader_engine(l));
  if (st->skipped)
    printf("  skipped        %" PRIu64 " bad samples (the first is in the log; --on-error fail "
           "stops at it)\n",
           st->skipped);
  if (st->has_cache) cli_cache_report(stdout, &st->cache); /* a remote corpus's chunks */
  printf("\n  %-8s %7s %9s %10s %11s %10s %10s\n", "stage", "threads", "busy s", "wait-in s",
         "wait-out s", "items", "MiB");
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    const struct stk_stage_stats *s = &st->stage[i];
    printf("  %-8s %7u %9.3f %10.3f %11.3f %10" PRIu64 " %10.1f\n", s->name, s->threads,
           (double)s->busy_ns / 1e9, (double)s->wait_in_ns / 1e9, (double)s->wait_out_ns / 1e9,
           s->items, (double)s->bytes / 1048576.0);
  }
}

static void progress(const struct stk_loader_stats *st, const struct stk_batch *b, int epochs) {
  double wall = (double)st->wall_ns / 1e9;
  fprintf(stderr, "\r  epoch %" PRIu64 "/%d  batch %" PRIu64 "  %.0f samples/s  wait %.1f%%   ",
          b->epoch + 1, epochs, st->batches, wall > 0 ? (double)st->samples / wall : 0,
          st->wall_ns ? 100.0 * (double)st->consumer_wait_ns / (double)st->wall_ns : 0);
}

static int run(struct feed_args *a) {
  char err[STK_ERRMSG_MAX];
  struct saved_state resume;
  if (a->resume) {
    if (read_state(a->resume, &resume)) return CLI_USAGE;
    a->lo.resume = &resume.st;
  }
  if (a->save_state && cli_out_check("feed", "--save-state", a->save_state)) return CLI_USAGE;
  struct stk_dataset *ds = NULL;
  struct stk_tokens *tk = NULL;
  struct stk_dataset_opts dopts = {.format = a->format, .cache = &a->cache};
  /* Signals are caught from here: opening a remote dataset and the first
   * shards it waits for stop at SIGINT/SIGTERM as the run does. */
  cli_catch_signals();
  a->cache.cancel = (const int *)&cli_interrupted;
  if (cli_tokens_wanted(&a->tk)) { /* token windows: the loader over them */
    if (a->seed_set) a->tk.o.seed = (uint32_t)a->so.seed;
    a->tk.o.epochs = a->lo.epochs;
    a->lo.epochs = 1;
    int r = cli_tokens_open("feed", a->path, &a->tk, &dopts, &tk);
    if (r) {
      cli_tokens_free(&a->tk);
      return r;
    }
  }
  int rc = tk ? 0 : stk_dataset_open(&ds, a->path, &dopts, err);
  if (rc == STK_ECANCELED && cli_stop_requested()) {
    cli_error("feed", "interrupted");
    return CLI_INTERRUPTED;
  }
  if (rc) {
    cli_error("feed", "%s", err);
    return CLI_FAIL;
  }
  if (ds && a->resume && check_state(a->resume, &resume, ds, a->path)) {
    stk_dataset_close(ds);
    return CLI_USAGE;
  }
  struct stk_loader *l;
  rc = tk ? stk_loader_open_tokens(&l, tk, &a->lo, err) : stk_loader_open(&l, ds, &a->lo, err);
  if (rc) {
    cli_error("feed", "%s", err);
    stk_dataset_close(ds);
    stk_tokens_close(tk);
    cli_tokens_free(&a->tk);
    return CLI_FAIL;
  }
  cli_catch_signals();
  int show = !a->quiet && !a->json && cli_progress_enabled();
  uint64_t last_draw = 0, consumer_ns = (uint64_t)(a->consumer_ms * 1e6), n = 0;
  struct stk_batch *b;
  struct stk_loader_stats st;
  int result = CLI_OK;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    if (consumer_ns) stk_sleep_ns(consumer_ns);
    if (show && stk_now_ns() - last_draw > 250000000ull) {
      stk_loader_stats(l, &st);
      progress(&st, b, (int)(a->lo.epochs ? a->lo.epochs : 1));
      last_draw = stk_now_ns();
    }
    stk_batch_release(l, b);
    if (cli_stop_requested()) stk_loader_cancel(l);
    if (a->limit && ++n >= a->limit) break;
  }
  if (show) fputs("\r\033[K", stderr);
  stk_loader_stats(l, &st);
  if (rc == STK_ECANCELED || cli_stop_requested()) {
    result = CLI_INTERRUPTED;
  } else if (rc && rc != STK_EOF) {
    cli_error("feed", "%s", stk_loader_errmsg(l));
    result = CLI_FAIL;
  }
  if (result != CLI_FAIL) print_report(a, ds, l, &st, result == CLI_INTERRUPTED, tk);
  if (a->save_state && result != CLI_FAIL) {
    struct stk_sampler_state s;
    stk_loader_state(l, &s);
    if (write_state(a->save_state, &s, ds, tk)) result = CLI_FAIL;
  }
  stk_loader_close(l);
  stk_dataset_close(ds);
  stk_tokens_close(tk);
  cli_tokens_free(&a->tk);
  return result;
}

int cmd_feed_run(int argc, char **argv) {
  struct feed_args a;
  memset(&a, 0, sizeof a);
  stk_loader_opts_init(&a.lo);
  stk_sampler_opts_init(&a.so);
  stk_decode_cfg_init(&a.dc);
  a.lo.sampler = &a.so;
  a.lo.decode = &a.dc;
  a.lo.batch_size = 64;
  a.dc.train = 1;
  a.dc.kind = -1;
  cli_tokens_init(&a.tk);
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    if (c == '?' || parse_option(&a, c, optarg)) {
      if (c == '?') fprintf(stderr, "`stoker help feed` lists the options\n");
      return CLI_USAGE;
    }
  }
  if (optind + 1 < argc) {
    cli_error("feed", "one dataset at a time (got '%s' and '%s')", argv[optind], argv[optind + 1]);
    return CLI_USAGE;
  }
  char defpath[4096];
  if (optind < argc) {
    a.path = argv[optind];
  } else if (cli_tokens_wanted(&a.tk)) {
    a.path = NULL; /* --blend names them */
  } else {
    if (default_dataset(defpath, sizeof defpath, a.quiet || a.json)) return CLI_FAIL;
    a.path = defpath;
    a.default_dataset = 1;
    if (a.dc.kind < 0) a.dc.kind = STK_DECODE_JPEG;
  }
  if (a.dc.kind < 0) a.dc.kind = STK_DECODE_RAW;
  if (a.so.world && a.so.rank >= a.so.world) {
    cli_error("feed", "--rank %u must be below --world %u", a.so.rank, a.so.world);
    return CLI_USAGE;
  }
  return run(&a);
}
