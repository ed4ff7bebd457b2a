/* Gavel (Narayanan et al., OSDI'20) with its max-sum-throughput policy, as
 * the Sia SOSP'23 artifact runs it on a heterogeneous cluster: jobs keep
 * the GPU count and batch size of their workload row; each round (360 s in
 * the paper) a linear program gives each job a share x[i][t] of each GPU
 * type maximising the sum of throughputs (iterations/s on t, calibrated),
 * with sum_t x[i][t] <= 1 and sum_i gpus_i x[i][t] <= GPUs of t; solved by
 * GLPK's interior point, as the artifact's ECOS: tied optima come out as
 * shares spread over the tied jobs, which then take turns round by round
 * (preempted and restarted), not as the simplex's whole shares. Rounds
 * then go to the (job, type) pairs in decreasing priority, the share over
 * the fraction of time the job has had on that type (a job with a share
 * and no time first), each job on one type while
 * its GPUs fit. Within a type, jobs keep last round's GPUs when they are
 * still free, larger jobs first, and others take GPUs server by server.
 * The GPUs free of each type, and on each server, are the run's resource
 * model's with every placement released; the engine has the model hold
 * what Gavel chose. */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

#define MAXT STK__JOBS_MAX_TYPES

struct gjob {
  double time[MAXT]; /* seconds run on each type, plus half a round */
  int seen, type;     /* type of last round's GPUs, -1 none */
  int nslot;
  int *slot; /* last round's GPU slots (within the type) */
};

struct grun {
  double cluster_time[MAXT];
  int first_vnode[MAXT], tgpus[MAXT];
  struct gjob *g;
};

static int g_init(struct stk__jrun *rn) {
  if (!rn->ntypes) return 0; /* checked in g_schedule */
  struct grun *p = calloc(1, sizeof *p);
  if (!p) return STK_ENOMEM;
  rn->pol = p;
  p->g = calloc(rn->n, sizeof *p->g);
  if (!p->g) return STK_ENOMEM;
  for (int v = rn->nodes - 1; v >= 0; v--) p->first_vnode[rn->vtype[v]] = v;
  for (int t = 0; t < rn->ntypes; t++)
    p->tgpus[t] = (int)(rn->types[t].nodes * rn->types[t].gpus_per_node);
  return 0;
}

static void g_fini(struct stk__jrun *rn) {
  struct grun *p = rn->pol;
  if (!p) return;
  if (p->g)
    for (size_t i = 0; i < rn->n; i++) free(p->g[i].slot);
  free(p->g);
  free(p);
  rn->pol = NULL;
}

/* Iterations per second of job j at its GPUs packed on type t's nodes,
 * with its fixed batch, as the artifact predicts them (0.1 when the type
 * has too few GPUs). */
static double g_xput(const struct stk__jrun *rn, const struct stk__jstate *j, int t) {
  int n = j->spec->replicas, g = (int)rn->types[t].gpus_per_node;
  if (n > (int)(rn->types[t].nodes * rn->types[t].gpus_per_node)) return 0.1;
  const struct stk__japp *a = j->by_type[t];
  int per[STK__JOBS_MAX_NODES], m = 0;
  for (int left = n; left > 0 && m < STK__JOBS_MAX_NODES; left -= per[m++])
    per[m] = STK__MIN(left, g);
  const double eps = 1e-8;
  int local = (int)ceil((double)j->spec->bsz / n - eps);
  int acc = (int)ceil((double)local / a->max_local - eps) - 1;
  if (n == 1 && acc < 1) acc = 1;
  int at = (int)ceil((double)local / (acc + 1) - eps);
  int cap = (int)((double)a->max_bsz / (n * (acc + 1)));
  if (at > cap) at = cap;
  double step, sync;
  stk__japp_throughput(a, per, m, at, &step, &sync);
  double it = step + (step - sync) * acc;
  return it > 0 ? j->calib / it : 0;
}

/* The max-sum-throughput LP over the GPUs free of each type (freet): x
 * (na x ntypes, row-major) or -1. */
