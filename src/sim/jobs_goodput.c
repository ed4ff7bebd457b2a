/* Pollux's goodput model (Qiao et al., OSDI'21): a job's step time is
 * predicted from its configuration by a seven-parameter model (compute
 * linear in the atomic batch, network by the slowest link with a
 * retrogression term per replica, overlapped by a gamma-norm), fitted to
 * the configurations the job has run at; statistical efficiency follows
 * from the gradient noise scale. The fit minimises the artifact's
 * objective (RMS log error of accumulation and step times plus its two
 * regularisers) over the same bounds and fixed parameters; the artifact
 * uses L-BFGS-B, here a bounded Nelder-Mead over log-scaled parameters,
 * which reaches the same minimum on these smooth seven-parameter fits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

#define NP 7
#define LOWER 1e-8

/* glibc's vector maths (libmvec): exp and log four at a time, for the fit's
 * objective on CPUs with AVX2, chosen at run time (a plain test, not an
 * ifunc: see EX_CLONES in jpol_sia_exact.c). Each lane is computed alone,
 * so a value does not depend on its neighbours; the last bits differ from
 * libm's. Elsewhere (no AVX2, not x86-64 glibc, -DSTK_NO_MVEC) the
 * objective is the scalar one below, with libm's exp and log. So a run's
 * last bits, and through the fit's search possibly its schedule, can
 * differ between a CPU with AVX2 and one without (all 28 Sia workloads
 * gave the same per-job results both ways when this was written:
 * docs/sim-sia.md). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && !defined(STK_NO_MVEC)
#define FIT_MVEC 1
typedef double v4df __attribute__((vector_size(32)));
__attribute__((target("avx2"))) v4df _ZGVdN4v_exp(v4df x);
__attribute__((target("avx2"))) v4df _ZGVdN4v_log(v4df x);

/* x[i] = exp(x[i]) (lg = 0) or log(x[i]) (lg = 1) for i < n, four at a
 * time: x has room for n rounded up to 4, and the lanes past n are set
 * to 1 first (no special case for libmvec to take slowly). */
__attribute__((target("avx2"))) static void vmath(double *x, int n, int lg) {
  for (int i = n; i % 4; i++) x[i] = 1;
  for (int i = 0; i < n; i += 4) {
    v4df v;
    memcpy(&v, x + i, sizeof v);
    v = lg ? _ZGVdN4v_log(v) : _ZGVdN4v_exp(v);
    memcpy(x + i, &v, sizeof v);
  }
}
#endif

static double net_time(const struct stk__perf *p, int nodes, int reps) {
  double a, b;
  if (nodes > 1) {
    a = p->an;
    b = p->bn;
  } else if (reps > 1) {
    a = p->ar;
    b = p->br;
  } else {
    a = b = 1e-8;
  }
  return a + b * fmax(reps - 2, 1e-8);
}

static double log_optim(const struct stk__perf *p, double accum, double net) {
  double g = p->gamma;
  return log(pow(accum, g) + pow(net, g)) / g;
}

/* The model's overlapped step time at atomic-batch compute time at, with
 * pow(net, gamma) given (pnet_g): log_optim's operations in its order. */
static double opt_time(const struct stk__perf *p, double at, double pnet_g) {
  double g = p->gamma;
  return exp(log(pow(at, g) + pnet_g) / g);
}

static double throughput_of(double at, double opt, int reps, int atomic, int accum) {
  double total = accum * at + opt;
  return (double)reps * atomic * (accum + 1) / total;
}

double stk__perf_throughput(const struct stk__perf *p, int nodes, int reps, int atomic, int accum) {
  double at = p->ac + p->bc * atomic;
  return throughput_of(at, opt_time(p, at, pow(net_time(p, nodes, reps), p->gamma)), reps, atomic,
                       accum);
}

/* A fit's rows, with their distinct batch sizes and network classes: the
 * compute time's pow and log depend only on the batch, the network's pow
 * only on the class (nodes > 1, else replicas > 1, and the replicas), so
 * each is taken once per point of the search and looked up per row. */
