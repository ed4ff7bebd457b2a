/* Helpers shared by the Sia tests (test_sim_sia*.c). */
#ifndef STOKER_TEST_SIM_SIA_H
#define STOKER_TEST_SIM_SIA_H

#include <stdio.h>
#include <unistd.h>

#include "stoker/sim.h"
#include "test.h"

/* The first 40 jobs of the Sia artifact's Philly workload 1 (written to
 * cut.csv) on its default cluster (6 x 4 aws, 3 x 8 rtx, 2 x 8 dgx-ext),
 * with the applications loaded into base and ty; NULL when ../shared's
 * Sia data is absent. */
static __attribute__((unused)) struct stk_sim_jobs *sia_philly_cut(struct stk_sim_apps **base, struct stk_sim_apps **ty,
                                       struct stk_sim_gpu_type *types) {
  const char *data = test_shared_data();
  char traces[4200], wl[4200];
  if (!data) return NULL;
  snprintf(traces, sizeof traces, "%s/sia/traces", data);
  snprintf(wl, sizeof wl, "%s/sia/workloads/philly/workload-1.csv", data);
  if (access(wl, R_OK) != 0) return NULL;
  FILE *in = fopen(wl, "r"), *out = fopen("cut.csv", "w");
  CHECK(in && out);
  char line[512];
  for (int n = 0; n < 41 && fgets(line, sizeof line, in); n++) fputs(line, out);
  fclose(in);
  fclose(out);
  char err[STK_ERRMSG_MAX] = "";
  static const char *names[3] = {"aws", "rtx", "dgx-ext"};
  const unsigned nodes[3] = {6, 3, 2}, gpn[3] = {4, 8, 8};
  CHECK_MSG(stk_sim_apps_load(base, traces, err) == 0, "%s", err);
  for (int t = 0; t < 3; t++) {
    CHECK_MSG(stk_sim_apps_load_type(&ty[t], traces, names[t], err) == 0, "%s", err);
    types[t] = (struct stk_sim_gpu_type){names[t], nodes[t], gpn[t], ty[t]};
  }
  struct stk_sim_jobs *j;
  CHECK_MSG(stk_sim_jobs_load(&j, *base, "cut.csv", err) == 0, "%s", err);
  return j;
}

#endif
