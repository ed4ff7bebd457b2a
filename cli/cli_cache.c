/* The cache options and report shared by feed, bench, inspect, verify and
 * cache. */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

int cli_cache_option(const char *cmd, int c, const char *v, struct stk_cache_opts *o) {
  uint64_t x;
  switch (c) {
    case O_CACHE_DIR: o->dir = v; return 0;
    case O_CACHE_SIZE: return cli_size(cmd, "--cache-size", v, &o->disk_bytes) ? -1 : 0;
    case O_RAM_CACHE_SIZE: return cli_size(cmd, "--ram-cache-size", v, &o->ram_bytes) ? -1 : 0;
    case O_CACHE_MIN_FREE: return cli_size(cmd, "--cache-min-free", v, &o->min_free) ? -1 : 0;
    case O_CACHE_PREFETCH:
      if (!strcmp(v, "off") || !strcmp(v, "0")) {
        o->prefetch_bytes = -1;
        return 0;
      }
      if (cli_size(cmd, "--cache-prefetch", v, &x)) return -1;
      if (x > INT64_MAX) x = INT64_MAX;
      o->prefetch_bytes = x ? (int64_t)x : -1; /* 0 bytes ahead: off */
      return 0;
    case O_CACHE_FETCHERS:
      if (cli_u64(cmd, "--fetchers", v, 1, 256, &x)) return -1;
      o->fetchers = (uint32_t)x;
      return 0;
    case O_CACHE_NO_FSYNC: o->no_fsync = 1; return 0;
    case O_CACHE_CHUNK:
      if (cli_size(cmd, "--cache-chunk-size", v, &o->chunk_bytes)) return -1;
      if (o->chunk_bytes < 4096 || o->chunk_bytes > (1ull << 32)) {
        cli_error(cmd, "--cache-chunk-size: '%s' is outside 4KiB..4GiB", v);
        return -1;
      }
      return 0;
    case O_S3_ENDPOINT: o->s3_endpoint = v; return 0;
    case O_S3_REGION: o->s3_region = v; return 0;
    case O_S3_PROFILE: o->s3_profile = v; return 0;
    case O_S3_PATH_STYLE: o->s3_addressing = 1; return 0;
    case O_S3_VHOST: o->s3_addressing = 2; return 0;
    case O_RETRY_MAX: return cli_double(cmd, "--retry-max-s", v, 0.001, 86400, &o->retry_max_s) ? -1 : 0;
    case O_CONNECT_TIMEOUT:
      return cli_double(cmd, "--connect-timeout-s", v, 0.001, 3600, &o->connect_timeout_s) ? -1 : 0;
    default: return 1;
  }
}

void cli_cache_report(FILE *f, const struct stk_cache_stats *st) {
  char a[32], b[32], c[32];
  if (st->ram.capacity)
    fprintf(f, "  cache RAM      %" PRIu64 " hits, %" PRIu64 " misses; %s of %s in %" PRIu64
               " shards; %" PRIu64 " evicted\n",
            st->ram.hits, st->ram.misses, stk_fmt_bytes(st->ram.bytes, a, sizeof a),
            stk_fmt_bytes(st->ram.capacity, b, sizeof b), st->ram.entries, st->ram.evictions);
  if (st->disk.capacity)
    fprintf(f, "  cache disk     %" PRIu64 " hits, %" PRIu64 " misses; %s of %s; %" PRIu64
               " evicted\n",
            st->disk.hits, st->disk.misses, stk_fmt_bytes(st->disk.bytes, a, sizeof a),
            stk_fmt_bytes(st->disk.capacity, b, sizeof b), st->disk.evictions);
  fprintf(f, "  origin         %" PRIu64 " shards fetched, %s received in %" PRIu64
             " requests, %" PRIu64 " retries, %" PRIu64 " errors",
          st->fetches, stk_fmt_bytes(st->fetch_bytes, c, sizeof c), st->requests, st->retries,
          st->errors);
  if (st->fetches)
    fprintf(f, "; per shard p50 %.1f ms, p99 %.1f ms", (double)st->fetch_p50_ns / 1e6,
            (double)st->fetch_p99_ns / 1e6);
  if (st->origin_checked)
    fprintf(f, "; %" PRIu64 " matched the origin's checksum", st->origin_checked);
  fprintf(f, "\n  staging        %" PRIu64 " staged ahead, %" PRIu64 " reads waited for a fetch (%.2f s), %"
             PRIu64 " re-staged, %" PRIu64 " shared with other processes%s\n",
          st->prefetched, st->stalls, (double)st->stall_ns / 1e9, st->restages, st->shared_waits,
          st->disk_full ? ", disk tier full" : "");
}
