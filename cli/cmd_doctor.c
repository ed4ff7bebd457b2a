/* stoker doctor: measure this machine's ceilings and say how many
 * accelerators of each DLIO workload it could feed, and what runs out
 * first. The measuring is stk_doctor_run's; this file parses options and
 * prints. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cmd_doctor_usage[] =
    "usage: stoker doctor [OPTIONS]\n"
    "\n"
    "Measure this machine's ceilings: sequential write (buffered and O_DIRECT),\n"
    "O_DIRECT sequential read, 4 KiB random-read IOPS, page-cache read, memcpy,\n"
    "JPEG decode per core and pinned host-to-device copies (when libcudart and a\n"
    "GPU are present). Then print, for each workload preset, how many\n"
    "accelerators each resource could feed and which one runs out first. A\n"
    "figure that cannot be measured here is shown as invalid, with the reason.\n"
    "The O_DIRECT sequential ceilings are the best of a sweep over depth (1..32\n"
    "requests in flight) and jobs (1, 2); the curve is printed under them.\n"
    "\n"
    "  --dir DIR        where the scratch file goes; it must be on the storage\n"
    "                   under test (default $TMPDIR, else /var/tmp)\n"
    "  --size SIZE      scratch file size (default 1GiB; 128MiB with --quick);\n"
    "                   bigger than the device's own cache gives honest figures\n"
    "  --threads N      page-cache and memcpy threads (default: online cores)\n"
    "  --engine E       O_DIRECT phases: auto, io_uring, threads (default auto)\n"
    "  --only LIST      measure only these figures, comma-separated: buffered_write,\n"
    "                   seq_write, seq_read, rand_read_iops, page_cache_read,\n"
    "                   memcpy, jpeg_decode_per_core, cuda_h2d\n"
    "  --json FILE      also write every figure as JSON to FILE ('-' = stdout,\n"
    "                   which then holds only the JSON)\n"
    "  --quick          short timed phases (a few seconds in all)\n"
    "\n"
    "The scratch file is removed at the end, on failure and on Ctrl-C.\n";

enum { O_DIR = 256, O_SIZE, O_THREADS, O_ENGINE, O_ONLY, O_JSON, O_QUICK };

static const struct option options[] = {{"dir", 1, 0, O_DIR},         {"size", 1, 0, O_SIZE},
                                        {"threads", 1, 0, O_THREADS}, {"engine", 1, 0, O_ENGINE},
                                        {"only", 1, 0, O_ONLY},       {"json", 1, 0, O_JSON},
                                        {"quick", 0, 0, O_QUICK},     {0, 0, 0, 0}};

/* "seq_read,memcpy" into figure bits; -1 (and a message) for an unknown name. */
static int parse_only(const char *v, unsigned *out) {
  *out = 0;
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    int found = 0;
    for (int i = 0; i < STK_DOCTOR_NFIG; i++) {
      const char *k = stk_doctor_fig_key(i);
      if (strlen(k) == n && !strncmp(p, k, n)) *out |= STK_DOCTOR_BIT(i), found = 1;
    }
    if (!found) {
      cli_error("doctor", "--only: no figure '%.*s'; see `stoker help doctor`", (int)n, p);
      return -1;
    }
    p += n + (p[n] == ',');
  }
  if (!*out) {
    cli_error("doctor", "--only: empty list");
    return -1;
  }
  return 0;
}

struct cli_opts {
  struct stk_doctor_opts d;
  const char *json;
};

static int parse_option(struct cli_opts *o, int c, const char *v) {
  uint64_t x;
  switch (c) {
    case O_DIR:
      o->d.dir = v;
      return 0;
    case O_SIZE:
      if (cli_size("doctor", "--size", v, &o->d.size)) return -1;
      if (o->d.size < (8u << 20)) {
        cli_error("doctor", "--size: %s is too small (at least 8MiB)", v);
        return -1;
      }
      return 0;
    case O_THREADS:
      if (cli_u64("doctor", "--threads", v, 1, 256, &x)) return -1;
      o->d.threads = (uint32_t)x;
      return 0;
    case O_ENGINE:
      if (strcmp(v, "auto") && strcmp(v, "io_uring") && strcmp(v, "threads")) {
        cli_error("doctor", "--engine: '%s' is not one of auto, io_uring, threads", v);
        return -1;
      }
      o->d.io_engine = v;
      return 0;
    case O_ONLY:
      return parse_only(v, &o->d.only);
    case O_JSON:
      o->json = v;
      return 0;
    case O_QUICK:
      o->d.quick = 1;
      return 0;
    default:
      return -1;
  }
}

static void on_phase(void *ctx, const char *phase) {
  (void)ctx;
  fprintf(stderr, "\r\033[Kdoctor: %s ...", phase);
}

static int write_json(const struct stk_doctor_result *r, const char *path) {
  struct stk_outfile *o;
  if (cli_out_open("doctor", "--json", path, &o)) return CLI_FAIL;
  /* A failed write shows in the stream's error flag, which commit turns
   * into a message with its cause. */
  stk_doctor_write_json(r, stk_outfile_stream(o));
  return cli_out_commit("doctor", "--json", o) ? CLI_FAIL : CLI_OK;
}

int cmd_doctor_run(int argc, char **argv) {
  struct cli_opts o;
  memset(&o, 0, sizeof o);
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", options, NULL)) != -1)
    if (c == '?' || parse_option(&o, c, optarg)) {
      if (c == '?') cli_error("doctor", "see `stoker help doctor`");
      return CLI_USAGE;
    }
  if (optind != argc) {
    cli_error("doctor", "unexpected argument '%s'; see `stoker help doctor`", argv[optind]);
    return CLI_USAGE;
  }
  if (o.json && cli_out_check("doctor", "--json", o.json)) return CLI_USAGE;
  int progress = cli_progress_enabled();
  if (progress) o.d.progress = on_phase;
  o.d.cancel = &cli_interrupted;
  cli_catch_signals();
  /* The result is big (the feed table); keep it off the stack. */
  struct stk_doctor_result *r = malloc(sizeof *r);
  if (!r) {
    cli_error("doctor", "out of memory");
    return CLI_FAIL;
  }
  stk_doctor_result_init(r);
  char err[STK_ERRMSG_MAX];
  int rc = stk_doctor_run(&o.d, r, err);
  if (progress) fputs("\r\033[K", stderr);
  int code = CLI_OK;
  if (rc) {
    cli_error("doctor", "%s", err);
    code = rc == STK_ECANCELED ? CLI_INTERRUPTED : CLI_FAIL; /* options were checked above */
  } else {
    if (!o.json || strcmp(o.json, "-")) stk_doctor_print(r, stdout);
    if (o.json) code = write_json(r, o.json);
  }
  free(r);
  return code;
}
