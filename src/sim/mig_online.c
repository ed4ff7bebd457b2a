/* Online MIG scheduling: requests for MIG instances replayed over time on
 * a cluster of MIG GPUs under FIFO (first fit, instances never removed),
 * MIG-aware placement with reconfiguration, or a multi-objective policy
 * (include/stoker/mig_online.h; docs/sim.md). A client of the event engine
 * (engine.h) on a millisecond clock: departures before arrivals at one
 * instant; after each instant the policy starts what it can. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "mig_gpus.h"
#include "stoker/mig_online.h"

#define EV_DEPART 0
#define EV_ARRIVE 1

struct run {
  const struct stk_mig_trace *t;
  const struct stk_mig_online_opts *o;
  const struct stk_mig_geometry *g;
  struct stk__mig_gpus m; /* the GPUs, their instances, the placement rule */
  size_t *q, qn;   /* waiting requests, arrival order (q moves up as the head leaves) */
  size_t *qbase;   /* room for every request: each enters once */
  uint32_t *pool;  /* GPUs of the started requests' instances */
  size_t pooln, poolcap, *off;
  double delay, now, held, demand, acc_arr, dem_arr, acc_all, dem_all, wait_sum;
  double acc_back, time_back; /* while some request waits */
  int blocked; /* arrival order: the head did not fit, and nothing has left since */
  struct stk_mig_online_result *r;
  struct stk__sim_engine e;
  char *errmsg;
};

/* Could request q ever be placed? Under FIFO instances are never removed,
 * so only GPUs with an instance of the profile or free room for it can. */
static int ever_fits(struct run *rn, const struct stk_mig_req *q) {
  if (q->count > rn->o->gpus) return 0;
  if (rn->o->policy != STK_MIG_FIFO) return 1;
  const struct stk_mig_profile *p = &rn->g->profiles[q->profile];
  unsigned hosts = 0;
  for (uint32_t gi = 0; gi < rn->o->gpus && hosts < q->count; gi++) {
    const struct stk__mig_gpu *G = &rn->m.gpu[gi];
    int can = 0;
    for (unsigned i = 0; i < G->n && !can; i++) can = G->in[i].profile == q->profile;
    for (unsigned k = 0; k < p->nstarts && !can; k++)
      can = !(stk__mig_slices(p, p->starts[k]) & G->all) &&
            G->ac + p->compute <= STK_MIG_COMPUTE_SLICES &&
            G->n < STK_MIG_MAX_INSTANCES;
    hosts += (unsigned)can;
  }
  return hosts >= q->count;
}

/* MULTI weighs many waiting requests per pass on an unchanged cluster:
 * each profile's places on all GPUs are found once a pass and sorted best
 * first; a request of k instances takes the first k (the same k
 * stk__mig_choose() picks: the k least under stk__mig_better()'s order). */
struct plist {
  int valid;
  size_t n;
  struct stk__mig_cand *c;
};

static int cmp_cand(const void *x, const void *y, void *ctx) {
  const struct stk__mig_gpus *m = ctx;
  return stk__mig_better(m, x, y) ? -1 : stk__mig_better(m, y, x) ? 1 : 0;
}

static int places(struct run *rn, unsigned pi, struct plist *L) {
  if (L->valid) return 0;
  if (!L->c && !(L->c = malloc(sizeof *L->c * rn->o->gpus))) return STK_ENOMEM;
  L->n = 0;
  for (uint32_t gi = 0; gi < rn->o->gpus; gi++) {
    struct stk__mig_cand c = stk__mig_best_on(&rn->m, gi, pi);
    if (c.ok) L->c[L->n++] = c;
  }
  qsort_r(L->c, L->n, sizeof *L->c, cmp_cand, &rn->m);
  L->valid = 1;
  return 0;
}

/* Take place c for request req, and count what it holds. */
static int apply_one(struct run *rn, const struct stk__mig_cand *c, int32_t req, int *created,
                     char *errmsg) {
  const struct stk_mig_req *q = &rn->t->req[req];
  int rc = stk__mig_apply(&rn->m, c, q->profile, req, created, errmsg);
  if (rc) return rc;
  rn->held += rn->g->profiles[q->profile].compute;
  rn->demand += q->demand;
  return 0;
}

