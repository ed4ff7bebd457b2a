/* Fuzz target for the simulator's trace readers: the input is split at
 * the first NUL-free "@@\n" into a node list and a pod list; both are
 * written to files and loaded. Malformed rows must give an error naming
 * file and line, never a crash or a read past a buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/sim.h"
#include "stoker/error.h"

static char dir[64];

static void cleanup(void) {
  char p[128];
  snprintf(p, sizeof p, "%s/nodes.csv", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/pods.csv", dir);
  unlink(p);
  rmdir(dir);
}

static void put(const char *name, const uint8_t *d, size_t n) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (n && fwrite(d, 1, n, f) != n) abort();
  fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-sim.XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
  }
  const uint8_t *sep = NULL;
  for (size_t i = 0; i + 3 <= size; i++)
    if (data[i] == '@' && data[i + 1] == '@' && data[i + 2] == '\n') {
      sep = data + i;
      break;
    }
  size_t nlen = sep ? (size_t)(sep - data) : size;
  put("nodes.csv", data, nlen);
  put("pods.csv", sep ? sep + 3 : data, sep ? size - nlen - 3 : 0);
  char err[STK_ERRMSG_MAX], p[128];
  struct stk_sim_cluster *c;
  snprintf(p, sizeof p, "%s/nodes.csv", dir);
  if (stk_sim_cluster_load(&c, p, err) != 0) return 0;
  struct stk_sim_workload *w;
  snprintf(p, sizeof p, "%s/pods.csv", dir);
  if (stk_sim_workload_load(&w, c, p, err) == 0) stk_sim_workload_free(w);
  stk_sim_cluster_free(c);
  return 0;
}
