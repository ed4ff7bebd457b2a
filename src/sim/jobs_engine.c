/* The job-level engine: every scheduling interval each allocated job
 * advances (paying first what is left of its restart delay), as its
 * workload model says (jobs_work.c: seconds of a duration, or epochs at a
 * measured application's true goodput), then the policy is asked for the
 * allocation of every arrived, unfinished job, on the run's resource model
 * (resource.h), which holds what stands; a job whose allocation changed
 * pays the restart delay again. Time advances in whole intervals as in the Pollux
 * artifact, and completions fall on whole seconds inside an interval, so
 * JCTs are the artifact's to the second. Energy, cost and carbon are
 * integrated per interval from the allocated GPUs. The run is a client of
 * the event engine (engine.h): one round per interval, on a clock that
 * counts rounds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "jobs_impl.h"

static const struct stk__jpolicy *const policies[] = {
    &stk__jpol_fifo,    &stk__jpol_sjf,   &stk__jpol_tiresias, &stk__jpol_optimus,
    &stk__jpol_pollux,  &stk__jpol_multi, &stk__jpol_carbon,   &stk__jpol_gavel,
    &stk__jpol_sia,     &stk__jpol_sia_glpk, NULL,
};

size_t stk_sim_job_policy_count(void) { return STK__ARRAY_LEN(policies) - 1; }
const char *stk_sim_job_policy_name(size_t i) {
  return i < stk_sim_job_policy_count() ? policies[i]->name : NULL;
}
const char *stk_sim_job_policy_summary(size_t i) {
  return i < stk_sim_job_policy_count() ? policies[i]->summary : NULL;
}
int stk_sim_job_policy_find(const char *name) {
  for (size_t i = 0; policies[i]; i++)
    if (!strcasecmp(policies[i]->name, name)) return (int)i;
  return STK_EINVAL;
}
const struct stk__jpolicy *stk__jpolicy_get(const char *name) {
  int i = stk_sim_job_policy_find(name);
  return i < 0 ? NULL : policies[i];
}

/* ---- one job ---------------------------------------------------------- */

/* An allocated job works an interval: first what is left of its restart
 * delay (its GPUs held, no progress), then its workload model's work. */
static void job_step(struct stk__jrun *rn, struct stk__jstate *j, double seconds) {
  if (!j->nplace || j->done) return;
  double delay = fmin(j->rescale, seconds);
  j->attained += delay * j->held;
  j->rescale -= delay;
  stk__jwork_of(j->spec)->step(rn, j, seconds - delay, delay);
}

static void reallocate(struct stk__jrun *rn, struct stk__jstate *j, const uint8_t *alloc, int n) {
  /* The Sia artifact restarts a job only when its type or the shape of its
   * placement (GPUs per node, in order) changes: a move to other nodes of
   * the same type in the same shape is free there, and so here. */
  if (rn->ntypes && n && j->nalloc && rn->vtype[alloc[0]] == j->type) {
    int place[STK__JOBS_MAX_NODES];
    int m = stk__jhet_place(rn, alloc, n, place);
    if (m == j->nplace && !memcmp(place, j->place, sizeof(int) * (size_t)m)) {
      memcpy(j->alloc, alloc, (size_t)n);
      return;
    }
  }
  memcpy(j->alloc, alloc, (size_t)n);
  j->nalloc = n;
  j->held = n ? (double)stk__sim_res_units(rn->res, n) / rn->res->unit : 0;
  j->nplace = 0;
  if (rn->ntypes && n) {
    j->type = rn->vtype[alloc[0]];
    j->tapp = j->by_type[j->type];
    if (rn->fit_by_type) { /* the batch is chosen with this type's model */
      j->have_perf = j->have_t[j->type];
      if (j->have_perf) j->perf = j->perf_t[j->type];
    }
    j->nplace = stk__jhet_place(rn, alloc, n, j->place);
  }
  for (int i = 0; i < n && !rn->ntypes; i++) {
    if (i == 0 || alloc[i] != alloc[i - 1]) {
      if (j->nplace == STK__JOBS_MAX_NODES) break;
      j->place[j->nplace++] = 1;
    } else {
      j->place[j->nplace - 1]++;
    }
  }
  j->c_valid = 0;
  if (n) {
    const struct stk__jwork_ops *w = stk__jwork_of(j->spec);
    if (w->placed) w->placed(rn, j);
    j->rescale = rn->ntypes ? j->rescale_s : rn->o->restart_delay;
    j->restarts++;
    if (j->start_at < 0) j->start_at = rn->now;
  } else {
    j->atomic = 0;
  }
}

