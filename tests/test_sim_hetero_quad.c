/* A GPU type measured on one machine only (the Sia data's quad: one server
 * of 4 Quadro RTX 6000): its throughput points all have one node count, so
 * they span no volume. Loading it used to fail in the Delaunay fit
 * (`--gpu-types quad:...`); now its measured placements are looked up and
 * a placement over more nodes takes the nearest measured point. */
#include <sys/stat.h>

#include "../src/sim/jobs_impl.h"
#include "test.h"

/* One application "toy" with placements 1, 2 and 4 on one node only. */
static void write_one_node_app(void) {
  mkdir("traces", 0755);
  mkdir("traces/toy", 0755);
  const char *val = "progress,iteration,metric,grad_sqr,grad_var\n"
                    "100,100,0.5,1,0\n"
                    "200,200,0.6,1,0\n";
  test_write_file("traces/toy/validation-8.csv", val, strlen(val));
  test_write_file("traces/toy/validation-32.csv", val, strlen(val));
  const char *pl = "placement,local_bsz,step_time,sync_time\n"
                   "1,4,0.5,0\n1,8,1.0,0\n2,4,0.6,0.1\n2,8,1.1,0.1\n4,4,0.7,0.2\n4,8,1.2,0.2\n";
  const char *sc = "local_bsz,step_time,sync_time,num_nodes,num_replicas\n"
                   "4,0.5,0,1,1\n8,1.0,0,1,1\n4,0.7,0.2,1,4\n8,1.2,0.2,1,4\n";
  test_write_file("traces/toy/placements-quad.csv", pl, strlen(pl));
  test_write_file("traces/toy/scalability-quad.csv", sc, strlen(sc));
}

TEST(sim_hetero_quad_one_node_type) {
  write_one_node_app();
  struct stk_sim_apps *q;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load_type(&q, "traces", "quad", err) == 0, "%s", err);
  const struct stk__japp *a = stk__japp_find(q, "toy");
  CHECK(a);
  double step, sync;
  int two[1] = {2};
  stk__japp_throughput(a, two, 1, 6, &step, &sync); /* measured, between batch 4 and 8 */
  CHECK(step > 0.849 && step < 0.851);
  CHECK(sync > 0.099 && sync < 0.101);
  int spread[2] = {4, 4}; /* two machines: the nearest measured point, 4 GPUs at batch 8 */
  stk__japp_throughput(a, spread, 2, 8, &step, &sync);
  CHECK(step > 1.199 && step < 1.201);
  CHECK(sync > 0.199 && sync < 0.201);
  stk_sim_apps_free(q);
}

/* Every application of the Sia data loads for the quad type. */
TEST(sim_hetero_quad_sia_data) {
  const char *data = test_shared_data();
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/sia/traces", data ? data : "");
  struct stat st;
  if (!data || stat(dir, &st) != 0) SKIP("shared data (../shared/data/sia/traces) is absent");
  struct stk_sim_apps *q;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_apps_load_type(&q, dir, "quad", err) == 0, "%s", err);
  const struct stk__japp *a = stk__japp_find(q, "imagenet");
  CHECK(a);
  double step, sync;
  int four[1] = {4};
  stk__japp_throughput(a, four, 1, 20, &step, &sync);
  CHECK(step > 0 && step == step);
  stk_sim_apps_free(q);
}