struct fitdata {
  int n;
  const int *nodes, *reps, *bsz;
  const double *accum, *step;         /* the rows */
  const double *log_accum, *log_step; /* the measurements' logs */
  int nb, nn;                         /* distinct batch sizes, network classes */
  const int *bi, *ni;                 /* each row's; NULL: none (out of memory) */
  const int *ub, *un_nodes, *un_reps; /* a batch size; a class's nodes, replicas */
  double *sa, *sl, *sp, *sn;          /* scratch: nb x 3, nn */
  double *sr; /* the vector objective's (objective_v): sl, sp hold nb + nn, sr n; else NULL */
  double lo[NP], hi[NP], fixed[NP];
  int isfixed[NP];
};

static void to_params(const struct fitdata *d, const double *u, struct stk__perf *p) {
  double v[NP];
  int k = 0;
  for (int i = 0; i < NP; i++) {
    if (d->isfixed[i]) {
      v[i] = d->fixed[i];
      continue;
    }
    double x = u[k++];
    if (i == 6) {
      v[i] = 1 + 9 / (1 + exp(-x)); /* gamma in [1, 10] */
    } else {
      v[i] = LOWER + exp(x);
    }
  }
  p->ac = v[0];
  p->bc = v[1];
  p->an = v[2];
  p->bn = v[3];
  p->ar = v[4];
  p->br = v[5];
  p->gamma = v[6];
}

/* The objective from its sums of squared log errors: RMS of each plus the
 * artifact's two regularisers. */
static double objective_end(const struct stk__perf *p, double e1, double e2, int n) {
  double err = sqrt(e1 / n) + sqrt(e2 / n);
  err += 1e-3 * (p->gamma - 1) * (p->gamma - 1);
  err += 1e-2 * ((p->bn / p->an) * (p->bn / p->an) + (p->br / p->ar) * (p->br / p->ar));
  return isfinite(err) ? err : 1e300;
}

int stk__fit_scalar;

#ifdef FIT_MVEC
/* The objective with its exps and logs four at a time: to_params's, the
 * batch sizes' log and sa^gamma, the network classes' pow(net, gamma) as
 * exp(gamma log net), and each row's log. The same formulas and sums in
 * the same order as objective's; only libmvec's last bits differ. */
static double objective_v(const struct fitdata *d, const double *u) {
  double e[NP + 1], v[NP], *sl = d->sl, *sp = d->sp, *r = d->sr;
  int k = 0;
  for (int i = 0; i < NP; i++)
    if (!d->isfixed[i]) e[k] = i == 6 ? -u[k] : u[k], k++;
  vmath(e, k, 0);
  k = 0;
  for (int i = 0; i < NP; i++) {
    if (d->isfixed[i]) {
      v[i] = d->fixed[i];
      continue;
    }
    v[i] = i == 6 ? 1 + 9 / (1 + e[k]) : LOWER + e[k];
    k++;
  }
  struct stk__perf p = {.ac = v[0], .bc = v[1], .an = v[2], .bn = v[3], .ar = v[4], .br = v[5],
                        .gamma = v[6]};
  double g = p.gamma, e1 = 0, e2 = 0;
  for (int b = 0; b < d->nb; b++) sl[b] = p.ac + p.bc * d->ub[b];
  for (int q = 0; q < d->nn; q++) sl[d->nb + q] = net_time(&p, d->un_nodes[q], d->un_reps[q]);
  vmath(sl, d->nb + d->nn, 1); /* the batches' logs, then the networks' */
  for (int b = 0; b < d->nb + d->nn; b++) sp[b] = g * sl[b];
  vmath(sp, d->nb + d->nn, 0);
  for (int i = 0; i < d->n; i++) r[i] = sp[d->bi[i]] + sp[d->nb + d->ni[i]];
  vmath(r, d->n, 1);
  for (int i = 0; i < d->n; i++) {
    double lo = r[i] / g;
    double r1 = sl[d->bi[i]] - d->log_accum[i];
    double r2 = lo - d->log_step[i];
    e1 += r1 * r1;
    e2 += r2 * r2;
  }
  return objective_end(&p, e1, e2, d->n);
}
#endif