/* Inference beside training: this round's GPUs (the series' value, under
 * the power cap's), and running jobs stopped, the latest started first,
 * until the rest fit. */
static int lend_round(struct stk__jrun *rn, const size_t *active, size_t na) {
  const struct stk_sim_jobs_opts *o = rn->o;
  size_t k = (size_t)(rn->now / o->interval + 1e-9); /* now is a sum of intervals */
  if (k >= o->nusable) k = o->nusable - 1;
  int cap = (int)STK__MIN(o->usable_series[k], (uint32_t)rn->gpus);
  rn->usable = STK__MIN(rn->usable_base, cap);
  for (;;) {
    int used = 0;
    struct stk__jstate *last = NULL;
    for (size_t q = 0; q < na; q++) {
      struct stk__jstate *j = &rn->js[active[q]];
      used += j->nalloc;
      if (j->nalloc && (!last || j->start_at >= last->start_at)) last = j;
    }
    if (used <= rn->usable || !last) return 0;
    reallocate(rn, last, last->alloc, 0);
    rn->lend_stops++;
  }
}

/* A policy's plan over this round's GPUs loses its latest started jobs. */
static void lend_trim(struct stk__jrun *rn, const size_t *active, size_t na) {
  for (;;) {
    int used = 0;
    size_t last = (size_t)-1;
    for (size_t q = 0; q < na; q++) {
      size_t i = active[q];
      used += rn->new_n[i];
      if (rn->new_n[i] && (last == (size_t)-1 || rn->js[i].start_at >= rn->js[last].start_at))
        last = i;
    }
    if (used <= rn->usable || last == (size_t)-1) return;
    rn->new_n[last] = 0;
  }
}

