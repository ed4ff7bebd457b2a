/* Random: any node that fits, uniformly, and a uniformly random GPU among
 * those that fit for a shared pod. The artifact's RandomScore gives one
 * random feasible node the top score and all others the lowest, which is
 * the same as drawing uniformly from the nodes that fit. */
#include "sim_impl.h"

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  (void)st, (void)n, (void)sp, (void)gpu;
  return 0;
}

const struct stk_sim_policy_ops stk__sim_policy_random = {
    .name = "Random",
    .summary = "a uniformly random node that fits, and a random GPU that fits",
    .flags = STK_SIM_POLICY_UNIFORM,
    .gpusel = STK_SIM_GPUSEL_RANDOM,
    .score = score,
};
