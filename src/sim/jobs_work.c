/* The job engine's workload models (jobs_impl.h, struct stk__jwork_ops):
 * what each kind of job asks for, what a new allocation changes, how far
 * it gets over an interval at its allocation, and what is left of it.
 * - duration: a trace row, seconds of work at its GPUs (Philly, Helios);
 * - measured: a job of a measured application (the Pollux and Sia
 *   artifacts' workloads), epochs at the goodput its placement and batch
 *   size give, its batch chosen afresh for each allocation.
 * The engine (jobs_engine.c) pays restart delays and counts energy; it
 * asks these for everything else. Also here: how a job's whole GPUs are
 * handed to the pods resource model, as the sizes the jobs ask for. */
#include <math.h>
#include <stdlib.h>

#include "jobs_impl.h"

/* ---- measured applications -------------------------------------------- */

void stk__jlocal_bsz(const struct stk__japp *a, int bsz, int replicas, int *atomic, int *accum) {
  const double eps = 1e-8;
  int local = (int)ceil((double)bsz / replicas - eps);
  int acc = (int)ceil((double)local / a->max_local - eps) - 1;
  if (replicas == 1 && bsz > a->init_bsz && acc < 1) acc = 1;
  int at = (int)ceil((double)local / (acc + 1) - eps);
  int count = replicas * (acc + 1);
  int cap = (int)((double)a->max_bsz / count);
  if (at > cap) at = cap;
  *atomic = at;
  *accum = acc;
}

double stk__jpredict_step(struct stk__jrun *rn, struct stk__jstate *j, int n) {
  if (!j->opt_pred) {
    j->opt_pred = calloc((size_t)rn->gpus + 1, sizeof(double));
    if (!j->opt_pred) return INFINITY;
  }
  if (n > rn->gpus) return INFINITY;
  if (j->opt_pred[n] > 0) return j->opt_pred[n];
  const struct stk__japp *a = j->spec->app;
  int per[STK__JOBS_MAX_NODES], m = 0, left = n;
  while (left > 0 && m < STK__JOBS_MAX_NODES) {
    per[m] = STK__MIN(left, 4);
    left -= per[m++];
  }
  const double eps = 1e-8;
  int local = (int)ceil((double)j->spec->bsz / n - eps);
  int acc = (int)ceil((double)local / a->max_local - eps) - 1;
  if (n == 1 && acc < 1) acc = 1;
  int at = (int)ceil((double)local / (acc + 1) - eps);
  int count = n * (acc + 1);
  if (at > (int)((double)a->max_bsz / count)) at = (int)((double)a->max_bsz / count);
  double step, sync;
  stk__japp_throughput(a, per, m, at, &step, &sync);
  j->opt_pred[n] = step + (step - sync) * acc;
  return j->opt_pred[n];
}

/* The batch for the job's placement: its fixed target; before Pollux's
 * model is fitted, the initial batch or one that fills every replica;
 * after, the batch of best predicted goodput. */
static void update_bsz(struct stk__jrun *rn, struct stk__jstate *j) {
  const struct stk__japp *a = stk__japp_of(j);
  if (!a || !j->nplace) return;
  int reps = 0;
  for (int i = 0; i < j->nplace; i++) reps += j->place[i];
  if (j->target_bsz) {
    stk__jlocal_bsz(a, j->target_bsz, reps, &j->atomic, &j->accum);
  } else if (!j->have_perf) {
    int b = STK__MAX(a->init_bsz, a->min_local * reps);
    stk__jlocal_bsz(a, b, reps, &j->atomic, &j->accum);
  } else {
    stk__goodput_opt_c(&rn->gpcache, &j->perf, j->sqr, j->var, a->init_bsz, j->nplace, reps,
                       a->max_bsz, a->min_local, a->max_local, &j->atomic, &j->accum);
    int count = reps * (j->accum + 1);
    int cap = (int)((double)a->max_bsz / count);
    if (j->atomic > cap) j->atomic = cap;
  }
  (void)rn;
}

/* Record a measured configuration for Pollux's model and refit: one
 * model over every type, or with fit_by_type one per type (Sia). */
