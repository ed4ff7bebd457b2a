/* Tests of online MIG scheduling (issue 22 section 2): the fraction ->
 * profile mapping, exact placements and utilization of FIFO, MIG-aware
 * placement with reconfiguration and the multi-objective policy on small
 * hand-made traces, bad inputs, and the openb default trace (skips without
 * ../shared). */
#include <math.h>
#include <sys/stat.h>

#include "stoker/mig_online.h"
#include "test.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static const struct stk_mig_geometry *a100(void) {
  const struct stk_mig_geometry *g = stk_mig_geometry_find("a100-80gb");
  CHECK(g);
  return g;
}

static const char *pname(int p) { return p < 0 ? "-" : a100()->profiles[p].name; }

/* An openb-format trace from rows "arrival,duration,num_gpu,milli". */
static struct stk_mig_trace *trace(const char *rows) {
  char buf[4096] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n";
  char line[128];
  int i = 0;
  const char *s = rows;
  while (*s) {
    long at, dur, num, milli;
    int used;
    CHECK(sscanf(s, "%ld,%ld,%ld,%ld%n", &at, &dur, &num, &milli, &used) == 4);
    snprintf(line, sizeof line, "p%d,1000,100,%ld,%ld,%ld,%ld\n", i++, num, milli, at, at + dur);
    strcat(buf, line);
    s += used;
    while (*s == ' ') s++;
  }
  test_write_file("t.csv", buf, strlen(buf));
  struct stk_mig_trace *t;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_mig_trace_load(&t, a100(), "t.csv", 3, 1, err) == 0, "%s", err);
  return t;
}

static struct stk_mig_online_result run(const struct stk_mig_trace *t, unsigned gpus,
                                        enum stk_mig_policy p, double delay,
                                        struct stk_mig_start *starts) {
  struct stk_mig_online_opts o = {0, a100(), gpus, p, delay, 0, 0, 0, 0, starts};
  struct stk_mig_online_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_mig_online_run(t, &o, &r, err) == 0, "%s", err);
  return r;
}

/* A fraction f of a GPU takes the smallest profile with >= 7f compute and
 * >= 8f memory slices. */
TEST(mig_online_mapping) {
  const struct stk_mig_geometry *g = a100();
  CHECK_STR(pname(stk_mig_profile_for(g, 50)), "1g.10gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 125)), "1g.10gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 140)), "1g.20gb"); /* 1.12 memory slices */
  CHECK_STR(pname(stk_mig_profile_for(g, 230)), "2g.20gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 320)), "3g.40gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 460)), "4g.40gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 500)), "4g.40gb");
  CHECK_STR(pname(stk_mig_profile_for(g, 510)), "7g.80gb"); /* 4.08 memory slices */
  CHECK_STR(pname(stk_mig_profile_for(g, 1000)), "7g.80gb");
  CHECK_EQ(stk_mig_profile_for(g, 0), -1);
  CHECK_EQ(stk_mig_profile_for(g, 1001), -1);
  const struct stk_mig_geometry *g40 = stk_mig_geometry_find("a100-40gb");
  CHECK_STR(g40->profiles[stk_mig_profile_for(g40, 320)].name, "3g.20gb");
}

/* 3g then 4g on one GPU: FIFO's first fit puts the 3g at slot 0, where the
 * 4g must start, and the 4g can never run (rejected); MIG-aware puts the
 * 3g at slot 4 (less fragmentation) and both run at once. */
TEST(mig_online_fragmentation_placement) {
  struct stk_mig_trace *t = trace("0,10,1,400 0,10,1,500");
  CHECK_EQ(t->n, 2);
  struct stk_mig_start s[2];
  struct stk_mig_online_result r = run(t, 1, STK_MIG_FIFO, 0, s);
  CHECK(s[0].at == 0 && s[0].gpu == 0 && s[0].slot == 0);
  CHECK(s[1].at < 0);
  CHECK_EQ(r.started, 1);
  CHECK_EQ(r.rejected, 1);
  CHECK(NEAR(r.alloc_all, 3.0 / 7));
  /* first fit with reconfiguration: the 4g waits for the 3g to end, then
   * takes its place */
  r = run(t, 1, STK_MIG_FIFO_RECONF, 0, s);
  CHECK(s[0].at == 0 && s[0].slot == 0);
  CHECK(s[1].at == 10 && s[1].slot == 0);
  CHECK_EQ(r.reconfigs, 1);
  CHECK(NEAR(r.alloc_all, 70.0 / 140));
  r = run(t, 1, STK_MIG_AWARE, 0, s);
  CHECK(s[0].at == 0 && s[0].slot == 4);
  CHECK(s[1].at == 0 && s[1].slot == 0);
  CHECK_EQ(r.started, 2);
  CHECK_EQ(r.rejected, 0);
  CHECK_EQ(r.created, 2);
  CHECK_EQ(r.reconfigs, 0);
  CHECK(NEAR(r.alloc_all, 1.0));
  stk_mig_trace_free(t);
}

