/* FGD, fragmentation gradient descent (Weng et al., ATC'23): place a pod
 * where the node's expected fragmentation, measured against the workload's
 * typical pods, grows least; for a shared pod also pick the GPU that way.
 * The growth d (milli-GPU) becomes the artifact's integer score
 * 100 * sigmoid(-d / 1000), so small differences tie and ties are broken at
 * random. Scores depend only on the node's state and the pod's spec, so the
 * scheduler caches them per node until the node changes. */
#include <math.h>

#include "sim_impl.h"

static int to_score(double before, double after) {
  double sigmoid = 1.0 / (1.0 + exp(-(before - after) / 1000.0));
  return (int)(sigmoid * 100.0);
}

static int score(const struct stk__sim_state *st, const struct stk__sim_node *n,
                 const struct stk__sim_spec *sp, int *gpu) {
  if (!sp->share) return to_score(n->frag, stk__sim_frag_after(st, n, sp, -1));
  int best = 0, pick = -1;
  for (int g = 0; g < n->ngpu; g++) {
    if (n->gpu[g] < sp->milli) continue;
    int seen = 0; /* a GPU with the same milli left as an earlier one scores the same */
    for (int h = 0; h < g && !seen; h++) seen = n->gpu[h] == n->gpu[g];
    if (seen) continue;
    int s = to_score(n->frag, stk__sim_frag_after(st, n, sp, g));
    if (pick < 0 || s > best) best = s, pick = g;
  }
  *gpu = pick;
  return best;
}

const struct stk_sim_policy_ops stk__sim_policy_fgd = {
    .name = "FGD",
    .summary = "least growth of expected fragmentation (fragmentation gradient descent)",
    .flags = STK_SIM_POLICY_CACHE,
    .gpusel = STK_SIM_GPUSEL_SCORE,
    .score = score,
};