/* ---- the run ---------------------------------------------------------- */

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double quantile(double *v, size_t n, double q) {
  if (!n) return NAN;
  double pos = q * (double)(n - 1);
  size_t i = (size_t)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

double stk__jcarbon_at(const struct stk_sim_jobs_opts *o, double t) {
  if (o->ncarbon && o->carbon_series) {
    double step = o->carbon_step_s > 0 ? o->carbon_step_s : 3600;
    size_t i = (size_t)(t / step) % o->ncarbon;
    return o->carbon_series[i];
  }
  return o->carbon_g_kwh;
}

/* ---- the rounds ------------------------------------------------------- */

struct jloop {
  struct stk__sim_engine e;
  struct stk__jrun *rn;
  const struct stk_sim_jobs_opts *o;
  const struct stk__jpolicy *pol;
  struct stk_sim_jobs_result *res;
  size_t *active, na, next; /* active jobs; the next to arrive */
  size_t ndone, nlive, cap_samples;
  double util_sum, last_done, energy_j, carbon_g;
  uint64_t rounds;
  char *errmsg;
};

/* Stop when every job that can run is done, or at the horizon. */
static int jloop_done(void *ctx) {
  struct jloop *L = ctx;
  return L->ndone >= L->nlive || L->rn->now >= L->o->horizon;
}

/* A failed round: the policy, the time, and the model's reason. */
static int round_error(struct jloop *L, int rc) {
  struct stk__sim_res *r = L->rn->res;
  return stk__errf(L->errmsg, rc, "policy %s, round at %.0f s: %s", L->pol->name, L->rn->now,
                   r && r->why[0] ? r->why : stk_strerror(rc));
}

/* One round: jobs advance an interval, then the policy allocates. */
static int jloop_round(void *ctx, uint64_t round, int64_t at) {
  struct jloop *L = ctx;
  struct stk__jrun *rn = L->rn;
  const struct stk_sim_jobs_opts *o = L->o;
  char *errmsg = L->errmsg;
  const struct stk__jpolicy *pol = L->pol;
  struct stk_sim_jobs_result *res = L->res;
  int rc = 0;
  (void)round, (void)at; /* the clock counts rounds; rn->now is the time */
  if (o->cancel && __atomic_load_n(o->cancel, __ATOMIC_RELAXED)) {
    rc = stk__errf(errmsg, STK_ECANCELED, "canceled at %.0f s simulated", rn->now);
    return rc;
  }
  double busy_s = 0; /* GPU-seconds worked in this interval */
  for (size_t k = 0; k < L->na; k++) {
    struct stk__jstate *j = &rn->js[L->active[k]];
    if (!j->nplace) continue;
    double before = j->attained;
    job_step(rn, j, o->interval);
    busy_s += j->attained - before;
    if (j->done) {
      L->ndone++;
      if (j->done_at > L->last_done) L->last_done = j->done_at;
    }
  }
  /* energy of the interval just run */
  double ej = busy_s * o->busy_w + (rn->gpus * o->interval - busy_s) * o->idle_w;
  L->energy_j += ej;
  L->carbon_g += ej / 3.6e6 * stk__jcarbon_at(o, rn->now);
  rn->now += o->interval;
  L->rounds++;
  /* the active jobs: those still running or waiting, then arrivals,
   * in job order */
  size_t m = 0;
  for (size_t k = 0; k < L->na; k++) {
    struct stk__jstate *j = &rn->js[L->active[k]];
    if (j->done) {
      free(j->alloc);
      j->alloc = NULL;
      rn->new_alloc[L->active[k]] = NULL;
    } else {
      L->active[m++] = L->active[k];
    }
  }
  L->na = m;
  while (L->next < rn->n && rn->js[L->next].spec->submit <= rn->now) {
    struct stk__jstate *j = &rn->js[L->next];
    if (!j->too_large) {
      j->alloc = malloc((size_t)rn->gpus * 2);
      if (!j->alloc) {
        rc = STK_ENOMEM;
        return rc;
      }
      rn->new_alloc[L->next] = j->alloc + rn->gpus;
      L->active[L->na++] = L->next;
    }
    L->next++;
  }
  if (o->usable_series && (rc = lend_round(rn, L->active, L->na))) return rc;
  if (L->na) {
    for (size_t k = 0; k < L->na; k++) {
      struct stk__jstate *j = &rn->js[L->active[k]];
      rn->new_n[L->active[k]] = j->nalloc;
      memcpy(rn->new_alloc[L->active[k]], j->alloc, (size_t)j->nalloc);
    }
    /* a policy that replans every GPU reads them all free from the model
     * and hands back what it chose, which the model checks and holds; the
     * queueing policies hold and place through the model themselves */
    if (!pol->queue) rc = stk__sim_res_release_all(rn->res);
    if (!rc) rc = pol->schedule(rn, L->active, L->na);
    if (rc) /* policies word no errors: say it here */
      return round_error(L, rc);
    if (o->usable_series) lend_trim(rn, L->active, L->na);
    for (size_t k = 0; k < L->na; k++) {
      size_t i = L->active[k];
      rn->new_n[i] = stk__jhet_repair(rn, rn->new_alloc[i], rn->new_n[i]);
    }
    if (!pol->queue &&
        (rc = rn->res->ops->hold(rn->res, rn->new_alloc, rn->new_n, L->active, L->na)))
      return round_error(L, rc);
    for (size_t k = 0; k < L->na; k++) {
      size_t i = L->active[k];
      struct stk__jstate *j = &rn->js[i];
      if (rn->new_n[i] != j->nalloc || memcmp(rn->new_alloc[i], j->alloc, (size_t)j->nalloc))
        reallocate(rn, j, rn->new_alloc[i], rn->new_n[i]);
    }
  }
  int running = 0, queued = 0;
  double alloc = 0; /* GPUs' worth held */
  for (size_t k = 0; k < L->na; k++) {
    struct stk__jstate *j = &rn->js[L->active[k]];
    if (j->nalloc) {
      alloc += j->held;
      running++;
    } else {
      queued++;
    }
  }
  if (L->ndone < L->nlive) L->util_sum += alloc / rn->gpus;
  if (o->keep_samples) {
    if (res->nsamples == L->cap_samples) {
      L->cap_samples = L->cap_samples ? 2 * L->cap_samples : 1024;
      struct stk_sim_jobs_sample *ns = realloc(res->samples, sizeof *ns * L->cap_samples);
      if (!ns) {
        rc = STK_ENOMEM;
        return rc;
      }
      res->samples = ns;
    }
    struct stk_sim_jobs_sample *s = &res->samples[res->nsamples++];
    s->time = rn->now;
    s->gpus_alloc = (uint32_t)lround(alloc);
    s->running = (uint32_t)running;
    s->queued = (uint32_t)queued;
    s->power_w = alloc * o->busy_w + (rn->gpus - alloc) * o->idle_w;
  }
  if (o->progress && L->rounds % 2000 == 0) o->progress(o->ctx, rn->now, L->ndone, L->nlive);
  return 0;
}

int stk_sim_jobs_run(const struct stk_sim_jobs *jobs, const struct stk_sim_jobs_opts *opts,
                     struct stk_sim_jobs_result *res, char *errmsg) {
  memset(res, 0, sizeof *res);
  struct stk_sim_jobs_opts o;
  int trc = stk__opts_take(&o, sizeof o, opts, "stk_sim_jobs_opts", errmsg);
  if (trc) return trc;
  if (!o.policy) o.policy = "tiresias";
  if (!o.nodes) o.nodes = 16;
  if (!o.gpus_per_node) o.gpus_per_node = 4;
  if (o.interval <= 0) o.interval = 60;
  if (o.restart_delay == 0) o.restart_delay = 30;
  if (o.restart_delay < 0) o.restart_delay = 0;
  if (o.horizon <= 0) o.horizon = 1e8;
  if (!o.ntypes && (o.nodes > STK__JOBS_MAX_NODES || o.gpus_per_node > STK__JOBS_MAX_GPN))
    return stk__errf(errmsg, STK_EINVAL, "cluster of %u nodes x %u GPUs: at most %d x %d",
                     o.nodes, o.gpus_per_node, STK__JOBS_MAX_NODES, STK__JOBS_MAX_GPN);
  /* jobs are sorted by arrival: a run in which none arrives would report
   * nothing but NaN (a trace of Unix times in seconds, say) */
  if (jobs->n && jobs->job[0].submit >= o.horizon)
    return stk__errf(errmsg, STK_EINVAL,
                     "%s: the first job arrives at %.0f s, after the horizon (%.0f s); times in "
                     "seconds are taken as they are (only dated times start at 0)",
                     jobs->path, jobs->job[0].submit, o.horizon);
  const struct stk__jpolicy *pol = stk__jpolicy_get(o.policy);
  if (!pol)
    return stk__errf(errmsg, STK_EINVAL, "no job policy '%s'; `stoker sim --list-policies` names them",
                     o.policy);
  if (pol->hetero && !o.ntypes)
    return stk__errf(errmsg, STK_EINVAL,
                     "policy %s schedules GPU types; give a heterogeneous cluster "
                     "(--gpu-types, e.g. sia)",
                     pol->name);
  if (o.placer && o.ntypes) {
    return stk__errf(errmsg, STK_EINVAL,
                   "--placer %s: placement policies are not modelled on a cluster of GPU types",
                   o.placer);
  }
  if (o.placer && !pol->queue) {
    return stk__errf(errmsg, STK_EINVAL,
                   "--placer %s: policy %s places its own jobs (the resource model checks and "
                   "holds what it chooses); a placer serves fifo, sjf, tiresias, multi and carbon",
                   o.placer, pol->name);
  }
  for (size_t i = 0; i < jobs->n; i++)
    if (!jobs->job[i].app && pol->elastic)
      return stk__errf(errmsg, STK_EINVAL,
                       "policy %s sizes jobs by their measured throughput; %s has jobs without "
                       "an application (use fifo, sjf, tiresias, multi or carbon)",
                       pol->name, jobs->path);
  struct timespec w0;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  struct stk__jrun rn;
  memset(&rn, 0, sizeof rn);
  rn.jobs = jobs;
  rn.o = &o;
  rn.n = jobs->n;
  rn.nodes = (int)o.nodes;
  rn.gpn = (int)o.gpus_per_node;
  rn.gpus = rn.nodes * rn.gpn;
  rn.usable = rn.gpus;
  if (o.power_cap_w > 0) {
    double extra = o.busy_w > o.idle_w
                       ? (o.power_cap_w - rn.gpus * o.idle_w) / (o.busy_w - o.idle_w)
                       : o.power_cap_w >= rn.gpus * o.idle_w ? rn.gpus : -1;
    rn.usable = extra < 0 ? 0 : extra < rn.gpus ? (int)extra : rn.gpus;
    /* every job would wait for ever: say why instead of a run of NaN */
    if (rn.usable == 0)
      return stk__errf(errmsg, STK_EINVAL,
                       "a power cap of %g W leaves no GPU able to work: %d idle GPUs draw %g W "
                       "and a busy one %g W more",
                       o.power_cap_w, rn.gpus, rn.gpus * o.idle_w, o.busy_w - o.idle_w);
  }
  rn.fit = pol == &stk__jpol_pollux || pol == &stk__jpol_sia || pol == &stk__jpol_sia_glpk;
  rn.fit_by_type = pol == &stk__jpol_sia || pol == &stk__jpol_sia_glpk;
  rn.js = calloc(rn.n, sizeof *rn.js);
  rn.new_n = calloc(rn.n, sizeof(int));
  rn.new_alloc = calloc(rn.n, sizeof(uint8_t *));
  size_t *active = malloc(sizeof(size_t) * (rn.n + 1));
  double *jct = malloc(sizeof(double) * (rn.n + 1));
  double *qd = malloc(sizeof(double) * (rn.n + 1));
  int rc = 0;
  if (!rn.js || !rn.new_n || !rn.new_alloc || !active || !jct || !qd) {
    rc = STK_ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < rn.n; i++) rn.js[i].spec = &jobs->job[i];
  if (o.usable_series && !o.nusable) {
    rc = stk__errf(errmsg, STK_EINVAL, "GPUs lent round by round: the series is empty");
    goto out;
  }
  if (o.ntypes) {
    if (o.power_cap_w > 0) {
      rc = stk__errf(errmsg, STK_EINVAL, "a power cap is not modelled on a heterogeneous cluster");
      goto out;
    }
    if (o.usable_series) {
      rc = stk__errf(errmsg, STK_EINVAL, "GPUs lent round by round are not modelled on a heterogeneous cluster");
      goto out;
    }
    if ((rc = stk__jhet_init(&rn, errmsg))) goto out;
    rn.usable = rn.gpus;
  }
  int mig = o.placer && stk__sim_res_is_mig(o.placer);
  if (mig && o.usable_series) {
    rc = stk__errf(errmsg, STK_EINVAL,
                   "--placer %s: GPUs lent round by round are not modelled on MIG instances",
                   o.placer);
    goto out;
  }
  rc = mig        ? stk__sim_res_mig(&rn.res, rn.nodes, rn.gpn, jobs, o.placer, errmsg)
       : o.placer  ? stk__sim_res_pods(&rn.res, rn.nodes, rn.gpn, jobs, o.placer, 1, errmsg)
       : rn.ntypes ? stk__sim_res_hetero(&rn.res, rn.nodes, rn.gpn, rn.vtype, rn.vphys, errmsg)
                   : stk__sim_res_whole(&rn.res, rn.nodes, rn.gpn, errmsg);
  if (rc) goto out;
  /* The widest job a fixed-size policy can start: Gavel places a job on
   * one GPU type, so on a heterogeneous cluster no wider than its largest
   * type (a wider one would wait to the horizon, round after round). */
  int64_t widest = (int64_t)rn.usable;
  if (pol->hetero && !pol->elastic && rn.ntypes) {
    int64_t most = 0;
    for (int t = 0; t < rn.ntypes; t++)
      most = STK__MAX(most, (int64_t)rn.types[t].nodes * (int64_t)rn.types[t].gpus_per_node);
    widest = STK__MIN(widest, most);
  }
  for (size_t i = 0; i < rn.n; i++) {
    struct stk__jstate *j = &rn.js[i];
    j->restarts = -1;
    j->start_at = -1;
    j->done_at = -1;
    if (j->spec->app) {
      j->target_bsz = j->spec->bsz;
      if (rn.fit) j->target_bsz = !strcmp(j->spec->app->name, "ncf") ? 32768 : 0;
    }
    if (!pol->elastic && (int64_t)j->spec->replicas > widest) {
      j->too_large = 1;
      res->too_large++;
    }
  }
  if (pol == &stk__jpol_sia && (rc = stk__sia_exact_fits(&rn, errmsg))) goto out;
  if (pol->init && (rc = pol->init(&rn))) goto out;
  struct jloop L;
  memset(&L, 0, sizeof L);
  L.rn = &rn, L.o = &o, L.pol = pol, L.res = res, L.active = active, L.errmsg = errmsg;
  L.nlive = rn.n - res->too_large;
  rn.usable_base = rn.usable;
  rn.now = 0;
  if (!jloop_done(&L)) {
    stk__sim_engine_init(&L.e, 0);
    static const struct stk__sim_hooks hooks = {.round = jloop_round, .done = jloop_done};
    rc = stk__sim_engine_rounds(&L.e, 0, 1);
    if (!rc) rc = stk__sim_engine_run(&L.e, &hooks, &L);
    stk__sim_engine_free(&L.e);
    if (rc) goto out;
  }
  double util_sum = L.util_sum, last_done = L.last_done;
  uint64_t rounds = L.rounds;
  double energy_j = L.energy_j, carbon_g = L.carbon_g;
  /* results */
  snprintf(res->policy, sizeof res->policy, "%s", pol->name);
  res->jobs = rn.n;
  res->rounds = rounds;
  res->rec = calloc(rn.n, sizeof *res->rec);
  if (!res->rec) {
    rc = STK_ENOMEM;
    goto out;
  }
  res->nrec = rn.n;
  size_t nj = 0, nq = 0;
  double jsum = 0, qsum = 0, bsum = 0;
  for (size_t i = 0; i < rn.n; i++) {
    struct stk__jstate *j = &rn.js[i];
    struct stk_sim_job_record *r = &res->rec[i];
    r->name = j->spec->name;
    r->app = j->spec->app ? j->spec->app->name : "";
    r->submit = j->spec->submit;
    r->start = j->start_at;
    r->finish = j->done ? j->done_at : -1;
    r->done = j->done;
    r->restarts = j->restarts < 0 ? 0 : j->restarts;
    r->gpu_s = j->attained;
    r->energy_kwh = j->attained * o.busy_w / 3.6e6;
    r->jct = j->done ? j->done_at - j->spec->submit : -1;
    double first = j->start_at >= 0 ? j->start_at : (j->too_large ? -1 : rn.now);
    r->queue_s = first >= 0 ? first - j->spec->submit : -1;
    if (r->queue_s > 86400) res->starved++;
    res->restarts += (uint64_t)r->restarts;
    if (j->done) {
      jct[nj++] = r->jct;
      jsum += r->jct;
      bsum += r->jct;
      res->completed++;
    } else if (!j->too_large) {
      res->unfinished++;
      if (rn.now > j->spec->submit) bsum += rn.now - j->spec->submit;
    }
    if (r->queue_s >= 0) {
      qd[nq++] = r->queue_s;
      qsum += r->queue_s;
    }
  }
  qsort(jct, nj, sizeof *jct, cmp_double);
  qsort(qd, nq, sizeof *qd, cmp_double);
  res->jct_mean = nj ? jsum / nj : NAN;
  res->jct_mean_bound = res->too_large || !rn.n ? NAN : bsum / (double)rn.n;
  res->jct_p50 = quantile(jct, nj, 0.5);
  res->jct_p99 = quantile(jct, nj, 0.99);
  res->jct_max = nj ? jct[nj - 1] : NAN;
  res->queue_mean = nq ? qsum / nq : NAN;
  res->queue_p50 = quantile(qd, nq, 0.5);
  res->queue_p99 = quantile(qd, nq, 0.99);
  res->makespan = last_done;
  res->util_mean = rounds ? util_sum / (double)rounds : 0;
  res->energy_kwh = energy_j / 3.6e6;
  res->cost = res->energy_kwh * o.price_kwh;
  res->carbon_kg = carbon_g / 1000;
out:
  if (pol->fini) pol->fini(&rn);
  stk__sim_res_free(rn.res);
  struct timespec w1;
  clock_gettime(CLOCK_MONOTONIC, &w1);
  res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
  if (rn.js)
    for (size_t i = 0; i < rn.n; i++) {
      struct stk__jstate *j = &rn.js[i];
      free(j->prof_nodes);
      free(j->prof_rep);
      free(j->prof_bsz);
      free(j->prof_step);
      free(j->prof_sync);
      free(j->prof_type);
      free(j->opt_pred);
      free(j->pol);
      free(j->alloc);
    }
  free(rn.js);
  stk__fitmemo_free(rn.fitmemo);
  stk__gpcache_free(rn.gpcache);
  free(rn.new_n);
  free(rn.new_alloc);
  free(active);
  free(jct);
  free(qd);
  if (rc) stk_sim_jobs_result_free(res);
  return rc;
}

void stk_sim_jobs_result_free(struct stk_sim_jobs_result *r) {
  if (!r) return;
  free(r->rec);
  free(r->samples);
  r->rec = NULL;
  r->samples = NULL;
  r->nrec = r->nsamples = 0;
}
