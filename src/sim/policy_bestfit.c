/* BestFit: the node whose free CPU and GPU, each scaled by the largest node
 * and weighted equally, would be smallest after the placement. A shared pod
 * takes the tightest GPU. The artifact min-max normalises these scores to
 * 0..100 per decision; only a node with the highest raw score reaches 100,
 * so that never changes the winner and is left out. */
#include "sim_impl.h"

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  (void)st, (void)gpu;
  double req_gpu = (double)sp->num * sp->milli;
  double left = 0.5 * ((double)n->cpu_left - sp->cpu_nz) / STK__SIM_MAX_SPEC_CPU +
                0.5 * ((double)n->gpu_left - req_gpu) / STK__SIM_MAX_SPEC_GPU;
  return (int)((1.0 - left) * 100.0);
}

const struct stk_sim_policy_ops stk__sim_policy_bestfit = {
    .name = "BestFit",
    .summary = "least free CPU and GPU left after placement",
    .flags = STK_SIM_POLICY_CACHE,
    .gpusel = STK_SIM_GPUSEL_BEST,
    .score = score,
};
