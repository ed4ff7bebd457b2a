/* Sia (Jayaram Subramanya et al., SOSP'23): heterogeneity-aware, goodput-
 * driven, as its artifact runs it (p = -0.5, lambda_n = 1.1, 60 s rounds).
 * Each round every job gets at most one configuration (GPU type, nodes,
 * GPUs) from the artifact's list per type (1, 2, 4 GPUs on one node, then
 * whole nodes), chosen by an integer program solved exactly (sia: in
 * integer cents by dynamic programming, ties by a stated rule,
 * jpol_sia_exact.c; sia-glpk: by GLPK, jpol_sia_ilp.c):
 * minimise sum X[i][c] A[i][c] + lambda_n (jobs - allocated jobs) where
 * A = round(G^p, 2) clipped at 3000 and G the job's goodput in c over its
 * smallest goodput in any valid configuration, subject to the GPUs of each
 * type. Goodput comes from the job's fitted model on that type, or, on a
 * type it has not run on, from the first type it has run on scaled by the
 * ratio of the two types' one-GPU throughputs; a job that never ran is
 * worth 1 in every one-GPU configuration and nothing else. A configuration
 * other than the job's last one is discounted by the restart factor (age
 * less restarts x the application's restart penalty, over age plus one
 * penalty); a job still paying its restart keeps its configuration. GPUs
 * per job: up to twice the most it has run on (over all types) and the
 * batch limit. Placement as the artifact's fast placer: per type, larger
 * jobs first, whole free nodes first, then GPUs round the nodes. The GPUs
 * free of each type and on each node are the run's resource model's with
 * every placement released; the engine has the model hold what Sia chose. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "jpol_sia.h"

#define MAXT STK__JOBS_MAX_TYPES
#define MAXC 24 /* configurations per type */
#define P_FAIR (-0.5)
#define LAMBDA_N STK__SIA_LAMBDA_N
#define ZERO_GAIN 1e-4

/* A job's raw goodputs in every configuration depend only on its fitted
 * models, its gradient statistics (fixed within an epoch) and its GPU
 * limit, so they are kept until one of these changes. */
struct gcache {
  struct stk__perf perf[MAXT];
  int have[MAXT];
  double sqr, var;
  int maxrep;
  double raw[MAXT * MAXC];
};

/* The last integer program and its answer: GLPK is deterministic, so a
 * round whose program is the same, bit for bit, gets the same answer. */
struct smemo {
  size_t na, cap;
  size_t *active;
  int *hold; /* per job: -1 free, else the configuration it keeps */
  int *pref; /* per job: the configuration it has (the exact solver's tie-break) */
  double *cost;
  int *pick;
  int tgpus[MAXT]; /* GPUs free of each type */
  int valid;
};

struct srun {
  struct stk__sia_cfg cfg[MAXT * MAXC];
  int ncfg;
  int *prev;          /* per job: configuration index of last round, -1 none */
  double *g;          /* scratch: goodput per (job, config) */
  int first_vnode[MAXT];
  struct gcache **gc; /* per job, made on its first round */
  struct smemo memo;
  int glpk; /* 1: GLPK (sia-glpk), 0: the exact solver (sia) */
  struct stk__sia_ws ws; /* the exact solver's table, kept for the run */
};

