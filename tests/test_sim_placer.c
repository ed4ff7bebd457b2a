/* Tests of the job engine's resource models (src/sim/resource.h): the
 * placement replay's policies placing the job engine's jobs (--placer).
 * A job of up to a node's GPUs is one pod on one node, where the whole-GPU
 * model spreads it over nodes; BestFit and FGD pack small jobs so a
 * node-wide one fits; a job wider than a node takes whole nodes; policies
 * that place their own jobs, and names that are no placement policy, are
 * refused. */
#include "test_sim_placer.h"

/* 2 x 4 GPUs; two 3-GPU jobs take a node each and leave 1 + 1. The whole
 * model starts the 2-GPU job at once over both nodes; as a pod it needs
 * two GPUs on one node, so it waits for a 3-GPU job to finish. */
TEST(sim_placer_keeps_a_job_on_one_node) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,3,1000\n"
                                 "b,0,3,2000\n"
                                 "c,0,2,100\n");
  struct stk_sim_jobs_result w, p;
  placer_run_ok(j, "fifo", NULL, 2, 4, &w);
  CHECK_EQ(w.completed, 3);
  CHECK_EQ((long long)w.rec[2].queue_s, 60); /* the first round */
  const char *placers[] = {"FGD", "BestFit", "Random"};
  for (size_t k = 0; k < 3; k++) {
    placer_run_ok(j, "fifo", placers[k], 2, 4, &p);
    CHECK_EQ(p.completed, 3);
    CHECK_MSG(p.rec[2].start >= p.rec[0].finish, "%s: c started at %.0f, a finished at %.0f",
              placers[k], p.rec[2].start, p.rec[0].finish);
    CHECK(p.rec[2].start < p.rec[1].finish);
    stk_sim_jobs_result_free(&p);
  }
  placer_run_ok(j, "tiresias", "BestFit", 2, 4, &p);
  CHECK_EQ(p.completed, 3);
  CHECK(p.rec[2].start >= p.rec[0].finish);
  stk_sim_jobs_result_free(&p);
  /* multi picks again among the jobs the model found room for (a job the
   * power cap allows but no node holds once looped for ever) */
  placer_run_ok(j, "multi", "Random", 2, 4, &p);
  CHECK_EQ(p.completed, 3);
  stk_sim_jobs_result_free(&p);
  stk_sim_jobs_result_free(&w);
  stk_sim_jobs_free(j);
}

/* Two 1-GPU jobs and one 4-GPU job, all at once. BestFit and FGD put the
 * small jobs on one node, so the 4-GPU job gets the other one at once and
 * all three run together. */
TEST(sim_placer_packs_small_jobs) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "a,0,1,1000\n"
                                 "b,0,1,1000\n"
                                 "c,0,4,100\n");
  const char *placers[] = {"FGD", "BestFit"};
  for (size_t k = 0; k < 2; k++) {
    struct stk_sim_jobs_result p;
    placer_run_ok(j, "fifo", placers[k], 2, 4, &p);
    CHECK_EQ(p.completed, 3);
    for (int i = 0; i < 3; i++)
      CHECK_MSG((long long)p.rec[i].queue_s == 60, "%s: job %d queued %.0f s", placers[k], i,
                p.rec[i].queue_s);
    CHECK_EQ((long long)p.rec[2].finish, 160);
    stk_sim_jobs_result_free(&p);
  }
  stk_sim_jobs_free(j);
}

/* A job wider than a node takes one whole node plus 2 GPUs of the other;
 * a 2-GPU job fits beside it, and a second 6-GPU job waits for the first. */
TEST(sim_placer_spans_whole_nodes) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\n"
                                 "wide,0,6,500\n"
                                 "two,0,2,100\n"
                                 "wide2,0,6,100\n");
  struct stk_sim_jobs_result p;
  placer_run_ok(j, "fifo", "FGD", 2, 4, &p);
  CHECK_EQ(p.completed, 3);
  CHECK_EQ((long long)p.rec[0].queue_s, 60);
  CHECK_EQ((long long)p.rec[1].queue_s, 60);
  CHECK(p.rec[2].start >= p.rec[0].finish);
  CHECK_EQ(p.too_large, 0);
  stk_sim_jobs_result_free(&p);
  stk_sim_jobs_free(j);
}

TEST(sim_placer_refusals) {
  struct stk_sim_jobs *j = trace("jobid,submit_time,num_gpus,duration\na,0,1,10\n");
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_EQ(placer_run(j, "optimus", "FGD", 2, 4, &r, err), STK_EINVAL);
  CHECK_MSG(strstr(err, "policy optimus places its own jobs"), "%s", err);
  CHECK_EQ(placer_run(j, "fifo", "Tetris", 2, 4, &r, err), STK_EINVAL);
  CHECK_MSG(strstr(err, "no placement policy 'Tetris'"), "%s", err);
  /* the same run with the default model and with a placer agree on a
   * cluster this job cannot fragment */
  struct stk_sim_jobs_result a, b;
  placer_run_ok(j, "multi", NULL, 2, 4, &a);
  placer_run_ok(j, "multi", "GpuPacking", 2, 4, &b);
  CHECK_EQ((long long)a.rec[0].finish, (long long)b.rec[0].finish);
  stk_sim_jobs_result_free(&a);
  stk_sim_jobs_result_free(&b);
  stk_sim_jobs_free(j);
}