static int start(struct run *rn, size_t req, const struct stk__mig_cand *c,
                 char *errmsg) {
  const struct stk_mig_req *q = &rn->t->req[req];
  if (rn->pooln + q->count > rn->poolcap) {
    size_t cap = rn->poolcap ? 2 * rn->poolcap : 1024;
    while (cap < rn->pooln + q->count) cap *= 2;
    uint32_t *n = realloc(rn->pool, sizeof *n * cap);
    if (!n) return STK_ENOMEM;
    rn->pool = n;
    rn->poolcap = cap;
  }
  rn->off[req] = rn->pooln;
  int created = 0, rc;
  for (unsigned i = 0; i < q->count; i++) {
    if ((rc = apply_one(rn, &c[i], (int32_t)req, &created, errmsg))) return rc;
    rn->pool[rn->pooln++] = c[i].gpu;
  }
  double wait = rn->now - q->arrival;
  rn->wait_sum += wait;
  if (wait > rn->r->max_wait) rn->r->max_wait = wait;
  rn->r->started++;
  if (rn->o->starts) rn->o->starts[req] = (struct stk_mig_start){rn->now, (int32_t)c[0].gpu, c[0].slot};
  double end = rn->now + (created ? rn->delay : 0) + q->duration;
  return stk__sim_engine_at(&rn->e, llround(end * 1000), EV_DEPART, (uint32_t)req) ? STK_ENOMEM : 0;
}

static void depart(struct run *rn, size_t req) {
  const struct stk_mig_req *q = &rn->t->req[req];
  for (unsigned i = 0; i < q->count; i++)
    stk__mig_release(&rn->m, rn->pool[rn->off[req] + i], (int32_t)req);
  rn->held -= rn->g->profiles[q->profile].compute * (double)q->count;
  rn->demand -= q->demand * q->count;
}

static void drop(struct run *rn, size_t j) {
  if (j == 0)
    rn->q++;
  else
    memmove(&rn->q[j], &rn->q[j + 1], sizeof *rn->q * (rn->qn - j - 1));
  rn->qn--;
}

/* Start what the policy starts at rn->now: under arrival order the head
 * if it fits (one search), under MULTI the best of the window, pass after
 * pass, each profile's places searched once a pass. */
static int schedule(struct run *rn, char *errmsg) {
  int multi = rn->o->policy == STK_MIG_MULTI;
  size_t window = multi ? rn->o->window : 1;
  struct stk__mig_cand c[64], *big = NULL;
  struct plist lists[16];
  memset(lists, 0, sizeof lists);
  int rc = 0;
  while (rn->qn && !rc) {
    size_t pick = SIZE_MAX;
    double best = INFINITY;
    for (unsigned p = 0; p < 16; p++) lists[p].valid = 0;
    for (size_t j = 0; j < rn->qn && j < window && !rc; j++) {
      const struct stk_mig_req *q = &rn->t->req[rn->q[j]];
      if (!ever_fits(rn, q)) {
        rn->r->rejected++;
        drop(rn, j--);
        continue;
      }
      double cost;
      int ok;
      if (multi) {
        struct plist *L = &lists[q->profile];
        if ((rc = places(rn, q->profile, L))) break;
        ok = L->n >= q->count;
        if (ok) cost = stk__mig_cost(&rn->m, L->c, q->count);
      } else {
        if (q->count > 64 && !big && !(big = malloc(sizeof *big * rn->o->gpus))) {
          rc = STK_ENOMEM;
          break;
        }
        ok = stk__mig_choose(&rn->m, q->profile, q->count, q->count > 64 ? big : c, &cost);
      }
      if (!ok) continue;
      double score = cost - rn->o->w_wait * (rn->now - q->arrival) / 3600;
      if (!multi || score < best) {
        best = score;
        pick = j;
      }
      if (!multi) break;
    }
    if (rc) break;
    if (pick == SIZE_MAX) {
      rn->blocked = rn->qn > 0 && !multi;
      break;
    }
    size_t req = rn->q[pick];
    const struct stk_mig_req *q = &rn->t->req[req];
    const struct stk__mig_cand *use = multi ? lists[q->profile].c : q->count > 64 ? big : c;
    rc = start(rn, req, use, errmsg);
    drop(rn, pick);
  }
  for (unsigned p = 0; p < 16; p++) free(lists[p].c);
  free(big);
  return rc;
}

