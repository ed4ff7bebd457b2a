/* Fuzz target for the job-level simulator's inputs: the input is split at
 * the first "@@\n" into a job list and an application's placements.csv
 * (its validation and scalability files are fixed). Both are loaded; a
 * list that loads is simulated on a 2 x 2 cluster for at most an hour of
 * simulated time under one policy chosen by the input's length. Malformed
 * rows must give an error naming file and line, never a crash, a read past
 * a buffer or an endless loop. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/error.h"
#include "stoker/sim.h"

static char dir[64];

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
  const char *files[] = {"jobs.csv", "t/app/placements.csv", "t/app/scalability.csv",
                         "t/app/validation-8.csv", "t/app/validation-32.csv"};
  char p[160];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    path(p, sizeof p, files[i]);
    unlink(p);
  }
  path(p, sizeof p, "t/app");
  rmdir(p);
  path(p, sizeof p, "t");
  rmdir(p);
  rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-simjobs.XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
    char p[160];
    path(p, sizeof p, "t");
    mkdir(p, 0755);
    path(p, sizeof p, "t/app");
    mkdir(p, 0755);
    const char *val = "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.1,1,0.5\n20,20,0.2,1,0.5\n";
    put("t/app/validation-8.csv", val, strlen(val));
    put("t/app/validation-32.csv", val, strlen(val));
    const char *sc = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                     "6,6,4,0.9,0.4\n6,6,8,1.4,0.4\n6,12,4,1.0,0.5\n6,12,8,1.5,0.5\n";
    put("t/app/scalability.csv", sc, strlen(sc));
  }
  const uint8_t *sep = NULL;
  for (size_t i = 0; i + 3 <= size; i++)
    if (data[i] == '@' && data[i + 1] == '@' && data[i + 2] == '\n') {
      sep = data + i;
      break;
    }
  size_t jlen = sep ? (size_t)(sep - data) : size;
  put("jobs.csv", data, jlen);
  static const char def_pl[] = "placement,local_bsz,step_time,sync_time\n"
                               "1,4,0.5,0\n1,8,1.0,0\n2,4,0.6,0.1\n11,8,1.2,0.2\n4,8,1.1,0.1\n";
  if (sep)
    put("t/app/placements.csv", sep + 3, size - jlen - 3);
  else
    put("t/app/placements.csv", def_pl, sizeof def_pl - 1);
  char err[STK_ERRMSG_MAX], p[160];
  struct stk_sim_apps *a = NULL;
  path(p, sizeof p, "t");
  if (stk_sim_apps_load(&a, p, err) != 0) a = NULL;
  struct stk_sim_jobs *j;
  path(p, sizeof p, "jobs.csv");
  if (stk_sim_jobs_load(&j, a, p, err) == 0) {
    static const char *pols[] = {"fifo", "sjf", "tiresias", "optimus", "pollux", "multi", "carbon"};
    struct stk_sim_jobs_opts o;
    memset(&o, 0, sizeof o);
    o.policy = pols[size % 7];
    o.nodes = 2;
    o.gpus_per_node = 2;
    o.horizon = 3600;
    struct stk_sim_jobs_result r;
    if (stk_sim_jobs_run(j, &o, &r, err) == 0) stk_sim_jobs_result_free(&r);
    stk_sim_jobs_free(j);
  }
  stk_sim_apps_free(a);
  return 0;
}
