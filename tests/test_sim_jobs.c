/* Tests of the job-level simulator (stoker sim --jobs): exact completion
 * times on a hand-made application, queueing policies on duration traces,
 * energy, the power cap and carbon deferral, bad input, and a reduced
 * reproduction of the Pollux OSDI'21 artifact's JCT table on the shared
 * data. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/sim.h"
#include "test.h"

/* A toy application: three epochs of 100 progress each, no gradient noise
 * (efficiency 1), 1 s per step at 8 samples on one GPU; enough placements
 * and scalability rows that the (nodes, replicas, batch) points span a
 * volume. */
static void write_toy_app(void) {
  mkdir("traces", 0755);
  mkdir("traces/toy", 0755);
  const char *val = "progress,iteration,metric,grad_sqr,grad_var\n"
                    "100,100,0.5,1,0\n"
                    "200,200,0.6,1,0\n"
                    "300,300,0.7,1,0\n";
  test_write_file("traces/toy/validation-8.csv", val, strlen(val));
  test_write_file("traces/toy/validation-32.csv", val, strlen(val));
  const char *pl = "placement,local_bsz,step_time,sync_time\n"
                   "1,4,0.5,0\n"
                   "1,8,1.0,0\n"
                   "2,4,0.6,0.1\n"
                   "2,8,1.1,0.1\n"
                   "11,4,0.7,0.2\n"
                   "11,8,1.2,0.2\n"
                   "4,4,0.6,0.1\n"
                   "4,8,1.1,0.1\n";
  test_write_file("traces/toy/placements.csv", pl, strlen(pl));
  const char *sc = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                   "6,6,4,0.9,0.4\n"
                   "6,6,8,1.4,0.4\n"
                   "6,12,4,1.0,0.5\n"
                   "6,12,8,1.5,0.5\n";
  test_write_file("traces/toy/scalability.csv", sc, strlen(sc));
}

static struct stk_sim_apps *toy_apps(void) {
  write_toy_app();
  struct stk_sim_apps *a;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_apps_load(&a, "traces", err);
  CHECK_MSG(rc == 0, "apps: %s", err);
  return a;
}

static struct stk_sim_jobs *jobs_from(const struct stk_sim_apps *a, const char *csv) {
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *j;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_load(&j, a, "jobs.csv", err);
  CHECK_MSG(rc == 0, "jobs: %s", err);
  return j;
}

static void run(const struct stk_sim_jobs *j, const char *policy, unsigned nodes, unsigned gpn,
                struct stk_sim_jobs_result *r) {
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = policy;
  o.nodes = nodes;
  o.gpus_per_node = gpn;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_run(j, &o, r, err);
  CHECK_MSG(rc == 0, "run: %s", err);
}

/* One job: allocated at the first round (60 s), loses the 30 s restart
 * delay, then runs three epochs of 100 progress at 1 per second (8
 * samples in 1 s, no noise): done at 390. A second job on a one-GPU
 * cluster waits for the round after that (420) and is done at 750. */
TEST(sim_jobs_exact_completion) {
  struct stk_sim_apps *a = toy_apps();
  struct stk_sim_jobs *j = jobs_from(a, "name,time,application,num_replicas,batch_size\n"
                                        "a,0,toy,1,8\n");
  struct stk_sim_jobs_result r;
  run(j, "tiresias", 1, 1, &r);
  CHECK_EQ(r.completed, 1);
  CHECK_EQ((long long)r.rec[0].finish, 390);
  CHECK_EQ((long long)r.rec[0].start, 60);
  CHECK_EQ((long long)r.rec[0].gpu_s, 330);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  j = jobs_from(a, "name,time,application,num_replicas,batch_size\n"
                   "a,0,toy,1,8\n"
                   "b,0,toy,1,8\n");
  for (int p = 0; p < 3; p++) {
    run(j, p == 0 ? "fifo" : p == 1 ? "tiresias" : "sjf", 1, 1, &r);
    CHECK_EQ(r.completed, 2);
    CHECK_EQ((long long)r.rec[0].finish, 390);
    CHECK_EQ((long long)r.rec[1].finish, 750);
    CHECK(fabs(r.jct_mean - 570) < 1e-9);
    CHECK_EQ((long long)r.rec[1].queue_s, 420);
    stk_sim_jobs_result_free(&r);
  }
  /* no restart delay: 60 + 300 */
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.nodes = 1;
  o.gpus_per_node = 1;
  o.restart_delay = -1;
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ((long long)r.rec[0].finish, 360);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  stk_sim_apps_free(a);
}