/* Time-weighted sums of held compute and demand from rn->now to t. */
static void advance(struct run *rn, double t) {
  double a = fmax(rn->now, rn->r->first);
  if (t > a) {
    rn->acc_all += rn->held * (t - a);
    rn->dem_all += rn->demand * (t - a);
    if (rn->qn) {
      rn->acc_back += rn->held * (t - a);
      rn->time_back += t - a;
    }
    double b = fmin(t, rn->r->last);
    if (b > a) {
      rn->acc_arr += rn->held * (b - a);
      rn->dem_arr += rn->demand * (b - a);
    }
  }
  rn->now = t;
}

/* The engine's hooks: time moves (integrals), a departure frees its
 * instances, an arrival joins the queue, and after the instant the
 * policy starts what it can. */
static int mig_advance(void *ctx, int64_t from, int64_t to) {
  (void)from;
  advance(ctx, (double)to / 1000.0);
  return 0;
}

static int mig_event(void *ctx, const struct stk__sim_event *e) {
  struct run *rn = ctx;
  if (e->kind == EV_DEPART) {
    depart(rn, e->arg);
    rn->blocked = 0;
    rn->r->end = rn->now;
  } else {
    rn->q[rn->qn++] = e->arg;
  }
  return 0;
}

/* Departures scheduled at an instant end later than it, or at it (a
 * request of zero length and delay), when they run in an instant of their
 * own at the same time, before any later event. Under arrival order a
 * blocked head stays blocked until something leaves: arrivals only join
 * the queue behind it. */
static int mig_instant(void *ctx, int64_t now) {
  struct run *rn = ctx;
  (void)now;
  return rn->blocked ? 0 : schedule(rn, rn->errmsg);
}

const char *stk_mig_policy_name(enum stk_mig_policy p) {
  static const char *const names[] = {"fifo", "fifo-reconf", "mig-aware", "multi"};
  return p >= STK_MIG_FIFO && p <= STK_MIG_MULTI ? names[p] : "?";
}

int stk_mig_policy_parse(const char *name, enum stk_mig_policy *out) {
  for (int p = STK_MIG_FIFO; p <= STK_MIG_MULTI; p++)
    if (name && !strcmp(name, stk_mig_policy_name((enum stk_mig_policy)p))) {
      *out = (enum stk_mig_policy)p;
      return 0;
    }
  return STK_EINVAL;
}

