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
#include "stoker/mig_online.h"

#define EV_DEPART 0
#define EV_ARRIVE 1
#define NO_REQ (-1)

struct inst {
  uint8_t profile, start;
  int32_t req; /* running request, NO_REQ when idle */
};
struct gpu {
  uint8_t n;
  struct inst in[STK_MIG_MAX_INSTANCES];
  /* memory slices and compute of the busy instances and of all, kept by
   * recount() after every change */
  uint16_t busy, bc, all, ac;
};

/* A place for one instance on one GPU: reuse an idle instance, create one
 * in free slices, or destroy idle instances to make room (reconfigure). */
enum { A_REUSE, A_CREATE, A_RECONF };
struct cand {
  int ok;
  uint32_t gpu;
  uint8_t action, slot, idx; /* idx: the reused instance */
  double dfrag;              /* fragmentation added */
};

struct run {
  const struct stk_mig_trace *t;
  const struct stk_mig_online_opts *o;
  const struct stk_mig_geometry *g;
  struct gpu *gpu;
  double w[16];    /* a profile's share of the requests */
  float frag[256][STK_MIG_COMPUTE_SLICES + 1];
  uint8_t have[256][STK_MIG_COMPUTE_SLICES + 1];
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

static unsigned slices(const struct stk_mig_profile *p, unsigned start) {
  return ((1u << p->memory) - 1) << start;
}

static void recount(const struct run *rn, struct gpu *G) {
  G->busy = G->bc = G->all = G->ac = 0;
  for (unsigned i = 0; i < G->n; i++) {
    const struct stk_mig_profile *p = &rn->g->profiles[G->in[i].profile];
    unsigned s = slices(p, G->in[i].start);
    G->all |= (uint16_t)s;
    G->ac += p->compute;
    if (G->in[i].req != NO_REQ) {
      G->busy |= (uint16_t)s;
      G->bc += p->compute;
    }
  }
}

static void masks(const struct gpu *G, unsigned *busy, unsigned *bc, unsigned *all,
                  unsigned *ac) {
  *busy = G->busy;
  *bc = G->bc;
  *all = G->all;
  *ac = G->ac;
}

/* Free compute slices that instances of each profile could not use if as
 * many as fit were created (lowest start first), weighted by the profile's
 * share of the requests; cached by (occupied memory slices, compute). */
static double frag(struct run *rn, unsigned mask, unsigned compute) {
  if (compute > STK_MIG_COMPUTE_SLICES) compute = STK_MIG_COMPUTE_SLICES;
  if (rn->have[mask][compute]) return rn->frag[mask][compute];
  double f = 0;
  unsigned free_c = STK_MIG_COMPUTE_SLICES - compute;
  for (size_t pi = 0; pi < rn->g->nprofiles && pi < 16; pi++) {
    if (rn->w[pi] == 0) continue;
    const struct stk_mig_profile *p = &rn->g->profiles[pi];
    unsigned m = mask, c = compute, n = 0;
    for (unsigned k = 0; k < p->nstarts; k++) {
      unsigned s = slices(p, p->starts[k]);
      if (!(s & m) && c + p->compute <= STK_MIG_COMPUTE_SLICES) {
        m |= s;
        c += p->compute;
        n++;
      }
    }
    f += rn->w[pi] * (double)(free_c - n * p->compute);
  }
  rn->have[mask][compute] = 1;
  rn->frag[mask][compute] = (float)f;
  return f;
}

/* Ordering of two places of one request: FIFO takes the first in GPU order
 * (reuse before create on a GPU); the others the least fragmentation added,
 * then reuse < create < reconfigure, then GPU and slot order. */
static int better(const struct run *rn, const struct cand *a, const struct cand *b) {
  if (!b->ok) return a->ok;
  if (!a->ok) return 0;
  int firstfit = rn->o->policy == STK_MIG_FIFO || rn->o->policy == STK_MIG_FIFO_RECONF;
  /* first fit: any GPU without destroying before one that must */
  if (firstfit && (a->action == A_RECONF) != (b->action == A_RECONF)) return b->action == A_RECONF;
  if (!firstfit) {
    double ka = a->dfrag + (rn->o->policy == STK_MIG_MULTI && a->action == A_RECONF
                                ? rn->o->w_reconf * STK_MIG_COMPUTE_SLICES / rn->o->w_frag
                                : 0);
    double kb = b->dfrag + (rn->o->policy == STK_MIG_MULTI && b->action == A_RECONF
                                ? rn->o->w_reconf * STK_MIG_COMPUTE_SLICES / rn->o->w_frag
                                : 0);
    if (ka < kb - 1e-9) return 1;
    if (ka > kb + 1e-9) return 0;
    if (a->action != b->action) return a->action < b->action;
  }
  if (a->gpu != b->gpu) return a->gpu < b->gpu;
  if (a->action != b->action) return a->action < b->action;
  return a->slot < b->slot;
}

/* The best place for one instance of profile pi on GPU gi. */
static struct cand best_on(struct run *rn, uint32_t gi, unsigned pi) {
  const struct gpu *G = &rn->gpu[gi];
  const struct stk_mig_profile *p = &rn->g->profiles[pi];
  unsigned busy, bc, all, ac;
  masks(G, &busy, &bc, &all, &ac);
  int fifo = rn->o->policy == STK_MIG_FIFO;
  int scored = !fifo && rn->o->policy != STK_MIG_FIFO_RECONF; /* fragmentation matters */
  double before = scored ? frag(rn, busy, bc) : 0;
  struct cand best = {0};
  for (unsigned i = 0; i < G->n; i++)
    if (G->in[i].req == NO_REQ && G->in[i].profile == pi) {
      struct cand c = {1, gi, A_REUSE, G->in[i].start, (uint8_t)i, 0};
      if (scored) c.dfrag = frag(rn, busy | slices(p, c.slot), bc + p->compute) - before;
      if (better(rn, &c, &best)) best = c;
    }
  for (unsigned k = 0; k < p->nstarts; k++) {
    unsigned start = p->starts[k], s = slices(p, start);
    if (s & busy) continue;
    struct cand c = {1, gi, A_CREATE, (uint8_t)start, 0, 0};
    if ((s & all) || ac + p->compute > STK_MIG_COMPUTE_SLICES || G->n >= STK_MIG_MAX_INSTANCES) {
      if (fifo) continue;
      /* destroy the idle instances in the way; what is left must fit */
      unsigned left_c = 0, left_n = 0;
      for (unsigned i = 0; i < G->n; i++) {
        const struct stk_mig_profile *q = &rn->g->profiles[G->in[i].profile];
        if (G->in[i].req != NO_REQ || !(slices(q, G->in[i].start) & s)) {
          left_c += q->compute;
          left_n++;
        }
      }
      if (left_c + p->compute > STK_MIG_COMPUTE_SLICES || left_n >= STK_MIG_MAX_INSTANCES)
        continue;
      c.action = A_RECONF;
    }
    if (scored) c.dfrag = frag(rn, busy | s, bc + p->compute) - before;
    if (better(rn, &c, &best)) best = c;
  }
  return best;
}

/* Could request q ever be placed? Under FIFO instances are never removed,
 * so only GPUs with an instance of the profile or free room for it can. */
static int ever_fits(struct run *rn, const struct stk_mig_req *q) {
  if (q->count > rn->o->gpus) return 0;
  if (rn->o->policy != STK_MIG_FIFO) return 1;
  const struct stk_mig_profile *p = &rn->g->profiles[q->profile];
  unsigned hosts = 0;
  for (uint32_t gi = 0; gi < rn->o->gpus && hosts < q->count; gi++) {
    const struct gpu *G = &rn->gpu[gi];
    int can = 0;
    for (unsigned i = 0; i < G->n && !can; i++) can = G->in[i].profile == q->profile;
    unsigned busy, bc, all, ac;
    masks(G, &busy, &bc, &all, &ac);
    for (unsigned k = 0; k < p->nstarts && !can; k++)
      can = !(slices(p, p->starts[k]) & all) && ac + p->compute <= STK_MIG_COMPUTE_SLICES &&
            G->n < STK_MIG_MAX_INSTANCES;
    hosts += (unsigned)can;
  }
  return hosts >= q->count;
}

static double cost_of(const struct run *rn, const struct cand *c, unsigned k) {
  double s = 0;
  for (unsigned i = 0; i < k; i++)
    s += rn->o->w_frag * c[i].dfrag / STK_MIG_COMPUTE_SLICES +
         (c[i].action == A_RECONF ? rn->o->w_reconf : 0);
  return s;
}

/* Places for all count instances of a request, on distinct GPUs: FIFO the
 * first GPUs that can, the others the best ones. 0 when they do not fit;
 * else 1 with *cost the sum of their ordering keys. */
static int choose(struct run *rn, const struct stk_mig_req *q, struct cand *out, double *cost) {
  unsigned k = q->count;
  if (k == 1) {
    struct cand best = {0};
    for (uint32_t gi = 0; gi < rn->o->gpus; gi++) {
      struct cand c = best_on(rn, gi, q->profile);
      if (better(rn, &c, &best)) best = c;
      if (best.ok && best.action != A_RECONF && rn->o->policy <= STK_MIG_FIFO_RECONF) break;
    }
    if (!best.ok) return 0;
    out[0] = best;
  } else {
    unsigned got = 0;
    for (uint32_t gi = 0; gi < rn->o->gpus; gi++) {
      struct cand c = best_on(rn, gi, q->profile);
      if (!c.ok) continue;
      if (got < k) {
        out[got++] = c;
      } else if (rn->o->policy == STK_MIG_FIFO) {
        break;
      } else {
        unsigned worst = 0;
        for (unsigned i = 1; i < k; i++)
          if (better(rn, &out[worst], &out[i])) worst = i;
        if (better(rn, &c, &out[worst])) out[worst] = c;
      }
    }
    if (got < k) return 0;
  }
  *cost = cost_of(rn, out, k);
  return 1;
}

/* MULTI weighs many waiting requests per pass on an unchanged cluster:
 * each profile's places on all GPUs are found once a pass and sorted best
 * first; a request of k instances takes the first k (the same k choose()
 * picks: the k least under better()'s order). */
struct plist {
  int valid;
  size_t n;
  struct cand *c;
};

static int cmp_cand(const void *x, const void *y, void *ctx) {
  const struct run *rn = ctx;
  return better(rn, x, y) ? -1 : better(rn, y, x) ? 1 : 0;
}

static int places(struct run *rn, unsigned pi, struct plist *L) {
  if (L->valid) return 0;
  if (!L->c && !(L->c = malloc(sizeof *L->c * rn->o->gpus))) return STK_ENOMEM;
  L->n = 0;
  for (uint32_t gi = 0; gi < rn->o->gpus; gi++) {
    struct cand c = best_on(rn, gi, pi);
    if (c.ok) L->c[L->n++] = c;
  }
  qsort_r(L->c, L->n, sizeof *L->c, cmp_cand, rn);
  L->valid = 1;
  return 0;
}

static int apply_one(struct run *rn, const struct cand *c, int32_t req, int *created,
                     char *errmsg) {
  struct gpu *G = &rn->gpu[c->gpu];
  const struct stk_mig_req *q = &rn->t->req[req];
  const struct stk_mig_profile *p = &rn->g->profiles[q->profile];
  if (c->action == A_REUSE) {
    G->in[c->idx].req = req;
  } else {
    if (c->action == A_RECONF) {
      unsigned s = slices(p, c->slot), keep = 0;
      for (unsigned i = 0; i < G->n; i++) {
        const struct stk_mig_profile *o = &rn->g->profiles[G->in[i].profile];
        if (G->in[i].req != NO_REQ || !(slices(o, G->in[i].start) & s)) G->in[keep++] = G->in[i];
      }
      G->n = (uint8_t)keep;
      rn->r->reconfigs++;
    }
    G->in[G->n++] = (struct inst){q->profile, c->slot, req};
    rn->r->created++;
    *created = 1;
    /* every layout the run makes is one NVIDIA allows */
    struct stk_mig_layout l = {.n = G->n};
    for (unsigned i = 0; i < G->n; i++) l.inst[i] = (struct stk_mig_instance){G->in[i].profile, G->in[i].start};
    char why[STK_ERRMSG_MAX];
    if (stk_mig_layout_check(rn->g, &l, why))
      return stk__errf(errmsg, STK_EINVAL, "mig online: internal error, GPU %u: %s", c->gpu, why);
  }
  recount(rn, G);
  rn->held += p->compute;
  rn->demand += q->demand;
  return 0;
}

static int start(struct run *rn, size_t req, const struct cand *c,
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
  for (unsigned i = 0; i < q->count; i++) {
    struct gpu *G = &rn->gpu[rn->pool[rn->off[req] + i]];
    for (unsigned k = 0; k < G->n; k++)
      if (G->in[k].req == (int32_t)req) {
        G->in[k].req = NO_REQ;
        recount(rn, G);
        break;
      }
  }
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
  struct cand c[64], *big = NULL;
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
        if (ok) cost = cost_of(rn, L->c, q->count);
      } else {
        if (q->count > 64 && !big && !(big = malloc(sizeof *big * rn->o->gpus))) {
          rc = STK_ENOMEM;
          break;
        }
        ok = choose(rn, q, q->count > 64 ? big : c, &cost);
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
    const struct cand *use = multi ? lists[q->profile].c : q->count > 64 ? big : c;
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
  for (size_t i = 0; i < t->n; i++) rn.w[t->req[i].profile] += 1.0 / (double)t->n;
  if (o.starts)
    for (size_t i = 0; i < t->n; i++) o.starts[i] = (struct stk_mig_start){-1, -1, -1};
  rn.gpu = calloc(o.gpus, sizeof *rn.gpu);
  rn.q = rn.qbase = malloc(sizeof *rn.q * t->n);
  rn.off = malloc(sizeof *rn.off * t->n);
  stk__sim_engine_init(&rn.e, 0);
  rn.errmsg = errmsg;
  int rc = rn.gpu && rn.q && rn.off ? 0 : STK_ENOMEM;
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
  free(rn.gpu);
  free(rn.qbase);
  free(rn.off);
  free(rn.pool);
  return rc;
}
