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
 * (pymoo); here a deterministic best-improvement local search from the
 * current allocation. Its moves: grow a job by g free GPUs; grow it, or
 * rebuild it from any start node, along a path that takes free GPUs first
 * and then single GPUs from the largest jobs (every prefix of the path is
 * a candidate, so a restart paid once can buy many GPUs, and a job can
 * leave a node shared with a distributed job); and move one GPU between
 * two jobs on a node. It stops when no move improves the objective. The
 * GPUs it may use are those the run's resource model has free with every
 * placement released; the engine has the model hold what it chose. */
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
  double *cur; /* scratch: terms while a path is tried */
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
  free(p->cur);
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

struct path {
  size_t k;
  int start, g;
  uint8_t node[256];
  int vict[256];
};

/* One GPU for q: a free one on its nodes, a free one elsewhere (while
 * free GPUs are left), else one from the largest job (two GPUs or more)
 * on its nodes, then on other nodes; at `force` only, when >= 0. */
static int next_gpu(struct stk__jrun *rn, struct prun *p, size_t na, size_t k, int force,
                    int free_left, int *vict, double *d) {
  int nodes = rn->nodes;
  struct pjob *q = &p->pj[k];
  *vict = -1;
  for (int n = 0; n < nodes; n++)
    if ((force < 0 ? q->cnt[n] > 0 : n == force) && add_ok(p, q, n, nodes)) return n;
  if (free_left > 0) {
    int pick = -1;
    for (int n = 0; n < nodes; n++)
      if ((force < 0 || n == force) && add_ok(p, q, n, nodes) &&
          (pick < 0 || p->freeg[n] > p->freeg[pick]))
        pick = n;
    if (pick >= 0) return pick;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int n = 0; n < nodes; n++) {
      if (force >= 0 ? n != force : (pass == 0) != (q->cnt[n] > 0)) continue;
      int v = -1;
      for (size_t kk = 0; kk < na; kk++) {
        struct pjob *r = &p->pj[kk];
        if (kk == k || !r->cnt[n] || r->reps < 2) continue;
        if (v < 0 || r->reps > p->pj[v].reps) v = (int)kk;
      }
      if (v < 0) continue;
      struct pjob *r = &p->pj[v];
      apply(p, r, n, -1, nodes);
      if (add_ok(p, q, n, nodes)) {
        double nt = term_of(rn, p, r);
        *d += nt - p->cur[v];
        p->cur[v] = nt;
        *vict = v;
        return n;
      }
      apply(p, r, n, +1, nodes);
    }
  return -1;
}

/* Try growing job k (start < 0) or rebuilding it from node start; keep
 * the best prefix in *bp when it beats *best. Leaves the state as found. */
static int try_path(struct stk__jrun *rn, struct prun *p, size_t na, size_t k, int start,
                    int free_left, double *best, struct path *bp) {
  int nodes = rn->nodes, found = 0;
  struct pjob *q = &p->pj[k];
  int orig[MAXN];
  memcpy(orig, q->cnt, sizeof orig);
  if (start >= 0) {
    if (!q->reps) return 0; /* growing covers a job with no GPUs */
    for (int n = 0; n < nodes; n++)
      while (q->cnt[n]) {
        apply(p, q, n, -1, nodes);
        free_left++;
      }
  }
  struct path cur;
  cur.k = k;
  cur.start = start;
  cur.g = 0;
  double d = 0;
  int free_used = 0;
  while (cur.g < 256 && q->reps < q->maxrep) {
    int v;
    int n = next_gpu(rn, p, na, k, cur.g == 0 ? start : -1, free_left - free_used, &v, &d);
    if (n < 0) break;
    if (v < 0) free_used++;
    apply(p, q, n, +1, nodes);
    cur.node[cur.g] = (uint8_t)n;
    cur.vict[cur.g] = v;
    cur.g++;
    double dq = term_of(rn, p, q) - q->term;
    if (d + dq < *best) {
      *best = d + dq;
      *bp = cur;
      found = 1;
    }
  }
  while (cur.g > 0) {
    cur.g--;
    apply(p, q, cur.node[cur.g], -1, nodes);
    int v = cur.vict[cur.g];
    if (v >= 0) {
      apply(p, &p->pj[v], cur.node[cur.g], +1, nodes);
      p->cur[v] = p->pj[v].term;
    }
  }
  for (int n = 0; n < nodes; n++)
    while (q->cnt[n] < orig[n]) apply(p, q, n, +1, nodes);
  return found;
}