int stk_mig_online_run(const struct stk_mig_trace *t, const struct stk_mig_online_opts *oin,
                       struct stk_mig_online_result *r, char *errmsg) {
  memset(r, 0, sizeof *r);
  struct stk_mig_online_opts own; /* an older caller's struct is read only to its end */
  int trc = oin ? stk__opts_take(&own, sizeof own, oin, "stk_mig_online_opts", errmsg) : 0;
  if (trc) return trc;
  const struct stk_mig_online_opts *opts = oin ? &own : NULL;
  if (!t || !opts || !opts->g || opts->gpus == 0 || opts->gpus > 1000000)
    return stk__errf(errmsg, STK_EINVAL, "mig online: a trace, a GPU geometry and 1..1000000 GPUs "
                                         "are needed");
  if (opts->policy < STK_MIG_FIFO || opts->policy > STK_MIG_MULTI)
    return stk__errf(errmsg, STK_EINVAL, "mig online: no policy %d", (int)opts->policy);
  struct stk_mig_online_opts o = *opts;
  if (o.w_frag == 0 && o.w_wait == 0 && o.w_reconf == 0) {
    o.w_frag = 1;
    o.w_wait = 1;
    o.w_reconf = 0.5;
  }
  if (!(o.w_frag > 0) || !(o.w_wait >= 0) || !(o.w_reconf >= 0))
    return stk__errf(errmsg, STK_EINVAL, "mig online: weights need w_frag > 0, w_wait and "
                                         "w_reconf >= 0");
  if (!o.window) o.window = 32;
  struct run rn;
  memset(&rn, 0, sizeof rn);
  rn.t = t;
  rn.o = &o;
  rn.g = o.g;
  rn.r = r;
  rn.delay = o.delay_s < 0 ? STK_MIG_RECONFIG_DELAY_S : o.delay_s;
  if (t->n > UINT32_MAX)
    return stk__errf(errmsg, STK_EINVAL, "mig online: %zu requests, at most %u", t->n, UINT32_MAX);
  for (size_t i = 0; i < t->n; i++) {
    const struct stk_mig_req *q = &t->req[i];
    if (q->profile >= o.g->nprofiles || q->profile >= 16 || !q->count)
      return stk__errf(errmsg, STK_EINVAL, "mig online: request %zu: no profile %u on %s", i,
                       q->profile, o.g->name);
    /* the clock counts milliseconds in 64 bits */
    if (!(q->arrival >= 0 && q->arrival <= STK_MIG_MAX_TIME_S && q->duration >= 0 &&
          q->duration <= STK_MIG_MAX_TIME_S && q->demand > 0 && q->demand <= 1) ||
        (i && q->arrival < t->req[i - 1].arrival))
      return stk__errf(errmsg, STK_EINVAL,
                       "mig online: request %zu: arrival %g s and duration %g s must be in "
                       "0..1e12 and by arrival, demand %g in (0, 1]",
                       i, q->arrival, q->duration, q->demand);
  }
  rn.m.g = o.g;
  rn.m.n = o.gpus;
  rn.m.policy = o.policy;
  rn.m.w_frag = o.w_frag;
  rn.m.w_reconf = o.w_reconf;
  for (size_t i = 0; i < t->n; i++) rn.m.w[t->req[i].profile] += 1.0 / (double)t->n;
  if (o.starts)
    for (size_t i = 0; i < t->n; i++) o.starts[i] = (struct stk_mig_start){-1, -1, -1};
  rn.m.gpu = calloc(o.gpus, sizeof *rn.m.gpu);
  rn.q = rn.qbase = malloc(sizeof *rn.q * t->n);
  rn.off = malloc(sizeof *rn.off * t->n);
  stk__sim_engine_init(&rn.e, 0);
  rn.errmsg = errmsg;
  int rc = rn.m.gpu && rn.q && rn.off ? 0 : STK_ENOMEM;
  r->requests = t->n;
  r->first = t->req[0].arrival;
  r->last = t->req[t->n - 1].arrival;
  rn.now = r->first;
  for (size_t i = 0; i < t->n && !rc; i++)
    if (stk__sim_engine_at(&rn.e, llround(t->req[i].arrival * 1000), EV_ARRIVE, (uint32_t)i))
      rc = STK_ENOMEM;
  static const struct stk__sim_hooks hooks = {
      .advance = mig_advance, .event = mig_event, .instant = mig_instant};
  if (!rc) rc = stk__sim_engine_run(&rn.e, &hooks, &rn);
  r->created = rn.m.created;
  r->reconfigs = rn.m.reconfigs;
  if (!rc) {
    r->waiting = rn.qn;
    if (r->end < r->last) r->end = r->last;
    double slices = (double)STK_MIG_COMPUTE_SLICES * o.gpus;
    double arr = r->last - r->first, all = r->end - r->first;
    if (arr > 0) {
      r->alloc_arriving = rn.acc_arr / (slices * arr);
      r->demand_arriving = rn.dem_arr / (o.gpus * arr);
    }
    if (all > 0) {
      r->alloc_all = rn.acc_all / (slices * all);
      r->demand_all = rn.dem_all / (o.gpus * all);
    }
    if (rn.time_back > 0) r->alloc_backlog = rn.acc_back / (slices * rn.time_back);
    if (all > 0) r->backlog_time = rn.time_back / all;
    r->mean_wait = r->started ? rn.wait_sum / (double)r->started : 0;
  }
  stk__sim_engine_free(&rn.e);
  free(rn.m.gpu);
  free(rn.qbase);
  free(rn.off);
  free(rn.pool);
  return rc;
}
