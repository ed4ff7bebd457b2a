/* GpuClustering: keep pods of one GPU shape together. A node already
 * hosting only pods of the same shape (shared, one GPU, two GPUs, ...)
 * scores highest, then one hosting that shape among others, then an empty
 * node, then one with other shapes only; within each band the fuller node
 * wins. A shared pod takes the tightest GPU. */
#include "sim_impl.h"

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  (void)st, (void)gpu;
  if (sp->num == 0) return 0;
  int tag = sp->share ? 0 : sp->num;
  int fill = 25 * (STK__SIM_MAX_SPEC_GPU - n->gpu_left) / STK__SIM_MAX_SPEC_GPU;
  if (n->aff[tag] > 0) return fill + (n->naff == 1 ? 75 : 50);
  return fill + (n->naff == 0 ? 25 : 0);
}

const struct stk_sim_policy_ops stk__sim_policy_gpuclustering = {
    .name = "GpuClustering",
    .summary = "put pods of one GPU shape on the same nodes",
    .flags = STK_SIM_POLICY_CACHE,
    .gpusel = STK_SIM_GPUSEL_BEST,
    .score = score,
};
