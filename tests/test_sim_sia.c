/* Sia with GLPK (sia-glpk; test_sim_sia_exact.c pins the exact solver's
 * sia) pinned (issue 22, S8): the policy keeps each job's
 * goodputs until its model or gradient statistics change, takes the logs
 * of a fit's measurements once, and reuses the last round's GLPK answer
 * when the integer program is the same bit for bit. None of this may move
 * a result: the first 40 jobs of the Sia artifact's Philly workload 1 on
 * its default 64-GPU cluster keep the mean JCT and round count measured
 * before the change, and every job its finish time whether the rounds'
 * programs go to GLPK or, where that gives GLPK's answer, to the dynamic
 * program (1533.05 s, 391 rounds; `stoker sim --jobs CUT
 * --traces ../shared/data/sia/traces --gpu-types sia --job-policy sia-glpk`). */
#include <math.h>
#include <unistd.h>

#include "../src/sim/jobs_impl.h"
#include "../src/sim/jpol_sia.h"
#include "test.h"

TEST(sim_sia_pinned_philly_cut) {
  const char *data = test_shared_data();
  char traces[4200], wl[4200];
  if (data) {
    snprintf(traces, sizeof traces, "%s/sia/traces", data);
    snprintf(wl, sizeof wl, "%s/sia/workloads/philly/workload-1.csv", data);
  }
  if (!data || access(wl, R_OK) != 0) SKIP("shared data (../shared/data/sia) is absent");
  /* the cut: the header and the first 40 jobs */
  FILE *in = fopen(wl, "r"), *out = fopen("cut.csv", "w");
  CHECK(in && out);
  char line[512];
  for (int n = 0; n < 41 && fgets(line, sizeof line, in); n++) fputs(line, out);
  fclose(in);
  fclose(out);
  char err[STK_ERRMSG_MAX] = "";
  struct stk_sim_apps *base, *ty[3];
  const char *names[3] = {"aws", "rtx", "dgx-ext"};
  const unsigned nodes[3] = {6, 3, 2}, gpn[3] = {4, 8, 8};
  struct stk_sim_gpu_type types[3];
  CHECK_MSG(stk_sim_apps_load(&base, traces, err) == 0, "%s", err);
  for (int t = 0; t < 3; t++) {
    CHECK_MSG(stk_sim_apps_load_type(&ty[t], traces, names[t], err) == 0, "%s", err);
    types[t] = (struct stk_sim_gpu_type){names[t], nodes[t], gpn[t], ty[t]};
  }
  struct stk_sim_jobs *j;
  CHECK_MSG(stk_sim_jobs_load(&j, base, "cut.csv", err) == 0, "%s", err);
  double first[40];
  /* and the same again: nothing kept between runs; the third with every
   * program solved by GLPK, not the dynamic program: the same schedule */
  for (int rep = 0; rep < 3; rep++) {
    stk__sia_dp_first = rep < 2;
    struct stk_sim_jobs_opts o;
    memset(&o, 0, sizeof o);
    o.policy = "sia-glpk";
    o.types = types;
    o.ntypes = 3;
    struct stk_sim_jobs_result r;
    CHECK_MSG(stk_sim_jobs_run(j, &o, &r, err) == 0, "%s", err);
    CHECK_EQ(r.completed, 40);
    CHECK_EQ(r.rounds, 391);
    CHECK_MSG(fabs(r.jct_mean - 1533.05) < 0.005, "mean JCT %.3f, pinned 1533.05", r.jct_mean);
    CHECK_EQ(r.nrec, 40);
    for (int k = 0; k < 40; k++) {
      if (rep == 0) first[k] = r.rec[k].finish;
      CHECK_MSG(r.rec[k].finish == first[k], "run %d: job %d finished at %.3f, not %.3f", rep, k,
                r.rec[k].finish, first[k]);
    }
    stk_sim_jobs_result_free(&r);
  }
  stk_sim_jobs_free(j);
  for (int t = 0; t < 3; t++) stk_sim_apps_free(ty[t]);
  stk_sim_apps_free(base);
}
