/* The init functions of the simulators' options (sim.h, infer.h,
 * mig_online.h): each records the size of the caller's struct, which the
 * run reads no further than (base/opts.c). */
#include "../base/base.h"
#include "stoker/infer.h"
#include "stoker/mig_online.h"
#include "stoker/sim.h"

void stk_sim_run_opts_init_sized(struct stk_sim_run_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_sim_experiment_opts_init_sized(struct stk_sim_experiment_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_sim_replay_opts_init_sized(struct stk_sim_replay_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_sim_jobs_opts_init_sized(struct stk_sim_jobs_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_infer_opts_init_sized(struct stk_infer_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_mig_online_opts_init_sized(struct stk_mig_online_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}