static int s_init_with(struct stk__jrun *rn, int glpk) {
  if (!rn->ntypes) return 0;
  struct srun *p = calloc(1, sizeof *p);
  if (!p) return STK_ENOMEM;
  rn->pol = p;
  p->glpk = glpk;
  p->prev = malloc(sizeof(int) * rn->n);
  p->gc = calloc(rn->n, sizeof *p->gc);
  if (!p->prev || !p->gc) return STK_ENOMEM;
  for (size_t i = 0; i < rn->n; i++) p->prev[i] = -1;
  for (int v = rn->nodes - 1; v >= 0; v--) p->first_vnode[rn->vtype[v]] = v;
  /* the artifact's configurations: 1, 2, 4 (and 8) GPUs on one node, then
   * whole nodes, up to the type's nodes */
  for (int t = 0; t < rn->ntypes; t++) {
    int g = (int)rn->types[t].gpus_per_node, nn = (int)rn->types[t].nodes;
    for (int k = 1; k < g; k *= 2) p->cfg[p->ncfg++] = (struct stk__sia_cfg){t, 1, k};
    for (int n = 1; n <= nn && n <= 16; n++) p->cfg[p->ncfg++] = (struct stk__sia_cfg){t, n, n * g};
  }
  return 0;
}
int stk__sia_exact_fits(const struct stk__jrun *rn, char *errmsg) {
  size_t S = 1;
  for (int t = 0; t < rn->ntypes; t++) {
    S *= (size_t)rn->types[t].gpus_per_node * rn->types[t].nodes + 1;
    if (S > STK__SIA_EXACT_MAX_STATES)
      return stk__errf(errmsg, STK_EINVAL,
                       "--job-policy sia: this cluster's GPU counts give the exact solver more "
                       "than %d states (the product over types of GPUs + 1); run it with "
                       "--job-policy sia-glpk",
                       STK__SIA_EXACT_MAX_STATES);
  }
  return 0;
}

static int s_init(struct stk__jrun *rn) { return s_init_with(rn, 0); }
static int s_init_glpk(struct stk__jrun *rn) { return s_init_with(rn, 1); }

static void s_fini(struct stk__jrun *rn) {
  struct srun *p = rn->pol;
  if (!p) return;
  free(p->prev);
  free(p->g);
  if (p->gc)
    for (size_t i = 0; i < rn->n; i++) free(p->gc[i]);
  free(p->gc);
  free(p->memo.active);
  free(p->memo.hold);
  free(p->memo.pref);
  free(p->memo.cost);
  free(p->memo.pick);
  stk__sia_ws_free(&p->ws);
  free(p);
  rn->pol = NULL;
}

/* One-GPU throughput of an application on a type: its largest measured
 * local batch over the largest step time of the one-GPU rows, as the
 * artifact's ratio. */
static double one_gpu_xput(const struct stk__japp *a) {
  double b = 0, st = 0;
  for (int k = 0; k < a->nplace; k++) {
    const struct stk__jplace *pl = &a->place[k];
    if (pl->replicas != 1) continue;
    for (int r = 0; r < pl->n; r++) {
      if (pl->bsz[r] > b) b = pl->bsz[r];
      if (pl->step[r] > st) st = pl->step[r];
    }
  }
  return st > 0 ? b / st : 0;
}

static double restart_penalty(const char *app) {
  if (!strcmp(app, "deepspeech2")) return 25;
  if (!strcmp(app, "imagenet")) return 250;
  if (!strcmp(app, "bert")) return 120;
  if (!strcmp(app, "yolov3")) return 45;
  return 30;
}

/* Raw goodput of job j in configuration c, or 0 when c is not valid. */
static double s_goodput(struct stk__jrun *rn, const struct stk__jstate *j,
                        const struct stk__sia_cfg *c, int maxrep) {
  if (c->gpus > maxrep) return 0;
  int t = c->type, src = t;
  double mult = 1;
  if (!j->have_t[t]) {
    src = -1;
    for (int u = 0; u < rn->ntypes && src < 0; u++)
      if (j->have_t[u]) src = u;
    if (src < 0) return c->gpus == 1 ? -1 : 0; /* never ran: 1 GPU only */
    double xs = one_gpu_xput(j->by_type[t]), xd = one_gpu_xput(j->by_type[src]);
    mult = xd > 0 ? xs / xd : 1;
  }
  const struct stk__japp *a = j->by_type[src];
  int g = (int)rn->types[src].gpus_per_node;
  int nodes = src == t ? c->nodes : (c->gpus + g - 1) / g;
  int at, acc;
  double gp = stk__goodput_opt_c(&rn->gpcache, &j->perf_t[src], j->sqr, j->var, a->init_bsz,
                                 nodes, c->gpus, a->max_bsz, a->min_local, a->max_local, &at,
                                 &acc);
  return gp > 0 ? gp * mult : 0;
}