/* A 1g, then a whole GPU after it ended: FIFO keeps the idle 1g and can
 * never host the 7g; MIG-aware destroys the idle 1g (one reconfiguration)
 * and the 7g starts, its instance usable after the stated delay. */
TEST(mig_online_reconfigure_idle) {
  struct stk_mig_trace *t = trace("0,10,1,100 20,10,1,1000");
  struct stk_mig_start s[2];
  struct stk_mig_online_result r = run(t, 1, STK_MIG_FIFO, 5, s);
  CHECK_EQ(r.started, 1);
  CHECK_EQ(r.rejected, 1);
  CHECK_EQ(r.reconfigs, 0);
  CHECK(NEAR(r.end, 20)); /* the last arrival; the 1g ended at 15 */
  CHECK(NEAR(r.alloc_all, 15.0 / 140));
  r = run(t, 1, STK_MIG_FIFO_RECONF, 5, s);
  CHECK(s[1].at == 20 && r.reconfigs == 1 && r.rejected == 0);
  r = run(t, 1, STK_MIG_AWARE, 5, s);
  CHECK(s[1].at == 20 && s[1].slot == 0);
  CHECK_EQ(r.started, 2);
  CHECK_EQ(r.created, 2);
  CHECK_EQ(r.reconfigs, 1);
  CHECK(NEAR(r.end, 35));
  /* held: 1 slice for 15 s, 7 for 15 s (creation included), over 35 s */
  CHECK(NEAR(r.alloc_all, (15.0 + 105) / (7 * 35)));
  CHECK(NEAR(r.alloc_arriving, 15.0 / (7 * 20)));
  /* an idle instance of the right profile is reused, with no delay */
  struct stk_mig_trace *t2 = trace("0,10,1,100 20,10,1,100");
  r = run(t2, 1, STK_MIG_AWARE, 5, s);
  CHECK_EQ(r.created, 1);
  CHECK(NEAR(r.end, 30));
  stk_mig_trace_free(t2);
  stk_mig_trace_free(t);
}

/* A 4g runs until 100; a 7g arrives at 1 and a 1g at 2. MIG-aware keeps
 * arrival order: the 1g waits behind the 7g until 110. The multi-objective
 * policy starts the 1g at once beside the 4g (slot 4, the lowest of equal
 * fragmentation), the 7g still at 100. */
TEST(mig_online_multi_backfills) {
  struct stk_mig_trace *t = trace("0,100,1,500 1,10,1,1000 2,10,1,100");
  struct stk_mig_start s[3];
  struct stk_mig_online_result r = run(t, 1, STK_MIG_AWARE, 0, s);
  CHECK(s[0].at == 0 && s[1].at == 100 && s[2].at == 110);
  CHECK(NEAR(r.mean_wait, (0 + 99 + 108) / 3.0));
  CHECK_EQ(r.reconfigs, 2);
  CHECK(NEAR(r.end, 120));
  CHECK(NEAR(r.alloc_all, 480.0 / (7 * 120)));
  r = run(t, 1, STK_MIG_MULTI, 0, s);
  CHECK(s[0].at == 0 && s[1].at == 100 && s[2].at == 2);
  CHECK_EQ(s[2].slot, 4);
  CHECK(NEAR(r.mean_wait, 99 / 3.0));
  CHECK(NEAR(r.end, 110));
  CHECK(NEAR(r.alloc_all, 480.0 / (7 * 110)));
  CHECK_EQ(r.reconfigs, 1);
  stk_mig_trace_free(t);
}

/* Several whole GPUs start together on distinct GPUs; a request for more
 * GPUs than the cluster has is rejected, not left blocking the queue. */
TEST(mig_online_multi_gpu_requests) {
  struct stk_mig_trace *t = trace("0,10,2,1000 0,10,3,1000 0,10,1,1000");
  for (int p = STK_MIG_FIFO; p <= STK_MIG_MULTI; p++) {
    struct stk_mig_start s[3];
    struct stk_mig_online_result r = run(t, 2, (enum stk_mig_policy)p, 0, s);
    CHECK_EQ(r.started, 2);
    CHECK_EQ(r.rejected, 1);
    CHECK(s[0].at == 0 && s[1].at < 0 && s[2].at == 10);
    CHECK(NEAR(r.alloc_all, 30.0 / 40));
  }
  stk_mig_trace_free(t);
}

