/* Shared pieces of the stoker CLI: the subcommand table and helpers for
 * option values and messages. The CLI uses only libstoker's public headers. */
#ifndef STOKER_CLI_H
#define STOKER_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/stoker.h"

#define CMD(name, summary)                          \
  int cmd_##name##_run(int argc, char **argv);      \
  extern const char cmd_##name##_usage[];
#include "commands.def"
#undef CMD

/* Exit codes: 0 ok, 1 runtime failure, 2 usage error, 130 interrupted. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_INTERRUPTED = 130 };

/* Print "stoker CMD: message" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse an option's value, printing a one-line error that names the option
 * and returning -1 when it is not valid (or outside [min, max]). */
int cli_u64(const char *cmd, const char *opt, const char *val, uint64_t min, uint64_t max,
            uint64_t *out);
int cli_size(const char *cmd, const char *opt, const char *val, uint64_t *out);
int cli_double(const char *cmd, const char *opt, const char *val, double min, double max,
               double *out);

/* Output files through stk_outfile (whole or not at all), with one-line
 * errors "stoker CMD: OPT: PATH: cause". check: before a long run, that
 * PATH can be written; open: *o for writing, NULL on failure; commit:
 * finish (o is freed either way). Each returns 0 or -1 (error printed). */
int cli_out_check(const char *cmd, const char *opt, const char *path);
int cli_out_open(const char *cmd, const char *opt, const char *path, struct stk_outfile **o);
int cli_out_commit(const char *cmd, const char *opt, struct stk_outfile *o);

/* Open the dataset at path for a command that reads all of it (inspect,
 * verify, pack): a remote dataset without a manifest is counted shard by
 * shard first, Ctrl-C stopping it. Returns 0 with *ds set, or the exit code
 * (CLI_USAGE for bad options, else CLI_FAIL) with the error printed. */
struct stk_dataset;
struct stk_dataset_opts;
int cli_open_whole(const char *cmd, const char *path, const struct stk_dataset_opts *o,
                   struct stk_dataset **ds);

/* Whether progress lines should be drawn: stderr is a terminal and CI is
 * not set. */
/* $STOKER_DATA/REL, ../shared/data/REL or the same beside the checkout the
 * binary sits in, whichever is readable first (written into buf), or NULL: the
 * shared traces and profiles `stoker sim` reads by name. */
const char *cli_shared_data(char *buf, size_t cap, const char *rel);
int cli_progress_enabled(void);

/* Print a command's usage text to f. */
void cli_usage(FILE *f, const char *cmd);

/* Install SIGINT/SIGTERM handlers that set the flag below (first signal)
 * and restore the default action (second signal kills). */
void cli_catch_signals(void);
extern volatile int cli_interrupted; /* pass &cli_interrupted as a cancel flag */
/* Whether a stop was asked for (an atomic read of cli_interrupted). */
static inline int cli_stop_requested(void) { return __atomic_load_n(&cli_interrupted, __ATOMIC_RELAXED); }

/* ---- cache options, shared by the commands that open datasets ---- */

/* getopt_long codes of the cache options (above any command's own). */
enum {
  O_CACHE_DIR = 900, O_CACHE_SIZE, O_RAM_CACHE_SIZE, O_CACHE_MIN_FREE, O_CACHE_PREFETCH,
  O_CACHE_FETCHERS, O_CACHE_NO_FSYNC, O_S3_ENDPOINT, O_S3_REGION, O_S3_PROFILE,
  O_S3_PATH_STYLE, O_S3_VHOST, O_RETRY_MAX, O_CONNECT_TIMEOUT, O_CACHE_CHUNK
};
/* Entries to put in a command's option table. */
#define CLI_CACHE_OPTIONS                                                          \
  {"cache-dir", 1, 0, O_CACHE_DIR}, {"cache-size", 1, 0, O_CACHE_SIZE},            \
  {"ram-cache-size", 1, 0, O_RAM_CACHE_SIZE}, {"cache-min-free", 1, 0, O_CACHE_MIN_FREE}, \
  {"cache-prefetch", 1, 0, O_CACHE_PREFETCH}, {"fetchers", 1, 0, O_CACHE_FETCHERS}, \
  {"cache-no-fsync", 0, 0, O_CACHE_NO_FSYNC}, {"s3-endpoint", 1, 0, O_S3_ENDPOINT}, \
  {"s3-region", 1, 0, O_S3_REGION}, {"s3-profile", 1, 0, O_S3_PROFILE},            \
  {"s3-path-style", 0, 0, O_S3_PATH_STYLE}, {"s3-virtual-host", 0, 0, O_S3_VHOST}, \
  {"retry-max-s", 1, 0, O_RETRY_MAX}, {"connect-timeout-s", 1, 0, O_CONNECT_TIMEOUT}, \
  {"cache-chunk-size", 1, 0, O_CACHE_CHUNK}
/* Their help text. */
#define CLI_CACHE_USAGE                                                                   \
  "cache (for a URL: file://, http(s)://, s3://bucket/prefix; or a path to stage):\n"   \
  "  --cache-dir DIR       node-local disk tier, shared by every process on the node\n"  \
  "  --cache-size SIZE     disk tier budget (default 80% of its file system)\n"         \
  "  --ram-cache-size SIZE RAM tier (default: none with a disk tier, else 25% of RAM)\n" \
  "  --cache-min-free SIZE keep this much free on the disk tier's file system (1GiB)\n"  \
  "  --cache-prefetch SIZE|off  stage shards this far ahead of the reader (1GiB)\n"     \
  "  --fetchers N          shards fetched at once (default 8)\n"                        \
  "  --cache-no-fsync      do not fsync fills (faster; a crash loses, never corrupts)\n"\
  "  --cache-chunk-size SIZE  chunks of a remote Megatron .bin, fetched and kept\n"   \
  "                        one by one (64MiB)\n"                                       \
  "  --s3-endpoint URL     S3-compatible endpoint (default $AWS_ENDPOINT_URL, else AWS)\n" \
  "  --s3-region R         region (default $AWS_REGION, the profile's, else us-east-1)\n" \
  "  --s3-profile P        profile in the AWS shared files (default $AWS_PROFILE)\n"    \
  "  --s3-path-style, --s3-virtual-host  addressing (default: path style for a\n"      \
  "                        custom endpoint, virtual host for AWS)\n"                     \
  "  --retry-max-s X       give up on a request after retrying for X s (default 120)\n" \
  "  --connect-timeout-s X connect timeout (default 10)\n"

/* Handle cache option c (value v) into o: 0 when handled, -1 on a bad
 * value (error printed), 1 when c is not a cache option. */
int cli_cache_option(const char *cmd, int c, const char *v, struct stk_cache_opts *o);
/* Print the cache's figures (human-readable, indented) to f. */
void cli_cache_report(FILE *f, const struct stk_cache_stats *st);

#endif