/* Apply a path found by try_path; returns the free GPUs it used (net). */
static int commit_path(struct stk__jrun *rn, struct prun *p, const struct path *bp) {
  int nodes = rn->nodes, used = 0;
  struct pjob *q = &p->pj[bp->k];
  if (bp->start >= 0)
    for (int n = 0; n < nodes; n++)
      while (q->cnt[n]) {
        apply(p, q, n, -1, nodes);
        used--;
      }
  for (int g = 0; g < bp->g; g++) {
    if (bp->vict[g] >= 0)
      apply(p, &p->pj[bp->vict[g]], bp->node[g], -1, nodes);
    else
      used++;
    apply(p, q, bp->node[g], +1, nodes);
  }
  return used;
}

/* Best-improvement local search from the current allocation; returns the
 * objective (sum of inverse scaled speedups, lower is better). */
static double search(struct stk__jrun *rn, struct prun *p, size_t na) {
  int nodes = rn->nodes;
  memset(p->ndist, 0, sizeof p->ndist);
  for (int n = 0; n < nodes; n++) p->freeg[n] = rn->res->free_gpus[n]; /* all released */
  /* the current allocation, repaired in priority order */
  for (size_t k = 0; k < na; k++) {
    struct pjob *q = &p->pj[k];
    int want[MAXN];
    memcpy(want, q->base, sizeof want);
    memset(q->cnt, 0, sizeof q->cnt);
    q->nn = q->reps = 0;
    for (int n = 0; n < nodes; n++)
      for (int c = 0; c < want[n]; c++)
        if (add_ok(p, q, n, nodes)) apply(p, q, n, +1, nodes);
  }
  double total = 0;
  for (size_t k = 0; k < na; k++) {
    p->pj[k].term = p->cur[k] = term_of(rn, p, &p->pj[k]);
    total += p->pj[k].term;
  }
  int usable_left = rn->usable;
  for (size_t k = 0; k < na; k++) usable_left -= p->pj[k].reps;
  for (int iter = 0; iter < 4 * rn->gpus + 64; iter++) {
    double best = -1e-12;
    int kind = 0, bn = -1;
    size_t bj = 0, bk = 0;
    struct path bp;
    bp.k = 0;
    bp.g = 0;
    bp.start = -1;
    /* adds: g GPUs at once (restart cost is paid once, so growing by
     * many may pay where growing by one does not), on the job's own
     * nodes first, then on the nodes with the most free GPUs */
    int bg = 0;
    uint8_t path[256], bpath[256];
    if (usable_left > 0)
      for (size_t k = 0; k < na; k++) {
        struct pjob *q = &p->pj[k];
        int g = 0;
        while (g < usable_left && g < 256) {
          int pick = -1;
          for (int n = 0; n < nodes; n++)
            if (q->cnt[n] && add_ok(p, q, n, nodes)) {
              pick = n;
              break;
            }
          if (pick < 0)
            for (int n = 0; n < nodes; n++)
              if (add_ok(p, q, n, nodes) && (pick < 0 || p->freeg[n] > p->freeg[pick])) pick = n;
          if (pick < 0) break;
          apply(p, q, pick, +1, nodes);
          path[g++] = (uint8_t)pick;
          double d = term_of(rn, p, q) - q->term;
          if (d < best) {
            best = d;
            kind = 1;
            bj = k;
            bg = g;
            memcpy(bpath, path, (size_t)g);
          }
        }
        while (g > 0) apply(p, q, path[--g], -1, nodes);
      }
    /* grow a job, or rebuild it from a start node, by taking GPUs */
    for (size_t k = 0; k < na; k++)
      for (int start = -1; start < nodes; start++)
        if (try_path(rn, p, na, k, start, usable_left, &best, &bp)) kind = 3;
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
      r->term = p->cur[bk] = term_of(rn, p, r);
      total += r->term;
      usable_left++;
    }
    if (kind == 3) {
      struct pjob *q = &p->pj[bp.k];
      usable_left -= commit_path(rn, p, &bp);
      for (int g = 0; g < bp.g; g++)
        if (bp.vict[g] >= 0) {
          struct pjob *r = &p->pj[bp.vict[g]];
          total -= r->term;
          r->term = p->cur[bp.vict[g]] = term_of(rn, p, r);
          total += r->term;
        }
      total -= q->term;
      q->term = p->cur[bp.k] = term_of(rn, p, q);
      total += q->term;
      continue;
    }
    struct pjob *q = &p->pj[bj];
    if (kind == 1) {
      for (int g = 0; g < bg; g++) apply(p, q, bpath[g], +1, nodes);
      usable_left -= bg;
    } else {
      apply(p, q, bn, +1, nodes);
      usable_left--;
    }
    total -= q->term;
    q->term = p->cur[bj] = term_of(rn, p, q);
    total += q->term;
  }
  return total;
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
    free(p->cur);
    p->cur = malloc(sizeof(double) * p->cap);
    if (!p->pj || !p->memo || !p->cur) return STK_ENOMEM;
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
  for (int n = 0; n < nodes; n++) p->freeg[n] = rn->res->free_gpus[n]; /* all released */
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
  search(rn, p, na);
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