static double objective(const struct fitdata *d, const double *u) {
#ifdef FIT_MVEC
  if (d->bi && d->sr) return objective_v(d, u);
#endif
  struct stk__perf p;
  to_params(d, u, &p);
  double g = p.gamma, e1 = 0, e2 = 0;
  if (!d->bi) { /* each row's terms at each point (where the tables could
                 * not be had): the tables' values up to rounding, slower */
    for (int i = 0; i < d->n; i++) {
      double pa = p.ac + p.bc * d->bsz[i];
      double lo = log_optim(&p, pa, net_time(&p, d->nodes[i], d->reps[i]));
      double r1 = log(pa) - log(d->accum[i]);
      double r2 = lo - log(d->step[i]);
      e1 += r1 * r1;
      e2 += r2 * r2;
    }
    return objective_end(&p, e1, e2, d->n);
  }
  for (int b = 0; b < d->nb; b++) { /* sa^g as exp(g log sa): the log is needed anyway */
    d->sa[b] = p.ac + p.bc * d->ub[b];
    d->sl[b] = log(d->sa[b]);
    d->sp[b] = exp(g * d->sl[b]);
  }
  for (int k = 0; k < d->nn; k++) d->sn[k] = pow(net_time(&p, d->un_nodes[k], d->un_reps[k]), g);
  for (int i = 0; i < d->n; i++) {
    double lo = log(d->sp[d->bi[i]] + d->sn[d->ni[i]]) / g;
    double r1 = d->sl[d->bi[i]] - d->log_accum[i];
    double r2 = lo - d->log_step[i];
    e1 += r1 * r1;
    e2 += r2 * r2;
  }
  return objective_end(&p, e1, e2, d->n);
}

static double inv_param(int i, double v) {
  if (i == 6) {
    double s = (v - 1) / 9;
    s = fmin(fmax(s, 1e-6), 1 - 1e-6);
    return log(s / (1 - s));
  }
  return log(fmax(v - LOWER, 1e-12));
}