static int gcache_same(const struct stk__jrun *rn, const struct gcache *gc,
                       const struct stk__jstate *j, int maxrep) {
  size_t T = (size_t)rn->ntypes;
  return gc->maxrep == maxrep && !memcmp(&gc->sqr, &j->sqr, sizeof j->sqr) &&
         !memcmp(&gc->var, &j->var, sizeof j->var) &&
         !memcmp(gc->have, j->have_t, sizeof(int) * T) &&
         !memcmp(gc->perf, j->perf_t, sizeof(struct stk__perf) * T);
}

static void gcache_keep(const struct stk__jrun *rn, struct gcache *gc,
                        const struct stk__jstate *j, int maxrep) {
  size_t T = (size_t)rn->ntypes;
  gc->maxrep = maxrep;
  gc->sqr = j->sqr;
  gc->var = j->var;
  memcpy(gc->have, j->have_t, sizeof(int) * T);
  memcpy(gc->perf, j->perf_t, sizeof(struct stk__perf) * T);
}

/* The virtual node that stands for physical node id of type t: the
 * artifact tells placements apart by node, not by GPU, so a job that keeps
 * its nodes keeps its allocation (and pays no restart). */
static uint8_t node_vnode(const struct stk__jrun *rn, const struct srun *p, int t, int id) {
  return (uint8_t)(p->first_vnode[t] + id * (int)rn->types[t].gpus_per_node / rn->gpn);
}

/* The artifact's fast placer for one type: jobs (k in order, gpus desc)
 * onto physical nodes; writes virtual-node allocations. */
static void s_place(struct stk__jrun *rn, struct srun *p, int t, const size_t *jobs,
                    const int *gpus, size_t nj) {
  int g = (int)rn->types[t].gpus_per_node, nn = (int)rn->types[t].nodes;
  int rem[STK__JOBS_MAX_NODES], node = 0;
  for (int n = 0; n < nn; n++) rem[n] = stk__sim_res_free_machine(rn->res, node_vnode(rn, p, t, n));
  for (size_t q = 0; q < nj; q++) {
    size_t i = jobs[q];
    int want = gpus[q], got = 0, full = want / g, id = node;
    uint8_t *out = rn->new_alloc[i];
    for (int checked = 0; checked < nn && full > 0; checked++) {
      if (rem[id] == g) {
        for (int k = 0; k < g; k++) out[got++] = node_vnode(rn, p, t, id);
        rem[id] = 0;
        want -= g;
        full--;
      }
      id = (id + 1) % nn;
    }
    for (int guard = 0; want > 0 && guard < 2 * nn; guard++) {
      if (rem[id]) {
        int take = STK__MIN(want, rem[id]);
        for (int k = 0; k < take; k++) out[got++] = node_vnode(rn, p, t, id);
        rem[id] -= take;
        want -= take;
      }
      id = (id + 1) % nn;
    }
    node = id;
    /* canonical order, so an unchanged placement is no restart */
    for (int a = 1; a < got; a++)
      for (int b = a; b > 0 && out[b - 1] > out[b]; b--) {
        uint8_t x = out[b];
        out[b] = out[b - 1];
        out[b - 1] = x;
      }
    rn->new_n[i] = got;
  }
}

