/* The resource models' "cannot happen" failures (src/sim/resource.h) say
 * what happened: a hold of placements the model cannot hold (more GPUs on
 * a node than it has; a job the MIG model never placed) fails with a
 * reason in r->why, which the job engine puts in the run's error. */
#include "../src/sim/resource.h"
#include "test_sim_placer.h"

TEST(sim_resource_pods_hold_says_why) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,2,100\n"
                                 "b,0,2,100\n");
  struct stk__sim_res *r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk__sim_res_pods(&r, 1, 2, j, "BestFit", 1, err) == 0, "%s", err);
  /* two 2-GPU placements on the one 2-GPU node */
  uint8_t a0[2] = {0, 0}, a1[2] = {0, 0};
  uint8_t *const alloc[2] = {a0, a1};
  const int n[2] = {2, 2};
  const size_t idx[2] = {0, 1};
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 2), STK_ENOSPC);
  CHECK_CONTAINS(r->why, "placer BestFit");
  CHECK_CONTAINS(r->why, "node 0");
  stk__sim_res_free(r);
  stk_sim_jobs_free(j);
}

TEST(sim_resource_mig_hold_says_why) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,1,100\n");
  struct stk__sim_res *r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk__sim_res_mig(&r, 1, 2, j, "mig", err) == 0, "%s", err);
  uint8_t a0[1] = {0};
  uint8_t *const alloc[1] = {a0};
  const int n[1] = {1};
  const size_t idx[1] = {0};
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 1), STK_EINVAL); /* never placed here */
  CHECK_CONTAINS(r->why, "MIG: job 0 stands with 1 GPUs");
  stk__sim_res_free(r);
  stk_sim_jobs_free(j);
}
