/* stoker: the command-line tool. Dispatches to one file per subcommand and
 * holds the helpers they share. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct command {
  const char *name, *summary, *usage;
  int (*run)(int, char **);
};

static const struct command commands[] = {
#define CMD(name, summary) {#name, summary, cmd_##name##_usage, cmd_##name##_run},
#include "commands.def"
#undef CMD
};
static const size_t ncommands = sizeof commands / sizeof commands[0];

volatile int cli_interrupted;

void cli_error(const char *cmd, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (cmd)
    fprintf(stderr, "stoker %s: %s\n", cmd, msg);
  else
    fprintf(stderr, "stoker: %s\n", msg);
}

int cli_open_whole(const char *cmd, const char *path, const struct stk_dataset_opts *o,
                   struct stk_dataset **ds) {
  char err[STK_ERRMSG_MAX];
  /* Opening a remote dataset (a listing, a HEAD per named shard) stops at
   * SIGINT/SIGTERM too. */
  struct stk_cache_opts co = o && o->cache ? *o->cache : (struct stk_cache_opts){0};
  struct stk_dataset_opts oo = o ? *o : (struct stk_dataset_opts){0};
  co.cancel = (const int *)&cli_interrupted;
  oo.cache = &co;
  int rc = stk_dataset_open(ds, path, &oo, err);
  if (rc == STK_ECANCELED && cli_stop_requested()) {
    cli_error(cmd, "interrupted");
    return CLI_INTERRUPTED;
  }
  if (rc) {
    cli_error(cmd, "%s", err);
    return rc == STK_EINVAL ? CLI_USAGE : CLI_FAIL;
  }
  if ((rc = stk_dataset_count(*ds, (const int *)&cli_interrupted, err)) != 0) {
    cli_error(cmd, "%s", cli_stop_requested() ? "interrupted" : err);
    stk_dataset_close(*ds);
    return CLI_FAIL;
  }
  return 0;
}

int cli_out_check(const char *cmd, const char *opt, const char *path) {
  char err[STK_ERRMSG_MAX];
  if (stk_outfile_check(path, err) == 0) return 0;
  cli_error(cmd, "%s: %s", opt, err);
  return -1;
}

int cli_out_open(const char *cmd, const char *opt, const char *path, struct stk_outfile **o) {
  char err[STK_ERRMSG_MAX];
  if (stk_outfile_open(o, path, err) == 0) return 0;
  cli_error(cmd, "%s: %s", opt, err);
  return -1;
}

int cli_out_commit(const char *cmd, const char *opt, struct stk_outfile *o) {
  char err[STK_ERRMSG_MAX];
  if (stk_outfile_commit(o, err) == 0) return 0;
  cli_error(cmd, "%s: %s", opt, err);
  return -1;
}