/* A measured placement is interpolated along the batch size; Optimus and
 * Pollux size the job themselves and still finish it. */
TEST(sim_jobs_elastic_policies_finish) {
  struct stk_sim_apps *a = toy_apps();
  struct stk_sim_jobs *j = jobs_from(a, "name,time,application,num_replicas,batch_size\n"
                                        "a,0,toy,1,8\n"
                                        "b,30,toy,2,16\n"
                                        "c,100,toy,4,32\n");
  const char *pols[] = {"optimus", "pollux", "multi", "carbon"};
  for (int p = 0; p < 4; p++) {
    struct stk_sim_jobs_result r;
    run(j, pols[p], 2, 4, &r);
    CHECK_MSG(r.completed == 3, "%s completed %zu", pols[p], r.completed);
    CHECK(r.jct_mean > 0 && isfinite(r.jct_mean));
    stk_sim_jobs_result_free(&r);
  }
  stk_sim_jobs_free(j);
  stk_sim_apps_free(a);
}

/* Duration traces: FIFO blocks behind a long head job, SJF does not, a
 * job larger than the cluster is counted and never runs, and Tiresias
 * demotes a job that has used 16 GPU-hours so a newcomer preempts it. */
TEST(sim_jobs_trace_policies) {
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                           "long,0,1,10000\n"
                                           "s1,0,1,10\n"
                                           "s2,0,1,10\n"
                                           "huge,0,64,10\n");
  struct stk_sim_jobs_result f, s;
  run(j, "fifo", 1, 1, &f);
  run(j, "sjf", 1, 1, &s);
  CHECK_EQ(f.too_large, 1);
  CHECK_EQ(s.too_large, 1);
  CHECK_EQ(f.completed, 3);
  CHECK(f.rec[1].start >= f.rec[0].finish);
  CHECK(s.rec[1].finish < s.rec[0].start);
  CHECK(s.jct_mean < f.jct_mean);
  stk_sim_jobs_result_free(&f);
  stk_sim_jobs_result_free(&s);
  stk_sim_jobs_free(j);
  /* an openb pod list: num_gpu from creation to deletion, CPU pods skipped */
  j = jobs_from(NULL, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
                      "p0,1000,10,1,1000,0,100\n"
                      "p1,1000,10,0,0,5,50\n"
                      "p2,1000,10,2,1000,10,40\n");
  CHECK_EQ(stk_sim_jobs_count(j), 2);
  run(j, "fifo", 1, 4, &f);
  CHECK_EQ((long long)f.rec[0].finish, 190);
  CHECK_EQ((long long)f.rec[1].finish, 120);
  stk_sim_jobs_result_free(&f);
  stk_sim_jobs_free(j);
  /* 16 GPUs for 2 h: demoted after 1 h; a newcomer at 2 h preempts it */
  j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                      "big,0,16,7200\n"
                      "new,7200,16,600\n");
  struct stk_sim_jobs_result t;
  run(j, "tiresias", 4, 4, &t);
  CHECK_EQ(t.completed, 2);
  CHECK(t.rec[1].finish < t.rec[0].finish);
  CHECK(t.rec[0].restarts >= 1);
  stk_sim_jobs_result_free(&t);
  stk_sim_jobs_free(j);
}

/* Energy is busy GPU-seconds at busy watts plus the rest at idle watts;
 * a power cap that allows one busy GPU serializes two jobs; the carbon
 * policy holds a job while the grid is dirtier than its mean. */
