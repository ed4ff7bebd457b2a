/* Fuzz target for ParvaGPU's inputs: the input is split at "@@\n" into up
 * to four files, two models' profiles (prof_data/a.csv, b.csv) and the SLO
 * request rates and latencies (missing parts take fixed defaults). What
 * loads is planned by both allocators for every scenario; a packed plan
 * must pass stk_parva_check. Malformed rows must give an error naming file
 * and line, never a crash, a read past a buffer or an endless search. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/mig.h"

static char dir[64];
static const char *files[] = {"prof_data/a.csv", "prof_data/b.csv", "SLO/SLO_req_rate.csv",
                              "SLO/SLO_latency.csv"};

static void path(char *p, size_t cap, const char *name) { snprintf(p, cap, "%s/%s", dir, name); }

static void put(const char *name, const void *d, size_t n) {
  char p[160];
  path(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (n && fwrite(d, 1, n, f) != n) abort();
  fclose(f);
}

static void cleanup(void) {
  char p[160];
  for (size_t i = 0; i < 4; i++) {
    path(p, sizeof p, files[i]);
    unlink(p);
  }
  path(p, sizeof p, "prof_data");
  rmdir(p);
  path(p, sizeof p, "SLO");
  rmdir(p);
  rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-parva.XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
    char p[160];
    path(p, sizeof p, "prof_data");
    mkdir(p, 0755);
    path(p, sizeof p, "SLO");
    mkdir(p, 0755);
  }
  static const char *defaults[] = {
      "Mig instance,Batch size,Workload Number,Throughput,Latency\n1,1,1,10,0.01\n",
      "Mig instance,Batch size,Workload Number,Throughput,Latency\n3,4,2,50,0.04\n",
      "40,20\n10,N/A\n", "100,100\n100,N/A\n"};
  size_t at = 0;
  for (int part = 0; part < 4; part++) {
    if (at > size) {
      put(files[part], defaults[part], strlen(defaults[part]));
      continue;
    }
    size_t end = at;
    while (end + 3 <= size && memcmp(data + end, "@@\n", 3)) end++;
    if (end + 3 > size) end = size;
    put(files[part], data + at, end - at);
    at = end + 3;
  }
  struct stk_parva *p;
  char err[STK_ERRMSG_MAX];
  if (stk_parva_load(&p, dir, err)) return 0;
  for (unsigned s = 1; s <= stk_parva_scenarios(p) && s <= 4; s++)
    for (int m = 0; m < 2; m++) {
      struct stk_parva_plan pl;
      if (stk_parva_plan(p, s, m ? STK_PARVA_PACKED : STK_PARVA_ARTIFACT, &pl, err)) continue;
      if (m && stk_parva_check(p, &pl, err)) {
        fprintf(stderr, "packed plan fails its check: %s\n", err);
        abort();
      }
      stk_parva_plan_free(&pl);
    }
  stk_parva_free(p);
  return 0;
}