static int memo_keep(struct smemo *m, const size_t *active, size_t na, int C, const int *hold,
                     const int *pref, const double *cost, const int *pick, const int *tgpus,
                     int T) {
  m->valid = 0;
  if (na > m->cap) {
    size_t cap = na * 2;
    size_t *a = realloc(m->active, sizeof(size_t) * cap);
    if (a) m->active = a;
    int *h = realloc(m->hold, sizeof(int) * cap);
    if (h) m->hold = h;
    int *pk = realloc(m->pick, sizeof(int) * cap);
    if (pk) m->pick = pk;
    int *pf = realloc(m->pref, sizeof(int) * cap);
    if (pf) m->pref = pf;
    double *c = realloc(m->cost, sizeof(double) * cap * (size_t)C);
    if (c) m->cost = c;
    if (!a || !h || !pk || !pf || !c) return STK_ENOMEM;
    m->cap = cap;
  }
  m->na = na;
  memcpy(m->active, active, sizeof(size_t) * na);
  memcpy(m->hold, hold, sizeof(int) * na);
  memcpy(m->pick, pick, sizeof(int) * na);
  memcpy(m->pref, pref, sizeof(int) * na);
  memcpy(m->cost, cost, sizeof(double) * na * (size_t)C);
  memcpy(m->tgpus, tgpus, sizeof(int) * (size_t)T);
  m->valid = 1;
  return 0;
}

