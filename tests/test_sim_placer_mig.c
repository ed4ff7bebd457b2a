/* Tests of the job engine's MIG resource model (--placer mig[:PROFILE],
 * src/sim/resource_mig.c): one-GPU jobs run side by side on instances of
 * one GPU where whole GPUs queue them; a profile too large for two leaves
 * them queued; a job of several GPUs takes whole-GPU instances only when
 * the instances in its way are idle; bad names are refused. */
#include <math.h>

#include "test_sim_placer.h"

/* One GPU, three one-GPU jobs of 600 s at once: whole GPUs run them one
 * after another; as 2g instances (3 x 2 of 7 compute slices) all three
 * start in the first round and hold 6/7 of the GPU. */
TEST(sim_placer_mig_side_by_side) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,1,600\n"
                                 "b,0,1,600\n"
                                 "c,0,1,600\n");
  struct stk_sim_jobs_result w, m;
  placer_run_ok(j, "fifo", NULL, 1, 1, &w);
  CHECK_EQ(w.completed, 3);
  CHECK(w.rec[1].start >= w.rec[0].finish);
  CHECK(w.rec[2].start >= w.rec[1].finish);
  const char *pols[] = {"fifo", "sjf", "tiresias", "multi", "carbon"};
  for (size_t k = 0; k < 5; k++) {
    placer_run_ok(j, pols[k], "mig", 1, 1, &m);
    CHECK_EQ(m.completed, 3);
    for (int i = 0; i < 3; i++) {
      CHECK_MSG(m.rec[i].start == 60, "%s: job %d started at %.0f", pols[k], i, m.rec[i].start);
      CHECK_EQ((long long)m.rec[i].finish, 660);
      /* GPU-seconds count the instance's share: 600 s x 2/7 */
      CHECK_MSG(fabs(m.rec[i].gpu_s - 600.0 * 2 / 7) < 1e-6, "%s: %g GPU-s", pols[k],
                m.rec[i].gpu_s);
    }
    CHECK(m.jct_mean < w.jct_mean);
    stk_sim_jobs_result_free(&m);
  }
  /* 4g: two do not fit one GPU (8 compute slices), so they queue as on
   * whole GPUs; 7g is a whole GPU */
  placer_run_ok(j, "fifo", "mig:4g", 1, 1, &m);
  CHECK(m.rec[1].start >= m.rec[0].finish);
  stk_sim_jobs_result_free(&m);
  placer_run_ok(j, "fifo", "mig:7g.80gb", 1, 1, &m);
  CHECK_EQ((long long)m.jct_mean, (long long)w.jct_mean);
  stk_sim_jobs_result_free(&m);
  /* 3g: two side by side (3 + 3 of 7), the third after them */
  placer_run_ok(j, "fifo", "mig:3g", 1, 1, &m);
  CHECK_EQ((long long)m.rec[0].start, 60);
  CHECK_EQ((long long)m.rec[1].start, 60);
  CHECK(m.rec[2].start >= m.rec[0].finish);
  stk_sim_jobs_result_free(&m);
  stk_sim_jobs_result_free(&w);
  stk_sim_jobs_free(j);
}

/* Two GPUs: a one-GPU job holds a 2g instance on GPU 0; a two-GPU job
 * needs a whole-GPU instance on each GPU, so it waits until the 2g
 * instance is idle and is then reconfigured away; under fifo a later
 * one-GPU job waits behind it. */
TEST(sim_placer_mig_reconfigures_only_idle) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,1,600\n"
                                 "b,0,2,600\n"
                                 "c,100,1,100\n");
  struct stk_sim_jobs_result m;
  placer_run_ok(j, "fifo", "mig", 1, 2, &m);
  CHECK_EQ(m.completed, 3);
  CHECK_EQ((long long)m.rec[0].start, 60);
  CHECK(m.rec[1].start >= m.rec[0].finish);
  CHECK(m.rec[2].start >= m.rec[1].finish); /* fifo: c waits behind b */
  stk_sim_jobs_result_free(&m);
  /* multi's utilization term starts b first, on two 7g instances; when
   * they are idle, a and c take 2g instances made from them */
  placer_run_ok(j, "multi", "mig", 1, 2, &m);
  CHECK_EQ(m.completed, 3);
  CHECK_EQ((long long)m.rec[1].start, 60);
  CHECK(m.rec[0].start >= m.rec[1].finish);
  CHECK_EQ((long long)m.rec[0].start, (long long)m.rec[2].start);
  stk_sim_jobs_result_free(&m);
  stk_sim_jobs_free(j);
}

TEST(sim_placer_mig_refuses_bad_input) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\na,0,1,600\n");
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_EQ(placer_run(j, "fifo", "mig:5g", 1, 1, &r, err), STK_EINVAL);
  CHECK_MSG(strstr(err, "no MIG profile '5g'"), "%s", err);
  CHECK(!strchr(err, '\n'));
  CHECK_EQ(placer_run(j, "optimus", "mig", 1, 1, &r, err), STK_EINVAL);
  CHECK_MSG(strstr(err, "places its own jobs"), "%s", err);
  stk_sim_jobs_free(j);
}