int cli_u64(const char *cmd, const char *opt, const char *val, uint64_t min, uint64_t max,
            uint64_t *out) {
  uint64_t v;
  if (stk_parse_u64(val, &v) != 0) {
    cli_error(cmd, "%s: '%s' is not a whole number", opt, val);
    return -1;
  }
  if (v < min || v > max) {
    cli_error(cmd, "%s: %s is out of range (%llu..%llu)", opt, val, (unsigned long long)min,
              (unsigned long long)max);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_size(const char *cmd, const char *opt, const char *val, uint64_t *out) {
  int rc = stk_parse_size(val, out);
  if (rc == STK_ERANGE) {
    cli_error(cmd, "%s: '%s' is too large (at most 16 EiB, 2^64 - 1 bytes)", opt, val);
    return -1;
  }
  if (rc != 0) {
    cli_error(cmd, "%s: '%s' is not a size (examples: 4096, 128KiB, 1.5GiB, 2PiB)", opt, val);
    return -1;
  }
  return 0;
}

int cli_double(const char *cmd, const char *opt, const char *val, double min, double max,
               double *out) {
  double v;
  if (stk_parse_double(val, &v) != 0) {
    cli_error(cmd, "%s: '%s' is not a number", opt, val);
    return -1;
  }
  if (v < min || v > max) {
    cli_error(cmd, "%s: %s is out of range (%g..%g)", opt, val, min, max);
    return -1;
  }
  *out = v;
  return 0;
}

const char *cli_shared_data(char *buf, size_t cap, const char *rel) {
  const char *env = getenv("STOKER_DATA");
  if (env && *env && snprintf(buf, cap, "%.3900s/%s", env, rel) > 0 && access(buf, R_OK) == 0)
    return buf;
  if (snprintf(buf, cap, "../shared/data/%s", rel) > 0 && access(buf, R_OK) == 0) return buf;
  /* ../shared/data beside the checkout the binary was built in: the binary
   * is build/stoker, build/asan/stoker and the like, so look up from it. */
  char dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (n <= 0) return NULL;
  dir[n] = 0;
  char *d = dirname(dir);
  for (int up = 0; up < 4 && strcmp(d, "/"); up++) {
    if (snprintf(buf, cap, "%.3900s/../shared/data/%s", d, rel) > 0 && access(buf, R_OK) == 0)
      return buf;
    d = dirname(d);
  }
  return NULL;
}

int cli_progress_enabled(void) {
  const char *ci = getenv("CI");
  return isatty(2) && !(ci && *ci);
}

/* First signal: ask the running command to stop (it prints what it has);
 * second: the default action. The flag is read by other threads, hence the
 * atomic store; errno is preserved for the code the signal interrupted. */
static void on_signal(int sig) {
  int saved = errno;
  __atomic_store_n(&cli_interrupted, 1, __ATOMIC_RELAXED);
  signal(sig, SIG_DFL);
  errno = saved;
}

/* Samples far larger than a read are mapped from the page cache, not
 * copied (the loader's mmap engine). A file truncated under a mapping, or a
 * page the device fails to read, makes the touch a bus error; say so in one line
 * before the default action ends the process (SA_RESETHAND: the faulting
 * access runs again and the signal is fatal). Async-signal-safe. */
static void on_bus_error(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  if (si->si_code != BUS_ADRERR) return;
  char msg[384] = "stoker: bus error at 0x";
  size_t n = strlen(msg);
  uintptr_t a = (uintptr_t)si->si_addr;
  for (int sh = (int)sizeof a * 8 - 4; sh >= 0; sh -= 4)
    if ((a >> sh) || sh == 0) msg[n++] = "0123456789abcdef"[(a >> sh) & 15];
  const char *tail =
      ": a file mapped for reading could not be read there: it became shorter while in use (a "
      "dataset file truncated during the run?) or the device failed the read; --engine pread "
      "reads with copies and reports either as an error\n";
  size_t tl = strlen(tail);
  if (n + tl > sizeof msg) tl = sizeof msg - n;
  memcpy(msg + n, tail, tl);
  ssize_t w = write(2, msg, n + tl);
  (void)w;
}

void cli_catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  /* Once: the loader's copies out of mappings install a guard over it
   * (src/io/guard.c), which a second call must not replace. */
  static int bus_caught;
  if (bus_caught++) return;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_bus_error;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, NULL);
}

static const struct command *find(const char *name) {
  for (size_t i = 0; i < ncommands; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

void cli_usage(FILE *f, const char *cmd) {
  const struct command *c = find(cmd);
  if (c) fputs(c->usage, f);
}

static void overview(FILE *f) {
  fprintf(f,
          "stoker %s: keep accelerators fed.\n\n"
          "usage: stoker COMMAND [OPTIONS]\n\ncommands:\n",
          stk_version());
  for (size_t i = 0; i < ncommands; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "  %-9s %s\n\n"
          "`stoker help COMMAND` shows a command's options; `stoker --version` the version.\n",
          "help", "show this overview or a command's options");
}

/* A report that did not reach stdout completely (a full disk behind a
 * redirect, a closed pipe with SIGPIPE ignored) is a failure, not exit 0. */
static int stdout_done(const char *cmd, int rc) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
  cli_error(cmd, "cannot write the output: %s", strerror(errno ? errno : EIO));
  return rc ? rc : CLI_FAIL;
}

static int run_main(int argc, char **argv);

int main(int argc, char **argv) {
  /* Into a file or a pipe, the whole report is kept until the end (up to
   * 1 MiB), so a write that fails is seen by stdout_done with its own
   * errno: stdio loses it when a smaller buffer fills mid-report (a
   * 5 KiB help text to a full disk said "Input/output error"). Not for the
   * agent and the live view, whose lines must leave as they are written. */
  static char outbuf[1 << 20];
  int live = argc > 1 && (!strcmp(argv[1], "watch") || !strcmp(argv[1], "top"));
  if (!live && !isatty(STDOUT_FILENO)) setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
  return stdout_done(argc > 1 && argv[1][0] != '-' ? argv[1] : NULL, run_main(argc, argv));
}

static int run_main(int argc, char **argv) {
  if (argc < 2) {
    overview(stderr);
    return CLI_USAGE;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--version") || !strcmp(name, "version")) {
    printf("stoker %s\n", stk_version());
    return CLI_OK;
  }
  if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
    if (argc < 3) {
      overview(stdout);
      return CLI_OK;
    }
    const struct command *c = find(argv[2]);
    if (!c) {
      cli_error(NULL, "no command '%s'; `stoker help` lists them", argv[2]);
      return CLI_USAGE;
    }
    fputs(c->usage, stdout);
    return CLI_OK;
  }
  const struct command *c = find(name);
  if (!c) {
    cli_error(NULL, "no command '%s'; `stoker help` lists them", name);
    return CLI_USAGE;
  }
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(c->usage, stdout);
      return CLI_OK;
    }
  return c->run(argc - 1, argv + 1);
}
