/* The resource models own what is free (src/sim/resource.h): a hold of
 * placements the cluster cannot have is refused with the job and node
 * named, on whole GPUs and on a cluster of GPU types (capacity counted per
 * machine, a placement on one type), and the engine runs the elastic
 * policies through the model. The job engine's workload models
 * (jobs_impl.h, struct stk__jwork_ops) drive both kinds of job: duration
 * jobs and jobs of measured applications. */
#include <math.h>
#include <sys/stat.h>

#include "../src/sim/jobs_impl.h"
#include "../src/sim/resource.h"
#include "test_sim_placer.h"

TEST(sim_resource_whole_refuses_impossible_hold) {
  struct stk__sim_res *r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_OK(stk__sim_res_whole(&r, 2, 2, err));
  /* jobs 0 and 1 both on node 0 of 2 GPUs: 3 GPUs there */
  uint8_t a0[2] = {0, 1}, a1[2] = {0, 0};
  uint8_t *const alloc[2] = {a0, a1};
  const int n[2] = {2, 2};
  const size_t idx[2] = {0, 1};
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 2), STK_ENOSPC);
  CHECK_CONTAINS(r->why, "job 1 takes more GPUs on node 0 than the 2 it has");
  /* refused: nothing is held */
  CHECK_EQ(stk__sim_res_free_type(r, 0), 4);
  /* a node the cluster does not have */
  a1[1] = 5;
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 2), STK_EINVAL);
  CHECK_CONTAINS(r->why, "job 1 holds a GPU on node 5; the cluster has 2");
  /* what fits is held, and the rest is free */
  a1[0] = 1, a1[1] = 1;
  const int n1[2] = {1, 1}; /* job 0 on node 0, job 1 on node 1 */
  CHECK_OK(r->ops->hold(r, alloc, n1, idx, 2));
  CHECK_EQ(r->free_gpus[0], 1);
  CHECK_EQ(r->free_gpus[1], 1);
  CHECK_OK(stk__sim_res_release_all(r));
  CHECK_EQ(r->free_gpus[0], 2);
  stk__sim_res_free(r);
}

TEST(sim_resource_hetero_counts_machines_and_types) {
  /* machine 0: 8 GPUs of type 0 as two 4-GPU nodes; machine 1: 4 of type 1 */
  const int vtype[3] = {0, 0, 1}, vphys[3] = {0, 0, 1};
  struct stk__sim_res *r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk__sim_res_hetero(&r, 3, 4, vtype, vphys, err) == 0, "%s", err);
  CHECK_EQ(stk__sim_res_free_type(r, 0), 8);
  CHECK_EQ(stk__sim_res_free_type(r, 1), 4);
  /* 8 GPUs written on the machine's first node (as Sia and Gavel write
   * them) fit the machine */
  uint8_t a0[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  uint8_t *const alloc[1] = {a0};
  const size_t idx[1] = {0};
  int n[1] = {8};
  CHECK_OK(r->ops->hold(r, alloc, n, idx, 1));
  CHECK_EQ(stk__sim_res_free_type(r, 0), 0);
  CHECK_EQ(stk__sim_res_free_machine(r, 1), 0);
  CHECK_EQ(stk__sim_res_free_machine(r, 2), 4);
  /* GPUs written within a node stay on that node (as the queueing
   * policies and Pollux write them) */
  uint8_t b0[2] = {1, 1};
  uint8_t *const balloc[1] = {b0};
  const int bn[1] = {2};
  CHECK_OK(r->ops->hold(r, balloc, bn, idx, 1));
  CHECK_EQ(r->free_gpus[0], 4);
  CHECK_EQ(r->free_gpus[1], 2);
  CHECK_OK(r->ops->hold(r, alloc, n, idx, 1));
  /* a ninth does not */
  n[0] = 9;
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 1), STK_ENOSPC);
  CHECK_CONTAINS(r->why, "job 0 takes more GPUs on machine 0 (node 0) than the 8 it has");
  /* nor does a placement over two types */
  a0[1] = 2;
  n[0] = 2;
  CHECK_EQ(r->ops->hold(r, alloc, n, idx, 1), STK_EINVAL);
  CHECK_CONTAINS(r->why, "job 0 holds GPUs of two types (nodes 0 and 2)");
  CHECK_EQ(stk__sim_res_free_type(r, 0), 8);
  stk__sim_res_free(r);
  /* machines must be numbered in node order */
  const int bad[3] = {0, 1, 0};
  CHECK_EQ(stk__sim_res_hetero(&r, 3, 4, vtype, bad, err), STK_EINVAL);
  CHECK_CONTAINS(err, "node 2's machine is out of order");
}

/* A toy application: three epochs of 100 progress, no gradient noise, 1 s
 * per step at 8 samples on one GPU (as test_sim_jobs.c's). */
