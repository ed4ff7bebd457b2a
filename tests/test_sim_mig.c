/* Tests of MIG geometry (profiles, start slots, coexistence, layout
 * counts, reconfiguration) and of the ParvaGPU reproduction: the artifact's
 * GPU counts for its six SLO scenarios on the shared data, stoker's packed
 * allocator at or under them and at the bound, and bad inputs. */
#include <sys/stat.h>

#include "../src/sim/parva_impl.h"
#include "test.h"

static struct stk_mig_layout layout(const struct stk_mig_geometry *g, const char *spec) {
  /* "3g.40gb@4 1g.10gb@6": profile@start, space-separated */
  struct stk_mig_layout l = {0};
  char buf[256], *save = NULL;
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    char *at = strchr(t, '@');
    CHECK_MSG(at, "bad spec %s", t);
    *at = 0;
    int p = stk_mig_profile_find(g, t);
    CHECK_MSG(p >= 0, "no profile %s on %s", t, g->name);
    CHECK(l.n < STK_MIG_MAX_INSTANCES + 1);
    if (l.n < STK_MIG_MAX_INSTANCES) { /* one more is only counted: the check refuses it */
      l.inst[l.n].profile = (uint8_t)p;
      l.inst[l.n].start = (uint8_t)atoi(at + 1);
    }
    l.n++;
  }
  return l;
}

static int valid(const char *gpu, const char *spec, char *err) {
  const struct stk_mig_geometry *g = stk_mig_geometry_find(gpu);
  CHECK(g);
  struct stk_mig_layout l = layout(g, spec);
  return stk_mig_layout_check(g, &l, err);
}

TEST(mig_profiles) {
  CHECK_EQ(stk_mig_geometry_count(), 3);
  const struct stk_mig_geometry *a40 = stk_mig_geometry_find("A100-40GB");
  const struct stk_mig_geometry *a80 = stk_mig_geometry_find("a100-80gb");
  const struct stk_mig_geometry *h80 = stk_mig_geometry_find("h100-80gb");
  CHECK(a40 && a80 && h80 && !stk_mig_geometry_find("v100"));
  int p = stk_mig_profile_find(a40, "3g");
  CHECK(p >= 0);
  CHECK_STR(a40->profiles[p].name, "3g.20gb");
  CHECK_EQ(a40->profiles[p].compute, 3);
  CHECK_EQ(a40->profiles[p].memory, 4);
  CHECK_EQ(a40->profiles[p].nstarts, 2);
  CHECK_STR(a80->profiles[stk_mig_profile_find(a80, "1g")].name, "1g.10gb");
  CHECK_STR(h80->profiles[stk_mig_profile_find(h80, "7g")].name, "7g.80gb");
  CHECK_EQ(stk_mig_profile_find(h80, "5g"), -1);
  CHECK_EQ(stk_mig_profile_find(h80, "1g.5gb"), -1);
  /* at most as many instances of each profile as its start slots allow */
  CHECK_EQ(a80->profiles[stk_mig_profile_find(a80, "1g.20gb")].nstarts, 4);
  CHECK_EQ(a80->profiles[stk_mig_profile_find(a80, "2g")].nstarts, 3);
}

/* The 1g (one memory slice), 2g, 3g, 4g and 7g profiles: 4 + 1 ways for
 * the left half, 3 for the right, so 6 x 3 + 1 (7g) = 19 maximal layouts;
 * the same on all three GPUs, which share the geometry. */
TEST(mig_layout_counts) {
  for (size_t i = 0; i < stk_mig_geometry_count(); i++) {
    const struct stk_mig_geometry *g = stk_mig_geometry_at(i);
    uint32_t base = 0;
    for (const char *n[] = {"1g", "2g", "3g", "4g", "7g"}, **q = n; q < n + 5; q++)
      base |= 1u << stk_mig_profile_find(g, *q);
    uint64_t all, max;
    stk_mig_count_layouts(g, base, &all, &max);
    CHECK_EQ(max, 19);
    CHECK_EQ(all, 298); /* with the empty layout */
    stk_mig_count_layouts(g, (1u << g->nprofiles) - 1, &all, &max);
    CHECK_EQ(max, 239);
    CHECK_EQ(all, 2319);
    stk_mig_count_layouts(g, 1u << stk_mig_profile_find(g, "7g"), &all, &max);
    CHECK_EQ(max, 1);
    CHECK_EQ(all, 2);
  }
}

