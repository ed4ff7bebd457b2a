/* The Pollux fit's objective with libmvec's AVX2 exp and log (jobs_goodput.c,
 * issue 22 S8) against the libm one: the same formulas, so the fits of the
 * same rows must predict the same step times up to the last bits' effect
 * on the search. Where the CPU has no AVX2 (or -DSTK_NO_MVEC) both fits
 * are libm's and equal. */
#include <math.h>

#include "../src/sim/jobs_impl.h"
#include "test.h"

/* rows of a job measured at n configurations of a known model */
static int rows(const struct stk__perf *p, int k, int *nodes, int *reps, int *bsz, double *acc,
                double *step) {
  static const int cfg[][3] = {{1, 1, 32}, {1, 2, 32}, {1, 4, 64}, {2, 8, 64},
                               {1, 1, 128}, {3, 12, 96}, {2, 4, 256}, {1, 3, 48}};
  int n = 3 + k % 6;
  for (int i = 0; i < n; i++) {
    nodes[i] = cfg[i][0];
    reps[i] = cfg[i][1];
    bsz[i] = cfg[i][2];
    double thr = stk__perf_throughput(p, nodes[i], reps[i], bsz[i], 0);
    step[i] = (double)reps[i] * bsz[i] / thr * (1 + 0.03 * sin(7.0 * i + k)); /* noisy */
    acc[i] = (p->ac + p->bc * bsz[i]) * (1 + 0.02 * cos(5.0 * i + k));
  }
  return n;
}

TEST(sim_fit_vector_objective_same_fit) {
  for (int k = 0; k < 24; k++) {
    struct stk__perf m = {.ac = 0.02 + 0.002 * (k % 5), .bc = 2e-4 * (1 + k % 3),
                          .an = 0.06, .bn = 2e-3 * (k % 2), .ar = 0.015, .br = 1e-3,
                          .gamma = 1.2 + 0.4 * (k % 4)};
    int nodes[8], reps[8], bsz[8];
    double acc[8], step[8];
    int n = rows(&m, k, nodes, reps, bsz, acc, step);
    struct stk__perf pv, ps;
    stk__fit_scalar = 0;
    stk__perf_fit(&pv, n, nodes, reps, bsz, acc, step);
    stk__fit_scalar = 1;
    stk__perf_fit(&ps, n, nodes, reps, bsz, acc, step);
    stk__fit_scalar = 0;
    for (int i = 0; i < n; i++) {
      double tv = stk__perf_throughput(&pv, nodes[i], reps[i], bsz[i], 0);
      double ts = stk__perf_throughput(&ps, nodes[i], reps[i], bsz[i], 0);
      CHECK_MSG(isfinite(tv) && tv > 0 && fabs(tv - ts) <= 1e-4 * ts,
                "case %d row %d: throughput %.17g (vector) against %.17g (libm)", k, i, tv, ts);
    }
  }
}
