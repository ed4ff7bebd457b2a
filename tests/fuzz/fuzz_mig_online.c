/* Fuzz target for online MIG scheduling: the input is a trace file (an
 * openb pod list when it has a gpu_milli column, else a duration trace).
 * What loads is replayed on 1-4 A100 80 GB GPUs under every policy; each
 * run must account for every request (started, rejected or waiting) and
 * keep utilization within [0, 1], and every layout it makes must be valid
 * (the engine checks each and fails otherwise). Malformed rows must give an
 * error naming file and line, never a crash or an endless loop. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/mig_online.h"

static char file[64];

static void cleanup(void) { unlink(file); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!file[0]) {
    snprintf(file, sizeof file, "/tmp/stoker-fuzz-mig.XXXXXX");
    int fd = mkstemp(file);
    if (fd < 0) abort();
    close(fd);
    atexit(cleanup);
  }
  FILE *f = fopen(file, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  const struct stk_mig_geometry *g = stk_mig_geometry_find("a100-80gb");
  struct stk_mig_trace *t;
  char err[STK_ERRMSG_MAX];
  if (stk_mig_trace_load(&t, g, file, 3, 1 + (double)(size % 3), err)) return 0;
  if (t->n <= 2000) {
    for (int p = STK_MIG_FIFO; p <= STK_MIG_MULTI; p++) {
      struct stk_mig_online_opts o = {0, g, 1 + (unsigned)(size % 4), (enum stk_mig_policy)p,
                                      (double)(size % 7), 0, 0, 0, 2, NULL};
      struct stk_mig_online_result r;
      if (stk_mig_online_run(t, &o, &r, err)) {
        fprintf(stderr, "run failed: %s\n", err);
        abort();
      }
      if (r.started + r.rejected + r.waiting != r.requests) abort();
      double u[] = {r.alloc_all, r.alloc_arriving, r.demand_all, r.alloc_backlog};
      for (size_t i = 0; i < sizeof u / sizeof *u; i++)
        if (!(u[i] >= 0 && u[i] <= 1 + 1e-9)) {
          fprintf(stderr, "utilization %zu out of range: %g\n", i, u[i]);
          abort();
        }
    }
  }
  stk_mig_trace_free(t);
  return 0;
}
