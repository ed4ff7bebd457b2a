/* Optimus (Peng et al., EuroSys'18) with an oracle, as the Pollux
 * artifact's baseline: every active job gets one GPU, then GPUs go one at
 * a time to the job whose remaining time (remaining iterations at its
 * fixed batch size times the true step time) falls most with one more
 * GPU. Jobs whose size did not change keep their GPUs; the others are
 * placed, smallest first, by the run's resource model (whole GPUs: on the
 * nodes with the most free GPUs). */
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

struct orun {
  int *reps;
  double *gain, *remaining;
  size_t *order;
};

static int o_init(struct stk__jrun *rn) {
  struct orun *o = calloc(1, sizeof *o);
  if (!o) return STK_ENOMEM;
  rn->pol = o;
  o->reps = calloc(rn->n, sizeof(int));
  o->gain = calloc(rn->n, sizeof(double));
  o->remaining = calloc(rn->n, sizeof(double));
  o->order = calloc(rn->n + 1, sizeof(size_t));
  return o->reps && o->gain && o->remaining && o->order ? 0 : STK_ENOMEM;
}

static void o_fini(struct stk__jrun *rn) {
  struct orun *o = rn->pol;
  if (!o) return;
  free(o->reps);
  free(o->gain);
  free(o->remaining);
  free(o->order);
  free(o);
  rn->pol = NULL;
}

static int max_replicas(const struct stk__jstate *j) {
  const struct stk__japp *a = j->spec->app;
  if (!strcmp(a->name, "ncf")) return 1;
  return j->spec->bsz / a->min_local;
}

static double gain_of(struct stk__jrun *rn, struct orun *o, size_t i, int left) {
  struct stk__jstate *j = &rn->js[i];
  if (o->reps[i] + 1 > max_replicas(j) || left < 1) return 0;
  return (stk__jpredict_step(rn, j, o->reps[i]) - stk__jpredict_step(rn, j, o->reps[i] + 1)) *
         o->remaining[i];
}

static int o_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  struct orun *o = rn->pol;
  for (size_t k = 0; k < na; k++) {
    size_t i = active[k];
    struct stk__jstate *j = &rn->js[i];
    const struct stk__japp *a = j->spec->app;
    int ce = a->max_epochs - 1;
    if (ce <= j->epoch)
      o->remaining[i] = 1;
    else
      o->remaining[i] = stk__japp_iteration(a, j->spec->bsz, ce) -
                        stk__japp_iteration(a, j->spec->bsz, j->epoch);
  }
  int left = rn->usable;
  for (size_t k = 0; k < na; k++) {
    size_t i = active[k];
    if (left < 1) {
      o->reps[i] = 0;
      o->gain[i] = 0;
      continue;
    }
    o->reps[i] = 1;
    left -= 1;
    o->gain[i] = gain_of(rn, o, i, left);
  }
  while (left > 0) {
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < na; k++)
      if (best == SIZE_MAX || o->gain[active[k]] > o->gain[best]) best = active[k];
    if (best == SIZE_MAX || !(o->gain[best] > 0)) break;
    o->reps[best]++;
    o->gain[best] = gain_of(rn, o, best, left);
    left--;
  }
  /* keep allocations of unchanged size: the resource model holds them */
  for (size_t k = 0; k < na; k++) {
    size_t i = active[k];
    if (rn->new_n[i] != o->reps[i]) rn->new_n[i] = 0;
  }
  int rc = rn->res->ops->hold(rn->res, rn->new_alloc, rn->new_n, active, na);
  if (rc) return rc;
  /* stable sort of the active jobs by replicas */
  for (size_t k = 0; k < na; k++) o->order[k] = active[k];
  for (size_t k = 1; k < na; k++) {
    size_t v = o->order[k], m = k;
    while (m > 0 && o->reps[o->order[m - 1]] > o->reps[v]) {
      o->order[m] = o->order[m - 1];
      m--;
    }
    o->order[m] = v;
  }
  for (size_t k = 0; k < na; k++) {
    size_t i = o->order[k];
    if (o->reps[i] > 0 && rn->new_n[i] == 0) {
      /* the sizes fit the usable GPUs, so a refusal is a fault */
      if ((rc = rn->res->ops->place(rn->res, i, o->reps[i], rn->new_alloc[i]))) return rc;
      rn->new_n[i] = o->reps[i];
    }
  }
  return 0;
}

const struct stk__jpolicy stk__jpol_optimus = {
    .name = "optimus",
    .summary = "Optimus+Oracle: GPUs one at a time to the largest cut in remaining time "
               "(true step times), as the Pollux artifact's baseline",
    .elastic = 1,
    .init = o_init,
    .fini = o_fini,
    .schedule = o_schedule,
};
