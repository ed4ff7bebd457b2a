/* stoker verify: read every sample of a dataset with checksum checks on,
 * and name the file and offset of the first bad one. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cmd_verify_usage[] =
    "usage: stoker verify PATH [OPTIONS]\n"
    "\n"
    "Read every sample of the dataset at PATH, checking framing and every stored\n"
    "checksum (TFRecord CRC32C, tar header checksums, zip CRC32 of npz members).\n"
    "A Megatron .idx is checked entry by entry against its .bin (lengths, byte\n"
    "offsets, document indices) before any sequence is read. npy token files\n"
    "(--format npy-tokens) are checked file by file: a 1-D little-endian C-order\n"
    "integer array whose data is all there, one dtype for the whole folder.\n"
    "Stops at the first bad sample, printing its file and offset (exit 1).\n"
    "Through the cache, every cached copy used is re-hashed against its recorded\n"
    "CRC32C (a mismatch is fetched again and counted), and the cache's counts are\n"
    "printed; a remote Megatron .bin is read in chunks (--cache-chunk-size).\n"
    "\n"
    "  --format F    tfrecord, wds, npy, npz, mds, megatron, npy-tokens, files\n"
    "                (default: detect; npy-tokens only when named)\n"
    "  -q, --quiet   no progress line\n"
    "PATH may be a URL (http(s)://, s3://, file://), read through the shard cache:\n"
    CLI_CACHE_USAGE;

enum { O_FORMAT = 256 };

static const struct option options[] = {
    {"format", 1, 0, O_FORMAT}, {"quiet", 0, 0, 'q'}, CLI_CACHE_OPTIONS, {0, 0, 0, 0}};

static void progress(uint64_t done, uint64_t total, uint64_t t0, uint64_t *last) {
  uint64_t now = stk_now_ns();
  if (now - *last < 100000000ull && done != total) return;
  *last = now;
  fprintf(stderr, "\rverify: %llu/%llu samples (%.0f%%) ", (unsigned long long)done,
          (unsigned long long)total, 100.0 * (double)done / (double)total);
  (void)t0;
}

int cmd_verify_run(int argc, char **argv) {
  struct stk_cache_opts co = {0};
  struct stk_dataset_opts o = {.cache = &co};
  int quiet = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    int k = cli_cache_option("verify", c, optarg, &co);
    if (k < 0) return CLI_USAGE;
    if (k == 0) continue;
    if (c == O_FORMAT) o.format = optarg;
    else if (c == 'q') quiet = 1;
    else return CLI_USAGE;
  }
  if (optind != argc - 1) {
    cli_error("verify", optind >= argc ? "missing PATH; see `stoker help verify`" : "one PATH only");
    return CLI_USAGE;
  }
  cli_catch_signals();
  struct stk_dataset *ds;
  int rc = cli_open_whole("verify", argv[optind], &o, &ds);
  if (rc) return rc;
  uint64_t n = stk_dataset_num_samples(ds), t0 = stk_now_ns(), last = 0;
  int show = !quiet && cli_progress_enabled();
  uint8_t *buf = NULL;
  size_t cap = 0;
  uint64_t i = 0;
  for (; i < n && !rc && !cli_stop_requested(); i++) {
    struct stk_sample s;
    rc = stk_dataset_read(ds, i, 1, &buf, &cap, &s);
    if (show) progress(i + 1, n, t0, &last);
  }
  if (show) fputc('\n', stderr);
  int out = CLI_OK;
  if (rc) {
    cli_error("verify", "sample %llu: %s", (unsigned long long)(i - 1), stk_dataset_errmsg(ds));
    out = CLI_FAIL;
  } else if (cli_stop_requested()) {
    cli_error("verify", "interrupted after %llu of %llu samples", (unsigned long long)i,
              (unsigned long long)n);
    out = CLI_INTERRUPTED;
  } else if (stk_dataset_caps(ds) & STK_FMT_CHECKSUM) {
    printf("ok: %llu samples in %zu shards, all checksums match\n", (unsigned long long)n,
           stk_dataset_num_shards(ds));
  } else {
    printf("ok: %llu samples in %zu shards, all well-formed (%s stores no checksums)\n",
           (unsigned long long)n, stk_dataset_num_shards(ds), stk_dataset_format(ds));
  }
  struct stk_cache_stats cs = {0}; /* a remote dataset: what was fetched and what rechecked */
  if (out == CLI_OK && stk_dataset_cache_stats(ds, &cs) == 0) cli_cache_report(stdout, &cs);
  free(buf);
  stk_dataset_close(ds);
  return out;
}
