/* Sia's exact solver (issue 22, S8; src/sim/jpol_sia_exact.c): every
 * round's program solved to its optimum in integer cents, ties broken by a
 * stated rule. Checked against exhaustive search on small programs (the
 * optimum and which optimum), against GLPK on every round of a real
 * workload (check mode), and Sia's results with it pinned. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "../src/sim/jobs_impl.h"
#include "../src/sim/jpol_sia.h"
#include "test_sim_sia.h"

/* Exhaustive search: the lexicographically first optimum in the stated
 * order (prefer, then list order, then none; rank C+1 is none). */
struct brute {
  const struct stk__sia_cfg *cfg;
  int C, T, n;
  const int *tgpus, *hold, *prefer;
  const double *cost;
  int cur[8], best[8], used[4];
  long bestz;
  int found;
};

static int rank_of(const struct brute *b, int k, int c) {
  if (c < 0) return b->C + 1;
  if (b->prefer[k] == c) return 0;
  return 1 + c;
}

static void brute_go(struct brute *b, int k, long z) {
  if (k == b->n) {
    int better = !b->found || z < b->bestz;
    if (!better && z == b->bestz)
      for (int q = 0; q < b->n; q++) {
        int r1 = rank_of(b, q, b->cur[q]), r2 = rank_of(b, q, b->best[q]);
        if (r1 != r2) {
          better = r1 < r2;
          break;
        }
      }
    if (better) {
      b->found = 1;
      b->bestz = z;
      for (int q = 0; q < b->n; q++) b->best[q] = b->cur[q];
    }
    return;
  }
  for (int c = -1; c < b->C; c++) {
    if (b->hold[k] >= 0 && c != b->hold[k]) continue;
    long w = 110;
    if (c >= 0) {
      int t = b->cfg[c].type;
      if (b->used[t] + b->cfg[c].gpus > b->tgpus[t]) continue;
      w = lround(b->cost[k * b->C + c] * 100) + 110;
      b->used[t] += b->cfg[c].gpus;
    }
    b->cur[k] = c;
    brute_go(b, k + 1, z + w);
    if (c >= 0) b->used[b->cfg[c].type] -= b->cfg[c].gpus;
  }
}

TEST(sim_sia_exact_matches_exhaustive_search) {
  static const struct stk__sia_cfg cfg[5] = {{0, 1, 1}, {0, 1, 2}, {1, 1, 1}, {1, 1, 4}, {2, 2, 2}};
  const int tgpus[3] = {3, 4, 2};
  unsigned seed = 12345;
  int ties = 0;
  struct stk__sia_ws ws = {0};
  /* the second 400 with costs 1000 times larger: the larger programs' sums
   * no longer fit the solver's 16-bit table, so its 32-bit one is used */
  for (int trial = 0; trial < 800; trial++) {
    double scale = trial < 400 ? 1 : 1000;
    int n = 1 + trial % 7, hold[8], prefer[8], pick[8];
    double cost[8 * 5];
    for (int k = 0; k < n; k++) {
      for (int c = 0; c < 5; c++) {
        seed = seed * 1103515245u + 12345u;
        /* few distinct values, so optima tie often; some never worth it */
        int v = (int)(seed >> 16) % 6;
        cost[k * 5 + c] = v == 5 ? 98.9 : -0.1 * (double)(v + 1) / 2 * scale;
      }
      seed = seed * 1103515245u + 12345u;
      prefer[k] = (int)(seed >> 16) % 6 - 1;
      hold[k] = trial % 5 == 0 && k == 0 ? prefer[k] : -1;
    }
    struct brute b = {cfg, 5, 3, n, tgpus, hold, prefer, cost, {0}, {0}, {0}, 0, 0};
    brute_go(&b, 0, 0);
    int64_t z = -1;
    int rc = stk__sia_exact(cfg, 5, tgpus, 3, (size_t)n, cost, hold, prefer, pick, &z, NULL);
    CHECK_MSG(rc == (b.found ? 0 : 1), "trial %d: rc %d, found %d", trial, rc, b.found);
    /* the same through a workspace kept across all 800 programs */
    int64_t zw = -1;
    int pw[8];
    CHECK_EQ(stk__sia_exact(cfg, 5, tgpus, 3, (size_t)n, cost, hold, prefer, pw, &zw, &ws), rc);
    CHECK_MSG(!memcmp(pw, pick, sizeof(int) * (size_t)n) && zw == z,
              "trial %d: the kept workspace gives another answer", trial);
    if (!b.found) continue;
    CHECK_MSG(z == b.bestz, "trial %d: objective %lld cents, exhaustive %ld", trial, (long long)z,
              b.bestz);
    for (int k = 0; k < n; k++) {
      CHECK_MSG(pick[k] == b.best[k], "trial %d: job %d got %d, the rule's optimum %d", trial, k,
                pick[k], b.best[k]);
      if (b.best[k] != -1 && rank_of(&b, k, b.best[k]) > 0) ties++;
    }
  }
  CHECK(ties > 0);
  /* grown a few times (the larger programs, the 32-bit tables), not once
   * a program as the solver's table used to be allocated */
  CHECK_MSG(ws.grows >= 2 && ws.grows <= 12, "workspace grown %zu times in 800 programs", ws.grows);
  stk__sia_ws_free(&ws);
  CHECK(ws.buf[0] == NULL && ws.cap[1] == 0);
}