TEST(sim_jobs_energy_cap_carbon) {
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                           "a,0,1,200\n"
                                           "b,0,1,200\n");
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.nodes = 1;
  o.gpus_per_node = 2;
  o.idle_w = 0;
  o.busy_w = 100;
  o.price_kwh = 1;
  struct stk_sim_jobs_result r;
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ((long long)r.rec[0].gpu_s, 230);
  CHECK(fabs(r.energy_kwh - 2 * 230 * 100 / 3.6e6) < 1e-9);
  CHECK(fabs(r.cost - r.energy_kwh) < 1e-12);
  CHECK_EQ((long long)r.rec[1].start, 60); /* both at once */
  stk_sim_jobs_result_free(&r);
  o.idle_w = 10;
  o.power_cap_w = 120; /* 2 x 10 idle + 90 for one busy GPU */
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ(r.completed, 2);
  CHECK(r.rec[1].start >= r.rec[0].finish);
  stk_sim_jobs_result_free(&r);
  o.power_cap_w = 0;
  o.idle_w = 0; /* waiting costs idle power too; compare the work's carbon */
  double series[2] = {900, 100}; /* dirty first hour, clean second */
  o.carbon_series = series;
  o.ncarbon = 2;
  o.carbon_step_s = 3600;
  o.policy = "carbon";
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ((long long)r.rec[0].start, 3600);
  double kg = r.carbon_kg;
  stk_sim_jobs_result_free(&r);
  o.policy = "fifo";
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ((long long)r.rec[0].start, 60);
  CHECK_MSG(kg < r.carbon_kg, "carbon-aware %.4f kg vs fifo %.4f kg", kg, r.carbon_kg);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
}

static void expect_jobs_error(const struct stk_sim_apps *a, const char *csv, int code,
                              const char *needle) {
  test_write_file("bad.csv", csv, strlen(csv));
  struct stk_sim_jobs *j = NULL;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_load(&j, a, "bad.csv", err);
  CHECK_MSG(rc == code, "rc %d (want %d): %s", rc, code, err);
  CHECK(j == NULL);
  CHECK_CONTAINS(err, needle);
}

TEST(sim_jobs_bad_input) {
  struct stk_sim_apps *a = toy_apps();
  expect_jobs_error(a, "name,time,application,num_replicas,batch_size\n", STK_EEMPTY,
                    "bad.csv: no jobs after the header");
  expect_jobs_error(a, "name,time,application,num_replicas,batch_size\na,0,toy,1,8\nb,5,gpt9,1,8\n",
                    STK_EFORMAT, "bad.csv:3: unknown application 'gpt9'");
  expect_jobs_error(a, "name,time,application,num_replicas,batch_size\na,soon,toy,1,8\n",
                    STK_EFORMAT, "bad.csv:2: time 'soon'");
  expect_jobs_error(a, "name,time,application,num_replicas,batch_size\na,0,toy,0,8\n",
                    STK_EFORMAT, "bad.csv:2: num_replicas 0 is out of range");
  expect_jobs_error(a, "name,time,application\na,0,toy\n", STK_EFORMAT, "num_replicas");
  expect_jobs_error(NULL, "jobid,submit_time,num_gpus,duration\na,0,1,-5\n", STK_EFORMAT,
                    "bad.csv:2: duration -5 is below 0");
  expect_jobs_error(NULL, "name,time,application,num_replicas\na,0,toy,1\n", STK_EINVAL,
                    "need the application traces");
  /* a horizon that never drains: the run stops there and says so */
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                           "forever,0,1,1e12\n");
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.horizon = 3600;
  struct stk_sim_jobs_result r;
  CHECK_OK(stk_sim_jobs_run(j, &o, &r, NULL));
  CHECK_EQ(r.unfinished, 1);
  CHECK_EQ(r.completed, 0);
  CHECK(r.rounds <= 61);
  stk_sim_jobs_result_free(&r);
  /* a cancel flag stops a run */
  volatile int stop = 1;
  o.cancel = &stop;
  o.horizon = 0;
  CHECK(stk_sim_jobs_run(j, &o, &r, NULL) == STK_ECANCELED);
  o.cancel = NULL;
  /* elastic policies need measured applications */
  o.policy = "pollux";
  char err[STK_ERRMSG_MAX] = "";
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "sizes jobs by their measured throughput");
  o.policy = "nope";
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "no job policy 'nope'");
  stk_sim_jobs_free(j);
  /* an application directory with a broken placement */
  const char *pl = "placement,local_bsz,step_time,sync_time\n1x,4,0.5,0\n";
  test_write_file("traces/toy/placements.csv", pl, strlen(pl));
  struct stk_sim_apps *b;
  char e2[STK_ERRMSG_MAX] = "";
  CHECK(stk_sim_apps_load(&b, "traces", e2) == STK_EFORMAT);
  CHECK_CONTAINS(e2, "placements.csv:2: placement '1x'");
  stk_sim_apps_free(a);
}