void stk__perf_fit(struct stk__perf *p, int n, const int *nodes, const int *reps, const int *bsz,
                   const double *accum_time, const double *step_time) {
  struct fitdata d;
  memset(&d, 0, sizeof d);
  d.n = n;
  /* the logs of the measurements, the distinct batch sizes and network
   * classes: the same at every point of the search, taken once (64 rows
   * on the stack, more on the heap; without memory, at every point) */
  enum { NS = 64, ND = 8, NI = 5 }; /* ND: objective_v needs 7n + 9 <= 8n + 8 */
  double ds[NS * ND + 8];
  int is[NS * NI];
  double *dv = ds;
  int *iv = is;
  d.nodes = nodes;
  d.reps = reps;
  d.bsz = bsz;
  d.accum = accum_time;
  d.step = step_time;
  if (n > NS) {
    dv = malloc(sizeof(double) * ((size_t)n * ND + 8));
    iv = malloc(sizeof(int) * (size_t)n * NI);
  }
  if (dv && iv) {
    double *la = dv, *ls = dv + n;
    int *bi = iv, *ni = iv + n, *ub = iv + 2 * n, *unn = iv + 3 * n, *unr = iv + 4 * n;
    int nb = 0, nn = 0;
    for (int i = 0; i < n; i++) {
      la[i] = log(accum_time[i]);
      ls[i] = log(step_time[i]);
      int b = 0;
      while (b < nb && ub[b] != bsz[i]) b++;
      if (b == nb) ub[nb++] = bsz[i];
      bi[i] = b;
      int cls = nodes[i] > 1 ? 2 : reps[i] > 1, k = 0;
      while (k < nn && !((unn[k] > 1 ? 2 : unr[k] > 1) == cls && unr[k] == reps[i])) k++;
      if (k == nn) {
        unn[nn] = nodes[i];
        unr[nn++] = reps[i];
      }
      ni[i] = k;
    }
    d.log_accum = la;
    d.log_step = ls;
    d.nb = nb;
    d.nn = nn;
    d.bi = bi;
    d.ni = ni;
    d.ub = ub;
    d.un_nodes = unn;
    d.un_reps = unr;
    d.sa = dv + 2 * n;
    d.sl = d.sa + nb;
    d.sp = d.sl + nb;
    d.sn = d.sp + nb; /* nb, nn <= n: 2n + 3nb + nn <= 6n doubles */
#ifdef FIT_MVEC
    if (!stk__fit_scalar && __builtin_cpu_supports("avx2")) { /* sl, sp nb + nn, sr n, each rounded up to 4 */
      int w = (nb + nn + 3) & ~3;
      d.sl = d.sa;
      d.sp = d.sl + w;
      d.sr = d.sp + w;
      d.sa = d.sn = NULL;
    }
#endif
  }
  double init[NP] = {1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3};
  int one_bsz = 1, multi_node = 0, single_multi = 0, over2 = 0;
  double mean_acc = 0;
  for (int i = 0; i < n; i++) {
    if (bsz[i] != bsz[0]) one_bsz = 0;
    if (nodes[i] > 1) multi_node = 1;
    if (nodes[i] == 1 && reps[i] > 1) single_multi = 1;
    if (reps[i] > 2) over2 = 1;
    mean_acc += accum_time[i];
  }
  mean_acc /= n;
  if (one_bsz) {
    d.isfixed[0] = 1;
    d.fixed[0] = mean_acc / 2;
  }
  if (!multi_node) {
    d.isfixed[2] = d.isfixed[3] = 1;
    d.fixed[2] = d.fixed[3] = LOWER;
  }
  if (!single_multi) {
    d.isfixed[4] = d.isfixed[5] = 1;
    d.fixed[4] = d.fixed[5] = LOWER;
  }
  if (!over2) {
    d.isfixed[3] = d.isfixed[5] = 1;
    d.fixed[3] = d.fixed[5] = LOWER;
  }
  int m = 0;
  double x[NP + 1][NP], f[NP + 1];
  for (int i = 0; i < NP; i++)
    if (!d.isfixed[i]) x[0][m++] = inv_param(i, init[i]);
  if (m > 0) {
    /* Nelder-Mead */
    for (int v = 1; v <= m; v++) {
      memcpy(x[v], x[0], sizeof x[0]);
      x[v][v - 1] += 1.0;
    }
    for (int v = 0; v <= m; v++) f[v] = objective(&d, x[v]);
    for (int it = 0; it < 400 * m; it++) {
      /* order */
      for (int a = 1; a <= m; a++)
        for (int b = a; b > 0 && f[b] < f[b - 1]; b--) {
          double t = f[b];
          f[b] = f[b - 1];
          f[b - 1] = t;
          double tx[NP];
          memcpy(tx, x[b], sizeof tx);
          memcpy(x[b], x[b - 1], sizeof tx);
          memcpy(x[b - 1], tx, sizeof tx);
        }
      if (f[m] - f[0] < 1e-10 * (fabs(f[0]) + 1e-12) && it > 20) break;
      double c[NP] = {0}, xr[NP], xe[NP], xc[NP];
      for (int v = 0; v < m; v++)
        for (int k = 0; k < m; k++) c[k] += x[v][k] / m;
      for (int k = 0; k < m; k++) xr[k] = c[k] + (c[k] - x[m][k]);
      double fr = objective(&d, xr);
      if (fr < f[0]) {
        for (int k = 0; k < m; k++) xe[k] = c[k] + 2 * (c[k] - x[m][k]);
        double fe = objective(&d, xe);
        if (fe < fr) {
          memcpy(x[m], xe, sizeof xe);
          f[m] = fe;
        } else {
          memcpy(x[m], xr, sizeof xr);
          f[m] = fr;
        }
      } else if (fr < f[m - 1]) {
        memcpy(x[m], xr, sizeof xr);
        f[m] = fr;
      } else {
        for (int k = 0; k < m; k++) xc[k] = c[k] + 0.5 * (x[m][k] - c[k]);
        double fc = objective(&d, xc);
        if (fc < f[m]) {
          memcpy(x[m], xc, sizeof xc);
          f[m] = fc;
        } else {
          for (int v = 1; v <= m; v++) {
            for (int k = 0; k < m; k++) x[v][k] = x[0][k] + 0.5 * (x[v][k] - x[0][k]);
            f[v] = objective(&d, x[v]);
          }
        }
      }
    }
    int best = 0;
    for (int v = 1; v <= m; v++)
      if (f[v] < f[best]) best = v;
    to_params(&d, x[best], p);
  } else {
    to_params(&d, x[0], p);
  }
  if (!multi_node) {
    p->an = fmax(p->an, p->ar * 1.1);
    p->bn = fmax(p->bn, p->br * 1.1);
  }
  if (dv != ds) free(dv); /* NULL or the heap's */
  if (iv != is) free(iv);
}