static int g_solve(struct stk__jrun *rn, const int *freet, const size_t *active, size_t na,
                   double *x) {
  int T = rn->ntypes;
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MAX);
  glp_add_rows(lp, (int)na + T);
  glp_add_cols(lp, (int)na * T);
  int nz = (int)na * T * 2;
  int *ia = malloc(sizeof(int) * (size_t)(nz + 1)), *ja = malloc(sizeof(int) * (size_t)(nz + 1));
  double *ar = malloc(sizeof(double) * (size_t)(nz + 1));
  if (!ia || !ja || !ar) {
    free(ia);
    free(ja);
    free(ar);
    glp_delete_prob(lp);
    return STK_ENOMEM;
  }
  int k = 0;
  for (size_t i = 0; i < na; i++) {
    glp_set_row_bnds(lp, (int)i + 1, GLP_UP, 0, 1);
    const struct stk__jstate *j = &rn->js[active[i]];
    for (int t = 0; t < T; t++) {
      int c = (int)i * T + t + 1;
      glp_set_col_bnds(lp, c, GLP_DB, 0, 1);
      glp_set_obj_coef(lp, c, g_xput(rn, j, t));
      ++k, ia[k] = (int)i + 1, ja[k] = c, ar[k] = 1;
      ++k, ia[k] = (int)na + t + 1, ja[k] = c, ar[k] = j->spec->replicas;
    }
  }
  for (int t = 0; t < T; t++) glp_set_row_bnds(lp, (int)na + t + 1, GLP_UP, 0, freet[t]);
  glp_load_matrix(lp, k, ia, ja, ar);
  /* Interior point, as the artifact's ECOS: among tied optima it lands
   * inside the optimal face, spreading shares over the tied jobs, where
   * the simplex picks a vertex (whole shares for some, exact zeros for the
   * rest); the simplex only when the interior point fails. */
  glp_iptcp ip;
  glp_init_iptcp(&ip);
  ip.msg_lev = GLP_MSG_OFF;
  int ipt = glp_interior(lp, &ip) == 0 && glp_ipt_status(lp) == GLP_OPT, rc = 0;
  if (!ipt) {
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    rc = glp_simplex(lp, &parm);
  }
  for (size_t i = 0; i < na * (size_t)T; i++) {
    double v = ipt ? glp_ipt_col_prim(lp, (int)i + 1) : rc ? 0 : glp_get_col_prim(lp, (int)i + 1);
    x[i] = v > 0 ? v : 0;
  }
  glp_delete_prob(lp);
  free(ia);
  free(ja);
  free(ar);
  return 0;
}

struct gent {
  size_t k;
  int t;
  double prio, share;
  size_t order;
};

static int cmp_ent(const void *x, const void *y) {
  const struct gent *a = x, *b = y;
  if (a->prio != b->prio) return a->prio > b->prio ? -1 : 1;
  if (a->share != b->share) return a->share > b->share ? -1 : 1;
  return a->order < b->order ? -1 : a->order > b->order;
}

struct gsched {
  size_t k;
  int n;
};

static int cmp_sched(const void *x, const void *y) {
  const struct gsched *a = x, *b = y;
  if (a->n != b->n) return a->n > b->n ? -1 : 1;
  return a->k < b->k ? -1 : a->k > b->k;
}

