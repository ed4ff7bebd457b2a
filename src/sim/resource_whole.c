/* The whole-GPU resource model: a count of free GPUs per node, and the
 * most-free placement of the Pollux artifact's baselines. */
#include <stdlib.h>

#include "../base/base.h"
#include "resource.h"

void stk__jplace_most_free(int *free_gpus, int nodes, int want, uint8_t *out) {
  int got = 0;
  while (got < want) {
    int best = 0;
    for (int i = 1; i < nodes; i++)
      if (free_gpus[i] > free_gpus[best]) best = i;
    int take = STK__MIN(free_gpus[best], want - got);
    if (take <= 0) break; /* callers check capacity first */
    for (int k = 0; k < take; k++) out[got++] = (uint8_t)best;
    free_gpus[best] -= take;
  }
}

static int w_hold(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
                  size_t count) {
  for (int node = 0; node < r->nodes; node++) r->free_gpus[node] = r->gpn;
  for (size_t k = 0; k < count; k++)
    for (int g = 0; g < n[idx[k]]; g++) r->free_gpus[alloc[idx[k]][g]]--;
  return 0;
}

static int w_place(struct stk__sim_res *r, size_t job, int want, uint8_t *alloc) {
  (void)job;
  int left = 0;
  for (int n = 0; n < r->nodes; n++) left += r->free_gpus[n];
  if (want > left) return STK_ENOSPC;
  stk__jplace_most_free(r->free_gpus, r->nodes, want, alloc);
  return 0;
}

static const struct stk__sim_res_ops whole_ops = {
    .name = "whole",
    .hold = w_hold,
    .place = w_place,
};

int stk__sim_res_whole(struct stk__sim_res **out, int nodes, int gpn, char *errmsg) {
  struct stk__sim_res *r = calloc(1, sizeof *r);
  if (r) r->free_gpus = calloc((size_t)nodes, sizeof(int));
  if (!r || !r->free_gpus) {
    free(r);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  r->ops = &whole_ops;
  r->nodes = nodes;
  r->gpn = gpn;
  r->unit = 1;
  w_hold(r, NULL, NULL, NULL, 0);
  *out = r;
  return 0;
}

void stk__sim_res_free(struct stk__sim_res *r) {
  if (!r) return;
  if (r->ops->fini) r->ops->fini(r);
  free(r->free_gpus);
  free(r);
}