static int s_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  struct srun *p = rn->pol;
  if (!p) return STK_EINVAL;
  int C = p->ncfg;
  double *g = realloc(p->g, sizeof(double) * na * (size_t)C);
  if (!g) return STK_ENOMEM;
  p->g = g;
  for (size_t k = 0; k < na; k++) {
    const struct stk__jstate *j = &rn->js[active[k]];
    const struct stk__japp *a = j->spec->app;
    int maxrep = 1;
    for (int t = 0; t < rn->ntypes; t++) {
      const struct stk__japp *ta = j->by_type[t];
      int m = STK__MIN(STK__MAX(2 * j->maxrep_t[t], 1), 64);
      if (ta->min_local > 0) m = STK__MIN(m, ta->max_bsz / ta->min_local);
      maxrep = STK__MAX(maxrep, m);
    }
    if (!strcmp(a->name, "ncf")) maxrep = 1;
    double *row = g + k * (size_t)C, lo = INFINITY;
    struct gcache *gc = p->gc[active[k]];
    if (!gc) {
      if (!(gc = calloc(1, sizeof *gc))) return STK_ENOMEM;
      gc->maxrep = -1;
      p->gc[active[k]] = gc;
    }
    if (!gcache_same(rn, gc, j, maxrep)) {
      for (int c = 0; c < C; c++) gc->raw[c] = s_goodput(rn, j, &p->cfg[c], maxrep);
      gcache_keep(rn, gc, j, maxrep);
    }
    for (int c = 0; c < C; c++) {
      row[c] = gc->raw[c];
      if (row[c] < 0) row[c] = 1; /* a job that never ran */
      if (row[c] > ZERO_GAIN && row[c] < lo) lo = row[c];
    }
    double age = rn->now - j->spec->submit, pen = restart_penalty(a->name);
    double rf = age < pen ? 1 : fmax(age - (j->restarts < 0 ? 0 : j->restarts) * pen, 0) / (age + pen);
    int prev = p->prev[active[k]];
    for (int c = 0; c < C; c++) {
      double v = isfinite(lo) && row[c] > ZERO_GAIN ? row[c] / lo : ZERO_GAIN;
      if (v <= ZERO_GAIN) v = ZERO_GAIN;
      if (prev >= 0 && c != prev) v *= rf;
      if (v <= ZERO_GAIN) v = ZERO_GAIN;
      row[c] = v;
    }
  }
  /* the program's costs: each allocated job lowers lambda_n (jobs -
   * allocated) by lambda_n */
  int *hold = malloc(sizeof(int) * na), *pick = malloc(sizeof(int) * na);
  int *pref = malloc(sizeof(int) * na);
  size_t *tj = malloc(sizeof(size_t) * na);
  int *tg = malloc(sizeof(int) * na);
  int rc = 0, T = rn->ntypes;
  if (!hold || !pick || !pref || !tj || !tg) {
    rc = STK_ENOMEM;
    goto out;
  }
  for (size_t k = 0; k < na; k++) {
    const struct stk__jstate *j = &rn->js[active[k]];
    int prev = p->prev[active[k]];
    hold[k] = prev >= 0 && j->nalloc && j->rescale > 0 ? prev : -1; /* still restarting */
    pref[k] = prev;
    for (int c = 0; c < C; c++) {
      double A = nearbyint(pow(g[k * (size_t)C + c], P_FAIR) * 100) / 100;
      if (A > 3000) A = 3000;
      g[k * (size_t)C + c] = A - LAMBDA_N;
    }
  }
  /* the GPUs free of each type: the resource model's, every placement
   * released (a type's GPUs when nothing else holds them) */
  int tgpus[MAXT];
  for (int t = 0; t < T; t++) tgpus[t] = stk__sim_res_free_type(rn->res, t);
  struct smemo *m = &p->memo;
  if (m->valid && m->na == na && !memcmp(m->tgpus, tgpus, sizeof(int) * (size_t)T) &&
      !memcmp(m->active, active, sizeof(size_t) * na) &&
      !memcmp(m->hold, hold, sizeof(int) * na) && !memcmp(m->pref, pref, sizeof(int) * na) &&
      !memcmp(m->cost, g, sizeof(double) * na * (size_t)C)) {
    memcpy(pick, m->pick, sizeof(int) * na);
  } else {
    int ex = p->glpk ? -1 : stk__sia_exact(p->cfg, C, tgpus, T, na, g, hold, pref, pick,
                                                  NULL, &p->ws);
    if (ex == STK_ENOMEM) {
      rc = ex;
      goto out;
    }
    /* GLPK when asked, or where the exact solver does not apply */
    if (ex < 0 && (rc = stk__sia_solve(p->cfg, C, tgpus, T, na, g, hold, pick, NULL))) goto out;
    if (stk__sia_checking) stk__sia_check_round(p->cfg, C, tgpus, T, na, g, hold, pref);
    if ((rc = memo_keep(m, active, na, C, hold, pref, g, pick, tgpus, T))) goto out;
  }
  for (size_t k = 0; k < na; k++) {
    p->prev[active[k]] = pick[k];
    rn->new_n[active[k]] = 0;
  }
  for (int t = 0; t < T; t++) {
    size_t nj = 0;
    for (size_t k = 0; k < na; k++)
      if (pick[k] >= 0 && p->cfg[pick[k]].type == t) {
        tj[nj] = active[k];
        tg[nj++] = p->cfg[pick[k]].gpus;
      }
    for (size_t a = 1; a < nj; a++) /* stable: GPUs descending */
      for (size_t b = a; b > 0 && tg[b - 1] < tg[b]; b--) {
        size_t x = tj[b];
        tj[b] = tj[b - 1];
        tj[b - 1] = x;
        int y = tg[b];
        tg[b] = tg[b - 1];
        tg[b - 1] = y;
      }
    s_place(rn, p, t, tj, tg, nj);
  }
out:
  free(hold);
  free(pick);
  free(pref);
  free(tj);
  free(tg);
  return rc;
}

const struct stk__jpolicy stk__jpol_sia = {
    .name = "sia",
    .summary = "Sia: goodput per GPU type and size, integer program solved exactly (ties: "
               "job order, a job's own configuration first), p = -0.5; needs --gpu-types",
    .elastic = 1,
    .hetero = 1,
    .init = s_init,
    .fini = s_fini,
    .schedule = s_schedule,
};

const struct stk__jpolicy stk__jpol_sia_glpk = {
    .name = "sia-glpk",
    .summary = "Sia with its integer program solved by GLPK (gap 1e-4; ties as GLPK's search "
               "finds them), as the artifact; needs --gpu-types",
    .elastic = 1,
    .hetero = 1,
    .init = s_init_glpk,
    .fini = s_fini,
    .schedule = s_schedule,
};
