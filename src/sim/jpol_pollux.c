/* Pollux (Qiao et al., OSDI'21): elastic, goodput-driven. Each job's
 * speedup at (nodes, replicas) is its best predicted goodput there (fitted
 * throughput model times statistical efficiency, batch size chosen per
 * configuration) over its goodput at the fair share; a job that has not
 * run yet counts replicas over the fair share. The allocation maximises
 * the artifact's objective: the power mean with p = -1 (harmonic) of the
 * speedups scaled to one node's share, where a job whose allocation
 * changes has its speedup cut by its restart cost (age less the time lost
 * to restarts, over age plus one restart). Constraints as the artifact's
 * repair step: GPUs per node, at most one distributed job per node, at
 * most 16 nodes and max_replicas per job (twice the most replicas it has
 * been profiled at; ncf stays at one). The artifact searches with NSGA-II
 * (pymoo); here a best-improvement local search from the current
 * allocation adds GPUs and moves single GPUs between jobs until no move
 * improves the objective, which is deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

#define MAXN STK__JOBS_MAX_NODES
#define MAXR 64
#define EPS_S 1e-3

struct pjob {
  size_t i;
  int maxrep, base_nn;
  double factor; /* restart penalty multiplier */
  double *memo;  /* speedup by (nodes, replicas), -1 unknown */
  double base_good;
  int cnt[MAXN];
  int base[MAXN];
  int nn, reps;
  double term;
};

struct prun {
  struct pjob *pj;
  double *memo;
  size_t cap;
  int ndist[MAXN];
  int freeg[MAXN];
  int fair;
};

static int p_init(struct stk__jrun *rn) {
  struct prun *p = calloc(1, sizeof *p);
  if (!p) return STK_ENOMEM;
  rn->pol = p;
  return 0;
}

static void p_fini(struct stk__jrun *rn) {
  struct prun *p = rn->pol;
  if (!p) return;
  free(p->pj);
  free(p->memo);
  free(p);
  rn->pol = NULL;
}

static double speedup(struct stk__jrun *rn, struct prun *p, struct pjob *q, int nodes, int reps) {
  if (reps == 0) return 0;
  int nd = nodes > 16 ? 16 : nodes;
  double *m = &q->memo[nd * (MAXR + 1) + reps];
  if (*m >= 0) return *m;
  struct stk__jstate *j = &rn->js[q->i];
  const struct stk__japp *a = j->spec->app;
  double s;
  if (!j->have_perf) {
    s = (double)reps / p->fair;
  } else {
    double g = stk__goodput_opt(&j->perf, j->sqr, j->var, a->init_bsz, nodes, reps, a->max_bsz,
                                a->min_local, a->max_local, NULL, NULL);
    s = q->base_good > 0 ? g / q->base_good : 0;
  }
  *m = s;
  return s;
}

static int changed(const struct pjob *q, int nodes) {
  for (int n = 0; n < nodes; n++)
    if (q->cnt[n] != q->base[n]) return 1;
  return 0;
}

static double term_of(struct stk__jrun *rn, struct prun *p, struct pjob *q) {
  double x = speedup(rn, p, q, q->nn, q->reps) / rn->gpn;
  if (changed(q, rn->nodes)) x *= q->factor;
  return 1 / (x + EPS_S);
}

/* Add (d = +1) or remove (d = -1) one GPU of job q on node n, keeping the
 * distributed-job counts. */
static void apply(struct prun *p, struct pjob *q, int n, int d, int nodes) {
  int was_dist = q->nn > 1;
  if (was_dist)
    for (int k = 0; k < nodes; k++)
      if (q->cnt[k]) p->ndist[k]--;
  if (d > 0 && q->cnt[n] == 0) q->nn++;
  q->cnt[n] += d;
  if (d < 0 && q->cnt[n] == 0) q->nn--;
  q->reps += d;
  p->freeg[n] -= d;
  if (q->nn > 1)
    for (int k = 0; k < nodes; k++)
      if (q->cnt[k]) p->ndist[k]++;
}

/* Would adding one GPU of q on n break the one-distributed-job rule? */
static int add_ok(const struct prun *p, const struct pjob *q, int n, int nodes) {
  if (p->freeg[n] <= 0 || q->reps + 1 > q->maxrep) return 0;
  if (q->cnt[n] == 0 && q->nn >= 16) return 0;
  int will_nn = q->nn + (q->cnt[n] == 0);
  if (will_nn <= 1) return 1;
  for (int k = 0; k < nodes; k++) {
    if (!q->cnt[k] && k != n) continue;
    int others = p->ndist[k] - (q->nn > 1 && q->cnt[k] ? 1 : 0);
    if (others > 0) return 0;
  }
  return 1;
}