static double mean_jct(const struct stk_sim_apps *a, const char *dir, const char *policy, int w,
                       double *wall) {
  char path[4300];
  snprintf(path, sizeof path, "%s/workload-%d.csv", dir, w);
  struct stk_sim_jobs *j;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_jobs_load(&j, a, path, err) == 0, "%s", err);
  struct stk_sim_jobs_result r;
  run(j, policy, 16, 4, &r);
  CHECK_EQ(r.completed, r.jobs);
  double m = r.jct_mean;
  if (wall) *wall += r.wall_s;
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  return m;
}

/* The reduced reproduction: Tiresias on the eight workloads at load 1 and
 * Optimus on the eight at load 0.5, each within 2% of the artifact's
 * published mean JCT; Pollux on workload 6 at load 0.5 within 5%, and
 * Pollux < Tiresias < Optimus there. The whole table: `stoker sim
 * --pollux-table`. */
TEST(sim_jobs_reproduces_pollux_artifact) {
  const char *data = test_shared_data();
  char traces[4200], w10[4200], w05[4200];
  if (data) snprintf(traces, sizeof traces, "%s/pollux/traces", data);
  if (!data || access(traces, R_OK) != 0) SKIP("shared data (../shared/data/pollux) is absent");
  snprintf(w10, sizeof w10, "%s/pollux/workloads", data);
  snprintf(w05, sizeof w05, "%s/pollux/workloads-0.5", data);
  struct stk_sim_apps *a;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load(&a, traces, err) == 0, "%s", err);
  for (int w = 1; w <= 8; w++) {
    double t = mean_jct(a, w10, "tiresias", w, NULL);
    double pt = stk_sim_jobs_published("tiresias", 1.0, w);
    double o = mean_jct(a, w05, "optimus", w, NULL);
    double po = stk_sim_jobs_published("optimus", 0.5, w);
    fprintf(stderr, "    workload-%d tiresias@1.0 %.1f (paper %.1f)  optimus@0.5 %.1f (paper %.1f)\n",
            w, t, pt, o, po);
    CHECK_MSG(fabs(t / pt - 1) <= 0.02, "tiresias workload-%d %.1f vs %.1f", w, t, pt);
    CHECK_MSG(fabs(o / po - 1) <= 0.02, "optimus workload-%d %.1f vs %.1f", w, o, po);
  }
  double p = mean_jct(a, w05, "pollux", 6, NULL);
  double pp = stk_sim_jobs_published("pollux", 0.5, 6);
  double t6 = mean_jct(a, w05, "tiresias", 6, NULL), o6 = mean_jct(a, w05, "optimus", 6, NULL);
  fprintf(stderr, "    workload-6@0.5 pollux %.1f (paper %.1f) tiresias %.1f optimus %.1f\n", p, pp,
          t6, o6);
  CHECK_MSG(fabs(p / pp - 1) <= 0.05, "pollux %.1f vs %.1f", p, pp);
  CHECK(p < t6 && t6 < o6);
  stk_sim_apps_free(a);
}

/* ---- issue 22, section 5: the hostile audit's findings ---------------- */

