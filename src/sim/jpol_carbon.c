/* Carbon-aware queueing: FIFO with backfilling, except that while the
 * grid's carbon intensity is above its mean over the series, jobs that
 * have waited less than the deferral limit (6 h) stay queued; they start
 * when the grid is cleaner or the limit passes. With a constant intensity
 * it is plain FIFO with backfilling. */
#include "jpol_queue.h"

#define DEFER_S (6 * 3600.0)

static double mean_intensity(const struct stk_sim_jobs_opts *o) {
  if (!o->ncarbon || !o->carbon_series) return o->carbon_g_kwh;
  double s = 0;
  for (size_t i = 0; i < o->ncarbon; i++) s += o->carbon_series[i];
  return s / (double)o->ncarbon;
}

static int c_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  int free_gpus[STK__JOBS_MAX_NODES];
  int left, rc = stk__jq_free(rn, active, na, free_gpus, &left);
  if (rc) return rc;
  int dirty = stk__jcarbon_at(rn->o, rn->now) > mean_intensity(rn->o);
  for (size_t k = 0; k < na && left > 0; k++) {
    size_t i = active[k];
    if (rn->new_n[i]) continue;
    if (dirty && rn->now - rn->js[i].spec->submit < DEFER_S) continue;
    stk__jq_start(rn, i, free_gpus, &left);
  }
  return 0;
}

const struct stk__jpolicy stk__jpol_carbon = {
    .name = "carbon",
    .summary = "FIFO with backfilling that defers jobs up to 6 h while the grid is dirtier "
               "than its mean",
    .queue = 1,
    .schedule = c_schedule,
};
