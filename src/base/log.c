/* Leveled logging to stderr, or to a host program's callback. The level and
 * the callback are the process-wide registry of this file; the level is read
 * once from STOKER_LOG and may be set by the API. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

static enum stk_log_level log_level = STK_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
/* The sink: a callback and its context change together, so under a lock
 * (taken only for messages that pass the level, never on a hot path). */
static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static stk_log_fn sink_fn;
static void *sink_ctx;

static void log_init(void) {
  const char *e = getenv("STOKER_LOG");
  if (!e) return;
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcmp(e, names[i]) == 0) log_level = (enum stk_log_level)i;
}

void stk_log_set_level(enum stk_log_level lvl) {
  pthread_once(&log_once, log_init);
  __atomic_store_n(&log_level, lvl, __ATOMIC_RELAXED);
}

enum stk_log_level stk_log_get_level(void) {
  pthread_once(&log_once, log_init);
  return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

void stk_log(enum stk_log_level lvl, const char *fmt, ...) {
  if (lvl > stk_log_get_level()) return;
  static const char *tag[] = {"error", "warning", "info", "debug"};
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&sink_mu);
  stk_log_fn fn = sink_fn;
  void *ctx = sink_ctx;
  pthread_mutex_unlock(&sink_mu);
  if (fn)
    fn(ctx, lvl, line);
  else
    fprintf(stderr, "stoker: %s: %s\n", tag[lvl], line); /* one write per line */
}

void stk_log_set_callback(stk_log_fn fn, void *ctx) {
  pthread_mutex_lock(&sink_mu);
  sink_fn = fn;
  sink_ctx = fn ? ctx : NULL;
  pthread_mutex_unlock(&sink_mu);
}