/* A toy artifact directory (traces/toy, workloads/workload-1..8.csv) that
 * --pollux-table reads through --pollux-dir .: every workload holds the
 * same jobs. */
static void write_toy_artifact(const char *jobs) {
  write_toy_app();
  mkdir("workloads", 0755);
  for (int w = 1; w <= 8; w++) {
    char p[64];
    snprintf(p, sizeof p, "workloads/workload-%d.csv", w);
    test_write_file(p, jobs, strlen(jobs));
  }
}

static int table(char **out, const char *args) {
  return test_sh(out, "%s sim --pollux-table --pollux-dir . --loads 1 --job-policy tiresias -q %s",
                 test_stoker_bin(), args);
}

/* The table names the configuration it simulated, not the artifact's. */
TEST(sim_jobs_table_prints_configuration) {
  write_toy_artifact("name,time,application,num_replicas,batch_size\na,0,toy,1,8\nb,30,toy,2,8\n");
  char *out;
  int rc = table(&out, "--cluster 2x2 --interval 30 --restart-delay 10");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "simulated: 2 nodes x 2 GPUs, 30 s rounds, 10 s restarts");
  CHECK_CONTAINS(out, "published: 16 nodes x 4 GPUs, 60 s rounds, 30 s restarts");
  CHECK_CONTAINS(out, "this run differs in cluster, rounds, restarts");
  free(out);
  rc = table(&out, "--restart-delay 0");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "simulated: 16 nodes x 4 GPUs, 60 s rounds, no restart delay");
  free(out);
  rc = table(&out, "");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "simulated: 16 nodes x 4 GPUs, 60 s rounds, 30 s restarts\n");
  CHECK(!strstr(out, "differs"));
  free(out);
}

/* Jobs that never run or had not finished are counted, never left out of
 * a mean that is then compared with the published one. */
TEST(sim_jobs_table_counts_unfinished_jobs) {
  write_toy_artifact("name,time,application,num_replicas,batch_size\na,0,toy,1,8\nb,30,toy,2,8\n");
  char *out;
  /* on one GPU, b (2 GPUs) never runs: its cells are '-', not a's JCT */
  int rc = table(&out, "--cluster 1x1");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "tiresias load 1.0: 8 of 16 jobs finished; 8 never run");
  CHECK_CONTAINS(out, "not compared with the published figures");
  CHECK(!strstr(out, "390.0")); /* a's JCT alone is not a mean of the workload */
  CHECK(!strstr(out, "-9")); /* no diff such as -90.3% */
  free(out);
  /* a horizon before they finish: a lower bound, marked, not compared */
  rc = table(&out, "--horizon 200");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "tiresias load 1.0: 0 of 16 jobs finished; 16 had not finished at the "
                      "horizon (200 s)");
  CHECK_CONTAINS(out, "   >");
  CHECK_CONTAINS(out, "> marks a lower bound");
  free(out);
  /* all finished: the count says so and the row is compared */
  rc = table(&out, "");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "16/16");
  CHECK(!strstr(out, "not compared"));
  free(out);
}

/* A power cap below the idle draw of the cluster is refused with a reason,
 * not run into a table of NaN. */
TEST(sim_jobs_power_cap_too_low) {
  write_toy_artifact("name,time,application,num_replicas,batch_size\na,0,toy,1,8\n");
  char *out;
  int rc = table(&out, "--power-cap 500");
  CHECK_MSG(rc == 2, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "--power-cap: 500 W leaves no GPU able to work: 64 idle GPUs draw 640 W and "
                      "a busy one 60 W more");
  CHECK(!strstr(out, "nan"));
  free(out);
  /* the library refuses it as well */
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\na,0,1,100\n");
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.idle_w = 10;
  o.busy_w = 70;
  o.power_cap_w = 500;
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "power cap of 500 W leaves no GPU able to work");
  /* a cap that lets some work still runs, and says how many GPUs */
  rc = table(&out, "--power-cap 3500");
  CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
  CHECK_CONTAINS(out, "power cap 3500 W (47 GPUs can work)");
  free(out);
  stk_sim_jobs_free(j);
}