TEST(mig_online_bad_inputs) {
  struct stk_mig_trace *t;
  char err[STK_ERRMSG_MAX] = "";
  const char *two = "name,cpu_milli,num_gpu,gpu_milli,creation_time,deletion_time\n"
                    "a,1,2,500,0,10\n";
  test_write_file("two.csv", two, strlen(two));
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "two.csv", 3, 1, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "two.csv:2: 2 x 500 milli-GPU");
  const char *back = "name,cpu_milli,num_gpu,gpu_milli,creation_time,deletion_time\n"
                     "a,1,1,500,10,5\n";
  test_write_file("back.csv", back, strlen(back));
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "back.csv", 3, 1, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "back.csv:2: deletion_time 5 is before creation_time 10");
  const char *far = "name,cpu_milli,num_gpu,gpu_milli,creation_time,deletion_time\n"
                    "a,1,1,500,0,2000000000000\n";
  test_write_file("far.csv", far, strlen(far));
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "far.csv", 3, 1, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "far.csv: request 1 (by arrival) spans more than 1e12 s");
  const char *cpu = "name,cpu_milli,num_gpu,gpu_milli,creation_time,deletion_time\n"
                    "a,1,0,0,0,5\n";
  test_write_file("cpu.csv", cpu, strlen(cpu));
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "cpu.csv", 3, 1, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "no GPU requests");
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "cpu.csv", 3, 0.5, err), STK_EINVAL);
  CHECK_EQ(stk_mig_trace_load(&t, a100(), "cpu.csv", 99, 1, err), STK_EINVAL);
  /* a duration trace: one-GPU jobs take the given profile, k-GPU jobs k whole GPUs */
  const char *ph = "timestamp,duration,num_gpus\n0,100,1\n50,10,4\n";
  test_write_file("ph.csv", ph, strlen(ph));
  CHECK_MSG(stk_mig_trace_load(&t, a100(), "ph.csv", 3, 1, err) == 0, "%s", err);
  CHECK_EQ(t->n, 2);
  CHECK_STR(pname(t->req[0].profile), "2g.20gb");
  CHECK(t->req[1].count == 4 && !strcmp(pname(t->req[1].profile), "7g.80gb"));
  struct stk_mig_online_opts o = {0, a100(), 0, STK_MIG_FIFO, 0, 0, 0, 0, 0, NULL};
  struct stk_mig_online_result r;
  CHECK_EQ(stk_mig_online_run(t, &o, &r, err), STK_EINVAL);
  o.gpus = 1;
  o.w_frag = -1;
  CHECK_EQ(stk_mig_online_run(t, &o, &r, err), STK_EINVAL);
  stk_mig_trace_free(t);
  enum stk_mig_policy p;
  CHECK(stk_mig_policy_parse("mig-aware", &p) == 0 && p == STK_MIG_AWARE);
  CHECK(stk_mig_policy_parse("fifo-reconf", &p) == 0 && p == STK_MIG_FIFO_RECONF);
  CHECK_STR(stk_mig_policy_name(STK_MIG_MULTI), "multi");
  CHECK_EQ(stk_mig_policy_parse("lifo", &p), STK_EINVAL);
}

/* The openb default trace on 16 A100 80 GB GPUs: the profile mix of the
 * mapping, and the ordering FIFO < MIG-aware < multi in utilization. */
TEST(mig_online_openb) {
  const char *data = test_shared_data();
  char path[4200];
  snprintf(path, sizeof path, "%s/openb/openb_pod_list_default.csv", data ? data : "");
  struct stat st;
  if (!data || stat(path, &st) != 0) SKIP("shared data (../shared/data/openb) is absent");
  struct stk_mig_trace *t;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_mig_trace_load(&t, a100(), path, 3, 1, err) == 0, "%s", err);
  CHECK_EQ(t->n, 7064);
  CHECK_EQ(t->by_profile[0], 31);   /* 1g.10gb */
  CHECK_EQ(t->by_profile[2], 1);    /* 1g.20gb */
  CHECK_EQ(t->by_profile[3], 276);  /* 2g.20gb */
  CHECK_EQ(t->by_profile[4], 393);  /* 3g.40gb */
  CHECK_EQ(t->by_profile[5], 899);  /* 4g.40gb */
  CHECK_EQ(t->by_profile[6], 5464); /* 7g.80gb */
  struct stk_mig_online_result f = run(t, 16, STK_MIG_FIFO, -1, NULL);
  struct stk_mig_online_result a = run(t, 16, STK_MIG_AWARE, -1, NULL);
  struct stk_mig_online_result m = run(t, 16, STK_MIG_MULTI, -1, NULL);
  CHECK_MSG(f.alloc_all < a.alloc_all && a.alloc_all < m.alloc_all, "%.3f %.3f %.3f",
            f.alloc_all, a.alloc_all, m.alloc_all);
  CHECK_MSG(f.alloc_backlog < a.alloc_backlog && a.alloc_backlog < m.alloc_backlog,
            "%.3f %.3f %.3f", f.alloc_backlog, a.alloc_backlog, m.alloc_backlog);
  CHECK_EQ(f.reconfigs, 0);
  CHECK_EQ(a.started + a.rejected + a.waiting, 7064);
  stk_mig_trace_free(t);
}