static double efficiency(double sqr, double var, int init_bsz, double bsz) {
  double scale = bsz / init_bsz;
  double denom = var / scale + sqr;
  double gain = denom > 0 ? (var + sqr) / denom : 1.0;
  return gain / scale;
}

/* The batch sizes the goodput search tries (50 totals spaced evenly in log
 * between the smallest and the application's largest, each split into an
 * atomic local batch and accumulation steps) depend only on the
 * application's limits and the replica count, not on the job's model.
 * Runs of equal splits are kept once (equal splits give equal goodput, and
 * the search keeps the first of equals), and each atomic batch's step
 * time is computed once (it does not depend on the accumulation). */
#define CAND_K 50
#define CAND_SLOTS 256

struct cand {
  int key[5], used;
  int n, nu;                   /* splits; distinct atomic batches among them */
  int at[CAND_K], acc[CAND_K]; /* atomic batch, accumulation steps */
  int ui[CAND_K];              /* the split's atomic batch in uat */
  int uat[CAND_K];
  unsigned char uok[CAND_K]; /* that atomic batch within the local limits */
};

static void cand_make(struct cand *c, int init_bsz, int replicas, int max_bsz, int min_local,
                      int max_local) {
  c->n = c->nu = 0;
  const double eps = 1e-8;
  double lo = fmax(init_bsz, (double)min_local * replicas);
  for (int k = 0; k < CAND_K; k++) {
    double b = lo * pow((double)max_bsz / lo, k / 49.0);
    double local = b / replicas;
    int acc = (int)ceil(local / max_local - eps) - 1;
    if (replicas == 1 && local > init_bsz + eps && acc < 1) acc = 1;
    if (acc < 0) acc = 0;
    int at = (int)ceil(local / (acc + 1) - eps);
    if (c->n && c->at[c->n - 1] == at && c->acc[c->n - 1] == acc) continue;
    int u = 0;
    while (u < c->nu && c->uat[u] != at) u++;
    if (u == c->nu) {
      c->uat[u] = at;
      c->uok[u] = at >= min_local && at <= max_local;
      c->nu++;
    }
    c->at[c->n] = at;
    c->acc[c->n] = acc;
    c->ui[c->n] = u;
    c->n++;
  }
}

/* A run's table of them (jobs_impl.h), open-addressed by key, emptied when
 * three quarters full. */
#define XPUT_SLOTS 4096

struct xput {
  int used, cls, replicas, key[5];
  struct stk__perf perf;
  double att[CAND_K], opt[CAND_K];
};

_Static_assert(sizeof(struct stk__perf) == 7 * sizeof(uint64_t), "xput_find hashes 7 words");

struct stk__gpcache {
  struct cand slot[CAND_SLOTS];
  int used;
  struct xput xput[XPUT_SLOTS]; /* xput_find */
  uint64_t xhits, xmisses;
};

static const struct cand *cand_find(struct stk__gpcache *gc, const int key[5]) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 5; i++) h = (h ^ (uint32_t)key[i]) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  size_t s = h & (CAND_SLOTS - 1);
  for (; gc->slot[s].used; s = (s + 1) & (CAND_SLOTS - 1))
    if (!memcmp(gc->slot[s].key, key, sizeof gc->slot[s].key)) return &gc->slot[s];
  if (4 * (gc->used + 1) > 3 * CAND_SLOTS) {
    for (int i = 0; i < CAND_SLOTS; i++) gc->slot[i].used = 0;
    gc->used = 0;
    s = h & (CAND_SLOTS - 1);
  }
  struct cand *c = &gc->slot[s];
  memcpy(c->key, key, sizeof c->key);
  c->used = 1;
  gc->used++;
  cand_make(c, key[0], key[1], key[2], key[3], key[4]);
  return c;
}

void stk__gpcache_free(struct stk__gpcache *gc) { free(gc); }

/* The step time of each of the splits' atomic batches (att: compute,
 * opt: the overlapped step) at model p, nodes and replicas: the pow, log
 * and exp of the search, the same for every round until the model is
 * refitted. */
static void xput_fill(const struct cand *c, const struct stk__perf *p, int nodes, int replicas,
                      double *att, double *opt) {
  double pn = pow(net_time(p, nodes, replicas), p->gamma); /* the same at every split */
  for (int u = 0; u < c->nu; u++)
    if (c->uok[u]) {
      att[u] = p->ac + p->bc * c->uat[u];
      opt[u] = opt_time(p, att[u], pn);
    }
}