/* Costs not in whole cents: the exact solver does not apply (Sia then
 * calls GLPK), and says so without touching the picks. */
TEST(sim_sia_exact_refuses_costs_not_in_cents) {
  static const struct stk__sia_cfg cfg[1] = {{0, 1, 1}};
  const int tgpus[1] = {1}, hold[1] = {-1};
  double cost[1] = {-0.123};
  int pick[1] = {7};
  CHECK_EQ(stk__sia_exact(cfg, 1, tgpus, 1, 1, cost, hold, NULL, pick, NULL, NULL), -1);
  CHECK_EQ(pick[0], 7);
  cost[0] = -0.12;
  CHECK_EQ(stk__sia_exact(cfg, 1, tgpus, 1, 1, cost, hold, NULL, pick, NULL, NULL), 0);
  CHECK_EQ(pick[0], 0);
  /* check mode counts such a program as declined (GLPK answers it), not
   * as bad, and the one in cents as the same */
  struct stk__sia_check ck;
  memset(&ck, 0, sizeof ck);
  stk__sia_checking = &ck;
  cost[0] = -0.123;
  stk__sia_check_round(cfg, 1, tgpus, 1, 1, cost, hold, NULL);
  cost[0] = -0.12;
  stk__sia_check_round(cfg, 1, tgpus, 1, 1, cost, hold, NULL);
  stk__sia_checking = NULL;
  CHECK_EQ(ck.programs, 2);
  CHECK_EQ(ck.declined, 1);
  CHECK_EQ(ck.bad, 0);
  CHECK_EQ(ck.same, 1);
}

/* Check mode on every round of the cut: GLPK's objective is the exact
 * optimum in every round (or above it by no more than its 1e-4 gap), and
 * the allocations differ only where optima tie. The run itself follows the
 * exact solver; its result is pinned (`stoker sim --jobs CUT --traces
 * ../shared/data/sia/traces --gpu-types sia --job-policy sia`). */
TEST(sim_sia_exact_equals_glpk_every_round) {
  struct stk_sim_apps *base, *ty[3];
  struct stk_sim_gpu_type types[3];
  struct stk_sim_jobs *j = sia_philly_cut(&base, ty, types);
  if (!j) SKIP("shared data (../shared/data/sia) is absent");
  struct stk__sia_check ck;
  memset(&ck, 0, sizeof ck);
  stk__sia_checking = &ck;
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = "sia";
  o.types = types;
  o.ntypes = 3;
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_run(j, &o, &r, err);
  stk__sia_checking = NULL;
  CHECK_MSG(rc == 0, "%s", err);
  printf("    check: %zu programs (%zu searched by GLPK): %zu the same, %zu ties broken "
         "otherwise, %zu at GLPK's gap, %zu bad; largest excess %.2g\n",
         ck.programs, ck.glpk_called, ck.same, ck.ties, ck.gap, ck.bad, ck.max_rel);
  CHECK(ck.programs > 100);
  CHECK_EQ(ck.bad, 0);
  CHECK(ck.max_rel <= STK__SIA_CHECK_TOL);
  CHECK_EQ(ck.declined, 0);
  CHECK_EQ(ck.same + ck.ties + ck.gap, ck.programs);
  CHECK_EQ(r.completed, 40);
  printf("    rounds %llu, mean JCT %.3f\n", (unsigned long long)r.rounds, r.jct_mean);
  CHECK_EQ(r.rounds, 391);
  CHECK_MSG(fabs(r.jct_mean - 1530.775) < 0.005, "mean JCT %.3f, pinned 1530.775", r.jct_mean);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  for (int t = 0; t < 3; t++) stk_sim_apps_free(ty[t]);
  stk_sim_apps_free(base);
}