static void observe(struct stk__jrun *rn, struct stk__jstate *j, int nodes, int reps, int atomic,
                    double step, double sync) {
  int ty = rn->fit_by_type ? j->type : 0;
  for (int i = 0; i < j->nprof; i++)
    if (j->prof_nodes[i] == nodes && j->prof_rep[i] == reps && j->prof_bsz[i] == atomic &&
        j->prof_type[i] == ty)
      return;
  if (j->nprof == j->capprof) {
    int cap = j->capprof ? 2 * j->capprof : 16;
    int *a = realloc(j->prof_nodes, sizeof(int) * (size_t)cap);
    if (a) j->prof_nodes = a;
    int *b = realloc(j->prof_rep, sizeof(int) * (size_t)cap);
    if (b) j->prof_rep = b;
    int *c = realloc(j->prof_bsz, sizeof(int) * (size_t)cap);
    if (c) j->prof_bsz = c;
    double *d = realloc(j->prof_step, sizeof(double) * (size_t)cap);
    if (d) j->prof_step = d;
    double *e = realloc(j->prof_sync, sizeof(double) * (size_t)cap);
    if (e) j->prof_sync = e;
    int *f = realloc(j->prof_type, sizeof(int) * (size_t)cap);
    if (f) j->prof_type = f;
    if (!a || !b || !c || !d || !e || !f) return;
    j->capprof = cap;
  }
  j->prof_nodes[j->nprof] = nodes;
  j->prof_rep[j->nprof] = reps;
  j->prof_bsz[j->nprof] = atomic;
  j->prof_step[j->nprof] = step;
  j->prof_sync[j->nprof] = step - sync; /* accumulation (compute) time */
  j->prof_type[j->nprof] = ty;
  j->nprof++;
  if (!rn->fit_by_type) {
    if (reps > j->max_prof_rep) j->max_prof_rep = reps;
    stk__perf_fit_memo(&rn->fitmemo, &j->perf, j->nprof, j->prof_nodes, j->prof_rep,
                       j->prof_bsz, j->prof_sync, j->prof_step);
    j->have_perf = 1;
    return;
  }
  /* this type's rows first, then fit them alone */
  int m = 0;
  for (int i = 0; i < j->nprof; i++)
    if (j->prof_type[i] == ty) {
      int tn = j->prof_nodes[i], tr = j->prof_rep[i], tb = j->prof_bsz[i], tt = j->prof_type[i];
      double ts = j->prof_step[i], tc = j->prof_sync[i];
      j->prof_nodes[i] = j->prof_nodes[m], j->prof_rep[i] = j->prof_rep[m];
      j->prof_bsz[i] = j->prof_bsz[m], j->prof_type[i] = j->prof_type[m];
      j->prof_step[i] = j->prof_step[m], j->prof_sync[i] = j->prof_sync[m];
      j->prof_nodes[m] = tn, j->prof_rep[m] = tr, j->prof_bsz[m] = tb, j->prof_type[m] = tt;
      j->prof_step[m] = ts, j->prof_sync[m] = tc;
      m++;
    }
  if (reps > j->maxrep_t[ty]) j->maxrep_t[ty] = reps;
  stk__perf_fit_memo(&rn->fitmemo, &j->perf_t[ty], m, j->prof_nodes, j->prof_rep, j->prof_bsz,
                     j->prof_sync, j->prof_step);
  j->have_t[ty] = 1;
  j->perf = j->perf_t[ty];
  j->have_perf = 1;
  j->max_prof_rep = j->maxrep_t[ty];
}

/* Epochs at the goodput of the job's placement and batch; with rn->fit
 * each configuration run is observed for Pollux's model. */
