/* Shared by the non-preemptive queueing policies (fifo, sjf, multi,
 * carbon): running jobs keep their GPUs, waiting jobs start at their
 * requested size where the run's resource model (resource.h) places them:
 * on the nodes with the most free GPUs, or by a placement policy. */
#ifndef STOKER_SIM_JPOL_QUEUE_H
#define STOKER_SIM_JPOL_QUEUE_H

#include "jobs_impl.h"

/* The GPUs as the current allocations leave them: rn->res is given every
 * allocation that stands, and free_gpus gets its free GPUs per
 * node; *left gets the capacity units (GPUs, or MIG compute slices) the
 * power cap still allows to start. 0, or a
 * negative code when the model cannot take an allocation. */
static inline int stk__jq_free(struct stk__jrun *rn, const size_t *active, size_t na,
                               int *free_gpus, int *left) {
  int used = 0, rc = rn->res->ops->hold(rn->res, rn->new_alloc, rn->new_n, active, na);
  if (rc) return rc;
  for (size_t k = 0; k < na; k++) used += stk__sim_res_units(rn->res, rn->new_n[active[k]]);
  for (int n = 0; n < rn->nodes; n++) free_gpus[n] = rn->res->free_gpus[n];
  *left = rn->usable * rn->res->unit - used;
  return 0;
}

/* Start job i if the power cap allows it and the resource model places
 * it; 1 when it started. */
static inline int stk__jq_start(struct stk__jrun *rn, size_t i, int *free_gpus, int *left) {
  int want = rn->js[i].spec->replicas, units = stk__sim_res_units(rn->res, want);
  if (units > *left) return 0;
  if (rn->res->ops->place(rn->res, i, want, rn->new_alloc[i])) return 0;
  for (int n = 0; n < rn->nodes; n++) free_gpus[n] = rn->res->free_gpus[n];
  rn->new_n[i] = want;
  *left -= units;
  return 1;
}

#endif
