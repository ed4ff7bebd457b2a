/* DotProd, Tetris's alignment heuristic (Grandl et al., SIGCOMM'14): the dot
 * product of the node's free (CPU, GPU) and the pod's request, both scaled
 * by the largest node of the trace; the smaller the product, the better,
 * which packs a pod where its shape leaves least behind. GPUs are summed
 * over the node ("merge") and a shared pod takes the tightest GPU. */
#include "sim_impl.h"

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  (void)st, (void)gpu;
  if (n->cpu_left < sp->cpu_nz) return 0;
  double cpu =
      (double)n->cpu_left / STK__SIM_MAX_SPEC_CPU * ((double)sp->cpu_nz / STK__SIM_MAX_SPEC_CPU);
  double g = (double)n->gpu_left / STK__SIM_MAX_SPEC_GPU *
             ((double)sp->num * sp->milli / STK__SIM_MAX_SPEC_GPU);
  double s = 1.0 - (cpu + g) / 2.0;
  return (int)(100.0 * s);
}

const struct stk_sim_policy_ops stk__sim_policy_dotprod = {
    .name = "DotProd",
    .summary = "least dot product of free (CPU, GPU) and request (Tetris)",
    .flags = STK_SIM_POLICY_CACHE,
    .gpusel = STK_SIM_GPUSEL_BEST,
    .score = score,
};