static void write_toy_app(void) {
  mkdir("traces", 0755);
  mkdir("traces/toy", 0755);
  const char *val = "progress,iteration,metric,grad_sqr,grad_var\n"
                    "100,100,0.5,1,0\n200,200,0.6,1,0\n300,300,0.7,1,0\n";
  test_write_file("traces/toy/validation-8.csv", val, strlen(val));
  test_write_file("traces/toy/validation-32.csv", val, strlen(val));
  const char *pl = "placement,local_bsz,step_time,sync_time\n"
                   "1,4,0.5,0\n1,8,1.0,0\n2,4,0.6,0.1\n2,8,1.1,0.1\n"
                   "11,4,0.7,0.2\n11,8,1.2,0.2\n4,4,0.6,0.1\n4,8,1.1,0.1\n";
  test_write_file("traces/toy/placements.csv", pl, strlen(pl));
  const char *sc = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                   "6,6,4,0.9,0.4\n6,6,8,1.4,0.4\n6,12,4,1.0,0.5\n6,12,8,1.5,0.5\n";
  test_write_file("traces/toy/scalability.csv", sc, strlen(sc));
}

/* The queueing policies start jobs at what their workload model asks;
 * an elastic policy (optimus, pollux) sizes them itself and the whole-GPU model
 * places and holds them: the run ends with every job done. */
TEST(sim_resource_elastic_policy_runs_on_model) {
  write_toy_app();
  struct stk_sim_apps *apps;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load(&apps, "traces", err) == 0, "apps: %s", err);
  const char *csv = "name,time,application,num_replicas,batch_size\n"
                    "a,0,toy,1,8\nb,0,toy,2,16\nc,0,toy,1,8\n";
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *j;
  CHECK_MSG(stk_sim_jobs_load(&j, apps, "jobs.csv", err) == 0, "jobs: %s", err);
  const char *pols[] = {"optimus", "pollux", "fifo"};
  for (size_t p = 0; p < 3; p++) {
    struct stk_sim_jobs_result r;
    struct stk_sim_jobs_opts o;
    stk_sim_jobs_opts_init(&o);
    o.policy = pols[p];
    o.nodes = 2;
    o.gpus_per_node = 2;
    CHECK_MSG(stk_sim_jobs_run(j, &o, &r, err) == 0, "%s: %s", pols[p], err);
    CHECK_EQ(r.completed, 3);
    stk_sim_jobs_result_free(&r);
  }
  /* the placer refusal gives its reason */
  struct stk_sim_jobs_result r;
  struct stk_sim_jobs_opts o;
  stk_sim_jobs_opts_init(&o);
  o.policy = "pollux";
  o.placer = "FGD";
  CHECK_EQ(stk_sim_jobs_run(j, &o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "the resource model checks and holds what it chooses");
  stk_sim_jobs_free(j);
  stk_sim_apps_free(apps);
}

/* Both kinds of job through the one interface: what they ask, their work
 * over an interval at their allocation, when they are done, what is left. */
TEST(sim_workload_models_drive_both_kinds) {
  struct stk_sim_jobs *t = trace("jobid,submit_time,num_gpus,duration\na,0,2,100\n");
  const struct stk__jspec *ds = &t->job[0];
  const struct stk__jwork_ops *w = stk__jwork_of(ds);
  CHECK(w == &stk__jwork_duration);
  CHECK_EQ(w->asks(ds), 2);
  CHECK(w->placed == NULL);
  struct stk__jrun rn;
  memset(&rn, 0, sizeof rn);
  rn.gpus = 4;
  struct stk__jstate js;
  memset(&js, 0, sizeof js);
  js.spec = ds;
  js.held = 2;
  js.nplace = 1;
  js.place[0] = 2;
  w->step(&rn, &js, 60, 0);
  CHECK(!js.done);
  CHECK(fabs(js.attained - 120) < 1e-9);
  CHECK(fabs(w->remaining(&rn, &js) - 40) < 1e-9);
  rn.now = 60;
  w->step(&rn, &js, 50, 10); /* 10 s of restart paid first: done 40 s later */
  CHECK(js.done);
  CHECK_EQ((long long)js.done_at, 110);
  CHECK(fabs(w->remaining(&rn, &js)) < 1e-9);
  stk_sim_jobs_free(t);

  /* a job of the toy application: 3 epochs of 100 progress at 1 per
   * second on one GPU */
  write_toy_app();
  struct stk_sim_apps *apps;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load(&apps, "traces", err) == 0, "apps: %s", err);
  const char *csv = "name,time,application,num_replicas,batch_size\na,0,toy,1,8\n";
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *m;
  CHECK_MSG(stk_sim_jobs_load(&m, apps, "jobs.csv", err) == 0, "jobs: %s", err);
  const struct stk__jspec *ms = &m->job[0];
  w = stk__jwork_of(ms);
  CHECK(w == &stk__jwork_measured);
  CHECK_EQ(w->asks(ms), 1);
  memset(&rn, 0, sizeof rn);
  rn.gpus = 1;
  memset(&js, 0, sizeof js);
  js.spec = ms;
  js.target_bsz = ms->bsz;
  js.held = 1;
  js.nplace = 1;
  js.place[0] = 1;
  w->placed(&rn, &js); /* the batch for one GPU */
  CHECK_EQ(js.atomic, 8);
  double before = w->remaining(&rn, &js);
  w->step(&rn, &js, 60, 0);
  CHECK(fabs(js.progress - 60) < 1e-6);
  CHECK(!js.done);
  w->step(&rn, &js, 600, 0);
  CHECK(js.done);
  CHECK_EQ((long long)js.done_at, 240);
  CHECK(w->remaining(&rn, &js) < before);
  free(js.opt_pred);
  stk_sim_jobs_free(m);
  stk_sim_apps_free(apps);
}