static void run_trace(const char *csv, struct stk_sim_jobs_result *r) {
  struct stk_sim_jobs *j = jobs_from(NULL, csv);
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.nodes = 1;
  o.gpus_per_node = 2;
  o.idle_w = 10;
  o.busy_w = 70;
  CHECK_OK(stk_sim_jobs_run(j, &o, r, NULL));
  stk_sim_jobs_free(j);
}

/* Dated traces start at 0 whatever the year: the same two jobs give the
 * same utilization, energy and JCT dated 1950, 1971 or 2017. */
TEST(sim_jobs_dated_traces_start_at_zero) {
  const char *years[] = {"2017", "1971", "1950", "1969"};
  struct stk_sim_jobs_result r0;
  for (int y = 0; y < 4; y++) {
    char csv[256];
    snprintf(csv, sizeof csv,
             "jobid,submit_time,num_gpus,duration\na,%s-01-01 00:00:00,1,100\n"
             "b,%s-01-01 00:01:00,1,100\n",
             years[y], years[y]);
    struct stk_sim_jobs_result r;
    run_trace(csv, &r);
    CHECK_EQ(r.completed, 2);
    CHECK_EQ((long long)r.rec[0].submit, 0);
    CHECK_EQ((long long)r.rec[1].submit, 60);
    if (y == 0) {
      r0 = r;
      CHECK_MSG(r.energy_kwh < 0.01, "%s: %.3f kWh", years[y], r.energy_kwh);
      CHECK(r.util_mean > 0.4);
      continue;
    }
    CHECK_MSG(fabs(r.util_mean - r0.util_mean) < 1e-12, "%s: util %.3f vs %.3f", years[y],
              r.util_mean, r0.util_mean);
    CHECK_MSG(fabs(r.energy_kwh - r0.energy_kwh) < 1e-12, "%s: %.3f kWh vs %.3f", years[y],
              r.energy_kwh, r0.energy_kwh);
    CHECK_MSG(fabs(r.jct_mean - r0.jct_mean) < 1e-9, "%s: JCT %.1f vs %.1f", years[y], r.jct_mean,
              r0.jct_mean);
    stk_sim_jobs_result_free(&r);
  }
  stk_sim_jobs_result_free(&r0);
  /* seconds stay as they are, however large */
  struct stk_sim_jobs_result r;
  run_trace("jobid,submit_time,num_gpus,duration\na,120,1,100\nb,180,1,100\n", &r);
  CHECK_EQ((long long)r.rec[0].submit, 120);
  stk_sim_jobs_result_free(&r);
}

/* One file is dates or seconds, never both. */
TEST(sim_jobs_mixed_dates_refused) {
  expect_jobs_error(NULL,
                    "jobid,submit_time,num_gpus,duration\na,2017-01-01 00:00:00,1,100\nb,600,1,100\n",
                    STK_EFORMAT,
                    "bad.csv:3: submit_time '600' is seconds, but the rows above give dates "
                    "(YYYY-MM-DD HH:MM:SS); use one or the other");
  expect_jobs_error(NULL,
                    "jobid,submit_time,num_gpus,duration\na,600,1,100\nb,2017-01-01 00:00:00,1,100\n",
                    STK_EFORMAT,
                    "bad.csv:3: submit_time '2017-01-01 00:00:00' is a date, but the rows above "
                    "give seconds");
  /* a run whose jobs all arrive after the horizon is refused, with the
   * time of the first */
  struct stk_sim_jobs *j =
      jobs_from(NULL, "jobid,submit_time,num_gpus,duration\na,1500000000,1,100\n");
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "the first job arrives at 1500000000 s, after the horizon (100000000 s)");
  stk_sim_jobs_free(j);
}

