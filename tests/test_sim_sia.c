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
#include "test_sim_sia.h"

TEST(sim_sia_pinned_philly_cut) {
  struct stk_sim_apps *base, *ty[3];
  struct stk_sim_gpu_type types[3];
  struct stk_sim_jobs *j = sia_philly_cut(&base, ty, types);
  if (!j) SKIP("shared data (../shared/data/sia) is absent");
  char err[STK_ERRMSG_MAX] = "";
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