static int g_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  struct grun *p = rn->pol;
  if (!p) return STK_EINVAL; /* gavel needs GPU types; refused in stk_sim_jobs_run */
  int T = rn->ntypes;
  double half = rn->o->interval / 2;
  for (size_t k = 0; k < na; k++) {
    struct gjob *g = &p->g[active[k]];
    if (g->seen) continue;
    g->seen = 1;
    g->type = -1;
    for (int t = 0; t < T; t++) {
      g->time[t] = half;
      p->cluster_time[t] += half;
    }
  }
  double *x = malloc(sizeof(double) * na * (size_t)T);
  struct gent *e = malloc(sizeof *e * na * (size_t)T);
  struct gsched *s = malloc(sizeof *s * na);
  int *chosen = malloc(sizeof(int) * na);
  uint8_t *taken = calloc((size_t)rn->gpus, 1);
  /* what is free comes from the resource model, every placement released
   * (a type's GPUs when nothing else holds them) */
  int freet[MAXT];
  for (int t = 0; t < T; t++) freet[t] = stk__sim_res_free_type(rn->res, t);
  int rc = !x || !e || !s || !chosen || !taken ? STK_ENOMEM : g_solve(rn, freet, active, na, x);
  if (rc) goto out;
  size_t ne = 0;
  for (int t = 0; t < T; t++)
    for (size_t k = 0; k < na; k++) {
      double share = x[k * (size_t)T + (size_t)t];
      struct gjob *g = &p->g[active[k]];
      double frac = p->cluster_time[t] > 0 ? g->time[t] / p->cluster_time[t] : 0;
      double prio = share * 1e9;
      if (share > 0 && frac > 0) prio = share / frac;
      if (share <= 0) prio = 0;
      e[ne] = (struct gent){k, t, prio, share, ne};
      ne++;
    }
  qsort(e, ne, sizeof *e, cmp_ent);
  int left[MAXT];
  for (int t = 0; t < T; t++) left[t] = freet[t];
  for (size_t k = 0; k < na; k++) chosen[k] = -1;
  for (size_t q = 0; q < ne; q++) {
    int t = e[q].t, n = rn->js[active[e[q].k]].spec->replicas;
    if (left[t] == 0 || chosen[e[q].k] >= 0 || n > left[t]) continue;
    left[t] -= n;
    chosen[e[q].k] = t;
  }
  /* GPUs: per type, larger jobs first; last round's GPUs kept when free */
  for (int t = 0; t < T; t++) {
    uint8_t *tk = taken + p->first_vnode[t] * rn->gpn; /* slots of type t */
    size_t ns = 0;
    for (size_t k = 0; k < na; k++)
      if (chosen[k] == t) s[ns++] = (struct gsched){k, rn->js[active[k]].spec->replicas};
    qsort(s, ns, sizeof *s, cmp_sched);
    /* GPUs stand as the first virtual node of their machine: placements
     * differ by node, as the artifact compares them */
    int ptr = 0, gpn = (int)rn->types[t].gpus_per_node;
    for (int m = 0; m < (int)rn->types[t].nodes; m++) /* a machine's GPUs in use: its last */
      for (int z = stk__sim_res_free_machine(rn->res, p->first_vnode[t] + m * gpn / rn->gpn);
           z < gpn; z++)
        tk[m * gpn + z] = 1;
    for (size_t a = 0; a < ns;) {
      size_t b = a;
      while (b < ns && s[b].n == s[a].n) b++;
      int *keep = calloc(b - a, sizeof(int));
      if (!keep) {
        rc = STK_ENOMEM;
        goto out;
      }
      for (size_t q = a; q < b; q++) {
        struct gjob *g = &p->g[active[s[q].k]];
        if (g->type != t || g->nslot != s[q].n) continue;
        int ok = 1;
        for (int z = 0; z < g->nslot; z++) ok &= !tk[g->slot[z]];
        if (!ok) continue;
        for (int z = 0; z < g->nslot; z++) tk[g->slot[z]] = 1;
        keep[q - a] = 1;
      }
      for (size_t q = a; q < b; q++) {
        size_t i = active[s[q].k];
        struct gjob *g = &p->g[i];
        if (!keep[q - a]) {
          int *ns2 = realloc(g->slot, sizeof(int) * (size_t)s[q].n);
          if (!ns2) {
            free(keep);
            rc = STK_ENOMEM;
            goto out;
          }
          g->slot = ns2;
          g->nslot = 0;
          /* server by server from the type's pointer, then any free GPU */
          for (; g->nslot < s[q].n && ptr < p->tgpus[t]; ptr++)
            if (!tk[ptr]) tk[g->slot[g->nslot++] = ptr] = 1;
          for (int z = 0; g->nslot < s[q].n && z < p->tgpus[t]; z++)
            if (!tk[z]) tk[g->slot[g->nslot++] = z] = 1;
          g->type = t;
        }
        rn->new_n[i] = g->nslot;
        for (int z = 0; z < g->nslot; z++)
          rn->new_alloc[i][z] = (uint8_t)(p->first_vnode[t] + g->slot[z] / gpn * gpn / rn->gpn);
        g->time[t] += rn->o->interval;
        p->cluster_time[t] += rn->o->interval;
      }
      free(keep);
      a = b;
    }
  }
  for (size_t k = 0; k < na; k++)
    if (chosen[k] < 0) {
      rn->new_n[active[k]] = 0;
      p->g[active[k]].type = -1;
      p->g[active[k]].nslot = 0;
    }
out:
  free(x);
  free(e);
  free(s);
  free(chosen);
  free(taken);
  return rc;
}

const struct stk__jpolicy stk__jpol_gavel = {
    .name = "gavel",
    .summary = "Gavel max-sum-throughput over GPU types (LP, GLPK interior point), fixed GPUs "
               "and batch; needs --gpu-types",
    .hetero = 1,
    .init = g_init,
    .fini = g_fini,
    .schedule = g_schedule,
};
