/* GpuPacking: prefer, in order, GPUs already partly used, then whole free
 * GPUs on a node already in use, then an untouched node (the one with
 * fewest GPUs first); within a band the tighter fit wins. A shared pod
 * takes the tightest GPU. */
#include "sim_impl.h"

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  (void)st, (void)gpu;
  if (sp->num == 0) return 0;
  if (n->nfree == n->ngpu) {
    int s = 100 / 3 - n->nfree;
    return s > n->nfree ? s : n->nfree;
  }
  int req = sp->num, free_used = 0, ratio = 0;
  for (int i = 0; i < n->ngpu && req; i++) {
    int v = n->sorted[i];
    if (sp->milli <= v) {
      req--;
      free_used += v == STK__SIM_MILLI;
      ratio += v * 100 / STK__SIM_MILLI;
    }
  }
  if (req) return 0;
  if (free_used) {
    int s = 100 / 2 - free_used;
    return s > 100 / 3 ? s : 100 / 3;
  }
  int s = 100 - ratio / 10;
  return s > 100 / 2 ? s : 100 / 2;
}

const struct stk_sim_policy_ops stk__sim_policy_gpupacking = {
    .name = "GpuPacking",
    .summary = "fill partly used GPUs first, then used nodes, then empty ones",
    .flags = STK_SIM_POLICY_CACHE,
    .gpusel = STK_SIM_GPUSEL_BEST,
    .score = score,
};
