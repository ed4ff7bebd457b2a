/* Tests of heterogeneous clusters in the job simulator (issue 22 section
 * 3): virtual nodes and the repair of a placement spread over GPU types,
 * per-type throughput and restarts, Gavel's choice of the faster type,
 * Sia and Pollux finishing their jobs, refusals, and the Sia artifact's
 * ordering Sia < Pollux < Gavel on a cut of a Philly workload. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/sim/jobs_impl.h"
#include "test.h"

/* A toy application measured on two types: on rtx 1 s per step of 8
 * samples on one GPU, on aws twice as slow; three epochs of 100 progress,
 * no gradient noise. */
static void write_typed_app(void) {
  mkdir("traces", 0755);
  mkdir("traces/toy", 0755);
  const char *val = "progress,iteration,metric,grad_sqr,grad_var\n"
                    "100,100,0.5,1,0\n"
                    "200,200,0.6,1,0\n"
                    "300,300,0.7,1,0\n";
  test_write_file("traces/toy/validation-8.csv", val, strlen(val));
  test_write_file("traces/toy/validation-32.csv", val, strlen(val));
  for (int slow = 0; slow < 2; slow++) {
    double f = slow ? 2 : 1;
    char pl[1024], sc[512], path[128];
    snprintf(pl, sizeof pl,
             "placement,local_bsz,step_time,sync_time\n"
             "1,4,%g,0\n1,8,%g,0\n2,4,%g,%g\n2,8,%g,%g\n11,4,%g,%g\n11,8,%g,%g\n"
             "4,4,%g,%g\n4,8,%g,%g\n8,4,%g,%g\n8,8,%g,%g\n",
             0.5 * f, 1.0 * f, 0.6 * f, 0.1 * f, 1.1 * f, 0.1 * f, 0.7 * f, 0.2 * f, 1.2 * f,
             0.2 * f, 0.6 * f, 0.1 * f, 1.1 * f, 0.1 * f, 0.6 * f, 0.1 * f, 1.1 * f, 0.1 * f);
    snprintf(sc, sizeof sc,
             "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
             "6,6,4,%g,%g\n6,6,8,%g,%g\n6,12,4,%g,%g\n6,12,8,%g,%g\n",
             0.9 * f, 0.4 * f, 1.4 * f, 0.4 * f, 1.0 * f, 0.5 * f, 1.5 * f, 0.5 * f);
    const char *ty = slow ? "aws" : "rtx";
    snprintf(path, sizeof path, "traces/toy/placements-%s.csv", ty);
    test_write_file(path, pl, strlen(pl));
    snprintf(path, sizeof path, "traces/toy/scalability-%s.csv", ty);
    test_write_file(path, sc, strlen(sc));
    if (!slow) {
      test_write_file("traces/toy/placements.csv", pl, strlen(pl));
      test_write_file("traces/toy/scalability.csv", sc, strlen(sc));
    }
  }
}

struct typed {
  struct stk_sim_apps *base, *aws, *rtx;
  struct stk_sim_gpu_type types[2];
};

static void typed_load(struct typed *t, unsigned aws_nodes, unsigned rtx_nodes) {
  write_typed_app();
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load(&t->base, "traces", err) == 0, "%s", err);
  CHECK_MSG(stk_sim_apps_load_type(&t->aws, "traces", "aws", err) == 0, "%s", err);
  CHECK_MSG(stk_sim_apps_load_type(&t->rtx, "traces", "rtx", err) == 0, "%s", err);
  t->types[0] = (struct stk_sim_gpu_type){"aws", aws_nodes, 4, t->aws};
  t->types[1] = (struct stk_sim_gpu_type){"rtx", rtx_nodes, 8, t->rtx};
}

static void typed_free(struct typed *t) {
  stk_sim_apps_free(t->base);
  stk_sim_apps_free(t->aws);
  stk_sim_apps_free(t->rtx);
}

static struct stk_sim_jobs *jobs_from(const struct stk_sim_apps *a, const char *csv) {
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *j;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_jobs_load(&j, a, "jobs.csv", err) == 0, "jobs: %s", err);
  return j;
}