/* A cluster whose table would pass the exact solver's size (the default
 * one doubled: 49 x 49 x 33 states) is refused by sia at its start, with
 * the way out, instead of having its rounds solved by GLPK unasked. */
TEST(sim_sia_exact_refuses_a_cluster_too_large) {
  struct stk_sim_apps *base, *ty[3];
  struct stk_sim_gpu_type types[3];
  struct stk_sim_jobs *j = sia_philly_cut(&base, ty, types);
  if (!j) SKIP("shared data (../shared/data/sia) is absent");
  for (int t = 0; t < 3; t++) types[t].nodes *= 2;
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = "sia";
  o.types = types;
  o.ntypes = 3;
  struct stk_sim_jobs_result r;
  memset(&r, 0, sizeof r);
  char err[STK_ERRMSG_MAX] = "";
  CHECK_EQ(stk_sim_jobs_run(j, &o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "more than 65536 states");
  CHECK_CONTAINS(err, "--job-policy sia-glpk");
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  for (int t = 0; t < 3; t++) stk_sim_apps_free(ty[t]);
  stk_sim_apps_free(base);
}

/* The same check on a whole workload, when asked (it runs GLPK on every
 * round: minutes): STOKER_SIA_CHECK_WORKLOAD=PATH.csv on the default
 * 64-GPU cluster, traces from ../shared/data/sia/traces. */
TEST(sim_sia_exact_equals_glpk_whole_workload) {
  const char *wl = getenv("STOKER_SIA_CHECK_WORKLOAD"), *data = test_shared_data();
  if (!wl || !*wl || !data) SKIP("set STOKER_SIA_CHECK_WORKLOAD=PATH.csv (and ../shared) to run");
  char traces[4200], err[STK_ERRMSG_MAX] = "";
  snprintf(traces, sizeof traces, "%s/sia/traces", data);
  static const char *names[3] = {"aws", "rtx", "dgx-ext"};
  const unsigned nodes[3] = {6, 3, 2}, gpn[3] = {4, 8, 8};
  struct stk_sim_apps *base, *ty[3];
  struct stk_sim_gpu_type types[3];
  CHECK_MSG(stk_sim_apps_load(&base, traces, err) == 0, "%s", err);
  for (int t = 0; t < 3; t++) {
    CHECK_MSG(stk_sim_apps_load_type(&ty[t], traces, names[t], err) == 0, "%s", err);
    types[t] = (struct stk_sim_gpu_type){names[t], nodes[t], gpn[t], ty[t]};
  }
  struct stk_sim_jobs *j;
  CHECK_MSG(stk_sim_jobs_load(&j, base, wl, err) == 0, "%s", err);
  struct stk__sia_check ck;
  memset(&ck, 0, sizeof ck);
  stk__sia_checking = &ck;
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = "sia";
  o.types = types;
  o.ntypes = 3;
  struct stk_sim_jobs_result r;
  int rc = stk_sim_jobs_run(j, &o, &r, err);
  stk__sia_checking = NULL;
  CHECK_MSG(rc == 0, "%s", err);
  printf("    %s: %llu rounds, %zu jobs done, mean JCT %.2f s; %zu programs (%zu searched by "
         "GLPK): %zu the same, %zu ties broken otherwise, %zu at GLPK's gap, %zu bad; largest "
         "excess %.2g\n",
         wl, (unsigned long long)r.rounds, r.completed, r.jct_mean, ck.programs, ck.glpk_called,
         ck.same, ck.ties, ck.gap, ck.bad, ck.max_rel);
  CHECK_EQ(ck.bad, 0);
  CHECK(ck.max_rel <= STK__SIA_CHECK_TOL);
  stk_sim_jobs_result_free(&r);
  stk_sim_jobs_free(j);
  for (int t = 0; t < 3; t++) stk_sim_apps_free(ty[t]);
  stk_sim_apps_free(base);
}
