/* Helpers shared by the job engine's resource-model tests
 * (test_sim_placer*.c): a trace from CSV text, and a run of it on nodes x
 * gpus_per_node GPUs under a queueing policy and a placer (NULL: whole
 * GPUs), with no restart delay. */
#ifndef STOKER_TEST_SIM_PLACER_H
#define STOKER_TEST_SIM_PLACER_H

#include <string.h>

#include "stoker/sim.h"
#include "test.h"

static __attribute__((unused)) struct stk_sim_jobs *trace(const char *csv) {
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *j;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_load(&j, NULL, "jobs.csv", err);
  CHECK_MSG(rc == 0, "jobs: %s", err);
  return j;
}

static __attribute__((unused)) int placer_run(const struct stk_sim_jobs *j, const char *policy,
                                              const char *placer, unsigned nodes,
                                              unsigned gpus_per_node,
                                              struct stk_sim_jobs_result *r, char *err) {
  struct stk_sim_jobs_opts o;
  stk_sim_jobs_opts_init(&o);
  o.policy = policy;
  o.placer = placer;
  o.nodes = nodes;
  o.gpus_per_node = gpus_per_node;
  o.restart_delay = -1;
  return stk_sim_jobs_run(j, &o, r, err);
}

static __attribute__((unused)) void placer_run_ok(const struct stk_sim_jobs *j,
                                                  const char *policy, const char *placer,
                                                  unsigned nodes, unsigned gpus_per_node,
                                                  struct stk_sim_jobs_result *r) {
  char err[STK_ERRMSG_MAX] = "";
  int rc = placer_run(j, policy, placer, nodes, gpus_per_node, r, err);
  CHECK_MSG(rc == 0, "%s/%s: %s", policy, placer ? placer : "whole", err);
}

#endif
