/* Shared by the non-preemptive queueing policies (fifo, sjf, multi,
 * carbon): running jobs keep their GPUs, waiting jobs start at their
 * requested size on the nodes with the most free GPUs. */
#ifndef STOKER_SIM_JPOL_QUEUE_H
#define STOKER_SIM_JPOL_QUEUE_H

#include "jobs_impl.h"

/* Free GPUs per node after the current allocations; returns the GPUs the
 * power cap still allows to start. */
static inline int stk__jq_free(struct stk__jrun *rn, const size_t *active, size_t na,
                               int *free_gpus) {
  int used = 0;
  for (int n = 0; n < rn->nodes; n++) free_gpus[n] = rn->gpn;
  for (size_t k = 0; k < na; k++)
    for (int g = 0; g < rn->new_n[active[k]]; g++) {
      free_gpus[rn->new_alloc[active[k]][g]]--;
      used++;
    }
  return rn->usable - used;
}

/* Start job i if it fits; 1 when it started. */
static inline int stk__jq_start(struct stk__jrun *rn, size_t i, int *free_gpus, int *left) {
  int want = rn->js[i].spec->replicas;
  if (want > *left) return 0;
  stk__jplace_most_free(free_gpus, rn->nodes, want, rn->new_alloc[i]);
  rn->new_n[i] = want;
  *left -= want;
  return 1;
}

#endif
