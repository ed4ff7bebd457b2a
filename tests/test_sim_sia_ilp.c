/* Sia's integer program through its GLPK wrapper (issue 22). GLPK may stop
 * a search at the 1e-4 relative gap with a solution (GLP_EMIPGAP, status
 * GLP_FEAS); Sia once read that as a failure and left every job without
 * GPUs for the round, which is how newTrace workload 2 never finished. The
 * program below is one round of newTrace workload 1 (13 jobs), cut down
 * while GLPK (Debian's 5.0) still stopped at the gap: the configurations no job could use
 * dropped, and each job's costs kept only for the configurations that
 * matter (the others 98.9, as Sia prices a configuration a job cannot
 * use). */
#include <glpk.h>

#include "../src/sim/jpol_sia.h"
#include "test.h"

#define NJ 13
#define NC 9
#define NOPE 98.9 /* 100 - lambda_n: a configuration the job cannot use */

static const struct stk__sia_cfg cfg[NC] = {
    {0, 1, 1}, {0, 1, 4}, {0, 2, 8}, {1, 1, 8},  {2, 1, 1},
    {2, 1, 2}, {2, 1, 4}, {2, 1, 8}, {2, 2, 16},
};
static const int tgpus[3] = {24, 24, 16};

/* each job's usable configurations and their costs, -1 ends a list */
static const struct {
  int c[4];
  double v[4];
} jobs[NJ] = {
    {{1, -1}, {-0.73}},           {{6, -1}, {-0.77}},
    {{6, -1}, {-0.80}},           {{1, 2, -1}, {-0.72, -0.77}},
    {{3, 7, -1}, {-0.80, -0.83}}, {{2, 3, -1}, {-0.73, -0.75}},
    {{2, -1}, {-0.74}},           {{3, -1}, {-0.81}},
    {{3, 6, -1}, {-0.73, -0.68}}, {{5, 6, 7, -1}, {-0.81, -0.90, -0.94}},
    {{5, -1}, {-0.84}},           {{4, -1}, {-0.72}},
    {{0, 4, -1}, {-0.10, -0.10}},
};

static void costs(double *cost) {
  for (int k = 0; k < NJ; k++) {
    for (int c = 0; c < NC; c++) cost[k * NC + c] = NOPE;
    for (int q = 0; jobs[k].c[q] >= 0; q++) cost[k * NC + jobs[k].c[q]] = jobs[k].v[q];
  }
}

TEST(sim_sia_ilp_gap_stop_keeps_solution) {
  double cost[NJ * NC];
  int hold[NJ], pick[NJ], grc = -1;
  costs(cost);
  for (int k = 0; k < NJ; k++) hold[k] = -1;
  stk__sia_dp_first = 0; /* GLPK itself, not the dynamic program */
  CHECK_OK(stk__sia_solve(cfg, NC, tgpus, 3, NJ, cost, hold, pick, &grc));
  /* the case under test: GLPK stopped at the gap, with a solution */
  CHECK_MSG(grc == GLP_EMIPGAP,
            "glp_intopt returned %d, not GLP_EMIPGAP (%d), GLPK %s (cut on 5.0)", grc, GLP_EMIPGAP,
            glp_version());
  /* GLPK's answer: every job gets GPUs, each type filled to its size */
  static const int want[NJ] = {1, 6, 6, 1, 3, 2, 2, 3, 3, 6, 5, 4, 4};
  int used[3] = {0, 0, 0};
  double obj = 1.1 * NJ;
  for (int k = 0; k < NJ; k++) {
    CHECK_MSG(pick[k] == want[k], "job %d got configuration %d, GLPK's answer %d", k, pick[k],
              want[k]);
    used[cfg[pick[k]].type] += cfg[pick[k]].gpus;
    obj += cost[k * NC + pick[k]];
  }
  for (int t = 0; t < 3; t++) CHECK_EQ(used[t], tgpus[t]);
  CHECK_MSG(obj > 4.905 && obj < 4.915, "objective %.4f, GLPK's 4.91", obj);
}

/* A program with no solution (a job held in a configuration bigger than
 * its type) leaves every job without GPUs. */
TEST(sim_sia_ilp_infeasible_picks_none) {
  double cost[NJ * NC];
  int hold[NJ], pick[NJ];
  costs(cost);
  for (int k = 0; k < NJ; k++) hold[k] = -1;
  hold[0] = 8; /* 16 GPUs of type 2, which has 16 */
  hold[1] = 7; /* and 8 more of it */
  CHECK_OK(stk__sia_solve(cfg, NC, tgpus, 3, NJ, cost, hold, pick, NULL));
  for (int k = 0; k < NJ; k++) CHECK_EQ(pick[k], -1);
}