static int run_typed(const struct stk_sim_jobs *j, struct typed *t, size_t ntypes,
                     const char *policy, struct stk_sim_jobs_result *r, char *err) {
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = policy;
  o.types = t->types;
  o.ntypes = (uint32_t)ntypes;
  return stk_sim_jobs_run(j, &o, r, err);
}

/* The layout: an 8-GPU node is two virtual 4-GPU nodes of one machine; a
 * placement over two types keeps the type it has most GPUs of, ties to the
 * faster (rtx over aws); GPUs group by physical node. */
TEST(sim_hetero_layout_and_repair) {
  struct stk_sim_gpu_type types[2] = {{"aws", 2, 4, NULL}, {"rtx", 1, 8, NULL}};
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.types = types;
  o.ntypes = 2;
  struct stk_sim_apps *dummy = (struct stk_sim_apps *)1; /* only checked for NULL */
  types[0].apps = types[1].apps = dummy;
  struct stk__jrun rn;
  memset(&rn, 0, sizeof rn);
  rn.o = &o;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk__jhet_init(&rn, err) == 0, "%s", err);
  CHECK_EQ(rn.nodes, 4);
  CHECK_EQ(rn.gpn, 4);
  CHECK_EQ(rn.gpus, 16);
  CHECK(rn.vtype[0] == 0 && rn.vtype[1] == 0 && rn.vtype[2] == 1 && rn.vtype[3] == 1);
  CHECK(rn.vphys[2] == rn.vphys[3] && rn.vphys[1] != rn.vphys[2]);
  uint8_t a[8] = {0, 0, 0, 2, 2, 3, 3, 3}; /* 3 aws, 5 rtx */
  CHECK_EQ(stk__jhet_repair(&rn, a, 8), 5);
  for (int i = 0; i < 5; i++) CHECK(rn.vtype[a[i]] == 1);
  int place[16];
  CHECK_EQ(stk__jhet_place(&rn, a, 5, place), 1); /* one 8-GPU machine */
  CHECK_EQ(place[0], 5);
  uint8_t tie[4] = {0, 1, 2, 3}; /* 2 aws, 2 rtx: the faster */
  CHECK_EQ(stk__jhet_repair(&rn, tie, 4), 2);
  CHECK(rn.vtype[tie[0]] == 1 && rn.vtype[tie[1]] == 1);
  types[1].gpus_per_node = 6;
  memset(&rn, 0, sizeof rn);
  rn.o = &o;
  CHECK(stk__jhet_init(&rn, err) == STK_EINVAL);
  CHECK(strstr(err, "not a multiple of 4") != NULL);
}

/* One job of 1 GPU: Gavel puts it on the faster type, where it starts at
 * the first round (60 s), pays the 30 s restart and runs 300 steps of 1 s:
 * done at 390. On aws alone each step takes 2 s: done at 690. */
TEST(sim_hetero_gavel_picks_faster_type) {
  struct typed t;
  typed_load(&t, 1, 1);
  struct stk_sim_jobs *j = jobs_from(t.base, "name,time,application,num_replicas,batch_size\n"
                                             "a,0,toy,1,8\n");
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(run_typed(j, &t, 2, "gavel", &r, err) == 0, "%s", err);
  CHECK_EQ(r.completed, 1);
  CHECK_EQ((long long)r.rec[0].finish, 390);
  stk_sim_jobs_result_free(&r);
  CHECK_MSG(run_typed(j, &t, 1, "gavel", &r, err) == 0, "%s", err);
  CHECK_EQ((long long)r.rec[0].finish, 690);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  typed_free(&t);
}

/* Two like jobs that each need the whole type: every share splitting the
 * GPUs between them is optimal, and Gavel's program is solved as the
 * artifact's interior point solves it, half each (the simplex gives one
 * all and the other nothing), so they take turns round by round, each
 * restarted every time it comes back, and finish within a round or so of
 * each other. */
