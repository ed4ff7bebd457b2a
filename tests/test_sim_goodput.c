/* The goodput search's run table (jobs_goodput.c, issue 22 S8): a job's
 * step times are kept by (model, network class, replicas, batch sizes) and
 * looked up in later rounds, so every answer must equal the search made
 * from nothing bit for bit, the model's every bit must count (a refit that
 * moves one parameter by one ulp is a miss), and slots shared by two keys
 * must not answer for each other. */
#include <math.h>

#include "../src/sim/jobs_impl.h"
#include "test.h"

static void model(struct stk__perf *p, int k) {
  p->ac = 0.02 + 0.001 * (k % 7);
  p->bc = 3e-4 * (1 + k % 5);
  p->an = 0.05 + 0.01 * (k % 3);
  p->bn = 1e-3 * (k % 4);
  p->ar = 0.01 + 0.002 * (k % 6);
  p->br = 5e-4 * (k % 2);
  p->gamma = 1 + 0.37 * (k % 11);
}

/* One search through the table against the search made for the call. */
static void same(struct stk__gpcache **gc, const struct stk__perf *p, double sqr, double var,
                 int nodes, int reps) {
  int a1 = -1, c1 = -1, a2 = -2, c2 = -2;
  double g1 = stk__goodput_opt(p, sqr, var, 32, nodes, reps, 4096, 8, 256, &a1, &c1);
  double g2 = stk__goodput_opt_c(gc, p, sqr, var, 32, nodes, reps, 4096, 8, 256, &a2, &c2);
  CHECK_MSG(!memcmp(&g1, &g2, sizeof g1), "goodput %.17g from the table, %.17g searched", g2, g1);
  CHECK_EQ(a1, a2);
  CHECK_EQ(c1, c2);
}

TEST(sim_goodput_table_equals_search) {
  struct stk__gpcache *gc = NULL;
  struct stk__perf p;
  uint64_t hits, misses;
  /* 40 models x 4 placements, each searched in 5 "rounds" with new
   * gradient statistics: the first round of each is a miss, the other
   * four find it */
  for (int round = 0; round < 5; round++)
    for (int k = 0; k < 40; k++) {
      model(&p, k);
      static const int nodes[4] = {1, 1, 2, 3}, reps[4] = {1, 4, 8, 12};
      for (int c = 0; c < 4; c++) same(&gc, &p, 0.1 + 0.05 * round, 2.0 + k, nodes[c], reps[c]);
    }
  stk__gpcache_counts(gc, &hits, &misses);
  CHECK_EQ(hits + misses, 800);
  CHECK_MSG(misses >= 160 && hits >= 600, "%" PRIu64 " found, %" PRIu64 " taken", hits, misses);
  /* more keys than slots: collisions replace, never answer for another */
  for (int k = 0; k < 6000; k++) {
    model(&p, k);
    p.ac += 1e-7 * k;
    same(&gc, &p, 0.2, 3.0, 1, 1 + k % 8);
  }
  for (int k = 5999; k >= 0; k -= 7) {
    model(&p, k);
    p.ac += 1e-7 * k;
    same(&gc, &p, 0.25, 3.5, 1, 1 + k % 8);
  }
  stk__gpcache_free(gc);
}

TEST(sim_goodput_table_keys) {
  struct stk__gpcache *gc = NULL;
  struct stk__perf p;
  uint64_t hits, misses;
  model(&p, 1);
  same(&gc, &p, 0.3, 1.0, 2, 8);
  same(&gc, &p, 0.4, 1.5, 2, 8);
  stk__gpcache_counts(gc, &hits, &misses);
  CHECK_EQ(misses, 1);
  CHECK_EQ(hits, 1);
  /* the network time reads nodes only as "more than one": 2 and 3 nodes
   * at 8 replicas share the step times; one node does not */
  same(&gc, &p, 0.3, 1.0, 3, 8);
  stk__gpcache_counts(gc, &hits, &misses);
  CHECK_EQ(hits, 2);
  same(&gc, &p, 0.3, 1.0, 1, 8);
  stk__gpcache_counts(gc, &hits, &misses);
  CHECK_EQ(misses, 2);
  /* a refit that moves gamma by one ulp: taken anew, and the answer is the
   * new model's */
  p.gamma = nextafter(p.gamma, 2);
  same(&gc, &p, 0.3, 1.0, 3, 8);
  stk__gpcache_counts(gc, &hits, &misses);
  CHECK_EQ(misses, 3);
  CHECK_EQ(hits, 2);
  stk__gpcache_free(gc);
}
