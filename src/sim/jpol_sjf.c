/* Shortest job first with oracle durations: waiting jobs are taken in
 * order of their remaining run time at the requested GPUs (ties by
 * arrival) and each one that fits starts; running jobs are not preempted. */
#include <stdlib.h>

#include "jpol_queue.h"

struct key {
  double rem;
  size_t i;
};

static int cmp_key(const void *x, const void *y) {
  const struct key *a = x, *b = y;
  if (a->rem != b->rem) return (a->rem > b->rem) - (a->rem < b->rem);
  return (a->i > b->i) - (a->i < b->i);
}

static int s_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  int free_gpus[STK__JOBS_MAX_NODES];
  int left, rc = stk__jq_free(rn, active, na, free_gpus, &left);
  if (rc) return rc;
  struct key *k = malloc(sizeof *k * (na + 1));
  if (!k) return STK_ENOMEM;
  size_t m = 0;
  for (size_t a = 0; a < na; a++)
    if (!rn->new_n[active[a]]) {
      k[m].rem = stk__jremaining(rn, &rn->js[active[a]]);
      k[m++].i = active[a];
    }
  qsort(k, m, sizeof *k, cmp_key);
  for (size_t a = 0; a < m && left > 0; a++) stk__jq_start(rn, k[a].i, free_gpus, &left);
  free(k);
  return 0;
}

const struct stk__jpolicy stk__jpol_sjf = {
    .name = "sjf",
    .summary = "shortest remaining time first (oracle durations), backfilling, no preemption",
    .queue = 1,
    .schedule = s_schedule,
};