TEST(sim_hetero_gavel_tied_jobs_take_turns) {
  struct typed t;
  typed_load(&t, 1, 1);
  struct stk_sim_jobs *j = jobs_from(t.base, "name,time,application,num_replicas,batch_size\n"
                                             "a,0,toy,4,32\n"
                                             "b,0,toy,4,32\n");
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(run_typed(j, &t, 1, "gavel", &r, err) == 0, "%s", err);
  CHECK_EQ(r.completed, 2);
  for (int k = 0; k < 2; k++)
    CHECK_MSG(r.rec[k].restarts >= 4, "%s restarted %d times", r.rec[k].name, r.rec[k].restarts);
  CHECK_MSG(fabs(r.rec[0].finish - r.rec[1].finish) <= 120, "finished at %g and %g",
            r.rec[0].finish, r.rec[1].finish);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  typed_free(&t);
}

/* Gavel keeps a job on one GPU type: a job wider than every type (10 GPUs
 * on 4 aws + 8 rtx) can never start, so it is counted too large and the
 * run ends when the rest is done, not at the horizon. */
TEST(sim_hetero_gavel_job_wider_than_every_type) {
  struct typed t;
  typed_load(&t, 1, 1);
  struct stk_sim_jobs *j = jobs_from(t.base, "name,time,application,num_replicas,batch_size\n"
                                             "a,0,toy,1,8\n"
                                             "b,0,toy,10,32\n");
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(run_typed(j, &t, 2, "gavel", &r, err) == 0, "%s", err);
  CHECK_EQ(r.too_large, 1);
  CHECK_EQ(r.completed, 1);
  CHECK_EQ((long long)r.rec[0].finish, 390);
  CHECK_MSG(r.rec[1].finish < 0, "b finished at %g", r.rec[1].finish);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  typed_free(&t);
}

/* Sia, Pollux (type-blind, repaired) and Gavel finish every job of a small
 * mixed workload; a type-aware policy without types, a type without an
 * application's measurements and a trace job are refused by name. */
TEST(sim_hetero_policies_finish_and_refusals) {
  struct typed t;
  typed_load(&t, 2, 1);
  struct stk_sim_jobs *j = jobs_from(t.base, "name,time,application,num_replicas,batch_size\n"
                                             "a,0,toy,1,8\n"
                                             "b,30,toy,2,16\n"
                                             "c,100,toy,4,32\n"
                                             "d,200,toy,8,32\n");
  const char *pols[] = {"sia", "pollux", "gavel", "tiresias"};
  char err[STK_ERRMSG_MAX] = "";
  for (int p = 0; p < 4; p++) {
    struct stk_sim_jobs_result r;
    CHECK_MSG(run_typed(j, &t, 2, pols[p], &r, err) == 0, "%s: %s", pols[p], err);
    CHECK_MSG(r.completed == 4, "%s completed %zu", pols[p], r.completed);
    CHECK(isfinite(r.jct_mean) && r.jct_mean > 0);
    stk_sim_jobs_result_free(&r);
  }
  struct stk_sim_jobs_result r;
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = "sia";
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK(strstr(err, "--gpu-types") != NULL);
  struct stk_sim_apps *none;
  mkdir("other", 0755);
  mkdir("other/x", 0755);
  CHECK(system("cp traces/toy/validation-8.csv traces/toy/placements-aws.csv "
         "traces/toy/scalability-aws.csv other/x/") == 0);
  CHECK_MSG(stk_sim_apps_load_type(&none, "other", "aws", err) == 0, "%s", err);
  const struct stk_sim_apps *keep = t.types[0].apps;
  t.types[0].apps = none;
  CHECK(run_typed(j, &t, 2, "gavel", &r, err) == STK_EINVAL);
  CHECK_MSG(strstr(err, "GPU type aws has no measurements of toy") != NULL, "%s", err);
  t.types[0].apps = keep;
  stk_sim_apps_free(none);
  struct stk_sim_jobs *tr = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                            "x,0,1,100\n");
  CHECK(run_typed(tr, &t, 2, "tiresias", &r, err) == STK_EINVAL);
  CHECK(strstr(err, "no application") != NULL);
  stk_sim_jobs_free(tr);
  stk_sim_jobs_free(j);
  typed_free(&t);
}