static int p_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  struct prun *p = rn->pol;
  int nodes = rn->nodes;
  if (na > p->cap) {
    free(p->pj);
    free(p->memo);
    p->cap = na * 2;
    p->pj = calloc(p->cap, sizeof *p->pj);
    p->memo = malloc(sizeof(double) * p->cap * 17 * (MAXR + 1));
    if (!p->pj || !p->memo) return STK_ENOMEM;
  }
  /* order: least attained service, then earliest arrival */
  for (size_t k = 0; k < na; k++) p->pj[k].i = active[k];
  for (size_t k = 1; k < na; k++) {
    struct pjob v = p->pj[k];
    size_t m = k;
    while (m > 0) {
      const struct stk__jstate *a = &rn->js[p->pj[m - 1].i], *b = &rn->js[v.i];
      int gt = a->attained != b->attained ? a->attained > b->attained
                                          : a->spec->submit > b->spec->submit;
      if (!gt) break;
      p->pj[m] = p->pj[m - 1];
      m--;
    }
    p->pj[m] = v;
  }
  int fair = (int)ceil((double)rn->gpus / (double)na);
  if (fair < 1) fair = 1;
  p->fair = fair;
  memset(p->ndist, 0, sizeof p->ndist);
  for (int n = 0; n < nodes; n++) p->freeg[n] = rn->gpn;
  for (size_t k = 0; k < na; k++) {
    struct pjob *q = &p->pj[k];
    struct stk__jstate *j = &rn->js[q->i];
    const struct stk__japp *a = j->spec->app;
    q->memo = &p->memo[k * 17 * (MAXR + 1)];
    for (int x = 0; x < 17 * (MAXR + 1); x++) q->memo[x] = -1;
    int mr = STK__MAX(2 * j->max_prof_rep, 1);
    mr = STK__MIN(mr, MAXR);
    mr = STK__MIN(mr, a->max_bsz / a->min_local);
    if (!strcmp(a->name, "ncf")) mr = 1;
    q->maxrep = STK__MIN(mr, rn->usable);
    double age = rn->now - j->spec->submit;
    int rs = j->restarts < 0 ? 0 : j->restarts;
    q->factor = fmax(age - rs * 30.0, 0.0) / (age + 30.0);
    q->base_good = j->have_perf ? stk__goodput_opt(&j->perf, j->sqr, j->var, a->init_bsz, 1, fair,
                                                   a->max_bsz, a->min_local, a->max_local, NULL,
                                                   NULL)
                                : 1;
    memset(q->cnt, 0, sizeof q->cnt);
    q->nn = q->reps = 0;
    for (int g = 0; g < rn->new_n[q->i]; g++) q->cnt[rn->new_alloc[q->i][g]]++;
    memcpy(q->base, q->cnt, sizeof q->cnt);
  }
  /* the current allocation, repaired in priority order */
  for (size_t k = 0; k < na; k++) {
    struct pjob *q = &p->pj[k];
    int want[MAXN];
    memcpy(want, q->cnt, sizeof want);
    memset(q->cnt, 0, sizeof q->cnt);
    for (int n = 0; n < nodes; n++)
      for (int c = 0; c < want[n]; c++)
        if (add_ok(p, q, n, nodes)) apply(p, q, n, +1, nodes);
  }
  double total = 0;
  for (size_t k = 0; k < na; k++) {
    p->pj[k].term = term_of(rn, p, &p->pj[k]);
    total += p->pj[k].term;
  }
  int usable_left = rn->usable;
  for (size_t k = 0; k < na; k++) usable_left -= p->pj[k].reps;
  for (int iter = 0; iter < 4 * rn->gpus + 64; iter++) {
    double best = -1e-12;
    int kind = 0, bn = -1;
    size_t bj = 0, bk = 0;
    /* adds */
    if (usable_left > 0)
      for (size_t k = 0; k < na; k++) {
        struct pjob *q = &p->pj[k];
        for (int n = 0; n < nodes; n++) {
          if (!add_ok(p, q, n, nodes)) continue;
          apply(p, q, n, +1, nodes);
          double d = term_of(rn, p, q) - q->term;
          apply(p, q, n, -1, nodes);
          if (d < best) {
            best = d;
            kind = 1;
            bj = k;
            bn = n;
          }
        }
      }
    /* single-GPU moves from job kk to job k on the same node */
    for (int n = 0; n < nodes; n++)
      for (size_t kk = 0; kk < na; kk++) {
        struct pjob *r = &p->pj[kk];
        if (!r->cnt[n]) continue;
        apply(p, r, n, -1, nodes);
        double dr = term_of(rn, p, r) - r->term;
        for (size_t k = 0; k < na; k++) {
          if (k == kk) continue;
          struct pjob *q = &p->pj[k];
          if (!add_ok(p, q, n, nodes)) continue;
          apply(p, q, n, +1, nodes);
          double d = dr + term_of(rn, p, q) - q->term;
          apply(p, q, n, -1, nodes);
          if (d < best) {
            best = d;
            kind = 2;
            bj = k;
            bk = kk;
            bn = n;
          }
        }
        apply(p, r, n, +1, nodes);
      }
    if (!kind) break;
    if (kind == 2) {
      struct pjob *r = &p->pj[bk];
      apply(p, r, bn, -1, nodes);
      total -= r->term;
      r->term = term_of(rn, p, r);
      total += r->term;
      usable_left++;
    }
    struct pjob *q = &p->pj[bj];
    apply(p, q, bn, +1, nodes);
    total -= q->term;
    q->term = term_of(rn, p, q);
    total += q->term;
    usable_left--;
  }
  for (size_t k = 0; k < na; k++) {
    struct pjob *q = &p->pj[k];
    int c = 0;
    for (int n = 0; n < nodes; n++)
      for (int g = 0; g < q->cnt[n]; g++) rn->new_alloc[q->i][c++] = (uint8_t)n;
    rn->new_n[q->i] = c;
  }
  return 0;
}

const struct stk__jpolicy stk__jpol_pollux = {
    .name = "pollux",
    .summary = "Pollux: elastic, goodput-driven (fitted throughput x statistical efficiency), "
               "harmonic-mean speedup with restart penalty",
    .elastic = 1,
    .init = p_init,
    .fini = p_fini,
    .schedule = p_schedule,
};