static void m_step(struct stk__jrun *rn, struct stk__jstate *j, double seconds, double el) {
  double gpus = j->held;
  const struct stk__japp *a = stk__japp_of(j);
  while (seconds > 0 && !j->done) {
    int reps = 0;
    for (int i = 0; i < j->nplace; i++) reps += j->place[i];
    int batch = reps * j->atomic * (j->accum + 1);
    double scale = (double)batch / a->init_bsz;
    if (!j->c_valid || j->c_atomic != j->atomic) {
      stk__japp_throughput(a, j->place, j->nplace, j->atomic, &j->c_step, &j->c_sync);
      j->c_atomic = j->atomic;
      j->c_valid = 1;
    }
    double step = j->c_step, sync = j->c_sync, accum_t = step - sync;
    double sqr, var;
    stk__japp_grad(a, batch, j->epoch, &sqr, &var);
    double gain = (var + sqr) / (var / scale + sqr);
    if (rn->fit) {
      j->sqr = sqr;
      j->var = var;
      observe(rn, j, j->nplace, reps, j->atomic, step, sync);
    }
    double total = step + accum_t * j->accum;
    double goodput = gain / total * (rn->ntypes ? j->calib : 1);
    double next = a->progress_at[j->epoch + 1];
    if (j->progress + goodput * seconds < next) {
      j->progress += goodput * seconds;
      el += seconds;
      j->attained += seconds * gpus;
      seconds = 0;
    } else {
      j->epoch++;
      double delta = nearbyint((next - j->progress) / goodput);
      if (delta > seconds) delta = seconds;
      if (j->epoch > a->max_epochs - 1) {
        j->done = 1;
        j->done_at = rn->now + el + delta;
      }
      j->progress = next;
      el += delta;
      j->attained += delta * gpus;
      seconds -= delta;
    }
    update_bsz(rn, j);
  }
}

/* Whole-job seconds at the requested size: remaining iterations times the
 * step time at the requested replicas. */
static double m_remaining(struct stk__jrun *rn, struct stk__jstate *j) {
  const struct stk__japp *a = j->spec->app;
  int e = j->epoch;
  double it = stk__japp_iteration(a, j->spec->bsz, a->max_epochs - 1) -
              (e ? stk__japp_iteration(a, j->spec->bsz, e) : 0);
  if (it < 1) it = 1;
  return it * stk__jpredict_step(rn, j, STK__MIN(j->spec->replicas, rn->gpus));
}

static int asks(const struct stk__jspec *s) { return s->replicas; }

const struct stk__jwork_ops stk__jwork_measured = {
    .name = "measured",
    .asks = asks,
    .placed = update_bsz,
    .step = m_step,
    .remaining = m_remaining,
};

/* ---- duration jobs ------------------------------------------------------ */

/* One second of work per second at its GPUs; progress counts the seconds
 * worked, and the job ends on the whole second its work runs out. */
static void d_step(struct stk__jrun *rn, struct stk__jstate *j, double seconds, double el) {
  double gpus = j->held;
  double left = j->spec->duration - j->progress;
  if (seconds >= left - 1e-9) {
    double d = ceil(left - 1e-9);
    if (d < 0) d = 0;
    j->done = 1;
    j->done_at = rn->now + el + d;
    j->attained += d * gpus;
    j->progress = j->spec->duration;
  } else if (seconds > 0) {
    j->progress += seconds;
    j->attained += seconds * gpus;
  }
}

static double d_remaining(struct stk__jrun *rn, struct stk__jstate *j) {
  (void)rn;
  return j->spec->duration - j->progress;
}

const struct stk__jwork_ops stk__jwork_duration = {
    .name = "duration",
    .asks = asks,
    .step = d_step,
    .remaining = d_remaining,
};

double stk__jremaining(struct stk__jrun *rn, struct stk__jstate *j) {
  return stk__jwork_of(j->spec)->remaining(rn, j);
}

/* ---- the jobs as pods ---------------------------------------------------- */

int stk__sim_res_pods(struct stk__sim_res **out, int nodes, int gpn, const struct stk_sim_jobs *J,
                      const char *policy, uint64_t seed, char *errmsg) {
  int *want = malloc(sizeof(int) * (J->n ? J->n : 1));
  if (!want) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  for (size_t i = 0; i < J->n; i++) want[i] = stk__jwork_of(&J->job[i])->asks(&J->job[i]);
  int rc = stk__sim_res_pods_of(out, nodes, gpn, want, J->n, J->path, policy, seed, errmsg);
  free(want);
  return rc;
}
