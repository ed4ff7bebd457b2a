/* FIFO: jobs start in arrival order at their requested GPU count and run
 * to completion; the head of the queue blocks everyone behind it (no
 * backfilling), the usual baseline of the queueing studies. */
#include "jpol_queue.h"

static int f_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  int free_gpus[STK__JOBS_MAX_NODES];
  int left, rc = stk__jq_free(rn, active, na, free_gpus, &left);
  if (rc) return rc;
  for (size_t k = 0; k < na; k++) {
    size_t i = active[k];
    if (rn->new_n[i]) continue;
    if (!stk__jq_start(rn, i, free_gpus, &left)) break;
  }
  return 0;
}

const struct stk__jpolicy stk__jpol_fifo = {
    .name = "fifo",
    .summary = "first in, first out at the requested GPUs, no preemption, no backfilling",
    .queue = 1,
    .schedule = f_schedule,
};