TEST(mig_valid_layouts) {
  char err[STK_ERRMSG_MAX];
  const char *ok[] = {
      "7g.80gb@0",
      "4g.40gb@0 3g.40gb@4",
      "3g.40gb@4 2g.20gb@0 2g.20gb@2",
      "3g.40gb@0 3g.40gb@4",
      "3g.40gb@0 2g.20gb@4 1g.10gb@6",
      "2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.10gb@6",
      "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6",
      "1g.20gb@0 1g.20gb@2 1g.20gb@4 1g.20gb@6",
      "4g.40gb@0 1g.10gb+me@4 1g.10gb@5 1g.10gb@6",
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    CHECK_MSG(valid("a100-80gb", ok[i], err) == 0, "%s: %s", ok[i], err);
    CHECK_MSG(valid("h100-80gb", ok[i], err) == 0, "%s: %s", ok[i], err);
  }
  CHECK_OK(valid("a100-40gb", "1g.5gb@0 1g.5gb+me@1 1g.10gb@2 3g.20gb@4", err));
}

TEST(mig_invalid_layouts_refused) {
  char err[STK_ERRMSG_MAX];
  struct {
    const char *spec, *why;
  } bad[] = {
      {"3g.40gb@4 1g.10gb@6", "overlaps"}, /* as the artifact's maps place them */
      {"3g.40gb@0 3g.40gb@4 1g.10gb@3", "overlaps"},
      {"3g.40gb@0 1g.10gb@3", "overlaps"},
      {"7g.80gb@0 1g.10gb@6", "overlaps"},
      {"1g.10gb@7", "cannot start at slot 7"},
      {"2g.20gb@1", "cannot start at slot 1"},
      {"2g.20gb@6", "cannot start at slot 6"},
      {"3g.40gb@2", "cannot start at slot 2"},
      {"4g.40gb@4", "cannot start at slot 4"},
      {"1g.20gb@1", "cannot start at slot 1"},
      {"1g.10gb+me@0 1g.10gb+me@1", "second +me"},
      {"2g.20gb@0 2g.20gb@0", "overlaps"},
      {"1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6 1g.10gb@0",
       "instances, at most 7"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = 0;
    CHECK_MSG(valid("a100-80gb", bad[i].spec, err) == STK_EINVAL, "accepted: %s", bad[i].spec);
    CHECK_CONTAINS(err, bad[i].why);
  }
  CHECK_EQ(valid("a100-40gb", "1g.10gb@3", err), STK_EINVAL);
  /* every set of placements the enumerator does not count is refused: a
   * layout grown one instance at a time stays valid or is refused whole */
  const struct stk_mig_geometry *g = stk_mig_geometry_find("a100-40gb");
  struct stk_mig_layout l = {0};
  CHECK_OK(stk_mig_layout_add(g, &l, stk_mig_profile_find(g, "3g"), 4, err));
  CHECK_OK(stk_mig_layout_add(g, &l, stk_mig_profile_find(g, "3g"), -1, err));
  CHECK_EQ(l.inst[1].start, 0);
  CHECK_EQ(stk_mig_layout_add(g, &l, stk_mig_profile_find(g, "1g"), -1, err), STK_ENOSPC);
  CHECK_EQ(l.n, 2);
  CHECK_EQ(stk_mig_layout_compute(g, &l), 6);
}

TEST(mig_reconfigure) {
  const struct stk_mig_geometry *g = stk_mig_geometry_find("a100-80gb");
  char err[STK_ERRMSG_MAX];
  struct stk_mig_layout cur = layout(g, "4g.40gb@0 3g.40gb@4");
  struct stk_mig_layout split = layout(g, "2g.20gb@0 2g.20gb@2 3g.40gb@4");
  double ready = -1;
  /* the 4g runs work: it cannot be split */
  CHECK_EQ(stk_mig_reconfigure(g, &cur, 1u << 0, &split, 100, STK_MIG_RECONFIG_DELAY_S, &ready,
                               err),
           STK_EBUSY);
  CHECK_CONTAINS(err, "4g.40gb at slot 0) is busy");
  CHECK_EQ(cur.n, 2);
  /* the 3g is busy but kept: the change goes ahead */
  CHECK_OK(stk_mig_reconfigure(g, &cur, 1u << 1, &split, 100, 5, &ready, err));
  CHECK_EQ(cur.n, 3);
  CHECK(ready == 105);
  /* only removing idle instances: usable at once */
  struct stk_mig_layout less = layout(g, "2g.20gb@0 3g.40gb@4");
  CHECK_OK(stk_mig_reconfigure(g, &cur, 0, &less, 200, 5, &ready, err));
  CHECK(ready == 200);
  struct stk_mig_layout bad = layout(g, "3g.40gb@4 1g.10gb@6");
  CHECK_EQ(stk_mig_reconfigure(g, &cur, 0, &bad, 300, 5, &ready, err), STK_EINVAL);
  CHECK_CONTAINS(err, "invalid target");
}

/* The artifact's deployment maps use 2, 3, 5, 7, 13 and 16 GPUs; the
 * reproduction reaches each, every plan meets every SLO by the profiles
 * and is a valid A100 80 GB layout; the packed allocator needs the fewest
 * GPUs any plan can (the bound ceil(slices / 7)): one fewer than the
 * artifact on scenarios 5 and 6. */
TEST(parva_six_scenarios) {
  const char *data = test_shared_data();
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/parvagpu", data ? data : "");
  struct stat st;
  if (!data || stat(dir, &st) != 0) SKIP("shared data (../shared/data/parvagpu) is absent");
  struct stk_parva *p;
  char err[STK_ERRMSG_MAX];
  CHECK_MSG(stk_parva_load(&p, dir, err) == 0, "%s", err);
  CHECK_EQ(stk_parva_scenarios(p), 6);
  CHECK_EQ(stk_parva_models(p), 11);
  CHECK_STR(stk_parva_model(p, 0), "bert");
  static const unsigned packed[6] = {2, 3, 5, 7, 12, 15};
  for (unsigned s = 1; s <= 6; s++) {
    struct stk_parva_plan a, b;
    CHECK_MSG(stk_parva_plan(p, s, STK_PARVA_ARTIFACT, &a, err) == 0, "%s", err);
    CHECK_MSG(stk_parva_check(p, &a, err) == 0, "scenario %u artifact: %s", s, err);
    CHECK_MSG(a.gpus == stk_parva_published_gpus(s), "scenario %u: %u GPUs, published %u", s,
              a.gpus, stk_parva_published_gpus(s));
    CHECK_MSG(stk_parva_plan(p, s, STK_PARVA_PACKED, &b, err) == 0, "%s", err);
    CHECK_MSG(stk_parva_check(p, &b, err) == 0, "scenario %u packed: %s", s, err);
    CHECK_EQ(b.gpus, packed[s - 1]);
    CHECK_EQ(b.gpus, b.lower_bound); /* no plan under the rule needs fewer */
    CHECK(b.lower_bound == a.lower_bound);
    CHECK(b.slices <= a.slices);
    for (unsigned m = 0; m < b.models; m++)
      CHECK(!b.svc[m].active || b.svc[m].capacity >= b.svc[m].rate);
    stk_parva_plan_free(&a);
    stk_parva_plan_free(&b);
  }
  struct stk_parva_plan x;
  CHECK_EQ(stk_parva_plan(p, 7, STK_PARVA_PACKED, &x, err), STK_EINVAL);
  CHECK_CONTAINS(err, "no scenario 7");
  stk_parva_free(p);
}

static void put(const char *path, const char *text) { test_write_file(path, text, strlen(text)); }

static void toy(const char *slo_latency) {
  mkdir("pg", 0755);
  mkdir("pg/prof_data", 0755);
  mkdir("pg/SLO", 0755);
  put("pg/prof_data/a.csv",
      "Mig instance,Batch size,Workload Number,Throughput,Latency\n"
      "1,1,1,10,0.010\n1,1,2,8,0.012\n2,1,1,25,0.008\n7,1,1,100,0.005\n1,2,1,0,0\n");
  put("pg/prof_data/b.csv",
      "Mig instance,Batch size,Workload Number,Throughput,Latency\n3,4,1,50,0.040\n");
  put("pg/SLO/SLO_req_rate.csv", "40,20\n10,N/A\n");
  put("pg/SLO/SLO_latency.csv", slo_latency);
}

TEST(parva_toy_and_bad_inputs) {
  char err[STK_ERRMSG_MAX];
  struct stk_parva *p;
  toy("100,100\n100,N/A\n");
  CHECK_MSG(stk_parva_load(&p, "pg", err) == 0, "%s", err);
  struct stk_parva_plan pl;
  /* a: 40 req/s, best per slice 1g x2 (16/slice): 2 x 16 = 32, last 1g x2
   * covers 8; b: one 3g */
  CHECK_OK(stk_parva_plan(p, 1, STK_PARVA_ARTIFACT, &pl, err));
  CHECK_OK(stk_parva_check(p, &pl, err));
  CHECK_EQ(pl.gpus, 1);
  CHECK_EQ(pl.slices, 6);
  CHECK(pl.svc[0].capacity >= 40 && pl.svc[1].capacity == 50);
  stk_parva_plan_free(&pl);
  CHECK_OK(stk_parva_plan(p, 2, STK_PARVA_PACKED, &pl, err));
  CHECK_EQ(pl.nseg, 1);
  CHECK(!pl.svc[1].active);
  stk_parva_plan_free(&pl);
  stk_parva_free(p);
  /* b's only point takes 40 ms; an SLO of 60 ms allows 27 */
  toy("100,60\n100,N/A\n");
  CHECK_OK(stk_parva_load(&p, "pg", err));
  CHECK_EQ(stk_parva_plan(p, 1, STK_PARVA_ARTIFACT, &pl, err), STK_EINVAL);
  CHECK_CONTAINS(err, "scenario 1, b: no profiled segment meets the latency SLO");
  CHECK_EQ(stk_parva_plan(p, 1, STK_PARVA_PACKED, &pl, err), STK_EINVAL);
  CHECK_CONTAINS(err, ", b: no profiled segment");
  stk_parva_free(p);
  toy("100,100,100\n100,N/A,1\n");
  CHECK_EQ(stk_parva_load(&p, "pg", err), STK_EFORMAT);
  CHECK_CONTAINS(err, "SLO_latency.csv:1: column 3");
  toy("100,N/A\n100,N/A\n");
  CHECK_EQ(stk_parva_load(&p, "pg", err), STK_EFORMAT);
  CHECK_CONTAINS(err, "scenario 1, b: N/A in one");
  toy("100,100\n100,N/A\n");
  put("pg/prof_data/b.csv", "Mig instance,Batch size,Workload Number,Throughput,Latency\n5,4,1,50,0.04\n");
  CHECK_EQ(stk_parva_load(&p, "pg", err), STK_EFORMAT);
  CHECK_CONTAINS(err, "b.csv:2: expected instance size 1, 2, 3, 4 or 7");
  toy("100,100\n100,N/A\n");
  put("pg/SLO/SLO_req_rate.csv", "4e9,20\n10,N/A\n");
  CHECK_OK(stk_parva_load(&p, "pg", err));
  CHECK_EQ(stk_parva_plan(p, 1, STK_PARVA_ARTIFACT, &pl, err), STK_ERANGE);
  CHECK_CONTAINS(err, "a: 4000000000 requests/s needs over 100000 segments");
  CHECK_EQ(stk_parva_plan(p, 1, STK_PARVA_PACKED, &pl, err), STK_ERANGE);
  CHECK_CONTAINS(err, "needs over 100000 compute slices");
  stk_parva_free(p);
  CHECK(stk_parva_load(&p, "nowhere", err) != 0);
  CHECK_CONTAINS(err, "nowhere/prof_data");
}