/* Times are seconds in decimal or real calendar dates. */
TEST(sim_jobs_bad_times_refused) {
  const char *h = "jobid,submit_time,num_gpus,duration\n";
  const char *bad[] = {"2017-02-30 00:00:00", "2019-02-29 00:00:00", "2017-13-01 00:00:00",
                       "2017-01-01 24:00:00", "2017-1-1 00:00:00",   "0x10",
                       "nan",                 "inf",                 "1e400",
                       " 2017-01-01 00:00:00x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char csv[256], want[128];
    snprintf(csv, sizeof csv, "%sa,%s,1,100\n", h, bad[i]);
    snprintf(want, sizeof want, "bad.csv:2: submit_time '");
    expect_jobs_error(NULL, csv, STK_EFORMAT, want);
    expect_jobs_error(NULL, csv, STK_EFORMAT, "is not seconds or a date YYYY-MM-DD HH:MM:SS");
  }
  /* and the good ones: a leap day, fractions, exponents */
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                           "a,2016-02-29 23:59:59,1,100\n"
                                           "b,2016-03-01 00:00:09,1,100\n");
  struct stk_sim_jobs_result r;
  run(j, "fifo", 1, 2, &r);
  CHECK_EQ((long long)r.rec[1].submit, 10);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\na,1.5e2,1,100\nb,0.5,1,1e2\n");
  run(j, "fifo", 1, 2, &r);
  CHECK(r.rec[0].submit == 0.5 && r.rec[1].submit == 150);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  /* numbers in other columns: no hex, NaN or infinity either */
  expect_jobs_error(NULL, "jobid,submit_time,num_gpus,duration\na,0,1,0x10\n", STK_EFORMAT,
                    "bad.csv:2: duration '0x10' is not a number");
  expect_jobs_error(NULL, "jobid,submit_time,num_gpus,duration\na,0,1,1e400\n", STK_EFORMAT,
                    "bad.csv:2: duration '1e400' is not a number");
}

/* A quoted field keeps its commas (and "" is a quote); a broken quote is
 * refused with the file and line. */
TEST(sim_csv_quoted_fields) {
  struct stk_sim_jobs *j = jobs_from(NULL, "jobid,submit_time,num_gpus,duration\n"
                                           "\"train, v2\",0,1,100\n"
                                           "\"say \"\"hi\"\"\", 10 ,\"2\",50\n");
  struct stk_sim_jobs_result r;
  run(j, "fifo", 1, 2, &r);
  CHECK_STR(r.rec[0].name, "train, v2");
  CHECK_STR(r.rec[1].name, "say \"hi\"");
  CHECK_EQ((long long)r.rec[1].submit, 10);
  /* and the per-job CSV quotes it back */
  FILE *f = fopen("out.csv", "w");
  CHECK(f != NULL);
  stk_sim_jobs_write_csv(f, &r, 1, NULL);
  fclose(f);
  char *csv = (char *)test_read_file("out.csv", NULL);
  CHECK_CONTAINS(csv, "\nfifo,fifo,\"train, v2\",,0,");
  CHECK_CONTAINS(csv, "\nfifo,fifo,\"say \"\"hi\"\"\",,10,");
  free(csv);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  expect_jobs_error(NULL, "jobid,submit_time,num_gpus,duration\n\"open,0,1,100\n", STK_EFORMAT,
                    "bad.csv:2: a quoted field has no closing quote");
  expect_jobs_error(NULL, "jobid,submit_time,num_gpus,duration\n\"a\"b,0,1,100\n", STK_EFORMAT,
                    "bad.csv:2: text after the closing quote of field 1");
}

/* A job list is of measured applications or of durations, not both. */
TEST(sim_jobs_duration_beside_application_refused) {
  struct stk_sim_apps *a = toy_apps();
  expect_jobs_error(a,
                    "name,time,application,num_replicas,batch_size,duration\na,0,toy,1,8,100\n",
                    STK_EFORMAT,
                    "bad.csv: has both an application column (jobs of measured applications) and a "
                    "duration column (jobs of fixed length); give one");
  expect_jobs_error(NULL,
                    "name,num_gpu,creation_time,deletion_time,duration\na,1,0,100,50\n",
                    STK_EFORMAT, "bad.csv: has both a duration and a deletion_time column");
  stk_sim_apps_free(a);
}
