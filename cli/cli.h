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

/* Whether progress lines should be drawn: stderr is a terminal and CI is
 * not set. */
int cli_progress_enabled(void);

/* Print a command's usage text to f. */
void cli_usage(FILE *f, const char *cmd);

/* Install SIGINT/SIGTERM handlers that set the flag below (first signal)
 * and restore the default action (second signal kills). */
void cli_catch_signals(void);
extern volatile int cli_interrupted; /* pass &cli_interrupted as a cancel flag */
/* Whether a stop was asked for (an atomic read of cli_interrupted). */
static inline int cli_stop_requested(void) { return __atomic_load_n(&cli_interrupted, __ATOMIC_RELAXED); }

#endif
