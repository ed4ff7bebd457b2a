/* stoker cache: manage a shard-cache directory (stats, warm, verify, evict)
 * and write the manifest that lets a dataset be served remotely. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char cmd_cache_usage[] =
    "usage: stoker cache ACTION [ARGS] [OPTIONS]\n"
    "\n"
    "  stats --cache-dir DIR [--list] [--json]\n"
    "        entries, bytes, and the counters every process added (a read-only\n"
    "        directory too: another user's, a read-only mount)\n"
    "  warm URL --cache-dir DIR [cache options]\n"
    "        stage every shard of the dataset at URL (parallel fetches); URL may be\n"
    "        a folder (listed: S3, nginx/Apache/http.server listings), one shard, a\n"
    "        brace pattern ('https://h/shard-{0000..0099}.tar') or a shard list\n"
    "  verify --cache-dir DIR\n"
    "        check every entry's size and CRC32C; corrupt entries are removed\n"
    "        (and re-staged from the origin on next use)\n"
    "  evict --cache-dir DIR (--to SIZE | --all)\n"
    "        evict least recently used entries not in use by any process\n"
    "  manifest DIR [--format F]\n"
    "        write DIR/stoker-manifest.json (per shard: name, bytes, samples,\n"
    "        CRC32C), so that a copy of DIR served over HTTP or S3 opens with one\n"
    "        request and every fetched shard is checked\n"
    "\n"
    "options:\n"
    "  --format F        dataset format (default: detect)\n"
    "  --to SIZE         evict: keep at most SIZE\n"
    "  --all             evict: everything not in use\n"
    "  --list            stats: one line per entry, least recently used first\n"
    "  --json            stats: JSON on stdout\n"
    "  -q, --quiet       no progress line\n" CLI_CACHE_USAGE;

enum { O_FORMAT = 256, O_TO, O_ALL, O_LIST, O_JSON };

static const struct option options[] = {
    {"format", 1, 0, O_FORMAT}, {"to", 1, 0, O_TO},     {"all", 0, 0, O_ALL},
    {"list", 0, 0, O_LIST},     {"json", 0, 0, O_JSON}, {"quiet", 0, 0, 'q'},
    CLI_CACHE_OPTIONS,          {0, 0, 0, 0}};

struct args {
  const char *action, *target, *format;
  struct stk_cache_opts cache;
  uint64_t to;
  int have_to, all, list, json, quiet;
};

struct lister {
  struct stk_json *j;
  uint64_t now;
};

static int list_entry(void *arg, const struct stk_cache_dir_entry *e) {
  struct lister *L = arg;
  double age = L->now > e->last_use_ns ? (double)(L->now - e->last_use_ns) / 1e9 : 0;
  if (L->j) {
    stk_json_obj_begin(L->j);
    stk_json_kstr(L->j, "key", e->key);
    stk_json_kstr(L->j, "origin", e->origin);
    stk_json_ku64(L->j, "bytes", e->bytes);
    stk_json_kdbl(L->j, "idle_s", age);
    stk_json_key(L->j, "in_use");
    stk_json_bool(L->j, e->in_use);
    stk_json_obj_end(L->j);
    return 0;
  }
  char b[32];
  printf("  %-60s %10s  idle %8.0f s%s\n", e->key, stk_fmt_bytes(e->bytes, b, sizeof b), age,
         e->in_use ? "  in use" : "");
  return 0;
}

static int do_stats(struct args *a) {
  char err[STK_ERRMSG_MAX];
  struct stk_cache_stats t = {0};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct lister L = {NULL, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec};
  struct stk_json j;
  if (a->json) {
    stk_json_init(&j, stdout, 2);
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "cache_dir", a->cache.dir);
    if (a->list) {
      stk_json_key(&j, "entries");
      stk_json_arr_begin(&j);
      L.j = &j;
    }
  } else if (a->list) {
    printf("%s: entries, least recently used first\n", a->cache.dir);
  }
  int rc = stk_cache_dir_scan(a->cache.dir, a->list ? list_entry : NULL, &L, &t, err);
  if (rc) {
    if (a->json) fflush(stdout);
    cli_error("cache", "%s", err);
    return CLI_FAIL;
  }
  char b1[32], b2[32];
  if (a->json) {
    if (a->list) stk_json_arr_end(&j);
    stk_json_ku64(&j, "entry_count", t.disk.entries);
    stk_json_ku64(&j, "bytes", t.disk.bytes);
    stk_json_key(&j, "counters");
    stk_cache_stats_json(&t, &j);
    stk_json_obj_end(&j);
    putchar('\n');
    return CLI_OK;
  }
  printf("%s: %" PRIu64 " shards, %s\n", a->cache.dir, t.disk.entries,
         stk_fmt_bytes(t.disk.bytes, b1, sizeof b1));
  printf("  summed over every process that used it:\n");
  printf("  disk tier      %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " evicted\n", t.disk.hits,
         t.disk.misses, t.disk.evictions);
  printf("  RAM tier       %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " evicted\n", t.ram.hits,
         t.ram.misses, t.ram.evictions);
  printf("  origin         %" PRIu64 " shards fetched, %s received in %" PRIu64 " requests, %" PRIu64
         " retries, %" PRIu64 " errors\n",
         t.fetches, stk_fmt_bytes(t.fetch_bytes, b2, sizeof b2), t.requests, t.retries, t.errors);
  printf("  staging        %" PRIu64 " staged ahead, %" PRIu64 " reads waited for a fetch, %" PRIu64
         " re-staged, %" PRIu64 " shared with other processes\n",
         t.prefetched, t.stalls, t.restages, t.shared_waits);
  return CLI_OK;
}

static void warm_progress(void *arg, size_t done, size_t total) {
  uint64_t *last = arg, now = stk_now_ns();
  if (now - *last < 200000000ull && done != total) return;
  *last = now;
  fprintf(stderr, "\rcache warm: %zu/%zu shards ", done, total);
}

static int do_warm(struct args *a) {
  if (!a->target) {
    cli_error("cache", "warm: missing URL; see `stoker help cache`");
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_dataset *ds;
  struct stk_dataset_opts o = {.format = a->format, .cache = &a->cache};
  cli_catch_signals();
  int rc = stk_dataset_open(&ds, a->target, &o, err);
  if (rc) {
    cli_error("cache", "%s", err);
    return CLI_FAIL;
  }
  uint64_t t0 = stk_now_ns(), last = 0;
  int show = !a->quiet && cli_progress_enabled();
  rc = stk_dataset_warm(ds, (const int *)&cli_interrupted, show ? warm_progress : NULL, &last, err);
  if (show) fputs("\r\033[K", stderr);
  struct stk_cache_stats st = {0};
  stk_dataset_cache_stats(ds, &st);
  double s = (double)(stk_now_ns() - t0) / 1e9;
  int result = CLI_OK;
  if (rc == STK_ECANCELED || cli_stop_requested()) {
    result = CLI_INTERRUPTED;
  } else if (rc) {
    cli_error("cache", "%s", err);
    result = CLI_FAIL;
  }
  if (result != CLI_FAIL) {
    printf("%s: %zu shards staged in %s in %.2f s (%.1f MiB/s fetched)%s\n", a->target,
           stk_dataset_num_shards(ds), a->cache.dir ? a->cache.dir : "RAM", s,
           s > 0 ? (double)st.fetch_bytes / 1048576.0 / s : 0,
           result == CLI_INTERRUPTED ? " (interrupted)" : "");
    cli_cache_report(stdout, &st);
  }
  stk_dataset_close(ds);
  return result;
}

int cmd_cache_run(int argc, char **argv) {
  struct args a;
  memset(&a, 0, sizeof a);
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    int k = c == '?' ? -1 : cli_cache_option("cache", c, optarg, &a.cache);
    if (k < 0) {
      if (c == '?') fprintf(stderr, "`stoker help cache` lists the options\n");
      return CLI_USAGE;
    }
    if (k == 0) continue;
    switch (c) {
      case O_FORMAT: a.format = optarg; break;
      case O_TO:
        if (cli_size("cache", "--to", optarg, &a.to)) return CLI_USAGE;
        a.have_to = 1;
        break;
      case O_ALL: a.all = 1; break;
      case O_LIST: a.list = 1; break;
      case O_JSON: a.json = 1; break;
      case 'q': a.quiet = 1; break;
      default: return CLI_USAGE;
    }
  }
  if (optind >= argc) {
    cli_error("cache", "missing ACTION (stats, warm, verify, evict, manifest)");
    return CLI_USAGE;
  }
  a.action = argv[optind++];
  if (optind < argc) a.target = argv[optind++];
  if (optind < argc) {
    cli_error("cache", "unexpected argument '%s'", argv[optind]);
    return CLI_USAGE;
  }
  const char *act = a.action;
  if (!strcmp(act, "manifest")) {
    if (!a.target) {
      cli_error("cache", "manifest: missing DIR");
      return CLI_USAGE;
    }
    char err[STK_ERRMSG_MAX];
    uint64_t n = 0;
    if (stk_manifest_write(a.target, a.format, &n, err)) {
      cli_error("cache", "%s", err);
      return CLI_FAIL;
    }
    printf("%s/stoker-manifest.json: %" PRIu64 " shards\n", a.target, n);
    return CLI_OK;
  }
  if (strcmp(act, "stats") && strcmp(act, "warm") && strcmp(act, "verify") && strcmp(act, "evict")) {
    cli_error("cache", "no action '%s' (stats, warm, verify, evict, manifest)", act);
    return CLI_USAGE;
  }
  if (!a.cache.dir) { /* (warming a RAM tier that ends with the command is pointless) */
    cli_error("cache", "%s: --cache-dir DIR is required", act);
    return CLI_USAGE;
  }
  if (a.target && strcmp(act, "warm")) {
    cli_error("cache", "%s takes no argument besides --cache-dir (got '%s')", act, a.target);
    return CLI_USAGE;
  }
  if (!strcmp(act, "stats")) return do_stats(&a);
  if (!strcmp(act, "warm")) return do_warm(&a);
  char err[STK_ERRMSG_MAX];
  if (!strcmp(act, "verify")) {
    uint64_t checked, removed;
    if (stk_cache_dir_verify(a.cache.dir, &checked, &removed, err)) {
      cli_error("cache", "%s", err);
      return CLI_FAIL;
    }
    printf("%s: %" PRIu64 " entries checked, %" PRIu64 " corrupt (removed)\n", a.cache.dir, checked,
           removed);
    return removed ? CLI_FAIL : CLI_OK;
  }
  if (!a.all && !a.have_to) {
    cli_error("cache", "evict: say how much to keep (--to SIZE) or --all");
    return CLI_USAGE;
  }
  uint64_t evicted;
  if (stk_cache_dir_evict(a.cache.dir, a.all ? 0 : a.to, &evicted, err)) {
    cli_error("cache", "%s", err);
    return CLI_FAIL;
  }
  printf("%s: %" PRIu64 " entries evicted\n", a.cache.dir, evicted);
  return CLI_OK;
}