static double search(const struct cand *c, const double *att, const double *opt, double sqr,
                     double var, int init_bsz, int replicas, int *atomic, int *accum) {
  double best = 0;
  int ba = 0, bc = 0, found = 0;
  for (int k = 0; k < c->n; k++) {
    int at = c->at[k], acc = c->acc[k], u = c->ui[k];
    double g = 0;
    if (c->uok[u]) {
      double bs = (double)replicas * at * (acc + 1);
      g = throughput_of(att[u], opt[u], replicas, at, acc) * efficiency(sqr, var, init_bsz, bs);
    }
    if (!found || g > best) {
      best = g;
      ba = at;
      bc = acc;
      found = 1;
    }
  }
  if (atomic) *atomic = ba;
  if (accum) *accum = bc;
  return best;
}

double stk__goodput_opt(const struct stk__perf *p, double sqr, double var, int init_bsz,
                        int nodes, int replicas, int max_bsz, int min_local, int max_local,
                        int *atomic, int *accum) {
  struct cand c;
  double att[CAND_K], opt[CAND_K];
  cand_make(&c, init_bsz, replicas, max_bsz, min_local, max_local);
  xput_fill(&c, p, nodes, replicas, att, opt);
  return search(&c, att, opt, sqr, var, init_bsz, replicas, atomic, accum);
}

/* A run's step times by (model, network class, replicas, batch sizes):
 * a job's goodputs are searched every round with new gradient
 * statistics, but its model changes only when it is refitted, so the
 * step times are looked up (compared bit for bit) rather than taken
 * again. Direct-mapped; a collision replaces the slot. */
static const struct xput *xput_find(struct stk__gpcache *gc, const struct cand *c,
                                    const struct stk__perf *p, int nodes, int replicas) {
  int cls = nodes > 1 ? 2 : replicas > 1; /* all net_time reads of nodes */
  uint64_t h = 1469598103934665603ull, w[7];
  memcpy(w, p, sizeof w); /* the model's seven doubles, a word each */
  for (int i = 0; i < 7; i++) h = (h ^ w[i] ^ (w[i] >> 29)) * 0x9e3779b97f4a7c15ull;
  h = (h ^ (uint32_t)cls) * 1099511628211ull;
  h = (h ^ (uint32_t)replicas) * 1099511628211ull;
  for (int i = 0; i < 5; i++) h = (h ^ (uint32_t)c->key[i]) * 1099511628211ull;
  h ^= h >> 31;
  struct xput *x = &gc->xput[h & (XPUT_SLOTS - 1)];
  if (x->used && x->cls == cls && x->replicas == replicas &&
      !memcmp(x->key, c->key, sizeof x->key) && !memcmp(&x->perf, p, sizeof *p)) {
    gc->xhits++;
    return x;
  }
  x->used = 1;
  x->cls = cls;
  x->replicas = replicas;
  memcpy(x->key, c->key, sizeof x->key);
  x->perf = *p;
  xput_fill(c, p, nodes, replicas, x->att, x->opt);
  gc->xmisses++;
  return x;
}

double stk__goodput_opt_c(struct stk__gpcache **gc, const struct stk__perf *p, double sqr,
                          double var, int init_bsz, int nodes, int replicas, int max_bsz,
                          int min_local, int max_local, int *atomic, int *accum) {
  if (!*gc) *gc = calloc(1, sizeof **gc);
  if (!*gc) /* out of memory: made for this call */
    return stk__goodput_opt(p, sqr, var, init_bsz, nodes, replicas, max_bsz, min_local,
                            max_local, atomic, accum);
  int key[5] = {init_bsz, replicas, max_bsz, min_local, max_local};
  const struct cand *c = cand_find(*gc, key);
  const struct xput *x = xput_find(*gc, c, p, nodes, replicas);
  return search(c, x->att, x->opt, sqr, var, init_bsz, replicas, atomic, accum);
}

void stk__gpcache_counts(const struct stk__gpcache *gc, uint64_t *hits, uint64_t *misses) {
  *hits = gc ? gc->xhits : 0;
  *misses = gc ? gc->xmisses : 0;
}
